//! The report of a directory ([`Inspection`]) and its JSON.

use std::path::Path;

use serde::Serialize;

use super::super::bbolt::{Backend, KvHash};
use super::super::lock::HeldLock;
use super::super::raftpb::HardState;
use super::super::v2req::V2Replay;
use super::{
    BackendRead, DirKind, DirState, Entry, Failure, FoundingMember, Initialized, Log, Paths,
    Problem, RecordedMember, SnapshotPoint, WalFacts,
};
use crate::disk::ids::{ClusterId, MemberId};

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
    /// The locks other processes hold on the WAL segments (`*.wal`, `*.tmp`)
    /// and the backend, as `/proc/locks` lists them; any one makes `running`
    /// true.
    pub locks: Vec<HeldLock>,
    /// Entries etcd tolerates or would not expect (reported, not fatal).
    pub unexpected: Vec<Entry>,
}

impl Inspection {
    /// A report that has found nothing yet: an empty directory.
    pub(super) fn new(paths: &Paths) -> Inspection {
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
