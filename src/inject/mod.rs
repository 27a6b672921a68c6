//! From an etcd member's Pod spec to its guarded form: one pure function,
//! [`guard`], behind two front doors (`etcd-member-agent inject` on manifests,
//! `etcd-member-agent webhook` at admission). No I/O here: a Pod template in,
//! a JSON Patch out, or the reason it is left alone, or what could not be
//! understood.
//!
//! Everything the agent's containers are told is derived from the etcd
//! container itself ([`etcd`]: its flags and `ETCD_*` env, with the kubelet's
//! `$(VAR)` expansion, [`expand`]), through one table ([`table`]); what
//! differs per replica stays a reference to the downward API, so one
//! StatefulSet template guards every member. Nothing is added to the etcd
//! container (etcd reads every `ETCD_*` variable as a flag) unless the Pod asks
//! for the sidecar's readiness probe ([`ANNOTATION_READINESS`]).
//!
//! The patch adds, relative to the template: the native sidecar `etcd-agent`
//! first among the init containers and `etcd-preflight` last, the verdict
//! `emptyDir`, a projected service-account token mounted into those two only,
//! the mounts of etcd's data and TLS volumes (read-only), the annotation that
//! records the injected version ([`ANNOTATION_INJECTED`], which makes a second
//! injection a no-op), and `kubectl.kubernetes.io/default-container`. Every op
//! targets a node of the original object, so the ops are independent of one
//! another (the text editor of `inject` relies on it).

pub mod diff;
pub mod etcd;
pub mod expand;
pub mod objects;
pub mod patch;
pub mod table;
pub mod yaml;

#[cfg(test)]
mod fixtures;

use serde_json::{json, Map, Value};

use self::etcd::EtcdContainer;
use self::patch::{escape, Op};
use self::table::Derived;

/// Label (on a namespace or a Pod) that asks the webhook to guard etcd Pods.
pub const LABEL_INJECT: &str = "etcd-member-agent.cozystack.io/inject";
/// The label's value that opts in.
pub const INJECT_ENABLED: &str = "enabled";
/// Annotation that opts a Pod out ([`ANNOTATION_INJECT`]` = disabled`).
pub const ANNOTATION_INJECT: &str = "etcd-member-agent.cozystack.io/inject";
/// The opt-out value.
pub const INJECT_DISABLED: &str = "disabled";
/// Annotation recording the agent version that guarded the Pod.
pub const ANNOTATION_INJECTED: &str = "etcd-member-agent.cozystack.io/injected";
/// Annotation naming the etcd container, when more than one looks like etcd.
pub const ANNOTATION_ETCD_CONTAINER: &str = "etcd-member-agent.cozystack.io/etcd-container";
/// Annotation `agent`: the etcd container's readiness probe becomes the
/// sidecar's `/readyz` (off by default).
pub const ANNOTATION_READINESS: &str = "etcd-member-agent.cozystack.io/readiness-probe";
/// Annotation `false`: the agent does not read the Kubernetes API (a static
/// Pod has no service-account token).
pub const ANNOTATION_KUBE_API: &str = "etcd-member-agent.cozystack.io/kube-api";
/// Annotation naming the CA that signed etcd's serving certificate (when no
/// `--trusted-ca-file` does).
pub const ANNOTATION_CLIENT_CA: &str = "etcd-member-agent.cozystack.io/client-ca-file";
/// Annotation naming the client certificate the agent presents to etcd.
pub const ANNOTATION_CLIENT_CERT: &str = "etcd-member-agent.cozystack.io/client-cert-file";
/// Annotation naming the key of that certificate.
pub const ANNOTATION_CLIENT_KEY: &str = "etcd-member-agent.cozystack.io/client-key-file";
/// `app.kubernetes.io/name` of the webhook's own Pods: never guarded.
pub const WEBHOOK_APP: &str = "etcd-member-agent-webhook";
/// The native sidecar's name.
pub const SIDECAR: &str = "etcd-agent";
/// The init container's name.
pub const PREFLIGHT: &str = "etcd-preflight";
/// The verdict `emptyDir`.
pub const RUN_VOLUME: &str = "etcd-agent-run";
/// The projected service-account token of the agent's containers.
pub const TOKEN_VOLUME: &str = "etcd-agent-kube-api-access";
/// Where preflight writes its verdict for the sidecar.
pub const VERDICT_FILE: &str = "/run/etcd-agent/preflight.json";
const RUN_DIR: &str = "/run/etcd-agent";
const TOKEN_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";
const AGENT_BINARY: &str = "/usr/local/bin/etcd-member-agent";
/// The sidecar's gRPC port.
pub const GRPC_PORT: u16 = 9465;
/// The sidecar's HTTP port (`/livez`, `/readyz`, `/metrics`).
pub const HTTP_PORT: u16 = 9466;

