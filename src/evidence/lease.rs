//! The witness outside the volume (docs/decision-table.md,
//! docs/commands.md § serve): a `coordination.k8s.io/v1`
//! Lease per member, in the Pod's namespace, named [`lease_name`] of the member
//! (`etcd-witness-<member>`). `serve` writes it as soon as the local member
//! answers and renews it while it runs; `preflight` and `restore` read it.
//!
//! Why a Lease. The data dir is the member's only memory, and the operator's
//! record is latched late (`status.memberID` once the member was Ready) or not
//! at all while the operator is down: between the seed forming the cluster and
//! the latch, a wiped seed looked like one that never started (the window PR
//! 355 leaves open). The Lease is written by the member's own sidecar, outside
//! the volume, the moment etcd answers: its existence says "this member started
//! before", and its annotations say under which identity and how far its raft
//! log got (a high-water mark that never decreases while the IDs stay the same,
//! so a restart of `serve` or a new Pod keeps it).
//!
//! The Lease's `spec` is used as Kubernetes tools expect: `holderIdentity` is
//! the Pod's name, `renewTime` the last renewal, `leaseDurationSeconds` three
//! renewal periods (a Lease not renewed within it is a stale witness: its
//! sidecar is gone). The facts are annotations ([`MEMBER_ID`], [`CLUSTER_ID`],
//! [`RAFT_TERM`], [`RAFT_INDEX`], [`REVISION`], [`POD_UID`], and the
//! incarnation: [`TOKEN_SHA256`], [`CLUSTER_UID`]), IDs as 16-digit hex,
//! [`FORMAT`] `2` when the position is one proven durable (`evidence::mark`).
//! A Lease without [`FORMAT`] was written by an earlier sidecar: its index is
//! the in-memory commit and it names no incarnation.
//!
//! Nothing here decides: a Lease that cannot be parsed is reported with what
//! is wrong with it ([`WitnessRecord::problems`]); what its existence means is
//! `verdict`'s business.

use ::kube::api::{Api, ObjectMeta, PostParams};
use ::kube::Client;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use serde::Serialize;
use tokio::time::Instant;

use super::client::{call, call_verb, ApiError, ApiKind};
use super::mark::{Incarnation, Mark, Position, FORMAT as MARK_FORMAT};
use crate::disk::ids::{ClusterId, HexIdError, MemberId};

/// The annotations' common prefix.
pub const PREFIX: &str = "etcd-member-agent.cozystack.io/";
/// The member ID (16-digit hex) the witness is about.
pub const MEMBER_ID: &str = "etcd-member-agent.cozystack.io/member-id";
/// Its cluster ID (16-digit hex).
pub const CLUSTER_ID: &str = "etcd-member-agent.cozystack.io/cluster-id";
/// The raft term at [`RAFT_INDEX`].
pub const RAFT_TERM: &str = "etcd-member-agent.cozystack.io/raft-term";
/// The highest raft index the member was seen at under these IDs.
pub const RAFT_INDEX: &str = "etcd-member-agent.cozystack.io/raft-index";
/// The UID of the Pod whose sidecar last wrote the Lease.
pub const POD_UID: &str = "etcd-member-agent.cozystack.io/pod-uid";
/// The MVCC revision at [`RAFT_INDEX`].
pub const REVISION: &str = "etcd-member-agent.cozystack.io/revision";
/// SHA-256 of the token etcd formed the cluster with (`evidence::mark::Incarnation`).
pub const TOKEN_SHA256: &str = "etcd-member-agent.cozystack.io/token-sha256";
/// `metadata.uid` of the operator's `EtcdCluster`.
pub const CLUSTER_UID: &str = "etcd-member-agent.cozystack.io/cluster-uid";
/// The format of the facts (`evidence::mark::FORMAT`); absent before it.
pub const FORMAT: &str = "etcd-member-agent.cozystack.io/format";
/// The verdict whose re-base started the recorded position
/// (`evidence::mark::WitnessTerms::rebase_by`): a re-base is applied once.
pub const REBASED_BY: &str = "etcd-member-agent.cozystack.io/rebased-by";

/// The Lease of member `member`: `etcd-witness-<member>`. One Lease per member
/// name. The operator's member names (`<cluster>-<random>`) are never reused,
/// but a StatefulSet's are (`etcd-0` in every incarnation), and a Lease
/// outlives the cluster that wrote it: the incarnation annotations tell whose
/// it is.
pub fn lease_name(member: &str) -> String {
    format!("etcd-witness-{member}")
}

/// The kind read and written here, as errors name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub struct LeaseKind;

