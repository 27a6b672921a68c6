//! `fleet` (issue 33) against the real kube-apiserver
//! (`tests/it/common/kube_apiserver.rs`): the RBAC authorizer, real
//! service-account tokens, the operator's CRDs, real list and watch calls.
//!
//! * A fleet with every condition present once — seven clusters of three
//!   members in two namespaces — and the view naming each, in the table and
//!   in JSON, the JSON checked field by field. The refused member's
//!   termination message and Event are the real `preflight`'s (run against the
//!   same server with the shipped Role), the missing-reference hazard is the
//!   real `pod-check`'s Event; Pod statuses are written through `pods/status`
//!   as a kubelet would (no kubelet runs here).
//! * Pagination: the same view with one object per page.
//! * `--watch` and `--serve` following a member's refusal and recovery.
//! * Least privilege: the shipped ClusterRole (`deploy/fleet`) alone gives a
//!   complete view; without any one of its rules, that resource is reported as
//!   not read (exit 51), never silently missing; a namespace the role is not
//!   bound in is reported as such.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Event, Pod, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, RoleBinding};
use k8s_openapi::jiff::Timestamp;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch,
    PatchParams, PostParams,
};
use kube::Client;
use serde_json::{json, Value};

use crate::common::*;

const GROUP: &str = "etcd-operator.cozystack.io";
const AGENT_IMAGE: &str = "ghcr.io/example/etcd-member-agent:0.1.0";
const ETCD_IMAGE: &str = "quay.io/coreos/etcd:v3.6.11";
const CLUSTER_LABEL: &str = "etcd-operator.cozystack.io/cluster";
const OPS_NS: &str = "fleet-ops";
const VIEWER: &str = "fleet-viewer";
const CLUSTER_ROLE_FILE: &str = "deploy/fleet/clusterrole.yaml";
const MISSING_CONFIG_MAP: &str = "etcd-cluster-state";
/// The witnesses' `leaseDurationSeconds`.
const WITNESS_SECS: i64 = 3600;
/// Renewed this long ago, a witness is stale.
const LONG_AGO: i64 = 2 * WITNESS_SECS;

fn from_json<T: serde::de::DeserializeOwned>(v: Value) -> T {
    serde_json::from_value(v).unwrap_or_else(|e| panic!("{e}"))
}

/// RFC 3339, `secs` seconds ago.
fn ago(secs: i64) -> String {
    Timestamp::from_second(Timestamp::now().as_second() - secs)
        .expect("a time")
        .to_string()
}

/// A stable 16-digit ID for `name`.
fn id_of(name: &str) -> String {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    name.hash(&mut h);
    format!("{:016x}", h.finish() | 1)
}

fn cluster_id_of(ns: &str, cluster: &str) -> String {
    id_of(&format!("{ns}/{cluster}"))
}

fn resource(kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(GROUP, "v1alpha2", kind), plural)
}

/// A server with the operator's CRDs, namespaces with `deploy/base` (the
/// member Pods' ServiceAccount and the agent's Role), and a viewer: a
/// ServiceAccount of [`OPS_NS`] with a real token.
pub(crate) struct World {
    api: KubeApiServer,
    admin: Client,
}

impl World {
    async fn start(namespaces: &[&str]) -> World {
        let api = KubeApiServer::start().await;
        let admin = api.admin().await;
        for ns in namespaces.iter().chain([&OPS_NS]) {
            api.create_namespace(ns).await;
            api.apply_deploy_base(ns).await;
        }
        let sas: Api<ServiceAccount> = Api::namespaced(admin.clone(), OPS_NS);
        sas.create(
            &PostParams::default(),
            &from_json(json!({"metadata": {"name": VIEWER}})),
        )
        .await
        .unwrap_or_else(|e| panic!("cannot create the viewer: {e}"));
        World { api, admin }
    }

    /// The shipped ClusterRole, created under `name` with `edit` applied to
    /// its rules.
    async fn cluster_role(&self, name: &str, edit: impl FnOnce(&mut Vec<Value>)) {
        let text = std::fs::read_to_string(repo().join(CLUSTER_ROLE_FILE))
            .unwrap_or_else(|e| panic!("cannot read {CLUSTER_ROLE_FILE}: {e}"));
        let mut doc: Value =
            serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("{CLUSTER_ROLE_FILE}: {e}"));
        doc["metadata"]["name"] = json!(name);
        let mut rules: Vec<Value> = doc["rules"].as_array().cloned().unwrap_or_default();
        edit(&mut rules);
        doc["rules"] = json!(rules);
        let roles: Api<ClusterRole> = Api::all(self.admin.clone());
        roles
            .create(&PostParams::default(), &from_json(doc))
            .await
            .unwrap_or_else(|e| panic!("cannot create ClusterRole {name}: {e}"));
    }

    /// Binds ClusterRole `role` to ServiceAccount `sa` of [`OPS_NS`] in every
    /// namespace (`None`) or in one.
    async fn bind(&self, role: &str, sa: &str, namespace: Option<&str>) {
        let subject = json!([{"kind": "ServiceAccount", "name": sa, "namespace": OPS_NS}]);
        let role_ref =
            json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role});
        let name = format!("{sa}-{role}");
        match namespace {
            None => {
                let api: Api<ClusterRoleBinding> = Api::all(self.admin.clone());
                api.create(
                    &PostParams::default(),
                    &from_json(json!({"metadata": {"name": name}, "roleRef": role_ref, "subjects": subject})),
                )
                .await
                .unwrap_or_else(|e| panic!("cannot bind {role}: {e}"));
            }
            Some(ns) => {
                let api: Api<RoleBinding> = Api::namespaced(self.admin.clone(), ns);
                api.create(
                    &PostParams::default(),
                    &from_json(json!({"metadata": {"name": name}, "roleRef": role_ref, "subjects": subject})),
                )
                .await
                .unwrap_or_else(|e| panic!("cannot bind {role} in {ns}: {e}"));
            }
        }
    }

    /// A kubeconfig with a real token of ServiceAccount `sa` of [`OPS_NS`].
    async fn kubeconfig_of(&self, sa: &str) -> PathBuf {
        let sas: Api<ServiceAccount> = Api::namespaced(self.admin.clone(), OPS_NS);
        if sas.get_opt(sa).await.ok().flatten().is_none() {
            sas.create(
                &PostParams::default(),
                &from_json(json!({"metadata": {"name": sa}})),
            )
            .await
            .unwrap_or_else(|e| panic!("cannot create {sa}: {e}"));
        }
        let token = self.api.token_for(OPS_NS, sa, None).await;
        self.api.token_kubeconfig(sa, &token)
    }

    /// The viewer with the shipped ClusterRole, bound cluster-wide.
    async fn viewer(&self) -> PathBuf {
        self.cluster_role("etcd-member-agent-fleet", |_| {}).await;
        self.bind("etcd-member-agent-fleet", VIEWER, None).await;
        self.kubeconfig_of(VIEWER).await
    }

    /// The kubeconfig of the member Pods' agent in `ns` (deploy/base's Role).
    async fn agent_kubeconfig(&self, ns: &str) -> PathBuf {
        let token = self.api.token_for(ns, AGENT_SERVICE_ACCOUNT, None).await;
        self.api.token_kubeconfig(&format!("agent-{ns}"), &token)
    }

    fn pods(&self, ns: &str) -> Api<Pod> {
        Api::namespaced(self.admin.clone(), ns)
    }

    /// The operator's records of `cluster`: its EtcdCluster (clusterID
    /// latched) and one EtcdMember per member (memberID latched, a voter).
    async fn records(&self, ns: &str, cluster: &str, members: &[String]) {
        let clusters: Api<DynamicObject> = Api::namespaced_with(
            self.admin.clone(),
            ns,
            &resource("EtcdCluster", "etcdclusters"),
        );
        clusters
            .create(
                &PostParams::default(),
                &from_json(json!({
                    "apiVersion": format!("{GROUP}/v1alpha2"), "kind": "EtcdCluster",
                    "metadata": {"name": cluster, "namespace": ns},
                    "spec": {"version": "3.6.11", "replicas": members.len()},
                })),
            )
            .await
            .unwrap_or_else(|e| panic!("cannot create EtcdCluster {cluster}: {e}"));
        clusters
            .patch_status(
                cluster,
                &PatchParams::default(),
                &Patch::Merge(json!({"status": {
                    "clusterID": cluster_id_of(ns, cluster),
                    "clusterToken": token_of(ns, cluster),
                }})),
            )
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let records: Api<DynamicObject> = Api::namespaced_with(
            self.admin.clone(),
            ns,
            &resource("EtcdMember", "etcdmembers"),
        );
        for m in members {
            records
                .create(
                    &PostParams::default(),
                    &from_json(json!({
                        "apiVersion": format!("{GROUP}/v1alpha2"), "kind": "EtcdMember",
                        "metadata": {"name": m, "namespace": ns, "labels": {CLUSTER_LABEL: cluster}},
                        "spec": {
                            "clusterName": cluster, "version": "3.6.11",
                            "storage": {"size": "1Gi", "medium": ""},
                            "initialCluster": initial_cluster(ns, cluster, members),
                            "clusterToken": token_of(ns, cluster),
                        },
                    })),
                )
                .await
                .unwrap_or_else(|e| panic!("cannot create EtcdMember {m}: {e}"));
            records
                .patch_status(
                    m,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"status": {"memberID": id_of(m), "isVoter": true}})),
                )
                .await
                .unwrap_or_else(|e| panic!("{e}"));
        }
    }

    /// Member Pod `name` as the operator builds it (the example Pod's
    /// containers, without volumes): the sidecar, preflight, etcd. Returns its UID.
    async fn pod(&self, ns: &str, cluster: &str, name: &str, etcd_extra: Value) -> String {
        let mut etcd = json!({"name": "etcd", "image": ETCD_IMAGE,
                              "command": ["etcd"], "args": [format!("--name={name}")]});
        if let (Some(e), Some(extra)) = (etcd.as_object_mut(), etcd_extra.as_object()) {
            e.extend(extra.clone());
        }
        let pod = json!({
            "metadata": {"name": name, "namespace": ns,
                         "labels": {CLUSTER_LABEL: cluster, "app.kubernetes.io/name": "etcd"}},
            "spec": {
                "nodeName": "node-1",
                "serviceAccountName": AGENT_SERVICE_ACCOUNT,
                "automountServiceAccountToken": false,
                "initContainers": [
                    {"name": "agent", "image": AGENT_IMAGE, "restartPolicy": "Always",
                     "command": ["/usr/local/bin/etcd-member-agent"], "args": ["serve"]},
                    {"name": "preflight", "image": AGENT_IMAGE,
                     "command": ["/usr/local/bin/etcd-member-agent"], "args": ["preflight"]},
                ],
                "containers": [etcd],
            },
        });
        let created = self
            .pods(ns)
            .create(&PostParams::default(), &from_json(pod))
            .await
            .unwrap_or_else(|e| panic!("cannot create Pod {ns}/{name}: {e}"));
        created.metadata.uid.unwrap_or_default()
    }

    /// Writes Pod `name`'s status through `pods/status`, as a kubelet.
    async fn status(&self, ns: &str, name: &str, status: Value) {
        self.pods(ns)
            .patch_status(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({ "status": status })),
            )
            .await
            .unwrap_or_else(|e| panic!("cannot write the status of {ns}/{name}: {e}"));
    }

    /// The witness Lease of `member`, as the sidecar writes it, renewed
    /// `renewed_ago` seconds ago. Its duration is an hour: no sidecar renews
    /// it here, and a test must not see it go stale while it runs.
    async fn witness(
        &self,
        ns: &str,
        member: &str,
        cluster_id: &str,
        index: u64,
        renewed_ago: i64,
    ) {
        let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
            Api::namespaced(self.admin.clone(), ns);
        let renewed =
            Timestamp::from_second(Timestamp::now().as_second() - renewed_ago).expect("a time");
        // The incarnation, as the sidecar records it (issue 29): the
        // EtcdCluster's UID and the SHA-256 of the token.
        let cluster = member.rsplit_once("-m").map(|(c, _)| c).unwrap_or(member);
        let records: Api<DynamicObject> = Api::namespaced_with(
            self.admin.clone(),
            ns,
            &resource("EtcdCluster", "etcdclusters"),
        );
        let cluster_uid = records
            .get_opt(cluster)
            .await
            .ok()
            .flatten()
            .and_then(|c| c.metadata.uid)
            .unwrap_or_default();
        let token_sha256 = token_sha256_of(ns, cluster);
        let lease = json!({
            "metadata": {
                "name": format!("etcd-witness-{member}"), "namespace": ns,
                "labels": {"app.kubernetes.io/name": "etcd-member-agent",
                           "app.kubernetes.io/component": "witness"},
                "annotations": {
                    "etcd-member-agent.cozystack.io/member-id": id_of(member),
                    "etcd-member-agent.cozystack.io/cluster-id": cluster_id,
                    "etcd-member-agent.cozystack.io/raft-term": "4",
                    "etcd-member-agent.cozystack.io/raft-index": index.to_string(),
                    "etcd-member-agent.cozystack.io/pod-uid": format!("uid-of-{member}"),
                    "etcd-member-agent.cozystack.io/revision": (index * 2).to_string(),
                    "etcd-member-agent.cozystack.io/token-sha256": token_sha256,
                    "etcd-member-agent.cozystack.io/cluster-uid": cluster_uid,
                    "etcd-member-agent.cozystack.io/format": "2",
                },
            },
            "spec": {"holderIdentity": member, "leaseDurationSeconds": WITNESS_SECS,
                     "renewTime": renewed.strftime("%Y-%m-%dT%H:%M:%S.%6fZ").to_string()},
        });
        let leases_api = leases;
        match leases_api.get_opt(&format!("etcd-witness-{member}")).await {
            Ok(Some(_)) => {
                leases_api
                    .patch(
                        &format!("etcd-witness-{member}"),
                        &PatchParams::default(),
                        &Patch::Merge(lease),
                    )
                    .await
                    .unwrap_or_else(|e| panic!("{e}"));
            }
            _ => {
                leases_api
                    .create(&PostParams::default(), &from_json(lease))
                    .await
                    .unwrap_or_else(|e| panic!("cannot create the witness of {member}: {e}"));
            }
        }
    }

    /// A Warning Event of the kubelet about Pod `pod`'s etcd container.
    async fn kubelet_event(&self, ns: &str, pod: &str, uid: &str, reason: &str, message: &str) {
        let events: Api<Event> = Api::namespaced(self.admin.clone(), ns);
        events
            .create(
                &PostParams::default(),
                &from_json(json!({
                    "metadata": {"name": format!("{pod}.kubelet-{}", reason.to_lowercase()), "namespace": ns},
                    "involvedObject": {"apiVersion": "v1", "kind": "Pod", "name": pod, "namespace": ns,
                                       "uid": uid, "fieldPath": "spec.containers{etcd}"},
                    "reason": reason, "message": message, "type": "Warning", "count": 12,
                    "firstTimestamp": ago(600), "lastTimestamp": ago(5),
                    "source": {"component": "kubelet", "host": "node-1"},
                })),
            )
            .await
            .unwrap_or_else(|e| panic!("cannot create the kubelet's Event: {e}"));
    }
}

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn token_of(ns: &str, cluster: &str) -> String {
    format!("{ns}-{cluster}-token")
}

