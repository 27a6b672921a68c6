//! The WAL's records (`walpb.Record`: metadata, entry, state, crc, snapshot),
//! their decoding, and how each one, once its frame is read, is verified against
//! the running CRC and folded into the reader's [`State`].

use serde::Serialize;

use super::frame::{zero_sector, LEN_WORD_BYTES};
use super::{CorruptKind, TornReason};
use crate::disk::ids::{ClusterId, MemberId};
use crate::disk::pb;
use crate::disk::raftpb::{
    self, bytes, decode_conf_change, decode_conf_state, decode_hard_state, undecodable, varint,
    ConfChangeRec, HardState, Message, ENTRY_CONF_CHANGE, ENTRY_NORMAL,
};
use crate::disk::v2req::V2Log;

/// `walpb.Record.type` values.
pub(super) const METADATA_TYPE: i64 = 1;
pub(super) const ENTRY_TYPE: i64 = 2;
pub(super) const STATE_TYPE: i64 = 3;
pub(super) const CRC_TYPE: i64 = 4;
pub(super) const SNAPSHOT_TYPE: i64 = 5;

/// A snapshot record (`walpb.Snapshot`): the log says a `.snap` at this index and
/// term exists, or is about to.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct WalSnapshotRef {
    /// Raft index of the snapshot.
    pub index: u64,
    /// Raft term of the snapshot.
    pub term: u64,
    /// Voters from its conf state (empty when absent).
    pub voters: Vec<MemberId>,
    /// Learners from its conf state (empty when absent).
    pub learners: Vec<MemberId>,
    /// Whether the record carried a conf state at all (written since 3.5; never
    /// in the initial `{0, 0}` record).
    pub has_conf_state: bool,
}

/// Why a frame stopped the scan.
pub(super) enum Fail {
    /// Torn-write signature (a torn tail in the last segment, corruption before).
    Torn(TornReason),
    /// Corruption wherever it is.
    Corrupt(CorruptKind),
}

/// The state accumulated while reading records.
#[derive(Default)]
pub(super) struct State {
    pub(super) crc: u32,
    pub(super) records: u64,
    pub(super) metadata: Option<Vec<u8>>,
    pub(super) ids: Option<(MemberId, ClusterId)>,
    pub(super) hard_state: HardState,
    pub(super) last_index: u64,
    pub(super) last_term: u64,
    pub(super) snapshots: Vec<WalSnapshotRef>,
    pub(super) conf_changes: Vec<ConfChangeRec>,
    pub(super) v2: V2Log,
    /// Scanning a segment on its own (see [`super::segment::Independent`]).
    pub(super) independent: bool,
    /// An independent scan met a first record other than a crc record: its
    /// checksums depend on the segments before, so it stopped; the merge scans
    /// the segment again in sequence.
    pub(super) fell_back: bool,
    /// An independent scan: the offset and value of the opening crc record.
    pub(super) opening_crc: Option<(u64, u32)>,
    /// An independent scan: the offset and bytes of its first metadata record.
    pub(super) first_metadata_at: Option<u64>,
    /// A HardState record was read.
    pub(super) hard_state_seen: bool,
    /// The lowest entry index read (raft truncates the log from there).
    pub(super) min_entry_index: Option<u64>,
}

