//! The view: from the facts of the [`Store`] and the time, one row per member
//! and one line per cluster with the conditions computed across its members
//! (docs/fleet.md). A pure function: no I/O, the clock is an argument, so every
//! condition is tested on facts written by hand.
//!
//! A member is a Pod the selector picked, or an `EtcdMember` of a cluster in
//! view without a Pod. Its cluster is, in this order: its `EtcdMember`'s
//! `spec.clusterName`, the cluster label, `app.kubernetes.io/instance`, its
//! controller's name (a StatefulSet), its own name.
//!
//! The conditions, in the order they are reported ([`RULES`]); the first four
//! are critical, the rest warnings:
//!
//! | condition | when |
//! |---|---|
//! | `quorum-lost` | fewer healthy voters (Ready, not refused) than the quorum (⌊n/2⌋+1 of the n voters) |
//! | `quorum-at-risk` | a voter is not healthy and the healthy ones are no more than the quorum: one more loss loses it |
//! | `cluster-id-mismatch` | the members' witnesses of this incarnation (and the `EtcdCluster`'s `status.clusterID`) name more than one cluster ID |
//! | `members-refused` | a guard (`preflight`, `restore`) last ended with a non-zero exit code |
//! | `members-not-ready` | a member not refused has been not Ready (or without a Pod) for longer than `--not-ready-after` |
//! | `witness-stale` | a Ready member's witness Lease was not renewed within its `leaseDurationSeconds` |
//! | `witness-missing` | a Ready member with the guard has no witness Lease of this incarnation |
//! | `raft-lag` | a Ready member's fresh witness is more than `--lag-threshold` entries behind the highest of the cluster's |
//! | `hazards` | pod-check's findings: a container stuck on its configuration, a reference to a missing ConfigMap or Secret |

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::jiff::Timestamp;
use serde::Serialize;

use super::facts::{
    ser_time, ClusterRecordFacts, EventFacts, Key, LeaseFacts, MemberRecordFacts, PodFacts,
    RunState, GUARD_COMMANDS,
};
use super::store::{ReadState, Resource, Scope, Store};
use crate::exit::Exit;

/// Thresholds and choices of the view (the flags of `fleet`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// `--lag-threshold`: raft entries a member's witness may trail the
    /// cluster's highest before `raft-lag`.
    pub lag_threshold: u64,
    /// `--not-ready-after`, in seconds.
    pub not_ready_after_secs: i64,
    /// Whether the operator's records bring in clusters and members no selected
    /// Pod belongs to (true unless `-l` narrowed the Pods).
    pub records_define_clusters: bool,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            lag_threshold: 10_000,
            not_ready_after_secs: 120,
            records_define_clusters: true,
        }
    }
}

/// How bad a condition, or a cluster, is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Health {
    /// A person must act now: etcd does not start, or the cluster is one
    /// failure (or none) away from unavailability, or two histories answer.
    Critical,
    /// A person should look.
    Warning,
    /// Nothing found.
    Ok,
}

/// The cluster-level conditions. See the module docs for each rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ConditionKind {
    /// Fewer healthy voters than the quorum.
    QuorumLost,
    /// One more loss loses the quorum.
    QuorumAtRisk,
    /// The witnesses name more than one cluster ID.
    ClusterIdMismatch,
    /// A member's guard refused.
    MembersRefused,
    /// A member has been not Ready for too long.
    MembersNotReady,
    /// A Ready member's witness is not renewed.
    WitnessStale,
    /// A Ready member with the sidecar has no witness.
    WitnessMissing,
    /// A member's witness trails the others'.
    RaftLag,
    /// pod-check's findings.
    Hazards,
}

impl ConditionKind {
    /// The condition's severity.
    pub fn health(self) -> Health {
        match self {
            ConditionKind::QuorumLost
            | ConditionKind::QuorumAtRisk
            | ConditionKind::ClusterIdMismatch
            | ConditionKind::MembersRefused => Health::Critical,
            _ => Health::Warning,
        }
    }

