//! Command-line types only: every flag has help text and reads the environment
//! variable the operator sets (SPEC §2). No I/O happens here.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

use crate::output::Format;

/// Guards, restores, inspects and reports an etcd member inside its Pod.
#[derive(Debug, Parser)]
#[command(name = "etcd-member-agent", version, about, propagate_version = true)]
pub struct Cli {
    /// The subcommand.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands (SPEC §1 table).
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Read a data dir offline and report its state and identity (read-only).
    Inspect(InspectArgs),
    /// Decide whether etcd may start on this data dir (init container).
    Preflight(Box<PreflightArgs>),
    /// Populate an empty data dir from a snapshot, first bootstrap only.
    Restore(NotYetArgs),
    /// Remove every entry of a data dir, then verify it is empty.
    Wipe(WipeArgs),
    /// Exit 0 only when a data dir is provably empty.
    VerifyWipe(WipeArgs),
    /// Copy this static binary into a shared volume.
    Install(InstallArgs),
    /// Report latent hazards of a Pod (dangling ConfigMap/Secret references).
    PodCheck(PodCheckArgs),
    /// The sidecar: identity over gRPC, identity-aware readiness, metrics.
    Serve(NotYetArgs),
}

/// Placeholder for a subcommand whose issue has not landed: it accepts any
/// arguments and exits 2 with "not implemented yet".
#[derive(Debug, Args)]
pub struct NotYetArgs {
    /// Ignored.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, hide = true)]
    pub rest: Vec<String>,
}

/// Where the data lives.
#[derive(Debug, Clone, Args)]
pub struct DataDirArgs {
    /// The etcd data directory.
    #[arg(long, env = "ETCD_DATA_DIR", default_value = "/var/lib/etcd")]
    pub data_dir: PathBuf,
    /// A separate WAL directory, as etcd's --wal-dir [default: <data-dir>/member/wal].
    #[arg(long, env = "ETCD_WAL_DIR")]
    pub wal_dir: Option<PathBuf>,
}

/// Output format.
#[derive(Debug, Clone, Args)]
pub struct OutputArgs {
    /// `text` prints a summary on stderr; `json` also prints one JSON document on stdout.
    #[arg(short = 'o', long = "output", env = "AGENT_OUTPUT", value_enum, default_value_t = Format::Text)]
    pub format: Format,
}

/// `inspect`.
#[derive(Debug, Args)]
pub struct InspectArgs {
    #[command(flatten)]
    pub dirs: DataDirArgs,
    #[command(flatten)]
    pub output: OutputArgs,
    /// Also compute the KV hash, revision and key count `etcdutl snapshot status` prints.
    #[arg(long, env = "AGENT_INSPECT_HASH")]
    pub hash: bool,
}

/// This member's identity, with the same names the operator's restore agent uses.
#[derive(Debug, Clone, Args)]
pub struct IdentityArgs {
    /// This member's name (etcd --name).
    #[arg(long, env = "ETCD_MEMBER_NAME")]
    pub name: Option<String>,
    /// `name=peerURL,...` as given to etcd --initial-cluster.
    #[arg(long, env = "ETCD_INITIAL_CLUSTER")]
    pub initial_cluster: Option<String>,
    /// etcd --initial-cluster-token.
    #[arg(
        long,
        env = "ETCD_INITIAL_CLUSTER_TOKEN",
        default_value = "etcd-cluster"
    )]
    pub initial_cluster_token: String,
    /// This member's advertised peer URLs, comma separated [default: its entry in --initial-cluster].
    #[arg(long, env = "ETCD_PEER_URLS")]
    pub peer_urls: Option<String>,
}

/// How to reach etcd.
#[derive(Debug, Clone, Args)]
pub struct EtcdConnArgs {
    /// Client URLs of the other members or the client Service, comma separated.
    #[arg(long, env = "ETCD_PEER_ENDPOINTS")]
    pub peer_endpoints: Option<String>,
    /// CA bundle to verify etcd's server certificate.
    #[arg(long, env = "ETCD_TLS_CA_PATH")]
    pub cacert: Option<PathBuf>,
    /// Client certificate for mTLS.
    #[arg(long, env = "ETCD_TLS_CERT_PATH", requires = "key")]
    pub cert: Option<PathBuf>,
    /// Client key for mTLS.
    #[arg(long, env = "ETCD_TLS_KEY_PATH", requires = "cert")]
    pub key: Option<PathBuf>,
    /// etcd user, when auth is on.
    #[arg(long, env = "ETCD_USERNAME", requires = "password")]
    pub user: Option<String>,
    /// etcd password.
    #[arg(long, env = "ETCD_PASSWORD", hide_env_values = true)]
    pub password: Option<String>,
}

