//! The live cluster as its members see it: a *serializable* `MemberList` and a
//! `Status` from each of the given endpoints, merged.
//!
//! Shaped by three facts about where this runs:
//!
//! * a peer may be black-holed (a Service with no ready endpoints behind a load
//!   balancer, a node gone silent): TCP connects and nothing ever answers. Every
//!   step — connect, authenticate, each RPC — is bounded by the caller's deadline
//!   with `tokio::time::timeout_at`, not only by the client's own timeouts;
//! * a member without quorum must still be heard: the question is "does this
//!   member appear, and has it started", which the member answers from its local
//!   membership. etcd-client 0.21 sends `MemberListRequest { linearizable: false }`
//!   (hard-coded; etcd 3.4 ignores the field and answers locally anyway), so no
//!   leader is needed. Go's clientv3 3.5 sends `linearizable: true`, which fails
//!   without a leader;
//! * the endpoints are tried concurrently, each with its own client, so that the
//!   answer names the endpoint that gave it and one dead peer cannot spend the
//!   budget of the others;
//! * a serializable answer can be stale: a lagging or partitioned member may not
//!   have applied the entry in which another member published its name, and
//!   would list a member that has started as never started — the `join` that
//!   lets a wiped member rejoin with an empty log. So one answer is not enough:
//!   [`probe`] listens until a majority of the voting members has answered (or
//!   every endpoint has, or the deadline passes), and a member any of them saw
//!   started has started. [`probe_until`] also stops at an answer that settles
//!   the caller's question (preflight: "this member has started");
//!   [`probe_settling`] listens on after it, for a bounded grace, until the
//!   leader and a majority answered.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use etcd_client::{
    Certificate, Client, ConnectOptions, GetOptions, Identity, SortOrder, SortTarget, TlsOptions,
};
use serde::Serialize;
use tokio::task::JoinSet;
use tokio::time::{timeout_at, Instant};

use super::remaining;
use crate::disk::bbolt::LiveKv;
use crate::disk::ids::{ClusterId, MemberId};
use crate::disk::member::Member;

/// How to reach the live cluster: the `--endpoints`/`--peer-endpoints` URLs and the
/// same TLS and auth flags as etcdctl.
#[derive(Clone, Default)]
pub struct EtcdConn {
    /// Client URLs, tried concurrently. An endpoint without a scheme is `https://`
    /// when a CA or client certificate is given, `http://` otherwise.
    pub endpoints: Vec<String>,
    /// CA bundle (PEM) that signed the servers' certificates.
    pub ca: Option<PathBuf>,
    /// Client certificate (PEM), for clusters started with `--client-cert-auth`.
    pub cert: Option<PathBuf>,
    /// Key (PEM) of the client certificate.
    pub key: Option<PathBuf>,
    /// etcd user, when the cluster has auth enabled.
    pub user: Option<String>,
    /// Password of `user`.
    pub password: Option<String>,
}

impl std::fmt::Debug for EtcdConn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdConn")
            .field("endpoints", &self.endpoints)
            .field("ca", &self.ca)
            .field("cert", &self.cert)
            .field("key", &self.key)
            .field("user", &self.user)
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

/// One entry of the member list: the member as etcd stores it, and whether it
/// has started.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LiveMember {
    /// The member (its name and client URLs are empty until it has started).
    #[serde(flatten)]
    pub member: Member,
    /// The member has started at least once: it published its name and client
    /// URLs. An added-but-never-started member has neither.
    pub started: bool,
}

impl LiveMember {
    /// Builds an entry, deriving `started` the way etcd's own tooling does.
    pub fn new(
        id: MemberId,
        name: String,
        peer_urls: Vec<String>,
        client_urls: Vec<String>,
        is_learner: bool,
    ) -> Self {
        let started = !name.is_empty() && !client_urls.is_empty();
        LiveMember {
            member: Member {
                id,
                name,
                peer_urls,
                client_urls,
                is_learner,
            },
            started,
        }
    }
}

/// What one member of the live cluster said about the cluster.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LiveCluster {
    /// The endpoint that answered, as given.
    pub endpoint: String,
    /// Cluster ID from the response header.
    pub cluster_id: ClusterId,
    /// The membership as the responder knows it.
    pub members: Vec<LiveMember>,
    /// The leader the responder knows of; `None` when it has none or `Status`
    /// did not answer.
    pub leader: Option<MemberId>,
    /// Responder's raft term (`Status`); `None` when `Status` did not answer.
    pub raft_term: Option<u64>,
    /// Responder's raft index (`Status`); `None` when `Status` did not answer.
    pub raft_index: Option<u64>,
    /// Responder's applied index (`Status`, etcd 3.5+; 0 from 3.4); `None` when
    /// `Status` did not answer. A serializable `MemberList` shows the applied
    /// state, so this is what orders views by freshness.
    pub raft_applied_index: Option<u64>,
    /// Member ID of the responder, from the response header.
    pub responder_member_id: MemberId,
    /// Every endpoint that answered, in the order of their answers. The view
    /// above is the freshest of theirs (highest applied index), with `started`
    /// set for a member any of them saw started.
    pub heard_from: Vec<String>,
    /// Cluster IDs other answers reported, when they differ from `cluster_id`:
    /// the endpoints reach more than one cluster (a misconfiguration; never
    /// evidence that may let an empty member start).
    pub other_cluster_ids: Vec<ClusterId>,
    /// The members heard from are enough to trust "never started": at least
    /// half the voting members of the freshest view (this member counts as a
    /// voter; any entry committed on a majority is then on one of them).
    pub majority_heard: bool,
    /// One of the answers came from the member that leads (it reports itself
    /// as the leader): the most current view of the membership there is.
    pub leader_heard: bool,
    /// Responder's MVCC revision (`Status` header); `None` when `Status` did not answer.
    pub revision: Option<i64>,
    /// Where each member of the freshest answer's cluster that answered
    /// stood (its `Status`).
    pub positions: Vec<AnswerPosition>,
    /// The commit index of the leader, when it answered.
    pub leader_raft_index: Option<u64>,
}

/// Where one answering member stood.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct AnswerPosition {
    /// The member that answered.
    pub member_id: MemberId,
    /// Its raft (commit) index.
    pub raft_index: Option<u64>,
    /// Its applied index (`Status.RaftAppliedIndex`).
    pub applied_index: Option<u64>,
    /// `Status.RaftTerm`: etcd reports the term of the last entry it applied
    /// (`EtcdServer.Term`, set in `apply`), not its raft term; 0 until it
    /// applied an entry since it started.
    pub raft_term: Option<u64>,
    /// Its MVCC revision.
    pub revision: Option<i64>,
    /// It reported itself as the leader.
    pub leader: bool,
}

