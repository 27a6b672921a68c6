//! Unit tests of the WAL reader.

use super::frame::*;
use super::record::*;
use super::*;
use crate::disk::raftpb::tests::{conf_state, put_bytes, put_u64};
use crate::disk::raftpb::ConfChangeKind;
use proptest::prelude::*;

fn metadata(node: u64, cluster: u64) -> Vec<u8> {
    let mut out = Vec::new();
    put_u64(&mut out, 1, node);
    put_u64(&mut out, 2, cluster);
    out
}

fn entry(etype: u64, term: u64, index: u64, data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    put_u64(&mut out, 1, etype);
    put_u64(&mut out, 2, term);
    put_u64(&mut out, 3, index);
    put_bytes(&mut out, 4, data);
    out
}

fn hard_state(term: u64, vote: u64, commit: u64) -> Vec<u8> {
    let mut out = Vec::new();
    put_u64(&mut out, 1, term);
    put_u64(&mut out, 2, vote);
    put_u64(&mut out, 3, commit);
    out
}

fn snapshot(index: u64, term: u64, cs: Option<Vec<u8>>) -> Vec<u8> {
    let mut out = Vec::new();
    put_u64(&mut out, 1, index);
    put_u64(&mut out, 2, term);
    if let Some(cs) = cs {
        put_bytes(&mut out, 3, &cs);
    }
    out
}

fn conf_change(kind: u64, node: u64, ctx: &str) -> Vec<u8> {
    let mut out = Vec::new();
    put_u64(&mut out, 1, 7);
    put_u64(&mut out, 2, kind);
    put_u64(&mut out, 3, node);
    if !ctx.is_empty() {
        put_bytes(&mut out, 4, ctx.as_bytes());
    }
    out
}

/// A WAL writer for tests: frames with padding and the chained CRC, the way
/// etcd's encoder writes them.
#[derive(Clone)]
struct Enc {
    crc: u32,
    segs: Vec<Vec<u8>>,
    /// Frame offsets of every record: (segment, offset).
    offsets: Vec<(usize, u64)>,
}

impl Enc {
    fn new() -> Self {
        let mut e = Enc {
            crc: 0,
            segs: vec![Vec::new()],
            offsets: Vec::new(),
        };
        e.crc_rec();
        e
    }

    fn frame(&mut self, rtype: i64, crc: u32, data: &[u8]) {
        let mut rec = Vec::new();
        put_u64(&mut rec, 1, rtype as u64);
        put_u64(&mut rec, 2, u64::from(crc));
        put_bytes(&mut rec, 3, data);
        let pad = (8 - rec.len() % 8) % 8;
        let mut word = rec.len() as u64;
        if pad > 0 {
            word |= (0x80 | pad as u64) << 56;
        }
        let seg = self.segs.len() - 1;
        let out = &mut self.segs[seg];
        self.offsets.push((seg, out.len() as u64));
        out.extend_from_slice(&word.to_le_bytes());
        out.extend_from_slice(&rec);
        out.extend(std::iter::repeat_n(0u8, pad));
    }

    fn rec(&mut self, rtype: i64, data: &[u8]) -> &mut Self {
        self.crc = crc32c::crc32c_append(self.crc, data);
        self.frame(rtype, self.crc, data);
        self
    }

    fn crc_rec(&mut self) {
        self.frame(CRC_TYPE, self.crc, &[]);
    }

    fn cut(&mut self) -> &mut Self {
        self.segs.push(Vec::new());
        self.crc_rec();
        self
    }

    fn write(&self, dir: &Path, prealloc_last: usize) -> Vec<PathBuf> {
        write_segs(dir, &self.segs, prealloc_last)
    }
}

