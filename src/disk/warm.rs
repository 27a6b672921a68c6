//! Read-ahead of what etcd reads when it starts, while `preflight` decides.
//!
//! A member on its real way back (a node rebooted, a Pod rescheduled, a volume
//! attached elsewhere) starts with a cold page cache. Preflight reads and
//! verifies the whole WAL on every core, which leaves the WAL in the cache for
//! etcd's single-threaded reads of it. The backend is the other half of etcd's
//! start, and its first: every line (3.4–3.7) opens bbolt with `MAP_POPULATE`
//! (the whole db faulted in through the mmap before anything else), then reads
//! the WAL, then rebuilds the MVCC index from the whole key bucket
//! (`mvcc.restore`, every key and value through the mmap). On its own that
//! cold read is slow and, measured, sometimes leaves much of the db for the
//! restore to fault in again page by page (docs/performance.md). This module
//! asks the kernel to read the backend ahead, sequentially, and the newest
//! `.snap` (the one etcd loads).
//! Nothing else: not the WAL segments etcd will not replay, not the older
//! `.snap` files.
//!
//! It only advises (`posix_fadvise(POSIX_FADV_WILLNEED)`, in chunks: the
//! kernel caps one call at its read-ahead window), skipping the chunks already
//! in the page cache (three one-byte `preadv2(RWF_NOWAIT)` probes per chunk,
//! answered from the cache or refused, never starting I/O: the only bytes it
//! reads into the process), never changes a byte, and never decides anything: the verdict and the report
//! are the same with it on or off. The read-ahead stops at the next chunk when
//! the verdict is not `start` (etcd will not read the files), and the process
//! waits for it only after the verdict has been written, and only until the
//! deadline.
//!
//! Page cache is charged to the memory cgroup of the process that reads it in:
//! under a container memory limit that cannot hold the WAL and the backend
//! together (the shipped 256 MiB limit and a 1 GiB WAL), what is read ahead is
//! reclaimed before etcd reads it, and evicts the WAL preflight just read.
//! The read-ahead is then skipped ([`Memory`]): it would only add I/O.

use std::fs::File;
use std::os::fd::AsFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::thread;
use std::time::Instant;

use nix::fcntl::{posix_fadvise, PosixFadviseAdvice};

use super::layout::Paths;

/// One advice covers this much: above the kernel's cap on one call
/// (`max(io_pages, ra_pages)`, 128 KiB to a few MiB), small enough that a stop
/// is seen quickly.
const CHUNK: i64 = 4 << 20;

/// What was advised.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Warmed {
    /// Files advised.
    pub files: usize,
    /// Bytes covered: advised, or found in the page cache already.
    pub bytes: u64,
    /// Of those, bytes that needed no read (not advised): in the page cache
    /// already, or holes of a sparse file, which a read answers with zeros.
    pub cached: u64,
    /// Whether the advice stopped before the end (the verdict was not `start`).
    pub stopped: bool,
    /// Set when nothing was advised because the container's memory limit
    /// leaves less room for page cache than the WAL and the files to read
    /// ahead need.
    pub skipped: Option<Skipped>,
    /// Set when the sidecar reads the files ahead for this Pod start
    /// ([`Handoff`]): preflight then advised nothing.
    pub handed_off: bool,
}

/// Why the read-ahead was skipped: the room under the memory limit, and what
/// the WAL and the read-ahead would have needed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Skipped {
    /// Bytes the memory cgroup can still charge (its limit, the lowest of its
    /// ancestors' it can see, less what it uses).
    pub room: u64,
    /// The WAL's bytes plus the files' to read ahead.
    pub need: u64,
}

/// The memory cgroup this process is charged to: cgroup v2's `memory.max` and
/// `memory.current`, or v1's `memory.limit_in_bytes` (the lowest of the
/// hierarchy through `memory.stat`'s `hierarchical_memory_limit`) and
/// `memory.usage_in_bytes`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Memory {
    /// The limit; `None` when there is none.
    pub limit: Option<u64>,
    /// What is charged now.
    pub usage: u64,
}

impl Memory {
    /// The room left for page cache; `None` without a limit.
    pub fn room(&self) -> Option<u64> {
        self.limit.map(|l| l.saturating_sub(self.usage))
    }

