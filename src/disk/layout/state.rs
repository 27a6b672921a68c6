//! The states a data directory can be in, and what can be known of it in
//! each: the types every report is built from.
//!
//! One state, two views, one payload:
//! * [`DirKind`] is the state alone (`Copy`, `Eq`): what callers compare and
//!   what every report spells (`"initialized"`, …).
//! * [`DirState`] is the state with what can be known in it, so that an
//!   initialized directory cannot lack its WAL's identity and a failed one
//!   cannot lack its problem.
//! * [`Failure`] is what the three failed states (partial, corrupt,
//!   unreadable) carry alike: the problem and what was read before it.

use std::path::PathBuf;

use serde::Serialize;

use super::super::bbolt::{Backend, KvHash};
use super::super::raftpb::HardState;
use super::super::v2req::V2Replay;
use crate::disk::ids::{ClusterId, MemberId};

/// The classification alone, without what can be known in it: the one spelling
/// of each state in every report (`inspect -o json`, the verdict file, the
/// sidecar's identity).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DirKind {
    /// No WAL and nothing etcd wrote.
    Empty,
    /// A readable WAL with metadata.
    Initialized,
    /// Something etcd wrote, but not a complete member.
    Partial,
    /// A WAL or backend that fails its checks.
    Corrupt,
    /// Could not be read (permissions, I/O errors).
    Unreadable,
}

impl DirKind {
    /// The name in every report.
    pub const fn name(self) -> &'static str {
        match self {
            DirKind::Empty => "empty",
            DirKind::Initialized => "initialized",
            DirKind::Partial => "partial",
            DirKind::Corrupt => "corrupt",
            DirKind::Unreadable => "unreadable",
        }
    }
}

impl std::fmt::Display for DirKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl Serialize for DirKind {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

/// What the directory is, with what can be known of it in that state and
/// nothing that cannot: an initialized directory always has its WAL's
/// identity, raft state, start snapshot and membership; a directory that
/// failed always has its problem, and the WAL's identity only when the WAL was
/// read whole before something else failed.
#[derive(Debug, Clone)]
pub enum DirState {
    /// No WAL and nothing etcd wrote (what etcd tolerates is in
    /// [`super::Inspection::unexpected`]).
    Empty,
    /// A readable WAL with metadata, its start snapshot and its backend.
    Initialized(Box<Initialized>),
    /// Something etcd wrote, but not a complete member.
    Partial(Box<Failure>),
    /// A WAL or backend that fails its checks.
    Corrupt(Box<Failure>),
    /// Could not be read (permissions, I/O errors, a volume that hangs, a
    /// symlink where etcd expects a directory).
    Unreadable(Box<Failure>),
}

impl DirState {
    /// The classification alone.
    pub const fn kind(&self) -> DirKind {
        match self {
            DirState::Empty => DirKind::Empty,
            DirState::Initialized(_) => DirKind::Initialized,
            DirState::Partial(_) => DirKind::Partial,
            DirState::Corrupt(_) => DirKind::Corrupt,
            DirState::Unreadable(_) => DirKind::Unreadable,
        }
    }

    /// The name in every report.
    pub const fn name(&self) -> &'static str {
        self.kind().name()
    }
}

impl std::fmt::Display for DirState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Why a directory is partial, corrupt or unreadable, and what was read of it
/// before.
#[derive(Debug, Clone)]
pub struct Failure {
    /// What is wrong, with where.
    pub problem: Problem,
    /// The WAL, when it was read whole before something after it failed (a
    /// missing `.snap` or db, a corrupt backend).
    pub log: Option<Log>,
    /// The snapshot etcd would start from, when it was settled before the
    /// failure (the backend's checks come after it).
    pub snapshot: Option<SnapshotPoint>,
    /// A symlink inside the data dir where etcd expects a directory
    /// (`member/wal`, `member/snap`): not followed, so not read — a
    /// configuration matter (`--wal-dir`), not damage.
    pub symlinked: Option<PathBuf>,
}

impl Failure {
    /// A failure with nothing read before it.
    pub(super) fn at(message: String, path: Option<PathBuf>, offset: Option<u64>) -> Box<Failure> {
        Box::new(Failure {
            problem: Problem {
                message,
                path,
                offset,
            },
            log: None,
            snapshot: None,
            symlinked: None,
        })
    }
}

impl DirState {
    /// A file that could not be read: unreadable when permission was denied,
    /// corrupt when its bytes are wrong.
    pub(super) fn reading(permission_denied: bool, failure: Box<Failure>) -> DirState {
        if permission_denied {
            DirState::Unreadable(failure)
        } else {
            DirState::Corrupt(failure)
        }
    }

