//! The fault-schedule harness: real etcd clusters of 3 and 5 members, seeded like
//! the operator seeds them, clients writing unique keys through every member,
//! faults drawn from a seeded generator, every member start either as Kubernetes
//! does it today (baseline) or through `etcd-member-agent preflight` (guarded),
//! and a checker after every schedule. See docs/fault-schedules.md.
//!
//! One schedule: the writers start; the faults run (each a few hundred ms to a
//! second or two apart, writes flowing); the cluster is healed (thaw, restart,
//! remedy); the writers stop; the checker runs over every write acknowledged on
//! this cluster so far. A cluster serves up to `per_cluster` schedules and is
//! discarded after any schedule that fails a check, so a loss is never blamed on a
//! later schedule.

pub mod checker;
pub mod rng;
pub mod schedule;
pub mod world;
pub mod writer;

use std::collections::BTreeMap;
use std::io::Write as _;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::common::*;

pub use checker::{check, Check};
pub use schedule::Schedule;
pub use world::{
    parse_version, version_short, why_exited, Counters, FaultCluster, Mode, Preflight,
};
pub use writer::Writer;

/// What to run: read from `FAULT_*` env vars by the `replay` test and
/// `scripts/faults`, or built by a test.
#[derive(Clone, Debug)]
pub struct RunConfig {
    /// `FAULT_VERSION`: 3.4 or 3.5 (default 3.5).
    pub version: EtcdVersion,
    /// `FAULT_MODE`: baseline or guarded (default guarded).
    pub mode: Mode,
    /// `FAULT_SEED`: the first schedule's seed (default 1); schedule k uses seed+k.
    pub first_seed: u64,
    /// `FAULT_SCHEDULES`: how many schedules (default 1).
    pub schedules: usize,
    /// `FAULT_PER_CLUSTER`: schedules per cluster before a fresh one (default 8).
    pub per_cluster: usize,
    /// `FAULT_MEMBERS`: cluster sizes, cycled per cluster: `3`, `5`, `3,5` (default 3).
    pub members: Vec<usize>,
    /// `FAULT_SEQUENCE`: run this explicit schedule instead of generating one.
    pub sequence: Option<String>,
    /// `FAULT_VERBOSE`: print every event as it happens (default: when one schedule).
    pub verbose: bool,
    /// `FAULT_REPORT`: append the tally as one JSON line to this file.
    pub report: Option<PathBuf>,
    /// How long a heal may take (default three times the patience).
    pub heal_limit: Option<Duration>,
    /// Skip the checker after a heal that gave up (a baseline test that
    /// counts the failed heal as the loss it looks for).
    pub skip_check_unhealed: bool,
}

impl RunConfig {
    /// A run of `schedules` schedules from `first_seed`, 3 members, quiet.
    pub fn new(version: EtcdVersion, mode: Mode, first_seed: u64, schedules: usize) -> RunConfig {
        RunConfig {
            version,
            mode,
            first_seed,
            schedules,
            per_cluster: 8,
            members: vec![3],
            sequence: None,
            verbose: false,
            report: None,
            heal_limit: None,
            skip_check_unhealed: false,
        }
    }

    /// Reads the `FAULT_*` variables.
    pub fn from_env() -> Result<RunConfig, String> {
        let var = |k: &str| std::env::var(k).ok().filter(|v| !v.trim().is_empty());
        let num = |k: &str, default: u64| -> Result<u64, String> {
            match var(k) {
                None => Ok(default),
                Some(v) => v.trim().parse().map_err(|e| format!("{k}={v}: {e}")),
            }
        };
        let version = match var("FAULT_VERSION") {
            None => EtcdVersion::V3_5,
            Some(v) => parse_version(&v).ok_or(format!(
                "FAULT_VERSION={v}: want 3.4, 3.5, 3.5-latest, 3.6 or 3.7"
            ))?,
        };
        let mode = match var("FAULT_MODE") {
            None => Mode::Guarded,
            Some(v) => {
                Mode::parse(&v).ok_or(format!("FAULT_MODE={v}: want baseline or guarded"))?
            }
        };
        let members = match var("FAULT_MEMBERS") {
            None => vec![3],
            Some(v) => v
                .split(',')
                .map(|n| match n.trim().parse::<usize>() {
                    Ok(n) if n >= 3 && n % 2 == 1 => Ok(n),
                    _ => Err(format!("FAULT_MEMBERS={v}: want odd sizes ≥ 3, e.g. 3,5")),
                })
                .collect::<Result<Vec<_>, _>>()?,
        };
        let schedules = num("FAULT_SCHEDULES", 1)? as usize;
        let verbose = match var("FAULT_VERBOSE") {
            Some(v) => v != "0" && v != "false",
            None => schedules == 1,
        };
        Ok(RunConfig {
            version,
            mode,
            first_seed: num("FAULT_SEED", 1)?,
            schedules,
            per_cluster: (num("FAULT_PER_CLUSTER", 8)? as usize).max(1),
            members,
            sequence: var("FAULT_SEQUENCE"),
            verbose,
            report: var("FAULT_REPORT").map(PathBuf::from),
            heal_limit: None,
            skip_check_unhealed: false,
        })
    }

