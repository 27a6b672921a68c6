//! A `.snap` file: any bytes under a valid snapshot name.
#![no_main]
use etcd_member_agent::disk::snap;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let dir = fuzz_support::scratch().join("snap");
    fuzz_support::fresh_dir(&dir);
    // The name carries term and index; the first two bytes pick them so the
    // name-against-metadata check sees both agreement and disagreement.
    let (term, index) = match data {
        [t, i, ..] => (u64::from(*t), u64::from(*i)),
        _ => (1, 1),
    };
    let path = fuzz_support::put(&dir, &snap::snap_file_name(term, index), data);
    let _ = snap::read_snap(&path);
    let _ = snap::list_snaps(&dir);
});
