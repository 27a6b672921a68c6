//! The sources of evidence other than the directory: the live cluster (etcd
//! gRPC), the operator's records (Kubernetes API) and env hints. Each is a thin,
//! time-bounded wrapper with its own error type; none decides anything.
//!
//! Every network call here takes a `tokio::time::Instant` deadline rather than a
//! duration: the caller (preflight, restore) has one budget for the whole command
//! and hands each source a slice of it, so no source can spend time it was not
//! given. What a source *says* (a member list, a record) and whether it *could
//! answer* (the error) are kept apart, because "no source could answer" is its
//! own verdict (`phase-unknown`), never a silent "empty".

pub mod etcd;
pub mod kube;
pub mod pod;

/// Which independent source a piece of evidence came from. Serialized as the
/// `source` key of each entry in a verdict's `evidence` list.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Source {
    /// The live cluster, asked over etcd's client gRPC API.
    Etcd,
    /// The operator's `EtcdMember`/`EtcdCluster` records in the Kubernetes API.
    Kube,
    /// `ETCD_MEMBER_ID`/`ETCD_CLUSTER_ID`, frozen into the Pod at creation.
    Env,
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

/// Time left until `deadline`, zero once it has passed.
pub(crate) fn remaining(deadline: tokio::time::Instant) -> std::time::Duration {
    deadline.saturating_duration_since(tokio::time::Instant::now())
}

/// The node's boot ID (`/proc/sys/kernel/random/boot_id`), or `None` where it
/// cannot be read: with the Pod UID it tells one Pod start from another.
pub fn boot_id() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .ok()
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
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
}
