//! The one task that writes the identity: it polls the local member every
//! `--poll-interval`, folds in what the other tasks learnt (the operator's record,
//! the pod-check's hazards) and the boot-time expectations, judges consistency, and
//! publishes on a `tokio::sync::watch` channel.
//!
//! A watch channel because every reader wants the *latest* identity, never a
//! backlog: a slow WatchIdentity client or a collector that was down skips
//! intermediate states instead of buffering them. The sequence number increases
//! only when the facts change, so "same sequence" means "same identity" for every
//! consumer; `observed_at` is refreshed on every poll without waking anyone.

use std::time::{Duration, SystemTime};

use tokio::sync::watch;
use tokio::time::{Instant, MissedTickBehavior};
use tokio_util::sync::CancellationToken;
use tonic_health::server::HealthReporter;
use tonic_health::ServingStatus;

use super::boot::VerdictState;
use super::identity::{
    assess, expect, Facts, Hazard, Identity, LocalMember, Observation, OperatorIds, WalIdentity,
};
use super::local::{LocalClient, PollError};
use super::metrics::{Metrics, Outcome};
use super::proto::member_agent_server::MemberAgentServer;

/// A look for the witness file, running in the blocking pool.
type Stat = tokio::task::JoinHandle<std::io::Result<std::fs::Metadata>>;

/// The bound on reading the WAL at shutdown ([`Poller::at_rest`]): its last
/// segment (at most 64 MB) and a lock probe, in the blocking pool. Within
/// [`super::lease::FINAL_BOUND`], which leaves the Lease write the rest.
pub const AT_REST_READ_BOUND: Duration = Duration::from_secs(2);

/// What the operator task last learnt.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OperatorState {
    /// The last record read (kept when a later read fails).
    pub ids: Option<OperatorIds>,
    /// Why the last read failed.
    pub error: Option<String>,
    /// At least one read was attempted.
    pub attempted: bool,
}

/// What the pod-check last found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HazardState {
    /// Hazards found by the last successful check.
    pub hazards: Vec<Hazard>,
    /// Why the last check failed.
    pub error: Option<String>,
}

/// The expectations read once at boot.
#[derive(Debug, Default)]
pub struct Boot {
    /// The WAL at boot.
    pub wal: Option<WalIdentity>,
    /// The read of the WAL at boot, while it has outlasted its bound.
    pub pending: Option<PendingWal>,
}

/// A read of the WAL at boot that had not finished within its bound: why the
/// member is not ready meanwhile, and where the read's result comes.
#[derive(Debug)]
pub struct PendingWal {
    /// The reason readiness gives.
    pub reason: String,
    /// The read's result, when it comes.
    pub result: tokio::sync::oneshot::Receiver<WalIdentity>,
}

impl Boot {
    /// Takes the result of a read that outlasted its bound, if it has come. A
    /// read whose thread ended without one (it panicked) counts as a read that
    /// failed at boot: no WAL at boot, as before the bound.
    pub fn settle(&mut self) {
        use tokio::sync::oneshot::error::TryRecvError;
        let Some(pending) = self.pending.as_mut() else {
            return;
        };
        match pending.result.try_recv() {
            Err(TryRecvError::Empty) => {}
            Ok(wal) => {
                tracing::info!(
                    state = %wal.state,
                    commit = wal.commit_index,
                    "read the WAL at boot, late"
                );
                self.wal = Some(wal);
                self.pending = None;
            }
            Err(TryRecvError::Closed) => {
                tracing::warn!("reading the WAL at boot failed");
                self.pending = None;
            }
        }
    }
}

