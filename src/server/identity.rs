//! The member's identity as the sidecar reports it, and the one judgement the
//! sidecar makes: is the member that answers the member that was expected?
//!
//! Plain Rust types (serializable, IDs as 16-digit hex) that the rest of the crate
//! and the JSON logs use; [`Identity`] converts into the protobuf `Identity` only at
//! the gRPC boundary. The judgement ([`assess`]) and the choice of expectation
//! ([`expect`]) are pure functions, tested here row by row, because readiness and
//! every report hang on them.

use std::time::SystemTime;

use serde::Serialize;

use super::proto;
use crate::disk::ids::{ClusterId, MemberId};

/// What the sidecar publishes: one observation of the member with what was
/// expected of it. A new [`Identity::sequence`] marks every change of
/// [`Identity::facts`].
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Identity {
    /// Increases by one on every change of `facts`; 0 until the first poll.
    pub sequence: u64,
    /// When the local member was last polled.
    #[serde(serialize_with = "rfc3339")]
    pub observed_at: SystemTime,
    /// Everything else; a change here is a change of the identity.
    #[serde(flatten)]
    pub facts: Facts,
}

/// The content of an [`Identity`], without the bookkeeping of when it was seen.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Facts {
    /// When this agent process started.
    #[serde(serialize_with = "rfc3339")]
    pub agent_started_at: SystemTime,
    /// The agent's version.
    pub agent_version: String,
    /// The endpoint polled: the local member's client URL.
    pub endpoint: String,
    /// The local member answered the last poll.
    pub member_answered: bool,
    /// Why it did not; `None` when it answered.
    pub member_error: Option<String>,
    /// What the member last said (kept while it does not answer).
    pub member: Option<LocalMember>,
    /// The newest raft position of the member proven on its disk
    /// (`evidence::mark::DurableTracker`): what the witnesses record.
    pub durable: Option<crate::evidence::mark::Position>,
    /// What the witnesses record besides the position, and what this start is
    /// held to: this Pod start's verdict's terms, or (without one) the
    /// incarnation `serve`'s own flags give.
    pub witness: crate::evidence::mark::WitnessTerms,
    /// This Pod start's preflight verdict, when a verdict file was found.
    pub preflight: Option<PreflightVerdict>,
    /// The WAL read when the agent started.
    pub wal_at_boot: Option<WalIdentity>,
    /// What the member is expected to be.
    pub expected: ExpectedIdentity,
    /// [`assess`] found nothing wrong.
    pub consistent: bool,
    /// One sentence per failed condition.
    pub reasons: Vec<String>,
    /// Hazards from the periodic pod-check.
    pub hazards: Vec<Hazard>,
    /// Why the last pod-check could not run.
    pub hazards_error: Option<String>,
}

/// What the local member says about itself: `Status` plus its own entry of a
/// serializable `MemberList`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LocalMember {
    /// `--name`.
    pub name: String,
    /// Member ID, from the response header.
    pub member_id: MemberId,
    /// Cluster ID, from the response header.
    pub cluster_id: ClusterId,
    /// Peer URLs.
    pub peer_urls: Vec<String>,
    /// Client URLs.
    pub client_urls: Vec<String>,
    /// A raft learner.
    pub is_learner: bool,
    /// The leader it knows of; `None` without one.
    pub leader_id: Option<MemberId>,
    /// Raft term.
    pub raft_term: u64,
    /// Raft commit index.
    pub raft_index: u64,
    /// Applied index.
    pub raft_applied_index: u64,
    /// The MVCC revision (`Status` header).
    pub revision: i64,
    /// Backend size in bytes.
    pub db_size: i64,
    /// Backend bytes in use.
    pub db_size_in_use: i64,
    /// etcd's version.
    pub etcd_version: String,
    /// Active alarms.
    pub alarms: Vec<String>,
}

