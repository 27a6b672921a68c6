//! One WAL segment: any bytes as `member/wal/0000000000000000-0000000000000000.wal`.
#![no_main]
use etcd_member_agent::disk::wal;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let dir = fuzz_support::scratch().join("wal");
    fuzz_support::fresh_dir(&dir);
    fuzz_support::put(&dir, &wal::segment_name(0, 0), data);
    let _ = wal::read_wal(&dir);
    let _ = wal::wal_identity(&dir);
});
