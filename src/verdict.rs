//! The decision table of SPEC §2.2 as one pure function from evidence to verdict.
//!
//! No I/O happens here: `cmd::preflight` gathers the evidence (directory, live
//! cluster, operator record, env hints) and this module decides. Keeping it pure
//! lets every row of the table, and every combination of sources that answered or
//! did not, be tested exhaustively without a cluster.
//!
//! The rule that shapes everything: an empty directory is only safe to start on
//! when the sources that could know say this member never started. Silence is not
//! consent — when nobody can answer, the verdict is `phase-unknown` and etcd does
//! not start.

use serde::Serialize;

use crate::exit::Exit;
use crate::output::hex_id;

/// What the directory looks like, as the inspector classified it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum DirState {
    /// No WAL and nothing etcd wrote.
    Empty,
    /// A readable WAL with metadata.
    Initialized,
    /// Something etcd wrote, but not a complete member.
    Partial,
    /// A WAL or backend that fails its checks.
    Corrupt,
    /// Could not be read (permissions, I/O errors).
    Unreadable,
}

/// The verdict names are part of the contract: operators and runbooks match them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Verdict {
    /// Initialized, and its identity matches every known expectation.
    Start,
    /// Empty, and this member is the seed of a cluster that has not formed.
    Bootstrap,
    /// Empty, and this member was added to the live cluster but never started.
    Join,
    /// Empty, but this member started before: starting would lose data.
    RefuseEmptyFormed,
    /// The directory belongs to another member or cluster.
    RefuseForeign,
    /// The directory is corrupt.
    RefuseCorrupt,
    /// The directory is partially initialized.
    RefusePartial,
    /// Empty, and no source could say whether this member started before.
    PhaseUnknown,
    /// etcd is already running on this directory.
    RefuseRunning,
    /// The directory cannot be read.
    Unreadable,
}

impl Verdict {
    /// The documented exit code of this verdict.
    pub fn exit(self) -> Exit {
        match self {
            Verdict::Start | Verdict::Bootstrap | Verdict::Join => Exit::Ok,
            Verdict::RefuseEmptyFormed => Exit::RefuseEmptyFormed,
            Verdict::RefuseForeign => Exit::RefuseForeign,
            Verdict::RefuseCorrupt => Exit::RefuseCorrupt,
            Verdict::RefusePartial => Exit::RefusePartial,
            Verdict::PhaseUnknown => Exit::PhaseUnknown,
            Verdict::RefuseRunning => Exit::RefuseRunning,
            Verdict::Unreadable => Exit::Unreadable,
        }
    }

    /// The verdict's name as written in JSON and logs.
    pub fn name(self) -> &'static str {
        match self {
            Verdict::Start => "start",
            Verdict::Bootstrap => "bootstrap",
            Verdict::Join => "join",
            Verdict::RefuseEmptyFormed => "refuse-empty-formed",
            Verdict::RefuseForeign => "refuse-foreign",
            Verdict::RefuseCorrupt => "refuse-corrupt",
            Verdict::RefusePartial => "refuse-partial",
            Verdict::PhaseUnknown => "phase-unknown",
            Verdict::RefuseRunning => "refuse-running",
            Verdict::Unreadable => "unreadable",
        }
    }
}

/// The directory's facts that matter to the decision.
#[derive(Debug, Clone, Default)]
pub struct DirFacts {
    /// The classification; `None` is not possible in practice and reads as unreadable.
    pub state: Option<DirState>,
    /// etcd holds the WAL or backend locks.
    pub running: bool,
    /// The member ID in the WAL metadata.
    pub member_id: Option<u64>,
    /// The cluster ID in the WAL metadata.
    pub cluster_id: Option<u64>,
    /// The peer URLs the directory's own membership records for its member ID
    /// (`None` when the directory does not say).
    pub recorded_peer_urls: Option<Vec<String>>,
    /// Why the directory is partial, corrupt or unreadable.
    pub problem: Option<String>,
}

