//! The offline upgrade check (`inspect --upgrade-check` and preflight's `refuse-version`,
//! docs/supported-versions.md § The offline upgrade check):
//! what would make a given etcd version refuse or panic on a directory, read from
//! what [`super::layout::inspect`] found. Only what etcd itself refuses blocks; a
//! finding etcd starts with is a warning.
//!
//! Each rule names the etcd code behind it (read at v3.6.16 and v3.7.3):
//!
//! | finding | etcd about to start | what etcd does |
//! |---|---|---|
//! | `v2-wal-disallowed` | 3.6 | `v2ToV3Request` panics "detected disallowed v2 WAL" on a replayed v2 request other than a member-attributes or cluster-version `PUT` (entries above the commit count: the leader commits a follower's tail at once) |
//! | `v2-wal-raw` | 3.7+ | `apply.Apply` panics "unmarshal should never fail" on a replayed raw v2 request with a path |
//! | `v2-wal-unknown` | 3.6+ | more v2 requests than are kept, and a truncation below one let go: which are replayed cannot be told |
//! | `v2-store-custom` | 3.6 | `AssertNoV2StoreContent` refuses a `.snap` whose v2 store holds data ("detected disallowed custom content in v2store"); a warning under `--v2-deprecation=write-only-skip-check` (3.6.13 and newer: older patches reject that value) |
//! | `too-many-learners` | 3.6+ | `ValidateMaxLearnerConfig` at bootstrap: more learners in the backend (after 3.6's sync of promotions from the `.snap`) than `--max-learners` |
//! | `storage-version-newer` | 3.6+ | `schema.Validate` finds no migration from a newer storage version ("version … is not supported") |
//! | `cluster-version-newer` | any | `MustDetectDowngrade` panics "invalid downgrade; server version is lower than determined cluster version" (3.6+ against the backend's, ≤ 3.5 against the larger of the `.snap`'s and the backend's); for 3.5 while a downgrade is enabled, the `downgrade-*` rows decide |
//! | `cluster-version-newer-in-wal` | any | a cluster version above the target set in the WAL after the start snapshot (`ClusterVersionSet`, v2 `PUT /0/version`): etcd re-applies it at start and `mustDetectDowngrade` panics; 3.5 exempts it while the downgrade state as replayed enables a downgrade to 3.5 |
//! | `downgrade-target-other` | 3.5 | `mustDetectDowngrade` exits (fatal) "server version is not allowed to join when downgrade is enabled": `cluster/downgrade` enables a downgrade to another version |
//! | `downgrade-info-malformed` | 3.5+ | loading `cluster/downgrade` panics "failed to unmarshal downgrade information" |
//! | `downgrade-not-lowered` | 3.5 | a downgrade to 3.5 is enabled, the cluster version not lowered yet: 3.5 starts, but its `.snap`/WAL keep the newer version (3.5 forces no snapshot when it is lowered; 3.6 does), so its first restart after the downgrade completes panics in `mustDetectDowngrade` |
//! | `downgrade-enabled` | 3.5 | warning: a downgrade to 3.5 is enabled and the cluster version lowered: 3.5 joins |
//! | `skipped-minor` | any | warning: etcd upgrades one minor at a time; peers of the old line are refused by the new one |
//! | `learner-flag-stale` | 3.6+ | warning: 3.6 rewrites the backend's flag from the v2 store; 3.7 reads only the backend |

use std::path::Path;

use serde::Serialize;

use super::bbolt::{semver_minor, Downgrade};
use super::layout::{DirState, Initialized, Inspection};

/// The first 3.6 patch release that accepts `--v2-deprecation=write-only-skip-check`.
const SKIP_CHECK_SINCE_PATCH: u32 = 13;

/// The etcd version a check is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Target {
    /// Major version.
    pub major: u32,
    /// Minor version.
    pub minor: u32,
    /// Patch version, when given.
    pub patch: Option<u32>,
}

impl Target {
    /// Parses `3.6`, `3.6.11`, `v3.6.11` or `3.6.11-rc.0`.
    pub fn parse(s: &str) -> Option<Target> {
        let s = s.trim();
        let s = s.strip_prefix('v').unwrap_or(s);
        let core = s.split(['-', '+']).next()?;
        let mut it = core.split('.');
        let num = |p: Option<&str>| -> Option<u32> {
            let p = p?;
            if p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()) || p.len() > 6 {
                return None;
            }
            p.parse().ok()
        };
        let major = num(it.next())?;
        let minor = num(it.next())?;
        let patch = match it.next() {
            None => None,
            p => Some(num(p)?),
        };
        if it.next().is_some() {
            return None;
        }
        Some(Target {
            major,
            minor,
            patch,
        })
    }

    fn line(self) -> (u32, u32) {
        (self.major, self.minor)
    }
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.patch {
            Some(p) => write!(f, "{}.{}.{p}", self.major, self.minor),
            None => write!(f, "{}.{}", self.major, self.minor),
        }
    }
}

/// One thing the check found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Finding {
    /// A stable name (see the module's table).
    pub code: &'static str,
    /// etcd would refuse or panic: the start is refused.
    pub blocks: bool,
    /// What was found.
    pub message: String,
    /// The etcd rule or issue behind it.
    pub rule: &'static str,
    /// What to do.
    pub remedy: String,
}

/// The result of the check.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct UpgradeCheck {
    /// The etcd version checked for.
    pub target: String,
    /// Where that version was learnt (preflight: the Pod's image, the flag, a
    /// binary), when the caller says.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
    /// The etcd line that last wrote the directory, as far as the files tell
    /// (storage version, else cluster version).
    pub dir_line: Option<String>,
    /// Some finding blocks.
    pub blocked: bool,
    /// Everything found, blocking ones first.
    pub findings: Vec<Finding>,
}

impl UpgradeCheck {
    /// The blocking findings.
    pub(crate) fn blockers(&self) -> impl Iterator<Item = &Finding> {
        self.findings.iter().filter(|f| f.blocks)
    }

