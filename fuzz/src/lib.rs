//! Helpers shared by the fuzz targets: a scratch directory (the readers take
//! paths, open `O_RDONLY | O_NOFOLLOW` and `pread`; the targets feed them real
//! files on tmpfs), the structure-aware WAL model whose frames carry valid
//! CRCs so that mutations reach the record decoders, and [`targets`]: the body
//! of every target, one function each, which `fuzz_targets/*.rs` call and which
//! the main test suite replays the committed corpus through
//! (`tests/it/fuzz_corpus.rs` includes this file as a module, so it may use
//! only what the main crate's dependencies and dev-dependencies provide).

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use arbitrary::Arbitrary;

/// A scratch directory of this thread, on tmpfs when there is one. Per
/// thread, not per process: the main test suite replays targets from more
/// than one test at once, and two threads clearing one directory race
/// (`fresh_dir` would find a file the other thread just removed).
pub fn scratch() -> &'static Path {
    thread_local! {
        static DIR: &'static Path = {
            let base = std::env::var_os("FUZZ_SCRATCH")
                .map(PathBuf::from)
                .unwrap_or_else(|| {
                    let shm = Path::new("/dev/shm");
                    if shm.is_dir() {
                        shm.to_path_buf()
                    } else {
                        std::env::temp_dir()
                    }
                });
            static NEXT: AtomicU64 = AtomicU64::new(0);
            let dir = base.join(format!(
                "ema-fuzz-{}-{}",
                std::process::id(),
                NEXT.fetch_add(1, Ordering::Relaxed)
            ));
            let _ = fs::remove_dir_all(&dir);
            fs::create_dir_all(&dir).expect("scratch dir");
            Box::leak(dir.into_boxed_path())
        };
    }
    DIR.with(|d| *d)
}

/// Makes `dir` an empty directory: the files of the previous input go, the
/// directory stays (cheaper than removing and creating it every run).
pub fn fresh_dir(dir: &Path) {
    match fs::read_dir(dir) {
        Ok(entries) => {
            for e in entries.flatten() {
                let p = e.path();
                if e.file_type().is_ok_and(|t| t.is_dir()) {
                    fs::remove_dir_all(&p).expect("clear scratch dir");
                } else {
                    fs::remove_file(&p).expect("clear scratch file");
                }
            }
        }
        Err(_) => fs::create_dir_all(dir).expect("create scratch dir"),
    }
}

/// Writes `bytes` to `dir/name` and returns the path.
pub fn put(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let p = dir.join(name);
    fs::write(&p, bytes).expect("write scratch file");
    p
}

// ---- protobuf writers -------------------------------------------------------

pub fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

pub fn put_u64(out: &mut Vec<u8>, field: u32, v: u64) {
    put_varint(out, u64::from(field) << 3);
    put_varint(out, v);
}

pub fn put_bytes(out: &mut Vec<u8>, field: u32, b: &[u8]) {
    put_varint(out, (u64::from(field) << 3) | 2);
    put_varint(out, b.len() as u64);
    out.extend_from_slice(b);
}

// ---- the WAL model ----------------------------------------------------------

/// `walpb.Record.type` values.
pub const METADATA_TYPE: i64 = 1;
pub const ENTRY_TYPE: i64 = 2;
pub const STATE_TYPE: i64 = 3;
pub const CRC_TYPE: i64 = 4;
pub const SNAPSHOT_TYPE: i64 = 5;

/// The member JSON a ConfChange context carries.
#[derive(Debug, Arbitrary)]
pub enum Context {
    None,
    Member {
        id: u64,
        name: String,
        peer_urls: Vec<String>,
        client_urls: Option<Vec<String>>,
        is_learner: Option<bool>,
        is_promote: bool,
    },
    Json(String),
    Raw(Vec<u8>),
}

