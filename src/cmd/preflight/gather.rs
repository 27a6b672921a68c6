//! Asking the sources within the budget: the directory read beside the
//! network, the live cluster, the Kubernetes API and the witnesses, the
//! version of the etcd about to start.

use std::time::{Duration, Instant};

use super::sources::{
    answered, ask_live, etcd_about_to_start, no_answer, not_configured, unanswered,
    witness_evidence, witness_file_evidence,
};
use super::{Config, EvidenceEntry};
use crate::disk::ids::{ClusterId, MemberId};
use crate::disk::layout::{self, Inspection, Options};
use crate::disk::upgrade::UpgradeCheck;
use crate::disk::wal;
use crate::error::Error;
use crate::evidence::{kube as kube_src, lease as witness_src, Source};
use crate::verdict::version::{self, ETCD_CONTAINER};
use crate::verdict::{self, Answer, Decision, DirFacts, LiveFacts, OperatorFacts, WitnessFacts};

/// The Pod read for the image is bounded on its own: a throttled or hanging
/// `get pods` must not hold the verdict for the whole budget, nor leave no
/// time for the `etcd --version` fallback.
const IMAGE_READ_BUDGET: Duration = Duration::from_secs(3);

/// The directory as read, and what the network sources said (`None`: the
/// directory decides alone, rows 1–4).
pub(super) struct Read {
    pub(super) dir: Inspection,
    pub(super) facts: DirFacts,
    pub(super) elapsed: Duration,
    pub(super) gathered: Option<Gathered>,
}

/// Reads the directory and asks the network sources at once, both within
/// `deadline`.
pub(super) fn read_and_gather(
    cfg: &Config,
    started: Instant,
    deadline: Instant,
) -> crate::error::Result<Read> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Error::internal("cannot start the tokio runtime", &e))?;
    let read_and_gathered = rt.block_on(async {
        // The directory is read on a blocking thread while the live cluster and
        // the Kubernetes API are asked: the slower of the two sets the time, not
        // their sum.
        let paths = cfg.paths.clone();
        let locks = cfg.locks;
        let mut reading = tokio::task::spawn_blocking(move || {
            // `cfg.locks`: for preflight `Probe::Ofd` — etcd of this Pod cannot
            // be running yet, and another process on the same volume shows
            // itself by its WAL locks (`Probe::Ofd` says why the db's flock,
            // which costs an RCU grace period to look up, need not be);
            // restore, which writes, asks for `Probe::Thorough`.
            let opts = Options {
                locks,
                ..Options::default()
            };
            let dir = layout::inspect(&paths, opts);
            (dir, started.elapsed())
        });
        // Whether etcd would find a WAL, and whose (one listing and the first
        // records, ahead of the full read): it tells the live probe which
        // answer may end its wait. Off the runtime and bounded like the full
        // read: on a volume that hangs this is where the wait starts.
        let read_deadline = tokio::time::Instant::from_std(deadline);
        let quick_paths = cfg.paths.clone();
        let quick = tokio::task::spawn_blocking(move || {
            layout::wal_exists(&quick_paths).then(|| wal::wal_identity(&quick_paths.wal_dir))
        });
        let wal = match tokio::time::timeout_at(read_deadline, quick).await {
            Ok(Ok(wal)) => wal,
            _ => Some(None),
        };
        let network = gather(cfg, deadline, wal);
        tokio::pin!(network);
        // The budget covers the directory too: a volume that does not answer
        // (a hung network mount) is unreadable at the deadline, not a hung
        // init container. The blocked reader thread is left behind
        // (`shutdown_background` below) and ends with the process.
        let (read, early) = tokio::select! {
            read = tokio::time::timeout_at(read_deadline, &mut reading) => (read.ok(), None),
            gathered = &mut network => (
                tokio::time::timeout_at(read_deadline, &mut reading).await.ok(),
                Some(gathered),
            ),
        };
        let (dir, dir_elapsed) = match read {
            Some(Ok(read)) => read,
            // Re-raised once the runtime is shut down (below): unwinding
            // through block_on would drop it and wait for blocked threads.
            Some(Err(e)) => return Err(e),
            None => (
                layout::unanswered(&cfg.paths, started.elapsed()),
                started.elapsed(),
            ),
        };
        // The network only matters when the directory does not decide on its own.
        let facts = DirFacts::of(&dir, None);
        let gathered = match (verdict::needs_network(&facts), early) {
            (false, _) => None,
            (true, Some(g)) => Some(g),
            (true, None) => Some(network.await),
        };
        Ok((dir, facts, dir_elapsed, gathered))
    });
    // A host-name lookup stuck in getaddrinfo (a DNS server that never answers)
    // runs on a blocking thread no timeout can cancel; dropping the runtime
    // would wait for it, past the budget.
    rt.shutdown_background();
    let (dir, facts, elapsed, gathered) = match read_and_gathered {
        Ok(done) => done,
        Err(join_error) => std::panic::resume_unwind(join_error.into_panic()),
    };
    Ok(Read {
        dir,
        facts,
        elapsed,
        gathered,
    })
}

