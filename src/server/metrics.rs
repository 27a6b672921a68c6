//! Prometheus metrics of the sidecar (`/metrics`: Prometheus text 0.0.4, or
//! OpenMetrics text when the scraper's `Accept` asks for it), all prefixed
//! `etcd_agent_`. Gauges mirror the published identity; counters count what the
//! sidecar did (polls, reports, operator reads) by outcome, so an alert can tell a
//! member that is wrong from an agent that cannot see.

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use super::identity::Identity;

/// How an operation ended.
#[derive(Debug, Clone, Copy, Hash, PartialEq, Eq, EncodeLabelValue)]
#[allow(non_camel_case_types)]
pub enum Outcome {
    /// It succeeded.
    ok,
    /// It failed with an answer (an error status).
    error,
    /// It got no answer in time.
    timeout,
}

/// The `result` label.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabel {
    /// The outcome.
    pub result: Outcome,
}

/// Labels of `etcd_agent_member_info`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct InfoLabels {
    /// Member name.
    pub name: String,
    /// Member ID (hex).
    pub member_id: String,
    /// Cluster ID (hex).
    pub cluster_id: String,
    /// etcd version.
    pub etcd_version: String,
}

/// Labels of `etcd_agent_preflight_verdict`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct VerdictLabel {
    /// The verdict name (`start`, `refuse-empty-formed`, …).
    pub verdict: String,
}

/// Every metric, cheap to clone (each is an `Arc` inside).
#[derive(Debug, Clone, Default)]
pub struct Metrics {
    /// 1 when `/readyz` answers 200.
    pub ready: Gauge,
    /// 1 when the identity is consistent.
    pub consistent: Gauge,
    /// 1 when the local member answered the last poll.
    pub member_answered: Gauge,
    /// 1 when the local member knows a leader.
    pub has_leader: Gauge,
    /// The local member's raft term.
    pub raft_term: Gauge,
    /// The local member's raft commit index.
    pub raft_index: Gauge,
    /// The local member's backend size.
    pub db_size: Gauge,
    /// The identity's sequence number.
    pub sequence: Gauge,
    /// Number of consistency reasons (failed conditions).
    pub inconsistencies: Gauge,
    /// Hazards found by the last pod-check.
    pub hazards: Gauge,
    /// Open WatchIdentity streams.
    pub watchers: Gauge,
    /// preflight's exit code for this Pod start (-1 until a verdict file of this
    /// Pod start is read).
    pub preflight_exit_code: Gauge,
    /// 1, labelled with this Pod start's preflight verdict (no series before one).
    pub preflight_verdict: Family<VerdictLabel, Gauge>,
    /// Polls of the local member, by result.
    pub polls: Family<ResultLabel, Counter>,
    /// Reports to the collector, by result.
    pub reports: Family<ResultLabel, Counter>,
    /// Reads of the operator's records, by result.
    pub operator_reads: Family<ResultLabel, Counter>,
    /// Writes (create or renewal) of the witness Lease, by result.
    pub witness_writes: Family<ResultLabel, Counter>,
    /// The raft index the witness Lease holds after the last write (0 before one).
    pub witness_raft_index: Gauge,
    /// 1, labelled with the member's identity.
    pub member_info: Family<InfoLabels, Gauge>,
}

impl Metrics {
    /// Registers every metric under the `etcd_agent` prefix.
    pub fn register(&self) -> Registry {
        let mut r = Registry::with_prefix("etcd_agent");
        r.register(
            "ready",
            "1 when /readyz answers 200: the member answers, has a leader and has the expected identity",
            self.ready.clone(),
        );
        r.register(
            "consistent",
            "1 when the member's identity equals the expected one and it has a leader",
            self.consistent.clone(),
        );
        r.register(
            "member_answered",
            "1 when the local member answered the last poll",
            self.member_answered.clone(),
        );
        r.register(
            "has_leader",
            "1 when the local member knows a leader",
            self.has_leader.clone(),
        );
        r.register(
            "raft_term",
            "Raft term of the local member",
            self.raft_term.clone(),
        );
        r.register(
            "raft_index",
            "Raft commit index of the local member",
            self.raft_index.clone(),
        );
        r.register(
            "db_size_bytes",
            "Backend database size of the local member",
            self.db_size.clone(),
        );
        r.register(
            "identity_sequence",
            "Sequence number of the published identity (increases on every change)",
            self.sequence.clone(),
        );
        r.register(
            "inconsistencies",
            "Number of failed identity conditions (0 when consistent)",
            self.inconsistencies.clone(),
        );
        r.register(
            "hazards",
            "Latent Pod hazards found by the last pod-check",
            self.hazards.clone(),
        );
        r.register(
            "watchers",
            "Open WatchIdentity streams",
            self.watchers.clone(),
        );
        r.register(
            "preflight_exit_code",
            "Exit code of this Pod start's preflight (-1 until a verdict file of this Pod start is read)",
            self.preflight_exit_code.clone(),
        );
        r.register(
            "preflight_verdict",
            "1, labelled with this Pod start's preflight verdict (no series until preflight has written one)",
            self.preflight_verdict.clone(),
        );
        r.register(
            "identity_polls",
            "Polls of the local member by result",
            self.polls.clone(),
        );
        r.register(
            "reports",
            "IdentityCollector.Report calls by result",
            self.reports.clone(),
        );
        r.register(
            "operator_reads",
            "Reads of the operator's EtcdMember/EtcdCluster records by result",
            self.operator_reads.clone(),
        );
        r.register(
            "witness_writes",
            "Creates and renewals of the witness Lease by result (error includes a Lease left alone because it records other IDs)",
            self.witness_writes.clone(),
        );
        r.register(
            "witness_raft_index",
            "The raft index (high-water mark) the witness Lease holds after the last write",
            self.witness_raft_index.clone(),
        );
        r.register(
            "member_info",
            "1, labelled with the local member's name, IDs and etcd version",
            self.member_info.clone(),
        );
        r
    }