    /// Reads this process's memory cgroup under `root` (`/sys/fs/cgroup`) from
    /// `proc_cgroup` (the text of `/proc/self/cgroup`). `None` when no memory
    /// controller can be read: then nothing is known, and the read-ahead runs.
    pub fn read(root: &Path, proc_cgroup: &str) -> Option<Memory> {
        let mut v1 = None;
        let mut v2 = None;
        for line in proc_cgroup.lines() {
            let mut parts = line.splitn(3, ':');
            let (Some(id), Some(controllers), Some(path)) =
                (parts.next(), parts.next(), parts.next())
            else {
                continue;
            };
            // A path that climbs (`..`: a process outside its cgroup
            // namespace's root) names no cgroup under `root` to read.
            if Path::new(path).components().any(|c| {
                !matches!(
                    c,
                    std::path::Component::RootDir | std::path::Component::Normal(_)
                )
            }) {
                continue;
            }
            if id == "0" && controllers.is_empty() {
                v2 = Some(path.trim_start_matches('/'));
            } else if controllers.split(',').any(|c| c == "memory") {
                v1 = Some(path.trim_start_matches('/'));
            }
        }
        if let Some(path) = v1 {
            // The cgroup's own directory as the host sees it, or, in a
            // container (its cgroup mounted as the root), the root itself.
            let base = root.join("memory");
            for dir in [base.join(path), base.clone()] {
                if let Some(m) = read_v1(&dir) {
                    return Some(m);
                }
            }
        }
        if let Some(path) = v2 {
            for dir in [root.join(path), root.to_path_buf()] {
                if let Some(m) = read_v2(root, &dir) {
                    return Some(m);
                }
            }
        }
        None
    }

    /// [`Memory::read`] of this process.
    pub fn of_this_process() -> Option<Memory> {
        let text = std::fs::read_to_string("/proc/self/cgroup").ok()?;
        Memory::read(Path::new("/sys/fs/cgroup"), &text)
    }
}

/// A limit of this many bytes or more is none (v1 writes `PAGE_COUNTER_MAX`
/// pages as 9223372036854771712).
const NO_LIMIT: u64 = 1 << 62;

fn read_number(path: &Path) -> Option<u64> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

fn read_v1(dir: &Path) -> Option<Memory> {
    let usage = read_number(&dir.join("memory.usage_in_bytes"))?;
    let own = read_number(&dir.join("memory.limit_in_bytes"))?;
    let hierarchical = std::fs::read_to_string(dir.join("memory.stat"))
        .ok()
        .and_then(|stat| {
            stat.lines().find_map(|l| {
                l.strip_prefix("hierarchical_memory_limit ")
                    .and_then(|n| n.trim().parse::<u64>().ok())
            })
        });
    let limit = hierarchical.map_or(own, |h| h.min(own));
    Some(Memory {
        limit: (limit < NO_LIMIT).then_some(limit),
        usage,
    })
}

fn read_v2(root: &Path, dir: &Path) -> Option<Memory> {
    let usage = read_number(&dir.join("memory.current"))?;
    // The lowest `memory.max` from this cgroup up to the root it can see.
    let mut limit: Option<u64> = None;
    let mut at = Some(dir);
    while let Some(d) = at {
        if let Ok(text) = std::fs::read_to_string(d.join("memory.max")) {
            if let Ok(n) = text.trim().parse::<u64>() {
                limit = Some(limit.map_or(n, |l| l.min(n)));
            }
        }
        if d == root {
            break;
        }
        at = d.parent().filter(|p| p.starts_with(root));
    }
    Some(Memory {
        limit: limit.filter(|&l| l < NO_LIMIT),
        usage,
    })
}

/// Whether reading `ahead` bytes ahead after a WAL of `wal` bytes fits the
/// memory cgroup: what does not fit is reclaimed before etcd reads it.
pub fn fits(memory: Option<Memory>, wal: u64, ahead: u64) -> Result<(), Skipped> {
    let need = wal.saturating_add(ahead);
    match memory.and_then(|m| m.room()) {
        Some(room) if room < need => Err(Skipped { room, need }),
        _ => Ok(()),
    }
}

