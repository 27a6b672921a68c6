//! Real rolling upgrades across etcd lines, as an operator performs them: a
//! 3-member cluster seeded like the operator on the newest 3.5, written to, then
//! upgraded member by member to 3.6 and then to 3.7 (same flags, same data dir,
//! the next line's binary). Before every start `inspect` reads the stopped
//! member's dir and `preflight` must allow the start; after every start the
//! member serves every write made so far. The storage version moves only once
//! every member runs the new line (etcd raises the cluster version, then writes
//! `meta/storageVersion`), and `inspect` reports it before and after.
//!
//! 3.5 writes two kinds of v2 requests into the WAL (member attributes and the
//! cluster version); 3.6 converts them when it replays the WAL, 3.7 no longer
//! can and panics at start on one it replays, applied or not ("unmarshal should
//! never fail"). So the 3.6 → 3.7 step is only safe once every 3.6 member has a
//! snapshot past the last 3.5-era entry; the second test shows etcd 3.7's panic
//! when that snapshot is missing.

use std::time::Duration;

use crate::common::*;
use crate::preflight_support::*;
use serde_json::Value;

/// `--snapshot-count` for the upgraded cluster: small, so a few hundred writes on
/// 3.6 leave every member a snapshot past the 3.5-era entries of its WAL.
const SNAPSHOT_COUNT: u64 = 50;

/// The raft index of a member's newest `.snap` (`<term>-<index>.snap`), 0 without.
fn newest_snap_index(m: &Member) -> u64 {
    m.snap_files()
        .iter()
        .filter_map(|p| {
            let name = p.file_name()?.to_str()?.strip_suffix(".snap")?;
            u64::from_str_radix(name.split_once('-')?.1, 16).ok()
        })
        .max()
        .unwrap_or(0)
}

/// `inspect -o json` of a stopped member's data dir: exit 0, initialized.
fn inspect(m: &Member) -> Value {
    let run = run_agent(
        [
            "inspect",
            "--data-dir",
            &m.data_dir().display().to_string(),
            "-o",
            "json",
        ],
        &[("AGENT_KUBE", "false")],
    );
    run.assert_code(0);
    let json = run.json().clone();
    assert_eq!(json["state"], "initialized", "{run}");
    json
}

/// Every key written so far, read from every running member (serializable reads:
/// each member's own store).
fn assert_every_write_everywhere(cluster: &Cluster, written: &[(String, String)], step: &str) {
    for m in cluster.members() {
        for (k, v) in written {
            assert_eventually!(
                {
                    let got = m.try_get(k, true)?;
                    ensure(
                        got.as_deref() == Some(v.as_str()),
                        format!("{} has {k} = {got:?}", m.name()),
                    )
                },
                "{step}: {} serves {k}",
                m.name()
            );
        }
    }
}

/// What the running members say about the storage version once it settles.
fn wait_storage_version(cluster: &Cluster, want: &str, step: &str) {
    for m in cluster.members() {
        assert_eventually!(
            {
                let status = m.try_endpoint_status()?;
                ensure(
                    status["storageVersion"].as_str() == Some(want),
                    format!("{} reports {}", m.name(), status["storageVersion"]),
                )
            },
            "{step}: {} reaches storage version {want}",
            m.name()
        );
    }
}

/// Upgrades every member of `cluster` to `target`, one at a time, with inspect
/// and preflight before each start. `storage_before` is what every stopped dir
/// must report until the last member is upgraded.
fn upgrade_member_by_member(
    cluster: &mut Cluster,
    target: EtcdVersion,
    storage_before: &str,
    written: &mut Vec<(String, String)>,
) {
    for i in 0..cluster.len() {
        let step = format!("{} upgraded to {target}", cluster[i].name());
        let from = cluster[i].version();
        cluster[i].stop().expect("it ran");
        let report = inspect(&cluster[i]);
        assert_eq!(
            report["backend"]["storage_version"], storage_before,
            "{step}: the {from} dir before the upgrade: {report:#}"
        );
        cluster.member_mut(i).set_version(target);
        let v = preflight(&cluster.agent_env(i));
        v.expect(&step, 0, "start");
        assert_eq!(
            v.doc()["data_dir"]["member_id"],
            cluster[i].id_hex().expect("an ID").as_str(),
            "{step}\n{}",
            v.run
        );
        cluster[i].start();
        cluster[i].wait_healthy();
        let key = format!("upgrade/{}-{}", target.test_suffix(), cluster[i].name());
        cluster.put(&key, &step);
        written.push((key, step.clone()));
        assert_every_write_everywhere(cluster, written, &step);
    }
}

