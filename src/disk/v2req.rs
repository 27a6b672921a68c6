//! v2 requests in the WAL: which normal entries etcd 3.6 and 3.7 cannot replay.
//!
//! Up to 3.5 etcd proposed some requests in the v2 format (`etcdserverpb.Request`,
//! raw, not wrapped in an `InternalRaftRequest`): every v2 API write, and the
//! member attributes and the cluster version it publishes itself. On start etcd
//! replays every committed entry after the snapshot it loads, applied or not, and:
//!
//! * **3.6** (`etcdserver/apply_v2.go`, `v2ToV3Request`) converts a v2 request
//!   only when it is a `PUT` of a member's attributes (the path matches
//!   `/0/members/<hex>/attributes`, unanchored as etcd matches it) or of the
//!   cluster version (`/0/version`); any other one panics "detected disallowed v2
//!   WAL for stage --v2-deprecation=write-only". That holds for a v2 request
//!   wrapped in `InternalRaftRequest.v2` (field 2) too.
//! * **3.7** (`etcdserver/apply/apply.go`) decodes every replayed entry as an
//!   `InternalRaftRequest` and panics "unmarshal should never fail" on a raw v2
//!   request, whatever it holds. A wrapped one decodes (field 2 is reserved, so
//!   unknown) and is not applied.
//!
//! How a raw v2 request is told from an `InternalRaftRequest`: etcd tries the
//! latter first (`pbutil.MaybeUnmarshal`). A v2 request's field 2 is its method,
//! an upper-case word (`PUT`, `GET`, `POST`, `DELETE`, `QGET`, `SYNC`, `HEAD`);
//! read as the `InternalRaftRequest.v2` message those bytes never decode (each
//! method's first bytes are an invalid wire type or a wrong one for the field
//! they name), so etcd falls back to the v2 format. Here: field 2 holding such a
//! word is a raw v2 request; field 2 holding a message whose own field 2 is such a
//! word is a wrapped one; anything else is a v3 request and ignored.
//!
//! Memory is bounded: only the newest [`KEEP`] requests of each kind are kept
//! (the check needs those after the start snapshot and at or below the commit,
//! which are the newest ones; an overwritten suffix drops its requests as raft
//! truncates the log).

use std::collections::VecDeque;

use serde::Serialize;

use crate::disk::pb::{self, Value};

/// Requests kept per kind.
pub const KEEP: usize = 256;
/// Bytes of a path kept for the report.
const PATH_BYTES: usize = 160;

/// One v2 request found in the WAL.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct V2Request {
    /// Raft index of its entry.
    pub index: u64,
    /// Raft term of its entry.
    pub term: u64,
    /// The HTTP method (`PUT`, `DELETE`, …).
    pub method: String,
    /// The v2 store path (cut at 160 bytes).
    pub path: String,
    /// Raw (`etcdserverpb.Request`), as opposed to wrapped in an `InternalRaftRequest`.
    pub raw: bool,
    /// etcd 3.6 converts it (a `PUT` of member attributes or of the cluster version).
    pub allowed_by_3_6: bool,
}

/// The v2 requests of a WAL, newest [`KEEP`] of each kind, in log order.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct V2Log {
    /// Requests 3.6 converts (member attributes, cluster version).
    pub converted: VecDeque<V2Request>,
    /// Requests 3.6 refuses (v2 API writes, deletes, …).
    pub disallowed: VecDeque<V2Request>,
    /// v2 requests seen in all, overwritten ones included.
    pub seen: u64,
    /// The highest index let go to keep the bound.
    pub evicted_up_to: Option<u64>,
    /// Raft overwrote the log at or below a request that was let go: the kept
    /// requests no longer tell which ones etcd replays (sticky).
    pub incomplete: bool,
    /// Cluster-version and downgrade changes (v2 or v3), newest [`KEEP`].
    pub versions: VecDeque<VersionEvent>,
}