/// The verdict file `preflight` wrote for this Pod start, read leniently.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PreflightVerdict {
    /// Verdict name.
    pub verdict: String,
    /// Exit code.
    pub exit_code: i32,
    /// Reason.
    pub reason: String,
    /// Remedy; empty when none.
    pub remedy: String,
    /// When preflight decided, seconds since the epoch.
    pub decided_at_unix: Option<i64>,
    /// The directory's member ID as preflight read it.
    pub member_id: Option<MemberId>,
    /// The directory's cluster ID as preflight read it.
    pub cluster_id: Option<ClusterId>,
    /// Where the verdict was read from.
    pub path: String,
    /// What the verdict tells the sidecar about witnesses.
    pub witness: crate::evidence::mark::WitnessTerms,
}

/// The identity in the WAL when the agent started.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct WalIdentity {
    /// `empty`, `initialized`, `partial`, `corrupt` or `unreadable`.
    pub state: String,
    /// Member ID from the WAL metadata.
    pub member_id: Option<MemberId>,
    /// Cluster ID from the WAL metadata.
    pub cluster_id: Option<ClusterId>,
    /// HardState commit.
    pub commit_index: u64,
    /// HardState term.
    pub term: u64,
    /// Last entry index.
    pub last_index: u64,
    /// Why the directory could not be read fully.
    pub problem: Option<String>,
}

/// Where an expected ID came from, strongest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Source {
    /// No source knows it: not checked.
    None,
    /// The operator's `EtcdMember`/`EtcdCluster` status.
    Operator,
    /// This Pod start's preflight verdict.
    PreflightVerdict,
    /// The WAL read when the agent started.
    WalAtBoot,
}

impl Source {
    /// How a sentence names the source.
    pub fn describe(self) -> &'static str {
        match self {
            Source::None => "no source",
            Source::Operator => "the operator's record",
            Source::PreflightVerdict => "this Pod start's preflight verdict",
            Source::WalAtBoot => "the WAL read when the agent started",
        }
    }
}

/// The identity the member should have.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ExpectedIdentity {
    /// Expected member ID.
    pub member_id: Option<MemberId>,
    /// Where it came from.
    pub member_id_source: Source,
    /// Expected cluster ID.
    pub cluster_id: Option<ClusterId>,
    /// Where it came from.
    pub cluster_id_source: Source,
    /// The operator's records are consulted.
    pub operator_enabled: bool,
    /// Why they could not be read on the last attempt.
    pub operator_error: Option<String>,
}

/// The IDs the operator recorded (each `None` until the operator latched it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct OperatorIds {
    /// `EtcdMember.status.memberID`.
    pub member_id: Option<MemberId>,
    /// `EtcdCluster.status.clusterID`.
    pub cluster_id: Option<ClusterId>,
}

/// A latent hazard of the Pod.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Hazard {
    /// Kind of hazard.
    pub kind: String,
    /// What it concerns.
    pub subject: String,
    /// One sentence.
    pub message: String,
}

/// Picks each expected ID from the strongest source that has it: the operator's
/// record, then this Pod start's preflight verdict, then the WAL read at boot.
/// A source without a value (the operator has not latched the ID yet, the
/// directory was empty) defers to the next; no value anywhere means "not checked",
/// which is right for a member that has never started. A verdict that refused
/// the start says nothing about who the member should be (its directory was the
/// problem), so only an allowing verdict (exit code 0) contributes IDs.
pub fn expect(
    operator: Option<OperatorIds>,
    verdict: Option<&PreflightVerdict>,
    wal: Option<&WalIdentity>,
) -> ExpectedIdentity {
    fn pick<Id>(
        from_operator: Option<Id>,
        from_verdict: Option<Id>,
        from_wal: Option<Id>,
    ) -> (Option<Id>, Source) {
        from_operator
            .map(|id| (Some(id), Source::Operator))
            .or_else(|| from_verdict.map(|id| (Some(id), Source::PreflightVerdict)))
            .or_else(|| from_wal.map(|id| (Some(id), Source::WalAtBoot)))
            .unwrap_or((None, Source::None))
    }
    let verdict = verdict.filter(|v| v.exit_code == 0);
    let (member_id, member_id_source) = pick(
        operator.and_then(|o| o.member_id),
        verdict.and_then(|v| v.member_id),
        wal.and_then(|w| w.member_id),
    );
    let (cluster_id, cluster_id_source) = pick(
        operator.and_then(|o| o.cluster_id),
        verdict.and_then(|v| v.cluster_id),
        wal.and_then(|w| w.cluster_id),
    );
    ExpectedIdentity {
        member_id,
        member_id_source,
        cluster_id,
        cluster_id_source,
        operator_enabled: false,
        operator_error: None,
    }
}

