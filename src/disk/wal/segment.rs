//! One segment file read on its own: the scan of its frames into the reader's
//! state, and the independent scan a worker thread makes ahead of the merge.

use super::frame::{Scanner, Step};
use super::record::{Fail, State};
use super::WalSegment;
use crate::disk::reader::{IoError, PosReader};

/// How a segment's scan ended.
pub(super) struct SegEnd {
    /// The frame that stopped it, and why; `None` at the end of the records.
    pub(super) failure: Option<(u64, Fail)>,
    /// Where the scanner stood.
    pub(super) pos: u64,
}

impl SegEnd {
    /// The end of the last record that read and verified: where the frame that
    /// stopped the scan starts, or where the scan ended. What that failure means
    /// (a torn tail, repairable, or corruption) is not the segment's to say: it
    /// depends on whether the segment is the log's last, which the caller knows.
    pub(super) fn valid_offset(&self) -> u64 {
        self.failure
            .as_ref()
            .map_or(self.pos, |(offset, _)| *offset)
    }
}

/// Scans one segment into `st`, record by record, stopping at the first frame
/// that fails.
pub(super) fn scan_segment(
    seg: &WalSegment,
    st: &mut State,
    buf: &mut Vec<u8>,
) -> Result<SegEnd, IoError> {
    let file = PosReader::open(&seg.path)?;
    let mut scan = Scanner::new(&file, buf);
    loop {
        let offset = scan.pos;
        let step = match scan.next_frame()? {
            Step::End => None,
            Step::Torn(reason) => Some(Fail::Torn(reason)),
            Step::Corrupt(kind) => Some(Fail::Corrupt(kind)),
            Step::Frame { record, padded } => match st.apply(record, padded, offset) {
                Ok(()) => continue,
                Err(fail) => Some(fail),
            },
        };
        return Ok(SegEnd {
            failure: step.map(|f| (offset, f)),
            pos: scan.pos,
        });
    }
}

/// A segment scanned on its own, ahead of the merge: its state as if the log
/// began with it. Valid as a stand-in for the sequential scan only when the
/// segment opens with a crc record (as every segment etcd cuts does), which
/// carries the running checksum the rest of the segment chains from.
pub(super) struct Independent {
    pub(super) st: State,
    pub(super) end: SegEnd,
}
