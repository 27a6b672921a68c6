//! Real etcd clusters on loopback, formed the way the operator forms them.
//!
//! The operator never bootstraps a multi-member cluster in one go: the seed `m0`
//! starts alone (`--initial-cluster-state=new`, a self-only `--initial-cluster`),
//! and every further member is `member add`ed and then started with `=existing` and
//! the `--initial-cluster` that `member add` printed. The harness does the same, so
//! WAL contents, member IDs and frozen flags look like production's. etcd refuses a
//! `member add` until every voter has been connected for 5 s ("unhealthy
//! cluster"); the harness retries that error against the patience deadline instead
//! of sleeping a fixed time.

use std::ops::Index;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::{Duration, Instant};

use super::etcd::{etcdctl, etcdctl_ok, EtcdVersion};
use super::gateway::base64_decode;
use super::member::{ClusterState, Member, MemberFlags, WaitError};
use super::patience::{eventually, patience};
use super::ports::free_port;
use super::process::sweep_orphans;

/// How many times formation retries a member whose port was taken meanwhile.
const PORT_RETRIES: usize = 5;

/// Builds a [`Cluster`]: `Cluster::builder(EtcdVersion::V3_5).members(3).start()`.
#[derive(Clone, Debug)]
pub struct ClusterBuilder {
    version: EtcdVersion,
    members: usize,
    snapshot_count: Option<u64>,
    token: String,
    extra_args: Vec<String>,
}

impl ClusterBuilder {
    /// How many members to form (default 1).
    pub fn members(mut self, n: usize) -> Self {
        assert!(n >= 1, "a cluster needs at least one member");
        self.members = n;
        self
    }

    /// `--snapshot-count` for every member (etcd's default: 100 000).
    pub fn snapshot_count(mut self, n: u64) -> Self {
        self.snapshot_count = Some(n);
        self
    }

    /// `--initial-cluster-token` (default `etcd-harness`).
    pub fn token(mut self, token: impl Into<String>) -> Self {
        self.token = token.into();
        self
    }

    /// One more etcd flag for every member, e.g. `--quota-backend-bytes=8589934592`.
    pub fn arg(mut self, arg: impl Into<String>) -> Self {
        self.extra_args.push(arg.into());
        self
    }

    /// Forms the cluster like the operator: the seed alone, then each member added
    /// and started in turn, each healthy before the next. Panics with the failing
    /// member's log tail if formation fails.
    pub fn start(self) -> Cluster {
        sweep_orphans();
        let started = Instant::now();
        let dir = tempfile::Builder::new()
            .prefix(&format!("etcd-{}-", self.version.label()))
            .tempdir()
            .unwrap_or_else(|e| panic!("cannot create a temp dir: {e}"));
        // Traversable by anyone, so a test can hand one data dir to the Pod's uid
        // (see `chown_recursive`); etcd still creates each data dir 0700.
        set_mode(dir.path(), 0o755);
        let mut cluster = Cluster {
            members: Vec::new(),
            version: self.version,
            token: self.token,
            snapshot_count: self.snapshot_count,
            extra_args: self.extra_args,
            formed_in: Duration::ZERO,
            dir,
        };
        cluster.start_seed();
        for i in 1..self.members {
            cluster.add_member(&format!("m{i}"));
        }
        cluster.formed_in = started.elapsed();
        cluster
    }
}

/// A running etcd cluster in one temp dir. Dropping it SIGKILLs and reaps every
/// etcd it started, then deletes the directory.
pub struct Cluster {
    // Dropped before `dir`: members die before their directories go.
    members: Vec<Member>,
    version: EtcdVersion,
    token: String,
    snapshot_count: Option<u64>,
    extra_args: Vec<String>,
    formed_in: Duration,
    dir: tempfile::TempDir,
}

/// What [`Cluster::put_many`] wrote and how long it took.
#[derive(Clone, Copy, Debug)]
pub struct PutStats {
    /// Number of puts.
    pub puts: usize,
    /// Key and value bytes written.
    pub bytes: u64,
    /// Wall time.
    pub elapsed: Duration,
}

