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

// ---------------------------------------------------------------------------
// One cluster and its conditions.

/// What the rules read about one cluster, computed once.
pub struct ClusterFacts<'a> {
    /// The members' rows.
    pub members: &'a [MemberView],
    /// The gathered facts, in the same order as `members`.
    witnesses: Vec<Option<&'a LeaseFacts>>,
    /// Since when each member has been not Ready (`None`: unknown or Ready).
    not_ready_since: Vec<Option<Timestamp>>,
    /// The record, if any.
    record: Option<&'a ClusterRecordFacts>,
    /// The witness Leases of its namespace were read.
    leases_read: bool,
    /// The claims on the cluster ID.
    claims: &'a [IdClaim],
    /// Voters, healthy voters, quorum.
    voters: usize,
    healthy: usize,
    quorum: usize,
    now: Timestamp,
    settings: &'a Settings,
}

/// A rule: the condition it finds in a cluster, if any.
pub type Rule = fn(&ClusterFacts<'_>) -> Option<Condition>;

/// The rules, in the order their conditions are reported (module docs).
pub const RULES: [(ConditionKind, Rule); 9] = [
    (ConditionKind::QuorumLost, quorum_lost),
    (ConditionKind::QuorumAtRisk, quorum_at_risk),
    (ConditionKind::ClusterIdMismatch, cluster_id_mismatch),
    (ConditionKind::MembersRefused, members_refused),
    (ConditionKind::MembersNotReady, members_not_ready),
    (ConditionKind::WitnessStale, witness_stale),
    (ConditionKind::WitnessMissing, witness_missing),
    (ConditionKind::RaftLag, raft_lag),
    (ConditionKind::Hazards, hazards),
];

fn condition(
    f: &ClusterFacts<'_>,
    kind: ConditionKind,
    members: Vec<String>,
    since: Option<Timestamp>,
    detail: String,
) -> Condition {
    Condition {
        kind,
        severity: kind.health(),
        members,
        since,
        for_seconds: age(f.now, since),
        detail,
    }
}

fn unhealthy_voters(f: &ClusterFacts<'_>) -> (Vec<String>, Option<Timestamp>) {
    let mut names = Vec::new();
    let mut since = Vec::new();
    for (i, m) in f.members.iter().enumerate() {
        if m.voter && m.status != MemberStatus::Ready {
            names.push(m.member.clone());
            since.push(
                m.verdict
                    .as_ref()
                    .and_then(|v| v.refused_since)
                    .or(f.not_ready_since[i]),
            );
        }
    }
    (names, earliest(since))
}

fn quorum_text(f: &ClusterFacts<'_>) -> String {
    format!(
        "{} of {} voters healthy, quorum {}",
        f.healthy, f.voters, f.quorum
    )
}

fn quorum_lost(f: &ClusterFacts<'_>) -> Option<Condition> {
    let wanted = f.record.and_then(|r| r.replicas).unwrap_or(0);
    if f.voters == 0 {
        // A cluster the operator wants running with no member known at all.
        return (wanted > 0).then(|| {
            condition(
                f,
                ConditionKind::QuorumLost,
                Vec::new(),
                f.record.and_then(|r| r.created),
                format!("the EtcdCluster wants {wanted} replicas; no member is known"),
            )
        });
    }
    if f.healthy >= f.quorum {
        return None;
    }
    let (names, since) = unhealthy_voters(f);
    Some(condition(
        f,
        ConditionKind::QuorumLost,
        names,
        since,
        quorum_text(f),
    ))
}

fn quorum_at_risk(f: &ClusterFacts<'_>) -> Option<Condition> {
    if f.voters == 0 || f.healthy < f.quorum || f.healthy >= f.voters || f.healthy > f.quorum {
        return None;
    }
    let (names, since) = unhealthy_voters(f);
    Some(condition(
        f,
        ConditionKind::QuorumAtRisk,
        names,
        since,
        format!("{}: one more loss loses it", quorum_text(f)),
    ))
}

fn cluster_id_mismatch(f: &ClusterFacts<'_>) -> Option<Condition> {
    if f.claims.len() < 2 {
        return None;
    }
    // The members in the minority (or all of them, on a tie) are named.
    let most = f
        .claims
        .iter()
        .map(|c| c.claimed_by.len())
        .max()
        .unwrap_or(0);
    let majority_is_one = f
        .claims
        .iter()
        .filter(|c| c.claimed_by.len() == most)
        .count()
        == 1;
    let members: Vec<String> = f
        .claims
        .iter()
        .filter(|c| !majority_is_one || c.claimed_by.len() < most)
        .flat_map(|c| c.claimed_by.iter().cloned())
        .filter(|m| m != RECORD_CLAIM)
        .collect();
    let detail = f
        .claims
        .iter()
        .map(|c| format!("{} ({})", c.cluster_id, c.claimed_by.join(", ")))
        .collect::<Vec<_>>()
        .join(" vs ");
    Some(condition(
        f,
        ConditionKind::ClusterIdMismatch,
        members,
        None,
        detail,
    ))
}

fn members_refused(f: &ClusterFacts<'_>) -> Option<Condition> {
    let refused: Vec<&MemberView> = f
        .members
        .iter()
        .filter(|m| m.status == MemberStatus::Refused)
        .collect();
    if refused.is_empty() {
        return None;
    }
    let detail = refused
        .iter()
        .map(|m| {
            let v = m.verdict.as_ref();
            let name = v.and_then(|v| v.verdict.as_deref()).unwrap_or("refused");
            match v.and_then(|v| v.exit_code) {
                Some(code) => format!("{}: {name} (exit {code})", m.member),
                None => format!("{}: {name}", m.member),
            }
        })
        .collect::<Vec<_>>()
        .join("; ");
    Some(condition(
        f,
        ConditionKind::MembersRefused,
        refused.iter().map(|m| m.member.clone()).collect(),
        earliest(
            refused
                .iter()
                .map(|m| m.verdict.as_ref().and_then(|v| v.refused_since)),
        ),
        detail,
    ))
}

fn members_not_ready(f: &ClusterFacts<'_>) -> Option<Condition> {
    let limit = f.settings.not_ready_after_secs;
    let mut names = Vec::new();
    let mut details = Vec::new();
    let mut since = Vec::new();
    for (i, m) in f.members.iter().enumerate() {
        let waiting = matches!(
            m.status,
            MemberStatus::NotReady | MemberStatus::NoPod | MemberStatus::Deciding
        );
        let from = f.not_ready_since[i];
        // Unknown since when: it counts (nothing says it just started).
        if !waiting || age(f.now, from).is_some_and(|a| a <= limit) {
            continue;
        }
        names.push(m.member.clone());
        details.push(format!("{} ({})", m.member, m.readiness.detail));
        since.push(from);
    }
    if names.is_empty() {
        return None;
    }
    Some(condition(
        f,
        ConditionKind::MembersNotReady,
        names,
        earliest(since),
        details.join(", "),
    ))
}

fn witness_stale(f: &ClusterFacts<'_>) -> Option<Condition> {
    let mut names = Vec::new();
    let mut details = Vec::new();
    let mut since = Vec::new();
    for (m, l) in f.members.iter().zip(&f.witnesses) {
        let (Some(w), Some(l)) = (&m.witness, l) else {
            continue;
        };
        if m.status != MemberStatus::Ready || !w.stale || w.other_incarnation {
            continue;
        }
        names.push(m.member.clone());
        details.push(match w.renewed_at {
            Some(t) => format!("{} (renewed {t})", w.lease),
            None => format!("{} (never renewed)", w.lease),
        });
        since.push(stale_since(l));
    }
    (!names.is_empty()).then(|| {
        condition(
            f,
            ConditionKind::WitnessStale,
            names,
            earliest(since),
            details.join(", "),
        )
    })
}

fn witness_missing(f: &ClusterFacts<'_>) -> Option<Condition> {
    if !f.leases_read {
        return None;
    }
    let mut names = Vec::new();
    let mut details = Vec::new();
    for m in f.members {
        if m.status != MemberStatus::Ready || !m.guarded {
            continue;
        }
        let lease = crate::evidence::lease::lease_name(&m.member);
        match &m.witness {
            None => details.push(format!("no Lease {lease}")),
            Some(w) if w.other_incarnation => {
                details.push(format!("{lease} is another incarnation's"))
            }
            Some(_) => continue,
        }
        names.push(m.member.clone());
    }
    (!names.is_empty()).then(|| {
        condition(
            f,
            ConditionKind::WitnessMissing,
            names,
            None,
            details.join(", "),
        )
    })
}

fn raft_lag(f: &ClusterFacts<'_>) -> Option<Condition> {
    let fresh: Vec<(&MemberView, u64)> = f
        .members
        .iter()
        .filter(|m| m.status == MemberStatus::Ready)
        .filter_map(|m| {
            let w = m
                .witness
                .as_ref()
                .filter(|w| !w.stale && !w.other_incarnation)?;
            Some((m, w.raft_index?))
        })
        .collect();
    if fresh.len() < 2 {
        return None;
    }
    // The highest, the first by name on a tie.
    let (leader, top) = fresh
        .iter()
        .copied()
        .reduce(|a, b| if b.1 > a.1 { b } else { a })?;
    let lagging: Vec<(&MemberView, u64)> = fresh
        .iter()
        .filter(|(_, i)| top - i > f.settings.lag_threshold)
        .copied()
        .collect();
    if lagging.is_empty() {
        return None;
    }
    let detail = lagging
        .iter()
        .map(|(m, i)| {
            format!(
                "{} at {i}, {} behind {} ({top})",
                m.member,
                top - i,
                leader.member
            )
        })
        .collect::<Vec<_>>()
        .join("; ");
    Some(condition(
        f,
        ConditionKind::RaftLag,
        lagging.iter().map(|(m, _)| m.member.clone()).collect(),
        None,
        detail,
    ))
}

fn hazards(f: &ClusterFacts<'_>) -> Option<Condition> {
    let with: Vec<&MemberView> = f.members.iter().filter(|m| !m.hazards.is_empty()).collect();
    if with.is_empty() {
        return None;
    }
    let detail = with
        .iter()
        .map(|m| {
            let kinds: BTreeSet<&str> = m.hazards.iter().map(|h| h.kind.as_str()).collect();
            format!(
                "{}: {}",
                m.member,
                kinds.into_iter().collect::<Vec<_>>().join(", ")
            )
        })
        .collect::<Vec<_>>()
        .join("; ");
    Some(condition(
        f,
        ConditionKind::Hazards,
        with.iter().map(|m| m.member.clone()).collect(),
        earliest(with.iter().flat_map(|m| m.hazards.iter().map(|h| h.at))),
        detail,
    ))
}

/// The claimant named for the `EtcdCluster`'s own `status.clusterID`.
pub const RECORD_CLAIM: &str = "EtcdCluster";

fn cluster(
    namespace: String,
    name: String,
    gathered: Vec<Gathered<'_>>,
    record: Option<&ClusterRecordFacts>,
    leases_read: bool,
    now: Timestamp,
    settings: &Settings,
) -> ClusterView {
    let mut rows: Vec<(MemberView, Option<&LeaseFacts>, Option<Timestamp>)> = gathered
        .iter()
        .map(|g| {
            let view = member(g, now);
            let not_ready_since = match view.status {
                MemberStatus::NoPod => g.record.and_then(|r| r.created),
                MemberStatus::NotReady | MemberStatus::Deciding => {
                    g.pod.and_then(|p| p.ready_since.or(p.created))
                }
                _ => None,
            };
            (view, g.witness, not_ready_since)
        })
        .collect();
    // The rules see the members by name (their lists and details read in
    // that order); the rows are shown worst first.
    rows.sort_by(|a, b| a.0.member.cmp(&b.0.member));
    for (m, _, _) in &mut rows {
        if let Some(w) = &mut m.witness {
            w.other_incarnation = other_incarnation(w, record);
        }
    }

    let mut claims: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (m, _, _) in &rows {
        let ours = m.witness.as_ref().filter(|w| !w.other_incarnation);
        if let Some(id) = ours.and_then(|w| w.cluster_id.clone()) {
            claims.entry(id).or_default().push(m.member.clone());
        }
    }
    claims.values_mut().for_each(|members| members.sort());
    if let Some(id) = record.and_then(|r| r.cluster_id.clone()) {
        claims.entry(id).or_default().push(RECORD_CLAIM.to_owned());
    }
    let claims: Vec<IdClaim> = claims
        .into_iter()
        .map(|(cluster_id, claimed_by)| IdClaim {
            cluster_id,
            claimed_by,
        })
        .collect();

    let voters = rows.iter().filter(|(m, _, _)| m.voter).count();
    let healthy = rows
        .iter()
        .filter(|(m, _, _)| m.voter && m.status == MemberStatus::Ready)
        .count();
    let quorum = if voters == 0 { 0 } else { voters / 2 + 1 };
    let mut members: Vec<MemberView> = Vec::with_capacity(rows.len());
    let mut witnesses = Vec::with_capacity(rows.len());
    let mut not_ready_since = Vec::with_capacity(rows.len());
    for (m, w, s) in rows {
        members.push(m);
        witnesses.push(w);
        not_ready_since.push(s);
    }
    let conditions: Vec<Condition> = {
        let facts = ClusterFacts {
            members: &members,
            witnesses,
            not_ready_since,
            record,
            leases_read,
            claims: &claims,
            voters,
            healthy,
            quorum,
            now,
            settings,
        };
        RULES.iter().filter_map(|(_, rule)| rule(&facts)).collect()
    };
    for m in &mut members {
        m.conditions = conditions
            .iter()
            .filter(|c| c.members.contains(&m.member))
            .map(|c| c.kind)
            .collect();
    }
    members.sort_by(|a, b| (a.status, &a.member).cmp(&(b.status, &b.member)));
    let health = conditions
        .iter()
        .map(|c| c.severity)
        .min()
        .unwrap_or(Health::Ok);
    ClusterView {
        namespace,
        name,
        health,
        member_count: members.len(),
        voters,
        healthy_voters: healthy,
        quorum,
        cluster_id: (claims.len() == 1).then(|| claims[0].cluster_id.clone()),
        cluster_ids: claims,
        replicas: record.and_then(|r| r.replicas),
        conditions,
        members,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::evidence::lease::WitnessRecord;
    use crate::fleet::facts::{EtcdContainer, GuardRun, Termination};
    use crate::fleet::store::Fact;
    use crate::output::TerminationMessage;

    const NS: &str = "tenant-a";
    const ID: &str = "769f1c9e0d723d0b";

    fn t(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn now() -> Timestamp {
        t("2026-12-03T12:00:00Z")
    }

    /// `secs` seconds before [`now`].
    fn ago(secs: i64) -> Option<Timestamp> {
        Some(Timestamp::from_second(now().as_second() - secs).unwrap())
    }

    fn ready_pod(name: &str, cluster: &str) -> PodFacts {
        PodFacts {
            namespace: NS.into(),
            name: name.into(),
            uid: format!("uid-{name}"),
            node: Some("node-1".into()),
            created: ago(3600),
            terminating: false,
            cluster_label: Some(cluster.into()),
            instance_label: None,
            controller: None,
            guarded: true,
            sidecar: true,
            phase: Some("Running".into()),
            ready_condition: Some(true),
            ready_since: ago(3000),
            uninitialized_since: None,
            etcd: Some(EtcdContainer {
                name: "etcd".into(),
                ready: true,
                state: RunState::Running { since: ago(3000) },
                restarts: 0,
            }),
            guards: vec![GuardRun {
                container: "preflight".into(),
                command: "preflight".into(),
                state: RunState::Terminated {
                    exit_code: 0,
                    reason: Some("Completed".into()),
                },
                last: Some(Termination {
                    exit_code: 0,
                    started: ago(3100),
                    finished: ago(3050),
                    message: Some(TerminationMessage {
                        verdict: Some("start".into()),
                        exit_code: 0,
                        row: Some("5".into()),
                        member_id: Some("ae36f238164a08ad".into()),
                        cluster_id: Some(ID.into()),
                        reason: "every source agrees".into(),
                        remedy: String::new(),
                    }),
                    tail: None,
                }),
                restarts: 0,
            }],
            stuck: Vec::new(),
            restarts: BTreeMap::new(),
        }
    }

    fn not_ready(mut p: PodFacts, since_secs: i64) -> PodFacts {
        p.ready_condition = Some(false);
        p.ready_since = ago(since_secs);
        if let Some(e) = &mut p.etcd {
            e.ready = false;
            e.state = RunState::Waiting {
                reason: Some("CrashLoopBackOff".into()),
                message: None,
            };
            e.restarts = 6;
        }
        p.restarts.insert("etcd".into(), 6);
        p
    }

    fn refused(mut p: PodFacts, verdict: Option<&str>, code: i32) -> PodFacts {
        p = not_ready(p, 600);
        p.restarts.clear();
        p.etcd.as_mut().unwrap().state = RunState::Waiting {
            reason: Some("PodInitializing".into()),
            message: None,
        };
        p.etcd.as_mut().unwrap().restarts = 0;
        p.uninitialized_since = Some(ago(900));
        p.guards[0] = GuardRun {
            container: "preflight".into(),
            command: "preflight".into(),
            state: RunState::Waiting {
                reason: Some("CrashLoopBackOff".into()),
                message: None,
            },
            last: Some(Termination {
                exit_code: code,
                started: ago(61),
                finished: ago(60),
                message: verdict.map(|v| TerminationMessage {
                    verdict: Some(v.into()),
                    exit_code: u8::try_from(code).unwrap(),
                    row: Some("7".into()),
                    member_id: None,
                    cluster_id: None,
                    reason: "the data directory is empty but this member started before".into(),
                    remedy: "replace the member".into(),
                }),
                tail: verdict.is_none().then(|| "the log's last line".to_owned()),
            }),
            restarts: 7,
        };
        p.restarts.insert("preflight".into(), 7);
        p
    }

    fn lease(member: &str, cluster_id: &str, index: u64, renewed_secs_ago: i64) -> LeaseFacts {
        LeaseFacts {
            namespace: NS.into(),
            member: member.into(),
            record: WitnessRecord {
                name: format!("etcd-witness-{member}"),
                holder: Some(member.into()),
                member_id: Some(crate::disk::ids::MemberId::new(0xae36f238164a08ad)),
                cluster_id: Some(crate::disk::ids::ClusterId::new(
                    u64::from_str_radix(cluster_id, 16).unwrap(),
                )),
                raft_term: Some(3),
                raft_index: Some(index),
                revision: Some(i64::try_from(index).unwrap() * 2),
                incarnation: crate::disk::ids::Incarnation {
                    token_sha256: None,
                    cluster_uid: Some("uid-of-etcd".into()),
                },
                format: Some(1),
                pod_uid: Some(format!("uid-{member}")),
                rebased_by: None,
                renew_time: None,
                problems: Vec::new(),
            },
            renewed: ago(renewed_secs_ago),
            duration_secs: Some(30),
        }
    }

    fn event(pod: &str, reason: &str, message: &str, first_secs_ago: i64) -> EventFacts {
        EventFacts {
            namespace: NS.into(),
            pod: pod.into(),
            pod_uid: format!("uid-{pod}"),
            reason: reason.into(),
            message: message.into(),
            container: None,
            first: ago(first_secs_ago),
            last: ago(first_secs_ago / 2),
            count: 1,
        }
    }

    fn record(name: &str, cluster: &str, voter: Option<bool>) -> MemberRecordFacts {
        MemberRecordFacts {
            namespace: NS.into(),
            name: name.into(),
            created: ago(7200),
            cluster: cluster.into(),
            is_voter: voter,
            dormant: false,
            member_id: None,
            problem: None,
        }
    }

    /// A store holding `pods`, each with a fresh witness at index 1000 of [`ID`].
    fn store(pods: Vec<PodFacts>) -> Store {
        let mut s = Store::expecting(&[Scope::All]);
        for r in Resource::ALL {
            s.replace(r, &Scope::All, Vec::new());
        }
        for p in pods {
            s.upsert(Fact::Lease(lease(&p.name, ID, 1000, 5)));
            s.upsert(Fact::Pod(p));
        }
        s
    }

    fn three(cluster: &str) -> Vec<PodFacts> {
        (1..=3)
            .map(|i| ready_pod(&format!("{cluster}-m{i}"), cluster))
            .collect()
    }

    fn view(s: &Store) -> FleetView {
        build(s, now(), &Settings::default())
    }

    fn kinds(c: &ClusterView) -> Vec<ConditionKind> {
        c.conditions.iter().map(|c| c.kind).collect()
    }

    fn only(v: &FleetView) -> &ClusterView {
        assert_eq!(v.clusters.len(), 1, "{:#?}", v.clusters);
        &v.clusters[0]
    }

    #[test]
    fn a_healthy_cluster_has_no_condition_and_exits_0() {
        let v = view(&store(three("etcd")));
        let c = only(&v);
        assert_eq!(kinds(c), []);
        assert_eq!(c.health, Health::Ok);
        assert_eq!((c.voters, c.healthy_voters, c.quorum), (3, 3, 2));
        assert_eq!(c.cluster_id.as_deref(), Some(ID));
        assert!(c.members.iter().all(|m| m.status == MemberStatus::Ready));
        assert_eq!(
            (v.needs_attention, v.complete, v.exit_code),
            (false, true, 0)
        );
        assert_eq!(v.summary.text, "1 cluster, 3 members: all clear");
        let m = &c.members[0];
        let verdict = m.verdict.as_ref().unwrap();
        assert_eq!(verdict.verdict.as_deref(), Some("start"));
        assert_eq!(verdict.row.as_deref(), Some("5"));
        assert_eq!(verdict.age_seconds, Some(3050));
        assert!(!verdict.refused);
        assert_eq!(m.readiness.detail, "ready");
    }

    #[test]
    fn one_refused_member_of_three_is_refused_and_puts_the_quorum_at_risk() {
        let mut pods = three("etcd");
        pods[1] = refused(pods[1].clone(), Some("refuse-empty-formed"), 10);
        let mut s = store(pods);
        let e = event("etcd-m2", "refuse-empty-formed", "empty but started", 1200);
        s.upsert(Fact::Event(
            crate::fleet::facts::EventSource::Agent,
            "e1".into(),
            e,
        ));
        let v = view(&s);
        let c = only(&v);
        assert_eq!(
            kinds(c),
            [ConditionKind::QuorumAtRisk, ConditionKind::MembersRefused]
        );
        assert_eq!(c.health, Health::Critical);
        assert_eq!((c.voters, c.healthy_voters, c.quorum), (3, 2, 2));
        let refused = &c.conditions[1];
        assert_eq!(refused.members, ["etcd-m2"]);
        assert_eq!(refused.detail, "etcd-m2: refuse-empty-formed (exit 10)");
        // Refused since the refusal's first Event, not the last attempt.
        assert_eq!(refused.for_seconds, Some(1200));
        let m = &c.members[0];
        assert_eq!(m.member, "etcd-m2", "the worst member first");
        assert_eq!(m.status, MemberStatus::Refused);
        assert_eq!(
            m.conditions,
            [ConditionKind::QuorumAtRisk, ConditionKind::MembersRefused]
        );
        let verdict = m.verdict.as_ref().unwrap();
        assert_eq!(verdict.source, "termination-message");
        assert_eq!((verdict.exit_code, verdict.restarts), (Some(10), 7));
        assert_eq!(verdict.state, "waiting (CrashLoopBackOff)");
        assert_eq!(
            m.readiness.detail,
            "preflight refused (refuse-empty-formed)"
        );
        // A refused member is not "not ready" on top of it.
        assert!(!kinds(c).contains(&ConditionKind::MembersNotReady));
        assert_eq!(v.exit_code, 50);
        assert_eq!(
            v.summary.text,
            "1 cluster, 3 members: 1 refused, 1 quorum at risk"
        );
    }

    #[test]
    fn a_verdict_the_message_does_not_name_comes_from_the_event() {
        let mut pods = three("etcd");
        pods[0] = refused(pods[0].clone(), None, 14);
        let mut s = store(pods);
        s.upsert(Fact::Event(
            crate::fleet::facts::EventSource::Agent,
            "e1".into(),
            event("etcd-m1", "phase-unknown", "no source answered", 400),
        ));
        let v = view(&s);
        let m = &only(&v).members[0];
        let verdict = m.verdict.as_ref().unwrap();
        assert_eq!(verdict.verdict.as_deref(), Some("phase-unknown"));
        assert_eq!(verdict.source, "event");
        assert_eq!(verdict.reason.as_deref(), Some("no source answered"));
        // Without the Event: the exit code, and the log's last line.
        let mut pods = three("etcd");
        pods[0] = refused(pods[0].clone(), None, 14);
        let v = view(&store(pods));
        let verdict = only(&v).members[0].verdict.clone().unwrap();
        assert_eq!((verdict.verdict, verdict.source), (None, "exit-code"));
        assert_eq!(verdict.reason.as_deref(), Some("the log's last line"));
        assert!(verdict.refused, "any non-zero code is a refusal");
    }

    #[test]
    fn with_no_ending_in_the_status_the_refusal_event_is_the_verdict() {
        let mut pods = three("etcd");
        let mut p = refused(pods[2].clone(), Some("x"), 10);
        p.guards[0].last = None;
        p.guards[0].state = RunState::Running { since: ago(2) };
        pods[2] = p;
        let mut s = store(pods);
        s.upsert(Fact::Event(
            crate::fleet::facts::EventSource::Agent,
            "e1".into(),
            event("etcd-m3", "refuse-foreign", "another cluster's data", 300),
        ));
        // An Event about an earlier Pod of the same name is not this Pod's.
        let mut old = event("etcd-m3", "refuse-corrupt", "old", 9000);
        old.pod_uid = "uid-earlier".into();
        s.upsert(Fact::Event(
            crate::fleet::facts::EventSource::Agent,
            "e0".into(),
            old,
        ));
        let v = view(&s);
        let m = only(&v)
            .members
            .iter()
            .find(|m| m.member == "etcd-m3")
            .unwrap();
        let verdict = m.verdict.as_ref().unwrap();
        assert_eq!(verdict.verdict.as_deref(), Some("refuse-foreign"));
        assert_eq!((verdict.source, verdict.exit_code), ("event", None));
        assert_eq!(m.status, MemberStatus::Refused);
    }

    #[test]
    fn two_members_down_lose_the_quorum_and_are_not_ready_after_the_grace() {
        let mut pods = three("etcd");
        pods[0] = not_ready(pods[0].clone(), 600);
        pods[1] = not_ready(pods[1].clone(), 60);
        let v = view(&store(pods));
        let c = only(&v);
        assert_eq!(
            kinds(c),
            [ConditionKind::QuorumLost, ConditionKind::MembersNotReady]
        );
        assert_eq!(c.conditions[0].detail, "1 of 3 voters healthy, quorum 2");
        assert_eq!(c.conditions[0].members, ["etcd-m1", "etcd-m2"]);
        // Only the one down longer than --not-ready-after (2m).
        assert_eq!(c.conditions[1].members, ["etcd-m1"]);
        assert_eq!(
            c.conditions[1].detail,
            "etcd-m1 (etcd waiting (CrashLoopBackOff))"
        );
        assert_eq!(c.conditions[1].for_seconds, Some(600));
    }

    #[test]
    fn a_cluster_of_one_is_not_at_risk_and_five_with_one_down_is_not_either() {
        let v = view(&store(vec![ready_pod("solo-m1", "solo")]));
        assert_eq!(kinds(only(&v)), []);
        let mut pods: Vec<PodFacts> = (1..=5)
            .map(|i| ready_pod(&format!("big-m{i}"), "big"))
            .collect();
        pods[0] = not_ready(pods[0].clone(), 30);
        let v = view(&store(pods.clone()));
        assert_eq!(kinds(only(&v)), [], "4 of 5, quorum 3");
        pods[1] = not_ready(pods[1].clone(), 30);
        let v = view(&store(pods));
        assert_eq!(kinds(only(&v)), [ConditionKind::QuorumAtRisk], "3 of 5");
    }

    #[test]
    fn witnesses_that_disagree_on_the_cluster_id_are_named() {
        let mut s = store(three("etcd"));
        s.upsert(Fact::Lease(lease("etcd-m3", "1111111111111111", 1000, 5)));
        s.upsert(Fact::Cluster(ClusterRecordFacts {
            namespace: NS.into(),
            name: "etcd".into(),
            created: ago(9000),
            cluster_id: Some(ID.into()),
            replicas: Some(3),
            uid: Some("uid-of-etcd".into()),
            token_sha256: None,
            problem: None,
        }));
        let v = view(&s);
        let c = only(&v);
        assert_eq!(kinds(c), [ConditionKind::ClusterIdMismatch]);
        assert_eq!(c.conditions[0].members, ["etcd-m3"]);
        assert_eq!(
            c.conditions[0].detail,
            format!("1111111111111111 (etcd-m3) vs {ID} (etcd-m1, etcd-m2, EtcdCluster)")
        );
        assert_eq!(c.cluster_id, None);
        assert_eq!(c.cluster_ids.len(), 2);
        assert_eq!(c.replicas, Some(3));
    }

    #[test]
    fn another_incarnations_witness_neither_agrees_nor_disagrees() {
        let record = ClusterRecordFacts {
            namespace: NS.into(),
            name: "etcd".into(),
            created: ago(9000),
            cluster_id: Some(ID.into()),
            replicas: Some(3),
            uid: Some("uid-of-etcd".into()),
            token_sha256: Some(crate::disk::ids::token_sha256("t")),
            problem: None,
        };
        let mut s = store(three("etcd"));
        s.upsert(Fact::Cluster(record));
        // m3's Lease is a leftover of an earlier EtcdCluster of the name, with
        // another cluster ID and far behind: no mismatch, no lag; the member
        // has no witness of this incarnation.
        let mut old = lease("etcd-m3", "1111111111111111", 10, 5);
        old.record.incarnation.cluster_uid = Some("uid-of-an-earlier-etcd".into());
        s.upsert(Fact::Lease(old));
        let v = view(&s);
        let c = only(&v);
        assert_eq!(kinds(c), [ConditionKind::WitnessMissing]);
        assert_eq!(
            c.conditions[0].detail,
            "etcd-witness-etcd-m3 is another incarnation's"
        );
        assert_eq!(c.cluster_id.as_deref(), Some(ID));
        let m3 = c.members.iter().find(|m| m.member == "etcd-m3").unwrap();
        assert!(m3.witness.as_ref().unwrap().other_incarnation);
        // A token hash that differs tells it too; an unknown one does not.
        let mut other_token = lease("etcd-m3", "1111111111111111", 10, 5);
        other_token.record.incarnation = crate::disk::ids::Incarnation {
            token_sha256: Some(crate::disk::ids::token_sha256("another token")),
            cluster_uid: None,
        };
        s.upsert(Fact::Lease(other_token));
        assert_eq!(kinds(only(&view(&s))), [ConditionKind::WitnessMissing]);
        let mut unknown = lease("etcd-m3", "1111111111111111", 1000, 5);
        unknown.record.incarnation = crate::disk::ids::Incarnation::default();
        s.upsert(Fact::Lease(unknown));
        assert_eq!(
            kinds(only(&view(&s))),
            [ConditionKind::ClusterIdMismatch],
            "an unknown incarnation is taken as this one"
        );
    }

    #[test]
    fn a_ready_members_stale_witness_is_stale_and_a_down_members_is_not_reported() {
        let mut pods = three("etcd");
        pods[2] = not_ready(pods[2].clone(), 30);
        let mut s = store(pods);
        s.upsert(Fact::Lease(lease("etcd-m1", ID, 1000, 400)));
        s.upsert(Fact::Lease(lease("etcd-m3", ID, 1000, 400)));
        let v = view(&s);
        let c = only(&v);
        assert_eq!(
            kinds(c),
            [ConditionKind::QuorumAtRisk, ConditionKind::WitnessStale]
        );
        assert_eq!(c.conditions[1].members, ["etcd-m1"]);
        // Stale since its renewal plus its 30 s duration.
        assert_eq!(c.conditions[1].for_seconds, Some(370));
        let m1 = c.members.iter().find(|m| m.member == "etcd-m1").unwrap();
        assert!(m1.witness.as_ref().unwrap().stale);
    }

    #[test]
    fn a_ready_guarded_member_without_a_witness_is_reported() {
        let mut s = store(three("etcd"));
        s.remove(Resource::Leases, &(NS.into(), "etcd-m2".into()));
        let v = view(&s);
        let c = only(&v);
        assert_eq!(kinds(c), [ConditionKind::WitnessMissing]);
        assert_eq!(c.conditions[0].detail, "no Lease etcd-witness-etcd-m2");
    }

    #[test]
    fn a_member_far_behind_the_others_lags_and_a_near_one_does_not() {
        let mut s = store(three("etcd"));
        s.upsert(Fact::Lease(lease("etcd-m1", ID, 50_000, 5)));
        s.upsert(Fact::Lease(lease("etcd-m2", ID, 45_000, 5)));
        s.upsert(Fact::Lease(lease("etcd-m3", ID, 30_000, 5)));
        let v = view(&s);
        let c = only(&v);
        assert_eq!(kinds(c), [ConditionKind::RaftLag]);
        assert_eq!(c.conditions[0].members, ["etcd-m3"]);
        assert_eq!(
            c.conditions[0].detail,
            "etcd-m3 at 30000, 20000 behind etcd-m1 (50000)"
        );
    }

    #[test]
    fn hazards_come_from_the_status_and_from_pod_checks_events() {
        let mut pods = three("etcd");
        pods[0].stuck = vec![crate::evidence::pod::Hazard::StuckContainer {
            container: "agent".into(),
            container_type: crate::evidence::pod::ContainerType::Init,
            reason: "CreateContainerConfigError".into(),
            detail: "configmap \"etcd-cluster-state\" not found".into(),
            restart_count: 0,
            message: "init container agent: stuck".into(),
        }];
        let mut s = store(pods);
        s.upsert(Fact::Event(
            crate::fleet::facts::EventSource::Agent,
            "h1".into(),
            event(
                "etcd-m2",
                "missing-reference",
                "container etcd: envFrom[0] → ConfigMap \"x\" not found",
                100,
            ),
        ));
        // An old stuck-container Event: the status is the truth for those.
        s.upsert(Fact::Event(
            crate::fleet::facts::EventSource::Agent,
            "h2".into(),
            event("etcd-m3", "stuck-container", "container etcd: stuck", 100),
        ));
        let v = view(&s);
        let c = only(&v);
        assert_eq!(kinds(c), [ConditionKind::Hazards]);
        assert_eq!(c.conditions[0].members, ["etcd-m1", "etcd-m2"]);
        assert_eq!(
            c.conditions[0].detail,
            "etcd-m1: stuck-container; etcd-m2: missing-reference"
        );
        let m2 = c.members.iter().find(|m| m.member == "etcd-m2").unwrap();
        assert_eq!(m2.hazards[0].source, "event");
        let m1 = c.members.iter().find(|m| m.member == "etcd-m1").unwrap();
        assert_eq!(m1.hazards[0].source, "pod-status");
        // A refusal Event is no hazard.
        assert!(c.members.iter().all(|m| m.status == MemberStatus::Ready));
    }

    #[test]
    fn records_bring_members_without_pods_learners_and_dormant_members() {
        let mut s = store(three("etcd"));
        s.upsert(Fact::Member(record("etcd-m1", "etcd", Some(true))));
        s.upsert(Fact::Member(record("etcd-m4", "etcd", Some(false))));
        let mut gone = record("etcd-m5", "etcd", Some(true));
        gone.created = ago(60);
        s.upsert(Fact::Member(gone));
        let mut parked = record("etcd-m6", "etcd", Some(true));
        parked.dormant = true;
        s.upsert(Fact::Member(parked));
        // A cluster with records only (every Pod gone).
        s.upsert(Fact::Member(record("other-m1", "other", Some(true))));
        s.upsert(Fact::Cluster(ClusterRecordFacts {
            namespace: NS.into(),
            name: "empty".into(),
            created: ago(500),
            cluster_id: None,
            replicas: Some(3),
            uid: None,
            token_sha256: None,
            problem: None,
        }));
        let v = view(&s);
        let names: Vec<&str> = v.clusters.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["other", "empty", "etcd"], "worst first");
        let etcd = &v.clusters[2];
        // m4 (learner, no Pod) and m5 (no Pod) and m6 (dormant): voters m1-m3, m5.
        assert_eq!((etcd.voters, etcd.healthy_voters, etcd.quorum), (4, 3, 3));
        assert_eq!(
            kinds(etcd),
            [ConditionKind::QuorumAtRisk, ConditionKind::MembersNotReady]
        );
        // m5 went missing a minute ago: not yet not-ready; m4 two hours ago.
        assert_eq!(etcd.conditions[1].members, ["etcd-m4"]);
        let m4 = etcd.members.iter().find(|m| m.member == "etcd-m4").unwrap();
        assert_eq!(
            (m4.status, m4.voter, m4.pod.clone()),
            (MemberStatus::NoPod, false, None)
        );
        let m6 = etcd.members.iter().find(|m| m.member == "etcd-m6").unwrap();
        assert_eq!((m6.status, m6.voter), (MemberStatus::Dormant, false));
        assert_eq!(
            kinds(&v.clusters[0]),
            [ConditionKind::QuorumLost, ConditionKind::MembersNotReady]
        );
        assert_eq!(kinds(&v.clusters[1]), [ConditionKind::QuorumLost]);
        assert_eq!(
            v.clusters[1].conditions[0].detail,
            "the EtcdCluster wants 3 replicas; no member is known"
        );
        // With -l, records add no cluster of their own.
        // Without the Pods, no member is "without a Pod".
        let mut blind = s.clone();
        blind.pods.clear();
        blind.mark(
            Resource::Pods,
            &Scope::All,
            ReadState::Failed {
                error: "forbidden",
                message: String::new(),
            },
        );
        let v = view(&blind);
        assert_eq!(v.clusters.len(), 0, "{:#?}", v.clusters);
        assert_eq!(v.exit_code, 51);
        let narrowed = build(
            &s,
            now(),
            &Settings {
                records_define_clusters: false,
                ..Settings::default()
            },
        );
        let names: Vec<&str> = narrowed.clusters.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["etcd"]);
    }

    #[test]
    fn a_read_that_failed_makes_the_view_incomplete_and_the_exit_51_or_50() {
        let mut s = store(three("etcd"));
        s.mark(
            Resource::Leases,
            &Scope::All,
            ReadState::Failed {
                error: "forbidden",
                message: "forbidden: …".into(),
            },
        );
        s.mark(
            Resource::EtcdMembers,
            &Scope::All,
            ReadState::NotServed("the server could not find the requested resource".into()),
        );
        // Ready members whose Leases could not be read are not "without a witness".
        s.remove(Resource::Leases, &(NS.into(), "etcd-m1".into()));
        let v = view(&s);
        assert!(!v.complete);
        assert_eq!(v.exit_code, 51);
        assert_eq!(kinds(only(&v)), []);
        assert_eq!(v.unread.len(), 1, "a CRD not served is no gap");
        assert_eq!(v.unread[0].resource, Resource::Leases);
        assert_eq!(v.not_served, [Resource::EtcdMembers]);
        assert!(
            v.summary
                .text
                .ends_with("1 read failed (the view is incomplete)"),
            "{}",
            v.summary.text
        );
        let mut pods = three("etcd");
        pods[0] = refused(pods[0].clone(), Some("refuse-corrupt"), 12);
        let mut s2 = store(pods);
        s2.reads = s.reads.clone();
        assert_eq!(
            view(&s2).exit_code,
            50,
            "something needs a person all the same"
        );
    }

    #[test]
    fn the_rules_are_listed_in_the_documented_order() {
        let order: Vec<ConditionKind> = RULES.iter().map(|(k, _)| *k).collect();
        assert_eq!(order, ConditionKind::ALL);
        // The module docs' table lists them in that order.
        let doc = include_str!("view.rs");
        let mut at = 0;
        for k in ConditionKind::ALL {
            let row = format!("//! | `{}` |", k.name());
            let found = doc[at..]
                .find(&row)
                .unwrap_or_else(|| panic!("{row} out of order"));
            at += found + row.len();
        }
        let mut sorted = ConditionKind::ALL;
        sorted.sort_by_key(|k| k.health());
        assert_eq!(sorted, ConditionKind::ALL, "critical ones first");
    }
}
