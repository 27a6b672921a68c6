//! `wipe` and `verify-wipe`: destroy a data dir on purpose, and prove it is empty.
//!
//! Test harnesses and runbooks wipe members to reproduce the failure this product
//! guards against; a wipe that silently left a `.hidden` file or a `member/` the
//! process could not read would make such a test pass for the wrong reason. So the
//! answer is a proof, not a best effort: `verify-wipe` exits 0 only when every
//! directory could be read and nothing (hidden files included) is left; a directory
//! it cannot read is *unreadable* (exit 3), never empty.
//!
//! Symlinks are never followed: entries are examined with `lstat` (the directory
//! entry's own metadata), a symlink is listed or unlinked as itself and its target
//! is never read or removed. The read-only listing walks by path; a swap there can
//! only add entries to the list, which fails closed ("not empty"). Only the path the
//! caller names is resolved as usual (a data dir may itself be a symlink to a volume).
//!
//! Mount points are never crossed: an entry on another device than the directory
//! being wiped, or one that `/proc/self/mountinfo` names as a mount point (a bind
//! mount of a directory on the same filesystem has the same `st_dev`), is listed as
//! a `mount_point` and nothing beneath it is read or removed. Removal walks by
//! directory descriptor (`openat(O_NOFOLLOW)`, `fstat` of the opened directory,
//! `unlinkat`), so neither a mount nor a symlink swapped in mid-wipe leads it out.
//! A separate `--wal-dir` is emptied only when it holds nothing but what etcd
//! writes there (WAL segments, `*.tmp`, `*.broken`): a mistyped `ETCD_WAL_DIR`
//! naming some other directory is refused with nothing removed.
//!
//! `wipe` keeps the directory itself (its mode and owner are the volume's), refuses
//! while etcd holds its WAL or backend locks (exit 15, checked before anything is
//! touched), fsyncs the directory, then runs the same verification as `verify-wipe`
//! and exits with its result.

use std::collections::BTreeSet;
use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io;
use std::os::fd::AsFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use nix::dir::Dir;
use nix::errno::Errno;
use nix::fcntl::{AtFlags, OFlag};
use nix::sys::stat::{fstat, fstatat, Mode, SFlag};
use nix::unistd::{unlinkat, UnlinkatFlags};
use serde::Serialize;

use crate::cli::WipeArgs;
use crate::disk::lock::{held_locks, HeldLock, Probe};
use crate::exit::Exit;
use crate::output::emit;

/// The directory a filesystem's root carries; tolerated only with `--allow-lost-found`.
const LOST_FOUND: &str = "lost+found";

/// How deep the walk goes before it gives up on a subtree (reported as unreadable).
/// etcd's layout is three levels deep; this bounds the recursion.
const MAX_DEPTH: usize = 128;

/// How many entries the human summary lists; the JSON document lists all of them.
const HUMAN_LIST_LIMIT: usize = 40;

/// Where the kernel lists this process's mounts.
const MOUNTINFO: &str = "/proc/self/mountinfo";

/// The name endings of what etcd writes into a WAL dir: segments, preallocated
/// segments, and segments set aside by `etcd --experimental-...-repair`.
const WAL_DIR_SUFFIXES: [&str; 3] = [".wal", ".tmp", ".broken"];

/// What kind of directory entry was found. Symlinks are never followed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EntryKind {
    /// A regular file.
    File,
    /// A directory (its contents are listed after it).
    Dir,
    /// A symbolic link, reported as itself.
    Symlink,
    /// A FIFO, socket or device node.
    Other,
    /// A mount point (another device, or a bind mount): listed, never entered or removed.
    MountPoint,
}

impl EntryKind {
    /// From `lstat`'s file type, so a symlink is never taken for its target.
    fn of(t: &std::fs::FileType) -> Self {
        if t.is_symlink() {
            EntryKind::Symlink
        } else if t.is_dir() {
            EntryKind::Dir
        } else if t.is_file() {
            EntryKind::File
        } else {
            EntryKind::Other
        }
    }
}

/// The mount points a walk must not cross: anything on another device than the
/// root, and every mount point the kernel lists under the root (a bind mount from
/// the same filesystem keeps the device number, so `st_dev` alone misses it).
#[derive(Debug, Clone, Default)]
pub struct Fence {
    /// The root's `st_dev`.
    dev: u64,
    /// The root, symlinks resolved (the form mountinfo uses).
    root: PathBuf,
    /// Mount points strictly beneath `root`, absolute.
    mounts: BTreeSet<PathBuf>,
}

