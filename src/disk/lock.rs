//! Is an etcd process using this data dir right now? Answered without taking any
//! lock: etcd try-locks every WAL segment with OFD locks and dies on a conflict,
//! and bbolt waits forever on a held `flock`, so the inspector must only *look*.
//!
//! Two independent probes: `F_OFD_GETLK` on each WAL segment (reports a
//! conflicting OFD lock held through another open file description), and
//! `/proc/locks`, which also shows the backend's `flock` that no fcntl can query.
//!
//! `/proc/locks` is not free: the kernel write-locks its file-lock lists to print
//! them, which waits for an RCU grace period (5–15 ms on the test machine, the
//! largest single cost of a pre-start check). [`Probe`] lets a caller that needs
//! only "is etcd running on this WAL" skip it; see its variants for what each sees.

use std::fs::File;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use serde::Serialize;

/// A lock some other process holds on a data-dir file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HeldLock {
    /// The data-dir file the lock is on (the backend or a WAL segment), matched
    /// to `/proc/locks` by device and inode.
    pub path: PathBuf,
    /// `OFDLCK`, `FLOCK` or `POSIX`.
    pub kind: String,
    /// The holder's PID when the kernel reports one (OFD locks report none).
    pub pid: Option<i32>,
}

/// Probes `F_OFD_GETLK` for a write lock over the whole file. `Ok(true)` when a
/// conflicting lock exists. The file is opened read-only; no lock is taken.
pub(crate) fn ofd_conflict(path: &Path) -> std::io::Result<bool> {
    let file = File::options()
        .read(true)
        .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_CLOEXEC)
        .open(path)?;
    let mut fl = whole_file(nix::libc::F_WRLCK);
    nix::fcntl::fcntl(&file, nix::fcntl::FcntlArg::F_OFD_GETLK(&mut fl))
        .map_err(std::io::Error::from)?;
    Ok(fl.l_type != nix::libc::F_UNLCK as i16)
}

/// A lock record of type `l_type` (`F_WRLCK`, `F_UNLCK`, ...) over the whole file.
fn whole_file(l_type: nix::libc::c_int) -> nix::libc::flock {
    nix::libc::flock {
        l_type: l_type as i16,
        l_whence: nix::libc::SEEK_SET as i16,
        l_start: 0,
        l_len: 0,
        l_pid: 0,
    }
}

/// A lock line of `/proc/locks`: kind, pid, device major, minor and inode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcLock {
    /// `FLOCK`, `OFDLCK`, `POSIX`, `LEASE`.
    pub kind: String,
    /// The holder's PID; -1 for OFD locks.
    pub pid: i32,
    /// Device major number.
    pub major: u64,
    /// Device minor number.
    pub minor: u64,
    /// Inode number.
    pub inode: u64,
}

/// Parses the text of `/proc/locks`, skipping waiters (`->`) and lines it cannot read.
pub fn parse_proc_locks(text: &str) -> Vec<ProcLock> {
    text.lines()
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.get(1) == Some(&"->") || f.len() < 6 {
                return None;
            }
            let mut dev = f[5].split(':');
            let major = u64::from_str_radix(dev.next()?, 16).ok()?;
            let minor = u64::from_str_radix(dev.next()?, 16).ok()?;
            let inode = dev.next()?.parse().ok()?;
            Some(ProcLock {
                kind: f[1].to_string(),
                pid: f[4].parse().ok()?,
                major,
                minor,
                inode,
            })
        })
        .collect()
}

fn dev_major(dev: u64) -> u64 {
    ((dev >> 8) & 0xfff) | ((dev >> 32) & !0xfff)
}

fn dev_minor(dev: u64) -> u64 {
    (dev & 0xff) | ((dev >> 12) & !0xff)
}

/// Where [`held_locks`] looks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Probe {
    /// `F_OFD_GETLK` on each file only. Sees etcd's WAL locks: etcd holds an OFD
    /// lock on every segment it has open, from opening the WAL until it exits
    /// (etcd takes OFD locks wherever `F_OFD_GETLK` works, and flocks
    /// otherwise; where the probe fails, `/proc/locks` is read after all).
    /// Misses a `flock` on the db alone — bbolt's, held while etcd opens its
    /// backend before the WAL, or an offline tool's. That flock is itself an
    /// exclusion etcd honours (a second etcd waits on it), so a pre-start check
    /// that misses it cannot put two etcds on one directory.
    Ofd,
    /// `/proc/locks` as well: sees `flock`s too and names the holders' PIDs.
    /// For commands that change the directory (`wipe`, `restore`) and `inspect`.
    #[default]
    Thorough,
}

