//! The sidecar's configuration as plain values, built and validated from the
//! command line by [`super::start`] (no I/O here): the server reads files (TLS,
//! verdict, WAL) only when it starts, so that every error names the flag's file.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use crate::evidence::kube::KubeTarget;

/// Everything `serve` needs.
#[derive(Debug, Clone)]
pub struct Config {
    /// Where the gRPC server listens.
    pub grpc_listen: SocketAddr,
    /// Where the HTTP server (probes, metrics) listens.
    pub http_listen: SocketAddr,
    /// TLS for the gRPC server; plaintext when `None`.
    pub grpc_tls: Option<ServerTls>,
    /// How to reach the local member.
    pub etcd: LocalEtcd,
    /// `--data-dir`, read once at boot for the WAL identity.
    pub data_dir: PathBuf,
    /// `--wal-dir`, when separate.
    pub wal_dir: Option<PathBuf>,
    /// Where preflight wrote its verdict.
    pub verdict_file: PathBuf,
    /// This Pod's UID (`POD_UID`): a verdict file written for another Pod is
    /// not this Pod start's.
    pub pod_uid: Option<String>,
    /// The witness file: the raft high-water mark that outlives restarts.
    pub witness_file: PathBuf,
    /// The incarnation the witnesses record when this Pod start's verdict names
    /// none (from `--initial-cluster-token`).
    pub incarnation: crate::evidence::mark::Incarnation,
    /// How often the local member is polled.
    pub poll_interval: Duration,
    /// How long one poll may take (connect, Status, MemberList).
    pub poll_timeout: Duration,
    /// The operator's records; `None` when `--kube` is off.
    pub kube: Option<KubeConfig>,
    /// At most this many WatchIdentity streams at once.
    pub max_watchers: usize,
    /// Push mode; `None` without `--report-to`.
    pub report: Option<ReportConfig>,
    /// How long shutdown waits for both servers to drain.
    pub shutdown_grace: Duration,
    /// Read the backend ahead for etcd once this Pod start's verdict is
    /// `start` (`--read-ahead`).
    pub read_ahead: bool,
    /// What one client may hold on either server.
    pub limits: super::conn::Limits,
}

/// The local member's client endpoint and the TLS files to reach it.
#[derive(Debug, Clone)]
pub struct LocalEtcd {
    /// The local member's client URL.
    pub endpoint: String,
    /// CA that signed etcd's server certificate.
    pub ca: Option<PathBuf>,
    /// Client certificate.
    pub cert: Option<PathBuf>,
    /// Client key.
    pub key: Option<PathBuf>,
}

/// The operator's records in the Kubernetes API.
#[derive(Debug, Clone)]
pub struct KubeConfig {
    /// Which records.
    pub target: KubeTarget,
    /// How often they are re-read.
    pub interval: Duration,
    /// How long one read may take.
    pub timeout: Duration,
    /// How often the pod-check runs.
    pub hazard_interval: Duration,
    /// How often the witness Lease is renewed.
    pub witness_interval: Duration,
}

/// Server-side TLS: a certificate and key, and for mTLS the CA that client
/// certificates must chain to.
#[derive(Debug, Clone)]
pub struct ServerTls {
    /// PEM certificate chain.
    pub cert: PathBuf,
    /// PEM private key.
    pub key: PathBuf,
    /// PEM CA bundle; when set, clients must present a certificate it signed.
    pub client_ca: Option<PathBuf>,
}

/// Push mode: where to report and how.
#[derive(Debug, Clone)]
pub struct ReportConfig {
    /// The collector's URL (`http://` or `https://`).
    pub url: String,
    /// Heartbeat period when nothing changes.
    pub interval: Duration,
    /// Bound on each Report call (connect included).
    pub timeout: Duration,
    /// CA to verify the collector (required for `https://`).
    pub ca: Option<PathBuf>,
    /// Client certificate for mTLS.
    pub cert: Option<PathBuf>,
    /// Client key for mTLS.
    pub key: Option<PathBuf>,
    /// The Pod's name, sent with each report.
    pub pod_name: String,
    /// The Pod's namespace, sent with each report.
    pub namespace: String,
}