impl std::fmt::Display for LeaseKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Lease")
    }
}

impl ApiKind for LeaseKind {
    fn rbac_resource(self) -> String {
        "leases.coordination.k8s.io".to_owned()
    }

    fn not_served(self) -> String {
        "leases.coordination.k8s.io/v1".to_owned()
    }

    fn rbac_needed(self) -> &'static str {
        "a Role with get and update on leases (narrowed with resourceNames to the witness Leases) and create on leases"
    }
}

/// What one witness Lease says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct WitnessRecord {
    /// The Lease's name.
    pub name: String,
    /// `spec.holderIdentity`: the Pod that last wrote it.
    pub holder: Option<String>,
    /// The member ID annotation.
    pub member_id: Option<MemberId>,
    /// The cluster ID annotation.
    pub cluster_id: Option<ClusterId>,
    /// The raft term annotation.
    pub raft_term: Option<u64>,
    /// The raft index annotation (the high-water mark).
    pub raft_index: Option<u64>,
    /// The revision annotation.
    pub revision: Option<i64>,
    /// The incarnation annotations.
    pub incarnation: Incarnation,
    /// The format annotation (`None`: written by an earlier sidecar).
    pub format: Option<u32>,
    /// The Pod UID annotation.
    pub pod_uid: Option<String>,
    /// The verdict whose re-base started the recorded position, if one did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rebased_by: Option<String>,
    /// `spec.renewTime`, RFC 3339.
    pub renew_time: Option<String>,
    /// Annotations that are missing or cannot be parsed (the Lease still exists).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub problems: Vec<String>,
}

impl WitnessRecord {
    /// The mark, when the Lease records IDs and a position that can be read.
    pub fn mark(&self) -> Option<Mark> {
        Some(Mark {
            member_id: self.member_id?,
            cluster_id: self.cluster_id?,
            position: Position {
                raft_index: self.raft_index?,
                raft_term: self.raft_term.unwrap_or_default(),
                revision: self.revision,
            },
            incarnation: self.incarnation.clone(),
            durable: self.format.is_some_and(|f| f >= MARK_FORMAT),
        })
    }
}

/// What `serve` saw and writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Observed {
    /// The local member's ID.
    pub member_id: MemberId,
    /// Its cluster's ID.
    pub cluster_id: ClusterId,
    /// The newest position proven on its disk (`evidence::mark::DurableTracker`);
    /// `None` until one is: the Lease is written anyway (its existence is the
    /// evidence that the member started), with index 0.
    pub position: Option<Position>,
    /// The incarnation this Pod start's verdict names (unknown without one).
    pub incarnation: Incarnation,
    /// The verdict of this Pod start that found the Lease's position belongs
    /// to another history (a restore bumped above it): the position recorded
    /// before it is replaced, not raised, once; renewals after that (the
    /// Lease then records this verdict in [`REBASED_BY`]) raise it as usual.
    pub rebase: Option<String>,
    /// This Pod's name (the holder).
    pub pod_name: String,
    /// This Pod's UID, when known.
    pub pod_uid: Option<String>,
}

/// What [`write`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Written {
    /// The Lease did not exist and was created.
    Created(WitnessRecord),
    /// The Lease was renewed (its mark raised where the member got further).
    Renewed(WitnessRecord),
    /// The Lease records other IDs and `overwrite` was not allowed: left as
    /// it is (neither renewed nor changed), so the evidence is kept.
    Contradicts(WitnessRecord),
}

/// Reads the witness of `member`: `Ok(None)` when there is none (404).
#[tracing::instrument(level = "debug", skip(client, deadline))]
pub async fn read(
    client: &Client,
    namespace: &str,
    member: &str,
    deadline: Instant,
) -> Result<Option<WitnessRecord>, ApiError<LeaseKind>> {
    Ok(get(client, namespace, member, deadline)
        .await?
        .map(|lease| parse(&lease)))
}

async fn get(
    client: &Client,
    namespace: &str,
    member: &str,
    deadline: Instant,
) -> Result<Option<Lease>, ApiError<LeaseKind>> {
    let name = lease_name(member);
    let api: Api<Lease> = Api::namespaced(client.clone(), namespace);
    match call(LeaseKind, namespace, &name, deadline, || api.get(&name)).await {
        Ok(lease) => Ok(Some(lease)),
        Err(ApiError::NotFound { .. }) => Ok(None),
        Err(e) => Err(e),
    }
}

