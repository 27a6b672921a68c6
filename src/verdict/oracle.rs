//! The decision as it was before the table became a list of rules (issue 30):
//! kept for the tests only, which hold the new one to it on every input they
//! can generate. Not maintained: it is the behaviour the refactor must keep.
#![allow(dead_code, clippy::all)]

use super::*;
use crate::disk::ids::{ClusterId, MemberId};
use crate::disk::layout::FoundingMember;
use crate::disk::upgrade::UpgradeCheck;

const REMEDY_EMPTY_FORMED: &str =
    "this member's data is gone; do not start it on an empty directory. \
Remove the member (etcdctl member remove <id>) and add it again (etcdctl member add), then start it \
with the flags member add prints (--initial-cluster-state=existing and that --initial-cluster), so it \
joins as a new member and receives the data from the others; with the operator, delete the EtcdMember \
so the operator replaces it. If no other member holds the data, restore the cluster from a backup.";

const REMEDY_JOIN_FLAGS: &str =
    "start etcd with --initial-cluster-state=existing and the --initial-cluster that etcdctl member add \
printed (it names the other members): recreate the Pod with those flags. With the operator, delete the \
EtcdMember so the operator replaces it with a member created for the formed cluster.";

const REMEDY_FOREIGN: &str = "check which volume is mounted here (a swapped or reused PVC); do not start etcd on it. If this member's own data is lost, remove and re-add the member so it joins fresh";

const REMEDY_INCARNATION_TOKEN: &str = "this volume holds the data of a cluster formed with another --initial-cluster-token, such as an earlier cluster of the same name whose volume a new one inherited; do not start etcd on it. Keep it if that cluster's data matters, otherwise wipe it (etcd-member-agent wipe) or give the member a new volume and add it again. If it is this cluster's own data and only the token in this member's flags was changed since the cluster formed, set ETCD_INITIAL_CLUSTER_TOKEN back to the token it was formed with";
const REMEDY_INCARNATION: &str = "this volume holds the data of an earlier cluster (another --initial-cluster-token or member set) that a new cluster of the same name inherited; do not start etcd on it. Keep it if that cluster's data matters, otherwise wipe it (etcd-member-agent wipe) or give the member a new volume, and let it bootstrap or restore afresh";

const REMEDY_REMOVED: &str = "this member was removed from the cluster and etcd would exit on this directory (\"the member has been permanently removed\"); remove the data (etcd-member-agent wipe) and add the member again (etcdctl member add, then start it with the flags member add prints; if the live list already shows it added again and unstarted, only remove the data), or with the operator delete the EtcdMember so it is replaced";

const REMEDY_FORK: &str = "do not wipe this directory: it may hold the only copy of the cluster's data. Another history answers under this cluster ID — a member that re-bootstrapped a fresh cluster with the same IDs (a wiped seed started with =new, a restore re-run) or a restored cluster. Find that member (its member list names few members, its raft term and index are low), stop it, and start the members whose directories are intact; then remove and re-add the re-bootstrapped one";

fn decision(row: Row, reason: String, remedy: &str) -> Decision {
    Decision {
        verdict: row.verdicts()[0],
        row,
        reason,
        remedy: remedy.to_string(),
        warnings: Vec::new(),
        floor: None,
        rebase_witness: false,
    }
}

/// Applies the decision table.
pub fn decide(i: &Inputs) -> Decision {
    match &i.dir.state {
        Dir::Unreadable { problem, symlinked } => match symlinked {
            Some(link) => decision(
                Row::Layout,
                format!("the data directory is not read: {problem}"),
                &format!(
                    "{link} is a symlink; the agent never follows symlinks inside the data dir. This is a configuration matter, not damage: keep the data, and pass the symlink's target as etcd's --wal-dir and the agent's --wal-dir (ETCD_WAL_DIR), or mount the volume at the path etcd expects"
                ),
            ),
            None => decision(
                Row::Unreadable,
                format!("the data directory cannot be read: {problem}"),
                "check the volume's ownership and mode: the agent runs as the etcd user (uid 65532) and must be able to read the data dir; a volume that does not answer (a hung network mount) also ends here",
            ),
        },
        _ if i.dir.running => decision(
            Row::Running,
            "an etcd process holds the locks of this data directory".into(),
            "another etcd is running on this volume; stop it before starting a second one (two processes on one data dir corrupt it)",
        ),
        Dir::Corrupt(problem) => decision(
            Row::Corrupt,
            format!("the data directory is corrupt: {problem}"),
            "keep the directory for analysis; remove and re-add the member so it starts on a fresh directory, or restore from a backup",
        ),
        Dir::Partial(problem) => decision(
            Row::Partial,
            format!("the data directory is partially initialized: {problem}"),
            "an earlier start or restore was interrupted; wipe the directory (etcd-member-agent wipe) and let the member join again (member remove + member add)",
        ),
        Dir::Initialized(d) => decide_initialized(i, d),
        Dir::Empty => decide_empty(i),
    }
}

/// Records in `out` that `source` expects `expected` where the WAL has `found`.
fn check<Id: PartialEq + std::fmt::Display>(
    out: &mut Vec<String>,
    what: &str,
    source: &str,
    expected: Option<Id>,
    found: Id,
) {
    if let Some(e) = expected {
        if e != found {
            out.push(format!(
                "{what} in the WAL is {} but {source} says {}",
                found, e
            ));
        }
    }
}

/// A member ID a record gives this member, compared with the directory's.
struct RecordedId<'a> {
    what: &'a str,
    source: &'a str,
    id: Option<MemberId>,
}