/// Writes segments as `%016x-%016x.wal` files, zero-filling the last one to
/// `prealloc_last` bytes the way etcd preallocates.
fn write_segs(dir: &Path, segs: &[Vec<u8>], prealloc_last: usize) -> Vec<PathBuf> {
    let mut paths = Vec::new();
    for (i, seg) in segs.iter().enumerate() {
        let p = dir.join(segment_name(i as u64, i as u64 * 100));
        let mut bytes = seg.clone();
        if i + 1 == segs.len() && bytes.len() < prealloc_last {
            bytes.resize(prealloc_last, 0);
        }
        std::fs::write(&p, bytes).unwrap();
        paths.push(p);
    }
    paths
}

const NODE: u64 = 0x8e9e05c52164694d;
const CLUSTER: u64 = 0xcdf818194e3a8c32;

fn member_ctx(id: u64, learner: bool) -> String {
    format!(
        r#"{{"id":{id},"peerURLs":["http://m{id}:2380"],"name":"m{id}","clientURLs":null,"isLearner":{learner}}}"#
    )
}

/// Four segments: a truncation of the log across the third cut, raw v2
/// requests before and after it, conf changes and snapshots.
fn several_segments() -> Enc {
    let v2 = |path: &str| {
        let mut out = vec![0x08, 0x01];
        put_bytes(&mut out, 2, b"PUT");
        put_bytes(&mut out, 3, path.as_bytes());
        out
    };
    let mut e = two_segments();
    e.cut()
        .rec(METADATA_TYPE, &metadata(NODE, CLUSTER))
        .rec(STATE_TYPE, &hard_state(2, NODE, 30));
    for i in 31..=40 {
        e.rec(ENTRY_TYPE, &entry(0, 2, i, &v2("/1/a")));
    }
    e.rec(
        ENTRY_TYPE,
        &entry(1, 2, 41, &conf_change(0, 7, &member_ctx(7, false))),
    );
    e.cut()
        .rec(METADATA_TYPE, &metadata(NODE, CLUSTER))
        // Term 3 overwrites the log from index 35.
        .rec(STATE_TYPE, &hard_state(3, NODE, 34));
    for i in 35..=45 {
        e.rec(ENTRY_TYPE, &entry(0, 3, i, &v2("/0/version")));
    }
    e.rec(
        SNAPSHOT_TYPE,
        &snapshot(40, 3, Some(conf_state(&[NODE], &[]))),
    )
    .rec(STATE_TYPE, &hard_state(3, NODE, 45));
    e
}

#[test]
fn a_truncation_across_a_cut_drops_what_it_overwrote_in_parallel_too() {
    let e = several_segments();
    let dir = tempfile::tempdir().unwrap();
    write_segs(dir.path(), &e.segs, 0);
    let seq = read_wal_with(dir.path(), 1).unwrap();
    let par = read_wal_with(dir.path(), 4).unwrap();
    assert_eq!(seq, par);
    assert_eq!((par.last_index, par.last_term), (45, 3));
    assert!(
        par.conf_changes.iter().all(|c| c.index < 35),
        "{:?}",
        par.conf_changes
    );
    assert_eq!(par.v2.disallowed.len(), 4, "31..=34 survive the truncation");
    assert_eq!(par.v2.converted.len(), 11);
    assert_eq!(par.hard_state.commit, 45);
}

/// Two segments like etcd writes them: a created file and a cut one.
fn two_segments() -> Enc {
    let mut e = Enc::new();
    e.rec(METADATA_TYPE, &metadata(NODE, CLUSTER))
        .rec(SNAPSHOT_TYPE, &snapshot(0, 0, None))
        .rec(
            ENTRY_TYPE,
            &entry(1, 1, 1, &conf_change(0, NODE, &member_ctx(NODE, false))),
        )
        .rec(STATE_TYPE, &hard_state(1, NODE, 1));
    for i in 2..=20 {
        e.rec(ENTRY_TYPE, &entry(0, 2, i, format!("put k{i}").as_bytes()));
    }
    e.rec(STATE_TYPE, &hard_state(2, NODE, 20))
        .rec(
            SNAPSHOT_TYPE,
            &snapshot(10, 2, Some(conf_state(&[NODE], &[5]))),
        )
        .cut()
        .rec(METADATA_TYPE, &metadata(NODE, CLUSTER))
        .rec(STATE_TYPE, &hard_state(2, NODE, 20))
        .rec(
            ENTRY_TYPE,
            &entry(1, 2, 21, &conf_change(3, 5, &member_ctx(5, true))),
        );
    for i in 22..=30 {
        e.rec(ENTRY_TYPE, &entry(0, 2, i, &[0xab; 40]));
    }
    e.rec(STATE_TYPE, &hard_state(2, NODE, 30));
    e
}

