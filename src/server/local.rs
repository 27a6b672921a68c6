//! The local member, asked directly: `Status` (who it is, its raft position, its
//! leader) and a serializable `MemberList` (its name and URLs), both from the one
//! member this sidecar sits beside.
//!
//! Unlike `evidence::etcd::probe`, which asks many endpoints once, this keeps one
//! client for the life of the sidecar (no TLS handshake every poll) and drops it
//! after any failure, so a black-holed or restarted etcd costs one fresh connection
//! on the next poll rather than a wedged channel. Every step is bounded by the
//! poll's deadline. No credentials are sent: `Status` and `MemberList` need no
//! auth, and a token would expire under a long-running client.

use std::path::Path;

use etcd_client::{Certificate, Client, ConnectOptions, Identity, TlsOptions};
use tokio::time::{timeout_at, Instant};

use super::config::LocalEtcd;
use super::identity::LocalMember;
use crate::disk::ids::{ClusterId, MemberId};
use crate::evidence::etcd::describe_error;

/// Why the local member could not be asked at all (a configuration error).
#[derive(Debug, thiserror::Error)]
pub enum LocalEtcdError {
    /// A TLS file cannot be read or holds no PEM.
    #[error("cannot use {flag} {}: {detail}", path.display())]
    TlsFile {
        /// The flag naming it.
        flag: &'static str,
        /// The file.
        path: std::path::PathBuf,
        /// What is wrong.
        detail: String,
    },
    /// A certificate without its key, or a key without its certificate.
    #[error("--cert and --key go together")]
    Incomplete,
}

/// A persistent client to the local member.
pub struct LocalClient {
    endpoint: String,
    tls: Option<TlsOptions>,
    client: Option<Client>,
}

/// Why one poll failed, rendered for the identity's `member_error`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PollError {
    /// The poll ran out of time (as opposed to an error answer).
    pub timed_out: bool,
    /// What happened, with its causes.
    pub message: String,
}

impl LocalClient {
    /// Prepares the client (reads TLS files); connects on the first poll.
    pub fn new(conf: &LocalEtcd) -> Result<LocalClient, LocalEtcdError> {
        let identity = match (&conf.cert, &conf.key) {
            (Some(cert), Some(key)) => Some(Identity::from_pem(
                read_pem("--cert", cert)?,
                read_pem("--key", key)?,
            )),
            (None, None) => None,
            _ => return Err(LocalEtcdError::Incomplete),
        };
        let ca = match &conf.ca {
            Some(ca) => Some(Certificate::from_pem(read_pem("--cacert", ca)?)),
            None => None,
        };
        let tls = (ca.is_some() || identity.is_some()).then(|| {
            let mut tls = TlsOptions::new();
            if let Some(ca) = ca {
                tls = tls.ca_certificate(ca);
            }
            if let Some(identity) = identity {
                tls = tls.identity(identity);
            }
            tls
        });
        Ok(LocalClient {
            endpoint: conf.endpoint.clone(),
            tls,
            client: None,
        })
    }

    /// The endpoint asked.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// Asks `Status` and `MemberList` concurrently; returns by `deadline`.
    pub async fn poll(&mut self, deadline: Instant) -> Result<LocalMember, PollError> {
        let result = self.poll_inner(deadline).await;
        if result.is_err() {
            self.client = None;
        }
        result
    }

    async fn poll_inner(&mut self, deadline: Instant) -> Result<LocalMember, PollError> {
        let client = match &mut self.client {
            Some(client) => client,
            None => {
                let client = self.connect(deadline).await?;
                self.client.insert(client)
            }
        };
        let mut cluster = client.cluster_client();
        let mut maintenance = client.maintenance_client();
        let (status, members) = tokio::join!(
            timeout_at(deadline, maintenance.status()),
            timeout_at(deadline, cluster.member_list()),
        );
        let status = flatten("Status", status)?;
        let members = flatten("MemberList", members)?;
        let header = status.header().ok_or_else(|| PollError {
            timed_out: false,
            message: "Status answered without a response header".to_owned(),
        })?;
        let member_id = header.member_id();
        let me = members.members().iter().find(|m| m.id() == member_id);
        let member_id = MemberId::new(member_id);
        let alarms = status
            .errors()
            .iter()
            .filter_map(|e| describe_alarm(e))
            .collect();
        Ok(LocalMember {
            name: me.map(|m| m.name().to_owned()).unwrap_or_default(),
            member_id,
            cluster_id: ClusterId::new(header.cluster_id()),
            peer_urls: me.map(|m| m.peer_urls().to_vec()).unwrap_or_default(),
            client_urls: me.map(|m| m.client_urls().to_vec()).unwrap_or_default(),
            is_learner: status.is_learner() || me.is_some_and(|m| m.is_learner()),
            leader_id: Some(status.leader()).filter(|&l| l != 0).map(MemberId::new),
            raft_term: status.raft_term(),
            raft_index: status.raft_index(),
            raft_applied_index: status.raft_applied_index(),
            revision: header.revision(),
            db_size: status.db_size(),
            db_size_in_use: status.raft_used_db_size(),
            etcd_version: status.version().to_owned(),
            alarms,
        })
    }

