//! Rows 5–7b: a directory that holds a member's data.
//!
//! [`Ctx::new`] computes every fact the rows read, once; [`RULES`] then lists
//! the rows in the documented precedence, one function per row, the first that
//! answers deciding. Three stages: whose the directory is (rows 6–6d, 7b), a
//! WAL with no entry (7a, 5b, or as an empty directory), and where its log
//! stands (6g–5, in `position`).

use std::cell::OnceCell;

use super::facts::{Dir, KeyspaceProbe, LiveMemberFacts, LivePosition, OperatorFacts};
use super::position::{self, Position};
use super::remedies::*;
use super::{decision, Decision, Inputs, LiveFacts, Recorded, Row, Verdict, WitnessFacts};
use crate::disk::ids::{self, ClusterId, MemberId};
use crate::disk::layout::FoundingMember;

/// A row of the table: the rows it can decide, and the function that decides
/// them or passes.
pub(super) struct Rule {
    pub(super) rows: &'static [Row],
    pub(super) decide: fn(&Ctx) -> Option<Decision>,
}

/// A stage of the list: its rules in order, then the row that answers when
/// none did.
pub(super) struct Stage {
    pub(super) rules: &'static [Rule],
    pub(super) last: (&'static [Row], fn(&Ctx) -> Decision),
}

impl Stage {
    fn decide(&self, c: &Ctx) -> Decision {
        self.rules
            .iter()
            .find_map(|r| r.apply(c))
            .unwrap_or_else(|| {
                let d = (self.last.1)(c);
                debug_assert!(self.last.0.is_empty() || self.last.0.contains(&d.row));
                d
            })
    }

    /// The rows of the stage, in order.
    #[cfg(test)]
    pub(super) fn rows(&self) -> impl Iterator<Item = Row> + '_ {
        self.rules
            .iter()
            .flat_map(|r| r.rows)
            .chain(self.last.0)
            .copied()
    }
}

impl Rule {
    fn apply(&self, c: &Ctx) -> Option<Decision> {
        let d = (self.decide)(c)?;
        debug_assert!(
            self.rows.contains(&d.row),
            "{:?} from {:?}",
            d.row,
            self.rows
        );
        Some(d)
    }
}

/// Whose the directory is. `last` passes to the next stage.
pub(super) const IDENTITY: &[Rule] = &[
    Rule {
        rows: &[Row::Foreign],
        decide: foreign,
    },
    Rule {
        rows: &[Row::Rebootstrapped],
        decide: rebootstrapped,
    },
    Rule {
        rows: &[Row::Removed],
        decide: removed,
    },
    Rule {
        rows: &[Row::Fork],
        decide: fork,
    },
    Rule {
        rows: &[Row::OtherHistory],
        decide: other_history,
    },
    Rule {
        rows: &[Row::ForeignIncarnation],
        decide: foreign_incarnation,
    },
    Rule {
        rows: &[Row::ForeignFormation],
        decide: foreign_formation,
    },
];

/// A WAL with no entry and no snapshot: the empty directory's question.
pub(super) const EMPTY_LOG: Stage = Stage {
    rules: &[
        Rule {
            rows: &[Row::EmptyLogFormed],
            decide: empty_log_formed,
        },
        Rule {
            rows: &[Row::StartEmptyLog],
            decide: start_empty_log,
        },
    ],
    // Any other row of an empty directory (8b, 9a, 9b, 10, 11), said of this WAL.
    last: (&[], as_empty),
};

/// Where the log stands.
pub(super) const POSITION: Stage = Stage {
    rules: &[
        Rule {
            rows: &[Row::RestoredBehind],
            decide: position::restored_behind,
        },
        Rule {
            rows: &[Row::RolledBack],
            decide: position::rolled_back,
        },
        Rule {
            rows: &[Row::AppliedPastLog],
            decide: position::applied_past_log,
        },
        Rule {
            rows: &[Row::WitnessUnread],
            decide: position::witness_unread,
        },
        Rule {
            rows: &[Row::OtherHistoryUnconfirmed],
            decide: other_history_unconfirmed,
        },
        Rule {
            rows: &[Row::Version],
            decide: position::version,
        },
        Rule {
            rows: &[Row::StartRestoredAbove],
            decide: position::restored_above,
        },
        Rule {
            rows: &[Row::StartCatchingUp],
            decide: position::catching_up,
        },
    ],
    last: (&[Row::StartStaleRecord, Row::Start], position::start),
};

/// The rows of this module in precedence order.
#[cfg(test)]
pub(super) fn rows() -> impl Iterator<Item = Row> {
    IDENTITY
        .iter()
        .flat_map(|r| r.rows)
        .copied()
        .chain(EMPTY_LOG.rows())
        .chain(POSITION.rows())
}

/// Decides an initialized directory.
pub(super) fn decide(i: &Inputs, rec: &Recorded) -> Decision {
    let c = Ctx::new(i, rec);
    if let Some(d) = IDENTITY.iter().find_map(|r| r.apply(&c)) {
        return c.finish(d, Vec::new());
    }
    if rec.empty_log {
        // The directory's warnings only: what the empty directory's rows add
        // is about a directory this is not.
        let mut d = EMPTY_LOG.decide(&c);
        d.warnings = c.warnings.clone();
        return d;
    }
    let d = POSITION.decide(&c);
    c.finish(d, c.position.warnings.clone())
}

