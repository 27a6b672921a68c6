//! Guarded by the label alone, on the real node (`common::node`): the webhook
//! (`etcd-member-agent webhook`, on loopback, with the shipped
//! MutatingWebhookConfiguration pointing at it) guards member Pods that their
//! own manifests create without the agent, and the guarded members run to
//! Ready and refuse a wiped volume (exit 10), for real:
//!
//! * cozystack/etcd-operator's shape: the test standing in for the operator
//!   (`node_support`) creates its Pods as `buildPod` makes them today (no
//!   sidecar, no preflight, no token, readiness on etcd's `/health`, the
//!   `default` ServiceAccount), in a namespace labelled
//!   `etcd-member-agent.cozystack.io/inject=enabled` with the tenant RoleBinding
//!   of `deploy/webhook/tenant`; the cluster forms the operator's way under the
//!   guard;
//! * kamaji-etcd's StatefulSet (`tests/fixtures/inject/kamaji-etcd.yaml`): its
//!   three Pods created from the template as the StatefulSet controller would,
//!   unguarded; the cluster forms; then the namespace is labelled and the
//!   members rolled one by one, each coming back guarded and Ready.
//!
//! A wiped member is then refused by its `etcd-preflight` with exit 10 in both.
//! And kamaji-etcd's StatefulSet guarded before it ever formed is refused with
//! 14 (`phase-unknown`): the limitation docs/operator-integration.md states.
//!
//! What the node needs changed in those manifests (no Pod network here, see
//! `common::node`): `hostNetwork`, each member on a loopback address of its own
//! (`127.0.10.x`, its listen flags and probes), names through `hostAliases`,
//! `hostPath` data. Kamaji's Pods name `runAsUser: 0`, the user
//! `quay.io/coreos/etcd` runs as, because the node's etcd image is not that one.
//! These run under `node::` (serialised by the node's lock; `scripts/test`
//! runs them last).

use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::core::v1::{Namespace, Pod, ServiceAccount};
use k8s_openapi::api::rbac::v1::RoleBinding;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{json, Value};

use crate::common::node::{container_status, etcd_image, is_ready, pod_summary, Node, AGENT_IMAGE};
use crate::common::{patience, Deadline, EtcdVersion};
use crate::node_support::{initial_cluster, ClusterState, Operator, Options, MEMBERS, NS};
use crate::webhook::{
    apply_webhook_rbac, from_json, guarded, webhook_configuration, yaml_file, TestCa, Webhook,
    LABEL, WEBHOOK_NS, WEBHOOK_SA,
};

/// The operator's Pod as `buildPod` makes it today, from the stand-in's Pod
/// with the agent: no init containers, no agent volumes, no ServiceAccount
/// (the namespace's `default`), readiness on etcd's own `/health`.
fn as_the_operator_builds_it(mut pod: Value) -> Value {
    let spec = pod["spec"].as_object_mut().unwrap();
    spec.remove("initContainers");
    spec.remove("serviceAccountName");
    let volumes = spec["volumes"].as_array_mut().unwrap();
    volumes.retain(|v| v["name"] != "agent-run" && v["name"] != "kube-api-access");
    let etcd = &mut spec["containers"][0];
    let host = etcd["livenessProbe"]["tcpSocket"]["host"].clone();
    etcd["readinessProbe"] = json!({
        "httpGet": {"path": "/health", "port": 2381, "host": host},
        "initialDelaySeconds": 1, "periodSeconds": 2, "timeoutSeconds": 2, "failureThreshold": 3,
    });
    pod
}

/// The webhook on loopback with the shipped identity and RBAC (a real token of
/// its ServiceAccount), injecting the node's agent image, and the shipped
/// configuration calling it.
async fn start_webhook(node: &Node) -> (Webhook, TestCa) {
    let admin = node.admin().await;
    Api::<Namespace>::all(admin.clone())
        .create(
            &PostParams::default(),
            &from_json(json!({"metadata": {"name": WEBHOOK_NS}})),
        )
        .await
        .unwrap();
    for doc in yaml_file("deploy/webhook/serviceaccount.yaml") {
        Api::<ServiceAccount>::namespaced(admin.clone(), WEBHOOK_NS)
            .create(&PostParams::default(), &from_json(doc))
            .await
            .unwrap();
    }
    apply_webhook_rbac(&admin).await;
    let token = node.api().token_for(WEBHOOK_NS, WEBHOOK_SA, None).await;
    let kubeconfig = node.api().token_kubeconfig("webhook", &token);
    let ca = TestCa::new();
    let mut args = vec![
        format!("--image={AGENT_IMAGE}"),
        "--image-pull-policy=Never".to_owned(),
        // What no Pod says: where the API server is on this node (no
        // kube-proxy), and the shorter periods the node's tests use.
        "--agent-env=AGENT_KUBE_INTERVAL=2s".to_owned(),
        "--agent-env=AGENT_HAZARD_INTERVAL=2s".to_owned(),
        "--agent-env=AGENT_WITNESS_INTERVAL=2s".to_owned(),
        "--agent-env=AGENT_SHUTDOWN_GRACE=2s".to_owned(),
    ];
    for (k, v) in node.api_env() {
        args.push(format!("--agent-env={k}={v}"));
    }
    let webhook = Webhook::start_with(&ca, &kubeconfig, &args).await;
    let config = webhook_configuration("etcd-member-agent", &webhook.url(), &ca.pem, "Fail");
    Api::<MutatingWebhookConfiguration>::all(admin)
        .create(&PostParams::default(), &from_json(config))
        .await
        .unwrap();
    (webhook, ca)
}

