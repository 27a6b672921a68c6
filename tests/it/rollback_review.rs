//! An adversarial review of issue 29's rules (rows 5, 5d, 5e, 6e–6g), through
//! real etcd: states for which preflight says `start` and etcd then loses
//! acknowledged writes or forks. Each test asserts what a sound guard must do
//! (not start) and, where today's preflight starts, starts etcd as the kubelet
//! would and reports what happened, so a failure names the damage.
//!
//! * A volume put back to an older copy of itself (issue 29 case 1) whose
//!   witness Lease exists and records the mark, but cannot be read at the
//!   moment preflight runs (the API server answers 503): the mark is silently
//!   dropped and the member starts on row 5. An empty directory in the same
//!   position is `phase-unknown` (row 9b); an initialized one is not.
//! * A member left out of a restore: two members restored from a backup
//!   above their witnesses (row 5e, the runbook's deliberate path) while the
//!   third, whose volume is intact, is down; when it comes back it starts on
//!   row 5 into the restored history, a different history under the same IDs.
//! * Issue 29 case 1 with the copy taken after the witness Lease's last
//!   periodic renewal (the real sidecar, a real kube-apiserver): the Lease
//!   recorded less than the member then acknowledged, and the member started
//!   on row 5. Fixed: the sidecar renews early when the proven position moves
//!   and, at shutdown once etcd has exited, records the position its WAL
//!   holds; the test now asserts that the Lease holds the acknowledged writes
//!   after the sidecar's exit, and that preflight does not start the copy.

use serde_json::{json, Value};

use crate::common::*;
use crate::kube_fake::{lease_path, FakeApi, Fault, NAMESPACE};
use crate::kube_real::{annotation, leases, World, NS as REAL_NS, WITNESS};
use crate::preflight_support::*;
use crate::rollback::{
    acknowledged, env_with_witness, form_again_by_restore, raft_index, sidecar, Sidecar,
};
use crate::serve_support::{block_on, Serve};
use k8s_openapi::api::coordination::v1::Lease;

/// The witness Lease `etcd-witness-<member>` as the sidecar writes it, holding
/// the mark a real sidecar proved and wrote to its witness file (`mark`).
fn witness_lease(member: &str, mark: &Value) -> Value {
    let key = |k: &str| format!("etcd-member-agent.cozystack.io/{k}");
    let mut annotations = serde_json::Map::new();
    let mut put = |k: &str, v: String| {
        annotations.insert(key(k), Value::String(v));
    };
    put("format", "2".into());
    put(
        "member-id",
        mark["member_id"].as_str().expect("member_id").into(),
    );
    put(
        "cluster-id",
        mark["cluster_id"].as_str().expect("cluster_id").into(),
    );
    put(
        "raft-index",
        mark["raft_index"].as_u64().expect("raft_index").to_string(),
    );
    put(
        "raft-term",
        mark["raft_term"].as_u64().expect("raft_term").to_string(),
    );
    if let Some(r) = mark["revision"].as_i64() {
        put("revision", r.to_string());
    }
    if let Some(t) = mark["token_sha256"].as_str() {
        put("token-sha256", t.into());
    }
    json!({
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {
            "name": format!("etcd-witness-{member}"),
            "namespace": NAMESPACE,
            "labels": {
                "app.kubernetes.io/name": "etcd-member-agent",
                "app.kubernetes.io/component": "witness",
            },
            "annotations": annotations,
        },
        "spec": {"holderIdentity": member, "leaseDurationSeconds": 30},
    })
}

/// preflight's env for member `i` in a Pod: the witness Lease read through
/// `api` (no witness file: a new Pod's emptyDir is empty).
fn pod_env(cluster: &Cluster, i: usize, api: &FakeApi) -> Env {
    let mut env = cluster.agent_env(i);
    for (k, v) in [
        ("AGENT_KUBE", "true".to_owned()),
        ("POD_NAMESPACE", NAMESPACE.to_owned()),
        ("POD_NAME", cluster[i].name().to_owned()),
        ("KUBECONFIG", api.kubeconfig_path().display().to_string()),
    ] {
        env = with(&env, k, v);
    }
    env
}

