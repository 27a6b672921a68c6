//! The `.snap` reader: lists `member/snap/%016x-%016x.snap` files and reads one
//! the way etcd's snapshotter does, to learn the raft snapshot's index, term and
//! conf state and the membership stored in its v2 store JSON.
//!
//! The membership matters because after a 3.4 `snapshot restore` the backend's
//! `members` bucket may still describe the source cluster; the `.snap` is the
//! authoritative copy. A file is checked like etcd's `snap.Read`: an empty file,
//! empty data or a zero CRC is [`SnapError::Empty`], and the CRC-32C of the data
//! (fresh, not chained) must match. The whole file is read into memory, as etcd
//! does, but only up to [`MAX_SNAP_BYTES`]; the JSON is decoded into just the
//! nodes under `/0` (the v2 keyspace under `/1` is skipped, not built).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::disk::dir::{self, lstat, parse_hex_pair};
use crate::disk::ids::MemberId;
use crate::disk::member::Member;
use crate::disk::pb::{self, PbError, Value};
use crate::disk::raftpb::{self, DecodeError, Message};
use crate::disk::reader::{Block, IoError, PosReader};

/// Larger `.snap` files are refused before anything is allocated.
pub const MAX_SNAP_BYTES: u64 = 1024 * 1024 * 1024;

/// A `.snap` file found in the snap directory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SnapName {
    /// The snap dir joined with the name as listed.
    pub path: PathBuf,
    /// Raft term from the name.
    pub term: u64,
    /// Raft index from the name.
    pub index: u64,
}

/// What a `.snap` file says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SnapFile {
    /// The `.snap` file these facts come from.
    pub path: PathBuf,
    /// Raft term from the snapshot metadata.
    pub term: u64,
    /// Raft index from the snapshot metadata.
    pub index: u64,
    /// Voters from the snapshot's conf state.
    pub voters: Vec<MemberId>,
    /// Learners from the snapshot's conf state.
    pub learners: Vec<MemberId>,
    /// Members under `/0/members`, by ID.
    pub members: Vec<Member>,
    /// IDs under `/0/removed_members`, ascending. (The v2 store spells it so;
    /// `members_removed` is the bbolt bucket.)
    pub removed: Vec<MemberId>,
    /// `/0/version`, the cluster version, when set.
    pub cluster_version: Option<String>,
    /// Top-level v2 store nodes holding custom content (v2 API data), which
    /// etcd 3.6 refuses to load (see [`custom_content`]).
    pub v2_custom: Vec<String>,
}

