//! What a witness records about its member, wherever it is kept: in the witness
//! Lease (`evidence::lease`, with Kubernetes) or in a witness file on a volume
//! other than the data (`serve --witness-file`, read back by `preflight
//! --witness-file`, without Kubernetes).
//!
//! A mark says three things, and each is what a rule of the decision needs:
//! * **who**: the member and cluster IDs it was seen under;
//! * **how far its log got**: a raft position (index, the term of the entry
//!   applied there, the MVCC revision at that point) that the member's WAL is
//!   *known to hold on disk*. etcd's `Status` reports the in-memory commit
//!   index, set when a Ready batch is handed over, before that batch is written
//!   and fsynced (`etcdserver/raft.go`: `updateCommittedIndex`, then
//!   `storage.Save`); a process killed in between restarts a batch behind what
//!   it reported. The sidecar therefore records a position only once a later
//!   poll saw the commit index move past it (`DurableTracker`): the raft loop
//!   hands over the next batch only after `Save` of the previous one returned,
//!   fsync included. A directory whose log ends behind such a mark went
//!   backwards; a crash cannot explain it;
//! * **which incarnation**: a member name is reused whenever a cluster of the
//!   same names is created again (a StatefulSet's `etcd-0`, a namespace
//!   re-created from manifests), and so is its witness. The hash of the token
//!   etcd formed the cluster with and the operator's `EtcdCluster` UID tell one
//!   incarnation from the next; a witness of another one neither vouches nor
//!   refuses.
//!
//! Marks written before this format (no `format`) carry the in-memory commit
//! index and no incarnation: they still say that the member started, but their
//! position is not used to refuse a directory (see docs/decision-table.md,
//! the witness's format).

use std::path::Path;

pub use crate::disk::ids::{token_sha256, Incarnation};
use crate::disk::ids::{ClusterId, HexIdError, MemberId};
use serde::{Deserialize, Serialize};

/// The format of marks this agent writes: positions proven durable, with the
/// incarnation.
pub const FORMAT: u32 = 2;

/// The largest witness file read (they are a few hundred bytes).
pub const FILE_LIMIT: u64 = 64 * 1024;

/// A raft position the member's log reached.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Position {
    /// The raft index (etcd's commit index at the time).
    pub raft_index: u64,
    /// The term of the entry last applied then (`Status.raftTerm`).
    pub raft_term: u64,
    /// The MVCC revision then (`Status` header), when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<i64>,
}

impl Position {
    /// The one of `self` and `other` with the higher raft index.
    pub fn max_by_index(self, other: Position) -> Position {
        if other.raft_index > self.raft_index {
            other
        } else {
            self
        }
    }
}

/// What a witness records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mark {
    /// The member it is about.
    pub member_id: MemberId,
    /// Its cluster.
    pub cluster_id: ClusterId,
    /// How far its log got.
    pub position: Position,
    /// Which incarnation of the cluster it belongs to.
    pub incarnation: Incarnation,
    /// Written in [`FORMAT`] (positions proven durable); `false` for a mark of
    /// an earlier format, whose index may be a Ready batch ahead of the disk.
    pub durable: bool,
}

/// What this Pod start's verdict tells the sidecar about witnesses (a part of
/// the verdict file): whose incarnation this start is, the position the
/// member must reach before it is ready, and whether the witnesses' old
/// position is to be replaced rather than raised.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WitnessTerms {
    /// The incarnation preflight judged this member by.
    #[serde(default)]
    pub incarnation: Incarnation,
    /// The position preflight held the directory to (a witness's mark, or the
    /// index its own backend applied): `/readyz` waits until the member's raft
    /// index reaches it. `None` when nothing was held.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub floor: Option<Floor>,
    /// preflight accepted a directory whose position is below the witnesses'
    /// (a restore bumped above every revision they saw): their position
    /// belongs to the history before the restore and is replaced.
    #[serde(default)]
    pub rebase: bool,
    /// Which verdict the re-base is of (`<decided_at_unix>/<Pod UID>/<node
    /// boot>`), filled by the sidecar from the verdict file it read
    /// (`server::boot`), never read from one. The witnesses record it with
    /// the position they re-based to: a re-base applies once, to the mark as
    /// it stood before this Pod start, and the mark then rises from the
    /// member's position as any other; a sidecar restarted in the same Pod
    /// start reads the same verdict and does not re-base a mark it raised
    /// itself.
    #[serde(default, skip_deserializing, skip_serializing_if = "Option::is_none")]
    pub rebase_by: Option<String>,
    /// The highest MVCC revision any witness of this member's name recorded,
    /// of any incarnation: what a restore bumps above (`restore
    /// --bump-revision auto`) so clients never see revisions go backwards.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seen_revision: Option<i64>,
}

