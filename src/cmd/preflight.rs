//! `preflight`: may etcd start on this directory? (docs/commands.md § preflight,
//! docs/decision-table.md)
//!
//! Gathers the evidence — the directory, the live cluster, the operator's record,
//! env hints — within one time budget, hands it to [`verdict::decide`], and writes
//! the answer three ways: the human summary and `-o json`, the verdict file the
//! sidecar reads, and a short termination message the operator reads from the
//! Pod's `initContainerStatuses`. Read-only: the directory is never changed.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::json;

use crate::cli::{DataDirArgs, EvidenceArgs, PreflightArgs};
use crate::disk::ids::{self, ClusterId, HexIdError, MemberId};
use crate::disk::layout::{self, DirKind, DirState, Inspection, Options, Paths};
use crate::disk::lock::Probe;
use crate::disk::upgrade::{self, Target, UpgradeCheck};
use crate::disk::wal;
use crate::error::Error;
use crate::evidence::{self, etcd as live_src, kube as kube_src, lease as witness_src, Source};
use crate::exit::Exit;
use crate::output::{self, fitted_message, write_termination_message};
use crate::verdict::{
    self, Answer, Decision, Dir, DirFacts, LiveFacts, LiveMemberFacts, OperatorFacts, Row,
    SelfFacts, Verdict, WitnessFacts,
};

/// Where the sidecar looks for this Pod start's verdict unless told otherwise.
pub const DEFAULT_VERDICT_FILE: &str = "/run/etcd-agent/preflight.json";
/// Time kept back from the budget for deciding and writing the outputs.
const OUTPUT_RESERVE: Duration = Duration::from_millis(250);

/// Validated configuration, built from the arguments without I/O.
#[derive(Debug, Clone)]
pub struct Config {
    paths: Paths,
    me: SelfFacts,
    etcd: Option<live_src::EtcdConn>,
    kube: Option<kube_src::KubeTarget>,
    hint_member_id: Option<MemberId>,
    hint_cluster_id: Option<ClusterId>,
    allow_bootstrap_without_evidence: bool,
    timeout: Duration,
    verdict_file: Option<PathBuf>,
    termination_log: Option<PathBuf>,
    /// The witness file read as a witness (`--witness-file`); `None`: none.
    witness_file: Option<PathBuf>,
    /// How the directory's locks are probed: `Probe::Ofd` before etcd starts
    /// (see `Probe::Ofd`); `restore`, which writes, asks for `Probe::Thorough`.
    locks: Probe,
    /// The etcd version about to start, as given (`--etcd-version`); `None`
    /// asks the etcd binary (see [`etcd_about_to_start`]).
    etcd_version: Option<Target>,
    /// Whether the etcd binary is asked when no version is given (preflight
    /// yes; restore, which checks a directory it wrote itself, no).
    probe_etcd_version: bool,
    /// The flags of that etcd the upgrade check depends on.
    etcd_flags: upgrade::EtcdFlags,
}

/// Where preflight looks for the etcd about to start when no version is given:
/// the etcd image's binary only. `PATH` is not searched: an `etcd` there may be
/// another line than the one the etcd container runs (a distribution's package),
/// and a wrong version would refuse a healthy member.
const ETCD_BINARIES: [&str; 1] = ["/usr/local/bin/etcd"];
/// Bound on `etcd --version`.
const ETCD_VERSION_TIMEOUT: Duration = Duration::from_secs(3);

/// The container of this Pod whose image is the etcd about to start (the
/// operator's name for it).
const ETCD_CONTAINER: &str = "etcd";
/// The Pod read for the image is bounded on its own: a throttled or hanging
/// `get pods` must not hold the verdict for the whole budget, nor leave no
/// time for the `etcd --version` fallback.
const IMAGE_READ_BUDGET: Duration = Duration::from_secs(3);

/// The etcd a check is for, where that was learnt, and a warning when the
/// sources disagree.
struct AboutToStart {
    target: Target,
    from: String,
    warning: Option<String>,
    /// `--etcd-version` when it names another line than the image's tag: the
    /// check runs for both, and refuses only what blocks for both.
    disagreeing: Option<Target>,
}

/// The version of the etcd about to start: the tag of this Pod's `etcd`
/// container image when it reads as a 3.x version and no digest pins the
/// image (what the kubelet starts: an `ETCD_VERSION` left behind by an image
/// rollback is a warning; when the two disagree the check runs for both, since
/// a tag is not always etcd's version — a wrapper image's own), else
/// `--etcd-version`, else what `etcd --version` prints
/// ("etcd Version: 3.6.11") for the first binary of [`ETCD_BINARIES`] that
/// answers within [`ETCD_VERSION_TIMEOUT`]. `Err` (why) when none says.
/// `image`: the Pod's read (`None`: not asked; `Ok(None)`: no such container).
fn etcd_about_to_start(
    cfg: &Config,
    budget: Duration,
    image: Option<&Result<Option<String>, String>>,
) -> Result<AboutToStart, String> {
    if cfg.etcd_version.is_none() && !cfg.probe_etcd_version {
        return Err("not asked".into());
    }
    let from_image = match image {
        Some(Ok(Some(img))) => crate::evidence::pod::image_tag(img)
            .and_then(Target::parse)
            .filter(|t| t.major == 3)
            .map(|t| (t, img.clone())),
        _ => None,
    };
    if let Some((target, img)) = from_image {
        let disagreeing = cfg
            .etcd_version
            .filter(|given| (given.major, given.minor) != (target.major, target.minor));
        let warning = cfg
            .etcd_version
            .filter(|given| {
                (given.major, given.minor) != (target.major, target.minor)
                    || given.patch.is_some_and(|p| Some(p) != target.patch)
            })
            .map(|given| {
                format!(
                    "ETCD_VERSION (--etcd-version) says {given} but this Pod's {ETCD_CONTAINER} container runs {img}: \
                     the upgrade check is for {target}, the image's version (update ETCD_VERSION)"
                )
            });
        return Ok(AboutToStart {
            target,
            from: format!("the {ETCD_CONTAINER} container's image {img}"),
            warning,
            disagreeing,
        });
    }
    if let Some(t) = cfg.etcd_version {
        return Ok(AboutToStart {
            target: t,
            from: "--etcd-version".into(),
            warning: None,
            disagreeing: None,
        });
    }
    let mut tried = Vec::new();
    for bin in ETCD_BINARIES {
        if !Path::new(bin).is_file() {
            tried.push(format!("{bin}: absent"));
            continue;
        }
        let ran = crate::child::run(
            std::process::Command::new(bin).arg("--version"),
            ETCD_VERSION_TIMEOUT.min(budget),
        );
        match ran {
            Ok(r) => {
                let out = String::from_utf8_lossy(&r.stdout);
                let v = out
                    .lines()
                    .find_map(|l| l.trim().strip_prefix("etcd Version:"))
                    .and_then(Target::parse);
                match v {
                    Some(t) => {
                        return Ok(AboutToStart {
                            target: t,
                            from: bin.to_string(),
                            warning: None,
                            disagreeing: None,
                        })
                    }
                    None => tried.push(format!("{bin}: no \"etcd Version:\" line")),
                }
            }
            Err(e) => tried.push(format!("{bin}: {e}")),
        }
    }
    Err(tried.join("; "))
}

