//! The one Kubernetes client: how it is configured (kubeconfig, in-cluster
//! service account), how every call is bounded by the caller's deadline and
//! retried on a transient answer, and how the client's errors are classified
//! into [`ApiError`]. The operator's records (`kube`) and the Pod checks (`pod`)
//! both go through here; each names its own kinds through [`ApiKind`].

use std::fmt;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::time::Duration;

use ::kube::config::{KubeConfigOptions, Kubeconfig};
use ::kube::{Client, Config};
use tokio::time::{timeout_at, Instant};

use super::remaining;
use crate::error::chain;

/// Where the service-account token is mounted in a Pod.
pub const SERVICE_ACCOUNT_TOKEN: &str = "/var/run/secrets/kubernetes.io/serviceaccount/token";

/// Whether a service-account token is mounted, i.e. whether reading the
/// Kubernetes API is possible in the first place (the default of `--kube`).
pub fn service_account_token_mounted() -> bool {
    Path::new(SERVICE_ACCOUNT_TOKEN).exists()
}

/// A kind of object read through the client, as its caller names it in errors.
pub trait ApiKind: Copy + fmt::Debug + fmt::Display + Send + Sync + 'static {
    /// The resource as RBAC names it (`pods`, `etcdmembers.etcd-operator.cozystack.io`).
    fn rbac_resource(self) -> String;
    /// What a 404 without an object most likely means, after the resource
    /// (`.../v1alpha2 (is the operator's CRD installed?)`).
    fn not_served(self) -> String;
    /// The RBAC the caller needs, said on a 403.
    fn rbac_needed(self) -> &'static str;
}

/// No usable client configuration: the kubeconfig is missing or invalid, or
/// there is neither an in-cluster service account nor a local kubeconfig.
#[derive(Debug, thiserror::Error)]
#[error("cannot configure a Kubernetes client from {from}: {source}")]
pub struct ConfigError {
    /// Where the configuration was looked for.
    pub from: String,
    /// What went wrong.
    #[source]
    pub source: Box<dyn std::error::Error + Send + Sync>,
}

/// Why one read of one object failed.
#[derive(Debug, thiserror::Error)]
pub enum ApiError<K: ApiKind> {
    /// The API server answered 404 naming this object: it does not exist.
    #[error("{kind} {namespace}/{name} not found")]
    NotFound {
        /// The kind asked for.
        kind: K,
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
    },
    /// A 404 that names no object: the resource is not served at this path (a
    /// CRD not installed, a proxy in the way, a wrong server URL).
    #[error("the API server does not serve {}: {message}", kind.not_served())]
    NotServed {
        /// The kind asked for.
        kind: K,
        /// The API server's message (or the body it sent).
        message: String,
    },
    /// 403: the service account lacks RBAC for this read.
    #[error(
        "forbidden: the service account needs RBAC `{verb}` on {} in namespace {namespace} \
         ({}); API server said: {message}",
        kind.rbac_resource(),
        kind.rbac_needed()
    )]
    Forbidden {
        /// The verb that was refused (`get`).
        verb: &'static str,
        /// The kind whose resource was refused.
        kind: K,
        /// The namespace of the refused read.
        namespace: String,
        /// The object's name.
        name: String,
        /// The API server's message.
        message: String,
    },
    /// Any other error status (401, 409, 5xx, …), with the API server's words.
    #[error("reading {kind} {namespace}/{name} failed with HTTP {code} {reason}: {message}")]
    Api {
        /// The kind asked for.
        kind: K,
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
        /// HTTP status code.
        code: u16,
        /// The `Status` reason (`InternalError`, `ServiceUnavailable`, …).
        reason: String,
        /// The `Status` message.
        message: String,
    },
    /// The deadline passed (or the client's own timeout fired) before an answer.
    #[error("no answer reading {kind} {namespace}/{name} before the deadline")]
    Timeout {
        /// The kind asked for.
        kind: K,
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
    },
    /// The client could not authenticate (token file unreadable, exec plugin
    /// failed).
    #[error("cannot authenticate to the API server to read {kind} {namespace}/{name}: {detail}")]
    Auth {
        /// The kind asked for.
        kind: K,
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
        /// The error and its causes, rendered.
        detail: String,
        /// The client's error.
        #[source]
        source: Box<::kube::Error>,
    },
    /// The API server could not be reached (connection refused, TLS, DNS, …).
    #[error("cannot reach the API server to read {kind} {namespace}/{name}: {detail}")]
    Unreachable {
        /// The kind asked for.
        kind: K,
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
        /// The error and its causes, rendered.
        detail: String,
        /// The client's error.
        #[source]
        source: Box<::kube::Error>,
    },
    /// A 2xx answer whose body is not the object asked for.
    #[error("{kind} {namespace}/{name}: the API server's answer is malformed: {detail}")]
    Malformed {
        /// The kind asked for.
        kind: K,
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
        /// What is wrong with it.
        detail: String,
    },
}