/// Everything [`assess`] looks at.
#[derive(Debug, Clone, Copy)]
pub struct Observation<'a> {
    /// The endpoint polled.
    pub endpoint: &'a str,
    /// `Ok` with what the member said, or why it did not answer.
    pub answer: Result<&'a LocalMember, &'a str>,
    /// What it should be.
    pub expected: &'a ExpectedIdentity,
    /// The WAL read at boot.
    pub wal_at_boot: Option<&'a WalIdentity>,
    /// This Pod start's preflight verdict.
    pub preflight: Option<&'a PreflightVerdict>,
    /// Why no verdict of this Pod start is known yet (`None` once one is, or
    /// when nobody looked).
    pub preflight_waiting: Option<&'a str>,
    /// Why the WAL at boot is not known yet, while its read has outlasted its
    /// bound (a volume that does not answer): the member is not ready
    /// meanwhile, since the checks against it cannot be made.
    pub wal_at_boot_pending: Option<&'a str>,
}

/// The reasons the member is not the one expected, or not fit to serve; empty
/// when it is consistent. Checked: this Pod start's preflight did not refuse
/// (said whether or not etcd answers: as a native sidecar `serve` runs while a
/// refusing preflight keeps etcd from starting, and its readiness carries the
/// refusal); no verdict is awaited while the member does not answer; it answers;
/// it knows a leader; its member and
/// cluster IDs equal the expected ones (each only when some source knows it); and
/// its commit index has not fallen below the commit its own WAL recorded when the
/// agent started — a member that re-bootstrapped on a wiped directory keeps its
/// derived IDs (they come from the peer URLs and the token), but not its log.
pub fn assess(o: Observation<'_>) -> Vec<String> {
    let mut reasons = Vec::new();
    if let Some(v) = o.preflight.filter(|v| v.exit_code != 0) {
        let mut reason = format!(
            "preflight refused this Pod start ({}, exit {}): {}",
            v.verdict, v.exit_code, v.reason
        );
        if !v.remedy.is_empty() {
            reason.push_str("; remedy: ");
            reason.push_str(&v.remedy);
        }
        reasons.push(reason);
    }
    if let Some(pending) = o.wal_at_boot_pending {
        reasons.push(pending.to_owned());
    }
    let member = match o.answer {
        Ok(member) => member,
        Err(why) => {
            if o.preflight.is_none() {
                // A member that answers without a verdict ran without preflight
                // (or with an older layout); one that does not answer is, as a
                // native sidecar sees it, still waiting for preflight.
                if let Some(waiting) = o.preflight_waiting {
                    reasons.push(waiting.to_owned());
                }
            }
            reasons.push(format!(
                "the local member at {} does not answer: {why}",
                o.endpoint
            ));
            return reasons;
        }
    };
    if member.leader_id.is_none() {
        reasons.push(format!(
            "member {} knows no leader (no quorum, or an election is under way)",
            member.member_id
        ));
    }
    if let Some(expected) = o.expected.member_id {
        if expected != member.member_id {
            reasons.push(format!(
                "member ID {} differs from the expected {} (from {})",
                member.member_id,
                expected,
                o.expected.member_id_source.describe()
            ));
        }
    }
    if let Some(expected) = o.expected.cluster_id {
        if expected != member.cluster_id {
            reasons.push(format!(
                "cluster ID {} differs from the expected {} (from {}): this member belongs to another cluster, or re-bootstrapped a new one",
                member.cluster_id,
                expected,
                o.expected.cluster_id_source.describe()
            ));
        }
    }
    if let Some(wal) = o.wal_at_boot {
        let same_member = wal.member_id == Some(member.member_id);
        if same_member && member.raft_index != 0 && member.raft_index < wal.commit_index {
            reasons.push(format!(
                "raft index {} is below the commit index {} that this member's WAL recorded when the agent started: committed entries were lost (was the data directory replaced?)",
                member.raft_index, wal.commit_index
            ));
        }
    }
    reasons
}

