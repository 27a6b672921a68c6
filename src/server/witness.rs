//! The witness file: a small file (by default beside the verdict file, in the
//! Pod's emptyDir, which outlives container restarts; without Kubernetes,
//! `--witness-file` on a volume other than the data) holding the newest raft
//! position this member's disk was proven to hold while it was consistent
//! (`evidence::mark`), and the incarnation it belongs to. `preflight
//! --witness-file` reads the same file as a witness.
//!
//! Why a latch. A member whose data dir was wiped and that re-bootstrapped a
//! fresh cluster keeps its member and cluster IDs (both are derived from the
//! peer URLs and the token), so the ID checks pass; only its raft index gives
//! it away, and only against a mark that survives both the member's restart
//! and `serve`'s (the WAL read at boot is the *new* WAL after a restart). Once
//! the index has been seen below the mark, new writes must not make it Ready
//! again by pushing the index past it: the regression is recorded in the file
//! and stays until the file is removed (a new Pod, or by hand once the member
//! was recovered: the sidecar looks for the file before every check, and a
//! file someone removed takes the mark and the latch in memory with it), or
//! until a verdict of preflight re-bases the witnesses (a restore accepted on
//! purpose). A re-base is applied once, to the mark as it stood before this
//! Pod start: the file records the verdict it was re-based for, and from then
//! on the mark rises and latches as any other, across polls and across
//! restarts of the sidecar in the same Pod start.
//!
//! The mark here is only ever what this file saw: the witness Lease's mark is
//! preflight's business (it checks the directory against it before etcd
//! starts, and hands the position it held the start to over in the verdict:
//! [`crate::evidence::mark::WitnessTerms`]).

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use super::identity::LocalMember;
use crate::evidence::mark::{
    encode_file, read_file, FileMark, Incarnation, Mark, Position, WitnessTerms,
};

/// The witness file and what it last held.
#[derive(Debug)]
pub struct Witness {
    path: PathBuf,
    file: Option<FileMark>,
    /// The verdict whose re-base was applied to this file (read back from
    /// it, or applied by this process): a re-base is applied once.
    rebased_by: Option<String>,
    /// The mark in memory is the one on disk (read from it, or last written
    /// to it): the file missing then means someone removed it. A mark that
    /// could not be written is kept in memory only, and its file's absence
    /// says nothing.
    on_disk: bool,
}

impl Witness {
    /// Reads the file; a missing one is no mark yet. An unreadable or malformed
    /// one is logged and ignored (then rewritten): refusing forever on a garbled
    /// emptyDir file would need a human for nothing.
    pub fn load(path: &Path) -> Witness {
        let file = match read_file(path) {
            Ok(Some(f)) => {
                tracing::info!(path = %path.display(), member_id = %f.mark.member_id, raft_index = f.mark.position.raft_index, regressed = f.regressed_to.is_some(), "read the witness file");
                Some(f)
            }
            Ok(None) => None,
            Err(e) => {
                tracing::warn!(error = %e, "ignoring the witness file");
                None
            }
        };
        Witness {
            path: path.to_path_buf(),
            rebased_by: file.as_ref().and_then(|f| f.rebased_by.clone()),
            on_disk: file.is_some(),
            file,
        }
    }

    /// The file the mark is kept in, when the mark in memory is the one
    /// written there: the poller checks that it is still there (a bounded
    /// stat, [`Witness::removed`] when it is not) before each check.
    pub fn kept_in(&self) -> Option<&Path> {
        (self.file.is_some() && self.on_disk).then_some(self.path.as_path())
    }

    /// Someone removed the file (the runbook's acknowledgement of a
    /// regression, once the member was recovered): the mark and the latch in
    /// memory go with it, and the mark starts again from the member's
    /// position at the next consistent poll.
    pub fn removed(&mut self) {
        if let Some(f) = self.file.take() {
            tracing::info!(
                path = %self.path.display(),
                raft_index = f.mark.position.raft_index,
                regressed_to = f.regressed_to,
                "the witness file was removed: its mark and latch are dropped, the mark starts again from the member's position"
            );
        }
        self.on_disk = false;
    }

