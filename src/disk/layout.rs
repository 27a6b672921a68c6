//! Classification of a data directory exactly as etcd itself would see it, and the
//! whole offline report (`inspect`) built on the readers.
//!
//! etcd's own test for "initialized" is `wal.Exist`: at least one `*.wal` entry in
//! the WAL dir. With one, every `--initial-*` flag is ignored and the identity
//! comes from the WAL; without one, etcd bootstraps or joins. So that test decides
//! `empty` versus everything else here too, and what etcd tolerates (`0.tmp`,
//! `lost+found`, `*.broken`) is debris, not evidence.

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::bbolt::{detect_storage_version, semver_minor, Backend, Db, KvHash};
use super::lock::{held_locks, HeldLock, Probe};
use super::raftpb::{ConfChangeKind, HardState};
use super::snap::{list_snaps, read_snap, SnapFile};
use super::v2req::V2Replay;
use super::wal::{self, Wal, WalError};
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
    /// [`Inspection::unexpected`]).
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

/// The three ways a read can fail, each a [`DirState`] with a [`Failure`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    Partial,
    Corrupt,
    Unreadable,
}

impl Fault {
    /// A file that could not be read: unreadable when permission was denied,
    /// corrupt when its bytes are wrong.
    const fn reading(permission_denied: bool) -> Fault {
        if permission_denied {
            Fault::Unreadable
        } else {
            Fault::Corrupt
        }
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
    /// snapshot): what 3.6 and 3.7 refuse (see [`super::v2req`]).
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

/// The directories etcd uses, resolved from `--data-dir` and `--wal-dir`.
#[derive(Debug, Clone, Serialize)]
pub struct Paths {
    /// `--data-dir`.
    pub data_dir: PathBuf,
    /// `<data-dir>/member`.
    pub member_dir: PathBuf,
    /// `--wal-dir`, or `<data-dir>/member/wal`.
    pub wal_dir: PathBuf,
    /// `<data-dir>/member/snap`.
    pub snap_dir: PathBuf,
}

impl Paths {
    /// Resolves the layout for a data dir and an optional dedicated WAL dir.
    pub fn new(data_dir: &Path, wal_dir: Option<&Path>) -> Paths {
        let member_dir = data_dir.join("member");
        Paths {
            data_dir: data_dir.to_path_buf(),
            wal_dir: wal_dir.map_or_else(|| member_dir.join("wal"), Path::to_path_buf),
            snap_dir: member_dir.join("snap"),
            member_dir,
        }
    }

    /// The backend database.
    pub fn db(&self) -> PathBuf {
        self.snap_dir.join("db")
    }
}

/// What is wrong, with where.
#[derive(Debug, Clone, Serialize)]
pub struct Problem {
    /// One sentence.
    pub message: String,
    /// The file concerned, when there is one.
    pub path: Option<PathBuf>,
    /// The byte offset, when the problem is inside a file.
    pub offset: Option<u64>,
}

/// An entry the inspector noticed but etcd would ignore or not expect.
#[derive(Debug, Clone, Serialize)]
pub struct Entry {
    /// The entry.
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

/// The whole offline report of a data directory.
#[derive(Debug, Clone)]
pub struct Inspection {
    /// The directories looked at.
    pub paths: Paths,
    /// The classification, with what can be known of the directory in it.
    pub state: DirState,
    /// `.snap` files present (listed once the WAL was read).
    pub snap_files: Vec<String>,
    /// An etcd process holds the WAL or backend locks.
    pub running: bool,
    /// The locks seen.
    pub locks: Vec<HeldLock>,
    /// Entries etcd tolerates or would not expect (reported, not fatal).
    pub unexpected: Vec<Entry>,
}

impl Inspection {
    fn new(paths: &Paths) -> Inspection {
        Inspection {
            paths: paths.clone(),
            state: DirState::Empty,
            snap_files: Vec::new(),
            running: false,
            locks: Vec::new(),
            unexpected: Vec::new(),
        }
    }

    /// The classification alone.
    pub fn kind(&self) -> DirKind {
        self.state.kind()
    }

    /// The member an initialized directory records.
    pub fn initialized(&self) -> Option<&Initialized> {
        match &self.state {
            DirState::Initialized(m) => Some(m),
            _ => None,
        }
    }

    /// Why the directory is partial, corrupt or unreadable.
    pub fn failure(&self) -> Option<&Failure> {
        match &self.state {
            DirState::Partial(f) | DirState::Corrupt(f) | DirState::Unreadable(f) => Some(f),
            DirState::Empty | DirState::Initialized(_) => None,
        }
    }

    /// What is wrong, when something is.
    pub fn problem(&self) -> Option<&Problem> {
        self.failure().map(|f| &f.problem)
    }

    /// The WAL's identity and raft state: always for an initialized
    /// directory, for a failed one when its WAL was read whole.
    pub fn log(&self) -> Option<&Log> {
        match &self.state {
            DirState::Initialized(m) => Some(&m.log),
            DirState::Partial(f) | DirState::Corrupt(f) | DirState::Unreadable(f) => f.log.as_ref(),
            DirState::Empty => None,
        }
    }

    /// The member ID the WAL records.
    pub fn member_id(&self) -> Option<MemberId> {
        self.log().map(|l| l.member_id)
    }

    /// The cluster ID the WAL records.
    pub fn cluster_id(&self) -> Option<ClusterId> {
        self.log().map(|l| l.cluster_id)
    }

    /// The snapshot etcd would start from, once settled.
    pub fn snapshot(&self) -> Option<SnapshotPoint> {
        match &self.state {
            DirState::Initialized(m) => Some(m.snapshot),
            DirState::Partial(f) | DirState::Corrupt(f) | DirState::Unreadable(f) => f.snapshot,
            DirState::Empty => None,
        }
    }

    /// The backend's summary, when it was read.
    pub fn backend(&self) -> Option<&Backend> {
        self.initialized().and_then(Initialized::backend)
    }

    /// The KV hash, when `--hash` asked for it and the backend was read.
    pub fn kv_hash(&self) -> Option<&KvHash> {
        self.initialized().and_then(Initialized::kv_hash)
    }

    /// Ends the read with a directory that cannot be listed.
    fn unlisted(self, dir: &Path, e: &io::Error) -> Inspection {
        self.fail(
            io_state(e),
            format!("cannot list {}: {e}", dir.display()),
            Some(dir.to_path_buf()),
            None,
        )
    }

    /// Ends the read with a failure, before the WAL was read.
    fn fail(
        self,
        fault: Fault,
        message: String,
        path: Option<PathBuf>,
        offset: Option<u64>,
    ) -> Inspection {
        self.fail_after(fault, message, path, offset, None, None)
    }

    /// Ends the read with a failure, keeping what was read before it.
    fn fail_after(
        mut self,
        fault: Fault,
        message: String,
        path: Option<PathBuf>,
        offset: Option<u64>,
        log: Option<Log>,
        snapshot: Option<SnapshotPoint>,
    ) -> Inspection {
        let failure = Box::new(Failure {
            problem: Problem {
                message,
                path,
                offset,
            },
            log,
            snapshot,
            symlinked: None,
        });
        self.state = match fault {
            Fault::Partial => DirState::Partial(failure),
            Fault::Corrupt => DirState::Corrupt(failure),
            Fault::Unreadable => DirState::Unreadable(failure),
        };
        self
    }
}

/// The report's JSON: one flat object whose fields are `null` or empty where
/// the state has nothing to say (the shape `inspect -o json`, the verdict file
/// and the restore report have always had).
#[derive(Serialize)]
struct Flat<'a> {
    state: DirKind,
    paths: &'a Paths,
    member_id: Option<MemberId>,
    cluster_id: Option<ClusterId>,
    hard_state: Option<&'a HardState>,
    last_index: Option<u64>,
    last_term: Option<u64>,
    snapshot: Option<SnapshotPoint>,
    wal: Option<&'a WalFacts>,
    snap_files: &'a [String],
    backend: Option<&'a Backend>,
    kv_hash: Option<&'a KvHash>,
    backend_unread: Option<&'a str>,
    membership: &'a [RecordedMember],
    self_peer_urls: Option<&'a [String]>,
    self_name: Option<&'a str>,
    self_removed: bool,
    removed_ids: &'a [MemberId],
    added_with_peer_urls: Option<&'a [String]>,
    empty_log: bool,
    formation: &'a [FoundingMember],
    restored: bool,
    v2_replay: Option<&'a V2Replay>,
    snap_cluster_version: Option<&'a str>,
    v2_custom: &'a [String],
    learner_flag_stale: &'a [MemberId],
    symlinked: Option<&'a Path>,
    running: bool,
    locks: &'a [HeldLock],
    unexpected: &'a [Entry],
    problem: Option<&'a Problem>,
}

impl Serialize for Inspection {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let log = self.log();
        let m = self.initialized();
        Flat {
            state: self.kind(),
            paths: &self.paths,
            member_id: log.map(|l| l.member_id),
            cluster_id: log.map(|l| l.cluster_id),
            hard_state: log.map(|l| &l.hard_state),
            last_index: log.map(|l| l.last_index),
            last_term: log.map(|l| l.last_term),
            snapshot: self.snapshot(),
            wal: log.map(|l| &l.wal),
            snap_files: &self.snap_files,
            backend: self.backend(),
            kv_hash: self.kv_hash(),
            backend_unread: m.and_then(|m| match &m.backend {
                BackendRead::Unread(why) => Some(why.as_str()),
                BackendRead::Read { .. } => None,
            }),
            membership: m.map_or(&[], |m| &m.membership),
            self_peer_urls: m.and_then(|m| m.self_peer_urls.as_deref()),
            self_name: m.and_then(|m| m.self_name.as_deref()),
            self_removed: m.is_some_and(|m| m.self_removed),
            removed_ids: m.map_or(&[], |m| &m.removed_ids),
            added_with_peer_urls: m.and_then(|m| m.added_with_peer_urls.as_deref()),
            empty_log: m.is_some_and(|m| m.empty_log),
            formation: m.map_or(&[], |m| &m.formation),
            restored: m.is_some_and(|m| m.restored),
            v2_replay: m.map(|m| &m.v2_replay),
            snap_cluster_version: m.and_then(|m| m.snap_cluster_version.as_deref()),
            v2_custom: m.map_or(&[], |m| &m.v2_custom),
            learner_flag_stale: m.map_or(&[], |m| &m.learner_flag_stale),
            symlinked: self.failure().and_then(|f| f.symlinked.as_deref()),
            running: self.running,
            locks: &self.locks,
            unexpected: &self.unexpected,
            problem: self.problem(),
        }
        .serialize(s)
    }
}

/// The report of a directory whose read did not finish within the budget
/// (a volume that hangs): unreadable, never guessed.
pub fn unanswered(paths: &Paths, waited: std::time::Duration) -> Inspection {
    Inspection::new(paths).fail(
        Fault::Unreadable,
        format!(
            "reading {} did not finish within {} ms: the volume does not answer",
            paths.data_dir.display(),
            waited.as_millis()
        ),
        Some(paths.data_dir.clone()),
        None,
    )
}

/// What `inspect` should compute beyond the classification.
#[derive(Debug, Clone, Copy, Default)]
pub struct Options {
    /// Compute the KV hash (reads every key).
    pub hash: bool,
    /// Count the backend's pages in use (reads every page of the db). Off for
    /// pre-start decisions, which need only the identity records.
    pub usage: bool,
    /// How to look for a running etcd ([`Probe::Thorough`] unless a caller
    /// chooses the cheaper WAL-lock probe).
    pub locks: Probe,
    /// Threads that read at once (0: one per core the process may use). With
    /// `hash`, one of them reads the db while the others verify the WAL.
    pub threads: usize,
}

impl Options {
    /// The number of threads to read with: [`Options::threads`], or one per
    /// core the process may use (its affinity and CPU quota).
    pub fn thread_count(&self) -> usize {
        match self.threads {
            0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
            n => n,
        }
    }
}

/// The backend read on its own thread while the WAL is verified. Dropped
/// unused (inspect returned before it reached the backend: a corrupt WAL, a
/// missing `.snap`), the thread is detached, not joined: the report does not wait
/// for a db hash it will not use, nor hang on a data volume that hangs when the
/// WAL is on another one. The thread only reads; its result is discarded.
struct BackendAhead(Option<std::thread::JoinHandle<BackendResult>>);

type BackendResult = Result<(Backend, Option<KvHash>), super::bbolt::BoltError>;

impl BackendAhead {
    /// The read ahead's result, once; `None` when there was none or it was taken.
    fn take(&mut self) -> Option<BackendResult> {
        let handle = self.0.take()?;
        Some(
            handle
                .join()
                .unwrap_or_else(|p| std::panic::resume_unwind(p)),
        )
    }
}

fn kind_of(ft: &std::fs::FileType) -> &'static str {
    if ft.is_symlink() {
        "symlink"
    } else if ft.is_dir() {
        "dir"
    } else if ft.is_file() {
        "file"
    } else {
        "other"
    }
}