impl Context {
    fn encode(&self) -> Vec<u8> {
        match self {
            Context::None => Vec::new(),
            Context::Member {
                id,
                name,
                peer_urls,
                client_urls,
                is_learner,
                is_promote,
            } => {
                let mut m = serde_json::json!({"id": id, "name": name, "peerURLs": peer_urls});
                if let Some(c) = client_urls {
                    m["clientURLs"] = serde_json::json!(c);
                }
                if let Some(l) = is_learner {
                    m["isLearner"] = serde_json::json!(l);
                }
                if *is_promote {
                    m["isPromote"] = serde_json::json!(true);
                }
                serde_json::to_vec(&m).unwrap_or_default()
            }
            Context::Json(s) => s.clone().into_bytes(),
            Context::Raw(b) => b.clone(),
        }
    }
}

/// The payload of an entry.
#[derive(Debug, Arbitrary)]
pub enum Payload {
    Empty,
    ConfChange {
        id: u64,
        kind: u8,
        node_id: u64,
        context: Context,
    },
    Raw(Vec<u8>),
}

/// One record's body, encoded as etcd would.
#[derive(Debug, Arbitrary)]
pub enum Body {
    Metadata {
        node_id: u64,
        cluster_id: u64,
    },
    Entry {
        etype: u8,
        term: u64,
        index: u64,
        payload: Payload,
    },
    State {
        term: u64,
        vote: u64,
        commit: u64,
    },
    Snapshot {
        index: u64,
        term: u64,
        conf_state: Option<(Vec<u64>, Vec<u64>, bool)>,
    },
    /// A crc record carrying the running checksum (or another value).
    Crc {
        value: Option<u32>,
    },
    /// Any type and data.
    Raw {
        rtype: i64,
        data: Vec<u8>,
    },
}

/// How one frame deviates from a valid one.
#[derive(Debug, Arbitrary)]
pub enum Twist {
    None,
    /// A CRC that does not chain.
    BadCrc(u32),
    /// A length word overwritten with this value.
    LengthWord(u64),
    /// Padding bytes other than zero.
    DirtyPadding(u8),
    /// One byte of the record flipped after the CRC was computed.
    FlipByte(u16, u8),
    /// Extra protobuf fields appended to the record (unknown to the reader).
    ExtraField(u8, u64),
}

#[derive(Debug, Arbitrary)]
pub struct Frame {
    pub body: Body,
    pub twist: Twist,
}

#[derive(Debug, Arbitrary)]
pub struct Segment {
    /// Added to the previous segment's sequence (0 repeats it: a duplicate name).
    pub seq_step: u8,
    pub index: u64,
    /// Start the segment with a crc record (etcd does for every segment).
    pub crc_first: bool,
    pub frames: Vec<Frame>,
    /// Bytes after the last frame (preallocated zeros are the usual case).
    pub tail: Tail,
}

#[derive(Debug, Arbitrary)]
pub enum Tail {
    None,
    Zeros(u16),
    Bytes(Vec<u8>),
    /// Cut this many bytes off the end (a torn write).
    Truncate(u16),
}

#[derive(Debug, Arbitrary)]
pub struct WalModel {
    pub segments: Vec<Segment>,
}