fn decide_initialized(i: &Inputs, rec: &Recorded) -> Decision {
    let (wal_member, wal_cluster) = (rec.member_id, rec.cluster_id);
    let op = i.operator.get();
    let live = i.live.get();
    let (witnesses, mut warnings) = i.usable_witnesses();
    let mut mismatches = Vec::new();

    // The list of the directory's own cluster has this member under the
    // directory's ID: a member ID recorded elsewhere that the list does not
    // have is the stale record of an earlier incarnation (the operator latches
    // `memberID` once, env is frozen at Pod creation, a witness keeps the ID it
    // saw; remove + add gives a new ID). Started under this name, or added at
    // this member's peer URL and not started yet (a join killed during its
    // first sync: etcd made this directory for that random ID). Any answer of
    // that cluster will do, not only the leader's: a lagging list errs only
    // towards an ID removed since — which etcd itself then refuses — never
    // towards another member's data.
    let live_vouches_member = live.is_some_and(|l| {
        l.cluster_id == wal_cluster && l.member(wal_member).is_some_and(|m| m.is(&i.me))
    });
    let dir_member_is_me = matches!((&rec.recorded_name, &i.me.name), (Some(r), Some(n)) if r == n)
        || rec
            .recorded_peer_urls
            .as_ref()
            .is_some_and(|urls| urls.iter().any(|u| i.me.has_peer_url(u)));
    let mut stale = Vec::new();
    let mut recorded = vec![
        RecordedId {
            what: "member ID",
            source: "the EtcdMember",
            id: op.and_then(|o| o.member_id),
        },
        RecordedId {
            what: "member ID",
            source: "ETCD_MEMBER_ID",
            id: i.hint_member_id,
        },
    ];
    recorded.extend(witnesses.iter().map(|(w, _)| RecordedId {
        what: "member ID",
        source: &w.name,
        id: w.member_id,
    }));
    for r in &recorded {
        let Some(id) = r.id.filter(|&id| id != wal_member) else {
            continue;
        };
        let gone = live.is_some_and(|l| l.member(id).is_none());
        // The directory itself saw the recorded ID removed, and records its
        // own member as this one: no peer is needed to know the record is
        // stale (quorum loss is exactly when none answers).
        let dir_says_stale = rec.removed_ids.contains(&id) && dir_member_is_me;
        if (live_vouches_member && gone) || dir_says_stale {
            let by = if live_vouches_member && gone {
                "which the live member list no longer has"
            } else {
                "whose removal the directory itself records"
            };
            stale.push(format!(
                "{} records member ID {}, {by}: a stale record of an earlier incarnation",
                r.source, id
            ));
        } else {
            check(&mut mismatches, r.what, r.source, Some(id), wal_member);
        }
    }
    if let Some(op) = op {
        check(
            &mut mismatches,
            "cluster ID",
            "the EtcdCluster",
            op.cluster_id,
            wal_cluster,
        );
    }
    // Endpoints that reach more than one cluster are a misconfiguration of the
    // endpoint list, not evidence against the directory: it must belong to one
    // of them, and only that cluster's list says anything about its member.
    let mut removed = false;
    if let Some(live) = live {
        let reached: Vec<ClusterId> = std::iter::once(live.cluster_id)
            .chain(live.other_cluster_ids.iter().copied())
            .collect();
        if !reached.contains(&wal_cluster) {
            let source = match &live.other_cluster_ids[..] {
                [] => "the live cluster".to_owned(),
                others => {
                    let others: Vec<String> =
                        others.iter().copied().map(|id| id.to_string()).collect();
                    format!("the live cluster (other endpoints: {})", others.join(", "))
                }
            };
            check(
                &mut mismatches,
                "cluster ID",
                &source,
                Some(live.cluster_id),
                wal_cluster,
            );
        } else if live.cluster_id == wal_cluster {
            match live.member(wal_member) {
                Some(m) if !m.is(&i.me) && !m.name.is_empty() => {
                    mismatches.push(format!(
                        "the live member list has member {} of the WAL as {} ({}), not this member",
                        wal_member,
                        m.name,
                        m.peer_urls.join(",")
                    ));
                }
                Some(_) => {}
                None if live.authoritative_for(wal_cluster) => removed = true,
                None => {
                    if let Some(other) = live.find(&i.me).filter(|m| m.id != wal_member) {
                        check(
                            &mut mismatches,
                            "member ID",
                            "the live member list",
                            Some(other.id),
                            wal_member,
                        );
                    }
                }
            }
        }
        if reached.len() > 1 {
            let others: Vec<String> = reached
                .iter()
                .filter(|&&c| c != wal_cluster)
                .map(|c| c.to_string())
                .collect();
            warnings.push(format!(
                "ETCD_PEER_ENDPOINTS also reaches cluster {}: fix the endpoint list",
                others.join(", ")
            ));
        }
    }
    check(
        &mut mismatches,
        "cluster ID",
        "ETCD_CLUSTER_ID",
        i.hint_cluster_id,
        wal_cluster,
    );
    for (w, _) in &witnesses {
        check(
            &mut mismatches,
            "cluster ID",
            &w.name,
            w.cluster_id,
            wal_cluster,
        );
    }
    if let Some(recorded) = &rec.recorded_peer_urls {
        let overlap = recorded.iter().any(|u| i.me.has_peer_url(u));
        if !i.me.peer_urls.is_empty() && !overlap {
            let text = format!(
                "the directory's own membership gives member {} the peer URLs {} but this member's are {}",
                wal_member,
                recorded.join(","),
                i.me.peer_urls.join(",")
            );
            // The same member under another spelling of its address (an adopted
            // cluster, a `member update`): the name the directory records and,
            // where it answered, the live list agree that this is the member.
            // Both names that are known must be this member's, and one must be.
            let live_name = live
                .filter(|l| l.cluster_id == wal_cluster)
                .and_then(|l| l.member(wal_member))
                .map(|m| m.name.as_str())
                .filter(|n| !n.is_empty());
            let recorded_name = rec.recorded_name.as_deref().filter(|n| !n.is_empty());
            let mine = i.me.name.as_deref();
            let names = [live_name, recorded_name];
            let same_member = mine.is_some()
                && names.iter().any(Option::is_some)
                && names.iter().flatten().all(|n| Some(*n) == mine);
            if same_member {
                warnings.push(format!(
                    "{text}; the name {} and the member ID agree, so this is the same member with a differently spelled advertise URL: make ETCD_PEER_URLS match etcd's --initial-advertise-peer-urls",
                    i.me.name.as_deref().unwrap_or_default()
                ));
            } else {
                mismatches.push(text);
            }
        }
    }
    // The token etcd got: this member's own when given, else the operator's
    // record of its cluster's (it passes that one to etcd), else etcd's default.
    let (token, token_given) = match (&i.me.token, op.and_then(|o| o.cluster_token.as_ref())) {
        (Some(t), _) if i.me.token_given => (Some(t), true),
        (_, Some(t)) => (Some(t), true),
        (t, None) => (t.as_ref(), false),
    };
    // The WAL's own entry adding its member, hashed with this member's token,
    // gives the WAL's member ID: the directory was bootstrapped with this token
    // (its URL may have been updated since), not by an earlier incarnation.
    let same_token = match (&rec.added_with_peer_urls, token) {
        (Some(urls), Some(token)) => crate::disk::ids::member_id(urls, token) == wal_member,
        _ => false,
    };
    // The WAL's bootstrap entries, hashed with this member's token, give the
    // founding members' IDs when the cluster was formed with it; none does
    // when it was formed with another (an earlier incarnation's volume, the
    // member's own ID random since a `member add`).
    let formed_with_other_token = match token {
        Some(token) if !rec.formation.is_empty() => (!rec
            .formation
            .iter()
            .any(|m| crate::disk::ids::member_id(&m.peer_urls, token) == m.id))
        .then_some(&rec.formation),
        _ => None,
    };
    // Whose cluster the formation names binds only a member whose own ID came
    // from a token (a founder) or one given a token: a member that joined with
    // `member add` and no token of its own may hold its cluster's founders in
    // its WAL (a young leader's log from index 1), hashed with a token it was
    // never told.
    let formation_binds =
        |founders: &[FoundingMember]| token_given || founders.iter().any(|m| m.id == wal_member);
    let vouched = op
        .is_some_and(|o| o.member_id == Some(wal_member) || o.cluster_id == Some(wal_cluster))
        || live.is_some_and(|l| l.cluster_id == wal_cluster && l.member(wal_member).is_some())
        || i.hint_member_id == Some(wal_member)
        || i.hint_cluster_id == Some(wal_cluster)
        || witnesses.iter().any(|(w, ours)| {
            *ours && (w.member_id == Some(wal_member) || w.cluster_id == Some(wal_cluster))
        })
        || same_token;
    // Said whenever it is seen, so that a wrong token shows while a source
    // vouches, not first at a cold start when none can.
    if let Some(founders) = formed_with_other_token {
        if vouched || !formation_binds(founders) {
            warnings.push(format!(
                "the WAL records that cluster {} was formed by {}, IDs this member's token ({}) does not derive: if this member joined it with `member add`, set ETCD_INITIAL_CLUSTER_TOKEN to the token the cluster was formed with, so that a restart with no source to vouch for the directory is not taken for an earlier incarnation's volume",
                wal_cluster,
                founders
                    .iter()
                    .map(|m| m.id.to_string())
                    .collect::<Vec<_>>()
                    .join(", "),
                if i.me.token_given {
                    "ETCD_INITIAL_CLUSTER_TOKEN"
                } else if token_given {
                    "the operator's status.clusterToken"
                } else {
                    "unset: etcd's default etcd-cluster"
                }
            ));
        }
    }

    // A removal takes one member out and leaves the others: a list of the
    // directory's cluster ID that lacks other members the directory records,
    // or whose term is behind the directory's, is another history under the
    // same ID (a re-bootstrapped seed, a restore), not the cluster's word.
    let others_recorded: Vec<MemberId> = rec
        .recorded_members
        .iter()
        .copied()
        .filter(|&id| id != wal_member && !rec.removed_ids.contains(&id))
        .collect();
    let fork = live.filter(|l| l.cluster_id == wal_cluster).and_then(|l| {
        let missing: Vec<String> = others_recorded
            .iter()
            .filter(|&&id| l.member(id).is_none())
            .map(|id| id.to_string())
            .collect();
        let behind = l.raft_term.is_some_and(|t| t < rec.term);
        if !missing.is_empty() {
            Some(format!(
                "its member list lacks member(s) {} that the directory records",
                missing.join(", ")
            ))
        } else if behind {
            Some(format!(
                "its raft term {} is behind the directory's {}",
                l.raft_term.unwrap_or_default(),
                rec.term
            ))
        } else {
            None
        }
    });
    // The directory's membership is this member alone, while the cluster of
    // its ID has other started members: an intact member of that cluster would
    // have recorded their addition (committed with it as a voter).
    let rebootstrapped = live.filter(|l| l.cluster_id == wal_cluster).and_then(|l| {
        let alone = rec.recorded_members == [wal_member];
        let others: Vec<&LiveMemberFacts> = l
            .members
            .iter()
            .filter(|m| m.id != wal_member && m.started)
            .collect();
        (alone && !others.is_empty()).then(|| {
            others
                .iter()
                .map(|m| format!("{} ({})", m.id, m.name))
                .collect::<Vec<_>>()
                .join(", ")
        })
    });

    let mut d = if !mismatches.is_empty() {
        decision(
            Row::Foreign,
            format!(
                "the data directory belongs to another member or cluster: {}",
                mismatches.join("; ")
            ),
            REMEDY_FOREIGN,
        )
    } else if let Some(others) = rebootstrapped {
        decision(
            Row::Rebootstrapped,
            format!(
                "the data directory holds member {} of cluster {} alone, but the live cluster of that ID has other started members ({others}): this directory re-bootstrapped a fresh cluster with the same IDs (or is a copy from before the cluster grew); its data is not the cluster's",
                wal_member,
                wal_cluster
            ),
            REMEDY_EMPTY_FORMED,
        )
    } else if rec.self_removed {
        decision(
            Row::Removed,
            format!(
                "the data directory records the removal of its own member {} from cluster {}: the member was removed",
                wal_member,
                wal_cluster
            ),
            REMEDY_REMOVED,
        )
    } else if let (true, Some(why)) = (removed, &fork) {
        decision(
            Row::Fork,
            format!(
                "the data directory holds member {} of cluster {}; a cluster with that ID answers without it, but {why}: another history answers under this cluster ID (a re-bootstrapped or restored member), not the cluster this directory belongs to",
                wal_member,
                wal_cluster
            ),
            REMEDY_FORK,
        )
    } else if removed {
        decision(
            Row::Removed,
            format!(
                "the data directory holds member {} of cluster {}, but the leader's member list of that cluster no longer has it while it has every other member the directory records: the member was removed",
                wal_member,
                wal_cluster
            ),
            REMEDY_REMOVED,
        )
    } else if let Some(derived) =
        i.me.derived
            .filter(|d| !vouched && (d.member_id != wal_member || d.cluster_id != wal_cluster))
    {
        decision(
            Row::ForeignIncarnation,
            format!(
                "the data directory holds member {} of cluster {}, but this bootstrap member's flags (--initial-cluster, --initial-cluster-token) make etcd member {} of cluster {}, and no live or operator source vouches for the directory's IDs: it belongs to another cluster, such as an earlier incarnation of a same-named one",
                wal_member,
                wal_cluster,
                derived.member_id,
                derived.cluster_id
            ),
            REMEDY_INCARNATION,
        )
    } else if let Some(founders) =
        formed_with_other_token.filter(|f| !vouched && formation_binds(f))
    {
        let founders: Vec<String> = founders
            .iter()
            .map(|m| format!("{} ({})", m.id, m.peer_urls.join(",")))
            .collect();
        decision(
            Row::ForeignFormation,
            format!(
                "the data directory holds member {} of cluster {}, whose WAL records that it was formed by {}: IDs this member's --initial-cluster-token does not derive (etcd gives a founding member sha1(peer URLs + token)), and no live or operator source vouches for the directory's IDs: it belongs to a cluster formed with another token, such as an earlier incarnation of a same-named one",
                wal_member,
                wal_cluster,
                founders.join(", ")
            ),
            REMEDY_INCARNATION_TOKEN,
        )
    } else if rec.empty_log {
        return decide_empty_log(i, wal_member, warnings);
    } else {
        let derived_agrees =
            i.me.derived
                .is_some_and(|d| d.member_id == wal_member && d.cluster_id == wal_cluster);
        let mut checked = vec!["the directory's own membership"];
        if derived_agrees {
            checked.push("the IDs its flags derive");
        }
        if op.is_some() {
            checked.push("the operator's record");
        }
        if live.is_some() {
            checked.push("the live cluster");
        }
        if i.hint_member_id.is_some() || i.hint_cluster_id.is_some() {
            checked.push("the env hints");
        }
        checked.extend(witnesses.iter().map(|(w, _)| w.name.as_str()));
        let mut reason = format!(
            "the data directory holds member {} of cluster {}, consistent with {}",
            wal_member,
            wal_cluster,
            checked.join(", ")
        );
        if let Some(d) = i.me.derived.filter(|_| !derived_agrees) {
            reason.push_str(&format!(
                "; its flags derive member {} of cluster {}, but another source vouches for the directory's IDs",
                d.member_id, d.cluster_id
            ));
        }
        if !stale.is_empty() {
            reason.push_str(&format!(
                "; the live member list shows this member started under that ID: {}",
                stale.join("; ")
            ));
        }
        // A start (any of rows 5, 5a, 5d, 5e), unless the etcd about to start
        // would refuse or panic on the directory (5c).
        let start = |row: Row, reason: String, floor: Option<(u64, String)>, rebase: bool| {
            let mut d = match rec.upgrade.as_ref().filter(|u| u.blocked) {
                Some(u) => refuse_version(u, &reason),
                None => decision(row, reason, ""),
            };
            if d.verdict == Verdict::Start {
                d.floor = floor;
                d.rebase_witness = rebase;
            }
            d
        };
        match log_position(i, rec, &witnesses, &mut warnings) {
            LogPosition::Refused(d) => d,
            LogPosition::Held(floor) if stale.is_empty() => start(Row::Start, reason, floor, false),
            LogPosition::Held(floor) => start(Row::StartStaleRecord, reason, floor, false),
            LogPosition::CatchingUp { floor, why } => start(
                Row::StartCatchingUp,
                format!("{reason}; {why}"),
                Some(floor),
                false,
            ),
            LogPosition::RestoredAbove { why } => start(
                Row::StartRestoredAbove,
                format!("{reason}; {why}"),
                None,
                true,
            ),
        }
    };
    if let Some(u) = &rec.upgrade {
        warnings.extend(
            u.warnings()
                .map(|f| format!("etcd {}: {} ({})", u.target, f.message, f.remedy)),
        );
    }
    if !warnings.is_empty() && d.verdict == Verdict::Start {
        d.reason
            .push_str(&format!(" (warning: {})", warnings.join("; ")));
    }
    d.warnings = warnings;
    d
}

