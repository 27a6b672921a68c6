//! Rows 5d, 5e and 6e–6g: a log behind what this member reached, the
//! witness of one incarnation, and restores held to it.
use super::*;

/// A Lease of this member's incarnation, in the current format, whose
/// disk was proven to hold raft index `index` at term `term`.
fn durable_witness(member: u64, cluster: u64, index: u64, term: u64) -> WitnessFacts {
    WitnessFacts {
        name: "the witness Lease etcd-witness-m1".into(),
        clear: "kubectl -n ns delete lease etcd-witness-m1".into(),
        member_id: Some(MemberId::new(member)),
        cluster_id: Some(ClusterId::new(cluster)),
        raft_index: Some(index),
        raft_term: Some(term),
        revision: Some(index as i64),
        durable: true,
        incarnation: Incarnation::new(Some("tok"), None),
        pod_uid: None,
    }
}

/// An initialized member whose log ends at `end` (term 2), backend applied
/// up to `applied`, of incarnation `tok`.
fn at(end: u64, applied: u64) -> Inputs {
    let mut i = initialized(0xa, 0xc);
    i.me.token = Some("tok".into());
    i.me.token_sha256 = Some(crate::disk::ids::token_sha256("tok"));
    let r = rec(&mut i);
    r.log_end_index = end;
    r.log_end_term = 2;
    r.applied_index = Some(applied);
    r.applied_term = Some(2);
    r.revision = Some(applied as i64);
    i
}

/// A cluster of three whose leader (m2) and m3 answer at `commit`, in term 3.
fn leader_at(cluster: u64, commit: u64) -> Answer<LiveFacts> {
    altered(
        live(
            cluster,
            &[
                (0xa, "m1", ME, true),
                (0xb, "m2", "http://m2:2380", true),
                (0xd, "m3", "http://m3:2380", true),
            ],
        ),
        |l| {
            l.leader_raft_index = Some(commit);
            l.raft_term = Some(3);
            l.positions = [0xb, 0xd]
                .map(|id| LivePosition {
                    member_id: MemberId::new(id),
                    raft_index: Some(commit),
                    applied_index: None,
                    applied_term: None,
                    revision: None,
                    leader: false,
                    kv_hash: None,
                    kv_unanswered: false,
                })
                .to_vec();
        },
    )
}

#[test]
fn regression_a_volume_put_back_to_an_older_copy_of_itself_is_refused() {
    // Issue 29 case 1: the witness proved index 35 at term 3 on this
    // member's disk; its volume was put back to a copy ending at 12 (term 2).
    let mut i = at(12, 12);
    i.witness = Answer::Answered(Some(durable_witness(0xa, 0xc, 35, 3)));
    let d = decide(&i);
    assert_eq!(
        (d.row, d.verdict.exit().code()),
        (Row::RolledBack, 17),
        "{}",
        d.reason
    );
    assert!(
        d.reason.contains("index 12") && d.reason.contains("35"),
        "{}",
        d.reason
    );
    assert!(
        d.remedy
            .contains("kubectl -n ns delete lease etcd-witness-m1"),
        "{}",
        d.remedy
    );
    // A peer without a leader (the lagging one) is no way out.
    i.live = altered(leader_at(0xc, 40), |l| l.leader_heard = false);
    assert_eq!(decide(&i).row, Row::RolledBack);
    // Nor a leader whose commit is below the mark.
    i.live = leader_at(0xc, 20);
    let d = decide(&i);
    assert_eq!(d.row, Row::RolledBack);
    assert!(d.reason.contains("commit 20"), "{}", d.reason);
    // Nor a leader of another cluster.
    i.live = leader_at(0xd, 40);
    assert_eq!(decide(&i).verdict, Verdict::RefuseForeign);
    // The leader and a majority of its cluster hold the mark: it catches up,
    // and is not ready before it reached it.
    i.live = leader_at(0xc, 40);
    let d = decide(&i);
    assert_eq!(
        (d.row, d.verdict),
        (Row::StartCatchingUp, Verdict::Start),
        "{}",
        d.reason
    );
    assert_eq!(d.floor.map(|f| f.0), Some(35));
    // Only the leader holds the entries (m3 answers at 20): were the leader
    // to fail before m3 caught up, m3 could win this member's vote without
    // them. It waits (the kubelet retries) until a quorum other than itself
    // holds them.
    i.live = altered(leader_at(0xc, 40), |l| l.positions[1].raft_index = Some(20));
    let d = decide(&i);
    assert_eq!(d.row, Row::RolledBack, "{}", d.reason);
    assert!(
        d.reason.contains("only 1 voter(s) other than this member"),
        "{}",
        d.reason
    );
    // A cluster answering in a term behind the directory's is a younger
    // history under the same IDs, not the one this member helped commit.
    i.live = altered(leader_at(0xc, 40), |l| l.raft_term = Some(2));
    rec(&mut i).term = 3;
    let d = decide(&i);
    assert_eq!(d.row, Row::RolledBack, "{}", d.reason);
    assert!(
        d.reason.contains("raft term 2, behind the directory's 3"),
        "{}",
        d.reason
    );
    // The term alone also tells: the same index, but an older term.
    let mut i = at(35, 35);
    i.witness = Answer::Answered(Some(durable_witness(0xa, 0xc, 35, 3)));
    assert_eq!(decide(&i).row, Row::RolledBack);
    // At or past the mark: an ordinary start, held to the mark for readiness.
    rec(&mut i).log_end_term = 3;
    let d = decide(&i);
    assert_eq!(d.row, Row::Start, "{}", d.reason);
    assert_eq!(d.floor.map(|f| f.0), Some(35));
}

#[test]
fn regression_a_wal_put_back_under_a_current_db_is_refused_on_its_own_word() {
    // Issue 29 case 2: backend consistent index 35, the WAL ends at 13.
    let mut i = at(13, 35);
    let d = decide(&i);
    assert_eq!(
        (d.row, d.verdict.exit().code()),
        (Row::AppliedPastLog, 17),
        "{}",
        d.reason
    );
    // The backend's term above the WAL's last term says the same.
    let mut j = at(35, 35);
    rec(&mut j).applied_term = Some(3);
    assert_eq!(decide(&j).row, Row::AppliedPastLog);
    // With the leader and a majority past the backend's index: it catches
    // up (etcd skips what its backend applied).
    i.live = leader_at(0xc, 35);
    let d = decide(&i);
    assert_eq!(d.row, Row::StartCatchingUp, "{}", d.reason);
    assert_eq!(d.floor.map(|f| f.0), Some(35));
}

