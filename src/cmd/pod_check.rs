//! `pod-check` (docs/commands.md § pod-check): reads this member's Pod and reports hazards that are
//! invisible while its containers run and fatal when one is recreated — a
//! non-optional reference to a ConfigMap or Secret that no longer exists, or a
//! container already stuck waiting for a configuration reason (field report
//! #373). The findings come from [`crate::evidence::pod`]; this module adds
//! the budget, the client and the output.
//!
//! Exit codes: 0 clean, 40 hazards found, 2 when the Pod could not be checked
//! at all. "Could not check" is never "clean": a missing `--pod-name` or
//! `--namespace`, no kubeconfig or service account, a 403 (missing RBAC), the
//! Pod not found, a 5xx, no answer within `--timeout`, or a body that does not
//! parse all end with exit 2, `"outcome": "error"` and an `error` object whose
//! `kind` tells them apart and whose `class` says whether the agent's own
//! configuration (`configuration`) or the API (`api`) is at fault.
//!
//! The sidecar runs the same check periodically through [`run_check`] (or
//! [`check_pod`] with a client it keeps).

use std::path::PathBuf;
use std::time::Duration;

use serde::Serialize;
use tokio::time::{timeout_at, Instant};

use crate::cli::PodCheckArgs;
use crate::error::chain;
use crate::evidence::client::client;
pub use crate::evidence::pod::{check_pod, Hazard, PodCheckError, PodReport};
use crate::exit::Exit;
use crate::output::emit;

/// What to say when hazards are found.
pub const REMEDY: &str = "recreate the missing objects, or replace the Pod with one that does not \
     reference them (for a member of an adopted etcd-operator cluster: delete the Pod so the \
     operator rebuilds it without the reference, one member at a time, checking quorum between \
     each)";

/// Which Pod to check and how, validated from [`PodCheckArgs`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodCheckConfig {
    /// The Pod's namespace.
    pub namespace: String,
    /// The Pod's name.
    pub pod_name: String,
    /// A kubeconfig file; `None` means the in-cluster service account.
    pub kubeconfig: Option<PathBuf>,
    /// The budget for the whole check, client setup included.
    pub timeout: Duration,
}

/// The arguments do not say which Pod to check.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UsageError {
    /// No `--pod-name`/`POD_NAME`.
    #[error("--pod-name (POD_NAME) is required: the name of the Pod to check")]
    NoPodName,
    /// No `--namespace`/`POD_NAMESPACE`.
    #[error("--namespace (POD_NAMESPACE) is required: the namespace of the Pod to check")]
    NoNamespace,
    /// A name that cannot be an object name (it would change the URL path).
    #[error("{flag} {value:?} is not a valid object name")]
    InvalidName {
        /// The flag it came from.
        flag: &'static str,
        /// The value given.
        value: String,
    },
}

impl PodCheckConfig {
    /// Validates the arguments; no I/O.
    pub fn from_args(args: &PodCheckArgs) -> Result<Self, UsageError> {
        let pod_name = non_empty(args.pod_name.as_deref()).ok_or(UsageError::NoPodName)?;
        let namespace = non_empty(args.namespace.as_deref()).ok_or(UsageError::NoNamespace)?;
        for (flag, value) in [("--pod-name", pod_name), ("--namespace", namespace)] {
            if !valid_name(value) {
                return Err(UsageError::InvalidName {
                    flag,
                    value: value.to_owned(),
                });
            }
        }
        Ok(PodCheckConfig {
            namespace: namespace.to_owned(),
            pod_name: pod_name.to_owned(),
            kubeconfig: args
                .kubeconfig
                .clone()
                .filter(|p| !p.as_os_str().is_empty()),
            timeout: args.timeout,
        })
    }
}

fn non_empty(s: Option<&str>) -> Option<&str> {
    s.map(str::trim).filter(|s| !s.is_empty())
}

