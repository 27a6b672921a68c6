//! Command-line types only: every flag has help text and reads the environment
//! variable the operator sets (docs/commands.md). No I/O happens here.

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

/// The subcommands (docs/commands.md).
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Read a data dir offline and report its state and identity (read-only).
    Inspect(InspectArgs),
    /// Decide whether etcd may start on this data dir (init container).
    Preflight(Box<PreflightArgs>),
    /// Populate an empty data dir from a snapshot, first bootstrap only.
    Restore(Box<RestoreArgs>),
    /// Remove every entry of a data dir, then verify it is empty.
    Wipe(WipeArgs),
    /// Exit 0 only when a data dir is provably empty.
    VerifyWipe(WipeArgs),
    /// Copy this static binary into a shared volume.
    Install(InstallArgs),
    /// Report latent hazards of a Pod (dangling ConfigMap/Secret references).
    PodCheck(PodCheckArgs),
    /// The sidecar: identity over gRPC, identity-aware readiness, metrics.
    Serve(Box<ServeArgs>),
    /// Guard the etcd Pods of manifests (files or stdin): the sidecar and preflight added.
    Inject(InjectArgs),
    /// The mutating admission webhook that guards etcd Pods as they are created.
    Webhook(Box<WebhookArgs>),
    /// Every guarded member of every cluster in one view, and the conditions
    /// across each cluster's members (also `kubectl etcd-guard`).
    Fleet(Box<FleetArgs>),
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
    /// Where the data lives.
    #[command(flatten)]
    pub dirs: DataDirArgs,
    /// How the result is printed.
    #[command(flatten)]
    pub output: OutputArgs,
    /// Also compute the KV hash, revision and key count `etcdutl snapshot status` prints.
    #[arg(long, env = "AGENT_INSPECT_HASH")]
    pub hash: bool,
    /// Threads that read at once (default: one per core the process may use,
    /// its CPU quota and affinity included).
    #[arg(long, value_name = "N", env = "AGENT_INSPECT_THREADS")]
    pub threads: Option<std::num::NonZeroUsize>,
    /// List what would make this etcd version (3.6, 3.7, 3.6.11, …) refuse or
    /// panic on the directory; exit 16 when something blocks.
    #[arg(long, value_name = "VERSION", value_parser = parse_etcd_version)]
    pub upgrade_check: Option<crate::disk::upgrade::Target>,
    /// The flags of that etcd the check depends on.
    #[command(flatten)]
    pub etcd_flags: EtcdFlagArgs,
}

/// The flags of the etcd about to start that change what it refuses; the same
/// `ETCD_*` variables etcd reads, so the operator's env reaches both.
#[derive(Debug, Clone, Args)]
pub struct EtcdFlagArgs {
    /// etcd's `--v2-deprecation` (3.6 honours only `write-only-skip-check`,
    /// which lets it start on custom v2 store content).
    #[arg(long = "etcd-v2-deprecation", env = "ETCD_V2_DEPRECATION")]
    pub v2_deprecation: Option<String>,
    /// etcd's `--max-learners` (default 1).
    #[arg(long = "etcd-max-learners", env = "ETCD_MAX_LEARNERS")]
    pub max_learners: Option<u32>,
}

impl EtcdFlagArgs {
    /// As the upgrade check takes them.
    pub fn flags(&self) -> crate::disk::upgrade::EtcdFlags {
        crate::disk::upgrade::EtcdFlags {
            v2_deprecation: self.v2_deprecation.clone().filter(|v| !v.is_empty()),
            max_learners: self.max_learners,
        }
    }
}

/// Parses an etcd version for `--upgrade-check`/`--etcd-version`.
fn parse_etcd_version(s: &str) -> Result<crate::disk::upgrade::Target, String> {
    crate::disk::upgrade::Target::parse(s)
        .ok_or_else(|| format!("{s:?} is not an etcd version (3.6, 3.7.3, v3.6.11)"))
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
    /// etcd --initial-cluster-token, used as given (etcd hashes its bytes, spaces
    /// included) [default: etcd-cluster, etcd's own].
    #[arg(long, env = "ETCD_INITIAL_CLUSTER_TOKEN")]
    pub initial_cluster_token: Option<String>,
    /// etcd --discovery (v2 discovery): a cluster formed through it hashes its
    /// founders' IDs with this URL instead of the token.
    #[arg(long, env = "ETCD_DISCOVERY")]
    pub discovery: Option<String>,
    /// etcd --discovery-endpoints (v3 discovery, etcd 3.6+): with them, the
    /// founders' IDs are hashed with --discovery-token.
    #[arg(long, env = "ETCD_DISCOVERY_ENDPOINTS")]
    pub discovery_endpoints: Option<String>,
    /// etcd --discovery-token (v3 discovery).
    #[arg(long, env = "ETCD_DISCOVERY_TOKEN")]
    pub discovery_token: Option<String>,
    /// This member's advertised peer URLs, comma separated [default: its entry in --initial-cluster].
    #[arg(long, env = "ETCD_PEER_URLS")]
    pub peer_urls: Option<String>,
    /// etcd --initial-cluster-state (`new` or `existing`): with `new` the member's
    /// IDs follow from --initial-cluster and the token [default: `new` when
    /// --initial-cluster names only this member, else unknown].
    #[arg(long, env = "ETCD_INITIAL_CLUSTER_STATE", value_parser = ["new", "existing"])]
    pub initial_cluster_state: Option<String>,
}