/// A failure to list or read `.snap` files.
#[derive(Debug, thiserror::Error)]
pub enum SnapError {
    /// Listing the directory or reading the file failed (see
    /// [`IoError::is_permission`] for unreadable files).
    #[error(transparent)]
    Io(#[from] IoError),
    /// A `*.snap` entry whose name is not `%016x-%016x.snap`.
    #[error("bad snapshot file name {path}")]
    BadName {
        /// The entry.
        path: PathBuf,
    },
    /// A `*.snap` entry that is a symbolic link (never followed).
    #[error("snapshot file {path} is a symbolic link")]
    Symlink {
        /// The entry.
        path: PathBuf,
    },
    /// A `*.snap` entry that is not a regular file.
    #[error("snapshot file {path} is not a regular file")]
    NotRegularFile {
        /// The entry.
        path: PathBuf,
    },
    /// A file larger than [`MAX_SNAP_BYTES`].
    #[error("snapshot file {path} is {len} bytes, more than the {limit}-byte limit")]
    TooLarge {
        /// The file.
        path: PathBuf,
        /// Its size.
        len: u64,
        /// The limit.
        limit: u64,
    },
    /// An empty file, empty data or a zero CRC (etcd's `ErrEmptySnapshot`).
    #[error("snapshot file {path} is empty")]
    Empty {
        /// The file.
        path: PathBuf,
    },
    /// A protobuf message that does not decode.
    #[error("snapshot file {path}: undecodable {what}: {source}")]
    Undecodable {
        /// The file.
        path: PathBuf,
        /// Which message (`snappb.Snapshot`, `raftpb.Snapshot`, ...).
        what: Message,
        /// The decoder's error.
        #[source]
        source: PbError,
    },
    /// A known protobuf field with the wrong wire type.
    #[error("snapshot file {path}: {what} field {field} has the wrong wire type")]
    WrongWireType {
        /// The file.
        path: PathBuf,
        /// Which message.
        what: Message,
        /// The field number.
        field: u32,
    },
    /// The conf state does not decode.
    #[error("snapshot file {path}: {kind}")]
    ConfState {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        #[source]
        kind: DecodeError,
    },
    /// The data's CRC-32C differs from the stored one (etcd's `ErrCRCMismatch`).
    #[error(
        "snapshot file {path}: crc mismatch: computed {expected:#010x}, file says {found:#010x}"
    )]
    CrcMismatch {
        /// The file.
        path: PathBuf,
        /// CRC-32C of the data.
        expected: u32,
        /// The stored CRC.
        found: u32,
    },
    /// The v2 store JSON, or a member's attributes in it, does not decode.
    #[error("snapshot file {path}: bad {what} JSON: {source}")]
    Json {
        /// The file.
        path: PathBuf,
        /// Which JSON (`v2 store`, `raftAttributes`, `attributes`).
        what: &'static str,
        /// The JSON error.
        #[source]
        source: serde_json::Error,
    },
    /// A key under `/0/members` or `/0/removed_members` that is not a hex ID.
    #[error("snapshot file {path}: member key {key:?} is not a hex ID")]
    BadMemberKey {
        /// The file.
        path: PathBuf,
        /// The key.
        key: String,
    },
    /// The name says one term/index, the metadata another.
    #[error("snapshot file {path} holds term {term} index {index}, not what its name says")]
    NameMismatch {
        /// The file.
        path: PathBuf,
        /// Term from the metadata.
        term: u64,
        /// Index from the metadata.
        index: u64,
    },
}

impl SnapError {
    /// True when the cause is a permission problem: unreadable, not corrupt.
    pub(crate) fn is_permission(&self) -> bool {
        matches!(self, SnapError::Io(e) if e.is_permission())
    }
}

/// Builds a snapshot file name, `%016x-%016x.snap` (term, index).
pub fn snap_file_name(term: u64, index: u64) -> String {
    format!("{term:016x}-{index:016x}.snap")
}

/// Parses a snapshot file name into (term, index); only the exact form etcd
/// writes is accepted.
pub fn parse_snap_name(name: &str) -> Option<(u64, u64)> {
    parse_hex_pair(name.strip_suffix(".snap")?)
}

/// Lists the `*.snap` files of `snap_dir`, sorted by (term, index). The backend
/// (`db`), received backends (`*.snap.db`), `tmp*`/`db.tmp*` leftovers and
/// `*.broken` files are ignored.
pub fn list_snaps(snap_dir: &Path) -> Result<Vec<SnapName>, SnapError> {
    let mut out = Vec::new();
    for dir::DirEntry { name, path, .. } in dir::list(snap_dir)? {
        if !name.ends_with(".snap") || name.starts_with("tmp") || name.starts_with("db.tmp") {
            continue;
        }
        let meta = lstat(&path)?;
        if meta.file_type().is_symlink() {
            return Err(SnapError::Symlink { path });
        }
        if !meta.is_file() {
            return Err(SnapError::NotRegularFile { path });
        }
        let Some((term, index)) = parse_snap_name(&name) else {
            return Err(SnapError::BadName { path });
        };
        out.push(SnapName { path, term, index });
    }
    out.sort_by_key(|s| (s.term, s.index));
    Ok(out)
}

/// Reads and verifies one `.snap` file.
#[tracing::instrument(level = "debug", skip_all, fields(path = %path.display()))]
pub fn read_snap(path: &Path) -> Result<SnapFile, SnapError> {
    let file = PosReader::open(path)?;
    if file.len() > MAX_SNAP_BYTES {
        return Err(SnapError::TooLarge {
            path: path.to_path_buf(),
            len: file.len(),
            limit: MAX_SNAP_BYTES,
        });
    }
    let bytes = file.read_block(Block {
        offset: 0,
        len: file.len(),
    })?;
    parse_snap(path, &bytes)
}

