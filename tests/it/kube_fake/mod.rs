//! An in-process stand-in for the Kubernetes API server, for the operator's
//! `EtcdMember`/`EtcdCluster` objects: real HTTP on `127.0.0.1`, the real paths,
//! the real `Status` error bodies, and faults chosen per path. Clients reach it
//! the way the binary will, through a kubeconfig file pointing at
//! `http://127.0.0.1:PORT`.
//!
//! ```ignore
//! let api = FakeApi::start().await
//!     .member(member_obj("etcd-abcde", "etcd", true, None))
//!     .cluster(cluster_obj("etcd", Some("769f1c9e0d723d0b")))
//!     .fault(cluster_path(NAMESPACE, "etcd"), Fault::Status(403));
//! run_binary_with(api.kubeconfig_path());
//! api.stop().await;
//! ```
//!
//! Objects and faults can also be changed while the server runs (`put`,
//! `set_fault`, `clear_faults`), and every request is recorded (`requests`).
//!
//! It also serves core objects — Pods, ConfigMaps and Secrets under
//! `/api/v1/namespaces/{ns}/{pods,configmaps,secrets}/{name}` — and answers a
//! metadata-only GET as a real API server does: when `Accept` asks for
//! `application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1`, the body is a
//! `meta.k8s.io/v1` `PartialObjectMetadata` carrying only the object's
//! `metadata` (never a Secret's `data`). Each recorded request keeps its
//! `Accept` header and the `kind` of the body it was answered with, so a test
//! can prove that no Secret data was ever served:
//!
//! ```ignore
//! let api = FakeApi::start().await
//!     .object(pod)
//!     .object(secret_obj("etcd-peer-tls", &["tls.crt", "tls.key"]));
//! // ... run the binary ...
//! assert!(api.requests().iter().all(|r| r.answered.as_deref() != Some("Secret")));
//! ```

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use axum::extract::State;
use axum::http::{header, HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::Router;
use serde_json::{json, Value};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// The operator's API group and version.
pub const GROUP: &str = "etcd-operator.cozystack.io";
/// The served version.
pub const VERSION: &str = "v1alpha2";
/// The namespace the object builders use and the kubeconfig's context names.
pub const NAMESPACE: &str = "tenant-a";
/// The bearer token the kubeconfig carries.
pub const TOKEN: &str = "fake-service-account-token";
/// The service account named in `Forbidden` messages.
pub const SERVICE_ACCOUNT: &str = "etcd-member-agent";

/// The URL path of a `coordination.k8s.io/v1` `Lease` (the witness).
pub fn lease_path(namespace: &str, name: &str) -> String {
    format!("/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{name}")
}

/// The URL path of an `EtcdMember`.
pub fn member_path(namespace: &str, name: &str) -> String {
    format!("/apis/{GROUP}/{VERSION}/namespaces/{namespace}/etcdmembers/{name}")
}

/// The URL path of an `EtcdCluster`.
pub fn cluster_path(namespace: &str, name: &str) -> String {
    format!("/apis/{GROUP}/{VERSION}/namespaces/{namespace}/etcdclusters/{name}")
}

/// The URL path of a Pod.
pub fn pod_path(namespace: &str, name: &str) -> String {
    format!("/api/v1/namespaces/{namespace}/pods/{name}")
}

/// The URL path of a ConfigMap.
pub fn config_map_path(namespace: &str, name: &str) -> String {
    format!("/api/v1/namespaces/{namespace}/configmaps/{name}")
}

/// The URL path of a Secret.
pub fn secret_path(namespace: &str, name: &str) -> String {
    format!("/api/v1/namespaces/{namespace}/secrets/{name}")
}

/// The media type a metadata-only GET asks for (what kube-rs and client-go send).
pub const PARTIAL_OBJECT_METADATA: &str =
    "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1";

/// What the server does for a path instead of serving the object there.
#[derive(Debug, Clone)]
pub enum Fault {
    /// Answer with this HTTP code and the `Status` body a real API server writes
    /// for it (404 NotFound naming the object, 403 Forbidden naming the verb,
    /// 500 InternalError, 503 ServiceUnavailable, …).
    Status(u16),
    /// Answer 404 as for a resource type that is not served (CRD not
    /// installed): "the server could not find the requested resource".
    NotServed,
    /// Wait this long, then answer as if there were no fault.
    Delay(Duration),
    /// Answer with this code and this body verbatim (`application/json`).
    Raw(u16, String),
}

impl Fault {
    /// A 200 whose body is truncated JSON.
    pub fn truncated_json() -> Fault {
        Fault::Raw(
            200,
            r#"{"apiVersion":"etcd-operator.cozystack.io/v1alpha2","kind":"EtcdMember","metadata":{"name":"#
                .to_owned(),
        )
    }
}

/// One request as the server saw it.
#[derive(Debug, Clone)]
pub struct Recorded {
    /// HTTP method.
    pub method: String,
    /// Path without the query.
    pub path: String,
    /// The `Authorization` header, if any.
    pub authorization: Option<String>,
    /// The `Accept` header, if any.
    pub accept: Option<String>,
    /// The `kind` of the JSON body it was answered with (`Secret`,
    /// `PartialObjectMetadata`, `Status`, …); `None` while the answer is
    /// pending or when the body was not a JSON object with a `kind`.
    pub answered: Option<String>,
}

struct FaultRule {
    fault: Fault,
    /// How many more requests it applies to; `None` for all.
    remaining: Option<usize>,
}

#[derive(Default)]
struct Inner {
    objects: HashMap<String, Value>,
    faults: HashMap<String, FaultRule>,
    requests: Vec<Recorded>,
}

#[derive(Clone)]
struct Shared {
    inner: Arc<Mutex<Inner>>,
    shutdown: watch::Receiver<bool>,
}

fn lock(inner: &Mutex<Inner>) -> MutexGuard<'_, Inner> {
    // A panicking test thread must not take the server down with it.
    inner
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The running fake API server. Stops on [`FakeApi::stop`] or when dropped.
pub struct FakeApi {
    inner: Arc<Mutex<Inner>>,
    shutdown: watch::Sender<bool>,
    server: Option<JoinHandle<()>>,
    kubeconfig: PathBuf,
    _dir: tempfile::TempDir,
}

impl FakeApi {
    /// Binds `127.0.0.1:0`, starts serving, and writes a kubeconfig for it.
    pub async fn start() -> FakeApi {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .unwrap_or_else(|e| panic!("fake API: bind: {e}"));
        let addr = listener
            .local_addr()
            .unwrap_or_else(|e| panic!("fake API: local_addr: {e}"));
        let url = format!("http://{addr}");

        let inner = Arc::new(Mutex::new(Inner::default()));
        let (shutdown, shutdown_rx) = watch::channel(false);
        let shared = Shared {
            inner: Arc::clone(&inner),
            shutdown: shutdown_rx.clone(),
        };
        let app = Router::new().fallback(handle).with_state(shared);
        let mut stop = shutdown_rx;
        let server = tokio::spawn(async move {
            let graceful = async move {
                let _ = stop.wait_for(|stopped| *stopped).await;
            };
            if let Err(e) = axum::serve(listener, app)
                .with_graceful_shutdown(graceful)
                .await
            {
                eprintln!("fake API server failed: {e}");
            }
        });

        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("fake API: tempdir: {e}"));
        let kubeconfig = dir.path().join("kubeconfig");
        std::fs::write(&kubeconfig, kubeconfig_for(&url, NAMESPACE))
            .unwrap_or_else(|e| panic!("fake API: write kubeconfig: {e}"));

        FakeApi {
            inner,
            shutdown,
            server: Some(server),
            kubeconfig,
            _dir: dir,
        }
    }

    /// Serves an `EtcdMember` object at its path (from its metadata).
    pub fn member(self, obj: Value) -> Self {
        self.put(obj);
        self
    }

    /// Serves an `EtcdCluster` object at its path (from its metadata).
    pub fn cluster(self, obj: Value) -> Self {
        self.put(obj);
        self
    }

    /// Serves any object the server knows (`Pod`, `ConfigMap`, `Secret`,
    /// `EtcdMember`, `EtcdCluster`) at its path (from its metadata).
    pub fn object(self, obj: Value) -> Self {
        self.put(obj);
        self
    }

    /// Applies `fault` to every request for `path`.
    pub fn fault(self, path: impl Into<String>, fault: Fault) -> Self {
        self.set_fault(path, fault, None);
        self
    }

    /// Applies `fault` to the next `times` requests for `path`, then serves
    /// normally.
    pub fn fault_times(self, path: impl Into<String>, fault: Fault, times: usize) -> Self {
        self.set_fault(path, fault, Some(times));
        self
    }

    /// Delays every answer for `path` by `delay`.
    pub fn delay(self, path: impl Into<String>, delay: Duration) -> Self {
        self.fault(path, Fault::Delay(delay))
    }

    /// Serves `obj` (an `EtcdMember`, `EtcdCluster`, `Pod`, `ConfigMap` or
    /// `Secret`) at the path its `kind`, `metadata.namespace` and
    /// `metadata.name` give, replacing what was there.
    pub fn put(&self, obj: Value) {
        let path = path_of(&obj);
        lock(&self.inner).objects.insert(path, obj);
    }

    /// Stops serving whatever is at `path` (it answers 404 NotFound).
    pub fn remove(&self, path: &str) {
        lock(&self.inner).objects.remove(path);
    }

    /// Sets the fault for `path`, for `times` requests or (`None`) for good.
    pub fn set_fault(&self, path: impl Into<String>, fault: Fault, times: Option<usize>) {
        lock(&self.inner).faults.insert(
            path.into(),
            FaultRule {
                fault,
                remaining: times,
            },
        );
    }

    /// Removes every fault.
    pub fn clear_faults(&self) {
        lock(&self.inner).faults.clear();
    }

    /// A kubeconfig whose current context points at this server, in
    /// [`NAMESPACE`], with a bearer token.
    pub fn kubeconfig_path(&self) -> &Path {
        &self.kubeconfig
    }

    /// Every request served so far, in order.
    pub fn requests(&self) -> Vec<Recorded> {
        lock(&self.inner).requests.clone()
    }

    /// Shuts the server down gracefully (delayed answers are cut short) and
    /// waits for it.
    pub async fn stop(mut self) {
        let _ = self.shutdown.send(true);
        if let Some(server) = self.server.take() {
            if tokio::time::timeout(Duration::from_secs(5), server)
                .await
                .is_err()
            {
                panic!("fake API server did not stop within 5 s");
            }
        }
    }
}

