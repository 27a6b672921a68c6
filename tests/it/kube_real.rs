//! The agent against a real kube-apiserver (issue 14): upstream kube-apiserver
//! built from the Kubernetes Go modules (`scripts/build-kube-apiserver`),
//! backed by a real etcd, with the RBAC authorizer, real service-account tokens
//! minted through the TokenRequest API, the operator's CRDs with their status
//! subresource, and the shipped `deploy/base` RBAC (see
//! `tests/it/common/kube_apiserver.rs`). The agent reaches it as in a Pod: TLS to
//! the server, a bearer token of the `etcd-member-agent` ServiceAccount,
//! through a kubeconfig (`KUBECONFIG` or `--kubeconfig`).
//!
//! What only a real server shows, and these tests hold the agent to:
//! * preflight's operator evidence as the operator really writes it — `status`
//!   only through the status subresource, pruned and validated by the CRD's
//!   schema — on empty dirs and on a real member's data dir;
//! * `pod-check` on Pods the API server admitted and validated, their statuses
//!   written through `pods/status` as a kubelet would, and objects really
//!   deleted;
//! * least privilege decided by the real authorizer: every call the agent makes
//!   succeeds with the shipped Role and a real token, everything else is a real
//!   403, and the agent says so.
//!
//! No scheduler or kubelet runs: Pods stay unscheduled; their statuses are the
//! test's. Each test starts its own server (a few seconds) and stops it, and its
//! etcd, by PID when it ends.
//!
//! The in-process fake (`tests/it/kube_fake`) stays for 5xx, slow and malformed
//! answers, which a real server does not produce on demand.

use std::path::{Path, PathBuf};
use std::time::Instant;

use crate::common::*;
use crate::preflight_support::{preflight_args, scratch, Env, Preflight};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod, Secret};
use k8s_openapi::api::rbac::v1::Role;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch,
    PatchParams, PostParams,
};
use kube::Client;
use serde_json::{json, Value};

pub(crate) const NS: &str = "tenant-a";
const OTHER_NS: &str = "tenant-b";
const CLUSTER: &str = "etcd";
const MEMBER: &str = "etcd-x7k2p";
const MEMBER_ID: &str = "ae36f238164a08ad";
const CLUSTER_ID: &str = "769f1c9e0d723d0b";
const GROUP: &str = "etcd-operator.cozystack.io";

// ---------------------------------------------------------------------------
// The world: a server, the shipped RBAC, a real token for the agent.

/// A real API server with namespace [`NS`], `deploy/base` applied in it, and a
/// kubeconfig carrying a real token of the agent's ServiceAccount.
pub(crate) struct World {
    api: KubeApiServer,
    pub(crate) admin: Client,
    /// The agent's kubeconfig (TLS, the ServiceAccount's token).
    agent_kubeconfig: PathBuf,
    /// The same token, for the test's own calls as the agent.
    agent: Client,
}

impl World {
    pub(crate) async fn start() -> World {
        World::start_bound_to(None).await
    }

    /// With the agent's token bound to a Pod created first by `pod` (given
    /// the admin client), as the kubelet's projected token is.
    async fn start_bound_to(pod: Option<Value>) -> World {
        let started = Instant::now();
        let api = KubeApiServer::start().await;
        let admin = api.admin().await;
        api.create_namespace(NS).await;
        let applied = api.apply_deploy_base(NS).await;
        assert_eq!(
            applied,
            [
                "ServiceAccount/etcd-member-agent",
                "Role/etcd-member-agent",
                "RoleBinding/etcd-member-agent"
            ],
            "deploy/base, as kustomize lists it"
        );
        let bound = match pod {
            Some(pod) => {
                let pods: Api<Pod> = Api::namespaced(admin.clone(), NS);
                let created = pods
                    .create(&PostParams::default(), &from_json(pod))
                    .await
                    .unwrap_or_else(|e| panic!("cannot create the Pod: {e}"));
                Some((
                    created.metadata.name.unwrap_or_default(),
                    created.metadata.uid.unwrap_or_default(),
                ))
            }
            None => None,
        };
        let token = api
            .token_for(
                NS,
                AGENT_SERVICE_ACCOUNT,
                bound.as_ref().map(|(n, u)| (n.as_str(), u.as_str())),
            )
            .await;
        let agent_kubeconfig = api.token_kubeconfig("agent", &token);
        let agent = client_from(&agent_kubeconfig).await;
        eprintln!(
            "kube-apiserver {} (pid {}) at {} ready with deploy/base in {:?}",
            kube_apiserver_version(),
            api.pid(),
            api.url(),
            started.elapsed()
        );
        World {
            api,
            admin,
            agent_kubeconfig,
            agent,
        }
    }

    pub(crate) fn kubeconfig(&self) -> String {
        self.agent_kubeconfig.display().to_string()
    }
}

fn from_json<T: serde::de::DeserializeOwned>(v: Value) -> T {
    serde_json::from_value(v).unwrap_or_else(|e| panic!("{e}"))
}

// ---------------------------------------------------------------------------
// The operator's records, written as the operator writes them: spec on create,
// status through the status subresource.

fn resource(kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(GROUP, "v1alpha2", kind), plural)
}

fn members(client: &Client, ns: &str) -> Api<DynamicObject> {
    Api::namespaced_with(client.clone(), ns, &resource("EtcdMember", "etcdmembers"))
}

fn clusters(client: &Client, ns: &str) -> Api<DynamicObject> {
    Api::namespaced_with(client.clone(), ns, &resource("EtcdCluster", "etcdclusters"))
}

fn token_of(cluster: &str) -> String {
    format!("{NS}-{cluster}-4f0c2d7e")
}

/// The `EtcdMember` spec the operator writes for `name` (`bootstrap`: the seed,
/// whose `initialCluster` names only itself).
fn member_doc(ns: &str, name: &str, bootstrap: bool, initial_cluster: &str) -> Value {
    let mut spec = json!({
        "clusterName": CLUSTER,
        "version": "3.6.11",
        "storage": {"size": "1Gi", "medium": ""},
        "initialCluster": initial_cluster,
        "clusterToken": token_of(CLUSTER),
    });
    if bootstrap {
        spec["bootstrap"] = json!(true);
    }
    json!({
        "apiVersion": format!("{GROUP}/v1alpha2"),
        "kind": "EtcdMember",
        "metadata": {"name": name, "namespace": ns,
                     "labels": {"etcd-operator.cozystack.io/cluster": CLUSTER}},
        "spec": spec,
    })
}

fn cluster_doc(ns: &str) -> Value {
    json!({
        "apiVersion": format!("{GROUP}/v1alpha2"),
        "kind": "EtcdCluster",
        "metadata": {"name": CLUSTER, "namespace": ns},
        "spec": {"version": "3.6.11", "replicas": 3},
    })
}

async fn create(api: &Api<DynamicObject>, doc: Value) -> DynamicObject {
    api.create(&PostParams::default(), &from_json(doc))
        .await
        .unwrap_or_else(|e| panic!("cannot create the record: {e}"))
}

/// A merge patch of `status` through the status subresource, as the operator's
/// status writer does.
async fn patch_status(api: &Api<DynamicObject>, name: &str, status: Value) {
    api.patch_status(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"status": status})),
    )
    .await
    .unwrap_or_else(|e| panic!("cannot patch the status of {name}: {e}"));
}

/// The init container's env for member `name` of namespace `ns`: its frozen
/// flags, the Pod's identity, kube on through the agent's kubeconfig, and a
/// peer endpoint nobody listens on (the operator's word is the only evidence
/// besides the directory).
fn pod_env(w: &World, ns: &str, name: &str, initial_cluster: &str, data_dir: &Path) -> Env {
    vec![
        ("ETCD_DATA_DIR".into(), data_dir.display().to_string()),
        ("ETCD_MEMBER_NAME".into(), name.into()),
        ("ETCD_INITIAL_CLUSTER".into(), initial_cluster.into()),
        ("ETCD_INITIAL_CLUSTER_TOKEN".into(), token_of(CLUSTER)),
        (
            "ETCD_PEER_ENDPOINTS".into(),
            format!("http://127.0.0.1:{}", free_port()),
        ),
        ("AGENT_KUBE".into(), "true".into()),
        ("POD_NAMESPACE".into(), ns.into()),
        ("POD_NAME".into(), name.into()),
        ("KUBECONFIG".into(), w.kubeconfig()),
    ]
}

fn seed_initial_cluster(name: &str) -> String {
    format!("{name}=https://{name}.{CLUSTER}.{NS}.svc:2380")
}

/// Runs preflight off the runtime (it blocks until the binary exits).
async fn run_preflight(env: Env) -> Preflight {
    match tokio::task::spawn_blocking(move || preflight_args(&env, &[])).await {
        Ok(v) => v,
        Err(e) => std::panic::resume_unwind(e.into_panic()),
    }
}

/// An empty data dir (`data/`, not created) inside a fresh scratch dir.
fn empty_dir() -> (tempfile::TempDir, PathBuf) {
    let dir = scratch();
    let data = dir.path().join("data");
    (dir, data)
}

/// The status code and message of a refused call; panics on anything else.
#[track_caller]
fn api_error<T: std::fmt::Debug>(result: Result<T, kube::Error>, what: &str) -> (u16, String) {
    match result {
        Err(kube::Error::Api(status)) => (status.code, status.message.clone()),
        other => panic!("{what}: expected an API error status, got {other:?}"),
    }
}

/// Asserts the real authorizer's 403 for `what`, naming the agent's
/// ServiceAccount, the verb and the resource.
#[track_caller]
fn assert_forbidden<T: std::fmt::Debug>(
    result: Result<T, kube::Error>,
    what: &str,
    verb: &str,
    resource: &str,
) -> String {
    let (code, message) = api_error(result, what);
    assert_eq!(code, 403, "{what}: {message}");
    let user = format!("User \"system:serviceaccount:{NS}:{AGENT_SERVICE_ACCOUNT}\"");
    assert!(
        message.contains(&user)
            && message.contains(&format!("cannot {verb} resource \"{resource}\"")),
        "{what}: the real authorizer's message names the user, verb and resource: {message}"
    );
    message
}

// ---------------------------------------------------------------------------
// The harness itself: the server is what it claims to be.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_is_the_pinned_upstream_kube_apiserver_with_the_operators_crds() {
    let w = World::start().await;
    let version: Value = {
        let req = axum::http::Request::get("/version")
            .body(Vec::new())
            .unwrap_or_else(|e| panic!("{e}"));
        let text = w
            .admin
            .request_text(req)
            .await
            .unwrap_or_else(|e| panic!("GET /version: {e}"));
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"))
    };
    assert_eq!(
        version["gitVersion"],
        kube_apiserver_version().as_str(),
        "{version}"
    );

    // Status is a subresource: a create carrying a status drops it, and only
    // the status endpoint writes it (as for the operator's real CRDs).
    let api = members(&w.admin, NS);
    let mut doc = member_doc(NS, MEMBER, true, &seed_initial_cluster(MEMBER));
    doc["status"] = json!({"memberID": MEMBER_ID});
    let created = create(&api, doc).await;
    assert_eq!(
        created.data.get("status"),
        None,
        "status ignored on create: {:?}",
        created.data
    );
    patch_status(&api, MEMBER, json!({"memberID": MEMBER_ID, "podUID": "u1"})).await;
    let read = api.get(MEMBER).await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(read.data["status"]["memberID"], MEMBER_ID);
    // The schema is enforced: what the agent would call malformed cannot be
    // written at all (the fake server tests those shapes).
    let wrong = api
        .patch_status(
            MEMBER,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"memberID": 12345}})),
        )
        .await;
    let (code, message) = api_error(wrong, "memberID as a number");
    assert_eq!(code, 422, "{message}");
    // The token is a real, bound ServiceAccount token: the server says who it is.
    let review = w
        .agent
        .request_text(
            axum::http::Request::post("/apis/authentication.k8s.io/v1/selfsubjectreviews")
                .header("content-type", "application/json")
                .body(
                    json!({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"})
                        .to_string()
                        .into_bytes(),
                )
                .unwrap_or_else(|e| panic!("{e}")),
        )
        .await
        .unwrap_or_else(|e| panic!("SelfSubjectReview: {e}"));
    let review: Value = serde_json::from_str(&review).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        review["status"]["userInfo"]["username"],
        format!("system:serviceaccount:{NS}:{AGENT_SERVICE_ACCOUNT}"),
        "{review}"
    );
}

