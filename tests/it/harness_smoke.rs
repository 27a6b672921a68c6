//! Smoke tests of the real-etcd harness itself: clusters form the way the operator
//! forms them, members restart with their frozen flags, and no etcd outlives the
//! cluster that started it. Every later real-etcd test stands on these.

use crate::common::*;

/// Forms a three-member cluster and reports how long formation took.
fn three_members(version: EtcdVersion) -> Cluster {
    let cluster = Cluster::builder(version).members(3).token("smoke").start();
    eprintln!("{version}: 3 members formed in {:.1?}", cluster.formed_in());
    cluster
}

/// Drops the cluster and proves by PID that none of its etcds survived.
fn drop_and_prove_no_etcd_left(cluster: Cluster) {
    let pids = cluster.pids();
    let dir = cluster.dir().to_path_buf();
    assert!(!pids.is_empty(), "no etcd running before the drop");
    drop(cluster);
    for pid in pids {
        assert!(!pid_exists(pid), "etcd pid {pid} survived its cluster");
    }
    assert!(!dir.exists(), "{} survived its cluster", dir.display());
}

fn seeded_like_the_operator_serves_one_keyspace_with_one_cluster_id(version: EtcdVersion) {
    let cluster = three_members(version);

    // The seed bootstrapped alone; every other member joined with the initial
    // cluster that `member add` printed for it.
    let (m0, m1, m2) = (&cluster[0], &cluster[1], &cluster[2]);
    assert_eq!(m0.initial_cluster_state(), ClusterState::New);
    assert_eq!(m0.initial_cluster(), format!("m0={}", m0.peer_url()));
    assert_eq!(m1.initial_cluster_state(), ClusterState::Existing);
    assert_eq!(m2.initial_cluster_state(), ClusterState::Existing);
    for member in [m0, m1] {
        let entry = format!("{}={}", member.name(), member.peer_url());
        assert!(
            m2.initial_cluster().split(',').any(|e| e == entry),
            "{entry} missing from m2's initial cluster"
        );
    }
    assert!(m0
        .argv()
        .contains(&"--initial-cluster-state=new".to_string()));

    m0.put("smoke/key", "written through m0");
    assert_eq!(
        cluster.get("smoke/key").as_deref(),
        Some("written through m0")
    );
    for member in cluster.members() {
        assert_eventually!(
            member.try_get("smoke/key", true).and_then(|v| ensure(
                v.as_deref() == Some("written through m0"),
                format!("{} holds {v:?}", member.name())
            )),
            "{} replicates the key",
            member.name()
        );
    }

    let statuses: Vec<_> = cluster
        .members()
        .iter()
        .map(|m| m.endpoint_status())
        .collect();
    let cluster_ids: Vec<u64> = statuses
        .iter()
        .map(|s| s["header"]["cluster_id"].as_u64().unwrap())
        .collect();
    let member_ids: Vec<u64> = statuses
        .iter()
        .map(|s| s["header"]["member_id"].as_u64().unwrap())
        .collect();
    assert!(
        cluster_ids.iter().all(|id| *id == cluster_ids[0]),
        "cluster IDs differ: {cluster_ids:x?}"
    );
    let mut distinct = member_ids.clone();
    distinct.sort();
    distinct.dedup();
    assert_eq!(
        distinct.len(),
        3,
        "member IDs not distinct: {member_ids:x?}"
    );
    for (member, id) in cluster.members().iter().zip(&member_ids) {
        assert_eq!(member.id(), Some(*id), "{}'s recorded ID", member.name());
    }

    let list = cluster.member_list();
    let names: Vec<&str> = list["members"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m["name"].as_str())
        .collect();
    assert_eq!(names.len(), 3, "every member started and named: {list}");

    for member in cluster.members() {
        assert!(
            !member.wal_files().is_empty(),
            "{} has no member/wal/*.wal",
            member.data_dir().display()
        );
    }
    drop_and_prove_no_etcd_left(cluster);
}

#[test]
fn three_members_seeded_like_the_operator_serve_one_keyspace_with_one_cluster_id_on_3_4() {
    seeded_like_the_operator_serves_one_keyspace_with_one_cluster_id(EtcdVersion::V3_4);
}

#[test]
fn three_members_seeded_like_the_operator_serve_one_keyspace_with_one_cluster_id_on_3_5() {
    seeded_like_the_operator_serves_one_keyspace_with_one_cluster_id(EtcdVersion::V3_5);
}