/// Issue 29 case 1 with the witness Lease present but unreadable for the
/// length of preflight's budget.
fn a_rolled_back_volume_whose_witness_lease_cannot_be_read(version: EtcdVersion) {
    let mut cluster = Cluster::builder(version)
        .members(3)
        .token(format!("lease-unread-{}", version.label()))
        .start();
    let pod = scratch();
    let w1 = sidecar(&cluster[1], pod.path());
    cluster.put("tenant/config", "precious");
    settle(&cluster, "marker/formed");
    w1.wait_mark(raft_index(&cluster[1]));

    // A copy of m1's volume at T; m1 serves on.
    let backup = scratch();
    let copy = backup.path().join("data");
    cluster[1].stop();
    copy_dir(cluster[1].data_dir(), &copy);
    cluster[1].start();
    cluster[1].wait_healthy();

    // m2 is down; 20 writes are acknowledged by m0 and m1; the sidecar proves
    // them on m1's disk.
    cluster[2].stop();
    let keys = acknowledged(&cluster[1], "acked/", 20);
    let mark = w1.wait_mark(raft_index(&cluster[1]));
    drop(w1);

    // m0 and m1 stop; m1's volume is put back to the copy; m2 comes back.
    cluster[0].stop();
    cluster[1].stop();
    std::fs::remove_dir_all(cluster[1].data_dir()).expect("remove m1's data");
    copy_dir(&copy, cluster[1].data_dir());
    cluster[2].start();

    // The Lease holds the mark the sidecar proved.
    let lease = witness_lease(cluster[1].name(), &mark);
    let api = block_on(async { FakeApi::start().await.object(lease) });
    let env = pod_env(&cluster, 1, &api);
    let step = "m1 on its older copy, the witness Lease readable";
    preflight(&env)
        .expect(step, 17, "refuse-rolled-back")
        .row(step, "6e")
        .reason_mentions(step, "witness Lease");

    // The same state, the API server answering the Lease's GET with 503 for
    // the whole budget (an overloaded or restarting control plane: the
    // moment a whole cluster comes back after an outage).
    let path = lease_path(NAMESPACE, &format!("etcd-witness-{}", cluster[1].name()));
    api.set_fault(path, Fault::Status(503), None);
    let step = "m1 on its older copy, the witness Lease unreadable";
    let v = preflight(&env);
    if v.run.code == 0 {
        // What the kubelet does next: etcd starts. m1 and m2 are a quorum
        // without the 20 acknowledged writes.
        cluster[1].start();
        cluster[1].wait_healthy();
        let readable = keys
            .iter()
            .filter(|k| cluster[1].try_get(k, false).ok().flatten().as_deref() == Some("acked"))
            .count();
        panic!(
            "{step}: preflight said {} (row {}) although the Lease that proves raft index {} exists and could not be read; etcd then served {readable} of {} acknowledged writes (m1 and m2 form a quorum without them)\nreason: {}\nwitness evidence: {}",
            v.doc()["verdict"],
            v.doc()["row"],
            mark["raft_index"],
            keys.len(),
            v.doc()["reason"],
            v.evidence("witness"),
        );
    }
    assert_ne!(
        v.doc()["verdict"],
        "start",
        "{step}: a witness that could not be read is not a witness that said nothing\n{}",
        v.run
    );
    v.expect(step, 14, "phase-unknown")
        .row(step, "6i")
        .reason_mentions(step, "503");
    assert!(
        v.doc()["remedy"]
            .as_str()
            .is_some_and(|r| r.starts_with("make the witness Lease readable (")),
        "{step}: the remedy names the Lease\n{}",
        v.run
    );
    let _ = &mut cluster;
}