    /// A failure that came after the WAL was read whole (and the start
    /// snapshot settled, when it was): it keeps them. Other states are
    /// returned as they are.
    pub(super) fn after(mut self, log: &Log, snapshot: Option<SnapshotPoint>) -> DirState {
        if let DirState::Partial(f) | DirState::Corrupt(f) | DirState::Unreadable(f) = &mut self {
            f.log = Some(log.clone());
            f.snapshot = snapshot;
        }
        self
    }
}

/// What the WAL says: the member's identity and raft state.
#[derive(Debug, Clone)]
pub struct Log {
    /// Member ID from the WAL metadata.
    pub member_id: MemberId,
    /// Cluster ID from the WAL metadata.
    pub cluster_id: ClusterId,
    /// The last HardState.
    pub hard_state: HardState,
    /// Index of the last entry.
    pub last_index: u64,
    /// Term of the last entry.
    pub last_term: u64,
    /// Segments and records.
    pub wal: WalFacts,
}

/// The backend as the report has it.
#[derive(Debug, Clone)]
// It lives inside the boxed [`Initialized`]: one per report, so its size is no cost.
#[allow(clippy::large_enum_variant)]
pub enum BackendRead {
    /// Read from the meta chosen at open.
    Read {
        /// The summary of the etcd schema.
        summary: Backend,
        /// `--hash`: what `etcdutl snapshot status` prints for the db.
        kv_hash: Option<KvHash>,
    },
    /// Left out: a running etcd kept committing to it while it was read (not
    /// corruption; the WAL decides). The sentence says so.
    Unread(String),
}

/// Everything an initialized directory records of its member.
#[derive(Debug, Clone)]
pub struct Initialized {
    /// The WAL's identity and raft state.
    pub log: Log,
    /// The snapshot etcd starts from: up to 3.6 the newest WAL snapshot record
    /// at or below the commit that has its `.snap` file; from 3.7 (by the
    /// storage version) the newest such record, `.snap` or not. Index 0 when
    /// there is none.
    pub snapshot: SnapshotPoint,
    /// The bbolt backend.
    pub backend: BackendRead,
    /// The membership the directory records (latest record per member).
    pub membership: Vec<RecordedMember>,
    /// The peer URLs the directory records for its own member ID.
    pub self_peer_urls: Option<Vec<String>>,
    /// The name the directory records for its own member ID (absent for a
    /// member that never published one).
    pub self_name: Option<String>,
    /// The directory records its own member's removal (`members_removed`, a
    /// RemoveNode entry): etcd exits on it ("the member has been permanently
    /// removed").
    pub self_removed: bool,
    /// Member IDs the directory records as removed.
    pub removed_ids: Vec<MemberId>,
    /// The peer URLs of the WAL's own entry adding its member (the bootstrap
    /// entry, for a member that bootstrapped), while the WAL still holds it.
    pub added_with_peer_urls: Option<Vec<String>>,
    /// The WAL holds no entry and no snapshot: initialized as far as etcd's
    /// `wal.Exist` is concerned, yet holding no data (etcd re-creates such a
    /// WAL when it starts on a wiped directory).
    pub empty_log: bool,
    /// How the directory's cluster was formed, while the WAL still holds it:
    /// the members of its bootstrap (or restore) entries, the `AddNode`
    /// changes at indexes 1, 2, … of term 1, when their IDs hash to the WAL's
    /// cluster ID (so they are the whole founding set). etcd gave each of them
    /// `sha1(sorted peer URLs + --initial-cluster-token)`: the token the
    /// cluster was formed with can be checked against this member's flags,
    /// whatever its own ID (a member added later has a random one).
    pub formation: Vec<FoundingMember>,
    /// The directory was made by `snapshot restore` (etcdutl, or etcdctl before
    /// 3.6) and its backend holds that snapshot's data: the WAL begins with the
    /// founding members' `AddNode` entries at 1..n of term 1 and a snapshot
    /// record at (n, 1), which a first start never writes (its first election
    /// raises the term before any snapshot), and the backend is past revision 1
    /// although its log applied nothing but those entries. Its data did not come
    /// from its log: entries of another history must never be applied on it.
    pub restored: bool,
    /// The v2 requests etcd replays from the WAL when it starts (after the start
    /// snapshot): what 3.6 and 3.7 refuse (see [`crate::disk::v2req`]).
    pub v2_replay: V2Replay,
    /// The cluster version (`/0/version`) in the `.snap` etcd loads.
    pub snap_cluster_version: Option<String>,
    /// Each member of that `.snap` and whether it is a learner there.
    pub snap_member_roles: Vec<(MemberId, bool)>,
    /// Top-level v2 store nodes with custom content in the `.snap` etcd loads
    /// (3.6 refuses them).
    pub v2_custom: Vec<String>,
    /// Members whose learner flag in the backend's `members` bucket disagrees
    /// with the membership of the `.snap` and the WAL after it (etcd 3.5.1–3.5.19
    /// never persisted a learner's promotion to the backend, etcd #19557).
    pub learner_flag_stale: Vec<MemberId>,
}

