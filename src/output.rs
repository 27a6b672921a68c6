//! How commands speak: a human summary on stderr, and with `-o json` exactly one
//! JSON document on stdout whatever the exit code. A closed stdout (`| head`) is
//! not an error.

use std::io::Write;
use std::path::Path;

use serde_json::json;

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

/// The short JSON an init container leaves in
/// `initContainerStatuses[].state.terminated.message` for the operator: verdict,
/// exit code, IDs (hex), reason and remedy, the two texts shortened until the
/// whole fits in [`TERMINATION_MESSAGE_MAX`].
pub fn fitted_message(
    verdict: serde_json::Value,
    exit_code: u8,
    [member_id, cluster_id]: [Option<String>; 2],
    reason: &str,
    remedy: &str,
) -> String {
    let mut reason = reason.to_string();
    let mut remedy = remedy.to_string();
    loop {
        let msg = json!({
            "verdict": verdict,
            "exit_code": exit_code,
            "member_id": member_id,
            "cluster_id": cluster_id,
            "reason": reason,
            "remedy": remedy,
        })
        .to_string();
        if msg.len() <= TERMINATION_MESSAGE_MAX {
            return msg;
        }
        // Shorten the longer text by a quarter, on a char boundary, and retry.
        let longer = if reason.len() >= remedy.len() {
            &mut reason
        } else {
            &mut remedy
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
