//! `inspect`: the offline report of a data directory (docs/commands.md § inspect), and with
//! `--upgrade-check VERSION` what would make that etcd refuse it. Read-only.

use std::fmt::Write as _;

use crate::cli::InspectArgs;
use crate::disk::layout::{self, BackendRead, DirKind, Inspection, Options, Paths};
use crate::disk::lock::Probe;
use crate::disk::upgrade::{self, UpgradeCheck};
use crate::exit::Exit;
use crate::output;
use serde::Serialize;

/// Runs `inspect`.
pub fn run(args: &InspectArgs) -> crate::error::Result<Exit> {
    let paths = Paths::new(&args.dirs.data_dir, args.dirs.wal_dir.as_deref());
    let report = layout::inspect(
        &paths,
        Options {
            hash: args.hash,
            usage: true,
            locks: Probe::Thorough,
            threads: args.threads.map_or(0, |n| n.get()),
        },
    );
    tracing::info!(
        state = %report.kind(),
        member_id = report.member_id().map(|id| id.to_string()),
        cluster_id = report.cluster_id().map(|id| id.to_string()),
        running = report.running,
        "inspected data dir"
    );
    let flags = args.etcd_flags.flags();
    let check = args
        .upgrade_check
        .map(|t| upgrade::check(&report, t, &flags));
    let mut text = summary(&report);
    if let Some(c) = &check {
        text.push_str(&upgrade_summary(c));
    }
    let doc = Doc {
        inspection: &report,
        upgrade_check: check.as_ref(),
    };
    output::emit(args.output.format, &text, &doc)?;
    match exit_for(&report) {
        Exit::Ok if check.as_ref().is_some_and(|c| c.blocked) => Ok(Exit::RefuseVersion),
        exit => Ok(exit),
    }
}

/// `inspect`'s JSON: the inspection, and the upgrade check when asked for.
#[derive(Serialize)]
struct Doc<'a> {
    #[serde(flatten)]
    inspection: &'a Inspection,
    #[serde(skip_serializing_if = "Option::is_none")]
    upgrade_check: Option<&'a UpgradeCheck>,
}

/// The upgrade check's lines of the human summary.
pub fn upgrade_summary(c: &UpgradeCheck) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "  upgrade check for etcd {} (directory last written by {}): {}",
        c.target,
        c.dir_line.as_deref().unwrap_or("an unknown line"),
        if c.blocked {
            "BLOCKED"
        } else if c.findings.is_empty() {
            "nothing found"
        } else {
            "warnings only"
        }
    );
    for f in &c.findings {
        let _ = writeln!(
            s,
            "    {} {}: {}\n      rule: {}\n      remedy: {}",
            if f.blocks { "BLOCKS" } else { "warning" },
            f.code,
            f.message,
            f.rule,
            f.remedy
        );
    }
    s
}

/// The exit code of an inspection: 0 empty or initialized; 12 corrupt; 13 partial; 3 unreadable.
pub fn exit_for(report: &Inspection) -> Exit {
    match report.kind() {
        DirKind::Empty | DirKind::Initialized => Exit::Ok,
        DirKind::Corrupt => Exit::RefuseCorrupt,
        DirKind::Partial => Exit::RefusePartial,
        DirKind::Unreadable => Exit::Unreadable,
    }
}

/// The human summary printed on stderr.
pub fn summary(r: &Inspection) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "data dir {}: {}", r.paths.data_dir.display(), r.kind());
    if let Some(p) = r.problem() {
        let _ = write!(s, "  problem: {}", p.message);
        if let Some(path) = &p.path {
            let _ = write!(s, " ({}", path.display());
            if let Some(o) = p.offset {
                let _ = write!(s, " at byte {o}");
            }
            s.push(')');
        }
        s.push('\n');
    }
    if let Some(log) = r.log() {
        let hs = &log.hard_state;
        let _ = writeln!(
            s,
            "  member {} of cluster {}",
            log.member_id, log.cluster_id
        );
        let _ = writeln!(
            s,
            "  term {} commit {} vote {}; last entry {} (term {})",
            hs.term, hs.commit, hs.vote, log.last_index, log.last_term
        );
    }
    if let Some(snap) = r.snapshot() {
        let _ = writeln!(s, "  snapshot index {} term {}", snap.index, snap.term);
    }
    if let Some(w) = r.log().map(|l| &l.wal) {
        let _ = writeln!(
            s,
            "  wal: {} segment(s), {} record(s)",
            w.segments.len(),
            w.records
        );
        if let Some(t) = &w.torn_tail {
            let _ = writeln!(s, "  torn tail (etcd repairs it on start): {}", t.message);
        }
    }
    let Some(member) = r.initialized() else {
        return tail(s, r);
    };
    match &member.backend {
        BackendRead::Read {
            summary: b,
            kv_hash,
        } => {
            let _ = writeln!(
                s,
                "  backend: {} bytes ({} in use), consistent index {}, {} member(s)",
                b.logical_size,
                b.size_in_use.unwrap_or(0),
                b.consistent_index.unwrap_or(0),
                b.members.len()
            );
            let _ = writeln!(
                s,
                "  storage version: {} (from {})",
                b.storage_version
                    .as_deref()
                    .unwrap_or("unknown (3.4 or older)"),
                b.storage_version_source
            );
            if let Some(h) = kv_hash {
                let _ = writeln!(
                    s,
                    "  kv hash {} revision {} keys {}",
                    h.hash, h.revision, h.total_key
                );
            }
        }
        BackendRead::Unread(why) => {
            let _ = writeln!(s, "  backend not read: {why}");
        }
    }
    for m in &member.membership {
        let _ = writeln!(
            s,
            "  recorded member {} {} {} ({})",
            m.id,
            m.name,
            m.peer_urls.join(","),
            m.source
        );
    }
    tail(s, r)
}

/// The lines every state ends with: locks and debris.
fn tail(mut s: String, r: &Inspection) -> String {
    if r.running {
        let _ = writeln!(s, "  RUNNING: an etcd process holds this data dir's locks");
    }
    for e in &r.unexpected {
        let _ = writeln!(s, "  note: {} ({}): {}", e.path.display(), e.kind, e.note);
    }
    s
}
