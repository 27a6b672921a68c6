//! What the sidecar learns from the files before etcd runs: the verdict
//! `preflight` wrote for this Pod start ([`watch_verdict`]), and the identity
//! recorded in the data directory's WAL when the sidecar started ([`read_wal`]).
//!
//! Both are expectations, not observations: they say who the member *was* before
//! etcd started, which is exactly what a member that re-bootstrapped a fresh
//! cluster has forgotten. The verdict file is parsed into the type preflight
//! wrote it from ([`crate::report::VerdictFile`]): unknown fields are ignored and
//! the optional ones default, so that a field another version of this binary
//! added or dropped does not cost the sidecar the ones it understands; a file
//! without a verdict, a row and an exit code is not a verdict.
//!
//! As a native sidecar (an init container with `restartPolicy: Always`,
//! docs/commands.md § serve) `serve` starts *before* `preflight`, so the file does not exist yet when
//! it starts, and a refusing `preflight` is retried by the kubelet and may write
//! another verdict later. The file is therefore polled for the life of the
//! process: each read bounded in bytes and in time, a file of an earlier Pod start
//! never taken, the last good verdict kept when a read fails.

use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::identity::{PreflightVerdict, WalIdentity};
use crate::disk::layout::{self, DirKind, Options, Paths};
use crate::disk::lock::Probe;
use crate::disk::wal;
use crate::report::VerdictFile;

/// Why the verdict file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum VerdictFileError {
    /// The file exists but cannot be read.
    #[error("cannot read the verdict file {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The file is not a JSON object with a `verdict` string.
    #[error("the verdict file {} is not a preflight verdict: {detail}", path.display())]
    Malformed {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        detail: String,
    },
    /// The file was written for another Pod, or before the node's last boot:
    /// not this Pod start's verdict.
    #[error("the verdict file {} is of an earlier Pod start: {detail}", path.display())]
    EarlierPodStart {
        /// The file.
        path: PathBuf,
        /// Which record differs.
        detail: String,
    },
}

pub use crate::disk::warm::PodStart;

/// This process's Pod start: `pod_uid` and the kernel's boot ID.
pub fn this_pod_start(pod_uid: Option<String>) -> PodStart {
    PodStart {
        pod_uid,
        boot_id: crate::evidence::boot_id(),
    }
}

/// The largest verdict file read; preflight's are a few KiB.
const MAX_VERDICT_BYTES: u64 = 1 << 20;

/// Reads the verdict `preflight` wrote; `Ok(None)` when there is no file (no
/// preflight init container, or a deployment without the shared volume).
pub fn read_verdict(
    path: &Path,
    this_start: &PodStart,
) -> Result<Option<PreflightVerdict>, VerdictFileError> {
    use std::io::Read;
    let file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(VerdictFileError::Read {
                path: path.to_owned(),
                source,
            })
        }
    };
    let mut bytes = Vec::new();
    file.take(MAX_VERDICT_BYTES)
        .read_to_end(&mut bytes)
        .map_err(|source| VerdictFileError::Read {
            path: path.to_owned(),
            source,
        })?;
    let file = VerdictFile::parse(&bytes).map_err(|e| VerdictFileError::Malformed {
        path: path.to_owned(),
        detail: e.to_string(),
    })?;
    if let Some(detail) = this_start.differs(file.pod_uid.as_deref(), file.boot_id.as_deref()) {
        return Err(VerdictFileError::EarlierPodStart {
            path: path.to_owned(),
            detail,
        });
    }
    Ok(Some(sidecar_verdict(file, path)))
}

/// What the sidecar knows of this Pod start's verdict, published by
/// [`watch_verdict`] to the poller.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VerdictState {
    /// The newest verdict of this Pod start read from the file; kept when a
    /// later read fails.
    pub verdict: Option<PreflightVerdict>,
    /// While no verdict of this Pod start is known: why (no file yet, a file of
    /// an earlier Pod start, an unreadable file).
    pub waiting: Option<String>,
    /// The file was read (or tried) at least once.
    pub attempted: bool,
}

/// How often the verdict file is read while no `start` verdict of this Pod
/// start is known.
const FIRST_VERDICT_POLL: Duration = Duration::from_millis(100);

