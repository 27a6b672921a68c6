//! Rows 7–11a: an empty directory. Only the sources that could know saying
//! this member never started let etcd start on it; silence is not consent.
//!
//! [`Ctx::new`] gathers what says this member started, once; [`RULES`] lists
//! the rows in the documented precedence, the first that answers deciding.

use super::facts::OperatorFacts;
use super::remedies::*;
use super::{decided, decision, Answer, Decision, Inputs, LiveFacts, Row, Verdict};
use crate::disk::ids::MemberId;

/// A row of the table: the rows it can decide, and the function that decides
/// them or passes.
pub(super) struct Rule {
    pub(super) rows: &'static [Row],
    pub(super) decide: fn(&Ctx) -> Option<Decision>,
}

/// The rows in precedence order; [`no_evidence`] (11) answers when none did.
pub(super) const RULES: &[Rule] = &[
    Rule {
        rows: &[Row::EmptyFormed],
        decide: formed,
    },
    Rule {
        rows: &[Row::JoinUntrusted],
        decide: join_untrusted,
    },
    Rule {
        rows: &[Row::JoinSelfOnly],
        decide: join_self_only,
    },
    Rule {
        rows: &[Row::Join],
        decide: join,
    },
    Rule {
        rows: &[Row::NotListed],
        decide: not_listed,
    },
    Rule {
        rows: &[Row::BootstrapEarlierPod],
        decide: bootstrap_earlier_pod,
    },
    Rule {
        rows: &[Row::BootstrapWitnessUnread],
        decide: bootstrap_witness_unread,
    },
    Rule {
        rows: &[Row::Bootstrap],
        decide: bootstrap,
    },
    Rule {
        rows: &[Row::AllowedWithoutEvidence],
        decide: allowed_without_evidence,
    },
];

/// The rows of this module in precedence order.
#[cfg(test)]
pub(super) fn rows() -> impl Iterator<Item = Row> {
    RULES
        .iter()
        .flat_map(|r| r.rows)
        .copied()
        .chain(std::iter::once(Row::NoEvidence))
}

/// Decides an empty directory.
pub(super) fn decide(i: &Inputs) -> Decision {
    let c = Ctx::new(i);
    let mut d = RULES
        .iter()
        .find_map(|r| {
            let d = (r.decide)(&c)?;
            debug_assert!(r.rows.contains(&d.row), "{:?} from {:?}", d.row, r.rows);
            Some(d)
        })
        .unwrap_or_else(|| no_evidence(&c));
    for w in c.witness_warnings {
        if !d.warnings.contains(&w) {
            d.warnings.push(w);
        }
    }
    d
}

/// The facts of an empty directory against the evidence.
pub(super) struct Ctx<'a> {
    i: &'a Inputs,
    op: Option<&'a OperatorFacts>,
    live: Option<&'a LiveFacts>,
    /// This member is the seed: the operator says so, or (without one) its
    /// `--initial-cluster` names only itself.
    seed: bool,
    /// The ID under which the live list shows this member added and not
    /// started: removed and added again (or added, for a join).
    readded_as: Option<MemberId>,
    /// One sentence per source that says this member started (row 7).
    started: Vec<String>,
    /// The commands that clear the witnesses among them.
    witness_clears: Vec<String>,
    /// Witnesses of another incarnation, or of the member's previous ID.
    witness_warnings: Vec<String>,
}

