//! The Kubernetes custom objects the evidence reads (EtcdMember, EtcdCluster):
//! any JSON into `parse_member` and `parse_cluster`.
//!
//! The body is `fuzz_support::targets::kube_objects` (fuzz/src/lib.rs), which the main
//! test suite also replays the committed corpus through.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| fuzz_support::targets::kube_objects(data));
