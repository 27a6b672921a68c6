//! Durations as every `--…-timeout`/`--…-interval` flag parses them.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|s: &str| {
    let _ = etcd_member_agent::duration::parse(s);
});