/// Every lock another process holds on `files` (WAL segments, the backend db).
/// Files that vanish or cannot be opened are skipped: a read error is reported by
/// the readers, not here.
pub fn held_locks(files: &[PathBuf], probe: Probe) -> Vec<HeldLock> {
    // Each file with its OFD probe: `Some(held)`, or `None` when the probe
    // itself failed (a kernel or file system without OFD locks, where etcd
    // falls back to flock on the WAL too: only /proc/locks can tell then).
    let probed: Vec<(&PathBuf, std::fs::Metadata, Option<bool>)> = files
        .iter()
        .filter_map(|path| {
            let meta = std::fs::symlink_metadata(path).ok()?;
            let ofd = if meta.is_file() {
                match ofd_conflict(path) {
                    Ok(held) => Some(held),
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
                    Err(_) => None,
                }
            } else {
                Some(false)
            };
            Some((path, meta, ofd))
        })
        .collect();
    let read_proc_locks = !probed.is_empty()
        && (probe == Probe::Thorough || probed.iter().any(|(_, _, ofd)| ofd.is_none()));
    let proc_locks = if read_proc_locks {
        std::fs::read_to_string("/proc/locks")
            .map(|t| parse_proc_locks(&t))
            .unwrap_or_default()
    } else {
        Vec::new()
    };
    let me = std::process::id() as i32;
    let mut held = Vec::new();
    for (path, meta, ofd) in probed {
        let (major, minor, inode) = (dev_major(meta.dev()), dev_minor(meta.dev()), meta.ino());
        let mut found = false;
        for l in &proc_locks {
            if (l.major, l.minor, l.inode) == (major, minor, inode) && l.pid != me {
                found = true;
                held.push(HeldLock {
                    path: path.clone(),
                    kind: l.kind.clone(),
                    pid: (l.pid > 0).then_some(l.pid),
                });
            }
        }
        if !found && ofd == Some(true) {
            held.push(HeldLock {
                path: path.clone(),
                kind: "OFDLCK".into(),
                pid: None,
            });
        }
    }
    held
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_proc_locks_lines() {
        let text = "1: OFDLCK ADVISORY  WRITE -1 00:2d:1234 0 EOF\n\
                    2: FLOCK  ADVISORY  WRITE 4321 fd:01:99 0 EOF\n\
                    2: -> FLOCK  ADVISORY  WRITE 5555 fd:01:99 0 EOF\n\
                    garbage\n";
        let l = parse_proc_locks(text);
        assert_eq!(l.len(), 2);
        assert_eq!(l[0].kind, "OFDLCK");
        assert_eq!(
            (l[0].major, l[0].minor, l[0].inode, l[0].pid),
            (0, 0x2d, 1234, -1)
        );
        assert_eq!(
            (l[1].major, l[1].minor, l[1].inode, l[1].pid),
            (0xfd, 1, 99, 4321)
        );
    }

    #[test]
    fn sees_a_flock_held_by_another_descriptor_without_taking_one() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("db");
        std::fs::write(&p, b"x").unwrap();
        assert!(held_locks(std::slice::from_ref(&p), Probe::Thorough).is_empty());
        // A child process holds the flock, as bbolt inside etcd would.
        // --no-fork: the process we kill is the one holding the lock.
        let mut child = std::process::Command::new("flock")
            .arg("--no-fork")
            .arg(&p)
            .arg("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let mut seen = Vec::new();
        while std::time::Instant::now() < deadline {
            seen = held_locks(std::slice::from_ref(&p), Probe::Thorough);
            if !seen.is_empty() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        // The OFD probe alone does not see a flock (documented on `Probe::Ofd`).
        let ofd_only = held_locks(std::slice::from_ref(&p), Probe::Ofd);
        child.kill().unwrap();
        child.wait().unwrap();
        assert_eq!(seen.len(), 1, "{seen:?}");
        assert_eq!(seen[0].kind, "FLOCK");
        assert!(ofd_only.is_empty(), "{ofd_only:?}");
        // We never held a lock ourselves: a flock of our own now succeeds.
        let f = File::open(&p).unwrap();
        nix::fcntl::Flock::lock(f, nix::fcntl::FlockArg::LockExclusiveNonblock).unwrap();
    }

    #[test]
    fn both_probes_see_an_ofd_lock_held_through_another_description() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("0000000000000000-0000000000000000.wal");
        std::fs::write(&p, b"x").unwrap();
        assert!(held_locks(std::slice::from_ref(&p), Probe::Ofd).is_empty());
        // etcd's lock: an OFD write lock over the whole file, on its own open
        // file description (this one stands in for etcd's).
        let holder = File::options().read(true).write(true).open(&p).unwrap();
        let lock = whole_file(nix::libc::F_WRLCK);
        nix::fcntl::fcntl(&holder, nix::fcntl::FcntlArg::F_OFD_SETLK(&lock)).unwrap();
        for probe in [Probe::Ofd, Probe::Thorough] {
            let seen = held_locks(std::slice::from_ref(&p), probe);
            assert_eq!(seen.len(), 1, "{probe:?}: {seen:?}");
            assert_eq!(seen[0].kind, "OFDLCK", "{probe:?}");
        }
        let unlock = whole_file(nix::libc::F_UNLCK);
        nix::fcntl::fcntl(&holder, nix::fcntl::FcntlArg::F_OFD_SETLK(&unlock)).unwrap();
        assert!(held_locks(std::slice::from_ref(&p), Probe::Ofd).is_empty());
    }
}