/// How to guard.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    /// The agent's image.
    pub image: String,
    /// Its `imagePullPolicy` (the cluster's default when `None`).
    pub image_pull_policy: Option<String>,
    /// Whether the agent reads the Kubernetes API (a Pod's annotation may say otherwise).
    pub kube: bool,
    /// The version recorded in [`ANNOTATION_INJECTED`].
    pub version: String,
    /// Env set in both agent containers as given, after (and over) what is
    /// derived: what no Pod says, such as push mode's `AGENT_REPORT_TO`.
    pub extra_env: Vec<(String, String)>,
}

/// Why an object is left as it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Skip {
    /// No container runs etcd.
    NoEtcd,
    /// The Pod opts out ([`ANNOTATION_INJECT`]` = disabled`).
    OptedOut,
    /// Already guarded by this injection (its version).
    AlreadyInjected(String),
    /// Already guarded by hand: a container runs the agent.
    AlreadyGuarded(String),
    /// A mirror Pod: what runs is the kubelet's static Pod file.
    MirrorPod,
    /// One of the webhook's own Pods.
    WebhookPod,
}

impl std::fmt::Display for Skip {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Skip::NoEtcd => f.write_str("no etcd container"),
            Skip::OptedOut => write!(f, "opted out ({ANNOTATION_INJECT}: {INJECT_DISABLED})"),
            Skip::AlreadyInjected(v) => write!(f, "already guarded ({ANNOTATION_INJECTED}: {v})"),
            Skip::AlreadyGuarded(c) => {
                write!(f, "already guarded by hand (container {c} runs the agent)")
            }
            Skip::MirrorPod => f.write_str("a mirror Pod (inject the static Pod's file instead)"),
            Skip::WebhookPod => f.write_str("the webhook's own Pod"),
        }
    }
}

/// An etcd Pod the agent cannot understand: never guessed at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unresolvable {
    /// The etcd container, when it was found.
    pub container: Option<String>,
    /// What could not be resolved: a flag as spelled, an env var, a field.
    pub subject: String,
    /// Why.
    pub reason: String,
    /// What to change.
    pub remedy: String,
}

impl Unresolvable {
    /// A problem with `subject` of `container`.
    pub fn new(
        container: Option<&str>,
        subject: &str,
        reason: impl Into<String>,
        remedy: impl Into<String>,
    ) -> Unresolvable {
        Unresolvable {
            container: container.map(str::to_owned),
            subject: subject.to_owned(),
            reason: reason.into(),
            remedy: remedy.into(),
        }
    }
}

impl std::fmt::Display for Unresolvable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if let Some(c) = &self.container {
            write!(f, "container {c}: ")?;
        }
        write!(f, "{}: {}; {}", self.subject, self.reason, self.remedy)
    }
}

impl std::error::Error for Unresolvable {}

/// A guarded Pod: the patch and what it says.
#[derive(Debug, Clone, PartialEq)]
pub struct Injection {
    /// The JSON Patch (paths relative to the Pod or template).
    pub patch: Vec<Op>,
    /// The etcd container.
    pub container: String,
    /// The member's name as the agent is told it (`$(POD_NAME)` when per replica).
    pub member: String,
    /// The data dir.
    pub data_dir: String,
    /// The number of other members' client URLs preflight asks.
    pub peers: usize,
    /// TLS towards etcd.
    pub tls: bool,
    /// Things worth saying that do not stop the injection.
    pub notes: Vec<String>,
}

