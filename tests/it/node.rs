//! The member Pods for real (issue 31): a kubelet, containerd and runc run the
//! agent's containers as Kubernetes runs them, and the field reports are replayed
//! in real Pods. The node is `common::node` (one per machine, these tests are
//! serialised by its lock); the Pods and the operator's part are
//! `node_support` (the test stands in for cozystack/etcd-operator v0.5: its
//! records, its Pods plus the agent's containers of
//! `deploy/overlays/example/pod.yaml`, its way of forming a cluster).
//!
//! Each scenario fails when the guard is taken out of the Pods:
//! `NODE_TEST_WITHOUT_GUARD=1 cargo test --test it node::` builds the Pods as the
//! operator builds them today (no sidecar, no preflight, readiness on etcd's
//! `/health`), and every scenario below then fails on its first guard assertion.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use serde_json::json;

use crate::common::node::{
    container_id, container_status, is_ready, pod_summary, Node, AGENT_IMAGE,
};
use crate::common::{patience, EtcdVersion, HttpConn};
use crate::node_support::*;

/// The member Pods guarded by the webhook alone (issue 32), on this node: the
/// stand-in's Pods are made without the agent whatever
/// `NODE_TEST_WITHOUT_GUARD` says, and each scenario fails on its first
/// assertion when the webhook does not guard them. Not `webhook`: a filter of
/// `webhook::` (the API-server-only tests) must not start a node.
#[path = "node_webhook.rs"]
mod by_label;

/// Prints how long the scenario took (the closing figures of issue 31).
struct Timer(&'static str, Instant);

impl Drop for Timer {
    fn drop(&mut self) {
        eprintln!("scenario {}: {:.1?}", self.0, self.1.elapsed());
    }
}

fn timer(name: &'static str) -> Timer {
    Timer(name, Instant::now())
}

/// GET `path` on the agent sidecar of member `name` (its HTTP port).
fn agent_get(name: &str, path: &str) -> Result<(u16, String), String> {
    let mut conn = HttpConn::new(
        &format!("http://{}:9466", ip_of(name)),
        Duration::from_secs(5),
    )?;
    let resp = conn.get(path)?;
    Ok((
        resp.status,
        String::from_utf8_lossy(&resp.body).into_owned(),
    ))
}

// ---------------------------------------------------------------------------
// The harness itself.

/// The node runs a Pod of the agent's image to completion, its log and
/// termination message are read back, and nothing of it is left on the host.
#[tokio::test(flavor = "multi_thread")]
async fn the_node_runs_a_pod_and_leaves_nothing_behind() {
    let _t = timer("harness smoke");
    let run_dir;
    {
        let node = Node::start().await;
        run_dir = node.run_dir().to_owned();
        node.create_namespace("smoke").await;
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "version"},
            "spec": {
                "restartPolicy": "Never",
                "hostNetwork": true,
                "securityContext": {"runAsUser": 65532, "runAsGroup": 65532, "runAsNonRoot": true},
                "containers": [{
                    "name": "agent",
                    "image": AGENT_IMAGE,
                    "command": ["/usr/local/bin/etcd-member-agent", "--version"],
                    "terminationMessagePolicy": "FallbackToLogsOnError",
                }],
            },
        }))
        .unwrap();
        node.create_pod("smoke", pod).await;
        let code = node
            .wait_container("smoke", "version", "agent", "terminated", |s| {
                Some(s.state.as_ref()?.terminated.as_ref()?.exit_code)
            })
            .await;
        assert_eq!(code, 0);
        let logs = node.logs("smoke", "version", "agent").await;
        assert!(logs.contains("etcd-member-agent"), "{logs}");
        let images = node.containerd().ctr(&["images", "ls", "-q"]);
        assert!(images.contains(AGENT_IMAGE), "{images}");
        eprintln!("node start time: {:.1?}", node.start_time());
    }
    assert!(!run_dir.exists(), "{} left behind", run_dir.display());
    let traces = crate::common::node::host::node_traces();
    assert!(traces.is_empty(), "left on the host: {traces:?}");
}

/// One node per machine: while the lock is held, another taker (another
/// thread here, another test process elsewhere) waits, and a bounded wait that
/// runs out fails naming the holder.
#[test]
fn the_node_lock_is_exclusive_and_a_bounded_wait_fails_naming_the_holder() {
    use crate::common::node::lock::{lock_wait, NodeLock};
    let held = NodeLock::acquire("the holder", lock_wait());
    let waiter = std::thread::spawn(|| NodeLock::acquire("the waiter", Duration::from_millis(300)));
    let Err(err) = waiter.join() else {
        panic!("a second lock was taken while the first was held");
    };
    let msg = err.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(msg.contains("another node holds"), "{msg}");
    assert!(msg.contains("the holder"), "the holder is not named: {msg}");
    drop(held);
    drop(NodeLock::acquire("after release", Duration::from_secs(5)));
}

// ---------------------------------------------------------------------------
// What the scenarios share.

/// The etcd container has never run in this Pod: waiting, never restarted, no
/// container made. Checked on every observation of a wait.
fn etcd_never_started(pod: &Pod) -> Result<(), String> {
    let Some(s) = container_status(pod, "etcd") else {
        return Ok(());
    };
    let waiting = s
        .state
        .as_ref()
        .and_then(|st| st.waiting.as_ref())
        .is_some();
    if waiting
        && s.restart_count == 0
        && s.container_id.is_none()
        && s.last_state
            .as_ref()
            .and_then(|l| l.terminated.as_ref())
            .is_none()
    {
        Ok(())
    } else {
        Err(format!(
            "the etcd container of {} started:\n{}",
            pod.metadata.name.as_deref().unwrap_or_default(),
            pod_summary(pod)
        ))
    }
}

/// The JSON document of a terminated container's termination message.
fn termination_json(t: &k8s_openapi::api::core::v1::ContainerStateTerminated) -> serde_json::Value {
    let msg = t.message.as_deref().unwrap_or_default();
    serde_json::from_str(msg)
        .unwrap_or_else(|e| panic!("the termination message is not JSON ({e}): {msg:?}"))
}