    fn env_prefix(&self, seed: u64, members: usize) -> String {
        let mut s = format!(
            "FAULT_SEED={seed} FAULT_MODE={} FAULT_VERSION={} FAULT_MEMBERS={members}",
            self.mode.label(),
            version_short(self.version)
        );
        if let Some(seq) = &self.sequence {
            s = format!("FAULT_SEQUENCE='{seq}' {s}");
        }
        s
    }
}

/// The command that replays with the given env prefix.
pub const REPLAY: &str = "cargo test --test it -- --ignored --exact faults::replay --nocapture";

/// What one schedule did and what the checker found.
#[derive(Clone, Debug)]
pub struct Outcome {
    /// The schedule.
    pub schedule: Schedule,
    /// Writes acknowledged during this schedule.
    pub acked_new: usize,
    /// Puts that failed or timed out during this schedule.
    pub indeterminate: usize,
    /// The checker's findings (over every write acknowledged on the cluster).
    pub check: Check,
    /// Starts, verdicts, remedies.
    pub counters: Counters,
    /// A heal that failed, or a harness panic.
    pub error: Option<String>,
    /// Timestamped events.
    pub events: Vec<String>,
    /// Wall time.
    pub elapsed: Duration,
}

impl Outcome {
    /// Whether the schedule lost, diverged, answered foreign, could not heal, or
    /// saw the guard say what it must not (an anomaly).
    pub fn failed(&self) -> bool {
        self.error.is_some() || !self.check.clean() || !self.counters.anomalies.is_empty()
    }

    /// One line for the progress log.
    pub fn summary(&self) -> String {
        let refusals: Vec<String> = self
            .counters
            .refusals
            .iter()
            .map(|(k, v)| format!("{k}×{v}"))
            .collect();
        format!(
            "+{} acked ({} indeterminate), lost {}, divergent {}, foreign {}, refusals [{}], remedies {}, crashes {}{} — {:.1}s",
            self.acked_new,
            self.indeterminate,
            self.check.lost.len(),
            self.check.divergent.len(),
            self.check.foreign.len(),
            refusals.join(" "),
            self.counters.remedies,
            self.counters.crashes,
            if self.error.is_some() { ", HEAL FAILED" } else { "" },
            self.elapsed.as_secs_f64()
        )
    }

    /// Everything about a failed schedule.
    pub fn details(&self) -> String {
        let mut s = String::new();
        let mut section = |title: &str, items: &[String], limit: usize| {
            if !items.is_empty() {
                s.push_str(&format!("  {title} ({}):\n", items.len()));
                for item in items.iter().take(limit) {
                    s.push_str(&format!("    {item}\n"));
                }
                if items.len() > limit {
                    s.push_str(&format!("    … and {} more\n", items.len() - limit));
                }
            }
        };
        section("lost acknowledged writes", &self.check.lost, 10);
        section("divergent replicas", &self.check.divergent, 10);
        section("foreign cluster IDs", &self.check.foreign, 10);
        section("unanswered", &self.check.unanswered, 10);
        section("notes", &self.check.notes, 10);
        section("anomalies", &self.counters.anomalies, 10);
        let error: Vec<String> = self.error.iter().cloned().collect();
        section("error", &error, 1);
        section("events", &self.events, 200);
        s
    }
}