impl LiveCluster {
    /// The entry with this `--name`. Only started members have a name.
    pub fn member_named(&self, name: &str) -> Option<&LiveMember> {
        if name.is_empty() {
            return None;
        }
        self.members.iter().find(|m| m.member.name == name)
    }

    /// The entry advertising any of these peer URLs: how to find a member that
    /// was added but never started (it has no name yet).
    pub fn member_with_peer_urls(&self, peer_urls: &[String]) -> Option<&LiveMember> {
        self.members
            .iter()
            .find(|m| m.member.peer_urls.iter().any(|u| peer_urls.contains(u)))
    }

    /// The entry of the member that answered.
    pub fn responder(&self) -> Option<&LiveMember> {
        self.members
            .iter()
            .find(|m| m.member.id == self.responder_member_id)
    }
}

/// Why the live cluster could not be heard.
#[derive(Debug, thiserror::Error)]
pub enum EtcdProbeError {
    /// No endpoint was configured, so the live cluster was not asked.
    #[error("no etcd endpoints given")]
    NoEndpoints,
    /// A TLS file named on the command line cannot be read or parsed. Nothing was
    /// asked: this is a configuration error, not an unreachable cluster.
    #[error("cannot use TLS {role} file {}: {detail}", path.display())]
    TlsFile {
        /// Which file: `ca`, `cert` or `key`.
        role: &'static str,
        /// The path as given.
        path: PathBuf,
        /// What is wrong with it.
        detail: String,
        /// The I/O error, when reading failed.
        #[source]
        source: Option<std::io::Error>,
    },
    /// A client certificate was given without its key, or a key without its
    /// certificate.
    #[error("a client certificate needs its key and a key its certificate (got only the {given})")]
    TlsIdentityIncomplete {
        /// `cert` or `key`: the half that was given.
        given: &'static str,
    },
    /// Every endpoint was tried and none answered `MemberList` before the
    /// deadline.
    #[error("no etcd endpoint answered MemberList: {}", render_attempts(attempts))]
    NoEndpointAnswered {
        /// Each endpoint, in the order given, with why it did not answer.
        attempts: Vec<(String, String)>,
    },
}

fn render_attempts(attempts: &[(String, String)]) -> String {
    attempts
        .iter()
        .map(|(endpoint, why)| format!("{endpoint}: {why}"))
        .collect::<Vec<_>>()
        .join("; ")
}

/// Splits a comma-separated endpoint list, trimming blanks and dropping empty
/// items. Endpoints are kept as given (no scheme is added here).
pub fn parse_endpoints(s: &str) -> Vec<String> {
    s.split(',')
        .map(str::trim)
        .filter(|e| !e.is_empty())
        .map(str::to_owned)
        .collect()
}

/// How long after the deadline the collector waits for attempts to report.
const OUTER_SLACK: std::time::Duration = std::time::Duration::from_millis(50);

/// An error this close to the deadline is the deadline's doing.
const DEADLINE_EPSILON: std::time::Duration = std::time::Duration::from_millis(20);

/// Everything an endpoint attempt needs, prepared once (TLS files are read
/// before any network I/O so that their errors are reported as such).
struct Prepared {
    tls: Option<TlsOptions>,
    credentials: Option<(String, String)>,
}

/// Asks the live cluster for its membership and the answering members' status.
///
/// Every endpoint is asked concurrently (`MemberList` and `Status`; a failed
/// `Status` only leaves `leader`/`raft_*` empty). Answers are collected until
/// half of the voting members and the leader have answered, every endpoint has
/// reported, or the deadline passes, and then merged ([`merge`]): a stale member cannot
/// report alone that a member never started while a majority was reachable,
/// and the result says whether a majority was heard.
/// Returns no later than `deadline` (plus scheduling slack).
pub async fn probe(conn: &EtcdConn, deadline: Instant) -> Result<LiveCluster, EtcdProbeError> {
    probe_until(conn, deadline, None, |_| false).await
}

/// [`probe`] that also stops listening as soon as one answer satisfies
/// `settled`. For a caller asking "has this member started?": an answer that
/// shows it started is final, since no later answer can unstart it.
#[tracing::instrument(skip(conn, settled), fields(endpoints = ?conn.endpoints))]
///
/// `own_cluster`: the cluster the caller's directory belongs to, when it has one.
/// The leader and a majority of *that* cluster must be heard before the wait
/// ends without a settling answer: endpoints that also reach another cluster
/// must not end it with that cluster's majority (a one-member cluster answers
/// for its whole majority at once).
pub async fn probe_until(
    conn: &EtcdConn,
    deadline: Instant,
    own_cluster: Option<ClusterId>,
    settled: impl Fn(&LiveCluster) -> bool,
) -> Result<LiveCluster, EtcdProbeError> {
    probe_settling(conn, deadline, own_cluster, settled, None).await
}

