//! `etcd-member-agent webhook` behind the real kube-apiserver of the tests
//! (`tests/it/common/kube_apiserver.rs`): the shipped
//! `deploy/webhook/mutatingwebhookconfiguration.yaml`, its Service reference
//! replaced by a URL to the webhook on loopback over TLS (a CA made for the
//! test, as its `caBundle`), and the shipped RBAC for the webhook and the
//! agent. Pods are created through the API as an operator, a StatefulSet
//! controller or a person would create them, and read back:
//!
//! * every member shape comes back guarded, and passes the Kubernetes schemas
//!   strictly; a Pod without etcd, an opted-out Pod and the webhook's own Pod
//!   come back as they went in; a second webhook (reinvocation) adds nothing;
//! * a Pod the agent cannot understand is admitted unguarded with a warning to
//!   its creator, an Event on its StatefulSet, and the metric;
//! * with the webhook down, `failurePolicy: Fail` refuses the Pod naming the
//!   webhook, `Ignore` admits it unguarded; a rotated certificate is served
//!   without a restart and the API server keeps calling;
//! * least privilege decided by the real authorizer: the agent in a guarded
//!   Pod, with the tenant RoleBinding and the Pod's own token, makes every
//!   call it needs and no other; the webhook can write Events and nothing else.

use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::Arc;
use std::time::Duration;

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::authorization::v1::SelfSubjectAccessReview;
use k8s_openapi::api::core::v1::{Event, Namespace, Pod, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, RoleBinding};
use kube::api::{Api, ListParams, PostParams};
use kube::Client;
use nix::sys::signal::Signal;
use serde_json::{json, Value};

use crate::common::*;
use crate::inject::validate_strictly;

const TENANT: &str = "tenant-a";
const UNLABELLED: &str = "tenant-b";
pub(crate) const WEBHOOK_NS: &str = "etcd-member-agent-system";
pub(crate) const WEBHOOK_SA: &str = "etcd-member-agent-webhook";
const IMAGE: &str = "ghcr.io/example/etcd-member-agent:0.1.0";
pub(crate) const LABEL: &str = "etcd-member-agent.cozystack.io/inject";
pub(crate) const INJECTED: &str = "etcd-member-agent.cozystack.io/injected";

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

pub(crate) fn yaml_file(rel: &str) -> Vec<Value> {
    let text = std::fs::read_to_string(repo().join(rel))
        .unwrap_or_else(|e| panic!("cannot read {rel}: {e}"));
    serde_saphyr::from_multiple::<Value>(&text)
        .unwrap_or_else(|e| panic!("{rel}: {e}"))
        .into_iter()
        .filter(|d| !d.is_null())
        .collect()
}

pub(crate) fn from_json<T: serde::de::DeserializeOwned>(v: Value) -> T {
    serde_json::from_value(v).unwrap_or_else(|e| panic!("{e}"))
}

// ---------------------------------------------------------------------------
// A CA and the webhook's certificates
// ---------------------------------------------------------------------------

pub(crate) struct TestCa {
    issuer: rcgen::Issuer<'static, rcgen::KeyPair>,
    /// The CA's certificate.
    pub(crate) pem: String,
}

impl TestCa {
    pub(crate) fn new() -> TestCa {
        use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair, KeyUsagePurpose};
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(DnType::CommonName, "etcd-member-agent webhook test CA");
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let pem = params.self_signed(&key).unwrap().pem();
        TestCa {
            issuer: rcgen::Issuer::new(params, key),
            pem,
        }
    }

    /// A serving certificate for 127.0.0.1: (cert PEM, key PEM).
    pub(crate) fn leaf(&self) -> (String, String) {
        use rcgen::{CertificateParams, ExtendedKeyUsagePurpose, KeyPair};
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(vec!["127.0.0.1".to_owned()]).unwrap();
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        (cert.pem(), key.serialize_pem())
    }
}

/// The DER of the first certificate in `pem`.
fn der(pem: &str) -> Vec<u8> {
    use rustls::pki_types::pem::PemObject;
    rustls::pki_types::CertificateDer::from_pem_slice(pem.as_bytes())
        .unwrap()
        .to_vec()
}

fn tls_client(ca_pem: &str) -> rustls::ClientConfig {
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls::pki_types::CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(cert.unwrap()).unwrap();
    }
    rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth()
}

// ---------------------------------------------------------------------------
// The webhook process
// ---------------------------------------------------------------------------

pub(crate) struct Webhook {
    dir: tempfile::TempDir,
    port: u16,
    ca: String,
    child: Option<Child>,
    pid: u32,
}

impl Webhook {
    /// Starts `webhook` on 127.0.0.1 with a certificate of `ca`, writing Events
    /// through `kubeconfig`; waits until it answers `/healthz`.
    async fn start(ca: &TestCa, kubeconfig: &Path) -> Webhook {
        Webhook::start_with(ca, kubeconfig, &[format!("--image={IMAGE}")]).await
    }

    /// As [`Webhook::start`], with `args` (`--image` among them).
    pub(crate) async fn start_with(ca: &TestCa, kubeconfig: &Path, args: &[String]) -> Webhook {
        let dir = tempfile::Builder::new()
            .prefix("webhook-")
            .tempdir()
            .unwrap();
        let (cert, key) = ca.leaf();
        std::fs::write(dir.path().join("tls.crt"), cert).unwrap();
        std::fs::write(dir.path().join("tls.key"), key).unwrap();
        let port = free_port();
        let mut w = Webhook {
            dir,
            port,
            ca: ca.pem.clone(),
            child: None,
            pid: 0,
        };
        w.spawn(kubeconfig, args).await;
        w
    }