/// A change of the cluster version or of the downgrade state in the WAL. etcd
/// (3.5 `applyV3.Apply`, 3.6+ `applyInternalRaftRequest`) applies these to its
/// in-memory membership whenever it replays the entry, applied before or not,
/// and checks each cluster version against itself (`mustDetectDowngrade`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct VersionEvent {
    /// Raft index of its entry.
    pub index: u64,
    /// The cluster version set: `InternalRaftRequest.cluster_version_set`
    /// (field 1300) or a v2 `PUT /0/version`.
    pub cluster_version: Option<String>,
    /// `InternalRaftRequest.downgrade_info_set` (field 1302): enabled, target.
    pub downgrade: Option<(bool, String)>,
}

impl V2Log {
    /// Records the normal entry at `index` whose payload is `data`; an entry at
    /// or below an earlier one overwrites the log from there (raft's
    /// truncation), so the requests it replaced are dropped first.
    pub fn entry(&mut self, index: u64, term: u64, data: &[u8]) {
        self.truncate_from(index);
        let Some(top) = top_level(data) else {
            return;
        };
        if let Some(ev) = version_of(index, data, &top) {
            self.push_version(ev);
        }
        let Some(req) = classify_top(index, term, data, &top) else {
            return;
        };
        self.seen += 1;
        let q = if req.allowed_by_3_6 {
            &mut self.converted
        } else {
            &mut self.disallowed
        };
        if q.len() == KEEP {
            if let Some(gone) = q.pop_front() {
                self.evicted_up_to = self.evicted_up_to.max(Some(gone.index));
            }
        }
        q.push_back(req);
    }

    fn push_version(&mut self, ev: VersionEvent) {
        if self.versions.len() == KEEP {
            if let Some(gone) = self.versions.pop_front() {
                self.evicted_up_to = self.evicted_up_to.max(Some(gone.index));
            }
        }
        self.versions.push_back(ev);
    }

    /// Drops the requests at or above `index` (raft overwrote the log from there).
    pub(crate) fn truncate_from(&mut self, index: u64) {
        if self.evicted_up_to.is_some_and(|e| e >= index) {
            self.incomplete = true;
        }
        for q in [&mut self.converted, &mut self.disallowed] {
            while q.back().is_some_and(|r| r.index >= index) {
                q.pop_back();
            }
        }
        while self.versions.back().is_some_and(|v| v.index >= index) {
            self.versions.pop_back();
        }
    }

    /// Appends the requests of the log that follows (already truncated).
    pub fn append(&mut self, next: V2Log) {
        self.seen += next.seen;
        self.incomplete |= next.incomplete;
        self.evicted_up_to = self.evicted_up_to.max(next.evicted_up_to);
        for (q, more) in [
            (&mut self.converted, next.converted),
            (&mut self.disallowed, next.disallowed),
        ] {
            for r in more {
                if q.len() == KEEP {
                    if let Some(gone) = q.pop_front() {
                        self.evicted_up_to = self.evicted_up_to.max(Some(gone.index));
                    }
                }
                q.push_back(r);
            }
        }
        for v in next.versions {
            self.push_version(v);
        }
    }

    /// The kept requests with `after < index <= upto`, in log order.
    pub fn between(&self, after: u64, upto: u64) -> Vec<&V2Request> {
        let mut out: Vec<&V2Request> = self
            .converted
            .iter()
            .chain(self.disallowed.iter())
            .filter(|r| r.index > after && r.index <= upto)
            .collect();
        out.sort_by_key(|r| r.index);
        out
    }

