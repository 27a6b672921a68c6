//! The write-ahead log reader: lists `member/wal/*.wal` segments and reads every
//! record with etcd's chained CRC-32C, to learn the member's identity (metadata
//! records), its raft state (last HardState, last entry), the snapshots the log
//! refers to and the membership changes it carries.
//!
//! It mirrors etcd's own decoder (`server/storage/wal/decoder.go` and
//! `ReadAll`/`Repair` in 3.4–3.6) so that what it calls a torn tail is exactly
//! what etcd would repair on start (copy to `.broken`, truncate), and what it calls
//! corruption is what etcd would refuse:
//!
//! * A length word of 0, or the end of a file, ends that file (preallocated space).
//! * In the **last** segment only, a record that runs past the end of the file, a
//!   file that ends inside a length word, or a record that fails to decode or fails
//!   its CRC while one of its 512-byte sectors (aligned from the file offset) is
//!   all zeros is a torn write: reported in [`Wal::torn_tail`], not an error, and
//!   reading stops there. The same in an earlier segment is corruption.
//! * A record of 10 MiB or more is corruption (3.4/3.5 refuse it before reading).
//! * A crc record is checked only when the running checksum is non-zero (etcd's
//!   rule, which lets the first surviving segment after a purge start the chain).
//! * A zero-length (or all-zero) last segment after other segments is reported as
//!   a torn tail ([`TornReason::EmptySegment`]): etcd reads it as end of log and
//!   starts. A lone empty segment has no metadata: [`CorruptKind::MissingMetadata`].
//!
//! Segments are read with large `pread` windows and entry payloads are never kept,
//! so reading a gigabyte of log costs about what `cat` does plus the CRC.

use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::disk::dir::{self, lstat, parse_hex_pair};
use crate::disk::ids::{ClusterId, MemberId};
use crate::disk::pb::PbError;
use crate::disk::raftpb::{ConfChangeRec, DecodeError, HardState, Message};
use crate::disk::reader::{IoError, PosReader};
use crate::disk::v2req::V2Log;

mod frame;
mod record;
mod segment;

pub use frame::MAX_RECORD_BYTES;
pub use record::WalSnapshotRef;

use frame::{Scanner, Step};
use record::{Fail, State};
use segment::{scan_segment, Independent, SegEnd};

/// One `*.wal` file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct WalSegment {
    /// Where it was read: the WAL dir joined with the name as listed.
    pub path: PathBuf,
    /// `%016x-%016x.wal` (any other `*.wal` name is a [`WalError::BadName`]).
    pub name: String,
    /// Sequence number from the name.
    pub seq: u64,
    /// Raft index from the name: the first entry the segment may hold.
    pub first_index: u64,
    /// File size (preallocated segments are 64,000,000 bytes).
    pub size: u64,
}

/// Why the end of the last segment counts as a torn write.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TornReason {
    /// The file ends inside a frame's 8-byte length word.
    #[error("the file ends {have} bytes into a length word")]
    PartialLengthWord {
        /// Bytes of the length word present.
        have: u64,
    },
    /// The record runs past the end of the file.
    #[error("record ends at byte {record_end}, past the end of the file ({file_len} bytes)")]
    PastEndOfFile {
        /// Where the frame (with padding) would end.
        record_end: u64,
        /// The file's size.
        file_len: u64,
    },
    /// The record is bad and one of its sectors is all zeros.
    #[error("zeroed sector at byte {sector_offset}: {cause}")]
    ZeroSector {
        /// File offset of the start of the zeroed part.
        sector_offset: u64,
        /// What was wrong with the record.
        #[source]
        cause: Box<CorruptKind>,
    },
    /// The last segment holds no record at all (zero-length or all zeros).
    #[error("the last segment holds no records")]
    EmptySegment,
}

/// A torn write at the end of the last segment: etcd would copy the file to
/// `.broken` and truncate it at `offset`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TornTail {
    /// The last segment: etcd repairs only a tear in it, one in an earlier
    /// segment is corruption.
    pub path: PathBuf,
    /// Start of the torn frame = end of the last verified record.
    pub offset: u64,
    /// Why the tail counts as torn, in a sentence for the report.
    pub detail: String,
    /// The same reason as a value, for the code that decides on it.
    #[serde(skip)]
    pub reason: TornReason,
}

/// Everything read from a WAL directory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Wal {
    /// Segments, by sequence number.
    pub segments: Vec<WalSegment>,
    /// Member ID from the metadata records.
    pub member_id: MemberId,
    /// Cluster ID from the metadata records.
    pub cluster_id: ClusterId,
    /// The last HardState record (all zeros when there is none).
    pub hard_state: HardState,
    /// Index of the last entry read (0 when there is none).
    pub last_index: u64,
    /// Term of the last entry read.
    pub last_term: u64,
    /// Every snapshot record, in log order.
    pub snapshots: Vec<WalSnapshotRef>,
    /// Membership change entries still in the log (overwritten ones dropped).
    pub conf_changes: Vec<ConfChangeRec>,
    /// Number of verified records, crc records included.
    pub records: u64,
    /// A torn write at the end of the last segment, if any.
    pub torn_tail: Option<TornTail>,
    /// Segment index and byte offset of the end of the last verified record.
    pub valid_end: (usize, u64),
    /// The v2 requests still in the log (the newest of each kind).
    pub v2: V2Log,
}

