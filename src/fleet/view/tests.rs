//! Unit tests of the fleet view: rows, conditions and the summary from facts.

use super::*;
use crate::evidence::lease::WitnessRecord;
use crate::fleet::facts::{EtcdContainer, GuardRun, Termination};
use crate::fleet::store::Fact;
use crate::output::TerminationMessage;

const NS: &str = "tenant-a";
const ID: &str = "769f1c9e0d723d0b";

fn t(s: &str) -> Timestamp {
    s.parse().unwrap()
}

fn now() -> Timestamp {
    t("2026-12-03T12:00:00Z")
}

/// `secs` seconds before [`now`].
fn ago(secs: i64) -> Option<Timestamp> {
    Some(Timestamp::from_second(now().as_second() - secs).unwrap())
}

fn ready_pod(name: &str, cluster: &str) -> PodFacts {
    PodFacts {
        namespace: NS.into(),
        name: name.into(),
        uid: format!("uid-{name}"),
        node: Some("node-1".into()),
        created: ago(3600),
        terminating: false,
        cluster_label: Some(cluster.into()),
        instance_label: None,
        controller: None,
        guarded: true,
        sidecar: true,
        phase: Some("Running".into()),
        ready_condition: Some(true),
        ready_since: ago(3000),
        uninitialized_since: None,
        etcd: Some(EtcdContainer {
            name: "etcd".into(),
            ready: true,
            state: RunState::Running { since: ago(3000) },
            restarts: 0,
        }),
        guards: vec![GuardRun {
            container: "preflight".into(),
            command: "preflight".into(),
            state: RunState::Terminated {
                exit_code: 0,
                reason: Some("Completed".into()),
            },
            last: Some(Termination {
                exit_code: 0,
                started: ago(3100),
                finished: ago(3050),
                message: Some(TerminationMessage {
                    verdict: Some("start".into()),
                    exit_code: 0,
                    row: Some("5".into()),
                    member_id: Some("ae36f238164a08ad".into()),
                    cluster_id: Some(ID.into()),
                    reason: "every source agrees".into(),
                    remedy: String::new(),
                }),
                tail: None,
            }),
            restarts: 0,
        }],
        stuck: Vec::new(),
        restarts: BTreeMap::new(),
    }
}

fn not_ready(mut p: PodFacts, since_secs: i64) -> PodFacts {
    p.ready_condition = Some(false);
    p.ready_since = ago(since_secs);
    if let Some(e) = &mut p.etcd {
        e.ready = false;
        e.state = RunState::Waiting {
            reason: Some("CrashLoopBackOff".into()),
            message: None,
        };
        e.restarts = 6;
    }
    p.restarts.insert("etcd".into(), 6);
    p
}

fn refused(mut p: PodFacts, verdict: Option<&str>, code: i32) -> PodFacts {
    p = not_ready(p, 600);
    p.restarts.clear();
    p.etcd.as_mut().unwrap().state = RunState::Waiting {
        reason: Some("PodInitializing".into()),
        message: None,
    };
    p.etcd.as_mut().unwrap().restarts = 0;
    p.uninitialized_since = Some(ago(900));
    p.guards[0] = GuardRun {
        container: "preflight".into(),
        command: "preflight".into(),
        state: RunState::Waiting {
            reason: Some("CrashLoopBackOff".into()),
            message: None,
        },
        last: Some(Termination {
            exit_code: code,
            started: ago(61),
            finished: ago(60),
            message: verdict.map(|v| TerminationMessage {
                verdict: Some(v.into()),
                exit_code: u8::try_from(code).unwrap(),
                row: Some("7".into()),
                member_id: None,
                cluster_id: None,
                reason: "the data directory is empty but this member started before".into(),
                remedy: "replace the member".into(),
            }),
            tail: verdict.is_none().then(|| "the log's last line".to_owned()),
        }),
        restarts: 7,
    };
    p.restarts.insert("preflight".into(), 7);
    p
}