fn usage(msg: impl Into<String>) -> Error {
    Error::usage(msg)
}

fn hint<Id>(
    name: &str,
    value: &Option<String>,
    parse: fn(&str) -> Result<Option<Id>, HexIdError>,
) -> crate::error::Result<Option<Id>> {
    match value.as_deref() {
        None => Ok(None),
        Some(v) => parse(v.trim()).map_err(|e| usage(format!("{name}: {e}"))),
    }
}

impl Config {
    /// The data dir layout this configuration inspects.
    pub fn paths(&self) -> &Paths {
        &self.paths
    }

    /// This member as configured.
    pub fn me(&self) -> &SelfFacts {
        &self.me
    }

    /// Validates `preflight`'s arguments.
    pub fn from_args(a: &PreflightArgs) -> crate::error::Result<Config> {
        let mut cfg = Config::new(
            &a.dirs,
            &a.evidence,
            a.verdict_file.clone(),
            a.termination_log.clone(),
        )?;
        cfg.etcd_version = a.etcd_version;
        cfg.etcd_flags = a.etcd_flags.flags();
        cfg.probe_etcd_version = true;
        cfg.witness_file = a.witness_file.clone().or_else(|| {
            // Where serve keeps it by default: beside the verdict file.
            let verdict = a
                .verdict_file
                .clone()
                .unwrap_or_else(|| PathBuf::from(DEFAULT_VERDICT_FILE));
            Some(verdict.with_file_name("witness.json")).filter(|p| p.is_file())
        });
        Ok(cfg)
    }

    /// Validates the evidence arguments shared with other commands (`restore`).
    /// `verdict_file`/`termination_log` are where `run` writes; [`decide`] alone
    /// writes nothing.
    pub fn new(
        dirs: &DataDirArgs,
        a: &EvidenceArgs,
        verdict_file: Option<PathBuf>,
        termination_log: Option<PathBuf>,
    ) -> crate::error::Result<Config> {
        let initial = match a
            .identity
            .initial_cluster
            .as_deref()
            .filter(|s| !s.trim().is_empty())
        {
            Some(s) => Some(ids::parse_initial_cluster(s).map_err(|e| usage(e.to_string()))?),
            None => None,
        };
        let name = a.identity.name.clone().filter(|n| !n.is_empty());
        let peer_urls = match a
            .identity
            .peer_urls
            .as_deref()
            .filter(|s| !s.trim().is_empty())
        {
            Some(s) => ids::parse_urls(s).map_err(|e| usage(format!("--peer-urls: {e}")))?,
            None => match (&initial, &name) {
                (Some(ic), Some(n)) => ic.get(n).cloned().ok_or_else(|| {
                    usage(format!(
                        "--name {n} has no entry in --initial-cluster and --peer-urls is not set"
                    ))
                })?,
                _ => Vec::new(),
            },
        };
        if name.is_none() && peer_urls.is_empty() {
            return Err(usage("who is this member? set --name (ETCD_MEMBER_NAME) with --initial-cluster, or --peer-urls"));
        }
        let self_only_initial_cluster = match (&initial, &name) {
            (Some(ic), Some(n)) => ic.len() == 1 && ic.contains_key(n),
            _ => false,
        };
        // A bootstrap member's IDs follow from its flags (etcd hashes the peer
        // URLs of --initial-cluster with the token); a joining member's come
        // from `member add` and cannot be predicted.
        let bootstrap_member = match a.identity.initial_cluster_state.as_deref() {
            Some("new") => true,
            Some(_) => false,
            None => self_only_initial_cluster,
        };
        // The bytes etcd hashes, as given (etcd trims nothing). Under
        // discovery the founders are the discovery service's, not
        // --initial-cluster's: no IDs follow from the flags.
        let formation = a.identity.formation_token().map_err(usage)?;
        let token = formation.value.as_str();
        let derived = match (&initial, &name) {
            (Some(ic), Some(n))
                if bootstrap_member && !formation.discovery && !token.is_empty() =>
            {
                let ids = ids::bootstrap_ids(ic, token);
                ids.get(n).map(|&member_id| verdict::DerivedIds {
                    member_id,
                    cluster_id: ids::cluster_id(&ids.values().copied().collect::<Vec<_>>()),
                })
            }
            _ => None,
        };
        let etcd = match a
            .etcd
            .peer_endpoints
            .as_deref()
            .map(live_src::parse_endpoints)
        {
            Some(endpoints) if !endpoints.is_empty() => Some(live_src::EtcdConn {
                endpoints,
                ca: a.etcd.cacert.clone(),
                cert: a.etcd.cert.clone(),
                key: a.etcd.key.clone(),
                user: a.etcd.user.clone(),
                password: a.etcd.password.clone(),
            }),
            _ => None,
        };
        let kube_on = a
            .kube
            .kube
            .unwrap_or_else(evidence::client::service_account_token_mounted);
        let kube = if kube_on {
            let namespace = a
                .kube
                .namespace
                .clone()
                .filter(|s| !s.is_empty())
                .ok_or_else(|| usage("--kube is on but POD_NAMESPACE (--namespace) is not set"))?;
            let member_name = a
                .kube
                .pod_name
                .clone()
                .or_else(|| name.clone())
                .filter(|s| !s.is_empty())
                .ok_or_else(|| usage("--kube is on but neither POD_NAME nor --name is set"))?;
            Some(kube_src::KubeTarget {
                namespace,
                member_name,
                kubeconfig: a.kube.kubeconfig.clone(),
            })
        } else {
            None
        };
        if a.timeout.is_zero() {
            return Err(usage("--timeout must be positive"));
        }
        Ok(Config {
            paths: Paths::new(&dirs.data_dir, dirs.wal_dir.as_deref()),
            me: SelfFacts {
                name,
                peer_urls,
                self_only_initial_cluster,
                derived,
                pod_uid: a.kube.pod_uid.clone().filter(|u| !u.trim().is_empty()),
                token: Some(token.to_owned()).filter(|t| !t.is_empty()),
                token_sha256: Some(token)
                    .filter(|t| !t.is_empty())
                    .map(crate::evidence::mark::token_sha256),
                token_given: formation.given,
            },
            etcd,
            kube,
            hint_member_id: hint(
                "ETCD_MEMBER_ID",
                &a.member_id_hint,
                MemberId::parse_recorded,
            )?,
            hint_cluster_id: hint(
                "ETCD_CLUSTER_ID",
                &a.cluster_id_hint,
                ClusterId::parse_recorded,
            )?,
            allow_bootstrap_without_evidence: a.allow_bootstrap_without_evidence,
            timeout: a.timeout,
            verdict_file,
            termination_log,
            witness_file: None,
            locks: Probe::Ofd,
            etcd_version: None,
            probe_etcd_version: false,
            etcd_flags: upgrade::EtcdFlags::default(),
        })
    }