/// [`probe_until`] that, with `grace`, keeps listening after a settling
/// answer for the leader and a majority, at most `grace` longer: what the
/// settling answer says is final, but the leader's position (its term, its
/// commit and revision) is evidence of its own for an initialized directory
/// (row 6h), and it is usually one round trip away.
pub async fn probe_settling(
    conn: &EtcdConn,
    deadline: Instant,
    own_cluster: Option<ClusterId>,
    settled: impl Fn(&LiveCluster) -> bool,
    grace: Option<std::time::Duration>,
) -> Result<LiveCluster, EtcdProbeError> {
    if conn.endpoints.is_empty() {
        return Err(EtcdProbeError::NoEndpoints);
    }
    let prepared = Arc::new(prepare(conn)?);

    let mut attempts: Vec<Option<String>> = vec![None; conn.endpoints.len()];
    let mut tasks = JoinSet::new();
    for (i, endpoint) in conn.endpoints.iter().enumerate() {
        let endpoint = endpoint.clone();
        let prepared = Arc::clone(&prepared);
        tasks.spawn(async move { (i, probe_endpoint(&endpoint, &prepared, deadline).await) });
    }

    let mut answers: Vec<LiveCluster> = Vec::new();
    // Set by the first settling answer, with a grace: the end of the wait.
    let mut settle_by: Option<Instant> = None;
    loop {
        // Each task is bounded by the deadline itself and reports why it gave
        // up; this outer bound, a little later, only guarantees the promise of
        // this function should a task not keep to it.
        let until = settle_by.map_or(deadline + OUTER_SLACK, |s| s.min(deadline + OUTER_SLACK));
        match timeout_at(until, tasks.join_next()).await {
            Ok(Some(Ok((_, Ok(cluster))))) => {
                tracing::debug!(endpoint = %cluster.endpoint, members = cluster.members.len(), "live cluster answered");
                let done = settled(&cluster);
                answers.push(cluster);
                let heard_enough = match own_cluster {
                    None => majority_heard(&answers) && leader_heard(&answers),
                    Some(id) => {
                        let own: Vec<LiveCluster> = answers
                            .iter()
                            .filter(|a| a.cluster_id == id)
                            .cloned()
                            .collect();
                        majority_heard(&own) && leader_heard(&own)
                    }
                };
                if heard_enough {
                    break;
                }
                if done {
                    match grace {
                        None => break,
                        Some(g) => {
                            settle_by.get_or_insert_with(|| Instant::now() + g);
                        }
                    }
                }
            }
            Ok(Some(Ok((i, Err(why))))) => {
                tracing::debug!(endpoint = %conn.endpoints[i], error = %why, "endpoint did not answer");
                attempts[i] = Some(why);
            }
            Ok(Some(Err(join_error))) => {
                // A panicking attempt is reported against no endpoint in
                // particular; the others still count.
                tracing::warn!(error = %join_error, "endpoint attempt failed");
            }
            Ok(None) | Err(_) => break,
        }
    }
    // Dropping the JoinSet would abort the attempts still running too.
    tasks.abort_all();
    if !answers.is_empty() {
        return Ok(merge(answers, own_cluster));
    }

    let attempts = conn
        .endpoints
        .iter()
        .zip(attempts)
        .map(|(endpoint, why)| {
            (
                endpoint.clone(),
                why.unwrap_or_else(|| "no answer before the deadline".to_owned()),
            )
        })
        .collect();
    Err(EtcdProbeError::NoEndpointAnswered { attempts })
}

/// One endpoint's answers to `Maintenance.HashKV(revision)` and to a
/// serializable `Range` of its newest keys at `revision`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyspaceAnswer {
    /// The endpoint asked, as given.
    pub endpoint: String,
    /// The cluster and member that answered (response header); `None` when
    /// it did not answer.
    pub cluster_id: Option<ClusterId>,
    /// See `cluster_id`.
    pub member_id: Option<MemberId>,
    /// Its hash and the compaction revision it hashed with, or why not
    /// (compacted, a future revision, permission denied, no answer).
    pub answer: Result<(u32, i64), String>,
    /// The live keys with the highest `mod_revision` at the revision, newest
    /// first, or why not.
    pub newest: Result<Vec<LiveKv>, String>,
}

/// Asks every endpoint, concurrently, for its `HashKV` at `revision` (the
/// hash etcd's own corruption check compares between members) and for its
/// `newest` live keys at `revision` (a serializable `Range` of every key
/// sorted by modification, newest first), each bounded by `deadline`. With
/// auth enabled etcd answers HashKV to the root user only, and the Range to
/// a user who may read every key; another user's attempt comes back as its
/// error.
pub async fn keyspace(
    conn: &EtcdConn,
    revision: i64,
    newest: usize,
    deadline: Instant,
) -> Vec<KeyspaceAnswer> {
    let limit = i64::try_from(newest).unwrap_or(i64::MAX);
    let asked = ask_every(conn, deadline, move |mut client| async move {
        let mut kv = client.kv_client();
        let options = GetOptions::new()
            .with_all_keys()
            .with_revision(revision)
            .with_sort(SortTarget::Mod, SortOrder::Descend)
            .with_limit(limit)
            .with_serializable();
        let (hash, range) = tokio::join!(
            timeout_at(deadline, client.hash_kv(revision)),
            timeout_at(deadline, kv.get(vec![0u8], Some(options)))
        );
        Ok((bounded("HashKV", hash), bounded("Range", range)))
    })
    .await;
    asked
        .into_iter()
        .map(|(endpoint, answer)| match answer {
            Ok((hash, range)) => {
                let header = hash
                    .as_ref()
                    .ok()
                    .and_then(|r| r.header())
                    .or_else(|| range.as_ref().ok().and_then(|r| r.header()));
                KeyspaceAnswer {
                    endpoint,
                    cluster_id: header.map(|h| ClusterId::new(h.cluster_id())),
                    member_id: header.map(|h| MemberId::new(h.member_id())),
                    answer: hash.map(|r| (r.hash(), r.compact_version())),
                    newest: range.map(|r| r.kvs().iter().map(live_kv).collect()),
                }
            }
            Err(why) => KeyspaceAnswer {
                endpoint,
                cluster_id: None,
                member_id: None,
                answer: Err(why.clone()),
                newest: Err(why),
            },
        })
        .collect()
}

/// One endpoint's values of given keys at one revision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeysAnswer {
    /// The endpoint asked, as given.
    pub endpoint: String,
    /// The cluster and member that answered; `None` when it did not.
    pub cluster_id: Option<ClusterId>,
    /// See `cluster_id`.
    pub member_id: Option<MemberId>,
    /// Each key's value at the revision (`None`: no such key there), in the
    /// order asked, or why not.
    pub kvs: Result<Vec<Option<LiveKv>>, String>,
}

/// Asks every endpoint, concurrently, for each of `keys` at `revision`
/// (serializable reads, bounded by `deadline`).
pub async fn read_keys(
    conn: &EtcdConn,
    keys: &[Vec<u8>],
    revision: i64,
    deadline: Instant,
) -> Vec<KeysAnswer> {
    let keys = Arc::new(keys.to_vec());
    let asked = ask_every(conn, deadline, move |client| {
        let keys = Arc::clone(&keys);
        async move {
            let mut header = None;
            let mut kvs = Vec::new();
            for key in keys.iter() {
                let options = GetOptions::new()
                    .with_revision(revision)
                    .with_serializable();
                let mut kv = client.kv_client();
                let resp = bounded(
                    "Range",
                    timeout_at(deadline, kv.get(key.clone(), Some(options))).await,
                )?;
                header = header.or_else(|| {
                    resp.header()
                        .map(|h| (ClusterId::new(h.cluster_id()), MemberId::new(h.member_id())))
                });
                kvs.push(resp.kvs().first().map(live_kv));
            }
            Ok((header, kvs))
        }
    })
    .await;
    asked
        .into_iter()
        .map(|(endpoint, read)| match read {
            Ok((header, kvs)) => KeysAnswer {
                endpoint,
                cluster_id: header.map(|h| h.0),
                member_id: header.map(|h| h.1),
                kvs: Ok(kvs),
            },
            Err(why) => KeysAnswer {
                endpoint,
                cluster_id: None,
                member_id: None,
                kvs: Err(why),
            },
        })
        .collect()
}

