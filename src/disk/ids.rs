//! How etcd derives identities, so the agent can predict them without etcd:
//! a bootstrap member's ID is the first 8 bytes (big-endian) of
//! `sha1(sorted peer URLs joined + cluster token)`, and the cluster ID is the first
//! 8 bytes of `sha1(sorted member IDs as 8-byte big-endian)`. Members added later
//! with `member add` get a timestamp mixed in and cannot be predicted.

use std::collections::BTreeMap;

use sha1::{Digest, Sha1};

/// A malformed `--initial-cluster` or peer URL list.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdError {
    /// An entry of `--initial-cluster` is not `name=url`.
    #[error("--initial-cluster entry {entry:?} is not name=url")]
    BadEntry {
        /// The offending entry.
        entry: String,
    },
    /// A URL without a scheme or host.
    #[error("{url:?} is not a URL (expected scheme://host:port)")]
    BadUrl {
        /// The offending URL.
        url: String,
    },
    /// Nothing to derive from.
    #[error("no peer URLs given")]
    Empty,
}

/// Normalises a URL the way Go's `url.Parse(...).String()` does for the URLs etcd
/// accepts: the scheme is lower-cased, the rest is kept.
pub fn normalize_url(url: &str) -> Result<String, IdError> {
    let url = url.trim();
    let bad = || IdError::BadUrl {
        url: url.to_string(),
    };
    let (scheme, rest) = url.split_once("://").ok_or_else(bad)?;
    if scheme.is_empty() || rest.is_empty() || rest.starts_with('/') {
        return Err(bad());
    }
    Ok(format!("{}://{rest}", scheme.to_ascii_lowercase()))
}

/// The form in which two spellings of one URL compare equal: scheme and host
/// lower-cased, a trailing `/` and the scheme's default port dropped. etcd
/// compares peer URLs that loosely (and resolves host names besides, which an
/// offline decision cannot); IDs are still derived from [`normalize_url`]'s
/// form, the bytes etcd hashes.
pub fn comparable_url(url: &str) -> String {
    let url = url.trim();
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_ascii_lowercase();
    };
    let scheme = scheme.to_ascii_lowercase();
    let (authority, path) = match rest.find('/') {
        Some(at) => rest.split_at(at),
        None => (rest, ""),
    };
    let mut authority = authority.to_ascii_lowercase();
    let default_port = match scheme.as_str() {
        "http" => Some(":80"),
        "https" => Some(":443"),
        _ => None,
    };
    if let Some(port) = default_port {
        if let Some(stripped) = authority.strip_suffix(port) {
            authority = stripped.to_string();
        }
    }
    let path = path.trim_end_matches('/');
    format!("{scheme}://{authority}{path}")
}

/// Parses a comma-separated URL list, normalised, in the order given.
pub fn parse_urls(list: &str) -> Result<Vec<String>, IdError> {
    let urls = list
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(normalize_url)
        .collect::<Result<Vec<_>, _>>()?;
    if urls.is_empty() {
        return Err(IdError::Empty);
    }
    Ok(urls)
}

/// Parses `name=url,name=url2,...` into name → peer URLs (a name may repeat to
/// give several URLs, as etcd allows).
pub fn parse_initial_cluster(s: &str) -> Result<BTreeMap<String, Vec<String>>, IdError> {
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for entry in s.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let (name, url) = entry.split_once('=').ok_or_else(|| IdError::BadEntry {
            entry: entry.to_string(),
        })?;
        if name.is_empty() {
            return Err(IdError::BadEntry {
                entry: entry.to_string(),
            });
        }
        out.entry(name.to_string())
            .or_default()
            .push(normalize_url(url)?);
    }
    if out.is_empty() {
        return Err(IdError::Empty);
    }
    Ok(out)
}

fn first8(digest: &[u8]) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&digest[..8]);
    u64::from_be_bytes(b)
}

/// The ID etcd gives a member at bootstrap (or at restore) from its peer URLs and
/// the cluster token.
pub fn member_id(peer_urls: &[String], token: &str) -> MemberId {
    let mut urls: Vec<&str> = peer_urls.iter().map(String::as_str).collect();
    urls.sort_unstable();
    let mut h = Sha1::new();
    for u in urls {
        h.update(u.as_bytes());
    }
    h.update(token.as_bytes());
    MemberId(first8(&h.finalize()))
}