#[test]
fn an_earlier_sidecars_mark_is_said_but_never_held_against_a_directory() {
    let mut i = at(12, 12);
    let mut w = durable_witness(0xa, 0xc, 35, 3);
    w.durable = false;
    w.incarnation = Incarnation::default();
    i.witness = Answer::Answered(Some(w));
    let d = decide(&i);
    assert_eq!(d.row, Row::Start, "{}", d.reason);
    assert!(
        d.warnings.iter().any(|w| w.contains("earlier sidecar")),
        "{:?}",
        d.warnings
    );
}

#[test]
fn regression_an_old_incarnations_witness_neither_vouches_nor_refuses() {
    // Issue 29 case 3: an old incarnation's PVC (formed with token old) under a
    // bootstrap member of a re-created cluster (token new), the old Lease there.
    let mut i = initialized(0xa, 0xc);
    rec(&mut i).log_end_index = 10;
    rec(&mut i).log_end_term = 2;
    i.me.derived = Some(DerivedIds {
        member_id: MemberId::new(0x1a),
        cluster_id: ClusterId::new(0x1c),
    });
    i.me.token = Some("new".into());
    i.me.token_sha256 = Some(crate::disk::ids::token_sha256("new"));
    let mut old = durable_witness(0xa, 0xc, 3, 2);
    old.incarnation = Incarnation::new(Some("old"), None);
    i.witness = Answer::Answered(Some(old.clone()));
    let d = decide(&i);
    assert_eq!(d.row, Row::ForeignIncarnation, "{}", d.reason);
    assert!(
        d.warnings
            .iter()
            .any(|w| w.contains("another incarnation") && w.contains("delete lease")),
        "{:?}",
        d.warnings
    );
    // The same with the Lease an earlier sidecar wrote (no incarnation): its
    // IDs are not the ones the flags derive.
    let mut legacy = old.clone();
    legacy.incarnation = Incarnation::default();
    legacy.durable = false;
    i.witness = Answer::Answered(Some(legacy));
    assert_eq!(decide(&i).row, Row::ForeignIncarnation);
    // Of this incarnation, the witness vouches (a member whose URL was updated).
    let mut ours = old;
    ours.incarnation = Incarnation::new(Some("new"), None);
    i.witness = Answer::Answered(Some(ours));
    assert_eq!(decide(&i).verdict, Verdict::Start);
}

#[test]
fn regression_a_fresh_cluster_is_not_refused_on_an_old_incarnations_lease() {
    // Issue 29 case 4: a fresh seed on a fresh volume, the previous
    // incarnation's Lease (another token) still there.
    let mut i = inputs(Dir::Empty);
    i.me = seed_me();
    i.me.token_sha256 = Some(crate::disk::ids::token_sha256("new"));
    i.me.derived = Some(DerivedIds {
        member_id: MemberId::new(0x1a),
        cluster_id: ClusterId::new(0x1c),
    });
    i.operator = op(true, None, None);
    i.witness = Answer::Answered(Some(WitnessFacts {
        incarnation: Incarnation::new(Some("old"), None),
        ..durable_witness(0xa, 0xc, 30, 2)
    }));
    let d = decide(&i);
    assert_eq!(d.verdict, Verdict::Bootstrap, "{}", d.reason);
    assert!(
        d.warnings
            .iter()
            .any(|w| w.contains("kubectl -n ns delete lease")),
        "{:?}",
        d.warnings
    );
    // An earlier sidecar's Lease of IDs the flags do not derive: the same.
    i.witness = witness(0xa, 0xc);
    assert_eq!(decide(&i).verdict, Verdict::Bootstrap);
    // The Lease of the IDs the flags derive (the PR 355 window): refused, and
    // the remedy names the Lease for the case it is a leftover after all.
    i.witness = witness(0x1a, 0x1c);
    let d = decide(&i);
    assert_eq!(d.verdict, Verdict::RefuseEmptyFormed);
    assert!(
        d.remedy
            .contains("kubectl -n ns delete lease etcd-witness-m1"),
        "{}",
        d.remedy
    );
    // Another EtcdCluster (uid) of the same token: another incarnation too.
    i.operator = altered_op(op(true, None, None), |o| {
        o.cluster_uid = Some("uid-new".into())
    });
    i.witness = Answer::Answered(Some(WitnessFacts {
        incarnation: Incarnation::new(Some("new"), Some("uid-old")),
        ..durable_witness(0x1a, 0x1c, 30, 2)
    }));
    assert_eq!(decide(&i).verdict, Verdict::Bootstrap);
}

fn altered_op(
    mut a: Answer<OperatorFacts>,
    f: impl FnOnce(&mut OperatorFacts),
) -> Answer<OperatorFacts> {
    if let Answer::Answered(o) = &mut a {
        f(o);
    }
    a
}

#[test]
fn a_witness_with_an_unreadable_member_id_never_blocks_a_readded_members_join() {
    let mut i = inputs(Dir::Empty);
    i.live = live(0xc, &[(0xb, "", ME, false), (0x9, "m0", M0, true)]);
    i.witness = Answer::Answered(Some(WitnessFacts {
        member_id: None,
        ..durable_witness(0xa, 0xc, 30, 2)
    }));
    let d = decide(&i);
    assert_eq!(d.verdict, Verdict::Join, "{}", d.reason);
    // Without the re-add it still says the member started.
    i.live = live(0xc, &[(0x9, "m0", M0, true)]);
    assert_eq!(decide(&i).verdict, Verdict::RefuseEmptyFormed);
}

