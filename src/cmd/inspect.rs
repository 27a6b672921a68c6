//! `inspect`: the offline report of a data directory (SPEC §2.1). Read-only.

use std::fmt::Write as _;

use crate::cli::InspectArgs;
use crate::disk::ids::hex_id;
use crate::disk::layout::DirState;
use crate::disk::layout::{self, Inspection, Options, Paths};
use crate::disk::lock::Probe;
use crate::exit::Exit;
use crate::output;

/// Runs `inspect`.
pub fn run(args: &InspectArgs) -> crate::error::Result<Exit> {
    let paths = Paths::new(&args.dirs.data_dir, args.dirs.wal_dir.as_deref());
    let report = layout::inspect(
        &paths,
        Options {
            hash: args.hash,
            usage: true,
            locks: Probe::Thorough,
        },
    );
    tracing::info!(
        state = ?report.state,
        member_id = report.member_id.map(hex_id),
        cluster_id = report.cluster_id.map(hex_id),
        running = report.running,
        "inspected data dir"
    );
    output::emit(args.output.format, &summary(&report), &report)?;
    Ok(exit_for(&report))
}

/// The exit code of an inspection: 0 empty or initialized; 12 corrupt; 13 partial; 3 unreadable.
pub fn exit_for(report: &Inspection) -> Exit {
    match report.state {
        DirState::Empty | DirState::Initialized => Exit::Ok,
        DirState::Corrupt => Exit::RefuseCorrupt,
        DirState::Partial => Exit::RefusePartial,
        DirState::Unreadable => Exit::Unreadable,
    }
}

/// The human summary printed on stderr.
pub fn summary(r: &Inspection) -> String {
    let mut s = String::new();
    let state = serde_json::to_value(r.state)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default();
    let _ = writeln!(s, "data dir {}: {state}", r.paths.data_dir.display());
    if let Some(p) = &r.problem {
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
    if let (Some(m), Some(c)) = (r.member_id, r.cluster_id) {
        let _ = writeln!(s, "  member {} of cluster {}", hex_id(m), hex_id(c));
    }
    if let Some(hs) = &r.hard_state {
        let _ = writeln!(
            s,
            "  term {} commit {} vote {}; last entry {} (term {})",
            hs.term,
            hs.commit,
            hex_id(hs.vote),
            r.last_index.unwrap_or(0),
            r.last_term.unwrap_or(0)
        );
    }
    if let Some(snap) = r.snapshot {
        let _ = writeln!(s, "  snapshot index {} term {}", snap.index, snap.term);
    }
    if let Some(w) = &r.wal {
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
    if let Some(b) = &r.backend {
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
    }
    if let Some(why) = &r.backend_unread {
        let _ = writeln!(s, "  backend not read: {why}");
    }
    if let Some(h) = &r.kv_hash {
        let _ = writeln!(
            s,
            "  kv hash {} revision {} keys {}",
            h.hash, h.revision, h.total_key
        );
    }
    for m in &r.membership {
        let _ = writeln!(
            s,
            "  recorded member {} {} {} ({})",
            hex_id(m.id),
            m.name,
            m.peer_urls.join(","),
            m.source
        );
    }
    if r.running {
        let _ = writeln!(s, "  RUNNING: an etcd process holds this data dir's locks");
    }
    for e in &r.unexpected {
        let _ = writeln!(s, "  note: {} ({}): {}", e.path.display(), e.kind, e.note);
    }
    s
}
