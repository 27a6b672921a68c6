//! The etcd container of a Pod and the configuration etcd will run with, read
//! from the container itself: its `command`/`args` in every spelling etcd's flag
//! parser accepts (`--name=x`, `--name x`, `-name x`), its `ETCD_*` env (etcd
//! reads every `ETCD_<FLAG>` variable as that flag), and the kubelet's `$(VAR)`
//! expansion of both through the container's env ([`Resolver`]).
//!
//! What etcd itself would refuse is refused here too, naming it: a flag given
//! both on the command line and as `ETCD_*` (etcd 3.4+ exits on a shadowed
//! variable), a positional argument. What cannot be known from the Pod alone is
//! never guessed: a configuration file, DNS discovery, a shell script, `envFrom`
//! that may set `ETCD_*`, a reference whose value lives in a ConfigMap or
//! Secret but must be taken apart.

use std::collections::BTreeMap;

use serde_json::Value;

use super::expand::Expr;
use super::Unresolvable;

/// etcd's boolean flags (3.4–3.7): `--flag` alone is true, and they never take
/// the next argument as their value.
const BOOL_FLAGS: &[&str] = &[
    "auto-tls",
    "client-cert-auth",
    "debug",
    "discovery-insecure-skip-tls-verify",
    "discovery-insecure-transport",
    "enable-distributed-tracing",
    "enable-grpc-gateway",
    "enable-log-rotation",
    "enable-pprof",
    "enable-v2",
    "experimental-compact-hash-check-enabled",
    "experimental-enable-distributed-tracing",
    "experimental-enable-grpc-logging",
    "experimental-enable-lease-checkpoint",
    "experimental-enable-lease-checkpoint-persist",
    "experimental-initial-corrupt-check",
    "experimental-memory-mlock",
    "experimental-peer-skip-client-san-verification",
    "experimental-serializable-ordering",
    "experimental-stop-grpc-service-on-defrag",
    "experimental-txn-mode-write-with-shared-buffer",
    "force-new-cluster",
    "initial-election-tick-advance",
    "insecure-discovery",
    "insecure-skip-tls-verify",
    "memory-mlock",
    "peer-auto-tls",
    "peer-client-cert-auth",
    "peer-skip-client-san-verification",
    "permit-without-stream",
    "pre-vote",
    "socket-reuse-address",
    "socket-reuse-port",
    "strict-reconfig-check",
    "unsafe-no-fsync",
    "version",
];

/// Shells: a container that runs one runs a script, not etcd's command line.
const SHELLS: &[&str] = &["sh", "bash", "dash", "ash", "zsh", "ksh", "busybox"];

/// The last path component of an image's repository (`quay.io/coreos/etcd:v3.6.11` → `etcd`).
pub fn image_name(image: &str) -> &str {
    let no_digest = image.split('@').next().unwrap_or(image);
    let last = no_digest.rsplit('/').next().unwrap_or(no_digest);
    last.split(':').next().unwrap_or(last)
}

/// The tag of an image, when it has one (not the registry's port).
pub fn image_tag(image: &str) -> Option<&str> {
    let no_digest = image.split('@').next().unwrap_or(image);
    let last = no_digest.rsplit('/').next().unwrap_or(no_digest);
    last.split_once(':').map(|(_, tag)| tag)
}

/// The version an etcd image's tag names (`v3.6.11`, `3.5.17-debian-12-r0`,
/// `3.5.15-0` → `3.6.11`, …), unless a digest pins the image (the tag may then
/// say anything).
pub fn image_version(image: &str) -> Option<String> {
    if image.contains('@') {
        return None;
    }
    let tag = image_tag(image)?;
    let tag = tag.strip_prefix('v').unwrap_or(tag);
    let mut parts = tag.splitn(3, '.');
    let major = parts.next()?;
    let minor = parts.next()?;
    let rest = parts.next()?;
    let patch: String = rest.chars().take_while(char::is_ascii_digit).collect();
    let numeric = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    (numeric(major) && numeric(minor) && numeric(&patch))
        .then(|| format!("{major}.{minor}.{patch}"))
}

