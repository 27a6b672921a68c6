//! A read-only parser for etcd's backend database (`member/snap/db`, a bbolt file)
//! and for `etcdctl snapshot save` images, over `pread`.
//!
//! It exists so the agent can answer, before etcd starts and without etcd's code,
//! what the backend holds: which transaction it is at, the consistent index and
//! term it has applied, the members and alarms etcd will load, how much of the file
//! is live, and the hash `etcdutl snapshot status` would print.
//!
//! Why it is shaped so:
//! * No mmap and no flock. A truncated file under mmap is SIGBUS, and etcd waits
//!   forever for a flock we hold. Pages are read with [`PosReader`]; a page and its
//!   overflow come in at most two `pread`s, and the children of a branch page are
//!   fetched in batches whose adjacent page ids are coalesced into one `pread`, so
//!   a walk of a multi-gigabyte file costs few syscalls per megabyte.
//! * The file is untrusted input. Every page id is checked against the high-water
//!   mark and the file length before it is read, every element against its page,
//!   overflow spans are capped, a full walk remembers every page it visited (a page
//!   reached twice is a cycle or a shared page: corruption), and recursion depth is
//!   bounded. Nothing here panics on arbitrary bytes.
//! * Meta selection follows bbolt v1.3.6: magic, version 2 and FNV-1a checksum, the
//!   valid meta with the higher txid wins. Unlike bbolt a checksum of zero is not
//!   accepted, the page size must be a power of two, and when meta0 is broken
//!   meta1 is looked for at every plausible page size, not only the OS's.
//! * The hash reproduces etcd's `v3Manager.Status` (3.4 and 3.5) byte for byte and
//!   was checked against `etcdutl snapshot status` on files written by etcd 3.4.23
//!   and 3.5.1; `tests/fixtures/bbolt` holds one of them.
//! * Deeper checks are left to the walk that needs them: opening reads two meta
//!   pages only, so an inspector can report the txid of a file whose tree is broken.
//!
//! The on-disk format is described in `docs/on-disk-format.md` § bbolt; the
//! reference implementation is bbolt v1.3.6 `page.go`, `db.go`, `cursor.go`.

use std::path::{Path, PathBuf};

use crate::disk::pb::PbError;
use crate::disk::reader::{IoError, PosReader};

mod etcd;
mod hashkv;
mod meta;
mod page;
mod walk;

pub use etcd::{
    detect_storage_version, main_revision, parse_semver, semver_minor, Backend, BackendAlarm,
    Downgrade, KvHash, StorageVersionSource,
};
pub use hashkv::{
    newest_digests, unchanged_digests, HashAt, KeyspaceAt, LiveKv, Unknown as HashUnknown,
    MAX_TRACKED_KEYS,
};
pub use meta::VERSION;

use meta::{Chosen, Meta};
use page::BucketRoot;
use walk::Walker;

/// Why one meta page is unusable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MetaProblem {
    /// The file ends before the meta page does.
    #[error("file ends at byte {file_len}, before the meta at byte {offset} is complete")]
    Truncated {
        /// Where the meta page starts.
        offset: u64,
        /// The file's length.
        file_len: u64,
    },
    /// The magic number is not bbolt's.
    #[error("bad magic {found:#010x} at byte {offset}")]
    Magic {
        /// Where the meta page starts.
        offset: u64,
        /// The value found.
        found: u32,
    },
    /// A data file version other than 2.
    #[error("unsupported version {found} at byte {offset}")]
    Version {
        /// Where the meta page starts.
        offset: u64,
        /// The version found.
        found: u32,
    },
    /// The FNV-1a checksum over the meta does not match (or is zero).
    #[error(
        "checksum mismatch at byte {offset}: stored {stored:#018x}, computed {computed:#018x}"
    )]
    Checksum {
        /// Where the meta page starts.
        offset: u64,
        /// The checksum stored in the meta.
        stored: u64,
        /// The checksum of the meta bytes.
        computed: u64,
    },
    /// The page size field is not a power of two this reader accepts, or (for meta1
    /// found without meta0) does not match the offset meta1 was found at.
    #[error("unusable page size {found} in the meta at byte {offset}")]
    PageSize {
        /// Where the meta page starts.
        offset: u64,
        /// The page size field.
        found: u32,
    },
}