fn body_bytes(body: &Body) -> (i64, Vec<u8>) {
    let mut d = Vec::new();
    match body {
        Body::Metadata {
            node_id,
            cluster_id,
        } => {
            put_u64(&mut d, 1, *node_id);
            put_u64(&mut d, 2, *cluster_id);
            (METADATA_TYPE, d)
        }
        Body::Entry {
            etype,
            term,
            index,
            payload,
        } => {
            put_u64(&mut d, 1, u64::from(*etype % 4));
            put_u64(&mut d, 2, *term);
            put_u64(&mut d, 3, *index);
            match payload {
                Payload::Empty => {}
                Payload::ConfChange {
                    id,
                    kind,
                    node_id,
                    context,
                } => {
                    let mut cc = Vec::new();
                    put_u64(&mut cc, 1, *id);
                    put_u64(&mut cc, 2, u64::from(*kind % 5));
                    put_u64(&mut cc, 3, *node_id);
                    let ctx = context.encode();
                    if !ctx.is_empty() {
                        put_bytes(&mut cc, 4, &ctx);
                    }
                    put_bytes(&mut d, 4, &cc);
                }
                Payload::Raw(b) => put_bytes(&mut d, 4, b),
            }
            (ENTRY_TYPE, d)
        }
        Body::State { term, vote, commit } => {
            put_u64(&mut d, 1, *term);
            put_u64(&mut d, 2, *vote);
            put_u64(&mut d, 3, *commit);
            (STATE_TYPE, d)
        }
        Body::Snapshot {
            index,
            term,
            conf_state,
        } => {
            put_u64(&mut d, 1, *index);
            put_u64(&mut d, 2, *term);
            if let Some((voters, learners, packed)) = conf_state {
                let mut cs = Vec::new();
                if *packed {
                    let mut p = Vec::new();
                    for v in voters {
                        put_varint(&mut p, *v);
                    }
                    put_bytes(&mut cs, 1, &p);
                    let mut p = Vec::new();
                    for l in learners {
                        put_varint(&mut p, *l);
                    }
                    put_bytes(&mut cs, 2, &p);
                } else {
                    for v in voters {
                        put_u64(&mut cs, 1, *v);
                    }
                    for l in learners {
                        put_u64(&mut cs, 2, *l);
                    }
                }
                put_bytes(&mut d, 3, &cs);
            }
            (SNAPSHOT_TYPE, d)
        }
        Body::Crc { .. } => (CRC_TYPE, Vec::new()),
        Body::Raw { rtype, data } => (*rtype, data.clone()),
    }
}

/// Appends one framed record (length word, record, padding) to `out`.
pub fn frame(out: &mut Vec<u8>, rtype: i64, crc: u32, data: &[u8]) {
    let mut rec = Vec::new();
    put_u64(&mut rec, 1, rtype as u64);
    put_u64(&mut rec, 2, u64::from(crc));
    put_bytes(&mut rec, 3, data);
    frame_raw(out, &rec, None, 0);
}

fn frame_raw(out: &mut Vec<u8>, rec: &[u8], word: Option<u64>, pad_byte: u8) {
    let len = rec.len() as u64;
    let pad = (8 - len % 8) % 8;
    let w = word.unwrap_or(if pad == 0 {
        len
    } else {
        len | ((0x80 | pad) << 56)
    });
    out.extend_from_slice(&w.to_le_bytes());
    out.extend_from_slice(rec);
    out.extend(std::iter::repeat_n(pad_byte, pad as usize));
}

impl WalModel {
    /// The segment files: (name, bytes). The CRC chain runs across segments as
    /// etcd writes it.
    pub fn encode(&self) -> Vec<(String, Vec<u8>)> {
        let mut files = Vec::new();
        let mut seq: u64 = 0;
        let mut running: u32 = 0;
        for (i, seg) in self.segments.iter().take(6).enumerate() {
            if i > 0 {
                seq = seq.wrapping_add(u64::from(seg.seq_step));
            }
            let mut out = Vec::new();
            if seg.crc_first {
                frame(&mut out, CRC_TYPE, running, &[]);
            }
            for f in seg.frames.iter().take(64) {
                let (rtype, data) = body_bytes(&f.body);
                let crc = if let Body::Crc { value } = f.body {
                    value.unwrap_or(running)
                } else {
                    running = crc32c::crc32c_append(running, &data);
                    running
                };
                let crc = match f.twist {
                    Twist::BadCrc(x) => crc ^ x.max(1),
                    _ => crc,
                };
                let mut rec = Vec::new();
                put_u64(&mut rec, 1, rtype as u64);
                put_u64(&mut rec, 2, u64::from(crc));
                put_bytes(&mut rec, 3, &data);
                if let Twist::ExtraField(field, v) = f.twist {
                    put_u64(&mut rec, u32::from(field % 16) + 4, v);
                }
                if let Twist::FlipByte(at, x) = f.twist {
                    if !rec.is_empty() {
                        let at = usize::from(at) % rec.len();
                        rec[at] ^= x.max(1);
                    }
                }
                let word = match f.twist {
                    Twist::LengthWord(w) => Some(w),
                    _ => None,
                };
                let pad_byte = match f.twist {
                    Twist::DirtyPadding(b) => b,
                    _ => 0,
                };
                frame_raw(&mut out, &rec, word, pad_byte);
            }
            match &seg.tail {
                Tail::None => {}
                Tail::Zeros(n) => out.extend(std::iter::repeat_n(0, usize::from(*n))),
                Tail::Bytes(b) => out.extend_from_slice(b),
                Tail::Truncate(n) => {
                    let keep = out.len().saturating_sub(usize::from(*n));
                    out.truncate(keep);
                }
            }
            let name = format!("{:016x}-{:016x}.wal", seq, seg.index);
            files.push((name, out));
        }
        files
    }
}

