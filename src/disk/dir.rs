//! The one directory lister of the offline reader, and the `%016x-%016x` names
//! the WAL and snapshot formats share.
//!
//! A name that is not UTF-8 is kept, never skipped: etcd reads names as bytes
//! (`fileutil.ReadDir`, then `filepath.Ext(name) == ".wal"` for `wal.Exist`),
//! so `\xff.wal` makes a directory initialized for etcd, and `inspect` must
//! report every entry etcd would not expect. The name is decoded lossily
//! (U+FFFD for each invalid sequence): every name etcd looks for is ASCII,
//! and U+FFFD never equals an ASCII byte, so each comparison (`member`, `db`,
//! a `.wal` or `.snap` suffix, `%016x-%016x`) answers as it does on the bytes;
//! and the report, JSON, shows the entry with U+FFFD where bytes did not
//! decode. The exact path is kept beside it for opening the file.

use std::fs;
use std::path::{Path, PathBuf};

use crate::disk::reader::IoError;

/// Parses `%016x-%016x` (shared with `.snap` names).
pub(crate) fn parse_hex_pair(s: &str) -> Option<(u64, u64)> {
    let (a, b) = s.split_once('-')?;
    Some((parse_hex16(a)?, parse_hex16(b)?))
}

fn parse_hex16(s: &str) -> Option<u64> {
    let ok = s.len() == 16
        && s.bytes()
            .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c));
    if ok {
        u64::from_str_radix(s, 16).ok()
    } else {
        None
    }
}

/// One entry of a listing.
#[derive(Debug, Clone)]
pub(crate) struct DirEntry {
    /// The name, decoded lossily (see the module doc).
    pub(crate) name: String,
    /// The exact path, for opening the entry.
    pub(crate) path: PathBuf,
    /// The entry's own type: a symlink is a symlink, not what it points to.
    pub(crate) file_type: fs::FileType,
}

/// Lists `dir` without following symlinks inside it, sorted by name; every
/// entry, whatever the bytes of its name.
pub(crate) fn list(dir: &Path) -> Result<Vec<DirEntry>, IoError> {
    let err = |source| IoError {
        op: "readdir",
        path: dir.to_path_buf(),
        offset: None,
        source,
    };
    let mut out = Vec::new();
    for entry in fs::read_dir(dir).map_err(err)? {
        let entry = entry.map_err(err)?;
        out.push(DirEntry {
            name: entry.file_name().to_string_lossy().into_owned(),
            file_type: entry.file_type().map_err(err)?,
            path: entry.path(),
        });
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(out)
}

/// `lstat` of a directory entry.
pub(crate) fn lstat(path: &Path) -> Result<fs::Metadata, IoError> {
    fs::symlink_metadata(path).map_err(|source| IoError {
        op: "lstat",
        path: path.to_path_buf(),
        offset: None,
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt;

    #[test]
    fn a_name_that_is_not_utf8_is_listed_with_its_exact_path() {
        let dir = tempfile::tempdir().unwrap();
        let raw = OsStr::from_bytes(b"\xff\xfe.wal");
        fs::write(dir.path().join(raw), b"").unwrap();
        fs::write(dir.path().join("db"), b"").unwrap();
        let entries = list(dir.path()).unwrap();
        let names: Vec<&str> = entries.iter().map(|e| e.name.as_str()).collect();
        assert_eq!(names, ["db", "\u{fffd}\u{fffd}.wal"]);
        assert_eq!(entries[1].path, dir.path().join(raw));
        assert!(lstat(&entries[1].path).unwrap().is_file());
    }

    #[test]
    fn hex_pairs_are_exactly_sixteen_lowercase_digits_each() {
        assert_eq!(
            parse_hex_pair("0000000000000001-00000000000000ff"),
            Some((1, 255))
        );
        for bad in [
            "000000000000001-00000000000000ff",
            "0000000000000001-00000000000000FF",
            "0000000000000001_00000000000000ff",
            "\u{fffd}000000000000001-00000000000000ff",
        ] {
            assert_eq!(parse_hex_pair(bad), None, "{bad}");
        }
    }
}