fn basename(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

fn strings(v: Option<&Value>) -> Vec<String> {
    v.and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .map(|s| s.as_str().unwrap_or_default().to_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// How a container starts etcd.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Start {
    /// `etcd` with these arguments (command/args after the executable).
    Flags(Vec<String>),
    /// The image's own command (etcd's image runs etcd; Bitnami's runs a script
    /// driven by `ETCD_*` env): only env is read.
    ImageDefault,
    /// A shell: the command line is a script.
    Shell,
}

/// What a container runs, if it looks like etcd at all.
fn start_of(container: &Value) -> Option<Start> {
    let command = strings(container.get("command"));
    let args = strings(container.get("args"));
    let image = container
        .get("image")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let etcd_image = image_name(image) == "etcd";
    let (exe, rest): (Option<&str>, Vec<String>) = if let Some((exe, rest)) = command.split_first()
    {
        (Some(exe), rest.iter().chain(args.iter()).cloned().collect())
    } else if let Some((exe, rest)) = args.split_first() {
        (Some(exe), rest.to_vec())
    } else {
        (None, Vec::new())
    };
    match exe {
        None if etcd_image => Some(Start::ImageDefault),
        None => None,
        Some(exe) if basename(exe) == "etcd" => Some(Start::Flags(rest)),
        Some(exe) if SHELLS.contains(&basename(exe)) => {
            let mentions_etcd = rest.iter().any(|a| {
                a.split(|c: char| c.is_whitespace() || c == ';' || c == '&' || c == '|')
                    .any(|w| basename(w) == "etcd")
            });
            (etcd_image || mentions_etcd).then_some(Start::Shell)
        }
        Some(_) => None,
    }
}

/// The etcd container found in a Pod spec.
#[derive(Debug, Clone)]
pub struct EtcdContainer<'a> {
    /// Its index in `spec.containers`.
    pub index: usize,
    /// Its name.
    pub name: String,
    /// The container object.
    pub value: &'a Value,
}

/// The etcd container of `spec`: the one `named` (the annotation), or the one
/// container that runs `etcd` or runs the etcd image's default command.
/// `Ok(None)`: no container looks like etcd (the object passes through).
pub fn find<'a>(
    spec: &'a Value,
    named: Option<&str>,
) -> Result<Option<EtcdContainer<'a>>, Unresolvable> {
    let containers = spec
        .get("containers")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    let name_of = |c: &Value| {
        c.get("name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    if let Some(named) = named {
        return match containers
            .iter()
            .enumerate()
            .find(|(_, c)| name_of(c) == named)
        {
            Some((index, value)) => Ok(Some(EtcdContainer {
                index,
                name: named.to_owned(),
                value,
            })),
            None => Err(Unresolvable::new(
                None,
                super::ANNOTATION_ETCD_CONTAINER,
                format!("names container {named:?}, which the Pod does not have"),
                "name the Pod's etcd container in the annotation",
            )),
        };
    }
    let candidates: Vec<(usize, &Value)> = containers
        .iter()
        .enumerate()
        .filter(|(_, c)| start_of(c).is_some())
        .collect();
    match candidates.as_slice() {
        [] => Ok(None),
        [(index, value)] => Ok(Some(EtcdContainer {
            index: *index,
            name: name_of(value),
            value,
        })),
        many => Err(Unresolvable::new(
            None,
            "containers",
            format!(
                "more than one container looks like etcd ({})",
                many.iter()
                    .map(|(_, c)| name_of(c))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            format!(
                "name the etcd container with the annotation {}",
                super::ANNOTATION_ETCD_CONTAINER
            ),
        )),
    }
}

/// Where a setting came from, for messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// The command line.
    Flag,
    /// An `ETCD_*` variable of the container's env.
    Env(String),
}