impl Drop for FakeApi {
    fn drop(&mut self) {
        let _ = self.shutdown.send(true);
        if let Some(server) = self.server.take() {
            server.abort();
        }
    }
}

fn kubeconfig_for(url: &str, namespace: &str) -> String {
    // JSON is YAML; serde_json keeps the quoting right.
    let doc = json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "fake", "cluster": {"server": url}}],
        "users": [{"name": SERVICE_ACCOUNT, "user": {"token": TOKEN}}],
        "contexts": [{
            "name": "fake",
            "context": {"cluster": "fake", "user": SERVICE_ACCOUNT, "namespace": namespace},
        }],
        "current-context": "fake",
        "preferences": {},
    });
    serde_json::to_string_pretty(&doc).unwrap_or_default()
}

fn path_of(obj: &Value) -> String {
    let kind = obj["kind"].as_str().unwrap_or_default();
    let ns = obj["metadata"]["namespace"].as_str().unwrap_or(NAMESPACE);
    let name = obj["metadata"]["name"]
        .as_str()
        .unwrap_or_else(|| panic!("fake API: object without metadata.name: {obj}"));
    match kind {
        "EtcdMember" => member_path(ns, name),
        "EtcdCluster" => cluster_path(ns, name),
        "Pod" => pod_path(ns, name),
        "ConfigMap" => config_map_path(ns, name),
        "Secret" => secret_path(ns, name),
        "Lease" => lease_path(ns, name),
        other => panic!("fake API: cannot serve kind {other:?}"),
    }
}

