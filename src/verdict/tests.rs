//! The decision table, row by row, without a cluster.
use super::*;
use crate::disk::ids::{ClusterId, Incarnation, MemberId};
use crate::disk::layout::FoundingMember;
use crate::disk::upgrade::UpgradeCheck;

mod rollback;

const ME: &str = "http://m1:2380";

type Setter = Box<dyn Fn(&mut Inputs)>;

fn me() -> SelfFacts {
    SelfFacts {
        name: Some("m1".into()),
        peer_urls: vec![ME.into()],
        ..Default::default()
    }
}

fn seed_me() -> SelfFacts {
    SelfFacts {
        self_only_initial_cluster: true,
        ..me()
    }
}

fn inputs(state: Dir) -> Inputs {
    Inputs {
        dir: DirFacts {
            state,
            running: false,
        },
        me: me(),
        live: Answer::NotConfigured,
        operator: Answer::NotConfigured,
        witness: Answer::NotConfigured,
        witness_file: None,
        witness_file_unread: None,
        hint_member_id: None,
        hint_cluster_id: None,
        allow_bootstrap_without_evidence: false,
    }
}

/// What the initialized directory of `i` records.
fn rec(i: &mut Inputs) -> &mut Recorded {
    match &mut i.dir.state {
        Dir::Initialized(r) => r,
        other => panic!("not an initialized directory: {other:?}"),
    }
}

fn initialized(member: u64, cluster: u64) -> Inputs {
    let mut i = inputs(Dir::Initialized(Box::default()));
    rec(&mut i).member_id = MemberId::new(member);
    rec(&mut i).cluster_id = ClusterId::new(cluster);
    rec(&mut i).recorded_peer_urls = Some(vec![ME.into()]);
    i
}

fn live(cluster: u64, members: &[(u64, &str, &str, bool)]) -> Answer<LiveFacts> {
    Answer::Answered(LiveFacts {
        cluster_id: ClusterId::new(cluster),
        members: members
            .iter()
            .map(|&(id, name, url, started)| LiveMemberFacts {
                id: MemberId::new(id),
                name: name.into(),
                peer_urls: vec![url.into()],
                started,
                is_learner: false,
            })
            .collect(),
        other_cluster_ids: Vec::new(),
        majority_heard: true,
        leader_heard: true,
        raft_term: None,
        leader_raft_index: None,
        positions: Vec::new(),
        commit_bar: None,
    })
}

/// `answer` changed by `f` (when it is an answer).
fn altered(mut answer: Answer<LiveFacts>, f: impl FnOnce(&mut LiveFacts)) -> Answer<LiveFacts> {
    if let Answer::Answered(l) = &mut answer {
        f(l);
    }
    answer
}

fn op(bootstrap: bool, member: Option<u64>, cluster: Option<u64>) -> Answer<OperatorFacts> {
    Answer::Answered(OperatorFacts {
        bootstrap,
        member_id: member.map(MemberId::new),
        cluster_id: cluster.map(ClusterId::new),
        pod_uid: None,
        cluster_token: None,
        cluster_uid: None,
    })
}

fn verdict(i: &Inputs) -> Verdict {
    decide(i).verdict
}

#[test]
fn each_verdict_has_its_documented_exit_code() {
    use Verdict::*;
    let want = [
        (Start, 0),
        (Bootstrap, 0),
        (Join, 0),
        (RefuseEmptyFormed, 10),
        (RefuseForeign, 11),
        (RefuseCorrupt, 12),
        (RefusePartial, 13),
        (PhaseUnknown, 14),
        (RefuseRunning, 15),
        (Unreadable, 3),
    ];
    for (v, code) in want {
        assert_eq!(v.exit().code(), code, "{v:?}");
        assert_eq!(serde_json::to_value(v).unwrap(), v.name());
    }
}

#[test]
fn row_initialized_matching_ids_starts() {
    let mut i = initialized(1, 9);
    i.operator = op(false, Some(1), Some(9));
    i.live = live(9, &[(1, "m1", ME, true)]);
    i.hint_member_id = Some(MemberId::new(1));
    i.hint_cluster_id = Some(ClusterId::new(9));
    assert_eq!(verdict(&i), Verdict::Start);
    assert!(decide(&i).remedy.is_empty());
}

#[test]
fn row_initialized_with_no_other_source_starts() {
    assert_eq!(verdict(&initialized(1, 9)), Verdict::Start);
}

#[test]
fn row_initialized_foreign_by_each_source() {
    let cases: Vec<Setter> = vec![
        Box::new(|i| i.operator = op(false, Some(2), None)),
        Box::new(|i| i.operator = op(false, None, Some(8))),
        Box::new(|i| i.live = live(8, &[])),
        Box::new(|i| i.live = live(9, &[(2, "m1", ME, true)])),
        Box::new(|i| i.hint_member_id = Some(MemberId::new(2))),
        Box::new(|i| i.hint_cluster_id = Some(ClusterId::new(8))),
        Box::new(|i| rec(i).recorded_peer_urls = Some(vec!["http://m2:2380".into()])),
    ];
    for (n, set) in cases.iter().enumerate() {
        let mut i = initialized(1, 9);
        set(&mut i);
        let d = decide(&i);
        assert_eq!(d.verdict, Verdict::RefuseForeign, "case {n}: {d:?}");
        assert!(!d.remedy.is_empty());
    }
}

#[test]
fn row_refusals_of_the_directory_itself() {
    assert_eq!(
        verdict(&inputs(Dir::Partial(String::new()))),
        Verdict::RefusePartial
    );
    assert_eq!(
        verdict(&inputs(Dir::Corrupt(String::new()))),
        Verdict::RefuseCorrupt
    );
    assert_eq!(
        verdict(&inputs(Dir::Unreadable {
            problem: String::new(),
            symlinked: None
        })),
        Verdict::Unreadable
    );
    let mut running = initialized(1, 9);
    running.dir.running = true;
    assert_eq!(verdict(&running), Verdict::RefuseRunning);
}

