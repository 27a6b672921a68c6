//! Step one: the listings of the data, member, WAL and snap directories, and
//! what they alone decide: etcd's `wal.Exist`, the entries etcd would not
//! expect, a `member/`, `member/wal` or `member/snap` that is not a
//! directory, and the state of a directory without a WAL.
//!
//! Only names and types are read here (no file is opened but a db that may be
//! a failed first start's), and nothing inside the data dir is followed.

use std::fs::FileType;
use std::io;
use std::path::{Path, PathBuf};

use super::super::bbolt::Db;
use super::super::dir::{self, DirEntry};
use super::{DirState, Entry, Failure, Paths};

/// The four listings, each sorted by name; an absent directory lists nothing.
pub(super) struct Listing {
    /// The type of `<data-dir>/member`, when there is one.
    pub(super) member: Option<FileType>,
    /// `<data-dir>/member`.
    pub(super) member_entries: Vec<DirEntry>,
    /// The WAL dir.
    pub(super) wal_entries: Vec<DirEntry>,
    /// `<data-dir>/member/snap`.
    pub(super) snap_entries: Vec<DirEntry>,
}

impl Listing {
    /// etcd's `wal.Exist`: the WAL dir holds an entry named `*.wal`.
    pub(super) fn has_wal(&self) -> bool {
        self.wal_entries.iter().any(|e| is_wal_segment(&e.name))
    }

    /// The type of `member/snap/db`, when there is one.
    pub(super) fn db(&self) -> Option<FileType> {
        self.snap_entries
            .iter()
            .find(|e| e.name == "db")
            .map(|e| e.file_type)
    }

    /// `member/snap/db` is there and is a regular file (the only kind opened).
    pub(super) fn db_is_file(&self) -> bool {
        self.db().is_some_and(|ft| ft.is_file())
    }

    /// A backend received from the leader (`*.snap.db`) waits in `member/snap`.
    pub(super) fn has_snap_db(&self) -> bool {
        self.snap_entries
            .iter()
            .any(|e| e.name.ends_with(".snap.db"))
    }
}

/// Lists the four directories, pushing onto `unexpected` what etcd tolerates
/// or would not expect; ends the read when a directory cannot be listed or
/// one etcd expects is something else.
pub(super) fn list(paths: &Paths, unexpected: &mut Vec<Entry>) -> Result<Listing, DirState> {
    // The data dir itself may be a symlink (a mount's subPath); entries inside may not.
    let data_entries = listed(&paths.data_dir)?;
    let mut member = None;
    for e in &data_entries {
        let path = paths.data_dir.join(&e.name);
        let note = match e.name.as_str() {
            "member" => {
                member = Some(e.file_type);
                continue;
            }
            "lost+found" => "file-system debris; etcd ignores it",
            ".restore-staging" => "debris of an interrupted restore; the next restore removes it",
            _ if paths.wal_dir.starts_with(&path) => continue,
            _ => "not written by etcd",
        };
        unexpected.push(Entry {
            path,
            kind: kind_of(&e.file_type),
            note,
        });
    }
    if let Some(ft) = member.filter(|ft| !ft.is_dir()) {
        return Err(DirState::Corrupt(Failure::at(
            format!(
                "{} is a {}, not a directory",
                paths.member_dir.display(),
                kind_of(&ft)
            ),
            Some(paths.member_dir.clone()),
            None,
        )));
    }

    let member_entries = listed(&paths.member_dir)?;
    // Nothing inside the data dir is followed: a symlinked `member/wal` or
    // `member/snap` would take every read out of it (and a loop would be an
    // ELOOP at best). A dedicated `--wal-dir` is the operator's choice and may be
    // a symlink, like the data dir itself.
    let default_wal_dir = paths.wal_dir == paths.member_dir.join("wal");
    for e in &member_entries {
        let must_be_dir = e.name == "snap" || (e.name == "wal" && default_wal_dir);
        if must_be_dir && !e.file_type.is_dir() {
            return Err(not_a_directory(paths, &e.name, &e.file_type));
        }
    }

    let wal_entries = listed(&paths.wal_dir)?;
    for e in wal_entries.iter().filter(|e| !is_wal_segment(&e.name)) {
        let note = if e.name.ends_with(".tmp") {
            "preallocated WAL segment; etcd reuses or removes it"
        } else if e.name.ends_with(".broken") {
            "a torn tail etcd set aside while repairing"
        } else {
            "not a WAL segment"
        };
        unexpected.push(Entry {
            path: paths.wal_dir.join(&e.name),
            kind: kind_of(&e.file_type),
            note,
        });
    }
    let snap_entries = listed(&paths.snap_dir)?;
    Ok(Listing {
        member,
        member_entries,
        wal_entries,
        snap_entries,
    })
}

/// `member/wal` or `member/snap` (named `name`, of type `ft`) is not a
/// directory.
fn not_a_directory(paths: &Paths, name: &str, ft: &FileType) -> DirState {
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
        let mut failure = Failure::at(
            format!(
                "{} is a symlink to a directory; symlinks inside the data dir are not followed: {flag}",
                path.display()
            ),
            Some(path.clone()),
            None,
        );
        failure.symlinked = Some(path);
        return DirState::Unreadable(failure);
    }
    DirState::Corrupt(Failure::at(
        format!(
            "{} is {}, not a directory (symlinks inside the data dir are not followed)",
            path.display(),
            a_kind(ft)
        ),
        Some(path),
        None,
    ))
}

