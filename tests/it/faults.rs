//! Fault schedules against real etcd 3.4.23 and 3.5.1 clusters: no acknowledged
//! write is lost when every member start goes through `preflight`
//! (docs/fault-schedules.md).
//!
//! * The wiped-voter schedule, deterministic: in baseline mode (members restart with
//!   their frozen flags) the acknowledged write is lost and the replica that held
//!   it diverges; guarded, the wiped member is refused with exit 10, the cluster
//!   waits for the member holding the write, and nothing is lost.
//! * A few seeded random schedules per version in guarded mode, so a regression in
//!   the guard fails the build.
//! * `replay` (ignored): runs whatever the `FAULT_*` env vars say — one failing
//!   seed, or the long runs of `scripts/faults`.

use std::time::Duration;

use crate::common::*;
use crate::fault_sched::*;

/// The key of the wiped-voter schedule's write W.
const W: &str = "w/spec/W";
const W_VALUE: &str = "acknowledged while m1 was frozen";

/// How the member that missed W (m1, frozen while W was acknowledged) comes back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Lagging {
    /// SIGCONT after a freeze longer than rafthttp's 5 s read deadline — as first
    /// measured.
    Thaw,
    /// The hung process is killed and restarted (a liveness probe's way): its
    /// socket buffers die with it, so W cannot arrive late.
    Restart,
}

impl Lagging {
    /// The faults after W, in the harness's names.
    fn faults(self) -> &'static str {
        match self {
            // Long enough for m1's peer streams to pass their 5 s read deadline
            // (rafthttp's ConnReadTimeout) while frozen. With a short freeze m1 reads
            // W's MsgApp from its socket buffer on thaw and, once leader, commits it.
            Lagging::Thaw => "pause 6000ms, wipe m2, kill m0, thaw m1, restart m2",
            // m2 waits until the restarted m1 has replayed its WAL: asked too early,
            // m1 still reports the membership of its first entries and m2 exits
            // with "member count is unequal".
            Lagging::Restart => {
                "pause 1000ms, wipe m2, kill m0, kill m1, restart m1, pause 1500ms, restart m2"
            }
        }
    }
}

/// What one run of the wiped-voter schedule showed.
struct SpecRun {
    /// `preflight`'s answer to m2's restart (guarded only).
    refusal: Option<Preflight>,
    /// What a linearizable read of W returned right after the schedule, before the
    /// heal: `Ok(None)` is the loss, `Err` means no member could serve the read.
    read_before_heal: Result<Option<String>, String>,
    /// The leader right after the schedule, when there was one.
    leader_before_heal: Option<usize>,
    /// Each member's own store after the heal (serializable), for W.
    w_in_stores: Vec<Option<String>>,
    /// The checker's findings.
    check: Check,
    outcome: Outcome,
}