    async fn connect(&self, deadline: Instant) -> Result<Client, PollError> {
        let left = deadline.saturating_duration_since(Instant::now());
        let mut options = ConnectOptions::new()
            .with_connect_timeout(left)
            .with_timeout(left)
            .with_keep_alive(
                std::time::Duration::from_secs(10),
                std::time::Duration::from_secs(5),
            );
        // etcd-client refuses TLS options on an explicit http:// URL.
        if !self.endpoint.starts_with("http://") {
            if let Some(tls) = &self.tls {
                options = options.with_tls(tls.clone());
            }
        }
        match timeout_at(deadline, Client::connect([&self.endpoint], Some(options))).await {
            Ok(Ok(client)) => Ok(client),
            Ok(Err(e)) => Err(PollError {
                timed_out: false,
                message: format!("connect: {}", describe_error(&e)),
            }),
            Err(_) => Err(PollError {
                timed_out: true,
                message: "connect: no answer before the poll timeout".to_owned(),
            }),
        }
    }
}

fn flatten<T>(
    what: &str,
    r: Result<Result<T, etcd_client::Error>, tokio::time::error::Elapsed>,
) -> Result<T, PollError> {
    match r {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(PollError {
            timed_out: false,
            message: format!("{what}: {}", describe_error(&e)),
        }),
        Err(_) => Err(PollError {
            timed_out: true,
            message: format!("{what}: no answer before the poll timeout"),
        }),
    }
}

/// Status `errors` carries "etcdserver: no leader" and one protobuf text entry per
/// alarm (`memberID:10276657743932975437 alarm:NOSPACE `); keep the alarms, named.
fn describe_alarm(entry: &str) -> Option<String> {
    let alarm = entry
        .split_whitespace()
        .find_map(|w| w.strip_prefix("alarm:"))?;
    let member = entry
        .split_whitespace()
        .find_map(|w| w.strip_prefix("memberID:"))
        .and_then(|id| id.parse::<u64>().ok())
        .map(MemberId::new);
    Some(match member {
        Some(id) => format!("{alarm} on {id}"),
        None => alarm.to_owned(),
    })
}

fn read_pem(flag: &'static str, path: &Path) -> Result<Vec<u8>, LocalEtcdError> {
    let bytes = std::fs::read(path).map_err(|e| LocalEtcdError::TlsFile {
        flag,
        path: path.to_owned(),
        detail: e.to_string(),
    })?;
    if !bytes.windows(11).any(|w| w == b"-----BEGIN ") {
        return Err(LocalEtcdError::TlsFile {
            flag,
            path: path.to_owned(),
            detail: "no PEM block in the file".to_owned(),
        });
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alarms_are_named_and_the_leaderless_error_is_not_an_alarm() {
        assert_eq!(
            describe_alarm("memberID:10276657743932975437 alarm:NOSPACE "),
            Some("NOSPACE on 8e9e05c52164694d".to_owned())
        );
        assert_eq!(describe_alarm("alarm:CORRUPT"), Some("CORRUPT".to_owned()));
        assert_eq!(describe_alarm("etcdserver: no leader"), None);
    }

    #[tokio::test]
    async fn a_closed_port_is_an_error_not_a_hang() {
        let closed = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap_or_else(|e| panic!("{e}"));
            l.local_addr().unwrap_or_else(|e| panic!("{e}"))
        };
        let mut c = LocalClient::new(&LocalEtcd {
            endpoint: format!("http://{closed}"),
            ca: None,
            cert: None,
            key: None,
        })
        .unwrap_or_else(|e| panic!("{e}"));
        let started = Instant::now();
        let r = c
            .poll(started + std::time::Duration::from_millis(500))
            .await;
        assert!(r.is_err());
        assert!(started.elapsed() < std::time::Duration::from_millis(800));
    }
}
