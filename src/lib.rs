//! etcd-member-agent: decides from independent evidence whether an etcd member may
//! start on its data directory, and reports that member's identity.
//!
//! The direction of imports is the architecture (`docs/architecture.md`, checked
//! by a unit test): [`disk`] knows nothing of the network, [`verdict`] knows
//! nothing of I/O, [`cmd`] composes them, and `main` starts [`server`] itself.
//! This file is the table of contents: one line per part.

#![warn(missing_docs)]

#[cfg(test)]
mod architecture;
/// Child processes bounded by their process group: every tool the agent runs.
pub(crate) mod child;
/// The command line: every flag, its env var and its help (no I/O).
pub mod cli;
/// One module per one-shot command (`inspect`, `preflight`, `restore`, `wipe`, `install`, `pod-check`).
pub mod cmd;
/// The offline reader: WAL, `.snap`, bbolt, the directory's classification and IDs. Imports no other part.
pub mod disk;
/// Durations as flags and env vars spell them (`5`, `5s`, `500ms`, `1m`).
pub mod duration;
/// The error a command returns without an outcome, and the one cause-chain renderer.
pub mod error;
/// The sources other than the directory: the live cluster, the Kubernetes API (one client), env hints.
pub mod evidence;
/// The documented exit codes.
pub mod exit;
/// `fleet` (also `kubectl etcd-guard`): every guarded member of every cluster in one view, from list and watch calls.
pub mod fleet;
/// How commands speak: the summary, `-o json`, the termination message.
pub mod output;
/// Restoring a snapshot: fetch and hash, the version-matched tool, verification, atomic publish.
/// The preflight report: written by `preflight`, read by `serve` and `restore`.
pub(crate) mod report;
pub mod restore;
/// The sidecar (`serve`): identity over gRPC, identity-aware readiness, metrics, push reports.
pub mod server;
/// The decision table of `preflight`: evidence in, verdict out, no I/O.
pub(crate) mod verdict;