/// The bytes of the WAL's segments in `dir` (its `.wal` files, not etcd's
/// preallocated `.tmp`); what cannot be listed counts 0.
fn dir_bytes(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .filter_map(|e| {
            let e = e.ok()?;
            e.file_name()
                .to_str()?
                .ends_with(".wal")
                .then(|| e.metadata().ok())?
        })
        .filter(|m| m.is_file())
        .map(|m| m.len())
        .sum()
}

fn file_bytes(files: &[PathBuf]) -> u64 {
    files
        .iter()
        .filter_map(|f| std::fs::symlink_metadata(f).ok())
        .filter(|m| m.is_file())
        .map(|m| m.len())
        .sum()
}

/// A read-ahead in progress; [`ReadAhead::finish`] ends it.
#[derive(Debug)]
pub struct ReadAhead {
    stop: Arc<AtomicBool>,
    done: mpsc::Receiver<Warmed>,
}

/// The files etcd reads on start that the WAL read does not already cache:
/// the backend and the newest `.snap`.
pub fn targets(paths: &Paths) -> Vec<PathBuf> {
    let mut files = vec![paths.snap_dir.join("db")];
    if let Ok(entries) = std::fs::read_dir(&paths.snap_dir) {
        // etcd names snapshots `<term>-<index>.snap` in fixed-width hex: the
        // greatest name is the newest, the one etcd tries first.
        let newest = entries
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|n| n.len() == 38 && n.ends_with(".snap"))
            .max();
        files.extend(newest.map(|n| paths.snap_dir.join(n)));
    }
    files
}

/// Starts advising the kernel to read ahead what etcd reads on start in the
/// directory `paths` names ([`targets`]), on a thread of its own: listing the
/// snapshot directory, like every access to the volume, happens there, so a
/// volume that hangs holds that thread, never the decision.
///
/// Skipped when `memory` (this process's memory cgroup, read on that thread
/// too: [`Memory::of_this_process`]) leaves less room than those files need,
/// plus the WAL's segments when `wal_charged` (preflight's case: its own
/// read of the WAL is charged to the same cgroup; the sidecar's is not,
/// [`fits`]).
pub fn start_for(
    paths: &Paths,
    memory: impl FnOnce() -> Option<Memory> + Send + 'static,
    wal_charged: bool,
) -> ReadAhead {
    let paths = paths.clone();
    spawn(move || {
        let files = targets(&paths);
        let wal = if wal_charged {
            dir_bytes(&paths.wal_dir)
        } else {
            0
        };
        fits(memory(), wal, file_bytes(&files))
            .map(|()| Plan::Advise(files))
            .unwrap_or_else(Plan::Skip)
    })
}

/// [`start_for`], unless the sidecar said it reads the same files ahead for
/// this Pod start once the verdict is `start` ([`Handoff`], read from
/// `handoff` first thing on the read-ahead's thread): then nothing is read
/// ahead here, so that the WAL's verification has the disk to itself and the
/// verdict comes as soon as the WAL is read (the db read beside it delayed a
/// cold verdict by the db's own read time: 0.52 against 1.17 s, 1.1 GiB of
/// each, etcd 3.6); etcd starts then, opening the backend the sidecar is
/// bringing in, and reads the WAL the verification left in the page cache. A
/// handoff of another Pod start, or one whose room
/// under the sidecar's memory limit cannot hold the files, is not taken.
pub fn start_unless_handed_off(
    paths: &Paths,
    memory: impl FnOnce() -> Option<Memory> + Send + 'static,
    handoff: PathBuf,
    this_start: PodStart,
) -> ReadAhead {
    let paths = paths.clone();
    spawn(move || {
        let files = targets(&paths);
        let need = file_bytes(&files);
        if let Some(h) = Handoff::read(&handoff, &this_start) {
            if h.holds(need) {
                return Plan::HandedOff;
            }
        }
        fits(memory(), dir_bytes(&paths.wal_dir), need)
            .map(|()| Plan::Advise(files))
            .unwrap_or_else(Plan::Skip)
    })
}

