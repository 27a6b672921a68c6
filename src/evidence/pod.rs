//! The Pod linter behind `pod-check`: hazards in this member's own Pod that are
//! invisible while its containers run and fatal when one is recreated (docs/commands.md
//! § pod-check; the operator's issue #373).
//!
//! In-place adoption deleted the legacy `etcd-cluster-state` ConfigMap while the
//! member Pods kept an `envFrom` reference to it. Nothing showed until a node
//! reboot recreated the containers; then each sat in `CreateContainerConfigError`
//! with `restartCount == 0` for good, below the operator's restart-count
//! self-heal. This module finds both halves of that story:
//!
//! * [`references`] lists every *non-optional* reference of the Pod to a
//!   ConfigMap or Secret (`envFrom`, `env[].valueFrom`, `volumes`, projected
//!   sources; in containers, init containers and ephemeral containers), and
//!   [`check_pod`] asks the API server whether each referenced object exists;
//!   a missing one is a `missing-reference` hazard;
//! * [`stuck_containers`] reports containers already stuck waiting for a reason
//!   that means "cannot be created from this spec" (see
//!   [`CONFIG_WAITING_REASONS`]).
//!
//! The pure functions take a `Pod` and do no I/O, so they are tested on their own;
//! [`check_pod`] adds the reads, all bounded by one deadline.
//!
//! # Metadata only
//!
//! Existence is checked with metadata-only GETs: the normal object path with
//! `Accept: application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1`. The
//! API server answers with a `PartialObjectMetadata` (name, UID, labels,
//! annotations, …) and never the `data` of a Secret or ConfigMap, and the agent
//! keeps nothing of the answer but "it exists". Two honest limits follow:
//!
//! * a *key* named by `configMapKeyRef`/`secretKeyRef` (or a volume's `items`)
//!   cannot be checked without reading the data, so it is not: a deleted key is
//!   not reported until the container is recreated and shows up as stuck;
//! * metadata includes annotations, and a Secret created with `kubectl apply`
//!   carries its data in the `kubectl.kubernetes.io/last-applied-configuration`
//!   annotation. The agent discards the answer, but the bytes did cross the wire.
//!
//! # RBAC
//!
//! The service account needs, in the Pod's namespace (core API group `""`):
//!
//! * `get` on `pods` — to read its own Pod (a Role cannot name the Pod, whose
//!   name is generated, unless the operator writes one Role per member);
//! * `get` on `configmaps` and `get` on `secrets` — for the existence checks.
//!
//! A metadata-only GET is still a `get` in RBAC terms: RBAC cannot grant
//! "metadata only", so this Role also lets the token read the *data* of every
//! Secret it covers, even though the agent never asks for it. Narrow it with
//! `resourceNames` listing the Secrets the member Pod references, which the
//! operator knows when it builds the Pod. A 403 is reported as such (an error
//! naming the verb and resource), never as "clean" and never as "missing".
//!
//! # Errors
//!
//! An answer that is not "exists" or "not found" is an error ([`PodCheckError`]),
//! never a clean report: the Pod not found, 403, any other error status, no
//! answer before the deadline, an unreachable server, or a body that does not
//! parse. A 404 counts as "not found" only when its `Status` names the object; a
//! bare 404 (a proxy's HTML page, a path not served) is `NotServed`. Transient
//! answers (429, 503, 504, connection failures) are retried with backoff until
//! the deadline and the last one reported, as in [`super::kube`].

use std::collections::BTreeSet;
use std::fmt;

use ::kube::api::Api;
use ::kube::core::NamespaceResourceScope;
use ::kube::{Client, Resource};
use k8s_openapi::api::core::v1::{
    ConfigMap, ContainerStatus, EnvFromSource, EnvVar, Pod, PodSpec, PodStatus, Secret, Volume,
};
use serde::de::DeserializeOwned;
use serde::Serialize;
use tokio::time::Instant;

use super::client::{call, ApiError, ApiKind, ConfigError};

/// Waiting reasons that always mean the kubelet cannot build the container
/// from its spec — a missing ConfigMap, Secret or key, a `runAsNonRoot`
/// violation — so it will wait forever without ever being created, and its
/// `restartCount` will never grow.
pub const CONFIG_WAITING_REASONS: &[&str] = &["CreateContainerConfigError"];

/// Waiting reasons that count only when the kubelet's message names a
/// ConfigMap or Secret (case-insensitive `configmap`/`secret`): on their own they
/// also cover transient runtime trouble ("failed to reserve container name")
/// that clears by itself.
pub const CONFIG_WAITING_REASONS_IF_MENTIONED: &[&str] =
    &["CreateContainerError", "RunContainerError"];

/// The kinds of object this module reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub enum ObjectKind {
    /// The Pod being checked.
    Pod,
    /// A referenced ConfigMap.
    ConfigMap,
    /// A referenced Secret.
    Secret,
}