fn lease(member: &str, cluster_id: &str, index: u64, renewed_secs_ago: i64) -> LeaseFacts {
    LeaseFacts {
        namespace: NS.into(),
        member: member.into(),
        record: WitnessRecord {
            name: format!("etcd-witness-{member}"),
            holder: Some(member.into()),
            member_id: Some(crate::disk::ids::MemberId::new(0xae36f238164a08ad)),
            cluster_id: Some(crate::disk::ids::ClusterId::new(
                u64::from_str_radix(cluster_id, 16).unwrap(),
            )),
            raft_term: Some(3),
            raft_index: Some(index),
            revision: Some(i64::try_from(index).unwrap() * 2),
            incarnation: crate::disk::ids::Incarnation {
                token_sha256: None,
                cluster_uid: Some("uid-of-etcd".into()),
            },
            format: Some(1),
            pod_uid: Some(format!("uid-{member}")),
            renew_time: None,
            problems: Vec::new(),
        },
        renewed: ago(renewed_secs_ago),
        duration_secs: Some(30),
    }
}

fn event(pod: &str, reason: &str, message: &str, first_secs_ago: i64) -> EventFacts {
    EventFacts {
        namespace: NS.into(),
        pod: pod.into(),
        pod_uid: format!("uid-{pod}"),
        reason: reason.into(),
        message: message.into(),
        container: None,
        first: ago(first_secs_ago),
        last: ago(first_secs_ago / 2),
        count: 1,
    }
}

fn record(name: &str, cluster: &str, voter: Option<bool>) -> MemberRecordFacts {
    MemberRecordFacts {
        namespace: NS.into(),
        name: name.into(),
        created: ago(7200),
        cluster: cluster.into(),
        is_voter: voter,
        dormant: false,
        member_id: None,
        problem: None,
    }
}

/// A store holding `pods`, each with a fresh witness at index 1000 of [`ID`].
fn store(pods: Vec<PodFacts>) -> Store {
    let mut s = Store::expecting(&[Scope::All]);
    for r in Resource::ALL {
        s.replace(r, &Scope::All, Vec::new());
    }
    for p in pods {
        s.upsert(Fact::Lease(lease(&p.name, ID, 1000, 5)));
        s.upsert(Fact::Pod(p));
    }
    s
}

fn three(cluster: &str) -> Vec<PodFacts> {
    (1..=3)
        .map(|i| ready_pod(&format!("{cluster}-m{i}"), cluster))
        .collect()
}

fn view(s: &Store) -> FleetView {
    build(s, now(), &Settings::default())
}

fn kinds(c: &ClusterView) -> Vec<ConditionKind> {
    c.conditions.iter().map(|c| c.kind).collect()
}

fn only(v: &FleetView) -> &ClusterView {
    assert_eq!(v.clusters.len(), 1, "{:#?}", v.clusters);
    &v.clusters[0]
}

#[test]
fn a_healthy_cluster_has_no_condition_and_exits_0() {
    let v = view(&store(three("etcd")));
    let c = only(&v);
    assert_eq!(kinds(c), []);
    assert_eq!(c.health, Health::Ok);
    assert_eq!((c.voters, c.healthy_voters, c.quorum), (3, 3, 2));
    assert_eq!(c.cluster_id.as_deref(), Some(ID));
    assert!(c.members.iter().all(|m| m.status == MemberStatus::Ready));
    assert_eq!(
        (v.needs_attention, v.complete, v.exit_code),
        (false, true, 0)
    );
    assert_eq!(v.summary.text, "1 cluster, 3 members: all clear");
    let m = &c.members[0];
    let verdict = m.verdict.as_ref().unwrap();
    assert_eq!(verdict.verdict.as_deref(), Some("start"));
    assert_eq!(verdict.row.as_deref(), Some("5"));
    assert_eq!(verdict.age_seconds, Some(3050));
    assert!(!verdict.refused);
    assert_eq!(m.readiness.detail, "ready");
}

