//! What `fleet` keeps of each object it lists or watches: a few hundred bytes
//! per member instead of the objects themselves, so a fleet of thousands of
//! members fits in a few MiB however long `--watch` runs. Each conversion is a
//! pure function of one object, tested on its own.
//!
//! Objects are read through the types of [`super::lite`]: of a Pod, its
//! metadata and status, and of its spec only the node and the containers'
//! names, commands and arguments (serde skips the rest — env, volumes,
//! probes, `managedFields` — while parsing).
//! The rules are the ones the rest of the agent uses: hazards are
//! [`crate::evidence::pod::stuck_in_status`], witness Leases are
//! [`crate::evidence::lease::parse`], the operator's records are
//! [`crate::evidence::kube::parse_member`]/[`parse_cluster`](crate::evidence::kube::parse_cluster),
//! the termination message is [`TerminationMessage`]. Verdict names and rows
//! are data: a refusal is an init container that ended with a non-zero code.

use std::collections::BTreeMap;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ContainerState, ContainerStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::jiff::Timestamp;
use serde::{Deserialize, Serialize};

use crate::disk::ids::token_sha256;
use crate::evidence::kube::{parse_cluster, parse_member};
use crate::evidence::lease::{self, WitnessRecord};
use crate::evidence::pod::{stuck_in_status, Hazard, HAZARD_KINDS};
use crate::output::TerminationMessage;

pub use super::lite::{EventLite, LeaseLite, PodLite, RecordLite};

/// `(namespace, name)` of an object.
pub type Key = (String, String);

/// The part of a Pod's spec `fleet` reads.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodSpecLite {
    /// `spec.nodeName`.
    #[serde(default)]
    pub node_name: Option<String>,
    /// `spec.containers`.
    #[serde(default)]
    pub containers: Option<Vec<ContainerLite>>,
    /// `spec.initContainers`.
    #[serde(default)]
    pub init_containers: Option<Vec<ContainerLite>>,
}

/// The part of a container's spec `fleet` reads.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ContainerLite {
    /// `name`.
    pub name: String,
    /// `command`.
    #[serde(default)]
    pub command: Option<Vec<String>>,
    /// `args`.
    #[serde(default)]
    pub args: Option<Vec<String>>,
}

/// The agent's subcommands that guard a start: their termination message
/// carries a verdict.
pub const GUARD_COMMANDS: [&str; 2] = ["preflight", "restore"];
/// The agent's binary name, as a command names it (`/usr/local/bin/etcd-member-agent`).
pub const AGENT_BINARY: &str = "etcd-member-agent";
/// The name of the member's etcd container in the operator's Pods; without
/// one, the first container is taken as etcd.
pub const ETCD_CONTAINER: &str = "etcd";
/// The witness Leases' labels, as `serve` writes them (a server-side selector).
pub const WITNESS_SELECTOR: &str =
    "app.kubernetes.io/name=etcd-member-agent,app.kubernetes.io/component=witness";
/// The prefix of a witness Lease's name (`etcd-witness-<member>`).
pub const WITNESS_PREFIX: &str = "etcd-witness-";

/// Which agent subcommand a container runs, from its command and arguments:
/// the first word that is `subcommand`, when the command is the agent's binary,
/// or the image's entrypoint (no command) and the container is named like it.
fn runs(c: &ContainerLite, subcommands: &[&str]) -> Option<String> {
    let command = c.command.as_deref().unwrap_or_default();
    let args = c.args.as_deref().unwrap_or_default();
    let words = || command.iter().chain(args.iter());
    let agent = words().any(|w| {
        w.rsplit('/')
            .next()
            .is_some_and(|base| base == AGENT_BINARY)
    });
    let sub = words().find(|w| subcommands.contains(&w.as_str()))?;
    (agent || (command.is_empty() && &c.name == sub)).then(|| sub.clone())
}