fn corrupt_kind(e: WalError) -> (PathBuf, u64, CorruptKind) {
    match e {
        WalError::Corrupt { path, offset, kind } => (path, offset, kind),
        other => panic!("expected Corrupt, got {other:?}"),
    }
}

#[test]
fn names_round_trip() {
    for (s, i) in [(0, 0), (1, 0x136), (u64::MAX, u64::MAX)] {
        let n = segment_name(s, i);
        assert_eq!(n.len(), 37);
        assert_eq!(parse_segment_name(&n), Some((s, i)));
    }
    assert_eq!(
        segment_name(1, 0x136),
        "0000000000000001-0000000000000136.wal"
    );
    for bad in [
        "0.tmp",
        "0-0.wal",
        "0000000000000001-0000000000000136.wal.broken",
        "0000000000000001-000000000000013G.wal",
        "0000000000000001-000000000000013A.wal",
        "0000000000000001_0000000000000136.wal",
        "+000000000000001-0000000000000136.wal",
    ] {
        assert_eq!(parse_segment_name(bad), None, "{bad}");
    }
}

#[test]
fn reads_a_multi_segment_log() {
    let dir = tempfile::tempdir().unwrap();
    let e = two_segments();
    e.write(dir.path(), 64 * 1024);
    std::fs::write(dir.path().join("0.tmp"), vec![0u8; 4096]).unwrap();
    let wal = read_wal(dir.path()).unwrap();
    assert_eq!(wal.segments.len(), 2);
    assert_eq!(wal.segments[1].seq, 1);
    assert_eq!(wal.segments[1].first_index, 100);
    assert_eq!(wal.segments[1].size, 64 * 1024);
    assert_eq!(
        (wal.member_id, wal.cluster_id),
        (MemberId::new(NODE), ClusterId::new(CLUSTER))
    );
    assert_eq!(
        wal.hard_state,
        HardState {
            term: 2,
            vote: MemberId::new(NODE),
            commit: 30
        }
    );
    assert_eq!((wal.last_index, wal.last_term), (30, 2));
    assert_eq!(wal.records, e.offsets.len() as u64);
    assert_eq!(wal.torn_tail, None);
    assert_eq!(wal.valid_end, (1, e.segs[1].len() as u64));
    assert_eq!(wal.snapshots.len(), 2);
    assert!(!wal.snapshots[0].has_conf_state);
    assert_eq!(
        wal.snapshots[1],
        WalSnapshotRef {
            index: 10,
            term: 2,
            voters: vec![MemberId::new(NODE)],
            learners: vec![MemberId::new(5)],
            has_conf_state: true
        }
    );
    assert_eq!(wal.conf_changes.len(), 2);
    let first = &wal.conf_changes[0];
    assert_eq!((first.index, first.term), (1, 1));
    assert_eq!(first.kind, ConfChangeKind::AddNode);
    assert_eq!(first.node_id, MemberId::new(NODE));
    let m = &first.member.as_ref().unwrap().member;
    assert_eq!(m.id, MemberId::new(NODE));
    assert_eq!(m.peer_urls, vec![format!("http://m{NODE}:2380")]);
    assert!(m.client_urls.is_empty());
    assert!(!m.is_learner);
    let second = &wal.conf_changes[1];
    assert_eq!(second.kind, ConfChangeKind::AddLearnerNode);
    assert!(second.member.as_ref().unwrap().member.is_learner);
    let json = serde_json::to_value(wal.hard_state).unwrap();
    assert_eq!(json["vote"], "8e9e05c52164694d");
}

