//! Does the staged directory hold what was asked for? Read back with the
//! inspector, the restored member must be the one `--name` derives (member ID =
//! `sha1(peer URLs + token)`), in the cluster every `--initial-cluster` member
//! derives, with exactly that membership (by ID and peer URLs). A restore tool
//! that silently ignored a flag, wrote somewhere else, or restored a different
//! cluster is caught here, before anything is published.

use std::collections::BTreeMap;
use std::path::PathBuf;

use crate::disk::ids;
use crate::disk::layout::Inspection;
use crate::output::hex_id;
use crate::verdict::DirState;

/// The identity a restore must produce.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expected {
    /// `--name`.
    pub name: String,
    /// Derived member ID of `--name`.
    pub member_id: u64,
    /// Derived cluster ID.
    pub cluster_id: u64,
    /// Every member: ID → (name, sorted peer URLs).
    pub members: BTreeMap<u64, (String, Vec<String>)>,
}

impl Expected {
    /// Derives the identity from `--initial-cluster` (parsed), `--name` and the
    /// token; `None` when `name` has no entry.
    pub fn derive(
        initial_cluster: &BTreeMap<String, Vec<String>>,
        name: &str,
        token: &str,
    ) -> Option<Expected> {
        let ids = ids::bootstrap_ids(initial_cluster, token);
        let member_id = *ids.get(name)?;
        let all: Vec<u64> = ids.values().copied().collect();
        let members = initial_cluster
            .iter()
            .map(|(n, urls)| {
                let mut urls = urls.clone();
                urls.sort();
                (ids[n], (n.clone(), urls))
            })
            .collect();
        Some(Expected {
            name: name.to_string(),
            member_id,
            cluster_id: ids::cluster_id(&all),
            members,
        })
    }
}

/// The staged directory is not what was asked for (exit 33).
#[derive(Debug, thiserror::Error)]
#[error("the restored directory {dir} failed verification: {}", problems.join("; "))]
pub struct VerifyError {
    /// The directory checked.
    pub dir: PathBuf,
    /// Every difference found.
    pub problems: Vec<String>,
}

fn sorted_normalized(urls: &[String]) -> Vec<String> {
    let mut v: Vec<String> = urls
        .iter()
        .map(|u| ids::normalize_url(u).unwrap_or_else(|_| u.clone()))
        .collect();
    v.sort();
    v
}

/// Checks an inspection against the expected identity. `Ok` carries notes on what
/// was tolerated.
pub fn check(ins: &Inspection, exp: &Expected) -> Result<Vec<String>, VerifyError> {
    let mut problems = Vec::new();
    let mut notes = Vec::new();
    let fail = |problems: Vec<String>| VerifyError {
        dir: ins.paths.data_dir.clone(),
        problems,
    };
    if ins.state != DirState::Initialized {
        let why = ins
            .problem
            .as_ref()
            .map(|p| format!(": {}", p.message))
            .unwrap_or_default();
        problems.push(format!(
            "it is {} rather than initialized{why}",
            serde_json::to_value(ins.state)
                .ok()
                .and_then(|v| v.as_str().map(str::to_string))
                .unwrap_or_default()
        ));
        return Err(fail(problems));
    }
    if ins.running {
        problems.push("a process holds its locks".into());
    }
    let mut id_check = |what: &str, found: Option<u64>, want: u64| match found {
        Some(f) if f == want => {}
        Some(f) => problems.push(format!(
            "{what} is {} but {} was expected",
            hex_id(f),
            hex_id(want)
        )),
        None => problems.push(format!("{what} is missing from the WAL")),
    };
    id_check(
        &format!("the member ID (for --name {})", exp.name),
        ins.member_id,
        exp.member_id,
    );
    id_check("the cluster ID", ins.cluster_id, exp.cluster_id);

    let recorded: BTreeMap<u64, _> = ins.membership.iter().map(|m| (m.id, m)).collect();
    for (id, (name, urls)) in &exp.members {
        match recorded.get(id) {
            None => problems.push(format!(
                "member {name} ({}) is missing from the restored membership",
                hex_id(*id)
            )),
            Some(m) if sorted_normalized(&m.peer_urls) != *urls => problems.push(format!(
                "member {name} ({}) has peer URLs {} but --initial-cluster gives {}",
                hex_id(*id),
                m.peer_urls.join(","),
                urls.join(",")
            )),
            Some(_) => {}
        }
    }
    for (id, m) in &recorded {
        if exp.members.contains_key(id) {
            continue;
        }
        if m.source == "backend" && ins.snapshot.is_some() {
            // etcdctl 3.4 leaves the source cluster's members in the backend's
            // bucket; in 3.4 the `.snap` is the authoritative membership.
            notes.push(format!(
                "the backend's members bucket still lists {} ({}) from the snapshot's cluster; the .snap membership is authoritative",
                hex_id(*id),
                m.name
            ));
            continue;
        }
        problems.push(format!(
            "the restored membership has an extra member {} ({}, from the {})",
            hex_id(*id),
            m.name,
            m.source
        ));
    }
    if problems.is_empty() {
        Ok(notes)
    } else {
        Err(fail(problems))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn derivation_matches_the_reference_vector() {
        let ic = ids::parse_initial_cluster("default=http://localhost:2380").unwrap();
        let exp = Expected::derive(&ic, "default", "etcd-cluster").unwrap();
        assert_eq!(hex_id(exp.member_id), "8e9e05c52164694d");
        assert_eq!(hex_id(exp.cluster_id), "cdf818194e3a8c32");
        assert!(Expected::derive(&ic, "other", "etcd-cluster").is_none());
    }
}