fn killed_member_rejoins_with_its_frozen_flags(version: EtcdVersion) {
    let cluster = three_members(version);
    let m2 = &cluster[2];
    let id = m2.id();
    let old_pid = m2.pid().unwrap();

    m2.kill9();
    assert!(!m2.is_running());
    assert!(!pid_exists(old_pid), "the killed etcd was not reaped");
    cluster[0].put("smoke/while-down", "missed by m2");

    m2.start();
    m2.wait_healthy();
    let new_pid = m2.pid().unwrap();
    assert_ne!(new_pid, old_pid);
    let cmdline = std::fs::read(format!("/proc/{new_pid}/cmdline")).unwrap();
    let cmdline: Vec<String> = cmdline
        .split(|b| *b == 0)
        .filter(|a| !a.is_empty())
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect();
    assert_eq!(
        cmdline,
        m2.argv(),
        "restarted with other flags than it was created with"
    );

    assert_eventually!(
        m2.try_get("smoke/while-down", true).and_then(|v| ensure(
            v.as_deref() == Some("missed by m2"),
            format!("m2 holds {v:?}")
        )),
        "m2 catches up on the write it missed"
    );
    let status = m2.endpoint_status();
    assert_eq!(
        status["header"]["member_id"].as_u64(),
        id,
        "m2 came back as another member"
    );
    drop_and_prove_no_etcd_left(cluster);
}

#[test]
fn member_killed_with_sigkill_rejoins_with_its_frozen_flags_on_3_4() {
    killed_member_rejoins_with_its_frozen_flags(EtcdVersion::V3_4);
}

#[test]
fn member_killed_with_sigkill_rejoins_with_its_frozen_flags_on_3_5() {
    killed_member_rejoins_with_its_frozen_flags(EtcdVersion::V3_5);
}

fn snapshot_count_100_writes_a_snap_file_after_500_puts(version: EtcdVersion) {
    let cluster = Cluster::builder(version).snapshot_count(100).start();
    let member = &cluster[0];
    let stats = cluster.put_many("smoke/bulk/", 500, 128);
    eprintln!("{version}: 500 puts in {:.1?}", stats.elapsed);
    assert_eventually!(
        ensure(!member.snap_files().is_empty(), "no member/snap/*.snap yet"),
        "{version} writes a .snap file"
    );
    assert_eq!(
        cluster.get("smoke/bulk/00000499").map(|v| v.len()),
        Some(128)
    );

    // A stopped member's directory is stable, and the tree proof sees a change.
    member.stop();
    let before = tree_snapshot(member.data_dir());
    assert_tree_unchanged(&before, &tree_snapshot(member.data_dir()));
    std::fs::write(member.data_dir().join("stray"), b"x").unwrap();
    let diff = tree_diff(&before, &tree_snapshot(member.data_dir()));
    assert!(diff.iter().any(|d| d == "created: stray"), "{diff:?}");
}

#[test]
fn single_member_with_snapshot_count_100_writes_a_snap_file_after_500_puts_on_3_4() {
    snapshot_count_100_writes_a_snap_file_after_500_puts(EtcdVersion::V3_4);
}

#[test]
fn single_member_with_snapshot_count_100_writes_a_snap_file_after_500_puts_on_3_5() {
    snapshot_count_100_writes_a_snap_file_after_500_puts(EtcdVersion::V3_5);
}

#[test]
fn agent_runs_with_a_clean_environment() {
    let run = run_agent(["--help"], &[("ETCD_DATA_DIR", "/nonexistent")]);
    run.assert_code(0);
    assert!(run.stdout.contains("inspect"), "{run}");
}

fn wiped_seed_reforms_with_the_same_ids(version: EtcdVersion) {
    let cluster = Cluster::builder(version).token("smoke").start();
    let seed = &cluster[0];
    seed.put("smoke/acknowledged", "lost with the data dir");
    let before = seed.endpoint_status();

    seed.kill9();
    seed.wipe_data_dir();
    assert!(seed.data_dir().read_dir().unwrap().next().is_none());
    seed.start();
    seed.wait_healthy();

    // The hazard the agent exists for: same identity, empty keyspace, no error.
    let after = seed.endpoint_status();
    assert_eq!(after["header"]["member_id"], before["header"]["member_id"]);
    assert_eq!(
        after["header"]["cluster_id"],
        before["header"]["cluster_id"]
    );
    assert_eq!(seed.get("smoke/acknowledged"), None);
}

