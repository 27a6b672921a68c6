//! A positional, read-only file reader over `pread`.
//!
//! Files are opened `O_RDONLY | O_NOFOLLOW | O_CLOEXEC`, so a symlink planted where
//! a data file should be is an error instead of a read of something outside the
//! data dir. Nothing here locks, maps or writes.

use std::fs::File;
use std::io;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// An I/O failure, with the file and the byte offset it happened at.
#[derive(Debug, thiserror::Error)]
#[error("{op} {path}{}: {source}", offset.map(|o| format!(" at byte {o}")).unwrap_or_default())]
pub struct IoError {
    /// The syscall or step that failed (`open`, `pread`, `stat`).
    pub op: &'static str,
    /// The file the syscall was made on (the directory, for `readdir`).
    pub path: PathBuf,
    /// The byte offset of a failed read.
    pub offset: Option<u64>,
    /// What the kernel answered ([`IoError::is_permission`] tells an unreadable
    /// file from a failing one).
    #[source]
    pub source: io::Error,
}

impl IoError {
    /// True when the cause is a permission problem (EACCES/EPERM): the caller
    /// reports the directory as unreadable rather than corrupt.
    pub fn is_permission(&self) -> bool {
        self.source.kind() == io::ErrorKind::PermissionDenied
    }
}

/// A region of a file: where a record or page starts and how long it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Block {
    /// Byte offset from the start of the file.
    pub offset: u64,
    /// Length in bytes.
    pub len: u64,
}

/// A read-only file with its path and its length at open time.
#[derive(Debug)]
pub struct PosReader {
    file: File,
    path: PathBuf,
    len: u64,
}

impl PosReader {
    /// Opens `path` read-only without following a final symlink.
    pub fn open(path: &Path) -> Result<Self, IoError> {
        let err = |op, source| IoError {
            op,
            path: path.to_path_buf(),
            offset: None,
            source,
        };
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_CLOEXEC)
            .open(path)
            .map_err(|e| err("open", e))?;
        let meta = file.metadata().map_err(|e| err("stat", e))?;
        if !meta.is_file() {
            return Err(err(
                "open",
                io::Error::new(io::ErrorKind::InvalidInput, "not a regular file"),
            ));
        }
        Ok(PosReader {
            file,
            path: path.to_path_buf(),
            len: meta.len(),
        })
    }

    /// The path it was opened by, for the errors of its reads.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The file's length when it was opened.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// True for a zero-length file.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Reads as many bytes as are available at `offset`, up to `buf.len()`.
    /// Returns fewer only at end of file. `EINTR` is retried.
    pub fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<usize, IoError> {
        let mut done = 0;
        while done < buf.len() {
            match self.file.read_at(&mut buf[done..], offset + done as u64) {
                Ok(0) => break,
                Ok(n) => done += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    return Err(IoError {
                        op: "pread",
                        path: self.path.clone(),
                        offset: Some(offset + done as u64),
                        source: e,
                    })
                }
            }
        }
        Ok(done)
    }

    /// Reads a block, or fewer bytes when the file ends inside it.
    pub(crate) fn read_block(&self, block: Block) -> Result<Vec<u8>, IoError> {
        let want = block.len.min(self.len.saturating_sub(block.offset));
        let mut buf = vec![0u8; usize::try_from(want).unwrap_or(0)];
        let n = self.read_at(block.offset, &mut buf)?;
        buf.truncate(n);
        Ok(buf)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_exact_and_short_at_eof() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        std::fs::write(&p, b"hello world").unwrap();
        let r = PosReader::open(&p).unwrap();
        assert_eq!(r.len(), 11);
        let mut b = [0u8; 5];
        assert_eq!(r.read_at(6, &mut b).unwrap(), 5);
        assert_eq!(&b, b"world");
        assert_eq!(
            r.read_block(Block {
                offset: 8,
                len: 100
            })
            .unwrap(),
            b"rld"
        );
        assert!(r
            .read_block(Block {
                offset: 100,
                len: 4
            })
            .unwrap()
            .is_empty());
    }

    #[test]
    fn refuses_a_symlink() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        std::fs::write(&p, b"x").unwrap();
        let l = dir.path().join("l");
        std::os::unix::fs::symlink(&p, &l).unwrap();
        let e = PosReader::open(&l).unwrap_err();
        assert_eq!(e.op, "open");
        assert!(e.to_string().contains("/l"), "{e}");
    }
}