/// Decodes the bytes of a `.snap` file; `path` is for errors and the name check.
fn parse_snap(path: &Path, bytes: &[u8]) -> Result<SnapFile, SnapError> {
    let p = || path.to_path_buf();
    let undecodable = |what| {
        move |source| SnapError::Undecodable {
            path: p(),
            what,
            source,
        }
    };
    if bytes.is_empty() {
        return Err(SnapError::Empty { path: p() });
    }
    const OUTER: Message = Message::SnapFile;
    let (mut crc, mut data) = (0u32, &[][..]);
    for f in pb::fields(bytes) {
        match f.map_err(undecodable(OUTER))? {
            (1, v) => crc = varint_of(path, v, OUTER, 1)? as u32,
            (2, v) => data = bytes_of(path, v, OUTER, 2)?,
            _ => {}
        }
    }
    if data.is_empty() || crc == 0 {
        return Err(SnapError::Empty { path: p() });
    }
    let computed = crate::disk::crc::of(data);
    if computed != crc {
        return Err(SnapError::CrcMismatch {
            path: p(),
            expected: computed,
            found: crc,
        });
    }

    const RAFT: Message = Message::RaftSnapshot;
    const META: Message = Message::SnapshotMetadata;
    let (mut store, mut meta) = (&[][..], &[][..]);
    for f in pb::fields(data) {
        match f.map_err(undecodable(RAFT))? {
            (1, v) => store = bytes_of(path, v, RAFT, 1)?,
            (2, v) => meta = bytes_of(path, v, RAFT, 2)?,
            _ => {}
        }
    }
    let (mut index, mut term) = (0, 0);
    let (mut voters, mut learners) = (Vec::new(), Vec::new());
    for f in pb::fields(meta) {
        match f.map_err(undecodable(META))? {
            (1, v) => {
                (voters, learners) = raftpb::decode_conf_state(bytes_of(path, v, META, 1)?)
                    .map_err(|kind| SnapError::ConfState { path: p(), kind })?;
            }
            (2, v) => index = varint_of(path, v, META, 2)?,
            (3, v) => term = varint_of(path, v, META, 3)?,
            _ => {}
        }
    }
    let named = path
        .file_name()
        .and_then(|n| n.to_str())
        .and_then(parse_snap_name);
    if named.is_some_and(|n| n != (term, index)) {
        return Err(SnapError::NameMismatch {
            path: p(),
            term,
            index,
        });
    }

    let (members, removed, cluster_version, v2_custom) = membership(path, store)?;
    Ok(SnapFile {
        path: p(),
        term,
        index,
        voters,
        learners,
        members,
        removed,
        cluster_version,
        v2_custom,
    })
}

fn wrong_wire(path: &Path, what: Message, field: u32) -> SnapError {
    SnapError::WrongWireType {
        path: path.to_path_buf(),
        what,
        field,
    }
}

fn varint_of(path: &Path, v: Value<'_>, what: Message, field: u32) -> Result<u64, SnapError> {
    match v {
        Value::Varint(x) => Ok(x),
        _ => Err(wrong_wire(path, what, field)),
    }
}

fn bytes_of<'a>(
    path: &Path,
    v: Value<'a>,
    what: Message,
    field: u32,
) -> Result<&'a [u8], SnapError> {
    match v {
        Value::Bytes(b) => Ok(b),
        _ => Err(wrong_wire(path, what, field)),
    }
}

/// The v2 store as etcd serializes it; only `Root.Children["0"]` is decoded.
#[derive(Deserialize)]
struct Store {
    #[serde(rename = "Root")]
    root: Option<RootNode>,
}

#[derive(Deserialize)]
struct RootNode {
    #[serde(rename = "Children")]
    children: Option<RootChildren>,
}

#[derive(Deserialize)]
struct RootChildren {
    #[serde(rename = "0")]
    zero: Option<Node>,
    /// The other top-level nodes (`/1` the v2 keys, `/2` v2 auth), two levels deep.
    #[serde(flatten)]
    others: BTreeMap<String, Shallow>,
}

/// A node read two levels deep: only whether it and its children have children.
#[derive(Deserialize)]
struct Shallow {
    #[serde(rename = "Children", default)]
    children: Option<BTreeMap<String, Shallower>>,
}

#[derive(Deserialize)]
struct Shallower {
    #[serde(rename = "Children", default)]
    children: Option<BTreeMap<String, serde::de::IgnoredAny>>,
}