    /// Its name, as in JSON and metrics.
    pub fn name(self) -> &'static str {
        match self {
            ConditionKind::QuorumLost => "quorum-lost",
            ConditionKind::QuorumAtRisk => "quorum-at-risk",
            ConditionKind::ClusterIdMismatch => "cluster-id-mismatch",
            ConditionKind::MembersRefused => "members-refused",
            ConditionKind::MembersNotReady => "members-not-ready",
            ConditionKind::WitnessStale => "witness-stale",
            ConditionKind::WitnessMissing => "witness-missing",
            ConditionKind::RaftLag => "raft-lag",
            ConditionKind::Hazards => "hazards",
        }
    }

    /// Every condition, in the order of [`RULES`].
    pub const ALL: [ConditionKind; 9] = [
        ConditionKind::QuorumLost,
        ConditionKind::QuorumAtRisk,
        ConditionKind::ClusterIdMismatch,
        ConditionKind::MembersRefused,
        ConditionKind::MembersNotReady,
        ConditionKind::WitnessStale,
        ConditionKind::WitnessMissing,
        ConditionKind::RaftLag,
        ConditionKind::Hazards,
    ];
}

/// One condition of one cluster.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Condition {
    /// Which.
    pub kind: ConditionKind,
    /// Its severity.
    pub severity: Health,
    /// The members concerned (for the quorum: the unhealthy voters).
    pub members: Vec<String>,
    /// Since when it holds, as far as the facts tell (the longest-refused
    /// member's refusal, the staleness of the oldest witness, …).
    #[serde(serialize_with = "ser_time")]
    pub since: Option<Timestamp>,
    /// `since`'s age in seconds at `generated_at`.
    pub for_seconds: Option<i64>,
    /// What was found, without times: `etcd-c2: refuse-empty-formed (exit 10)`.
    pub detail: String,
}

/// A member's state in one word, worst first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum MemberStatus {
    /// A guard refused to let etcd start.
    Refused,
    /// The `EtcdMember` has no Pod.
    NoPod,
    /// Not Ready (etcd not started, crashing, or `/readyz` says no).
    NotReady,
    /// A guard is deciding now.
    Deciding,
    /// The Pod is being deleted.
    Terminating,
    /// The cluster is scaled to zero and the member parked (`spec.dormant`).
    Dormant,
    /// Ready.
    Ready,
}

/// The last verdict of a member's guard.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct VerdictView {
    /// The container (`preflight`, `restore`).
    pub container: String,
    /// The verdict's name, when known (`refuse-empty-formed`).
    pub verdict: Option<String>,
    /// The exit code (the kubelet's, else the message's).
    pub exit_code: Option<i32>,
    /// Non-zero: etcd does not start.
    pub refused: bool,
    /// The row of docs/decision-table.md, when the message names it.
    pub row: Option<String>,
    /// What was seen.
    pub reason: Option<String>,
    /// What to do.
    pub remedy: Option<String>,
    /// The data directory's member ID, as the message gives it.
    pub member_id: Option<String>,
    /// Its cluster ID.
    pub cluster_id: Option<String>,
    /// When the guard ended (or the Event was last seen).
    #[serde(serialize_with = "ser_time")]
    pub at: Option<Timestamp>,
    /// `at`'s age in seconds.
    pub age_seconds: Option<i64>,
    /// Since when this Pod has been refused (the refusal's first Event, else
    /// the Pod's `Initialized=False`), when refused.
    #[serde(serialize_with = "ser_time")]
    pub refused_since: Option<Timestamp>,
    /// The guard's restarts (the kubelet retries a refusal with back-off).
    pub restarts: i32,
    /// The guard container's state now (`waiting (CrashLoopBackOff)`).
    pub state: String,
    /// Where the verdict was read: `termination-message`, `event`, or
    /// `exit-code` (a message that is not the agent's: its last line is the reason).
    pub source: &'static str,
}

/// A member's witness Lease.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct WitnessView {
    /// The Lease's name.
    pub lease: String,
    /// The member ID it records.
    pub member_id: Option<String>,
    /// The cluster ID it records.
    pub cluster_id: Option<String>,
    /// The raft term at the mark.
    pub raft_term: Option<u64>,
    /// The raft index high-water mark.
    pub raft_index: Option<u64>,
    /// The Pod that last wrote it.
    pub holder: Option<String>,
    /// The last renewal.
    #[serde(serialize_with = "ser_time")]
    pub renewed_at: Option<Timestamp>,
    /// `renewed_at`'s age in seconds.
    pub age_seconds: Option<i64>,
    /// Not renewed within its `leaseDurationSeconds`.
    pub stale: bool,
    /// The MVCC revision at the mark, when the sidecar records it.
    pub revision: Option<i64>,
    /// SHA-256 of the token the cluster was formed with, when recorded.
    pub token_sha256: Option<String>,
    /// The `EtcdCluster`'s `metadata.uid` it was written under, when recorded.
    pub cluster_uid: Option<String>,
    /// Written under another incarnation of the cluster (another `EtcdCluster`
    /// UID or token than the record's): it neither vouches nor disagrees here.
    pub other_incarnation: bool,
    /// Annotations missing or unreadable.
    pub problems: Vec<String>,
}

