//! Does the staged directory hold what was asked for? Read back with the
//! inspector, the restored member must be the one `--name` derives (member ID =
//! `sha1(peer URLs + token)`), in the cluster every `--initial-cluster` member
//! derives, with exactly that membership (by ID and peer URLs). A restore tool
//! that silently ignored a flag, wrote somewhere else, or restored a different
//! cluster is caught here, before anything is published.
//!
//! Identity is not enough: a tool that restored another, smaller snapshot with the
//! right flags, or a seed that etcd bootstrapped empty with the same flags, has the
//! right IDs and none of the data. So the content is compared too: the `key`
//! bucket (every revision of every key, what clients read) of the staged backend
//! must hash, count and end at the same revision as the snapshot's own, computed
//! from the snapshot before the tool ran. Only the `key` bucket: the tool rewrites
//! `members`, `meta` (the consistent index becomes the new cluster's commit index)
//! and `cluster`, so the whole-file hash `etcdutl snapshot status` prints differs
//! by design.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::disk::bbolt::{main_revision, BoltError, Db};
use crate::disk::ids::{self, ClusterId, MemberId};
use crate::disk::layout::DirState;
use crate::disk::layout::Inspection;

/// The identity a restore must produce.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expected {
    /// `--name`.
    pub name: String,
    /// Derived member ID of `--name`.
    pub member_id: MemberId,
    /// Derived cluster ID.
    pub cluster_id: ClusterId,
    /// Every member: ID → (name, sorted peer URLs).
    pub members: BTreeMap<MemberId, (String, Vec<String>)>,
}

impl Expected {
    /// Derives the identity from `--initial-cluster` (parsed), `--name` and the
    /// token; `None` when `name` has no entry.
    pub fn derive(
        initial_cluster: &BTreeMap<String, Vec<String>>,
        name: &str,
        token: &str,
    ) -> Option<Expected> {
        let ids = ids::bootstrap_ids(initial_cluster, token);
        let member_id = *ids.get(name)?;
        let all: Vec<MemberId> = ids.values().copied().collect();
        let members = initial_cluster
            .iter()
            .map(|(n, urls)| {
                let mut urls = urls.clone();
                urls.sort();
                (ids[n], (n.clone(), urls))
            })
            .collect();
        Some(Expected {
            name: name.to_string(),
            member_id,
            cluster_id: ids::cluster_id(&all),
            members,
        })
    }
}

/// The staged directory is not what was asked for (exit 33).
#[derive(Debug, thiserror::Error)]
#[error("the restored directory {dir} failed verification: {}", problems.join("; "))]
pub struct VerifyError {
    /// The directory checked.
    pub dir: PathBuf,
    /// Every difference found.
    pub problems: Vec<String>,
}

/// The root bucket holding every revision of every key.
const KEY_BUCKET: &[u8] = b"key";

/// What a backend holds for clients: the `key` bucket, summarized.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Content {
    /// Main revision of the last key (0 when the bucket is empty or missing).
    pub revision: i64,
    /// Entries in the `key` bucket (one per revision of a key).
    pub keys: u64,
    /// CRC-32C over every key and value of the bucket, in key order.
    pub kv_hash: u32,
}

impl Content {
    /// Reads the `key` bucket of a bbolt file: a data dir's `member/snap/db` or a
    /// `snapshot save` image (its SHA-256 trailer lies past the last page).
    pub fn of(db: &Path) -> Result<Content, BoltError> {
        Content::up_to(db, i64::MAX)
    }

    /// Like [`Content::of`], with `keys` and `kv_hash` over the revisions up to
    /// `max_revision` only (`revision` is still the newest of all): what a
    /// restore with `--bump-revision` keeps of the snapshot, beside the one
    /// revision key etcdutl adds past it.
    pub fn up_to(db: &Path, max_revision: i64) -> Result<Content, BoltError> {
        let db = Db::open(db)?;
        let mut c = Content {
            revision: 0,
            keys: 0,
            kv_hash: 0,
        };
        db.for_each_kv(KEY_BUCKET, |k, v| {
            let main = main_revision(k);
            if main.is_none_or(|m| m <= max_revision) {
                c.kv_hash = crate::disk::crc::append(crc32c::crc32c_append(c.kv_hash, k), v);
                c.keys += 1;
            }
            if let Some(main) = main {
                c.revision = main;
            }
        })?;
        // A compaction can remove the newest key (a deletion's tombstone); etcd
        // then resumes from the compacted revision it recorded.
        for name in [&b"finishedCompactRev"[..], b"scheduledCompactRev"] {
            if let Some(rev) = db.get(b"meta", name)?.as_deref().and_then(main_revision) {
                c.revision = c.revision.max(rev);
            }
        }
        Ok(c)
    }
}

/// The staged backend's content differs from the snapshot's (exit 33).
#[derive(Debug, thiserror::Error)]
pub enum ContentError {
    /// The staged backend could not be read.
    #[error("cannot read the restored backend {}: {source}", path.display())]
    Unreadable {
        /// The backend file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: BoltError,
    },
    /// The key-value data differ.
    #[error(
        "the restored backend does not hold the snapshot's data: the snapshot has revision {}, {} keys, KV hash {:08x}; the restored backend has revision {}, {} keys, KV hash {:08x}",
        expected.revision, expected.keys, expected.kv_hash, found.revision, found.keys, found.kv_hash
    )]
    Differs {
        /// The snapshot's.
        expected: Content,
        /// The restored backend's.
        found: Content,
    },
}