#[test]
fn a_cluster_seeded_on_3_5_upgrades_member_by_member_to_3_6_then_3_7_with_every_start_allowed() {
    let mut cluster = Cluster::builder(EtcdVersion::V3_5Latest)
        .members(3)
        .snapshot_count(SNAPSHOT_COUNT)
        .token("rolling-upgrade")
        .start();
    let mut written: Vec<(String, String)> = (0..20)
        .map(|i| (format!("before/{i:02}"), format!("written on 3.5, {i}")))
        .collect();
    for (k, v) in &written {
        cluster.put(k, v);
    }
    assert_every_write_everywhere(&cluster, &written, "seeded on 3.5");

    upgrade_member_by_member(&mut cluster, EtcdVersion::V3_6, "3.5.0", &mut written);
    wait_storage_version(&cluster, "3.6.0", "all on 3.6");

    // Every member snapshots past the last entry a 3.5 member proposed.
    let all_on_36 = cluster
        .members()
        .iter()
        .map(|m| {
            m.endpoint_status()["raftIndex"]
                .as_u64()
                .expect("raftIndex")
        })
        .max()
        .expect("members");
    cluster.put_many("on-3.6/", 4 * SNAPSHOT_COUNT as usize, 100);
    for m in cluster.members() {
        assert_eventually!(
            ensure(
                newest_snap_index(m) > all_on_36,
                format!(
                    "{}'s newest .snap is at {}, the cluster was all 3.6 at {all_on_36}",
                    m.name(),
                    newest_snap_index(m)
                )
            ),
            "{} snapshots on 3.6",
            m.name()
        );
    }

    upgrade_member_by_member(&mut cluster, EtcdVersion::V3_7, "3.6.0", &mut written);
    wait_storage_version(&cluster, "3.7.0", "all on 3.7");
    assert_every_write_everywhere(&cluster, &written, "all on 3.7");

    // etcd persists the storage version with its next backend commits; a clean
    // stop commits once more. Every stopped dir then says 3.7.
    for i in 0..cluster.len() {
        cluster[i].stop().expect("it ran");
        let report = inspect(&cluster[i]);
        assert_eq!(
            (
                &report["backend"]["storage_version"],
                &report["backend"]["storage_version_source"]
            ),
            (&Value::from("3.7.0"), &Value::from("meta/storageVersion")),
            "{}: {report:#}",
            cluster[i].name()
        );
        let check = upgrade_check(&cluster[i], "3.7");
        assert_eq!(check.code, 0, "nothing blocks 3.7 on its own dir: {check}");
    }

    // The downgrade etcd refuses: the 3.7 dir under the 3.6 binary. Preflight
    // refuses it first (16, row 5c), naming the findings; etcd 3.6 itself then
    // refuses to start on it.
    cluster.member_mut(0).set_version(EtcdVersion::V3_6);
    let v = preflight(&cluster.agent_env(0));
    v.expect("a 3.7 dir under etcd 3.6", 16, "refuse-version");
    assert_eq!(v.doc()["row"], "5c", "{}", v.run);
    let codes = finding_codes(&v.doc()["upgrade_check"]);
    assert!(
        codes.contains(&"storage-version-newer".to_string())
            && codes.contains(&"cluster-version-newer".to_string()),
        "{codes:?}\n{}",
        v.run
    );
    assert!(
        v.doc()["remedy"]
            .as_str()
            .unwrap_or_default()
            .contains("etcdutl migrate"),
        "{}",
        v.run
    );
    cluster[0].start();
    let msg = assert_etcd_exits(
        &cluster[0],
        None,
        "etcd 3.6 was expected to refuse the 3.7 dir",
    );
    eprintln!(
        "etcd 3.6.16 on a 3.7.3 dir: {}",
        msg.lines()
            .last()
            .unwrap_or_default()
            .chars()
            .take(300)
            .collect::<String>()
    );
}

