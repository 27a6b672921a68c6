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

use serde::Serialize;

use crate::disk::ids::comparable_url;
use crate::disk::ids::{ClusterId, Incarnation, MemberId};
use crate::disk::layout::FoundingMember;
use crate::disk::upgrade::UpgradeCheck;
use crate::exit::Exit;

/// The verdict names are part of the contract: operators and runbooks match them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
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
    /// Every row, in the order of the documented table.
    pub const ALL: [Row; 31] = [
        Row::Unreadable,
        Row::Layout,
        Row::Running,
        Row::Corrupt,
        Row::Partial,
        Row::Start,
        Row::StartStaleRecord,
        Row::StartEmptyLog,
        Row::Version,
        Row::StartCatchingUp,
        Row::StartRestoredAbove,
        Row::Foreign,
        Row::ForeignIncarnation,
        Row::Removed,
        Row::Fork,
        Row::ForeignFormation,
        Row::RolledBack,
        Row::AppliedPastLog,
        Row::RestoredBehind,
        Row::EmptyFormed,
        Row::EmptyLogFormed,
        Row::Rebootstrapped,
        Row::Join,
        Row::JoinSelfOnly,
        Row::JoinUntrusted,
        Row::Bootstrap,
        Row::BootstrapEarlierPod,
        Row::BootstrapWitnessUnread,
        Row::NotListed,
        Row::NoEvidence,
        Row::AllowedWithoutEvidence,
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

    /// The verdict of the row. Rows 11a's verdict depends on the member's
    /// shape: [`Verdict::Bootstrap`] here, [`Verdict::Join`] for a non-seed
    /// (see [`decide`]).
    pub fn verdict(self) -> Verdict {
        match self {
            Row::Unreadable | Row::Layout => Verdict::Unreadable,
            Row::Running => Verdict::RefuseRunning,
            Row::Version => Verdict::RefuseVersion,
            Row::Corrupt => Verdict::RefuseCorrupt,
            Row::Partial => Verdict::RefusePartial,
            Row::Start
            | Row::StartStaleRecord
            | Row::StartEmptyLog
            | Row::StartCatchingUp
            | Row::StartRestoredAbove => Verdict::Start,
            Row::RolledBack | Row::AppliedPastLog | Row::RestoredBehind => {
                Verdict::RefuseRolledBack
            }
            Row::Foreign
            | Row::ForeignIncarnation
            | Row::Removed
            | Row::Fork
            | Row::ForeignFormation => Verdict::RefuseForeign,
            Row::EmptyFormed | Row::EmptyLogFormed | Row::Rebootstrapped | Row::JoinSelfOnly => {
                Verdict::RefuseEmptyFormed
            }
            Row::Join => Verdict::Join,
            Row::Bootstrap | Row::AllowedWithoutEvidence => Verdict::Bootstrap,
            Row::JoinUntrusted
            | Row::BootstrapEarlierPod
            | Row::BootstrapWitnessUnread
            | Row::NotListed
            | Row::NoEvidence => Verdict::PhaseUnknown,
        }
    }
}

/// The directory's facts that matter to the decision.
#[derive(Debug, Clone)]
pub struct DirFacts {
    /// What the directory is, with what the decision reads of it.
    pub state: Dir,
    /// etcd holds the WAL or backend locks.
    pub running: bool,
}

/// The directory by its state (the decision's view of
/// [`crate::disk::layout::DirState`]).
#[derive(Debug, Clone)]
pub enum Dir {
    /// No WAL and nothing etcd wrote.
    Empty,
    /// A readable WAL with metadata: what the directory records.
    Initialized(Box<Recorded>),
    /// Something etcd wrote, but not a complete member: why.
    Partial(String),
    /// A WAL or backend that fails its checks: why.
    Corrupt(String),
    /// Could not be read.
    Unreadable {
        /// Why.
        problem: String,
        /// A symlink inside the data dir where etcd expects a directory (a
        /// `member/wal` pointing elsewhere): a configuration matter.
        symlinked: Option<String>,
    },
}

/// What an initialized directory records of its member.
#[derive(Debug, Clone, Default)]
pub struct Recorded {
    /// The member ID in the WAL metadata.
    pub member_id: MemberId,
    /// The cluster ID in the WAL metadata.
    pub cluster_id: ClusterId,
    /// The peer URLs the directory's own membership records for its member ID
    /// (`None` when the directory does not say).
    pub recorded_peer_urls: Option<Vec<String>>,
    /// The name the directory's own membership records for its member ID
    /// (`None` when it does not say or the member never published one).
    pub recorded_name: Option<String>,
    /// The WAL holds no entry and no snapshot: the log is empty although the
    /// directory is initialized as far as etcd is concerned.
    pub empty_log: bool,
    /// The member IDs of the directory's own membership.
    pub recorded_members: Vec<MemberId>,
    /// Member IDs the directory records as removed.
    pub removed_ids: Vec<MemberId>,
    /// The directory records its own member's removal.
    pub self_removed: bool,
    /// The peer URLs of the WAL's own entry adding its member, while it holds it.
    pub added_with_peer_urls: Option<Vec<String>>,
    /// The founding members of the directory's cluster, while its WAL holds
    /// their bootstrap entries (see `Initialized::formation` in `disk::layout`).
    pub formation: Vec<FoundingMember>,
    /// The term of the directory's HardState.
    pub term: u64,
    /// Where the log ends: the index of its last entry, or of the snapshot it
    /// starts from when that is later.
    pub log_end_index: u64,
    /// The term there.
    pub log_end_term: u64,
    /// The last entry the backend applied (`meta/consistent_index`), when read.
    pub applied_index: Option<u64>,
    /// Its term (`meta/term`, etcd 3.5+).
    pub applied_term: Option<u64>,
    /// The backend's MVCC revision, when read.
    pub revision: Option<i64>,
    /// Made by a snapshot restore, its backend holding the snapshot's data
    /// (see `Initialized::restored` in `disk::layout`).
    pub restored: bool,
    /// The upgrade check for the etcd version about to start, when it is known.
    pub upgrade: Option<UpgradeCheck>,
}

/// The IDs etcd derives for a bootstrap member from its flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DerivedIds {
    /// `sha1(sorted peer URLs + token)` of this member's `--initial-cluster` entry.
    pub member_id: MemberId,
    /// From every member ID `--initial-cluster` derives.
    pub cluster_id: ClusterId,
}

/// Who this member is, from its flags.
#[derive(Debug, Clone, Default)]
pub struct SelfFacts {
    /// `--name`.
    pub name: Option<String>,
    /// `--peer-urls` (or this member's `--initial-cluster` entry), normalised.
    pub peer_urls: Vec<String>,
    /// `--initial-cluster` names only this member (the operator's seed shape).
    pub self_only_initial_cluster: bool,
    /// The IDs etcd gives this member when it bootstraps with these flags:
    /// set for a bootstrap member (the seed shape, or
    /// `--initial-cluster-state=new`), `None` for a member that joins (its ID
    /// comes from `member add` and cannot be predicted).
    pub derived: Option<DerivedIds>,
    /// This Pod's UID (`POD_UID`, downward API), when configured.
    pub pod_uid: Option<String>,
    /// The token etcd hashes a founding member's ID with:
    /// `--initial-cluster-token` (etcd's default when unset), or the discovery
    /// URL or token of a cluster formed through discovery.
    pub token: Option<String>,
    /// SHA-256 of [`SelfFacts::token`] (etcd's default when unset): the
    /// incarnation fact witnesses record (`Incarnation`).
    pub token_sha256: Option<String>,
    /// The token was configured (a flag or env var), not etcd's default. A
    /// member that joined with `member add` needs no token (etcd ignores it on a
    /// join and `member add` prints none), so only a configured one tells whose
    /// cluster a joined member's directory is.
    pub token_given: bool,
}

impl SelfFacts {
    /// One of this member's peer URLs, compared as etcd compares URLs (scheme
    /// and host case, a trailing slash, the default port do not matter).
    pub fn has_peer_url(&self, url: &str) -> bool {
        let url = comparable_url(url);
        self.peer_urls.iter().any(|u| comparable_url(u) == url)
    }
}

/// One member of the live cluster's member list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiveMemberFacts {
    /// Its ID.
    pub id: MemberId,
    /// Its name (empty until it first starts).
    pub name: String,
    /// Its peer URLs.
    pub peer_urls: Vec<String>,
    /// It has a name and client URLs: it has started at least once.
    pub started: bool,
    /// A raft learner (it does not vote).
    pub is_learner: bool,
}

/// What the live cluster said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiveFacts {
    /// The cluster ID in the response header (of the freshest answer).
    pub cluster_id: ClusterId,
    /// The member list (serializable; the freshest answer's, with a member any
    /// answer saw started marked started).
    pub members: Vec<LiveMemberFacts>,
    /// Other cluster IDs some endpoints reported: the endpoints reach more than
    /// one cluster.
    pub other_cluster_ids: Vec<ClusterId>,
    /// Enough members answered to trust "never started" (see
    /// `evidence::etcd::probe`).
    pub majority_heard: bool,
    /// One of the answers was the leader's.
    pub leader_heard: bool,
    /// The raft term of the freshest answer, when it gave one.
    pub raft_term: Option<u64>,
    /// The commit index the leader reported, when the leader answered.
    pub leader_raft_index: Option<u64>,
    /// What each member of the freshest answer's cluster that answered
    /// reported of its position.
    pub positions: Vec<LivePosition>,
}

/// One answering member's position, as its `Status` reported it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LivePosition {
    /// The member that answered.
    pub member_id: MemberId,
    /// Its raft (commit) index.
    pub raft_index: Option<u64>,
    /// Its MVCC revision.
    pub revision: Option<i64>,
}

impl LiveMemberFacts {
    fn is(&self, me: &SelfFacts) -> bool {
        let by_name = matches!(&me.name, Some(n) if !self.name.is_empty() && self.name == *n);
        let by_url = self.peer_urls.iter().any(|u| me.has_peer_url(u));
        by_name || by_url
    }
}

impl LiveFacts {
    /// The entry for this member: by name when it has one, else by peer URL.
    /// When two entries match (a started one by name, an unstarted one by a new
    /// peer URL), the started one: whether this member started must not depend
    /// on the order of the list.
    pub fn find(&self, me: &SelfFacts) -> Option<&LiveMemberFacts> {
        let mut matching = self.members.iter().filter(|m| m.is(me));
        let first = matching.next()?;
        Some(if first.started {
            first
        } else {
            matching.find(|m| m.started).unwrap_or(first)
        })
    }

    /// The entry with this ID.
    pub fn member(&self, id: MemberId) -> Option<&LiveMemberFacts> {
        self.members.iter().find(|m| m.id == id)
    }

    /// The voters are this member and one other, and that one answered. A
    /// cluster of two voters has no leader while one of them is down — a
    /// member just added to a cluster of one is that, until it starts — but
    /// every committed entry is on both: the other voter holds them all, and
    /// nothing an empty log could vote for lacks them. What the leader's
    /// answer guards a join against (a member behind the rest, with an empty
    /// log's vote deciding an election) cannot happen with one other voter.
    fn sole_other_voter_heard(&self, me: &SelfFacts) -> bool {
        let voters: Vec<&LiveMemberFacts> = self.members.iter().filter(|m| !m.is_learner).collect();
        let mine = |m: &&LiveMemberFacts| m.is(me);
        match voters.as_slice() {
            [a, b] if mine(a) != mine(b) => {
                let other = if mine(a) { b } else { a };
                self.other_cluster_ids.is_empty()
                    && self.positions.iter().any(|p| p.member_id == other.id)
            }
            _ => false,
        }
    }

    /// The list is the leader's word on `cluster`: the freshest answer is of
    /// that cluster, and the leader and half of the voters were heard.
    fn authoritative_for(&self, cluster: ClusterId) -> bool {
        self.cluster_id == cluster && self.leader_heard && self.majority_heard
    }
}

/// What the operator's records said.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OperatorFacts {
    /// `EtcdMember.spec.bootstrap`: this member is the seed.
    pub bootstrap: bool,
    /// `EtcdMember.status.memberID`, latched once the member was Ready.
    pub member_id: Option<MemberId>,
    /// `EtcdCluster.status.clusterID`, latched once the cluster formed.
    pub cluster_id: Option<ClusterId>,
    /// `EtcdMember.status.podUID`: the Pod the operator last saw for this member.
    pub pod_uid: Option<String>,
    /// The cluster's token (`EtcdCluster.status.clusterToken`, else
    /// `EtcdMember.spec.clusterToken`): what the operator passes etcd as
    /// `--initial-cluster-token`, unique per incarnation.
    pub cluster_token: Option<String>,
    /// `EtcdCluster.metadata.uid`: this incarnation of the cluster.
    pub cluster_uid: Option<String>,
}

/// What a witness of this member said (docs/decision-table.md, the sources):
/// the Lease `serve` keeps, or the witness file without Kubernetes. It exists,
/// so this member's etcd answered its sidecar before.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WitnessFacts {
    /// How a sentence names it ("the witness Lease etcd-witness-m1").
    pub name: String,
    /// The command that clears it, for a remedy that needs it gone
    /// (`kubectl -n ns delete lease etcd-witness-m1`, `rm /path`).
    pub clear: String,
    /// The member ID it records (`None` when its annotation is unreadable).
    pub member_id: Option<MemberId>,
    /// The cluster ID it records.
    pub cluster_id: Option<ClusterId>,
    /// The raft index (high-water mark) it records.
    pub raft_index: Option<u64>,
    /// The term of the entry applied there.
    pub raft_term: Option<u64>,
    /// The MVCC revision there.
    pub revision: Option<i64>,
    /// The position was proven on the member's disk (the format since
    /// incarnations): an earlier sidecar recorded the in-memory commit index.
    pub durable: bool,
    /// Which incarnation it belongs to.
    pub incarnation: Incarnation,
    /// The Pod whose sidecar last wrote it.
    pub pod_uid: Option<String>,
}

/// A source that may or may not have answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer<T> {
    /// The source answered.
    Answered(T),
    /// The source was asked and could not answer; the text says why.
    NoAnswer(String),
    /// The source is not configured for this deployment.
    NotConfigured,
}

impl<T> Answer<T> {
    /// The answer, if the source gave one.
    pub fn into_option(self) -> Option<T> {
        match self {
            Answer::Answered(t) => Some(t),
            _ => None,
        }
    }

    fn get(&self) -> Option<&T> {
        match self {
            Answer::Answered(t) => Some(t),
            _ => None,
        }
    }

    fn describe(&self) -> &str {
        match self {
            Answer::Answered(_) => "answered",
            Answer::NoAnswer(why) => why,
            Answer::NotConfigured => "not configured",
        }
    }
}

