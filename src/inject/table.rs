//! What the agent's containers are told, derived from etcd's own configuration:
//! one table ([`TABLE`]) of env vars, each with the containers it goes to and
//! the function that derives it from the [`Derived`] facts. Adding a variable
//! is one row; what it needs that is not derived yet is one field of
//! [`Derived`], computed once in [`Derived::new`].

use serde_json::{json, Map, Value};

use super::etcd::{image_version, EtcdConfig, EtcdContainer, Origin, Resolver};
use super::expand::Expr;
use super::{
    Unresolvable, ANNOTATION_CLIENT_CA, ANNOTATION_CLIENT_CERT, ANNOTATION_CLIENT_KEY, GRPC_PORT,
    HTTP_PORT, VERDICT_FILE,
};

/// The agent's containers a variable goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct To {
    /// The native sidecar (`serve`).
    pub sidecar: bool,
    /// The init container (`preflight`).
    pub preflight: bool,
}

const BOTH: To = To {
    sidecar: true,
    preflight: true,
};
const SIDECAR: To = To {
    sidecar: true,
    preflight: false,
};
const PREFLIGHT: To = To {
    sidecar: false,
    preflight: true,
};

/// A variable's value in the agent's containers.
#[derive(Debug, Clone, PartialEq)]
pub enum EnvValue {
    /// `value:` (references kept as `$(NAME)`).
    Expr(Expr),
    /// `valueFrom:` as given.
    From(Value),
}

impl EnvValue {
    fn text(s: &str) -> EnvValue {
        EnvValue::Expr(Expr::text(s))
    }

    fn field(path: &str) -> EnvValue {
        EnvValue::From(json!({"fieldRef": {"fieldPath": path}}))
    }

    /// The env entry `{name, value|valueFrom}`.
    pub fn entry(&self, name: &str) -> Value {
        match self {
            EnvValue::Expr(e) => json!({"name": name, "value": e.to_kube()}),
            EnvValue::From(from) => json!({"name": name, "valueFrom": from}),
        }
    }
}

/// One row: a variable, where it goes, how it is derived (`None`: not set).
pub struct Row {
    /// The variable.
    pub name: &'static str,
    /// The containers it goes to.
    pub to: To,
    /// Its value.
    pub derive: fn(&Derived) -> Option<EnvValue>,
}