/// Polls `path` every `interval` (more often until a `start` verdict is known) for the life of the sidecar and publishes each
/// new verdict of this Pod start on `publish`. Each read runs in the blocking
/// pool and is given `timeout`; a read that hangs (a stuck volume) is not
/// repeated until it returns, and meanwhile the last state stands.
pub async fn watch_verdict(
    path: PathBuf,
    this_start: PodStart,
    interval: Duration,
    timeout: Duration,
    publish: watch::Sender<VerdictState>,
    shutdown: CancellationToken,
) {
    // Until a `start` verdict of this Pod start is known, the file is read
    // every FIRST_VERDICT_POLL: the sidecar's read-ahead for etcd begins with
    // it, and etcd starts as soon as preflight has written it.
    let mut first = true;
    let mut pending: Option<
        tokio::task::JoinHandle<Result<Option<PreflightVerdict>, VerdictFileError>>,
    > = None;
    let mut last_problem: Option<String> = None;
    loop {
        let wait = if first {
            Duration::ZERO
        } else if publish
            .borrow()
            .verdict
            .as_ref()
            .is_some_and(|v| v.verdict == "start")
        {
            interval
        } else {
            interval.min(FIRST_VERDICT_POLL)
        };
        first = false;
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = tokio::time::sleep(wait) => {}
        }
        let mut read = match pending.take() {
            Some(handle) => handle,
            None => {
                let (path, this_start) = (path.clone(), this_start.clone());
                tokio::task::spawn_blocking(move || read_verdict(&path, &this_start))
            }
        };
        let result = tokio::select! {
            () = shutdown.cancelled() => return,
            r = tokio::time::timeout(timeout, &mut read) => r,
        };
        let outcome = match result {
            Ok(Ok(outcome)) => outcome,
            Ok(Err(join)) => {
                tracing::error!(error = %join, "reading the verdict file panicked");
                continue;
            }
            Err(_) => {
                // Still reading: keep the read, try no other until it ends.
                pending = Some(read);
                let problem = format!(
                    "reading the verdict file {} took longer than {timeout:?}",
                    path.display()
                );
                note_problem(&publish, &mut last_problem, problem);
                continue;
            }
        };
        match outcome {
            Ok(Some(verdict)) => {
                last_problem = None;
                publish.send_if_modified(|state| {
                    let changed = state.verdict.as_ref() != Some(&verdict) || state.waiting.is_some();
                    if state.verdict.as_ref() != Some(&verdict) {
                        tracing::info!(path = %path.display(), verdict = %verdict.verdict, exit_code = verdict.exit_code, reason = %verdict.reason, "read this Pod start's preflight verdict");
                    }
                    state.verdict = Some(verdict);
                    state.waiting = None;
                    let first = !state.attempted;
                    state.attempted = true;
                    changed || first
                });
            }
            Ok(None) => {
                let why = format!(
                    "waiting for preflight's verdict: no file at {} yet",
                    path.display()
                );
                if last_problem.as_deref() != Some(why.as_str()) && !publish.borrow().attempted {
                    tracing::info!(path = %path.display(), "no preflight verdict file yet; watching for it");
                }
                last_problem = Some(why.clone());
                set_waiting(&publish, why);
            }
            Err(e) => {
                let why = match &e {
                    VerdictFileError::EarlierPodStart { .. } => {
                        format!("waiting for preflight's verdict: {e}")
                    }
                    _ => e.to_string(),
                };
                note_problem(&publish, &mut last_problem, why);
            }
        }
    }
}

/// A read that gave no usable verdict: logged once per distinct problem; it
/// becomes the waiting reason only while no verdict of this Pod start is known.
fn note_problem(
    publish: &watch::Sender<VerdictState>,
    last_problem: &mut Option<String>,
    problem: String,
) {
    if last_problem.as_deref() != Some(problem.as_str()) {
        tracing::warn!(problem = %problem, "no usable preflight verdict in the file");
    }
    *last_problem = Some(problem.clone());
    set_waiting(publish, problem);
}

fn set_waiting(publish: &watch::Sender<VerdictState>, why: String) {
    publish.send_if_modified(|state| {
        let first = !state.attempted;
        state.attempted = true;
        if state.verdict.is_some() || state.waiting.as_deref() == Some(why.as_str()) {
            return first;
        }
        state.waiting = Some(why);
        true
    });
}