    /// The warnings.
    pub fn warnings(&self) -> impl Iterator<Item = &Finding> {
        self.findings.iter().filter(|f| !f.blocks)
    }
}

fn line_of(v: &str) -> Option<(u32, u32)> {
    semver_minor(v)
}

fn fmt_line((a, b): (u32, u32)) -> String {
    format!("{a}.{b}")
}

/// The cluster version etcd `t` checks itself against when it loads the
/// directory (`MustDetectDowngrade` in `RaftCluster.Recover`, then again for
/// each cluster-version change it replays).
///
/// * 3.6+ load it from the backend only (`cluster/clusterVersion`, written as
///   each change is applied, so at or past the start snapshot); a backend
///   without the key (3.4 wrote none) falls back to the `.snap`'s, the version
///   the WAL replay starts from. Not the larger of the two: after a downgrade
///   the backend holds the lowered version while an older `.snap` may still
///   hold the one before.
/// * 3.5 and older load it from the v2 store (the `.snap`) and then replay
///   every change after it, reaching the backend's: etcd checks both, so the
///   larger counts. (3.6 forces a `.snap` when it applies a lowered cluster
///   version, so after a finished 3.6 → 3.5 downgrade both agree.)
fn cluster_line(r: &Initialized, t: (u32, u32)) -> Option<(u32, u32)> {
    let backend = r
        .backend()
        .and_then(|b| b.cluster_version.as_deref())
        .and_then(line_of);
    let snap = r.snap_cluster_version.as_deref().and_then(line_of);
    if t >= (3, 6) {
        backend.or(snap)
    } else {
        backend.max(snap)
    }
}

/// The downgrade `etcdctl downgrade enable` left enabled in the backend, if any.
fn downgrade_enabled(r: &Initialized) -> Option<&Downgrade> {
    r.backend()
        .and_then(|b| b.downgrade.as_ref())
        .filter(|d| d.enabled && !d.target_version.is_empty())
}

/// The flags of the etcd about to start that change what it refuses (the same
/// `ETCD_*` variables etcd reads).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EtcdFlags {
    /// `--v2-deprecation` (`ETCD_V2_DEPRECATION`): 3.6 honours only
    /// `write-only-skip-check`, which lets it start on custom v2 store content.
    pub v2_deprecation: Option<String>,
    /// `--max-learners` (`ETCD_MAX_LEARNERS`, default 1).
    pub max_learners: Option<u32>,
}

/// etcd's `DefaultMaxLearners`.
const DEFAULT_MAX_LEARNERS: u32 = 1;

/// Runs the check for `target` on an inspected directory. An empty directory,
/// or one not initialized, has nothing to check (its state decides).
pub fn check(r: &Inspection, target: Target, flags: &EtcdFlags) -> UpgradeCheck {
    match &r.state {
        DirState::Initialized(m) => check_initialized(m, &r.paths.data_dir, target, flags),
        _ => UpgradeCheck {
            from: None,
            target: target.to_string(),
            dir_line: None,
            blocked: false,
            findings: Vec::new(),
        },
    }
}

/// [`check`] of an initialized directory's member: every rule of [`RULES`]
/// over the facts computed once, blocking findings first.
fn check_initialized(
    r: &Initialized,
    data_dir: &Path,
    target: Target,
    flags: &EtcdFlags,
) -> UpgradeCheck {
    let facts = Facts::new(r, data_dir, target, flags);
    let mut findings: Vec<Finding> = RULES.iter().filter_map(|rule| rule(&facts)).collect();
    findings.sort_by_key(|f| !f.blocks);
    UpgradeCheck {
        from: None,
        target: target.to_string(),
        dir_line: facts.dir_line.map(fmt_line),
        blocked: findings.iter().any(|f| f.blocks),
        findings,
    }
}

/// The rules, one a finding code (the three `downgrade-*` codes are one rule:
/// one answer about one downgrade), in the order their findings are listed
/// (blocking ones are then moved first, the order kept among each).
const RULES: [fn(&Facts) -> Option<Finding>; 12] = [
    v2_wal_disallowed,
    v2_wal_raw,
    v2_wal_unknown,
    v2_store_custom,
    storage_version_newer,
    downgrade_info_malformed,
    downgrade,
    cluster_version_newer,
    cluster_version_newer_in_wal,
    skipped_minor,
    too_many_learners,
    learner_flag_stale,
];

/// What the rules read, each computed once.
struct Facts<'a> {
    r: &'a Initialized,
    flags: &'a EtcdFlags,
    target: Target,
    /// The target's line.
    t: (u32, u32),
    /// The data dir, for the commands in remedies.
    dir: std::path::Display<'a>,
    /// The raft index of the snapshot etcd starts from.
    snap_index: u64,
    /// The backend's storage version's line.
    storage: Option<(u32, u32)>,
    /// The line of the last etcd that wrote the directory.
    dir_line: Option<(u32, u32)>,
    /// The cluster version the target checks itself against at load, when it
    /// is newer than the target ([`cluster_line`]) and no downgrade decides.
    cluster_newer: Option<(u32, u32)>,
    /// The downgrade a 3.5 target sees enabled (3.6+ no longer read it at boot).
    downgrading: Option<&'a Downgrade>,
    /// The cluster version as recorded (the backend's, else the `.snap`'s).
    current: Option<(u32, u32)>,
}