impl<K: ApiKind> ApiError<K> {
    /// A short stable name for JSON documents and metrics: `not-found`,
    /// `not-served`, `forbidden`, `api`, `timeout`, `auth`, `unreachable`,
    /// `malformed`.
    pub fn name(&self) -> &'static str {
        match self {
            ApiError::NotFound { .. } => "not-found",
            ApiError::NotServed { .. } => "not-served",
            ApiError::Forbidden { .. } => "forbidden",
            ApiError::Api { .. } => "api",
            ApiError::Timeout { .. } => "timeout",
            ApiError::Auth { .. } => "auth",
            ApiError::Unreachable { .. } => "unreachable",
            ApiError::Malformed { .. } => "malformed",
        }
    }

    /// Worth asking again before the deadline: 429, 503, 504, or no connection.
    pub fn is_transient(&self) -> bool {
        match self {
            ApiError::Api { code, .. } => matches!(code, 429 | 503 | 504),
            ApiError::Unreachable { .. } => true,
            _ => false,
        }
    }

    /// A matter of the agent's own configuration (RBAC, credentials) rather
    /// than the API server's health or the object's existence.
    pub fn is_configuration(&self) -> bool {
        matches!(
            self,
            ApiError::Forbidden { .. } | ApiError::Auth { .. } | ApiError::Api { code: 401, .. }
        )
    }
}

/// Builds a client from `kubeconfig`, else the in-cluster service account,
/// else whatever `Config::infer` finds. Every request through it is bounded by
/// `request_timeout` (connect, read and write), on top of the per-call deadline
/// of [`call`]. The client does not retry on its own: [`call`] does, within the
/// caller's deadline, so that the last real answer (say, a 503) is reported
/// instead of a bare timeout.
pub async fn client(
    kubeconfig: Option<&PathBuf>,
    request_timeout: Duration,
) -> Result<Client, ConfigError> {
    client_with(
        kubeconfig,
        None,
        Timeouts {
            connect: request_timeout,
            read: request_timeout,
        },
    )
    .await
}

/// The bounds of every request of a client from [`client_with`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    /// Connecting (TCP and TLS) and writing a request.
    pub connect: Duration,
    /// A silence while reading an answer. A watch is one long answer: its
    /// client needs a bound above the server-side `timeoutSeconds` it asks for.
    pub read: Duration,
}

/// As [`client`], for a person's command line (`fleet`, the kubectl plugin):
/// `kubeconfig` may be a list of files (`KUBECONFIG=a:b`, merged as kubectl
/// merges them) and `context` picks a context other than the current one (from
/// `$KUBECONFIG` or `~/.kube/config` when no file is given).
pub async fn client_with(
    kubeconfig: Option<&PathBuf>,
    context: Option<&str>,
    timeouts: Timeouts,
) -> Result<Client, ConfigError> {
    let options = KubeConfigOptions {
        context: context.map(str::to_owned),
        ..KubeConfigOptions::default()
    };
    let (mut config, from) = match (kubeconfig, context) {
        (Some(path), _) => {
            let from = format!("kubeconfig {}", path.display());
            let fail = |e: Box<dyn std::error::Error + Send + Sync>| ConfigError {
                from: from.clone(),
                source: e,
            };
            let mut merged: Option<Kubeconfig> = None;
            for file in std::env::split_paths(path).filter(|p| !p.as_os_str().is_empty()) {
                let next = Kubeconfig::read_from(&file).map_err(|e| fail(Box::new(e)))?;
                merged = Some(match merged {
                    None => next,
                    Some(m) => m.merge(next).map_err(|e| fail(Box::new(e)))?,
                });
            }
            let kubeconfig = merged.ok_or_else(|| fail("no file named".into()))?;
            let config = Config::from_custom_kubeconfig(kubeconfig, &options)
                .await
                .map_err(|e| fail(Box::new(e)))?;
            (config, from)
        }
        (None, Some(context)) => {
            let from = format!("context {context} of $KUBECONFIG or ~/.kube/config");
            let config = Config::from_kubeconfig(&options)
                .await
                .map_err(|e| ConfigError {
                    from: from.clone(),
                    source: Box::new(e),
                })?;
            (config, from)
        }
        (None, None) => match Config::incluster() {
            Ok(config) => (config, "the in-cluster service account".to_owned()),
            Err(in_cluster) => {
                tracing::debug!(error = %in_cluster, "no in-cluster config; inferring");
                let config = Config::infer().await.map_err(|e| ConfigError {
                    from: "the in-cluster service account or $KUBECONFIG".to_owned(),
                    source: Box::new(e),
                })?;
                (config, "an inferred configuration".to_owned())
            }
        },
    };
    config.connect_timeout = Some(timeouts.connect);
    config.read_timeout = Some(timeouts.read);
    config.write_timeout = Some(timeouts.connect);
    // Without this, the time a pooled connection sat idle counts against the
    // read timeout of the next request on it.
    config.reset_reader_on_write = true;
    config.default_retry = false;
    Client::try_from(config).map_err(|e| ConfigError {
        from,
        source: Box::new(e),
    })
}

