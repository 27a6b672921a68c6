//! Rows 5c–6g and 5, 5a: an initialized directory whose identity passed, judged
//! by where its log ends against what this member is known to have reached.
//!
//! The position is classified once ([`Position::of`]); each row then reads its
//! own class. Classes and rows map one to one, so the rows cannot overlap.

use super::initialized::Ctx;
use super::remedies::{remedy_restored, remedy_rolled_back, REMEDY_APPLIED_PAST_LOG};
use super::{decision, Decision, Inputs, LiveFacts, LivePosition, Recorded, Row, WitnessFacts};
use crate::disk::ids::ClusterId;
use crate::disk::upgrade::UpgradeCheck;

/// A position this member is known to have reached, and who says so.
pub(super) struct Reached<'a> {
    pub(super) index: u64,
    pub(super) term: Option<u64>,
    pub(super) revision: Option<i64>,
    pub(super) by: String,
    /// The witness that recorded it (`None`: the directory's own backend).
    pub(super) witness: Option<&'a WitnessFacts>,
}

/// Where the directory's log stands, against what this member reached.
pub(super) enum Class<'a> {
    /// Not behind anything known (rows 5, 5a): held to the highest known
    /// position, if any, until it is ready.
    Held(Option<(u64, String)>),
    /// Behind, but the leader and a majority of its cluster answer with a
    /// commit at or past the position (row 5d): raft's leader completeness
    /// lets it catch up from them.
    CatchingUp {
        floor: (u64, String),
        cluster: ClusterId,
        commit: u64,
    },
    /// Made by a restore bumped above every revision the witness saw, no older
    /// history of its cluster running (row 5e).
    RestoredAbove(Reached<'a>),
    /// Made by a restore, behind a witness (row 6g); `Some`: a member of an
    /// older history of its cluster still answers.
    RestoredBehind(Reached<'a>, Option<&'a LivePosition>),
    /// Behind a witness of this member (row 6e); what its cluster says.
    RolledBack(Reached<'a>, String),
    /// Its backend applied past its WAL (row 6f); what its cluster says.
    AppliedPastLog(Reached<'a>, String),
}

/// The class, and what the witnesses said on the way that does not change it.
pub(super) struct Position<'a> {
    pub(super) class: Class<'a>,
    /// Marks of earlier sidecars above the log, not proven durable: said, never
    /// held against the directory.
    pub(super) warnings: Vec<String>,
}

impl<'a> Position<'a> {
    /// Classifies the directory's log end. `witnesses`: those that may speak.
    pub(super) fn of(
        i: &'a Inputs,
        rec: &Recorded,
        witnesses: &[(&'a WitnessFacts, bool)],
    ) -> Position<'a> {
        let (reached, warnings) = durable_marks(rec, witnesses);
        let (end, end_term) = (rec.log_end_index, rec.log_end_term);
        let highest = reached
            .iter()
            .map(|r| (r.index, r.by.clone()))
            .chain(
                rec.applied_index
                    .map(|ci| (ci, "its own backend".to_owned())),
            )
            .max_by_key(|(n, _)| *n);
        let behind_witness = reached
            .into_iter()
            .filter(|r| r.index > end || r.term.is_some_and(|t| t > end_term))
            .max_by_key(|r| r.index)
            .map(Behind::Witness);
        let applied_past = match (rec.applied_index, rec.applied_term) {
            (Some(ci), term) if ci > end || term.is_some_and(|t| t > end_term) => {
                Some(Behind::Applied(Reached {
                    index: ci,
                    term,
                    revision: None,
                    by: "its own backend (consistent index)".into(),
                    witness: None,
                }))
            }
            _ => None,
        };
        let class = match behind_witness.or(applied_past) {
            None => Class::Held(highest),
            Some(behind) => {
                let need = highest.unwrap_or((end, String::new()));
                classify(i, rec, behind, need)
            }
        };
        Position { class, warnings }
    }

    /// The row's start verdict may stand (rows 5, 5a, 5d, 5e), unless the
    /// etcd about to start refuses the directory (5c).
    pub(super) fn starts(&self) -> bool {
        matches!(
            self.class,
            Class::Held(_) | Class::CatchingUp { .. } | Class::RestoredAbove(_)
        )
    }
}

/// What the log falls short of: a witness's durable mark of this member
/// (first), or what its own backend applied.
enum Behind<'a> {
    Witness(Reached<'a>),
    Applied(Reached<'a>),
}

fn classify<'a>(
    i: &'a Inputs,
    rec: &Recorded,
    behind: Behind<'a>,
    need: (u64, String),
) -> Class<'a> {
    let live = i.live.get().filter(|l| l.cluster_id == rec.cluster_id);
    if rec.restored {
        if let Behind::Witness(w) = behind {
            let bumped = matches!((rec.revision, w.revision), (Some(r), Some(wr)) if r > wr);
            // An older history of its cluster still running: a member of its
            // cluster past its log, at a revision below its own.
            let older_running = live.and_then(|l| {
                l.positions.iter().find(|p| {
                    p.raft_index.is_some_and(|n| n > rec.log_end_index)
                        && matches!((p.revision, rec.revision), (Some(pr), Some(r)) if pr < r)
                })
            });
            return match older_running {
                None if bumped => Class::RestoredAbove(w),
                older => Class::RestoredBehind(w, older),
            };
        }
    } else if let Some(l) = live.filter(|l| can_catch_up(l, rec, need.0)) {
        // Raft's leader completeness: a leader holds every committed entry. A
        // leader of its cluster, heard with a majority, whose commit is at or
        // past the position, holds what this directory lost, and a member
        // behind it only catches up (etcd skips entries its backend applied).
        return Class::CatchingUp {
            floor: need,
            cluster: l.cluster_id,
            commit: l.leader_raft_index.unwrap_or_default(),
        };
    }
    let says = cluster_says(i, rec, need.0);
    match behind {
        Behind::Witness(w) => Class::RolledBack(w, says),
        Behind::Applied(a) => Class::AppliedPastLog(a, says),
    }
}

/// The witnesses' marks of this member's history. A mark of an earlier
/// sidecar is the in-memory commit index, which a crash leaves a Ready batch
/// ahead of the disk: said, never held against the directory.
pub(super) fn durable_marks<'a>(
    rec: &Recorded,
    witnesses: &[(&'a WitnessFacts, bool)],
) -> (Vec<Reached<'a>>, Vec<String>) {
    let end = rec.log_end_index;
    let mut reached = Vec::new();
    let mut warnings = Vec::new();
    for (w, _) in witnesses.iter().filter(|(w, _)| mine(w, rec)) {
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
            witness: Some(*w),
        });
    }
    (reached, warnings)
}