#[test]
fn a_restore_is_held_to_its_witness_unless_bumped_above_it() {
    // Issue 29 case 5: a snapshot restore under the cluster's own IDs, the
    // witness at index 35, revision 55.
    let mut i = at(3, 3);
    rec(&mut i).restored = true;
    rec(&mut i).revision = Some(40);
    let mut w = durable_witness(0xa, 0xc, 35, 3);
    w.revision = Some(55);
    i.witness = Answer::Answered(Some(w));
    let d = decide(&i);
    assert_eq!(
        (d.row, d.verdict.exit().code()),
        (Row::RestoredBehind, 17),
        "{}",
        d.reason
    );
    assert!(
        d.remedy.contains("kubectl -n ns delete lease") && d.remedy.contains("--bump-revision"),
        "{}",
        d.remedy
    );
    // A leader past the mark is no way out for a restore.
    i.live = leader_at(0xc, 50);
    assert_eq!(decide(&i).row, Row::RestoredBehind);
    // Bumped above the witness's revision, no older history running: start,
    // and the witnesses are re-based.
    rec(&mut i).revision = Some(1_000_055);
    i.live = Answer::NotConfigured;
    let d = decide(&i);
    assert_eq!(d.row, Row::StartRestoredAbove, "{}", d.reason);
    assert!(d.rebase_witness && d.floor.is_none());
    // The peers restored from the same snapshot answer at its revision or
    // above: the restored cluster, not an older history.
    i.live = altered(leader_at(0xc, 9), |l| {
        l.positions = vec![LivePosition {
            member_id: MemberId::new(0x9),
            raft_index: Some(9),
            applied_index: None,
            applied_term: None,
            revision: Some(1_000_060),
            leader: false,
            kv_hash: None,
            kv_unanswered: false,
        }]
    });
    assert_eq!(decide(&i).row, Row::StartRestoredAbove);
    // A lone member restored under the cluster that kept running.
    i.live = altered(leader_at(0xc, 80), |l| {
        l.positions = vec![LivePosition {
            member_id: MemberId::new(0x9),
            raft_index: Some(80),
            applied_index: None,
            applied_term: None,
            revision: Some(70),
            leader: false,
            kv_hash: None,
            kv_unanswered: false,
        }]
    });
    let d = decide(&i);
    assert_eq!(d.row, Row::RestoredBehind, "{}", d.reason);
    assert!(d.reason.contains("older history"), "{}", d.reason);
}

/// A WAL with no entry whose member's own witness proved its disk held
/// entries started before (row 7a), even where the live list shows a re-added
/// member under another ID at its URL (which makes the witness stale for an
/// empty directory, not for this WAL of the old ID). Found by the property
/// test `a_log_behind_its_witness_starts_only_as_5d_or_5e`.
#[test]
fn an_empty_log_whose_own_witness_saw_entries_started_before() {
    let mut i = at(0, 0);
    let r = rec(&mut i);
    r.empty_log = true;
    r.applied_index = None;
    r.applied_term = None;
    r.revision = None;
    i.live = live(
        0xc,
        &[(0xa, "", "http://m0:2380", false), (0xb, "", ME, false)],
    );
    let before = decide(&i);
    assert_eq!(before.verdict, Verdict::Start, "{}", before.reason);
    i.witness_file = Some(durable_witness(0xa, 0xc, 5, 2));
    let d = decide(&i);
    assert_eq!(d.verdict, Verdict::RefuseEmptyFormed, "{}", d.reason);
    assert_eq!(d.row, Row::EmptyLogFormed);
    assert!(
        d.reason.contains("records raft index 5 on its disk"),
        "{}",
        d.reason
    );
}

/// A cluster of three voters whose leader (m2) answers at `commit` in term
/// 3, and whose other members answer at `others` (`None`: did not answer).
fn heard(commit: u64, others: [Option<u64>; 2]) -> Answer<LiveFacts> {
    altered(leader_at(0xc, commit), |l| {
        l.positions = [0xb, 0xd]
            .into_iter()
            .zip(others)
            .filter_map(|(id, at)| {
                at.map(|n| LivePosition {
                    member_id: MemberId::new(id),
                    raft_index: Some(n),
                    applied_index: None,
                    applied_term: None,
                    revision: None,
                    leader: false,
                    kv_hash: None,
                    kv_unanswered: false,
                })
            })
            .collect();
    })
}

#[test]
fn regression_a_rolled_back_volume_whose_witness_lease_cannot_be_read_is_not_started() {
    // The review's F1 on 3.6.16: the Lease that proves index 35 exists but
    // answers 503 for the whole budget; the log ends at 12. Only m3, which
    // missed the writes, is up: no leader.
    let mut i = at(12, 12);
    i.witness = Answer::NoAnswer("503 Service Unavailable".into());
    i.live = altered(heard(12, [None, Some(12)]), |l| {
        l.leader_heard = false;
        l.leader_raft_index = None;
    });
    let d = decide(&i);
    assert_eq!(
        (d.verdict, d.row, d.verdict.exit().code()),
        (Verdict::PhaseUnknown, Row::WitnessUnread, 14),
        "{d:?}"
    );
    assert!(
        d.reason.contains("503 Service Unavailable") && d.reason.contains("without a leader"),
        "{}",
        d.reason
    );
    assert!(
        d.remedy
            .starts_with("make the witness Lease readable (the witness Lease: 503")
            && d.remedy.contains("Do not wipe"),
        "{}",
        d.remedy
    );
    // No live source at all: the same.
    i.live = Answer::NoAnswer("timed out".into());
    assert_eq!(row(&i), Row::WitnessUnread);
    // The leader and one other of three voters at its commit: this member's
    // vote could still elect the one behind. Both others: it starts.
    i.live = heard(40, [Some(40), None]);
    assert_eq!(row(&i), Row::WitnessUnread);
    i.live = heard(40, [Some(40), Some(39)]);
    assert_eq!(row(&i), Row::WitnessUnread);
    i.live = heard(40, [Some(40), Some(41)]);
    assert_eq!(decide(&i).verdict, Verdict::Start, "{:?}", decide(&i));
    // Voters are counted once: two answers of one member are one voter.
    i.live = altered(heard(40, [Some(40), None]), |l| {
        let again = l.positions[0];
        l.positions.push(again);
    });
    assert_eq!(row(&i), Row::WitnessUnread);
    // This member's own answer never counts (it is the one in question).
    i.live = altered(heard(40, [Some(40), None]), |l| {
        l.positions.push(LivePosition {
            member_id: MemberId::new(0xa),
            raft_index: Some(40),
            applied_index: None,
            applied_term: None,
            revision: None,
            leader: false,
            kv_hash: None,
            kv_unanswered: false,
        })
    });
    assert_eq!(row(&i), Row::WitnessUnread);
    // A cluster in a term behind the directory's is not its word.
    rec(&mut i).term = 2;
    i.live = altered(heard(40, [Some(40), Some(40)]), |l| l.raft_term = Some(1));
    assert_eq!(row(&i), Row::WitnessUnread);
}

