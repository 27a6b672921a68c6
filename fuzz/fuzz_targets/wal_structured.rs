//! Structure-aware WAL: segments of valid frames (length word, padding, CRC
//! chained across records and segments as etcd writes them) built from an
//! arbitrary model with arbitrary field values and a few twists, so the fuzzer
//! passes the CRC check and exercises the record decoders and the state rules.
//!
//! The body is `fuzz_support::targets::wal_structured` (fuzz/src/lib.rs), which the main
//! test suite also replays the committed corpus through.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|model: fuzz_support::WalModel| fuzz_support::targets::wal_structured(model));