impl<'a> Facts<'a> {
    fn new(
        r: &'a Initialized,
        data_dir: &'a Path,
        target: Target,
        flags: &'a EtcdFlags,
    ) -> Facts<'a> {
        let t = target.line();
        let storage = r
            .backend()
            .and_then(|b| b.storage_version.as_deref())
            .and_then(line_of);
        let cluster = cluster_line(r, t);
        let downgrading = downgrade_enabled(r).filter(|_| t == (3, 5));
        Facts {
            r,
            flags,
            target,
            t,
            dir: data_dir.display(),
            snap_index: r.snapshot.index,
            storage,
            dir_line: storage.or(cluster),
            cluster_newer: cluster.filter(|c| c.0 == t.0 && c.1 > t.1 && downgrading.is_none()),
            downgrading,
            current: r
                .backend()
                .and_then(|b| b.cluster_version.as_deref())
                .or(r.snap_cluster_version.as_deref())
                .and_then(line_of),
        }
    }

    /// Up to three replayed v2 requests, raw ones only or disallowed ones only.
    fn v2_examples(&self, only_raw: bool, only_disallowed: bool) -> String {
        let list: Vec<String> = self
            .r
            .v2_replay
            .examples
            .iter()
            .filter(|e| (!only_raw || e.raw) && (!only_disallowed || !e.allowed_by_3_6))
            .take(3)
            .map(|e| match e.path.as_str() {
                "" => format!("{} at index {}", e.method, e.index),
                path => format!("{} {path} at index {}", e.method, e.index),
            })
            .collect();
        list.join(", ")
    }

    /// "at least " when the v2 counts are lower bounds.
    fn v2_at_least(&self) -> &'static str {
        if self.r.v2_replay.bounded {
            "at least "
        } else {
            ""
        }
    }

    /// How many of the v2 requests are above the commit index, and why they
    /// count, when some are.
    fn v2_beyond(&self) -> String {
        match self.r.v2_replay.uncommitted {
            0 => String::new(),
            n => format!(
                " ({n} of them above the commit index: the leader commits a follower's tail within a heartbeat, and a lone voter commits its own)"
            ),
        }
    }
}

fn v2_wal_disallowed(x: &Facts) -> Option<Finding> {
    let v2 = &x.r.v2_replay;
    if x.t != (3, 6) || v2.disallowed == 0 {
        return None;
    }
    let (target, dir) = (x.target, &x.dir);
    Some(Finding {
        code: "v2-wal-disallowed",
        blocks: true,
        message: format!(
            "the WAL holds {}{} v2 request(s) after the start snapshot (index {}) that etcd {target} cannot convert and panics on (\"detected disallowed v2 WAL\"){}: {}",
            x.v2_at_least(),
            v2.disallowed,
            x.snap_index,
            x.v2_beyond(),
            x.v2_examples(false, true)
        ),
        rule: "etcd 3.6 etcdserver/apply_v2.go v2ToV3Request; etcd #20809, #20870",
        remedy: format!(
            "keep this member on 3.5 (3.5.20 or newer): remove the v2 data with the v2 API, then turn --enable-v2 off (with it on, every /health probe proposes a v2 QGET through raft) and let the member take a snapshot past these entries (a lower --snapshot-count for one start makes it soon; `inspect --upgrade-check {target} --data-dir {dir}` says when), then upgrade"
        ),
    })
}

fn v2_wal_raw(x: &Facts) -> Option<Finding> {
    let v2 = &x.r.v2_replay;
    if x.t < (3, 7) || v2.raw_with_path == 0 {
        return None;
    }
    let (target, dir) = (x.target, &x.dir);
    Some(Finding {
        code: "v2-wal-raw",
        blocks: true,
        message: format!(
            "the WAL holds {}{} raw v2 request(s) with a path after the start snapshot (index {}){}; etcd {target} decodes every replayed entry as a v3 request and panics on them (\"unmarshal should never fail\"): {}",
            x.v2_at_least(),
            v2.raw_with_path,
            x.snap_index,
            x.v2_beyond(),
            x.v2_examples(true, false)
        ),
        rule: "etcd 3.7 etcdserver/apply/apply.go Apply (pbutil.MustUnmarshalMessage)",
        remedy: format!(
            "start this member on 3.6 (3.6.11 or newer) until it has a snapshot past the last 3.5-era entry (every 10000 entries with 3.6's default --snapshot-count; a lower value for one start makes it soon; `inspect --upgrade-check {target} --data-dir {dir}` says when), then upgrade to {target}"
        ),
    })
}

fn v2_wal_unknown(x: &Facts) -> Option<Finding> {
    if !x.r.v2_replay.incomplete {
        return None;
    }
    Some(Finding {
        code: "v2-wal-unknown",
        blocks: x.t >= (3, 6),
        message: format!(
            "the WAL holds more v2 requests than are kept ({} of a kind) and raft overwrote part of the log below some that were let go: which of them etcd {} replays cannot be told",
            super::v2req::KEEP,
            x.target
        ),
        rule: "etcd 3.6 v2ToV3Request / 3.7 apply.Apply on replayed entries",
        remedy: "let this member take a snapshot on its current version first, then check again"
            .into(),
    })
}

fn v2_store_custom(x: &Facts) -> Option<Finding> {
    if x.t != (3, 6) || x.r.v2_custom.is_empty() {
        return None;
    }
    let target = x.target;
    // `write-only-skip-check` exists from 3.6.13 on; 3.6.0–3.6.12 reject the
    // value when they parse their flags. A target without a patch is given
    // the benefit: an older 3.6 exits on the flag before it reads anything.
    let skip_asked = x.flags.v2_deprecation.as_deref() == Some("write-only-skip-check");
    let skip_known = target.patch.is_none_or(|p| p >= SKIP_CHECK_SINCE_PATCH);
    let skip_check = skip_asked && skip_known;
    Some(Finding {
        code: "v2-store-custom",
        blocks: !skip_check,
        message: format!(
            "the snapshot etcd {target} loads (index {}) holds v2 store data under {}; etcd 3.6 refuses it (\"detected disallowed custom content in v2store\"){}",
            x.snap_index,
            x.r.v2_custom.join(", "),
            if skip_asked && !skip_known {
                format!(", and etcd {target} does not know --v2-deprecation=write-only-skip-check (3.6.13 and newer do): it exits on that flag")
            } else {
                String::new()
            }
        ),
        rule: "etcd 3.6 storage/util.go AssertNoV2StoreContent; etcd #20351; write-only-skip-check since 3.6.13 (server/config/v2_deprecation.go)",
        remedy: if skip_check {
            "none for the start (--v2-deprecation=write-only-skip-check lets 3.6.13 and newer load it); remove the v2 data before 3.7".into()
        } else {
            "remove the v2 data on 3.5 (v2 API with --enable-v2) and let the member take a new snapshot, or start 3.6.13 or newer with --v2-deprecation=write-only-skip-check (ETCD_V2_DEPRECATION; older 3.6 releases reject that value, and 3.6 ignores every other one), then upgrade".into()
        },
    })
}