#[test]
fn a_lone_healthy_restart_with_the_api_down_starts_on_its_clusters_word() {
    // An intact member restarting while the API server is down: its cluster
    // is up, the leader and both others at the leader's commit.
    let mut i = at(40, 40);
    i.witness = Answer::NoAnswer("connection refused".into());
    i.live = heard(40, [Some(40), Some(40)]);
    let d = decide(&i);
    assert_eq!((d.verdict, d.row), (Verdict::Start, Row::Start), "{d:?}");
    // A Lease that answered 404 (none) or a source that is not configured
    // says nothing either way: row 5 on the directory's own word.
    i.live = Answer::NoAnswer("timed out".into());
    i.witness = Answer::Answered(None);
    assert_eq!(row(&i), Row::Start);
    i.witness = Answer::NotConfigured;
    assert_eq!(row(&i), Row::Start);
}

#[test]
fn a_witness_file_that_cannot_be_read_is_a_witness_that_did_not_answer() {
    let mut i = at(12, 12);
    i.witness_file_unread = Some("reading /pod/witness.json: permission denied".into());
    let d = decide(&i);
    assert_eq!(
        (d.verdict, d.row),
        (Verdict::PhaseUnknown, Row::WitnessUnread),
        "{d:?}"
    );
    assert!(
        d.remedy.starts_with(
            "make the witness file readable (the witness file: reading /pod/witness.json: permission denied)"
        ),
        "{}",
        d.remedy
    );
    i.live = heard(12, [Some(12), Some(12)]);
    assert_eq!(decide(&i).verdict, Verdict::Start);
    // A witness that did answer and shows the roll-back is still row 6e.
    i.live = Answer::NoAnswer("timed out".into());
    i.witness = Answer::Answered(Some(durable_witness(0xa, 0xc, 35, 3)));
    assert_eq!(row(&i), Row::RolledBack);
}

#[test]
fn a_log_behind_its_witness_catches_up_only_on_distinct_voters_at_the_leaders_commit() {
    // Reviewer finding: row 5d counted answers, not voters, and held them to
    // the witness's mark, not to the leader's commit.
    let mut i = at(12, 12);
    i.witness = Answer::Answered(Some(durable_witness(0xa, 0xc, 35, 3)));
    // m3 answers past the mark but behind the leader's commit 40: entries in
    // 36..=40 may have been committed by this member and the leader alone.
    i.live = altered(leader_at(0xc, 40), |l| l.positions[1].raft_index = Some(36));
    let d = decide(&i);
    assert_eq!(d.row, Row::RolledBack, "{}", d.reason);
    assert!(
        d.reason.contains("only 1 voter(s) other than this member"),
        "{}",
        d.reason
    );
    // The leader answering twice (two endpoints of one member) counts once.
    i.live = altered(leader_at(0xc, 40), |l| {
        l.positions[1].member_id = MemberId::new(0xb);
    });
    assert_eq!(decide(&i).row, Row::RolledBack);
    // An answer from a member the leader's list does not hold as a voter
    // (a learner) does not count.
    i.live = altered(leader_at(0xc, 40), |l| {
        l.members
            .iter_mut()
            .find(|m| m.id == MemberId::new(0xd))
            .unwrap()
            .is_learner = true;
    });
    assert_eq!(decide(&i).row, Row::RolledBack);
    // Both other voters at the leader's commit: it catches up.
    i.live = leader_at(0xc, 40);
    assert_eq!(decide(&i).row, Row::StartCatchingUp);
}

#[test]
fn the_others_are_held_to_the_leaders_commit_of_an_earlier_round() {
    // Under a steady write load the others trail the leader's current commit
    // by a moment; asked again, they are held to the commit an earlier round
    // heard (this member already stopped), never below the mark.
    let mut i = at(12, 12);
    i.witness = Answer::Answered(Some(durable_witness(0xa, 0xc, 35, 3)));
    let trailing = |bar: Option<u64>| {
        altered(leader_at(0xc, 40), |l| {
            for p in &mut l.positions {
                p.raft_index = Some(38);
            }
            // The leader itself answers at its commit.
            l.positions[0].raft_index = Some(40);
            l.commit_bar = bar;
        })
    };
    i.live = trailing(None);
    assert_eq!(decide(&i).row, Row::RolledBack);
    i.live = trailing(Some(37));
    let d = decide(&i);
    assert_eq!(d.row, Row::StartCatchingUp, "{}", d.reason);
    i.live = trailing(Some(39));
    let d = decide(&i);
    assert_eq!(d.row, Row::RolledBack, "{}", d.reason);
    assert!(d.reason.contains("at or past index 39"), "{}", d.reason);
    // An earlier commit below the mark holds them to the mark.
    i.live = altered(trailing(Some(20)), |l| l.positions[1].raft_index = Some(30));
    assert_eq!(decide(&i).row, Row::RolledBack);
}

#[test]
fn a_witness_whose_ids_cannot_be_read_is_not_dropped_in_silence() {
    let mut i = at(12, 12);
    let mut w = durable_witness(0xa, 0xc, 35, 3);
    w.member_id = None;
    i.witness = Answer::Answered(Some(w));
    let d = decide(&i);
    assert_eq!(
        (d.row, d.verdict.exit().code()),
        (Row::WitnessUnread, 14),
        "{}",
        d.reason
    );
    assert!(
        d.reason
            .contains("no member or cluster ID that can be read")
            && d.remedy
                .contains("kubectl -n ns delete lease etcd-witness-m1"),
        "{}\n{}",
        d.reason,
        d.remedy
    );
    // The cluster holding everything lets it start, as for any unread witness.
    i.live = leader_at(0xc, 40);
    assert!(
        decide(&i).verdict == Verdict::Start,
        "{}",
        decide(&i).reason
    );
}

/// `leader_at`, both answering members (the leader m2 and m3) having
/// applied through `commit`, the last applied entry of `term`, at `revision`.
/// Each answering member's `HashKV` at `revision` (in the order of the
/// positions), against the directory's own hash 7.
fn hashed_at(l: &mut LiveFacts, revision: i64, theirs: [u32; 2]) {
    for (p, t) in l.positions.iter_mut().zip(theirs) {
        p.kv_hash = Some(KvHashCheck {
            revision,
            theirs: t,
            ours: 7,
            by: KeyspaceProbe::HashKv,
        });
    }
}

