//! The member Pods on the real node (`common::node`), and the test standing in
//! for the operator.
//!
//! [`Operator`] does what cozystack/etcd-operator v0.5 does for one cluster, by
//! hand: it creates the `EtcdCluster` and `EtcdMember` records (status through
//! the status subresource), the Pods as its `buildPod` makes them plus the agent's
//! containers of `deploy/overlays/example/pod.yaml` (the native sidecar `agent`
//! first, then `preflight`), the TLS Secrets, and it forms the cluster the
//! operator's way: the seed bootstraps alone (`--initial-cluster-state=new`,
//! `--initial-cluster` naming itself), every other member is added as a learner
//! (`MemberAddAsLearner`), started with `=existing`, and promoted; `memberID`,
//! `podName` and `podUID` are latched once the Pod is Ready, the cluster's
//! `clusterID` once the seed is.
//!
//! What differs from the operator's Pods, because the node has no Pod network,
//! no cluster DNS and no kube-proxy (see `common::node`), and nothing else:
//! * `hostNetwork: true`; each member listens on a loopback address of its own,
//!   `127.0.10.<n>` (etcd's client, peer and metrics ports, the agent's gRPC and
//!   HTTP ports, all at their usual numbers), its `ports` carry that `hostIP`,
//!   and its probes name it as `host` (a host-network Pod's IP is the node's);
//! * names resolve through `hostAliases` (`<member>.etcd.<ns>.svc` → its
//!   address, for every member the cluster may have), not DNS;
//! * the agent reaches the API server through `KUBERNETES_SERVICE_HOST/PORT`
//!   set to `127.0.0.1:<port>` ([`Node::api_env`]);
//! * the data volume is a `hostPath` dir the test owns instead of a PVC;
//! * probe and agent periods are shortened (readiness every 2 s, the agent's
//!   records and pod-check every 2 s) so that tests wait seconds, not minutes;
//! * no `install`/`restore` init containers (no snapshot bootstrap here).
//!
//! `NODE_TEST_WITHOUT_GUARD=1` builds the Pods as the operator builds them today,
//! without the agent (no sidecar, no `preflight`, readiness `GET /health` on
//! 2381): every scenario of `tests/it/node.rs` must then fail, which is how the
//! scenarios are shown to test the guard.

use std::path::PathBuf;
use std::process::{Command, Output};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams,
};
use serde_json::{json, Value};

use crate::common::node::{container_status, etcd_image, is_ready, Node, AGENT_IMAGE};
use crate::common::run_with_deadline;
use crate::common::{patience, EtcdVersion};

/// The namespace of the example overlay.
pub const NS: &str = "etcd-example";
/// The cluster's name (and its headless Service's).
pub const CLUSTER: &str = "etcd";
/// The operator's API group.
pub const GROUP: &str = "etcd-operator.cozystack.io";
/// The members of the example overlay, the seed first.
pub const MEMBERS: [&str; 3] = ["etcd-7xk2p", "etcd-m4q9z", "etcd-r2d8w"];
/// Names a replacement member may take (the operator's GenerateName).
pub const SPARES: [&str; 2] = ["etcd-q5v7n", "etcd-h3j8c"];

/// Whether the Pods are built without the agent (see the module docs).
pub fn without_guard() -> bool {
    std::env::var("NODE_TEST_WITHOUT_GUARD").as_deref() == Ok("1")
}

/// The loopback address of member `name`: `127.0.10.<n>`.
pub fn ip_of(name: &str) -> String {
    let n = MEMBERS
        .iter()
        .chain(SPARES.iter())
        .position(|m| *m == name)
        .unwrap_or_else(|| panic!("{name} is not a member name of the cluster"));
    format!("127.0.10.{}", n + 1)
}

/// `https://<member>.etcd.<ns>.svc:2379`, as the operator advertises it.
pub fn client_url(name: &str) -> String {
    format!("https://{name}.{CLUSTER}.{NS}.svc:2379")
}

/// `https://<member>.etcd.<ns>.svc:2380`.
pub fn peer_url(name: &str) -> String {
    format!("https://{name}.{CLUSTER}.{NS}.svc:2380")
}