#[test]
fn first_segment_after_a_purge_starts_with_a_nonzero_crc() {
    let dir = tempfile::tempdir().unwrap();
    let mut e = two_segments();
    e.segs.remove(0);
    e.write(dir.path(), 0);
    let wal = read_wal(dir.path()).unwrap();
    assert_eq!(wal.last_index, 30);
    assert_eq!(wal.member_id, MemberId::new(NODE));
}

#[test]
fn broken_crc_chain_between_segments_is_corrupt() {
    let dir = tempfile::tempdir().unwrap();
    let mut e = two_segments();
    // Drop the last record of segment 0: segment 1's crc record no longer
    // continues the chain.
    let (_, off) = e.offsets[e.offsets.iter().rposition(|o| o.0 == 0).unwrap()];
    e.segs[0].truncate(off as usize);
    let paths = e.write(dir.path(), 0);
    let (path, offset, kind) = corrupt_kind(read_wal(dir.path()).unwrap_err());
    assert_eq!((path, offset), (paths[1].clone(), 0));
    assert!(matches!(kind, CorruptKind::CrcChainBroken { .. }), "{kind}");
}

#[test]
fn a_flipped_byte_in_an_early_record_is_corrupt_at_that_record() {
    let dir = tempfile::tempdir().unwrap();
    let e = two_segments();
    let (seg, off) = e.offsets[6];
    let mut segs = e.segs.clone();
    // The last data byte of the record, before padding.
    let word = u64::from_le_bytes(segs[seg][off as usize..][..8].try_into().unwrap());
    let at = off as usize + 8 + (word & LEN_MASK) as usize - 1;
    segs[seg][at] ^= 0x01;
    let paths = write_segs(dir.path(), &segs, 0);
    let (path, offset, kind) = corrupt_kind(read_wal(dir.path()).unwrap_err());
    assert_eq!((path, offset), (paths[seg].clone(), off));
    assert!(matches!(kind, CorruptKind::CrcMismatch { .. }), "{kind}");

    // The same in the last (only) segment is still corruption: no zero sector.
    let dir = tempfile::tempdir().unwrap();
    let paths = write_segs(dir.path(), &segs[..1], 1 << 16);
    let (path, offset, _) = corrupt_kind(read_wal(dir.path()).unwrap_err());
    assert_eq!((path, offset), (paths[0].clone(), off));
}

/// A log whose last segment holds big entries, so records span sectors.
fn big_last_segment() -> Enc {
    let mut e = two_segments();
    for i in 31..=40 {
        e.rec(ENTRY_TYPE, &entry(0, 3, i, &[0x5a; 1500]));
    }
    e
}

#[test]
fn a_zeroed_tail_is_a_torn_tail_and_keeps_the_records_before_it() {
    let e = big_last_segment();
    let last = e.segs.len() - 1;
    // Zero from the first sector boundary inside the 35th entry to the end.
    let idx = e.offsets.len() - 6; // entry 35
    let (seg, off) = e.offsets[idx];
    assert_eq!(seg, last);
    let zero_from = (off / 512 + 1) * 512;
    let mut segs = e.segs.clone();
    for b in &mut segs[last][zero_from as usize..] {
        *b = 0;
    }
    let dir = tempfile::tempdir().unwrap();
    let paths = write_segs(dir.path(), &segs, 1 << 20);
    let wal = read_wal(dir.path()).unwrap();
    let torn = wal.torn_tail.as_ref().expect("torn tail");
    assert_eq!(torn.path, paths[last]);
    assert_eq!(torn.offset, off);
    assert!(
        matches!(torn.reason, TornReason::ZeroSector { .. }),
        "{torn:?}"
    );
    assert_eq!(wal.last_index, 34);
    assert_eq!(wal.records, idx as u64);
    assert_eq!(wal.valid_end, (last, off));
}

