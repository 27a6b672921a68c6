//! `fleet --serve`: the cluster-level conditions as Prometheus metrics, for
//! the alerts of `deploy/monitoring/` that no single sidecar can raise (a
//! quorum at risk, witnesses that disagree on the cluster ID). The registry is
//! built from the view at every scrape, so a condition that clears leaves no
//! series behind; the view is computed from the watched facts with the scrape's
//! clock, so ages are current.
//!
//! Every series carries the member's `namespace` and `cluster` as labels: a
//! scrape config keeps them with `honor_labels: true` (the ServiceMonitor of
//! `deploy/fleet/` sets `honorLabels`), as for kube-state-metrics.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use super::view::FleetView;

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ClusterLabels {
    namespace: String,
    cluster: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ConditionLabels {
    namespace: String,
    cluster: String,
    condition: String,
    severity: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct MemberLabels {
    namespace: String,
    cluster: String,
    member: String,
    verdict: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct UnreadLabels {
    resource: String,
    namespace: String,
    error: String,
}

fn i64_of(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// The metrics of `view`; `None` (before the first full view) exports
/// `etcd_agent_fleet_view_complete 0` and empty families.
pub fn registry(view: Option<&FleetView>) -> Registry {
    let mut r = Registry::default();
    let complete = Gauge::<i64>::default();
    let clusters = Gauge::<i64>::default();
    let members = Gauge::<i64>::default();
    let condition = Family::<ConditionLabels, Gauge>::default();
    let condition_secs = Family::<ConditionLabels, Gauge>::default();
    let voters = Family::<ClusterLabels, Gauge>::default();
    let healthy = Family::<ClusterLabels, Gauge>::default();
    let quorum = Family::<ClusterLabels, Gauge>::default();
    let refused = Family::<MemberLabels, Gauge>::default();
    let unread = Family::<UnreadLabels, Gauge>::default();
    if let Some(view) = view {
        complete.set(i64::from(view.complete));
        clusters.set(i64_of(view.clusters.len()));
        members.set(i64_of(view.summary.members));
        for c in &view.clusters {
            let cl = ClusterLabels {
                namespace: c.namespace.clone(),
                cluster: c.name.clone(),
            };
            voters.get_or_create(&cl).set(i64_of(c.voters));
            healthy.get_or_create(&cl).set(i64_of(c.healthy_voters));
            quorum.get_or_create(&cl).set(i64_of(c.quorum));
            for cond in &c.conditions {
                let labels = ConditionLabels {
                    namespace: c.namespace.clone(),
                    cluster: c.name.clone(),
                    condition: cond.kind.name().to_owned(),
                    severity: serde_json::to_value(cond.severity)
                        .ok()
                        .and_then(|v| v.as_str().map(str::to_owned))
                        .unwrap_or_default(),
                };
                condition.get_or_create(&labels).set(1);
                if let Some(secs) = cond.for_seconds {
                    condition_secs.get_or_create(&labels).set(secs);
                }
            }
            for m in &c.members {
                let Some(v) = m.verdict.as_ref().filter(|v| v.refused) else {
                    continue;
                };
                refused
                    .get_or_create(&MemberLabels {
                        namespace: c.namespace.clone(),
                        cluster: c.name.clone(),
                        member: m.member.clone(),
                        verdict: v
                            .verdict
                            .clone()
                            .or_else(|| v.exit_code.map(|c| format!("exit-{c}")))
                            .unwrap_or_default(),
                    })
                    .set(1);
            }
        }
        for u in &view.unread {
            unread
                .get_or_create(&UnreadLabels {
                    resource: u.resource.rbac().to_owned(),
                    namespace: u.namespace.clone().unwrap_or_default(),
                    error: u.error.to_owned(),
                })
                .set(1);
        }
    }
    r.register(
        "etcd_agent_fleet_view_complete",
        "1 when every list and watch of the fleet view succeeds (0 before the first view, or while a read fails: see etcd_agent_fleet_unread)",
        complete,
    );
    r.register(
        "etcd_agent_fleet_clusters",
        "Clusters in the fleet view",
        clusters,
    );
    r.register(
        "etcd_agent_fleet_members",
        "Members in the fleet view",
        members,
    );
    r.register(
        "etcd_agent_fleet_cluster_condition",
        "1 for each condition a cluster has (docs/fleet.md): quorum-lost, quorum-at-risk, cluster-id-mismatch, members-refused, members-not-ready, witness-stale, witness-missing, raft-lag, hazards",
        condition,
    );
    r.register(
        "etcd_agent_fleet_cluster_condition_seconds",
        "How long a cluster's condition has held, where the facts tell",
        condition_secs,
    );
    r.register(
        "etcd_agent_fleet_cluster_voters",
        "Voting members of a cluster (learners and dormant members are not)",
        voters,
    );
    r.register(
        "etcd_agent_fleet_cluster_healthy_voters",
        "Voting members Ready and not refused",
        healthy,
    );
    r.register(
        "etcd_agent_fleet_cluster_quorum",
        "The quorum of a cluster: floor(voters/2)+1",
        quorum,
    );
    r.register(
        "etcd_agent_fleet_member_refused",
        "1 for each member whose guard (preflight, restore) last ended with a non-zero exit code, by verdict",
        refused,
    );
    r.register(
        "etcd_agent_fleet_unread",
        "1 for each resource and namespace the fleet view cannot read (RBAC, API errors): the view, and these metrics, lack it",
        unread,
    );
    r
}
