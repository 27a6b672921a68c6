//! A real etcd cluster under fault schedules: applying faults, starting members the
//! way each mode starts them, and healing the cluster the way an operator would.
//!
//! * **baseline**: a member (re)starts with its frozen flags, as Kubernetes restarts
//!   a Pod today.
//! * **guarded**: every start is preceded by `etcd-member-agent preflight`; etcd
//!   starts only on exit 0. A refused member stays down until the heal, which then
//!   applies the documented remedy: `member remove`, `member add` (same name and
//!   peer URL), `preflight` again (it must say `join`), and etcd on the empty
//!   directory with `=existing` and the `--initial-cluster` that `member add`
//!   printed — from then on those flags are the member's (as the operator would
//!   rewrite the Pod).
//!
//! Baseline heals too: a member that crashes on start three times in a row (say,
//! raft's `tocommit(N) is out of range` on a wiped voter, or `member count is
//! unequal` when its frozen `--initial-cluster` predates later members) gets the
//! same remove/add/fresh-start remedy, as the operator's self-heal does after a
//! crash loop. A member that comes back *healthy* is left alone in both modes —
//! whatever it lost is for the checker to find.
//!
//! Two shapes the guard once got wrong are faults of their own: a volume from an
//! earlier, same-named cluster (made once per cluster, when a schedule first
//! needs it: each member in turn briefly runs alone on a scratch directory with
//! another `--initial-cluster-token` and writes a key), which must be refused
//! (`refuse-foreign`), never started; and a re-added member whose first start
//! fails or is killed, whose leftovers must be joined or started, never
//! refused while the live list shows it never started.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use crate::common::*;

use super::schedule::Fault;

/// How every member start goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// etcd starts with its frozen flags, no questions asked.
    Baseline,
    /// `preflight` first; etcd only on exit 0.
    Guarded,
}

impl Mode {
    /// `baseline` or `guarded`.
    pub fn label(self) -> &'static str {
        match self {
            Mode::Baseline => "baseline",
            Mode::Guarded => "guarded",
        }
    }

    /// Parses [`Mode::label`].
    pub fn parse(s: &str) -> Option<Mode> {
        match s.trim() {
            "baseline" => Some(Mode::Baseline),
            "guarded" => Some(Mode::Guarded),
            _ => None,
        }
    }
}

/// `3.4`, `3.5` (3.5.1), `3.5-latest`, `3.6` or `3.7`.
pub fn version_short(v: EtcdVersion) -> &'static str {
    match v {
        EtcdVersion::V3_4 => "3.4",
        EtcdVersion::V3_5 => "3.5",
        EtcdVersion::V3_5Latest => "3.5-latest",
        EtcdVersion::V3_6 => "3.6",
        EtcdVersion::V3_7 => "3.7",
    }
}

/// Parses `3.4`, `3.4.23`, `34`, `3.5`, `3.5.1`, `35` (the legacy 3.5.1),
/// `3.5-latest` or the newest 3.5 patch's full version, `3.6`, `3.7` and theirs.
pub fn parse_version(s: &str) -> Option<EtcdVersion> {
    let s = s.trim();
    match s {
        "3.4" | "3.4.23" | "34" => Some(EtcdVersion::V3_4),
        "3.5" | "3.5.1" | "35" => Some(EtcdVersion::V3_5),
        "3.5-latest" => Some(EtcdVersion::V3_5Latest),
        "3.6" | "36" => Some(EtcdVersion::V3_6),
        "3.7" | "37" => Some(EtcdVersion::V3_7),
        _ => EtcdVersion::CURRENT.into_iter().find(|v| v.label() == s),
    }
}

/// One `preflight` run.
#[derive(Clone, Debug)]
pub struct Preflight {
    /// Exit code.
    pub code: i32,
    /// `verdict` from the JSON document.
    pub verdict: String,
    /// `reason` from the JSON document.
    pub reason: String,
}

/// What happened to starts, per schedule (and summed in reports).
#[derive(Clone, Debug, Default)]
pub struct Counters {
    /// Every preflight verdict, by name.
    pub verdicts: BTreeMap<String, usize>,
    /// Preflight refusals (exit ≠ 0), by verdict.
    pub refusals: BTreeMap<String, usize>,
    /// Remove/add/fresh-start remedies performed.
    pub remedies: usize,
    /// Of those, how many followed a crash loop rather than a refusal.
    pub crash_remedies: usize,
    /// etcd processes that exited on their own.
    pub crashes: usize,
    /// Joins killed after the member was already listed as started (it
    /// published its name before the kill, so the cluster counts it as having
    /// started): an empty directory or WAL under it is then refused as any
    /// started member's is (`refuse-empty-formed`, the remedy brings it back).
    pub joins_killed_after_publishing: usize,
    /// Refusals of such a member, before the remedy gave it a new start.
    pub refusals_after_a_published_join: usize,
    /// Things the guard should never say here (`bootstrap` for a formed cluster,
    /// `join` outside a remedy).
    pub anomalies: Vec<String>,
}

impl Counters {
    /// Adds `other` into `self`.
    pub fn merge(&mut self, other: &Counters) {
        for (k, v) in &other.verdicts {
            *self.verdicts.entry(k.clone()).or_default() += v;
        }
        for (k, v) in &other.refusals {
            *self.refusals.entry(k.clone()).or_default() += v;
        }
        self.remedies += other.remedies;
        self.crash_remedies += other.crash_remedies;
        self.crashes += other.crashes;
        self.joins_killed_after_publishing += other.joins_killed_after_publishing;
        self.refusals_after_a_published_join += other.refusals_after_a_published_join;
        self.anomalies.extend(other.anomalies.iter().cloned());
    }
}

/// A member start crashing this many times in a row is remedied.
const CRASH_LOOP: usize = 3;
/// How long one heal pass waits for the members it started.
const SETTLE: Duration = Duration::from_secs(20);

/// A real cluster, the mode its members start in, and what has been acknowledged.
pub struct FaultCluster {
    /// The cluster (tests/it/common).
    pub cluster: Cluster,
    /// How members start.
    pub mode: Mode,
    /// The cluster ID at formation; no member may ever answer with another.
    pub cluster_id: u64,
    /// Every write acknowledged on this cluster since it formed.
    pub acked: BTreeMap<String, String>,
    /// This schedule's counters.
    pub counters: Counters,
    /// This schedule's events, timestamped.
    pub events: Vec<String>,
    /// Print events as they happen.
    pub verbose: bool,
    /// How long the heal may take before it gives up (default three times
    /// the patience).
    pub heal_limit: Duration,
    /// Run the checker after a heal that gave up (default): a test that
    /// counts a failed heal as the loss it looks for can skip it.
    pub check_unhealed: bool,
    /// `--initial-cluster` after a remedy (the flags the operator would rewrite).
    initial_cluster: Vec<Option<String>>,
    /// Members being remedied: `preflight` saying `join` is expected for them.
    joining: BTreeSet<usize>,
    /// Members whose last guarded start was refused: their etcd container never
    /// ran in this Pod, so a container-only restart is not possible for them.
    refused: BTreeSet<usize>,
    /// Members whose volume was swapped or emptied since they last started: it
    /// comes with a new Pod, so their next start runs the init containers.
    new_volume: BTreeSet<usize>,
    /// Members holding an earlier incarnation's volume: `preflight` letting etcd
    /// start on it is an anomaly.
    old_volume: BTreeSet<usize>,
    /// Members whose join was killed after they published (listed as started).
    published_join_killed: BTreeSet<usize>,
    /// Re-added members whose first start failed: what it left is joined, or
    /// started (an empty log, row 5b; or caught up before it was killed).
    first_start_failed: BTreeSet<usize>,
    /// The earlier incarnation's data dirs (`m0`, `m1`, …), once made.
    earlier: Option<PathBuf>,
    /// The newest crash-consistent copy of each member's volume ([`Fault::Copy`]).
    copies: Vec<Option<PathBuf>>,
    /// Members whose volume was put back to an older copy of itself since they
    /// last started: a refusal (`refuse-rolled-back`) is right for them, and so
    /// is a start (behind nothing known, or on its leader's word).
    rolled_back: BTreeSet<usize>,
    /// The current incarnation's token, once the cluster was recreated.
    token: Option<String>,
    /// The last [`Fault::Backup`] of this schedule (`etcdctl snapshot save`).
    backup: Option<PathBuf>,
    /// Recreations so far.
    incarnations: u32,
    /// Members bootstrapping a recreated cluster: `bootstrap` is expected.
    bootstrapping: BTreeSet<usize>,
    /// The witness sidecars (guarded mode): `serve` beside each member, keeping
    /// its witness file on a directory of its own (another volume).
    sidecars: Vec<Option<Sidecar>>,
    scratch: tempfile::TempDir,
    preflights: u64,
    clock: Instant,
}