/// Who this member is, from its flags.
#[derive(Debug, Clone, Default)]
pub struct SelfFacts {
    /// `--name`.
    pub name: Option<String>,
    /// `--peer-urls` (or this member's `--initial-cluster` entry), normalised.
    pub peer_urls: Vec<String>,
    /// `--initial-cluster` names only this member (the operator's seed shape).
    pub self_only_initial_cluster: bool,
}

/// One member of the live cluster's member list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiveMemberFacts {
    /// Its ID.
    pub id: u64,
    /// Its name (empty until it first starts).
    pub name: String,
    /// Its peer URLs.
    pub peer_urls: Vec<String>,
    /// It has a name and client URLs: it has started at least once.
    pub started: bool,
}

/// What the live cluster said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiveFacts {
    /// The cluster ID in the response header (of the freshest answer).
    pub cluster_id: u64,
    /// The member list (serializable; the freshest answer's, with a member any
    /// answer saw started marked started).
    pub members: Vec<LiveMemberFacts>,
    /// Other cluster IDs some endpoints reported: the endpoints reach more than
    /// one cluster.
    pub other_cluster_ids: Vec<u64>,
    /// Enough members answered to trust "never started" (see
    /// `evidence::etcd::probe`).
    pub majority_heard: bool,
    /// One of the answers was the leader's.
    pub leader_heard: bool,
}

impl LiveFacts {
    /// The entry for this member: by name when it has one, else by peer URL.
    /// When two entries match (a started one by name, an unstarted one by a new
    /// peer URL), the started one: whether this member started must not depend
    /// on the order of the list.
    pub fn find(&self, me: &SelfFacts) -> Option<&LiveMemberFacts> {
        let mut matching = self.members.iter().filter(|m| {
            let by_name = matches!(&me.name, Some(n) if !m.name.is_empty() && m.name == *n);
            let by_url = m.peer_urls.iter().any(|u| me.peer_urls.contains(u));
            by_name || by_url
        });
        let first = matching.next()?;
        Some(if first.started {
            first
        } else {
            matching.find(|m| m.started).unwrap_or(first)
        })
    }
}

/// What the operator's records said.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OperatorFacts {
    /// `EtcdMember.spec.bootstrap`: this member is the seed.
    pub bootstrap: bool,
    /// `EtcdMember.status.memberID`, latched once the member was Ready.
    pub member_id: Option<u64>,
    /// `EtcdCluster.status.clusterID`, latched once the cluster formed.
    pub cluster_id: Option<u64>,
}

/// A source that may or may not have answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer<T> {
    /// The source answered.
    Answered(T),
    /// The source was asked and could not answer; the text says why.
    NoAnswer(String),
    /// The source is not configured for this deployment.
    NotConfigured,
}

impl<T> Answer<T> {
    fn get(&self) -> Option<&T> {
        match self {
            Answer::Answered(t) => Some(t),
            _ => None,
        }
    }

    fn describe(&self) -> &str {
        match self {
            Answer::Answered(_) => "answered",
            Answer::NoAnswer(why) => why,
            Answer::NotConfigured => "not configured",
        }
    }
}

/// Everything the decision looks at.
#[derive(Debug, Clone)]
pub struct Inputs {
    /// The directory.
    pub dir: DirFacts,
    /// This member's flags.
    pub me: SelfFacts,
    /// The live cluster.
    pub live: Answer<LiveFacts>,
    /// The operator's records.
    pub operator: Answer<OperatorFacts>,
    /// `ETCD_MEMBER_ID` when non-empty.
    pub hint_member_id: Option<u64>,
    /// `ETCD_CLUSTER_ID` when non-empty.
    pub hint_cluster_id: Option<u64>,
    /// `--allow-bootstrap-without-evidence`.
    pub allow_bootstrap_without_evidence: bool,
}

/// The verdict with the words an operator reads.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Decision {
    /// The verdict.
    pub verdict: Verdict,
    /// What was seen, in one or two sentences.
    pub reason: String,
    /// What to do about it (empty when etcd may start).
    pub remedy: String,
}

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

