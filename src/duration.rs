//! Durations as the operator writes them in env: `5` (seconds), `5s`, `500ms`, `1m`.

use std::time::Duration;

/// Parses `N`, `Nms`, `Ns`, `Nm` or `Nh` (N a non-negative integer or decimal).
pub fn parse(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: f64 = num
        .parse()
        .map_err(|_| format!("invalid duration {s:?}: expected e.g. 5, 5s, 500ms, 1m"))?;
    let secs = match unit {
        "" | "s" => n,
        "ms" => n / 1000.0,
        "m" => n * 60.0,
        "h" => n * 3600.0,
        _ => {
            return Err(format!(
                "invalid duration unit {unit:?} in {s:?}: use ms, s, m or h"
            ))
        }
    };
    Duration::try_from_secs_f64(secs).map_err(|e| format!("invalid duration {s:?}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_the_documented_forms() {
        assert_eq!(parse("5").unwrap(), Duration::from_secs(5));
        assert_eq!(parse("5s").unwrap(), Duration::from_secs(5));
        assert_eq!(parse("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse("1m").unwrap(), Duration::from_secs(60));
        assert_eq!(parse("1.5s").unwrap(), Duration::from_millis(1500));
    }

    #[test]
    fn rejects_garbage() {
        for bad in ["", "s", "5x", "-1", "1e9999", "five"] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }
}