/// A namespaced object path the server serves.
struct ObjectPath<'a> {
    /// API group; `""` for the core group.
    group: &'static str,
    namespace: &'a str,
    plural: &'a str,
    name: &'a str,
}

/// Splits a served namespaced object path; `None` for anything else.
fn parse_object_path(path: &str) -> Option<ObjectPath<'_>> {
    let operator_prefix = format!("/apis/{GROUP}/{VERSION}/namespaces/");
    let (group, rest, plurals): (&'static str, &str, &[&str]) =
        if let Some(rest) = path.strip_prefix(&operator_prefix) {
            (GROUP, rest, &["etcdmembers", "etcdclusters"])
        } else if let Some(rest) = path.strip_prefix("/api/v1/namespaces/") {
            ("", rest, &["pods", "configmaps", "secrets"])
        } else if let Some(rest) = path.strip_prefix("/apis/coordination.k8s.io/v1/namespaces/") {
            ("coordination.k8s.io", rest, &["leases"])
        } else {
            return None;
        };
    let mut parts = rest.split('/');
    let namespace = parts.next()?;
    let plural = parts.next()?;
    let name = parts.next()?;
    if parts.next().is_some() || !plurals.contains(&plural) {
        return None;
    }
    Some(ObjectPath {
        group,
        namespace,
        plural,
        name,
    })
}

