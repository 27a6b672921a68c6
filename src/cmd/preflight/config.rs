//! `preflight`'s configuration: validated from the arguments without I/O.

use std::path::PathBuf;
use std::time::Duration;

use super::DEFAULT_VERDICT_FILE;
use crate::cli::{DataDirArgs, EvidenceArgs, PreflightArgs};
use crate::disk::ids::{self, ClusterId, HexIdError, MemberId};
use crate::disk::layout::Paths;
use crate::disk::lock::Probe;
use crate::disk::upgrade::{self, Target};
use crate::error::Error;
use crate::evidence::{self, etcd as live_src, kube as kube_src};
use crate::verdict::{self, SelfFacts};

/// Validated configuration, built from the arguments without I/O.
#[derive(Debug, Clone)]
pub struct Config {
    pub(super) paths: Paths,
    pub(super) me: SelfFacts,
    pub(super) etcd: Option<live_src::EtcdConn>,
    pub(super) kube: Option<kube_src::KubeTarget>,
    pub(super) hint_member_id: Option<MemberId>,
    pub(super) hint_cluster_id: Option<ClusterId>,
    pub(super) allow_bootstrap_without_evidence: bool,
    pub(super) timeout: Duration,
    pub(super) verdict_file: Option<PathBuf>,
    pub(super) termination_log: Option<PathBuf>,
    /// The witness file read as a witness (`--witness-file`); `None`: none.
    pub(super) witness_file: Option<PathBuf>,
    /// How the directory's locks are probed: `Probe::Ofd` before etcd starts
    /// (see `Probe::Ofd`); `restore`, which writes, asks for `Probe::Thorough`.
    pub(super) locks: Probe,
    /// The etcd version about to start, as given (`--etcd-version`); `None`
    /// asks the etcd binary (see [`etcd_about_to_start`]).
    pub(super) etcd_version: Option<Target>,
    /// Whether the etcd binary is asked when no version is given (preflight
    /// yes; restore, which checks a directory it wrote itself, no).
    pub(super) probe_etcd_version: bool,
    /// The flags of that etcd the upgrade check depends on.
    pub(super) etcd_flags: upgrade::EtcdFlags,
}

fn usage(msg: impl Into<String>) -> Error {
    Error::usage(msg)
}

fn hint<Id>(
    name: &str,
    value: &Option<String>,
    parse: fn(&str) -> Result<Option<Id>, HexIdError>,
) -> crate::error::Result<Option<Id>> {
    match value.as_deref() {
        None => Ok(None),
        Some(v) => parse(v.trim()).map_err(|e| usage(format!("{name}: {e}"))),
    }
}

impl Config {
    /// Where the verdict file goes: --verdict-file, or the Pod's shared volume.
    pub(super) fn verdict_path(&self) -> std::path::PathBuf {
        self.verdict_file
            .clone()
            .unwrap_or_else(|| std::path::PathBuf::from(DEFAULT_VERDICT_FILE))
    }

    /// The data dir layout this configuration inspects.
    pub fn paths(&self) -> &Paths {
        &self.paths
    }

    /// This member as configured.
    pub fn me(&self) -> &SelfFacts {
        &self.me
    }

    /// Validates `preflight`'s arguments.
    pub fn from_args(a: &PreflightArgs) -> crate::error::Result<Config> {
        let mut cfg = Config::new(
            &a.dirs,
            &a.evidence,
            a.verdict_file.clone(),
            a.termination_log.clone(),
        )?;
        cfg.etcd_version = a.etcd_version;
        cfg.etcd_flags = a.etcd_flags.flags();
        cfg.probe_etcd_version = true;
        cfg.witness_file = a.witness_file.clone().or_else(|| {
            // Where serve keeps it by default: beside the verdict file.
            let verdict = a
                .verdict_file
                .clone()
                .unwrap_or_else(|| PathBuf::from(DEFAULT_VERDICT_FILE));
            Some(verdict.with_file_name("witness.json")).filter(|p| p.is_file())
        });
        Ok(cfg)
    }