impl State {
    /// Verifies and applies one record. `offset` is the frame's file offset.
    pub(super) fn apply(&mut self, record: &[u8], padded: &[u8], offset: u64) -> Result<(), Fail> {
        let torn_or = |kind: CorruptKind| match zero_sector(offset + LEN_WORD_BYTES, padded) {
            Some(sector_offset) => Fail::Torn(TornReason::ZeroSector {
                sector_offset,
                cause: Box::new(kind),
            }),
            None => Fail::Corrupt(kind),
        };
        let rec = decode_record(record).map_err(torn_or)?;
        if self.independent && self.records == 0 && self.opening_crc.is_none() {
            if rec.rtype != CRC_TYPE {
                self.fell_back = true;
                return Err(Fail::Corrupt(CorruptKind::MissingMetadata));
            }
            self.opening_crc = Some((offset, rec.crc));
        }
        if rec.rtype != CRC_TYPE {
            self.crc = crate::disk::crc::append(self.crc, rec.data);
            if self.crc != rec.crc {
                return Err(torn_or(CorruptKind::CrcMismatch {
                    expected: self.crc,
                    found: rec.crc,
                }));
            }
        }
        let corrupt = Fail::Corrupt;
        match rec.rtype {
            METADATA_TYPE => match &self.metadata {
                Some(first) if first.as_slice() != rec.data => {
                    return Err(corrupt(CorruptKind::MetadataMismatch))
                }
                Some(_) => {}
                None => {
                    // Kept before it is decoded: an independent scan leaves
                    // the comparison with the log's metadata to the merge,
                    // which the sequential pass makes before any decode.
                    self.metadata = Some(rec.data.to_vec());
                    self.first_metadata_at = Some(offset);
                    self.ids = Some(decode_metadata(rec.data).map_err(corrupt)?);
                }
            },
            ENTRY_TYPE => self.apply_entry(rec.data).map_err(corrupt)?,
            STATE_TYPE => {
                self.hard_state = decode_hard_state(rec.data).map_err(|e| corrupt(e.into()))?;
                self.hard_state_seen = true;
            }
            CRC_TYPE => {
                if self.crc != 0 && self.crc != rec.crc {
                    return Err(corrupt(CorruptKind::CrcChainBroken {
                        expected: self.crc,
                        found: rec.crc,
                    }));
                }
                self.crc = rec.crc;
            }
            SNAPSHOT_TYPE => self
                .snapshots
                .push(decode_snapshot(rec.data).map_err(corrupt)?),
            found => return Err(corrupt(CorruptKind::BadRecordType { found })),
        }
        self.records += 1;
        Ok(())
    }

    fn apply_entry(&mut self, data: &[u8]) -> Result<(), CorruptKind> {
        let raftpb::Entry {
            etype,
            term,
            index,
            data: payload,
        } = raftpb::decode_entry(data)?;
        // A later entry at a lower or equal index overwrites the log from there
        // (raft's log truncation), so drop the membership changes it replaced.
        while self.conf_changes.last().is_some_and(|c| c.index >= index) {
            self.conf_changes.pop();
        }
        self.last_index = index;
        self.last_term = term;
        self.min_entry_index = Some(self.min_entry_index.map_or(index, |m| m.min(index)));
        if etype == ENTRY_CONF_CHANGE {
            let mut rec = decode_conf_change(payload)?;
            rec.index = index;
            rec.term = term;
            self.conf_changes.push(rec);
        }
        if etype == ENTRY_NORMAL {
            self.v2.entry(index, term, payload);
        }
        Ok(())
    }
}

/// A decoded `walpb.Record`.
struct Record<'a> {
    rtype: i64,
    crc: u32,
    data: &'a [u8],
}

fn decode_record(buf: &[u8]) -> Result<Record<'_>, CorruptKind> {
    const WHAT: Message = Message::WalRecord;
    let mut rec = Record {
        rtype: 0,
        crc: 0,
        data: &[],
    };
    for f in pb::fields(buf) {
        match f.map_err(undecodable(WHAT))? {
            // int64 on the wire: a negative type is a ten-byte varint.
            (1, v) => rec.rtype = varint(v, WHAT, 1)? as i64,
            // uint32: the upper bits of an oversized varint are dropped, as Go does.
            (2, v) => rec.crc = varint(v, WHAT, 2)? as u32,
            (3, v) => rec.data = bytes(v, WHAT, 3)?,
            _ => {}
        }
    }
    Ok(rec)
}

fn decode_metadata(buf: &[u8]) -> Result<(MemberId, ClusterId), CorruptKind> {
    const WHAT: Message = Message::WalMetadata;
    let (mut node, mut cluster) = (0, 0);
    for f in pb::fields(buf) {
        match f.map_err(undecodable(WHAT))? {
            (1, v) => node = varint(v, WHAT, 1)?,
            (2, v) => cluster = varint(v, WHAT, 2)?,
            _ => {}
        }
    }
    Ok((MemberId::new(node), ClusterId::new(cluster)))
}

fn decode_snapshot(buf: &[u8]) -> Result<WalSnapshotRef, CorruptKind> {
    const WHAT: Message = Message::WalSnapshot;
    let mut snap = WalSnapshotRef::default();
    for f in pb::fields(buf) {
        match f.map_err(undecodable(WHAT))? {
            (1, v) => snap.index = varint(v, WHAT, 1)?,
            (2, v) => snap.term = varint(v, WHAT, 2)?,
            (3, v) => {
                let (voters, learners) = decode_conf_state(bytes(v, WHAT, 3)?)?;
                snap.voters = voters;
                snap.learners = learners;
                snap.has_conf_state = true;
            }
            _ => {}
        }
    }
    Ok(snap)
}