fn token_sha256_of(ns: &str, cluster: &str) -> String {
    use sha2::Digest as _;
    sha2::Sha256::digest(token_of(ns, cluster).as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn initial_cluster(ns: &str, cluster: &str, members: &[String]) -> String {
    members
        .iter()
        .map(|m| format!("{m}=https://{m}.{cluster}.{ns}.svc:2380"))
        .collect::<Vec<_>>()
        .join(",")
}

fn names(cluster: &str) -> Vec<String> {
    (1..=3).map(|i| format!("{cluster}-m{i}")).collect()
}

// ---------------------------------------------------------------------------
// Pod statuses, as a kubelet writes them.

fn running(name: &str, image: &str, ready: bool, restarts: i32, since: &str) -> Value {
    json!({"name": name, "image": image, "imageID": "", "ready": ready, "started": true,
           "restartCount": restarts, "state": {"running": {"startedAt": since}}})
}

fn start_message(member: &str, cluster_id: &str) -> String {
    json!({"verdict": "start", "exit_code": 0, "member_id": id_of(member), "cluster_id": cluster_id,
           "reason": "the directory is initialized and every source agrees", "remedy": ""})
    .to_string()
}

/// The status of a member whose preflight said `start` and whose etcd is
/// Ready (`ready`) or not, since `since_secs` ago; `etcd_state` replaces the
/// etcd container's state when given.
fn member_status(
    member: &str,
    cluster_id: &str,
    ready: bool,
    since_secs: i64,
    etcd_state: Option<Value>,
    etcd_restarts: i32,
) -> Value {
    let mut etcd = running("etcd", ETCD_IMAGE, ready, etcd_restarts, &ago(3000));
    if let Some(state) = etcd_state {
        etcd["state"] = state;
        etcd["started"] = json!(false);
    }
    let r = if ready { "True" } else { "False" };
    json!({
        "phase": if ready { "Running" } else { "Pending" },
        "conditions": [
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": ago(3700)},
            {"type": "Initialized", "status": "True", "lastTransitionTime": ago(3500)},
            {"type": "ContainersReady", "status": r, "lastTransitionTime": ago(since_secs)},
            {"type": "Ready", "status": r, "lastTransitionTime": ago(since_secs)},
        ],
        "initContainerStatuses": [
            running("agent", AGENT_IMAGE, true, 0, &ago(3600)),
            {"name": "preflight", "image": AGENT_IMAGE, "imageID": "", "ready": false, "restartCount": 0,
             "state": {"terminated": {"exitCode": 0, "reason": "Completed",
                                      "message": start_message(member, cluster_id),
                                      "startedAt": ago(3560), "finishedAt": ago(3550)}}},
        ],
        "containerStatuses": [etcd],
    })
}

/// The status of a member whose preflight refused with `message` (its
/// termination message) and `code`, retried `restarts` times.
fn refused_status(message: &str, code: i32, restarts: i32, finished: &str) -> Value {
    json!({
        "phase": "Pending",
        "conditions": [
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": ago(900)},
            {"type": "Initialized", "status": "False", "reason": "ContainersNotInitialized",
             "lastTransitionTime": ago(900)},
            {"type": "ContainersReady", "status": "False", "lastTransitionTime": ago(900)},
            {"type": "Ready", "status": "False", "lastTransitionTime": ago(900)},
        ],
        "initContainerStatuses": [
            running("agent", AGENT_IMAGE, true, 0, &ago(890)),
            {"name": "preflight", "image": AGENT_IMAGE, "imageID": "", "ready": false, "restartCount": restarts,
             "state": {"waiting": {"reason": "CrashLoopBackOff",
                                   "message": "back-off 2m40s restarting failed container=preflight"}},
             "lastState": {"terminated": {"exitCode": code, "reason": "Error", "message": message,
                                          "startedAt": ago(40), "finishedAt": finished}}},
        ],
        "containerStatuses": [
            {"name": "etcd", "image": ETCD_IMAGE, "imageID": "", "ready": false, "started": false,
             "restartCount": 0, "state": {"waiting": {"reason": "PodInitializing"}}},
        ],
    })
}

// ---------------------------------------------------------------------------
// Running fleet.

/// `fleet ARGS` with `kubeconfig`, off the runtime.
async fn fleet(kubeconfig: &std::path::Path, args: &[&str]) -> AgentRun {
    let mut argv = vec!["fleet".to_owned(), "--color=never".to_owned()];
    argv.extend(args.iter().map(|a| (*a).to_owned()));
    let env = vec![("KUBECONFIG".to_owned(), kubeconfig.display().to_string())];
    match tokio::task::spawn_blocking(move || run_agent(&argv, &env)).await {
        Ok(run) => run,
        Err(e) => std::panic::resume_unwind(e.into_panic()),
    }
}

/// The conditions of each cluster in a `-o json` document: `ns/cluster` →
/// condition names.
fn conditions(doc: &Value) -> BTreeMap<String, Vec<String>> {
    doc["clusters"]
        .as_array()
        .expect("clusters")
        .iter()
        .map(|c| {
            (
                format!(
                    "{}/{}",
                    c["namespace"].as_str().unwrap(),
                    c["name"].as_str().unwrap()
                ),
                c["conditions"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|k| k["kind"].as_str().unwrap().to_owned())
                    .collect(),
            )
        })
        .collect()
}

fn cluster<'a>(doc: &'a Value, ns: &str, name: &str) -> &'a Value {
    doc["clusters"]
        .as_array()
        .expect("clusters")
        .iter()
        .find(|c| c["namespace"] == ns && c["name"] == name)
        .unwrap_or_else(|| panic!("no cluster {ns}/{name} in {doc}"))
}

