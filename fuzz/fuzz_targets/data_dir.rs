//! The whole offline inspection (`inspect --hash`) of a data directory whose
//! WAL segment, `.snap` file name and bytes, and db come from the input (four
//! parts split at `PART_SEPARATOR`): the classification, the cross-checks
//! between the three files, and the hash. Every run also checks that the
//! inspection left the directory as it was (same files, bytes and mtimes).
//!
//! The body is `fuzz_support::targets::data_dir` (fuzz/src/lib.rs), which the main
//! test suite also replays the committed corpus through.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| fuzz_support::targets::data_dir(data));