/// One of etcd's settings as the container gives it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Setting {
    /// The value, its references resolved as far as the Pod allows.
    pub value: Expr,
    /// Where it was given.
    pub origin: Origin,
}

/// An env entry of the etcd container.
#[derive(Debug, Clone)]
enum EnvDef {
    Value(Expr),
    From(Value),
}

/// Resolves references the way the kubelet will in the etcd container, so
/// that the agent's containers see the same values: a reference to a literal
/// env value is expanded (it is the same in every replica); a reference to a
/// `valueFrom` (the downward API, a ConfigMap or Secret key) is kept and the
/// same definition carried into the agent's containers under a name of its own
/// ([`carried_name`]); a reference the container does not define stays a
/// reference (a Service link variable resolves the same in every container of
/// the Pod; anything else stays `$(NAME)` literally).
#[derive(Debug, Clone)]
pub struct Resolver {
    container: String,
    env: Vec<(String, EnvDef)>,
    /// `envFrom` prefixes ("" for none): a name they may define is unknown.
    env_from: Vec<String>,
    /// Definitions the agent's containers must carry, by their name there.
    carried: BTreeMap<String, Value>,
}

/// The name under which a carried definition is defined in the agent's
/// containers: the conventional names for the downward API's common fields
/// (so `--name=$(HOSTNAME)` becomes `$(POD_NAME)`), `AGENT_REF_<NAME>` for
/// anything else, so that nothing carried can set one of the agent's own
/// variables.
pub fn carried_name(name: &str, value_from: &Value) -> String {
    let field = value_from
        .get("fieldRef")
        .and_then(|f| f.get("fieldPath"))
        .and_then(Value::as_str);
    match field {
        Some("metadata.name") => "POD_NAME".to_owned(),
        Some("metadata.namespace") => "POD_NAMESPACE".to_owned(),
        Some("metadata.uid") => "POD_UID".to_owned(),
        Some("status.podIP") => "POD_IP".to_owned(),
        Some("spec.nodeName") => "NODE_NAME".to_owned(),
        Some("status.hostIP") => "HOST_IP".to_owned(),
        _ => format!("AGENT_REF_{name}"),
    }
}

/// Compares two `valueFrom`s as the kubelet would use them (a field reference's
/// default `apiVersion` is `v1`).
fn same_source(a: &Value, b: &Value) -> bool {
    let field = |v: &Value| {
        v.get("fieldRef")
            .and_then(|f| f.get("fieldPath"))
            .and_then(Value::as_str)
            .map(str::to_owned)
    };
    match (field(a), field(b)) {
        (Some(x), Some(y)) => x == y,
        (None, None) => a == b,
        _ => false,
    }
}

/// Names the agent defines itself: a reference etcd leaves unexpanded must
/// not expand in the agent to one of them.
pub const AGENT_DEFINED: &[&str] = &["POD_NAME", "POD_NAMESPACE", "POD_UID"];

impl Resolver {
    /// The resolver of `container` (its `env` and `envFrom`).
    pub fn new(container: &Value) -> Resolver {
        let name = container
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let env = container
            .get("env")
            .and_then(Value::as_array)
            .map(|list| {
                list.iter()
                    .filter_map(|e| {
                        let n = e.get("name")?.as_str()?.to_owned();
                        let def = match e.get("valueFrom") {
                            Some(from) if !from.is_null() => EnvDef::From(from.clone()),
                            _ => EnvDef::Value(Expr::parse(
                                e.get("value").and_then(Value::as_str).unwrap_or_default(),
                            )),
                        };
                        Some((n, def))
                    })
                    .collect()
            })
            .unwrap_or_default();
        let env_from = container
            .get("envFrom")
            .and_then(Value::as_array)
            .map(|list| {
                list.iter()
                    .map(|e| {
                        e.get("prefix")
                            .and_then(Value::as_str)
                            .unwrap_or_default()
                            .to_owned()
                    })
                    .collect()
            })
            .unwrap_or_default();
        Resolver {
            container: name,
            env,
            env_from,
            carried: BTreeMap::new(),
        }
    }