/// The upgrade check, for an initialized directory nothing else refuses yet,
/// and a warning when the sources of the version disagree.
pub(super) fn upgrade_check(
    cfg: &Config,
    dir: &Inspection,
    facts: &DirFacts,
    deadline: Instant,
    image: Option<&Result<Option<String>, String>>,
) -> (Option<UpgradeCheck>, Option<String>) {
    if !(facts.initialized() && verdict::needs_network(facts)) {
        return (None, None);
    }
    let budget = deadline.saturating_duration_since(Instant::now());
    match etcd_about_to_start(cfg, budget, image) {
        Ok(about) => {
            let (check, warning) = version::check(dir, &about, &cfg.etcd_flags);
            tracing::info!(target = %check.target, from = ?check.from, blocked = check.blocked, findings = check.findings.len(), "upgrade check");
            (Some(check), warning)
        }
        Err(why) => {
            tracing::info!(why = %why, "the etcd version about to start is unknown (set ETCD_VERSION): no upgrade check");
            (None, None)
        }
    }
}

/// The first pause between two rounds of [`ask_leader_again`]; it doubles up
/// to [`ROUND_PAUSE_MAX`].
const ROUND_PAUSE_MIN: Duration = Duration::from_millis(200);
/// The longest pause between two rounds of [`ask_leader_again`].
const ROUND_PAUSE_MAX: Duration = Duration::from_secs(2);
/// The longest one round of [`ask_leader_again`] waits for the peers. A round
/// ends as soon as the leader and a majority answered, or every endpoint did
/// (during an election they all answer, without a leader); a peer that does
/// not answer at all holds it until this bound, and the next round asks again.
/// Longer than an election (etcd's default election timeout is 1 s).
pub(super) const ROUND_BUDGET: Duration = Duration::from_secs(3);

/// Rounds asked after the leader and a majority first answered, for the
/// others to reach the commit index that answer held them to (rows 5d, 6i).
const ROUNDS_AFTER_LEADER: u32 = 3;

