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

use super::preflight::{self, EvidenceEntry};
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
use crate::verdict::Verdict;

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

/// Why a run ended short of `restored` or `already-initialized`: one variant per
/// way, each carrying what its reason names. `Display` is the reason;
/// [`Halt::exit`], [`Halt::verdict`] and [`Halt::remedy`] are the one mapping of
/// a halt to its exit code, its verdict name and what to do.
#[derive(Debug, thiserror::Error)]
enum Halt {
    /// The configuration is wrong (`Plan::from_args`).
    #[error("{0}")]
    Usage(String),
    /// preflight could not gather the gate's evidence.
    #[error("gathering evidence failed: {0:#}")]
    Evidence(#[source] Error),
    /// The runtime of the S3 client cannot start.
    #[error(transparent)]
    Runtime(std::io::Error),
    /// The cluster already formed: preflight's verdict and reason.
    #[error(
        "refusing to restore: the cluster already formed ({}: {reason}). A restore would boot a new cluster with this member's and the cluster's IDs over it",
        verdict.name()
    )]
    Formed {
        /// preflight's verdict (`join`, `refuse-empty-formed`, `phase-unknown`).
        verdict: Verdict,
        /// preflight's reason.
        reason: String,
    },
    /// preflight's own refusal, with its reason and remedy.
    #[error("refusing to restore: {reason}")]
    Refused {
        /// Which.
        refusal: Refusal,
        /// preflight's reason.
        reason: String,
        /// preflight's remedy.
        remedy: String,
    },
    /// The directory is initialized, but not with the IDs this restore produces.
    #[error(
        "the directory holds member {} of cluster {}, not the {expected_member} of {expected_cluster} this restore would produce: it was not created by this restore; nothing touched",
        or_blank(*member),
        or_blank(*cluster)
    )]
    NotThisRestore {
        /// The directory's member ID.
        member: Option<MemberId>,
        /// The directory's cluster ID.
        cluster: Option<ClusterId>,
        /// This restore's member ID.
        expected_member: MemberId,
        /// This restore's cluster ID.
        expected_cluster: ClusterId,
    },
    /// The directory holds this restore's IDs, but its backend cannot be read.
    #[error(
        "the data dir is initialized, but its backend {} cannot be read to compare with the snapshot: {source}",
        db.display()
    )]
    ExistingUnreadable {
        /// The backend file.
        db: PathBuf,
        /// The cause.
        #[source]
        source: BoltError,
    },
    /// The directory holds this restore's IDs but not the snapshot's data.
    #[error(
        "the data dir holds this restore's member and cluster IDs but not the snapshot's data: its backend is at revision {} ({} keys), the snapshot at revision {} ({} keys). etcd bootstrapped it empty instead of restoring; nothing touched",
        existing.revision, existing.keys, snapshot.revision, snapshot.keys
    )]
    BootstrappedEmpty {
        /// The data dir's backend.
        existing: Content,
        /// The snapshot's.
        snapshot: Content,
    },
    /// No restore tool, or not the one `ETCDUTL_PATH` names.
    #[error(transparent)]
    ToolMissing(ToolError),
    /// The tool cannot do `--bump-revision`.
    #[error(transparent)]
    ToolUnsupported(ToolError),
    /// The tool ran out of space on the data volume.
    #[error(transparent)]
    ToolNoSpace(ToolError),
    /// The tool failed, timed out, or wrote nothing.
    #[error(transparent)]
    ToolFailed(ToolError),
    /// The source is missing, unreadable, timed out or stalled.
    #[error(transparent)]
    Source(SourceError),
    /// The snapshot's size says it has no SHA-256 trailer (without `--skip-hash-check`).
    #[error(
        "the snapshot {location} has no SHA-256 trailer ({size} bytes, size % 512 != 32): it is not `etcdctl snapshot save` output"
    )]
    NoTrailer {
        /// Path or `s3://bucket/key`.
        location: String,
        /// Its size.
        size: u64,
    },
    /// The trailer does not match the content.
    #[error(
        "the snapshot {location} fails its SHA-256 check: the trailer says {expected}, the content hashes to {computed}"
    )]
    HashMismatch {
        /// Path or `s3://bucket/key`.
        location: String,
        /// The trailer, hex.
        expected: String,
        /// The content's hash, hex.
        computed: String,
    },
    /// Another number of bytes arrived than announced.
    #[error(
        "the snapshot {location} changed while it was fetched: {announced} bytes announced, {received} received"
    )]
    SourceChanged {
        /// Path or `s3://bucket/key`.
        location: String,
        /// stat or HEAD.
        announced: u64,
        /// Fetched.
        received: u64,
    },
    /// The staged snapshot is not an etcd backend (before the tool ran).
    #[error("the snapshot {location} is not a readable etcd backend: {source}")]
    SnapshotNotABackend {
        /// Path or `s3://bucket/key`.
        location: String,
        /// The cause.
        #[source]
        source: BoltError,
    },
    /// The snapshot an initialized directory is compared with is not an etcd backend.
    #[error("the snapshot {location} is not a readable etcd backend: {source}")]
    ComparedNotABackend {
        /// Path or `s3://bucket/key`.
        location: String,
        /// The cause.
        #[source]
        source: BoltError,
    },
    /// `statvfs` says the data dir's filesystem has too little room.
    #[error(
        "not enough free space on {}: {} a {size}-byte snapshot needs {needed} bytes ({}), but {available} are available",
        path.display(), purpose.doing(), purpose.parts()
    )]
    TooLittleSpace {
        /// What the room is for.
        purpose: SpaceFor,
        /// The path `statvfs` was asked about.
        path: PathBuf,
        /// The snapshot's size.
        size: u64,
        /// Bytes needed.
        needed: u64,
        /// Bytes available.
        available: u64,
    },
    /// The data volume filled up under the agent's own writes.
    #[error(transparent)]
    VolumeFull(WriteError),
    /// The agent cannot write the data dir.
    #[error(transparent)]
    Unwritable(WriteError),
    /// The staged directory is not the member asked for.
    #[error(transparent)]
    StagedIdentity(VerifyError),
    /// The staged backend does not hold the snapshot's data.
    #[error(transparent)]
    StagedContent(ContentError),
    /// The staged directory verified, the published one does not.
    #[error("after publishing: {0}")]
    PublishedIdentity(#[source] VerifyError),
}