impl Injection {
    /// The patch with every path under `prefix` (a JSON pointer to the template).
    pub fn patch_at(&self, prefix: &str) -> Vec<Op> {
        self.patch
            .iter()
            .map(|op| Op {
                path: format!("{prefix}{}", op.path),
                ..op.clone()
            })
            .collect()
    }
}

/// What [`guard`] decided.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// Guarded: apply the patch.
    Injected(Box<Injection>),
    /// Left as it is.
    Skipped(Skip),
    /// An etcd Pod the agent cannot understand.
    Unresolvable(Unresolvable),
}

fn annotations(template: &Value) -> Map<String, Value> {
    template
        .pointer("/metadata/annotations")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default()
}

fn annotation<'a>(annotations: &'a Map<String, Value>, key: &str) -> Option<&'a str> {
    annotations.get(key).and_then(Value::as_str)
}

/// A container that already runs the agent (the example Pod's hand-made
/// integration): its name.
fn runs_agent(spec: &Value) -> Option<String> {
    ["initContainers", "containers"]
        .iter()
        .filter_map(|k| spec.get(*k).and_then(Value::as_array))
        .flatten()
        .find(|c| {
            let words: Vec<&str> = ["command", "args"]
                .iter()
                .filter_map(|k| c.get(*k).and_then(Value::as_array))
                .flatten()
                .filter_map(Value::as_str)
                .collect();
            words
                .iter()
                .any(|w| w.rsplit('/').next() == Some("etcd-member-agent"))
                && words.iter().any(|w| *w == "preflight" || *w == "serve")
        })
        .and_then(|c| c.get("name").and_then(Value::as_str).map(str::to_owned))
}

/// Guards the Pod (or Pod template) `template`: an object with `metadata` and
/// `spec`. The patch's paths are relative to it.
pub fn guard(template: &Value, opts: &Options) -> Outcome {
    let notes = annotations(template);
    let labels = template.pointer("/metadata/labels");
    if labels
        .and_then(|l| l.get("app.kubernetes.io/name"))
        .and_then(Value::as_str)
        == Some(WEBHOOK_APP)
    {
        return Outcome::Skipped(Skip::WebhookPod);
    }
    if notes.contains_key("kubernetes.io/config.mirror") {
        return Outcome::Skipped(Skip::MirrorPod);
    }
    if annotation(&notes, ANNOTATION_INJECT) == Some(INJECT_DISABLED) {
        return Outcome::Skipped(Skip::OptedOut);
    }
    if let Some(v) = annotation(&notes, ANNOTATION_INJECTED) {
        return Outcome::Skipped(Skip::AlreadyInjected(v.to_owned()));
    }
    let Some(spec) = template.get("spec").filter(|s| s.is_object()) else {
        return Outcome::Skipped(Skip::NoEtcd);
    };
    let etcd = match etcd::find(spec, annotation(&notes, ANNOTATION_ETCD_CONTAINER)) {
        Ok(Some(c)) => c,
        Ok(None) => return Outcome::Skipped(Skip::NoEtcd),
        Err(e) => return Outcome::Unresolvable(e),
    };
    if let Some(c) = runs_agent(spec) {
        return Outcome::Skipped(Skip::AlreadyGuarded(c));
    }
    match build(template, spec, &etcd, &notes, opts) {
        Ok(i) => Outcome::Injected(Box::new(i)),
        Err(e) => Outcome::Unresolvable(e),
    }
}