/// The wiped-voter schedule with the harness's names. The roles follow from how the operator seeds
/// a cluster: only the last member added (m2) has an `--initial-cluster` naming
/// every member, so only it can rejoin with `=existing` on an empty directory (m1's
/// frozen flags name m0 and m1 only: etcd exits with "member count is unequal").
///
/// m1 frozen; W acknowledged by m0 and m2; m2's directory wiped; m0 killed; m1
/// back (thawed, or restarted); m2 restarted with its frozen `=existing` flags
/// (baseline) or through `preflight` (guarded). m1 — intact, without W — asks m2
/// for its vote; a wiped m2 grants it with its empty log.
fn spec_schedule(version: EtcdVersion, mode: Mode, lagging: Lagging) -> SpecRun {
    let started = std::time::Instant::now();
    let mut fc = FaultCluster::form(version, 3, mode);
    fc.begin();
    let schedule = Schedule::parse(3, &format!("freeze m1, {}", lagging.faults())).unwrap();
    eprintln!(
        "wiped-voter schedule ({lagging:?}), {} mode, {version}: 3 members formed in {:.1?}\n  {schedule} (W acknowledged after the freeze)",
        mode.label(),
        fc.cluster.formed_in()
    );
    fc.cluster.put("w/spec/before", "everyone has this");
    fc.acked
        .insert("w/spec/before".into(), "everyone has this".into());
    for i in 0..3 {
        let m = &fc.cluster[i];
        assert_eventually!(m
            .try_get("w/spec/before", true)
            .and_then(|v| ensure(v.is_some(), format!("{} has not applied it", m.name()))));
    }

    let mut refusal = None;
    for (n, fault) in schedule.faults.iter().enumerate() {
        if let Some(p) = fc.apply(*fault) {
            refusal = Some(p);
        }
        if n == 0 {
            // W, through m0: acknowledged by m0 and m2 (m1 is frozen).
            assert_eventually!(fc.cluster[0].try_put(W, W_VALUE), "m0 acknowledges W");
            fc.acked.insert(W.into(), W_VALUE.into());
            fc.event("W acknowledged (put through m0 returned OK)");
            // W is in m0's own store before anything else happens.
            assert_eventually!(fc.cluster[0]
                .try_get(W, true)
                .and_then(|v| ensure(v.as_deref() == Some(W_VALUE), format!("m0 holds {v:?}"))));
        }
    }

    // Right after the schedule: does any member serve W linearizably?
    // Baseline: m2 has to fetch the membership, start and vote; give it time.
    // Guarded: a few seconds without any answer show the cluster waiting.
    let window = match mode {
        Mode::Baseline => Duration::from_secs(20),
        Mode::Guarded => Duration::from_secs(6),
    };
    let read_before_heal = eventually(window, || {
        let mut last = String::new();
        for i in [1, 2] {
            let m = &fc.cluster[i];
            if !m.is_answering() {
                continue;
            }
            match m.try_get(W, false) {
                Ok(v) => return Ok(v),
                Err(e) => last = format!("{}: {e}", m.name()),
            }
        }
        Err(if last.is_empty() {
            "no member answering".to_string()
        } else {
            last
        })
    });
    let leader_before_heal = fc.cluster.leader();
    fc.event(format!(
        "before the heal: linearizable read of W → {read_before_heal:?}; leader {leader_before_heal:?}"
    ));
    if mode == Mode::Baseline && fc.cluster[2].exit_status().is_some() {
        fc.event(format!("m2 exited: {}", why_exited(&fc.cluster[2])));
    }
    if std::env::var_os("FAULT_LOGS").is_some() {
        for m in fc.cluster.members() {
            eprintln!("--- {} log tail ---\n{}", m.name(), m.log_tail(80));
        }
    }
    let heal = fc.heal();
    let conflicts: Vec<String> = fc
        .cluster
        .members()
        .iter()
        .filter_map(|m| {
            let log = m.log_since_start();
            let line = log
                .lines()
                .find(|l| l.contains("found conflict at index"))?;
            let msg = serde_json::from_str::<serde_json::Value>(line)
                .ok()
                .and_then(|j| j["msg"].as_str().map(str::to_string))
                .unwrap_or_else(|| line.to_string());
            Some(format!("{} after its restart: {msg}", m.name()))
        })
        .collect();
    for c in conflicts {
        fc.event(c);
    }
    let check = check(&fc, "spec");
    let w_in_stores: Vec<Option<String>> = (0..3)
        .map(|i| fc.cluster[i].try_get(W, true).ok().flatten())
        .collect();
    fc.event(format!(
        "after the heal: W in each member's own store: {w_in_stores:?}"
    ));
    let outcome = Outcome {
        schedule,
        acked_new: 2,
        indeterminate: 0,
        check: check.clone(),
        counters: fc.counters.clone(),
        error: heal.err(),
        events: fc.events.clone(),
        elapsed: started.elapsed(),
    };
    eprintln!("{}\n{}", outcome.summary(), outcome.details());
    SpecRun {
        refusal,
        read_before_heal,
        leader_before_heal,
        w_in_stores,
        check,
        outcome,
    }
}