    /// The mark, if any.
    pub fn mark(&self) -> Option<&Mark> {
        self.file.as_ref().map(|f| &f.mark)
    }

    /// Where the index was seen below the mark, if it was.
    pub fn regressed_to(&self) -> Option<u64> {
        self.file.as_ref().and_then(|f| f.regressed_to)
    }

    /// Why `member` is not the data this member had, if it is not: its index is
    /// below the mark — and so is its WAL on disk (`wal_end`, when it could be
    /// read: a member replaying after a restart reports a commit index that
    /// rises batch by batch) — or was seen below it before. Latches the
    /// regression.
    pub fn check(&mut self, member: &LocalMember, wal_end: Option<u64>) -> Option<String> {
        let path = self.path.display().to_string();
        let f = self.file.as_mut()?;
        if (f.mark.member_id, f.mark.cluster_id) != (member.member_id, member.cluster_id) {
            return None;
        }
        let mark = f.mark.position.raft_index;
        if let Some(seen) = f.regressed_to {
            return Some(format!(
                "this member's raft index was seen at {seen}, below the high-water mark {mark} its disk was proven to hold (witness file {path}): it lost committed data (re-bootstrapped on an empty data dir, or put back to an older copy?); it stays not ready until the member is recovered and the witness file removed (deleting the Pod removes it with the Pod's emptyDir; the next preflight then checks the data directory)"
            ));
        }
        if member.raft_index != 0
            && member.raft_index < mark
            && wal_end.is_none_or(|end| end < mark)
        {
            f.regressed_to = Some(member.raft_index);
            let reason = format!(
                "raft index {} is below the high-water mark {mark} this member's disk was proven to hold (witness file {path}): committed entries were lost (re-bootstrapped on an empty data dir, or put back to an older copy?)",
                member.raft_index
            );
            tracing::warn!(reason = %reason, "the member's raft index went backwards");
            self.save();
            return Some(reason);
        }
        None
    }

    /// Takes this Pod start's verdict: a mark of another incarnation, or one a
    /// deliberate restore re-based, is not this member's history any more.
    /// A re-base is applied once per verdict (`terms.rebase_by`), to the mark
    /// as it stood before: the mark written after it records the verdict, and
    /// rises (and latches) from the member's position like any other, across
    /// polls and restarts of the sidecar within the same Pod start.
    pub fn align(&mut self, terms: &WitnessTerms) {
        let rebase = terms
            .rebase
            .then(|| terms.rebase_by.clone().unwrap_or_default())
            .filter(|by| self.rebased_by.as_ref() != Some(by));
        if let Some(by) = &rebase {
            self.rebased_by = Some(by.clone());
        }
        let Some(f) = &self.file else { return };
        let other = f.mark.incarnation.differs_from(&terms.incarnation);
        if rebase.is_some() || other.is_some() {
            tracing::info!(
                path = %self.path.display(),
                raft_index = f.mark.position.raft_index,
                why = other.unwrap_or("this start's verdict accepted a restore above it"),
                "the witness file's mark is of another history: starting over"
            );
            self.file = None;
            self.on_disk = false;
            if let Err(e) = std::fs::remove_file(&self.path) {
                if e.kind() != std::io::ErrorKind::NotFound {
                    tracing::warn!(path = %self.path.display(), error = %e, "cannot remove the witness file");
                }
            }
        }
    }