    /// What etcd replays at start: the kept requests after the start snapshot
    /// (`after`). Those above the commit (`commit`) count too — the leader has
    /// almost always committed a follower's tail, and a lone voter commits its
    /// own at once — and are also counted apart.
    pub fn replay(&self, after: u64, commit: u64) -> V2Replay {
        let mut out = V2Replay {
            bounded: self.evicted_up_to.is_some(),
            incomplete: self.incomplete,
            ..V2Replay::default()
        };
        let mut raw_examples = Vec::new();
        for r in self.between(after, u64::MAX) {
            if r.index > commit {
                out.uncommitted += 1;
            }
            if r.allowed_by_3_6 {
                out.converted += 1;
            } else {
                out.disallowed += 1;
                if out.examples.len() < EXAMPLES {
                    out.examples.push(r.clone());
                }
            }
            if r.raw {
                out.raw += 1;
                if !r.path.is_empty() {
                    out.raw_with_path += 1;
                }
                if r.allowed_by_3_6 && raw_examples.len() < EXAMPLES {
                    raw_examples.push(r.clone());
                }
            }
        }
        let room = EXAMPLES.saturating_sub(out.examples.len());
        out.examples.extend(raw_examples.into_iter().take(room));
        out.versions = self
            .versions
            .iter()
            .filter(|v| v.index > after)
            .cloned()
            .collect();
        out
    }
}

/// Examples kept in a [`V2Replay`].
const EXAMPLES: usize = 8;

/// The v2 requests etcd replays when it starts on the directory.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct V2Replay {
    /// Requests 3.6 converts (member attributes, cluster version).
    pub converted: u64,
    /// Requests 3.6 refuses ("detected disallowed v2 WAL").
    pub disallowed: u64,
    /// Raw requests of either kind.
    pub raw: u64,
    /// Raw requests with a path (3.7 panics on each: "unmarshal should never
    /// fail"; the path, field 3, starts with `/`, which no v3 message decodes).
    /// A path-less one (3.5's `/health` QGET, `SYNC`) decodes under 3.7: field 2
    /// is reserved there and the empty strings read as empty messages.
    pub raw_with_path: u64,
    /// Of them, requests above the commit index.
    pub uncommitted: u64,
    /// A few of them: disallowed ones first, then raw converted ones.
    pub examples: Vec<V2Request>,
    /// More requests of a kind were in the log than are kept ([`KEEP`]): the
    /// counts are lower bounds.
    pub bounded: bool,
    /// See [`V2Log::incomplete`].
    pub incomplete: bool,
    /// The cluster-version and downgrade changes etcd re-applies, in log order.
    pub versions: Vec<VersionEvent>,
}

/// An upper-case word that names an HTTP method, as v2 requests carry it.
fn method_word(b: &[u8]) -> Option<&str> {
    if b.is_empty() || b.len() > 16 || !b.iter().all(u8::is_ascii_uppercase) {
        return None;
    }
    std::str::from_utf8(b).ok()
}

/// The method and path of a v2 `Request` message, when `data` is one.
fn as_v2(data: &[u8]) -> Option<(String, String)> {
    let (mut method, mut path) = (None, String::new());
    for f in pb::fields(data) {
        match f.ok()? {
            (2, Value::Bytes(b)) => method = Some(method_word(b)?.to_string()),
            (3, Value::Bytes(b)) => {
                let cut = &b[..b.len().min(PATH_BYTES)];
                path = String::from_utf8_lossy(cut).into_owned();
            }
            _ => {}
        }
    }
    Some((method?, path))
}

/// A member-attributes path etcd 3.6 converts: `/0/members/<1–16 hex>/attributes`.
/// etcd matches `storeMemberAttributeRegexp` unanchored, but then parses the
/// member ID from `path.Dir` and applies it to a known member; a path with
/// anything before or after panics there, so only the exact shape (what 3.5's
/// `publish` writes) is converted.
fn is_member_attributes(path: &str) -> bool {
    let Some(rest) = path.strip_prefix("/0/members/") else {
        return false;
    };
    let Some(hex) = rest.strip_suffix("/attributes") else {
        return false;
    };
    (1..=16).contains(&hex.len()) && hex.bytes().all(|b| b.is_ascii_hexdigit())
}

