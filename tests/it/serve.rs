//! `serve` beside real etcd 3.4.23 and 3.5.1 members: the identity it reports is
//! the one etcd reports, changes reach watchers and the collector, and readiness
//! follows identity — including the two cases etcd's own `/health` calls healthy:
//! a member that bootstrapped a fresh cluster, and one that re-bootstrapped under
//! its old IDs after losing its log.

use std::time::{Duration, Instant};

use crate::common::*;
use crate::kube_fake::{cluster_obj, member_obj, member_path, FakeApi, Fault, NAMESPACE};
use crate::serve_support::{
    assert_preflight_metrics, block_on, metric, pb, CollectorServer, Serve,
};

fn hex(id: u64) -> String {
    format!("{id:016x}")
}

fn status_u64(status: &serde_json::Value, key: &str) -> u64 {
    status[key].as_u64().unwrap_or(0)
}

fn get_identity_matches_etcdctl_endpoint_status(version: EtcdVersion) {
    let cluster = Cluster::builder(version).start();
    let m0 = &cluster[0];
    for i in 0..5 {
        m0.put(&format!("serve/k{i}"), "v");
    }
    let serve = Serve::beside(m0.client_url())
        .data_dir(m0.data_dir())
        .start();

    // The agent polls every 200 ms: wait until it has seen the same raft index.
    // The agent polls every 200 ms: wait until it has seen what etcdctl sees (the
    // backend's size in use moves with etcd's own background commits).
    let (identity, status) = assert_eventually!(
        {
            let status = m0.try_endpoint_status()?;
            let identity = block_on(serve.identity());
            let same = identity.raft_index == status_u64(&status, "raftIndex")
                && identity.db_size == status["dbSize"].as_i64().unwrap_or(-1)
                && status["dbSizeInUse"]
                    .as_i64()
                    .is_none_or(|v| v == identity.db_size_in_use)
                && status["raftAppliedIndex"]
                    .as_u64()
                    .is_none_or(|v| v == identity.raft_applied_index);
            ensure(
                same,
                format!(
                    "agent at index {} applied {} size {} in use {}, etcdctl at {status}",
                    identity.raft_index,
                    identity.raft_applied_index,
                    identity.db_size,
                    identity.db_size_in_use
                ),
            )
            .map(|()| (identity, status))
        },
        "the agent reports what etcdctl reports"
    );
    let header = &status["header"];
    assert_eq!(identity.member_id, hex(status_u64(header, "member_id")));
    assert_eq!(identity.cluster_id, hex(status_u64(header, "cluster_id")));
    assert_eq!(identity.raft_term, status_u64(&status, "raftTerm"));
    assert_eq!(identity.leader_id, hex(status_u64(&status, "leader")));
    assert_eq!(
        identity.etcd_version,
        status["version"].as_str().unwrap_or("")
    );
    assert_eq!(identity.etcd_version, version.label());
    assert!(identity.raft_applied_index > 0, "{identity:?}");
    assert!(identity.db_size_in_use > 0 && identity.db_size_in_use <= identity.db_size);
    assert_eq!(identity.name, "m0");
    assert_eq!(identity.peer_urls, vec![m0.peer_url().to_owned()]);
    assert_eq!(identity.client_urls, vec![m0.client_url().to_owned()]);
    assert!(!identity.is_learner);
    assert!(identity.member_answered, "{identity:?}");
    assert_eq!(identity.endpoint, m0.client_url());

    // The WAL read at boot names the same member, and is what is expected here.
    let wal = identity.wal_at_boot.clone().unwrap_or_default();
    assert_eq!(wal.state, "initialized");
    assert_eq!(wal.member_id, identity.member_id);
    assert_eq!(wal.cluster_id, identity.cluster_id);
    assert!(wal.commit_index > 0 && wal.commit_index <= identity.raft_index);
    let expected = identity.expected.clone().unwrap_or_default();
    assert_eq!(expected.member_id, identity.member_id);
    assert_eq!(
        expected.member_id_source,
        pb::ExpectationSource::WalAtBoot as i32
    );
    assert!(identity.consistent, "{:?}", identity.reasons);
    assert!(identity.reasons.is_empty());
    assert!(identity.preflight.is_none());

    let body = serve.wait_readyz(200);
    assert!(body.contains(&identity.member_id), "{body}");
    let metrics = serve.metrics();
    assert_eq!(
        metric(&metrics, "etcd_agent_ready", ""),
        Some(1.0),
        "{metrics}"
    );
    assert_eq!(
        metric(&metrics, "etcd_agent_raft_term", ""),
        Some(identity.raft_term as f64)
    );
    assert!(
        metric(&metrics, "etcd_agent_identity_polls_total", "result=\"ok\"").unwrap_or(0.0) >= 1.0
    );
    assert!(metrics.contains(&format!("member_id=\"{}\"", identity.member_id)));
}