    /// True when an `envFrom` may define `name`.
    fn env_from_may_define(&self, name: &str) -> bool {
        self.env_from.iter().any(|p| name.starts_with(p.as_str()))
    }

    /// True when an `envFrom` may define one of etcd's own variables.
    pub fn env_from_may_set_etcd_flags(&self) -> bool {
        self.env_from
            .iter()
            .any(|p| p.starts_with("ETCD_") || "ETCD_".starts_with(p.as_str()))
    }

    /// The last definition of `name` among the first `upto` entries.
    fn lookup(&self, name: &str, upto: usize) -> Option<(usize, &EnvDef)> {
        self.env[..upto.min(self.env.len())]
            .iter()
            .enumerate()
            .rev()
            .find(|(_, (n, _))| n == name)
            .map(|(i, (_, d))| (i, d))
    }

    /// `expr` as the kubelet expands it with the first `upto` env entries
    /// (`usize::MAX`: all of them, as for `command` and `args`). `subject`
    /// names what is resolved, for the error.
    pub fn resolve(
        &mut self,
        expr: &Expr,
        upto: usize,
        subject: &str,
    ) -> Result<Expr, Unresolvable> {
        let mut err = None;
        let out = expr.map_refs(|name| match self.resolve_ref(name, upto, subject) {
            Ok(e) => e,
            Err(e) => {
                err.get_or_insert(e);
                Expr::default()
            }
        });
        match err {
            Some(e) => Err(e),
            None => Ok(out),
        }
    }

    fn resolve_ref(
        &mut self,
        name: &str,
        upto: usize,
        subject: &str,
    ) -> Result<Expr, Unresolvable> {
        match self.lookup(name, upto) {
            Some((at, EnvDef::Value(e))) => {
                let e = e.clone();
                self.resolve(&e, at, subject)
            }
            Some((_, EnvDef::From(from))) => {
                let mut from = from.clone();
                // A resource field without a container names the container
                // it is read in: in the agent's it must name etcd's.
                if let Some(r) = from.get_mut("resourceFieldRef") {
                    if r.get("containerName").is_none() {
                        r["containerName"] = Value::String(self.container.clone());
                    }
                }
                let carried = carried_name(name, &from);
                match self.carried.get(&carried) {
                    Some(existing) if !same_source(existing, &from) => {
                        return Err(Unresolvable::new(
                            Some(&self.container),
                            subject,
                            format!("$({name}) is defined twice with different sources"),
                            "define each variable once in the etcd container's env",
                        ))
                    }
                    _ => {}
                }
                self.carried.insert(carried.clone(), from);
                Ok(Expr::reference(&carried))
            }
            None if self.env_from_may_define(name) => Err(Unresolvable::new(
                Some(&self.container),
                subject,
                format!(
                    "$({name}) may come from the container's envFrom (a ConfigMap or Secret), which is not known when the Pod is admitted"
                ),
                format!("define {name} in the etcd container's env"),
            )),
            // Undefined: the kubelet leaves `$(NAME)` as it is (or fills in a
            // Service link variable, the same in every container of the Pod).
            None if AGENT_DEFINED.contains(&name) => Ok(Expr::text(&format!("$({name})"))),
            None => Ok(Expr::reference(name)),
        }
    }

    /// The value of env entry `name` as etcd's process sees it (the last
    /// definition; `None` when undefined); a `valueFrom` is carried.
    fn env_value(&mut self, name: &str) -> Result<Option<Expr>, Unresolvable> {
        let Some((at, def)) = self.lookup(name, usize::MAX) else {
            return Ok(None);
        };
        let subject = format!("env {name}");
        match def.clone() {
            EnvDef::Value(e) => self.resolve(&e, at, &subject).map(Some),
            EnvDef::From(_) => self.resolve_ref(name, usize::MAX, &subject).map(Some),
        }
    }

