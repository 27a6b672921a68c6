//! How commands speak: a human summary on stderr, and with `-o json` exactly one
//! JSON document on stdout whatever the exit code. A closed stdout (`| head`) is
//! not an error.

use std::io::Write;
use std::path::Path;

/// The output format chosen with `-o`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Format {
    /// Human-readable summary on stderr.
    #[default]
    Text,
    /// One JSON document on stdout (the summary still goes to stderr).
    Json,
}

/// Prints the human summary to stderr and, for `-o json`, the document to stdout.
/// A stdout that cannot be written is an internal error (exit 1).
pub fn emit<T: serde::Serialize>(format: Format, human: &str, doc: &T) -> crate::error::Result<()> {
    emit_io(format, human, doc)
        .map_err(|e| crate::error::Error::internal("cannot write the report to stdout", &e))
}

fn emit_io<T: serde::Serialize>(format: Format, human: &str, doc: &T) -> std::io::Result<()> {
    let mut err = std::io::stderr().lock();
    let _ = err.write_all(human.as_bytes());
    if !human.ends_with('\n') {
        let _ = err.write_all(b"\n");
    }
    if format == Format::Json {
        let mut out = std::io::stdout().lock();
        let text = serde_json::to_string_pretty(doc).map_err(std::io::Error::other)?;
        let r = out
            .write_all(text.as_bytes())
            .and_then(|_| out.write_all(b"\n"))
            .and_then(|_| out.flush());
        match r {
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => return Ok(()),
            other => other?,
        }
    }
    Ok(())
}

/// Kubernetes keeps at most this much of a container's termination message.
pub const TERMINATION_MESSAGE_MAX: usize = 4096;

/// The short JSON an init container (`preflight`, `restore`) leaves in
/// `initContainerStatuses[].state.terminated.message` for the operator
/// (docs/operator-integration.md § 5): written by [`fit`], read back by
/// `fleet`, one type for both. Keys are snake_case; IDs 16-digit hex.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct TerminationMessage {
    /// The verdict's name (`refuse-empty-formed`); `null` when none was reached
    /// (a usage error).
    pub verdict: Option<String>,
    /// The exit code (docs/exit-codes.md).
    pub exit_code: u8,
    /// The row of docs/decision-table.md the verdict came from, when the writer
    /// knows it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub row: Option<String>,
    /// The data directory's member ID (preflight) or the one restored to.
    pub member_id: Option<String>,
    /// Its cluster ID.
    pub cluster_id: Option<String>,
    /// What was seen.
    pub reason: String,
    /// What to do.
    pub remedy: String,
}

/// [`fit`] of a message without a row: verdict, exit code, IDs (hex), reason
/// and remedy.
pub fn fitted_message(
    verdict: serde_json::Value,
    exit_code: u8,
    [member_id, cluster_id]: [Option<String>; 2],
    reason: &str,
    remedy: &str,
) -> String {
    fit(TerminationMessage {
        verdict: verdict.as_str().map(str::to_owned),
        exit_code,
        row: None,
        member_id,
        cluster_id,
        reason: reason.to_owned(),
        remedy: remedy.to_owned(),
    })
}

/// `msg` as JSON, its reason and remedy shortened until the whole fits in
/// [`TERMINATION_MESSAGE_MAX`].
pub fn fit(mut msg: TerminationMessage) -> String {
    loop {
        let text = serde_json::to_string(&msg).unwrap_or_default();
        if text.len() <= TERMINATION_MESSAGE_MAX {
            return text;
        }
        // Shorten the longer text by a quarter, on a char boundary, and retry.
        let longer = if msg.reason.len() >= msg.remedy.len() {
            &mut msg.reason
        } else {
            &mut msg.remedy
        };
        let mut cut = longer.len() * 3 / 4;
        while !longer.is_char_boundary(cut) {
            cut -= 1;
        }
        longer.truncate(cut);
        longer.push('…');
    }
}

/// Writes `msg` to the termination log: the explicit path (created if need
/// be), else `/dev/termination-log` when it exists. A failure is logged, never
/// fatal: the exit code still carries the verdict.
pub fn write_termination_message(termination_log: Option<&Path>, msg: &str) {
    let explicit = termination_log.is_some();
    let path = termination_log.unwrap_or(Path::new("/dev/termination-log"));
    let result = std::fs::OpenOptions::new()
        .write(true)
        .create(explicit)
        .truncate(true)
        .open(path)
        .and_then(|mut f| f.write_all(msg.as_bytes()));
    if let Err(e) = result {
        if explicit {
            tracing::warn!(path = %path.display(), error = %e, "cannot write the termination message");
        }
    }
}

/// Writes `bytes` to `path` atomically: a temp file in the same directory, then a
/// rename, so that no reader (the sidecar of preflight's verdict, preflight of
/// the sidecar's read-ahead handoff) ever reads half a file. Not fsynced: the file
/// lives in a Pod-scoped volume and describes this Pod start only; after a node
/// crash the Pod starts again and preflight writes a new one (and the sidecar
/// falls back to the WAL when there is none).
pub fn write_atomic(path: &std::path::Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(std::path::Path::new("."));
    let tmp = dir.join(format!(
        ".{}.tmp.{}",
        path.file_name()
            .map(|n| n.to_string_lossy())
            .unwrap_or_default(),
        std::process::id()
    ));
    let written = std::fs::write(&tmp, bytes).and_then(|()| std::fs::rename(&tmp, path));
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fitted_message_reads_back_as_the_shared_type() {
        let text = fitted_message(
            serde_json::json!("refuse-empty-formed"),
            10,
            [None, Some("769f1c9e0d723d0b".into())],
            &"r".repeat(5000),
            "remedy",
        );
        assert!(text.len() <= TERMINATION_MESSAGE_MAX);
        let msg: TerminationMessage = serde_json::from_str(&text).unwrap();
        assert_eq!(msg.verdict.as_deref(), Some("refuse-empty-formed"));
        assert_eq!((msg.exit_code, msg.row), (10, None));
        assert_eq!(msg.cluster_id.as_deref(), Some("769f1c9e0d723d0b"));
        assert!(msg.reason.ends_with('…') && msg.remedy == "remedy");
        // No row written unless one is known; one given is kept.
        assert!(!text.contains("\"row\""));
        let with_row = fit(TerminationMessage {
            row: Some("7".into()),
            ..msg
        });
        let back: TerminationMessage = serde_json::from_str(&with_row).unwrap();
        assert_eq!(back.row.as_deref(), Some("7"));
        // A usage error's message has no verdict.
        let usage = fitted_message(serde_json::Value::Null, 2, [None, None], "bad", "fix");
        let msg: TerminationMessage = serde_json::from_str(&usage).unwrap();
        assert_eq!(msg.verdict, None);
    }
}
