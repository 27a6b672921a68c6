//! Eventual assertions with one patience knob.
//!
//! Real etcd takes its own time to elect, replicate and snapshot. Tests wait for a
//! condition instead of sleeping for a guess, and every wait in the harness draws on
//! one budget, `TEST_PATIENCE_SECS` (default 30 s), so a slow machine is fixed with
//! one environment variable rather than by editing timeouts.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The default patience when `TEST_PATIENCE_SECS` is unset or unparsable.
pub const DEFAULT_PATIENCE: Duration = Duration::from_secs(30);

/// How long any eventual condition may take: `TEST_PATIENCE_SECS`, default 30 s.
pub fn patience() -> Duration {
    static PATIENCE: OnceLock<Duration> = OnceLock::new();
    *PATIENCE.get_or_init(|| {
        std::env::var("TEST_PATIENCE_SECS")
            .ok()
            .and_then(|s| s.trim().parse::<f64>().ok())
            .filter(|s| s.is_finite() && *s > 0.0)
            .map(Duration::from_secs_f64)
            .unwrap_or(DEFAULT_PATIENCE)
    })
}

/// Polls `check` until it returns `Ok` or `timeout` passes; the error then carries
/// the last failure and how long it waited. Polls quickly at first (20 ms), backing
/// off to 250 ms, so fast conditions cost little and slow ones don't spin.
pub fn eventually<T>(
    timeout: Duration,
    mut check: impl FnMut() -> Result<T, String>,
) -> Result<T, String> {
    let start = Instant::now();
    let mut pause = Duration::from_millis(20);
    let mut tries = 0u32;
    loop {
        tries += 1;
        match check() {
            Ok(value) => return Ok(value),
            Err(last) => {
                let waited = start.elapsed();
                if waited >= timeout {
                    return Err(format!(
                        "still failing after {waited:.1?} ({tries} tries): {last}"
                    ));
                }
                std::thread::sleep(pause.min(timeout - waited));
                pause = (pause * 2).min(Duration::from_millis(250));
            }
        }
    }
}

/// `Ok(())` when `condition` holds, else `Err(message)`: turns a boolean into a
/// check for [`eventually`] and `assert_eventually!`.
pub fn ensure(condition: bool, message: impl Into<String>) -> Result<(), String> {
    if condition {
        Ok(())
    } else {
        Err(message.into())
    }
}

/// A point in time that waits measure themselves against.
#[derive(Clone, Copy, Debug)]
pub struct Deadline(Instant);

impl Deadline {
    /// A deadline `timeout` from now.
    pub fn after(timeout: Duration) -> Self {
        Deadline(Instant::now() + timeout)
    }

    /// Time left, zero once passed.
    pub fn remaining(self) -> Duration {
        self.0.saturating_duration_since(Instant::now())
    }

    /// Whether the deadline has passed.
    pub fn passed(self) -> bool {
        Instant::now() >= self.0
    }
}
