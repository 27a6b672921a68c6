//! Child processes with deadlines, and a registry so no etcd outlives its test.
//!
//! Every helper that runs a tool (`etcdctl`, `etcdutl`, the agent) bounds it with a
//! deadline: a hung child must fail the test with its output, not hang the suite.
//! Every long-running etcd is recorded in a small on-disk registry keyed by PID; the
//! owning `Member` reaps it on drop (also while unwinding from a panic), and the
//! first cluster of any later test process kills etcds whose owning test process
//! died without unwinding (SIGKILL, abort, timeout).

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use super::patience::Deadline;

/// Runs `cmd` to completion with stdout/stderr captured, killing it (SIGKILL) when
/// `timeout` passes. The error names the program and carries whatever it printed.
pub fn run_with_deadline(cmd: &mut Command, timeout: Duration) -> Result<Output, String> {
    run_with_stdin(cmd, Stdio::null(), timeout)
}

/// [`run_with_deadline`] with `stdin` (a file opened by the caller, say).
pub fn run_with_stdin(
    cmd: &mut Command,
    stdin: Stdio,
    timeout: Duration,
) -> Result<Output, String> {
    let what = describe(cmd);
    let mut child = cmd
        .stdin(stdin)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot spawn {what}: {e}"))?;
    let stdout = drain(child.stdout.take());
    let stderr = drain(child.stderr.take());
    let status = wait_with_deadline(&mut child, Deadline::after(timeout));
    let timed_out = status.is_none();
    let status = match status {
        Some(status) => status,
        None => {
            let _ = child.kill();
            child
                .wait()
                .map_err(|e| format!("cannot reap {what}: {e}"))?
        }
    };
    let output = Output {
        status,
        stdout: stdout.join().unwrap_or_default(),
        stderr: stderr.join().unwrap_or_default(),
    };
    if timed_out {
        return Err(format!(
            "{what} did not finish within {timeout:?}; killed.\nstdout: {}\nstderr: {}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    Ok(output)
}

fn drain(pipe: Option<impl Read + Send + 'static>) -> std::thread::JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut buf = Vec::new();
        if let Some(mut pipe) = pipe {
            let _ = pipe.read_to_end(&mut buf);
        }
        buf
    })
}

/// Waits for `child` until `deadline`; `None` if it is still running then.
pub fn wait_with_deadline(child: &mut Child, deadline: Deadline) -> Option<ExitStatus> {
    let mut pause = Duration::from_millis(2);
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Some(status),
            Ok(None) => {}
            // ECHILD: somebody else reaped it; treat as gone.
            Err(_) => return Some(std::os::unix::process::ExitStatusExt::from_raw(0)),
        }
        if deadline.passed() {
            return None;
        }
        std::thread::sleep(pause.min(deadline.remaining()));
        pause = (pause * 2).min(Duration::from_millis(50));
    }
}

/// `program arg arg…`, for error messages.
pub fn describe(cmd: &Command) -> String {
    let mut s = cmd.get_program().to_string_lossy().into_owned();
    for arg in cmd.get_args() {
        s.push(' ');
        s.push_str(&arg.to_string_lossy());
    }
    s
}

/// Sends `signal` to `pid`, ignoring a process that is already gone.
pub fn signal(pid: u32, signal: Signal) {
    let _ = kill(Pid::from_raw(pid as i32), signal);
}

/// Whether a process with this PID exists (`kill(pid, 0)`); a zombie counts.
pub fn pid_exists(pid: u32) -> bool {
    kill(Pid::from_raw(pid as i32), None).is_ok()
}

/// A directory `<tmp>/<prefix><pid>` for this test process, created; the
/// directories of earlier test processes with the same prefix that are gone
/// are removed first (a killed test run cannot clean up after itself).
pub fn per_process_dir(prefix: &str) -> std::path::PathBuf {
    let tmp = std::env::temp_dir();
    if let Ok(entries) = std::fs::read_dir(&tmp) {
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if let Some(pid) = name
                .strip_prefix(prefix)
                .and_then(|p| p.parse::<u32>().ok())
            {
                if !pid_exists(pid) {
                    let _ = std::fs::remove_dir_all(e.path());
                }
            }
        }
    }
    let dir = tmp.join(format!("{prefix}{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("create {}: {e}", dir.display()));
    dir
}

/// The exit code a shell would report: the code, or 128 + signal.
pub fn shell_code(status: ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    status
        .code()
        .or_else(|| status.signal().map(|s| 128 + s))
        .unwrap_or(-1)
}

fn registry_dir() -> PathBuf {
    std::env::temp_dir().join("etcd-member-agent-harness-pids")
}

/// Records a spawned etcd (`pid`, running on `data_dir`) as owned by this process.
pub fn register(pid: u32, data_dir: &Path) {
    let dir = registry_dir();
    let _ = std::fs::create_dir_all(&dir);
    let record = format!("{}\n{}\n", std::process::id(), data_dir.display());
    let _ = std::fs::write(dir.join(pid.to_string()), record);
}

/// Forgets an etcd that has been reaped.
pub fn unregister(pid: u32) {
    let _ = std::fs::remove_file(registry_dir().join(pid.to_string()));
}

/// Kills etcds left behind by test processes that died without unwinding. Runs once
/// per test process. A record is acted on only when its owner is gone and the PID
/// still runs a command line naming the recorded data dir, so a reused PID is safe.
pub fn sweep_orphans() {
    static SWEPT: OnceLock<()> = OnceLock::new();
    SWEPT.get_or_init(|| {
        let Ok(entries) = std::fs::read_dir(registry_dir()) else {
            return;
        };
        for entry in entries.flatten() {
            let Some(pid) = entry
                .file_name()
                .to_str()
                .and_then(|s| s.parse::<u32>().ok())
            else {
                continue;
            };
            let record = std::fs::read_to_string(entry.path()).unwrap_or_default();
            let mut lines = record.lines();
            let owner = lines.next().and_then(|s| s.parse::<u32>().ok());
            let data_dir = lines.next().unwrap_or_default();
            if owner.is_some_and(pid_exists) {
                continue;
            }
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let cmdline = String::from_utf8_lossy(&cmdline);
            if !data_dir.is_empty() && cmdline.contains(data_dir) {
                signal(pid, Signal::SIGKILL);
            }
            remove_abandoned_cluster_dir(Path::new(data_dir));
            let _ = std::fs::remove_file(entry.path());
        }
    });
}

/// Removes `<tmp>/etcd-<version>-XXXX/` given one of its `mN/data` dirs: the temp
/// dir an aborted test process could not delete. Anything else is left alone.
fn remove_abandoned_cluster_dir(data_dir: &Path) {
    let Some(cluster_dir) = data_dir.parent().and_then(Path::parent) else {
        return;
    };
    let in_temp = cluster_dir.parent() == Some(std::env::temp_dir().as_path());
    let ours = cluster_dir
        .file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.starts_with("etcd-3."));
    if in_temp && ours && data_dir.file_name() == Some(std::ffi::OsStr::new("data")) {
        let _ = std::fs::remove_dir_all(cluster_dir);
    }
}
