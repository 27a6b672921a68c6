//! The facts of the fleet as last read: one map per kind of object, changed by
//! whole lists (a first list or a relist replaces what it covers) and single
//! watch events. Which reads failed is kept beside the facts, so the view says
//! what it could not see. No I/O here: `source` feeds it.

use std::collections::BTreeMap;
use std::fmt;

use serde::Serialize;

use super::facts::{
    ClusterRecordFacts, EventFacts, EventSource, Key, LeaseFacts, MemberRecordFacts, PodFacts,
};

/// The kinds of object `fleet` reads, each listed and watched on its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Resource {
    /// The member Pods (`-l`).
    Pods,
    /// The witness Leases (`coordination.k8s.io`).
    Leases,
    /// The agent's Events (refusals and hazards).
    AgentEvents,
    /// The kubelet's readiness-probe failures.
    ProbeEvents,
    /// The operator's `EtcdCluster`s.
    EtcdClusters,
    /// The operator's `EtcdMember`s.
    EtcdMembers,
}

impl Resource {
    /// Every resource, in the order they are read.
    pub const ALL: [Resource; 6] = [
        Resource::Pods,
        Resource::Leases,
        Resource::AgentEvents,
        Resource::ProbeEvents,
        Resource::EtcdClusters,
        Resource::EtcdMembers,
    ];

    /// The resource as RBAC names it (`leases.coordination.k8s.io`).
    pub fn rbac(self) -> &'static str {
        match self {
            Resource::Pods => "pods",
            Resource::Leases => "leases.coordination.k8s.io",
            Resource::AgentEvents | Resource::ProbeEvents => "events",
            Resource::EtcdClusters => "etcdclusters.etcd-operator.cozystack.io",
            Resource::EtcdMembers => "etcdmembers.etcd-operator.cozystack.io",
        }
    }

    /// Whether a server that does not serve it is no gap: the operator's
    /// records exist only where the operator's CRDs are installed (Kamaji and
    /// charts have none).
    pub fn optional(self) -> bool {
        matches!(self, Resource::EtcdClusters | Resource::EtcdMembers)
    }

    /// What is missing from the view when it cannot be read.
    pub fn loss(self) -> &'static str {
        match self {
            Resource::Pods => "members, verdicts, readiness and restarts are not shown",
            Resource::Leases => "witnesses (IDs, raft term and index, staleness) are not shown",
            Resource::AgentEvents => {
                "refusals without a termination message and missing-reference hazards are not shown"
            }
            Resource::ProbeEvents => "what the readiness probe last said is not shown",
            Resource::EtcdClusters => "the operator's cluster records are not compared",
            Resource::EtcdMembers => {
                "members without a Pod, learners and dormant members are not known"
            }
        }
    }
}

impl fmt::Display for Resource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Resource::Pods => "pods",
            Resource::Leases => "leases",
            Resource::AgentEvents => "events (the agent's)",
            Resource::ProbeEvents => "events (readiness probes)",
            Resource::EtcdClusters => "etcdclusters",
            Resource::EtcdMembers => "etcdmembers",
        })
    }
}

/// Where a read looks: every namespace, or one.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(untagged)]
pub enum Scope {
    /// `-A`: one cluster-wide list and watch.
    All,
    /// One namespace of `-n`.
    Namespace(String),
}

impl Scope {
    /// Whether an object of `namespace` is in this scope.
    pub fn covers(&self, namespace: &str) -> bool {
        match self {
            Scope::All => true,
            Scope::Namespace(ns) => ns == namespace,
        }
    }

    /// The namespace, `None` for all.
    pub fn namespace(&self) -> Option<&str> {
        match self {
            Scope::All => None,
            Scope::Namespace(ns) => Some(ns),
        }
    }
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Scope::All => f.write_str("all namespaces"),
            Scope::Namespace(ns) => write!(f, "namespace {ns}"),
        }
    }
}

/// How the last read of one resource in one scope went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReadState {
    /// Not read yet (or the first list has not finished).
    Pending,
    /// Listed (and, with `--watch`, being watched).
    Read,
    /// The server does not serve it (the operator's CRDs are not installed).
    NotServed(String),
    /// The read failed: the error's short name (`forbidden`, `timeout`, …), and
    /// its message.
    Failed {
        /// [`crate::evidence::client::ApiError::name`].
        error: &'static str,
        /// The whole message, naming what RBAC is needed on a 403.
        message: String,
    },
}

/// One object's facts, as a list or a watch event carries them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fact {
    /// A member Pod.
    Pod(PodFacts),
    /// A witness Lease.
    Lease(LeaseFacts),
    /// An Event about a Pod, keyed by the Event's own name.
    Event(EventSource, String, EventFacts),
    /// An `EtcdMember`.
    Member(MemberRecordFacts),
    /// An `EtcdCluster`.
    Cluster(ClusterRecordFacts),
}

impl Fact {
    /// The key of the object in its map.
    pub fn key(&self) -> Key {
        match self {
            Fact::Pod(p) => (p.namespace.clone(), p.name.clone()),
            Fact::Lease(l) => (l.namespace.clone(), l.member.clone()),
            Fact::Event(_, name, e) => (e.namespace.clone(), name.clone()),
            Fact::Member(m) => (m.namespace.clone(), m.name.clone()),
            Fact::Cluster(c) => (c.namespace.clone(), c.name.clone()),
        }
    }
}