/// Whether an `Accept` header asks for `PartialObjectMetadata` (in any of its
/// comma-separated media ranges), and in which `meta.k8s.io` version.
fn wants_partial_metadata(accept: Option<&str>) -> Option<&'static str> {
    for range in accept?.split(',') {
        let mut params = range.split(';').map(str::trim);
        let _media = params.next();
        let (mut as_, mut g, mut v) = (None, None, None);
        for p in params {
            match p.split_once('=') {
                Some(("as", x)) => as_ = Some(x),
                Some(("g", x)) => g = Some(x),
                Some(("v", x)) => v = Some(x),
                _ => {}
            }
        }
        if as_ == Some("PartialObjectMetadata") && g == Some("meta.k8s.io") {
            match v {
                Some("v1") => return Some("v1"),
                Some("v1beta1") => return Some("v1beta1"),
                _ => {}
            }
        }
    }
    None
}

/// What a real API server answers to a metadata-only GET: the object's
/// `metadata`, as `meta.k8s.io/{version}` `PartialObjectMetadata`.
pub fn partial_object_metadata(obj: &Value, version: &str) -> Value {
    json!({
        "kind": "PartialObjectMetadata",
        "apiVersion": format!("meta.k8s.io/{version}"),
        "metadata": obj.get("metadata").cloned().unwrap_or_else(|| json!({})),
    })
}

async fn handle(
    State(shared): State<Shared>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
) -> Response {
    let path = uri.path().to_owned();
    let header_text = |name| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    let accept = header_text(header::ACCEPT);
    let (index, fault) = {
        let mut inner = lock(&shared.inner);
        inner.requests.push(Recorded {
            method: method.to_string(),
            path: path.clone(),
            authorization: header_text(header::AUTHORIZATION),
            accept: accept.clone(),
            answered: None,
        });
        let index = inner.requests.len() - 1;
        (index, take_fault(&mut inner, &path))
    };

    let (code, body, content_type) =
        answer(&shared, &method, &path, accept.as_deref(), fault).await;
    let answered = serde_json::from_str::<Value>(&body)
        .ok()
        .and_then(|v| v.get("kind").and_then(Value::as_str).map(str::to_owned));
    if let Some(recorded) = lock(&shared.inner).requests.get_mut(index) {
        recorded.answered = answered;
    }
    let code = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    (code, [(header::CONTENT_TYPE, content_type)], body).into_response()
}

/// The answer to one request: (status code, body, content type).
async fn answer(
    shared: &Shared,
    method: &Method,
    path: &str,
    accept: Option<&str>,
    fault: Option<Fault>,
) -> (u16, String, String) {
    let json = |code: u16, body: Value| (code, body.to_string(), "application/json".to_owned());
    match fault {
        Some(Fault::Status(code)) => return json(code, status_body(code, path)),
        Some(Fault::NotServed) => return json(404, not_served_body()),
        Some(Fault::Raw(code, body)) => return (code, body, "application/json".to_owned()),
        Some(Fault::Delay(delay)) => {
            let mut shutdown = shared.shutdown.clone();
            tokio::select! {
                _ = tokio::time::sleep(delay) => {}
                _ = shutdown.wait_for(|stopped| *stopped) => {
                    return json(503, status_body(503, path));
                }
            }
        }
        None => {}
    }

    if method != Method::GET {
        return json(405, status_body(405, path));
    }
    let obj = lock(&shared.inner).objects.get(path).cloned();
    match (obj, parse_object_path(path)) {
        (Some(obj), _) => match wants_partial_metadata(accept) {
            Some(version) => (
                200,
                partial_object_metadata(&obj, version).to_string(),
                format!("application/json;as=PartialObjectMetadata;g=meta.k8s.io;v={version}"),
            ),
            None => json(200, obj),
        },
        (None, Some(_)) => json(404, status_body(404, path)),
        (None, None) => json(404, not_served_body()),
    }
}