/// The baseline loses W. Whether a *thawed* m1 has W depends on a race inside
/// etcd (on thaw, does m1 read the MsgApp buffered in its socket before its
/// expired read deadline closes the stream?): etcd 3.4.23 drops it, 3.5.1 was seen
/// reading it. So the attempts are bounded: the first measurement's thaw first, then m1
/// restarted (its buffers die with the process), and the loss must be seen at
/// least once; each attempt prints what it saw.
fn spec_schedule_loses_the_write_in_baseline_mode(version: EtcdVersion) {
    const ATTEMPTS: [Lagging; 3] = [Lagging::Thaw, Lagging::Restart, Lagging::Restart];
    let mut seen = Vec::new();
    for (attempt, lagging) in ATTEMPTS.into_iter().enumerate() {
        let run = spec_schedule(version, Mode::Baseline, lagging);
        let lost = run.check.lost.iter().any(|l| l.starts_with(W));
        let what = format!(
            "baseline attempt {}/{} on {version} ({lagging:?}): W lost: {lost}; read before the heal: {:?} (leader {:?}); W in each store after the heal: {:?}; divergent: {:?}; error: {:?}",
            attempt + 1,
            ATTEMPTS.len(),
            run.read_before_heal,
            run.leader_before_heal,
            run.w_in_stores,
            run.check.divergent,
            run.outcome.error
        );
        eprintln!("{what}");
        if lost {
            // Acknowledged, and a linearizable read no longer returns it.
            assert!(run.refusal.is_none());
            return;
        }
        seen.push(what);
    }
    panic!(
        "the wiped-voter schedule lost nothing in baseline mode on {version}:\n{}",
        seen.join("\n")
    );
}

fn spec_schedule_loses_nothing_when_guarded(version: EtcdVersion) {
    let run = spec_schedule(version, Mode::Guarded, Lagging::Thaw);
    let refusal = run.refusal.as_ref().expect("guarded runs preflight");
    assert_eq!(
        (refusal.code, refusal.verdict.as_str()),
        (10, "refuse-empty-formed"),
        "the wiped m2 must be refused: {}",
        refusal.reason
    );
    // While m2 is refused and m0 is down, m1 alone has no quorum: the cluster
    // waits rather than answering without W.
    assert!(
        run.read_before_heal.is_err(),
        "with m0 down and m2 refused nobody should serve a linearizable read, got {:?}",
        run.read_before_heal
    );
    assert!(
        run.outcome.error.is_none(),
        "the heal failed: {:?}",
        run.outcome.error
    );
    assert!(
        run.check.clean(),
        "guarded wiped-voter schedule failed the check:\n{}",
        run.outcome.details()
    );
    assert_eq!(run.check.acked, 2);
    assert_eq!(
        run.w_in_stores,
        vec![Some(W_VALUE.to_string()); 3],
        "every member holds W after the heal"
    );
    assert_eq!(run.outcome.counters.remedies, 1, "m2 was remedied");
    assert!(
        run.outcome.counters.anomalies.is_empty(),
        "{:?}",
        run.outcome.counters.anomalies
    );
}

#[test]
fn spec_schedule_loses_the_write_in_baseline_mode_34() {
    spec_schedule_loses_the_write_in_baseline_mode(EtcdVersion::V3_4);
}

#[test]
fn spec_schedule_loses_nothing_when_guarded_34() {
    spec_schedule_loses_nothing_when_guarded(EtcdVersion::V3_4);
}

#[test]
fn spec_schedule_loses_nothing_when_guarded_35() {
    spec_schedule_loses_nothing_when_guarded(EtcdVersion::V3_5);
}

#[test]
fn spec_schedule_loses_the_write_in_baseline_mode_36() {
    spec_schedule_loses_the_write_in_baseline_mode(EtcdVersion::V3_6);
}

#[test]
fn spec_schedule_loses_nothing_when_guarded_36() {
    spec_schedule_loses_nothing_when_guarded(EtcdVersion::V3_6);
}

#[test]
fn spec_schedule_loses_nothing_when_guarded_37() {
    spec_schedule_loses_nothing_when_guarded(EtcdVersion::V3_7);
}

/// Seeds for CI: fixed, short, and covering a lagging-voter schedule that wipes
/// the last-added member, a random one, and one with a freeze.
const CI_SEEDS: u64 = 1;
const CI_SCHEDULES: usize = 3;

fn random_guarded_schedules_lose_nothing(version: EtcdVersion) {
    let mut cfg = RunConfig::new(version, Mode::Guarded, CI_SEEDS, CI_SCHEDULES);
    cfg.per_cluster = CI_SCHEDULES;
    let tally = run(&cfg);
    assert_eq!(tally.schedules, CI_SCHEDULES);
    assert_guarded_lost_nothing(&tally);
}