/// Object names are DNS subdomains at most: lowercase alphanumerics, `-`, `.`.
fn valid_name(s: &str) -> bool {
    s.len() <= 253
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
}

/// One check within `config.timeout`: builds a client (kubeconfig or
/// in-cluster), reads the Pod and checks its references. The sidecar may call
/// this on every period; a caller that keeps a client calls [`check_pod`].
pub async fn run_check(config: &PodCheckConfig) -> Result<PodReport, PodCheckError> {
    let deadline = Instant::now() + config.timeout;
    let kube = timeout_at(deadline, client(config.kubeconfig.as_ref(), config.timeout))
        .await
        .map_err(|_| PodCheckError::ClientTimeout)??;
    check_pod(&kube, &config.namespace, &config.pod_name, deadline).await
}

/// `outcome` in the JSON document.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
enum Outcome {
    /// Every reference resolves and no container is stuck.
    Clean,
    /// At least one hazard.
    Hazards,
    /// The Pod could not be checked.
    Error,
}

/// The `error` object of the JSON document.
#[derive(Debug, Serialize)]
struct ErrorDoc {
    /// `usage`, `internal`, or [`PodCheckError::kind`].
    kind: &'static str,
    /// `configuration` (the agent's flags, credentials or RBAC) or `api`.
    class: &'static str,
    /// The full message.
    message: String,
}

/// The JSON document of `pod-check`, one for every outcome.
#[derive(Debug, Serialize)]
struct Doc<'a> {
    outcome: Outcome,
    exit_code: u8,
    namespace: Option<&'a str>,
    pod: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    phase: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    checked_references: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    checked_objects: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    hazards: Option<&'a [Hazard]>,
    #[serde(skip_serializing_if = "Option::is_none")]
    remedy: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<ErrorDoc>,
}

impl<'a> Doc<'a> {
    fn error(
        exit: Exit,
        namespace: Option<&'a str>,
        pod: Option<&'a str>,
        error: ErrorDoc,
    ) -> Self {
        Doc {
            outcome: Outcome::Error,
            exit_code: exit.code(),
            namespace,
            pod,
            phase: None,
            checked_references: None,
            checked_objects: None,
            hazards: None,
            remedy: None,
            error: Some(error),
        }
    }
}

/// Runs `pod-check`: 0 clean, 40 hazards, 2 configuration error, 41 the Pod could not be checked.
pub fn run(args: &PodCheckArgs) -> crate::error::Result<Exit> {
    let format = args.output.format;
    let config = match PodCheckConfig::from_args(args) {
        Ok(config) => config,
        Err(e) => {
            let exit = Exit::Usage;
            let doc = Doc::error(
                exit,
                non_empty(args.namespace.as_deref()),
                non_empty(args.pod_name.as_deref()),
                ErrorDoc {
                    kind: "usage",
                    class: "configuration",
                    message: e.to_string(),
                },
            );
            emit(
                format,
                &format!("pod-check: {e} (exit {})", exit.code()),
                &doc,
            )?;
            return Ok(exit);
        }
    };
    let subject = format!("{}/{}", config.namespace, config.pod_name);
    let ns = Some(config.namespace.as_str());
    let pod = Some(config.pod_name.as_str());

    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            let exit = Exit::Internal;
            let message = format!("cannot start the async runtime: {e}");
            let human = format!("pod-check {subject}: {message} (exit {})", exit.code());
            let doc = Doc::error(
                exit,
                ns,
                pod,
                ErrorDoc {
                    kind: "internal",
                    class: "internal",
                    message,
                },
            );
            emit(format, &human, &doc)?;
            return Ok(exit);
        }
    };

    match runtime.block_on(run_check(&config)) {
        Ok(report) => {
            let (exit, outcome) = if report.is_clean() {
                (Exit::Ok, Outcome::Clean)
            } else {
                (Exit::Hazards, Outcome::Hazards)
            };
            let items: Vec<super::event::Item> = report
                .hazards
                .iter()
                .map(|h| super::event::Item {
                    reason: h.kind().to_owned(),
                    key: format!("{}/{}", h.kind(), h.message()),
                    message: h.message().to_owned(),
                })
                .collect();
            super::event::report(
                config.kubeconfig.as_ref(),
                &config.namespace,
                &config.pod_name,
                report.uid.as_deref(),
                &items,
            );
            let human = human_report(&subject, &report, exit);
            let doc = Doc {
                outcome,
                exit_code: exit.code(),
                namespace: ns,
                pod,
                phase: report.phase.as_deref(),
                checked_references: Some(report.checked_references),
                checked_objects: Some(report.checked_objects),
                hazards: Some(&report.hazards),
                remedy: (!report.is_clean()).then_some(REMEDY),
                error: None,
            };
            emit(format, &human, &doc)?;
            Ok(exit)
        }
        Err(e) => {
            // Not a verdict about the Pod: 2 when the agent's configuration or
            // RBAC is at fault, 41 when the API could not answer.
            let exit = if e.is_configuration() {
                Exit::Usage
            } else {
                Exit::PodCheckFailed
            };
            tracing::debug!(error = %e, kind = e.kind(), "pod-check could not check");
            let message = chain(&e);
            let human = format!(
                "pod-check {subject}: cannot check the Pod, so it is NOT known to be clean: {message} (exit {})",
                exit.code()
            );
            let doc = Doc::error(
                exit,
                ns,
                pod,
                ErrorDoc {
                    kind: e.kind(),
                    class: if e.is_configuration() {
                        "configuration"
                    } else {
                        "api"
                    },
                    message,
                },
            );
            emit(format, &human, &doc)?;
            Ok(exit)
        }
    }
}