/// preflight's refusals the gate passes on, each with preflight's exit code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Refusal {
    /// No source could establish the cluster's phase, and no live cluster answered.
    PhaseUnknown,
    /// The directory belongs to another member or cluster.
    Foreign,
    /// The directory is corrupt.
    Corrupt,
    /// The directory is partially initialized.
    Partial,
    /// etcd is running on the directory.
    Running,
    /// The etcd version about to start would refuse the directory.
    Version,
    /// The directory's log went backwards.
    RolledBack,
    /// The directory cannot be read.
    Unreadable,
}

/// A write into the data dir's filesystem that failed.
#[derive(Debug, thiserror::Error)]
enum WriteError {
    /// Creating, removing, fsyncing, renaming or `statvfs`.
    #[error(transparent)]
    Stage(StageError),
    /// Writing the staged snapshot (a [`FetchError::Write`]).
    #[error(transparent)]
    StagedCopy(FetchError),
}

impl WriteError {
    fn is_no_space(&self) -> bool {
        match self {
            WriteError::Stage(e) => e.is_no_space(),
            WriteError::StagedCopy(e) => e.is_no_space(),
        }
    }
}

impl From<WriteError> for Halt {
    fn from(e: WriteError) -> Halt {
        if e.is_no_space() {
            Halt::VolumeFull(e)
        } else {
            Halt::Unwritable(e)
        }
    }
}

impl From<StageError> for Halt {
    fn from(e: StageError) -> Halt {
        WriteError::Stage(e).into()
    }
}

impl From<FetchError> for Halt {
    fn from(e: FetchError) -> Halt {
        match e {
            FetchError::Source(e) => Halt::Source(e),
            e @ FetchError::Write { .. } => WriteError::StagedCopy(e).into(),
        }
    }
}

/// An ID the directory may lack, blank when it does.
fn or_blank(id: Option<impl std::fmt::Display>) -> String {
    id.map(|id| id.to_string()).unwrap_or_default()
}