/// The kubelet's last readiness-probe failure.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ProbeView {
    /// Its message (`Readiness probe failed: HTTP probe failed with statuscode: 503`).
    pub message: String,
    /// How many times.
    pub count: i32,
    /// The last one.
    #[serde(serialize_with = "ser_time")]
    pub at: Option<Timestamp>,
}

/// A member's readiness.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ReadinessView {
    /// The etcd container's `ready` (its probe is the sidecar's `/readyz`);
    /// `None` without a Pod.
    pub ready: Option<bool>,
    /// Since when (the Pod's `Ready` condition's last transition).
    #[serde(serialize_with = "ser_time")]
    pub since: Option<Timestamp>,
    /// In words: `ready`, `preflight refused (refuse-empty-formed)`,
    /// `etcd waiting (CrashLoopBackOff)`, `no Pod`.
    pub detail: String,
    /// What the readiness probe last said when it failed (the kubelet keeps
    /// its status code, not `/readyz`'s text).
    pub probe: Option<ProbeView>,
}

/// One hazard of a member.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HazardView {
    /// `missing-reference` or `stuck-container`.
    pub kind: String,
    /// pod-check's line.
    pub message: String,
    /// `pod-status` (seen now) or `event` (reported by the sidecar's pod-check).
    pub source: &'static str,
    /// When reported (for an Event).
    #[serde(serialize_with = "ser_time")]
    pub at: Option<Timestamp>,
}

/// One member's row.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MemberView {
    /// The member's name.
    pub member: String,
    /// Its Pod, if any.
    pub pod: Option<String>,
    /// The Pod's node.
    pub node: Option<String>,
    /// The state in one word.
    pub status: MemberStatus,
    /// A guard runs in its Pod.
    pub guarded: bool,
    /// A voter (false for a learner; unknown members count as voters).
    pub voter: bool,
    /// The `EtcdMember`'s `status.memberID`.
    pub recorded_member_id: Option<String>,
    /// The last verdict.
    pub verdict: Option<VerdictView>,
    /// The witness.
    pub witness: Option<WitnessView>,
    /// Readiness.
    pub readiness: ReadinessView,
    /// pod-check's findings.
    pub hazards: Vec<HazardView>,
    /// Restarts per container (only those that restarted).
    pub restarts: BTreeMap<String, i32>,
    /// The conditions of its cluster it takes part in.
    pub conditions: Vec<ConditionKind>,
}

/// A cluster ID and who claims it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct IdClaim {
    /// The cluster ID.
    pub cluster_id: String,
    /// The members whose witness records it, and `EtcdCluster` when the
    /// record's `status.clusterID` is it.
    pub claimed_by: Vec<String>,
}

/// One cluster's line and its members.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ClusterView {
    /// Namespace.
    pub namespace: String,
    /// The cluster's name.
    pub name: String,
    /// The worst of its conditions.
    pub health: Health,
    /// Members (rows below).
    pub member_count: usize,
    /// Voters (learners and dormant members are not).
    pub voters: usize,
    /// Voters Ready and not refused.
    pub healthy_voters: usize,
    /// ⌊voters/2⌋+1.
    pub quorum: usize,
    /// The one cluster ID everyone claims, when they agree.
    pub cluster_id: Option<String>,
    /// Every cluster ID claimed, and by whom.
    pub cluster_ids: Vec<IdClaim>,
    /// `EtcdCluster.spec.replicas`, when there is a record.
    pub replicas: Option<i64>,
    /// Its conditions, in the order of [`RULES`].
    pub conditions: Vec<Condition>,
    /// One row per member, worst first.
    pub members: Vec<MemberView>,
}