/// Waits (30 s at most) for `m`'s etcd, just started, to exit as etcd itself
/// refuses or panics on a directory, and returns its exit message. Fails when it
/// becomes healthy, cannot bind, or exits without `why` in its message or log.
fn assert_etcd_exits(m: &Member, why: Option<&str>, expected: &str) -> String {
    match m.try_wait_healthy(Duration::from_secs(30)) {
        Err(WaitError::Exited(msg)) => {
            if let Some(why) = why {
                assert!(
                    msg.contains(why) || m.log_since_start().contains(why),
                    "{expected}, and it exited for another reason: {msg}"
                );
            }
            msg
        }
        other => panic!("{expected}: {other:?}"),
    }
}

/// `inspect --upgrade-check VERSION -o json` of a stopped member.
fn upgrade_check(m: &Member, version: &str) -> AgentRun {
    run_agent(
        [
            "inspect",
            "--data-dir",
            &m.data_dir().display().to_string(),
            "--upgrade-check",
            version,
            "-o",
            "json",
        ],
        &[("AGENT_KUBE", "false")],
    )
}

/// The codes of an upgrade check's findings.
fn finding_codes(check: &Value) -> Vec<String> {
    check["findings"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|f| f["code"].as_str().map(str::to_owned))
        .collect()
}