    /// Raises the mark to `position`, the newest position proven on the disk of
    /// `member`; call only when the member is otherwise consistent. A member of
    /// another identity that is consistent (the expected identity changed)
    /// starts a new mark.
    pub fn observe(&mut self, member: &LocalMember, position: Position, incarnation: &Incarnation) {
        let fresh = FileMark {
            mark: Mark {
                member_id: member.member_id,
                cluster_id: member.cluster_id,
                position,
                incarnation: incarnation.clone(),
                durable: true,
            },
            regressed_to: None,
            rebased_by: self.rebased_by.clone(),
        };
        let changed = match &mut self.file {
            Some(f)
                if (f.mark.member_id, f.mark.cluster_id)
                    == (member.member_id, member.cluster_id) =>
            {
                let mut changed = false;
                if f.regressed_to.is_none() && position.raft_index > f.mark.position.raft_index {
                    f.mark.position = position;
                    changed = true;
                }
                if !f.mark.durable || (f.mark.incarnation.is_unknown() && !incarnation.is_unknown())
                {
                    // An earlier format's mark: from now on it is a proven one
                    // (the member is consistent and at or past it).
                    f.mark.durable = true;
                    f.mark.incarnation = incarnation.clone();
                    f.mark.position = position.max_by_index(f.mark.position);
                    changed = true;
                }
                changed
            }
            _ => {
                self.file = Some(fresh);
                true
            }
        };
        if changed {
            self.save();
        }
    }