fn take_fault(inner: &mut Inner, path: &str) -> Option<Fault> {
    let rule = inner.faults.get_mut(path)?;
    let fault = rule.fault.clone();
    match &mut rule.remaining {
        None => {}
        Some(0) => {
            inner.faults.remove(path);
            return None;
        }
        Some(n) => {
            *n -= 1;
            if *n == 0 {
                inner.faults.remove(path);
            }
        }
    }
    Some(fault)
}

fn not_served_body() -> Value {
    json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": "the server could not find the requested resource",
        "reason": "NotFound",
        "details": {},
        "code": 404,
    })
}

/// The `Status` a real API server writes for `code` on a GET of `path`.
pub fn status_body(code: u16, path: &str) -> Value {
    let ObjectPath {
        group,
        namespace: ns,
        plural,
        name,
    } = parse_object_path(path).unwrap_or(ObjectPath {
        group: GROUP,
        namespace: NAMESPACE,
        plural: "etcdmembers",
        name: "",
    });
    // The core group has no name: `configmaps "x" not found`, and its details
    // carry no `group`.
    let (resource, details) = if group.is_empty() {
        (plural.to_owned(), json!({"name": name, "kind": plural}))
    } else {
        (
            format!("{plural}.{group}"),
            json!({"name": name, "group": group, "kind": plural}),
        )
    };
    let (reason, message, details) = match code {
        404 => ("NotFound", format!("{resource} \"{name}\" not found"), details),
        403 => (
            "Forbidden",
            format!(
                "{resource} \"{name}\" is forbidden: User \"system:serviceaccount:{ns}:{SERVICE_ACCOUNT}\" \
                 cannot get resource \"{plural}\" in API group \"{group}\" in the namespace \"{ns}\""
            ),
            details,
        ),
        401 => ("Unauthorized", "Unauthorized".to_owned(), json!({})),
        405 => (
            "MethodNotAllowed",
            "the server does not allow this method on the requested resource".to_owned(),
            details,
        ),
        429 => (
            "TooManyRequests",
            "too many requests, please try again later".to_owned(),
            json!({"retryAfterSeconds": 1}),
        ),
        500 => (
            "InternalError",
            "Internal error occurred: etcdserver: request timed out".to_owned(),
            json!({"causes": [{"message": "etcdserver: request timed out"}]}),
        ),
        503 => (
            "ServiceUnavailable",
            "the server is currently unable to handle the request".to_owned(),
            json!({"retryAfterSeconds": 1}),
        ),
        504 => (
            "Timeout",
            "the server was unable to return a response in the time allotted".to_owned(),
            json!({"retryAfterSeconds": 1}),
        ),
        _ => ("", format!("fake API: injected HTTP {code}"), json!({})),
    };
    json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "details": details,
        "code": code,
    })
}

/// A UID that is stable for a name, shaped like the API server's.
pub fn uid_for(name: &str) -> String {
    // FNV-1a, twice with different seeds, is plenty for fixtures.
    let fnv = |seed: u64| {
        name.bytes().fold(seed, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
        })
    };
    let a = fnv(0xcbf2_9ce4_8422_2325);
    let b = fnv(0x8422_2325_cbf2_9ce4);
    format!(
        "{:08x}-{:04x}-4{:03x}-8{:03x}-{:012x}",
        a >> 32,
        (a >> 16) & 0xffff,
        a & 0xfff,
        b >> 52,
        b & 0xffff_ffff_ffff
    )
}

/// The cluster token the operator derives: `<ns>-<name>-<uid>`.
pub fn cluster_token(cluster: &str) -> String {
    format!("{NAMESPACE}-{cluster}-{}", uid_for(cluster))
}

fn peer_url(member: &str, cluster: &str) -> String {
    format!("https://{member}.{cluster}.{NAMESPACE}.svc:2380")
}

fn cluster_labels(cluster: &str) -> Value {
    json!({
        "app.kubernetes.io/name": "etcd",
        "app.kubernetes.io/instance": cluster,
        "app.kubernetes.io/managed-by": "etcd-operator",
        "etcd-operator.cozystack.io/cluster": cluster,
    })
}