impl Fence {
    /// For a read-only scan: like [`Fence::new`], but where no mount table
    /// exists (no `/proc`, as in an empty chroot) only the device tells mount
    /// points apart. Harmless for a scan: a bind mount it then walks into shows
    /// its entries as remaining, so the answer is still "not empty". Removal
    /// uses [`Fence::new`], which fails closed.
    fn for_scan(root: &Path) -> Result<Self, FsError> {
        Fence::read(root, true)
    }

    /// Reads the root's device and the mount table.
    fn new(root: &Path) -> Result<Self, FsError> {
        Fence::read(root, false)
    }

    fn read(root: &Path, table_optional: bool) -> Result<Self, FsError> {
        let here = Path::new("");
        let dev = std::fs::metadata(root)
            .map_err(|e| FsError::new("stat", here, e))?
            .dev();
        let resolved = std::fs::canonicalize(root).map_err(|e| FsError::new("stat", here, e))?;
        let table = match std::fs::read(MOUNTINFO) {
            Ok(t) => t,
            Err(e) if table_optional && e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(FsError::new("read mountinfo", Path::new(MOUNTINFO), e)),
        };
        let mounts = mount_points(&table)
            .into_iter()
            .filter(|m| m != &resolved && m.starts_with(&resolved))
            .collect();
        Ok(Fence {
            dev,
            root: resolved,
            mounts,
        })
    }

    /// True when the entry at `rel` (relative to the root), with device `dev`, is
    /// a mount point.
    fn is_mount(&self, rel: &Path, dev: u64) -> bool {
        dev != self.dev || self.mounts.contains(&self.root.join(rel))
    }

    /// True when some mount point lies strictly beneath `rel`.
    fn holds_mount(&self, rel: &Path) -> bool {
        let dir = self.root.join(rel);
        self.mounts.iter().any(|m| m != &dir && m.starts_with(&dir))
    }
}

/// The mount points in a `/proc/self/mountinfo` table (field 5, octal escapes undone).
pub fn mount_points(table: &[u8]) -> Vec<PathBuf> {
    table
        .split(|b| *b == b'\n')
        .filter_map(|line| line.split(|b| *b == b' ').nth(4))
        .map(|field| PathBuf::from(OsStr::from_bytes(&unescape_octal(field))))
        .collect()
}

/// Undoes the kernel's `\ooo` escapes (space, tab, newline, backslash) in a mountinfo field.
fn unescape_octal(field: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(field.len());
    let mut i = 0;
    while i < field.len() {
        let digits = field.get(i + 1..i + 4);
        match digits {
            Some(d) if field[i] == b'\\' && d.iter().all(|c| (b'0'..=b'7').contains(c)) => {
                let v = d.iter().fold(0u32, |acc, c| acc * 8 + u32::from(c - b'0'));
                out.push(u8::try_from(v).unwrap_or(b'?'));
                i += 4;
            }
            _ => {
                out.push(field[i]);
                i += 1;
            }
        }
    }
    out
}

/// One entry left in a directory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Entry {
    /// Path relative to the directory checked.
    pub path: String,
    /// File, dir, symlink or other.
    #[serde(rename = "type")]
    pub kind: EntryKind,
    /// `st_size`: bytes for a file, the target's length for a symlink.
    pub size: u64,
    /// Where a symlink points (read, never followed).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
}

/// A filesystem operation that failed on a path.
#[derive(Debug, thiserror::Error)]
#[error("{op} {}: {source}", path.display())]
pub struct FsError {
    /// The step that failed (`stat`, `open`, `readdir`, `unlink`, `rmdir`, `fsync`).
    pub op: &'static str,
    /// Path relative to the directory being processed (`.` for the directory itself).
    pub path: PathBuf,
    /// The OS error.
    #[source]
    pub source: io::Error,
}

impl FsError {
    fn new(op: &'static str, path: &Path, source: impl Into<io::Error>) -> Self {
        FsError {
            op,
            path: path.to_path_buf(),
            source: source.into(),
        }
    }
}

/// A failure as the JSON document reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Problem {
    /// Path relative to the directory checked (`.` is the directory itself).
    pub path: String,
    /// The step that failed.
    pub op: &'static str,
    /// The OS error, as text.
    pub error: String,
    /// True inside a tolerated `lost+found`: reported, but it does not fail the check.
    pub tolerated: bool,
}

impl Problem {
    fn from_error(e: &FsError, tolerated: bool) -> Self {
        Problem {
            path: rel_string(&e.path),
            op: e.op,
            error: e.source.to_string(),
            tolerated,
        }
    }
}