#[test]
fn get_identity_matches_etcdctl_endpoint_status_on_3_5() {
    get_identity_matches_etcdctl_endpoint_status(EtcdVersion::V3_5);
}

#[test]
fn get_identity_matches_etcdctl_endpoint_status_on_3_4() {
    get_identity_matches_etcdctl_endpoint_status(EtcdVersion::V3_4);
}

#[test]
fn get_identity_matches_etcdctl_endpoint_status_on_3_6() {
    get_identity_matches_etcdctl_endpoint_status(EtcdVersion::V3_6);
}

#[test]
fn get_identity_matches_etcdctl_endpoint_status_on_3_7() {
    get_identity_matches_etcdctl_endpoint_status(EtcdVersion::V3_7);
}

/// Waits for the next message satisfying `f`; every message's sequence must be
/// larger than the one before.
fn wait_message(
    stream: &mut tonic::Streaming<pb::Identity>,
    last_sequence: &mut u64,
    what: &str,
    f: impl Fn(&pb::Identity) -> bool,
) -> pb::Identity {
    let deadline = tokio::time::Instant::now() + patience();
    block_on(async {
        loop {
            match tokio::time::timeout_at(deadline, stream.message()).await {
                Ok(Ok(Some(identity))) => {
                    assert!(
                        identity.sequence > *last_sequence,
                        "sequence went from {last_sequence} to {}",
                        identity.sequence
                    );
                    *last_sequence = identity.sequence;
                    if f(&identity) {
                        return identity;
                    }
                }
                Ok(Ok(None)) => panic!("the stream ended while waiting for {what}"),
                Ok(Err(status)) => panic!("the stream failed while waiting for {what}: {status}"),
                Err(_) => panic!("no identity with {what} within {:?}", patience()),
            }
        }
    })
}

#[test]
fn watch_identity_delivers_a_raft_index_advance_and_a_leader_change() {
    let cluster = Cluster::builder(EtcdVersion::V3_5).members(3).start();
    let leader = cluster.leader().expect("a leader");
    let me = (leader + 1) % 3;
    let serve = Serve::beside(cluster[me].client_url())
        .data_dir(cluster[me].data_dir())
        .start();
    let _ = block_on(serve.identity());

    let mut client = block_on(serve.client());
    let mut stream = block_on(client.watch_identity(pb::WatchIdentityRequest {}))
        .unwrap_or_else(|s| panic!("WatchIdentity: {s}"))
        .into_inner();
    let mut sequence = 0;
    let first = wait_message(&mut stream, &mut sequence, "the current identity", |_| true);
    let old_leader = hex(cluster[leader].id().expect("leader id"));
    assert_eq!(first.leader_id, old_leader);

    let put_at = Instant::now();
    for i in 0..3 {
        cluster[me].put(&format!("watch/k{i}"), "v");
    }
    let advanced = wait_message(&mut stream, &mut sequence, "a higher raft index", |i| {
        i.raft_index >= first.raft_index + 3
    });
    let advance_took = put_at.elapsed();
    assert!(
        advance_took < Duration::from_secs(5),
        "took {advance_took:?}"
    );

    let stop_at = Instant::now();
    cluster[leader].stop();
    let changed = wait_message(&mut stream, &mut sequence, "a new leader", |i| {
        !i.leader_id.is_empty() && i.leader_id != old_leader
    });
    let change_took = stop_at.elapsed();
    assert!(
        change_took < Duration::from_secs(10),
        "took {change_took:?}"
    );
    assert!(changed.raft_term > advanced.raft_term);
    eprintln!(
        "raft index advance seen {advance_took:?} after the puts; new leader {} seen {change_took:?} after stopping {old_leader}",
        changed.leader_id
    );
}