/// The agent's env, in the order it is written. The downward-API variables
/// come first: the carried definitions and the derived values may refer to
/// them, and a reference resolves only to a variable defined before it.
pub const TABLE: &[Row] = &[
    Row {
        name: "POD_NAME",
        to: BOTH,
        derive: |_| Some(EnvValue::field("metadata.name")),
    },
    Row {
        name: "POD_NAMESPACE",
        to: BOTH,
        derive: |_| Some(EnvValue::field("metadata.namespace")),
    },
    Row {
        name: "POD_UID",
        to: BOTH,
        derive: |_| Some(EnvValue::field("metadata.uid")),
    },
    // (the carried definitions go here: see `Derived::carried`)
    Row {
        name: "ETCD_VERSION",
        to: PREFLIGHT,
        derive: |d| d.version.as_deref().map(EnvValue::text),
    },
    Row {
        name: "ETCD_DATA_DIR",
        to: BOTH,
        derive: |d| Some(EnvValue::Expr(d.data_dir.clone())),
    },
    Row {
        name: "ETCD_WAL_DIR",
        to: BOTH,
        derive: |d| d.wal_dir.clone().map(EnvValue::Expr),
    },
    Row {
        name: "ETCD_MEMBER_NAME",
        to: BOTH,
        derive: |d| Some(EnvValue::Expr(d.name.clone())),
    },
    Row {
        name: "ETCD_INITIAL_CLUSTER",
        to: PREFLIGHT,
        derive: |d| d.initial_cluster.clone().map(EnvValue::Expr),
    },
    Row {
        name: "ETCD_INITIAL_CLUSTER_TOKEN",
        to: BOTH,
        derive: |d| d.passed("initial-cluster-token"),
    },
    Row {
        name: "ETCD_INITIAL_CLUSTER_STATE",
        to: PREFLIGHT,
        derive: |d| d.passed("initial-cluster-state"),
    },
    Row {
        name: "ETCD_DISCOVERY",
        to: PREFLIGHT,
        derive: |d| d.passed("discovery"),
    },
    Row {
        name: "ETCD_DISCOVERY_ENDPOINTS",
        to: PREFLIGHT,
        derive: |d| d.passed("discovery-endpoints"),
    },
    Row {
        name: "ETCD_DISCOVERY_TOKEN",
        to: PREFLIGHT,
        derive: |d| d.passed("discovery-token"),
    },
    Row {
        name: "ETCD_PEER_URLS",
        to: PREFLIGHT,
        derive: |d| d.passed("initial-advertise-peer-urls"),
    },
    Row {
        name: "ETCD_PEER_ENDPOINTS",
        to: PREFLIGHT,
        derive: |d| d.peer_endpoints.clone().map(EnvValue::Expr),
    },
    Row {
        name: "ETCD_ENDPOINTS",
        to: SIDECAR,
        derive: |d| Some(EnvValue::Expr(d.local_endpoint.clone())),
    },
    Row {
        name: "ETCD_TLS_CA_PATH",
        to: BOTH,
        derive: |d| d.tls.ca.clone().map(EnvValue::Expr),
    },
    Row {
        name: "ETCD_TLS_CERT_PATH",
        to: BOTH,
        derive: |d| d.tls.cert.clone().map(EnvValue::Expr),
    },
    Row {
        name: "ETCD_TLS_KEY_PATH",
        to: BOTH,
        derive: |d| d.tls.key.clone().map(EnvValue::Expr),
    },
    Row {
        name: "ETCD_V2_DEPRECATION",
        to: PREFLIGHT,
        derive: |d| d.passed("v2-deprecation"),
    },
    Row {
        name: "ETCD_MAX_LEARNERS",
        to: PREFLIGHT,
        derive: |d| d.passed("max-learners"),
    },
    Row {
        name: "AGENT_KUBE",
        to: BOTH,
        derive: |d| Some(EnvValue::text(if d.kube { "true" } else { "false" })),
    },
    Row {
        name: "AGENT_VERDICT_FILE",
        to: BOTH,
        derive: |_| Some(EnvValue::text(VERDICT_FILE)),
    },
    Row {
        name: "AGENT_GRPC_LISTEN",
        to: SIDECAR,
        derive: |d| Some(EnvValue::text(&format!("{}:{GRPC_PORT}", d.bind_or_any()))),
    },
    Row {
        name: "AGENT_HTTP_LISTEN",
        to: SIDECAR,
        derive: |d| Some(EnvValue::text(&format!("{}:{HTTP_PORT}", d.bind_or_any()))),
    },
    Row {
        name: "TERMINATION_LOG",
        to: PREFLIGHT,
        derive: |_| Some(EnvValue::text("/dev/termination-log")),
    },
];

/// The variables written before the carried definitions.
pub const DOWNWARD: usize = 3;

/// The TLS files the agent uses to reach etcd.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Tls {
    /// The CA that signed etcd's serving certificate.
    pub ca: Option<Expr>,
    /// A client certificate (etcd's own, when it asks for one).
    pub cert: Option<Expr>,
    /// Its key.
    pub key: Option<Expr>,
}

