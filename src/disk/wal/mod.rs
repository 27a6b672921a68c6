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
    last_segment(wal_dir).map(|end| (end.last_index, end.last_term))
}

/// What the WAL's last segment says about the log's end, read from that
/// segment alone ([`last_segment_end`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentEnd {
    /// The member and cluster IDs of its metadata record, if it was read.
    pub ids: Option<(MemberId, ClusterId)>,
    /// The last entry's index (as [`last_segment_end`]).
    pub last_index: u64,
    /// The last entry's term.
    pub last_term: u64,
    /// The commit index of its last HardState record, if it holds one (etcd
    /// writes the HardState at the head of every segment it cuts, and with
    /// every batch that changes it).
    pub commit: Option<u64>,
    /// The term of that HardState, with it.
    pub hard_term: Option<u64>,
    /// The last entry's index as a read of the whole WAL gives it: the last
    /// entry in this segment, or, when it holds none, the index before the
    /// one the segment is named for (snapshot records not counted).
    pub last_entry: u64,
    /// Whether its records read to their end, or to a torn tail (which etcd
    /// repairs in the last segment); `false` when a record in it is corrupt.
    pub clean: bool,
}

/// The last segment's end, IDs and last HardState's commit: what the sidecar
/// records at shutdown, once etcd has exited
/// (`evidence::mark::DurableTracker::at_rest`).
pub fn last_segment(wal_dir: &Path) -> Result<SegmentEnd, WalError> {
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
    let end = scan_segment(last, &mut st, &mut buf)?;
    // A segment cut and not written yet holds no entry: the log reaches the
    // index before the one it is named for.
    let before = last.first_index.saturating_sub(1);
    let clean = matches!(end.failure, None | Some((_, Fail::Torn(_))));
    let snap = st.snapshots.iter().map(|s| s.index).max().unwrap_or(0);
    let index = st.last_index.max(before).max(snap);
    Ok(SegmentEnd {
        ids: st.ids,
        last_index: index,
        last_term: st.last_term,
        commit: st.hard_state_seen.then_some(st.hard_state.commit),
        hard_term: st.hard_state_seen.then_some(st.hard_state.term),
        last_entry: if st.last_index > 0 {
            st.last_index
        } else {
            before
        },
        clean,
    })
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
mod tests;