impl Cluster {
    /// A builder for a cluster of `version`.
    pub fn builder(version: EtcdVersion) -> ClusterBuilder {
        ClusterBuilder {
            version,
            members: 1,
            snapshot_count: None,
            token: "etcd-harness".to_string(),
            extra_args: Vec::new(),
        }
    }

    /// The temp dir holding every member's directory.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// How long `start()` took to form the cluster.
    pub fn formed_in(&self) -> Duration {
        self.formed_in
    }

    /// Every member, in the order added (m0 first), removed ones included.
    pub fn members(&self) -> &[Member] {
        &self.members
    }

    /// The number of members created (started or not).
    pub fn len(&self) -> usize {
        self.members.len()
    }

    /// Client URLs of every member.
    pub fn client_urls(&self) -> Vec<String> {
        self.members
            .iter()
            .map(|m| m.client_url().to_string())
            .collect()
    }

    /// Client URLs of the members that can answer (running, not frozen),
    /// comma-separated (all members if none can), for etcdctl's `--endpoints`.
    pub fn endpoints(&self) -> String {
        let running: Vec<&str> = self
            .members
            .iter()
            .filter(|m| m.is_answering())
            .map(|m| m.client_url())
            .collect();
        if running.is_empty() {
            self.client_urls().join(",")
        } else {
            running.join(",")
        }
    }

    /// PIDs of the etcds running now.
    pub fn pids(&self) -> Vec<u32> {
        self.members
            .iter()
            .filter(|m| m.is_running())
            .filter_map(|m| m.pid())
            .collect()
    }

    /// The operator's init-container env for member `i`: [`Member::agent_env`] plus
    /// `ETCD_PEER_ENDPOINTS`, the client URLs of every other member.
    pub fn agent_env(&self, i: usize) -> Vec<(String, String)> {
        let mut env = self.members[i].agent_env();
        let others: Vec<&str> = self
            .members
            .iter()
            .enumerate()
            .filter(|(j, _)| *j != i)
            .map(|(_, m)| m.client_url())
            .collect();
        env.push(("ETCD_PEER_ENDPOINTS".into(), others.join(",")));
        env
    }

    fn new_flags(
        &self,
        name: &str,
        state: ClusterState,
        initial_cluster: Option<String>,
    ) -> MemberFlags {
        let peer_url = format!("http://127.0.0.1:{}", free_port());
        let client_url = format!("http://127.0.0.1:{}", free_port());
        MemberFlags {
            name: name.to_string(),
            data_dir: self.member_dir(name).join("data"),
            initial_cluster: initial_cluster.unwrap_or_else(|| format!("{name}={peer_url}")),
            peer_url,
            client_url,
            initial_cluster_state: state,
            token: self.token.clone(),
            snapshot_count: self.snapshot_count,
            extra_args: self.extra_args.clone(),
        }
    }