impl Halt {
    /// The exit code: the one place `restore` decides one.
    fn exit(&self) -> Exit {
        match self {
            Halt::Usage(_) => Exit::Usage,
            Halt::Evidence(_) | Halt::Runtime(_) => Exit::Internal,
            Halt::Formed { .. } => Exit::RestoreFormed,
            Halt::Refused { refusal, .. } => match refusal {
                Refusal::PhaseUnknown => Exit::PhaseUnknown,
                Refusal::Foreign => Exit::RefuseForeign,
                Refusal::Corrupt => Exit::RefuseCorrupt,
                Refusal::Partial => Exit::RefusePartial,
                Refusal::Running => Exit::RefuseRunning,
                Refusal::Version => Exit::RefuseVersion,
                Refusal::RolledBack => Exit::RefuseRolledBack,
                Refusal::Unreadable => Exit::Unreadable,
            },
            Halt::NotThisRestore { .. } => Exit::RefuseForeign,
            Halt::ExistingUnreadable { .. }
            | Halt::BootstrappedEmpty { .. }
            | Halt::StagedIdentity(_)
            | Halt::StagedContent(_)
            | Halt::PublishedIdentity(_) => Exit::RestoreVerify,
            Halt::ToolMissing(_) | Halt::ToolUnsupported(_) | Halt::ToolFailed(_) => {
                Exit::RestoreTool
            }
            Halt::Source(_)
            | Halt::NoTrailer { .. }
            | Halt::HashMismatch { .. }
            | Halt::SourceChanged { .. }
            | Halt::SnapshotNotABackend { .. }
            | Halt::ComparedNotABackend { .. } => Exit::RestoreSource,
            Halt::ToolNoSpace(_) | Halt::TooLittleSpace { .. } | Halt::VolumeFull(_) => {
                Exit::RestoreSpace
            }
            Halt::Unwritable(_) => Exit::Unreadable,
        }
    }