/// A read that failed: what it is and what the view therefore lacks.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Unread {
    /// The resource.
    pub resource: Resource,
    /// The namespace (`null`: all namespaces).
    pub namespace: Option<String>,
    /// `forbidden`, `timeout`, `not-read-yet`, …
    pub error: &'static str,
    /// The message.
    pub message: String,
    /// What the view lacks for it.
    pub missing: &'static str,
}

/// Counts for the summary line.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Summary {
    /// Clusters in view.
    pub clusters: usize,
    /// Members in view.
    pub members: usize,
    /// Members refused.
    pub refused: usize,
    /// Clusters that lost their quorum.
    pub quorum_lost: usize,
    /// Clusters whose quorum is at risk.
    pub quorum_at_risk: usize,
    /// Clusters whose witnesses disagree on the cluster ID.
    pub cluster_id_mismatch: usize,
    /// Members not Ready for too long (or without a Pod).
    pub not_ready: usize,
    /// Ready members with a stale witness.
    pub witness_stale: usize,
    /// Ready members without a witness.
    pub witness_missing: usize,
    /// Members lagging.
    pub lagging: usize,
    /// Members with hazards.
    pub with_hazards: usize,
    /// Reads that failed.
    pub unread: usize,
    /// The line: `212 clusters, 636 members: 3 refused, 1 quorum at risk`.
    pub text: String,
}

/// The whole view.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FleetView {
    /// When it was computed.
    #[serde(serialize_with = "ser_time")]
    pub generated_at: Option<Timestamp>,
    /// Something needs a person (a condition in any cluster).
    pub needs_attention: bool,
    /// Every read succeeded (or was of a resource not served).
    pub complete: bool,
    /// `fleet`'s exit code for this view (docs/exit-codes.md).
    pub exit_code: u8,
    /// The counts and the line.
    pub summary: Summary,
    /// Reads that failed.
    pub unread: Vec<Unread>,
    /// Resources the server does not serve (the operator's CRDs not installed).
    pub not_served: Vec<Resource>,
    /// Clusters, worst first.
    pub clusters: Vec<ClusterView>,
}

impl FleetView {
    /// The exit code this view calls for.
    pub fn exit(&self) -> Exit {
        exit_for(self.needs_attention, self.complete)
    }
}

/// 50 when something needs a person, else 51 when part of the fleet could
/// not be read, else 0.
pub fn exit_for(needs_attention: bool, complete: bool) -> Exit {
    if needs_attention {
        Exit::FleetAttention
    } else if !complete {
        Exit::FleetIncomplete
    } else {
        Exit::Ok
    }
}

fn age(now: Timestamp, t: Option<Timestamp>) -> Option<i64> {
    t.map(|t| (now.as_second() - t.as_second()).max(0))
}

fn earliest(ts: impl IntoIterator<Item = Option<Timestamp>>) -> Option<Timestamp> {
    ts.into_iter().flatten().min()
}

/// One member's facts, gathered from every map.
struct Gathered<'a> {
    name: String,
    pod: Option<&'a PodFacts>,
    record: Option<&'a MemberRecordFacts>,
    witness: Option<&'a LeaseFacts>,
    events: Vec<&'a EventFacts>,
    probes: Vec<&'a EventFacts>,
}

/// The cluster a Pod belongs to (see the module docs).
fn cluster_of(pod: &PodFacts, record: Option<&MemberRecordFacts>) -> String {
    record
        .map(|r| r.cluster.clone())
        .filter(|c| !c.is_empty())
        .or_else(|| pod.cluster_label.clone())
        .or_else(|| pod.instance_label.clone())
        .or_else(|| pod.controller.clone())
        .unwrap_or_else(|| pod.name.clone())
}

