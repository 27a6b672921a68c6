//! Read-ahead of what etcd reads when it starts, while `preflight` decides.
//!
//! A member on its real way back (a node rebooted, a Pod rescheduled, a volume
//! attached elsewhere) starts with a cold page cache. Preflight reads and
//! verifies the whole WAL on every core, which leaves the WAL in the cache for
//! etcd's single-threaded replay. The backend is the other half of etcd's
//! start: every line (3.4–3.7) opens bbolt and rebuilds the MVCC index from the
//! whole key bucket (`mvcc.restore`, reading every key and value through the
//! mmap, page by page in key order), so a cold start faults the db in 4 KiB at a
//! time. This module asks the kernel to read the backend ahead, sequentially,
//! while the WAL is being verified, and the newest `.snap` (the one etcd loads).
//! Nothing else: not the WAL segments etcd will not replay, not the older
//! `.snap` files.
//!
//! It only advises (`posix_fadvise(POSIX_FADV_WILLNEED)`, in chunks: the
//! kernel caps one call at its read-ahead window), never reads into the process,
//! never changes a byte, and never decides anything: the verdict and the report
//! are the same with it on or off. The read-ahead stops at the next chunk when
//! the verdict is not `start` (etcd will not read the files), and the process
//! waits for it only after the verdict has been written, and only until the
//! deadline.

use std::fs::File;
use std::os::fd::AsFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::thread;
use std::time::Instant;

use nix::fcntl::{posix_fadvise, PosixFadviseAdvice};

use super::layout::Paths;

/// One advice covers this much: above the kernel's cap on one call
/// (`max(io_pages, ra_pages)`, 128 KiB to a few MiB), small enough that a stop
/// is seen quickly.
const CHUNK: i64 = 4 << 20;

/// What was advised.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Warmed {
    /// Files advised.
    pub files: usize,
    /// Bytes advised.
    pub bytes: u64,
    /// Whether the advice stopped before the end (the verdict was not `start`).
    pub stopped: bool,
}

/// A read-ahead in progress; [`ReadAhead::finish`] ends it.
#[derive(Debug)]
pub struct ReadAhead {
    stop: Arc<AtomicBool>,
    done: mpsc::Receiver<Warmed>,
}

/// The files etcd reads on start that the WAL read does not already cache:
/// the backend and the newest `.snap`.
pub fn targets(paths: &Paths) -> Vec<PathBuf> {
    let mut files = vec![paths.snap_dir.join("db")];
    if let Ok(entries) = std::fs::read_dir(&paths.snap_dir) {
        // etcd names snapshots `<term>-<index>.snap` in fixed-width hex: the
        // greatest name is the newest, the one etcd tries first.
        let newest = entries
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|n| n.len() == 38 && n.ends_with(".snap"))
            .max();
        files.extend(newest.map(|n| paths.snap_dir.join(n)));
    }
    files
}

/// Starts advising the kernel to read ahead what etcd reads on start in the
/// directory `paths` names ([`targets`]), on a thread of its own: listing the
/// snapshot directory, like every access to the volume, happens there, so a
/// volume that hangs holds that thread, never the decision.
pub fn start_for(paths: &Paths) -> ReadAhead {
    let paths = paths.clone();
    spawn(move || targets(&paths))
}

/// Starts advising the kernel to read `files` ahead, on a thread of its own.
pub fn start(files: Vec<PathBuf>) -> ReadAhead {
    spawn(move || files)
}

fn spawn(files: impl FnOnce() -> Vec<PathBuf> + Send + 'static) -> ReadAhead {
    let stop = Arc::new(AtomicBool::new(false));
    let (tx, done) = mpsc::channel();
    let flag = Arc::clone(&stop);
    let spawned = thread::Builder::new()
        .name("read-ahead".into())
        .spawn(move || {
            let files = files();
            let _ = tx.send(advise_all(&files, &flag));
        });
    if let Err(e) = spawned {
        tracing::debug!(error = %e, "no read-ahead: cannot start its thread");
    }
    ReadAhead { stop, done }
}