/// Everything the decision looks at.
#[derive(Debug, Clone)]
pub struct Inputs {
    /// The directory.
    pub dir: DirFacts,
    /// This member's flags.
    pub me: SelfFacts,
    /// The live cluster.
    pub live: Answer<LiveFacts>,
    /// The operator's records.
    pub operator: Answer<OperatorFacts>,
    /// The witness Lease: `Answered(None)` when there is none (404).
    pub witness: Answer<Option<WitnessFacts>>,
    /// The witness file (`--witness-file`), when there is one.
    pub witness_file: Option<WitnessFacts>,
    /// `ETCD_MEMBER_ID` when non-empty.
    pub hint_member_id: Option<MemberId>,
    /// `ETCD_CLUSTER_ID` when non-empty.
    pub hint_cluster_id: Option<ClusterId>,
    /// `--allow-bootstrap-without-evidence`.
    pub allow_bootstrap_without_evidence: bool,
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

const REMEDY_EMPTY_FORMED: &str =
    "this member's data is gone; do not start it on an empty directory. \
Remove the member (etcdctl member remove <id>) and add it again (etcdctl member add), then start it \
with the flags member add prints (--initial-cluster-state=existing and that --initial-cluster), so it \
joins as a new member and receives the data from the others; with the operator, delete the EtcdMember \
so the operator replaces it. If no other member holds the data, restore the cluster from a backup.";

const REMEDY_JOIN_FLAGS: &str =
    "start etcd with --initial-cluster-state=existing and the --initial-cluster that etcdctl member add \
printed (it names the other members): recreate the Pod with those flags. With the operator, delete the \
EtcdMember so the operator replaces it with a member created for the formed cluster.";

const REMEDY_FOREIGN: &str = "check which volume is mounted here (a swapped or reused PVC); do not start etcd on it. If this member's own data is lost, remove and re-add the member so it joins fresh";

const REMEDY_INCARNATION_TOKEN: &str = "this volume holds the data of a cluster formed with another --initial-cluster-token, such as an earlier cluster of the same name whose volume a new one inherited; do not start etcd on it. Keep it if that cluster's data matters, otherwise wipe it (etcd-member-agent wipe) or give the member a new volume and add it again. If it is this cluster's own data and only the token in this member's flags was changed since the cluster formed, set ETCD_INITIAL_CLUSTER_TOKEN back to the token it was formed with";
const REMEDY_INCARNATION: &str = "this volume holds the data of an earlier cluster (another --initial-cluster-token or member set) that a new cluster of the same name inherited; do not start etcd on it. Keep it if that cluster's data matters, otherwise wipe it (etcd-member-agent wipe) or give the member a new volume, and let it bootstrap or restore afresh";

const REMEDY_REMOVED: &str = "this member was removed from the cluster and etcd would exit on this directory (\"the member has been permanently removed\"); remove the data (etcd-member-agent wipe) and add the member again (etcdctl member add, then start it with the flags member add prints; if the live list already shows it added again and unstarted, only remove the data), or with the operator delete the EtcdMember so it is replaced";

const REMEDY_FORK: &str = "do not wipe this directory: it may hold the only copy of the cluster's data. Another history answers under this cluster ID — a member that re-bootstrapped a fresh cluster with the same IDs (a wiped seed started with =new, a restore re-run) or a restored cluster. Find that member (its member list names few members, its raft term and index are low), stop it, and start the members whose directories are intact; then remove and re-add the re-bootstrapped one";

fn decision(row: Row, reason: String, remedy: &str) -> Decision {
    Decision {
        verdict: row.verdict(),
        row,
        reason,
        remedy: remedy.to_string(),
        warnings: Vec::new(),
        floor: None,
        rebase_witness: false,
    }
}

/// Whose a witness is, as far as this member can tell.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Whose {
    /// This incarnation's: a fact both sides know agrees.
    Ours,
    /// No fact tells (a Lease of an earlier sidecar, a deployment that gives
    /// neither a token nor an operator): taken as this member's, but it never
    /// vouches for a directory.
    Unknown,
    /// Another incarnation's (why): it neither vouches nor refuses.
    Other(String),
}

impl Inputs {
    /// The incarnation this member is of: its token, and the operator's
    /// `EtcdCluster` UID when the operator answered.
    fn incarnation(&self) -> Incarnation {
        Incarnation {
            token_sha256: self.me.token_sha256.clone(),
            cluster_uid: self.operator.get().and_then(|o| o.cluster_uid.clone()),
        }
    }

    /// Every witness that answered: the Lease, then the file.
    fn witnesses(&self) -> impl Iterator<Item = &WitnessFacts> {
        self.witness
            .get()
            .and_then(Option::as_ref)
            .into_iter()
            .chain(self.witness_file.as_ref())
    }

    /// Whose `w` is. Without a fact both know, a bootstrap member's flags still
    /// tell: a witness whose member and cluster IDs are both other than the
    /// ones its flags derive is of a cluster formed otherwise.
    fn whose(&self, w: &WitnessFacts) -> Whose {
        let mine = self.incarnation();
        if let Some(why) = mine.differs_from(&w.incarnation) {
            return Whose::Other(why.to_owned());
        }
        if mine.same_as(&w.incarnation) {
            return Whose::Ours;
        }
        if let (Some(d), Some(m)) = (self.me.derived, w.member_id) {
            if m != d.member_id && w.cluster_id.is_some_and(|c| c != d.cluster_id) {
                return Whose::Other(format!(
                    "member {m} of cluster {}, IDs this member's flags (--initial-cluster, --initial-cluster-token) do not derive (they make it member {} of cluster {})",
                    w.cluster_id.unwrap_or_default(),
                    d.member_id,
                    d.cluster_id
                ));
            }
        }
        Whose::Unknown
    }

    /// The witnesses of this incarnation (or of none known), and a warning for
    /// each of another one.
    fn usable_witnesses(&self) -> (Vec<(&WitnessFacts, bool)>, Vec<String>) {
        let mut usable = Vec::new();
        let mut warnings = Vec::new();
        for w in self.witnesses() {
            match self.whose(w) {
                Whose::Ours => usable.push((w, true)),
                Whose::Unknown => usable.push((w, false)),
                Whose::Other(why) => warnings.push(format!(
                    "{} belongs to another incarnation of a cluster of this member's name ({why}): it is not evidence about this member; once that cluster is gone, remove it ({})",
                    w.name, w.clear
                )),
            }
        }
        (usable, warnings)
    }
}

/// Applies the decision table.
pub fn decide(i: &Inputs) -> Decision {
    match &i.dir.state {
        Dir::Unreadable { problem, symlinked } => match symlinked {
            Some(link) => decision(
                Row::Layout,
                format!("the data directory is not read: {problem}"),
                &format!(
                    "{link} is a symlink; the agent never follows symlinks inside the data dir. This is a configuration matter, not damage: keep the data, and pass the symlink's target as etcd's --wal-dir and the agent's --wal-dir (ETCD_WAL_DIR), or mount the volume at the path etcd expects"
                ),
            ),
            None => decision(
                Row::Unreadable,
                format!("the data directory cannot be read: {problem}"),
                "check the volume's ownership and mode: the agent runs as the etcd user (uid 65532) and must be able to read the data dir; a volume that does not answer (a hung network mount) also ends here",
            ),
        },
        _ if i.dir.running => decision(
            Row::Running,
            "an etcd process holds the locks of this data directory".into(),
            "another etcd is running on this volume; stop it before starting a second one (two processes on one data dir corrupt it)",
        ),
        Dir::Corrupt(problem) => decision(
            Row::Corrupt,
            format!("the data directory is corrupt: {problem}"),
            "keep the directory for analysis; remove and re-add the member so it starts on a fresh directory, or restore from a backup",
        ),
        Dir::Partial(problem) => decision(
            Row::Partial,
            format!("the data directory is partially initialized: {problem}"),
            "an earlier start or restore was interrupted; wipe the directory (etcd-member-agent wipe) and let the member join again (member remove + member add)",
        ),
        Dir::Initialized(d) => decide_initialized(i, d),
        Dir::Empty => decide_empty(i),
    }
}

/// Records in `out` that `source` expects `expected` where the WAL has `found`.
fn check<Id: PartialEq + std::fmt::Display>(
    out: &mut Vec<String>,
    what: &str,
    source: &str,
    expected: Option<Id>,
    found: Id,
) {
    if let Some(e) = expected {
        if e != found {
            out.push(format!(
                "{what} in the WAL is {} but {source} says {}",
                found, e
            ));
        }
    }
}

/// A member ID a record gives this member, compared with the directory's.
struct RecordedId<'a> {
    what: &'a str,
    source: &'a str,
    id: Option<MemberId>,
}