    fn member_dir(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn start_seed(&mut self) {
        for attempt in 1..=PORT_RETRIES {
            let _ = std::fs::remove_dir_all(self.member_dir("m0"));
            let flags = self.new_flags("m0", ClusterState::New, None);
            let seed = Member::new(self.version, self.member_dir("m0"), flags);
            set_mode(seed.dir(), 0o755);
            seed.start();
            match seed.try_wait_healthy(patience()) {
                Ok(()) => {
                    let status = seed.endpoint_status();
                    if let Some(id) = status["header"]["member_id"].as_u64() {
                        seed.set_id(id);
                    }
                    self.members.push(seed);
                    return;
                }
                Err(WaitError::AddrInUse(_)) if attempt < PORT_RETRIES => continue,
                Err(e) => panic!("seeding {} failed: {e}", self.version),
            }
        }
    }

    /// `member add`s a member called `name` on fresh ports without starting it (the
    /// live member list shows it unstarted: no name, no client URLs). Start it later
    /// with `cluster[i].start()` and `wait_healthy()`.
    pub fn add_member_unstarted(&mut self, name: &str) -> &Member {
        self.add_unstarted(name, false)
    }

    fn add_unstarted(&mut self, name: &str, learner: bool) -> &Member {
        let mut flags = self.new_flags(name, ClusterState::Existing, None);
        let (id, initial_cluster) = self.member_add(name, &flags.peer_url, learner);
        flags.initial_cluster = initial_cluster;
        let member = Member::new(self.version, self.member_dir(name), flags);
        set_mode(member.dir(), 0o755);
        member.set_id(id);
        self.members.push(member);
        &self.members[self.members.len() - 1]
    }

    /// Adds a member called `name` and starts it with `=existing` and the
    /// `--initial-cluster` that `member add` printed; returns once it is healthy.
    pub fn add_member(&mut self, name: &str) -> &Member {
        self.add_and_start(name, false)
    }

    /// Adds `name` as a learner (`member add --learner`), starts it, and
    /// promotes it once it is in sync (`member promote`, retried while etcd says
    /// the learner is not in sync yet).
    pub fn add_learner_and_promote(&mut self, name: &str) -> &Member {
        self.add_and_start(name, true);
        let i = self.members.len() - 1;
        let id = format!("{:x}", self.members[i].id().expect("member add gave an ID"));
        eventually(patience(), || {
            // Through the first member, a voter (a learner answers "rpc not
            // supported for learner").
            match etcdctl_ok(
                self.version,
                self.members[0].client_url(),
                ["member", "promote", &id],
            ) {
                Ok(_) => Ok(Ok(())),
                Err(e) if e.contains("not in sync") || e.contains("unhealthy") => Err(e),
                Err(e) => Ok(Err(e)),
            }
        })
        .and_then(|r| r)
        .unwrap_or_else(|e| panic!("member promote {name}: {e}"));
        &self.members[i]
    }

    fn add_and_start(&mut self, name: &str, learner: bool) -> &Member {
        self.add_unstarted(name, learner);
        let member = &self.members[self.members.len() - 1];
        for attempt in 1..=PORT_RETRIES {
            member.start();
            match member.try_wait_healthy(patience()) {
                Ok(()) => return member,
                // Its ports are registered in the cluster now; wait for whoever took
                // one to let go.
                Err(WaitError::AddrInUse(_)) if attempt < PORT_RETRIES => {
                    std::thread::sleep(Duration::from_secs(1))
                }
                Err(e) => panic!("adding {name} to {} failed: {e}", self.version),
            }
        }
        member
    }

    /// `etcdctl member add <name> --peer-urls=<peer_url>` (with `--learner` when
    /// `learner`), retried while etcd
    /// answers "unhealthy cluster" (3.4 and 3.5 refuse until every voter has been
    /// connected for 5 s). Returns the new member's ID and the `--initial-cluster`
    /// it printed.
    fn member_add(&self, name: &str, peer_url: &str, learner: bool) -> (u64, String) {
        let peer_urls = format!("--peer-urls={peer_url}");
        let mut args = vec!["member", "add", name, &peer_urls];
        if learner {
            args.push("--learner");
        }
        let out = eventually(patience(), || {
            match etcdctl_ok(self.version, &self.endpoints(), &args) {
                Ok(out) => Ok(Ok(out)),
                Err(e)
                    if e.contains("unhealthy cluster")
                        || e.contains("not enough started members") =>
                {
                    Err(e)
                }
                Err(e) => Ok(Err(e)),
            }
        })
        .and_then(|r| r)
        .unwrap_or_else(|e| panic!("member add {name}: {e}"));
        parse_member_add(&out).unwrap_or_else(|| panic!("cannot parse member add output: {out}"))
    }

    /// `etcdctl member remove <id>`, retried while etcd answers "unhealthy
    /// cluster" (3.5+ refuse a removal until the remaining voters have all been
    /// connected for 5 s, e.g. right after a member joined).
    pub fn member_remove(&self, id: u64) {
        let id = format!("{id:x}");
        eventually(patience(), || {
            match etcdctl_ok(self.version, &self.endpoints(), ["member", "remove", &id]) {
                Ok(out) => Ok(Ok(out)),
                Err(e) if e.contains("unhealthy cluster") => Err(e),
                Err(e) => Ok(Err(e)),
            }
        })
        .and_then(|r| r)
        .unwrap_or_else(|e| panic!("member remove {id}: {e}"));
    }

    /// `etcdctl member list -w json`: `members[]` with `ID` (u64), `name`,
    /// `peerURLs`, `clientURLs` (an unstarted member has neither name nor client
    /// URLs).
    pub fn member_list(&self) -> serde_json::Value {
        let out = etcdctl_ok(
            self.version,
            &self.endpoints(),
            ["member", "list", "-w", "json"],
        )
        .unwrap_or_else(|e| panic!("{e}"));
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("member list JSON ({e}): {out}"))
    }