#[test]
fn wiped_seed_restarted_with_its_frozen_flags_reforms_with_the_same_ids_on_3_4() {
    wiped_seed_reforms_with_the_same_ids(EtcdVersion::V3_4);
}

#[test]
fn wiped_seed_restarted_with_its_frozen_flags_reforms_with_the_same_ids_on_3_5() {
    wiped_seed_reforms_with_the_same_ids(EtcdVersion::V3_5);
}

#[test]
fn a_test_that_panics_leaves_no_etcd_behind() {
    let pids = std::sync::Mutex::new(Vec::new());
    let outcome = std::panic::catch_unwind(|| {
        let cluster = Cluster::builder(EtcdVersion::V3_5).start();
        pids.lock().unwrap().extend(cluster.pids());
        panic!("deliberate panic: the cluster must die with the test");
    });
    assert!(outcome.is_err());
    let pids = pids.into_inner().unwrap();
    assert_eq!(pids.len(), 1);
    assert!(!pid_exists(pids[0]), "etcd {} survived the panic", pids[0]);
}

/// Not a smoke test: measures bulk writes (`cargo test --test it --
/// --ignored --exact harness_smoke::put_many_writes_a_gigabyte_of_wal_in_seconds --nocapture`). About 6-8 s per version on 2 cores.
#[test]
#[ignore]
fn put_many_writes_a_gigabyte_of_wal_in_seconds() {
    for version in EtcdVersion::ALL {
        let cluster = Cluster::builder(version)
            .arg("--quota-backend-bytes=8589934592")
            .start();
        let stats = cluster.put_many("bulk/", 1100, 1 << 20);
        let wal: u64 = cluster[0]
            .wal_files()
            .iter()
            .map(|p| std::fs::metadata(p).unwrap().len())
            .sum();
        eprintln!(
            "{version}: {} puts, {} MiB in {:.1?} ({:.0} MiB/s); {} WAL files, {} MiB",
            stats.puts,
            stats.bytes >> 20,
            stats.elapsed,
            (stats.bytes >> 20) as f64 / stats.elapsed.as_secs_f64(),
            cluster[0].wal_files().len(),
            wal >> 20
        );
        assert!(wal >= 1 << 30, "only {} MiB of WAL", wal >> 20);
    }
}

/// Each line built from the Go modules is the release `tools/etcd/<line>/go.mod`
/// pins, for all three binaries, and the harness's labels say the same.
#[test]
fn every_built_line_is_the_release_its_wrapper_module_pins() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let version_of = |bin: std::path::PathBuf, arg: &str| {
        let mut cmd = std::process::Command::new(&bin);
        cmd.env_clear().arg(arg);
        let run = run_command(cmd);
        run.assert_code(0);
        run.stdout
    };
    for (version, line) in [
        (EtcdVersion::V3_5Latest, "3.5"),
        (EtcdVersion::V3_6, "3.6"),
        (EtcdVersion::V3_7, "3.7"),
    ] {
        let go_mod = std::fs::read_to_string(root.join("tools/etcd").join(line).join("go.mod"))
            .expect("the wrapper module");
        let want = format!("v{}", version.label());
        for module in ["server", "etcdctl", "etcdutl"] {
            let pinned = format!("go.etcd.io/etcd/{module}/v3 {want}");
            assert!(go_mod.contains(&pinned), "{line}/go.mod lacks {pinned}");
        }
        let etcd = version_of(version.etcd(), "--version");
        assert!(
            etcd.contains(&format!("etcd Version: {}\n", version.label())),
            "{version}: {etcd}"
        );
        let ctl = version_of(version.etcdctl(), "version");
        assert!(
            ctl.contains(&format!("etcdctl version: {}\n", version.label())),
            "{version}: {ctl}"
        );
        let utl = version_of(version.etcdutl().expect("etcdutl"), "version");
        assert!(
            utl.contains(&format!("etcdutl version: {}\n", version.label())),
            "{version}: {utl}"
        );
    }
}

#[test]
fn three_members_seeded_like_the_operator_serve_one_keyspace_with_one_cluster_id_on_3_6() {
    seeded_like_the_operator_serves_one_keyspace_with_one_cluster_id(EtcdVersion::V3_6);
}

#[test]
fn three_members_seeded_like_the_operator_serve_one_keyspace_with_one_cluster_id_on_3_7() {
    seeded_like_the_operator_serves_one_keyspace_with_one_cluster_id(EtcdVersion::V3_7);
}