impl ObjectKind {
    /// The kind's name as the API spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            ObjectKind::Pod => "Pod",
            ObjectKind::ConfigMap => "ConfigMap",
            ObjectKind::Secret => "Secret",
        }
    }

    /// The plural resource name, as RBAC rules name it.
    pub fn plural(self) -> &'static str {
        match self {
            ObjectKind::Pod => "pods",
            ObjectKind::ConfigMap => "configmaps",
            ObjectKind::Secret => "secrets",
        }
    }
}

impl fmt::Display for ObjectKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Which list of the Pod spec a container comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ContainerType {
    /// `spec.containers`.
    Container,
    /// `spec.initContainers`.
    Init,
    /// `spec.ephemeralContainers`.
    Ephemeral,
}

impl ContainerType {
    /// The field of the Pod spec holding this type.
    pub fn field(self) -> &'static str {
        match self {
            ContainerType::Container => "containers",
            ContainerType::Init => "initContainers",
            ContainerType::Ephemeral => "ephemeralContainers",
        }
    }

    /// How a human names a container of this type.
    pub fn label(self) -> &'static str {
        match self {
            ContainerType::Container => "container",
            ContainerType::Init => "init container",
            ContainerType::Ephemeral => "ephemeral container",
        }
    }
}

/// Where a reference sits: in a container's environment, or in a volume.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum Owner {
    /// `env` or `envFrom` of a container.
    Container {
        /// The container's name.
        container: String,
        /// Which list it is in.
        container_type: ContainerType,
    },
    /// A Pod volume.
    Volume {
        /// The volume's name.
        volume: String,
        /// Names of the containers (of any type) that mount it.
        mounted_by: Vec<String>,
    },
}

/// One non-optional reference from the Pod to a ConfigMap or Secret.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Reference {
    /// The container or volume holding the reference.
    #[serde(flatten)]
    pub owner: Owner,
    /// The field, relative to the container or volume:
    /// `envFrom[0].configMapRef`, `projected.sources[1].secret`.
    pub reference: String,
    /// The full field path in the Pod spec:
    /// `containers[etcd].envFrom[0].configMapRef`.
    pub path: String,
    /// `ConfigMap` or `Secret`.
    pub object_kind: ObjectKind,
    /// The referenced object's name (in the Pod's namespace).
    pub object_name: String,
    /// The key, for `configMapKeyRef`/`secretKeyRef` (not checked: metadata only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
}

impl Reference {
    /// `container etcd` / `init container restore` / `volume peer-tls`.
    fn owner_label(&self) -> String {
        match &self.owner {
            Owner::Container {
                container,
                container_type,
            } => format!("{} {container}", container_type.label()),
            Owner::Volume { volume, .. } => format!("volume {volume}"),
        }
    }
}

/// Something in the Pod that will (or already did) keep a container from being
/// created. Serialized with a `kind` key: `missing-reference` or
/// `stuck-container`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Hazard {
    /// A non-optional reference to a ConfigMap or Secret that does not exist:
    /// harmless while the container runs, fatal when it is recreated.
    MissingReference {
        /// The reference.
        #[serde(flatten)]
        reference: Reference,
        /// One line for humans, naming the container, the field and the object.
        message: String,
    },
    /// A container waiting for a configuration reason: it cannot be created,
    /// so its restart count will never grow.
    StuckContainer {
        /// The container's name.
        container: String,
        /// Which list it is in.
        container_type: ContainerType,
        /// The waiting reason (`CreateContainerConfigError`).
        reason: String,
        /// The kubelet's message (`configmap "etcd-cluster-state" not found`).
        detail: String,
        /// `restartCount` as reported.
        restart_count: i32,
        /// One line for humans.
        message: String,
    },
}

/// Every [`Hazard::kind`]: the `reason` of the Events pod-check writes for
/// hazards, told apart from the Events of refusals (whose reason is a verdict).
pub const HAZARD_KINDS: [&str; 2] = ["missing-reference", "stuck-container"];

impl Hazard {
    /// `missing-reference` or `stuck-container`, as in the JSON `kind` key.
    pub fn kind(&self) -> &'static str {
        match self {
            Hazard::MissingReference { .. } => "missing-reference",
            Hazard::StuckContainer { .. } => "stuck-container",
        }
    }

    /// The one-line human description.
    pub fn message(&self) -> &str {
        match self {
            Hazard::MissingReference { message, .. } | Hazard::StuckContainer { message, .. } => {
                message
            }
        }
    }

    /// The container concerned, when the hazard is about one container.
    pub fn container(&self) -> Option<&str> {
        match self {
            Hazard::MissingReference {
                reference:
                    Reference {
                        owner: Owner::Container { container, .. },
                        ..
                    },
                ..
            }
            | Hazard::StuckContainer { container, .. } => Some(container),
            Hazard::MissingReference { .. } => None,
        }
    }
}

/// What one check of a Pod found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PodReport {
    /// The Pod's name.
    pub pod: String,
    /// Its namespace.
    pub namespace: String,
    /// `status.phase` as read (`Running`, `Pending`, …).
    pub phase: Option<String>,
    /// Every hazard found; empty means clean.
    pub hazards: Vec<Hazard>,
    /// How many non-optional references were checked.
    pub checked_references: usize,
    /// How many distinct objects they name (each was asked for once).
    pub checked_objects: usize,
    /// The Pod's `metadata.uid`, for Events about it.
    #[serde(skip)]
    pub uid: Option<String>,
}