/// The result of checking one directory for emptiness.
#[derive(Debug, Clone, Default)]
pub struct Scan {
    /// The directory checked, as given.
    pub path: PathBuf,
    /// False when the directory does not exist (which counts as empty).
    pub exists: bool,
    /// Entries that make the directory non-empty, depth first, sorted by name.
    pub remaining: Vec<Entry>,
    /// Entries tolerated by policy (`lost+found` with `--allow-lost-found`).
    pub allowed: Vec<Entry>,
    /// What could not be read; any untolerated one makes the answer "unreadable".
    pub unreadable: Vec<Problem>,
}

impl Scan {
    /// True when every directory was read.
    pub fn readable(&self) -> bool {
        self.unreadable.iter().all(|p| p.tolerated)
    }

    /// True only when the directory is provably empty: fully read, nothing left.
    pub fn empty(&self) -> bool {
        self.readable() && self.remaining.is_empty()
    }

    /// 3 when anything could not be read, 20 when entries remain, else 0.
    pub fn exit(&self) -> Exit {
        if !self.readable() {
            Exit::Unreadable
        } else if !self.remaining.is_empty() {
            Exit::WipeIncomplete
        } else {
            Exit::Ok
        }
    }
}

fn rel_string(rel: &Path) -> String {
    if rel.as_os_str().is_empty() {
        ".".to_string()
    } else {
        rel.to_string_lossy().into_owned()
    }
}

/// The names in a directory, sorted (`read_dir` never yields `.` and `..`).
fn list(dir: &Path) -> io::Result<Vec<OsString>> {
    let mut names = std::fs::read_dir(dir)?
        .map(|e| e.map(|e| e.file_name()))
        .collect::<io::Result<Vec<_>>>()?;
    names.sort();
    Ok(names)
}

fn is_lost_found(depth: usize, allow: bool, name: &OsStr, kind: EntryKind) -> bool {
    allow && depth == 0 && kind == EntryKind::Dir && name == OsStr::new(LOST_FOUND)
}

/// Checks that `root` is a directory; `Ok(false)` when it does not exist.
fn root_is_dir(root: &Path) -> Result<bool, FsError> {
    let here = Path::new("");
    match std::fs::metadata(root) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(FsError::new("stat", here, e)),
        Ok(m) if !m.is_dir() => Err(FsError::new("stat", here, io::Error::from(Errno::ENOTDIR))),
        Ok(_) => Ok(true),
    }
}

/// Lists everything inside `root`, without following symlinks, without crossing a
/// mount point and without changing anything. A missing `root` is empty
/// (`exists: false`).
pub fn scan(root: &Path, allow_lost_found: bool) -> Scan {
    let mut out = Scan {
        path: root.to_path_buf(),
        exists: true,
        ..Scan::default()
    };
    match root_is_dir(root).and_then(|is_dir| is_dir.then(|| Fence::for_scan(root)).transpose()) {
        Ok(Some(fence)) => walk(
            root,
            Path::new(""),
            0,
            false,
            allow_lost_found,
            &fence,
            &mut out,
        ),
        Ok(None) => out.exists = false,
        Err(e) => out.unreadable.push(Problem::from_error(&e, false)),
    }
    out
}

fn walk(
    root: &Path,
    rel: &Path,
    depth: usize,
    tolerated: bool,
    allow_lost_found: bool,
    fence: &Fence,
    out: &mut Scan,
) {
    let fail = |out: &mut Scan, e: FsError| out.unreadable.push(Problem::from_error(&e, tolerated));
    let dir = root.join(rel);
    let names = match list(&dir) {
        Ok(names) => names,
        Err(e) => return fail(out, FsError::new("readdir", rel, e)),
    };
    for name in names {
        let child = rel.join(&name);
        let st = match std::fs::symlink_metadata(dir.join(&name)) {
            Ok(st) => st,
            // Gone between readdir and stat: it is not left, so not reported.
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => {
                fail(out, FsError::new("stat", &child, e));
                continue;
            }
        };
        if fence.is_mount(&child, st.dev()) {
            // Never tolerated, never entered: what lies beneath is not the data dir's.
            out.remaining.push(Entry {
                path: rel_string(&child),
                kind: EntryKind::MountPoint,
                size: st.len(),
                target: None,
            });
            continue;
        }
        let kind = EntryKind::of(&st.file_type());
        let child_tolerated = tolerated || is_lost_found(depth, allow_lost_found, &name, kind);
        let target = match kind {
            EntryKind::Symlink => std::fs::read_link(dir.join(&name))
                .ok()
                .map(|t| t.to_string_lossy().into_owned()),
            _ => None,
        };
        let entry = Entry {
            path: rel_string(&child),
            kind,
            size: st.len(),
            target,
        };
        if child_tolerated {
            out.allowed.push(entry);
        } else {
            out.remaining.push(entry);
        }
        if kind != EntryKind::Dir {
            continue;
        }
        if depth + 1 >= MAX_DEPTH {
            let e = io::Error::other("directory tree too deep to check");
            out.unreadable.push(Problem::from_error(
                &FsError::new("readdir", &child, e),
                child_tolerated,
            ));
            continue;
        }
        walk(
            root,
            &child,
            depth + 1,
            child_tolerated,
            allow_lost_found,
            fence,
            out,
        );
    }
}