/// The facts of an initialized directory against the evidence.
pub(super) struct Ctx<'a> {
    pub(super) i: &'a Inputs,
    pub(super) rec: &'a Recorded,
    op: Option<&'a OperatorFacts>,
    live: Option<&'a LiveFacts>,
    /// The witnesses that may speak; `true`: of this incarnation.
    witnesses: Vec<(&'a WitnessFacts, bool)>,
    /// Said whatever the row.
    warnings: Vec<String>,
    /// Each disagreement of a source with the directory (row 6).
    mismatches: Vec<String>,
    /// Recorded member IDs the live list or the directory shows stale (5a).
    pub(super) stale: Vec<String>,
    /// The leader's list of the directory's cluster lacks its member (6b, 6c).
    removed: bool,
    /// Why the cluster answering under the directory's ID is another history (6c).
    fork: Option<String>,
    /// The other started members of the cluster this directory stands alone in (7b).
    rebootstrapped: Option<String>,
    /// A source vouches for the directory's IDs.
    vouched: bool,
    /// The token etcd got was given (this member's, or the operator's record).
    token_given: bool,
    /// The founders of the directory's cluster, when this member's token
    /// derives none of them (6d).
    formed_with_other_token: Option<&'a [FoundingMember]>,
    pub(super) position: Position<'a>,
    empty: OnceCell<Decision>,
}