    /// Reports a refusal as an Event on this Pod (`cmd::event`), when
    /// Kubernetes is on; never fails.
    pub fn report_event(&self, verdict: &str, reason: &str) {
        if let Some(k) = &self.kube {
            super::event::report(
                k.kubeconfig.as_ref(),
                &k.namespace,
                &k.member_name,
                self.me.pod_uid.as_deref(),
                &[super::event::Item {
                    reason: verdict.to_owned(),
                    key: verdict.to_owned(),
                    message: reason.to_owned(),
                }],
            );
        }
    }

    /// The same configuration with another lock probe.
    pub fn with_lock_probe(self, locks: Probe) -> Config {
        Config { locks, ..self }
    }
}

/// One source's entry in the report.
#[derive(Debug, Clone, Serialize)]
pub struct EvidenceEntry {
    /// Which source.
    pub source: Source,
    /// The source was asked and answered.
    pub answered: bool,
    /// Why it did not answer, or why it was not asked.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// What it said.
    #[serde(skip_serializing_if = "serde_json::Value::is_null")]
    pub said: serde_json::Value,
    /// How long asking it took.
    pub elapsed_ms: u64,
}

/// The JSON document of `preflight` (and the verdict file).
#[derive(Debug, Clone, Serialize)]
pub struct PreflightReport {
    /// The verdict name.
    pub verdict: Verdict,
    /// The row of `docs/decision-table.md` the verdict came from.
    pub row: Row,
    /// The exit code.
    pub exit_code: u8,
    /// What was seen.
    pub reason: String,
    /// What to do.
    pub remedy: String,
    /// What does not change the verdict but should be fixed.
    pub warnings: Vec<String>,
    /// This member as configured.
    pub member: serde_json::Value,
    /// One entry per source.
    pub evidence: Vec<EvidenceEntry>,
    /// The inspect document of the data dir.
    pub data_dir: Inspection,
    /// The upgrade check for the etcd about to start (absent when its version
    /// is unknown or the directory is not initialized).
    pub upgrade_check: Option<UpgradeCheck>,
    /// Wall time of the whole decision.
    pub elapsed_ms: u64,
    /// When the verdict was reached (seconds since the epoch).
    pub decided_at_unix: u64,
    /// The Pod this verdict is for (`POD_UID`), so the sidecar never takes a
    /// verdict file of an earlier Pod for this Pod start's.
    pub pod_uid: Option<String>,
    /// The node's boot (`/proc/sys/kernel/random/boot_id`): a verdict file that
    /// outlived a reboot in a kept emptyDir is not this start's either.
    pub boot_id: Option<String>,
    /// What the sidecar holds this start to and records in the witnesses.
    pub witness: crate::evidence::mark::WitnessTerms,
}

/// Runs `preflight`.
pub fn run(args: &PreflightArgs) -> crate::error::Result<Exit> {
    let cfg = match Config::from_args(args) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("etcd-member-agent preflight: {e}");
            let (reason, remedy) = (e.to_string(), "fix the configuration");
            let doc = json!({"verdict": null, "exit_code": Exit::Usage.code(), "reason": reason, "remedy": remedy, "evidence": [], "data_dir": null});
            // An init container is seen by the operator only through this message.
            let msg = fitted_message(
                serde_json::Value::Null,
                Exit::Usage.code(),
                [None, None],
                &reason,
                remedy,
            );
            write_termination_message(args.termination_log.as_deref(), &msg);
            output::emit(args.output.format, "", &doc)?;
            return Ok(Exit::Usage);
        }
    };
    let mut report = decide(&cfg)?;
    let exit = report.verdict.exit();
    tracing::info!(
        verdict = report.verdict.name(),
        exit_code = exit.code(),
        reason = %report.reason,
        elapsed_ms = report.elapsed_ms,
        "preflight verdict"
    );
    if let Err(e) = write_verdict_file(&cfg, &report) {
        // The file only informs the sidecar, which falls back to the WAL. Failing
        // here would turn a refusal's code into 2 and lose the JSON document and
        // the termination message that explain it.
        // Said in the document too (its `warnings`), which the caller and the
        // logs keep; the sidecar shows "waiting for preflight's verdict".
        tracing::error!(error = %e, "the verdict stands, but the sidecar will not see it");
        report.warnings.push(format!(
            "{e}: the verdict stands, but the sidecar (serve) will not see it"
        ));
    }
    write_termination_message(
        cfg.termination_log.as_deref(),
        &termination_message(&report),
    );
    if exit != Exit::Ok {
        cfg.report_event(report.verdict.name(), &report.reason);
    }
    output::emit(args.output.format, &summary(&report), &report)?;
    Ok(exit)
}