/// The fields of a verdict file the sidecar uses.
pub fn sidecar_verdict(file: VerdictFile, path: &Path) -> PreflightVerdict {
    let mut witness = file.witness;
    // Which verdict a re-base is of: the witnesses record it, so that it is
    // applied once (a sidecar restarted in this Pod start reads the same
    // verdict; another Pod start's preflight decides again).
    witness.rebase_by = witness.rebase.then(|| {
        let or_dash = |s: &Option<String>| s.clone().unwrap_or_else(|| "-".to_owned());
        format!(
            "{}/{}/{}",
            file.decided_at_unix,
            or_dash(&file.pod_uid),
            or_dash(&file.boot_id)
        )
    });
    PreflightVerdict {
        verdict: file.verdict.name().to_owned(),
        exit_code: i32::from(file.exit_code),
        reason: file.reason,
        remedy: file.remedy,
        decided_at_unix: i64::try_from(file.decided_at_unix).ok().filter(|&t| t > 0),
        member_id: file.data_dir.member_id,
        cluster_id: file.data_dir.cluster_id,
        path: path.display().to_string(),
        // A verdict of an earlier agent has none: nothing was held.
        witness,
    }
}

/// Reads the identity the data directory's WAL records, offline (no locks,
/// no writes). Blocking: call it from a thread of its own.
///
/// What the sidecar needs of it is an expectation (the IDs, the last
/// HardState's commit), not a verdict: `preflight` verifies the whole WAL.
/// So a WAL whose last segment reads clean and yields the IDs (the same as
/// the first segment's) and a HardState, beside a backend file, is read from
/// those segments alone ([`read_wal_ends`]): about one segment (64 MB), where
/// reading the whole WAL (a GiB and more) at boot ran beside preflight's read
/// and etcd's start and, under the sidecar's memory limit, evicted the pages
/// etcd was about to read. Anything else is read whole, as `inspect` reads
/// it, so that its state and problem are `inspect`'s. Damage before the last
/// segment (but in the first one's opening records) is not seen by the short
/// read; preflight refuses it.
pub fn read_wal(data_dir: &Path, wal_dir: Option<&Path>) -> WalIdentity {
    let paths = Paths::new(data_dir, wal_dir);
    read_wal_ends(&paths).unwrap_or_else(|| read_wal_whole(&paths))
}

/// The IDs and the last HardState from the WAL's last segment alone (it opens
/// with the running CRC and the metadata record, and etcd writes the HardState
/// at the head of every segment it cuts, so the segment verifies and holds
/// them on its own), its IDs checked against the first segment's metadata:
/// `None` (read it whole) when the last segment has a corrupt record or lacks
/// any of them, the two segments name different members, `member`, its `snap`
/// dir or the WAL dir is not a directory of its own (a symlink: `inspect`
/// reports it, and never follows it), or no non-empty backend file is there.
pub fn read_wal_ends(paths: &Paths) -> Option<WalIdentity> {
    let is_dir = |p: &Path| std::fs::symlink_metadata(p).is_ok_and(|m| m.is_dir());
    if !(is_dir(&paths.member_dir) && is_dir(&paths.snap_dir) && is_dir(&paths.wal_dir)) {
        return None;
    }
    let db = std::fs::symlink_metadata(paths.db()).ok()?;
    if !db.is_file() || db.len() == 0 {
        return None;
    }
    let end = wal::last_segment(&paths.wal_dir).ok()?;
    if !end.clean {
        return None;
    }
    let (member_id, cluster_id) = end.ids?;
    if wal::wal_identity(&paths.wal_dir)? != (member_id, cluster_id) {
        return None;
    }
    Some(WalIdentity {
        state: DirKind::Initialized.name().to_owned(),
        member_id: Some(member_id),
        cluster_id: Some(cluster_id),
        commit_index: end.commit?,
        term: end.hard_term?,
        last_index: end.last_entry,
        problem: None,
    })
}