    /// The carried definitions, by their name in the agent's containers.
    pub fn carried(&self) -> &BTreeMap<String, Value> {
        &self.carried
    }
}

/// etcd's configuration as the container gives it.
#[derive(Debug, Clone)]
pub struct EtcdConfig {
    /// Settings by flag name (without dashes), from the command line and env.
    settings: BTreeMap<String, Setting>,
}

impl EtcdConfig {
    /// Reads the configuration of the etcd container `c` (see the module docs);
    /// references are resolved with `resolver` (the container's own).
    pub fn read(
        c: &EtcdContainer<'_>,
        resolver: &mut Resolver,
    ) -> Result<EtcdConfig, Unresolvable> {
        let container = Some(c.name.as_str());
        let start = start_of(c.value).unwrap_or(Start::ImageDefault);
        let args = match start {
            Start::Shell => {
                return Err(Unresolvable::new(
                    container,
                    "command",
                    "the container runs a shell: etcd's flags are in a script the agent does not read",
                    "run etcd directly (command: [etcd, --flag=value, ...]) or give its flags as ETCD_* env",
                ))
            }
            Start::Flags(args) => args,
            Start::ImageDefault => Vec::new(),
        };
        if resolver.env_from_may_set_etcd_flags() {
            return Err(Unresolvable::new(
                container,
                "envFrom",
                "the container takes env from a ConfigMap or Secret, which may set any of etcd's flags (ETCD_*) and is not known when the Pod is admitted",
                "give etcd's flags in command/args or env, or give envFrom a prefix",
            ));
        }
        let mut settings = BTreeMap::new();
        let mut i = 0;
        while i < args.len() {
            let token = resolver.resolve(&Expr::parse(&args[i]), usize::MAX, &args[i])?;
            i += 1;
            let head = token.literal_prefix();
            if token.as_literal().as_deref() == Some("--") {
                if let Some(extra) = args.get(i) {
                    return Err(Unresolvable::new(
                        container,
                        extra,
                        "etcd takes no positional arguments (it refuses to start with one)",
                        "remove it",
                    ));
                }
                break;
            }
            if !head.starts_with('-') || head == "-" {
                return Err(Unresolvable::new(
                    container,
                    &args[i - 1],
                    "etcd takes no positional arguments (it refuses to start with one)",
                    "give every setting as --flag=value",
                ));
            }
            let (name, value) = match token.split_once("=") {
                Some((name, value)) => {
                    let name = name.as_literal().ok_or_else(|| {
                        Unresolvable::new(
                            container,
                            &args[i - 1],
                            "the flag's name is a reference",
                            "spell the flag's name out",
                        )
                    })?;
                    let name = name.trim_start_matches('-').to_owned();
                    (name, value)
                }
                None => {
                    let Some(literal) = token.as_literal() else {
                        return Err(Unresolvable::new(
                            container,
                            &args[i - 1],
                            "the flag's name is a reference",
                            "spell the flag's name out",
                        ));
                    };
                    let name = literal.trim_start_matches('-').to_owned();
                    let takes_next = !BOOL_FLAGS.contains(&name.as_str())
                        && args.get(i).is_some_and(|next| {
                            // etcd takes no positional argument, so what
                            // follows a non-boolean flag is its value; a
                            // known string flag takes it even if it starts
                            // with a dash, as Go's flag package does.
                            !next.starts_with('-') || KNOWN_STRING_FLAGS.contains(&name.as_str())
                        });
                    if takes_next {
                        let value =
                            resolver.resolve(&Expr::parse(&args[i]), usize::MAX, &args[i])?;
                        i += 1;
                        (name, value)
                    } else {
                        (name, Expr::text("true"))
                    }
                }
            };
            // Go's flag package: the last occurrence wins.
            settings.insert(
                name,
                Setting {
                    value,
                    origin: Origin::Flag,
                },
            );
        }
        let env_names: Vec<String> = resolver
            .env
            .iter()
            .map(|(n, _)| n.clone())
            .filter(|n| n.starts_with("ETCD_"))
            .collect();
        for env_name in env_names {
            let flag = env_name["ETCD_".len()..]
                .to_ascii_lowercase()
                .replace('_', "-");
            if !ENV_FLAGS.contains(&flag.as_str()) {
                continue;
            }
            let Some(value) = resolver.env_value(&env_name)? else {
                continue;
            };
            match settings.get(&flag) {
                Some(Setting {
                    origin: Origin::Flag,
                    ..
                }) => {
                    return Err(Unresolvable::new(
                        container,
                        &format!("--{flag}"),
                        format!("it is given both on the command line and as {env_name}: etcd refuses to start on a shadowed variable"),
                        format!("remove one of --{flag} and {env_name}"),
                    ))
                }
                _ => {
                    settings.insert(
                        flag,
                        Setting {
                            value,
                            origin: Origin::Env(env_name),
                        },
                    );
                }
            }
        }
        for (flag, why) in [
            (
                "config-file",
                "etcd reads its configuration from a file, which is not known when the Pod is admitted",
            ),
            (
                "discovery-srv",
                "the members come from DNS SRV records, which the agent cannot read",
            ),
        ] {
            if let Some(s) = settings.get(flag) {
                return Err(Unresolvable::new(
                    container,
                    &s.origin.spell(flag),
                    why,
                    "give etcd's configuration as flags or ETCD_* env",
                ));
            }
        }
        Ok(EtcdConfig { settings })
    }