/// What the table derives from: etcd's configuration, read once.
pub struct Derived {
    /// The etcd container's name.
    pub container: String,
    config: EtcdConfig,
    /// `--name` (etcd's default `default`).
    pub name: Expr,
    /// `--data-dir`, absolute.
    pub data_dir: Expr,
    /// `--wal-dir`, absolute, when set.
    pub wal_dir: Option<Expr>,
    /// `--initial-cluster`, or etcd's default from the name and the peer URLs;
    /// none under discovery.
    pub initial_cluster: Option<Expr>,
    /// The other members' client URLs, from `--initial-cluster`'s peer URLs
    /// with this member's client scheme and port; none when it names no other.
    pub peer_endpoints: Option<Expr>,
    /// How many members `peer_endpoints` lists.
    pub peers: usize,
    /// Whether this member's own entry could be left out of `peer_endpoints`
    /// (not when its name differs per replica).
    pub peers_exclude_self: bool,
    /// The local member's client URL.
    pub local_endpoint: Expr,
    /// Where the sidecar listens when not on every address: in a Pod on the
    /// host's network whose etcd listens for clients on one IP address only,
    /// that address, as written in a URL (`[…]` around IPv6): beside etcd, as
    /// its own ports are, so two such Pods on one node do not collide.
    pub bind: Option<String>,
    /// TLS towards etcd.
    pub tls: Tls,
    /// `ETCD_VERSION`: the etcd image's tag.
    pub version: Option<String>,
    /// The agent reads the Kubernetes API.
    pub kube: bool,
    /// Definitions carried from etcd's env (by their name in the agent).
    pub carried: Vec<(String, Value)>,
    /// The paths the agent reads (data dir, WAL dir, TLS files), with what
    /// names each.
    pub paths: Vec<(&'static str, Expr)>,
}

impl Derived {
    /// Derives everything from the etcd container `c` of a Pod whose
    /// annotations are `annotations`.
    pub fn new(
        c: &EtcdContainer<'_>,
        annotations: &Map<String, Value>,
        kube: bool,
        host_network: bool,
    ) -> Result<Derived, Unresolvable> {
        let mut resolver = Resolver::new(c.value);
        let config = EtcdConfig::read(c, &mut resolver)?;
        let container = Some(c.name.as_str());
        let fail = |subject: &str, reason: String, remedy: &str| {
            Unresolvable::new(container, subject, reason, remedy)
        };
        let literal_or_expr = |flag: &str| config.get(flag).map(|s| s.value.trim());

        let name = literal_or_expr("name").unwrap_or_else(|| Expr::text("default"));
        let working_dir = c.value.get("workingDir").and_then(Value::as_str);
        let absolute = |flag: &'static str, path: Expr| -> Result<Expr, Unresolvable> {
            if path.literal_prefix().starts_with('/') {
                return Ok(path);
            }
            match working_dir {
                Some(wd) if wd.starts_with('/') => {
                    Ok(Expr::text(&format!("{}/", wd.trim_end_matches('/'))).concat(&path))
                }
                _ => Err(fail(
                    &spell(&config, flag),
                    format!("{path:?} is relative to the working directory of etcd's image, which the Pod does not name").replace('"', ""),
                    "give an absolute --data-dir on a volume",
                )),
            }
        };
        let data_dir = match literal_or_expr("data-dir") {
            Some(d) => absolute("data-dir", d)?,
            None => {
                let default = name.clone().concat(&Expr::text(".etcd"));
                match working_dir {
                    Some(wd) if wd.starts_with('/') => absolute("data-dir", default)?,
                    _ => {
                        return Err(fail(
                            "--data-dir",
                            "it is not set: etcd keeps its data in <name>.etcd in its image's working directory, on the container's own filesystem, which no other container can read".into(),
                            "set --data-dir to a directory on a volume",
                        ))
                    }
                }
            }
        };
        let wal_dir = literal_or_expr("wal-dir")
            .filter(|w| !w.is_empty())
            .map(|w| absolute("wal-dir", w))
            .transpose()?;

        let discovery = ["discovery", "discovery-endpoints"]
            .iter()
            .any(|f| config.get(f).is_some_and(|s| !s.value.is_empty()));
        let peer_urls = literal_or_expr("initial-advertise-peer-urls")
            .unwrap_or_else(|| Expr::text("http://localhost:2380"));
        let initial_cluster = if discovery {
            None
        } else {
            Some(literal_or_expr("initial-cluster").unwrap_or_else(|| {
                // etcd's InitialClusterFromName: one entry per peer URL.
                let mut ic = Expr::default();
                for (i, url) in peer_urls.split(',').iter().enumerate() {
                    if i > 0 {
                        ic.push(&Expr::text(","));
                    }
                    ic.push(&name);
                    ic.push(&Expr::text("="));
                    ic.push(&url.trim());
                }
                ic
            }))
        };