/// The operator's records in the Kubernetes API.
#[derive(Debug, Clone, Args)]
pub struct KubeArgs {
    /// Read the EtcdMember/EtcdCluster records [default: on when a service-account token is mounted].
    #[arg(long, env = "AGENT_KUBE", num_args = 0..=1, default_missing_value = "true")]
    pub kube: Option<bool>,
    /// The Pod's name, which is also its EtcdMember's name [default: --name].
    #[arg(long, env = "POD_NAME")]
    pub pod_name: Option<String>,
    /// The Pod's namespace.
    #[arg(long, env = "POD_NAMESPACE")]
    pub namespace: Option<String>,
    /// A kubeconfig to use instead of the in-cluster config.
    #[arg(long, env = "KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
}

/// `preflight`.
#[derive(Debug, Args)]
pub struct PreflightArgs {
    #[command(flatten)]
    pub dirs: DataDirArgs,
    #[command(flatten)]
    pub output: OutputArgs,
    #[command(flatten)]
    pub identity: IdentityArgs,
    #[command(flatten)]
    pub etcd: EtcdConnArgs,
    #[command(flatten)]
    pub kube: KubeArgs,
    /// Hint: this member's ID as the operator last saw it (non-empty = the cluster formed).
    #[arg(long, env = "ETCD_MEMBER_ID")]
    pub member_id_hint: Option<String>,
    /// Hint: the cluster's ID as the operator last saw it (non-empty = the cluster formed).
    #[arg(long, env = "ETCD_CLUSTER_ID")]
    pub cluster_id_hint: Option<String>,
    /// DANGEROUS: bootstrap an empty dir when no evidence source can answer (no operator).
    #[arg(long, env = "AGENT_ALLOW_BOOTSTRAP_WITHOUT_EVIDENCE")]
    pub allow_bootstrap_without_evidence: bool,
    /// The whole command's time budget (5, 5s, 500ms, 1m).
    #[arg(long, env = "AGENT_TIMEOUT", default_value = "30s", value_parser = crate::duration::parse)]
    pub timeout: Duration,
    /// Where to write the verdict for the sidecar [default: /run/etcd-agent/preflight.json when that directory exists].
    #[arg(long, env = "AGENT_VERDICT_FILE")]
    pub verdict_file: Option<PathBuf>,
    /// Where to write the short JSON termination message [default: /dev/termination-log when writable].
    #[arg(long, env = "TERMINATION_LOG")]
    pub termination_log: Option<PathBuf>,
}

/// `wipe` and `verify-wipe` (SPEC §2.4).
#[derive(Debug, Args)]
pub struct WipeArgs {
    #[command(flatten)]
    pub dirs: DataDirArgs,
    #[command(flatten)]
    pub output: OutputArgs,
    /// Tolerate a top-level `lost+found` directory (a filesystem's root): verify-wipe lists it and its contents as allowed, wipe keeps it [default: it counts as remaining, and wipe removes it].
    #[arg(long, env = "AGENT_ALLOW_LOST_FOUND")]
    pub allow_lost_found: bool,
}

/// `install` (SPEC §2.7).
#[derive(Debug, Args)]
pub struct InstallArgs {
    /// Directory to copy this binary into, as `<dest>/etcd-member-agent` (required; it must exist and be writable).
    #[arg(long, env = "TOOLS_DEST_DIR")]
    pub dest: Option<PathBuf>,
    #[command(flatten)]
    pub output: OutputArgs,
    /// How long the copy may take to answer `--version` (5, 5s, 500ms, 1m).
    #[arg(long, env = "AGENT_INSTALL_CHECK_TIMEOUT", default_value = "10s", value_parser = crate::duration::parse)]
    pub check_timeout: Duration,
}

/// `pod-check` (SPEC §2.6).
#[derive(Debug, Args)]
pub struct PodCheckArgs {
    /// The Pod to check (the downward API's metadata.name; required).
    #[arg(long, env = "POD_NAME")]
    pub pod_name: Option<String>,
    /// The Pod's namespace (the downward API's metadata.namespace; required).
    #[arg(long, env = "POD_NAMESPACE")]
    pub namespace: Option<String>,
    /// A kubeconfig to use instead of the in-cluster service account.
    #[arg(long, env = "KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
    #[command(flatten)]
    pub output: OutputArgs,
    /// The whole check's time budget, every API call included (5, 5s, 500ms, 1m).
    #[arg(long, env = "AGENT_TIMEOUT", default_value = "10s", value_parser = crate::duration::parse)]
    pub timeout: Duration,
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_is_well_formed() {
        Cli::command().debug_assert();
    }
}