/// etcd's default `--initial-cluster-token`.
pub const DEFAULT_CLUSTER_TOKEN: &str = "etcd-cluster";

/// The token etcd hashed a bootstrap member's ID with, and whether it was
/// configured or etcd's default.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FormationToken {
    /// The bytes etcd hashes: the token, or the discovery URL or token.
    pub value: String,
    /// Set through a flag or env var (not etcd's default).
    pub given: bool,
    /// The cluster bootstraps through discovery: its founders come from the
    /// discovery service, not from --initial-cluster.
    pub discovery: bool,
}

impl IdentityArgs {
    /// The token etcd's `PeerURLsMapAndToken` picks (3.4–3.7): the v2
    /// discovery URL, else with v3 discovery endpoints the discovery token, else
    /// `--initial-cluster-token` or its default. Empty values count as unset,
    /// as etcd's flag parsing takes them; other values are used byte for byte.
    /// What etcd itself refuses to start with is a usage error: discovery beside
    /// an explicit `--initial-cluster` (`ErrConflictBootstrapFlags`), and v3
    /// discovery endpoints without a discovery token.
    pub fn formation_token(&self) -> Result<FormationToken, String> {
        let set = |v: &Option<String>| v.as_deref().filter(|s| !s.is_empty()).map(str::to_owned);
        let discovery = set(&self.discovery);
        let endpoints = set(&self.discovery_endpoints);
        if (discovery.is_some() || endpoints.is_some()) && set(&self.initial_cluster).is_some() {
            return Err("ETCD_DISCOVERY or ETCD_DISCOVERY_ENDPOINTS beside ETCD_INITIAL_CLUSTER: etcd refuses to bootstrap with both (conflicting bootstrap flags); give the agent the same bootstrap settings as etcd".into());
        }
        if let Some(url) = discovery {
            return Ok(FormationToken {
                value: url,
                given: true,
                discovery: true,
            });
        }
        if endpoints.is_some() {
            let value = set(&self.discovery_token).ok_or(
                "ETCD_DISCOVERY_ENDPOINTS without ETCD_DISCOVERY_TOKEN: v3 discovery needs the token etcd hashed the founders with",
            )?;
            return Ok(FormationToken {
                value,
                given: true,
                discovery: true,
            });
        }
        Ok(match set(&self.initial_cluster_token) {
            Some(value) => FormationToken {
                value,
                given: true,
                discovery: false,
            },
            None => FormationToken {
                value: DEFAULT_CLUSTER_TOKEN.to_owned(),
                given: false,
                discovery: false,
            },
        })
    }
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
    /// This Pod's UID (downward API `metadata.uid`): compared with the
    /// EtcdMember's `status.podUID` to tell whether an earlier Pod of this member ran.
    #[arg(long, env = "POD_UID")]
    pub pod_uid: Option<String>,
    /// A kubeconfig to use instead of the in-cluster config.
    #[arg(long, env = "KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
}

/// The evidence every command that must know the cluster's phase gathers
/// (`preflight`, and `restore` for its "cluster already formed" gate).
#[derive(Debug, Clone, Args)]
pub struct EvidenceArgs {
    /// Who this member is.
    #[command(flatten)]
    pub identity: IdentityArgs,
    /// How to reach the live cluster.
    #[command(flatten)]
    pub etcd: EtcdConnArgs,
    /// How to reach the Kubernetes API.
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
    /// The time budget for gathering evidence and deciding (5, 5s, 500ms, 1m).
    #[arg(long, env = "AGENT_TIMEOUT", default_value = "30s", value_parser = crate::duration::parse)]
    pub timeout: Duration,
}

/// `preflight`.
#[derive(Debug, Args)]
pub struct PreflightArgs {
    /// Where the data lives.
    #[command(flatten)]
    pub dirs: DataDirArgs,
    /// How the result is printed.
    #[command(flatten)]
    pub output: OutputArgs,
    /// Shared flags: EvidenceArgs.
    #[command(flatten)]
    pub evidence: EvidenceArgs,
    /// Where to write the verdict for the sidecar [default: /run/etcd-agent/preflight.json when that directory exists].
    #[arg(long, env = "AGENT_VERDICT_FILE")]
    pub verdict_file: Option<PathBuf>,
    /// A witness file `serve --witness-file` keeps (the position this member's
    /// disk was proven to hold), read as a witness: without Kubernetes, put it
    /// on a volume other than the data's, or a lost or rolled-back volume takes
    /// its witness with it [default: `witness.json` beside the verdict file,
    /// where serve keeps it, when that file exists].
    #[arg(long, env = "AGENT_WITNESS_FILE")]
    pub witness_file: Option<PathBuf>,
    /// The etcd version about to start (3.6.11, v3.7.3): preflight runs the
    /// upgrade check for it and refuses what that etcd would refuse or panic on
    /// (`refuse-version`, 16). With `--kube`, the tag of this Pod's `etcd`
    /// container image is checked first (not beside a digest); when the two
    /// name different lines, only what blocks for both refuses. Without either,
    /// `/usr/local/bin/etcd --version` (the etcd image's binary) is asked;
    /// without any, no upgrade check runs.
    #[arg(long, env = "ETCD_VERSION", value_parser = parse_etcd_version)]
    pub etcd_version: Option<crate::disk::upgrade::Target>,
    /// The flags of that etcd the upgrade check depends on.
    #[command(flatten)]
    pub etcd_flags: EtcdFlagArgs,
    /// Where to write the short JSON termination message [default: /dev/termination-log when writable].
    #[arg(long, env = "TERMINATION_LOG")]
    pub termination_log: Option<PathBuf>,
    /// While the WAL is verified, ask the kernel to read ahead the backend and
    /// the newest `.snap`, which etcd reads next on its start: a member back on
    /// a cold page cache is healthy sooner (docs/performance.md). Advice only;
    /// the verdict is the same either way.
    #[arg(long, env = "AGENT_READ_AHEAD", action = clap::ArgAction::Set,
          num_args = 0..=1, default_value_t = true, default_missing_value = "true")]
    pub read_ahead: bool,
}