fn leader_answers(commit: u64, term: u64, revision: i64) -> Answer<LiveFacts> {
    altered(leader_at(0xc, commit), |l| {
        l.raft_term = Some(term);
        l.positions[0].leader = true;
        for p in &mut l.positions {
            p.applied_index = Some(commit);
            p.applied_term = Some(term);
            p.revision = Some(revision);
        }
    })
}

#[test]
fn regression_a_copy_from_before_a_whole_cluster_restore_ahead_of_its_witness_is_refused() {
    // Helper-15's finding 1: a copy from before every member was restored,
    // at index 5000 in term 50, while the rebased witness is at 30 and the
    // restored cluster runs in term 3. Not behind any witness, it started on
    // row 5 and, with the highest term, led the restored cluster back to
    // its own history. Once the restored cluster applied past the copy's
    // index in its lower terms, every member of it says so.
    let mut i = at(5000, 5000);
    rec(&mut i).log_end_term = 50;
    rec(&mut i).term = 50;
    rec(&mut i).applied_term = Some(50);
    i.witness = Answer::Answered(Some(durable_witness(0xa, 0xc, 30, 3)));
    i.live = leader_answers(5040, 3, 5000);
    let d = decide(&i);
    assert_eq!(
        (d.row, d.verdict.exit().code()),
        (Row::OtherHistory, 11),
        "{}",
        d.reason
    );
    assert!(
        d.reason.contains("applied index 5040 in term 3")
            && d.reason.contains("applied index 5000 of term 50")
            && d.reason.contains("2 of the cluster's 3 voters"),
        "{}",
        d.reason
    );
    assert!(d.remedy.contains("member remove"), "{}", d.remedy);
    // Each answer speaks for its own member: two signs of three voters are
    // a majority whatever else was heard.
    i.live = altered(leader_answers(5040, 3, 5000), |l| l.majority_heard = false);
    assert_eq!(decide(&i).row, Row::OtherHistory);
    // One member of the two answering is not a majority of three, and the
    // other answers without a sign: with this member, the majority is of
    // its history (a member left inconsistent beside healthy ones).
    i.live = altered(leader_answers(5040, 3, 5000), |l| {
        l.positions[1].applied_term = Some(50)
    });
    assert_eq!(decide(&i).row, Row::Start);
    // The one with a sign answering alone: not enough to refuse on, too
    // much to start on (row 6j; fault schedule seed 4101).
    i.live = altered(leader_answers(5040, 3, 5000), |l| {
        l.positions.truncate(1);
        l.majority_heard = false;
    });
    let d = decide(&i);
    assert_eq!(
        (d.row, d.verdict.exit().code()),
        (Row::OtherHistoryUnconfirmed, 14),
        "{}",
        d.reason
    );
    assert!(
        d.reason.contains("1 of the cluster's 3 voters answer so")
            && d.reason.contains("1 of the 3 voters, this member counted"),
        "{}",
        d.reason
    );
    assert!(
        d.remedy.contains("bring back the other members"),
        "{}",
        d.remedy
    );
    // A member that applied nothing since it started reports term 0.
    i.live = leader_answers(5040, 0, 5000);
    assert_eq!(decide(&i).row, Row::Start);
    // The same copy under a cluster of its own history is an ordinary
    // member ahead of the others, or behind them.
    i.live = leader_answers(4990, 50, 4990);
    assert_eq!(decide(&i).row, Row::Start);
    i.live = leader_answers(5040, 51, 5040);
    assert_eq!(decide(&i).row, Row::Start);
    // While the restored cluster is behind the copy in index (and revision),
    // no position shows another history: the keyspaces are compared at the
    // lowest revision all hold (HashKV), and differ on both members.
    i.live = leader_answers(40, 3, 5000);
    assert_eq!(decide(&i).row, Row::Start, "not compared: no sign");
    assert_eq!(keyspace_check_at(&i), Some(5000));
    let hashed = |i: &mut Inputs, theirs: [u32; 2]| {
        i.live = altered(leader_answers(40, 3, 5000), |l| hashed_at(l, 5000, theirs));
        decide(i)
    };
    let d = hashed(&mut i, [8, 9]);
    assert_eq!(
        (d.row, d.verdict.exit().code()),
        (Row::OtherHistory, 11),
        "{}",
        d.reason
    );
    assert!(
        d.reason
            .contains("answers HashKV 0x00000008 at revision 5000")
            && d.reason.contains("hashes to 0x00000007")
            && d.reason.contains("2 of the cluster's 3 voters"),
        "{}",
        d.reason
    );
    // One of three is no majority (a member of 3.5.0-3.5.5 left inconsistent
    // by a defragmentation hashes apart from the rest).
    assert_eq!(hashed(&mut i, [8, 7]).row, Row::Start);
    // The same keyspace: one history, however far the copy's log runs.
    assert_eq!(hashed(&mut i, [7, 7]).row, Row::Start);
}

#[test]
fn the_keyspaces_are_compared_only_past_the_leader_or_a_majority_and_at_a_revision_all_hold() {
    // Behind the leader in index and revision: the position signs see it.
    let mut i = at(5000, 5000);
    i.live = leader_answers(5040, 3, 5040);
    assert_eq!(keyspace_check_at(&i), None);
    // Past it in revision alone, or in applied index alone.
    i.live = leader_answers(5040, 3, 4990);
    assert_eq!(keyspace_check_at(&i), Some(4990));
    i.live = leader_answers(4990, 3, 5040);
    assert_eq!(keyspace_check_at(&i), Some(5000));
    // The lowest revision of the voters that answered.
    i.live = altered(leader_answers(40, 3, 5000), |l| {
        l.positions[1].revision = Some(4000)
    });
    assert_eq!(keyspace_check_at(&i), Some(4000));
    // Each answer speaks for its own member, a majority heard or not.
    i.live = altered(leader_answers(40, 3, 5000), |l| l.majority_heard = false);
    assert_eq!(keyspace_check_at(&i), Some(5000));
    // No leader answering (this member led, and was killed before the others
    // elected another): past both others.
    i.live = altered(leader_answers(40, 3, 5000), |l| {
        l.positions[0].leader = false;
        l.leader_heard = false;
    });
    assert_eq!(keyspace_check_at(&i), Some(5000));
    i.live = altered(leader_answers(40, 3, 5000), |l| {
        l.positions[0].leader = false;
        l.leader_heard = false;
        l.positions[1].applied_index = Some(5001);
        l.positions[1].revision = Some(5001);
    });
    assert_eq!(keyspace_check_at(&i), None, "past one voter of three");
    // One voter answering of three, the directory past it: no majority to
    // refuse with, but a sign there is one to wait on (row 6j).
    i.live = altered(leader_answers(40, 3, 5000), |l| {
        l.positions.truncate(1);
    });
    assert_eq!(keyspace_check_at(&i), Some(5000));
    // Behind it, the position signs see what there is to see.
    i.live = altered(leader_answers(5040, 3, 5040), |l| {
        l.positions.truncate(1);
    });
    assert_eq!(keyspace_check_at(&i), None);
    // No voter answering: nothing to compare with.
    i.live = altered(leader_answers(40, 3, 5000), |l| {
        l.positions.clear();
    });
    assert_eq!(keyspace_check_at(&i), None);
    // Another cluster's answer says nothing of this directory's history.
    i.live = altered(leader_answers(40, 3, 5000), |l| {
        l.cluster_id = ClusterId::new(0xe)
    });
    assert_eq!(keyspace_check_at(&i), None);
}

