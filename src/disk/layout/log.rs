//! Step three: the WAL, read and verified whole: the member's identity, its
//! raft state, and the records the later steps need (snapshot records,
//! membership changes, v2 requests).

use super::super::wal::{self, Wal};
use super::{DirState, Failure, Log, Paths, Problem, SegmentFacts, WalFacts};

/// Reads the WAL with `threads` threads; a WAL that cannot be read whole ends
/// the read (corrupt, or unreadable when permission was denied).
pub(super) fn read(paths: &Paths, threads: usize) -> Result<(Wal, Log), DirState> {
    let wal = wal::read_wal_with(&paths.wal_dir, threads).map_err(|e| {
        let (path, offset) = e.location();
        DirState::reading(e.is_permission(), Failure::at(e.to_string(), path, offset))
    })?;
    let log = Log {
        member_id: wal.member_id,
        cluster_id: wal.cluster_id,
        hard_state: wal.hard_state,
        last_index: wal.last_index,
        last_term: wal.last_term,
        wal: WalFacts {
            segments: wal
                .segments
                .iter()
                .map(|s| SegmentFacts {
                    name: s.name.clone(),
                    size: s.size,
                })
                .collect(),
            records: wal.records,
            torn_tail: wal.torn_tail.as_ref().map(|t| Problem {
                message: t.detail.clone(),
                path: Some(t.path.clone()),
                offset: Some(t.offset),
            }),
        },
    };
    Ok((wal, log))
}
