//! The view for people and for scripts: the table (clusters, then members,
//! worst first, then what could not be read and the one-line summary), JSON
//! and YAML. Colour only when asked to (`--color`; `auto` is a terminal
//! without `NO_COLOR`), applied after padding so columns stay aligned.

use std::fmt::Write as _;

use super::view::{ClusterView, FleetView, Health, MemberStatus, MemberView};

/// Seconds as kubectl prints an age: `45s`, `3m12s`, `25m`, `3h4m`, `2d5h`.
pub fn age(secs: i64) -> String {
    let s = secs.max(0);
    match s {
        0..=59 => format!("{s}s"),
        60..=599 => format!("{}m{}s", s / 60, s % 60),
        600..=3599 => format!("{}m", s / 60),
        3600..=86_399 => format!("{}h{}m", s / 3600, (s % 3600) / 60),
        _ => format!("{}d{}h", s / 86_400, (s % 86_400) / 3600),
    }
}

fn opt_age(secs: Option<i64>) -> String {
    secs.map(age).unwrap_or_else(|| "-".to_owned())
}

/// A colour for a cell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Paint {
    None,
    Red,
    Yellow,
    Green,
    Dim,
}

impl Paint {
    fn code(self) -> &'static str {
        match self {
            Paint::None => "",
            Paint::Red => "\x1b[1;31m",
            Paint::Yellow => "\x1b[33m",
            Paint::Green => "\x1b[32m",
            Paint::Dim => "\x1b[2m",
        }
    }
}

fn health_paint(h: Health) -> Paint {
    match h {
        Health::Critical => Paint::Red,
        Health::Warning => Paint::Yellow,
        Health::Ok => Paint::Green,
    }
}

fn status_paint(s: MemberStatus) -> Paint {
    match s {
        MemberStatus::Refused | MemberStatus::NoPod => Paint::Red,
        MemberStatus::NotReady | MemberStatus::Deciding => Paint::Yellow,
        MemberStatus::Terminating | MemberStatus::Dormant => Paint::Dim,
        MemberStatus::Ready => Paint::Green,
    }
}

/// A table: rows of cells, the last column left unpadded.
struct Table {
    rows: Vec<Vec<(String, Paint)>>,
}

impl Table {
    fn new(header: &[&str]) -> Table {
        Table {
            rows: vec![header
                .iter()
                .map(|h| ((*h).to_owned(), Paint::None))
                .collect()],
        }
    }

    fn push(&mut self, row: Vec<(String, Paint)>) {
        self.rows.push(row);
    }