/// Everything the poller reads and writes.
pub struct Poller {
    /// The high-water mark that survives restarts (the witness file).
    pub witness: super::witness::Witness,
    /// Which of the member's reported positions are proven on its disk.
    pub durable: crate::evidence::mark::DurableTracker,
    /// The member's WAL directory (read-only: its last segment proves a
    /// position the commit index no longer moves past).
    pub wal_dir: std::path::PathBuf,
    /// The incarnation the witnesses record when no verdict names one.
    pub incarnation: crate::evidence::mark::Incarnation,
    /// The witness Lease as read at boot: the mark of a Pod that runs etcd
    /// without preflight (dropped once a verdict of this Pod start is read,
    /// which holds the start to what preflight checked), and where it was seen
    /// below it (latched, as the witness file's).
    pub lease: Option<(super::lease::BootWitness, Option<u64>)>,
    /// Where the position found on disk at shutdown goes, for the witness
    /// Lease's last renewal (with `--kube`).
    pub final_mark: Option<tokio::sync::oneshot::Sender<Option<super::lease::FinalMark>>>,
    /// The local member.
    pub local: LocalClient,
    /// Boot-time expectations.
    pub boot: Boot,
    /// `--poll-interval`.
    pub interval: Duration,
    /// `--poll-timeout`.
    pub timeout: Duration,
    /// `Some` when the operator's records are consulted: how long to wait for the
    /// first read before publishing.
    pub operator_first_wait: Option<Duration>,
    /// The operator task's findings.
    pub operator: watch::Receiver<OperatorState>,
    /// The pod-check's findings.
    pub hazards: watch::Receiver<HazardState>,
    /// This Pod start's preflight verdict, as the verdict file watcher last read it.
    pub preflight: watch::Receiver<VerdictState>,
    /// How long to wait for the first read of the verdict file before publishing.
    pub preflight_first_wait: Duration,
    /// Where the identity is published.
    pub publish: watch::Sender<Identity>,
    /// The gRPC health service.
    pub health: HealthReporter,
    /// Metrics.
    pub metrics: Metrics,
}

/// The WAL's last segment once etcd has exited; `Ok(None)` while a process
/// holds a lock on one of its segments (etcd still runs: what it wrote last
/// may not be fsynced yet).
fn read_at_rest(
    wal_dir: &std::path::Path,
) -> Result<Option<crate::disk::wal::SegmentEnd>, crate::disk::wal::WalError> {
    let segments: Vec<std::path::PathBuf> = crate::disk::wal::list_segments(wal_dir)?
        .into_iter()
        .map(|s| s.path)
        .collect();
    if !crate::disk::lock::held_locks(&segments, crate::disk::lock::Probe::Ofd).is_empty() {
        return Ok(None);
    }
    crate::disk::wal::last_segment(wal_dir).map(Some)
}

/// The identity before the first poll (sequence 0: not yet observed).
pub fn initial_identity(endpoint: &str, started: SystemTime) -> Identity {
    Identity {
        sequence: 0,
        observed_at: started,
        facts: Facts {
            agent_started_at: started,
            agent_version: env!("CARGO_PKG_VERSION").to_owned(),
            endpoint: endpoint.to_owned(),
            member_answered: false,
            member_error: Some("not polled yet".to_owned()),
            member: None,
            durable: None,
            witness: Default::default(),
            preflight: None,
            wal_at_boot: None,
            expected: expect(None, None, None),
            consistent: false,
            reasons: vec!["the local member has not been polled yet".to_owned()],
            hazards: Vec::new(),
            hazards_error: None,
        },
    }
}

