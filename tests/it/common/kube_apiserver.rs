//! A real kube-apiserver on loopback, for the tests that must see what the real
//! authorizer, admission and validation do with the agent's calls
//! (`tests/it/kube_real.rs`; the in-process fake of `tests/it/kube_fake/` stays for
//! 5xx, slow and malformed answers).
//!
//! The binary is upstream kube-apiserver built by `scripts/build-kube-apiserver`
//! from the `k8s.io/kubernetes` Go module (version pinned in
//! `tools/kube-apiserver/go.mod`), found through `KUBE_APISERVER_BIN` or its
//! default cache path. Each [`KubeApiServer`] runs:
//!
//! * its own etcd (a one-member [`Cluster`] of the harness, 3.5 latest);
//! * TLS on `127.0.0.1:<free port>` with a serving certificate for `127.0.0.1`
//!   and `localhost` signed by a CA made for this server (rcgen, at start);
//! * client-certificate authentication against that CA: the test's own admin is
//!   a certificate with `O=system:masters`;
//! * service-account tokens signed with an ECDSA key made at start (issuer
//!   [`ISSUER`]), TokenRequest served, the RBAC authorizer alone
//!   (`--authorization-mode=RBAC`), the default admission plugins;
//! * the operator's CRDs (`tests/fixtures/kube/crds.yaml`), installed and
//!   Established before [`KubeApiServer::start`] returns.
//!
//! Nothing else runs: no scheduler, no kubelet, no controller-manager. Pods are
//! created and never scheduled; a test writes their status through `pods/status`
//! as a kubelet would (or runs a real kubelet beside the server: `node/`, whose
//! client certificates [`KubeApiServer::issue_client_cert`] signs). There is no `default` ServiceAccount (the controller that
//! makes it is not running) and no `kube-root-ca.crt` ConfigMap: Pods name their
//! ServiceAccount and tests create what they reference.
//!
//! The server is stopped by its PID (SIGTERM, then SIGKILL after a grace) when
//! the value drops, panics included, and its etcd with it; its PID is also in
//! the harness's registry, so a test process that dies without unwinding has its
//! kube-apiserver killed by the next test process (see `process.rs`).

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::Duration;

use k8s_openapi::api::authentication::v1::TokenRequest;
use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use nix::sys::signal::Signal;
use serde_json::{json, Value};

use super::cluster::Cluster;
use super::etcd::EtcdVersion;
use super::member::tail;

/// The last `lines` lines of the file at `path`.
fn file_tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    tail(&text, lines).to_owned()
}
use super::patience::{patience, Deadline};
use super::ports::free_port;
use super::process::{register, signal, unregister, wait_with_deadline};

/// The service-account token issuer (and default audience) of every server.
pub const ISSUER: &str = "https://kubernetes.default.svc.cluster.local";
/// The ServiceAccount of `deploy/base`.
pub const AGENT_SERVICE_ACCOUNT: &str = "etcd-member-agent";
/// How long [`KubeApiServer::stop`] waits after SIGTERM before SIGKILL.
pub const APISERVER_STOP_GRACE: Duration = Duration::from_secs(10);

/// The repository root (the crate's manifest dir).
fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The kube-apiserver version pinned by `tools/kube-apiserver/go.mod`
/// (`v1.37.2`).
pub fn kube_apiserver_version() -> String {
    let go_mod = repo().join("tools/kube-apiserver/go.mod");
    let text = std::fs::read_to_string(&go_mod)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", go_mod.display()));
    text.lines()
        .filter_map(|l| {
            let mut words = l.split_whitespace();
            (words.next() == Some("k8s.io/kubernetes")).then(|| words.next())?
        })
        .find(|v| v.starts_with("v1."))
        .unwrap_or_else(|| panic!("{} requires no k8s.io/kubernetes v1.x", go_mod.display()))
        .to_owned()
}

