//! The witness without Kubernetes: a small file beside the verdict file (the
//! Pod's emptyDir, which outlives container restarts) holding the highest raft
//! position this member was seen at while it was consistent.
//!
//! Why a file and why a latch. A member whose data dir was wiped and that
//! re-bootstrapped a fresh cluster keeps its member and cluster IDs (both are
//! derived from the peer URLs and the token), so the ID checks pass; only its raft
//! index gives it away, and only against a mark that survives both the member's
//! restart and `serve`'s (the WAL read at boot is the *new* WAL after a restart).
//! And once the index has been seen below the mark, new writes must not make it
//! Ready again by pushing the index past it: the regression is recorded in the
//! file and stays until the file is removed (a new Pod, or by hand once the
//! member was recovered).

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use serde::Deserialize;

use super::identity::LocalMember;
use crate::disk::ids::{ClusterId, HexIdError, MemberId};

/// What the file holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mark {
    /// The member it is about.
    pub member_id: MemberId,
    /// Its cluster.
    pub cluster_id: ClusterId,
    /// The highest raft index seen while consistent.
    pub raft_index: u64,
    /// The raft term at that index.
    pub raft_term: u64,
    /// Set once the index was seen below `raft_index`: the member lost data.
    pub regressed_to: Option<u64>,
}

/// The file's JSON (IDs as 16-digit hex, as everywhere).
#[derive(Debug, Deserialize)]
struct FileMark {
    member_id: String,
    cluster_id: String,
    raft_index: u64,
    raft_term: u64,
    #[serde(default)]
    regressed_to: Option<u64>,
}

fn parse(bytes: &[u8]) -> Result<Mark, String> {
    let f: FileMark = serde_json::from_slice(bytes).map_err(|e| e.to_string())?;
    fn id<Id>(s: &str, parse: fn(&str) -> Result<Option<Id>, HexIdError>) -> Result<Id, String> {
        match parse(s) {
            Ok(Some(id)) => Ok(id),
            Ok(None) => Err("an empty ID".to_owned()),
            Err(e) => Err(e.to_string()),
        }
    }
    Ok(Mark {
        member_id: id(&f.member_id, MemberId::parse_recorded)?,
        cluster_id: id(&f.cluster_id, ClusterId::parse_recorded)?,
        raft_index: f.raft_index,
        raft_term: f.raft_term,
        regressed_to: f.regressed_to,
    })
}

/// The witness file and what it last held.
#[derive(Debug)]
pub struct Witness {
    path: PathBuf,
    mark: Option<Mark>,
}