#[test]
fn regression_a_copy_from_before_a_bumped_restore_behind_its_rebased_witness_is_refused() {
    // Helper-15's finding 2: a copy at index 20 (revision 20, term 2) from
    // before every member was restored with its revisions bumped by a
    // million; the witness was rebased to the restored history (index 30)
    // and the restored cluster's leader and a quorum answer at 40. Row 5d
    // let it catch up: the histories share their founding entries, so etcd
    // appended the restored history to a backend of the other one.
    let mut i = at(20, 20);
    i.witness = Answer::Answered(Some(durable_witness(0xa, 0xc, 30, 2)));
    i.live = leader_answers(40, 3, 1_000_040);
    let d = decide(&i);
    assert_eq!(
        (d.row, d.verdict.exit().code()),
        (Row::OtherHistory, 11),
        "{}",
        d.reason
    );
    assert!(
        d.reason.contains("revision 1000040")
            && d.reason.contains("applied index 20 at revision 20")
            && d.reason.contains("in 20 entries"),
        "{}",
        d.reason
    );
    // One history: at most one revision per entry (a revision each for the
    // 20 entries past the applied index), it catches up (5d); one more is
    // the slack for etcd 3.5.0-3.5.2's consistent index saved early.
    i.live = leader_answers(40, 3, 40);
    assert_eq!(decide(&i).row, Row::StartCatchingUp);
    i.live = leader_answers(40, 3, 41);
    assert_eq!(decide(&i).row, Row::StartCatchingUp);
    i.live = leader_answers(40, 3, 42);
    assert_eq!(decide(&i).row, Row::OtherHistory);
    // A cluster behind the directory never holds a later revision.
    let mut i = at(50, 50);
    i.live = leader_answers(45, 3, 45);
    assert_eq!(decide(&i).row, Row::Start);
    i.live = leader_answers(45, 3, 60);
    assert_eq!(decide(&i).row, Row::OtherHistory);
    // One member alone is not the cluster's word, leader or not: etcd
    // 3.5.0-3.5.5 could leave a member's revision ahead of its index for
    // good (a kill during a defragmentation).
    for one in 0..2 {
        i.live = altered(leader_answers(45, 3, 45), |l| {
            l.positions[one].revision = Some(1_000_000)
        });
        assert_eq!(decide(&i).row, Row::Start);
    }
    // Nor when this member is a learner, or missing from the list: it
    // counts among the voters all the same (helper-17's review), so one
    // answer of the two others is never a majority.
    for missing in [false, true] {
        i.live = altered(leader_answers(45, 3, 45), |l| {
            l.positions[0].revision = Some(1_000_000);
            if missing {
                l.members.retain(|m| m.id != MemberId::new(0xa));
            } else if let Some(me) = l.members.iter_mut().find(|m| m.id == MemberId::new(0xa)) {
                me.is_learner = true;
            }
            l.positions.truncate(1);
        });
        assert_ne!(decide(&i).row, Row::OtherHistory, "{:?}", i.live);
    }
}

proptest::proptest! {
    /// Row 6h's two position signs, over every small position: a directory
    /// at applied index 50 of term 4 and revision 50, the leader (m2) and m3
    /// answering with positions drawn at random. It is refused as another
    /// history exactly when both answers show one (a majority of the three
    /// voters), and each shows one exactly when it applied past the
    /// directory in a lower term (not 0), or its revision is more than one
    /// further past the directory's than its commit index is past 50.
    #[test]
    fn the_position_signs_refuse_exactly_on_a_majority_of_answers(
        answers in proptest::collection::vec((40u64..60, 40u64..60, 0u64..7, 40i64..60), 2),
    ) {
        let mut i = at(50, 50);
        rec(&mut i).log_end_term = 4;
        rec(&mut i).applied_term = Some(4);
        i.live = altered(leader_answers(50, 4, 50), |l| {
            for (p, &(commit, applied, term, revision)) in l.positions.iter_mut().zip(&answers) {
                p.raft_index = Some(commit);
                p.applied_index = Some(applied.min(commit));
                p.applied_term = Some(term);
                p.revision = Some(revision);
            }
            l.leader_raft_index = Some(answers[0].0);
        });
        let shows = |&(commit, applied, term, revision): &(u64, u64, u64, i64)| {
            let applied = applied.min(commit);
            (term > 0 && applied > 50 && term < 4) || revision - 50 > commit.saturating_sub(50) as i64 + 1
        };
        let d = decide(&i);
        let expected = answers.iter().all(shows);
        proptest::prop_assert_eq!(d.row == Row::OtherHistory, expected, "{:?} {}", answers, d.reason);
        if !expected {
            proptest::prop_assert_eq!(d.verdict, Verdict::Start, "{:?} {}", answers, d.reason);
        }
    }
}