/// Removes every entry inside `root` (keeping `root` itself, and a top-level
/// `lost+found` when allowed), never following a symlink and never crossing a
/// mount point (those are left, with the directories that hold them), then fsyncs
/// `root`. Goes on past failures so that as much as possible is removed; returns
/// every failure, and the caller verifies afterwards.
pub fn remove_contents(root: &Path, keep_lost_found: bool) -> Vec<FsError> {
    let here = Path::new("");
    match root_is_dir(root) {
        Ok(true) => {}
        Ok(false) => return Vec::new(),
        Err(e) => return vec![e],
    }
    let fence = match Fence::new(root) {
        Ok(f) => f,
        // Without the mount table a bind mount cannot be told apart: remove nothing.
        Err(e) => return vec![e],
    };
    // The path the caller names is resolved as usual (it may be a symlink to a
    // volume); nothing beneath it is.
    let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC;
    let dir = match Dir::open(root, flags, Mode::empty()) {
        Ok(d) => d,
        Err(e) => return vec![FsError::new("open", here, e)],
    };
    let mut errors = Vec::new();
    remove_beneath(&dir, here, 0, keep_lost_found, &fence, &mut errors);
    // The removals of the top-level names are durable once the directory is synced;
    // everything below them is unreachable after that.
    if let Err(e) = File::open(root).and_then(|d| d.sync_all()) {
        errors.push(FsError::new("fsync", here, e));
    }
    errors
}

/// The names in an open directory, sorted, without `.` and `..`.
fn list_fd(dir: &mut Dir) -> Result<Vec<OsString>, Errno> {
    let mut names = Vec::new();
    for entry in dir.iter() {
        let name = entry?.file_name().to_bytes().to_vec();
        if name != b"." && name != b".." {
            names.push(OsStr::from_bytes(&name).to_os_string());
        }
    }
    names.sort();
    Ok(names)
}

/// Empties the directory open as `dir` (at `rel` under the fence's root) by
/// descriptor. Returns true when something was deliberately left beneath it (a
/// mount point, a kept `lost+found`), so its parent knows not to try `rmdir`.
fn remove_beneath(
    dir: &Dir,
    rel: &Path,
    depth: usize,
    keep_lost_found: bool,
    fence: &Fence,
    errors: &mut Vec<FsError>,
) -> bool {
    // A second handle for readdir: `dir` stays usable for openat/unlinkat meanwhile.
    let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC;
    let names = match Dir::openat(dir.as_fd(), ".", flags, Mode::empty())
        .and_then(|mut d| list_fd(&mut d))
    {
        Ok(names) => names,
        Err(e) => {
            errors.push(FsError::new("readdir", rel, e));
            return true;
        }
    };
    let mut kept = false;
    for name in names {
        let child = rel.join(&name);
        let st = match fstatat(dir.as_fd(), name.as_os_str(), AtFlags::AT_SYMLINK_NOFOLLOW) {
            Ok(st) => st,
            Err(Errno::ENOENT) => continue,
            Err(e) => {
                errors.push(FsError::new("stat", &child, e));
                kept = true;
                continue;
            }
        };
        let dev = st.st_dev;
        let is_dir = SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT == SFlag::S_IFDIR;
        if fence.is_mount(&child, dev) {
            tracing::warn!(path = %child.display(), "mount point inside the wiped dir; left alone");
            kept = true;
            continue;
        }
        if is_dir && is_lost_found(depth, keep_lost_found, &name, EntryKind::Dir) {
            kept = true;
            continue;
        }
        if is_dir {
            if depth + 1 >= MAX_DEPTH {
                let e = io::Error::other("directory tree too deep to remove");
                errors.push(FsError::new("remove", &child, e));
                kept = true;
                continue;
            }
            let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
            let sub = match Dir::openat(dir.as_fd(), name.as_os_str(), flags, Mode::empty()) {
                Ok(d) => d,
                Err(Errno::ENOENT) => continue,
                Err(e) => {
                    errors.push(FsError::new("open", &child, e));
                    kept = true;
                    continue;
                }
            };
            // What was opened, not what was stat'ed: a mount or a swap in between
            // shows here as another device.
            match fstat(sub.as_fd()) {
                Ok(opened) if opened.st_dev == fence.dev && opened.st_ino == st.st_ino => {}
                Ok(_) => {
                    tracing::warn!(path = %child.display(), "entry changed while wiping; left alone");
                    kept = true;
                    continue;
                }
                Err(e) => {
                    errors.push(FsError::new("stat", &child, e));
                    kept = true;
                    continue;
                }
            }
            let held = remove_beneath(&sub, &child, depth + 1, false, fence, errors)
                || fence.holds_mount(&child);
            drop(sub);
            if held {
                kept = true;
                continue;
            }
            match unlinkat(dir.as_fd(), name.as_os_str(), UnlinkatFlags::RemoveDir) {
                Ok(()) | Err(Errno::ENOENT) => {}
                Err(e) => {
                    errors.push(FsError::new("rmdir", &child, e));
                    kept = true;
                }
            }
        } else {
            match unlinkat(dir.as_fd(), name.as_os_str(), UnlinkatFlags::NoRemoveDir) {
                Ok(()) | Err(Errno::ENOENT) => {}
                Err(e) => {
                    errors.push(FsError::new("unlink", &child, e));
                    kept = true;
                }
            }
        }
    }
    kept
}