    /// Writes the file atomically (temp file, rename); a failure is logged, the
    /// mark kept in memory.
    fn save(&mut self) {
        let Some(f) = &self.file else { return };
        let tmp = self
            .path
            .with_extension(format!("tmp.{}", std::process::id()));
        let now = prost_types::Timestamp::from(SystemTime::now()).to_string();
        let write = || -> std::io::Result<()> {
            let bytes = encode_file(f, Some(now)).map_err(std::io::Error::other)?;
            std::fs::write(&tmp, bytes)?;
            std::fs::rename(&tmp, &self.path)
        };
        let written = write();
        if let Err(e) = &written {
            let _ = std::fs::remove_file(&tmp);
            tracing::warn!(path = %self.path.display(), error = %e, "cannot write the witness file");
        }
        self.on_disk = written.is_ok();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::disk::ids::{ClusterId, MemberId};

    impl Witness {
        /// [`Witness::check`] with a WAL that does not reach the mark either.
        fn check_at(&mut self, member: &LocalMember) -> Option<String> {
            self.check(member, Some(member.raft_index))
        }
    }

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
            revision: index as i64,
            db_size: 0,
            db_size_in_use: 0,
            etcd_version: "3.5.1".into(),
            alarms: Vec::new(),
        }
    }

    fn at(index: u64) -> Position {
        Position {
            raft_index: index,
            raft_term: 2,
            revision: Some(index as i64),
        }
    }

    #[test]
    fn a_regression_is_latched_and_survives_a_reload() {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("witness.json");
        let inc = Incarnation::new(Some("t"), None);
        let mut w = Witness::load(&path);
        assert!(w.check_at(&member(10)).is_none());
        w.observe(&member(12), at(10), &inc);
        w.observe(&member(52), at(50), &inc);
        assert_eq!(Witness::load(&path).mark().unwrap().position.raft_index, 50);
        assert!(Witness::load(&path).mark().unwrap().durable);
        let mut w = Witness::load(&path);
        assert!(w.check_at(&member(60)).is_none());
        assert!(w.check_at(&member(4)).is_some());
        // New writes push the index past the mark: still not the data it had.
        let mut w = Witness::load(&path);
        assert!(w.check_at(&member(70)).unwrap().contains("seen at 4"));
        w.observe(&member(70), at(68), &inc);
        assert_eq!(w.mark().unwrap().position.raft_index, 50);
    }

    #[test]
    fn a_commit_index_below_the_mark_over_a_wal_that_reaches_it_is_a_replay() {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("witness.json");
        let inc = Incarnation::new(Some("t"), None);
        let mut w = Witness::load(&path);
        w.observe(&member(52), at(50), &inc);
        // Restarted: its commit index rises batch by batch over a WAL that
        // holds everything.
        assert!(w.check(&member(20), Some(60)).is_none());
        assert!(w.regressed_to().is_none());
        // Its WAL does not reach the mark: lost.
        assert!(w.check(&member(20), Some(30)).is_some());
    }

    #[test]
    fn a_verdict_of_another_incarnation_or_a_rebase_starts_the_mark_over() {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("witness.json");
        let inc = Incarnation::new(Some("t"), None);
        let mut w = Witness::load(&path);
        w.observe(&member(52), at(50), &inc);
        assert!(w.check_at(&member(4)).is_some());
        // The same incarnation, no rebase: the latch stays.
        w.align(&WitnessTerms {
            incarnation: inc.clone(),
            ..WitnessTerms::default()
        });
        assert!(Witness::load(&path).regressed_to().is_some());
        // A restore accepted on purpose: the old history's mark goes.
        w.align(&WitnessTerms {
            incarnation: inc.clone(),
            rebase: true,
            ..WitnessTerms::default()
        });
        assert!(w.mark().is_none() && !path.exists());
        assert!(w.check_at(&member(4)).is_none());
        // Another incarnation's file is not this member's history either.
        w.observe(&member(52), at(50), &inc);
        w.align(&WitnessTerms {
            incarnation: Incarnation::new(Some("new-token"), None),
            ..WitnessTerms::default()
        });
        assert!(w.mark().is_none());
    }

    #[test]
    fn a_file_removed_by_someone_else_takes_the_mark_and_latch_with_it() {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("witness.json");
        let inc = Incarnation::new(Some("t"), None);
        let mut w = Witness::load(&path);
        assert_eq!(w.kept_in(), None);
        w.observe(&member(52), at(50), &inc);
        assert!(w.check_at(&member(4)).is_some());
        assert_eq!(w.kept_in(), Some(path.as_path()));
        // The runbook's acknowledgement: the file is removed.
        std::fs::remove_file(&path).unwrap();
        w.removed();
        assert!(w.mark().is_none() && w.regressed_to().is_none());
        assert!(w.check_at(&member(6)).is_none());
        w.observe(&member(6), at(6), &inc);
        assert_eq!(Witness::load(&path).mark().unwrap().position.raft_index, 6);
        // A mark that could not be written is in memory only: the file's
        // absence then says nothing.
        let mut w = Witness::load(&d.path().join("no-such-dir/witness.json"));
        w.observe(&member(52), at(50), &inc);
        assert!(w.mark().is_some());
        assert_eq!(w.kept_in(), None);
    }

    #[test]
    fn a_rebase_applies_once_then_the_mark_rises_and_latches_across_polls_and_restarts() {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("witness.json");
        let inc = Incarnation::new(Some("t"), None);
        // The history before the restore.
        let mut w = Witness::load(&path);
        w.observe(&member(1_002), at(1_000), &inc);
        let terms = |by: &str| WitnessTerms {
            incarnation: inc.clone(),
            rebase: true,
            rebase_by: Some(by.to_owned()),
            ..WitnessTerms::default()
        };
        let poll = |w: &mut Witness, index: u64, terms: &WitnessTerms| {
            w.align(terms);
            let reason = w.check_at(&member(index));
            if reason.is_none() {
                w.observe(&member(index), at(index), &inc);
            }
            reason
        };
        let v1 = terms("1700000000/pod-a/boot-1");
        assert!(poll(&mut w, 20, &v1).is_none());
        assert_eq!(w.mark().unwrap().position.raft_index, 20);
        // Every later poll under the same verdict raises the mark from there.
        assert!(poll(&mut w, 30, &v1).is_none());
        assert_eq!(w.mark().unwrap().position.raft_index, 30);
        assert_eq!(Witness::load(&path).mark().unwrap().position.raft_index, 30);
        // A later rollback in this Pod's life is latched, not re-based away.
        assert!(poll(&mut w, 5, &v1)
            .unwrap()
            .contains("below the high-water mark 30"));
        assert!(poll(&mut w, 40, &v1).unwrap().contains("seen at 5"));
        // The sidecar restarted in the same Pod start: the same verdict does
        // not re-base the mark it raised itself.
        let mut w = Witness::load(&path);
        assert!(poll(&mut w, 40, &v1).unwrap().contains("seen at 5"));
        // Another Pod start's verdict that re-bases does, once.
        let v2 = terms("1700000500/pod-b/boot-1");
        let mut w = Witness::load(&path);
        assert!(poll(&mut w, 8, &v2).is_none());
        assert!(poll(&mut w, 9, &v2).is_none());
        assert_eq!(Witness::load(&path).mark().unwrap().position.raft_index, 9);
    }
}
