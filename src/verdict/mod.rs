//! The decision table of docs/decision-table.md as one pure function from evidence to verdict.
//!
//! No I/O happens here: `cmd::preflight` gathers the evidence (directory, live
//! cluster, operator record, env hints) and this module decides. Keeping it pure
//! lets every row of the table, and every combination of sources that answered or
//! did not, be tested exhaustively without a cluster.
//!
//! The rule that shapes everything: an empty directory is only safe to start on
//! when the sources that could know say this member never started. Silence is not
//! consent — when nobody can answer, the verdict is `phase-unknown` and etcd does
//! not start.
//!
//! Every [`Decision`] names the [`Row`] of `docs/decision-table.md` it came from
//! (a test keeps the two in agreement), so tests and operators match rows, not
//! wording.

use serde::{Deserialize, Serialize};

use crate::disk::ids::{ClusterId, MemberId};
use crate::exit::Exit;
use remedies::*;

mod empty;
mod facts;
mod initialized;
mod position;
mod remedies;
pub mod version;

pub use facts::{
    Answer, DerivedIds, Dir, DirFacts, Inputs, KeyspaceProbe, KvHashCheck, LiveFacts,
    LiveMemberFacts, LivePosition, OperatorFacts, Recorded, SelfFacts, WitnessFacts,
};

/// The verdict names are part of the contract: operators and runbooks match them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Verdict {
    /// Initialized, and its identity matches every known expectation.
    Start,
    /// Empty, and this member is the seed of a cluster that has not formed.
    Bootstrap,
    /// Empty, and this member was added to the live cluster but never started.
    Join,
    /// Empty, but this member started before: starting would lose data.
    RefuseEmptyFormed,
    /// The directory belongs to another member or cluster.
    RefuseForeign,
    /// The directory is corrupt.
    RefuseCorrupt,
    /// The directory is partially initialized.
    RefusePartial,
    /// Empty, and no source could say whether this member started before.
    PhaseUnknown,
    /// etcd is already running on this directory.
    RefuseRunning,
    /// The etcd version about to start would refuse or panic on this directory.
    RefuseVersion,
    /// The directory's log went backwards: it ends behind what this member is
    /// known to have reached, or its backend applied past it.
    RefuseRolledBack,
    /// The directory cannot be read.
    Unreadable,
}

impl Verdict {
    /// The documented exit code of this verdict.
    pub fn exit(self) -> Exit {
        match self {
            Verdict::Start | Verdict::Bootstrap | Verdict::Join => Exit::Ok,
            Verdict::RefuseEmptyFormed => Exit::RefuseEmptyFormed,
            Verdict::RefuseForeign => Exit::RefuseForeign,
            Verdict::RefuseCorrupt => Exit::RefuseCorrupt,
            Verdict::RefusePartial => Exit::RefusePartial,
            Verdict::PhaseUnknown => Exit::PhaseUnknown,
            Verdict::RefuseRunning => Exit::RefuseRunning,
            Verdict::RefuseVersion => Exit::RefuseVersion,
            Verdict::RefuseRolledBack => Exit::RefuseRolledBack,
            Verdict::Unreadable => Exit::Unreadable,
        }
    }

    /// The verdict's name as written in JSON and logs.
    pub fn name(self) -> &'static str {
        match self {
            Verdict::Start => "start",
            Verdict::Bootstrap => "bootstrap",
            Verdict::Join => "join",
            Verdict::RefuseEmptyFormed => "refuse-empty-formed",
            Verdict::RefuseForeign => "refuse-foreign",
            Verdict::RefuseCorrupt => "refuse-corrupt",
            Verdict::RefusePartial => "refuse-partial",
            Verdict::PhaseUnknown => "phase-unknown",
            Verdict::RefuseRunning => "refuse-running",
            Verdict::RefuseVersion => "refuse-version",
            Verdict::RefuseRolledBack => "refuse-rolled-back",
            Verdict::Unreadable => "unreadable",
        }
    }
}