/// A guarded run lost, forked and answered foreign nothing, healed, saw no
/// anomaly, and acknowledged writes.
fn assert_guarded_lost_nothing(tally: &Tally) {
    assert!(
        tally.lost == 0
            && tally.divergent == 0
            && tally.foreign == 0
            && tally.unanswered == 0
            && tally.errors == 0
            && tally.counters.anomalies.is_empty(),
        "guarded fault schedules failed:\n{}\nreplay: {:#?}",
        tally.report(),
        tally.failures
    );
    assert!(tally.acked > 0, "no write was acknowledged");
}

#[test]
fn random_guarded_schedules_lose_nothing_36() {
    random_guarded_schedules_lose_nothing(EtcdVersion::V3_6);
}

#[test]
fn random_guarded_schedules_lose_nothing_37() {
    random_guarded_schedules_lose_nothing(EtcdVersion::V3_7);
}

/// A re-added member whose first start fails, three ways: etcd rejects its
/// flags and exits (its debris: a `member/snap/db`, no WAL), it is killed 200 ms
/// into its first sync, and killed 30 ms after it started. Each is started
/// through the guard afterwards: joined or started, never refused (a wrong
/// refusal once kept such a member down for good). The pauses let each joined
/// member catch up before the next fault needs every member up.
const FAILED_FIRST_STARTS: &str = "failed-join m1, pause 300ms, restart m1, pause 6000ms, \
     join-killed m2 200ms, pause 300ms, restart m2, pause 6000ms, \
     join-killed m0 30ms, pause 100ms, restart m0";

fn failed_first_starts_are_joined_never_refused(version: EtcdVersion) {
    let mut cfg = RunConfig::new(version, Mode::Guarded, 0, 1);
    cfg.sequence = Some(FAILED_FIRST_STARTS.to_string());
    let tally = run(&cfg);
    assert_guarded_lost_nothing(&tally);
    let joins = tally.counters.verdicts.get("join").copied().unwrap_or(0);
    // A join killed after it published (a loaded machine, the 200 ms kill)
    // is a member the cluster counts as started: its empty WAL is refused as
    // `refuse-empty-formed` and the remedy brings it back. Nothing else may be.
    let published = tally.counters.joins_killed_after_publishing;
    let refusals: usize = tally.counters.refusals.values().sum();
    let refused_as_started = tally
        .counters
        .refusals
        .keys()
        .all(|v| v == "refuse-empty-formed")
        && refusals == tally.counters.refusals_after_a_published_join;
    assert!(
        joins >= 3
            && if published == 0 {
                tally.counters.refusals.is_empty() && tally.counters.remedies == 0
            } else {
                refused_as_started && tally.counters.remedies <= published
            },
        "every failed first start joined again without a refusal or remedy ({published} killed after publishing):\n{}",
        tally.report()
    );
}

/// On the 3.5 line's current patch, 3.5.35: etcd 3.5.0–3.5.2 (3.5.1 is the
/// tests' other 3.5) may save a member's consistent index without the entry's
/// data when it is killed, and then never apply that entry (etcd's postmortem
/// `v3.5-data-inconsistency.md`, issue 13766, fixed in 3.5.3). A join killed
/// 200 ms in, while it applies what it catches up on, hits that window under
/// load: one acknowledged write missing on the restarted member, which then
/// led (a fresh-clone CI run, 2026-12-06). No check of the directory can see
/// it, and the guard started the member rightly.
#[test]
fn failed_first_starts_are_joined_never_refused_36() {
    failed_first_starts_are_joined_never_refused(EtcdVersion::V3_6);
}

#[test]
fn failed_first_starts_are_joined_never_refused_37() {
    failed_first_starts_are_joined_never_refused(EtcdVersion::V3_7);
}

/// An earlier incarnation's volume under member m1, then restarted, with every
/// start as Kubernetes does it today: etcd serves the old cluster's keyspace
/// under another cluster ID (what the guard's `refuse-foreign` prevents; the
/// guarded CI seeds 1 and 3 swap in such volumes too).
#[test]
fn an_old_volume_answers_foreign_in_baseline_mode_36() {
    let mut cfg = RunConfig::new(EtcdVersion::V3_6, Mode::Baseline, 0, 1);
    cfg.sequence = Some("old-volume m1, pause 300ms, restart m1, pause 2000ms".to_string());
    let tally = run(&cfg);
    assert!(
        tally.foreign > 0,
        "baseline: etcd on an earlier incarnation's volume answered with the cluster's ID?\n{}",
        tally.report()
    );
}

