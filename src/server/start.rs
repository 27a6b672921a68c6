//! `serve` from the command line: validates the flags into a
//! [`Config`], builds a small tokio runtime (two
//! worker threads at most: it sits beside etcd and must not compete with it), turns
//! SIGTERM and SIGINT into a graceful shutdown, and runs [`crate::server::run`]. `main` calls it
//! directly: no one-shot command module imports the server.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::config::{KubeConfig, LocalEtcd, ReportConfig, ServerTls};
use super::Config;
use crate::cli::ServeArgs;
use crate::error::{Error, Result};
use crate::evidence::client::service_account_token_mounted;
use crate::evidence::etcd::parse_endpoints;
use crate::evidence::kube::KubeTarget;
use crate::exit::Exit;

/// Runs the sidecar until SIGTERM or SIGINT; exits 0 after draining, 2 for a
/// configuration error (bad flag, unreadable TLS file, port in use).
pub fn run(args: &ServeArgs) -> Result<Exit> {
    let config = config(args)?;
    let workers = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(2);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .max_blocking_threads(4)
        .thread_name("serve")
        .enable_all()
        .build()
        .map_err(|e| Error::internal("cannot start the tokio runtime", &e))?;
    let result = runtime.block_on(async {
        let shutdown = CancellationToken::new();
        let signals = tokio::spawn(on_signal(shutdown.clone()));
        let result = super::run(config, shutdown.clone(), |_| {}).await;
        signals.abort();
        result
    });
    runtime.shutdown_timeout(Duration::from_secs(1));
    match result {
        Ok(()) => Ok(Exit::Ok),
        Err(e) if e.is_configuration() => Err(Error::Usage(e.to_string())),
        Err(e) => Err(Error::internal("serve", &e)),
    }
}

/// Cancels `shutdown` on the first SIGTERM or SIGINT.
async fn on_signal(shutdown: CancellationToken) {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = match signal(SignalKind::terminate()) {
        Ok(s) => s,
        Err(e) => {
            tracing::error!(error = %e, "cannot install a SIGTERM handler; SIGINT only");
            let _ = tokio::signal::ctrl_c().await;
            shutdown.cancel();
            return;
        }
    };
    let name = tokio::select! {
        _ = term.recv() => "SIGTERM",
        _ = tokio::signal::ctrl_c() => "SIGINT",
    };
    tracing::info!(signal = name, "shutdown requested");
    shutdown.cancel();
}

fn positive(flag: &str, d: Duration) -> Result<Duration> {
    if d.is_zero() {
        return Err(Error::Usage(format!("{flag} must be greater than zero")));
    }
    Ok(d)
}

/// Validates the flags into a [`Config`] (no I/O but the service-account probe
/// that decides `--kube`'s default).
pub fn config(args: &ServeArgs) -> Result<Config> {
    let endpoints = parse_endpoints(&args.endpoints);
    let endpoint = endpoints
        .first()
        .cloned()
        .ok_or_else(|| Error::Usage("--endpoints names no endpoint".to_owned()))?;
    if endpoints.len() > 1 {
        tracing::warn!(used = %endpoint, "serve watches the local member only: using the first of --endpoints");
    }
    if args.max_watchers == 0 {
        return Err(Error::Usage("--max-watchers must be at least 1".to_owned()));
    }
    let poll_interval = positive("--poll-interval", args.poll_interval)?;
    let poll_timeout = positive("--poll-timeout", args.poll_timeout)?;

    let name = args.name.clone().filter(|n| !n.is_empty());
    let pod_name = args
        .kube
        .pod_name
        .clone()
        .filter(|n| !n.is_empty())
        .or_else(|| name.clone());
    let namespace = args.kube.namespace.clone().filter(|n| !n.is_empty());
    let kube_on = args.kube.kube.unwrap_or_else(service_account_token_mounted);
    let kube = if kube_on {
        let namespace = namespace.clone().ok_or_else(|| {
            Error::Usage(
                "--kube needs the Pod's namespace (--namespace / POD_NAMESPACE)".to_owned(),
            )
        })?;
        let member_name = pod_name.clone().ok_or_else(|| {
            Error::Usage(
                "--kube needs the Pod's name (--pod-name / POD_NAME, or --name / ETCD_MEMBER_NAME)"
                    .to_owned(),
            )
        })?;
        Some(KubeConfig {
            target: KubeTarget {
                namespace,
                member_name,
                kubeconfig: args.kube.kubeconfig.clone(),
            },
            interval: positive("--kube-interval", args.kube_interval)?,
            timeout: positive("--kube-timeout", args.kube_timeout)?,
            hazard_interval: positive("--hazard-interval", args.hazard_interval)?,
            witness_interval: positive("--witness-interval", args.witness_interval)?,
        })
    } else {
        None
    };

    let grpc_tls = match (&args.tls_cert, &args.tls_key) {
        (Some(cert), Some(key)) => Some(ServerTls {
            cert: cert.clone(),
            key: key.clone(),
            client_ca: args.tls_client_ca.clone(),
        }),
        (None, None) if args.tls_client_ca.is_some() => {
            return Err(Error::Usage(
                "--tls-client-ca needs --tls-cert and --tls-key".to_owned(),
            ))
        }
        (None, None) => None,
        _ => {
            return Err(Error::Usage(
                "--tls-cert and --tls-key go together".to_owned(),
            ))
        }
    };

    let report = match args.report_to.as_deref().filter(|u| !u.is_empty()) {
        Some(url) => Some(ReportConfig {
            url: url.to_owned(),
            interval: positive("--report-interval", args.report_interval)?,
            timeout: positive("--report-timeout", args.report_timeout)?,
            ca: args.report_ca.clone(),
            cert: args.report_cert.clone(),
            key: args.report_key.clone(),
            pod_name: pod_name.clone().unwrap_or_default(),
            namespace: namespace.clone().unwrap_or_default(),
        }),
        None => None,
    };

    Ok(Config {
        grpc_listen: args.grpc_listen,
        http_listen: args.http_listen,
        grpc_tls,
        etcd: LocalEtcd {
            endpoint,
            ca: args.etcd.cacert.clone(),
            cert: args.etcd.cert.clone(),
            key: args.etcd.key.clone(),
        },
        data_dir: args.dirs.data_dir.clone(),
        wal_dir: args.dirs.wal_dir.clone(),
        verdict_file: args.verdict_file.clone(),
        pod_uid: args.kube.pod_uid.clone().filter(|u| !u.trim().is_empty()),
        witness_file: args
            .witness_file
            .clone()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or_else(|| args.verdict_file.with_file_name("witness.json")),
        incarnation: crate::evidence::mark::Incarnation::new(
            args.initial_cluster_token
                .as_deref()
                .filter(|t| !t.is_empty()),
            None,
        ),
        poll_interval,
        poll_timeout,
        kube,
        max_watchers: args.max_watchers,
        report,
        shutdown_grace: args.shutdown_grace,
        read_ahead: args.read_ahead,
        limits: super::conn::Limits {
            max_connections: super::conn::connection_limit(args.max_connections),
            header_read_timeout: args.header_read_timeout,
            idle_timeout: args.idle_timeout,
        },
    })
}