fn mine(w: &WitnessFacts, rec: &Recorded) -> bool {
    w.member_id == Some(rec.member_id) && w.cluster_id == Some(rec.cluster_id)
}

/// The commit index the other voters are held to: the leader's, or the one an
/// earlier round of this preflight heard from the leader, whichever is lower.
/// Any leader commit read after this member stopped holds every entry this
/// member could have helped commit; the others, asked again a moment after the
/// earlier read, have reached it even under a steady write load, where they
/// trail the leader's current commit by a moment.
fn bar(l: &LiveFacts, commit: u64) -> u64 {
    l.commit_bar.map_or(commit, |b| b.min(commit))
}

/// The distinct voters other than this member that answered at or past
/// `bar` (an answer from a learner, or a second answer from one member, counts
/// once or not at all), and how many voters the leader's list holds.
fn holders(l: &LiveFacts, rec: &Recorded, bar: u64) -> (usize, usize) {
    let voters: Vec<_> = l
        .members
        .iter()
        .filter(|m| !m.is_learner)
        .map(|m| m.id)
        .collect();
    let mut holding: Vec<_> = l
        .positions
        .iter()
        .filter(|p| p.member_id != rec.member_id && voters.contains(&p.member_id))
        .filter(|p| p.raft_index.is_some_and(|n| n >= bar))
        .map(|p| p.member_id)
        .collect();
    holding.sort_unstable();
    holding.dedup();
    (holding.len(), voters.len())
}

/// A directory behind `need` may catch up: the leader and a majority of its
/// cluster answer, the leader's commit is at or past `need`, and a quorum of
/// the voters other than this member (distinct IDs) answered at or past the
/// leader's commit — every entry committed so far, including those past the
/// witness's mark that this member's lost disk may have helped commit, is then
/// on a quorum without this member, so no leader can be elected without them
/// even with its vote (the leader alone holding them could fail before the
/// others caught up) — in a term not behind the directory's (not a younger
/// history under the same IDs).
fn can_catch_up(l: &LiveFacts, rec: &Recorded, need: u64) -> bool {
    let Some(commit) = l.leader_raft_index.filter(|&c| c >= need) else {
        return false;
    };
    let (holding, voters) = holders(l, rec, bar(l, commit).max(need));
    l.leader_heard
        && l.majority_heard
        && holding > voters / 2
        && l.raft_term.is_some_and(|t| t >= rec.term)
}

