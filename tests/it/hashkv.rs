//! The offline `HashKV` (`Db::hash_kv_at`, decision table row 6h) against real
//! etcd of every line: a stopped member's backend, hashed at every revision
//! with the compaction revision another member reports, equals what that
//! running member answers to `etcdctl endpoint hashkv --rev`. Puts, a
//! transaction (revisions sharing a main revision), deletions, a key deleted
//! and created again, a lease, a compaction, a physical one, and (where
//! etcdutl can) a restore bumped and marked compacted.

use etcd_member_agent::disk::bbolt::{newest_digests, Db, HashAt, LiveKv};

use crate::common::*;
use crate::preflight_support::scratch;

/// `etcdctl endpoint hashkv --rev=<rev>` of one member: `(hash, compact_revision)`,
/// `None` when the revision is compacted (or in the future).
fn live_hash(member: &Member, rev: i64) -> Option<(u32, i64)> {
    let out = member.etcdctl(["endpoint", "hashkv", "-w", "json", &format!("--rev={rev}")]);
    let text = String::from_utf8_lossy(&out.stdout);
    let err = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        assert!(
            err.contains("compacted") || err.contains("future"),
            "hashkv --rev={rev}: {err}"
        );
        return None;
    }
    let doc: serde_json::Value =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("hashkv JSON ({e}): {text}"));
    let h = &doc[0]["HashKV"];
    Some((
        h["hash"]
            .as_u64()
            .unwrap_or_else(|| panic!("no hash: {text}")) as u32,
        h["compact_revision"].as_i64().unwrap_or(0),
    ))
}