/// The facts of a Lease; what cannot be read is named in `problems`.
pub fn parse(lease: &Lease) -> WitnessRecord {
    let annotations = lease.metadata.annotations.clone().unwrap_or_default();
    let mut problems = Vec::new();
    let mut text = |key: &str| match annotations.get(key).map(|v| v.trim()) {
        Some(v) if !v.is_empty() => Some(v.to_owned()),
        _ => {
            problems.push(format!("annotation {key} is missing"));
            None
        }
    };
    let member = text(MEMBER_ID);
    let cluster = text(CLUSTER_ID);
    let term = text(RAFT_TERM);
    let index = text(RAFT_INDEX);
    let pod_uid = annotations
        .get(POD_UID)
        .filter(|v| !v.trim().is_empty())
        .cloned();
    fn id<T>(
        problems: &mut Vec<String>,
        key: &str,
        v: Option<String>,
        parse: fn(&str) -> Result<Option<T>, HexIdError>,
    ) -> Option<T> {
        let v = v?;
        match parse(&v) {
            Ok(id) => id,
            Err(e) => {
                problems.push(format!("annotation {key}: {e}"));
                None
            }
        }
    }
    let member_id = id(&mut problems, MEMBER_ID, member, MemberId::parse_recorded);
    let cluster_id = id(
        &mut problems,
        CLUSTER_ID,
        cluster,
        ClusterId::parse_recorded,
    );
    let mut number = |key: &str, v: Option<String>| {
        let v = v?;
        match v.parse::<u64>() {
            Ok(n) => Some(n),
            Err(e) => {
                problems.push(format!("annotation {key}: {v:?} is not a number: {e}"));
                None
            }
        }
    };
    let raft_term = number(RAFT_TERM, term);
    let raft_index = number(RAFT_INDEX, index);
    let optional = |key: &str| {
        annotations
            .get(key)
            .map(|v| v.trim())
            .filter(|v| !v.is_empty())
    };
    let mut revision = None;
    if let Some(v) = optional(REVISION) {
        match v.parse::<i64>() {
            Ok(n) => revision = Some(n),
            Err(e) => problems.push(format!("annotation {REVISION}: {v:?} is not a number: {e}")),
        }
    }
    let mut format = None;
    if let Some(v) = optional(FORMAT) {
        match v.parse::<u32>() {
            Ok(n) => format = Some(n),
            Err(e) => problems.push(format!("annotation {FORMAT}: {v:?} is not a number: {e}")),
        }
    }
    let incarnation = Incarnation {
        token_sha256: optional(TOKEN_SHA256).map(str::to_ascii_lowercase),
        cluster_uid: optional(CLUSTER_UID).map(str::to_owned),
    };
    let spec = lease.spec.as_ref();
    WitnessRecord {
        name: lease.metadata.name.clone().unwrap_or_default(),
        holder: spec.and_then(|s| s.holder_identity.clone()),
        member_id,
        cluster_id,
        raft_term,
        raft_index,
        revision,
        incarnation,
        format,
        pod_uid,
        rebased_by: optional(REBASED_BY).map(str::to_owned),
        renew_time: spec
            .and_then(|s| s.renew_time.as_ref())
            .map(|t| t.0.to_string()),
        problems,
    }
}

