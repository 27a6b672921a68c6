//! The whole offline inspection (`inspect --hash`) of a data directory whose
//! WAL segment, `.snap` file name and bytes, and db come from the input (four
//! parts split at `PART_SEPARATOR`): the classification, the cross-checks
//! between the three files, and the hash. Every run also checks that the
//! inspection left the directory as it was (same files, bytes and mtimes).
#![no_main]
use etcd_member_agent::disk::layout::{self, Options, Paths};
use etcd_member_agent::disk::lock::Probe;
use etcd_member_agent::disk::{snap, wal};
use libfuzzer_sys::fuzz_target;

const PART_SEPARATOR: &[u8] = b"\xffPART\xfe";

fuzz_target!(|data: &[u8]| {
    let root = fuzz_support::scratch().join("data");
    fuzz_support::fresh_dir(&root);
    let member = root.join("member");
    let mut parts = Vec::new();
    let mut rest = data;
    while parts.len() < 3 {
        match rest
            .windows(PART_SEPARATOR.len())
            .position(|w| w == PART_SEPARATOR)
        {
            Some(at) => {
                parts.push(&rest[..at]);
                rest = &rest[at + PART_SEPARATOR.len()..];
            }
            None => break,
        }
    }
    parts.push(rest);
    let wal_dir = member.join("wal");
    let snap_dir = member.join("snap");
    std::fs::create_dir_all(&wal_dir).expect("wal dir");
    std::fs::create_dir_all(&snap_dir).expect("snap dir");
    fuzz_support::put(&wal_dir, &wal::segment_name(0, 0), parts[0]);
    if let Some(s) = parts.get(2) {
        let name = parts
            .get(1)
            .and_then(|n| std::str::from_utf8(n).ok())
            .and_then(snap::parse_snap_name)
            .map_or_else(
                || snap::snap_file_name(2, 8),
                |(t, i)| snap::snap_file_name(t, i),
            );
        fuzz_support::put(&snap_dir, &name, s);
    }
    if let Some(db) = parts.get(3) {
        fuzz_support::put(&snap_dir, "db", db);
    }
    let before = tree(&root);
    let paths = Paths::new(&root, None);
    let _ = layout::inspect(
        &paths,
        Options {
            hash: true,
            usage: true,
            locks: Probe::Ofd,
        },
    );
    assert_eq!(tree(&root), before, "inspect changed the data directory");
});

/// Every path under `root` with its bytes and mtime.
fn tree(root: &std::path::Path) -> Vec<(std::path::PathBuf, Vec<u8>, std::time::SystemTime)> {
    let mut out = Vec::new();
    let mut dirs = vec![root.to_path_buf()];
    while let Some(d) = dirs.pop() {
        let mut entries: Vec<_> = std::fs::read_dir(&d)
            .expect("read scratch dir")
            .flatten()
            .collect();
        entries.sort_by_key(|e| e.path());
        for e in entries {
            let p = e.path();
            let meta = std::fs::symlink_metadata(&p).expect("stat scratch");
            let mtime = meta.modified().expect("mtime");
            if meta.is_dir() {
                dirs.push(p.clone());
                out.push((p, Vec::new(), mtime));
            } else {
                let bytes = std::fs::read(&p).expect("read scratch file");
                out.push((p, bytes, mtime));
            }
        }
    }
    out
}