/// `wipe` and `verify-wipe` (docs/commands.md § wipe).
#[derive(Debug, Args)]
pub struct WipeArgs {
    /// Where the data lives.
    #[command(flatten)]
    pub dirs: DataDirArgs,
    /// How the result is printed.
    #[command(flatten)]
    pub output: OutputArgs,
    /// Tolerate a top-level `lost+found` directory (a filesystem's root): verify-wipe lists it and its contents as allowed, wipe keeps it [default: it counts as remaining, and wipe removes it].
    #[arg(long, env = "AGENT_ALLOW_LOST_FOUND")]
    pub allow_lost_found: bool,
}

/// `install` (docs/commands.md § install).
#[derive(Debug, Args)]
pub struct InstallArgs {
    /// Directory to copy this binary into, as `<dest>/etcd-member-agent` (required; it must exist and be writable).
    #[arg(long, env = "TOOLS_DEST_DIR")]
    pub dest: Option<PathBuf>,
    /// How the result is printed.
    #[command(flatten)]
    pub output: OutputArgs,
    /// How long the copy may take to answer `--version` (5, 5s, 500ms, 1m).
    #[arg(long, env = "AGENT_INSTALL_CHECK_TIMEOUT", default_value = "10s", value_parser = crate::duration::parse)]
    pub check_timeout: Duration,
}

/// `pod-check` (docs/commands.md § pod-check).
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
    /// How the result is printed.
    #[command(flatten)]
    pub output: OutputArgs,
    /// The whole check's time budget, every API call included (5, 5s, 500ms, 1m).
    #[arg(long, env = "AGENT_TIMEOUT", default_value = "10s", value_parser = crate::duration::parse)]
    pub timeout: Duration,
}