/// The rows of `docs/decision-table.md`. Each decision names the row it came
/// from; the row fixes the verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Row {
    /// 1: the directory cannot be read.
    #[serde(rename = "1")]
    Unreadable,
    /// 1a: the directory is laid out in a way the agent does not read
    /// (a symlink inside the data dir): a configuration matter.
    #[serde(rename = "1a")]
    Layout,
    /// 2: etcd holds the directory's locks.
    #[serde(rename = "2")]
    Running,
    /// 3: the directory fails its checks.
    #[serde(rename = "3")]
    Corrupt,
    /// 4: something etcd wrote, but not a complete member.
    #[serde(rename = "4")]
    Partial,
    /// 5: initialized, and every known expectation agrees.
    #[serde(rename = "5")]
    Start,
    /// 5a: initialized; a recorded member ID is stale (the live list of the
    /// directory's cluster shows this member started under the directory's ID).
    #[serde(rename = "5a")]
    StartStaleRecord,
    /// 5b: initialized with an empty log, and no source says this member
    /// started before (a first start that failed before its first entry).
    #[serde(rename = "5b")]
    StartEmptyLog,
    /// 5c: initialized and its identity checks pass, but the etcd version
    /// about to start would refuse or panic on it (the upgrade check blocks).
    #[serde(rename = "5c")]
    Version,
    /// 5d: initialized, its log behind what this member reached, but the
    /// leader and a majority of its cluster answer with a commit at or past
    /// that: it starts and catches up from them.
    #[serde(rename = "5d")]
    StartCatchingUp,
    /// 5e: initialized by a snapshot restore bumped above every revision the
    /// witnesses saw, with no older history of its cluster still running: a
    /// deliberate rollback that keeps revisions monotonic.
    #[serde(rename = "5e")]
    StartRestoredAbove,
    /// 6: a source disagrees with the directory's member or cluster ID.
    #[serde(rename = "6")]
    Foreign,
    /// 6a: the directory's IDs contradict what this bootstrap member's flags
    /// derive, and no source vouches for them (an earlier incarnation's PVC).
    #[serde(rename = "6a")]
    ForeignIncarnation,
    /// 6b: the member was removed: the directory records its removal, or the
    /// leader's list of the directory's cluster no longer has it while it has
    /// every other member the directory records.
    #[serde(rename = "6b")]
    Removed,
    /// 6c: a cluster with the directory's cluster ID answers, but its list
    /// lacks members the directory records, or its term is behind the
    /// directory's: another history (a re-bootstrapped or restored member)
    /// answers under this cluster ID.
    #[serde(rename = "6c")]
    Fork,
    /// 6d: the WAL records that the directory's cluster was formed with
    /// another `--initial-cluster-token`, and no source vouches for it (an
    /// earlier incarnation's PVC under any member, one re-added too).
    #[serde(rename = "6d")]
    ForeignFormation,
    /// 6e: the log ends behind the position a witness of this member's
    /// incarnation recorded (a volume put back to an older copy of itself),
    /// and no leader and majority of its cluster vouch for that position.
    #[serde(rename = "6e")]
    RolledBack,
    /// 6f: the backend applied past the WAL's last entry (the WAL volume put
    /// back alone under a current db, a segment that lost its head), and no
    /// leader and majority of its cluster vouch for that position.
    #[serde(rename = "6f")]
    AppliedPastLog,
    /// 6g: a snapshot restore's directory behind a witness's position: not
    /// bumped above what the witnesses saw, or an older history of its cluster
    /// still runs (a lone member restored under a running cluster).
    #[serde(rename = "6g")]
    RestoredBehind,
    /// 6h: the cluster answering (its leader and a majority) is another
    /// history of the same IDs than the directory's: its list has the member
    /// as never started while the directory records that it published
    /// itself (a restore this member was left out of), or a majority of its
    /// voters answer past the directory as no member of its history can (a
    /// copy from before a restore).
    #[serde(rename = "6h")]
    OtherHistory,
    /// 6i: a witness is configured but did not answer (the Lease's read
    /// failed, the witness file is unreadable), and the leader and a quorum
    /// of the other voters do not answer at or past the leader's commit: how
    /// far this member got is unknown.
    #[serde(rename = "6i")]
    WitnessUnread,
    /// 6j: fewer answers than 6h's majority show a history apart from the
    /// directory's: waits until the cluster answers as a whole.
    #[serde(rename = "6j")]
    OtherHistoryUnconfirmed,
    /// 7: empty, and this member started before.
    #[serde(rename = "7")]
    EmptyFormed,
    /// 7a: a WAL with no entry and no snapshot, and this member started before.
    #[serde(rename = "7a")]
    EmptyLogFormed,
    /// 7b: the directory's membership is this member alone while the live list
    /// of its cluster ID has other started members: it re-bootstrapped (or is a
    /// copy from before the cluster grew); its data is not the cluster's.
    #[serde(rename = "7b")]
    Rebootstrapped,
    /// 8: empty, listed as added but never started: join.
    #[serde(rename = "8")]
    Join,
    /// 8a: as 8, but the flags name only this member: etcd cannot join.
    #[serde(rename = "8a")]
    JoinSelfOnly,
    /// 8b: as 8, but the list is not worth trusting (no leader, no majority,
    /// endpoints of several clusters).
    #[serde(rename = "8b")]
    JoinUntrusted,
    /// 9: empty seed, and the operator records nothing: bootstrap.
    #[serde(rename = "9")]
    Bootstrap,
    /// 9a: as 9, but the EtcdMember names an earlier Pod of this member.
    #[serde(rename = "9a")]
    BootstrapEarlierPod,
    /// 9b: as 9, but the witness Lease could not be read: the one source that
    /// knows whether the seed started before the operator latched its IDs.
    #[serde(rename = "9b")]
    BootstrapWitnessUnread,
    /// 10: empty, and the live cluster does not list this member.
    #[serde(rename = "10")]
    NotListed,
    /// 11: empty, and no source could answer.
    #[serde(rename = "11")]
    NoEvidence,
    /// 11a: as 11, allowed by `--allow-bootstrap-without-evidence`.
    #[serde(rename = "11a")]
    AllowedWithoutEvidence,
}