fn member<'a>(cluster: &'a Value, name: &str) -> &'a Value {
    cluster["members"]
        .as_array()
        .expect("members")
        .iter()
        .find(|m| m["member"] == name)
        .unwrap_or_else(|| panic!("no member {name} in {cluster}"))
}

/// `doc` without its clock: every `*_seconds` field and `generated_at`.
fn timeless(doc: &Value) -> Value {
    match doc {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(k, _)| !(k.ends_with("_seconds") || *k == "generated_at"))
                .map(|(k, v)| (k.clone(), timeless(v)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(timeless).collect()),
        other => other.clone(),
    }
}

// ---------------------------------------------------------------------------
// The fleet with every condition.

const NS_A: &str = "fleet-a";
const NS_B: &str = "fleet-b";

/// What the every-condition fleet holds, for the assertions.
struct Built {
    /// The refused member's preflight run (its JSON document).
    preflight: Value,
    /// Its termination message, as written into the Pod status.
    termination_message: String,
    /// Its `finishedAt`.
    finished: String,
    /// The refused Pod's UID.
    refused_uid: String,
    /// The lost cluster's first member's UID (pod-check reported on it).
    hazard_uid: String,
}

/// Seven clusters of three members, each condition in exactly one:
///
/// | cluster | conditions |
/// |---|---|
/// | fleet-a/lost | quorum-lost, members-not-ready, hazards (m2 stuck in CreateContainerConfigError, m3 crash-looping; m1 references a deleted ConfigMap) |
/// | fleet-a/refused | quorum-at-risk, members-refused (m3: the real preflight's refuse-empty-formed) |
/// | fleet-b/split | cluster-id-mismatch (m3's witness) |
/// | fleet-b/stale | witness-stale (m2's Lease renewed 10 minutes ago) |
/// | fleet-b/unwitnessed | witness-missing (m1 has no Lease) |
/// | fleet-b/lagging | raft-lag (m3 at 100, the others at 50000) |
/// | fleet-a/healthy | none |
async fn build_fleet(w: &World) -> Built {
    let healthy_clusters = [
        (NS_A, "healthy"),
        (NS_B, "split"),
        (NS_B, "stale"),
        (NS_B, "unwitnessed"),
        (NS_B, "lagging"),
    ];
    for (ns, c) in healthy_clusters {
        let members = names(c);
        w.records(ns, c, &members).await;
        let id = cluster_id_of(ns, c);
        for m in &members {
            w.pod(ns, c, m, json!({})).await;
            w.status(ns, m, member_status(m, &id, true, 3000, None, 0))
                .await;
            let (cluster_id, index, renewed) = match (c, m.as_str()) {
                ("split", "split-m3") => ("1111111111111111".to_owned(), 50_000, 3),
                ("stale", "stale-m2") => (id.clone(), 50_000, LONG_AGO),
                ("unwitnessed", "unwitnessed-m1") => continue,
                ("lagging", "lagging-m3") => (id.clone(), 100, 3),
                _ => (id.clone(), 50_000, 3),
            };
            w.witness(ns, m, &cluster_id, index, renewed).await;
        }
    }

    // lost: m1 Ready but referencing a ConfigMap that is gone (the real
    // pod-check reports it as an Event), m2 stuck, m3 crash-looping.
    let members = names("lost");
    w.records(NS_A, "lost", &members).await;
    let id = cluster_id_of(NS_A, "lost");
    let env_from = json!({"envFrom": [{"configMapRef": {"name": MISSING_CONFIG_MAP}}]});
    let hazard_uid = w.pod(NS_A, "lost", "lost-m1", env_from.clone()).await;
    w.status(
        NS_A,
        "lost-m1",
        member_status("lost-m1", &id, true, 3000, None, 0),
    )
    .await;
    w.pod(NS_A, "lost", "lost-m2", env_from).await;
    let stuck = json!({"waiting": {"reason": "CreateContainerConfigError",
        "message": format!("configmap \"{MISSING_CONFIG_MAP}\" not found")}});
    w.status(
        NS_A,
        "lost-m2",
        member_status("lost-m2", &id, false, 600, Some(stuck), 0),
    )
    .await;
    let crashing_uid = w.pod(NS_A, "lost", "lost-m3", json!({})).await;
    let crash = json!({"waiting": {"reason": "CrashLoopBackOff",
        "message": "back-off 5m0s restarting failed container=etcd"}});
    w.status(
        NS_A,
        "lost-m3",
        member_status("lost-m3", &id, false, 600, Some(crash), 9),
    )
    .await;
    w.kubelet_event(
        NS_A,
        "lost-m3",
        &crashing_uid,
        "Unhealthy",
        "Readiness probe failed: HTTP probe failed with statuscode: 503",
    )
    .await;
    for m in &members {
        w.witness(
            NS_A,
            m,
            &id,
            50_000,
            if m == "lost-m1" { 3 } else { LONG_AGO },
        )
        .await;
    }
    let agent = w.agent_kubeconfig(NS_A).await;
    let kubeconfig = agent.display().to_string();
    let run = tokio::task::spawn_blocking(move || {
        run_agent(
            ["pod-check", "-o", "json"],
            &[
                ("POD_NAME", "lost-m1"),
                ("POD_NAMESPACE", NS_A),
                ("KUBECONFIG", kubeconfig.as_str()),
            ],
        )
    })
    .await
    .unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()));
    assert_eq!(run.code, 40, "pod-check finds the missing ConfigMap\n{run}");

    // refused: m3's volume came back empty; the real preflight refuses.
    let members = names("refused");
    w.records(NS_A, "refused", &members).await;
    let id = cluster_id_of(NS_A, "refused");
    for m in &members[..2] {
        w.pod(NS_A, "refused", m, json!({})).await;
        w.status(NS_A, m, member_status(m, &id, true, 3000, None, 0))
            .await;
        w.witness(NS_A, m, &id, 50_000, 3).await;
    }
    let refused_uid = w.pod(NS_A, "refused", "refused-m3", json!({})).await;
    // Its witness from before the wipe: not renewed since.
    w.witness(NS_A, "refused-m3", &id, 49_000, LONG_AGO).await;
    let scratch = tempfile::tempdir().expect("tempdir");
    let termination_log = scratch.path().join("termination-log");
    let env: Vec<(String, String)> = vec![
        (
            "ETCD_DATA_DIR".into(),
            scratch.path().join("data").display().to_string(),
        ),
        ("ETCD_MEMBER_NAME".into(), "refused-m3".into()),
        (
            "ETCD_INITIAL_CLUSTER".into(),
            initial_cluster(NS_A, "refused", &members),
        ),
        (
            "ETCD_INITIAL_CLUSTER_TOKEN".into(),
            token_of(NS_A, "refused"),
        ),
        ("ETCD_INITIAL_CLUSTER_STATE".into(), "existing".into()),
        (
            "ETCD_PEER_ENDPOINTS".into(),
            format!("http://127.0.0.1:{}", free_port()),
        ),
        ("AGENT_KUBE".into(), "true".into()),
        ("AGENT_TIMEOUT".into(), "10s".into()),
        ("POD_NAMESPACE".into(), NS_A.into()),
        ("POD_NAME".into(), "refused-m3".into()),
        ("POD_UID".into(), refused_uid.clone()),
        ("KUBECONFIG".into(), agent.display().to_string()),
        (
            "TERMINATION_LOG".into(),
            termination_log.display().to_string(),
        ),
    ];
    let run = tokio::task::spawn_blocking(move || run_agent(["preflight", "-o", "json"], &env))
        .await
        .unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()));
    assert_eq!(run.code, 10, "{run}");
    assert_eq!(run.json()["verdict"], "refuse-empty-formed", "{run}");
    let termination_message = std::fs::read_to_string(&termination_log)
        .unwrap_or_else(|e| panic!("no termination message: {e}\n{run}"));
    let finished = ago(30);
    w.status(
        NS_A,
        "refused-m3",
        refused_status(&termination_message, 10, 4, &finished),
    )
    .await;
    Built {
        preflight: run.json().clone(),
        termination_message,
        finished,
        refused_uid,
        hazard_uid,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_with_every_condition_once_is_named_in_the_table_and_in_json() {
    let w = World::start(&[NS_A, NS_B]).await;
    let built = build_fleet(&w).await;
    let viewer = w.viewer().await;

    // ---- JSON, cluster by cluster.
    let run = fleet(&viewer, &["-A", "-o", "json"]).await;
    run.assert_code(50);
    let doc = run.json();
    let want: BTreeMap<String, Vec<String>> = [
        (
            "fleet-a/lost",
            &["quorum-lost", "members-not-ready", "hazards"][..],
        ),
        ("fleet-a/refused", &["quorum-at-risk", "members-refused"]),
        ("fleet-b/split", &["cluster-id-mismatch"]),
        ("fleet-b/stale", &["witness-stale"]),
        ("fleet-b/unwitnessed", &["witness-missing"]),
        ("fleet-b/lagging", &["raft-lag"]),
        ("fleet-a/healthy", &[]),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.iter().map(|s| (*s).to_owned()).collect()))
    .collect();
    assert_eq!(conditions(doc), want, "{run}");
    let order: Vec<String> = doc["clusters"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        order,
        [
            "lost",
            "refused",
            "split",
            "stale",
            "unwitnessed",
            "lagging",
            "healthy"
        ],
        "worst first"
    );

    // ---- The document, field by field.
    let keys: Vec<&str> = doc
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        keys,
        [
            "clusters",
            "complete",
            "exit_code",
            "generated_at",
            "needs_attention",
            "not_served",
            "summary",
            "unread"
        ]
    );
    assert_eq!(doc["exit_code"], 50);
    assert_eq!(doc["needs_attention"], true);
    assert_eq!(doc["complete"], true);
    assert_eq!(doc["unread"], json!([]));
    assert_eq!(doc["not_served"], json!([]));
    assert_eq!(
        doc["summary"],
        json!({
            "clusters": 7, "members": 21, "refused": 1, "quorum_lost": 1, "quorum_at_risk": 1,
            "cluster_id_mismatch": 1, "not_ready": 2, "witness_stale": 1, "witness_missing": 1,
            "lagging": 1, "with_hazards": 2, "unread": 0,
            "text": "7 clusters, 21 members: 1 refused, 1 quorum lost, 1 quorum at risk, \
                     1 cluster ID mismatch, 2 not ready, 1 stale witness, 1 without witness, \
                     1 lagging, 2 with hazards",
        })
    );

    // The refused cluster's line.
    let refused = cluster(doc, NS_A, "refused");
    let id = cluster_id_of(NS_A, "refused");
    let events: Api<Event> = Api::namespaced(w.admin.clone(), NS_A);
    let event = events
        .list(&ListParams::default().fields("involvedObject.name=refused-m3"))
        .await
        .unwrap()
        .items
        .into_iter()
        .find(|e| e.reason.as_deref() == Some("refuse-empty-formed"))
        .expect("the real preflight's Event");
    assert_eq!(
        event.involved_object.uid.as_deref(),
        Some(built.refused_uid.as_str())
    );
    let event_first = event
        .first_timestamp
        .as_ref()
        .map(|t| t.0.to_string())
        .unwrap();
    let conds = refused["conditions"].as_array().unwrap();
    assert_eq!(
        timeless(refused)
            .as_object()
            .unwrap()
            .keys()
            .collect::<Vec<_>>(),
        [
            "cluster_id",
            "cluster_ids",
            "conditions",
            "health",
            "healthy_voters",
            "member_count",
            "members",
            "name",
            "namespace",
            "quorum",
            "replicas",
            "voters"
        ]
    );
    assert_eq!(refused["health"], "critical");
    assert_eq!(
        (
            &refused["member_count"],
            &refused["voters"],
            &refused["healthy_voters"],
            &refused["quorum"],
            &refused["replicas"]
        ),
        (&json!(3), &json!(3), &json!(2), &json!(2), &json!(3))
    );
    assert_eq!(refused["cluster_id"], id.as_str());
    assert_eq!(
        refused["cluster_ids"],
        json!([{"cluster_id": id, "claimed_by": ["refused-m1", "refused-m2", "refused-m3", "EtcdCluster"]}])
    );
    assert_eq!(
        timeless(&conds[0]),
        json!({"kind": "quorum-at-risk", "severity": "critical", "members": ["refused-m3"],
               "since": event_first, "detail": "2 of 3 voters healthy, quorum 2: one more loss loses it"})
    );
    assert_eq!(
        timeless(&conds[1]),
        json!({"kind": "members-refused", "severity": "critical", "members": ["refused-m3"],
               "since": event_first, "detail": "refused-m3: refuse-empty-formed (exit 10)"})
    );
    let for_secs = conds[1]["for_seconds"].as_i64().unwrap();
    assert!(
        (0..patience().as_secs() as i64 + 60).contains(&for_secs),
        "{}",
        conds[1]
    );

    // The refused member's row.
    let m = member(refused, "refused-m3");
    assert_eq!(
        refused["members"][0]["member"], "refused-m3",
        "the worst member first"
    );
    let message: Value = serde_json::from_str(&built.termination_message).unwrap();
    let pf = &built.preflight;
    assert_eq!(
        message["reason"], pf["reason"],
        "the termination message is preflight's"
    );
    let witness_renewed = m["witness"]["renewed_at"].as_str().unwrap().to_owned();
    let refused_uid_of_record = Api::<DynamicObject>::namespaced_with(
        w.admin.clone(),
        NS_A,
        &resource("EtcdCluster", "etcdclusters"),
    )
    .get("refused")
    .await
    .unwrap()
    .metadata
    .uid
    .unwrap();
    let mut expected = json!({
        "member": "refused-m3",
        "pod": "refused-m3",
        "node": "node-1",
        "status": "refused",
        "guarded": true,
        "voter": true,
        "recorded_member_id": id_of("refused-m3"),
        "verdict": {
            "container": "preflight",
            "verdict": "refuse-empty-formed",
            "exit_code": 10,
            "refused": true,
            "row": message.get("row").cloned().unwrap_or(Value::Null),
            "reason": pf["reason"],
            "remedy": pf["remedy"],
            "member_id": null,
            "cluster_id": null,
            "at": built.finished,
            "refused_since": event_first,
            "restarts": 4,
            "state": "waiting (CrashLoopBackOff)",
            "source": "termination-message",
        },
        "witness": {
            "lease": "etcd-witness-refused-m3",
            "member_id": id_of("refused-m3"),
            "cluster_id": id,
            "raft_term": 4,
            "raft_index": 49000,
            "holder": "refused-m3",
            "renewed_at": witness_renewed,
            "stale": true,
            "revision": 98000,
            "token_sha256": token_sha256_of(NS_A, "refused"),
            "cluster_uid": refused_uid_of_record,
            "other_incarnation": false,
            "problems": [],
        },
        "readiness": {
            "ready": false,
            "since": null,
            "detail": "preflight refused (refuse-empty-formed)",
            "probe": null,
        },
        "hazards": [],
        "restarts": {"preflight": 4},
        "conditions": ["quorum-at-risk", "members-refused"],
    });
    // The Ready condition's time, as written (15 minutes ago).
    expected["readiness"]["since"] = m["readiness"]["since"].clone();
    assert_eq!(timeless(m), expected);
    assert!(m["readiness"]["since"].is_string(), "{m}");
    let age = m["verdict"]["age_seconds"].as_i64().unwrap();
    assert!(
        (30..30 + patience().as_secs() as i64 + 60).contains(&age),
        "{m}"
    );
    assert!(
        m["witness"]["age_seconds"].as_i64().unwrap() >= LONG_AGO,
        "{m}"
    );

    // A Ready member's row.
    let ok = member(refused, "refused-m1");
    assert_eq!(ok["status"], "ready");
    assert_eq!(ok["readiness"]["detail"], "ready");
    assert_eq!(ok["readiness"]["ready"], true);
    assert_eq!(ok["verdict"]["verdict"], "start");
    assert_eq!(ok["verdict"]["refused"], false);
    assert_eq!(ok["verdict"]["member_id"], id_of("refused-m1").as_str());
    assert_eq!(ok["witness"]["stale"], false);
    assert_eq!(ok["conditions"], json!([]));

    // The lost cluster: what not-ready, hazards and the probe say.
    let lost = cluster(doc, NS_A, "lost");
    assert_eq!(
        (&lost["healthy_voters"], &lost["quorum"]),
        (&json!(1), &json!(2))
    );
    let conds = lost["conditions"].as_array().unwrap();
    assert_eq!(conds[0]["detail"], "1 of 3 voters healthy, quorum 2");
    assert_eq!(conds[0]["members"], json!(["lost-m2", "lost-m3"]));
    assert_eq!(conds[1]["members"], json!(["lost-m2", "lost-m3"]));
    assert_eq!(
        conds[1]["detail"],
        "lost-m2 (etcd waiting (CreateContainerConfigError)), lost-m3 (etcd waiting (CrashLoopBackOff))"
    );
    assert_eq!(conds[2]["members"], json!(["lost-m1", "lost-m2"]));
    assert_eq!(
        conds[2]["detail"],
        "lost-m1: missing-reference; lost-m2: stuck-container"
    );
    let m1 = member(lost, "lost-m1");
    assert_eq!(m1["hazards"].as_array().unwrap().len(), 1, "{m1}");
    assert_eq!(m1["hazards"][0]["kind"], "missing-reference");
    assert_eq!(m1["hazards"][0]["source"], "event");
    assert!(
        m1["hazards"][0]["message"]
            .as_str()
            .unwrap()
            .contains(&format!("ConfigMap \"{MISSING_CONFIG_MAP}\" not found")),
        "{m1}"
    );
    let hazard_event = events
        .list(&ListParams::default().fields("involvedObject.name=lost-m1,reason=missing-reference"))
        .await
        .unwrap()
        .items;
    assert_eq!(hazard_event.len(), 1, "pod-check wrote one Event");
    assert_eq!(
        hazard_event[0].involved_object.uid.as_deref(),
        Some(built.hazard_uid.as_str())
    );
    let m2 = member(lost, "lost-m2");
    assert_eq!(m2["hazards"][0]["kind"], "stuck-container");
    assert_eq!(m2["hazards"][0]["source"], "pod-status");
    assert_eq!(m2["status"], "not-ready");
    let m3 = member(lost, "lost-m3");
    assert_eq!(
        m3["readiness"]["probe"]["message"],
        "Readiness probe failed: HTTP probe failed with statuscode: 503"
    );
    assert_eq!(m3["readiness"]["probe"]["count"], 12);
    assert_eq!(m3["restarts"], json!({"etcd": 9}));

    // The others' details.
    let split = cluster(doc, NS_B, "split");
    assert_eq!(split["cluster_id"], Value::Null);
    assert_eq!(
        split["conditions"][0]["detail"],
        format!(
            "1111111111111111 (split-m3) vs {} (split-m1, split-m2, EtcdCluster)",
            cluster_id_of(NS_B, "split")
        )
    );
    assert_eq!(split["conditions"][0]["members"], json!(["split-m3"]));
    let lagging = cluster(doc, NS_B, "lagging");
    assert_eq!(
        lagging["conditions"][0]["detail"],
        "lagging-m3 at 100, 49900 behind lagging-m1 (50000)"
    );
    let stale = cluster(doc, NS_B, "stale");
    assert_eq!(stale["conditions"][0]["members"], json!(["stale-m2"]));
    // Stale since its renewal plus its duration.
    assert!(stale["conditions"][0]["for_seconds"].as_i64().unwrap() >= LONG_AGO - WITNESS_SECS);
    let unwitnessed = cluster(doc, NS_B, "unwitnessed");
    assert_eq!(
        unwitnessed["conditions"][0]["detail"],
        "no Lease etcd-witness-unwitnessed-m1"
    );

    // ---- The same view, one object per page.
    let paged = fleet(&viewer, &["-A", "-o", "json", "--chunk-size", "1"]).await;
    paged.assert_code(50);
    assert_eq!(
        timeless(paged.json()),
        timeless(doc),
        "one object per page gives the same view"
    );

    // ---- YAML is the same document.
    let yaml = fleet(&viewer, &["-A", "-o", "yaml"]).await;
    yaml.assert_code(50);
    let from_yaml: Value = serde_saphyr::from_str(&yaml.stdout)
        .unwrap_or_else(|e| panic!("-o yaml is not YAML: {e}\n{yaml}"));
    assert_eq!(
        timeless(&from_yaml),
        timeless(doc),
        "-o yaml and -o json agree"
    );

    // ---- As a kubectl plugin: the binary called kubectl-etcd_guard is fleet.
    let bin_dir = tempfile::tempdir().expect("tempdir");
    let plugin = bin_dir.path().join("kubectl-etcd_guard");
    std::os::unix::fs::symlink(AGENT_BIN, &plugin).expect("symlink");
    let kubeconfig = viewer.display().to_string();
    let run = tokio::task::spawn_blocking(move || {
        let mut cmd = std::process::Command::new(&plugin);
        cmd.env_clear()
            .args(["-A", "-o", "json", "--kubeconfig", &kubeconfig]);
        run_command(cmd)
    })
    .await
    .unwrap();
    run.assert_code(50);
    assert_eq!(
        timeless(run.json()),
        timeless(doc),
        "kubectl etcd-guard is fleet"
    );

    // ---- --only-problems leaves the healthy cluster out.
    let problems = fleet(&viewer, &["-A", "--only-problems"]).await;
    assert!(!problems.stdout.contains("healthy-m1"), "{problems}");
    assert!(problems.stdout.contains("lagging-m3"), "{problems}");

    // ---- The table names each condition in its cluster's line.
    let table = fleet(&viewer, &["-A"]).await;
    table.assert_code(50);
    let lines: Vec<&str> = table.stdout.lines().collect();
    assert!(
        lines[0].starts_with("NAMESPACE") && lines[0].contains("CONDITIONS"),
        "{table}"
    );
    for (key, kinds) in &want {
        let (ns, name) = key.split_once('/').unwrap();
        let line = lines
            .iter()
            .find(|l| {
                let mut words = l.split_whitespace();
                words.next() == Some(ns) && words.next() == Some(name)
            })
            .unwrap_or_else(|| panic!("no line for {key}\n{table}"));
        for kind in ConditionNames::ALL {
            assert_eq!(
                line.contains(&format!("{kind}:")) || line.contains(&format!("{kind} for")),
                kinds.iter().any(|k| k == kind),
                "{key}: {kind}\n{line}"
            );
        }
    }
    assert!(
        lines.iter().any(|l| l.contains("refused-m3")
            && l.contains("refused")
            && l.contains("refuse-empty-formed (10)")),
        "{table}"
    );
    assert_eq!(
        lines.last().copied(),
        doc["summary"]["text"].as_str(),
        "the summary closes the table\n{table}"
    );
    assert!(!table.stdout.contains('\x1b'), "no colour off a terminal");
}