/// The binary: `KUBE_APISERVER_BIN`, else `scripts/build-kube-apiserver`'s
/// default cache path for the pinned version. Panics, saying how to build it,
/// when it is missing.
pub fn kube_apiserver_bin() -> PathBuf {
    let bin = std::env::var_os("KUBE_APISERVER_BIN")
        .filter(|b| !b.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            Path::new("/var/cache/etcd-member-agent/kube-apiserver")
                .join(kube_apiserver_version())
                .join("kube-apiserver")
        });
    assert!(
        bin.is_file(),
        "kube-apiserver is not built: no {} (KUBE_APISERVER_BIN); run scripts/setup or scripts/build-kube-apiserver",
        bin.display()
    );
    bin
}

/// A running kube-apiserver and its etcd. See the module docs.
pub struct KubeApiServer {
    dir: tempfile::TempDir,
    port: u16,
    ca_pem: String,
    ca: CaKey,
    admin_kubeconfig: PathBuf,
    log_path: PathBuf,
    child: Mutex<Option<Child>>,
    pid: u32,
    // Held (never read) so the server's etcd lives as long as the server:
    // dropped after it (fields drop in order; Drop::drop runs first).
    _etcd: Cluster,
}

impl KubeApiServer {
    /// Starts etcd and kube-apiserver, waits until `/readyz` answers ok, and
    /// installs the operator's CRDs. Panics with the tail of the server's log
    /// when it does not come up within one patience.
    pub async fn start() -> KubeApiServer {
        KubeApiServer::start_with(&[]).await
    }

    /// As [`KubeApiServer::start`], with `extra` flags after the harness's own
    /// (a flag given twice takes its last value: `--watch-cache=true` turns the
    /// watch cache back on, as production servers run).
    pub async fn start_with(extra: &[&str]) -> KubeApiServer {
        let bin = kube_apiserver_bin();
        let etcd = Cluster::builder(EtcdVersion::V3_5Latest)
            .members(1)
            .token("kube-apiserver")
            .start();
        let dir = tempfile::Builder::new()
            .prefix("kube-apiserver-")
            .tempdir()
            .unwrap_or_else(|e| panic!("cannot create a temp dir: {e}"));
        let pki = Pki::generate(dir.path());
        let port = free_port();
        let log_path = dir.path().join("kube-apiserver.log");
        let log = File::create(&log_path)
            .unwrap_or_else(|e| panic!("cannot create {}: {e}", log_path.display()));
        let stderr = log
            .try_clone()
            .unwrap_or_else(|e| panic!("cannot dup log handle: {e}"));
        let p = |name: &str| dir.path().join(name).display().to_string();
        let args = [
            format!("--etcd-servers={}", etcd.client_urls().join(",")),
            "--bind-address=127.0.0.1".to_owned(),
            "--advertise-address=127.0.0.1".to_owned(),
            format!("--secure-port={port}"),
            format!("--cert-dir={}", p("cert-dir")),
            format!("--tls-cert-file={}", p("server.crt")),
            format!("--tls-private-key-file={}", p("server.key")),
            format!("--client-ca-file={}", p("ca.crt")),
            format!("--service-account-issuer={ISSUER}"),
            format!("--service-account-key-file={}", p("sa.pub")),
            format!("--service-account-signing-key-file={}", p("sa.key")),
            format!("--api-audiences={ISSUER}"),
            "--authorization-mode=RBAC".to_owned(),
            "--anonymous-auth=false".to_owned(),
            // Service IPs are only allocated, never dialled: no kube-proxy here.
            "--service-cluster-ip-range=10.0.0.0/24".to_owned(),
            // No endpoints of the `kubernetes` Service: nothing would use them.
            "--endpoint-reconciler-type=none".to_owned(),
            "--profiling=false".to_owned(),
            "--watch-cache=false".to_owned(),
            "--v=0".to_owned(),
        ];
        let mut child = Command::new(&bin)
            .env_clear()
            .args(&args)
            .args(extra)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(stderr)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", bin.display()));
        let pid = child.id();
        // The registry's orphan sweep matches the command line against this path.
        register(pid, dir.path());
        let admin_kubeconfig = dir.path().join("admin.kubeconfig");
        let server = format!("https://127.0.0.1:{port}");
        write_kubeconfig(
            &admin_kubeconfig,
            &server,
            &pki.ca_pem,
            json!({
                "client-certificate-data": super::base64_encode(pki.admin_cert.as_bytes()),
                "client-key-data": super::base64_encode(pki.admin_key.as_bytes()),
            }),
        );
        // Until it answers, a dead server must fail fast, with its log.
        if let Ok(Some(status)) = child.try_wait() {
            panic!(
                "kube-apiserver exited at once ({status}):\n{}",
                file_tail(&log_path, 40)
            );
        }
        let api = KubeApiServer {
            dir,
            port,
            ca_pem: pki.ca_pem,
            ca: pki.ca,
            admin_kubeconfig,
            log_path,
            child: Mutex::new(Some(child)),
            pid,
            _etcd: etcd,
        };
        api.wait_ready().await;
        api.install_crds().await;
        api
    }

