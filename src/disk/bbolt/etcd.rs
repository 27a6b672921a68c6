//! etcd's schema on top of the bbolt reader: the buckets etcd writes (`meta`,
//! `members`, `members_removed`, `cluster`, `alarm`, `key`), their records, the
//! storage version as etcd detects it, and the hash `etcdutl snapshot status`
//! prints.

use serde::{Deserialize, Serialize};

use super::walk::Visit;
use super::{BoltError, Db, RecordProblem};
use crate::disk::ids::MemberId;
use crate::disk::member::Member;
use crate::disk::pb::{self, PbError};

/// What the backend says about the member, read offline.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Backend {
    /// bbolt page size.
    pub page_size: u32,
    /// File length (a `snapshot save` image includes its 32-byte SHA-256 trailer).
    pub file_size: u64,
    /// High-water pgid × page size: what etcd reports as `dbSize`.
    pub logical_size: u64,
    /// Pages reachable from the chosen meta (both metas, the freelist if persisted,
    /// every branch, leaf and overflow page) × page size. This is etcd's
    /// `dbSizeInUse` as etcd computes it when it opens the file (bbolt rebuilds the
    /// freelist as "every unreachable page below the high-water mark"). A running
    /// etcd reports more by the pages its latest write transaction freed while its
    /// open read transaction still pins them (one page on 3.4.23 in tests).
    /// `None` when not counted ([`Db::identity_summary`]).
    pub size_in_use: Option<u64>,
    /// The chosen meta's transaction id.
    pub txid: u64,
    /// Which meta page was chosen (0 or 1).
    pub meta_page: u8,
    /// Root bucket names, in key order.
    pub buckets: Vec<String>,
    /// `meta`/`consistent_index`: the last raft index applied to the backend.
    pub consistent_index: Option<u64>,
    /// `meta`/`term` (3.5+).
    pub term: Option<u64>,
    /// `meta`/`confState` (3.5+), as etcd stored it.
    pub conf_state: Option<serde_json::Value>,
    /// The storage version as etcd detects it (`schema.DetectSchemaVersion`):
    /// `meta`/`storageVersion` when it holds a version (3.6+ write it a few
    /// seconds after the cluster version is set), else `3.5.0` when `meta`/`term`
    /// is non-zero, else `None` (3.4 or older, or a dir too fresh to tell).
    pub storage_version: Option<String>,
    /// Where [`Backend::storage_version`] came from.
    pub storage_version_source: StorageVersionSource,
    /// The raw `meta`/`storageVersion` value, when present (even if etcd would not
    /// parse it).
    #[serde(skip)]
    pub storage_version_raw: Option<String>,
    /// The `members` bucket, in key order.
    pub members: Vec<Member>,
    /// The `members_removed` bucket's ids.
    pub removed_members: Vec<MemberId>,
    /// `cluster`/`clusterVersion`.
    pub cluster_version: Option<String>,
    /// `cluster`/`downgrade` (3.5+): the downgrade `etcdctl downgrade enable`
    /// started, or its cancellation; `None` when the key is absent.
    pub downgrade: Option<Downgrade>,
    /// The `alarm` bucket.
    pub alarms: Vec<BackendAlarm>,
    /// The main revision of the newest key of `key` (a put, a deletion, or the
    /// placeholder `snapshot restore --bump-revision` writes): the MVCC revision
    /// the backend is at. `None` when the bucket is missing or empty.
    pub revision: Option<i64>,
    /// `meta`/`finishedCompactRev` and `meta`/`scheduledCompactRev`, the
    /// higher: a compaction removes tombstones at or below it, so the newest
    /// key may be older than the revision the store is at; etcd restores its
    /// current revision as the higher of the two (`mvcc.store.restore`).
    pub compact_revision: Option<i64>,
}

/// `cluster`/`downgrade`, as etcd 3.5+ stores it
/// (`{"target-version":"3.5.0","enabled":true}`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Downgrade {
    /// `enabled`.
    pub enabled: bool,
    /// `target-version` (empty once cancelled).
    pub target_version: String,
    /// The value is not that JSON object: etcd panics "failed to unmarshal
    /// downgrade information" when it loads it.
    pub malformed: bool,
}