fn decision(verdict: Verdict, reason: String, remedy: &str) -> Decision {
    Decision {
        verdict,
        reason,
        remedy: remedy.to_string(),
    }
}

/// Applies the decision table.
pub fn decide(i: &Inputs) -> Decision {
    let Some(state) = i.dir.state else {
        return decision(
            Verdict::Unreadable,
            "the data directory could not be classified".into(),
            "check the volume mount and permissions",
        );
    };
    let problem = i.dir.problem.clone().unwrap_or_default();
    match state {
        DirState::Unreadable => decision(
            Verdict::Unreadable,
            format!("the data directory cannot be read: {problem}"),
            "check the volume's ownership and mode: the agent runs as the etcd user (uid 65532) and must be able to read the data dir",
        ),
        _ if i.dir.running => decision(
            Verdict::RefuseRunning,
            "an etcd process holds the locks of this data directory".into(),
            "another etcd is running on this volume; stop it before starting a second one (two processes on one data dir corrupt it)",
        ),
        DirState::Corrupt => decision(
            Verdict::RefuseCorrupt,
            format!("the data directory is corrupt: {problem}"),
            "keep the directory for analysis; remove and re-add the member so it starts on a fresh directory, or restore from a backup",
        ),
        DirState::Partial => decision(
            Verdict::RefusePartial,
            format!("the data directory is partially initialized: {problem}"),
            "an earlier start or restore was interrupted; wipe the directory (etcd-member-agent wipe) and let the member join again (member remove + member add)",
        ),
        DirState::Initialized => decide_initialized(i),
        DirState::Empty => decide_empty(i),
    }
}

fn decide_initialized(i: &Inputs) -> Decision {
    let (Some(wal_member), Some(wal_cluster)) = (i.dir.member_id, i.dir.cluster_id) else {
        return decision(
            Verdict::RefuseCorrupt,
            "the WAL has no member or cluster ID".into(),
            "keep the directory for analysis; remove and re-add the member",
        );
    };
    let mut mismatches = Vec::new();
    let mut check = |what: &str, source: &str, expected: Option<u64>, found: u64| {
        if let Some(e) = expected {
            if e != found {
                mismatches.push(format!(
                    "{what} in the WAL is {} but {source} says {}",
                    hex_id(found),
                    hex_id(e)
                ));
            }
        }
    };
    if let Some(op) = i.operator.get() {
        check("member ID", "the EtcdMember", op.member_id, wal_member);
        check("cluster ID", "the EtcdCluster", op.cluster_id, wal_cluster);
    }
    // Endpoints that reach more than one cluster are a misconfiguration of the
    // endpoint list, not evidence against the directory: it must belong to one
    // of them, and only that cluster's list says anything about its member.
    let mut split_warning = None;
    if let Some(live) = i.live.get() {
        let reached: Vec<u64> = std::iter::once(live.cluster_id)
            .chain(live.other_cluster_ids.iter().copied())
            .collect();
        if !reached.contains(&wal_cluster) {
            let source = match &live.other_cluster_ids[..] {
                [] => "the live cluster".to_owned(),
                others => {
                    let others: Vec<String> = others.iter().copied().map(hex_id).collect();
                    format!("the live cluster (other endpoints: {})", others.join(", "))
                }
            };
            check("cluster ID", &source, Some(live.cluster_id), wal_cluster);
        } else if live.cluster_id == wal_cluster {
            check(
                "member ID",
                "the live member list",
                live.find(&i.me).map(|m| m.id),
                wal_member,
            );
        }
        if reached.len() > 1 {
            let others: Vec<String> = reached
                .iter()
                .filter(|&&c| c != wal_cluster)
                .map(|&c| hex_id(c))
                .collect();
            split_warning = Some(format!(
                " (ETCD_PEER_ENDPOINTS also reaches cluster {}: fix the endpoint list)",
                others.join(", ")
            ));
        }
    }
    check("member ID", "ETCD_MEMBER_ID", i.hint_member_id, wal_member);
    check(
        "cluster ID",
        "ETCD_CLUSTER_ID",
        i.hint_cluster_id,
        wal_cluster,
    );
    if let Some(recorded) = &i.dir.recorded_peer_urls {
        let overlap = recorded.iter().any(|u| i.me.peer_urls.contains(u));
        if !i.me.peer_urls.is_empty() && !overlap {
            mismatches.push(format!(
                "the directory's own membership gives member {} the peer URLs {} but this member's are {}",
                hex_id(wal_member),
                recorded.join(","),
                i.me.peer_urls.join(",")
            ));
        }
    }
    if mismatches.is_empty() {
        let mut checked = vec!["the directory's own membership"];
        if i.operator.get().is_some() {
            checked.push("the operator's record");
        }
        if i.live.get().is_some() {
            checked.push("the live cluster");
        }
        if i.hint_member_id.is_some() || i.hint_cluster_id.is_some() {
            checked.push("the env hints");
        }
        return decision(
            Verdict::Start,
            format!(
                "the data directory holds member {} of cluster {}, consistent with {}{}",
                hex_id(wal_member),
                hex_id(wal_cluster),
                checked.join(", "),
                split_warning.unwrap_or_default()
            ),
            "",
        );
    }
    decision(
        Verdict::RefuseForeign,
        format!("the data directory belongs to another member or cluster: {}", mismatches.join("; ")),
        "check which volume is mounted here (a swapped or reused PVC); do not start etcd on it. If this member's own data is lost, remove and re-add the member so it joins fresh",
    )
}