        // This member's client URLs: the local one for the sidecar, and the
        // scheme and port every member's client URL has.
        let listen = literal_or_expr("listen-client-urls")
            .unwrap_or_else(|| Expr::text("http://localhost:2379"));
        let local_endpoint = local_client_url(&listen).ok_or_else(|| {
            fail(
                &spell(&config, "listen-client-urls"),
                format!("no http:// or https:// URL with a literal scheme and port in {listen}"),
                "listen on an http(s) URL",
            )
        })?;
        let bind = if host_network {
            match listen.split(',').as_slice() {
                [only] => scheme_host_port(&only.trim())
                    .and_then(|(_, host, _)| host.as_literal())
                    // An address the sidecar can bind (etcd binds only IPs),
                    // not every address. `core::net`: the address types
                    // alone, no socket (this part is pure).
                    .filter(|h| {
                        h.trim_start_matches('[')
                            .trim_end_matches(']')
                            .parse::<core::net::IpAddr>()
                            .is_ok_and(|ip| !ip.is_unspecified())
                    }),
                _ => None,
            }
        } else {
            None
        };
        let advertise = literal_or_expr("advertise-client-urls")
            .unwrap_or_else(|| Expr::text("http://localhost:2379"));
        let (client_scheme, client_port) = advertise
            .split(',')
            .first()
            .and_then(|u| scheme_host_port(&u.trim()))
            .map(|(s, _, p)| (s, p))
            .ok_or_else(|| {
                fail(
                    &spell(&config, "advertise-client-urls"),
                    format!("{advertise} has no URL with a literal scheme and port"),
                    "advertise http(s)://host:port",
                )
            })?;

        let mut peers = Vec::new();
        let mut peers_exclude_self = true;
        if let Some(ic) = &initial_cluster {
            let me = name.as_literal();
            for entry in ic.split(',') {
                let entry = entry.trim();
                if entry.is_empty() {
                    continue;
                }
                let bad = || {
                    fail(
                        &spell(&config, "initial-cluster"),
                        format!("{entry} is not name=scheme://host:port with a literal name, scheme and port"),
                        "spell the initial cluster out, or define what it refers to with a literal value",
                    )
                };
                let (member, url) = entry.split_once("=").ok_or_else(bad)?;
                let member = member.trim();
                match (member.as_literal(), &me) {
                    (Some(m), Some(me)) if &m == me => continue,
                    (Some(_), Some(_)) => {}
                    _ => peers_exclude_self = false,
                }
                let (_, host, _) = scheme_host_port(&url.trim()).ok_or_else(bad)?;
                let endpoint = Expr::text(&format!("{client_scheme}://"))
                    .concat(&host)
                    .concat(&Expr::text(&format!(":{client_port}")));
                if !peers.contains(&endpoint) {
                    peers.push(endpoint);
                }
            }
        }
        let peer_count = peers.len();
        let peer_endpoints = (!peers.is_empty()).then(|| {
            let mut list = Expr::default();
            for (i, p) in peers.iter().enumerate() {
                if i > 0 {
                    list.push(&Expr::text(","));
                }
                list.push(p);
            }
            list
        });