/// Runs one schedule on `fc`: writers, faults, heal, writers stop, checker. `tag`
/// must be unique on this cluster (it names the keys).
pub fn run_schedule(fc: &mut FaultCluster, schedule: &Schedule, tag: &str) -> Outcome {
    let started = Instant::now();
    fc.begin();
    fc.event(format!("schedule {tag} ({:?}): {schedule}", schedule.shape));
    if schedule
        .faults
        .iter()
        .any(|f| matches!(f, schedule::Fault::OldVolume(_)))
    {
        fc.make_earlier_volumes();
    }
    let mut writer = Writer::start(tag, fc.cluster.client_urls());
    // Writes in flight before the first fault: the cluster acknowledges them.
    // (A panic here is the schedule's error: the caller catches it.)
    assert_eventually!(
        {
            let acked = writer.acked();
            ensure(
                acked >= writer::WRITERS,
                format!("{acked} writes acknowledged"),
            )
        },
        "the writers' first puts are acknowledged before the first fault"
    );
    let mut incarnation = 0;
    for fault in &schedule.faults {
        if matches!(
            fault,
            schedule::Fault::Recreate(_) | schedule::Fault::RestoreAll(_)
        ) {
            // The cluster is deleted, or restored from a backup, on purpose:
            // what it acknowledged goes with it (a restore keeps what the
            // backup held, which the checker no longer asks for). The new
            // incarnation's writes are checked from here.
            let gone = writer.stop();
            fc.event(format!(
                "the cluster is {}: its {} acknowledged writes (and {} earlier) go with it",
                if matches!(fault, schedule::Fault::Recreate(_)) {
                    "deleted"
                } else {
                    "restored from a backup"
                },
                gone.acked.len(),
                fc.acked.len()
            ));
            fc.acked.clear();
            fc.apply(*fault);
            incarnation += 1;
            writer = Writer::start(&format!("{tag}i{incarnation}"), fc.cluster.client_urls());
            continue;
        }
        fc.apply(*fault);
    }
    let heal = fc.heal();
    let log = writer.stop();
    fc.event(format!(
        "writers stopped: {} acknowledged, {} indeterminate",
        log.acked.len(),
        log.indeterminate
    ));
    let acked_new = log.acked.len();
    fc.acked.extend(log.acked);
    let check = if heal.is_err() && !fc.check_unhealed {
        Check {
            acked: fc.acked.len(),
            notes: vec!["not checked: the heal gave up".to_string()],
            ..Check::default()
        }
    } else {
        check(fc, tag)
    };
    fc.event(format!(
        "checked {} acknowledged writes: lost {}, divergent {}, foreign {}, unanswered {}",
        check.acked,
        check.lost.len(),
        check.divergent.len(),
        check.foreign.len(),
        check.unanswered.len()
    ));
    Outcome {
        schedule: schedule.clone(),
        acked_new,
        indeterminate: log.indeterminate,
        check,
        counters: fc.counters.clone(),
        error: heal.err(),
        events: fc.events.clone(),
        elapsed: started.elapsed(),
    }
}

fn panic_message(payload: Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        s.to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "panic with a non-string payload".to_string()
    }
}

/// Figures for one mode and etcd version.
#[derive(Clone, Debug, Default)]
pub struct Tally {
    /// `baseline` or `guarded`.
    pub mode: String,
    /// `3.4.23` or `3.5.1`.
    pub version: String,
    /// Schedules run.
    pub schedules: usize,
    /// Schedules per cluster size.
    pub by_members: BTreeMap<usize, usize>,
    /// Schedules per generator shape.
    pub by_shape: BTreeMap<String, usize>,
    /// Clusters formed.
    pub clusters: usize,
    /// Writes acknowledged.
    pub acked: usize,
    /// Puts that failed or timed out.
    pub indeterminate: usize,
    /// Acknowledged writes lost.
    pub lost: usize,
    /// Schedules that lost at least one.
    pub schedules_with_loss: usize,
    /// Divergent replicas (summed over schedules).
    pub divergent: usize,
    /// Schedules with at least one.
    pub schedules_with_divergence: usize,
    /// Members answering with another cluster ID.
    pub foreign: usize,
    /// Members the checker could not read.
    pub unanswered: usize,
    /// Heals that failed, harness panics, formation failures.
    pub errors: usize,
    /// Verdicts, refusals, remedies, crashes.
    pub counters: Counters,
    /// Seeds of failing schedules with their replay command.
    pub failures: Vec<String>,
    /// Wall time.
    pub elapsed: Duration,
}