impl Downgrade {
    /// Decodes the value as etcd does (Go's `encoding/json`: keys matched
    /// without regard to case, `null` leaves the default, unknown keys
    /// ignored), leniently: a value etcd cannot load — not that object, a field
    /// of another type, or enabled with a target that is not `X.Y.Z` (etcd
    /// panics "unexpected version format of the downgrade target version") — is
    /// reported as `malformed`, not an error of the whole backend.
    pub fn decode(value: &[u8]) -> Downgrade {
        let malformed = Downgrade {
            enabled: false,
            target_version: String::new(),
            malformed: true,
        };
        let Ok(serde_json::Value::Object(map)) = serde_json::from_slice::<serde_json::Value>(value)
        else {
            return malformed;
        };
        let mut out = Downgrade {
            enabled: false,
            target_version: String::new(),
            malformed: false,
        };
        for (k, v) in &map {
            match (k.to_ascii_lowercase().as_str(), v) {
                (_, serde_json::Value::Null) => {}
                ("enabled", serde_json::Value::Bool(b)) => out.enabled = *b,
                ("target-version", serde_json::Value::String(t)) => out.target_version = t.clone(),
                ("enabled" | "target-version", _) => return malformed,
                _ => {}
            }
        }
        if out.enabled && parse_semver(&out.target_version).is_none() {
            return Downgrade {
                enabled: true,
                ..malformed
            };
        }
        out
    }
}

/// One raised alarm from the backend's `alarm` bucket.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BackendAlarm {
    /// The member that raised it.
    pub member_id: MemberId,
    /// `NOSPACE`, `CORRUPT`, `NONE`, or the number of an alarm type unknown here.
    pub alarm: String,
}

/// What `etcdutl snapshot status -w json` prints for the same file, as the
/// etcdutl of the file's own line prints it: a file whose storage version is 3.6
/// or newer is counted as 3.6+ count it, anything else as 3.4/3.5 do.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct KvHash {
    /// CRC-32C over every root bucket name followed by its keys and values.
    pub hash: u32,
    /// Main revision of the last key in the `key` bucket (0 when it is empty).
    pub revision: i64,
    /// `totalKey` as the file's own etcdutl prints it: [`KvHash::entries`] up to
    /// 3.5, [`KvHash::live_keys`] from 3.6 on.
    pub total_key: u64,
    /// High-water pgid × page size.
    pub total_size: u64,
    /// `version` as 3.6+ etcdutl prints it (`meta`/`storageVersion` as a semantic
    /// version, empty when absent); `None` for a file 3.5 or older, whose etcdutl
    /// has no such field.
    pub version: Option<String>,
    /// Entries of all root buckets (3.4/3.5 `totalKey`).
    pub entries: u64,
    /// User keys whose newest revision is not a deletion (3.6+ `totalKey`),
    /// counted for 3.6+ files only (`None` otherwise: it means decoding every
    /// `key` value, which 3.5's etcdutl does not do).
    pub live_keys: Option<u64>,
}

impl Db {
    /// Walks the whole database once: every page reachable from the chosen meta,
    /// the etcd records the agent reports, and the live size.
    pub fn summary(&self) -> Result<Backend, BoltError> {
        self.summarize(true, true)
    }

    /// [`Db::summary`] reading every value of every bucket, as it did before
    /// skimming: what the tests hold the skimmed walk to.
    #[cfg(test)]
    pub(super) fn summary_unskimmed(&self) -> Result<Backend, BoltError> {
        self.summarize(true, false)
    }

    /// The etcd records only (consistent index, membership, cluster version,
    /// alarms), without counting the pages in use: reads the small buckets and
    /// skips the `key` bucket, which is most of the file. What a pre-start
    /// decision needs, at a fraction of [`Db::summary`]'s I/O.
    pub fn identity_summary(&self) -> Result<Backend, BoltError> {
        self.summarize(false, false)
    }

    #[tracing::instrument(level = "debug", skip(self), fields(path = %self.path().display()))]
    fn summarize(&self, count_pages: bool, skim: bool) -> Result<Backend, BoltError> {
        const WANTED: [&[u8]; 5] = [
            b"meta",
            b"members",
            b"members_removed",
            b"cluster",
            b"alarm",
        ];
        let scan = self.read_buckets(&WANTED, count_pages, skim)?;

        let mut out = Backend {
            page_size: self.page_size,
            file_size: self.reader.len(),
            logical_size: self.logical_size(),
            size_in_use: count_pages
                .then(|| scan.pages_in_use.saturating_mul(u64::from(self.page_size))),
            txid: self.meta.txid,
            meta_page: self.meta_page,
            buckets: scan.names,
            consistent_index: None,
            term: None,
            conf_state: None,
            storage_version: None,
            storage_version_source: StorageVersionSource::None,
            storage_version_raw: None,
            members: Vec::new(),
            removed_members: Vec::new(),
            cluster_version: None,
            downgrade: None,
            alarms: Vec::new(),
            revision: None,
            compact_revision: None,
        };
        for (bucket, kvs) in scan.records {
            for (k, v) in kvs {
                self.decode_record(&mut out, bucket, &k, &v)?;
            }
        }
        out.revision = self.last_key(b"key")?.and_then(|k| main_revision(&k));
        let (version, source) =
            detect_storage_version(out.storage_version_raw.as_deref(), out.term);
        out.storage_version = version;
        out.storage_version_source = source;
        Ok(out)
    }