/// A key-value pair as the agent compares it.
fn live_kv(kv: &etcd_client::KeyValue) -> LiveKv {
    LiveKv {
        mod_revision: kv.mod_revision(),
        key: kv.key().to_vec(),
        create_revision: kv.create_revision(),
        version: kv.version(),
        value: kv.value().to_vec(),
        lease: kv.lease(),
    }
}

/// An RPC's answer bounded by `timeout_at`, its failure rendered with the
/// RPC's name.
fn bounded<T>(
    rpc: &str,
    answer: Result<Result<T, etcd_client::Error>, tokio::time::error::Elapsed>,
) -> Result<T, String> {
    match answer {
        Ok(Ok(resp)) => Ok(resp),
        Ok(Err(e)) => Err(format!("{rpc} failed: {}", describe_error(&e))),
        Err(_) => Err(format!("{rpc}: no answer before the deadline")),
    }
}

/// Connects to every endpoint concurrently and runs `ask` with each client,
/// all bounded by `deadline`: per endpoint, in the order given, what `ask`
/// returned, or why there is no answer (TLS files, connect, the deadline).
async fn ask_every<T, F, Fut>(
    conn: &EtcdConn,
    deadline: Instant,
    ask: F,
) -> Vec<(String, Result<T, String>)>
where
    T: Send + 'static,
    F: Fn(Client) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = Result<T, String>> + Send + 'static,
{
    let prepared = match prepare(conn) {
        Ok(p) => Arc::new(p),
        Err(e) => {
            return conn
                .endpoints
                .iter()
                .map(|endpoint| (endpoint.clone(), Err(e.to_string())))
                .collect()
        }
    };
    let mut tasks = JoinSet::new();
    for (i, endpoint) in conn.endpoints.iter().enumerate() {
        let endpoint = endpoint.clone();
        let prepared = Arc::clone(&prepared);
        let ask = ask.clone();
        tasks.spawn(async move {
            let answer = match connect_as_configured(&endpoint, &prepared, deadline).await {
                Ok(client) => ask(client).await,
                Err(why) => Err(why),
            };
            (i, answer)
        });
    }
    let mut out: Vec<Option<Result<T, String>>> = std::iter::repeat_with(|| None)
        .take(conn.endpoints.len())
        .collect();
    while let Ok(Some(joined)) = timeout_at(deadline + OUTER_SLACK, tasks.join_next()).await {
        if let Ok((i, answer)) = joined {
            out[i] = Some(answer);
        }
    }
    tasks.abort_all();
    conn.endpoints
        .iter()
        .cloned()
        .zip(out)
        .map(|(endpoint, a)| {
            (
                endpoint,
                a.unwrap_or_else(|| Err("no answer before the deadline".to_owned())),
            )
        })
        .collect()
}

/// The index of the freshest answer: highest applied index (the raft index
/// where `Status` gives no applied index, as etcd 3.4's does not); the first to
/// answer among equals.
fn freshest(answers: &[LiveCluster]) -> usize {
    freshest_where(answers, |_| true)
}

/// [`freshest`] among the answers `keep` keeps (0 when it keeps none).
fn freshest_where(answers: &[LiveCluster], keep: impl Fn(&LiveCluster) -> bool) -> usize {
    answers
        .iter()
        .enumerate()
        .filter(|(_, a)| keep(a))
        .max_by_key(|(i, a)| {
            let applied = a.raft_applied_index.filter(|&x| x > 0).or(a.raft_index);
            (applied.unwrap_or(0), std::cmp::Reverse(*i))
        })
        .map_or(0, |(i, _)| i)
}

/// Whether the distinct voting members that answered are at least half of the
/// voting members of the freshest view among `answers` (the caller passes one
/// cluster's answers). This member counts among the voters
/// but cannot answer before it starts; an entry committed on a majority of N
/// voters is on at least N/2 of the others, so ⌈N/2⌉ of them always include one
/// that has it.
fn majority_heard(answers: &[LiveCluster]) -> bool {
    let Some(base) = answers.get(freshest(answers)) else {
        return false;
    };
    let voters: std::collections::BTreeSet<MemberId> = base
        .members
        .iter()
        .filter(|m| !m.member.is_learner)
        .map(|m| m.member.id)
        .collect();
    let heard: std::collections::BTreeSet<MemberId> = answers
        .iter()
        .map(|a| a.responder_member_id)
        .filter(|id| voters.contains(id))
        .collect();
    !voters.is_empty() && heard.len() * 2 >= voters.len()
}

/// Whether one of the answers came from a member that reports itself as the
/// leader.
fn leader_heard(answers: &[LiveCluster]) -> bool {
    answers
        .iter()
        .any(|a| a.leader == Some(a.responder_member_id))
}

/// One view from several answers: the freshest of the directory's own
/// cluster (`own_cluster`; of any cluster when it is `None` or none of its
/// answers came) is the base, and a member any
/// answer lists as started has started — publishing a name is a committed
/// entry, never undone, so an answer without it is only behind. Members only a
/// staler view lists were removed since and are left out. Cluster IDs that
/// differ from the base's are kept in `other_cluster_ids`.
fn merge(answers: Vec<LiveCluster>, own_cluster: Option<ClusterId>) -> LiveCluster {
    // The base is the freshest answer of the directory's own cluster when one
    // answered: a fresher answer of another cluster the endpoints also reach
    // must not hide this cluster's list and positions (it is a warning, not
    // the view).
    let own_cluster = own_cluster.filter(|&id| answers.iter().any(|a| a.cluster_id == id));
    let mut base = answers[freshest_where(&answers, |a| {
        own_cluster.is_none_or(|id| a.cluster_id == id)
    })]
    .clone();
    // Who was heard counts within the base's cluster only: a one-member
    // cluster some endpoint also reaches is its own leader and majority, and
    // says nothing about this one.
    let own: Vec<LiveCluster> = answers
        .iter()
        .filter(|a| a.cluster_id == base.cluster_id)
        .cloned()
        .collect();
    let majority = majority_heard(&own);
    let leader = leader_heard(&own);
    for member in &mut base.members {
        if member.started {
            continue;
        }
        let seen_started = own
            .iter()
            .flat_map(|a| &a.members)
            .find(|m| m.member.id == member.member.id && m.started);
        if let Some(seen) = seen_started {
            *member = seen.clone();
        }
    }
    let mut others: Vec<ClusterId> = answers
        .iter()
        .map(|a| a.cluster_id)
        .filter(|&id| id != base.cluster_id)
        .collect();
    others.sort_unstable();
    others.dedup();
    base.heard_from = answers.iter().map(|a| a.endpoint.clone()).collect();
    base.other_cluster_ids = others;
    base.majority_heard = majority;
    base.leader_heard = leader;
    base.positions = own
        .iter()
        .map(|a| AnswerPosition {
            member_id: a.responder_member_id,
            raft_index: a.raft_index,
            applied_index: a.raft_applied_index,
            raft_term: a.raft_term,
            revision: a.revision,
            leader: a.leader == Some(a.responder_member_id),
        })
        .collect();
    base.leader_raft_index = base
        .positions
        .iter()
        .filter(|p| p.leader)
        .filter_map(|p| p.raft_index)
        .max();
    base
}

