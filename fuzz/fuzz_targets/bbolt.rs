//! A bbolt file: open (metas), the full page walk (`summary`), the identity
//! records, the bucket list and every root bucket's keys, and the KV hash
//! `inspect --hash` prints.
#![no_main]
use etcd_member_agent::disk::bbolt::Db;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let dir = fuzz_support::scratch().join("bolt");
    fuzz_support::fresh_dir(&dir);
    let path = fuzz_support::put(&dir, "db", data);
    let Ok(db) = Db::open(&path) else { return };
    let _ = db.summary();
    let _ = db.identity_summary();
    let _ = db.kv_hash();
    if let Ok(buckets) = db.buckets() {
        for b in buckets.iter().take(16) {
            let _ = db.for_each_kv(b, |_, _| {});
            let _ = db.get(b, b"consistent_index");
        }
    }
});