/// Checks that the backend at `db` holds exactly the snapshot's key-value data;
/// with `bump_revision` > 0 (etcdutl's `--bump-revision`), the snapshot's data
/// and a revision at least that far past the snapshot's.
pub fn check_content(
    db: &Path,
    snapshot: &Content,
    bump_revision: u64,
) -> Result<Content, ContentError> {
    let unreadable = |source| ContentError::Unreadable {
        path: db.to_path_buf(),
        source,
    };
    let found = if bump_revision == 0 {
        Content::of(db).map_err(unreadable)?
    } else {
        Content::up_to(db, snapshot.revision).map_err(unreadable)?
    };
    let bumped_to = snapshot
        .revision
        .saturating_add(i64::try_from(bump_revision).unwrap_or(i64::MAX));
    let same = if bump_revision == 0 {
        found == *snapshot
    } else {
        found.keys == snapshot.keys
            && found.kv_hash == snapshot.kv_hash
            && found.revision >= bumped_to
    };
    if same {
        Ok(found)
    } else {
        Err(ContentError::Differs {
            expected: *snapshot,
            found,
        })
    }
}

/// True when an initialized member's backend holds at least the snapshot's data:
/// its revision is at or beyond the snapshot's (etcd only adds revisions, and a
/// compaction keeps the revision counter). A member etcd bootstrapped empty
/// instead of restoring has revision 0 or the few of its own writes.
pub fn holds_snapshot(existing: &Content, snapshot: &Content) -> bool {
    existing.revision >= snapshot.revision
}

fn sorted_normalized(urls: &[String]) -> Vec<String> {
    let mut v: Vec<String> = urls
        .iter()
        .map(|u| ids::normalize_url(u).unwrap_or_else(|_| u.clone()))
        .collect();
    v.sort();
    v
}

/// Checks an inspection against the expected identity. `Ok` carries notes on what
/// was tolerated.
pub fn check(ins: &Inspection, exp: &Expected) -> Result<Vec<String>, VerifyError> {
    let mut problems = Vec::new();
    let mut notes = Vec::new();
    let fail = |problems: Vec<String>| VerifyError {
        dir: ins.paths.data_dir.clone(),
        problems,
    };
    let member = match &ins.state {
        DirState::Initialized(m) => m,
        _ => {
            let why = ins
                .problem()
                .map(|p| format!(": {}", p.message))
                .unwrap_or_default();
            problems.push(format!("it is {} rather than initialized{why}", ins.kind()));
            return Err(fail(problems));
        }
    };
    if ins.running {
        problems.push("a process holds its locks".into());
    }
    fn id_check<Id: PartialEq + std::fmt::Display>(
        problems: &mut Vec<String>,
        what: &str,
        found: Id,
        want: Id,
    ) {
        if found != want {
            problems.push(format!("{what} is {found} but {want} was expected"));
        }
    }
    id_check(
        &mut problems,
        &format!("the member ID (for --name {})", exp.name),
        member.log.member_id,
        exp.member_id,
    );
    id_check(
        &mut problems,
        "the cluster ID",
        member.log.cluster_id,
        exp.cluster_id,
    );

    let recorded: BTreeMap<MemberId, _> = member.membership.iter().map(|m| (m.id, m)).collect();
    for (id, (name, urls)) in &exp.members {
        match recorded.get(id) {
            None => problems.push(format!(
                "member {name} ({id}) is missing from the restored membership"
            )),
            Some(m) if sorted_normalized(&m.peer_urls) != *urls => problems.push(format!(
                "member {name} ({id}) has peer URLs {} but --initial-cluster gives {}",
                m.peer_urls.join(","),
                urls.join(",")
            )),
            Some(_) => {}
        }
    }
    for (id, m) in &recorded {
        if exp.members.contains_key(id) {
            continue;
        }
        if m.source == crate::disk::layout::MemberSource::Backend {
            // etcdctl 3.4 leaves the source cluster's members in the backend's
            // bucket; in 3.4 the `.snap` is the authoritative membership.
            notes.push(format!(
                "the backend's members bucket still lists {id} ({}) from the snapshot's cluster; the .snap membership is authoritative",
                m.name
            ));
            continue;
        }
        problems.push(format!(
            "the restored membership has an extra member {id} ({}, from the {})",
            m.name, m.source
        ));
    }
    if problems.is_empty() {
        Ok(notes)
    } else {
        Err(fail(problems))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn derivation_matches_the_reference_vector() {
        let ic = ids::parse_initial_cluster("default=http://localhost:2380").unwrap();
        let exp = Expected::derive(&ic, "default", "etcd-cluster").unwrap();
        assert_eq!(exp.member_id.to_string(), "8e9e05c52164694d");
        assert_eq!(exp.cluster_id.to_string(), "cdf818194e3a8c32");
        assert!(Expected::derive(&ic, "other", "etcd-cluster").is_none());
    }
}