fn decide_initialized(i: &Inputs, rec: &Recorded) -> Decision {
    let (wal_member, wal_cluster) = (rec.member_id, rec.cluster_id);
    let op = i.operator.get();
    let live = i.live.get();
    let (witnesses, mut warnings) = i.usable_witnesses();
    let mut mismatches = Vec::new();

    // The list of the directory's own cluster has this member under the
    // directory's ID: a member ID recorded elsewhere that the list does not
    // have is the stale record of an earlier incarnation (the operator latches
    // `memberID` once, env is frozen at Pod creation, a witness keeps the ID it
    // saw; remove + add gives a new ID). Started under this name, or added at
    // this member's peer URL and not started yet (a join killed during its
    // first sync: etcd made this directory for that random ID). Any answer of
    // that cluster will do, not only the leader's: a lagging list errs only
    // towards an ID removed since — which etcd itself then refuses — never
    // towards another member's data.
    let live_vouches_member = live.is_some_and(|l| {
        l.cluster_id == wal_cluster && l.member(wal_member).is_some_and(|m| m.is(&i.me))
    });
    let dir_member_is_me = matches!((&rec.recorded_name, &i.me.name), (Some(r), Some(n)) if r == n)
        || rec
            .recorded_peer_urls
            .as_ref()
            .is_some_and(|urls| urls.iter().any(|u| i.me.has_peer_url(u)));
    let mut stale = Vec::new();
    let mut recorded = vec![
        RecordedId {
            what: "member ID",
            source: "the EtcdMember",
            id: op.and_then(|o| o.member_id),
        },
        RecordedId {
            what: "member ID",
            source: "ETCD_MEMBER_ID",
            id: i.hint_member_id,
        },
    ];
    recorded.extend(witnesses.iter().map(|(w, _)| RecordedId {
        what: "member ID",
        source: &w.name,
        id: w.member_id,
    }));
    for r in &recorded {
        let Some(id) = r.id.filter(|&id| id != wal_member) else {
            continue;
        };
        let gone = live.is_some_and(|l| l.member(id).is_none());
        // The directory itself saw the recorded ID removed, and records its
        // own member as this one: no peer is needed to know the record is
        // stale (quorum loss is exactly when none answers).
        let dir_says_stale = rec.removed_ids.contains(&id) && dir_member_is_me;
        if (live_vouches_member && gone) || dir_says_stale {
            let by = if live_vouches_member && gone {
                "which the live member list no longer has"
            } else {
                "whose removal the directory itself records"
            };
            stale.push(format!(
                "{} records member ID {}, {by}: a stale record of an earlier incarnation",
                r.source, id
            ));
        } else {
            check(&mut mismatches, r.what, r.source, Some(id), wal_member);
        }
    }
    if let Some(op) = op {
        check(
            &mut mismatches,
            "cluster ID",
            "the EtcdCluster",
            op.cluster_id,
            wal_cluster,
        );
    }
    // Endpoints that reach more than one cluster are a misconfiguration of the
    // endpoint list, not evidence against the directory: it must belong to one
    // of them, and only that cluster's list says anything about its member.
    let mut removed = false;
    if let Some(live) = live {
        let reached: Vec<ClusterId> = std::iter::once(live.cluster_id)
            .chain(live.other_cluster_ids.iter().copied())
            .collect();
        if !reached.contains(&wal_cluster) {
            let source = match &live.other_cluster_ids[..] {
                [] => "the live cluster".to_owned(),
                others => {
                    let others: Vec<String> =
                        others.iter().copied().map(|id| id.to_string()).collect();
                    format!("the live cluster (other endpoints: {})", others.join(", "))
                }
            };
            check(
                &mut mismatches,
                "cluster ID",
                &source,
                Some(live.cluster_id),
                wal_cluster,
            );
        } else if live.cluster_id == wal_cluster {
            match live.member(wal_member) {
                Some(m) if !m.is(&i.me) && !m.name.is_empty() => {
                    mismatches.push(format!(
                        "the live member list has member {} of the WAL as {} ({}), not this member",
                        wal_member,
                        m.name,
                        m.peer_urls.join(",")
                    ));
                }
                Some(_) => {}
                None if live.authoritative_for(wal_cluster) => removed = true,
                None => {
                    if let Some(other) = live.find(&i.me).filter(|m| m.id != wal_member) {
                        check(
                            &mut mismatches,
                            "member ID",
                            "the live member list",
                            Some(other.id),
                            wal_member,
                        );
                    }
                }
            }
        }
        if reached.len() > 1 {
            let others: Vec<String> = reached
                .iter()
                .filter(|&&c| c != wal_cluster)
                .map(|c| c.to_string())
                .collect();
            warnings.push(format!(
                "ETCD_PEER_ENDPOINTS also reaches cluster {}: fix the endpoint list",
                others.join(", ")
            ));
        }
    }
    check(
        &mut mismatches,
        "cluster ID",
        "ETCD_CLUSTER_ID",
        i.hint_cluster_id,
        wal_cluster,
    );
    for (w, _) in &witnesses {
        check(
            &mut mismatches,
            "cluster ID",
            &w.name,
            w.cluster_id,
            wal_cluster,
        );
    }
    if let Some(recorded) = &rec.recorded_peer_urls {
        let overlap = recorded.iter().any(|u| i.me.has_peer_url(u));
        if !i.me.peer_urls.is_empty() && !overlap {
            let text = format!(
                "the directory's own membership gives member {} the peer URLs {} but this member's are {}",
                wal_member,
                recorded.join(","),
                i.me.peer_urls.join(",")
            );
            // The same member under another spelling of its address (an adopted
            // cluster, a `member update`): the name the directory records and,
            // where it answered, the live list agree that this is the member.
            // Both names that are known must be this member's, and one must be.
            let live_name = live
                .filter(|l| l.cluster_id == wal_cluster)
                .and_then(|l| l.member(wal_member))
                .map(|m| m.name.as_str())
                .filter(|n| !n.is_empty());
            let recorded_name = rec.recorded_name.as_deref().filter(|n| !n.is_empty());
            let mine = i.me.name.as_deref();
            let names = [live_name, recorded_name];
            let same_member = mine.is_some()
                && names.iter().any(Option::is_some)
                && names.iter().flatten().all(|n| Some(*n) == mine);
            if same_member {
                warnings.push(format!(
                    "{text}; the name {} and the member ID agree, so this is the same member with a differently spelled advertise URL: make ETCD_PEER_URLS match etcd's --initial-advertise-peer-urls",
                    i.me.name.as_deref().unwrap_or_default()
                ));
            } else {
                mismatches.push(text);
            }
        }
    }
    // The token etcd got: this member's own when given, else the operator's
    // record of its cluster's (it passes that one to etcd), else etcd's default.
    let (token, token_given) = match (&i.me.token, op.and_then(|o| o.cluster_token.as_ref())) {
        (Some(t), _) if i.me.token_given => (Some(t), true),
        (_, Some(t)) => (Some(t), true),
        (t, None) => (t.as_ref(), false),
    };
    // The WAL's own entry adding its member, hashed with this member's token,
    // gives the WAL's member ID: the directory was bootstrapped with this token
    // (its URL may have been updated since), not by an earlier incarnation.
    let same_token = match (&rec.added_with_peer_urls, token) {
        (Some(urls), Some(token)) => crate::disk::ids::member_id(urls, token) == wal_member,
        _ => false,
    };
    // The WAL's bootstrap entries, hashed with this member's token, give the
    // founding members' IDs when the cluster was formed with it; none does
    // when it was formed with another (an earlier incarnation's volume, the
    // member's own ID random since a `member add`).
    let formed_with_other_token = match token {
        Some(token) if !rec.formation.is_empty() => (!rec
            .formation
            .iter()
            .any(|m| crate::disk::ids::member_id(&m.peer_urls, token) == m.id))
        .then_some(&rec.formation),
        _ => None,
    };
    // Whose cluster the formation names binds only a member whose own ID came
    // from a token (a founder) or one given a token: a member that joined with
    // `member add` and no token of its own may hold its cluster's founders in
    // its WAL (a young leader's log from index 1), hashed with a token it was
    // never told.
    let formation_binds =
        |founders: &[FoundingMember]| token_given || founders.iter().any(|m| m.id == wal_member);
    let vouched = op
        .is_some_and(|o| o.member_id == Some(wal_member) || o.cluster_id == Some(wal_cluster))
        || live.is_some_and(|l| l.cluster_id == wal_cluster && l.member(wal_member).is_some())
        || i.hint_member_id == Some(wal_member)
        || i.hint_cluster_id == Some(wal_cluster)
        || witnesses.iter().any(|(w, ours)| {
            *ours && (w.member_id == Some(wal_member) || w.cluster_id == Some(wal_cluster))
        })
        || same_token;
    // Said whenever it is seen, so that a wrong token shows while a source
    // vouches, not first at a cold start when none can.
    if let Some(founders) = formed_with_other_token {
        if vouched || !formation_binds(founders) {
            warnings.push(format!(
                "the WAL records that cluster {} was formed by {}, IDs this member's token ({}) does not derive: if this member joined it with `member add`, set ETCD_INITIAL_CLUSTER_TOKEN to the token the cluster was formed with, so that a restart with no source to vouch for the directory is not taken for an earlier incarnation's volume",
                wal_cluster,
                founders
                    .iter()
                    .map(|m| m.id.to_string())
                    .collect::<Vec<_>>()
                    .join(", "),
                if i.me.token_given {
                    "ETCD_INITIAL_CLUSTER_TOKEN"
                } else if token_given {
                    "the operator's status.clusterToken"
                } else {
                    "unset: etcd's default etcd-cluster"
                }
            ));
        }
    }

    // A removal takes one member out and leaves the others: a list of the
    // directory's cluster ID that lacks other members the directory records,
    // or whose term is behind the directory's, is another history under the
    // same ID (a re-bootstrapped seed, a restore), not the cluster's word.
    let others_recorded: Vec<MemberId> = rec
        .recorded_members
        .iter()
        .copied()
        .filter(|&id| id != wal_member && !rec.removed_ids.contains(&id))
        .collect();
    let fork = live.filter(|l| l.cluster_id == wal_cluster).and_then(|l| {
        let missing: Vec<String> = others_recorded
            .iter()
            .filter(|&&id| l.member(id).is_none())
            .map(|id| id.to_string())
            .collect();
        let behind = l.raft_term.is_some_and(|t| t < rec.term);
        if !missing.is_empty() {
            Some(format!(
                "its member list lacks member(s) {} that the directory records",
                missing.join(", ")
            ))
        } else if behind {
            Some(format!(
                "its raft term {} is behind the directory's {}",
                l.raft_term.unwrap_or_default(),
                rec.term
            ))
        } else {
            None
        }
    });
    // The directory's membership is this member alone, while the cluster of
    // its ID has other started members: an intact member of that cluster would
    // have recorded their addition (committed with it as a voter).
    let rebootstrapped = live.filter(|l| l.cluster_id == wal_cluster).and_then(|l| {
        let alone = rec.recorded_members == [wal_member];
        let others: Vec<&LiveMemberFacts> = l
            .members
            .iter()
            .filter(|m| m.id != wal_member && m.started)
            .collect();
        (alone && !others.is_empty()).then(|| {
            others
                .iter()
                .map(|m| format!("{} ({})", m.id, m.name))
                .collect::<Vec<_>>()
                .join(", ")
        })
    });

    let mut d = if !mismatches.is_empty() {
        decision(
            Row::Foreign,
            format!(
                "the data directory belongs to another member or cluster: {}",
                mismatches.join("; ")
            ),
            REMEDY_FOREIGN,
        )
    } else if let Some(others) = rebootstrapped {
        decision(
            Row::Rebootstrapped,
            format!(
                "the data directory holds member {} of cluster {} alone, but the live cluster of that ID has other started members ({others}): this directory re-bootstrapped a fresh cluster with the same IDs (or is a copy from before the cluster grew); its data is not the cluster's",
                wal_member,
                wal_cluster
            ),
            REMEDY_EMPTY_FORMED,
        )
    } else if rec.self_removed {
        decision(
            Row::Removed,
            format!(
                "the data directory records the removal of its own member {} from cluster {}: the member was removed",
                wal_member,
                wal_cluster
            ),
            REMEDY_REMOVED,
        )
    } else if let (true, Some(why)) = (removed, &fork) {
        decision(
            Row::Fork,
            format!(
                "the data directory holds member {} of cluster {}; a cluster with that ID answers without it, but {why}: another history answers under this cluster ID (a re-bootstrapped or restored member), not the cluster this directory belongs to",
                wal_member,
                wal_cluster
            ),
            REMEDY_FORK,
        )
    } else if removed {
        decision(
            Row::Removed,
            format!(
                "the data directory holds member {} of cluster {}, but the leader's member list of that cluster no longer has it while it has every other member the directory records: the member was removed",
                wal_member,
                wal_cluster
            ),
            REMEDY_REMOVED,
        )
    } else if let Some(derived) =
        i.me.derived
            .filter(|d| !vouched && (d.member_id != wal_member || d.cluster_id != wal_cluster))
    {
        decision(
            Row::ForeignIncarnation,
            format!(
                "the data directory holds member {} of cluster {}, but this bootstrap member's flags (--initial-cluster, --initial-cluster-token) make etcd member {} of cluster {}, and no live or operator source vouches for the directory's IDs: it belongs to another cluster, such as an earlier incarnation of a same-named one",
                wal_member,
                wal_cluster,
                derived.member_id,
                derived.cluster_id
            ),
            REMEDY_INCARNATION,
        )
    } else if let Some(founders) =
        formed_with_other_token.filter(|f| !vouched && formation_binds(f))
    {
        let founders: Vec<String> = founders
            .iter()
            .map(|m| format!("{} ({})", m.id, m.peer_urls.join(",")))
            .collect();
        decision(
            Row::ForeignFormation,
            format!(
                "the data directory holds member {} of cluster {}, whose WAL records that it was formed by {}: IDs this member's --initial-cluster-token does not derive (etcd gives a founding member sha1(peer URLs + token)), and no live or operator source vouches for the directory's IDs: it belongs to a cluster formed with another token, such as an earlier incarnation of a same-named one",
                wal_member,
                wal_cluster,
                founders.join(", ")
            ),
            REMEDY_INCARNATION_TOKEN,
        )
    } else if rec.empty_log {
        return decide_empty_log(i, wal_member, warnings);
    } else {
        let derived_agrees =
            i.me.derived
                .is_some_and(|d| d.member_id == wal_member && d.cluster_id == wal_cluster);
        let mut checked = vec!["the directory's own membership"];
        if derived_agrees {
            checked.push("the IDs its flags derive");
        }
        if op.is_some() {
            checked.push("the operator's record");
        }
        if live.is_some() {
            checked.push("the live cluster");
        }
        if i.hint_member_id.is_some() || i.hint_cluster_id.is_some() {
            checked.push("the env hints");
        }
        checked.extend(witnesses.iter().map(|(w, _)| w.name.as_str()));
        let mut reason = format!(
            "the data directory holds member {} of cluster {}, consistent with {}",
            wal_member,
            wal_cluster,
            checked.join(", ")
        );
        if let Some(d) = i.me.derived.filter(|_| !derived_agrees) {
            reason.push_str(&format!(
                "; its flags derive member {} of cluster {}, but another source vouches for the directory's IDs",
                d.member_id, d.cluster_id
            ));
        }
        if !stale.is_empty() {
            reason.push_str(&format!(
                "; the live member list shows this member started under that ID: {}",
                stale.join("; ")
            ));
        }
        // A start (any of rows 5, 5a, 5d, 5e), unless the etcd about to start
        // would refuse or panic on the directory (5c).
        let start = |row: Row, reason: String, floor: Option<(u64, String)>, rebase: bool| {
            let mut d = match rec.upgrade.as_ref().filter(|u| u.blocked) {
                Some(u) => refuse_version(u, &reason),
                None => decision(row, reason, ""),
            };
            if d.verdict == Verdict::Start {
                d.floor = floor;
                d.rebase_witness = rebase;
            }
            d
        };
        match log_position(i, rec, &witnesses, &mut warnings) {
            LogPosition::Refused(d) => d,
            LogPosition::Held(floor) if stale.is_empty() => start(Row::Start, reason, floor, false),
            LogPosition::Held(floor) => start(Row::StartStaleRecord, reason, floor, false),
            LogPosition::CatchingUp { floor, why } => start(
                Row::StartCatchingUp,
                format!("{reason}; {why}"),
                Some(floor),
                false,
            ),
            LogPosition::RestoredAbove { why } => start(
                Row::StartRestoredAbove,
                format!("{reason}; {why}"),
                None,
                true,
            ),
        }
    };
    if let Some(u) = &rec.upgrade {
        warnings.extend(
            u.warnings()
                .map(|f| format!("etcd {}: {} ({})", u.target, f.message, f.remedy)),
        );
    }
    if !warnings.is_empty() && d.verdict == Verdict::Start {
        d.reason
            .push_str(&format!(" (warning: {})", warnings.join("; ")));
    }
    d.warnings = warnings;
    d
}

/// What the directory's log position says, against what this member is known
/// to have reached (docs/decision-table.md, rows 5d, 5e, 6e–6g).
enum LogPosition {
    /// Not behind anything known: starts, held to this position (the highest
    /// known one, for readiness), if any.
    Held(Option<(u64, String)>),
    /// Behind, but the leader and a majority of its cluster answer with a
    /// commit at or past the position: raft's leader completeness lets it
    /// catch up from them.
    CatchingUp {
        /// The position it must reach before it is ready.
        floor: (u64, String),
        /// The sentence for the reason.
        why: String,
    },
    /// A restore bumped above every revision the witnesses saw, no older
    /// history of its cluster running.
    RestoredAbove {
        /// The sentence for the reason.
        why: String,
    },
    /// Refused (rows 6e–6g).
    Refused(Decision),
}

/// A position this member is known to have reached, and who says so.
struct Reached<'a> {
    index: u64,
    term: Option<u64>,
    revision: Option<i64>,
    by: String,
    witness: Option<&'a WitnessFacts>,
}