/// etcdutl `snapshot restore` of the members `which` from `snapshot`, each
/// with its own name, the whole --initial-cluster and the token.
fn restore_members(cluster: &Cluster, snapshot: &std::path::Path, which: &[usize], bump: u64) {
    let version = cluster[0].version();
    let etcdutl = version.etcdutl().expect("etcdutl of the line");
    let initial: Vec<String> = cluster
        .members()
        .iter()
        .map(|m| format!("{}={}", m.name(), m.peer_url()))
        .collect();
    let token = value(&cluster.agent_env(0), "ETCD_INITIAL_CLUSTER_TOKEN")
        .expect("token")
        .to_owned();
    for &i in which {
        let m = &cluster[i];
        std::fs::remove_dir_all(m.data_dir()).expect("remove the data dir");
        let out = std::process::Command::new(&etcdutl)
            .arg("snapshot")
            .arg("restore")
            .arg(snapshot)
            .arg(format!("--name={}", m.name()))
            .arg(format!("--initial-cluster={}", initial.join(",")))
            .arg(format!("--initial-cluster-token={token}"))
            .arg(format!("--initial-advertise-peer-urls={}", m.peer_url()))
            .arg(format!("--data-dir={}", m.data_dir().display()))
            .arg(format!("--bump-revision={bump}"))
            .arg("--mark-compacted")
            .output()
            .expect("run etcdutl");
        assert!(
            out.status.success(),
            "etcdutl snapshot restore: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// What etcd did once the member left out of the restore started: a member
/// that exited (a panic), or two members serving different data for one key.
fn damage(cluster: &Cluster, kept: &str, restored: &str) -> Result<String, String> {
    for m in cluster.members() {
        if let Some(status) = m.exit_status() {
            return Ok(format!(
                "{} exited ({status}):\n{}",
                m.name(),
                m.log_tail(6)
            ));
        }
    }
    let get = |i: usize, key: &str| cluster[i].try_get(key, true);
    let (m2_kept, m0_kept) = (get(2, kept)?, get(0, kept)?);
    if m2_kept.is_some() && m0_kept.is_none() {
        let (m2_new, m0_new) = (get(2, restored)?, get(0, restored)?);
        let status = |i: usize| {
            cluster[i]
                .try_endpoint_status()
                .map(|s| {
                    format!(
                        "raft index {}, term {}, revision {}",
                        s["raftIndex"], s["raftTerm"], s["header"]["revision"]
                    )
                })
                .unwrap_or_else(|e| e)
        };
        return Ok(format!(
            "a fork: m2 serves {kept} = {m2_kept:?} and {restored} = {m2_new:?} ({}); m0 serves {kept} = {m0_kept:?} and {restored} = {m0_new:?} ({})",
            status(2),
            status(0)
        ));
    }
    Err("no member exited and m2 serves what m0 serves so far".into())
}

/// Two members restored above their witnesses while the third, intact, is
/// down; the third comes back.
fn a_member_left_out_of_a_restore(version: EtcdVersion) {
    let cluster = Cluster::builder(version)
        .members(3)
        .token(format!("left-out-{}", version.label()))
        .start();
    cluster.put("tenant/config", "precious");
    settle(&cluster, "marker/formed");
    // IDs that follow from names, peer URLs and token, so a restore gives the
    // same IDs (as in rollback::a_whole_cluster_restored_under_its_own_ids).
    form_again_by_restore(&cluster);
    settle(&cluster, "marker/restored-once");
    let backup = scratch();
    let snapshot = backup.path().join("snapshot.db");
    cluster.snapshot_save(&snapshot);
    let pods: Vec<tempfile::TempDir> = (0..3).map(|_| scratch()).collect();
    let sidecars: Vec<Sidecar> = (0..3)
        .map(|i| sidecar(&cluster[i], pods[i].path()))
        .collect();
    let kept = acknowledged(&cluster[2], "after-backup/", 20);
    let marks: Vec<Value> = sidecars
        .iter()
        .enumerate()
        .map(|(i, s)| s.wait_mark(raft_index(&cluster[i])))
        .collect();
    drop(sidecars);
    for m in cluster.members() {
        m.stop();
    }
    let revision_seen = marks
        .iter()
        .filter_map(|m| m["revision"].as_u64())
        .max()
        .expect("the witnesses record a revision");

    // m0's and m1's volumes are lost and restored from the backup, bumped
    // above what their witnesses saw (the runbook's deliberate path); m2's
    // volume is intact, and m2 is down meanwhile.
    restore_members(&cluster, &snapshot, &[0, 1], revision_seen + 1_000);
    let env = |i: usize| {
        with(
            &env_with_witness(&cluster, i, &pods[i].path().join("witness.json")),
            "AGENT_VERDICT_FILE",
            pods[i].path().join("preflight.json").display().to_string(),
        )
    };
    for i in 0..2 {
        let step = format!("m{i} restored above its witness, m2 down");
        preflight(&env(i))
            .expect(&step, 0, "start")
            .row(&step, "5e");
        cluster[i].start();
    }
    cluster[0].wait_healthy();
    cluster[1].wait_healthy();
    let restored = acknowledged(&cluster[0], "restored-history/", 20);

    // m2 comes back on its intact volume: a member of the history before the
    // restore, under the same member and cluster IDs.
    let step = "m2, left out of the restore, comes back";
    let v = preflight(&env(2));
    if v.run.code == 0 {
        cluster[2].start();
        let what = eventually(patience(), || damage(&cluster, &kept[0], &restored[0]))
            .unwrap_or_else(|e| format!("no damage seen within patience ({e})"));
        panic!(
            "{step}: preflight said {} (row {}) and etcd m2 joined the restored history; then: {what}\nreason: {}\nthe live list preflight read: {}",
            v.doc()["verdict"],
            v.doc()["row"],
            v.doc()["reason"],
            v.evidence("etcd")["said"]["members"],
        );
    }
    assert_ne!(
        v.doc()["verdict"],
        "start",
        "{step}: a member of another history under the same IDs must not start into it\n{}",
        v.run
    );
    v.expect(step, 11, "refuse-foreign")
        .row(step, "6h")
        .reason_mentions(step, "never started");
}

/// The witness Lease of `name`, read by the admin, and its raft index.
fn lease_index(w: &World, name: &str) -> (Option<Lease>, u64) {
    let lease = block_on(leases(&w.admin, REAL_NS).get_opt(name)).expect("read the Lease");
    let index = lease
        .as_ref()
        .and_then(|l| annotation(l, &format!("{WITNESS}raft-index")).parse().ok())
        .unwrap_or(0);
    (lease, index)
}

/// Issue 29 case 1, the copy taken after the witness Lease's last renewal:
/// the real sidecar writes the Lease to a real kube-apiserver, every
/// `--witness-interval`; the copy, the writes acknowledged without m2, and
/// the stop of m0 and m1 (etcd first, then its sidecar, as a Pod's deletion
/// stops a native sidecar after the main container) all fall between two
/// periodic renewals (20 s apart here, 10 s by default, so that the window
/// holds the whole sequence on a loaded machine). What records the writes is
/// the early renewal and the last one at shutdown: the Lease, after the
/// sidecar's exit, holds the raft index m1 reached with them, and the sidecar
/// logged the last renewal.
fn a_copy_taken_after_the_last_renewal(version: EtcdVersion) {
    let mut cluster = Cluster::builder(version)
        .members(3)
        .token(format!("lag-{}", version.label()))
        .start();
    cluster.put("tenant/config", "precious");
    settle(&cluster, "marker/formed");
    let token = value(&cluster.agent_env(1), "ETCD_INITIAL_CLUSTER_TOKEN")
        .expect("token")
        .to_owned();
    let w = block_on(World::start());
    let name = cluster[1].name().to_owned();
    let lease_name = format!("etcd-witness-{name}");
    let mut serve = Serve::beside(cluster[1].client_url())
        .data_dir(cluster[1].data_dir())
        .arg("--kube=true")
        .arg(format!("--namespace={REAL_NS}"))
        .arg(format!("--pod-name={name}"))
        .arg("--pod-uid=9a1e0c44-m1-pod")
        .arg(format!("--initial-cluster-token={token}"))
        .arg(format!("--kubeconfig={}", w.kubeconfig()))
        .arg("--witness-interval=20s")
        .start();
    cluster[2].stop();
    // A renewal that records m1's position: the window starts now.
    let settled = raft_index(&cluster[1]);
    let renewed = assert_eventually!(
        {
            let (lease, index) = lease_index(&w, &lease_name);
            ensure(index >= settled, format!("the Lease holds {lease:?}")).map(|()| index)
        },
        "the sidecar's Lease records raft index {settled}\n{}",
        serve.log()
    );

    // A copy of m1's volume (a VolumeSnapshot), then 20 writes acknowledged by
    // m0 and m1, then m0 and m1 stop (m1's Pod deleted: etcd, then its sidecar).
    let backup = scratch();
    let copy = backup.path().join("data");
    cluster[1].stop();
    copy_dir(cluster[1].data_dir(), &copy);
    let copied = copy_end(&copy);
    cluster[1].start();
    cluster[1].wait_healthy();
    let keys = acknowledged(&cluster[1], "acked/", 20);
    let acked_at = raft_index(&cluster[1]);
    cluster[0].stop();
    cluster[1].stop();
    serve.sigterm();
    assert!(
        serve.wait_exit(patience()).is_some(),
        "the sidecar exits on SIGTERM\n{}",
        serve.log()
    );
    let (lease, mark) = lease_index(&w, &lease_name);
    assert!(
        acked_at > copied,
        "precondition: the writes after the copy moved m1's raft index ({acked_at}) past the copy's log end ({copied})"
    );
    assert!(
        mark >= acked_at,
        "after the sidecar's exit the Lease records raft index {mark}, behind {acked_at}, which m1 reached with the 20 writes it acknowledged after the copy (log end {copied})\n{lease:?}\n{}",
        serve.log()
    );
    assert!(
        serve.log().contains(
            "shutting down: recorded the position the member's disk holds in the witness Lease"
        ),
        "the sidecar logs its last renewal at shutdown\n{}",
        serve.log()
    );
    drop(serve);

    // m1's volume is put back to the copy; m2 comes back.
    std::fs::remove_dir_all(cluster[1].data_dir()).expect("remove m1's data");
    copy_dir(&copy, cluster[1].data_dir());
    cluster[2].start();
    let mut env = cluster.agent_env(1);
    for (k, v) in [
        ("AGENT_KUBE", "true".to_owned()),
        ("POD_NAMESPACE", REAL_NS.to_owned()),
        ("POD_NAME", name.clone()),
        ("KUBECONFIG", w.kubeconfig()),
    ] {
        env = with(&env, k, v);
    }
    let step = "m1 on a copy taken after the Lease's last renewal";
    let v = preflight(&env);
    if v.run.code == 0 {
        cluster[1].start();
        cluster[1].wait_healthy();
        let readable = keys
            .iter()
            .filter(|k| cluster[1].try_get(k, false).ok().flatten().as_deref() == Some("acked"))
            .count();
        panic!(
            "{step}: preflight said {} (row {}): the Lease records raft index {mark} (its renewal before the copy recorded {renewed}), the copy ends at {copied}, and the 20 writes m1 acknowledged after the copy are nowhere in the evidence; etcd then served {readable} of {} acknowledged writes\nreason: {}",
            v.doc()["verdict"],
            v.doc()["row"],
            keys.len(),
            v.doc()["reason"],
        );
    }
    assert_ne!(
        v.doc()["verdict"],
        "start",
        "{step}: a copy behind what the member acknowledged must not start on its own word\n{}",
        v.run
    );
    let _ = &mut cluster;
}

/// Where the log of the data dir `dir` ends, as `inspect` reads it.
pub(crate) fn copy_end(dir: &std::path::Path) -> u64 {
    let out = agent()
        .args(["inspect", "-o", "json", "--data-dir"])
        .arg(dir)
        .output()
        .expect("run inspect");
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "inspect's document ({e}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    });
    doc.pointer("/last_index")
        .and_then(Value::as_u64)
        .unwrap_or_else(|| panic!("inspect names no WAL last index: {doc}"))
}

#[test]
fn a_copy_taken_after_the_witness_leases_last_renewal_is_not_started_36() {
    a_copy_taken_after_the_last_renewal(EtcdVersion::V3_6);
}

#[test]
fn a_rolled_back_volume_whose_witness_lease_cannot_be_read_is_not_started_36() {
    a_rolled_back_volume_whose_witness_lease_cannot_be_read(EtcdVersion::V3_6);
}

#[test]
fn a_member_left_out_of_a_restore_is_not_started_into_the_restored_history_36() {
    a_member_left_out_of_a_restore(EtcdVersion::V3_6);
}