impl FaultCluster {
    /// Forms a cluster of `members` like the operator (seed, then `member add`s).
    pub fn form(version: EtcdVersion, members: usize, mode: Mode) -> FaultCluster {
        let n = members;
        let cluster = Cluster::builder(version)
            .members(members)
            .token("fault-schedules")
            .start();
        let status = cluster[0].endpoint_status();
        let cluster_id = status["header"]["cluster_id"]
            .as_u64()
            .unwrap_or_else(|| panic!("no cluster ID in {status}"));
        FaultCluster {
            initial_cluster: vec![None; cluster.len()],
            cluster,
            mode,
            cluster_id,
            acked: BTreeMap::new(),
            counters: Counters::default(),
            events: Vec::new(),
            verbose: false,
            heal_limit: patience() * 3,
            check_unhealed: true,
            joining: BTreeSet::new(),
            refused: BTreeSet::new(),
            new_volume: BTreeSet::new(),
            old_volume: BTreeSet::new(),
            published_join_killed: BTreeSet::new(),
            first_start_failed: BTreeSet::new(),
            earlier: None,
            copies: vec![None; n],
            rolled_back: BTreeSet::new(),
            token: None,
            backup: None,
            incarnations: 0,
            bootstrapping: BTreeSet::new(),
            sidecars: (0..n).map(|_| None).collect(),
            scratch: tempfile::tempdir().expect("a temp dir for verdict files"),
            preflights: 0,
            clock: Instant::now(),
        }
        .with_sidecars()
    }

    /// In guarded mode, a witness sidecar beside every member, and every
    /// member restarted once through `preflight` (a rolling restart: the
    /// cluster was formed without it), so each sidecar holds its member's
    /// verdict — as in a Pod, where the sidecar waits for it — and keeps its
    /// witness from then on.
    fn with_sidecars(mut self) -> FaultCluster {
        if self.mode != Mode::Guarded {
            return self;
        }
        for i in 0..self.len() {
            let dir = self.witness_dir(i);
            std::fs::create_dir_all(&dir)
                .unwrap_or_else(|e| panic!("cannot create {}: {e}", dir.display()));
            let m = &self.cluster[i];
            self.sidecars[i] = Some(Sidecar::start(
                m.client_url(),
                m.data_dir(),
                &dir,
                "fault-schedules",
            ));
        }
        for i in 0..self.len() {
            self.cluster[i].stop();
            if let Err(p) = self.start(i) {
                panic!(
                    "the rolling restart through preflight refused m{i}: {} (exit {}): {}",
                    p.verdict, p.code, p.reason
                );
            }
            self.cluster[i].wait_healthy();
        }
        self.event("every member restarted once through preflight, beside its witness sidecar");
        self
    }

    /// Member `i`'s witness directory: its witness file and the verdict file of
    /// its latest start (a volume of its own, outliving its data's).
    fn witness_dir(&self, i: usize) -> PathBuf {
        self.scratch.path().join(format!("witness-m{i}"))
    }

    /// Starts a new schedule's counters, events and clock.
    pub fn begin(&mut self) {
        self.counters = Counters::default();
        self.events.clear();
        self.clock = Instant::now();
        // A copy is of this schedule's: a rollback puts a member back to the
        // copy its own schedule took.
        for c in &mut self.copies {
            *c = None;
        }
        self.backup = None;
    }

    /// The current incarnation's `--initial-cluster-token`.
    fn current_token(&self) -> String {
        self.token
            .clone()
            .unwrap_or_else(|| "fault-schedules".to_string())
    }

    /// Number of members.
    pub fn len(&self) -> usize {
        self.cluster.len()
    }

    /// Records an event.
    pub fn event(&mut self, what: impl AsRef<str>) {
        let line = format!(
            "{:7.2}s {}",
            self.clock.elapsed().as_secs_f64(),
            what.as_ref()
        );
        if self.verbose {
            eprintln!("    {line}");
        }
        self.events.push(line);
    }

    /// Records something the guard should never do: an event and a counter.
    fn anomaly(&mut self, what: String) {
        self.event(format!("ANOMALY: {what}"));
        self.counters.anomalies.push(what);
    }

    fn name(&self, i: usize) -> String {
        self.cluster[i].name().to_string()
    }

