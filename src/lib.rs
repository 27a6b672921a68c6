//! etcd-member-agent: decides from independent evidence whether an etcd member may
//! start on its data directory, and reports that member's identity.
//!
//! The direction of imports is the architecture: [`disk`] knows nothing of the
//! network, [`verdict`] knows nothing of I/O, [`cmd`] composes them.

#![warn(missing_docs)]

#[cfg(test)]
mod architecture;
/// Child processes bounded by their process group: every tool the agent runs.
pub mod child;
pub mod cli;
pub mod cmd;
pub mod disk;
pub mod duration;
pub mod error;
pub mod evidence;
pub mod exit;
pub mod output;
/// Restoring a snapshot: fetch and hash, the version-matched tool, verification, atomic publish.
pub mod restore;
/// The sidecar (`serve`): identity over gRPC, identity-aware readiness, metrics, push reports.
pub mod server;
pub mod verdict;