/// The file, beside the verdict file, in which the sidecar says it reads ahead
/// for etcd ([`Handoff`]).
pub const HANDOFF_FILE: &str = "read-ahead.json";

/// The largest handoff file read; the sidecar's are under 200 bytes.
const MAX_HANDOFF_BYTES: u64 = 64 << 10;

/// The sidecar's word, written when it starts (before preflight, as a native
/// sidecar), that it will read the backend and the newest `.snap` ahead once
/// this Pod start's verdict is `start`, and how much page cache its memory
/// limit leaves room for. It decides nothing: a handoff that is wrong (a
/// sidecar that died since) costs the read-ahead, never a verdict.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Handoff {
    /// The Pod's UID (`POD_UID`), when the sidecar knew it.
    pub pod_uid: Option<String>,
    /// The node's boot ID, when the sidecar could read it.
    pub boot_id: Option<String>,
    /// Bytes the sidecar's memory cgroup could still charge when it started;
    /// `None` without a limit.
    pub room: Option<u64>,
}

impl Handoff {
    /// Whether the sidecar's room holds `need` bytes.
    pub fn holds(&self, need: u64) -> bool {
        self.room.is_none_or(|room| room >= need)
    }

    /// Reads the handoff at `path` if it is of `this_start` (as for the
    /// verdict file, [`PodStart::differs`]). `None` when there is none, it
    /// cannot be read, or it is of an earlier start.
    pub fn read(path: &Path, this_start: &PodStart) -> Option<Handoff> {
        use std::io::Read;
        let file = File::options()
            .read(true)
            .custom_flags(nix::fcntl::OFlag::O_NOFOLLOW.bits())
            .open(path)
            .ok()?;
        let mut bytes = Vec::new();
        file.take(MAX_HANDOFF_BYTES).read_to_end(&mut bytes).ok()?;
        let h: Handoff = serde_json::from_slice(&bytes).ok()?;
        this_start
            .differs(h.pod_uid.as_deref(), h.boot_id.as_deref())
            .is_none()
            .then_some(h)
    }
}

/// What identifies a Pod start, to tell a file this start wrote in the shared
/// volume (preflight's verdict, the sidecar's [`Handoff`]) from one an earlier
/// start left there.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodStart {
    /// The Pod's UID (`POD_UID`), when known.
    pub pod_uid: Option<String>,
    /// The node's boot ID, when readable.
    pub boot_id: Option<String>,
}

impl PodStart {
    /// Why a file written with this Pod UID and boot ID is not of this start,
    /// if it is not: a different Pod, or a node boot since. A record the file
    /// or this process lacks proves nothing either way (an older preflight
    /// wrote neither).
    pub fn differs(&self, pod_uid: Option<&str>, boot_id: Option<&str>) -> Option<String> {
        for (theirs, ours, what) in [
            (pod_uid, self.pod_uid.as_deref(), "Pod"),
            (boot_id, self.boot_id.as_deref(), "node boot"),
        ] {
            if let (Some(theirs), Some(ours)) = (theirs, ours) {
                if theirs != ours {
                    return Some(format!("written in {what} {theirs}, this is {what} {ours}"));
                }
            }
        }
        None
    }
}

/// Starts advising the kernel to read `files` ahead, on a thread of its own.
pub fn start(files: Vec<PathBuf>) -> ReadAhead {
    spawn(move || Plan::Advise(files))
}

/// What the read-ahead's thread found to do.
enum Plan {
    /// Advise these files.
    Advise(Vec<PathBuf>),
    Skip(Skipped),
    /// Nothing here: all to the sidecar, after the verdict.
    HandedOff,
}

fn spawn(plan: impl FnOnce() -> Plan + Send + 'static) -> ReadAhead {
    let stop = Arc::new(AtomicBool::new(false));
    let (tx, done) = mpsc::channel();
    let flag = Arc::clone(&stop);
    let spawned = thread::Builder::new()
        .name("read-ahead".into())
        .spawn(move || {
            let warmed = match plan() {
                Plan::Advise(files) => advise_all(&files, &flag),
                Plan::Skip(skipped) => Warmed {
                    skipped: Some(skipped),
                    ..Warmed::default()
                },
                Plan::HandedOff => Warmed {
                    handed_off: true,
                    ..Warmed::default()
                },
            };
            let _ = tx.send(warmed);
        });
    if let Err(e) = spawned {
        tracing::debug!(error = %e, "no read-ahead: cannot start its thread");
    }
    ReadAhead { stop, done }
}