/// A directory behind what this member reached may start only on the word of
/// its cluster's leader and a majority (row 5d). The live wait ends at the
/// first answer that lists this member started and, within
/// [`ROUND_BUDGET`] after it, the leader and a majority, which may not have
/// answered by then: for rows 6e, 6f and 6i, ask again, round after round (each bounded
/// by [`ROUND_BUDGET`], a pause of [`ROUND_PAUSE_MIN`] doubling to
/// [`ROUND_PAUSE_MAX`] between them), until the leader and a majority of the
/// directory's cluster answered or `deadline` passes: a round during an
/// election (a member restarted) or before a majority is back says nothing
/// the next one would not say better. Once they answered, the leader's commit
/// index of that first answer is the bar the others are held to in the next
/// rounds (`LiveFacts::commit_bar`): under a steady write load the others
/// trail the leader's current commit by a moment, never one read earlier.
/// Up to [`ROUNDS_AFTER_LEADER`] such rounds, until `behind` no longer holds.
/// `None`: no need to ask.
pub(super) fn ask_leader_again(
    cfg: &Config,
    dir: &Inspection,
    decided: &Decision,
    live: &Answer<LiveFacts>,
    deadline: Instant,
    behind: impl Fn(&Answer<LiveFacts>) -> bool,
) -> crate::error::Result<Option<(Answer<LiveFacts>, EvidenceEntry)>> {
    let refused_behind = decided.row.waits_for_the_leader();
    let cluster = dir.cluster_id();
    let authoritative = |live: &Answer<LiveFacts>| matches!(live, Answer::Answered(l) if l.leader_heard && l.majority_heard && Some(l.cluster_id) == cluster);
    if !refused_behind || cfg.etcd.is_none() {
        return Ok(None);
    }
    // The bar: the leader's commit in the first answer of the leader and a
    // majority of the directory's cluster.
    let leader_commit = |live: &Answer<LiveFacts>| match live {
        Answer::Answered(l) if authoritative(live) => l.leader_raft_index,
        _ => None,
    };
    let mut bar = leader_commit(live);
    let mut after_leader = u32::from(bar.is_some());
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Error::internal("cannot start the tokio runtime", &e))?;
    let ids = dir.member_id().zip(dir.cluster_id());
    let deadline = tokio::time::Instant::from_std(deadline);
    let again = rt.block_on(async {
        let mut pause = ROUND_PAUSE_MIN;
        let mut round = 1u32;
        loop {
            let round_deadline = deadline.min(tokio::time::Instant::now() + ROUND_BUDGET);
            let (mut answer, entry) = ask_live(cfg, round_deadline, Some(ids), true).await;
            if let Answer::Answered(l) = &mut answer {
                l.commit_bar = bar;
            }
            if authoritative(&answer) {
                bar = bar.or(leader_commit(&answer));
                after_leader += 1;
            }
            let done = !behind(&answer) || after_leader > ROUNDS_AFTER_LEADER;
            match &answer {
                Answer::Answered(l) => tracing::debug!(
                    round,
                    cluster_id = %l.cluster_id,
                    leader_heard = l.leader_heard,
                    majority_heard = l.majority_heard,
                    leader_commit = l.leader_raft_index,
                    commit_bar = l.commit_bar,
                    done,
                    "asked the directory's cluster again for its leader and a majority"
                ),
                Answer::NoAnswer(why) => tracing::debug!(
                    round,
                    why = %why,
                    "asked the directory's cluster again for its leader and a majority: no answer"
                ),
                Answer::NotConfigured => {}
            }
            let next = tokio::time::Instant::now() + pause;
            if done || next >= deadline {
                return (answer, entry);
            }
            tokio::time::sleep_until(next).await;
            pause = (pause * 2).min(ROUND_PAUSE_MAX);
            round += 1;
        }
    });
    rt.shutdown_background();
    Ok(Some(again))
}

/// What the network sources said, and their report entries.
pub(super) struct Gathered {
    pub(super) live: Answer<LiveFacts>,
    pub(super) operator: Answer<OperatorFacts>,
    pub(super) witness: Answer<Option<WitnessFacts>>,
    /// The witness file (`Err`: why it was not used).
    pub(super) witness_file: Result<Option<WitnessFacts>, String>,
    pub(super) live_entry: EvidenceEntry,
    pub(super) kube_entry: EvidenceEntry,
    pub(super) witness_entry: EvidenceEntry,
    pub(super) witness_file_entry: Option<EvidenceEntry>,
    /// The image of this Pod's etcd container (`None`: `--kube` is off, or the
    /// directory has no WAL).
    pub(super) etcd_image: Option<Result<Option<String>, String>>,
}

