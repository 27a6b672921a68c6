//! Proofs that a command left a directory alone.
//!
//! A tree snapshot records, for every entry under a root (symlinks recorded, never
//! followed), the facts a write, create, delete, rename, truncate, chmod or chown
//! would change: kind, length, mode, owner, mtime, ctime, inode, link target and a
//! SHA-1 of file contents. Reading a file changes only its atime, which is left
//! out. `assert_tree_unchanged` prints every difference, not just the first.

use std::collections::BTreeMap;
use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use sha1::{Digest, Sha1};

/// What kind of entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EntryKind {
    /// A directory.
    Dir,
    /// A regular file.
    File,
    /// A symbolic link (not followed).
    Symlink,
    /// A FIFO, socket or device.
    Other,
}

/// The facts about one entry that a mutation would change.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EntryFacts {
    /// Kind of entry.
    pub kind: EntryKind,
    /// Size in bytes (`st_size`).
    pub len: u64,
    /// Permission bits, including setuid/setgid/sticky (`st_mode & 0o7777`).
    pub mode: u32,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Inode number (a replace-by-rename changes it).
    pub ino: u64,
    /// Modification time, ns since the epoch.
    pub mtime_ns: i128,
    /// Status-change time, ns since the epoch.
    pub ctime_ns: i128,
    /// SHA-1 of the contents, hex; regular files only.
    pub sha1: Option<String>,
    /// Where a symlink points; symlinks only.
    pub symlink_target: Option<PathBuf>,
}

/// Every entry under `root` (the root itself as the empty path), keyed by path
/// relative to `root`. Panics if something cannot be read: the harness runs as root,
/// so that means the tree changed under it.
pub fn tree_snapshot(root: &Path) -> BTreeMap<PathBuf, EntryFacts> {
    let mut tree = BTreeMap::new();
    walk(root, Path::new(""), &mut tree);
    tree
}

fn walk(root: &Path, rel: &Path, tree: &mut BTreeMap<PathBuf, EntryFacts>) {
    let path = root.join(rel);
    let meta = std::fs::symlink_metadata(&path)
        .unwrap_or_else(|e| panic!("cannot stat {}: {e}", path.display()));
    let ft = meta.file_type();
    let kind = if ft.is_dir() {
        EntryKind::Dir
    } else if ft.is_file() {
        EntryKind::File
    } else if ft.is_symlink() {
        EntryKind::Symlink
    } else {
        EntryKind::Other
    };
    let facts = EntryFacts {
        kind,
        len: meta.len(),
        mode: meta.mode() & 0o7777,
        uid: meta.uid(),
        gid: meta.gid(),
        ino: meta.ino(),
        mtime_ns: i128::from(meta.mtime()) * 1_000_000_000 + i128::from(meta.mtime_nsec()),
        ctime_ns: i128::from(meta.ctime()) * 1_000_000_000 + i128::from(meta.ctime_nsec()),
        sha1: (kind == EntryKind::File).then(|| sha1_file(&path)),
        symlink_target: (kind == EntryKind::Symlink).then(|| {
            std::fs::read_link(&path)
                .unwrap_or_else(|e| panic!("cannot read link {}: {e}", path.display()))
        }),
    };
    tree.insert(rel.to_path_buf(), facts);
    if kind == EntryKind::Dir {
        let mut names: Vec<_> = std::fs::read_dir(&path)
            .unwrap_or_else(|e| panic!("cannot list {}: {e}", path.display()))
            .map(|e| {
                e.unwrap_or_else(|e| panic!("cannot list {}: {e}", path.display()))
                    .file_name()
            })
            .collect();
        names.sort();
        for name in names {
            walk(root, &rel.join(name), tree);
        }
    }
}

fn sha1_file(path: &Path) -> String {
    let mut file =
        std::fs::File::open(path).unwrap_or_else(|e| panic!("cannot open {}: {e}", path.display()));
    let mut hasher = Sha1::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = file
            .read(&mut buf)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Every difference between two snapshots, one line each (empty when equal).
pub fn tree_diff(
    before: &BTreeMap<PathBuf, EntryFacts>,
    after: &BTreeMap<PathBuf, EntryFacts>,
) -> Vec<String> {
    let mut diffs = Vec::new();
    for (path, old) in before {
        match after.get(path) {
            None => diffs.push(format!("removed: {}", path.display())),
            Some(new) if new != old => {
                diffs.push(format!("changed: {}: {old:?} -> {new:?}", path.display()))
            }
            Some(_) => {}
        }
    }
    for path in after.keys().filter(|p| !before.contains_key(*p)) {
        diffs.push(format!("created: {}", path.display()));
    }
    diffs
}

/// Panics listing every difference unless the two snapshots are equal.
#[track_caller]
pub fn assert_tree_unchanged(
    before: &BTreeMap<PathBuf, EntryFacts>,
    after: &BTreeMap<PathBuf, EntryFacts>,
) {
    let diffs = tree_diff(before, after);
    assert!(
        diffs.is_empty(),
        "the tree changed:\n  {}",
        diffs.join("\n  ")
    );
}

/// The names of a directory's entries, sorted (empty when it does not exist).
pub fn entries(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}
