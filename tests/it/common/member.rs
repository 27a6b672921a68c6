//! One etcd member process: its frozen flags, its directory and log, and the
//! lifecycle operations tests need (stop, SIGKILL, freeze, restart, wipe).
//!
//! A member's flags are frozen when it is created, as Kubernetes freezes a Pod's
//! args: `start()` always reuses them, so a restart behaves exactly like a Pod
//! restart; `start_with` overrides them for one start only. Each member owns a
//! directory holding `data/` (the `--data-dir`) and `etcd.log` (stdout and stderr of
//! every start, appended, each start marked), so wiping the data dir keeps the log
//! and tree snapshots of the data dir never see it.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::Duration;

use nix::sys::signal::Signal;

use super::etcd::{etcdctl, etcdctl_ok, EtcdVersion};
use super::gateway::{self, HttpConn};
use super::patience::{patience, Deadline};
use super::process::{register, signal, unregister, wait_with_deadline};

/// `--initial-cluster-state`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClusterState {
    /// Bootstrap a new cluster (the operator's seed).
    New,
    /// Join a cluster that already formed (every member added later).
    Existing,
}

impl ClusterState {
    /// The flag value: `new` or `existing`.
    pub fn as_str(self) -> &'static str {
        match self {
            ClusterState::New => "new",
            ClusterState::Existing => "existing",
        }
    }
}

/// The flags a member's etcd runs with, shaped like the operator's Pod args.
#[derive(Clone, Debug)]
pub struct MemberFlags {
    /// `--name`: m0, m1, …
    pub name: String,
    /// `--data-dir`.
    pub data_dir: PathBuf,
    /// `--listen-peer-urls` and `--initial-advertise-peer-urls`.
    pub peer_url: String,
    /// `--listen-client-urls` and `--advertise-client-urls`.
    pub client_url: String,
    /// `--initial-cluster`, as `member add` printed it (self-only for the seed).
    pub initial_cluster: String,
    /// `--initial-cluster-state`.
    pub initial_cluster_state: ClusterState,
    /// `--initial-cluster-token`.
    pub token: String,
    /// `--snapshot-count`, when set.
    pub snapshot_count: Option<u64>,
    /// Any further flags, appended last.
    pub extra_args: Vec<String>,
}

impl MemberFlags {
    /// The arguments after the program name.
    pub fn args(&self, version: EtcdVersion) -> Vec<String> {
        let mut args = vec![
            format!("--name={}", self.name),
            format!("--data-dir={}", self.data_dir.display()),
            format!("--listen-peer-urls={}", self.peer_url),
            format!("--initial-advertise-peer-urls={}", self.peer_url),
            format!("--listen-client-urls={}", self.client_url),
            format!("--advertise-client-urls={}", self.client_url),
            format!("--initial-cluster={}", self.initial_cluster),
            format!("--initial-cluster-token={}", self.token),
            format!(
                "--initial-cluster-state={}",
                self.initial_cluster_state.as_str()
            ),
        ];
        if let Some(n) = self.snapshot_count {
            args.push(format!("--snapshot-count={n}"));
        }
        args.extend(version.version_args().iter().map(|s| s.to_string()));
        args.extend(self.extra_args.iter().cloned());
        args
    }
}

/// Why a member did not become healthy.
#[derive(Debug)]
pub enum WaitError {
    /// etcd exited because a port was taken; retrying with other ports may help.
    AddrInUse(String),
    /// etcd exited for another reason.
    Exited(String),
    /// etcd ran but was not healthy in time.
    TimedOut(String),
}

impl std::fmt::Display for WaitError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WaitError::AddrInUse(s) | WaitError::Exited(s) | WaitError::TimedOut(s) => {
                f.write_str(s)
            }
        }
    }
}

#[derive(Default)]
struct Proc {
    child: Option<Child>,
    last_pid: Option<u32>,
    last_status: Option<ExitStatus>,
    /// Byte offset in the log where the current (or last) run's output starts.
    log_offset: u64,
    starts: u32,
    /// SIGSTOPped by `freeze()` and not yet continued.
    frozen: bool,
}

/// One etcd member. Dropping it SIGKILLs and reaps its etcd.
pub struct Member {
    version: EtcdVersion,
    dir: PathBuf,
    log_path: PathBuf,
    flags: MemberFlags,
    id: OnceLock<u64>,
    proc: Mutex<Proc>,
}