    /// Applies one fault. Faults that meet another state are no-ops (killing a
    /// member that is down, restarting one that runs, thawing one not frozen).
    /// Returns `preflight`'s refusal when a guarded restart was refused.
    pub fn apply(&mut self, fault: Fault) -> Option<Preflight> {
        let mut refusal = None;
        let m = |i: usize| &self.cluster[i];
        match fault {
            Fault::Pause(ms) => std::thread::sleep(Duration::from_millis(ms)),
            Fault::Kill(i) => {
                if m(i).is_running() {
                    m(i).kill9();
                    self.event(format!("{fault}"));
                } else {
                    self.event(format!("{fault}: not running, nothing to do"));
                }
            }
            Fault::Freeze(i) => {
                if m(i).is_answering() {
                    m(i).freeze();
                    self.event(format!("{fault}"));
                } else {
                    self.event(format!("{fault}: not answering, nothing to do"));
                }
            }
            Fault::Thaw(i) => {
                if m(i).is_frozen() {
                    m(i).thaw();
                    self.event(format!("{fault}"));
                } else {
                    self.event(format!("{fault}: not frozen, nothing to do"));
                }
            }
            Fault::Wipe(i) => {
                if m(i).is_running() {
                    m(i).kill9();
                }
                m(i).wipe_data_dir();
                self.volume_replaced(i);
                self.event(format!("{fault} (kill -9, data dir emptied)"));
            }
            Fault::OldVolume(i) => {
                let Some(earlier) = self.earlier.clone() else {
                    self.event(format!("{fault}: no earlier volumes made, nothing to do"));
                    return None;
                };
                if m(i).is_running() {
                    m(i).kill9();
                }
                m(i).wipe_data_dir();
                copy_tree(&earlier.join(format!("m{i}")), m(i).data_dir());
                self.volume_replaced(i);
                self.old_volume.insert(i);
                self.event(format!(
                    "{fault} (kill -9, data dir replaced by an earlier incarnation's)"
                ));
            }
            Fault::FailedJoin(i) | Fault::JoinKilled(i, _) => {
                if let Some(why) = self.others_not_up(i) {
                    self.event(format!("{fault}: {why}, nothing to do"));
                    return None;
                }
                if m(i).is_running() {
                    m(i).kill9();
                }
                m(i).wipe_data_dir();
                self.volume_replaced(i);
                if let Err(e) = self.member_remove(i).and_then(|()| self.member_add(i)) {
                    self.event(format!("{fault}: {e}; left down on an empty directory"));
                    return None;
                }
                refusal = self.first_start(fault, i);
            }
            Fault::Copy(i) => {
                let dest = self.scratch.path().join(format!("copy-m{i}"));
                let _ = std::fs::remove_dir_all(&dest);
                // A crash-consistent image, as a VolumeSnapshot takes it: the
                // process stopped between two syscalls while the files are read.
                let freeze = m(i).is_running() && !m(i).is_frozen();
                if freeze {
                    m(i).freeze();
                }
                copy_tree(m(i).data_dir(), &dest);
                if freeze {
                    m(i).thaw();
                }
                self.copies[i] = Some(dest);
                self.event(format!("{fault} (its volume as it is now)"));
            }
            Fault::Rollback(i) | Fault::RollbackWal(i) => {
                let Some(copy) = self.copies[i].clone() else {
                    self.event(format!("{fault}: no copy taken, nothing to do"));
                    return None;
                };
                if matches!(fault, Fault::RollbackWal(_)) && !m(i).wal_dir().exists() {
                    // Wiped since the copy: no WAL volume to put back under
                    // a current db (a WAL without its db is another shape).
                    self.event(format!(
                        "{fault}: the member's volume was wiped since the copy, nothing to do"
                    ));
                    return None;
                }
                if m(i).is_running() {
                    m(i).kill9();
                }
                if matches!(fault, Fault::Rollback(_)) {
                    m(i).wipe_data_dir();
                    copy_tree(&copy, m(i).data_dir());
                } else {
                    let wal = m(i).wal_dir();
                    std::fs::remove_dir_all(&wal)
                        .unwrap_or_else(|e| panic!("cannot remove {}: {e}", wal.display()));
                    copy_tree(&copy.join("member").join("wal"), &wal);
                }
                self.volume_replaced(i);
                self.rolled_back.insert(i);
                self.event(format!(
                    "{fault} (kill -9, {} put back to the copy)",
                    if matches!(fault, Fault::Rollback(_)) {
                        "volume"
                    } else {
                        "WAL alone"
                    }
                ));
            }
            Fault::Recreate(mask) => {
                if let Err(e) = self.recreate(mask) {
                    self.event(format!("{fault}: {e}"));
                }
            }
            Fault::Backup(i) => {
                if !m(i).is_answering() {
                    self.event(format!("{fault}: not answering, nothing to do"));
                    return None;
                }
                let dest = self.scratch.path().join("backup.db");
                let _ = std::fs::remove_file(&dest);
                let out = m(i).etcdctl([
                    std::ffi::OsStr::new("snapshot"),
                    "save".as_ref(),
                    dest.as_os_str(),
                ]);
                if out.status.success() {
                    self.backup = Some(dest);
                    self.event(format!("{fault} (etcdctl snapshot save)"));
                } else {
                    self.event(format!(
                        "{fault}: snapshot save failed, nothing to do: {}",
                        String::from_utf8_lossy(&out.stderr).trim()
                    ));
                }
            }
            Fault::RestoreAll(bumped) => {
                if let Err(e) = self.restore_all(bumped) {
                    self.event(format!("{fault}: {e}"));
                }
            }
            Fault::Lead(i) => match self.move_leader(i) {
                Ok(how) => self.event(format!("{fault} ({how})")),
                Err(e) => self.event(format!("{fault}: {e}, nothing to do")),
            },
            Fault::RestartUnguarded(i)
                if m(i).data_dir().join("member").exists()
                    && !self.refused.contains(&i)
                    && !self.new_volume.contains(&i) =>
            {
                if m(i).is_running() {
                    self.event(format!("{fault}: running, nothing to do"));
                } else {
                    self.spawn(i);
                    self.event(format!("{fault}: started without preflight"));
                }
            }
            Fault::Restart(i) | Fault::RestartUnguarded(i) => {
                if m(i).is_running() {
                    self.event(format!("{fault}: running, nothing to do"));
                } else {
                    let how = match self.start(i) {
                        Ok(()) => "started".to_string(),
                        Err(p) => {
                            let how = format!("refused: {} (exit {})", p.verdict, p.code);
                            refusal = Some(p);
                            how
                        }
                    };
                    self.event(format!("{fault}: {how}"));
                }
            }
        }
        refusal
    }

    /// The data of member `i` is gone or replaced: a new Pod, no remedy under way.
    fn volume_replaced(&mut self, i: usize) {
        self.published_join_killed.remove(&i);
        self.rolled_back.remove(&i);
        self.new_volume.insert(i);
        self.old_volume.remove(&i);
        self.joining.remove(&i);
        self.first_start_failed.remove(&i);
    }

    /// Every member but `i` runs and answers healthy.
    fn others_healthy(&self, i: usize) -> bool {
        (0..self.len()).filter(|&j| j != i).all(|j| {
            self.cluster[j].is_running()
                && health(self.cluster[j].client_url(), Duration::from_secs(2)).is_ok()
        })
    }

    /// Why `member add` for `i` cannot work now: another member not answering.
    fn others_not_up(&self, i: usize) -> Option<String> {
        let down: Vec<usize> = (0..self.len())
            .filter(|&j| j != i)
            .filter(|&j| {
                !self.cluster[j].is_answering()
                    || health(self.cluster[j].client_url(), Duration::from_secs(2)).is_err()
            })
            .collect();
        (!down.is_empty()).then(|| format!("{} not up", names(&down)))
    }

    /// The first start of re-added member `i` on its empty directory, failing:
    /// with flags etcd rejects (it exits, leaving its debris), or killed after
    /// the given delay.
    fn first_start(&mut self, fault: Fault, i: usize) -> Option<Preflight> {
        let m = &self.cluster[i];
        match fault {
            Fault::FailedJoin(_) => {
                // The operator's first attempt with a wrong --initial-cluster
                // (its own entry only): etcd cannot join with it and exits.
                let own = format!("{}={}", m.name(), m.peer_url());
                m.start_with(move |f| {
                    f.initial_cluster = own;
                    f.initial_cluster_state = ClusterState::Existing;
                });
                let exited = m.wait_exit(Duration::from_secs(60));
                if exited.is_none() {
                    m.kill9();
                }
                let left = debris(m);
                self.first_start_failed.insert(i);
                self.event(format!(
                    "{fault}: started with its own --initial-cluster only, {}; left {left}",
                    if exited.is_some() {
                        "etcd exited"
                    } else {
                        "etcd still ran after 60 s, killed"
                    }
                ));
                None
            }
            Fault::JoinKilled(_, ms) => {
                if let Err(p) = self.start(i) {
                    let how = format!("refused: {} (exit {})", p.verdict, p.code);
                    self.event(format!("{fault}: {how}"));
                    return Some(p);
                }
                std::thread::sleep(Duration::from_millis(ms));
                let m = &self.cluster[i];
                let how = if m.is_running() {
                    m.kill9();
                    "killed"
                } else {
                    "already exited"
                };
                let left = debris(m);
                let (name, peer) = (m.name().to_string(), m.peer_url().to_string());
                // Listed with its name: it published before the kill, so the
                // cluster counts it as started, whatever its directory holds.
                let published = match self.live_entry(&name, &peer) {
                    Ok(Some(e)) => e["name"].as_str().is_some_and(|n| !n.is_empty()),
                    _ => false,
                };
                if published {
                    self.counters.joins_killed_after_publishing += 1;
                    self.published_join_killed.insert(i);
                }
                self.first_start_failed.insert(i);
                self.event(format!(
                    "{fault}: started to join, {how}{}; left {left}",
                    if published {
                        " after it published (listed as started)"
                    } else {
                        ""
                    }
                ));
                None
            }
            _ => None,
        }
    }

