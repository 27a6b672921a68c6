//! `restore`: populate an empty data dir from a snapshot, for the first bootstrap
//! only (docs/commands.md § restore).
//!
//! The order is the design. First the **gate**: the same evidence `preflight`
//! gathers (directory, live cluster, operator record, env hints) must say this is
//! the bootstrap of a cluster that has not formed — a wiped seed must never
//! silently re-restore its create-time snapshot and boot a one-member cluster whose
//! IDs collide with the real one. An initialized directory is never touched: with
//! this restore's identity and the snapshot's data (its backend at or beyond the
//! snapshot's revision) it is exit 0, idempotent; with this identity but without
//! the data (a seed etcd bootstrapped empty with the same flags) 33; with another
//! identity 11. Then the cheap checks that avoid half-done work: the tool exists
//! and answers, the source exists, and the data dir's filesystem has room
//! (`statvfs`, twice the snapshot plus the two WAL segments etcd preallocates). Then
//! the work, all inside `<data-dir>/.restore-staging/`: fetch and hash the
//! snapshot, read its key-value content, run the version-matched tool (exit 31
//! when it runs out of space, 32 when it fails or writes nothing), fsync, verify
//! the staged directory's identity with the inspector and its content against the
//! snapshot's, and publish it with one atomic rename. Any failure
//! removes the staging directory, so the data dir is left as it was found; a crash
//! leaves it as debris that the inspector tolerates and the next run removes.
//!
//! The gate maps `preflight`'s verdicts: `start` → already initialized (0);
//! `bootstrap` → restore; `join` → restore only when no source answered (a
//! member of a multi-member restore under `--allow-bootstrap-without-evidence`),
//! else 34 (a joining member gets its data from its peers); `refuse-empty-formed`,
//! and `phase-unknown` when a live cluster answered, → 34; everything else keeps
//! its own code (a `Refusal`; a unit test keeps its code and name preflight's).
//!
//! Every step returns `Result<_, Halt>`. A `Halt` is how a run ends short of
//! `restored` or `already-initialized`, one variant per way (the gate's
//! refusals, the tool, the source and its trailer, space, writes into the data
//! dir, verification), each carrying what its reason names: paths, sizes, IDs and
//! the step's typed error. `Halt::exit`, `Halt::verdict` and `Halt::remedy` are
//! the one place this command maps an ending to its exit code, verdict name and
//! remedy; `Display` is the reason. `run` writes them into the report, the log,
//! the termination message and the Event.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::json;

use super::preflight::{self, EvidenceEntry, PreflightReport};
use crate::cli::BumpRevision;
use crate::cli::{RestoreArgs, SnapshotSourceKind};
use crate::disk::bbolt::BoltError;
use crate::disk::ids::{self, ClusterId, MemberId};
use crate::disk::layout::{self, DirKind, Inspection, Options, Paths};
use crate::disk::lock::Probe;
use crate::error::Error;
use crate::evidence::Source;
use crate::exit::Exit;
use crate::output;
use crate::restore::fetch::{self, FetchError, Fetched, SourceError, StagedSnapshot};
use crate::restore::s3::{self, S3Location};
use crate::restore::stage::{self, StageError, Staging};
use crate::restore::tool::{self, RestoreRequest, ToolError, ToolKind};
use crate::restore::trailer::{has_trailer, TrailerCheck};
use crate::restore::verify::{self, Content, ContentError, Expected, VerifyError};
use crate::restore::{self as pieces};
use crate::verdict::{Row, Verdict};

/// etcd preallocates each WAL segment to this size.
const WAL_SEGMENT_BYTES: u64 = 64_000_000;
/// A restore tool's WAL holds two at its peak: `wal.Create` preallocates segment 0
/// and the file pipeline it starts preallocates the next one (`0.tmp`) in the
/// background until `Close` removes it (etcd `server/storage/wal/file_pipeline.go`).
const WAL_PEAK_BYTES: u64 = 2 * WAL_SEGMENT_BYTES;
/// Headroom for the `.snap` file and metadata.
const SPACE_MARGIN_BYTES: u64 = 1 << 20;

const REMEDY_FORMED: &str = "do not restore this member: the cluster already formed. Recover it from its peers instead \
(etcdctl member remove + member add, so it joins fresh and receives the data; with the operator, delete the EtcdMember \
so it is replaced). To recreate a cluster from this snapshot on purpose, restore into empty directories of a new cluster \
(a new --initial-cluster-token) with no live peers and no operator record of a formed cluster.";

/// What a free-space check is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SpaceFor {
    /// A restore: the staged copy, the restored db and the tool's WAL.
    Restore,
    /// Comparing an existing member with a snapshot fetched from S3: the staged copy.
    Compare,
}

impl SpaceFor {
    fn doing(self) -> &'static str {
        match self {
            SpaceFor::Restore => "a restore of",
            SpaceFor::Compare => "comparing this member with",
        }
    }

    fn parts(self) -> String {
        match self {
            SpaceFor::Restore => format!(
                "2 × the snapshot, for the staged copy and the restored db, plus the two \
                 {WAL_SEGMENT_BYTES}-byte WAL segments etcd preallocates, plus {SPACE_MARGIN_BYTES} bytes of margin"
            ),
            SpaceFor::Compare => {
                format!("the staged copy, plus {SPACE_MARGIN_BYTES} bytes of margin")
            }
        }
    }
}