/// The URL the test reaches member `name` at from the host.
pub fn host_url(name: &str) -> String {
    format!("https://{}:2379", ip_of(name))
}

/// `name=peer,...` for `names`.
pub fn initial_cluster(names: &[&str]) -> String {
    names
        .iter()
        .map(|n| format!("{n}={}", peer_url(n)))
        .collect::<Vec<_>>()
        .join(",")
}

/// `--initial-cluster-state`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClusterState {
    /// The seed's first start.
    New,
    /// Every other start.
    Existing,
}

/// Which Role the agent's ServiceAccount gets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AgentRole {
    /// `deploy/base/role.yaml`.
    Base,
    /// `deploy/overlays/example/role-resource-names.yaml` (narrowed by name).
    ExampleResourceNames,
}

fn resource(kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(GROUP, "v1alpha2", kind), plural)
}

/// The test standing in for the operator, for cluster [`CLUSTER`] in [`NS`].
pub struct Operator<'n> {
    /// The node the Pods run on.
    pub node: &'n Node,
    /// The etcd line the Pods run.
    pub version: EtcdVersion,
    /// `<ns>-<cluster>-<uid>`, as the operator derives it.
    pub token: String,
    admin: kube::Client,
    tls: tempfile::TempDir,
    report_to: Option<String>,
    etcd_env_from: Option<&'static str>,
    edit_pod: Option<fn(Value) -> Value>,
}

/// What [`Operator::new`] sets up.
pub struct Options {
    /// The etcd line (its image must be imported: `Node::builder().etcd(v)`).
    pub version: EtcdVersion,
    /// The agent's Role.
    pub role: AgentRole,
    /// Push mode: the agents report to this collector URL.
    pub report_to: Option<String>,
    /// A ConfigMap the etcd container takes env from (`envFrom`), created with
    /// the cluster, as the Pods of a cluster adopted from the legacy operator
    /// still reference its cluster-state ConfigMap (issue 373).
    pub etcd_env_from: Option<&'static str>,
    /// Applied to every member Pod before it is created: a test's own shape
    /// (the operator's Pods without the agent, for the webhook to guard).
    pub edit_pod: Option<fn(Value) -> Value>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            version: EtcdVersion::V3_6,
            role: AgentRole::Base,
            report_to: None,
            etcd_env_from: None,
            edit_pod: None,
        }
    }
}