    async fn spawn(&mut self, kubeconfig: &Path, args: &[String]) {
        let log = std::fs::File::create(self.dir.path().join("webhook.log")).unwrap();
        let mut cmd = agent();
        cmd.arg("webhook")
            .arg(format!(
                "--tls-cert={}",
                self.dir.path().join("tls.crt").display()
            ))
            .arg(format!(
                "--tls-key={}",
                self.dir.path().join("tls.key").display()
            ))
            .args(args)
            .env("AGENT_WEBHOOK_LISTEN", format!("127.0.0.1:{}", self.port))
            .env("AGENT_WEBHOOK_EVENTS", "true")
            .env("AGENT_WEBHOOK_CERT_RELOAD_INTERVAL", "200ms")
            .env("KUBECONFIG", kubeconfig)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log);
        let child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start the webhook: {e}"));
        self.pid = child.id();
        register(self.pid, self.dir.path());
        self.child = Some(child);
        let deadline = Deadline::after(patience());
        loop {
            match self.get("/healthz").await {
                Ok((200, body)) if body == "ok\n" => return,
                other if deadline.passed() => {
                    panic!("the webhook does not answer: {other:?}\n{}", self.log())
                }
                _ => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
    }

    pub(crate) fn url(&self) -> String {
        format!("https://127.0.0.1:{}/mutate", self.port)
    }

    pub(crate) fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("webhook.log")).unwrap_or_default()
    }

    async fn get(&self, path: &str) -> Result<(u16, String), String> {
        let client = reqwest::Client::builder()
            .tls_backend_preconfigured(tls_client(&self.ca))
            .timeout(Duration::from_secs(5))
            .build()
            .map_err(|e| e.to_string())?;
        let r = client
            .get(format!("https://127.0.0.1:{}{path}", self.port))
            .send()
            .await
            .map_err(|e| format!("{e:?}"))?;
        let code = r.status().as_u16();
        Ok((code, r.text().await.map_err(|e| e.to_string())?))
    }

    pub(crate) async fn metric(&self, line_start: &str) -> Option<f64> {
        let (_, text) = self.get("/metrics").await.ok()?;
        text.lines()
            .find(|l| l.starts_with(line_start))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
    }

    /// The certificate a TLS client is served now.
    async fn served_certificate(&self) -> Vec<u8> {
        let connector = tokio_rustls::TlsConnector::from(Arc::new(tls_client(&self.ca)));
        let tcp = tokio::net::TcpStream::connect(("127.0.0.1", self.port))
            .await
            .unwrap();
        let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
        let tls = connector.connect(name, tcp).await.unwrap();
        tls.get_ref().1.peer_certificates().unwrap()[0].to_vec()
    }

    fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            signal(self.pid, Signal::SIGTERM);
            if wait_with_deadline(&mut child, Deadline::after(Duration::from_secs(15))).is_none() {
                signal(self.pid, Signal::SIGKILL);
                let _ = child.wait();
            }
            unregister(self.pid);
        }
    }
}

impl Drop for Webhook {
    fn drop(&mut self) {
        self.stop();
    }
}

// ---------------------------------------------------------------------------
// The world: the API server, the shipped RBAC and configuration, the webhook
// ---------------------------------------------------------------------------

struct World {
    api: KubeApiServer,
    admin: Client,
    ca: TestCa,
    webhook: Webhook,
    webhook_kubeconfig: PathBuf,
}

async fn create_namespace(admin: &Client, name: &str, labels: Value) {
    let api: Api<Namespace> = Api::all(admin.clone());
    api.create(
        &PostParams::default(),
        &from_json(json!({"metadata": {"name": name, "labels": labels}})),
    )
    .await
    .unwrap_or_else(|e| panic!("cannot create namespace {name}: {e}"));
}

async fn create_service_account(admin: &Client, ns: &str, name: &str) {
    let api: Api<ServiceAccount> = Api::namespaced(admin.clone(), ns);
    api.create(
        &PostParams::default(),
        &from_json(json!({"metadata": {"name": name}})),
    )
    .await
    .unwrap_or_else(|e| panic!("cannot create ServiceAccount {ns}/{name}: {e}"));
}

/// Applies the cluster-scoped RBAC of `deploy/webhook` (and the agent's
/// ClusterRole) as kustomize would render it.
pub(crate) async fn apply_webhook_rbac(admin: &Client) {
    for doc in yaml_file("deploy/webhook/rbac.yaml")
        .into_iter()
        .chain(yaml_file("deploy/webhook/agent-clusterrole.yaml"))
    {
        let pp = PostParams::default();
        match doc["kind"].as_str() {
            Some("ClusterRole") => {
                let api: Api<ClusterRole> = Api::all(admin.clone());
                api.create(&pp, &from_json(doc)).await.unwrap();
            }
            Some("ClusterRoleBinding") => {
                let api: Api<ClusterRoleBinding> = Api::all(admin.clone());
                api.create(&pp, &from_json(doc)).await.unwrap();
            }
            other => panic!("deploy/webhook RBAC holds a {other:?}"),
        }
    }
}

/// The shipped configuration, calling `url` and trusting `ca_pem`, with
/// `failurePolicy` and a name of its own.
pub(crate) fn webhook_configuration(
    name: &str,
    url: &str,
    ca_pem: &str,
    failure_policy: &str,
) -> Value {
    let mut doc = yaml_file("deploy/webhook/mutatingwebhookconfiguration.yaml").remove(0);
    doc["metadata"]["name"] = json!(name);
    for w in doc["webhooks"].as_array_mut().unwrap() {
        assert!(
            w["clientConfig"]["service"].is_object(),
            "the shipped webhook calls its Service"
        );
        w["clientConfig"] = json!({"url": url, "caBundle": STANDARD.encode(ca_pem)});
        w["failurePolicy"] = json!(failure_policy);
    }
    doc
}