/// Where the snapshot comes from.
#[derive(Debug, Clone)]
enum SourcePlan {
    File(PathBuf),
    S3(S3Location),
}

impl SourcePlan {
    fn kind(&self) -> &'static str {
        match self {
            SourcePlan::File(_) => "file",
            SourcePlan::S3(_) => "s3",
        }
    }

    fn describe(&self) -> String {
        match self {
            SourcePlan::File(p) => p.display().to_string(),
            SourcePlan::S3(l) => l.describe(),
        }
    }
}

/// How the staged copy will be fetched, once the source answered.
enum Fetcher<'a> {
    File(&'a Path),
    S3 {
        rt: tokio::runtime::Runtime,
        store: Arc<object_store::aws::AmazonS3>,
        loc: &'a S3Location,
        head: s3::Head,
    },
}

/// The validated configuration.
#[derive(Debug)]
struct Plan {
    evidence: preflight::Config,
    data_dir: PathBuf,
    name: String,
    initial_cluster: String,
    token: String,
    peer_urls: Vec<String>,
    expected: Expected,
    source: SourcePlan,
    skip_hash_check: bool,
    bump_revision: BumpRevision,
    mark_compacted: bool,
    etcdutl_path: Option<PathBuf>,
    download_timeout: Duration,
    connect_timeout: Duration,
    read_timeout: Duration,
    tool_timeout: Duration,
    termination_log: Option<PathBuf>,
}

fn usage(msg: impl Into<String>) -> Error {
    Error::usage(msg)
}

fn nonempty(s: &Option<String>) -> Option<String> {
    s.as_ref()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
}

fn source_plan(a: &RestoreArgs) -> crate::error::Result<SourcePlan> {
    let pvc = || -> crate::error::Result<SourcePlan> {
        let mount = a
            .pvc_mount_path
            .clone()
            .filter(|p| !p.as_os_str().is_empty())
            .ok_or_else(|| usage("a pvc source needs PVC_MOUNT_PATH (--pvc-mount-path)"))?;
        let sub = nonempty(&a.pvc_subpath).unwrap_or_default();
        let sub_path = Path::new(&sub);
        if sub_path
            .components()
            .any(|c| !matches!(c, Component::Normal(_) | Component::CurDir))
        {
            return Err(usage(format!(
                "PVC_SUBPATH {sub:?} must be a relative path inside the volume (no leading /, no ..)"
            )));
        }
        Ok(SourcePlan::File(mount.join(sub_path)))
    };
    let s3 = || -> crate::error::Result<SourcePlan> {
        let bucket = nonempty(&a.s3_bucket)
            .ok_or_else(|| usage("an s3 source needs S3_BUCKET (--s3-bucket)"))?;
        let key =
            nonempty(&a.s3_key).ok_or_else(|| usage("an s3 source needs S3_KEY (--s3-key)"))?;
        let credentials = match (
            nonempty(&a.s3_access_key_id),
            nonempty(&a.s3_secret_access_key),
        ) {
            (Some(id), Some(secret)) => Some((id, secret)),
            (None, None) => None,
            _ => {
                return Err(usage(
                    "set both AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or neither (unsigned requests)",
                ))
            }
        };
        let endpoint = nonempty(&a.s3_endpoint);
        if let Some(e) = &endpoint {
            if !(e.starts_with("http://") || e.starts_with("https://")) {
                return Err(usage(format!(
                    "S3_ENDPOINT {e:?} must start with http:// or https://"
                )));
            }
        }
        Ok(SourcePlan::S3(S3Location {
            endpoint,
            bucket,
            key,
            region: a.s3_region.trim().to_string(),
            path_style: a.s3_force_path_style.unwrap_or(false),
            credentials,
            session_token: nonempty(&a.s3_session_token),
            ca_bundle: a.s3_ca_bundle.clone().filter(|p| !p.as_os_str().is_empty()),
        }))
    };
    match (&a.from_file, a.from_s3, a.source_kind) {
        (Some(p), _, _) => Ok(SourcePlan::File(p.clone())),
        (None, true, _) => s3(),
        (None, false, Some(SnapshotSourceKind::S3)) => s3(),
        (None, false, Some(SnapshotSourceKind::Pvc)) => pvc(),
        (None, false, None) if a.pvc_mount_path.is_some() => pvc(),
        (None, false, None) => Err(usage(
            "no snapshot source: pass --from-file PATH or --from-s3, or set SNAPSHOT_DEST_KIND (s3|pvc)",
        )),
    }
}