    /// The setting of `flag` (without dashes), if the container gives one.
    pub fn get(&self, flag: &str) -> Option<&Setting> {
        self.settings.get(flag)
    }

    /// The setting of boolean `flag`: `Some(true)`/`Some(false)` when given
    /// literally, `None` when not given.
    pub fn bool(&self, flag: &str) -> Result<Option<bool>, Unresolvable> {
        match self.settings.get(flag) {
            None => Ok(None),
            Some(s) => match s.value.as_literal().as_deref().map(str::to_ascii_lowercase) {
                Some(v) if ["true", "1", "t"].contains(&v.as_str()) => Ok(Some(true)),
                Some(v) if ["false", "0", "f"].contains(&v.as_str()) => Ok(Some(false)),
                _ => Err(Unresolvable::new(
                    None,
                    &s.origin.spell(flag),
                    format!("{:?} is not a boolean the Pod fixes", s.value.to_string()),
                    "give it as true or false",
                )),
            },
        }
    }
}

impl Origin {
    /// How the setting was spelled, for messages.
    pub fn spell(&self, flag: &str) -> String {
        match self {
            Origin::Flag => format!("--{flag}"),
            Origin::Env(name) => name.clone(),
        }
    }
}

/// The string flags the agent reads: they take the next argument as their
/// value whatever it starts with.
const KNOWN_STRING_FLAGS: &[&str] = &[
    "name",
    "data-dir",
    "wal-dir",
    "initial-cluster",
    "initial-cluster-token",
    "initial-cluster-state",
    "initial-advertise-peer-urls",
    "listen-client-urls",
    "advertise-client-urls",
    "cert-file",
    "key-file",
    "trusted-ca-file",
    "discovery",
    "discovery-endpoints",
    "discovery-token",
    "discovery-srv",
    "config-file",
    "v2-deprecation",
    "max-learners",
];