/// The entries of a separate WAL dir that etcd would not have written there:
/// anything but a regular file named `*.wal`, `*.tmp` or `*.broken` at its top
/// level (a tolerated `lost+found` aside).
fn foreign_wal_entries(scan: &Scan) -> Vec<&Entry> {
    scan.remaining
        .iter()
        .filter(|e| {
            let etcds = e.kind == EntryKind::File
                && !e.path.contains('/')
                && WAL_DIR_SUFFIXES.iter().any(|s| e.path.ends_with(s));
            !etcds
        })
        .collect()
}

/// A request that cannot be carried out as asked.
#[derive(Debug, thiserror::Error)]
pub enum WipeUsageError {
    /// The data dir is the filesystem root: wiping it would destroy the machine.
    #[error("refusing to wipe {}: it is the filesystem root", path.display())]
    RootDir {
        /// The offending path.
        path: PathBuf,
    },
    /// The WAL dir contains the data dir, so emptying it would empty a parent of the data dir.
    #[error(
        "--wal-dir {} contains --data-dir {}; refusing to treat a parent of the data dir as the WAL dir",
        wal_dir.display(),
        data_dir.display()
    )]
    WalDirContainsDataDir {
        /// The WAL dir given.
        wal_dir: PathBuf,
        /// The data dir given.
        data_dir: PathBuf,
    },
}

/// The path with symlinks resolved when it exists, else made absolute lexically.
fn resolved(p: &Path) -> PathBuf {
    std::fs::canonicalize(p)
        .or_else(|_| std::path::absolute(p))
        .unwrap_or_else(|_| p.to_path_buf())
}

/// Refuses a data dir that resolves to `/`.
fn refuse_root(data_dir: &Path) -> Result<(), WipeUsageError> {
    if resolved(data_dir).parent().is_none() {
        return Err(WipeUsageError::RootDir {
            path: data_dir.to_path_buf(),
        });
    }
    Ok(())
}

/// The separate WAL dir to handle, if `--wal-dir` names one outside the data dir.
fn separate_wal_dir(args: &WipeArgs) -> Result<Option<PathBuf>, WipeUsageError> {
    let data = resolved(&args.dirs.data_dir);
    // An empty ETCD_WAL_DIR means "not set", as it does for etcd.
    let Some(wal) = args
        .dirs
        .wal_dir
        .as_ref()
        .filter(|w| !w.as_os_str().is_empty())
    else {
        return Ok(None);
    };
    let wal_resolved = resolved(wal);
    if wal_resolved.starts_with(&data) {
        // Inside the data dir: handled as part of it.
        return Ok(None);
    }
    if data.starts_with(&wal_resolved) {
        return Err(WipeUsageError::WalDirContainsDataDir {
            wal_dir: wal.clone(),
            data_dir: args.dirs.data_dir.clone(),
        });
    }
    Ok(Some(wal.clone()))
}

