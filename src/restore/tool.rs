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
//! change what the restore does. Every run (the `version` probe too) is bounded:
//! the tool leads its own process group and the whole group is killed at the
//! deadline, so a wrapper's forked children cannot hold the restore.
//!
//! A tool named by `ETCDUTL_PATH` is the only candidate: one that is missing or
//! cannot run fails the restore (32) rather than falling back to whatever
//! `/usr/local/bin` or `PATH` holds, which could be another etcd line's tool.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::child::{self, Ran};

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
    /// The tool `ETCDUTL_PATH` names cannot be used; no other is tried.
    #[error("the restore tool ETCDUTL_PATH names ({}) cannot be used, and no other tool is tried in its place: {}", path.display(), tried.join("; "))]
    Named {
        /// `ETCDUTL_PATH`.
        path: PathBuf,
        /// Why each candidate under it was not used.
        tried: Vec<String>,
    },
    /// The tool exited 0 but did not create the data dir it was asked for.
    #[error("{} snapshot restore exited 0 but wrote no {}; it printed: stdout: {stdout:?} stderr: {stderr:?}", path.display(), missing.display())]
    WroteNothing {
        /// The tool.
        path: PathBuf,
        /// What should exist now.
        missing: PathBuf,
        /// The end of its stdout.
        stdout: String,
        /// The end of its stderr.
        stderr: String,
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

impl ToolError {
    /// True when the tool ran out of space on the data volume (Go prints ENOSPC
    /// as `no space left on device`): the remedy is room, not another tool.
    pub fn is_no_space(&self) -> bool {
        match self {
            ToolError::Failed { stderr, .. } => stderr
                .to_ascii_lowercase()
                .contains("no space left on device"),
            _ => false,
        }
    }
}

/// Runs `cmd` with an empty environment (plus `env`), in its own process group,
/// killing the group at `timeout` (see [`crate::child`]).
fn run(cmd: &mut Command, env: &[(&str, &str)], timeout: Duration) -> std::io::Result<Ran> {
    cmd.env_clear().envs(env.iter().copied());
    child::run(cmd, timeout)
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

/// Finds the restore tool (see the module doc for the order). A tool named by
/// `ETCDUTL_PATH` (or a directory it names) is the only place looked at.
pub fn find(explicit: Option<&Path>) -> Result<Tool, ToolError> {
    let path_var = std::env::var_os("PATH");
    let mut tried = Vec::new();
    let list = match explicit {
        Some(p) if !p.exists() => {
            return Err(ToolError::Named {
                path: p.to_path_buf(),
                tried: vec![format!("{}: does not exist", p.display())],
            })
        }
        Some(p) if p.is_dir() => vec![p.join("etcdutl"), p.join("etcdctl")],
        Some(p) => vec![p.to_path_buf()],
        None => candidates(None, path_var.as_deref()),
    };
    for candidate in list {
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
    if let Some(p) = explicit {
        if tried.is_empty() {
            tried.push(format!("{}: holds no etcdutl or etcdctl", p.display()));
        }
        return Err(ToolError::Named {
            path: p.to_path_buf(),
            tried,
        });
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
            Some(_) if !r.data_dir.join("member").join("snap").join("db").is_file() => {
                Err(ToolError::WroteNothing {
                    path: self.path.clone(),
                    missing: r.data_dir.join("member").join("snap").join("db"),
                    stdout: tail(&ran.stdout),
                    stderr: tail(&ran.stderr),
                })
            }
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
