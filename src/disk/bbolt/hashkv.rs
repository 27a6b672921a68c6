//! etcd's `HashKV` at a revision, computed offline from a backend: what a
//! member of the same history answers to `Maintenance.HashKV(revision)`, so
//! that a directory and a live cluster that agree on IDs and positions can
//! still be told apart when their keyspaces differ (decision table, row 6h).
//!
//! etcd (3.4 `mvcc/kvstore.go` `HashByRev`; 3.5 `server/mvcc/kvstore.go`;
//! 3.6 and 3.7 `server/storage/mvcc/hash.go` `unsafeHashByRev` and
//! `kvHasher`) feeds CRC-32C (Castagnoli) with the `key` bucket's name, then,
//! in key order, each key and value of the `key` bucket whose main revision is
//! at most `revision`; of those at or below the member's compaction revision
//! `compact`, only the ones in `kvindex.Keep(revision)` (each user key's
//! newest revision at or below `revision`, unless that is a deletion), and
//! that filter applies only when `Keep` is not empty. `compact` is the
//! member's `compactMainRev` (set when a compaction is scheduled), returned as
//! the answer's `compact_revision`.
//!
//! Offline, this file's own `Keep(revision)` is the same as the member's when
//! both hold one history: a compaction removes only revisions that are not
//! the newest of their key at the compaction revision, so which revision is
//! the newest at or below `revision` does not depend on how far either side
//! compacted. What does depend on it is returned as `None` (unknown), never as
//! a hash: `revision` at or below `compact`, this file compacted past `compact`
//! (revisions the member hashes may be gone here), or an empty `Keep` (then the
//! member hashes every revision at or below `compact` its file still holds,
//! which this file cannot know).

use std::collections::HashMap;
use std::hash::BuildHasher;

use super::etcd::{is_tombstone, main_revision, user_key, REVISION_KEY_LEN};
use super::{BoltError, Db, RecordProblem};

/// At most this many user keys are tracked; a larger keyspace is not hashed
/// (`None`): the map would cost preflight's container more than its memory
/// limit allows (about 40 bytes a key).
pub const MAX_TRACKED_KEYS: usize = 2_000_000;

/// The offline hash, or why it is unknown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HashAt {
    /// What a member of the same history answers.
    Hash(u32),
    /// This file cannot say (see the module's documentation).
    Unknown(Unknown),
}

/// Why [`HashAt::Unknown`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unknown {
    /// `revision` is at or below `compact`: the member answers `ErrCompacted`.
    Compacted,
    /// This file compacted past the member's compaction revision.
    CompactedFurther(i64),
    /// No user key is live at `revision` while revisions at or below the
    /// compaction remain: the member hashes what its own file still holds.
    EmptyKeep,
    /// More user keys than [`MAX_TRACKED_KEYS`].
    TooManyKeys,
}

/// The newest revision seen of one user key so far.
#[derive(Clone, Copy)]
struct Newest {
    /// The candidate (a revision at or below `compact`) it is, if it is one.
    candidate: Option<usize>,
    tombstone: bool,
}