        let https =
            local_endpoint.literal_prefix().starts_with("https://") || client_scheme == "https";
        let annotated = |key: &str| {
            annotations
                .get(key)
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
                .map(Expr::parse)
        };
        let mut tls = Tls::default();
        if https {
            tls.ca = match annotated(ANNOTATION_CLIENT_CA) {
                Some(ca) => Some(ca),
                None => match literal_or_expr("trusted-ca-file") {
                    Some(ca) => Some(ca),
                    None if config.bool("auto-tls")? == Some(true) => {
                        return Err(fail(
                            &spell(&config, "auto-tls"),
                            "etcd serves a self-signed certificate no CA vouches for, which the agent cannot verify".into(),
                            "serve a certificate from a CA (--cert-file, --key-file) and name the CA with --trusted-ca-file or the annotation etcd-member-agent.cozystack.io/client-ca-file",
                        ))
                    }
                    None => {
                        return Err(fail(
                            "--trusted-ca-file",
                            "etcd serves https but no flag names the CA that signed its certificate, which the agent needs to verify it".into(),
                            "name the CA file (in one of etcd's volumes) with the annotation etcd-member-agent.cozystack.io/client-ca-file",
                        ))
                    }
                },
            };
            let client_auth = config.bool("client-cert-auth")? == Some(true);
            let cert = annotated(ANNOTATION_CLIENT_CERT)
                .or_else(|| client_auth.then(|| literal_or_expr("cert-file")).flatten());
            let key = annotated(ANNOTATION_CLIENT_KEY)
                .or_else(|| client_auth.then(|| literal_or_expr("key-file")).flatten());
            match (cert, key) {
                (Some(c), Some(k)) => {
                    tls.cert = Some(c);
                    tls.key = Some(k);
                }
                (None, None) if !client_auth => {}
                _ => {
                    return Err(fail(
                        "--client-cert-auth",
                        "etcd asks clients for a certificate, but no client certificate and key are named (etcd's own --cert-file and --key-file are used when both are set)".into(),
                        "set --cert-file and --key-file, or name a client certificate and key with the annotations etcd-member-agent.cozystack.io/client-cert-file and client-key-file",
                    ))
                }
            }
        }

        let mut paths = vec![("--data-dir", data_dir.clone())];
        if let Some(w) = &wal_dir {
            paths.push(("--wal-dir", w.clone()));
        }
        for (what, p) in [
            ("the CA file", &tls.ca),
            ("the client certificate", &tls.cert),
            ("the client key", &tls.key),
        ] {
            if let Some(p) = p {
                paths.push((what, p.clone()));
            }
        }

        let image = c
            .value
            .get("image")
            .and_then(Value::as_str)
            .unwrap_or_default();
        Ok(Derived {
            container: c.name.clone(),
            carried: resolver
                .carried()
                .iter()
                .filter(|(name, _)| !TABLE[..DOWNWARD].iter().any(|r| r.name == name.as_str()))
                .map(|(n, v)| (n.clone(), v.clone()))
                .collect(),
            config,
            name,
            data_dir,
            wal_dir,
            initial_cluster,
            peer_endpoints,
            peers: peer_count,
            peers_exclude_self,
            local_endpoint,
            bind,
            tls,
            version: image_version(image),
            kube,
            paths,
        })
    }

    /// The sidecar's listen host: [`Derived::bind`], else every address.
    pub fn bind_or_any(&self) -> &str {
        self.bind.as_deref().unwrap_or("0.0.0.0")
    }

    /// A setting passed on as etcd has it, when the container gives it.
    fn passed(&self, flag: &str) -> Option<EnvValue> {
        self.config
            .get(flag)
            .map(|s| s.value.trim())
            .filter(|v| !v.is_empty())
            .map(EnvValue::Expr)
    }