/// What is wrong with a corrupt record or log.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CorruptKind {
    /// The record's CRC does not match the running checksum.
    #[error("crc mismatch: computed {expected:#010x}, record says {found:#010x}")]
    CrcMismatch {
        /// The running CRC-32C after this record's data.
        expected: u32,
        /// The CRC stored in the record.
        found: u32,
    },
    /// A crc record does not continue the chain of the previous segment.
    #[error("crc record {found:#010x} does not continue the chain at {expected:#010x}")]
    CrcChainBroken {
        /// The running CRC-32C before the crc record.
        expected: u32,
        /// The value in the crc record.
        found: u32,
    },
    /// A record type etcd does not define.
    #[error("unknown record type {found}")]
    BadRecordType {
        /// The type found.
        found: i64,
    },
    /// A length word announcing a record of 10 MiB or more.
    #[error("record length {len} plus {pad} padding reaches the {limit}-byte limit")]
    RecordTooLarge {
        /// Record length from the length word.
        len: u64,
        /// Padding from the length word.
        pad: u64,
        /// The limit ([`MAX_RECORD_BYTES`]).
        limit: u64,
    },
    /// A protobuf message that does not decode.
    #[error("undecodable {what}: {source}")]
    Undecodable {
        /// Which message (`record`, `entry`, `hardstate`, ...).
        what: Message,
        /// The decoder's error.
        #[source]
        source: PbError,
    },
    /// A known protobuf field with the wrong wire type.
    #[error("{what} field {field} has the wrong wire type")]
    WrongWireType {
        /// The message being decoded.
        what: Message,
        /// The protobuf field number that came with an unexpected wire type.
        field: u32,
    },
    /// A metadata record that differs from the first one.
    #[error("metadata record differs from the first one")]
    MetadataMismatch,
    /// No metadata record anywhere in the log.
    #[error("no metadata record in the log")]
    MissingMetadata,
    /// A torn-looking record in a segment that is not the last one: etcd repairs
    /// only the last segment, so this is corruption.
    #[error("torn record before the last segment: {reason}")]
    TornRecord {
        /// What makes it look torn.
        #[source]
        reason: TornReason,
    },
}

/// A failure to list or read a WAL directory.
#[derive(Debug, thiserror::Error)]
pub enum WalError {
    /// Listing the directory or reading a file failed (see
    /// [`IoError::is_permission`] for unreadable files).
    #[error(transparent)]
    Io(#[from] IoError),
    /// The directory holds no `*.wal` file.
    #[error("no WAL segments in {dir}")]
    NoSegments {
        /// The WAL directory.
        dir: PathBuf,
    },
    /// A `*.wal` entry whose name is not `%016x-%016x.wal`.
    #[error("bad WAL segment name {path}")]
    BadName {
        /// The entry.
        path: PathBuf,
    },
    /// A `*.wal` entry that is a symbolic link (never followed).
    #[error("WAL segment {path} is a symbolic link")]
    Symlink {
        /// The entry.
        path: PathBuf,
    },
    /// A `*.wal` entry that is a directory, socket, device, ...
    #[error("WAL segment {path} is not a regular file")]
    NotRegularFile {
        /// The entry.
        path: PathBuf,
    },
    /// Sequence numbers are not contiguous (a missing or duplicate segment).
    #[error("WAL sequence gap at {path}: expected sequence {expected}, found {found}")]
    SeqGap {
        /// The segment where the gap shows.
        path: PathBuf,
        /// The sequence number that should be there.
        expected: u64,
        /// The one found.
        found: u64,
    },
    /// The log is corrupt at this place; etcd would refuse to start.
    #[error("corrupt WAL {path} at byte {offset}: {kind}")]
    Corrupt {
        /// The segment.
        path: PathBuf,
        /// Start of the offending frame (0 for log-wide problems).
        offset: u64,
        /// What is wrong.
        #[source]
        kind: CorruptKind,
    },
}

impl From<DecodeError> for CorruptKind {
    fn from(e: DecodeError) -> Self {
        match e {
            DecodeError::Undecodable { what, source } => CorruptKind::Undecodable { what, source },
            DecodeError::WrongWireType { what, field } => {
                CorruptKind::WrongWireType { what, field }
            }
        }
    }
}

impl WalError {
    /// True when the cause is a permission problem: the directory is unreadable,
    /// not corrupt.
    pub(crate) fn is_permission(&self) -> bool {
        matches!(self, WalError::Io(e) if e.is_permission())
    }