impl Gathered {
    /// No source asked: the directory decides on its own.
    pub(super) fn unused() -> Gathered {
        let unused = |source| EvidenceEntry {
            source,
            answered: false,
            error: Some("not used: the directory decides on its own".into()),
            said: serde_json::Value::Null,
            elapsed_ms: 0,
        };
        Gathered {
            live: Answer::NotConfigured,
            operator: Answer::NotConfigured,
            witness: Answer::NotConfigured,
            witness_file: Ok(None),
            live_entry: unused(Source::Etcd),
            kube_entry: unused(Source::Kube),
            witness_entry: unused(Source::Witness),
            witness_file_entry: None,
            etcd_image: None,
        }
    }
}

/// `wal`: `None` without a WAL; `Some(ids)` with one, `ids` being its member
/// and cluster ID when its first records could be read.
async fn gather(
    cfg: &Config,
    deadline: Instant,
    wal: Option<Option<(MemberId, ClusterId)>>,
) -> Gathered {
    let deadline = tokio::time::Instant::from_std(deadline);
    let live = ask_live(cfg, deadline, wal, false);
    let operator = async {
        let t = Instant::now();
        let Some(target) = &cfg.kube else {
            let off = "--kube is off (no service-account token mounted)";
            return (
                (Answer::NotConfigured, not_configured(Source::Kube, off)),
                (Answer::NotConfigured, not_configured(Source::Witness, off)),
                None,
            );
        };
        let timeout = deadline.saturating_duration_since(tokio::time::Instant::now());
        // The records, the witness Lease and this Pod's etcd image are asked at
        // once, through one client; the image only for a directory with a WAL
        // (the upgrade check's, which an empty directory never gets).
        let (result, witness, image) = match kube_src::client(target, timeout).await {
            Ok(client) => {
                let (records, lease, image) = tokio::join!(
                    kube_src::fetch(&client, target, deadline),
                    async {
                        let t = Instant::now();
                        let read = witness_src::read(
                            &client,
                            &target.namespace,
                            &target.member_name,
                            deadline,
                        )
                        .await;
                        witness_evidence(read, &target.namespace, t)
                    },
                    async {
                        match wal {
                            None => None,
                            Some(_) => Some(
                                crate::evidence::pod::container_image(
                                    &client,
                                    &target.namespace,
                                    &target.member_name,
                                    ETCD_CONTAINER,
                                    deadline.min(tokio::time::Instant::now() + IMAGE_READ_BUDGET),
                                )
                                .await,
                            ),
                        }
                    }
                );
                let image = image.map(|read| read.map_err(|e| e.to_string()));
                if let Some(Err(e)) = &image {
                    tracing::info!(error = %e, "this Pod's etcd image could not be read");
                }
                (records, lease, image)
            }
            Err(e) => {
                let why = e.to_string();
                let witness = (
                    Answer::NoAnswer(why.clone()),
                    no_answer(Source::Witness, why.clone(), t),
                );
                (Err(e), witness, Some(Err(why)))
            }
        };
        let records = match result {
            Ok(rec) => {
                let facts = OperatorFacts {
                    bootstrap: rec.member.bootstrap,
                    member_id: rec.member.member_id,
                    cluster_id: rec.cluster.cluster_id,
                    pod_uid: rec.member.pod_uid.clone(),
                    cluster_token: rec
                        .cluster
                        .cluster_token
                        .clone()
                        .or_else(|| rec.member.cluster_token.clone()),
                    cluster_uid: rec.cluster.uid.clone(),
                };
                answered(
                    Source::Kube,
                    facts,
                    serde_json::to_value(&rec).unwrap_or_default(),
                    t,
                )
            }
            Err(e) => unanswered(Source::Kube, &e, t),
        };
        (records, witness, image)
    };
    let file = async {
        let path = cfg.witness_file.clone()?;
        let t = Instant::now();
        // Off the runtime and bounded: the file lives on another volume, which
        // may hang like any other.
        let reading = tokio::task::spawn_blocking({
            let path = path.clone();
            move || crate::evidence::mark::read_file(&path).map_err(|e| e.to_string())
        });
        let read = match tokio::time::timeout_at(deadline, reading).await {
            Ok(Ok(read)) => read,
            Ok(Err(join)) => Err(format!("reading {} failed: {join}", path.display())),
            Err(_) => Err(format!(
                "reading {} did not finish before the deadline",
                path.display()
            )),
        };
        Some(witness_file_evidence(&path, read, t))
    };
    let ((live, live_entry), ((operator, kube_entry), (witness, witness_entry), etcd_image), file) =
        tokio::join!(live, operator, file);
    let (witness_file, witness_file_entry) = match file {
        None => (Ok(None), None),
        Some((facts, entry, None)) => (Ok(facts), Some(entry)),
        Some((_, entry, Some(why))) => (Err(why), Some(entry)),
    };
    Gathered {
        live,
        operator,
        witness,
        witness_file,
        live_entry,
        kube_entry,
        witness_entry,
        witness_file_entry,
        etcd_image,
    }
}