/// A transaction without compares whose success branch is `ops` (one
/// operation a line): its writes share one main revision.
fn txn(member: &Member, ops: &str) {
    use std::io::Write as _;
    let mut cmd = etcdctl_command(member.version(), member.client_url());
    cmd.args(["txn", "--interactive=false"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut child = cmd.spawn().expect("run etcdctl txn");
    // No compares, then the success operations, then no failure operations.
    let input = format!("\n{ops}\n\n");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(input.as_bytes())
        .expect("write the txn");
    let out = child.wait_with_output().expect("etcdctl txn");
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && said.contains("SUCCESS"),
        "etcdctl txn: {said} {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `etcdctl get --from-key "" --rev=<rev>` sorted by modification, newest
/// first, at most `n` keys (serializable): what preflight's Range asks.
fn live_newest(member: &Member, rev: i64, n: usize) -> Option<Vec<LiveKv>> {
    let out = member.etcdctl([
        "get",
        "--from-key",
        "",
        &format!("--rev={rev}"),
        "--sort-by=MODIFY",
        "--order=DESCEND",
        &format!("--limit={n}"),
        "--consistency=s",
        "-w",
        "json",
    ]);
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("compacted"), "get --rev={rev}: {err}");
        return None;
    }
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("get JSON");
    let b64 = |v: &serde_json::Value| base64_decode(v.as_str().unwrap_or("")).expect("base64");
    Some(
        doc["kvs"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default()
            .iter()
            .map(|kv| LiveKv {
                mod_revision: kv["mod_revision"].as_i64().unwrap_or(0),
                key: b64(&kv["key"]),
                create_revision: kv["create_revision"].as_i64().unwrap_or(0),
                version: kv["version"].as_i64().unwrap_or(0),
                value: b64(&kv["value"]),
                lease: kv["lease"].as_i64().unwrap_or(0),
            })
            .collect(),
    )
}

fn revision(member: &Member) -> i64 {
    let out = member.etcdctl(["endpoint", "status", "-w", "json"]);
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "status JSON ({e}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    });
    doc[0]["Status"]["header"]["revision"]
        .as_i64()
        .expect("revision")
}

fn ok(member: &Member, args: &[&str]) -> String {
    let out = member.etcdctl(args);
    assert!(
        out.status.success(),
        "etcdctl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Hashes `stopped`'s backend at every revision `answering` still answers
/// for and compares; returns how many matched. Every revision must either
/// match or be one the file documents it cannot know.
fn compare(step: &str, answering: &Member, stopped: &Member, top: i64) -> usize {
    let live: Vec<(i64, (u32, i64))> = (1..=top)
        .filter_map(|r| Some((r, live_hash(answering, r)?)))
        .collect();
    // The newest keys at each revision, three at a time (a transaction's
    // writes share a modification revision, so the cut falls inside it).
    let newest: Vec<(i64, Vec<LiveKv>)> = (1..=top)
        .filter_map(|r| Some((r, live_newest(answering, r, 3)?)))
        .collect();
    stopped.stop();
    let db = Db::open(&stopped.data_dir().join("member/snap/db")).expect("open the db");
    let own = db.summary().expect("summary").compact_revision;
    let mut matched = 0;
    eprintln!("{step}: own compaction {own:?}");
    for (r, (hash, compact)) in live {
        match db.hash_kv_at(r, compact, own).expect("hash") {
            HashAt::Hash(h) => {
                assert_eq!(
                    h, hash,
                    "{step}: revision {r}, compaction {compact}: offline {h:#010x}, etcd {hash:#010x}"
                );
                matched += 1;
            }
            HashAt::Unknown(why) => eprintln!("{step}: revision {r} unknown offline: {why:?}"),
        }
    }
    let mut listed = 0;
    for (r, theirs) in newest {
        let at = db.keyspace_at(r, &[], own, 4).expect("read");
        let Some(ours) = at.newest else {
            continue;
        };
        let (t, o) = newest_digests(&ours, &theirs, 3)
            .unwrap_or_else(|| panic!("{step}: revision {r}: nothing comparable"));
        assert_eq!(
            t, o,
            "{step}: revision {r}: newest keys offline {ours:?}, etcd {theirs:?}"
        );
        listed += 1;
    }
    assert!(listed > 0, "{step}: no revision's newest keys compared");
    stopped.start();
    stopped.wait_healthy();
    matched
}

fn offline_hash_matches_etcd(version: EtcdVersion) {
    let cluster = Cluster::builder(version)
        .members(3)
        .token(format!("hashkv-{}", version.label()))
        .start();
    let (m0, m2) = (&cluster[0], &cluster[2]);
    ok(m0, &["put", "a", "1"]);
    ok(m0, &["put", "b", "1"]);
    ok(m0, &["put", "a", "2"]);
    // A transaction: two writes under one main revision.
    txn(m0, "put c 1\nput a 3\n");
    let lease = ok(m0, &["lease", "grant", "600"]);
    let lease = lease
        .split_whitespace()
        .nth(1)
        .expect("lease ID")
        .to_owned();
    ok(m0, &["put", "--lease", &lease, "leased", "x"]);
    ok(m0, &["del", "b"]);
    ok(m0, &["put", "b", "again"]);
    ok(m0, &["put", "d", "1"]);
    ok(m0, &["del", "a"]);
    let top = revision(m0);
    let matched = compare("uncompacted", m0, m2, top);
    assert!(matched as i64 >= top - 1, "uncompacted: {matched} of {top}");

    let mid = top - 3;
    ok(m0, &["compact", &mid.to_string()]);
    ok(m0, &["put", "a", "3"]);
    ok(m0, &["put", "e", "1"]);
    ok(m0, &["del", "d"]);
    let top = revision(m0);
    let matched = compare("compacted", m0, m2, top);
    assert!(
        matched >= 3,
        "compacted at {mid}: {matched} revisions compared"
    );

    ok(m0, &["compact", "--physical", &(top - 1).to_string()]);
    ok(m0, &["put", "f", "1"]);
    ok(m0, &["put", "a", "4"]);
    let top = revision(m0);
    let matched = compare("physically compacted", m0, m2, top);
    assert!(
        matched >= 2,
        "physically compacted: {matched} revisions compared"
    );

    if version.at_least(3, 5) && version.etcdutl().is_some() && version != EtcdVersion::V3_5 {
        // The documented disaster recovery, bumped and marked compacted.
        let backup = scratch();
        let snapshot = backup.path().join("snapshot.db");
        cluster.snapshot_save(&snapshot);
        for m in cluster.members() {
            m.stop();
        }
        crate::rollback::restore_everyone(&cluster, &snapshot, Some(1000));
        for m in cluster.members() {
            m.start();
        }
        for m in cluster.members() {
            m.wait_healthy();
        }
        ok(m0, &["put", "after-restore", "1"]);
        ok(m0, &["put", "a", "5"]);
        let top = revision(m0);
        let matched = compare("restored with --bump-revision", m0, m2, top);
        assert!(matched >= 2, "bumped restore: {matched} revisions compared");
    }
}

#[test]
fn offline_hash_matches_etcd_34() {
    offline_hash_matches_etcd(EtcdVersion::V3_4);
}

/// 3.5 hashes as 3.4 (3.5.1) or as 3.6 (3.5.5 on), and 3.6 as 3.7: in the
/// every-line matrix, to keep CI's time.
mod every_line {
    use super::*;

    #[test]
    #[ignore = "every-line matrix: AGENT_TEST_ALL_LINES=1 scripts/test"]
    fn offline_hash_matches_etcd_35() {
        offline_hash_matches_etcd(EtcdVersion::V3_5);
    }

    #[test]
    #[ignore = "every-line matrix: AGENT_TEST_ALL_LINES=1 scripts/test"]
    fn offline_hash_matches_etcd_35_latest() {
        offline_hash_matches_etcd(EtcdVersion::V3_5Latest);
    }

    #[test]
    #[ignore = "every-line matrix: AGENT_TEST_ALL_LINES=1 scripts/test"]
    fn offline_hash_matches_etcd_36() {
        offline_hash_matches_etcd(EtcdVersion::V3_6);
    }
}

#[test]
fn offline_hash_matches_etcd_37() {
    offline_hash_matches_etcd(EtcdVersion::V3_7);
}