/// The last segment read alone (what the sidecar reads at boot) says what
/// the whole read says of the log's end when it reads clean, and says it is
/// not clean when a record in it is corrupt; a torn tail is clean, as etcd
/// repairs it.
#[test]
fn the_last_segment_alone_knows_its_end_and_whether_it_reads_clean() {
    let e = big_last_segment();
    let last = e.segs.len() - 1;
    let dir = tempfile::tempdir().unwrap();
    write_segs(dir.path(), &e.segs, 0);
    let whole = read_wal(dir.path()).unwrap();
    let end = last_segment(dir.path()).unwrap();
    assert!(end.clean, "{end:?}");
    assert_eq!(end.last_entry, whole.last_index);
    assert_eq!(end.last_entry, 40);
    assert_eq!(end.ids, Some((whole.member_id, whole.cluster_id)));
    assert_eq!(
        (end.commit, end.hard_term),
        (Some(whole.hard_state.commit), Some(whole.hard_state.term))
    );

    // A byte of entry 35's data flipped: its CRC fails mid-segment.
    let (_, off) = e.offsets[e.offsets.len() - 6];
    let mut segs = e.segs.clone();
    segs[last][off as usize + 8 + 100] ^= 0xff;
    let dir = tempfile::tempdir().unwrap();
    write_segs(dir.path(), &segs, 0);
    assert!(read_wal(dir.path()).is_err());
    let end = last_segment(dir.path()).unwrap();
    assert!(!end.clean, "{end:?}");

    // Its last record cut short: a torn tail, clean, the entry before it last.
    let (_, off) = *e.offsets.last().unwrap();
    let mut segs = e.segs.clone();
    segs[last].truncate(off as usize + 100);
    let dir = tempfile::tempdir().unwrap();
    write_segs(dir.path(), &segs, 0);
    let end = last_segment(dir.path()).unwrap();
    assert!(end.clean, "{end:?}");
    assert_eq!(end.last_entry, read_wal(dir.path()).unwrap().last_index);
    assert_eq!(end.last_entry, 39);
}

#[test]
fn a_zeroed_region_in_an_earlier_segment_is_corrupt() {
    let mut e = big_last_segment();
    let (_, off) = e.offsets[e.offsets.len() - 6];
    let zero_from = ((off / 512 + 1) * 512) as usize;
    for b in &mut e.segs[1][zero_from..] {
        *b = 0;
    }
    e.cut().rec(STATE_TYPE, &hard_state(3, NODE, 40));
    let dir = tempfile::tempdir().unwrap();
    let paths = e.write(dir.path(), 0);
    let (path, offset, kind) = corrupt_kind(read_wal(dir.path()).unwrap_err());
    assert_eq!((path, offset), (paths[1].clone(), off));
    assert!(matches!(kind, CorruptKind::TornRecord { .. }), "{kind}");
}

#[test]
fn a_truncated_last_record_is_a_torn_tail() {
    let e = big_last_segment();
    let last = e.segs.len() - 1;
    let (_, off) = *e.offsets.last().unwrap();
    for cut in [off + 3, off + 8, off + 100] {
        let mut segs = e.segs.clone();
        segs[last].truncate(cut as usize);
        let dir = tempfile::tempdir().unwrap();
        write_segs(dir.path(), &segs, 0);
        let wal = read_wal(dir.path()).unwrap();
        let torn = wal.torn_tail.expect("torn tail");
        assert_eq!(torn.offset, off, "cut at {cut}");
        assert_eq!(wal.last_index, 39);
        assert_eq!(wal.valid_end, (last, off));
    }
    // The same truncation in an earlier segment is corruption.
    let mut segs = e.segs.clone();
    segs[last].truncate(off as usize + 100);
    segs.push(Vec::new());
    let dir = tempfile::tempdir().unwrap();
    write_segs(dir.path(), &segs, 0);
    let (_, offset, kind) = corrupt_kind(read_wal(dir.path()).unwrap_err());
    assert_eq!(offset, off);
    assert!(
        matches!(
            kind,
            CorruptKind::TornRecord {
                reason: TornReason::PastEndOfFile { .. }
            }
        ),
        "{kind}"
    );
}

