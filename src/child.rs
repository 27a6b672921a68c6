//! Child processes with a bound that holds: each runs in its own process group,
//! and the whole group is killed when the time is up.
//!
//! Killing only the direct child is not enough. A tool that is a shell wrapper (or
//! a Go binary that forks a helper) leaves grandchildren behind, and they inherit
//! its stdout and stderr: a reader that waits for end-of-file then waits as long
//! as the grandchild lives (a wrapper running `sleep 600` held a 3 s timeout for
//! ten minutes). So the child leads a new process group (`process_group(0)`); the
//! deadline kills the group with `SIGKILL` before the leader is reaped (its pid,
//! the group's id, cannot be reused while it is a zombie); a leader that exits on
//! its own has what is left of its group killed too, since nothing it started
//! may outlive it. The pipes are read on threads and waited for only briefly
//! after the group is gone: a descendant that escaped the group (`setsid`)
//! cannot hold the caller either.

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::process::{Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::sys::signal::{killpg, Signal};
use nix::sys::wait::{waitid, Id, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;

/// How long the pipes are waited for once the group is gone.
const PIPE_GRACE: Duration = Duration::from_millis(500);

/// What a bounded run produced.
#[derive(Debug)]
pub struct Ran {
    /// How the child ended; `None` when it was killed at the deadline.
    pub status: Option<ExitStatus>,
    /// Its stdout, as far as it was read.
    pub stdout: Vec<u8>,
    /// Its stderr, as far as it was read.
    pub stderr: Vec<u8>,
}

/// Reads a pipe to its end on a thread; the result arrives on the channel.
fn drain(pipe: Option<impl Read + Send + 'static>) -> mpsc::Receiver<Vec<u8>> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut buf = Vec::new();
        if let Some(mut p) = pipe {
            let _ = p.read_to_end(&mut buf);
        }
        let _ = tx.send(buf);
    });
    rx
}

/// Waits until the leader `pid` has exited, without reaping it (`WNOWAIT`), or
/// until `deadline`. True when it exited.
fn exited_by(pid: Pid, deadline: Instant) -> std::io::Result<bool> {
    let mut pause = Duration::from_millis(5);
    loop {
        match waitid(
            Id::Pid(pid),
            WaitPidFlag::WEXITED | WaitPidFlag::WNOHANG | WaitPidFlag::WNOWAIT,
        ) {
            Ok(WaitStatus::StillAlive) => {}
            Ok(_) => return Ok(true),
            Err(Errno::EINTR) => continue,
            Err(e) => return Err(e.into()),
        }
        let now = Instant::now();
        if now >= deadline {
            return Ok(false);
        }
        std::thread::sleep(pause.min(deadline - now));
        pause = (pause * 2).min(Duration::from_millis(50));
    }
}

/// Runs `cmd` in its own process group with stdin closed and stdout/stderr
/// captured, killing the whole group at `timeout`. The caller sets the
/// environment.
pub fn run(cmd: &mut Command, timeout: Duration) -> std::io::Result<Ran> {
    // stdin: a pipe closed at once rather than /dev/null, which a bare image may lack.
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    let deadline = Instant::now() + timeout;
    let mut child = cmd.spawn()?;
    drop(child.stdin.take());
    let out = drain(child.stdout.take());
    let err = drain(child.stderr.take());
    let pid = Pid::from_raw(i32::try_from(child.id()).map_err(std::io::Error::other)?);
    let exited = match exited_by(pid, deadline) {
        Ok(exited) => exited,
        Err(e) => {
            let _ = killpg(pid, Signal::SIGKILL);
            let _ = child.wait();
            return Err(e);
        }
    };
    // The leader is not reaped yet, so the group id is still its own.
    match killpg(pid, Signal::SIGKILL) {
        Ok(()) | Err(Errno::ESRCH) => {}
        Err(e) => {
            tracing::warn!(pid = pid.as_raw(), error = %e, "cannot kill the child's process group")
        }
    }
    let status = child.wait()?;
    let grace = Instant::now() + PIPE_GRACE;
    let collect = |rx: mpsc::Receiver<Vec<u8>>| {
        rx.recv_timeout(grace.saturating_duration_since(Instant::now()))
            .unwrap_or_default()
    };
    Ok(Ran {
        status: exited.then_some(status),
        stdout: collect(out),
        stderr: collect(err),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_forked_grandchild_holding_the_pipes_does_not_hold_the_caller() {
        let started = Instant::now();
        let ran = run(
            Command::new("/bin/sh").args(["-c", "echo started; sleep 600; echo never"]),
            Duration::from_millis(300),
        )
        .unwrap();
        assert!(ran.status.is_none());
        assert_eq!(ran.stdout, b"started\n");
        assert!(started.elapsed() < Duration::from_secs(20));
    }

    #[test]
    fn what_a_leader_leaves_running_is_killed_when_it_exits() {
        let started = Instant::now();
        let ran = run(
            Command::new("/bin/sh").args(["-c", "sleep 600 & echo done"]),
            Duration::from_secs(30),
        )
        .unwrap();
        assert!(ran.status.is_some_and(|s| s.success()));
        assert_eq!(ran.stdout, b"done\n");
        assert!(started.elapsed() < Duration::from_secs(20));
    }
}
