//! The staging directory and the one atomic step that publishes a restore.
//!
//! Everything a restore writes lands in `<data-dir>/.restore-staging/`: the
//! fetched snapshot (`snapshot.db`) and the tool's output (`restored/`). Being
//! inside the data dir keeps it on the same filesystem, so publishing is a single
//! `rename(2)` of `restored/member` to `<data-dir>/member`, made durable by
//! fsyncing the data dir. Before the rename every file and directory of the staged
//! tree is fsynced, so after a crash `member/` is either absent or complete. The
//! inspector tolerates the staging directory as restore debris (`disk::layout`),
//! and the next run removes it before it starts over.

use std::fs::File;
use std::io;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{renameat2, RenameFlags};

/// The staging directory's name inside the data dir. `disk::layout` knows it as
/// restore debris; a unit test of `cmd::restore` keeps the two in agreement.
pub const STAGING_DIR: &str = ".restore-staging";

/// A filesystem operation on the data dir failed.
#[derive(Debug, thiserror::Error)]
#[error("cannot {op} {path}: {source}")]
pub struct StageError {
    /// What was being done (`create`, `remove`, `fsync`, `rename`, `statvfs`).
    pub op: &'static str,
    /// Where.
    pub path: PathBuf,
    /// The cause.
    #[source]
    pub source: io::Error,
}

impl StageError {
    fn new(op: &'static str, path: &Path, source: io::Error) -> StageError {
        StageError {
            op,
            path: path.to_path_buf(),
            source,
        }
    }

    /// The filesystem is full.
    pub fn is_no_space(&self) -> bool {
        matches!(
            self.source.raw_os_error(),
            Some(nix::libc::ENOSPC) | Some(nix::libc::EDQUOT)
        )
    }
}

/// The staging directory of a data dir.
#[derive(Debug, Clone)]
pub struct Staging {
    /// `<data-dir>/.restore-staging`.
    pub root: PathBuf,
}

impl Staging {
    /// The staging directory of `data_dir` (not created).
    pub fn of(data_dir: &Path) -> Staging {
        Staging {
            root: data_dir.join(STAGING_DIR),
        }
    }

    /// Where the snapshot is fetched to.
    pub fn snapshot(&self) -> PathBuf {
        self.root.join("snapshot.db")
    }

    /// The data dir the tool creates.
    pub fn restored(&self) -> PathBuf {
        self.root.join("restored")
    }

    /// Removes the staging directory of an earlier, interrupted attempt (a symlink
    /// is removed as itself, never followed). Returns whether there was one.
    pub fn remove(&self) -> Result<bool, StageError> {
        let meta = match std::fs::symlink_metadata(&self.root) {
            Ok(m) => m,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
            Err(e) => return Err(StageError::new("stat", &self.root, e)),
        };
        let result = if meta.is_dir() {
            std::fs::remove_dir_all(&self.root)
        } else {
            std::fs::remove_file(&self.root)
        };
        result.map_err(|e| StageError::new("remove", &self.root, e))?;
        if let Some(parent) = self.root.parent() {
            fsync_dir(parent)?;
        }
        Ok(true)
    }

    /// Creates the staging directory (mode 0700), durably.
    pub fn create(&self) -> Result<(), StageError> {
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&self.root)
            .map_err(|e| StageError::new("create", &self.root, e))?;
        if let Some(parent) = self.root.parent() {
            fsync_dir(parent)?;
        }
        Ok(())
    }
}

/// Creates the data dir (mode 0700, as etcd would) when it does not exist yet.
/// Returns whether it was created.
pub fn ensure_dir(dir: &Path) -> Result<bool, StageError> {
    if dir.is_dir() {
        return Ok(false);
    }
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| StageError::new("create", dir, e))?;
    if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
        fsync_dir(parent)?;
    }
    Ok(true)
}

