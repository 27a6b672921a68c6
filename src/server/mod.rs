//! The sidecar (`serve`): the member's identity over gRPC, identity-aware
//! readiness and metrics over HTTP, and push reports to the operator.
//!
//! The only long-running, async part of the crate. One task ([`poller`]) writes
//! the identity — the local member's `Status` and member list, judged against the
//! expected identity — to a `watch` channel; everything else only reads it: the
//! gRPC service ([`grpc`]), `/readyz` and `/metrics` ([`http`]), the push client
//! ([`report`]), the gRPC health service. Kubernetes reads ([`operator`]) run in
//! their own task so a slow API server never delays a poll.
//!
//! The protobuf types are generated into the private `proto` module and never
//! leave this module: the crate speaks [`Identity`] and friends, converted at the
//! gRPC boundary.
//!
//! Shutdown (SIGTERM/SIGINT in [`start`]) cancels one token: the poller marks
//! the member not serving, watch streams and the reporter end, both servers stop
//! accepting and drain, bounded by `--shutdown-grace`; connections that are idle
//! or hold a half-sent request are closed at once ([`conn`]).
//!
//! Both listeners go through [`conn`]: a bounded number of connections per server,
//! below the descriptor limit, with header-read and idle timeouts, so idle or slow
//! clients never keep the probes from answering.

pub mod boot;
pub mod config;
pub mod conn;
pub mod grpc;
pub mod http;
pub mod identity;
pub mod lease;
pub mod local;
pub mod metrics;
pub mod operator;
pub mod poller;
mod proto;
pub mod report;
pub mod start;
pub mod tls;
mod warm;
pub mod witness;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

pub use config::Config;
pub use identity::{
    ExpectedIdentity, Hazard, Identity, LocalMember, PreflightVerdict, WalIdentity,
};

use metrics::Metrics;
use poller::{Boot, HazardState, OperatorState, PendingWal, Poller};