#[test]
fn running_wins_over_the_identity_checks() {
    let mut i = initialized(1, 9);
    i.dir.running = true;
    i.hint_member_id = Some(MemberId::new(2));
    assert_eq!(verdict(&i), Verdict::RefuseRunning);
}

#[test]
fn empty_member_that_started_before_is_refused_by_any_one_source() {
    let cases: Vec<Setter> = vec![
        Box::new(|i| i.operator = op(false, Some(1), None)),
        Box::new(|i| i.live = live(9, &[(1, "m1", ME, true)])),
        Box::new(|i| i.hint_member_id = Some(MemberId::new(1))),
    ];
    for (n, set) in cases.iter().enumerate() {
        let mut i = inputs(Dir::Empty);
        set(&mut i);
        let d = decide(&i);
        assert_eq!(d.verdict, Verdict::RefuseEmptyFormed, "case {n}: {d:?}");
        assert_eq!(d.verdict.exit().code(), 10);
    }
}

#[test]
fn empty_seed_of_a_formed_cluster_is_refused() {
    let cases: Vec<Setter> = vec![
        Box::new(|i| i.operator = op(true, None, Some(9))),
        Box::new(|i| i.operator = op(true, Some(1), Some(9))),
        Box::new(|i| i.hint_cluster_id = Some(ClusterId::new(9))),
        Box::new(|i| i.live = live(9, &[(2, "m2", "http://m2:2380", true)])),
        Box::new(|i| {
            i.operator = op(true, None, None);
            i.live = live(9, &[(2, "m2", "http://m2:2380", true)]);
        }),
    ];
    for (n, set) in cases.iter().enumerate() {
        let mut i = inputs(Dir::Empty);
        i.me = seed_me();
        set(&mut i);
        assert_eq!(verdict(&i), Verdict::RefuseEmptyFormed, "case {n}");
    }
}

#[test]
fn empty_seed_before_formation_bootstraps_on_the_operators_word() {
    let mut i = inputs(Dir::Empty);
    i.operator = op(true, None, None);
    i.live = Answer::NoAnswer("connection refused".into());
    assert_eq!(verdict(&i), Verdict::Bootstrap);
}

#[test]
fn empty_added_member_never_started_joins() {
    let mut i = inputs(Dir::Empty);
    i.live = live(9, &[(2, "m0", "http://m0:2380", true), (7, "", ME, false)]);
    assert_eq!(verdict(&i), Verdict::Join);
    i.operator = op(false, None, Some(9));
    i.hint_cluster_id = Some(ClusterId::new(9));
    assert_eq!(verdict(&i), Verdict::Join);
}

#[test]
fn a_join_needs_the_leader_and_half_the_voters_heard_and_one_cluster() {
    let unstarted = live(9, &[(2, "m0", "http://m0:2380", true), (7, "", ME, false)]);
    for allow in [false, true] {
        let mut i = inputs(Dir::Empty);
        i.allow_bootstrap_without_evidence = allow;
        i.live = altered(unstarted.clone(), |l| l.majority_heard = false);
        let d = decide(&i);
        assert_eq!(d.verdict, Verdict::PhaseUnknown, "{d:?}");
        assert!(d.reason.contains("fewer than half"), "{d:?}");
        // Two voters, this member and m0: without a leader, m0's word is
        // enough only when m0 itself answered.
        i.live = altered(unstarted.clone(), |l| l.leader_heard = false);
        let d = decide(&i);
        assert_eq!(d.verdict, Verdict::PhaseUnknown, "{d:?}");
        assert!(d.reason.contains("leader"), "{d:?}");
        i.live = altered(unstarted.clone(), |l| {
            l.leader_heard = false;
            l.positions = vec![LivePosition {
                member_id: MemberId::new(2),
                raft_index: Some(9),
                applied_index: None,
                applied_term: None,
                revision: None,
                leader: false,
                kv_hash: None,
                kv_unanswered: false,
            }];
        });
        let d = decide(&i);
        assert_eq!(d.verdict, Verdict::Join, "{d:?}");
        // With a third voter, no.
        i.live = altered(i.live.clone(), |l| {
            l.members.push(LiveMemberFacts {
                id: MemberId::new(3),
                name: "m2".into(),
                peer_urls: vec!["http://m2:2380".into()],
                started: true,
                is_learner: false,
            })
        });
        assert_eq!(decide(&i).verdict, Verdict::PhaseUnknown);
        i.live = altered(unstarted.clone(), |l| {
            l.other_cluster_ids = vec![ClusterId::new(5)]
        });
        let d = decide(&i);
        assert_eq!(d.verdict, Verdict::PhaseUnknown, "{d:?}");
        assert!(d.reason.contains("different clusters"), "{d:?}");
    }
}

#[test]
fn endpoints_of_different_clusters_never_let_an_empty_seed_bootstrap() {
    // The operator records nothing yet (its word alone would bootstrap);
    // a live cluster answered, whichever: the seed must not bootstrap.
    let mut i = inputs(Dir::Empty);
    i.me = seed_me();
    i.operator = op(true, None, None);
    i.allow_bootstrap_without_evidence = true;
    i.live = altered(live(9, &[(2, "m1", "http://m1:2380", true)]), |l| {
        l.other_cluster_ids = vec![ClusterId::new(5)];
        l.majority_heard = false;
    });
    assert_eq!(verdict(&i), Verdict::RefuseEmptyFormed);
}

#[test]
fn an_initialized_dir_must_belong_to_a_cluster_the_endpoints_reach() {
    let mut i = initialized(1, 9);
    i.live = live(9, &[(1, "m1", ME, true)]);
    assert_eq!(verdict(&i), Verdict::Start);
    // One endpoint of another cluster in the list: the directory still
    // belongs to a reachable cluster; start, and say what to fix.
    i.live = altered(i.live.clone(), |l| {
        l.other_cluster_ids = vec![ClusterId::new(5)]
    });
    let d = decide(&i);
    assert_eq!(d.verdict, Verdict::Start, "{d:?}");
    assert!(
        d.reason.contains("also reaches cluster 0000000000000005"),
        "{d:?}"
    );
    // The freshest view is the other cluster's: its member list says
    // nothing about this directory's member.
    i.live = altered(live(5, &[(3, "m1", ME, true)]), |l| {
        l.other_cluster_ids = vec![ClusterId::new(9)]
    });
    assert_eq!(verdict(&i), Verdict::Start);
    // Neither cluster is the directory's.
    i.live = altered(live(5, &[(3, "m1", ME, true)]), |l| {
        l.other_cluster_ids = vec![ClusterId::new(6)]
    });
    let d = decide(&i);
    assert_eq!(d.verdict, Verdict::RefuseForeign, "{d:?}");
    assert!(
        d.reason.contains("0000000000000005") && d.reason.contains("0000000000000006"),
        "{d:?}"
    );
}