/// Creates or renews the witness of `member` with what `serve` observed, by
/// `deadline`. The recorded position only rises while it is a mark of the same
/// history: the same IDs, the same incarnation (as far as both know it), a
/// mark in [`MARK_FORMAT`] and no `rebase`; otherwise it is replaced by the
/// observed one (an earlier sidecar's in-memory index is not kept as if it
/// were proven). A Lease recording other IDs is replaced only when
/// `overwrite` (the member is consistent with its expected identity, which
/// changed); otherwise it is left untouched. `duration_secs` is written as
/// `leaseDurationSeconds`.
#[tracing::instrument(level = "debug", skip(client, seen, deadline))]
pub async fn write(
    client: &Client,
    namespace: &str,
    member: &str,
    seen: &Observed,
    overwrite: bool,
    duration_secs: i32,
    deadline: Instant,
) -> Result<Written, ApiError<LeaseKind>> {
    let name = lease_name(member);
    let api: Api<Lease> = Api::namespaced(client.clone(), namespace);
    let pp = PostParams::default();
    let now = MicroTime(k8s_openapi::jiff::Timestamp::now());
    let Some(mut lease) = get(client, namespace, member, deadline).await? else {
        let lease = Lease {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                namespace: Some(namespace.to_owned()),
                labels: Some(
                    [
                        ("app.kubernetes.io/name", "etcd-member-agent"),
                        ("app.kubernetes.io/component", "witness"),
                    ]
                    .into_iter()
                    .map(|(k, v)| (k.to_owned(), v.to_owned()))
                    .collect(),
                ),
                annotations: Some(annotations(seen, seen.position.unwrap_or_default())),
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some(seen.pod_name.clone()),
                lease_duration_seconds: Some(duration_secs),
                acquire_time: Some(now.clone()),
                renew_time: Some(now),
                lease_transitions: Some(0),
                ..LeaseSpec::default()
            }),
        };
        let created = call_verb("create", LeaseKind, namespace, &name, deadline, || {
            api.create(&pp, &lease)
        })
        .await?;
        return Ok(Written::Created(parse(&created)));
    };
    let before = parse(&lease);
    let same_ids =
        before.member_id == Some(seen.member_id) && before.cluster_id == Some(seen.cluster_id);
    if !same_ids && !overwrite {
        return Ok(Written::Contradicts(before));
    }
    let position = next_position(&before, seen);
    let mut kept = lease.metadata.annotations.take().unwrap_or_default();
    kept.retain(|k, _| !k.starts_with(PREFIX));
    kept.extend(annotations(seen, position));
    lease.metadata.annotations = Some(kept);
    let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
    if spec.holder_identity.as_deref() != Some(seen.pod_name.as_str()) {
        spec.holder_identity = Some(seen.pod_name.clone());
        spec.acquire_time = Some(now.clone());
        spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0).saturating_add(1));
    }
    spec.lease_duration_seconds = Some(duration_secs);
    spec.renew_time = Some(now);
    // `replace` carries the resourceVersion just read: a concurrent writer
    // makes this a 409, retried at the next renewal, never a lost mark.
    let renewed = call_verb("update", LeaseKind, namespace, &name, deadline, || {
        api.replace(&name, &pp, &lease)
    })
    .await?;
    Ok(Written::Renewed(parse(&renewed)))
}

/// The position a renewal records: the higher of the Lease's and the observed
/// one while both are marks of the same history, else the observed one (or
/// 0 while nothing is proven yet). A re-base of this Pod start's verdict
/// replaces the Lease's position once: the Lease then records the verdict,
/// and later renewals raise the position as usual.
fn next_position(before: &WitnessRecord, seen: &Observed) -> Position {
    let observed = seen.position.unwrap_or_default();
    let rebase_due = seen
        .rebase
        .as_ref()
        .is_some_and(|by| before.rebased_by.as_ref() != Some(by));
    let same_history = !rebase_due
        && before.member_id == Some(seen.member_id)
        && before.cluster_id == Some(seen.cluster_id)
        && before.format.is_some_and(|f| f >= MARK_FORMAT)
        && before.incarnation.differs_from(&seen.incarnation).is_none();
    match before.mark().filter(|_| same_history) {
        Some(m) if m.position.raft_index > observed.raft_index => m.position,
        _ => observed,
    }
}

