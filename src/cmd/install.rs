//! `install`: copies this binary into a volume shared with the etcd container, so
//! that it can run inside the distroless etcd image beside that image's `etcdutl`.
//!
//! It runs as an init container on every Pod start, so it must be idempotent and
//! must never leave a half-written binary where the next container will exec it:
//! the copy is written to a temporary file in the destination, fsynced, made
//! 0755, renamed over `<dest>/etcd-member-agent` and the directory fsynced. A
//! process already running the old file keeps its inode. The bytes come from
//! `/proc/self/exe` (the inode actually running, even if its path was replaced),
//! falling back to `argv[0]` where `/proc` is not mounted. The temporary copy is
//! run with `--version` under a timeout *before* it is renamed into place: a copy
//! that cannot execute (a `noexec` volume, a dynamically linked build in a
//! libc-less image) is an error now rather than a crash in the etcd container
//! later, and it is removed, so no unusable copy is left (a working one from an
//! earlier start stays). A destination it cannot use is a configuration error
//! (2: missing, not a directory, not writable, mounted `noexec`, the target name
//! taken by a directory, a copy that does not run there) or an I/O error (3: the
//! volume is full or a write fails); never 1.

use std::ffi::OsString;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde::Serialize;

use crate::child;
use crate::cli::InstallArgs;
use crate::exit::Exit;
use crate::output::emit;

/// The installed file's name inside `--dest`.
pub const BIN_NAME: &str = "etcd-member-agent";

/// The mode of the installed binary.
const MODE: u32 = 0o755;

/// What `--version` prints for this build (clap's format: name, space, version).
pub fn version_line() -> String {
    format!("{BIN_NAME} {}", env!("CARGO_PKG_VERSION"))
}

/// Why an install failed.
#[derive(Debug, thiserror::Error)]
pub enum InstallError {
    /// No destination was given.
    #[error("--dest (TOOLS_DEST_DIR) is required: the directory to copy the binary into")]
    NoDest,
    /// The destination directory does not exist (the shared volume is not mounted?).
    #[error("destination {} does not exist (is the shared volume mounted?)", path.display())]
    DestMissing {
        /// The destination given.
        path: PathBuf,
    },
    /// The destination exists but is not a directory.
    #[error("destination {} is not a directory", path.display())]
    DestNotDir {
        /// The destination given.
        path: PathBuf,
    },
    /// The destination cannot be inspected.
    #[error("cannot stat destination {}: {source}", path.display())]
    DestStat {
        /// The destination given.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// This process may not create files in the destination.
    #[error("destination {} is not writable by uid {uid}: {source}", path.display())]
    DestNotWritable {
        /// The destination given.
        path: PathBuf,
        /// The effective user ID of this process.
        uid: u32,
        /// The OS error (EACCES, EPERM, EROFS).
        #[source]
        source: io::Error,
    },
    /// The destination is on a filesystem mounted `noexec`: nothing copied there can run.
    #[error("destination {} is on a filesystem mounted noexec: the copy could not be executed there", path.display())]
    DestNoExec {
        /// The destination given.
        path: PathBuf,
    },
    /// `<dest>/etcd-member-agent` exists and is a directory.
    #[error("{} is a directory: the binary cannot be installed over it", path.display())]
    TargetIsDir {
        /// The target path.
        path: PathBuf,
    },
    /// The destination volume has no room (or quota) for the copy.
    #[error("destination {} is full: {source}", path.display())]
    DestFull {
        /// The destination given.
        path: PathBuf,
        /// The OS error (ENOSPC, EDQUOT).
        #[source]
        source: io::Error,
    },
    /// The running binary's bytes cannot be read.
    #[error("cannot read the running binary {}: {source}", path.display())]
    Source {
        /// `/proc/self/exe` or `argv[0]`.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// A step of the copy failed.
    #[error("{op} {}: {source}", path.display())]
    Io {
        /// The step (`create`, `write`, `chmod`, `fsync`, `rename`).
        op: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// Fewer or more bytes were written than the source holds.
    #[error("short copy to {}: wrote {written} of {expected} bytes", path.display())]
    ShortCopy {
        /// The temporary file.
        path: PathBuf,
        /// Bytes written.
        written: u64,
        /// The source's size.
        expected: u64,
    },
    /// The installed copy does not run, or does not report this build's version.
    #[error("the copy {} does not run: {reason}", path.display())]
    CopyDoesNotRun {
        /// The installed file.
        path: PathBuf,
        /// What happened when it was executed.
        reason: String,
    },
}

impl InstallError {
    /// A destination that cannot be used is a configuration error (2); a failing
    /// write to it (full, I/O error) is 3; only an unreadable running binary is 1.
    pub fn exit(&self) -> Exit {
        match self {
            InstallError::NoDest
            | InstallError::DestMissing { .. }
            | InstallError::DestNotDir { .. }
            | InstallError::DestStat { .. }
            | InstallError::DestNotWritable { .. }
            | InstallError::DestNoExec { .. }
            | InstallError::TargetIsDir { .. }
            | InstallError::CopyDoesNotRun { .. } => Exit::Usage,
            InstallError::DestFull { .. }
            | InstallError::Io { .. }
            | InstallError::ShortCopy { .. } => Exit::Unreadable,
            InstallError::Source { .. } => Exit::Internal,
        }
    }
}

fn is_full(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(nix::libc::ENOSPC) | Some(nix::libc::EDQUOT)
    )
}

fn is_not_writable(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::PermissionDenied
        || e.raw_os_error() == Some(nix::libc::EROFS)
        || e.raw_os_error() == Some(nix::libc::EPERM)
}

/// What a successful install did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Installed {
    /// Where the bytes were read from.
    pub source: PathBuf,
    /// `<dest>/etcd-member-agent`.
    pub path: PathBuf,
    /// Bytes copied.
    pub bytes: u64,
    /// True when a previous file was replaced.
    pub replaced: bool,
    /// What the copy answered to `--version`.
    pub version: String,
}

/// Opens the running binary: `/proc/self/exe`, else `argv[0]` (searched in
/// `PATH` when it has no slash), for chroots and sandboxes without `/proc`.
fn open_self() -> Result<(File, PathBuf), InstallError> {
    let proc_exe = PathBuf::from("/proc/self/exe");
    let proc_err = match File::open(&proc_exe) {
        Ok(f) => {
            let shown = std::fs::read_link(&proc_exe).unwrap_or(proc_exe);
            return Ok((f, shown));
        }
        Err(e) => e,
    };
    let argv0 = std::env::args_os().next().unwrap_or_default();
    let candidate = if Path::new(&argv0).components().count() > 1 {
        Some(PathBuf::from(&argv0))
    } else {
        search_path(&argv0)
    };
    let Some(path) = candidate else {
        return Err(InstallError::Source {
            path: PathBuf::from("/proc/self/exe"),
            source: proc_err,
        });
    };
    match File::open(&path) {
        Ok(f) => Ok((f, path)),
        Err(source) => Err(InstallError::Source { path, source }),
    }
}

fn search_path(name: &OsString) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// Checks that `dest` is an existing directory this process may write into.
fn check_dest(dest: &Path) -> Result<(), InstallError> {
    match std::fs::metadata(dest) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(InstallError::DestMissing {
                path: dest.to_path_buf(),
            })
        }
        Err(source) => {
            return Err(InstallError::DestStat {
                path: dest.to_path_buf(),
                source,
            })
        }
        Ok(m) if !m.is_dir() => {
            return Err(InstallError::DestNotDir {
                path: dest.to_path_buf(),
            })
        }
        Ok(_) => {}
    }
    let flags = nix::unistd::AccessFlags::W_OK | nix::unistd::AccessFlags::X_OK;
    nix::unistd::access(dest, flags).map_err(|e| InstallError::DestNotWritable {
        path: dest.to_path_buf(),
        uid: nix::unistd::geteuid().as_raw(),
        source: e.into(),
    })?;
    let noexec = nix::sys::statvfs::statvfs(dest)
        .is_ok_and(|v| v.flags().contains(nix::sys::statvfs::FsFlags::ST_NOEXEC));
    if noexec {
        return Err(InstallError::DestNoExec {
            path: dest.to_path_buf(),
        });
    }
    let target = dest.join(BIN_NAME);
    if std::fs::symlink_metadata(&target).is_ok_and(|m| m.is_dir()) {
        return Err(InstallError::TargetIsDir { path: target });
    }
    Ok(())
}