#[test]
fn regression_a_copy_put_back_under_the_killed_leader_is_refused_before_the_next_election() {
    // Found by the fault schedules' restored shape (seed 14, etcd 3.6): the
    // copy went back under the member that led the restored cluster, and
    // preflight asked the others within the election timeout. They answered
    // without a leader (naming the killed one), so row 6h, which took only
    // the leader's word, was skipped, no keyspace was compared, and the copy
    // started on row 5 and led the cluster back to its history: 96 of 152
    // acknowledged writes lost. Each answer speaks for its own member.
    let mut i = at(5000, 5000);
    let leaderless = |theirs: Option<[u32; 2]>| {
        altered(leader_answers(40, 3, 4000), |l| {
            l.positions[0].leader = false;
            l.leader_heard = false;
            if let Some(theirs) = theirs {
                hashed_at(l, 4000, theirs);
            }
        })
    };
    i.live = leaderless(None);
    assert_eq!(keyspace_check_at(&i), Some(4000));
    i.live = leaderless(Some([8, 9]));
    let d = decide(&i);
    assert_eq!(
        (d.row, d.verdict.exit().code()),
        (Row::OtherHistory, 11),
        "{}",
        d.reason
    );
    // The same keyspace: one history; the member starts.
    i.live = leaderless(Some([7, 7]));
    assert_eq!(decide(&i).row, Row::Start);
}

#[test]
fn a_member_behind_the_directory_beside_one_with_a_sign_has_its_keyspace_compared() {
    // The restored cluster's leader answers past the copy in a lower term
    // (a position sign: one of three), a lagging follower behind the copy
    // (no position sign). Before, only a directory past the leader had its
    // keyspace compared, so the follower's difference was never asked for
    // and one sign of three started the copy.
    let mut i = at(5000, 5000);
    rec(&mut i).log_end_term = 50;
    rec(&mut i).term = 50;
    rec(&mut i).applied_term = Some(50);
    let live = |hashes: Option<[u32; 2]>| {
        altered(leader_answers(5040, 3, 5040), |l| {
            l.positions[1].applied_index = Some(40);
            l.positions[1].revision = Some(4000);
            if let Some(h) = hashes {
                hashed_at(l, 4000, h);
            }
        })
    };
    i.live = live(None);
    assert_eq!(decide(&i).row, Row::Start, "one sign of three");
    assert_eq!(keyspace_check_at(&i), Some(4000));
    i.live = live(Some([7, 9]));
    let d = decide(&i);
    assert_eq!(
        (d.row, d.verdict.exit().code()),
        (Row::OtherHistory, 11),
        "{}",
        d.reason
    );
    // An ordinary member behind every other, no sign anywhere: nothing read.
    let mut j = at(5000, 5000);
    j.live = leader_answers(5040, 3, 5040);
    assert_eq!(keyspace_check_at(&j), None);
}

#[test]
fn regression_a_copy_refused_then_left_with_one_answer_waits_and_never_starts() {
    // Found by the fault schedules at the final code of stop 42 (seed 4101
    // on 3.7, and 4116 bumped): the copy from before a whole-cluster restore
    // was refused on row 6h, then one of the two others was killed. At the
    // next preflight one member answered, leaderless, the copy past it: row
    // 6h needed two answers, the keyspace was never compared, and the copy
    // started on row 5, making a quorum with the killed member when it came
    // back: 84 of 88 acknowledged writes lost.
    let mut i = at(5000, 5000);
    let alone = |theirs: Option<u32>| {
        altered(leader_answers(40, 3, 4000), |l| {
            l.positions.truncate(1);
            l.positions[0].leader = false;
            l.leader_heard = false;
            l.majority_heard = false;
            if let Some(t) = theirs {
                hashed_at(l, 4000, [t, t]);
            }
        })
    };
    i.live = alone(None);
    assert_eq!(keyspace_check_at(&i), Some(4000));
    i.live = alone(Some(8));
    let d = decide(&i);
    assert_eq!(
        (d.row, d.verdict, d.verdict.exit().code()),
        (Row::OtherHistoryUnconfirmed, Verdict::PhaseUnknown, 14),
        "{}",
        d.reason
    );
    assert!(
        d.reason.contains("answers HashKV 0x00000008"),
        "{}",
        d.reason
    );
    // The same keyspace at a revision both hold: one history, it starts.
    i.live = alone(Some(7));
    assert_eq!(decide(&i).row, Row::Start);
    // A position sign from the one answer waits the same (the copy behind a
    // restored member that applied past it in a lower term).
    let mut j = at(5000, 5000);
    rec(&mut j).log_end_term = 50;
    rec(&mut j).term = 50;
    rec(&mut j).applied_term = Some(50);
    j.live = altered(leader_answers(5040, 3, 5040), |l| {
        l.positions.truncate(1);
        l.leader_heard = false;
        l.positions[0].leader = false;
    });
    assert_eq!(decide(&j).row, Row::OtherHistoryUnconfirmed);
    // In five voters, two signs and one answer without: 6j, not 6h.
    let mut k = at(5000, 5000);
    rec(&mut k).log_end_term = 50;
    rec(&mut k).term = 50;
    rec(&mut k).applied_term = Some(50);
    k.live = altered(leader_answers(5040, 3, 5040), |l| {
        let mut extra = l.members[1].clone();
        for id in [0xe, 0xf] {
            extra.id = MemberId::new(id);
            l.members.push(extra.clone());
        }
        let mut p = l.positions[1];
        p.member_id = MemberId::new(0xe);
        p.applied_term = Some(50);
        p.applied_index = Some(4990);
        p.revision = Some(4990);
        l.positions.push(p);
    });
    let d = decide(&k);
    assert_eq!(d.row, Row::OtherHistoryUnconfirmed, "{}", d.reason);
    assert!(
        d.reason.contains("2 of the cluster's 5 voters"),
        "{}",
        d.reason
    );
}

/// A copy from before a restore (index 5000, term 50) under this member.
fn copy_before_a_restore() -> Inputs {
    let mut i = at(5000, 5000);
    rec(&mut i).log_end_term = 50;
    rec(&mut i).term = 50;
    rec(&mut i).applied_term = Some(50);
    i
}

