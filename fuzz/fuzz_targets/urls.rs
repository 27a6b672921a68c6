//! URL lists (`--initial-advertise-peer-urls` and friends): the list parser,
//! normalisation, the comparable form and the member ID computed from them.
//!
//! The body is `fuzz_support::targets::urls` (fuzz/src/lib.rs), which the main
//! test suite also replays the committed corpus through.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|s: &str| fuzz_support::targets::urls(s));