/// Copies the running binary to `<dest>/etcd-member-agent` atomically and checks
/// that the copy runs and reports this build's version.
pub fn install(dest: &Path, check_timeout: Duration) -> Result<Installed, InstallError> {
    check_dest(dest)?;
    let (mut src, source) = open_self()?;
    let target = dest.join(BIN_NAME);
    let replaced = std::fs::symlink_metadata(&target).is_ok();
    let tmp = dest.join(format!(".{BIN_NAME}.{}.tmp", std::process::id()));
    let written = write_temp(&mut src, &source, &tmp, dest)
        .and_then(|n| check_runs(&tmp, check_timeout).map(|v| (n, v)));
    let (bytes, version) = match written {
        Ok(done) => done,
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            return Err(e);
        }
    };
    if let Err(source) = std::fs::rename(&tmp, &target) {
        let _ = std::fs::remove_file(&tmp);
        if source.raw_os_error() == Some(nix::libc::EISDIR) {
            return Err(InstallError::TargetIsDir { path: target });
        }
        return Err(InstallError::Io {
            op: "rename",
            path: target,
            source,
        });
    }
    File::open(dest)
        .and_then(|d| d.sync_all())
        .map_err(|source| InstallError::Io {
            op: "fsync",
            path: dest.to_path_buf(),
            source,
        })?;
    Ok(Installed {
        source,
        path: target,
        bytes,
        replaced,
        version,
    })
}