fn storage_version_newer(x: &Facts) -> Option<Finding> {
    let t = x.t;
    if t < (3, 6) {
        return None;
    }
    let s = x.storage.filter(|s| s.0 == t.0 && s.1 > t.1)?;
    Some(Finding {
        code: "storage-version-newer",
        blocks: true,
        message: format!(
            "the backend's storage version is {}, newer than etcd {} knows; it refuses to start (\"version {}.0 is not supported\")",
            fmt_line(s),
            x.target,
            fmt_line(s)
        ),
        rule: "etcd storage/schema/schema.go Validate (no migration plan to an older schema)",
        remedy: format!(
            "start the newer etcd ({}) on it; to downgrade, run `etcdctl downgrade enable {}` on the running cluster first (its members migrate their storage), or with the member stopped `etcdutl migrate --data-dir {} --target-version {}` with the {} etcdutl",
            fmt_line(s),
            fmt_line(t),
            x.dir,
            fmt_line(t),
            fmt_line(s)
        ),
    })
}

fn downgrade_info_malformed(x: &Facts) -> Option<Finding> {
    let malformed =
        x.r.backend()
            .and_then(|b| b.downgrade.as_ref())
            .is_some_and(|d| d.malformed);
    if !malformed || x.t < (3, 5) {
        return None;
    }
    Some(Finding {
        code: "downgrade-info-malformed",
        blocks: true,
        message: format!(
            "the backend's cluster/downgrade value is not the JSON etcd writes; etcd {} panics (\"failed to unmarshal downgrade information\")",
            x.target
        ),
        rule: "etcd storage/schema/membership.go DowngradeInfoFromBackend (3.6+), membership/cluster.go downgradeInfoFromBackend (3.5)",
        remedy: "the backend was written by something other than etcd: inspect the directory (`inspect --hash`) and restore the member from a snapshot or re-add it".into(),
    })
}

/// 3.5 (only 3.5: 3.6+ no longer read it at boot) lets a member join while
/// a downgrade to its own minor is enabled, whatever the cluster version,
/// and refuses every other version while one is. But a 3.5 member that
/// joins before the leader has lowered the cluster version answers "not
/// capable" and stops the downgrade: 3.6's leader lowers it only while
/// every member runs 3.6 ("Cannot downgrade from minimal-server-version to
/// downgrade-target"), so neither ever moves (tests/it/upgrade.rs).
fn downgrade(x: &Facts) -> Option<Finding> {
    let (t, target) = (x.t, x.target);
    let downgrading = x.downgrading?;
    match line_of(&downgrading.target_version) {
        Some(d) if d == t && x.current.is_some_and(|c| c > t) => {
            let current = x.current.map_or(String::new(), fmt_line);
            Some(Finding {
                code: "downgrade-not-lowered",
                blocks: true,
                message: format!(
                    "a downgrade to {} is enabled but the cluster version is still {current}: etcd {target} would start now (answering \"not capable\" until the version is lowered), but this member's .snap and WAL keep cluster version {current} and 3.5 takes no snapshot when the version is lowered, so once the downgrade completes its next restart panics (\"invalid downgrade; server version is lower than determined cluster version\"); a 3.6 member takes that snapshot when it applies the lowered version",
                    fmt_line(d),
                ),
                rule: "etcd 3.6 etcdserver/apply/apply.go ClusterVersionSet (ForceSnapshot on a lowered version); 3.5 membership/cluster.go Recover and SetVersion (mustDetectDowngrade against the .snap's and each replayed version)",
                remedy: format!(
                    "start this member on {current} again; once every member runs it and answers, the leader lowers the cluster version to {} within seconds (`curl <client-url>/version` shows etcdcluster {}.0) and every 3.6 member takes a snapshot; then restart members on {} one at a time",
                    fmt_line(d),
                    fmt_line(d),
                    fmt_line(d)
                ),
            })
        }
        Some(d) if d == t => Some(Finding {
            code: "downgrade-enabled",
            blocks: false,
            message: format!(
                "a downgrade to {} is enabled (cluster/downgrade) and the recorded cluster version is not above it: etcd {target} joins",
                fmt_line(d)
            ),
            rule: "etcd 3.5 etcdserver/api/membership/downgrade.go mustDetectDowngrade",
            remedy: "none: the downgrade is cancelled once it completes".into(),
        }),
        _ => Some(Finding {
            code: "downgrade-target-other",
            blocks: true,
            message: format!(
                "a downgrade to {:?} is enabled (cluster/downgrade); etcd {target} refuses to start (fatal \"invalid downgrade; server version is not allowed to join when downgrade is enabled\")",
                downgrading.target_version.as_str()
            ),
            rule: "etcd 3.5 etcdserver/api/membership/downgrade.go mustDetectDowngrade",
            remedy: "start this member on the downgrade's target version, or cancel the downgrade on the running cluster (`etcdctl downgrade cancel`) and start the version it runs".into(),
        }),
    }
}

fn cluster_version_newer(x: &Facts) -> Option<Finding> {
    let (t, c) = (x.t, x.cluster_newer?);
    Some(Finding {
        code: "cluster-version-newer",
        blocks: true,
        message: format!(
            "the directory records cluster version {}, newer than etcd {}; etcd panics (\"invalid downgrade; server version is lower than determined cluster version\")",
            fmt_line(c),
            x.target
        ),
        rule: "etcd etcdserver/version/downgrade.go MustDetectDowngrade",
        remedy: format!(
            "start etcd {} or newer on it; a downgrade needs `etcdctl downgrade enable {}` on the running cluster before members are restarted on {}",
            fmt_line(c),
            fmt_line(t),
            fmt_line(t)
        ),
    })
}