fn prepare(conn: &EtcdConn) -> Result<Prepared, EtcdProbeError> {
    let identity = match (&conn.cert, &conn.key) {
        (Some(cert), Some(key)) => Some(Identity::from_pem(
            read_pem("cert", cert)?,
            read_pem("key", key)?,
        )),
        (Some(_), None) => return Err(EtcdProbeError::TlsIdentityIncomplete { given: "cert" }),
        (None, Some(_)) => return Err(EtcdProbeError::TlsIdentityIncomplete { given: "key" }),
        (None, None) => None,
    };
    let ca = match &conn.ca {
        Some(path) => Some(Certificate::from_pem(read_pem("ca", path)?)),
        None => None,
    };
    let tls = if ca.is_some() || identity.is_some() {
        let mut tls = TlsOptions::new();
        if let Some(ca) = ca {
            tls = tls.ca_certificate(ca);
        }
        if let Some(identity) = identity {
            tls = tls.identity(identity);
        }
        Some(tls)
    } else {
        None
    };
    let credentials = conn
        .user
        .as_ref()
        .map(|user| (user.clone(), conn.password.clone().unwrap_or_default()));
    Ok(Prepared { tls, credentials })
}

/// Reads a PEM file and checks it holds at least one PEM block, so a wrong path
/// or an empty file is reported here and not as a baffling handshake failure.
fn read_pem(role: &'static str, path: &Path) -> Result<Vec<u8>, EtcdProbeError> {
    let bytes = std::fs::read(path).map_err(|e| EtcdProbeError::TlsFile {
        role,
        path: path.to_owned(),
        detail: e.to_string(),
        source: Some(e),
    })?;
    let has_block = bytes.windows(11).any(|w| w == b"-----BEGIN ");
    if !has_block {
        return Err(EtcdProbeError::TlsFile {
            role,
            path: path.to_owned(),
            detail: "no PEM block in the file".to_owned(),
            source: None,
        });
    }
    Ok(bytes)
}

/// One endpoint: connect (and authenticate), then `MemberList` and `Status`
/// concurrently. Errors are rendered to text: they end up in a report, and
/// etcd-client's error type is not part of this module's API.
async fn probe_endpoint(
    endpoint: &str,
    prepared: &Prepared,
    deadline: Instant,
) -> Result<LiveCluster, String> {
    let mut client = connect_as_configured(endpoint, prepared, deadline).await?;

    let mut cluster_client = client.cluster_client();
    let member_list = async {
        match timeout_at(deadline, cluster_client.member_list()).await {
            Ok(Ok(resp)) => Ok(resp),
            // The client's own timeout (set to the time left) fires at the
            // deadline too; say so plainly.
            Ok(Err(e)) if remaining(deadline) < DEADLINE_EPSILON => Err(format!(
                "MemberList: no answer before the deadline ({})",
                describe_error(&e)
            )),
            Ok(Err(e)) => Err(format!("MemberList failed: {}", describe_error(&e))),
            Err(_) => Err("MemberList: no answer before the deadline".to_owned()),
        }
    };
    let status = async {
        match timeout_at(deadline, client.status()).await {
            Ok(Ok(resp)) => Some(resp),
            Ok(Err(e)) => {
                tracing::debug!(endpoint, error = %describe_error(&e), "Status failed");
                None
            }
            Err(_) => {
                tracing::debug!(endpoint, "Status: no answer before the deadline");
                None
            }
        }
    };
    let (members, status) = tokio::try_join!(member_list, async { Ok::<_, String>(status.await) })?;

    let header = members
        .header()
        .ok_or_else(|| "MemberList answered without a response header".to_owned())?;
    let members_out = members
        .members()
        .iter()
        .map(|m| {
            LiveMember::new(
                MemberId::new(m.id()),
                m.name().to_owned(),
                m.peer_urls().to_vec(),
                m.client_urls().to_vec(),
                m.is_learner(),
            )
        })
        .collect();
    Ok(LiveCluster {
        endpoint: endpoint.to_owned(),
        cluster_id: ClusterId::new(header.cluster_id()),
        members: members_out,
        leader: status
            .as_ref()
            .map(|s| s.leader())
            .filter(|&l| l != 0)
            .map(MemberId::new),
        raft_term: status.as_ref().map(|s| s.raft_term()),
        raft_index: status.as_ref().map(|s| s.raft_index()),
        raft_applied_index: status.as_ref().map(|s| s.raft_applied_index()),
        responder_member_id: MemberId::new(header.member_id()),
        heard_from: vec![endpoint.to_owned()],
        other_cluster_ids: Vec::new(),
        majority_heard: false,
        leader_heard: false,
        revision: status
            .as_ref()
            .and_then(|s| s.header())
            .map(|h| h.revision()),
        positions: Vec::new(),
        leader_raft_index: None,
    })
}

/// [`connect`] with the configured credentials, and anonymously when the
/// cluster says auth is not enabled: etcdctl and clientv3 treat "auth not
/// enabled" as "no token needed", while etcd-client fails the connect. The
/// reads asked (MemberList, Status, and without auth HashKV and Range) need no
/// token then.
async fn connect_as_configured(
    endpoint: &str,
    prepared: &Prepared,
    deadline: Instant,
) -> Result<Client, String> {
    match connect(endpoint, prepared, prepared.credentials.clone(), deadline).await {
        Err(e) if prepared.credentials.is_some() && is_auth_not_enabled(&e) => {
            tracing::debug!(endpoint, "auth is not enabled; asking anonymously");
            connect(endpoint, prepared, None, deadline).await
        }
        other => other,
    }
}

