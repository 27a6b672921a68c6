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

/// The test hook, compiled in only with the `test-hooks` cargo feature: the
/// tests enable it (`scripts/test`, `cargo test --features test-hooks`), a
/// release build does not, so the binary that ships has neither the pause nor
/// the name of its variable.
#[cfg(feature = "test-hooks")]
mod hooks {
    use std::time::Duration;

    /// The environment variable naming a stage at which `restore` sleeps, so a
    /// crash test can SIGKILL it there deterministically.
    const TEST_PAUSE_ENV: &str = "AGENT_TEST_PAUSE_AT";

    /// How long a test pause lasts by default; long enough for any test to kill
    /// the process.
    const TEST_PAUSE: Duration = Duration::from_secs(300);

    /// The pause's length in seconds, for a test that lets the run go on after
    /// changing the directory under it.
    const TEST_PAUSE_SECS_ENV: &str = "AGENT_TEST_PAUSE_SECS";

    /// See [`super::test_pause`].
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
}

/// **Test hook**, a no-op unless the binary is built with the `test-hooks`
/// cargo feature. With it, when `AGENT_TEST_PAUSE_AT` names `stage`, announces
/// it on stderr (`AGENT_TEST_PAUSE_AT: paused at <stage>`) and sleeps (300 s,
/// or `AGENT_TEST_PAUSE_SECS`), so that a crash-safety test can SIGKILL the
/// process at exactly this point. The stages are `copy` (half the snapshot
/// staged), `tool` (the tool has written the staged directory, nothing fsynced
/// or verified yet), `rename` (verified, not yet published) and `cleanup`
/// (published, staging not yet removed).
#[inline]
pub(crate) fn test_pause(stage: &str) {
    #[cfg(feature = "test-hooks")]
    hooks::test_pause(stage);
    #[cfg(not(feature = "test-hooks"))]
    let _ = stage;
}
