//! Decoders of the raft messages etcd writes into its WAL and `.snap` files
//! (`raftpb.Entry`, `HardState`, `ConfState`, `ConfChange` and the member JSON of
//! a ConfChange's context), shared by [`super::wal`] and [`super::snap`].

use serde::Serialize;

use crate::disk::ids::MemberId;
use crate::disk::member::Member;
use crate::disk::pb::{self, PbError, Value};

/// `raftpb.EntryType` of a (v1) `ConfChange` entry.
pub(crate) const ENTRY_CONF_CHANGE: u64 = 1;
/// `raftpb.EntryType` of a normal entry (also what an absent `Type` means).
pub(crate) const ENTRY_NORMAL: u64 = 0;

/// A raft message that does not decode.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// A protobuf message that does not decode.
    #[error("undecodable {what}: {source}")]
    Undecodable {
        /// Which message (`entry`, `hardstate`, `conf state`, ...).
        what: Message,
        /// The decoder's error.
        #[source]
        source: PbError,
    },
    /// A known protobuf field with the wrong wire type.
    #[error("{what} field {field} has the wrong wire type")]
    WrongWireType {
        /// The message being decoded.
        what: Message,
        /// The protobuf field number that came with an unexpected wire type.
        field: u32,
    },
}

/// The raft HardState last written to the log.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct HardState {
    /// Current term.
    pub term: u64,
    /// Member voted for in this term (0 = none).
    pub vote: MemberId,
    /// Highest index known committed.
    pub commit: u64,
}

/// `raftpb.ConfChangeType`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ConfChangeKind {
    /// 0: add a voter (also a learner's promotion, with `isPromote` in the context).
    AddNode,
    /// 1: remove a member.
    RemoveNode,
    /// 2: update a member's peer URLs.
    UpdateNode,
    /// 3: add a learner.
    AddLearnerNode,
    /// Any other value.
    Other(u64),
}

impl ConfChangeKind {
    fn from_raw(v: u64) -> Self {
        match v {
            0 => ConfChangeKind::AddNode,
            1 => ConfChangeKind::RemoveNode,
            2 => ConfChangeKind::UpdateNode,
            3 => ConfChangeKind::AddLearnerNode,
            other => ConfChangeKind::Other(other),
        }
    }
}

/// The member described by a ConfChange's context (etcd's `membership.Member`
/// JSON, or `ConfigChangeContext` which adds `isPromote`). Missing fields are
/// defaults.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct MemberAttrs {
    /// The member the change adds or updates, as the entry's context records it.
    #[serde(flatten)]
    pub member: Member,
    /// The change promotes a learner (3.5 `ConfigChangeContext`).
    pub is_promote: bool,
}

/// A membership change entry (`EntryConfChange`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ConfChangeRec {
    /// Raft index of the entry.
    pub index: u64,
    /// Raft term of the entry.
    pub term: u64,
    /// What the change does.
    pub kind: ConfChangeKind,
    /// The member it concerns.
    pub node_id: MemberId,
    /// The member JSON from the context; `None` when absent or not decodable.
    pub member: Option<MemberAttrs>,
}

/// The protobuf messages the WAL and `.snap` readers decode, named in their
/// errors as the messages are named in etcd's sources.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Message {
    /// `walpb.Record`, a WAL frame's payload.
    WalRecord,
    /// `etcdserverpb.Metadata` (the WAL's member and cluster ID).
    WalMetadata,
    /// `walpb.Snapshot` (a WAL snapshot record).
    WalSnapshot,
    /// `raftpb.Entry`.
    Entry,
    /// `raftpb.HardState`.
    HardState,
    /// `raftpb.ConfState`.
    ConfState,
    /// `raftpb.ConfChange`.
    ConfChange,
    /// `snappb.Snapshot`, a `.snap` file.
    SnapFile,
    /// `raftpb.Snapshot` inside it.
    RaftSnapshot,
    /// `raftpb.SnapshotMetadata`.
    SnapshotMetadata,
}

