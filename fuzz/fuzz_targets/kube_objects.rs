//! The Kubernetes custom objects the evidence reads (EtcdMember, EtcdCluster):
//! any JSON into `parse_member` and `parse_cluster`.
#![no_main]
use etcd_member_agent::evidence::kube::{parse_cluster, parse_member};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(doc) = serde_json::from_slice::<serde_json::Value>(data) else {
        return;
    };
    if let Ok(m) = parse_member("m", &doc) {
        let _ = serde_json::to_string(&m);
    }
    if let Ok(c) = parse_cluster("c", &doc) {
        let _ = serde_json::to_string(&c);
    }
});