/// `serve` (docs/commands.md § serve). The sidecar ignores `--peer-endpoints`, `--user` and
/// `--password`: it asks only the local member, and Status and MemberList need no auth.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Where the data lives.
    #[command(flatten)]
    pub dirs: DataDirArgs,
    /// This member's name (etcd --name); also the Pod and EtcdMember name when --pod-name is not given.
    #[arg(long, env = "ETCD_MEMBER_NAME")]
    pub name: Option<String>,
    /// The local member's client URL (serve watches this one member; only the first of a list is used).
    #[arg(long, env = "ETCD_ENDPOINTS", default_value = "http://127.0.0.1:2379")]
    pub endpoints: String,
    /// How to reach the live cluster.
    #[command(flatten)]
    pub etcd: EtcdConnArgs,
    /// How to reach the Kubernetes API.
    #[command(flatten)]
    pub kube: KubeArgs,
    /// gRPC listen address (MemberAgent, health, reflection).
    #[arg(long, env = "AGENT_GRPC_LISTEN", default_value = "0.0.0.0:9465")]
    pub grpc_listen: std::net::SocketAddr,
    /// HTTP listen address (/livez, /readyz, /metrics; plaintext).
    #[arg(long, env = "AGENT_HTTP_LISTEN", default_value = "0.0.0.0:9466")]
    pub http_listen: std::net::SocketAddr,
    /// PEM certificate of the gRPC server (TLS; plaintext without it).
    #[arg(long, env = "AGENT_TLS_CERT_PATH")]
    pub tls_cert: Option<PathBuf>,
    /// PEM key of the gRPC server certificate.
    #[arg(long, env = "AGENT_TLS_KEY_PATH")]
    pub tls_key: Option<PathBuf>,
    /// PEM CA bundle: require gRPC clients to present a certificate it signed (mTLS).
    #[arg(long, env = "AGENT_TLS_CLIENT_CA_PATH")]
    pub tls_client_ca: Option<PathBuf>,
    /// This Pod start's preflight verdict (JSON), for the expected identity.
    #[arg(
        long,
        env = "AGENT_VERDICT_FILE",
        default_value = "/run/etcd-agent/preflight.json"
    )]
    pub verdict_file: PathBuf,
    /// The witness file: the highest raft position this member's disk was proven
    /// to hold while consistent (and whether it was later seen below it); /readyz
    /// needs the index at or beyond it, and `preflight --witness-file` reads it as
    /// a witness. Default: `witness.json` beside --verdict-file (the Pod's
    /// emptyDir, which outlives container restarts); without Kubernetes, put it
    /// on a volume other than the data's.
    #[arg(long, env = "AGENT_WITNESS_FILE")]
    pub witness_file: Option<PathBuf>,
    /// etcd --initial-cluster-token: its SHA-256 goes into the witnesses, so that
    /// a witness of another incarnation of a cluster of the same names is told
    /// apart. This Pod start's verdict names it when preflight ran; this is the
    /// fallback [default: unknown].
    #[arg(long, env = "ETCD_INITIAL_CLUSTER_TOKEN")]
    pub initial_cluster_token: Option<String>,
    /// How often the local member is polled (Status and serializable MemberList).
    #[arg(long, env = "AGENT_POLL_INTERVAL", default_value = "2s", value_parser = crate::duration::parse)]
    pub poll_interval: Duration,
    /// Bound on one poll of the local member, connect included.
    #[arg(long, env = "AGENT_POLL_TIMEOUT", default_value = "1s", value_parser = crate::duration::parse)]
    pub poll_timeout: Duration,
    /// How often the operator's EtcdMember/EtcdCluster records are re-read (with --kube).
    #[arg(long, env = "AGENT_KUBE_INTERVAL", default_value = "30s", value_parser = crate::duration::parse)]
    pub kube_interval: Duration,
    /// Bound on one Kubernetes read (records or pod-check).
    #[arg(long, env = "AGENT_KUBE_TIMEOUT", default_value = "5s", value_parser = crate::duration::parse)]
    pub kube_timeout: Duration,
    /// How often the pod-check looks for latent hazards (with --kube).
    #[arg(long, env = "AGENT_HAZARD_INTERVAL", default_value = "60s", value_parser = crate::duration::parse)]
    pub hazard_interval: Duration,
    /// How often the witness Lease (etcd-witness-<member>) is renewed (with --kube); its leaseDurationSeconds is three periods.
    #[arg(long, env = "AGENT_WITNESS_INTERVAL", default_value = "10s", value_parser = crate::duration::parse)]
    pub witness_interval: Duration,
    /// At most this many WatchIdentity streams at once; more get RESOURCE_EXHAUSTED.
    #[arg(long, env = "AGENT_MAX_WATCHERS", default_value_t = 64)]
    pub max_watchers: usize,
    /// Push mode: the operator's IdentityCollector URL (http:// or https://).
    #[arg(long, env = "AGENT_REPORT_TO")]
    pub report_to: Option<String>,
    /// Heartbeat period of push mode when nothing changes.
    #[arg(long, env = "AGENT_REPORT_INTERVAL", default_value = "30s", value_parser = crate::duration::parse)]
    pub report_interval: Duration,
    /// Bound on each Report call, connect included.
    #[arg(long, env = "AGENT_REPORT_TIMEOUT", default_value = "5s", value_parser = crate::duration::parse)]
    pub report_timeout: Duration,
    /// PEM CA that signed the collector's certificate (required for https://).
    #[arg(long, env = "AGENT_REPORT_CA_PATH")]
    pub report_ca: Option<PathBuf>,
    /// PEM client certificate for mTLS to the collector.
    #[arg(long, env = "AGENT_REPORT_CERT_PATH")]
    pub report_cert: Option<PathBuf>,
    /// PEM key of the client certificate.
    #[arg(long, env = "AGENT_REPORT_KEY_PATH")]
    pub report_key: Option<PathBuf>,
    /// How long SIGTERM/SIGINT waits for both servers to drain.
    #[arg(long, env = "AGENT_SHUTDOWN_GRACE", default_value = "10s", value_parser = crate::duration::parse)]
    pub shutdown_grace: Duration,
    /// Once this Pod start's verdict is `start`, ask the kernel to read ahead
    /// the backend and the newest `.snap` while etcd starts, and tell
    /// preflight so (`read-ahead.json` beside --verdict-file), which then
    /// leaves them to this container: a member back on a cold page cache is
    /// healthy sooner (docs/performance.md). Page cache is charged to this
    /// container's memory limit: skipped when it cannot hold the db. Advice
    /// only; it decides nothing.
    #[arg(long, env = "AGENT_READ_AHEAD", action = clap::ArgAction::Set,
          num_args = 0..=1, default_value_t = true, default_missing_value = "true")]
    pub read_ahead: bool,
    /// Connections each server (gRPC, HTTP) holds at once; when full, one never
    /// answered (silent or half-sent) is closed to admit a new one. 0 (default):
    /// (RLIMIT_NOFILE - 64) / 2, and never more than that.
    #[arg(long, env = "AGENT_MAX_CONNECTIONS", default_value_t = 0)]
    pub max_connections: usize,
    /// A request must be read and answered within this (a slow or silent client is
    /// closed after it).
    #[arg(long, env = "AGENT_HEADER_READ_TIMEOUT", default_value = "10s", value_parser = crate::duration::parse)]
    pub header_read_timeout: Duration,
    /// A connection that moves no byte for this long is closed (keep it above the
    /// 30 s gRPC keepalive).
    #[arg(long, env = "AGENT_IDLE_TIMEOUT", default_value = "120s", value_parser = crate::duration::parse)]
    pub idle_timeout: Duration,
}