/// The user etcd runs as, and its group when the Pod says: the agent must run
/// as the same user to read the data dir (etcd makes it 0700).
fn etcd_user(spec: &Value, etcd: &EtcdContainer<'_>) -> Result<(i64, Option<i64>), Unresolvable> {
    let field = |name: &str| {
        etcd.value
            .pointer(&format!("/securityContext/{name}"))
            .and_then(Value::as_i64)
            .or_else(|| {
                spec.pointer(&format!("/securityContext/{name}"))
                    .and_then(Value::as_i64)
            })
    };
    let group = field("runAsGroup");
    if let Some(uid) = field("runAsUser") {
        return Ok((uid, group));
    }
    let image = etcd
        .value
        .get("image")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let repo = image.split('@').next().unwrap_or_default();
    let repo = match repo.rsplit_once(':') {
        Some((r, tag)) if !tag.contains('/') => r,
        _ => repo,
    };
    // The users etcd's published images run as when the Pod does not say.
    let known = [
        ("quay.io/coreos/etcd", 0),
        ("gcr.io/etcd-development/etcd", 0),
        ("registry.k8s.io/etcd", 0),
        ("k8s.gcr.io/etcd", 0),
        ("bitnami/etcd", 1001),
        ("bitnamilegacy/etcd", 1001),
    ];
    known
        .iter()
        .find(|(r, _)| repo == *r || repo.ends_with(&format!("/{r}")))
        .map(|(_, uid)| (*uid, group))
        .ok_or_else(|| {
            Unresolvable::new(
                Some(&etcd.name),
                "securityContext.runAsUser",
                format!("etcd runs as the default user of image {image}, which is not known here; the agent must run as etcd's user to read its data dir (mode 0700)"),
                "set runAsUser on the Pod or the etcd container",
            )
        })
}

/// The volume of etcd's mounts that holds `path` (the longest mount path that
/// is a prefix of its literal beginning): the mount, re-made read-only.
fn mount_for(etcd: &EtcdContainer<'_>, path: &expand::Expr) -> Option<Value> {
    let literal = path.literal_prefix();
    let full = path.as_literal().is_some();
    etcd.value
        .get("volumeMounts")
        .and_then(Value::as_array)?
        .iter()
        .filter_map(|m| {
            let mp = m.get("mountPath")?.as_str()?.trim_end_matches('/');
            let within = literal == mp && full
                || literal
                    .strip_prefix(mp)
                    .is_some_and(|rest| rest.starts_with('/'))
                || mp.is_empty();
            within.then_some((mp.len(), m))
        })
        .max_by_key(|(len, _)| *len)
        .map(|(_, m)| {
            let mut mount = json!({
                "name": m.get("name").cloned().unwrap_or(Value::Null),
                "mountPath": m.get("mountPath").cloned().unwrap_or(Value::Null),
                "readOnly": true,
            });
            for key in ["subPath", "subPathExpr"] {
                if let Some(v) = m.get(key) {
                    mount[key] = v.clone();
                }
            }
            mount
        })
}

fn container_names(spec: &Value) -> Vec<String> {
    ["initContainers", "containers", "ephemeralContainers"]
        .iter()
        .filter_map(|k| spec.get(*k).and_then(Value::as_array))
        .flatten()
        .filter_map(|c| c.get("name").and_then(Value::as_str).map(str::to_owned))
        .collect()
}