// ---------------------------------------------------------------------------
// preflight: the operator's evidence through the real server.

/// Empty data dirs against the records: absent, present with nothing latched,
/// latched (clusterID, then memberID), and stale (the record names an earlier
/// Pod of this member: the PR 355 window).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn preflight_on_an_empty_dir_reads_absent_present_latched_and_stale_records() {
    let w = World::start().await;
    let members = members(&w.admin, NS);
    let clusters = clusters(&w.admin, NS);
    let initial = seed_initial_cluster(MEMBER);

    let step = "no EtcdMember at all";
    let (_d, data) = empty_dir();
    run_preflight(pod_env(&w, NS, MEMBER, &initial, &data))
        .await
        .expect(step, 14, "phase-unknown")
        .source(step, "kube", false, "not found")
        .reason_mentions(step, "kubernetes: ");

    let step = "the EtcdMember exists, its EtcdCluster does not";
    create(&members, member_doc(NS, MEMBER, true, &initial)).await;
    let (_d, data) = empty_dir();
    run_preflight(pod_env(&w, NS, MEMBER, &initial, &data))
        .await
        .expect(step, 14, "phase-unknown")
        .source(step, "kube", false, "EtcdCluster");

    let step = "the seed, nothing latched";
    create(&clusters, cluster_doc(NS)).await;
    patch_status(
        &clusters,
        CLUSTER,
        json!({"clusterToken": token_of(CLUSTER)}),
    )
    .await;
    let (_d, data) = empty_dir();
    let v = run_preflight(pod_env(&w, NS, MEMBER, &initial, &data)).await;
    v.expect(step, 0, "bootstrap")
        .source(step, "kube", true, "")
        .warns(step, "POD_UID");
    let said = &v.evidence("kube")["said"];
    assert_eq!(said["member"]["bootstrap"], true, "{}", v.run);
    assert_eq!(said["member"]["member_id"], Value::Null, "{}", v.run);
    assert_eq!(said["cluster"]["cluster_id"], Value::Null, "{}", v.run);
    assert_eq!(
        said["cluster"]["cluster_token"],
        token_of(CLUSTER).as_str(),
        "{}",
        v.run
    );

    let step = "the seed, clusterID latched";
    patch_status(&clusters, CLUSTER, json!({"clusterID": CLUSTER_ID})).await;
    let (_d, data) = empty_dir();
    run_preflight(pod_env(&w, NS, MEMBER, &initial, &data))
        .await
        .expect(step, 10, "refuse-empty-formed")
        .reason_mentions(
            step,
            &format!("the EtcdCluster records clusterID {CLUSTER_ID}"),
        );

    let step = "the seed, memberID latched too";
    patch_status(&members, MEMBER, json!({"memberID": MEMBER_ID})).await;
    let (_d, data) = empty_dir();
    run_preflight(pod_env(&w, NS, MEMBER, &initial, &data))
        .await
        .expect(step, 10, "refuse-empty-formed")
        .reason_mentions(
            step,
            &format!("the EtcdMember records memberID {MEMBER_ID}"),
        );

    // The PR 355 window: nothing latched yet, but the record names the Pod the
    // operator last saw for this member, and it is not this one.
    let step = "the seed, nothing latched, the record names an earlier Pod";
    patch_status(
        &members,
        MEMBER,
        json!({"memberID": "", "podUID": "0d6f5b1e-earlier-pod"}),
    )
    .await;
    patch_status(&clusters, CLUSTER, json!({"clusterID": ""})).await;
    let (_d, data) = empty_dir();
    let env = with(
        &pod_env(&w, NS, MEMBER, &initial, &data),
        "POD_UID",
        "5c1d9a70-this-pod",
    );
    run_preflight(env)
        .await
        .expect(step, 14, "phase-unknown")
        .row(step, "9a")
        .reason_mentions(step, "0d6f5b1e-earlier-pod");

    let step = "the seed, nothing latched, the record names this Pod";
    let (_d, data) = empty_dir();
    let env = with(
        &pod_env(&w, NS, MEMBER, &initial, &data),
        "POD_UID",
        "0d6f5b1e-earlier-pod",
    );
    run_preflight(env).await.expect(step, 0, "bootstrap");

    let step = "a scale-up member, nothing recorded, no live peers";
    let joiner = "etcd-q4m8n";
    let joiner_initial = format!("{initial},{joiner}=https://{joiner}.{CLUSTER}.{NS}.svc:2380");
    create(&members, member_doc(NS, joiner, false, &joiner_initial)).await;
    patch_status(&clusters, CLUSTER, json!({"clusterID": CLUSTER_ID})).await;
    let (_d, data) = empty_dir();
    run_preflight(pod_env(&w, NS, joiner, &joiner_initial, &data))
        .await
        .expect(step, 14, "phase-unknown")
        .source(step, "kube", true, "")
        .source(step, "etcd", false, "no etcd endpoint answered");
}

/// A real member's data dir (etcd 3.6, stopped) against the records: matching
/// IDs start; a stale record (another incarnation's memberID, another
/// clusterID) is foreign; records absent do not refuse a consistent dir.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn preflight_on_a_real_member_dir_starts_on_matching_records_and_refuses_stale_ones() {
    let (etcd, member_id, cluster_id) = seed_36(0);
    let m0 = &etcd[0];
    m0.stop();
    let w = World::start().await;
    let members = members(&w.admin, NS);
    let clusters = clusters(&w.admin, NS);
    let name = m0.name().to_owned();
    let mut env = m0.agent_env();
    for (k, v) in pod_env(&w, NS, &name, m0.initial_cluster(), m0.data_dir()) {
        if ["AGENT_KUBE", "POD_NAMESPACE", "POD_NAME", "KUBECONFIG"].contains(&k.as_str()) {
            env = with(&env, &k, &v);
        }
    }

    let step = "no records";
    run_preflight(env.clone())
        .await
        .expect(step, 0, "start")
        .source(step, "kube", false, "not found");

    create(&members, member_doc(NS, &name, true, m0.initial_cluster())).await;
    create(&clusters, cluster_doc(NS)).await;
    patch_status(&members, &name, json!({"memberID": member_id})).await;
    patch_status(&clusters, CLUSTER, json!({"clusterID": cluster_id})).await;
    let step = "records match";
    let v = run_preflight(env.clone()).await;
    v.expect(step, 0, "start")
        .reason_mentions(step, "the operator's record")
        .source(step, "kube", true, "");
    assert_eq!(v.doc()["data_dir"]["member_id"], member_id.as_str());
    assert_eq!(v.doc()["data_dir"]["cluster_id"], cluster_id.as_str());

    let step = "the EtcdMember records another incarnation's memberID";
    patch_status(&members, &name, json!({"memberID": MEMBER_ID})).await;
    run_preflight(env.clone())
        .await
        .expect(step, 11, "refuse-foreign")
        .reason_mentions(
            step,
            &format!("member ID in the WAL is {member_id} but the EtcdMember says {MEMBER_ID}"),
        );

    let step = "the EtcdCluster records another clusterID";
    patch_status(&members, &name, json!({"memberID": member_id})).await;
    patch_status(&clusters, CLUSTER, json!({"clusterID": CLUSTER_ID})).await;
    run_preflight(env.clone())
        .await
        .expect(step, 11, "refuse-foreign")
        .reason_mentions(step, "the EtcdCluster says");

    // The etcd about to start is the one this Pod's etcd container runs: its
    // image's tag wins over an ETCD_VERSION that an image change left behind.
    patch_status(&clusters, CLUSTER, json!({"clusterID": cluster_id})).await;
    let given = m0.version().label().to_owned();
    let pods: Api<Pod> = Api::namespaced(w.admin.clone(), NS);
    let pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "serviceAccountName": AGENT_SERVICE_ACCOUNT,
            "automountServiceAccountToken": false,
            "containers": [
            {"name": "etcd", "image": format!("quay.io/coreos/etcd:v{given}")},
            {"name": "member-agent", "image": "ghcr.io/cozystack/etcd-member-agent:v0.1.0"},
        ]},
    });
    pods.create(&PostParams::default(), &from_json(pod))
        .await
        .unwrap_or_else(|e| panic!("cannot create the Pod: {e}"));
    let step = "the etcd image agrees with ETCD_VERSION";
    let v = run_preflight(env.clone()).await;
    v.expect(step, 0, "start");
    assert_eq!(v.doc()["warnings"], json!([]), "{step}\n{}", v.run);
    assert_eq!(
        v.doc()["upgrade_check"]["target"],
        json!(format!("{given}")),
        "{step}\n{}",
        v.run
    );

    let step = "the etcd image was rolled back to 3.5, ETCD_VERSION still says 3.6";
    pods.patch(
        &name,
        &PatchParams::default(),
        &Patch::Strategic(json!({"spec": {"containers": [
            {"name": "etcd", "image": "quay.io/coreos/etcd:v3.5.21"},
        ]}})),
    )
    .await
    .unwrap_or_else(|e| panic!("cannot change the Pod's image: {e}"));
    let v = run_preflight(env.clone()).await;
    // The tag and ETCD_VERSION disagree: one of them is wrong (a stale
    // ETCD_VERSION, or a tag that is not etcd's version, a wrapper image's
    // own). Only what blocks for both refuses; the warning says which.
    v.expect(step, 0, "start");
    let warnings = v.doc()["warnings"].to_string();
    assert!(
        warnings.contains(&format!("ETCD_VERSION (--etcd-version) says {given}"))
            && warnings.contains("quay.io/coreos/etcd:v3.5.21")
            && warnings.contains("for which the upgrade check blocks"),
        "{step}: the disagreement is a warning\n{}",
        v.run
    );
    assert_eq!(
        v.doc()["upgrade_check"]["target"],
        json!(given),
        "{step}\n{}",
        v.run
    );
    assert!(
        v.doc()["upgrade_check"]["from"]
            .as_str()
            .is_some_and(|f| f.contains("disagrees")),
        "{step}\n{}",
        v.run
    );

    let step = "the etcd image was rolled back to 3.5 and nothing else names a version";
    let unversioned: Env = env
        .iter()
        .filter(|(k, _)| k != "ETCD_VERSION")
        .cloned()
        .collect();
    let v = run_preflight(unversioned.clone()).await;
    v.expect(step, 16, "refuse-version");
    assert_eq!(
        v.doc()["upgrade_check"]["target"],
        "3.5.21",
        "{step}\n{}",
        v.run
    );
    assert_eq!(
        v.doc()["upgrade_check"]["from"],
        "the etcd container's image quay.io/coreos/etcd:v3.5.21",
        "{step}\n{}",
        v.run
    );

    let step = "a digest pins the image: the tag beside it is not read";
    let digest = format!("quay.io/coreos/etcd:v3.5.21@sha256:{}", "0".repeat(64));
    pods.patch(
        &name,
        &PatchParams::default(),
        &Patch::Strategic(json!({"spec": {"containers": [
            {"name": "etcd", "image": digest},
        ]}})),
    )
    .await
    .unwrap_or_else(|e| panic!("cannot change the Pod's image: {e}"));
    let v = run_preflight(env.clone()).await;
    v.expect(step, 0, "start");
    assert_eq!(v.doc()["warnings"], json!([]), "{step}\n{}", v.run);
    assert_eq!(
        v.doc()["upgrade_check"]["from"],
        "--etcd-version",
        "{step}\n{}",
        v.run
    );
}