/// The flags read from `ETCD_*` env: the ones the agent derives anything
/// from, and those that make a Pod unreadable.
const ENV_FLAGS: &[&str] = &[
    "name",
    "data-dir",
    "wal-dir",
    "initial-cluster",
    "initial-cluster-token",
    "initial-cluster-state",
    "initial-advertise-peer-urls",
    "listen-client-urls",
    "advertise-client-urls",
    "cert-file",
    "key-file",
    "trusted-ca-file",
    "client-cert-auth",
    "auto-tls",
    "discovery",
    "discovery-endpoints",
    "discovery-token",
    "discovery-srv",
    "config-file",
    "v2-deprecation",
    "max-learners",
];

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn read(container: Value) -> Result<EtcdConfig, Unresolvable> {
        let spec = json!({"containers": [container]});
        let c = find(&spec, None).unwrap().unwrap();
        let mut r = Resolver::new(c.value);
        EtcdConfig::read(&c, &mut r)
    }

    fn get(cfg: &EtcdConfig, flag: &str) -> String {
        cfg.get(flag).unwrap().value.to_string()
    }

    #[test]
    fn every_spelling_etcd_accepts() {
        let cfg = read(json!({"name": "etcd", "image": "x", "command": [
            "/usr/local/bin/etcd", "--name", "a", "-data-dir=/d", "--client-cert-auth",
            "--initial-cluster-token", "--dash", "-trusted-ca-file", "/ca", "--pre-vote", "--name=b"
        ]}))
        .unwrap();
        assert_eq!(get(&cfg, "name"), "b", "the last occurrence wins");
        assert_eq!(get(&cfg, "data-dir"), "/d");
        assert_eq!(get(&cfg, "client-cert-auth"), "true");
        assert_eq!(get(&cfg, "initial-cluster-token"), "--dash");
        assert_eq!(get(&cfg, "trusted-ca-file"), "/ca");
        assert_eq!(get(&cfg, "pre-vote"), "true");
    }

    #[test]
    fn command_and_args_are_one_command_line() {
        let cfg = read(json!({"name": "e", "image": "quay.io/coreos/etcd:v3.6.11",
            "command": ["etcd"], "args": ["--name=x"]}))
        .unwrap();
        assert_eq!(get(&cfg, "name"), "x");
        let cfg = read(json!({"name": "e", "image": "quay.io/coreos/etcd:v3.6.11",
            "args": ["etcd", "--name=y"]}))
        .unwrap();
        assert_eq!(get(&cfg, "name"), "y");
    }

    #[test]
    fn references_resolve_through_env_and_the_downward_api() {
        let cfg = read(json!({"name": "etcd", "image": "quay.io/coreos/etcd:v3.6.11",
            "env": [
                {"name": "HOSTNAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                {"name": "SCHEME", "value": "http"},
                {"name": "SVC", "valueFrom": {"fieldRef": {"fieldPath": "metadata.annotations['serviceName']"}}},
                {"name": "URL", "value": "$(SCHEME)://$(HOSTNAME).$(SVC):2380"},
            ],
            "command": ["etcd", "--name=$(HOSTNAME)", "--initial-advertise-peer-urls=$(URL)", "--x=$(UNDEFINED)", "--y=$$(SCHEME)"]}))
        .unwrap();
        assert_eq!(get(&cfg, "name"), "$(POD_NAME)");
        assert_eq!(
            get(&cfg, "initial-advertise-peer-urls"),
            "http://$(POD_NAME).$(AGENT_REF_SVC):2380"
        );
        assert_eq!(get(&cfg, "x"), "$(UNDEFINED)");
        assert_eq!(
            cfg.get("y").unwrap().value.as_literal().as_deref(),
            Some("$(SCHEME)")
        );
    }

    #[test]
    fn env_drives_etcd_as_its_flags() {
        let cfg = read(
            json!({"name": "etcd", "image": "docker.io/bitnami/etcd:3.5.17-debian-12-r0",
            "env": [
                {"name": "MY_POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                {"name": "ETCD_NAME", "value": "$(MY_POD_NAME)"},
                {"name": "ETCD_DATA_DIR", "value": "/bitnami/etcd/data"},
                {"name": "ETCD_ON_K8S", "value": "yes"},
            ]}),
        )
        .unwrap();
        assert_eq!(get(&cfg, "name"), "$(POD_NAME)");
        assert_eq!(get(&cfg, "data-dir"), "/bitnami/etcd/data");
        assert_eq!(
            cfg.get("name").unwrap().origin,
            Origin::Env("ETCD_NAME".into())
        );
    }

    #[test]
    fn what_etcd_refuses_or_the_pod_hides_is_never_guessed() {
        for (container, subject) in [
            (
                json!({"name": "etcd", "image": "quay.io/coreos/etcd", "command": ["etcd", "--name=a"],
                       "env": [{"name": "ETCD_NAME", "value": "b"}]}),
                "--name",
            ),
            (
                json!({"name": "etcd", "image": "quay.io/coreos/etcd", "command": ["etcd", "positional"]}),
                "positional",
            ),
            (
                json!({"name": "etcd", "image": "quay.io/coreos/etcd", "command": ["/bin/sh", "-c", "exec etcd --name=a"]}),
                "command",
            ),
            (
                json!({"name": "etcd", "image": "quay.io/coreos/etcd", "command": ["etcd", "--config-file=/etc/etcd.yaml"]}),
                "--config-file",
            ),
            (
                json!({"name": "etcd", "image": "quay.io/coreos/etcd", "command": ["etcd"],
                       "envFrom": [{"configMapRef": {"name": "x"}}]}),
                "envFrom",
            ),
            (
                json!({"name": "etcd", "image": "quay.io/coreos/etcd", "command": ["etcd", "--name=$(N)"],
                       "envFrom": [{"prefix": "N", "configMapRef": {"name": "x"}}]}),
                "--name=$(N)",
            ),
            (
                json!({"name": "etcd", "image": "quay.io/coreos/etcd", "command": ["etcd", "--$(F)=x"],
                       "env": [{"name": "F", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]}),
                "--$(F)=x",
            ),
        ] {
            let e = read(container.clone()).unwrap_err();
            assert_eq!(e.subject, subject, "{container}: {e}");
            assert!(!e.reason.is_empty() && !e.remedy.is_empty(), "{e:?}");
        }
    }

    #[test]
    fn the_etcd_container_is_found_by_what_it_runs() {
        let spec = json!({"containers": [
            {"name": "backup", "image": "quay.io/coreos/etcd:v3.6.11", "command": ["etcdctl", "snapshot", "save"]},
            {"name": "main", "image": "registry.example/etcd:3.5.15-0", "command": ["etcd"]},
            {"name": "sidecar", "image": "busybox", "command": ["sh", "-c", "sleep 1"]},
        ]});
        assert_eq!(find(&spec, None).unwrap().unwrap().name, "main");
        assert!(find(
            &json!({"containers": [{"name": "web", "image": "nginx"}]}),
            None
        )
        .unwrap()
        .is_none());
        let two = json!({"containers": [
            {"name": "a", "image": "quay.io/coreos/etcd"}, {"name": "b", "image": "x", "command": ["etcd"]}]});
        assert!(find(&two, None).is_err());
        assert_eq!(find(&two, Some("b")).unwrap().unwrap().index, 1);
        assert!(find(&two, Some("c")).is_err());
    }

    #[test]
    fn versions_come_from_tags_not_digests() {
        for (image, want) in [
            ("quay.io/coreos/etcd:v3.6.11", Some("3.6.11")),
            ("docker.io/bitnami/etcd:3.5.17-debian-12-r0", Some("3.5.17")),
            ("registry.k8s.io/etcd:3.5.15-0", Some("3.5.15")),
            ("localhost:5000/etcd:3.7.3", Some("3.7.3")),
            ("localhost:5000/etcd", None),
            ("quay.io/coreos/etcd:latest", None),
            ("quay.io/coreos/etcd:v3.6.11@sha256:00", None),
        ] {
            assert_eq!(image_version(image).as_deref(), want, "{image}");
        }
        assert_eq!(image_name("localhost:5000/etcd:3.7.3"), "etcd");
    }
}