/// The raft index a start must reach before it is ready, and where it came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Floor {
    /// The raft index.
    pub raft_index: u64,
    /// The source, as a sentence names it ("the witness Lease etcd-witness-m1").
    pub source: String,
}

/// Follows the positions a member reports and keeps the newest one proven to
/// be on its disk: a position is proven once a later report shows the commit
/// index past it (etcd's raft loop hands over the next Ready batch only after
/// the previous one was saved and fsynced). Reports under other IDs start over.
#[derive(Debug, Clone, Default)]
pub struct DurableTracker {
    pending: Option<(MemberId, ClusterId, Position)>,
    proven: Option<(MemberId, ClusterId, Position)>,
    /// The pending index the WAL on disk was last checked for.
    checked: Option<u64>,
    /// The last report repeated the pending position (nothing more to commit
    /// since): its batch has had a poll interval to reach the disk.
    stable: bool,
}

impl DurableTracker {
    /// The newest proven position of the member of these IDs, if any.
    pub fn proven(&self, member_id: MemberId, cluster_id: ClusterId) -> Option<Position> {
        self.proven
            .filter(|(m, c, _)| (*m, *c) == (member_id, cluster_id))
            .map(|(_, _, p)| p)
    }

    /// The position reported last, when nothing proves it yet and the WAL on
    /// disk was not checked for it: a member with nothing more to commit
    /// never shows the commit index move past it, so its WAL's last segment
    /// is read instead ([`crate::disk::wal::last_segment_end`]).
    pub fn to_check_on_disk(&mut self) -> Option<u64> {
        let (m, c, p) = self.pending?;
        let proven = self
            .proven
            .is_some_and(|(pm, pc, pp)| (pm, pc) == (m, c) && pp.raft_index >= p.raft_index);
        if proven || !self.stable || self.checked == Some(p.raft_index) {
            return None;
        }
        self.checked = Some(p.raft_index);
        Some(p.raft_index)
    }

    /// The WAL on disk ends at `last_index`: the position reported last is
    /// proven when it is at or below it (written before the batch that set it
    /// was handed over again; a process killed now keeps what the kernel has).
    pub fn on_disk(&mut self, last_index: u64) {
        if let Some((m, c, p)) = self.pending {
            if p.raft_index <= last_index {
                self.proven = Some((m, c, p));
            }
        }
    }

    /// etcd has exited (its WAL is no longer locked) and its WAL's last
    /// segment ends at `end`: what etcd wrote there was fsynced before it was
    /// acknowledged, and nothing will be added, so the committed part of that
    /// log — up to the last HardState's commit, never past the last entry —
    /// is proven, whether or not a poll ever saw the commit index move past
    /// it. Uncommitted entries past the commit are not: a new leader may
    /// replace them with a shorter log. The term recorded is the last entry's
    /// (a leader that truncates this log writes in a higher term, so the log
    /// on this disk never ends in a lower one); the revision is the newest
    /// reported at or below the index (a lower bound: the WAL does not carry
    /// it). A WAL of other IDs, or without a HardState, changes nothing.
    /// Returns the newest proven position of the member of these IDs.
    pub fn at_rest(
        &mut self,
        member_id: MemberId,
        cluster_id: ClusterId,
        end: &crate::disk::wal::SegmentEnd,
    ) -> Option<Position> {
        let ids = (member_id, cluster_id);
        if let (Some(commit), true) = (end.commit, end.ids == Some(ids)) {
            let index = commit.min(end.last_index);
            let revision = [self.pending, self.proven]
                .into_iter()
                .flatten()
                .filter(|(m, c, p)| (*m, *c) == ids && p.raft_index <= index)
                .filter_map(|(_, _, p)| p.revision)
                .max();
            let at_rest = Position {
                raft_index: index,
                raft_term: end.last_term,
                revision,
            };
            match self.proven {
                Some((m, c, p)) if (m, c) == ids && p.raft_index >= index => {}
                _ => self.proven = Some((member_id, cluster_id, at_rest)),
            }
        }
        self.proven(member_id, cluster_id)
    }

    /// Takes one report of the member; returns the newest proven position.
    pub fn observe(
        &mut self,
        member_id: MemberId,
        cluster_id: ClusterId,
        now: Position,
    ) -> Option<Position> {
        let ids = (member_id, cluster_id);
        self.stable = self
            .pending
            .is_some_and(|(m, c, p)| (m, c) == ids && p.raft_index == now.raft_index);
        match self.pending {
            Some((m, c, p)) if (m, c) == ids => {
                if now.raft_index > p.raft_index {
                    self.proven = Some((m, c, p));
                    self.pending = Some((m, c, now));
                } else if now.raft_index < p.raft_index {
                    // The index went down (the member restarted on other
                    // data): nothing about the new position is proven yet.
                    self.pending = Some((m, c, now));
                }
            }
            _ => {
                self.pending = Some((member_id, cluster_id, now));
                if self.proven.is_some_and(|(m, c, _)| (m, c) != ids) {
                    self.proven = None;
                }
            }
        }
        self.proven
            .filter(|(m, c, _)| (*m, *c) == ids)
            .map(|(_, _, p)| p)
    }
}