/// The whole directory read as `inspect` reads it: what [`read_wal`] falls
/// back to, and what its read of the last segment is checked against.
pub fn read_wal_whole(paths: &Paths) -> WalIdentity {
    // Only the identity matters here, not who holds which lock.
    let report = layout::inspect(
        paths,
        Options {
            locks: Probe::Ofd,
            // One reader: see `server::read_boot`.
            threads: 1,
            ..Options::default()
        },
    );
    let log = report.log();
    WalIdentity {
        state: report.kind().name().to_owned(),
        member_id: log.map(|l| l.member_id),
        cluster_id: log.map(|l| l.cluster_id),
        commit_index: log.map_or(0, |l| l.hard_state.commit),
        term: log.map_or(0, |l| l.hard_state.term),
        last_index: log.map_or(0, |l| l.last_index),
        problem: report.problem().map(|p| p.message.clone()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn regression_a_verdict_file_of_an_earlier_pod_start_is_never_used() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("preflight.json");
        let doc = json!({
            "verdict": "start", "row": "5", "exit_code": 0, "reason": "", "remedy": "",
            "pod_uid": "pod-a", "boot_id": "boot-1",
            "data_dir": {"member_id": "8e9e05c52164694d", "cluster_id": "cdf818194e3a8c32"}
        });
        std::fs::write(&path, doc.to_string()).unwrap();
        let start = |pod: &str, boot: &str| PodStart {
            pod_uid: Some(pod.into()),
            boot_id: Some(boot.into()),
        };
        assert!(read_verdict(&path, &start("pod-a", "boot-1"))
            .unwrap()
            .is_some());
        for other in [start("pod-b", "boot-1"), start("pod-a", "boot-2")] {
            match read_verdict(&path, &other) {
                Err(VerdictFileError::EarlierPodStart { .. }) => {}
                got => panic!("{other:?}: {got:?}"),
            }
        }
        // Unknown on either side proves nothing: an older preflight's file.
        assert!(read_verdict(&path, &PodStart::default()).unwrap().is_some());
    }

    #[tokio::test]
    async fn the_watcher_picks_up_a_verdict_written_after_it_started_and_follows_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("preflight.json");
        let (tx, mut rx) = watch::channel(VerdictState::default());
        let shutdown = CancellationToken::new();
        let this_start = PodStart {
            pod_uid: Some("pod-b".into()),
            boot_id: None,
        };
        let task = tokio::spawn(watch_verdict(
            path.clone(),
            this_start,
            Duration::from_millis(20),
            Duration::from_secs(5),
            tx,
            shutdown.clone(),
        ));
        let within = Duration::from_secs(10);
        let waiting = |rx: &mut watch::Receiver<VerdictState>, text: &'static str| {
            let mut rx = rx.clone();
            async move {
                tokio::time::timeout(
                    within,
                    rx.wait_for(|s| s.waiting.as_deref().is_some_and(|w| w.contains(text))),
                )
                .await
                .map(|r| r.map(|s| s.clone()))
            }
        };
        let s = waiting(&mut rx, "no file at").await.unwrap().unwrap();
        assert!(s.attempted && s.verdict.is_none(), "{s:?}");

        // A file an earlier Pod left is never taken.
        let doc = |pod: &str, verdict: &str, code: i32| {
            let row = if code == 0 { "5" } else { "7" };
            json!({"verdict": verdict, "row": row, "exit_code": code, "reason": "r", "remedy": "", "pod_uid": pod})
                .to_string()
        };
        std::fs::write(&path, doc("pod-a", "start", 0)).unwrap();
        let s = waiting(&mut rx, "earlier Pod start")
            .await
            .unwrap()
            .unwrap();
        assert!(s.verdict.is_none(), "{s:?}");

        // This Pod start's refusal, then (the kubelet retried preflight) its start.
        for (verdict, code) in [("refuse-empty-formed", 10), ("start", 0)] {
            std::fs::write(&path, doc("pod-b", verdict, code)).unwrap();
            let s = tokio::time::timeout(
                within,
                rx.wait_for(|s| s.verdict.as_ref().is_some_and(|v| v.verdict == verdict)),
            )
            .await
            .unwrap()
            .map(|s| s.clone())
            .unwrap();
            assert_eq!(s.verdict.map(|v| v.exit_code), Some(code));
            assert_eq!(s.waiting, None);
        }
        // A torn or removed file later does not cost the verdict.
        std::fs::write(&path, b"{not json").unwrap();
        tokio::time::sleep(Duration::from_millis(200)).await;
        std::fs::remove_file(&path).unwrap();
        tokio::time::sleep(Duration::from_millis(200)).await;
        let s = rx.borrow().clone();
        assert_eq!(s.verdict.map(|v| v.verdict), Some("start".to_owned()));
        assert_eq!(s.waiting, None);
        shutdown.cancel();
        tokio::time::timeout(within, task).await.unwrap().unwrap();
    }

    #[test]
    fn a_missing_file_is_no_verdict_and_garbage_is_an_error() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let path = dir.path().join("preflight.json");
        assert!(matches!(
            read_verdict(&path, &PodStart::default()),
            Ok(None)
        ));
        std::fs::write(&path, b"\x00not json").unwrap_or_else(|e| panic!("{e}"));
        assert!(matches!(
            read_verdict(&path, &PodStart::default()),
            Err(VerdictFileError::Malformed { .. })
        ));
    }

    #[test]
    fn an_empty_data_dir_has_no_wal_identity() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let wal = read_wal(dir.path(), None);
        assert_eq!(wal.state, "empty");
        assert_eq!(
            (wal.member_id, wal.cluster_id, wal.commit_index),
            (None, None, 0)
        );
    }
}