#[test]
fn the_collector_receives_reports_and_the_agent_reconnects_after_it_restarts() {
    let cluster = Cluster::builder(EtcdVersion::V3_5).start();
    let m0 = &cluster[0];
    let port = free_port();
    let mut collector = CollectorServer::start(port, None);
    let serve = Serve::beside(m0.client_url())
        .data_dir(m0.data_dir())
        .arg(format!("--report-to=http://127.0.0.1:{port}"))
        .arg("--report-interval=1s")
        .arg("--report-timeout=2s")
        .arg("--pod-name=m0-pod")
        .arg("--namespace=etcd")
        .start();

    let first = collector.wait_report("at startup", |r| {
        r.trigger == pb::ReportTrigger::Startup as i32
            && r.identity.as_ref().is_some_and(|i| i.member_answered)
    });
    let identity = first.identity.clone().unwrap_or_default();
    assert_eq!(identity.member_id, m0.id_hex().expect("m0's id"));
    assert_eq!(
        (first.pod_name.as_str(), first.namespace.as_str()),
        ("m0-pod", "etcd")
    );

    m0.put("report/k", "v");
    collector.wait_report("for the put", |r| {
        r.trigger == pb::ReportTrigger::Change as i32
            && r.identity
                .as_ref()
                .is_some_and(|i| i.raft_index > identity.raft_index)
    });
    collector.wait_report("as a heartbeat", |r| {
        r.trigger == pb::ReportTrigger::Heartbeat as i32
    });

    collector.stop();
    assert_eventually!(
        ensure(
            metric(
                &serve.metrics(),
                "etcd_agent_reports_total",
                "result=\"error\""
            )
            .unwrap_or(0.0)
                >= 2.0,
            "no failed reports counted yet"
        ),
        "the agent counts failed reports while the collector is down"
    );
    m0.put("report/while-down", "v");

    let restarted_at = Instant::now();
    let mut collector = CollectorServer::start(port, None);
    let again = collector.wait_report("after the collector restarted", |_| true);
    eprintln!(
        "first report {:?} after the collector came back",
        restarted_at.elapsed()
    );
    let latest = again.identity.unwrap_or_default();
    assert!(latest.sequence > identity.sequence);
    assert!(latest.raft_index > identity.raft_index);
}

#[test]
fn readyz_follows_the_member_stopping_and_coming_back() {
    let cluster = Cluster::builder(EtcdVersion::V3_4).start();
    let m0 = &cluster[0];
    let serve = Serve::beside(m0.client_url())
        .data_dir(m0.data_dir())
        .start();
    serve.wait_readyz(200);
    assert_eq!(health_check(&serve), "SERVING");

    m0.stop();
    serve.wait_readyz_saying(503, "does not answer");
    assert_eq!(health_check(&serve), "NOT_SERVING");
    let identity = block_on(serve.identity());
    assert!(!identity.member_answered && !identity.consistent);
    // What the member last said is kept.
    assert_eq!(identity.member_id, m0.id_hex().expect("id"));
    assert_eq!(
        metric(&serve.metrics(), "etcd_agent_member_answered", ""),
        Some(0.0)
    );

    m0.start();
    m0.wait_healthy();
    serve.wait_readyz(200);
    assert_eq!(health_check(&serve), "SERVING");
}

/// The standard gRPC health service's answer for the whole server.
fn health_check(serve: &Serve) -> &'static str {
    block_on(async {
        let mut health = tonic_health::pb::health_client::HealthClient::new(serve.channel().await);
        let status = health
            .check(tonic_health::pb::HealthCheckRequest {
                service: String::new(),
            })
            .await
            .unwrap_or_else(|s| panic!("Health.Check: {s}"))
            .into_inner()
            .status;
        match tonic_health::pb::health_check_response::ServingStatus::try_from(status) {
            Ok(tonic_health::pb::health_check_response::ServingStatus::Serving) => "SERVING",
            Ok(tonic_health::pb::health_check_response::ServingStatus::NotServing) => "NOT_SERVING",
            _ => "OTHER",
        }
    })
}