/// Guarded seed 1022 on 3.6.16, the shape that started etcd on an earlier
/// incarnation's volume: m1 re-added by the remedy (its ID random since
/// `member add`, so none follows from its flags), then given such a volume
/// while m2 is down and m0 restarts alone. A member without quorum serves no
/// client, so no live source answers; the directory's WAL still records how
/// its cluster was formed, with another token: `refuse-foreign`, and the
/// cluster heals once m2 is back.
fn an_old_volume_under_a_re_added_member_without_quorum_is_refused(version: EtcdVersion) {
    let mut cfg = RunConfig::new(version, Mode::Guarded, 0, 1);
    cfg.sequence = Some(
        "join-killed m1 2000ms, pause 300ms, restart m1, pause 3000ms, freeze m0, pause 700ms, \
         old-volume m1, pause 1200ms, kill m2, pause 400ms, kill m0, pause 700ms, restart m0, \
         pause 200ms, restart-unguarded m1, pause 1100ms"
            .to_string(),
    );
    let tally = run(&cfg);
    assert_guarded_lost_nothing(&tally);
    assert!(
        tally.counters.refusals.contains_key("refuse-foreign"),
        "the earlier incarnation's volume was refused:\n{}",
        tally.report()
    );
}

#[test]
fn an_old_volume_under_a_re_added_member_without_quorum_is_refused_36() {
    an_old_volume_under_a_re_added_member_without_quorum_is_refused(EtcdVersion::V3_6);
}

/// Runs what the `FAULT_*` variables say (see docs/fault-schedules.md):
/// `FAULT_SEED=1234 FAULT_MODE=guarded FAULT_VERSION=3.5 cargo test --test it --
/// --ignored --exact faults::replay --nocapture`. Fails when a guarded schedule loses a write,
/// diverges, answers foreign or cannot heal; a baseline run only reports.
#[test]
#[ignore = "long: run by scripts/faults, or to replay a seed"]
fn replay() {
    let cfg = RunConfig::from_env().unwrap_or_else(|e| panic!("{e}"));
    let tally = run(&cfg);
    if cfg.mode == Mode::Guarded {
        assert!(
            tally.lost == 0
                && tally.divergent == 0
                && tally.foreign == 0
                && tally.unanswered == 0
                && tally.errors == 0
                && tally.counters.anomalies.is_empty(),
            "guarded fault schedules failed:\n{}\n{:#?}",
            tally.report(),
            tally.failures
        );
    }
}

/// Prints the schedules the `FAULT_*` variables would run, without running them:
/// `FAULT_SEED=1 FAULT_SCHEDULES=20 cargo test --test it -- --ignored --exact
/// faults::print_schedules --nocapture`.
#[test]
#[ignore = "prints; runs nothing"]
fn print_schedules() {
    let cfg = RunConfig::from_env().unwrap_or_else(|e| panic!("{e}"));
    for k in 0..cfg.schedules {
        let seed = cfg.first_seed + k as u64;
        for &members in &cfg.members {
            let s = Schedule::generate(seed, members);
            println!("seed {seed} n={members} {:?}: {s}", s.shape);
        }
    }
}

/// A container-only restart (no init containers, so no preflight) of an intact
/// member, mixed with a wipe the guard must then catch: nothing lost, and the
/// wiped member is refused and remedied rather than started.
#[test]
fn container_only_restarts_beside_a_wipe_lose_nothing_when_guarded_36() {
    let mut cfg = RunConfig::new(EtcdVersion::V3_6, Mode::Guarded, 0, 1);
    cfg.sequence = Some(
        "kill m1, pause 300ms, restart-unguarded m1, pause 600ms, kill m2, pause 200ms, \
         wipe m1, pause 300ms, restart-unguarded m1, pause 600ms, restart-unguarded m2, pause 600ms"
            .into(),
    );
    let tally = run(&cfg);
    assert_eq!(tally.schedules, 1);
    assert_guarded_lost_nothing(&tally);
    // The wiped member's restart went through preflight (a blank volume comes
    // with a new Pod) and was refused.
    assert!(
        tally.counters.refusals.contains_key("refuse-empty-formed"),
        "{}",
        tally.report()
    );
}

