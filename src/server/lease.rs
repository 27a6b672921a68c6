//! The sidecar keeps the witness Lease (`evidence::lease`, docs/commands.md § serve): written
//! as soon as the local member answers, renewed every `--witness-interval`
//! with the newest position proven on the member's disk and the incarnation
//! this Pod start's verdict names. Its mark is preflight's to check, before
//! etcd starts. The sidecar reads it once at boot for a Pod that runs etcd
//! without preflight only ([`boot_witness`]): with a verdict, the position that
//! verdict held the start to governs (a mark of another history, read back,
//! would hold every later Pod not ready).
//!
//! Between renewals, the Lease is renewed early whenever the position proven
//! on the member's disk moved past what the Lease records ([`EARLY_SPACING`]):
//! any raft index may be an acknowledged write, and the proven position only
//! moves on a poll, so this is at most one write per `--poll-interval` (and
//! never more than one a second) while the member takes writes, none while it
//! is idle. At shutdown ([`FINAL_BOUND`]), once etcd has exited, the poller
//! reads the position its WAL holds (`DurableTracker::at_rest`) and the Lease
//! is renewed one last time with it, so that a copy of the volume taken before
//! writes the member then acknowledged is behind the mark.
//!
//! What remains unrecorded: a sidecar that does not get to shut down (kill -9,
//! the node lost, an API server that does not answer within the bound) leaves
//! the Lease at the last renewal, which is at most one poll (the proven
//! position lags the commit index by one `--poll-interval`) plus one early
//! renewal's spacing and `--kube-timeout` behind what the member
//! acknowledged; without writes since, not behind at all. A copy of the volume
//! taken in that window and then put back is not told apart from the member's
//! own disk by the Lease.
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

/// The least time between two early renewals (those the proven position
/// moving past the Lease's asks for, between two `--witness-interval` ticks).
pub const EARLY_SPACING: std::time::Duration = std::time::Duration::from_secs(1);

/// The bound on the last renewal at shutdown, from SIGTERM: reading the WAL
/// (the poller, within [`super::poller::AT_REST_READ_BOUND`]) and writing the
/// Lease. Well within `--shutdown-grace` (10 s by default) and the Pod's
/// termination grace; a write that does not finish by then is abandoned and
/// logged.
pub const FINAL_BOUND: std::time::Duration = std::time::Duration::from_secs(5);

/// The position the poller found on disk at shutdown, for the last renewal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FinalMark {
    /// The member whose WAL it is.
    pub member_id: crate::disk::ids::MemberId,
    /// Its cluster.
    pub cluster_id: crate::disk::ids::ClusterId,
    /// The newest position proven on its disk.
    pub position: crate::evidence::mark::Position,
}

/// Why the Lease task woke.
enum Wake {
    /// `--witness-interval`.
    Tick,
    /// The identity changed.
    Changed,
    /// An early renewal held back by [`EARLY_SPACING`] is due.
    Deferred,
}

