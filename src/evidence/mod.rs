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

pub mod client;
pub mod etcd;
pub mod events;
pub mod kube;
pub mod lease;
pub mod mark;
pub mod pod;

/// Which independent source a piece of evidence came from. Serialized as the
/// `source` key of each entry in a verdict's `evidence` list.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Source {
    /// The data directory itself, read offline.
    DataDir,
    /// The live cluster, asked over etcd's client gRPC API.
    Etcd,
    /// The operator's `EtcdMember`/`EtcdCluster` records in the Kubernetes API.
    Kube,
    /// `ETCD_MEMBER_ID`/`ETCD_CLUSTER_ID`, frozen into the Pod at creation.
    Env,
    /// The witness Lease `serve` keeps for this member (`evidence::lease`).
    Witness,
    /// The witness file `serve` keeps (`evidence::mark`), read with `--witness-file`.
    WitnessFile,
}

impl Source {
    /// The name in every report (`data-dir`, `etcd`, `kube`, `env`, `witness`).
    pub const fn name(self) -> &'static str {
        match self {
            Source::DataDir => "data-dir",
            Source::Etcd => "etcd",
            Source::Kube => "kube",
            Source::Env => "env",
            Source::Witness => "witness",
            Source::WitnessFile => "witness-file",
        }
    }
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
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
    use super::Source;

    #[test]
    fn a_source_has_one_spelling() {
        for s in [
            Source::DataDir,
            Source::Etcd,
            Source::Kube,
            Source::Env,
            Source::Witness,
            Source::WitnessFile,
        ] {
            assert_eq!(
                serde_json::to_value(s).unwrap(),
                serde_json::Value::from(s.name())
            );
        }
    }
}