/// The cluster ID etcd derives from its member IDs.
pub fn cluster_id(member_ids: &[MemberId]) -> ClusterId {
    let mut ids = member_ids.to_vec();
    ids.sort_unstable();
    let mut h = Sha1::new();
    for id in ids {
        h.update(id.get().to_be_bytes());
    }
    ClusterId(first8(&h.finalize()))
}

/// The member and cluster IDs etcd will derive when it bootstraps (or restores) a
/// cluster from `initial_cluster` and `token`.
pub fn bootstrap_ids(
    initial_cluster: &BTreeMap<String, Vec<String>>,
    token: &str,
) -> BTreeMap<String, MemberId> {
    initial_cluster
        .iter()
        .map(|(name, urls)| (name.clone(), member_id(urls, token)))
        .collect()
}

/// Defines an etcd 64-bit ID type: printed (`Display`, `Debug`, serde) the way
/// etcd and the operator write IDs, 16 lowercase hex digits (`%016x`), and
/// parsed by [`FromStr`](std::str::FromStr) with the rules of
/// [`MemberId::parse_recorded`] (an empty string is an error there).
macro_rules! etcd_id {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $name(u64);

        impl $name {
            /// Wraps the raw 64-bit ID as etcd encodes it.
            pub const fn new(id: u64) -> Self {
                $name(id)
            }

            /// The raw 64-bit ID, for encoders and hashing.
            pub const fn get(self) -> u64 {
                self.0
            }

            /// Parses an ID the way the operator writes it (`%016x`) and env
            /// hints carry it: the empty string is `Ok(None)` (not recorded yet),
            /// anything else must be 1–16 hex digits (either case), not zero.
            pub fn parse_recorded(value: &str) -> Result<Option<Self>, HexIdError> {
                Ok(parse_hex(value)?.map($name))
            }
        }

        impl std::fmt::Display for $name {
            /// 16 lowercase hex digits; width, fill and precision apply to them
            /// as to any string.
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.pad(&format!("{:016x}", self.0))
            }
        }

        impl std::fmt::Debug for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                std::fmt::Display::fmt(self, f)
            }
        }

        impl std::str::FromStr for $name {
            type Err = HexIdError;

            /// [`Self::parse_recorded`], with the empty string an error too.
            fn from_str(value: &str) -> Result<Self, HexIdError> {
                match Self::parse_recorded(value)? {
                    Some(id) => Ok(id),
                    None => Err(HexIdError {
                        value: value.to_owned(),
                    }),
                }
            }
        }

        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(&self.to_string())
            }
        }

        impl<'de> serde::Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let s = String::deserialize(d)?;
                s.parse().map_err(serde::de::Error::custom)
            }
        }
    };
}

etcd_id! {
    /// An etcd member ID (also raft's node ID: a ConfChange's node, a vote).
    MemberId
}

etcd_id! {
    /// An etcd cluster ID.
    ClusterId
}

/// What tells one incarnation of a cluster of the same names from another.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Incarnation {
    /// SHA-256 (lowercase hex) of the token etcd hashed the founders' IDs
    /// with: `--initial-cluster-token` as given (etcd's default
    /// `etcd-cluster` when unset), or the discovery URL or token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_sha256: Option<String>,
    /// `metadata.uid` of the operator's `EtcdCluster`, where there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_uid: Option<String>,
}

impl Incarnation {
    /// The incarnation of a member formed with `token` under the `EtcdCluster`
    /// of UID `cluster_uid`.
    pub fn new(token: Option<&str>, cluster_uid: Option<&str>) -> Incarnation {
        Incarnation {
            token_sha256: token.map(token_sha256),
            cluster_uid: cluster_uid
                .map(str::trim)
                .filter(|u| !u.is_empty())
                .map(str::to_owned),
        }
    }

    /// Neither fact is known.
    pub(crate) fn is_unknown(&self) -> bool {
        self.token_sha256.is_none() && self.cluster_uid.is_none()
    }