impl Row {
    /// A refusal of a directory behind what this member reached (6e, 6f) or
    /// of one a witness could not vouch for (6i), which the word of its
    /// cluster's leader and a quorum may lift (row 5d; 6i's way out):
    /// preflight asks the cluster again before it settles on one.
    pub(crate) fn waits_for_the_leader(self) -> bool {
        matches!(
            self,
            Row::RolledBack | Row::AppliedPastLog | Row::WitnessUnread
        )
    }

    /// Every row, in the order of the documented table: the order `decide`
    /// checks them in.
    pub const ALL: [Row; 34] = [
        Row::Unreadable,
        Row::Layout,
        Row::Running,
        Row::Corrupt,
        Row::Partial,
        Row::Foreign,
        Row::Rebootstrapped,
        Row::Removed,
        Row::Fork,
        Row::OtherHistory,
        Row::ForeignIncarnation,
        Row::ForeignFormation,
        Row::EmptyLogFormed,
        Row::StartEmptyLog,
        Row::RestoredBehind,
        Row::RolledBack,
        Row::AppliedPastLog,
        Row::WitnessUnread,
        Row::OtherHistoryUnconfirmed,
        Row::Version,
        Row::StartRestoredAbove,
        Row::StartCatchingUp,
        Row::StartStaleRecord,
        Row::Start,
        Row::EmptyFormed,
        Row::JoinUntrusted,
        Row::JoinSelfOnly,
        Row::Join,
        Row::NotListed,
        Row::BootstrapEarlierPod,
        Row::BootstrapWitnessUnread,
        Row::Bootstrap,
        Row::AllowedWithoutEvidence,
        Row::NoEvidence,
    ];