// ---- the targets ------------------------------------------------------------

/// The body of every fuzz target, called by `fuzz_targets/<name>.rs` with the
/// input libFuzzer decoded, and by [`targets::run`] with raw corpus bytes.
pub mod targets {
    use std::collections::BTreeSet;
    use std::path::{Path, PathBuf};
    use std::time::SystemTime;

    use arbitrary::{Arbitrary, Unstructured};
    use etcd_member_agent::disk::bbolt::{self, Db};
    use etcd_member_agent::disk::layout::{self, Options, Paths};
    use etcd_member_agent::disk::lock::{self, Probe};
    use etcd_member_agent::disk::{ids, snap, wal};
    use etcd_member_agent::evidence::kube::{parse_cluster, parse_member};
    use etcd_member_agent::evidence::pod::{missing_references, references, stuck_containers};
    use etcd_member_agent::restore::{s3, tool};
    use etcd_member_agent::server::boot::{read_verdict, PodStart};
    use k8s_openapi::api::core::v1::Pod;

    use super::{fresh_dir, put, scratch, WalModel};

    /// Every target by name (the `[[bin]]` sections of `fuzz/Cargo.toml`).
    pub const NAMES: &[&str] = &[
        "wal_segment",
        "wal_dir",
        "wal_structured",
        "snap",
        "bbolt",
        "data_dir",
        "verdict",
        "kube_objects",
        "pod",
        "duration",
        "urls",
        "initial_cluster",
        "text",
        "manifests",
        "admission",
    ];

    /// Runs target `name` on the raw bytes of one corpus input, decoding them as
    /// `libfuzzer_sys::fuzz_target!` does for the target's input type; `None`
    /// for a name that is not a target.
    pub fn run(name: &str, bytes: &[u8]) -> Option<()> {
        match name {
            "wal_segment" => wal_segment(bytes),
            "wal_dir" => wal_dir(bytes),
            "wal_structured" => decoded(bytes, wal_structured),
            "snap" => snap(bytes),
            "bbolt" => bbolt(bytes),
            "data_dir" => data_dir(bytes),
            "verdict" => verdict(bytes),
            "kube_objects" => kube_objects(bytes),
            "pod" => pod(bytes),
            "duration" => decoded(bytes, duration),
            "urls" => decoded(bytes, urls),
            "initial_cluster" => decoded(bytes, initial_cluster),
            "text" => decoded(bytes, text),
            "manifests" => manifests(bytes),
            "admission" => admission(bytes),
            _ => return None,
        }
        Some(())
    }

    /// What `fuzz_target!(|x: T| ...)` does with the bytes: too short for
    /// `T`'s size hint or not decodable is skipped, else `arbitrary_take_rest`.
    fn decoded<'a, T: Arbitrary<'a>>(bytes: &'a [u8], body: impl FnOnce(T)) {
        if bytes.len() < T::size_hint(0).0 {
            return;
        }
        if let Ok(input) = T::arbitrary_take_rest(Unstructured::new(bytes)) {
            body(input);
        }
    }