/// What the directory's log position says, against what this member is known
/// to have reached (docs/decision-table.md, rows 5d, 5e, 6e–6g).
enum LogPosition {
    /// Not behind anything known: starts, held to this position (the highest
    /// known one, for readiness), if any.
    Held(Option<(u64, String)>),
    /// Behind, but the leader and a majority of its cluster answer with a
    /// commit at or past the position: raft's leader completeness lets it
    /// catch up from them.
    CatchingUp {
        /// The position it must reach before it is ready.
        floor: (u64, String),
        /// The sentence for the reason.
        why: String,
    },
    /// A restore bumped above every revision the witnesses saw, no older
    /// history of its cluster running.
    RestoredAbove {
        /// The sentence for the reason.
        why: String,
    },
    /// Refused (rows 6e–6g).
    Refused(Decision),
}

/// A position this member is known to have reached, and who says so.
struct Reached<'a> {
    index: u64,
    term: Option<u64>,
    revision: Option<i64>,
    by: String,
    witness: Option<&'a WitnessFacts>,
}

fn log_position(
    i: &Inputs,
    rec: &Recorded,
    witnesses: &[(&WitnessFacts, bool)],
    warnings: &mut Vec<String>,
) -> LogPosition {
    let (end, end_term) = (rec.log_end_index, rec.log_end_term);
    let mine = |w: &WitnessFacts| {
        w.member_id == Some(rec.member_id) && w.cluster_id == Some(rec.cluster_id)
    };
    // The witnesses' marks of this member's history. A mark of an earlier
    // sidecar is the in-memory commit index, which a crash leaves a Ready
    // batch ahead of the disk: said, never held against the directory.
    let mut reached: Vec<Reached> = Vec::new();
    for (w, _) in witnesses.iter().filter(|(w, _)| mine(w)) {
        let Some(index) = w.raft_index.filter(|&n| n > 0) else {
            continue;
        };
        if !w.durable {
            if index > end {
                warnings.push(format!(
                    "{} records raft index {index}, above where this directory's log ends ({end}); it was written by an earlier sidecar, whose index is not proven to have reached the disk, so it is not held against the directory: if this volume was put back to an older copy, do not start it. The next renewal records a proven position",
                    w.name
                ));
            }
            continue;
        }
        reached.push(Reached {
            index,
            term: w.raft_term,
            revision: w.revision,
            by: w.name.clone(),
            witness: Some(w),
        });
    }
    let behind_witness = reached
        .iter()
        .filter(|r| r.index > end || r.term.is_some_and(|t| t > end_term))
        .max_by_key(|r| r.index);
    let applied_past = match (rec.applied_index, rec.applied_term) {
        (Some(ci), term) if ci > end || term.is_some_and(|t| t > end_term) => Some(Reached {
            index: ci,
            term,
            revision: None,
            by: "its own backend (consistent index)".into(),
            witness: None,
        }),
        _ => None,
    };
    let highest = reached
        .iter()
        .map(|r| (r.index, r.by.clone()))
        .chain(
            rec.applied_index
                .map(|ci| (ci, "its own backend".to_owned())),
        )
        .max_by_key(|(n, _)| *n);
    if behind_witness.is_none() && applied_past.is_none() {
        return LogPosition::Held(highest);
    }
    let need = highest.clone().unwrap_or((end, String::new()));
    let position = format!("its log ends at index {end} (term {end_term})");
    let live = i.live.get().filter(|l| l.cluster_id == rec.cluster_id);

    if rec.restored {
        if let Some(w) = &behind_witness {
            let bumped = matches!((rec.revision, w.revision), (Some(r), Some(wr)) if r > wr);
            // An older history of its cluster still running: a member of its
            // cluster past its log, at a revision below its own.
            let older_running = live.and_then(|l| {
                l.positions.iter().find(|p| {
                    p.raft_index.is_some_and(|n| n > end)
                        && matches!((p.revision, rec.revision), (Some(pr), Some(r)) if pr < r)
                })
            });
            if bumped && older_running.is_none() {
                return LogPosition::RestoredAbove {
                    why: format!(
                        "it was made by a snapshot restore (its log restarts at index {end}), below the raft index {} {} records, but its revision {} is above the revision {} recorded there: a restore bumped above every revision clients saw (a deliberate rollback); the witnesses' position is re-based",
                        w.index,
                        w.by,
                        rec.revision.unwrap_or_default(),
                        w.revision.unwrap_or_default()
                    ),
                };
            }
            let mut reason = format!(
                "the data directory of member {} was made by a snapshot restore: {position}, behind the raft index {} (term {}) that {} records for this member",
                rec.member_id,
                w.index,
                w.term.unwrap_or_default(),
                w.by
            );
            match older_running {
                Some(p) => reason.push_str(&format!(
                    ", and member {} of its cluster answers at raft index {} and revision {}, below this directory's revision {}: an older history of the cluster still runs, and the restored data must not join it (the cluster's newer entries would be applied on top of the snapshot's state)",
                    p.member_id,
                    p.raft_index.unwrap_or_default(),
                    p.revision.unwrap_or_default(),
                    rec.revision.unwrap_or_default()
                )),
                None => reason.push_str(&format!(
                    ", and its revision {} is not above the revision {} recorded there: clients would see revisions go backwards",
                    rec.revision.map_or("unknown".into(), |r| r.to_string()),
                    w.revision.map_or("unknown".into(), |r| r.to_string())
                )),
            }
            return LogPosition::Refused(decision(
                Row::RestoredBehind,
                reason,
                &remedy_restored(w, rec.revision),
            ));
        }
    }

    // Raft's leader completeness: a leader holds every committed entry. A
    // leader of its cluster, heard with a majority, whose commit is at or past
    // the position, holds what this directory lost, and a member behind it
    // only catches up (etcd skips entries its backend already applied).
    if !rec.restored {
        if let Some(l) = live.filter(|l| l.leader_heard && l.majority_heard) {
            if let Some(commit) = l.leader_raft_index.filter(|&c| c >= need.0) {
                return LogPosition::CatchingUp {
                    floor: need.clone(),
                    why: format!(
                        "{position}, behind the index {} that {} records, but the leader and a majority of cluster {} answer with commit {commit}: it catches up from them",
                        need.0, need.1, l.cluster_id
                    ),
                };
            }
        }
    }
    let cluster_says = match i.live.get() {
        None => format!("no member of its cluster answered ({})", i.live.describe()),
        Some(l) if l.cluster_id != rec.cluster_id => format!(
            "the endpoints answer for cluster {}, not its cluster {}",
            l.cluster_id, rec.cluster_id
        ),
        Some(l) if !l.leader_heard => "its cluster answers without a leader".to_owned(),
        Some(l) if !l.majority_heard => {
            "fewer than half of its cluster's voting members answered".to_owned()
        }
        Some(l) => match l.leader_raft_index {
            Some(c) => format!(
                "its cluster's leader answers with commit {c}, below {}: the cluster itself is behind that position (every member restored, or a position that was never reached)",
                need.0
            ),
            None => "its cluster's leader did not report its commit index".to_owned(),
        },
    };
    match (behind_witness, applied_past) {
        (Some(w), _) => LogPosition::Refused(decision(
            Row::RolledBack,
            format!(
                "the data directory of member {} of cluster {} went backwards: {position}, behind the raft index {} (term {}) that {} records this member's disk held: a volume put back to an older copy of itself. Started alone it could vote in a leader without the entries after {end}, which this member helped commit; {cluster_says}",
                rec.member_id,
                rec.cluster_id,
                w.index,
                w.term.unwrap_or_default(),
                w.by
            ),
            &remedy_rolled_back(w, rec),
        )),
        (None, Some(a)) => LogPosition::Refused(decision(
            Row::AppliedPastLog,
            format!(
                "the data directory of member {} of cluster {} went backwards: its backend applied index {}{}, but {position}: the WAL was put back to an older copy under a current db (a --wal-dir volume restored alone), or its last segment lost its head. Started alone it could vote in a leader without the entries its data already applied, and the members would diverge for good; {cluster_says}",
                rec.member_id,
                rec.cluster_id,
                a.index,
                a.term.map(|t| format!(" (term {t})")).unwrap_or_default()
            ),
            REMEDY_APPLIED_PAST_LOG,
        )),
        (None, None) => LogPosition::Held(highest),
    }
}