/// Gathers the evidence and decides. Public for the sidecar and tests.
pub fn decide(cfg: &Config) -> crate::error::Result<PreflightReport> {
    let started = Instant::now();
    let deadline = started
        + cfg
            .timeout
            .saturating_sub(OUTPUT_RESERVE)
            .max(Duration::from_millis(50));

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Error::internal("cannot start the tokio runtime", &e))?;
    let read_and_gathered = rt.block_on(async {
        // The directory is read on a blocking thread while the live cluster and
        // the Kubernetes API are asked: the slower of the two sets the time, not
        // their sum.
        let paths = cfg.paths.clone();
        let locks = cfg.locks;
        let mut reading = tokio::task::spawn_blocking(move || {
            // `cfg.locks`: for preflight `Probe::Ofd` — etcd of this Pod cannot
            // be running yet, and another process on the same volume shows
            // itself by its WAL locks (`Probe::Ofd` says why the db's flock,
            // which costs an RCU grace period to look up, need not be);
            // restore, which writes, asks for `Probe::Thorough`.
            let opts = Options {
                locks,
                ..Options::default()
            };
            let dir = layout::inspect(&paths, opts);
            (dir, started.elapsed())
        });
        // Whether etcd would find a WAL, and whose (one listing and the first
        // records, ahead of the full read): it tells the live probe which
        // answer may end its wait. Off the runtime and bounded like the full
        // read: on a volume that hangs this is where the wait starts.
        let read_deadline = tokio::time::Instant::from_std(deadline);
        let quick_paths = cfg.paths.clone();
        let quick = tokio::task::spawn_blocking(move || {
            layout::wal_exists(&quick_paths).then(|| wal::wal_identity(&quick_paths.wal_dir))
        });
        let wal = match tokio::time::timeout_at(read_deadline, quick).await {
            Ok(Ok(wal)) => wal,
            _ => Some(None),
        };
        let network = gather(cfg, deadline, wal);
        tokio::pin!(network);
        // The budget covers the directory too: a volume that does not answer
        // (a hung network mount) is unreadable at the deadline, not a hung
        // init container. The blocked reader thread is left behind
        // (`shutdown_background` below) and ends with the process.
        let (read, early) = tokio::select! {
            read = tokio::time::timeout_at(read_deadline, &mut reading) => (read.ok(), None),
            gathered = &mut network => (
                tokio::time::timeout_at(read_deadline, &mut reading).await.ok(),
                Some(gathered),
            ),
        };
        let (dir, dir_elapsed) = match read {
            Some(Ok(read)) => read,
            // Re-raised once the runtime is shut down (below): unwinding
            // through block_on would drop it and wait for blocked threads.
            Some(Err(e)) => return Err(e),
            None => (
                layout::unanswered(&cfg.paths, started.elapsed()),
                started.elapsed(),
            ),
        };
        // The network only matters when the directory does not decide on its own.
        let needs_network =
            matches!(dir.kind(), DirKind::Empty | DirKind::Initialized) && !dir.running;
        let gathered = match (needs_network, early) {
            (false, _) => None,
            (true, Some(g)) => Some(g),
            (true, None) => Some(network.await),
        };
        Ok((dir, dir_elapsed, gathered))
    });
    // A host-name lookup stuck in getaddrinfo (a DNS server that never answers)
    // runs on a blocking thread no timeout can cancel; dropping the runtime
    // would wait for it, past the budget.
    rt.shutdown_background();
    let (dir, dir_elapsed, gathered) = match read_and_gathered {
        Ok(done) => done,
        Err(join_error) => std::panic::resume_unwind(join_error.into_panic()),
    };

    // The upgrade check, for an initialized directory nothing else refuses yet.
    let mut version_warning = None;
    let upgrade_check = if dir.kind() == DirKind::Initialized && !dir.running {
        let budget = deadline.saturating_duration_since(Instant::now());
        let image = gathered.as_ref().and_then(|g| g.etcd_image.as_ref());
        match etcd_about_to_start(cfg, budget, image) {
            Ok(AboutToStart {
                target,
                from,
                warning,
                disagreeing,
            }) => {
                let mut check = upgrade::check(&dir, target, &cfg.etcd_flags);
                check.from = Some(from.clone());
                version_warning = warning;
                // The image's tag and ETCD_VERSION name different lines: one
                // of them is wrong (an ETCD_VERSION left behind, or a tag that
                // is a wrapper image's own version). Refuse only what etcd of
                // both would refuse; a start etcd itself then refuses costs a
                // crash loop, a wrong refusal the member.
                if let Some(given) = disagreeing.filter(|_| check.blocked) {
                    let other = upgrade::check(&dir, given, &cfg.etcd_flags);
                    if !other.blocked {
                        let codes: Vec<&str> = check.blockers().map(|f| f.code).collect();
                        version_warning = Some(format!(
                            "{from} reads as etcd {target}, for which the upgrade check blocks ({}), but ETCD_VERSION (--etcd-version) says {given}, for which nothing blocks: the start is not refused on a version the two disagree on; if the container really runs {target}, set ETCD_VERSION={target}",
                            codes.join(", ")
                        ));
                        check = other;
                        check.from = Some(format!(
                            "--etcd-version (the image's tag, {target}, disagrees)"
                        ));
                    }
                }
                tracing::info!(target = %check.target, from = ?check.from, blocked = check.blocked, findings = check.findings.len(), "upgrade check");
                Some(check)
            }
            Err(why) => {
                tracing::info!(why = %why, "the etcd version about to start is unknown (set ETCD_VERSION): no upgrade check");
                None
            }
        }
    } else {
        None
    };
    let dir_facts = dir_facts(&dir, upgrade_check.clone());
    let Gathered {
        live,
        operator,
        witness,
        witness_file,
        live_entry,
        kube_entry,
        witness_entry,
        witness_file_entry,
        etcd_image: _,
    } = gathered.unwrap_or_else(|| {
        let unused = |source| EvidenceEntry {
            source,
            answered: false,
            error: Some("not used: the directory decides on its own".into()),
            said: serde_json::Value::Null,
            elapsed_ms: 0,
        };
        Gathered {
            live: Answer::NotConfigured,
            operator: Answer::NotConfigured,
            witness: Answer::NotConfigured,
            witness_file: Ok(None),
            live_entry: unused(Source::Etcd),
            kube_entry: unused(Source::Kube),
            witness_entry: unused(Source::Witness),
            witness_file_entry: None,
            etcd_image: None,
        }
    });
    let (witness_file, file_warning) = match witness_file {
        Ok(w) => (w, None),
        Err(why) => (None, Some(why)),
    };

    let mut inputs = verdict::Inputs {
        dir: dir_facts,
        me: cfg.me.clone(),
        live,
        operator,
        witness,
        witness_file,
        hint_member_id: cfg.hint_member_id,
        hint_cluster_id: cfg.hint_cluster_id,
        allow_bootstrap_without_evidence: cfg.allow_bootstrap_without_evidence,
    };
    let mut decided = verdict::decide(&inputs);
    let mut live_entry = live_entry;
    // A directory behind what this member reached may start only on the word
    // of its cluster's leader and a majority (row 5d). The live wait ends at
    // the first answer that lists this member started, which says nothing of
    // a leader: ask again, this time until the leader and a majority of the
    // directory's cluster answered (or the deadline).
    let behind = matches!(decided.row, Row::RolledBack | Row::AppliedPastLog);
    let authoritative = |live: &Answer<LiveFacts>| matches!(live, Answer::Answered(l) if l.leader_heard && l.majority_heard && Some(l.cluster_id) == dir.cluster_id());
    if behind && cfg.etcd.is_some() && !authoritative(&inputs.live) {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| Error::internal("cannot start the tokio runtime", &e))?;
        let ids = dir.member_id().zip(dir.cluster_id());
        let again = rt.block_on(ask_live(
            cfg,
            tokio::time::Instant::from_std(deadline),
            Some(ids),
            true,
        ));
        rt.shutdown_background();
        inputs.live = again.0;
        live_entry = again.1;
        decided = verdict::decide(&inputs);
    }
    let Decision {
        verdict,
        row,
        reason,
        remedy,
        mut warnings,
        floor,
        rebase_witness,
    } = decided;
    warnings.extend(version_warning);
    warnings.extend(file_warning);
    for w in &warnings {
        tracing::warn!(warning = %w, "preflight");
    }
    let witness_terms = crate::evidence::mark::WitnessTerms {
        incarnation: crate::evidence::mark::Incarnation {
            token_sha256: cfg.me.token_sha256.clone(),
            cluster_uid: match &inputs.operator {
                Answer::Answered(o) => o.cluster_uid.clone(),
                _ => None,
            },
        },
        floor: floor
            .map(|(raft_index, source)| crate::evidence::mark::Floor { raft_index, source }),
        rebase: rebase_witness,
        seen_revision: inputs
            .witness
            .clone()
            .into_option()
            .flatten()
            .iter()
            .chain(inputs.witness_file.iter())
            .filter_map(|w| w.revision)
            .max(),
    };

    let hinted = cfg.hint_member_id.is_some() || cfg.hint_cluster_id.is_some();
    let env_entry = EvidenceEntry {
        source: Source::Env,
        answered: hinted,
        error: (!hinted)
            .then(|| "ETCD_MEMBER_ID and ETCD_CLUSTER_ID are empty (proves nothing)".to_string()),
        said: json!({
            "member_id": cfg.hint_member_id.map(|id| id.to_string()),
            "cluster_id": cfg.hint_cluster_id.map(|id| id.to_string()),
        }),
        elapsed_ms: 0,
    };
    let dir_entry = EvidenceEntry {
        source: Source::DataDir,
        answered: dir.kind() != DirKind::Unreadable,
        error: dir.problem().map(|p| p.message.clone()),
        said: json!({
            "state": dir.kind(),
            "member_id": dir.member_id().map(|id| id.to_string()),
            "cluster_id": dir.cluster_id().map(|id| id.to_string()),
            "running": dir.running,
        }),
        elapsed_ms: dir_elapsed.as_millis() as u64,
    };
    Ok(PreflightReport {
        verdict,
        row,
        exit_code: verdict.exit().code(),
        reason,
        remedy,
        warnings,
        member: json!({
            "name": cfg.me.name,
            "peer_urls": cfg.me.peer_urls,
            "seed_shape": cfg.me.self_only_initial_cluster,
        }),
        evidence: [dir_entry, live_entry, kube_entry, env_entry, witness_entry]
            .into_iter()
            .chain(witness_file_entry)
            .collect(),
        witness: witness_terms,
        upgrade_check,
        data_dir: dir,
        elapsed_ms: started.elapsed().as_millis() as u64,
        decided_at_unix: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
        pod_uid: cfg.me.pod_uid.clone(),
        boot_id: evidence::boot_id(),
    })
}

