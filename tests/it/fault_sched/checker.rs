//! The checker, run after every schedule once the cluster is healed.
//!
//! 1. A fence key is written (linearizable put, retried), and every member is
//!    waited for until its own store shows it (serializable read): from then on no
//!    write is in flight and every replica has applied everything committed.
//! 2. **Lost writes**: every acknowledged write must be returned, with its value, by
//!    a linearizable read *through every member* (a client may be connected to any
//!    of them; a seed that re-bootstrapped alone answers "linearizably" too).
//! 3. **Divergent replicas**: every member must report the leader's revision and
//!    the same `HashKV` at that revision.
//! 4. **Foreign answers**: no member may answer with another cluster ID than the
//!    cluster had when it formed.
//!
//! For the first lost writes it also asks every member's own store
//! (serializable), to show where a lost write still lingers.

use std::collections::BTreeMap;
use std::future::Future;
use std::time::{Duration, Instant};

use etcd_client::{Client, ConnectOptions, GetOptions};

use super::world::FaultCluster;

/// What the checker found.
#[derive(Clone, Debug, Default)]
pub struct Check {
    /// Acknowledged writes checked.
    pub acked: usize,
    /// Acknowledged writes some member's linearizable read did not return.
    pub lost: Vec<String>,
    /// Members whose revision or `HashKV` differs from the leader's.
    pub divergent: Vec<String>,
    /// Members answering with another cluster ID.
    pub foreign: Vec<String>,
    /// Members that could not answer the checker at all.
    pub unanswered: Vec<String>,
    /// Where lost writes still linger, and other observations.
    pub notes: Vec<String>,
}

impl Check {
    /// Whether the schedule kept every promise.
    pub fn clean(&self) -> bool {
        self.lost.is_empty()
            && self.divergent.is_empty()
            && self.foreign.is_empty()
            && self.unanswered.is_empty()
    }
}

/// How long a member may take to apply the fence.
const FENCE_WAIT: Duration = Duration::from_secs(15);
/// Per-request timeout of the checker's clients.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

fn block_on<F: Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime for the checker")
        .block_on(f)
}

async fn client(url: &str) -> Result<Client, String> {
    let options = ConnectOptions::new()
        .with_connect_timeout(Duration::from_secs(2))
        .with_timeout(REQUEST_TIMEOUT);
    tokio::time::timeout(REQUEST_TIMEOUT, Client::connect([url], Some(options)))
        .await
        .map_err(|_| format!("connect {url}: timed out"))?
        .map_err(|e| format!("connect {url}: {e}"))
}

