//! `pod-check` as a black box: the binary, run with a cleared environment,
//! reads a Pod from the in-process fake API server (`kube_fake`) through a
//! kubeconfig and checks the ConfigMaps and Secrets it references.
//!
//! The central fixture is the member Pod of field report #373: an etcd member
//! adopted in place, whose `etcd` container still has `envFrom:
//! [{configMapRef: {name: etcd-cluster-state}}]` after adoption deleted that
//! ConfigMap. Before a restart the hazard is latent (the container runs); after
//! one, the container waits in `CreateContainerConfigError` with
//! `restartCount == 0` forever. Both must exit 40 naming the container, the
//! reference and the missing object; anything the agent could not check must
//! exit 2 with `"outcome": "error"`, never 0.

use crate::kube_fake;

use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::kube_fake::{
    config_map_obj, config_map_path, pod_path, secret_obj, secret_path, uid_for, FakeApi, Fault,
    NAMESPACE, PARTIAL_OBJECT_METADATA, SECRET_VALUE,
};
use serde_json::{json, Value};

const BIN: &str = env!("CARGO_BIN_EXE_etcd-member-agent");
const POD: &str = "etcd-0";
const CLUSTER_STATE: &str = "etcd-cluster-state";
const SERVER_TLS: &str = "etcd-server-tls";
const PEER_TLS: &str = "etcd-peer-tls";
const ROOT_CA: &str = "kube-root-ca.crt";

/// What one run of the binary did.
#[derive(Debug)]
struct Run {
    code: i32,
    json: Value,
    stdout: String,
    stderr: String,
    took: Duration,
}

impl std::fmt::Display for Run {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "exit code {} after {:?}", self.code, self.took)?;
        writeln!(f, "--- stdout ---\n{}", self.stdout)?;
        write!(f, "--- stderr ---\n{}", self.stderr)
    }
}