fn log_position(
    i: &Inputs,
    rec: &Recorded,
    witnesses: &[(&WitnessFacts, bool)],
    warnings: &mut Vec<String>,
) -> LogPosition {
    let (end, end_term) = (rec.log_end_index, rec.log_end_term);
    let mine = |w: &WitnessFacts| {
        w.member_id == Some(rec.member_id) && w.cluster_id == Some(rec.cluster_id)
    };
    // The witnesses' marks of this member's history. A mark of an earlier
    // sidecar is the in-memory commit index, which a crash leaves a Ready
    // batch ahead of the disk: said, never held against the directory.
    let mut reached: Vec<Reached> = Vec::new();
    for (w, _) in witnesses.iter().filter(|(w, _)| mine(w)) {
        let Some(index) = w.raft_index.filter(|&n| n > 0) else {
            continue;
        };
        if !w.durable {
            if index > end {
                warnings.push(format!(
                    "{} records raft index {index}, above where this directory's log ends ({end}); it was written by an earlier sidecar, whose index is not proven to have reached the disk, so it is not held against the directory: if this volume was put back to an older copy, do not start it. The next renewal records a proven position",
                    w.name
                ));
            }
            continue;
        }
        reached.push(Reached {
            index,
            term: w.raft_term,
            revision: w.revision,
            by: w.name.clone(),
            witness: Some(w),
        });
    }
    let behind_witness = reached
        .iter()
        .filter(|r| r.index > end || r.term.is_some_and(|t| t > end_term))
        .max_by_key(|r| r.index);
    let applied_past = match (rec.applied_index, rec.applied_term) {
        (Some(ci), term) if ci > end || term.is_some_and(|t| t > end_term) => Some(Reached {
            index: ci,
            term,
            revision: None,
            by: "its own backend (consistent index)".into(),
            witness: None,
        }),
        _ => None,
    };
    let highest = reached
        .iter()
        .map(|r| (r.index, r.by.clone()))
        .chain(
            rec.applied_index
                .map(|ci| (ci, "its own backend".to_owned())),
        )
        .max_by_key(|(n, _)| *n);
    if behind_witness.is_none() && applied_past.is_none() {
        return LogPosition::Held(highest);
    }
    let need = highest.clone().unwrap_or((end, String::new()));
    let position = format!("its log ends at index {end} (term {end_term})");
    let live = i.live.get().filter(|l| l.cluster_id == rec.cluster_id);

    if rec.restored {
        if let Some(w) = &behind_witness {
            let bumped = matches!((rec.revision, w.revision), (Some(r), Some(wr)) if r > wr);
            // An older history of its cluster still running: a member of its
            // cluster past its log, at a revision below its own.
            let older_running = live.and_then(|l| {
                l.positions.iter().find(|p| {
                    p.raft_index.is_some_and(|n| n > end)
                        && matches!((p.revision, rec.revision), (Some(pr), Some(r)) if pr < r)
                })
            });
            if bumped && older_running.is_none() {
                return LogPosition::RestoredAbove {
                    why: format!(
                        "it was made by a snapshot restore (its log restarts at index {end}), below the raft index {} {} records, but its revision {} is above the revision {} recorded there: a restore bumped above every revision clients saw (a deliberate rollback); the witnesses' position is re-based",
                        w.index,
                        w.by,
                        rec.revision.unwrap_or_default(),
                        w.revision.unwrap_or_default()
                    ),
                };
            }
            let mut reason = format!(
                "the data directory of member {} was made by a snapshot restore: {position}, behind the raft index {} (term {}) that {} records for this member",
                rec.member_id,
                w.index,
                w.term.unwrap_or_default(),
                w.by
            );
            match older_running {
                Some(p) => reason.push_str(&format!(
                    ", and member {} of its cluster answers at raft index {} and revision {}, below this directory's revision {}: an older history of the cluster still runs, and the restored data must not join it (the cluster's newer entries would be applied on top of the snapshot's state)",
                    p.member_id,
                    p.raft_index.unwrap_or_default(),
                    p.revision.unwrap_or_default(),
                    rec.revision.unwrap_or_default()
                )),
                None => reason.push_str(&format!(
                    ", and its revision {} is not above the revision {} recorded there: clients would see revisions go backwards",
                    rec.revision.map_or("unknown".into(), |r| r.to_string()),
                    w.revision.map_or("unknown".into(), |r| r.to_string())
                )),
            }
            return LogPosition::Refused(decision(
                Row::RestoredBehind,
                reason,
                &remedy_restored(w, rec.revision),
            ));
        }
    }

    // Raft's leader completeness: a leader holds every committed entry. A
    // leader of its cluster, heard with a majority, whose commit is at or past
    // the position, holds what this directory lost, and a member behind it
    // only catches up (etcd skips entries its backend already applied).
    if !rec.restored {
        if let Some(l) = live.filter(|l| l.leader_heard && l.majority_heard) {
            if let Some(commit) = l.leader_raft_index.filter(|&c| c >= need.0) {
                return LogPosition::CatchingUp {
                    floor: need.clone(),
                    why: format!(
                        "{position}, behind the index {} that {} records, but the leader and a majority of cluster {} answer with commit {commit}: it catches up from them",
                        need.0, need.1, l.cluster_id
                    ),
                };
            }
        }
    }
    let cluster_says = match i.live.get() {
        None => format!("no member of its cluster answered ({})", i.live.describe()),
        Some(l) if l.cluster_id != rec.cluster_id => format!(
            "the endpoints answer for cluster {}, not its cluster {}",
            l.cluster_id, rec.cluster_id
        ),
        Some(l) if !l.leader_heard => "its cluster answers without a leader".to_owned(),
        Some(l) if !l.majority_heard => {
            "fewer than half of its cluster's voting members answered".to_owned()
        }
        Some(l) => match l.leader_raft_index {
            Some(c) => format!(
                "its cluster's leader answers with commit {c}, below {}: the cluster itself is behind that position (every member restored, or a position that was never reached)",
                need.0
            ),
            None => "its cluster's leader did not report its commit index".to_owned(),
        },
    };
    match (behind_witness, applied_past) {
        (Some(w), _) => LogPosition::Refused(decision(
            Row::RolledBack,
            format!(
                "the data directory of member {} of cluster {} went backwards: {position}, behind the raft index {} (term {}) that {} records this member's disk held: a volume put back to an older copy of itself. Started alone it could vote in a leader without the entries after {end}, which this member helped commit; {cluster_says}",
                rec.member_id,
                rec.cluster_id,
                w.index,
                w.term.unwrap_or_default(),
                w.by
            ),
            &remedy_rolled_back(w, rec),
        )),
        (None, Some(a)) => LogPosition::Refused(decision(
            Row::AppliedPastLog,
            format!(
                "the data directory of member {} of cluster {} went backwards: its backend applied index {}{}, but {position}: the WAL was put back to an older copy under a current db (a --wal-dir volume restored alone), or its last segment lost its head. Started alone it could vote in a leader without the entries its data already applied, and the members would diverge for good; {cluster_says}",
                rec.member_id,
                rec.cluster_id,
                a.index,
                a.term.map(|t| format!(" (term {t})")).unwrap_or_default()
            ),
            REMEDY_APPLIED_PAST_LOG,
        )),
        (None, None) => LogPosition::Held(highest),
    }
}

const REMEDY_APPLIED_PAST_LOG: &str = "keep the directory (its backend holds data its WAL lost). Either bring back the members that hold the cluster's data: once the leader and a majority answer with a commit at or past the backend's index, this member starts by itself and catches up (the kubelet retries preflight); or remove and re-add this member (etcdctl member remove, wipe, member add; with the operator, delete the EtcdMember). For a cluster of this one member, make a snapshot of its own backend and restore it (copy member/snap/db, then etcdutl snapshot restore <copy> --skip-hash-check with this member's name, --initial-cluster and token): that rebuilds a WAL that holds what the backend applied";

fn remedy_rolled_back(w: &Reached, rec: &Recorded) -> String {
    let clear = w.witness.map(|w| w.clear.clone()).unwrap_or_default();
    format!(
        "do not wipe it. Either bring back the members that hold the newer data (their directories are intact): once the leader and a majority of cluster {} answer with a commit at or past {}, this member starts by itself and catches up (the kubelet retries preflight); or, if this member's newer data is lost for good and the others hold the cluster's data, remove and re-add it (etcdctl member remove {}, wipe, member add; with the operator, delete the EtcdMember). If every member was put back to older copies on purpose (a rollback of the whole cluster), acknowledge it by removing each member's witness ({clear}, and the same for the others), or restore them instead with etcdutl snapshot restore --bump-revision above revision {} --mark-compacted (etcd-member-agent restore --bump-revision auto reads it from the witness), so clients' watches never see revisions go backwards",
        rec.cluster_id,
        w.index,
        rec.member_id,
        w.revision.map_or("the one the witness recorded".into(), |r| r.to_string()),
    )
}

fn remedy_restored(w: &Reached, revision: Option<i64>) -> String {
    let clear = w.witness.map(|w| w.clear.clone()).unwrap_or_default();
    format!(
        "if only this member was restored while the others kept the cluster running, never start it into that cluster: remove and re-add it (it receives the data from the others). If every member was restored on purpose, either acknowledge the rollback by removing each member's witness ({clear}, and the same for the others), or restore again with etcdutl snapshot restore --bump-revision N --mark-compacted where N takes the revision above {} (this directory is at {}; etcd-member-agent restore --bump-revision auto chooses N from the witness), so clients' watches never see revisions go backwards",
        w.revision.map_or("the one the witness recorded".into(), |r| r.to_string()),
        revision.map_or("an unknown revision".into(), |r| r.to_string()),
    )
}

/// Row 5c: the directory is this member's, but the etcd about to start would
/// refuse or panic on it. The findings are the reason; their remedies the remedy.
fn refuse_version(u: &UpgradeCheck, identity: &str) -> Decision {
    let found: Vec<String> = u
        .blockers()
        .map(|f| format!("{} [{}; {}]", f.message, f.code, f.rule))
        .collect();
    let remedy: Vec<String> = u.blockers().map(|f| f.remedy.clone()).collect();
    decision(
        Row::Version,
        format!(
            "{identity}; but etcd {} would refuse or panic on it: {}",
            u.target,
            found.join("; ")
        ),
        &format!(
            "do not start etcd {} on this directory yet (the data is intact): {}",
            u.target,
            remedy.join("; ")
        ),
    )
}

/// A WAL with no entry and no snapshot is, for what it holds, an empty
/// directory: etcd re-creates exactly that on a wiped directory when it
/// starts with `=existing` (and then panics `tocommit(N) is out of range`).
/// So the question is the empty directory's — did this member start before?
/// — and only the answer "never" lets etcd start on it.
fn decide_empty_log(i: &Inputs, wal_member: MemberId, warnings: Vec<String>) -> Decision {
    let empty = decide_empty(i);
    let what = format!(
        "the WAL of member {} holds no entry and no snapshot (etcd re-creates such a WAL when it starts on a wiped directory)",
        wal_member
    );
    let mut d = match empty.row {
        Row::EmptyFormed | Row::JoinSelfOnly => decision(
            Row::EmptyLogFormed,
            format!("{what}, but this member started before: {}", empty.reason),
            REMEDY_EMPTY_FORMED,
        ),
        Row::Join | Row::Bootstrap | Row::AllowedWithoutEvidence => decision(
            Row::StartEmptyLog,
            format!(
                "{what}; the first start of this member ended before its first entry, and {}",
                empty.reason
            ),
            "",
        ),
        _ => Decision {
            reason: format!("{what}; {}", empty.reason),
            ..empty
        },
    };
    d.warnings = warnings;
    d
}

/// What the witnesses say of an empty directory's member.
struct WitnessSays {
    /// One sentence per witness saying this member started.
    started: Vec<String>,
    /// The commands that clear those witnesses.
    clears: Vec<String>,
    /// Witnesses of another incarnation, or of the member's previous ID.
    warnings: Vec<String>,
}

/// A witness exists only because this member's etcd answered its sidecar.
/// Only a re-added member's new, unstarted ID makes it stale (as for the
/// recorded IDs): one whose member ID differs, or cannot be read — the live
/// list, trusted for a join only with the leader and a majority, says this
/// member never started under its new ID. A witness of another incarnation of
/// a cluster of the same names says nothing about this member.
fn witness_says(i: &Inputs, readded_as: Option<MemberId>) -> WitnessSays {
    let (witnesses, mut warnings) = i.usable_witnesses();
    let mut started = Vec::new();
    let mut clears = Vec::new();
    for (w, _) in &witnesses {
        if readded_as.is_some_and(|new| w.member_id != Some(new)) {
            warnings.push(format!(
                "{} records member {}, not this member's new ID: a record of its incarnation before it was removed and added again ({})",
                w.name,
                w.member_id.map_or("(unreadable)".into(), |m| m.to_string()),
                w.clear
            ));
            continue;
        }
        let ids = match (w.member_id, w.cluster_id) {
            (Some(m), Some(c)) => format!("member {} of cluster {}", m, c),
            _ => "this member (its IDs unreadable)".to_owned(),
        };
        let index = w
            .raft_index
            .map(|n| format!(" at raft index {n}"))
            .unwrap_or_default();
        let pod = w
            .pod_uid
            .as_deref()
            .map(|u| format!(", written by Pod {u}"))
            .unwrap_or_default();
        started.push(format!("{} records {ids} running{index}{pod}", w.name));
        clears.push(w.clear.clone());
    }
    WitnessSays {
        started,
        clears,
        warnings,
    }
}

/// A member that was removed and added again shows up unstarted under a new
/// ID: IDs the operator or env recorded for its previous incarnation are stale
/// then.
fn readded_as(i: &Inputs) -> Option<MemberId> {
    i.live
        .get()
        .and_then(|l| l.find(&i.me))
        .filter(|m| !m.started)
        .map(|m| m.id)
}

fn decide_empty(i: &Inputs) -> Decision {
    let witness = witness_says(i, readded_as(i));
    let mut d = empty_rows(i, &witness);
    for w in witness.warnings {
        if !d.warnings.contains(&w) {
            d.warnings.push(w);
        }
    }
    d
}