/// How a container is (or was) doing, in short.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum RunState {
    /// Running since then.
    Running {
        /// `startedAt`.
        #[serde(serialize_with = "ser_time")]
        since: Option<Timestamp>,
    },
    /// Waiting, for this reason (`CrashLoopBackOff`, `PodInitializing`).
    Waiting {
        /// The kubelet's reason.
        reason: Option<String>,
        /// The kubelet's message.
        #[serde(skip_serializing_if = "Option::is_none")]
        message: Option<String>,
    },
    /// Ended with this code.
    Terminated {
        /// The exit code.
        exit_code: i32,
        /// The kubelet's reason (`Error`, `Completed`).
        reason: Option<String>,
    },
    /// No state reported (yet).
    Unknown,
}

impl RunState {
    fn of(state: Option<&ContainerState>) -> RunState {
        let Some(state) = state else {
            return RunState::Unknown;
        };
        if let Some(t) = &state.terminated {
            return RunState::Terminated {
                exit_code: t.exit_code,
                reason: t.reason.clone(),
            };
        }
        if let Some(w) = &state.waiting {
            return RunState::Waiting {
                reason: w.reason.clone(),
                message: w.message.clone().filter(|m| !m.is_empty()),
            };
        }
        if let Some(r) = &state.running {
            return RunState::Running {
                since: r.started_at.as_ref().map(|t| t.0),
            };
        }
        RunState::Unknown
    }

    /// One short phrase: `running`, `waiting (CrashLoopBackOff)`, `exited 10`.
    pub fn describe(&self) -> String {
        match self {
            RunState::Running { .. } => "running".to_owned(),
            RunState::Waiting {
                reason: Some(r), ..
            } => format!("waiting ({r})"),
            RunState::Waiting { reason: None, .. } => "waiting".to_owned(),
            RunState::Terminated { exit_code, .. } => format!("exited {exit_code}"),
            RunState::Unknown => "no state reported".to_owned(),
        }
    }
}

/// One ending of a guard container, with what its message said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Termination {
    /// The exit code the kubelet saw (the one that counts).
    pub exit_code: i32,
    /// When it started.
    pub started: Option<Timestamp>,
    /// When it ended.
    pub finished: Option<Timestamp>,
    /// The message, when it is the agent's JSON.
    pub message: Option<TerminationMessage>,
    /// The message's last line otherwise (`FallbackToLogsOnError`: the log's
    /// tail), at most [`TAIL_MAX`] bytes.
    pub tail: Option<String>,
}

/// The longest part of an unparsed termination message kept.
pub const TAIL_MAX: usize = 256;

/// What a termination message says: the agent's JSON, or else its last line.
pub fn read_termination_message(text: &str) -> (Option<TerminationMessage>, Option<String>) {
    let text = text.trim();
    if text.is_empty() {
        return (None, None);
    }
    if let Ok(msg) = serde_json::from_str::<TerminationMessage>(text) {
        return (Some(msg), None);
    }
    let last = text.lines().rev().map(str::trim).find(|l| !l.is_empty());
    (None, last.map(|l| cut(l, TAIL_MAX)))
}

/// `s` cut to at most `max` bytes on a character boundary, `…` marking a cut.
pub fn cut(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_owned();
    }
    let mut end = max.saturating_sub('…'.len_utf8());
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

/// A guard init container (`preflight` or `restore`) as the Pod status shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GuardRun {
    /// The container's name.
    pub container: String,
    /// `preflight` or `restore`.
    pub command: String,
    /// Its current state.
    pub state: RunState,
    /// Its latest ending: `state.terminated`, else `lastState.terminated`
    /// (between attempts the kubelet shows `waiting: CrashLoopBackOff`).
    pub last: Option<Termination>,
    /// `restartCount`: the attempts after the first.
    pub restarts: i32,
}

/// The member's etcd container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EtcdContainer {
    /// Its name.
    pub name: String,
    /// `ready`: what its readiness probe (the sidecar's `/readyz`) last said.
    pub ready: bool,
    /// Its state.
    pub state: RunState,
    /// `restartCount`.
    pub restarts: i32,
}