/// The string field `n` of a message.
fn string_field(msg: &[u8], n: u32) -> Option<String> {
    let mut out = None;
    for f in pb::fields(msg) {
        if let (k, Value::Bytes(b)) = f.ok()? {
            if k == n {
                out = Some(String::from_utf8_lossy(&b[..b.len().min(PATH_BYTES)]).into_owned());
            }
        }
    }
    out
}

/// The cluster version a v2 `PUT /0/version` request sets.
fn v2_version_put(req: &[u8]) -> Option<String> {
    let (method, path) = as_v2(req)?;
    (method == "PUT" && path == "/0/version").then(|| string_field(req, 4).unwrap_or_default())
}

/// The top-level fields of a normal entry both classifications read, from one
/// pass: field 2 (a v2 request's method, or `InternalRaftRequest.v2`), and
/// `cluster_version_set` (1300) and `downgrade_info_set` (1302). `None` when
/// the payload does not decode as protobuf at all.
struct Top<'a> {
    field2: Option<&'a [u8]>,
    cvs: Option<&'a [u8]>,
    dis: Option<&'a [u8]>,
}

fn top_level(data: &[u8]) -> Option<Top<'_>> {
    let mut top = Top {
        field2: None,
        cvs: None,
        dis: None,
    };
    for f in pb::fields(data) {
        match f.ok()? {
            (2, Value::Bytes(b)) => top.field2 = Some(b),
            (1300, Value::Bytes(b)) => top.cvs = Some(b),
            (1302, Value::Bytes(b)) => top.dis = Some(b),
            _ => {}
        }
    }
    Some(top)
}

/// A normal entry's cluster-version or downgrade change, if it is one.
fn version_of(index: u64, data: &[u8], top: &Top<'_>) -> Option<VersionEvent> {
    let mut ev = VersionEvent {
        index,
        cluster_version: None,
        downgrade: None,
    };
    if let Some(b) = top.cvs {
        ev.cluster_version = Some(string_field(b, 1).unwrap_or_default());
    } else if let Some(b) = top.dis {
        let mut enabled = false;
        for f in pb::fields(b) {
            if let Ok((1, v)) = f {
                enabled = v.as_u64().unwrap_or(0) != 0;
            }
        }
        ev.downgrade = Some((enabled, string_field(b, 2).unwrap_or_default()));
    } else if let Some(b) = top.field2 {
        ev.cluster_version = if method_word(b).is_some() {
            v2_version_put(data)
        } else {
            v2_version_put(b)
        };
    }
    (ev.cluster_version.is_some() || ev.downgrade.is_some()).then_some(ev)
}

/// Classifies a normal entry's payload (a payload that does not decode is not
/// a v2 request: etcd would panic on it either way, and the WAL reader's CRC
/// already vouches for the bytes).
fn classify_top(index: u64, term: u64, data: &[u8], top: &Top<'_>) -> Option<V2Request> {
    let field2 = top.field2?;
    let (raw, (method, path)) = if method_word(field2).is_some() {
        (true, as_v2(data)?)
    } else {
        (false, as_v2(field2)?)
    };
    let allowed_by_3_6 = method == "PUT" && (is_member_attributes(&path) || path == "/0/version");
    Some(V2Request {
        index,
        term,
        method,
        path,
        raw,
        allowed_by_3_6,
    })
}

#[cfg(test)]
fn classify(index: u64, term: u64, data: &[u8]) -> Option<V2Request> {
    classify_top(index, term, data, &top_level(data)?)
}