// ---------------------------------------------------------------------------
// pod-check on real Pods.

const CLUSTER_STATE: &str = "etcd-cluster-state";
const ROOT_CA: &str = "kube-root-ca.crt";
const PEER_TLS: &str = "etcd-peer-tls";
const POD: &str = "etcd-x7k2p";

/// The member Pod of #373, as the API server admits it: the `etcd` container
/// reads the legacy ConfigMap through `envFrom` and `env.valueFrom`, and a
/// volume and a projected source mount it too; TLS from a Secret; the
/// projected service-account volume with `kube-root-ca.crt`.
fn member_pod() -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": POD, "namespace": NS,
                     "labels": {"etcd-operator.cozystack.io/cluster": CLUSTER}},
        "spec": {
            "serviceAccountName": AGENT_SERVICE_ACCOUNT,
            "automountServiceAccountToken": false,
            "initContainers": [{
                "name": "preflight",
                "image": "ghcr.io/cozystack/etcd-member-agent:v0.1.0",
                "args": ["preflight"],
                "volumeMounts": [{"name": "kube-api-access", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount", "readOnly": true}],
            }],
            "containers": [
                {
                    "name": "etcd",
                    "image": "quay.io/coreos/etcd:v3.6.11",
                    "envFrom": [{"configMapRef": {"name": CLUSTER_STATE}}],
                    "env": [
                        {"name": "ETCD_INITIAL_CLUSTER_STATE", "valueFrom": {"configMapKeyRef": {"name": CLUSTER_STATE, "key": "ETCD_INITIAL_CLUSTER_STATE"}}},
                        {"name": "OPTIONAL", "valueFrom": {"configMapKeyRef": {"name": "not-there", "key": "k", "optional": true}}},
                    ],
                    "volumeMounts": [
                        {"name": "cluster-state", "mountPath": "/etc/etcd/state", "readOnly": true},
                        {"name": "peer-tls", "mountPath": "/etc/etcd/tls/peer", "readOnly": true},
                    ],
                },
                {
                    "name": "member-agent",
                    "image": "ghcr.io/cozystack/etcd-member-agent:v0.1.0",
                    "args": ["serve"],
                    "volumeMounts": [
                        {"name": "bundle", "mountPath": "/etc/agent", "readOnly": true},
                        {"name": "kube-api-access", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount", "readOnly": true},
                    ],
                },
            ],
            "volumes": [
                {"name": "cluster-state", "configMap": {"name": CLUSTER_STATE}},
                {"name": "peer-tls", "secret": {"secretName": PEER_TLS}},
                {"name": "bundle", "projected": {"sources": [
                    {"configMap": {"name": CLUSTER_STATE}},
                    {"secret": {"name": PEER_TLS}},
                ]}},
                {"name": "kube-api-access", "projected": {"sources": [
                    {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                    {"configMap": {"name": ROOT_CA, "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                    {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}},
                ]}},
            ],
        },
    })
}

async fn create_config_maps_and_secrets(client: &Client) {
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), NS);
    let secrets: Api<Secret> = Api::namespaced(client.clone(), NS);
    let pp = PostParams::default();
    for (name, data) in [
        (
            CLUSTER_STATE,
            json!({"ETCD_INITIAL_CLUSTER_STATE": "new", "ETCD_INITIAL_CLUSTER_TOKEN": token_of(CLUSTER)}),
        ),
        (ROOT_CA, json!({"ca.crt": "-----BEGIN CERTIFICATE-----\n"})),
    ] {
        cms.create(
            &pp,
            &from_json(json!({"metadata": {"name": name}, "data": data})),
        )
        .await
        .unwrap_or_else(|e| panic!("cannot create ConfigMap {name}: {e}"));
    }
    secrets
        .create(
            &pp,
            &from_json(
                json!({"metadata": {"name": PEER_TLS}, "type": "kubernetes.io/tls",
                "stringData": {"tls.crt": "c", "tls.key": "k", "ca.crt": "a"}}),
            ),
        )
        .await
        .unwrap_or_else(|e| panic!("cannot create Secret {PEER_TLS}: {e}"));
}

/// One run of `pod-check -o json` for `pod` in `ns` with the agent's token.
async fn pod_check(w: &World, ns: &str, pod: &str) -> AgentRun {
    let args = vec![
        "pod-check".to_owned(),
        "--pod-name".to_owned(),
        pod.to_owned(),
        "--namespace".to_owned(),
        ns.to_owned(),
        "--kubeconfig".to_owned(),
        w.kubeconfig(),
        "-o".to_owned(),
        "json".to_owned(),
    ];
    let run =
        match tokio::task::spawn_blocking(move || run_agent(&args, &[] as &[(&str, &str)])).await {
            Ok(run) => run,
            Err(e) => std::panic::resume_unwind(e.into_panic()),
        };
    assert_eq!(
        run.json()["exit_code"].as_i64(),
        Some(i64::from(run.code)),
        "one JSON document carrying the exit code:\n{run}"
    );
    run
}

fn hazard_paths(run: &AgentRun) -> Vec<(String, String)> {
    run.json()["hazards"]
        .as_array()
        .unwrap_or_else(|| panic!("no hazards list\n{run}"))
        .iter()
        .map(|h| {
            (
                h["kind"].as_str().unwrap_or_default().to_owned(),
                h["path"]
                    .as_str()
                    .or(h["container"].as_str())
                    .unwrap_or_default()
                    .to_owned(),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pod_check_on_a_real_pod_finds_the_deleted_configmap_through_every_kind_of_reference() {
    let w = World::start_bound_to(Some(member_pod())).await;
    create_config_maps_and_secrets(&w.admin).await;

    let step = "every referenced object exists";
    let run = pod_check(&w, NS, POD).await;
    assert_eq!(run.code, 0, "{step}\n{run}");
    assert_eq!(run.json()["outcome"], "clean", "{step}\n{run}");
    // Unscheduled: no kubelet runs here.
    assert_eq!(run.json()["phase"], "Pending", "{step}\n{run}");
    // envFrom, env.valueFrom (the optional one left out), the volume, two
    // projected sources of the bundle, one of kube-api-access, the peer TLS
    // volume: 7 references to 3 objects.
    assert_eq!(run.json()["checked_references"], 7, "{step}\n{run}");
    assert_eq!(run.json()["checked_objects"], 3, "{step}\n{run}");

    // Adoption deletes the legacy ConfigMap while the Pod still references it.
    let cms: Api<ConfigMap> = Api::namespaced(w.admin.clone(), NS);
    cms.delete(CLUSTER_STATE, &DeleteParams::default())
        .await
        .unwrap_or_else(|e| panic!("cannot delete {CLUSTER_STATE}: {e}"));
    let step = "the legacy ConfigMap deleted, the containers still running";
    let run = pod_check(&w, NS, POD).await;
    assert_eq!(run.code, 40, "{step}\n{run}");
    assert_eq!(run.json()["outcome"], "hazards", "{step}\n{run}");
    let missing = |p: &str| ("missing-reference".to_owned(), p.to_owned());
    assert_eq!(
        hazard_paths(&run),
        [
            missing("containers[etcd].envFrom[0].configMapRef"),
            missing("containers[etcd].env[0].valueFrom.configMapKeyRef"),
            missing("volumes[cluster-state].configMap"),
            missing("volumes[bundle].projected.sources[0].configMap"),
        ],
        "{step}\n{run}"
    );
    for h in run.json()["hazards"].as_array().into_iter().flatten() {
        assert_eq!(h["object_name"], CLUSTER_STATE, "{step}: {h}");
        assert_eq!(h["object_kind"], "ConfigMap", "{step}: {h}");
    }

    // A node reboot recreates the containers: the kubelet cannot build etcd's
    // and says so through pods/status, restartCount 0 for good (#373).
    let pods: Api<Pod> = Api::namespaced(w.admin.clone(), NS);
    let waiting = json!({"waiting": {
        "reason": "CreateContainerConfigError",
        "message": format!("configmap \"{CLUSTER_STATE}\" not found"),
    }});
    let status = json!({"status": {
        "phase": "Pending",
        "conditions": [
            {"type": "PodScheduled", "status": "True"},
            {"type": "Initialized", "status": "True"},
            {"type": "ContainersReady", "status": "False", "reason": "ContainersNotReady"},
            {"type": "Ready", "status": "False", "reason": "ContainersNotReady"},
        ],
        "initContainerStatuses": [{
            "name": "preflight", "image": "ghcr.io/cozystack/etcd-member-agent:v0.1.0", "imageID": "",
            "ready": true, "restartCount": 0,
            "state": {"terminated": {"exitCode": 0, "reason": "Completed",
                                     "startedAt": "2026-12-01T08:00:00Z", "finishedAt": "2026-12-01T08:00:01Z"}},
        }],
        "containerStatuses": [
            {"name": "etcd", "image": "quay.io/coreos/etcd:v3.6.11", "imageID": "",
             "ready": false, "started": false, "restartCount": 0, "state": waiting},
            {"name": "member-agent", "image": "ghcr.io/cozystack/etcd-member-agent:v0.1.0", "imageID": "",
             "ready": true, "started": true, "restartCount": 0,
             "state": {"running": {"startedAt": "2026-12-01T08:00:02Z"}}},
        ],
    }});
    pods.patch_status(POD, &PatchParams::default(), &Patch::Merge(status))
        .await
        .unwrap_or_else(|e| panic!("cannot write the Pod's status as a kubelet: {e}"));
    let step = "after a reboot: etcd stuck in CreateContainerConfigError, restartCount 0";
    let run = pod_check(&w, NS, POD).await;
    assert_eq!(run.code, 40, "{step}\n{run}");
    let paths = hazard_paths(&run);
    assert_eq!(paths.len(), 5, "{step}\n{run}");
    assert_eq!(
        paths[4],
        ("stuck-container".to_owned(), "etcd".to_owned()),
        "{step}\n{run}"
    );
    let stuck = &run.json()["hazards"][4];
    assert_eq!(stuck["reason"], "CreateContainerConfigError", "{run}");
    assert_eq!(stuck["restart_count"], 0, "{run}");
    assert!(
        stuck["message"]
            .as_str()
            .unwrap_or_default()
            .contains("restart-count self-heal cannot see it"),
        "{run}"
    );

    // The ConfigMap recreated: the references resolve again; the container is
    // still stuck until the kubelet retries, and pod-check still says so.
    cms.create(
        &PostParams::default(),
        &from_json(json!({"metadata": {"name": CLUSTER_STATE}, "data": {"ETCD_INITIAL_CLUSTER_STATE": "existing"}})),
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    let step = "the ConfigMap recreated, the status not yet updated";
    let run = pod_check(&w, NS, POD).await;
    assert_eq!(run.code, 40, "{step}\n{run}");
    assert_eq!(
        hazard_paths(&run),
        [("stuck-container".to_owned(), "etcd".to_owned())],
        "{step}\n{run}"
    );

    // Every hazard found is a Warning Event on the Pod (its real UID), once
    // however many checks found it: 4 references and the stuck container.
    let events = pod_events(&w, POD).await;
    let mut reasons: Vec<&str> = events
        .iter()
        .map(|e| e.reason.as_deref().unwrap_or_default())
        .collect();
    reasons.sort_unstable();
    assert_eq!(
        reasons,
        [
            "missing-reference",
            "missing-reference",
            "missing-reference",
            "missing-reference",
            "stuck-container"
        ],
        "{events:?}"
    );
    let uid = Api::<Pod>::namespaced(w.admin.clone(), NS)
        .get(POD)
        .await
        .unwrap_or_else(|e| panic!("{e}"))
        .metadata
        .uid;
    for e in &events {
        assert_eq!(e.type_.as_deref(), Some("Warning"), "{e:?}");
        assert_eq!(e.count, Some(1), "{e:?}");
        assert_eq!(e.involved_object.uid, uid, "{e:?}");
    }
}

// ---------------------------------------------------------------------------
// Least privilege, decided by the real authorizer.

/// With the shipped Role and a real token: every call the agent makes succeeds
/// (preflight's two GETs, pod-check's Pod GET and metadata GETs); anything
/// else the test tries with the same token is a real 403; and the agent, sent
/// where its Role does not reach, reports the 403 as such.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_shipped_role_allows_every_call_the_agent_makes_and_the_real_authorizer_denies_the_rest(
) {
    let w = World::start_bound_to(Some(member_pod())).await;
    create_config_maps_and_secrets(&w.admin).await;
    let members_admin = members(&w.admin, NS);
    let initial = seed_initial_cluster(MEMBER);
    create(&members_admin, member_doc(NS, MEMBER, true, &initial)).await;
    create(&clusters(&w.admin, NS), cluster_doc(NS)).await;

    // Every call the agent makes, as the agent.
    let step = "preflight with the shipped Role";
    let (_d, data) = empty_dir();
    run_preflight(pod_env(&w, NS, MEMBER, &initial, &data))
        .await
        .expect(step, 0, "bootstrap")
        .source(step, "kube", true, "");
    let run = pod_check(&w, NS, POD).await;
    assert_eq!(
        (run.code, run.json()["outcome"].as_str()),
        (0, Some("clean")),
        "pod-check with the shipped Role\n{run}"
    );

    // Everything else, with the same token: the real authorizer's 403.
    let secrets: Api<Secret> = Api::namespaced(w.agent.clone(), NS);
    assert_forbidden(
        secrets.list(&ListParams::default()).await,
        "listing Secrets",
        "list",
        "secrets",
    );
    let agent_members = members(&w.agent, NS);
    assert_forbidden(
        agent_members.list(&ListParams::default()).await,
        "listing EtcdMembers",
        "list",
        "etcdmembers",
    );
    assert_forbidden(
        agent_members
            .patch(
                MEMBER,
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"labels": {"touched": "yes"}}})),
            )
            .await,
        "patching the EtcdMember",
        "patch",
        "etcdmembers",
    );
    assert_forbidden(
        agent_members
            .patch_status(
                MEMBER,
                &PatchParams::default(),
                &Patch::Merge(json!({"status": {"memberID": MEMBER_ID}})),
            )
            .await,
        "patching the EtcdMember's status",
        "patch",
        "etcdmembers/status",
    );
    assert_forbidden(
        agent_members.delete(MEMBER, &DeleteParams::default()).await,
        "deleting the EtcdMember",
        "delete",
        "etcdmembers",
    );
    let pods: Api<Pod> = Api::namespaced(w.agent.clone(), NS);
    assert_forbidden(
        pods.patch_status(
            POD,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"phase": "Failed"}})),
        )
        .await,
        "writing its own Pod's status",
        "patch",
        "pods/status",
    );
    // The record of a member in another namespace (another tenant's cluster).
    w.api.create_namespace(OTHER_NS).await;
    create(
        &members(&w.admin, OTHER_NS),
        member_doc(OTHER_NS, MEMBER, true, &initial),
    )
    .await;
    create(&clusters(&w.admin, OTHER_NS), cluster_doc(OTHER_NS)).await;
    assert_forbidden(
        members(&w.agent, OTHER_NS).get(MEMBER).await,
        "reading another namespace's EtcdMember",
        "get",
        "etcdmembers",
    );
    // Nothing was changed by the refused writes.
    let after = members_admin
        .get(MEMBER)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        after.metadata.labels.unwrap_or_default().get("touched"),
        None
    );
    assert_eq!(after.data.get("status"), None);

    // The agent pointed at a record its Role does not cover reports the 403:
    // preflight as evidence it could not read (never bootstrap on it)...
    let step = "preflight for another namespace's member";
    let (_d, data) = empty_dir();
    let v = run_preflight(pod_env(&w, OTHER_NS, MEMBER, &initial, &data)).await;
    v.expect(step, 14, "phase-unknown").source(
        step,
        "kube",
        false,
        "forbidden: the service account needs RBAC `get` on etcdmembers.etcd-operator.cozystack.io in namespace tenant-b",
    );
    let error = v.evidence("kube")["error"].as_str().unwrap_or_default();
    assert!(
        error.contains(&format!(
            "User \"system:serviceaccount:{NS}:{AGENT_SERVICE_ACCOUNT}\" cannot get resource \"etcdmembers\""
        )),
        "the real authorizer's words are passed on: {error}\n{}",
        v.run
    );
    // ...and pod-check as a configuration error, never clean.
    let pods_admin: Api<Pod> = Api::namespaced(w.admin.clone(), OTHER_NS);
    let mut other_pod = member_pod();
    other_pod["metadata"]["namespace"] = json!(OTHER_NS);
    // That namespace's own agent identity, bound to its own ServiceAccount: the
    // token of tenant-a's agent still has no Role there.
    w.api.apply_deploy_base(OTHER_NS).await;
    pods_admin
        .create(&PostParams::default(), &from_json(other_pod))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let run = pod_check(&w, OTHER_NS, POD).await;
    assert_eq!(run.code, 2, "pod-check of another namespace's Pod\n{run}");
    assert_eq!(run.json()["outcome"], "error", "{run}");
    assert_eq!(run.json()["error"]["kind"], "forbidden", "{run}");
    assert_eq!(run.json()["error"]["class"], "configuration", "{run}");
    assert!(
        run.json()["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("cannot get resource \"pods\""),
        "{run}"
    );
    assert!(run.stderr.contains("NOT known to be clean"), "{run}");
}