/// The view of `store` at `now`.
pub fn build(store: &Store, now: Timestamp, settings: &Settings) -> FleetView {
    // Events by the Pod they are about (this Pod: its UID).
    let mut events: BTreeMap<(&str, &str), Vec<&EventFacts>> = BTreeMap::new();
    for e in store.events.values() {
        events
            .entry((e.namespace.as_str(), e.pod_uid.as_str()))
            .or_default()
            .push(e);
    }
    let mut probes: BTreeMap<(&str, &str), Vec<&EventFacts>> = BTreeMap::new();
    for e in store.probes.values() {
        probes
            .entry((e.namespace.as_str(), e.pod_uid.as_str()))
            .or_default()
            .push(e);
    }

    let mut groups: BTreeMap<Key, Vec<Gathered<'_>>> = BTreeMap::new();
    let mut placed: BTreeSet<&Key> = BTreeSet::new();
    for (key, pod) in &store.pods {
        let record = store.members.get(key);
        if record.is_some() {
            placed.insert(key);
        }
        let cluster = cluster_of(pod, record);
        let by_uid = (pod.namespace.as_str(), pod.uid.as_str());
        groups
            .entry((pod.namespace.clone(), cluster))
            .or_default()
            .push(Gathered {
                name: pod.name.clone(),
                pod: Some(pod),
                record,
                witness: store.leases.get(key),
                events: events.get(&by_uid).cloned().unwrap_or_default(),
                probes: probes.get(&by_uid).cloned().unwrap_or_default(),
            });
    }
    // What cannot be known is not guessed: where the Pods could not be read,
    // no member is "without a Pod" (and no cluster of records alone is shown);
    // where the Leases could not be read, no member is "without a witness".
    let pods_read = |ns: &str| read_in(store, Resource::Pods, ns);
    for (key, record) in &store.members {
        if placed.contains(key) || record.cluster.is_empty() || !pods_read(&record.namespace) {
            continue;
        }
        let group = (record.namespace.clone(), record.cluster.clone());
        if !settings.records_define_clusters && !groups.contains_key(&group) {
            continue;
        }
        groups.entry(group).or_default().push(Gathered {
            name: record.name.clone(),
            pod: None,
            record: Some(record),
            witness: store.leases.get(key),
            events: Vec::new(),
            probes: Vec::new(),
        });
    }
    if settings.records_define_clusters {
        for key in store.clusters.keys().filter(|(ns, _)| pods_read(ns)) {
            groups.entry(key.clone()).or_default();
        }
    }

    let mut clusters: Vec<ClusterView> = groups
        .into_iter()
        .map(|((namespace, name), members)| {
            let record = store.clusters.get(&(namespace.clone(), name.clone()));
            let leases_read = read_in(store, Resource::Leases, &namespace);
            cluster(namespace, name, members, record, leases_read, now, settings)
        })
        .collect();
    // Worst first: the severity, then the worst condition (they are in the
    // order of RULES), then how many.
    let rank = |c: &ClusterView| {
        (
            c.health,
            c.conditions.first().map(|c| c.kind),
            std::cmp::Reverse(c.conditions.len()),
        )
    };
    clusters
        .sort_by(|a, b| (rank(a), &a.namespace, &a.name).cmp(&(rank(b), &b.namespace, &b.name)));

    let mut unread = Vec::new();
    let mut not_served = BTreeSet::new();
    for ((resource, scope), state) in &store.reads {
        let (error, message) = match state {
            ReadState::Read => continue,
            ReadState::NotServed(_) if resource.optional() => {
                not_served.insert(*resource);
                continue;
            }
            ReadState::NotServed(message) => ("not-served", message.clone()),
            ReadState::Pending => ("not-read", "the first list did not finish".to_owned()),
            ReadState::Failed { error, message } => (*error, message.clone()),
        };
        unread.push(Unread {
            resource: *resource,
            namespace: scope_namespace(scope),
            error,
            message,
            missing: resource.loss(),
        });
    }
    let needs_attention = clusters.iter().any(|c| !c.conditions.is_empty());
    let complete = unread.is_empty();
    let summary = summarize(&clusters, unread.len());
    FleetView {
        generated_at: Some(now),
        needs_attention,
        complete,
        exit_code: exit_for(needs_attention, complete).code(),
        summary,
        unread,
        not_served: not_served.into_iter().collect(),
        clusters,
    }
}

/// Whether `resource` was read in a scope covering `namespace`.
fn read_in(store: &Store, resource: Resource, namespace: &str) -> bool {
    store.reads.iter().any(|((r, scope), state)| {
        *r == resource && scope.covers(namespace) && *state == ReadState::Read
    })
}

fn scope_namespace(scope: &Scope) -> Option<String> {
    scope.namespace().map(str::to_owned)
}