/// Why the cluster could not let a directory behind `need` catch up.
fn cluster_says(i: &Inputs, rec: &Recorded, need: u64) -> String {
    match i.live.get() {
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
            None => "its cluster's leader did not report its commit index".to_owned(),
            Some(c) if c < need => format!(
                "its cluster's leader answers with commit {c}, below {need}: the cluster itself is behind that position (every member restored, or a position that was never reached)"
            ),
            Some(_) if rec.restored => "a directory made by a snapshot restore does not catch up from its cluster's log (the log does not hold what the snapshot replaced)".to_owned(),
            Some(_) if l.raft_term.is_none_or(|t| t < rec.term) => format!(
                "its cluster answers in raft term {}, behind the directory's {}: a younger history under the same IDs",
                l.raft_term.map_or("unknown".into(), |t| t.to_string()),
                rec.term
            ),
            Some(c) => {
                let held_to = bar(l, c).max(need);
                let (holding, voters) = holders(l, rec, held_to);
                format!(
                    "its cluster's leader answers with commit {c}, but only {holding} voter(s) other than this member answered at or past {}, fewer than the {} a quorum of its {voters} voters needs: a leader elected without them could lack the entries this member helped commit (the others catch up within moments; the kubelet retries preflight)",
                    if held_to == c { "it".to_owned() } else { format!("index {held_to}") },
                    voters / 2 + 1
                )
            }
        },
    }
}

fn log_end(rec: &Recorded) -> String {
    format!(
        "its log ends at index {} (term {})",
        rec.log_end_index, rec.log_end_term
    )
}