impl<'a> Ctx<'a> {
    fn new(i: &'a Inputs, rec: &'a Recorded) -> Ctx<'a> {
        let (witnesses, warnings) = i.usable_witnesses();
        let position = Position::of(i, rec, &witnesses);
        let mut c = Ctx {
            i,
            rec,
            op: i.operator.get(),
            live: i.live.get(),
            witnesses,
            warnings,
            mismatches: Vec::new(),
            stale: Vec::new(),
            removed: false,
            fork: None,
            rebootstrapped: None,
            vouched: false,
            token_given: false,
            formed_with_other_token: None,
            position,
            empty: OnceCell::new(),
        };
        // The order of these calls is the order of the report's sentences.
        c.recorded_member_ids();
        if let Some(op) = c.op {
            c.check(
                "cluster ID",
                "the EtcdCluster",
                op.cluster_id,
                rec.cluster_id,
            );
        }
        c.live_list();
        c.check(
            "cluster ID",
            "ETCD_CLUSTER_ID",
            i.hint_cluster_id,
            rec.cluster_id,
        );
        for (w, _) in c.witnesses.clone() {
            c.check("cluster ID", &w.name, w.cluster_id, rec.cluster_id);
        }
        c.peer_urls();
        c.token();
        c.fork = c.fork_of_live();
        c.rebootstrapped = c.others_started();
        c
    }

    /// Records that `source` expects `expected` where the WAL has `found`.
    fn check<Id: PartialEq + std::fmt::Display>(
        &mut self,
        what: &str,
        source: &str,
        expected: Option<Id>,
        found: Id,
    ) {
        if let Some(e) = expected.filter(|e| *e != found) {
            self.mismatches.push(format!(
                "{what} in the WAL is {found} but {source} says {e}"
            ));
        }
    }

    /// The member IDs the operator, the env and the witnesses record. The
    /// list of the directory's own cluster has this member under the
    /// directory's ID: an ID recorded elsewhere that the list does not have
    /// is the stale record of an earlier incarnation (the operator latches
    /// `memberID` once, env is frozen at Pod creation, a witness keeps the ID
    /// it saw; remove + add gives a new ID) — started under this name, or
    /// added at this member's peer URL and not started yet (a join killed
    /// during its first sync). Any answer of that cluster will do: a lagging
    /// list errs only towards an ID removed since, which etcd then refuses.
    fn recorded_member_ids(&mut self) {
        let (i, rec) = (self.i, self.rec);
        let live_vouches_member = self.live.is_some_and(|l| {
            l.cluster_id == rec.cluster_id && l.member(rec.member_id).is_some_and(|m| m.is(&i.me))
        });
        let dir_member_is_me = matches!((&rec.recorded_name, &i.me.name), (Some(r), Some(n)) if r == n)
            || rec
                .recorded_peer_urls
                .as_ref()
                .is_some_and(|urls| urls.iter().any(|u| i.me.has_peer_url(u)));
        let mut recorded = vec![
            (
                "the EtcdMember".to_owned(),
                self.op.and_then(|o| o.member_id),
            ),
            ("ETCD_MEMBER_ID".to_owned(), i.hint_member_id),
        ];
        recorded.extend(
            self.witnesses
                .iter()
                .map(|(w, _)| (w.name.clone(), w.member_id)),
        );
        for (source, id) in recorded {
            let Some(id) = id.filter(|&id| id != rec.member_id) else {
                continue;
            };
            let gone = self.live.is_some_and(|l| l.member(id).is_none());
            // The directory itself saw the recorded ID removed, and records
            // its own member as this one: no peer is needed to know the record
            // is stale (quorum loss is exactly when none answers).
            let dir_says_stale = rec.removed_ids.contains(&id) && dir_member_is_me;
            if (live_vouches_member && gone) || dir_says_stale {
                let by = if live_vouches_member && gone {
                    "which the live member list no longer has"
                } else {
                    "whose removal the directory itself records"
                };
                self.stale.push(format!(
                    "{source} records member ID {id}, {by}: a stale record of an earlier incarnation"
                ));
            } else {
                self.check("member ID", &source, Some(id), rec.member_id);
            }
        }
    }

    /// What the live list says of the directory's IDs. Endpoints that reach
    /// more than one cluster are a misconfiguration of the endpoint list, not
    /// evidence against the directory: it must belong to one of them, and only
    /// that cluster's list says anything about its member.
    fn live_list(&mut self) {
        let (i, rec) = (self.i, self.rec);
        let Some(live) = self.live else { return };
        let (wal_member, wal_cluster) = (rec.member_id, rec.cluster_id);
        let reached: Vec<ClusterId> = std::iter::once(live.cluster_id)
            .chain(live.other_cluster_ids.iter().copied())
            .collect();
        if !reached.contains(&wal_cluster) {
            let source = match &live.other_cluster_ids[..] {
                [] => "the live cluster".to_owned(),
                others => format!("the live cluster (other endpoints: {})", join(others)),
            };
            self.check("cluster ID", &source, Some(live.cluster_id), wal_cluster);
        } else if live.cluster_id == wal_cluster {
            match live.member(wal_member) {
                Some(m) if !m.is(&i.me) && !m.name.is_empty() => {
                    self.mismatches.push(format!(
                        "the live member list has member {} of the WAL as {} ({}), not this member",
                        wal_member,
                        m.name,
                        m.peer_urls.join(",")
                    ));
                }
                Some(_) => {}
                None if live.authoritative_for(wal_cluster) => self.removed = true,
                None => {
                    if let Some(other) = live.find(&i.me).filter(|m| m.id != wal_member) {
                        self.check(
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
            let others: Vec<ClusterId> =
                reached.into_iter().filter(|&c| c != wal_cluster).collect();
            self.warnings.push(format!(
                "ETCD_PEER_ENDPOINTS also reaches cluster {}: fix the endpoint list",
                join(&others)
            ));
        }
    }

    /// The peer URLs the directory's membership gives its member, against
    /// this member's.
    fn peer_urls(&mut self) {
        let (i, rec) = (self.i, self.rec);
        let Some(recorded) = &rec.recorded_peer_urls else {
            return;
        };
        if i.me.peer_urls.is_empty() || recorded.iter().any(|u| i.me.has_peer_url(u)) {
            return;
        }
        let text = format!(
            "the directory's own membership gives member {} the peer URLs {} but this member's are {}",
            rec.member_id,
            recorded.join(","),
            i.me.peer_urls.join(",")
        );
        // The same member under another spelling of its address (an adopted
        // cluster, a `member update`): the name the directory records and,
        // where it answered, the live list agree that this is the member.
        // Both names that are known must be this member's, and one must be.
        let live_name = self
            .live
            .filter(|l| l.cluster_id == rec.cluster_id)
            .and_then(|l| l.member(rec.member_id))
            .map(|m| m.name.as_str())
            .filter(|n| !n.is_empty());
        let recorded_name = rec.recorded_name.as_deref().filter(|n| !n.is_empty());
        let mine = i.me.name.as_deref();
        let names = [live_name, recorded_name];
        let same_member = mine.is_some()
            && names.iter().any(Option::is_some)
            && names.iter().flatten().all(|n| Some(*n) == mine);
        if same_member {
            self.warnings.push(format!(
                "{text}; the name {} and the member ID agree, so this is the same member with a differently spelled advertise URL: make ETCD_PEER_URLS match etcd's --initial-advertise-peer-urls",
                mine.unwrap_or_default()
            ));
        } else {
            self.mismatches.push(text);
        }
    }

    /// The token etcd got, what the WAL's founding entries say of it, and
    /// whether any source vouches for the directory's IDs.
    fn token(&mut self) {
        let (i, rec) = (self.i, self.rec);
        // This member's own token when given, else the operator's record of
        // its cluster's (it passes that one to etcd), else etcd's default.
        let (token, token_given) =
            match (&i.me.token, self.op.and_then(|o| o.cluster_token.as_ref())) {
                (Some(t), _) if i.me.token_given => (Some(t), true),
                (_, Some(t)) => (Some(t), true),
                (t, None) => (t.as_ref(), false),
            };
        self.token_given = token_given;
        // The WAL's own entry adding its member, hashed with this token, gives
        // the WAL's member ID: the directory was bootstrapped with this token
        // (its URL may have been updated since), not by an earlier incarnation.
        let same_token = match (&rec.added_with_peer_urls, token) {
            (Some(urls), Some(token)) => ids::member_id(urls, token) == rec.member_id,
            _ => false,
        };
        // The WAL's bootstrap entries, hashed with this token, give the
        // founders' IDs when the cluster was formed with it; none does when it
        // was formed with another (an earlier incarnation's volume, or the
        // member's own ID random since a `member add`).
        self.formed_with_other_token = match token {
            Some(token) if !rec.formation.is_empty() => (!rec
                .formation
                .iter()
                .any(|m| ids::member_id(&m.peer_urls, token) == m.id))
            .then_some(&rec.formation[..]),
            _ => None,
        };
        self.vouched = same_token || self.a_source_vouches();
        // Said whenever it is seen, so that a wrong token shows while a source
        // vouches, not first at a cold start when none can.
        if let Some(founders) = self.formed_with_other_token {
            if self.vouched || !self.formation_binds(founders) {
                let whose = if i.me.token_given {
                    "ETCD_INITIAL_CLUSTER_TOKEN"
                } else if token_given {
                    "the operator's status.clusterToken"
                } else {
                    "unset: etcd's default etcd-cluster"
                };
                self.warnings.push(format!(
                    "the WAL records that cluster {} was formed by {}, IDs this member's token ({whose}) does not derive: if this member joined it with `member add`, set ETCD_INITIAL_CLUSTER_TOKEN to the token the cluster was formed with, so that a restart with no source to vouch for the directory is not taken for an earlier incarnation's volume",
                    rec.cluster_id,
                    join(&founders.iter().map(|m| m.id).collect::<Vec<_>>())
                ));
            }
        }
    }

    /// The operator, the live list, the env or a witness of this incarnation
    /// records the directory's member or cluster ID.
    fn a_source_vouches(&self) -> bool {
        let (i, rec) = (self.i, self.rec);
        let (member, cluster) = (rec.member_id, rec.cluster_id);
        self.op
            .is_some_and(|o| o.member_id == Some(member) || o.cluster_id == Some(cluster))
            || self
                .live
                .is_some_and(|l| l.cluster_id == cluster && l.member(member).is_some())
            || i.hint_member_id == Some(member)
            || i.hint_cluster_id == Some(cluster)
            || self.witnesses.iter().any(|(w, ours)| {
                *ours && (w.member_id == Some(member) || w.cluster_id == Some(cluster))
            })
    }

    /// Whose cluster the formation names binds only a member whose own ID came
    /// from a token (a founder) or one given a token: a member that joined with
    /// `member add` and no token of its own may hold its cluster's founders in
    /// its WAL (a young leader's log from index 1), hashed with a token it was
    /// never told.
    fn formation_binds(&self, founders: &[FoundingMember]) -> bool {
        self.token_given || founders.iter().any(|m| m.id == self.rec.member_id)
    }

    /// A removal takes one member out and leaves the others: a list of the
    /// directory's cluster ID that lacks other members the directory records,
    /// or whose term is behind the directory's, is another history under the
    /// same ID (a re-bootstrapped seed, a restore), not the cluster's word.
    fn fork_of_live(&self) -> Option<String> {
        let rec = self.rec;
        let l = self.live.filter(|l| l.cluster_id == rec.cluster_id)?;
        let missing: Vec<MemberId> = rec
            .recorded_members
            .iter()
            .copied()
            .filter(|&id| id != rec.member_id && !rec.removed_ids.contains(&id))
            .filter(|&id| l.member(id).is_none())
            .collect();
        if !missing.is_empty() {
            return Some(format!(
                "its member list lacks member(s) {} that the directory records",
                join(&missing)
            ));
        }
        let term = l.raft_term.filter(|&t| t < rec.term)?;
        Some(format!(
            "its raft term {term} is behind the directory's {}",
            rec.term
        ))
    }

    /// The directory's membership is this member alone, while the cluster of
    /// its ID has other started members: an intact member of that cluster
    /// would have recorded their addition (committed with it as a voter).
    fn others_started(&self) -> Option<String> {
        let rec = self.rec;
        let l = self.live.filter(|l| l.cluster_id == rec.cluster_id)?;
        let others: Vec<&LiveMemberFacts> = l
            .members
            .iter()
            .filter(|m| m.id != rec.member_id && m.started)
            .collect();
        (rec.recorded_members == [rec.member_id] && !others.is_empty()).then(|| {
            others
                .iter()
                .map(|m| format!("{} ({})", m.id, m.name))
                .collect::<Vec<_>>()
                .join(", ")
        })
    }

    /// The sources the directory's IDs were checked against, for a start's
    /// reason.
    pub(super) fn consistent_with(&self) -> String {
        let (i, rec) = (self.i, self.rec);
        let derived_agrees =
            i.me.derived
                .is_some_and(|d| d.member_id == rec.member_id && d.cluster_id == rec.cluster_id);
        let mut checked = vec!["the directory's own membership"];
        if derived_agrees {
            checked.push("the IDs its flags derive");
        }
        if self.op.is_some() {
            checked.push("the operator's record");
        }
        if self.live.is_some() {
            checked.push("the live cluster");
        }
        if i.hint_member_id.is_some() || i.hint_cluster_id.is_some() {
            checked.push("the env hints");
        }
        checked.extend(self.witnesses.iter().map(|(w, _)| w.name.as_str()));
        let mut reason = format!(
            "the data directory holds member {} of cluster {}, consistent with {}",
            rec.member_id,
            rec.cluster_id,
            checked.join(", ")
        );
        if let Some(d) = i.me.derived.filter(|_| !derived_agrees) {
            reason.push_str(&format!(
                "; its flags derive member {} of cluster {}, but another source vouches for the directory's IDs",
                d.member_id, d.cluster_id
            ));
        }
        if !self.stale.is_empty() {
            reason.push_str(&format!(
                "; the live member list shows this member started under that ID: {}",
                self.stale.join("; ")
            ));
        }
        reason
    }

    /// The empty directory's decision, for a WAL that holds nothing.
    fn as_empty_directory(&self) -> &Decision {
        self.empty.get_or_init(|| super::empty::decide(self.i))
    }

    /// Adds the stage's and the upgrade check's warnings; a start says them in
    /// its reason too.
    fn finish(&self, mut d: Decision, stage: Vec<String>) -> Decision {
        let mut warnings = self.warnings.clone();
        warnings.extend(stage);
        if let Some(u) = &self.rec.upgrade {
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
}

fn join<T: std::fmt::Display>(items: &[T]) -> String {
    items
        .iter()
        .map(T::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

/// Row 6. A witness among the sources that disagree gets its command in the
/// remedy: it is the one record a person may find wrong (a leftover of another
/// member or cluster of this name).
fn foreign(c: &Ctx) -> Option<Decision> {
    if c.mismatches.is_empty() {
        return None;
    }
    let clears: Vec<&str> = c
        .witnesses
        .iter()
        .filter(|(w, _)| c.mismatches.iter().any(|m| m.contains(&w.name)))
        .map(|(w, _)| w.clear.as_str())
        .collect();
    let remedy = if clears.is_empty() {
        REMEDY_FOREIGN.to_owned()
    } else {
        format!(
            "{REMEDY_FOREIGN}. If the volume is this member's own and the witness is what is wrong (a leftover of another member or cluster of this name), remove it ({}) and restart the Pod",
            clears.join("; ")
        )
    };
    Some(decision(
        Row::Foreign,
        format!(
            "the data directory belongs to another member or cluster: {}",
            c.mismatches.join("; ")
        ),
        &remedy,
    ))
}

/// Row 7b.
fn rebootstrapped(c: &Ctx) -> Option<Decision> {
    let others = c.rebootstrapped.as_ref()?;
    Some(decision(
        Row::Rebootstrapped,
        format!(
            "the data directory holds member {} of cluster {} alone, but the live cluster of that ID has other started members ({others}): this directory re-bootstrapped a fresh cluster with the same IDs (or is a copy from before the cluster grew); its data is not the cluster's",
            c.rec.member_id, c.rec.cluster_id
        ),
        REMEDY_EMPTY_FORMED,
    ))
}

/// Row 6b: the directory records its own removal, or the leader's list lacks
/// its member while it has every other member the directory records.
fn removed(c: &Ctx) -> Option<Decision> {
    let (member, cluster) = (c.rec.member_id, c.rec.cluster_id);
    let reason = if c.rec.self_removed {
        format!(
            "the data directory records the removal of its own member {member} from cluster {cluster}: the member was removed"
        )
    } else if c.removed && c.fork.is_none() {
        format!(
            "the data directory holds member {member} of cluster {cluster}, but the leader's member list of that cluster no longer has it while it has every other member the directory records: the member was removed"
        )
    } else {
        return None;
    };
    Some(decision(Row::Removed, reason, REMEDY_REMOVED))
}

/// Row 6c.
fn fork(c: &Ctx) -> Option<Decision> {
    let why = c.fork.as_ref().filter(|_| c.removed)?;
    Some(decision(
        Row::Fork,
        format!(
            "the data directory holds member {} of cluster {}; a cluster with that ID answers without it, but {why}: another history answers under this cluster ID (a re-bootstrapped or restored member), not the cluster this directory belongs to",
            c.rec.member_id, c.rec.cluster_id
        ),
        REMEDY_FORK,
    ))
}

/// Row 6h: the directory is of another history under the same IDs than the
/// one its cluster (or its own witness) holds. Starting would fork it (the
/// same raft indexes holding different entries). Signs, each impossible
/// within one history:
///
/// * (a) the leader's list (the leader heard) has this member as never
///   started while the directory records that its member published itself:
///   nothing unstarts a member (a restore this member was left out of);
/// * (b) a majority of the voters each answer past the directory in a lower
///   term, or further past it in revisions than in entries, or with another
///   keyspace at a revision both hold ([`later_history`], [`keyspace_check_at`]:
///   a volume put back to a copy from before a restore, bumped or not, behind
///   the restored cluster or ahead of it). No leader is needed for these:
///   each answer speaks for its own member, and a majority is counted
///   (a member killed while it led is asked about before the others elect
///   another: they answer without a leader, naming it). Every voter
///   answering, each compared, with no majority either way (two voters, or
///   an even split) is refused too when one answer shows the lower term,
///   which no etcd bug makes: waiting brings no one else;
/// * (c) a witness of this member ([`witness_history`]) records a position
///   the directory's backend applied past at a lower revision: no answer
///   needed (a copy from before a restore put back while its cluster is down).
fn other_history(c: &Ctx) -> Option<Decision> {
    let rec = c.rec;
    let why = match witness_history(c) {
        Some(why) => why,
        None => {
            let l = c.live.filter(|l| l.cluster_id == rec.cluster_id)?;
            let unstarted = (l.leader_heard && l.majority_heard && rec.published && !rec.restored)
                .then(|| l.member(rec.member_id).filter(|m| !m.started))
                .flatten();
            match unstarted {
                Some(m) => format!(
                    "records that this member published itself (its name and client URLs), but the leader's member list of that cluster (a majority heard) has member {} as never started{}",
                    m.id,
                    if m.peer_urls.is_empty() {
                        String::new()
                    } else {
                        format!(" (peer URLs {})", m.peer_urls.join(","))
                    }
                ),
                None => later_history(l, rec).filter(Signs::refuse)?.why,
            }
        }
    };
    Some(decision(
        Row::OtherHistory,
        format!(
            "the data directory holds member {} of cluster {} and {why}: the cluster answering is another history under the same IDs (a restore this member was left out of, a volume put back to a copy from before a restore, or a cluster re-formed with the same IDs), and this directory holds a history apart from it. Started, etcd would join that history with a log of the other one and fork it",
            rec.member_id, rec.cluster_id,
        ),
        &remedy_other_history(rec.member_id, c.i.me.name.as_deref(), &c.i.me.peer_urls),
    ))
}

/// Row 6h's sign (c): a witness of this member (its IDs, proven on disk)
/// records raft index `I` at revision `R`, and the directory's backend
/// applied index `I` or later at a revision below `R`, by more than the one
/// of slack sign (b) allows (etcd 3.5.0-3.5.2 could save a consistent index
/// without its entry's data). Within one history revisions never go back:
/// etcd's `Status` reads the revision before the commit index, so `R` is
/// at most the revision of what was applied at `I`, and any backend that
/// applied `I` holds at least `R`. A directory behind the mark is rows
/// 6e-6g's; a restore bumped above the mark stands above `R`.
fn witness_history(c: &Ctx) -> Option<String> {
    let (applied, revision) = (c.rec.applied_index?, c.rec.revision?);
    // The marks of this member's witnesses proven on disk, as rows 6e-6g
    // read them.
    let (reached, _) = position::durable_marks(c.rec, &c.witnesses);
    reached.into_iter().find_map(|r| {
        let (index, at) = (r.index, r.revision?);
        (applied >= index && revision.saturating_add(1) < at).then(|| {
            format!(
                "its backend applied index {applied} at revision {revision}, but {} records that this member's disk held raft index {index} at revision {at}: past that index with fewer revisions, and within one history revisions never go back",
                r.by
            )
        })
    })
}

/// Row 6j: a sign of another history (row 6h's position and keyspace
/// signs) from fewer answers than the majority 6h refuses on, while the
/// answers without one, this member counted, are no majority either; every
/// other row passed. Not enough to refuse on: one member's answer may be
/// one left inconsistent by etcd 3.5.0-3.5.5, or a corrupt backend. Too
/// much to start on: the other members of the history it shows may be down
/// (killed, restarting), and started now, this directory could make a
/// quorum with members that did not answer and lead the cluster into the
/// history it holds (fault schedule seed 4101 on 3.7: a copy refused on row
/// 6h, then one of the two others killed; the copy and the killed member,
/// restarted, made the quorum; 84 of 88 acknowledged writes lost).
/// Preflight waits for more of the cluster: with a majority answering
/// without a sign (a member left inconsistent beside healthy ones), the
/// member starts (the cluster's majority is of its history); with every
/// voter answering, each compared, and still no majority either way, row 6h
/// refuses on a lower-term sign, and without one this row waits with a
/// remedy that tells the two sides apart. A member whose keyspace was to be
/// compared and could not be counts on neither side. Also a wait: row 6h's
/// sign (a), this member listed as never started, from lists heard without
/// the leader and a majority together, one of them from a member that
/// applied all this directory holds.
fn other_history_unconfirmed(c: &Ctx) -> Option<Decision> {
    let rec = c.rec;
    let l = c.live.filter(|l| l.cluster_id == rec.cluster_id)?;
    let mut remedy = REMEDY_OTHER_HISTORY_WAIT;
    let why = match later_history(l, rec).filter(Signs::wait) {
        Some(signs) if signs.all_answered() => {
            remedy = REMEDY_OTHER_HISTORY_SPLIT;
            format!(
                "{}: a sign of another history under the same IDs, but every voter answered and {} of the {}, this member counted, answer without one: no majority either way, and no sign only another history makes (a lower term). Either the member showing it is inconsistent (etcd 3.5.0-3.5.5 after a defragmentation, or a corrupt backend: its revision ahead of its index) or this directory is a copy from before a restore",
                signs.why,
                signs.unsigned + 1,
                signs.voters,
            )
        }
        Some(signs) => format!(
            "{}: a sign of another history under the same IDs (a copy from before a restore, or a corrupt member), from fewer than the majority of the voters row 6h refuses on, and {} of the {} voters, this member counted, answer without one{}, no majority either",
            signs.why,
            signs.unsigned + 1,
            signs.voters,
            match signs.unknown {
                0 => String::new(),
                n => format!(
                    " ({n} more answered but their keyspace could not be compared: they count on neither side)"
                ),
            }
        ),
        None => {
            // Row 6h's sign (a) without the leader and a majority heard: a
            // wait, never a refusal, and only from the list of a member that
            // applied all this directory holds (its publish among it). A
            // list behind the directory may not have applied the publish
            // yet, and waiting on it could hold for good a member its
            // cluster needs (the others lost, the one answering unable to
            // elect a leader alone).
            let current = l.positions.iter().any(|p| {
                p.member_id != rec.member_id
                    && p.applied_index.is_some_and(|a| a >= rec.log_end_index)
            });
            let m = (rec.published && !rec.restored && current)
                .then(|| l.member(rec.member_id).filter(|m| !m.started))
                .flatten()?;
            format!(
                "records that this member published itself (its name and client URLs), but every member list that answered has member {} as never started, one of them from a member that applied all this directory holds, and the leader and a majority were not heard together: a sign of another history under the same IDs (a restore this member was left out of), or lists that lag",
                m.id
            )
        }
    };
    Some(decision(
        Row::OtherHistoryUnconfirmed,
        format!(
            "the data directory holds member {} of cluster {} and {why}. Started now, this directory could make a quorum with members that did not answer and lead the cluster into the history it holds",
            rec.member_id,
            rec.cluster_id,
        ),
        remedy,
    ))
}

/// What the answering voters show of a history apart from the directory's.
struct Signs {
    /// The first sign, the leader's first.
    why: String,
    /// The voters whose answer shows one.
    shown: usize,
    /// The voters other than this member that answer without one.
    unsigned: usize,
    /// The voters other than this member that answer without a position
    /// sign and whose keyspace was to be compared and could not be.
    unknown: usize,
    /// The voters, this member counted.
    voters: usize,
    /// One answer shows the lower-term sign, which no etcd bug makes.
    lower_term: bool,
}

impl Signs {
    /// Row 6h: a strict majority of the voters, never fewer than two; or
    /// every other voter answered, each compared, those without a sign, this
    /// member counted, are no strict majority (two voters; an even split),
    /// and one answer shows the lower-term sign: no one else can come to
    /// decide it, and no etcd bug makes that sign (a member left
    /// inconsistent by etcd 3.5.0-3.5.5 shows the others; beside it, a
    /// healthy member is not refused, it waits, row 6j, with the way out).
    fn refuse(&self) -> bool {
        let majority = self.shown >= 2 && self.shown * 2 > self.voters;
        majority || (self.all_answered() && !self.majority_without() && self.lower_term)
    }

    /// Every other voter answered and was compared where it had to be.
    fn all_answered(&self) -> bool {
        self.shown + self.unsigned + 1 == self.voters
    }

    /// Row 6j: not 6h, and no majority of the voters without a sign.
    fn wait(&self) -> bool {
        !self.refuse() && !self.majority_without()
    }

    /// Those without a sign, this member counted, are a strict majority.
    fn majority_without(&self) -> bool {
        (self.unsigned + 1) * 2 > self.voters
    }
}

/// The position and keyspace signs of rows 6h and 6j: a strict majority of the voters,
/// this member counted among them whatever the list says (a learner, or
/// missing from it), and never fewer than two answers, each answer past this
/// directory in a way no member of its history can (both others of three,
/// three others of four or five). One member's answer is not enough: etcd
/// 3.5.0-3.5.5 could save a defragmented backend's data without its
/// consistent index (and 3.5.0-3.5.2 could put a stale consistent index over
/// a leader's snapshot), and a member so left re-applies entries on its next
/// start, its revision ahead of its index for good; such a member, leading,
/// must not refuse every healthy member behind it (row 6j waits, unless a
/// majority answers without a sign; with every voter answering, row 6h
/// refuses only when those without a sign are no majority). A member whose
/// keyspace was to be compared and could not be counts on neither side.
/// `None`: no sign.
fn later_history(l: &LiveFacts, rec: &Recorded) -> Option<Signs> {
    let mut voters: std::collections::BTreeSet<MemberId> = l
        .members
        .iter()
        .filter(|m| !m.is_learner)
        .map(|m| m.id)
        .collect();
    voters.insert(rec.member_id);
    // One entry per voter that answered (two answers of one member: a sign
    // in either is its sign).
    type Answer = (bool, Option<(SignKind, String)>, bool);
    let mut by_member: std::collections::BTreeMap<MemberId, Answer> =
        std::collections::BTreeMap::new();
    for p in l
        .positions
        .iter()
        .filter(|p| p.member_id != rec.member_id && voters.contains(&p.member_id))
    {
        let e = by_member.entry(p.member_id).or_insert((false, None, true));
        e.0 |= p.leader;
        if e.1.is_none() {
            e.1 = past_its_history(p, rec);
        }
        e.2 &= p.kv_unanswered;
    }
    let answers: Vec<Answer> = by_member.into_values().collect();
    let mut shown: Vec<(bool, &(SignKind, String))> = answers
        .iter()
        .filter_map(|(leader, why, _)| Some((*leader, why.as_ref()?)))
        .collect();
    shown.sort_by_key(|(leader, _)| !leader);
    let first = &shown.first()?.1 .1;
    let lower_term = shown
        .iter()
        .any(|(_, (kind, _))| *kind == SignKind::LowerTerm);
    let unknown = answers
        .iter()
        .filter(|(_, why, unanswered)| why.is_none() && *unanswered)
        .count();
    Some(Signs {
        why: format!(
            "{first}; {} of the cluster's {} voters answer so",
            shown.len(),
            voters.len()
        ),
        shown: shown.len(),
        unsigned: answers.len() - shown.len() - unknown,
        unknown,
        voters: voters.len(),
        lower_term,
    })
}

/// Whether one member's answer shows a history this directory is not of,
/// and how:
///
/// * its `HashKV` at a revision both hold differs from the directory's own
///   hash there ([`keyspace_check_at`]): within one history every member
///   holds the same keys and values at a revision;
/// * it applied an entry past the directory's applied index in a term below
///   the directory's applied entry's: within one history both are committed
///   entries of one log, whose terms never decrease. etcd reports the term of
///   the last entry applied (0 before any since its start), read after the
///   applied index: at worst the entry before it, still past the directory's;
/// * its revision is further past the directory's than its commit index is
///   past the directory's applied index, by more than one: an entry adds at
///   most one revision (a transaction's writes share one; compactions, leases,
///   membership and auth add none), and etcd reads the revision before the
///   commit index. The one of slack is for etcd 3.5.0-3.5.2, which could save
///   a consistent index without its entry's data.
fn past_its_history(p: &LivePosition, rec: &Recorded) -> Option<(SignKind, String)> {
    if let Some(h) = p.kv_hash.filter(|h| h.theirs != h.ours) {
        return Some((SignKind::Other, match h.by {
            KeyspaceProbe::HashKv => format!(
                "member {} answers HashKV {:#010x} at revision {}, where this directory's keyspace hashes to {:#010x}: at a revision both hold, their keys and values differ (the comparison etcd's own corruption check makes; a corrupt backend differs so too)",
                p.member_id, h.theirs, h.revision, h.ours
            ),
            KeyspaceProbe::UnchangedKeys(n) => format!(
                "member {} does not hold at revision {} the {n} keys this directory holds unchanged since (digest {:#010x} against {:#010x}): within one history every member holds them, the same, at that revision",
                p.member_id, h.revision, h.theirs, h.ours
            ),
            KeyspaceProbe::NewestKeys(n) => format!(
                "member {}'s newest keys at revision {} (a Range of {n} by modification) are not this directory's there (digest {:#010x} against {:#010x}): at a revision both hold, their keys and values differ",
                p.member_id, h.revision, h.theirs, h.ours
            ),
        }));
    }
    let applied = rec.applied_index?;
    if let (Some(a), Some(t), Some(mine)) = (p.applied_index, p.applied_term, rec.applied_term) {
        if t > 0 && a > applied && t < mine {
            return Some((
                SignKind::LowerTerm,
                format!(
                    "member {} applied index {a} in term {t}, past this directory's applied index {applied} of term {mine}, and within one history an entry past another is of a term no lower",
                    p.member_id
                ),
            ));
        }
    }
    let (revision, index, at) = (rec.revision?, p.raft_index?, p.revision?);
    let entries = index.saturating_sub(applied);
    let revisions = at.saturating_sub(revision);
    (revisions > 0 && revisions.unsigned_abs() > entries.saturating_add(1)).then(|| {
        (SignKind::Other, format!(
            "its backend applied index {applied} at revision {revision}, but member {} answers at raft index {index} and revision {at}: {revisions} revision(s) past this directory's in {entries} entr{} past its applied index, and within one history each entry adds at most one revision",
            p.member_id,
            if entries == 1 { "y" } else { "ies" }
        ))
    })
}

/// Which sign an answer shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SignKind {
    /// Applied past the directory in a lower term: no etcd bug makes it.
    LowerTerm,
    /// More revisions than entries, or another keyspace: a member left
    /// inconsistent by etcd 3.5.0-3.5.5 (entries re-applied, its revisions
    /// ahead for good) shows these too.
    Other,
}

/// The revision at which to compare the directory's keyspace with the
/// members' (`HashKV`), when the other signs of rows 6h and 6j cannot see a
/// history apart: some voter of the directory's cluster answered, and the
/// directory stands, in revision or in applied index, past the leader (where
/// no member of the leader's history stands once the leader has committed an
/// entry of its term), or past enough voters to make a majority with those
/// showing a position sign, or past every voter that answered (a copy from
/// before a restore that is ahead of the restored cluster: index and
/// revision both past it, so neither position sign shows). The revision is
/// the lowest of the directory's and the answering voters', which every one
/// of them holds. `None`: no comparison needed or possible.
pub fn keyspace_check_at(i: &Inputs) -> Option<i64> {
    let Dir::Initialized(rec) = &i.dir.state else {
        return None;
    };
    let l = i.live.get().filter(|l| l.cluster_id == rec.cluster_id)?;
    let (revision, applied) = (rec.revision?, rec.applied_index?);
    let voters: std::collections::BTreeSet<MemberId> = l
        .members
        .iter()
        .filter(|m| !m.is_learner)
        .map(|m| m.id)
        .collect();
    let others: Vec<&LivePosition> = l
        .positions
        .iter()
        .filter(|p| p.member_id != rec.member_id && voters.contains(&p.member_id))
        .collect();
    let mut answering: std::collections::BTreeSet<MemberId> =
        others.iter().map(|p| p.member_id).collect();
    if answering.is_empty() {
        return None;
    }
    answering.insert(rec.member_id);
    let past = |p: &&LivePosition| {
        p.revision.is_some_and(|r| revision > r) || p.applied_index.is_some_and(|a| applied > a)
    };
    // Past the leader; or past enough of the voters that answered to make,
    // with those already showing a position sign, the majority row 6h
    // counts (no leader answering; or a lagging member behind the directory
    // beside a restored one ahead of it, whose sign alone is one). A member
    // of the directory's own history restarting behind the others is past
    // none of them and shows no sign: its restart reads nothing more.
    let leader_behind = l
        .positions
        .iter()
        .find(|p| p.leader)
        .is_some_and(|p| past(&p));
    let with_a_sign: std::collections::BTreeSet<MemberId> = others
        .iter()
        .filter(|p| past(p) || past_its_history(p, rec).is_some())
        .map(|p| p.member_id)
        .collect();
    // Or past every voter that answered, however few (a sign from fewer
    // than a majority is row 6j's wait).
    let ahead = leader_behind
        || (others.iter().any(past)
            && with_a_sign.len() >= 2
            && with_a_sign.len() * 2 > voters.union(&answering).count())
        || others.iter().all(past);
    if !ahead {
        return None;
    }
    others
        .iter()
        .filter_map(|p| p.revision)
        .chain([revision])
        .min()
        .filter(|&r| r > 0)
}

/// Row 6a.
fn foreign_incarnation(c: &Ctx) -> Option<Decision> {
    let (member, cluster) = (c.rec.member_id, c.rec.cluster_id);
    let derived =
        c.i.me
            .derived
            .filter(|d| !c.vouched && (d.member_id != member || d.cluster_id != cluster))?;
    Some(decision(
        Row::ForeignIncarnation,
        format!(
            "the data directory holds member {member} of cluster {cluster}, but this bootstrap member's flags (--initial-cluster, --initial-cluster-token) make etcd member {} of cluster {}, and no live or operator source vouches for the directory's IDs: it belongs to another cluster, such as an earlier incarnation of a same-named one",
            derived.member_id, derived.cluster_id
        ),
        REMEDY_INCARNATION,
    ))
}

/// Row 6d.
fn foreign_formation(c: &Ctx) -> Option<Decision> {
    let founders = c
        .formed_with_other_token
        .filter(|f| !c.vouched && c.formation_binds(f))?;
    let founders: Vec<String> = founders
        .iter()
        .map(|m| format!("{} ({})", m.id, m.peer_urls.join(",")))
        .collect();
    Some(decision(
        Row::ForeignFormation,
        format!(
            "the data directory holds member {} of cluster {}, whose WAL records that it was formed by {}: IDs this member's --initial-cluster-token does not derive (etcd gives a founding member sha1(peer URLs + token)), and no live or operator source vouches for the directory's IDs: it belongs to a cluster formed with another token, such as an earlier incarnation of a same-named one",
            c.rec.member_id,
            c.rec.cluster_id,
            founders.join(", ")
        ),
        REMEDY_INCARNATION_TOKEN,
    ))
}

/// A WAL with no entry and no snapshot is, for what it holds, an empty
/// directory: etcd re-creates exactly that on a wiped directory when it
/// starts with `=existing` (and then panics `tocommit(N) is out of range`).
/// So the question is the empty directory's — did this member start before?
/// — and only the answer "never" lets etcd start on it.
fn empty_log_what(c: &Ctx) -> String {
    format!(
        "the WAL of member {} holds no entry and no snapshot (etcd re-creates such a WAL when it starts on a wiped directory)",
        c.rec.member_id
    )
}

/// Row 7a.
fn empty_log_formed(c: &Ctx) -> Option<Decision> {
    // A witness of this WAL's member, of this incarnation, proved its disk
    // held entries: it started, whatever the empty directory's rows say (a
    // re-added member's new ID makes the witness stale for an empty directory,
    // but this WAL is of the old ID, and etcd would start as that ID with an
    // empty log and vote again in terms it voted in).
    let (marks, _) = super::position::durable_marks(c.rec, &c.witnesses);
    if let Some(m) = marks.iter().max_by_key(|m| m.index) {
        return Some(decision(
            Row::EmptyLogFormed,
            format!(
                "{}, but this member started before: {} records raft index {} on its disk",
                empty_log_what(c),
                m.by,
                m.index
            ),
            REMEDY_EMPTY_FORMED,
        ));
    }
    let empty = c.as_empty_directory();
    matches!(empty.row, Row::EmptyFormed | Row::JoinSelfOnly).then(|| {
        decision(
            Row::EmptyLogFormed,
            format!(
                "{}, but this member started before: {}",
                empty_log_what(c),
                empty.reason
            ),
            REMEDY_EMPTY_FORMED,
        )
    })
}

/// Row 5b.
fn start_empty_log(c: &Ctx) -> Option<Decision> {
    let empty = c.as_empty_directory();
    matches!(
        empty.row,
        Row::Join | Row::Bootstrap | Row::AllowedWithoutEvidence
    )
    .then(|| {
        decision(
            Row::StartEmptyLog,
            format!(
                "{}; the first start of this member ended before its first entry, and {}",
                empty_log_what(c),
                empty.reason
            ),
            "",
        )
    })
}

/// Any other row of the empty directory, said of this WAL.
fn as_empty(c: &Ctx) -> Decision {
    let empty = c.as_empty_directory();
    Decision {
        reason: format!("{}; {}", empty_log_what(c), empty.reason),
        ..empty.clone()
    }
}
