//! A WAL directory of several segments: the input is split at each
//! `SEGMENT_SEPARATOR`; the byte after a separator steps the sequence number
//! (0 repeats it, so duplicate and gapped names are reached too).
//!
//! The body is `fuzz_support::targets::wal_dir` (fuzz/src/lib.rs), which the main
//! test suite also replays the committed corpus through.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| fuzz_support::targets::wal_dir(data));