impl PodReport {
    /// No hazard was found.
    pub fn is_clean(&self) -> bool {
        self.hazards.is_empty()
    }
}

/// Why a Pod could not be checked. None of these means "clean".
#[derive(Debug, thiserror::Error)]
pub enum PodCheckError {
    /// No usable client configuration: the kubeconfig is missing or invalid, or
    /// there is neither an in-cluster service account nor a kubeconfig.
    #[error(transparent)]
    ClientConfig(#[from] ConfigError),
    /// Building the client (which may run a kubeconfig's exec credential
    /// plugin) did not finish before the deadline.
    #[error("configuring the Kubernetes client did not finish before the deadline")]
    ClientTimeout,
    /// A read failed (not found, forbidden, timeout, unreachable, …).
    #[error(transparent)]
    Api(#[from] ApiError<ObjectKind>),
}

impl PodCheckError {
    /// A short stable name for JSON documents and metrics: `client-config`,
    /// `client-timeout`, or [`ApiError::name`] (`not-found`, `not-served`,
    /// `forbidden`, `api`, `timeout`, `auth`, `unreachable`, `malformed`).
    pub fn kind(&self) -> &'static str {
        match self {
            PodCheckError::ClientConfig(_) => "client-config",
            PodCheckError::ClientTimeout => "client-timeout",
            PodCheckError::Api(e) => e.name(),
        }
    }

    /// Whether fixing it is a matter of the agent's own configuration (RBAC,
    /// credentials) rather than the API server's health or the Pod's existence.
    pub fn is_configuration(&self) -> bool {
        match self {
            PodCheckError::ClientConfig(_) | PodCheckError::ClientTimeout => true,
            PodCheckError::Api(e) => e.is_configuration(),
        }
    }
}

impl ApiKind for ObjectKind {
    fn rbac_resource(self) -> String {
        self.plural().to_owned()
    }

    fn not_served(self) -> String {
        format!("{} (HTTP 404 without an object)", self.plural())
    }

    fn rbac_needed(self) -> &'static str {
        "pod-check needs get on pods, configmaps and secrets"
    }
}

// ---------------------------------------------------------------------------
// Pure: references and stuck containers.

/// Every non-optional reference of `pod` to a ConfigMap or Secret, in spec
/// order: containers, init containers, ephemeral containers (each `envFrom`
/// then `env`), then volumes (`configMap`, `secret`, `projected.sources`).
/// `optional: true` references are left out — a missing optional object is
/// not a hazard — and so are references with an empty name (the API server
/// rejects such Pods; there is nothing to look up).
pub fn references(pod: &Pod) -> Vec<Reference> {
    let Some(spec) = &pod.spec else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for c in &spec.containers {
        container_refs(
            ContainerType::Container,
            &c.name,
            c.env_from.as_deref(),
            c.env.as_deref(),
            &mut out,
        );
    }
    for c in spec.init_containers.iter().flatten() {
        container_refs(
            ContainerType::Init,
            &c.name,
            c.env_from.as_deref(),
            c.env.as_deref(),
            &mut out,
        );
    }
    for c in spec.ephemeral_containers.iter().flatten() {
        container_refs(
            ContainerType::Ephemeral,
            &c.name,
            c.env_from.as_deref(),
            c.env.as_deref(),
            &mut out,
        );
    }
    for v in spec.volumes.iter().flatten() {
        volume_refs(v, mounted_by(spec, &v.name), &mut out);
    }
    out
}

fn required(optional: Option<bool>) -> bool {
    optional != Some(true)
}

fn container_refs(
    container_type: ContainerType,
    name: &str,
    env_from: Option<&[EnvFromSource]>,
    env: Option<&[EnvVar]>,
    out: &mut Vec<Reference>,
) {
    let mut push = |reference: String, kind: ObjectKind, object: &str, key: Option<&str>| {
        if object.is_empty() {
            return;
        }
        out.push(Reference {
            path: format!("{}[{name}].{reference}", container_type.field()),
            owner: Owner::Container {
                container: name.to_owned(),
                container_type,
            },
            reference,
            object_kind: kind,
            object_name: object.to_owned(),
            key: key.map(str::to_owned),
        });
    };
    for (i, source) in env_from.unwrap_or_default().iter().enumerate() {
        if let Some(r) = &source.config_map_ref {
            if required(r.optional) {
                push(
                    format!("envFrom[{i}].configMapRef"),
                    ObjectKind::ConfigMap,
                    &r.name,
                    None,
                );
            }
        }
        if let Some(r) = &source.secret_ref {
            if required(r.optional) {
                push(
                    format!("envFrom[{i}].secretRef"),
                    ObjectKind::Secret,
                    &r.name,
                    None,
                );
            }
        }
    }
    for (i, var) in env.unwrap_or_default().iter().enumerate() {
        let Some(from) = &var.value_from else {
            continue;
        };
        if let Some(r) = &from.config_map_key_ref {
            if required(r.optional) {
                push(
                    format!("env[{i}].valueFrom.configMapKeyRef"),
                    ObjectKind::ConfigMap,
                    &r.name,
                    Some(&r.key),
                );
            }
        }
        if let Some(r) = &from.secret_key_ref {
            if required(r.optional) {
                push(
                    format!("env[{i}].valueFrom.secretKeyRef"),
                    ObjectKind::Secret,
                    &r.name,
                    Some(&r.key),
                );
            }
        }
    }
}