impl Poller {
    /// Runs until `shutdown`.
    pub async fn run(mut self, shutdown: CancellationToken) {
        if let Some(wait) = self.operator_first_wait {
            // Publishing before the operator's record is known would flip the
            // expectation (and perhaps readiness) a moment later.
            let _ = tokio::time::timeout(wait, self.operator.wait_for(|s| s.attempted)).await;
        }
        // Likewise the verdict file, when it is there already (serve restarted,
        // or run as a plain container after preflight).
        let _ = tokio::time::timeout(
            self.preflight_first_wait,
            self.preflight.wait_for(|s| s.attempted),
        )
        .await;
        let mut tick = tokio::time::interval(self.interval);
        tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let mut last: Option<LocalMember> = None;
        let mut answer: Result<(), PollError> = Err(PollError {
            timed_out: false,
            message: "not polled yet".to_owned(),
        });
        let mut last_ready: Option<bool> = None;
        let mut stat: Option<Stat> = None;
        // The member as last polled, when it was consistent then (with the
        // incarnation the witnesses record), `None` when it was not: what the
        // witnesses' last renewal at shutdown is about.
        let mut consistent: Option<(LocalMember, crate::evidence::mark::Incarnation)> = None;
        loop {
            // A read of the WAL at boot that outlasted its bound: taken before
            // the poll, so that a commit index it recorded is never set
            // against a member polled before it was read.
            self.boot.settle();
            let polled = tokio::select! {
                () = shutdown.cancelled() => break,
                _ = tick.tick() => true,
                Ok(()) = self.operator.changed() => false,
                Ok(()) = self.hazards.changed() => false,
                Ok(()) = self.preflight.changed() => false,
            };
            if polled {
                let deadline = Instant::now() + self.timeout;
                match self.local.poll(deadline).await {
                    Ok(member) => {
                        self.durable.observe(
                            member.member_id,
                            member.cluster_id,
                            crate::evidence::mark::Position {
                                raft_index: member.raft_index,
                                raft_term: member.raft_term,
                                revision: Some(member.revision),
                            },
                        );
                        if self.durable.to_check_on_disk().is_some() {
                            let wal_dir = self.wal_dir.clone();
                            let read = tokio::time::timeout(
                                self.timeout,
                                tokio::task::spawn_blocking(move || {
                                    crate::disk::wal::last_segment_end(&wal_dir)
                                }),
                            )
                            .await;
                            match read {
                                Ok(Ok(Ok((last_index, _)))) => self.durable.on_disk(last_index),
                                Ok(Ok(Err(e))) => {
                                    tracing::debug!(error = %e, "the WAL's last segment could not be read")
                                }
                                _ => tracing::debug!(
                                    "reading the WAL's last segment did not finish in time"
                                ),
                            }
                        }
                        Metrics::count(&self.metrics.polls, Outcome::ok);
                        if answer.is_err() {
                            tracing::info!(
                                endpoint = self.local.endpoint(),
                                member_id = %member.member_id,
                                cluster_id = %member.cluster_id,
                                "local member answers"
                            );
                        }
                        last = Some(member);
                        answer = Ok(());
                    }
                    Err(e) => {
                        let outcome = if e.timed_out {
                            Outcome::timeout
                        } else {
                            Outcome::error
                        };
                        Metrics::count(&self.metrics.polls, outcome);
                        if answer.is_ok() || last.is_none() {
                            tracing::warn!(endpoint = self.local.endpoint(), error = %e.message, "local member does not answer");
                        }
                        answer = Err(e);
                    }
                }
            }
            if polled {
                self.witness_still_there(&mut stat).await;
            }
            // Below a mark, is it the log or only the commit index? A member
            // replaying after a restart reports its commit index rising batch
            // by batch: a regression is latched only when the WAL on disk does
            // not reach the mark either.
            let wal_end = match (&answer, &last) {
                (Ok(()), Some(m)) if polled && self.below_a_mark(m) => self.wal_end().await,
                _ => None,
            };
            let identity = self.publish(&last, &answer, polled, wal_end);
            let ready = identity.facts.consistent;
            if polled && answer.is_ok() {
                consistent = last
                    .clone()
                    .filter(|_| ready)
                    .map(|m| (m, identity.facts.witness.incarnation.clone()));
            }
            self.metrics.observe(&identity, ready);
            if last_ready != Some(ready) {
                if ready {
                    tracing::info!(sequence = identity.sequence, "identity consistent: ready");
                } else {
                    tracing::warn!(reasons = ?identity.facts.reasons, "identity not consistent: not ready");
                }
                let status = if ready {
                    ServingStatus::Serving
                } else {
                    ServingStatus::NotServing
                };
                self.health.set_service_status("", status).await;
                self.health
                    .set_service_status(
                        <MemberAgentServer<super::grpc::AgentService> as tonic::server::NamedService>::NAME,
                        status,
                    )
                    .await;
                last_ready = Some(ready);
            }
        }
        // Not ready while shutting down: new requests go elsewhere.
        self.metrics.ready.set(0);
        self.health
            .set_not_serving::<MemberAgentServer<super::grpc::AgentService>>()
            .await;
        self.health
            .set_service_status("", ServingStatus::NotServing)
            .await;
        self.at_rest(consistent).await;
    }