    /// The file and byte offset the error points at, when it points at one.
    pub fn location(&self) -> (Option<PathBuf>, Option<u64>) {
        match self {
            WalError::Io(e) => (Some(e.path.clone()), e.offset),
            WalError::NoSegments { dir } => (Some(dir.clone()), None),
            WalError::BadName { path }
            | WalError::Symlink { path }
            | WalError::NotRegularFile { path }
            | WalError::SeqGap { path, .. } => (Some(path.clone()), None),
            WalError::Corrupt { path, offset, .. } => (Some(path.clone()), Some(*offset)),
        }
    }
}

/// Builds a segment file name, `%016x-%016x.wal`.
pub fn segment_name(seq: u64, index: u64) -> String {
    format!("{seq:016x}-{index:016x}.wal")
}

/// Parses a segment file name into (sequence, first index). Only the exact form
/// etcd writes (16 lowercase hex digits each) is accepted.
pub fn parse_segment_name(name: &str) -> Option<(u64, u64)> {
    parse_hex_pair(name.strip_suffix(".wal")?)
}

/// Lists the `*.wal` files of `wal_dir`, sorted by sequence number, and checks
/// that the sequence numbers are contiguous. Other entries (`0.tmp`, `*.broken`,
/// ...) are ignored. An empty result is not an error here; [`read_wal`] makes it
/// one.
pub fn list_segments(wal_dir: &Path) -> Result<Vec<WalSegment>, WalError> {
    let mut segments = Vec::new();
    for dir::DirEntry { name, path, .. } in dir::list(wal_dir)? {
        if !name.ends_with(".wal") {
            continue;
        }
        let meta = lstat(&path)?;
        if meta.file_type().is_symlink() {
            return Err(WalError::Symlink { path });
        }
        if !meta.is_file() {
            return Err(WalError::NotRegularFile { path });
        }
        let Some((seq, first_index)) = parse_segment_name(&name) else {
            return Err(WalError::BadName { path });
        };
        segments.push(WalSegment {
            path,
            name,
            seq,
            first_index,
            size: meta.len(),
        });
    }
    segments.sort_by_key(|s| s.seq);
    for pair in segments.windows(2) {
        let expected = pair[0].seq.saturating_add(1);
        if pair[1].seq != expected {
            return Err(WalError::SeqGap {
                path: pair[1].path.clone(),
                expected,
                found: pair[1].seq,
            });
        }
    }
    Ok(segments)
}

/// The member and cluster ID of the WAL in `wal_dir`, from the metadata
/// record that opens its first segment: a few hundred bytes, verified by their
/// CRC, read ahead of [`read_wal`] so that a decision waiting on the network
/// knows which cluster's answer may end its wait. `None` when the directory has
/// no segment or its first records do not yield the IDs ([`read_wal`] says why).
pub fn wal_identity(wal_dir: &Path) -> Option<(MemberId, ClusterId)> {
    /// The metadata record is the second of a segment; a few more are allowed.
    const FIRST_RECORDS: usize = 4;
    let segments = list_segments(wal_dir).ok()?;
    let first = segments.first()?;
    let file = PosReader::open(&first.path).ok()?;
    let mut buf = Vec::new();
    let mut scan = Scanner::new(&file, &mut buf);
    let mut st = State::default();
    for _ in 0..FIRST_RECORDS {
        let offset = scan.pos;
        match scan.next_frame().ok()? {
            Step::Frame { record, padded } => st.apply(record, padded, offset).ok()?,
            _ => return None,
        }
        if st.ids.is_some() {
            return st.ids;
        }
    }
    None
}

/// How far the WAL's last segment reaches on disk — its last entry's index
/// (or snapshot record's, or the index before the one a fresh segment is named
/// for) and that entry's term — read from that segment alone: it opens with a crc record carrying the running
/// checksum, so its records verify without the segments before. `(0, 0)` when
/// it holds no entry. A frame that fails ends the scan (what is before it
/// counts). What the sidecar checks a reported position against when the
/// member has nothing more to commit (`evidence::mark::DurableTracker`): one
/// segment (at most 64 MB, most of it preallocated zeros), read only then.
pub fn last_segment_end(wal_dir: &Path) -> Result<(u64, u64), WalError> {
    let segments = list_segments(wal_dir)?;
    let Some(last) = segments.last() else {
        return Err(WalError::NoSegments {
            dir: wal_dir.to_path_buf(),
        });
    };
    let mut st = State {
        independent: true,
        ..State::default()
    };
    let mut buf = Vec::new();
    scan_segment(last, &mut st, &mut buf)?;
    // A segment cut and not written yet holds no entry: the log reaches the
    // index before the one it is named for.
    let before = last.first_index.saturating_sub(1);
    let snap = st.snapshots.iter().map(|s| s.index).max().unwrap_or(0);
    let index = st.last_index.max(before).max(snap);
    Ok((index, st.last_term))
}

/// Reads every segment of `wal_dir` in order, verifying the CRC chain. See the
/// module documentation for what is a torn tail and what is corruption.
pub fn read_wal(wal_dir: &Path) -> Result<Wal, WalError> {
    read_wal_with(wal_dir, 0)
}

/// Reads the WAL with up to `threads` threads (0: one per core, as the
/// process's CPU quota allows): segments are verified independently — each
/// opens with a crc record carrying the running checksum — and merged in order,
/// with the crc chain, the metadata and raft's log truncation checked across
/// segment boundaries exactly as one sequential pass checks them. The result,
/// errors included, is the sequential pass's.
#[tracing::instrument(level = "debug", skip_all, fields(wal_dir = %wal_dir.display(), threads))]
pub(crate) fn read_wal_with(wal_dir: &Path, threads: usize) -> Result<Wal, WalError> {
    let segments = list_segments(wal_dir)?;
    if segments.is_empty() {
        return Err(WalError::NoSegments {
            dir: wal_dir.to_path_buf(),
        });
    }
    let threads = match threads {
        0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
        n => n,
    }
    .min(segments.len());
    // Every segment scanned ahead on worker threads: the first from the start
    // of the log (what the sequential pass does), the others independently.
    let mut ahead: Vec<Option<Result<Independent, IoError>>> =
        (0..segments.len()).map(|_| None).collect();
    if threads > 1 {
        let next = std::sync::atomic::AtomicUsize::new(0);
        let done = std::sync::Mutex::new(&mut ahead);
        std::thread::scope(|scope| {
            for _ in 0..threads {
                scope.spawn(|| {
                    let mut buf = Vec::new();
                    loop {
                        let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let Some(seg) = segments.get(i) else { break };
                        let mut st = State {
                            independent: i > 0,
                            ..State::default()
                        };
                        let res =
                            scan_segment(seg, &mut st, &mut buf).map(|end| Independent { st, end });
                        if let Ok(mut slots) = done.lock() {
                            slots[i] = Some(res);
                        }
                    }
                });
            }
        });
    }

    let mut st = State::default();
    let mut buf = Vec::new();
    let mut torn_tail = None;
    let mut valid_end = (0, 0);
    let count = segments.len();
    for (i, seg) in segments.iter().enumerate() {
        let is_last = i + 1 == count;
        let records_before = st.records;
        let end = match ahead[i].take() {
            // The first segment, scanned from the log's start on a worker.
            Some(Ok(ind)) if i == 0 => {
                st = ind.st;
                ind.end
            }
            Some(Ok(ind)) if !ind.st.fell_back => match st.merge(ind.st, ind.end) {
                Ok(end) => end,
                Err(fail_at) => fail_at,
            },
            Some(Err(e)) => return Err(e.into()),
            // A segment that does not open with a crc record, or no threads:
            // the sequential pass.
            _ => scan_segment(seg, &mut st, &mut buf)?,
        };
        valid_end = (i, end.valid_offset());
        // The rule across segments: a torn-looking frame is a torn tail in the
        // last segment only, corruption anywhere before it.
        match end.failure {
            Some((offset, Fail::Torn(reason))) if is_last => {
                torn_tail = Some(TornTail {
                    path: seg.path.clone(),
                    offset,
                    detail: reason.to_string(),
                    reason,
                });
            }
            Some((offset, Fail::Torn(reason))) => {
                return Err(WalError::Corrupt {
                    path: seg.path.clone(),
                    offset,
                    kind: CorruptKind::TornRecord { reason },
                })
            }
            Some((offset, Fail::Corrupt(kind))) => {
                return Err(WalError::Corrupt {
                    path: seg.path.clone(),
                    offset,
                    kind,
                })
            }
            None if is_last && count > 1 && st.records == records_before => {
                torn_tail = Some(TornTail {
                    path: seg.path.clone(),
                    offset: 0,
                    detail: TornReason::EmptySegment.to_string(),
                    reason: TornReason::EmptySegment,
                });
            }
            None => {}
        }
    }
    let Some((member_id, cluster_id)) = st.ids else {
        return Err(WalError::Corrupt {
            path: segments[0].path.clone(),
            offset: 0,
            kind: CorruptKind::MissingMetadata,
        });
    };
    Ok(Wal {
        segments,
        member_id,
        cluster_id,
        hard_state: st.hard_state,
        last_index: st.last_index,
        last_term: st.last_term,
        snapshots: st.snapshots,
        conf_changes: st.conf_changes,
        records: st.records,
        torn_tail,
        valid_end,
        v2: st.v2,
    })
}

impl State {
    /// Folds the independent scan of the next segment into this state, checking
    /// what crosses the boundary as the sequential pass would: the crc chain at
    /// its opening crc record, its metadata against the log's, and raft's
    /// truncation of earlier entries. A boundary check that fails ends the log
    /// there, as its record would have.
    fn merge(&mut self, seg: State, end: SegEnd) -> Result<SegEnd, SegEnd> {
        let stop = |offset: u64, kind: CorruptKind| SegEnd {
            failure: Some((offset, Fail::Corrupt(kind))),
            pos: offset,
        };
        if let Some((offset, found)) = seg.opening_crc {
            if self.crc != 0 && self.crc != found {
                return Err(stop(
                    offset,
                    CorruptKind::CrcChainBroken {
                        expected: self.crc,
                        found,
                    },
                ));
            }
        }
        if let (Some(first), Some(theirs), Some(at)) =
            (&self.metadata, &seg.metadata, seg.first_metadata_at)
        {
            let fails_before = end.failure.as_ref().is_none_or(|(o, _)| at <= *o);
            if first != theirs && fails_before {
                return Err(stop(at, CorruptKind::MetadataMismatch));
            }
        }
        if self.metadata.is_none() {
            self.metadata = seg.metadata;
            self.ids = seg.ids;
        }
        if seg.records > 0 {
            self.crc = seg.crc;
        }
        self.records += seg.records;
        if seg.hard_state_seen {
            self.hard_state = seg.hard_state;
            self.hard_state_seen = true;
        }
        if let Some(min) = seg.min_entry_index {
            while self.conf_changes.last().is_some_and(|c| c.index >= min) {
                self.conf_changes.pop();
            }
            self.v2.truncate_from(min);
            self.last_index = seg.last_index;
            self.last_term = seg.last_term;
            self.min_entry_index = Some(self.min_entry_index.map_or(min, |m| m.min(min)));
        }
        self.snapshots.extend(seg.snapshots);
        self.conf_changes.extend(seg.conf_changes);
        self.v2.append(seg.v2);
        Ok(end)
    }
}

#[cfg(test)]
mod tests {
    use super::frame::*;
    use super::record::*;
    use super::*;
    use crate::disk::raftpb::tests::{conf_state, put_bytes, put_u64};
    use crate::disk::raftpb::ConfChangeKind;
    use proptest::prelude::*;