/// What `fleet` keeps of a Pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodFacts {
    /// Namespace.
    pub namespace: String,
    /// Name (the member's, for the operator).
    pub name: String,
    /// UID: Events and witnesses of an earlier Pod of the same name are not this one's.
    pub uid: String,
    /// `spec.nodeName`.
    pub node: Option<String>,
    /// `metadata.creationTimestamp`.
    pub created: Option<Timestamp>,
    /// `metadata.deletionTimestamp` is set.
    pub terminating: bool,
    /// The value of the cluster label (`--cluster-label`).
    pub cluster_label: Option<String>,
    /// `app.kubernetes.io/instance` (charts name the release there).
    pub instance_label: Option<String>,
    /// The controlling owner's name (a StatefulSet).
    pub controller: Option<String>,
    /// An init container runs `preflight` (or `restore`).
    pub guarded: bool,
    /// A container runs `serve` (the sidecar that keeps the witness).
    pub sidecar: bool,
    /// `status.phase`.
    pub phase: Option<String>,
    /// The Pod's `Ready` condition.
    pub ready_condition: Option<bool>,
    /// When it last changed.
    pub ready_since: Option<Timestamp>,
    /// The Pod's `Initialized` condition is `False`, since then (init
    /// containers have not all completed).
    pub uninitialized_since: Option<Option<Timestamp>>,
    /// The etcd container.
    pub etcd: Option<EtcdContainer>,
    /// The guard init containers, in Pod order.
    pub guards: Vec<GuardRun>,
    /// Containers stuck on their configuration (pod-check's rule).
    pub stuck: Vec<Hazard>,
    /// `restartCount` of every container and init container that restarted.
    pub restarts: BTreeMap<String, i32>,
}

fn time(t: Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>) -> Option<Timestamp> {
    t.map(|t| t.0)
}

/// The facts of `pod`; `cluster_label` is the label naming its cluster.
pub fn pod(pod: &PodLite, cluster_label: &str) -> PodFacts {
    let meta = &pod.metadata;
    let labels = meta.labels.as_ref();
    let label = |k: &str| {
        labels
            .and_then(|l| l.get(k))
            .filter(|v| !v.is_empty())
            .cloned()
    };
    let spec = &pod.spec;
    let containers = spec.containers.as_deref().unwrap_or_default();
    let inits = spec.init_containers.as_deref().unwrap_or_default();
    let status = pod.status.as_ref();
    let statuses = |init: bool| -> &[ContainerStatus] {
        status
            .and_then(|s| {
                if init {
                    s.init_container_statuses.as_deref()
                } else {
                    s.container_statuses.as_deref()
                }
            })
            .unwrap_or_default()
    };
    let status_of = |init: bool, name: &str| statuses(init).iter().find(|s| s.name == name);

    let guards: Vec<GuardRun> = inits
        .iter()
        .filter_map(|c| {
            let command = runs(c, &GUARD_COMMANDS)?;
            let cs = status_of(true, &c.name);
            let state = RunState::of(cs.and_then(|s| s.state.as_ref()));
            let terminated = cs.and_then(|s| {
                s.state
                    .as_ref()
                    .and_then(|st| st.terminated.as_ref())
                    .or_else(|| s.last_state.as_ref().and_then(|st| st.terminated.as_ref()))
            });
            let last = terminated.map(|t| {
                let (message, tail) = read_termination_message(t.message.as_deref().unwrap_or(""));
                Termination {
                    exit_code: t.exit_code,
                    started: time(t.started_at.as_ref()),
                    finished: time(t.finished_at.as_ref()),
                    message,
                    tail,
                }
            });
            Some(GuardRun {
                container: c.name.clone(),
                command,
                state,
                last,
                restarts: cs.map(|s| s.restart_count).unwrap_or(0),
            })
        })
        .collect();
    let sidecar = inits
        .iter()
        .chain(containers.iter())
        .any(|c| runs(c, &["serve"]).is_some());

    let etcd_name = containers
        .iter()
        .find(|c| c.name == ETCD_CONTAINER)
        .or_else(|| containers.first())
        .map(|c| c.name.clone());
    let etcd = etcd_name.map(|name| {
        let cs = status_of(false, &name);
        EtcdContainer {
            ready: cs.is_some_and(|s| s.ready),
            state: RunState::of(cs.and_then(|s| s.state.as_ref())),
            restarts: cs.map(|s| s.restart_count).unwrap_or(0),
            name,
        }
    });
    let condition = |kind: &str| {
        status
            .and_then(|s| s.conditions.as_deref())
            .unwrap_or_default()
            .iter()
            .find(|c| c.type_ == kind)
    };
    let ready = condition("Ready");
    let initialized = condition("Initialized");
    let restarts = statuses(true)
        .iter()
        .chain(statuses(false).iter())
        .filter(|s| s.restart_count > 0)
        .map(|s| (s.name.clone(), s.restart_count))
        .collect();
    PodFacts {
        namespace: meta.namespace.clone().unwrap_or_default(),
        name: meta.name.clone().unwrap_or_default(),
        uid: meta.uid.clone().unwrap_or_default(),
        node: spec.node_name.clone().filter(|n| !n.is_empty()),
        created: time(meta.creation_timestamp.as_ref()),
        terminating: meta.deletion_timestamp.is_some(),
        cluster_label: label(cluster_label),
        instance_label: label("app.kubernetes.io/instance"),
        controller: meta
            .owner_references
            .as_deref()
            .unwrap_or_default()
            .iter()
            .find(|o| o.controller == Some(true))
            .map(|o| o.name.clone()),
        guarded: !guards.is_empty(),
        sidecar,
        phase: status.and_then(|s| s.phase.clone()),
        ready_condition: ready.map(|c| c.status == "True"),
        ready_since: ready.and_then(|c| time(c.last_transition_time.as_ref())),
        uninitialized_since: initialized
            .filter(|c| c.status == "False")
            .map(|c| time(c.last_transition_time.as_ref())),
        etcd,
        guards,
        stuck: status.map(stuck_in_status).unwrap_or_default(),
        restarts,
    }
}