/// Writes the Lease as soon as the local member answers, then every
/// `conf.witness_interval` and early when the proven position moved past the
/// Lease's, until `shutdown`; then once more with the position `at_rest`
/// delivers (within [`FINAL_BOUND`]).
pub async fn run(
    conf: KubeConfig,
    pod_uid: Option<String>,
    mut identity: watch::Receiver<Identity>,
    metrics: Metrics,
    shutdown: CancellationToken,
    at_rest: tokio::sync::oneshot::Receiver<Option<FinalMark>>,
) {
    let mut client: Option<::kube::Client> = None;
    let mut tick = tokio::time::interval(conf.witness_interval);
    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let duration_secs = i32::try_from(conf.witness_interval.as_secs().saturating_mul(3))
        .unwrap_or(i32::MAX)
        .max(1);
    // Until the first attempt, every new identity may be the first answer.
    let mut attempted = false;
    // The raft index the Lease records (as last written), when the last write
    // and attempt were, and an early renewal held back until one is due.
    let mut recorded: Option<u64> = None;
    let mut last_attempt: Option<Instant> = None;
    let mut deferred = false;
    // What the member was last seen as, when it answered: the last renewal
    // writes it with the position found on disk.
    let mut last_seen: Option<(Observed, bool)> = None;
    loop {
        let early_at = last_attempt.map_or_else(Instant::now, |t| t + EARLY_SPACING);
        let wake = tokio::select! {
            biased;
            () = shutdown.cancelled() => break,
            _ = tick.tick() => Wake::Tick,
            () = tokio::time::sleep_until(early_at), if deferred => Wake::Deferred,
            Ok(()) = identity.changed() => Wake::Changed,
        };
        let (seen, consistent) = {
            let id = identity.borrow_and_update();
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
        last_seen = Some((seen.clone(), consistent));
        let moved = seen
            .position
            .is_some_and(|p| recorded.is_none_or(|r| p.raft_index > r));
        match wake {
            Wake::Tick => {}
            Wake::Changed | Wake::Deferred if !attempted => {}
            Wake::Changed | Wake::Deferred if !moved => {
                deferred = false;
                continue;
            }
            Wake::Changed | Wake::Deferred => {
                if last_attempt.is_some_and(|t| t.elapsed() < EARLY_SPACING) {
                    deferred = true;
                    continue;
                }
            }
        }
        attempted = true;
        deferred = false;
        last_attempt = Some(Instant::now());
        let deadline = Instant::now() + conf.timeout;
        let result = tokio::select! {
            () = shutdown.cancelled() => break,
            r = write_once(&mut client, &conf, &seen, consistent, duration_secs, deadline) => r,
        };
        if let Some(index) = report(&metrics, &seen, result, false) {
            recorded = Some(index);
        }
    }
    last_renewal(&conf, client, last_seen, &metrics, duration_secs, at_rest).await;
}

/// The last renewal at shutdown: waits for the position the poller found on
/// disk once etcd exited and writes it with what the member was last seen
/// as, all within [`FINAL_BOUND`]; logs what it recorded, or why nothing.
async fn last_renewal(
    conf: &KubeConfig,
    mut client: Option<::kube::Client>,
    last_seen: Option<(Observed, bool)>,
    metrics: &Metrics,
    duration_secs: i32,
    at_rest: tokio::sync::oneshot::Receiver<Option<FinalMark>>,
) {
    let bound = Instant::now() + FINAL_BOUND;
    let mark = match tokio::time::timeout_at(bound, at_rest).await {
        Ok(Ok(Some(mark))) => mark,
        Ok(Ok(None) | Err(_)) => {
            tracing::info!("shutting down: no position to record in the witness Lease");
            return;
        }
        Err(_) => {
            tracing::warn!(bound = ?FINAL_BOUND, "shutting down: the WAL was not read within the bound; the witness Lease keeps its last renewal");
            return;
        }
    };
    let Some((mut seen, consistent)) =
        last_seen.filter(|(s, _)| (s.member_id, s.cluster_id) == (mark.member_id, mark.cluster_id))
    else {
        tracing::info!("shutting down: the member was not seen under the WAL's IDs; the witness Lease is left as it is");
        return;
    };
    seen.position = Some(match seen.position {
        Some(p) => mark.position.max_by_index(p),
        None => mark.position,
    });
    let deadline = bound.min(Instant::now() + conf.timeout);
    let result = write_once(
        &mut client,
        conf,
        &seen,
        consistent,
        duration_secs,
        deadline,
    )
    .await;
    if report(metrics, &seen, result, true).is_none() {
        tracing::warn!(
            raft_index = mark.position.raft_index,
            "shutting down: the last renewal of the witness Lease failed; it keeps its previous mark, behind what the member's disk holds"
        );
    }
}

/// One write of the Lease.
async fn write_once(
    client: &mut Option<::kube::Client>,
    conf: &KubeConfig,
    seen: &Observed,
    consistent: bool,
    duration_secs: i32,
    deadline: Instant,
) -> Result<Written, (Outcome, String)> {
    let c = kube::cached_client(client, &conf.target, conf.timeout)
        .await
        .map_err(|e| (Outcome::error, e.to_string()))?;
    let t = &conf.target;
    lease::write(
        &c,
        &t.namespace,
        &t.member_name,
        seen,
        consistent,
        duration_secs,
        deadline,
    )
    .await
    .map_err(|e| match e {
        ApiError::Timeout { .. } => (Outcome::timeout, e.to_string()),
        _ => (Outcome::error, e.to_string()),
    })
}

/// Counts and logs a write; the raft index the Lease records when it was written.
fn report(
    metrics: &Metrics,
    seen: &Observed,
    result: Result<Written, (Outcome, String)>,
    last: bool,
) -> Option<u64> {
    match result {
        Ok(Written::Created(rec)) if !last => {
            Metrics::count(&metrics.witness_writes, Outcome::ok);
            let index = rec.raft_index.unwrap_or_default();
            metrics
                .witness_raft_index
                .set(i64::try_from(index).unwrap_or(i64::MAX));
            tracing::info!(lease = %rec.name, member_id = %seen.member_id, cluster_id = %seen.cluster_id, raft_index = index, "created the witness Lease");
            Some(index)
        }
        Ok(Written::Created(rec)) | Ok(Written::Renewed(rec)) => {
            Metrics::count(&metrics.witness_writes, Outcome::ok);
            let index = rec.raft_index.unwrap_or_default();
            metrics
                .witness_raft_index
                .set(i64::try_from(index).unwrap_or(i64::MAX));
            if last {
                tracing::info!(lease = %rec.name, raft_index = index, raft_term = rec.raft_term.unwrap_or_default(), "shutting down: recorded the position the member's disk holds in the witness Lease");
            } else {
                tracing::debug!(lease = %rec.name, raft_index = index, "renewed the witness Lease");
            }
            Some(index)
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
            None
        }
        Err((outcome, e)) => {
            Metrics::count(&metrics.witness_writes, outcome);
            tracing::warn!(error = %e, "cannot write the witness Lease; retrying at the next renewal");
            None
        }
    }
}
