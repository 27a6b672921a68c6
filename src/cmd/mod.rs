//! One module per subcommand, composing the reader, the evidence sources and the
//! verdict. Each returns the [`Exit`](crate::exit::Exit) it decided; printing is
//! done here, exiting only in `main`.

pub mod inspect;
pub mod install;
pub mod pod_check;
pub mod preflight;
pub mod restore;
pub mod serve;
pub mod wipe;

/// A configuration problem found while running a command: `main` maps it to
/// exit 2 (usage or configuration error) instead of 1 (internal error).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(pub String);
