//! Bringing the snapshot into the staging directory: a copy from a mounted file,
//! or a download ([`super::s3`]), both through one [`StagedSnapshot`] that writes,
//! hashes ([`super::trailer`]) and logs progress (bytes, percent, rate) as the
//! bytes pass, then fsyncs.
//!
//! A copy runs on a worker thread that the caller waits for with a deadline: a
//! read stuck in the kernel (a hung NFS volume) cannot be interrupted, but it
//! must not hold the init container past `--download-timeout`.

use std::fs::File;
use std::io::{self, Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use super::trailer::{TrailerCheck, TrailerHasher};

/// How often transfer progress is logged.
const PROGRESS_EVERY: Duration = Duration::from_secs(2);
/// Read size for copies.
const CHUNK: usize = 1 << 20;

/// The snapshot source cannot be used (exit 30).
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// Nothing at that location.
    #[error("snapshot {location} does not exist")]
    NotFound {
        /// Path or `s3://bucket/key`.
        location: String,
    },
    /// The path is a directory or something else that is not a file.
    #[error("snapshot {location} is a {kind}, not a file")]
    NotAFile {
        /// The path.
        location: String,
        /// What it is.
        kind: &'static str,
    },
    /// A zero-length object or file.
    #[error("snapshot {location} is empty")]
    Empty {
        /// Path or `s3://bucket/key`.
        location: String,
    },
    /// Reading the file failed.
    #[error("cannot read snapshot {location}: {source}")]
    Read {
        /// The path.
        location: String,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// The object store refused or failed.
    #[error("cannot fetch snapshot {location}: {message}")]
    Remote {
        /// `s3://bucket/key`.
        location: String,
        /// The store's error, flattened with its causes.
        message: String,
    },
    /// The whole fetch took longer than `--download-timeout`.
    #[error("fetching snapshot {location} did not finish within {after:?} (--download-timeout)")]
    TimedOut {
        /// Path or `s3://bucket/key`.
        location: String,
        /// The budget.
        after: Duration,
    },
    /// No byte arrived for `--read-timeout`.
    #[error("snapshot {location} stalled: no data for {idle:?} (--read-timeout)")]
    Stalled {
        /// `s3://bucket/key`.
        location: String,
        /// The idle bound.
        idle: Duration,
    },
}

/// Why fetching failed: the source (exit 30) or writing the staged copy.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    /// The source.
    #[error(transparent)]
    Source(#[from] SourceError),
    /// Writing or fsyncing the staged copy.
    #[error("cannot write the staged snapshot {path}: {source}")]
    Write {
        /// The staged file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
}

impl FetchError {
    /// The staging filesystem filled up (exit 31 rather than a source problem).
    pub fn is_no_space(&self) -> bool {
        matches!(self, FetchError::Write { source, .. }
            if matches!(source.raw_os_error(), Some(nix::libc::ENOSPC) | Some(nix::libc::EDQUOT)))
    }
}

/// A fetched, fsynced snapshot.
#[derive(Debug, Clone)]
pub struct Fetched {
    /// The staged file.
    pub path: PathBuf,
    /// Bytes written.
    pub bytes: u64,
    /// What the trailer said.
    pub check: TrailerCheck,
    /// Wall time of the transfer.
    pub elapsed: Duration,
}

/// Logs transfer progress at most every [`PROGRESS_EVERY`].
#[derive(Debug)]
struct Progress {
    location: String,
    total: u64,
    started: Instant,
    last: Instant,
}

impl Progress {
    fn log(&mut self, done: u64, force: bool) {
        let now = Instant::now();
        if !force && now.duration_since(self.last) < PROGRESS_EVERY {
            return;
        }
        self.last = now;
        let secs = now.duration_since(self.started).as_secs_f64().max(1e-3);
        let percent = if self.total == 0 {
            100.0
        } else {
            (done as f64 * 100.0 / self.total as f64).min(100.0)
        };
        tracing::info!(
            source = %self.location,
            bytes = done,
            total = self.total,
            percent = format!("{percent:.1}"),
            rate_mib_s = format!("{:.1}", done as f64 / secs / (1024.0 * 1024.0)),
            "snapshot transfer"
        );
    }
}

/// The staged copy being written: writes, hashes and logs progress.
#[derive(Debug)]
pub struct StagedSnapshot {
    path: PathBuf,
    file: File,
    hasher: TrailerHasher,
    progress: Progress,
    paused: bool,
}

impl StagedSnapshot {
    /// Creates `path` (which must not exist, mode 0600) for a snapshot of `size`
    /// bytes from `location`.
    pub fn create(path: &Path, size: u64, location: &str) -> Result<StagedSnapshot, FetchError> {
        let file = File::options()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path)
            .map_err(|source| FetchError::Write {
                path: path.to_path_buf(),
                source,
            })?;
        let now = Instant::now();
        Ok(StagedSnapshot {
            path: path.to_path_buf(),
            file,
            hasher: TrailerHasher::new(size),
            progress: Progress {
                location: location.to_string(),
                total: size,
                started: now,
                last: now,
            },
            paused: false,
        })
    }

    /// Appends the next bytes.
    pub fn write(&mut self, chunk: &[u8]) -> Result<(), FetchError> {
        self.file
            .write_all(chunk)
            .map_err(|source| FetchError::Write {
                path: self.path.clone(),
                source,
            })?;
        self.hasher.update(chunk);
        let done = self.hasher.seen();
        self.progress.log(done, false);
        if !self.paused && done * 2 >= self.progress.total {
            self.paused = true;
            super::test_pause("copy");
        }
        Ok(())
    }

    /// Fsyncs the file and reports what arrived.
    pub fn finish(self) -> Result<Fetched, FetchError> {
        let StagedSnapshot {
            path,
            file,
            hasher,
            mut progress,
            ..
        } = self;
        file.sync_all().map_err(|source| FetchError::Write {
            path: path.clone(),
            source,
        })?;
        let bytes = hasher.seen();
        progress.log(bytes, true);
        Ok(Fetched {
            path,
            bytes,
            check: hasher.finish(),
            elapsed: progress.started.elapsed(),
        })
    }
}

fn kind_of(meta: &std::fs::Metadata) -> &'static str {
    let ft = meta.file_type();
    if ft.is_dir() {
        "directory"
    } else if ft.is_symlink() {
        "symlink"
    } else if ft.is_file() {
        "file"
    } else {
        "special file"
    }
}