/// What the network sources said, and their report entries.
struct Gathered {
    live: Answer<LiveFacts>,
    operator: Answer<OperatorFacts>,
    witness: Answer<Option<WitnessFacts>>,
    /// The witness file (`Err`: why it was not used).
    witness_file: Result<Option<WitnessFacts>, String>,
    live_entry: EvidenceEntry,
    kube_entry: EvidenceEntry,
    witness_entry: EvidenceEntry,
    witness_file_entry: Option<EvidenceEntry>,
    /// The image of this Pod's etcd container (`None`: `--kube` is off, or the
    /// directory has no WAL).
    etcd_image: Option<Result<Option<String>, String>>,
}

/// Asks the live cluster. `wait_for_leader`: no answer ends the wait early;
/// it lasts until the leader and a majority of the directory's cluster (or
/// every endpoint) answered, or the deadline — what a directory behind its
/// mark needs (rows 5d, 6e, 6f), where the first answer that lists the member
/// is not enough.
async fn ask_live(
    cfg: &Config,
    deadline: tokio::time::Instant,
    wal: Option<Option<(MemberId, ClusterId)>>,
    wait_for_leader: bool,
) -> (Answer<LiveFacts>, EvidenceEntry) {
    let t = Instant::now();
    let Some(conn) = &cfg.etcd else {
        return (
            Answer::NotConfigured,
            not_configured(Source::Etcd, "ETCD_PEER_ENDPOINTS is not set"),
        );
    };
    // An answer showing this member started settles the question:
    // nothing unstarts a member. For an empty directory only the
    // leader's answer does, the most current view (a lagging member may
    // still list the previous incarnation of a removed and re-added
    // member as started). A directory with a WAL needs the live list only
    // to corroborate its IDs: an answer of the directory's own cluster
    // listing the directory's member started does, so a leaderless
    // cluster with a black-holed peer cannot hold a restart to the
    // deadline — and endpoints that also reach another cluster cannot
    // decide by the luck of which answers first.
    let me = &cfg.me;
    let is_me = |m: &live_src::LiveMember| {
        m.started
            && (me.name.as_deref() == Some(m.member.name.as_str())
                || m.member.peer_urls.iter().any(|u| me.has_peer_url(u)))
    };
    let started_here = |view: &live_src::LiveCluster| match wal {
        None => view.leader == Some(view.responder_member_id) && view.members.iter().any(is_me),
        Some(Some((member, cluster))) => {
            view.cluster_id == cluster
                && view
                    .members
                    .iter()
                    .any(|m| m.member.id == member && is_me(m))
        }
        // A WAL whose first records could not be read: the full read
        // decides (corrupt or unreadable); nothing settles early.
        Some(None) => false,
    };
    let own_cluster = match wal {
        Some(Some((_, cluster))) => Some(cluster),
        _ => None,
    };
    let settled = |view: &live_src::LiveCluster| !wait_for_leader && started_here(view);
    match live_src::probe_until(conn, deadline, own_cluster, settled).await {
        Ok(l) => {
            let facts = LiveFacts {
                cluster_id: l.cluster_id,
                members: l
                    .members
                    .iter()
                    .map(|m| LiveMemberFacts {
                        id: m.member.id,
                        name: m.member.name.clone(),
                        peer_urls: m
                            .member
                            .peer_urls
                            .iter()
                            .map(|u| ids::normalize_url(u).unwrap_or_else(|_| u.clone()))
                            .collect(),
                        started: m.started,
                        is_learner: m.member.is_learner,
                    })
                    .collect(),
                other_cluster_ids: l.other_cluster_ids.clone(),
                majority_heard: l.majority_heard,
                leader_heard: l.leader_heard,
                raft_term: l.raft_term,
                leader_raft_index: l.leader_raft_index,
                positions: l
                    .positions
                    .iter()
                    .map(|p| verdict::LivePosition {
                        member_id: p.member_id,
                        raft_index: p.raft_index,
                        revision: p.revision,
                    })
                    .collect(),
            };
            answered(
                Source::Etcd,
                facts,
                serde_json::to_value(&l).unwrap_or_default(),
                t,
            )
        }
        Err(e) => unanswered(Source::Etcd, &e, t),
    }
}