/// An `EtcdMember` as the operator writes it, in [`NAMESPACE`].
///
/// `bootstrap` marks the seed (its `initialCluster` names only itself; a
/// scale-up member's names the seed too). With `member_id` the member has been
/// Ready (`status.memberID` latched, `Ready=True`); without, its Pod exists but
/// has not become Ready. Edit the returned JSON for other shapes.
pub fn member_obj(name: &str, cluster: &str, bootstrap: bool, member_id: Option<&str>) -> Value {
    let initial_cluster = if bootstrap {
        format!("{name}={}", peer_url(name, cluster))
    } else {
        let seed = format!("{cluster}-seed0");
        format!(
            "{seed}={},{name}={}",
            peer_url(&seed, cluster),
            peer_url(name, cluster)
        )
    };
    let mut labels = cluster_labels(cluster);
    labels["app.kubernetes.io/component"] = json!(name);

    let mut spec = json!({
        "clusterName": cluster,
        "version": "3.5.1",
        "storage": {"size": "1Gi", "medium": ""},
        "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}},
        "initialCluster": initial_cluster,
        "clusterToken": cluster_token(cluster),
        "replicas": 1,
        "tls": {
            "clientServerSecretRef": {"name": format!("{cluster}-server-tls")},
            "clientMTLS": true,
            "peerSecretRef": {"name": format!("{cluster}-peer-tls")},
        },
    });
    // `bootstrap` is omitempty in the operator's types: absent when false.
    if bootstrap {
        spec["bootstrap"] = json!(true);
    }

    let ready = member_id.is_some();
    let mut status = json!({
        "podName": name,
        "podUID": uid_for(&format!("pod/{name}")),
        "replicas": 1,
        "selector": format!(
            "app.kubernetes.io/component={name},app.kubernetes.io/instance={cluster},\
             app.kubernetes.io/managed-by=etcd-operator,app.kubernetes.io/name=etcd,\
             etcd-operator.cozystack.io/cluster={cluster}"
        ),
        "pvcName": format!("data-{name}"),
        "conditions": [if ready {
            json!({
                "type": "Ready",
                "status": "True",
                "observedGeneration": 1,
                "lastTransitionTime": "2025-11-02T09:14:37Z",
                "reason": "PodReady",
                "message": "etcd member is ready",
            })
        } else {
            json!({
                "type": "Ready",
                "status": "False",
                "observedGeneration": 1,
                "lastTransitionTime": "2025-11-02T09:14:05Z",
                "reason": "PodNotReady",
                "message": "pod phase: Pending",
            })
        }],
    });
    // The seed is pre-stamped a voter; others become voters once promoted.
    if bootstrap || ready {
        status["isVoter"] = json!(true);
    }
    if let Some(id) = member_id {
        status["memberID"] = json!(id);
        status["version"] = json!("3.5.1");
    }

    json!({
        "apiVersion": format!("{GROUP}/{VERSION}"),
        "kind": "EtcdMember",
        "metadata": {
            "name": name,
            "generateName": format!("{cluster}-"),
            "namespace": NAMESPACE,
            "uid": uid_for(&format!("etcdmember/{name}")),
            "resourceVersion": "48213",
            "generation": 1,
            "creationTimestamp": "2025-11-02T09:14:02Z",
            "labels": labels,
            "finalizers": ["etcd-operator.cozystack.io/member-cleanup"],
            "ownerReferences": [{
                "apiVersion": format!("{GROUP}/{VERSION}"),
                "kind": "EtcdCluster",
                "name": cluster,
                "uid": uid_for(cluster),
                "controller": true,
                "blockOwnerDeletion": true,
            }],
        },
        "spec": spec,
        "status": status,
    })
}