/// How long `stop()` lets etcd shut down after SIGTERM before SIGKILL.
pub const STOP_GRACE: Duration = Duration::from_secs(10);

impl Member {
    /// A member that has not started, living in `dir` (created if missing).
    pub fn new(version: EtcdVersion, dir: PathBuf, flags: MemberFlags) -> Member {
        std::fs::create_dir_all(&dir)
            .unwrap_or_else(|e| panic!("cannot create {}: {e}", dir.display()));
        Member {
            version,
            log_path: dir.join("etcd.log"),
            dir,
            flags,
            id: OnceLock::new(),
            proc: Mutex::new(Proc::default()),
        }
    }

    fn proc(&self) -> MutexGuard<'_, Proc> {
        self.proc.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The etcd release this member runs.
    pub fn version(&self) -> EtcdVersion {
        self.version
    }

    /// Runs the member's next start with `version`'s binary (a rolling upgrade or
    /// downgrade: same flags, same data dir). Only while it is stopped.
    pub fn set_version(&mut self, version: EtcdVersion) {
        assert!(
            !self.is_running(),
            "{} is running: stop it before changing its binary",
            self.name()
        );
        self.version = version;
    }

    /// `--name`.
    pub fn name(&self) -> &str {
        &self.flags.name
    }

    /// `--data-dir`.
    pub fn data_dir(&self) -> &Path {
        &self.flags.data_dir
    }

    /// `<data-dir>/member/wal`.
    pub fn wal_dir(&self) -> PathBuf {
        self.flags.data_dir.join("member/wal")
    }

    /// `<data-dir>/member/snap`.
    pub fn snap_dir(&self) -> PathBuf {
        self.flags.data_dir.join("member/snap")
    }

    /// `<data-dir>/member/snap/db`.
    pub fn db_path(&self) -> PathBuf {
        self.snap_dir().join("db")
    }

    /// The member's own directory (holds `data/` and `etcd.log`).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The peer URL (`http://127.0.0.1:P`).
    pub fn peer_url(&self) -> &str {
        &self.flags.peer_url
    }

    /// The client URL (`http://127.0.0.1:C`).
    pub fn client_url(&self) -> &str {
        &self.flags.client_url
    }

    /// The frozen `--initial-cluster`.
    pub fn initial_cluster(&self) -> &str {
        &self.flags.initial_cluster
    }

    /// The frozen `--initial-cluster-state`.
    pub fn initial_cluster_state(&self) -> ClusterState {
        self.flags.initial_cluster_state
    }

    /// The full frozen command line, program first.
    pub fn argv(&self) -> Vec<String> {
        let mut argv = vec![self.version.etcd().display().to_string()];
        argv.extend(self.flags.args(self.version));
        argv
    }

    /// The member ID once known (from `member add`, or learned when the seed first
    /// became healthy).
    pub fn id(&self) -> Option<u64> {
        self.id.get().copied()
    }

    /// The member ID as etcd prints it: 16 lowercase hex digits.
    pub fn id_hex(&self) -> Option<String> {
        self.id().map(|id| format!("{id:016x}"))
    }

    pub(crate) fn set_id(&self, id: u64) {
        let _ = self.id.set(id);
    }

    /// The env the operator gives its init containers for this member:
    /// `ETCD_MEMBER_NAME`, `ETCD_INITIAL_CLUSTER`, `ETCD_INITIAL_CLUSTER_TOKEN`,
    /// `ETCD_PEER_URLS`, `ETCD_DATA_DIR`, and `ETCD_VERSION` (the release this
    /// member runs next, so every preflight runs the upgrade check for it; see
    /// `Cluster::agent_env` for `ETCD_PEER_ENDPOINTS` too).
    pub fn agent_env(&self) -> Vec<(String, String)> {
        vec![
            ("ETCD_VERSION".into(), self.version().label().into()),
            ("ETCD_MEMBER_NAME".into(), self.flags.name.clone()),
            (
                "ETCD_INITIAL_CLUSTER".into(),
                self.flags.initial_cluster.clone(),
            ),
            (
                "ETCD_INITIAL_CLUSTER_TOKEN".into(),
                self.flags.token.clone(),
            ),
            ("ETCD_PEER_URLS".into(), self.flags.peer_url.clone()),
            (
                "ETCD_DATA_DIR".into(),
                self.flags.data_dir.display().to_string(),
            ),
        ]
    }

