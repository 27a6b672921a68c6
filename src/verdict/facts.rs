//! The facts the decision reads: what each source said, reduced to what a row
//! needs, and the conversion from the directory's [`Inspection`]. Who a
//! witness belongs to is decided here too: every row asks the same question.

use crate::disk::ids::comparable_url;
use crate::disk::ids::{ClusterId, Incarnation, MemberId};
use crate::disk::layout::{self, DirState, FoundingMember, Inspection};
use crate::disk::upgrade::UpgradeCheck;

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
    /// (see `Initialized::restored` in `disk::layout`), and not run since: no
    /// entry of a term above 1 follows the restore.
    pub restored: bool,
    /// The upgrade check for the etcd version about to start, when it is known.
    pub upgrade: Option<UpgradeCheck>,
    /// The directory records that its own member published itself (its
    /// backend's `members` bucket gives it a name and client URLs): the
    /// member started in the history this directory holds (row 6h).
    pub published: bool,
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
    /// The leader's commit index as an earlier round of this preflight heard
    /// it (this member was already stopped): the others, asked again a moment
    /// later, are held to it rather than to this round's commit, which they
    /// trail by a moment under a steady write load. `None`: one round only.
    pub commit_bar: Option<u64>,
}

/// One answering member's position, as its `Status` reported it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LivePosition {
    /// The member that answered.
    pub member_id: MemberId,
    /// Its raft (commit) index.
    pub raft_index: Option<u64>,
    /// Its applied index.
    pub applied_index: Option<u64>,
    /// The term of the last entry it applied (what etcd's `Status` calls its
    /// raft term); 0 when it applied none since it started.
    pub applied_term: Option<u64>,
    /// Its MVCC revision.
    pub revision: Option<i64>,
    /// It reported itself as the leader.
    pub leader: bool,
    /// Its `HashKV` at a revision both it and the directory hold, beside the
    /// directory's own hash there (`None`: not asked, or either is unknown).
    pub kv_hash: Option<KvHashCheck>,
    /// The keyspaces were to be compared ([`super::keyspace_check_at`]) and
    /// no comparison with this member came (it did not answer in time,
    /// refused, or neither hash nor keys could be compared): whether it is
    /// of the directory's history is unknown.
    pub kv_unanswered: bool,
}

/// One member's keyspace at a revision against the directory's at the same
/// revision: its `HashKV` and the directory's hash computed offline with the
/// member's compaction revision ([`crate::disk::bbolt::Db::keyspace_at`]),
/// or, where that hash cannot be known here, digests of the newest live keys
/// each holds there ([`crate::disk::bbolt::newest_digests`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KvHashCheck {
    /// The revision both describe.
    pub revision: i64,
    /// The member's hash or digest.
    pub theirs: u32,
    /// The directory's.
    pub ours: u32,
    /// Which comparison.
    pub by: KeyspaceProbe,
}

/// How a [`KvHashCheck`] compared the keyspaces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyspaceProbe {
    /// `HashKV`: every key and value up to the revision.
    HashKv,
    /// The newest live keys there (a `Range` of at most this many).
    NewestKeys(usize),
    /// This many keys the directory holds unchanged since the revision, read
    /// from the member at the revision (the directory compacted past it).
    UnchangedKeys(usize),
}