/// The state of a directory without a WAL: empty when it has no `member/`
/// or only the debris of a first start that applied nothing (pushed onto
/// `unexpected`), partial otherwise.
pub(super) fn without_wal(
    paths: &Paths,
    listing: &Listing,
    unexpected: &mut Vec<Entry>,
) -> DirState {
    if listing.member.is_none() {
        return DirState::Empty;
    }
    if let Some(debris) = failed_first_start_debris(paths, listing) {
        unexpected.push(debris);
        return DirState::Empty;
    }
    let names = |entries: &[DirEntry], prefix: &str| -> Vec<String> {
        entries
            .iter()
            .map(|e| format!("{prefix}{}", e.name))
            .collect()
    };
    let what = [
        names(&listing.member_entries, "member/"),
        names(&listing.snap_entries, "member/snap/"),
    ]
    .concat();
    let why = if listing.member_entries.iter().any(|e| e.name == "wal.tmp") {
        "WAL creation was interrupted (member/wal.tmp)".to_string()
    } else if listing.db().is_some() {
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
    DirState::Partial(Failure::at(why, Some(paths.member_dir.clone()), None))
}

/// etcd opens the backend before its bootstrap and join checks, so a first
/// start that fails (member count unequal, a peer unreachable, a bad URL)
/// leaves `member/snap/db` and nothing else; one killed within milliseconds
/// of starting leaves less: `member/` and `member/snap/` with nothing in them
/// (created before the db), or a db file of zero bytes (created, not yet
/// initialised; bbolt initialises an empty file when it opens it). None of
/// these has applied anything: etcd starts on them as on an empty directory,
/// so they are classified as empty, and returned here to be reported as
/// debris. Anything else etcd wrote, a db with a consistent index, members or
/// keys, or any doubt reading the db keeps the directory partial.
fn failed_first_start_debris(paths: &Paths, listing: &Listing) -> Option<Entry> {
    // `wal.tmp`: a first start killed while creating its WAL (etcd's WAL
    // creation removes a leftover one).
    let only_dirs = listing
        .member_entries
        .iter()
        .all(|e| e.file_type.is_dir() && ["snap", "wal", "wal.tmp"].contains(&e.name.as_str()));
    let only_db = listing
        .snap_entries
        .iter()
        .all(|e| e.name == "db" && e.file_type.is_file());
    if !only_dirs || !only_db || !listing.wal_entries.is_empty() {
        return None;
    }
    let debris = |path: PathBuf, kind, note| Some(Entry { path, kind, note });
    if listing.snap_entries.is_empty() {
        return debris(
            paths.member_dir.clone(),
            "dir",
            "debris of a first start killed at once (member/ and its directories, nothing in them): etcd starts on it as on an empty directory",
        );
    }
    let db_path = paths.db();
    if std::fs::symlink_metadata(&db_path).ok()?.len() == 0 {
        return debris(
            db_path,
            "file",
            "debris of a first start, or of an `etcdutl snapshot restore`, killed before the db was written (a backend db of zero bytes, never initialised, and no WAL): nothing was applied; etcd initialises it",
        );
    }
    let db = Db::open(&db_path).ok()?;
    let backend = db.identity_summary().ok()?;
    if backend.consistent_index.unwrap_or(0) != 0 || !backend.members.is_empty() {
        return None;
    }
    let mut keys = 0u64;
    db.for_each_kv(b"key", |_, _| keys += 1).ok()?;
    if keys != 0 {
        return None;
    }
    debris(
        db_path,
        "file",
        "debris of a failed first start (a backend db with no consistent index, no members and no keys, and no WAL): etcd reuses it",
    )
}

/// etcd's `wal.Exist` test for one directory entry name.
fn is_wal_segment(name: &str) -> bool {
    name.ends_with(".wal")
}

/// `wal.Exist` on the WAL dir alone (see [`super::wal_exists`]).
pub(super) fn wal_exists(wal_dir: &Path) -> bool {
    dir::list(wal_dir).is_ok_and(|entries| entries.iter().any(|e| is_wal_segment(&e.name)))
}

/// A directory's entries; none when it does not exist, and the end of the
/// read when it cannot be listed.
fn listed(dir: &Path) -> Result<Vec<DirEntry>, DirState> {
    match dir::list(dir) {
        Ok(entries) => Ok(entries),
        Err(e) if e.source.kind() == io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => {
            let failure = Failure::at(
                format!("cannot list {}: {}", dir.display(), e.source),
                Some(dir.to_path_buf()),
                None,
            );
            // A loop or a file where a directory belongs is damage; a
            // permission or an I/O error is a volume that cannot be read.
            let damaged = [Some(nix::libc::ELOOP), Some(nix::libc::ENOTDIR)]
                .contains(&e.source.raw_os_error());
            Err(if damaged {
                DirState::Corrupt(failure)
            } else {
                DirState::Unreadable(failure)
            })
        }
    }
}

/// An entry's type as the report spells it.
fn kind_of(ft: &FileType) -> &'static str {
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
pub(super) fn a_kind(ft: &FileType) -> &'static str {
    match kind_of(ft) {
        "symlink" => "a symlink",
        "dir" => "a directory",
        "file" => "a regular file",
        _ => "a special file (FIFO, socket or device)",
    }
}