/// How `fleet` prints its view.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum FleetFormat {
    /// A table for people on stdout: clusters, then members, worst first, then
    /// a one-line summary.
    #[default]
    Table,
    /// One JSON document on stdout (with --watch, one per line per change).
    Json,
    /// One YAML document on stdout (with --watch, `---` between changes).
    Yaml,
}

/// When the table is coloured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum ColorChoice {
    /// When stdout is a terminal and NO_COLOR is not set.
    #[default]
    Auto,
    /// Always.
    Always,
    /// Never.
    Never,
}

/// The default Pod selector of `fleet`: the label the operator puts on every
/// member Pod (its value is the cluster's name).
pub const FLEET_DEFAULT_SELECTOR: &str = "etcd-operator.cozystack.io/cluster";

/// `fleet` (docs/fleet.md).
#[derive(Debug, Args)]
pub struct FleetArgs {
    /// Every namespace (the default without --namespace): one cluster-wide
    /// list and watch per resource.
    #[arg(
        short = 'A',
        long,
        env = "AGENT_FLEET_ALL_NAMESPACES",
        conflicts_with = "namespace"
    )]
    pub all_namespaces: bool,
    /// Only these namespaces (comma separated or repeated); each is read on
    /// its own, and one that cannot be read is reported as such.
    #[arg(
        short = 'n',
        long,
        env = "AGENT_FLEET_NAMESPACES",
        value_delimiter = ','
    )]
    pub namespace: Vec<String>,
    /// The member Pods: a label selector, applied by the API server
    /// [default: etcd-operator.cozystack.io/cluster, every operator member
    /// Pod]. Given, it also keeps out the operator's records of clusters none
    /// of whose Pods it selects.
    #[arg(short = 'l', long, env = "AGENT_FLEET_SELECTOR")]
    pub selector: Option<String>,
    /// The Pod label whose value names the member's cluster, when no
    /// EtcdMember does.
    #[arg(long, env = "AGENT_FLEET_CLUSTER_LABEL", default_value = FLEET_DEFAULT_SELECTOR)]
    pub cluster_label: String,
    /// A kubeconfig (or a list, as $KUBECONFIG spells it) [default: in-cluster,
    /// else $KUBECONFIG or ~/.kube/config].
    #[arg(long, env = "KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context to use [default: the current one].
    #[arg(long, env = "AGENT_FLEET_CONTEXT")]
    pub context: Option<String>,
    /// Output: table, json or yaml.
    #[arg(short = 'o', long = "output", env = "AGENT_FLEET_OUTPUT", value_enum, default_value_t = FleetFormat::Table)]
    pub format: FleetFormat,
    /// Keep watching (API watches, not polling) and print the view again on
    /// every change; on a terminal the table is redrawn in place.
    #[arg(short = 'w', long, env = "AGENT_FLEET_WATCH")]
    pub watch: bool,
    /// Serve the cluster-level conditions as Prometheus metrics on --listen
    /// (/metrics, /readyz, /livez), watching the API; prints nothing.
    #[arg(long, env = "AGENT_FLEET_SERVE", conflicts_with = "watch")]
    pub serve: bool,
    /// Where --serve listens.
    #[arg(long, env = "AGENT_FLEET_LISTEN", default_value = "0.0.0.0:9467")]
    pub listen: std::net::SocketAddr,
    /// Only the clusters with a condition (and their members) in the table.
    #[arg(long, env = "AGENT_FLEET_ONLY_PROBLEMS")]
    pub only_problems: bool,
    /// Colour the table.
    #[arg(long, env = "AGENT_FLEET_COLOR", value_enum, default_value_t = ColorChoice::Auto)]
    pub color: ColorChoice,
    /// The budget of the first full view: every list, every page (5, 5s, 500ms, 1m).
    #[arg(long, env = "AGENT_TIMEOUT", default_value = "30s", value_parser = crate::duration::parse)]
    pub timeout: Duration,
    /// Bound on each API request (connect, and each silence while reading).
    #[arg(long, env = "AGENT_KUBE_TIMEOUT", default_value = "10s", value_parser = crate::duration::parse)]
    pub request_timeout: Duration,
    /// Objects per list page (`limit`): memory is bounded by one page per
    /// resource being listed.
    #[arg(long, env = "AGENT_FLEET_CHUNK_SIZE", default_value_t = 500, value_parser = clap::value_parser!(u32).range(1..))]
    pub chunk_size: u32,
    /// Raft entries a member's witness may trail the highest of its cluster
    /// before `raft-lag` (witnesses are renewed every 10 s, so keep it above
    /// what a cluster writes in that time).
    #[arg(long, env = "AGENT_FLEET_LAG_THRESHOLD", default_value_t = 10_000)]
    pub lag_threshold: u64,
    /// How long a member may be not Ready (or without a Pod) before
    /// `members-not-ready`: rolling restarts stay quiet.
    #[arg(long, env = "AGENT_FLEET_NOT_READY_AFTER", default_value = "2m", value_parser = crate::duration::parse)]
    pub not_ready_after: Duration,
}