    /// The row's number in `docs/decision-table.md`.
    pub fn id(self) -> &'static str {
        match self {
            Row::Unreadable => "1",
            Row::Layout => "1a",
            Row::Running => "2",
            Row::Corrupt => "3",
            Row::Partial => "4",
            Row::Start => "5",
            Row::StartStaleRecord => "5a",
            Row::StartEmptyLog => "5b",
            Row::Version => "5c",
            Row::StartCatchingUp => "5d",
            Row::StartRestoredAbove => "5e",
            Row::Foreign => "6",
            Row::ForeignIncarnation => "6a",
            Row::Removed => "6b",
            Row::Fork => "6c",
            Row::ForeignFormation => "6d",
            Row::RolledBack => "6e",
            Row::AppliedPastLog => "6f",
            Row::RestoredBehind => "6g",
            Row::OtherHistory => "6h",
            Row::WitnessUnread => "6i",
            Row::OtherHistoryUnconfirmed => "6j",
            Row::EmptyFormed => "7",
            Row::EmptyLogFormed => "7a",
            Row::Rebootstrapped => "7b",
            Row::Join => "8",
            Row::JoinSelfOnly => "8a",
            Row::JoinUntrusted => "8b",
            Row::Bootstrap => "9",
            Row::BootstrapEarlierPod => "9a",
            Row::BootstrapWitnessUnread => "9b",
            Row::NotListed => "10",
            Row::NoEvidence => "11",
            Row::AllowedWithoutEvidence => "11a",
        }
    }

    /// The verdicts the row can give: one, except row 11a's (bootstrap for a
    /// seed, join for any other member).
    pub fn verdicts(self) -> &'static [Verdict] {
        match self {
            Row::Unreadable | Row::Layout => &[Verdict::Unreadable],
            Row::Running => &[Verdict::RefuseRunning],
            Row::Version => &[Verdict::RefuseVersion],
            Row::Corrupt => &[Verdict::RefuseCorrupt],
            Row::Partial => &[Verdict::RefusePartial],
            Row::Start
            | Row::StartStaleRecord
            | Row::StartEmptyLog
            | Row::StartCatchingUp
            | Row::StartRestoredAbove => &[Verdict::Start],
            Row::RolledBack | Row::AppliedPastLog | Row::RestoredBehind => {
                &[Verdict::RefuseRolledBack]
            }
            Row::Foreign
            | Row::ForeignIncarnation
            | Row::Removed
            | Row::Fork
            | Row::OtherHistory
            | Row::ForeignFormation => &[Verdict::RefuseForeign],
            Row::EmptyFormed | Row::EmptyLogFormed | Row::Rebootstrapped | Row::JoinSelfOnly => {
                &[Verdict::RefuseEmptyFormed]
            }
            Row::Join => &[Verdict::Join],
            Row::Bootstrap => &[Verdict::Bootstrap],
            Row::AllowedWithoutEvidence => &[Verdict::Bootstrap, Verdict::Join],
            Row::JoinUntrusted
            | Row::WitnessUnread
            | Row::OtherHistoryUnconfirmed
            | Row::BootstrapEarlierPod
            | Row::BootstrapWitnessUnread
            | Row::NotListed
            | Row::NoEvidence => &[Verdict::PhaseUnknown],
        }
    }
}

/// The verdict with the words an operator reads.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Decision {
    /// The verdict.
    pub verdict: Verdict,
    /// The row of the decision table it came from.
    pub row: Row,
    /// What was seen, in one or two sentences.
    pub reason: String,
    /// What to do about it (empty when etcd may start).
    pub remedy: String,
    /// What does not change the verdict but should be fixed.
    pub warnings: Vec<String>,
    /// For a start: the raft index the member must reach before it is ready
    /// (the position it was held to), and where that came from.
    pub floor: Option<(u64, String)>,
    /// For a start: the witnesses' position belongs to a history before a
    /// deliberate restore and is to be replaced, not raised.
    pub rebase_witness: bool,
}

/// The decision of a row with one verdict.
fn decision(row: Row, reason: String, remedy: &str) -> Decision {
    decided(row, row.verdicts()[0], reason, remedy)
}