fn empty_rows(i: &Inputs, witness: &WitnessSays) -> Decision {
    let op = i.operator.get();
    let live = i.live.get();
    let seed = match op {
        Some(op) => op.bootstrap,
        None => i.me.self_only_initial_cluster,
    };
    let live_me = live.and_then(|l| l.find(&i.me));
    let readded_as = readded_as(i);
    let recorded_started = |id: Option<MemberId>| match (id, readded_as) {
        (Some(old), Some(new)) => old == new,
        (Some(_), None) => true,
        (None, _) => false,
    };

    let mut started = Vec::new();
    if let Some(m) = live_me.filter(|m| m.started) {
        started.push(format!(
            "the live member list shows member {} ({}) as started",
            m.id, m.name
        ));
    }
    if let Some(op) = op {
        if recorded_started(op.member_id) {
            started.push(format!(
                "the EtcdMember records memberID {}",
                op.member_id.unwrap_or_default()
            ));
        }
    }
    if recorded_started(i.hint_member_id) {
        started.push(format!(
            "ETCD_MEMBER_ID is {}",
            i.hint_member_id.unwrap_or_default()
        ));
    }
    started.extend(witness.started.iter().cloned());
    if seed && readded_as.is_none() {
        if let Some(cid) = op.and_then(|o| o.cluster_id) {
            started.push(format!(
                "this is the seed and the EtcdCluster records clusterID {}",
                cid
            ));
        }
        if let Some(cid) = i.hint_cluster_id {
            started.push(format!("this is the seed and ETCD_CLUSTER_ID is {}", cid));
        }
        if let Some(l) = live {
            started.push(format!(
                "this is the seed and a live cluster {} already exists without it",
                l.cluster_id
            ));
        }
    }
    if !started.is_empty() {
        let mut remedy = REMEDY_EMPTY_FORMED.to_owned();
        if !witness.clears.is_empty() {
            remedy.push_str(&format!(
                " If this is a new cluster that reuses this member's name (its volume is fresh, nothing of it ever ran) and the witness is a leftover of an earlier cluster of the same names and token, remove the witness ({}) and restart the Pod; give each cluster its own --initial-cluster-token so that its witnesses cannot be mistaken for another's",
                witness.clears.join("; ")
            ));
        }
        return decision(
            Row::EmptyFormed,
            format!(
                "the data directory is empty but this member started before: {}",
                started.join("; ")
            ),
            &remedy,
        );
    }

    // A join rests on the live list alone; it must be a list worth trusting.
    if let Some(l) = live.filter(|l| readded_as.is_some() && !l.other_cluster_ids.is_empty()) {
        let ids: Vec<String> = std::iter::once(l.cluster_id)
            .chain(l.other_cluster_ids.iter().copied())
            .map(|id| id.to_string())
            .collect();
        return decision(
            Row::JoinUntrusted,
            format!(
                "the data directory is empty and the live endpoints answer for different clusters ({})",
                ids.join(", ")
            ),
            "point ETCD_PEER_ENDPOINTS at this cluster's members only, then restart the Pod",
        );
    }
    if let Some(l) = live.filter(|l| {
        readded_as.is_some()
            && !(l.majority_heard && l.leader_heard)
            && !l.sole_other_voter_heard(&i.me)
    }) {
        let short = if l.majority_heard {
            "no answer came from the leader"
        } else {
            "fewer than half of its voting members answered"
        };
        return decision(
            Row::JoinUntrusted,
            format!(
                "the data directory is empty and the live cluster {} lists this member as added but never started, \
but {short}: a lagging member's list can miss that this member started",
                l.cluster_id
            ),
            "list every member's client URL in ETCD_PEER_ENDPOINTS (a single Service URL is one voice) and make the leader and half of the members reachable, then restart the Pod; while the cluster has lost quorum, restore quorum first (start the members whose data is intact) — see docs/decision-table.md, row 8b",
        );
    }
    if let Some(id) = readded_as {
        // etcd joins through the other members its --initial-cluster names. The
        // seed's names only itself: with =new etcd would bootstrap a second cluster
        // carrying the old member and cluster IDs, with =existing it finds no peer.
        if i.me.self_only_initial_cluster {
            return decision(
                Row::JoinSelfOnly,
                format!(
                    "the data directory is empty and the live cluster lists this member ({}) as added but never started, \
but its --initial-cluster names only itself: etcd cannot join with these flags",
                    id
                ),
                REMEDY_JOIN_FLAGS,
            );
        }
        return decision(
            Row::Join,
            format!(
                "the data directory is empty and the live cluster lists this member ({}) as added but never started",
                id
            ),
            "",
        );
    }
    if let Some(l) = live {
        return decision(
            Row::NotListed,
            format!(
                "the data directory is empty and the live cluster {} does not list this member",
                l.cluster_id
            ),
            "add the member first (etcdctl member add <name> --peer-urls=<url>), then restart the Pod",
        );
    }
    // The Pod's own history: the operator records the Pod it last saw for
    // this member. Another Pod than this one ran before — its data is gone,
    // or the operator has not latched the IDs yet (the window PR 355 leaves).
    let earlier_pod = op.and_then(|o| o.pod_uid.as_deref()).filter(|recorded| {
        i.me.pod_uid
            .as_deref()
            .is_some_and(|mine| mine != *recorded)
    });
    if seed {
        if let Some(op) = op {
            if op.member_id.is_none() && op.cluster_id.is_none() {
                if let Some(recorded) = earlier_pod {
                    return decision(
                        Row::BootstrapEarlierPod,
                        format!(
                            "the data directory is empty and the operator records neither a member ID nor a cluster ID, but the EtcdMember names Pod {recorded}, not this Pod ({}): an earlier Pod of this member ran, so the cluster may have formed before the operator latched its IDs",
                            i.me.pod_uid.as_deref().unwrap_or_default()
                        ),
                        "find out whether the earlier Pod formed the cluster (its logs, the other members, the operator's events); if it did, treat this as a wiped member (remove and re-add it); if it never started etcd, clear EtcdMember.status.podUID and restart the Pod",
                    );
                }
                if let Answer::NoAnswer(why) = &i.witness {
                    return decision(
                        Row::BootstrapWitnessUnread,
                        format!(
                            "the data directory is empty, this is the seed, and the operator records neither a member ID nor a cluster ID, but the witness Lease could not be read ({why}): the seed may have formed the cluster before the operator latched its IDs"
                        ),
                        "let the agent read its witness Lease (RBAC get on leases.coordination.k8s.io, see deploy/base/role.yaml) and retry; if this member never started, that read answers 404 and it bootstraps",
                    );
                }
                let mut d = decision(
                    Row::Bootstrap,
                    "the data directory is empty, this is the seed, and the operator records neither a member ID nor a cluster ID: the cluster has not formed".into(),
                    "",
                );
                if i.me.pod_uid.is_none() {
                    d.warnings.push(
                        "POD_UID is not set: the Pod's history (EtcdMember.status.podUID) was not checked".into(),
                    );
                }
                return d;
            }
        }
    }
    let silent = describe_silence(i);
    if i.allow_bootstrap_without_evidence {
        let mut d = decision(
            Row::AllowedWithoutEvidence,
            format!("the data directory is empty and no source could answer ({silent}); allowed by --allow-bootstrap-without-evidence"),
            "",
        );
        if !seed {
            d.verdict = Verdict::Join;
        }
        return d;
    }
    decision(
        Row::NoEvidence,
        format!("the data directory is empty and nothing could establish whether this member started before ({silent})"),
        "make the live cluster (ETCD_PEER_ENDPOINTS) or the Kubernetes API reachable and retry; for a deployment without an operator that is bootstrapping for the first time, pass --allow-bootstrap-without-evidence",
    )
}