    /// [`Fault::Recreate`]: the cluster deleted (every member killed), then
    /// created again under the same member names and peer URLs with a new
    /// token, as the operator forms a cluster: the seed bootstraps, then each
    /// other member is `member add`ed and started. The members of `mask` keep
    /// their volumes (an earlier incarnation's, now), the others get fresh
    /// ones; the witnesses stay. Guarded, an inherited volume is refused and
    /// wiped (the seed then bootstraps, a joiner joins); a fresh one is never
    /// refused on the earlier incarnation's witness.
    fn recreate(&mut self, mask: u32) -> Result<(), String> {
        let n = self.len();
        for i in 0..n {
            if self.cluster[i].is_running() {
                self.cluster[i].kill9();
            }
        }
        self.incarnations += 1;
        let token = format!("fault-schedules-{}", self.incarnations);
        self.token = Some(token.clone());
        for i in 0..n {
            self.initial_cluster[i] = None;
            self.joining.remove(&i);
            self.refused.remove(&i);
            self.first_start_failed.remove(&i);
            // A volume wiped earlier and not started since, or holding only
            // a failed first start's debris (a db, no WAL: etcd's `wal.Exist`
            // says no data), is inherited empty: it holds nothing of the
            // earlier incarnation (a fresh volume; seed 10261 on 3.7).
            let holds_data = std::fs::read_dir(self.cluster[i].wal_dir()).is_ok_and(|entries| {
                entries
                    .flatten()
                    .any(|e| e.file_name().to_string_lossy().ends_with(".wal"))
            });
            if mask & (1 << i) != 0 && holds_data {
                self.volume_replaced(i);
                self.old_volume.insert(i);
            } else if mask & (1 << i) != 0 {
                self.volume_replaced(i);
                self.event(format!(
                    "recreate: m{i}'s inherited volume holds no WAL (wiped, or a failed first start's debris): a fresh one"
                ));
            } else {
                self.cluster[i].wipe_data_dir();
                self.volume_replaced(i);
            }
        }
        let seed = &self.cluster[0];
        let seed_id =
            etcd_member_agent::disk::ids::member_id(&[seed.peer_url().to_owned()], &token);
        self.cluster_id = etcd_member_agent::disk::ids::cluster_id(&[seed_id]).get();
        self.event(format!(
            "recreate: the cluster deleted, created again with token {token} (cluster {:016x}); {} inherit their volumes",
            self.cluster_id,
            names(&(0..n).filter(|i| mask & (1 << i) != 0).collect::<Vec<_>>())
        ));
        self.bootstrapping.insert(0);
        let formed = self.recreate_member(0);
        self.bootstrapping.remove(&0);
        formed?;
        for i in 1..n {
            self.member_add(i)?;
            self.recreate_member(i)?;
        }
        self.event("recreate: every member of the new incarnation healthy");
        Ok(())
    }

    /// Starts member `i` of a recreated cluster; an inherited volume refused
    /// is given a fresh one (the operator's remedy for a PVC it cannot use),
    /// and the member starts again.
    fn recreate_member(&mut self, i: usize) -> Result<(), String> {
        if let Err(p) = self.start(i) {
            if !self.old_volume.contains(&i) {
                return Err(format!(
                    "recreate: m{i} refused on a fresh volume: {} (exit {}): {}",
                    p.verdict, p.code, p.reason
                ));
            }
            self.cluster[i].wipe_data_dir();
            let joining = self.joining.contains(&i);
            self.volume_replaced(i);
            if joining {
                self.joining.insert(i);
            }
            self.counters.remedies += 1;
            self.event(format!(
                "recreate: m{i}'s inherited volume refused; a fresh one"
            ));
            self.start(i).map_err(|p| {
                format!(
                    "recreate: m{i} refused on its fresh volume: {} (exit {}): {}",
                    p.verdict, p.code, p.reason
                )
            })?;
        }
        // Started: the member is one of the new incarnation now, and its next
        // start is a restart, not a join.
        self.joining.remove(&i);
        self.cluster[i]
            .try_wait_healthy(patience())
            .map_err(|e| format!("recreate: m{i} not healthy: {e}"))
    }

