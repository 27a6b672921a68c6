//! Test images: a [`Builder`] that writes bbolt pages the way bbolt lays them
//! out, models of etcd-shaped databases, and the real etcd db fixture.

use std::collections::BTreeMap;
use std::path::PathBuf;

use proptest::prelude::*;

use super::meta::*;
use super::page::*;
use super::walk::*;
use super::*;

pub(super) type Bucket = BTreeMap<Vec<u8>, Vec<u8>>;
pub(super) type Model = BTreeMap<Vec<u8>, Bucket>;

/// Writes bbolt pages the way bbolt lays them out, enough to test the reader.
pub(super) struct Builder {
    pub(super) ps: usize,
    pub(super) data: Vec<u8>,
}

pub(super) fn put_u32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

pub(super) fn put_u64(b: &mut [u8], at: usize, v: u64) {
    b[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

/// A leaf page image (header id 0, no overflow yet).
pub(super) fn leaf_image(elems: &[(bool, &[u8], &[u8])]) -> Vec<u8> {
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

pub(super) fn inline_bucket(elems: &[(bool, &[u8], &[u8])]) -> Vec<u8> {
    let mut v = vec![0u8; BUCKET_HEADER];
    v.extend(leaf_image(elems));
    v
}

pub(super) fn bucket_value(root: u64) -> Vec<u8> {
    let mut v = vec![0u8; BUCKET_HEADER];
    put_u64(&mut v, 0, root);
    v
}

impl Builder {
    pub(super) fn new(ps: usize) -> Self {
        Builder {
            ps,
            data: vec![0; 2 * ps],
        }
    }

    pub(super) fn next_pgid(&self) -> u64 {
        (self.data.len() / self.ps) as u64
    }

    /// Appends a page image, spanning overflow pages when it is large.
    pub(super) fn alloc(&mut self, mut img: Vec<u8>) -> u64 {
        let pgid = self.next_pgid();
        let pages = img.len().div_ceil(self.ps).max(1);
        img.resize(pages * self.ps, 0);
        put_u64(&mut img, 0, pgid);
        put_u32(&mut img, 12, (pages - 1) as u32);
        self.data.extend(img);
        pgid
    }

    /// Appends unused pages (what freed pages look like).
    pub(super) fn junk(&mut self, pages: usize) {
        self.data.extend(vec![0xAB; pages * self.ps]);
    }

    pub(super) fn leaf(&mut self, elems: &[(bool, &[u8], &[u8])]) -> u64 {
        self.alloc(leaf_image(elems))
    }

    pub(super) fn branch(&mut self, children: &[(&[u8], u64)]) -> u64 {
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

    pub(super) fn meta(&mut self, slot: u64, root: u64, high_water: u64, txid: u64) {
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
    pub(super) fn finish(mut self, root: u64, txid: u64) -> Vec<u8> {
        let hw = self.next_pgid();
        self.meta(txid % 2, root, hw, txid);
        self.meta((txid + 1) % 2, root, hw, txid - 1);
        self.data
    }
}

/// Lays out a bucket as pages: leaves of `per_leaf` entries, in reverse page
/// order when `reverse`, with junk pages between them, under branches.
pub(super) fn layout_bucket(
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
pub(super) fn build(
    model: &Model,
    ps: usize,
    per_leaf: usize,
    reverse: bool,
    gap: usize,
) -> Vec<u8> {
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
pub(super) fn model_hash(model: &Model) -> (u32, u64) {
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

pub(super) fn rev_key(main: u64, sub: u64, tombstone: bool) -> Vec<u8> {
    let mut k = main.to_be_bytes().to_vec();
    k.push(b'_');
    k.extend(sub.to_be_bytes());
    if tombstone {
        k.push(b't');
    }
    k
}

pub(super) fn alarm_key(member: u64, alarm: u64) -> Vec<u8> {
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

pub(super) fn etcd_model() -> Model {
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

pub(super) fn write(dir: &tempfile::TempDir, bytes: &[u8]) -> PathBuf {
    let p = dir.path().join("db");
    std::fs::write(&p, bytes).unwrap();
    p
}

pub(super) fn all_kvs(db: &Db, bucket: &[u8]) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut out = Vec::new();
    assert!(db
        .for_each_kv(bucket, |k, v| out.push((k.to_vec(), v.to_vec())))
        .unwrap());
    out
}

/// An `mvccpb.KeyValue` with only its key (field 1) and value (field 5).
pub(super) fn key_value(key: &[u8], value: &[u8]) -> Vec<u8> {
    let mut out = vec![0x0a, key.len() as u8];
    out.extend(key);
    out.extend([0x2a, value.len() as u8]);
    out.extend(value);
    out
}

/// A 3.6-shaped db: `storageVersion` in `meta`, `key` values as KeyValues.
pub(super) fn v36_model(storage_version: Option<&[u8]>) -> Model {
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

pub(super) fn corrupt_meta(bytes: &mut [u8], slot: usize, ps: usize) {
    bytes[slot * ps + PAGE_HEADER + 48] ^= 0xFF; // txid, under the checksum
}

/// A file with one bucket `b` whose root is `bucket_root`, built by `f`.
pub(super) fn custom(f: impl FnOnce(&mut Builder) -> u64) -> Vec<u8> {
    let mut b = Builder::new(4096);
    let root_of_b = f(&mut b);
    let v = bucket_value(root_of_b);
    let root = b.leaf(&[(true, b"b", &v)]);
    b.finish(root, 3)
}

pub(super) fn walk_errors(bytes: &[u8]) -> (BoltError, BoltError) {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(&write(&dir, bytes)).unwrap();
    (db.summary().unwrap_err(), db.kv_hash().unwrap_err())
}

/// A `member/snap/db` written by etcd 3.5.1; see the README next to it.
pub(super) fn fixture() -> Vec<u8> {
    let p =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/bbolt/etcd-3.5.1-nospace.db");
    std::fs::read(p).unwrap()
}

/// Opens and walks whatever `bytes` are; must never panic.
pub(super) fn exercise(bytes: &[u8]) {
    let dir = tempfile::tempdir().unwrap();
    let p = write(&dir, bytes);
    if let Ok(db) = Db::open(&p) {
        // Skimming the values changes nothing a summary says, errors included.
        assert_eq!(
            format!("{:?}", db.summary()),
            format!("{:?}", db.summary_unskimmed())
        );
        let _ = db.kv_hash();
        let _ = db.buckets();
        let _ = db.for_each_kv(b"key", |_, _| {});
        let _ = db.get(b"meta", b"consistent_index");
        let _ = db.get(b"key", &rev_key(5, 0, false));
    }
}

/// Models of `buckets` buckets of `keys` keys each, values `values` bytes long.
fn model_of(
    values: std::ops::Range<usize>,
    keys: std::ops::Range<usize>,
    buckets: std::ops::Range<usize>,
) -> impl Strategy<Value = Model> {
    let key = proptest::collection::vec(any::<u8>(), 0..24);
    let value = proptest::collection::vec(any::<u8>(), values);
    let bucket = proptest::collection::btree_map(key, value, keys);
    let name = proptest::collection::vec(any::<u8>(), 1..8);
    proptest::collection::btree_map(name, bucket, buckets)
}

pub(super) fn small_model() -> impl Strategy<Value = Model> {
    model_of(0..64, 0..40, 0..5)
}

/// Models whose values often span overflow pages (at a page size of 1024).
pub(super) fn large_value_model() -> impl Strategy<Value = Model> {
    model_of(0..4000, 0..12, 1..4)
}