/// The witness file's JSON (IDs as 16-digit hex, as everywhere).
#[derive(Debug, Clone, Serialize, Deserialize)]
struct FileDoc {
    #[serde(default)]
    format: Option<u32>,
    member_id: String,
    cluster_id: String,
    raft_index: u64,
    raft_term: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    revision: Option<i64>,
    #[serde(default, flatten)]
    incarnation: Incarnation,
    #[serde(default)]
    regressed_to: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    rebased_by: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    updated_at: Option<String>,
}

/// A witness file: the mark, and the position the member was later seen
/// below it at (the sidecar latches that: the member lost data).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileMark {
    /// The mark.
    pub mark: Mark,
    /// Set once the member's index was seen below the mark.
    pub regressed_to: Option<u64>,
    /// The verdict whose re-base started this mark
    /// ([`WitnessTerms::rebase_by`]), if one did.
    pub rebased_by: Option<String>,
}

/// Why a witness file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    /// It could not be read.
    #[error("cannot read the witness file {}: {source}", path.display())]
    Read {
        /// The file.
        path: std::path::PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// It is not a witness file.
    #[error("the witness file {} is not one: {detail}", path.display())]
    Malformed {
        /// The file.
        path: std::path::PathBuf,
        /// What is wrong.
        detail: String,
    },
}

/// Decodes a witness file.
pub fn parse_file(bytes: &[u8]) -> Result<FileMark, String> {
    let f: FileDoc = serde_json::from_slice(bytes).map_err(|e| e.to_string())?;
    fn id<Id>(s: &str, parse: fn(&str) -> Result<Option<Id>, HexIdError>) -> Result<Id, String> {
        match parse(s) {
            Ok(Some(id)) => Ok(id),
            Ok(None) => Err("an empty ID".to_owned()),
            Err(e) => Err(e.to_string()),
        }
    }
    Ok(FileMark {
        mark: Mark {
            member_id: id(&f.member_id, MemberId::parse_recorded)?,
            cluster_id: id(&f.cluster_id, ClusterId::parse_recorded)?,
            position: Position {
                raft_index: f.raft_index,
                raft_term: f.raft_term,
                revision: f.revision,
            },
            incarnation: f.incarnation,
            durable: f.format.is_some_and(|v| v >= FORMAT),
        },
        regressed_to: f.regressed_to,
        rebased_by: f.rebased_by,
    })
}

/// Encodes a witness file in [`FORMAT`].
pub fn encode_file(m: &FileMark, updated_at: Option<String>) -> Result<Vec<u8>, String> {
    let doc = FileDoc {
        format: Some(FORMAT),
        member_id: m.mark.member_id.to_string(),
        cluster_id: m.mark.cluster_id.to_string(),
        raft_index: m.mark.position.raft_index,
        raft_term: m.mark.position.raft_term,
        revision: m.mark.position.revision,
        incarnation: m.mark.incarnation.clone(),
        regressed_to: m.regressed_to,
        rebased_by: m.rebased_by.clone(),
        updated_at,
    };
    serde_json::to_vec(&doc).map_err(|e| e.to_string())
}