/// Retries `op` until it succeeds or `within` passes.
async fn retry<T, F, Fut>(within: Duration, mut op: F) -> Result<T, String>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, String>>,
{
    let start = Instant::now();
    loop {
        let err = match tokio::time::timeout(REQUEST_TIMEOUT, op()).await {
            Ok(Ok(v)) => return Ok(v),
            Ok(Err(e)) => e,
            Err(_) => "timed out".to_string(),
        };
        if start.elapsed() >= within {
            return Err(err);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Runs the checker against every member of `fc`, for every write in `fc.acked`.
/// `tag` names the fence key.
pub fn check(fc: &FaultCluster, tag: &str) -> Check {
    let urls: Vec<String> = fc.cluster.client_urls();
    let names: Vec<String> = fc
        .cluster
        .members()
        .iter()
        .map(|m| m.name().to_string())
        .collect();
    let expected_cluster = fc.cluster_id;
    let acked = &fc.acked;
    block_on(async move {
        let mut out = Check {
            acked: acked.len(),
            ..Check::default()
        };
        let mut clients: Vec<Option<Client>> = Vec::new();
        for (url, name) in urls.iter().zip(&names) {
            match retry(Duration::from_secs(5), || client(url)).await {
                Ok(c) => clients.push(Some(c)),
                Err(e) => {
                    out.unanswered.push(format!("{name}: {e}"));
                    clients.push(None);
                }
            }
        }

        // 1. The fence.
        let fence = format!("fence/{tag}");
        let mut fenced = false;
        for c in clients.iter().flatten() {
            let put = retry(Duration::from_secs(10), || {
                let mut c = c.clone();
                let fence = fence.clone();
                async move { c.put(fence, "1", None).await.map_err(|e| e.to_string()) }
            })
            .await;
            if put.is_ok() {
                fenced = true;
                break;
            }
        }
        if !fenced {
            out.unanswered
                .push("no member accepted the fence write".to_string());
            return out;
        }
        // member index -> (revision, member ID, cluster ID) once it applied the fence
        let mut applied: BTreeMap<usize, (i64, u64, u64)> = BTreeMap::new();
        for (i, c) in clients.iter().enumerate() {
            let Some(c) = c else { continue };
            let seen = retry(FENCE_WAIT, || {
                let mut c = c.clone();
                let fence = fence.clone();
                async move {
                    let r = c
                        .get(fence.clone(), Some(GetOptions::new().with_serializable()))
                        .await
                        .map_err(|e| e.to_string())?;
                    if r.kvs().is_empty() {
                        return Err("fence not applied".to_string());
                    }
                    let h = r.header().ok_or("no header")?;
                    Ok((h.revision(), h.member_id(), h.cluster_id()))
                }
            })
            .await;
            match seen {
                Ok(v) => {
                    applied.insert(i, v);
                }
                Err(e) => out.divergent.push(format!(
                    "{}: never applied the fence within {FENCE_WAIT:?} ({e})",
                    names[i]
                )),
            }
        }

        // 4. Cluster IDs (also of members that never applied the fence).
        for (i, c) in clients.iter().enumerate() {
            let Some(c) = c else { continue };
            let cid = match applied.get(&i) {
                Some((_, _, cid)) => Some(*cid),
                None => {
                    let mut c = c.clone();
                    c.status()
                        .await
                        .ok()
                        .and_then(|s| s.header().map(|h| h.cluster_id()))
                }
            };
            if let Some(cid) = cid {
                if cid != expected_cluster {
                    out.foreign.push(format!(
                        "{} answers with cluster ID {cid:016x}, the cluster formed as {expected_cluster:016x}",
                        names[i]
                    ));
                }
            }
        }

        // 2. Every acknowledged write, through every member, linearizably.
        let mut lost: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (i, c) in clients.iter().enumerate() {
            let Some(c) = c else { continue };
            let all = retry(Duration::from_secs(15), || {
                let mut c = c.clone();
                async move {
                    let r = c
                        .get("w/", Some(GetOptions::new().with_prefix()))
                        .await
                        .map_err(|e| e.to_string())?;
                    let mut kvs = BTreeMap::new();
                    for kv in r.kvs() {
                        kvs.insert(kv.key().to_vec(), kv.value().to_vec());
                    }
                    Ok(kvs)
                }
            })
            .await;
            let all = match all {
                Ok(all) => all,
                Err(e) => {
                    out.unanswered
                        .push(format!("{}: no linearizable read: {e}", names[i]));
                    continue;
                }
            };
            for (k, v) in acked {
                if all.get(k.as_bytes()).map(|x| x.as_slice()) != Some(v.as_bytes()) {
                    lost.entry(k.clone()).or_default().push(names[i].clone());
                }
            }
        }
        for (k, missing_on) in &lost {
            out.lost
                .push(format!("{k} (missing through {})", missing_on.join(", ")));
        }
        for k in lost.keys().take(3) {
            let mut holders = Vec::new();
            for (i, c) in clients.iter().enumerate() {
                let Some(c) = c else { continue };
                let mut c = c.clone();
                if let Ok(r) = c
                    .get(k.as_str(), Some(GetOptions::new().with_serializable()))
                    .await
                {
                    if !r.kvs().is_empty() {
                        holders.push(names[i].clone());
                    }
                }
            }
            if !holders.is_empty() {
                out.notes.push(format!(
                    "lost write {k} is still in the store of {} (serializable read)",
                    holders.join(", ")
                ));
            }
        }

        // 3. Revisions and HashKV against the leader.
        let leader = {
            let mut leader = None;
            for c in clients.iter().flatten() {
                let mut c = c.clone();
                if let Ok(s) = c.status().await {
                    if s.leader() != 0 {
                        leader = Some(s.leader());
                        break;
                    }
                }
            }
            leader
        };
        let leader_idx =
            leader.and_then(|l| applied.iter().find(|(_, v)| v.1 == l).map(|(i, _)| *i));
        let Some(li) = leader_idx else {
            out.divergent.push(format!(
                "no leader among the members that applied the fence (leader {leader:?})"
            ));
            return out;
        };
        let rev = applied[&li].0;
        let hash_of = |i: usize| {
            let c = clients[i].clone();
            async move {
                let mut c = c.ok_or("no client")?;
                c.hash_kv(rev)
                    .await
                    .map(|r| r.hash())
                    .map_err(|e| e.to_string())
            }
        };
        let leader_hash = match hash_of(li).await {
            Ok(h) => h,
            Err(e) => {
                out.unanswered
                    .push(format!("{} (leader): HashKV({rev}): {e}", names[li]));
                return out;
            }
        };
        for (&i, &(r, _, _)) in &applied {
            if i == li {
                continue;
            }
            if r != rev {
                out.divergent.push(format!(
                    "{} is at revision {r}, the leader {} at {rev}",
                    names[i], names[li]
                ));
                continue;
            }
            match hash_of(i).await {
                Ok(h) if h == leader_hash => {}
                Ok(h) => out.divergent.push(format!(
                    "{}: HashKV({rev}) = {h:08x}, the leader {}'s = {leader_hash:08x}",
                    names[i], names[li]
                )),
                Err(e) => out
                    .divergent
                    .push(format!("{}: HashKV({rev}) failed: {e}", names[i])),
            }
        }
        out
    })
}