impl Plan {
    fn from_args(a: &RestoreArgs) -> crate::error::Result<Plan> {
        // restore writes into the directory: look for every kind of lock.
        let evidence = preflight::Config::new(&a.dirs, &a.evidence, None, None)?
            .with_lock_probe(Probe::Thorough);
        let data_dir = a.dirs.data_dir.clone();
        if let Some(w) = &a.dirs.wal_dir {
            if *w != data_dir.join("member").join("wal") {
                return Err(usage(
                    "restore does not support a dedicated --wal-dir (ETCD_WAL_DIR): the WAL and the backend could not be published in one atomic rename",
                ));
            }
        }
        let id = &a.evidence.identity;
        let name = nonempty(&id.name)
            .ok_or_else(|| usage("restore needs this member's name: --name (ETCD_MEMBER_NAME)"))?;
        let initial_cluster = nonempty(&id.initial_cluster).ok_or_else(|| {
            usage("restore needs --initial-cluster (ETCD_INITIAL_CLUSTER): the membership of the restored cluster")
        })?;
        let parsed =
            ids::parse_initial_cluster(&initial_cluster).map_err(|e| usage(e.to_string()))?;
        // Used as given: etcd hashes the token's bytes, spaces included.
        let token = id
            .initial_cluster_token
            .clone()
            .unwrap_or_else(|| crate::cli::DEFAULT_CLUSTER_TOKEN.to_owned());
        if token.trim().is_empty() {
            return Err(usage("--initial-cluster-token must not be blank"));
        }
        let expected = Expected::derive(&parsed, &name, &token).ok_or_else(|| {
            usage(format!(
                "--name {name} has no entry in --initial-cluster {initial_cluster}"
            ))
        })?;
        let peer_urls = evidence.me().peer_urls.clone();
        let mut own = parsed.get(&name).cloned().unwrap_or_default();
        own.sort();
        let mut given = peer_urls.clone();
        given.sort();
        if own != given {
            return Err(usage(format!(
                "--peer-urls {} differ from --name {name}'s entry in --initial-cluster ({}): the restore tool would refuse them",
                given.join(","),
                own.join(",")
            )));
        }
        // etcdutl's own rule: both or neither (`auto` decides both).
        if let BumpRevision::By(n) = a.bump_revision {
            if a.mark_compacted != (n > 0) {
                return Err(usage(
                    "--bump-revision N (N > 0) and --mark-compacted go together: etcdutl refuses one without the other",
                ));
            }
        }
        for (what, d) in [
            ("--download-timeout", a.download_timeout),
            ("--connect-timeout", a.connect_timeout),
            ("--read-timeout", a.read_timeout),
            ("--tool-timeout", a.tool_timeout),
        ] {
            if d.is_zero() {
                return Err(usage(format!("{what} must be positive")));
            }
        }
        Ok(Plan {
            evidence,
            data_dir,
            name,
            initial_cluster,
            token,
            peer_urls,
            expected,
            source: source_plan(a)?,
            skip_hash_check: a.skip_hash_check,
            bump_revision: a.bump_revision,
            mark_compacted: a.mark_compacted,
            etcdutl_path: a.etcdutl_path.clone().filter(|p| !p.as_os_str().is_empty()),
            download_timeout: a.download_timeout,
            connect_timeout: a.connect_timeout,
            read_timeout: a.read_timeout,
            tool_timeout: a.tool_timeout,
            termination_log: a.termination_log.clone(),
        })
    }
}

/// What `preflight` decided, as the gate saw it.
#[derive(Debug, Clone, Serialize)]
pub struct GateDoc {
    /// preflight's verdict.
    pub verdict: Verdict,
    /// preflight's reason.
    pub reason: String,
}

/// The snapshot source.
#[derive(Debug, Clone, Serialize)]
pub struct SourceDoc {
    /// `file` or `s3`.
    pub kind: &'static str,
    /// Path or `s3://bucket/key` (with the endpoint).
    pub location: String,
    /// Size announced by stat or HEAD.
    pub size: Option<u64>,
}

/// The tool that ran.
#[derive(Debug, Clone, Serialize)]
pub struct ToolDoc {
    /// Path.
    pub path: PathBuf,
    /// `etcdutl` or `etcdctl`.
    pub kind: ToolKind,
    /// Its version.
    pub version: String,
    /// How long `snapshot restore` took.
    pub elapsed_ms: Option<u64>,
}

/// The free-space check.
#[derive(Debug, Clone, Serialize)]
pub struct SpaceDoc {
    /// The path statvfs was asked about.
    pub path: PathBuf,
    /// Bytes needed.
    pub needed: u64,
    /// Bytes available to the agent.
    pub available: u64,
}

/// The content check: the snapshot's key-value data and the directory's.
#[derive(Debug, Clone, Serialize)]
pub struct ContentDoc {
    /// The snapshot's `key` bucket, read before the tool ran.
    pub snapshot: Content,
    /// The restored (or already initialized) backend's.
    pub data_dir: Option<Content>,
}