fn annotations(seen: &Observed, p: Position) -> std::collections::BTreeMap<String, String> {
    let mut a = std::collections::BTreeMap::new();
    a.insert(FORMAT.to_owned(), MARK_FORMAT.to_string());
    a.insert(MEMBER_ID.to_owned(), seen.member_id.to_string());
    a.insert(CLUSTER_ID.to_owned(), seen.cluster_id.to_string());
    a.insert(RAFT_TERM.to_owned(), p.raft_term.to_string());
    a.insert(RAFT_INDEX.to_owned(), p.raft_index.to_string());
    if let Some(r) = p.revision {
        a.insert(REVISION.to_owned(), r.to_string());
    }
    if let Some(t) = &seen.incarnation.token_sha256 {
        a.insert(TOKEN_SHA256.to_owned(), t.clone());
    }
    if let Some(u) = &seen.incarnation.cluster_uid {
        a.insert(CLUSTER_UID.to_owned(), u.clone());
    }
    if let Some(uid) = &seen.pod_uid {
        a.insert(POD_UID.to_owned(), uid.clone());
    }
    if let Some(by) = &seen.rebase {
        a.insert(REBASED_BY.to_owned(), by.clone());
    }
    a
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(annotations: &[(&str, &str)]) -> Lease {
        Lease {
            metadata: ObjectMeta {
                name: Some(lease_name("etcd-x7k2p")),
                annotations: Some(
                    annotations
                        .iter()
                        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                        .collect(),
                ),
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some("etcd-x7k2p".into()),
                ..LeaseSpec::default()
            }),
        }
    }

    #[test]
    fn a_written_lease_parses_back() {
        let position = Position {
            raft_index: 41,
            raft_term: 2,
            revision: Some(30),
        };
        let seen = Observed {
            member_id: MemberId::new(0xae36f238164a08ad),
            cluster_id: ClusterId::new(0x769f1c9e0d723d0b),
            position: Some(position),
            incarnation: Incarnation::new(Some("tok"), Some("uid-1")),
            rebase: Some("1700000000/5c1d/-".into()),
            pod_name: "etcd-x7k2p".into(),
            pod_uid: Some("5c1d".into()),
        };
        let a = annotations(&seen, position);
        let pairs: Vec<(&str, &str)> = a.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let rec = parse(&lease(&pairs));
        assert_eq!(rec.name, "etcd-witness-etcd-x7k2p");
        assert_eq!(rec.member_id, Some(MemberId::new(0xae36f238164a08ad)));
        assert_eq!(rec.cluster_id, Some(ClusterId::new(0x769f1c9e0d723d0b)));
        assert_eq!((rec.raft_term, rec.raft_index), (Some(2), Some(41)));
        assert_eq!(rec.revision, Some(30));
        assert_eq!(rec.incarnation, seen.incarnation);
        let mark = rec.mark().unwrap();
        assert!(mark.durable);
        assert_eq!(mark.position, position);
        assert_eq!(rec.pod_uid.as_deref(), Some("5c1d"));
        assert_eq!(rec.rebased_by.as_deref(), Some("1700000000/5c1d/-"));
        assert_eq!(rec.holder.as_deref(), Some("etcd-x7k2p"));
        assert!(rec.problems.is_empty(), "{:?}", rec.problems);
        let v = serde_json::to_value(&rec).unwrap();
        assert_eq!(v["member_id"], "ae36f238164a08ad");
    }

    #[test]
    fn the_position_rises_only_within_one_history() {
        let p = |i| Position {
            raft_index: i,
            raft_term: 3,
            revision: Some(i as i64),
        };
        let inc = Incarnation::new(Some("tok"), None);
        let seen = |i, rebase: bool| Observed {
            member_id: MemberId::new(1),
            cluster_id: ClusterId::new(2),
            position: Some(p(i)),
            incarnation: inc.clone(),
            rebase: rebase.then(|| "verdict-1".to_owned()),
            pod_name: "m".into(),
            pod_uid: None,
        };
        let mut before = parse(&lease(&[]));
        before.member_id = Some(MemberId::new(1));
        before.cluster_id = Some(ClusterId::new(2));
        before.raft_index = Some(50);
        before.raft_term = Some(3);
        before.revision = Some(50);
        before.format = Some(MARK_FORMAT);
        before.incarnation = inc.clone();
        assert_eq!(next_position(&before, &seen(20, false)), p(50));
        assert_eq!(next_position(&before, &seen(60, false)), p(60));
        // A restore bumped above the mark: this start's verdict re-bases it,
        // once: the renewals after it (the Lease records the verdict) raise
        // the position from there, and a member seen lower later does not
        // lower it.
        assert_eq!(next_position(&before, &seen(20, true)), p(20));
        let mut rebased = before.clone();
        rebased.rebased_by = Some("verdict-1".into());
        (rebased.raft_index, rebased.revision) = (Some(20), Some(20));
        assert_eq!(next_position(&rebased, &seen(30, true)), p(30));
        (rebased.raft_index, rebased.revision) = (Some(30), Some(30));
        assert_eq!(next_position(&rebased, &seen(7, true)), p(30));
        // Another verdict's re-base (a later Pod start) applies again.
        rebased.rebased_by = Some("verdict-0".into());
        assert_eq!(next_position(&rebased, &seen(7, true)), p(7));
        // An earlier sidecar's index (no format) is not kept as if proven.
        let mut legacy = before.clone();
        legacy.format = None;
        assert_eq!(next_position(&legacy, &seen(20, false)), p(20));
        // Another incarnation's mark is not this history's.
        let mut other = before.clone();
        other.incarnation = Incarnation::new(Some("old-token"), None);
        assert_eq!(next_position(&other, &seen(20, false)), p(20));
    }

    #[test]
    fn a_garbled_lease_names_what_is_wrong_and_still_exists() {
        let rec = parse(&lease(&[(MEMBER_ID, "not-hex"), (RAFT_INDEX, "-3")]));
        assert_eq!(rec.member_id, None);
        assert_eq!(rec.raft_index, None);
        let all = rec.problems.join("; ");
        for key in [MEMBER_ID, CLUSTER_ID, RAFT_TERM, RAFT_INDEX] {
            assert!(all.contains(key), "{all}");
        }
    }
}