async fn connect(
    endpoint: &str,
    prepared: &Prepared,
    credentials: Option<(String, String)>,
    deadline: Instant,
) -> Result<Client, String> {
    let left = remaining(deadline);
    if left.is_zero() {
        return Err("no time left to connect".to_owned());
    }
    // The client's own timeouts are a second line; timeout_at below is the one
    // that holds, because a connect may be lazy and a call may wait for a
    // channel that never becomes ready.
    let mut options = ConnectOptions::new()
        .with_connect_timeout(left)
        .with_timeout(left);
    // etcd-client refuses TLS options on an explicit http:// URL; a mixed list
    // (a plaintext local member, TLS peers) is legitimate.
    if !endpoint.starts_with("http://") {
        if let Some(tls) = &prepared.tls {
            options = options.with_tls(tls.clone());
        }
    }
    if let Some((user, password)) = credentials {
        options = options.with_user(user, password);
    }
    match timeout_at(deadline, Client::connect([endpoint], Some(options))).await {
        Ok(Ok(client)) => Ok(client),
        Ok(Err(e)) if remaining(deadline) < DEADLINE_EPSILON => Err(format!(
            "connect: no answer before the deadline ({})",
            describe_error(&e)
        )),
        Ok(Err(e)) => Err(describe_connect_error(&e)),
        Err(_) => Err("connect: no answer before the deadline".to_owned()),
    }
}

fn describe_connect_error(e: &etcd_client::Error) -> String {
    match e {
        etcd_client::Error::GRpcStatus(_) => {
            format!("connect (authenticate) failed: {}", describe_error(e))
        }
        other => format!("connect failed: {}", describe_error(other)),
    }
}

/// An etcd-client error with its causes: the top level of a transport error
/// says little ("transport error"); the cause (connection refused, unknown CA)
/// is what an operator needs.
pub(crate) fn describe_error(e: &etcd_client::Error) -> String {
    let mut parts: Vec<String> = Vec::new();
    let head = match e {
        etcd_client::Error::GRpcStatus(status) => status.message().to_owned(),
        other => other.to_string(),
    };
    parts.push(head);
    let mut source = std::error::Error::source(e);
    if let etcd_client::Error::GRpcStatus(status) = e {
        source = std::error::Error::source(status);
    }
    while let Some(cause) = source {
        let text = cause.to_string();
        if !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
        source = cause.source();
    }
    parts.join(": ")
}