fn describe_silence(i: &Inputs) -> String {
    let mut s = format!(
        "live cluster: {}; kubernetes: {}",
        i.live.describe(),
        i.operator.describe()
    );
    if let Answer::NoAnswer(why) = &i.witness {
        s.push_str(&format!("; witness Lease: {why}"));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    const ME: &str = "http://m1:2380";

    type Setter = Box<dyn Fn(&mut Inputs)>;

    fn me() -> SelfFacts {
        SelfFacts {
            name: Some("m1".into()),
            peer_urls: vec![ME.into()],
            ..Default::default()
        }
    }

    fn seed_me() -> SelfFacts {
        SelfFacts {
            self_only_initial_cluster: true,
            ..me()
        }
    }

    fn inputs(state: Dir) -> Inputs {
        Inputs {
            dir: DirFacts {
                state,
                running: false,
            },
            me: me(),
            live: Answer::NotConfigured,
            operator: Answer::NotConfigured,
            witness: Answer::NotConfigured,
            witness_file: None,
            hint_member_id: None,
            hint_cluster_id: None,
            allow_bootstrap_without_evidence: false,
        }
    }

    /// What the initialized directory of `i` records.
    fn rec(i: &mut Inputs) -> &mut Recorded {
        match &mut i.dir.state {
            Dir::Initialized(r) => r,
            other => panic!("not an initialized directory: {other:?}"),
        }
    }

    fn initialized(member: u64, cluster: u64) -> Inputs {
        let mut i = inputs(Dir::Initialized(Box::default()));
        rec(&mut i).member_id = MemberId::new(member);
        rec(&mut i).cluster_id = ClusterId::new(cluster);
        rec(&mut i).recorded_peer_urls = Some(vec![ME.into()]);
        i
    }

    fn live(cluster: u64, members: &[(u64, &str, &str, bool)]) -> Answer<LiveFacts> {
        Answer::Answered(LiveFacts {
            cluster_id: ClusterId::new(cluster),
            members: members
                .iter()
                .map(|&(id, name, url, started)| LiveMemberFacts {
                    id: MemberId::new(id),
                    name: name.into(),
                    peer_urls: vec![url.into()],
                    started,
                    is_learner: false,
                })
                .collect(),
            other_cluster_ids: Vec::new(),
            majority_heard: true,
            leader_heard: true,
            raft_term: None,
            leader_raft_index: None,
            positions: Vec::new(),
        })
    }

    /// `answer` changed by `f` (when it is an answer).
    fn altered(mut answer: Answer<LiveFacts>, f: impl FnOnce(&mut LiveFacts)) -> Answer<LiveFacts> {
        if let Answer::Answered(l) = &mut answer {
            f(l);
        }
        answer
    }

    fn op(bootstrap: bool, member: Option<u64>, cluster: Option<u64>) -> Answer<OperatorFacts> {
        Answer::Answered(OperatorFacts {
            bootstrap,
            member_id: member.map(MemberId::new),
            cluster_id: cluster.map(ClusterId::new),
            pod_uid: None,
            cluster_token: None,
            cluster_uid: None,
        })
    }

    fn verdict(i: &Inputs) -> Verdict {
        decide(i).verdict
    }

    #[test]
    fn each_verdict_has_its_documented_exit_code() {
        use Verdict::*;
        let want = [
            (Start, 0),
            (Bootstrap, 0),
            (Join, 0),
            (RefuseEmptyFormed, 10),
            (RefuseForeign, 11),
            (RefuseCorrupt, 12),
            (RefusePartial, 13),
            (PhaseUnknown, 14),
            (RefuseRunning, 15),
            (Unreadable, 3),
        ];
        for (v, code) in want {
            assert_eq!(v.exit().code(), code, "{v:?}");
            assert_eq!(serde_json::to_value(v).unwrap(), v.name());
        }
    }

    #[test]
    fn row_initialized_matching_ids_starts() {
        let mut i = initialized(1, 9);
        i.operator = op(false, Some(1), Some(9));
        i.live = live(9, &[(1, "m1", ME, true)]);
        i.hint_member_id = Some(MemberId::new(1));
        i.hint_cluster_id = Some(ClusterId::new(9));
        assert_eq!(verdict(&i), Verdict::Start);
        assert!(decide(&i).remedy.is_empty());
    }

    #[test]
    fn row_initialized_with_no_other_source_starts() {
        assert_eq!(verdict(&initialized(1, 9)), Verdict::Start);
    }

    #[test]
    fn row_initialized_foreign_by_each_source() {
        let cases: Vec<Setter> = vec![
            Box::new(|i| i.operator = op(false, Some(2), None)),
            Box::new(|i| i.operator = op(false, None, Some(8))),
            Box::new(|i| i.live = live(8, &[])),
            Box::new(|i| i.live = live(9, &[(2, "m1", ME, true)])),
            Box::new(|i| i.hint_member_id = Some(MemberId::new(2))),
            Box::new(|i| i.hint_cluster_id = Some(ClusterId::new(8))),
            Box::new(|i| rec(i).recorded_peer_urls = Some(vec!["http://m2:2380".into()])),
        ];
        for (n, set) in cases.iter().enumerate() {
            let mut i = initialized(1, 9);
            set(&mut i);
            let d = decide(&i);
            assert_eq!(d.verdict, Verdict::RefuseForeign, "case {n}: {d:?}");
            assert!(!d.remedy.is_empty());
        }
    }

    #[test]
    fn row_refusals_of_the_directory_itself() {
        assert_eq!(
            verdict(&inputs(Dir::Partial(String::new()))),
            Verdict::RefusePartial
        );
        assert_eq!(
            verdict(&inputs(Dir::Corrupt(String::new()))),
            Verdict::RefuseCorrupt
        );
        assert_eq!(
            verdict(&inputs(Dir::Unreadable {
                problem: String::new(),
                symlinked: None
            })),
            Verdict::Unreadable
        );
        let mut running = initialized(1, 9);
        running.dir.running = true;
        assert_eq!(verdict(&running), Verdict::RefuseRunning);
    }

    #[test]
    fn running_wins_over_the_identity_checks() {
        let mut i = initialized(1, 9);
        i.dir.running = true;
        i.hint_member_id = Some(MemberId::new(2));
        assert_eq!(verdict(&i), Verdict::RefuseRunning);
    }

    #[test]
    fn empty_member_that_started_before_is_refused_by_any_one_source() {
        let cases: Vec<Setter> = vec![
            Box::new(|i| i.operator = op(false, Some(1), None)),
            Box::new(|i| i.live = live(9, &[(1, "m1", ME, true)])),
            Box::new(|i| i.hint_member_id = Some(MemberId::new(1))),
        ];
        for (n, set) in cases.iter().enumerate() {
            let mut i = inputs(Dir::Empty);
            set(&mut i);
            let d = decide(&i);
            assert_eq!(d.verdict, Verdict::RefuseEmptyFormed, "case {n}: {d:?}");
            assert_eq!(d.verdict.exit().code(), 10);
        }
    }

    #[test]
    fn empty_seed_of_a_formed_cluster_is_refused() {
        let cases: Vec<Setter> = vec![
            Box::new(|i| i.operator = op(true, None, Some(9))),
            Box::new(|i| i.operator = op(true, Some(1), Some(9))),
            Box::new(|i| i.hint_cluster_id = Some(ClusterId::new(9))),
            Box::new(|i| i.live = live(9, &[(2, "m2", "http://m2:2380", true)])),
            Box::new(|i| {
                i.operator = op(true, None, None);
                i.live = live(9, &[(2, "m2", "http://m2:2380", true)]);
            }),
        ];
        for (n, set) in cases.iter().enumerate() {
            let mut i = inputs(Dir::Empty);
            i.me = seed_me();
            set(&mut i);
            assert_eq!(verdict(&i), Verdict::RefuseEmptyFormed, "case {n}");
        }
    }

    #[test]
    fn empty_seed_before_formation_bootstraps_on_the_operators_word() {
        let mut i = inputs(Dir::Empty);
        i.operator = op(true, None, None);
        i.live = Answer::NoAnswer("connection refused".into());
        assert_eq!(verdict(&i), Verdict::Bootstrap);
    }

    #[test]
    fn empty_added_member_never_started_joins() {
        let mut i = inputs(Dir::Empty);
        i.live = live(9, &[(2, "m0", "http://m0:2380", true), (7, "", ME, false)]);
        assert_eq!(verdict(&i), Verdict::Join);
        i.operator = op(false, None, Some(9));
        i.hint_cluster_id = Some(ClusterId::new(9));
        assert_eq!(verdict(&i), Verdict::Join);
    }

    #[test]
    fn a_join_needs_the_leader_and_half_the_voters_heard_and_one_cluster() {
        let unstarted = live(9, &[(2, "m0", "http://m0:2380", true), (7, "", ME, false)]);
        for allow in [false, true] {
            let mut i = inputs(Dir::Empty);
            i.allow_bootstrap_without_evidence = allow;
            i.live = altered(unstarted.clone(), |l| l.majority_heard = false);
            let d = decide(&i);
            assert_eq!(d.verdict, Verdict::PhaseUnknown, "{d:?}");
            assert!(d.reason.contains("fewer than half"), "{d:?}");
            // Two voters, this member and m0: without a leader, m0's word is
            // enough only when m0 itself answered.
            i.live = altered(unstarted.clone(), |l| l.leader_heard = false);
            let d = decide(&i);
            assert_eq!(d.verdict, Verdict::PhaseUnknown, "{d:?}");
            assert!(d.reason.contains("leader"), "{d:?}");
            i.live = altered(unstarted.clone(), |l| {
                l.leader_heard = false;
                l.positions = vec![LivePosition {
                    member_id: MemberId::new(2),
                    raft_index: Some(9),
                    revision: None,
                }];
            });
            let d = decide(&i);
            assert_eq!(d.verdict, Verdict::Join, "{d:?}");
            // With a third voter, no.
            i.live = altered(i.live.clone(), |l| {
                l.members.push(LiveMemberFacts {
                    id: MemberId::new(3),
                    name: "m2".into(),
                    peer_urls: vec!["http://m2:2380".into()],
                    started: true,
                    is_learner: false,
                })
            });
            assert_eq!(decide(&i).verdict, Verdict::PhaseUnknown);
            i.live = altered(unstarted.clone(), |l| {
                l.other_cluster_ids = vec![ClusterId::new(5)]
            });
            let d = decide(&i);
            assert_eq!(d.verdict, Verdict::PhaseUnknown, "{d:?}");
            assert!(d.reason.contains("different clusters"), "{d:?}");
        }
    }

    #[test]
    fn endpoints_of_different_clusters_never_let_an_empty_seed_bootstrap() {
        // The operator records nothing yet (its word alone would bootstrap);
        // a live cluster answered, whichever: the seed must not bootstrap.
        let mut i = inputs(Dir::Empty);
        i.me = seed_me();
        i.operator = op(true, None, None);
        i.allow_bootstrap_without_evidence = true;
        i.live = altered(live(9, &[(2, "m1", "http://m1:2380", true)]), |l| {
            l.other_cluster_ids = vec![ClusterId::new(5)];
            l.majority_heard = false;
        });
        assert_eq!(verdict(&i), Verdict::RefuseEmptyFormed);
    }

    #[test]
    fn an_initialized_dir_must_belong_to_a_cluster_the_endpoints_reach() {
        let mut i = initialized(1, 9);
        i.live = live(9, &[(1, "m1", ME, true)]);
        assert_eq!(verdict(&i), Verdict::Start);
        // One endpoint of another cluster in the list: the directory still
        // belongs to a reachable cluster; start, and say what to fix.
        i.live = altered(i.live.clone(), |l| {
            l.other_cluster_ids = vec![ClusterId::new(5)]
        });
        let d = decide(&i);
        assert_eq!(d.verdict, Verdict::Start, "{d:?}");
        assert!(
            d.reason.contains("also reaches cluster 0000000000000005"),
            "{d:?}"
        );
        // The freshest view is the other cluster's: its member list says
        // nothing about this directory's member.
        i.live = altered(live(5, &[(3, "m1", ME, true)]), |l| {
            l.other_cluster_ids = vec![ClusterId::new(9)]
        });
        assert_eq!(verdict(&i), Verdict::Start);
        // Neither cluster is the directory's.
        i.live = altered(live(5, &[(3, "m1", ME, true)]), |l| {
            l.other_cluster_ids = vec![ClusterId::new(6)]
        });
        let d = decide(&i);
        assert_eq!(d.verdict, Verdict::RefuseForeign, "{d:?}");
        assert!(
            d.reason.contains("0000000000000005") && d.reason.contains("0000000000000006"),
            "{d:?}"
        );
    }

    #[test]
    fn a_readded_member_joins_even_with_its_old_recorded_id() {
        // Remedy path: remove + re-add gives a new ID; the old one in the operator
        // record and the frozen env must not block the fresh join.
        let mut i = inputs(Dir::Empty);
        i.live = live(9, &[(2, "m0", "http://m0:2380", true), (7, "", ME, false)]);
        i.operator = op(false, Some(1), Some(9));
        i.hint_member_id = Some(MemberId::new(1));
        i.hint_cluster_id = Some(ClusterId::new(9));
        assert_eq!(verdict(&i), Verdict::Join);
        // ...but if the recorded ID is the unstarted one, the records contradict
        // "never started": refuse.
        i.operator = op(false, Some(7), Some(9));
        assert_eq!(verdict(&i), Verdict::RefuseEmptyFormed);
    }

    #[test]
    fn a_readded_seed_with_its_self_only_initial_cluster_cannot_join() {
        // The seed's Pod keeps its frozen flags: with an --initial-cluster naming
        // only itself, etcd would bootstrap again (=new) or fail (=existing).
        let mut i = inputs(Dir::Empty);
        i.me = seed_me();
        i.live = live(9, &[(2, "m0", "http://m0:2380", true), (7, "", ME, false)]);
        for operator in [op(true, Some(1), Some(9)), Answer::NotConfigured] {
            i.operator = operator;
            let d = decide(&i);
            assert_eq!(d.verdict, Verdict::RefuseEmptyFormed, "{d:?}");
            assert!(d.remedy.contains("--initial-cluster"), "{d:?}");
        }
    }

    #[test]
    fn a_started_entry_by_name_outweighs_an_unstarted_one_by_url_in_any_order() {
        let old = (2, "m1", "http://old-m1:2380", true);
        let new = (7, "", ME, false);
        for members in [[old, new], [new, old]] {
            let mut i = inputs(Dir::Empty);
            i.live = live(9, &members);
            assert_eq!(verdict(&i), Verdict::RefuseEmptyFormed, "{members:?}");
        }
    }

    #[test]
    fn empty_member_missing_from_the_live_list_is_not_started() {
        let mut i = inputs(Dir::Empty);
        i.live = live(9, &[(2, "m0", "http://m0:2380", true)]);
        assert_eq!(verdict(&i), Verdict::PhaseUnknown);
    }

    #[test]
    fn empty_with_no_answer_fails_closed() {
        let mut i = inputs(Dir::Empty);
        i.live = Answer::NoAnswer("deadline exceeded".into());
        i.operator = Answer::NoAnswer("403 forbidden".into());
        let d = decide(&i);
        assert_eq!(d.verdict, Verdict::PhaseUnknown);
        assert!(d.reason.contains("403 forbidden") && d.reason.contains("deadline exceeded"));
        // Not even the seed shape is evidence on its own.
        i.me = seed_me();
        assert_eq!(verdict(&i), Verdict::PhaseUnknown);
        // A non-seed whose operator says "not started" still needs the live list.
        i.me = me();
        i.operator = op(false, None, None);
        assert_eq!(verdict(&i), Verdict::PhaseUnknown);
    }

    #[test]
    fn the_escape_hatch_bootstraps_only_when_nothing_answered() {
        let mut i = inputs(Dir::Empty);
        i.me = seed_me();
        i.allow_bootstrap_without_evidence = true;
        assert_eq!(verdict(&i), Verdict::Bootstrap);
        i.hint_cluster_id = Some(ClusterId::new(9));
        assert_eq!(verdict(&i), Verdict::RefuseEmptyFormed);
    }

    #[test]
    fn an_operator_fault_never_bootstraps_by_accident() {
        for me in [seed_me(), me()] {
            for fault in [
                "404 not found",
                "403 forbidden",
                "500",
                "timed out",
                "malformed",
            ] {
                let mut i = inputs(Dir::Empty);
                i.me = me.clone();
                i.operator = Answer::NoAnswer(fault.into());
                i.live = Answer::NoAnswer("connection refused".into());
                assert_eq!(verdict(&i), Verdict::PhaseUnknown, "{fault}");
            }
        }
    }

    fn blocked_check(blocks: bool) -> UpgradeCheck {
        UpgradeCheck {
            from: None,
            target: "3.7".into(),
            dir_line: Some("3.5".into()),
            blocked: blocks,
            findings: vec![crate::disk::upgrade::Finding {
                code: "v2-wal-raw",
                blocks,
                message: "raw v2 requests".into(),
                rule: "apply.Apply",
                remedy: "start it on 3.6 first".into(),
            }],
        }
    }

    #[test]
    fn row_5c_refuses_a_version_that_would_panic_only_where_the_directory_is_this_members() {
        let mut i = initialized(1, 9);
        rec(&mut i).upgrade = Some(blocked_check(true));
        let d = decide(&i);
        assert_eq!(
            (d.verdict, d.row),
            (Verdict::RefuseVersion, Row::Version),
            "{d:?}"
        );
        assert_eq!(d.verdict.exit().code(), 16);
        assert!(
            d.reason.contains("v2-wal-raw") && d.remedy.contains("3.6 first"),
            "{d:?}"
        );
        // Identity comes first: a foreign directory is foreign whatever etcd
        // version would start on it.
        let mut foreign = i.clone();
        foreign.operator = op(true, Some(2), None);
        assert_eq!(row(&foreign), Row::Foreign);
        // An empty directory has nothing to upgrade.
        let mut empty = inputs(Dir::Empty);
        empty.me = seed_me();
        // (`Dir::Empty` carries no upgrade check: the type has no room for one.)
        empty.allow_bootstrap_without_evidence = true;
        assert_eq!(row(&empty), Row::AllowedWithoutEvidence);
        // A finding etcd starts with is a warning, never a refusal.
        rec(&mut i).upgrade = Some(blocked_check(false));
        let d = decide(&i);
        assert_eq!((d.verdict, d.row), (Verdict::Start, Row::Start), "{d:?}");
        assert!(
            d.warnings.iter().any(|w| w.contains("raw v2 requests")),
            "{d:?}"
        );
    }

    fn row(i: &Inputs) -> Row {
        decide(i).row
    }

    const M0: &str = "http://m0:2380";

    #[test]
    fn every_row_names_its_verdict_and_the_docs_list_every_row() {
        let doc = include_str!("../docs/decision-table.md");
        let documented: Vec<&str> = doc
            .lines()
            .filter_map(|l| l.strip_prefix("| "))
            .filter_map(|l| l.split(" |").next())
            .filter(|id| id.chars().next().is_some_and(|c| c.is_ascii_digit()) && id.len() <= 3)
            .collect();
        let in_code: Vec<&str> = Row::ALL.iter().map(|r| r.id()).collect();
        assert_eq!(
            documented, in_code,
            "docs/decision-table.md rows vs Row::ALL"
        );
        for r in Row::ALL {
            assert_eq!(serde_json::to_value(r).unwrap(), r.id());
            let line = doc
                .lines()
                .find(|l| l.starts_with(&format!("| {} |", r.id())))
                .unwrap();
            assert!(
                line.contains(&format!("`{}`", r.verdict().name())),
                "row {} documents {:?}: {line}",
                r.id(),
                r.verdict()
            );
        }
    }

    #[test]
    fn regression_an_earlier_incarnations_volume_is_foreign_until_a_source_vouches() {
        // The seed's flags derive member 1 of cluster 9; the volume holds
        // member 3 of cluster 4 (another --initial-cluster-token).
        let mut i = initialized(3, 4);
        i.me = seed_me();
        i.me.derived = Some(DerivedIds {
            member_id: MemberId::new(1),
            cluster_id: ClusterId::new(9),
        });
        i.operator = op(true, None, None);
        let d = decide(&i);
        assert_eq!(
            (d.verdict, d.row),
            (Verdict::RefuseForeign, Row::ForeignIncarnation),
            "{d:?}"
        );
        // The IDs the flags derive start.
        let mut own = initialized(1, 9);
        own.me = i.me.clone();
        assert_eq!(row(&own), Row::Start);
        // A source vouching for the directory's IDs wins over the derivation
        // (a member whose URL was updated, then restarted).
        i.live = live(4, &[(3, "m1", ME, true)]);
        assert_eq!(row(&i), Row::Start);
        i.live = Answer::NotConfigured;
        i.operator = op(true, Some(3), None);
        assert_eq!(row(&i), Row::Start);
        // A joining member's IDs are not derived: nothing to contradict.
        let mut joiner = initialized(3, 4);
        joiner.me.derived = None;
        assert_eq!(row(&joiner), Row::Start);
    }

    #[test]
    fn regression_a_wal_recreated_on_a_wiped_dir_is_an_empty_member() {
        // etcd re-created the WAL with the old ID and no entry: the live list
        // shows the member started, so its data is gone.
        let mut i = initialized(1, 9);
        rec(&mut i).empty_log = true;
        i.live = live(9, &[(1, "m1", ME, true), (2, "m0", M0, true)]);
        let d = decide(&i);
        assert_eq!(
            (d.verdict, d.row),
            (Verdict::RefuseEmptyFormed, Row::EmptyLogFormed),
            "{d:?}"
        );
        assert_eq!(d.verdict.exit().code(), 10);
        // Any one source that says it started refuses, as for an empty dir.
        let mut i = initialized(1, 9);
        rec(&mut i).empty_log = true;
        i.operator = op(false, Some(1), Some(9));
        assert_eq!(row(&i), Row::EmptyLogFormed);
        // Nobody answers: not known, fails closed.
        let mut i = initialized(1, 9);
        rec(&mut i).empty_log = true;
        assert_eq!(row(&i), Row::NoEvidence);
        // The live list has it added but never started: a first start that
        // ended before its first entry; etcd may start on its WAL.
        i.live = live(9, &[(1, "", ME, false), (2, "m0", M0, true)]);
        let d = decide(&i);
        assert_eq!(
            (d.verdict, d.row),
            (Verdict::Start, Row::StartEmptyLog),
            "{d:?}"
        );
    }

    #[test]
    fn regression_an_earlier_pod_of_the_seed_never_bootstraps() {
        let mut i = inputs(Dir::Empty);
        i.me = seed_me();
        i.me.pod_uid = Some("pod-2".into());
        i.operator = Answer::Answered(OperatorFacts {
            bootstrap: true,
            pod_uid: Some("pod-1".into()),
            ..Default::default()
        });
        let d = decide(&i);
        assert_eq!(
            (d.verdict, d.row),
            (Verdict::PhaseUnknown, Row::BootstrapEarlierPod),
            "{d:?}"
        );
        // The operator names this very Pod: its first start.
        i.me.pod_uid = Some("pod-1".into());
        assert_eq!(row(&i), Row::Bootstrap);
        // Without POD_UID the history cannot be read: say so.
        i.me.pod_uid = None;
        let d = decide(&i);
        assert_eq!(d.row, Row::Bootstrap);
        assert!(d.warnings.iter().any(|w| w.contains("POD_UID")), "{d:?}");
    }

    #[test]
    fn regression_a_removed_member_is_refused_once_the_leader_and_a_majority_say_so() {
        let mut i = initialized(1, 9);
        i.live = live(9, &[(2, "m0", M0, true), (3, "m2", "http://m2:2380", true)]);
        let d = decide(&i);
        assert_eq!(
            (d.verdict, d.row),
            (Verdict::RefuseForeign, Row::Removed),
            "{d:?}"
        );
        assert!(d.remedy.contains("add the member again"), "{d:?}");
        // Without the leader or a majority the list may lag: not a removal.
        for f in [
            (|l: &mut LiveFacts| l.leader_heard = false) as fn(&mut LiveFacts),
            |l| l.majority_heard = false,
        ] {
            let mut j = i.clone();
            j.live = altered(j.live, f);
            assert_eq!(row(&j), Row::Start);
        }
    }

    #[test]
    fn regression_a_stale_recorded_id_after_remove_and_add_starts() {
        // Removed as 1, added again as 7, joined: the EtcdMember and the frozen
        // env still say 1.
        let mut i = initialized(7, 9);
        i.live = live(9, &[(7, "m1", ME, true), (2, "m0", M0, true)]);
        i.operator = op(false, Some(1), Some(9));
        i.hint_member_id = Some(MemberId::new(1));
        let d = decide(&i);
        assert_eq!(
            (d.verdict, d.row),
            (Verdict::Start, Row::StartStaleRecord),
            "{d:?}"
        );
        assert!(d.reason.contains("stale"), "{d:?}");
        // The recorded ID is a current member: the records contradict the dir.
        i.live = live(9, &[(7, "m1", ME, true), (1, "m0", M0, true)]);
        assert_eq!(row(&i), Row::Foreign);
        // No live list: nothing shows the record is stale.
        i.live = Answer::NotConfigured;
        assert_eq!(row(&i), Row::Foreign);
        // The cluster ID is never stale.
        i.live = live(9, &[(7, "m1", ME, true), (2, "m0", M0, true)]);
        i.operator = op(false, Some(1), Some(8));
        assert_eq!(row(&i), Row::Foreign);
    }

    #[test]
    fn regression_a_differently_spelled_peer_url_is_a_warning() {
        for spelled in ["http://m1:2380/", "HTTP://M1:2380", "http://m1:2380//"] {
            let mut i = initialized(1, 9);
            i.me.peer_urls = vec![spelled.into()];
            i.live = live(9, &[(1, "m1", ME, true)]);
            let d = decide(&i);
            assert_eq!(d.row, Row::Start, "{spelled}: {d:?}");
            assert!(d.warnings.is_empty(), "{spelled}: {d:?}");
        }
        // Another address for the same member (localhost for its IP): the name
        // and the live list agree: start, with a warning.
        let mut i = initialized(1, 9);
        rec(&mut i).recorded_name = Some("m1".into());
        i.me.peer_urls = vec!["http://localhost:2380".into()];
        i.live = live(9, &[(1, "m1", ME, true)]);
        let d = decide(&i);
        assert_eq!(d.row, Row::Start, "{d:?}");
        assert!(
            d.warnings.iter().any(|w| w.contains("advertise URL")),
            "{d:?}"
        );
        // Another member's directory: the names differ.
        rec(&mut i).recorded_name = Some("m2".into());
        assert_eq!(row(&i), Row::Foreign);
        // The live list has the directory's member under another name.
        rec(&mut i).recorded_name = Some("m1".into());
        i.live = live(9, &[(1, "m2", ME, true)]);
        assert_eq!(row(&i), Row::Foreign);
    }

    #[test]
    fn regression_a_symlinked_wal_dir_is_a_configuration_matter() {
        let i = inputs(Dir::Unreadable {
            problem: String::new(),
            symlinked: Some("/var/lib/etcd/member/wal".into()),
        });
        let d = decide(&i);
        assert_eq!(
            (d.verdict, d.row),
            (Verdict::Unreadable, Row::Layout),
            "{d:?}"
        );
        assert!(d.remedy.contains("--wal-dir"), "{d:?}");
        assert!(!d.remedy.contains("re-add"), "{d:?}");
    }

    /// The directory of member 1 in a cluster that also has 2 and 3.
    fn member_of_three() -> Inputs {
        let mut i = initialized(1, 9);
        rec(&mut i).recorded_name = Some("m1".into());
        rec(&mut i).recorded_members = vec![MemberId::new(1), MemberId::new(2), MemberId::new(3)];
        rec(&mut i).term = 3;
        i
    }

    #[test]
    fn regression_a_re_bootstrapped_seed_answering_never_makes_intact_members_wipe() {
        // The wiped seed 2 re-bootstrapped alone with the same IDs; it is the
        // only one answering, as its own leader and majority.
        let mut i = member_of_three();
        i.live = altered(live(9, &[(2, "m0", M0, true)]), |l| l.raft_term = Some(2));
        let d = decide(&i);
        assert_eq!(
            (d.verdict, d.row),
            (Verdict::RefuseForeign, Row::Fork),
            "{d:?}"
        );
        assert!(d.remedy.starts_with("do not wipe"), "{d:?}");
        // Every other member listed, but the term is behind the directory's.
        i.live = altered(
            live(9, &[(2, "m0", M0, true), (3, "m2", "http://m2:2380", true)]),
            |l| l.raft_term = Some(2),
        );
        assert_eq!(row(&i), Row::Fork);
        // The same list at the directory's term or later: a real removal.
        i.live = altered(i.live.clone(), |l| l.raft_term = Some(3));
        assert_eq!(row(&i), Row::Removed);
    }

    #[test]
    fn regression_a_re_bootstrapped_seed_never_restarts_on_its_fork() {
        // The seed's directory knows only itself; the cluster of its ID has
        // two more started members.
        let mut i = initialized(1, 9);
        rec(&mut i).recorded_members = vec![MemberId::new(1)];
        i.live = live(
            9,
            &[
                (1, "m1", ME, true),
                (2, "m0", M0, true),
                (3, "m2", "http://m2:2380", true),
            ],
        );
        let d = decide(&i);
        assert_eq!(
            (d.verdict, d.row),
            (Verdict::RefuseEmptyFormed, Row::Rebootstrapped),
            "{d:?}"
        );
        // A one-member cluster's seed restarting: nothing else started.
        i.live = live(9, &[(1, "m1", ME, true)]);
        assert_eq!(row(&i), Row::Start);
    }

    #[test]
    fn regression_a_dir_recording_its_own_removal_is_refused_without_any_peer() {
        let mut i = member_of_three();
        rec(&mut i).self_removed = true;
        rec(&mut i).removed_ids = vec![MemberId::new(1)];
        let d = decide(&i);
        assert_eq!(
            (d.verdict, d.row),
            (Verdict::RefuseForeign, Row::Removed),
            "{d:?}"
        );
    }

    #[test]
    fn regression_a_stale_record_the_directory_saw_removed_starts_without_any_peer() {
        // Removed as 4, re-added as 1: the directory records 4's removal and
        // its own member as this one; no peer answers (quorum loss).
        let mut i = member_of_three();
        rec(&mut i).removed_ids = vec![MemberId::new(4)];
        i.operator = op(false, Some(4), Some(9));
        i.hint_member_id = Some(MemberId::new(4));
        let d = decide(&i);
        assert_eq!(
            (d.verdict, d.row),
            (Verdict::Start, Row::StartStaleRecord),
            "{d:?}"
        );
        // A recorded ID the directory never saw removed still refuses.
        i.operator = op(false, Some(5), Some(9));
        assert_eq!(row(&i), Row::Foreign);
    }

    #[test]
    fn regression_a_seed_whose_peer_url_was_updated_is_not_an_earlier_incarnation() {
        // Bootstrapped at http://old:2380 with this token, then `member update`d
        // to ME: the flags derive another ID, but the WAL's own bootstrap entry
        // hashed with this token is the directory's member ID.
        let token = "t";
        let old = vec!["http://old:2380".to_string()];
        let id = crate::disk::ids::member_id(&old, token);
        let mut i = initialized(id.get(), 9);
        i.me = seed_me();
        i.me.token = Some(token.into());
        i.me.derived = Some(DerivedIds {
            member_id: MemberId::new(1),
            cluster_id: ClusterId::new(2),
        });
        rec(&mut i).added_with_peer_urls = Some(old);
        assert_eq!(row(&i), Row::Start);
        // Another token (an earlier incarnation): refused.
        i.me.token = Some("another".into());
        assert_eq!(row(&i), Row::ForeignIncarnation);
    }

    #[test]
    fn regression_a_re_added_members_old_incarnation_volume_is_foreign_by_its_formation() {
        // Fault schedule seed 1022 on 3.6.16: a member re-added by the remedy
        // (its own ID random, nothing derived) got an earlier incarnation's
        // volume; the others were down or without quorum (etcd serves no client
        // before it has a quorum), so no source answered, and it started on the
        // old keyspace. Its WAL still records how its cluster was formed.
        let urls = |h: &str| vec![format!("http://{h}:2380")];
        let old_token = "ns-etcd-uid-1";
        let founders: Vec<FoundingMember> = ["m0", "m1", "m2"]
            .iter()
            .map(|h| FoundingMember {
                id: crate::disk::ids::member_id(&urls(h), old_token),
                peer_urls: urls(h),
            })
            .collect();
        let ids: Vec<MemberId> = founders.iter().map(|m| m.id).collect();
        let cluster = crate::disk::ids::cluster_id(&ids);
        let mut i = initialized(founders[1].id.get(), cluster.get());
        i.me.derived = None;
        i.me.token = Some("ns-etcd-uid-2".into());
        rec(&mut i).formation = founders.clone();
        let d = decide(&i);
        assert_eq!(
            (d.verdict, d.row),
            (Verdict::RefuseForeign, Row::ForeignFormation),
            "{d:?}"
        );
        assert!(d.reason.contains("formed by"), "{}", d.reason);
        assert_eq!(d.verdict.exit().code(), 11);
        // Formed with this member's token: its own restart.
        i.me.token = Some(old_token.into());
        assert_eq!(row(&i), Row::Start);
        // No token given, or no formation record (the WAL starts past it):
        // nothing to contradict.
        i.me.token = None;
        assert_eq!(row(&i), Row::Start);
        i.me.token = Some("ns-etcd-uid-2".into());
        rec(&mut i).formation.clear();
        assert_eq!(row(&i), Row::Start);
        // A source vouching for the directory's IDs wins (the token in the
        // flags changed after the cluster formed; etcd ignores it then).
        rec(&mut i).formation = founders;
        i.live = live(
            cluster.get(),
            &[(rec(&mut i).member_id.get(), "m1", ME, true)],
        );
        assert_eq!(row(&i), Row::Start);
        // Said as a warning while a source vouches, so a wrong token shows
        // before the cold start that would refuse it.
        let d = decide(&i);
        assert!(
            d.warnings.iter().any(|w| w.contains("was formed by")),
            "{:?}",
            d.warnings
        );
    }

    #[test]
    fn regression_a_member_joined_without_its_clusters_token_is_not_foreign() {
        // Review of row 6d: a member added with `member add` (its ID random)
        // whose leader's log still began at index 1 holds the founders' entries
        // in its own WAL. `member add` prints no token and etcd ignores one on a
        // join, so a member joined by hand has none: etcd's default. Refused
        // 11 on every restart with no source to vouch (standalone: always).
        let urls = |h: &str| vec![format!("http://{h}:2380")];
        let token = "tenant-a";
        let seed = FoundingMember {
            id: crate::disk::ids::member_id(&urls("m0"), token),
            peer_urls: urls("m0"),
        };
        let cluster = crate::disk::ids::cluster_id(&[seed.id]);
        let mut i = initialized(0x5eed_0000_0000_0001, cluster.get());
        i.me.derived = None;
        i.me.token = Some("etcd-cluster".into());
        i.me.token_given = false;
        rec(&mut i).formation = vec![seed];
        let d = decide(&i);
        assert_eq!(d.row, Row::Start, "{d:?}");
        assert!(
            d.warnings
                .iter()
                .any(|w| w.contains("was formed by") && w.contains("etcd's default")),
            "{:?}",
            d.warnings
        );
        // A token given that the cluster was not formed with: the operator's
        // earlier incarnation (it gives every member the cluster's token).
        i.me.token = Some("tenant-a-incarnation-2".into());
        i.me.token_given = true;
        assert_eq!(row(&i), Row::ForeignFormation);
        // No token in the env, but the operator's record of the cluster's
        // (it passes that one to etcd): bound by it, as by a given one.
        i.me.token = Some("etcd-cluster".into());
        i.me.token_given = false;
        i.operator = Answer::Answered(OperatorFacts {
            cluster_token: Some("tenant-a-incarnation-2".into()),
            ..OperatorFacts::default()
        });
        assert_eq!(row(&i), Row::ForeignFormation);
        i.operator = Answer::Answered(OperatorFacts {
            cluster_token: Some(token.into()),
            ..OperatorFacts::default()
        });
        assert_eq!(row(&i), Row::Start);
        i.operator = Answer::NotConfigured;
        // The directory's own member a founder: its ID came from a token, and
        // not from this one, whether given or etcd's default.
        let founder = rec(&mut i).formation[0].id;
        rec(&mut i).member_id = founder;
        i.me.token = Some("etcd-cluster".into());
        i.me.token_given = false;
        assert_eq!(row(&i), Row::ForeignFormation);
    }

    /// A Lease as an earlier sidecar wrote it: no format, no incarnation.
    fn witness(member: u64, cluster: u64) -> Answer<Option<WitnessFacts>> {
        Answer::Answered(Some(WitnessFacts {
            name: "the witness Lease etcd-witness-m1".into(),
            clear: "kubectl -n ns delete lease etcd-witness-m1".into(),
            member_id: Some(MemberId::new(member)),
            cluster_id: Some(ClusterId::new(cluster)),
            raft_index: Some(41),
            raft_term: Some(2),
            revision: None,
            durable: false,
            incarnation: Incarnation::default(),
            pod_uid: Some("0d6f".into()),
        }))
    }

    #[test]
    fn regression_the_pr_355_window_a_witness_lease_refuses_the_empty_seed() {
        // The seed formed the cluster and its sidecar wrote the Lease; the
        // operator latched nothing yet; the volume was wiped.
        let mut i = inputs(Dir::Empty);
        i.me = seed_me();
        i.operator = op(true, None, None);
        i.witness = Answer::Answered(None);
        assert_eq!(
            decide(&i).verdict,
            Verdict::Bootstrap,
            "no Lease: unchanged"
        );
        i.witness = witness(0xa, 0xc);
        let d = decide(&i);
        assert_eq!(
            (d.verdict, d.row),
            (Verdict::RefuseEmptyFormed, Row::EmptyFormed)
        );
        assert!(d.reason.contains("the witness Lease etcd-witness-m1 records member 000000000000000a of cluster 000000000000000c running at raft index 41"), "{}", d.reason);
        // A Lease whose annotations cannot be read still exists.
        i.witness = Answer::Answered(Some(WitnessFacts {
            name: "etcd-witness-m1".into(),
            ..Default::default()
        }));
        assert_eq!(decide(&i).verdict, Verdict::RefuseEmptyFormed);
        // Without the operator (and no peer) the Lease alone refuses too.
        i.operator = Answer::NoAnswer("down".into());
        assert_eq!(decide(&i).verdict, Verdict::RefuseEmptyFormed);
        i.allow_bootstrap_without_evidence = true;
        assert_eq!(decide(&i).verdict, Verdict::RefuseEmptyFormed);
    }

    #[test]
    fn an_unreadable_witness_never_lets_the_seed_bootstrap_on_the_operators_word() {
        let mut i = inputs(Dir::Empty);
        i.me = seed_me();
        i.operator = op(true, None, None);
        i.witness = Answer::NoAnswer("forbidden".into());
        let d = decide(&i);
        assert_eq!(
            (d.verdict, d.row),
            (Verdict::PhaseUnknown, Row::BootstrapWitnessUnread)
        );
        assert!(d.reason.contains("forbidden"), "{}", d.reason);
        // Kubernetes off altogether: the witness is not configured, as before.
        i.witness = Answer::NotConfigured;
        assert_eq!(decide(&i).verdict, Verdict::Bootstrap);
    }

    #[test]
    fn a_witness_of_another_identity_is_foreign_evidence_against_an_initialized_dir() {
        let mut i = initialized(0xa, 0xc);
        i.witness = witness(0xa, 0xc);
        let d = decide(&i);
        assert_eq!(d.verdict, Verdict::Start, "{}", d.reason);
        assert!(d.reason.contains("the witness Lease"), "{}", d.reason);
        i.witness = witness(0xb, 0xc);
        let d = decide(&i);
        assert_eq!(d.verdict, Verdict::RefuseForeign, "{}", d.reason);
        assert!(
            d.reason
                .contains("the witness Lease etcd-witness-m1 says 000000000000000b"),
            "{}",
            d.reason
        );
        i.witness = witness(0xa, 0xd);
        assert_eq!(decide(&i).verdict, Verdict::RefuseForeign);
        // The live list shows this member started under the directory's ID and
        // no longer has the Lease's: a stale witness, as for status.memberID.
        i.witness = witness(0xb, 0xc);
        i.live = live(0xc, &[(0xa, "m1", ME, true)]);
        assert_eq!(decide(&i).row, Row::StartStaleRecord);
    }

    #[test]
    fn a_readded_member_joins_despite_the_witness_of_its_old_id() {
        let mut i = inputs(Dir::Empty);
        i.witness = witness(0xa, 0xc);
        i.live = live(0xc, &[(0xb, "", ME, false), (0x9, "m0", M0, true)]);
        assert_eq!(decide(&i).verdict, Verdict::Join);
        i.witness = witness(0xb, 0xc);
        assert_eq!(decide(&i).verdict, Verdict::RefuseEmptyFormed);
    }

    /// A Lease of this member's incarnation, in the current format, whose
    /// disk was proven to hold raft index `index` at term `term`.
    fn durable_witness(member: u64, cluster: u64, index: u64, term: u64) -> WitnessFacts {
        WitnessFacts {
            name: "the witness Lease etcd-witness-m1".into(),
            clear: "kubectl -n ns delete lease etcd-witness-m1".into(),
            member_id: Some(MemberId::new(member)),
            cluster_id: Some(ClusterId::new(cluster)),
            raft_index: Some(index),
            raft_term: Some(term),
            revision: Some(index as i64 + 20),
            durable: true,
            incarnation: Incarnation::new(Some("tok"), None),
            pod_uid: None,
        }
    }

    /// An initialized member whose log ends at `end` (term 2), backend applied
    /// up to `applied`, of incarnation `tok`.
    fn at(end: u64, applied: u64) -> Inputs {
        let mut i = initialized(0xa, 0xc);
        i.me.token = Some("tok".into());
        i.me.token_sha256 = Some(crate::disk::ids::token_sha256("tok"));
        let r = rec(&mut i);
        r.log_end_index = end;
        r.log_end_term = 2;
        r.applied_index = Some(applied);
        r.applied_term = Some(2);
        r.revision = Some(applied as i64);
        i
    }

    fn leader_at(cluster: u64, commit: u64) -> Answer<LiveFacts> {
        altered(live(cluster, &[(0xa, "m1", ME, true)]), |l| {
            l.leader_raft_index = Some(commit);
        })
    }

    #[test]
    fn regression_a_volume_put_back_to_an_older_copy_of_itself_is_refused() {
        // Issue 29 case 1: the witness proved index 35 at term 3 on this
        // member's disk; its volume was put back to a copy ending at 12 (term 2).
        let mut i = at(12, 12);
        i.witness = Answer::Answered(Some(durable_witness(0xa, 0xc, 35, 3)));
        let d = decide(&i);
        assert_eq!(
            (d.row, d.verdict.exit().code()),
            (Row::RolledBack, 17),
            "{}",
            d.reason
        );
        assert!(
            d.reason.contains("index 12") && d.reason.contains("35"),
            "{}",
            d.reason
        );
        assert!(
            d.remedy
                .contains("kubectl -n ns delete lease etcd-witness-m1"),
            "{}",
            d.remedy
        );
        // A peer without a leader (the lagging one) is no way out.
        i.live = altered(leader_at(0xc, 40), |l| l.leader_heard = false);
        assert_eq!(decide(&i).row, Row::RolledBack);
        // Nor a leader whose commit is below the mark.
        i.live = leader_at(0xc, 20);
        let d = decide(&i);
        assert_eq!(d.row, Row::RolledBack);
        assert!(d.reason.contains("commit 20"), "{}", d.reason);
        // Nor a leader of another cluster.
        i.live = leader_at(0xd, 40);
        assert_eq!(decide(&i).verdict, Verdict::RefuseForeign);
        // The leader and a majority of its cluster hold the mark: it catches up,
        // and is not ready before it reached it.
        i.live = leader_at(0xc, 40);
        let d = decide(&i);
        assert_eq!(
            (d.row, d.verdict),
            (Row::StartCatchingUp, Verdict::Start),
            "{}",
            d.reason
        );
        assert_eq!(d.floor.map(|f| f.0), Some(35));
        // The term alone also tells: the same index, but an older term.
        let mut i = at(35, 35);
        i.witness = Answer::Answered(Some(durable_witness(0xa, 0xc, 35, 3)));
        assert_eq!(decide(&i).row, Row::RolledBack);
        // At or past the mark: an ordinary start, held to the mark for readiness.
        rec(&mut i).log_end_term = 3;
        let d = decide(&i);
        assert_eq!(d.row, Row::Start, "{}", d.reason);
        assert_eq!(d.floor.map(|f| f.0), Some(35));
    }

    #[test]
    fn regression_a_wal_put_back_under_a_current_db_is_refused_on_its_own_word() {
        // Issue 29 case 2: backend consistent index 35, the WAL ends at 13.
        let mut i = at(13, 35);
        let d = decide(&i);
        assert_eq!(
            (d.row, d.verdict.exit().code()),
            (Row::AppliedPastLog, 17),
            "{}",
            d.reason
        );
        // The backend's term above the WAL's last term says the same.
        let mut j = at(35, 35);
        rec(&mut j).applied_term = Some(3);
        assert_eq!(decide(&j).row, Row::AppliedPastLog);
        // With the leader and a majority past the backend's index: it catches
        // up (etcd skips what its backend applied).
        i.live = leader_at(0xc, 35);
        let d = decide(&i);
        assert_eq!(d.row, Row::StartCatchingUp, "{}", d.reason);
        assert_eq!(d.floor.map(|f| f.0), Some(35));
    }

    #[test]
    fn an_earlier_sidecars_mark_is_said_but_never_held_against_a_directory() {
        let mut i = at(12, 12);
        let mut w = durable_witness(0xa, 0xc, 35, 3);
        w.durable = false;
        w.incarnation = Incarnation::default();
        i.witness = Answer::Answered(Some(w));
        let d = decide(&i);
        assert_eq!(d.row, Row::Start, "{}", d.reason);
        assert!(
            d.warnings.iter().any(|w| w.contains("earlier sidecar")),
            "{:?}",
            d.warnings
        );
    }

    #[test]
    fn regression_an_old_incarnations_witness_neither_vouches_nor_refuses() {
        // Issue 29 case 3: an old incarnation's PVC (formed with token old) under a
        // bootstrap member of a re-created cluster (token new), the old Lease there.
        let mut i = initialized(0xa, 0xc);
        rec(&mut i).log_end_index = 10;
        rec(&mut i).log_end_term = 2;
        i.me.derived = Some(DerivedIds {
            member_id: MemberId::new(0x1a),
            cluster_id: ClusterId::new(0x1c),
        });
        i.me.token = Some("new".into());
        i.me.token_sha256 = Some(crate::disk::ids::token_sha256("new"));
        let mut old = durable_witness(0xa, 0xc, 3, 2);
        old.incarnation = Incarnation::new(Some("old"), None);
        i.witness = Answer::Answered(Some(old.clone()));
        let d = decide(&i);
        assert_eq!(d.row, Row::ForeignIncarnation, "{}", d.reason);
        assert!(
            d.warnings
                .iter()
                .any(|w| w.contains("another incarnation") && w.contains("delete lease")),
            "{:?}",
            d.warnings
        );
        // The same with the Lease an earlier sidecar wrote (no incarnation): its
        // IDs are not the ones the flags derive.
        let mut legacy = old.clone();
        legacy.incarnation = Incarnation::default();
        legacy.durable = false;
        i.witness = Answer::Answered(Some(legacy));
        assert_eq!(decide(&i).row, Row::ForeignIncarnation);
        // Of this incarnation, the witness vouches (a member whose URL was updated).
        let mut ours = old;
        ours.incarnation = Incarnation::new(Some("new"), None);
        i.witness = Answer::Answered(Some(ours));
        assert_eq!(decide(&i).verdict, Verdict::Start);
    }

    #[test]
    fn regression_a_fresh_cluster_is_not_refused_on_an_old_incarnations_lease() {
        // Issue 29 case 4: a fresh seed on a fresh volume, the previous
        // incarnation's Lease (another token) still there.
        let mut i = inputs(Dir::Empty);
        i.me = seed_me();
        i.me.token_sha256 = Some(crate::disk::ids::token_sha256("new"));
        i.me.derived = Some(DerivedIds {
            member_id: MemberId::new(0x1a),
            cluster_id: ClusterId::new(0x1c),
        });
        i.operator = op(true, None, None);
        i.witness = Answer::Answered(Some(WitnessFacts {
            incarnation: Incarnation::new(Some("old"), None),
            ..durable_witness(0xa, 0xc, 30, 2)
        }));
        let d = decide(&i);
        assert_eq!(d.verdict, Verdict::Bootstrap, "{}", d.reason);
        assert!(
            d.warnings
                .iter()
                .any(|w| w.contains("kubectl -n ns delete lease")),
            "{:?}",
            d.warnings
        );
        // An earlier sidecar's Lease of IDs the flags do not derive: the same.
        i.witness = witness(0xa, 0xc);
        assert_eq!(decide(&i).verdict, Verdict::Bootstrap);
        // The Lease of the IDs the flags derive (the PR 355 window): refused, and
        // the remedy names the Lease for the case it is a leftover after all.
        i.witness = witness(0x1a, 0x1c);
        let d = decide(&i);
        assert_eq!(d.verdict, Verdict::RefuseEmptyFormed);
        assert!(
            d.remedy
                .contains("kubectl -n ns delete lease etcd-witness-m1"),
            "{}",
            d.remedy
        );
        // Another EtcdCluster (uid) of the same token: another incarnation too.
        i.operator = altered_op(op(true, None, None), |o| {
            o.cluster_uid = Some("uid-new".into())
        });
        i.witness = Answer::Answered(Some(WitnessFacts {
            incarnation: Incarnation::new(Some("new"), Some("uid-old")),
            ..durable_witness(0x1a, 0x1c, 30, 2)
        }));
        assert_eq!(decide(&i).verdict, Verdict::Bootstrap);
    }

    fn altered_op(
        mut a: Answer<OperatorFacts>,
        f: impl FnOnce(&mut OperatorFacts),
    ) -> Answer<OperatorFacts> {
        if let Answer::Answered(o) = &mut a {
            f(o);
        }
        a
    }

    #[test]
    fn a_witness_with_an_unreadable_member_id_never_blocks_a_readded_members_join() {
        let mut i = inputs(Dir::Empty);
        i.live = live(0xc, &[(0xb, "", ME, false), (0x9, "m0", M0, true)]);
        i.witness = Answer::Answered(Some(WitnessFacts {
            member_id: None,
            ..durable_witness(0xa, 0xc, 30, 2)
        }));
        let d = decide(&i);
        assert_eq!(d.verdict, Verdict::Join, "{}", d.reason);
        // Without the re-add it still says the member started.
        i.live = live(0xc, &[(0x9, "m0", M0, true)]);
        assert_eq!(decide(&i).verdict, Verdict::RefuseEmptyFormed);
    }

    #[test]
    fn a_restore_is_held_to_its_witness_unless_bumped_above_it() {
        // Issue 29 case 5: a snapshot restore under the cluster's own IDs, the
        // witness at index 35, revision 55.
        let mut i = at(3, 3);
        rec(&mut i).restored = true;
        rec(&mut i).revision = Some(40);
        i.witness = Answer::Answered(Some(durable_witness(0xa, 0xc, 35, 3)));
        let d = decide(&i);
        assert_eq!(
            (d.row, d.verdict.exit().code()),
            (Row::RestoredBehind, 17),
            "{}",
            d.reason
        );
        assert!(
            d.remedy.contains("kubectl -n ns delete lease") && d.remedy.contains("--bump-revision"),
            "{}",
            d.remedy
        );
        // A leader past the mark is no way out for a restore.
        i.live = leader_at(0xc, 50);
        assert_eq!(decide(&i).row, Row::RestoredBehind);
        // Bumped above the witness's revision, no older history running: start,
        // and the witnesses are re-based.
        rec(&mut i).revision = Some(1_000_055);
        i.live = Answer::NotConfigured;
        let d = decide(&i);
        assert_eq!(d.row, Row::StartRestoredAbove, "{}", d.reason);
        assert!(d.rebase_witness && d.floor.is_none());
        // The peers restored from the same snapshot answer at its revision or
        // above: the restored cluster, not an older history.
        i.live = altered(leader_at(0xc, 9), |l| {
            l.positions = vec![LivePosition {
                member_id: MemberId::new(0x9),
                raft_index: Some(9),
                revision: Some(1_000_060),
            }]
        });
        assert_eq!(decide(&i).row, Row::StartRestoredAbove);
        // A lone member restored under the cluster that kept running.
        i.live = altered(leader_at(0xc, 80), |l| {
            l.positions = vec![LivePosition {
                member_id: MemberId::new(0x9),
                raft_index: Some(80),
                revision: Some(70),
            }]
        });
        let d = decide(&i);
        assert_eq!(d.row, Row::RestoredBehind, "{}", d.reason);
        assert!(d.reason.contains("older history"), "{}", d.reason);
    }

    #[test]
    fn the_row_5_reason_names_only_the_sources_that_agree() {
        let mut i = initialized(0xa, 0xc);
        i.me.derived = Some(DerivedIds {
            member_id: MemberId::new(0x1a),
            cluster_id: ClusterId::new(0x1c),
        });
        i.operator = op(false, Some(0xa), Some(0xc));
        let d = decide(&i);
        assert_eq!(d.row, Row::Start, "{}", d.reason);
        assert!(
            !d.reason.contains(
                "consistent with the directory's own membership, the IDs its flags derive"
            ),
            "{}",
            d.reason
        );
        assert!(
            d.reason
                .contains("its flags derive member 000000000000001a"),
            "{}",
            d.reason
        );
    }
}