/// The kind of an entry, for a sentence: "a symlink", "a directory", ...
fn a_kind(ft: &std::fs::FileType) -> &'static str {
    match kind_of(ft) {
        "symlink" => "a symlink",
        "dir" => "a directory",
        "file" => "a regular file",
        _ => "a special file (FIFO, socket or device)",
    }
}

/// Lists a directory without following symlinks. `Ok(None)` when it does not exist.
fn list_dir(dir: &Path) -> io::Result<Option<Vec<(String, std::fs::FileType)>>> {
    let rd = match std::fs::read_dir(dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let mut out = Vec::new();
    for e in rd {
        let e = e?;
        out.push((e.file_name().to_string_lossy().into_owned(), e.file_type()?));
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(Some(out))
}

/// etcd's `wal.Exist` test for one directory entry name.
fn is_wal_segment(name: &str) -> bool {
    name.ends_with(".wal")
}

/// `wal.Exist`: does the WAL dir hold a segment? One listing, nothing read,
/// nothing followed; a directory that cannot be listed answers `false` (the
/// full [`inspect`] reports why).
pub fn wal_exists(paths: &Paths) -> bool {
    matches!(list_dir(&paths.wal_dir), Ok(Some(entries)) if entries.iter().any(|(n, _)| is_wal_segment(n)))
}

fn io_state(e: &io::Error) -> Fault {
    if e.kind() == io::ErrorKind::PermissionDenied {
        Fault::Unreadable
    } else if e.raw_os_error() == Some(nix::libc::ELOOP)
        || e.raw_os_error() == Some(nix::libc::ENOTDIR)
    {
        Fault::Corrupt
    } else {
        Fault::Unreadable
    }
}

/// Inspects a data directory: classification, identity, raft state, backend facts
/// and locks. Never writes, never locks, never follows a symlink inside the data
/// dir. Problems become the `state` and `problem` of the report, not errors: every
/// directory gets a report.
#[tracing::instrument(level = "debug", skip_all, fields(data_dir = %paths.data_dir.display()))]
pub fn inspect(paths: &Paths, opts: Options) -> Inspection {
    let mut r = Inspection::new(paths);

    // The data dir itself may be a symlink (a mount's subPath); entries inside may not.
    let data_entries = match list_dir(&paths.data_dir) {
        Ok(Some(e)) => e,
        Ok(None) => Vec::new(),
        Err(e) => return r.unlisted(&paths.data_dir, &e),
    };
    let mut member_kind = None;
    for (name, ft) in &data_entries {
        let path = paths.data_dir.join(name);
        match name.as_str() {
            "member" => member_kind = Some(*ft),
            "lost+found" => r.unexpected.push(Entry {
                path,
                kind: kind_of(ft),
                note: "file-system debris; etcd ignores it",
            }),
            ".restore-staging" => r.unexpected.push(Entry {
                path,
                kind: kind_of(ft),
                note: "debris of an interrupted restore; the next restore removes it",
            }),
            _ if paths.wal_dir.starts_with(&path) => {}
            _ => r.unexpected.push(Entry {
                path,
                kind: kind_of(ft),
                note: "not written by etcd",
            }),
        }
    }
    if let Some(ft) = member_kind {
        if !ft.is_dir() {
            return r.fail(
                Fault::Corrupt,
                format!(
                    "{} is a {}, not a directory",
                    paths.member_dir.display(),
                    kind_of(&ft)
                ),
                Some(paths.member_dir.clone()),
                None,
            );
        }
    }

    let member_entries = match list_dir(&paths.member_dir) {
        Ok(e) => e.unwrap_or_default(),
        Err(e) => return r.unlisted(&paths.member_dir, &e),
    };
    // Nothing inside the data dir is followed: a symlinked `member/wal` or
    // `member/snap` would take every read out of it (and a loop would be an
    // ELOOP at best). A dedicated `--wal-dir` is the operator's choice and may be
    // a symlink, like the data dir itself.
    let default_wal_dir = paths.wal_dir == paths.member_dir.join("wal");
    for (name, ft) in &member_entries {
        let must_be_dir = name == "snap" || (name == "wal" && default_wal_dir);
        if must_be_dir && !ft.is_dir() {
            let path = paths.member_dir.join(name);
            // A symlink to a directory is what etcd follows and the agent does
            // not: name it, so the remedy is a flag and not a new member. (A
            // stat of the target, never a read through it.)
            if ft.is_symlink() && std::fs::metadata(&path).is_ok_and(|m| m.is_dir()) {
                let flag = if name == "wal" {
                    "pass its target as --wal-dir (ETCD_WAL_DIR) to etcd and to the agent"
                } else {
                    "mount the volume so that member/snap is a directory"
                };
                let mut r = r.fail(
                    Fault::Unreadable,
                    format!(
                        "{} is a symlink to a directory; symlinks inside the data dir are not followed: {flag}",
                        path.display()
                    ),
                    Some(path.clone()),
                    None,
                );
                if let DirState::Unreadable(f) = &mut r.state {
                    f.symlinked = Some(path);
                }
                return r;
            }
            return r.fail(
                Fault::Corrupt,
                format!(
                    "{} is {}, not a directory (symlinks inside the data dir are not followed)",
                    path.display(),
                    a_kind(ft)
                ),
                Some(path),
                None,
            );
        }
    }

    // wal.Exist: is there any *.wal in the WAL dir?
    let wal_entries = match list_dir(&paths.wal_dir) {
        Ok(e) => e.unwrap_or_default(),
        Err(e) => return r.unlisted(&paths.wal_dir, &e),
    };
    let has_wal = wal_entries.iter().any(|(n, _)| is_wal_segment(n));
    for (name, ft) in &wal_entries {
        if !name.ends_with(".wal") {
            let note = if name.ends_with(".tmp") {
                "preallocated WAL segment; etcd reuses or removes it"
            } else if name.ends_with(".broken") {
                "a torn tail etcd set aside while repairing"
            } else {
                "not a WAL segment"
            };
            r.unexpected.push(Entry {
                path: paths.wal_dir.join(name),
                kind: kind_of(ft),
                note,
            });
        }
    }
    let snap_entries = match list_dir(&paths.snap_dir) {
        Ok(e) => e.unwrap_or_default(),
        Err(e) => return r.unlisted(&paths.snap_dir, &e),
    };

    let mut lock_files: Vec<PathBuf> = wal_entries
        .iter()
        .filter(|(n, ft)| ft.is_file() && (n.ends_with(".wal") || n.ends_with(".tmp")))
        .map(|(n, _)| paths.wal_dir.join(n))
        .collect();
    if snap_entries.iter().any(|(n, _)| n == "db") {
        lock_files.push(paths.db());
    }
    r.locks = held_locks(&lock_files, opts.locks);
    r.running = !r.locks.is_empty();

    if !has_wal {
        if member_kind.is_none() {
            return r;
        }
        if let Some((path, kind, note)) =
            failed_first_start_debris(paths, &member_entries, &snap_entries, &wal_entries)
        {
            r.unexpected.push(Entry { path, kind, note });
            return r;
        }
        let what: Vec<String> = member_entries
            .iter()
            .map(|(n, _)| format!("member/{n}"))
            .chain(snap_entries.iter().map(|(n, _)| format!("member/snap/{n}")))
            .collect();
        let why = if member_entries.iter().any(|(n, _)| n == "wal.tmp") {
            "WAL creation was interrupted (member/wal.tmp)".to_string()
        } else if snap_entries.iter().any(|(n, _)| n == "db") {
            "a backend db without a WAL: etcd would bootstrap over a stale db".to_string()
        } else {
            format!(
                "member/ exists without a WAL ({})",
                if what.is_empty() {
                    "empty".into()
                } else {
                    what.join(", ")
                }
            )
        };
        return r.fail(Fault::Partial, why, Some(paths.member_dir.clone()), None);
    }

    // Initialized as far as etcd is concerned: read the WAL. The KV hash reads
    // the whole db; with a second thread it does so while the WAL is verified,
    // but only while no etcd holds the dir: a running etcd moves both, and the
    // checks below hold only for a db read after the WAL and .snap files (read
    // first, the db can predate the snapshot the WAL names). Only a regular
    // file is opened (a FIFO would block the open forever, a symlink would lead
    // out of the data dir): anything else is reported below.
    let mut threads = opts.thread_count();
    let db_is_file = snap_entries.iter().any(|(n, ft)| n == "db" && ft.is_file());
    let mut ahead = BackendAhead((opts.hash && !r.running && db_is_file && threads > 1).then(
        || {
            threads -= 1;
            let db_path = paths.db();
            std::thread::spawn(move || read_backend(&db_path, opts))
        },
    ));
    let wal = match wal::read_wal_with(&paths.wal_dir, threads) {
        Ok(w) => w,
        Err(e) => return wal_failure(r, e),
    };
    let log = Log {
        member_id: wal.member_id,
        cluster_id: wal.cluster_id,
        hard_state: wal.hard_state,
        last_index: wal.last_index,
        last_term: wal.last_term,
        wal: WalFacts {
            segments: wal
                .segments
                .iter()
                .map(|s| SegmentFacts {
                    name: s.name.clone(),
                    size: s.size,
                })
                .collect(),
            records: wal.records,
            torn_tail: wal.torn_tail.as_ref().map(|t| Problem {
                message: t.detail.clone(),
                path: Some(t.path.clone()),
                offset: Some(t.offset),
            }),
        },
    };

    // Snapshots: the newest WAL snapshot record with a .snap file is what etcd loads.
    let snaps = match list_snaps(&paths.snap_dir) {
        Ok(s) => s,
        Err(e) => {
            let fault = Fault::reading(e.is_permission());
            return r.fail_after(
                fault,
                e.to_string(),
                Some(paths.snap_dir.clone()),
                None,
                Some(log),
                None,
            );
        }
    };
    r.snap_files = snaps
        .iter()
        .filter_map(|s| s.path.file_name().map(|n| n.to_string_lossy().into_owned()))
        .collect();
    let commit = wal.hard_state.commit;
    let in_use = wal
        .snapshots
        .iter()
        .rev()
        .filter(|s| s.index > 0 && s.index <= commit)
        .find_map(|s| {
            snaps
                .iter()
                .find(|f| f.index == s.index && f.term == s.term)
        });
    let newest_record = wal
        .snapshots
        .iter()
        .filter(|s| s.index > 0)
        .max_by_key(|s| s.index);
    // 3.7 no longer loads `.snap` files (3.8 no longer writes them): it starts from
    // the newest WAL snapshot record at or below the commit, with or without its
    // `.snap`, and takes membership from the backend. Up to 3.6 a record without
    // its `.snap` is unusable. Which rule applies follows the storage version,
    // read only when a record lacks its file.
    let newest_committed = wal
        .snapshots
        .iter()
        .filter(|s| s.index > 0 && s.index <= commit)
        .max_by_key(|s| s.index);
    let snap_less = newest_committed.is_some_and(|s| in_use.is_none_or(|f| f.index < s.index))
        || (in_use.is_none() && newest_record.is_some());
    let snap_optional =
        snap_less && storage_line(paths, &snap_entries).is_some_and(|v| v >= (3, 7));
    let first_segment_index = wal.segments.first().map_or(0, |s| s.first_index);
    if !snap_optional && in_use.is_none() && newest_record.is_some() && first_segment_index > 0 {
        let s = newest_record.map(|s| (s.term, s.index)).unwrap_or_default();
        return r.fail_after(
            Fault::Corrupt,
            format!(
                "the WAL refers to snapshot {} but no such .snap file exists and the WAL no longer starts at index 0",
                super::snap::snap_file_name(s.0, s.1)
            ),
            Some(paths.snap_dir.clone()),
            None,
            Some(log),
            None,
        );
    }
    let in_use = if snap_optional { None } else { in_use };
    let snap_file: Option<SnapFile> = match in_use {
        Some(name) => match read_snap(&name.path) {
            Ok(f) => Some(f),
            Err(e) => {
                let fault = Fault::reading(e.is_permission());
                return r.fail_after(
                    fault,
                    e.to_string(),
                    Some(name.path.clone()),
                    None,
                    Some(log),
                    None,
                );
            }
        },
        None => None,
    };
    let snapshot = if snap_optional {
        newest_committed.map_or(SnapshotPoint { index: 0, term: 0 }, |s| SnapshotPoint {
            index: s.index,
            term: s.term,
        })
    } else {
        snap_file
            .as_ref()
            .map_or(SnapshotPoint { index: 0, term: 0 }, |f| SnapshotPoint {
                index: f.index,
                term: f.term,
            })
    };

    // The backend.
    let db_path = paths.db();
    if !snap_entries.iter().any(|(n, _)| n == "db") {
        return r.fail_after(
            Fault::Partial,
            "a WAL without a backend db (member/snap/db)".into(),
            Some(db_path),
            None,
            Some(log),
            Some(snapshot),
        );
    }
    // Only a regular file is opened: a FIFO would block the open forever, a
    // symlink would lead out of the data dir.
    if let Some((_, ft)) = snap_entries.iter().find(|(n, _)| n == "db") {
        if !ft.is_file() {
            return r.fail_after(
                Fault::Corrupt,
                format!(
                    "{} is {}, not a regular file (symlinks inside the data dir are not followed)",
                    db_path.display(),
                    a_kind(ft)
                ),
                Some(db_path),
                None,
                Some(log),
                Some(snapshot),
            );
        }
    }
    // A running etcd commits to the db while it is read without its lock: pages
    // can be freed and reused under the reader, and what looks broken is only a
    // moving target. So while the locks are held a failed read is retried, and if
    // it keeps failing the backend is left out of the report; the WAL decides.
    let mut attempt = 1;
    let backend = loop {
        let read = match ahead.take() {
            Some(read) => read,
            None => read_backend(&db_path, opts),
        };
        match read {
            Ok((summary, kv_hash)) => break BackendRead::Read { summary, kv_hash },
            Err(e) if r.running && !e.is_permission() => {
                if attempt < RUNNING_DB_ATTEMPTS {
                    attempt += 1;
                    continue;
                }
                break BackendRead::Unread(format!(
                    "etcd is running and committed to the db while it was read ({attempt} attempts): {e}"
                ));
            }
            Err(e) => {
                return r.fail_after(
                    backend_state(&e),
                    e.to_string(),
                    Some(db_path),
                    e.offset(),
                    Some(log),
                    Some(snapshot),
                )
            }
        }
    };
    let summary = match &backend {
        BackendRead::Read { summary, .. } => Some(summary),
        BackendRead::Unread(_) => None,
    };
    if let Some(b) = summary {
        let ci = b.consistent_index.unwrap_or(0);
        let has_snap_db = snap_entries.iter().any(|(n, _)| n.ends_with(".snap.db"));
        if ci < snapshot.index && !has_snap_db {
            return r.fail_after(
                Fault::Corrupt,
                format!(
                    "the backend's consistent index {ci} is below the snapshot index {} and no .snap.db is present",
                    snapshot.index
                ),
                Some(db_path),
                None,
                Some(log),
                Some(snapshot),
            );
        }
    }

    let membership = membership(&wal, snap_file.as_ref(), summary);
    let own = membership.iter().find(|m| m.id == wal.member_id);
    let self_peer_urls = own.map(|m| m.peer_urls.clone());
    let self_name = own.map(|m| m.name.clone()).filter(|n| !n.is_empty());
    let mut removed: Vec<MemberId> = summary
        .iter()
        .flat_map(|b| b.removed_members.iter().copied())
        .chain(snap_file.iter().flat_map(|f| f.removed.iter().copied()))
        .chain(
            wal.conf_changes
                .iter()
                .filter(|c| c.kind == ConfChangeKind::RemoveNode)
                .map(|c| c.node_id),
        )
        .collect();
    removed.sort_unstable();
    removed.dedup();
    let added_with_peer_urls = wal
        .conf_changes
        .iter()
        .filter(|c| c.node_id == wal.member_id && c.kind != ConfChangeKind::RemoveNode)
        .find_map(|c| c.member.as_ref().filter(|m| !m.is_promote))
        .map(|m| m.member.peer_urls.clone())
        .filter(|u| !u.is_empty());
    let learner_flag_stale = summary
        .map(|b| stale_learner_flags(&wal, snap_file.as_ref(), b))
        .unwrap_or_default();
    let formation = formation(&wal);
    let restored = !formation.is_empty()
        && wal
            .snapshots
            .iter()
            .any(|s| s.index == formation.len() as u64 && s.term == 1)
        && summary.is_some_and(|b| b.revision.unwrap_or(0) > 1);
    let member = Initialized {
        self_removed: removed.contains(&wal.member_id),
        removed_ids: removed,
        added_with_peer_urls,
        formation,
        restored,
        empty_log: wal.last_index == 0
            && wal.snapshots.iter().all(|s| s.index == 0)
            && snapshot.index == 0,
        v2_replay: wal.v2.replay(snapshot.index, commit),
        v2_custom: snap_file
            .as_ref()
            .map(|f| f.v2_custom.clone())
            .unwrap_or_default(),
        snap_cluster_version: snap_file.as_ref().and_then(|f| f.cluster_version.clone()),
        snap_member_roles: snap_file
            .iter()
            .flat_map(|f| {
                f.members
                    .iter()
                    .map(|m| (m.id, m.is_learner || f.learners.contains(&m.id)))
            })
            .collect(),
        learner_flag_stale,
        membership,
        self_peer_urls,
        self_name,
        snapshot,
        backend,
        log,
    };
    r.state = DirState::Initialized(Box::new(member));
    r
}

/// A member of the set that formed a cluster, as its bootstrap entry records it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FoundingMember {
    /// The ID etcd gave it at bootstrap.
    pub id: MemberId,
    /// The peer URLs it was formed with, as etcd hashed them.
    pub peer_urls: Vec<String>,
}

/// The founding members of the WAL's cluster (see [`Initialized::formation`]);
/// empty when the WAL no longer starts at index 1 or the entries do not hash
/// to its cluster ID.
fn formation(wal: &wal::Wal) -> Vec<FoundingMember> {
    let mut founding = Vec::new();
    for (expect, c) in (1u64..).zip(&wal.conf_changes) {
        if c.index != expect || c.term != 1 || c.kind != ConfChangeKind::AddNode {
            break;
        }
        match &c.member {
            Some(m)
                if m.member.id == c.node_id && !m.member.peer_urls.is_empty() && !m.is_promote =>
            {
                founding.push(FoundingMember {
                    id: m.member.id,
                    peer_urls: m.member.peer_urls.clone(),
                });
            }
            _ => return Vec::new(),
        }
    }
    let ids: Vec<MemberId> = founding.iter().map(|m| m.id).collect();
    if founding.is_empty() || super::ids::cluster_id(&ids) != wal.cluster_id {
        return Vec::new();
    }
    founding
}

/// The members whose backend learner flag disagrees with the v2 membership: the
/// `.snap`'s learners (without a `.snap`, none: the whole WAL then says), then
/// the WAL's membership changes after it (a learner added, a learner promoted
/// by `AddNode`, a member removed). Only members both sides know are compared.
fn stale_learner_flags(
    wal: &wal::Wal,
    snap: Option<&SnapFile>,
    backend: &Backend,
) -> Vec<MemberId> {
    let mut learner: std::collections::BTreeMap<MemberId, bool> = snap
        .iter()
        .flat_map(|s| {
            s.members
                .iter()
                .map(|m| (m.id, m.is_learner || s.learners.contains(&m.id)))
        })
        .collect();
    let after = snap.map_or(0, |s| s.index);
    for cc in wal.conf_changes.iter().filter(|c| c.index > after) {
        match cc.kind {
            ConfChangeKind::AddLearnerNode => {
                learner.insert(cc.node_id, true);
            }
            ConfChangeKind::AddNode => {
                learner.insert(cc.node_id, false);
            }
            ConfChangeKind::RemoveNode => {
                learner.remove(&cc.node_id);
            }
            ConfChangeKind::UpdateNode | ConfChangeKind::Other(_) => {}
        }
    }
    backend
        .members
        .iter()
        .filter(|m| learner.get(&m.id).is_some_and(|&l| l != m.is_learner))
        .map(|m| m.id)
        .collect()
}

/// etcd opens the backend before its bootstrap and join checks, so a first
/// start that fails (member count unequal, a peer unreachable, a bad URL)
/// leaves `member/snap/db` and nothing else; one killed within milliseconds
/// of starting leaves less: `member/` and `member/snap/` with nothing in them
/// (created before the db), or a db file of zero bytes (created, not yet
/// initialised; bbolt initialises an empty file when it opens it). None of
/// these has applied anything: etcd starts on them as on an empty directory,
/// so they are classified as empty, and returned here (path, kind, note) to
/// be reported as debris. Anything else etcd wrote, a db with a consistent
/// index, members or keys, or any doubt reading the db keeps the directory
/// partial.
fn failed_first_start_debris(
    paths: &Paths,
    member_entries: &[(String, std::fs::FileType)],
    snap_entries: &[(String, std::fs::FileType)],
    wal_entries: &[(String, std::fs::FileType)],
) -> Option<(PathBuf, &'static str, &'static str)> {
    // `wal.tmp`: a first start killed while creating its WAL (etcd's WAL
    // creation removes a leftover one).
    let only = |entries: &[(String, std::fs::FileType)], allowed: &[&str]| {
        entries
            .iter()
            .all(|(n, ft)| ft.is_dir() && allowed.contains(&n.as_str()))
    };
    if !only(member_entries, &["snap", "wal", "wal.tmp"])
        || !snap_entries.iter().all(|(n, ft)| n == "db" && ft.is_file())
        || !wal_entries.is_empty()
    {
        return None;
    }
    if snap_entries.is_empty() {
        return Some((
            paths.member_dir.clone(),
            "dir",
            "debris of a first start killed at once (member/ and its directories, nothing in them): etcd starts on it as on an empty directory",
        ));
    }
    let db_path = paths.db();
    if std::fs::symlink_metadata(&db_path).ok()?.len() == 0 {
        return Some((
            db_path,
            "file",
            "debris of a first start, or of an `etcdutl snapshot restore`, killed before the db was written (a backend db of zero bytes, never initialised, and no WAL): nothing was applied; etcd initialises it",
        ));
    }
    let db = Db::open(&db_path).ok()?;
    let backend = db.identity_summary().ok()?;
    if backend.consistent_index.unwrap_or(0) != 0 || !backend.members.is_empty() {
        return None;
    }
    let mut keys = 0u64;
    db.for_each_kv(b"key", |_, _| keys += 1).ok()?;
    (keys == 0).then_some((
        db_path,
        "file",
        "debris of a failed first start (a backend db with no consistent index, no members and no keys, and no WAL): etcd reuses it",
    ))
}

/// `(major, minor)` of the backend's storage version as etcd detects it, for the
/// rules that follow the version; `None` when the db is not a regular file,
/// cannot be read, or does not tell.
fn storage_line(paths: &Paths, snap_entries: &[(String, std::fs::FileType)]) -> Option<(u32, u32)> {
    if !snap_entries.iter().any(|(n, ft)| n == "db" && ft.is_file()) {
        return None;
    }
    let db = Db::open(&paths.db()).ok()?;
    let raw = db
        .get(b"meta", b"storageVersion")
        .ok()
        .flatten()
        .map(|v| String::from_utf8_lossy(&v).into_owned());
    let term = db
        .get(b"meta", b"term")
        .ok()
        .flatten()
        .and_then(|v| <[u8; 8]>::try_from(v.as_slice()).ok())
        .map(u64::from_be_bytes);
    let (version, _) = detect_storage_version(raw.as_deref(), term);
    version.as_deref().and_then(semver_minor)
}

/// How many times the db of a running etcd is read before giving up on it.
const RUNNING_DB_ATTEMPTS: u32 = 3;

/// Opens the db and reads its summary and, with `hash`, the KV hash, both from
/// the meta chosen at open.
fn read_backend(
    db_path: &Path,
    opts: Options,
) -> Result<(Backend, Option<KvHash>), super::bbolt::BoltError> {
    let db = Db::open(db_path)?;
    let backend = if opts.usage {
        db.summary()?
    } else {
        db.identity_summary()?
    };
    let kv_hash = if opts.hash { Some(db.kv_hash()?) } else { None };
    Ok((backend, kv_hash))
}

fn backend_state(e: &super::bbolt::BoltError) -> Fault {
    Fault::reading(e.is_permission())
}

fn wal_failure(r: Inspection, e: WalError) -> Inspection {
    let fault = Fault::reading(e.is_permission());
    let (path, offset) = e.location();
    r.fail(fault, e.to_string(), path, offset)
}

/// The membership recorded in the directory: the backend's `members` bucket, then
/// the `.snap` in use, then ConfChange entries after it, each later source
/// overriding an earlier one for the same ID (3.4's backend can lag its `.snap`
/// after a restore; the WAL's conf changes are the newest word), except a
/// learner's promotion, which carries no URLs.
fn membership(
    wal: &Wal,
    snap: Option<&SnapFile>,
    backend: Option<&Backend>,
) -> Vec<RecordedMember> {
    let mut by_id: BTreeMap<MemberId, RecordedMember> = BTreeMap::new();
    for m in backend.iter().flat_map(|b| &b.members) {
        by_id.insert(
            m.id,
            RecordedMember {
                id: m.id,
                name: m.name.clone(),
                peer_urls: m.peer_urls.clone(),
                source: MemberSource::Backend,
            },
        );
    }
    for id in backend.iter().flat_map(|b| &b.removed_members) {
        by_id.remove(id);
    }
    let snap_index = snap.map_or(0, |s| s.index);
    if let Some(s) = snap {
        for m in &s.members {
            by_id.insert(
                m.id,
                RecordedMember {
                    id: m.id,
                    name: m.name.clone(),
                    peer_urls: m.peer_urls.clone(),
                    source: MemberSource::Snap,
                },
            );
        }
        for id in &s.removed {
            by_id.remove(id);
        }
    }
    for cc in wal.conf_changes.iter().filter(|c| c.index > snap_index) {
        match cc.kind {
            ConfChangeKind::RemoveNode => {
                by_id.remove(&cc.node_id);
            }
            // A promotion's context names the member by ID only (3.5+
            // `ConfigChangeContext{isPromote}`, no peer URLs): it turns a
            // learner into a voter and changes nothing this list records.
            _ if cc.member.as_ref().is_some_and(|m| m.is_promote) => {}
            _ => {
                if let Some(m) = &cc.member {
                    let name = by_id
                        .get(&cc.node_id)
                        .map(|e| e.name.clone())
                        .unwrap_or_default();
                    by_id.insert(
                        cc.node_id,
                        RecordedMember {
                            id: cc.node_id,
                            name: if m.member.name.is_empty() {
                                name
                            } else {
                                m.member.name.clone()
                            },
                            peer_urls: m.member.peer_urls.clone(),
                            source: MemberSource::Wal,
                        },
                    );
                }
            }
        }
    }
    by_id.into_values().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn json(i: &Inspection) -> serde_json::Map<String, serde_json::Value> {
        match serde_json::to_value(i).expect("serializes") {
            serde_json::Value::Object(m) => m,
            other => panic!("not an object: {other}"),
        }
    }

    #[test]
    fn every_state_is_one_flat_object_with_the_same_fields() {
        let paths = Paths::new(Path::new("/d"), None);
        let empty = Inspection::new(&paths);
        let before_wal = Inspection::new(&paths).fail(Fault::Unreadable, "u".into(), None, None);
        let after_wal = Inspection::new(&paths).fail_after(
            Fault::Partial,
            "p".into(),
            None,
            None,
            Some(Initialized::blank().log),
            Some(SnapshotPoint { index: 7, term: 2 }),
        );
        let mut initialized = Inspection::new(&paths);
        initialized.state = DirState::Initialized(Box::new(Initialized::blank()));
        let all = [&empty, &before_wal, &after_wal, &initialized];
        let keys: Vec<Vec<String>> = all
            .iter()
            .map(|i| json(i).keys().cloned().collect())
            .collect();
        assert!(keys.iter().all(|k| *k == keys[0]), "{keys:?}");
        assert_eq!(keys[0].len(), 31);
        let state = |i: &Inspection| json(i)["state"].clone();
        assert_eq!(
            all.map(state),
            ["empty", "unreadable", "partial", "initialized"].map(serde_json::Value::from)
        );
        // What a state cannot know is null, what it knows is there.
        assert!(json(&empty)["member_id"].is_null());
        assert!(json(&before_wal)["member_id"].is_null());
        assert_eq!(json(&after_wal)["member_id"], "0000000000000000");
        assert_eq!(json(&after_wal)["snapshot"]["index"], 7);
        assert!(json(&after_wal)["v2_replay"].is_null());
        assert_eq!(json(&after_wal)["problem"]["message"], "p");
        assert!(json(&initialized)["problem"].is_null());
        assert!(json(&initialized)["v2_replay"].is_object());
        assert_eq!(
            json(&initialized)["backend_unread"],
            serde_json::Value::from("")
        );
    }
}