#[test]
fn a_huge_length_word_is_refused_without_allocating() {
    let e = two_segments();
    let last = e.segs.len() - 1;
    for word in [
        u64::MAX,
        LEN_MASK,
        MAX_RECORD_BYTES,
        0x87 << 56 | (MAX_RECORD_BYTES - 7),
    ] {
        let mut segs = e.segs.clone();
        let at = segs[last].len();
        segs[last].extend_from_slice(&word.to_le_bytes());
        segs[last].extend_from_slice(&[1u8; 64]);
        let dir = tempfile::tempdir().unwrap();
        write_segs(dir.path(), &segs, 0);
        let (_, offset, kind) = corrupt_kind(read_wal(dir.path()).unwrap_err());
        assert_eq!(offset, at as u64);
        assert!(matches!(kind, CorruptKind::RecordTooLarge { .. }), "{kind}");
    }
}

#[test]
fn zero_length_files() {
    // A lone empty segment has no metadata.
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join(segment_name(0, 0));
    std::fs::write(&p, b"").unwrap();
    let (path, offset, kind) = corrupt_kind(read_wal(dir.path()).unwrap_err());
    assert_eq!((path, offset, kind), (p, 0, CorruptKind::MissingMetadata));

    // An empty last segment after a good one: etcd starts; reported as torn.
    let dir = tempfile::tempdir().unwrap();
    let mut e = two_segments();
    e.segs.push(Vec::new());
    let paths = e.write(dir.path(), 0);
    let wal = read_wal(dir.path()).unwrap();
    let torn = wal.torn_tail.expect("torn tail");
    assert_eq!((torn.path, torn.offset), (paths[2].clone(), 0));
    assert_eq!(torn.reason, TornReason::EmptySegment);
    assert_eq!(wal.last_index, 30);
    assert_eq!(wal.valid_end, (2, 0));

    // An all-zero (preallocated) last segment is the same.
    let dir = tempfile::tempdir().unwrap();
    e.write(dir.path(), 4096);
    let wal = read_wal(dir.path()).unwrap();
    assert_eq!(wal.torn_tail.unwrap().reason, TornReason::EmptySegment);
}

#[test]
fn differing_metadata_is_corrupt() {
    let mut e = two_segments();
    e.cut().rec(METADATA_TYPE, &metadata(NODE, CLUSTER + 1));
    let dir = tempfile::tempdir().unwrap();
    let paths = e.write(dir.path(), 0);
    let (path, offset, kind) = corrupt_kind(read_wal(dir.path()).unwrap_err());
    assert_eq!(path, paths[2]);
    assert_eq!(offset, e.offsets.last().unwrap().1);
    assert_eq!(kind, CorruptKind::MetadataMismatch);
}

#[test]
fn an_unknown_record_type_is_corrupt() {
    let mut e = two_segments();
    e.rec(9, b"x");
    let dir = tempfile::tempdir().unwrap();
    e.write(dir.path(), 0);
    let (_, _, kind) = corrupt_kind(read_wal(dir.path()).unwrap_err());
    assert_eq!(kind, CorruptKind::BadRecordType { found: 9 });
}

