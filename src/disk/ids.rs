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
pub fn member_id(peer_urls: &[String], token: &str) -> u64 {
    let mut urls: Vec<&str> = peer_urls.iter().map(String::as_str).collect();
    urls.sort_unstable();
    let mut h = Sha1::new();
    for u in urls {
        h.update(u.as_bytes());
    }
    h.update(token.as_bytes());
    first8(&h.finalize())
}

/// The cluster ID etcd derives from its member IDs.
pub fn cluster_id(member_ids: &[u64]) -> u64 {
    let mut ids = member_ids.to_vec();
    ids.sort_unstable();
    let mut h = Sha1::new();
    for id in ids {
        h.update(id.to_be_bytes());
    }
    first8(&h.finalize())
}

/// The member and cluster IDs etcd will derive when it bootstraps (or restores) a
/// cluster from `initial_cluster` and `token`.
pub fn bootstrap_ids(
    initial_cluster: &BTreeMap<String, Vec<String>>,
    token: &str,
) -> BTreeMap<String, u64> {
    initial_cluster
        .iter()
        .map(|(name, urls)| (name.clone(), member_id(urls, token)))
        .collect()
}

/// Formats an ID the way etcd and the operator do: 16 lowercase hex digits.
pub fn hex_id(id: u64) -> String {
    format!("{id:016x}")
}

/// Serde helpers so IDs are hex strings in every JSON document.
pub mod serde_hex {
    use serde::Serializer;

    /// Serializes a `u64` ID as 16 lowercase hex digits.
    pub fn serialize<S: Serializer>(id: &u64, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&super::hex_id(*id))
    }

    /// The same for optional IDs (`null` when absent).
    pub mod option {
        use serde::Serializer;

        /// Serializes `Some(id)` as hex, `None` as null.
        pub fn serialize<S: Serializer>(id: &Option<u64>, s: S) -> Result<S::Ok, S::Error> {
            match id {
                Some(id) => s.serialize_str(&super::super::hex_id(*id)),
                None => s.serialize_none(),
            }
        }
    }

    /// The same for lists of IDs.
    pub mod vec {
        use serde::ser::SerializeSeq;
        use serde::Serializer;

        /// Serializes each ID as hex.
        pub fn serialize<S: Serializer>(ids: &[u64], s: S) -> Result<S::Ok, S::Error> {
            let mut seq = s.serialize_seq(Some(ids.len()))?;
            for id in ids {
                seq.serialize_element(&super::super::hex_id(*id))?;
            }
            seq.end()
        }
    }
}

/// A string that should have been an etcd ID (member or cluster) and is not.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{value:?} is not an etcd ID (1 to 16 hex digits, not all zero)")]
pub struct HexIdError {
    /// The offending text, as found.
    pub value: String,
}

/// Parses an ID the way the operator writes it (`%016x`) and env hints carry it.
///
/// The empty string means "not recorded yet" and is `Ok(None)`: the operator
/// leaves `status.memberID`/`status.clusterID` empty until it has learnt them, so
/// empty proves nothing. Anything else must be 1–16 hex digits (either case) and
/// not zero — etcd never assigns ID 0, so a zero is a corrupt record, not a value.
pub fn parse_hex_id(value: &str) -> Result<Option<u64>, HexIdError> {
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
            parse_hex_id("ae36f238164a08ad"),
            Ok(Some(0xae36f238164a08ad))
        );
        assert_eq!(parse_hex_id("00000000000000ff"), Ok(Some(0xff)));
        assert_eq!(
            parse_hex_id("AE36F238164A08AD"),
            Ok(Some(0xae36f238164a08ad))
        );
    }

    #[test]
    fn empty_id_means_not_recorded() {
        assert_eq!(parse_hex_id(""), Ok(None));
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
            assert!(parse_hex_id(bad).is_err(), "{bad:?} should be rejected");
        }
    }

    #[test]
    fn matches_the_reference_test_vector() {
        let m = member_id(&["http://localhost:2380".into()], "etcd-cluster");
        assert_eq!(format!("{m:016x}"), "8e9e05c52164694d");
        assert_eq!(format!("{:016x}", cluster_id(&[m])), "cdf818194e3a8c32");
    }

    #[test]
    fn order_of_urls_and_members_does_not_matter() {
        let a = member_id(&["http://b:2380".into(), "http://a:2380".into()], "t");
        let b = member_id(&["http://a:2380".into(), "http://b:2380".into()], "t");
        assert_eq!(a, b);
        assert_eq!(cluster_id(&[1, 2, 3]), cluster_id(&[3, 1, 2]));
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