impl<'n> Operator<'n> {
    /// The namespace with the agent's ServiceAccount, Role and RoleBinding, the
    /// TLS Secrets, and the `EtcdCluster`.
    pub async fn new(node: &'n Node, opts: Options) -> Operator<'n> {
        node.create_namespace(NS).await;
        node.api().apply_deploy_base(NS).await;
        if opts.role == AgentRole::ExampleResourceNames {
            let role = std::fs::read_to_string(
                std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                    .join("deploy/overlays/example/role-resource-names.yaml"),
            )
            .unwrap_or_else(|e| panic!("{e}"));
            let admin = node.admin().await;
            let roles: Api<k8s_openapi::api::rbac::v1::Role> = Api::namespaced(admin, NS);
            roles
                .delete("etcd-member-agent", &DeleteParams::default())
                .await
                .unwrap_or_else(|e| panic!("{e}"));
            node.apply_yaml(NS, &role).await;
        }
        let tls = write_tls();
        let secret = |name: &str| {
            let read = |f: &str| {
                crate::common::base64_encode(
                    &std::fs::read(tls.path().join(f)).unwrap_or_else(|e| panic!("{e}")),
                )
            };
            json!({
                "apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": name},
                "type": "kubernetes.io/tls",
                "data": {"ca.crt": read("ca.crt"), "tls.crt": read("tls.crt"), "tls.key": read("tls.key")},
            })
        };
        node.create_object(NS, secret("etcd-client-tls")).await;
        node.create_object(NS, secret("etcd-peer-tls")).await;
        let cluster = node
            .create_object(
                NS,
                json!({
                    "apiVersion": format!("{GROUP}/v1alpha2"), "kind": "EtcdCluster",
                    "metadata": {"name": CLUSTER},
                    "spec": {"version": opts.version.label(), "replicas": 3},
                }),
            )
            .await;
        if let Some(cm) = opts.etcd_env_from {
            node.create_object(
                NS,
                json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": cm},
                       "data": {"LEGACY_CLUSTER_STATE": "existing"}}),
            )
            .await;
        }
        let uid = cluster.metadata.uid.unwrap_or_default();
        let token = format!("{NS}-{CLUSTER}-{uid}");
        let op = Operator {
            node,
            version: opts.version,
            token,
            admin: node.admin().await,
            tls,
            report_to: opts.report_to,
            etcd_env_from: opts.etcd_env_from,
            edit_pod: opts.edit_pod,
        };
        op.patch_status("EtcdCluster", CLUSTER, json!({"clusterToken": op.token}))
            .await;
        op
    }

    fn records(&self, kind: &str) -> Api<DynamicObject> {
        let plural = match kind {
            "EtcdCluster" => "etcdclusters",
            "EtcdMember" => "etcdmembers",
            other => panic!("no such record kind {other}"),
        };
        Api::namespaced_with(self.admin.clone(), NS, &resource(kind, plural))
    }

    /// A merge patch of a record's status through the status subresource.
    pub async fn patch_status(&self, kind: &str, name: &str, status: Value) {
        self.records(kind)
            .patch_status(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({"status": status})),
            )
            .await
            .unwrap_or_else(|e| panic!("cannot patch the status of {kind} {name}: {e}"));
    }

    /// A record as the API server has it.
    pub async fn record(&self, kind: &str, name: &str) -> DynamicObject {
        self.records(kind)
            .get(name)
            .await
            .unwrap_or_else(|e| panic!("cannot read {kind} {name}: {e}"))
    }

    /// Creates the `EtcdMember` of `name`.
    pub async fn create_member_record(&self, name: &str, bootstrap: bool, initial: &str) {
        let mut spec = json!({
            "clusterName": CLUSTER,
            "version": self.version.label(),
            "storage": {"size": "1Gi", "medium": ""},
            "initialCluster": initial,
            "clusterToken": self.token,
        });
        if bootstrap {
            spec["bootstrap"] = json!(true);
        }
        self.records("EtcdMember")
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({
                    "apiVersion": format!("{GROUP}/v1alpha2"), "kind": "EtcdMember",
                    "metadata": {"name": name, "labels": {"etcd-operator.cozystack.io/cluster": CLUSTER}},
                    "spec": spec,
                }))
                .unwrap_or_else(|e| panic!("{e}")),
            )
            .await
            .unwrap_or_else(|e| panic!("cannot create EtcdMember {name}: {e}"));
    }

    /// Deletes the `EtcdMember` of `name`.
    pub async fn delete_member_record(&self, name: &str) {
        self.records("EtcdMember")
            .delete(name, &DeleteParams::default())
            .await
            .unwrap_or_else(|e| panic!("cannot delete EtcdMember {name}: {e}"));
    }

    /// The data dir of member `name` on the host (its `hostPath` volume).
    pub fn data_dir(&self, name: &str) -> PathBuf {
        self.node.host_dir(&format!("{name}-data"))
    }

    /// The member Pod of `name` as the operator builds it, with the agent's
    /// containers (see the module docs). `peers`: the other members whose client
    /// URLs preflight asks.
    pub fn member_pod(
        &self,
        name: &str,
        state: ClusterState,
        initial: &str,
        peers: &[&str],
    ) -> Value {
        let ip = ip_of(name);
        let version = self.version.label();
        let state = match state {
            ClusterState::New => "new",
            ClusterState::Existing => "existing",
        };
        let data_dir = self.data_dir(name);
        let host_aliases: Vec<Value> = MEMBERS
            .iter()
            .chain(SPARES.iter())
            .map(|m| json!({"ip": ip_of(m), "hostnames": [format!("{m}.{CLUSTER}.{NS}.svc")]}))
            .collect();
        let field = |path: &str| json!({"fieldRef": {"fieldPath": path}});
        let restricted = json!({
            "runAsNonRoot": true, "runAsUser": 65532, "runAsGroup": 65532,
            "readOnlyRootFilesystem": true, "allowPrivilegeEscalation": false,
            "capabilities": {"drop": ["ALL"]}, "seccompProfile": {"type": "RuntimeDefault"},
        });
        let tls_env = [
            json!({"name": "ETCD_TLS_CA_PATH", "value": "/etc/etcd/tls/client/ca.crt"}),
            json!({"name": "ETCD_TLS_CERT_PATH", "value": "/etc/etcd/tls/client/tls.crt"}),
            json!({"name": "ETCD_TLS_KEY_PATH", "value": "/etc/etcd/tls/client/tls.key"}),
        ];
        let pod_env = [
            json!({"name": "AGENT_KUBE", "value": "true"}),
            json!({"name": "POD_NAME", "valueFrom": field("metadata.name")}),
            json!({"name": "POD_NAMESPACE", "valueFrom": field("metadata.namespace")}),
            json!({"name": "POD_UID", "valueFrom": field("metadata.uid")}),
        ];
        let api_env: Vec<Value> = self
            .node
            .api_env()
            .iter()
            .map(|(k, v)| json!({"name": k, "value": v}))
            .collect();
        let mut sidecar_env = vec![
            json!({"name": "ETCD_DATA_DIR", "value": "/var/lib/etcd"}),
            json!({"name": "ETCD_MEMBER_NAME", "value": name}),
            json!({"name": "ETCD_ENDPOINTS", "value": format!("https://{ip}:2379")}),
            json!({"name": "AGENT_VERDICT_FILE", "value": "/run/etcd-agent/preflight.json"}),
            json!({"name": "AGENT_GRPC_LISTEN", "value": format!("{ip}:9465")}),
            json!({"name": "AGENT_HTTP_LISTEN", "value": format!("{ip}:9466")}),
            json!({"name": "AGENT_KUBE_INTERVAL", "value": "2s"}),
            json!({"name": "AGENT_HAZARD_INTERVAL", "value": "2s"}),
            json!({"name": "AGENT_WITNESS_INTERVAL", "value": "2s"}),
            json!({"name": "AGENT_SHUTDOWN_GRACE", "value": "2s"}),
        ];
        if let Some(url) = &self.report_to {
            sidecar_env.push(json!({"name": "AGENT_REPORT_TO", "value": url}));
            sidecar_env.push(json!({"name": "AGENT_REPORT_INTERVAL", "value": "2s"}));
        }
        sidecar_env.extend(tls_env.iter().cloned());
        sidecar_env.extend(pod_env.iter().cloned());
        sidecar_env.extend(api_env.iter().cloned());
        let peer_endpoints = peers
            .iter()
            .map(|p| client_url(p))
            .collect::<Vec<_>>()
            .join(",");
        let mut preflight_env = vec![
            json!({"name": "ETCD_VERSION", "value": version}),
            json!({"name": "ETCD_DATA_DIR", "value": "/var/lib/etcd"}),
            json!({"name": "ETCD_MEMBER_NAME", "value": name}),
            json!({"name": "ETCD_INITIAL_CLUSTER", "value": initial}),
            json!({"name": "ETCD_INITIAL_CLUSTER_TOKEN", "value": self.token}),
            json!({"name": "ETCD_PEER_URLS", "value": peer_url(name)}),
            json!({"name": "ETCD_PEER_ENDPOINTS", "value": peer_endpoints}),
            json!({"name": "AGENT_VERDICT_FILE", "value": "/run/etcd-agent/preflight.json"}),
            json!({"name": "TERMINATION_LOG", "value": "/dev/termination-log"}),
        ];
        preflight_env.extend(tls_env.iter().cloned());
        preflight_env.extend(pod_env.iter().cloned());
        preflight_env.extend(api_env.iter().cloned());
        let kube_api_access = json!({"name": "kube-api-access",
            "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount", "readOnly": true});
        let tls_client_mount =
            json!({"name": "tls-client", "mountPath": "/etc/etcd/tls/client", "readOnly": true});
        let sidecar = json!({
            "name": "agent",
            "image": AGENT_IMAGE,
            "restartPolicy": "Always",
            "command": ["/usr/local/bin/etcd-member-agent"],
            "args": ["serve"],
            "env": sidecar_env,
            "ports": [
                {"name": "agent-grpc", "containerPort": 9465, "hostIP": ip},
                {"name": "agent-http", "containerPort": 9466, "hostIP": ip},
            ],
            "volumeMounts": [
                {"name": "data", "mountPath": "/var/lib/etcd", "readOnly": true},
                {"name": "agent-run", "mountPath": "/run/etcd-agent", "readOnly": true},
                tls_client_mount,
                kube_api_access,
            ],
            "terminationMessagePolicy": "FallbackToLogsOnError",
            "securityContext": restricted,
            "resources": {"requests": {"cpu": "10m", "memory": "32Mi"}, "limits": {"memory": "256Mi"}},
            "livenessProbe": {
                "httpGet": {"path": "/livez", "port": 9466, "host": ip},
                "initialDelaySeconds": 5, "periodSeconds": 10, "timeoutSeconds": 2, "failureThreshold": 3,
            },
        });
        let preflight = json!({
            "name": "preflight",
            "image": AGENT_IMAGE,
            "command": ["/usr/local/bin/etcd-member-agent"],
            "args": ["preflight"],
            "env": preflight_env,
            "volumeMounts": [
                {"name": "data", "mountPath": "/var/lib/etcd", "readOnly": true},
                {"name": "agent-run", "mountPath": "/run/etcd-agent"},
                tls_client_mount,
                kube_api_access,
            ],
            "terminationMessagePolicy": "FallbackToLogsOnError",
            "securityContext": restricted,
            "resources": {"requests": {"cpu": "10m", "memory": "32Mi"}, "limits": {"memory": "256Mi"}},
        });
        let readiness = if without_guard() {
            json!({"httpGet": {"path": "/health", "port": 2381, "host": ip},
                   "initialDelaySeconds": 1, "periodSeconds": 2, "timeoutSeconds": 2, "failureThreshold": 3})
        } else {
            json!({"httpGet": {"path": "/readyz", "port": 9466, "host": ip},
                   "initialDelaySeconds": 1, "periodSeconds": 2, "timeoutSeconds": 2, "failureThreshold": 3})
        };
        let etcd = json!({
            "name": "etcd",
            "image": etcd_image(self.version),
            "command": [
                "etcd",
                format!("--name={name}"),
                "--data-dir=/var/lib/etcd",
                format!("--listen-peer-urls=https://{ip}:2380"),
                format!("--listen-client-urls=https://{ip}:2379"),
                format!("--advertise-client-urls={}", client_url(name)),
                format!("--initial-advertise-peer-urls={}", peer_url(name)),
                format!("--initial-cluster={initial}"),
                format!("--initial-cluster-token={}", self.token),
                format!("--initial-cluster-state={state}"),
                format!("--listen-metrics-urls=http://{ip}:2381"),
                "--cert-file=/etc/etcd/tls/client/tls.crt",
                "--key-file=/etc/etcd/tls/client/tls.key",
                "--client-cert-auth=true",
                "--trusted-ca-file=/etc/etcd/tls/client/ca.crt",
                "--peer-cert-file=/etc/etcd/tls/peer/tls.crt",
                "--peer-key-file=/etc/etcd/tls/peer/tls.key",
                "--peer-trusted-ca-file=/etc/etcd/tls/peer/ca.crt",
                "--peer-client-cert-auth=true",
            ],
            "ports": [
                {"name": "client", "containerPort": 2379, "hostIP": ip},
                {"name": "peer", "containerPort": 2380, "hostIP": ip},
                {"name": "metrics", "containerPort": 2381, "hostIP": ip},
            ],
            "volumeMounts": [
                {"name": "data", "mountPath": "/var/lib/etcd"},
                tls_client_mount,
                {"name": "tls-peer", "mountPath": "/etc/etcd/tls/peer", "readOnly": true},
            ],
            "securityContext": {"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}},
            "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}},
            "livenessProbe": {"tcpSocket": {"port": 2380, "host": ip},
                              "initialDelaySeconds": 15, "periodSeconds": 10, "failureThreshold": 3},
            "readinessProbe": readiness,
        });
        let mut etcd = etcd;
        if let Some(cm) = self.etcd_env_from {
            etcd["envFrom"] = json!([{"configMapRef": {"name": cm}}]);
        }
        let init_containers = if without_guard() {
            json!([])
        } else {
            json!([sidecar, preflight])
        };
        json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "namespace": NS,
                "labels": {
                    "app.kubernetes.io/name": "etcd",
                    "app.kubernetes.io/instance": CLUSTER,
                    "app.kubernetes.io/managed-by": "etcd-operator",
                    "app.kubernetes.io/component": name,
                    "etcd-operator.cozystack.io/cluster": CLUSTER,
                },
                "annotations": {"kubectl.kubernetes.io/default-container": "etcd"},
            },
            "spec": {
                "hostNetwork": true,
                "dnsPolicy": "Default",
                "hostAliases": host_aliases,
                "serviceAccountName": "etcd-member-agent",
                "automountServiceAccountToken": false,
                "enableServiceLinks": false,
                "terminationGracePeriodSeconds": 10,
                "securityContext": {
                    "runAsNonRoot": true, "runAsUser": 65532, "runAsGroup": 65532, "fsGroup": 65532,
                    "seccompProfile": {"type": "RuntimeDefault"},
                },
                "initContainers": init_containers,
                "containers": [etcd],
                "volumes": [
                    {"name": "data", "hostPath": {"path": data_dir, "type": "Directory"}},
                    {"name": "tls-client", "secret": {"secretName": "etcd-client-tls"}},
                    {"name": "tls-peer", "secret": {"secretName": "etcd-peer-tls"}},
                    {"name": "agent-run", "emptyDir": {"medium": "Memory", "sizeLimit": "1Mi"}},
                    {"name": "kube-api-access", "projected": {"defaultMode": 420, "sources": [
                        {"serviceAccountToken": {"path": "token", "expirationSeconds": 3607}},
                        {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                        {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}},
                    ]}},
                ],
            },
        })
    }

    /// Creates a member Pod (from [`Operator::member_pod`], maybe changed).
    pub async fn create_pod(&self, pod: Value) -> Pod {
        let pod = match self.edit_pod {
            Some(edit) => edit(pod),
            None => pod,
        };
        let pod: Pod = serde_json::from_value(pod).unwrap_or_else(|e| panic!("bad Pod: {e}"));
        self.node.create_pod(NS, pod).await
    }

    /// Waits until Pod `name` is Ready.
    pub async fn wait_ready(&self, name: &str) -> Pod {
        self.node
            .wait_pod(NS, name, "Ready", |p| is_ready(p).then(|| p.clone()))
            .await
    }

    /// Latches the member's record as the operator does once its Pod is Ready:
    /// `memberID` (from the member itself), `podName`, `podUID`, `isVoter`.
    /// Returns the member ID (16 hex digits).
    pub async fn latch_member(&self, name: &str, pod: &Pod) -> String {
        let id = self.member_id(name);
        self.patch_status(
            "EtcdMember",
            name,
            json!({
                "memberID": id,
                "podName": name,
                "podUID": pod.metadata.uid,
                "isVoter": true,
            }),
        )
        .await;
        id
    }

    /// Forms the three-member cluster of [`MEMBERS`] the operator's way (see
    /// the module docs); every Pod Ready and every record latched.
    pub async fn form(&self) {
        let seed = MEMBERS[0];
        let seed_initial = initial_cluster(&[seed]);
        self.create_member_record(seed, true, &seed_initial).await;
        self.create_pod(self.member_pod(seed, ClusterState::New, &seed_initial, &[]))
            .await;
        let pod = self.wait_ready(seed).await;
        self.latch_member(seed, &pod).await;
        let cluster_id = self.cluster_id(seed);
        self.patch_status("EtcdCluster", CLUSTER, json!({"clusterID": cluster_id}))
            .await;
        let mut joined = vec![seed];
        for name in &MEMBERS[1..] {
            self.add_member(name, &joined).await;
            joined.push(name);
        }
        self.patch_status("EtcdCluster", CLUSTER, json!({"readyMembers": 3}))
            .await;
    }

    /// Adds member `name` to a cluster of `existing` members the operator's way:
    /// its record, `MemberAddAsLearner`, its Pod with `=existing`, promotion once
    /// it caught up, its record latched once Ready.
    pub async fn add_member(&self, name: &str, existing: &[&str]) -> Pod {
        let mut all: Vec<&str> = existing.to_vec();
        all.push(name);
        let initial = initial_cluster(&all);
        self.create_member_record(name, false, &initial).await;
        // etcd refuses a reconfiguration until every started member has been
        // connected for a while ("unhealthy cluster"); the operator requeues.
        let peer = format!("--peer-urls={}", peer_url(name));
        let out = crate::common::eventually(patience(), || {
            let out = self.etcdctl(
                existing,
                &["member", "add", name, &peer, "--learner", "-w", "json"],
            );
            if out.status.success() {
                serde_json::from_slice::<Value>(&out.stdout).map_err(|e| e.to_string())
            } else {
                Err(String::from_utf8_lossy(&out.stderr).into_owned())
            }
        })
        .unwrap_or_else(|e| panic!("cannot add {name} as a learner: {e}"));
        let id = out["member"]["ID"]
            .as_u64()
            .unwrap_or_else(|| panic!("member add printed no ID: {out}"));
        self.create_pod(self.member_pod(name, ClusterState::Existing, &initial, existing))
            .await;
        // A learner is promoted once it caught up with the leader; etcd says
        // when it has not yet.
        let hex = format!("{id:016x}");
        crate::common::eventually(patience(), || {
            let out = self.etcdctl(existing, &["member", "promote", &hex]);
            if out.status.success() {
                Ok(())
            } else {
                Err(String::from_utf8_lossy(&out.stderr).into_owned())
            }
        })
        .unwrap_or_else(|e| panic!("learner {name} not promoted: {e}"));
        let pod = self.wait_ready(name).await;
        self.latch_member(name, &pod).await;
        pod
    }

    /// `etcdctl` against `members` (their host URLs), with the cluster's TLS.
    pub fn etcdctl(&self, members: &[&str], args: &[&str]) -> Output {
        let endpoints = members
            .iter()
            .map(|m| host_url(m))
            .collect::<Vec<_>>()
            .join(",");
        let p = |f: &str| self.tls.path().join(f).display().to_string();
        let mut cmd = Command::new(self.version.etcdctl());
        cmd.env_clear()
            .arg(format!("--endpoints={endpoints}"))
            .arg(format!("--cacert={}", p("ca.crt")))
            .arg(format!("--cert={}", p("tls.crt")))
            .arg(format!("--key={}", p("tls.key")))
            .args(["--dial-timeout=2s", "--command-timeout=5s"])
            .args(args);
        run_with_deadline(&mut cmd, Duration::from_secs(20))
            .unwrap_or_else(|e| panic!("etcdctl: {e}"))
    }

    /// `etcdctl -w json`, parsed; panics when it fails.
    pub fn etcdctl_json(&self, members: &[&str], args: &[&str]) -> Value {
        let mut all = args.to_vec();
        all.push("-w");
        all.push("json");
        let out = self.etcdctl(members, &all);
        assert!(
            out.status.success(),
            "etcdctl {args:?} against {members:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "etcdctl {args:?}: {e}: {}",
                String::from_utf8_lossy(&out.stdout)
            )
        })
    }

    /// Member `name`'s own ID (16 hex digits), from its response header.
    pub fn member_id(&self, name: &str) -> String {
        let status = self.etcdctl_json(&[name], &["endpoint", "status"]);
        let id = status[0]["Status"]["header"]["member_id"]
            .as_u64()
            .unwrap_or_else(|| panic!("no member ID in {status}"));
        format!("{id:016x}")
    }

    /// The cluster ID member `name` reports (16 hex digits).
    pub fn cluster_id(&self, name: &str) -> String {
        let status = self.etcdctl_json(&[name], &["endpoint", "status"]);
        let id = status[0]["Status"]["header"]["cluster_id"]
            .as_u64()
            .unwrap_or_else(|| panic!("no cluster ID in {status}"));
        format!("{id:016x}")
    }

    /// Puts `key` through `members`; panics on failure.
    pub fn put(&self, members: &[&str], key: &str, value: &str) {
        let out = self.etcdctl(members, &["put", key, value]);
        assert!(
            out.status.success(),
            "put {key} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// What member `name`'s own store holds for `key` (a serializable read).
    pub fn get_from(&self, name: &str, key: &str) -> Result<Option<String>, String> {
        let out = self.etcdctl(&[name], &["get", key, "--consistency=s", "-w", "json"]);
        if !out.status.success() {
            return Err(String::from_utf8_lossy(&out.stderr).into_owned());
        }
        let v: Value = serde_json::from_slice(&out.stdout).map_err(|e| e.to_string())?;
        Ok(v["kvs"].as_array().and_then(|kvs| kvs.first()).map(|kv| {
            let b = crate::common::base64_decode(kv["value"].as_str().unwrap_or_default())
                .unwrap_or_default();
            String::from_utf8_lossy(&b).into_owned()
        }))
    }
}

/// The status of container `container` of `pod`, for assertions: panics when
/// there is none.
pub fn status_of<'p>(
    pod: &'p Pod,
    container: &str,
) -> &'p k8s_openapi::api::core::v1::ContainerStatus {
    container_status(pod, container).unwrap_or_else(|| {
        panic!(
            "Pod {} has no status for container {container}:\n{}",
            pod.metadata.name.as_deref().unwrap_or_default(),
            crate::common::node::pod_summary(pod)
        )
    })
}