#[test]
fn regression_a_copy_past_its_witness_at_fewer_revisions_is_refused_with_no_one_answering() {
    // helper-22 #1: the copy refused on row 6h, then every other member
    // down (a rolling restart): with no answer, rows 6h and 6j had nothing
    // to count and the copy started on row 5, to win the next election on
    // its longer log. Its own witness, rewritten by the restored history,
    // tells without anyone: index 30 at revision 1,000,000 (bumped), which
    // the copy applied past at revision 5000.
    let mut i = copy_before_a_restore();
    let mut w = durable_witness(0xa, 0xc, 30, 3);
    w.revision = Some(1_000_000);
    i.witness = Answer::Answered(Some(w.clone()));
    i.live = Answer::NoAnswer("timed out".into());
    let d = decide(&i);
    assert_eq!(
        (d.row, d.verdict, d.verdict.exit().code()),
        (Row::OtherHistory, Verdict::RefuseForeign, 11),
        "{}",
        d.reason
    );
    assert!(
        d.reason
            .contains("records that this member's disk held raft index 30 at revision 1000000")
            && d.reason.contains("revisions never go back"),
        "{}",
        d.reason
    );
    // Unbumped: the restored history wrote past the copy's revision.
    w.revision = Some(5_300);
    i.witness = Answer::Answered(Some(w.clone()));
    assert_eq!(decide(&i).row, Row::OtherHistory);
    // One revision of slack (etcd 3.5.0-3.5.2 could save a consistent
    // index without its entry's data), as sign (b) allows.
    w.revision = Some(5_001);
    i.witness = Answer::Answered(Some(w.clone()));
    assert_eq!(decide(&i).row, Row::Start);
    // A member of one history past its witness stands at or above its
    // revision: an ordinary start.
    w.revision = Some(4_990);
    i.witness = Answer::Answered(Some(w.clone()));
    assert_eq!(decide(&i).row, Row::Start);
    // A witness of another member, or an earlier sidecar's (not proven),
    // says nothing of this directory's history.
    w.revision = Some(1_000_000);
    w.durable = false;
    i.witness = Answer::Answered(Some(w));
    assert_eq!(decide(&i).row, Row::Start);
}

#[test]
fn a_member_whose_keyspace_could_not_be_compared_counts_on_neither_side() {
    // helper-22 #2: the copy past both others (an unbumped restore behind
    // it); m2's HashKV differs, m3's comparison did not come (a timeout, a
    // compaction past the revision, auth). Counted as of the copy's
    // history, it made one sign against one without, and the copy started.
    let mut i = at(5000, 5000);
    i.live = altered(leader_answers(40, 3, 4000), |l| {
        hashed_at(l, 4000, [8, 7]);
        l.positions[1].kv_hash = None;
        l.positions[1].kv_unanswered = true;
    });
    let d = decide(&i);
    assert_eq!(
        (d.row, d.verdict.exit().code()),
        (Row::OtherHistoryUnconfirmed, 14),
        "{}",
        d.reason
    );
    assert!(
        d.reason
            .contains("1 more answered but their keyspace could not be compared"),
        "{}",
        d.reason
    );
    // The one answer of seed 4101's shape, not compared: no sign, a start
    // (a documented limit: nothing shows another history).
    i.live = altered(leader_answers(40, 3, 4000), |l| {
        l.positions.truncate(1);
        l.positions[0].leader = false;
        l.leader_heard = false;
        l.majority_heard = false;
        l.positions[0].kv_unanswered = true;
    });
    assert_eq!(decide(&i).row, Row::Start);
    // m3 compared the same: one history with this member, a majority: start.
    i.live = altered(leader_answers(40, 3, 4000), |l| hashed_at(l, 4000, [8, 7]));
    assert_eq!(decide(&i).row, Row::Start);
}

#[test]
fn every_voter_answering_with_no_majority_either_way_is_refused_not_left_waiting() {
    // helper-22 #4: two voters (a cluster growing from one, or a member
    // replaced by remove-then-add), the other's keyspace differs. Waiting
    // brings no one else: row 6h, whose remedy says to choose a history.
    let mut i = copy_before_a_restore();
    i.live = altered(leader_answers(5040, 3, 5040), |l| {
        l.members.truncate(2);
        l.positions.truncate(1);
    });
    let d = decide(&i);
    assert_eq!(
        (d.row, d.verdict.exit().code()),
        (Row::OtherHistory, 11),
        "{}",
        d.reason
    );
    assert!(d.remedy.contains("which history to keep"), "{}", d.remedy);
    // helper-23 #1: the same two voters, the other's sign one an etcd bug
    // also makes (a member left inconsistent by etcd 3.5.0-3.5.5: its
    // revisions ahead for good, its keyspace another): a healthy member
    // beside it is not refused, it waits, and the remedy tells the two
    // apart (no one else will come).
    let mut h = at(5000, 5000);
    h.live = altered(leader_answers(5000, 2, 5000), |l| {
        l.members.truncate(2);
        l.positions.truncate(1);
        l.positions[0].revision = Some(5100);
    });
    let d = decide(&h);
    assert_eq!(
        (d.row, d.verdict.exit().code()),
        (Row::OtherHistoryUnconfirmed, 14),
        "{}",
        d.reason
    );
    assert!(
        d.reason.contains("every voter answered") && d.remedy.contains("tell which side is wrong"),
        "{}\n{}",
        d.reason,
        d.remedy
    );
    // helper-22 #5: four voters, all answering, two signs, one without.
    let four = |unanswered: bool| {
        altered(leader_answers(5040, 3, 5040), |l| {
            let mut extra = l.members[1].clone();
            extra.id = MemberId::new(0xe);
            l.members.push(extra);
            let mut p = l.positions[1];
            p.member_id = MemberId::new(0xe);
            p.applied_term = Some(50);
            p.applied_index = Some(4990);
            p.revision = Some(4990);
            p.leader = false;
            p.kv_unanswered = unanswered;
            l.positions.push(p);
        })
    };
    i.live = four(false);
    assert_eq!(decide(&i).row, Row::OtherHistory);
    // Its keyspace not compared: the split is not known, a wait.
    i.live = four(true);
    let mut d = decide(&i);
    assert_eq!(d.row, Row::OtherHistoryUnconfirmed, "{}", d.reason);
    // Of three, one sign and one without: the majority is the directory's
    // history (a lone member left inconsistent by etcd 3.5.0-3.5.5), start.
    let mut j = copy_before_a_restore();
    j.live = altered(leader_answers(5040, 3, 5040), |l| {
        l.positions[1].applied_term = Some(50);
        l.positions[1].applied_index = Some(4990);
        l.positions[1].revision = Some(4990);
    });
    d = decide(&j);
    assert_eq!(d.row, Row::Start, "{}", d.reason);
}
