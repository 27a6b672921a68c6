//! The Pod `pod-check` lints: any JSON decoded as a `Pod`, then its references,
//! the missing-object hazards and the stuck containers.
//!
//! The body is `fuzz_support::targets::pod` (fuzz/src/lib.rs), which the main
//! test suite also replays the committed corpus through.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| fuzz_support::targets::pod(data));