/// An `EtcdCluster` as the operator writes it, in [`NAMESPACE`], three replicas.
/// With `cluster_id` the cluster has formed (`status.clusterID` latched,
/// `Available=True`); without, it is waiting for its seed.
pub fn cluster_obj(name: &str, cluster_id: Option<&str>) -> Value {
    let storage = json!({"size": "1Gi", "medium": ""});
    let formed = cluster_id.is_some();
    let conditions = if formed {
        json!([
            {"type": "Available", "status": "True", "observedGeneration": 1,
             "lastTransitionTime": "2025-11-02T09:14:41Z", "reason": "QuorumHealthy",
             "message": "All members are ready"},
            {"type": "Progressing", "status": "False", "observedGeneration": 1,
             "lastTransitionTime": "2025-11-02T09:15:30Z", "reason": "Reconciled",
             "message": "actual state matches status.observed"},
            {"type": "Degraded", "status": "False", "observedGeneration": 1,
             "lastTransitionTime": "2025-11-02T09:14:41Z", "reason": "QuorumHealthy",
             "message": ""},
        ])
    } else {
        json!([
            {"type": "Progressing", "status": "True", "observedGeneration": 1,
             "lastTransitionTime": "2025-11-02T09:14:02Z", "reason": "WaitingForSeed",
             "message": format!("seed member \"{name}-seed0\" has no Pod yet")},
        ])
    };
    let mut status = json!({
        "readyMembers": if formed { 3 } else { 0 },
        "selector": format!("etcd-operator.cozystack.io/cluster={name}"),
        "clusterToken": cluster_token(name),
        "observed": {"replicas": 3, "version": "3.5.1", "storage": storage},
        "conditions": conditions,
    });
    if let Some(id) = cluster_id {
        status["clusterID"] = json!(id);
    }
    json!({
        "apiVersion": format!("{GROUP}/{VERSION}"),
        "kind": "EtcdCluster",
        "metadata": {
            "name": name,
            "namespace": NAMESPACE,
            "uid": uid_for(name),
            "resourceVersion": "48190",
            "generation": 1,
            "creationTimestamp": "2025-11-02T09:14:01Z",
            "annotations": {},
        },
        "spec": {
            "replicas": 3,
            "version": "3.5.1",
            "storage": storage,
            "progressDeadlineSeconds": 600,
            "tls": {
                "client": {
                    "serverSecretRef": {"name": format!("{name}-server-tls")},
                    "operatorClientSecretRef": {"name": format!("{name}-operator-client-tls")},
                },
                "peer": {"secretRef": {"name": format!("{name}-peer-tls")}},
            },
        },
        "status": status,
    })
}

/// Standard base64 with padding, as Secret `data` carries it.
pub fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for (i, shift) in [18, 12, 6, 0].into_iter().enumerate() {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[((n >> shift) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// The clear text every fixture Secret holds under each key; a test can look
/// for it (or its base64, [`secret_value_base64`]) in output that must not
/// carry Secret data.
pub const SECRET_VALUE: &str =
    "-----BEGIN PRIVATE KEY-----\nfake-secret-material-0d6f\n-----END PRIVATE KEY-----\n";

/// [`SECRET_VALUE`] as it appears in a Secret's `data`.
pub fn secret_value_base64() -> String {
    base64(SECRET_VALUE.as_bytes())
}

fn core_metadata(kind: &str, name: &str) -> Value {
    json!({
        "name": name,
        "namespace": NAMESPACE,
        "uid": uid_for(&format!("{kind}/{name}")),
        "resourceVersion": "48177",
        "creationTimestamp": "2025-10-12T08:01:44Z",
        "managedFields": [{
            "manager": "kubectl-create",
            "operation": "Update",
            "apiVersion": "v1",
            "time": "2025-10-12T08:01:44Z",
            "fieldsType": "FieldsV1",
            "fieldsV1": {"f:data": {}},
        }],
    })
}

/// A ConfigMap in [`NAMESPACE`] holding `data` (string keys to string values).
pub fn config_map_obj(name: &str, data: Value) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": core_metadata("configmap", name),
        "data": data,
    })
}

/// A Secret in [`NAMESPACE`] (`kubernetes.io/tls` when it has `tls.crt`, else
/// `Opaque`) whose every key holds [`SECRET_VALUE`], base64-encoded as the API
/// serves it.
pub fn secret_obj(name: &str, keys: &[&str]) -> Value {
    let data: serde_json::Map<String, Value> = keys
        .iter()
        .map(|k| ((*k).to_owned(), json!(secret_value_base64())))
        .collect();
    let secret_type = if keys.contains(&"tls.crt") {
        "kubernetes.io/tls"
    } else {
        "Opaque"
    };
    json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": core_metadata("secret", name),
        "type": secret_type,
        "data": data,
    })
}