#[test]
fn a_readded_member_joins_even_with_its_old_recorded_id() {
    // Remedy path: remove + re-add gives a new ID; the old one in the operator
    // record and the frozen env must not block the fresh join.
    let mut i = inputs(Dir::Empty);
    i.live = live(9, &[(2, "m0", "http://m0:2380", true), (7, "", ME, false)]);
    i.operator = op(false, Some(1), Some(9));
    i.hint_member_id = Some(MemberId::new(1));
    i.hint_cluster_id = Some(ClusterId::new(9));
    assert_eq!(verdict(&i), Verdict::Join);
    // ...but if the recorded ID is the unstarted one, the records contradict
    // "never started": refuse.
    i.operator = op(false, Some(7), Some(9));
    assert_eq!(verdict(&i), Verdict::RefuseEmptyFormed);
}

#[test]
fn a_readded_seed_with_its_self_only_initial_cluster_cannot_join() {
    // The seed's Pod keeps its frozen flags: with an --initial-cluster naming
    // only itself, etcd would bootstrap again (=new) or fail (=existing).
    let mut i = inputs(Dir::Empty);
    i.me = seed_me();
    i.live = live(9, &[(2, "m0", "http://m0:2380", true), (7, "", ME, false)]);
    for operator in [op(true, Some(1), Some(9)), Answer::NotConfigured] {
        i.operator = operator;
        let d = decide(&i);
        assert_eq!(d.verdict, Verdict::RefuseEmptyFormed, "{d:?}");
        assert!(d.remedy.contains("--initial-cluster"), "{d:?}");
    }
}

#[test]
fn a_started_entry_by_name_outweighs_an_unstarted_one_by_url_in_any_order() {
    let old = (2, "m1", "http://old-m1:2380", true);
    let new = (7, "", ME, false);
    for members in [[old, new], [new, old]] {
        let mut i = inputs(Dir::Empty);
        i.live = live(9, &members);
        assert_eq!(verdict(&i), Verdict::RefuseEmptyFormed, "{members:?}");
    }
}

#[test]
fn empty_member_missing_from_the_live_list_is_not_started() {
    let mut i = inputs(Dir::Empty);
    i.live = live(9, &[(2, "m0", "http://m0:2380", true)]);
    assert_eq!(verdict(&i), Verdict::PhaseUnknown);
}

#[test]
fn empty_with_no_answer_fails_closed() {
    let mut i = inputs(Dir::Empty);
    i.live = Answer::NoAnswer("deadline exceeded".into());
    i.operator = Answer::NoAnswer("403 forbidden".into());
    let d = decide(&i);
    assert_eq!(d.verdict, Verdict::PhaseUnknown);
    assert!(d.reason.contains("403 forbidden") && d.reason.contains("deadline exceeded"));
    // Not even the seed shape is evidence on its own.
    i.me = seed_me();
    assert_eq!(verdict(&i), Verdict::PhaseUnknown);
    // A non-seed whose operator says "not started" still needs the live list.
    i.me = me();
    i.operator = op(false, None, None);
    assert_eq!(verdict(&i), Verdict::PhaseUnknown);
}

#[test]
fn the_escape_hatch_bootstraps_only_when_nothing_answered() {
    let mut i = inputs(Dir::Empty);
    i.me = seed_me();
    i.allow_bootstrap_without_evidence = true;
    assert_eq!(verdict(&i), Verdict::Bootstrap);
    i.hint_cluster_id = Some(ClusterId::new(9));
    assert_eq!(verdict(&i), Verdict::RefuseEmptyFormed);
}

#[test]
fn an_operator_fault_never_bootstraps_by_accident() {
    for me in [seed_me(), me()] {
        for fault in [
            "404 not found",
            "403 forbidden",
            "500",
            "timed out",
            "malformed",
        ] {
            let mut i = inputs(Dir::Empty);
            i.me = me.clone();
            i.operator = Answer::NoAnswer(fault.into());
            i.live = Answer::NoAnswer("connection refused".into());
            assert_eq!(verdict(&i), Verdict::PhaseUnknown, "{fault}");
        }
    }
}

/// An upgrade check with one finding, blocking or not.
pub(super) fn blocked_check(blocks: bool) -> UpgradeCheck {
    UpgradeCheck {
        from: None,
        target: "3.7".into(),
        dir_line: Some("3.5".into()),
        blocked: blocks,
        findings: vec![crate::disk::upgrade::Finding {
            code: "v2-wal-raw",
            blocks,
            message: "raw v2 requests".into(),
            rule: "apply.Apply",
            remedy: "start it on 3.6 first".into(),
        }],
    }
}

#[test]
fn row_5c_refuses_a_version_that_would_panic_only_where_the_directory_is_this_members() {
    let mut i = initialized(1, 9);
    rec(&mut i).upgrade = Some(blocked_check(true));
    let d = decide(&i);
    assert_eq!(
        (d.verdict, d.row),
        (Verdict::RefuseVersion, Row::Version),
        "{d:?}"
    );
    assert_eq!(d.verdict.exit().code(), 16);
    assert!(
        d.reason.contains("v2-wal-raw") && d.remedy.contains("3.6 first"),
        "{d:?}"
    );
    // Identity comes first: a foreign directory is foreign whatever etcd
    // version would start on it.
    let mut foreign = i.clone();
    foreign.operator = op(true, Some(2), None);
    assert_eq!(row(&foreign), Row::Foreign);
    // An empty directory has nothing to upgrade.
    let mut empty = inputs(Dir::Empty);
    empty.me = seed_me();
    // (`Dir::Empty` carries no upgrade check: the type has no room for one.)
    empty.allow_bootstrap_without_evidence = true;
    assert_eq!(row(&empty), Row::AllowedWithoutEvidence);
    // A finding etcd starts with is a warning, never a refusal.
    rec(&mut i).upgrade = Some(blocked_check(false));
    let d = decide(&i);
    assert_eq!((d.verdict, d.row), (Verdict::Start, Row::Start), "{d:?}");
    assert!(
        d.warnings.iter().any(|w| w.contains("raw v2 requests")),
        "{d:?}"
    );
}