/// Advises `files` in order, until `stop` is set.
fn advise_all(files: &[PathBuf], stop: &AtomicBool) -> Warmed {
    let mut warmed = Warmed::default();
    for f in files {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        if let Some((bytes, cached)) = advise(f, stop) {
            warmed.files += 1;
            warmed.bytes += bytes;
            warmed.cached += cached;
        }
    }
    warmed.stopped = stop.load(Ordering::Relaxed);
    warmed
}

/// Advises one file whole, chunk by chunk, but for the chunks already in the
/// page cache; returns the bytes covered and, of those, the bytes found cached.
/// `None` when it cannot be opened (a missing db, a symlink: nothing to do,
/// and nothing preflight must report).
fn advise(path: &Path, stop: &AtomicBool) -> Option<(u64, u64)> {
    let file = File::options()
        .read(true)
        .custom_flags(nix::fcntl::OFlag::O_NOFOLLOW.bits())
        .open(path)
        .ok()?;
    let len = i64::try_from(file.metadata().ok()?.len()).ok()?;
    let mut at = 0i64;
    let mut cached = 0u64;
    while at < len {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        let n = CHUNK.min(len - at);
        // A chunk already in the page cache (a warm restart) is not advised:
        // on a cached file the advice only walks the cache, page by page, and
        // takes a core from the WAL's verification for it.
        if in_cache(&file, [at, at + n / 2, at + n - 1]) {
            cached += n as u64;
        } else if posix_fadvise(file.as_fd(), at, n, PosixFadviseAdvice::POSIX_FADV_WILLNEED)
            .is_err()
        {
            break;
        }
        at += n;
    }
    Some((u64::try_from(at).ok()?, cached))
}

/// Whether the pages holding `offsets` of `file` are in the page cache: a
/// one-byte `preadv2(RWF_NOWAIT)` at each, which the kernel answers from the
/// cache or refuses without starting I/O (`EAGAIN`). A file system that does
/// not support it answers no, and the chunk is advised. A hole of a sparse
/// file (bbolt grows the db by truncating it longer) reads as zeros without
/// I/O and counts as cached: etcd's page faults do not read it either. A
/// sample: a chunk partly evicted, or holding data between holes at the
/// probes, is taken as cached, and etcd reads the rest itself.
fn in_cache(file: &File, offsets: [i64; 3]) -> bool {
    let mut byte = [0u8; 1];
    offsets.iter().all(|&at| {
        let Ok(at) = u64::try_from(at) else {
            return false;
        };
        matches!(
            rustix::io::preadv2(
                file,
                &mut [std::io::IoSliceMut::new(&mut byte)],
                at,
                rustix::io::ReadWriteFlags::NOWAIT,
            ),
            Ok(1)
        )
    })
}

impl ReadAhead {
    /// A flag that stops the read-ahead at its next chunk when set (for a
    /// caller that hands [`ReadAhead::finish`] to another thread).
    pub fn stop_flag(&self) -> Arc<AtomicBool> {
        Arc::clone(&self.stop)
    }