    /// [`Fault::Lead`]: `etcdctl move-leader` to member `i`, sent to the
    /// leader. The member IDs are read from each member's status (a restore
    /// or a remedy changes them).
    fn move_leader(&mut self, i: usize) -> Result<String, String> {
        let id_of = |s: &serde_json::Value| s["header"]["member_id"].as_u64();
        let status = self.cluster[i].try_endpoint_status()?;
        let target = id_of(&status).ok_or("no member ID in its status")?;
        let leader = status["leader"]
            .as_u64()
            .filter(|&l| l != 0)
            .ok_or("no leader")?;
        if leader == target {
            return Ok("already the leader".into());
        }
        let at = (0..self.len())
            .find(|&j| {
                self.cluster[j]
                    .try_endpoint_status()
                    .is_ok_and(|s| id_of(&s) == Some(leader))
            })
            .ok_or_else(|| format!("the leader {leader:016x} does not answer"))?;
        let out = self.cluster[at].etcdctl(["move-leader", &format!("{target:x}")]);
        if !out.status.success() {
            return Err(format!(
                "move-leader failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        Ok(format!("from m{at}"))
    }

    /// [`Fault::RestoreAll`]: etcd's documented disaster recovery from this
    /// schedule's backup, the runbook's way (section 17, third remedy): every
    /// member killed and restored with its own name, the whole
    /// `--initial-cluster` and the token, before any starts; unbumped, the
    /// rollback is acknowledged by removing every witness; bumped past every
    /// witness's mark (`--bump-revision 1000000 --mark-compacted`, where the
    /// line has it), the witnesses stay. Then every member starts (guarded:
    /// through `preflight`, which must say `start`, row 5 or 5e) and the
    /// cluster is waited for. The cluster ID is the restored membership's.
    fn restore_all(&mut self, bumped: bool) -> Result<(), String> {
        let Some(backup) = self.backup.clone() else {
            return Err("no backup taken, nothing to do".into());
        };
        let version = self.cluster[0].version();
        let can_bump = !matches!(version, EtcdVersion::V3_4 | EtcdVersion::V3_5);
        let bump = (bumped && can_bump).then_some(1_000_000u64);
        let n = self.len();
        for i in 0..n {
            if self.cluster[i].is_running() {
                self.cluster[i].kill9();
            }
        }
        // The Pods go with their volumes' contents: new sidecars at the next
        // start (the old ones are killed here, before their witnesses go).
        for i in 0..n {
            self.sidecars[i] = None;
        }
        if bump.is_none() && self.mode == Mode::Guarded {
            for i in 0..n {
                let w = self.witness_dir(i).join("witness.json");
                match std::fs::remove_file(&w) {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => return Err(format!("cannot remove {}: {e}", w.display())),
                }
            }
        }
        let token = self.current_token();
        let initial: Vec<String> = (0..n)
            .map(|i| format!("{}={}", self.name(i), self.cluster[i].peer_url()))
            .collect();
        for i in 0..n {
            let m = &self.cluster[i];
            let dir = m.data_dir().to_path_buf();
            std::fs::remove_dir_all(&dir)
                .map_err(|e| format!("cannot remove {}: {e}", dir.display()))?;
            // 3.4 restores with etcdctl; 3.5 on with etcdutl.
            let mut cmd = match version.etcdutl() {
                Some(etcdutl) => std::process::Command::new(etcdutl),
                None => {
                    let mut c = std::process::Command::new(version.etcdctl());
                    c.env("ETCDCTL_API", "3");
                    c
                }
            };
            cmd.arg("snapshot")
                .arg("restore")
                .arg(&backup)
                .arg(format!("--name={}", m.name()))
                .arg(format!("--initial-cluster={}", initial.join(",")))
                .arg(format!("--initial-cluster-token={token}"))
                .arg(format!("--initial-advertise-peer-urls={}", m.peer_url()))
                .arg(format!("--data-dir={}", dir.display()));
            if let Some(b) = bump {
                cmd.arg(format!("--bump-revision={b}"))
                    .arg("--mark-compacted");
            }
            let out = cmd
                .output()
                .map_err(|e| format!("cannot run snapshot restore: {e}"))?;
            if !out.status.success() {
                return Err(format!(
                    "snapshot restore for m{i} failed: {}",
                    String::from_utf8_lossy(&out.stderr).trim()
                ));
            }
        }
        for i in 0..n {
            self.volume_replaced(i);
            self.refused.remove(&i);
            self.first_start_failed.remove(&i);
        }
        self.event(format!(
            "restore-all: every member restored from the backup ({}){}",
            match bump {
                Some(b) => format!("--bump-revision {b} --mark-compacted"),
                None if bumped => format!("unbumped: {} has no --bump-revision", version.label()),
                None => "unbumped".to_string(),
            },
            if bump.is_none() && self.mode == Mode::Guarded {
                "; every witness removed (the rollback acknowledged)"
            } else {
                ""
            }
        ));
        for i in 0..n {
            if let Err(p) = self.start(i) {
                let what = format!(
                    "preflight refused {} restored by the runbook's disaster recovery: {} (exit {}): {}",
                    self.name(i),
                    p.verdict,
                    p.code,
                    p.reason
                );
                self.anomaly(what);
            }
        }
        for i in 0..n {
            if self.cluster[i].is_running() {
                self.cluster[i]
                    .try_wait_healthy(patience())
                    .map_err(|e| format!("restore-all: m{i} not healthy: {e}"))?;
            }
        }
        let up = (0..n)
            .find(|&i| self.cluster[i].is_running())
            .ok_or("restore-all: no member started")?;
        let status = self.cluster[up].endpoint_status();
        self.cluster_id = status["header"]["cluster_id"]
            .as_u64()
            .ok_or_else(|| format!("restore-all: no cluster ID in {status}"))?;
        self.event(format!(
            "restore-all: every member healthy (cluster {:016x})",
            self.cluster_id
        ));
        Ok(())
    }

    /// Makes, once, the volumes an earlier cluster of the same name left: each
    /// member in turn is stopped, started alone on a scratch directory with
    /// another token (a one-member cluster with its name and peer URL), writes a
    /// key, is stopped, and is started again on its own directory. Call it while
    /// the cluster is healthy and no writer runs.
    pub fn make_earlier_volumes(&mut self) {
        if self.earlier.is_some() {
            return;
        }
        let root = self.scratch.path().join("earlier");
        std::fs::create_dir_all(&root)
            .unwrap_or_else(|e| panic!("cannot create {}: {e}", root.display()));
        for i in 0..self.len() {
            let dir = root.join(format!("m{i}"));
            let m = &self.cluster[i];
            let own = format!("{}={}", m.name(), m.peer_url());
            // The earlier incarnation ran in Pods of its own: this member's
            // sidecar (killed here, as a Pod is, keeping its last mark) never
            // sees it, and a new one starts with the member back on its data.
            let sidecar = self.sidecars[i].take().is_some();
            m.stop();
            let data_dir = dir.clone();
            m.start_with(move |f| {
                f.data_dir = data_dir;
                f.token = "fault-schedules-earlier-incarnation".into();
                f.initial_cluster = own;
                f.initial_cluster_state = ClusterState::New;
            });
            m.wait_healthy();
            m.put(
                &format!("earlier-incarnation/{}", m.name()),
                "the old keyspace",
            );
            m.stop();
            if sidecar {
                let (witness, token) = (self.witness_dir(i), self.current_token());
                let m = &self.cluster[i];
                self.sidecars[i] = Some(Sidecar::start(
                    m.client_url(),
                    m.data_dir(),
                    &witness,
                    &token,
                ));
            }
            self.spawn(i);
            self.cluster[i].wait_healthy();
        }
        self.earlier = Some(root);
        self.event("made the volumes of an earlier incarnation (one per member)");
    }

    /// Starts member `i` as its mode does: baseline at once with its flags; guarded
    /// only when `preflight` exits 0. Returns the refusal otherwise.
    pub fn start(&mut self, i: usize) -> Result<(), Preflight> {
        if self.mode == Mode::Guarded {
            // A replaced volume comes with a new Pod, and so with a new
            // sidecar (it reads the WAL at boot); the witness file, on a
            // volume of its own, stays.
            if self.new_volume.contains(&i) {
                let (dir, token) = (self.witness_dir(i), self.current_token());
                let m = &self.cluster[i];
                self.sidecars[i] = None;
                self.sidecars[i] = Some(Sidecar::start(m.client_url(), m.data_dir(), &dir, &token));
            }
            let p = self.preflight(i);
            if p.code != 0 {
                self.refused.insert(i);
                // An inherited volume of an earlier incarnation is refused
                // rightly, joiner or not (row 6, 6a).
                if self.joining.contains(&i) && p.code != 14 && !self.old_volume.contains(&i) {
                    self.refused_joiner(i, &p);
                }
                // A member whose data nothing replaced since it last ran
                // (killed -9 at any moment, frozen, restarted) must start: a
                // refusal of it is a false one. `phase-unknown` (14) is a wait.
                let replaced = self.new_volume.contains(&i)
                    || self.rolled_back.contains(&i)
                    || self.joining.contains(&i)
                    || self.first_start_failed.contains(&i)
                    || self.published_join_killed.contains(&i)
                    || self.bootstrapping.contains(&i);
                if !replaced && p.code != 14 {
                    let what = format!(
                        "preflight refused {}, whose data nothing replaced since it last ran: {} (exit {}): {}",
                        self.name(i),
                        p.verdict,
                        p.code,
                        p.reason
                    );
                    self.anomaly(what);
                }
                return Err(p);
            }
            self.refused.remove(&i);
            if self.old_volume.contains(&i) {
                let what = format!(
                    "preflight let {} start on an earlier incarnation's volume: {} (exit {}): {}",
                    self.name(i),
                    p.verdict,
                    p.code,
                    p.reason
                );
                self.anomaly(what);
            }
            // A re-added member is joined on its empty directory; what a failed
            // first start left is joined, or started when its log is empty
            // (row 5b) or it had caught up.
            let expected: &[&str] = if self.bootstrapping.contains(&i) {
                &["bootstrap"]
            } else if self.first_start_failed.contains(&i) {
                &["join", "start"]
            } else if self.joining.contains(&i) {
                &["join"]
            } else {
                &["start"]
            };
            // A member added and never started (refused, then wiped, before
            // its first start) is joined: the leader's list says so.
            let listed_unstarted =
                p.verdict == "join" && !expected.contains(&"join") && self.listed_unstarted(i);
            if !expected.contains(&p.verdict.as_str()) && !listed_unstarted {
                let what = format!(
                    "preflight said {} (exit {}) for {} where {} was expected: {}",
                    p.verdict,
                    p.code,
                    self.name(i),
                    expected.join(" or "),
                    p.reason
                );
                self.anomaly(what);
            }
        }
        self.new_volume.remove(&i);
        self.rolled_back.remove(&i);
        self.spawn(i);
        Ok(())
    }

    /// Whether the live list (linearizable, through the running members) shows
    /// member `i` added and never started.
    fn listed_unstarted(&mut self, i: usize) -> bool {
        let (name, peer) = (self.name(i), self.cluster[i].peer_url().to_string());
        match self.live_entry(&name, &peer) {
            Ok(entry) => entry
                .as_ref()
                .is_some_and(|e| e["name"].as_str().unwrap_or("").is_empty()),
            Err(e) => {
                self.event(format!("cannot tell whether {name} ever started: {e}"));
                false
            }
        }
    }

    /// A re-added member refused: wrong when the live list still shows it added
    /// and never started (what its failed first start left is not data).
    fn refused_joiner(&mut self, i: usize, p: &Preflight) {
        let name = self.name(i);
        if self.listed_unstarted(i) {
            let what = format!(
                "preflight refused {name}, listed as added and never started, after a failed first start: {} (exit {}): {}",
                p.verdict, p.code, p.reason
            );
            self.anomaly(what);
        }
    }

    /// etcd with the member's current flags (frozen, or rewritten by a remedy).
    fn spawn(&self, i: usize) {
        let m = &self.cluster[i];
        let ic = self.initial_cluster[i].clone();
        let token = self.token.clone();
        m.start_with(move |f| {
            if let Some(ic) = ic {
                f.initial_cluster = ic;
                f.initial_cluster_state = ClusterState::Existing;
            }
            if let Some(t) = token {
                f.token = t;
            }
        });
    }

    /// The init container's env for member `i` (with its current
    /// `--initial-cluster`), no Kubernetes, a 5 s budget, and verdict and
    /// termination files in a scratch dir.
    pub fn preflight_env(&mut self, i: usize) -> Vec<(String, String)> {
        self.preflights += 1;
        let mut env = self.cluster.agent_env(i);
        if let Some(ic) = &self.initial_cluster[i] {
            for (k, v) in env.iter_mut() {
                if k == "ETCD_INITIAL_CLUSTER" {
                    *v = ic.clone();
                }
            }
        }
        if let Some(t) = &self.token {
            for (k, v) in env.iter_mut() {
                if k == "ETCD_INITIAL_CLUSTER_TOKEN" {
                    *v = t.clone();
                }
            }
        }
        let n = self.preflights;
        let scratch = self.scratch.path();
        env.push(("AGENT_KUBE".into(), "false".into()));
        env.push(("AGENT_TIMEOUT".into(), "5s".into()));
        env.push((
            "TERMINATION_LOG".into(),
            scratch
                .join(format!("termination-{n}"))
                .display()
                .to_string(),
        ));
        // The verdict where this member's sidecar reads it, and the witness
        // file it keeps (guarded mode; the baseline has no agent at all).
        let witness = self.witness_dir(i);
        env.push((
            "AGENT_VERDICT_FILE".into(),
            witness.join("preflight.json").display().to_string(),
        ));
        env.push((
            "AGENT_WITNESS_FILE".into(),
            witness.join("witness.json").display().to_string(),
        ));
        // A recreated cluster's seed: no operator here to say the cluster has
        // not formed, so its first start is the documented one without
        // evidence (which still refuses on any evidence that it started).
        if self.bootstrapping.contains(&i) {
            env.push((
                "AGENT_ALLOW_BOOTSTRAP_WITHOUT_EVIDENCE".into(),
                "true".into(),
            ));
        }
        env
    }

    /// Runs `etcd-member-agent preflight -o json` for member `i` and counts it.
    pub fn preflight(&mut self, i: usize) -> Preflight {
        let env = self.preflight_env(i);
        let mut cmd = std::process::Command::new(agent_binary());
        cmd.env_clear();
        if let Some(path) = std::env::var_os("PATH") {
            cmd.env("PATH", path);
        }
        cmd.args(["preflight", "-o", "json"]);
        for (k, v) in &env {
            cmd.env(k, v);
        }
        let run = run_command(cmd);
        // `FAULT_KEEP_REPORTS=<dir>`: every preflight's JSON document kept
        // there, numbered (what each source said, for a replay's post-mortem).
        if let Some(dir) = std::env::var_os("FAULT_KEEP_REPORTS") {
            let path = Path::new(&dir).join(format!(
                "preflight-{}-{}.json",
                self.preflights,
                self.name(i)
            ));
            if let Some(doc) = &run.json {
                let _ = std::fs::create_dir_all(&dir);
                let _ =
                    std::fs::write(&path, serde_json::to_string_pretty(doc).unwrap_or_default());
            }
        }
        let field = |k: &str| {
            run.json
                .as_ref()
                .and_then(|j| j[k].as_str())
                .unwrap_or("")
                .to_string()
        };
        let mut verdict = field("verdict");
        if verdict.is_empty() {
            verdict = format!("<no verdict, exit {}>", run.code);
        }
        let p = Preflight {
            code: run.code,
            reason: field("reason"),
            verdict,
        };
        *self.counters.verdicts.entry(p.verdict.clone()).or_default() += 1;
        if p.code != 0 {
            *self.counters.refusals.entry(p.verdict.clone()).or_default() += 1;
            if self.published_join_killed.contains(&i) {
                self.counters.refusals_after_a_published_join += 1;
            }
        }
        if p.verdict == "bootstrap" && !self.bootstrapping.contains(&i) {
            let what = format!(
                "preflight said bootstrap for {} of a formed cluster: {}",
                self.name(i),
                p.reason
            );
            self.counters.anomalies.push(what);
        }
        self.event(format!(
            "preflight {}: {} (exit {}) — {}",
            self.name(i),
            p.verdict,
            p.code,
            p.reason
        ));
        p
    }

    /// Brings every member back: thaw the frozen; start the down (guarded: through
    /// `preflight`) until every member runs healthy, is refused, or crash-loops;
    /// then remedy the refused and crash-looping ones. `Err` when the cluster
    /// cannot be brought back to every member healthy.
    pub fn heal(&mut self) -> Result<(), String> {
        let n = self.len();
        for i in 0..n {
            if self.cluster[i].is_frozen() {
                self.cluster[i].thaw();
                self.event(format!("heal: thaw m{i}"));
            }
        }
        let deadline = Instant::now() + self.heal_limit;
        let mut remedy: BTreeSet<usize> = BTreeSet::new();
        let mut exits = vec![0usize; n];
        // Members the heal started whose exit (if any) is not yet accounted for.
        let mut watching: BTreeSet<usize> = BTreeSet::new();
        // What the last pass that did not settle saw.
        let mut unsettled = String::new();
        loop {
            self.account_exits(&mut watching, &mut exits, &mut remedy);
            for i in 0..n {
                if remedy.contains(&i) || self.cluster[i].is_running() {
                    continue;
                }
                match self.start(i) {
                    Ok(()) => {
                        self.event(format!("heal: start m{i}"));
                        watching.insert(i);
                    }
                    // Nobody answered yet: ask again once the others are up.
                    Err(p) if p.code == 14 => {}
                    // Behind what it reached: it starts on its leader's word
                    // once the members holding the data lead (row 5d); the
                    // remedy only when every other member runs healthy and it
                    // is still refused.
                    Err(p) if p.code == 17 && !self.others_healthy(i) => {
                        self.event(format!(
                            "heal: m{i} refused ({}); again once the others are up",
                            p.verdict
                        ));
                    }
                    Err(p) => {
                        self.event(format!(
                            "heal: m{i} refused ({}); remedy after the others are up",
                            p.verdict
                        ));
                        remedy.insert(i);
                    }
                }
            }
            if let Err(e) = self.settle(SETTLE) {
                self.event(format!("heal: not settled: {e}; another pass"));
                unsettled = e;
            }
            self.account_exits(&mut watching, &mut exits, &mut remedy);
            let pending: Vec<usize> = (0..n)
                .filter(|i| !remedy.contains(i))
                .filter(|&i| {
                    !self.cluster[i].is_running()
                        || health(self.cluster[i].client_url(), Duration::from_secs(2)).is_err()
                })
                .collect();
            if pending.is_empty() {
                break;
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "heal: {} not running healthy after {:?} (last pass: {unsettled}){}",
                    names(&pending),
                    self.heal_limit,
                    self.log_tails(&pending)
                ));
            }
        }
        if !remedy.is_empty() {
            self.remedy(&remedy.into_iter().collect::<Vec<_>>())?;
        }
        let all: Vec<usize> = (0..n).collect();
        eventually(patience(), || {
            let sick: Vec<usize> = all
                .iter()
                .copied()
                .filter(|&i| health(self.cluster[i].client_url(), Duration::from_secs(2)).is_err())
                .collect();
            ensure(sick.is_empty(), format!("{} not healthy", names(&sick)))
        })
        .map_err(|e| format!("heal: {e}{}", self.log_tails(&all)))?;
        self.event("heal: every member healthy");
        // Every re-added member has now joined: from here on it is a member.
        self.joining.clear();
        self.first_start_failed.clear();
        Ok(())
    }

    /// Counts the members in `watching` that exited on their own; three exits in
    /// a row make a crash loop, queued for the remedy.
    fn account_exits(
        &mut self,
        watching: &mut BTreeSet<usize>,
        exits: &mut [usize],
        remedy: &mut BTreeSet<usize>,
    ) {
        for i in watching.clone() {
            if self.cluster[i].is_running() {
                continue;
            }
            watching.remove(&i);
            let Some(status) = self.cluster[i].exit_status() else {
                continue;
            };
            exits[i] += 1;
            self.counters.crashes += 1;
            let why = why_exited(&self.cluster[i]);
            self.event(format!("heal: m{i} exited ({status}): {why}"));
            if exits[i] >= CRASH_LOOP {
                self.event(format!("heal: m{i} crash-loops; remedy"));
                self.counters.crash_remedies += 1;
                remedy.insert(i);
            }
        }
    }

    /// Waits until every running member is healthy or one of them exits. `Err`
    /// when `timeout` passes first, naming the members that are not healthy and
    /// why: the heal records it and tries another pass (a member that waits for
    /// a remedied peer is not healthy before it), and its own deadline fails
    /// with the last such answer.
    fn settle(&self, timeout: Duration) -> Result<(), String> {
        let running: Vec<usize> = (0..self.len())
            .filter(|&i| self.cluster[i].is_running())
            .collect();
        eventually(timeout, || {
            if running.iter().any(|&i| !self.cluster[i].is_running()) {
                return Ok(());
            }
            let sick: Vec<String> = running
                .iter()
                .filter_map(|&i| {
                    health(self.cluster[i].client_url(), Duration::from_secs(2))
                        .err()
                        .map(|e| format!("{}: {e}", self.name(i)))
                })
                .collect();
            ensure(sick.is_empty(), sick.join("; "))
        })
    }

    /// The documented remedy for each of `members`: kill, empty the directory,
    /// `member remove` (all of them first, so the remaining voters are all up when
    /// `member add` checks them), then one by one `member add` with the same name
    /// and peer URL, `preflight` (guarded: must say `join`), start on the empty
    /// directory with the printed `--initial-cluster`, wait until healthy.
    pub fn remedy(&mut self, members: &[usize]) -> Result<(), String> {
        for &i in members {
            let m = &self.cluster[i];
            if m.is_running() {
                m.kill9();
            }
            m.wipe_data_dir();
        }
        for &i in members {
            self.volume_replaced(i);
            self.member_remove(i)
                .map_err(|e| format!("remedy {}: {e}", self.name(i)))?;
        }
        for &i in members {
            let name = self.name(i);
            self.member_add(i)
                .map_err(|e| format!("remedy {name}: {e}"))?;
            let started = self.start(i);
            self.joining.remove(&i);
            if let Err(p) = started {
                return Err(format!(
                    "remedy {name}: preflight refused the re-added member: {} (exit {}): {}",
                    p.verdict, p.code, p.reason
                ));
            }
            if let Err(e) = self.cluster[i].try_wait_healthy(patience()) {
                return Err(format!("remedy {name}: not healthy after the join: {e}"));
            }
            self.counters.remedies += 1;
            self.event(format!(
                "remedy {name}: joined on an empty directory, healthy"
            ));
        }
        Ok(())
    }

    /// `member remove` of member `i`'s live entry (by name or peer URL), if
    /// listed.
    fn member_remove(&mut self, i: usize) -> Result<(), String> {
        let (name, peer) = (self.name(i), self.cluster[i].peer_url().to_string());
        let id = self
            .live_entry(&name, &peer)?
            .map(|e| e["ID"].as_u64().unwrap_or(0));
        if let Some(id) = id {
            let hex = format!("{id:x}");
            eventually(patience(), || {
                let out = self.cluster.etcdctl(["member", "remove", hex.as_str()]);
                let err = String::from_utf8_lossy(&out.stderr).into_owned();
                ensure(
                    out.status.success() || err.contains("member not found"),
                    format!("member remove {hex}: {}", last_line(&err)),
                )
            })?;
            self.event(format!("{name}: member remove {hex}"));
        }
        Ok(())
    }

    /// `member add` of member `i` (same name and peer URL); its flags become
    /// `=existing` with the `--initial-cluster` that follows from the list, and
    /// it is joining.
    fn member_add(&mut self, i: usize) -> Result<(), String> {
        let (name, peer) = (self.name(i), self.cluster[i].peer_url().to_string());
        let peer_flag = format!("--peer-urls={peer}");
        let printed = eventually(patience(), || {
            let out = self
                .cluster
                .etcdctl(["member", "add", name.as_str(), peer_flag.as_str()]);
            let err = String::from_utf8_lossy(&out.stderr).into_owned();
            if out.status.success() {
                // What `member add` printed: right after adding a second
                // member to a cluster of one, the cluster has no quorum until
                // the new member starts, and a member list would not answer.
                Ok(String::from_utf8_lossy(&out.stdout)
                    .lines()
                    .find_map(|l| l.trim().strip_prefix("ETCD_INITIAL_CLUSTER="))
                    .map(|v| v.trim_matches('"').to_string()))
            } else if err.contains("already exists") {
                Ok(None)
            } else {
                Err(format!("member add {name}: {}", last_line(&err)))
            }
        })?;
        if let Some(ic) = printed {
            self.event(format!("{name}: member add → --initial-cluster={ic}"));
            self.initial_cluster[i] = Some(ic);
            self.joining.insert(i);
            return Ok(());
        }
        let list = self.member_list()?;
        let ic: Vec<String> = list
            .iter()
            .filter_map(|e| {
                let url = e["peerURLs"][0].as_str()?;
                let member_name = match e["name"].as_str() {
                    Some(n) if !n.is_empty() => n.to_string(),
                    _ if url == peer => name.clone(),
                    _ => return None,
                };
                Some(format!("{member_name}={url}"))
            })
            .collect();
        let ic = ic.join(",");
        self.event(format!("{name}: member add → --initial-cluster={ic}"));
        self.initial_cluster[i] = Some(ic);
        self.joining.insert(i);
        Ok(())
    }

    /// `member list -w json` through the running members.
    pub fn member_list(&self) -> Result<Vec<serde_json::Value>, String> {
        eventually(patience(), || {
            let out = self.cluster.etcdctl(["member", "list", "-w", "json"]);
            if !out.status.success() {
                return Err(format!(
                    "member list: {}",
                    last_line(&String::from_utf8_lossy(&out.stderr))
                ));
            }
            let json: serde_json::Value = serde_json::from_slice(&out.stdout)
                .map_err(|e| format!("member list JSON: {e}"))?;
            json["members"]
                .as_array()
                .cloned()
                .ok_or_else(|| format!("member list without members: {json}"))
        })
    }

    /// The live list's entry for the member called `name` or with `peer`.
    fn live_entry(&self, name: &str, peer: &str) -> Result<Option<serde_json::Value>, String> {
        Ok(self.member_list()?.into_iter().find(|e| {
            e["name"].as_str() == Some(name)
                || e["peerURLs"]
                    .as_array()
                    .is_some_and(|urls| urls.iter().any(|u| u.as_str() == Some(peer)))
        }))
    }

    fn log_tails(&self, members: &[usize]) -> String {
        members
            .iter()
            .map(|&i| format!("\n--- m{i} log tail ---\n{}", self.cluster[i].log_tail(8)))
            .collect()
    }
}

/// `serve` beside one member, as the native sidecar of its Pod: it keeps the
/// member's witness file in `dir` (and reads the verdict file preflight writes
/// there). Stopped by its PID when dropped.
pub struct Sidecar {
    child: std::process::Child,
}

impl Sidecar {
    fn start(endpoint: &str, data_dir: &Path, dir: &Path, token: &str) -> Sidecar {
        let log = std::fs::File::create(dir.join("serve.log"))
            .unwrap_or_else(|e| panic!("cannot create the sidecar's log: {e}"));
        let mut cmd = std::process::Command::new(agent_binary());
        cmd.env_clear();
        if let Some(path) = std::env::var_os("PATH") {
            cmd.env("PATH", path);
        }
        let child = cmd
            .arg("serve")
            .arg(format!("--endpoints={endpoint}"))
            .arg(format!("--data-dir={}", data_dir.display()))
            .arg(format!(
                "--verdict-file={}",
                dir.join("preflight.json").display()
            ))
            .arg(format!(
                "--witness-file={}",
                dir.join("witness.json").display()
            ))
            .arg(format!("--grpc-listen=127.0.0.1:{}", free_port()))
            .arg(format!("--http-listen=127.0.0.1:{}", free_port()))
            .arg("--poll-interval=500ms")
            .arg("--poll-timeout=1s")
            .arg("--kube=false")
            .arg(format!("--initial-cluster-token={token}"))
            .env("AGENT_LOG", "info")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start the witness sidecar: {e}"));
        Sidecar { child }
    }
}

impl Drop for Sidecar {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The agent binary this test process runs: a hard link to
/// `CARGO_BIN_EXE_etcd-member-agent` taken once. The target dir is shared, and a
/// concurrent `cargo build` replaces that path (briefly leaving none, then
/// another build of the agent); a long run keeps testing the binary it started
/// with. Links of test processes that are gone are removed.
pub fn agent_binary() -> &'static Path {
    static LINK: OnceLock<PathBuf> = OnceLock::new();
    LINK.get_or_init(|| {
        let src = Path::new(env!("CARGO_BIN_EXE_etcd-member-agent"));
        let dir = src
            .parent()
            .expect("the agent binary has a directory")
            .join("fault-sched");
        std::fs::create_dir_all(&dir)
            .unwrap_or_else(|e| panic!("cannot create {}: {e}", dir.display()));
        if let Ok(entries) = std::fs::read_dir(&dir) {
            for entry in entries.flatten() {
                let pid = entry
                    .file_name()
                    .to_str()
                    .and_then(|n| n.strip_prefix("agent-"))
                    .and_then(|p| p.parse::<u32>().ok());
                if pid.is_some_and(|p| !pid_exists(p)) {
                    let _ = std::fs::remove_file(entry.path());
                }
            }
        }
        let link = dir.join(format!("agent-{}", std::process::id()));
        eventually(patience(), || {
            let _ = std::fs::remove_file(&link);
            std::fs::hard_link(src, &link)
                .or_else(|_| std::fs::copy(src, &link).map(|_| ()))
                .map_err(|e| format!("cannot link {}: {e}", src.display()))?;
            let ok = std::process::Command::new(&link)
                .arg("--version")
                .output()
                .map_err(|e| format!("cannot run {}: {e}", link.display()))?;
            ensure(
                ok.status.success(),
                format!("{} --version failed", link.display()),
            )
        })
        .unwrap_or_else(|e| panic!("{e}"));
        link
    })
}

/// What a member's data dir holds, in a few words (for the events).
fn debris(m: &Member) -> String {
    let wal = m.wal_files().len();
    let snaps = m.snap_files().len();
    let db = m.db_path().exists();
    if !db && wal == 0 && snaps == 0 {
        return "an empty directory".to_string();
    }
    format!(
        "{}, {wal} WAL file(s), {snaps} .snap file(s)",
        if db { "a db" } else { "no db" }
    )
}

/// Copies the tree at `from` into the existing directory `to`.
fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap_or_else(|e| panic!("cannot create {}: {e}", to.display()));
    let entries =
        std::fs::read_dir(from).unwrap_or_else(|e| panic!("cannot list {}: {e}", from.display()));
    for entry in entries {
        let entry = entry.unwrap_or_else(|e| panic!("cannot list {}: {e}", from.display()));
        let (src, dst) = (entry.path(), to.join(entry.file_name()));
        if src.is_dir() {
            std::fs::create_dir_all(&dst)
                .unwrap_or_else(|e| panic!("cannot create {}: {e}", dst.display()));
            copy_tree(&src, &dst);
        } else {
            std::fs::copy(&src, &dst).unwrap_or_else(|e| {
                panic!("cannot copy {} to {}: {e}", src.display(), dst.display())
            });
        }
    }
}

fn names(members: &[usize]) -> String {
    members
        .iter()
        .map(|i| format!("m{i}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn last_line(s: &str) -> &str {
    s.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("")
}

/// The panic or fatal message of a member's last run, else its last log line.
pub fn why_exited(m: &Member) -> String {
    let log = m.log_since_start();
    let mut fallback = String::new();
    for line in log.lines().rev() {
        if line.trim().is_empty() {
            continue;
        }
        if fallback.is_empty() {
            fallback = line.chars().take(300).collect();
        }
        if let Ok(json) = serde_json::from_str::<serde_json::Value>(line) {
            let level = json["level"].as_str().unwrap_or("");
            if level == "panic" || level == "fatal" {
                let msg = json["msg"].as_str().unwrap_or("");
                let err = json["error"].as_str().unwrap_or("");
                return format!("{level}: {msg} {err}").trim().to_string();
            }
        } else if line.starts_with("panic:") {
            return line.chars().take(300).collect();
        }
    }
    fallback
}