impl Witness {
    /// Reads the file; a missing one is no mark yet. An unreadable or malformed
    /// one is logged and ignored (then rewritten): refusing forever on a garbled
    /// emptyDir file would need a human for nothing.
    pub fn load(path: &Path) -> Witness {
        let mark = match std::fs::read(path) {
            Ok(bytes) => match parse(&bytes) {
                Ok(m) => {
                    tracing::info!(path = %path.display(), member_id = %m.member_id, raft_index = m.raft_index, regressed = m.regressed_to.is_some(), "read the witness file");
                    Some(m)
                }
                Err(e) => {
                    tracing::warn!(path = %path.display(), error = %e, "ignoring a malformed witness file");
                    None
                }
            },
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "cannot read the witness file");
                None
            }
        };
        Witness {
            path: path.to_path_buf(),
            mark,
        }
    }

    /// The mark, if any.
    pub fn mark(&self) -> Option<&Mark> {
        self.mark.as_ref()
    }

    /// Why `member` is not the data this member had, if it is not: its index is
    /// below the mark, or was seen below it before. Latches the regression.
    pub fn check(&mut self, member: &LocalMember) -> Option<String> {
        let mark = self.mark.as_mut()?;
        if (mark.member_id, mark.cluster_id) != (member.member_id, member.cluster_id) {
            return None;
        }
        if let Some(seen) = mark.regressed_to {
            return Some(format!(
                "this member's raft index was seen at {seen}, below the high-water mark {} the witness file {} recorded: it lost committed data (re-bootstrapped on an empty data dir?); it stays not ready until the member is recovered and the witness file removed",
                mark.raft_index,
                self.path.display()
            ));
        }
        if member.raft_index != 0 && member.raft_index < mark.raft_index {
            mark.regressed_to = Some(member.raft_index);
            let reason = format!(
                "raft index {} is below the high-water mark {} the witness file {} recorded for this member: committed entries were lost (re-bootstrapped on an empty data dir?)",
                member.raft_index,
                mark.raft_index,
                self.path.display()
            );
            tracing::warn!(reason = %reason, "the member's raft index went backwards");
            self.save();
            return Some(reason);
        }
        None
    }

    /// Takes the mark the witness Lease holds (read at boot) as a mark too:
    /// with no file mark it becomes the mark; under the same IDs it raises
    /// the file's. A file mark of other IDs is this Pod's own and is kept.
    pub fn adopt(&mut self, lease: Mark) {
        let changed = match &mut self.mark {
            None => {
                self.mark = Some(lease);
                true
            }
            Some(m) if (m.member_id, m.cluster_id) == (lease.member_id, lease.cluster_id) => {
                if lease.raft_index > m.raft_index {
                    m.raft_index = lease.raft_index;
                    m.raft_term = lease.raft_term;
                    true
                } else {
                    false
                }
            }
            Some(_) => false,
        };
        if changed {
            tracing::info!(
                raft_index = self.mark.as_ref().map_or(0, |m| m.raft_index),
                "took the witness Lease's raft index as the high-water mark"
            );
            self.save();
        }
    }

    /// Raises the mark to `member`'s position; call only when the member is
    /// otherwise consistent. A member of another identity that is consistent
    /// (the expected identity changed) starts a new mark.
    pub fn observe(&mut self, member: &LocalMember) {
        let fresh = Mark {
            member_id: member.member_id,
            cluster_id: member.cluster_id,
            raft_index: member.raft_index,
            raft_term: member.raft_term,
            regressed_to: None,
        };
        let changed = match &mut self.mark {
            Some(m) if (m.member_id, m.cluster_id) == (fresh.member_id, fresh.cluster_id) => {
                if m.regressed_to.is_none() && fresh.raft_index > m.raft_index {
                    m.raft_index = fresh.raft_index;
                    m.raft_term = fresh.raft_term;
                    true
                } else {
                    false
                }
            }
            _ => {
                self.mark = Some(fresh);
                true
            }
        };
        if changed {
            self.save();
        }
    }

    /// Writes the file atomically (temp file, rename); a failure is logged, the
    /// mark kept in memory.
    fn save(&self) {
        let Some(mark) = &self.mark else { return };
        let tmp = self
            .path
            .with_extension(format!("tmp.{}", std::process::id()));
        let write = || -> std::io::Result<()> {
            let bytes = serde_json::to_vec(&serde_json::json!({
                "member_id": mark.member_id,
                "cluster_id": mark.cluster_id,
                "raft_index": mark.raft_index,
                "raft_term": mark.raft_term,
                "regressed_to": mark.regressed_to,
                "updated_at": prost_types::Timestamp::from(SystemTime::now()).to_string(),
            }))?;
            std::fs::write(&tmp, bytes)?;
            std::fs::rename(&tmp, &self.path)
        };
        if let Err(e) = write() {
            let _ = std::fs::remove_file(&tmp);
            tracing::warn!(path = %self.path.display(), error = %e, "cannot write the witness file");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(index: u64) -> LocalMember {
        LocalMember {
            name: "m0".into(),
            member_id: MemberId::new(1),
            cluster_id: ClusterId::new(2),
            peer_urls: Vec::new(),
            client_urls: Vec::new(),
            is_learner: false,
            leader_id: Some(MemberId::new(1)),
            raft_term: 2,
            raft_index: index,
            raft_applied_index: index,
            db_size: 0,
            db_size_in_use: 0,
            etcd_version: "3.5.1".into(),
            alarms: Vec::new(),
        }
    }

    #[test]
    fn a_regression_is_latched_and_survives_a_reload() {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("witness.json");
        let mut w = Witness::load(&path);
        assert!(w.check(&member(10)).is_none());
        w.observe(&member(10));
        w.observe(&member(50));
        assert_eq!(Witness::load(&path).mark().unwrap().raft_index, 50);
        let mut w = Witness::load(&path);
        assert!(w.check(&member(60)).is_none());
        assert!(w.check(&member(4)).is_some());
        // New writes push the index past the mark: still not the data it had.
        let mut w = Witness::load(&path);
        assert!(w.check(&member(70)).unwrap().contains("seen at 4"));
        w.observe(&member(70));
        assert_eq!(w.mark().unwrap().raft_index, 50);
    }

    #[test]
    fn the_leases_mark_raises_the_files_under_the_same_ids_only() {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("witness.json");
        let lease = |member_id, raft_index| Mark {
            member_id: MemberId::new(member_id),
            cluster_id: ClusterId::new(2),
            raft_index,
            raft_term: 3,
            regressed_to: None,
        };
        // A new Pod (empty emptyDir): the Lease's mark is the mark.
        let mut w = Witness::load(&path);
        w.adopt(lease(1, 80));
        assert_eq!(w.mark().unwrap().raft_index, 80);
        assert!(w
            .check(&member(10))
            .unwrap()
            .contains("below the high-water mark 80"));
        assert_eq!(Witness::load(&path).mark().unwrap().regressed_to, Some(10));
        // Lower, or of other IDs: the file's stays.
        let mut w = Witness::load(&path);
        w.adopt(lease(1, 20));
        w.adopt(lease(9, 900));
        assert_eq!(w.mark().unwrap().raft_index, 80);
    }
}