    /// The verdict name, as written in the JSON document, the logs and the Event.
    fn verdict(&self) -> &'static str {
        match self {
            Halt::Usage(_) => "usage-error",
            Halt::Evidence(_) | Halt::Runtime(_) => "internal-error",
            Halt::Formed { .. } => "refuse-formed",
            Halt::Refused { refusal, .. } => match refusal {
                Refusal::PhaseUnknown => "phase-unknown",
                Refusal::Foreign => "refuse-foreign",
                Refusal::Corrupt => "refuse-corrupt",
                Refusal::Partial => "refuse-partial",
                Refusal::Running => "refuse-running",
                Refusal::Version => "refuse-version",
                Refusal::RolledBack => "refuse-rolled-back",
                Refusal::Unreadable => "unreadable",
            },
            Halt::NotThisRestore { .. } => "refuse-foreign",
            Halt::ExistingUnreadable { .. }
            | Halt::BootstrappedEmpty { .. }
            | Halt::StagedIdentity(_)
            | Halt::StagedContent(_)
            | Halt::PublishedIdentity(_) => "verify-failed",
            Halt::ToolMissing(_) | Halt::ToolUnsupported(_) | Halt::ToolFailed(_) => "tool-failed",
            Halt::Source(_)
            | Halt::NoTrailer { .. }
            | Halt::HashMismatch { .. }
            | Halt::SourceChanged { .. }
            | Halt::SnapshotNotABackend { .. }
            | Halt::ComparedNotABackend { .. } => "source-failed",
            Halt::ToolNoSpace(_) | Halt::TooLittleSpace { .. } | Halt::VolumeFull(_) => "no-space",
            Halt::Unwritable(_) => "data-dir-unwritable",
        }
    }

    /// What to do.
    fn remedy(&self) -> &str {
        match self {
            Halt::Usage(_) => "fix the configuration",
            Halt::Evidence(_) => "this is a bug; report it with the logs",
            Halt::Runtime(_) => "",
            Halt::Formed { .. } => REMEDY_FORMED,
            Halt::Refused { remedy, .. } => remedy,
            Halt::NotThisRestore { .. } => "check --name, --initial-cluster and --initial-cluster-token against the cluster this volume belongs to; restore only into an empty data dir",
            Halt::ExistingUnreadable { .. } => "inspect the data dir (etcd-member-agent inspect); nothing was touched",
            Halt::BootstrappedEmpty { .. } => "do not start etcd on it: it would serve an empty keyspace as this cluster. Wipe the data dir (etcd-member-agent wipe) and rerun restore, or recover the member from its peers",
            Halt::ToolMissing(_) => "run restore in the etcd image (its /usr/local/bin has the matching etcdutl), or point ETCDUTL_PATH at etcdutl (3.5+) or etcdctl (3.4)",
            Halt::ToolUnsupported(_) => "--bump-revision needs etcdutl 3.6+ (or a 3.5 patch that has it): run restore in a 3.6+ etcd image or point ETCDUTL_PATH at such an etcdutl",
            Halt::ToolNoSpace(_) => "the data volume filled up while the tool wrote the restored member; give it more room (or free it), then retry",
            Halt::ToolFailed(_) => "read the tool's message above; a snapshot from a newer etcd needs that version's etcdutl",
            Halt::Source(_) => "check the snapshot source (path, bucket, key, endpoint, credentials) and that it is reachable from the Pod",
            Halt::NoTrailer { .. } => "restore a snapshot taken with `etcdctl snapshot save`; a raw db copied out of a data dir can be restored with --skip-hash-check (AGENT_SKIP_HASH_CHECK=true)",
            Halt::HashMismatch { .. } => "the snapshot is corrupt or truncated; restore from another snapshot",
            Halt::SourceChanged { .. } => "make sure nothing writes the snapshot during the restore, then retry",
            Halt::SnapshotNotABackend { .. } => "the snapshot is corrupt or not an etcd snapshot; restore from another snapshot",
            Halt::ComparedNotABackend { .. } => "the data dir was not touched; check the snapshot source",
            Halt::TooLittleSpace { .. } => "give the data volume more room (or free it), then retry",
            Halt::VolumeFull(_) => "give the data volume more room, then retry",
            Halt::Unwritable(_) => "check the data volume's ownership and mode: the agent runs as the etcd user (uid 65532) and must be able to write the data dir",
            Halt::StagedIdentity(_) => "the restore tool did not produce the requested member; check --name, --initial-cluster and --initial-cluster-token, and that the tool matches the snapshot's etcd version",
            Halt::StagedContent(_) => "the restore tool did not restore this snapshot's data; check that ETCDUTL_PATH is the real etcdutl (or etcdctl for 3.4) of the snapshot's etcd version",
            Halt::PublishedIdentity(_) => "keep the directory for analysis and report this: the staged copy verified but the published one does not",
        }
    }
}