/// Issue 29's shape: m1's volume copied, m2 down while writes are
/// acknowledged by m0 and m1, m0 and m1 killed, m1's volume put back to the
/// copy (or its WAL alone), m2 and m1 restarted.
fn rolled_back(wal_only: bool) -> String {
    // m2 killed, not frozen: a thawed member reads the appends its sockets
    // buffered meanwhile (see the wiped-voter schedule), and would have the writes.
    format!(
        "copy m1, pause 300ms, kill m2, pause 2000ms, kill m0, pause 100ms, kill m1, \
         {} m1, restart m2, pause 300ms, restart m1, pause 2500ms",
        if wal_only { "rollback-wal" } else { "rollback" }
    )
}

/// Without the guard, m1 restarts on its older copy and forms a quorum with
/// the lagging m2: the writes m0 and m1 acknowledged are gone (or the members
/// diverge for good, the WAL alone rolled back). Bounded attempts: the heal's
/// timing decides how the loss shows.
fn a_rolled_back_member_loses_writes_in_baseline_mode(version: EtcdVersion, wal_only: bool) {
    let mut seen = Vec::new();
    for attempt in 1..=3 {
        let mut cfg = RunConfig::new(version, Mode::Baseline, attempt, 1);
        cfg.sequence = Some(rolled_back(wal_only));
        // A heal that cannot bring the members back (they diverged, or one
        // hangs) is the loss looked for: no need to wait 90 s for it, nor
        // to ask the hung member for every write.
        cfg.heal_limit = Some(Duration::from_secs(25));
        cfg.skip_check_unhealed = true;
        let tally = run(&cfg);
        if tally.lost > 0 || tally.divergent > 0 || tally.errors > 0 {
            return;
        }
        seen.push(tally.report());
    }
    panic!(
        "baseline: a member rolled back under a lagging voter lost nothing in 3 attempts:\n{}",
        seen.join("\n")
    );
}

/// With the guard, m1 is refused (`refuse-rolled-back`: its witness file says
/// its disk held more, or its backend applied past its WAL) while the members
/// holding the writes are down; the heal brings m0 back, m1 starts on the
/// leader's word and catches up: nothing lost, and no member refused that
/// nothing had happened to.
fn a_rolled_back_member_loses_nothing_when_guarded(version: EtcdVersion, wal_only: bool) {
    let mut cfg = RunConfig::new(version, Mode::Guarded, 0, 1);
    cfg.sequence = Some(rolled_back(wal_only));
    let tally = run(&cfg);
    assert_guarded_lost_nothing(&tally);
    assert!(
        tally.counters.refusals.contains_key("refuse-rolled-back"),
        "the rolled-back member was refused:\n{}",
        tally.report()
    );
}

#[test]
fn a_rolled_back_member_loses_writes_in_baseline_mode_36() {
    a_rolled_back_member_loses_writes_in_baseline_mode(EtcdVersion::V3_6, false);
}

#[test]
fn a_rolled_back_member_loses_nothing_when_guarded_36() {
    a_rolled_back_member_loses_nothing_when_guarded(EtcdVersion::V3_6, false);
}

#[test]
fn a_rolled_back_member_loses_nothing_when_guarded_37() {
    a_rolled_back_member_loses_nothing_when_guarded(EtcdVersion::V3_7, false);
}

#[test]
fn a_rolled_back_wal_loses_nothing_when_guarded_37() {
    a_rolled_back_member_loses_nothing_when_guarded(EtcdVersion::V3_7, true);
}

/// The cluster deleted and created again under the same names with a new
/// token, m1 inheriting its volume, the witnesses left behind: the seed on a
/// fresh volume bootstraps (its earlier incarnation's witness is not evidence),
/// m1's inherited volume is refused and given a fresh one, and the new
/// cluster loses nothing and answers no foreign ID.
#[test]
fn a_recreated_cluster_bootstraps_past_old_witnesses_and_refuses_inherited_volumes_36() {
    let mut cfg = RunConfig::new(EtcdVersion::V3_6, Mode::Guarded, 0, 1);
    cfg.sequence = Some("kill m2, pause 300ms, recreate m1, pause 1500ms".to_string());
    let tally = run(&cfg);
    assert_guarded_lost_nothing(&tally);
    assert!(
        tally.counters.verdicts.get("bootstrap") == Some(&1)
            && tally.counters.refusals.contains_key("refuse-foreign"),
        "the seed bootstrapped once and the inherited volume was refused:\n{}",
        tally.report()
    );
}

