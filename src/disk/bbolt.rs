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
//! The on-disk format is described in `etcd-on-disk.md` (section bbolt); the
//! reference implementation is bbolt v1.3.6 `page.go`, `db.go`, `cursor.go`.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::pb::{self, PbError};
use super::reader::{Block, IoError, PosReader};

/// bbolt's magic number, at the start of each meta.
pub const MAGIC: u32 = 0xED0C_DAED;
/// The only data file version bbolt writes.
pub const VERSION: u32 = 2;
/// Page header: id u64, flags u16, count u16, overflow u32.
const PAGE_HEADER: usize = 16;
/// Meta body: 64 bytes after the page header.
const META_SIZE: usize = 64;
/// The checksum covers the meta's first 56 bytes (everything before it).
const META_CHECKSUMMED: usize = 56;
/// Leaf element: flags u32, pos u32, ksize u32, vsize u32.
const LEAF_ELEMENT: usize = 16;
/// Branch element: pos u32, ksize u32, pgid u64.
const BRANCH_ELEMENT: usize = 16;
/// Sub-bucket header stored as a value: root pgid u64, sequence u64.
const BUCKET_HEADER: usize = 16;

const BRANCH_PAGE: u16 = 0x01;
const LEAF_PAGE: u16 = 0x02;
/// Leaf element flag marking a sub-bucket.
const BUCKET_LEAF: u32 = 0x01;
/// Freelist pgid when the freelist is not persisted (etcd sets `NoFreelistSync`).
const NO_FREELIST: u64 = u64::MAX;

/// Smallest page size accepted in a meta.
const MIN_PAGE_SIZE: u32 = 512;
/// Largest page size accepted in a meta (bbolt uses the OS page size: 4 KiB or 64 KiB).
const MAX_PAGE_SIZE: u32 = 1 << 20;
/// Offsets where meta1 is looked for when meta0 is broken: 4096 first (what bbolt
/// itself assumes on x86), then the other page sizes bbolt may have used.
const META1_FALLBACK_OFFSETS: [u32; 8] = [4096, 512, 1024, 2048, 8192, 16384, 32768, 65536];

/// Largest page plus overflow read into memory. etcd's values are bounded by its
/// request size limit (1.5 MiB by default); a bigger span is corruption.
const MAX_PAGE_SPAN_BYTES: u64 = 512 << 20;
/// Deepest recursion accepted: tree levels plus bucket nesting. Real trees are a
/// handful of levels deep; the bound keeps crafted chains off the stack.
const MAX_DEPTH: u32 = 64;
/// How many children of a branch are fetched per batch.
const BATCH_CHILDREN: usize = 64;
/// A gap of up to this many unwanted pages is read through rather than paying for
/// another syscall.
const BATCH_MAX_GAP: u64 = 4;
/// Upper bound of one coalesced read.
const BATCH_MAX_BYTES: u64 = 1 << 20;

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
    pub fn is_permission(&self) -> bool {
        matches!(self, BoltError::Io(e) if e.is_permission())
    }
}

/// Printable form of a key: text when it is, hex otherwise.
fn show(key: &[u8]) -> String {
    match std::str::from_utf8(key) {
        Ok(s) if s.chars().all(|c| !c.is_control()) => format!("{s:?}"),
        _ => key.iter().map(|b| format!("{b:02x}")).collect(),
    }
}

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
    /// Where [`Backend::storage_version`] came from: `meta/storageVersion`,
    /// `meta/term` or `none`.
    pub storage_version_source: &'static str,
    /// The raw `meta`/`storageVersion` value, when present (even if etcd would not
    /// parse it).
    #[serde(skip)]
    pub storage_version_raw: Option<String>,
    /// The `members` bucket, in key order.
    pub members: Vec<BackendMember>,
    /// The `members_removed` bucket's ids.
    #[serde(with = "crate::disk::ids::serde_hex::vec")]
    pub removed_members: Vec<u64>,
    /// `cluster`/`clusterVersion`.
    pub cluster_version: Option<String>,
    /// `cluster`/`downgrade` (3.5+): the downgrade `etcdctl downgrade enable`
    /// started, or its cancellation; `None` when the key is absent.
    pub downgrade: Option<Downgrade>,
    /// The `alarm` bucket.
    pub alarms: Vec<BackendAlarm>,
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

/// One member as stored in the backend's `members` bucket.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BackendMember {
    /// Member id (from the JSON value).
    #[serde(with = "crate::disk::ids::serde_hex")]
    pub id: u64,
    /// Member name; empty until the member has published its attributes.
    pub name: String,
    /// Peer URLs.
    pub peer_urls: Vec<String>,
    /// Client URLs as stored (etcd 3.5.1 leaves them out of the backend; 3.4 keeps them).
    pub client_urls: Vec<String>,
    /// True for a learner.
    pub is_learner: bool,
}

/// One raised alarm from the backend's `alarm` bucket.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BackendAlarm {
    /// The member that raised it.
    #[serde(with = "crate::disk::ids::serde_hex")]
    pub member_id: u64,
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

/// The fields of a meta page.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Meta {
    page_size: u32,
    root: u64,
    freelist: u64,
    high_water: u64,
    txid: u64,
}

fn le_u16(b: &[u8], at: usize) -> u16 {
    let mut a = [0u8; 2];
    if let Some(s) = b.get(at..at + 2) {
        a.copy_from_slice(s);
    }
    u16::from_le_bytes(a)
}

fn le_u32(b: &[u8], at: usize) -> u32 {
    let mut a = [0u8; 4];
    if let Some(s) = b.get(at..at + 4) {
        a.copy_from_slice(s);
    }
    u32::from_le_bytes(a)
}

fn le_u64(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    if let Some(s) = b.get(at..at + 8) {
        a.copy_from_slice(s);
    }
    u64::from_le_bytes(a)
}

/// FNV-1a, 64 bits (Go's `hash/fnv` `New64a`).
fn fnv1a64(data: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in data {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// Decodes and validates the meta in `page`, the first bytes of the page at file
/// offset `offset`.
fn decode_meta(page: &[u8], offset: u64, file_len: u64) -> Result<Meta, MetaProblem> {
    let m = page
        .get(PAGE_HEADER..PAGE_HEADER + META_SIZE)
        .ok_or(MetaProblem::Truncated { offset, file_len })?;
    let magic = le_u32(m, 0);
    if magic != MAGIC {
        return Err(MetaProblem::Magic {
            offset,
            found: magic,
        });
    }
    let version = le_u32(m, 4);
    if version != VERSION {
        return Err(MetaProblem::Version {
            offset,
            found: version,
        });
    }
    let stored = le_u64(m, META_CHECKSUMMED);
    let computed = fnv1a64(&m[..META_CHECKSUMMED]);
    if stored != computed || stored == 0 {
        return Err(MetaProblem::Checksum {
            offset,
            stored,
            computed,
        });
    }
    let page_size = le_u32(m, 8);
    if !page_size.is_power_of_two() || !(MIN_PAGE_SIZE..=MAX_PAGE_SIZE).contains(&page_size) {
        return Err(MetaProblem::PageSize {
            offset,
            found: page_size,
        });
    }
    Ok(Meta {
        page_size,
        root: le_u64(m, 16),
        freelist: le_u64(m, 32),
        high_water: le_u64(m, 40),
        txid: le_u64(m, 48),
    })
}

/// Reads and validates the meta of the page at byte `offset`.
fn read_meta(reader: &PosReader, offset: u32) -> Result<Result<Meta, MetaProblem>, BoltError> {
    let offset = u64::from(offset);
    let buf = reader.read_block(Block {
        offset,
        len: (PAGE_HEADER + META_SIZE) as u64,
    })?;
    Ok(decode_meta(&buf, offset, reader.len()))
}

/// Looks for meta1 when meta0 cannot say where it is: at each plausible page
/// size, a valid meta whose page size field names that offset. The problem
/// reported is the one at 4096, where bbolt itself would look.
fn find_meta1(reader: &PosReader) -> Result<Result<Meta, MetaProblem>, BoltError> {
    let mut first = None;
    for off in META1_FALLBACK_OFFSETS {
        match read_meta(reader, off)? {
            Ok(m) if m.page_size == off => return Ok(Ok(m)),
            Ok(m) => first.get_or_insert(MetaProblem::PageSize {
                offset: u64::from(off),
                found: m.page_size,
            }),
            Err(e) => first.get_or_insert(e),
        };
    }
    Ok(Err(first.unwrap_or(MetaProblem::Truncated {
        offset: 4096,
        file_len: reader.len(),
    })))
}

/// A page (with its overflow) read into memory.
struct Page {
    pgid: u64,
    data: Vec<u8>,
}

/// The decoded header of a page.
#[derive(Clone, Copy)]
struct Header {
    id: u64,
    flags: u16,
    count: u16,
    overflow: u32,
}

fn header(page: &[u8]) -> Header {
    Header {
        id: le_u64(page, 0),
        flags: le_u16(page, 8),
        count: le_u16(page, 10),
        overflow: le_u32(page, 12),
    }
}

/// Where a page's bytes came from, for error context. Inline bucket pages live
/// inside a value of another page: `host` is that page.
#[derive(Clone, Copy)]
struct Origin {
    host: u64,
    offset: u64,
}

/// One element of a leaf page.
struct LeafElem<'a> {
    flags: u32,
    key: &'a [u8],
    value: &'a [u8],
}

/// One key/value pair of a bucket, as a walk sees it.
struct Entry<'a> {
    key: &'a [u8],
    /// For a sub-bucket: the bucket header and inline page (not what `ForEach` sees).
    value: &'a [u8],
    is_bucket: bool,
    /// The page holding the element.
    pgid: u64,
    /// Recursion depth of the page holding the element.
    depth: u32,
}