#[test]
fn one_refused_member_of_three_is_refused_and_puts_the_quorum_at_risk() {
    let mut pods = three("etcd");
    pods[1] = refused(pods[1].clone(), Some("refuse-empty-formed"), 10);
    let mut s = store(pods);
    let e = event("etcd-m2", "refuse-empty-formed", "empty but started", 1200);
    s.upsert(Fact::Event(
        crate::fleet::facts::EventSource::Agent,
        "e1".into(),
        e,
    ));
    let v = view(&s);
    let c = only(&v);
    assert_eq!(
        kinds(c),
        [ConditionKind::QuorumAtRisk, ConditionKind::MembersRefused]
    );
    assert_eq!(c.health, Health::Critical);
    assert_eq!((c.voters, c.healthy_voters, c.quorum), (3, 2, 2));
    let refused = &c.conditions[1];
    assert_eq!(refused.members, ["etcd-m2"]);
    assert_eq!(refused.detail, "etcd-m2: refuse-empty-formed (exit 10)");
    // Refused since the refusal's first Event, not the last attempt.
    assert_eq!(refused.for_seconds, Some(1200));
    let m = &c.members[0];
    assert_eq!(m.member, "etcd-m2", "the worst member first");
    assert_eq!(m.status, MemberStatus::Refused);
    assert_eq!(
        m.conditions,
        [ConditionKind::QuorumAtRisk, ConditionKind::MembersRefused]
    );
    let verdict = m.verdict.as_ref().unwrap();
    assert_eq!(verdict.source, "termination-message");
    assert_eq!((verdict.exit_code, verdict.restarts), (Some(10), 7));
    assert_eq!(verdict.state, "waiting (CrashLoopBackOff)");
    assert_eq!(
        m.readiness.detail,
        "preflight refused (refuse-empty-formed)"
    );
    // A refused member is not "not ready" on top of it.
    assert!(!kinds(c).contains(&ConditionKind::MembersNotReady));
    assert_eq!(v.exit_code, 50);
    assert_eq!(
        v.summary.text,
        "1 cluster, 3 members: 1 refused, 1 quorum at risk"
    );
}

#[test]
fn a_verdict_the_message_does_not_name_comes_from_the_event() {
    let mut pods = three("etcd");
    pods[0] = refused(pods[0].clone(), None, 14);
    let mut s = store(pods);
    s.upsert(Fact::Event(
        crate::fleet::facts::EventSource::Agent,
        "e1".into(),
        event("etcd-m1", "phase-unknown", "no source answered", 400),
    ));
    let v = view(&s);
    let m = &only(&v).members[0];
    let verdict = m.verdict.as_ref().unwrap();
    assert_eq!(verdict.verdict.as_deref(), Some("phase-unknown"));
    assert_eq!(verdict.source, "event");
    assert_eq!(verdict.reason.as_deref(), Some("no source answered"));
    // Without the Event: the exit code, and the log's last line.
    let mut pods = three("etcd");
    pods[0] = refused(pods[0].clone(), None, 14);
    let v = view(&store(pods));
    let verdict = only(&v).members[0].verdict.clone().unwrap();
    assert_eq!((verdict.verdict, verdict.source), (None, "exit-code"));
    assert_eq!(verdict.reason.as_deref(), Some("the log's last line"));
    assert!(verdict.refused, "any non-zero code is a refusal");
}