/// A CA and one certificate for every member (server and client use, every
/// member's name and address, `localhost`, `127.0.0.1`), as cert-manager would
/// issue them; the test's etcdctl uses the same certificate.
fn write_tls() -> tempfile::TempDir {
    use rcgen::{
        BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer,
        KeyPair, KeyUsagePurpose,
    };
    let dir = tempfile::Builder::new()
        .prefix("etcd-node-tls-")
        .tempdir()
        .unwrap_or_else(|e| panic!("{e}"));
    let ca_key = KeyPair::generate().unwrap_or_else(|e| panic!("{e}"));
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap_or_else(|e| panic!("{e}"));
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(DnType::CommonName, "etcd-example CA");
    ca.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let ca_pem = ca
        .self_signed(&ca_key)
        .unwrap_or_else(|e| panic!("{e}"))
        .pem();
    let issuer = Issuer::new(ca, ca_key);
    let mut sans = vec!["localhost".to_owned(), "127.0.0.1".to_owned()];
    for m in MEMBERS.iter().chain(SPARES.iter()) {
        sans.push(format!("{m}.{CLUSTER}.{NS}.svc"));
        sans.push(ip_of(m));
    }
    let key = KeyPair::generate().unwrap_or_else(|e| panic!("{e}"));
    let mut params = CertificateParams::new(sans).unwrap_or_else(|e| panic!("{e}"));
    params.distinguished_name.push(DnType::CommonName, "etcd");
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params.extended_key_usages = vec![
        ExtendedKeyUsagePurpose::ServerAuth,
        ExtendedKeyUsagePurpose::ClientAuth,
    ];
    let cert = params
        .signed_by(&key, &issuer)
        .unwrap_or_else(|e| panic!("{e}"));
    let write = |name: &str, text: &str| {
        std::fs::write(dir.path().join(name), text).unwrap_or_else(|e| panic!("{e}"))
    };
    write("ca.crt", &ca_pem);
    write("tls.crt", &cert.pem());
    write("tls.key", &key.serialize_pem());
    dir
}
