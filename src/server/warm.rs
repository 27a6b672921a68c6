//! The sidecar's read-ahead for etcd's start (`--read-ahead`,
//! docs/performance.md).
//!
//! etcd opens its backend first (bbolt with `MAP_POPULATE`), then reads its
//! WAL, then rebuilds its index from the backend (`mvcc.restore`; every line
//! 3.4–3.7). `preflight` reads and verifies the WAL, which leaves it in the
//! page cache; but an init container's processes end with it, so whatever
//! preflight reads ahead of the backend must be finished before etcd can
//! start, and read beside the WAL it delays the verdict (the disk is the
//! limit). The sidecar runs beside etcd: once this Pod start's verdict is
//! `start` it asks the kernel to read the backend and the newest `.snap` ahead
//! ([`crate::disk::warm`]) while etcd opens them, and it says so when it
//! starts ([`Handoff`], beside the verdict file) so that preflight leaves
//! those files to it and etcd starts as soon as the WAL is verified.
//!
//! Advice only: it reads nothing into the process, changes no byte, and
//! decides nothing. A verdict decided before this process started (a sidecar
//! restarted while etcd runs) is not acted on: etcd has read its backend by
//! then.

use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::boot::{PodStart, VerdictState};
use crate::disk::layout::Paths;
use crate::disk::warm::{self, Handoff, Memory};

/// The longest the read-ahead's advice runs: past it the thread stops at its
/// next chunk (a volume slower than this is not helped by it).
const BOUND: Duration = Duration::from_secs(600);

/// A handoff written: where, and the room it announced.
#[derive(Debug, Clone)]
pub struct Announced {
    /// The file ([`withdraw`] removes it).
    pub path: PathBuf,
    /// The room for page cache it announced (`None`: no limit).
    pub room: Option<u64>,
}

/// Writes the handoff beside `verdict_file` (best effort: without it preflight
/// reads ahead itself). Removed by [`withdraw`] at shutdown.
pub async fn announce(verdict_file: PathBuf, this_start: PodStart) -> Option<Announced> {
    let path = verdict_file.with_file_name(warm::HANDOFF_FILE);
    let write = tokio::task::spawn_blocking(move || {
        if !path.parent().is_some_and(std::path::Path::is_dir) {
            return None;
        }
        let h = Handoff {
            pod_uid: this_start.pod_uid,
            boot_id: this_start.boot_id,
            room: Memory::of_this_process().and_then(|m| m.room()),
        };
        let bytes = serde_json::to_vec(&h).ok()?;
        match crate::output::write_atomic(&path, &bytes) {
            Ok(()) => {
                tracing::info!(path = %path.display(), room_mib = ?h.room.map(|r| r >> 20), "will read the backend ahead for etcd once the verdict is start");
                Some(Announced { path, room: h.room })
            }
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "cannot write the read-ahead handoff; preflight reads ahead itself");
                None
            }
        }
    });
    match tokio::time::timeout(Duration::from_secs(5), write).await {
        Ok(Ok(written)) => written,
        _ => None,
    }
}

/// Removes the handoff written by [`announce`], so that a preflight run
/// while no sidecar runs reads ahead itself.
pub fn withdraw(path: &std::path::Path) {
    let _ = std::fs::remove_file(path);
}

/// Waits for this Pod start's `start` verdict decided since `started`, then
/// reads the backend ahead, until done or `shutdown`. Whether it fits the
/// memory limit is judged on the room `announced` to preflight, the number
/// preflight left the files to this container on (by then this container's
/// own read of the WAL at boot is charged to it too, but it is reclaimable);
/// without an announcement, on the room left now.
pub async fn read_ahead_on_start(
    paths: Paths,
    announced: Option<Announced>,
    mut verdict: watch::Receiver<VerdictState>,
    started: SystemTime,
    shutdown: CancellationToken,
) {
    let since = started
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    loop {
        let decided = verdict
            .borrow_and_update()
            .verdict
            .as_ref()
            .filter(|v| v.verdict == "start")
            .map(|v| v.decided_at_unix);
        match decided {
            // Decided before this process started: etcd has started already.
            Some(Some(at)) if at < since => {
                tracing::debug!(
                    "no read-ahead: this Pod start's verdict is older than this sidecar"
                );
                return;
            }
            Some(_) => break,
            None => {}
        }
        tokio::select! {
            () = shutdown.cancelled() => return,
            changed = verdict.changed() => if changed.is_err() { return },
        }
    }
    let t = Instant::now();
    let reading = match announced {
        Some(Announced { room, .. }) => warm::start_for(
            &paths,
            move || {
                Some(Memory {
                    limit: room,
                    usage: 0,
                })
            },
            false,
        ),
        None => warm::start_for(&paths, Memory::of_this_process, false),
    };
    let stop = reading.stop_flag();
    let mut done =
        tokio::task::spawn_blocking(move || reading.finish(true, Instant::now() + BOUND));
    let warmed = tokio::select! {
        () = shutdown.cancelled() => {
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
            return;
        }
        r = &mut done => r.ok().flatten(),
    };
    match warmed {
        Some(warm::Warmed { skipped: Some(skip), .. }) => tracing::warn!(
            room_mib = skip.room >> 20,
            need_mib = skip.need >> 20,
            "read-ahead skipped: this container's memory limit leaves {} MiB for page cache, less than the {} MiB of db etcd reads on start; raise the sidecar's memory limit above that (or remove it) to let it warm etcd's cold start",
            skip.room >> 20,
            skip.need >> 20
        ),
        Some(w) => tracing::info!(
            files = w.files,
            bytes = w.bytes,
            cached = w.cached,
            elapsed_ms = t.elapsed().as_millis() as u64,
            "read the backend ahead for etcd"
        ),
        None => tracing::info!("read-ahead cut short by its bound"),
    }
}
