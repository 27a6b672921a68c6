//! Directory helpers shared by the WAL and snapshot readers: entry listing,
//! `lstat`, and the `%016x-%016x` names both formats use.

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

/// Reads a directory's entries as (name, path), skipping names that are not UTF-8
/// (etcd never writes such names; the caller reports debris).
pub(crate) fn read_dir_names(dir: &Path) -> Result<Vec<(String, PathBuf)>, IoError> {
    let err = |source| IoError {
        op: "readdir",
        path: dir.to_path_buf(),
        offset: None,
        source,
    };
    let mut out = Vec::new();
    for entry in fs::read_dir(dir).map_err(err)? {
        let entry = entry.map_err(err)?;
        if let Ok(name) = entry.file_name().into_string() {
            out.push((name, entry.path()));
        }
    }
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