/// The example overlay's Role, narrowed with resourceNames: another member's
/// record is a real 403, and so is a ConfigMap the list does not name; the
/// agent reports both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_example_overlays_resource_names_deny_another_members_record_and_unlisted_objects() {
    let w = World::start().await;
    // The overlay's patch replaces the base Role's rules (strategic merge of a
    // complete Role), as `kustomize build deploy/overlays/example` does.
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("deploy/overlays/example/role-resource-names.yaml");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{e}"));
    let narrowed: Value = serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("{e}"));
    let roles: Api<Role> = Api::namespaced(w.admin.clone(), NS);
    roles
        .patch(
            AGENT_SERVICE_ACCOUNT,
            &PatchParams::default(),
            &Patch::Merge(json!({"rules": narrowed["rules"]})),
        )
        .await
        .unwrap_or_else(|e| panic!("cannot narrow the Role: {e}"));
    let listed: Vec<String> = narrowed["rules"][0]["resourceNames"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|n| n.as_str().map(str::to_owned))
        .collect();
    assert!(listed.contains(&"etcd-7xk2p".to_owned()), "{listed:?}");
    let listed_member = "etcd-7xk2p";
    let other_member = "etcd-9";
    let members_admin = members(&w.admin, NS);
    for name in [listed_member, other_member] {
        create(
            &members_admin,
            member_doc(NS, name, true, &seed_initial_cluster(name)),
        )
        .await;
    }
    create(&clusters(&w.admin, NS), cluster_doc(NS)).await;

    // RBAC changes apply at once (the authorizer reads the informer cache; wait
    // until the narrowed rules are in force).
    let agent_members = members(&w.agent, NS);
    let deadline = Deadline::after(patience());
    loop {
        match agent_members.get(other_member).await {
            Err(kube::Error::Api(s)) if s.code == 403 => break,
            other if deadline.passed() => panic!("the narrowed Role is not in force: {other:?}"),
            _ => tokio::time::sleep(std::time::Duration::from_millis(100)).await,
        }
    }
    assert_forbidden(
        agent_members.get(other_member).await,
        "reading another member's record",
        "get",
        "etcdmembers",
    );
    agent_members
        .get(listed_member)
        .await
        .unwrap_or_else(|e| panic!("the listed member's record is readable: {e}"));

    let step = "preflight for the listed member";
    let (_d, data) = empty_dir();
    let initial = seed_initial_cluster(listed_member);
    run_preflight(pod_env(&w, NS, listed_member, &initial, &data))
        .await
        .expect(step, 0, "bootstrap")
        .source(step, "kube", true, "");
    let step = "preflight for a member the Role does not list";
    let (_d, data) = empty_dir();
    let initial = seed_initial_cluster(other_member);
    let v = run_preflight(pod_env(&w, NS, other_member, &initial, &data)).await;
    v.expect(step, 14, "phase-unknown").source(
        step,
        "kube",
        false,
        "forbidden: the service account needs RBAC `get` on etcdmembers",
    );
    assert!(
        v.evidence("kube")["error"]
            .as_str()
            .unwrap_or_default()
            .contains(&format!(
                "etcdmembers.etcd-operator.cozystack.io \"{other_member}\" is forbidden"
            )),
        "{}",
        v.run
    );

    // pod-check of the listed Pod, which references a ConfigMap the Role does
    // not list: forbidden, never "missing" and never clean.
    let mut pod = member_pod();
    pod["metadata"]["name"] = json!(listed_member);
    let pods: Api<Pod> = Api::namespaced(w.admin.clone(), NS);
    pods.create(&PostParams::default(), &from_json(pod))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    create_config_maps_and_secrets(&w.admin).await;
    let run = pod_check(&w, NS, listed_member).await;
    assert_eq!(run.code, 2, "{run}");
    assert_eq!(run.json()["error"]["kind"], "forbidden", "{run}");
    let message = run.json()["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains(&format!("configmaps \"{CLUSTER_STATE}\" is forbidden")),
        "{run}"
    );
    // The witness Leases: the listed member's can be created, read and
    // renewed with the agent's token; another member's is a real 403 for
    // both verbs that resourceNames narrows.
    let agent_leases: Api<k8s_openapi::api::coordination::v1::Lease> =
        Api::namespaced(w.agent.clone(), NS);
    let mine: k8s_openapi::api::coordination::v1::Lease = from_json(json!({
        "metadata": {"name": format!("etcd-witness-{listed_member}")},
        "spec": {"holderIdentity": listed_member},
    }));
    agent_leases
        .create(&PostParams::default(), &mine)
        .await
        .unwrap_or_else(|e| panic!("the agent creates its witness Lease: {e}"));
    let mut read = agent_leases
        .get(&format!("etcd-witness-{listed_member}"))
        .await
        .unwrap_or_else(|e| panic!("the agent reads its witness Lease: {e}"));
    read.spec
        .get_or_insert_with(Default::default)
        .lease_duration_seconds = Some(30);
    agent_leases
        .replace(
            &format!("etcd-witness-{listed_member}"),
            &PostParams::default(),
            &read,
        )
        .await
        .unwrap_or_else(|e| panic!("the agent renews its witness Lease: {e}"));
    let theirs: k8s_openapi::api::coordination::v1::Lease = from_json(json!({
        "metadata": {"name": format!("etcd-witness-{other_member}")},
        "spec": {"holderIdentity": other_member},
    }));
    let admin_leases: Api<k8s_openapi::api::coordination::v1::Lease> =
        Api::namespaced(w.admin.clone(), NS);
    let theirs = admin_leases
        .create(&PostParams::default(), &theirs)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_forbidden(
        agent_leases
            .get(&format!("etcd-witness-{other_member}"))
            .await,
        "reading another member's witness Lease",
        "get",
        "leases",
    );
    assert_forbidden(
        agent_leases
            .replace(
                &format!("etcd-witness-{other_member}"),
                &PostParams::default(),
                &theirs,
            )
            .await,
        "renewing another member's witness Lease",
        "update",
        "leases",
    );
    // And preflight for that member says the witness could not be read.
    let step = "preflight for a member the Role does not list: the witness too";
    let (_d, data) = empty_dir();
    let initial = seed_initial_cluster(other_member);
    run_preflight(pod_env(&w, NS, other_member, &initial, &data))
        .await
        .source(
            step,
            "witness",
            false,
            "forbidden: the service account needs RBAC `get` on leases.coordination.k8s.io",
        );

    // Namespaces are cluster-scoped: the agent cannot even see them.
    let namespaces: Api<Namespace> = Api::all(w.agent.clone());
    assert_forbidden(
        namespaces.get(NS).await,
        "reading its namespace",
        "get",
        "namespaces",
    );
}