fn row(i: &Inputs) -> Row {
    decide(i).row
}

const M0: &str = "http://m0:2380";

#[test]
fn every_row_names_its_verdict_and_the_docs_list_every_row() {
    let doc = include_str!("../../docs/decision-table.md");
    let documented: Vec<&str> = doc
        .lines()
        .filter_map(|l| l.strip_prefix("| "))
        .filter_map(|l| l.split(" |").next())
        .filter(|id| id.chars().next().is_some_and(|c| c.is_ascii_digit()) && id.len() <= 3)
        .collect();
    let in_code: Vec<&str> = Row::ALL.iter().map(|r| r.id()).collect();
    assert_eq!(
        documented, in_code,
        "docs/decision-table.md rows vs Row::ALL"
    );
    for r in Row::ALL {
        assert_eq!(serde_json::to_value(r).unwrap(), r.id());
        let line = doc
            .lines()
            .find(|l| l.starts_with(&format!("| {} |", r.id())))
            .unwrap();
        for v in r.verdicts() {
            assert!(
                line.contains(&format!("`{}`", v.name())),
                "row {} documents {v:?}: {line}",
                r.id(),
            );
        }
    }
    // The table lists the rows in the order `decide` checks them.
    let checked: Vec<Row> = super::precedence().collect();
    assert_eq!(checked, Row::ALL, "decide's precedence vs Row::ALL");
}

#[test]
fn regression_an_earlier_incarnations_volume_is_foreign_until_a_source_vouches() {
    // The seed's flags derive member 1 of cluster 9; the volume holds
    // member 3 of cluster 4 (another --initial-cluster-token).
    let mut i = initialized(3, 4);
    i.me = seed_me();
    i.me.derived = Some(DerivedIds {
        member_id: MemberId::new(1),
        cluster_id: ClusterId::new(9),
    });
    i.operator = op(true, None, None);
    let d = decide(&i);
    assert_eq!(
        (d.verdict, d.row),
        (Verdict::RefuseForeign, Row::ForeignIncarnation),
        "{d:?}"
    );
    // The IDs the flags derive start.
    let mut own = initialized(1, 9);
    own.me = i.me.clone();
    assert_eq!(row(&own), Row::Start);
    // A source vouching for the directory's IDs wins over the derivation
    // (a member whose URL was updated, then restarted).
    i.live = live(4, &[(3, "m1", ME, true)]);
    assert_eq!(row(&i), Row::Start);
    i.live = Answer::NotConfigured;
    i.operator = op(true, Some(3), None);
    assert_eq!(row(&i), Row::Start);
    // A joining member's IDs are not derived: nothing to contradict.
    let mut joiner = initialized(3, 4);
    joiner.me.derived = None;
    assert_eq!(row(&joiner), Row::Start);
}

#[test]
fn regression_a_wal_recreated_on_a_wiped_dir_is_an_empty_member() {
    // etcd re-created the WAL with the old ID and no entry: the live list
    // shows the member started, so its data is gone.
    let mut i = initialized(1, 9);
    rec(&mut i).empty_log = true;
    i.live = live(9, &[(1, "m1", ME, true), (2, "m0", M0, true)]);
    let d = decide(&i);
    assert_eq!(
        (d.verdict, d.row),
        (Verdict::RefuseEmptyFormed, Row::EmptyLogFormed),
        "{d:?}"
    );
    assert_eq!(d.verdict.exit().code(), 10);
    // Any one source that says it started refuses, as for an empty dir.
    let mut i = initialized(1, 9);
    rec(&mut i).empty_log = true;
    i.operator = op(false, Some(1), Some(9));
    assert_eq!(row(&i), Row::EmptyLogFormed);
    // Nobody answers: not known, fails closed.
    let mut i = initialized(1, 9);
    rec(&mut i).empty_log = true;
    assert_eq!(row(&i), Row::NoEvidence);
    // The live list has it added but never started: a first start that
    // ended before its first entry; etcd may start on its WAL.
    i.live = live(9, &[(1, "", ME, false), (2, "m0", M0, true)]);
    let d = decide(&i);
    assert_eq!(
        (d.verdict, d.row),
        (Verdict::Start, Row::StartEmptyLog),
        "{d:?}"
    );
}

#[test]
fn regression_an_earlier_pod_of_the_seed_never_bootstraps() {
    let mut i = inputs(Dir::Empty);
    i.me = seed_me();
    i.me.pod_uid = Some("pod-2".into());
    i.operator = Answer::Answered(OperatorFacts {
        bootstrap: true,
        pod_uid: Some("pod-1".into()),
        ..Default::default()
    });
    let d = decide(&i);
    assert_eq!(
        (d.verdict, d.row),
        (Verdict::PhaseUnknown, Row::BootstrapEarlierPod),
        "{d:?}"
    );
    // The operator names this very Pod: its first start.
    i.me.pod_uid = Some("pod-1".into());
    assert_eq!(row(&i), Row::Bootstrap);
    // Without POD_UID the history cannot be read: say so.
    i.me.pod_uid = None;
    let d = decide(&i);
    assert_eq!(d.row, Row::Bootstrap);
    assert!(d.warnings.iter().any(|w| w.contains("POD_UID")), "{d:?}");
}