/// The JSON document of `restore`.
#[derive(Debug, Clone, Serialize)]
pub struct RestoreReport {
    /// `restored`, `already-initialized`, or why not (`refuse-formed`,
    /// `phase-unknown`, `source-failed`, `no-space`, `tool-failed`, `verify-failed`, …).
    pub verdict: &'static str,
    /// The exit code.
    pub exit_code: u8,
    /// What happened.
    pub reason: String,
    /// What to do (empty on success).
    pub remedy: String,
    /// preflight's verdict on the directory and the evidence.
    pub gate: Option<GateDoc>,
    /// One entry per evidence source, as preflight reports them.
    pub evidence: Vec<EvidenceEntry>,
    /// The inspect document of the data dir, after the run.
    pub data_dir: Option<Inspection>,
    /// The inspect document of the staged directory when it failed verification.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub staged: Option<Inspection>,
    /// The snapshot source.
    pub source: Option<SourceDoc>,
    /// Bytes fetched.
    pub bytes: u64,
    /// The SHA-256 trailer was present and matched.
    pub sha256_verified: bool,
    /// The verified hash, hex.
    pub sha256: Option<String>,
    /// The restore tool.
    pub tool: Option<ToolDoc>,
    /// What the content check compared (revision, key count, KV hash).
    pub content: Option<ContentDoc>,
    /// The member ID the restore produces (derived for --name).
    pub member_id: Option<MemberId>,
    /// The cluster ID the restore produces (derived from every member).
    pub cluster_id: Option<ClusterId>,
    /// Every member of the restored cluster: name → ID.
    pub members: BTreeMap<String, MemberId>,
    /// The free-space check.
    pub space: Option<SpaceDoc>,
    /// What was tolerated or cleaned up on the way.
    pub notes: Vec<String>,
    /// Wall time of each stage, ms.
    pub timings_ms: BTreeMap<&'static str, u64>,
    /// Wall time of the whole run.
    pub elapsed_ms: u64,
}

impl RestoreReport {
    fn new(plan: Option<&Plan>) -> RestoreReport {
        // Every run overwrites both; a report nothing filled in reads as a usage error.
        let unset = Halt::Usage(String::new());
        RestoreReport {
            verdict: unset.verdict(),
            exit_code: unset.exit().code(),
            reason: String::new(),
            remedy: String::new(),
            gate: None,
            evidence: Vec::new(),
            data_dir: None,
            staged: None,
            source: plan.map(|p| SourceDoc {
                kind: p.source.kind(),
                location: p.source.describe(),
                size: None,
            }),
            bytes: 0,
            sha256_verified: false,
            sha256: None,
            tool: None,
            content: None,
            member_id: plan.map(|p| p.expected.member_id),
            cluster_id: plan.map(|p| p.expected.cluster_id),
            members: plan
                .map(|p| {
                    p.expected
                        .members
                        .iter()
                        .map(|(id, (name, _))| (name.clone(), *id))
                        .collect()
                })
                .unwrap_or_default(),
            space: None,
            notes: Vec::new(),
            timings_ms: BTreeMap::new(),
            elapsed_ms: 0,
        }
    }
}

mod halt;
use halt::Halt;

/// What the gate makes of preflight's verdict.
#[derive(Debug, PartialEq, Eq)]
enum Gate {
    /// The directory holds a member already: nothing to do.
    AlreadyInitialized,
    /// First bootstrap: restore.
    Proceed,
    /// The cluster already formed: never restore over it.
    Formed,
    /// preflight's own refusal (its verdict).
    Refuse(Verdict),
}

/// Headroom above the witness's revision for writes after its last renewal.
const AUTO_BUMP_MARGIN: u64 = 1_000_000;

/// The bump that puts a snapshot at revision `snapshot` above `seen` (what a
/// witness recorded), with [`AUTO_BUMP_MARGIN`]; 0 without a witness.
fn auto_bump(seen: Option<i64>, snapshot: i64) -> u64 {
    match seen {
        Some(seen) => u64::try_from(seen.saturating_sub(snapshot))
            .unwrap_or(0)
            .saturating_add(AUTO_BUMP_MARGIN),
        None => 0,
    }
}

/// The highest revision a witness of any member of the restored cluster
/// recorded: this member's own (`own`: its Lease or file, as preflight read
/// them) and, in a cluster of several members, every member's Lease — each
/// member restored with `auto` must compute the same bump, or their revisions
/// would differ by the difference for good. A Lease that cannot be read, or no
/// Kubernetes API, halts: a guess could give this member another N than its
/// peers.
fn cluster_seen_revision(
    p: &Plan,
    own: Option<i64>,
    notes: &mut Vec<String>,
) -> Result<Option<i64>, Halt> {
    let members: Vec<String> = ids::parse_initial_cluster(&p.initial_cluster)
        .map(|m| m.into_keys().collect())
        .unwrap_or_default();
    if members.len() <= 1 {
        return Ok(own);
    }
    let read = preflight::witness_revisions(&p.evidence, &members).map_err(|why| {
        Halt::AutoBumpUnread {
            why: format!(
                "the witness Leases of {} cannot be read: {why}",
                members.join(", ")
            ),
        }
    })?;
    highest_seen(own, read, notes)
}

/// The highest of `own` and every Lease's revision; a Lease that could not be
/// read halts.
fn highest_seen(
    own: Option<i64>,
    read: preflight::LeaseRevisions,
    notes: &mut Vec<String>,
) -> Result<Option<i64>, Halt> {
    let mut seen = own;
    for (lease, revision) in read {
        let r = revision.map_err(|why| Halt::AutoBumpUnread {
            why: format!("{lease} cannot be read: {why}"),
        })?;
        notes.push(format!(
            "--bump-revision auto: {lease} recorded {}",
            r.map_or("no revision (or does not exist)".to_owned(), |r| format!(
                "revision {r}"
            ))
        ));
        seen = seen.max(r);
    }
    Ok(seen)
}