impl<'a> Ctx<'a> {
    fn new(i: &'a Inputs) -> Ctx<'a> {
        let op = i.operator.get();
        let live = i.live.get();
        let readded_as = readded_as(i);
        let mut c = Ctx {
            i,
            op,
            live,
            seed: op.map_or(i.me.self_only_initial_cluster, |o| o.bootstrap),
            readded_as,
            started: Vec::new(),
            witness_clears: Vec::new(),
            witness_warnings: Vec::new(),
        };
        c.started_by_record();
        c.started_by_witness();
        c.started_as_seed();
        c
    }

    /// A recorded member ID says this member started, unless it was
    /// re-added under another ID since.
    fn recorded_started(&self, id: Option<MemberId>) -> bool {
        match (id, self.readded_as) {
            (Some(old), Some(new)) => old == new,
            (Some(_), None) => true,
            (None, _) => false,
        }
    }

    /// The live list and the IDs the operator and env recorded.
    fn started_by_record(&mut self) {
        if let Some(m) = self.live.and_then(|l| l.started(&self.i.me)) {
            self.started.push(format!(
                "the live member list shows member {} ({}) as started",
                m.id, m.name
            ));
        }
        if let Some(op) = self.op.filter(|o| self.recorded_started(o.member_id)) {
            self.started.push(format!(
                "the EtcdMember records memberID {}",
                op.member_id.unwrap_or_default()
            ));
        }
        if self.recorded_started(self.i.hint_member_id) {
            self.started.push(format!(
                "ETCD_MEMBER_ID is {}",
                self.i.hint_member_id.unwrap_or_default()
            ));
        }
    }

    /// A witness exists only because this member's etcd answered its sidecar.
    /// Only a re-added member's new, unstarted ID makes it stale (as for the
    /// recorded IDs): one whose member ID differs, or cannot be read — the
    /// live list, trusted for a join only with the leader and a majority,
    /// says this member never started under its new ID. A witness of another
    /// incarnation of a cluster of the same names says nothing about this
    /// member.
    fn started_by_witness(&mut self) {
        let (witnesses, warnings) = self.i.usable_witnesses();
        self.witness_warnings = warnings;
        for (w, _) in witnesses {
            if self.readded_as.is_some_and(|new| w.member_id != Some(new)) {
                self.witness_warnings.push(format!(
                    "{} records member {}, not this member's new ID: a record of its incarnation before it was removed and added again ({})",
                    w.name,
                    w.member_id.map_or("(unreadable)".into(), |m| m.to_string()),
                    w.clear
                ));
                continue;
            }
            let ids = match (w.member_id, w.cluster_id) {
                (Some(m), Some(c)) => format!("member {} of cluster {}", m, c),
                _ => "this member (its IDs unreadable)".to_owned(),
            };
            let index = w
                .raft_index
                .map(|n| format!(" at raft index {n}"))
                .unwrap_or_default();
            let pod = w
                .pod_uid
                .as_deref()
                .map(|u| format!(", written by Pod {u}"))
                .unwrap_or_default();
            self.started
                .push(format!("{} records {ids} running{index}{pod}", w.name));
            self.witness_clears.push(w.clear.clone());
        }
    }

    /// A seed (not re-added) whose cluster exists: it formed that cluster.
    fn started_as_seed(&mut self) {
        if !self.seed || self.readded_as.is_some() {
            return;
        }
        if let Some(cid) = self.op.and_then(|o| o.cluster_id) {
            self.started.push(format!(
                "this is the seed and the EtcdCluster records clusterID {}",
                cid
            ));
        }
        if let Some(cid) = self.i.hint_cluster_id {
            self.started
                .push(format!("this is the seed and ETCD_CLUSTER_ID is {}", cid));
        }
        if let Some(l) = self.live {
            self.started.push(format!(
                "this is the seed and a live cluster {} already exists without it",
                l.cluster_id
            ));
        }
    }

    /// A seed the operator answered for, with neither ID recorded: the
    /// cluster has not formed as far as the operator knows (rows 9–9b).
    fn unformed_seed(&self) -> Option<&'a OperatorFacts> {
        self.op
            .filter(|o| self.seed && o.member_id.is_none() && o.cluster_id.is_none())
    }
}

/// A member that was removed and added again shows up unstarted under a new
/// ID: IDs the operator or env recorded for its previous incarnation are stale
/// then.
fn readded_as(i: &Inputs) -> Option<MemberId> {
    i.live
        .get()
        .and_then(|l| l.find(&i.me))
        .filter(|m| !m.started)
        .map(|m| m.id)
}

/// Row 7.
fn formed(c: &Ctx) -> Option<Decision> {
    if c.started.is_empty() {
        return None;
    }
    let mut remedy = REMEDY_EMPTY_FORMED.to_owned();
    if !c.witness_clears.is_empty() {
        remedy.push_str(&format!(
            " If this is a new cluster that reuses this member's name (its volume is fresh, nothing of it ever ran) and the witness is a leftover of an earlier cluster of the same names and token, remove the witness ({}) and restart the Pod; give each cluster its own --initial-cluster-token so that its witnesses cannot be mistaken for another's",
            c.witness_clears.join("; ")
        ));
    }
    Some(decision(
        Row::EmptyFormed,
        format!(
            "the data directory is empty but this member started before: {}",
            c.started.join("; ")
        ),
        &remedy,
    ))
}

/// Row 8b: a join rests on the live list alone; it must be a list worth
/// trusting — of one cluster, with the leader and half of the voters heard
/// (or the one other voter of two).
fn join_untrusted(c: &Ctx) -> Option<Decision> {
    let l = c.live.filter(|_| c.readded_as.is_some())?;
    if !l.other_cluster_ids.is_empty() {
        let ids: Vec<String> = std::iter::once(l.cluster_id)
            .chain(l.other_cluster_ids.iter().copied())
            .map(|id| id.to_string())
            .collect();
        return Some(decision(
            Row::JoinUntrusted,
            format!(
                "the data directory is empty and the live endpoints answer for different clusters ({})",
                ids.join(", ")
            ),
            REMEDY_JOIN_UNTRUSTED_CLUSTERS,
        ));
    }
    if (l.majority_heard && l.leader_heard) || l.sole_other_voter_heard(&c.i.me) {
        return None;
    }
    let short = if l.majority_heard {
        "no answer came from the leader"
    } else {
        "fewer than half of its voting members answered"
    };
    Some(decision(
        Row::JoinUntrusted,
        format!(
            "the data directory is empty and the live cluster {} lists this member as added but never started, \
but {short}: a lagging member's list can miss that this member started",
            l.cluster_id
        ),
        REMEDY_JOIN_UNTRUSTED,
    ))
}