/// Each witness Lease's name and the revision it recorded (`Err`: why it could
/// not be read).
pub type LeaseRevisions = Vec<(String, Result<Option<i64>, String>)>;

/// The revision each member's witness Lease recorded, for `restore
/// --bump-revision auto` (the same bump on every member needs the highest of
/// them all, not this member's alone): `Ok(None)` for a member without a
/// Lease or one that recorded no revision, `Err` for a Lease that could not be
/// read. `Err` as a whole when `--kube` is off or no client could be made.
pub fn witness_revisions(cfg: &Config, members: &[String]) -> Result<LeaseRevisions, String> {
    let Some(target) = &cfg.kube else {
        return Err("--kube is off (no service-account token mounted)".to_owned());
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the tokio runtime: {e}"))?;
    let deadline = tokio::time::Instant::now() + cfg.timeout;
    let read = rt.block_on(async {
        let client = kube_src::client(target, cfg.timeout)
            .await
            .map_err(|e| e.to_string())?;
        let reads = members.iter().map(|m| {
            let client = client.clone();
            async move {
                let r = witness_src::read(&client, &target.namespace, m, deadline).await;
                let r = r
                    .map(|found| found.and_then(|w| w.revision))
                    .map_err(|e| e.to_string());
                (witness_src::lease_name(m), r)
            }
        });
        Ok::<_, String>(futures::future::join_all(reads).await)
    });
    rt.shutdown_background();
    read
}

/// The longest the keyspace comparison may take: the members' answers, then
/// the directory's own read. Past it, no comparison (no sign).
const KEYSPACE_BUDGET: Duration = Duration::from_secs(10);

/// How many of the newest live keys are compared where the hash cannot be.
const NEWEST_KEYS: usize = 16;

/// The keyspace comparison of row 6h at `revision`: every endpoint's
/// `HashKV` and newest live keys there, against the directory's own hash
/// with each answer's compaction revision and its own newest keys
/// ([`crate::disk::bbolt::Db::keyspace_at`], one read of the `key` bucket),
/// within [`KEYSPACE_BUDGET`] and `deadline`. For each member of the
/// directory's cluster: the hashes when the directory's can be known,
/// else the newest keys' digests (a directory compacted past the member's
/// compaction, as periodic compaction leaves a copy taken later). Returns
/// the comparisons by member, and what was asked and answered for the
/// report.
pub(super) fn compare_keyspaces(
    cfg: &Config,
    dir: &Inspection,
    revision: i64,
    deadline: Instant,
) -> crate::error::Result<(Vec<(MemberId, verdict::KvHashCheck)>, serde_json::Value)> {
    use crate::disk::bbolt::{newest_digests, unchanged_digests, Db, HashAt};
    let (Some(conn), Some(cluster)) = (&cfg.etcd, dir.cluster_id()) else {
        return Ok((Vec::new(), serde_json::Value::Null));
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Error::internal("cannot start the tokio runtime", &e))?;
    // A member hashing a large backend takes a moment; a hung one must not
    // hold the verdict for the rest of the budget.
    let deadline = deadline.min(Instant::now() + KEYSPACE_BUDGET);
    let tokio_deadline = tokio::time::Instant::from_std(deadline);
    let own_compact = dir.backend().and_then(|b| b.compact_revision);
    let db_path = cfg.paths.db();
    let (answers, ours) = rt.block_on(async {
        let answers =
            crate::evidence::etcd::keyspace(conn, revision, NEWEST_KEYS, tokio_deadline).await;
        let mut compactions: Vec<i64> = answers
            .iter()
            .filter(|a| a.cluster_id == Some(cluster))
            .filter_map(|a| a.answer.as_ref().ok().map(|(_, c)| *c))
            .collect();
        compactions.sort_unstable();
        compactions.dedup();
        // Off the runtime and bounded: the db may be large or its volume
        // slow. The read itself stops at the deadline (no scan is left
        // running behind a verdict). One more key than compared: the
        // directory may hold a restore's placeholder, which no Range returns.
        let reading = tokio::task::spawn_blocking(move || {
            Db::open(&db_path)
                .and_then(|db| {
                    db.keyspace_at_until(
                        revision,
                        &compactions,
                        own_compact,
                        NEWEST_KEYS + 1,
                        Some(deadline),
                    )
                })
                .map_err(|e| e.to_string())
        });
        let ours = match tokio::time::timeout_at(tokio_deadline, reading).await {
            Ok(Ok(ours)) => ours,
            Ok(Err(join)) => Err(format!("reading the backend failed: {join}")),
            Err(_) => Err("reading the backend did not finish in time".to_owned()),
        };
        (answers, ours)
    });
    let mut checks = Vec::new();
    if let Ok(ours) = &ours {
        for a in answers.iter().filter(|a| a.cluster_id == Some(cluster)) {
            let Some(member) = a.member_id else {
                continue;
            };
            let by_hash = a.answer.as_ref().ok().and_then(|(theirs, c)| {
                ours.hashes.iter().find_map(|(cc, h)| match h {
                    HashAt::Hash(h) if cc == c => Some((*theirs, *h)),
                    _ => None,
                })
            });
            let check = match by_hash {
                Some((theirs, mine)) => Some(verdict::KvHashCheck {
                    revision,
                    theirs,
                    ours: mine,
                    by: verdict::KeyspaceProbe::HashKv,
                }),
                None => match (&ours.newest, &a.newest) {
                    (Some(mine), Ok(theirs)) => {
                        newest_digests(mine, theirs, NEWEST_KEYS).map(|(theirs, mine)| {
                            verdict::KvHashCheck {
                                revision,
                                theirs,
                                ours: mine,
                                by: verdict::KeyspaceProbe::NewestKeys(NEWEST_KEYS),
                            }
                        })
                    }
                    _ => None,
                },
            };
            checks.extend(check.map(|c| (member, c)));
        }
    }
    // Where neither could be compared (the directory compacted past the
    // revision, as a copy taken after a compaction is): the keys it holds
    // unchanged since, read from every member at the revision.
    let unchanged: Vec<crate::disk::bbolt::LiveKv> = match &ours {
        Ok(o) => o
            .unchanged
            .iter()
            .flatten()
            .filter(|kv| !kv.key.is_empty())
            .take(NEWEST_KEYS)
            .cloned()
            .collect(),
        Err(_) => Vec::new(),
    };
    let unchecked = answers.iter().any(|a| {
        a.cluster_id == Some(cluster) && !checks.iter().any(|(m, _)| Some(*m) == a.member_id)
    });
    let mut read = Vec::new();
    if unchecked && !unchanged.is_empty() {
        let keys: Vec<Vec<u8>> = unchanged.iter().map(|kv| kv.key.clone()).collect();
        read = rt.block_on(crate::evidence::etcd::read_keys(
            conn,
            &keys,
            revision,
            tokio_deadline,
        ));
        for a in read.iter().filter(|a| a.cluster_id == Some(cluster)) {
            let (Some(member), Ok(theirs)) = (a.member_id, &a.kvs) else {
                continue;
            };
            if checks.iter().any(|(m, _)| *m == member) {
                continue;
            }
            if let Some((theirs, mine)) = unchanged_digests(&unchanged, theirs) {
                checks.push((
                    member,
                    verdict::KvHashCheck {
                        revision,
                        theirs,
                        ours: mine,
                        by: verdict::KeyspaceProbe::UnchangedKeys(unchanged.len()),
                    },
                ));
            }
        }
    }
    rt.shutdown_background();
    tracing::info!(
        revision,
        compared = checks.len(),
        differ = checks.iter().filter(|(_, c)| c.theirs != c.ours).count(),
        "compared the directory's keyspace with the members' (HashKV, newest keys)"
    );
    let directory = match &ours {
        Ok(o) => serde_json::json!({
            "hashes": o.hashes.iter().map(|(c, h)| match h {
                HashAt::Hash(h) => serde_json::json!({"compact_revision": c, "hash": h}),
                HashAt::Unknown(why) => serde_json::json!({"compact_revision": c, "unknown": format!("{why:?}")}),
            }).collect::<Vec<_>>(),
            "newest_keys": o.newest.as_ref().map(|l| l.iter().filter(|kv| !kv.key.is_empty()).take(NEWEST_KEYS).map(|kv| serde_json::json!({"key": String::from_utf8_lossy(&kv.key), "mod_revision": kv.mod_revision})).collect::<Vec<_>>()),
        }),
        Err(why) => serde_json::json!({ "error": why }),
    };
    let said = serde_json::json!({
        "revision": revision,
        "members": answers.iter().map(|a| serde_json::json!({
            "endpoint": a.endpoint,
            "member_id": a.member_id.map(|m| m.to_string()),
            "cluster_id": a.cluster_id.map(|c| c.to_string()),
            "hash_kv": match &a.answer {
                Ok((h, c)) => serde_json::json!({"hash": h, "compact_revision": c}),
                Err(why) => serde_json::json!({"error": why}),
            },
            "newest_keys": match &a.newest {
                Ok(l) => serde_json::json!(l.iter().map(|kv| serde_json::json!({"key": String::from_utf8_lossy(&kv.key), "mod_revision": kv.mod_revision})).collect::<Vec<_>>()),
                Err(why) => serde_json::json!({"error": why}),
            },
        })).collect::<Vec<_>>(),
        "directory": directory,
        "unchanged_keys": unchanged.iter().map(|kv| serde_json::json!({"key": String::from_utf8_lossy(&kv.key), "mod_revision": kv.mod_revision})).collect::<Vec<_>>(),
        "unchanged_keys_read": read.iter().map(|a| match &a.kvs {
            Ok(kvs) => serde_json::json!({"endpoint": a.endpoint, "member_id": a.member_id.map(|m| m.to_string()), "found": kvs.iter().filter(|kv| kv.is_some()).count()}),
            Err(why) => serde_json::json!({"endpoint": a.endpoint, "error": why}),
        }).collect::<Vec<_>>(),
        "compared": checks.iter().map(|(m, c)| serde_json::json!({
            "member_id": m.to_string(),
            "by": match c.by {
                verdict::KeyspaceProbe::HashKv => "hash_kv".to_owned(),
                verdict::KeyspaceProbe::NewestKeys(n) => format!("newest_keys({n})"),
                verdict::KeyspaceProbe::UnchangedKeys(n) => format!("unchanged_keys({n})"),
            },
            "theirs": c.theirs,
            "ours": c.ours,
        })).collect::<Vec<_>>(),
    });
    Ok((checks, said))
}
