//! The webhook's answer to any AdmissionReview body: parsed, the Pod guarded,
//! the response encoded.
//!
//! The body is `fuzz_support::targets::admission` (fuzz/src/lib.rs), which the
//! main test suite also replays the committed corpus through.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| fuzz_support::targets::admission(data));
