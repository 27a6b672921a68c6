//! The machine-wide node lock: one node per machine at a time.
//!
//! A node changes what is not its own (sysctls, cgroups at the root of every
//! hierarchy, `/var/lib/kubelet/device-plugins`, `/run/containerd/s`), so two nodes
//! at once would tear down each other's state. The lock is an exclusive `flock` on
//! [`LOCK_PATH`]: released by the kernel when its holder dies, however it dies, and
//! exclusive between threads of one process too (each takes its own open file
//! description). A waiter polls with a bounded patience (`NODE_LOCK_WAIT_SECS`,
//! default [`DEFAULT_LOCK_WAIT`]) and then fails, naming the holder the lock file
//! records.

use std::fs::{File, OpenOptions};
use std::io::{Seek, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};

/// Where the lock lives: `/run` is per boot and root's, like the state it guards.
pub const LOCK_PATH: &str = "/run/etcd-member-agent-node.lock";

/// How long [`NodeLock::acquire`] waits by default: longer than a whole run of the
/// node tests in another process (about 10 minutes).
pub const DEFAULT_LOCK_WAIT: Duration = Duration::from_secs(30 * 60);

/// The held lock; released when dropped (or when the process dies).
pub struct NodeLock {
    _lock: Flock<File>,
}

/// `NODE_LOCK_WAIT_SECS`, else [`DEFAULT_LOCK_WAIT`].
pub fn lock_wait() -> Duration {
    std::env::var("NODE_LOCK_WAIT_SECS")
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
        .map(Duration::from_secs)
        .unwrap_or(DEFAULT_LOCK_WAIT)
}

impl NodeLock {
    /// Takes the lock, waiting at most `wait`; `who` (the test's name) is written
    /// into the lock file for whoever waits next. Panics when the wait runs out,
    /// naming the holder.
    pub fn acquire(who: &str, wait: Duration) -> NodeLock {
        let path = Path::new(LOCK_PATH);
        let start = Instant::now();
        let mut announced = false;
        let mut pause = Duration::from_millis(50);
        loop {
            let file = OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .mode(0o644)
                .open(path)
                .unwrap_or_else(|e| panic!("cannot open the node lock {LOCK_PATH}: {e}"));
            match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
                Ok(mut lock) => {
                    let _ = lock.set_len(0);
                    let _ = lock.rewind();
                    let _ = writeln!(lock, "pid {} test {who}", std::process::id());
                    if announced {
                        eprintln!("node lock taken after {:.1?}", start.elapsed());
                    }
                    return NodeLock { _lock: lock };
                }
                Err((_, Errno::EWOULDBLOCK)) => {}
                Err((_, e)) => panic!("cannot lock {LOCK_PATH}: {e}"),
            }
            let holder = std::fs::read_to_string(path).unwrap_or_default();
            let holder = match holder.trim() {
                "" => "a test process starting its node",
                h => h,
            }
            .to_owned();
            if start.elapsed() >= wait {
                panic!(
                    "another node holds {LOCK_PATH} ({holder}) after waiting {:.0?} \
                     (NODE_LOCK_WAIT_SECS); only one node may run on a machine",
                    start.elapsed()
                );
            }
            if !announced {
                eprintln!("waiting for the node lock {LOCK_PATH}, held by {holder}");
                announced = true;
            }
            std::thread::sleep(pause.min(wait.saturating_sub(start.elapsed())));
            pause = (pause * 2).min(Duration::from_secs(1));
        }
    }
}
