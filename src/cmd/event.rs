//! Refusals and hazards of the one-shot commands as Events on the Pod
//! (`evidence::events`): after the outcome is decided and the termination
//! message written, bounded by [`EVENT_TIMEOUT`], a failure logged — the
//! outcome and the exit code never depend on it.

use std::path::PathBuf;
use std::time::Duration;

use tokio::time::Instant;

use crate::evidence::client::client;
use crate::evidence::events::{self, PodRef, Reported};

/// The bound on reporting one command's Events (client setup included).
pub const EVENT_TIMEOUT: Duration = Duration::from_secs(3);

/// One Event to write: its reason, its dedupe key, its message.
pub struct Item {
    /// `reason`: the verdict's name, or the hazard's kind.
    pub reason: String,
    /// What makes it one Event per Pod (the verdict's name; kind and subject).
    pub key: String,
    /// The message (the verdict's reason).
    pub message: String,
}

/// Writes `items` as Warning Events on Pod `namespace/name` (`uid`: this Pod
/// start). Without a UID nothing is written (logged): the Event could not be
/// told from one of an earlier Pod of the same name.
pub fn report(
    kubeconfig: Option<&PathBuf>,
    namespace: &str,
    name: &str,
    uid: Option<&str>,
    items: &[Item],
) {
    if items.is_empty() {
        return;
    }
    let Some(uid) = uid.filter(|u| !u.trim().is_empty()) else {
        tracing::warn!(
            "POD_UID is not set: the outcome is not reported as an Event on the Pod (set POD_UID from the downward API)"
        );
        return;
    };
    let pod = PodRef {
        namespace: namespace.to_owned(),
        name: name.to_owned(),
        uid: uid.to_owned(),
    };
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            tracing::warn!(error = %e, "cannot start a runtime to write the Event");
            return;
        }
    };
    rt.block_on(async {
        let deadline = Instant::now() + EVENT_TIMEOUT;
        let c = match tokio::time::timeout_at(deadline, client(kubeconfig, EVENT_TIMEOUT)).await {
            Ok(Ok(c)) => c,
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "cannot write the Event on the Pod");
                return;
            }
            Err(_) => {
                tracing::warn!("cannot write the Event on the Pod: no client before the deadline");
                return;
            }
        };
        for item in items {
            match events::report(&c, &pod, &item.reason, &item.key, &item.message, deadline).await
            {
                Ok(Reported::Created) => {
                    tracing::info!(reason = %item.reason, pod = %pod.name, "reported as an Event on the Pod")
                }
                Ok(Reported::AlreadyReported) => {
                    tracing::info!(reason = %item.reason, pod = %pod.name, "already reported as an Event for this Pod")
                }
                Err(e) => tracing::warn!(error = %e, reason = %item.reason, "cannot write the Event on the Pod"),
            }
        }
    });
    // A lookup stuck in getaddrinfo must not hold the exit.
    rt.shutdown_background();
}