    /// One WAL segment: any bytes as `member/wal/0000000000000000-0000000000000000.wal`.
    pub fn wal_segment(data: &[u8]) {
        let dir = scratch().join("wal");
        fresh_dir(&dir);
        put(&dir, &wal::segment_name(0, 0), data);
        let _ = wal::read_wal(&dir);
        let _ = wal::wal_identity(&dir);
    }

    /// Splits a `wal_dir` input into segments (chosen so that it is rare inside
    /// WAL bytes).
    const SEGMENT_SEPARATOR: &[u8] = b"\xffSEG\xfe";

    /// A WAL directory of several segments: the input is split at each
    /// `SEGMENT_SEPARATOR`; the byte after a separator steps the sequence number
    /// (0 repeats it, so duplicate and gapped names are reached too).
    pub fn wal_dir(data: &[u8]) {
        let dir = scratch().join("wal");
        fresh_dir(&dir);
        let mut seq = 0u64;
        let mut rest = data;
        for i in 0..8u64 {
            let (seg, next) = match rest
                .windows(SEGMENT_SEPARATOR.len())
                .position(|w| w == SEGMENT_SEPARATOR)
            {
                Some(at) => (&rest[..at], Some(&rest[at + SEGMENT_SEPARATOR.len()..])),
                None => (rest, None),
            };
            put(&dir, &wal::segment_name(seq, i * 16), seg);
            let Some(next) = next else { break };
            let (step, next) = match next.split_first() {
                Some((s, n)) => (u64::from(*s), n),
                None => (1, next),
            };
            seq = seq.wrapping_add(step);
            rest = next;
        }
        let _ = wal::list_segments(&dir);
        let _ = wal::read_wal(&dir);
        let _ = wal::wal_identity(&dir);
    }

    /// Structure-aware WAL: the model's segments written out, then read.
    pub fn wal_structured(model: WalModel) {
        let dir = scratch().join("wal");
        fresh_dir(&dir);
        for (name, bytes) in model.encode() {
            put(&dir, &name, &bytes);
        }
        let _ = wal::read_wal(&dir);
        let _ = wal::wal_identity(&dir);
    }

    /// A `.snap` file: any bytes under a valid snapshot name.
    pub fn snap(data: &[u8]) {
        let dir = scratch().join("snap");
        fresh_dir(&dir);
        // The name carries term and index; the first two bytes pick them so the
        // name-against-metadata check sees both agreement and disagreement.
        let (term, index) = match data {
            [t, i, ..] => (u64::from(*t), u64::from(*i)),
            _ => (1, 1),
        };
        let path = put(&dir, &snap::snap_file_name(term, index), data);
        let _ = snap::read_snap(&path);
        let _ = snap::list_snaps(&dir);
    }

    /// A bbolt file: open (metas), the full page walk (`summary`), the identity
    /// records, the bucket list and every root bucket's keys, and the KV hash
    /// `inspect --hash` prints.
    pub fn bbolt(data: &[u8]) {
        let dir = scratch().join("bolt");
        fresh_dir(&dir);
        let path = put(&dir, "db", data);
        let Ok(db) = Db::open(&path) else { return };
        let _ = db.summary();
        let _ = db.identity_summary();
        let _ = db.kv_hash();
        if let Ok(buckets) = db.buckets() {
            for b in buckets.iter().take(16) {
                let _ = db.for_each_kv(b, |_, _| {});
                let _ = db.get(b, b"consistent_index");
            }
        }
    }

    /// Splits a `data_dir` input into its four parts.
    const PART_SEPARATOR: &[u8] = b"\xffPART\xfe";