    fn metadata(node: u64, cluster: u64) -> Vec<u8> {
        let mut out = Vec::new();
        put_u64(&mut out, 1, node);
        put_u64(&mut out, 2, cluster);
        out
    }

    fn entry(etype: u64, term: u64, index: u64, data: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        put_u64(&mut out, 1, etype);
        put_u64(&mut out, 2, term);
        put_u64(&mut out, 3, index);
        put_bytes(&mut out, 4, data);
        out
    }

    fn hard_state(term: u64, vote: u64, commit: u64) -> Vec<u8> {
        let mut out = Vec::new();
        put_u64(&mut out, 1, term);
        put_u64(&mut out, 2, vote);
        put_u64(&mut out, 3, commit);
        out
    }

    fn snapshot(index: u64, term: u64, cs: Option<Vec<u8>>) -> Vec<u8> {
        let mut out = Vec::new();
        put_u64(&mut out, 1, index);
        put_u64(&mut out, 2, term);
        if let Some(cs) = cs {
            put_bytes(&mut out, 3, &cs);
        }
        out
    }

    fn conf_change(kind: u64, node: u64, ctx: &str) -> Vec<u8> {
        let mut out = Vec::new();
        put_u64(&mut out, 1, 7);
        put_u64(&mut out, 2, kind);
        put_u64(&mut out, 3, node);
        if !ctx.is_empty() {
            put_bytes(&mut out, 4, ctx.as_bytes());
        }
        out
    }

    /// A WAL writer for tests: frames with padding and the chained CRC, the way
    /// etcd's encoder writes them.
    #[derive(Clone)]
    struct Enc {
        crc: u32,
        segs: Vec<Vec<u8>>,
        /// Frame offsets of every record: (segment, offset).
        offsets: Vec<(usize, u64)>,
    }

    impl Enc {
        fn new() -> Self {
            let mut e = Enc {
                crc: 0,
                segs: vec![Vec::new()],
                offsets: Vec::new(),
            };
            e.crc_rec();
            e
        }

        fn frame(&mut self, rtype: i64, crc: u32, data: &[u8]) {
            let mut rec = Vec::new();
            put_u64(&mut rec, 1, rtype as u64);
            put_u64(&mut rec, 2, u64::from(crc));
            put_bytes(&mut rec, 3, data);
            let pad = (8 - rec.len() % 8) % 8;
            let mut word = rec.len() as u64;
            if pad > 0 {
                word |= (0x80 | pad as u64) << 56;
            }
            let seg = self.segs.len() - 1;
            let out = &mut self.segs[seg];
            self.offsets.push((seg, out.len() as u64));
            out.extend_from_slice(&word.to_le_bytes());
            out.extend_from_slice(&rec);
            out.extend(std::iter::repeat_n(0u8, pad));
        }

        fn rec(&mut self, rtype: i64, data: &[u8]) -> &mut Self {
            self.crc = crc32c::crc32c_append(self.crc, data);
            self.frame(rtype, self.crc, data);
            self
        }

        fn crc_rec(&mut self) {
            self.frame(CRC_TYPE, self.crc, &[]);
        }

        fn cut(&mut self) -> &mut Self {
            self.segs.push(Vec::new());
            self.crc_rec();
            self
        }

        fn write(&self, dir: &Path, prealloc_last: usize) -> Vec<PathBuf> {
            write_segs(dir, &self.segs, prealloc_last)
        }
    }