fn human_report(subject: &str, report: &PodReport, exit: Exit) -> String {
    let checked = format!(
        "{} reference{} to {} object{} checked",
        report.checked_references,
        plural(report.checked_references),
        report.checked_objects,
        plural(report.checked_objects)
    );
    if report.is_clean() {
        return format!("pod-check {subject}: clean ({checked}, all exist; no container stuck)");
    }
    let n = report.hazards.len();
    let mut out = format!(
        "pod-check {subject}: {n} hazard{} ({checked}) (exit {})\n",
        plural(n),
        exit.code()
    );
    for h in &report.hazards {
        out.push_str("  ");
        out.push_str(h.message());
        out.push('\n');
    }
    out.push_str("remedy: ");
    out.push_str(REMEDY);
    out
}

fn plural(n: usize) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::output::Format;

    fn args(pod: Option<&str>, ns: Option<&str>) -> PodCheckArgs {
        PodCheckArgs {
            pod_name: pod.map(str::to_owned),
            namespace: ns.map(str::to_owned),
            kubeconfig: None,
            output: crate::cli::OutputArgs {
                format: Format::Text,
            },
            timeout: Duration::from_secs(10),
        }
    }

    #[test]
    fn the_pod_must_be_named() {
        assert_eq!(
            PodCheckConfig::from_args(&args(None, Some("tenant-a"))),
            Err(UsageError::NoPodName)
        );
        assert_eq!(
            PodCheckConfig::from_args(&args(Some(" "), Some("tenant-a"))),
            Err(UsageError::NoPodName)
        );
        assert_eq!(
            PodCheckConfig::from_args(&args(Some("etcd-0"), Some(""))),
            Err(UsageError::NoNamespace)
        );
        assert!(matches!(
            PodCheckConfig::from_args(&args(Some("../secrets/x"), Some("tenant-a"))),
            Err(UsageError::InvalidName {
                flag: "--pod-name",
                ..
            })
        ));
        let ok = PodCheckConfig::from_args(&args(Some("etcd-0"), Some("tenant-a")));
        assert_eq!(
            ok.map(|c| (c.pod_name, c.namespace)),
            Ok(("etcd-0".to_owned(), "tenant-a".to_owned()))
        );
    }
}
