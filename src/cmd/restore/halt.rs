//! How a restore ends short of `restored`: one variant per way, and the one
//! mapping of each to its exit code, verdict name and remedy.

use super::*;

/// Why a run ended short of `restored` or `already-initialized`: one variant per
/// way, each carrying what its reason names. `Display` is the reason;
/// [`Halt::exit`], [`Halt::verdict`] and [`Halt::remedy`] are the one mapping of
/// a halt to its exit code, its verdict name and what to do.
#[derive(Debug, thiserror::Error)]
pub(super) enum Halt {
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
        /// preflight's verdict (a refusal).
        verdict: Verdict,
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
    /// `--bump-revision auto` could not read every member's witness.
    #[error(
        "--bump-revision auto bumps every member of a cluster by the same N, above the highest revision any member's witness recorded, and cannot tell that revision: {why}; nothing touched"
    )]
    AutoBumpUnread {
        /// What could not be read.
        why: String,
    },
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

/// A write into the data dir's filesystem that failed.
#[derive(Debug, thiserror::Error)]
pub(super) enum WriteError {
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
    pub(super) fn exit(&self) -> Exit {
        match self {
            Halt::Usage(_) => Exit::Usage,
            Halt::Evidence(_) | Halt::Runtime(_) => Exit::Internal,
            Halt::Formed { .. } => Exit::RestoreFormed,
            Halt::Refused { verdict, .. } => verdict.exit(),
            Halt::NotThisRestore { .. } => Exit::RefuseForeign,
            Halt::ExistingUnreadable { .. }
            | Halt::BootstrappedEmpty { .. }
            | Halt::StagedIdentity(_)
            | Halt::StagedContent(_)
            | Halt::PublishedIdentity(_) => Exit::RestoreVerify,
            Halt::ToolMissing(_) | Halt::ToolUnsupported(_) | Halt::ToolFailed(_) => {
                Exit::RestoreTool
            }
            Halt::AutoBumpUnread { .. } => Exit::PhaseUnknown,
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
    pub(super) fn verdict(&self) -> &'static str {
        match self {
            Halt::Usage(_) => "usage-error",
            Halt::Evidence(_) | Halt::Runtime(_) => "internal-error",
            Halt::Formed { .. } => "refuse-formed",
            Halt::Refused { verdict, .. } => verdict.name(),
            Halt::NotThisRestore { .. } => "refuse-foreign",
            Halt::ExistingUnreadable { .. }
            | Halt::BootstrappedEmpty { .. }
            | Halt::StagedIdentity(_)
            | Halt::StagedContent(_)
            | Halt::PublishedIdentity(_) => "verify-failed",
            Halt::ToolMissing(_) | Halt::ToolUnsupported(_) | Halt::ToolFailed(_) => "tool-failed",
            Halt::AutoBumpUnread { .. } => "phase-unknown",
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
    pub(super) fn remedy(&self) -> &str {
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
            Halt::AutoBumpUnread { .. } => "retry once the Kubernetes API answers, or pass --bump-revision N --mark-compacted with the same N on every member of the cluster, N taking the snapshot's revision above the highest revision any member's witness recorded",
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