    /// Writes segments as `%016x-%016x.wal` files, zero-filling the last one to
    /// `prealloc_last` bytes the way etcd preallocates.
    fn write_segs(dir: &Path, segs: &[Vec<u8>], prealloc_last: usize) -> Vec<PathBuf> {
        let mut paths = Vec::new();
        for (i, seg) in segs.iter().enumerate() {
            let p = dir.join(segment_name(i as u64, i as u64 * 100));
            let mut bytes = seg.clone();
            if i + 1 == segs.len() && bytes.len() < prealloc_last {
                bytes.resize(prealloc_last, 0);
            }
            std::fs::write(&p, bytes).unwrap();
            paths.push(p);
        }
        paths
    }

    const NODE: u64 = 0x8e9e05c52164694d;
    const CLUSTER: u64 = 0xcdf818194e3a8c32;

    fn member_ctx(id: u64, learner: bool) -> String {
        format!(
            r#"{{"id":{id},"peerURLs":["http://m{id}:2380"],"name":"m{id}","clientURLs":null,"isLearner":{learner}}}"#
        )
    }

    /// Four segments: a truncation of the log across the third cut, raw v2
    /// requests before and after it, conf changes and snapshots.
    fn several_segments() -> Enc {
        let v2 = |path: &str| {
            let mut out = vec![0x08, 0x01];
            put_bytes(&mut out, 2, b"PUT");
            put_bytes(&mut out, 3, path.as_bytes());
            out
        };
        let mut e = two_segments();
        e.cut()
            .rec(METADATA_TYPE, &metadata(NODE, CLUSTER))
            .rec(STATE_TYPE, &hard_state(2, NODE, 30));
        for i in 31..=40 {
            e.rec(ENTRY_TYPE, &entry(0, 2, i, &v2("/1/a")));
        }
        e.rec(
            ENTRY_TYPE,
            &entry(1, 2, 41, &conf_change(0, 7, &member_ctx(7, false))),
        );
        e.cut()
            .rec(METADATA_TYPE, &metadata(NODE, CLUSTER))
            // Term 3 overwrites the log from index 35.
            .rec(STATE_TYPE, &hard_state(3, NODE, 34));
        for i in 35..=45 {
            e.rec(ENTRY_TYPE, &entry(0, 3, i, &v2("/0/version")));
        }
        e.rec(
            SNAPSHOT_TYPE,
            &snapshot(40, 3, Some(conf_state(&[NODE], &[]))),
        )
        .rec(STATE_TYPE, &hard_state(3, NODE, 45));
        e
    }

    #[test]
    fn a_truncation_across_a_cut_drops_what_it_overwrote_in_parallel_too() {
        let e = several_segments();
        let dir = tempfile::tempdir().unwrap();
        write_segs(dir.path(), &e.segs, 0);
        let seq = read_wal_with(dir.path(), 1).unwrap();
        let par = read_wal_with(dir.path(), 4).unwrap();
        assert_eq!(seq, par);
        assert_eq!((par.last_index, par.last_term), (45, 3));
        assert!(
            par.conf_changes.iter().all(|c| c.index < 35),
            "{:?}",
            par.conf_changes
        );
        assert_eq!(par.v2.disallowed.len(), 4, "31..=34 survive the truncation");
        assert_eq!(par.v2.converted.len(), 11);
        assert_eq!(par.hard_state.commit, 45);
    }

    /// Two segments like etcd writes them: a created file and a cut one.
    fn two_segments() -> Enc {
        let mut e = Enc::new();
        e.rec(METADATA_TYPE, &metadata(NODE, CLUSTER))
            .rec(SNAPSHOT_TYPE, &snapshot(0, 0, None))
            .rec(
                ENTRY_TYPE,
                &entry(1, 1, 1, &conf_change(0, NODE, &member_ctx(NODE, false))),
            )
            .rec(STATE_TYPE, &hard_state(1, NODE, 1));
        for i in 2..=20 {
            e.rec(ENTRY_TYPE, &entry(0, 2, i, format!("put k{i}").as_bytes()));
        }
        e.rec(STATE_TYPE, &hard_state(2, NODE, 20))
            .rec(
                SNAPSHOT_TYPE,
                &snapshot(10, 2, Some(conf_state(&[NODE], &[5]))),
            )
            .cut()
            .rec(METADATA_TYPE, &metadata(NODE, CLUSTER))
            .rec(STATE_TYPE, &hard_state(2, NODE, 20))
            .rec(
                ENTRY_TYPE,
                &entry(1, 2, 21, &conf_change(3, 5, &member_ctx(5, true))),
            );
        for i in 22..=30 {
            e.rec(ENTRY_TYPE, &entry(0, 2, i, &[0xab; 40]));
        }
        e.rec(STATE_TYPE, &hard_state(2, NODE, 30));
        e
    }

    fn corrupt_kind(e: WalError) -> (PathBuf, u64, CorruptKind) {
        match e {
            WalError::Corrupt { path, offset, kind } => (path, offset, kind),
            other => panic!("expected Corrupt, got {other:?}"),
        }
    }

    #[test]
    fn names_round_trip() {
        for (s, i) in [(0, 0), (1, 0x136), (u64::MAX, u64::MAX)] {
            let n = segment_name(s, i);
            assert_eq!(n.len(), 37);
            assert_eq!(parse_segment_name(&n), Some((s, i)));
        }
        assert_eq!(
            segment_name(1, 0x136),
            "0000000000000001-0000000000000136.wal"
        );
        for bad in [
            "0.tmp",
            "0-0.wal",
            "0000000000000001-0000000000000136.wal.broken",
            "0000000000000001-000000000000013G.wal",
            "0000000000000001-000000000000013A.wal",
            "0000000000000001_0000000000000136.wal",
            "+000000000000001-0000000000000136.wal",
        ] {
            assert_eq!(parse_segment_name(bad), None, "{bad}");
        }
    }