/// The upgrade etcd itself cannot finish: a 3.5 dir, run on 3.6 (which converts
/// the 3.5 v2 WAL entries as it replays them) without a snapshot past them, then
/// started on 3.7, which replays the same entries and panics. `inspect` still
/// reads the dir as initialized: nothing in it is corrupt; it is etcd 3.7 that
/// refuses what its predecessors wrote.
#[test]
fn etcd_3_7_panics_on_the_3_5_v2_entries_a_3_6_member_never_snapshotted_past() {
    let mut cluster = Cluster::builder(EtcdVersion::V3_5Latest)
        .token("v2-entries")
        .start();
    cluster.put("k", "written on 3.5");
    cluster[0].stop().expect("it ran");
    cluster.member_mut(0).set_version(EtcdVersion::V3_6);
    cluster[0].start();
    cluster[0].wait_healthy();
    wait_storage_version(&cluster, "3.6.0", "on 3.6");
    cluster[0].put("k2", "written on 3.6");
    cluster[0].stop().expect("it ran");
    assert!(
        cluster[0].snap_files().is_empty(),
        "no snapshot was taken: {:?}",
        cluster[0].snap_files()
    );
    let report = inspect(&cluster[0]);
    assert_eq!(report["backend"]["storage_version"], "3.6.0", "{report:#}");

    cluster.member_mut(0).set_version(EtcdVersion::V3_7);
    // Preflight sees it before etcd does: refuse-version, and what to do.
    let check = upgrade_check(&cluster[0], "3.7");
    assert_eq!(check.code, 16, "{check}");
    assert_eq!(
        finding_codes(&check.json()["upgrade_check"]),
        ["v2-wal-raw"],
        "{check}"
    );
    assert_eq!(
        upgrade_check(&cluster[0], "3.6").code,
        0,
        "3.6 converts them"
    );
    let v = preflight(&cluster.agent_env(0));
    v.expect("3.7 on v2 entries it cannot decode", 16, "refuse-version");
    cluster[0].start();
    assert_etcd_exits(
        &cluster[0],
        Some("unmarshal should never fail"),
        "etcd 3.7 was expected to panic on the 3.5 v2 entries",
    );
    eprintln!(
        "etcd 3.7.3 on a 3.5.35 -> 3.6.16 dir without a snapshot: {}",
        cluster[0]
            .log_since_start()
            .lines()
            .find(|l| l.contains(r#""level":"panic""#))
            .map(|l| l.chars().take(300).collect::<String>())
            .unwrap_or_default()
    );
}

/// v2 API writes through a 3.5 member (`--enable-v2`) stay in its WAL; etcd 3.6
/// converts only the member attributes and cluster version 3.5 writes itself and
/// panics on the rest ("detected disallowed v2 WAL"). Preflight for 3.6 refuses
/// first (16), for 3.5 it starts; etcd 3.6 itself then panics on the dir.
#[test]
fn etcd_3_6_panics_on_v2_api_writes_of_a_3_5_member_and_preflight_refuses_first() {
    let mut cluster = Cluster::builder(EtcdVersion::V3_5Latest)
        .members(1)
        .arg("--enable-v2")
        .token("v2-api")
        .start();
    let mut http = HttpConn::new(cluster[0].client_url(), Duration::from_secs(5)).expect("conn");
    for path in [
        "/v2/keys/app/config?value=v1",
        "/v2/keys/app/other?value=v2",
    ] {
        let r = http.request("PUT", path, b"").expect("a v2 write");
        assert!(
            r.status == 200 || r.status == 201,
            "v2 PUT {path}: {} {}",
            r.status,
            String::from_utf8_lossy(&r.body)
        );
    }
    let r = http
        .request("DELETE", "/v2/keys/app/other", b"")
        .expect("a v2 delete");
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    drop(http);
    cluster[0].stop().expect("it ran");

    let check = upgrade_check(&cluster[0], "3.6");
    assert_eq!(check.code, 16, "{check}");
    let doc = check.json()["upgrade_check"].clone();
    assert_eq!(finding_codes(&doc), ["v2-wal-disallowed"], "{check}");
    // Each v2 API request is there, and the v2 QGET that 3.5's /health makes
    // through raft when v2 is enabled.
    let seen: Vec<String> = check.json()["v2_replay"]["examples"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|e| {
            format!(
                "{} {}",
                e["method"].as_str().unwrap_or(""),
                e["path"].as_str().unwrap_or("")
            )
        })
        .collect();
    for want in [
        "PUT /1/app/config",
        "PUT /1/app/other",
        "DELETE /1/app/other",
    ] {
        assert!(seen.iter().any(|s| s == want), "{want} not in {seen:?}");
    }
    // Still 3.5: nothing blocks.
    preflight(&cluster.agent_env(0)).expect("3.5 again", 0, "start");

    cluster.member_mut(0).set_version(EtcdVersion::V3_6);
    let v = preflight(&cluster.agent_env(0));
    v.expect("3.6 on v2 API writes", 16, "refuse-version");
    assert_eq!(v.doc()["row"], "5c", "{}", v.run);
    assert!(
        v.doc()["remedy"]
            .as_str()
            .unwrap_or_default()
            .contains("3.5"),
        "{}",
        v.run
    );

    // 3.6 no longer has --enable-v2.
    cluster[0].start_with(|f| f.extra_args.retain(|a| a != "--enable-v2"));
    assert_etcd_exits(
        &cluster[0],
        Some("detected disallowed v2 WAL"),
        "etcd 3.6 was expected to panic on the v2 writes",
    );
}

/// A 3.6 → 3.5 downgrade as etcd runs it, and the start that would break a
/// member later. `etcdctl downgrade enable 3.5` records the downgrade in
/// `cluster/downgrade`; the leader then lowers the cluster version once every
/// member answers (member 2 is down here, so not yet), and each 3.6 member
/// takes a `.snap` when it applies the lowered version. A member restarted on
/// 3.5 before that starts (3.5's own check passes while a downgrade to 3.5 is
/// enabled) and answers "not capable"; its `.snap` and WAL keep version 3.6,
/// which 3.5 never snapshots past, so after the downgrade completes its next
/// restart panics (an adversarial review reproduced that crash loop).
/// Preflight refuses that start (16, `downgrade-not-lowered`, remedy: back to
/// 3.6); the test shows the "not capable" member on the unguarded start, then
/// follows the remedy to the end of the downgrade, every start on 3.5 allowed
/// and every write served.
#[test]
fn a_3_5_restart_before_the_cluster_version_is_lowered_is_refused_and_the_downgrade_then_completes()
{
    let mut cluster = Cluster::builder(EtcdVersion::V3_6)
        .members(3)
        .token("downgrade-window")
        .start();
    let mut written: Vec<(String, String)> = (0..10)
        .map(|i| (format!("dg/{i:02}"), format!("written on 3.6, {i}")))
        .collect();
    for (k, v) in &written {
        cluster.put(k, v);
    }
    // Member 2 down: the leader cannot lower the cluster version.
    cluster[2].stop().expect("it ran");
    let out = cluster[0].etcdctl(["downgrade", "enable", "3.5"]);
    assert!(
        out.status.success(),
        "etcdctl downgrade enable 3.5: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    cluster[1].stop().expect("it ran");

    let report = inspect(&cluster[1]);
    assert_eq!(
        (
            &report["backend"]["cluster_version"],
            &report["backend"]["downgrade"]["enabled"],
            &report["backend"]["downgrade"]["target_version"],
        ),
        (
            &Value::from("3.6.0"),
            &Value::from(true),
            &Value::from("3.5.0")
        ),
        "the stopped dir is in the window: {report:#}"
    );
    let check = upgrade_check(&cluster[1], "3.5.35");
    assert_eq!(check.code, 16, "{check}");
    assert_eq!(
        finding_codes(&check.json()["upgrade_check"]),
        ["downgrade-not-lowered"],
        "{check}"
    );
    // 3.6 ignores the downgrade record: its own restart is allowed.
    assert_eq!(upgrade_check(&cluster[1], "3.6").code, 0);
    cluster.member_mut(1).set_version(EtcdVersion::V3_5Latest);
    let v = preflight(&cluster.agent_env(1));
    v.expect(
        "a 3.5 restart before the cluster version is lowered",
        16,
        "refuse-version",
    );

    // The unguarded 3.5 start: it runs, but serves nothing while the
    // cluster version is 3.6 (member 2 still down, nobody lowers it).
    cluster[1].start();
    cluster[1].wait_healthy();
    let got = cluster[1].try_get("dg/00", true);
    assert!(
        got.as_ref().is_err_and(|e| e.contains("not capable")),
        "member 1 on 3.5 before the lowering: {got:?}"
    );

    // The remedy: member 1 back on 3.6; the leader lowers the cluster version
    // and migrates the storage to 3.5; then every member moves to 3.5, each
    // start allowed.
    cluster[1].stop().expect("it ran");
    cluster.member_mut(1).set_version(EtcdVersion::V3_6);
    preflight(&cluster.agent_env(1)).expect("member 1 back on 3.6", 0, "start");
    cluster[1].start();
    cluster[1].wait_healthy();
    preflight(&cluster.agent_env(2)).expect("member 2 back on 3.6", 0, "start");
    cluster[2].start();
    cluster[2].wait_healthy();
    wait_storage_version(&cluster, "3.5.0", "the cluster version lowered to 3.5");
    for i in 0..cluster.len() {
        let step = format!("{} downgraded to 3.5", cluster[i].name());
        cluster[i].stop().expect("it ran");
        if i == 0 {
            // The downgrade is still enabled (3.5 cancels it once every member
            // runs 3.5) and the version lowered: a warning, and 3.5 joins.
            let check = upgrade_check(&cluster[0], "3.5.35");
            assert_eq!(check.code, 0, "{check}");
            assert_eq!(
                finding_codes(&check.json()["upgrade_check"]),
                ["downgrade-enabled"],
                "{check}"
            );
        }
        cluster.member_mut(i).set_version(EtcdVersion::V3_5Latest);
        let v = preflight(&cluster.agent_env(i));
        v.expect(&step, 0, "start");
        cluster[i].start();
        cluster[i].wait_healthy();
        let key = format!("dg/after-{}", cluster[i].name());
        cluster.put(&key, &step);
        written.push((key, step.clone()));
        assert_every_write_everywhere(&cluster, &written, &step);
    }
}

/// Custom v2 store content in the `.snap` etcd 3.6 loads: a v2 key written on
/// 3.5 with `--enable-v2`, then enough v3 writes for a `.snap` past it (so the
/// WAL replayed after it holds no v2 request). 3.6 refuses to start ("detected
/// disallowed custom content in v2store") unless `--v2-deprecation=
/// write-only-skip-check`; preflight for 3.6 refuses first (16,
/// `v2-store-custom`) and allows the start under the same flag
/// (`ETCD_V2_DEPRECATION`), where etcd 3.6 then starts and serves.
#[test]
fn etcd_3_6_refuses_custom_v2_store_content_and_preflight_refuses_first_36() {
    let mut cluster = Cluster::builder(EtcdVersion::V3_5Latest)
        .members(1)
        .arg("--enable-v2")
        .snapshot_count(20)
        .token("v2-store")
        .start();
    let mut http = HttpConn::new(cluster[0].client_url(), Duration::from_secs(5)).expect("conn");
    let r = http
        .request("PUT", "/v2/keys/app/config?value=v1", b"")
        .expect("a v2 write");
    assert!(r.status == 200 || r.status == 201, "v2 PUT: {}", r.status);
    drop(http);
    cluster.put("v3/known", "written on 3.5");
    cluster.put_many("v3/", 60, 16);
    cluster[0].stop().expect("it ran");

    let check = upgrade_check(&cluster[0], "3.6");
    assert_eq!(check.code, 16, "{check}");
    assert_eq!(
        finding_codes(&check.json()["upgrade_check"]),
        ["v2-store-custom"],
        "the .snap is past the v2 write, so only the store blocks: {check}"
    );
    cluster.member_mut(0).set_version(EtcdVersion::V3_6);
    let v = preflight(&cluster.agent_env(0));
    v.expect("3.6 on custom v2 store content", 16, "refuse-version");
    cluster[0].start_with(|f| f.extra_args.retain(|a| a != "--enable-v2"));
    assert_etcd_exits(
        &cluster[0],
        Some("detected disallowed custom content in v2store"),
        "etcd 3.6 was expected to refuse the v2 store",
    );

    // Under write-only-skip-check both let it through, and 3.6 serves.
    let mut env = cluster.agent_env(0);
    env.push(("ETCD_V2_DEPRECATION".into(), "write-only-skip-check".into()));
    let v = preflight(&env);
    v.expect("3.6 with write-only-skip-check", 0, "start");
    cluster[0].start_with(|f| {
        f.extra_args.retain(|a| a != "--enable-v2");
        f.extra_args
            .push("--v2-deprecation=write-only-skip-check".into());
    });
    cluster[0].wait_healthy();
    assert_eq!(
        cluster[0]
            .try_get("v3/known", true)
            .ok()
            .flatten()
            .as_deref(),
        Some("written on 3.5")
    );
}

/// Learner flags etcd 3.5.1 left stale in the backend (etcd #19557: a promotion
/// was applied to the v2 store but not persisted to the v3 one before
/// 3.5.20), read where 3.6 reads them: two members grown as learners and
/// promoted on 3.5.1, with no `.snap` since (3.6 repairs a flag from the `.snap`
/// first, and there is none to repair from). 3.6's bootstrap then counts two
/// learners against `--max-learners` 1 and refuses; preflight for 3.6 refuses
/// first (16, `too-many-learners`), and both allow the start with
/// `--max-learners 2` (`ETCD_MAX_LEARNERS`), where 3.6 starts and serves.
#[test]
fn etcd_3_6_refuses_learner_flags_3_5_1_left_stale_and_preflight_refuses_first_36() {
    let mut cluster = Cluster::builder(EtcdVersion::V3_5)
        .members(1)
        .token("stale-learners")
        .start();
    cluster.add_learner_and_promote("m1");
    cluster.add_learner_and_promote("m2");
    cluster.put("learners/known", "written on 3.5.1");
    for i in (0..3).rev() {
        cluster[i].stop().expect("it ran");
    }
    assert!(
        cluster[0].snap_files().is_empty(),
        "no .snap to repair from"
    );

    let report = inspect(&cluster[0]);
    let stale: Vec<bool> = report["backend"]["members"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|m| m["is_learner"].as_bool().unwrap_or_default())
        .collect();
    assert_eq!(
        stale.iter().filter(|l| **l).count(),
        2,
        "3.5.1 left both promotions out of the backend: {report:#}"
    );
    let check = upgrade_check(&cluster[0], "3.6");
    assert_eq!(check.code, 16, "{check}");
    assert_eq!(
        finding_codes(&check.json()["upgrade_check"]),
        ["too-many-learners", "learner-flag-stale"],
        "{check}"
    );

    cluster.member_mut(0).set_version(EtcdVersion::V3_6);
    let v = preflight(&cluster.agent_env(0));
    v.expect("3.6 on stale learner flags", 16, "refuse-version");
    cluster[0].start();
    assert_etcd_exits(
        &cluster[0],
        Some("too many learner members"),
        "etcd 3.6 was expected to refuse the learners",
    );

    // With --max-learners 2 both let every member through, and 3.6 serves;
    // the stale flags stay a warning (3.6 starts on them; 3.7 would read them).
    for i in 0..3 {
        cluster.member_mut(i).set_version(EtcdVersion::V3_6);
        let mut env = cluster.agent_env(i);
        env.push(("ETCD_MAX_LEARNERS".into(), "2".into()));
        let v = preflight(&env);
        v.expect("3.6 with --max-learners 2", 0, "start");
        let warned = v.doc()["upgrade_check"]["findings"].clone();
        assert_eq!(
            finding_codes(&v.doc()["upgrade_check"]),
            ["learner-flag-stale"],
            "{warned:#}"
        );
        assert_eq!(warned[0]["blocks"], false, "{warned:#}");
    }
    for i in 0..3 {
        cluster[i].start_with(|f| f.extra_args.push("--max-learners=2".into()));
    }
    for i in 0..3 {
        cluster[i].wait_healthy();
    }
    assert_eq!(
        cluster[0]
            .try_get("learners/known", true)
            .ok()
            .flatten()
            .as_deref(),
        Some("written on 3.5.1")
    );
}

/// etcd upgrades one minor at a time, but 3.7 starts on a 3.5 directory whose
/// snapshot is past every v2 request 3.5 wrote into the WAL (it loads no
/// `.snap` and reads membership from the backend). The upgrade check says
/// `skipped-minor` as a warning, never a refusal; preflight allows the start and
/// etcd 3.7 serves every key. (Without that snapshot the same skip is refused:
/// `v2-wal-raw`, the test above.)
#[test]
fn a_3_5_dir_snapshotted_past_its_v2_entries_starts_on_3_7_with_only_the_skipped_minor_warning() {
    let mut cluster = Cluster::builder(EtcdVersion::V3_5Latest)
        .members(1)
        .snapshot_count(5)
        .token("skipped-minor")
        .start();
    let written: Vec<(String, String)> = (0..20)
        .map(|i| (format!("skip/{i:02}"), format!("written on 3.5, {i}")))
        .collect();
    for (k, v) in &written {
        cluster.put(k, v);
    }
    cluster[0].stop().expect("it ran");
    assert!(
        newest_snap_index(&cluster[0]) > 5,
        "a snapshot past the v2 entries: {:?}",
        cluster[0].snap_files()
    );
    let check = upgrade_check(&cluster[0], "3.7");
    assert_eq!(check.code, 0, "{check}");
    let findings = &check.json()["upgrade_check"]["findings"];
    assert_eq!(
        finding_codes(&check.json()["upgrade_check"]),
        ["skipped-minor"],
        "{check}"
    );
    assert_eq!(findings[0]["blocks"], false, "{check}");

    cluster.member_mut(0).set_version(EtcdVersion::V3_7);
    preflight(&cluster.agent_env(0)).expect("3.5 straight to 3.7", 0, "start");
    cluster[0].start();
    cluster[0].wait_healthy();
    assert_every_write_everywhere(&cluster, &written, "on 3.7");
    wait_storage_version(&cluster, "3.7.0", "3.7 alone");
}

/// A downgrade enabled to another version than the etcd about to start:
/// `etcdctl downgrade enable 3.6` on a 3.7 cluster records it in
/// `cluster/downgrade` and the leader lowers the cluster version to 3.6. etcd
/// 3.5 refuses to join while a downgrade to another version is enabled (fatal
/// "invalid downgrade; server version is not allowed to join when downgrade is
/// enabled"); preflight for 3.5 refuses first (16, `downgrade-target-other`),
/// and allows the downgrade's own target, 3.6, which then serves. Then the
/// same directory with a `cluster/downgrade` value etcd cannot parse
/// (`downgrade-info-malformed`): etcd 3.6 panics, preflight refuses first.
#[test]
fn etcd_3_5_refuses_a_dir_downgrading_to_3_6_and_preflight_refuses_first_37() {
    let mut cluster = Cluster::builder(EtcdVersion::V3_7)
        .members(1)
        .token("downgrade-other")
        .start();
    cluster.put("dg/k", "written on 3.7");
    let out = cluster[0].etcdctl(["downgrade", "enable", "3.6"]);
    assert!(
        out.status.success(),
        "etcdctl downgrade enable 3.6: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    wait_storage_version(&cluster, "3.6.0", "the downgrade to 3.6 under way");
    cluster[0].stop().expect("it ran");
    let report = inspect(&cluster[0]);
    assert_eq!(
        (
            &report["backend"]["downgrade"]["enabled"],
            &report["backend"]["downgrade"]["target_version"],
        ),
        (&Value::from(true), &Value::from("3.6.0")),
        "{report:#}"
    );
    let check = upgrade_check(&cluster[0], "3.5.35");
    assert_eq!(check.code, 16, "{check}");
    assert_eq!(
        finding_codes(&check.json()["upgrade_check"]),
        ["downgrade-target-other"],
        "{check}"
    );
    assert_eq!(
        upgrade_check(&cluster[0], "3.6").code,
        0,
        "the downgrade's target"
    );

    cluster.member_mut(0).set_version(EtcdVersion::V3_5Latest);
    preflight(&cluster.agent_env(0)).expect("3.5 while downgrading to 3.6", 16, "refuse-version");
    cluster[0].start();
    let refused = "server version is not allowed to join when downgrade is enabled";
    assert_etcd_exits(
        &cluster[0],
        Some(refused),
        "etcd 3.5 was expected to refuse the downgrade to 3.6",
    );

    cluster.member_mut(0).set_version(EtcdVersion::V3_6);
    preflight(&cluster.agent_env(0)).expect("the downgrade's target, 3.6", 0, "start");
    cluster[0].start();
    cluster[0].wait_healthy();
    assert_every_write_everywhere(
        &cluster,
        &[("dg/k".into(), "written on 3.7".into())],
        "on 3.6",
    );

    // `cluster/downgrade` as no etcd writes it: the first byte of its JSON
    // changed in place, in every copy bbolt's pages still hold (bbolt has no
    // checksum on a leaf). Every line panics loading it ("failed to unmarshal
    // downgrade information"); preflight refuses first.
    cluster[0].stop().expect("it ran");
    let db = cluster[0].data_dir().join("member/snap/db");
    let mut bytes = std::fs::read(&db).expect("read db");
    let needle = br#"{"target-version""#;
    let mut patched = 0;
    for i in 0..bytes.len().saturating_sub(needle.len()) {
        if bytes[i..].starts_with(needle) {
            bytes[i] = b'x';
            patched += 1;
        }
    }
    assert!(
        patched > 0,
        "no cluster/downgrade value in {}",
        db.display()
    );
    std::fs::write(&db, &bytes).expect("write db");
    for target in ["3.5.35", "3.6", "3.7"] {
        let check = upgrade_check(&cluster[0], target);
        assert_eq!(check.code, 16, "{target}: {check}");
        assert!(
            finding_codes(&check.json()["upgrade_check"])
                .contains(&"downgrade-info-malformed".to_string()),
            "{target}: {check}"
        );
    }
    preflight(&cluster.agent_env(0)).expect(
        "3.6 on a malformed cluster/downgrade",
        16,
        "refuse-version",
    );
    cluster[0].start();
    let malformed = "failed to unmarshal downgrade information";
    assert_etcd_exits(
        &cluster[0],
        Some(malformed),
        "etcd 3.6 was expected to panic on the malformed value",
    );
}
