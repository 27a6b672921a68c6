//! What a node changes on the host, and how it is put back.
//!
//! The kubelet and containerd write outside their private run dir: the kubelet
//! sets three sysctls at start (`vm.overcommit_memory` 0→1, `kernel.panic` →10,
//! `kernel.panic_on_oops` →1), makes `kubepods/…` cgroups at the root of every
//! hierarchy, and uses `/var/lib/kubelet/device-plugins` and `/var/log/containers`
//! whatever its `--root-dir`; containerd's shims put their sockets under
//! `/run/containerd/s`. Everything else (roots, states, sockets, logs, volumes,
//! mounts) is under the run dir.
//!
//! Before changing anything, a node records in [`STATE_PATH`] what it will have to
//! undo: the sysctls as they were, the fixed paths that did not exist yet, its run
//! dir. A node that tears down completely removes the record; a test process that
//! died without tearing down (SIGKILL, abort) leaves it, and the next node (it holds
//! the machine-wide lock, so the dead one is not running) undoes it first:
//! [`recover`].

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use nix::mount::{umount2, MntFlags};
use nix::sys::signal::Signal;
use serde::{Deserialize, Serialize};

use crate::common::process::signal;

/// The record of what the running (or a dead) node must undo.
pub const STATE_PATH: &str = "/run/etcd-member-agent-node.state";

/// The sysctls the kubelet changes at start.
pub const SYSCTLS: [&str; 3] = [
    "vm.overcommit_memory",
    "kernel.panic",
    "kernel.panic_on_oops",
];

/// Host paths the kubelet and containerd use whatever their configuration says.
pub const FIXED_PATHS: [&str; 4] = [
    "/var/lib/kubelet/device-plugins",
    "/var/lib/kubelet",
    "/var/log/containers",
    "/run/containerd/s",
];

/// What one node must undo, written before it changes anything.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct HostState {
    /// The test process that runs the node.
    pub owner_pid: u32,
    /// The node's private run dir (roots, states, sockets, logs, volumes).
    pub run_dir: PathBuf,
    /// Each sysctl of [`SYSCTLS`] as it was before the node started.
    pub sysctls: BTreeMap<String, String>,
    /// The [`FIXED_PATHS`] that did not exist before the node started, and
    /// `/run/containerd` when it did not.
    pub created_paths: Vec<PathBuf>,
}

fn sysctl_path(name: &str) -> PathBuf {
    Path::new("/proc/sys").join(name.replace('.', "/"))
}

impl HostState {
    /// The host as it is now, for a node about to start in `run_dir`.
    pub fn capture(run_dir: &Path) -> HostState {
        let sysctls = SYSCTLS
            .iter()
            .map(|name| {
                let value = std::fs::read_to_string(sysctl_path(name))
                    .unwrap_or_else(|e| panic!("cannot read sysctl {name}: {e}"));
                ((*name).to_owned(), value.trim().to_owned())
            })
            .collect();
        let created_paths = FIXED_PATHS
            .iter()
            .chain(["/run/containerd"].iter())
            .map(PathBuf::from)
            .filter(|p| !p.exists())
            .collect();
        HostState {
            owner_pid: std::process::id(),
            run_dir: run_dir.to_owned(),
            sysctls,
            created_paths,
        }
    }

    /// Writes the record to [`STATE_PATH`].
    pub fn save(&self) {
        let text = serde_json::to_string_pretty(self).unwrap_or_else(|e| panic!("{e}"));
        std::fs::write(STATE_PATH, text)
            .unwrap_or_else(|e| panic!("cannot write {STATE_PATH}: {e}"));
    }

    /// Undoes everything the node did to the host, in an order that works: the
    /// processes of the node (by PID: every process whose command line names the
    /// run dir, every process in a `kubepods` cgroup), the mounts under the run
    /// dir (deepest first), the `kubepods` cgroups (deepest first), the sysctls,
    /// the fixed paths it created, the run dir. Best effort throughout (a step
    /// that fails does not stop the next); returns what could not be undone.
    pub fn undo(&self) -> Vec<String> {
        let mut left = Vec::new();
        kill_node_processes(&self.run_dir);
        for problem in unmount_under(&self.run_dir) {
            left.push(problem);
        }
        left.extend(remove_kubepods_cgroups());
        for (name, value) in &self.sysctls {
            if let Err(e) = std::fs::write(sysctl_path(name), value) {
                left.push(format!("sysctl {name}={value} not restored: {e}"));
            }
        }
        for path in &self.created_paths {
            if path.exists() {
                if let Err(e) = std::fs::remove_dir_all(path) {
                    left.push(format!("{} not removed: {e}", path.display()));
                }
            }
        }
        // Symlinks the kubelet made in a /var/log/containers that existed before.
        if let Ok(entries) = std::fs::read_dir("/var/log/containers") {
            for e in entries.flatten() {
                let target = std::fs::read_link(e.path()).unwrap_or_default();
                if target.starts_with(&self.run_dir) {
                    let _ = std::fs::remove_file(e.path());
                }
            }
        }
        if self.run_dir.exists() {
            if let Err(e) = std::fs::remove_dir_all(&self.run_dir) {
                left.push(format!("{} not removed: {e}", self.run_dir.display()));
            }
        }
        if left.is_empty() {
            let _ = std::fs::remove_file(STATE_PATH);
        }
        left
    }
}