#[test]
fn regression_a_removed_member_is_refused_once_the_leader_and_a_majority_say_so() {
    let mut i = initialized(1, 9);
    i.live = live(9, &[(2, "m0", M0, true), (3, "m2", "http://m2:2380", true)]);
    let d = decide(&i);
    assert_eq!(
        (d.verdict, d.row),
        (Verdict::RefuseForeign, Row::Removed),
        "{d:?}"
    );
    assert!(d.remedy.contains("add the member again"), "{d:?}");
    // Without the leader or a majority the list may lag: not a removal.
    for f in [
        (|l: &mut LiveFacts| l.leader_heard = false) as fn(&mut LiveFacts),
        |l| l.majority_heard = false,
    ] {
        let mut j = i.clone();
        j.live = altered(j.live, f);
        assert_eq!(row(&j), Row::Start);
    }
}

#[test]
fn regression_a_stale_recorded_id_after_remove_and_add_starts() {
    // Removed as 1, added again as 7, joined: the EtcdMember and the frozen
    // env still say 1.
    let mut i = initialized(7, 9);
    i.live = live(9, &[(7, "m1", ME, true), (2, "m0", M0, true)]);
    i.operator = op(false, Some(1), Some(9));
    i.hint_member_id = Some(MemberId::new(1));
    let d = decide(&i);
    assert_eq!(
        (d.verdict, d.row),
        (Verdict::Start, Row::StartStaleRecord),
        "{d:?}"
    );
    assert!(d.reason.contains("stale"), "{d:?}");
    // The recorded ID is a current member: the records contradict the dir.
    i.live = live(9, &[(7, "m1", ME, true), (1, "m0", M0, true)]);
    assert_eq!(row(&i), Row::Foreign);
    // No live list: nothing shows the record is stale.
    i.live = Answer::NotConfigured;
    assert_eq!(row(&i), Row::Foreign);
    // The cluster ID is never stale.
    i.live = live(9, &[(7, "m1", ME, true), (2, "m0", M0, true)]);
    i.operator = op(false, Some(1), Some(8));
    assert_eq!(row(&i), Row::Foreign);
}

#[test]
fn regression_a_differently_spelled_peer_url_is_a_warning() {
    for spelled in ["http://m1:2380/", "HTTP://M1:2380", "http://m1:2380//"] {
        let mut i = initialized(1, 9);
        i.me.peer_urls = vec![spelled.into()];
        i.live = live(9, &[(1, "m1", ME, true)]);
        let d = decide(&i);
        assert_eq!(d.row, Row::Start, "{spelled}: {d:?}");
        assert!(d.warnings.is_empty(), "{spelled}: {d:?}");
    }
    // Another address for the same member (localhost for its IP): the name
    // and the live list agree: start, with a warning.
    let mut i = initialized(1, 9);
    rec(&mut i).recorded_name = Some("m1".into());
    i.me.peer_urls = vec!["http://localhost:2380".into()];
    i.live = live(9, &[(1, "m1", ME, true)]);
    let d = decide(&i);
    assert_eq!(d.row, Row::Start, "{d:?}");
    assert!(
        d.warnings.iter().any(|w| w.contains("advertise URL")),
        "{d:?}"
    );
    // Another member's directory: the names differ.
    rec(&mut i).recorded_name = Some("m2".into());
    assert_eq!(row(&i), Row::Foreign);
    // The live list has the directory's member under another name.
    rec(&mut i).recorded_name = Some("m1".into());
    i.live = live(9, &[(1, "m2", ME, true)]);
    assert_eq!(row(&i), Row::Foreign);
}

#[test]
fn regression_a_symlinked_wal_dir_is_a_configuration_matter() {
    let i = inputs(Dir::Unreadable {
        problem: String::new(),
        symlinked: Some("/var/lib/etcd/member/wal".into()),
    });
    let d = decide(&i);
    assert_eq!(
        (d.verdict, d.row),
        (Verdict::Unreadable, Row::Layout),
        "{d:?}"
    );
    assert!(d.remedy.contains("--wal-dir"), "{d:?}");
    assert!(!d.remedy.contains("re-add"), "{d:?}");
}

/// The directory of member 1 in a cluster that also has 2 and 3.
fn member_of_three() -> Inputs {
    let mut i = initialized(1, 9);
    rec(&mut i).recorded_name = Some("m1".into());
    rec(&mut i).recorded_members = vec![MemberId::new(1), MemberId::new(2), MemberId::new(3)];
    rec(&mut i).term = 3;
    i
}

#[test]
fn regression_a_re_bootstrapped_seed_answering_never_makes_intact_members_wipe() {
    // The wiped seed 2 re-bootstrapped alone with the same IDs; it is the
    // only one answering, as its own leader and majority.
    let mut i = member_of_three();
    i.live = altered(live(9, &[(2, "m0", M0, true)]), |l| l.raft_term = Some(2));
    let d = decide(&i);
    assert_eq!(
        (d.verdict, d.row),
        (Verdict::RefuseForeign, Row::Fork),
        "{d:?}"
    );
    assert!(d.remedy.starts_with("do not wipe"), "{d:?}");
    // Every other member listed, but the term is behind the directory's.
    i.live = altered(
        live(9, &[(2, "m0", M0, true), (3, "m2", "http://m2:2380", true)]),
        |l| l.raft_term = Some(2),
    );
    assert_eq!(row(&i), Row::Fork);
    // The same list at the directory's term or later: a real removal.
    i.live = altered(i.live.clone(), |l| l.raft_term = Some(3));
    assert_eq!(row(&i), Row::Removed);
}

#[test]
fn regression_a_re_bootstrapped_seed_never_restarts_on_its_fork() {
    // The seed's directory knows only itself; the cluster of its ID has
    // two more started members.
    let mut i = initialized(1, 9);
    rec(&mut i).recorded_members = vec![MemberId::new(1)];
    i.live = live(
        9,
        &[
            (1, "m1", ME, true),
            (2, "m0", M0, true),
            (3, "m2", "http://m2:2380", true),
        ],
    );
    let d = decide(&i);
    assert_eq!(
        (d.verdict, d.row),
        (Verdict::RefuseEmptyFormed, Row::Rebootstrapped),
        "{d:?}"
    );
    // A one-member cluster's seed restarting: nothing else started.
    i.live = live(9, &[(1, "m1", ME, true)]);
    assert_eq!(row(&i), Row::Start);
}

