//! Asking each source: the live cluster, the witness Lease and file, the
//! version of the etcd about to start; and each source's report entry.

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::json;

use super::{Config, EvidenceEntry};
use crate::disk::ids::{self, ClusterId, MemberId};
use crate::disk::upgrade::Target;
use crate::evidence::{etcd as live_src, lease as witness_src, Source};
use crate::verdict::version::{self, AboutToStart};
use crate::verdict::{self, Answer, LiveFacts, LiveMemberFacts, WitnessFacts};

/// Where preflight looks for the etcd about to start when no version is given:
/// the etcd image's binary only. `PATH` is not searched: an `etcd` there may be
/// another line than the one the etcd container runs (a distribution's package),
/// and a wrong version would refuse a healthy member.
const ETCD_BINARIES: [&str; 1] = ["/usr/local/bin/etcd"];
/// Bound on `etcd --version`.
const ETCD_VERSION_TIMEOUT: Duration = Duration::from_secs(3);

/// The etcd about to start: what the image or `--etcd-version` say (the
/// policy is `verdict::version::about_to_start`), else what `etcd --version`
/// prints ("etcd Version: 3.6.11") for the first binary of [`ETCD_BINARIES`]
/// that answers within [`ETCD_VERSION_TIMEOUT`]. `Err` (why) when none says.
/// `image`: the Pod's read (`None`: not asked; `Ok(None)`: no such container).
pub(super) fn etcd_about_to_start(
    cfg: &Config,
    budget: Duration,
    image: Option<&Result<Option<String>, String>>,
) -> Result<AboutToStart, String> {
    if cfg.etcd_version.is_none() && !cfg.probe_etcd_version {
        return Err("not asked".into());
    }
    let image = match image {
        Some(Ok(Some(img))) => crate::evidence::pod::image_tag(img).map(|tag| (img.as_str(), tag)),
        _ => None,
    };
    if let Some(about) = version::about_to_start(image, cfg.etcd_version) {
        return Ok(about);
    }
    let mut tried = Vec::new();
    for bin in ETCD_BINARIES {
        if !Path::new(bin).is_file() {
            tried.push(format!("{bin}: absent"));
            continue;
        }
        let ran = crate::child::run(
            std::process::Command::new(bin).arg("--version"),
            ETCD_VERSION_TIMEOUT.min(budget),
        );
        match ran {
            Ok(r) => {
                let out = String::from_utf8_lossy(&r.stdout);
                let v = out
                    .lines()
                    .find_map(|l| l.trim().strip_prefix("etcd Version:"))
                    .and_then(Target::parse);
                match v {
                    Some(t) => {
                        return Ok(AboutToStart {
                            target: t,
                            from: bin.to_string(),
                            warning: None,
                            disagreeing: None,
                        })
                    }
                    None => tried.push(format!("{bin}: no \"etcd Version:\" line")),
                }
            }
            Err(e) => tried.push(format!("{bin}: {e}")),
        }
    }
    Err(tried.join("; "))
}

/// Asks the live cluster. `wait_for_leader`: no answer ends the wait early;
/// it lasts until the leader and a majority of the directory's cluster (or
/// every endpoint) answered, or the deadline — what a directory behind its
/// mark needs (rows 5d, 6e, 6f), where the first answer that lists the member
/// is not enough.
pub(super) async fn ask_live(
    cfg: &Config,
    deadline: tokio::time::Instant,
    wal: Option<Option<(MemberId, ClusterId)>>,
    wait_for_leader: bool,
) -> (Answer<LiveFacts>, EvidenceEntry) {
    let t = Instant::now();
    let Some(conn) = &cfg.etcd else {
        return (
            Answer::NotConfigured,
            not_configured(Source::Etcd, "ETCD_PEER_ENDPOINTS is not set"),
        );
    };
    // One answer that shows this member started settles the question
    // (`verdict::settles`): the full list is not needed.
    let settles = |view: &live_src::LiveCluster| {
        let mut answer = live_facts(view);
        answer.leader_heard = view.leader == Some(view.responder_member_id);
        verdict::settles(&cfg.me, wal, &answer)
    };
    let own_cluster = match wal {
        Some(Some((_, cluster))) => Some(cluster),
        _ => None,
    };
    let settled = |view: &live_src::LiveCluster| !wait_for_leader && settles(view);
    // An initialized directory: the leader's answer and a majority's can
    // show another history under the same IDs (row 6h) even when the first
    // answer lists this member started; listen for them a moment longer.
    let grace = own_cluster.map(|_| super::gather::ROUND_BUDGET);
    match live_src::probe_settling(conn, deadline, own_cluster, settled, grace).await {
        Ok(l) => {
            let facts = live_facts(&l);
            answered(
                Source::Etcd,
                facts,
                serde_json::to_value(&l).unwrap_or_default(),
                t,
            )
        }
        Err(e) => unanswered(Source::Etcd, &e, t),
    }
}

