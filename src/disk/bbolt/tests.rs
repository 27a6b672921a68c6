//! Tests of the bbolt reader over images a [`Builder`] writes the way bbolt lays
//! them out, and over a real etcd db.

use super::etcd::*;
use super::meta::*;
use super::page::*;
use super::walk::*;
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
    let h =
        serde_json::to_value(Db::open(&write(&dir, &bytes)).unwrap().kv_hash().unwrap()).unwrap();
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
    let p =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/bbolt/etcd-3.5.1-nospace.db");
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