/// Why `serve` could not start or stopped abnormally.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// A listen address cannot be bound.
    #[error("cannot listen on {addr} ({flag}): {source}")]
    Bind {
        /// The flag naming the address.
        flag: &'static str,
        /// The address.
        addr: SocketAddr,
        /// The bind error.
        #[source]
        source: std::io::Error,
    },
    /// The gRPC server's TLS files.
    #[error(transparent)]
    Tls(#[from] tls::TlsError),
    /// The TLS files for the local member.
    #[error(transparent)]
    LocalEtcd(#[from] local::LocalEtcdError),
    /// Push mode's configuration.
    #[error(transparent)]
    Report(#[from] report::ReportSetupError),
    /// The gRPC server failed.
    #[error("the gRPC server failed: {0}")]
    Grpc(#[source] tonic::transport::Error),
    /// The HTTP server failed.
    #[error("the HTTP server failed: {0}")]
    Http(#[source] std::io::Error),
    /// Reflection could not be built from the embedded descriptors (a bug).
    #[error("cannot build the reflection service: {0}")]
    Reflection(#[source] tonic_reflection::server::Error),
}

impl ServeError {
    /// A configuration problem (exit 2) rather than a failure at run time.
    pub fn is_configuration(&self) -> bool {
        matches!(
            self,
            ServeError::Bind { .. }
                | ServeError::Tls(_)
                | ServeError::LocalEtcd(_)
                | ServeError::Report(_)
        )
    }
}

/// The addresses actually bound (useful with port 0).
#[derive(Debug, Clone, Copy)]
pub struct Bound {
    /// gRPC.
    pub grpc: SocketAddr,
    /// HTTP.
    pub http: SocketAddr,
}

/// Runs the sidecar until `shutdown` is cancelled, then drains. `on_bound` is
/// called once both listeners are bound.
pub async fn run(
    config: Config,
    shutdown: CancellationToken,
    on_bound: impl FnOnce(Bound),
) -> Result<(), ServeError> {
    let started = SystemTime::now();
    // Everything that can be wrong with the configuration fails here, before a
    // port is taken.
    let grpc_tls = config
        .grpc_tls
        .as_ref()
        .map(tls::server_config)
        .transpose()?;
    let local = local::LocalClient::new(&config.etcd)?;
    let reporter = config
        .report
        .clone()
        .map(report::Reporter::new)
        .transpose()?;

    let grpc_listener = bind("--grpc-listen", config.grpc_listen).await?;
    let http_listener = bind("--http-listen", config.http_listen).await?;
    let bound = Bound {
        grpc: grpc_listener.local_addr().unwrap_or(config.grpc_listen),
        http: http_listener.local_addr().unwrap_or(config.http_listen),
    };
    tracing::info!(grpc = %bound.grpc, http = %bound.http, tls = grpc_tls.is_some(), endpoint = %config.etcd.endpoint, max_connections = config.limits.max_connections, "serving");
    let grpc_listener = conn::Tracker::new("grpc", config.limits)
        .multiplexed()
        .listen(grpc_listener, shutdown.clone());
    let http_listener =
        conn::Tracker::new("http", config.limits).listen(http_listener, shutdown.clone());
    on_bound(bound);

    let metrics = Metrics::default();
    metrics.preflight_exit_code.set(-1);
    let registry = Arc::new(metrics.register());
    let (publish, identity) =
        watch::channel(poller::initial_identity(&config.etcd.endpoint, started));
    let (operator_tx, operator_rx) = watch::channel(OperatorState::default());
    let (hazards_tx, hazards_rx) = watch::channel(HazardState::default());
    let (verdict_tx, verdict_rx) = watch::channel(boot::VerdictState::default());
    let (health, health_service) = tonic_health::server::health_reporter();
    health
        .set_service_status("", tonic_health::ServingStatus::NotServing)
        .await;
    health
        .set_not_serving::<proto::member_agent_server::MemberAgentServer<grpc::AgentService>>()
        .await;

    let mut tasks = tokio::task::JoinSet::new();

    // This Pod start's verdict, watched for: as a native sidecar serve starts
    // before preflight has written it.
    tasks.spawn(boot::watch_verdict(
        config.verdict_file.clone(),
        boot::this_pod_start(config.pod_uid.clone()),
        config.poll_interval.min(Duration::from_secs(1)),
        config.poll_timeout,
        verdict_tx,
        shutdown.clone(),
    ));

    // The backend read ahead for etcd once this Pod start's verdict is
    // `start`, while etcd starts (warm.rs); preflight is told so.
    let handoff = if config.read_ahead {
        let this_start = boot::this_pod_start(config.pod_uid.clone());
        let handoff = warm::announce(config.verdict_file.clone(), this_start).await;
        tasks.spawn(warm::read_ahead_on_start(
            crate::disk::layout::Paths::new(&config.data_dir, config.wal_dir.as_deref()),
            handoff.clone(),
            verdict_rx.clone(),
            started,
            shutdown.clone(),
        ));
        handoff
    } else {
        None
    };

    // The position found on disk at shutdown, from the poller to the witness
    // Lease's last renewal.
    let (final_tx, final_rx) = tokio::sync::oneshot::channel();
    let final_tx = config.kube.is_some().then_some(final_tx);

    // Boot reads, then the poller.
    {
        let boot_conf = config.clone();
        let poller_shutdown = shutdown.clone();
        let metrics = metrics.clone();
        let operator_first_wait = config
            .kube
            .as_ref()
            .map(|k| k.timeout + Duration::from_secs(1));
        tasks.spawn(async move {
            let boot = read_boot(&boot_conf).await;
            let witness = witness::Witness::load(&boot_conf.witness_file);
            let lease = match &boot_conf.kube {
                Some(kube) => lease::boot_witness(kube).await.map(|w| (w, None)),
                None => None,
            };
            Poller {
                lease,
                witness,
                durable: Default::default(),
                wal_dir: crate::disk::layout::Paths::new(
                    &boot_conf.data_dir,
                    boot_conf.wal_dir.as_deref(),
                )
                .wal_dir,
                incarnation: boot_conf.incarnation.clone(),
                final_mark: final_tx,
                local,
                boot,
                interval: boot_conf.poll_interval,
                timeout: boot_conf.poll_timeout,
                operator_first_wait,
                operator: operator_rx,
                hazards: hazards_rx,
                preflight: verdict_rx,
                preflight_first_wait: boot_conf.poll_timeout + Duration::from_millis(500),
                publish,
                health,
                metrics,
            }
            .run(poller_shutdown)
            .await;
        });
    }

    if let Some(kube) = config.kube.clone() {
        tasks.spawn(operator::run(
            kube,
            operator_tx,
            hazards_tx,
            metrics.clone(),
            shutdown.clone(),
        ));
    } else {
        // Keep the senders alive so the poller's receivers stay quiet.
        let shutdown = shutdown.clone();
        tasks.spawn(async move {
            shutdown.cancelled().await;
            drop((operator_tx, hazards_tx));
        });
    }

    if let Some(kube) = config.kube.clone() {
        tasks.spawn(lease::run(
            kube,
            config.pod_uid.clone(),
            identity.clone(),
            metrics.clone(),
            shutdown.clone(),
            final_rx,
        ));
    }

    if let Some(reporter) = reporter {
        tasks.spawn(reporter.run(identity.clone(), metrics.clone(), shutdown.clone()));
    }

    let reflection_v1 = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(proto::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .build_v1()
        .map_err(ServeError::Reflection)?;
    let reflection_v1alpha = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(proto::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .build_v1alpha()
        .map_err(ServeError::Reflection)?;
    let agent = grpc::AgentService::new(
        identity.clone(),
        config.max_watchers,
        metrics.clone(),
        shutdown.clone(),
    );
    let mut builder = tonic::transport::Server::builder()
        .tcp_nodelay(true)
        .http2_keepalive_interval(Some(Duration::from_secs(30)))
        .http2_keepalive_timeout(Some(Duration::from_secs(10)))
        .max_concurrent_streams(Some(
            u32::try_from(config.max_watchers)
                .unwrap_or(u32::MAX)
                .saturating_add(100),
        ))
        .concurrency_limit_per_connection(256)
        .timeout(Duration::from_secs(10));
    if let Some(tls) = grpc_tls {
        builder = builder.tls_config(tls).map_err(ServeError::Grpc)?;
    }
    let grpc_shutdown = shutdown.clone();
    let grpc_server = builder
        .add_service(health_service)
        .add_service(reflection_v1)
        .add_service(reflection_v1alpha)
        .add_service(agent.into_server())
        .serve_with_incoming_shutdown(grpc_listener.into_stream(), grpc_shutdown.cancelled_owned());

    let stale_after = config.poll_interval * 3 + config.poll_timeout;
    let app = http::router(http::HttpState {
        identity,
        registry,
        stale_after,
    });
    let http_shutdown = shutdown.clone();
    let http_server = axum::serve(http_listener, app)
        .with_graceful_shutdown(async move { http_shutdown.cancelled().await });

    let grpc_task = tokio::spawn(grpc_server);
    let http_task = tokio::spawn(async move { http_server.await });
    let result = wait_servers(grpc_task, http_task, &shutdown, config.shutdown_grace).await;
    shutdown.cancel();
    let drain = async { while tasks.join_next().await.is_some() {} };
    if tokio::time::timeout(config.shutdown_grace, drain)
        .await
        .is_err()
    {
        tracing::warn!("background tasks did not stop within the shutdown grace; abandoning them");
    }
    if let Some(warm::Announced { path, .. }) = handoff {
        // Bounded like every access to a volume: a hung one is abandoned.
        let removal = tokio::task::spawn_blocking(move || warm::withdraw(&path));
        let _ = tokio::time::timeout(Duration::from_secs(1), removal).await;
    }
    result
}

/// Binds `addr` with [`conn::BACKLOG`] (tokio's `bind` listens with 128; see
/// [`conn`] for why that is too short).
async fn bind(flag: &'static str, addr: SocketAddr) -> Result<TcpListener, ServeError> {
    let listen = || {
        let socket = if addr.is_ipv4() {
            tokio::net::TcpSocket::new_v4()
        } else {
            tokio::net::TcpSocket::new_v6()
        }?;
        socket.set_reuseaddr(true)?;
        socket.bind(addr)?;
        socket.listen(conn::BACKLOG)
    };
    listen().map_err(|source| ServeError::Bind { flag, addr, source })
}

/// Waits until shutdown is requested (then lets both servers drain within the
/// grace period) or until one server fails (then stops the other).
async fn wait_servers(
    mut grpc: tokio::task::JoinHandle<Result<(), tonic::transport::Error>>,
    mut http: tokio::task::JoinHandle<std::io::Result<()>>,
    shutdown: &CancellationToken,
    grace: Duration,
) -> Result<(), ServeError> {
    let early = tokio::select! {
        biased;
        () = shutdown.cancelled() => None,
        r = &mut grpc => Some(flatten_grpc(r)),
        r = &mut http => Some(flatten_http(r)),
    };
    if let Some(failure) = early {
        shutdown.cancel();
        grpc.abort();
        http.abort();
        return failure.map_or(Ok(()), Err);
    }
    tracing::info!(grace = ?grace, "shutting down: draining both servers");
    let drain = async {
        let (g, h) = tokio::join!(&mut grpc, &mut http);
        (flatten_grpc(g), flatten_http(h))
    };
    match tokio::time::timeout(grace, drain).await {
        Ok((Some(e), _)) | Ok((None, Some(e))) => Err(e),
        Ok((None, None)) => {
            tracing::info!("drained; bye");
            Ok(())
        }
        Err(_) => {
            tracing::warn!("servers did not drain within the shutdown grace; closing");
            grpc.abort();
            http.abort();
            Ok(())
        }
    }
}

fn flatten_grpc(
    r: Result<Result<(), tonic::transport::Error>, tokio::task::JoinError>,
) -> Option<ServeError> {
    match r {
        Ok(Ok(())) => None,
        Ok(Err(e)) => Some(ServeError::Grpc(e)),
        Err(e) => Some(ServeError::Http(std::io::Error::other(e))),
    }
}

fn flatten_http(r: Result<std::io::Result<()>, tokio::task::JoinError>) -> Option<ServeError> {
    match r {
        Ok(Ok(())) => None,
        Ok(Err(e)) => Some(ServeError::Http(e)),
        Err(e) => Some(ServeError::Http(std::io::Error::other(e))),
    }
}

/// How long the poller waits for the WAL's read at boot before it starts
/// without it: the member is then not ready, saying why, until the read ends.
/// The short read takes tens of milliseconds; reading a large WAL whole, cold,
/// at the lowest priority beside preflight, a few seconds.
const BOOT_READ_BOUND: Duration = Duration::from_secs(30);

/// The WAL, read once on a thread of its own (the verdict file is watched by
/// [`boot::watch_verdict`]).
async fn read_boot(config: &Config) -> Boot {
    let data_dir = config.data_dir.clone();
    let wal_dir = config.wal_dir.clone();
    read_boot_within(
        move || boot::read_wal(&data_dir, wal_dir.as_deref()),
        BOOT_READ_BOUND,
    )
    .await
}

/// [`read_boot`] with its read and its bound: a read that outlasts the bound
/// is left running, and its result comes to the poller through
/// [`Boot::pending`].
async fn read_boot_within(
    read: impl FnOnce() -> identity::WalIdentity + Send + 'static,
    bound: Duration,
) -> Boot {
    // On a thread of its own at the lowest CPU priority, with one reader: as
    // a native sidecar this runs while preflight verifies the WAL on every
    // core, cold after a node's reboot, and must not slow the verdict. It
    // reads the first and last segments only, when they read clean
    // (boot::read_wal); the whole WAL read here used to slow a cold preflight
    // from 0.98 to 1.23 s (1.1 GiB, etcd 3.5.1).
    let (tx, mut rx) = tokio::sync::oneshot::channel();
    let spawned = std::thread::Builder::new()
        .name("boot-wal".into())
        .spawn(move || {
            let tid = rustix::thread::gettid();
            if let Err(e) = rustix::process::setpriority_process(Some(tid), 19) {
                tracing::debug!(error = %e, "cannot lower the boot read's priority");
            }
            let _ = tx.send(read());
        });
    let read = match spawned {
        Ok(_) => match tokio::time::timeout(bound, &mut rx).await {
            Ok(read) => read.map_err(|e| e.to_string()),
            Err(_) => {
                let reason = format!(
                    "the WAL at boot is not read yet: its read has not finished in {}s (is the volume answering?); the checks against it wait for it",
                    bound.as_secs()
                );
                tracing::warn!("{reason}");
                return Boot {
                    wal: None,
                    pending: Some(PendingWal { reason, result: rx }),
                };
            }
        },
        Err(e) => Err(e.to_string()),
    };
    let wal = match read {
        Ok(wal) => {
            tracing::info!(
                state = %wal.state,
                member_id = %wal.member_id.map(|id| id.to_string()).unwrap_or_default(),
                cluster_id = %wal.cluster_id.map(|id| id.to_string()).unwrap_or_default(),
                commit = wal.commit_index,
                "read the WAL at boot"
            );
            Some(wal)
        }
        Err(e) => {
            tracing::warn!(error = %e, "reading the WAL at boot failed");
            None
        }
    };
    Boot { wal, pending: None }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A read of the WAL at boot that hangs (a volume that does not answer;
    /// here a read held until the test lets it go) does not hold the poller
    /// past its bound: the member is not ready meanwhile, saying why, and the
    /// read's result is taken when it comes.
    #[tokio::test]
    async fn a_boot_read_past_its_bound_holds_readiness_until_it_ends() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        std::fs::create_dir_all(data.join("member/wal")).unwrap();
        let (release, held) = std::sync::mpsc::channel::<()>();
        let read = move || {
            held.recv().unwrap();
            boot::read_wal(&data, None)
        };
        let mut boot = read_boot_within(read, Duration::from_millis(300)).await;
        assert!(boot.wal.is_none());
        let reason = boot
            .pending
            .as_ref()
            .expect("the read is pending")
            .reason
            .clone();
        assert!(
            reason.contains("the WAL at boot is not read yet"),
            "{reason}"
        );
        let expected = identity::expect(None, None, None);
        let observe = |pending: Option<&str>| {
            identity::assess(identity::Observation {
                endpoint: "http://127.0.0.1:2379",
                answer: Err("not polled yet"),
                expected: &expected,
                wal_at_boot: None,
                preflight: None,
                preflight_waiting: None,
                wal_at_boot_pending: pending,
            })
        };
        assert!(observe(Some(&reason)).contains(&reason));
        boot.settle();
        assert!(boot.pending.is_some(), "still held");

        release.send(()).unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while boot.pending.is_some() {
            assert!(std::time::Instant::now() < deadline, "the read never ended");
            tokio::time::sleep(Duration::from_millis(20)).await;
            boot.settle();
        }
        let wal = boot.wal.expect("the late result is taken");
        assert_eq!(wal.state, "empty", "{wal:?}");
        assert!(!observe(None).iter().any(|r| r.contains("not read yet")));
    }
}
