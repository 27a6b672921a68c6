//! The one error type a command returns when it cannot reach an outcome, and the
//! one renderer of a cause chain. `main` maps it to an exit code with
//! [`Error::exit`]; nothing else decides that a failure is exit 1 or 2.

use crate::exit::Exit;

/// Why a command ended without an outcome of its own.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A flag, an environment variable or a file the configuration names is
    /// wrong: exit 2, and the message says which and why.
    #[error("{0}")]
    Usage(String),
    /// Anything else that stopped the command (a bug, a runtime that cannot
    /// start, an output that cannot be written): exit 1.
    #[error("{0}")]
    Internal(String),
}

impl Error {
    /// A configuration error.
    pub fn usage(msg: impl Into<String>) -> Error {
        Error::Usage(msg.into())
    }

    /// An internal error, with what was being done and its cause chain.
    pub fn internal(doing: &str, cause: &(dyn std::error::Error + 'static)) -> Error {
        Error::Internal(format!("{doing}: {}", chain(cause)))
    }

    /// The exit code of this error.
    pub const fn exit(&self) -> Exit {
        match self {
            Error::Usage(_) => Exit::Usage,
            Error::Internal(_) => Exit::Internal,
        }
    }
}

/// The result of a command.
pub type Result<T> = std::result::Result<T, Error>;

/// An error and its sources, outermost first, joined by `: ` — the one way the
/// crate renders a cause chain (logs, reasons, termination messages). A source
/// whose text its parent already contains is not repeated.
pub fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    chain_onto(e.to_string(), e.source())
}

/// `text` followed by the causes from `source` on, as [`chain`] renders them:
/// for errors whose own text is not the head wanted (a gRPC status).
pub fn chain_onto(
    mut text: String,
    mut source: Option<&(dyn std::error::Error + 'static)>,
) -> String {
    while let Some(s) = source {
        let cause = s.to_string();
        if !text.contains(&cause) {
            text.push_str(": ");
            text.push_str(&cause);
        }
        source = s.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("outer")]
    struct Outer(#[source] std::io::Error);

    #[test]
    fn a_cause_chain_renders_outermost_first_without_repeats() {
        let e = Outer(std::io::Error::other("disk on fire"));
        assert_eq!(chain(&e), "outer: disk on fire");
        let e = std::io::Error::other("already says it all");
        assert_eq!(chain(&e), "already says it all");
    }

    #[test]
    fn usage_is_2_and_internal_is_1() {
        assert_eq!(Error::usage("x").exit().code(), 2);
        let io = std::io::Error::other("y");
        let e = Error::internal("writing", &io);
        assert_eq!(e.exit().code(), 1);
        assert_eq!(e.to_string(), "writing: y");
    }
}