/// The decision of `row`, giving `verdict`, one of the row's.
fn decided(row: Row, verdict: Verdict, reason: String, remedy: &str) -> Decision {
    debug_assert!(
        row.verdicts().contains(&verdict),
        "{row:?} gives {verdict:?}"
    );
    Decision {
        verdict,
        row,
        reason,
        remedy: remedy.to_string(),
        warnings: Vec::new(),
        floor: None,
        rebase_witness: false,
    }
}

/// Applies the decision table: the rows in docs/decision-table.md's order, the
/// first whose condition holds deciding.
pub fn decide(i: &Inputs) -> Decision {
    if let Some(d) = directory_alone(&i.dir) {
        return d;
    }
    match &i.dir.state {
        Dir::Initialized(rec) => initialized::decide(i, rec),
        _ => empty::decide(i),
    }
}

/// Rows 1–4, decided on the directory alone, in this order.
#[cfg(test)]
const DIRECTORY_ROWS: [Row; 5] = [
    Row::Unreadable,
    Row::Layout,
    Row::Running,
    Row::Corrupt,
    Row::Partial,
];

/// Rows 1–4: a directory that cannot be read, is in use, or is not a whole
/// member decides without any other source.
fn directory_alone(dir: &DirFacts) -> Option<Decision> {
    Some(match &dir.state {
        Dir::Unreadable {
            problem,
            symlinked: None,
        } => decision(
            Row::Unreadable,
            format!("the data directory cannot be read: {problem}"),
            REMEDY_UNREADABLE,
        ),
        Dir::Unreadable {
            problem,
            symlinked: Some(link),
        } => decision(
            Row::Layout,
            format!("the data directory is not read: {problem}"),
            &remedy_symlink(link),
        ),
        _ if dir.running => decision(
            Row::Running,
            "an etcd process holds the locks of this data directory".into(),
            REMEDY_RUNNING,
        ),
        Dir::Corrupt(problem) => decision(
            Row::Corrupt,
            format!("the data directory is corrupt: {problem}"),
            REMEDY_CORRUPT,
        ),
        Dir::Partial(problem) => decision(
            Row::Partial,
            format!("the data directory is partially initialized: {problem}"),
            REMEDY_PARTIAL,
        ),
        Dir::Initialized(_) | Dir::Empty => return None,
    })
}

pub use initialized::keyspace_check_at;

/// Whether the decision needs the network: every row past 1–4 reads the live
/// cluster or the Kubernetes API.
pub fn needs_network(dir: &DirFacts) -> bool {
    directory_alone(dir).is_none()
}

/// Whether one answer of the live cluster settles the live wait: it shows
/// this member started, which nothing undoes — for an empty directory the
/// started entry that refuses it (row 7), and only in the leader's answer (a
/// lagging member may still list a removed and re-added member's previous
/// incarnation as started); for a directory with a WAL, its own cluster's
/// answer listing the directory's member as this member, started (enough to
/// corroborate its IDs, so that a leaderless cluster with a black-holed peer
/// cannot hold a restart to the deadline, and endpoints that also reach
/// another cluster cannot decide by which answers first). `wal`: `None`
/// without a WAL, `Some(None)` for a WAL whose first records could not be
/// read (the full read decides: nothing settles early), else its IDs.
pub fn settles(
    me: &SelfFacts,
    wal: Option<Option<(MemberId, ClusterId)>>,
    answer: &LiveFacts,
) -> bool {
    match wal {
        None => answer.leader_heard && answer.started(me).is_some(),
        Some(Some((member, cluster))) => {
            answer.cluster_id == cluster
                && answer.member(member).is_some_and(|m| m.started && m.is(me))
        }
        Some(None) => false,
    }
}

/// Every row in precedence order: what `decide` checks first comes first.
#[cfg(test)]
fn precedence() -> impl Iterator<Item = Row> {
    DIRECTORY_ROWS
        .into_iter()
        .chain(initialized::rows())
        .chain(empty::rows())
}

#[cfg(test)]
mod properties;
#[cfg(test)]
mod tests;