#[cfg(test)]
fn version_event(index: u64, data: &[u8]) -> Option<VersionEvent> {
    version_of(index, data, &top_level(data)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put_bytes(out: &mut Vec<u8>, field: u32, b: &[u8]) {
        out.push(((field << 3) | 2) as u8);
        out.push(b.len() as u8);
        out.extend_from_slice(b);
    }

    /// A v2 `Request{ID, Method, Path, Val}` as gogoproto marshals it.
    fn v2(id: u8, method: &str, path: &str, val: &str) -> Vec<u8> {
        let mut out = vec![0x08, id];
        put_bytes(&mut out, 2, method.as_bytes());
        put_bytes(&mut out, 3, path.as_bytes());
        put_bytes(&mut out, 4, val.as_bytes());
        out
    }

    fn varint(out: &mut Vec<u8>, mut v: u64) {
        while v >= 0x80 {
            out.push((v as u8) | 0x80);
            v >>= 7;
        }
        out.push(v as u8);
    }

    fn field_bytes(out: &mut Vec<u8>, field: u64, b: &[u8]) {
        varint(out, (field << 3) | 2);
        varint(out, b.len() as u64);
        out.extend_from_slice(b);
    }

    #[test]
    fn cluster_version_and_downgrade_changes_are_found_in_each_format() {
        // InternalRaftRequest{header, cluster_version_set{ver}}.
        let mut cvs = vec![0xa2, 0x06, 0x02, 0x08, 0x07];
        field_bytes(&mut cvs, 1300, &[0x0a, 0x05, b'3', b'.', b'6', b'.', b'0']);
        let ev = version_event(3, &cvs).expect("a version change");
        assert_eq!(ev.cluster_version.as_deref(), Some("3.6.0"));
        // downgrade_info_set{enabled: true, ver: "3.5.0"}.
        let mut dis = Vec::new();
        field_bytes(
            &mut dis,
            1302,
            &[0x08, 0x01, 0x12, 0x05, b'3', b'.', b'5', b'.', b'0'],
        );
        let ev = version_event(4, &dis).expect("a downgrade change");
        assert_eq!(ev.downgrade, Some((true, "3.5.0".to_string())));
        // A raw v2 PUT /0/version and a wrapped one.
        let raw = v2(1, "PUT", "/0/version", "3.5.0");
        assert_eq!(
            version_event(5, &raw)
                .and_then(|e| e.cluster_version)
                .as_deref(),
            Some("3.5.0")
        );
        let mut wrapped = vec![0x08, 0x09];
        put_bytes(&mut wrapped, 2, &v2(9, "PUT", "/0/version", "3.4.0"));
        assert_eq!(
            version_event(6, &wrapped)
                .and_then(|e| e.cluster_version)
                .as_deref(),
            Some("3.4.0")
        );
        // Anything else is none, and garbage never panics.
        assert_eq!(version_event(7, &v2(1, "PUT", "/1/version", "x")), None);
        assert_eq!(version_event(8, &[0xff, 0xff]), None);
        // A truncation drops the changes it overwrote.
        let mut log = V2Log::default();
        log.entry(3, 2, &cvs);
        log.entry(4, 2, &dis);
        log.entry(4, 3, &raw);
        let kept: Vec<u64> = log.versions.iter().map(|v| v.index).collect();
        assert_eq!(kept, [3, 4]);
        assert_eq!(log.versions[1].cluster_version.as_deref(), Some("3.5.0"));
        assert_eq!(log.replay(3, 10).versions.len(), 1);
    }

    #[test]
    fn raw_v2_requests_are_told_from_v3_ones() {
        let attrs = v2(1, "PUT", "/0/members/8e9e05c52164694d/attributes", "{}");
        let r = classify(5, 2, &attrs).expect("a v2 request");
        assert!(r.raw && r.allowed_by_3_6, "{r:?}");
        let version = classify(6, 2, &v2(2, "PUT", "/0/version", "3.5.0")).expect("v2");
        assert!(version.allowed_by_3_6);
        for (method, path) in [
            ("PUT", "/1/foo"),
            ("DELETE", "/0/members/8e9e05c52164694d/attributes"),
            ("POST", "/1/queue"),
            ("PUT", "/0/members/8e9e05c52164694d/raftAttributes"),
            ("PUT", "/0/members/xyz/attributes"),
        ] {
            let r = classify(7, 2, &v2(3, method, path, "x")).expect("v2");
            assert!(r.raw && !r.allowed_by_3_6, "{method} {path}: {r:?}");
        }
        // An InternalRaftRequest: header (field 100) and a put (field 4).
        let mut v3 = vec![0xa2, 0x06, 0x02, 0x08, 0x07];
        put_bytes(&mut v3, 4, &[0x0a, 0x01, b'k', 0x12, 0x01, b'v']);
        assert_eq!(classify(8, 2, &v3), None);
        // Wrapped in InternalRaftRequest.v2.
        let mut wrapped = vec![0x08, 0x09];
        put_bytes(&mut wrapped, 2, &v2(9, "PUT", "/1/k", "v"));
        let w = classify(9, 2, &wrapped).expect("wrapped v2");
        assert!(!w.raw && !w.allowed_by_3_6, "{w:?}");
        assert_eq!(classify(10, 2, &[]), None);
        assert_eq!(classify(11, 2, &[0xff, 0xff]), None);
    }

    #[test]
    fn the_member_attributes_pattern_matches_as_go_does() {
        assert!(is_member_attributes("/0/members/1/attributes"));
        assert!(is_member_attributes(
            "/0/members/ffffffffffffffff/attributes"
        ));
        assert!(!is_member_attributes(
            "/0/members/1ffffffffffffffff/attributes"
        ));
        assert!(!is_member_attributes("/x/0/members/abc/attributes/y"));
        assert!(!is_member_attributes("/1/0/members/abc/attributes"));
        assert!(!is_member_attributes("/0/members//attributes"));
        assert!(!is_member_attributes("/0/members/g/attributes"));
    }

    #[test]
    fn an_overwritten_suffix_drops_its_requests_and_memory_is_bounded() {
        let mut log = V2Log::default();
        for i in 1..=10u64 {
            log.entry(i, 1, &v2(1, "PUT", "/1/k", "v"));
        }
        log.entry(6, 2, b"");
        assert_eq!(log.disallowed.len(), 5);
        assert_eq!(log.between(3, 10).len(), 2);
        for i in 11..=(11 + 2 * KEEP as u64) {
            log.entry(i, 2, &v2(1, "PUT", "/0/version", "3.5.0"));
        }
        assert_eq!(log.converted.len(), KEEP);
        assert!(log.seen > KEEP as u64);
        let r = log.replay(4, 300);
        assert_eq!(r.disallowed, 1, "index 5 only: {r:?}");
        assert_eq!(r.converted, KEEP as u64, "above the commit too: {r:?}");
        assert!(r.uncommitted > 0 && r.uncommitted < KEEP as u64, "{r:?}");
        assert!(
            r.bounded && r.raw == 1 + r.converted && !r.incomplete,
            "{r:?}"
        );
        assert_eq!(r.examples[0].index, 5);
        // A truncation below a request that was let go: nobody can tell.
        log.entry(20, 3, b"");
        assert!(log.replay(0, 300).incomplete);
    }

    proptest::proptest! {
        #[test]
        fn any_payload_is_classified_without_panicking(
            data in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..512),
            prefix in 0usize..3,
        ) {
            // Half-formed v2 requests too: a method field up front.
            let mut bytes = match prefix {
                0 => Vec::new(),
                1 => vec![0x12, 0x03, b'P', b'U', b'T'],
                _ => vec![0x12, 0x05, 0x12, 0x03, b'G', b'E', b'T'],
            };
            bytes.extend_from_slice(&data);
            let mut log = V2Log::default();
            log.entry(1, 1, &bytes);
            let _ = is_member_attributes(&String::from_utf8_lossy(&data));
            proptest::prop_assert!(log.seen <= 1);
        }
    }
}