fn volume_refs(volume: &Volume, mounted_by: Vec<String>, out: &mut Vec<Reference>) {
    let name = &volume.name;
    let mut push = |reference: String, kind: ObjectKind, object: &str| {
        if object.is_empty() {
            return;
        }
        out.push(Reference {
            path: format!("volumes[{name}].{reference}"),
            owner: Owner::Volume {
                volume: name.clone(),
                mounted_by: mounted_by.clone(),
            },
            reference,
            object_kind: kind,
            object_name: object.to_owned(),
            key: None,
        });
    };
    if let Some(cm) = &volume.config_map {
        if required(cm.optional) {
            push("configMap".to_owned(), ObjectKind::ConfigMap, &cm.name);
        }
    }
    if let Some(s) = &volume.secret {
        if required(s.optional) {
            let object = s.secret_name.as_deref().unwrap_or_default();
            push("secret".to_owned(), ObjectKind::Secret, object);
        }
    }
    if let Some(projected) = &volume.projected {
        for (i, source) in projected.sources.iter().flatten().enumerate() {
            if let Some(cm) = &source.config_map {
                if required(cm.optional) {
                    push(
                        format!("projected.sources[{i}].configMap"),
                        ObjectKind::ConfigMap,
                        &cm.name,
                    );
                }
            }
            if let Some(s) = &source.secret {
                if required(s.optional) {
                    push(
                        format!("projected.sources[{i}].secret"),
                        ObjectKind::Secret,
                        &s.name,
                    );
                }
            }
        }
    }
}

/// Names of the containers (any type) with a `volumeMount` of `volume`.
fn mounted_by(spec: &PodSpec, volume: &str) -> Vec<String> {
    let mounts = |mounts: Option<&[k8s_openapi::api::core::v1::VolumeMount]>| {
        mounts.unwrap_or_default().iter().any(|m| m.name == volume)
    };
    let mut names = Vec::new();
    for c in spec
        .containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
    {
        if mounts(c.volume_mounts.as_deref()) {
            names.push(c.name.clone());
        }
    }
    for c in spec.ephemeral_containers.iter().flatten() {
        if mounts(c.volume_mounts.as_deref()) {
            names.push(c.name.clone());
        }
    }
    names
}

/// The human line for a reference to a missing object:
/// `container etcd: envFrom[0].configMapRef → ConfigMap "etcd-cluster-state" not
/// found (the container cannot be recreated)`.
pub fn missing_message(r: &Reference) -> String {
    let consequence = match &r.owner {
        Owner::Container { .. } => "the container cannot be recreated".to_owned(),
        Owner::Volume { mounted_by, .. } if mounted_by.is_empty() => {
            "the volume cannot be set up again, e.g. after a node reboot".to_owned()
        }
        Owner::Volume { mounted_by, .. } => format!(
            "mounted by {}: the volume cannot be set up again, e.g. after a node reboot",
            mounted_by.join(", ")
        ),
    };
    format!(
        "{}: {} → {} {:?} not found ({consequence})",
        r.owner_label(),
        r.reference,
        r.object_kind,
        r.object_name
    )
}

/// One `missing-reference` hazard for each reference whose object is in
/// `missing` (as `(kind, name)`), in the order of `refs`.
pub fn missing_references(
    refs: &[Reference],
    missing: &BTreeSet<(ObjectKind, String)>,
) -> Vec<Hazard> {
    refs.iter()
        .filter(|r| missing.contains(&(r.object_kind, r.object_name.clone())))
        .map(|r| Hazard::MissingReference {
            message: missing_message(r),
            reference: r.clone(),
        })
        .collect()
}

/// Whether a waiting `reason` (with the kubelet's `message`) means the
/// container cannot be created from its configuration: any of
/// [`CONFIG_WAITING_REASONS`], or one of
/// [`CONFIG_WAITING_REASONS_IF_MENTIONED`] whose message names a ConfigMap or
/// Secret. Image pull errors and `CrashLoopBackOff` are not: they are retried
/// and visible to restart-based self-heal.
pub fn is_config_waiting_reason(reason: &str, message: &str) -> bool {
    if CONFIG_WAITING_REASONS.contains(&reason) {
        return true;
    }
    let message = message.to_ascii_lowercase();
    CONFIG_WAITING_REASONS_IF_MENTIONED.contains(&reason)
        && (message.contains("configmap") || message.contains("secret"))
}