#[test]
fn regression_a_dir_recording_its_own_removal_is_refused_without_any_peer() {
    let mut i = member_of_three();
    rec(&mut i).self_removed = true;
    rec(&mut i).removed_ids = vec![MemberId::new(1)];
    let d = decide(&i);
    assert_eq!(
        (d.verdict, d.row),
        (Verdict::RefuseForeign, Row::Removed),
        "{d:?}"
    );
}

#[test]
fn regression_a_stale_record_the_directory_saw_removed_starts_without_any_peer() {
    // Removed as 4, re-added as 1: the directory records 4's removal and
    // its own member as this one; no peer answers (quorum loss).
    let mut i = member_of_three();
    rec(&mut i).removed_ids = vec![MemberId::new(4)];
    i.operator = op(false, Some(4), Some(9));
    i.hint_member_id = Some(MemberId::new(4));
    let d = decide(&i);
    assert_eq!(
        (d.verdict, d.row),
        (Verdict::Start, Row::StartStaleRecord),
        "{d:?}"
    );
    // A recorded ID the directory never saw removed still refuses.
    i.operator = op(false, Some(5), Some(9));
    assert_eq!(row(&i), Row::Foreign);
}

#[test]
fn regression_a_seed_whose_peer_url_was_updated_is_not_an_earlier_incarnation() {
    // Bootstrapped at http://old:2380 with this token, then `member update`d
    // to ME: the flags derive another ID, but the WAL's own bootstrap entry
    // hashed with this token is the directory's member ID.
    let token = "t";
    let old = vec!["http://old:2380".to_string()];
    let id = crate::disk::ids::member_id(&old, token);
    let mut i = initialized(id.get(), 9);
    i.me = seed_me();
    i.me.token = Some(token.into());
    i.me.derived = Some(DerivedIds {
        member_id: MemberId::new(1),
        cluster_id: ClusterId::new(2),
    });
    rec(&mut i).added_with_peer_urls = Some(old);
    assert_eq!(row(&i), Row::Start);
    // Another token (an earlier incarnation): refused.
    i.me.token = Some("another".into());
    assert_eq!(row(&i), Row::ForeignIncarnation);
}

#[test]
fn regression_a_re_added_members_old_incarnation_volume_is_foreign_by_its_formation() {
    // Fault schedule seed 1022 on 3.6.16: a member re-added by the remedy
    // (its own ID random, nothing derived) got an earlier incarnation's
    // volume; the others were down or without quorum (etcd serves no client
    // before it has a quorum), so no source answered, and it started on the
    // old keyspace. Its WAL still records how its cluster was formed.
    let urls = |h: &str| vec![format!("http://{h}:2380")];
    let old_token = "ns-etcd-uid-1";
    let founders: Vec<FoundingMember> = ["m0", "m1", "m2"]
        .iter()
        .map(|h| FoundingMember {
            id: crate::disk::ids::member_id(&urls(h), old_token),
            peer_urls: urls(h),
        })
        .collect();
    let ids: Vec<MemberId> = founders.iter().map(|m| m.id).collect();
    let cluster = crate::disk::ids::cluster_id(&ids);
    let mut i = initialized(founders[1].id.get(), cluster.get());
    i.me.derived = None;
    i.me.token = Some("ns-etcd-uid-2".into());
    rec(&mut i).formation = founders.clone();
    let d = decide(&i);
    assert_eq!(
        (d.verdict, d.row),
        (Verdict::RefuseForeign, Row::ForeignFormation),
        "{d:?}"
    );
    assert!(d.reason.contains("formed by"), "{}", d.reason);
    assert_eq!(d.verdict.exit().code(), 11);
    // Formed with this member's token: its own restart.
    i.me.token = Some(old_token.into());
    assert_eq!(row(&i), Row::Start);
    // No token given, or no formation record (the WAL starts past it):
    // nothing to contradict.
    i.me.token = None;
    assert_eq!(row(&i), Row::Start);
    i.me.token = Some("ns-etcd-uid-2".into());
    rec(&mut i).formation.clear();
    assert_eq!(row(&i), Row::Start);
    // A source vouching for the directory's IDs wins (the token in the
    // flags changed after the cluster formed; etcd ignores it then).
    rec(&mut i).formation = founders;
    i.live = live(
        cluster.get(),
        &[(rec(&mut i).member_id.get(), "m1", ME, true)],
    );
    assert_eq!(row(&i), Row::Start);
    // Said as a warning while a source vouches, so a wrong token shows
    // before the cold start that would refuse it.
    let d = decide(&i);
    assert!(
        d.warnings.iter().any(|w| w.contains("was formed by")),
        "{:?}",
        d.warnings
    );
}

