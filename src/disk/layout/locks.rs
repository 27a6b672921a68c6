//! Step two: is an etcd running on the directory? Its locks on the WAL
//! segments and the backend, looked at, never taken (see [`super::super::lock`]).

use std::path::PathBuf;

use super::super::lock::{held_locks, HeldLock, Probe};
use super::list::Listing;
use super::Paths;

/// The locks other processes hold on the files etcd locks: every `*.wal` and
/// preallocated `*.tmp` segment that is a regular file, and the db.
pub(super) fn held(paths: &Paths, listing: &Listing, probe: Probe) -> Vec<HeldLock> {
    // Joined from the name as listed, like every path the report shows (a
    // name that is not UTF-8 is not a segment etcd locks).
    let mut files: Vec<PathBuf> = listing
        .wal_entries
        .iter()
        .filter(|e| e.file_type.is_file() && (e.name.ends_with(".wal") || e.name.ends_with(".tmp")))
        .map(|e| paths.wal_dir.join(&e.name))
        .collect();
    if listing.db().is_some() {
        files.push(paths.db());
    }
    held_locks(&files, probe)
}