impl std::fmt::Display for Message {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Message::WalRecord => "record",
            Message::WalMetadata => "metadata",
            Message::WalSnapshot => "snapshot",
            Message::Entry => "entry",
            Message::HardState => "hardstate",
            Message::ConfState => "conf state",
            Message::ConfChange => "conf change",
            Message::SnapFile => "snappb.Snapshot",
            Message::RaftSnapshot => "raftpb.Snapshot",
            Message::SnapshotMetadata => "raftpb.SnapshotMetadata",
        })
    }
}

/// Maps a decoder failure of message `what`.
pub(crate) fn undecodable(what: Message) -> impl Fn(PbError) -> DecodeError {
    move |source| DecodeError::Undecodable { what, source }
}

/// A varint field, or the wrong wire type.
pub(crate) fn varint(v: Value<'_>, what: Message, field: u32) -> Result<u64, DecodeError> {
    match v {
        Value::Varint(x) => Ok(x),
        _ => Err(DecodeError::WrongWireType { what, field }),
    }
}

/// A length-delimited field, or the wrong wire type.
pub(crate) fn bytes<'a>(v: Value<'a>, what: Message, field: u32) -> Result<&'a [u8], DecodeError> {
    match v {
        Value::Bytes(b) => Ok(b),
        _ => Err(DecodeError::WrongWireType { what, field }),
    }
}

/// The fields of a `raftpb.Entry` the reader uses (the payload is borrowed).
pub(crate) struct Entry<'a> {
    /// `Type` (0 when absent).
    pub(crate) etype: u64,
    /// `Term`.
    pub(crate) term: u64,
    /// `Index`.
    pub(crate) index: u64,
    /// `Data`.
    pub(crate) data: &'a [u8],
}

/// Decodes `raftpb.Entry`.
pub(crate) fn decode_entry(data: &[u8]) -> Result<Entry<'_>, DecodeError> {
    const WHAT: Message = Message::Entry;
    let (mut etype, mut term, mut index, mut payload) = (0, 0, 0, &[][..]);
    for f in pb::fields(data) {
        match f.map_err(|source| DecodeError::Undecodable { what: WHAT, source })? {
            (1, v) => etype = varint(v, WHAT, 1)?,
            (2, v) => term = varint(v, WHAT, 2)?,
            (3, v) => index = varint(v, WHAT, 3)?,
            (4, v) => payload = bytes(v, WHAT, 4)?,
            _ => {}
        }
    }
    Ok(Entry {
        etype,
        term,
        index,
        data: payload,
    })
}

/// Decodes `raftpb.HardState`.
pub(crate) fn decode_hard_state(buf: &[u8]) -> Result<HardState, DecodeError> {
    const WHAT: Message = Message::HardState;
    let mut hs = HardState::default();
    for f in pb::fields(buf) {
        match f.map_err(undecodable(WHAT))? {
            (1, v) => hs.term = varint(v, WHAT, 1)?,
            (2, v) => hs.vote = MemberId::new(varint(v, WHAT, 2)?),
            (3, v) => hs.commit = varint(v, WHAT, 3)?,
            _ => {}
        }
    }
    Ok(hs)
}

/// Decodes `raftpb.ConfState` into (voters, learners); the repeated fields may
/// be packed or not.
pub(crate) fn decode_conf_state(buf: &[u8]) -> Result<(Vec<MemberId>, Vec<MemberId>), DecodeError> {
    const WHAT: Message = Message::ConfState;
    let (mut voters, mut learners) = (Vec::new(), Vec::new());
    for f in pb::fields(buf) {
        let (field, v) = f.map_err(undecodable(WHAT))?;
        let out = match field {
            1 => &mut voters,
            2 => &mut learners,
            _ => continue,
        };
        if !matches!(v, Value::Varint(_) | Value::Bytes(_)) {
            return Err(DecodeError::WrongWireType { what: WHAT, field });
        }
        pb::push_u64s(v, out).map_err(undecodable(WHAT))?;
    }
    let ids = |raw: Vec<u64>| raw.into_iter().map(MemberId::new).collect();
    Ok((ids(voters), ids(learners)))
}