/// `wal`: `None` without a WAL; `Some(ids)` with one, `ids` being its member
/// and cluster ID when its first records could be read.
async fn gather(
    cfg: &Config,
    deadline: Instant,
    wal: Option<Option<(MemberId, ClusterId)>>,
) -> Gathered {
    let deadline = tokio::time::Instant::from_std(deadline);
    let live = ask_live(cfg, deadline, wal, false);
    let operator = async {
        let t = Instant::now();
        let Some(target) = &cfg.kube else {
            let off = "--kube is off (no service-account token mounted)";
            return (
                (Answer::NotConfigured, not_configured(Source::Kube, off)),
                (Answer::NotConfigured, not_configured(Source::Witness, off)),
                None,
            );
        };
        let timeout = deadline.saturating_duration_since(tokio::time::Instant::now());
        // The records, the witness Lease and this Pod's etcd image are asked at
        // once, through one client; the image only for a directory with a WAL
        // (the upgrade check's, which an empty directory never gets).
        let (result, witness, image) = match kube_src::client(target, timeout).await {
            Ok(client) => {
                let (records, lease, image) = tokio::join!(
                    kube_src::fetch(&client, target, deadline),
                    async {
                        let t = Instant::now();
                        let read = witness_src::read(
                            &client,
                            &target.namespace,
                            &target.member_name,
                            deadline,
                        )
                        .await;
                        witness_evidence(read, &target.namespace, t)
                    },
                    async {
                        match wal {
                            None => None,
                            Some(_) => Some(
                                crate::evidence::pod::container_image(
                                    &client,
                                    &target.namespace,
                                    &target.member_name,
                                    ETCD_CONTAINER,
                                    deadline.min(tokio::time::Instant::now() + IMAGE_READ_BUDGET),
                                )
                                .await,
                            ),
                        }
                    }
                );
                let image = image.map(|read| read.map_err(|e| e.to_string()));
                if let Some(Err(e)) = &image {
                    tracing::info!(error = %e, "this Pod's etcd image could not be read");
                }
                (records, lease, image)
            }
            Err(e) => {
                let why = e.to_string();
                let witness = (
                    Answer::NoAnswer(why.clone()),
                    no_answer(Source::Witness, why.clone(), t),
                );
                (Err(e), witness, Some(Err(why)))
            }
        };
        let records = match result {
            Ok(rec) => {
                let facts = OperatorFacts {
                    bootstrap: rec.member.bootstrap,
                    member_id: rec.member.member_id,
                    cluster_id: rec.cluster.cluster_id,
                    pod_uid: rec.member.pod_uid.clone(),
                    cluster_token: rec
                        .cluster
                        .cluster_token
                        .clone()
                        .or_else(|| rec.member.cluster_token.clone()),
                    cluster_uid: rec.cluster.uid.clone(),
                };
                answered(
                    Source::Kube,
                    facts,
                    serde_json::to_value(&rec).unwrap_or_default(),
                    t,
                )
            }
            Err(e) => unanswered(Source::Kube, &e, t),
        };
        (records, witness, image)
    };
    let file = async {
        let path = cfg.witness_file.clone()?;
        let t = Instant::now();
        // Off the runtime and bounded: the file lives on another volume, which
        // may hang like any other.
        let reading = tokio::task::spawn_blocking({
            let path = path.clone();
            move || crate::evidence::mark::read_file(&path).map_err(|e| e.to_string())
        });
        let read = match tokio::time::timeout_at(deadline, reading).await {
            Ok(Ok(read)) => read,
            Ok(Err(join)) => Err(format!("reading {} failed: {join}", path.display())),
            Err(_) => Err(format!(
                "reading {} did not finish before the deadline",
                path.display()
            )),
        };
        Some(witness_file_evidence(&path, read, t))
    };
    let ((live, live_entry), ((operator, kube_entry), (witness, witness_entry), etcd_image), file) =
        tokio::join!(live, operator, file);
    let (witness_file, witness_file_entry) = match file {
        None => (Ok(None), None),
        Some((facts, entry, None)) => (Ok(facts), Some(entry)),
        Some((_, entry, Some(why))) => (Err(why), Some(entry)),
    };
    Gathered {
        live,
        operator,
        witness,
        witness_file,
        live_entry,
        kube_entry,
        witness_entry,
        witness_file_entry,
        etcd_image,
    }
}

