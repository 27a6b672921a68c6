//! `webhook`: the mutating admission webhook that guards every etcd Pod the
//! API server creates where it is asked to (a label on the namespace or the
//! Pod), with the same pure function as `inject` ([`crate::inject::guard`]).
//!
//! One HTTPS port (HTTP/1.1 over rustls, the certificate re-read from its files
//! when it rotates, [`tls`]):
//!
//! * `POST /mutate`: an `admission.k8s.io/v1` AdmissionReview in, its answer
//!   out ([`admission`]): a JSON Patch for a Pod it guards; for an etcd Pod it
//!   cannot understand, no patch, a warning, and (off the answer's path,
//!   bounded) an Event on the Pod's controller, plus the
//!   `etcd_agent_webhook_unguarded_pods` metric;
//! * `GET /healthz`: `ok` (for the kubelet's probes);
//! * `GET /metrics`: Prometheus text ([`metrics`]).
//!
//! Bounded like the sidecar's servers: connections through
//! [`crate::server::conn`] (a limit below the descriptor limit, header-read and
//! idle timeouts), the TLS handshake and the request head within the
//! header-read timeout, the body within `--max-request-bytes` and
//! `--request-timeout`. An answer takes no I/O: the guard is pure and Events are
//! written by a task of their own, at most [`MAX_EVENT_TASKS`] at once.