/// The restored shape (issue 29): the cluster restored once (its ID then
/// the restored membership's, as for a cluster bootstrapped whole), a backup,
/// a copy of m1's volume ahead of it, the whole cluster restored from the
/// backup the runbook's way (unbumped, every witness removed), writes, m1
/// made the leader, and m1's copy put back (m1 killed while it leads, so
/// preflight asks the others before they elect another: they answer without
/// a leader, naming m1): a copy of the history the restore dropped, ahead of
/// the restored cluster in raft index and revision. Guarded it is refused
/// (`refuse-foreign`, row 6h: a position sign or the keyspace) and replaced;
/// nothing the restored cluster acknowledged is lost. Before 6565084 row 6h
/// took only a leader's word, and the copy started (row 5). Then m2 is
/// killed, so at the heal's first preflight of m1 only m0 answers: one sign
/// of three, which waits (`phase-unknown`, row 6j) until m2 is back and row
/// 6h refuses again; before row 6j the copy started there (row 5) and made a
/// quorum with m2 on its history (fault schedule seed 4101). Without the guard
/// (`scripts/faults --mode baseline` on the restored seeds,
/// docs/fault-schedules.md) the copy leads the cluster back to its history.
#[test]
fn a_copy_put_back_after_a_whole_cluster_restore_is_refused_37() {
    let mut cfg = RunConfig::new(EtcdVersion::V3_7, Mode::Guarded, 0, 1);
    cfg.sequence = Some(
        "backup m2, restore-all unbumped, pause 400ms, backup m0, pause 900ms, copy m1, \
         pause 700ms, restore-all unbumped, pause 500ms, lead m1, pause 300ms, rollback m1, \
         restart m1, pause 500ms, kill m2, pause 300ms"
            .to_string(),
    );
    let tally = run(&cfg);
    assert_guarded_lost_nothing(&tally);
    assert!(
        tally.counters.refusals.contains_key("refuse-foreign")
            && tally.counters.refusals.contains_key("phase-unknown")
            && tally.counters.remedies >= 1,
        "the copy was refused, waited with one answer, and was replaced:\n{}",
        tally.report()
    );
}

/// The same shapes on more lines: run by `AGENT_TEST_ALL_LINES=1 scripts/test`
/// (`cargo test -- --ignored every_line::`), not by default. CI keeps the
/// baseline loss on 3.4 and 3.6, the random schedules and the failed first
/// starts on 3.6 and 3.7, and the old volume without quorum on 3.6, where it
/// was found.
mod every_line {
    use super::*;

    #[test]
    #[ignore = "every-line matrix: AGENT_TEST_ALL_LINES=1 scripts/test"]
    fn spec_schedule_loses_the_write_in_baseline_mode_35() {
        spec_schedule_loses_the_write_in_baseline_mode(EtcdVersion::V3_5);
    }

    #[test]
    #[ignore = "every-line matrix: AGENT_TEST_ALL_LINES=1 scripts/test"]
    fn failed_first_starts_are_joined_never_refused_35() {
        failed_first_starts_are_joined_never_refused(EtcdVersion::V3_5Latest);
    }

    #[test]
    #[ignore = "every-line matrix: AGENT_TEST_ALL_LINES=1 scripts/test"]
    fn an_old_volume_under_a_re_added_member_without_quorum_is_refused_37() {
        an_old_volume_under_a_re_added_member_without_quorum_is_refused(EtcdVersion::V3_7);
    }

    #[test]
    #[ignore = "every-line matrix: AGENT_TEST_ALL_LINES=1 scripts/test"]
    fn random_guarded_schedules_lose_nothing_34() {
        random_guarded_schedules_lose_nothing(EtcdVersion::V3_4);
    }

    #[test]
    #[ignore = "every-line matrix: AGENT_TEST_ALL_LINES=1 scripts/test"]
    fn random_guarded_schedules_lose_nothing_35() {
        random_guarded_schedules_lose_nothing(EtcdVersion::V3_5);
    }

    #[test]
    #[ignore = "every-line matrix: AGENT_TEST_ALL_LINES=1 scripts/test"]
    fn spec_schedule_loses_the_write_in_baseline_mode_37() {
        spec_schedule_loses_the_write_in_baseline_mode(EtcdVersion::V3_7);
    }
}