    /// `https://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("https://127.0.0.1:{}", self.port)
    }

    /// The PID of the server process.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The server's log so far (its last `lines` lines).
    pub fn log_tail(&self, lines: usize) -> String {
        file_tail(&self.log_path, lines)
    }

    /// A client as the test's admin.
    pub async fn admin(&self) -> Client {
        client_from(&self.admin_kubeconfig).await
    }

    /// Writes a kubeconfig that authenticates with `token` (a service-account
    /// token) and trusts the server's CA, as a Pod's in-cluster config would;
    /// returns its path (`<name>.kubeconfig` in the server's dir).
    pub fn token_kubeconfig(&self, name: &str, token: &str) -> PathBuf {
        let path = self.dir.path().join(format!("{name}.kubeconfig"));
        write_kubeconfig(&path, &self.url(), &self.ca_pem, json!({"token": token}));
        path
    }

    /// The server's CA certificate (PEM): it signs the serving certificate and
    /// every client certificate the server accepts.
    pub fn ca_pem(&self) -> &str {
        &self.ca_pem
    }

    /// The server's CA certificate file.
    pub fn ca_path(&self) -> PathBuf {
        self.dir.path().join("ca.crt")
    }

    /// A client certificate and key (PEM) signed by the server's CA, for user
    /// `cn` in group `org`: what a kubelet (`system:node:<node>`,
    /// `system:nodes`) authenticates with.
    pub fn issue_client_cert(&self, cn: &str, org: Option<&str>) -> (String, String) {
        self.ca.issue(
            Vec::new(),
            cn,
            org,
            rcgen::ExtendedKeyUsagePurpose::ClientAuth,
        )
    }

    /// Writes a kubeconfig that authenticates with a client certificate (PEM) and
    /// trusts the server's CA; returns its path (`<name>.kubeconfig` in the
    /// server's dir).
    pub fn cert_kubeconfig(&self, name: &str, cert_pem: &str, key_pem: &str) -> PathBuf {
        let path = self.dir.path().join(format!("{name}.kubeconfig"));
        write_kubeconfig(
            &path,
            &self.url(),
            &self.ca_pem,
            json!({
                "client-certificate-data": super::base64_encode(cert_pem.as_bytes()),
                "client-key-data": super::base64_encode(key_pem.as_bytes()),
            }),
        );
        path
    }

    async fn wait_ready(&self) {
        let deadline = Deadline::after(patience());
        let client = self.admin().await;
        loop {
            if let Some(status) = self.exit_status() {
                panic!(
                    "kube-apiserver exited ({status}) before it was ready:\n{}",
                    self.log_tail(60)
                );
            }
            let req = axum::http::Request::get("/readyz")
                .body(Vec::new())
                .unwrap_or_else(|e| panic!("{e}"));
            let last = match client.request_text(req).await {
                Ok(body) if body.trim() == "ok" => return,
                Ok(body) => body,
                Err(e) => e.to_string(),
            };
            if deadline.passed() {
                panic!(
                    "kube-apiserver not ready within {:?}: {last}\n{}",
                    patience(),
                    self.log_tail(60)
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    fn exit_status(&self) -> Option<std::process::ExitStatus> {
        let mut child = self.child.lock().unwrap_or_else(|e| e.into_inner());
        child.as_mut()?.try_wait().ok().flatten()
    }

    /// Creates the operator's CRDs and waits until both are Established.
    async fn install_crds(&self) {
        let client = self.admin().await;
        let crds: Api<CustomResourceDefinition> = Api::all(client);
        let text = std::fs::read_to_string(repo().join("tests/fixtures/kube/crds.yaml"))
            .unwrap_or_else(|e| panic!("cannot read the CRD fixture: {e}"));
        let docs: Vec<CustomResourceDefinition> =
            serde_saphyr::from_multiple(&text).unwrap_or_else(|e| panic!("crds.yaml: {e}"));
        let mut names = Vec::new();
        for crd in &docs {
            let created = crds
                .create(&PostParams::default(), crd)
                .await
                .unwrap_or_else(|e| panic!("cannot create CRD: {e}"));
            names.push(created.metadata.name.unwrap_or_default());
        }
        let deadline = Deadline::after(patience());
        for name in names {
            loop {
                let crd = crds
                    .get(&name)
                    .await
                    .unwrap_or_else(|e| panic!("cannot read CRD {name}: {e}"));
                let established = crd
                    .status
                    .and_then(|s| s.conditions)
                    .unwrap_or_default()
                    .iter()
                    .any(|c| c.type_ == "Established" && c.status == "True");
                if established {
                    break;
                }
                assert!(!deadline.passed(), "CRD {name} not Established in time");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
        // Established is the CRD's word; discovery of the new group can lag it.
        let client = self.admin().await;
        let deadline = Deadline::after(patience());
        loop {
            let req = axum::http::Request::get("/apis/etcd-operator.cozystack.io/v1alpha2")
                .body(Vec::new())
                .unwrap_or_else(|e| panic!("{e}"));
            match client.request_text(req).await {
                Ok(body) if body.contains("etcdmembers") && body.contains("etcdclusters") => return,
                Ok(_) | Err(_) if !deadline.passed() => {
                    tokio::time::sleep(Duration::from_millis(100)).await
                }
                other => panic!("the operator's group is not served: {other:?}"),
            }
        }
    }

    /// Creates namespace `ns`.
    pub async fn create_namespace(&self, ns: &str) {
        let namespaces: Api<Namespace> = Api::all(self.admin().await);
        let obj: Namespace = serde_json::from_value(json!({"metadata": {"name": ns}}))
            .unwrap_or_else(|e| panic!("{e}"));
        namespaces
            .create(&PostParams::default(), &obj)
            .await
            .unwrap_or_else(|e| panic!("cannot create namespace {ns}: {e}"));
    }

    /// Applies `deploy/base` in `ns` as `kustomize build` of an overlay with
    /// `namespace: ns` would: every resource the kustomization lists, with
    /// `metadata.namespace` and each ServiceAccount subject's namespace set.
    /// Returns the objects applied (`kind/name`).
    pub async fn apply_deploy_base(&self, ns: &str) -> Vec<String> {
        let base = repo().join("deploy/base");
        let read = |name: &str| {
            let path = base.join(name);
            let text = std::fs::read_to_string(&path)
                .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
            serde_saphyr::from_str::<Value>(&text)
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        };
        let kustomization = read("kustomization.yaml");
        let resources: Vec<String> = kustomization["resources"]
            .as_array()
            .unwrap_or_else(|| panic!("deploy/base/kustomization.yaml lists no resources"))
            .iter()
            .map(|r| r.as_str().unwrap_or_default().to_owned())
            .collect();
        let client = self.admin().await;
        let pp = PostParams::default();
        let mut applied = Vec::new();
        for file in resources {
            let mut doc = read(&file);
            doc["metadata"]["namespace"] = json!(ns);
            let kind = doc["kind"].as_str().unwrap_or_default().to_owned();
            let name = doc["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            let fail = |e: kube::Error| panic!("cannot create {kind} {name} from {file}: {e}");
            match kind.as_str() {
                "ServiceAccount" => {
                    let obj: ServiceAccount =
                        serde_json::from_value(doc).unwrap_or_else(|e| panic!("{file}: {e}"));
                    let api: Api<ServiceAccount> = Api::namespaced(client.clone(), ns);
                    api.create(&pp, &obj).await.map(drop).unwrap_or_else(fail);
                }
                "Role" => {
                    let obj: Role =
                        serde_json::from_value(doc).unwrap_or_else(|e| panic!("{file}: {e}"));
                    let api: Api<Role> = Api::namespaced(client.clone(), ns);
                    api.create(&pp, &obj).await.map(drop).unwrap_or_else(fail);
                }
                "RoleBinding" => {
                    if let Some(subjects) = doc["subjects"].as_array_mut() {
                        for s in subjects {
                            if s["kind"] == "ServiceAccount" {
                                s["namespace"] = json!(ns);
                            }
                        }
                    }
                    let obj: RoleBinding =
                        serde_json::from_value(doc).unwrap_or_else(|e| panic!("{file}: {e}"));
                    let api: Api<RoleBinding> = Api::namespaced(client.clone(), ns);
                    api.create(&pp, &obj).await.map(drop).unwrap_or_else(fail);
                }
                other => panic!("deploy/base/{file}: a {other} is not applied by this harness"),
            }
            applied.push(format!("{kind}/{name}"));
        }
        applied
    }

    /// Mints a token for ServiceAccount `ns/sa` through the TokenRequest API
    /// (`serviceaccounts/token`), audience [`ISSUER`], valid for an hour; bound
    /// to Pod `bound_pod` (`(name, uid)`) when given, as the kubelet's
    /// projected token is.
    pub async fn token_for(&self, ns: &str, sa: &str, bound_pod: Option<(&str, &str)>) -> String {
        let api: Api<ServiceAccount> = Api::namespaced(self.admin().await, ns);
        let bound = bound_pod.map(
            |(name, uid)| json!({"apiVersion": "v1", "kind": "Pod", "name": name, "uid": uid}),
        );
        let request: TokenRequest = serde_json::from_value(json!({
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {
                "audiences": [ISSUER],
                "expirationSeconds": 3600,
                "boundObjectRef": bound,
            },
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        let answer = api
            .create_token_request(sa, &PostParams::default(), &request)
            .await
            .unwrap_or_else(|e| panic!("TokenRequest for {ns}/{sa} failed: {e}"));
        answer
            .status
            .and_then(|s| s.token)
            .filter(|t| !t.is_empty())
            .unwrap_or_else(|| panic!("TokenRequest for {ns}/{sa} returned no token"))
    }

    /// SIGTERM, then SIGKILL after [`APISERVER_STOP_GRACE`]; reaps the process.
    /// Idempotent. Its etcd stops when the value drops.
    pub fn stop(&self) {
        let mut guard = self.child.lock().unwrap_or_else(|e| e.into_inner());
        let Some(mut child) = guard.take() else {
            return;
        };
        signal(self.pid, Signal::SIGTERM);
        if wait_with_deadline(&mut child, Deadline::after(APISERVER_STOP_GRACE)).is_none() {
            signal(self.pid, Signal::SIGKILL);
            let _ = child.wait();
        }
        unregister(self.pid);
    }
}

impl Drop for KubeApiServer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A client from a kubeconfig file, as the agent builds one.
pub async fn client_from(kubeconfig: &Path) -> Client {
    let kc = Kubeconfig::read_from(kubeconfig)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", kubeconfig.display()));
    let config = Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .unwrap_or_else(|e| panic!("bad kubeconfig {}: {e}", kubeconfig.display()));
    Client::try_from(config).unwrap_or_else(|e| panic!("cannot build a client: {e}"))
}

/// A one-context kubeconfig (JSON, which is YAML) for `server`, trusting
/// `ca_pem`, authenticating as `user`.
fn write_kubeconfig(path: &Path, server: &str, ca_pem: &str, user: Value) {
    let doc = json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "real", "cluster": {
            "server": server,
            "certificate-authority-data": super::base64_encode(ca_pem.as_bytes()),
        }}],
        "users": [{"name": "user", "user": user}],
        "contexts": [{"name": "real", "context": {"cluster": "real", "user": "user"}}],
        "current-context": "real",
    });
    std::fs::write(path, doc.to_string())
        .unwrap_or_else(|e| panic!("cannot write {}: {e}", path.display()));
}

/// The certificates and keys of one server, written into its dir.
struct Pki {
    ca_pem: String,
    ca: CaKey,
    admin_cert: String,
    admin_key: String,
}

/// The server's CA, kept to sign client certificates after start.
struct CaKey {
    params: rcgen::CertificateParams,
    key_pem: String,
}

impl CaKey {
    /// A leaf certificate and key (PEM) for `cn` (in `org`) with `sans`.
    fn issue(
        &self,
        sans: Vec<String>,
        cn: &str,
        org: Option<&str>,
        eku: rcgen::ExtendedKeyUsagePurpose,
    ) -> (String, String) {
        use rcgen::{CertificateParams, DnType, Issuer, KeyPair, KeyUsagePurpose};
        let ca_key = KeyPair::from_pem(&self.key_pem).unwrap_or_else(|e| panic!("{e}"));
        let issuer = Issuer::from_params(&self.params, ca_key);
        let key = KeyPair::generate().unwrap_or_else(|e| panic!("{e}"));
        let mut params = CertificateParams::new(sans).unwrap_or_else(|e| panic!("{e}"));
        params.distinguished_name.push(DnType::CommonName, cn);
        if let Some(org) = org {
            params
                .distinguished_name
                .push(DnType::OrganizationName, org);
        }
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        params.extended_key_usages = vec![eku];
        let cert = params
            .signed_by(&key, &issuer)
            .unwrap_or_else(|e| panic!("{e}"));
        (cert.pem(), key.serialize_pem())
    }
}

impl Pki {
    fn generate(dir: &Path) -> Pki {
        use rcgen::{
            BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
            KeyUsagePurpose,
        };
        let write = |name: &str, text: &str| {
            std::fs::write(dir.join(name), text)
                .unwrap_or_else(|e| panic!("cannot write {name}: {e}"))
        };
        let ca_key = KeyPair::generate().unwrap_or_else(|e| panic!("{e}"));
        let mut params =
            CertificateParams::new(Vec::<String>::new()).unwrap_or_else(|e| panic!("{e}"));
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(DnType::CommonName, "etcd-member-agent test kube CA");
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let ca_pem = params
            .self_signed(&ca_key)
            .unwrap_or_else(|e| panic!("{e}"))
            .pem();
        let ca = CaKey {
            params,
            key_pem: ca_key.serialize_pem(),
        };
        let (server_cert, server_key) = ca.issue(
            vec!["127.0.0.1".to_owned(), "localhost".to_owned()],
            "kube-apiserver",
            None,
            ExtendedKeyUsagePurpose::ServerAuth,
        );
        let (admin_cert, admin_key) = ca.issue(
            Vec::new(),
            "etcd-member-agent-test-admin",
            Some("system:masters"),
            ExtendedKeyUsagePurpose::ClientAuth,
        );
        // ES256 service-account signing key (PKCS#8), and its public half for
        // verification (kube-apiserver reads no public key out of a PKCS#8 file).
        let sa_key = KeyPair::generate().unwrap_or_else(|e| panic!("{e}"));
        write("ca.crt", &ca_pem);
        write("server.crt", &server_cert);
        write("server.key", &server_key);
        write("sa.key", &sa_key.serialize_pem());
        write("sa.pub", &sa_key.public_key_pem());
        std::fs::create_dir_all(dir.join("cert-dir"))
            .unwrap_or_else(|e| panic!("cannot create cert-dir: {e}"));
        Pki {
            ca_pem,
            ca,
            admin_cert,
            admin_key,
        }
    }
}