pub mod admission;
pub mod metrics;
pub mod start;
pub mod tls;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::State;
use axum::http::{header, Request, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use k8s_openapi::api::core::v1::ObjectReference;
use prometheus_client::registry::Registry;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use crate::evidence::client::ConfigError;
use crate::inject::Options;
use crate::server::conn;

use self::admission::{Unguarded, Verdict};
use self::metrics::{Metrics, NamespaceLabel, Outcome, OutcomeLabel, ResultLabel};
use self::tls::{CertError, CertFiles, Reload, Reloading};

/// `reportingComponent` of the webhook's Events.
pub const COMPONENT: &str = "etcd-member-agent-webhook";
/// The reason of an Event about an etcd Pod admitted unguarded.
pub const REASON_UNGUARDED: &str = "EtcdPodNotGuarded";
/// Events being written at once, at most; more are dropped (and counted).
pub const MAX_EVENT_TASKS: usize = 16;
/// How long writing one Event may take.
const EVENT_TIMEOUT: Duration = Duration::from_secs(3);

/// How the webhook runs.
#[derive(Debug, Clone)]
pub struct Config {
    /// The HTTPS address.
    pub listen: SocketAddr,
    /// The serving certificate's files.
    pub cert: CertFiles,
    /// How often the certificate files are re-read.
    pub reload_every: Duration,
    /// What the guard adds.
    pub options: Options,
    /// Events about unguarded Pods: the kubeconfig (`None`: in-cluster), or
    /// no Events at all.
    pub events: Option<Option<PathBuf>>,
    /// The largest request body read.
    pub max_body: usize,
    /// Reading a request's body and answering it must take less than this.
    pub request_timeout: Duration,
    /// Connection limits.
    pub limits: conn::Limits,
    /// How long SIGTERM waits for requests being answered.
    pub shutdown_grace: Duration,
}

/// Why the webhook could not start.
#[derive(Debug, thiserror::Error)]
pub enum WebhookError {
    /// The address cannot be bound.
    #[error("cannot listen on {addr} (--listen): {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// The serving certificate cannot be used.
    #[error(transparent)]
    Cert(#[from] CertError),
    /// rustls refused the configuration (a bug).
    #[error("cannot configure TLS: {0}")]
    Tls(#[from] rustls::Error),
    /// No Kubernetes client for Events.
    #[error(transparent)]
    Kube(#[from] ConfigError),
}

impl WebhookError {
    /// A configuration problem (exit 2).
    pub fn is_configuration(&self) -> bool {
        !matches!(self, WebhookError::Tls(_))
    }
}

#[derive(Clone)]
struct AppState {
    options: Arc<Options>,
    metrics: Metrics,
    registry: Arc<Registry>,
    max_body: usize,
    request_timeout: Duration,
    events: Option<kube::Client>,
    event_slots: Arc<Semaphore>,
}

/// Runs the webhook until `shutdown`, then lets the requests being answered
/// finish within the grace period. `on_bound` gets the address bound.
pub async fn run(
    config: Config,
    shutdown: CancellationToken,
    on_bound: impl FnOnce(SocketAddr),
) -> Result<(), WebhookError> {
    let resolver = Arc::new(Reloading::new(config.cert.clone())?);
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(tls::server_config(resolver.clone())?));
    let events = match &config.events {
        Some(kubeconfig) => {
            Some(crate::evidence::client::client(kubeconfig.as_ref(), EVENT_TIMEOUT).await?)
        }
        None => None,
    };
    let socket = bind(config.listen).map_err(|source| WebhookError::Bind {
        addr: config.listen,
        source,
    })?;
    let bound = socket.local_addr().unwrap_or(config.listen);
    let mut listener =
        conn::Tracker::new("webhook", config.limits).listen(socket, shutdown.clone());
    tracing::info!(listen = %bound, events = events.is_some(), image = %config.options.image, "admitting");
    on_bound(bound);

    let metrics = Metrics::default();
    let registry = Arc::new(metrics.register());
    {
        let metrics = metrics.clone();
        tokio::spawn(
            resolver.watch(config.reload_every, shutdown.clone(), move |r| {
                let outcome = match r {
                    Reload::Unchanged => return,
                    Reload::Reloaded => Outcome::ok,
                    Reload::Failed => Outcome::error,
                };
                metrics
                    .reloads
                    .get_or_create(&OutcomeLabel { outcome })
                    .inc();
            }),
        );
    }
    let state = AppState {
        options: Arc::new(config.options.clone()),
        metrics,
        registry,
        max_body: config.max_body,
        request_timeout: config.request_timeout,
        events,
        event_slots: Arc::new(Semaphore::new(MAX_EVENT_TASKS)),
    };
    let app = Router::new()
        .route("/mutate", post(mutate))
        .route("/healthz", get(healthz))
        .route("/metrics", get(metrics_page))
        .with_state(state);

    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let handshake = config.limits.header_read_timeout;
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept_tracked() => accepted,
            () = shutdown.cancelled() => break,
        };
        let acceptor = acceptor.clone();
        let app = app.clone();
        let watcher = graceful.watcher();
        tokio::spawn(async move {
            let tls = match tokio::time::timeout(handshake, acceptor.accept(stream)).await {
                Ok(Ok(tls)) => tls,
                Ok(Err(e)) => {
                    tracing::debug!(%peer, error = %e, "TLS handshake failed");
                    return;
                }
                Err(_) => {
                    tracing::debug!(%peer, "TLS handshake timed out");
                    return;
                }
            };
            let service = hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
                let app = app.clone();
                async move {
                    use tower::ServiceExt;
                    Ok::<_, Infallible>(
                        app.oneshot(req.map(Body::new))
                            .await
                            .unwrap_or_else(|e| match e {}),
                    )
                }
            });
            let mut builder = hyper::server::conn::http1::Builder::new();
            builder
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(handshake)
                .keep_alive(true);
            let conn = builder.serve_connection(hyper_util::rt::TokioIo::new(tls), service);
            if let Err(e) = watcher.watch(conn).await {
                tracing::debug!(%peer, error = %e, "connection ended with an error");
            }
        });
    }
    drop(listener);
    tracing::info!(grace = ?config.shutdown_grace, "shutting down: draining");
    if tokio::time::timeout(config.shutdown_grace, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("connections did not drain within the shutdown grace; closing");
    }
    Ok(())
}

fn bind(addr: SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    let socket = if addr.is_ipv4() {
        tokio::net::TcpSocket::new_v4()
    } else {
        tokio::net::TcpSocket::new_v6()
    }?;
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(conn::BACKLOG)
}

async fn healthz() -> &'static str {
    "ok\n"
}

async fn metrics_page(State(s): State<AppState>) -> Response {
    let mut out = String::new();
    match prometheus_client::encoding::prometheus_text::encode(&mut out, &s.registry) {
        Ok(()) => (
            StatusCode::OK,
            [(
                header::CONTENT_TYPE,
                prometheus_client::encoding::prometheus_text::CONTENT_TYPE,
            )],
            out,
        )
            .into_response(),
        Err(_) => (StatusCode::INTERNAL_SERVER_ERROR, "cannot encode metrics\n").into_response(),
    }
}