fn build(
    template: &Value,
    spec: &Value,
    etcd: &EtcdContainer<'_>,
    notes: &Map<String, Value>,
    opts: &Options,
) -> Result<Injection, Unresolvable> {
    let c = Some(etcd.name.as_str());
    let kube = match annotation(notes, ANNOTATION_KUBE_API) {
        None => opts.kube,
        Some("true") => true,
        Some("false") => false,
        Some(other) => {
            return Err(Unresolvable::new(
                None,
                ANNOTATION_KUBE_API,
                format!("{other:?} is not true or false"),
                "set it to true or false",
            ))
        }
    };
    let readiness = match annotation(notes, ANNOTATION_READINESS) {
        None => false,
        Some("agent") => true,
        Some(other) => {
            return Err(Unresolvable::new(
                None,
                ANNOTATION_READINESS,
                format!("{other:?} is not a readiness source this agent knows"),
                "set it to agent, or remove it to keep the etcd container's own probe",
            ))
        }
    };
    let host_network = spec.get("hostNetwork").and_then(Value::as_bool) == Some(true);
    let d = Derived::new(etcd, notes, kube, host_network)?;
    let (uid, gid) = etcd_user(spec, etcd)?;

    // Clashes with what the Pod already has.
    let names = container_names(spec);
    for ours in [SIDECAR, PREFLIGHT] {
        if names.iter().any(|n| n == ours) {
            return Err(Unresolvable::new(
                c,
                &format!("container {ours}"),
                "the Pod already has a container of that name",
                "rename it",
            ));
        }
    }
    let volumes = spec.get("volumes").and_then(Value::as_array);
    for ours in [RUN_VOLUME, TOKEN_VOLUME] {
        if volumes
            .into_iter()
            .flatten()
            .any(|v| v.get("name").and_then(Value::as_str) == Some(ours))
        {
            return Err(Unresolvable::new(
                c,
                &format!("volume {ours}"),
                "the Pod already has a volume of that name",
                "rename it",
            ));
        }
    }
    let used_ports: Vec<i64> = ["initContainers", "containers"]
        .iter()
        .filter_map(|k| spec.get(*k).and_then(Value::as_array))
        .flatten()
        .filter_map(|c| c.get("ports").and_then(Value::as_array))
        .flatten()
        .filter_map(|p| p.get("containerPort").and_then(Value::as_i64))
        .collect();
    for port in [GRPC_PORT, HTTP_PORT] {
        if used_ports.contains(&i64::from(port)) {
            return Err(Unresolvable::new(
                c,
                &format!("port {port}"),
                "another container of the Pod listens on the sidecar's port",
                "move it",
            ));
        }
    }

    // etcd's volumes, read-only, one mount per volume path.
    let mut mounts: Vec<Value> = Vec::new();
    for (what, path) in &d.paths {
        let m = mount_for(etcd, path).ok_or_else(|| {
            Unresolvable::new(
                c,
                what,
                format!("{path} is not on a volume of the etcd container, so no other container can read it"),
                "put it on a volume (the agent mounts etcd's volumes read-only)",
            )
        })?;
        if m["mountPath"] == RUN_DIR || m["mountPath"] == TOKEN_DIR {
            return Err(Unresolvable::new(
                c,
                what,
                format!(
                    "{path} is under {}, where the agent mounts its own volume",
                    m["mountPath"]
                ),
                "move etcd's volume",
            ));
        }
        if !mounts.iter().any(|x| x["mountPath"] == m["mountPath"]) {
            mounts.push(m);
        }
    }
    let mut sidecar_mounts = mounts.clone();
    sidecar_mounts.push(json!({"name": RUN_VOLUME, "mountPath": RUN_DIR, "readOnly": true}));
    let mut preflight_mounts = mounts;
    preflight_mounts.push(json!({"name": RUN_VOLUME, "mountPath": RUN_DIR}));
    if kube {
        for m in [&mut sidecar_mounts, &mut preflight_mounts] {
            m.push(json!({"name": TOKEN_VOLUME, "mountPath": TOKEN_DIR, "readOnly": true}));
        }
    }

    let mut security = json!({
        "runAsNonRoot": uid != 0,
        "runAsUser": uid,
        "readOnlyRootFilesystem": true,
        "allowPrivilegeEscalation": false,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    });
    if let Some(gid) = gid {
        security["runAsGroup"] = json!(gid);
    }
    let resources =
        json!({"requests": {"cpu": "10m", "memory": "32Mi"}, "limits": {"memory": "256Mi"}});
    let container = |name: &str, sub: &str, env: Vec<Value>, mounts: Vec<Value>| {
        let mut v = json!({
            "name": name,
            "image": opts.image,
            "command": [AGENT_BINARY],
            "args": [sub],
            "env": env,
            "volumeMounts": mounts,
            "terminationMessagePolicy": "FallbackToLogsOnError",
            "securityContext": security,
            "resources": resources,
        });
        if let Some(p) = &opts.image_pull_policy {
            v["imagePullPolicy"] = json!(p);
        }
        v
    };
    let with_extra = |mut env: Vec<Value>| {
        for (name, value) in &opts.extra_env {
            env.retain(|e| e["name"] != name.as_str());
            env.push(json!({"name": name, "value": value}));
        }
        env
    };
    let mut sidecar = container(SIDECAR, "serve", with_extra(d.env(true)), sidecar_mounts);
    sidecar["restartPolicy"] = json!("Always");
    let mut grpc = json!({"name": "agent-grpc", "containerPort": GRPC_PORT});
    let mut http = json!({"name": "agent-http", "containerPort": HTTP_PORT});
    let mut liveness = json!({"path": "/livez", "port": HTTP_PORT});
    if let Some(host) = &d.bind {
        // An IP literal (`Derived::bind`), bare of IPv6's brackets.
        let bare = host.trim_start_matches('[').trim_end_matches(']');
        grpc["hostIP"] = json!(bare);
        http["hostIP"] = json!(bare);
        liveness["host"] = json!(bare);
    }
    sidecar["ports"] = json!([grpc, http]);
    sidecar["livenessProbe"] = json!({
        "httpGet": liveness,
        "initialDelaySeconds": 5, "periodSeconds": 10, "timeoutSeconds": 2, "failureThreshold": 3,
    });
    let preflight = container(
        PREFLIGHT,
        "preflight",
        with_extra(d.env(false)),
        preflight_mounts,
    );

    let mut patch = Vec::new();
    match spec.get("initContainers").and_then(Value::as_array) {
        Some(list) if !list.is_empty() => {
            patch.push(Op::add("/spec/initContainers/0", sidecar));
            patch.push(Op::add("/spec/initContainers/-", preflight));
        }
        _ => patch.push(Op::add("/spec/initContainers", json!([sidecar, preflight]))),
    }
    let mut new_volumes = vec![json!({
        "name": RUN_VOLUME,
        "emptyDir": {"medium": "Memory", "sizeLimit": "1Mi"},
    })];
    if kube {
        new_volumes.push(json!({
            "name": TOKEN_VOLUME,
            "projected": {"defaultMode": 420, "sources": [
                {"serviceAccountToken": {"path": "token", "expirationSeconds": 3607}},
                {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}},
            ]},
        }));
    }
    match volumes {
        Some(list) if !list.is_empty() => {
            for v in new_volumes {
                patch.push(Op::add("/spec/volumes/-", v));
            }
        }
        _ => patch.push(Op::add("/spec/volumes", Value::Array(new_volumes))),
    }
    if readiness {
        patch.push(Op::add(
            &format!("/spec/containers/{}/readinessProbe", etcd.index),
            json!({
                "httpGet": {"path": "/readyz", "port": HTTP_PORT},
                "initialDelaySeconds": 5, "periodSeconds": 5, "timeoutSeconds": 2, "failureThreshold": 3,
            }),
        ));
    }
    let mut new_notes = vec![(ANNOTATION_INJECTED, opts.version.clone())];
    if !notes.contains_key("kubectl.kubernetes.io/default-container") {
        new_notes.push(("kubectl.kubernetes.io/default-container", etcd.name.clone()));
    }
    match template.pointer("/metadata/annotations") {
        Some(Value::Object(_)) => {
            for (k, v) in new_notes {
                patch.push(Op::add(
                    &format!("/metadata/annotations/{}", escape(k)),
                    json!(v),
                ));
            }
        }
        _ => {
            let map: Map<String, Value> = new_notes
                .into_iter()
                .map(|(k, v)| (k.to_owned(), json!(v)))
                .collect();
            if template.get("metadata").is_some_and(Value::is_object) {
                patch.push(Op::add("/metadata/annotations", Value::Object(map)));
            } else {
                patch.push(Op::add("/metadata", json!({"annotations": map})));
            }
        }
    }

    let mut notes_out = Vec::new();
    if d.version.is_none() {
        notes_out.push("no ETCD_VERSION: the etcd image has no version tag (or a digest pins it); preflight's upgrade check reads the running Pod's image when it can".to_owned());
    }
    if !d.peers_exclude_self && d.peers > 0 {
        notes_out.push("the member's name differs per replica, so ETCD_PEER_ENDPOINTS lists every member of --initial-cluster, this one too (it is not running while preflight asks)".to_owned());
    }
    if d.peers == 0 {
        notes_out.push(
            "--initial-cluster names no other member: preflight has no peer to ask".to_owned(),
        );
    }
    if uid == 0 {
        notes_out.push("etcd runs as root, so the agent's containers do too (with no capabilities): they must read etcd's data dir".to_owned());
    }
    Ok(Injection {
        patch,
        container: etcd.name.clone(),
        member: d.name.to_string(),
        data_dir: d.data_dir.to_string(),
        peers: d.peers,
        tls: d.tls.ca.is_some(),
        notes: notes_out,
    })
}
