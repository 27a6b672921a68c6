//! The `/readyz` high-water mark without Kubernetes (issue 17, docs/commands.md § serve): the
//! witness file beside the verdict file keeps the highest raft index a consistent
//! member reached, across restarts of `serve`, and a member seen below it stays
//! not ready even when new writes push its index past the mark.

use crate::common::*;
use crate::serve_support::{metric, tail, Serve};

#[test]
fn a_re_bootstrapped_member_is_not_ready_after_serve_restarts_nor_after_new_writes() {
    let cluster = Cluster::builder(EtcdVersion::V3_5).start();
    let m0 = &cluster[0];
    cluster.put_many("kept/", 60, 16);
    let pod = tempfile::tempdir().unwrap();
    let verdict = pod.path().join("preflight.json");
    let witness = pod.path().join("witness.json");
    let start = || {
        Serve::beside(m0.client_url())
            .data_dir(m0.data_dir())
            .verdict_file(&verdict)
            .start()
    };
    let serve = start();
    serve.wait_readyz(200);
    let status = m0.endpoint_status()["raftIndex"].as_u64().unwrap();
    assert!(status >= 60);
    // Nothing more is written: the sidecar proves the index on the WAL's last
    // segment (the commit index will not move past it) and records it.
    let mark = assert_eventually!(
        {
            let doc: serde_json::Value = std::fs::read(&witness)
                .map_err(|e| e.to_string())
                .and_then(|b| serde_json::from_slice(&b).map_err(|e| e.to_string()))?;
            let index = doc["raft_index"].as_u64().unwrap_or_default();
            ensure(index >= status, format!("the witness file holds {doc}"))?;
            ensure(doc["format"] == 2, format!("the witness file holds {doc}"))?;
            Ok(index)
        },
        "the witness file records the member's index {status}, proven on its disk"
    );
    drop(serve);

    // The volume is wiped; etcd re-bootstraps under the same IDs with an empty log.
    m0.kill9();
    m0.wipe_data_dir();
    m0.start();
    m0.wait_healthy();

    // A restart of serve reads the new (short) WAL at boot: only the witness knows.
    let serve = start();
    serve.wait_readyz_saying(503, "high-water mark");
    // New writes push the raft index past the mark: still not the data it had.
    let writes = usize::try_from(mark).unwrap() + 20;
    cluster.put_many("new/", writes, 8);
    let status = m0.endpoint_status();
    assert!(status["raftIndex"].as_u64().unwrap() > mark, "{status}");
    // Polled past the mark (the latch is what keeps it not ready, not a poll
    // that has not happened yet).
    assert_eventually!(
        {
            let seen = metric(&serve.metrics(), "etcd_agent_raft_index", "").unwrap_or_default();
            ensure(
                seen > mark as f64,
                format!("the sidecar saw raft index {seen}"),
            )
        },
        "the sidecar polls the index past the mark"
    );
    serve.wait_readyz_saying(503, "high-water mark");
    drop(serve);
    let serve = start();
    serve.wait_readyz_saying(503, "high-water mark");
}

/// The witness file as JSON.
fn read_witness(path: &std::path::Path) -> Result<serde_json::Value, String> {
    std::fs::read(path)
        .map_err(|e| format!("{}: {e}", path.display()))
        .and_then(|b| serde_json::from_slice(&b).map_err(|e| e.to_string()))
}

/// The member's IDs as 16 hex digits.
fn ids_hex(m: &Member) -> (String, String) {
    let status = m.endpoint_status();
    let id = |key: &str| {
        format!(
            "{:016x}",
            status["header"][key]
                .as_u64()
                .unwrap_or_else(|| panic!("{key} in {status}"))
        )
    };
    (id("member_id"), id("cluster_id"))
}

/// The volume is wiped while `serve` runs; etcd re-bootstraps under the same
/// IDs with an empty log.
fn re_bootstrap(m: &Member) {
    m.kill9();
    m.wipe_data_dir();
    m.start();
    m.wait_healthy();
}