/// Maps preflight's row to the restore gate.
fn gate<D, U>(pre: &PreflightReport<D, U>) -> Gate {
    match pre.row {
        Row::Start
        | Row::StartStaleRecord
        | Row::StartEmptyLog
        | Row::StartCatchingUp
        | Row::StartRestoredAbove => Gate::AlreadyInitialized,
        Row::Bootstrap => Gate::Proceed,
        // Every source silent, allowed by `--allow-bootstrap-without-evidence`:
        // the seed, or any member of a multi-member restore, bootstraps — unless
        // the operator or the env hints answered (it is an operator's member,
        // whose cluster may have formed).
        Row::AllowedWithoutEvidence
            if pre.verdict == Verdict::Bootstrap
                || !(pre.answered(Source::Kube) || pre.answered(Source::Env)) =>
        {
            Gate::Proceed
        }
        // A live cluster answered (8, 8b, 10), or this member started (7–7b, 8a).
        Row::AllowedWithoutEvidence
        | Row::Join
        | Row::JoinUntrusted
        | Row::NotListed
        | Row::JoinSelfOnly
        | Row::EmptyFormed
        | Row::EmptyLogFormed
        | Row::Rebootstrapped => Gate::Formed,
        // Every other refusal is preflight's own, with its own exit code.
        _ => Gate::Refuse(pre.verdict),
    }
}

fn ms(d: Duration) -> u64 {
    d.as_millis() as u64
}

/// Runs `restore`.
pub fn run(args: &RestoreArgs) -> crate::error::Result<Exit> {
    let started = Instant::now();
    let plan = match Plan::from_args(args) {
        Ok(p) => p,
        Err(Error::Usage(msg)) => {
            // No report yet: the document names no verdict.
            let halt = Halt::Usage(msg);
            eprintln!("etcd-member-agent restore: {halt}");
            let doc = json!({"verdict": null, "exit_code": halt.exit().code(), "reason": halt.to_string(), "remedy": halt.remedy(), "evidence": [], "data_dir": null});
            output::write_termination_message(args.termination_log.as_deref(), &doc.to_string());
            output::emit(args.output.format, "", &doc)?;
            return Ok(halt.exit());
        }
        Err(e @ Error::Internal(_)) => return Err(e),
    };
    let mut report = RestoreReport::new(Some(&plan));
    let halted = execute(&plan, &mut report).err();
    let exit = match &halted {
        None => Exit::Ok,
        Some(h) => {
            report.verdict = h.verdict();
            report.reason = h.to_string();
            report.remedy = h.remedy().to_owned();
            h.exit()
        }
    };
    if report.data_dir.is_none() || halted.is_some() {
        report.data_dir = Some(layout::inspect(
            &Paths::new(&plan.data_dir, None),
            Options::default(),
        ));
    }
    report.exit_code = exit.code();
    report.elapsed_ms = ms(started.elapsed());
    tracing::info!(
        verdict = report.verdict,
        exit_code = report.exit_code,
        reason = %report.reason,
        elapsed_ms = report.elapsed_ms,
        "restore verdict"
    );
    output::write_termination_message(
        plan.termination_log.as_deref(),
        &termination_message(&report),
    );
    if halted.is_some() {
        plan.evidence.report_event(report.verdict, &report.reason);
    }
    output::emit(args.output.format, &summary(&report), &report)?;
    Ok(exit)
}