    /// At shutdown: once etcd has exited (its WAL no longer locked), the
    /// position its WAL holds is on disk for good (`DurableTracker::at_rest`);
    /// the witness file is raised to it and it is handed to the witness
    /// Lease's last renewal. While etcd still runs (the sidecar stopped
    /// first), the newest position proven by the polls is recorded instead.
    /// Only for a member that was consistent when last polled; the read is
    /// bounded by [`AT_REST_READ_BOUND`]. Not reached when the sidecar is
    /// killed (kill -9, the node lost): then the witnesses keep the last
    /// renewal, at most a poll behind (see `server::lease`).
    async fn at_rest(
        &mut self,
        consistent: Option<(LocalMember, crate::evidence::mark::Incarnation)>,
    ) {
        let mark = match consistent {
            None => {
                tracing::info!("shutting down: the member was not consistent when last polled; the witnesses keep their last mark");
                None
            }
            Some((m, incarnation)) => {
                let wal_dir = self.wal_dir.clone();
                let read = tokio::time::timeout(
                    AT_REST_READ_BOUND,
                    tokio::task::spawn_blocking(move || read_at_rest(&wal_dir)),
                )
                .await;
                let ids = (m.member_id, m.cluster_id);
                let (position, from) = match read {
                    Ok(Ok(Ok(Some(end)))) => (
                        self.durable.at_rest(ids.0, ids.1, &end),
                        if end.ids == Some(ids) && end.commit.is_some() {
                            "its WAL, etcd having exited"
                        } else {
                            "the polls (the WAL is of other IDs or holds no HardState)"
                        },
                    ),
                    Ok(Ok(Ok(None))) => (
                        self.durable.proven(ids.0, ids.1),
                        "the polls (etcd still holds its WAL)",
                    ),
                    Ok(Ok(Err(e))) => {
                        tracing::warn!(error = %e, "shutting down: the WAL's last segment could not be read");
                        (
                            self.durable.proven(ids.0, ids.1),
                            "the polls (the WAL could not be read)",
                        )
                    }
                    _ => {
                        tracing::warn!(bound = ?AT_REST_READ_BOUND, "shutting down: reading the WAL's last segment did not finish within the bound");
                        (
                            self.durable.proven(ids.0, ids.1),
                            "the polls (the WAL was not read in time)",
                        )
                    }
                };
                if let Some(p) = position {
                    self.witness.observe(&m, p, &incarnation);
                    tracing::info!(
                        member_id = %m.member_id,
                        raft_index = p.raft_index,
                        raft_term = p.raft_term,
                        from,
                        "shutting down: the newest position proven on the member's disk, for the witnesses' last renewal"
                    );
                }
                position.map(|position| super::lease::FinalMark {
                    member_id: m.member_id,
                    cluster_id: m.cluster_id,
                    position,
                })
            }
        };
        if let Some(tx) = self.final_mark.take() {
            let _ = tx.send(mark);
        }
    }

    /// Looks for the witness file where its mark was written: a file someone
    /// removed (the runbook's acknowledgement of a regression) takes the mark
    /// and the latch in memory with it. The stat runs in the blocking pool,
    /// bounded by the poll timeout; one that hangs (a stuck volume) is not
    /// started again until it has returned, says nothing (its answer is old
    /// by then: the next poll looks again), nor does any error but "not
    /// found".
    async fn witness_still_there(&mut self, pending: &mut Option<Stat>) {
        if let Some(hung) = pending.take() {
            if !hung.is_finished() {
                *pending = Some(hung);
                return;
            }
        }
        let Some(path) = self.witness.kept_in().map(std::path::Path::to_path_buf) else {
            return;
        };
        let mut stat = tokio::task::spawn_blocking(move || std::fs::symlink_metadata(&path));
        match tokio::time::timeout(self.timeout, &mut stat).await {
            Ok(Ok(Err(e))) if e.kind() == std::io::ErrorKind::NotFound => {
                // Gone unless this sidecar removed it in the meantime.
                if self.witness.kept_in().is_some() {
                    self.witness.removed();
                }
            }
            Ok(Ok(Ok(_))) => {}
            Ok(Ok(Err(e))) => {
                tracing::debug!(error = %e, "cannot look for the witness file")
            }
            Ok(Err(e)) => tracing::error!(error = %e, "looking for the witness file panicked"),
            Err(_) => {
                tracing::debug!("looking for the witness file did not finish in time");
                *pending = Some(stat);
            }
        }
    }

    /// The member's raft index is below the witness file's mark or the boot
    /// Lease's, under the same IDs.
    fn below_a_mark(&self, m: &LocalMember) -> bool {
        let ids = (m.member_id, m.cluster_id);
        let below = |mark: &crate::evidence::mark::Mark| {
            (mark.member_id, mark.cluster_id) == ids && m.raft_index < mark.position.raft_index
        };
        self.witness.mark().is_some_and(below)
            || self.lease.as_ref().is_some_and(|(l, _)| below(&l.mark))
    }

    /// How far the WAL on disk reaches (its last segment), bounded by the poll
    /// timeout; `None` when it cannot be told.
    async fn wal_end(&self) -> Option<u64> {
        let wal_dir = self.wal_dir.clone();
        let read = tokio::time::timeout(
            self.timeout,
            tokio::task::spawn_blocking(move || crate::disk::wal::last_segment_end(&wal_dir)),
        )
        .await;
        match read {
            Ok(Ok(Ok((index, _)))) => Some(index),
            _ => None,
        }
    }