#[test]
fn with_no_ending_in_the_status_the_refusal_event_is_the_verdict() {
    let mut pods = three("etcd");
    let mut p = refused(pods[2].clone(), Some("x"), 10);
    p.guards[0].last = None;
    p.guards[0].state = RunState::Running { since: ago(2) };
    pods[2] = p;
    let mut s = store(pods);
    s.upsert(Fact::Event(
        crate::fleet::facts::EventSource::Agent,
        "e1".into(),
        event("etcd-m3", "refuse-foreign", "another cluster's data", 300),
    ));
    // An Event about an earlier Pod of the same name is not this Pod's.
    let mut old = event("etcd-m3", "refuse-corrupt", "old", 9000);
    old.pod_uid = "uid-earlier".into();
    s.upsert(Fact::Event(
        crate::fleet::facts::EventSource::Agent,
        "e0".into(),
        old,
    ));
    let v = view(&s);
    let m = only(&v)
        .members
        .iter()
        .find(|m| m.member == "etcd-m3")
        .unwrap();
    let verdict = m.verdict.as_ref().unwrap();
    assert_eq!(verdict.verdict.as_deref(), Some("refuse-foreign"));
    assert_eq!((verdict.source, verdict.exit_code), ("event", None));
    assert_eq!(m.status, MemberStatus::Refused);
}

#[test]
fn two_members_down_lose_the_quorum_and_are_not_ready_after_the_grace() {
    let mut pods = three("etcd");
    pods[0] = not_ready(pods[0].clone(), 600);
    pods[1] = not_ready(pods[1].clone(), 60);
    let v = view(&store(pods));
    let c = only(&v);
    assert_eq!(
        kinds(c),
        [ConditionKind::QuorumLost, ConditionKind::MembersNotReady]
    );
    assert_eq!(c.conditions[0].detail, "1 of 3 voters healthy, quorum 2");
    assert_eq!(c.conditions[0].members, ["etcd-m1", "etcd-m2"]);
    // Only the one down longer than --not-ready-after (2m).
    assert_eq!(c.conditions[1].members, ["etcd-m1"]);
    assert_eq!(
        c.conditions[1].detail,
        "etcd-m1 (etcd waiting (CrashLoopBackOff))"
    );
    assert_eq!(c.conditions[1].for_seconds, Some(600));
}

#[test]
fn a_cluster_of_one_is_not_at_risk_and_five_with_one_down_is_not_either() {
    let v = view(&store(vec![ready_pod("solo-m1", "solo")]));
    assert_eq!(kinds(only(&v)), []);
    let mut pods: Vec<PodFacts> = (1..=5)
        .map(|i| ready_pod(&format!("big-m{i}"), "big"))
        .collect();
    pods[0] = not_ready(pods[0].clone(), 30);
    let v = view(&store(pods.clone()));
    assert_eq!(kinds(only(&v)), [], "4 of 5, quorum 3");
    pods[1] = not_ready(pods[1].clone(), 30);
    let v = view(&store(pods));
    assert_eq!(kinds(only(&v)), [ConditionKind::QuorumAtRisk], "3 of 5");
}

#[test]
fn witnesses_that_disagree_on_the_cluster_id_are_named() {
    let mut s = store(three("etcd"));
    s.upsert(Fact::Lease(lease("etcd-m3", "1111111111111111", 1000, 5)));
    s.upsert(Fact::Cluster(ClusterRecordFacts {
        namespace: NS.into(),
        name: "etcd".into(),
        created: ago(9000),
        cluster_id: Some(ID.into()),
        replicas: Some(3),
        uid: Some("uid-of-etcd".into()),
        token_sha256: None,
        problem: None,
    }));
    let v = view(&s);
    let c = only(&v);
    assert_eq!(kinds(c), [ConditionKind::ClusterIdMismatch]);
    assert_eq!(c.conditions[0].members, ["etcd-m3"]);
    assert_eq!(
        c.conditions[0].detail,
        format!("1111111111111111 (etcd-m3) vs {ID} (etcd-m1, etcd-m2, EtcdCluster)")
    );
    assert_eq!(c.cluster_id, None);
    assert_eq!(c.cluster_ids.len(), 2);
    assert_eq!(c.replicas, Some(3));
}