fn execute(p: &Plan, r: &mut RestoreReport) -> Result<(), Halt> {
    // 1. The gate.
    let t = Instant::now();
    let pre = preflight::decide(&p.evidence).map_err(Halt::Evidence)?;
    r.timings_ms.insert("gate", ms(t.elapsed()));
    r.evidence = pre.evidence.clone();
    r.gate = Some(GateDoc {
        verdict: pre.verdict,
        reason: pre.reason.clone(),
    });
    r.data_dir = Some(pre.data_dir.clone());
    let staging = Staging::of(&p.data_dir);
    match gate(&pre) {
        Gate::AlreadyInitialized => {
            // A crash between publishing and cleaning up leaves only debris: finish.
            if staging.remove()? {
                r.notes
                    .push("removed the staging directory of an earlier run".into());
                r.data_dir = Some(layout::inspect(
                    &Paths::new(&p.data_dir, None),
                    Options::default(),
                ));
            }
            let (m, c) = (pre.data_dir.member_id(), pre.data_dir.cluster_id());
            if m != Some(p.expected.member_id) || c != Some(p.expected.cluster_id) {
                return Err(Halt::NotThisRestore {
                    member: m,
                    cluster: c,
                    expected_member: p.expected.member_id,
                    expected_cluster: p.expected.cluster_id,
                });
            }
            return check_existing(p, r, &staging, &pre.reason);
        }
        Gate::Formed => {
            return Err(Halt::Formed {
                verdict: pre.verdict,
                reason: pre.reason,
            })
        }
        Gate::Refuse(verdict) => {
            return Err(Halt::Refused {
                verdict,
                reason: pre.reason,
                remedy: pre.remedy,
            })
        }
        Gate::Proceed => {
            tracing::info!(verdict = pre.verdict.name(), reason = %pre.reason, "restore gate: first bootstrap");
        }
    }

    // 2. The tool, before any byte moves.
    let tool = tool::find(p.etcdutl_path.as_deref()).map_err(Halt::ToolMissing)?;
    if matches!(p.bump_revision, BumpRevision::By(n) if n > 0) {
        tool.supports_bump_revision()
            .map_err(Halt::ToolUnsupported)?;
    }
    r.tool = Some(ToolDoc {
        path: tool.path.clone(),
        kind: tool.kind,
        version: tool.version.clone(),
        elapsed_ms: None,
    });

    // 3. Debris of an interrupted run.
    if staging.remove()? {
        r.notes.push(format!(
            "removed {} left by an interrupted restore",
            staging.root.display()
        ));
    }

    let (fetched, skip_hash_check) = fetch_snapshot(p, r, &staging, true)?;
    let cleanup = |h: Halt| discard_staging(&staging, h);

    // The snapshot's own content, before the tool can change anything.
    let snapshot_content = Content::of(&fetched.path).map_err(|source| {
        cleanup(Halt::SnapshotNotABackend {
            location: p.source.describe(),
            source,
        })
    })?;
    r.content = Some(ContentDoc {
        snapshot: snapshot_content,
        data_dir: None,
    });
    // `--bump-revision auto`: above what this member's witness saw.
    let (bump_revision, mark_compacted) = match p.bump_revision {
        BumpRevision::By(n) => (n, p.mark_compacted),
        BumpRevision::Auto => {
            let seen = cluster_seen_revision(p, pre.witness.seen_revision, &mut r.notes)
                .map_err(cleanup)?;
            let n = auto_bump(seen, snapshot_content.revision);
            match seen {
                Some(seen) => r.notes.push(format!(
                    "--bump-revision auto: the highest revision a witness of this cluster's members recorded is {seen}, the snapshot is at {}: bumping by {n} (restore every member of the cluster with the same N, --bump-revision {n}, or with auto before any of them starts)",
                    snapshot_content.revision
                )),
                None => r.notes.push(
                    "--bump-revision auto: no witness of this cluster's members recorded a revision: no bump".into(),
                ),
            }
            if n > 0 {
                tool.supports_bump_revision()
                    .map_err(|e| cleanup(Halt::ToolUnsupported(e)))?;
            }
            (n, n > 0)
        }
    };

    // 7. The tool.
    let t = Instant::now();
    let restored = staging.restored();
    let req = RestoreRequest {
        snapshot: &fetched.path,
        data_dir: &restored,
        name: &p.name,
        initial_cluster: &p.initial_cluster,
        token: &p.token,
        peer_urls: &p.peer_urls,
        skip_hash_check,
        bump_revision,
        mark_compacted,
    };
    let tool_elapsed = tool.restore(&req, p.tool_timeout).map_err(|e| {
        cleanup(if e.is_no_space() {
            Halt::ToolNoSpace(e)
        } else {
            Halt::ToolFailed(e)
        })
    })?;
    if let Some(doc) = r.tool.as_mut() {
        doc.elapsed_ms = Some(ms(tool_elapsed));
    }
    r.timings_ms.insert("tool", ms(t.elapsed()));
    pieces::test_pause("tool");

    // 8. Durable, then verified.
    let t = Instant::now();
    stage::fsync_tree(&restored).map_err(|e| cleanup(e.into()))?;
    let staged_ins = layout::inspect(&Paths::new(&restored, None), Options::default());
    match verify::check(&staged_ins, &p.expected) {
        Ok(notes) => r.notes.extend(notes),
        Err(e) => {
            r.staged = Some(staged_ins);
            return Err(cleanup(Halt::StagedIdentity(e)));
        }
    }
    let staged_db = restored.join("member").join("snap").join("db");
    match verify::check_content(&staged_db, &snapshot_content, bump_revision) {
        Ok(found) => {
            if let Some(c) = r.content.as_mut() {
                c.data_dir = Some(found);
            }
        }
        Err(e) => {
            if let (Some(c), verify::ContentError::Differs { found, .. }) = (r.content.as_mut(), &e)
            {
                c.data_dir = Some(*found);
            }
            r.staged = Some(staged_ins);
            return Err(cleanup(Halt::StagedContent(e)));
        }
    }
    r.timings_ms.insert("verify", ms(t.elapsed()));

    // 9. Publish: one rename, then the parent's fsync.
    pieces::test_pause("rename");
    let t = Instant::now();
    let data_paths = Paths::new(&p.data_dir, None);
    // An empty directory with a `member/` holds only etcd's debris of a failed
    // first start (an empty `member/`, a db with nothing in it, no WAL): it is
    // set aside into the staging directory, or the rename below would refuse
    // it on every run. Anything else under `member/` keeps it from being empty.
    if std::fs::symlink_metadata(&data_paths.member_dir).is_ok() {
        let now = layout::inspect(&data_paths, Options::default());
        // The gate saw no etcd minutes ago, before the download; one that
        // started since (a second Pod on the volume, stuck in a join) holds
        // this `member/`: never move it from under it.
        if now.running {
            return Err(cleanup(Halt::Refused {
                verdict: Verdict::RefuseRunning,
                reason: format!(
                    "an etcd process holds {} (it started while the snapshot was fetched): the restore was not published",
                    data_paths.member_dir.display()
                ),
                remedy: "stop the other etcd on this volume (two writers corrupt it), then run restore again".into(),
            }));
        }
        if now.kind() == DirKind::Empty {
            stage::set_aside(&data_paths.member_dir, &staging.root.join("debris-member"))
                .map_err(|e| cleanup(e.into()))?;
            r.notes.push(format!(
                "set aside etcd's debris of a failed first start ({}); removed with the staging directory",
                now.unexpected
                    .iter()
                    .map(|e| e.path.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
    }
    stage::publish(&restored.join("member"), &data_paths.member_dir)
        .map_err(|e| cleanup(e.into()))?;
    pieces::test_pause("cleanup");
    if let Err(e) = staging.remove() {
        r.notes.push(format!(
            "published, but could not remove the staging directory (the next run will): {e}"
        ));
    }
    r.timings_ms.insert("publish", ms(t.elapsed()));

    // 10. Read back what etcd will see.
    let after = layout::inspect(&data_paths, Options::default());
    let check = verify::check(&after, &p.expected);
    r.data_dir = Some(after);
    check.map_err(Halt::PublishedIdentity)?;
    r.verdict = "restored";
    r.reason = format!(
        "restored {} ({} bytes{}; content verified: revision {}, {} keys, KV hash {:08x}, as in the snapshot) with {} {} as member {} ({}) of cluster {}",
        p.source.describe(),
        r.bytes,
        if r.sha256_verified {
            ", SHA-256 verified"
        } else {
            ", no trailer"
        },
        snapshot_content.revision,
        snapshot_content.keys,
        snapshot_content.kv_hash,
        match tool.kind {
            ToolKind::Etcdutl => "etcdutl",
            ToolKind::Etcdctl => "etcdctl",
        },
        tool.version,
        p.name,
        p.expected.member_id,
        p.expected.cluster_id
    );
    Ok(())
}

/// An initialized directory with the identity this restore produces: exit 0 only
/// when its backend holds the snapshot's data (revision at or beyond the
/// snapshot's); a seed etcd bootstrapped empty with the same flags is 33.
/// Nothing in the data dir is touched either way (an S3 snapshot is staged to be
/// read, and the staging directory removed).
fn check_existing(
    p: &Plan,
    r: &mut RestoreReport,
    staging: &Staging,
    pre_reason: &str,
) -> Result<(), Halt> {
    let db = Paths::new(&p.data_dir, None)
        .member_dir
        .join("snap")
        .join("db");
    let existing = Content::of(&db).map_err(|source| Halt::ExistingUnreadable {
        db: db.clone(),
        source,
    })?;
    let source_failed = |source: BoltError| Halt::ComparedNotABackend {
        location: p.source.describe(),
        source,
    };
    let snapshot = match &p.source {
        // Read in place: a healthy member's restart must not need room for a copy.
        SourcePlan::File(path) => Content::of(path).map_err(source_failed)?,
        SourcePlan::S3(_) => {
            let (fetched, _) = fetch_snapshot(p, r, staging, false)?;
            let c =
                Content::of(&fetched.path).map_err(|e| discard_staging(staging, source_failed(e)));
            if let Err(e) = staging.remove() {
                tracing::warn!(error = %e, "cannot remove the staging directory");
            }
            c?
        }
    };
    r.content = Some(ContentDoc {
        snapshot,
        data_dir: Some(existing),
    });
    if !verify::holds_snapshot(&existing, &snapshot) {
        return Err(Halt::BootstrappedEmpty { existing, snapshot });
    }
    r.verdict = "already-initialized";
    r.reason = format!(
        "{pre_reason}; its backend is at revision {} (the snapshot's is {}): nothing restored",
        existing.revision, snapshot.revision
    );
    Ok(())
}

/// Removes the staging directory on the way out of a failed run.
fn discard_staging(staging: &Staging, h: Halt) -> Halt {
    if let Err(e) = staging.remove() {
        tracing::warn!(error = %e, "cannot remove the staging directory");
    }
    h
}

/// Steps 4 to 6: the source, its size and room for it; the fetch into staging;
/// the trailer. Returns the staged snapshot and whether the tool must skip its
/// own hash check. `for_restore` false: only to read the snapshot's content.
fn fetch_snapshot(
    p: &Plan,
    r: &mut RestoreReport,
    staging: &Staging,
    for_restore: bool,
) -> Result<(Fetched, bool), Halt> {
    // 4. The source, its size, and room for it.
    let t = Instant::now();
    let fetch_deadline = t + p.download_timeout;
    let (size, fetcher) = match &p.source {
        SourcePlan::File(path) => (
            fetch::probe_file(path).map_err(Halt::Source)?,
            Fetcher::File(path),
        ),
        SourcePlan::S3(loc) => {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(Halt::Runtime)?;
            let bounds = s3::Bounds {
                connect: p.connect_timeout,
                idle: p.read_timeout,
                total: p.download_timeout,
            };
            let store = Arc::new(s3::client(loc, bounds).map_err(Halt::Source)?);
            let head = rt
                .block_on(async {
                    tokio::time::timeout(p.download_timeout, s3::head(&store, loc, p.read_timeout))
                        .await
                })
                .map_err(|_| {
                    Halt::Source(SourceError::TimedOut {
                        location: loc.describe(),
                        after: p.download_timeout,
                    })
                })?
                .map_err(Halt::Source)?;
            (
                head.size,
                Fetcher::S3 {
                    rt,
                    store,
                    loc,
                    head,
                },
            )
        }
    };
    if let Some(s) = r.source.as_mut() {
        s.size = Some(size);
    }
    if !has_trailer(size) && !p.skip_hash_check {
        return Err(no_trailer(&p.source, size));
    }
    let (fs_path, available) = stage::free_bytes(&p.data_dir)?;
    // A restore stages the snapshot and the tool writes the db and WAL segments;
    // checking an existing member needs room for the staged copy only.
    let needed = if for_restore {
        size.saturating_mul(2)
            .saturating_add(WAL_PEAK_BYTES + SPACE_MARGIN_BYTES)
    } else {
        size.saturating_add(SPACE_MARGIN_BYTES)
    };
    r.space = Some(SpaceDoc {
        path: fs_path.clone(),
        needed,
        available,
    });
    if available < needed {
        return Err(Halt::TooLittleSpace {
            purpose: if for_restore {
                SpaceFor::Restore
            } else {
                SpaceFor::Compare
            },
            path: fs_path,
            size,
            needed,
            available,
        });
    }

    // 5. Fetch into staging, hashing as the bytes pass.
    stage::ensure_dir(&p.data_dir)?;
    staging.create()?;
    let cleanup = |h: Halt| discard_staging(staging, h);
    let staged = StagedSnapshot::create(&staging.snapshot(), size, &p.source.describe())
        .map_err(|e| cleanup(e.into()))?;
    let remaining = fetch_deadline.saturating_duration_since(Instant::now());
    let fetched: Fetched = match fetcher {
        Fetcher::File(path) => fetch::copy_file(path, staged, remaining),
        Fetcher::S3 {
            rt,
            store,
            loc,
            head,
        } => rt
            .block_on(async {
                tokio::time::timeout(
                    remaining,
                    s3::download(&store, loc, &head, staged, p.read_timeout),
                )
                .await
            })
            .unwrap_or_else(|_| {
                Err(SourceError::TimedOut {
                    location: loc.describe(),
                    after: p.download_timeout,
                }
                .into())
            }),
    }
    .map_err(|e| cleanup(e.into()))?;
    r.bytes = fetched.bytes;
    r.timings_ms.insert("fetch", ms(t.elapsed()));
    tracing::info!(
        bytes = fetched.bytes,
        elapsed_ms = ms(fetched.elapsed),
        "snapshot staged"
    );

    // 6. The trailer.
    let skip_hash_check = match &fetched.check {
        TrailerCheck::Verified { sha256 } => {
            r.sha256_verified = true;
            r.sha256 = Some(sha256.clone());
            false
        }
        TrailerCheck::Absent if p.skip_hash_check => {
            r.notes.push("the snapshot has no SHA-256 trailer (a raw db copy); accepted with --skip-hash-check".into());
            true
        }
        TrailerCheck::Absent => return Err(cleanup(no_trailer(&p.source, fetched.bytes))),
        TrailerCheck::Mismatch { expected, computed } => {
            return Err(cleanup(Halt::HashMismatch {
                location: p.source.describe(),
                expected: expected.clone(),
                computed: computed.clone(),
            }));
        }
        TrailerCheck::WrongLength { expected, received } => {
            return Err(cleanup(Halt::SourceChanged {
                location: p.source.describe(),
                announced: *expected,
                received: *received,
            }));
        }
    };

    Ok((fetched, skip_hash_check))
}

fn no_trailer(source: &SourcePlan, size: u64) -> Halt {
    Halt::NoTrailer {
        location: source.describe(),
        size,
    }
}

/// The short message Kubernetes shows in `initContainerStatuses[].state.terminated.message`.
fn termination_message(r: &RestoreReport) -> String {
    output::fitted_message(
        json!(r.verdict),
        r.exit_code,
        [
            r.member_id.map(|id| id.to_string()),
            r.cluster_id.map(|id| id.to_string()),
        ],
        &r.reason,
        &r.remedy,
    )
}

/// The human summary.
fn summary(r: &RestoreReport) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "restore: {} (exit {})", r.verdict, r.exit_code);
    let _ = writeln!(s, "  reason: {}", r.reason);
    if !r.remedy.is_empty() {
        let _ = writeln!(s, "  remedy: {}", r.remedy);
    }
    if let (Some(m), Some(c)) = (&r.member_id, &r.cluster_id) {
        let _ = writeln!(s, "  identity: member {m} of cluster {c}");
    }
    for n in &r.notes {
        let _ = writeln!(s, "  note: {n}");
    }
    for e in &r.evidence {
        let status = if e.answered {
            "answered".to_string()
        } else {
            e.error.clone().unwrap_or_else(|| "no answer".into())
        };
        let _ = writeln!(s, "  evidence {}: {status}", e.source);
    }
    s
}

#[cfg(test)]
mod tests;