fn decide_empty(i: &Inputs) -> Decision {
    let op = i.operator.get();
    let live = i.live.get();
    let seed = match op {
        Some(op) => op.bootstrap,
        None => i.me.self_only_initial_cluster,
    };
    let live_me = live.and_then(|l| l.find(&i.me));

    // A member that was removed and added again shows up unstarted under a new ID:
    // IDs the operator or env recorded for its previous incarnation are stale then.
    let readded_as = live_me.filter(|m| !m.started).map(|m| m.id);
    let recorded_started = |id: Option<u64>| match (id, readded_as) {
        (Some(old), Some(new)) => old == new,
        (Some(_), None) => true,
        (None, _) => false,
    };

    let mut started = Vec::new();
    if let Some(m) = live_me.filter(|m| m.started) {
        started.push(format!(
            "the live member list shows member {} ({}) as started",
            hex_id(m.id),
            m.name
        ));
    }
    if let Some(op) = op {
        if recorded_started(op.member_id) {
            started.push(format!(
                "the EtcdMember records memberID {}",
                hex_id(op.member_id.unwrap_or_default())
            ));
        }
    }
    if recorded_started(i.hint_member_id) {
        started.push(format!(
            "ETCD_MEMBER_ID is {}",
            hex_id(i.hint_member_id.unwrap_or_default())
        ));
    }
    if seed && readded_as.is_none() {
        if let Some(cid) = op.and_then(|o| o.cluster_id) {
            started.push(format!(
                "this is the seed and the EtcdCluster records clusterID {}",
                hex_id(cid)
            ));
        }
        if let Some(cid) = i.hint_cluster_id {
            started.push(format!(
                "this is the seed and ETCD_CLUSTER_ID is {}",
                hex_id(cid)
            ));
        }
        if let Some(l) = live {
            started.push(format!(
                "this is the seed and a live cluster {} already exists without it",
                hex_id(l.cluster_id)
            ));
        }
    }
    if !started.is_empty() {
        return decision(
            Verdict::RefuseEmptyFormed,
            format!(
                "the data directory is empty but this member started before: {}",
                started.join("; ")
            ),
            REMEDY_EMPTY_FORMED,
        );
    }

    // A join rests on the live list alone; it must be a list worth trusting.
    if let Some(l) = live.filter(|l| readded_as.is_some() && !l.other_cluster_ids.is_empty()) {
        let ids: Vec<String> = std::iter::once(l.cluster_id)
            .chain(l.other_cluster_ids.iter().copied())
            .map(hex_id)
            .collect();
        return decision(
            Verdict::PhaseUnknown,
            format!(
                "the data directory is empty and the live endpoints answer for different clusters ({})",
                ids.join(", ")
            ),
            "point ETCD_PEER_ENDPOINTS at this cluster's members only, then restart the Pod",
        );
    }
    if let Some(l) = live.filter(|l| readded_as.is_some() && !(l.majority_heard && l.leader_heard))
    {
        let short = if l.majority_heard {
            "no answer came from the leader"
        } else {
            "fewer than half of its voting members answered"
        };
        return decision(
            Verdict::PhaseUnknown,
            format!(
                "the data directory is empty and the live cluster {} lists this member as added but never started, \
but {short}: a lagging member's list can miss that this member started",
                hex_id(l.cluster_id)
            ),
            "list every member's client URL in ETCD_PEER_ENDPOINTS (a single Service URL is one voice) and make the leader and half of the members reachable, then restart the Pod",
        );
    }
    if let Some(id) = readded_as {
        // etcd joins through the other members its --initial-cluster names. The
        // seed's names only itself: with =new etcd would bootstrap a second cluster
        // carrying the old member and cluster IDs, with =existing it finds no peer.
        if i.me.self_only_initial_cluster {
            return decision(
                Verdict::RefuseEmptyFormed,
                format!(
                    "the data directory is empty and the live cluster lists this member ({}) as added but never started, \
but its --initial-cluster names only itself: etcd cannot join with these flags",
                    hex_id(id)
                ),
                REMEDY_JOIN_FLAGS,
            );
        }
        return decision(
            Verdict::Join,
            format!(
                "the data directory is empty and the live cluster lists this member ({}) as added but never started",
                hex_id(id)
            ),
            "",
        );
    }
    if let Some(l) = live {
        return decision(
            Verdict::PhaseUnknown,
            format!(
                "the data directory is empty and the live cluster {} does not list this member",
                hex_id(l.cluster_id)
            ),
            "add the member first (etcdctl member add <name> --peer-urls=<url>), then restart the Pod",
        );
    }
    if seed {
        if let Some(op) = op {
            if op.member_id.is_none() && op.cluster_id.is_none() {
                return decision(
                    Verdict::Bootstrap,
                    "the data directory is empty, this is the seed, and the operator records neither a member ID nor a cluster ID: the cluster has not formed".into(),
                    "",
                );
            }
        }
    }
    let silent = describe_silence(i);
    if i.allow_bootstrap_without_evidence {
        let verdict = if seed {
            Verdict::Bootstrap
        } else {
            Verdict::Join
        };
        return decision(
            verdict,
            format!("the data directory is empty and no source could answer ({silent}); allowed by --allow-bootstrap-without-evidence"),
            "",
        );
    }
    decision(
        Verdict::PhaseUnknown,
        format!("the data directory is empty and nothing could establish whether this member started before ({silent})"),
        "make the live cluster (ETCD_PEER_ENDPOINTS) or the Kubernetes API reachable and retry; for a deployment without an operator that is bootstrapping for the first time, pass --allow-bootstrap-without-evidence",
    )
}