/// Where `restore` takes the snapshot from, as the operator names it
/// (`SNAPSHOT_DEST_KIND`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum SnapshotSourceKind {
    /// An S3-compatible object store (`S3_*`, `AWS_*`).
    S3,
    /// A file on a mounted volume (`PVC_MOUNT_PATH`/`PVC_SUBPATH`).
    Pvc,
}

/// `restore --bump-revision`: a number, or `auto`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BumpRevision {
    /// Raise the restored revision by this much (0: no bump).
    By(u64),
    /// Above what this member's witness recorded.
    Auto,
}

fn parse_bump(s: &str) -> Result<BumpRevision, String> {
    match s.trim() {
        "auto" => Ok(BumpRevision::Auto),
        "" => Ok(BumpRevision::By(0)),
        n => n
            .parse::<u64>()
            .map(BumpRevision::By)
            .map_err(|e| format!("{n:?}: a number of revisions, or auto: {e}")),
    }
}

/// A boolean as operators write it in env (`true`, `false`, `1`, `0`, `yes`, `no`,
/// `on`, `off`); empty means `false`.
fn parse_flag_env(s: &str) -> Result<bool, String> {
    match s.trim().to_ascii_lowercase().as_str() {
        "" | "false" | "0" | "no" | "off" => Ok(false),
        "true" | "1" | "yes" | "on" => Ok(true),
        other => Err(format!("{other:?} is not a boolean (true or false)")),
    }
}

/// `NAME=VALUE` with a non-empty name of letters, digits, `_`, `-` and `.`
/// (what Kubernetes takes as an env var's name).
fn parse_name_value(s: &str) -> Result<(String, String), String> {
    let (name, value) = s
        .split_once('=')
        .ok_or_else(|| format!("{s:?} is not NAME=VALUE"))?;
    let valid = !name.is_empty()
        && !name.starts_with(|c: char| c.is_ascii_digit())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_-.".contains(c));
    if !valid {
        return Err(format!("{name:?} is not an env var name"));
    }
    Ok((name.to_owned(), value.to_owned()))
}