impl Db {
    /// `HashKV(revision)` as a member of this file's history whose compaction
    /// revision is `compact` answers it. `own_compact`: this file's own
    /// compaction revision (`meta`, scheduled or finished, the higher).
    pub fn hash_kv_at(
        &self,
        revision: i64,
        compact: i64,
        own_compact: Option<i64>,
    ) -> Result<HashAt, BoltError> {
        if revision <= compact {
            return Ok(HashAt::Unknown(Unknown::Compacted));
        }
        if let Some(own) = own_compact.filter(|&own| own > compact) {
            return Ok(HashAt::Unknown(Unknown::CompactedFurther(own)));
        }
        // Keys are tracked by a 64-bit hash of their bytes: a collision (odds
        // about n²/2⁶⁵) could only make the hash differ, never agree.
        let seeds =
            std::hash::BuildHasherDefault::<std::collections::hash_map::DefaultHasher>::default();
        let mut newest: HashMap<u64, Newest> = HashMap::new();
        // Revisions at or below `compact`: (CRC of key and value, their length).
        let mut candidates: Vec<(u32, usize)> = Vec::new();
        let mut tail = 0u32;
        let mut tail_len = 0usize;
        let mut failure: Option<BoltError> = None;
        let mut too_many = false;
        let found = self.for_each_kv(b"key", |k, v| {
            if failure.is_some() || too_many {
                return;
            }
            let Some(main) = main_revision(k) else {
                failure = Some(self.bad_key_record(
                    k,
                    RecordProblem::Length {
                        expected: REVISION_KEY_LEN,
                        found: k.len(),
                    },
                ));
                return;
            };
            if main > revision {
                return;
            }
            let user = match user_key(v) {
                Ok(u) => u,
                Err(e) => {
                    failure = Some(self.bad_key_record(k, RecordProblem::Protobuf(e)));
                    return;
                }
            };
            let id = seeds.hash_one(user);
            let candidate = if main <= compact {
                let crc = crc32c::crc32c_append(crc32c::crc32c(k), v);
                candidates.push((crc, k.len() + v.len()));
                Some(candidates.len() - 1)
            } else {
                tail = crc32c::crc32c_append(crc32c::crc32c_append(tail, k), v);
                tail_len += k.len() + v.len();
                None
            };
            if newest.len() >= MAX_TRACKED_KEYS && !newest.contains_key(&id) {
                too_many = true;
                return;
            }
            newest.insert(
                id,
                Newest {
                    candidate,
                    tombstone: is_tombstone(k),
                },
            );
        })?;
        if let Some(e) = failure {
            return Err(e);
        }
        if too_many {
            return Ok(HashAt::Unknown(Unknown::TooManyKeys));
        }
        let mut hash = crc32c::crc32c(b"key");
        if !found {
            // No `key` bucket: etcd's ForEach over it fails; nothing to compare.
            return Ok(HashAt::Hash(hash));
        }
        let keep_empty = newest.values().all(|n| n.tombstone);
        if keep_empty && !candidates.is_empty() {
            return Ok(HashAt::Unknown(Unknown::EmptyKeep));
        }
        let mut kept = vec![false; candidates.len()];
        for n in newest.values().filter(|n| !n.tombstone) {
            if let Some(i) = n.candidate {
                kept[i] = true;
            }
        }
        for ((crc, len), _) in candidates.iter().zip(&kept).filter(|(_, k)| **k) {
            hash = crc32c::crc32c_combine(hash, *crc, *len);
        }
        Ok(HashAt::Hash(crc32c::crc32c_combine(hash, tail, tail_len)))
    }