fn summarize(clusters: &[ClusterView], unread: usize) -> Summary {
    let mut s = Summary {
        clusters: clusters.len(),
        unread,
        ..Summary::default()
    };
    for c in clusters {
        s.members += c.members.len();
        for cond in &c.conditions {
            let n = cond.members.len();
            match cond.kind {
                ConditionKind::QuorumLost => s.quorum_lost += 1,
                ConditionKind::QuorumAtRisk => s.quorum_at_risk += 1,
                ConditionKind::ClusterIdMismatch => s.cluster_id_mismatch += 1,
                ConditionKind::MembersRefused => s.refused += n,
                ConditionKind::MembersNotReady => s.not_ready += n,
                ConditionKind::WitnessStale => s.witness_stale += n,
                ConditionKind::WitnessMissing => s.witness_missing += n,
                ConditionKind::RaftLag => s.lagging += n,
                ConditionKind::Hazards => s.with_hazards += n,
            }
        }
    }
    let plural =
        |n: usize, one: &str, many: &str| format!("{n} {}", if n == 1 { one } else { many });
    let mut parts = Vec::new();
    for (n, text) in [
        (s.refused, "refused".to_owned()),
        (s.quorum_lost, "quorum lost".to_owned()),
        (s.quorum_at_risk, "quorum at risk".to_owned()),
        (s.cluster_id_mismatch, "cluster ID mismatch".to_owned()),
        (s.not_ready, "not ready".to_owned()),
        (s.witness_stale, "stale witness".to_owned()),
        (s.witness_missing, "without witness".to_owned()),
        (s.lagging, "lagging".to_owned()),
        (s.with_hazards, "with hazards".to_owned()),
    ] {
        if n > 0 {
            parts.push(format!("{n} {text}"));
        }
    }
    if unread > 0 {
        parts.push(format!(
            "{} (the view is incomplete)",
            plural(unread, "read failed", "reads failed")
        ));
    }
    if parts.is_empty() {
        parts.push("all clear".to_owned());
    }
    s.text = format!(
        "{}, {}: {}",
        plural(s.clusters, "cluster", "clusters"),
        plural(s.members, "member", "members"),
        parts.join(", ")
    );
    s
}

// ---------------------------------------------------------------------------
// One member.

fn member(g: &Gathered<'_>, now: Timestamp) -> MemberView {
    let pod = g.pod;
    let dormant = g.record.is_some_and(|r| r.dormant);
    let verdict = pod.and_then(|p| verdict(p, &g.events, now));
    let refused = verdict.as_ref().is_some_and(|v| v.refused);
    let deciding = pod.is_some_and(|p| {
        p.guards
            .iter()
            .any(|gr| matches!(gr.state, RunState::Running { .. }))
    });
    let ready = pod.map(|p| match &p.etcd {
        Some(etcd) if p.ready_condition.is_some() || etcd.ready => etcd.ready,
        _ => p.ready_condition.unwrap_or(false),
    });
    let status = match pod {
        _ if dormant => MemberStatus::Dormant,
        None => MemberStatus::NoPod,
        Some(p) if p.terminating => MemberStatus::Terminating,
        Some(_) if refused => MemberStatus::Refused,
        Some(_) if ready == Some(true) => MemberStatus::Ready,
        Some(_) if deciding => MemberStatus::Deciding,
        Some(_) => MemberStatus::NotReady,
    };
    let detail = match (pod, status) {
        (_, MemberStatus::Dormant) => "dormant (the cluster is scaled to zero)".to_owned(),
        (None, _) => "no Pod".to_owned(),
        (_, MemberStatus::Terminating) => "terminating".to_owned(),
        (_, MemberStatus::Refused) => {
            let v = verdict.as_ref();
            format!(
                "{} refused ({})",
                v.map(|v| v.container.as_str()).unwrap_or("preflight"),
                v.and_then(|v| v.verdict.clone())
                    .or_else(|| v.and_then(|v| v.exit_code).map(|c| format!("exit {c}")))
                    .unwrap_or_else(|| "refused".to_owned())
            )
        }
        (_, MemberStatus::Ready) => "ready".to_owned(),
        (Some(p), MemberStatus::Deciding) => {
            let g = p
                .guards
                .iter()
                .find(|gr| matches!(gr.state, RunState::Running { .. }));
            format!(
                "{} deciding",
                g.map(|g| g.container.as_str()).unwrap_or("preflight")
            )
        }
        (Some(p), _) => match (&p.etcd, p.phase.as_deref(), &p.node) {
            (_, _, None) => "not scheduled".to_owned(),
            (Some(e), _, _) if matches!(e.state, RunState::Running { .. }) => {
                format!("{} running, not ready", e.name)
            }
            (Some(e), _, _) => format!("{} {}", e.name, e.state.describe()),
            (None, phase, _) => format!("phase {}", phase.unwrap_or("unknown")),
        },
    };
    let probe = pod
        .filter(|_| ready == Some(false))
        .and_then(|p| {
            let etcd = p.etcd.as_ref().map(|e| e.name.as_str());
            g.probes
                .iter()
                .filter(|e| e.container.is_none() || e.container.as_deref() == etcd)
                .max_by_key(|e| e.last)
        })
        .map(|e| ProbeView {
            message: e.message.clone(),
            count: e.count,
            at: e.last,
        });
    let mut hazards: Vec<HazardView> = pod
        .map(|p| {
            p.stuck
                .iter()
                .map(|h| HazardView {
                    kind: h.kind().to_owned(),
                    message: h.message().to_owned(),
                    source: "pod-status",
                    at: None,
                })
                .collect()
        })
        .unwrap_or_default();
    // A stuck container is read from the status itself (an old Event of one
    // that has since started is not a hazard); a missing reference only the
    // sidecar's pod-check can see, so its Events are taken.
    let mut reported: Vec<&&EventFacts> = g
        .events
        .iter()
        .filter(|e| e.is_hazard() && e.reason != "stuck-container")
        .collect();
    reported.sort_by(|a, b| (&a.reason, &a.message).cmp(&(&b.reason, &b.message)));
    hazards.extend(reported.into_iter().map(|e| HazardView {
        kind: e.reason.clone(),
        message: e.message.clone(),
        source: "event",
        at: e.last,
    }));
    let witness = g.witness.map(|l| witness(l, now));
    MemberView {
        member: g.name.clone(),
        pod: pod.map(|p| p.name.clone()),
        node: pod.and_then(|p| p.node.clone()),
        status,
        guarded: pod.is_some_and(|p| p.guarded),
        voter: !dormant && g.record.and_then(|r| r.is_voter) != Some(false),
        recorded_member_id: g.record.and_then(|r| r.member_id.clone()),
        verdict,
        witness,
        readiness: ReadinessView {
            ready,
            since: pod.and_then(|p| p.ready_since),
            detail,
            probe,
        },
        hazards,
        restarts: pod.map(|p| p.restarts.clone()).unwrap_or_default(),
        conditions: Vec::new(),
    }
}