#[test]
fn regression_a_member_joined_without_its_clusters_token_is_not_foreign() {
    // Review of row 6d: a member added with `member add` (its ID random)
    // whose leader's log still began at index 1 holds the founders' entries
    // in its own WAL. `member add` prints no token and etcd ignores one on a
    // join, so a member joined by hand has none: etcd's default. Refused
    // 11 on every restart with no source to vouch (standalone: always).
    let urls = |h: &str| vec![format!("http://{h}:2380")];
    let token = "tenant-a";
    let seed = FoundingMember {
        id: crate::disk::ids::member_id(&urls("m0"), token),
        peer_urls: urls("m0"),
    };
    let cluster = crate::disk::ids::cluster_id(&[seed.id]);
    let mut i = initialized(0x5eed_0000_0000_0001, cluster.get());
    i.me.derived = None;
    i.me.token = Some("etcd-cluster".into());
    i.me.token_given = false;
    rec(&mut i).formation = vec![seed];
    let d = decide(&i);
    assert_eq!(d.row, Row::Start, "{d:?}");
    assert!(
        d.warnings
            .iter()
            .any(|w| w.contains("was formed by") && w.contains("etcd's default")),
        "{:?}",
        d.warnings
    );
    // A token given that the cluster was not formed with: the operator's
    // earlier incarnation (it gives every member the cluster's token).
    i.me.token = Some("tenant-a-incarnation-2".into());
    i.me.token_given = true;
    assert_eq!(row(&i), Row::ForeignFormation);
    // No token in the env, but the operator's record of the cluster's
    // (it passes that one to etcd): bound by it, as by a given one.
    i.me.token = Some("etcd-cluster".into());
    i.me.token_given = false;
    i.operator = Answer::Answered(OperatorFacts {
        cluster_token: Some("tenant-a-incarnation-2".into()),
        ..OperatorFacts::default()
    });
    assert_eq!(row(&i), Row::ForeignFormation);
    i.operator = Answer::Answered(OperatorFacts {
        cluster_token: Some(token.into()),
        ..OperatorFacts::default()
    });
    assert_eq!(row(&i), Row::Start);
    i.operator = Answer::NotConfigured;
    // The directory's own member a founder: its ID came from a token, and
    // not from this one, whether given or etcd's default.
    let founder = rec(&mut i).formation[0].id;
    rec(&mut i).member_id = founder;
    i.me.token = Some("etcd-cluster".into());
    i.me.token_given = false;
    assert_eq!(row(&i), Row::ForeignFormation);
}

/// A Lease as an earlier sidecar wrote it: no format, no incarnation.
fn witness(member: u64, cluster: u64) -> Answer<Option<WitnessFacts>> {
    Answer::Answered(Some(WitnessFacts {
        name: "the witness Lease etcd-witness-m1".into(),
        clear: "kubectl -n ns delete lease etcd-witness-m1".into(),
        member_id: Some(MemberId::new(member)),
        cluster_id: Some(ClusterId::new(cluster)),
        raft_index: Some(41),
        raft_term: Some(2),
        revision: None,
        durable: false,
        incarnation: Incarnation::default(),
        pod_uid: Some("0d6f".into()),
    }))
}

#[test]
fn regression_the_pr_355_window_a_witness_lease_refuses_the_empty_seed() {
    // The seed formed the cluster and its sidecar wrote the Lease; the
    // operator latched nothing yet; the volume was wiped.
    let mut i = inputs(Dir::Empty);
    i.me = seed_me();
    i.operator = op(true, None, None);
    i.witness = Answer::Answered(None);
    assert_eq!(
        decide(&i).verdict,
        Verdict::Bootstrap,
        "no Lease: unchanged"
    );
    i.witness = witness(0xa, 0xc);
    let d = decide(&i);
    assert_eq!(
        (d.verdict, d.row),
        (Verdict::RefuseEmptyFormed, Row::EmptyFormed)
    );
    assert!(d.reason.contains("the witness Lease etcd-witness-m1 records member 000000000000000a of cluster 000000000000000c running at raft index 41"), "{}", d.reason);
    // A Lease whose annotations cannot be read still exists.
    i.witness = Answer::Answered(Some(WitnessFacts {
        name: "etcd-witness-m1".into(),
        ..Default::default()
    }));
    assert_eq!(decide(&i).verdict, Verdict::RefuseEmptyFormed);
    // Without the operator (and no peer) the Lease alone refuses too.
    i.operator = Answer::NoAnswer("down".into());
    assert_eq!(decide(&i).verdict, Verdict::RefuseEmptyFormed);
    i.allow_bootstrap_without_evidence = true;
    assert_eq!(decide(&i).verdict, Verdict::RefuseEmptyFormed);
}

#[test]
fn an_unreadable_witness_never_lets_the_seed_bootstrap_on_the_operators_word() {
    let mut i = inputs(Dir::Empty);
    i.me = seed_me();
    i.operator = op(true, None, None);
    i.witness = Answer::NoAnswer("forbidden".into());
    let d = decide(&i);
    assert_eq!(
        (d.verdict, d.row),
        (Verdict::PhaseUnknown, Row::BootstrapWitnessUnread)
    );
    assert!(d.reason.contains("forbidden"), "{}", d.reason);
    // Kubernetes off altogether: the witness is not configured, as before.
    i.witness = Answer::NotConfigured;
    assert_eq!(decide(&i).verdict, Verdict::Bootstrap);
}

#[test]
fn a_witness_of_another_identity_is_foreign_evidence_against_an_initialized_dir() {
    let mut i = initialized(0xa, 0xc);
    i.witness = witness(0xa, 0xc);
    let d = decide(&i);
    assert_eq!(d.verdict, Verdict::Start, "{}", d.reason);
    assert!(d.reason.contains("the witness Lease"), "{}", d.reason);
    i.witness = witness(0xb, 0xc);
    let d = decide(&i);
    assert_eq!(d.verdict, Verdict::RefuseForeign, "{}", d.reason);
    assert!(
        d.reason
            .contains("the witness Lease etcd-witness-m1 says 000000000000000b"),
        "{}",
        d.reason
    );
    assert!(
        d.remedy
            .contains("kubectl -n ns delete lease etcd-witness-m1"),
        "{}",
        d.remedy
    );
    i.witness = witness(0xa, 0xd);
    assert_eq!(decide(&i).verdict, Verdict::RefuseForeign);
    // Another source disagreeing, the witness agreeing: no witness to clear.
    i.witness = witness(0xa, 0xc);
    i.hint_cluster_id = Some(ClusterId::new(0xd));
    let d = decide(&i);
    assert_eq!(d.verdict, Verdict::RefuseForeign, "{}", d.reason);
    assert!(!d.remedy.contains("delete lease"), "{}", d.remedy);
    i.hint_cluster_id = None;
    // The live list shows this member started under the directory's ID and
    // no longer has the Lease's: a stale witness, as for status.memberID.
    i.witness = witness(0xb, 0xc);
    i.live = live(0xc, &[(0xa, "m1", ME, true)]);
    assert_eq!(decide(&i).row, Row::StartStaleRecord);
}