    fn write(&self, out: &mut String, color: bool) {
        let cols = self.rows.iter().map(Vec::len).max().unwrap_or(0);
        let mut widths = vec![0usize; cols];
        for row in &self.rows {
            for (i, (cell, _)) in row.iter().enumerate() {
                widths[i] = widths[i].max(cell.chars().count());
            }
        }
        for row in &self.rows {
            let mut line = String::new();
            for (i, (cell, paint)) in row.iter().enumerate() {
                let last = i + 1 == row.len();
                let pad = if last {
                    0
                } else {
                    widths[i] - cell.chars().count() + 2
                };
                if color && *paint != Paint::None {
                    let _ = write!(line, "{}{cell}\x1b[0m", paint.code());
                } else {
                    line.push_str(cell);
                }
                line.extend(std::iter::repeat_n(' ', pad));
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
    }
}

fn plain(s: impl Into<String>) -> (String, Paint) {
    (s.into(), Paint::None)
}

fn dash(s: Option<impl ToString>) -> String {
    s.map(|s| s.to_string()).unwrap_or_else(|| "-".to_owned())
}

fn conditions_cell(c: &ClusterView) -> String {
    if c.conditions.is_empty() {
        return "-".to_owned();
    }
    c.conditions
        .iter()
        .map(|cond| match cond.for_seconds {
            Some(secs) => format!("{} for {}: {}", cond.kind.name(), age(secs), cond.detail),
            None => format!("{}: {}", cond.kind.name(), cond.detail),
        })
        .collect::<Vec<_>>()
        .join("; ")
}

fn verdict_cell(m: &MemberView) -> String {
    match &m.verdict {
        None if !m.guarded && m.pod.is_some() => "unguarded".to_owned(),
        None => "-".to_owned(),
        Some(v) => match (&v.verdict, v.exit_code) {
            (Some(name), Some(code)) => format!("{name} ({code})"),
            (Some(name), None) => name.clone(),
            (None, Some(code)) => format!("exit {code}"),
            (None, None) => "?".to_owned(),
        },
    }
}

fn witness_cell(m: &MemberView) -> String {
    match &m.witness {
        None => "none".to_owned(),
        Some(w) if w.stale => format!("stale {}", opt_age(w.age_seconds)),
        Some(w) => opt_age(w.age_seconds),
    }
}

fn ready_cell(m: &MemberView, now_secs: Option<i64>) -> String {
    let since = match (m.readiness.since, now_secs) {
        (Some(t), Some(now)) => Some(age(now - t.as_second())),
        _ => None,
    };
    match m.readiness.ready {
        None => "-".to_owned(),
        Some(true) => "yes".to_owned(),
        Some(false) => match since {
            Some(s) => format!("no {s}"),
            None => "no".to_owned(),
        },
    }
}

fn restarts_cell(m: &MemberView) -> String {
    if m.restarts.is_empty() {
        return "0".to_owned();
    }
    m.restarts
        .iter()
        .map(|(c, n)| format!("{c} {n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn hazards_cell(m: &MemberView) -> String {
    if m.hazards.is_empty() {
        return "-".to_owned();
    }
    let mut kinds: Vec<&str> = m.hazards.iter().map(|h| h.kind.as_str()).collect();
    kinds.dedup();
    kinds.join(",")
}

/// The table (see the module docs).
pub fn table(view: &FleetView, color: bool, only_problems: bool) -> String {
    let shown: Vec<&ClusterView> = view
        .clusters
        .iter()
        .filter(|c| !only_problems || !c.conditions.is_empty())
        .collect();
    let now = view.generated_at.map(|t| t.as_second());
    let mut out = String::new();
    if !shown.is_empty() {
        let mut t = Table::new(&[
            "NAMESPACE",
            "CLUSTER",
            "HEALTH",
            "MEMBERS",
            "HEALTHY",
            "QUORUM",
            "CLUSTER-ID",
            "CONDITIONS",
        ]);
        for c in &shown {
            let id = match (&c.cluster_id, c.cluster_ids.len()) {
                (Some(id), _) => id.clone(),
                (None, 0) => "-".to_owned(),
                (None, _) => "MISMATCH".to_owned(),
            };
            let health = match c.health {
                Health::Critical => "CRITICAL",
                Health::Warning => "warning",
                Health::Ok => "ok",
            };
            t.push(vec![
                plain(&c.namespace),
                plain(&c.name),
                (health.to_owned(), health_paint(c.health)),
                plain(c.member_count.to_string()),
                plain(format!("{}/{}", c.healthy_voters, c.voters)),
                plain(c.quorum.to_string()),
                (
                    id,
                    if c.cluster_ids.len() > 1 {
                        Paint::Red
                    } else {
                        Paint::None
                    },
                ),
                (conditions_cell(c), health_paint(c.health)),
            ]);
        }
        t.write(&mut out, color);
        out.push('\n');
        let mut t = Table::new(&[
            "NAMESPACE",
            "CLUSTER",
            "MEMBER",
            "POD",
            "NODE",
            "STATUS",
            "VERDICT",
            "ROW",
            "AGE",
            "MEMBER-ID",
            "CLUSTER-ID",
            "TERM",
            "INDEX",
            "WITNESS",
            "READY",
            "HAZARDS",
            "RESTARTS",
        ]);
        for c in &shown {
            for m in &c.members {
                let w = m.witness.as_ref();
                let v = m.verdict.as_ref();
                let status = serde_json::to_value(m.status)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_owned))
                    .unwrap_or_default();
                t.push(vec![
                    plain(&c.namespace),
                    plain(&c.name),
                    plain(&m.member),
                    plain(dash(m.pod.as_ref())),
                    plain(dash(m.node.as_ref())),
                    (status, status_paint(m.status)),
                    (
                        verdict_cell(m),
                        if v.is_some_and(|v| v.refused) {
                            Paint::Red
                        } else {
                            Paint::None
                        },
                    ),
                    plain(dash(v.and_then(|v| v.row.as_ref()))),
                    plain(opt_age(v.and_then(|v| v.age_seconds))),
                    plain(dash(
                        w.and_then(|w| w.member_id.as_ref())
                            .or_else(|| v.and_then(|v| v.member_id.as_ref())),
                    )),
                    plain(dash(
                        w.and_then(|w| w.cluster_id.as_ref())
                            .or_else(|| v.and_then(|v| v.cluster_id.as_ref())),
                    )),
                    plain(dash(w.and_then(|w| w.raft_term))),
                    plain(dash(w.and_then(|w| w.raft_index))),
                    (
                        witness_cell(m),
                        if w.is_some_and(|w| w.stale) {
                            Paint::Yellow
                        } else {
                            Paint::None
                        },
                    ),
                    plain(ready_cell(m, now)),
                    (
                        hazards_cell(m),
                        if m.hazards.is_empty() {
                            Paint::None
                        } else {
                            Paint::Yellow
                        },
                    ),
                    plain(restarts_cell(m)),
                ]);
            }
        }
        t.write(&mut out, color);
        out.push('\n');
    }
    for u in &view.unread {
        let scope = match &u.namespace {
            Some(ns) => format!("namespace {ns}"),
            None => "all namespaces".to_owned(),
        };
        let line = format!(
            "NOT READ: {} in {scope}: {} — {}: {}\n",
            u.resource, u.error, u.missing, u.message
        );
        if color {
            let _ = write!(out, "{}{}\x1b[0m", Paint::Red.code(), line.trim_end());
            out.push('\n');
        } else {
            out.push_str(&line);
        }
    }
    if !view.not_served.is_empty() {
        let names: Vec<String> = view.not_served.iter().map(|r| r.to_string()).collect();
        let _ = writeln!(
            out,
            "not served here: {} (the operator's CRDs are not installed; members are the selected Pods)",
            names.join(", ")
        );
    }
    let line = &view.summary.text;
    if color {
        let paint = if view.needs_attention {
            Paint::Red
        } else if !view.complete {
            Paint::Yellow
        } else {
            Paint::Green
        };
        let _ = writeln!(out, "{}{line}\x1b[0m", paint.code());
    } else {
        let _ = writeln!(out, "{line}");
    }
    out
}

/// The view as YAML.
pub fn yaml(view: &FleetView) -> String {
    serde_saphyr::to_string(view)
        .unwrap_or_else(|e| format!("error: \"cannot render the view: {e}\"\n"))
}

/// What changes between two views beside the clock: a hash of the view as
/// JSON with `generated_at` and every `*_seconds` field left out, to tell
/// whether a redraw shows anything new. One pass over the text serde_json
/// writes (a key is a quoted string followed by `:`, which no string value
/// can imitate: its quotes are escaped), without a second copy of the view.
pub fn fingerprint(view: &FleetView) -> u64 {
    use std::hash::Hasher;
    let text = serde_json::to_vec(view).unwrap_or_default();
    let mut hash = std::collections::hash_map::DefaultHasher::new();
    let mut rest = text.as_slice();
    while let Some((&b, tail)) = rest.split_first() {
        if b == b'"' {
            if let Some(skip) = clock_field(rest) {
                rest = &rest[skip..];
                continue;
            }
        }
        hash.write_u8(b);
        rest = tail;
    }
    hash.finish()
}

/// The length of a clock field starting at `s` (`"generated_at":"…",` or
/// `"for_seconds":12,`, its trailing comma included), if `s` starts one.
fn clock_field(s: &[u8]) -> Option<usize> {
    let close = s[1..].iter().position(|b| *b == b'"')? + 1;
    let key = &s[1..close];
    if s.get(close + 1) != Some(&b':') || !(key == b"generated_at" || key.ends_with(b"_seconds")) {
        return None;
    }
    let value = close + 2;
    let end = if s.get(value) == Some(&b'"') {
        value + 1 + s[value + 1..].iter().position(|b| *b == b'"')? + 1
    } else {
        value + s[value..].iter().position(|b| *b == b',' || *b == b'}')?
    };
    Some(if s.get(end) == Some(&b',') {
        end + 1
    } else {
        end
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clock_fields_are_left_out_of_the_fingerprint() {
        let text = br#"{"generated_at":"2026-12-03T12:00:00Z","a":{"age_seconds":5,"b":"x_seconds","for_seconds":null}}"#;
        let mut kept = Vec::new();
        let mut rest = &text[..];
        while let Some((&b, tail)) = rest.split_first() {
            if b == b'"' {
                if let Some(skip) = clock_field(rest) {
                    rest = &rest[skip..];
                    continue;
                }
            }
            kept.push(b);
            rest = tail;
        }
        assert_eq!(
            String::from_utf8(kept).unwrap(),
            r#"{"a":{"b":"x_seconds",}}"#
        );
    }

    #[test]
    fn ages_read_like_kubectls() {
        assert_eq!(age(0), "0s");
        assert_eq!(age(59), "59s");
        assert_eq!(age(192), "3m12s");
        assert_eq!(age(1500), "25m");
        assert_eq!(age(3 * 3600 + 4 * 60), "3h4m");
        assert_eq!(age(2 * 86_400 + 5 * 3600), "2d5h");
        assert_eq!(age(-5), "0s");
    }

    #[test]
    fn colour_does_not_break_alignment() {
        let mut t = Table::new(&["A", "B"]);
        t.push(vec![("x".into(), Paint::Red), plain("1")]);
        t.push(vec![("longer".into(), Paint::None), plain("2")]);
        let mut plain_out = String::new();
        t.write(&mut plain_out, false);
        assert_eq!(plain_out, "A       B\nx       1\nlonger  2\n");
        let mut coloured = String::new();
        t.write(&mut coloured, true);
        let stripped = coloured.replace("\x1b[1;31m", "").replace("\x1b[0m", "");
        assert_eq!(stripped, plain_out);
    }
}