    /// The whole offline inspection (`inspect --hash`) of a data directory whose
    /// WAL segment, `.snap` file name and bytes, and db come from the input (four
    /// parts split at `PART_SEPARATOR`): the classification, the cross-checks
    /// between the three files, and the hash. Every run also checks that the
    /// inspection left the directory as it was (same files, bytes and mtimes).
    pub fn data_dir(data: &[u8]) {
        let root = scratch().join("data");
        fresh_dir(&root);
        let member = root.join("member");
        let mut parts = Vec::new();
        let mut rest = data;
        while parts.len() < 3 {
            match rest
                .windows(PART_SEPARATOR.len())
                .position(|w| w == PART_SEPARATOR)
            {
                Some(at) => {
                    parts.push(&rest[..at]);
                    rest = &rest[at + PART_SEPARATOR.len()..];
                }
                None => break,
            }
        }
        parts.push(rest);
        let wal_dir = member.join("wal");
        let snap_dir = member.join("snap");
        std::fs::create_dir_all(&wal_dir).expect("wal dir");
        std::fs::create_dir_all(&snap_dir).expect("snap dir");
        put(&wal_dir, &wal::segment_name(0, 0), parts[0]);
        if let Some(s) = parts.get(2) {
            let name = parts
                .get(1)
                .and_then(|n| std::str::from_utf8(n).ok())
                .and_then(snap::parse_snap_name)
                .map_or_else(
                    || snap::snap_file_name(2, 8),
                    |(t, i)| snap::snap_file_name(t, i),
                );
            put(&snap_dir, &name, s);
        }
        if let Some(db) = parts.get(3) {
            put(&snap_dir, "db", db);
        }
        let before = tree(&root);
        let paths = Paths::new(&root, None);
        let _ = layout::inspect(
            &paths,
            Options {
                hash: true,
                usage: true,
                locks: Probe::Ofd,
                threads: 0,
            },
        );
        assert_eq!(tree(&root), before, "inspect changed the data directory");
    }

    /// Every path under `root` with its bytes and mtime.
    fn tree(root: &Path) -> Vec<(PathBuf, Vec<u8>, SystemTime)> {
        let mut out = Vec::new();
        let mut dirs = vec![root.to_path_buf()];
        while let Some(d) = dirs.pop() {
            let mut entries: Vec<_> = std::fs::read_dir(&d)
                .expect("read scratch dir")
                .flatten()
                .collect();
            entries.sort_by_key(|e| e.path());
            for e in entries {
                let p = e.path();
                let meta = std::fs::symlink_metadata(&p).expect("stat scratch");
                let mtime = meta.modified().expect("mtime");
                if meta.is_dir() {
                    dirs.push(p.clone());
                    out.push((p, Vec::new(), mtime));
                } else {
                    let bytes = std::fs::read(&p).expect("read scratch file");
                    out.push((p, bytes, mtime));
                }
            }
        }
        out
    }

    /// The verdict file `serve` reads (`read_verdict`: size cap, JSON, the
    /// Pod-start check, the fields).
    pub fn verdict(data: &[u8]) {
        let dir = scratch().join("verdict");
        fresh_dir(&dir);
        let path = put(&dir, "verdict.json", data);
        let start = PodStart {
            pod_uid: Some("0c6a3d2e-uid".to_string()),
            boot_id: Some("boot".to_string()),
        };
        let _ = read_verdict(&path, &start);
        let _ = read_verdict(&path, &PodStart::default());
    }

    /// The Kubernetes custom objects the evidence reads (EtcdMember,
    /// EtcdCluster): any JSON into `parse_member` and `parse_cluster`.
    pub fn kube_objects(data: &[u8]) {
        let Ok(doc) = serde_json::from_slice::<serde_json::Value>(data) else {
            return;
        };
        if let Ok(m) = parse_member("m", &doc) {
            let _ = serde_json::to_string(&m);
        }
        if let Ok(c) = parse_cluster("c", &doc) {
            let _ = serde_json::to_string(&c);
        }
    }

