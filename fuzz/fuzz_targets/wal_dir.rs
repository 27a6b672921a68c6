//! A WAL directory of several segments: the input is split at each
//! `SEGMENT_SEPARATOR`; the byte after a separator steps the sequence number
//! (0 repeats it, so duplicate and gapped names are reached too).
#![no_main]
use etcd_member_agent::disk::wal;
use libfuzzer_sys::fuzz_target;

/// Splits the input into segments (chosen so that it is rare inside WAL bytes).
const SEGMENT_SEPARATOR: &[u8] = b"\xffSEG\xfe";

fuzz_target!(|data: &[u8]| {
    let dir = fuzz_support::scratch().join("wal");
    fuzz_support::fresh_dir(&dir);
    let mut seq = 0u64;
    let mut rest = data;
    for i in 0..8u64 {
        let (seg, next) = match rest
            .windows(SEGMENT_SEPARATOR.len())
            .position(|w| w == SEGMENT_SEPARATOR)
        {
            Some(at) => (&rest[..at], Some(&rest[at + SEGMENT_SEPARATOR.len()..])),
            None => (rest, None),
        };
        fuzz_support::put(&dir, &wal::segment_name(seq, i * 16), seg);
        let Some(next) = next else { break };
        let (step, next) = match next.split_first() {
            Some((s, n)) => (u64::from(*s), n),
            None => (1, next),
        };
        seq = seq.wrapping_add(step);
        rest = next;
    }
    let _ = wal::list_segments(&dir);
    let _ = wal::read_wal(&dir);
    let _ = wal::wal_identity(&dir);
});