    /// Validates the evidence arguments shared with other commands (`restore`).
    /// `verdict_file`/`termination_log` are where `run` writes; [`decide`] alone
    /// writes nothing.
    pub fn new(
        dirs: &DataDirArgs,
        a: &EvidenceArgs,
        verdict_file: Option<PathBuf>,
        termination_log: Option<PathBuf>,
    ) -> crate::error::Result<Config> {
        let initial = match a
            .identity
            .initial_cluster
            .as_deref()
            .filter(|s| !s.trim().is_empty())
        {
            Some(s) => Some(ids::parse_initial_cluster(s).map_err(|e| usage(e.to_string()))?),
            None => None,
        };
        let name = a.identity.name.clone().filter(|n| !n.is_empty());
        let peer_urls = match a
            .identity
            .peer_urls
            .as_deref()
            .filter(|s| !s.trim().is_empty())
        {
            Some(s) => ids::parse_urls(s).map_err(|e| usage(format!("--peer-urls: {e}")))?,
            None => match (&initial, &name) {
                (Some(ic), Some(n)) => ic.get(n).cloned().ok_or_else(|| {
                    usage(format!(
                        "--name {n} has no entry in --initial-cluster and --peer-urls is not set"
                    ))
                })?,
                _ => Vec::new(),
            },
        };
        if name.is_none() && peer_urls.is_empty() {
            return Err(usage("who is this member? set --name (ETCD_MEMBER_NAME) with --initial-cluster, or --peer-urls"));
        }
        let self_only_initial_cluster = match (&initial, &name) {
            (Some(ic), Some(n)) => ic.len() == 1 && ic.contains_key(n),
            _ => false,
        };
        // A bootstrap member's IDs follow from its flags (etcd hashes the peer
        // URLs of --initial-cluster with the token); a joining member's come
        // from `member add` and cannot be predicted.
        let bootstrap_member = match a.identity.initial_cluster_state.as_deref() {
            Some("new") => true,
            Some(_) => false,
            None => self_only_initial_cluster,
        };
        // The bytes etcd hashes, as given (etcd trims nothing). Under
        // discovery the founders are the discovery service's, not
        // --initial-cluster's: no IDs follow from the flags.
        let formation = a.identity.formation_token().map_err(usage)?;
        let token = formation.value.as_str();
        let derived = match (&initial, &name) {
            (Some(ic), Some(n))
                if bootstrap_member && !formation.discovery && !token.is_empty() =>
            {
                let ids = ids::bootstrap_ids(ic, token);
                ids.get(n).map(|&member_id| verdict::DerivedIds {
                    member_id,
                    cluster_id: ids::cluster_id(&ids.values().copied().collect::<Vec<_>>()),
                })
            }
            _ => None,
        };
        let etcd = match a
            .etcd
            .peer_endpoints
            .as_deref()
            .map(live_src::parse_endpoints)
        {
            Some(endpoints) if !endpoints.is_empty() => Some(live_src::EtcdConn {
                endpoints,
                ca: a.etcd.cacert.clone(),
                cert: a.etcd.cert.clone(),
                key: a.etcd.key.clone(),
                user: a.etcd.user.clone(),
                password: a.etcd.password.clone(),
            }),
            _ => None,
        };
        let kube_on = a
            .kube
            .kube
            .unwrap_or_else(evidence::client::service_account_token_mounted);
        let kube = if kube_on {
            let namespace = a
                .kube
                .namespace
                .clone()
                .filter(|s| !s.is_empty())
                .ok_or_else(|| usage("--kube is on but POD_NAMESPACE (--namespace) is not set"))?;
            let member_name = a
                .kube
                .pod_name
                .clone()
                .or_else(|| name.clone())
                .filter(|s| !s.is_empty())
                .ok_or_else(|| usage("--kube is on but neither POD_NAME nor --name is set"))?;
            Some(kube_src::KubeTarget {
                namespace,
                member_name,
                kubeconfig: a.kube.kubeconfig.clone(),
            })
        } else {
            None
        };
        if a.timeout.is_zero() {
            return Err(usage("--timeout must be positive"));
        }
        Ok(Config {
            paths: Paths::new(&dirs.data_dir, dirs.wal_dir.as_deref()),
            me: SelfFacts {
                name,
                peer_urls,
                self_only_initial_cluster,
                derived,
                pod_uid: a.kube.pod_uid.clone().filter(|u| !u.trim().is_empty()),
                token: Some(token.to_owned()).filter(|t| !t.is_empty()),
                token_sha256: Some(token)
                    .filter(|t| !t.is_empty())
                    .map(crate::evidence::mark::token_sha256),
                token_given: formation.given,
            },
            etcd,
            kube,
            hint_member_id: hint(
                "ETCD_MEMBER_ID",
                &a.member_id_hint,
                MemberId::parse_recorded,
            )?,
            hint_cluster_id: hint(
                "ETCD_CLUSTER_ID",
                &a.cluster_id_hint,
                ClusterId::parse_recorded,
            )?,
            allow_bootstrap_without_evidence: a.allow_bootstrap_without_evidence,
            timeout: a.timeout,
            verdict_file,
            termination_log,
            witness_file: None,
            locks: Probe::Ofd,
            etcd_version: None,
            probe_etcd_version: false,
            etcd_flags: upgrade::EtcdFlags::default(),
        })
    }

    /// Reports a refusal as an Event on this Pod (`cmd::event`), when
    /// Kubernetes is on; never fails.
    pub fn report_event(&self, verdict: &str, reason: &str) {
        if let Some(k) = &self.kube {
            crate::cmd::event::report(
                k.kubeconfig.as_ref(),
                &k.namespace,
                &k.member_name,
                self.me.pod_uid.as_deref(),
                &[crate::cmd::event::Item {
                    reason: verdict.to_owned(),
                    key: verdict.to_owned(),
                    message: reason.to_owned(),
                }],
            );
        }
    }

    /// The same configuration with another lock probe.
    pub fn with_lock_probe(self, locks: Probe) -> Config {
        Config { locks, ..self }
    }
}