/// The witness Lease's read as evidence: a 404 is an answer (no witness).
fn witness_evidence(
    read: Result<
        Option<witness_src::WitnessRecord>,
        crate::evidence::client::ApiError<witness_src::LeaseKind>,
    >,
    namespace: &str,
    since: Instant,
) -> (Answer<Option<WitnessFacts>>, EvidenceEntry) {
    match read {
        Ok(rec) => {
            let facts = rec.as_ref().map(|r| WitnessFacts {
                name: format!("the witness Lease {}", r.name),
                clear: format!("kubectl -n {namespace} delete lease {}", r.name),
                member_id: r.member_id,
                cluster_id: r.cluster_id,
                raft_index: r.raft_index,
                raft_term: r.raft_term,
                revision: r.revision,
                durable: r.format.is_some_and(|f| f >= crate::evidence::mark::FORMAT),
                incarnation: r.incarnation.clone(),
                pod_uid: r.pod_uid.clone(),
            });
            for problem in rec.iter().flat_map(|r| &r.problems) {
                tracing::warn!(problem = %problem, "the witness Lease exists but is garbled");
            }
            answered(
                Source::Witness,
                facts,
                match &rec {
                    Some(r) => json!({"exists": true, "lease": r}),
                    None => json!({"exists": false}),
                },
                since,
            )
        }
        Err(e) => unanswered(Source::Witness, &e, since),
    }
}

/// The witness file as evidence: a file that is absent says nothing; one that
/// cannot be read or parsed is a warning, never a refusal (it is this Pod's or
/// this host's own bookkeeping).
fn witness_file_evidence(
    path: &Path,
    read: Result<Option<crate::evidence::mark::FileMark>, String>,
    since: Instant,
) -> (Option<WitnessFacts>, EvidenceEntry, Option<String>) {
    match read {
        Ok(found) => {
            let facts = found.as_ref().map(|f| WitnessFacts {
                name: format!("the witness file {}", path.display()),
                clear: format!("rm {}", path.display()),
                member_id: Some(f.mark.member_id),
                cluster_id: Some(f.mark.cluster_id),
                raft_index: Some(f.mark.position.raft_index),
                raft_term: Some(f.mark.position.raft_term),
                revision: f.mark.position.revision,
                durable: f.mark.durable,
                incarnation: f.mark.incarnation.clone(),
                pod_uid: None,
            });
            let said = match &found {
                Some(f) => json!({
                    "exists": true,
                    "path": path,
                    "member_id": f.mark.member_id.to_string(),
                    "cluster_id": f.mark.cluster_id.to_string(),
                    "position": f.mark.position,
                    "incarnation": f.mark.incarnation,
                    "durable": f.mark.durable,
                    "regressed_to": f.regressed_to,
                }),
                None => json!({"exists": false, "path": path}),
            };
            let (_, entry) = answered(Source::WitnessFile, (), said, since);
            (facts, entry, None)
        }
        Err(why) => {
            let warning = format!("{why}: the witness file was not used");
            let entry = no_answer(Source::WitnessFile, why, since);
            (None, entry, Some(warning))
        }
    }
}

/// A source's answer: the facts the decision reads, and what it said for the report.
fn answered<T>(
    source: Source,
    facts: T,
    said: serde_json::Value,
    since: Instant,
) -> (Answer<T>, EvidenceEntry) {
    let entry = EvidenceEntry {
        source,
        answered: true,
        error: None,
        said,
        elapsed_ms: since.elapsed().as_millis() as u64,
    };
    (Answer::Answered(facts), entry)
}

/// A source that did not answer, and why.
fn unanswered<T>(
    source: Source,
    e: &impl std::fmt::Display,
    since: Instant,
) -> (Answer<T>, EvidenceEntry) {
    let why = e.to_string();
    (Answer::NoAnswer(why.clone()), no_answer(source, why, since))
}