/// What `fleet` keeps of a witness Lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseFacts {
    /// Namespace.
    pub namespace: String,
    /// The member it is the witness of (its name without [`WITNESS_PREFIX`]).
    pub member: String,
    /// What its annotations say ([`lease::parse`]).
    pub record: WitnessRecord,
    /// `spec.renewTime`.
    pub renewed: Option<Timestamp>,
    /// `spec.leaseDurationSeconds`: not renewed within it, the witness is stale.
    pub duration_secs: Option<i32>,
}

/// The facts of a witness Lease; `None` for a Lease not named like one.
pub fn lease(lite: &LeaseLite) -> Option<LeaseFacts> {
    let l = Lease {
        metadata: lite.metadata.clone(),
        spec: lite.spec.clone(),
    };
    let name = l.metadata.name.as_deref()?;
    let member = name.strip_prefix(WITNESS_PREFIX)?;
    if member.is_empty() {
        return None;
    }
    let spec = l.spec.as_ref();
    Some(LeaseFacts {
        namespace: l.metadata.namespace.clone().unwrap_or_default(),
        member: member.to_owned(),
        record: lease::parse(&l),
        renewed: spec.and_then(|s| s.renew_time.as_ref()).map(|t| t.0),
        duration_secs: spec.and_then(|s| s.lease_duration_seconds),
    })
}

/// Which Events an [`EventFacts`] came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum EventSource {
    /// The agent's own (`source.component=etcd-member-agent`): refusals and hazards.
    Agent,
    /// The kubelet's readiness probe failures (`reason=Unhealthy`).
    Probe,
}

/// What `fleet` keeps of an Event about a Pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventFacts {
    /// Namespace.
    pub namespace: String,
    /// The Pod's name.
    pub pod: String,
    /// The Pod's UID (an Event about an earlier Pod of the name is not this one's).
    pub pod_uid: String,
    /// `reason`: a verdict, a hazard kind, `Unhealthy`.
    pub reason: String,
    /// `message`, cut to [`MESSAGE_MAX`] bytes.
    pub message: String,
    /// The container it is about (`involvedObject.fieldPath`
    /// `spec.containers{etcd}`), when it is about one.
    pub container: Option<String>,
    /// `firstTimestamp` (or `eventTime`).
    pub first: Option<Timestamp>,
    /// `lastTimestamp` (or `series.lastObservedTime`, `eventTime`).
    pub last: Option<Timestamp>,
    /// `count`.
    pub count: i32,
}

/// The longest Event message kept (the agent writes at most 1024 bytes).
pub const MESSAGE_MAX: usize = 1024;

