//! Helpers shared by the fuzz targets: a scratch directory (the readers take
//! paths, open `O_RDONLY | O_NOFOLLOW` and `pread`; the targets feed them real
//! files on tmpfs), and the structure-aware WAL model whose frames carry valid
//! CRCs so that mutations reach the record decoders.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use arbitrary::Arbitrary;

/// A per-process scratch directory on tmpfs when there is one.
pub fn scratch() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
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
        let dir = base.join(format!("ema-fuzz-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).expect("scratch dir");
        dir
    })
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
