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
#[derive(Debug, Clone, Default)]
pub struct Boot {
    /// The WAL at boot.
    pub wal: Option<WalIdentity>,
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
        loop {
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
            let identity = self.publish(&last, &answer, polled);
            let ready = identity.facts.consistent;
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
        self.health
            .set_not_serving::<MemberAgentServer<super::grpc::AgentService>>()
            .await;
        self.health
            .set_service_status("", ServingStatus::NotServing)
            .await;
        self.metrics.ready.set(0);
    }

    fn publish(
        &mut self,
        last: &Option<LocalMember>,
        answer: &Result<(), PollError>,
        polled: bool,
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
            // Only what was polled just now moves the mark (a kept answer is old).
            match self.witness.check(m) {
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