/// The cluster versions etcd re-applies from the WAL after the start
/// snapshot, each checked against itself as it goes: 3.5 exempts one while
/// the downgrade state (the backend's, then each replayed change) enables a
/// downgrade to 3.5; 3.6+ exempt none. Only the first such version is
/// reported, and none when the version etcd loads is already newer
/// ([`cluster_version_newer`] says so).
fn cluster_version_newer_in_wal(x: &Facts) -> Option<Finding> {
    let t = x.t;
    if x.cluster_newer.is_some() {
        return None;
    }
    let mut dg: Option<(bool, String)> =
        x.r.backend()
            .and_then(|b| b.downgrade.as_ref())
            .map(|d| (d.enabled, d.target_version.clone()));
    for ev in &x.r.v2_replay.versions {
        if let Some(d) = &ev.downgrade {
            dg = Some(d.clone());
            continue;
        }
        let Some(v) = ev.cluster_version.as_deref().and_then(line_of) else {
            continue;
        };
        let exempt = t == (3, 5)
            && dg
                .as_ref()
                .is_some_and(|(on, to)| *on && line_of(to) == Some(t));
        if v.0 == t.0 && v.1 > t.1 && !exempt {
            return Some(Finding {
                code: "cluster-version-newer-in-wal",
                blocks: true,
                message: format!(
                    "the WAL after the start snapshot sets cluster version {} at index {}, and etcd {} re-applies it at start with no downgrade to {} enabled at that point: it panics (\"invalid downgrade; server version is lower than determined cluster version\")",
                    fmt_line(v),
                    ev.index,
                    x.target,
                    fmt_line(t),
                ),
                rule: "etcd 3.5 etcdserver/apply.go (ClusterVersionSet applied whatever the consistent index) and membership/cluster.go SetVersion → mustDetectDowngrade; 3.6+ the same through applyInternalRaftRequest",
                remedy: format!(
                    "the data is intact and on the other members: if the cluster still runs {} (a downgrade not finished), start this member on {}; once the cluster runs {}, remove this member and add it again (`etcdctl member remove`, then `member add`; it receives a snapshot from the leader), or let it start on {} until it takes a snapshot past index {} (`--snapshot-count` entries)",
                    fmt_line(v),
                    fmt_line(v),
                    fmt_line(t),
                    fmt_line(v),
                    ev.index
                ),
            });
        }
    }
    None
}

fn skipped_minor(x: &Facts) -> Option<Finding> {
    let (t, target) = (x.t, x.target);
    let d = x
        .dir_line
        .filter(|d| d.0 == t.0 && d.1.saturating_add(1) < t.1)?;
    Some(Finding {
        code: "skipped-minor",
        blocks: false,
        message: format!(
            "the directory was last written by etcd {}; {target} skips a minor version: etcd upgrades one minor at a time, and {target} members refuse peers older than {}.{}",
            fmt_line(d),
            t.0,
            t.1 - 1
        ),
        rule: "etcd upgrade guides (one minor at a time); membership version checks",
        remedy: format!(
            "upgrade through {}.{} first (3.5.20+ before 3.6, 3.6.11+ before 3.7)",
            t.0,
            t.1 - 1
        ),
    })
}

fn too_many_learners(x: &Facts) -> Option<Finding> {
    let t = x.t;
    if t < (3, 6) {
        return None;
    }
    let max = x.flags.max_learners.unwrap_or(DEFAULT_MAX_LEARNERS);
    // 3.6 syncs a promotion the v2 store (.snap) knows into the backend
    // first (SyncLearnerPromotionIfNeeded); 3.7 takes the backend as it is.
    let learners =
        x.r.backend()
            .into_iter()
            .flat_map(|b| &b.members)
            .filter(|m| m.is_learner)
            .filter(|m| {
                t >= (3, 7)
                    || !x
                        .r
                        .snap_member_roles
                        .iter()
                        .any(|&(id, learner)| id == m.id && !learner)
            })
            .count();
    if learners <= max as usize {
        return None;
    }
    Some(Finding {
        code: "too-many-learners",
        blocks: true,
        message: format!(
            "the backend records {learners} learner member(s), more than --max-learners {max}; etcd {} refuses to start (\"membership: too many learner members in cluster\")",
            x.target
        ),
        rule: "etcd bootstrap ValidateMaxLearnerConfig; stale learner flags of etcd 3.5.1–3.5.19 (etcd #19557)",
        remedy: if t >= (3, 7) {
            "start this member on 3.6.11 or newer first while its .snap still records the promotions (3.6 repairs the flags), or raise --max-learners for one start".into()
        } else {
            "raise --max-learners (ETCD_MAX_LEARNERS) for this start, or let the member take a snapshot on 3.5.20+ (which records the promotions) first".into()
        },
    })
}