#[test]
fn another_incarnations_witness_neither_agrees_nor_disagrees() {
    let record = ClusterRecordFacts {
        namespace: NS.into(),
        name: "etcd".into(),
        created: ago(9000),
        cluster_id: Some(ID.into()),
        replicas: Some(3),
        uid: Some("uid-of-etcd".into()),
        token_sha256: Some(crate::disk::ids::token_sha256("t")),
        problem: None,
    };
    let mut s = store(three("etcd"));
    s.upsert(Fact::Cluster(record));
    // m3's Lease is a leftover of an earlier EtcdCluster of the name, with
    // another cluster ID and far behind: no mismatch, no lag; the member
    // has no witness of this incarnation.
    let mut old = lease("etcd-m3", "1111111111111111", 10, 5);
    old.record.incarnation.cluster_uid = Some("uid-of-an-earlier-etcd".into());
    s.upsert(Fact::Lease(old));
    let v = view(&s);
    let c = only(&v);
    assert_eq!(kinds(c), [ConditionKind::WitnessMissing]);
    assert_eq!(
        c.conditions[0].detail,
        "etcd-witness-etcd-m3 is another incarnation's"
    );
    assert_eq!(c.cluster_id.as_deref(), Some(ID));
    let m3 = c.members.iter().find(|m| m.member == "etcd-m3").unwrap();
    assert!(m3.witness.as_ref().unwrap().other_incarnation);
    // A token hash that differs tells it too; an unknown one does not.
    let mut other_token = lease("etcd-m3", "1111111111111111", 10, 5);
    other_token.record.incarnation = crate::disk::ids::Incarnation {
        token_sha256: Some(crate::disk::ids::token_sha256("another token")),
        cluster_uid: None,
    };
    s.upsert(Fact::Lease(other_token));
    assert_eq!(kinds(only(&view(&s))), [ConditionKind::WitnessMissing]);
    let mut unknown = lease("etcd-m3", "1111111111111111", 1000, 5);
    unknown.record.incarnation = crate::disk::ids::Incarnation::default();
    s.upsert(Fact::Lease(unknown));
    assert_eq!(
        kinds(only(&view(&s))),
        [ConditionKind::ClusterIdMismatch],
        "an unknown incarnation is taken as this one"
    );
}

#[test]
fn a_ready_members_stale_witness_is_stale_and_a_down_members_is_not_reported() {
    let mut pods = three("etcd");
    pods[2] = not_ready(pods[2].clone(), 30);
    let mut s = store(pods);
    s.upsert(Fact::Lease(lease("etcd-m1", ID, 1000, 400)));
    s.upsert(Fact::Lease(lease("etcd-m3", ID, 1000, 400)));
    let v = view(&s);
    let c = only(&v);
    assert_eq!(
        kinds(c),
        [ConditionKind::QuorumAtRisk, ConditionKind::WitnessStale]
    );
    assert_eq!(c.conditions[1].members, ["etcd-m1"]);
    // Stale since its renewal plus its 30 s duration.
    assert_eq!(c.conditions[1].for_seconds, Some(370));
    let m1 = c.members.iter().find(|m| m.member == "etcd-m1").unwrap();
    assert!(m1.witness.as_ref().unwrap().stale);
}

#[test]
fn a_ready_guarded_member_without_a_witness_is_reported() {
    let mut s = store(three("etcd"));
    s.remove(Resource::Leases, &(NS.into(), "etcd-m2".into()));
    let v = view(&s);
    let c = only(&v);
    assert_eq!(kinds(c), [ConditionKind::WitnessMissing]);
    assert_eq!(c.conditions[0].detail, "no Lease etcd-witness-etcd-m2");
}