impl EventFacts {
    /// An agent Event about a hazard (its reason is a hazard kind), not a refusal.
    pub fn is_hazard(&self) -> bool {
        HAZARD_KINDS.contains(&self.reason.as_str())
    }
}

/// The facts of an Event about a Pod, from `source`; `None` for an Event that
/// is not about a Pod, or a kubelet Event that is not a readiness failure.
pub fn event(e: &EventLite, source: EventSource) -> Option<EventFacts> {
    let about = &e.involved_object;
    if about.kind.as_deref() != Some("Pod") {
        return None;
    }
    let reason = e.reason.clone().unwrap_or_default();
    let message = e.message.clone().unwrap_or_default();
    if source == EventSource::Probe
        && !(reason == "Unhealthy" && message.starts_with("Readiness probe"))
    {
        return None;
    }
    let container = about.field_path.as_deref().and_then(|p| {
        p.strip_prefix("spec.containers{")
            .or_else(|| p.strip_prefix("spec.initContainers{"))
            .and_then(|rest| rest.strip_suffix('}'))
            .map(str::to_owned)
    });
    let event_time = e.event_time.as_ref().map(|t| t.0);
    Some(EventFacts {
        namespace: e
            .metadata
            .namespace
            .clone()
            .or_else(|| about.namespace.clone())
            .unwrap_or_default(),
        pod: about.name.clone().unwrap_or_default(),
        pod_uid: about.uid.clone().unwrap_or_default(),
        reason,
        message: cut(&message, MESSAGE_MAX),
        container,
        first: time(e.first_timestamp.as_ref()).or(event_time),
        last: time(e.last_timestamp.as_ref())
            .or_else(|| {
                e.series
                    .as_ref()
                    .and_then(|s| s.last_observed_time.as_ref())
                    .map(|t| t.0)
            })
            .or(event_time),
        count: e.count.unwrap_or(1).max(1),
    })
}

/// What `fleet` keeps of an `EtcdMember`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberRecordFacts {
    /// Namespace.
    pub namespace: String,
    /// Name (= the Pod's).
    pub name: String,
    /// `metadata.creationTimestamp`.
    pub created: Option<Timestamp>,
    /// `spec.clusterName`; empty when the record is malformed.
    pub cluster: String,
    /// `status.isVoter`.
    pub is_voter: Option<bool>,
    /// `spec.dormant`.
    pub dormant: bool,
    /// `status.memberID`.
    pub member_id: Option<String>,
    /// Why the record could not be read, when it could not.
    pub problem: Option<String>,
}

/// What `fleet` keeps of an `EtcdCluster`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterRecordFacts {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// `metadata.creationTimestamp`.
    pub created: Option<Timestamp>,
    /// `status.clusterID`.
    pub cluster_id: Option<String>,
    /// `spec.replicas`.
    pub replicas: Option<i64>,
    /// `metadata.uid`: this incarnation of the cluster.
    pub uid: Option<String>,
    /// SHA-256 of `status.clusterToken`, as a witness records its token.
    pub token_sha256: Option<String>,
    /// Why the record could not be read, when it could not.
    pub problem: Option<String>,
}

fn key_of(meta: &ObjectMeta) -> (String, String) {
    (
        meta.namespace.clone().unwrap_or_default(),
        meta.name.clone().unwrap_or_default(),
    )
}

/// The facts of an `EtcdMember` ([`parse_member`]).
pub fn member_record(obj: &RecordLite) -> MemberRecordFacts {
    let (namespace, name) = key_of(&obj.metadata);
    let created = time(obj.metadata.creation_timestamp.as_ref());
    match parse_member(&name, &obj.document()) {
        Ok(r) => MemberRecordFacts {
            namespace,
            name,
            created,
            cluster: r.cluster_name,
            is_voter: r.is_voter,
            dormant: r.dormant,
            member_id: r.member_id.map(|id| id.to_string()),
            problem: None,
        },
        Err(e) => MemberRecordFacts {
            namespace,
            name,
            created,
            cluster: String::new(),
            is_voter: None,
            dormant: false,
            member_id: None,
            problem: Some(e.to_string()),
        },
    }
}

