//! `webhook` from the command line: the flags into a [`Config`], a small
//! runtime, SIGTERM/SIGINT into a graceful shutdown. `main` calls it directly.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::tls::CertFiles;
use super::Config;
use crate::cli::WebhookArgs;
use crate::error::{Error, Result};
use crate::evidence::client::service_account_token_mounted;
use crate::exit::Exit;
use crate::inject::Options;
use crate::server::conn;

fn config(args: &WebhookArgs) -> Result<Config> {
    let image = args
        .image
        .clone()
        .filter(|i| !i.trim().is_empty())
        .ok_or_else(|| Error::usage("webhook: --image (AGENT_INJECT_IMAGE) is required: the agent's image, as your registry serves it"))?;
    let cert = args.tls_cert.clone().ok_or_else(|| {
        Error::usage("webhook: --tls-cert (AGENT_WEBHOOK_TLS_CERT_PATH) is required")
    })?;
    let key = args.tls_key.clone().ok_or_else(|| {
        Error::usage("webhook: --tls-key (AGENT_WEBHOOK_TLS_KEY_PATH) is required")
    })?;
    for (flag, d) in [
        ("--cert-reload-interval", args.cert_reload_interval),
        ("--request-timeout", args.request_timeout),
        ("--header-read-timeout", args.header_read_timeout),
        ("--idle-timeout", args.idle_timeout),
    ] {
        if d.is_zero() {
            return Err(Error::usage(format!("webhook: {flag} must be positive")));
        }
    }
    if args.max_request_bytes == 0 {
        return Err(Error::usage(
            "webhook: --max-request-bytes must be positive",
        ));
    }
    let events = match args.events {
        Some(false) => None,
        Some(true) => Some(args.kubeconfig.clone()),
        None if args.kubeconfig.is_some() || service_account_token_mounted() => {
            Some(args.kubeconfig.clone())
        }
        None => {
            tracing::warn!("no service-account token and no KUBECONFIG: no Events about unguarded Pods (the warning and the metric remain)");
            None
        }
    };
    Ok(Config {
        listen: args.listen,
        cert: CertFiles { cert, key },
        reload_every: args.cert_reload_interval,
        options: Options {
            image,
            image_pull_policy: args.image_pull_policy.clone(),
            kube: args.kube_api,
            version: env!("CARGO_PKG_VERSION").to_owned(),
            extra_env: args.agent_env.clone(),
        },
        events,
        max_body: args.max_request_bytes,
        request_timeout: args.request_timeout,
        limits: conn::Limits {
            max_connections: conn::connection_limit(args.max_connections),
            header_read_timeout: args.header_read_timeout,
            idle_timeout: args.idle_timeout,
        },
        shutdown_grace: args.shutdown_grace,
    })
}

/// Runs the webhook until SIGTERM or SIGINT: 0 after draining, 2 for a
/// configuration error (a flag, the certificate, the port).
pub fn run(args: &WebhookArgs) -> Result<Exit> {
    let config = config(args)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(
            std::thread::available_parallelism()
                .map_or(1, |n| n.get())
                .min(4),
        )
        .max_blocking_threads(4)
        .thread_name("webhook")
        .enable_all()
        .build()
        .map_err(|e| Error::internal("cannot start the tokio runtime", &e))?;
    let result = runtime.block_on(async {
        let shutdown = CancellationToken::new();
        let signals = tokio::spawn(on_signal(shutdown.clone()));
        let result = super::run(config, shutdown, |_| {}).await;
        signals.abort();
        result
    });
    runtime.shutdown_timeout(Duration::from_secs(1));
    match result {
        Ok(()) => Ok(Exit::Ok),
        Err(e) if e.is_configuration() => Err(Error::Usage(format!("webhook: {e}"))),
        Err(e) => Err(Error::internal("webhook", &e)),
    }
}

async fn on_signal(shutdown: CancellationToken) {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        tracing::error!("cannot install the signal handlers; SIGINT only");
        let _ = tokio::signal::ctrl_c().await;
        shutdown.cancel();
        return;
    };
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM"),
        _ = int.recv() => tracing::info!("SIGINT"),
    }
    shutdown.cancel();
}