/// Waits until a Warning Event with `reason` is on Pod `ns/name`; returns its message.
async fn wait_warning(node: &Node, ns: &str, name: &str, reason: &str) -> String {
    let deadline = crate::common::Deadline::after(patience());
    loop {
        let events = node.events(ns, name).await;
        if let Some(e) = events
            .iter()
            .find(|e| e.reason.as_deref() == Some(reason) && e.type_.as_deref() == Some("Warning"))
        {
            return e.message.clone().unwrap_or_default();
        }
        assert!(
            !deadline.passed(),
            "no Warning Event {reason} on Pod {ns}/{name} after {:?}; its Events: {:?}",
            patience(),
            events
                .iter()
                .map(|e| format!("{:?} {:?}", e.reason, e.message))
                .collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Every key of `keys` as member `name`'s own store holds it (serializable).
fn assert_serves(op: &Operator<'_>, name: &str, keys: &[(String, String)]) {
    for (k, v) in keys {
        let got = crate::common::eventually(patience(), || op.get_from(name, k))
            .unwrap_or_else(|e| panic!("{name} does not answer for {k}: {e}"));
        assert_eq!(got.as_deref(), Some(v.as_str()), "{name} serves {k}");
    }
}

/// Writes `n` keys under `prefix` through the whole cluster; returns them.
fn write_keys(op: &Operator<'_>, prefix: &str, n: usize) -> Vec<(String, String)> {
    write_keys_to(op, &MEMBERS, prefix, n)
}

/// Writes `n` keys under `prefix` through `members`; returns them.
fn write_keys_to(
    op: &Operator<'_>,
    members: &[&str],
    prefix: &str,
    n: usize,
) -> Vec<(String, String)> {
    let keys: Vec<(String, String)> = (0..n)
        .map(|i| (format!("{prefix}/k{i:03}"), format!("value-{i}")))
        .collect();
    for (k, v) in &keys {
        op.put(members, k, v);
    }
    keys
}

/// How many times the kubelet's readiness probe of Pod `name` failed (its
/// `Unhealthy` Events, counted as the kubelet aggregates them).
async fn readiness_failures(node: &Node, name: &str) -> i32 {
    node.events(NS, name)
        .await
        .iter()
        .filter(|e| {
            e.reason.as_deref() == Some("Unhealthy")
                && e.message
                    .as_deref()
                    .unwrap_or_default()
                    .starts_with("Readiness probe failed")
        })
        .map(|e| e.count.unwrap_or(1))
        .sum()
}

/// Pod `name` is not Ready on every observation until the kubelet's readiness
/// probe failed `n` more times; panics, saying `what`, if it goes Ready.
async fn stays_not_ready(node: &Node, name: &str, n: i32, what: &str) {
    let start = readiness_failures(node, name).await;
    let deadline = crate::common::Deadline::after(patience() * 2);
    loop {
        let pod = node.pod(NS, name).await;
        assert!(
            !is_ready(&pod),
            "the {what} member {name} went Ready:\n{}",
            pod_summary(&pod)
        );
        let failed = readiness_failures(node, name).await - start;
        if failed >= n {
            return;
        }
        assert!(
            !deadline.passed(),
            "the kubelet probed {name} only {failed} times in {:?}",
            patience() * 2
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Starts a collector on a free port (the operator's IdentityCollector).
fn collector() -> (crate::serve_support::CollectorServer, String) {
    let port = crate::common::free_port();
    let c =
        tokio::task::block_in_place(|| crate::serve_support::CollectorServer::start(port, None));
    (c, format!("http://127.0.0.1:{port}"))
}

/// Forms the three members; prints how long it took.
async fn formed(node: &Node, opts: Options) -> Operator<'_> {
    let op = Operator::new(node, opts).await;
    let start = Instant::now();
    op.form().await;
    eprintln!(
        "three members formed on the node in {:.1?}",
        start.elapsed()
    );
    op
}

// ---------------------------------------------------------------------------
// PR 355 in a real Pod.

/// The seed's volume is wiped while its Pod is deleted and recreated (a node
/// reimage) from the frozen spec (`--initial-cluster-state=new`, itself alone):
/// preflight refuses 10 and the kubelet keeps retrying it; etcd never starts; the
/// Pod is never Ready; the refusal is in the Pod status, a Warning Event, the
/// sidecar's metrics and push report; the two other members serve every key.
/// Then the documented remedy (replace the member) and the replacement joins and
/// serves every key.
#[tokio::test(flavor = "multi_thread")]
async fn pr_355_a_wiped_seed_is_refused_in_a_real_pod_and_replaced() {
    pr_355(EtcdVersion::V3_6).await;
}

/// [`pr_355_a_wiped_seed_is_refused_in_a_real_pod_and_replaced`] on the other
/// lines (`AGENT_TEST_ALL_LINES=1 scripts/test` runs them).
mod every_line {
    use super::*;

    #[tokio::test(flavor = "multi_thread")]
    #[ignore = "every-line matrix: AGENT_TEST_ALL_LINES=1 scripts/test"]
    async fn pr_355_on_etcd_3_5() {
        pr_355(EtcdVersion::V3_5Latest).await;
    }

    #[tokio::test(flavor = "multi_thread")]
    #[ignore = "every-line matrix: AGENT_TEST_ALL_LINES=1 scripts/test"]
    async fn pr_355_on_etcd_3_7() {
        pr_355(EtcdVersion::V3_7).await;
    }
}

async fn pr_355(version: EtcdVersion) {
    let node = Node::builder().etcd(version).start().await;
    let (mut reports, report_to) = collector();
    let op = formed(
        &node,
        Options {
            version,
            report_to: Some(report_to),
            ..Options::default()
        },
    )
    .await;
    let _t = timer("PR 355 (after forming)");
    let keys = write_keys(&op, "/pr355", 50);
    let seed = MEMBERS[0];
    say(&format!(
        "three member Pods Ready on etcd {} ({}); 50 keys written",
        version.label(),
        MEMBERS.join(", ")
    ));

    node.delete_pod(NS, seed, 1).await;
    node.wipe_dir(&op.data_dir(seed));
    say(&format!(
        "node reimage: Pod {seed} deleted, its volume wiped, the Pod recreated from the \
         frozen spec (--initial-cluster-state=new, --initial-cluster={seed} alone)"
    ));
    op.create_pod(op.member_pod(
        seed,
        ClusterState::New,
        &initial_cluster(&[seed]),
        &MEMBERS[1..],
    ))
    .await;

    // The guard holds: preflight exits 10, again and again; etcd never runs.
    let pod = node
        .wait_pod_for(
            NS,
            seed,
            "refused by preflight (exit 10) and retried twice",
            patience() * 3,
            &mut |p| {
                etcd_never_started(p).unwrap_or_else(|e| panic!("{e}"));
                let s = container_status(p, "preflight")?;
                let last = s.last_state.as_ref()?.terminated.as_ref()?;
                (s.restart_count >= 2 && last.exit_code == 10).then(|| p.clone())
            },
        )
        .await;
    assert!(
        !is_ready(&pod),
        "the refused seed is Ready:\n{}",
        pod_summary(&pod)
    );
    assert!(
        std::net::TcpStream::connect((ip_of(seed).as_str(), 2379)).is_err(),
        "something serves the seed's client port while preflight refuses"
    );
    // Visible in the Pod status: the termination message and lastState.
    let last = status_of(&pod, "preflight")
        .last_state
        .as_ref()
        .and_then(|l| l.terminated.clone())
        .unwrap();
    let msg = termination_json(&last);
    assert_eq!(msg["verdict"], "refuse-empty-formed", "{msg}");
    assert_eq!(msg["exit_code"], 10, "{msg}");
    say(&format!(
        "the kubelet ran preflight {} times, each exit 10; etcd never started; the Pod:\n{}",
        status_of(&pod, "preflight").restart_count + 1,
        pod_summary(&pod)
    ));
    say(&format!(
        "initContainerStatuses[preflight].lastState.terminated.message:\n  {}",
        last.message.as_deref().unwrap_or_default().trim()
    ));
    // A Warning Event on the Pod, named after the verdict.
    let event = wait_warning(&node, NS, seed, "refuse-empty-formed").await;
    assert!(!event.is_empty());
    say("and in a Warning Event on the Pod, reason refuse-empty-formed, the reason its message");
    // The native sidecar runs while preflight refuses, and reports it.
    let agent = status_of(&pod, "agent");
    assert!(
        agent
            .state
            .as_ref()
            .and_then(|s| s.running.as_ref())
            .is_some()
            && agent.started == Some(true),
        "the sidecar does not run while preflight refuses:\n{}",
        pod_summary(&pod)
    );
    let metrics = crate::common::eventually(patience(), || {
        let (code, body) = agent_get(seed, "/metrics")?;
        let verdict = crate::serve_support::metric(
            &body,
            "etcd_agent_preflight_verdict",
            "verdict=\"refuse-empty-formed\"",
        );
        (code == 200 && verdict == Some(1.0))
            .then_some(body.clone())
            .ok_or(body)
    })
    .unwrap_or_else(|e| panic!("the sidecar's /metrics never showed the refusal: {e}"));
    crate::serve_support::assert_preflight_metrics(&metrics, "refuse-empty-formed", 10);
    say("the sidecar (running since before preflight) on /metrics:");
    for line in metrics
        .lines()
        .filter(|l| l.starts_with("etcd_agent_preflight"))
    {
        say(&format!("  {line}"));
    }
    let report = tokio::task::block_in_place(|| {
        reports.wait_report("of the seed's refusal", |r| {
            r.pod_name == seed
                && r.identity
                    .as_ref()
                    .and_then(|i| i.preflight.as_ref())
                    .is_some_and(|p| p.verdict == "refuse-empty-formed")
        })
    });
    assert_eq!(report.identity.unwrap().preflight.unwrap().exit_code, 10);
    let (code, body) = agent_get(seed, "/readyz").unwrap();
    assert_eq!(code, 503, "{body}");
    say(&format!(
        "and in its push report to the collector; /readyz {code}:"
    ));
    for line in body.lines() {
        say(&format!("  {line}"));
    }
    // Still refused, still not started, after the reports were seen.
    let pod = node.pod(NS, seed).await;
    etcd_never_started(&pod).unwrap_or_else(|e| panic!("{e}"));
    // The two other members kept every key.
    for m in &MEMBERS[1..] {
        assert_serves(&op, m, &keys);
    }
    say(&format!(
        "{} and {} serve all 50 keys",
        MEMBERS[1], MEMBERS[2]
    ));

    // The remedy (docs/runbook.md, 10): with quorum, replace the member. The
    // operator removes it from etcd and deletes its record; its replacement is
    // added as a learner, preflight says `join`, etcd receives the data.
    let old_id = op.record("EtcdMember", seed).await.data["status"]["memberID"]
        .as_str()
        .unwrap()
        .to_owned();
    let out = op.etcdctl(&MEMBERS[1..], &["member", "remove", &old_id]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    node.delete_pod(NS, seed, 1).await;
    op.delete_member_record(seed).await;
    let replacement = SPARES[0];
    let pod = op.add_member(replacement, &MEMBERS[1..]).await;
    let done = status_of(&pod, "preflight")
        .state
        .as_ref()
        .and_then(|s| s.terminated.clone())
        .unwrap();
    assert_eq!(done.exit_code, 0);
    assert_eq!(termination_json(&done)["verdict"], "join");
    assert_serves(&op, replacement, &keys);
    say(&format!(
        "the remedy (docs/runbook.md, 10): {seed} removed from etcd and its EtcdMember \
         deleted; the replacement {replacement} added as a learner, preflight said join, \
         it was promoted, is Ready and serves all 50 keys"
    ));
}

/// One line of the scenario's story (`scripts/demo --node` shows them).
fn say(line: &str) {
    eprintln!("pr355: {line}");
}

// ---------------------------------------------------------------------------
// Issue 373 in real Pods.

/// The legacy cluster-state ConfigMap every member's etcd container takes env
/// from (`envFrom`) is deleted, as adoption does: harmless while etcd runs, and
/// the sidecars' periodic pod-check reports it at once. Then etcd is killed: the
/// kubelet's real `CreateContainerConfigError`, restart count 0 (invisible to the
/// operator's restart-count self-heal); pod-check and the sidecar find it from the
/// real status. The field report's workaround (delete the Pod, the operator
/// rebuilds it without `envFrom`) brings the member back with its data.
#[tokio::test(flavor = "multi_thread")]
async fn issue_373_a_deleted_configmap_leaves_etcd_stuck_and_the_agent_says_so() {
    const STATE: &str = "etcd-cluster-state";
    let node = Node::start().await;
    let op = formed(
        &node,
        Options {
            etcd_env_from: Some(STATE),
            ..Options::default()
        },
    )
    .await;
    let _t = timer("issue 373 (after forming)");
    let keys = write_keys(&op, "/issue373", 20);
    let victim = MEMBERS[2];
    let admin = node.admin().await;
    kube::Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(admin.clone(), NS)
        .delete(STATE, &Default::default())
        .await
        .unwrap();

    // Before anything breaks: every sidecar reports the dangling reference.
    for m in MEMBERS {
        crate::common::eventually(patience(), || {
            let (_, body) = agent_get(m, "/metrics")?;
            let n = crate::serve_support::metric(&body, "etcd_agent_hazards", "").unwrap_or(0.0);
            (n >= 1.0)
                .then_some(())
                .ok_or(format!("etcd_agent_hazards {n}"))
        })
        .unwrap_or_else(|e| {
            panic!("the sidecar of {m} does not report the deleted ConfigMap: {e}")
        });
        let msg = wait_warning(&node, NS, m, "missing-reference").await;
        assert!(msg.contains(STATE), "{m}: {msg}");
    }

    // A container recreation (here: the container killed) turns it into an outage.
    node.kill_container(NS, victim, "etcd").await;
    let waiting = node
        .wait_container(NS, victim, "etcd", "in CreateContainerConfigError", |s| {
            let w = s.state.as_ref()?.waiting.as_ref()?;
            (w.reason.as_deref() == Some("CreateContainerConfigError"))
                .then(|| (w.clone(), s.restart_count))
        })
        .await;
    let (w, restarts) = waiting;
    assert!(
        w.message
            .as_deref()
            .unwrap_or_default()
            .contains(&format!("configmap \"{STATE}\" not found")),
        "{w:?}"
    );
    assert_eq!(restarts, 0, "the stuck container's restart count");
    let pod = node.pod(NS, victim).await;
    assert!(!is_ready(&pod));
    assert_eq!(
        pod.status.as_ref().unwrap().phase.as_deref(),
        Some("Running"),
        "not a terminal Pod either"
    );

    // pod-check, one-shot, as the agent's ServiceAccount, from the real status.
    let uid = pod.metadata.uid.clone().unwrap();
    let token = node
        .api()
        .token_for(
            NS,
            crate::common::AGENT_SERVICE_ACCOUNT,
            Some((victim, &uid)),
        )
        .await;
    let kubeconfig = node.api().token_kubeconfig("pod-check", &token);
    let args: Vec<String> = [
        "pod-check",
        "--pod-name",
        victim,
        "--namespace",
        NS,
        "--kubeconfig",
        &kubeconfig.display().to_string(),
        "-o",
        "json",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let run = tokio::task::spawn_blocking(move || {
        crate::common::run_agent(&args, &[] as &[(&str, &str)])
    })
    .await
    .unwrap();
    assert_eq!(run.code, 40, "{run}");
    let hazards = run.json()["hazards"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let stuck = hazards
        .iter()
        .find(|h| h["kind"] == "stuck-container" && h["container"] == "etcd")
        .unwrap_or_else(|| panic!("no stuck etcd container in\n{run}"));
    assert_eq!(stuck["reason"], "CreateContainerConfigError", "{run}");
    assert_eq!(stuck["restart_count"], 0, "{run}");
    assert!(
        hazards.iter().any(|h| h["kind"] == "missing-reference"),
        "{run}"
    );
    // The sidecar's periodic check sees the stuck container too.
    let msg = wait_warning(&node, NS, victim, "stuck-container").await;
    assert!(msg.contains("CreateContainerConfigError"), "{msg}");
    crate::common::eventually(patience(), || {
        let (_, body) = agent_get(victim, "/metrics")?;
        let n = crate::serve_support::metric(&body, "etcd_agent_hazards", "").unwrap_or(0.0);
        (n >= 2.0)
            .then_some(())
            .ok_or(format!("etcd_agent_hazards {n}"))
    })
    .unwrap_or_else(|e| panic!("the sidecar of {victim} does not count the stuck container: {e}"));
    // Still 0 restarts: the operator's self-heal (restartCount >= 5) never fires.
    let pod = node.pod(NS, victim).await;
    assert_eq!(
        status_of(&pod, "etcd").restart_count,
        0,
        "{}",
        pod_summary(&pod)
    );

    // The workaround: delete the Pod; the operator rebuilds it without envFrom,
    // with `=existing`; the data dir is intact, preflight lets it start.
    node.delete_pod(NS, victim, 1).await;
    let mut rebuilt = op.member_pod(
        victim,
        ClusterState::Existing,
        &initial_cluster(&MEMBERS),
        &MEMBERS[..2],
    );
    rebuilt["spec"]["containers"][0]
        .as_object_mut()
        .unwrap()
        .remove("envFrom");
    op.create_pod(rebuilt).await;
    let pod = op.wait_ready(victim).await;
    let verdict = status_of(&pod, "preflight")
        .state
        .as_ref()
        .and_then(|s| s.terminated.clone())
        .unwrap();
    assert_eq!(termination_json(&verdict)["verdict"], "start");
    assert_serves(&op, victim, &keys);
    crate::common::eventually(patience(), || {
        let (_, body) = agent_get(victim, "/metrics")?;
        let n = crate::serve_support::metric(&body, "etcd_agent_hazards", "").unwrap_or(-1.0);
        (n == 0.0)
            .then_some(())
            .ok_or(format!("etcd_agent_hazards {n}"))
    })
    .unwrap_or_else(|e| panic!("the rebuilt Pod of {victim} still reports hazards: {e}"));
}

// ---------------------------------------------------------------------------
// /readyz as the real readiness probe.

/// The kubelet's readiness probe on the etcd container is the sidecar's
/// `/readyz`: a member whose identity stops matching the operator's record goes
/// NotReady and comes back when it matches again; and a seed re-bootstrapped on
/// its wiped dir (its Pod recreated without preflight, `=new`) comes back with
/// the same member and cluster IDs, answers etcd's `/health` with 200 — what the
/// operator's probe asks today — and is never Ready.
#[tokio::test(flavor = "multi_thread")]
async fn readyz_is_the_readiness_probe_and_a_rebootstrapped_seed_is_never_ready() {
    let node = Node::start().await;
    let op = formed(&node, Options::default()).await;
    let _t = timer("readyz (after forming)");
    let keys = write_keys(&op, "/readyz", 20);

    // The expected identity is the operator's record: a record naming another
    // member ID makes the kubelet take the Pod out of service, the right one
    // puts it back.
    let member = MEMBERS[1];
    let id = op.member_id(member);
    op.patch_status(
        "EtcdMember",
        member,
        json!({"memberID": "00000000000000aa"}),
    )
    .await;
    node.wait_pod(
        NS,
        member,
        "NotReady with a record naming another member",
        |p| (!is_ready(p)).then_some(()),
    )
    .await;
    let (code, body) = agent_get(member, "/readyz").unwrap();
    assert_eq!(code, 503, "{body}");
    assert!(
        body.contains("00000000000000aa"),
        "/readyz names the expectation it fails:\n{body}"
    );
    op.patch_status("EtcdMember", member, json!({"memberID": id}))
        .await;
    node.wait_pod(NS, member, "Ready again with its record right", |p| {
        is_ready(p).then_some(())
    })
    .await;

    // A full outage in which the seed's node was reimaged: every Pod gone, the
    // seed's volume wiped, and the seed back first, without preflight, with the
    // frozen `=new`. (With its peers up, a re-bootstrapped seed panics at their
    // first heartbeat, "tocommit(N) is out of range [lastIndex(1)]": the
    // container-restart scenario shows that crash loop. Alone, it serves.)
    let seed = MEMBERS[0];
    let seed_id = op.member_id(seed);
    let cluster_id = op.cluster_id(seed);
    for m in MEMBERS {
        node.delete_pod(NS, m, 1).await;
    }
    node.wipe_dir(&op.data_dir(seed));
    let mut pod = op.member_pod(
        seed,
        ClusterState::New,
        &initial_cluster(&[seed]),
        &MEMBERS[1..],
    );
    let init = pod["spec"]["initContainers"].as_array_mut().unwrap();
    init.retain(|c| c["name"] != "preflight");
    op.create_pod(pod).await;
    node.wait_container(NS, seed, "etcd", "running", |s| {
        s.state.as_ref()?.running.clone()
    })
    .await;
    // It is the same member, of a cluster with the same ID, and healthy by
    // etcd's own account...
    let status = crate::common::eventually(patience(), || {
        let out = op.etcdctl(&[seed], &["endpoint", "status", "-w", "json"]);
        if !out.status.success() {
            return Err(String::from_utf8_lossy(&out.stderr).into_owned());
        }
        serde_json::from_slice::<serde_json::Value>(&out.stdout).map_err(|e| e.to_string())
    });
    let status = match status {
        Ok(s) => s,
        Err(e) => panic!(
            "the re-bootstrapped seed does not answer: {e}\n{}\netcd:\n{}",
            pod_summary(&node.pod(NS, seed).await),
            node.logs(NS, seed, "etcd").await
        ),
    };
    let header = &status[0]["Status"]["header"];
    assert_eq!(
        format!("{:016x}", header["member_id"].as_u64().unwrap()),
        seed_id,
        "{status}"
    );
    assert_eq!(
        format!("{:016x}", header["cluster_id"].as_u64().unwrap()),
        cluster_id,
        "{status}"
    );
    let health = crate::common::eventually(patience(), || {
        let mut conn = HttpConn::new(
            &format!("http://{}:2381", ip_of(seed)),
            Duration::from_secs(2),
        )?;
        let r = conn.get("/health")?;
        (r.status == 200)
            .then(|| String::from_utf8_lossy(&r.body).into_owned())
            .ok_or(format!("{}", r.status))
    })
    .unwrap_or_else(|e| {
        panic!("etcd's /health never answered 200 on the re-bootstrapped seed: {e}")
    });
    eprintln!("re-bootstrapped seed: {status}\n/health: {health}");
    // ...and never Ready: on every observation while the kubelet's readiness
    // probe fails five times.
    stays_not_ready(&node, seed, 5, "re-bootstrapped").await;
    let body = crate::common::eventually(patience(), || {
        let (code, body) = agent_get(seed, "/readyz")?;
        (code == 503 && body.contains("high-water"))
            .then_some(body.clone())
            .ok_or(body)
    })
    .unwrap_or_else(|e| {
        panic!("/readyz of the re-bootstrapped seed does not name the lost data: {e}")
    });
    eprintln!("/readyz of the re-bootstrapped seed:\n{body}");
    let pod = node.pod(NS, seed).await;
    assert!(!is_ready(&pod), "{}", pod_summary(&pod));
    // Writes to the fresh cluster raise its raft index past the mark; it was
    // seen below it, so it stays NotReady.
    let fresh = write_keys_to(&op, &[seed], "/readyz-after", 60);
    assert_eq!(
        op.get_from(seed, &keys[0].0).unwrap(),
        None,
        "the re-bootstrapped seed is empty"
    );
    stays_not_ready(&node, seed, 5, "re-bootstrapped, with new writes").await;
    assert_serves(&op, seed, &fresh[..1]);
}

// ---------------------------------------------------------------------------
// Container-only restarts.

/// The etcd container killed, not the Pod: the kubelet restarts that container
/// alone, the init containers (preflight) do not run again, the sidecar keeps
/// running. With the data dir intact the member serves again. With the data dir
/// wiped in between, nothing of the agent runs before etcd — the unguarded path
/// of SPEC §1: etcd starts on the empty dir with its frozen `=existing` flags and
/// panics at the leader's first heartbeat ("tocommit(N) is out of range"), again
/// at every restart; the Pod stays NotReady, the sidecar says why, the other
/// two members serve every key. The guard comes back with the next Pod start:
/// the Pod recreated, preflight refuses it (exit 10).
#[tokio::test(flavor = "multi_thread")]
async fn container_only_restarts_skip_preflight_and_a_wipe_between_crash_loops_unguarded() {
    let node = Node::start().await;
    let op = formed(&node, Options::default()).await;
    let _t = timer("container-only restarts (after forming)");
    let keys = write_keys(&op, "/restart", 30);
    // The last member added: its frozen --initial-cluster names all three, so an
    // empty-dir start is a real rejoin. (The middle one's names two: its
    // empty-dir start fails at once, "error validating peerURLs", also a loop.)
    let m = MEMBERS[2];
    let before = node.pod(NS, m).await;
    let preflight = status_of(&before, "preflight").clone();
    let agent = status_of(&before, "agent").clone();

    // Killed with its data intact: restarted alone, serves again.
    let killed = node.kill_container(NS, m, "etcd").await;
    node.wait_container(NS, m, "etcd", "restarted once and running", |s| {
        (s.restart_count == 1
            && s.state.as_ref()?.running.is_some()
            && container_id(s).as_deref() != Some(killed.as_str()))
        .then_some(())
    })
    .await;
    let pod = op.wait_ready(m).await;
    assert_eq!(
        status_of(&pod, "preflight"),
        &preflight,
        "preflight ran again on a container restart"
    );
    let now = status_of(&pod, "agent");
    assert_eq!(
        (now.container_id.as_ref(), now.restart_count),
        (agent.container_id.as_ref(), 0),
        "the sidecar was restarted"
    );
    assert_serves(&op, m, &keys);

    // Wiped in between: the container restarts on an empty dir, unguarded.
    node.wipe_dir(&op.data_dir(m));
    node.kill_container(NS, m, "etcd").await;
    let pod = node
        .wait_pod_for(
            NS,
            m,
            "etcd crash-looping on the wiped dir",
            patience() * 3,
            &mut |p| {
                let s = container_status(p, "etcd")?;
                let last = s.last_state.as_ref()?.terminated.as_ref()?;
                (s.restart_count >= 3 && last.exit_code != 0 && last.exit_code != 137)
                    .then(|| p.clone())
            },
        )
        .await;
    let logs = node.logs(NS, m, "etcd").await;
    assert!(
        logs.contains("is out of range [lastIndex("),
        "no raft panic in etcd's logs:\n{}",
        crate::common::tail(&logs, 30)
    );
    assert_eq!(
        status_of(&pod, "preflight"),
        &preflight,
        "preflight ran on a container restart"
    );
    let now = status_of(&pod, "agent");
    assert_eq!(
        (now.container_id.as_ref(), now.restart_count),
        (agent.container_id.as_ref(), 0),
        "the sidecar was restarted"
    );
    // Never Ready across two more crashes (a crashed container is not probed).
    let restarts = status_of(&pod, "etcd").restart_count;
    node.wait_pod_for(
        NS,
        m,
        "crashing twice more, never Ready",
        patience() * 3,
        &mut |p| {
            assert!(
                !is_ready(p),
                "the wiped member went Ready:\n{}",
                pod_summary(p)
            );
            (container_status(p, "etcd")?.restart_count >= restarts + 2).then_some(())
        },
    )
    .await;
    let (code, body) = agent_get(m, "/readyz").unwrap();
    assert_eq!(code, 503, "{body}");
    eprintln!("/readyz of the wiped member between its crashes:\n{body}");
    for other in &MEMBERS[..2] {
        assert_serves(&op, other, &keys);
    }

    // The next Pod start brings the guard: preflight refuses the empty member.
    node.delete_pod(NS, m, 1).await;
    node.wipe_dir(&op.data_dir(m));
    op.create_pod(op.member_pod(
        m,
        ClusterState::Existing,
        &initial_cluster(&MEMBERS),
        &MEMBERS[..2],
    ))
    .await;
    let verdict = node
        .wait_container(NS, m, "preflight", "refusing", |s| {
            let t = s.last_state.as_ref()?.terminated.as_ref().or(s
                .state
                .as_ref()?
                .terminated
                .as_ref())?;
            (t.exit_code != 0).then(|| t.clone())
        })
        .await;
    assert_eq!(verdict.exit_code, 10, "{verdict:?}");
    assert_eq!(termination_json(&verdict)["verdict"], "refuse-empty-formed");
    etcd_never_started(&node.pod(NS, m).await).unwrap_or_else(|e| panic!("{e}"));
}

// ---------------------------------------------------------------------------
// Least privilege in a real Pod.

/// Whether `logs` say the API server refused something: "Forbidden", or 403
/// as a number of its own (not digits of a timestamp such as `24.403070Z`).
fn says_forbidden(logs: &str) -> bool {
    let b = logs.as_bytes();
    logs.contains("orbidden")
        || logs.match_indices("403").any(|(i, _)| {
            (i == 0 || !b[i - 1].is_ascii_digit())
                && b.get(i + 3).is_none_or(|c| !c.is_ascii_digit())
        })
}

#[test]
fn a_timestamp_is_no_refusal() {
    assert!(!says_forbidden(
        r#"{"timestamp":"2026-12-06T23:33:24.403070Z"}"#
    ));
    assert!(says_forbidden(
        r#"{"error":"ApiError: leases is forbidden (403)"}"#
    ));
    assert!(says_forbidden("status 403"));
    assert!(says_forbidden(r#""code":403,"#));
}

/// The member Pods of the example overlay (its Role narrowed by resourceNames),
/// the token the kubelet projects into the agent containers, the real RBAC
/// authorizer: every call the agents make succeeds (they form the cluster,
/// write their witness Leases, and log no refusal); with the same token
/// everything else is refused; the etcd container holds no token at all.
#[tokio::test(flavor = "multi_thread")]
async fn least_privilege_the_projected_token_does_what_the_agent_needs_and_nothing_else() {
    use k8s_openapi::api::coordination::v1::Lease;
    use k8s_openapi::api::core::v1::{ConfigMap, Node as KubeNode, Secret};
    use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, PostParams};

    let node = Node::start().await;
    let _op = formed(
        &node,
        Options {
            role: AgentRole::ExampleResourceNames,
            ..Options::default()
        },
    )
    .await;
    let _t = timer("least privilege (after forming)");
    let leases: Api<Lease> = Api::namespaced(node.admin().await, NS);
    for m in MEMBERS {
        // Written as soon as the member answered, before its Pod was Ready.
        let lease = leases
            .get(&format!("etcd-witness-{m}"))
            .await
            .unwrap_or_else(|e| panic!("no witness Lease of {m}: {e}"));
        assert!(
            lease.spec.and_then(|s| s.renew_time).is_some(),
            "{m}'s Lease was never renewed"
        );
        for c in ["preflight", "agent"] {
            let logs = node.logs(NS, m, c).await;
            assert!(
                !says_forbidden(&logs),
                "{m}/{c} was refused something:\n{logs}"
            );
        }
    }

    // The token the kubelet projected into the sidecar of the seed.
    let seed = MEMBERS[0];
    let pod = node.pod(NS, seed).await;
    let uid = pod.metadata.uid.clone().unwrap();
    let dir = node
        .pod_volume_dir(&uid, "kube-api-access")
        .expect("the projected volume");
    let token = std::fs::read_to_string(dir.join("token")).unwrap();
    assert_eq!(std::fs::read_to_string(dir.join("namespace")).unwrap(), NS);
    assert_eq!(
        std::fs::read_to_string(dir.join("ca.crt")).unwrap(),
        node.api().ca_pem()
    );
    let claims: serde_json::Value = {
        let payload = token.split('.').nth(1).unwrap();
        let mut b64 = payload.replace('-', "+").replace('_', "/");
        while b64.len() % 4 != 0 {
            b64.push('=');
        }
        serde_json::from_slice(&crate::common::base64_decode(&b64).unwrap()).unwrap()
    };
    assert_eq!(
        claims["sub"],
        format!("system:serviceaccount:{NS}:etcd-member-agent"),
        "{claims}"
    );
    assert_eq!(
        claims["kubernetes.io"]["pod"]["name"], seed,
        "bound to its Pod: {claims}"
    );
    assert_eq!(
        claims["kubernetes.io"]["pod"]["uid"],
        uid.as_str(),
        "{claims}"
    );
    // The Pod asks for 3607 s; the API server extends projected tokens to a
    // year (--service-account-extend-token-expiration, on by default) and
    // records the requested lifetime as `warnafter`.
    let iat = claims["iat"].as_i64().unwrap();
    assert_eq!(
        claims["kubernetes.io"]["warnafter"].as_i64().unwrap() - iat,
        3607,
        "{claims}"
    );

    let agent = crate::common::client_from(&node.api().token_kubeconfig("projected", &token)).await;
    let records = |plural: &str, kind: &str| {
        Api::<DynamicObject>::namespaced_with(
            agent.clone(),
            NS,
            &kube::api::ApiResource::from_gvk_with_plural(
                &kube::api::GroupVersionKind::gvk(GROUP, "v1alpha2", kind),
                plural,
            ),
        )
    };
    // What the agent does: all allowed.
    records("etcdmembers", "EtcdMember")
        .get(seed)
        .await
        .unwrap();
    records("etcdclusters", "EtcdCluster")
        .get(CLUSTER)
        .await
        .unwrap();
    Api::<Pod>::namespaced(agent.clone(), NS)
        .get(seed)
        .await
        .unwrap();
    Api::<ConfigMap>::namespaced(agent.clone(), NS)
        .get("kube-root-ca.crt")
        .await
        .unwrap();
    Api::<Secret>::namespaced(agent.clone(), NS)
        .get_metadata("etcd-client-tls")
        .await
        .unwrap();
    let own: Api<Lease> = Api::namespaced(agent.clone(), NS);
    let lease = own.get(&format!("etcd-witness-{seed}")).await.unwrap();
    own.replace(
        &format!("etcd-witness-{seed}"),
        &PostParams::default(),
        &lease,
    )
    .await
    .unwrap();

    // Everything else: refused by the real authorizer.
    node.create_object(NS, json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "unrelated"}, "stringData": {"k": "v"}}))
        .await;
    let forbidden = |what: &str, r: Result<(), kube::Error>| match r {
        Err(kube::Error::Api(s)) if s.code == 403 => {}
        other => panic!("{what}: expected 403 Forbidden, got {other:?}"),
    };
    let pods: Api<Pod> = Api::namespaced(agent.clone(), NS);
    forbidden(
        "list Pods",
        pods.list(&ListParams::default()).await.map(drop),
    );
    forbidden(
        "delete a Pod",
        pods.delete(seed, &Default::default()).await.map(drop),
    );
    forbidden(
        "create a Pod",
        pods.create(&PostParams::default(), &pod).await.map(drop),
    );
    forbidden(
        "get a Pod elsewhere",
        Api::<Pod>::namespaced(agent.clone(), "default")
            .get(seed)
            .await
            .map(drop),
    );
    forbidden(
        "get an unrelated Secret",
        Api::<Secret>::namespaced(agent.clone(), NS)
            .get("unrelated")
            .await
            .map(drop),
    );
    forbidden(
        "list Secrets",
        Api::<Secret>::namespaced(agent.clone(), NS)
            .list(&ListParams::default())
            .await
            .map(drop),
    );
    forbidden(
        "list EtcdMembers",
        records("etcdmembers", "EtcdMember")
            .list(&ListParams::default())
            .await
            .map(drop),
    );
    forbidden(
        "get another EtcdMember",
        records("etcdmembers", "EtcdMember")
            .get("etcd-other")
            .await
            .map(drop),
    );
    forbidden(
        "write an EtcdMember's status",
        records("etcdmembers", "EtcdMember")
            .patch_status(
                seed,
                &PatchParams::default(),
                &Patch::Merge(json!({"status": {"memberID": "00000000000000aa"}})),
            )
            .await
            .map(drop),
    );
    forbidden(
        "get another Lease",
        own.get("unrelated-lease").await.map(drop),
    );
    forbidden(
        "list Leases",
        own.list(&ListParams::default()).await.map(drop),
    );
    forbidden(
        "get Nodes",
        Api::<KubeNode>::all(agent.clone())
            .list(&ListParams::default())
            .await
            .map(drop),
    );

    // The etcd container holds no credentials; the agent's containers do.
    let etcd_id = container_id(status_of(&pod, "etcd")).unwrap();
    let agent_id = container_id(status_of(&pod, "agent")).unwrap();
    let root = |id: &str| {
        std::path::PathBuf::from(format!(
            "/proc/{}/root",
            node.containerd().init_pid(id).unwrap()
        ))
    };
    let sa = "var/run/secrets/kubernetes.io/serviceaccount";
    assert!(
        root(&agent_id).join(sa).join("token").is_file(),
        "the sidecar has no token"
    );
    assert!(
        root(&etcd_id).join("usr/local/bin/etcd").is_file(),
        "not the etcd container's root"
    );
    assert!(
        !root(&etcd_id).join(sa).exists(),
        "the etcd container holds a service-account token"
    );
}

// ---------------------------------------------------------------------------
// The native sidecar's lifecycle.

/// The sidecar starts before preflight and keeps running while preflight
/// refuses (the same container across the kubelet's retries), survives the etcd
/// container's restarts, and stops after etcd when the Pod is deleted
/// (containerd's exit events, in order).
#[tokio::test(flavor = "multi_thread")]
async fn the_native_sidecar_starts_first_outlives_etcd_restarts_and_stops_last() {
    let node = Node::start().await;
    let op = Operator::new(&node, Options::default()).await;
    let _t = timer("native sidecar (one member)");
    let seed = MEMBERS[0];
    let initial = initial_cluster(&[seed]);
    op.create_member_record(seed, true, &initial).await;
    op.create_pod(op.member_pod(seed, ClusterState::New, &initial, &[]))
        .await;
    let pod = op.wait_ready(seed).await;
    op.latch_member(seed, &pod).await;
    let cluster_id = op.cluster_id(seed);
    op.patch_status("EtcdCluster", CLUSTER, json!({"clusterID": cluster_id}))
        .await;

    // Started first: the sidecar before preflight, preflight done before etcd.
    let agent = status_of(&pod, "agent").clone();
    let agent_started = agent
        .state
        .as_ref()
        .and_then(|s| s.running.as_ref())
        .and_then(|r| r.started_at.clone())
        .unwrap();
    let pre = status_of(&pod, "preflight")
        .state
        .as_ref()
        .and_then(|s| s.terminated.clone())
        .unwrap();
    let etcd_started = status_of(&pod, "etcd")
        .state
        .as_ref()
        .and_then(|s| s.running.as_ref())
        .and_then(|r| r.started_at.clone())
        .unwrap();
    assert!(
        agent_started.0 <= pre.started_at.clone().unwrap().0,
        "{}",
        pod_summary(&pod)
    );
    assert!(
        pre.finished_at.clone().unwrap().0 <= etcd_started.0,
        "{}",
        pod_summary(&pod)
    );

    // Outlives etcd's restarts.
    for round in 1..=2 {
        let killed = node.kill_container(NS, seed, "etcd").await;
        node.wait_container(NS, seed, "etcd", "restarted and running", |s| {
            (s.restart_count == round
                && s.state.as_ref()?.running.is_some()
                && container_id(s).as_deref() != Some(killed.as_str()))
            .then_some(())
        })
        .await;
        let pod = op.wait_ready(seed).await;
        let now = status_of(&pod, "agent");
        assert_eq!(
            (now.container_id.as_ref(), now.restart_count),
            (agent.container_id.as_ref(), 0),
            "round {round}"
        );
    }

    // Stops last: etcd's task exits before the sidecar's.
    node.task_exits();
    let pod = node.pod(NS, seed).await;
    let etcd_id = container_id(status_of(&pod, "etcd")).unwrap();
    let agent_id = container_id(status_of(&pod, "agent")).unwrap();
    node.delete_pod(NS, seed, 10).await;
    let exits: Vec<String> = node.task_exits().into_iter().map(|(id, _)| id).collect();
    let at = |id: &str| {
        exits
            .iter()
            .position(|e| e == id)
            .unwrap_or_else(|| panic!("no exit of {id} in {exits:?}"))
    };
    assert!(
        at(&etcd_id) < at(&agent_id),
        "the sidecar stopped before etcd: {exits:?}"
    );

    // Runs while preflight refuses: the seed's volume wiped, its Pod recreated.
    node.wipe_dir(&op.data_dir(seed));
    op.create_pod(op.member_pod(seed, ClusterState::New, &initial, &[]))
        .await;
    let first = node
        .wait_container(NS, seed, "agent", "running", |s| {
            s.state.as_ref()?.running.as_ref()?;
            container_id(s)
        })
        .await;
    let pod = node
        .wait_pod_for(
            NS,
            seed,
            "preflight refused three times",
            patience() * 3,
            &mut |p| {
                etcd_never_started(p).unwrap_or_else(|e| panic!("{e}"));
                let s = container_status(p, "preflight")?;
                (s.restart_count >= 3
                    && s.last_state.as_ref()?.terminated.as_ref()?.exit_code == 10)
                    .then(|| p.clone())
            },
        )
        .await;
    let now = status_of(&pod, "agent");
    assert!(
        now.state
            .as_ref()
            .and_then(|s| s.running.as_ref())
            .is_some(),
        "{}",
        pod_summary(&pod)
    );
    assert_eq!(
        (container_id(now), now.restart_count, now.started),
        (Some(first), 0, Some(true)),
        "{}",
        pod_summary(&pod)
    );
}

// ---------------------------------------------------------------------------
// fleet (issue 33) on a real refused member.

/// The seed of a cluster formed on the node is wiped and its Pod recreated
/// from the frozen spec (the PR 355 story): the real preflight refuses and the
/// kubelet retries it. `fleet`, with the shipped read-only ClusterRole and a
/// real token, reads what the kubelet wrote into the Pod status (the
/// termination message in `lastState`, `CrashLoopBackOff`, the restart count),
/// the real refusal Event and the witness Leases the real sidecars keep: the
/// seed is refused, the cluster's quorum at risk, the two others Ready with
/// fresh witnesses of the one cluster ID.
#[tokio::test(flavor = "multi_thread")]
async fn fleet_shows_a_real_refused_member_from_its_real_pod_status() {
    let node = Node::start().await;
    let op = formed(&node, Options::default()).await;
    let _t = timer("fleet on a real refused member (after forming)");
    let seed = MEMBERS[0];
    let recorded = op.record("EtcdMember", seed).await.data["status"]["memberID"]
        .as_str()
        .unwrap()
        .to_owned();
    let cluster_id = op.cluster_id(MEMBERS[1]);
    node.delete_pod(NS, seed, 1).await;
    node.wipe_dir(&op.data_dir(seed));
    op.create_pod(op.member_pod(
        seed,
        ClusterState::New,
        &initial_cluster(&[seed]),
        &MEMBERS[1..],
    ))
    .await;
    let pod = node
        .wait_pod_for(
            NS,
            seed,
            "refused by preflight (exit 10) and retried",
            patience() * 3,
            &mut |p| {
                let s = container_status(p, "preflight")?;
                let last = s.last_state.as_ref()?.terminated.as_ref()?;
                (s.restart_count >= 1 && last.exit_code == 10).then(|| p.clone())
            },
        )
        .await;
    let message = termination_json(
        status_of(&pod, "preflight")
            .last_state
            .as_ref()
            .and_then(|l| l.terminated.as_ref())
            .unwrap(),
    );
    wait_warning(&node, NS, seed, "refuse-empty-formed").await;
    let event_first = node
        .events(NS, seed)
        .await
        .into_iter()
        .find(|e| e.reason.as_deref() == Some("refuse-empty-formed"))
        .and_then(|e| e.first_timestamp)
        .map(|t| t.0.to_string())
        .unwrap();

    let viewer = crate::fleet::shipped_viewer(node.api()).await;
    let run = crate::fleet::run_fleet(&viewer, &["-n", NS, "-o", "json"]).await;
    run.assert_code(50);
    let doc = run.json();
    assert_eq!(doc["complete"], true, "{run}");
    let clusters = doc["clusters"].as_array().unwrap();
    assert_eq!(clusters.len(), 1, "{run}");
    let c = &clusters[0];
    assert_eq!((&c["namespace"], &c["name"]), (&json!(NS), &json!(CLUSTER)));
    let kinds: Vec<&str> = c["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["quorum-at-risk", "members-refused"], "{run}");
    assert_eq!(c["cluster_id"], cluster_id.as_str(), "{run}");
    assert_eq!(
        (&c["voters"], &c["healthy_voters"], &c["quorum"]),
        (&json!(3), &json!(2), &json!(2))
    );
    let m = &c["members"][0];
    assert_eq!(m["member"], seed, "the refused member first");
    assert_eq!(m["status"], "refused");
    let v = &m["verdict"];
    assert_eq!(v["verdict"], "refuse-empty-formed");
    assert_eq!(v["exit_code"], 10);
    assert_eq!(v["source"], "termination-message");
    assert_eq!(
        v["reason"], message["reason"],
        "the kubelet's copy of the message"
    );
    assert_eq!(v["remedy"], message["remedy"]);
    assert_eq!(v["refused_since"], event_first.as_str(), "the real Event");
    assert!(v["restarts"].as_i64().unwrap() >= 1, "{m}");
    assert!(
        v["state"].as_str().unwrap().starts_with("waiting") || v["state"] == "running",
        "{m}"
    );
    assert_eq!(m["readiness"]["ready"], false);
    assert_eq!(
        m["readiness"]["detail"],
        "preflight refused (refuse-empty-formed)"
    );
    assert_eq!(
        m["witness"]["member_id"],
        recorded.as_str(),
        "the sidecar's Lease"
    );
    assert_eq!(m["witness"]["cluster_id"], cluster_id.as_str());
    for other in &c["members"].as_array().unwrap()[1..] {
        assert_eq!(other["status"], "ready", "{other}");
        assert_eq!(other["readiness"]["ready"], true, "{other}");
        assert_eq!(other["verdict"]["refused"], false, "{other}");
        assert_eq!(
            other["witness"]["stale"], false,
            "renewed by a real sidecar: {other}"
        );
        assert_eq!(
            other["witness"]["cluster_id"],
            cluster_id.as_str(),
            "{other}"
        );
    }
    let table = crate::fleet::run_fleet(&viewer, &["-n", NS]).await;
    table.assert_code(50);
    assert!(
        table.stdout.lines().any(|l| l.contains(seed)
            && l.contains("refused")
            && l.contains("refuse-empty-formed (10)")),
        "{table}"
    );
    eprintln!("{}", table.stdout);
}