/// The facts of an `EtcdCluster` ([`parse_cluster`]).
pub fn cluster_record(obj: &RecordLite) -> ClusterRecordFacts {
    let (namespace, name) = key_of(&obj.metadata);
    let created = time(obj.metadata.creation_timestamp.as_ref());
    match parse_cluster(&name, &obj.document()) {
        Ok(r) => ClusterRecordFacts {
            namespace,
            name,
            created,
            cluster_id: r.cluster_id.map(|id| id.to_string()),
            replicas: r.replicas,
            uid: r.uid,
            token_sha256: r.cluster_token.as_deref().map(token_sha256),
            problem: None,
        },
        Err(e) => ClusterRecordFacts {
            namespace,
            name,
            created,
            cluster_id: None,
            replicas: None,
            uid: None,
            token_sha256: None,
            problem: Some(e.to_string()),
        },
    }
}

/// Serializes an optional time as RFC 3339 (`null` when absent).
pub fn ser_time<S: serde::Serializer>(t: &Option<Timestamp>, s: S) -> Result<S::Ok, S::Error> {
    match t {
        Some(t) => s.serialize_str(&t.to_string()),
        None => s.serialize_none(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod_from(v: serde_json::Value) -> PodLite {
        serde_json::from_value(v).unwrap()
    }

    fn guarded_pod(init_status: serde_json::Value) -> serde_json::Value {
        json!({
            "metadata": {"name": "etcd-x", "namespace": "t", "uid": "u1",
                          "labels": {"etcd-operator.cozystack.io/cluster": "etcd"}},
            "spec": {
                "nodeName": "node-1",
                "initContainers": [
                    {"name": "agent", "command": ["/usr/local/bin/etcd-member-agent"], "args": ["serve"], "restartPolicy": "Always"},
                    {"name": "preflight", "command": ["/usr/local/bin/etcd-member-agent"], "args": ["preflight"],
                     "env": [{"name": "ETCD_DATA_DIR", "value": "/var/lib/etcd"}]},
                ],
                "containers": [{"name": "etcd", "image": "quay.io/coreos/etcd:v3.6.11"}],
            },
            "status": {
                "phase": "Pending",
                "conditions": [
                    {"type": "Initialized", "status": "False", "lastTransitionTime": "2026-12-03T10:00:00Z"},
                    {"type": "Ready", "status": "False", "lastTransitionTime": "2026-12-03T10:00:00Z"},
                ],
                "initContainerStatuses": [init_status],
                "containerStatuses": [{"name": "etcd", "ready": false, "restartCount": 0, "image": "x", "imageID": "",
                    "state": {"waiting": {"reason": "PodInitializing"}}}],
            },
        })
    }

    #[test]
    fn a_refusing_preflight_is_read_from_last_state_between_attempts() {
        let message = crate::output::fitted_message(
            json!("refuse-empty-formed"),
            10,
            [None, None],
            "the data directory is empty but this member started before",
            "replace the member",
        );
        let p = pod(
            &pod_from(guarded_pod(json!({
                "name": "preflight", "ready": false, "restartCount": 3, "image": "x", "imageID": "",
                "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 40s"}},
                "lastState": {"terminated": {"exitCode": 10, "reason": "Error", "message": message,
                    "startedAt": "2026-12-03T10:05:00Z", "finishedAt": "2026-12-03T10:05:01Z"}},
            }))),
            "etcd-operator.cozystack.io/cluster",
        );
        assert!(p.guarded && p.sidecar);
        assert_eq!(p.cluster_label.as_deref(), Some("etcd"));
        assert_eq!(p.node.as_deref(), Some("node-1"));
        assert_eq!(p.guards.len(), 1);
        let g = &p.guards[0];
        assert_eq!(
            (g.container.as_str(), g.command.as_str()),
            ("preflight", "preflight")
        );
        assert_eq!(g.restarts, 3);
        assert_eq!(g.state.describe(), "waiting (CrashLoopBackOff)");
        let last = g.last.as_ref().unwrap();
        assert_eq!(last.exit_code, 10);
        let msg = last.message.as_ref().unwrap();
        assert_eq!(msg.verdict.as_deref(), Some("refuse-empty-formed"));
        assert_eq!(msg.exit_code, 10);
        assert_eq!(
            last.finished.map(|t| t.to_string()).as_deref(),
            Some("2026-12-03T10:05:01Z")
        );
        assert_eq!(p.uninitialized_since.map(|t| t.is_some()), Some(true));
        assert_eq!(p.restarts.get("preflight"), Some(&3));
        let etcd = p.etcd.as_ref().unwrap();
        assert_eq!((etcd.name.as_str(), etcd.ready), ("etcd", false));
    }

    #[test]
    fn a_log_tail_message_keeps_its_last_line_and_the_exit_code() {
        let (msg, tail) = read_termination_message("panic: boom\n\ngoroutine 1\n  at x.go:3\n");
        assert_eq!(msg, None);
        assert_eq!(tail.as_deref(), Some("at x.go:3"));
        assert_eq!(read_termination_message("  "), (None, None));
        let long = "é".repeat(400);
        let (_, tail) = read_termination_message(&long);
        let tail = tail.unwrap();
        assert!(tail.len() <= TAIL_MAX && tail.ends_with('…'), "{tail}");
    }

    #[test]
    fn only_the_agents_containers_are_guards() {
        let c = |name: &str, command: &[&str], args: &[&str]| ContainerLite {
            name: name.into(),
            command: Some(command.iter().map(|s| (*s).to_owned()).collect()),
            args: Some(args.iter().map(|s| (*s).to_owned()).collect()),
        };
        assert_eq!(
            runs(
                &c(
                    "preflight",
                    &["/usr/local/bin/etcd-member-agent"],
                    &["preflight"]
                ),
                &GUARD_COMMANDS
            )
            .as_deref(),
            Some("preflight")
        );
        assert_eq!(
            runs(
                &c("restore", &["/tools/etcd-member-agent", "restore"], &[]),
                &GUARD_COMMANDS
            )
            .as_deref(),
            Some("restore")
        );
        // The image's entrypoint, named like the subcommand.
        assert_eq!(
            runs(&c("preflight", &[], &["preflight"]), &GUARD_COMMANDS).as_deref(),
            Some("preflight")
        );
        // The operator's own restore agent is not the guard.
        assert_eq!(
            runs(
                &c("restore", &["/tools/manager"], &["restore"]),
                &GUARD_COMMANDS
            ),
            None
        );
        assert_eq!(
            runs(&c("etcd", &["etcd"], &["--name=x"]), &GUARD_COMMANDS),
            None
        );
    }

    #[test]
    fn kubelet_events_other_than_readiness_failures_are_not_kept() {
        let e = |reason: &str, message: &str| -> EventLite {
            serde_json::from_value(json!({
                "metadata": {"name": "e", "namespace": "t"},
                "involvedObject": {"kind": "Pod", "name": "etcd-x", "uid": "u1", "fieldPath": "spec.containers{etcd}"},
                "reason": reason, "message": message, "count": 4,
                "firstTimestamp": "2026-12-03T10:00:00Z", "lastTimestamp": "2026-12-03T10:09:00Z",
            }))
            .unwrap()
        };
        let f = event(
            &e(
                "Unhealthy",
                "Readiness probe failed: HTTP probe failed with statuscode: 503",
            ),
            EventSource::Probe,
        )
        .unwrap();
        assert_eq!(f.container.as_deref(), Some("etcd"));
        assert_eq!(f.count, 4);
        assert!(event(
            &e("Unhealthy", "Liveness probe failed: x"),
            EventSource::Probe
        )
        .is_none());
        assert!(event(&e("BackOff", "Back-off"), EventSource::Probe).is_none());
        let agent = event(
            &e("missing-reference", "container etcd: ..."),
            EventSource::Agent,
        )
        .unwrap();
        assert!(agent.is_hazard());
        let refusal = event(&e("refuse-empty-formed", "..."), EventSource::Agent).unwrap();
        assert!(!refusal.is_hazard());
    }

    proptest::proptest! {
        #[test]
        fn any_termination_message_is_read_without_panicking(text in ".{0,600}") {
            let (msg, tail) = read_termination_message(&text);
            proptest::prop_assert!(msg.is_none() || tail.is_none());
            if let Some(t) = tail {
                proptest::prop_assert!(t.len() <= TAIL_MAX);
            }
        }
    }
}