#[test]
fn a_member_far_behind_the_others_lags_and_a_near_one_does_not() {
    let mut s = store(three("etcd"));
    s.upsert(Fact::Lease(lease("etcd-m1", ID, 50_000, 5)));
    s.upsert(Fact::Lease(lease("etcd-m2", ID, 45_000, 5)));
    s.upsert(Fact::Lease(lease("etcd-m3", ID, 30_000, 5)));
    let v = view(&s);
    let c = only(&v);
    assert_eq!(kinds(c), [ConditionKind::RaftLag]);
    assert_eq!(c.conditions[0].members, ["etcd-m3"]);
    assert_eq!(
        c.conditions[0].detail,
        "etcd-m3 at 30000, 20000 behind etcd-m1 (50000)"
    );
}

#[test]
fn hazards_come_from_the_status_and_from_pod_checks_events() {
    let mut pods = three("etcd");
    pods[0].stuck = vec![crate::evidence::pod::Hazard::StuckContainer {
        container: "agent".into(),
        container_type: crate::evidence::pod::ContainerType::Init,
        reason: "CreateContainerConfigError".into(),
        detail: "configmap \"etcd-cluster-state\" not found".into(),
        restart_count: 0,
        message: "init container agent: stuck".into(),
    }];
    let mut s = store(pods);
    s.upsert(Fact::Event(
        crate::fleet::facts::EventSource::Agent,
        "h1".into(),
        event(
            "etcd-m2",
            "missing-reference",
            "container etcd: envFrom[0] → ConfigMap \"x\" not found",
            100,
        ),
    ));
    // An old stuck-container Event: the status is the truth for those.
    s.upsert(Fact::Event(
        crate::fleet::facts::EventSource::Agent,
        "h2".into(),
        event("etcd-m3", "stuck-container", "container etcd: stuck", 100),
    ));
    let v = view(&s);
    let c = only(&v);
    assert_eq!(kinds(c), [ConditionKind::Hazards]);
    assert_eq!(c.conditions[0].members, ["etcd-m1", "etcd-m2"]);
    assert_eq!(
        c.conditions[0].detail,
        "etcd-m1: stuck-container; etcd-m2: missing-reference"
    );
    let m2 = c.members.iter().find(|m| m.member == "etcd-m2").unwrap();
    assert_eq!(m2.hazards[0].source, "event");
    let m1 = c.members.iter().find(|m| m.member == "etcd-m1").unwrap();
    assert_eq!(m1.hazards[0].source, "pod-status");
    // A refusal Event is no hazard.
    assert!(c.members.iter().all(|m| m.status == MemberStatus::Ready));
}