/// Containers and init containers waiting with a configuration reason (see
/// [`is_config_waiting_reason`]).
///
/// The contract (docs/commands.md § pod-check) adds "and `restartCount == 0`". This reports such a container
/// whatever its restart count: a container that cannot be created never
/// restarts, so a count of 1–4 from earlier crashes stays frozen below the
/// operator's threshold of 5 just as 0 does, and a container in this state is
/// broken either way. The count is part of the hazard. Ephemeral (debug)
/// containers are not the member's and are not looked at.
pub fn stuck_containers(pod: &Pod) -> Vec<Hazard> {
    pod.status.as_ref().map(stuck_in_status).unwrap_or_default()
}

/// [`stuck_containers`] from a Pod's status alone: what a reader that keeps
/// only the status of many Pods (`fleet`) checks with the same rule.
pub fn stuck_in_status(status: &PodStatus) -> Vec<Hazard> {
    let lists = [
        (ContainerType::Container, &status.container_statuses),
        (ContainerType::Init, &status.init_container_statuses),
    ];
    let mut out = Vec::new();
    for (container_type, statuses) in lists {
        for cs in statuses.iter().flatten() {
            if let Some(h) = stuck(container_type, cs) {
                out.push(h);
            }
        }
    }
    out
}

fn stuck(container_type: ContainerType, cs: &ContainerStatus) -> Option<Hazard> {
    let waiting = cs.state.as_ref()?.waiting.as_ref()?;
    let reason = waiting.reason.as_deref().unwrap_or_default();
    let detail = waiting.message.as_deref().unwrap_or_default();
    if !is_config_waiting_reason(reason, detail) {
        return None;
    }
    let why = if detail.is_empty() {
        reason.to_owned()
    } else {
        format!("{reason}: {detail}")
    };
    let consequence = if cs.restart_count == 0 {
        "it was never created, so restart-count self-heal cannot see it"
    } else {
        "it cannot be created, so its restart count will not grow"
    };
    Some(Hazard::StuckContainer {
        message: format!(
            "{} {}: stuck waiting ({why}), restartCount {} — {consequence}",
            container_type.label(),
            cs.name,
            cs.restart_count
        ),
        container: cs.name.clone(),
        container_type,
        reason: reason.to_owned(),
        detail: detail.to_owned(),
        restart_count: cs.restart_count,
    })
}

// ---------------------------------------------------------------------------
// I/O: the reads.

/// Reads Pod `namespace/pod_name`, checks that every object its non-optional
/// references name exists (metadata-only GETs, one per distinct object), and
/// reports missing references and stuck containers. Returns by `deadline`.
///
/// Stops at the first read that fails: a partial answer is not a clean one.
#[tracing::instrument(skip(client, deadline))]
pub async fn check_pod(
    client: &Client,
    namespace: &str,
    pod_name: &str,
    deadline: Instant,
) -> Result<PodReport, PodCheckError> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let pod = call(ObjectKind::Pod, namespace, pod_name, deadline, || {
        pods.get(pod_name)
    })
    .await?;

    let refs = references(&pod);
    let objects: BTreeSet<(ObjectKind, String)> = refs
        .iter()
        .map(|r| (r.object_kind, r.object_name.clone()))
        .collect();
    let mut missing = BTreeSet::new();
    for (kind, name) in &objects {
        let exists = match kind {
            ObjectKind::ConfigMap => {
                exists::<ConfigMap>(client, *kind, namespace, name, deadline).await?
            }
            ObjectKind::Secret => {
                exists::<Secret>(client, *kind, namespace, name, deadline).await?
            }
            // references() never names a Pod.
            ObjectKind::Pod => true,
        };
        tracing::debug!(%kind, name, exists, "checked");
        if !exists {
            missing.insert((*kind, name.clone()));
        }
    }

    let mut hazards = missing_references(&refs, &missing);
    hazards.extend(stuck_containers(&pod));
    Ok(PodReport {
        pod: pod_name.to_owned(),
        namespace: namespace.to_owned(),
        phase: pod.status.as_ref().and_then(|s| s.phase.clone()),
        hazards,
        checked_references: refs.len(),
        checked_objects: objects.len(),
        uid: pod.metadata.uid.clone(),
    })
}

/// The image of the container named `container` in Pod `namespace/pod_name`
/// (`spec.containers` only): what the kubelet starts there next. `Ok(None)`
/// when the Pod has no such container. Returns by `deadline`.
#[tracing::instrument(skip(client, deadline))]
pub async fn container_image(
    client: &Client,
    namespace: &str,
    pod_name: &str,
    container: &str,
    deadline: Instant,
) -> Result<Option<String>, ApiError<ObjectKind>> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let pod = call(ObjectKind::Pod, namespace, pod_name, deadline, || {
        pods.get(pod_name)
    })
    .await?;
    Ok(pod
        .spec
        .as_ref()
        .and_then(|spec| spec.containers.iter().find(|c| c.name == container))
        .and_then(|c| c.image.clone()))
}