    /// Starts etcd with its frozen flags and returns at once; see
    /// [`Member::wait_healthy`]. Panics if it is already running.
    pub fn start(&self) {
        self.start_with(|_| {});
    }

    /// Starts etcd with the frozen flags as changed by `change`, for this start
    /// only: `m.start_with(|f| f.initial_cluster_state = ClusterState::New)`.
    pub fn start_with(&self, change: impl FnOnce(&mut MemberFlags)) {
        let mut flags = self.flags.clone();
        change(&mut flags);
        let mut proc = self.proc();
        if let Some(child) = proc.child.as_mut() {
            if child.try_wait().ok().flatten().is_none() {
                panic!(
                    "{} is already running (pid {})",
                    self.flags.name,
                    child.id()
                );
            }
        }
        reap(&mut proc);
        let args = flags.args(self.version);
        let mut log = File::options()
            .create(true)
            .append(true)
            .open(&self.log_path)
            .unwrap_or_else(|e| panic!("cannot open {}: {e}", self.log_path.display()));
        proc.starts += 1;
        let _ = writeln!(
            log,
            "=== harness: start #{} of {}: {} {}",
            proc.starts,
            self.flags.name,
            self.version.etcd().display(),
            args.join(" ")
        );
        proc.log_offset = log.seek(SeekFrom::End(0)).unwrap_or(0);
        let stderr = log
            .try_clone()
            .unwrap_or_else(|e| panic!("cannot dup log handle: {e}"));
        let child = Command::new(self.version.etcd())
            .env_clear()
            .args(&args)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(stderr)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", self.version.etcd().display()));
        register(child.id(), &flags.data_dir);
        proc.last_pid = Some(child.id());
        proc.last_status = None;
        proc.frozen = false;
        proc.child = Some(child);
    }

    /// Waits one patience until the member answers `/health` with true; panics
    /// with the tail of its log otherwise (or as soon as etcd exits).
    pub fn wait_healthy(&self) {
        if let Err(e) = self.try_wait_healthy(patience()) {
            panic!("{e}");
        }
    }

    /// Like [`Member::wait_healthy`], returning why it failed.
    pub fn try_wait_healthy(&self, timeout: Duration) -> Result<(), WaitError> {
        let deadline = Deadline::after(timeout);
        let mut pause = Duration::from_millis(20);
        loop {
            if let Some(status) = self.exit_status() {
                let log = self.log_since_start();
                let msg = format!(
                    "{} ({}) exited with {status} before becoming healthy; log tail:\n{}",
                    self.flags.name,
                    self.version,
                    tail(&log, 30)
                );
                return Err(if log.contains("address already in use") {
                    WaitError::AddrInUse(msg)
                } else {
                    WaitError::Exited(msg)
                });
            }
            let last = match gateway::health(&self.flags.client_url, Duration::from_secs(2)) {
                Ok(()) => return Ok(()),
                Err(e) => e,
            };
            if deadline.passed() {
                return Err(WaitError::TimedOut(format!(
                    "{} ({}) not healthy after {timeout:?}: {last}; log tail:\n{}",
                    self.flags.name,
                    self.version,
                    self.log_tail(30)
                )));
            }
            std::thread::sleep(pause.min(deadline.remaining()));
            pause = (pause * 2).min(Duration::from_millis(200));
        }
    }

    /// Whether etcd is running (a frozen etcd counts as running).
    pub fn is_running(&self) -> bool {
        self.exit_status().is_none() && self.proc().child.is_some()
    }

    /// The exit status of the last run, once it has ended; `None` while running or
    /// before the first start.
    pub fn exit_status(&self) -> Option<ExitStatus> {
        let mut proc = self.proc();
        if let Some(child) = proc.child.as_mut() {
            if let Ok(Some(status)) = child.try_wait() {
                proc.last_status = Some(status);
                reap(&mut proc);
            }
        }
        proc.last_status
    }

    /// Waits up to `timeout` for etcd to exit on its own (say, a raft panic);
    /// `None` if it still runs then.
    pub fn wait_exit(&self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Deadline::after(timeout);
        let mut pause = Duration::from_millis(5);
        loop {
            if let Some(status) = self.exit_status() {
                return Some(status);
            }
            if deadline.passed() {
                return None;
            }
            std::thread::sleep(pause.min(deadline.remaining()));
            pause = (pause * 2).min(Duration::from_millis(100));
        }
    }