#[cfg(test)]
impl Initialized {
    /// An initialized directory's member that records nothing (unit tests).
    pub(crate) fn blank() -> Initialized {
        Initialized {
            log: Log {
                member_id: MemberId::default(),
                cluster_id: ClusterId::default(),
                hard_state: HardState::default(),
                last_index: 0,
                last_term: 0,
                wal: WalFacts {
                    segments: Vec::new(),
                    records: 0,
                    torn_tail: None,
                },
            },
            snapshot: SnapshotPoint { index: 0, term: 0 },
            backend: BackendRead::Unread(String::new()),
            membership: Vec::new(),
            self_peer_urls: None,
            self_name: None,
            self_removed: false,
            removed_ids: Vec::new(),
            added_with_peer_urls: None,
            empty_log: false,
            formation: Vec::new(),
            restored: false,
            v2_replay: V2Replay::default(),
            snap_cluster_version: None,
            snap_member_roles: Vec::new(),
            v2_custom: Vec::new(),
            learner_flag_stale: Vec::new(),
        }
    }
}

impl Initialized {
    /// The backend's summary, unless it was left out.
    pub fn backend(&self) -> Option<&Backend> {
        match &self.backend {
            BackendRead::Read { summary, .. } => Some(summary),
            BackendRead::Unread(_) => None,
        }
    }

    /// The KV hash, when `--hash` asked for it and the backend was read.
    pub fn kv_hash(&self) -> Option<&KvHash> {
        match &self.backend {
            BackendRead::Read { kv_hash, .. } => kv_hash.as_ref(),
            BackendRead::Unread(_) => None,
        }
    }
}

/// What is wrong, with where.
#[derive(Debug, Clone, Serialize)]
pub struct Problem {
    /// What is wrong, in one sentence of the report.
    pub message: String,
    /// The file concerned, when there is one.
    #[serde(serialize_with = "lossy_path")]
    pub path: Option<PathBuf>,
    /// The byte offset, when the problem is inside a file.
    pub offset: Option<u64>,
}

/// An entry the inspector noticed but etcd would ignore or not expect.
#[derive(Debug, Clone, Serialize)]
pub struct Entry {
    /// Where it is (the name as listed, joined to its directory).
    pub path: PathBuf,
    /// `file`, `dir`, `symlink` or `other`.
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// Why it is listed.
    pub note: &'static str,
}

/// A member as the directory records it, and where that record came from.
#[derive(Debug, Clone, Serialize)]
pub struct RecordedMember {
    /// Member ID.
    pub id: MemberId,
    /// Name (empty for a member that never started).
    pub name: String,
    /// Peer URLs.
    pub peer_urls: Vec<String>,
    /// Which record of the directory says so.
    pub source: MemberSource,
}

/// Where in the directory a member is recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum MemberSource {
    /// The WAL's ConfChange entries (after the start snapshot).
    Wal,
    /// The `.snap` file's v2 store.
    Snap,
    /// The backend's `members` bucket.
    Backend,
}

impl std::fmt::Display for MemberSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            MemberSource::Wal => "wal",
            MemberSource::Snap => "snap",
            MemberSource::Backend => "backend",
        })
    }
}

/// The raft snapshot etcd will start from.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct SnapshotPoint {
    /// Raft index.
    pub index: u64,
    /// Raft term.
    pub term: u64,
}

/// WAL facts beyond the identity.
#[derive(Debug, Clone, Serialize)]
pub struct WalFacts {
    /// Segment names and sizes, in order.
    pub segments: Vec<SegmentFacts>,
    /// Records read.
    pub records: u64,
    /// A torn write at the end of the last segment (etcd repairs it on start).
    pub torn_tail: Option<Problem>,
}

/// One WAL segment.
#[derive(Debug, Clone, Serialize)]
pub struct SegmentFacts {
    /// File name.
    pub name: String,
    /// Size in bytes.
    pub size: u64,
}
/// A member of the set that formed a cluster, as its bootstrap entry records it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FoundingMember {
    /// The ID etcd gave it at bootstrap.
    pub id: MemberId,
    /// The peer URLs it was formed with, as etcd hashed them.
    pub peer_urls: Vec<String>,
}

/// A path as the report's text: serde refuses a path that is not UTF-8, and
/// a report must never fail; such bytes show as U+FFFD (as in
/// [`super::super::dir`]'s names). A UTF-8 path is written as serde writes it.
fn lossy_path<S: serde::Serializer>(path: &Option<PathBuf>, s: S) -> Result<S::Ok, S::Error> {
    match path {
        Some(p) => s.serialize_some(&p.to_string_lossy()),
        None => s.serialize_none(),
    }
}
