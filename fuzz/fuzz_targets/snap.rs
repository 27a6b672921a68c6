//! A `.snap` file: any bytes under a valid snapshot name.
//!
//! The body is `fuzz_support::targets::snap` (fuzz/src/lib.rs), which the main
//! test suite also replays the committed corpus through.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| fuzz_support::targets::snap(data));