#[test]
fn a_readded_member_joins_despite_the_witness_of_its_old_id() {
    let mut i = inputs(Dir::Empty);
    i.witness = witness(0xa, 0xc);
    i.live = live(0xc, &[(0xb, "", ME, false), (0x9, "m0", M0, true)]);
    assert_eq!(decide(&i).verdict, Verdict::Join);
    i.witness = witness(0xb, 0xc);
    assert_eq!(decide(&i).verdict, Verdict::RefuseEmptyFormed);
}
#[test]
fn the_row_5_reason_names_only_the_sources_that_agree() {
    let mut i = initialized(0xa, 0xc);
    i.me.derived = Some(DerivedIds {
        member_id: MemberId::new(0x1a),
        cluster_id: ClusterId::new(0x1c),
    });
    i.operator = op(false, Some(0xa), Some(0xc));
    let d = decide(&i);
    assert_eq!(d.row, Row::Start, "{}", d.reason);
    assert!(
        !d.reason
            .contains("consistent with the directory's own membership, the IDs its flags derive"),
        "{}",
        d.reason
    );
    assert!(
        d.reason
            .contains("its flags derive member 000000000000001a"),
        "{}",
        d.reason
    );
}

/// The live wait ends on one answer that shows this member started: for an
/// empty directory only the leader's (the same entry row 7 refuses on), for a
/// directory with a WAL its own cluster's listing the directory's member as
/// this one; never for a WAL whose first records could not be read.
#[test]
fn one_answer_settles_the_live_wait_only_when_it_shows_this_member_started() {
    let me = me();
    let answer = |leader: bool, started: bool| {
        let mut a = live(
            9,
            &[
                (1, "m1", "http://m1:2380", started),
                (2, "m2", "http://m2:2380", true),
            ],
        );
        if let Answer::Answered(l) = &mut a {
            l.leader_heard = leader;
        }
        a.into_option().unwrap()
    };
    let ids = |m: u64, c: u64| Some(Some((MemberId::new(m), ClusterId::new(c))));
    // An empty directory: the leader's answer listing it started.
    assert!(settles(&me, None, &answer(true, true)));
    assert!(
        !settles(&me, None, &answer(false, true)),
        "a follower's list may lag"
    );
    assert!(
        !settles(&me, None, &answer(true, false)),
        "added, never started"
    );
    // A WAL: any answer of its cluster listing its member as this one, started.
    assert!(settles(&me, ids(1, 9), &answer(false, true)));
    assert!(
        !settles(&me, ids(1, 8), &answer(true, true)),
        "another cluster"
    );
    assert!(
        !settles(&me, ids(2, 9), &answer(true, true)),
        "another member's ID"
    );
    assert!(
        !settles(&me, ids(1, 9), &answer(true, false)),
        "never started"
    );
    assert!(
        !settles(&me, Some(None), &answer(true, true)),
        "an unread WAL"
    );
    // Row 7 refuses on the same entry the wait settles on.
    let mut i = inputs(Dir::Empty);
    i.live = Answer::Answered(answer(true, true));
    assert_eq!(decide(&i).row, Row::EmptyFormed);
}

#[test]
fn regression_a_member_left_out_of_a_restore_is_not_started_into_the_restored_history() {
    // The review's F3 on 3.6.16: members 2 and 3 were restored from a backup
    // (their restored membership lists 1 unstarted); 1's intact directory
    // records that it published itself, in the history before the restore.
    let mut i = member_of_three();
    rec(&mut i).published = true;
    let restored = |leader: bool| {
        altered(
            live(
                9,
                &[
                    (1, "", ME, false),
                    (2, "m0", M0, true),
                    (3, "m2", "http://m2:2380", true),
                ],
            ),
            |l| {
                l.raft_term = Some(3);
                l.leader_heard = leader;
            },
        )
    };
    i.live = restored(true);
    let d = decide(&i);
    assert_eq!(
        (d.verdict, d.row, d.verdict.exit().code()),
        (Verdict::RefuseForeign, Row::OtherHistory, 11),
        "{d:?}"
    );
    assert!(d.reason.contains("never started"), "{}", d.reason);
    assert!(
        d.remedy
            .starts_with("do not start this member, and do not wipe")
            && d.remedy.contains("etcdctl member remove 0000000000000001")
            && d.remedy
                .contains("etcdctl member add m1 --peer-urls=http://m1:2380")
            && d.remedy.contains("wipe"),
        "{}",
        d.remedy
    );
    // Only the leader's word (with a majority) refuses: a list without
    // the leader may lag behind this member's publish, and from a member
    // behind this directory it is no sign at all (helper-23: waiting on it
    // could hold for good a member its cluster needs).
    i.live = restored(false);
    assert_eq!(row(&i), Row::Start, "{:?}", decide(&i));
    // From a member that applied all this directory holds, it is a wait
    // (row 6j), not a start: that list may be a restored history's, with
    // its leader down (the kubelet retries).
    i.live = altered(restored(false), |l| {
        l.positions = vec![LivePosition {
            member_id: MemberId::new(2),
            raft_index: Some(9),
            applied_index: Some(9),
            applied_term: None,
            revision: None,
            leader: false,
            kv_hash: None,
            kv_unanswered: false,
        }];
    });
    let d = decide(&i);
    assert_eq!(
        (d.row, d.verdict.exit().code()),
        (Row::OtherHistoryUnconfirmed, 14),
        "{d:?}"
    );
    assert!(d.reason.contains("lists that lag"), "{}", d.reason);
    // Its own history lists it started: it starts.
    i.live = altered(restored(true), |l| {
        l.members[0].name = "m1".into();
        l.members[0].started = true;
    });
    assert_eq!(row(&i), Row::Start);
    // A member that never published in its own directory (a first start
    // that ended before it published) is not of another history.
    i.live = restored(true);
    rec(&mut i).published = false;
    assert_eq!(row(&i), Row::Start);
    // Nor is a directory made by a restore and not run since: the restored
    // membership names its members, never their client URLs, and a restored
    // member joining its restored peers is listed unstarted until it starts.
    rec(&mut i).published = true;
    rec(&mut i).restored = true;
    assert_ne!(row(&i), Row::OtherHistory);
}
