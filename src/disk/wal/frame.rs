//! The record framing of a segment: the little-endian length word (record
//! length and padding), the 10 MiB limit, and the sector arithmetic of a torn
//! write; [`Scanner`] streams frames out of one file in large `pread` windows.

use std::io;

use super::{CorruptKind, TornReason};
use crate::disk::reader::{IoError, PosReader};

/// Records this long or longer are refused (etcd 3.4/3.5 `maxWALEntrySizeLimit`,
/// compared with the record length plus padding).
pub const MAX_RECORD_BYTES: u64 = 10 * 1024 * 1024;
/// Width of the little-endian length word that opens each frame.
pub(super) const LEN_WORD_BYTES: u64 = 8;
/// The torn-write granularity etcd assumes (`minSectorSize`).
pub(super) const SECTOR_BYTES: u64 = 512;
/// Bytes read per `pread` while scanning a segment.
pub(super) const WINDOW_BYTES: usize = 256 * 1024;
/// Mask of the record length in a length word (the low 56 bits).
pub(super) const LEN_MASK: u64 = (1 << 56) - 1;

/// One step of a segment scan.
pub(super) enum Step<'a> {
    /// End of the records of this file (end of file or a zero length word).
    End,
    /// The file ends inside a frame.
    Torn(TornReason),
    /// A length word no etcd accepts.
    Corrupt(CorruptKind),
    /// A whole frame: the record bytes, and the record plus its padding.
    Frame { record: &'a [u8], padded: &'a [u8] },
}

/// A streaming frame reader over one segment, reading in large windows.
pub(super) struct Scanner<'a> {
    file: &'a PosReader,
    buf: &'a mut Vec<u8>,
    /// File offset of `buf[0]`.
    buf_off: u64,
    /// Valid bytes in `buf`.
    buf_len: usize,
    /// Offset of the next frame: the end of the last frame returned.
    pub(super) pos: u64,
}

impl<'a> Scanner<'a> {
    pub(super) fn new(file: &'a PosReader, buf: &'a mut Vec<u8>) -> Self {
        Scanner {
            file,
            buf,
            buf_off: 0,
            buf_len: 0,
            pos: 0,
        }
    }

    /// Makes `[off, off + n)` available in the buffer (the caller checked that
    /// it lies inside the file and that `n` is bounded) and returns it.
    fn window(&mut self, off: u64, n: usize) -> Result<&[u8], IoError> {
        let buf_end = self.buf_off + self.buf_len as u64;
        let have = off >= self.buf_off && off + n as u64 <= buf_end;
        if !have {
            // The part of [off, off + n) already in the buffer (a frame straddling
            // the window's end) moves to the front instead of being read again:
            // with records near the window size every byte was read twice.
            let keep = if off >= self.buf_off && off < buf_end {
                let from = (off - self.buf_off) as usize;
                self.buf.copy_within(from..self.buf_len, 0);
                self.buf_len - from
            } else {
                0
            };
            let rest = self.file.len().saturating_sub(off);
            let want = usize::try_from(rest)
                .unwrap_or(usize::MAX)
                .min(WINDOW_BYTES.max(n));
            if self.buf.len() < want {
                self.buf.resize(want, 0);
            }
            let got = if want > keep {
                self.file
                    .read_at(off + keep as u64, &mut self.buf[keep..want])?
            } else {
                0
            };
            self.buf_off = off;
            self.buf_len = keep + got;
            if self.buf_len < n {
                return Err(IoError {
                    op: "pread",
                    path: self.file.path().to_path_buf(),
                    offset: Some(off + self.buf_len as u64),
                    source: io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "file shrank while being read",
                    ),
                });
            }
        }
        let start = (off - self.buf_off) as usize;
        Ok(&self.buf[start..start + n])
    }

    pub(super) fn next_frame(&mut self) -> Result<Step<'_>, IoError> {
        let file_len = self.file.len();
        let off = self.pos;
        let left = file_len.saturating_sub(off);
        if left == 0 {
            return Ok(Step::End);
        }
        if left < LEN_WORD_BYTES {
            return Ok(Step::Torn(TornReason::PartialLengthWord { have: left }));
        }
        let word = self.window(off, LEN_WORD_BYTES as usize)?;
        let mut le = [0u8; 8];
        le.copy_from_slice(word);
        let word = u64::from_le_bytes(le);
        if word == 0 {
            return Ok(Step::End);
        }
        let len = word & LEN_MASK;
        let pad = if word >> 63 == 1 { (word >> 56) & 7 } else { 0 };
        if len + pad >= MAX_RECORD_BYTES {
            return Ok(Step::Corrupt(CorruptKind::RecordTooLarge {
                len,
                pad,
                limit: MAX_RECORD_BYTES,
            }));
        }
        let record_end = off + LEN_WORD_BYTES + len + pad;
        if record_end > file_len {
            return Ok(Step::Torn(TornReason::PastEndOfFile {
                record_end,
                file_len,
            }));
        }
        self.pos = record_end;
        let padded = self.window(off + LEN_WORD_BYTES, (len + pad) as usize)?;
        Ok(Step::Frame {
            record: &padded[..len as usize],
            padded,
        })
    }
}

/// Returns the file offset of the first all-zero sector chunk of a frame's bytes
/// (record plus padding) starting at file offset `start`, as etcd's
/// `isTornEntry` splits them.
pub(super) fn zero_sector(start: u64, data: &[u8]) -> Option<u64> {
    let mut off = start;
    let mut rest = data;
    while !rest.is_empty() {
        let chunk_len = usize::try_from(SECTOR_BYTES - off % SECTOR_BYTES)
            .unwrap_or(usize::MAX)
            .min(rest.len());
        let (chunk, tail) = rest.split_at(chunk_len);
        if chunk.iter().all(|&b| b == 0) {
            return Some(off);
        }
        off += chunk_len as u64;
        rest = tail;
    }
    None
}
