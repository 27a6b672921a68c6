//! Structure-aware WAL: segments of valid frames (length word, padding, CRC
//! chained across records and segments as etcd writes them) built from an
//! arbitrary model with arbitrary field values and a few twists, so the fuzzer
//! passes the CRC check and exercises the record decoders and the state rules.
#![no_main]
use etcd_member_agent::disk::wal;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|model: fuzz_support::WalModel| {
    let dir = fuzz_support::scratch().join("wal");
    fuzz_support::fresh_dir(&dir);
    for (name, bytes) in model.encode() {
        fuzz_support::put(&dir, &name, &bytes);
    }
    let _ = wal::read_wal(&dir);
    let _ = wal::wal_identity(&dir);
});