    /// etcdctl with `args` against the running members (`ETCDCTL_API=3`, bounded
    /// by `--command-timeout`).
    pub fn etcdctl<S: AsRef<std::ffi::OsStr>>(&self, args: impl IntoIterator<Item = S>) -> Output {
        etcdctl(self.version, &self.endpoints(), args)
    }

    /// Puts `key` = `value` through etcdctl; panics on failure.
    pub fn put(&self, key: &str, value: &str) {
        etcdctl_ok(self.version, &self.endpoints(), ["put", "--", key, value])
            .unwrap_or_else(|e| panic!("{e}"));
    }

    /// A linearizable read through etcdctl; panics on failure.
    pub fn get(&self, key: &str) -> Option<String> {
        self.try_get(key).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Like [`Cluster::get`], for eventual checks.
    pub fn try_get(&self, key: &str) -> Result<Option<String>, String> {
        let out = etcdctl_ok(
            self.version,
            &self.endpoints(),
            ["get", "-w", "json", "--", key],
        )?;
        let json: serde_json::Value =
            serde_json::from_str(&out).map_err(|e| format!("get JSON ({e}): {out}"))?;
        match json["kvs"].get(0) {
            None => Ok(None),
            Some(kv) => {
                let value = base64_decode(kv["value"].as_str().unwrap_or(""))?;
                Ok(Some(String::from_utf8_lossy(&value).into_owned()))
            }
        }
    }

    /// `etcdctl snapshot save <path>` from the first running member.
    pub fn snapshot_save(&self, path: &Path) {
        let member = self
            .members
            .iter()
            .find(|m| m.is_answering())
            .expect("snapshot_save needs a running member");
        let out = member.etcdctl([
            std::ffi::OsStr::new("snapshot"),
            "save".as_ref(),
            path.as_os_str(),
        ]);
        assert!(
            out.status.success(),
            "snapshot save {} failed: {}",
            path.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Index of the current leader, asked of the members that can answer.
    pub fn leader(&self) -> Option<usize> {
        let status = self
            .members
            .iter()
            .filter(|m| m.is_answering())
            .find_map(|m| m.try_endpoint_status().ok())?;
        let leader = status["leader"].as_u64()?;
        self.members.iter().position(|m| m.id() == Some(leader))
    }

    /// Writes `n` keys `<prefix><i:08>`, each a `value_size`-byte value, as fast as
    /// etcd takes them: gRPC (the crate's `etcd-client`) to the leader with four
    /// puts in flight, about 130 MiB/s here, so a gigabyte of WAL takes seconds.
    /// Values must stay under etcd's 1.5 MiB request limit unless
    /// `--max-request-bytes` is raised; more than about a gigabyte also needs a
    /// larger `--quota-backend-bytes` (default 2 GiB), since history accumulates.
    pub fn put_many(&self, prefix: &str, n: usize, value_size: usize) -> PutStats {
        self.put_many_values(prefix, n, value_size, false)
    }

    /// [`Cluster::put_many`] with values of pseudo-random bytes (a fixed
    /// sequence per key): nothing on the way (a filesystem, a copy) can make
    /// them smaller than they are.
    pub fn put_many_incompressible(&self, prefix: &str, n: usize, value_size: usize) -> PutStats {
        self.put_many_values(prefix, n, value_size, true)
    }

    fn put_many_values(&self, prefix: &str, n: usize, value_size: usize, random: bool) -> PutStats {
        let target = self
            .leader()
            .map(|i| &self.members[i])
            .or_else(|| self.members.iter().find(|m| m.is_answering()))
            .expect("put_many needs a running member");
        let started = Instant::now();
        let bytes = grpc_put_many(target.client_url(), prefix, n, value_size, random)
            .unwrap_or_else(|e| panic!("put_many to {}: {e}", target.name()));
        PutStats {
            puts: n,
            bytes,
            elapsed: started.elapsed(),
        }
    }
}

/// `len` bytes of splitmix64 output seeded by `seed`.
fn incompressible(seed: u64, len: usize) -> Vec<u8> {
    let mut state = seed;
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        out.extend_from_slice(&(z ^ (z >> 31)).to_le_bytes());
    }
    out.truncate(len);
    out
}

/// How many puts [`Cluster::put_many`] keeps in flight.
const PUTS_IN_FLIGHT: usize = 4;

fn grpc_put_many(
    url: &str,
    prefix: &str,
    n: usize,
    value_size: usize,
    random: bool,
) -> Result<u64, String> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| format!("tokio runtime: {e}"))?;
    runtime.block_on(async {
        let options = etcd_client::ConnectOptions::new()
            .with_connect_timeout(Duration::from_secs(5))
            .with_timeout(Duration::from_secs(30));
        let client = etcd_client::Client::connect([url], Some(options))
            .await
            .map_err(|e| format!("connect: {e}"))?;
        let writers: Vec<_> = (0..PUTS_IN_FLIGHT.min(n.max(1)))
            .map(|w| {
                let mut kv = client.kv_client();
                let prefix = prefix.to_string();
                tokio::spawn(async move {
                    let mut bytes = 0u64;
                    for i in (w..n).step_by(PUTS_IN_FLIGHT) {
                        let key = format!("{prefix}{i:08}");
                        let value = if random {
                            incompressible(i as u64, value_size)
                        } else {
                            vec![b'a' + (i % 26) as u8; value_size]
                        };
                        bytes += (key.len() + value_size) as u64;
                        kv.put(key.clone(), value, None)
                            .await
                            .map_err(|e| format!("put {key}: {e}"))?;
                    }
                    Ok::<u64, String>(bytes)
                })
            })
            .collect();
        let mut total = 0;
        for writer in writers {
            total += writer.await.map_err(|e| format!("writer: {e}"))??;
        }
        Ok(total)
    })
}

fn set_mode(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .unwrap_or_else(|e| panic!("cannot chmod {}: {e}", path.display()));
}

/// `Member <hex> added to cluster <hex>` … `ETCD_INITIAL_CLUSTER="…"`.
fn parse_member_add(out: &str) -> Option<(u64, String)> {
    let id = out
        .lines()
        .find_map(|l| l.trim().strip_prefix("Member "))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|hex| u64::from_str_radix(hex, 16).ok())?;
    let initial_cluster = out
        .lines()
        .find_map(|l| l.trim().strip_prefix("ETCD_INITIAL_CLUSTER="))
        .map(|v| v.trim_matches('"').to_string())?;
    Some((id, initial_cluster))
}

impl Cluster {
    /// Member `i`, mutable: for what changes between two runs of the same member,
    /// such as the binary in a rolling upgrade ([`Member::set_version`]).
    pub fn member_mut(&mut self, i: usize) -> &mut Member {
        &mut self.members[i]
    }
}

impl Index<usize> for Cluster {
    type Output = Member;

    fn index(&self, i: usize) -> &Member {
        &self.members[i]
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        // Kill all at once; each Member's own drop then only reaps.
        for member in &self.members {
            member.signal_kill();
        }
        self.members.clear();
    }
}