/// The size of a snapshot file, after checking it is a readable, non-empty
/// regular file. The path itself may be a symlink (a volume's layout).
pub fn probe_file(path: &Path) -> Result<u64, SourceError> {
    let location = path.display().to_string();
    let meta = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(SourceError::NotFound { location })
        }
        Err(source) => return Err(SourceError::Read { location, source }),
    };
    if !meta.is_file() {
        return Err(SourceError::NotAFile {
            location,
            kind: kind_of(&meta),
        });
    }
    File::open(path).map_err(|source| SourceError::Read {
        location: location.clone(),
        source,
    })?;
    if meta.len() == 0 {
        return Err(SourceError::Empty { location });
    }
    Ok(meta.len())
}

/// Copies `src` into `staged` on a worker thread, waiting at most `timeout`.
pub fn copy_file(
    src: &Path,
    mut staged: StagedSnapshot,
    timeout: Duration,
) -> Result<Fetched, FetchError> {
    let location = src.display().to_string();
    let (tx, rx) = mpsc::channel();
    let path = src.to_path_buf();
    let loc = location.clone();
    std::thread::spawn(move || {
        let result = (|| {
            let mut f = File::open(&path).map_err(|source| SourceError::Read {
                location: loc.clone(),
                source,
            })?;
            let mut buf = vec![0u8; CHUNK];
            loop {
                let n = match f.read(&mut buf) {
                    Ok(0) => break,
                    Ok(n) => n,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(source) => {
                        return Err(FetchError::from(SourceError::Read {
                            location: loc.clone(),
                            source,
                        }))
                    }
                };
                staged.write(&buf[..n])?;
            }
            staged.finish()
        })();
        let _ = tx.send(result);
    });
    match rx.recv_timeout(timeout) {
        Ok(result) => result,
        Err(_) => Err(SourceError::TimedOut {
            location,
            after: timeout,
        }
        .into()),
    }
}
