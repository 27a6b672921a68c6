//! etcd-member-agent: decides from independent evidence whether an etcd member may
//! start on its data directory, and reports that member's identity.
//!
//! The direction of imports is the architecture: [`disk`] knows nothing of the
//! network, [`verdict`] knows nothing of I/O, [`cmd`] composes them.

pub mod cli;
pub mod cmd;
pub mod disk;
pub mod duration;
pub mod evidence;
pub mod exit;
pub mod output;
pub mod verdict;