fn learner_flag_stale(x: &Facts) -> Option<Finding> {
    let t = x.t;
    if t < (3, 6) || x.r.learner_flag_stale.is_empty() {
        return None;
    }
    let ids: Vec<String> =
        x.r.learner_flag_stale
            .iter()
            .map(|id| id.to_string())
            .collect();
    let (what, remedy) = if t == (3, 6) {
        (
            "etcd 3.6 rewrites it from the .snap's v2 store when it starts, but only for a promotion that .snap holds (a promotion replayed from the WAL after it is not written to the backend)",
            "none needed for the 3.6 start; before 3.7, let 3.6 take a snapshot past the promotion (`--snapshot-count` entries) and restart it once more, until this warning is gone",
        )
    } else {
        (
            "etcd 3.7 reads membership only from the backend and would see the wrong role",
            "start this member on 3.6 first, until a 3.6 snapshot past the promotion and a restart repair the flag (this warning gone), then upgrade",
        )
    };
    Some(Finding {
        code: "learner-flag-stale",
        blocks: false,
        message: format!(
            "the backend's learner flag of member(s) {} disagrees with the WAL and .snap (etcd 3.5.1–3.5.19 never persisted a promotion there); {what}",
            ids.join(", ")
        ),
        rule: "etcd #19557, #20793",
        remedy: remedy.into(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::disk::ids::MemberId;
    use crate::disk::layout::{unanswered, BackendRead, Paths};
    use crate::disk::v2req::{V2Replay, V2Request};

    fn check(r: &Inspection, t: Target) -> UpgradeCheck {
        super::check(r, t, &EtcdFlags::default())
    }

    fn initialized() -> Inspection {
        let mut r = unanswered(
            &Paths::new(std::path::Path::new("/d"), None),
            Default::default(),
        );
        r.state = DirState::Initialized(Box::new(Initialized::blank()));
        r
    }

    /// The member of an inspection [`initialized`] built.
    fn m(r: &mut Inspection) -> &mut Initialized {
        match &mut r.state {
            DirState::Initialized(m) => m,
            _ => panic!("not initialized"),
        }
    }

    fn read(summary: crate::disk::bbolt::Backend) -> BackendRead {
        BackendRead::Read {
            summary,
            kv_hash: None,
        }
    }

    fn t(s: &str) -> Target {
        Target::parse(s).expect("a version")
    }

    fn codes(c: &UpgradeCheck) -> Vec<(&'static str, bool)> {
        c.findings.iter().map(|f| (f.code, f.blocks)).collect()
    }

    fn v2(allowed: bool, raw: bool) -> V2Request {
        V2Request {
            index: 7,
            term: 2,
            method: "PUT".into(),
            path: if allowed {
                "/0/version".into()
            } else {
                "/1/k".into()
            },
            raw,
            allowed_by_3_6: allowed,
        }
    }

    #[test]
    fn each_rule_blocks_only_the_versions_etcd_itself_refuses() {
        let clean = initialized();
        for v in ["3.4", "3.5", "3.6", "3.7", "3.8"] {
            assert!(check(&clean, t(v)).findings.is_empty(), "{v}");
        }
        // What 3.5 writes itself: 3.6 converts it, 3.7 panics.
        let mut r = initialized();
        m(&mut r).v2_replay = V2Replay {
            converted: 2,
            raw: 2,
            raw_with_path: 2,
            examples: vec![v2(true, true)],
            ..V2Replay::default()
        };
        assert!(check(&r, t("3.5.35")).findings.is_empty());
        assert!(check(&r, t("3.6.11")).findings.is_empty());
        assert_eq!(codes(&check(&r, t("3.7.3"))), [("v2-wal-raw", true)]);
        // v2 API data: 3.6 panics too.
        m(&mut r).v2_replay = V2Replay {
            disallowed: 1,
            raw: 1,
            raw_with_path: 1,
            examples: vec![v2(false, true)],
            ..V2Replay::default()
        };
        assert_eq!(codes(&check(&r, t("3.6"))), [("v2-wal-disallowed", true)]);
        // 3.5's /health QGETs have no path: 3.7 decodes them (a reserved field
        // and empty messages) and applies nothing; 3.6 still panics.
        m(&mut r).v2_replay = V2Replay {
            disallowed: 3,
            raw: 3,
            raw_with_path: 0,
            ..V2Replay::default()
        };
        assert!(check(&r, t("3.7")).findings.is_empty());
        assert_eq!(codes(&check(&r, t("3.6"))), [("v2-wal-disallowed", true)]);
        // Custom v2 content in the .snap: 3.6 only (3.7 does not load it).
        let mut r = initialized();
        m(&mut r).v2_custom = vec!["/1".into()];
        assert_eq!(codes(&check(&r, t("3.6"))), [("v2-store-custom", true)]);
        let skip = EtcdFlags {
            v2_deprecation: Some("write-only-skip-check".into()),
            ..EtcdFlags::default()
        };
        assert_eq!(
            codes(&super::check(&r, t("3.6"), &skip)),
            [("v2-store-custom", false)]
        );
        // The value exists from 3.6.13 on: 3.6.11 (what the operator runs)
        // exits on the flag and refuses the content without it.
        assert_eq!(
            codes(&super::check(&r, t("3.6.13"), &skip)),
            [("v2-store-custom", false)]
        );
        let old = super::check(&r, t("3.6.11"), &skip);
        assert_eq!(codes(&old), [("v2-store-custom", true)]);
        assert!(
            old.findings[0].message.contains("3.6.13 and newer"),
            "{:?}",
            old.findings[0]
        );
        assert!(check(&r, t("3.7")).findings.is_empty());
        assert!(check(&r, t("3.5")).findings.is_empty());
        // A newer cluster version: every line refuses; an older one is an
        // upgrade, a warning only when it skips a minor.
        let mut r = initialized();
        m(&mut r).snap_cluster_version = Some("3.6.0".into());
        assert_eq!(
            codes(&check(&r, t("3.5.35"))),
            [("cluster-version-newer", true)]
        );
        assert!(check(&r, t("3.6")).findings.is_empty());
        assert!(check(&r, t("3.7")).findings.is_empty());
        m(&mut r).snap_cluster_version = Some("3.4.0".into());
        assert_eq!(codes(&check(&r, t("3.6"))), [("skipped-minor", false)]);
        // v2 requests let go of under an overwritten log: 3.5 replays them
        // as it wrote them, 3.6 and 3.7 may panic on them.
        m(&mut r).v2_replay = V2Replay {
            incomplete: true,
            ..V2Replay::default()
        };
        assert_eq!(codes(&check(&r, t("3.5"))), [("v2-wal-unknown", false)]);
        assert_eq!(
            codes(&check(&r, t("3.6"))),
            [("v2-wal-unknown", true), ("skipped-minor", false)]
        );
        // A blocking finding is listed before a warning of an earlier rule.
        m(&mut r).snap_cluster_version = Some("3.6.0".into());
        assert_eq!(
            codes(&check(&r, t("3.5"))),
            [("cluster-version-newer", true), ("v2-wal-unknown", false)]
        );
        // Not initialized: nothing to check.
        let mut custom = initialized();
        m(&mut custom).v2_custom = vec!["/1".into()];
        assert!(check(&custom, t("3.6")).blocked);
        let mut empty = custom.clone();
        empty.state = DirState::Empty;
        assert!(!check(&empty, t("3.6")).blocked);
        // A stale learner flag: a warning on 3.6 and 3.7.
        let mut r = initialized();
        m(&mut r).learner_flag_stale = vec![MemberId::new(0xa)];
        assert_eq!(codes(&check(&r, t("3.7"))), [("learner-flag-stale", false)]);
        assert!(check(&r, t("3.5")).findings.is_empty());
    }

    #[test]
    fn a_downgrade_enabled_to_3_5_lets_3_5_start_once_the_cluster_version_is_lowered() {
        let mut r = initialized();
        let mut b = backend(&[]);
        b.cluster_version = Some("3.6.0".into());
        b.downgrade = Some(Downgrade::decode(
            br#"{"target-version":"3.5.0","enabled":true}"#,
        ));
        m(&mut r).backend = read(b.clone());
        m(&mut r).snap_cluster_version = Some("3.6.0".into());
        // 3.5 would join (mustDetectDowngrade returns early on the target),
        // but the cluster version is not lowered yet: the downgrade would stop.
        assert_eq!(
            codes(&check(&r, t("3.5.35"))),
            [("downgrade-not-lowered", true)]
        );
        // Lowered (the backend's; the forced .snap may lag): 3.5 joins.
        let mut lowered = b.clone();
        lowered.cluster_version = Some("3.5.0".into());
        let mut rl = r.clone();
        m(&mut rl).backend = read(lowered);
        assert_eq!(
            codes(&check(&rl, t("3.5.35"))),
            [("downgrade-enabled", false)]
        );
        assert!(!check(&rl, t("3.5")).blocked);
        // 3.6 and 3.7 do not read it: the cluster version alone decides.
        assert!(check(&r, t("3.6")).findings.is_empty());
        // 3.4 knows no downgrade: it refuses as before.
        assert_eq!(
            codes(&check(&r, t("3.4"))),
            [("cluster-version-newer", true)]
        );

        // A downgrade to another version: 3.5 refuses to join.
        b.downgrade = Some(Downgrade::decode(
            br#"{"target-version":"3.4.0","enabled":true}"#,
        ));
        b.cluster_version = Some("3.5.0".into());
        m(&mut r).backend = read(b.clone());
        m(&mut r).snap_cluster_version = Some("3.5.0".into());
        assert_eq!(
            codes(&check(&r, t("3.5"))),
            [("downgrade-target-other", true)]
        );
        assert!(check(&r, t("3.5")).blocked);

        // Cancelled (what the leader writes once every member runs the target):
        // the cluster version decides again, the larger of the .snap's and the
        // backend's for 3.5 (it loads the .snap, then replays to the backend's).
        b.downgrade = Some(Downgrade::decode(
            br#"{"target-version":"","enabled":false}"#,
        ));
        b.cluster_version = Some("3.5.0".into());
        m(&mut r).backend = read(b.clone());
        m(&mut r).snap_cluster_version = Some("3.6.0".into());
        assert_eq!(
            codes(&check(&r, t("3.5"))),
            [("cluster-version-newer", true)]
        );
        // 3.6 loads the backend's only.
        assert!(check(&r, t("3.6")).findings.is_empty());
        m(&mut r).snap_cluster_version = Some("3.5.0".into());
        assert!(check(&r, t("3.5")).findings.is_empty());

        // A value etcd cannot unmarshal: 3.5+ panic loading it.
        b.downgrade = Some(Downgrade::decode(b"{not json"));
        m(&mut r).backend = read(b);
        assert_eq!(
            codes(&check(&r, t("3.5"))),
            [("downgrade-info-malformed", true)]
        );
        assert_eq!(
            codes(&check(&r, t("3.6"))),
            [("downgrade-info-malformed", true)]
        );
        // 3.4 does not read it (and refuses the 3.5 cluster version).
        assert_eq!(
            codes(&check(&r, t("3.4"))),
            [("cluster-version-newer", true)]
        );
    }

    #[test]
    fn downgrade_records_decode_as_go_decodes_them() {
        let d = |v: &str| Downgrade::decode(v.as_bytes());
        let on = d(r#"{"target-version":"3.5.0","enabled":true}"#);
        assert!(on.enabled && !on.malformed && on.target_version == "3.5.0");
        // Go matches keys without regard to case; null leaves the default;
        // unknown keys are ignored.
        let upper = d(r#"{"Target-Version":"3.5.0","Enabled":true,"x":1}"#);
        assert!(upper.enabled && !upper.malformed, "{upper:?}");
        let null = d(r#"{"target-version":null,"enabled":null}"#);
        assert!(!null.enabled && !null.malformed, "{null:?}");
        // What etcd panics on loading.
        for bad in [
            "{not json",
            "[]",
            r#"{"enabled":"yes"}"#,
            r#"{"target-version":"","enabled":true}"#,
            r#"{"target-version":"3.5","enabled":true}"#,
        ] {
            assert!(d(bad).malformed, "{bad}");
        }
        // Cancelled: no target, not enabled, well formed.
        assert!(!d(r#"{"target-version":"","enabled":false}"#).malformed);
    }

    #[test]
    fn a_newer_cluster_version_replayed_from_the_wal_blocks_unless_3_5_is_downgrading_to_itself() {
        use crate::disk::v2req::VersionEvent;
        let cv = |index: u64, v: &str| VersionEvent {
            index,
            cluster_version: Some(v.into()),
            downgrade: None,
        };
        let dg = |index: u64, on: bool, v: &str| VersionEvent {
            index,
            cluster_version: None,
            downgrade: Some((on, v.into())),
        };
        // The state a reviewer found on real etcd: no .snap, a WAL from the 3.6
        // cluster's start, the downgrade to 3.5 completed and cancelled, the
        // backend at 3.5. 3.5 replays `ClusterVersionSet 3.6` first, with the
        // downgrade as the backend has it (cancelled), and panics.
        let mut r = initialized();
        let mut b = backend(&[]);
        b.cluster_version = Some("3.5.0".into());
        b.downgrade = Some(Downgrade::decode(
            br#"{"target-version":"","enabled":false}"#,
        ));
        m(&mut r).backend = read(b.clone());
        m(&mut r).v2_replay = V2Replay {
            versions: vec![
                cv(3, "3.6.0"),
                dg(15, true, "3.5.0"),
                cv(17, "3.5.0"),
                dg(18, false, ""),
            ],
            ..V2Replay::default()
        };
        assert_eq!(
            codes(&check(&r, t("3.5.35"))),
            [("cluster-version-newer-in-wal", true)]
        );
        // 3.6 passes it (3.6 ≥ every version set).
        assert!(check(&r, t("3.6")).findings.is_empty());
        // While the downgrade to 3.5 is still enabled in the backend, 3.5
        // replays it exempt.
        b.downgrade = Some(Downgrade::decode(
            br#"{"target-version":"3.5.0","enabled":true}"#,
        ));
        m(&mut r).backend = read(b.clone());
        assert_eq!(codes(&check(&r, t("3.5"))), [("downgrade-enabled", false)]);
        // A downgrade replayed before the version is exempt too.
        b.downgrade = None;
        m(&mut r).backend = read(b);
        m(&mut r).v2_replay = V2Replay {
            versions: vec![dg(2, true, "3.5.0"), cv(3, "3.6.0"), cv(4, "3.5.0")],
            ..V2Replay::default()
        };
        assert!(check(&r, t("3.5")).findings.is_empty());
        // 3.6 has no exemption: a 3.7 version in its replay panics.
        m(&mut r).v2_replay = V2Replay {
            versions: vec![dg(2, true, "3.6.0"), cv(3, "3.7.0")],
            ..V2Replay::default()
        };
        assert_eq!(
            codes(&check(&r, t("3.6"))),
            [("cluster-version-newer-in-wal", true)]
        );
    }

    fn roles(raw: &[(u64, bool)]) -> Vec<(MemberId, bool)> {
        raw.iter().map(|&(id, l)| (MemberId::new(id), l)).collect()
    }

    fn backend(learners: &[(u64, bool)]) -> crate::disk::bbolt::Backend {
        crate::disk::bbolt::Backend {
            page_size: 4096,
            file_size: 0,
            logical_size: 0,
            size_in_use: None,
            txid: 1,
            meta_page: 0,
            buckets: Vec::new(),
            consistent_index: Some(9),
            term: Some(2),
            conf_state: None,
            storage_version: None,
            storage_version_source: crate::disk::bbolt::StorageVersionSource::None,
            storage_version_raw: None,
            members: learners
                .iter()
                .map(|&(id, is_learner)| crate::disk::member::Member {
                    id: MemberId::new(id),
                    name: format!("m{id}"),
                    peer_urls: Vec::new(),
                    client_urls: Vec::new(),
                    is_learner,
                })
                .collect(),
            removed_members: Vec::new(),
            cluster_version: None,
            downgrade: None,
            alarms: Vec::new(),
            revision: None,
            compact_revision: None,
        }
    }

    #[test]
    fn stale_learner_flags_over_the_limit_block_as_the_bootstrap_check_does() {
        // Three voters grown through learners on 3.5.1–3.5.19: the backend still
        // says two of them are learners; the .snap knows they were promoted.
        let mut r = initialized();
        m(&mut r).backend = read(backend(&[(1, false), (2, true), (3, true)]));
        m(&mut r).snap_member_roles = roles(&[(1, false), (2, false), (3, false)]);
        m(&mut r).learner_flag_stale = vec![MemberId::new(2), MemberId::new(3)];
        // 3.6 syncs the promotions from the .snap first: it starts.
        assert_eq!(codes(&check(&r, t("3.6"))), [("learner-flag-stale", false)]);
        // 3.7 reads the backend alone: two learners, more than --max-learners 1.
        assert_eq!(
            codes(&check(&r, t("3.7"))),
            [("too-many-learners", true), ("learner-flag-stale", false)]
        );
        let two = EtcdFlags {
            max_learners: Some(2),
            ..EtcdFlags::default()
        };
        assert!(!super::check(&r, t("3.7"), &two).blocked);
        // Promotions after the .snap: 3.6 cannot repair them either.
        m(&mut r).snap_member_roles = roles(&[(1, false), (2, true), (3, true)]);
        assert!(check(&r, t("3.6")).blocked);
        // 3.5 reads the v2 store: nothing to refuse.
        assert!(check(&r, t("3.5")).findings.is_empty());
    }

    #[test]
    fn targets_parse_as_etcd_prints_them() {
        let t = Target::parse("v3.6.11").expect("a version");
        assert_eq!((t.major, t.minor, t.patch), (3, 6, Some(11)));
        assert_eq!(
            Target::parse("3.7").map(|t| t.to_string()).as_deref(),
            Some("3.7")
        );
        assert_eq!(Target::parse("3.6.0-rc.1").map(|t| t.patch), Some(Some(0)));
        for bad in [
            "",
            "3",
            "3.x",
            "3.6.1.2",
            "three.six",
            "3..6",
            "3.6.99999999",
        ] {
            assert_eq!(Target::parse(bad), None, "{bad}");
        }
    }
}