    /// Counts one outcome.
    pub fn count(family: &Family<ResultLabel, Counter>, result: Outcome) {
        family.get_or_create(&ResultLabel { result }).inc();
    }

    /// Mirrors a newly published identity.
    pub fn observe(&self, identity: &Identity, ready: bool) {
        let f = &identity.facts;
        self.ready.set(i64::from(ready));
        self.consistent.set(i64::from(f.consistent));
        self.member_answered.set(i64::from(f.member_answered));
        self.sequence.set(saturating_i64(identity.sequence));
        self.inconsistencies
            .set(saturating_i64(f.reasons.len() as u64));
        self.hazards.set(saturating_i64(f.hazards.len() as u64));
        self.preflight_exit_code
            .set(f.preflight.as_ref().map_or(-1, |v| i64::from(v.exit_code)));
        match &f.preflight {
            Some(v) => {
                let label = VerdictLabel {
                    verdict: v.verdict.clone(),
                };
                // One series only: the verdict preflight wrote last.
                if self.preflight_verdict.get(&label).is_none() {
                    self.preflight_verdict.clear();
                    self.preflight_verdict.get_or_create(&label).set(1);
                }
            }
            None => self.preflight_verdict.clear(),
        }
        match &f.member {
            Some(m) => {
                self.has_leader
                    .set(i64::from(f.member_answered && m.leader_id.is_some()));
                self.raft_term.set(saturating_i64(m.raft_term));
                self.raft_index.set(saturating_i64(m.raft_index));
                self.db_size.set(m.db_size);
                let labels = InfoLabels {
                    name: m.name.clone(),
                    member_id: m.member_id.to_string(),
                    cluster_id: m.cluster_id.to_string(),
                    etcd_version: m.etcd_version.clone(),
                };
                // One series only: drop the previous identity's when it changes.
                if self.member_info.get(&labels).is_none() {
                    self.member_info.clear();
                    self.member_info.get_or_create(&labels).set(1);
                }
            }
            None => {
                self.has_leader.set(0);
            }
        }
    }
}

fn saturating_i64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// The registry in the Prometheus text format (0.0.4).
pub fn render_prometheus(registry: &Registry) -> Result<String, std::fmt::Error> {
    let mut out = String::new();
    prometheus_client::encoding::prometheus_text::encode(&mut out, registry)?;
    Ok(out)
}

/// The registry as OpenMetrics text.
pub fn render(registry: &Registry) -> Result<String, std::fmt::Error> {
    let mut out = String::new();
    prometheus_client::encoding::text::encode(&mut out, registry)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::identity::PreflightVerdict;
    use crate::server::poller::initial_identity;

    fn verdict(name: &str, exit_code: i32) -> PreflightVerdict {
        PreflightVerdict {
            verdict: name.to_owned(),
            exit_code,
            reason: String::new(),
            remedy: String::new(),
            decided_at_unix: None,
            member_id: None,
            cluster_id: None,
            path: "/run/etcd-agent/preflight.json".to_owned(),
            witness: Default::default(),
        }
    }

    #[test]
    fn the_verdict_series_follows_the_newest_verdict() {
        let metrics = Metrics::default();
        let registry = metrics.register();
        let mut id = initial_identity("http://127.0.0.1:2379", std::time::SystemTime::now());
        metrics.observe(&id, false);
        let text = render_prometheus(&registry).unwrap_or_default();
        assert!(text.contains("etcd_agent_preflight_exit_code -1"), "{text}");
        assert!(!text.contains("etcd_agent_preflight_verdict{"), "{text}");

        // preflight refused, then (retried by the kubelet) allowed the start.
        for (name, code) in [("refuse-empty-formed", 10), ("start", 0)] {
            id.facts.preflight = Some(verdict(name, code));
            metrics.observe(&id, false);
            let text = render_prometheus(&registry).unwrap_or_default();
            assert!(
                text.contains(&format!(
                    "etcd_agent_preflight_verdict{{verdict=\"{name}\"}} 1"
                )),
                "{text}"
            );
            assert_eq!(
                text.matches("etcd_agent_preflight_verdict{").count(),
                1,
                "one series: {text}"
            );
            assert!(
                text.contains(&format!("etcd_agent_preflight_exit_code {code}")),
                "{text}"
            );
        }
    }
}
