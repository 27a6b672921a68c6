//! The sidecar keeps the witness Lease (`evidence::lease`, docs/commands.md § serve): written
//! as soon as the local member answers, renewed every `--witness-interval`
//! with the newest position proven on the member's disk and the incarnation
//! this Pod start's verdict names. Its mark is preflight's to check, before
//! etcd starts. The sidecar reads it once at boot for a Pod that runs etcd
//! without preflight only ([`boot_witness`]): with a verdict, the position that
//! verdict held the start to governs (a mark of another history, read back,
//! would hold every later Pod not ready).
//!
//! Every call is bounded by `--kube-timeout`. A failure is logged and counted
//! (`etcd_agent_witness_writes_total{result}`) and never stops `serve`: the
//! witness informs the next `preflight`, it must not take the running member
//! out of service.
//!
//! The IDs in the Lease change only while the member is consistent with its
//! expected identity: a member answering under other IDs (a foreign volume
//! started anyway) leaves the Lease as it is, so the evidence of what ran
//! before is not overwritten by what should not be running.

use tokio::sync::watch;
use tokio::time::{Instant, MissedTickBehavior};
use tokio_util::sync::CancellationToken;

use super::config::KubeConfig;
use super::identity::Identity;
use super::metrics::{Metrics, Outcome};
use crate::evidence::client::ApiError;
use crate::evidence::kube;
use crate::evidence::lease::{self, Observed, Written};

/// The witness Lease as read at boot, for a Pod that runs etcd without
/// preflight: its mark, and how a sentence names it and what clears it.
#[derive(Debug, Clone)]
pub struct BootWitness {
    /// What the Lease recorded.
    pub mark: crate::evidence::mark::Mark,
    /// "the witness Lease etcd-witness-<member>".
    pub name: String,
    /// `kubectl -n <ns> delete lease etcd-witness-<member>`.
    pub clear: String,
}

/// The Lease's mark, read once at boot within `--kube-timeout`; `None` when
/// there is none, it records no usable IDs, or it cannot be read (logged).
pub async fn boot_witness(conf: &KubeConfig) -> Option<BootWitness> {
    let client = match kube::client(&conf.target, conf.timeout).await {
        Ok(c) => c,
        Err(e) => {
            tracing::warn!(error = %e, "cannot read the witness Lease at boot");
            return None;
        }
    };
    let deadline = Instant::now() + conf.timeout;
    let t = &conf.target;
    match lease::read(&client, &t.namespace, &t.member_name, deadline).await {
        Ok(Some(rec)) => {
            tracing::info!(lease = %rec.name, raft_index = rec.raft_index.unwrap_or_default(), "read the witness Lease at boot");
            Some(BootWitness {
                mark: rec.mark()?,
                name: format!("the witness Lease {}", rec.name),
                clear: format!("kubectl -n {} delete lease {}", t.namespace, rec.name),
            })
        }
        Ok(None) => None,
        Err(e) => {
            tracing::warn!(error = %e, "cannot read the witness Lease at boot");
            None
        }
    }
}

/// Writes the Lease as soon as the local member answers, then every
/// `conf.witness_interval`, until `shutdown`.
pub async fn run(
    conf: KubeConfig,
    pod_uid: Option<String>,
    mut identity: watch::Receiver<Identity>,
    metrics: Metrics,
    shutdown: CancellationToken,
) {
    let mut client: Option<::kube::Client> = None;
    let mut tick = tokio::time::interval(conf.witness_interval);
    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let duration_secs = i32::try_from(conf.witness_interval.as_secs().saturating_mul(3))
        .unwrap_or(i32::MAX)
        .max(1);
    // Until the first attempt, every new identity may be the first answer.
    let mut attempted = false;
    loop {
        tokio::select! {
            biased;
            () = shutdown.cancelled() => return,
            _ = tick.tick() => {}
            Ok(()) = identity.changed(), if !attempted => {}
        }
        let (seen, consistent) = {
            let id = identity.borrow();
            let terms = id.facts.witness.clone();
            match (&id.facts.member, id.facts.member_answered) {
                (Some(m), true) => (
                    Observed {
                        member_id: m.member_id,
                        cluster_id: m.cluster_id,
                        position: id.facts.durable,
                        incarnation: terms.incarnation,
                        rebase: terms
                            .rebase
                            .then(|| terms.rebase_by.clone().unwrap_or_default()),
                        pod_name: conf.target.member_name.clone(),
                        pod_uid: pod_uid.clone(),
                    },
                    id.facts.consistent,
                ),
                _ => continue,
            }
        };
        attempted = true;
        let c = match kube::cached_client(&mut client, &conf.target, conf.timeout).await {
            Ok(c) => c,
            Err(e) => {
                Metrics::count(&metrics.witness_writes, Outcome::error);
                tracing::warn!(error = %e, "cannot write the witness Lease");
                continue;
            }
        };
        let deadline = Instant::now() + conf.timeout;
        let t = &conf.target;
        let result = tokio::select! {
            () = shutdown.cancelled() => return,
            r = lease::write(&c, &t.namespace, &t.member_name, &seen, consistent, duration_secs, deadline) => r,
        };
        match result {
            Ok(Written::Created(rec)) => {
                Metrics::count(&metrics.witness_writes, Outcome::ok);
                metrics
                    .witness_raft_index
                    .set(i64::try_from(rec.raft_index.unwrap_or_default()).unwrap_or(i64::MAX));
                tracing::info!(lease = %rec.name, member_id = %seen.member_id, cluster_id = %seen.cluster_id, raft_index = rec.raft_index.unwrap_or_default(), "created the witness Lease");
            }
            Ok(Written::Renewed(rec)) => {
                Metrics::count(&metrics.witness_writes, Outcome::ok);
                metrics
                    .witness_raft_index
                    .set(i64::try_from(rec.raft_index.unwrap_or_default()).unwrap_or(i64::MAX));
                tracing::debug!(lease = %rec.name, raft_index = rec.raft_index.unwrap_or_default(), "renewed the witness Lease");
            }
            Ok(Written::Contradicts(rec)) => {
                Metrics::count(&metrics.witness_writes, Outcome::error);
                tracing::warn!(
                    lease = %rec.name,
                    lease_member_id = %rec.member_id.map(|id| id.to_string()).unwrap_or_default(),
                    lease_cluster_id = %rec.cluster_id.map(|id| id.to_string()).unwrap_or_default(),
                    member_id = %seen.member_id,
                    cluster_id = %seen.cluster_id,
                    "the witness Lease records other IDs than the local member's, which is not consistent with its expected identity: the Lease is left as it is"
                );
            }
            Err(e) => {
                let outcome = match e {
                    ApiError::Timeout { .. } => Outcome::timeout,
                    _ => Outcome::error,
                };
                Metrics::count(&metrics.witness_writes, outcome);
                tracing::warn!(error = %e, "cannot write the witness Lease; retrying at the next renewal");
            }
        }
    }
}