fn describe_silence(i: &Inputs) -> String {
    format!(
        "live cluster: {}; kubernetes: {}",
        i.live.describe(),
        i.operator.describe()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const ME: &str = "http://m1:2380";

    type Setter = Box<dyn Fn(&mut Inputs)>;

    fn me() -> SelfFacts {
        SelfFacts {
            name: Some("m1".into()),
            peer_urls: vec![ME.into()],
            self_only_initial_cluster: false,
        }
    }

    fn seed_me() -> SelfFacts {
        SelfFacts {
            self_only_initial_cluster: true,
            ..me()
        }
    }

    fn inputs(state: DirState) -> Inputs {
        Inputs {
            dir: DirFacts {
                state: Some(state),
                ..Default::default()
            },
            me: me(),
            live: Answer::NotConfigured,
            operator: Answer::NotConfigured,
            hint_member_id: None,
            hint_cluster_id: None,
            allow_bootstrap_without_evidence: false,
        }
    }

    fn initialized(member: u64, cluster: u64) -> Inputs {
        let mut i = inputs(DirState::Initialized);
        i.dir.member_id = Some(member);
        i.dir.cluster_id = Some(cluster);
        i.dir.recorded_peer_urls = Some(vec![ME.into()]);
        i
    }

    fn live(cluster: u64, members: &[(u64, &str, &str, bool)]) -> Answer<LiveFacts> {
        Answer::Answered(LiveFacts {
            cluster_id: cluster,
            members: members
                .iter()
                .map(|&(id, name, url, started)| LiveMemberFacts {
                    id,
                    name: name.into(),
                    peer_urls: vec![url.into()],
                    started,
                })
                .collect(),
            other_cluster_ids: Vec::new(),
            majority_heard: true,
            leader_heard: true,
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
            member_id: member,
            cluster_id: cluster,
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
        i.hint_member_id = Some(1);
        i.hint_cluster_id = Some(9);
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
            Box::new(|i| i.hint_member_id = Some(2)),
            Box::new(|i| i.hint_cluster_id = Some(8)),
            Box::new(|i| i.dir.recorded_peer_urls = Some(vec!["http://m2:2380".into()])),
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
        assert_eq!(verdict(&inputs(DirState::Partial)), Verdict::RefusePartial);
        assert_eq!(verdict(&inputs(DirState::Corrupt)), Verdict::RefuseCorrupt);
        assert_eq!(verdict(&inputs(DirState::Unreadable)), Verdict::Unreadable);
        let mut running = initialized(1, 9);
        running.dir.running = true;
        assert_eq!(verdict(&running), Verdict::RefuseRunning);
    }

    #[test]
    fn running_wins_over_the_identity_checks() {
        let mut i = initialized(1, 9);
        i.dir.running = true;
        i.hint_member_id = Some(2);
        assert_eq!(verdict(&i), Verdict::RefuseRunning);
    }

    #[test]
    fn empty_member_that_started_before_is_refused_by_any_one_source() {
        let cases: Vec<Setter> = vec![
            Box::new(|i| i.operator = op(false, Some(1), None)),
            Box::new(|i| i.live = live(9, &[(1, "m1", ME, true)])),
            Box::new(|i| i.hint_member_id = Some(1)),
        ];
        for (n, set) in cases.iter().enumerate() {
            let mut i = inputs(DirState::Empty);
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
            Box::new(|i| i.hint_cluster_id = Some(9)),
            Box::new(|i| i.live = live(9, &[(2, "m2", "http://m2:2380", true)])),
            Box::new(|i| {
                i.operator = op(true, None, None);
                i.live = live(9, &[(2, "m2", "http://m2:2380", true)]);
            }),
        ];
        for (n, set) in cases.iter().enumerate() {
            let mut i = inputs(DirState::Empty);
            i.me = seed_me();
            set(&mut i);
            assert_eq!(verdict(&i), Verdict::RefuseEmptyFormed, "case {n}");
        }
    }

    #[test]
    fn empty_seed_before_formation_bootstraps_on_the_operators_word() {
        let mut i = inputs(DirState::Empty);
        i.operator = op(true, None, None);
        i.live = Answer::NoAnswer("connection refused".into());
        assert_eq!(verdict(&i), Verdict::Bootstrap);
    }

    #[test]
    fn empty_added_member_never_started_joins() {
        let mut i = inputs(DirState::Empty);
        i.live = live(9, &[(2, "m0", "http://m0:2380", true), (7, "", ME, false)]);
        assert_eq!(verdict(&i), Verdict::Join);
        i.operator = op(false, None, Some(9));
        i.hint_cluster_id = Some(9);
        assert_eq!(verdict(&i), Verdict::Join);
    }

    #[test]
    fn a_join_needs_the_leader_and_half_the_voters_heard_and_one_cluster() {
        let unstarted = live(9, &[(2, "m0", "http://m0:2380", true), (7, "", ME, false)]);
        for allow in [false, true] {
            let mut i = inputs(DirState::Empty);
            i.allow_bootstrap_without_evidence = allow;
            i.live = altered(unstarted.clone(), |l| l.majority_heard = false);
            let d = decide(&i);
            assert_eq!(d.verdict, Verdict::PhaseUnknown, "{d:?}");
            assert!(d.reason.contains("fewer than half"), "{d:?}");
            i.live = altered(unstarted.clone(), |l| l.leader_heard = false);
            let d = decide(&i);
            assert_eq!(d.verdict, Verdict::PhaseUnknown, "{d:?}");
            assert!(d.reason.contains("leader"), "{d:?}");
            i.live = altered(unstarted.clone(), |l| l.other_cluster_ids = vec![5]);
            let d = decide(&i);
            assert_eq!(d.verdict, Verdict::PhaseUnknown, "{d:?}");
            assert!(d.reason.contains("different clusters"), "{d:?}");
        }
    }

    #[test]
    fn endpoints_of_different_clusters_never_let_an_empty_seed_bootstrap() {
        // The operator records nothing yet (its word alone would bootstrap);
        // a live cluster answered, whichever: the seed must not bootstrap.
        let mut i = inputs(DirState::Empty);
        i.me = seed_me();
        i.operator = op(true, None, None);
        i.allow_bootstrap_without_evidence = true;
        i.live = altered(live(9, &[(2, "m1", "http://m1:2380", true)]), |l| {
            l.other_cluster_ids = vec![5];
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
        i.live = altered(i.live.clone(), |l| l.other_cluster_ids = vec![5]);
        let d = decide(&i);
        assert_eq!(d.verdict, Verdict::Start, "{d:?}");
        assert!(
            d.reason.contains("also reaches cluster 0000000000000005"),
            "{d:?}"
        );
        // The freshest view is the other cluster's: its member list says
        // nothing about this directory's member.
        i.live = altered(live(5, &[(3, "m1", ME, true)]), |l| {
            l.other_cluster_ids = vec![9]
        });
        assert_eq!(verdict(&i), Verdict::Start);
        // Neither cluster is the directory's.
        i.live = altered(live(5, &[(3, "m1", ME, true)]), |l| {
            l.other_cluster_ids = vec![6]
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
        let mut i = inputs(DirState::Empty);
        i.live = live(9, &[(2, "m0", "http://m0:2380", true), (7, "", ME, false)]);
        i.operator = op(false, Some(1), Some(9));
        i.hint_member_id = Some(1);
        i.hint_cluster_id = Some(9);
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
        let mut i = inputs(DirState::Empty);
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
            let mut i = inputs(DirState::Empty);
            i.live = live(9, &members);
            assert_eq!(verdict(&i), Verdict::RefuseEmptyFormed, "{members:?}");
        }
    }

    #[test]
    fn empty_member_missing_from_the_live_list_is_not_started() {
        let mut i = inputs(DirState::Empty);
        i.live = live(9, &[(2, "m0", "http://m0:2380", true)]);
        assert_eq!(verdict(&i), Verdict::PhaseUnknown);
    }

    #[test]
    fn empty_with_no_answer_fails_closed() {
        let mut i = inputs(DirState::Empty);
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
        let mut i = inputs(DirState::Empty);
        i.me = seed_me();
        i.allow_bootstrap_without_evidence = true;
        assert_eq!(verdict(&i), Verdict::Bootstrap);
        i.hint_cluster_id = Some(9);
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
                let mut i = inputs(DirState::Empty);
                i.me = me.clone();
                i.operator = Answer::NoAnswer(fault.into());
                i.live = Answer::NoAnswer("connection refused".into());
                assert_eq!(verdict(&i), Verdict::PhaseUnknown, "{fault}");
            }
        }
    }
}