impl LiveMemberFacts {
    pub(super) fn is(&self, me: &SelfFacts) -> bool {
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

    /// This member's entry, started: what refuses an empty directory (row 7)
    /// and what ends the live wait early (`cmd::preflight`). Nothing unstarts
    /// a member.
    pub fn started(&self, me: &SelfFacts) -> Option<&LiveMemberFacts> {
        self.find(me).filter(|m| m.started)
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
    pub(super) fn sole_other_voter_heard(&self, me: &SelfFacts) -> bool {
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

    /// The list is the leader's word on `cluster`: the view is of that cluster
    /// (the freshest answer of the directory's own cluster when one answered,
    /// else the freshest of any), and its leader and half of its voters were
    /// heard.
    pub(super) fn authoritative_for(&self, cluster: ClusterId) -> bool {
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
// `Answer::NoAnswer` reads as what it is; the variants are not a prefix list.
#[allow(clippy::enum_variant_names)]
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
    /// The answer, mutable, if the source gave one.
    #[cfg(test)]
    pub(super) fn get_mut(&mut self) -> Option<&mut T> {
        match self {
            Answer::Answered(t) => Some(t),
            _ => None,
        }
    }

    /// The answer, if the source gave one.
    pub fn into_option(self) -> Option<T> {
        match self {
            Answer::Answered(t) => Some(t),
            _ => None,
        }
    }

    pub(super) fn get(&self) -> Option<&T> {
        match self {
            Answer::Answered(t) => Some(t),
            _ => None,
        }
    }

    pub(super) fn describe(&self) -> &str {
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
    /// The witness file is configured but could not be read or parsed: why
    /// (a witness that did not answer, like a Lease that did not, row 6i).
    pub witness_file_unread: Option<String>,
    /// `ETCD_MEMBER_ID` when non-empty.
    pub hint_member_id: Option<MemberId>,
    /// `ETCD_CLUSTER_ID` when non-empty.
    pub hint_cluster_id: Option<ClusterId>,
    /// `--allow-bootstrap-without-evidence`.
    pub allow_bootstrap_without_evidence: bool,
}

/// Whose a witness is, as far as this member can tell.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Whose {
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
    pub(super) fn incarnation(&self) -> Incarnation {
        Incarnation {
            token_sha256: self.me.token_sha256.clone(),
            cluster_uid: self.operator.get().and_then(|o| o.cluster_uid.clone()),
        }
    }

    /// Every witness that answered: the Lease, then the file.
    pub(super) fn witnesses(&self) -> impl Iterator<Item = &WitnessFacts> {
        self.witness
            .get()
            .and_then(Option::as_ref)
            .into_iter()
            .chain(self.witness_file.as_ref())
    }

    /// The witnesses that are configured but did not answer: the Lease
    /// (`--kube` on, and its read failed: 403, 5xx, timeout, unreachable) and
    /// the witness file (configured, present, but unreadable or malformed),
    /// each with what failed (row 6i). Also a witness not of another
    /// incarnation that records a proven position but no member or cluster ID
    /// that can be read: its position cannot be held against the directory,
    /// nor dropped in silence.
    pub(super) fn unread_witnesses(&self) -> Vec<String> {
        let lease = match &self.witness {
            Answer::NoAnswer(why) => Some(format!("the witness Lease: {why}")),
            _ => None,
        };
        let file = self
            .witness_file_unread
            .as_ref()
            .map(|why| format!("the witness file: {why}"));
        let garbled = self
            .witnesses()
            .filter(|w| w.durable && w.raft_index.is_some_and(|n| n > 0))
            .filter(|w| w.member_id.is_none() || w.cluster_id.is_none())
            .filter(|w| !matches!(self.whose(w), Whose::Other(_)))
            .map(|w| {
                format!(
                    "{} records raft index {} but no member or cluster ID that can be read (correct or remove it: {})",
                    w.name,
                    w.raft_index.unwrap_or_default(),
                    w.clear
                )
            });
        lease.into_iter().chain(file).chain(garbled).collect()
    }

    /// Whose `w` is. Without a fact both know, a bootstrap member's flags still
    /// tell: a witness whose member and cluster IDs are both other than the
    /// ones its flags derive is of a cluster formed otherwise.
    pub(super) fn whose(&self, w: &WitnessFacts) -> Whose {
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
    pub(super) fn usable_witnesses(&self) -> (Vec<(&WitnessFacts, bool)>, Vec<String>) {
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

impl DirFacts {
    /// The directory holds a member's data (rows 5–7b, unless etcd runs on it).
    pub fn initialized(&self) -> bool {
        matches!(self.state, Dir::Initialized(_))
    }

    /// Gives an initialized directory the upgrade check of the etcd about to
    /// start (row 5c).
    pub fn set_upgrade(&mut self, check: Option<UpgradeCheck>) {
        if let Dir::Initialized(r) = &mut self.state {
            r.upgrade = check;
        }
    }

    /// The decision's view of the inspected directory.
    pub fn of(dir: &Inspection, upgrade: Option<UpgradeCheck>) -> DirFacts {
        let problem = |f: &layout::Failure| f.problem.message.clone();
        let state = match &dir.state {
            DirState::Empty => Dir::Empty,
            DirState::Initialized(m) => Dir::Initialized(Box::new(Recorded {
                member_id: m.log.member_id,
                cluster_id: m.log.cluster_id,
                recorded_peer_urls: m.self_peer_urls.clone(),
                recorded_name: m.self_name.clone(),
                empty_log: m.empty_log,
                recorded_members: m.membership.iter().map(|r| r.id).collect(),
                removed_ids: m.removed_ids.clone(),
                self_removed: m.self_removed,
                added_with_peer_urls: m.added_with_peer_urls.clone(),
                formation: m.formation.clone(),
                term: m.log.hard_state.term,
                log_end_index: m.log.last_index.max(m.snapshot.index),
                log_end_term: log_end_term(m),
                applied_index: m.backend().and_then(|b| b.consistent_index),
                applied_term: m.backend().and_then(|b| b.term),
                // The revision etcd restores: the newest key's, or the
                // compaction's when tombstones above the newest key were
                // compacted away.
                revision: m.backend().and_then(|b| b.revision.max(b.compact_revision)),
                // Once it ran, its log holds entries of the terms its
                // elections raised: what it holds past the restore came from
                // its cluster's log, and rows 5d, 6e, 6f judge it as any other.
                restored: m.restored && log_end_term(m) <= 1,
                upgrade,
                published: m.backend().is_some_and(|b| {
                    b.members.iter().any(|x| {
                        x.id == m.log.member_id && !x.name.is_empty() && !x.client_urls.is_empty()
                    })
                }),
            })),
            DirState::Partial(f) => Dir::Partial(problem(f)),
            DirState::Corrupt(f) => Dir::Corrupt(problem(f)),
            DirState::Unreadable(f) => Dir::Unreadable {
                problem: problem(f),
                symlinked: f.symlinked.as_ref().map(|p| p.display().to_string()),
            },
        };
        DirFacts {
            state,
            running: dir.running,
        }
    }
}

/// The term of the last entry the log holds (the snapshot's, when it is past
/// the entries).
fn log_end_term(m: &layout::Initialized) -> u64 {
    if m.snapshot.index > m.log.last_index {
        m.snapshot.term
    } else {
        m.log.last_term
    }
}
