//! The pieces of `restore` (docs/commands.md § restore), composed by [`crate::cmd::restore`]:
//! fetching a snapshot into a staging directory while hashing it ([`fetch`],
//! [`s3`]), checking its SHA-256 trailer ([`trailer`]), finding and running the
//! version-matched restore tool ([`tool`]), verifying the staged directory's
//! identity ([`verify`]) and publishing it atomically ([`stage`]).
//!
//! The shape follows one promise: a crash at any moment leaves the data dir with
//! either no `member/` or a complete, verified one. Everything is written inside
//! `<data-dir>/.restore-staging/` (same filesystem, so the final step is one
//! `rename(2)`), fsynced before it is published, and the staging directory is
//! debris that the next run removes before it starts again.

pub mod fetch;
pub mod s3;
pub mod stage;
pub mod tool;
pub mod trailer;
pub mod verify;

use std::time::Duration;

/// Test-only hook: the environment variable naming a stage at which `restore`
/// sleeps, so a crash test can SIGKILL it there deterministically.
pub const TEST_PAUSE_ENV: &str = "AGENT_TEST_PAUSE_AT";

/// How long a test pause lasts by default; long enough for any test to kill
/// the process.
const TEST_PAUSE: Duration = Duration::from_secs(300);

/// Test-only: the pause's length in seconds, for a test that lets the run go on
/// after changing the directory under it.
pub const TEST_PAUSE_SECS_ENV: &str = "AGENT_TEST_PAUSE_SECS";

/// **Test-only.** When `AGENT_TEST_PAUSE_AT` names `stage`, announces it on stderr
/// (`AGENT_TEST_PAUSE_AT: paused at <stage>`) and sleeps, so that a crash-safety
/// test can SIGKILL the process at exactly this point. The stages are `copy`
/// (half the snapshot staged), `tool` (the tool has written the staged directory,
/// nothing fsynced or verified yet), `rename` (verified, not yet published) and
/// `cleanup` (published, staging not yet removed). Never set in production.
pub fn test_pause(stage: &str) {
    let wanted = std::env::var(TEST_PAUSE_ENV).unwrap_or_default();
    if wanted == stage {
        tracing::warn!(stage, "test hook: pausing ({TEST_PAUSE_ENV})");
        eprintln!("{TEST_PAUSE_ENV}: paused at {stage}");
        let pause = std::env::var(TEST_PAUSE_SECS_ENV)
            .ok()
            .and_then(|s| s.parse().ok())
            .map_or(TEST_PAUSE, Duration::from_secs);
        std::thread::sleep(pause);
    }
}