/// What the decision reads of the live cluster's answer.
fn live_facts(l: &live_src::LiveCluster) -> LiveFacts {
    LiveFacts {
        cluster_id: l.cluster_id,
        members: l
            .members
            .iter()
            .map(|m| LiveMemberFacts {
                id: m.member.id,
                name: m.member.name.clone(),
                peer_urls: m
                    .member
                    .peer_urls
                    .iter()
                    .map(|u| ids::normalize_url(u).unwrap_or_else(|_| u.clone()))
                    .collect(),
                started: m.started,
                is_learner: m.member.is_learner,
            })
            .collect(),
        other_cluster_ids: l.other_cluster_ids.clone(),
        majority_heard: l.majority_heard,
        leader_heard: l.leader_heard,
        raft_term: l.raft_term,
        leader_raft_index: l.leader_raft_index,
        commit_bar: None,
        positions: l
            .positions
            .iter()
            .map(|p| verdict::LivePosition {
                member_id: p.member_id,
                raft_index: p.raft_index,
                applied_index: p.applied_index,
                applied_term: p.raft_term,
                revision: p.revision,
                leader: p.leader,
                kv_hash: None,
                kv_unanswered: false,
            })
            .collect(),
    }
}

/// The witness Lease's read as evidence: a 404 is an answer (no witness).
pub(super) fn witness_evidence(
    read: Result<
        Option<witness_src::WitnessRecord>,
        crate::evidence::client::ApiError<witness_src::LeaseKind>,
    >,
    namespace: &str,
    since: Instant,
) -> (Answer<Option<WitnessFacts>>, EvidenceEntry) {
    match read {
        Ok(rec) => {
            let facts = rec.as_ref().map(|r| WitnessFacts {
                name: format!("the witness Lease {}", r.name),
                clear: format!("kubectl -n {namespace} delete lease {}", r.name),
                member_id: r.member_id,
                cluster_id: r.cluster_id,
                raft_index: r.raft_index,
                raft_term: r.raft_term,
                revision: r.revision,
                durable: r.format.is_some_and(|f| f >= crate::evidence::mark::FORMAT),
                incarnation: r.incarnation.clone(),
                pod_uid: r.pod_uid.clone(),
            });
            for problem in rec.iter().flat_map(|r| &r.problems) {
                tracing::warn!(problem = %problem, "the witness Lease exists but is garbled");
            }
            answered(
                Source::Witness,
                facts,
                match &rec {
                    Some(r) => json!({"exists": true, "lease": r}),
                    None => json!({"exists": false}),
                },
                since,
            )
        }
        Err(e) => unanswered(Source::Witness, &e, since),
    }
}

/// The witness file as evidence: a file that is absent says nothing; one that
/// cannot be read or parsed is a warning, never a refusal (it is this Pod's or
/// this host's own bookkeeping).
pub(super) fn witness_file_evidence(
    path: &Path,
    read: Result<Option<crate::evidence::mark::FileMark>, String>,
    since: Instant,
) -> (Option<WitnessFacts>, EvidenceEntry, Option<String>) {
    match read {
        Ok(found) => {
            let facts = found.as_ref().map(|f| WitnessFacts {
                name: format!("the witness file {}", path.display()),
                clear: format!("rm {}", path.display()),
                member_id: Some(f.mark.member_id),
                cluster_id: Some(f.mark.cluster_id),
                raft_index: Some(f.mark.position.raft_index),
                raft_term: Some(f.mark.position.raft_term),
                revision: f.mark.position.revision,
                durable: f.mark.durable,
                incarnation: f.mark.incarnation.clone(),
                pod_uid: None,
            });
            let said = match &found {
                Some(f) => json!({
                    "exists": true,
                    "path": path,
                    "member_id": f.mark.member_id.to_string(),
                    "cluster_id": f.mark.cluster_id.to_string(),
                    "position": f.mark.position,
                    "incarnation": f.mark.incarnation,
                    "durable": f.mark.durable,
                    "regressed_to": f.regressed_to,
                }),
                None => json!({"exists": false, "path": path}),
            };
            let (_, entry) = answered(Source::WitnessFile, (), said, since);
            (facts, entry, None)
        }
        Err(why) => {
            let warning = format!("{why}: the witness file was not used");
            let entry = no_answer(Source::WitnessFile, why, since);
            (None, entry, Some(warning))
        }
    }
}

/// A source's answer: the facts the decision reads, and what it said for the report.
pub(super) fn answered<T>(
    source: Source,
    facts: T,
    said: serde_json::Value,
    since: Instant,
) -> (Answer<T>, EvidenceEntry) {
    let entry = EvidenceEntry {
        source,
        answered: true,
        error: None,
        said,
        elapsed_ms: since.elapsed().as_millis() as u64,
    };
    (Answer::Answered(facts), entry)
}

/// A source that did not answer, and why.
pub(super) fn unanswered<T>(
    source: Source,
    e: &impl std::fmt::Display,
    since: Instant,
) -> (Answer<T>, EvidenceEntry) {
    let why = e.to_string();
    (Answer::NoAnswer(why.clone()), no_answer(source, why, since))
}

pub(super) fn not_configured(source: Source, why: &str) -> EvidenceEntry {
    EvidenceEntry {
        source,
        answered: false,
        error: Some(format!("not configured: {why}")),
        said: serde_json::Value::Null,
        elapsed_ms: 0,
    }
}

pub(super) fn no_answer(source: Source, why: String, since: Instant) -> EvidenceEntry {
    EvidenceEntry {
        source,
        answered: false,
        error: Some(why),
        said: serde_json::Value::Null,
        elapsed_ms: since.elapsed().as_millis() as u64,
    }
}