/// The tenant RoleBinding of `deploy/webhook/tenant` in `ns` (the agent's
/// ClusterRole for `default`), and the label; waits until the API server
/// guards a dry-run Pod of `probe` there.
async fn opt_in(node: &Node, ns: &str, probe: Value) {
    let admin = node.admin().await;
    let mut binding = yaml_file("deploy/webhook/tenant/rolebinding.yaml").remove(0);
    binding["metadata"]["namespace"] = json!(ns);
    binding["subjects"][0]["namespace"] = json!(ns);
    Api::<RoleBinding>::namespaced(admin.clone(), ns)
        .create(&PostParams::default(), &from_json(binding))
        .await
        .unwrap();
    Api::<Namespace>::all(admin.clone())
        .patch(
            ns,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {LABEL: "enabled"}}})),
        )
        .await
        .unwrap();
    let dry = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let pods: Api<Pod> = Api::namespaced(admin, ns);
    let deadline = Deadline::after(patience());
    loop {
        let mut p = probe.clone();
        p["metadata"]["name"] = json!("dry-run-probe");
        match pods.create(&dry, &from_json(p)).await {
            Ok(p) if guarded(&p) => return,
            other => assert!(
                !deadline.passed(),
                "the API server does not guard Pods of {ns}: {:?}",
                other.map(|p| p.metadata.annotations)
            ),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The Pod's injected containers ran as they should: the sidecar first, and
/// preflight's last run exited 0 with `verdict`.
fn assert_guarded_and_started(pod: &Pod, verdict: &str) {
    let name = pod.metadata.name.clone().unwrap_or_default();
    assert!(guarded(pod), "{name} is not guarded:\n{}", pod_summary(pod));
    let init: Vec<&str> = pod
        .spec
        .as_ref()
        .and_then(|s| s.init_containers.as_ref())
        .map(|l| l.iter().map(|c| c.name.as_str()).collect())
        .unwrap_or_default();
    assert_eq!(init.first(), Some(&"etcd-agent"), "{name}: {init:?}");
    assert_eq!(init.last(), Some(&"etcd-preflight"), "{name}: {init:?}");
    let s = container_status(pod, "etcd-preflight")
        .unwrap_or_else(|| panic!("{name}: no etcd-preflight status\n{}", pod_summary(pod)));
    let t = s
        .state
        .as_ref()
        .and_then(|st| st.terminated.as_ref())
        .unwrap_or_else(|| panic!("{name}: etcd-preflight did not run\n{}", pod_summary(pod)));
    assert_eq!(t.exit_code, 0, "{name}:\n{}", pod_summary(pod));
    let message: Value =
        serde_json::from_str(t.message.as_deref().unwrap_or("{}")).unwrap_or_default();
    assert_eq!(message["verdict"], verdict, "{name}: {message}");
}

/// Waits until `container` of Pod `name` in `ns` has exited with `code` at
/// least twice (the kubelet retrying a refusal), etcd never having started.
async fn wait_refused(node: &Node, ns: &str, name: &str, container: &str, code: i32) -> Pod {
    node.wait_pod_for(
        ns,
        name,
        "refused by etcd-preflight and retried",
        patience() * 3,
        &mut |p| {
            if let Some(etcd) = container_status(p, "etcd") {
                assert!(
                    etcd.state
                        .as_ref()
                        .and_then(|s| s.running.as_ref())
                        .is_none(),
                    "etcd runs on the wiped volume:\n{}",
                    pod_summary(p)
                );
            }
            let s = container_status(p, container)?;
            let last = s.last_state.as_ref()?.terminated.as_ref()?;
            (s.restart_count >= 1 && last.exit_code == code).then(|| p.clone())
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread")]
async fn the_operators_own_pods_guarded_by_the_label_form_a_cluster_and_a_wiped_member_is_refused()
{
    let node = Node::builder().etcd(EtcdVersion::V3_6).start().await;
    let (webhook, _ca) = start_webhook(&node).await;
    let op = Operator::new(
        &node,
        Options {
            edit_pod: Some(as_the_operator_builds_it),
            ..Options::default()
        },
    )
    .await;
    let probe = as_the_operator_builds_it(op.member_pod(
        MEMBERS[0],
        ClusterState::New,
        &initial_cluster(&MEMBERS[..1]),
        &[],
    ));
    assert!(probe["spec"].get("initContainers").is_none());
    opt_in(&node, NS, probe).await;

    // The operator's way: the seed alone, then each member added; every Pod
    // is created without the agent and comes out of the API server guarded.
    op.form().await;
    for (i, m) in MEMBERS.iter().enumerate() {
        let pod = node.pod(NS, m).await;
        assert!(is_ready(&pod), "{m}:\n{}", pod_summary(&pod));
        assert_guarded_and_started(&pod, if i == 0 { "bootstrap" } else { "join" });
    }
    op.put(&MEMBERS, "/guarded-by-label", "yes");

    // A scale-up member's volume wiped while its Pod is recreated from the
    // same frozen spec: refused, 10, and etcd never starts on it.
    let victim = MEMBERS[1];
    node.delete_pod(NS, victim, 1).await;
    node.wipe_dir(&op.data_dir(victim));
    op.create_pod(op.member_pod(
        victim,
        ClusterState::Existing,
        &initial_cluster(&MEMBERS[..2]),
        &[],
    ))
    .await;
    let pod = wait_refused(&node, NS, victim, "etcd-preflight", 10).await;
    assert!(guarded(&pod));
    assert!(!is_ready(&pod), "{}", pod_summary(&pod));
    // The others keep serving.
    assert_eq!(
        op.get_from(MEMBERS[2], "/guarded-by-label")
            .unwrap()
            .as_deref(),
        Some("yes")
    );
    drop(webhook);
}

// ---------------------------------------------------------------------------
// kamaji-etcd's StatefulSet

const KAMAJI_NS: &str = "kamaji-system";
const KAMAJI: [&str; 3] = ["kamaji-etcd-0", "kamaji-etcd-1", "kamaji-etcd-2"];

fn kamaji_ip(name: &str) -> String {
    let n: u8 = name.rsplit('-').next().unwrap().parse().unwrap();
    format!("127.0.10.{}", 11 + n)
}

fn kamaji_host(name: &str) -> String {
    format!("{name}.kamaji-etcd.{KAMAJI_NS}.svc.cluster.local")
}

/// The chart's certificates (one CA; a certificate for every member, server
/// and client use, as its cfssl job makes them) in the Secret it mounts.
fn kamaji_certs() -> (tempfile::TempDir, Value) {
    use rcgen::{
        BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer,
        KeyPair, KeyUsagePurpose,
    };
    let dir = tempfile::tempdir().unwrap();
    let ca_key = KeyPair::generate().unwrap();
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name.push(DnType::CommonName, "Clastix CA");
    ca.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let ca_pem = ca.self_signed(&ca_key).unwrap().pem();
    let issuer = Issuer::new(ca, ca_key);
    let mut sans = vec!["127.0.0.1".to_owned(), "localhost".to_owned()];
    for m in KAMAJI {
        sans.push(kamaji_host(m));
        sans.push(kamaji_ip(m));
    }
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::new(sans).unwrap();
    params.distinguished_name.push(DnType::CommonName, "etcd");
    params.extended_key_usages = vec![
        ExtendedKeyUsagePurpose::ServerAuth,
        ExtendedKeyUsagePurpose::ClientAuth,
    ];
    let cert = params.signed_by(&key, &issuer).unwrap().pem();
    let key = key.serialize_pem();
    for (f, text) in [("ca.crt", &ca_pem), ("tls.crt", &cert), ("tls.key", &key)] {
        std::fs::write(dir.path().join(f), text).unwrap();
    }
    let b64 = |s: &str| crate::common::base64_encode(s.as_bytes());
    let secret = json!({
        "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "kamaji-etcd-certs"},
        "data": {
            "ca.crt": b64(&ca_pem), "server.pem": b64(&cert), "server-key.pem": b64(&key),
            "peer.pem": b64(&cert), "peer-key.pem": b64(&key),
        },
    });
    (dir, secret)
}

/// Replica `name` of the chart's StatefulSet as the StatefulSet controller
/// makes it from the template (and its claim template, here a `hostPath` of
/// `data`), with the node's changes (module docs).
fn kamaji_pod(name: &str, data: &Path) -> Value {
    let sts = yaml_file("tests/fixtures/inject/kamaji-etcd.yaml")
        .into_iter()
        .find(|d| d["kind"] == "StatefulSet")
        .unwrap();
    let template = &sts["spec"]["template"];
    let ip = kamaji_ip(name);
    let mut spec = template["spec"].clone();
    let etcd = &mut spec["containers"][0];
    etcd["image"] = json!(etcd_image(EtcdVersion::V3_6));
    for arg in etcd["command"].as_array_mut().unwrap() {
        let a = arg.as_str().unwrap();
        if a.starts_with("--listen-") {
            *arg = json!(a.replace("0.0.0.0", &ip));
        }
    }
    etcd["livenessProbe"]["httpGet"]["host"] = json!(ip);
    for p in etcd["ports"].as_array_mut().unwrap() {
        p["hostIP"] = json!(ip);
    }
    let spec_obj = spec.as_object_mut().unwrap();
    spec_obj.insert("hostNetwork".into(), json!(true));
    spec_obj.insert("dnsPolicy".into(), json!("Default"));
    spec_obj.insert("enableServiceLinks".into(), json!(false));
    spec_obj.insert("terminationGracePeriodSeconds".into(), json!(5));
    spec_obj.insert(
        "hostAliases".into(),
        json!(KAMAJI
            .iter()
            .map(|m| json!({"ip": kamaji_ip(m), "hostnames": [kamaji_host(m)]}))
            .collect::<Vec<_>>()),
    );
    spec_obj.insert("securityContext".into(), json!({"runAsUser": 0}));
    spec_obj.remove("priorityClassName");
    spec["volumes"]
        .as_array_mut()
        .unwrap()
        .push(json!({"name": "data", "hostPath": {"path": data, "type": "Directory"}}));
    let mut metadata = template["metadata"].clone();
    metadata["name"] = json!(name);
    metadata.as_object_mut().unwrap().remove("annotations");
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec})
}

/// etcdctl against the Kamaji members.
fn kamaji_etcdctl(tls: &Path, members: &[&str], args: &[&str]) -> std::process::Output {
    let endpoints: Vec<String> = members
        .iter()
        .map(|m| format!("https://{}:2379", kamaji_ip(m)))
        .collect();
    let p = |f: &str| tls.join(f).display().to_string();
    let mut cmd = std::process::Command::new(EtcdVersion::V3_6.etcdctl());
    cmd.env_clear()
        .arg(format!("--endpoints={}", endpoints.join(",")))
        .arg(format!("--cacert={}", p("ca.crt")))
        .arg(format!("--cert={}", p("tls.crt")))
        .arg(format!("--key={}", p("tls.key")))
        .args(["--dial-timeout=2s", "--command-timeout=5s"])
        .args(args);
    crate::common::run_with_deadline(&mut cmd, Duration::from_secs(20)).unwrap()
}

fn data_dir(node: &Node, name: &str) -> PathBuf {
    let dir = node.host_dir(&format!("{name}-data"));
    // Kamaji's etcd runs as root: its volume is root's (a PVC's root is).
    std::os::unix::fs::chown(&dir, Some(0), Some(0)).unwrap();
    dir
}

#[tokio::test(flavor = "multi_thread")]
async fn kamajis_statefulset_guarded_by_the_label_rolls_to_ready_and_a_wiped_member_is_refused() {
    let node = Node::builder().etcd(EtcdVersion::V3_6).start().await;
    let (webhook, _ca) = start_webhook(&node).await;
    node.create_namespace(KAMAJI_NS).await;
    let (tls, secret) = kamaji_certs();
    node.create_object(KAMAJI_NS, secret).await;
    let dirs: Vec<PathBuf> = KAMAJI.iter().map(|m| data_dir(&node, m)).collect();

    // The chart's cluster, as its StatefulSet creates it (all three at once,
    // every member with --initial-cluster-state=new), not guarded.
    for (m, d) in KAMAJI.iter().zip(&dirs) {
        let pod = node
            .create_pod(KAMAJI_NS, from_json(kamaji_pod(m, d)))
            .await;
        assert!(!guarded(&pod));
    }
    let deadline = Deadline::after(patience() * 2);
    loop {
        let out = kamaji_etcdctl(tls.path(), &KAMAJI, &["endpoint", "health"]);
        if out.status.success() {
            break;
        }
        assert!(
            !deadline.passed(),
            "the unguarded cluster did not form: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let put = kamaji_etcdctl(tls.path(), &KAMAJI, &["put", "/kamaji", "formed"]);
    assert!(
        put.status.success(),
        "{}",
        String::from_utf8_lossy(&put.stderr)
    );

    // Guarded only by the label: a rollout recreates each member from the
    // same template, and each comes back guarded and Ready on its data.
    opt_in(&node, KAMAJI_NS, kamaji_pod(KAMAJI[0], &dirs[0])).await;
    for (m, d) in KAMAJI.iter().zip(&dirs) {
        node.delete_pod(KAMAJI_NS, m, 5).await;
        node.create_pod(KAMAJI_NS, from_json(kamaji_pod(m, d)))
            .await;
        let pod = node
            .wait_pod(KAMAJI_NS, m, "Ready, guarded", |p| {
                is_ready(p).then(|| p.clone())
            })
            .await;
        assert_guarded_and_started(&pod, "start");
        let env = &pod.spec.as_ref().unwrap().init_containers.as_ref().unwrap()[0];
        let member = env
            .env
            .iter()
            .flatten()
            .find(|e| e.name == "ETCD_MEMBER_NAME")
            .and_then(|e| e.value.clone());
        assert_eq!(
            member.as_deref(),
            Some("$(POD_NAME)"),
            "never frozen to one replica"
        );
    }
    let health = kamaji_etcdctl(tls.path(), &KAMAJI, &["endpoint", "health"]);
    assert!(
        health.status.success(),
        "{}",
        String::from_utf8_lossy(&health.stderr)
    );

    // A member's volume wiped while its Pod is recreated: refused, 10.
    let victim = KAMAJI[1];
    node.delete_pod(KAMAJI_NS, victim, 5).await;
    node.wipe_dir(&dirs[1]);
    node.create_pod(KAMAJI_NS, from_json(kamaji_pod(victim, &dirs[1])))
        .await;
    let pod = wait_refused(&node, KAMAJI_NS, victim, "etcd-preflight", 10).await;
    let last = container_status(&pod, "etcd-preflight")
        .and_then(|s| s.last_state.as_ref()?.terminated.clone())
        .unwrap();
    let message: Value = serde_json::from_str(last.message.as_deref().unwrap_or("{}")).unwrap();
    assert_eq!(message["verdict"], "refuse-empty-formed", "{message}");
    let get = kamaji_etcdctl(
        tls.path(),
        &[KAMAJI[0], KAMAJI[2]],
        &["get", "/kamaji", "--print-value-only"],
    );
    assert_eq!(String::from_utf8_lossy(&get.stdout).trim(), "formed");
    drop(webhook);
}

/// What docs/operator-integration.md says of a chart like kamaji-etcd: guarded
/// before the cluster ever formed (every member `=new`, no operator record,
/// no member running), nothing tells preflight the cluster has not formed, so
/// each member is refused with 14 (`phase-unknown`) and etcd never starts:
/// create the cluster, then guard it (the test above).
#[tokio::test(flavor = "multi_thread")]
async fn kamajis_statefulset_guarded_before_it_formed_is_refused_phase_unknown() {
    let node = Node::builder().etcd(EtcdVersion::V3_6).start().await;
    let (webhook, _ca) = start_webhook(&node).await;
    node.create_namespace(KAMAJI_NS).await;
    let (_tls, secret) = kamaji_certs();
    node.create_object(KAMAJI_NS, secret).await;
    let dirs: Vec<PathBuf> = KAMAJI.iter().map(|m| data_dir(&node, m)).collect();
    opt_in(&node, KAMAJI_NS, kamaji_pod(KAMAJI[0], &dirs[0])).await;
    for (m, d) in KAMAJI.iter().zip(&dirs) {
        let pod = node
            .create_pod(KAMAJI_NS, from_json(kamaji_pod(m, d)))
            .await;
        assert!(guarded(&pod), "{m} is not guarded");
    }
    for m in KAMAJI {
        let pod = wait_refused(&node, KAMAJI_NS, m, "etcd-preflight", 14).await;
        let last = container_status(&pod, "etcd-preflight")
            .and_then(|s| s.last_state.as_ref()?.terminated.clone())
            .unwrap();
        let message: Value = serde_json::from_str(last.message.as_deref().unwrap_or("{}")).unwrap();
        assert_eq!(message["verdict"], "phase-unknown", "{m}: {message}");
    }
    drop(webhook);
}