#[test]
fn sequence_gaps_names_and_symlinks() {
    let e = two_segments();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join(segment_name(0, 0)), &e.segs[0]).unwrap();
    let second = dir.path().join(segment_name(2, 100));
    std::fs::write(&second, &e.segs[1]).unwrap();
    match read_wal(dir.path()).unwrap_err() {
        WalError::SeqGap {
            path,
            expected,
            found,
        } => assert_eq!((path, expected, found), (second.clone(), 1, 2)),
        other => panic!("{other:?}"),
    }
    std::fs::remove_file(&second).unwrap();
    let link = dir.path().join(segment_name(1, 100));
    std::os::unix::fs::symlink(dir.path().join(segment_name(0, 0)), &link).unwrap();
    assert!(matches!(
        read_wal(dir.path()).unwrap_err(),
        WalError::Symlink { path } if path == link
    ));
    std::fs::remove_file(&link).unwrap();
    std::fs::write(dir.path().join("1-1.wal"), b"").unwrap();
    assert!(matches!(
        read_wal(dir.path()).unwrap_err(),
        WalError::BadName { .. }
    ));
    std::fs::remove_file(dir.path().join("1-1.wal")).unwrap();
    std::fs::create_dir(dir.path().join(segment_name(1, 1))).unwrap();
    assert!(matches!(
        read_wal(dir.path()).unwrap_err(),
        WalError::NotRegularFile { .. }
    ));

    let empty = tempfile::tempdir().unwrap();
    std::fs::write(empty.path().join("0.tmp"), b"").unwrap();
    assert!(matches!(
        read_wal(empty.path()).unwrap_err(),
        WalError::NoSegments { .. }
    ));
    let missing = read_wal(&empty.path().join("nope")).unwrap_err();
    assert!(
        matches!(missing, WalError::Io(ref e) if e.op == "readdir"),
        "{missing}"
    );
}

