//! The small text parsers: WAL and snap file names, Go semver (storage
//! version), `etcdutl version` output, `/proc/locks`, and the S3 endpoint
//! rules. (The agent decodes no S3 XML itself: `object_store` makes the HEAD and
//! GET and parses its answers.)
//!
//! The body is `fuzz_support::targets::text` (fuzz/src/lib.rs), which the main
//! test suite also replays the committed corpus through.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|s: &str| fuzz_support::targets::text(s));