const REMEDY_APPLIED_PAST_LOG: &str = "keep the directory (its backend holds data its WAL lost). Either bring back the members that hold the cluster's data: once the leader and a majority answer with a commit at or past the backend's index, this member starts by itself and catches up (the kubelet retries preflight); or remove and re-add this member (etcdctl member remove, wipe, member add; with the operator, delete the EtcdMember). For a cluster of this one member, make a snapshot of its own backend and restore it (copy member/snap/db, then etcdutl snapshot restore <copy> --skip-hash-check with this member's name, --initial-cluster and token): that rebuilds a WAL that holds what the backend applied";

fn remedy_rolled_back(w: &Reached, rec: &Recorded) -> String {
    let clear = w.witness.map(|w| w.clear.clone()).unwrap_or_default();
    format!(
        "do not wipe it. Either bring back the members that hold the newer data (their directories are intact): once the leader and a majority of cluster {} answer with a commit at or past {}, this member starts by itself and catches up (the kubelet retries preflight); or, if this member's newer data is lost for good and the others hold the cluster's data, remove and re-add it (etcdctl member remove {}, wipe, member add; with the operator, delete the EtcdMember). If every member was put back to older copies on purpose (a rollback of the whole cluster), acknowledge it by removing each member's witness ({clear}, and the same for the others), or restore them instead with etcdutl snapshot restore --bump-revision above revision {} --mark-compacted (etcd-member-agent restore --bump-revision auto reads it from the witness), so clients' watches never see revisions go backwards",
        rec.cluster_id,
        w.index,
        rec.member_id,
        w.revision.map_or("the one the witness recorded".into(), |r| r.to_string()),
    )
}