fn not_configured(source: Source, why: &str) -> EvidenceEntry {
    EvidenceEntry {
        source,
        answered: false,
        error: Some(format!("not configured: {why}")),
        said: serde_json::Value::Null,
        elapsed_ms: 0,
    }
}

fn no_answer(source: Source, why: String, since: Instant) -> EvidenceEntry {
    EvidenceEntry {
        source,
        answered: false,
        error: Some(why),
        said: serde_json::Value::Null,
        elapsed_ms: since.elapsed().as_millis() as u64,
    }
}

/// Writes `bytes` to `path` atomically: a temp file in the same directory, then a
/// rename, so that the sidecar never reads half a file. Not fsynced: the file
/// lives in a Pod-scoped volume and describes this Pod start only; after a node
/// crash the Pod starts again and preflight writes a new one (and the sidecar
/// falls back to the WAL when there is none).
fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let tmp = dir.join(format!(
        ".{}.tmp.{}",
        path.file_name()
            .map(|n| n.to_string_lossy())
            .unwrap_or_default(),
        std::process::id()
    ));
    let written = std::fs::write(&tmp, bytes).and_then(|()| std::fs::rename(&tmp, path));
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written
}

fn write_verdict_file(cfg: &Config, report: &PreflightReport) -> crate::error::Result<()> {
    let (path, explicit) = match &cfg.verdict_file {
        Some(p) => (p.clone(), true),
        None => (PathBuf::from(DEFAULT_VERDICT_FILE), false),
    };
    if !explicit && !path.parent().is_some_and(Path::is_dir) {
        tracing::debug!(path = %path.display(), "no verdict volume mounted; verdict file not written");
        return Ok(());
    }
    let text = serde_json::to_vec_pretty(report)
        .map_err(|e| Error::internal("cannot encode the verdict file", &e))?;
    write_atomic(&path, &text).map_err(|e| {
        Error::internal(
            &format!("cannot write the verdict file {}", path.display()),
            &e,
        )
    })
}

/// The decision's view of the inspected directory.
fn dir_facts(dir: &Inspection, upgrade: Option<upgrade::UpgradeCheck>) -> DirFacts {
    let problem = |f: &layout::Failure| f.problem.message.clone();
    let state = match &dir.state {
        DirState::Empty => Dir::Empty,
        DirState::Initialized(m) => Dir::Initialized(Box::new(verdict::Recorded {
            member_id: m.log.member_id,
            cluster_id: m.log.cluster_id,
            recorded_peer_urls: m.self_peer_urls.clone(),
            recorded_name: m.self_name.clone(),
            empty_log: m.empty_log,
            recorded_members: m.membership.iter().map(|r| r.id).collect(),
            removed_ids: m.removed_ids.clone(),
            self_removed: m.self_removed,
            added_with_peer_urls: m.added_with_peer_urls.clone(),
            formation: m.formation.clone(),
            term: m.log.hard_state.term,
            log_end_index: m.log.last_index.max(m.snapshot.index),
            log_end_term: if m.snapshot.index > m.log.last_index {
                m.snapshot.term
            } else {
                m.log.last_term
            },
            applied_index: m.backend().and_then(|b| b.consistent_index),
            applied_term: m.backend().and_then(|b| b.term),
            revision: m.backend().and_then(|b| b.revision),
            restored: m.restored,
            upgrade,
        })),
        DirState::Partial(f) => Dir::Partial(problem(f)),
        DirState::Corrupt(f) => Dir::Corrupt(problem(f)),
        DirState::Unreadable(f) => Dir::Unreadable {
            problem: problem(f),
            symlinked: f.symlinked.as_ref().map(|p| p.display().to_string()),
        },
    };
    DirFacts {
        state,
        running: dir.running,
    }
}

/// The short message Kubernetes shows in `initContainerStatuses[].state.terminated.message`.
pub fn termination_message(report: &PreflightReport) -> String {
    fitted_message(
        json!(report.verdict),
        report.exit_code,
        [
            report.data_dir.member_id().map(|id| id.to_string()),
            report.data_dir.cluster_id().map(|id| id.to_string()),
        ],
        &report.reason,
        &report.remedy,
    )
}

/// The human summary: verdict, reason, remedy, and what each source said.
pub fn summary(r: &PreflightReport) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "preflight: {} (exit {})", r.verdict.name(), r.exit_code);
    let _ = writeln!(s, "  reason: {}", r.reason);
    if !r.remedy.is_empty() {
        let _ = writeln!(s, "  remedy: {}", r.remedy);
    }
    for e in &r.evidence {
        let status = if e.answered {
            "answered".to_string()
        } else {
            e.error.clone().unwrap_or_else(|| "no answer".into())
        };
        let _ = writeln!(
            s,
            "  evidence {}: {} ({} ms)",
            e.source, status, e.elapsed_ms
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn termination_message_fits_in_4_kib() {
        let dir = layout::inspect(
            &Paths::new(Path::new("/nonexistent-agent-test"), None),
            Options::default(),
        );
        let report = PreflightReport {
            verdict: Verdict::RefuseEmptyFormed,
            row: Row::EmptyFormed,
            exit_code: 10,
            reason: "é".repeat(5000),
            remedy: "x".repeat(9000),
            warnings: vec![],
            member: serde_json::Value::Null,
            evidence: vec![],
            data_dir: dir,
            upgrade_check: None,
            elapsed_ms: 0,
            decided_at_unix: 0,
            pod_uid: None,
            boot_id: None,
            witness: Default::default(),
        };
        let msg = termination_message(&report);
        assert!(
            msg.len() <= output::TERMINATION_MESSAGE_MAX,
            "{}",
            msg.len()
        );
        let v: serde_json::Value = serde_json::from_str(&msg).unwrap();
        assert_eq!(v["verdict"], "refuse-empty-formed");
        assert_eq!(v["exit_code"], 10);
    }
}