/// Undoes what a node whose test process died left behind (its record is still in
/// [`STATE_PATH`]). Call with the node lock held. Returns the record undone.
pub fn recover() -> Option<HostState> {
    let text = std::fs::read_to_string(STATE_PATH).ok()?;
    let state: HostState = match serde_json::from_str(&text) {
        Ok(state) => state,
        Err(e) => panic!(
            "{STATE_PATH} is not a node record ({e}): remove it by hand after checking the host"
        ),
    };
    eprintln!(
        "a node of test process {} was not torn down; undoing it ({})",
        state.owner_pid,
        state.run_dir.display()
    );
    let left = state.undo();
    assert!(
        left.is_empty(),
        "could not undo the node left by test process {}: {left:?}",
        state.owner_pid
    );
    Some(state)
}

/// Every process of the node: those whose command line names `run_dir` (the
/// kubelet, containerd, its shims) and those in a `kubepods` cgroup (the
/// containers). The test process itself is never one.
pub fn node_processes(run_dir: &Path) -> Vec<u32> {
    let me = std::process::id();
    let needle = run_dir.to_string_lossy().into_owned();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| pid != me)
        .filter(|&pid| {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let cmdline = String::from_utf8_lossy(&cmdline);
            if cmdline.contains(&needle) {
                return true;
            }
            let cgroups =
                std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap_or_default();
            cgroups.lines().any(|l| l.contains(":/kubepods"))
        })
        .collect()
}

/// SIGKILLs every process of the node (see [`node_processes`]) until none is
/// left: a shim may start a process while its siblings die.
fn kill_node_processes(run_dir: &Path) {
    for _ in 0..50 {
        let pids = node_processes(run_dir);
        if pids.is_empty() {
            return;
        }
        for pid in &pids {
            signal(*pid, Signal::SIGKILL);
        }
        // Reaped by their parents (containerd's shims, init); wait for them to go.
        let deadline = crate::common::Deadline::after(std::time::Duration::from_secs(2));
        while !deadline.passed() && pids.iter().any(|p| is_alive(*p)) {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }
}

/// A process that exists and is not a zombie.
pub fn is_alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the command's closing parenthesis.
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.trim_start().chars().next())
            .is_some_and(|state| state != 'Z' && state != 'X'),
        Err(_) => false,
    }
}

/// The mount points at or under `dir`, deepest (latest mounted) first.
pub fn mounts_under(dir: &Path) -> Vec<PathBuf> {
    let text = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let mut points: Vec<PathBuf> = text
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .map(unescape_mountinfo)
        .filter(|p| p.starts_with(dir))
        .collect();
    points.reverse();
    points
}

/// Mountinfo escapes space, tab, newline and backslash as octal.
fn unescape_mountinfo(field: &str) -> PathBuf {
    let mut out = String::new();
    let mut chars = field.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            let code: String = chars.by_ref().take(3).collect();
            match u8::from_str_radix(&code, 8) {
                Ok(b) => out.push(b as char),
                Err(_) => {
                    out.push('\\');
                    out.push_str(&code);
                }
            }
        } else {
            out.push(c);
        }
    }
    PathBuf::from(out)
}

/// Unmounts everything at or under `dir`, deepest first (lazily: a mount still
/// busy goes when its last user does). Returns the mounts left.
pub fn unmount_under(dir: &Path) -> Vec<String> {
    for _ in 0..5 {
        let points = mounts_under(dir);
        if points.is_empty() {
            return Vec::new();
        }
        for p in points {
            let _ = umount2(&p, MntFlags::MNT_DETACH);
        }
    }
    mounts_under(dir)
        .into_iter()
        .map(|p| format!("mount {} left", p.display()))
        .collect()
}

/// The `kubepods` cgroup of every hierarchy (v1 controllers and the unified one).
fn kubepods_roots() -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir("/sys/fs/cgroup") else {
        return Vec::new();
    };
    let mut roots: Vec<PathBuf> = entries
        .flatten()
        .map(|e| e.path().join("kubepods"))
        .filter(|p| p.is_dir())
        .collect();
    // Pure cgroup v2: the root itself is the hierarchy.
    let v2 = Path::new("/sys/fs/cgroup/kubepods");
    if v2.is_dir() && !roots.iter().any(|p| p == v2) {
        roots.push(v2.to_owned());
    }
    roots
}

/// The node's cgroups, every process in them killed, removed deepest first.
/// Returns those that could not be removed.
pub fn remove_kubepods_cgroups() -> Vec<String> {
    let mut left = Vec::new();
    for root in kubepods_roots() {
        let mut dirs: Vec<PathBuf> = walkdir::WalkDir::new(&root)
            .into_iter()
            .flatten()
            .filter(|e| e.file_type().is_dir())
            .map(|e| e.into_path())
            .collect();
        // Deepest first.
        dirs.sort_by_key(|d| std::cmp::Reverse(d.components().count()));
        for dir in dirs {
            for _ in 0..100 {
                let procs = std::fs::read_to_string(dir.join("cgroup.procs")).unwrap_or_default();
                let pids: Vec<u32> = procs.lines().filter_map(|l| l.parse().ok()).collect();
                if pids.is_empty() {
                    break;
                }
                for pid in pids {
                    signal(pid, Signal::SIGKILL);
                }
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            if let Err(e) = std::fs::remove_dir(&dir) {
                if e.kind() != std::io::ErrorKind::NotFound {
                    left.push(format!("cgroup {} not removed: {e}", dir.display()));
                }
            }
        }
    }
    left
}

/// Whether the host holds anything of a node: `kubepods` cgroups, or a record.
pub fn node_traces() -> Vec<String> {
    let mut traces: Vec<String> = kubepods_roots()
        .into_iter()
        .map(|p| format!("cgroup {}", p.display()))
        .collect();
    if Path::new(STATE_PATH).exists() {
        traces.push(STATE_PATH.to_owned());
    }
    traces
}