    /// Whether etcd runs and is not frozen, i.e. can answer.
    pub fn is_answering(&self) -> bool {
        self.is_running() && !self.is_frozen()
    }

    /// Whether [`Member::freeze`] stopped it (and it was not thawed since).
    pub fn is_frozen(&self) -> bool {
        let frozen = self.proc().frozen;
        frozen && self.is_running()
    }

    /// The PID of the most recently started etcd, whether or not it still runs.
    pub fn pid(&self) -> Option<u32> {
        self.proc().last_pid
    }

    /// SIGTERM (and SIGCONT, in case it is frozen), then SIGKILL if etcd has not
    /// exited within [`STOP_GRACE`]. Returns the exit status; `None` if it was not
    /// running.
    pub fn stop(&self) -> Option<ExitStatus> {
        let mut proc = self.proc();
        let child = proc.child.as_mut()?;
        let pid = child.id();
        signal(pid, Signal::SIGTERM);
        signal(pid, Signal::SIGCONT);
        let status = match wait_with_deadline(child, Deadline::after(STOP_GRACE)) {
            Some(status) => status,
            None => {
                signal(pid, Signal::SIGKILL);
                child.wait().ok()?
            }
        };
        proc.last_status = Some(status);
        proc.frozen = false;
        reap(&mut proc);
        Some(status)
    }

    /// SIGKILL, as a node crash or an OOM kill would; waits until it is reaped.
    pub fn kill9(&self) -> Option<ExitStatus> {
        let mut proc = self.proc();
        let child = proc.child.as_mut()?;
        signal(child.id(), Signal::SIGKILL);
        let status = child.wait().ok();
        proc.last_status = status;
        proc.frozen = false;
        reap(&mut proc);
        status
    }

    /// SIGSTOP: the member stops answering but keeps its ports, its locks and its
    /// place in the cluster (the kernel still accepts connections to it, so
    /// clients hang rather than fail over; cluster helpers skip frozen members).
    pub fn freeze(&self) {
        self.send_to_running("freeze", Signal::SIGSTOP, true);
    }

    /// SIGCONT after [`Member::freeze`].
    pub fn thaw(&self) {
        self.send_to_running("thaw", Signal::SIGCONT, false);
    }

    fn send_to_running(&self, what: &str, sig: Signal, frozen: bool) {
        let mut proc = self.proc();
        match proc.child.as_ref() {
            Some(child) => signal(child.id(), sig),
            None => panic!("cannot {what} {}: not running", self.flags.name),
        }
        proc.frozen = frozen;
    }

    /// Sends SIGKILL without waiting (for dropping many members at once).
    pub(crate) fn signal_kill(&self) {
        if let Some(child) = self.proc().child.as_ref() {
            signal(child.id(), Signal::SIGKILL);
        }
    }