/// Decodes a (v1) `raftpb.ConfChange`; index and term are the entry's, filled in
/// by the caller.
pub(crate) fn decode_conf_change(buf: &[u8]) -> Result<ConfChangeRec, DecodeError> {
    const WHAT: Message = Message::ConfChange;
    let (mut kind, mut node_id, mut context) = (0, 0, &[][..]);
    for f in pb::fields(buf) {
        match f.map_err(undecodable(WHAT))? {
            (2, v) => kind = varint(v, WHAT, 2)?,
            (3, v) => node_id = varint(v, WHAT, 3)?,
            (4, v) => context = bytes(v, WHAT, 4)?,
            _ => {}
        }
    }
    Ok(ConfChangeRec {
        index: 0,
        term: 0,
        kind: ConfChangeKind::from_raw(kind),
        node_id: MemberId::new(node_id),
        member: member_from_context(context),
    })
}

/// The member JSON of a ConfChange context. Go writes `null` for a nil slice.
#[derive(serde::Deserialize)]
struct MemberJson {
    #[serde(default)]
    id: u64,
    #[serde(default)]
    name: Option<String>,
    #[serde(default, rename = "peerURLs")]
    peer_urls: Option<Vec<String>>,
    #[serde(default, rename = "clientURLs")]
    client_urls: Option<Vec<String>>,
    #[serde(default, rename = "isLearner")]
    is_learner: Option<bool>,
    #[serde(default, rename = "isPromote")]
    is_promote: Option<bool>,
}

fn member_from_context(context: &[u8]) -> Option<MemberAttrs> {
    if context.is_empty() {
        return None;
    }
    let m: MemberJson = serde_json::from_slice(context).ok()?;
    Some(MemberAttrs {
        member: Member {
            id: MemberId::new(m.id),
            name: m.name.unwrap_or_default(),
            peer_urls: m.peer_urls.unwrap_or_default(),
            client_urls: m.client_urls.unwrap_or_default(),
            is_learner: m.is_learner.unwrap_or_default(),
        },
        is_promote: m.is_promote.unwrap_or_default(),
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Appends a protobuf varint.
    pub(crate) fn put_varint(out: &mut Vec<u8>, mut v: u64) {
        while v >= 0x80 {
            out.push((v as u8) | 0x80);
            v >>= 7;
        }
        out.push(v as u8);
    }

    /// Appends a varint field.
    pub(crate) fn put_u64(out: &mut Vec<u8>, field: u32, v: u64) {
        put_varint(out, u64::from(field) << 3);
        put_varint(out, v);
    }

    /// Appends a length-delimited field.
    pub(crate) fn put_bytes(out: &mut Vec<u8>, field: u32, b: &[u8]) {
        put_varint(out, (u64::from(field) << 3) | 2);
        put_varint(out, b.len() as u64);
        out.extend_from_slice(b);
    }

    pub(crate) fn conf_state(voters: &[u64], learners: &[u64]) -> Vec<u8> {
        let mut out = Vec::new();
        for &v in voters {
            put_u64(&mut out, 1, v);
        }
        for &l in learners {
            put_u64(&mut out, 2, l);
        }
        out
    }

    #[test]
    fn context_json_variants() {
        let m = member_from_context(
            br#"{"id":1,"peerURLs":null,"name":"a","isLearner":true,"isPromote":true}"#,
        )
        .unwrap();
        assert_eq!(m.member.id, MemberId::new(1));
        assert!(m.member.peer_urls.is_empty() && m.member.is_learner && m.is_promote);
        assert_eq!(member_from_context(b""), None);
        assert_eq!(member_from_context(b"{not json"), None);
        assert_eq!(member_from_context(b"{}").unwrap(), MemberAttrs::default());
    }
}