    #[test]
    fn reads_a_multi_segment_log() {
        let dir = tempfile::tempdir().unwrap();
        let e = two_segments();
        e.write(dir.path(), 64 * 1024);
        std::fs::write(dir.path().join("0.tmp"), vec![0u8; 4096]).unwrap();
        let wal = read_wal(dir.path()).unwrap();
        assert_eq!(wal.segments.len(), 2);
        assert_eq!(wal.segments[1].seq, 1);
        assert_eq!(wal.segments[1].first_index, 100);
        assert_eq!(wal.segments[1].size, 64 * 1024);
        assert_eq!(
            (wal.member_id, wal.cluster_id),
            (MemberId::new(NODE), ClusterId::new(CLUSTER))
        );
        assert_eq!(
            wal.hard_state,
            HardState {
                term: 2,
                vote: MemberId::new(NODE),
                commit: 30
            }
        );
        assert_eq!((wal.last_index, wal.last_term), (30, 2));
        assert_eq!(wal.records, e.offsets.len() as u64);
        assert_eq!(wal.torn_tail, None);
        assert_eq!(wal.valid_end, (1, e.segs[1].len() as u64));
        assert_eq!(wal.snapshots.len(), 2);
        assert!(!wal.snapshots[0].has_conf_state);
        assert_eq!(
            wal.snapshots[1],
            WalSnapshotRef {
                index: 10,
                term: 2,
                voters: vec![MemberId::new(NODE)],
                learners: vec![MemberId::new(5)],
                has_conf_state: true
            }
        );
        assert_eq!(wal.conf_changes.len(), 2);
        let first = &wal.conf_changes[0];
        assert_eq!((first.index, first.term), (1, 1));
        assert_eq!(first.kind, ConfChangeKind::AddNode);
        assert_eq!(first.node_id, MemberId::new(NODE));
        let m = &first.member.as_ref().unwrap().member;
        assert_eq!(m.id, MemberId::new(NODE));
        assert_eq!(m.peer_urls, vec![format!("http://m{NODE}:2380")]);
        assert!(m.client_urls.is_empty());
        assert!(!m.is_learner);
        let second = &wal.conf_changes[1];
        assert_eq!(second.kind, ConfChangeKind::AddLearnerNode);
        assert!(second.member.as_ref().unwrap().member.is_learner);
        let json = serde_json::to_value(wal.hard_state).unwrap();
        assert_eq!(json["vote"], "8e9e05c52164694d");
    }

    #[test]
    fn first_segment_after_a_purge_starts_with_a_nonzero_crc() {
        let dir = tempfile::tempdir().unwrap();
        let mut e = two_segments();
        e.segs.remove(0);
        e.write(dir.path(), 0);
        let wal = read_wal(dir.path()).unwrap();
        assert_eq!(wal.last_index, 30);
        assert_eq!(wal.member_id, MemberId::new(NODE));
    }

    #[test]
    fn broken_crc_chain_between_segments_is_corrupt() {
        let dir = tempfile::tempdir().unwrap();
        let mut e = two_segments();
        // Drop the last record of segment 0: segment 1's crc record no longer
        // continues the chain.
        let (_, off) = e.offsets[e.offsets.iter().rposition(|o| o.0 == 0).unwrap()];
        e.segs[0].truncate(off as usize);
        let paths = e.write(dir.path(), 0);
        let (path, offset, kind) = corrupt_kind(read_wal(dir.path()).unwrap_err());
        assert_eq!((path, offset), (paths[1].clone(), 0));
        assert!(matches!(kind, CorruptKind::CrcChainBroken { .. }), "{kind}");
    }

    #[test]
    fn a_flipped_byte_in_an_early_record_is_corrupt_at_that_record() {
        let dir = tempfile::tempdir().unwrap();
        let e = two_segments();
        let (seg, off) = e.offsets[6];
        let mut segs = e.segs.clone();
        // The last data byte of the record, before padding.
        let word = u64::from_le_bytes(segs[seg][off as usize..][..8].try_into().unwrap());
        let at = off as usize + 8 + (word & LEN_MASK) as usize - 1;
        segs[seg][at] ^= 0x01;
        let paths = write_segs(dir.path(), &segs, 0);
        let (path, offset, kind) = corrupt_kind(read_wal(dir.path()).unwrap_err());
        assert_eq!((path, offset), (paths[seg].clone(), off));
        assert!(matches!(kind, CorruptKind::CrcMismatch { .. }), "{kind}");

        // The same in the last (only) segment is still corruption: no zero sector.
        let dir = tempfile::tempdir().unwrap();
        let paths = write_segs(dir.path(), &segs[..1], 1 << 16);
        let (path, offset, _) = corrupt_kind(read_wal(dir.path()).unwrap_err());
        assert_eq!((path, offset), (paths[0].clone(), off));
    }

    /// A log whose last segment holds big entries, so records span sectors.
    fn big_last_segment() -> Enc {
        let mut e = two_segments();
        for i in 31..=40 {
            e.rec(ENTRY_TYPE, &entry(0, 3, i, &[0x5a; 1500]));
        }
        e
    }

    #[test]
    fn a_zeroed_tail_is_a_torn_tail_and_keeps_the_records_before_it() {
        let e = big_last_segment();
        let last = e.segs.len() - 1;
        // Zero from the first sector boundary inside the 35th entry to the end.
        let idx = e.offsets.len() - 6; // entry 35
        let (seg, off) = e.offsets[idx];
        assert_eq!(seg, last);
        let zero_from = (off / 512 + 1) * 512;
        let mut segs = e.segs.clone();
        for b in &mut segs[last][zero_from as usize..] {
            *b = 0;
        }
        let dir = tempfile::tempdir().unwrap();
        let paths = write_segs(dir.path(), &segs, 1 << 20);
        let wal = read_wal(dir.path()).unwrap();
        let torn = wal.torn_tail.as_ref().expect("torn tail");
        assert_eq!(torn.path, paths[last]);
        assert_eq!(torn.offset, off);
        assert!(
            matches!(torn.reason, TornReason::ZeroSector { .. }),
            "{torn:?}"
        );
        assert_eq!(wal.last_index, 34);
        assert_eq!(wal.records, idx as u64);
        assert_eq!(wal.valid_end, (last, off));
    }

    #[test]
    fn a_zeroed_region_in_an_earlier_segment_is_corrupt() {
        let mut e = big_last_segment();
        let (_, off) = e.offsets[e.offsets.len() - 6];
        let zero_from = ((off / 512 + 1) * 512) as usize;
        for b in &mut e.segs[1][zero_from..] {
            *b = 0;
        }
        e.cut().rec(STATE_TYPE, &hard_state(3, NODE, 40));
        let dir = tempfile::tempdir().unwrap();
        let paths = e.write(dir.path(), 0);
        let (path, offset, kind) = corrupt_kind(read_wal(dir.path()).unwrap_err());
        assert_eq!((path, offset), (paths[1].clone(), off));
        assert!(matches!(kind, CorruptKind::TornRecord { .. }), "{kind}");
    }