#[test]
fn readyz_refuses_a_member_that_bootstrapped_a_fresh_cluster_while_etcd_health_says_200() {
    let cluster = Cluster::builder(EtcdVersion::V3_5)
        .token("old-cluster")
        .start();
    let m0 = &cluster[0];
    let old = m0.endpoint_status();
    let (old_member, old_cluster) = (
        hex(status_u64(&old["header"], "member_id")),
        hex(status_u64(&old["header"], "cluster_id")),
    );

    // What preflight wrote for this Pod start, while the directory was intact.
    let verdict = cluster.dir().join("preflight.json");
    std::fs::write(
        &verdict,
        serde_json::json!({
            "verdict": "start",
            "row": "5",
            "exit_code": 0,
            "reason": "the data directory holds this member's identity",
            "remedy": null,
            "decided_at_unix": 1_700_000_000,
            "evidence": [],
            "data_dir": {"state": "initialized", "member_id": old_member, "cluster_id": old_cluster},
        })
        .to_string(),
    )
    .unwrap_or_else(|e| panic!("{e}"));

    // The volume comes back blank and etcd bootstraps a new cluster on it.
    m0.stop();
    m0.wipe_data_dir();
    m0.start_with(|f| f.token = "a-fresh-cluster".into());
    m0.wait_healthy();
    health(m0.client_url(), Duration::from_secs(5))
        .unwrap_or_else(|e| panic!("etcd's own /health should say 200: {e}"));
    let new = m0.endpoint_status();
    let new_cluster = hex(status_u64(&new["header"], "cluster_id"));
    let new_member = hex(status_u64(&new["header"], "member_id"));
    assert_ne!(new_cluster, old_cluster);

    let serve = Serve::beside(m0.client_url())
        .data_dir(m0.data_dir())
        .verdict_file(&verdict)
        .start();
    let body = serve.wait_readyz_saying(503, "differs");
    let identity = block_on(serve.identity());
    assert!(
        body.contains(&format!(
            "cluster ID {new_cluster} differs from the expected {old_cluster} (from this Pod start's preflight verdict)"
        )),
        "{body}"
    );
    assert!(
        body.contains(&format!(
            "member ID {new_member} differs from the expected {old_member}"
        )),
        "{body}"
    );
    assert!(!identity.consistent);
    assert_eq!(identity.cluster_id, new_cluster);
    let expected = identity.expected.unwrap_or_default();
    assert_eq!(expected.cluster_id, old_cluster);
    assert_eq!(
        expected.cluster_id_source,
        pb::ExpectationSource::PreflightVerdict as i32
    );
    let preflight = identity.preflight.unwrap_or_default();
    assert_eq!(
        (preflight.verdict.as_str(), preflight.exit_code),
        ("start", 0)
    );
    assert_eq!(preflight.decided_at.map(|t| t.seconds), Some(1_700_000_000));
    assert_eq!(health_check(&serve), "NOT_SERVING");
    let metrics = serve.metrics();
    assert_eq!(metric(&metrics, "etcd_agent_ready", ""), Some(0.0));
    assert_eq!(
        metric(&metrics, "etcd_agent_preflight_exit_code", ""),
        Some(0.0)
    );
    assert_eq!(
        metric(&metrics, "etcd_agent_inconsistencies", ""),
        Some(2.0)
    );
}