/// Creates (or replaces) the configuration and waits until the API server
/// calls the webhook with it: a dry-run etcd Pod comes back guarded.
async fn install_configuration(w: &World, name: &str, failure_policy: &str) {
    let api: Api<MutatingWebhookConfiguration> = Api::all(w.admin.clone());
    let doc = webhook_configuration(name, &w.webhook.url(), &w.ca.pem, failure_policy);
    match api.get_opt(name).await.unwrap() {
        Some(old) => {
            let mut doc = doc;
            doc["metadata"]["resourceVersion"] = json!(old.metadata.resource_version);
            api.replace(name, &PostParams::default(), &from_json(doc))
                .await
                .unwrap();
        }
        None => {
            api.create(&PostParams::default(), &from_json(doc))
                .await
                .unwrap();
        }
    }
    let deadline = Deadline::after(patience());
    let pods: Api<Pod> = Api::namespaced(w.admin.clone(), TENANT);
    let dry = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    loop {
        let probe = pod_from_fixture("cozystack-member-notls.yaml", "probe");
        let last = match pods.create(&dry, &from_json(probe)).await {
            Ok(p) if guarded(&p) => return,
            Ok(_) => "not guarded yet".to_owned(),
            Err(e) => e.to_string(),
        };
        assert!(
            !deadline.passed(),
            "the API server does not call the webhook: {last}\n{}",
            w.webhook.log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

impl World {
    async fn start() -> World {
        let api = KubeApiServer::start().await;
        let admin = api.admin().await;
        create_namespace(&admin, TENANT, json!({LABEL: "enabled"})).await;
        create_namespace(&admin, UNLABELLED, json!({})).await;
        create_namespace(&admin, WEBHOOK_NS, json!({})).await;
        // No controller makes `default` here: the Pods run as it.
        for ns in [TENANT, UNLABELLED] {
            create_service_account(&admin, ns, "default").await;
        }
        for ns in [TENANT, UNLABELLED] {
            create_service_account(&admin, ns, "etcd").await;
        }
        for doc in yaml_file("deploy/webhook/serviceaccount.yaml") {
            let api: Api<ServiceAccount> = Api::namespaced(admin.clone(), WEBHOOK_NS);
            api.create(&PostParams::default(), &from_json(doc))
                .await
                .unwrap();
        }
        apply_webhook_rbac(&admin).await;
        let token = api.token_for(WEBHOOK_NS, WEBHOOK_SA, None).await;
        let webhook_kubeconfig = api.token_kubeconfig("webhook", &token);
        let ca = TestCa::new();
        let webhook = Webhook::start(&ca, &webhook_kubeconfig).await;
        let w = World {
            api,
            admin,
            ca,
            webhook,
            webhook_kubeconfig,
        };
        install_configuration(&w, "etcd-member-agent", "Fail").await;
        w
    }

    fn pods(&self, ns: &str) -> Api<Pod> {
        Api::namespaced(self.admin.clone(), ns)
    }

    async fn create(&self, ns: &str, pod: Value) -> Pod {
        self.pods(ns)
            .create(&PostParams::default(), &from_json(pod))
            .await
            .unwrap_or_else(|e| panic!("cannot create the Pod: {e}\n{}", self.webhook.log()))
    }
}

// ---------------------------------------------------------------------------
// Pods
// ---------------------------------------------------------------------------

fn fixture_docs(name: &str) -> Vec<Value> {
    yaml_file(&format!("tests/fixtures/inject/{name}"))
}

/// A Pod as its project creates it from `fixture`: the Pod itself, or the
/// first replica of the StatefulSet (`<name>-0`, owned by it), named `name`
/// when given, in no namespace (the request's).
fn pod_from_fixture(fixture: &str, name: &str) -> Value {
    let doc = fixture_docs(fixture)
        .into_iter()
        .find(|d| d["kind"] == "Pod" || d["kind"] == "StatefulSet")
        .unwrap_or_else(|| panic!("{fixture} holds no Pod or StatefulSet"));
    let mut pod = if doc["kind"] == "Pod" {
        doc
    } else {
        let template = &doc["spec"]["template"];
        let mut metadata = template["metadata"].clone();
        if !metadata["annotations"].is_object() {
            metadata.as_object_mut().unwrap().remove("annotations");
        }
        metadata["name"] = json!(format!("{}-0", doc["metadata"]["name"].as_str().unwrap()));
        metadata["ownerReferences"] = json!([{
            "apiVersion": "apps/v1", "kind": "StatefulSet",
            "name": doc["metadata"]["name"], "uid": "6e1c7d0a-2b3c-4d5e-8f90-a1b2c3d4e5f6",
            "controller": true, "blockOwnerDeletion": true,
        }]);
        let pod_name = metadata["name"].as_str().unwrap().to_owned();
        let mut spec = template["spec"].clone();
        // As the StatefulSet controller does: a volume per claim template.
        for vct in doc["spec"]["volumeClaimTemplates"]
            .as_array()
            .into_iter()
            .flatten()
        {
            let claim = vct["metadata"]["name"].as_str().unwrap();
            let volume = json!({"name": claim, "persistentVolumeClaim": {"claimName": format!("{claim}-{pod_name}")}});
            match spec["volumes"].as_array_mut() {
                Some(v) => v.push(volume),
                None => spec["volumes"] = json!([volume]),
            }
        }
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec})
    };
    let meta = pod["metadata"].as_object_mut().unwrap();
    meta.remove("namespace");
    if name != "-" {
        meta.insert("name".into(), json!(name));
    }
    // Set by the kubelet for a static Pod's mirror, and by the API server
    // from the class: a client may not set it.
    pod["spec"].as_object_mut().unwrap().remove("priority");
    pod.as_object_mut().unwrap().remove("status");
    pod
}

pub(crate) fn guarded(p: &Pod) -> bool {
    p.metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(INJECTED))
}

fn init_names(p: &Pod) -> Vec<String> {
    p.spec
        .as_ref()
        .and_then(|s| s.init_containers.as_ref())
        .map(|l| l.iter().map(|c| c.name.clone()).collect())
        .unwrap_or_default()
}

fn env_of(p: &Pod, container: &str) -> Vec<(String, String)> {
    let c = p
        .spec
        .as_ref()
        .and_then(|s| s.init_containers.as_ref())
        .and_then(|l| l.iter().find(|c| c.name == container))
        .unwrap_or_else(|| panic!("no init container {container}"));
    c.env
        .iter()
        .flatten()
        .map(|e| (e.name.clone(), e.value.clone().unwrap_or_default()))
        .collect()
}

fn env_value(p: &Pod, container: &str, name: &str) -> Option<String> {
    env_of(p, container)
        .into_iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v)
}

/// The Pod without what the API server stamps on every object.
fn comparable(p: &Pod) -> Value {
    let mut v = serde_json::to_value(p).unwrap();
    for key in [
        "uid",
        "resourceVersion",
        "creationTimestamp",
        "managedFields",
        "namespace",
        "generation",
    ] {
        v["metadata"].as_object_mut().unwrap().remove(key);
    }
    v.as_object_mut().unwrap().remove("status");
    // The service-account token volume's random suffix.
    let rename = |s: &mut Value| {
        if let Some(n) = s.as_str() {
            if n.starts_with("kube-api-access-") {
                *s = json!("kube-api-access");
            }
        }
    };
    for v in v["spec"]["volumes"].as_array_mut().into_iter().flatten() {
        rename(&mut v["name"]);
    }
    for key in ["containers", "initContainers"] {
        for c in v["spec"][key].as_array_mut().into_iter().flatten() {
            for m in c["volumeMounts"].as_array_mut().into_iter().flatten() {
                rename(&mut m["name"]);
            }
        }
    }
    v
}

// ---------------------------------------------------------------------------
// The tests
// ---------------------------------------------------------------------------