/// Reads a witness file: `Ok(None)` when there is none. Blocking: call it
/// where a hung volume cannot hold anyone past their deadline.
pub fn read_file(path: &Path) -> Result<Option<FileMark>, FileError> {
    use std::io::Read as _;
    let file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(FileError::Read {
                path: path.to_path_buf(),
                source,
            })
        }
    };
    let mut bytes = Vec::new();
    file.take(FILE_LIMIT + 1)
        .read_to_end(&mut bytes)
        .map_err(|source| FileError::Read {
            path: path.to_path_buf(),
            source,
        })?;
    if bytes.len() as u64 > FILE_LIMIT {
        return Err(FileError::Malformed {
            path: path.to_path_buf(),
            detail: format!("larger than {FILE_LIMIT} bytes"),
        });
    }
    parse_file(&bytes)
        .map(Some)
        .map_err(|detail| FileError::Malformed {
            path: path.to_path_buf(),
            detail,
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pos(i: u64) -> Position {
        Position {
            raft_index: i,
            raft_term: 2,
            revision: Some(i as i64),
        }
    }

    #[test]
    fn a_position_is_proven_by_a_later_higher_report_only() {
        let (m, c) = (MemberId::new(1), ClusterId::new(2));
        let mut t = DurableTracker::default();
        assert_eq!(t.observe(m, c, pos(10)), None);
        // The same index again proves nothing: its batch may still be saving.
        assert_eq!(t.observe(m, c, pos(10)), None);
        assert_eq!(t.observe(m, c, pos(12)), Some(pos(10)));
        assert_eq!(t.observe(m, c, pos(12)), Some(pos(10)));
        assert_eq!(t.observe(m, c, pos(20)), Some(pos(12)));
        // Down (a restart on other data): the proven mark stays what it was,
        // the new position is not proven until it moves.
        assert_eq!(t.observe(m, c, pos(3)), Some(pos(12)));
        assert_eq!(t.observe(m, c, pos(4)), Some(pos(3)));
        // Other IDs start over.
        assert_eq!(t.observe(MemberId::new(9), c, pos(50)), None);
        assert_eq!(t.observe(MemberId::new(9), c, pos(51)), Some(pos(50)));
        // Nothing more to commit: the WAL on disk is asked, once per position,
        // after a second report of it.
        assert_eq!(t.to_check_on_disk(), None);
        t.observe(MemberId::new(9), c, pos(51));
        assert_eq!(t.to_check_on_disk(), Some(51));
        assert_eq!(t.to_check_on_disk(), None);
        t.on_disk(50);
        assert_eq!(t.proven(MemberId::new(9), c), Some(pos(50)));
        t.on_disk(51);
        assert_eq!(t.proven(MemberId::new(9), c), Some(pos(51)));
        assert_eq!(t.to_check_on_disk(), None);
    }

    #[test]
    fn at_rest_the_committed_part_of_the_wal_is_proven() {
        use crate::disk::wal::SegmentEnd;
        let (m, c) = (MemberId::new(1), ClusterId::new(2));
        let end = |ids, last_index, commit| SegmentEnd {
            ids,
            last_index,
            last_term: 3,
            commit,
            hard_term: commit.map(|_| 3),
            last_entry: last_index,
            clean: true,
        };
        let mut t = DurableTracker::default();
        t.observe(m, c, pos(10));
        t.observe(m, c, pos(12));
        assert_eq!(t.proven(m, c), Some(pos(10)));
        // Other IDs, or no HardState: nothing moves.
        assert_eq!(
            t.at_rest(m, c, &end(Some((MemberId::new(9), c)), 40, Some(40))),
            Some(pos(10))
        );
        assert_eq!(t.at_rest(m, c, &end(Some((m, c)), 40, None)), Some(pos(10)));
        // Up to the commit, never past the last entry; the newest revision
        // reported at or below it.
        let p = t.at_rest(m, c, &end(Some((m, c)), 40, Some(35))).unwrap();
        assert_eq!((p.raft_index, p.raft_term, p.revision), (35, 3, Some(12)));
        let p = t.at_rest(m, c, &end(Some((m, c)), 38, Some(45))).unwrap();
        assert_eq!(p.raft_index, 38);
        // Never lowered.
        assert_eq!(
            t.at_rest(m, c, &end(Some((m, c)), 20, Some(20)))
                .unwrap()
                .raft_index,
            38
        );
    }

    #[test]
    fn incarnations_differ_only_on_a_fact_both_know() {
        let a = Incarnation::new(Some("tok-a"), Some("uid-1"));
        let b = Incarnation::new(Some("tok-b"), Some("uid-1"));
        let c = Incarnation::new(Some("tok-a"), None);
        let d = Incarnation::new(None, Some("uid-2"));
        assert!(a.differs_from(&b).is_some());
        assert!(a.differs_from(&c).is_none() && a.same_as(&c));
        assert!(a.differs_from(&d).is_some());
        assert!(c.differs_from(&d).is_none() && !c.same_as(&d));
        assert!(Incarnation::default().is_unknown());
        assert_eq!(token_sha256("etcd-cluster").len(), 64);
    }

    #[test]
    fn a_file_of_the_earlier_format_is_not_durable_and_round_trips_otherwise() {
        let old = br#"{"member_id":"0000000000000001","cluster_id":"0000000000000002","raft_index":40,"raft_term":3,"regressed_to":null}"#;
        let f = parse_file(old).unwrap();
        assert!(!f.mark.durable && f.mark.incarnation.is_unknown());
        let mut new = f.clone();
        new.mark.durable = true;
        new.mark.incarnation = Incarnation::new(Some("t"), None);
        new.mark.position.revision = Some(77);
        let bytes = encode_file(&new, Some("now".into())).unwrap();
        assert_eq!(parse_file(&bytes).unwrap(), new);
    }

    #[test]
    fn garbage_never_panics() {
        for bytes in [&b""[..], b"{", b"[]", b"{\"member_id\":1}", &[0xff; 40]] {
            assert!(parse_file(bytes).is_err());
        }
    }
}