#[test]
fn records_bring_members_without_pods_learners_and_dormant_members() {
    let mut s = store(three("etcd"));
    s.upsert(Fact::Member(record("etcd-m1", "etcd", Some(true))));
    s.upsert(Fact::Member(record("etcd-m4", "etcd", Some(false))));
    let mut gone = record("etcd-m5", "etcd", Some(true));
    gone.created = ago(60);
    s.upsert(Fact::Member(gone));
    let mut parked = record("etcd-m6", "etcd", Some(true));
    parked.dormant = true;
    s.upsert(Fact::Member(parked));
    // A cluster with records only (every Pod gone).
    s.upsert(Fact::Member(record("other-m1", "other", Some(true))));
    s.upsert(Fact::Cluster(ClusterRecordFacts {
        namespace: NS.into(),
        name: "empty".into(),
        created: ago(500),
        cluster_id: None,
        replicas: Some(3),
        uid: None,
        token_sha256: None,
        problem: None,
    }));
    let v = view(&s);
    let names: Vec<&str> = v.clusters.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["other", "empty", "etcd"], "worst first");
    let etcd = &v.clusters[2];
    // m4 (learner, no Pod) and m5 (no Pod) and m6 (dormant): voters m1-m3, m5.
    assert_eq!((etcd.voters, etcd.healthy_voters, etcd.quorum), (4, 3, 3));
    assert_eq!(
        kinds(etcd),
        [ConditionKind::QuorumAtRisk, ConditionKind::MembersNotReady]
    );
    // m5 went missing a minute ago: not yet not-ready; m4 two hours ago.
    assert_eq!(etcd.conditions[1].members, ["etcd-m4"]);
    let m4 = etcd.members.iter().find(|m| m.member == "etcd-m4").unwrap();
    assert_eq!(
        (m4.status, m4.voter, m4.pod.clone()),
        (MemberStatus::NoPod, false, None)
    );
    let m6 = etcd.members.iter().find(|m| m.member == "etcd-m6").unwrap();
    assert_eq!((m6.status, m6.voter), (MemberStatus::Dormant, false));
    assert_eq!(
        kinds(&v.clusters[0]),
        [ConditionKind::QuorumLost, ConditionKind::MembersNotReady]
    );
    assert_eq!(kinds(&v.clusters[1]), [ConditionKind::QuorumLost]);
    assert_eq!(
        v.clusters[1].conditions[0].detail,
        "the EtcdCluster wants 3 replicas; no member is known"
    );
    // With -l, records add no cluster of their own.
    // Without the Pods, no member is "without a Pod".
    let mut blind = s.clone();
    blind.pods.clear();
    blind.mark(
        Resource::Pods,
        &Scope::All,
        ReadState::Failed {
            error: "forbidden",
            message: String::new(),
        },
    );
    let v = view(&blind);
    assert_eq!(v.clusters.len(), 0, "{:#?}", v.clusters);
    assert_eq!(v.exit_code, 51);
    let narrowed = build(
        &s,
        now(),
        &Settings {
            records_define_clusters: false,
            ..Settings::default()
        },
    );
    let names: Vec<&str> = narrowed.clusters.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["etcd"]);
}

#[test]
fn a_read_that_failed_makes_the_view_incomplete_and_the_exit_51_or_50() {
    let mut s = store(three("etcd"));
    s.mark(
        Resource::Leases,
        &Scope::All,
        ReadState::Failed {
            error: "forbidden",
            message: "forbidden: …".into(),
        },
    );
    s.mark(
        Resource::EtcdMembers,
        &Scope::All,
        ReadState::NotServed("the server could not find the requested resource".into()),
    );
    // Ready members whose Leases could not be read are not "without a witness".
    s.remove(Resource::Leases, &(NS.into(), "etcd-m1".into()));
    let v = view(&s);
    assert!(!v.complete);
    assert_eq!(v.exit_code, 51);
    assert_eq!(kinds(only(&v)), []);
    assert_eq!(v.unread.len(), 1, "a CRD not served is no gap");
    assert_eq!(v.unread[0].resource, Resource::Leases);
    assert_eq!(v.not_served, [Resource::EtcdMembers]);
    assert!(
        v.summary
            .text
            .ends_with("1 read failed (the view is incomplete)"),
        "{}",
        v.summary.text
    );
    let mut pods = three("etcd");
    pods[0] = refused(pods[0].clone(), Some("refuse-corrupt"), 12);
    let mut s2 = store(pods);
    s2.reads = s.reads.clone();
    assert_eq!(
        view(&s2).exit_code,
        50,
        "something needs a person all the same"
    );
}

#[test]
fn the_rules_are_listed_in_the_documented_order() {
    let order: Vec<ConditionKind> = RULES.iter().map(|(k, _)| *k).collect();
    assert_eq!(order, ConditionKind::ALL);
    // The module docs' table lists them in that order.
    let doc = include_str!("../view.rs");
    let mut at = 0;
    for k in ConditionKind::ALL {
        let row = format!("//! | `{}` |", k.name());
        let found = doc[at..]
            .find(&row)
            .unwrap_or_else(|| panic!("{row} out of order"));
        at += found + row.len();
    }
    let mut sorted = ConditionKind::ALL;
    sorted.sort_by_key(|k| k.health());
    assert_eq!(sorted, ConditionKind::ALL, "critical ones first");
}