/// The files whose locks show a running etcd: WAL segments, preallocated `.tmp`
/// segments and the bbolt backend.
fn lock_candidates(data_dir: &Path, wal_dir: Option<&Path>) -> Vec<PathBuf> {
    let mut files = vec![data_dir.join("member").join("snap").join("db")];
    let default_wal = data_dir.join("member").join("wal");
    for dir in std::iter::once(default_wal.as_path()).chain(wal_dir) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if matches!(
                path.extension().and_then(OsStr::to_str),
                Some("wal") | Some("tmp")
            ) {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}

/// The `wal_dir` part of the document.
#[derive(Debug, Serialize)]
struct WalDirDoc<'a> {
    path: String,
    exists: bool,
    empty: bool,
    remaining: &'a [Entry],
    allowed: &'a [Entry],
    unreadable: &'a [Problem],
}

/// The JSON document of `wipe` and `verify-wipe`.
#[derive(Debug, Serialize)]
struct Doc<'a> {
    data_dir: String,
    /// Null when the command stopped before looking (a usage error).
    exists: Option<bool>,
    /// True only when the data dir (and a separate WAL dir) are provably empty.
    empty: bool,
    exit_code: u8,
    result: Exit,
    reason: String,
    remaining: &'a [Entry],
    allowed: &'a [Entry],
    unreadable: &'a [Problem],
    /// The separate `--wal-dir`, checked the same way.
    wal_dir: Option<WalDirDoc<'a>>,
    /// `wipe` only: entries removed.
    #[serde(skip_serializing_if = "Option::is_none")]
    removed: Option<u64>,
    /// `wipe` only: steps that failed while removing.
    #[serde(skip_serializing_if = "Option::is_none")]
    errors: Option<Vec<Problem>>,
    /// `wipe` only: locks a running etcd holds (non-empty means refused with 15).
    #[serde(skip_serializing_if = "Option::is_none")]
    locks: Option<&'a [HeldLock]>,
}

/// The outcome of a whole command, before printing.
struct Outcome {
    exit: Exit,
    reason: String,
    data: Option<Scan>,
    wal: Option<Scan>,
    removed: Option<u64>,
    errors: Option<Vec<Problem>>,
    locks: Option<Vec<HeldLock>>,
}

impl Outcome {
    fn verified(data: Scan, wal: Option<Scan>) -> Self {
        let scans: Vec<&Scan> = std::iter::once(&data).chain(wal.as_ref()).collect();
        let exit = scans
            .iter()
            .map(|s| s.exit())
            .find(|e| *e == Exit::Unreadable)
            .or_else(|| scans.iter().map(|s| s.exit()).find(|e| *e != Exit::Ok))
            .unwrap_or(Exit::Ok);
        let reason = match exit {
            Exit::Ok if !data.exists => "the data dir does not exist (counts as empty)".into(),
            Exit::Ok => "empty".into(),
            Exit::Unreadable => {
                "part of the tree could not be read; an unreadable directory is never empty".into()
            }
            _ => {
                let n = data.remaining.len() + wal.as_ref().map_or(0, |w| w.remaining.len());
                let mounts = scans
                    .iter()
                    .flat_map(|s| s.remaining.iter())
                    .filter(|e| e.kind == EntryKind::MountPoint)
                    .count();
                if mounts > 0 {
                    format!(
                        "{n} entries remain, {mounts} of them mount points \
                         (never entered or removed: unmount them first)"
                    )
                } else {
                    format!("{n} entries remain")
                }
            }
        };
        Outcome {
            exit,
            reason,
            data: Some(data),
            wal,
            removed: None,
            errors: None,
            locks: None,
        }
    }

    fn usage(e: &WipeUsageError) -> Self {
        Outcome {
            exit: Exit::Usage,
            reason: e.to_string(),
            data: None,
            wal: None,
            removed: None,
            errors: None,
            locks: None,
        }
    }

    fn print(&self, command: &str, args: &WipeArgs) -> crate::error::Result<Exit> {
        let empty_scan = Scan::default();
        let data = self.data.as_ref().unwrap_or(&empty_scan);
        let empty =
            self.exit == Exit::Ok && data.empty() && self.wal.as_ref().is_none_or(|w| w.empty());
        let doc = Doc {
            data_dir: args.dirs.data_dir.to_string_lossy().into_owned(),
            exists: self.data.as_ref().map(|s| s.exists),
            empty,
            exit_code: self.exit.code(),
            result: self.exit,
            reason: self.reason.clone(),
            remaining: &data.remaining,
            allowed: &data.allowed,
            unreadable: &data.unreadable,
            wal_dir: self.wal.as_ref().map(|w| WalDirDoc {
                path: w.path.to_string_lossy().into_owned(),
                exists: w.exists,
                empty: w.empty(),
                remaining: &w.remaining,
                allowed: &w.allowed,
                unreadable: &w.unreadable,
            }),
            removed: self.removed,
            errors: self.errors.clone(),
            locks: self.locks.as_deref(),
        };
        emit(args.output.format, &self.human(command, args), &doc)?;
        Ok(self.exit)
    }

