//! The Pod `pod-check` lints: any JSON decoded as a `Pod`, then its references,
//! the missing-object hazards and the stuck containers.
#![no_main]
use std::collections::BTreeSet;

use etcd_member_agent::evidence::pod::{missing_references, references, stuck_containers};
use k8s_openapi::api::core::v1::Pod;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(pod) = serde_json::from_slice::<Pod>(data) else {
        return;
    };
    let refs = references(&pod);
    let missing: BTreeSet<_> = refs
        .iter()
        .map(|r| (r.object_kind, r.object_name.clone()))
        .collect();
    for h in missing_references(&refs, &missing) {
        let _ = serde_json::to_string(&h);
    }
    for h in stuck_containers(&pod) {
        let _ = serde_json::to_string(&h);
    }
});