    fn publish(
        &mut self,
        last: &Option<LocalMember>,
        answer: &Result<(), PollError>,
        polled: bool,
        wal_end: Option<u64>,
    ) -> Identity {
        let operator = self.operator.borrow().clone();
        let hazards = self.hazards.borrow().clone();
        let preflight = self.preflight.borrow().clone();
        let mut expected = expect(
            operator.ids,
            preflight.verdict.as_ref(),
            self.boot.wal.as_ref(),
        );
        expected.operator_enabled = self.operator_first_wait.is_some();
        expected.operator_error = operator.error.clone();
        let endpoint = self.local.endpoint();
        let member_answer = match (answer, last) {
            (Ok(()), Some(m)) => Ok(m),
            (Err(e), _) => Err(e.message.as_str()),
            (Ok(()), None) => Err("no answer yet"),
        };
        let mut reasons = assess(Observation {
            endpoint,
            answer: member_answer,
            expected: &expected,
            wal_at_boot: self.boot.wal.as_ref(),
            preflight: preflight.verdict.as_ref(),
            preflight_waiting: preflight.waiting.as_deref(),
            wal_at_boot_pending: self.boot.pending.as_ref().map(|p| p.reason.as_str()),
        });
        let terms = match preflight.verdict.as_ref() {
            Some(v) => v.witness.clone(),
            None => crate::evidence::mark::WitnessTerms {
                incarnation: self.incarnation.clone(),
                ..Default::default()
            },
        };
        if preflight.verdict.is_some() {
            self.witness.align(&terms);
        }
        if preflight.verdict.is_some() {
            self.lease = None;
        }
        let durable = last
            .as_ref()
            .and_then(|m| self.durable.proven(m.member_id, m.cluster_id));
        if let (Ok(()), Some(m)) = (answer, last) {
            // The position preflight held this start to: the member catches
            // up to it (from its leader) before it is ready. Not latched: it
            // is below it only until it has caught up.
            if let Some(floor) = terms.floor.as_ref().filter(|f| m.raft_index < f.raft_index) {
                reasons.push(format!(
                    "raft index {} is below {}, the position preflight held this start to ({}): catching up from the leader",
                    m.raft_index, floor.raft_index, floor.source
                ));
            }
            // No preflight ran in this Pod (the member answers, no verdict):
            // the witness Lease's mark, of this member's history, is the one
            // a new Pod has; seen below it, the member lost data, and new
            // writes must not make it ready again.
            if let Some((lease, regressed)) = self.lease.as_mut().filter(|(l, _)| {
                (l.mark.member_id, l.mark.cluster_id) == (m.member_id, m.cluster_id)
                    && l.mark
                        .incarnation
                        .differs_from(&terms.incarnation)
                        .is_none()
            }) {
                let mark = lease.mark.position.raft_index;
                let lost = m.raft_index != 0
                    && m.raft_index < mark
                    && wal_end.is_none_or(|end| end < mark);
                if regressed.is_none() && lost {
                    *regressed = Some(m.raft_index);
                }
                if let Some(seen) = regressed {
                    reasons.push(format!(
                        "this member's raft index was seen at {seen}, below the high-water mark {mark} {} recorded for it, and no preflight ran in this Pod to check its data directory: it lost committed data (re-bootstrapped on an empty data dir, or put back to an older copy?); it stays not ready. If the Lease is a leftover of another cluster of this member's name, or the rollback was deliberate, clear it ({}) and restart the Pod",
                        lease.name, lease.clear
                    ));
                }
            }
            // Only what was polled just now moves the mark (a kept answer is old).
            match self.witness.check(m, wal_end) {
                Some(reason) => reasons.push(reason),
                None if reasons.is_empty() && polled => {
                    if let Some(p) = durable {
                        self.witness.observe(m, p, &terms.incarnation);
                    }
                }
                None => {}
            }
        }
        let facts = Facts {
            agent_started_at: self.publish.borrow().facts.agent_started_at,
            agent_version: env!("CARGO_PKG_VERSION").to_owned(),
            endpoint: endpoint.to_owned(),
            member_answered: answer.is_ok(),
            member_error: answer.as_ref().err().map(|e| e.message.clone()),
            member: last.clone(),
            durable,
            witness: terms,
            preflight: preflight.verdict,
            wal_at_boot: self.boot.wal.clone(),
            expected,
            consistent: reasons.is_empty(),
            reasons,
            hazards: hazards.hazards,
            hazards_error: hazards.error,
        };
        let now = SystemTime::now();
        self.publish.send_if_modified(|current| {
            if polled || current.sequence == 0 {
                current.observed_at = now;
            }
            if current.facts == facts && current.sequence != 0 {
                return false;
            }
            current.facts = facts;
            current.sequence += 1;
            true
        });
        self.publish.borrow().clone()
    }
}
