//! `--initial-cluster` strings, and the bootstrap IDs derived from them.
//!
//! The body is `fuzz_support::targets::initial_cluster` (fuzz/src/lib.rs), which the main
//! test suite also replays the committed corpus through.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|s: &str| fuzz_support::targets::initial_cluster(s));