    fn human(&self, command: &str, args: &WipeArgs) -> String {
        use std::fmt::Write;
        let mut s = format!(
            "{command} {}: {} (exit {})\n",
            args.dirs.data_dir.display(),
            self.reason,
            self.exit.code()
        );
        if let Some(n) = self.removed {
            let _ = writeln!(s, "  removed {n} entries");
        }
        for l in self.locks.iter().flatten() {
            let pid = l.pid.map(|p| format!(" by pid {p}")).unwrap_or_default();
            let _ = writeln!(s, "  locked ({}){pid}: {}", l.kind, l.path.display());
        }
        for e in self.errors.iter().flatten() {
            let _ = writeln!(s, "  failed to {} {}: {}", e.op, e.path, e.error);
        }
        for scan in self.data.iter().chain(self.wal.iter()) {
            let mut lines = 0;
            let base = scan.path.display();
            for p in &scan.unreadable {
                let how = if p.tolerated { "tolerated, " } else { "" };
                let _ = writeln!(
                    s,
                    "  unreadable ({how}{}): {base}/{}: {}",
                    p.op, p.path, p.error
                );
            }
            for (list, label) in [(&scan.remaining, "left"), (&scan.allowed, "allowed")] {
                for e in list.iter() {
                    lines += 1;
                    if lines > HUMAN_LIST_LIMIT {
                        continue;
                    }
                    let kind = match e.kind {
                        EntryKind::File => "file",
                        EntryKind::Dir => "dir",
                        EntryKind::Symlink => "symlink",
                        EntryKind::Other => "other",
                        EntryKind::MountPoint => "mount point",
                    };
                    let target = e
                        .target
                        .as_ref()
                        .map(|t| format!(" -> {t}"))
                        .unwrap_or_default();
                    let _ = writeln!(
                        s,
                        "  {label}: {kind:7} {base}/{}{target} ({} bytes)",
                        e.path, e.size
                    );
                }
            }
            if lines > HUMAN_LIST_LIMIT {
                let _ = writeln!(
                    s,
                    "  ... and {} more (-o json lists all)",
                    lines - HUMAN_LIST_LIMIT
                );
            }
        }
        s
    }
}

/// Runs `verify-wipe`: read-only; 0 provably empty, 20 entries remain, 3 unreadable.
pub fn run_verify(args: &WipeArgs) -> crate::error::Result<Exit> {
    let wal_dir = match separate_wal_dir(args) {
        Ok(w) => w,
        Err(e) => return Outcome::usage(&e).print("verify-wipe", args),
    };
    let data = scan(&args.dirs.data_dir, args.allow_lost_found);
    let wal = wal_dir.map(|w| scan(&w, args.allow_lost_found));
    Outcome::verified(data, wal).print("verify-wipe", args)
}