/// The fixtures, the Pod's name (`-`: the fixture's, or its StatefulSet's
/// first replica's), and the member name the agent must be told.
const SHAPES: &[(&str, &str, &str)] = &[
    ("cozystack-member-notls.yaml", "-", "etcd-m4q9z"),
    ("cozystack-member-tls-restore.yaml", "-", "etcd-7xk2p"),
    ("cozystack-member-restore-main.yaml", "-", "etcd-q8w2v"),
    ("kamaji-etcd.yaml", "-", "$(POD_NAME)"),
    ("bitnami-style.yaml", "bitnami-0", "$(POD_NAME)"),
    ("etcd-io-statefulset.yaml", "etcd-io-0", "$(POD_NAME)"),
    ("kubeadm-static-pod.yaml", "etcd-cp-1", "cp-1"),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_shape_created_through_the_api_comes_back_guarded_and_nothing_else_is_touched() {
    let w = World::start().await;
    let mut created = Vec::new();
    for (fixture, pod_name, member) in SHAPES {
        let sent = pod_from_fixture(fixture, pod_name);
        let p = w.create(TENANT, sent.clone()).await;
        let what = format!(
            "{fixture}: Pod {}",
            p.metadata.name.clone().unwrap_or_default()
        );
        assert!(guarded(&p), "{what} is not guarded\n{}", w.webhook.log());
        let init = init_names(&p);
        assert_eq!(
            init.first().map(String::as_str),
            Some("etcd-agent"),
            "{what}: {init:?}"
        );
        assert_eq!(
            init.last().map(String::as_str),
            Some("etcd-preflight"),
            "{what}: {init:?}"
        );
        assert_eq!(
            env_value(&p, "etcd-preflight", "ETCD_MEMBER_NAME").as_deref(),
            Some(*member),
            "{what}"
        );
        // Nothing on the etcd container: as the API server stores it without
        // the webhook in the way (the same Pod in a namespace not opted in).
        let plain = w.create(UNLABELLED, sent.clone()).await;
        assert!(!guarded(&plain));
        assert_eq!(
            comparable(&p)["spec"]["containers"],
            comparable(&plain)["spec"]["containers"],
            "{what}: the etcd container changed"
        );
        created.push(serde_json::to_value(&p).unwrap().to_string());
    }
    // Every guarded Pod as the API server stored it, through the schemas.
    validate_strictly(&created.join("\n---\n"), "the guarded Pods");

    // A Pod without etcd: the same with and without the webhook in its path.
    let web = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web", "labels": {LABEL: "enabled"}},
        "spec": {"containers": [{"name": "nginx", "image": "nginx:1.27", "args": ["-g", "daemon off;"]}]}});
    let through = w.create(TENANT, web.clone()).await;
    let mut plain = web.clone();
    plain["metadata"]["labels"] = json!({LABEL: "disabled"});
    let around = w.create(UNLABELLED, plain).await;
    let (mut a, b) = (comparable(&through), comparable(&around));
    a["metadata"]["labels"] = b["metadata"]["labels"].clone();
    assert_eq!(a, b, "a Pod without etcd is changed by the webhook");

    // Opted out by annotation, and the webhook's own Pod (its label keeps it
    // from being sent at all): both etcd Pods, both left alone.
    let mut out = pod_from_fixture("cozystack-member-notls.yaml", "opted-out");
    out["metadata"]["annotations"] = json!({"etcd-member-agent.cozystack.io/inject": "disabled"});
    assert!(!guarded(&w.create(TENANT, out).await));
    let mut own = pod_from_fixture("cozystack-member-notls.yaml", "own");
    own["metadata"]["labels"]["app.kubernetes.io/name"] = json!("etcd-member-agent-webhook");
    assert!(!guarded(&w.create(TENANT, own).await));

    // A Pod labelled in a namespace that is not: the second webhook takes it.
    let mut labelled = pod_from_fixture("cozystack-member-notls.yaml", "labelled");
    labelled["metadata"]["labels"][LABEL] = json!("enabled");
    assert!(guarded(&w.create(UNLABELLED, labelled).await));
    let unlabelled = pod_from_fixture("cozystack-member-notls.yaml", "unlabelled");
    assert!(!guarded(&w.create(UNLABELLED, unlabelled).await));

    // Twice in the API server's path (a second configuration, and
    // reinvocation after it): one sidecar.
    install_configuration(&w, "etcd-member-agent-again", "Fail").await;
    let p = w
        .create(TENANT, pod_from_fixture("kamaji-etcd.yaml", "twice"))
        .await;
    assert_eq!(
        init_names(&p),
        ["etcd-agent", "etcd-preflight"],
        "guarded once"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_the_agent_cannot_understand_is_admitted_with_a_warning_an_event_and_the_metric() {
    let w = World::start().await;
    let mut pod = pod_from_fixture("etcd-io-hack-pods.yaml", "etcd0");
    pod["metadata"]["ownerReferences"] = json!([{
        "apiVersion": "apps/v1", "kind": "StatefulSet", "name": "etcd", "uid": "0b1c2d3e-4f50-6172-8394-a5b6c7d8e9f0",
        "controller": true,
    }]);
    // Raw, to see the warning the API server passes on (kubectl prints it).
    let request = axum::http::Request::post(format!("/api/v1/namespaces/{TENANT}/pods"))
        .header("content-type", "application/json")
        .body(serde_json::to_vec(&pod).unwrap())
        .unwrap();
    let response = w.admin.send(request.map(Into::into)).await.unwrap();
    assert_eq!(response.status().as_u16(), 201, "admitted");
    let warnings: Vec<String> = response
        .headers()
        .get_all("warning")
        .iter()
        .map(|v| v.to_str().unwrap_or_default().to_owned())
        .collect();
    assert!(
        warnings
            .iter()
            .any(|w| w.contains("NOT guarded") && w.contains("--data-dir")),
        "{warnings:?}"
    );
    let p = w.pods(TENANT).get("etcd0").await.unwrap();
    assert!(!guarded(&p));
    assert!(init_names(&p).is_empty(), "admitted unchanged");

    // The Event, on the StatefulSet, written with the webhook's own token.
    let events: Api<Event> = Api::namespaced(w.admin.clone(), TENANT);
    let deadline = Deadline::after(patience());
    let event = loop {
        let list = events.list(&ListParams::default()).await.unwrap();
        if let Some(e) = list
            .items
            .into_iter()
            .find(|e| e.reason.as_deref() == Some("EtcdPodNotGuarded"))
        {
            break e;
        }
        assert!(!deadline.passed(), "no Event\n{}", w.webhook.log());
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(event.type_.as_deref(), Some("Warning"));
    assert_eq!(event.involved_object.kind.as_deref(), Some("StatefulSet"));
    assert_eq!(event.involved_object.name.as_deref(), Some("etcd"));
    let message = event.message.unwrap_or_default();
    assert!(
        message.contains(&format!("etcd Pod {TENANT}/etcd0 is not guarded")),
        "{message}"
    );
    assert!(message.contains("--data-dir"), "{message}");
    assert_eq!(
        event.reporting_component.as_deref(),
        Some("etcd-member-agent-webhook")
    );
    assert_eq!(
        w.webhook
            .metric(&format!(
                "etcd_agent_webhook_unguarded_pods_total{{namespace=\"{TENANT}\"}}"
            ))
            .await,
        Some(1.0)
    );
    assert_eq!(
        w.webhook
            .metric("etcd_agent_webhook_events_total{outcome=\"ok\"}")
            .await,
        Some(1.0)
    );

    // A dry run: warned, counted, no Event (sideEffects: NoneOnDryRun).
    let mut again = pod.clone();
    again["metadata"]["name"] = json!("etcd0-dry");
    let dry = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    w.pods(TENANT)
        .create(&dry, &from_json(again))
        .await
        .unwrap();
    let deadline = Deadline::after(patience());
    while w
        .webhook
        .metric(&format!(
            "etcd_agent_webhook_unguarded_pods_total{{namespace=\"{TENANT}\"}}"
        ))
        .await
        != Some(2.0)
    {
        assert!(!deadline.passed(), "the dry run was not counted");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        w.webhook
            .metric("etcd_agent_webhook_events_total{outcome=\"ok\"}")
            .await,
        Some(1.0),
        "no Event for a dry run"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_webhook_down_fail_refuses_and_ignore_admits_and_rotated_certificates_serve() {
    let mut w = World::start().await;

    // Rotation first, while it runs: a new certificate of the same CA in the
    // files; served within the reload interval, and the API server still calls.
    let before = w.webhook.served_certificate().await;
    let (cert, key) = w.ca.leaf();
    std::fs::write(w.webhook.dir.path().join("tls.key.new"), &key).unwrap();
    std::fs::write(w.webhook.dir.path().join("tls.crt"), &cert).unwrap();
    std::fs::rename(
        w.webhook.dir.path().join("tls.key.new"),
        w.webhook.dir.path().join("tls.key"),
    )
    .unwrap();
    let deadline = Deadline::after(patience());
    while w.webhook.served_certificate().await != der(&cert) {
        assert!(
            !deadline.passed(),
            "the rotated certificate is not served\n{}",
            w.webhook.log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_ne!(before, der(&cert));
    assert!(w
        .webhook
        .metric("etcd_agent_webhook_certificate_reloads_total{outcome=\"ok\"}")
        .await
        .is_some_and(|n| n >= 1.0));
    let p = w
        .create(
            TENANT,
            pod_from_fixture("cozystack-member-notls.yaml", "after-rotation"),
        )
        .await;
    assert!(
        guarded(&p),
        "the API server calls the webhook on its new certificate"
    );

    // The certificate deploy/webhook/self-signed/install-cert.sh makes, with a
    // CA of its own: the bundle gets the new CA beside the old one first (as
    // the script sets it), then the files change.
    let made = tempfile::tempdir().unwrap();
    let script = repo().join("deploy/webhook/self-signed/install-cert.sh");
    let out = std::process::Command::new(&script)
        .arg("--out")
        .arg(made.path())
        .env("EXTRA_SANS", "IP:127.0.0.1")
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "cannot run {}: {e} (openssl: scripts/setup)",
                script.display()
            )
        });
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let read = |f: &str| std::fs::read_to_string(made.path().join(f)).unwrap();
    let bundle = format!("{}{}", read("ca.crt"), w.ca.pem);
    let api: Api<MutatingWebhookConfiguration> = Api::all(w.admin.clone());
    let mut doc = serde_json::to_value(api.get("etcd-member-agent").await.unwrap()).unwrap();
    for hook in doc["webhooks"].as_array_mut().unwrap() {
        hook["clientConfig"]["caBundle"] = json!(STANDARD.encode(&bundle));
    }
    api.replace("etcd-member-agent", &PostParams::default(), &from_json(doc))
        .await
        .unwrap();
    std::fs::write(w.webhook.dir.path().join("tls.key.new"), read("tls.key")).unwrap();
    std::fs::write(w.webhook.dir.path().join("tls.crt"), read("tls.crt")).unwrap();
    std::fs::rename(
        w.webhook.dir.path().join("tls.key.new"),
        w.webhook.dir.path().join("tls.key"),
    )
    .unwrap();
    w.webhook.ca = bundle;
    let deadline = Deadline::after(patience());
    while w.webhook.served_certificate().await != der(&read("tls.crt")) {
        assert!(
            !deadline.passed(),
            "install-cert.sh's certificate is not served\n{}",
            w.webhook.log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let p = w
        .create(
            TENANT,
            pod_from_fixture("cozystack-member-notls.yaml", "script-certificate"),
        )
        .await;
    assert!(
        guarded(&p),
        "the API server calls the webhook on install-cert.sh's certificate"
    );

    // Down: Fail refuses, naming the webhook.
    w.webhook.stop();
    let refused = w
        .pods(TENANT)
        .create(
            &PostParams::default(),
            &from_json(pod_from_fixture(
                "cozystack-member-notls.yaml",
                "while-down",
            )),
        )
        .await
        .expect_err("failurePolicy Fail admits nothing while the webhook is down");
    let message = refused.to_string();
    assert!(
        message.contains("failed calling webhook")
            && message.contains("namespaces.inject.etcd-member-agent.cozystack.io"),
        "{message}"
    );

    // Ignore: admitted, unguarded.
    install_configuration_down(&w, "Ignore").await;
    let p = w
        .create(
            TENANT,
            pod_from_fixture("cozystack-member-notls.yaml", "ignored"),
        )
        .await;
    assert!(!guarded(&p), "Ignore admits the Pod unguarded");
}

/// Switches the configuration's failurePolicy while the webhook is down, and
/// waits until a dry run is admitted (Ignore) by the API server.
async fn install_configuration_down(w: &World, failure_policy: &str) {
    let api: Api<MutatingWebhookConfiguration> = Api::all(w.admin.clone());
    let current = api.get("etcd-member-agent").await.unwrap();
    let mut doc = serde_json::to_value(&current).unwrap();
    for hook in doc["webhooks"].as_array_mut().unwrap() {
        hook["failurePolicy"] = json!(failure_policy);
    }
    api.replace("etcd-member-agent", &PostParams::default(), &from_json(doc))
        .await
        .unwrap();
    let dry = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let deadline = Deadline::after(patience());
    loop {
        let probe = pod_from_fixture("cozystack-member-notls.yaml", "probe");
        match w.pods(TENANT).create(&dry, &from_json(probe)).await {
            Ok(_) => return,
            Err(e) => assert!(!deadline.passed(), "{failure_policy} is not in effect: {e}"),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A SelfSubjectAccessReview as `client`: allowed?
async fn can(
    client: &Client,
    verb: &str,
    group: &str,
    resource: &str,
    ns: &str,
    name: &str,
) -> bool {
    let api: Api<SelfSubjectAccessReview> = Api::all(client.clone());
    let review: SelfSubjectAccessReview = from_json(json!({
        "spec": {"resourceAttributes": {"verb": verb, "group": group, "resource": resource, "namespace": ns, "name": name}}
    }));
    let answer = api.create(&PostParams::default(), &review).await.unwrap();
    answer.status.is_some_and(|s| s.allowed)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_in_a_guarded_pod_can_do_its_work_with_the_tenant_binding_and_nothing_more() {
    let w = World::start().await;
    // The tenant binding as shipped: the agent's ClusterRole for `default`.
    let mut binding = yaml_file("deploy/webhook/tenant/rolebinding.yaml").remove(0);
    assert_eq!(
        binding["subjects"][0]["namespace"], TENANT,
        "the shipped example is for {TENANT}"
    );
    binding["metadata"]["namespace"] = json!(TENANT);
    let api: Api<RoleBinding> = Api::namespaced(w.admin.clone(), TENANT);
    api.create(&PostParams::default(), &from_json(binding))
        .await
        .unwrap();

    let p = w
        .create(TENANT, pod_from_fixture("cozystack-member-notls.yaml", "-"))
        .await;
    assert!(guarded(&p));
    let name = p.metadata.name.clone().unwrap();
    let uid = p.metadata.uid.clone().unwrap();
    // The token the kubelet projects into the agent's containers: the Pod's
    // own ServiceAccount, bound to the Pod.
    let sa = p
        .spec
        .as_ref()
        .and_then(|s| s.service_account_name.clone())
        .unwrap_or_else(|| "default".into());
    let token = w.api.token_for(TENANT, &sa, Some((&name, &uid))).await;
    let kubeconfig = w.api.token_kubeconfig("agent-in-pod", &token);
    let agent_client = client_from(&kubeconfig).await;

    // Every call the agent makes, in its namespace.
    let lease = format!("etcd-witness-{name}");
    for (verb, group, resource, object) in [
        (
            "get",
            "etcd-operator.cozystack.io",
            "etcdmembers",
            name.as_str(),
        ),
        ("get", "etcd-operator.cozystack.io", "etcdclusters", "etcd"),
        ("get", "", "pods", name.as_str()),
        ("get", "", "configmaps", "kube-root-ca.crt"),
        ("get", "", "secrets", "etcd-client-tls"),
        ("get", "coordination.k8s.io", "leases", lease.as_str()),
        ("update", "coordination.k8s.io", "leases", lease.as_str()),
        ("create", "coordination.k8s.io", "leases", ""),
        ("create", "", "events", ""),
    ] {
        assert!(
            can(&agent_client, verb, group, resource, TENANT, object).await,
            "the agent cannot {verb} {resource} {object} in {TENANT}"
        );
    }
    // And nothing else: no list, no writes to others' objects, no other namespace.
    for (verb, group, resource, ns) in [
        ("list", "", "secrets", TENANT),
        ("list", "", "pods", TENANT),
        ("delete", "", "pods", TENANT),
        ("patch", "etcd-operator.cozystack.io", "etcdmembers", TENANT),
        (
            "create",
            "rbac.authorization.k8s.io",
            "rolebindings",
            TENANT,
        ),
        (
            "get",
            "etcd-operator.cozystack.io",
            "etcdmembers",
            UNLABELLED,
        ),
        ("get", "", "secrets", UNLABELLED),
    ] {
        assert!(
            !can(&agent_client, verb, group, resource, ns, "").await,
            "the agent may {verb} {resource} in {ns}"
        );
    }

    // The agent itself, with the Pod's injected env and that token: preflight
    // reads its records and its witness Lease, answered (404s), not forbidden.
    let env: Vec<(String, String)> = env_of(&p, "etcd-preflight")
        .into_iter()
        .filter(|(n, v)| !v.is_empty() && n != "TERMINATION_LOG" && n != "AGENT_VERDICT_FILE")
        .chain([
            ("POD_NAME".to_owned(), name.clone()),
            ("POD_NAMESPACE".to_owned(), TENANT.to_owned()),
            ("POD_UID".to_owned(), uid.clone()),
            ("KUBECONFIG".to_owned(), kubeconfig.display().to_string()),
            ("AGENT_TIMEOUT".to_owned(), "5s".to_owned()),
        ])
        .collect();
    let data = tempfile::tempdir().unwrap();
    let mut env = env;
    env.push(("ETCD_DATA_DIR".into(), data.path().display().to_string()));
    let run = run_agent(["preflight", "-o", "json"], &env);
    let kube = run.json()["evidence"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["source"] == "kube")
        .cloned()
        .unwrap_or_else(|| panic!("no kube evidence\n{run}"));
    // Read and found absent (a 404 only an authorized read gets), not forbidden.
    assert_eq!(
        kube["error"],
        format!("EtcdMember {TENANT}/{name} not found"),
        "{run}"
    );
    let witness = run.json()["evidence"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["source"] == "witness")
        .cloned()
        .unwrap_or_else(|| panic!("no witness evidence\n{run}"));
    assert_eq!(
        witness["answered"], true,
        "the witness Lease was read\n{run}"
    );
    assert!(!run.stdout.contains("forbidden"), "{run}");

    // The webhook's own token: Events anywhere, nothing else.
    let webhook = client_from(&w.webhook_kubeconfig).await;
    assert!(can(&webhook, "create", "", "events", TENANT, "").await);
    assert!(can(&webhook, "create", "", "events", UNLABELLED, "").await);
    for (verb, group, resource) in [
        ("get", "", "pods"),
        ("list", "", "pods"),
        ("get", "", "secrets"),
        ("create", "rbac.authorization.k8s.io", "rolebindings"),
        (
            "patch",
            "admissionregistration.k8s.io",
            "mutatingwebhookconfigurations",
        ),
    ] {
        assert!(
            !can(&webhook, verb, group, resource, TENANT, "").await,
            "the webhook may {verb} {resource}"
        );
    }
}

// ---------------------------------------------------------------------------
// The benchmark (scripts/bench-webhook): not a test of time, a measurement
// ---------------------------------------------------------------------------

/// `le` → cumulative count of a Prometheus histogram's buckets on the lines
/// starting with `series` (its `_bucket` lines, label filters included).
fn buckets(text: &str, series: &str, filter: &str) -> Vec<(f64, f64)> {
    let mut out: Vec<(f64, f64)> = text
        .lines()
        .filter(|l| l.starts_with(&format!("{series}_bucket{{")) && l.contains(filter))
        .filter_map(|l| {
            let le = l.split("le=\"").nth(1)?.split('"').next()?;
            let le = if le == "+Inf" {
                f64::INFINITY
            } else {
                le.parse().ok()?
            };
            let count: f64 = l.rsplit(' ').next()?.parse().ok()?;
            Some((le, count))
        })
        .collect();
    out.sort_by(|a, b| a.0.total_cmp(&b.0));
    out
}

/// The share of observations at or below `le`, between two scrapes.
fn share_at_most(before: &[(f64, f64)], after: &[(f64, f64)], le: f64) -> (f64, f64) {
    let at = |b: &[(f64, f64)], le: f64| {
        b.iter()
            .find(|(l, _)| *l == le || (*l - le).abs() < 1e-9)
            .map_or(0.0, |(_, c)| *c)
    };
    let total = at(after, f64::INFINITY) - at(before, f64::INFINITY);
    let below = at(after, le) - at(before, le);
    (below, total)
}

/// The smallest bucket bound at or below which `q` of the observations lie.
fn quantile_bound(before: &[(f64, f64)], after: &[(f64, f64)], q: f64) -> f64 {
    let (_, total) = share_at_most(before, after, f64::INFINITY);
    after
        .iter()
        .map(|(le, _)| *le)
        .find(|le| share_at_most(before, after, *le).0 >= q * total)
        .unwrap_or(f64::INFINITY)
}

/// Guarded etcd Pods created through the API server at `BENCH_RATE` a second
/// (default 200) for `BENCH_SECS` (default 30), after a 2 s warm-up (with
/// `BENCH_DRY_RUN=1`, dry-run creations: the same admission chain, webhook
/// included, without etcd's write; for a machine whose disk cannot take the
/// rate); prints
/// the webhook's admission latency as the API server measured it (its
/// `apiserver_admission_webhook_admission_duration_seconds`, TLS and the
/// request included), as the webhook measured it, and the creations' own
/// latency, with one JSON line for scripts/bench-webhook. Run it in release:
/// `scripts/bench-webhook`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a benchmark: scripts/bench-webhook runs it in release"]
async fn bench_admission_latency() {
    let rate: u32 = std::env::var("BENCH_RATE")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(200);
    let secs: u64 = std::env::var("BENCH_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(30);
    let dry_run = std::env::var("BENCH_DRY_RUN").is_ok_and(|v| v == "1");
    let w = World::start().await;
    let template = {
        let mut p = pod_from_fixture("cozystack-member-notls.yaml", "-");
        let meta = p["metadata"].as_object_mut().unwrap();
        meta.remove("name");
        meta.insert("generateName".into(), json!("etcd-"));
        p
    };
    let scrape = |client: Client| async move {
        let req = axum::http::Request::get("/metrics")
            .body(Vec::new())
            .unwrap();
        client.request_text(req).await.unwrap()
    };
    let run = |seconds: u64| {
        let pods = w.pods(TENANT);
        let template = template.clone();
        async move {
            let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / f64::from(rate)));
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
            let in_flight = Arc::new(tokio::sync::Semaphore::new(512));
            let mut tasks = tokio::task::JoinSet::new();
            let started = std::time::Instant::now();
            let total = rate as u64 * seconds;
            for _ in 0..total {
                tick.tick().await;
                let permit = in_flight.clone().acquire_owned().await.unwrap();
                let pods = pods.clone();
                let pod: Pod = from_json(template.clone());
                tasks.spawn(async move {
                    let t = std::time::Instant::now();
                    let pp = PostParams {
                        dry_run,
                        ..PostParams::default()
                    };
                    let r = pods.create(&pp, &pod).await;
                    drop(permit);
                    (t.elapsed(), r.map(|p| guarded(&p)))
                });
            }
            let mut latencies = Vec::new();
            let mut failures = 0usize;
            while let Some(r) = tasks.join_next().await {
                match r.unwrap() {
                    (d, Ok(true)) => latencies.push(d),
                    _ => failures += 1,
                }
            }
            (started.elapsed(), latencies, failures)
        }
    };
    run(2).await;
    let api_before = scrape(w.admin.clone()).await;
    let (_, hook_before) = w.webhook.get("/metrics").await.unwrap();
    let (elapsed, mut latencies, failures) = run(secs).await;
    let api_after = scrape(w.admin.clone()).await;
    let (_, hook_after) = w.webhook.get("/metrics").await.unwrap();

    // The webhook alone: the same AdmissionReviews the API server sends,
    // straight to it over loopback TLS (connections kept alive, as the API
    // server keeps them), at the same rate, each timed by the client.
    let direct = {
        let client = reqwest::Client::builder()
            .tls_backend_preconfigured(tls_client(&w.webhook.ca))
            .timeout(Duration::from_secs(10))
            .pool_max_idle_per_host(64)
            .build()
            .unwrap();
        let url = w.webhook.url();
        let pod = {
            let mut p = template.clone();
            p["metadata"]["namespace"] = json!(TENANT);
            p
        };
        let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / f64::from(rate)));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
        let mut tasks = tokio::task::JoinSet::new();
        for i in 0..(u64::from(rate) * secs) {
            tick.tick().await;
            let body = serde_json::to_vec(&json!({
                "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                "request": {"uid": format!("bench-{i}"), "kind": {"group": "", "version": "v1", "kind": "Pod"},
                    "resource": {"group": "", "version": "v1", "resource": "pods"},
                    "namespace": TENANT, "operation": "CREATE", "object": pod, "dryRun": false},
            }))
            .unwrap();
            let (client, url) = (client.clone(), url.clone());
            tasks.spawn(async move {
                let t = std::time::Instant::now();
                let r = client
                    .post(url)
                    .header("content-type", "application/json")
                    .body(body)
                    .send()
                    .await;
                let ok = match r {
                    Ok(r) => {
                        r.status().as_u16() == 200
                            && r.bytes()
                                .await
                                .is_ok_and(|b| b.windows(9).any(|w| w == b"JSONPatch"))
                    }
                    Err(_) => false,
                };
                (t.elapsed(), ok)
            });
        }
        let mut times = Vec::new();
        let mut bad = 0usize;
        while let Some(r) = tasks.join_next().await {
            match r.unwrap() {
                (d, true) => times.push(d),
                _ => bad += 1,
            }
        }
        times.sort();
        (times, bad)
    };
    let (direct_times, direct_failed) = direct;
    let direct_pct = |q: f64| {
        direct_times
            .get(((direct_times.len() as f64 * q).ceil() as usize).saturating_sub(1))
            .map_or(f64::NAN, |d| d.as_secs_f64() * 1000.0)
    };

    let series = "apiserver_admission_webhook_admission_duration_seconds";
    let filter = "name=\"namespaces.inject.etcd-member-agent.cozystack.io\"";
    let (a, b) = (
        buckets(&api_before, series, filter),
        buckets(&api_after, series, filter),
    );
    let (within_5ms, calls) = share_at_most(&a, &b, 0.005);
    let (c, d) = (
        buckets(
            &hook_before,
            "etcd_agent_webhook_admission_duration_seconds",
            "",
        ),
        buckets(
            &hook_after,
            "etcd_agent_webhook_admission_duration_seconds",
            "",
        ),
    );
    let hook_p99 = quantile_bound(&c, &d, 0.99);
    let hook_p50 = quantile_bound(&c, &d, 0.50);
    latencies.sort();
    let pct = |q: f64| {
        latencies
            .get(((latencies.len() as f64 * q).ceil() as usize).saturating_sub(1))
            .map_or(f64::NAN, |d| d.as_secs_f64() * 1000.0)
    };
    let achieved = latencies.len() as f64 / elapsed.as_secs_f64();
    eprintln!(
        "webhook admission at {rate}/s for {secs} s: {} Pods created guarded{} ({achieved:.0}/s achieved), {failures} failed",
        latencies.len(),
        if dry_run { " (dry run)" } else { "" }
    );
    eprintln!(
        "  API server's measure of the webhook call: {within_5ms:.0} of {calls:.0} calls within 5 ms ({:.3} %)",
        100.0 * within_5ms / calls.max(1.0)
    );
    eprintln!(
        "  the webhook's own measure: p50 <= {:.1} ms, p99 <= {:.1} ms (bucket bounds)",
        hook_p50 * 1000.0,
        hook_p99 * 1000.0
    );
    eprintln!(
        "  the Pod creations (the whole API request): p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
        pct(0.5),
        pct(0.99),
        pct(1.0)
    );
    eprintln!(
        "  the webhook alone ({} AdmissionReviews at {rate}/s straight to it, {direct_failed} failed): p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        direct_times.len(),
        direct_pct(0.5),
        direct_pct(0.99),
        direct_pct(1.0)
    );
    println!(
        "{}",
        json!({
            "direct_reviews": direct_times.len(), "direct_failed": direct_failed,
            "direct_p50_ms": direct_pct(0.5), "direct_p99_ms": direct_pct(0.99), "direct_max_ms": direct_pct(1.0),
            "rate": rate, "seconds": secs, "dry_run": dry_run, "created": latencies.len(), "failed": failures,
            "achieved_per_second": achieved,
            "apiserver_calls": calls, "apiserver_within_5ms": within_5ms,
            "webhook_p50_le_ms": hook_p50 * 1000.0, "webhook_p99_le_ms": hook_p99 * 1000.0,
            "create_p50_ms": pct(0.5), "create_p99_ms": pct(0.99), "create_max_ms": pct(1.0),
        })
    );
}

// ---------------------------------------------------------------------------
// The shipped manifests against the binary and each other (no server)
// ---------------------------------------------------------------------------

#[test]
fn the_shipped_webhook_manifests_agree_with_the_binary_and_each_other() {
    let deployment = yaml_file("deploy/webhook/deployment.yaml").remove(0);
    let service = yaml_file("deploy/webhook/service.yaml").remove(0);
    let config = yaml_file("deploy/webhook/mutatingwebhookconfiguration.yaml").remove(0);
    let pdb = yaml_file("deploy/webhook/poddisruptionbudget.yaml").remove(0);
    let pod = &deployment["spec"]["template"];
    let c = &pod["spec"]["containers"][0];
    assert_eq!(c["args"], json!(["webhook"]));
    let reads = crate::deploy::help("webhook").env;
    let env: Vec<(&str, &str)> = c["env"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["name"].as_str().unwrap(),
                e["value"].as_str().unwrap_or_default(),
            )
        })
        .collect();
    for (name, _) in &env {
        assert!(
            reads.contains(*name),
            "the Deployment sets {name}, which `webhook --help` does not name"
        );
    }
    // The certificate files are in the mounted Secret.
    let tls_dir = c["volumeMounts"][0]["mountPath"].as_str().unwrap();
    for var in ["AGENT_WEBHOOK_TLS_CERT_PATH", "AGENT_WEBHOOK_TLS_KEY_PATH"] {
        let path = env.iter().find(|(n, _)| *n == var).unwrap().1;
        assert!(
            path.starts_with(tls_dir),
            "{var} {path} is not under {tls_dir}"
        );
    }
    // Probes over HTTPS on the listening port.
    let listen = env
        .iter()
        .find(|(n, _)| *n == "AGENT_WEBHOOK_LISTEN")
        .unwrap()
        .1;
    assert_eq!(listen.rsplit(':').next(), Some("9443"));
    assert_eq!(c["ports"][0]["containerPort"], 9443);
    for probe in ["readinessProbe", "livenessProbe"] {
        assert_eq!(c[probe]["httpGet"]["path"], "/healthz");
        assert_eq!(c[probe]["httpGet"]["scheme"], "HTTPS");
    }
    // Two replicas, a PDB over the same Pods, the Service in front of them.
    assert_eq!(deployment["spec"]["replicas"], 2);
    let labels = &pod["metadata"]["labels"];
    let app = labels["app.kubernetes.io/name"].as_str().unwrap();
    assert_eq!(
        pdb["spec"]["selector"]["matchLabels"]["app.kubernetes.io/name"],
        app
    );
    assert_eq!(service["spec"]["selector"]["app.kubernetes.io/name"], app);
    assert_eq!(service["spec"]["ports"][0]["targetPort"], "https");
    for hook in config["webhooks"].as_array().unwrap() {
        let svc = &hook["clientConfig"]["service"];
        assert_eq!(svc["name"], service["metadata"]["name"]);
        assert_eq!(svc["port"], service["spec"]["ports"][0]["port"]);
        assert_eq!(svc["path"], "/mutate");
        // The webhook's own Pods are never sent to it.
        let excluded = hook["objectSelector"]["matchExpressions"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| {
                e["key"] == "app.kubernetes.io/name"
                    && e["operator"] == "NotIn"
                    && e["values"][0] == app
            });
        assert!(
            excluded,
            "{}: the webhook's own Pods are not excluded",
            hook["name"]
        );
        assert_eq!(hook["sideEffects"], "NoneOnDryRun");
        assert_eq!(hook["reinvocationPolicy"], "IfNeeded");
        assert!(hook["timeoutSeconds"].as_i64().unwrap() <= 10);
    }
}