impl Tally {
    fn add(&mut self, members: usize, o: &Outcome) {
        self.schedules += 1;
        *self.by_members.entry(members).or_default() += 1;
        *self
            .by_shape
            .entry(format!("{:?}", o.schedule.shape))
            .or_default() += 1;
        self.acked += o.acked_new;
        self.indeterminate += o.indeterminate;
        self.lost += o.check.lost.len();
        self.schedules_with_loss += usize::from(!o.check.lost.is_empty());
        self.divergent += o.check.divergent.len();
        self.schedules_with_divergence += usize::from(!o.check.divergent.is_empty());
        self.foreign += o.check.foreign.len();
        self.unanswered += o.check.unanswered.len();
        self.errors += usize::from(o.error.is_some());
        self.counters.merge(&o.counters);
    }

    /// The figures as one JSON document.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "mode": self.mode,
            "version": self.version,
            "schedules": self.schedules,
            "by_members": self.by_members.iter().map(|(k, v)| (k.to_string(), *v)).collect::<BTreeMap<_, _>>(),
            "by_shape": self.by_shape,
            "clusters": self.clusters,
            "writes_acknowledged": self.acked,
            "writes_indeterminate": self.indeterminate,
            "acknowledged_writes_lost": self.lost,
            "schedules_with_loss": self.schedules_with_loss,
            "divergent_replicas": self.divergent,
            "schedules_with_divergence": self.schedules_with_divergence,
            "foreign_cluster_ids": self.foreign,
            "unanswered": self.unanswered,
            "errors": self.errors,
            "verdicts": self.counters.verdicts,
            "refusals": self.counters.refusals,
            "remedies": self.counters.remedies,
            "crash_loop_remedies": self.counters.crash_remedies,
            "etcd_crashes": self.counters.crashes,
            "joins_killed_after_publishing": self.counters.joins_killed_after_publishing,
            "anomalies": self.counters.anomalies,
            "failures": self.failures,
            "elapsed_s": self.elapsed.as_secs(),
        })
    }

    /// The human report.
    pub fn report(&self) -> String {
        let join = |m: &BTreeMap<String, usize>| {
            if m.is_empty() {
                "none".to_string()
            } else {
                m.iter()
                    .map(|(k, v)| format!("{k} {v}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            }
        };
        let sizes: Vec<String> = self
            .by_members
            .iter()
            .map(|(k, v)| format!("{v} on {k} members"))
            .collect();
        let shapes: Vec<String> = self
            .by_shape
            .iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect();
        format!(
            "fault schedules — {} mode, etcd {}: {} schedules ({}; {}) on {} clusters in {:.0?}\n\
             \x20 writes acknowledged:        {} (indeterminate: {})\n\
             \x20 acknowledged writes lost:   {} (in {} schedules)\n\
             \x20 divergent replicas:         {} (in {} schedules)\n\
             \x20 foreign cluster IDs:        {}; unanswered: {}; heal/harness errors: {}\n\
             \x20 preflight verdicts:         {}\n\
             \x20 refusals by verdict:        {}\n\
             \x20 remedies:                   {} (after crash loops: {}); etcd crashes: {}; joins killed after publishing: {}\n\
             \x20 anomalies:                  {}\n",
            self.mode,
            self.version,
            self.schedules,
            sizes.join(", "),
            shapes.join(", "),
            self.clusters,
            self.elapsed,
            self.acked,
            self.indeterminate,
            self.lost,
            self.schedules_with_loss,
            self.divergent,
            self.schedules_with_divergence,
            self.foreign,
            self.unanswered,
            self.errors,
            join(&self.counters.verdicts),
            join(&self.counters.refusals),
            self.counters.remedies,
            self.counters.crash_remedies,
            self.counters.crashes,
            self.counters.joins_killed_after_publishing,
            if self.counters.anomalies.is_empty() {
                "none".to_string()
            } else {
                self.counters.anomalies.join("; ")
            },
        )
    }
}

/// Runs `cfg.schedules` schedules, `cfg.per_cluster` per cluster, a fresh cluster
/// after any failing schedule; prints a line per schedule and a block per failure
/// with the commands that replay it.
pub fn run(cfg: &RunConfig) -> Tally {
    let started = Instant::now();
    let mut tally = Tally {
        mode: cfg.mode.label().to_string(),
        version: cfg.version.label().to_string(),
        ..Tally::default()
    };
    let mut k = 0usize;
    let mut cluster_no = 0usize;
    while k < cfg.schedules {
        let members = cfg.members[cluster_no % cfg.members.len()];
        cluster_no += 1;
        let first_seed = cfg.first_seed + k as u64;
        let formed = catch_unwind(|| FaultCluster::form(cfg.version, members, cfg.mode));
        let mut fc = match formed {
            Ok(fc) => fc,
            Err(p) => {
                let msg = panic_message(p);
                eprintln!("forming a {members}-member cluster failed: {msg}");
                tally.errors += 1;
                k += 1;
                continue;
            }
        };
        tally.clusters += 1;
        fc.verbose = cfg.verbose;
        if let Some(limit) = cfg.heal_limit {
            fc.heal_limit = limit;
        }
        fc.check_unhealed = !cfg.skip_check_unhealed;
        eprintln!(
            "[{} {}] cluster #{cluster_no}: {members} members formed in {:.1?}",
            cfg.mode.label(),
            cfg.version.label(),
            fc.cluster.formed_in()
        );
        let mut on_this = 0usize;
        while on_this < cfg.per_cluster && k < cfg.schedules {
            let seed = cfg.first_seed + k as u64;
            k += 1;
            on_this += 1;
            let schedule = match &cfg.sequence {
                Some(seq) => Schedule::parse(members, seq).unwrap_or_else(|e| panic!("{e}")),
                None => Schedule::generate(seed, members),
            };
            eprintln!(
                "[{} {} n={members}] seed {seed} (#{on_this} on cluster #{cluster_no}): {schedule}",
                cfg.mode.label(),
                cfg.version.label()
            );
            let tag = format!("s{seed}");
            let outcome =
                match catch_unwind(AssertUnwindSafe(|| run_schedule(&mut fc, &schedule, &tag))) {
                    Ok(o) => o,
                    Err(p) => Outcome {
                        schedule: schedule.clone(),
                        acked_new: 0,
                        indeterminate: 0,
                        check: Check::default(),
                        counters: fc.counters.clone(),
                        error: Some(format!("harness panic: {}", panic_message(p))),
                        events: fc.events.clone(),
                        elapsed: Duration::ZERO,
                    },
                };
            eprintln!("    → {}", outcome.summary());
            tally.add(members, &outcome);
            if outcome.failed() {
                let single = format!("{} {REPLAY}", cfg.env_prefix(seed, members));
                let history = format!(
                    "FAULT_SCHEDULES={on_this} FAULT_PER_CLUSTER={on_this} {} {REPLAY}",
                    cfg.env_prefix(first_seed, members)
                );
                eprintln!(
                    "\n=== FAILED SCHEDULE: seed {seed}, {} mode, etcd {}, {members} members (schedule #{on_this} on a cluster first used by seed {first_seed})\n  faults: {schedule}\n{}  replay this schedule on a fresh cluster:\n    {single}\n  replay the whole history of its cluster:\n    {history}\n",
                    cfg.mode.label(),
                    cfg.version.label(),
                    outcome.details()
                );
                tally.failures.push(format!("seed {seed}: {single}"));
                // A fresh cluster: nothing lost here is blamed on a later schedule.
                break;
            }
        }
    }
    tally.elapsed = started.elapsed();
    eprintln!("\n{}", tally.report());
    if let Some(path) = &cfg.report {
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .unwrap_or_else(|e| panic!("cannot open {}: {e}", path.display()));
        writeln!(f, "{}", tally.to_json()).expect("write the report");
    }
    tally
}