/// Runs `wipe`: refuses with 15 while etcd holds the locks, removes every entry,
/// fsyncs, and exits with the verification's result (0, 20 or 3).
pub fn run(args: &WipeArgs) -> crate::error::Result<Exit> {
    let wal_dir = match refuse_root(&args.dirs.data_dir).and_then(|()| separate_wal_dir(args)) {
        Ok(w) => w,
        Err(e) => return Outcome::usage(&e).print("wipe", args),
    };
    let data_dir = &args.dirs.data_dir;
    let allow = args.allow_lost_found;
    let scan_all = || {
        (
            scan(data_dir, allow),
            wal_dir.as_deref().map(|w| scan(w, allow)),
        )
    };
    let count = |data: &Scan, wal: &Option<Scan>| {
        data.remaining.len() + wal.as_ref().map_or(0, |w| w.remaining.len())
    };
    let (before, before_wal) = scan_all();

    let locks = held_locks(
        &lock_candidates(data_dir, wal_dir.as_deref()),
        Probe::Thorough,
    );
    if !locks.is_empty() {
        tracing::warn!(
            data_dir = %data_dir.display(),
            locks = locks.len(),
            "etcd is running on this data dir; not wiping"
        );
        let mut out = Outcome::verified(before, before_wal);
        out.exit = Exit::RefuseRunning;
        out.reason = "etcd is running on this data dir (it holds the WAL/backend locks); \
                      nothing was removed"
            .into();
        out.removed = Some(0);
        out.errors = Some(Vec::new());
        out.locks = Some(locks);
        return out.print("wipe", args);
    }
    let foreign: Vec<String> = before_wal
        .iter()
        .flat_map(|w| foreign_wal_entries(w).into_iter().map(|e| e.path.clone()))
        .collect();
    let wal_unreadable = before_wal.as_ref().is_some_and(|w| !w.readable());
    if !foreign.is_empty() || wal_unreadable {
        let wal = wal_dir
            .as_deref()
            .unwrap_or(Path::new(""))
            .display()
            .to_string();
        tracing::warn!(wal_dir = %wal, foreign = foreign.len(), "not a WAL dir; not wiping");
        let mut out = Outcome::verified(before, before_wal);
        out.exit = if wal_unreadable {
            Exit::Unreadable
        } else {
            Exit::WipeIncomplete
        };
        let shown: Vec<&str> = foreign.iter().take(10).map(String::as_str).collect();
        out.reason = if wal_unreadable {
            format!("--wal-dir {wal} could not be read in full; nothing was removed")
        } else {
            format!(
                "--wal-dir {wal} holds entries etcd does not write there ({}{}); \
                 it may not be a WAL dir, so nothing was removed",
                shown.join(", "),
                if foreign.len() > shown.len() {
                    ", ..."
                } else {
                    ""
                }
            )
        };
        out.removed = Some(0);
        out.errors = Some(Vec::new());
        return out.print("wipe", args);
    }
    let before_count = count(&before, &before_wal);

    let mut errors = Vec::new();
    for root in std::iter::once(data_dir.as_path()).chain(wal_dir.as_deref()) {
        let failed = remove_contents(root, allow);
        tracing::info!(dir = %root.display(), failed = failed.len(), "removed contents");
        errors.extend(failed.iter().map(|e| {
            let mut p = Problem::from_error(e, false);
            if root != data_dir.as_path() {
                // Outside the data dir: say where.
                p.path = root.join(&e.path).to_string_lossy().into_owned();
            }
            p
        }));
    }

    let (data, wal) = scan_all();
    let removed = before_count.saturating_sub(count(&data, &wal));
    let mut out = Outcome::verified(data, wal);
    out.removed = Some(removed as u64);
    out.errors = Some(errors);
    out.print("wipe", args)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    #[test]
    fn scan_lists_depth_first_sorted_and_does_not_follow_symlinks() {
        let d = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret"), b"x").unwrap();
        std::fs::create_dir_all(d.path().join("b/c")).unwrap();
        std::fs::write(d.path().join("b/c/f"), b"abc").unwrap();
        std::fs::write(d.path().join(".a"), b"").unwrap();
        symlink(outside.path(), d.path().join("link")).unwrap();
        let s = scan(d.path(), false);
        let paths: Vec<(&str, EntryKind)> = s
            .remaining
            .iter()
            .map(|e| (e.path.as_str(), e.kind))
            .collect();
        assert_eq!(
            paths,
            vec![
                (".a", EntryKind::File),
                ("b", EntryKind::Dir),
                ("b/c", EntryKind::Dir),
                ("b/c/f", EntryKind::File),
                ("link", EntryKind::Symlink),
            ]
        );
        assert_eq!(s.remaining[3].size, 3);
        assert_eq!(s.exit(), Exit::WipeIncomplete);
    }

    #[test]
    fn removal_keeps_lost_found_only_when_asked() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(d.path().join("lost+found/x")).unwrap();
        std::fs::write(d.path().join("f"), b"1").unwrap();
        let errors = remove_contents(d.path(), true);
        assert!(errors.is_empty(), "{errors:?}");
        let s = scan(d.path(), true);
        assert!(s.empty());
        assert_eq!(s.allowed.len(), 2);
        let errors = remove_contents(d.path(), false);
        assert!(errors.is_empty(), "{errors:?}");
        assert!(scan(d.path(), false).empty());
        assert!(scan(d.path(), false).exists);
    }

    #[test]
    fn a_nested_lost_found_is_not_tolerated() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(d.path().join("member/lost+found")).unwrap();
        let s = scan(d.path(), true);
        assert_eq!(s.remaining.len(), 2);
        assert!(s.allowed.is_empty());
    }
}