fn is_auth_not_enabled(rendered: &str) -> bool {
    rendered.contains("authentication is not enabled")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn endpoints_are_split_trimmed_and_kept_as_given() {
        assert_eq!(
            parse_endpoints(" https://a:2379 ,b:2379,, http://c:2379 "),
            vec!["https://a:2379", "b:2379", "http://c:2379"]
        );
        assert!(parse_endpoints("").is_empty());
        assert!(parse_endpoints(" , ,").is_empty());
    }

    #[test]
    fn a_member_is_started_only_with_a_name_and_client_urls() {
        let peer = vec!["http://10.0.0.1:2380".to_owned()];
        let client = vec!["http://10.0.0.1:2379".to_owned()];
        assert!(
            LiveMember::new(
                MemberId::new(1),
                "m0".into(),
                peer.clone(),
                client.clone(),
                false
            )
            .started
        );
        assert!(
            !LiveMember::new(
                MemberId::new(1),
                String::new(),
                peer.clone(),
                Vec::new(),
                false
            )
            .started
        );
        assert!(
            !LiveMember::new(
                MemberId::new(1),
                "m0".into(),
                peer.clone(),
                Vec::new(),
                false
            )
            .started
        );
        assert!(!LiveMember::new(MemberId::new(1), String::new(), peer, client, false).started);
    }

    #[test]
    fn ids_serialize_as_hex() {
        let cluster = LiveCluster {
            endpoint: "http://127.0.0.1:2379".into(),
            cluster_id: ClusterId::new(0xcdf818194e3a8c32),
            members: vec![LiveMember::new(
                MemberId::new(0x8e9e05c52164694d),
                "m0".into(),
                vec!["http://127.0.0.1:2380".into()],
                vec!["http://127.0.0.1:2379".into()],
                false,
            )],
            leader: None,
            raft_term: Some(2),
            raft_index: None,
            raft_applied_index: None,
            responder_member_id: MemberId::new(0x8e9e05c52164694d),
            heard_from: vec!["http://127.0.0.1:2379".into()],
            other_cluster_ids: vec![ClusterId::new(0xc2)],
            majority_heard: true,
            leader_heard: false,
            revision: Some(7),
            positions: Vec::new(),
            leader_raft_index: None,
        };
        let v = serde_json::to_value(&cluster).unwrap_or_default();
        assert_eq!(v["cluster_id"], "cdf818194e3a8c32");
        assert_eq!(v["members"][0]["id"], "8e9e05c52164694d");
        assert_eq!(v["members"][0]["started"], true);
        assert_eq!(v["leader"], serde_json::Value::Null);
        assert_eq!(v["responder_member_id"], "8e9e05c52164694d");
        assert_eq!(v["other_cluster_ids"][0], "00000000000000c2");
    }

    fn member(id: u64, name: &str, started: bool) -> LiveMember {
        let peer = vec![format!("http://10.0.0.{id}:2380")];
        let client = if started {
            vec![format!("http://10.0.0.{id}:2379")]
        } else {
            Vec::new()
        };
        LiveMember::new(MemberId::new(id), name.into(), peer, client, false)
    }

    /// The answer of member `responder` at applied index `applied`, listing
    /// `members`.
    fn answer(responder: u64, applied: Option<u64>, members: Vec<LiveMember>) -> LiveCluster {
        LiveCluster {
            endpoint: format!("http://10.0.0.{responder}:2379"),
            cluster_id: ClusterId::new(0xc1),
            members,
            leader: Some(MemberId::new(2)),
            raft_term: Some(4),
            raft_index: applied.map(|a| a + 2),
            raft_applied_index: applied,
            responder_member_id: MemberId::new(responder),
            heard_from: vec![format!("http://10.0.0.{responder}:2379")],
            other_cluster_ids: Vec::new(),
            majority_heard: false,
            leader_heard: false,
            revision: applied.map(|a| a as i64),
            positions: Vec::new(),
            leader_raft_index: None,
        }
    }

    /// m3 was added and started (published its name at index 120); m1 is
    /// behind and has not applied that entry. m4 (this member, wiped) asks.
    fn views() -> (LiveCluster, LiveCluster) {
        let members = |m3_started: bool| {
            vec![
                member(1, "m1", true),
                member(2, "m2", true),
                member(3, if m3_started { "m3" } else { "" }, m3_started),
                member(4, "m4", true),
            ]
        };
        (
            answer(1, Some(100), members(false)),
            answer(2, Some(130), members(true)),
        )
    }

    #[test]
    fn a_stale_answer_does_not_unstart_a_member() {
        let (stale, fresh) = views();
        for answers in [
            vec![stale.clone(), fresh.clone()],
            vec![fresh.clone(), stale.clone()],
        ] {
            let merged = merge(answers, None);
            let m3 = merged
                .members
                .iter()
                .find(|m| m.member.id == MemberId::new(3))
                .unwrap();
            assert!(m3.started, "{merged:?}");
            assert_eq!(m3.member.name, "m3");
            assert_eq!(
                merged.raft_applied_index,
                Some(130),
                "the freshest view is the base"
            );
            assert_eq!(merged.heard_from.len(), 2);
            assert!(merged.other_cluster_ids.is_empty());
        }
        // Started seen only in the view that is not the base: still started.
        let (mut stale, mut fresh) = views();
        stale.members[2] = member(3, "m3", true);
        fresh.members[2] = member(3, "", false);
        let merged = merge(vec![fresh, stale], None);
        assert!(merged.members[2].started);
    }

    #[test]
    fn a_member_only_a_staler_view_lists_was_removed() {
        // m3 was removed and added again as m5 (unstarted); m1 has applied
        // neither change and still lists m3 started.
        let stale = answer(
            1,
            Some(100),
            vec![
                member(1, "m1", true),
                member(2, "m2", true),
                member(3, "m3", true),
            ],
        );
        let fresh = answer(
            2,
            Some(140),
            vec![
                member(1, "m1", true),
                member(2, "m2", true),
                member(5, "", false),
            ],
        );
        let merged = merge(vec![stale, fresh], None);
        let ids: Vec<u64> = merged.members.iter().map(|m| m.member.id.get()).collect();
        assert_eq!(ids, vec![1, 2, 5]);
        assert!(!merged.members[2].started);
        assert!(merged.majority_heard, "2 of 3 voters answered");
        assert!(merged.leader_heard, "member 2 leads and answered");
    }

    #[test]
    fn without_an_applied_index_the_raft_index_orders_views_and_no_status_comes_last() {
        // etcd 3.4 reports applied index 0.
        let mut a = answer(1, Some(0), vec![member(1, "m1", true)]);
        a.raft_index = Some(50);
        let mut b = answer(
            2,
            Some(0),
            vec![member(1, "m1", true), member(2, "m2", true)],
        );
        b.raft_index = Some(60);
        let mut c = answer(3, None, vec![member(3, "m3", true)]);
        c.raft_index = None;
        let merged = merge(vec![c, a, b], None);
        assert_eq!(merged.responder_member_id, MemberId::new(2), "{merged:?}");
    }

    #[test]
    fn the_leader_is_heard_only_from_itself() {
        let (stale, fresh) = views();
        // Both report member 2 as the leader; only member 2's answer is the leader's.
        assert!(!leader_heard(std::slice::from_ref(&stale)));
        assert!(leader_heard(std::slice::from_ref(&fresh)));
        assert!(!merge(vec![stale.clone()], None).leader_heard);
        assert!(merge(vec![stale, fresh], None).leader_heard);
    }

    #[test]
    fn answers_for_different_clusters_are_kept_not_dropped() {
        let (stale, mut fresh) = views();
        fresh.cluster_id = ClusterId::new(0xc2);
        let merged = merge(vec![stale, fresh], None);
        assert_eq!(
            merged.cluster_id,
            ClusterId::new(0xc2),
            "the freshest view's"
        );
        assert_eq!(merged.other_cluster_ids, vec![ClusterId::new(0xc1)]);
    }

    #[test]
    fn the_directorys_own_cluster_is_the_base_however_fresh_another_is() {
        // The endpoints also reach cluster c2, fresher than the directory's c1:
        // c1's list and positions are the view, c2 a warning (helper-17 #2).
        let (stale, mut fresh) = views();
        fresh.cluster_id = ClusterId::new(0xc2);
        for answers in [
            vec![stale.clone(), fresh.clone()],
            vec![fresh.clone(), stale.clone()],
        ] {
            let merged = merge(answers.clone(), Some(ClusterId::new(0xc1)));
            assert_eq!(merged.cluster_id, ClusterId::new(0xc1), "{merged:?}");
            assert_eq!(merged.responder_member_id, MemberId::new(1));
            assert_eq!(merged.other_cluster_ids, vec![ClusterId::new(0xc2)]);
            assert_eq!(merged.positions.len(), 1, "c1's answers only");
            assert!(!merged.leader_heard, "c2's leader is not c1's");
            // A directory of a cluster no endpoint reaches: the freshest view.
            let merged = merge(answers, Some(ClusterId::new(0xc3)));
            assert_eq!(merged.cluster_id, ClusterId::new(0xc2));
        }
    }

    #[test]
    fn half_the_voters_of_the_freshest_view_must_answer() {
        let (stale, fresh) = views();
        // Four voters (this member among them): two answers are enough, one is not.
        assert!(!majority_heard(std::slice::from_ref(&stale)));
        assert!(majority_heard(&[stale.clone(), fresh.clone()]));
        // The same member answering twice (two URLs of one member) counts once.
        let mut again = stale.clone();
        again.endpoint = "http://m1.example:2379".into();
        assert!(!majority_heard(&[stale.clone(), again]));
        // Learners neither count as voters nor as voices: two voters (1, and
        // this member 2) and two learners that both answer are not enough.
        let learner = |id: u64| {
            let mut m = member(id, &format!("m{id}"), true);
            m.member.is_learner = true;
            m
        };
        let with_learners = vec![
            member(1, "m1", true),
            member(2, "", false),
            learner(6),
            learner(7),
        ];
        let from_learners = [
            answer(6, Some(50), with_learners.clone()),
            answer(7, Some(50), with_learners.clone()),
        ];
        assert!(!majority_heard(&from_learners));
        assert!(majority_heard(&[answer(1, Some(50), with_learners)]));
        // Two voters (a scale-up from one): the other member alone is enough.
        let two = answer(
            1,
            Some(10),
            vec![member(1, "m1", true), member(2, "", false)],
        );
        assert!(majority_heard(&[two]));
        assert!(!majority_heard(&[]));
    }

    #[test]
    fn debug_output_hides_the_password() {
        let conn = EtcdConn {
            password: Some("hunter2".into()),
            ..EtcdConn::default()
        };
        assert!(!format!("{conn:?}").contains("hunter2"));
    }

    #[tokio::test]
    async fn no_endpoints_is_its_own_error() {
        let err = probe(
            &EtcdConn::default(),
            Instant::now() + Duration::from_secs(1),
        )
        .await;
        assert!(matches!(err, Err(EtcdProbeError::NoEndpoints)), "{err:?}");
    }

    #[tokio::test]
    async fn the_probe_span_records_the_own_cluster_in_hex_like_every_id() {
        #[derive(Clone, Default)]
        struct Buf(Arc<std::sync::Mutex<Vec<u8>>>);
        impl std::io::Write for Buf {
            fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
                self.0.lock().unwrap().extend_from_slice(b);
                Ok(b.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let buf = Buf::default();
        let out = buf.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || out.clone())
            .with_span_events(tracing_subscriber::fmt::format::FmtSpan::NEW)
            .with_ansi(false)
            .finish();
        let _guard = tracing::subscriber::set_default(subscriber);
        let deadline = Instant::now() + Duration::from_secs(1);
        let own = Some(ClusterId::new(0xcdf818194e3a8c32));
        let _ = probe_until(&EtcdConn::default(), deadline, own, |_| false).await;
        let logged = String::from_utf8(buf.0.lock().unwrap().clone()).unwrap();
        assert!(
            logged.contains("own_cluster=Some(cdf818194e3a8c32)"),
            "{logged}"
        );
        assert!(logged.contains("probe_until{deadline="), "{logged}");
    }

    #[tokio::test]
    async fn unreadable_tls_files_are_reported_before_any_network_io() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
        let missing = dir.path().join("ca.crt");
        let conn = EtcdConn {
            endpoints: vec!["https://127.0.0.1:1".into()],
            ca: Some(missing.clone()),
            ..EtcdConn::default()
        };
        match probe(&conn, Instant::now() + Duration::from_secs(5)).await {
            Err(EtcdProbeError::TlsFile { role, path, .. }) => {
                assert_eq!(role, "ca");
                assert_eq!(path, missing);
            }
            other => panic!("expected TlsFile, got {other:?}"),
        }

        let not_pem = dir.path().join("tls.crt");
        std::fs::write(&not_pem, b"not a certificate").unwrap_or_else(|e| panic!("{e}"));
        let conn = EtcdConn {
            endpoints: vec!["https://127.0.0.1:1".into()],
            cert: Some(not_pem.clone()),
            key: Some(not_pem),
            ..EtcdConn::default()
        };
        let err = probe(&conn, Instant::now() + Duration::from_secs(5)).await;
        assert!(
            matches!(err, Err(EtcdProbeError::TlsFile { role: "cert", .. })),
            "{err:?}"
        );

        let conn = EtcdConn {
            endpoints: vec!["https://127.0.0.1:1".into()],
            key: Some(dir.path().join("tls.key")),
            ..EtcdConn::default()
        };
        let err = probe(&conn, Instant::now() + Duration::from_secs(5)).await;
        assert!(
            matches!(
                err,
                Err(EtcdProbeError::TlsIdentityIncomplete { given: "key" })
            ),
            "{err:?}"
        );
    }

    /// A listener that accepts and then holds every connection without a byte:
    /// what a black-holed peer looks like from the client.
    async fn black_hole() -> (String, tokio::task::JoinHandle<()>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .unwrap_or_else(|e| panic!("bind: {e}"));
        let addr = listener
            .local_addr()
            .unwrap_or_else(|e| panic!("local_addr: {e}"));
        let task = tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((socket, _)) = listener.accept().await {
                held.push(socket);
            }
        });
        (format!("http://{addr}"), task)
    }

    #[tokio::test]
    async fn a_black_holed_endpoint_cannot_outlast_the_deadline() {
        let (endpoint, task) = black_hole().await;
        let started = Instant::now();
        let deadline = started + Duration::from_millis(800);
        let conn = EtcdConn {
            endpoints: vec![endpoint.clone()],
            ..EtcdConn::default()
        };
        let result = probe(&conn, deadline).await;
        let finished = Instant::now();
        task.abort();
        assert!(
            finished <= deadline + Duration::from_millis(200),
            "probe took {:?}",
            finished - started
        );
        match result {
            Err(EtcdProbeError::NoEndpointAnswered { attempts }) => {
                assert_eq!(attempts.len(), 1);
                assert_eq!(attempts[0].0, endpoint);
                assert!(attempts[0].1.contains("deadline"), "{attempts:?}");
            }
            other => panic!("expected NoEndpointAnswered, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn a_black_holed_endpoint_with_credentials_cannot_outlast_the_deadline() {
        // With a user, connect authenticates eagerly: that RPC must be bounded too.
        let (endpoint, task) = black_hole().await;
        let started = Instant::now();
        let deadline = started + Duration::from_millis(800);
        let conn = EtcdConn {
            endpoints: vec![endpoint],
            user: Some("root".into()),
            password: Some("secret".into()),
            ..EtcdConn::default()
        };
        let result = probe(&conn, deadline).await;
        task.abort();
        assert!(Instant::now() <= deadline + Duration::from_millis(200));
        assert!(
            matches!(result, Err(EtcdProbeError::NoEndpointAnswered { .. })),
            "{result:?}"
        );
    }

    #[tokio::test]
    async fn every_failed_endpoint_is_listed_in_order() {
        // A port nobody listens on: bind, learn the port, close.
        let closed = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap_or_else(|e| panic!("{e}"));
            l.local_addr().unwrap_or_else(|e| panic!("{e}"))
        };
        let (hole, task) = black_hole().await;
        let conn = EtcdConn {
            endpoints: vec![hole.clone(), format!("http://{closed}")],
            ..EtcdConn::default()
        };
        let deadline = Instant::now() + Duration::from_millis(600);
        let result = probe(&conn, deadline).await;
        task.abort();
        // Bounded by the deadline (the slack absorbs a loaded machine's
        // scheduling, not a missing bound: without one the hole never answers).
        assert!(Instant::now() <= deadline + Duration::from_secs(3));
        match result {
            Err(EtcdProbeError::NoEndpointAnswered { attempts }) => {
                let names: Vec<_> = attempts.iter().map(|(e, _)| e.clone()).collect();
                assert_eq!(names, vec![hole, format!("http://{closed}")]);
            }
            other => panic!("expected NoEndpointAnswered, got {other:?}"),
        }
    }
}