/// The witness duration assumed when a Lease has none: three periods of
/// `serve`'s default `--witness-interval` (10 s), as `serve` writes it.
pub const DEFAULT_WITNESS_SECS: i64 = 30;

fn witness(l: &LeaseFacts, now: Timestamp) -> WitnessView {
    let r = &l.record;
    let duration = l
        .duration_secs
        .map(i64::from)
        .filter(|d| *d > 0)
        .unwrap_or(DEFAULT_WITNESS_SECS);
    let stale = match l.renewed {
        Some(t) => now.as_second() - t.as_second() > duration,
        None => true,
    };
    WitnessView {
        lease: r.name.clone(),
        member_id: r.member_id.map(|id| id.to_string()),
        cluster_id: r.cluster_id.map(|id| id.to_string()),
        raft_term: r.raft_term,
        raft_index: r.raft_index,
        holder: r.holder.clone(),
        renewed_at: l.renewed,
        age_seconds: age(now, l.renewed),
        stale,
        revision: r.revision,
        token_sha256: r.incarnation.token_sha256.clone(),
        cluster_uid: r.incarnation.cluster_uid.clone(),
        other_incarnation: false,
        problems: r.problems.clone(),
    }
}

/// Whether a witness was written under another incarnation than the
/// cluster's record: an `EtcdCluster` UID or a token hash both sides know, and
/// that differ. Unknown on either side is no evidence of another incarnation.
fn other_incarnation(w: &WitnessView, record: Option<&ClusterRecordFacts>) -> bool {
    let differ =
        |a: &Option<String>, b: Option<&String>| matches!((a, b), (Some(a), Some(b)) if a != b);
    record.is_some_and(|r| {
        differ(&w.cluster_uid, r.uid.as_ref()) || differ(&w.token_sha256, r.token_sha256.as_ref())
    })
}