/// The tag of an image reference (`registry:5000/etcd:v3.6.11` → `v3.6.11`),
/// `None` without a tag, and for any reference with a digest: the runtime
/// pulls the digest, whatever the tag beside it says.
pub fn image_tag(image: &str) -> Option<&str> {
    if image.contains('@') {
        return None;
    }
    let last = image.rsplit('/').next().unwrap_or(image);
    let (_, tag) = last.split_once(':')?;
    (!tag.is_empty()).then_some(tag)
}

/// A metadata-only GET: `Ok(false)` only for a 404 that names the object.
async fn exists<K>(
    client: &Client,
    kind: ObjectKind,
    namespace: &str,
    name: &str,
    deadline: Instant,
) -> Result<bool, PodCheckError>
where
    K: Resource<DynamicType = (), Scope = NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + fmt::Debug,
{
    let api: Api<K> = Api::namespaced(client.clone(), namespace);
    match call(kind, namespace, name, deadline, || api.get_metadata(name)).await {
        Ok(_) => Ok(true),
        Err(ApiError::NotFound { .. }) => Ok(false),
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    #[test]
    fn hazard_kinds_name_every_variant() {
        let stuck = Hazard::StuckContainer {
            container: "etcd".into(),
            container_type: ContainerType::Container,
            reason: "CreateContainerConfigError".into(),
            detail: String::new(),
            restart_count: 0,
            message: String::new(),
        };
        let missing = Hazard::MissingReference {
            reference: Reference {
                owner: Owner::Volume {
                    volume: "v".into(),
                    mounted_by: Vec::new(),
                },
                reference: "configMap".into(),
                path: "volumes[v].configMap".into(),
                object_kind: ObjectKind::ConfigMap,
                object_name: "x".into(),
                key: None,
            },
            message: String::new(),
        };
        assert_eq!([missing.kind(), stuck.kind()], HAZARD_KINDS);
    }

    #[test]
    fn image_tags_are_read_past_registries_and_ports_and_never_beside_a_digest() {
        for (image, tag) in [
            ("quay.io/coreos/etcd:v3.6.11", Some("v3.6.11")),
            ("registry.k8s.io/etcd:3.5.16-0", Some("3.5.16-0")),
            ("localhost:5000/etcd:3.7.3@sha256:0123", None),
            ("localhost:5000/etcd", None),
            ("etcd@sha256:0123", None),
            ("etcd:", None),
            ("", None),
        ] {
            assert_eq!(image_tag(image), tag, "{image}");
        }
    }

    fn pod(spec: Value, status: Value) -> Pod {
        serde_json::from_value(json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "etcd-0", "namespace": "tenant-a"},
            "spec": spec,
            "status": status,
        }))
        .unwrap_or_else(|e| panic!("fixture: {e}"))
    }

    fn paths(refs: &[Reference]) -> Vec<(String, ObjectKind, String)> {
        refs.iter()
            .map(|r| (r.path.clone(), r.object_kind, r.object_name.clone()))
            .collect()
    }

    fn p(path: &str, kind: ObjectKind, name: &str) -> (String, ObjectKind, String) {
        (path.to_owned(), kind, name.to_owned())
    }

    #[test]
    fn every_kind_of_reference_is_found_in_spec_order() {
        let pod = pod(
            json!({
                "containers": [{
                    "name": "etcd",
                    "envFrom": [
                        {"configMapRef": {"name": "etcd-cluster-state"}},
                        {"secretRef": {"name": "etcd-auth"}, "prefix": "AUTH_"},
                    ],
                    "env": [
                        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                        {"name": "PLAIN", "value": "x"},
                        {"name": "TOKEN", "valueFrom": {"configMapKeyRef": {"name": "etcd-config", "key": "token"}}},
                        {"name": "PASSWORD", "valueFrom": {"secretKeyRef": {"name": "etcd-auth", "key": "password"}}},
                    ],
                    "volumeMounts": [{"name": "peer-tls", "mountPath": "/etc/etcd/tls/peer"}],
                }],
                "initContainers": [{
                    "name": "restore",
                    "env": [{"name": "AWS_SECRET_ACCESS_KEY", "valueFrom": {"secretKeyRef": {"name": "s3-creds", "key": "secret"}}}],
                    "volumeMounts": [{"name": "peer-tls", "mountPath": "/tls"}],
                }],
                "ephemeralContainers": [{
                    "name": "debugger",
                    "envFrom": [{"configMapRef": {"name": "debug-env"}}],
                }],
                "volumes": [
                    {"name": "data", "persistentVolumeClaim": {"claimName": "data-etcd-0"}},
                    {"name": "peer-tls", "secret": {"secretName": "etcd-peer-tls"}},
                    {"name": "config", "configMap": {"name": "etcd-config"}},
                    {"name": "kube-api-access-x7k2p", "projected": {"sources": [
                        {"serviceAccountToken": {"path": "token", "expirationSeconds": 3607}},
                        {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                        {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"fieldPath": "metadata.namespace"}}]}},
                        {"secret": {"name": "extra-ca"}},
                    ]}},
                ],
            }),
            json!({}),
        );
        let refs = references(&pod);
        use ObjectKind::{ConfigMap as C, Secret as S};
        assert_eq!(
            paths(&refs),
            vec![
                p(
                    "containers[etcd].envFrom[0].configMapRef",
                    C,
                    "etcd-cluster-state"
                ),
                p("containers[etcd].envFrom[1].secretRef", S, "etcd-auth"),
                p(
                    "containers[etcd].env[2].valueFrom.configMapKeyRef",
                    C,
                    "etcd-config"
                ),
                p(
                    "containers[etcd].env[3].valueFrom.secretKeyRef",
                    S,
                    "etcd-auth"
                ),
                p(
                    "initContainers[restore].env[0].valueFrom.secretKeyRef",
                    S,
                    "s3-creds"
                ),
                p(
                    "ephemeralContainers[debugger].envFrom[0].configMapRef",
                    C,
                    "debug-env"
                ),
                p("volumes[peer-tls].secret", S, "etcd-peer-tls"),
                p("volumes[config].configMap", C, "etcd-config"),
                p(
                    "volumes[kube-api-access-x7k2p].projected.sources[1].configMap",
                    C,
                    "kube-root-ca.crt"
                ),
                p(
                    "volumes[kube-api-access-x7k2p].projected.sources[3].secret",
                    S,
                    "extra-ca"
                ),
            ]
        );
        assert_eq!(refs[2].key.as_deref(), Some("token"));
        assert_eq!(refs[0].key, None);
        assert_eq!(refs[0].reference, "envFrom[0].configMapRef");
        assert_eq!(
            refs[4].owner,
            Owner::Container {
                container: "restore".into(),
                container_type: ContainerType::Init
            }
        );
        assert_eq!(
            refs[6].owner,
            Owner::Volume {
                volume: "peer-tls".into(),
                mounted_by: vec!["etcd".into(), "restore".into()]
            }
        );
    }

    #[test]
    fn optional_references_are_left_out() {
        let pod = pod(
            json!({
                "containers": [{
                    "name": "etcd",
                    "envFrom": [
                        {"configMapRef": {"name": "a", "optional": true}},
                        {"secretRef": {"name": "b", "optional": false}},
                    ],
                    "env": [
                        {"name": "X", "valueFrom": {"configMapKeyRef": {"name": "c", "key": "k", "optional": true}}},
                        {"name": "Y", "valueFrom": {"secretKeyRef": {"name": "d", "key": "k", "optional": true}}},
                    ],
                }],
                "volumes": [
                    {"name": "v1", "secret": {"secretName": "e", "optional": true}},
                    {"name": "v2", "configMap": {"name": "f", "optional": true}},
                    {"name": "v3", "projected": {"sources": [
                        {"secret": {"name": "g", "optional": true}},
                        {"configMap": {"name": "h", "optional": true}},
                    ]}},
                ],
            }),
            json!({}),
        );
        assert_eq!(
            paths(&references(&pod)),
            vec![p(
                "containers[etcd].envFrom[1].secretRef",
                ObjectKind::Secret,
                "b"
            )]
        );
    }

    #[test]
    fn a_pod_without_spec_or_references_has_none() {
        let bare: Pod = serde_json::from_value(json!({"metadata": {"name": "x"}}))
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(references(&bare).is_empty());
        assert!(stuck_containers(&bare).is_empty());
        let plain = pod(
            json!({"containers": [{"name": "etcd", "env": [{"name": "A", "value": "b"}]}]}),
            json!({}),
        );
        assert!(references(&plain).is_empty());
    }

    fn waiting(name: &str, reason: &str, message: &str, restarts: i32) -> Value {
        json!({
            "name": name, "ready": false, "restartCount": restarts, "started": false,
            "image": "quay.io/coreos/etcd:v3.5.1", "imageID": "",
            "state": {"waiting": {"reason": reason, "message": message}},
        })
    }

    #[test]
    fn a_container_that_cannot_be_configured_is_stuck() {
        let pod = pod(
            json!({"containers": [{"name": "etcd"}]}),
            json!({
                "phase": "Running",
                "containerStatuses": [waiting("etcd", "CreateContainerConfigError", "configmap \"etcd-cluster-state\" not found", 0)],
                "initContainerStatuses": [waiting("preflight", "CreateContainerConfigError", "secret \"s3\" not found", 0)],
            }),
        );
        let hazards = stuck_containers(&pod);
        assert_eq!(hazards.len(), 2);
        match &hazards[0] {
            Hazard::StuckContainer {
                container,
                container_type,
                reason,
                detail,
                restart_count,
                message,
            } => {
                assert_eq!(container, "etcd");
                assert_eq!(*container_type, ContainerType::Container);
                assert_eq!(reason, "CreateContainerConfigError");
                assert_eq!(detail, "configmap \"etcd-cluster-state\" not found");
                assert_eq!(*restart_count, 0);
                assert!(message.starts_with("container etcd: stuck waiting (CreateContainerConfigError: configmap \"etcd-cluster-state\" not found), restartCount 0"), "{message}");
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(hazards[1].container(), Some("preflight"));
        assert!(hazards[1]
            .message()
            .starts_with("init container preflight:"));
    }

    #[test]
    fn only_configuration_reasons_count() {
        let statuses = json!([
            waiting("a", "CrashLoopBackOff", "back-off 5m0s restarting failed container", 7),
            waiting("b", "ImagePullBackOff", "Back-off pulling image", 0),
            waiting("c", "ContainerCreating", "", 0),
            waiting("d", "CreateContainerError", "failed to reserve container name", 0),
            waiting("e", "RunContainerError", "exec: \"etcd\": executable file not found", 0),
            waiting("f", "CreateContainerError", "failed to mount Secret \"tls\"", 0),
            waiting("g", "RunContainerError", "configmap references non-existent config key", 0),
            waiting("h", "CreateContainerConfigError", "", 3),
            {"name": "i", "ready": true, "restartCount": 0, "image": "", "imageID": "",
             "state": {"running": {"startedAt": "2025-11-02T09:14:37Z"}}},
        ]);
        let pod = pod(
            json!({"containers": []}),
            json!({"containerStatuses": statuses}),
        );
        let names: Vec<_> = stuck_containers(&pod)
            .iter()
            .filter_map(|h| h.container().map(str::to_owned))
            .collect();
        assert_eq!(names, vec!["f", "g", "h"]);
        let h = &stuck_containers(&pod)[2];
        assert!(
            h.message().contains("restartCount 3") && h.message().contains("will not grow"),
            "{}",
            h.message()
        );
    }

    #[test]
    fn missing_objects_become_hazards_naming_container_reference_and_object() {
        let pod = pod(
            json!({
                "containers": [{
                    "name": "etcd",
                    "envFrom": [{"configMapRef": {"name": "etcd-cluster-state"}}],
                    "volumeMounts": [{"name": "peer-tls", "mountPath": "/etc/etcd/tls/peer"}],
                }],
                "volumes": [{"name": "peer-tls", "projected": {"sources": [
                    {"secret": {"name": "etcd-server-tls"}},
                    {"secret": {"name": "etcd-peer-tls"}},
                ]}}],
            }),
            json!({}),
        );
        let refs = references(&pod);
        let missing: BTreeSet<_> = [
            (ObjectKind::ConfigMap, "etcd-cluster-state".to_owned()),
            (ObjectKind::Secret, "etcd-peer-tls".to_owned()),
        ]
        .into();
        let hazards = missing_references(&refs, &missing);
        let messages: Vec<_> = hazards.iter().map(Hazard::message).collect();
        assert_eq!(
            messages,
            vec![
                "container etcd: envFrom[0].configMapRef → ConfigMap \"etcd-cluster-state\" not found (the container cannot be recreated)",
                "volume peer-tls: projected.sources[1].secret → Secret \"etcd-peer-tls\" not found (mounted by etcd: the volume cannot be set up again, e.g. after a node reboot)",
            ]
        );
        assert_eq!(hazards[0].container(), Some("etcd"));
        assert_eq!(hazards[1].container(), None);
        assert!(missing_references(&refs, &BTreeSet::new()).is_empty());
    }

    #[test]
    fn hazards_serialize_flat_with_a_kebab_kind() {
        let r = Reference {
            owner: Owner::Container {
                container: "etcd".into(),
                container_type: ContainerType::Container,
            },
            reference: "envFrom[0].configMapRef".into(),
            path: "containers[etcd].envFrom[0].configMapRef".into(),
            object_kind: ObjectKind::ConfigMap,
            object_name: "etcd-cluster-state".into(),
            key: None,
        };
        let h = Hazard::MissingReference {
            message: missing_message(&r),
            reference: r,
        };
        let v = serde_json::to_value(&h).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            v,
            json!({
                "kind": "missing-reference",
                "container": "etcd",
                "container_type": "container",
                "reference": "envFrom[0].configMapRef",
                "path": "containers[etcd].envFrom[0].configMapRef",
                "object_kind": "ConfigMap",
                "object_name": "etcd-cluster-state",
                "message": "container etcd: envFrom[0].configMapRef → ConfigMap \"etcd-cluster-state\" not found (the container cannot be recreated)",
            })
        );
    }

    #[test]
    fn configuration_errors_are_told_apart() {
        let forbidden = PodCheckError::Api(ApiError::Forbidden {
            verb: "get",
            kind: ObjectKind::Secret,
            namespace: "tenant-a".into(),
            name: "etcd-peer-tls".into(),
            message: "nope".into(),
        });
        assert!(forbidden.is_configuration());
        assert_eq!(forbidden.kind(), "forbidden");
        assert!(forbidden.to_string().contains("`get` on secrets"));
        let down = PodCheckError::Api(ApiError::Api {
            kind: ObjectKind::Pod,
            namespace: "tenant-a".into(),
            name: "etcd-0".into(),
            code: 500,
            reason: "InternalError".into(),
            message: "boom".into(),
        });
        assert!(!down.is_configuration());
        assert_eq!(down.kind(), "api");
    }
}