fn remedy_restored(w: &Reached, revision: Option<i64>) -> String {
    let clear = w.witness.map(|w| w.clear.clone()).unwrap_or_default();
    format!(
        "if only this member was restored while the others kept the cluster running, never start it into that cluster: remove and re-add it (it receives the data from the others). If every member was restored on purpose, either acknowledge the rollback by removing each member's witness ({clear}, and the same for the others), or restore again with etcdutl snapshot restore --bump-revision N --mark-compacted where N takes the revision above {} (this directory is at {}; etcd-member-agent restore --bump-revision auto chooses N from the witness), so clients' watches never see revisions go backwards",
        w.revision.map_or("the one the witness recorded".into(), |r| r.to_string()),
        revision.map_or("an unknown revision".into(), |r| r.to_string()),
    )
}

/// Row 5c: the directory is this member's, but the etcd about to start would
/// refuse or panic on it. The findings are the reason; their remedies the remedy.
fn refuse_version(u: &UpgradeCheck, identity: &str) -> Decision {
    let found: Vec<String> = u
        .blockers()
        .map(|f| format!("{} [{}; {}]", f.message, f.code, f.rule))
        .collect();
    let remedy: Vec<String> = u.blockers().map(|f| f.remedy.clone()).collect();
    decision(
        Row::Version,
        format!(
            "{identity}; but etcd {} would refuse or panic on it: {}",
            u.target,
            found.join("; ")
        ),
        &format!(
            "do not start etcd {} on this directory yet (the data is intact): {}",
            u.target,
            remedy.join("; ")
        ),
    )
}

