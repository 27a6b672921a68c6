//! The version-matched restore tool: `etcdutl snapshot restore` (etcd 3.5+) or
//! `ETCDCTL_API=3 etcdctl snapshot restore` (3.4; 3.5's etcdctl still has it,
//! 3.6's does not).
//!
//! The operator runs `restore` inside the etcd image so that the tool of the
//! cluster's own version does the work. Search order: `ETCDUTL_PATH` (a tool or a
//! directory holding one), the etcd image's `/usr/local/bin`, then `PATH`; in each
//! place etcdutl before etcdctl. Every candidate is asked `version` and is taken by
//! what it says it is, not by its file name; one that cannot answer is skipped and
//! reported.
//!
//! Tools run with an empty environment: etcd's tools read `ETCD_*`/`ETCDCTL_*`
//! variables as flags, and the init container's env is full of them
//! (`ETCD_DATA_DIR`, `ETCD_INITIAL_CLUSTER`, …) — a stray one would silently
//! change what the restore does. Every run is bounded and killed on timeout.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use serde::Serialize;

/// Where the etcd image keeps its binaries.
pub const IMAGE_BIN_DIR: &str = "/usr/local/bin";
/// Bound on `<tool> version`.
const VERSION_TIMEOUT: Duration = Duration::from_secs(10);
/// How much of a tool's stderr goes into a message.
const STDERR_TAIL: usize = 2000;

/// Which program it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ToolKind {
    /// `etcdutl` (3.5+).
    Etcdutl,
    /// `etcdctl` with `ETCDCTL_API=3` (3.4, 3.5).
    Etcdctl,
}

/// A restore tool that answered `version`.
#[derive(Debug, Clone, Serialize)]
pub struct Tool {
    /// Its path.
    pub path: PathBuf,
    /// What it said it is.
    pub kind: ToolKind,
    /// Its version, e.g. `3.5.1`.
    pub version: String,
}

/// The restore tool is missing or failed (exit 32).
#[derive(Debug, thiserror::Error)]
pub enum ToolError {
    /// No usable candidate.
    #[error("no etcd restore tool found (etcdutl for 3.5+, etcdctl for 3.4); tried: {}", tried.join("; "))]
    NotFound {
        /// Every candidate and why it was not used.
        tried: Vec<String>,
    },
    /// The tool could not be started.
    #[error("cannot run {path}: {source}")]
    Spawn {
        /// The tool.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The tool lacks a flag the restore needs.
    #[error("{path} ({version}) cannot do this restore: {why}")]
    Unsupported {
        /// The tool.
        path: PathBuf,
        /// What it said it is.
        version: String,
        /// What is missing.
        why: String,
    },
    /// The tool exited non-zero.
    #[error("{path} snapshot restore failed ({status}): {stderr}")]
    Failed {
        /// The tool.
        path: PathBuf,
        /// How it ended.
        status: String,
        /// The end of its stderr.
        stderr: String,
    },
    /// The tool ran past `--tool-timeout` and was killed.
    #[error("{path} snapshot restore did not finish within {after:?} (--tool-timeout); killed. stderr: {stderr}")]
    TimedOut {
        /// The tool.
        path: PathBuf,
        /// The bound.
        after: Duration,
        /// The end of its stderr.
        stderr: String,
    },
}

/// What a bounded run produced.
struct Ran {
    status: Option<ExitStatus>,
    stdout: Vec<u8>,
    stderr: Vec<u8>,
}

fn drain(pipe: Option<impl Read + Send + 'static>) -> std::thread::JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut buf = Vec::new();
        if let Some(mut p) = pipe {
            let _ = p.read_to_end(&mut buf);
        }
        buf
    })
}

fn wait_bounded(child: &mut Child, timeout: Duration) -> std::io::Result<Option<ExitStatus>> {
    let deadline = Instant::now() + timeout;
    let mut pause = Duration::from_millis(5);
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(Some(status));
        }
        let now = Instant::now();
        if now >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Ok(None);
        }
        std::thread::sleep(pause.min(deadline - now));
        pause = (pause * 2).min(Duration::from_millis(100));
    }
}

/// Runs `cmd` with an empty environment (plus `env`), killing it at `timeout`.
fn run(cmd: &mut Command, env: &[(&str, &str)], timeout: Duration) -> std::io::Result<Ran> {
    cmd.env_clear()
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn()?;
    let out = drain(child.stdout.take());
    let err = drain(child.stderr.take());
    let status = wait_bounded(&mut child, timeout)?;
    Ok(Ran {
        status,
        stdout: out.join().unwrap_or_default(),
        stderr: err.join().unwrap_or_default(),
    })
}

fn tail(bytes: &[u8]) -> String {
    let s = String::from_utf8_lossy(bytes);
    let s = s.trim();
    if s.len() <= STDERR_TAIL {
        return s.to_string();
    }
    let mut start = s.len() - STDERR_TAIL;
    while !s.is_char_boundary(start) {
        start += 1;
    }
    format!("…{}", &s[start..])
}