/// The top-level v2 store nodes that etcd 3.6 calls custom content
/// (`membership.IsMetaStoreOnly`): any node but `/0` with children, except `/2`
/// (v2 auth), which counts only when one of its children has children (an
/// emptied auth store keeps `/2/enabled`, `/2/users`, `/2/roles`).
fn custom_content(others: &BTreeMap<String, Shallow>) -> Vec<String> {
    // `store.Get` leaves out hidden nodes (a name starting with `_`), at every level.
    let visible = |name: &str| !name.starts_with('_');
    let mut out = Vec::new();
    for (key, node) in others.iter().filter(|(k, _)| visible(k)) {
        let children = node
            .children
            .as_ref()
            .filter(|c| c.keys().any(|k| visible(k)));
        let custom = match (key.as_str(), children) {
            (_, None) => false,
            ("2", Some(c)) => c.iter().filter(|(k, _)| visible(k)).any(|(_, n)| {
                n.children
                    .as_ref()
                    .is_some_and(|g| g.keys().any(|k| visible(k)))
            }),
            (_, Some(_)) => true,
        };
        if custom {
            out.push(format!("/{key}"));
        }
    }
    out
}

/// A v2 store node: a value, or children keyed by base name (`null` for a leaf).
#[derive(Deserialize)]
struct Node {
    #[serde(rename = "Value", default)]
    value: Option<String>,
    #[serde(rename = "Children", default)]
    children: Option<BTreeMap<String, Node>>,
}

impl Node {
    fn child(&self, name: &str) -> Option<&Node> {
        self.children.as_ref()?.get(name)
    }
}

/// `membership.RaftAttributes`.
#[derive(Deserialize)]
struct RaftAttributes {
    #[serde(rename = "peerURLs", default)]
    peer_urls: Option<Vec<String>>,
    #[serde(rename = "isLearner", default)]
    is_learner: Option<bool>,
}

/// `membership.Attributes`.
#[derive(Deserialize)]
struct Attributes {
    #[serde(default)]
    name: Option<String>,
    #[serde(rename = "clientURLs", default)]
    client_urls: Option<Vec<String>>,
}

type Membership = (Vec<Member>, Vec<MemberId>, Option<String>, Vec<String>);

