//! Step four: the snapshot etcd starts from, and the `.snap` file it loads.
//!
//! Up to 3.6 that is the newest WAL snapshot record at or below the commit
//! that has its `.snap` file. 3.7 no longer loads `.snap` files (3.8 no longer
//! writes them): it starts from the newest WAL snapshot record at or below the
//! commit, with or without its `.snap`, and takes membership from the backend.
//! Which rule applies follows the storage version, read only when a record
//! lacks its file.

use super::super::bbolt::{detect_storage_version, semver_minor, Db};
use super::super::snap::{list_snaps, read_snap, snap_file_name, SnapFile, SnapName};
use super::super::wal::Wal;
use super::list::Listing;
use super::{DirState, Failure, Paths, SnapshotPoint};

/// Where etcd starts: the snapshot point, and the `.snap` it loads (none from
/// 3.7 on, or when the WAL names no snapshot).
pub(super) struct Start {
    /// The raft index and term of the start snapshot (0, 0 when none).
    pub(super) point: SnapshotPoint,
    /// The `.snap` file etcd loads.
    pub(super) file: Option<SnapFile>,
}

/// The `.snap` files of the snap dir; one that cannot be listed ends the read.
pub(super) fn list(paths: &Paths) -> Result<Vec<SnapName>, DirState> {
    list_snaps(&paths.snap_dir).map_err(|e| {
        DirState::reading(
            e.is_permission(),
            Failure::at(e.to_string(), Some(paths.snap_dir.clone()), None),
        )
    })
}

/// The start snapshot, from the WAL's snapshot records and the `.snap` files
/// `snaps`; a record whose `.snap` etcd needs and cannot have, or a `.snap`
/// that cannot be read, ends the read.
pub(super) fn start(
    paths: &Paths,
    listing: &Listing,
    wal: &Wal,
    snaps: &[SnapName],
) -> Result<Start, DirState> {
    let commit = wal.hard_state.commit;
    let in_use = wal
        .snapshots
        .iter()
        .rev()
        .filter(|s| s.index > 0 && s.index <= commit)
        .find_map(|s| {
            snaps
                .iter()
                .find(|f| f.index == s.index && f.term == s.term)
        });
    let newest_record = wal
        .snapshots
        .iter()
        .filter(|s| s.index > 0)
        .max_by_key(|s| s.index);
    let newest_committed = wal
        .snapshots
        .iter()
        .filter(|s| s.index > 0 && s.index <= commit)
        .max_by_key(|s| s.index);
    let snap_less = newest_committed.is_some_and(|s| in_use.is_none_or(|f| f.index < s.index))
        || (in_use.is_none() && newest_record.is_some());
    let snap_optional = snap_less && storage_line(paths, listing).is_some_and(|v| v >= (3, 7));
    if snap_optional {
        let point =
            newest_committed.map_or(SnapshotPoint { index: 0, term: 0 }, |s| SnapshotPoint {
                index: s.index,
                term: s.term,
            });
        return Ok(Start { point, file: None });
    }
    let first_segment_index = wal.segments.first().map_or(0, |s| s.first_index);
    if let Some(s) = newest_record.filter(|_| in_use.is_none() && first_segment_index > 0) {
        return Err(DirState::Corrupt(Failure::at(
            format!(
                "the WAL refers to snapshot {} but no such .snap file exists and the WAL no longer starts at index 0",
                snap_file_name(s.term, s.index)
            ),
            Some(paths.snap_dir.clone()),
            None,
        )));
    }
    let Some(name) = in_use else {
        return Ok(Start {
            point: SnapshotPoint { index: 0, term: 0 },
            file: None,
        });
    };
    let file = read_snap(&name.path).map_err(|e| {
        DirState::reading(
            e.is_permission(),
            Failure::at(e.to_string(), Some(name.path.clone()), None),
        )
    })?;
    Ok(Start {
        point: SnapshotPoint {
            index: file.index,
            term: file.term,
        },
        file: Some(file),
    })
}

/// `(major, minor)` of the backend's storage version as etcd detects it, for the
/// rules that follow the version; `None` when the db is not a regular file,
/// cannot be read, or does not tell.
fn storage_line(paths: &Paths, listing: &Listing) -> Option<(u32, u32)> {
    if !listing.db_is_file() {
        return None;
    }
    let db = Db::open(&paths.db()).ok()?;
    let raw = db
        .get(b"meta", b"storageVersion")
        .ok()
        .flatten()
        .map(|v| String::from_utf8_lossy(&v).into_owned());
    let term = db
        .get(b"meta", b"term")
        .ok()
        .flatten()
        .and_then(|v| <[u8; 8]>::try_from(v.as_slice()).ok())
        .map(u64::from_be_bytes);
    let (version, _) = detect_storage_version(raw.as_deref(), term);
    version.as_deref().and_then(semver_minor)
}