/// The fleet's facts. See the module docs.
#[derive(Debug, Clone, Default)]
pub struct Store {
    /// Member Pods by `(namespace, name)`.
    pub pods: BTreeMap<Key, PodFacts>,
    /// Witness Leases by `(namespace, member)`.
    pub leases: BTreeMap<Key, LeaseFacts>,
    /// The agent's Events by `(namespace, event name)`.
    pub events: BTreeMap<Key, EventFacts>,
    /// Readiness-probe failures by `(namespace, event name)`.
    pub probes: BTreeMap<Key, EventFacts>,
    /// `EtcdMember`s by `(namespace, name)`.
    pub members: BTreeMap<Key, MemberRecordFacts>,
    /// `EtcdCluster`s by `(namespace, name)`.
    pub clusters: BTreeMap<Key, ClusterRecordFacts>,
    /// How each read went.
    pub reads: BTreeMap<(Resource, Scope), ReadState>,
}

fn keep<V>(map: &mut BTreeMap<Key, V>, scope: &Scope) {
    map.retain(|(ns, _), _| !scope.covers(ns));
}

impl Store {
    /// A store expecting `resources` in `scopes`, each [`ReadState::Pending`].
    pub fn expecting(scopes: &[Scope]) -> Store {
        let mut store = Store::default();
        for r in Resource::ALL {
            for s in scopes {
                store.reads.insert((r, s.clone()), ReadState::Pending);
            }
        }
        store
    }

    /// Inserts or replaces one object.
    pub fn upsert(&mut self, fact: Fact) {
        let key = fact.key();
        match fact {
            Fact::Pod(p) => {
                self.pods.insert(key, p);
            }
            Fact::Lease(l) => {
                self.leases.insert(key, l);
            }
            Fact::Event(EventSource::Agent, _, e) => {
                self.events.insert(key, e);
            }
            Fact::Event(EventSource::Probe, _, e) => {
                self.probes.insert(key, e);
            }
            Fact::Member(m) => {
                self.members.insert(key, m);
            }
            Fact::Cluster(c) => {
                self.clusters.insert(key, c);
            }
        }
    }

    /// Removes one object of `resource`.
    pub fn remove(&mut self, resource: Resource, key: &Key) {
        match resource {
            Resource::Pods => {
                self.pods.remove(key);
            }
            Resource::Leases => {
                self.leases.remove(key);
            }
            Resource::AgentEvents => {
                self.events.remove(key);
            }
            Resource::ProbeEvents => {
                self.probes.remove(key);
            }
            Resource::EtcdMembers => {
                self.members.remove(key);
            }
            Resource::EtcdClusters => {
                self.clusters.remove(key);
            }
        }
    }

    /// Replaces everything of `resource` in `scope` with a fresh list.
    pub fn replace(&mut self, resource: Resource, scope: &Scope, facts: Vec<Fact>) {
        match resource {
            Resource::Pods => keep(&mut self.pods, scope),
            Resource::Leases => keep(&mut self.leases, scope),
            Resource::AgentEvents => keep(&mut self.events, scope),
            Resource::ProbeEvents => keep(&mut self.probes, scope),
            Resource::EtcdMembers => keep(&mut self.members, scope),
            Resource::EtcdClusters => keep(&mut self.clusters, scope),
        }
        for f in facts {
            self.upsert(f);
        }
        self.reads
            .insert((resource, scope.clone()), ReadState::Read);
    }

    /// Records how a read went (a failure keeps the facts last read).
    pub fn mark(&mut self, resource: Resource, scope: &Scope, state: ReadState) {
        self.reads.insert((resource, scope.clone()), state);
    }

    /// Whether every read has finished, one way or the other.
    pub fn settled(&self) -> bool {
        !self.reads.values().any(|s| *s == ReadState::Pending)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(ns: &str, name: &str) -> Fact {
        Fact::Member(MemberRecordFacts {
            namespace: ns.into(),
            name: name.into(),
            created: None,
            cluster: "etcd".into(),
            is_voter: None,
            dormant: false,
            member_id: None,
            problem: None,
        })
    }

    #[test]
    fn a_relist_replaces_only_its_scope() {
        let mut s = Store::expecting(&[Scope::Namespace("a".into()), Scope::Namespace("b".into())]);
        assert!(!s.settled());
        s.replace(
            Resource::EtcdMembers,
            &Scope::Namespace("a".into()),
            vec![member("a", "m1"), member("a", "m2")],
        );
        s.replace(
            Resource::EtcdMembers,
            &Scope::Namespace("b".into()),
            vec![member("b", "m1")],
        );
        s.replace(
            Resource::EtcdMembers,
            &Scope::Namespace("a".into()),
            vec![member("a", "m3")],
        );
        let keys: Vec<_> = s.members.keys().cloned().collect();
        assert_eq!(keys, [("a".into(), "m3".into()), ("b".into(), "m1".into())]);
        s.remove(Resource::EtcdMembers, &("b".into(), "m1".into()));
        assert_eq!(s.members.len(), 1);
        s.mark(
            Resource::Pods,
            &Scope::Namespace("a".into()),
            ReadState::Failed {
                error: "forbidden",
                message: "no".into(),
            },
        );
        assert!(!s.settled(), "the other reads are pending");
    }
}