/// `restore` (docs/commands.md § restore). The source is `--from-file`, `--from-s3`, or what
/// `SNAPSHOT_DEST_KIND` names; the gate uses the same evidence as `preflight`.
#[derive(Debug, Args)]
pub struct RestoreArgs {
    /// Where the data lives.
    #[command(flatten)]
    pub dirs: DataDirArgs,
    /// How the result is printed.
    #[command(flatten)]
    pub output: OutputArgs,
    /// Shared flags: EvidenceArgs.
    #[command(flatten)]
    pub evidence: EvidenceArgs,
    /// Restore from this snapshot file (`etcdctl snapshot save` output, or a raw `db` with --skip-hash-check).
    #[arg(long, env = "AGENT_RESTORE_FROM_FILE", conflicts_with = "from_s3")]
    pub from_file: Option<PathBuf>,
    /// Restore from the S3 object named by S3_ENDPOINT, S3_BUCKET and S3_KEY.
    #[arg(long, env = "AGENT_RESTORE_FROM_S3")]
    pub from_s3: bool,
    /// The source kind the operator configured, used when neither --from-file nor --from-s3 is given: s3 or pvc (pvc reads <PVC_MOUNT_PATH>/<PVC_SUBPATH>).
    #[arg(long, env = "SNAPSHOT_DEST_KIND", value_enum, ignore_case = true)]
    pub source_kind: Option<SnapshotSourceKind>,
    /// Where the snapshot volume is mounted (pvc source).
    #[arg(long, env = "PVC_MOUNT_PATH")]
    pub pvc_mount_path: Option<PathBuf>,
    /// The snapshot file's path inside the volume, relative (pvc source).
    #[arg(long, env = "PVC_SUBPATH")]
    pub pvc_subpath: Option<String>,
    /// S3 endpoint URL for S3-compatible stores [default: AWS for --s3-region].
    #[arg(long, env = "S3_ENDPOINT")]
    pub s3_endpoint: Option<String>,
    /// S3 bucket.
    #[arg(long, env = "S3_BUCKET")]
    pub s3_bucket: Option<String>,
    /// S3 object key of the snapshot.
    #[arg(long, env = "S3_KEY")]
    pub s3_key: Option<String>,
    /// S3 region (signing scope).
    #[arg(long, env = "S3_REGION", default_value = "us-east-1")]
    pub s3_region: String,
    /// Path-style requests (<endpoint>/<bucket>/<key>) instead of virtual-hosted (<bucket>.<host>/<key>); always on for an IP-address or localhost endpoint.
    #[arg(long, env = "S3_FORCE_PATH_STYLE", num_args = 0..=1, default_missing_value = "true", value_parser = parse_flag_env)]
    pub s3_force_path_style: Option<bool>,
    /// S3 access key ID [default: unsigned requests when no key is given].
    #[arg(long, env = "AWS_ACCESS_KEY_ID")]
    pub s3_access_key_id: Option<String>,
    /// S3 secret access key.
    #[arg(long, env = "AWS_SECRET_ACCESS_KEY", hide_env_values = true)]
    pub s3_secret_access_key: Option<String>,
    /// S3 session token, for temporary credentials.
    #[arg(long, env = "AWS_SESSION_TOKEN", hide_env_values = true)]
    pub s3_session_token: Option<String>,
    /// PEM CA bundle trusted for an https S3 endpoint, in addition to the system's (a private MinIO CA).
    #[arg(long, env = "AWS_CA_BUNDLE")]
    pub s3_ca_bundle: Option<PathBuf>,
    /// Accept a snapshot without the SHA-256 trailer (a raw `db` copy); a trailer, when present, is still verified.
    #[arg(long, env = "AGENT_SKIP_HASH_CHECK")]
    pub skip_hash_check: bool,
    /// Raise the restored revision by N (etcdutl `snapshot restore --bump-revision`, etcd 3.6+ and late 3.5 patches), for clients that cache revisions such as kube-apiserver's watch cache; needs --mark-compacted. `auto`: above the highest revision any member's witness recorded (this member's Lease or --witness-file and, in a cluster of several, every member's Lease named from --initial-cluster; of any incarnation), plus 1,000,000 for writes after the last renewal, or no bump without a witness; --mark-compacted is then implied. Every member must get the same N: restore all of them with auto before any starts, or pass the N the first reported [default: 0, no bump].
    #[arg(long, env = "AGENT_BUMP_REVISION", default_value = "0", value_parser = parse_bump)]
    pub bump_revision: BumpRevision,
    /// Mark the bumped revision compacted (etcdutl `--mark-compacted`) so watchers from before the restore relist; required with --bump-revision, refused without it.
    #[arg(long, env = "AGENT_MARK_COMPACTED")]
    pub mark_compacted: bool,
    /// The restore tool: a path to etcdutl or etcdctl, or a directory holding them [default: /usr/local/bin, then PATH].
    #[arg(long, env = "ETCDUTL_PATH")]
    pub etcdutl_path: Option<PathBuf>,
    /// Bound on fetching the snapshot (HEAD/stat, download or copy, fsync) (5, 5s, 500ms, 1m).
    #[arg(long, env = "AGENT_DOWNLOAD_TIMEOUT", default_value = "10m", value_parser = crate::duration::parse)]
    pub download_timeout: Duration,
    /// Bound on connecting to the S3 endpoint.
    #[arg(long, env = "AGENT_CONNECT_TIMEOUT", default_value = "10s", value_parser = crate::duration::parse)]
    pub connect_timeout: Duration,
    /// Bound on a silence of the S3 endpoint: no byte for this long fails the download.
    #[arg(long, env = "AGENT_READ_TIMEOUT", default_value = "30s", value_parser = crate::duration::parse)]
    pub read_timeout: Duration,
    /// Bound on the restore tool's run.
    #[arg(long, env = "AGENT_TOOL_TIMEOUT", default_value = "10m", value_parser = crate::duration::parse)]
    pub tool_timeout: Duration,
    /// Where to write the short JSON termination message [default: /dev/termination-log when writable].
    #[arg(long, env = "TERMINATION_LOG")]
    pub termination_log: Option<PathBuf>,
}

/// `inject` (docs/commands.md § inject).
#[derive(Debug, Args)]
pub struct InjectArgs {
    /// Manifests to guard: YAML or JSON files, any number of documents, Lists
    /// (`-` or none: stdin). Written to stdout.
    #[arg(value_name = "FILE")]
    pub files: Vec<PathBuf>,
    /// The agent's image, as your registry serves it (required).
    #[arg(long, env = "AGENT_INJECT_IMAGE")]
    pub image: Option<String>,
    /// `imagePullPolicy` of the agent's containers [default: the cluster's].
    #[arg(long, env = "AGENT_INJECT_IMAGE_PULL_POLICY", value_parser = ["Always", "IfNotPresent", "Never"])]
    pub image_pull_policy: Option<String>,
    /// Whether the agent reads the Kubernetes API (a projected token in its
    /// containers); `false` for static Pods. A Pod's annotation
    /// `etcd-member-agent.cozystack.io/kube-api` overrides it.
    #[arg(long, env = "AGENT_INJECT_KUBE_API", default_value_t = true, action = clap::ArgAction::Set, value_parser = parse_flag_env)]
    pub kube_api: bool,
    /// Env set in both agent containers, after and over what is derived
    /// (`NAME=VALUE`, repeatable; comma-separated in the env var): what no Pod
    /// says, such as push mode's `AGENT_REPORT_TO`.
    #[arg(long = "agent-env", value_name = "NAME=VALUE", env = "AGENT_INJECT_AGENT_ENV", value_delimiter = ',', value_parser = parse_name_value)]
    pub agent_env: Vec<(String, String)>,
    /// Print a unified diff of what would change instead of the manifests.
    #[arg(long, env = "AGENT_INJECT_DRY_RUN")]
    pub dry_run: bool,
    /// Reading each input (a file, or stdin to its end) must take less than this.
    #[arg(long, env = "AGENT_INJECT_READ_TIMEOUT", default_value = "60s", value_parser = crate::duration::parse)]
    pub read_timeout: Duration,
}