    #[test]
    fn a_truncated_last_record_is_a_torn_tail() {
        let e = big_last_segment();
        let last = e.segs.len() - 1;
        let (_, off) = *e.offsets.last().unwrap();
        for cut in [off + 3, off + 8, off + 100] {
            let mut segs = e.segs.clone();
            segs[last].truncate(cut as usize);
            let dir = tempfile::tempdir().unwrap();
            write_segs(dir.path(), &segs, 0);
            let wal = read_wal(dir.path()).unwrap();
            let torn = wal.torn_tail.expect("torn tail");
            assert_eq!(torn.offset, off, "cut at {cut}");
            assert_eq!(wal.last_index, 39);
            assert_eq!(wal.valid_end, (last, off));
        }
        // The same truncation in an earlier segment is corruption.
        let mut segs = e.segs.clone();
        segs[last].truncate(off as usize + 100);
        segs.push(Vec::new());
        let dir = tempfile::tempdir().unwrap();
        write_segs(dir.path(), &segs, 0);
        let (_, offset, kind) = corrupt_kind(read_wal(dir.path()).unwrap_err());
        assert_eq!(offset, off);
        assert!(
            matches!(
                kind,
                CorruptKind::TornRecord {
                    reason: TornReason::PastEndOfFile { .. }
                }
            ),
            "{kind}"
        );
    }

    #[test]
    fn a_huge_length_word_is_refused_without_allocating() {
        let e = two_segments();
        let last = e.segs.len() - 1;
        for word in [
            u64::MAX,
            LEN_MASK,
            MAX_RECORD_BYTES,
            0x87 << 56 | (MAX_RECORD_BYTES - 7),
        ] {
            let mut segs = e.segs.clone();
            let at = segs[last].len();
            segs[last].extend_from_slice(&word.to_le_bytes());
            segs[last].extend_from_slice(&[1u8; 64]);
            let dir = tempfile::tempdir().unwrap();
            write_segs(dir.path(), &segs, 0);
            let (_, offset, kind) = corrupt_kind(read_wal(dir.path()).unwrap_err());
            assert_eq!(offset, at as u64);
            assert!(matches!(kind, CorruptKind::RecordTooLarge { .. }), "{kind}");
        }
    }

    #[test]
    fn zero_length_files() {
        // A lone empty segment has no metadata.
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join(segment_name(0, 0));
        std::fs::write(&p, b"").unwrap();
        let (path, offset, kind) = corrupt_kind(read_wal(dir.path()).unwrap_err());
        assert_eq!((path, offset, kind), (p, 0, CorruptKind::MissingMetadata));

        // An empty last segment after a good one: etcd starts; reported as torn.
        let dir = tempfile::tempdir().unwrap();
        let mut e = two_segments();
        e.segs.push(Vec::new());
        let paths = e.write(dir.path(), 0);
        let wal = read_wal(dir.path()).unwrap();
        let torn = wal.torn_tail.expect("torn tail");
        assert_eq!((torn.path, torn.offset), (paths[2].clone(), 0));
        assert_eq!(torn.reason, TornReason::EmptySegment);
        assert_eq!(wal.last_index, 30);
        assert_eq!(wal.valid_end, (2, 0));

        // An all-zero (preallocated) last segment is the same.
        let dir = tempfile::tempdir().unwrap();
        e.write(dir.path(), 4096);
        let wal = read_wal(dir.path()).unwrap();
        assert_eq!(wal.torn_tail.unwrap().reason, TornReason::EmptySegment);
    }

    #[test]
    fn differing_metadata_is_corrupt() {
        let mut e = two_segments();
        e.cut().rec(METADATA_TYPE, &metadata(NODE, CLUSTER + 1));
        let dir = tempfile::tempdir().unwrap();
        let paths = e.write(dir.path(), 0);
        let (path, offset, kind) = corrupt_kind(read_wal(dir.path()).unwrap_err());
        assert_eq!(path, paths[2]);
        assert_eq!(offset, e.offsets.last().unwrap().1);
        assert_eq!(kind, CorruptKind::MetadataMismatch);
    }

    #[test]
    fn an_unknown_record_type_is_corrupt() {
        let mut e = two_segments();
        e.rec(9, b"x");
        let dir = tempfile::tempdir().unwrap();
        e.write(dir.path(), 0);
        let (_, _, kind) = corrupt_kind(read_wal(dir.path()).unwrap_err());
        assert_eq!(kind, CorruptKind::BadRecordType { found: 9 });
    }

    #[test]
    fn sequence_gaps_names_and_symlinks() {
        let e = two_segments();
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(segment_name(0, 0)), &e.segs[0]).unwrap();
        let second = dir.path().join(segment_name(2, 100));
        std::fs::write(&second, &e.segs[1]).unwrap();
        match read_wal(dir.path()).unwrap_err() {
            WalError::SeqGap {
                path,
                expected,
                found,
            } => assert_eq!((path, expected, found), (second.clone(), 1, 2)),
            other => panic!("{other:?}"),
        }
        std::fs::remove_file(&second).unwrap();
        let link = dir.path().join(segment_name(1, 100));
        std::os::unix::fs::symlink(dir.path().join(segment_name(0, 0)), &link).unwrap();
        assert!(matches!(
            read_wal(dir.path()).unwrap_err(),
            WalError::Symlink { path } if path == link
        ));
        std::fs::remove_file(&link).unwrap();
        std::fs::write(dir.path().join("1-1.wal"), b"").unwrap();
        assert!(matches!(
            read_wal(dir.path()).unwrap_err(),
            WalError::BadName { .. }
        ));
        std::fs::remove_file(dir.path().join("1-1.wal")).unwrap();
        std::fs::create_dir(dir.path().join(segment_name(1, 1))).unwrap();
        assert!(matches!(
            read_wal(dir.path()).unwrap_err(),
            WalError::NotRegularFile { .. }
        ));

        let empty = tempfile::tempdir().unwrap();
        std::fs::write(empty.path().join("0.tmp"), b"").unwrap();
        assert!(matches!(
            read_wal(empty.path()).unwrap_err(),
            WalError::NoSegments { .. }
        ));
        let missing = read_wal(&empty.path().join("nope")).unwrap_err();
        assert!(
            matches!(missing, WalError::Io(ref e) if e.op == "readdir"),
            "{missing}"
        );
    }