/// What the gate makes of preflight's verdict.
#[derive(Debug, PartialEq, Eq)]
enum Gate {
    /// The directory holds a member already: nothing to do.
    AlreadyInitialized,
    /// First bootstrap: restore.
    Proceed,
    /// The cluster already formed: never restore over it.
    Formed,
    /// preflight's own refusal.
    Refuse(Refusal),
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

/// Maps preflight's verdict (and which sources answered) to the restore gate.
fn gate(verdict: Verdict, live_answered: bool, any_source_answered: bool) -> Gate {
    match verdict {
        Verdict::Start => Gate::AlreadyInitialized,
        Verdict::Bootstrap => Gate::Proceed,
        // Only `--allow-bootstrap-without-evidence` yields `join` with every source
        // silent: a member of a multi-member restore, which bootstraps too.
        Verdict::Join if !any_source_answered => Gate::Proceed,
        Verdict::Join | Verdict::RefuseEmptyFormed => Gate::Formed,
        Verdict::PhaseUnknown if live_answered => Gate::Formed,
        // Every other refusal is preflight's own, with its own exit code.
        Verdict::PhaseUnknown => Gate::Refuse(Refusal::PhaseUnknown),
        Verdict::RefuseForeign => Gate::Refuse(Refusal::Foreign),
        Verdict::RefuseCorrupt => Gate::Refuse(Refusal::Corrupt),
        Verdict::RefusePartial => Gate::Refuse(Refusal::Partial),
        Verdict::RefuseRunning => Gate::Refuse(Refusal::Running),
        Verdict::RefuseVersion => Gate::Refuse(Refusal::Version),
        Verdict::RefuseRolledBack => Gate::Refuse(Refusal::RolledBack),
        Verdict::Unreadable => Gate::Refuse(Refusal::Unreadable),
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
    let answered = |s: Source| pre.evidence.iter().any(|e| e.source == s && e.answered);
    let live = answered(Source::Etcd);
    let any = live || answered(Source::Kube) || answered(Source::Env);
    let staging = Staging::of(&p.data_dir);
    match gate(pre.verdict, live, any) {
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
        Gate::Refuse(refusal) => {
            return Err(Halt::Refused {
                refusal,
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
            let n = auto_bump(pre.witness.seen_revision, snapshot_content.revision);
            match pre.witness.seen_revision {
                Some(seen) => r.notes.push(format!(
                    "--bump-revision auto: the witness recorded revision {seen}, the snapshot is at {}: bumping by {n}",
                    snapshot_content.revision
                )),
                None => r.notes.push(
                    "--bump-revision auto: no witness of this member recorded a revision: no bump".into(),
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
                refusal: Refusal::Running,
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
mod tests {
    use super::*;

    /// The exit code and verdict name the gate's refusal of `v` ends the run with.
    fn refused(v: Verdict, live: bool, any: bool) -> (Exit, &'static str) {
        let halt = match gate(v, live, any) {
            Gate::Formed => Halt::Formed {
                verdict: v,
                reason: String::new(),
            },
            Gate::Refuse(refusal) => Halt::Refused {
                refusal,
                reason: String::new(),
                remedy: String::new(),
            },
            g => panic!("{v:?} is not refused: {g:?}"),
        };
        (halt.exit(), halt.verdict())
    }

    #[test]
    fn the_gate_restores_only_a_first_bootstrap() {
        use Verdict::*;
        assert_eq!(gate(Start, true, true), Gate::AlreadyInitialized);
        assert_eq!(gate(Bootstrap, false, true), Gate::Proceed);
        assert_eq!(gate(Bootstrap, false, false), Gate::Proceed);
        assert_eq!(gate(Join, false, false), Gate::Proceed);
        assert_eq!(
            refused(Join, true, true),
            (Exit::RestoreFormed, "refuse-formed")
        );
        assert_eq!(
            refused(Join, false, true),
            (Exit::RestoreFormed, "refuse-formed")
        );
        assert_eq!(
            refused(RefuseEmptyFormed, false, true),
            (Exit::RestoreFormed, "refuse-formed")
        );
        assert_eq!(
            refused(PhaseUnknown, true, true),
            (Exit::RestoreFormed, "refuse-formed")
        );
        assert_eq!(
            refused(PhaseUnknown, false, false),
            (Exit::PhaseUnknown, "phase-unknown")
        );
        assert_eq!(
            refused(RefusePartial, false, false),
            (Exit::RefusePartial, "refuse-partial")
        );
        assert_eq!(
            refused(RefuseCorrupt, false, false),
            (Exit::RefuseCorrupt, "refuse-corrupt")
        );
        assert_eq!(
            refused(RefuseRunning, false, false),
            (Exit::RefuseRunning, "refuse-running")
        );
        assert_eq!(
            refused(Unreadable, false, false),
            (Exit::Unreadable, "unreadable")
        );
        assert_eq!(
            refused(RefuseForeign, true, true),
            (Exit::RefuseForeign, "refuse-foreign")
        );
        assert_eq!(
            refused(RefuseVersion, false, true),
            (Exit::RefuseVersion, "refuse-version")
        );
    }

    /// preflight's own refusals end a restore with preflight's exit code and name.
    #[test]
    fn a_refusal_passed_on_keeps_preflights_exit_code_and_name() {
        use Verdict::*;
        for v in [
            PhaseUnknown,
            RefuseForeign,
            RefuseCorrupt,
            RefusePartial,
            RefuseRunning,
            RefuseVersion,
            Unreadable,
        ] {
            for any in [false, true] {
                assert_eq!(refused(v, false, any), (v.exit(), v.name()), "{v:?}");
            }
        }
    }

    /// The reasons composed from several pieces read as the `format!` that
    /// composed them before the halt was typed.
    #[test]
    fn the_composed_reasons_read_as_before() {
        let m: MemberId = "8e9e05c52164694d".parse().unwrap();
        let c: ClusterId = "cdf818194e3a8c32".parse().unwrap();
        let m2: MemberId = "0000000000000001".parse().unwrap();
        let h = Halt::NotThisRestore {
            member: Some(m2),
            cluster: None,
            expected_member: m,
            expected_cluster: c,
        };
        assert_eq!(
            h.to_string(),
            format!(
                "the directory holds member {} of cluster {}, not the {} of {} this restore would produce: it was not created by this restore; nothing touched",
                Some(m2).map(|id| id.to_string()).unwrap_or_default(),
                None::<ClusterId>.map(|id| id.to_string()).unwrap_or_default(),
                m,
                c
            )
        );
        let h = Halt::Formed {
            verdict: Verdict::Join,
            reason: "r".into(),
        };
        assert_eq!(h.to_string(), format!("refusing to restore: the cluster already formed ({}: {}). A restore would boot a new cluster with this member's and the cluster's IDs over it", Verdict::Join.name(), "r"));
        assert_eq!(h.remedy(), REMEDY_FORMED);
        let h = Halt::Refused {
            refusal: Refusal::Partial,
            reason: "r".into(),
            remedy: "fix it".into(),
        };
        assert_eq!(h.to_string(), "refusing to restore: r");
        assert_eq!(h.remedy(), "fix it");
        let (existing, snapshot) = (
            Content {
                revision: 1,
                keys: 2,
                kv_hash: 3,
            },
            Content {
                revision: 4,
                keys: 5,
                kv_hash: 6,
            },
        );
        assert_eq!(
            Halt::BootstrappedEmpty { existing, snapshot }.to_string(),
            format!(
                "the data dir holds this restore's member and cluster IDs but not the snapshot's data: its backend is at revision {} ({} keys), the snapshot at revision {} ({} keys). etcd bootstrapped it empty instead of restoring; nothing touched",
                existing.revision, existing.keys, snapshot.revision, snapshot.keys
            )
        );
        let source = SourcePlan::File("/snap/db".into());
        let size = 1000;
        assert_eq!(
            no_trailer(&source, size).to_string(),
            format!(
                "the snapshot {} has no SHA-256 trailer ({size} bytes, size % 512 != 32): it is not `etcdctl snapshot save` output",
                source.describe()
            )
        );
        let (expected, computed) = ("ab".to_string(), "cd".to_string());
        assert_eq!(
            Halt::HashMismatch { location: source.describe(), expected: expected.clone(), computed: computed.clone() }.to_string(),
            format!("the snapshot {} fails its SHA-256 check: the trailer says {expected}, the content hashes to {computed}", source.describe())
        );
        let (expected, received) = (10u64, 7u64);
        assert_eq!(
            Halt::SourceChanged { location: source.describe(), announced: expected, received }.to_string(),
            format!("the snapshot {} changed while it was fetched: {expected} bytes announced, {received} received", source.describe())
        );
        let (fs_path, needed, available) = (PathBuf::from("/var/lib/etcd"), 5000u64, 10u64);
        assert_eq!(
            Halt::TooLittleSpace { purpose: SpaceFor::Restore, path: fs_path.clone(), size, needed, available }.to_string(),
            format!(
                "not enough free space on {}: a restore of a {size}-byte snapshot needs {needed} bytes (2 × the snapshot, for the staged copy and the restored db, plus the two {WAL_SEGMENT_BYTES}-byte WAL segments etcd preallocates, plus 1048576 bytes of margin), but {available} are available",
                fs_path.display()
            )
        );
        assert_eq!(
            Halt::TooLittleSpace { purpose: SpaceFor::Compare, path: fs_path.clone(), size, needed, available }.to_string(),
            format!(
                "not enough free space on {}: comparing this member with a {size}-byte snapshot needs {needed} bytes (the staged copy, plus 1048576 bytes of margin), but {available} are available",
                fs_path.display()
            )
        );
        let e = VerifyError {
            dir: "/d".into(),
            problems: vec!["a".into(), "b".into()],
        };
        let text = e.to_string();
        assert_eq!(
            Halt::PublishedIdentity(e).to_string(),
            format!("after publishing: {text}")
        );
        let e = Error::internal("reading", &std::io::Error::other("boom"));
        let text = format!("gathering evidence failed: {e:#}");
        assert_eq!(Halt::Evidence(e).to_string(), text);
        let e = Error::usage("bad flag");
        let text = e.to_string();
        assert_eq!(Halt::Usage(text.clone()).to_string(), text);
    }

    /// Each typed error passed through reads as the error itself did.
    #[test]
    fn a_wrapped_error_reads_as_itself() {
        let io = || std::io::Error::from_raw_os_error(nix::libc::ENOSPC);
        let stage = || StageError {
            op: "rename",
            path: "/d/member".into(),
            source: io(),
        };
        let text = stage().to_string();
        let h = Halt::from(stage());
        assert_eq!(
            (h.exit(), h.verdict(), h.to_string()),
            (Exit::RestoreSpace, "no-space", text)
        );
        let eacces = StageError {
            op: "create",
            path: "/d".into(),
            source: std::io::Error::from_raw_os_error(nix::libc::EACCES),
        };
        let text = eacces.to_string();
        let h = Halt::from(eacces);
        assert_eq!(
            (h.exit(), h.verdict(), h.to_string()),
            (Exit::Unreadable, "data-dir-unwritable", text)
        );
        let write = FetchError::Write {
            path: "/d/.restore-staging/snapshot".into(),
            source: io(),
        };
        let text = write.to_string();
        let h = Halt::from(write);
        assert_eq!(
            (h.exit(), h.verdict(), h.to_string()),
            (Exit::RestoreSpace, "no-space", text)
        );
        assert_eq!(h.remedy(), "give the data volume more room, then retry");
        let gone = FetchError::Source(SourceError::NotFound {
            location: "/snap".into(),
        });
        let text = gone.to_string();
        let h = Halt::from(gone);
        assert_eq!(
            (h.exit(), h.verdict(), h.to_string()),
            (Exit::RestoreSource, "source-failed", text)
        );
    }

    /// A crashed restore leaves its staging directory; the inspector must treat
    /// it as debris (the directory stays `empty`), or the rerun that would finish
    /// the job is refused as `partial`.
    #[test]
    fn the_inspector_treats_a_leftover_staging_dir_as_debris() {
        let dir = tempfile::tempdir().unwrap();
        let staging = Staging::of(dir.path());
        staging.create().unwrap();
        std::fs::create_dir_all(staging.restored().join("member/snap")).unwrap();
        std::fs::write(staging.restored().join("member/snap/db"), b"x").unwrap();
        std::fs::write(staging.snapshot(), b"partial").unwrap();
        let ins = layout::inspect(&Paths::new(dir.path(), None), Options::default());
        assert_eq!(ins.kind(), crate::disk::layout::DirKind::Empty);
        let entry = ins
            .unexpected
            .iter()
            .find(|e| e.path.ends_with(stage::STAGING_DIR))
            .expect("the staging dir is reported");
        assert!(entry.note.contains("restore"), "{}", entry.note);
    }

    #[test]
    fn the_termination_message_fits_in_4_kib() {
        let mut r = RestoreReport::new(None);
        r.reason = "é".repeat(5000);
        r.remedy = "x".repeat(9000);
        let msg = termination_message(&r);
        assert!(msg.len() <= output::TERMINATION_MESSAGE_MAX);
        let v: serde_json::Value = serde_json::from_str(&msg).unwrap();
        assert_eq!(v["verdict"], "usage-error");
    }

    #[test]
    fn auto_bump_puts_the_snapshot_above_what_the_witness_saw() {
        assert_eq!(auto_bump(None, 40), 0);
        assert_eq!(auto_bump(Some(55), 40), 15 + AUTO_BUMP_MARGIN);
        // A snapshot newer than the witness's last renewal: the margin alone.
        assert_eq!(auto_bump(Some(30), 40), AUTO_BUMP_MARGIN);
        assert_eq!(
            auto_bump(Some(i64::MAX), i64::MIN),
            i64::MAX as u64 + AUTO_BUMP_MARGIN
        );
    }
}