    /// Empties the data dir as a blank volume would be: every entry inside is
    /// removed, the directory itself stays (created with mode 0700 if missing).
    /// Panics if etcd is running.
    pub fn wipe_data_dir(&self) {
        assert!(
            !self.is_running(),
            "refusing to wipe {} while its etcd runs",
            self.flags.name
        );
        let dir = &self.flags.data_dir;
        match std::fs::read_dir(dir) {
            Ok(entries) => {
                for entry in entries {
                    let path = entry
                        .unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()))
                        .path();
                    let result = if path.is_dir() && !path.is_symlink() {
                        std::fs::remove_dir_all(&path)
                    } else {
                        std::fs::remove_file(&path)
                    };
                    result.unwrap_or_else(|e| panic!("cannot remove {}: {e}", path.display()));
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                use std::os::unix::fs::DirBuilderExt;
                std::fs::DirBuilder::new()
                    .recursive(true)
                    .mode(0o700)
                    .create(dir)
                    .unwrap_or_else(|e| panic!("cannot create {}: {e}", dir.display()));
            }
            Err(e) => panic!("cannot list {}: {e}", dir.display()),
        }
    }

    /// `etcdctl endpoint status -w json` against this member alone: the `Status`
    /// object (`header.member_id`, `header.cluster_id`, `raftIndex`, `dbSize`, …).
    pub fn endpoint_status(&self) -> serde_json::Value {
        self.try_endpoint_status().unwrap_or_else(|e| panic!("{e}"))
    }

    /// Like [`Member::endpoint_status`], for eventual checks.
    pub fn try_endpoint_status(&self) -> Result<serde_json::Value, String> {
        let out = etcdctl_ok(
            self.version,
            &self.flags.client_url,
            ["endpoint", "status", "-w", "json"],
        )?;
        let json: serde_json::Value = serde_json::from_str(&out)
            .map_err(|e| format!("endpoint status printed no JSON ({e}): {out}"))?;
        json[0]
            .get("Status")
            .cloned()
            .ok_or_else(|| format!("endpoint status without Status: {out}"))
    }

    /// etcdctl with `args` against this member only.
    pub fn etcdctl<S: AsRef<std::ffi::OsStr>>(&self, args: impl IntoIterator<Item = S>) -> Output {
        etcdctl(self.version, &self.flags.client_url, args)
    }

    fn conn(&self) -> Result<HttpConn, String> {
        HttpConn::new(&self.flags.client_url, Duration::from_secs(10))
    }

    /// Puts `key` = `value` through this member; panics on failure.
    pub fn put(&self, key: &str, value: &str) {
        self.try_put(key, value).unwrap_or_else(|e| panic!("{e}"));
    }

    /// Like [`Member::put`], for eventual checks and expected failures.
    pub fn try_put(&self, key: &str, value: &str) -> Result<(), String> {
        gateway::put(&mut self.conn()?, key.as_bytes(), value.as_bytes())
    }

    /// A linearizable read through this member; panics on failure.
    pub fn get(&self, key: &str) -> Option<String> {
        self.try_get(key, false).unwrap_or_else(|e| panic!("{e}"))
    }

    /// A serializable read: what this member's own store holds, quorum or not.
    pub fn get_serializable(&self, key: &str) -> Option<String> {
        self.try_get(key, true).unwrap_or_else(|e| panic!("{e}"))
    }

    /// A read through this member, linearizable unless `serializable`.
    pub fn try_get(&self, key: &str, serializable: bool) -> Result<Option<String>, String> {
        let value = gateway::get(&mut self.conn()?, key.as_bytes(), serializable)?;
        Ok(value.map(|v| String::from_utf8_lossy(&v).into_owned()))
    }

    /// `member/wal/*.wal`, sorted.
    pub fn wal_files(&self) -> Vec<PathBuf> {
        files_with_suffix(&self.wal_dir(), ".wal")
    }

    /// `member/snap/*.snap`, sorted.
    pub fn snap_files(&self) -> Vec<PathBuf> {
        files_with_suffix(&self.snap_dir(), ".snap")
    }

    /// The whole log.
    pub fn log(&self) -> String {
        String::from_utf8_lossy(&std::fs::read(&self.log_path).unwrap_or_default()).into_owned()
    }

    /// What the current (or last) run has logged.
    pub fn log_since_start(&self) -> String {
        let offset = self.proc().log_offset;
        let mut buf = Vec::new();
        if let Ok(mut f) = File::open(&self.log_path) {
            let _ = f.seek(SeekFrom::Start(offset));
            let _ = f.read_to_end(&mut buf);
        }
        String::from_utf8_lossy(&buf).into_owned()
    }

    /// The last `lines` lines of the log.
    pub fn log_tail(&self, lines: usize) -> String {
        tail(&self.log(), lines).to_string()
    }
}

/// Forgets a child that has exited (and unregisters it).
fn reap(proc: &mut Proc) {
    if let Some(mut child) = proc.child.take() {
        match child.try_wait() {
            Ok(Some(status)) => {
                proc.last_status = Some(status);
                unregister(child.id());
            }
            Ok(None) => proc.child = Some(child),
            Err(_) => unregister(child.id()),
        }
    }
}

impl Drop for Member {
    fn drop(&mut self) {
        let mut proc = self.proc();
        if let Some(mut child) = proc.child.take() {
            let pid = child.id();
            signal(pid, Signal::SIGKILL);
            let _ = child.wait();
            unregister(pid);
        }
    }
}

fn files_with_suffix(dir: &Path, suffix: &str) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .map(|e| e.path())
                .filter(|p| {
                    p.file_name()
                        .and_then(|n| n.to_str())
                        .is_some_and(|n| n.ends_with(suffix))
                })
                .collect()
        })
        .unwrap_or_default();
    files.sort();
    files
}

/// The last `lines` lines of `text`.
pub fn tail(text: &str, lines: usize) -> &str {
    let mut start = text.len();
    for _ in 0..=lines {
        match text[..start].rfind('\n') {
            Some(i) => start = i,
            None => return text,
        }
    }
    &text[start + 1..]
}