    /// The Pod `pod-check` lints: any JSON decoded as a `Pod`, then its
    /// references, the missing-object hazards and the stuck containers.
    pub fn pod(data: &[u8]) {
        let Ok(pod) = serde_json::from_slice::<Pod>(data) else {
            return;
        };
        let refs = references(&pod);
        let missing: BTreeSet<_> = refs
            .iter()
            .map(|r| (r.object_kind, r.object_name.clone()))
            .collect();
        for h in missing_references(&refs, &missing) {
            let _ = serde_json::to_string(&h);
        }
        for h in stuck_containers(&pod) {
            let _ = serde_json::to_string(&h);
        }
    }

    /// Durations as every `--…-timeout`/`--…-interval` flag parses them.
    pub fn duration(s: &str) {
        let _ = etcd_member_agent::duration::parse(s);
    }

    /// URL lists (`--initial-advertise-peer-urls` and friends): the list parser,
    /// normalisation, the comparable form and the member ID computed from them.
    pub fn urls(s: &str) {
        let _ = ids::normalize_url(s);
        let _ = ids::comparable_url(s);
        if let Ok(urls) = ids::parse_urls(s) {
            let _ = ids::member_id(&urls, "token");
        }
    }

    /// `--initial-cluster` strings, and the bootstrap IDs derived from them.
    pub fn initial_cluster(s: &str) {
        if let Ok(cluster) = ids::parse_initial_cluster(s) {
            let members: Vec<ids::MemberId> = cluster
                .values()
                .map(|urls| ids::member_id(urls, "token"))
                .collect();
            let _ = ids::cluster_id(&members);
        }
    }

    /// The small text parsers: WAL and snap file names, Go semver (storage
    /// version), `etcdutl version` output, `/proc/locks`, and the S3 endpoint
    /// rules. (The agent decodes no S3 XML itself: `object_store` makes the
    /// HEAD and GET and parses its answers.)
    pub fn text(s: &str) {
        let _ = wal::parse_segment_name(s);
        let _ = snap::parse_snap_name(s);
        if let Some(v) = bbolt::parse_semver(s) {
            let _ = bbolt::semver_minor(&v);
        }
        let _ = bbolt::semver_minor(s);
        let _ = bbolt::detect_storage_version(Some(s), Some(1));
        let _ = tool::parse_version(s);
        let _ = lock::parse_proc_locks(s);
        let _ = s3::needs_path_style(s);
        let _ = s3::effective_endpoint(s, "bucket", false);
        let _ = s3::effective_endpoint(s, "bucket", true);
    }

    /// `inject` on any text: the YAML/JSON stream read with its positions,
    /// every Pod template guarded, the patch written into the text in place and
    /// checked by reading it back (an error, never a panic, when it cannot be).
    pub fn manifests(data: &[u8]) {
        use etcd_member_agent::inject::{guard, objects, yaml::Stream, Options, Outcome};
        let Ok(text) = std::str::from_utf8(data) else {
            return;
        };
        let Ok(stream) = Stream::parse(text) else {
            return;
        };
        let opts = Options {
            image: "agent".into(),
            image_pull_policy: None,
            kube: true,
            version: "0".into(),
            extra_env: Vec::new(),
        };
        for (i, doc) in stream.docs.iter().enumerate() {
            let mut ops = Vec::new();
            for t in objects::templates(&doc.value) {
                if let Some(template) = doc.value.pointer(&t.pointer) {
                    if let Outcome::Injected(inj) = guard(template, &opts) {
                        ops.extend(inj.patch_at(&t.pointer));
                    }
                }
            }
            if !ops.is_empty() {
                let _ = stream.patch(i, &ops);
            }
        }
    }

    /// The webhook's answer to any request body.
    pub fn admission(data: &[u8]) {
        let opts = etcd_member_agent::inject::Options {
            image: "agent".into(),
            image_pull_policy: None,
            kube: true,
            version: "0".into(),
            extra_env: Vec::new(),
        };
        if let Ok(r) = etcd_member_agent::webhook::admission::review(data, &opts) {
            let _ = serde_json::to_vec(&r.response);
        }
    }
}