    /// Ends the read-ahead: lets it run to its end when `etcd_reads` (the
    /// verdict is `start`), waiting for it no later than `deadline`; stops it
    /// otherwise (at its next chunk). Returns what was advised, `None` when it
    /// had not finished by the deadline.
    pub fn finish(self, etcd_reads: bool, deadline: Instant) -> Option<Warmed> {
        if !etcd_reads {
            self.stop.store(true, Ordering::Relaxed);
        }
        let wait = deadline.saturating_duration_since(Instant::now());
        let warmed = self.done.recv_timeout(wait).ok();
        // Past the deadline the thread stops at its next chunk.
        self.stop.store(true, Ordering::Relaxed);
        warmed
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn the_backend_and_only_the_newest_snap_are_read_ahead() {
        let dir = tempfile::tempdir().unwrap();
        let paths = Paths::new(dir.path(), None);
        std::fs::create_dir_all(&paths.snap_dir).unwrap();
        for n in [
            "0000000000000002-0000000000002711.snap",
            "0000000000000003-0000000000004e22.snap",
            "0000000000000003-0000000000004e22.snap.broken",
            "db.tmp",
        ] {
            std::fs::write(paths.snap_dir.join(n), b"x").unwrap();
        }
        assert_eq!(
            targets(&paths),
            [
                paths.snap_dir.join("db"),
                paths
                    .snap_dir
                    .join("0000000000000003-0000000000004e22.snap")
            ]
        );
    }

    #[test]
    fn advice_covers_every_file_that_exists_and_changes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("db");
        let bytes: Vec<u8> = (0..(9 << 20)).map(|i| (i % 251) as u8).collect();
        std::fs::write(&db, &bytes).unwrap();
        let missing = dir.path().join("missing");
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&db, &link).unwrap();
        let before = std::fs::metadata(&db).unwrap().modified().unwrap();
        let warmed = start(vec![db.clone(), missing, link])
            .finish(true, Instant::now() + Duration::from_secs(30))
            .expect("finished");
        assert_eq!(
            warmed,
            Warmed {
                files: 1,
                bytes: 9 << 20,
                cached: 9 << 20,
                stopped: false,
                skipped: None,
                handed_off: false
            }
        );
        assert_eq!(std::fs::read(&db).unwrap(), bytes);
        assert_eq!(std::fs::metadata(&db).unwrap().modified().unwrap(), before);
    }

    fn write(path: &Path, text: &str) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    #[test]
    fn the_memory_cgroup_is_read_on_v1_with_its_hierarchy() {
        let root = tempfile::tempdir().unwrap();
        let proc = "12:memory:/kubepods/pod1/c1\n11:cpu,cpuacct:/kubepods/pod1/c1\n0::/\n";
        let dir = root.path().join("memory/kubepods/pod1/c1");
        write(&dir.join("memory.usage_in_bytes"), "50331648\n");
        write(&dir.join("memory.limit_in_bytes"), "268435456\n");
        write(
            &dir.join("memory.stat"),
            "cache 1\nhierarchical_memory_limit 134217728\nrss 2\n",
        );
        let m = Memory::read(root.path(), proc).expect("v1");
        assert_eq!(
            m,
            Memory {
                limit: Some(128 << 20),
                usage: 48 << 20
            },
            "the pod's lower limit counts"
        );
        assert_eq!(m.room(), Some(80 << 20));
        // No limit anywhere: v1's PAGE_COUNTER_MAX.
        write(&dir.join("memory.limit_in_bytes"), "9223372036854771712\n");
        write(
            &dir.join("memory.stat"),
            "hierarchical_memory_limit 9223372036854771712\n",
        );
        assert_eq!(Memory::read(root.path(), proc).unwrap().limit, None);
        // In a container its own cgroup is the mount's root.
        let inside = tempfile::tempdir().unwrap();
        write(&inside.path().join("memory/memory.usage_in_bytes"), "1");
        write(&inside.path().join("memory/memory.limit_in_bytes"), "4096");
        assert_eq!(Memory::read(inside.path(), proc).unwrap().limit, Some(4096));
    }

    #[test]
    fn the_memory_cgroup_is_read_on_v2_with_its_ancestors() {
        let root = tempfile::tempdir().unwrap();
        let proc = "0::/kubepods/pod1/c1\n";
        let dir = root.path().join("kubepods/pod1/c1");
        write(&dir.join("memory.current"), "1048576\n");
        write(&dir.join("memory.max"), "max\n");
        write(&root.path().join("kubepods/pod1/memory.max"), "67108864\n");
        let m = Memory::read(root.path(), proc).expect("v2");
        assert_eq!(m.limit, Some(64 << 20), "the pod's limit");
        assert_eq!(m.room(), Some(63 << 20));
        write(&root.path().join("kubepods/pod1/memory.max"), "max\n");
        assert_eq!(Memory::read(root.path(), proc).unwrap().limit, None);
    }

    #[test]
    fn an_unreadable_or_garbled_cgroup_is_unknown_and_never_panics() {
        let root = tempfile::tempdir().unwrap();
        assert_eq!(Memory::read(root.path(), "12:memory:/x\n0::/\n"), None);
        write(&root.path().join("memory/x/memory.usage_in_bytes"), "lots");
        write(
            &root.path().join("memory/x/memory.limit_in_bytes"),
            "\u{0}\u{ff}",
        );
        for proc in [
            "",
            ":::",
            "12:memory",
            "\n\n0::",
            "x:memory:/x",
            "0::/../../..",
        ] {
            let _ = Memory::read(root.path(), proc);
        }
        assert_eq!(Memory::read(root.path(), "12:memory:/x\n"), None);
        // A path that climbs out of the root is not read, nor replaced by the
        // root's own files.
        write(&root.path().join("memory.current"), "1");
        write(&root.path().join("memory.max"), "4096");
        assert_eq!(Memory::read(root.path(), "0::/../sibling\n"), None);
        assert!(Memory::read(root.path(), "0::/\n").is_some());
    }

    #[test]
    fn the_read_ahead_runs_only_where_the_wal_and_the_files_fit() {
        let limited = |limit, usage| {
            Some(Memory {
                limit: Some(limit),
                usage,
            })
        };
        assert_eq!(fits(None, 1 << 30, 1 << 30), Ok(()), "nothing known");
        let unlimited = Some(Memory {
            limit: None,
            usage: 1 << 20,
        });
        assert_eq!(fits(unlimited, 1 << 30, 1 << 30), Ok(()));
        assert_eq!(fits(limited(3 << 30, 1 << 20), 1 << 30, 1 << 30), Ok(()));
        assert_eq!(
            fits(limited(256 << 20, 16 << 20), 1 << 30, 1 << 30),
            Err(Skipped {
                room: 240 << 20,
                need: 2 << 30
            }),
            "the shipped 256 MiB limit and a 1 GiB WAL and db"
        );
        assert!(
            fits(limited(1 << 20, 2 << 20), 0, 0).is_ok(),
            "nothing to read"
        );
    }

    #[test]
    fn a_read_ahead_that_does_not_fit_advises_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let paths = Paths::new(dir.path(), None);
        std::fs::create_dir_all(&paths.snap_dir).unwrap();
        std::fs::create_dir_all(&paths.wal_dir).unwrap();
        std::fs::write(paths.snap_dir.join("db"), vec![1u8; 1 << 20]).unwrap();
        std::fs::write(
            paths.wal_dir.join("0000000000000000-0000000000000000.wal"),
            vec![0u8; 1 << 20],
        )
        .unwrap();
        // etcd's preallocated next segment is not read on start.
        std::fs::write(paths.wal_dir.join("0.tmp"), vec![0u8; 4 << 20]).unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        let tight = Memory {
            limit: Some((2 << 20) - 1),
            usage: 0,
        };
        let w = start_for(&paths, move || Some(tight), true)
            .finish(true, deadline)
            .unwrap();
        assert_eq!(
            w,
            Warmed {
                skipped: Some(Skipped {
                    room: (2 << 20) - 1,
                    need: 2 << 20
                }),
                ..Warmed::default()
            }
        );
        let room = Memory {
            limit: Some(2 << 20),
            usage: 0,
        };
        let w = start_for(&paths, move || Some(room), true)
            .finish(true, deadline)
            .unwrap();
        assert_eq!((w.files, w.bytes, w.skipped), (1, 1 << 20, None));
        // The sidecar's read-ahead: its cgroup was not charged for the WAL.
        let w = start_for(&paths, move || Some(tight), false)
            .finish(true, deadline)
            .unwrap();
        assert_eq!((w.files, w.bytes, w.skipped), (1, 1 << 20, None));
    }

    #[test]
    fn preflight_leaves_the_read_ahead_to_a_sidecar_of_this_pod_start_with_room() {
        let dir = tempfile::tempdir().unwrap();
        let paths = Paths::new(&dir.path().join("data"), None);
        std::fs::create_dir_all(&paths.snap_dir).unwrap();
        std::fs::create_dir_all(&paths.wal_dir).unwrap();
        std::fs::write(paths.snap_dir.join("db"), vec![1u8; 1 << 20]).unwrap();
        let handoff = dir.path().join(HANDOFF_FILE);
        let deadline = Instant::now() + Duration::from_secs(30);
        let this = || PodStart {
            pod_uid: Some("pod-a".to_owned()),
            boot_id: Some("boot-1".to_owned()),
        };
        let run = || {
            start_unless_handed_off(&paths, || None, handoff.clone(), this())
                .finish(true, deadline)
                .unwrap()
        };
        // No sidecar said anything: preflight reads ahead itself.
        assert_eq!((run().files, run().handed_off), (1, false));
        // Under a limit that cannot hold the WAL and the db, not at all.
        let tight = || {
            start_unless_handed_off(
                &paths,
                || {
                    Some(Memory {
                        limit: Some(1),
                        usage: 0,
                    })
                },
                handoff.clone(),
                this(),
            )
            .finish(true, deadline)
            .unwrap()
        };
        assert_eq!((tight().files, tight().handed_off), (0, false));
        let write = |h: &Handoff| std::fs::write(&handoff, serde_json::to_vec(h).unwrap()).unwrap();
        let mut h = Handoff {
            pod_uid: Some("pod-a".into()),
            boot_id: Some("boot-1".into()),
            room: None,
        };
        write(&h);
        // Preflight reads nothing ahead: the WAL's read has the disk, and the
        // sidecar reads the rest once the verdict is out; so too under a
        // limit of its own that could not hold them.
        let w = run();
        assert_eq!((w.files, w.bytes, w.handed_off), (0, 0, true), "{w:?}");
        assert_eq!((tight().files, tight().handed_off), (0, true));
        h.room = Some(1 << 20);
        write(&h);
        assert!(run().handed_off, "room for the db exactly");
        h.room = Some((1 << 20) - 1);
        write(&h);
        assert_eq!((run().files, run().handed_off), (1, false), "no room");
        h.room = None;
        h.pod_uid = Some("pod-b".into());
        write(&h);
        assert!(!run().handed_off, "another Pod's sidecar");
        h.pod_uid = Some("pod-a".into());
        h.boot_id = Some("boot-0".into());
        write(&h);
        assert!(!run().handed_off, "before the node's last boot");
        h.boot_id = None;
        write(&h);
        assert!(run().handed_off, "a record one side lacks proves nothing");
        std::fs::write(&handoff, b"{\"pod_uid\": 7").unwrap();
        assert!(!run().handed_off, "unreadable");
    }

    #[test]
    fn chunks_already_in_the_page_cache_are_not_advised() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("db");
        std::fs::write(&db, vec![7u8; 9 << 20]).unwrap();
        let file = File::open(&db).unwrap();
        file.sync_all().unwrap();
        // Just written: in the cache, every chunk.
        let stop = AtomicBool::new(false);
        assert_eq!(advise(&db, &stop), Some((9 << 20, 9 << 20)));
        posix_fadvise(file.as_fd(), 0, 0, PosixFadviseAdvice::POSIX_FADV_DONTNEED).unwrap();
        assert!(!in_cache(&file, [0, 4 << 20, (9 << 20) - 1]), "evicted");
        let (bytes, cached) = advise(&db, &stop).unwrap();
        assert_eq!(bytes, 9 << 20);
        assert!(
            cached < 9 << 20,
            "the evicted chunks were advised: {cached}"
        );
        assert!(
            !in_cache(&file, [-1, 0, 0]),
            "a negative offset is not probed"
        );
    }

    #[test]
    fn a_stop_ends_it_before_the_next_chunk() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("db");
        std::fs::write(&db, b"x").unwrap();
        let stop = AtomicBool::new(true);
        assert_eq!(
            advise_all(&[db.clone(), db], &stop),
            Warmed {
                files: 0,
                bytes: 0,
                cached: 0,
                stopped: true,
                skipped: None,
                handed_off: false
            }
        );
        // `finish` for a verdict other than `start` sets the same flag.
        let warmed = start(vec![dir.path().join("db")])
            .finish(false, Instant::now() + Duration::from_secs(30))
            .expect("finished");
        assert!(warmed.files <= 1);
    }
}