    /// The env of the sidecar (`sidecar`) or of `preflight`, in order: the
    /// carried definitions that container's values refer to come after the
    /// downward-API variables and before the values.
    pub fn env(&self, sidecar: bool) -> Vec<Value> {
        let rows: Vec<(usize, &'static str, EnvValue)> = TABLE
            .iter()
            .enumerate()
            .filter(|(_, row)| {
                if sidecar {
                    row.to.sidecar
                } else {
                    row.to.preflight
                }
            })
            .filter_map(|(i, row)| (row.derive)(self).map(|v| (i, row.name, v)))
            .collect();
        let referenced = |name: &str| {
            rows.iter().any(|(_, _, v)| match v {
                EnvValue::Expr(e) => e.refs().any(|r| r == name),
                EnvValue::From(_) => false,
            })
        };
        let mut carried: Vec<Value> = self
            .carried
            .iter()
            .filter(|(name, _)| referenced(name))
            .map(|(name, from)| EnvValue::From(from.clone()).entry(name))
            .collect();
        let mut out = Vec::new();
        for (i, name, v) in &rows {
            if *i >= DOWNWARD {
                out.append(&mut carried);
            }
            out.push(v.entry(name));
        }
        out
    }
}

/// How a setting was spelled in the container (flag or env), for messages.
fn spell(config: &EtcdConfig, flag: &str) -> String {
    config
        .get(flag)
        .map(|s| s.origin.spell(flag))
        .unwrap_or_else(|| Origin::Flag.spell(flag))
}

/// `scheme://host:port[/…]` with a literal scheme and port: (scheme, host, port).
fn scheme_host_port(url: &Expr) -> Option<(String, Expr, String)> {
    let (scheme, rest) = url.split_once("://")?;
    let scheme = scheme.as_literal()?.to_ascii_lowercase();
    if scheme != "http" && scheme != "https" {
        return None;
    }
    let authority = rest.split_once("/").map(|(a, _)| a).unwrap_or(rest);
    let (host, port) = authority.rsplit_once(":")?;
    let port = port.as_literal()?;
    if port.is_empty() || !port.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((scheme, host, port))
}

/// The local member's client URL from `--listen-client-urls`: the first
/// http(s) URL, a wildcard host made `127.0.0.1`.
fn local_client_url(listen: &Expr) -> Option<Expr> {
    listen.split(',').iter().find_map(|u| {
        let (scheme, host, port) = scheme_host_port(&u.trim())?;
        let host = match host.as_literal().as_deref() {
            Some("0.0.0.0" | "" | "[::]" | "::") => Expr::text("127.0.0.1"),
            _ => host,
        };
        Some(
            Expr::text(&format!("{scheme}://"))
                .concat(&host)
                .concat(&Expr::text(&format!(":{port}"))),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_taken_apart_around_references() {
        let (s, h, p) =
            scheme_host_port(&Expr::parse("https://$(POD_NAME).etcd.$(NS).svc:2380")).unwrap();
        assert_eq!(
            (s.as_str(), h.to_string().as_str(), p.as_str()),
            ("https", "$(POD_NAME).etcd.$(NS).svc", "2380")
        );
        assert!(scheme_host_port(&Expr::parse("$(S)://h:1")).is_none());
        assert!(scheme_host_port(&Expr::parse("http://h:$(P)")).is_none());
        assert!(scheme_host_port(&Expr::parse("unix://x")).is_none());
        assert_eq!(
            local_client_url(&Expr::parse("unix://s,https://0.0.0.0:2379"))
                .unwrap()
                .to_string(),
            "https://127.0.0.1:2379"
        );
        assert_eq!(
            local_client_url(&Expr::parse("https://127.0.0.1:2379,https://10.0.0.1:2379"))
                .unwrap()
                .to_string(),
            "https://127.0.0.1:2379"
        );
        assert_eq!(
            local_client_url(&Expr::parse("http://$(POD_IP):2379"))
                .unwrap()
                .to_string(),
            "http://$(POD_IP):2379"
        );
    }

    #[test]
    fn every_row_is_named_once_and_goes_somewhere() {
        let mut names: Vec<&str> = TABLE.iter().map(|r| r.name).collect();
        names.sort_unstable();
        let before = names.len();
        names.dedup();
        assert_eq!(names.len(), before);
        assert!(TABLE.iter().all(|r| r.to.sidecar || r.to.preflight));
        assert_eq!(
            TABLE[..DOWNWARD].iter().map(|r| r.name).collect::<Vec<_>>(),
            ["POD_NAME", "POD_NAMESPACE", "POD_UID"]
        );
    }
}