/// Runs the binary with exactly `env` (no inherited variables) without
/// blocking the runtime the fake server answers on.
async fn run_agent(args: &[&str], env: &[(&str, &str)]) -> Run {
    let mut cmd = tokio::process::Command::new(BIN);
    cmd.env_clear()
        .args(args)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .kill_on_drop(true);
    let started = Instant::now();
    let out = tokio::time::timeout(Duration::from_secs(60), cmd.output())
        .await
        .unwrap_or_else(|_| panic!("pod-check {args:?} did not finish within 60 s"))
        .unwrap_or_else(|e| panic!("cannot run {BIN}: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let run = Run {
        code: out.status.code().unwrap_or(-1),
        json: serde_json::from_str(&stdout).unwrap_or(Value::Null),
        stdout,
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        took: started.elapsed(),
    };
    assert_eq!(
        run.json["exit_code"].as_i64(),
        Some(i64::from(run.code)),
        "one JSON document carrying the exit code, whatever the outcome:\n{run}"
    );
    run
}

/// `pod-check` for [`POD`] in [`NAMESPACE`] through `api`'s kubeconfig, `-o json`.
async fn pod_check(api: &FakeApi, extra: &[&str]) -> Run {
    let kubeconfig = api.kubeconfig_path().to_string_lossy().into_owned();
    let mut args = vec![
        "pod-check",
        "--pod-name",
        POD,
        "--namespace",
        NAMESPACE,
        "--kubeconfig",
        &kubeconfig,
        "-o",
        "json",
    ];
    args.extend_from_slice(extra);
    run_agent(&args, &[]).await
}

/// Asserts the run could not check the Pod: exit 2 for a configuration problem,
/// 41 for an API that could not answer, `outcome: error` with `error.kind` =
/// `kind`, nothing that reads as clean; returns the message.
#[track_caller]
fn assert_error(run: &Run, kind: &str, class: &str) -> String {
    let code = if class == "configuration" { 2 } else { 41 };
    assert_eq!(run.code, code, "{run}");
    assert_eq!(run.json["outcome"], "error", "{run}");
    assert_eq!(run.json["error"]["kind"], kind, "{run}");
    assert_eq!(run.json["error"]["class"], class, "{run}");
    assert!(run.json.get("hazards").is_none(), "{run}");
    if kind != "usage" {
        assert!(run.stderr.contains("NOT known to be clean"), "{run}");
    }
    assert!(!run.stderr.contains(": clean"), "{run}");
    run.json["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

fn container_status(name: &str, image: &str, state: Value, ready: bool) -> Value {
    json!({
        "name": name,
        "image": image,
        "imageID": format!("{image}@sha256:{}", "0d6f".repeat(16)),
        "containerID": if state.get("running").is_some() { json!(format!("containerd://{}", "7a1c".repeat(16))) } else { Value::Null },
        "ready": ready,
        "started": ready,
        "restartCount": 0,
        "state": state,
        "lastState": {},
    })
}

fn running(since: &str) -> Value {
    json!({"running": {"startedAt": since}})
}

/// An etcd member Pod as it stands after in-place adoption (#373): the legacy
/// operator's `envFrom` to `etcd-cluster-state` kept, TLS from two Secrets, the
/// service-account projection every Pod carries (with the `kube-root-ca.crt`
/// ConfigMap), and the agent sidecar beside etcd. Both containers run.
fn adopted_member_pod() -> Value {
    let etcd_image = "quay.io/coreos/etcd:v3.5.1";
    let agent_image = "ghcr.io/cozystack/etcd-member-agent:v0.1.0";
    let downward = |var: &str, field: &str| json!({"name": var, "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": field}}});
    let sa_mount = json!({"name": "kube-api-access-7xq2d", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount", "readOnly": true});
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": POD,
            "namespace": NAMESPACE,
            "uid": uid_for("pod/etcd-0"),
            "resourceVersion": "9912034",
            "creationTimestamp": "2025-10-12T08:02:10Z",
            "labels": {
                "app.kubernetes.io/name": "etcd",
                "app.kubernetes.io/instance": "etcd",
                "app.kubernetes.io/managed-by": "etcd-operator",
                "etcd-operator.cozystack.io/cluster": "etcd",
                "statefulset.kubernetes.io/pod-name": POD,
            },
            "annotations": {"etcd-operator.cozystack.io/data-dir-subpath": "default.etcd"},
            "ownerReferences": [{
                "apiVersion": "etcd-operator.cozystack.io/v1alpha2",
                "kind": "EtcdMember",
                "name": POD,
                "uid": uid_for("etcdmember/etcd-0"),
                "controller": true,
                "blockOwnerDeletion": true,
            }],
        },
        "spec": {
            "containers": [
                {
                    "name": "etcd",
                    "image": etcd_image,
                    "command": ["etcd"],
                    "args": [
                        "--name=etcd-0",
                        "--data-dir=/var/lib/etcd/default.etcd",
                        "--listen-peer-urls=https://0.0.0.0:2380",
                        "--listen-client-urls=https://0.0.0.0:2379",
                        "--advertise-client-urls=https://etcd-0.etcd.tenant-a.svc:2379",
                        "--initial-advertise-peer-urls=https://etcd-0.etcd.tenant-a.svc:2380",
                        "--listen-metrics-urls=http://0.0.0.0:2381",
                        "--client-cert-auth", "--trusted-ca-file=/etc/etcd/tls/client/ca.crt",
                        "--cert-file=/etc/etcd/tls/client/tls.crt", "--key-file=/etc/etcd/tls/client/tls.key",
                        "--peer-client-cert-auth", "--peer-trusted-ca-file=/etc/etcd/tls/peer/ca.crt",
                        "--peer-cert-file=/etc/etcd/tls/peer/tls.crt", "--peer-key-file=/etc/etcd/tls/peer/tls.key",
                    ],
                    "envFrom": [{"configMapRef": {"name": CLUSTER_STATE}}],
                    "env": [downward("POD_NAME", "metadata.name"), downward("POD_NAMESPACE", "metadata.namespace")],
                    "ports": [
                        {"name": "client", "containerPort": 2379, "protocol": "TCP"},
                        {"name": "peer", "containerPort": 2380, "protocol": "TCP"},
                        {"name": "metrics", "containerPort": 2381, "protocol": "TCP"},
                    ],
                    "readinessProbe": {"httpGet": {"path": "/health", "port": 2381, "scheme": "HTTP"}, "periodSeconds": 5, "failureThreshold": 3, "timeoutSeconds": 1, "successThreshold": 1},
                    "volumeMounts": [
                        {"name": "data", "mountPath": "/var/lib/etcd"},
                        {"name": "client-tls", "mountPath": "/etc/etcd/tls/client", "readOnly": true},
                        {"name": "peer-tls", "mountPath": "/etc/etcd/tls/peer", "readOnly": true},
                        sa_mount,
                    ],
                    "securityContext": {"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}, "runAsNonRoot": true},
                    "terminationMessagePath": "/dev/termination-log",
                    "terminationMessagePolicy": "File",
                    "imagePullPolicy": "IfNotPresent",
                },
                {
                    "name": "member-agent",
                    "image": agent_image,
                    "args": ["serve"],
                    "env": [downward("POD_NAME", "metadata.name"), downward("POD_NAMESPACE", "metadata.namespace")],
                    "volumeMounts": [
                        {"name": "data", "mountPath": "/var/lib/etcd", "readOnly": true},
                        {"name": "client-tls", "mountPath": "/etc/etcd/tls/client", "readOnly": true},
                        sa_mount,
                    ],
                    "imagePullPolicy": "IfNotPresent",
                },
            ],
            "volumes": [
                {"name": "data", "persistentVolumeClaim": {"claimName": "data-etcd-0"}},
                {"name": "client-tls", "secret": {"secretName": SERVER_TLS, "defaultMode": 420}},
                {"name": "peer-tls", "secret": {"secretName": PEER_TLS, "defaultMode": 420}},
                {"name": "kube-api-access-7xq2d", "projected": {"defaultMode": 420, "sources": [
                    {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                    {"configMap": {"name": ROOT_CA, "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                    {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}},
                ]}},
            ],
            "restartPolicy": "Always",
            "serviceAccountName": "etcd-member-agent",
            "nodeName": "node-3",
            "hostname": POD,
            "subdomain": "etcd",
            "securityContext": {"runAsUser": 65532, "runAsGroup": 65532, "fsGroup": 65532, "runAsNonRoot": true, "seccompProfile": {"type": "RuntimeDefault"}},
        },
        "status": {
            "phase": "Running",
            "conditions": [
                {"type": "Initialized", "status": "True", "lastTransitionTime": "2025-10-12T08:02:11Z"},
                {"type": "Ready", "status": "True", "lastTransitionTime": "2025-10-12T08:02:19Z"},
                {"type": "ContainersReady", "status": "True", "lastTransitionTime": "2025-10-12T08:02:19Z"},
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": "2025-10-12T08:02:10Z"},
            ],
            "hostIP": "10.0.0.13",
            "podIP": "10.244.3.17",
            "startTime": "2025-10-12T08:02:10Z",
            "qosClass": "BestEffort",
            "containerStatuses": [
                container_status("etcd", etcd_image, running("2025-10-12T08:02:12Z"), true),
                container_status("member-agent", agent_image, running("2025-10-12T08:02:12Z"), true),
            ],
        },
    })
}

/// The same Pod after a node reboot recreated its containers: `etcd` waits in
/// `CreateContainerConfigError`, never created, `restartCount` 0 (#373).
fn after_reboot(mut pod: Value) -> Value {
    pod["status"]["containerStatuses"][0] = container_status(
        "etcd",
        "quay.io/coreos/etcd:v3.5.1",
        json!({"waiting": {
            "reason": "CreateContainerConfigError",
            "message": format!("configmap \"{CLUSTER_STATE}\" not found"),
        }}),
        false,
    );
    for (i, cond) in ["Ready", "ContainersReady"].iter().enumerate() {
        pod["status"]["conditions"][i + 1] = json!({
            "type": cond, "status": "False", "reason": "ContainersNotReady",
            "message": "containers with unready status: [etcd]",
            "lastTransitionTime": "2025-11-02T03:12:40Z",
        });
    }
    pod
}

fn cluster_state_config_map() -> Value {
    config_map_obj(
        CLUSTER_STATE,
        json!({
            "ETCD_INITIAL_CLUSTER_STATE": "new",
            "ETCD_INITIAL_CLUSTER": "etcd-0=https://etcd-0.etcd.tenant-a.svc:2380,etcd-1=https://etcd-1.etcd.tenant-a.svc:2380,etcd-2=https://etcd-2.etcd.tenant-a.svc:2380",
            "ETCD_INITIAL_CLUSTER_TOKEN": "etcd-tenant-a",
        }),
    )
}

/// The objects the member Pod references, except the legacy ConfigMap.
async fn api_after_adoption(pod: Value) -> FakeApi {
    FakeApi::start()
        .await
        .object(pod)
        .object(secret_obj(SERVER_TLS, &["ca.crt", "tls.crt", "tls.key"]))
        .object(secret_obj(PEER_TLS, &["ca.crt", "tls.crt", "tls.key"]))
        .object(config_map_obj(
            ROOT_CA,
            json!({"ca.crt": "-----BEGIN CERTIFICATE-----\nMIIC/jCCAeagAwIBAgIBADANBgkqhkiG9w0BAQsFADAVMRMwEQYDVQQDEwprdWJl\n-----END CERTIFICATE-----\n"}),
        ))
}

/// Every object the member Pod references.
async fn api_with_everything(pod: Value) -> FakeApi {
    let api = api_after_adoption(pod).await;
    api.put(cluster_state_config_map());
    api
}

fn hazards(run: &Run) -> &Vec<Value> {
    run.json["hazards"]
        .as_array()
        .unwrap_or_else(|| panic!("no hazards list\n{run}"))
}

#[tokio::test]
async fn adopted_member_stuck_on_its_deleted_configmap_exits_40_naming_container_reference_and_object(
) {
    let api = api_after_adoption(after_reboot(adopted_member_pod())).await;
    // Configured through env, as the operator configures the container.
    let kubeconfig = api.kubeconfig_path().to_string_lossy().into_owned();
    let run = run_agent(
        &["pod-check"],
        &[
            ("POD_NAME", POD),
            ("POD_NAMESPACE", NAMESPACE),
            ("KUBECONFIG", &kubeconfig),
            ("AGENT_OUTPUT", "json"),
            ("AGENT_TIMEOUT", "10s"),
        ],
    )
    .await;

    assert_eq!(run.code, 40, "{run}");
    assert_eq!(run.json["outcome"], "hazards", "{run}");
    assert_eq!(run.json["pod"], POD);
    assert_eq!(run.json["namespace"], NAMESPACE);
    assert_eq!(run.json["phase"], "Running");
    assert_eq!(run.json["checked_references"], 4, "{run}");
    assert_eq!(run.json["checked_objects"], 4, "{run}");
    let hazards = hazards(&run);
    assert_eq!(hazards.len(), 2, "{run}");

    let missing = &hazards[0];
    assert_eq!(missing["kind"], "missing-reference");
    assert_eq!(missing["container"], "etcd");
    assert_eq!(missing["container_type"], "container");
    assert_eq!(missing["reference"], "envFrom[0].configMapRef");
    assert_eq!(missing["path"], "containers[etcd].envFrom[0].configMapRef");
    assert_eq!(missing["object_kind"], "ConfigMap");
    assert_eq!(missing["object_name"], CLUSTER_STATE);

    let stuck = &hazards[1];
    assert_eq!(stuck["kind"], "stuck-container");
    assert_eq!(stuck["container"], "etcd");
    assert_eq!(stuck["reason"], "CreateContainerConfigError");
    assert_eq!(
        stuck["detail"],
        format!("configmap \"{CLUSTER_STATE}\" not found")
    );
    assert_eq!(stuck["restart_count"], 0);
    assert!(run.json["remedy"].is_string(), "{run}");

    assert!(
        run.stderr.contains(
            "container etcd: envFrom[0].configMapRef → ConfigMap \"etcd-cluster-state\" not found \
             (the container cannot be recreated)"
        ),
        "{run}"
    );
    assert!(
        run.stderr.contains(
            "container etcd: stuck waiting (CreateContainerConfigError: configmap \"etcd-cluster-state\" not found), restartCount 0"
        ),
        "{run}"
    );
    api.stop().await;
}

#[tokio::test]
async fn a_deleted_configmap_is_reported_while_the_container_still_runs() {
    // The 21 days between adoption and the outage: nothing is stuck yet.
    let api = api_after_adoption(adopted_member_pod()).await;
    let run = pod_check(&api, &[]).await;
    assert_eq!(run.code, 40, "{run}");
    let hazards = hazards(&run);
    assert_eq!(hazards.len(), 1, "{run}");
    assert_eq!(hazards[0]["kind"], "missing-reference");
    assert_eq!(hazards[0]["object_name"], CLUSTER_STATE);
    api.stop().await;
}

#[tokio::test]
async fn a_clean_member_pod_exits_0() {
    let api = api_with_everything(adopted_member_pod()).await;
    let run = pod_check(&api, &[]).await;
    assert_eq!(run.code, 0, "{run}");
    assert_eq!(run.json["outcome"], "clean");
    assert_eq!(run.json["hazards"], json!([]));
    assert_eq!(run.json["checked_references"], 4);
    assert!(run.json.get("error").is_none(), "{run}");
    assert!(run.stderr.contains("clean"), "{run}");
    api.stop().await;
}

#[tokio::test]
async fn secrets_are_only_ever_read_as_metadata() {
    let api = api_with_everything(adopted_member_pod()).await;
    let run = pod_check(&api, &[]).await;
    assert_eq!(run.code, 0, "{run}");

    let requests = api.requests();
    let secrets: Vec<_> = requests
        .iter()
        .filter(|r| {
            r.path
                .starts_with(&format!("/api/v1/namespaces/{NAMESPACE}/secrets/"))
        })
        .collect();
    let mut paths: Vec<_> = secrets.iter().map(|r| r.path.clone()).collect();
    paths.sort();
    assert_eq!(
        paths,
        vec![
            secret_path(NAMESPACE, PEER_TLS),
            secret_path(NAMESPACE, SERVER_TLS)
        ]
    );
    for r in &secrets {
        assert_eq!(r.method, "GET");
        assert!(
            r.accept
                .as_deref()
                .is_some_and(|a| a.contains(PARTIAL_OBJECT_METADATA)),
            "{r:?}"
        );
        assert_eq!(
            r.answered.as_deref(),
            Some("PartialObjectMetadata"),
            "{r:?}"
        );
    }
    // ConfigMaps too: existence is all the check needs.
    for r in requests.iter().filter(|r| r.path.contains("/configmaps/")) {
        assert_eq!(
            r.answered.as_deref(),
            Some("PartialObjectMetadata"),
            "{r:?}"
        );
    }
    // Only the Pod itself is read in full, and no Secret ever left the server.
    let full: Vec<_> = requests
        .iter()
        .filter_map(|r| r.answered.clone())
        .filter(|k| k != "PartialObjectMetadata")
        .collect();
    assert_eq!(full, vec!["Pod".to_owned()]);
    assert!(requests
        .iter()
        .all(|r| r.answered.as_deref() != Some("Secret")));
    assert_eq!(requests[0].path, pod_path(NAMESPACE, POD));

    let encoded = kube_fake::secret_value_base64();
    for text in [&run.stdout, &run.stderr] {
        assert!(!text.contains(&encoded) && !text.contains(SECRET_VALUE.trim()));
    }
    api.stop().await;
}

#[tokio::test]
async fn an_optional_reference_to_a_missing_object_is_clean() {
    let mut pod = adopted_member_pod();
    pod["spec"]["containers"][0]["envFrom"][0]["configMapRef"]["optional"] = json!(true);
    pod["spec"]["containers"][1]["env"]
        .as_array_mut()
        .unwrap_or_else(|| panic!("env"))
        .push(json!({"name": "S3_SECRET", "valueFrom": {"secretKeyRef": {"name": "etcd-backup-s3", "key": "secret", "optional": true}}}));
    let api = api_after_adoption(pod).await;
    let run = pod_check(&api, &[]).await;
    assert_eq!(run.code, 0, "{run}");
    assert_eq!(run.json["outcome"], "clean");
    assert_eq!(run.json["checked_references"], 3, "{run}");
    // Optional references are not even looked up.
    assert!(api
        .requests()
        .iter()
        .all(|r| r.path != config_map_path(NAMESPACE, CLUSTER_STATE)
            && !r.path.ends_with("/etcd-backup-s3")));
    api.stop().await;
}

#[tokio::test]
async fn a_projected_volume_with_a_missing_secret_exits_40() {
    let mut pod = adopted_member_pod();
    // TLS from one projected volume instead of two secret volumes; the peer
    // Secret is gone.
    pod["spec"]["volumes"][2] = json!({"name": "peer-tls", "projected": {"defaultMode": 420, "sources": [
        {"secret": {"name": "etcd-peer-ca", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
        {"secret": {"name": "etcd-peer-tls-rotated", "items": [{"key": "tls.crt", "path": "tls.crt"}, {"key": "tls.key", "path": "tls.key"}]}},
    ]}});
    let api = api_with_everything(pod).await;
    api.put(secret_obj("etcd-peer-ca", &["ca.crt"]));
    let run = pod_check(&api, &[]).await;

    assert_eq!(run.code, 40, "{run}");
    let hazards = hazards(&run);
    assert_eq!(hazards.len(), 1, "{run}");
    let h = &hazards[0];
    assert_eq!(h["kind"], "missing-reference");
    assert_eq!(h["volume"], "peer-tls");
    assert_eq!(h["mounted_by"], json!(["etcd"]));
    assert_eq!(h["reference"], "projected.sources[1].secret");
    assert_eq!(h["path"], "volumes[peer-tls].projected.sources[1].secret");
    assert_eq!(h["object_kind"], "Secret");
    assert_eq!(h["object_name"], "etcd-peer-tls-rotated");
    assert!(
        run.stderr.contains(
            "volume peer-tls: projected.sources[1].secret → Secret \"etcd-peer-tls-rotated\" not found"
        ),
        "{run}"
    );
    api.stop().await;
}

#[tokio::test]
async fn a_missing_pod_is_an_error_not_a_clean_report() {
    let api = api_with_everything(adopted_member_pod()).await;
    api.remove(&pod_path(NAMESPACE, POD));
    let run = pod_check(&api, &[]).await;
    let message = assert_error(&run, "not-found", "api");
    assert!(message.contains("Pod tenant-a/etcd-0 not found"), "{run}");
    api.stop().await;
}

#[tokio::test]
async fn forbidden_configmaps_are_a_configuration_error_naming_the_rbac_rule() {
    let api = api_with_everything(adopted_member_pod()).await.fault(
        config_map_path(NAMESPACE, CLUSTER_STATE),
        Fault::Status(403),
    );
    let run = pod_check(&api, &[]).await;
    let message = assert_error(&run, "forbidden", "configuration");
    assert!(
        message.contains("`get` on configmaps in namespace tenant-a"),
        "{run}"
    );
    assert!(
        message.contains(
            "cannot get resource \"configmaps\" in API group \"\" in the namespace \"tenant-a\""
        ),
        "{run}"
    );
    // A 403 is neither "missing" nor "clean".
    assert!(!run.stderr.contains("not found"), "{run}");
    api.stop().await;
}

#[tokio::test]
async fn an_api_server_error_is_an_error_not_a_clean_report() {
    let api = api_with_everything(adopted_member_pod())
        .await
        .fault(pod_path(NAMESPACE, POD), Fault::Status(500));
    let run = pod_check(&api, &[]).await;
    let message = assert_error(&run, "api", "api");
    assert!(message.contains("HTTP 500 InternalError"), "{run}");
    assert!(message.contains("etcdserver: request timed out"), "{run}");

    // A 5xx on a referenced object is no "not found" either.
    api.clear_faults();
    api.set_fault(secret_path(NAMESPACE, PEER_TLS), Fault::Status(500), None);
    let run = pod_check(&api, &[]).await;
    let message = assert_error(&run, "api", "api");
    assert!(message.contains("Secret tenant-a/etcd-peer-tls"), "{run}");
    api.stop().await;
}

#[tokio::test]
async fn an_api_server_slower_than_the_timeout_is_an_error_within_the_budget() {
    let api = api_with_everything(adopted_member_pod())
        .await
        .delay(secret_path(NAMESPACE, SERVER_TLS), Duration::from_secs(30));
    let run = pod_check(&api, &["--timeout", "1s"]).await;
    let message = assert_error(&run, "timeout", "api");
    assert!(message.contains("Secret tenant-a/etcd-server-tls"), "{run}");
    assert!(
        run.took < Duration::from_secs(5),
        "the 1 s budget was not kept\n{run}"
    );
    api.stop().await;
}

#[tokio::test]
async fn a_malformed_answer_is_an_error_not_a_clean_report() {
    let api = api_with_everything(adopted_member_pod()).await.fault(
        pod_path(NAMESPACE, POD),
        Fault::Raw(
            200,
            r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"#.to_owned(),
        ),
    );
    let run = pod_check(&api, &[]).await;
    let message = assert_error(&run, "malformed", "api");
    assert!(message.contains("Pod tenant-a/etcd-0"), "{run}");

    api.clear_faults();
    api.set_fault(
        secret_path(NAMESPACE, SERVER_TLS),
        Fault::Raw(200, "[1, 2, 3]".to_owned()),
        None,
    );
    let run = pod_check(&api, &[]).await;
    let message = assert_error(&run, "malformed", "api");
    assert!(message.contains("Secret tenant-a/etcd-server-tls"), "{run}");
    api.stop().await;
}

#[tokio::test]
async fn an_unreachable_api_server_is_an_error() {
    let api = FakeApi::start().await;
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::copy(api.kubeconfig_path(), &kubeconfig).unwrap_or_else(|e| panic!("{e}"));
    api.stop().await;
    let kubeconfig = kubeconfig.to_string_lossy().into_owned();
    let run = run_agent(
        &[
            "pod-check",
            "--pod-name",
            POD,
            "--namespace",
            NAMESPACE,
            "--kubeconfig",
            &kubeconfig,
            "--timeout",
            "1s",
            "-o",
            "json",
        ],
        &[],
    )
    .await;
    let message = assert_error(&run, "unreachable", "api");
    assert!(message.contains("cannot reach the API server"), "{run}");
    assert!(run.took < Duration::from_secs(5), "{run}");
}

#[tokio::test]
async fn without_a_pod_name_or_namespace_it_is_a_usage_error() {
    let run = run_agent(&["pod-check", "--namespace", NAMESPACE, "-o", "json"], &[]).await;
    let message = assert_error(&run, "usage", "configuration");
    assert!(
        message.contains("--pod-name (POD_NAME) is required"),
        "{run}"
    );

    let run = run_agent(&["pod-check", "-o", "json"], &[("POD_NAME", POD)]).await;
    let message = assert_error(&run, "usage", "configuration");
    assert!(
        message.contains("--namespace (POD_NAMESPACE) is required"),
        "{run}"
    );
}

#[tokio::test]
async fn a_missing_kubeconfig_is_a_configuration_error() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let missing = dir.path().join("no-such-kubeconfig");
    let missing = missing.to_string_lossy().into_owned();
    let run = run_agent(
        &[
            "pod-check",
            "--pod-name",
            POD,
            "--namespace",
            NAMESPACE,
            "--kubeconfig",
            &missing,
            "-o",
            "json",
        ],
        &[],
    )
    .await;
    let message = assert_error(&run, "client-config", "configuration");
    assert!(message.contains("no-such-kubeconfig"), "{run}");
}