/// `webhook` (docs/commands.md § webhook).
#[derive(Debug, Args)]
pub struct WebhookArgs {
    /// HTTPS listen address (`/mutate`, `/healthz`, `/metrics`).
    #[arg(long, env = "AGENT_WEBHOOK_LISTEN", default_value = "0.0.0.0:9443")]
    pub listen: std::net::SocketAddr,
    /// PEM serving certificate (chain), re-read when it changes (required).
    #[arg(long, env = "AGENT_WEBHOOK_TLS_CERT_PATH")]
    pub tls_cert: Option<PathBuf>,
    /// PEM key of the serving certificate (required).
    #[arg(long, env = "AGENT_WEBHOOK_TLS_KEY_PATH")]
    pub tls_key: Option<PathBuf>,
    /// How often the certificate files are re-read for a rotation.
    #[arg(long, env = "AGENT_WEBHOOK_CERT_RELOAD_INTERVAL", default_value = "10s", value_parser = crate::duration::parse)]
    pub cert_reload_interval: Duration,
    /// The agent's image, as your registry serves it (required).
    #[arg(long, env = "AGENT_INJECT_IMAGE")]
    pub image: Option<String>,
    /// `imagePullPolicy` of the agent's containers [default: the cluster's].
    #[arg(long, env = "AGENT_INJECT_IMAGE_PULL_POLICY", value_parser = ["Always", "IfNotPresent", "Never"])]
    pub image_pull_policy: Option<String>,
    /// Whether the injected agent reads the Kubernetes API (a Pod's annotation
    /// `etcd-member-agent.cozystack.io/kube-api` overrides it).
    #[arg(long, env = "AGENT_INJECT_KUBE_API", default_value_t = true, action = clap::ArgAction::Set, value_parser = parse_flag_env)]
    pub kube_api: bool,
    /// Env set in both agent containers, after and over what is derived
    /// (`NAME=VALUE`, repeatable; comma-separated in the env var): what no Pod
    /// says, such as push mode's `AGENT_REPORT_TO`.
    #[arg(long = "agent-env", value_name = "NAME=VALUE", env = "AGENT_INJECT_AGENT_ENV", value_delimiter = ',', value_parser = parse_name_value)]
    pub agent_env: Vec<(String, String)>,
    /// Write an Event about each etcd Pod admitted unguarded [default: on when
    /// a service-account token is mounted or KUBECONFIG is set].
    #[arg(long, env = "AGENT_WEBHOOK_EVENTS", num_args = 0..=1, default_missing_value = "true", value_parser = parse_flag_env)]
    pub events: Option<bool>,
    /// A kubeconfig for the Events instead of the in-cluster service account.
    #[arg(long, env = "KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
    /// The largest AdmissionReview read; larger requests get 413.
    #[arg(long, env = "AGENT_WEBHOOK_MAX_REQUEST_BYTES", default_value_t = 4 * 1024 * 1024)]
    pub max_request_bytes: usize,
    /// A request's body must be read within this (the API server's own
    /// `timeoutSeconds` bounds the whole call).
    #[arg(long, env = "AGENT_WEBHOOK_REQUEST_TIMEOUT", default_value = "5s", value_parser = crate::duration::parse)]
    pub request_timeout: Duration,
    /// Connections held at once; when full, one never answered is closed to
    /// admit a new one. 0 (default): below the descriptor limit.
    #[arg(long, env = "AGENT_MAX_CONNECTIONS", default_value_t = 0)]
    pub max_connections: usize,
    /// The TLS handshake and a request's head must arrive within this.
    #[arg(long, env = "AGENT_HEADER_READ_TIMEOUT", default_value = "10s", value_parser = crate::duration::parse)]
    pub header_read_timeout: Duration,
    /// A connection that moves no byte for this long is closed.
    #[arg(long, env = "AGENT_IDLE_TIMEOUT", default_value = "120s", value_parser = crate::duration::parse)]
    pub idle_timeout: Duration,
    /// How long SIGTERM/SIGINT waits for requests being answered.
    #[arg(long, env = "AGENT_SHUTDOWN_GRACE", default_value = "10s", value_parser = crate::duration::parse)]
    pub shutdown_grace: Duration,
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_is_well_formed() {
        Cli::command().debug_assert();
    }

    #[test]
    fn agent_env_takes_name_value_pairs_from_flags_and_env() {
        let cli = Cli::try_parse_from([
            "etcd-member-agent",
            "inject",
            "--image=x",
            "--agent-env=AGENT_REPORT_TO=https://c:9465/?a=b",
            "--agent-env=EMPTY=",
        ])
        .unwrap();
        let Command::Inject(args) = cli.command else {
            panic!("not inject")
        };
        assert_eq!(
            args.agent_env,
            [
                (
                    "AGENT_REPORT_TO".to_owned(),
                    "https://c:9465/?a=b".to_owned()
                ),
                ("EMPTY".to_owned(), String::new()),
            ]
        );
        for bad in ["NOEQUALS", "=v", "1A=v", "A B=v"] {
            assert!(parse_name_value(bad).is_err(), "{bad}");
        }
    }
}