const FIRST_BACKOFF: Duration = Duration::from_millis(100);
const MAX_BACKOFF: Duration = Duration::from_secs(2);

/// One call for `kind` `namespace/name`, retried on a transient failure
/// ([`ApiError::is_transient`]) with exponential backoff until `deadline`, and
/// never past it.
pub async fn call<K, T, F, Fut>(
    kind: K,
    namespace: &str,
    name: &str,
    deadline: Instant,
    call: F,
) -> Result<T, ApiError<K>>
where
    K: ApiKind,
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, ::kube::Error>>,
{
    call_verb("get", kind, namespace, name, deadline, call).await
}

/// As [`call`], for a call whose RBAC verb is `verb` (`create`, `update`):
/// a 403 names it.
#[tracing::instrument(level = "debug", skip(deadline, call))]
pub async fn call_verb<K, T, F, Fut>(
    verb: &'static str,
    kind: K,
    namespace: &str,
    name: &str,
    deadline: Instant,
    mut call: F,
) -> Result<T, ApiError<K>>
where
    K: ApiKind,
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, ::kube::Error>>,
{
    let mut backoff = FIRST_BACKOFF;
    loop {
        let err = match timeout_at(deadline, call()).await {
            Err(_) => return Err(timeout(kind, namespace, name)),
            Ok(Ok(value)) => return Ok(value),
            Ok(Err(e)) => classify(e, verb, kind, namespace, name),
        };
        if !err.is_transient() || remaining(deadline) <= backoff {
            return Err(err);
        }
        tracing::debug!(%kind, name, error = %err, ?backoff, "transient error; retrying");
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

fn timeout<K: ApiKind>(kind: K, namespace: &str, name: &str) -> ApiError<K> {
    ApiError::Timeout {
        kind,
        namespace: namespace.to_owned(),
        name: name.to_owned(),
    }
}

/// The client's error as one of [`ApiError`]'s variants.
fn classify<K: ApiKind>(
    e: ::kube::Error,
    verb: &'static str,
    kind: K,
    namespace: &str,
    name: &str,
) -> ApiError<K> {
    let (namespace, name) = (namespace.to_owned(), name.to_owned());
    match e {
        ::kube::Error::Api(status) => {
            let names_object = status.details.as_ref().is_some_and(|d| !d.name.is_empty());
            match status.code {
                404 if names_object => ApiError::NotFound {
                    kind,
                    namespace,
                    name,
                },
                404 => ApiError::NotServed {
                    kind,
                    message: status.message.clone(),
                },
                403 => ApiError::Forbidden {
                    verb,
                    kind,
                    namespace,
                    name,
                    message: status.message.clone(),
                },
                code => ApiError::Api {
                    kind,
                    namespace,
                    name,
                    code,
                    reason: status.reason.clone(),
                    message: status.message.clone(),
                },
            }
        }
        ::kube::Error::SerdeError(json) => ApiError::Malformed {
            kind,
            namespace,
            name,
            detail: format!("not a {kind} document: {json}"),
        },
        ::kube::Error::FromUtf8(utf8) => ApiError::Malformed {
            kind,
            namespace,
            name,
            detail: format!("not UTF-8: {utf8}"),
        },
        other if is_timeout(&other) => ApiError::Timeout {
            kind,
            namespace,
            name,
        },
        other @ ::kube::Error::Auth(_) => ApiError::Auth {
            kind,
            namespace,
            name,
            detail: chain(&other),
            source: Box::new(other),
        },
        other => ApiError::Unreachable {
            kind,
            namespace,
            name,
            detail: chain(&other),
            source: Box::new(other),
        },
    }
}

/// The client's own read/connect timeouts surface as an I/O `TimedOut` (or a
/// tower "elapsed") somewhere down the cause chain.
fn is_timeout(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut current: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = current {
        if let Some(io) = err.downcast_ref::<std::io::Error>() {
            if io.kind() == std::io::ErrorKind::TimedOut {
                return true;
            }
        }
        let text = err.to_string();
        if text.contains("timed out") || text.contains("deadline has elapsed") {
            return true;
        }
        current = err.source();
    }
    false
}