    /// Why `other` belongs to another incarnation than `self`, when a fact both
    /// know differs; `None` when they agree on every fact both know (or share
    /// none).
    pub(crate) fn differs_from(&self, other: &Incarnation) -> Option<&'static str> {
        let differ =
            |a: &Option<String>, b: &Option<String>| matches!((a, b), (Some(a), Some(b)) if a != b);
        if differ(&self.cluster_uid, &other.cluster_uid) {
            Some("another EtcdCluster (its metadata.uid differs)")
        } else if differ(&self.token_sha256, &other.token_sha256) {
            Some("a cluster formed with another token")
        } else {
            None
        }
    }

    /// Both facts that are known agree, and at least one is known on each side.
    pub(crate) fn same_as(&self, other: &Incarnation) -> bool {
        let agree =
            |a: &Option<String>, b: &Option<String>| matches!((a, b), (Some(a), Some(b)) if a == b);
        self.differs_from(other).is_none()
            && (agree(&self.token_sha256, &other.token_sha256)
                || agree(&self.cluster_uid, &other.cluster_uid))
    }
}

/// The SHA-256 of a cluster token, as witnesses record it (the token itself
/// is not written: it is not secret to etcd, but nothing needs it in clear).
pub fn token_sha256(token: &str) -> String {
    use sha2::Digest as _;
    let digest = sha2::Sha256::digest(token.as_bytes());
    let mut out = String::with_capacity(64);
    for b in digest {
        out.push_str(&format!("{b:02x}"));
    }
    out
}

/// A string that should have been an etcd ID (member or cluster) and is not.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{value:?} is not an etcd ID (1 to 16 hex digits, not all zero)")]
pub struct HexIdError {
    /// The offending text, as found.
    pub value: String,
}

