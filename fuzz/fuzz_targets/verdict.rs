//! The verdict file `serve` reads (`read_verdict`: size cap, JSON, the Pod-start
//! check, the fields).
//!
//! The body is `fuzz_support::targets::verdict` (fuzz/src/lib.rs), which the main
//! test suite also replays the committed corpus through.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| fuzz_support::targets::verdict(data));
