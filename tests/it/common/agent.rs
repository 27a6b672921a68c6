//! Running the agent binary as a black box.
//!
//! The agent reads most of its configuration from env, so every run starts from a
//! cleared environment (only `PATH`): a stray `ETCD_*`, `AGENT_*`, `POD_*`,
//! `KUBECONFIG` or `KUBERNETES_SERVICE_*` in the developer's shell must not change
//! what a test observes. Tests add exactly the variables they mean.

use std::ffi::OsStr;
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use super::patience::patience;
use super::process::{describe, run_with_stdin, shell_code};
use super::skip::skip;

/// The uid/gid the operator runs member Pods as.
pub const POD_UID: u32 = 65532;
/// See [`POD_UID`].
pub const POD_GID: u32 = 65532;

/// The agent binary cargo built for the tests.
pub const AGENT_BIN: &str = env!("CARGO_BIN_EXE_etcd-member-agent");

/// The agent binary with a cleared environment (only `PATH` kept).
pub fn agent() -> Command {
    let mut cmd = Command::new(AGENT_BIN);
    cmd.env_clear();
    if let Some(path) = std::env::var_os("PATH") {
        cmd.env("PATH", path);
    }
    cmd
}

/// What one agent run did.
#[derive(Debug)]
pub struct AgentRun {
    /// The exit code (128 + signal if killed by one).
    pub code: i32,
    /// Everything printed on stdout.
    pub stdout: String,
    /// Everything printed on stderr.
    pub stderr: String,
    /// stdout parsed as one JSON document, when it is one.
    pub json: Option<serde_json::Value>,
    /// The command line, for messages.
    pub command: String,
}

impl AgentRun {
    /// Panics, showing the run, unless it exited with `code`.
    #[track_caller]
    pub fn assert_code(&self, code: i32) -> &Self {
        assert_eq!(self.code, code, "unexpected exit code\n{self}");
        self
    }

    /// The JSON document on stdout; panics, showing the run, without one.
    #[track_caller]
    pub fn json(&self) -> &serde_json::Value {
        match &self.json {
            Some(json) => json,
            None => panic!("stdout is not one JSON document\n{self}"),
        }
    }
}

impl std::fmt::Display for AgentRun {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "$ {}", self.command)?;
        writeln!(f, "exit code: {}", self.code)?;
        writeln!(f, "--- stdout ---\n{}", self.stdout)?;
        write!(f, "--- stderr ---\n{}", self.stderr)
    }
}

/// Runs the agent with `args` and exactly the env `envs`, bounded by one
/// patience: `run_agent(["inspect", "-o", "json"], &cluster.agent_env(0))`.
pub fn run_agent<A, K, V>(args: impl IntoIterator<Item = A>, envs: &[(K, V)]) -> AgentRun
where
    A: AsRef<OsStr>,
    K: AsRef<OsStr>,
    V: AsRef<OsStr>,
{
    let mut cmd = agent();
    cmd.args(args);
    for (k, v) in envs {
        cmd.env(k, v);
    }
    run_command(cmd)
}

/// Like [`run_agent`], as `uid`/`gid` with no supplementary groups (the tests run
/// as root; std drops the groups when it changes the uid). Directories the agent
/// must read need to be traversable by that uid: see [`chown_recursive`].
pub fn run_agent_as<A, K, V>(
    uid: u32,
    gid: u32,
    args: impl IntoIterator<Item = A>,
    envs: &[(K, V)],
) -> AgentRun
where
    A: AsRef<OsStr>,
    K: AsRef<OsStr>,
    V: AsRef<OsStr>,
{
    let mut cmd = agent();
    cmd.uid(uid).gid(gid).args(args);
    for (k, v) in envs {
        cmd.env(k, v);
    }
    run_command(cmd)
}

/// Runs a prepared agent command (from [`agent`]) with the patience deadline.
pub fn run_command(cmd: Command) -> AgentRun {
    run_command_with_stdin(cmd, std::process::Stdio::null())
}

/// [`run_command`] reading `stdin`.
pub fn run_command_with_stdin(mut cmd: Command, stdin: std::process::Stdio) -> AgentRun {
    let command = describe(&cmd);
    let out = run_with_stdin(&mut cmd, stdin, patience() + Duration::from_secs(5))
        .unwrap_or_else(|e| panic!("{e}"));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let json = serde_json::from_str(&stdout).ok();
    AgentRun {
        code: shell_code(out.status),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        stdout,
        json,
        command,
    }
}

/// True when [`POD_UID`] can reach and execute the agent binary, so a permission
/// test can run it as that uid. Otherwise the test cannot say anything: it is
/// [`skip`]ped (and fails under `CI=true`).
#[track_caller]
pub fn pod_uid_can_run_the_agent() -> bool {
    let bin = Path::new(AGENT_BIN);
    let ancestors_ok = bin
        .ancestors()
        .skip(1)
        .filter(|a| !a.as_os_str().is_empty())
        .all(|a| std::fs::metadata(a).is_ok_and(|m| m.mode() & 0o001 != 0));
    let bin_ok = std::fs::metadata(bin).is_ok_and(|m| m.mode() & 0o005 == 0o005);
    if !(ancestors_ok && bin_ok) {
        skip(format!(
            "{AGENT_BIN} is not reachable/executable by uid {POD_UID}; the permission test cannot run here"
        ));
    }
    ancestors_ok && bin_ok
}

/// Chowns `path` and everything under it (symlinks themselves, not their
/// targets), so a test can hand a data dir to [`POD_UID`] like a Pod's fsGroup.
pub fn chown_recursive(path: &Path, uid: u32, gid: u32) {
    std::os::unix::fs::lchown(path, Some(uid), Some(gid))
        .unwrap_or_else(|e| panic!("cannot chown {}: {e}", path.display()));
    let meta = std::fs::symlink_metadata(path)
        .unwrap_or_else(|e| panic!("cannot stat {}: {e}", path.display()));
    if meta.is_dir() {
        for entry in std::fs::read_dir(path)
            .unwrap_or_else(|e| panic!("cannot list {}: {e}", path.display()))
        {
            let entry = entry.unwrap_or_else(|e| panic!("cannot list {}: {e}", path.display()));
            chown_recursive(&entry.path(), uid, gid);
        }
    }
}

/// `env` with `key` set to `value` (replacing it if present).
pub fn with(env: &[(String, String)], key: &str, value: impl AsRef<str>) -> Vec<(String, String)> {
    let mut env = without(env, key);
    env.push((key.to_string(), value.as_ref().to_string()));
    env
}

/// `env` without `key`.
pub fn without(env: &[(String, String)], key: &str) -> Vec<(String, String)> {
    env.iter().filter(|(k, _)| k != key).cloned().collect()
}