/// The rules of [`MemberId::parse_recorded`] and [`ClusterId::parse_recorded`].
///
/// The empty string means "not recorded yet" and is `Ok(None)`: the operator
/// leaves `status.memberID`/`status.clusterID` empty until it has learnt them, so
/// empty proves nothing. Anything else must be 1–16 hex digits (either case) and
/// not zero — etcd never assigns ID 0, so a zero is a corrupt record, not a value.
fn parse_hex(value: &str) -> Result<Option<u64>, HexIdError> {
    if value.is_empty() {
        return Ok(None);
    }
    let err = || HexIdError {
        value: value.to_owned(),
    };
    // from_str_radix alone would accept a leading '+'.
    if value.len() > 16 || !value.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(err());
    }
    match u64::from_str_radix(value, 16) {
        Ok(0) | Err(_) => Err(err()),
        Ok(id) => Ok(Some(id)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operator_formatted_ids_parse() {
        assert_eq!(
            MemberId::parse_recorded("ae36f238164a08ad"),
            Ok(Some(MemberId::new(0xae36f238164a08ad)))
        );
        assert_eq!(
            ClusterId::parse_recorded("00000000000000ff"),
            Ok(Some(ClusterId::new(0xff)))
        );
        assert_eq!(
            MemberId::parse_recorded("AE36F238164A08AD"),
            Ok(Some(MemberId::new(0xae36f238164a08ad)))
        );
        assert_eq!("ff".parse(), Ok(MemberId::new(0xff)));
        assert_eq!(
            "AE36F238164A08AD".parse(),
            Ok(ClusterId::new(0xae36f238164a08ad))
        );
    }

    #[test]
    fn empty_id_means_not_recorded() {
        assert_eq!(MemberId::parse_recorded(""), Ok(None));
        assert_eq!(ClusterId::parse_recorded(""), Ok(None));
        // Where a value is required, empty is an error.
        assert_eq!(
            "".parse::<MemberId>(),
            Err(HexIdError {
                value: String::new()
            })
        );
    }

    #[test]
    fn malformed_ids_are_errors_not_absences() {
        for bad in [
            "0",
            "0000000000000000",
            "+1",
            "-1",
            " ae36f238164a08ad",
            "ae36f238164a08ad0",
            "xyz",
            "0x1f",
        ] {
            assert!(parse_hex(bad).is_err(), "{bad:?} should be rejected");
            assert!(MemberId::parse_recorded(bad).is_err(), "{bad:?}");
            assert!(ClusterId::parse_recorded(bad).is_err(), "{bad:?}");
            assert!(bad.parse::<MemberId>().is_err(), "{bad:?}");
            assert!(bad.parse::<ClusterId>().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn matches_the_reference_test_vector() {
        let m = member_id(&["http://localhost:2380".into()], "etcd-cluster");
        assert_eq!(format!("{:016x}", m.get()), "8e9e05c52164694d");
        assert_eq!(m.to_string(), "8e9e05c52164694d");
        assert_eq!(cluster_id(&[m]).to_string(), "cdf818194e3a8c32");
    }

    #[test]
    fn ids_print_and_serialize_as_16_hex_digits() {
        let m = MemberId::new(0xff);
        let c = ClusterId::new(0xae36f238164a08ad);
        assert_eq!(m.to_string(), "00000000000000ff");
        assert_eq!(format!("{m:?}"), "00000000000000ff");
        assert_eq!(format!("{c}"), "ae36f238164a08ad");
        assert_eq!(MemberId::default().to_string(), "0000000000000000");
        assert_eq!(format!("[{m:>18}]"), "[  00000000000000ff]");
        assert_eq!(serde_json::to_string(&m).unwrap(), r#""00000000000000ff""#);
        assert_eq!(
            serde_json::to_string(&Some(c)).unwrap(),
            r#""ae36f238164a08ad""#
        );
        assert_eq!(serde_json::to_string(&None::<MemberId>).unwrap(), "null");
        assert_eq!(
            serde_json::to_string(&vec![m, MemberId::new(1)]).unwrap(),
            r#"["00000000000000ff","0000000000000001"]"#
        );
        assert_eq!(
            serde_json::to_string(&Vec::<ClusterId>::new()).unwrap(),
            "[]"
        );
        assert_eq!(
            serde_json::from_str::<MemberId>(r#""00000000000000FF""#).unwrap(),
            m
        );
        assert!(serde_json::from_str::<MemberId>(r#""""#).is_err());
        assert!(serde_json::from_str::<MemberId>("255").is_err());
        assert_eq!(m.get(), 0xff);
    }

    #[test]
    fn order_of_urls_and_members_does_not_matter() {
        let a = member_id(&["http://b:2380".into(), "http://a:2380".into()], "t");
        let b = member_id(&["http://a:2380".into(), "http://b:2380".into()], "t");
        assert_eq!(a, b);
        let [m1, m2, m3] = [1, 2, 3].map(MemberId::new);
        assert_eq!(cluster_id(&[m1, m2, m3]), cluster_id(&[m3, m1, m2]));
    }

    #[test]
    fn token_changes_the_id() {
        let u = vec!["http://a:2380".to_string()];
        assert_ne!(member_id(&u, "t1"), member_id(&u, "t2"));
    }

    #[test]
    fn parses_initial_cluster_with_repeated_names() {
        let m = parse_initial_cluster("a=http://a:2380, b=HTTP://b:2380,a=http://a2:2380").unwrap();
        assert_eq!(m["a"], vec!["http://a:2380", "http://a2:2380"]);
        assert_eq!(m["b"], vec!["http://b:2380"]);
        assert!(parse_initial_cluster("nourl").is_err());
        assert!(parse_initial_cluster("=http://x:1").is_err());
        assert!(parse_initial_cluster("a=x").is_err());
        assert!(parse_initial_cluster("").is_err());
    }

    #[test]
    fn spellings_of_one_url_compare_equal() {
        let want = comparable_url("http://m1.svc:2380");
        for spelled in [
            "http://m1.svc:2380/",
            "HTTP://M1.svc:2380",
            " http://m1.SVC:2380// ",
        ] {
            assert_eq!(comparable_url(spelled), want, "{spelled}");
        }
        assert_eq!(comparable_url("http://a:80"), comparable_url("http://a"));
        assert_eq!(
            comparable_url("https://a:443/"),
            comparable_url("https://a")
        );
        assert_ne!(
            comparable_url("http://a:2380"),
            comparable_url("http://a:2381")
        );
        assert_ne!(comparable_url("http://a:443"), comparable_url("http://a"));
        assert_eq!(comparable_url("not a url"), "not a url");
    }
}