fn rfc3339<S: serde::Serializer>(t: &SystemTime, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(&prost_types::Timestamp::from(*t))
}

fn hex_or_empty<Id: std::fmt::Display>(id: Option<Id>) -> String {
    id.map(|id| id.to_string()).unwrap_or_default()
}

impl From<Source> for proto::ExpectationSource {
    fn from(s: Source) -> Self {
        match s {
            Source::None => proto::ExpectationSource::Unspecified,
            Source::Operator => proto::ExpectationSource::Operator,
            Source::PreflightVerdict => proto::ExpectationSource::PreflightVerdict,
            Source::WalAtBoot => proto::ExpectationSource::WalAtBoot,
        }
    }
}

impl From<&PreflightVerdict> for proto::PreflightVerdict {
    fn from(v: &PreflightVerdict) -> Self {
        proto::PreflightVerdict {
            verdict: v.verdict.clone(),
            exit_code: v.exit_code,
            reason: v.reason.clone(),
            remedy: v.remedy.clone(),
            decided_at: v
                .decided_at_unix
                .map(|seconds| prost_types::Timestamp { seconds, nanos: 0 }),
            member_id: hex_or_empty(v.member_id),
            cluster_id: hex_or_empty(v.cluster_id),
            path: v.path.clone(),
        }
    }
}

impl From<&WalIdentity> for proto::WalIdentity {
    fn from(w: &WalIdentity) -> Self {
        proto::WalIdentity {
            state: w.state.clone(),
            member_id: hex_or_empty(w.member_id),
            cluster_id: hex_or_empty(w.cluster_id),
            commit_index: w.commit_index,
            term: w.term,
            last_index: w.last_index,
            problem: w.problem.clone().unwrap_or_default(),
        }
    }
}

impl From<&ExpectedIdentity> for proto::ExpectedIdentity {
    fn from(e: &ExpectedIdentity) -> Self {
        proto::ExpectedIdentity {
            member_id: hex_or_empty(e.member_id),
            member_id_source: proto::ExpectationSource::from(e.member_id_source).into(),
            cluster_id: hex_or_empty(e.cluster_id),
            cluster_id_source: proto::ExpectationSource::from(e.cluster_id_source).into(),
            operator_enabled: e.operator_enabled,
            operator_error: e.operator_error.clone().unwrap_or_default(),
        }
    }
}

impl From<&Hazard> for proto::Hazard {
    fn from(h: &Hazard) -> Self {
        proto::Hazard {
            kind: h.kind.clone(),
            subject: h.subject.clone(),
            message: h.message.clone(),
        }
    }
}

