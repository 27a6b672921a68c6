//! `inject`'s reading of manifests: any text as a YAML/JSON stream, every etcd
//! Pod template in it guarded, the patch written into the text in place and
//! read back.
//!
//! The body is `fuzz_support::targets::manifests` (fuzz/src/lib.rs), which the
//! main test suite also replays the committed corpus through.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| fuzz_support::targets::manifests(data));
