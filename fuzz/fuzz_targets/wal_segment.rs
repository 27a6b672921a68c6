//! One WAL segment: any bytes as `member/wal/0000000000000000-0000000000000000.wal`.
//!
//! The body is `fuzz_support::targets::wal_segment` (fuzz/src/lib.rs), which the main
//! test suite also replays the committed corpus through.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| fuzz_support::targets::wal_segment(data));
