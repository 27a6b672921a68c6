//! Step five: the bbolt backend (`member/snap/db`), read after the WAL and the
//! start snapshot, or ahead of them on a thread of its own when `--hash`
//! reads every key of an idle directory.

use std::path::Path;
use std::thread::JoinHandle;

use super::super::bbolt::{Backend, BoltError, Db, KvHash};
use super::list::Listing;
use super::{BackendRead, DirState, Failure, Options, Paths, SnapshotPoint};

/// How many times the db of a running etcd is read before giving up on it.
const RUNNING_DB_ATTEMPTS: u32 = 3;

type BackendResult = Result<(Backend, Option<KvHash>), BoltError>;

/// The backend read on its own thread while the WAL is verified. Dropped
/// unused (inspect returned before it reached the backend: a corrupt WAL, a
/// missing `.snap`), the thread is detached, not joined: the report does not wait
/// for a db hash it will not use, nor hang on a data volume that hangs when the
/// WAL is on another one. The thread only reads; its result is discarded.
pub(super) struct Ahead(Option<JoinHandle<BackendResult>>);

impl Ahead {
    /// Starts the read ahead when it pays and is sound, and returns it with
    /// the threads left for the WAL. It pays with `--hash` (the whole db is
    /// read) and a second thread; it is sound only while no etcd holds the
    /// directory: a running etcd moves both, and the checks of [`read`] hold
    /// only for a db read after the WAL and `.snap` files (read first, the db
    /// can predate the snapshot the WAL names). Only a regular file is opened
    /// (a FIFO would block the open forever, a symlink would lead out of the
    /// data dir).
    pub(super) fn start(
        paths: &Paths,
        listing: &Listing,
        opts: Options,
        running: bool,
    ) -> (Ahead, usize) {
        let threads = opts.thread_count();
        if !opts.hash || running || !listing.db_is_file() || threads <= 1 {
            return (Ahead(None), threads);
        }
        let db_path = paths.db();
        let handle = std::thread::spawn(move || read_db(&db_path, opts));
        (Ahead(Some(handle)), threads - 1)
    }

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

/// Reads the backend (or takes what [`Ahead`] read) and checks it against the
/// start snapshot. A missing db, one that is not a regular file, one that
/// fails its checks, or a consistent index below the snapshot without a
/// received `.snap.db` ends the read.
pub(super) fn read(
    paths: &Paths,
    listing: &Listing,
    opts: Options,
    running: bool,
    mut ahead: Ahead,
    snapshot: SnapshotPoint,
) -> Result<BackendRead, DirState> {
    let db_path = paths.db();
    let Some(ft) = listing.db() else {
        return Err(DirState::Partial(Failure::at(
            "a WAL without a backend db (member/snap/db)".into(),
            Some(db_path),
            None,
        )));
    };
    // Only a regular file is opened: a FIFO would block the open forever, a
    // symlink would lead out of the data dir.
    if !ft.is_file() {
        return Err(DirState::Corrupt(Failure::at(
            format!(
                "{} is {}, not a regular file (symlinks inside the data dir are not followed)",
                db_path.display(),
                super::list::a_kind(&ft)
            ),
            Some(db_path),
            None,
        )));
    }
    // A running etcd commits to the db while it is read without its lock: pages
    // can be freed and reused under the reader, and what looks broken is only a
    // moving target. So while the locks are held a failed read is retried, and if
    // it keeps failing the backend is left out of the report; the WAL decides.
    let mut attempt = 1;
    let (summary, kv_hash) = loop {
        let read = match ahead.take() {
            Some(read) => read,
            None => read_db(&db_path, opts),
        };
        match read {
            Ok(read) => break read,
            Err(e) if running && !e.is_permission() => {
                if attempt < RUNNING_DB_ATTEMPTS {
                    attempt += 1;
                    continue;
                }
                return Ok(BackendRead::Unread(format!(
                    "etcd is running and committed to the db while it was read ({attempt} attempts): {e}"
                )));
            }
            Err(e) => {
                let failure = Failure::at(e.to_string(), Some(db_path), e.offset());
                return Err(DirState::reading(e.is_permission(), failure));
            }
        }
    };
    let ci = summary.consistent_index.unwrap_or(0);
    if ci < snapshot.index && !listing.has_snap_db() {
        return Err(DirState::Corrupt(Failure::at(
            format!(
                "the backend's consistent index {ci} is below the snapshot index {} and no .snap.db is present",
                snapshot.index
            ),
            Some(db_path),
            None,
        )));
    }
    Ok(BackendRead::Read { summary, kv_hash })
}

/// Opens the db and reads its summary and, with `hash`, the KV hash, both from
/// the meta chosen at open.
fn read_db(db_path: &Path, opts: Options) -> BackendResult {
    let db = Db::open(db_path)?;
    let backend = if opts.usage {
        db.summary()?
    } else {
        db.identity_summary()?
    };
    let kv_hash = if opts.hash { Some(db.kv_hash()?) } else { None };
    Ok((backend, kv_hash))
}