/// A WAL with no entry and no snapshot is, for what it holds, an empty
/// directory: etcd re-creates exactly that on a wiped directory when it
/// starts with `=existing` (and then panics `tocommit(N) is out of range`).
/// So the question is the empty directory's — did this member start before?
/// — and only the answer "never" lets etcd start on it.
fn decide_empty_log(i: &Inputs, wal_member: MemberId, warnings: Vec<String>) -> Decision {
    let empty = decide_empty(i);
    let what = format!(
        "the WAL of member {} holds no entry and no snapshot (etcd re-creates such a WAL when it starts on a wiped directory)",
        wal_member
    );
    let mut d = match empty.row {
        Row::EmptyFormed | Row::JoinSelfOnly => decision(
            Row::EmptyLogFormed,
            format!("{what}, but this member started before: {}", empty.reason),
            REMEDY_EMPTY_FORMED,
        ),
        Row::Join | Row::Bootstrap | Row::AllowedWithoutEvidence => decision(
            Row::StartEmptyLog,
            format!(
                "{what}; the first start of this member ended before its first entry, and {}",
                empty.reason
            ),
            "",
        ),
        _ => Decision {
            reason: format!("{what}; {}", empty.reason),
            ..empty
        },
    };
    d.warnings = warnings;
    d
}