/// fsyncs a directory (its entries become durable).
pub fn fsync_dir(dir: &Path) -> Result<(), StageError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| StageError::new("fsync", dir, e))
}

/// fsyncs every file and directory under `root` (symlinks not followed), deepest
/// first, so the whole tree is durable before it is published.
pub fn fsync_tree(root: &Path) -> Result<(), StageError> {
    for entry in walkdir::WalkDir::new(root)
        .follow_links(false)
        .contents_first(true)
    {
        let entry = entry.map_err(|e| {
            let path = e.path().unwrap_or(root).to_path_buf();
            StageError::new("walk", &path, io::Error::other(e.to_string()))
        })?;
        let ft = entry.file_type();
        if ft.is_file() || ft.is_dir() {
            File::open(entry.path())
                .and_then(|f| f.sync_all())
                .map_err(|e| StageError::new("fsync", entry.path(), e))?;
        }
    }
    Ok(())
}

/// Moves `member_dir` (etcd's debris of a failed first start, which the caller
/// has just inspected as empty) into the staging directory `aside`, so that
/// [`publish`] can rename the restored `member/` into its place; the staging
/// directory's removal takes the debris with it. A crash in between leaves no
/// `member/` and a staging directory, which the next run removes.
pub fn set_aside(member_dir: &Path, aside: &Path) -> Result<(), StageError> {
    std::fs::rename(member_dir, aside).map_err(|e| StageError::new("rename aside", member_dir, e))
}

/// Atomically moves `from` (a complete, fsynced `member/`) to `to`, refusing to
/// replace anything there, then fsyncs the destination's directory.
pub fn publish(from: &Path, to: &Path) -> Result<(), StageError> {
    let dir_of = |p: &Path| {
        p.parent()
            .filter(|d| !d.as_os_str().is_empty())
            .unwrap_or(Path::new("."))
            .to_path_buf()
    };
    let (from_dir, to_dir) = (dir_of(from), dir_of(to));
    let open = |d: &Path| File::open(d).map_err(|e| StageError::new("open", d, e));
    let (fd_from, fd_to) = (open(&from_dir)?, open(&to_dir)?);
    let name = |p: &Path| p.file_name().map(PathBuf::from).unwrap_or_default();
    let result = renameat2(
        &fd_from,
        &name(from),
        &fd_to,
        &name(to),
        RenameFlags::RENAME_NOREPLACE,
    );
    match result {
        Ok(()) => {}
        // Filesystems without RENAME_NOREPLACE: the gate has just seen no
        // `member/`, and rename(2) replaces at most an empty directory.
        Err(Errno::EINVAL) | Err(Errno::ENOSYS) => {
            if std::fs::symlink_metadata(to).is_ok() {
                return Err(StageError::new(
                    "rename onto",
                    to,
                    io::Error::from(io::ErrorKind::AlreadyExists),
                ));
            }
            std::fs::rename(from, to).map_err(|e| StageError::new("rename onto", to, e))?;
        }
        Err(e) => return Err(StageError::new("rename onto", to, io::Error::from(e))),
    }
    fsync_dir(&to_dir)?;
    if from_dir != to_dir {
        fsync_dir(&from_dir)?;
    }
    Ok(())
}

/// Bytes available to an unprivileged writer on the filesystem holding `path`
/// (or its nearest existing ancestor): `f_bavail × f_frsize`.
pub fn free_bytes(path: &Path) -> Result<(PathBuf, u64), StageError> {
    let mut p = path.to_path_buf();
    while !p.exists() {
        match p.parent() {
            Some(parent) if !parent.as_os_str().is_empty() => p = parent.to_path_buf(),
            _ => {
                p = PathBuf::from(".");
                break;
            }
        }
    }
    let st = nix::sys::statvfs::statvfs(&p)
        .map_err(|e| StageError::new("statvfs", &p, io::Error::from(e)))?;
    let bytes = st.blocks_available().saturating_mul(st.fragment_size());
    Ok((p, bytes))
}
