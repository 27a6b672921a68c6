//! The verdict file `serve` reads (`read_verdict`: size cap, JSON, the Pod-start
//! check, the fields).
#![no_main]
use etcd_member_agent::server::boot::{read_verdict, PodStart};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let dir = fuzz_support::scratch().join("verdict");
    fuzz_support::fresh_dir(&dir);
    let path = fuzz_support::put(&dir, "verdict.json", data);
    let start = PodStart {
        pod_uid: Some("0c6a3d2e-uid".to_string()),
        boot_id: Some("boot".to_string()),
    };
    let _ = read_verdict(&path, &start);
    let _ = read_verdict(&path, &PodStart::default());
});
