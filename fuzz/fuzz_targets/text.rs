//! The small text parsers: WAL and snap file names, Go semver (storage
//! version), `etcdutl version` output, `/proc/locks`, and the S3 endpoint
//! rules. (The agent decodes no S3 XML itself: `object_store` makes the HEAD and
//! GET and parses its answers.)
#![no_main]
use etcd_member_agent::disk::{bbolt, lock, snap, wal};
use etcd_member_agent::restore::{s3, tool};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|s: &str| {
    let _ = wal::parse_segment_name(s);
    let _ = snap::parse_snap_name(s);
    if let Some(v) = bbolt::parse_semver(s) {
        let _ = bbolt::semver_minor(&v);
    }
    let _ = bbolt::semver_minor(s);
    let _ = bbolt::detect_storage_version(Some(s), Some(1));
    let _ = tool::parse_version(s);
    let _ = lock::parse_proc_locks(s);
    let _ = s3::needs_path_style(s);
    let _ = s3::effective_endpoint(s, "bucket", false);
    let _ = s3::effective_endpoint(s, "bucket", true);
});