/// Why a record in one of etcd's buckets could not be decoded.
#[derive(Debug, thiserror::Error)]
pub enum RecordProblem {
    /// A fixed-width value of the wrong length.
    #[error("{found} bytes where {expected} are expected")]
    Length {
        /// The length etcd writes.
        expected: usize,
        /// The length found.
        found: usize,
    },
    /// A JSON value that does not parse into what etcd writes.
    #[error("bad JSON")]
    Json(#[source] serde_json::Error),
    /// A key that should be a hexadecimal member id and is not.
    #[error("key is not a hexadecimal member id")]
    HexId,
    /// A value that should be UTF-8 text and is not.
    #[error("value is not UTF-8")]
    Utf8,
    /// A protobuf key that does not decode.
    #[error("bad protobuf")]
    Protobuf(#[source] PbError),
}

/// A failure to read or make sense of a bbolt file.
#[derive(Debug, thiserror::Error)]
pub enum BoltError {
    /// Reading the file failed.
    #[error(transparent)]
    Io(#[from] IoError),
    /// Neither meta page is valid: not a bbolt file, or both copies are damaged.
    #[error("{}: no valid bbolt meta page (meta0: {meta0}; meta1: {meta1})", path.display())]
    NoValidMeta {
        /// The file.
        path: PathBuf,
        /// Why meta0 (at byte 0) is unusable.
        meta0: MetaProblem,
        /// Why meta1 (one page in) is unusable.
        meta1: MetaProblem,
    },
    /// A page reference (with its overflow) outside the database: a meta page,
    /// at or beyond the high-water mark, or past the end of the file.
    #[error("{}: page {pgid} (+{overflow} overflow) is outside the database (high water {high_water}, file {file_len} bytes)", path.display())]
    PageOutOfBounds {
        /// The file.
        path: PathBuf,
        /// The page referenced.
        pgid: u64,
        /// Its overflow count (0 when the header was not read yet).
        overflow: u64,
        /// The meta's high-water pgid.
        high_water: u64,
        /// The file's length.
        file_len: u64,
    },
    /// The file ended inside a page that the bounds checks expected to be there
    /// (the file shrank while being read).
    #[error("{}: short read of page {pgid} at byte {offset}: {found} of {expected} bytes", path.display())]
    ShortRead {
        /// The file.
        path: PathBuf,
        /// The page being read.
        pgid: u64,
        /// Byte offset of the read.
        offset: u64,
        /// Bytes wanted.
        expected: u64,
        /// Bytes read.
        found: u64,
    },
    /// A page header names another page id than the page's position.
    #[error("{}: page {pgid} at byte {offset} has id {found} in its header", path.display())]
    PageIdMismatch {
        /// The file.
        path: PathBuf,
        /// The page read.
        pgid: u64,
        /// Byte offset of the page.
        offset: u64,
        /// The id in its header.
        found: u64,
    },
    /// Neither a branch nor a leaf where the tree needs one.
    #[error("{}: page {pgid} at byte {offset} has flags {flags:#06x}, not a branch or leaf", path.display())]
    PageType {
        /// The file.
        path: PathBuf,
        /// The page (for an inline bucket: the page holding it).
        pgid: u64,
        /// Byte offset of the page.
        offset: u64,
        /// The flags found.
        flags: u16,
    },
    /// A page whose overflow span is larger than any value etcd writes.
    #[error("{}: page {pgid} at byte {offset} claims {overflow} overflow pages", path.display())]
    PageTooLarge {
        /// The file.
        path: PathBuf,
        /// The page.
        pgid: u64,
        /// Byte offset of the page.
        offset: u64,
        /// Its overflow count.
        overflow: u64,
    },
    /// An element table, key or value that lies outside its page.
    #[error("{}: element {index} of page {pgid} (byte {offset}) lies outside the page", path.display())]
    ElementOutOfBounds {
        /// The file.
        path: PathBuf,
        /// The page (for an inline bucket: the page holding it).
        pgid: u64,
        /// Byte offset of the page.
        offset: u64,
        /// The element index (the count, when the element table itself overflows).
        index: u64,
    },
    /// A page reached twice in one walk: a cycle, or two parents sharing a page.
    #[error("{}: page {pgid} at byte {offset} is referenced twice", path.display())]
    PageReused {
        /// The file.
        path: PathBuf,
        /// The page.
        pgid: u64,
        /// Byte offset of the page.
        offset: u64,
    },
    /// The tree (with bucket nesting) is deeper than any real database.
    #[error("{}: tree deeper than {depth} levels at page {pgid}", path.display())]
    TooDeep {
        /// The file.
        path: PathBuf,
        /// The page where the limit was hit.
        pgid: u64,
        /// The limit.
        depth: u32,
    },
    /// A sub-bucket value too short for a bucket header and its inline page.
    #[error("{}: bucket {} on page {pgid} has a {len}-byte value", path.display(), show(key))]
    BadBucketValue {
        /// The file.
        path: PathBuf,
        /// The page holding the value.
        pgid: u64,
        /// The bucket's key.
        key: Vec<u8>,
        /// The value's length.
        len: usize,
    },
    /// A key of the root bucket that is not a bucket; `etcdutl snapshot status`
    /// refuses such a file too.
    #[error("{}: root key {} is not a bucket", path.display(), show(key))]
    NotABucket {
        /// The file.
        path: PathBuf,
        /// The key.
        key: Vec<u8>,
    },
    /// A record in one of etcd's buckets that does not decode.
    #[error("{}: bucket {bucket} key {}: {problem}", path.display(), show(key))]
    BadRecord {
        /// The file.
        path: PathBuf,
        /// The bucket.
        bucket: String,
        /// The record's key.
        key: Vec<u8>,
        /// What is wrong with it.
        #[source]
        problem: RecordProblem,
    },
}

impl BoltError {
    /// True when the cause is a permission problem: unreadable, not corrupt.
    pub(crate) fn is_permission(&self) -> bool {
        matches!(self, BoltError::Io(e) if e.is_permission())
    }

    /// The byte of the file where the damage was found, when it is one place:
    /// the page (or the read) at fault.
    pub fn offset(&self) -> Option<u64> {
        match self {
            BoltError::ShortRead { offset, .. }
            | BoltError::PageIdMismatch { offset, .. }
            | BoltError::PageType { offset, .. }
            | BoltError::PageTooLarge { offset, .. }
            | BoltError::ElementOutOfBounds { offset, .. }
            | BoltError::PageReused { offset, .. } => Some(*offset),
            _ => None,
        }
    }
}

/// Printable form of a key: text when it is, hex otherwise.
fn show(key: &[u8]) -> String {
    match std::str::from_utf8(key) {
        Ok(s) if s.chars().all(|c| !c.is_control()) => format!("{s:?}"),
        _ => key.iter().map(|b| format!("{b:02x}")).collect(),
    }
}

/// An open bbolt file: the reader and the meta chosen at open time.
#[derive(Debug)]
pub struct Db {
    reader: PosReader,
    page_size: u32,
    meta: Meta,
    meta_page: u8,
    /// The other meta's problem, when it is broken.
    damaged: Option<MetaProblem>,
}

impl Db {
    /// Opens `path` and chooses a meta page the way bbolt does: meta0 at byte 0
    /// gives the page size and meta1 sits one page in (at 4096, or another page
    /// size whose meta1 agrees, when meta0 is broken); of the valid ones the higher
    /// txid wins. Reads nothing else.
    #[tracing::instrument(level = "debug", skip_all, fields(path = %path.display()))]
    pub fn open(path: &Path) -> Result<Db, BoltError> {
        let reader = PosReader::open(path)?;
        let Chosen {
            meta,
            meta_page,
            damaged,
            page_size,
        } = meta::choose(&reader, path)?;
        tracing::debug!(page_size, txid = meta.txid, meta_page, "bbolt meta chosen");
        Ok(Db {
            reader,
            page_size,
            meta,
            meta_page,
            damaged,
        })
    }

    /// The file.
    pub fn path(&self) -> &Path {
        self.reader.path()
    }

    /// The file's length when it was opened.
    pub fn file_size(&self) -> u64 {
        self.reader.len()
    }

    /// The page size (from meta0, or from meta1 when meta0 is broken).
    pub fn page_size(&self) -> u32 {
        self.page_size
    }

    /// The chosen meta's transaction id.
    pub fn txid(&self) -> u64 {
        self.meta.txid
    }

    /// The chosen meta's high-water pgid: pages below it belong to the database.
    pub fn high_water(&self) -> u64 {
        self.meta.high_water
    }

    /// Which meta page was chosen (0 or 1).
    pub fn meta_page(&self) -> u8 {
        self.meta_page
    }

    /// The meta page that is broken while the other one is valid, and why. bbolt
    /// opens such a file silently; an inspector may want to say so.
    pub fn damaged_meta(&self) -> Option<(u8, &MetaProblem)> {
        self.damaged.as_ref().map(|p| (1 - self.meta_page, p))
    }

    /// High-water pgid × page size: etcd's `dbSize` and `tx.Size()`.
    pub fn logical_size(&self) -> u64 {
        self.meta
            .high_water
            .saturating_mul(u64::from(self.page_size))
    }

    /// Root bucket names in key order (root keys that are not buckets are skipped).
    pub fn buckets(&self) -> Result<Vec<Vec<u8>>, BoltError> {
        let mut names = Vec::new();
        let mut w = Walker::new(self);
        w.bucket(BucketRoot::Page(self.meta.root), 0, &mut |_, e| {
            if e.is_bucket {
                names.push(e.key.to_vec());
            }
            Ok(())
        })?;
        Ok(names)
    }

    /// Calls `f` with every key and value of root bucket `bucket`, in key order,
    /// the way bbolt's `Bucket.ForEach` does (a nested bucket's value is empty).
    /// Returns false when there is no such bucket.
    pub fn for_each_kv(
        &self,
        bucket: &[u8],
        mut f: impl FnMut(&[u8], &[u8]),
    ) -> Result<bool, BoltError> {
        let walked = self.try_for_each_kv(bucket, |k, v| {
            f(k, v);
            std::ops::ControlFlow::Continue(())
        })?;
        Ok(walked.is_some())
    }

    /// [`Db::for_each_kv`] that stops at the first entry `f` answers
    /// [`ControlFlow::Break`] for, reading no page past it. `None` when there
    /// is no such bucket; `Some(true)` when every entry was seen,
    /// `Some(false)` when `f` stopped the walk.
    pub fn try_for_each_kv(
        &self,
        bucket: &[u8],
        mut f: impl FnMut(&[u8], &[u8]) -> std::ops::ControlFlow<()>,
    ) -> Result<Option<bool>, BoltError> {
        let Some(value) = self.lookup(BucketRoot::Page(self.meta.root), 0, bucket)? else {
            return Ok(None);
        };
        if !value.is_bucket {
            return Ok(None);
        }
        let root = self.bucket_root(bucket, &value.value, value.pgid)?;
        let mut w = Walker::new(self);
        let mut stopped = false;
        let walked = w.bucket(root, 1, &mut |_, e| {
            match f(e.key, if e.is_bucket { &[] } else { e.value }) {
                std::ops::ControlFlow::Continue(()) => Ok(()),
                std::ops::ControlFlow::Break(()) => {
                    stopped = true;
                    // Unwinds the walk; told apart from a read error below.
                    Err(BoltError::Io(IoError {
                        op: "stop",
                        path: self.path().to_path_buf(),
                        offset: None,
                        source: std::io::Error::other("walk stopped"),
                    }))
                }
            }
        });
        match walked {
            Ok(()) => Ok(Some(true)),
            Err(_) if stopped => Ok(Some(false)),
            Err(e) => Err(e),
        }
    }

    /// The last key of root bucket `bucket` in key order: `None` when the bucket
    /// is missing or empty.
    pub(crate) fn last_key(&self, bucket: &[u8]) -> Result<Option<Vec<u8>>, BoltError> {
        let Some(b) = self.lookup(BucketRoot::Page(self.meta.root), 0, bucket)? else {
            return Ok(None);
        };
        if !b.is_bucket {
            return Ok(None);
        }
        let root = self.bucket_root(bucket, &b.value, b.pgid)?;
        self.last_entry_key(root, 1)
    }

    /// The value of `key` in root bucket `bucket`: `None` when either is missing
    /// or `key` is a nested bucket (bbolt's `Bucket.Get`).
    pub fn get(&self, bucket: &[u8], key: &[u8]) -> Result<Option<Vec<u8>>, BoltError> {
        let Some(b) = self.lookup(BucketRoot::Page(self.meta.root), 0, bucket)? else {
            return Ok(None);
        };
        if !b.is_bucket {
            return Ok(None);
        }
        let root = self.bucket_root(bucket, &b.value, b.pgid)?;
        Ok(self
            .lookup(root, 1, key)?
            .filter(|v| !v.is_bucket)
            .map(|v| v.value))
    }
}

#[cfg(test)]
mod testkit;

#[cfg(test)]
mod tests {
    use super::testkit::*;
    use super::*;
    use proptest::prelude::*;
    use std::path::Path;

    /// Prints what the reader makes of real files, for comparison with
    /// `etcdutl snapshot status -w json` and `etcdctl endpoint status -w json`.
    #[test]
    #[ignore = "set BBOLT_DB to a colon-separated list of bbolt files"]
    fn real_db_from_env() {
        let paths = std::env::var("BBOLT_DB").unwrap_or_default();
        for p in paths.split(':').filter(|p| !p.is_empty()) {
            let db = Db::open(Path::new(p)).unwrap();
            let t = std::time::Instant::now();
            let h = db.kv_hash().unwrap();
            let hash_time = t.elapsed();
            let t = std::time::Instant::now();
            let s = db.summary().unwrap();
            let summary_time = t.elapsed();
            println!("{p}: hash in {hash_time:?}, summary in {summary_time:?}");
            println!("{}", serde_json::to_string(&h).unwrap());
            println!("{}", serde_json::to_string(&s).unwrap());
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..20_000)) {
            exercise(&bytes);
        }

        #[test]
        fn arbitrary_bytes_behind_valid_metas_never_panic(
            body in proptest::collection::vec(any::<u8>(), 0..6 * 1024),
            root in 0u64..6,
            hw in 0u64..8,
        ) {
            let mut b = Builder::new(1024);
            b.data.extend(&body);
            b.data.resize(b.data.len().div_ceil(1024) * 1024, 0);
            b.meta(0, root, hw, 1);
            b.meta(1, root, hw, 2);
            exercise(&b.data);
        }

        #[test]
        fn random_models_round_trip(
            model in small_model(),
            per_leaf in 1usize..6,
            reverse: bool,
            gap in 0usize..3,
        ) {
            let bytes = build(&model, 1024, per_leaf, reverse, gap);
            let dir = tempfile::tempdir().unwrap();
            let db = Db::open(&write(&dir, &bytes)).unwrap();
            let h = db.kv_hash().unwrap();
            prop_assert_eq!((h.hash, h.total_key), model_hash(&model));
            for (name, entries) in &model {
                let mut got = Vec::new();
                prop_assert!(db.for_each_kv(name, |k, v| got.push((k.to_vec(), v.to_vec()))).unwrap());
                prop_assert_eq!(&got, &entries.clone().into_iter().collect::<Vec<_>>());
                for (k, v) in entries {
                    let got = db.get(name, k).unwrap();
                    prop_assert_eq!(got.as_ref(), Some(v));
                }
            }
            prop_assert_eq!(db.summary().unwrap().buckets.len(), model.len());
        }

        #[test]
        fn mutated_databases_never_panic(
            flips in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..16),
            per_leaf in 1usize..8,
        ) {
            let mut bytes = build(&etcd_model(), 1024, per_leaf, true, 1);
            for (at, v) in flips {
                let i = at.index(bytes.len());
                bytes[i] = v;
            }
            exercise(&bytes);
        }

        #[test]
        fn large_values_skim_like_a_full_walk(
            model in large_value_model(),
            per_leaf in 1usize..4,
            flips in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..6),
        ) {
            // `exercise` compares the skimmed summary with the full walk's.
            let mut bytes = build(&model, 1024, per_leaf, false, 1);
            for (at, v) in flips {
                let i = at.index(bytes.len());
                bytes[i] = v;
            }
            exercise(&bytes);
        }

        #[test]
        fn mutated_real_databases_never_panic(
            flips in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..16),
        ) {
            let mut bytes = fixture();
            for (at, v) in flips {
                let i = at.index(bytes.len());
                bytes[i] = v;
            }
            exercise(&bytes);
        }

        #[test]
        fn mutated_page_structures_never_panic(
            flips in proptest::collection::vec((0usize..64, any::<u8>()), 1..8),
            page in 2usize..40,
        ) {
            // Target page headers and element tables, where mutations matter most.
            let mut bytes = build(&etcd_model(), 1024, 3, false, 0);
            let base = (page * 1024).min(bytes.len() - 64);
            for (off, v) in flips {
                bytes[base + off] = v;
            }
            exercise(&bytes);
        }
    }
}
