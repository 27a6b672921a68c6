//! The `/readyz` high-water mark without Kubernetes (issue 17, docs/commands.md § serve): the
//! witness file beside the verdict file keeps the highest raft index a consistent
//! member reached, across restarts of `serve`, and a member seen below it stays
//! not ready even when new writes push its index past the mark.

use crate::common::*;
use crate::serve_support::{metric, Serve};

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