fn tool_env(kind: ToolKind) -> &'static [(&'static str, &'static str)] {
    match kind {
        ToolKind::Etcdctl => &[("ETCDCTL_API", "3")],
        ToolKind::Etcdutl => &[],
    }
}

/// Parses `etcdutl version: 3.5.1` / `etcdctl version: 3.4.23`.
pub fn parse_version(out: &str) -> Option<(ToolKind, String)> {
    let line = out.lines().find(|l| l.contains(" version: "))?;
    let (name, version) = line.trim().split_once(" version: ")?;
    let kind = match name.trim() {
        "etcdutl" => ToolKind::Etcdutl,
        "etcdctl" => ToolKind::Etcdctl,
        _ => return None,
    };
    Some((kind, version.trim().to_string()))
}

/// `(major, minor)` of `3.5.1`.
fn major_minor(version: &str) -> Option<(u32, u32)> {
    let mut it = version.split('.');
    Some((it.next()?.parse().ok()?, it.next()?.parse().ok()?))
}

/// Asks a candidate what it is; `Err` says why it cannot restore.
fn probe(path: &Path) -> Result<Tool, String> {
    use std::os::unix::fs::PermissionsExt;
    let meta = std::fs::metadata(path).map_err(|e| format!("{}: {e}", path.display()))?;
    if !meta.is_file() || meta.permissions().mode() & 0o111 == 0 {
        return Err(format!("{}: not an executable file", path.display()));
    }
    let ran = run(
        Command::new(path).arg("version"),
        &[("ETCDCTL_API", "3")],
        VERSION_TIMEOUT,
    )
    .map_err(|e| format!("{}: cannot run: {e}", path.display()))?;
    let status = ran
        .status
        .ok_or_else(|| format!("{}: `version` timed out", path.display()))?;
    let stdout = String::from_utf8_lossy(&ran.stdout);
    let (kind, version) = parse_version(&stdout).ok_or_else(|| {
        format!(
            "{}: `version` ({status}) did not name etcdutl or etcdctl: {}",
            path.display(),
            tail(if ran.stdout.is_empty() {
                &ran.stderr
            } else {
                &ran.stdout
            })
        )
    })?;
    if kind == ToolKind::Etcdctl && major_minor(&version).is_some_and(|v| v >= (3, 6)) {
        return Err(format!(
            "{}: etcdctl {version} has no `snapshot restore` (use etcdutl)",
            path.display()
        ));
    }
    Ok(Tool {
        path: path.to_path_buf(),
        kind,
        version,
    })
}

/// The candidates in search order.
fn candidates(explicit: Option<&Path>, path_var: Option<&std::ffi::OsStr>) -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Some(p) = explicit {
        if p.is_dir() {
            out.push(p.join("etcdutl"));
            out.push(p.join("etcdctl"));
        } else {
            out.push(p.to_path_buf());
        }
    }
    let image = Path::new(IMAGE_BIN_DIR);
    out.push(image.join("etcdutl"));
    out.push(image.join("etcdctl"));
    let dirs: Vec<PathBuf> = path_var
        .map(|p| std::env::split_paths(p).collect())
        .unwrap_or_default();
    for name in ["etcdutl", "etcdctl"] {
        out.extend(
            dirs.iter()
                .filter(|d| !d.as_os_str().is_empty())
                .map(|d| d.join(name)),
        );
    }
    let mut seen = std::collections::HashSet::new();
    out.retain(|p| seen.insert(p.clone()));
    out
}

/// Finds the restore tool (see the module doc for the order).
pub fn find(explicit: Option<&Path>) -> Result<Tool, ToolError> {
    let path_var = std::env::var_os("PATH");
    let mut tried = Vec::new();
    if let Some(p) = explicit {
        if !p.exists() {
            tried.push(format!("ETCDUTL_PATH {}: does not exist", p.display()));
        }
    }
    for candidate in candidates(explicit, path_var.as_deref()) {
        if !candidate.exists() {
            continue;
        }
        match probe(&candidate) {
            Ok(tool) => {
                if !tried.is_empty() {
                    tracing::warn!(skipped = ?tried, tool = %tool.path.display(), "restore tool: earlier candidates were unusable");
                }
                return Ok(tool);
            }
            Err(why) => tried.push(why),
        }
    }
    if tried.is_empty() {
        tried.push(format!(
            "no etcdutl or etcdctl in ETCDUTL_PATH, {IMAGE_BIN_DIR} or PATH"
        ));
    }
    Err(ToolError::NotFound { tried })
}

/// What `snapshot restore` is asked to build.
#[derive(Debug, Clone)]
pub struct RestoreRequest<'a> {
    /// The staged snapshot.
    pub snapshot: &'a Path,
    /// The directory to create (must not exist: 3.4's etcdctl refuses one).
    pub data_dir: &'a Path,
    /// `--name`.
    pub name: &'a str,
    /// `--initial-cluster`, as given.
    pub initial_cluster: &'a str,
    /// `--initial-cluster-token`.
    pub token: &'a str,
    /// `--initial-advertise-peer-urls`.
    pub peer_urls: &'a [String],
    /// Pass `--skip-hash-check` (a raw `db` without a trailer).
    pub skip_hash_check: bool,
    /// `--bump-revision N` when non-zero (etcdutl with the flag only, see
    /// [`Tool::supports_bump_revision`]).
    pub bump_revision: u64,
    /// `--mark-compacted` (etcdutl requires it exactly when bumping).
    pub mark_compacted: bool,
}

