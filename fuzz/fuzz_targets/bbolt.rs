//! A bbolt file: open (metas), the full page walk (`summary`), the identity
//! records, the bucket list and every root bucket's keys, and the KV hash
//! `inspect --hash` prints.
//!
//! The body is `fuzz_support::targets::bbolt` (fuzz/src/lib.rs), which the main
//! test suite also replays the committed corpus through.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| fuzz_support::targets::bbolt(data));