/// Row 6g.
pub(super) fn restored_behind(c: &Ctx) -> Option<Decision> {
    let Class::RestoredBehind(w, older_running) = &c.position.class else {
        return None;
    };
    let rec = c.rec;
    let mut reason = format!(
        "the data directory of member {} was made by a snapshot restore: {}, behind the raft index {} (term {}) that {} records for this member",
        rec.member_id,
        log_end(rec),
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
    Some(decision(
        Row::RestoredBehind,
        reason,
        &remedy_restored(w, rec.revision),
    ))
}

/// Row 6e.
pub(super) fn rolled_back(c: &Ctx) -> Option<Decision> {
    let Class::RolledBack(w, cluster_says) = &c.position.class else {
        return None;
    };
    let rec = c.rec;
    Some(decision(
        Row::RolledBack,
        format!(
            "the data directory of member {} of cluster {} went backwards: {}, behind the raft index {} (term {}) that {} records this member's disk held: a volume put back to an older copy of itself. Started alone it could vote in a leader without the entries after {}, which this member helped commit; {cluster_says}",
            rec.member_id,
            rec.cluster_id,
            log_end(rec),
            w.index,
            w.term.unwrap_or_default(),
            w.by,
            rec.log_end_index
        ),
        &remedy_rolled_back(w, rec),
    ))
}

/// Row 6f.
pub(super) fn applied_past_log(c: &Ctx) -> Option<Decision> {
    let Class::AppliedPastLog(a, cluster_says) = &c.position.class else {
        return None;
    };
    let rec = c.rec;
    Some(decision(
        Row::AppliedPastLog,
        format!(
            "the data directory of member {} of cluster {} went backwards: its backend applied index {}{}, but {}: the WAL was put back to an older copy under a current db (a --wal-dir volume restored alone), or its last segment lost its head. Started alone it could vote in a leader without the entries its data already applied, and the members would diverge for good; {cluster_says}",
            rec.member_id,
            rec.cluster_id,
            a.index,
            a.term.map(|t| format!(" (term {t})")).unwrap_or_default(),
            log_end(rec)
        ),
        REMEDY_APPLIED_PAST_LOG,
    ))
}

/// Whether the directory's cluster holds everything this member could have
/// committed, whatever position an unread witness recorded: the leader and
/// half of the voters heard, in a term not behind the directory's, and a
/// quorum of the voters other than this member (distinct voter IDs) at or
/// past the leader's commit index. No leader can then be elected without the
/// entries the leader committed, even with this member's vote. `Err`: why not.
fn cluster_holds_all(i: &Inputs, rec: &Recorded) -> Result<(), String> {
    let l = match i.live.get() {
        None => {
            return Err(format!(
                "no member of its cluster answered ({})",
                i.live.describe()
            ))
        }
        Some(l) => l,
    };
    if l.cluster_id != rec.cluster_id {
        return Err(format!(
            "the endpoints answer for cluster {}, not its cluster {}",
            l.cluster_id, rec.cluster_id
        ));
    }
    if !l.leader_heard {
        return Err("its cluster answers without a leader".to_owned());
    }
    if !l.majority_heard {
        return Err("fewer than half of its cluster's voting members answered".to_owned());
    }
    let Some(commit) = l.leader_raft_index else {
        return Err("its cluster's leader did not report its commit index".to_owned());
    };
    if l.raft_term.is_none_or(|t| t < rec.term) {
        return Err(format!(
            "its cluster answers in raft term {}, behind the directory's {}",
            l.raft_term.map_or("unknown".into(), |t| t.to_string()),
            rec.term
        ));
    }
    let held_to = bar(l, commit);
    let (holding, voters) = holders(l, rec, held_to);
    let quorum = voters / 2 + 1;
    if holding < quorum {
        return Err(format!(
            "its cluster's leader answers with commit {commit}, but only {holding} voter(s) other than this member answered at or past {}, fewer than the {quorum} a quorum of its {voters} voters needs",
            if held_to == commit { "it".to_owned() } else { format!("index {held_to}") }
        ));
    }
    Ok(())
}

/// Row 6i: a witness is configured but did not answer, so how far this
/// member's disk got is unknown; only a cluster that holds everything this
/// member could have committed lets it start.
pub(super) fn witness_unread(c: &Ctx) -> Option<Decision> {
    let unread = c.i.unread_witnesses();
    if unread.is_empty() {
        return None;
    }
    let rec = c.rec;
    let cluster_says = cluster_holds_all(c.i, rec).err()?;
    let lease = matches!(c.i.witness, super::Answer::NoAnswer(_));
    let file = c.i.witness_file_unread.is_some();
    let what = match (lease, file) {
        (true, true) => "the witness Lease and the witness file readable",
        (true, false) => "the witness Lease readable",
        (false, true) => "the witness file readable",
        (false, false) => "the witness's IDs readable",
    };
    Some(decision(
        Row::WitnessUnread,
        format!(
            "the data directory holds member {} of cluster {} ({}), but a witness of this member did not answer ({}): it may record that this member's disk held more than this log, as when the volume was put back to an older copy of itself, and started alone it could vote in a leader without entries it helped commit; and {cluster_says}",
            rec.member_id,
            rec.cluster_id,
            log_end(rec),
            unread.join("; ")
        ),
        &format!(
            "make {what} ({}) and let the kubelet retry preflight: the witness then says how far this member got; or bring up the leader and a quorum of the other members of cluster {} (their directories intact), so that they answer at or past the leader's commit index: this member then starts whatever the witness recorded. Do not wipe the directory",
            unread.join("; "),
            rec.cluster_id
        ),
    ))
}

/// Row 5c: the directory would start, but the etcd about to start would
/// refuse or panic on it. The findings are the reason; their remedies the remedy.
pub(super) fn version(c: &Ctx) -> Option<Decision> {
    let u = c.rec.upgrade.as_ref().filter(|u| u.blocked)?;
    c.position
        .starts()
        .then(|| refuse_version(u, &start_reason(c)))
}

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

/// Row 5e: the witnesses' position is re-based.
pub(super) fn restored_above(c: &Ctx) -> Option<Decision> {
    matches!(c.position.class, Class::RestoredAbove(_)).then(|| {
        let mut d = decision(Row::StartRestoredAbove, start_reason(c), "");
        d.rebase_witness = true;
        d
    })
}

/// Row 5d: held to the position it lost until it is ready.
pub(super) fn catching_up(c: &Ctx) -> Option<Decision> {
    let Class::CatchingUp { floor, .. } = &c.position.class else {
        return None;
    };
    let mut d = decision(Row::StartCatchingUp, start_reason(c), "");
    d.floor = Some(floor.clone());
    Some(d)
}

/// Rows 5a and 5, the last of the list: a recorded member ID the live list
/// shows stale (5a), or nothing against the directory (5).
pub(super) fn start(c: &Ctx) -> Decision {
    let row = if c.stale.is_empty() {
        Row::Start
    } else {
        Row::StartStaleRecord
    };
    let mut d = decision(row, start_reason(c), "");
    if let Class::Held(floor) = &c.position.class {
        d.floor = floor.clone();
    }
    d
}

/// A start's reason: the sources the directory is consistent with, and for
/// rows 5d and 5e why its position lets it start.
fn start_reason(c: &Ctx) -> String {
    let mut reason = c.consistent_with();
    match &c.position.class {
        Class::CatchingUp {
            floor,
            cluster,
            commit,
        } => reason.push_str(&format!(
            "; {}, behind the index {} that {} records, but the leader and a majority of cluster {cluster} answer with commit {commit}, and a quorum of its other voters at or past it: it catches up from them",
            log_end(c.rec),
            floor.0,
            floor.1
        )),
        Class::RestoredAbove(w) => reason.push_str(&format!(
            "; it was made by a snapshot restore (its log restarts at index {}), below the raft index {} {} records, but its revision {} is above the revision {} recorded there: a restore bumped above every revision clients saw (a deliberate rollback); the witnesses' position is re-based",
            c.rec.log_end_index,
            w.index,
            w.by,
            c.rec.revision.unwrap_or_default(),
            w.revision.unwrap_or_default()
        )),
        _ => {}
    }
    reason
}