#[test]
fn readyz_refuses_a_member_that_lost_its_log_under_the_same_ids() {
    let cluster = Cluster::builder(EtcdVersion::V3_4).start();
    let m0 = &cluster[0];
    cluster.put_many("lost/", 60, 16);
    let serve = Serve::beside(m0.client_url())
        .data_dir(m0.data_dir())
        .start();
    serve.wait_readyz(200);
    let before = block_on(serve.identity());
    let boot_commit = before.wal_at_boot.as_ref().map_or(0, |w| w.commit_index);
    assert!(boot_commit >= 60, "the WAL at boot committed {boot_commit}");

    // The seed's volume is wiped under the running sidecar; etcd restarts with its
    // frozen flags and re-bootstraps: same member ID, same cluster ID, empty log.
    m0.kill9();
    m0.wipe_data_dir();
    m0.start();
    m0.wait_healthy();
    health(m0.client_url(), Duration::from_secs(5))
        .unwrap_or_else(|e| panic!("etcd's own /health should say 200: {e}"));

    serve.wait_readyz_saying(503, &format!("is below the commit index {boot_commit}"));
    let after = block_on(serve.identity());
    assert_eq!(
        after.member_id, before.member_id,
        "the IDs are derived, not stored"
    );
    assert_eq!(after.cluster_id, before.cluster_id);
    assert!(after.raft_index < boot_commit);
}

/// A member Pod whose containers read a ConfigMap that no longer exists (the
/// adoption story of issue 373): harmless until the container is recreated.
fn pod_with_a_dangling_config_map(name: &str) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE, "uid": "0b8f6c5e-5a7e-4d4c-9a53-3c1f1d2e4b11"},
        "spec": {"containers": [{
            "name": "etcd",
            "image": "quay.io/coreos/etcd:v3.5.1",
            "envFrom": [{"configMapRef": {"name": "etcd-cluster-state"}}],
        }]},
        "status": {"phase": "Running", "containerStatuses": [{
            "name": "etcd", "ready": true, "restartCount": 0, "image": "quay.io/coreos/etcd:v3.5.1",
            "imageID": "", "started": true, "state": {"running": {"startedAt": "2025-11-02T09:14:30Z"}},
        }]},
    })
}

#[test]
fn with_kube_the_operators_record_is_the_expectation_and_pod_hazards_are_reported() {
    let cluster = Cluster::builder(EtcdVersion::V3_5).start();
    let m0 = &cluster[0];
    let status = m0.endpoint_status();
    let (member_id, cluster_id) = (
        hex(status_u64(&status["header"], "member_id")),
        hex(status_u64(&status["header"], "cluster_id")),
    );
    // The operator latched another member ID for m0: a swapped data directory.
    let api = block_on(FakeApi::start())
        .member(member_obj("m0", "etcd", true, Some("00000000000000aa")))
        .cluster(cluster_obj("etcd", Some(&cluster_id)))
        .object(pod_with_a_dangling_config_map("m0"));
    let serve = Serve::beside(m0.client_url())
        .data_dir(m0.data_dir())
        .arg("--kube=true")
        .arg("--pod-name=m0")
        .arg(format!("--namespace={NAMESPACE}"))
        .arg(format!("--kubeconfig={}", api.kubeconfig_path().display()))
        .arg("--kube-interval=300ms")
        .arg("--hazard-interval=300ms")
        .arg("--kube-timeout=2s")
        .start();

    serve.wait_readyz_saying(
        503,
        &format!(
            "member ID {member_id} differs from the expected 00000000000000aa (from the operator's record)"
        ),
    );
    let identity = assert_eventually!(
        {
            let identity = block_on(serve.identity());
            ensure(!identity.hazards.is_empty(), "no hazards yet").map(|()| identity)
        },
        "the periodic pod-check reports the dangling ConfigMap"
    );
    let expected = identity.expected.clone().unwrap_or_default();
    assert!(expected.operator_enabled);
    assert_eq!(
        expected.member_id_source,
        pb::ExpectationSource::Operator as i32
    );
    assert_eq!(expected.cluster_id, cluster_id);
    assert_eq!(
        expected.cluster_id_source,
        pb::ExpectationSource::Operator as i32
    );
    let hazard = &identity.hazards[0];
    assert_eq!(hazard.kind, "missing-reference");
    assert_eq!(hazard.subject, "ConfigMap/etcd-cluster-state");
    assert!(hazard.message.contains("etcd-cluster-state"), "{hazard:?}");
    assert_eq!(
        metric(&serve.metrics(), "etcd_agent_hazards", ""),
        Some(1.0)
    );

    // The operator's record is corrected: ready.
    api.put(member_obj("m0", "etcd", true, Some(&member_id)));
    serve.wait_readyz(200);

    // The API server fails: the last good record still holds, and the failure is said.
    api.set_fault(member_path(NAMESPACE, "m0"), Fault::Status(503), None);
    let identity = assert_eventually!(
        {
            let identity = block_on(serve.identity());
            let error = identity
                .expected
                .as_ref()
                .map(|e| e.operator_error.clone())
                .unwrap_or_default();
            ensure(!error.is_empty(), "no operator error yet").map(|()| identity)
        },
        "a failed read of the operator's record is reported"
    );
    assert!(identity.consistent, "{:?}", identity.reasons);
    assert_eq!(serve.readyz().0, 200);
    assert!(
        metric(
            &serve.metrics(),
            "etcd_agent_operator_reads_total",
            "result=\"error\""
        )
        .unwrap_or(0.0)
            >= 1.0
    );
    block_on(api.stop());
}

