//! `--initial-cluster` strings, and the bootstrap IDs derived from them.
#![no_main]
use etcd_member_agent::disk::ids;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|s: &str| {
    if let Ok(cluster) = ids::parse_initial_cluster(s) {
        let members: Vec<u64> = cluster
            .values()
            .map(|urls| ids::member_id(urls, "token"))
            .collect();
        let _ = ids::cluster_id(&members);
    }
});