/// Where a bucket's tree starts.
#[derive(Clone, Copy)]
enum BucketRoot<'a> {
    /// A tree of pages rooted at this pgid.
    Page(u64),
    /// An inline bucket: a leaf page stored inside the value on page `host`.
    Inline { page: &'a [u8], host: u64 },
}

/// Pages visited by one walk: a bitset over the pgids the bounds checks allow.
struct PageSet {
    bits: Vec<u64>,
}

impl PageSet {
    fn new(limit: u64) -> Self {
        let words = usize::try_from(limit.div_ceil(64)).unwrap_or(0);
        PageSet {
            bits: vec![0; words],
        }
    }

    /// Marks `id`; `None` when it is outside the set, `Some(false)` when it was
    /// already there.
    fn insert(&mut self, id: u64) -> Option<bool> {
        let word = self.bits.get_mut(usize::try_from(id / 64).ok()?)?;
        let bit = 1u64 << (id % 64);
        let fresh = *word & bit == 0;
        *word |= bit;
        Some(fresh)
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
        let meta0 = read_meta(&reader, 0)?;
        let meta1 = match &meta0 {
            Ok(m) => read_meta(&reader, m.page_size)?,
            Err(_) => find_meta1(&reader)?,
        };
        // bbolt keeps meta0's page size even when meta1 is newer.
        let (meta, meta_page, damaged, page_size) = match (meta0, meta1) {
            (Ok(a), Ok(b)) if b.txid > a.txid => (b, 1, None, a.page_size),
            (Ok(a), Ok(_)) => (a, 0, None, a.page_size),
            (Ok(a), Err(e)) => (a, 0, Some(e), a.page_size),
            (Err(e), Ok(b)) => (b, 1, Some(e), b.page_size),
            (Err(meta0), Err(meta1)) => {
                return Err(BoltError::NoValidMeta {
                    path: path.to_path_buf(),
                    meta0,
                    meta1,
                })
            }
        };
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
        let Some(value) = self.lookup(BucketRoot::Page(self.meta.root), 0, bucket)? else {
            return Ok(false);
        };
        if !value.is_bucket {
            return Ok(false);
        }
        let root = self.bucket_root(bucket, &value.value, value.pgid)?;
        let mut w = Walker::new(self);
        w.bucket(root, 1, &mut |_, e| {
            f(e.key, if e.is_bucket { &[] } else { e.value });
            Ok(())
        })?;
        Ok(true)
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

    /// Walks the whole database once: every page reachable from the chosen meta,
    /// the etcd records the agent reports, and the live size.
    pub fn summary(&self) -> Result<Backend, BoltError> {
        self.summarize(true)
    }

    /// The etcd records only (consistent index, membership, cluster version,
    /// alarms), without counting the pages in use: reads the small buckets and
    /// skips the `key` bucket, which is most of the file. What a pre-start
    /// decision needs, at a fraction of [`Db::summary`]'s I/O.
    pub fn identity_summary(&self) -> Result<Backend, BoltError> {
        self.summarize(false)
    }

    #[tracing::instrument(level = "debug", skip(self), fields(path = %self.path().display()))]
    fn summarize(&self, count_pages: bool) -> Result<Backend, BoltError> {
        const WANTED: [&[u8]; 5] = [
            b"meta",
            b"members",
            b"members_removed",
            b"cluster",
            b"alarm",
        ];
        let mut w = Walker::new(self);
        // Meta pages 0 and 1 are always in use.
        let mut in_use: u64 = 2;
        if self.meta.freelist != NO_FREELIST {
            let page = self.read_page(self.meta.freelist)?;
            w.mark(&page)?;
        }
        let mut buckets = Vec::new();
        let mut records: Vec<(&'static [u8], Records)> = Vec::new();
        w.bucket(BucketRoot::Page(self.meta.root), 0, &mut |w, e| {
            if !e.is_bucket {
                return Ok(());
            }
            buckets.push(String::from_utf8_lossy(e.key).into_owned());
            let root = w.db.bucket_root(e.key, e.value, e.pgid)?;
            match WANTED.iter().find(|n| **n == e.key) {
                Some(name) => {
                    let mut kvs = Vec::new();
                    visit_all(w, root, e.depth + 1, Some(&mut kvs))?;
                    records.push((*name, kvs));
                }
                None if count_pages => visit_all(w, root, e.depth + 1, None)?,
                None => {}
            }
            Ok(())
        })?;
        in_use += w.pages;

        let mut out = Backend {
            page_size: self.page_size,
            file_size: self.reader.len(),
            logical_size: self.logical_size(),
            size_in_use: count_pages.then(|| in_use.saturating_mul(u64::from(self.page_size))),
            txid: self.meta.txid,
            meta_page: self.meta_page,
            buckets,
            consistent_index: None,
            term: None,
            conf_state: None,
            storage_version: None,
            storage_version_source: "none",
            storage_version_raw: None,
            members: Vec::new(),
            removed_members: Vec::new(),
            cluster_version: None,
            downgrade: None,
            alarms: Vec::new(),
        };
        for (bucket, kvs) in records {
            for (k, v) in kvs {
                self.decode_record(&mut out, bucket, &k, &v)?;
            }
        }
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
        let mut w = Walker::new(self);
        w.bucket(BucketRoot::Page(self.meta.root), 0, &mut |w, e| {
            if !e.is_bucket {
                return Err(BoltError::NotABucket {
                    path: w.db.path().to_path_buf(),
                    key: e.key.to_vec(),
                });
            }
            hash = crc32c::crc32c_append(hash, e.key);
            let is_key_bucket = e.key == b"key";
            let root = w.db.bucket_root(e.key, e.value, e.pgid)?;
            w.bucket(root, e.depth + 1, &mut |w, kv| {
                hash = crc32c::crc32c_append(hash, kv.key);
                if !kv.is_bucket {
                    hash = crc32c::crc32c_append(hash, kv.value);
                }
                // 3.6+ etcdutl fails on a `key` value that is not a KeyValue.
                if v36 && is_key_bucket && !kv.is_bucket {
                    let k = user_key(kv.value).map_err(|e| BoltError::BadRecord {
                        path: w.db.path().to_path_buf(),
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
                        path: w.db.path().to_path_buf(),
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
            })
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
                out.members.push(BackendMember {
                    id: m.id,
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
                    member_id,
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

    /// Interprets a sub-bucket value found on page `host`.
    fn bucket_root<'a>(
        &self,
        key: &[u8],
        value: &'a [u8],
        host: u64,
    ) -> Result<BucketRoot<'a>, BoltError> {
        let bad = || BoltError::BadBucketValue {
            path: self.path().to_path_buf(),
            pgid: host,
            key: key.to_vec(),
            len: value.len(),
        };
        if value.len() < BUCKET_HEADER {
            return Err(bad());
        }
        match le_u64(value, 0) {
            0 => {
                let page = &value[BUCKET_HEADER..];
                if page.len() < PAGE_HEADER {
                    return Err(bad());
                }
                Ok(BucketRoot::Inline { page, host })
            }
            root => Ok(BucketRoot::Page(root)),
        }
    }

    fn page_offset(&self, pgid: u64) -> u64 {
        pgid.saturating_mul(u64::from(self.page_size))
    }

    fn out_of_bounds(&self, pgid: u64, overflow: u64) -> BoltError {
        BoltError::PageOutOfBounds {
            path: self.path().to_path_buf(),
            pgid,
            overflow,
            high_water: self.meta.high_water,
            file_len: self.reader.len(),
        }
    }

    /// The number of pgids a walk may touch: below the high-water mark and inside
    /// the file.
    fn page_limit(&self) -> u64 {
        let in_file = self.reader.len() / u64::from(self.page_size);
        self.meta.high_water.min(in_file)
    }

    /// Checks that pages `pgid ..= pgid + overflow` are data pages of this file.
    fn check_span(&self, pgid: u64, overflow: u64) -> Result<(), BoltError> {
        let end = pgid.checked_add(overflow).and_then(|e| e.checked_add(1));
        match end {
            Some(end) if pgid >= 2 && end <= self.page_limit() => Ok(()),
            _ => Err(self.out_of_bounds(pgid, overflow)),
        }
    }

    /// Validates a freshly read page header and returns its overflow count.
    fn check_header(&self, pgid: u64, first: &[u8]) -> Result<u64, BoltError> {
        let h = header(first);
        let offset = self.page_offset(pgid);
        if h.id != pgid {
            return Err(BoltError::PageIdMismatch {
                path: self.path().to_path_buf(),
                pgid,
                offset,
                found: h.id,
            });
        }
        let overflow = u64::from(h.overflow);
        if (overflow + 1).saturating_mul(u64::from(self.page_size)) > MAX_PAGE_SPAN_BYTES {
            return Err(BoltError::PageTooLarge {
                path: self.path().to_path_buf(),
                pgid,
                offset,
                overflow,
            });
        }
        self.check_span(pgid, overflow)?;
        Ok(overflow)
    }

    /// Appends exactly `len` bytes read at `offset` (inside page `pgid`) to `buf`.
    fn read_exact_into(
        &self,
        pgid: u64,
        offset: u64,
        len: u64,
        buf: &mut Vec<u8>,
    ) -> Result<(), BoltError> {
        let start = buf.len();
        let want = usize::try_from(len).map_err(|_| self.out_of_bounds(pgid, 0))?;
        buf.resize(start + want, 0);
        let n = self.reader.read_at(offset, &mut buf[start..])?;
        if n != want {
            return Err(BoltError::ShortRead {
                path: self.path().to_path_buf(),
                pgid,
                offset,
                expected: len,
                found: n as u64,
            });
        }
        Ok(())
    }

    /// Reads one page and its overflow: one `pread` for the first page, one more
    /// for the rest.
    fn read_page(&self, pgid: u64) -> Result<Page, BoltError> {
        self.check_span(pgid, 0)?;
        let mut data = Vec::new();
        let ps = u64::from(self.page_size);
        self.read_exact_into(pgid, self.page_offset(pgid), ps, &mut data)?;
        self.check_header(pgid, &data)?;
        self.complete(Page { pgid, data })
    }

    /// Reads the part of a page's overflow not read yet, in one `pread`.
    fn complete(&self, mut page: Page) -> Result<Page, BoltError> {
        let span = (u64::from(header(&page.data).overflow) + 1) * u64::from(self.page_size);
        let have = page.data.len() as u64;
        if have < span {
            let offset = self.page_offset(page.pgid) + have;
            self.read_exact_into(page.pgid, offset, span - have, &mut page.data)?;
        }
        Ok(page)
    }

    /// Reads several pages, returned in the order asked. Ids that are close in the
    /// file are fetched with one `pread`. The overflow of a page that runs past
    /// its group is left for [`Db::complete`], so a batch of large values is
    /// never in memory at once.
    fn read_pages(&self, ids: &[u64]) -> Result<Vec<Page>, BoltError> {
        let ps = u64::from(self.page_size);
        for &id in ids {
            self.check_span(id, 0)?;
        }
        let mut order: Vec<usize> = (0..ids.len()).collect();
        order.sort_unstable_by_key(|&i| ids[i]);
        let max_span = (BATCH_MAX_BYTES / ps).max(1);
        let mut out: Vec<(usize, Page)> = Vec::with_capacity(ids.len());
        let mut i = 0;
        while i < order.len() {
            let first = ids[order[i]];
            let mut j = i + 1;
            let mut last = first;
            while j < order.len() {
                let id = ids[order[j]];
                if id - last > BATCH_MAX_GAP + 1 || id - first + 1 > max_span {
                    break;
                }
                last = id;
                j += 1;
            }
            let mut group = Vec::new();
            self.read_exact_into(
                first,
                self.page_offset(first),
                (last - first + 1) * ps,
                &mut group,
            )?;
            for &idx in &order[i..j] {
                let pgid = ids[idx];
                // `first <= pgid <= last`, so the page starts inside the group.
                let at = usize::try_from((pgid - first) * ps).unwrap_or(usize::MAX);
                let head = group.get(at..).unwrap_or(&[]);
                let overflow = self.check_header(pgid, head)?;
                let span = usize::try_from((overflow + 1) * ps).unwrap_or(usize::MAX);
                let data = head[..span.min(head.len())].to_vec();
                out.push((idx, Page { pgid, data }));
            }
            i = j;
        }
        out.sort_unstable_by_key(|(idx, _)| *idx);
        Ok(out.into_iter().map(|(_, p)| p).collect())
    }

    /// Finds `key` in a bucket by descending its tree (bbolt's `Cursor.seek`).
    fn lookup(
        &self,
        root: BucketRoot<'_>,
        depth: u32,
        key: &[u8],
    ) -> Result<Option<Found>, BoltError> {
        let find_in_leaf = |data: &[u8], origin: Origin| -> Result<Option<Found>, BoltError> {
            for e in leaf_elements(self, data, origin)? {
                if e.key == key {
                    return Ok(Some(Found {
                        is_bucket: e.flags & BUCKET_LEAF != 0,
                        value: e.value.to_vec(),
                        pgid: origin.host,
                    }));
                }
            }
            Ok(None)
        };
        let mut pgid = match root {
            BucketRoot::Inline { page, host } => {
                let origin = Origin {
                    host,
                    offset: self.page_offset(host),
                };
                self.check_leaf(page, origin)?;
                return find_in_leaf(page, origin);
            }
            BucketRoot::Page(p) => p,
        };
        for _ in depth..=MAX_DEPTH {
            let page = self.read_page(pgid)?;
            let origin = Origin {
                host: pgid,
                offset: self.page_offset(pgid),
            };
            match self.kind(&page.data, origin)? {
                Kind::Leaf => return find_in_leaf(&page.data, origin),
                Kind::Branch => {
                    let children = branch_elements(self, &page.data, origin)?;
                    // The last child whose first key is <= key, else the first.
                    let next = children
                        .iter()
                        .take_while(|(k, _)| *k <= key)
                        .last()
                        .or(children.first());
                    match next {
                        Some((_, c)) => pgid = *c,
                        None => return Ok(None),
                    }
                }
            }
        }
        Err(self.too_deep(pgid))
    }

    fn too_deep(&self, pgid: u64) -> BoltError {
        BoltError::TooDeep {
            path: self.path().to_path_buf(),
            pgid,
            depth: MAX_DEPTH,
        }
    }

    /// Branch or leaf, the way bbolt's cursor decides (the leaf flag wins).
    fn kind(&self, data: &[u8], origin: Origin) -> Result<Kind, BoltError> {
        let flags = header(data).flags;
        if flags & LEAF_PAGE != 0 {
            Ok(Kind::Leaf)
        } else if flags & BRANCH_PAGE != 0 {
            Ok(Kind::Branch)
        } else {
            Err(BoltError::PageType {
                path: self.path().to_path_buf(),
                pgid: origin.host,
                offset: origin.offset,
                flags,
            })
        }
    }

    fn check_leaf(&self, data: &[u8], origin: Origin) -> Result<(), BoltError> {
        match self.kind(data, origin)? {
            Kind::Leaf => Ok(()),
            Kind::Branch => Err(BoltError::PageType {
                path: self.path().to_path_buf(),
                pgid: origin.host,
                offset: origin.offset,
                flags: header(data).flags,
            }),
        }
    }
}

/// A value found by [`Db::lookup`].
struct Found {
    is_bucket: bool,
    value: Vec<u8>,
    pgid: u64,
}

enum Kind {
    Branch,
    Leaf,
}

/// Length of a key in etcd's `key` bucket: main u64, `_`, sub u64 (a tombstone
/// adds a trailing `t`). etcd's `bytesToRev` needs all 17 bytes.
const REVISION_KEY_LEN: usize = 17;

/// Length of a tombstone's revision key, and where its `t` mark sits
/// (`mvcc.IsTombstone`).
const MARKED_REVISION_KEY_LEN: usize = 18;

/// A `key` bucket key marked as a deletion.
fn is_tombstone(key: &[u8]) -> bool {
    key.len() == MARKED_REVISION_KEY_LEN && key.get(REVISION_KEY_LEN) == Some(&b't')
}

/// The user key of a `key` bucket value (`mvccpb.KeyValue`, field 1; absent is
/// the empty key, as protobuf decoders default it).
fn user_key(value: &[u8]) -> Result<&[u8], PbError> {
    let mut key: &[u8] = &[];
    for field in pb::fields(value) {
        if let (1, pb::Value::Bytes(b)) = field? {
            key = b;
        }
    }
    Ok(key)
}

/// etcd's storage version detection (`schema.UnsafeDetectSchemaVersion`): a
/// `storageVersion` that parses as a semantic version, else `3.5.0` when the
/// backend's term is non-zero, else unknown. Returns the version and its source.
pub fn detect_storage_version(
    storage_version: Option<&str>,
    term: Option<u64>,
) -> (Option<String>, &'static str) {
    if let Some(v) = storage_version.and_then(parse_semver) {
        return (Some(v), "meta/storageVersion");
    }
    if term.is_some_and(|t| t != 0) {
        return (Some("3.5.0".to_string()), "meta/term");
    }
    (None, "none")
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
fn main_revision(key: &[u8]) -> Option<i64> {
    if key.len() < REVISION_KEY_LEN {
        return None;
    }
    let main: [u8; 8] = key.get(..8)?.try_into().ok()?;
    Some(i64::from_be_bytes(main))
}

/// The JSON etcd stores for a member (`membership.Member`).
#[derive(Deserialize)]
struct MemberJson {
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

fn element_error(db: &Db, origin: Origin, index: u64) -> BoltError {
    BoltError::ElementOutOfBounds {
        path: db.path().to_path_buf(),
        pgid: origin.host,
        offset: origin.offset,
        index,
    }
}

/// The element table of a page, checked to lie inside it.
fn element_table(db: &Db, data: &[u8], origin: Origin, width: usize) -> Result<usize, BoltError> {
    let count = usize::from(header(data).count);
    if PAGE_HEADER + count * width > data.len() {
        return Err(element_error(db, origin, count as u64));
    }
    Ok(count)
}

/// The slice `[start, start + len)` of `data`, if it lies inside.
fn span(data: &[u8], start: u64, len: u64) -> Option<&[u8]> {
    let end = start.checked_add(len)?;
    data.get(usize::try_from(start).ok()?..usize::try_from(end).ok()?)
}

/// The elements of a leaf page, every key and value checked to lie inside it.
fn leaf_elements<'a>(
    db: &Db,
    data: &'a [u8],
    origin: Origin,
) -> Result<Vec<LeafElem<'a>>, BoltError> {
    let count = element_table(db, data, origin, LEAF_ELEMENT)?;
    let mut out = Vec::with_capacity(count);
    for i in 0..count {
        let at = PAGE_HEADER + i * LEAF_ELEMENT;
        let pos = u64::from(le_u32(data, at + 4));
        let ksize = u64::from(le_u32(data, at + 8));
        let vsize = u64::from(le_u32(data, at + 12));
        let kstart = at as u64 + pos;
        let key = span(data, kstart, ksize);
        let value = span(data, kstart + ksize, vsize);
        let (Some(key), Some(value)) = (key, value) else {
            return Err(element_error(db, origin, i as u64));
        };
        out.push(LeafElem {
            flags: le_u32(data, at),
            key,
            value,
        });
    }
    Ok(out)
}

/// The `(first key, child pgid)` elements of a branch page.
fn branch_elements<'a>(
    db: &Db,
    data: &'a [u8],
    origin: Origin,
) -> Result<Vec<(&'a [u8], u64)>, BoltError> {
    let count = element_table(db, data, origin, BRANCH_ELEMENT)?;
    let mut out = Vec::with_capacity(count);
    for i in 0..count {
        let at = PAGE_HEADER + i * BRANCH_ELEMENT;
        let pos = u64::from(le_u32(data, at));
        let ksize = u64::from(le_u32(data, at + 4));
        let key = span(data, at as u64 + pos, ksize)
            .ok_or_else(|| element_error(db, origin, i as u64))?;
        out.push((key, le_u64(data, at + 8)));
    }
    Ok(out)
}

/// The callback of a walk: sees each entry of a bucket in key order and may walk
/// into nested buckets through the walker it is given.
type EntryFn<'f, 'd> = dyn FnMut(&mut Walker<'d>, Entry<'_>) -> Result<(), BoltError> + 'f;

/// One traversal: remembers the pages it read, so a page reached twice is
/// reported instead of looping, and counts them.
struct Walker<'d> {
    db: &'d Db,
    seen: PageSet,
    /// Pages (with overflow) visited.
    pages: u64,
}

impl<'d> Walker<'d> {
    fn new(db: &'d Db) -> Self {
        Walker {
            db,
            seen: PageSet::new(db.page_limit()),
            pages: 0,
        }
    }

    /// Records a page and its overflow as visited.
    fn mark(&mut self, page: &Page) -> Result<(), BoltError> {
        let overflow = u64::from(header(&page.data).overflow);
        for id in page.pgid..=page.pgid.saturating_add(overflow) {
            match self.seen.insert(id) {
                Some(true) => {}
                Some(false) => {
                    return Err(BoltError::PageReused {
                        path: self.db.path().to_path_buf(),
                        pgid: id,
                        offset: self.db.page_offset(id),
                    })
                }
                None => return Err(self.db.out_of_bounds(page.pgid, overflow)),
            }
        }
        self.pages += overflow + 1;
        Ok(())
    }

    /// Calls `f` for each entry of the bucket at `root`, in key order.
    fn bucket(
        &mut self,
        root: BucketRoot<'_>,
        depth: u32,
        f: &mut EntryFn<'_, 'd>,
    ) -> Result<(), BoltError> {
        match root {
            BucketRoot::Page(pgid) => {
                let page = self.db.read_page(pgid)?;
                self.mark(&page)?;
                self.node(&page, depth, f)
            }
            BucketRoot::Inline { page, host } => {
                let origin = Origin {
                    host,
                    offset: self.db.page_offset(host),
                };
                if depth > MAX_DEPTH {
                    return Err(self.db.too_deep(host));
                }
                self.db.check_leaf(page, origin)?;
                self.leaf(page, origin, depth, f)
            }
        }
    }

    fn leaf(
        &mut self,
        data: &[u8],
        origin: Origin,
        depth: u32,
        f: &mut EntryFn<'_, 'd>,
    ) -> Result<(), BoltError> {
        for e in leaf_elements(self.db, data, origin)? {
            f(
                self,
                Entry {
                    key: e.key,
                    value: e.value,
                    is_bucket: e.flags & BUCKET_LEAF != 0,
                    pgid: origin.host,
                    depth,
                },
            )?;
        }
        Ok(())
    }

    /// Visits a page already read and marked, and the subtree below it.
    fn node(&mut self, page: &Page, depth: u32, f: &mut EntryFn<'_, 'd>) -> Result<(), BoltError> {
        if depth > MAX_DEPTH {
            return Err(self.db.too_deep(page.pgid));
        }
        let origin = Origin {
            host: page.pgid,
            offset: self.db.page_offset(page.pgid),
        };
        match self.db.kind(&page.data, origin)? {
            Kind::Leaf => self.leaf(&page.data, origin, depth, f),
            Kind::Branch => {
                let children: Vec<u64> = branch_elements(self.db, &page.data, origin)?
                    .into_iter()
                    .map(|(_, c)| c)
                    .collect();
                for chunk in children.chunks(BATCH_CHILDREN) {
                    let pages = self.db.read_pages(chunk)?;
                    for p in &pages {
                        self.mark(p)?;
                    }
                    for p in pages {
                        let p = self.db.complete(p)?;
                        self.node(&p, depth + 1, f)?;
                    }
                }
                Ok(())
            }
        }
    }
}

/// Key/value pairs copied out of a bucket.
type Records = Vec<(Vec<u8>, Vec<u8>)>;

/// Walks a bucket and every bucket nested in it, so all their pages are counted;
/// with `collect`, keeps the bucket's own top-level records.
fn visit_all(
    w: &mut Walker<'_>,
    root: BucketRoot<'_>,
    depth: u32,
    mut collect: Option<&mut Records>,
) -> Result<(), BoltError> {
    w.bucket(root, depth, &mut |w, e| {
        if e.is_bucket {
            let child = w.db.bucket_root(e.key, e.value, e.pgid)?;
            visit_all(w, child, e.depth + 1, None)?;
        } else if let Some(c) = collect.as_mut() {
            c.push((e.key.to_vec(), e.value.to_vec()));
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    type Bucket = BTreeMap<Vec<u8>, Vec<u8>>;
    type Model = BTreeMap<Vec<u8>, Bucket>;

    /// Writes bbolt pages the way bbolt lays them out, enough to test the reader.
    struct Builder {
        ps: usize,
        data: Vec<u8>,
    }

    fn put_u32(b: &mut [u8], at: usize, v: u32) {
        b[at..at + 4].copy_from_slice(&v.to_le_bytes());
    }

    fn put_u64(b: &mut [u8], at: usize, v: u64) {
        b[at..at + 8].copy_from_slice(&v.to_le_bytes());
    }

    /// A leaf page image (header id 0, no overflow yet).
    fn leaf_image(elems: &[(bool, &[u8], &[u8])]) -> Vec<u8> {
        let mut img = vec![0u8; PAGE_HEADER + elems.len() * LEAF_ELEMENT];
        img[8..10].copy_from_slice(&LEAF_PAGE.to_le_bytes());
        img[10..12].copy_from_slice(&(elems.len() as u16).to_le_bytes());
        for (i, (bucket, k, v)) in elems.iter().enumerate() {
            let at = PAGE_HEADER + i * LEAF_ELEMENT;
            let pos = img.len() - at;
            put_u32(&mut img, at, u32::from(*bucket));
            put_u32(&mut img, at + 4, pos as u32);
            put_u32(&mut img, at + 8, k.len() as u32);
            put_u32(&mut img, at + 12, v.len() as u32);
            img.extend_from_slice(k);
            img.extend_from_slice(v);
        }
        img
    }

    fn inline_bucket(elems: &[(bool, &[u8], &[u8])]) -> Vec<u8> {
        let mut v = vec![0u8; BUCKET_HEADER];
        v.extend(leaf_image(elems));
        v
    }

    fn bucket_value(root: u64) -> Vec<u8> {
        let mut v = vec![0u8; BUCKET_HEADER];
        put_u64(&mut v, 0, root);
        v
    }

    impl Builder {
        fn new(ps: usize) -> Self {
            Builder {
                ps,
                data: vec![0; 2 * ps],
            }
        }

        fn next_pgid(&self) -> u64 {
            (self.data.len() / self.ps) as u64
        }

        /// Appends a page image, spanning overflow pages when it is large.
        fn alloc(&mut self, mut img: Vec<u8>) -> u64 {
            let pgid = self.next_pgid();
            let pages = img.len().div_ceil(self.ps).max(1);
            img.resize(pages * self.ps, 0);
            put_u64(&mut img, 0, pgid);
            put_u32(&mut img, 12, (pages - 1) as u32);
            self.data.extend(img);
            pgid
        }

        /// Appends unused pages (what freed pages look like).
        fn junk(&mut self, pages: usize) {
            self.data.extend(vec![0xAB; pages * self.ps]);
        }

        fn leaf(&mut self, elems: &[(bool, &[u8], &[u8])]) -> u64 {
            self.alloc(leaf_image(elems))
        }

        fn branch(&mut self, children: &[(&[u8], u64)]) -> u64 {
            let mut img = vec![0u8; PAGE_HEADER + children.len() * BRANCH_ELEMENT];
            img[8..10].copy_from_slice(&BRANCH_PAGE.to_le_bytes());
            img[10..12].copy_from_slice(&(children.len() as u16).to_le_bytes());
            for (i, (k, pgid)) in children.iter().enumerate() {
                let at = PAGE_HEADER + i * BRANCH_ELEMENT;
                let pos = img.len() - at;
                put_u32(&mut img, at, pos as u32);
                put_u32(&mut img, at + 4, k.len() as u32);
                put_u64(&mut img, at + 8, *pgid);
                img.extend_from_slice(k);
            }
            self.alloc(img)
        }

        fn meta(&mut self, slot: u64, root: u64, high_water: u64, txid: u64) {
            let at = slot as usize * self.ps;
            let p = &mut self.data[at..at + self.ps];
            p.fill(0);
            put_u64(p, 0, slot);
            p[8..10].copy_from_slice(&4u16.to_le_bytes());
            let m = &mut p[PAGE_HEADER..PAGE_HEADER + META_SIZE];
            put_u32(m, 0, MAGIC);
            put_u32(m, 4, VERSION);
            put_u32(m, 8, self.ps as u32);
            put_u64(m, 16, root);
            put_u64(m, 32, NO_FREELIST);
            put_u64(m, 40, high_water);
            put_u64(m, 48, txid);
            let sum = fnv1a64(&m[..META_CHECKSUMMED]);
            put_u64(m, META_CHECKSUMMED, sum);
        }

        /// Writes both metas (meta0 one transaction older) and returns the file.
        fn finish(mut self, root: u64, txid: u64) -> Vec<u8> {
            let hw = self.next_pgid();
            self.meta(txid % 2, root, hw, txid);
            self.meta((txid + 1) % 2, root, hw, txid - 1);
            self.data
        }
    }

    /// Lays out a bucket as pages: leaves of `per_leaf` entries, in reverse page
    /// order when `reverse`, with junk pages between them, under branches.
    fn layout_bucket(
        b: &mut Builder,
        entries: &Bucket,
        per_leaf: usize,
        reverse: bool,
        gap: usize,
    ) -> u64 {
        let items: Vec<(&Vec<u8>, &Vec<u8>)> = entries.iter().collect();
        let chunks: Vec<_> = items.chunks(per_leaf.max(1)).collect();
        let mut ids = vec![0u64; chunks.len()];
        let order: Vec<usize> = if reverse {
            (0..chunks.len()).rev().collect()
        } else {
            (0..chunks.len()).collect()
        };
        for i in order {
            let elems: Vec<(bool, &[u8], &[u8])> = chunks[i]
                .iter()
                .map(|(k, v)| (false, k.as_slice(), v.as_slice()))
                .collect();
            ids[i] = b.leaf(&elems);
            b.junk(gap);
        }
        let mut level: Vec<(Vec<u8>, u64)> = chunks
            .iter()
            .zip(&ids)
            .map(|(c, id)| {
                (
                    c.first().map(|(k, _)| (*k).clone()).unwrap_or_default(),
                    *id,
                )
            })
            .collect();
        if level.is_empty() {
            return b.leaf(&[]);
        }
        while level.len() > 1 {
            level = level
                .chunks(3)
                .map(|c| {
                    let children: Vec<(&[u8], u64)> =
                        c.iter().map(|(k, id)| (k.as_slice(), *id)).collect();
                    (c[0].0.clone(), b.branch(&children))
                })
                .collect();
        }
        level[0].1
    }

    /// Builds a whole file from a model: buckets of at most `inline_max` entries
    /// are inline, the others laid out by `layout_bucket`.
    fn build(model: &Model, ps: usize, per_leaf: usize, reverse: bool, gap: usize) -> Vec<u8> {
        let mut b = Builder::new(ps);
        let mut values = Vec::new();
        for (name, entries) in model {
            let v = if entries.len() <= 2 {
                let elems: Vec<(bool, &[u8], &[u8])> = entries
                    .iter()
                    .map(|(k, v)| (false, k.as_slice(), v.as_slice()))
                    .collect();
                inline_bucket(&elems)
            } else {
                bucket_value(layout_bucket(&mut b, entries, per_leaf, reverse, gap))
            };
            values.push((name.as_slice(), v));
        }
        let elems: Vec<(bool, &[u8], &[u8])> = values
            .iter()
            .map(|(k, v)| (true, *k, v.as_slice()))
            .collect();
        let root = b.leaf(&elems);
        b.finish(root, 7)
    }

    /// What etcdutl computes, from the model.
    fn model_hash(model: &Model) -> (u32, u64) {
        let mut h = 0;
        let mut n = 0;
        for (name, entries) in model {
            h = crc32c::crc32c_append(h, name);
            for (k, v) in entries {
                h = crc32c::crc32c_append(h, k);
                h = crc32c::crc32c_append(h, v);
                n += 1;
            }
        }
        (h, n)
    }

    fn rev_key(main: u64, sub: u64, tombstone: bool) -> Vec<u8> {
        let mut k = main.to_be_bytes().to_vec();
        k.push(b'_');
        k.extend(sub.to_be_bytes());
        if tombstone {
            k.push(b't');
        }
        k
    }

    fn alarm_key(member: u64, alarm: u64) -> Vec<u8> {
        // Field 1 varint, field 2 varint.
        let mut k = vec![0x08];
        let mut v = member;
        while v >= 0x80 {
            k.push((v as u8) | 0x80);
            v >>= 7;
        }
        k.push(v as u8);
        k.extend([0x10, alarm as u8]);
        k
    }

    fn etcd_model() -> Model {
        let mut m = Model::new();
        let bucket = |kvs: Vec<(&[u8], Vec<u8>)>| -> Bucket {
            kvs.into_iter().map(|(k, v)| (k.to_vec(), v)).collect()
        };
        m.insert(
            b"meta".to_vec(),
            bucket(vec![
                (b"consistent_index", 1234u64.to_be_bytes().to_vec()),
                (b"term", 3u64.to_be_bytes().to_vec()),
                (
                    b"confState",
                    br#"{"voters":[10276657743932975437],"auto_leave":false}"#.to_vec(),
                ),
            ]),
        );
        m.insert(
            b"members".to_vec(),
            bucket(vec![
                (
                    b"8e9e05c52164694d",
                    br#"{"id":10276657743932975437,"peerURLs":["http://localhost:2380"],"name":"default","clientURLs":["http://localhost:2379"]}"#.to_vec(),
                ),
                (
                    b"a1",
                    br#"{"id":161,"peerURLs":["http://b:2380"],"isLearner":true}"#.to_vec(),
                ),
            ]),
        );
        m.insert(
            b"members_removed".to_vec(),
            bucket(vec![(b"ff", b"removed".to_vec())]),
        );
        m.insert(
            b"cluster".to_vec(),
            bucket(vec![(b"clusterVersion", b"3.5.0".to_vec())]),
        );
        m.insert(
            b"alarm".to_vec(),
            bucket(vec![
                (&alarm_key(0x8e9e05c52164694d, 1), vec![]),
                (&alarm_key(5, 2), vec![]),
            ]),
        );
        m.insert(b"auth".to_vec(), Bucket::new());
        let mut key = Bucket::new();
        for main in 2..300u64 {
            key.insert(
                rev_key(main, 0, main % 50 == 0),
                format!("value-{main}").into_bytes(),
            );
        }
        // A value larger than a page: an overflow leaf.
        key.insert(rev_key(300, 0, false), vec![0x5A; 9000]);
        m.insert(b"key".to_vec(), key);
        m
    }

    fn write(dir: &tempfile::TempDir, bytes: &[u8]) -> PathBuf {
        let p = dir.path().join("db");
        std::fs::write(&p, bytes).unwrap();
        p
    }

    fn all_kvs(db: &Db, bucket: &[u8]) -> Vec<(Vec<u8>, Vec<u8>)> {
        let mut out = Vec::new();
        assert!(db
            .for_each_kv(bucket, |k, v| out.push((k.to_vec(), v.to_vec())))
            .unwrap());
        out
    }

    /// An `mvccpb.KeyValue` with only its key (field 1) and value (field 5).
    fn key_value(key: &[u8], value: &[u8]) -> Vec<u8> {
        let mut out = vec![0x0a, key.len() as u8];
        out.extend(key);
        out.extend([0x2a, value.len() as u8]);
        out.extend(value);
        out
    }

    /// A 3.6-shaped db: `storageVersion` in `meta`, `key` values as KeyValues.
    fn v36_model(storage_version: Option<&[u8]>) -> Model {
        let mut m = Model::new();
        let mut meta = Bucket::new();
        meta.insert(b"consistent_index".to_vec(), 9u64.to_be_bytes().to_vec());
        meta.insert(b"term".to_vec(), 2u64.to_be_bytes().to_vec());
        if let Some(v) = storage_version {
            meta.insert(b"storageVersion".to_vec(), v.to_vec());
        }
        m.insert(b"meta".to_vec(), meta);
        let mut key = Bucket::new();
        for (main, k, tombstone) in [
            (2, &b"a"[..], false),
            (3, b"b", false),
            (4, b"a", true),
            (5, b"c", false),
            (6, b"b", false),
            (7, b"", false),
            (8, b"", true),
        ] {
            key.insert(rev_key(main, 0, tombstone), key_value(k, b"v"));
        }
        m.insert(b"key".to_vec(), key);
        m
    }

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
        assert_eq!(s.storage_version_source, "meta/storageVersion");

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
            (Some("3.5.0"), "meta/term")
        );

        // A storageVersion etcd cannot parse falls back to the same detection.
        let model = v36_model(Some(b"3.6"));
        let db = Db::open(&write(&dir, &build(&model, 4096, 3, false, 0))).unwrap();
        assert_eq!(db.kv_hash().unwrap().version, None);
        assert_eq!(db.summary().unwrap().storage_version_source, "meta/term");
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
            (None, "none")
        );
        assert_eq!(
            detect_storage_version(None, Some(4)),
            (Some("3.5.0".into()), "meta/term")
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
                BackendMember {
                    id: 0x8e9e05c52164694d,
                    name: "default".into(),
                    peer_urls: vec!["http://localhost:2380".into()],
                    client_urls: vec!["http://localhost:2379".into()],
                    is_learner: false,
                },
                BackendMember {
                    id: 161,
                    name: String::new(),
                    peer_urls: vec!["http://b:2380".into()],
                    client_urls: vec![],
                    is_learner: true,
                },
            ]
        );
        assert_eq!(s.removed_members, vec![0xff]);
        assert_eq!(s.cluster_version.as_deref(), Some("3.5.0"));
        // alarm keys sort by their protobuf bytes: member 5 first.
        assert_eq!(
            s.alarms,
            vec![
                BackendAlarm {
                    member_id: 5,
                    alarm: "CORRUPT".into()
                },
                BackendAlarm {
                    member_id: 0x8e9e05c52164694d,
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
    fn scattered_layout_and_free_pages() {
        let model = etcd_model();
        let bytes = build(&model, 4096, 7, true, 2);
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(&write(&dir, &bytes)).unwrap();
        let (hash, total) = model_hash(&model);
        let h = db.kv_hash().unwrap();
        assert_eq!((h.hash, h.total_key, h.revision), (hash, total, 300));
        let s = db.summary().unwrap();
        // Two junk pages follow every leaf of a bucket that is not inline.
        let leaves: u64 = model
            .values()
            .filter(|b| b.len() > 2)
            .map(|b| b.len().div_ceil(7) as u64)
            .sum();
        assert_eq!(s.logical_size - s.size_in_use.unwrap(), leaves * 2 * 4096);
        let key: Vec<_> = model[&b"key".to_vec()].clone().into_iter().collect();
        assert_eq!(all_kvs(&db, b"key"), key);
    }

    #[test]
    fn other_page_sizes() {
        let model = etcd_model();
        for ps in [1024usize, 8192, 65536] {
            let bytes = build(&model, ps, 30, false, 1);
            let dir = tempfile::tempdir().unwrap();
            let db = Db::open(&write(&dir, &bytes)).unwrap();
            assert_eq!(db.page_size() as usize, ps);
            assert_eq!(db.kv_hash().unwrap().hash, model_hash(&model).0);
        }
    }

    #[test]
    fn snapshot_trailer_is_ignored() {
        let model = etcd_model();
        let mut bytes = build(&model, 4096, 20, false, 0);
        let logical = bytes.len() as u64;
        bytes.extend([0x11; 32]);
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(&write(&dir, &bytes)).unwrap();
        let s = db.summary().unwrap();
        assert_eq!((s.file_size, s.logical_size), (logical + 32, logical));
        assert_eq!(db.kv_hash().unwrap().total_size, logical);
    }

    fn corrupt_meta(bytes: &mut [u8], slot: usize, ps: usize) {
        bytes[slot * ps + PAGE_HEADER + 48] ^= 0xFF; // txid, under the checksum
    }

    #[test]
    fn falls_back_to_the_other_meta() {
        let bytes = build(&etcd_model(), 4096, 20, false, 0);
        let dir = tempfile::tempdir().unwrap();

        // meta1 holds txid 7; break it and meta0 (txid 6) is used.
        let mut b = bytes.clone();
        corrupt_meta(&mut b, 1, 4096);
        let db = Db::open(&write(&dir, &b)).unwrap();
        assert_eq!((db.txid(), db.meta_page()), (6, 0));
        assert!(matches!(
            db.damaged_meta(),
            Some((1, MetaProblem::Checksum { offset: 4096, .. }))
        ));

        // Break meta0: page size comes from meta1 at 4096.
        let mut b = bytes.clone();
        b[..PAGE_HEADER + META_SIZE].fill(0);
        let db = Db::open(&write(&dir, &b)).unwrap();
        assert_eq!((db.txid(), db.meta_page(), db.page_size()), (7, 1, 4096));
        assert!(matches!(
            db.damaged_meta(),
            Some((0, MetaProblem::Magic { found: 0, .. }))
        ));
        assert!(db.kv_hash().is_ok());
    }

    #[test]
    fn meta1_is_found_at_another_page_size_when_meta0_is_broken() {
        let bytes = build(&etcd_model(), 16384, 20, false, 0);
        let mut b = bytes.clone();
        b[PAGE_HEADER] ^= 1; // magic
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(&write(&dir, &b)).unwrap();
        assert_eq!((db.page_size(), db.meta_page()), (16384, 1));
        assert_eq!(db.kv_hash().unwrap().hash, model_hash(&etcd_model()).0);
    }

    #[test]
    fn both_metas_broken_is_no_valid_meta() {
        let mut b = build(&etcd_model(), 4096, 20, false, 0);
        corrupt_meta(&mut b, 0, 4096);
        b[4096 + PAGE_HEADER + 4] = 3; // version
        let dir = tempfile::tempdir().unwrap();
        let p = write(&dir, &b);
        match Db::open(&p) {
            Err(BoltError::NoValidMeta { path, meta0, meta1 }) => {
                assert_eq!(path, p);
                assert!(matches!(meta0, MetaProblem::Checksum { offset: 0, .. }));
                assert!(matches!(meta1, MetaProblem::Version { found: 3, .. }));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn zero_checksum_is_refused() {
        let mut b = build(&etcd_model(), 4096, 20, false, 0);
        for slot in 0..2 {
            let at = slot * 4096 + PAGE_HEADER + META_CHECKSUMMED;
            b[at..at + 8].fill(0);
        }
        let dir = tempfile::tempdir().unwrap();
        assert!(matches!(
            Db::open(&write(&dir, &b)),
            Err(BoltError::NoValidMeta { .. })
        ));
    }

    #[test]
    fn garbage_files() {
        let dir = tempfile::tempdir().unwrap();
        for bytes in [
            vec![],
            vec![0u8; 10],
            vec![0u8; 8192],
            b"not a database at all".repeat(1000),
        ] {
            let e = Db::open(&write(&dir, &bytes)).unwrap_err();
            assert!(matches!(e, BoltError::NoValidMeta { .. }), "{e}");
            assert!(e.to_string().contains("no valid bbolt meta page"), "{e}");
        }
        let e = Db::open(&dir.path().join("missing")).unwrap_err();
        assert!(matches!(e, BoltError::Io(ref io) if io.op == "open"), "{e}");
    }

    /// A file with one bucket `b` whose root is `bucket_root`, built by `f`.
    fn custom(f: impl FnOnce(&mut Builder) -> u64) -> Vec<u8> {
        let mut b = Builder::new(4096);
        let root_of_b = f(&mut b);
        let v = bucket_value(root_of_b);
        let root = b.leaf(&[(true, b"b", &v)]);
        b.finish(root, 3)
    }

    fn walk_errors(bytes: &[u8]) -> (BoltError, BoltError) {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(&write(&dir, bytes)).unwrap();
        (db.summary().unwrap_err(), db.kv_hash().unwrap_err())
    }

    #[test]
    fn a_shared_page_is_reported() {
        let bytes = custom(|b| {
            let leaf = b.leaf(&[(false, b"k", b"v")]);
            b.branch(&[(b"a", leaf), (b"k", leaf)])
        });
        let (s, h) = walk_errors(&bytes);
        assert!(
            matches!(
                s,
                BoltError::PageReused {
                    pgid: 2,
                    offset: 8192,
                    ..
                }
            ),
            "{s}"
        );
        assert!(matches!(h, BoltError::PageReused { pgid: 2, .. }), "{h}");
    }

    #[test]
    fn a_cycle_is_reported() {
        // A branch whose child is itself: page 2 points to page 2.
        let bytes = custom(|b| b.branch(&[(b"a", 2)]));
        let (s, h) = walk_errors(&bytes);
        assert!(matches!(s, BoltError::PageReused { pgid: 2, .. }), "{s}");
        assert!(matches!(h, BoltError::PageReused { pgid: 2, .. }), "{h}");
        // Seeking has no visited set; the depth bound stops it.
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(&write(&dir, &bytes)).unwrap();
        assert!(matches!(db.get(b"b", b"a"), Err(BoltError::TooDeep { .. })));
    }

    #[test]
    fn a_bucket_cycle_is_reported() {
        // A nested bucket whose root is the leaf holding it (page 2), and one
        // whose root is the root leaf of the whole tree (page 3): the page walk
        // stops at the page seen twice instead of going round. The hash, like
        // bbolt's ForEach, does not descend into nested buckets, so it ends too.
        for target in [2u64, 3] {
            let bytes = custom(|b| b.leaf(&[(true, b"n", &bucket_value(target))]));
            let dir = tempfile::tempdir().unwrap();
            let db = Db::open(&write(&dir, &bytes)).unwrap();
            let s = db.summary().unwrap_err();
            assert!(
                matches!(s, BoltError::PageReused { pgid, .. } if pgid == target),
                "{s}"
            );
            assert_eq!(db.kv_hash().unwrap().total_key, 1);
        }
    }

    #[test]
    fn a_deep_chain_is_refused_before_the_stack_suffers() {
        let bytes = custom(|b| {
            let mut child = b.leaf(&[(false, b"k", b"v")]);
            for _ in 0..MAX_DEPTH + 5 {
                child = b.branch(&[(b"k", child)]);
            }
            child
        });
        let (s, h) = walk_errors(&bytes);
        assert!(
            matches!(
                s,
                BoltError::TooDeep {
                    depth: MAX_DEPTH,
                    ..
                }
            ),
            "{s}"
        );
        assert!(matches!(h, BoltError::TooDeep { .. }), "{h}");
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(&write(&dir, &bytes)).unwrap();
        assert!(matches!(db.get(b"b", b"k"), Err(BoltError::TooDeep { .. })));

        // Just inside the limit still reads.
        let bytes = custom(|b| {
            let mut child = b.leaf(&[(false, b"k", b"v")]);
            for _ in 0..MAX_DEPTH - 2 {
                child = b.branch(&[(b"k", child)]);
            }
            child
        });
        let db = Db::open(&write(&dir, &bytes)).unwrap();
        assert_eq!(db.get(b"b", b"k").unwrap(), Some(b"v".to_vec()));
        assert_eq!(db.kv_hash().unwrap().total_key, 1);
    }

    #[test]
    fn out_of_bounds_pages_are_reported() {
        for target in [0u64, 1, 99, u64::MAX] {
            let bytes = custom(|b| b.branch(&[(b"a", target)]));
            let (s, _) = walk_errors(&bytes);
            assert!(
                matches!(s, BoltError::PageOutOfBounds { pgid, .. } if pgid == target),
                "{s}"
            );
        }
        // An overflow count that runs past the high-water mark.
        let mut bytes = custom(|b| b.leaf(&[(false, b"k", b"v")]));
        put_u32(&mut bytes[2 * 4096..], 12, 5);
        let (s, _) = walk_errors(&bytes);
        assert!(
            matches!(
                s,
                BoltError::PageOutOfBounds {
                    pgid: 2,
                    overflow: 5,
                    ..
                }
            ),
            "{s}"
        );
        // An absurd overflow count is refused before anything is allocated.
        put_u32(&mut bytes[2 * 4096..], 12, u32::MAX);
        let (s, _) = walk_errors(&bytes);
        assert!(matches!(s, BoltError::PageTooLarge { pgid: 2, .. }), "{s}");
    }

    #[test]
    fn the_file_shorter_than_the_high_water_mark() {
        let bytes = build(&etcd_model(), 4096, 20, false, 0);
        let cut = &bytes[..bytes.len() - 4096];
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(&write(&dir, cut)).unwrap();
        assert_eq!(db.logical_size(), bytes.len() as u64);
        // The root leaf is the last page: gone.
        let e = db.summary().unwrap_err();
        assert!(matches!(e, BoltError::PageOutOfBounds { .. }), "{e}");
    }

    #[test]
    fn bad_pages_and_elements_are_reported() {
        // Wrong id in the header.
        let mut bytes = custom(|b| b.leaf(&[(false, b"k", b"v")]));
        put_u64(&mut bytes[2 * 4096..], 0, 77);
        let (s, _) = walk_errors(&bytes);
        assert!(
            matches!(
                s,
                BoltError::PageIdMismatch {
                    pgid: 2,
                    found: 77,
                    ..
                }
            ),
            "{s}"
        );

        // Neither branch nor leaf.
        let mut bytes = custom(|b| b.leaf(&[(false, b"k", b"v")]));
        bytes[2 * 4096 + 8] = 0x10;
        let (s, _) = walk_errors(&bytes);
        assert!(
            matches!(
                s,
                BoltError::PageType {
                    pgid: 2,
                    flags: 0x10,
                    ..
                }
            ),
            "{s}"
        );

        // A value running off the page.
        let mut bytes = custom(|b| b.leaf(&[(false, b"k", b"v")]));
        put_u32(&mut bytes[2 * 4096..], PAGE_HEADER + 12, 5000);
        let (s, h) = walk_errors(&bytes);
        assert!(
            matches!(
                s,
                BoltError::ElementOutOfBounds {
                    pgid: 2,
                    index: 0,
                    ..
                }
            ),
            "{s}"
        );
        assert!(matches!(h, BoltError::ElementOutOfBounds { .. }), "{h}");

        // More elements than fit.
        let mut bytes = custom(|b| b.leaf(&[(false, b"k", b"v")]));
        bytes[2 * 4096 + 10..2 * 4096 + 12].copy_from_slice(&u16::MAX.to_le_bytes());
        let (s, _) = walk_errors(&bytes);
        assert!(
            matches!(s, BoltError::ElementOutOfBounds { index: 65535, .. }),
            "{s}"
        );

        // A bucket value too short for its header.
        let mut b = Builder::new(4096);
        let root = b.leaf(&[(true, b"b", b"short")]);
        let bytes = b.finish(root, 3);
        let (s, h) = walk_errors(&bytes);
        assert!(matches!(s, BoltError::BadBucketValue { len: 5, .. }), "{s}");
        assert!(matches!(h, BoltError::BadBucketValue { .. }), "{h}");
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
    fn batched_reads_match_single_reads() {
        // 200 one-entry leaves, some with overflow, in reverse page order with
        // gaps: exercises coalescing, gaps, chunking and overflow tails.
        let mut entries = Bucket::new();
        for i in 0..200u64 {
            let size = if i % 37 == 0 { 10_000 } else { 10 };
            entries.insert(rev_key(i + 1, 0, false), vec![i as u8; size]);
        }
        let mut model = Model::new();
        model.insert(b"key".to_vec(), entries.clone());
        for gap in [0, 1, 5] {
            for reverse in [false, true] {
                let bytes = build(&model, 4096, 1, reverse, gap);
                let dir = tempfile::tempdir().unwrap();
                let db = Db::open(&write(&dir, &bytes)).unwrap();
                let kvs = all_kvs(&db, b"key");
                assert_eq!(kvs, entries.clone().into_iter().collect::<Vec<_>>());
                assert_eq!(db.kv_hash().unwrap().hash, model_hash(&model).0);
                for (k, v) in entries.iter().step_by(13) {
                    assert_eq!(db.get(b"key", k).unwrap().as_ref(), Some(v));
                }
            }
        }
    }

    /// A `member/snap/db` written by etcd 3.5.1; see the README next to it.
    fn fixture() -> Vec<u8> {
        let p = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/bbolt/etcd-3.5.1-nospace.db");
        std::fs::read(p).unwrap()
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
        assert_eq!(s.members[0].id, 0x4a37412995744e25);
        assert_eq!(s.members[0].name, "fixture");
        assert_eq!(
            s.alarms,
            vec![BackendAlarm {
                member_id: 0x4a37412995744e25,
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

    #[test]
    fn real_etcd_db_with_broken_metas() {
        let dir = tempfile::tempdir().unwrap();
        let mut b = fixture();
        corrupt_meta(&mut b, 0, 4096);
        let db = Db::open(&write(&dir, &b)).unwrap();
        assert_eq!((db.txid(), db.meta_page()), (13, 1));
        assert_eq!(db.kv_hash().unwrap().hash, 1585619019);
        corrupt_meta(&mut b, 1, 4096);
        assert!(matches!(
            Db::open(&write(&dir, &b)),
            Err(BoltError::NoValidMeta { .. })
        ));
    }

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

    /// Opens and walks whatever `bytes` are; must never panic.
    fn exercise(bytes: &[u8]) {
        let dir = tempfile::tempdir().unwrap();
        let p = write(&dir, bytes);
        if let Ok(db) = Db::open(&p) {
            let _ = db.summary();
            let _ = db.kv_hash();
            let _ = db.buckets();
            let _ = db.for_each_kv(b"key", |_, _| {});
            let _ = db.get(b"meta", b"consistent_index");
            let _ = db.get(b"key", &rev_key(5, 0, false));
        }
    }

    fn small_model() -> impl Strategy<Value = Model> {
        let key = proptest::collection::vec(any::<u8>(), 0..24);
        let value = proptest::collection::vec(any::<u8>(), 0..64);
        let bucket = proptest::collection::btree_map(key, value, 0..40);
        let name = proptest::collection::vec(any::<u8>(), 1..8);
        proptest::collection::btree_map(name, bucket, 0..5)
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