/// Advises `files` in order, until `stop` is set.
fn advise_all(files: &[PathBuf], stop: &AtomicBool) -> Warmed {
    let mut warmed = Warmed::default();
    for f in files {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        if let Some(bytes) = advise(f, stop) {
            warmed.files += 1;
            warmed.bytes += bytes;
        }
    }
    warmed.stopped = stop.load(Ordering::Relaxed);
    warmed
}

/// Advises one file whole, chunk by chunk; `None` when it cannot be opened (a
/// missing db, a symlink: nothing to do, and nothing preflight must report).
fn advise(path: &Path, stop: &AtomicBool) -> Option<u64> {
    let file = File::options()
        .read(true)
        .custom_flags(nix::fcntl::OFlag::O_NOFOLLOW.bits())
        .open(path)
        .ok()?;
    let len = i64::try_from(file.metadata().ok()?.len()).ok()?;
    let mut at = 0i64;
    while at < len {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        let n = CHUNK.min(len - at);
        if posix_fadvise(file.as_fd(), at, n, PosixFadviseAdvice::POSIX_FADV_WILLNEED).is_err() {
            break;
        }
        at += n;
    }
    u64::try_from(at).ok()
}

impl ReadAhead {
    /// Ends the read-ahead: lets it run to its end when `etcd_reads` (the
    /// verdict is `start`), waiting for it no later than `deadline`; stops it
    /// otherwise. Returns what was advised, `None` when it had not finished by
    /// the deadline.
    pub fn finish(self, etcd_reads: bool, deadline: Instant) -> Option<Warmed> {
        if !etcd_reads {
            self.stop.store(true, Ordering::Relaxed);
        }
        let wait = deadline.saturating_duration_since(Instant::now());
        let warmed = self.done.recv_timeout(wait).ok();
        // Past the deadline the thread stops at its next chunk.
        self.stop.store(true, Ordering::Relaxed);
        warmed
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn the_backend_and_only_the_newest_snap_are_read_ahead() {
        let dir = tempfile::tempdir().unwrap();
        let paths = Paths::new(dir.path(), None);
        std::fs::create_dir_all(&paths.snap_dir).unwrap();
        for n in [
            "0000000000000002-0000000000002711.snap",
            "0000000000000003-0000000000004e22.snap",
            "0000000000000003-0000000000004e22.snap.broken",
            "db.tmp",
        ] {
            std::fs::write(paths.snap_dir.join(n), b"x").unwrap();
        }
        assert_eq!(
            targets(&paths),
            [
                paths.snap_dir.join("db"),
                paths
                    .snap_dir
                    .join("0000000000000003-0000000000004e22.snap")
            ]
        );
    }

    #[test]
    fn advice_covers_every_file_that_exists_and_changes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("db");
        let bytes: Vec<u8> = (0..(9 << 20)).map(|i| (i % 251) as u8).collect();
        std::fs::write(&db, &bytes).unwrap();
        let missing = dir.path().join("missing");
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&db, &link).unwrap();
        let before = std::fs::metadata(&db).unwrap().modified().unwrap();
        let warmed = start(vec![db.clone(), missing, link])
            .finish(true, Instant::now() + Duration::from_secs(30))
            .expect("finished");
        assert_eq!(
            warmed,
            Warmed {
                files: 1,
                bytes: 9 << 20,
                stopped: false
            }
        );
        assert_eq!(std::fs::read(&db).unwrap(), bytes);
        assert_eq!(std::fs::metadata(&db).unwrap().modified().unwrap(), before);
    }

    #[test]
    fn a_stop_ends_it_before_the_next_chunk() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("db");
        std::fs::write(&db, b"x").unwrap();
        let stop = AtomicBool::new(true);
        assert_eq!(
            advise_all(&[db.clone(), db], &stop),
            Warmed {
                files: 0,
                bytes: 0,
                stopped: true
            }
        );
        // `finish` for a verdict other than `start` sets the same flag.
        let warmed = start(vec![dir.path().join("db")])
            .finish(false, Instant::now() + Duration::from_secs(30))
            .expect("finished");
        assert!(warmed.files <= 1);
    }
}