impl From<&Identity> for proto::Identity {
    fn from(i: &Identity) -> Self {
        let f = &i.facts;
        let mut out = proto::Identity {
            sequence: i.sequence,
            observed_at: Some(i.observed_at.into()),
            agent_started_at: Some(f.agent_started_at.into()),
            agent_version: f.agent_version.clone(),
            member_answered: f.member_answered,
            member_error: f.member_error.clone().unwrap_or_default(),
            endpoint: f.endpoint.clone(),
            preflight: f.preflight.as_ref().map(Into::into),
            wal_at_boot: f.wal_at_boot.as_ref().map(Into::into),
            expected: Some((&f.expected).into()),
            consistent: f.consistent,
            reasons: f.reasons.clone(),
            hazards: f.hazards.iter().map(Into::into).collect(),
            hazards_error: f.hazards_error.clone().unwrap_or_default(),
            ..Default::default()
        };
        if let Some(m) = &f.member {
            out.name = m.name.clone();
            out.member_id = m.member_id.to_string();
            out.cluster_id = m.cluster_id.to_string();
            out.peer_urls = m.peer_urls.clone();
            out.client_urls = m.client_urls.clone();
            out.is_learner = m.is_learner;
            out.leader_id = hex_or_empty(m.leader_id);
            out.raft_term = m.raft_term;
            out.raft_index = m.raft_index;
            out.raft_applied_index = m.raft_applied_index;
            out.db_size = m.db_size;
            out.db_size_in_use = m.db_size_in_use;
            out.etcd_version = m.etcd_version.clone();
            out.alarms = m.alarms.clone();
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(member_id: u64, cluster_id: u64) -> LocalMember {
        LocalMember {
            name: "m0".into(),
            member_id: MemberId::new(member_id),
            cluster_id: ClusterId::new(cluster_id),
            peer_urls: vec!["http://127.0.0.1:2380".into()],
            client_urls: vec!["http://127.0.0.1:2379".into()],
            is_learner: false,
            leader_id: Some(MemberId::new(member_id)),
            raft_term: 2,
            raft_index: 100,
            raft_applied_index: 100,
            revision: 90,
            db_size: 20480,
            db_size_in_use: 16384,
            etcd_version: "3.5.1".into(),
            alarms: Vec::new(),
        }
    }

    fn verdict(member_id: Option<u64>, cluster_id: Option<u64>) -> PreflightVerdict {
        PreflightVerdict {
            verdict: "start".into(),
            exit_code: 0,
            reason: String::new(),
            remedy: String::new(),
            decided_at_unix: Some(1_700_000_000),
            member_id: member_id.map(MemberId::new),
            cluster_id: cluster_id.map(ClusterId::new),
            path: "/run/etcd-agent/preflight.json".into(),
            witness: Default::default(),
        }
    }

    fn wal(member_id: u64, cluster_id: u64, commit_index: u64) -> WalIdentity {
        WalIdentity {
            state: "initialized".into(),
            member_id: Some(MemberId::new(member_id)),
            cluster_id: Some(ClusterId::new(cluster_id)),
            commit_index,
            term: 2,
            last_index: commit_index,
            problem: None,
        }
    }

    fn assess_with(
        answer: Result<&LocalMember, &str>,
        expected: &ExpectedIdentity,
        wal: Option<&WalIdentity>,
    ) -> Vec<String> {
        assess(Observation {
            endpoint: "http://127.0.0.1:2379",
            answer,
            expected,
            wal_at_boot: wal,
            preflight: None,
            preflight_waiting: None,
            wal_at_boot_pending: None,
        })
    }

    #[test]
    fn the_operator_wins_then_the_verdict_then_the_wal() {
        let op = OperatorIds {
            member_id: Some(MemberId::new(1)),
            cluster_id: Some(ClusterId::new(2)),
        };
        let v = verdict(Some(3), Some(4));
        let w = wal(5, 6, 10);
        let e = expect(Some(op), Some(&v), Some(&w));
        assert_eq!(
            (e.member_id, e.member_id_source),
            (Some(MemberId::new(1)), Source::Operator)
        );
        assert_eq!(
            (e.cluster_id, e.cluster_id_source),
            (Some(ClusterId::new(2)), Source::Operator)
        );

        let e = expect(None, Some(&v), Some(&w));
        assert_eq!(
            (e.member_id, e.member_id_source),
            (Some(MemberId::new(3)), Source::PreflightVerdict)
        );
        let e = expect(None, None, Some(&w));
        assert_eq!(
            (e.cluster_id, e.cluster_id_source),
            (Some(ClusterId::new(6)), Source::WalAtBoot)
        );
        let e = expect(None, None, None);
        assert_eq!((e.member_id, e.member_id_source), (None, Source::None));
    }

    #[test]
    fn an_unlatched_operator_field_defers_to_the_next_source() {
        // A joining member: the operator knows the cluster, not yet the member.
        let op = OperatorIds {
            member_id: None,
            cluster_id: Some(ClusterId::new(2)),
        };
        let v = verdict(None, None);
        let e = expect(Some(op), Some(&v), Some(&wal(7, 2, 1)));
        assert_eq!(
            (e.member_id, e.member_id_source),
            (Some(MemberId::new(7)), Source::WalAtBoot)
        );
        assert_eq!(
            (e.cluster_id, e.cluster_id_source),
            (Some(ClusterId::new(2)), Source::Operator)
        );
    }

    #[test]
    fn a_healthy_expected_member_is_consistent() {
        let m = member(0xa, 0xc);
        let e = expect(None, Some(&verdict(Some(0xa), Some(0xc))), None);
        assert!(assess_with(Ok(&m), &e, Some(&wal(0xa, 0xc, 50))).is_empty());
    }

    #[test]
    fn nothing_expected_only_needs_an_answer_and_a_leader() {
        let m = member(0xa, 0xc);
        assert!(assess_with(Ok(&m), &expect(None, None, None), None).is_empty());
    }

    #[test]
    fn a_silent_member_is_not_consistent() {
        let reasons = assess_with(Err("connection refused"), &expect(None, None, None), None);
        assert_eq!(reasons.len(), 1);
        assert!(reasons[0].contains("does not answer: connection refused"));
    }

    #[test]
    fn a_member_without_leader_is_not_consistent() {
        let mut m = member(0xa, 0xc);
        m.leader_id = None;
        let reasons = assess_with(Ok(&m), &expect(None, None, None), None);
        assert_eq!(reasons.len(), 1);
        assert!(reasons[0].contains("no leader"), "{reasons:?}");
    }

    #[test]
    fn a_foreign_cluster_id_is_named_with_both_ids_and_the_source() {
        let m = member(0xa, 0x1234);
        let e = expect(None, Some(&verdict(Some(0xa), Some(0x5678))), None);
        let reasons = assess_with(Ok(&m), &e, None);
        assert_eq!(reasons.len(), 1);
        assert!(
            reasons[0].contains("cluster ID 0000000000001234 differs from the expected 0000000000005678 (from this Pod start's preflight verdict)"),
            "{reasons:?}"
        );
    }

    #[test]
    fn a_foreign_member_id_is_reported() {
        let m = member(0xb, 0xc);
        let e = expect(
            Some(OperatorIds {
                member_id: Some(MemberId::new(0xa)),
                cluster_id: None,
            }),
            None,
            None,
        );
        let reasons = assess_with(Ok(&m), &e, None);
        assert_eq!(reasons.len(), 1);
        assert!(reasons[0].contains("member ID 000000000000000b differs from the expected 000000000000000a (from the operator's record)"));
    }

    #[test]
    fn a_raft_index_below_the_boot_commit_means_a_lost_log() {
        let mut m = member(0xa, 0xc);
        m.raft_index = 4;
        let w = wal(0xa, 0xc, 900);
        let reasons = assess_with(Ok(&m), &expect(None, None, Some(&w)), Some(&w));
        assert_eq!(reasons.len(), 1);
        assert!(reasons[0].contains("raft index 4 is below the commit index 900"));
        // Another member's WAL, or no index yet, says nothing about this log.
        let other = wal(0xb, 0xc, 900);
        assert!(assess_with(Ok(&m), &expect(None, None, None), Some(&other)).is_empty());
        m.raft_index = 0;
        assert!(assess_with(Ok(&m), &expect(None, None, None), Some(&w)).is_empty());
    }

    #[test]
    fn a_refusing_verdict_sets_no_expectation_and_is_itself_a_reason() {
        let mut v = verdict(Some(0xf), Some(0xe));
        v.verdict = "refuse-foreign".into();
        v.exit_code = 11;
        v.reason = "the data dir belongs to cluster 000000000000000e".into();
        let e = expect(None, Some(&v), None);
        assert_eq!((e.member_id, e.cluster_id), (None, None));
        let m = member(0xf, 0xe);
        let reasons = assess(Observation {
            endpoint: "http://127.0.0.1:2379",
            answer: Ok(&m),
            expected: &e,
            wal_at_boot: None,
            preflight: Some(&v),
            preflight_waiting: None,
            wal_at_boot_pending: None,
        });
        assert_eq!(reasons.len(), 1);
        assert!(
            reasons[0].contains("preflight refused this Pod start (refuse-foreign, exit 11)"),
            "{reasons:?}"
        );
    }

    #[test]
    fn a_refusal_is_a_reason_while_etcd_does_not_run() {
        // The native sidecar's normal case: preflight refused, so etcd never
        // started; the refusal comes first, with its remedy.
        let mut v = verdict(None, None);
        v.verdict = "refuse-empty-formed".into();
        v.exit_code = 10;
        v.reason = "the data dir is empty but this member started before".into();
        v.remedy = "remove and re-add the member".into();
        let e = expect(None, Some(&v), None);
        let reasons = assess(Observation {
            endpoint: "http://127.0.0.1:2379",
            answer: Err("connection refused"),
            expected: &e,
            wal_at_boot: None,
            preflight: Some(&v),
            preflight_waiting: Some("ignored: a verdict is known"),
            wal_at_boot_pending: None,
        });
        assert_eq!(reasons.len(), 2, "{reasons:?}");
        assert_eq!(
            reasons[0],
            "preflight refused this Pod start (refuse-empty-formed, exit 10): the data dir is empty but this member started before; remedy: remove and re-add the member"
        );
        assert!(reasons[1].contains("does not answer"), "{reasons:?}");
    }

    #[test]
    fn no_verdict_yet_is_a_reason_only_while_etcd_does_not_answer() {
        let e = expect(None, None, None);
        let waiting =
            "waiting for preflight's verdict: no file at /run/etcd-agent/preflight.json yet";
        let observe = |answer| {
            assess(Observation {
                endpoint: "http://127.0.0.1:2379",
                answer,
                expected: &e,
                wal_at_boot: None,
                preflight: None,
                preflight_waiting: Some(waiting),
                wal_at_boot_pending: None,
            })
        };
        let reasons = observe(Err("connection refused"));
        assert_eq!(reasons.len(), 2, "{reasons:?}");
        assert_eq!(reasons[0], waiting);
        // etcd runs: preflight (if any) is done; no file means none ran.
        let m = member(0xa, 0xc);
        assert!(observe(Ok(&m)).is_empty());
    }

    #[test]
    fn every_failed_condition_has_its_reason() {
        let mut m = member(0xb, 0xd);
        m.leader_id = None;
        let e = expect(None, Some(&verdict(Some(0xa), Some(0xc))), None);
        assert_eq!(assess_with(Ok(&m), &e, None).len(), 3);
    }

    #[test]
    fn ids_are_hex_in_json_and_proto() {
        let m = member(0x8e9e05c52164694d, 0xcdf818194e3a8c32);
        let facts = Facts {
            agent_started_at: SystemTime::UNIX_EPOCH,
            agent_version: "0.1.0".into(),
            endpoint: "http://127.0.0.1:2379".into(),
            member_answered: true,
            member_error: None,
            member: Some(m),
            durable: None,
            witness: Default::default(),
            preflight: None,
            wal_at_boot: None,
            expected: expect(None, None, None),
            consistent: true,
            reasons: Vec::new(),
            hazards: Vec::new(),
            hazards_error: None,
        };
        let id = Identity {
            sequence: 3,
            observed_at: SystemTime::UNIX_EPOCH,
            facts,
        };
        let json = serde_json::to_value(&id).unwrap_or_default();
        assert_eq!(json["member"]["member_id"], "8e9e05c52164694d");
        assert_eq!(json["member"]["leader_id"], "8e9e05c52164694d");
        assert_eq!(json["observed_at"], "1970-01-01T00:00:00Z");
        let pb = proto::Identity::from(&id);
        assert_eq!(pb.member_id, "8e9e05c52164694d");
        assert_eq!(pb.cluster_id, "cdf818194e3a8c32");
        assert_eq!(pb.sequence, 3);
        assert_eq!(pb.expected.map(|e| e.member_id), Some(String::new()));
    }
}