/// A verdict of preflight that accepted a restore above the witnesses' mark
/// (row 5e) re-bases the witness file once, for this Pod start: from then on
/// the mark rises with the member and is kept, and a later regression in the
/// same Pod's life is latched — also by a sidecar restarted in that Pod start,
/// which reads the same verdict and does not re-base the mark it raised itself.
/// Before, every poll re-based the file (the mark was dropped and rewritten at
/// the member's position), and the regression stayed ready.
#[test]
fn a_rebase_verdict_applies_once_and_a_later_regression_in_the_pod_is_latched() {
    let cluster = Cluster::builder(EtcdVersion::V3_5).start();
    let m0 = &cluster[0];
    cluster.put_many("kept/", 40, 16);
    let (member_id, cluster_id) = ids_hex(m0);
    let pod = tempfile::tempdir().unwrap();
    let verdict = pod.path().join("preflight.json");
    let witness = pod.path().join("witness.json");
    // The mark of the history before the restore, far above this one's.
    let before = serde_json::json!({
        "format": 2, "member_id": member_id, "cluster_id": cluster_id,
        "raft_index": 1_000_000u64, "raft_term": 2, "revision": 1_000_000,
    });
    std::fs::write(&witness, before.to_string()).unwrap();
    let decided_at = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let doc = serde_json::json!({
        "verdict": "start", "row": "5e", "exit_code": 0,
        "reason": "restored above the witnesses' revision", "remedy": "",
        "decided_at_unix": decided_at, "pod_uid": "pod-rebased",
        "data_dir": {"member_id": member_id, "cluster_id": cluster_id},
        "witness": {"rebase": true},
    });
    std::fs::write(&verdict, doc.to_string()).unwrap();
    let start = || {
        Serve::beside(m0.client_url())
            .data_dir(m0.data_dir())
            .verdict_file(&verdict)
            .arg("--pod-uid=pod-rebased")
            .start()
    };
    let serve = start();
    serve.wait_readyz(200);
    let status = m0.endpoint_status()["raftIndex"].as_u64().unwrap();
    // Re-based to the member's position.
    let mark = assert_eventually!(
        {
            let doc = read_witness(&witness)?;
            let index = doc["raft_index"].as_u64().unwrap_or_default();
            ensure(
                (status..1_000_000).contains(&index),
                format!("the witness file holds {doc}"),
            )?;
            Ok(index)
        },
        "the witness file is re-based to the member's index {status}\n{}",
        tail(&serve.log())
    );
    // The mark rises with the member, poll after poll, and stays in the file.
    cluster.put_many("more/", 20, 8);
    let status = m0.endpoint_status()["raftIndex"].as_u64().unwrap();
    assert!(status >= mark + 20);
    assert_eventually!(
        {
            let doc = read_witness(&witness)?;
            let index = doc["raft_index"].as_u64().unwrap_or_default();
            ensure(index >= status, format!("the witness file holds {doc}"))
        },
        "the mark rises to {status}"
    );

    // The member loses its data in the same Pod's life and runs on, past the
    // commit index its WAL had when serve started: only the latch tells.
    re_bootstrap(m0);
    cluster.put_many("new/", usize::try_from(status).unwrap() + 20, 8);
    let now = m0.endpoint_status()["raftIndex"].as_u64().unwrap();
    assert!(now > status, "{now}");
    assert_eventually!(
        {
            let seen = metric(&serve.metrics(), "etcd_agent_raft_index", "").unwrap_or_default();
            ensure(
                seen >= now as f64,
                format!("the sidecar saw raft index {seen}"),
            )
        },
        "the sidecar polls the member at {now}"
    );
    serve.wait_readyz_saying(503, "high-water mark");
    drop(serve);
    // The sidecar restarts in the same Pod start: the same verdict does not
    // re-base the mark again.
    let serve = start();
    serve.wait_readyz_saying(503, "high-water mark");
    let doc = read_witness(&witness).unwrap();
    assert!(doc["raft_index"].as_u64().unwrap() >= status, "{doc}");
    assert!(doc["regressed_to"].as_u64().is_some(), "{doc}");
    // The file names the verdict it was re-based for.
    assert!(
        doc["rebased_by"]
            .as_str()
            .is_some_and(|by| by.starts_with(&format!("{decided_at}/pod-rebased/"))),
        "{doc}"
    );
}

/// The runbook's acknowledgement of a regression: once the member was
/// recovered, the witness file is removed. The sidecar looks for the file
/// before every check: the mark and the latch in memory go with it, the
/// member is ready again, and a new mark is written at its position. Before,
/// the sidecar kept both in memory and stayed not ready (and wrote the file
/// back at the next change).
#[test]
fn a_witness_file_removed_after_a_regression_lets_the_member_be_ready_again() {
    let cluster = Cluster::builder(EtcdVersion::V3_5).start();
    let m0 = &cluster[0];
    cluster.put_many("kept/", 40, 16);
    let pod = tempfile::tempdir().unwrap();
    let witness = pod.path().join("witness.json");
    let serve = Serve::beside(m0.client_url())
        .data_dir(m0.data_dir())
        .verdict_file(&pod.path().join("preflight.json"))
        .start();
    serve.wait_readyz(200);
    let status = m0.endpoint_status()["raftIndex"].as_u64().unwrap();
    let mark = assert_eventually!(
        {
            let doc = read_witness(&witness)?;
            let index = doc["raft_index"].as_u64().unwrap_or_default();
            ensure(index >= status, format!("the witness file holds {doc}"))?;
            Ok(index)
        },
        "the witness file records the member's index {status}"
    );
    re_bootstrap(m0);
    serve.wait_readyz_saying(503, "high-water mark");
    // The member runs on (its new history, past the commit index the WAL had
    // when serve started: only the latch holds it not ready now); then the
    // operator acknowledges.
    cluster.put_many("after/", usize::try_from(mark).unwrap() + 20, 8);
    let now = m0.endpoint_status()["raftIndex"].as_u64().unwrap();
    assert!(now > mark, "{now}");
    assert_eventually!(
        {
            let seen = metric(&serve.metrics(), "etcd_agent_raft_index", "").unwrap_or_default();
            ensure(
                seen >= now as f64,
                format!("the sidecar saw raft index {seen}"),
            )
        },
        "the sidecar polls the member at {now}"
    );
    serve.wait_readyz_saying(503, "high-water mark");
    std::fs::remove_file(&witness).unwrap();
    serve.wait_readyz(200);
    let doc = assert_eventually!(
        {
            let doc = read_witness(&witness)?;
            let index = doc["raft_index"].as_u64().unwrap_or_default();
            ensure(
                index > mark && index <= now && doc["regressed_to"].is_null(),
                format!("the witness file holds {doc}"),
            )?;
            Ok(doc)
        },
        "a new mark at the member's position {now}\n{}",
        tail(&serve.log())
    );
    assert_eq!(doc["format"], 2, "{doc}");
    assert!(
        serve.log().contains("the witness file was removed"),
        "{}",
        tail(&serve.log())
    );
}