// ---------------------------------------------------------------------------
// The witness Lease (docs/decision-table.md, docs/commands.md § serve): serve writes it, preflight and restore
// read it.

pub(crate) fn leases(client: &Client, ns: &str) -> Api<k8s_openapi::api::coordination::v1::Lease> {
    Api::namespaced(client.clone(), ns)
}

/// Waits until the Lease `name` exists and `ok` holds for it; returns it.
async fn wait_lease(
    w: &World,
    name: &str,
    what: &str,
    ok: impl Fn(&k8s_openapi::api::coordination::v1::Lease) -> bool,
) -> k8s_openapi::api::coordination::v1::Lease {
    let api = leases(&w.admin, NS);
    let deadline = Deadline::after(patience());
    loop {
        let last = api.get_opt(name).await;
        if let Ok(Some(lease)) = &last {
            if ok(lease) {
                return lease.clone();
            }
        }
        assert!(
            !deadline.passed(),
            "{what}: the Lease {name} never did: {last:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
}

pub(crate) fn annotation<'a>(
    lease: &'a k8s_openapi::api::coordination::v1::Lease,
    key: &str,
) -> &'a str {
    lease
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(key))
        .map(String::as_str)
        .unwrap_or_default()
}

pub(crate) const WITNESS: &str = "etcd-member-agent.cozystack.io/";

/// The seed of [`CLUSTER`] alone on real etcd 3.6, with `keys` keys written,
/// and its member and cluster IDs as 16 hex digits.
fn seed_36(keys: usize) -> (Cluster, String, String) {
    let etcd = Cluster::builder(EtcdVersion::V3_6)
        .members(1)
        .token(token_of(CLUSTER))
        .start();
    if keys > 0 {
        off_runtime(|| etcd.put_many("kept/", keys, 16));
    }
    let member_id = etcd[0].id_hex().expect("m0's ID");
    let cluster_id = format!(
        "{:016x}",
        etcd[0].endpoint_status()["header"]["cluster_id"]
            .as_u64()
            .expect("cluster_id")
    );
    (etcd, member_id, cluster_id)
}

/// Runs `f` on a thread of its own: the etcd harness blocks on a runtime of
/// its own, which a thread driving this test's runtime cannot.
fn off_runtime<T: Send>(f: impl FnOnce() -> T + Send) -> T {
    std::thread::scope(|s| match s.spawn(f).join() {
        Ok(v) => v,
        Err(e) => std::panic::resume_unwind(e),
    })
}

/// The Events on Pod `pod` of [`NS`], as `kubectl describe pod` finds them
/// (by involvedObject).
async fn pod_events(w: &World, pod: &str) -> Vec<k8s_openapi::api::core::v1::Event> {
    let api: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(w.admin.clone(), NS);
    let mut list = api
        .list(&ListParams::default().fields(&format!("involvedObject.name={pod}")))
        .await
        .unwrap_or_else(|e| panic!("cannot list Events: {e}"))
        .items;
    list.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    list
}

/// The window PR 355 leaves open, closed: the seed forms the cluster (real
/// etcd 3.6), its sidecar (`serve`, with the shipped Role and a real token)
/// writes the witness Lease, the operator has latched nothing (the
/// EtcdMember/EtcdCluster statuses are empty), the volume is wiped → preflight
/// refuses with 10 and restore with 34, where without the Lease preflight says
/// `bootstrap` (asserted at the end, after the Lease is deleted).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pr_355_window_a_wiped_seed_whose_sidecar_wrote_the_lease_is_never_bootstrapped() {
    use crate::serve_support::{metric, Serve};
    let (etcd, member_id, cluster_id) = seed_36(20);
    let m0 = &etcd[0];
    let scratch_dir = scratch();
    let snap = scratch_dir.path().join("create-time.db");
    etcd.snapshot_save(&snap);

    let w = World::start().await;
    let name = m0.name().to_owned();
    let lease_name = format!("etcd-witness-{name}");
    create(
        &members(&w.admin, NS),
        member_doc(NS, &name, true, m0.initial_cluster()),
    )
    .await;
    create(&clusters(&w.admin, NS), cluster_doc(NS)).await;

    let serve = Serve::beside(m0.client_url())
        .data_dir(m0.data_dir())
        .arg("--kube=true")
        .arg(format!("--namespace={NS}"))
        .arg(format!("--pod-name={name}"))
        .arg("--pod-uid=0d6f5b1e-seed-pod")
        .arg(format!("--initial-cluster-token={}", token_of(CLUSTER)))
        .arg(format!("--kubeconfig={}", w.kubeconfig()))
        .arg("--kube-interval=1s")
        .arg("--witness-interval=1s")
        .start();
    // Written as soon as the member answers; its raft index once proven on
    // the member's disk (nothing more is written: the WAL's last segment).
    let lease = wait_lease(&w, &lease_name, "serve writes the witness", |l| {
        annotation(l, &format!("{WITNESS}member-id")) == member_id
            && annotation(l, &format!("{WITNESS}raft-index"))
                .parse::<u64>()
                .is_ok_and(|i| i >= 20)
    })
    .await;
    assert_eq!(
        annotation(&lease, &format!("{WITNESS}cluster-id")),
        cluster_id
    );
    assert_eq!(annotation(&lease, &format!("{WITNESS}format")), "2");
    assert_eq!(
        annotation(&lease, &format!("{WITNESS}token-sha256")).len(),
        64,
        "{lease:?}"
    );
    assert_eq!(
        annotation(&lease, &format!("{WITNESS}pod-uid")),
        "0d6f5b1e-seed-pod"
    );
    let index: u64 = annotation(&lease, &format!("{WITNESS}raft-index"))
        .parse()
        .unwrap_or_else(|e| panic!("raft-index: {e}: {lease:?}"));
    assert!(index >= 20, "the raft index of 20 writes: {lease:?}");
    let term: u64 = annotation(&lease, &format!("{WITNESS}raft-term"))
        .parse()
        .unwrap_or_else(|e| panic!("raft-term: {e}: {lease:?}"));
    assert!(term >= 2, "{lease:?}");
    let spec = lease.spec.clone().unwrap_or_default();
    assert_eq!(spec.holder_identity.as_deref(), Some(name.as_str()));
    assert_eq!(spec.lease_duration_seconds, Some(3));
    // Renewed (an update through the shipped Role), the mark raised by new writes.
    let first_renewal = spec.renew_time.clone();
    off_runtime(|| etcd.put_many("more/", 10, 16));
    let renewed = wait_lease(&w, &lease_name, "serve renews the witness", |l| {
        let later = l.spec.as_ref().and_then(|s| s.renew_time.clone()) != first_renewal;
        let raised = annotation(l, &format!("{WITNESS}raft-index"))
            .parse::<u64>()
            .is_ok_and(|i| i >= index + 10);
        later && raised
    })
    .await;
    let mark: u64 = annotation(&renewed, &format!("{WITNESS}raft-index"))
        .parse()
        .unwrap_or_default();
    let metrics = serve.metrics();
    assert!(
        metric(&metrics, "etcd_agent_witness_writes_total", "result=\"ok\"").unwrap_or(0.0) >= 2.0,
        "{metrics}"
    );
    assert_eq!(
        metric(
            &metrics,
            "etcd_agent_witness_writes_total",
            "result=\"error\""
        ),
        None,
        "{metrics}\n{}",
        serve.log()
    );
    // The operator's status is still empty: only the Lease knows.
    let rec = members(&w.admin, NS)
        .get(&name)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(rec.data.get("status"), None, "{:?}", rec.data);
    drop(serve);

    // The volume is wiped.
    m0.stop();
    m0.wipe_data_dir();
    let mut env = m0.agent_env();
    for (k, v) in pod_env(&w, NS, &name, m0.initial_cluster(), m0.data_dir()) {
        if [
            "AGENT_KUBE",
            "POD_NAMESPACE",
            "POD_NAME",
            "KUBECONFIG",
            "ETCD_PEER_ENDPOINTS",
        ]
        .contains(&k.as_str())
        {
            env = with(&env, &k, &v);
        }
    }
    let env = with(&env, "POD_UID", "5c1d9a70-new-pod");
    let step = "the wiped seed, the Lease written, nothing latched";
    let v = run_preflight(env.clone()).await;
    v.expect(step, 10, "refuse-empty-formed")
        .row(step, "7")
        .source(step, "witness", true, "")
        .reason_mentions(
            step,
            &format!("the witness Lease {lease_name} records member {member_id} of cluster {cluster_id} running at raft index {mark}"),
        );
    assert_eq!(v.evidence("witness")["said"]["exists"], true, "{}", v.run);

    let step = "restore on the wiped seed";
    let mut args: Vec<String> = ["restore", "-o", "json", "--from-file"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    args.push(snap.display().to_string());
    let tool = EtcdVersion::V3_6
        .etcdutl()
        .expect("3.6 ships etcdutl")
        .display()
        .to_string();
    let restore_env = with(&env, "ETCDUTL_PATH", tool);
    let run = match tokio::task::spawn_blocking(move || run_agent(&args, &restore_env)).await {
        Ok(run) => run,
        Err(e) => std::panic::resume_unwind(e.into_panic()),
    };
    assert_eq!(run.code, 34, "{step}\n{run}");
    assert_eq!(run.json()["exit_code"], 34, "{step}\n{run}");
    assert!(
        run.json()["reason"]
            .as_str()
            .unwrap_or_default()
            .contains("witness Lease"),
        "{step}\n{run}"
    );
    assert!(
        entries(m0.data_dir()).is_empty(),
        "{step}: nothing restored: {:?}",
        entries(m0.data_dir())
    );

    // Both refusals are Events on the Pod, one each.
    let events = pod_events(&w, &name).await;
    let mut reasons: Vec<&str> = events
        .iter()
        .map(|e| e.reason.as_deref().unwrap_or_default())
        .collect();
    reasons.sort_unstable();
    assert_eq!(
        reasons,
        ["refuse-empty-formed", "refuse-formed"],
        "{events:?}"
    );

    // Today's behaviour without the Lease: the operator's empty status is
    // taken as "never formed".
    leases(&w.admin, NS)
        .delete(&lease_name, &DeleteParams::default())
        .await
        .unwrap_or_else(|e| panic!("cannot delete the Lease: {e}"));
    let step = "the same, the Lease deleted";
    run_preflight(env)
        .await
        .expect(step, 0, "bootstrap")
        .source(step, "witness", true, "");
}

