//! The sidecar's view of Kubernetes, when `--kube` is on: the operator's
//! `EtcdMember`/`EtcdCluster` records (the expected identity) re-read every
//! `--kube-interval`, and the pod-check (latent hazards of this Pod) every
//! `--hazard-interval`. Each read is bounded by `--kube-timeout`.
//!
//! A failed read keeps the last good record: readiness must not follow the API
//! server's availability (an API outage would otherwise take every etcd member
//! out of its Service at once), but the failure is published with the identity.

use tokio::sync::watch;
use tokio::time::{Instant, MissedTickBehavior};
use tokio_util::sync::CancellationToken;

use super::config::KubeConfig;
use super::identity::{Hazard, OperatorIds};
use super::metrics::{Metrics, Outcome};
use super::poller::{HazardState, OperatorState};
use crate::evidence::events;
use crate::evidence::kube;
use crate::evidence::pod;

/// Runs until `shutdown`.
pub async fn run(
    conf: KubeConfig,
    operator: watch::Sender<OperatorState>,
    hazards: watch::Sender<HazardState>,
    metrics: Metrics,
    shutdown: CancellationToken,
) {
    let mut client: Option<::kube::Client> = None;
    // Hazards already reported as Events on this Pod (one Event each; the
    // API server's 409 says so too, this saves the call).
    let mut reported = std::collections::HashSet::new();
    let mut records = tokio::time::interval(conf.interval);
    records.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut checks = tokio::time::interval(conf.hazard_interval);
    checks.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        let read_records = tokio::select! {
            // The records first: the poller waits for them before publishing.
            biased;
            () = shutdown.cancelled() => return,
            _ = records.tick() => true,
            _ = checks.tick() => false,
        };
        let c = match kube::cached_client(&mut client, &conf.target, conf.timeout).await {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(error = %e, "cannot build a Kubernetes client");
                let message = e.to_string();
                if read_records {
                    Metrics::count(&metrics.operator_reads, Outcome::error);
                    operator.send_modify(|s| {
                        s.error = Some(message);
                        s.attempted = true;
                    });
                } else {
                    hazards.send_modify(|s| s.error = Some(message));
                }
                continue;
            }
        };
        let deadline = Instant::now() + conf.timeout;
        if read_records {
            let result = tokio::select! {
                () = shutdown.cancelled() => return,
                r = kube::fetch(&c, &conf.target, deadline) => r,
            };
            match result {
                Ok(record) => {
                    Metrics::count(&metrics.operator_reads, Outcome::ok);
                    let ids = OperatorIds {
                        member_id: record.member.member_id,
                        cluster_id: record.cluster.cluster_id,
                    };
                    operator.send_if_modified(|s| {
                        let new = OperatorState {
                            ids: Some(ids),
                            error: None,
                            attempted: true,
                        };
                        let changed = *s != new;
                        *s = new;
                        changed
                    });
                }
                Err(e) => {
                    let outcome = if e.is_timeout() {
                        Outcome::timeout
                    } else {
                        Outcome::error
                    };
                    Metrics::count(&metrics.operator_reads, outcome);
                    tracing::warn!(error = %e, "cannot read the operator's records; keeping the last one");
                    let message = e.to_string();
                    operator.send_if_modified(|s| {
                        let changed = s.error.as_deref() != Some(message.as_str()) || !s.attempted;
                        s.error = Some(message);
                        s.attempted = true;
                        changed
                    });
                }
            }
        } else {
            let result = tokio::select! {
                () = shutdown.cancelled() => return,
                r = pod::check_pod(&c, &conf.target.namespace, &conf.target.member_name, deadline) => r,
            };
            let new = match result {
                Ok(report) => {
                    report_hazards(&c, &conf.target, &report, &mut reported, deadline).await;
                    HazardState {
                        hazards: report.hazards.iter().map(hazard).collect(),
                        error: None,
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, "pod-check failed");
                    HazardState {
                        hazards: hazards.borrow().hazards.clone(),
                        error: Some(e.to_string()),
                    }
                }
            };
            hazards.send_if_modified(|s| {
                let changed = *s != new;
                *s = new;
                changed
            });
        }
    }
}

/// Each hazard not reported yet becomes a Warning Event on the Pod (reason:
/// the hazard's kind); a failure is logged and retried at the next check.
async fn report_hazards(
    client: &::kube::Client,
    target: &kube::KubeTarget,
    report: &pod::PodReport,
    reported: &mut std::collections::HashSet<String>,
    deadline: Instant,
) {
    let Some(uid) = report.uid.clone() else {
        return;
    };
    let pod_ref = events::PodRef {
        namespace: target.namespace.clone(),
        name: target.member_name.clone(),
        uid,
    };
    for h in &report.hazards {
        let key = format!("{}/{}", h.kind(), h.message());
        if reported.contains(&key) {
            continue;
        }
        match events::report(client, &pod_ref, h.kind(), &key, h.message(), deadline).await {
            Ok(_) => {
                reported.insert(key);
            }
            Err(e) => tracing::warn!(error = %e, "cannot report the hazard as an Event on the Pod"),
        }
    }
}

/// The pod-check's hazard as the identity carries it.
fn hazard(h: &pod::Hazard) -> Hazard {
    let subject = match h {
        pod::Hazard::MissingReference { reference, .. } => format!(
            "{}/{}",
            reference.object_kind.as_str(),
            reference.object_name
        ),
        pod::Hazard::StuckContainer { container, .. } => container.clone(),
    };
    Hazard {
        kind: h.kind().to_owned(),
        subject,
        message: h.message().to_owned(),
    }
}