fn refuse(s: &AppState, code: StatusCode, why: String) -> Response {
    s.metrics
        .admissions
        .get_or_create(&ResultLabel {
            result: metrics::Result::invalid,
        })
        .inc();
    tracing::warn!(status = code.as_u16(), reason = %why, "refused a request");
    (code, why + "\n").into_response()
}

#[tracing::instrument(level = "debug", skip_all)]
async fn mutate(State(s): State<AppState>, req: Request<Body>) -> Response {
    let started = std::time::Instant::now();
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    if declared.is_some_and(|n| n > s.max_body) {
        return refuse(
            &s,
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("the request is larger than {} bytes", s.max_body),
        );
    }
    let body = match tokio::time::timeout(
        s.request_timeout,
        axum::body::to_bytes(req.into_body(), s.max_body),
    )
    .await
    {
        Ok(Ok(b)) => b,
        Ok(Err(e)) => {
            return refuse(
                &s,
                StatusCode::BAD_REQUEST,
                format!(
                    "cannot read the request (at most {} bytes): {e}",
                    s.max_body
                ),
            )
        }
        Err(_) => {
            return refuse(
                &s,
                StatusCode::REQUEST_TIMEOUT,
                format!("the request was not read within {:?}", s.request_timeout),
            )
        }
    };
    let reviewed = match admission::review(&body, &s.options) {
        Ok(r) => r,
        Err(e) => return refuse(&s, StatusCode::BAD_REQUEST, e.to_string()),
    };
    let result = match reviewed.verdict {
        Verdict::Injected => metrics::Result::injected,
        Verdict::Skipped => metrics::Result::skipped,
        Verdict::Unguarded => metrics::Result::unguarded,
        Verdict::Ignored => metrics::Result::ignored,
    };
    s.metrics
        .admissions
        .get_or_create(&ResultLabel { result })
        .inc();
    if let Some(u) = reviewed.unguarded {
        tracing::warn!(pod = %u.pod, reason = %u.message, dry_run = u.dry_run, "admitted an etcd Pod unguarded");
        s.metrics
            .unguarded
            .get_or_create(&NamespaceLabel {
                namespace: u.subject.namespace.clone(),
            })
            .inc();
        if !u.dry_run {
            report(&s, u);
        }
    }
    let response = match serde_json::to_vec(&reviewed.response) {
        Ok(bytes) => (
            StatusCode::OK,
            [(header::CONTENT_TYPE, "application/json")],
            bytes,
        )
            .into_response(),
        Err(e) => {
            return (StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n")).into_response();
        }
    };
    s.metrics.duration.observe(started.elapsed().as_secs_f64());
    response
}

/// Writes the Event about an unguarded Pod, off the answer's path.
fn report(s: &AppState, u: Unguarded) {
    let Some(client) = s.events.clone() else {
        return;
    };
    let Ok(permit) = s.event_slots.clone().try_acquire_owned() else {
        tracing::warn!(pod = %u.pod, "too many Events being written; this one is dropped");
        s.metrics
            .events
            .get_or_create(&OutcomeLabel {
                outcome: Outcome::error,
            })
            .inc();
        return;
    };
    let metrics = s.metrics.clone();
    tokio::spawn(async move {
        let object = ObjectReference {
            api_version: Some(u.subject.api_version.clone()),
            kind: Some(u.subject.kind.clone()),
            namespace: Some(u.subject.namespace.clone()),
            name: Some(u.subject.name.clone()),
            uid: u.subject.uid.clone(),
            ..ObjectReference::default()
        };
        let deadline = tokio::time::Instant::now() + EVENT_TIMEOUT;
        let key = format!("{}/{}", u.request_uid, REASON_UNGUARDED);
        let outcome = match crate::evidence::events::report_object(
            &client,
            &object,
            COMPONENT,
            REASON_UNGUARDED,
            &key,
            &u.message,
            deadline,
        )
        .await
        {
            Ok(_) => Outcome::ok,
            Err(e) => {
                tracing::warn!(pod = %u.pod, error = %e, "cannot write the Event about an unguarded Pod");
                Outcome::error
            }
        };
        metrics
            .events
            .get_or_create(&OutcomeLabel { outcome })
            .inc();
        drop(permit);
    });
}