fn membership(path: &Path, store: &[u8]) -> Result<Membership, SnapError> {
    let json = |what| {
        move |source| SnapError::Json {
            path: path.to_path_buf(),
            what,
            source,
        }
    };
    let store: Store = serde_json::from_slice(store).map_err(json("v2 store"))?;
    let Some(children) = store.root.and_then(|r| r.children) else {
        return Ok((Vec::new(), Vec::new(), None, Vec::new()));
    };
    let custom = custom_content(&children.others);
    let Some(zero) = children.zero else {
        return Ok((Vec::new(), Vec::new(), None, custom));
    };
    let id_of = |key: &str| {
        u64::from_str_radix(key, 16)
            .map(MemberId::new)
            .map_err(|_| SnapError::BadMemberKey {
                path: path.to_path_buf(),
                key: key.to_string(),
            })
    };

    let mut members = Vec::new();
    let listed = zero.child("members").and_then(|n| n.children.as_ref());
    for (key, node) in listed.into_iter().flatten() {
        let mut m = Member {
            id: id_of(key)?,
            ..Member::default()
        };
        if let Some(v) = node.child("raftAttributes").and_then(|n| n.value.as_ref()) {
            let ra: RaftAttributes = serde_json::from_str(v).map_err(json("raftAttributes"))?;
            m.peer_urls = ra.peer_urls.unwrap_or_default();
            m.is_learner = ra.is_learner.unwrap_or_default();
        }
        if let Some(v) = node.child("attributes").and_then(|n| n.value.as_ref()) {
            let a: Attributes = serde_json::from_str(v).map_err(json("attributes"))?;
            m.name = a.name.unwrap_or_default();
            m.client_urls = a.client_urls.unwrap_or_default();
        }
        members.push(m);
    }
    members.sort_by_key(|m| m.id);

    let mut removed = Vec::new();
    let listed = zero
        .child("removed_members")
        .and_then(|n| n.children.as_ref());
    for key in listed.into_iter().flat_map(|c| c.keys()) {
        removed.push(id_of(key)?);
    }
    removed.sort_unstable();

    let version = zero
        .child("version")
        .and_then(|n| n.value.clone())
        .filter(|v| !v.is_empty());
    Ok((members, removed, version, custom))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn custom_v2_content_is_what_etcd_3_6_calls_custom() {
        let parse = |json: &str| -> Vec<String> {
            let c: RootChildren = serde_json::from_str(json).expect("json");
            custom_content(&c.others)
        };
        // An emptied v2 auth store and an emptied keyspace are not custom.
        assert!(parse(r#"{"0":{"Children":{}},"1":{"Children":{}},"2":{"Children":{"enabled":{"Value":"false","Children":null},"users":{"Children":{}},"roles":{"Children":{}}}}}"#).is_empty());
        // A leaf at the top is not either (etcd counts children only).
        assert!(parse(r#"{"3":{"Value":"x","Children":null}}"#).is_empty());
        assert_eq!(parse(r#"{"1":{"Children":{"k":{"Value":"v"}}}}"#), ["/1"]);
        // Hidden nodes (`_name`) are not listed by etcd's store.Get.
        assert!(
            parse(r#"{"1":{"Children":{"_k":{"Value":"v"}}},"_x":{"Children":{"k":{}}}}"#)
                .is_empty()
        );
        assert_eq!(
            parse(r#"{"2":{"Children":{"users":{"Children":{"root":{"Value":"{}"}}}}}}"#),
            ["/2"]
        );
    }
    use crate::disk::raftpb::tests::{conf_state, put_bytes, put_u64};
    use proptest::prelude::*;

    /// A v2 store like etcd 3.5 writes: one voter, one learner, one removed
    /// member, and a key under `/1` that the reader must skip.
    const STORE: &str = r#"{"Root":{"Path":"/","CreatedIndex":0,"ModifiedIndex":0,"ExpireTime":"0001-01-01T00:00:00Z","Value":"","Children":{
      "0":{"Path":"/0","Value":"","Children":{
        "members":{"Path":"/0/members","Value":"","Children":{
          "c0234bda4e532fe":{"Path":"/0/members/c0234bda4e532fe","Value":"","Children":{
            "attributes":{"Path":"/0/members/c0234bda4e532fe/attributes","Value":"{\"name\":\"m0\",\"clientURLs\":[\"http://127.0.0.1:2379\"]}","Children":null},
            "raftAttributes":{"Path":"/0/members/c0234bda4e532fe/raftAttributes","Value":"{\"peerURLs\":[\"http://127.0.0.1:2380\"]}","Children":null}}},
          "a":{"Path":"/0/members/a","Value":"","Children":{
            "raftAttributes":{"Path":"/0/members/a/raftAttributes","Value":"{\"peerURLs\":null,\"isLearner\":true}","Children":null}}}}},
        "removed_members":{"Path":"/0/removed_members","Value":"","Children":{
          "ff":{"Path":"/0/removed_members/ff","Value":"removed","Children":null}}},
        "version":{"Path":"/0/version","Value":"3.5.0","Children":null}}},
      "1":{"Path":"/1","Value":"","Children":{"k":{"Path":"/1/k","Value":"v","Children":null}}}}},
      "WatcherHub":{"EventHistory":{"Queue":{"Events":[null,null]}}},"CurrentIndex":3,"CurrentVersion":2}"#;

    fn raft_snapshot(store: &[u8], index: u64, term: u64) -> Vec<u8> {
        let mut meta = Vec::new();
        put_bytes(&mut meta, 1, &conf_state(&[0xc0234bda4e532fe], &[10]));
        put_u64(&mut meta, 2, index);
        put_u64(&mut meta, 3, term);
        let mut out = Vec::new();
        put_bytes(&mut out, 1, store);
        put_bytes(&mut out, 2, &meta);
        out
    }

    fn snap_bytes(data: &[u8], crc: u32) -> Vec<u8> {
        let mut out = Vec::new();
        put_u64(&mut out, 1, u64::from(crc));
        put_bytes(&mut out, 2, data);
        out
    }

    fn write_snap(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, bytes).unwrap();
        p
    }

    fn good_file() -> Vec<u8> {
        let data = raft_snapshot(STORE.as_bytes(), 0xff, 2);
        snap_bytes(&data, crc32c::crc32c(&data))
    }

    #[test]
    fn names_round_trip() {
        for (t, i) in [(0, 0), (2, 0xff), (u64::MAX, 1)] {
            assert_eq!(parse_snap_name(&snap_file_name(t, i)), Some((t, i)));
        }
        assert_eq!(
            snap_file_name(2, 0x33),
            "0000000000000002-0000000000000033.snap"
        );
        for bad in [
            "db",
            "0000000000000033.snap.db",
            "2-33.snap",
            "x.snap.broken",
        ] {
            assert_eq!(parse_snap_name(bad), None, "{bad}");
        }
    }

    #[test]
    fn reads_membership_and_metadata() {
        let dir = tempfile::tempdir().unwrap();
        let p = write_snap(dir.path(), &snap_file_name(2, 0xff), &good_file());
        let s = read_snap(&p).unwrap();
        assert_eq!((s.term, s.index), (2, 0xff));
        assert_eq!(s.voters, vec![MemberId::new(0xc0234bda4e532fe)]);
        assert_eq!(s.learners, vec![MemberId::new(10)]);
        assert_eq!(s.removed, vec![MemberId::new(0xff)]);
        assert_eq!(s.cluster_version.as_deref(), Some("3.5.0"));
        assert_eq!(s.v2_custom, ["/1"], "the key under /1 is v2 content");
        assert_eq!(
            s.members,
            vec![
                Member {
                    id: MemberId::new(10),
                    is_learner: true,
                    ..Member::default()
                },
                Member {
                    id: MemberId::new(0xc0234bda4e532fe),
                    name: "m0".into(),
                    peer_urls: vec!["http://127.0.0.1:2380".into()],
                    client_urls: vec!["http://127.0.0.1:2379".into()],
                    is_learner: false,
                },
            ]
        );
        let json = serde_json::to_value(&s).unwrap();
        assert_eq!(json["members"][1]["id"], "0c0234bda4e532fe");
    }

    #[test]
    fn a_bad_crc_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let mut bytes = good_file();
        let last = bytes.len() - 1;
        bytes[last] ^= 0x20;
        let p = write_snap(dir.path(), &snap_file_name(2, 0xff), &bytes);
        assert!(matches!(
            read_snap(&p).unwrap_err(),
            SnapError::CrcMismatch { path, .. } if path == p
        ));
    }

    #[test]
    fn a_snapshot_larger_than_the_limit_is_refused_before_reading() {
        // A sparse file one byte over the limit: refused by its size, before a
        // byte is read or a buffer allocated.
        let dir = tempfile::tempdir().unwrap();
        let p = write_snap(dir.path(), &snap_file_name(2, 0xff), &good_file());
        std::fs::OpenOptions::new()
            .write(true)
            .open(&p)
            .unwrap()
            .set_len(MAX_SNAP_BYTES + 1)
            .unwrap();
        assert!(matches!(
            read_snap(&p).unwrap_err(),
            SnapError::TooLarge { len, limit: MAX_SNAP_BYTES, .. } if len == MAX_SNAP_BYTES + 1
        ));
    }

    #[test]
    fn empty_files_and_empty_data_are_empty() {
        let dir = tempfile::tempdir().unwrap();
        let p = write_snap(dir.path(), &snap_file_name(1, 1), b"");
        assert!(matches!(
            read_snap(&p).unwrap_err(),
            SnapError::Empty { .. }
        ));
        let data = raft_snapshot(b"{}", 1, 1);
        let p = write_snap(dir.path(), &snap_file_name(1, 1), &snap_bytes(&data, 0));
        assert!(matches!(
            read_snap(&p).unwrap_err(),
            SnapError::Empty { .. }
        ));
    }

    #[test]
    fn name_and_metadata_must_agree() {
        let dir = tempfile::tempdir().unwrap();
        let p = write_snap(dir.path(), &snap_file_name(2, 0x100), &good_file());
        assert!(matches!(
            read_snap(&p).unwrap_err(),
            SnapError::NameMismatch {
                term: 2,
                index: 0xff,
                ..
            }
        ));
        // A file under another name is read as it is.
        let p = write_snap(dir.path(), "copy", &good_file());
        assert_eq!(read_snap(&p).unwrap().index, 0xff);
    }

    #[test]
    fn bad_json_and_member_keys_are_errors() {
        let dir = tempfile::tempdir().unwrap();
        let cases: [(&str, &str); 3] = [
            ("{", "v2 store"),
            (
                r#"{"Root":{"Children":{"0":{"Children":{"members":{"Children":{"1":{"Children":{"attributes":{"Value":"{"}}}}}}}}}}"#,
                "attributes",
            ),
            (
                r#"{"Root":{"Children":{"0":{"Children":{"removed_members":{"Children":{"zz":{}}}}}}}}"#,
                "",
            ),
        ];
        for (store, what_expected) in cases {
            let data = raft_snapshot(store.as_bytes(), 1, 1);
            let p = write_snap(dir.path(), "s", &snap_bytes(&data, crc32c::crc32c(&data)));
            match read_snap(&p).unwrap_err() {
                SnapError::Json { what, .. } => assert_eq!(what, what_expected),
                SnapError::BadMemberKey { key, .. } => assert_eq!(key, "zz"),
                other => panic!("{other:?}"),
            }
        }
        // No /0 at all: no members, not an error.
        let data = raft_snapshot(br#"{"Root":{"Children":null}}"#, 1, 1);
        let p = write_snap(dir.path(), "s", &snap_bytes(&data, crc32c::crc32c(&data)));
        assert!(read_snap(&p).unwrap().members.is_empty());
    }

    #[test]
    fn lists_only_snap_files_in_order() {
        let dir = tempfile::tempdir().unwrap();
        for name in [
            snap_file_name(3, 1),
            snap_file_name(2, 0x100),
            snap_file_name(2, 0xff),
            "db".into(),
            "0000000000000100.snap.db".into(),
            "tmp123".into(),
            "tmp1.snap".into(),
            "db.tmp.1".into(),
            format!("{}.broken", snap_file_name(9, 9)),
        ] {
            std::fs::write(dir.path().join(name), b"").unwrap();
        }
        let got: Vec<_> = list_snaps(dir.path())
            .unwrap()
            .into_iter()
            .map(|s| (s.term, s.index))
            .collect();
        assert_eq!(got, vec![(2, 0xff), (2, 0x100), (3, 1)]);

        let link = dir.path().join(snap_file_name(4, 4));
        std::os::unix::fs::symlink(dir.path().join("db"), &link).unwrap();
        assert!(matches!(
            list_snaps(dir.path()).unwrap_err(),
            SnapError::Symlink { .. }
        ));
        std::fs::remove_file(&link).unwrap();
        std::fs::write(dir.path().join("x.snap"), b"").unwrap();
        assert!(matches!(
            list_snaps(dir.path()).unwrap_err(),
            SnapError::BadName { .. }
        ));
    }

    /// Reads real `.snap` files: `EMA_REAL_SNAP_DIR=/path/member/snap cargo test
    /// --lib disk::snap -- --ignored --nocapture`.
    #[test]
    #[ignore]
    fn real_snap_dir() {
        let Some(dir) = std::env::var_os("EMA_REAL_SNAP_DIR") else {
            return;
        };
        for s in list_snaps(Path::new(&dir)).unwrap() {
            println!("{:?}", read_snap(&s.path).unwrap());
        }
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..1024)) {
            let dir = tempfile::tempdir().unwrap();
            let p = write_snap(dir.path(), "s", &bytes);
            let _ = read_snap(&p);
        }

        #[test]
        fn mutated_stores_never_panic(
            edits in proptest::collection::vec((any::<proptest::sample::Index>(), any::<u8>()), 1..6),
        ) {
            // Mutate the JSON and fix the CRC, so the JSON decoder is exercised.
            let mut store = STORE.as_bytes().to_vec();
            for (at, v) in edits {
                let i = at.index(store.len());
                store[i] = v;
            }
            let data = raft_snapshot(&store, 1, 1);
            let bytes = snap_bytes(&data, crc32c::crc32c(&data));
            let dir = tempfile::tempdir().unwrap();
            let p = write_snap(dir.path(), "s", &bytes);
            let _ = read_snap(&p);
        }
    }
}