/// Writes the source into a fresh temporary file, mode 0755, fsynced.
fn write_temp(src: &mut File, source: &Path, tmp: &Path, dest: &Path) -> Result<u64, InstallError> {
    let io_err = |op, source: io::Error| {
        if is_full(&source) {
            InstallError::DestFull {
                path: dest.to_path_buf(),
                source,
            }
        } else {
            InstallError::Io {
                op,
                path: tmp.to_path_buf(),
                source,
            }
        }
    };
    // A leftover from a crashed run of a container that had the same PID (often 1).
    match std::fs::remove_file(tmp) {
        Err(e) if e.kind() != io::ErrorKind::NotFound && is_not_writable(&e) => {
            return Err(InstallError::DestNotWritable {
                path: dest.to_path_buf(),
                uid: nix::unistd::geteuid().as_raw(),
                source: e,
            })
        }
        _ => {}
    }
    let mut out = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o700)
        .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_CLOEXEC)
        .open(tmp)
        .map_err(|e| {
            if is_not_writable(&e) {
                InstallError::DestNotWritable {
                    path: dest.to_path_buf(),
                    uid: nix::unistd::geteuid().as_raw(),
                    source: e,
                }
            } else {
                io_err("create", e)
            }
        })?;
    let expected = src
        .metadata()
        .map_err(|source_err| InstallError::Source {
            path: source.to_path_buf(),
            source: source_err,
        })?
        .len();
    let written = io::copy(src, &mut out).map_err(|e| io_err("write", e))?;
    if written != expected {
        return Err(InstallError::ShortCopy {
            path: tmp.to_path_buf(),
            written,
            expected,
        });
    }
    out.set_permissions(std::fs::Permissions::from_mode(MODE))
        .map_err(|e| io_err("chmod", e))?;
    out.sync_all().map_err(|e| io_err("fsync", e))?;
    Ok(written)
}

/// Runs `<path> --version` with an empty environment, in its own process group
/// (see [`crate::child`]); it must exit 0 within `timeout` and print this build's
/// version line.
fn check_runs(path: &Path, timeout: Duration) -> Result<String, InstallError> {
    let fail = |reason: String| InstallError::CopyDoesNotRun {
        path: path.to_path_buf(),
        reason,
    };
    let ran =
        child::run(Command::new(path).arg("--version").env_clear(), timeout).map_err(|e| {
            let hint = if e.kind() == io::ErrorKind::PermissionDenied {
                " (is the volume mounted noexec?)"
            } else {
                ""
            };
            fail(format!("cannot execute it: {e}{hint}"))
        })?;
    let Some(status) = ran.status else {
        return Err(fail(format!(
            "`--version` did not finish within {timeout:?}"
        )));
    };
    let stdout = String::from_utf8_lossy(&ran.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&ran.stderr).into_owned();
    if !status.success() {
        return Err(fail(format!(
            "`--version` exited with {status}; stderr: {}",
            stderr.trim()
        )));
    }
    let got = stdout.trim();
    if got != version_line() {
        return Err(fail(format!(
            "`--version` printed {got:?}, expected {:?}",
            version_line()
        )));
    }
    Ok(got.to_string())
}

/// The JSON document of `install`.
#[derive(Debug, Serialize)]
struct Doc {
    dest: Option<String>,
    path: Option<String>,
    bytes: Option<u64>,
    version: Option<String>,
    source: Option<String>,
    replaced: Option<bool>,
    exit_code: u8,
    result: Exit,
    reason: String,
}

/// Runs `install`: 0 installed and verified, 2 a destination it cannot use
/// (missing, not writable, noexec, a directory in the way, the copy does not run
/// there), 3 a write failed (full volume, I/O error), 1 the running binary cannot
/// be read.
pub fn run(args: &InstallArgs) -> crate::error::Result<Exit> {
    let dest = args.dest.as_ref().filter(|d| !d.as_os_str().is_empty());
    let result = match dest {
        None => Err(InstallError::NoDest),
        Some(dest) => install(dest, args.check_timeout),
    };
    let lossy = |p: &Path| p.to_string_lossy().into_owned();
    let (exit, doc, human) = match result {
        Ok(done) => {
            tracing::debug!(path = %done.path.display(), bytes = done.bytes, "installed");
            let human = format!(
                "install: {} {} ({} bytes, from {}); it runs: {}",
                if done.replaced { "replaced" } else { "created" },
                done.path.display(),
                done.bytes,
                done.source.display(),
                done.version
            );
            let doc = Doc {
                dest: dest.map(|d| lossy(d)),
                path: Some(lossy(&done.path)),
                bytes: Some(done.bytes),
                version: Some(done.version),
                source: Some(lossy(&done.source)),
                replaced: Some(done.replaced),
                exit_code: Exit::Ok.code(),
                result: Exit::Ok,
                reason: "installed and verified".into(),
            };
            (Exit::Ok, doc, human)
        }
        Err(e) => {
            let exit = e.exit();
            tracing::debug!(error = %e, "install failed");
            let doc = Doc {
                dest: dest.map(|d| lossy(d)),
                path: dest.map(|d| lossy(&d.join(BIN_NAME))),
                bytes: None,
                version: None,
                source: None,
                replaced: None,
                exit_code: exit.code(),
                result: exit,
                reason: e.to_string(),
            };
            (exit, doc, format!("install: {e} (exit {})", exit.code()))
        }
    };
    emit(args.output.format, &human, &doc)?;
    Ok(exit)
}