/// The condition names, as the table prints them.
struct ConditionNames;

impl ConditionNames {
    const ALL: [&'static str; 9] = [
        "quorum-lost",
        "quorum-at-risk",
        "cluster-id-mismatch",
        "members-refused",
        "members-not-ready",
        "witness-stale",
        "witness-missing",
        "raft-lag",
        "hazards",
    ];
}

/// No usable kubeconfig: a configuration error (2), and with `-o json` still
/// one document saying so.
#[test]
fn an_unusable_kubeconfig_is_a_configuration_error_with_a_json_document() {
    let run = run_agent(
        [
            "fleet",
            "-A",
            "-o",
            "json",
            "--kubeconfig",
            "/nonexistent/kubeconfig",
        ],
        &[("HOME", "/nonexistent")],
    );
    run.assert_code(2);
    assert_eq!(run.json()["exit_code"], 2, "{run}");
    assert_eq!(run.json()["error"]["kind"], "usage", "{run}");
    assert!(
        run.json()["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("/nonexistent/kubeconfig"),
        "{run}"
    );
    let run = run_agent(
        ["fleet", "-n", "Not_A_Namespace", "-o", "json"],
        &[("HOME", "/x")],
    );
    run.assert_code(2);
    assert_eq!(run.json()["error"]["kind"], "usage", "{run}");
}

// ---------------------------------------------------------------------------
// Least privilege, by the real authorizer.

/// One healthy cluster of three in `ns`.
async fn healthy(w: &World, ns: &str, name: &str) {
    let members = names(name);
    w.records(ns, name, &members).await;
    let id = cluster_id_of(ns, name);
    for m in &members {
        w.pod(ns, name, m, json!({})).await;
        w.status(ns, m, member_status(m, &id, true, 3000, None, 0))
            .await;
        w.witness(ns, m, &id, 1000, 3).await;
    }
}

fn unread(doc: &Value) -> Vec<(String, String, String)> {
    doc["unread"]
        .as_array()
        .expect("unread")
        .iter()
        .map(|u| {
            (
                u["resource"].as_str().unwrap().to_owned(),
                u["namespace"].as_str().unwrap_or("*").to_owned(),
                u["error"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_shipped_cluster_role_is_enough_each_rule_is_needed_and_what_is_denied_is_named() {
    let w = World::start(&[NS_A, NS_B]).await;
    healthy(&w, NS_A, "etcd").await;
    healthy(&w, NS_B, "etcd").await;

    // Read-only: list and watch, nothing else.
    let text = std::fs::read_to_string(repo().join(CLUSTER_ROLE_FILE)).unwrap();
    let role: Value = serde_saphyr::from_str(&text).unwrap();
    for rule in role["rules"].as_array().unwrap() {
        assert_eq!(rule["verbs"], json!(["list", "watch"]), "{rule}");
    }

    // With the role alone, bound cluster-wide: complete, nothing to do.
    let viewer = w.viewer().await;
    let run = fleet(&viewer, &["-A", "-o", "json"]).await;
    run.assert_code(0);
    assert_eq!(run.json()["complete"], true, "{run}");
    assert_eq!(unread(run.json()), [], "{run}");
    assert_eq!(
        run.json()["summary"]["text"],
        "2 clusters, 6 members: all clear"
    );
    // The same token cannot GET a Pod: the view never needed to.
    let client = client_from(&viewer).await;
    let pods: Api<Pod> = Api::namespaced(client, NS_A);
    match pods.get("etcd-m1").await {
        Err(kube::Error::Api(s)) => assert_eq!(s.code, 403, "{s:?}"),
        other => panic!("a viewer could GET a Pod: {other:?}"),
    }

    // Without each rule in turn: that resource is reported as not read.
    let cases: [(&str, &[&str]); 3] = [
        ("", &["pods", "agent-events", "probe-events"]),
        ("coordination.k8s.io", &["leases"]),
        (GROUP, &["etcd-clusters", "etcd-members"]),
    ];
    for (i, (group, lost)) in cases.iter().enumerate() {
        let role = format!("fleet-without-{i}");
        let group = (*group).to_owned();
        w.cluster_role(&role, |rules| {
            rules.retain(|r| r["apiGroups"] != json!([group]));
        })
        .await;
        let sa = format!("viewer-{i}");
        w.bind(&role, &sa, None).await;
        let kubeconfig = w.kubeconfig_of(&sa).await;
        let run = fleet(&kubeconfig, &["-A", "-o", "json"]).await;
        let got = unread(run.json());
        let want: Vec<(String, String, String)> = lost
            .iter()
            .map(|r| ((*r).to_owned(), "*".to_owned(), "forbidden".to_owned()))
            .collect();
        assert_eq!(got, want, "without the rule for {:?}\n{run}", cases[i].0);
        assert_eq!(run.json()["complete"], false);
        for u in run.json()["unread"].as_array().unwrap() {
            let message = u["message"].as_str().unwrap();
            assert!(
                message.contains(&format!("system:serviceaccount:{OPS_NS}:{sa}"))
                    && message.contains("cannot list resource"),
                "the real authorizer's words: {message}"
            );
        }
        // Nothing read needs a person, but the view is not whole: 51. What
        // cannot be known is not guessed: without Pods no member is "without
        // a Pod", without Leases no Ready member is "without a witness".
        run.assert_code(51);
        assert_eq!(run.json()["needs_attention"], false, "{run}");
        let table = fleet(&kubeconfig, &["-A"]).await;
        for r in lost.iter() {
            let shown = match *r {
                "agent-events" => "events (the agent's)",
                "probe-events" => "events (readiness probes)",
                "etcd-clusters" => "etcdclusters",
                "etcd-members" => "etcdmembers",
                other => other,
            };
            assert!(
                table
                    .stdout
                    .contains(&format!("NOT READ: {shown} in all namespaces: forbidden")),
                "{r}\n{table}"
            );
        }
    }

    // Bound in one namespace only: that namespace is read, the other named.
    w.bind("etcd-member-agent-fleet", "ns-viewer", Some(NS_A))
        .await;
    let kubeconfig = w.kubeconfig_of("ns-viewer").await;
    let run = fleet(
        &kubeconfig,
        &["-n", &format!("{NS_A},{NS_B}"), "-o", "json"],
    )
    .await;
    run.assert_code(51);
    assert_eq!(
        conditions(run.json()).keys().collect::<Vec<_>>(),
        ["fleet-a/etcd"]
    );
    let got = unread(run.json());
    assert_eq!(got.len(), 6, "{got:?}");
    assert!(
        got.iter().all(|(_, ns, e)| ns == NS_B && e == "forbidden"),
        "{got:?}"
    );
    // Across every namespace it can read none: said, not an empty all-clear.
    let run = fleet(&kubeconfig, &["-A", "-o", "json"]).await;
    run.assert_code(51);
    assert_eq!(unread(run.json()).len(), 6, "{run}");
    assert_eq!(run.json()["clusters"], json!([]));
    assert!(
        run.json()["summary"]["text"]
            .as_str()
            .unwrap()
            .ends_with("6 reads failed (the view is incomplete)"),
        "{run}"
    );
}

/// A viewer on any server (the real node's included): a ServiceAccount of
/// [`OPS_NS`] bound cluster-wide to the shipped ClusterRole, and a kubeconfig
/// with its real token.
pub(crate) async fn shipped_viewer(api: &KubeApiServer) -> PathBuf {
    let admin = api.admin().await;
    api.create_namespace(OPS_NS).await;
    let sas: Api<ServiceAccount> = Api::namespaced(admin.clone(), OPS_NS);
    sas.create(
        &PostParams::default(),
        &from_json(json!({"metadata": {"name": VIEWER}})),
    )
    .await
    .unwrap_or_else(|e| panic!("cannot create the viewer: {e}"));
    let text = std::fs::read_to_string(repo().join(CLUSTER_ROLE_FILE))
        .unwrap_or_else(|e| panic!("cannot read {CLUSTER_ROLE_FILE}: {e}"));
    let role: ClusterRole =
        serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("{CLUSTER_ROLE_FILE}: {e}"));
    let name = role.metadata.name.clone().unwrap_or_default();
    Api::<ClusterRole>::all(admin.clone())
        .create(&PostParams::default(), &role)
        .await
        .unwrap_or_else(|e| panic!("cannot create ClusterRole {name}: {e}"));
    Api::<ClusterRoleBinding>::all(admin)
        .create(
            &PostParams::default(),
            &from_json(json!({
                "metadata": {"name": VIEWER},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
                "subjects": [{"kind": "ServiceAccount", "name": VIEWER, "namespace": OPS_NS}],
            })),
        )
        .await
        .unwrap_or_else(|e| panic!("cannot bind {name}: {e}"));
    let token = api.token_for(OPS_NS, VIEWER, None).await;
    api.token_kubeconfig(VIEWER, &token)
}

/// `fleet ARGS` as a person runs it, with `kubeconfig` (pub for the real node's test).
pub(crate) async fn run_fleet(kubeconfig: &std::path::Path, args: &[&str]) -> AgentRun {
    fleet(kubeconfig, args).await
}

/// A fleet on which `fleet --serve` has a series in every family (for
/// tests/it/monitoring.rs): one cluster of three with a refused member (a
/// condition, its age, a refused member's series), read by a viewer whose
/// role lacks the operator's records (an unread resource). The kubeconfig is
/// the viewer's.
pub(crate) async fn every_series() -> (World, PathBuf) {
    let w = World::start(&[NS_A]).await;
    healthy(&w, NS_A, "etcd").await;
    let message = json!({"verdict": "refuse-empty-formed", "exit_code": 10, "member_id": null,
        "cluster_id": null, "reason": "empty but started before", "remedy": "replace it"})
    .to_string();
    w.status(NS_A, "etcd-m2", refused_status(&message, 10, 1, &ago(60)))
        .await;
    w.cluster_role("fleet-without-records", |rules| {
        rules.retain(|r| r["apiGroups"] != json!([GROUP]));
    })
    .await;
    w.bind("fleet-without-records", "partial-viewer", None)
        .await;
    let kubeconfig = w.kubeconfig_of("partial-viewer").await;
    (w, kubeconfig)
}

// ---------------------------------------------------------------------------
// --watch and --serve.

/// A `fleet` child process whose stdout lines are read as they come; stopped
/// by its PID (SIGINT, then SIGKILL) when dropped.
struct Running {
    child: Child,
    lines: mpsc::Receiver<String>,
}

impl Running {
    fn start(kubeconfig: &std::path::Path, args: &[&str]) -> Running {
        let mut cmd = agent();
        cmd.arg("fleet")
            .args(args)
            .env("KUBECONFIG", kubeconfig)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        let mut child = cmd.spawn().expect("start fleet");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { return };
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        Running { child, lines }
    }

    /// The next JSON document (one per line) for which `pred` holds; panics
    /// after one patience.
    fn wait_doc(&self, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
        let deadline = Deadline::after(patience());
        let mut last = String::new();
        loop {
            match self.lines.recv_timeout(deadline.remaining()) {
                Ok(line) => {
                    let doc: Value = serde_json::from_str(&line)
                        .unwrap_or_else(|e| panic!("not one JSON document per line ({e}): {line}"));
                    if pred(&doc) {
                        return doc;
                    }
                    last = line;
                }
                Err(_) => panic!(
                    "--watch printed no view where {what} within {:?}; last: {last}",
                    patience()
                ),
            }
        }
    }

    /// SIGINT, and the exit code.
    fn interrupt(mut self) -> i32 {
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT);
        let deadline = Deadline::after(patience());
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return status.code().unwrap_or(-1);
            }
            assert!(!deadline.passed(), "fleet did not stop on SIGINT");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

fn member_status_of(doc: &Value, ns: &str, cluster_name: &str, name: &str) -> Option<String> {
    doc["clusters"]
        .as_array()?
        .iter()
        .find(|c| c["namespace"] == ns && c["name"] == cluster_name)?["members"]
        .as_array()?
        .iter()
        .find(|m| m["member"] == name)?["status"]
        .as_str()
        .map(str::to_owned)
}

fn http_get(port: u16, path: &str) -> Option<(u16, String)> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    let code = text.split_whitespace().nth(1)?.parse().ok()?;
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b.to_owned())?;
    Some((code, body))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_and_serve_follow_a_members_refusal_and_its_recovery() {
    let w = World::start(&[NS_A]).await;
    healthy(&w, NS_A, "etcd").await;
    let viewer = w.viewer().await;
    let watching = Running::start(&viewer, &["-A", "--watch", "-o", "json"]);
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let serving = Running::start(&viewer, &["-A", "--serve", "--listen", &listen]);
    let first = tokio::task::block_in_place(|| {
        watching.wait_doc("the first view is complete", |d| d["complete"] == true)
    });
    assert_eq!(first["exit_code"], 0, "{first}");
    tokio::task::block_in_place(|| {
        assert_eventually!(
            match http_get(port, "/readyz") {
                Some((200, body)) => Ok(body),
                other => Err(format!("{other:?}")),
            },
            "fleet --serve is ready"
        )
    });

    // etcd-m2's volume came back empty: its preflight refuses.
    let id = cluster_id_of(NS_A, "etcd");
    let message = json!({"verdict": "refuse-empty-formed", "exit_code": 10, "member_id": null,
        "cluster_id": null, "reason": "empty but started before", "remedy": "replace it"})
    .to_string();
    w.status(NS_A, "etcd-m2", refused_status(&message, 10, 1, &ago(1)))
        .await;
    let doc = tokio::task::block_in_place(|| {
        watching.wait_doc("etcd-m2 is refused", |d| {
            member_status_of(d, NS_A, "etcd", "etcd-m2").as_deref() == Some("refused")
        })
    });
    assert_eq!(doc["exit_code"], 50);
    assert_eq!(
        conditions(&doc)["fleet-a/etcd"],
        ["quorum-at-risk", "members-refused"]
    );
    let metrics = tokio::task::block_in_place(|| {
        assert_eventually!(
            match http_get(port, "/metrics") {
                Some((200, body))
                    if body.contains(
                        "etcd_agent_fleet_cluster_condition{namespace=\"fleet-a\",cluster=\"etcd\",condition=\"quorum-at-risk\",severity=\"critical\"} 1"
                    ) =>
                    Ok(body),
                other => Err(format!("{other:?}")),
            },
            "the condition is exported"
        )
    });
    for series in [
        "etcd_agent_fleet_cluster_condition{namespace=\"fleet-a\",cluster=\"etcd\",condition=\"members-refused\",severity=\"critical\"} 1",
        "etcd_agent_fleet_member_refused{namespace=\"fleet-a\",cluster=\"etcd\",member=\"etcd-m2\",verdict=\"refuse-empty-formed\"} 1",
        "etcd_agent_fleet_cluster_healthy_voters{namespace=\"fleet-a\",cluster=\"etcd\"} 2",
        "etcd_agent_fleet_cluster_quorum{namespace=\"fleet-a\",cluster=\"etcd\"} 2",
        "etcd_agent_fleet_view_complete 1",
    ] {
        assert!(metrics.contains(series), "{series}\n{metrics}");
    }

    // The member is replaced and starts: the conditions clear.
    w.status(
        NS_A,
        "etcd-m2",
        member_status("etcd-m2", &id, true, 1, None, 0),
    )
    .await;
    let pods = w.pods(NS_A);
    // A Pod deleted (at once: no kubelet confirms a graceful deletion here)
    // leaves the view (the EtcdMember stays: a member without a Pod).
    pods.delete("etcd-m3", &DeleteParams::default().grace_period(0))
        .await
        .unwrap();
    let doc = tokio::task::block_in_place(|| {
        watching.wait_doc("etcd-m2 is ready and etcd-m3 has no Pod", |d| {
            member_status_of(d, NS_A, "etcd", "etcd-m2").as_deref() == Some("ready")
                && member_status_of(d, NS_A, "etcd", "etcd-m3").as_deref() == Some("no-pod")
        })
    });
    assert_eq!(conditions(&doc)["fleet-a/etcd"], ["quorum-at-risk"]);
    tokio::task::block_in_place(|| {
        assert_eventually!(
            match http_get(port, "/metrics") {
                Some((200, body)) if !body.contains("condition=\"members-refused\"") => Ok(()),
                other => Err(format!("{other:?}")),
            },
            "a cleared condition leaves no series"
        )
    });
    assert_eq!(watching.interrupt(), 50, "the last view's code");
    assert_eq!(serving.interrupt(), 0, "--serve ends with 0");
}

// ---------------------------------------------------------------------------
// The benchmark (scripts/bench-fleet): not run by `cargo test`.

/// `fleet` on a generated fleet of `FLEET_BENCH_CLUSTERS` (default 1,000)
/// clusters of three members, one namespace each as tenants have them: the
/// member Pods are the example Pod of `deploy/overlays/example` (its size,
/// env and volumes), with kubelet-like statuses; a witness Lease per member;
/// the operator's EtcdCluster and EtcdMembers; Events (the agent's refusals,
/// the kubelet's readiness failures, and kubelet noise the field selectors
/// leave on the server). 2 % of the clusters have a refused member, 2.5 % a
/// member not Ready.
///
/// Measured with the release binary (`FLEET_BENCH_BIN`), each figure written
/// to `FLEET_BENCH_OUT` as JSON for the script to judge: the first full view
/// (`fleet -A -o json` and the table, wall time and peak RSS by
/// `/usr/bin/time -v`, `FLEET_BENCH_RUNS` runs each), and `--watch`: from the
/// write of one member's refusal to the view that shows it, then its
/// recovery, `FLEET_BENCH_RUNS` times, and the watcher's peak RSS.
/// `FLEET_BENCH_WATCH_CACHE=false` runs the server as the other tests do
/// (every list read from etcd).
mod bench {
    use super::*;
    use futures::StreamExt;
    use std::io::Read;
    use std::time::Instant;

    fn env_or(name: &str, default: &str) -> String {
        std::env::var(name)
            .ok()
            .filter(|v| !v.is_empty())
            .unwrap_or_else(|| default.to_owned())
    }

    fn tenant(i: usize) -> String {
        format!("tenant-{i:04}")
    }

    /// The example member Pod, renamed to `name` of `cluster`.
    fn example_pod(template: &Value, ns: &str, cluster: &str, name: &str) -> Value {
        let mut pod = template.clone();
        pod["metadata"] = json!({
            "name": name, "namespace": ns,
            "labels": {CLUSTER_LABEL: cluster, "app.kubernetes.io/name": "etcd",
                       "app.kubernetes.io/instance": cluster,
                       "app.kubernetes.io/managed-by": "etcd-operator",
                       "app.kubernetes.io/component": name},
            "annotations": {"kubectl.kubernetes.io/default-container": "etcd"},
        });
        pod["spec"]["hostname"] = json!(name);
        pod["spec"]["subdomain"] = json!(cluster);
        pod["spec"]["nodeName"] = json!(format!("node-{}", name.len() % 7));
        pod
    }

    /// The statuses of the example Pod's containers: the sidecar running,
    /// install/restore/preflight done (`start`), etcd Ready, or as `refused`
    /// or `not_ready` say.
    fn status(member: &str, cluster_id: &str, refused: bool, not_ready: bool) -> Value {
        let done = |name: &str, message: Option<String>| {
            json!({"name": name, "image": AGENT_IMAGE, "imageID": "", "ready": false, "restartCount": 0,
                   "state": {"terminated": {"exitCode": 0, "reason": "Completed", "message": message,
                                            "startedAt": ago(86_000), "finishedAt": ago(85_990)}}})
        };
        if refused {
            let message = json!({"verdict": "refuse-empty-formed", "exit_code": 10, "member_id": null,
                "cluster_id": null,
                "reason": format!("the data directory is empty but this member started before: the EtcdMember records memberID {}", id_of(member)),
                "remedy": "this member's data is gone; do not start it on an empty directory. Remove the member (etcdctl member remove <id>) and add it again"})
            .to_string();
            let mut s = refused_status(&message, 10, 7, &ago(20));
            s["initContainerStatuses"] = json!([
                running("agent", AGENT_IMAGE, true, 0, &ago(900)),
                done("install", None),
                done("restore", None),
                s["initContainerStatuses"][1].clone(),
            ]);
            return s;
        }
        let ready = !not_ready;
        let mut s = member_status(
            member,
            cluster_id,
            ready,
            if ready { 80_000 } else { 400 },
            (!ready).then(|| json!({"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 5m0s restarting failed container=etcd"}})),
            if ready { 0 } else { 6 },
        );
        s["initContainerStatuses"] = json!([
            running("agent", AGENT_IMAGE, true, 0, &ago(86_100)),
            done("install", None),
            done("restore", None),
            done("preflight", Some(start_message(member, cluster_id))),
        ]);
        s
    }

    async fn create<K>(api: &Api<K>, obj: Value)
    where
        K: kube::Resource
            + Clone
            + serde::de::DeserializeOwned
            + serde::Serialize
            + std::fmt::Debug,
    {
        let obj: K = from_json(obj);
        api.create(&PostParams::default(), &obj)
            .await
            .unwrap_or_else(|e| panic!("cannot create {obj:?}: {e}"));
    }

    /// One tenant: namespace, ServiceAccount, records, Pods and their
    /// statuses, witnesses, Events.
    async fn generate(admin: Client, template: Value, i: usize) {
        let ns = tenant(i);
        let cluster = "etcd";
        let members: Vec<String> = (1..=3).map(|m| format!("t{i:04}-m{m}")).collect();
        let id = cluster_id_of(&ns, cluster);
        let nss: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(admin.clone());
        create(&nss, json!({"metadata": {"name": ns}})).await;
        let sas: Api<ServiceAccount> = Api::namespaced(admin.clone(), &ns);
        create(&sas, json!({"metadata": {"name": AGENT_SERVICE_ACCOUNT}})).await;
        let clusters: Api<DynamicObject> =
            Api::namespaced_with(admin.clone(), &ns, &resource("EtcdCluster", "etcdclusters"));
        let records: Api<DynamicObject> =
            Api::namespaced_with(admin.clone(), &ns, &resource("EtcdMember", "etcdmembers"));
        create(
            &clusters,
            json!({"apiVersion": format!("{GROUP}/v1alpha2"), "kind": "EtcdCluster",
                   "metadata": {"name": cluster, "namespace": ns},
                   "spec": {"version": "3.6.11", "replicas": 3}}),
        )
        .await;
        clusters
            .patch_status(
                cluster,
                &PatchParams::default(),
                &Patch::Merge(
                    json!({"status": {"clusterID": id, "clusterToken": token_of(&ns, cluster),
                                                "readyMembers": 3}}),
                ),
            )
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let pods: Api<Pod> = Api::namespaced(admin.clone(), &ns);
        let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
            Api::namespaced(admin.clone(), &ns);
        let events: Api<Event> = Api::namespaced(admin.clone(), &ns);
        for (k, m) in members.iter().enumerate() {
            create(
                &records,
                json!({"apiVersion": format!("{GROUP}/v1alpha2"), "kind": "EtcdMember",
                       "metadata": {"name": m, "namespace": ns, "labels": {CLUSTER_LABEL: cluster}},
                       "spec": {"clusterName": cluster, "version": "3.6.11",
                                "storage": {"size": "1Gi", "medium": ""},
                                "initialCluster": initial_cluster(&ns, cluster, &members),
                                "clusterToken": token_of(&ns, cluster), "bootstrap": k == 0}}),
            )
            .await;
            records
                .patch_status(
                    m,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"status": {"memberID": id_of(m), "isVoter": true,
                                                    "podName": m, "pvcName": format!("data-{m}")}})),
                )
                .await
                .unwrap_or_else(|e| panic!("{e}"));
            let uid = pods
                .create(
                    &PostParams::default(),
                    &from_json(example_pod(&template, &ns, cluster, m)),
                )
                .await
                .unwrap_or_else(|e| panic!("cannot create Pod {ns}/{m}: {e}"))
                .metadata
                .uid
                .unwrap_or_default();
            let refused = i % 50 == 7 && k == 2;
            let not_ready = i % 40 == 3 && k == 1;
            pods.patch_status(
                m,
                &PatchParams::default(),
                &Patch::Merge(json!({"status": status(m, &id, refused, not_ready)})),
            )
            .await
            .unwrap_or_else(|e| panic!("{e}"));
            let renewed = Timestamp::now()
                .strftime("%Y-%m-%dT%H:%M:%S.%6fZ")
                .to_string();
            create(
                &leases,
                json!({"metadata": {"name": format!("etcd-witness-{m}"), "namespace": ns,
                         "labels": {"app.kubernetes.io/name": "etcd-member-agent",
                                    "app.kubernetes.io/component": "witness"},
                         "annotations": {
                            "etcd-member-agent.cozystack.io/member-id": id_of(m),
                            "etcd-member-agent.cozystack.io/cluster-id": id,
                            "etcd-member-agent.cozystack.io/raft-term": "7",
                            "etcd-member-agent.cozystack.io/raft-index": (1_000_000 + i * 3 + k).to_string(),
                            "etcd-member-agent.cozystack.io/pod-uid": uid}},
                       "spec": {"holderIdentity": m, "leaseDurationSeconds": WITNESS_SECS,
                                "acquireTime": renewed, "renewTime": renewed, "leaseTransitions": 0}}),
            )
            .await;
            let event = |name: String,
                         reason: &str,
                         message: &str,
                         component: &str,
                         field: &str,
                         kind: &str| {
                json!({"metadata": {"name": name, "namespace": ns},
                       "involvedObject": {"apiVersion": "v1", "kind": "Pod", "name": m, "namespace": ns,
                                          "uid": uid, "fieldPath": field},
                       "reason": reason, "message": message, "type": kind, "count": 1,
                       "firstTimestamp": ago(600), "lastTimestamp": ago(10),
                       "source": {"component": component}, "reportingComponent": component})
            };
            if refused {
                create(
                    &events,
                    event(
                        format!("{m}.refusal"),
                        "refuse-empty-formed",
                        "the data directory is empty but this member started before",
                        "etcd-member-agent",
                        "",
                        "Warning",
                    ),
                )
                .await;
            }
            if not_ready {
                create(
                    &events,
                    event(
                        format!("{m}.unhealthy"),
                        "Unhealthy",
                        "Readiness probe failed: HTTP probe failed with statuscode: 503",
                        "kubelet",
                        "spec.containers{etcd}",
                        "Warning",
                    ),
                )
                .await;
            }
            if k == 0 {
                // Noise the field selectors leave on the server.
                create(&events, event(format!("{m}.pulled"), "Pulled",
                    "Container image \"quay.io/coreos/etcd:v3.6.11\" already present on machine",
                    "kubelet", "spec.containers{etcd}", "Normal")).await;
            }
        }
    }

    /// The CPU seconds process `pid` has used (utime + stime).
    fn cpu_of(pid: u32) -> f64 {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        // The fields after the command name, which is in parentheses.
        let fields: Vec<&str> = stat
            .rsplit_once(')')
            .map(|(_, rest)| rest.split_whitespace().collect())
            .unwrap_or_default();
        let ticks: f64 = fields
            .get(11..13)
            .map(|f| f.iter().filter_map(|v| v.parse::<f64>().ok()).sum())
            .unwrap_or(0.0);
        ticks / 100.0
    }

    /// The 1-minute load average.
    fn load() -> f64 {
        std::fs::read_to_string("/proc/loadavg")
            .ok()
            .and_then(|l| l.split_whitespace().next()?.parse().ok())
            .unwrap_or(0.0)
    }

    /// `/usr/bin/time -v BIN fleet ARGS`: wall seconds, peak RSS KiB, CPU
    /// seconds (user + system), stdout.
    fn timed(bin: &str, kubeconfig: &std::path::Path, args: &[&str]) -> (f64, u64, f64, String) {
        let mut cmd = std::process::Command::new("/usr/bin/time");
        cmd.arg("-v")
            .arg(bin)
            .arg("fleet")
            .args(args)
            .env_clear()
            .env("KUBECONFIG", kubeconfig)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let started = Instant::now();
        let out = cmd.output().expect("run /usr/bin/time");
        let wall = started.elapsed().as_secs_f64();
        let stderr = String::from_utf8_lossy(&out.stderr);
        let rss = stderr
            .lines()
            .find_map(|l| {
                l.trim()
                    .strip_prefix("Maximum resident set size (kbytes): ")
            })
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("no peak RSS from /usr/bin/time:\n{stderr}"));
        let cpu: f64 = stderr
            .lines()
            .filter_map(|l| {
                let l = l.trim();
                l.strip_prefix("User time (seconds): ")
                    .or_else(|| l.strip_prefix("System time (seconds): "))
            })
            .filter_map(|v| v.trim().parse::<f64>().ok())
            .sum();
        (
            wall,
            rss,
            cpu,
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    }

    fn median(mut v: Vec<f64>) -> f64 {
        v.sort_by(|a, b| a.total_cmp(b));
        v[v.len() / 2]
    }

    /// A watcher whose stdout lines are stamped when read.
    struct Watcher {
        child: Child,
        lines: mpsc::Receiver<(Instant, String)>,
    }

    impl Watcher {
        fn wait(&self, what: &str, needle: &str) -> Instant {
            let deadline = Deadline::after(patience());
            loop {
                match self.lines.recv_timeout(deadline.remaining()) {
                    Ok((at, line)) if line.contains(needle) => return at,
                    Ok(_) => {}
                    Err(_) => panic!(
                        "--watch showed no view where {what} within {:?}",
                        patience()
                    ),
                }
            }
        }
    }

    impl Drop for Watcher {
        fn drop(&mut self) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[ignore = "a benchmark: scripts/bench-fleet runs it"]
    async fn a_fleet_of_1000_clusters() {
        let clusters: usize = env_or("FLEET_BENCH_CLUSTERS", "1000")
            .parse()
            .expect("a number");
        let runs: usize = env_or("FLEET_BENCH_RUNS", "5").parse().expect("a number");
        let bin = std::env::var("FLEET_BENCH_BIN").expect("FLEET_BENCH_BIN: the release binary");
        let watch_cache = env_or("FLEET_BENCH_WATCH_CACHE", "true") == "true";
        let api = KubeApiServer::start_with(&[&format!("--watch-cache={watch_cache}")]).await;
        let admin = api.admin().await;
        let template: Value = serde_saphyr::from_str(
            &std::fs::read_to_string(repo().join("deploy/overlays/example/pod.yaml")).unwrap(),
        )
        .unwrap();

        let started = Instant::now();
        let mut done = 0;
        let mut work = futures::stream::iter(0..clusters)
            .map(|i| generate(admin.clone(), template.clone(), i))
            .buffer_unordered(32);
        while work.next().await.is_some() {
            done += 1;
            if done % 100 == 0 {
                eprintln!(
                    "bench-fleet: {done} of {clusters} clusters generated in {:.0?}",
                    started.elapsed()
                );
            }
        }
        drop(work);
        let generated_in = started.elapsed().as_secs_f64();
        api.create_namespace(OPS_NS).await;
        let w = World { api, admin };
        let viewer = w.viewer().await;
        let bin_ref = bin.clone();
        let viewer_ref = viewer.clone();
        // FLEET_BENCH_HOLD=<file>: the viewer's kubeconfig is written there and
        // the server kept until the file is removed (to profile by hand).
        if let Ok(hold) = std::env::var("FLEET_BENCH_HOLD") {
            std::fs::write(&hold, viewer.display().to_string()).expect("write the hold file");
            eprintln!(
                "bench-fleet: holding the server; kubeconfig {}; remove {hold} to go on",
                viewer.display()
            );
            let deadline = Deadline::after(Duration::from_secs(4 * 3600));
            while std::path::Path::new(&hold).exists() && !deadline.passed() {
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }

        // The first full view: JSON (checked), then the table.
        let (mut json_wall, mut json_rss, mut table_wall, mut table_rss) =
            (vec![], vec![], vec![], vec![]);
        let (mut fleet_cpu, mut server_cpu) = (vec![], vec![]);
        let mut summary = String::new();
        let server = w.api.pid();
        let load_before = load();
        for _ in 0..runs {
            let server_before = cpu_of(server);
            let (wall, rss, cpu, out) =
                tokio::task::block_in_place(|| timed(&bin_ref, &viewer_ref, &["-A", "-o", "json"]));
            server_cpu.push(cpu_of(server) - server_before);
            fleet_cpu.push(cpu);
            let doc: Value = serde_json::from_str(&out).expect("one JSON document");
            assert_eq!(doc["complete"], true, "{}", doc["unread"]);
            assert_eq!(doc["summary"]["clusters"], clusters);
            assert_eq!(doc["summary"]["members"], 3 * clusters);
            summary = doc["summary"]["text"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            json_wall.push(wall);
            json_rss.push(rss as f64);
            let (wall, rss, _, out) =
                tokio::task::block_in_place(|| timed(&bin_ref, &viewer_ref, &["-A"]));
            assert!(
                out.ends_with(&format!("{summary}\n")),
                "the table ends with the summary"
            );
            table_wall.push(wall);
            table_rss.push(rss as f64);
        }
        eprintln!("bench-fleet: {summary}");

        // --watch: one member's refusal, then its recovery.
        let mut cmd = std::process::Command::new(&bin);
        cmd.args(["fleet", "-A", "--watch", "-o", "json"])
            .env_clear()
            .env("KUBECONFIG", &viewer)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        let mut child = cmd.spawn().expect("start the watcher");
        let mut stdout = child.stdout.take().expect("stdout");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            let mut chunk = vec![0u8; 1 << 16];
            loop {
                let n = match stdout.read(&mut chunk) {
                    Ok(0) | Err(_) => return,
                    Ok(n) => n,
                };
                buf.extend_from_slice(&chunk[..n]);
                while let Some(end) = buf.iter().position(|b| *b == b'\n') {
                    let line: Vec<u8> = buf.drain(..=end).collect();
                    let at = Instant::now();
                    if tx
                        .send((at, String::from_utf8_lossy(&line).into_owned()))
                        .is_err()
                    {
                        return;
                    }
                }
            }
        });
        let watcher = Watcher { child, lines };
        let pid = watcher.child.id();
        tokio::task::block_in_place(|| {
            watcher.wait("the first view is complete", "\"complete\":true")
        });
        let (mut refusal, mut recovery) = (vec![], vec![]);
        for k in 0..runs {
            // A healthy cluster (not one of the refused or not Ready ones).
            let i = (0..clusters)
                .map(|j| (11 + (k + j) * 97) % clusters)
                .find(|i| i % 50 != 7 && i % 40 != 3)
                .expect("a healthy cluster");
            let (ns, m) = (tenant(i), format!("t{i:04}-m1"));
            let id = cluster_id_of(&ns, "etcd");
            let row = |status: &str| {
                format!("\"member\":\"{m}\",\"pod\":\"{m}\",\"node\":\"node-{}\",\"status\":\"{status}\"", m.len() % 7)
            };
            let t0 = Instant::now();
            w.status(&ns, &m, status(&m, &id, true, false)).await;
            let seen = tokio::task::block_in_place(|| {
                watcher.wait("a member is refused", &row("refused"))
            });
            refusal.push(seen.duration_since(t0).as_secs_f64());
            let t0 = Instant::now();
            w.status(&ns, &m, status(&m, &id, false, false)).await;
            let seen =
                tokio::task::block_in_place(|| watcher.wait("it is ready again", &row("ready")));
            recovery.push(seen.duration_since(t0).as_secs_f64());
        }
        let hwm: u64 = std::fs::read_to_string(format!("/proc/{pid}/status"))
            .unwrap_or_default()
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or(0);
        drop(watcher);

        let result = json!({
            "clusters": clusters, "members": 3 * clusters, "watch_cache": watch_cache,
            "kube_apiserver": kube_apiserver_version(), "runs": runs,
            "generated_in_s": generated_in, "summary": summary,
            "first_view_json_s": {"median": median(json_wall.clone()), "max": json_wall.iter().cloned().fold(0.0, f64::max)},
            "first_view_json_peak_rss_kib": json_rss.iter().cloned().fold(0.0, f64::max),
            "first_view_table_s": {"median": median(table_wall.clone()), "max": table_wall.iter().cloned().fold(0.0, f64::max)},
            "first_view_table_peak_rss_kib": table_rss.iter().cloned().fold(0.0, f64::max),
            "watch_refusal_s": {"median": median(refusal.clone()), "max": refusal.iter().cloned().fold(0.0, f64::max)},
            "watch_recovery_s": {"median": median(recovery.clone()), "max": recovery.iter().cloned().fold(0.0, f64::max)},
            "watch_peak_rss_kib": hwm,
            "first_view_json_cpu_s": {"fleet_median": median(fleet_cpu), "kube_apiserver_median": median(server_cpu)},
            "load_average": {"before": load_before, "after": load()},
        });
        eprintln!("bench-fleet: {result:#}");
        if let Ok(path) = std::env::var("FLEET_BENCH_OUT") {
            std::fs::write(&path, result.to_string()).unwrap_or_else(|e| panic!("{path}: {e}"));
        }
    }
}

/// The capture of docs/fleet.md: `script` runs `fleet -A` on a terminal
/// against the every-condition fleet and the typescript is written to
/// `FLEET_CAPTURE`. Run by hand:
/// `FLEET_CAPTURE=/tmp/fleet.typescript cargo test --test it -- --ignored fleet::capture_for_docs`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "writes the capture of docs/fleet.md"]
async fn capture_for_docs() {
    let out = std::env::var("FLEET_CAPTURE").expect("FLEET_CAPTURE: where to write the capture");
    let w = World::start(&[NS_A, NS_B]).await;
    build_fleet(&w).await;
    let viewer = w.viewer().await;
    let command = format!(
        "COLUMNS=250 {AGENT_BIN} fleet -A --color=always --kubeconfig {}",
        viewer.display()
    );
    let status = tokio::task::spawn_blocking(move || {
        std::process::Command::new("script")
            .args(["-q", "-e", "-c", &command, &out])
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("TERM", "xterm-256color")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .status()
            .expect("run script(1)")
    })
    .await
    .unwrap();
    assert_eq!(status.code(), Some(50), "fleet's exit code through script");
}