/// A verdict document as preflight writes it (`pod_uid` names the Pod start).
fn verdict_doc(pod_uid: &str, verdict: &str, exit_code: i32, ids: Option<(&str, &str)>) -> String {
    let (member_id, cluster_id) = match ids {
        Some((m, c)) => (serde_json::json!(m), serde_json::json!(c)),
        None => (serde_json::Value::Null, serde_json::Value::Null),
    };
    let row = match verdict {
        "start" => "5",
        "bootstrap" => "9",
        "join" => "8",
        "refuse-empty-formed" => "7",
        "refuse-foreign" => "6",
        "phase-unknown" => "11",
        other => panic!("no row for {other}"),
    };
    serde_json::json!({
        "verdict": verdict,
        "row": row,
        "exit_code": exit_code,
        "reason": format!("{verdict} because the test says so"),
        "remedy": if exit_code == 0 { "" } else { "remove and re-add the member" },
        "decided_at_unix": 1_700_000_000,
        "pod_uid": pod_uid,
        "evidence": [],
        "data_dir": {"state": "empty", "member_id": member_id, "cluster_id": cluster_id},
    })
    .to_string()
}

/// preflight writes the verdict file atomically (a temp file renamed into place).
fn write_verdict(path: &std::path::Path, text: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).unwrap_or_else(|e| panic!("{e}"));
    std::fs::rename(&tmp, path).unwrap_or_else(|e| panic!("{e}"));
}