/// A verdict of preflight that accepted a restore above the witnesses' mark
/// (row 5e, `witness.rebase`) replaces the witness Lease's position once, for
/// this Pod start: the renewal records the verdict (`rebased-by`), and every
/// renewal after it keeps the higher of the Lease's position and the member's
/// (a later rollback in the same Pod's life is not written over). Before, every
/// renewal re-based: the Lease's position followed the member down.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rebase_verdict_replaces_the_leases_position_once_then_renewals_keep_the_highest() {
    use crate::serve_support::{tail, Serve};
    let (etcd, member_id, cluster_id) = seed_36(20);
    let m0 = &etcd[0];
    let w = World::start().await;
    let name = m0.name().to_owned();
    let lease_name = format!("etcd-witness-{name}");
    create(
        &members(&w.admin, NS),
        member_doc(NS, &name, true, m0.initial_cluster()),
    )
    .await;
    create(&clusters(&w.admin, NS), cluster_doc(NS)).await;
    // The Lease of the history before the restore, far above this one.
    let above = 1_000_000u64;
    let key = |k: &str| format!("{WITNESS}{k}");
    let before: k8s_openapi::api::coordination::v1::Lease = serde_json::from_value(json!({
        "metadata": {"name": lease_name, "annotations": {
            key("format"): "2", key("member-id"): member_id, key("cluster-id"): cluster_id,
            key("raft-index"): above.to_string(), key("raft-term"): "2",
            key("revision"): above.to_string(),
        }},
        "spec": {"holderIdentity": "the-pod-before-the-restore"},
    }))
    .unwrap_or_else(|e| panic!("{e}"));
    leases(&w.admin, NS)
        .create(&PostParams::default(), &before)
        .await
        .unwrap_or_else(|e| panic!("create the Lease: {e}"));
    let pod = scratch();
    let verdict = pod.path().join("preflight.json");
    let decided_at = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs();
    let doc = json!({
        "verdict": "start", "row": "5e", "exit_code": 0,
        "reason": "restored above the witnesses' revision", "remedy": "",
        "decided_at_unix": decided_at, "pod_uid": "pod-rebased",
        "data_dir": {"member_id": member_id, "cluster_id": cluster_id},
        "witness": {"rebase": true},
    });
    std::fs::write(&verdict, doc.to_string()).unwrap_or_else(|e| panic!("{e}"));
    let serve = Serve::beside(m0.client_url())
        .data_dir(m0.data_dir())
        .verdict_file(&verdict)
        .arg("--kube=true")
        .arg(format!("--namespace={NS}"))
        .arg(format!("--pod-name={name}"))
        .arg("--pod-uid=pod-rebased")
        .arg(format!("--kubeconfig={}", w.kubeconfig()))
        .arg("--kube-interval=1s")
        .arg("--witness-interval=1s")
        .start();
    let index_of = |l: &k8s_openapi::api::coordination::v1::Lease| {
        annotation(l, &key("raft-index")).parse::<u64>().ok()
    };
    let rebased_for = format!("{decided_at}/pod-rebased/");
    let rebased = wait_lease(
        &w,
        &lease_name,
        "the verdict's re-base replaces the Lease's position",
        |l| index_of(l).is_some_and(|i| (20..above).contains(&i)),
    )
    .await;
    let rebased_index = index_of(&rebased).unwrap_or_default();
    // A position above the member's, recorded under this verdict: what a
    // rollback later in this Pod's life leaves the Lease with.
    let high = rebased_index + 500;
    let patched = leases(&w.admin, NS)
        .patch(
            &lease_name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {
                key("raft-index"): high.to_string(), key("revision"): high.to_string(),
            }}})),
        )
        .await
        .unwrap_or_else(|e| panic!("patch the Lease: {e}"));
    let at_patch = patched.spec.as_ref().and_then(|s| s.renew_time.clone());
    // Renewed after the patch (a renewal that read the Lease before it gets a
    // conflict): the higher position is kept.
    let renewed = wait_lease(&w, &lease_name, "serve renews the Lease", |l| {
        l.spec.as_ref().and_then(|s| s.renew_time.clone()) != at_patch
    })
    .await;
    assert_eq!(
        index_of(&renewed),
        Some(high),
        "a renewal after the re-base keeps the higher position: {renewed:?}\n{}",
        tail(&serve.log())
    );
    assert!(
        annotation(&renewed, &key("rebased-by")).starts_with(&rebased_for),
        "{renewed:?}"
    );
    drop(serve);
}

/// The witness Lease between and after renewals (docs/grpc-api.md, issue
/// 29): with an hour between renewals, new writes still reach the Lease (an
/// early renewal once the position proven on the member's disk moves past the
/// Lease's), and at SIGTERM, etcd having exited first and released its WAL,
/// the sidecar's last renewal records the position the WAL holds — so a copy
/// of the volume taken at shutdown is not above what the Lease says. Stopped
/// while etcd still holds its WAL, the sidecar records the polls' proven
/// position instead, never more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lease_follows_writes_between_renewals_and_records_the_disk_at_shutdown() {
    use crate::serve_support::{tail, Serve};
    let (etcd, member_id, _cluster_id) = seed_36(20);
    let m0 = &etcd[0];
    let w = World::start().await;
    let name = m0.name().to_owned();
    let lease_name = format!("etcd-witness-{name}");
    create(
        &members(&w.admin, NS),
        member_doc(NS, &name, true, m0.initial_cluster()),
    )
    .await;
    create(&clusters(&w.admin, NS), cluster_doc(NS)).await;
    let start_serve = || {
        Serve::beside(m0.client_url())
            .data_dir(m0.data_dir())
            .arg("--kube=true")
            .arg(format!("--namespace={NS}"))
            .arg(format!("--pod-name={name}"))
            .arg("--pod-uid=5c1d0e2a-early-renewal-pod")
            .arg(format!("--initial-cluster-token={}", token_of(CLUSTER)))
            .arg(format!("--kubeconfig={}", w.kubeconfig()))
            .arg("--kube-interval=1s")
            .arg("--witness-interval=1h")
            .start()
    };
    let index_of = |l: &k8s_openapi::api::coordination::v1::Lease| {
        annotation(l, &format!("{WITNESS}raft-index"))
            .parse::<u64>()
            .ok()
    };
    let raft_index = || {
        m0.endpoint_status()["raftIndex"]
            .as_u64()
            .unwrap_or_else(|| panic!("no raftIndex in {}", m0.endpoint_status()))
    };
    const LAST: &str =
        "shutting down: recorded the position the member's disk holds in the witness Lease";

    // 1. Stopped while etcd holds its WAL: the polls' proven position, which
    //    the member's disk holds (at or below its commit index).
    let mut serve = start_serve();
    let first = wait_lease(&w, &lease_name, "serve writes the witness", |l| {
        annotation(l, &format!("{WITNESS}member-id")) == member_id
            && index_of(l).is_some_and(|i| i >= 20)
    })
    .await;
    let first_index = index_of(&first).unwrap_or_default();
    // 2. New writes, an hour before the next renewal: an early one records them.
    off_runtime(|| etcd.put_many("early/", 30, 16));
    let after_early = raft_index();
    let early = wait_lease(
        &w,
        &lease_name,
        "an early renewal records the new writes",
        |l| index_of(l).is_some_and(|i| i >= after_early),
    )
    .await;
    assert!(
        index_of(&early) > Some(first_index),
        "{early:?}\n{}",
        tail(&serve.log())
    );
    serve.sigterm();
    let status = serve.wait_exit(std::time::Duration::from_secs(20));
    assert!(
        status.is_some_and(|s| s.success()),
        "serve exits 0 at SIGTERM: {status:?}\n{}",
        tail(&serve.log())
    );
    let log = serve.log();
    assert!(
        log.contains("the polls (etcd still holds its WAL)"),
        "{}",
        tail(&log)
    );
    let kept = leases(&w.admin, NS)
        .get(&lease_name)
        .await
        .unwrap_or_else(|e| panic!("get the Lease: {e}"));
    assert!(
        index_of(&kept).is_some_and(|i| i <= raft_index()),
        "stopped beside a running etcd, the Lease is never above its commit index: {kept:?}"
    );
    drop(serve);

    // 3. etcd stops first (the Pod deleted: the kubelet stops etcd, then the
    //    native sidecar), right after writes no poll proved yet: the last
    //    renewal reads them from the WAL.
    let mut serve = start_serve();
    wait_lease(&w, &lease_name, "the new sidecar renews the witness", |l| {
        index_of(l).is_some_and(|i| i >= after_early)
    })
    .await;
    off_runtime(|| etcd.put_many("last/", 30, 16));
    let last = raft_index();
    m0.stop();
    serve.sigterm();
    let status = serve.wait_exit(std::time::Duration::from_secs(20));
    assert!(
        status.is_some_and(|s| s.success()),
        "serve exits 0 at SIGTERM: {status:?}\n{}",
        tail(&serve.log())
    );
    let log = serve.log();
    assert!(
        log.contains("its WAL, etcd having exited") && log.contains(LAST),
        "the last renewal reads the WAL once etcd exited: {}",
        tail(&log)
    );
    let recorded = leases(&w.admin, NS)
        .get(&lease_name)
        .await
        .unwrap_or_else(|e| panic!("get the Lease: {e}"));
    assert!(
        index_of(&recorded).is_some_and(|i| i >= last),
        "the Lease records at least the raft index {last} of the last acknowledged write: {recorded:?}\n{}",
        tail(&log)
    );
    let wal_end = crate::rollback_review::copy_end(m0.data_dir());
    assert!(
        index_of(&recorded).is_some_and(|i| i <= wal_end),
        "never above where the WAL ends ({wal_end}): {recorded:?}"
    );
    drop(serve);
}