    #[test]
    fn an_unreadable_segment_is_a_permission_error() {
        if nix::unistd::geteuid().is_root() {
            return; // root reads anything
        }
        let dir = tempfile::tempdir().unwrap();
        let paths = two_segments().write(dir.path(), 0);
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&paths[1], std::fs::Permissions::from_mode(0o000)).unwrap();
        match read_wal(dir.path()).unwrap_err() {
            WalError::Io(e) => assert!(e.is_permission(), "{e}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn an_overwritten_suffix_drops_its_conf_changes() {
        let mut e = two_segments();
        // A new leader overwrites from index 21: the learner add is gone.
        e.rec(ENTRY_TYPE, &entry(0, 3, 21, b"noop"));
        let dir = tempfile::tempdir().unwrap();
        e.write(dir.path(), 0);
        let wal = read_wal(dir.path()).unwrap();
        assert_eq!((wal.last_index, wal.last_term), (21, 3));
        assert_eq!(wal.conf_changes.len(), 1);
        assert_eq!(wal.conf_changes[0].index, 1);
    }

    #[test]
    fn a_big_record_spanning_windows_reads() {
        let mut e = two_segments();
        let big = vec![0x11u8; WINDOW_BYTES + 12345];
        e.rec(ENTRY_TYPE, &entry(0, 3, 31, &big));
        e.rec(ENTRY_TYPE, &entry(0, 3, 32, b"after"));
        let dir = tempfile::tempdir().unwrap();
        e.write(dir.path(), 0);
        let wal = read_wal(dir.path()).unwrap();
        assert_eq!(wal.last_index, 32);
        assert!(wal.torn_tail.is_none());
    }

    #[test]
    fn records_straddling_window_ends_read_correctly() {
        // Records of 0.6 windows: most of them start in one window and end in the
        // next, so the buffer carries their first part over.
        let mut e = two_segments();
        for i in 31..=40u8 {
            let body = vec![i; WINDOW_BYTES * 3 / 5 + usize::from(i)];
            e.rec(ENTRY_TYPE, &entry(0, 3, u64::from(i), &body));
        }
        e.rec(STATE_TYPE, &hard_state(3, NODE, 40));
        let dir = tempfile::tempdir().unwrap();
        let paths = e.write(dir.path(), 0);
        let wal = read_wal(dir.path()).unwrap();
        assert_eq!((wal.last_index, wal.hard_state.commit), (40, 40));
        assert!(wal.torn_tail.is_none());
        // A flipped byte in the carried-over part of a straddling record is found.
        let (seg, at) = e.offsets[e.offsets.len() - 4];
        let mut bytes = std::fs::read(&paths[seg]).unwrap();
        let flip = at as usize + 8 + WINDOW_BYTES / 10;
        bytes[flip] ^= 1;
        std::fs::write(&paths[seg], bytes).unwrap();
        let (_, offset, kind) = corrupt_kind(read_wal(dir.path()).unwrap_err());
        assert_eq!(offset, at);
        assert!(matches!(kind, CorruptKind::CrcMismatch { .. }), "{kind:?}");
    }

    /// Reads a real data dir: `EMA_REAL_WAL_DIR=/path/member/wal cargo test --lib
    /// disk::wal -- --ignored --nocapture`.
    #[test]
    #[ignore]
    fn real_wal_dir() {
        let Some(dir) = std::env::var_os("EMA_REAL_WAL_DIR") else {
            return;
        };
        let t = std::time::Instant::now();
        let wal = read_wal(Path::new(&dir)).unwrap();
        let took = t.elapsed();
        println!(
            "member {} cluster {} hs {:?} last {}/{} records {} torn {:?} end {:?} in {took:?}",
            wal.member_id,
            wal.cluster_id,
            wal.hard_state,
            wal.last_index,
            wal.last_term,
            wal.records,
            wal.torn_tail,
            wal.valid_end
        );
        for s in &wal.snapshots {
            println!("snapshot {s:?}");
        }
        for c in &wal.conf_changes {
            println!("conf change {c:?}");
        }
    }

    fn write_one(bytes: &[u8]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(segment_name(0, 0)), bytes).unwrap();
        dir
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..2048)) {
            let dir = write_one(&bytes);
            let _ = read_wal(dir.path());
        }

        /// The parallel read is the sequential read, errors included, on any
        /// mutation of a log of several segments (crc chains across cuts,
        /// metadata in every segment, a truncation crossing a cut, v2 requests).
        #[test]
        fn the_parallel_read_equals_the_sequential_one(
            edits in proptest::collection::vec(
                (0usize..4, any::<proptest::sample::Index>(), any::<u8>()), 0..4),
            cut in proptest::option::of((0usize..4, any::<proptest::sample::Index>())),
            drop_segment in proptest::option::of(1usize..4),
        ) {
            let mut segs = several_segments().segs;
            for (seg, at, v) in edits {
                let bytes = &mut segs[seg];
                let i = at.index(bytes.len());
                bytes[i] = v;
            }
            if let Some((seg, at)) = cut {
                let n = at.index(segs[seg].len());
                segs[seg].truncate(n);
            }
            if let Some(seg) = drop_segment {
                segs[seg].clear();
            }
            let dir = tempfile::tempdir().unwrap();
            write_segs(dir.path(), &segs, 0);
            let one = format!("{:?}", read_wal_with(dir.path(), 1));
            for threads in [2, 4] {
                prop_assert_eq!(&one, &format!("{:?}", read_wal_with(dir.path(), threads)));
            }
        }

        #[test]
        fn mutations_of_a_valid_segment_never_panic(
            edits in proptest::collection::vec((any::<proptest::sample::Index>(), any::<u8>()), 1..8),
            cut in any::<proptest::sample::Index>(),
            truncate in any::<bool>(),
        ) {
            let e = big_last_segment();
            let mut bytes = e.segs.concat();
            for (at, v) in edits {
                let i = at.index(bytes.len());
                bytes[i] = v;
            }
            if truncate {
                bytes.truncate(cut.index(bytes.len()));
            }
            let dir = write_one(&bytes);
            if let Ok(wal) = read_wal(dir.path()) {
                // Whatever was read verified: the valid end is inside the file.
                prop_assert!(wal.valid_end.1 <= bytes.len() as u64);
            }
        }
    }
}
