//! One cluster and its conditions: the facts the rules read, computed once,
//! and one function per condition, in the order they are reported.

use super::*;

/// What the rules read about one cluster, computed once.
pub struct ClusterFacts<'a> {
    /// The members' rows.
    pub members: &'a [MemberView],
    /// The gathered facts, in the same order as `members`.
    witnesses: Vec<Option<&'a LeaseFacts>>,
    /// Since when each member has been not Ready (`None`: unknown or Ready).
    not_ready_since: Vec<Option<Timestamp>>,
    /// The record, if any.
    record: Option<&'a ClusterRecordFacts>,
    /// The witness Leases of its namespace were read.
    leases_read: bool,
    /// The claims on the cluster ID.
    claims: &'a [IdClaim],
    /// Voters, healthy voters, quorum.
    voters: usize,
    healthy: usize,
    quorum: usize,
    now: Timestamp,
    settings: &'a Settings,
}

/// A rule: the condition it finds in a cluster, if any.
pub type Rule = fn(&ClusterFacts<'_>) -> Option<Condition>;

/// The rules, in the order their conditions are reported (module docs).
pub const RULES: [(ConditionKind, Rule); 9] = [
    (ConditionKind::QuorumLost, quorum_lost),
    (ConditionKind::QuorumAtRisk, quorum_at_risk),
    (ConditionKind::ClusterIdMismatch, cluster_id_mismatch),
    (ConditionKind::MembersRefused, members_refused),
    (ConditionKind::MembersNotReady, members_not_ready),
    (ConditionKind::WitnessStale, witness_stale),
    (ConditionKind::WitnessMissing, witness_missing),
    (ConditionKind::RaftLag, raft_lag),
    (ConditionKind::Hazards, hazards),
];

fn condition(
    f: &ClusterFacts<'_>,
    kind: ConditionKind,
    members: Vec<String>,
    since: Option<Timestamp>,
    detail: String,
) -> Condition {
    Condition {
        kind,
        severity: kind.health(),
        members,
        since,
        for_seconds: age(f.now, since),
        detail,
    }
}

fn unhealthy_voters(f: &ClusterFacts<'_>) -> (Vec<String>, Option<Timestamp>) {
    let mut names = Vec::new();
    let mut since = Vec::new();
    for (i, m) in f.members.iter().enumerate() {
        if m.voter && m.status != MemberStatus::Ready {
            names.push(m.member.clone());
            since.push(
                m.verdict
                    .as_ref()
                    .and_then(|v| v.refused_since)
                    .or(f.not_ready_since[i]),
            );
        }
    }
    (names, earliest(since))
}

fn quorum_text(f: &ClusterFacts<'_>) -> String {
    format!(
        "{} of {} voters healthy, quorum {}",
        f.healthy, f.voters, f.quorum
    )
}

fn quorum_lost(f: &ClusterFacts<'_>) -> Option<Condition> {
    let wanted = f.record.and_then(|r| r.replicas).unwrap_or(0);
    if f.voters == 0 {
        // A cluster the operator wants running with no member known at all.
        return (wanted > 0).then(|| {
            condition(
                f,
                ConditionKind::QuorumLost,
                Vec::new(),
                f.record.and_then(|r| r.created),
                format!("the EtcdCluster wants {wanted} replicas; no member is known"),
            )
        });
    }
    if f.healthy >= f.quorum {
        return None;
    }
    let (names, since) = unhealthy_voters(f);
    Some(condition(
        f,
        ConditionKind::QuorumLost,
        names,
        since,
        quorum_text(f),
    ))
}

fn quorum_at_risk(f: &ClusterFacts<'_>) -> Option<Condition> {
    if f.voters == 0 || f.healthy < f.quorum || f.healthy >= f.voters || f.healthy > f.quorum {
        return None;
    }
    let (names, since) = unhealthy_voters(f);
    Some(condition(
        f,
        ConditionKind::QuorumAtRisk,
        names,
        since,
        format!("{}: one more loss loses it", quorum_text(f)),
    ))
}

fn cluster_id_mismatch(f: &ClusterFacts<'_>) -> Option<Condition> {
    if f.claims.len() < 2 {
        return None;
    }
    // The members in the minority (or all of them, on a tie) are named.
    let most = f
        .claims
        .iter()
        .map(|c| c.claimed_by.len())
        .max()
        .unwrap_or(0);
    let majority_is_one = f
        .claims
        .iter()
        .filter(|c| c.claimed_by.len() == most)
        .count()
        == 1;
    let members: Vec<String> = f
        .claims
        .iter()
        .filter(|c| !majority_is_one || c.claimed_by.len() < most)
        .flat_map(|c| c.claimed_by.iter().cloned())
        .filter(|m| m != RECORD_CLAIM)
        .collect();
    let detail = f
        .claims
        .iter()
        .map(|c| format!("{} ({})", c.cluster_id, c.claimed_by.join(", ")))
        .collect::<Vec<_>>()
        .join(" vs ");
    Some(condition(
        f,
        ConditionKind::ClusterIdMismatch,
        members,
        None,
        detail,
    ))
}

fn members_refused(f: &ClusterFacts<'_>) -> Option<Condition> {
    let refused: Vec<&MemberView> = f
        .members
        .iter()
        .filter(|m| m.status == MemberStatus::Refused)
        .collect();
    if refused.is_empty() {
        return None;
    }
    let detail = refused
        .iter()
        .map(|m| {
            let v = m.verdict.as_ref();
            let name = v.and_then(|v| v.verdict.as_deref()).unwrap_or("refused");
            match v.and_then(|v| v.exit_code) {
                Some(code) => format!("{}: {name} (exit {code})", m.member),
                None => format!("{}: {name}", m.member),
            }
        })
        .collect::<Vec<_>>()
        .join("; ");
    Some(condition(
        f,
        ConditionKind::MembersRefused,
        refused.iter().map(|m| m.member.clone()).collect(),
        earliest(
            refused
                .iter()
                .map(|m| m.verdict.as_ref().and_then(|v| v.refused_since)),
        ),
        detail,
    ))
}

fn members_not_ready(f: &ClusterFacts<'_>) -> Option<Condition> {
    let limit = f.settings.not_ready_after_secs;
    let mut names = Vec::new();
    let mut details = Vec::new();
    let mut since = Vec::new();
    for (i, m) in f.members.iter().enumerate() {
        let waiting = matches!(
            m.status,
            MemberStatus::NotReady | MemberStatus::NoPod | MemberStatus::Deciding
        );
        let from = f.not_ready_since[i];
        // Unknown since when: it counts (nothing says it just started).
        if !waiting || age(f.now, from).is_some_and(|a| a <= limit) {
            continue;
        }
        names.push(m.member.clone());
        details.push(format!("{} ({})", m.member, m.readiness.detail));
        since.push(from);
    }
    if names.is_empty() {
        return None;
    }
    Some(condition(
        f,
        ConditionKind::MembersNotReady,
        names,
        earliest(since),
        details.join(", "),
    ))
}

fn witness_stale(f: &ClusterFacts<'_>) -> Option<Condition> {
    let mut names = Vec::new();
    let mut details = Vec::new();
    let mut since = Vec::new();
    for (m, l) in f.members.iter().zip(&f.witnesses) {
        let (Some(w), Some(l)) = (&m.witness, l) else {
            continue;
        };
        if m.status != MemberStatus::Ready || !w.stale || w.other_incarnation {
            continue;
        }
        names.push(m.member.clone());
        details.push(match w.renewed_at {
            Some(t) => format!("{} (renewed {t})", w.lease),
            None => format!("{} (never renewed)", w.lease),
        });
        since.push(stale_since(l));
    }
    (!names.is_empty()).then(|| {
        condition(
            f,
            ConditionKind::WitnessStale,
            names,
            earliest(since),
            details.join(", "),
        )
    })
}

fn witness_missing(f: &ClusterFacts<'_>) -> Option<Condition> {
    if !f.leases_read {
        return None;
    }
    let mut names = Vec::new();
    let mut details = Vec::new();
    for m in f.members {
        if m.status != MemberStatus::Ready || !m.guarded {
            continue;
        }
        let lease = crate::evidence::lease::lease_name(&m.member);
        match &m.witness {
            None => details.push(format!("no Lease {lease}")),
            Some(w) if w.other_incarnation => {
                details.push(format!("{lease} is another incarnation's"))
            }
            Some(_) => continue,
        }
        names.push(m.member.clone());
    }
    (!names.is_empty()).then(|| {
        condition(
            f,
            ConditionKind::WitnessMissing,
            names,
            None,
            details.join(", "),
        )
    })
}

fn raft_lag(f: &ClusterFacts<'_>) -> Option<Condition> {
    let fresh: Vec<(&MemberView, u64)> = f
        .members
        .iter()
        .filter(|m| m.status == MemberStatus::Ready)
        .filter_map(|m| {
            let w = m
                .witness
                .as_ref()
                .filter(|w| !w.stale && !w.other_incarnation)?;
            Some((m, w.raft_index?))
        })
        .collect();
    if fresh.len() < 2 {
        return None;
    }
    // The highest, the first by name on a tie.
    let (leader, top) = fresh
        .iter()
        .copied()
        .reduce(|a, b| if b.1 > a.1 { b } else { a })?;
    let lagging: Vec<(&MemberView, u64)> = fresh
        .iter()
        .filter(|(_, i)| top - i > f.settings.lag_threshold)
        .copied()
        .collect();
    if lagging.is_empty() {
        return None;
    }
    let detail = lagging
        .iter()
        .map(|(m, i)| {
            format!(
                "{} at {i}, {} behind {} ({top})",
                m.member,
                top - i,
                leader.member
            )
        })
        .collect::<Vec<_>>()
        .join("; ");
    Some(condition(
        f,
        ConditionKind::RaftLag,
        lagging.iter().map(|(m, _)| m.member.clone()).collect(),
        None,
        detail,
    ))
}

fn hazards(f: &ClusterFacts<'_>) -> Option<Condition> {
    let with: Vec<&MemberView> = f.members.iter().filter(|m| !m.hazards.is_empty()).collect();
    if with.is_empty() {
        return None;
    }
    let detail = with
        .iter()
        .map(|m| {
            let kinds: BTreeSet<&str> = m.hazards.iter().map(|h| h.kind.as_str()).collect();
            format!(
                "{}: {}",
                m.member,
                kinds.into_iter().collect::<Vec<_>>().join(", ")
            )
        })
        .collect::<Vec<_>>()
        .join("; ");
    Some(condition(
        f,
        ConditionKind::Hazards,
        with.iter().map(|m| m.member.clone()).collect(),
        earliest(with.iter().flat_map(|m| m.hazards.iter().map(|h| h.at))),
        detail,
    ))
}

/// The claimant named for the `EtcdCluster`'s own `status.clusterID`.
pub const RECORD_CLAIM: &str = "EtcdCluster";

pub(super) fn cluster(
    namespace: String,
    name: String,
    gathered: Vec<Gathered<'_>>,
    record: Option<&ClusterRecordFacts>,
    leases_read: bool,
    now: Timestamp,
    settings: &Settings,
) -> ClusterView {
    let mut rows: Vec<(MemberView, Option<&LeaseFacts>, Option<Timestamp>)> = gathered
        .iter()
        .map(|g| {
            let view = member(g, now);
            let not_ready_since = match view.status {
                MemberStatus::NoPod => g.record.and_then(|r| r.created),
                MemberStatus::NotReady | MemberStatus::Deciding => {
                    g.pod.and_then(|p| p.ready_since.or(p.created))
                }
                _ => None,
            };
            (view, g.witness, not_ready_since)
        })
        .collect();
    // The rules see the members by name (their lists and details read in
    // that order); the rows are shown worst first.
    rows.sort_by(|a, b| a.0.member.cmp(&b.0.member));
    for (m, _, _) in &mut rows {
        if let Some(w) = &mut m.witness {
            w.other_incarnation = other_incarnation(w, record);
        }
    }

    let mut claims: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (m, _, _) in &rows {
        let ours = m.witness.as_ref().filter(|w| !w.other_incarnation);
        if let Some(id) = ours.and_then(|w| w.cluster_id.clone()) {
            claims.entry(id).or_default().push(m.member.clone());
        }
    }
    claims.values_mut().for_each(|members| members.sort());
    if let Some(id) = record.and_then(|r| r.cluster_id.clone()) {
        claims.entry(id).or_default().push(RECORD_CLAIM.to_owned());
    }
    let claims: Vec<IdClaim> = claims
        .into_iter()
        .map(|(cluster_id, claimed_by)| IdClaim {
            cluster_id,
            claimed_by,
        })
        .collect();

    let voters = rows.iter().filter(|(m, _, _)| m.voter).count();
    let healthy = rows
        .iter()
        .filter(|(m, _, _)| m.voter && m.status == MemberStatus::Ready)
        .count();
    let quorum = if voters == 0 { 0 } else { voters / 2 + 1 };
    let mut members: Vec<MemberView> = Vec::with_capacity(rows.len());
    let mut witnesses = Vec::with_capacity(rows.len());
    let mut not_ready_since = Vec::with_capacity(rows.len());
    for (m, w, s) in rows {
        members.push(m);
        witnesses.push(w);
        not_ready_since.push(s);
    }
    let conditions: Vec<Condition> = {
        let facts = ClusterFacts {
            members: &members,
            witnesses,
            not_ready_since,
            record,
            leases_read,
            claims: &claims,
            voters,
            healthy,
            quorum,
            now,
            settings,
        };
        RULES.iter().filter_map(|(_, rule)| rule(&facts)).collect()
    };
    for m in &mut members {
        m.conditions = conditions
            .iter()
            .filter(|c| c.members.contains(&m.member))
            .map(|c| c.kind)
            .collect();
    }
    members.sort_by(|a, b| (a.status, &a.member).cmp(&(b.status, &b.member)));
    let health = conditions
        .iter()
        .map(|c| c.severity)
        .min()
        .unwrap_or(Health::Ok);
    ClusterView {
        namespace,
        name,
        health,
        member_count: members.len(),
        voters,
        healthy_voters: healthy,
        quorum,
        cluster_id: (claims.len() == 1).then(|| claims[0].cluster_id.clone()),
        cluster_ids: claims,
        replicas: record.and_then(|r| r.replicas),
        conditions,
        members,
    }
}