/// One refusal, visible three ways (issue 14; docs/commands.md § serve), where the
/// operator and people look: real etcd 3.6 formed the cluster and the operator
/// latched both IDs; the volume is wiped and the Pod recreated. `serve` starts
/// first, as the native sidecar does, with the shipped Role and a real token,
/// reporting to a collector; it waits for preflight's verdict. preflight
/// refuses (`refuse-empty-formed`, exit 10). Then (a) the Warning Event on the
/// Pod names the verdict, (b) the sidecar reports it on `/metrics`, in the push
/// report and over gRPC, and `/readyz` is 503 with the reason, (c) the
/// termination message carries it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_refusal_is_visible_three_ways_the_event_the_sidecar_and_the_termination_message() {
    use crate::serve_support::{
        assert_preflight_metrics, block_on, metric, CollectorServer, Serve,
    };
    let (etcd, member_id, cluster_id) = seed_36(5);
    let m0 = &etcd[0];
    let w = World::start().await;
    let name = m0.name().to_owned();
    create(
        &members(&w.admin, NS),
        member_doc(NS, &name, true, m0.initial_cluster()),
    )
    .await;
    create(&clusters(&w.admin, NS), cluster_doc(NS)).await;
    // The operator latched both IDs once the member was Ready.
    patch_status(
        &members(&w.admin, NS),
        &name,
        json!({"memberID": member_id}),
    )
    .await;
    patch_status(
        &clusters(&w.admin, NS),
        CLUSTER,
        json!({"clusterID": cluster_id}),
    )
    .await;

    // The volume is wiped; the Pod is recreated (a new UID, a fresh emptyDir).
    m0.stop();
    m0.wipe_data_dir();
    let pod_uid = "7e4a1c2b-recreated-pod";
    let run_dir = scratch();
    let verdict_file = run_dir.path().join("preflight.json");
    let termination_log = run_dir.path().join("termination-log");
    let collector_port = free_port();
    let mut collector = off_runtime(|| CollectorServer::start(collector_port, None));

    // The native sidecar starts first: nothing to report but the wait.
    let serve = Serve::beside(m0.client_url())
        .data_dir(m0.data_dir())
        .verdict_file(&verdict_file)
        .arg("--kube=true")
        .arg(format!("--namespace={NS}"))
        .arg(format!("--pod-name={name}"))
        .arg(format!("--pod-uid={pod_uid}"))
        .arg(format!("--kubeconfig={}", w.kubeconfig()))
        .arg("--kube-interval=1s")
        .arg(format!("--report-to=http://127.0.0.1:{collector_port}"))
        .arg("--report-interval=1s")
        .start();
    off_runtime(|| serve.wait_readyz_saying(503, "waiting for preflight's verdict: no file at"));

    // preflight, with the Pod's env, the shared verdict file and its
    // termination log.
    let mut env = m0.agent_env();
    for (k, v) in pod_env(&w, NS, &name, m0.initial_cluster(), m0.data_dir()) {
        env = with(&env, &k, &v);
    }
    for (k, v) in [
        ("POD_UID", pod_uid.to_owned()),
        ("AGENT_VERDICT_FILE", verdict_file.display().to_string()),
        ("TERMINATION_LOG", termination_log.display().to_string()),
        ("AGENT_TIMEOUT", "10s".to_owned()),
    ] {
        env = with(&env, k, v);
    }
    let run =
        match tokio::task::spawn_blocking(move || run_agent(["preflight", "-o", "json"], &env))
            .await
        {
            Ok(run) => run,
            Err(e) => std::panic::resume_unwind(e.into_panic()),
        };
    assert_eq!(run.code, 10, "{run}");
    assert_eq!(run.json()["verdict"], "refuse-empty-formed", "{run}");
    let reason = run.json()["reason"].as_str().unwrap_or_default().to_owned();
    assert!(reason.contains(&member_id), "{run}");

    // (a) The Event on the Pod, as `kubectl describe pod` lists it.
    let events = pod_events(&w, &name).await;
    assert_eq!(events.len(), 1, "{events:?}");
    let e = &events[0];
    assert_eq!(e.reason.as_deref(), Some("refuse-empty-formed"), "{e:?}");
    assert_eq!(e.type_.as_deref(), Some("Warning"), "{e:?}");
    assert_eq!(e.message.as_deref(), Some(reason.as_str()), "{e:?}");
    assert_eq!(e.involved_object.uid.as_deref(), Some(pod_uid), "{e:?}");

    // (b) The sidecar: /readyz, /metrics, the push report, gRPC.
    let body = off_runtime(|| {
        serve.wait_readyz_saying(
            503,
            "preflight refused this Pod start (refuse-empty-formed, exit 10)",
        )
    });
    assert!(body.contains(&reason), "{body}");
    assert!(!body.contains("waiting for preflight"), "{body}");
    let metrics = serve.metrics();
    assert_preflight_metrics(&metrics, "refuse-empty-formed", 10);
    assert_eq!(metric(&metrics, "etcd_agent_ready", ""), Some(0.0));
    let report = off_runtime(|| {
        collector.wait_report("carrying the refusal", |r| {
            r.identity
                .as_ref()
                .and_then(|i| i.preflight.as_ref())
                .is_some_and(|p| p.verdict == "refuse-empty-formed")
        })
    });
    assert_eq!(
        (report.pod_name.as_str(), report.namespace.as_str()),
        (name.as_str(), NS)
    );
    let identity = report.identity.unwrap_or_default();
    let preflight = identity.preflight.clone().unwrap_or_default();
    assert_eq!(preflight.exit_code, 10);
    assert_eq!(preflight.reason, reason);
    assert!(!identity.consistent);
    assert!(
        identity
            .reasons
            .first()
            .is_some_and(|r| r.starts_with("preflight refused this Pod start")),
        "{:?}",
        identity.reasons
    );
    let got = off_runtime(|| block_on(serve.identity()));
    assert_eq!(
        got.preflight.map(|p| (p.verdict, p.exit_code)),
        Some(("refuse-empty-formed".to_owned(), 10))
    );

    // (c) The termination message.
    let message = std::fs::read_to_string(&termination_log)
        .unwrap_or_else(|e| panic!("no termination message: {e}\n{run}"));
    assert!(message.len() <= 4096, "{message}");
    let message: Value =
        serde_json::from_str(&message).unwrap_or_else(|e| panic!("{e}: {message}"));
    assert_eq!(message["verdict"], "refuse-empty-formed", "{message}");
    assert_eq!(message["exit_code"], 10, "{message}");
    drop(serve);
    off_runtime(|| collector.stop());
}