#[test]
fn an_unreadable_segment_is_a_permission_error() {
    if nix::unistd::geteuid().is_root() {
        return; // root reads anything
    }
    let dir = tempfile::tempdir().unwrap();
    let paths = two_segments().write(dir.path(), 0);
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&paths[1], std::fs::Permissions::from_mode(0o000)).unwrap();
    match read_wal(dir.path()).unwrap_err() {
        WalError::Io(e) => assert!(e.is_permission(), "{e}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn an_overwritten_suffix_drops_its_conf_changes() {
    let mut e = two_segments();
    // A new leader overwrites from index 21: the learner add is gone.
    e.rec(ENTRY_TYPE, &entry(0, 3, 21, b"noop"));
    let dir = tempfile::tempdir().unwrap();
    e.write(dir.path(), 0);
    let wal = read_wal(dir.path()).unwrap();
    assert_eq!((wal.last_index, wal.last_term), (21, 3));
    assert_eq!(wal.conf_changes.len(), 1);
    assert_eq!(wal.conf_changes[0].index, 1);
}

#[test]
fn a_big_record_spanning_windows_reads() {
    let mut e = two_segments();
    let big = vec![0x11u8; WINDOW_BYTES + 12345];
    e.rec(ENTRY_TYPE, &entry(0, 3, 31, &big));
    e.rec(ENTRY_TYPE, &entry(0, 3, 32, b"after"));
    let dir = tempfile::tempdir().unwrap();
    e.write(dir.path(), 0);
    let wal = read_wal(dir.path()).unwrap();
    assert_eq!(wal.last_index, 32);
    assert!(wal.torn_tail.is_none());
}

#[test]
fn records_straddling_window_ends_read_correctly() {
    // Records of 0.6 windows: most of them start in one window and end in the
    // next, so the buffer carries their first part over.
    let mut e = two_segments();
    for i in 31..=40u8 {
        let body = vec![i; WINDOW_BYTES * 3 / 5 + usize::from(i)];
        e.rec(ENTRY_TYPE, &entry(0, 3, u64::from(i), &body));
    }
    e.rec(STATE_TYPE, &hard_state(3, NODE, 40));
    let dir = tempfile::tempdir().unwrap();
    let paths = e.write(dir.path(), 0);
    let wal = read_wal(dir.path()).unwrap();
    assert_eq!((wal.last_index, wal.hard_state.commit), (40, 40));
    assert!(wal.torn_tail.is_none());
    // A flipped byte in the carried-over part of a straddling record is found.
    let (seg, at) = e.offsets[e.offsets.len() - 4];
    let mut bytes = std::fs::read(&paths[seg]).unwrap();
    let flip = at as usize + 8 + WINDOW_BYTES / 10;
    bytes[flip] ^= 1;
    std::fs::write(&paths[seg], bytes).unwrap();
    let (_, offset, kind) = corrupt_kind(read_wal(dir.path()).unwrap_err());
    assert_eq!(offset, at);
    assert!(matches!(kind, CorruptKind::CrcMismatch { .. }), "{kind:?}");
}

/// Reads a real data dir: `EMA_REAL_WAL_DIR=/path/member/wal cargo test --lib
/// disk::wal -- --ignored --nocapture`.
#[test]
#[ignore]
fn real_wal_dir() {
    let Some(dir) = std::env::var_os("EMA_REAL_WAL_DIR") else {
        return;
    };
    let t = std::time::Instant::now();
    let wal = read_wal(Path::new(&dir)).unwrap();
    let took = t.elapsed();
    println!(
        "member {} cluster {} hs {:?} last {}/{} records {} torn {:?} end {:?} in {took:?}",
        wal.member_id,
        wal.cluster_id,
        wal.hard_state,
        wal.last_index,
        wal.last_term,
        wal.records,
        wal.torn_tail,
        wal.valid_end
    );
    for s in &wal.snapshots {
        println!("snapshot {s:?}");
    }
    for c in &wal.conf_changes {
        println!("conf change {c:?}");
    }
}

fn write_one(bytes: &[u8]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join(segment_name(0, 0)), bytes).unwrap();
    dir
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..2048)) {
        let dir = write_one(&bytes);
        let _ = read_wal(dir.path());
    }

    /// The parallel read is the sequential read, errors included, on any
    /// mutation of a log of several segments (crc chains across cuts,
    /// metadata in every segment, a truncation crossing a cut, v2 requests).
    #[test]
    fn the_parallel_read_equals_the_sequential_one(
        edits in proptest::collection::vec(
            (0usize..4, any::<proptest::sample::Index>(), any::<u8>()), 0..4),
        cut in proptest::option::of((0usize..4, any::<proptest::sample::Index>())),
        drop_segment in proptest::option::of(1usize..4),
    ) {
        let mut segs = several_segments().segs;
        for (seg, at, v) in edits {
            let bytes = &mut segs[seg];
            let i = at.index(bytes.len());
            bytes[i] = v;
        }
        if let Some((seg, at)) = cut {
            let n = at.index(segs[seg].len());
            segs[seg].truncate(n);
        }
        if let Some(seg) = drop_segment {
            segs[seg].clear();
        }
        let dir = tempfile::tempdir().unwrap();
        write_segs(dir.path(), &segs, 0);
        let one = format!("{:?}", read_wal_with(dir.path(), 1));
        for threads in [2, 4] {
            prop_assert_eq!(&one, &format!("{:?}", read_wal_with(dir.path(), threads)));
        }
    }

    #[test]
    fn mutations_of_a_valid_segment_never_panic(
        edits in proptest::collection::vec((any::<proptest::sample::Index>(), any::<u8>()), 1..8),
        cut in any::<proptest::sample::Index>(),
        truncate in any::<bool>(),
    ) {
        let e = big_last_segment();
        let mut bytes = e.segs.concat();
        for (at, v) in edits {
            let i = at.index(bytes.len());
            bytes[i] = v;
        }
        if truncate {
            bytes.truncate(cut.index(bytes.len()));
        }
        let dir = write_one(&bytes);
        if let Ok(wal) = read_wal(dir.path()) {
            // Whatever was read verified: the valid end is inside the file.
            prop_assert!(wal.valid_end.1 <= bytes.len() as u64);
        }
    }
}