    fn bad_key_record(&self, key: &[u8], problem: RecordProblem) -> BoltError {
        BoltError::BadRecord {
            path: self.path().to_path_buf(),
            bucket: "key".into(),
            key: key.to_vec(),
            problem,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::testkit::*;
    use super::*;

    /// etcd's `kvHasher`, literally: the whole stream fed in one pass, `keep`
    /// given.
    fn reference(
        entries: &[(Vec<u8>, Vec<u8>)],
        revision: i64,
        compact: i64,
        keep: &[Vec<u8>],
    ) -> u32 {
        let mut h = crc32c::crc32c(b"key");
        for (k, v) in entries {
            let main = main_revision(k).unwrap();
            if main > revision {
                continue;
            }
            if main <= compact && !keep.is_empty() && !keep.contains(k) {
                continue;
            }
            h = crc32c::crc32c_append(crc32c::crc32c_append(h, k), v);
        }
        h
    }

    fn db_of(entries: &[(Vec<u8>, Vec<u8>)]) -> (tempfile::TempDir, Db) {
        let mut m = Model::new();
        m.insert(b"key".to_vec(), entries.iter().cloned().collect());
        m.insert(b"meta".to_vec(), Bucket::new());
        let bytes = build(&m, 4096, 5, false, 0);
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(&write(&dir, &bytes)).unwrap();
        (dir, db)
    }

    /// a@2 b@3 a@4 (txn: c@5.0, a@5.1) b deleted @6 d@7 a deleted @8.
    fn history() -> Vec<(Vec<u8>, Vec<u8>)> {
        let e = |main, sub, tomb, key: &[u8], value: &[u8]| {
            (
                rev_key(main, sub, tomb),
                key_value(key, if tomb { b"" } else { value }),
            )
        };
        vec![
            e(2, 0, false, b"a", b"1"),
            e(3, 0, false, b"b", b"1"),
            e(4, 0, false, b"a", b"2"),
            e(5, 0, false, b"c", b"1"),
            e(5, 1, false, b"a", b"3"),
            e(6, 0, true, b"b", b""),
            e(7, 0, false, b"d", b"1"),
            e(8, 0, true, b"a", b""),
        ]
    }

    #[test]
    fn matches_etcds_hasher_at_every_revision_and_compaction() {
        let all = history();
        let (_d, db) = db_of(&all);
        let key = |main, sub, tomb| rev_key(main, sub, tomb);
        // Keep(rev), by hand from the history above.
        let keep = |rev: i64| -> Vec<Vec<u8>> {
            match rev {
                2 => vec![key(2, 0, false)],
                3 => vec![key(2, 0, false), key(3, 0, false)],
                4 => vec![key(4, 0, false), key(3, 0, false)],
                5 => vec![key(5, 1, false), key(3, 0, false), key(5, 0, false)],
                6 => vec![key(5, 1, false), key(5, 0, false)],
                7 => vec![key(5, 1, false), key(5, 0, false), key(7, 0, false)],
                _ => vec![key(5, 0, false), key(7, 0, false)],
            }
        };
        for compact in 0..8 {
            for revision in compact + 1..=9 {
                let want = reference(&all, revision, compact, &keep(revision));
                assert_eq!(
                    db.hash_kv_at(revision, compact, Some(compact)).unwrap(),
                    HashAt::Hash(want),
                    "revision {revision}, compaction {compact}"
                );
            }
        }
    }

    #[test]
    fn a_file_compacted_less_than_the_member_hashes_the_same() {
        // The member compacted at 5: revisions at or below 5 that were not the
        // newest of their key at 5 are gone from its file, not from this one.
        let all = history();
        let compacted: Vec<_> = all
            .iter()
            .filter(|(k, _)| {
                let main = main_revision(k).unwrap();
                main > 5
                    || [
                        rev_key(5, 1, false),
                        rev_key(3, 0, false),
                        rev_key(5, 0, false),
                    ]
                    .contains(k)
            })
            .cloned()
            .collect();
        let (_a, full) = db_of(&all);
        let (_b, member) = db_of(&compacted);
        for revision in 6..=9 {
            assert_eq!(
                full.hash_kv_at(revision, 5, Some(2)).unwrap(),
                member.hash_kv_at(revision, 5, Some(5)).unwrap(),
                "revision {revision}"
            );
        }
    }

    #[test]
    fn what_the_file_cannot_know_is_unknown() {
        let (_d, db) = db_of(&history());
        assert_eq!(
            db.hash_kv_at(4, 4, None).unwrap(),
            HashAt::Unknown(Unknown::Compacted)
        );
        assert_eq!(
            db.hash_kv_at(7, 4, Some(5)).unwrap(),
            HashAt::Unknown(Unknown::CompactedFurther(5))
        );
        // Every key deleted by 8 except c and d: not empty. Delete those too.
        let mut all = history();
        all.push((rev_key(9, 0, true), key_value(b"c", b"")));
        all.push((rev_key(10, 0, true), key_value(b"d", b"")));
        let (_e, db) = db_of(&all);
        assert_eq!(
            db.hash_kv_at(10, 4, None).unwrap(),
            HashAt::Unknown(Unknown::EmptyKeep)
        );
        // Nothing at or below the compaction: nothing to filter.
        assert_eq!(
            db.hash_kv_at(10, 1, None).unwrap(),
            HashAt::Hash(reference(&all, 10, 1, &[]))
        );
    }

    #[test]
    fn another_history_hashes_differently() {
        let mut other = history();
        other[6].1 = key_value(b"d", b"2");
        let (_a, mine) = db_of(&history());
        let (_b, theirs) = db_of(&other);
        assert_eq!(
            mine.hash_kv_at(6, 0, None).unwrap(),
            theirs.hash_kv_at(6, 0, None).unwrap()
        );
        assert_ne!(
            mine.hash_kv_at(7, 0, None).unwrap(),
            theirs.hash_kv_at(7, 0, None).unwrap()
        );
    }

    #[test]
    fn a_bad_record_is_an_error_not_a_hash() {
        let mut all = history();
        all.push((b"short".to_vec(), b"x".to_vec()));
        let (_d, db) = db_of(&all);
        assert!(matches!(
            db.hash_kv_at(9, 0, None),
            Err(BoltError::BadRecord { .. })
        ));
    }
}