impl Tool {
    /// The arguments after the program name.
    pub fn restore_args(&self, r: &RestoreRequest<'_>) -> Vec<String> {
        let mut args = vec![
            "snapshot".to_string(),
            "restore".to_string(),
            r.snapshot.display().to_string(),
            format!("--name={}", r.name),
            format!("--initial-cluster={}", r.initial_cluster),
            format!("--initial-cluster-token={}", r.token),
            format!("--initial-advertise-peer-urls={}", r.peer_urls.join(",")),
            format!("--data-dir={}", r.data_dir.display()),
        ];
        if r.skip_hash_check {
            args.push("--skip-hash-check".to_string());
        }
        if r.bump_revision > 0 {
            args.push(format!("--bump-revision={}", r.bump_revision));
        }
        if r.mark_compacted {
            args.push("--mark-compacted".to_string());
        }
        args
    }

    /// Whether this tool's `snapshot restore` takes `--bump-revision` and
    /// `--mark-compacted`: etcdutl 3.6+ and the late 3.5 patches that have the
    /// backport (3.5.1 does not; etcdctl never does). Asked of the tool's own help,
    /// since the 3.5 patch that added them is not worth guessing.
    pub fn supports_bump_revision(&self) -> Result<(), ToolError> {
        let unsupported = |why: String| ToolError::Unsupported {
            path: self.path.clone(),
            version: self.version.clone(),
            why,
        };
        if self.kind != ToolKind::Etcdutl {
            return Err(unsupported(
                "etcdctl's snapshot restore has no --bump-revision".into(),
            ));
        }
        let ran = run(
            Command::new(&self.path).args(["snapshot", "restore", "--help"]),
            tool_env(self.kind),
            VERSION_TIMEOUT,
        )
        .map_err(|source| ToolError::Spawn {
            path: self.path.clone(),
            source,
        })?;
        let help = [ran.stdout.as_slice(), ran.stderr.as_slice()].concat();
        let help = String::from_utf8_lossy(&help);
        if help.contains("--bump-revision") && help.contains("--mark-compacted") {
            Ok(())
        } else {
            Err(unsupported(format!(
                "its `snapshot restore --help` lists no --bump-revision/--mark-compacted ({})",
                ran.status
                    .map_or("timed out".to_string(), |s| s.to_string())
            )))
        }
    }

    /// Runs `snapshot restore`, bounded by `timeout`. Returns its wall time.
    pub fn restore(
        &self,
        r: &RestoreRequest<'_>,
        timeout: Duration,
    ) -> Result<Duration, ToolError> {
        let args = self.restore_args(r);
        tracing::info!(tool = %self.path.display(), version = %self.version, args = ?args, "running the restore tool");
        let started = Instant::now();
        let ran = run(
            Command::new(&self.path).args(&args),
            tool_env(self.kind),
            timeout,
        )
        .map_err(|source| ToolError::Spawn {
            path: self.path.clone(),
            source,
        })?;
        let elapsed = started.elapsed();
        match ran.status {
            None => Err(ToolError::TimedOut {
                path: self.path.clone(),
                after: timeout,
                stderr: tail(&ran.stderr),
            }),
            Some(s) if !s.success() => Err(ToolError::Failed {
                path: self.path.clone(),
                status: s.to_string(),
                stderr: tail(&ran.stderr),
            }),
            Some(_) => {
                tracing::info!(
                    elapsed_ms = elapsed.as_millis() as u64,
                    "restore tool finished"
                );
                Ok(elapsed)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_of_both_tools_parse() {
        assert_eq!(
            parse_version("etcdutl version: 3.5.1\nAPI version: 3.5\n"),
            Some((ToolKind::Etcdutl, "3.5.1".into()))
        );
        assert_eq!(
            parse_version("etcdctl version: 3.4.23\nAPI version: 3.4\n"),
            Some((ToolKind::Etcdctl, "3.4.23".into()))
        );
        assert_eq!(parse_version("etcd Version: 3.5.1\n"), None);
        assert_eq!(major_minor("3.6.0"), Some((3, 6)));
    }

    #[test]
    fn etcdutl_is_preferred_in_each_place_and_places_keep_their_order() {
        let c = candidates(
            Some(Path::new("/nonexistent-tool")),
            Some(std::ffi::OsStr::new("/a:/b")),
        );
        let c: Vec<String> = c.iter().map(|p| p.display().to_string()).collect();
        assert_eq!(
            c,
            [
                "/nonexistent-tool",
                "/usr/local/bin/etcdutl",
                "/usr/local/bin/etcdctl",
                "/a/etcdutl",
                "/b/etcdutl",
                "/a/etcdctl",
                "/b/etcdctl",
            ]
        );
    }
}