/// `serve` as a native sidecar (docs/commands.md § serve): started before preflight, so before
/// the verdict file exists and before etcd runs. It says it waits for the
/// verdict, never takes an earlier Pod start's file, picks up this start's
/// refusal when preflight writes it (readiness, metrics, gRPC), follows the
/// verdict when the retried preflight writes another, and is ready once etcd
/// runs with the identity the verdict names.
#[test]
fn the_sidecar_started_before_preflight_picks_up_each_verdict_it_writes() {
    let cluster = Cluster::builder(EtcdVersion::V3_6).start();
    let m0 = &cluster[0];
    let st = m0.endpoint_status();
    let (member_id, cluster_id) = (
        hex(status_u64(&st["header"], "member_id")),
        hex(status_u64(&st["header"], "cluster_id")),
    );
    m0.stop();
    let run = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let verdict = run.path().join("preflight.json");
    let serve = Serve::beside(m0.client_url())
        .data_dir(m0.data_dir())
        .verdict_file(&verdict)
        .arg("--pod-uid=pod-b")
        .start();

    // Nothing written yet.
    let body = serve.wait_readyz_saying(503, "waiting for preflight's verdict: no file at");
    assert!(body.contains("does not answer"), "{body}");
    let metrics = serve.metrics();
    assert_eq!(
        metric(&metrics, "etcd_agent_preflight_exit_code", ""),
        Some(-1.0)
    );
    assert!(
        !metrics.contains("etcd_agent_preflight_verdict{"),
        "{metrics}"
    );

    // An earlier Pod's file (a kept volume) is never this start's.
    write_verdict(&verdict, &verdict_doc("pod-a", "start", 0, None));
    serve.wait_readyz_saying(503, "is of an earlier Pod start");
    assert!(block_on(serve.identity()).preflight.is_none());

    // This start's refusal, written while the sidecar runs.
    write_verdict(
        &verdict,
        &verdict_doc("pod-b", "refuse-empty-formed", 10, None),
    );
    let body = serve.wait_readyz_saying(
        503,
        "preflight refused this Pod start (refuse-empty-formed, exit 10): refuse-empty-formed because the test says so; remedy: remove and re-add the member",
    );
    assert!(!body.contains("waiting for preflight"), "{body}");
    let metrics = serve.metrics();
    assert_preflight_metrics(&metrics, "refuse-empty-formed", 10);
    let identity = block_on(serve.identity());
    let preflight = identity.preflight.unwrap_or_default();
    assert_eq!(
        (preflight.verdict.as_str(), preflight.exit_code),
        ("refuse-empty-formed", 10)
    );
    assert!(identity.reasons[0].starts_with("preflight refused this Pod start"));

    // The kubelet retried preflight; it allowed the start; etcd runs.
    write_verdict(
        &verdict,
        &verdict_doc("pod-b", "start", 0, Some((&member_id, &cluster_id))),
    );
    m0.start();
    m0.wait_healthy();
    let body = serve.wait_readyz(200);
    assert!(body.contains(&member_id), "{body}");
    let metrics = serve.metrics();
    assert_eq!(
        metric(
            &metrics,
            "etcd_agent_preflight_verdict",
            "verdict=\"start\""
        ),
        Some(1.0),
        "{metrics}"
    );
    assert_eq!(
        metrics.matches("etcd_agent_preflight_verdict{").count(),
        1,
        "only the newest verdict: {metrics}"
    );
    assert_eq!(
        metric(&metrics, "etcd_agent_preflight_exit_code", ""),
        Some(0.0)
    );
    let expected = block_on(serve.identity()).expected.unwrap_or_default();
    assert_eq!(
        (expected.member_id.as_str(), expected.member_id_source),
        (
            member_id.as_str(),
            pb::ExpectationSource::PreflightVerdict as i32
        )
    );
}

/// A quiet `WatchIdentity` stream outlives the server's HTTP/2 keepalive: the
/// server pings every 30 s, the client's PING ACK is bytes in with nothing
/// owed back, and must not count as a half-sent request (which the sweeper
/// closes after the header-read timeout, 3 s here).
#[test]
fn a_quiet_watch_stream_outlives_the_keepalive_ping() {
    let cluster = Cluster::builder(EtcdVersion::V3_6).start();
    let serve = Serve::beside(cluster[0].client_url())
        .data_dir(cluster[0].data_dir())
        .arg("--header-read-timeout=3s")
        .start();
    let _ = block_on(serve.identity());
    let mut client = block_on(serve.client());
    let mut stream = block_on(client.watch_identity(pb::WatchIdentityRequest {}))
        .unwrap_or_else(|s| panic!("WatchIdentity: {s}"))
        .into_inner();
    let mut sequence = 0;
    let _ = wait_message(&mut stream, &mut sequence, "the current identity", |_| true);
    // Past one keepalive round (30 s) and the header-read timeout after it.
    let until = tokio::time::Instant::now() + Duration::from_secs(42);
    let mut messages = 0;
    block_on(async {
        loop {
            match tokio::time::timeout_at(until, stream.message()).await {
                Ok(Ok(Some(_))) => messages += 1,
                Ok(Ok(None)) => panic!("the stream ended after {messages} more messages"),
                Ok(Err(status)) => {
                    panic!("the stream failed after {messages} more messages: {status}")
                }
                Err(_) => break,
            }
        }
    });
    // Still open: a change arrives.
    cluster[0].put("watch/after-ping", "v");
    let _ = wait_message(
        &mut stream,
        &mut sequence,
        "an update after the ping",
        |_| true,
    );
    eprintln!(
        "{messages} messages during the quiet 42 s; the stream lives\n{}",
        tail(&serve.log(), 20)
    );
}
