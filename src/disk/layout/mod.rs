//! Classification of a data directory exactly as etcd itself would see it, and the
//! whole offline report (`inspect`) built on the readers.
//!
//! etcd's own test for "initialized" is `wal.Exist`: at least one `*.wal` entry in
//! the WAL dir. With one, every `--initial-*` flag is ignored and the identity
//! comes from the WAL; without one, etcd bootstraps or joins. So that test decides
//! `empty` versus everything else here too, and what etcd tolerates (`0.tmp`,
//! `lost+found`, `*.broken`) is debris, not evidence.
//!
//! [`inspect`] reads in etcd's order, one step a module: `list` (the four
//! listings, `wal.Exist`, what etcd would not expect), `locks` (is an etcd
//! running on it), `log` (the WAL), `snapshot` (where etcd starts),
//! `backend` (the db) and `membership` (what the directory records of its
//! cluster). Each step hands the next what it found, or ends the read with the
//! state it found; a failure after the WAL keeps what was read before it.

mod backend;
mod list;
mod locks;
mod log;
mod membership;
mod report;
mod snapshot;
mod state;
#[cfg(test)]
mod tests;

use std::path::{Path, PathBuf};

use serde::Serialize;

use super::lock::Probe;
pub use report::Inspection;
pub use state::{
    BackendRead, DirKind, DirState, Entry, Failure, FoundingMember, Initialized, Log, MemberSource,
    Problem, RecordedMember, SegmentFacts, SnapshotPoint, WalFacts,
};

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

    /// The bbolt backend, `<data-dir>/member/snap/db` (etcd keeps it in the snap
    /// dir whatever `--wal-dir` says).
    pub fn db(&self) -> PathBuf {
        self.snap_dir.join("db")
    }
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
    pub(crate) fn thread_count(&self) -> usize {
        match self.threads {
            0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
            n => n,
        }
    }
}

/// The report of a directory whose read did not finish within the budget
/// (a volume that hangs): unreadable, never guessed.
pub fn unanswered(paths: &Paths, waited: std::time::Duration) -> Inspection {
    let mut r = Inspection::new(paths);
    r.state = DirState::Unreadable(Failure::at(
        format!(
            "reading {} did not finish within {} ms: the volume does not answer",
            paths.data_dir.display(),
            waited.as_millis()
        ),
        Some(paths.data_dir.clone()),
        None,
    ));
    r
}

/// `wal.Exist`: does the WAL dir hold a segment? One listing, nothing read,
/// nothing followed; a directory that cannot be listed answers `false` (the
/// full [`inspect`] reports why).
pub(crate) fn wal_exists(paths: &Paths) -> bool {
    list::wal_exists(&paths.wal_dir)
}

/// Inspects a data directory: classification, identity, raft state, backend facts
/// and locks. Never writes, never locks, never follows a symlink inside the data
/// dir. Problems become the `state` and `problem` of the report, not errors: every
/// directory gets a report.
#[tracing::instrument(level = "debug", skip_all, fields(data_dir = %paths.data_dir.display()))]
pub fn inspect(paths: &Paths, opts: Options) -> Inspection {
    let mut r = Inspection::new(paths);
    r.state = match read(paths, opts, &mut r) {
        Ok(member) => DirState::Initialized(Box::new(member)),
        Err(ended) => ended,
    };
    r
}

/// The steps of [`inspect`], in order: `Err` is the state the read ended in
/// (an empty directory ends it too). What every state reports (the entries
/// etcd would not expect, the locks, the `.snap` files) goes into `r` as it
/// is found.
fn read(paths: &Paths, opts: Options, r: &mut Inspection) -> Result<Initialized, DirState> {
    let listing = list::list(paths, &mut r.unexpected)?;
    r.locks = locks::held(paths, &listing, opts.locks);
    r.running = !r.locks.is_empty();
    if !listing.has_wal() {
        return Err(list::without_wal(paths, &listing, &mut r.unexpected));
    }
    // Initialized as far as etcd is concerned.
    let (ahead, threads) = backend::Ahead::start(paths, &listing, opts, r.running);
    let (wal, log) = log::read(paths, threads)?;
    let snaps = snapshot::list(paths).map_err(|ended| ended.after(&log, None))?;
    r.snap_files = snaps
        .iter()
        .filter_map(|s| s.path.file_name().map(|n| n.to_string_lossy().into_owned()))
        .collect();
    let start =
        snapshot::start(paths, &listing, &wal, &snaps).map_err(|ended| ended.after(&log, None))?;
    let backend = backend::read(paths, &listing, opts, r.running, ahead, start.point)
        .map_err(|ended| ended.after(&log, Some(start.point)))?;
    Ok(membership::initialized(&wal, log, start, backend))
}