/// When a witness went stale (its renewal plus its duration).
fn stale_since(l: &LeaseFacts) -> Option<Timestamp> {
    let duration = l
        .duration_secs
        .map(i64::from)
        .filter(|d| *d > 0)
        .unwrap_or(DEFAULT_WITNESS_SECS);
    l.renewed
        .and_then(|t| Timestamp::from_second(t.as_second() + duration).ok())
}

/// The last verdict of `pod`'s guards: the first guard (in Pod order) whose
/// latest ending is non-zero — it is what keeps etcd from starting —, else the
/// last guard that ended; with no ending at all, the newest refusal Event of
/// this Pod. A verdict the message does not name is taken from the Events.
fn verdict(pod: &PodFacts, events: &[&EventFacts], now: Timestamp) -> Option<VerdictView> {
    let refusal_events = || {
        events
            .iter()
            .filter(|e| !e.is_hazard())
            .copied()
            .collect::<Vec<_>>()
    };
    let blocking = pod
        .guards
        .iter()
        .find(|g| g.last.as_ref().is_some_and(|t| t.exit_code != 0));
    let chosen = blocking.or_else(|| pod.guards.iter().rev().find(|g| g.last.is_some()));
    if let Some(g) = chosen {
        let t = g.last.as_ref()?;
        let refused = t.exit_code != 0;
        let msg = t.message.as_ref();
        let named = msg.and_then(|m| m.verdict.clone());
        let refusals = refusal_events();
        let event = refusals
            .iter()
            .filter(|e| named.is_none() || named.as_deref() == Some(e.reason.as_str()))
            .max_by_key(|e| e.last);
        let (verdict_name, source) = match (&named, refused, event) {
            (Some(_), _, _) => (named.clone(), "termination-message"),
            (None, true, Some(e)) => (Some(e.reason.clone()), "event"),
            (None, _, _) if msg.is_some() => (None, "termination-message"),
            (None, _, _) => (None, "exit-code"),
        };
        let reason = msg
            .map(|m| m.reason.clone())
            .or_else(|| {
                (source == "event")
                    .then(|| event.map(|e| e.message.clone()))
                    .flatten()
            })
            .or_else(|| t.tail.clone());
        // The refusal's first Event for this Pod (written once per verdict
        // and Pod, at the first refusal) says when it began; without one, the
        // Pod's init containers have not completed since then, which is an
        // upper bound.
        let refused_since = refused
            .then(|| {
                refusals
                    .iter()
                    .filter(|e| verdict_name.as_deref() == Some(e.reason.as_str()))
                    .filter_map(|e| e.first)
                    .min()
                    .or(pod.uninitialized_since.flatten())
                    .or(t.started)
                    .or(t.finished)
            })
            .flatten();
        return Some(VerdictView {
            container: g.container.clone(),
            verdict: verdict_name,
            exit_code: Some(t.exit_code),
            refused,
            row: msg.and_then(|m| m.row.clone()),
            reason,
            remedy: msg.map(|m| m.remedy.clone()).filter(|r| !r.is_empty()),
            member_id: msg.and_then(|m| m.member_id.clone()),
            cluster_id: msg.and_then(|m| m.cluster_id.clone()),
            at: t.finished,
            age_seconds: age(now, t.finished),
            refused_since,
            restarts: g.restarts,
            state: g.state.describe(),
            source,
        });
    }
    // No ending in the status (the kubelet has not reported it, or the message
    // is gone): the refusal's Event, which the agent writes once per Pod.
    let e = refusal_events().into_iter().max_by_key(|e| e.last)?;
    let g = pod.guards.first();
    Some(VerdictView {
        container: g
            .map(|g| g.container.clone())
            .unwrap_or_else(|| GUARD_COMMANDS[0].to_owned()),
        verdict: Some(e.reason.clone()),
        exit_code: None,
        refused: true,
        row: None,
        reason: Some(e.message.clone()),
        remedy: None,
        member_id: None,
        cluster_id: None,
        at: e.last,
        age_seconds: age(now, e.last),
        refused_since: e.first.or(e.last),
        restarts: g.map(|g| g.restarts).unwrap_or(0),
        state: g
            .map(|g| g.state.describe())
            .unwrap_or_else(|| "unknown".to_owned()),
        source: "event",
    })
}

mod conditions;
use conditions::cluster;
pub use conditions::{ClusterFacts, Rule, RECORD_CLAIM, RULES};

#[cfg(test)]
mod tests;