/// Row 8a: etcd joins through the other members its --initial-cluster names.
/// The seed's names only itself: with =new etcd would bootstrap a second
/// cluster carrying the old member and cluster IDs, with =existing it finds
/// no peer.
fn join_self_only(c: &Ctx) -> Option<Decision> {
    let id = c.readded_as.filter(|_| c.i.me.self_only_initial_cluster)?;
    Some(decision(
        Row::JoinSelfOnly,
        format!(
            "the data directory is empty and the live cluster lists this member ({}) as added but never started, \
but its --initial-cluster names only itself: etcd cannot join with these flags",
            id
        ),
        REMEDY_JOIN_FLAGS,
    ))
}

/// Row 8.
fn join(c: &Ctx) -> Option<Decision> {
    let id = c.readded_as?;
    Some(decision(
        Row::Join,
        format!(
            "the data directory is empty and the live cluster lists this member ({}) as added but never started",
            id
        ),
        "",
    ))
}

/// Row 10.
fn not_listed(c: &Ctx) -> Option<Decision> {
    let l = c.live?;
    Some(decision(
        Row::NotListed,
        format!(
            "the data directory is empty and the live cluster {} does not list this member",
            l.cluster_id
        ),
        REMEDY_NOT_LISTED,
    ))
}

/// Row 9a: the Pod's own history. The operator records the Pod it last saw
/// for this member; another Pod than this one ran before — its data is gone,
/// or the operator has not latched the IDs yet (the window PR 355 leaves).
fn bootstrap_earlier_pod(c: &Ctx) -> Option<Decision> {
    let recorded = c.unformed_seed()?.pod_uid.as_deref()?;
    let mine = c.i.me.pod_uid.as_deref().filter(|&mine| mine != recorded)?;
    Some(decision(
        Row::BootstrapEarlierPod,
        format!(
            "the data directory is empty and the operator records neither a member ID nor a cluster ID, but the EtcdMember names Pod {recorded}, not this Pod ({mine}): an earlier Pod of this member ran, so the cluster may have formed before the operator latched its IDs"
        ),
        REMEDY_EARLIER_POD,
    ))
}

/// Row 9b.
fn bootstrap_witness_unread(c: &Ctx) -> Option<Decision> {
    c.unformed_seed()?;
    let Answer::NoAnswer(why) = &c.i.witness else {
        return None;
    };
    Some(decision(
        Row::BootstrapWitnessUnread,
        format!(
            "the data directory is empty, this is the seed, and the operator records neither a member ID nor a cluster ID, but the witness Lease could not be read ({why}): the seed may have formed the cluster before the operator latched its IDs"
        ),
        REMEDY_WITNESS_UNREAD,
    ))
}

/// Row 9.
fn bootstrap(c: &Ctx) -> Option<Decision> {
    c.unformed_seed()?;
    let mut d = decision(
        Row::Bootstrap,
        "the data directory is empty, this is the seed, and the operator records neither a member ID nor a cluster ID: the cluster has not formed".into(),
        "",
    );
    if c.i.me.pod_uid.is_none() {
        d.warnings.push(
            "POD_UID is not set: the Pod's history (EtcdMember.status.podUID) was not checked"
                .into(),
        );
    }
    Some(d)
}

/// Row 11a: bootstrap for a seed, join for any other member.
fn allowed_without_evidence(c: &Ctx) -> Option<Decision> {
    if !c.i.allow_bootstrap_without_evidence {
        return None;
    }
    let verdict = if c.seed {
        Verdict::Bootstrap
    } else {
        Verdict::Join
    };
    Some(decided(
        Row::AllowedWithoutEvidence,
        verdict,
        format!(
            "the data directory is empty and no source could answer ({}); allowed by --allow-bootstrap-without-evidence",
            silence(c.i)
        ),
        "",
    ))
}

/// Row 11, the last of the list.
fn no_evidence(c: &Ctx) -> Decision {
    decision(
        Row::NoEvidence,
        format!(
            "the data directory is empty and nothing could establish whether this member started before ({})",
            silence(c.i)
        ),
        REMEDY_NO_EVIDENCE,
    )
}

fn silence(i: &Inputs) -> String {
    let mut s = format!(
        "live cluster: {}; kubernetes: {}",
        i.live.describe(),
        i.operator.describe()
    );
    if let Answer::NoAnswer(why) = &i.witness {
        s.push_str(&format!("; witness Lease: {why}"));
    }
    s
}