    /// Computes exactly what `etcdutl snapshot status -w json` of the file's own
    /// line prints (`v3Manager.Status`): CRC-32C over, for each root bucket in key
    /// order, its name then each key and value; the key count; the main revision
    /// of the last key of `key`; and `tx.Size()`. 3.6+ count only live user keys
    /// (each `key` value decoded as `mvccpb.KeyValue`, a tombstone revision
    /// removing its key) and add the storage version.
    #[tracing::instrument(level = "debug", skip(self), fields(path = %self.path().display()))]
    pub fn kv_hash(&self) -> Result<KvHash, BoltError> {
        let mut hash = 0u32;
        let mut total_key = 0u64;
        let mut revision = 0i64;
        // Which etcdutl's rules apply is the file's storage version, read first:
        // `meta` sorts after `key`, and only 3.6+ decode every `key` value.
        let storage_raw = self
            .get(b"meta", b"storageVersion")?
            .map(|v| String::from_utf8_lossy(&v).into_owned());
        let term = self
            .get(b"meta", b"term")?
            .and_then(|v| <[u8; 8]>::try_from(v.as_slice()).ok())
            .map(u64::from_be_bytes);
        let (detected, _) = detect_storage_version(storage_raw.as_deref(), term);
        let v36 = detected
            .as_deref()
            .and_then(semver_minor)
            .is_some_and(|v| v >= (3, 6));
        let mut live: std::collections::HashSet<Vec<u8>> = std::collections::HashSet::new();
        self.for_each_root_entry(&mut |visit| {
            let (bucket, kv) = match visit {
                Visit::Bucket(name) => {
                    hash = crc32c::crc32c_append(hash, name);
                    return Ok(());
                }
                Visit::Entry { bucket, entry } => (bucket, entry),
            };
            let is_key_bucket = bucket == b"key";
            hash = crc32c::crc32c_append(hash, kv.key);
            if !kv.is_bucket {
                hash = crate::disk::crc::append(hash, kv.value);
            }
            // 3.6+ etcdutl fails on a `key` value that is not a KeyValue.
            if v36 && is_key_bucket && !kv.is_bucket {
                let k = user_key(kv.value).map_err(|e| BoltError::BadRecord {
                    path: self.path().to_path_buf(),
                    bucket: "key".into(),
                    key: kv.key.to_vec(),
                    problem: RecordProblem::Protobuf(e),
                })?;
                if is_tombstone(kv.key) {
                    live.remove(k);
                } else {
                    live.insert(k.to_vec());
                }
            }
            if is_key_bucket {
                revision = main_revision(kv.key).ok_or_else(|| BoltError::BadRecord {
                    path: self.path().to_path_buf(),
                    bucket: "key".into(),
                    key: kv.key.to_vec(),
                    problem: RecordProblem::Length {
                        expected: REVISION_KEY_LEN,
                        found: kv.key.len(),
                    },
                })?;
            }
            total_key += 1;
            Ok(())
        })?;
        let live_keys = v36.then_some(live.len() as u64);
        Ok(KvHash {
            hash,
            revision,
            total_key: if v36 { live.len() as u64 } else { total_key },
            total_size: self.logical_size(),
            // 3.6+ etcdutl prints `storageVersion` re-rendered as a semantic version.
            version: v36.then(|| {
                storage_raw
                    .as_deref()
                    .and_then(parse_semver)
                    .unwrap_or_default()
            }),
            entries: total_key,
            live_keys,
        })
    }