/// What the witnesses say of an empty directory's member.
struct WitnessSays {
    /// One sentence per witness saying this member started.
    started: Vec<String>,
    /// The commands that clear those witnesses.
    clears: Vec<String>,
    /// Witnesses of another incarnation, or of the member's previous ID.
    warnings: Vec<String>,
}

/// A witness exists only because this member's etcd answered its sidecar.
/// Only a re-added member's new, unstarted ID makes it stale (as for the
/// recorded IDs): one whose member ID differs, or cannot be read — the live
/// list, trusted for a join only with the leader and a majority, says this
/// member never started under its new ID. A witness of another incarnation of
/// a cluster of the same names says nothing about this member.
fn witness_says(i: &Inputs, readded_as: Option<MemberId>) -> WitnessSays {
    let (witnesses, mut warnings) = i.usable_witnesses();
    let mut started = Vec::new();
    let mut clears = Vec::new();
    for (w, _) in &witnesses {
        if readded_as.is_some_and(|new| w.member_id != Some(new)) {
            warnings.push(format!(
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
        started.push(format!("{} records {ids} running{index}{pod}", w.name));
        clears.push(w.clear.clone());
    }
    WitnessSays {
        started,
        clears,
        warnings,
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

fn decide_empty(i: &Inputs) -> Decision {
    let witness = witness_says(i, readded_as(i));
    let mut d = empty_rows(i, &witness);
    for w in witness.warnings {
        if !d.warnings.contains(&w) {
            d.warnings.push(w);
        }
    }
    d
}

fn empty_rows(i: &Inputs, witness: &WitnessSays) -> Decision {
    let op = i.operator.get();
    let live = i.live.get();
    let seed = match op {
        Some(op) => op.bootstrap,
        None => i.me.self_only_initial_cluster,
    };
    let live_me = live.and_then(|l| l.find(&i.me));
    let readded_as = readded_as(i);
    let recorded_started = |id: Option<MemberId>| match (id, readded_as) {
        (Some(old), Some(new)) => old == new,
        (Some(_), None) => true,
        (None, _) => false,
    };

    let mut started = Vec::new();
    if let Some(m) = live_me.filter(|m| m.started) {
        started.push(format!(
            "the live member list shows member {} ({}) as started",
            m.id, m.name
        ));
    }
    if let Some(op) = op {
        if recorded_started(op.member_id) {
            started.push(format!(
                "the EtcdMember records memberID {}",
                op.member_id.unwrap_or_default()
            ));
        }
    }
    if recorded_started(i.hint_member_id) {
        started.push(format!(
            "ETCD_MEMBER_ID is {}",
            i.hint_member_id.unwrap_or_default()
        ));
    }
    started.extend(witness.started.iter().cloned());
    if seed && readded_as.is_none() {
        if let Some(cid) = op.and_then(|o| o.cluster_id) {
            started.push(format!(
                "this is the seed and the EtcdCluster records clusterID {}",
                cid
            ));
        }
        if let Some(cid) = i.hint_cluster_id {
            started.push(format!("this is the seed and ETCD_CLUSTER_ID is {}", cid));
        }
        if let Some(l) = live {
            started.push(format!(
                "this is the seed and a live cluster {} already exists without it",
                l.cluster_id
            ));
        }
    }
    if !started.is_empty() {
        let mut remedy = REMEDY_EMPTY_FORMED.to_owned();
        if !witness.clears.is_empty() {
            remedy.push_str(&format!(
                " If this is a new cluster that reuses this member's name (its volume is fresh, nothing of it ever ran) and the witness is a leftover of an earlier cluster of the same names and token, remove the witness ({}) and restart the Pod; give each cluster its own --initial-cluster-token so that its witnesses cannot be mistaken for another's",
                witness.clears.join("; ")
            ));
        }
        return decision(
            Row::EmptyFormed,
            format!(
                "the data directory is empty but this member started before: {}",
                started.join("; ")
            ),
            &remedy,
        );
    }

    // A join rests on the live list alone; it must be a list worth trusting.
    if let Some(l) = live.filter(|l| readded_as.is_some() && !l.other_cluster_ids.is_empty()) {
        let ids: Vec<String> = std::iter::once(l.cluster_id)
            .chain(l.other_cluster_ids.iter().copied())
            .map(|id| id.to_string())
            .collect();
        return decision(
            Row::JoinUntrusted,
            format!(
                "the data directory is empty and the live endpoints answer for different clusters ({})",
                ids.join(", ")
            ),
            "point ETCD_PEER_ENDPOINTS at this cluster's members only, then restart the Pod",
        );
    }
    if let Some(l) = live.filter(|l| {
        readded_as.is_some()
            && !(l.majority_heard && l.leader_heard)
            && !l.sole_other_voter_heard(&i.me)
    }) {
        let short = if l.majority_heard {
            "no answer came from the leader"
        } else {
            "fewer than half of its voting members answered"
        };
        return decision(
            Row::JoinUntrusted,
            format!(
                "the data directory is empty and the live cluster {} lists this member as added but never started, \
but {short}: a lagging member's list can miss that this member started",
                l.cluster_id
            ),
            "list every member's client URL in ETCD_PEER_ENDPOINTS (a single Service URL is one voice) and make the leader and half of the members reachable, then restart the Pod; while the cluster has lost quorum, restore quorum first (start the members whose data is intact) — see docs/decision-table.md, row 8b",
        );
    }
    if let Some(id) = readded_as {
        // etcd joins through the other members its --initial-cluster names. The
        // seed's names only itself: with =new etcd would bootstrap a second cluster
        // carrying the old member and cluster IDs, with =existing it finds no peer.
        if i.me.self_only_initial_cluster {
            return decision(
                Row::JoinSelfOnly,
                format!(
                    "the data directory is empty and the live cluster lists this member ({}) as added but never started, \
but its --initial-cluster names only itself: etcd cannot join with these flags",
                    id
                ),
                REMEDY_JOIN_FLAGS,
            );
        }
        return decision(
            Row::Join,
            format!(
                "the data directory is empty and the live cluster lists this member ({}) as added but never started",
                id
            ),
            "",
        );
    }
    if let Some(l) = live {
        return decision(
            Row::NotListed,
            format!(
                "the data directory is empty and the live cluster {} does not list this member",
                l.cluster_id
            ),
            "add the member first (etcdctl member add <name> --peer-urls=<url>), then restart the Pod",
        );
    }
    // The Pod's own history: the operator records the Pod it last saw for
    // this member. Another Pod than this one ran before — its data is gone,
    // or the operator has not latched the IDs yet (the window PR 355 leaves).
    let earlier_pod = op.and_then(|o| o.pod_uid.as_deref()).filter(|recorded| {
        i.me.pod_uid
            .as_deref()
            .is_some_and(|mine| mine != *recorded)
    });
    if seed {
        if let Some(op) = op {
            if op.member_id.is_none() && op.cluster_id.is_none() {
                if let Some(recorded) = earlier_pod {
                    return decision(
                        Row::BootstrapEarlierPod,
                        format!(
                            "the data directory is empty and the operator records neither a member ID nor a cluster ID, but the EtcdMember names Pod {recorded}, not this Pod ({}): an earlier Pod of this member ran, so the cluster may have formed before the operator latched its IDs",
                            i.me.pod_uid.as_deref().unwrap_or_default()
                        ),
                        "find out whether the earlier Pod formed the cluster (its logs, the other members, the operator's events); if it did, treat this as a wiped member (remove and re-add it); if it never started etcd, clear EtcdMember.status.podUID and restart the Pod",
                    );
                }
                if let Answer::NoAnswer(why) = &i.witness {
                    return decision(
                        Row::BootstrapWitnessUnread,
                        format!(
                            "the data directory is empty, this is the seed, and the operator records neither a member ID nor a cluster ID, but the witness Lease could not be read ({why}): the seed may have formed the cluster before the operator latched its IDs"
                        ),
                        "let the agent read its witness Lease (RBAC get on leases.coordination.k8s.io, see deploy/base/role.yaml) and retry; if this member never started, that read answers 404 and it bootstraps",
                    );
                }
                let mut d = decision(
                    Row::Bootstrap,
                    "the data directory is empty, this is the seed, and the operator records neither a member ID nor a cluster ID: the cluster has not formed".into(),
                    "",
                );
                if i.me.pod_uid.is_none() {
                    d.warnings.push(
                        "POD_UID is not set: the Pod's history (EtcdMember.status.podUID) was not checked".into(),
                    );
                }
                return d;
            }
        }
    }
    let silent = describe_silence(i);
    if i.allow_bootstrap_without_evidence {
        let mut d = decision(
            Row::AllowedWithoutEvidence,
            format!("the data directory is empty and no source could answer ({silent}); allowed by --allow-bootstrap-without-evidence"),
            "",
        );
        if !seed {
            d.verdict = Verdict::Join;
        }
        return d;
    }
    decision(
        Row::NoEvidence,
        format!("the data directory is empty and nothing could establish whether this member started before ({silent})"),
        "make the live cluster (ETCD_PEER_ENDPOINTS) or the Kubernetes API reachable and retry; for a deployment without an operator that is bootstrapping for the first time, pass --allow-bootstrap-without-evidence",
    )
}

fn describe_silence(i: &Inputs) -> String {
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