/// A real member's data dir against its witness: the Lease's IDs are
/// checked like the operator's record (another member ID → foreign), and a
/// Lease the agent may not read (another namespace: a real 403) never lets
/// an empty seed bootstrap on the operator's empty status.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_of_another_identity_is_foreign_and_an_unreadable_one_fails_closed() {
    let w = World::start().await;
    let initial = seed_initial_cluster(MEMBER);
    create(
        &members(&w.admin, NS),
        member_doc(NS, MEMBER, true, &initial),
    )
    .await;
    create(&clusters(&w.admin, NS), cluster_doc(NS)).await;
    let step = "no Lease: unchanged";
    let (_d, data) = empty_dir();
    run_preflight(pod_env(&w, NS, MEMBER, &initial, &data))
        .await
        .expect(step, 0, "bootstrap")
        .source(step, "witness", true, "");

    let lease_name = format!("etcd-witness-{MEMBER}");
    // The IDs this seed's flags derive (the Lease its own sidecar would have
    // written when it formed the cluster): a Lease of other IDs, written
    // before incarnations were recorded, is another cluster's (issue 29 case 4).
    let ic = etcd_member_agent::disk::ids::parse_initial_cluster(&initial).expect("initial");
    let derived = etcd_member_agent::disk::ids::bootstrap_ids(&ic, &token_of(CLUSTER));
    let seed_id = derived[MEMBER];
    let seed_member_id = seed_id.to_string();
    let seed_cluster_id = etcd_member_agent::disk::ids::cluster_id(&[seed_id]).to_string();
    let lease: k8s_openapi::api::coordination::v1::Lease = from_json(json!({
        "metadata": {"name": lease_name, "annotations": {
            format!("{WITNESS}member-id"): seed_member_id,
            format!("{WITNESS}cluster-id"): seed_cluster_id,
            format!("{WITNESS}raft-term"): "2",
            format!("{WITNESS}raft-index"): "41",
        }},
        "spec": {"holderIdentity": MEMBER},
    }));
    leases(&w.admin, NS)
        .create(&PostParams::default(), &lease)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let step = "a Lease for this member";
    let (_d, data) = empty_dir();
    let env = with(
        &pod_env(&w, NS, MEMBER, &initial, &data),
        "POD_UID",
        "5c1d9a70-this-pod",
    );
    // run_preflight checks every run's termination message (the verdict,
    // reason and remedy of the document) whatever the Event did.
    let v = run_preflight(env.clone()).await;
    v.expect(step, 10, "refuse-empty-formed").reason_mentions(
        step,
        &format!("the witness Lease {lease_name} records member {seed_member_id}"),
    );
    // The refusal is an Event on the Pod, once however often preflight runs.
    let reason = v.doc()["reason"].as_str().unwrap_or_default().to_owned();
    run_preflight(env)
        .await
        .expect("the init container restarted", 10, "refuse-empty-formed");
    let events = pod_events(&w, MEMBER).await;
    assert_eq!(events.len(), 1, "one Event per verdict per Pod: {events:?}");
    let e = &events[0];
    assert_eq!(e.reason.as_deref(), Some("refuse-empty-formed"), "{e:?}");
    assert_eq!(e.type_.as_deref(), Some("Warning"), "{e:?}");
    assert_eq!(e.message.as_deref(), Some(reason.as_str()), "{e:?}");
    assert_eq!(e.count, Some(1), "{e:?}");
    assert_eq!(e.involved_object.kind.as_deref(), Some("Pod"), "{e:?}");
    assert_eq!(
        e.involved_object.uid.as_deref(),
        Some("5c1d9a70-this-pod"),
        "{e:?}"
    );

    // The same member in another namespace, whose Role the agent lacks: the
    // operator's record is unreadable too there, so give it a Role covering
    // the records but not the Leases, as a stale deploy/base would.
    w.api.create_namespace(OTHER_NS).await;
    create(
        &members(&w.admin, OTHER_NS),
        member_doc(OTHER_NS, MEMBER, true, &initial),
    )
    .await;
    create(&clusters(&w.admin, OTHER_NS), cluster_doc(OTHER_NS)).await;
    let roles: Api<Role> = Api::namespaced(w.admin.clone(), OTHER_NS);
    roles
        .create(
            &PostParams::default(),
            &from_json(json!({
                "metadata": {"name": "records-only"},
                "rules": [{"apiGroups": [GROUP], "resources": ["etcdmembers", "etcdclusters"], "verbs": ["get"]}],
            })),
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let bindings: Api<k8s_openapi::api::rbac::v1::RoleBinding> =
        Api::namespaced(w.admin.clone(), OTHER_NS);
    bindings
        .create(
            &PostParams::default(),
            &from_json(json!({
                "metadata": {"name": "records-only"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "records-only"},
                "subjects": [{"kind": "ServiceAccount", "name": AGENT_SERVICE_ACCOUNT, "namespace": NS}],
            })),
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let agent_members = members(&w.agent, OTHER_NS);
    let deadline = Deadline::after(patience());
    while agent_members.get(MEMBER).await.is_err() {
        assert!(!deadline.passed(), "the records-only Role is not in force");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_forbidden(
        leases(&w.agent, OTHER_NS).get(&lease_name).await,
        "reading a Lease without the Lease rules",
        "get",
        "leases",
    );
    let step = "the seed, nothing latched, the Lease unreadable (403)";
    let (_d, data) = empty_dir();
    let v = run_preflight(pod_env(&w, OTHER_NS, MEMBER, &initial, &data)).await;
    v.expect(step, 14, "phase-unknown")
        .row(step, "9b")
        .source(step, "kube", true, "")
        .source(
            step,
            "witness",
            false,
            "forbidden: the service account needs RBAC `get` on leases.coordination.k8s.io",
        );

    // An initialized dir of another member ID than the Lease's.
    let etcd = Cluster::builder(EtcdVersion::V3_6)
        .members(1)
        .token(token_of(CLUSTER))
        .start();
    let m0 = &etcd[0];
    let member_id = m0.id_hex().expect("m0's ID");
    m0.stop();
    let name = m0.name().to_owned();
    // A Lease of this incarnation (the token this cluster was formed with)
    // recording another member ID: another member's volume is mounted here.
    let token_sha256 = etcd_member_agent::disk::ids::token_sha256(&token_of(CLUSTER));
    let lease_of = |format: Option<&str>| -> k8s_openapi::api::coordination::v1::Lease {
        let mut annotations = json!({
            format!("{WITNESS}member-id"): MEMBER_ID,
            format!("{WITNESS}cluster-id"): CLUSTER_ID,
            format!("{WITNESS}raft-term"): "2",
            format!("{WITNESS}raft-index"): "0",
        });
        if let Some(f) = format {
            annotations[format!("{WITNESS}format")] = json!(f);
            annotations[format!("{WITNESS}token-sha256")] = json!(token_sha256);
        }
        from_json(json!({
            "metadata": {"name": format!("etcd-witness-{name}"), "annotations": annotations},
        }))
    };
    let api = leases(&w.admin, NS);
    api.create(&PostParams::default(), &lease_of(Some("2")))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let mut env = m0.agent_env();
    for (k, v) in pod_env(&w, NS, &name, m0.initial_cluster(), m0.data_dir()) {
        if ["AGENT_KUBE", "POD_NAMESPACE", "POD_NAME", "KUBECONFIG"].contains(&k.as_str()) {
            env = with(&env, &k, &v);
        }
    }
    let step = "a real member's dir, a Lease of its incarnation recording another member ID";
    run_preflight(env.clone())
        .await
        .expect(step, 11, "refuse-foreign")
        .reason_mentions(
            step,
            &format!(
                "member ID in the WAL is {member_id} but the witness Lease etcd-witness-{name} says {MEMBER_ID}"
            ),
        );
    // The same IDs in a Lease an earlier sidecar wrote (no incarnation): IDs
    // this member's flags do not derive are another cluster's, which says
    // nothing about this directory — the flags agree with it.
    api.delete(&format!("etcd-witness-{name}"), &DeleteParams::default())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    api.create(&PostParams::default(), &lease_of(None))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let step = "a real member's dir, an earlier sidecar's Lease of IDs its flags do not derive";
    run_preflight(env)
        .await
        .expect(step, 0, "start")
        .warns(step, "another incarnation");
}

/// Issue 17 item 3 through the Lease, as issue 29 decides it: a member
/// re-bootstrapped on a wiped volume (same IDs, a short log) is refused by the
/// next Pod's preflight on the position the witness Lease proved on its disk
/// (`refuse-rolled-back`, 17, row 6e, the Lease named with the command that
/// clears it), and a sidecar beside the short log never lowers that position.
/// The sidecar itself no longer reads the Lease's position back: a position of
/// another history would hold every later Pod not ready (issue 29 case 5).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_re_bootstrapped_under_the_same_ids_is_refused_on_the_leases_position() {
    use crate::serve_support::Serve;
    let etcd = Cluster::builder(EtcdVersion::V3_5)
        .members(1)
        .token(token_of(CLUSTER))
        .start();
    let m0 = &etcd[0];
    off_runtime(|| etcd.put_many("kept/", 60, 16));
    let w = World::start().await;
    let name = m0.name().to_owned();
    let lease_name = format!("etcd-witness-{name}");
    let sidecar = || {
        Serve::beside(m0.client_url())
            .data_dir(m0.data_dir())
            .arg("--kube=true")
            .arg(format!("--namespace={NS}"))
            .arg(format!("--pod-name={name}"))
            .arg(format!("--initial-cluster-token={}", token_of(CLUSTER)))
            .arg(format!("--kubeconfig={}", w.kubeconfig()))
            .arg("--kube-interval=1s")
            .arg("--witness-interval=1s")
            .start()
    };
    let serve = off_runtime(sidecar);
    let lease = wait_lease(&w, &lease_name, "serve writes the witness", |l| {
        annotation(l, &format!("{WITNESS}raft-index"))
            .parse::<u64>()
            .is_ok_and(|i| i >= 60)
    })
    .await;
    let mark: u64 = annotation(&lease, &format!("{WITNESS}raft-index"))
        .parse()
        .unwrap_or_default();
    drop(serve);

    // The volume is wiped; etcd re-bootstraps under the same IDs (an etcd
    // container restarted without its init containers).
    off_runtime(|| {
        m0.kill9();
        m0.wipe_data_dir();
        m0.start();
        m0.wait_healthy();
        etcd.put("new/0", "after the wipe");
    });
    // A sidecar beside it renews the Lease: the position stays the mark.
    let serve = off_runtime(sidecar);
    let first = lease.spec.as_ref().and_then(|s| s.renew_time.clone());
    let after = wait_lease(&w, &lease_name, "serve renews the witness", |l| {
        l.spec.as_ref().and_then(|s| s.renew_time.clone()) != first
    })
    .await;
    let kept: u64 = annotation(&after, &format!("{WITNESS}raft-index"))
        .parse()
        .unwrap_or_default();
    assert_eq!(kept, mark, "{after:?}\n{}", serve.log());
    drop(serve);

    // The next Pod: preflight, before etcd starts.
    off_runtime(|| m0.stop());
    let mut env = m0.agent_env();
    for (k, v) in pod_env(&w, NS, &name, m0.initial_cluster(), m0.data_dir()) {
        if ["AGENT_KUBE", "POD_NAMESPACE", "POD_NAME", "KUBECONFIG"].contains(&k.as_str()) {
            env = with(&env, &k, &v);
        }
    }
    let step = "a member re-bootstrapped under its IDs, the Lease's position above its log";
    let v = run_preflight(env).await;
    v.expect(step, 17, "refuse-rolled-back")
        .row(step, "6e")
        .reason_mentions(step, &format!("the witness Lease {lease_name}"))
        .reason_mentions(step, &format!("{mark}"));
    let remedy = v.doc()["remedy"].as_str().unwrap_or_default();
    assert!(
        remedy.contains(&format!("kubectl -n {NS} delete lease {lease_name}")),
        "{step}: the remedy names the command that clears the Lease\n{}",
        v.run
    );
}

/// Issue 29 cases 3 and 4: a cluster deleted and created again under the same
/// member names with a new token (its EtcdCluster re-created), the earlier
/// incarnation's witness Lease left behind (Leases outlive a cluster as PVCs
/// do). A fresh seed on a fresh volume bootstraps — the Lease is another
/// incarnation's, said in a warning with the command that removes it — and the
/// earlier incarnation's volume is refused as foreign (row 6a): the Lease of
/// the old IDs vouches for nothing. The same with a Lease an earlier sidecar
/// wrote (no incarnation): its IDs are not the ones the seed's flags derive.
/// Before, the fresh seed was refused `refuse-empty-formed` forever and the old
/// volume started, serving the earlier cluster's keyspace as the new cluster.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_earlier_incarnations_lease_neither_vouches_for_its_volume_nor_refuses_a_fresh_seed() {
    use crate::serve_support::Serve;
    let old_token = format!("{}-old", token_of(CLUSTER));
    let new_token = format!("{}-new", token_of(CLUSTER));
    let etcd = Cluster::builder(EtcdVersion::V3_6)
        .members(1)
        .token(old_token.clone())
        .start();
    let m0 = &etcd[0];
    off_runtime(|| etcd.put_many("earlier-incarnation/", 10, 16));
    let w = World::start().await;
    let name = m0.name().to_owned();
    let lease_name = format!("etcd-witness-{name}");
    let serve = off_runtime(|| {
        Serve::beside(m0.client_url())
            .data_dir(m0.data_dir())
            .arg("--kube=true")
            .arg(format!("--namespace={NS}"))
            .arg(format!("--pod-name={name}"))
            .arg(format!("--initial-cluster-token={old_token}"))
            .arg(format!("--kubeconfig={}", w.kubeconfig()))
            .arg("--witness-interval=1s")
            .start()
    });
    let lease = wait_lease(
        &w,
        &lease_name,
        "the earlier incarnation's sidecar writes its witness",
        |l| {
            annotation(l, &format!("{WITNESS}raft-index"))
                .parse::<u64>()
                .is_ok_and(|i| i >= 10)
        },
    )
    .await;
    drop(serve);
    off_runtime(|| m0.stop());

    // The cluster is created again: new EtcdCluster, new token, same names.
    create(&clusters(&w.admin, NS), cluster_doc(NS)).await;
    patch_status(
        &clusters(&w.admin, NS),
        CLUSTER,
        json!({"clusterToken": new_token}),
    )
    .await;
    let mut member = member_doc(NS, &name, true, m0.initial_cluster());
    member["spec"]["clusterToken"] = json!(new_token);
    create(&members(&w.admin, NS), member).await;
    let env_for = |data_dir: &Path| {
        let mut env = pod_env(&w, NS, &name, m0.initial_cluster(), data_dir);
        env = with(&env, "ETCD_INITIAL_CLUSTER_TOKEN", &new_token);
        with(&env, "ETCD_PEER_URLS", m0.peer_url())
    };
    let clear = format!("kubectl -n {NS} delete lease {lease_name}");

    for legacy in [false, true] {
        if legacy {
            // The Lease as a sidecar before incarnations wrote it.
            let mut old = lease.clone();
            if let Some(a) = old.metadata.annotations.as_mut() {
                a.retain(|k, _| !k.ends_with("/format") && !k.ends_with("/token-sha256"));
            }
            old.metadata.resource_version = None;
            let api = leases(&w.admin, NS);
            api.delete(&lease_name, &DeleteParams::default())
                .await
                .unwrap_or_else(|e| panic!("{e}"));
            api.create(&PostParams::default(), &old)
                .await
                .unwrap_or_else(|e| panic!("{e}"));
        }
        let which = if legacy {
            "an earlier sidecar's"
        } else {
            "the earlier incarnation's"
        };

        let (_fresh, fresh) = empty_dir();
        let step = format!("a fresh seed on a fresh volume, {which} Lease left behind");
        run_preflight(env_for(&fresh))
            .await
            .expect(&step, 0, "bootstrap")
            .row(&step, "9")
            .warns(&step, "another incarnation")
            .warns(&step, &clear);

        let step = format!("the earlier incarnation's volume, {which} Lease left behind");
        run_preflight(env_for(m0.data_dir()))
            .await
            .expect(&step, 11, "refuse-foreign")
            .row(&step, "6a")
            .warns(&step, "another incarnation");
    }
}