    /// Decodes one record of a bucket etcd's summary needs into `out`.
    fn decode_record(
        &self,
        out: &mut Backend,
        bucket: &[u8],
        key: &[u8],
        value: &[u8],
    ) -> Result<(), BoltError> {
        let bad = |problem| BoltError::BadRecord {
            path: self.path().to_path_buf(),
            bucket: String::from_utf8_lossy(bucket).into_owned(),
            key: key.to_vec(),
            problem,
        };
        let be_u64 = |v: &[u8]| {
            <[u8; 8]>::try_from(v)
                .map(u64::from_be_bytes)
                .map_err(|_| RecordProblem::Length {
                    expected: 8,
                    found: v.len(),
                })
        };
        match (bucket, key) {
            (b"meta", b"consistent_index") => {
                out.consistent_index = Some(be_u64(value).map_err(bad)?);
            }
            (b"meta", b"term") => out.term = Some(be_u64(value).map_err(bad)?),
            (b"meta", b"finishedCompactRev" | b"scheduledCompactRev") => {
                // A revision key (8-byte main, '_', 8-byte sub); etcd reads
                // its main revision. A value too short to hold one is not a
                // revision: ignored, as nothing is decided on it alone.
                if let Some(rev) = main_revision(value) {
                    out.compact_revision = out.compact_revision.max(Some(rev));
                }
            }
            (b"meta", b"storageVersion") => {
                out.storage_version_raw = Some(String::from_utf8_lossy(value).into_owned());
            }
            (b"meta", b"confState") => {
                let v = serde_json::from_slice(value).map_err(|e| bad(RecordProblem::Json(e)))?;
                out.conf_state = Some(v);
            }
            (b"members", _) => {
                let m: MemberJson =
                    serde_json::from_slice(value).map_err(|e| bad(RecordProblem::Json(e)))?;
                out.members.push(Member {
                    id: MemberId::new(m.id),
                    name: m.name.unwrap_or_default(),
                    peer_urls: m.peer_urls.unwrap_or_default(),
                    client_urls: m.client_urls.unwrap_or_default(),
                    is_learner: m.is_learner.unwrap_or_default(),
                });
            }
            (b"members_removed", _) => {
                let id = std::str::from_utf8(key)
                    .ok()
                    .and_then(|s| u64::from_str_radix(s, 16).ok())
                    .map(MemberId::new)
                    .ok_or_else(|| bad(RecordProblem::HexId))?;
                out.removed_members.push(id);
            }
            (b"cluster", b"clusterVersion") => {
                let v = std::str::from_utf8(value).map_err(|_| bad(RecordProblem::Utf8))?;
                out.cluster_version = Some(v.to_owned());
            }
            (b"cluster", b"downgrade") => out.downgrade = Some(Downgrade::decode(value)),
            (b"alarm", _) => {
                let (mut member_id, mut alarm) = (0u64, 0u64);
                for field in pb::fields(key) {
                    let (n, v) = field.map_err(|e| bad(RecordProblem::Protobuf(e)))?;
                    match n {
                        1 => member_id = v.as_u64().unwrap_or(member_id),
                        2 => alarm = v.as_u64().unwrap_or(alarm),
                        _ => {}
                    }
                }
                out.alarms.push(BackendAlarm {
                    member_id: MemberId::new(member_id),
                    alarm: match alarm {
                        0 => "NONE".to_owned(),
                        1 => "NOSPACE".to_owned(),
                        2 => "CORRUPT".to_owned(),
                        n => n.to_string(),
                    },
                });
            }
            _ => {}
        }
        Ok(())
    }
}

/// Length of a key in etcd's `key` bucket: main u64, `_`, sub u64 (a tombstone
/// adds a trailing `t`). etcd's `bytesToRev` needs all 17 bytes.
pub(super) const REVISION_KEY_LEN: usize = 17;

/// Length of a tombstone's revision key, and where its `t` mark sits
/// (`mvcc.IsTombstone`).
pub(super) const MARKED_REVISION_KEY_LEN: usize = 18;

/// A `key` bucket key marked as a deletion.
pub(super) fn is_tombstone(key: &[u8]) -> bool {
    key.len() == MARKED_REVISION_KEY_LEN && key.get(REVISION_KEY_LEN) == Some(&b't')
}

/// The user key of a `key` bucket value (`mvccpb.KeyValue`, field 1; absent is
/// the empty key, as protobuf decoders default it).
pub(super) fn user_key(value: &[u8]) -> Result<&[u8], PbError> {
    let mut key: &[u8] = &[];
    for field in pb::fields(value) {
        if let (1, pb::Value::Bytes(b)) = field? {
            key = b;
        }
    }
    Ok(key)
}

/// Where a detected storage version came from (in JSON and text as etcd's
/// key names: `meta/storageVersion`, `meta/term`, `none`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum StorageVersionSource {
    /// `meta`/`storageVersion` holds a version (3.6+).
    #[serde(rename = "meta/storageVersion")]
    StorageVersionKey,
    /// No usable `storageVersion`, but `meta`/`term` is non-zero: 3.5.
    #[serde(rename = "meta/term")]
    Term,
    /// Neither: 3.4 or older, or a dir too fresh to tell.
    #[serde(rename = "none")]
    None,
}

impl std::fmt::Display for StorageVersionSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            StorageVersionSource::StorageVersionKey => "meta/storageVersion",
            StorageVersionSource::Term => "meta/term",
            StorageVersionSource::None => "none",
        })
    }
}

/// etcd's storage version detection (`schema.UnsafeDetectSchemaVersion`): a
/// `storageVersion` that parses as a semantic version, else `3.5.0` when the
/// backend's term is non-zero, else unknown. Returns the version and its source.
pub fn detect_storage_version(
    storage_version: Option<&str>,
    term: Option<u64>,
) -> (Option<String>, StorageVersionSource) {
    if let Some(v) = storage_version.and_then(parse_semver) {
        return (Some(v), StorageVersionSource::StorageVersionKey);
    }
    if term.is_some_and(|t| t != 0) {
        return (Some("3.5.0".to_string()), StorageVersionSource::Term);
    }
    (None, StorageVersionSource::None)
}

/// A strict `MAJOR.MINOR.PATCH[-PRE][+BUILD]` (what `go-semver`'s `NewVersion`
/// accepts), returned as it would print it; `None` otherwise.
pub fn parse_semver(s: &str) -> Option<String> {
    let (core, build) = match s.split_once('+') {
        Some((c, b)) => (c, Some(b)),
        None => (s, None),
    };
    let (core, pre) = match core.split_once('-') {
        Some((c, p)) => (c, Some(p)),
        None => (core, None),
    };
    let nums: Vec<u64> = core
        .split('.')
        .map(|n| {
            if n.is_empty() || !n.bytes().all(|b| b.is_ascii_digit()) {
                None
            } else {
                n.parse().ok()
            }
        })
        .collect::<Option<_>>()?;
    let [major, minor, patch] = nums.as_slice() else {
        return None;
    };
    let ok_ident = |p: &str| {
        !p.is_empty()
            && p.split('.')
                .all(|x| !x.is_empty() && x.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-'))
    };
    let mut out = format!("{major}.{minor}.{patch}");
    if let Some(p) = pre {
        if !ok_ident(p) {
            return None;
        }
        out.push('-');
        out.push_str(p);
    }
    if let Some(b) = build {
        if !ok_ident(b) {
            return None;
        }
        out.push('+');
        out.push_str(b);
    }
    Some(out)
}

/// `(major, minor)` of a version string such as `3.6.0`.
pub fn semver_minor(v: &str) -> Option<(u32, u32)> {
    let mut it = v.split(['.', '-', '+']);
    Some((it.next()?.parse().ok()?, it.next()?.parse().ok()?))
}

/// The main revision of a `key` bucket key, as `bytesToRev` reads it.
pub fn main_revision(key: &[u8]) -> Option<i64> {
    if key.len() < REVISION_KEY_LEN {
        return None;
    }
    let main: [u8; 8] = key.get(..8)?.try_into().ok()?;
    Some(i64::from_be_bytes(main))
}

/// The JSON etcd stores for a member (`membership.Member`).
#[derive(Deserialize)]
pub(super) struct MemberJson {
    id: u64,
    #[serde(rename = "peerURLs", default)]
    peer_urls: Option<Vec<String>>,
    #[serde(default)]
    name: Option<String>,
    #[serde(rename = "clientURLs", default)]
    client_urls: Option<Vec<String>>,
    #[serde(rename = "isLearner", default)]
    is_learner: Option<bool>,
}

#[cfg(test)]
mod tests {
    use super::super::testkit::*;
    use super::super::*;
    use super::*;

    #[test]
    fn from_3_6_the_hash_counts_live_user_keys_and_reports_the_storage_version() {
        let dir = tempfile::tempdir().unwrap();
        let model = v36_model(Some(b"3.6.0"));
        let (hash, entries) = model_hash(&model);
        let db = Db::open(&write(&dir, &build(&model, 4096, 3, false, 0))).unwrap();
        let h = db.kv_hash().unwrap();
        assert_eq!((h.hash, h.entries, h.revision), (hash, entries, 8));
        // a deleted at 4, b put twice, the empty key put and deleted: b and c.
        assert_eq!((h.live_keys, h.total_key), (Some(2), 2));
        assert_eq!(h.version.as_deref(), Some("3.6.0"));
        let s = db.summary().unwrap();
        assert_eq!(s.storage_version.as_deref(), Some("3.6.0"));
        assert_eq!(
            s.storage_version_source,
            StorageVersionSource::StorageVersionKey
        );

        // Without storageVersion etcd detects 3.5 by the term: 3.5's counting.
        let model = v36_model(None);
        let db = Db::open(&write(&dir, &build(&model, 4096, 3, false, 0))).unwrap();
        let h = db.kv_hash().unwrap();
        assert_eq!(
            (h.total_key, h.live_keys, h.version),
            (h.entries, None, None)
        );
        let s = db.summary().unwrap();
        assert_eq!(
            (s.storage_version.as_deref(), s.storage_version_source),
            (Some("3.5.0"), StorageVersionSource::Term)
        );

        // A storageVersion etcd cannot parse falls back to the same detection.
        let model = v36_model(Some(b"3.6"));
        let db = Db::open(&write(&dir, &build(&model, 4096, 3, false, 0))).unwrap();
        assert_eq!(db.kv_hash().unwrap().version, None);
        assert_eq!(
            db.summary().unwrap().storage_version_source,
            StorageVersionSource::Term
        );
    }

    #[test]
    fn a_key_value_that_does_not_decode_fails_the_3_6_hash_only() {
        let dir = tempfile::tempdir().unwrap();
        for (sv, fails) in [(Some(&b"3.7.0"[..]), true), (None, false)] {
            let mut model = v36_model(sv);
            model
                .get_mut(&b"key"[..])
                .unwrap()
                .insert(rev_key(9, 0, false), vec![0x0a, 0x20, b'x']);
            let db = Db::open(&write(&dir, &build(&model, 4096, 3, false, 0))).unwrap();
            match db.kv_hash() {
                Err(BoltError::BadRecord { bucket, .. }) if fails => assert_eq!(bucket, "key"),
                Ok(h) if !fails => assert_eq!(h.live_keys, None),
                other => panic!("storage version {sv:?}: {other:?}"),
            }
        }
    }

    #[test]
    fn storage_versions_parse_as_go_semver_does() {
        assert_eq!(parse_semver("3.6.0").as_deref(), Some("3.6.0"));
        assert_eq!(
            parse_semver("3.7.0-alpha.0").as_deref(),
            Some("3.7.0-alpha.0")
        );
        assert_eq!(parse_semver("3.7.0+meta").as_deref(), Some("3.7.0+meta"));
        for bad in [
            "",
            "3.6",
            "3.6.0.1",
            "v3.6.0",
            "3..0",
            "3.6.x",
            "3.6.0-",
            "3.6.0-a..b",
        ] {
            assert_eq!(parse_semver(bad), None, "{bad:?}");
        }
        assert_eq!(semver_minor("3.6.0"), Some((3, 6)));
        assert_eq!(
            detect_storage_version(Some("junk"), Some(0)),
            (None, StorageVersionSource::None)
        );
        assert_eq!(
            detect_storage_version(None, Some(4)),
            (Some("3.5.0".into()), StorageVersionSource::Term)
        );
    }

    #[test]
    fn reads_an_etcd_shaped_database() {
        let model = etcd_model();
        let bytes = build(&model, 4096, 20, false, 0);
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(&write(&dir, &bytes)).unwrap();
        assert_eq!(db.page_size(), 4096);
        assert_eq!(db.txid(), 7);
        assert_eq!(db.meta_page(), 1);
        assert!(db.damaged_meta().is_none());
        assert_eq!(db.high_water() * 4096, bytes.len() as u64);

        let s = db.summary().unwrap();
        assert_eq!(
            s.buckets,
            [
                "alarm",
                "auth",
                "cluster",
                "key",
                "members",
                "members_removed",
                "meta"
            ]
        );
        assert_eq!(s.consistent_index, Some(1234));
        assert_eq!(s.term, Some(3));
        assert_eq!(
            s.conf_state,
            Some(serde_json::json!({"voters":[10276657743932975437u64],"auto_leave":false}))
        );
        assert_eq!(
            s.members,
            vec![
                Member {
                    id: MemberId::new(0x8e9e05c52164694d),
                    name: "default".into(),
                    peer_urls: vec!["http://localhost:2380".into()],
                    client_urls: vec!["http://localhost:2379".into()],
                    is_learner: false,
                },
                Member {
                    id: MemberId::new(161),
                    name: String::new(),
                    peer_urls: vec!["http://b:2380".into()],
                    client_urls: vec![],
                    is_learner: true,
                },
            ]
        );
        assert_eq!(s.removed_members, vec![MemberId::new(0xff)]);
        assert_eq!(s.cluster_version.as_deref(), Some("3.5.0"));
        // alarm keys sort by their protobuf bytes: member 5 first.
        assert_eq!(
            s.alarms,
            vec![
                BackendAlarm {
                    member_id: MemberId::new(5),
                    alarm: "CORRUPT".into()
                },
                BackendAlarm {
                    member_id: MemberId::new(0x8e9e05c52164694d),
                    alarm: "NOSPACE".into()
                },
            ]
        );
        // Nothing unreachable in a freshly built file.
        assert_eq!(s.size_in_use, Some(s.logical_size));
        assert_eq!(s.file_size, bytes.len() as u64);

        let h = db.kv_hash().unwrap();
        let (hash, total) = model_hash(&model);
        assert_eq!(
            h,
            KvHash {
                hash,
                revision: 300,
                total_key: total,
                total_size: bytes.len() as u64,
                version: None,
                entries: total,
                // A 3.5 file (term, no storageVersion): live keys are not counted.
                live_keys: None,
            }
        );

        let key: Vec<_> = model[&b"key".to_vec()].clone().into_iter().collect();
        assert_eq!(all_kvs(&db, b"key"), key);
        assert!(!db.for_each_kv(b"nope", |_, _| {}).unwrap());
        assert_eq!(
            db.get(b"key", &rev_key(300, 0, false)).unwrap(),
            Some(vec![0x5A; 9000])
        );
        assert_eq!(
            db.get(b"key", &rev_key(100, 0, true)).unwrap(),
            Some(b"value-100".to_vec())
        );
        assert_eq!(db.get(b"key", &rev_key(100, 0, false)).unwrap(), None);
        assert_eq!(
            db.get(b"cluster", b"clusterVersion").unwrap(),
            Some(b"3.5.0".to_vec())
        );
        assert_eq!(db.get(b"nope", b"x").unwrap(), None);
        assert_eq!(db.buckets().unwrap().len(), 7);
    }

    #[test]
    fn summary_serializes_ids_as_hex() {
        let bytes = build(&etcd_model(), 4096, 20, false, 0);
        let dir = tempfile::tempdir().unwrap();
        let s = Db::open(&write(&dir, &bytes)).unwrap().summary().unwrap();
        let v = serde_json::to_value(&s).unwrap();
        assert_eq!(v["members"][0]["id"], "8e9e05c52164694d");
        assert_eq!(v["members"][0]["peer_urls"][0], "http://localhost:2380");
        assert_eq!(v["removed_members"][0], "00000000000000ff");
        assert_eq!(v["alarms"][0]["member_id"], "0000000000000005");
        assert_eq!(v["consistent_index"], 1234);
        let h = serde_json::to_value(Db::open(&write(&dir, &bytes)).unwrap().kv_hash().unwrap())
            .unwrap();
        assert!(h.get("total_key").is_some() && h.get("total_size").is_some());
    }

    #[test]
    fn a_plain_root_key_fails_the_hash_like_etcdutl() {
        let mut b = Builder::new(4096);
        let inline = inline_bucket(&[(false, b"k", b"v")]);
        let root = b.leaf(&[(true, b"a", &inline), (false, b"plain", b"x")]);
        let bytes = b.finish(root, 3);
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(&write(&dir, &bytes)).unwrap();
        let e = db.kv_hash().unwrap_err();
        assert!(
            matches!(e, BoltError::NotABucket { ref key, .. } if key == b"plain"),
            "{e}"
        );
        assert!(e.to_string().contains("\"plain\""), "{e}");
        assert_eq!(db.summary().unwrap().buckets, ["a"]);
    }

    #[test]
    fn nested_buckets_hash_like_foreach_and_count_their_pages() {
        let mut b = Builder::new(4096);
        let deep = b.leaf(&[(false, b"x", b"y")]);
        let deep_v = bucket_value(deep);
        let inner = inline_bucket(&[(false, b"i", b"j")]);
        let outer = b.leaf(&[
            (false, b"a", b"1"),
            (true, b"n", &deep_v),
            (true, b"o", &inner),
        ]);
        let outer_v = bucket_value(outer);
        let root = b.leaf(&[(true, b"top", &outer_v)]);
        let bytes = b.finish(root, 3);
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(&write(&dir, &bytes)).unwrap();
        let h = db.kv_hash().unwrap();
        // ForEach sees nested buckets with a nil value and does not descend.
        let mut want = crc32c::crc32c_append(0, b"top");
        for part in [&b"a"[..], b"1", b"n", b"o"] {
            want = crc32c::crc32c_append(want, part);
        }
        assert_eq!((h.hash, h.total_key), (want, 3));
        let s = db.summary().unwrap();
        assert_eq!(s.size_in_use, Some(s.logical_size));
        let kvs = all_kvs(&db, b"top");
        assert_eq!(kvs[1], (b"n".to_vec(), vec![]));
    }

    #[test]
    fn bad_records_are_reported_with_their_bucket_and_key() {
        let mut model = Model::new();
        model.insert(
            b"meta".to_vec(),
            [(b"consistent_index".to_vec(), vec![1, 2, 3])]
                .into_iter()
                .collect(),
        );
        let bytes = build(&model, 4096, 20, false, 0);
        let dir = tempfile::tempdir().unwrap();
        let e = Db::open(&write(&dir, &bytes))
            .unwrap()
            .summary()
            .unwrap_err();
        match e {
            BoltError::BadRecord {
                bucket,
                key,
                problem:
                    RecordProblem::Length {
                        expected: 8,
                        found: 3,
                    },
                ..
            } => assert_eq!(
                (bucket.as_str(), key.as_slice()),
                ("meta", &b"consistent_index"[..])
            ),
            other => panic!("{other}"),
        }

        let mut model = Model::new();
        model.insert(
            b"members".to_vec(),
            [(b"1".to_vec(), b"{not json".to_vec())]
                .into_iter()
                .collect(),
        );
        let bytes = build(&model, 4096, 20, false, 0);
        let e = Db::open(&write(&dir, &bytes))
            .unwrap()
            .summary()
            .unwrap_err();
        assert!(
            matches!(
                e,
                BoltError::BadRecord {
                    problem: RecordProblem::Json(_),
                    ..
                }
            ),
            "{e}"
        );

        let mut model = Model::new();
        model.insert(
            b"key".to_vec(),
            [(b"short".to_vec(), b"v".to_vec())].into_iter().collect(),
        );
        let bytes = build(&model, 4096, 20, false, 0);
        let e = Db::open(&write(&dir, &bytes))
            .unwrap()
            .kv_hash()
            .unwrap_err();
        assert!(
            matches!(
                e,
                BoltError::BadRecord {
                    problem: RecordProblem::Length {
                        expected: 17,
                        found: 5
                    },
                    ..
                }
            ),
            "{e}"
        );
    }

    #[test]
    fn real_etcd_db_matches_etcdutl_snapshot_status() {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(&write(&dir, &fixture())).unwrap();
        let h = db.kv_hash().unwrap();
        assert_eq!(
            (
                h.hash,
                h.revision,
                h.total_key,
                h.total_size,
                h.version.clone()
            ),
            (1585619019, 29, 35, 65536, None)
        );
        assert_eq!(h.entries, 35);
        assert_eq!(h.live_keys, None, "a 3.5 file: {h:?}");
        assert_eq!((db.txid(), db.meta_page(), db.high_water()), (14, 0, 16));
        let s = db.summary().unwrap();
        assert_eq!(
            s.buckets,
            [
                "alarm",
                "auth",
                "authRoles",
                "authUsers",
                "cluster",
                "key",
                "lease",
                "members",
                "members_removed",
                "meta"
            ]
        );
        assert_eq!((s.consistent_index, s.term), (Some(35), Some(2)));
        assert_eq!(
            s.conf_state,
            Some(serde_json::json!({"auto_leave": false, "voters": [0x4a37412995744e25u64]}))
        );
        assert_eq!(s.members.len(), 1);
        assert_eq!(s.members[0].id, MemberId::new(0x4a37412995744e25));
        assert_eq!(s.members[0].name, "fixture");
        assert_eq!(
            s.alarms,
            vec![BackendAlarm {
                member_id: MemberId::new(0x4a37412995744e25),
                alarm: "NOSPACE".into()
            }]
        );
        assert_eq!(s.cluster_version.as_deref(), Some("3.5.0"));
        // 2 metas + 10 tree pages, the number etcd computes when it opens the file.
        assert_eq!((s.logical_size, s.size_in_use), (65536, Some(12 * 4096)));
        let mut keys = 0;
        let mut last = Vec::new();
        db.for_each_kv(b"key", |k, _| {
            keys += 1;
            last = k.to_vec();
        })
        .unwrap();
        assert_eq!(main_revision(&last), Some(29));
        assert_eq!(keys, 28); // revisions 2..=29: one per put and delete
    }
}
