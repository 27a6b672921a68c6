//! A real Kubernetes node for the tests: the project's kube-apiserver (and its
//! etcd), containerd v2 with Debian's runc, and an upstream kubelet, all on this
//! machine, offline. Pods run for real: init containers in order, native
//! sidecars (`restartPolicy: Always`), probes, projected service-account tokens,
//! `envFrom`, back-off, termination messages, `CreateContainerConfigError`.
//!
//! # Using it
//!
//! ```ignore
//! let node = Node::start().await;                      // about 8 s with binaries built
//! node.create_namespace("tenant").await;               // + ServiceAccount `default`, `kube-root-ca.crt`
//! node.apply_yaml("tenant", &std::fs::read_to_string("deploy/base/role.yaml")?).await;
//! let pod = node.create_pod("tenant", pod).await;      // spec.nodeName set, imagePullPolicy Never
//! node.wait_pod("tenant", "p", "Ready", |p| is_ready(p).then_some(())).await;
//! let c = node.wait_container("tenant", "p", "etcd", "running", |s| s.state.as_ref()?.running.clone()).await;
//! node.logs("tenant", "p", "etcd");                    // the kubelet's log files
//! node.kill_container("tenant", "p", "etcd").await;    // SIGKILL to its process, as a node failure does
//! node.wipe_dir(&node.host_dir("data-0"));             // empty a hostPath dir the test owns
//! drop(node);                                          // tears everything down, panics included
//! ```
//!
//! * [`Node::start`] / [`Node::builder`]: the node, with the images the Pods need
//!   imported (the agent, the pause image, the etcd lines asked for).
//! * Objects: [`Node::create_namespace`], [`Node::apply_yaml`] (any kind the
//!   server serves, CRDs included), [`Node::create_pod`], or [`Node::admin`] for a
//!   typed `kube::Client` as cluster admin.
//! * Waits, each bounded by one patience (`TEST_PATIENCE_SECS`) and failing with
//!   the Pod's summary (every container's state, last state and restarts), its
//!   Events and the kubelet's last lines: [`Node::wait_pod`],
//!   [`Node::wait_container`], [`Node::wait_pod_gone`].
//! * Reading: [`Node::pod`], [`container_status`], [`Node::logs`],
//!   [`Node::events`], [`Node::pod_volume_dir`] (a volume as the kubelet mounted
//!   it, e.g. the projected token), [`Node::task_exits`] (containerd's exit events,
//!   in order).
//! * Acting: [`Node::kill_container`], [`Node::wipe_dir`], [`Node::delete_pod`].
//!
//! # What it is, and what it is not
//!
//! * **One node per machine**, because the kubelet writes where no flag moves it
//!   (sysctls, the root of every cgroup hierarchy, `/var/lib/kubelet/device-plugins`,
//!   `/var/log/containers`). [`Node::start`] takes a machine-wide lock
//!   ([`lock`]: `flock` on `/run/etcd-member-agent-node.lock`, waited for at
//!   most `NODE_LOCK_WAIT_SECS`, default 30 min) that it holds until the node is
//!   torn down. Tests that use a node are therefore serialised, across threads
//!   and processes; `scripts/test` runs `node::` on its own.
//! * **Torn down by value**: dropping the [`Node`] (panics included) deletes its
//!   Pods (grace 1 s), stops the kubelet, then stops containerd and SIGKILLs every
//!   process of the node by PID (the shims and the containers), unmounts what is
//!   under the run dir deepest first, removes the `kubepods` cgroups deepest first,
//!   restores the three sysctls the kubelet changes, removes the fixed host paths it
//!   created, and stops the API server and its etcd. A test process killed before
//!   that leaves a record (`/run/etcd-member-agent-node.state`) that the next node
//!   undoes first ([`host`]).
//! * **No network of its own**: no CNI, no kube-proxy, no DNS. Pods use
//!   `hostNetwork: true` and listen on loopback addresses of their own (etcd on
//!   `127.0.10.x`); names come from `hostAliases`. The Node stays NotReady (no
//!   network plugin), which does not matter to Pods whose `spec.nodeName` is set:
//!   no scheduler and no controller-manager run. In their place the harness makes
//!   what those controllers would: the `default` ServiceAccount and the
//!   `kube-root-ca.crt` ConfigMap of each namespace it creates. An agent in a
//!   Pod reaches the API server at `127.0.0.1:<port>` ([`Node::api_env`]: the
//!   `KUBERNETES_SERVICE_*` values to put in its container env), with its
//!   projected token.
//! * **Images without a registry**: `scripts/node-images` writes OCI image tars
//!   from static binaries ([`AGENT_IMAGE`], [`PAUSE_IMAGE`], [`etcd_image`]);
//!   they are imported into containerd at start and Pods use
//!   `imagePullPolicy: Never` ([`Node::create_pod`] sets it).

pub mod containerd;
pub mod host;
pub mod kubelet;
pub mod lock;

use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{
    ConfigMap, ContainerStatus, Event, Namespace, Node as KubeNode, Pod, ServiceAccount,
};
use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, PostParams};
use kube::discovery::{pinned_kind, Scope};
use kube::Client;
use nix::sys::signal::Signal;
use serde_json::json;

use super::etcd::EtcdVersion;
use super::kube_apiserver::KubeApiServer;
use super::member::tail;
use super::patience::{patience, Deadline};
use super::ports::free_port;
use super::process::{register, signal, unregister, wait_with_deadline};
use containerd::ContainerdPaths;
use host::HostState;
use kubelet::{KubeletPaths, KubeletSettings};
use lock::{lock_wait, NodeLock};

/// The agent's image: the static release binary at `/usr/local/bin`.
pub const AGENT_IMAGE: &str = "localhost/etcd-member-agent:dev";
/// The sandbox image: Debian's static catatonit.
pub const PAUSE_IMAGE: &str = "localhost/pause:catatonit";
/// The name of the node (`spec.nodeName` of every Pod it runs).
pub const NODE_NAME: &str = "etcd-agent-test-node";

/// The image of an etcd line built by `scripts/build-etcd`:
/// `localhost/etcd:v3.6.16`, etcd, etcdctl and etcdutl at `/usr/local/bin`.
pub fn etcd_image(version: EtcdVersion) -> String {
    format!("localhost/etcd:v{}", version.label())
}

/// The repository root.
fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Builds a [`Node`]: which etcd images to import (default: 3.6, the
/// operator's line).
pub struct NodeBuilder {
    etcd_versions: Vec<EtcdVersion>,
}

impl NodeBuilder {
    /// Imports the image of etcd `version` too.
    pub fn etcd(mut self, version: EtcdVersion) -> Self {
        if !self.etcd_versions.contains(&version) {
            self.etcd_versions.push(version);
        }
        self
    }

    /// Starts the node: see [`Node::start`].
    pub async fn start(self) -> Node {
        Node::start_with(self).await
    }
}

/// A running node. See the module docs.
pub struct Node {
    run_dir: PathBuf,
    containerd: ContainerdPaths,
    kubelet: KubeletPaths,
    kubelet_child: Mutex<Option<Child>>,
    containerd_child: Mutex<Option<Child>>,
    events: Mutex<Option<TaskEvents>>,
    host: HostState,
    start_time: Duration,
    // Dropped after Drop::drop ran the teardown: the API server and its etcd
    // stop after the kubelet, the lock goes last.
    api: KubeApiServer,
    _lock: NodeLock,
}

impl Node {
    /// A builder: `Node::builder().etcd(EtcdVersion::V3_7).start().await`.
    pub fn builder() -> NodeBuilder {
        NodeBuilder {
            etcd_versions: vec![EtcdVersion::V3_6],
        }
    }

    /// Starts a node with the agent, pause and etcd 3.6 images. Waits for the
    /// machine-wide lock first; panics, with the logs of the part that failed,
    /// when a part does not come up within one patience.
    pub async fn start() -> Node {
        Node::builder().start().await
    }

    async fn start_with(b: NodeBuilder) -> Node {
        assert!(
            nix::unistd::geteuid().is_root(),
            "a node needs root (cgroups, mounts, sysctls): run the node:: tests as root"
        );
        let who = std::thread::current()
            .name()
            .unwrap_or("unnamed test")
            .to_owned();
        let lock = tokio::task::spawn_blocking(move || NodeLock::acquire(&who, lock_wait()))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let started = Instant::now();
        host::recover();
        let traces = host::node_traces();
        assert!(
            traces.is_empty(),
            "the host already holds a node's state that no record explains: {traces:?}; \
             is a kubelet running outside the tests?"
        );
        let run_dir = std::env::temp_dir().join(format!("etcd-node-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&run_dir);
        std::fs::create_dir_all(&run_dir).unwrap_or_else(|e| panic!("{e}"));
        let host = HostState::capture(&run_dir);
        host.save();
        // Until the Node exists (and its Drop tears it down), a part that fails
        // to start leaves nothing behind either.
        let mut undo = UndoUnlessStarted(Some(host.clone()));

        // The API server (a few seconds) comes up while containerd starts and
        // the images are written and imported.
        let images_run_dir = run_dir.clone();
        let versions = b.etcd_versions.clone();
        let runtime = tokio::task::spawn_blocking(move || {
            let images = node_images(&versions);
            let containerd = ContainerdPaths::write(&images_run_dir, PAUSE_IMAGE);
            let child = start_containerd(&containerd, &images_run_dir);
            for (name, tar) in &images {
                let tar = tar.to_string_lossy();
                containerd
                    .try_ctr(&["images", "import", "--no-unpack", &tar])
                    .unwrap_or_else(|e| panic!("cannot import {name}: {e}"));
            }
            (containerd, child)
        });
        // Both finish before either's failure unwinds: no part may still be
        // starting while the guard below undoes the others.
        let api = tokio::spawn(KubeApiServer::start());
        let (api, runtime) = (api.await, runtime.await);
        let unwind = |e: tokio::task::JoinError| -> ! { std::panic::resume_unwind(e.into_panic()) };
        let (api, (containerd, containerd_child)) = match (api, runtime) {
            (Ok(api), Ok(runtime)) => (api, runtime),
            (Err(e), _) | (_, Err(e)) => unwind(e),
        };

        let admin = api.admin().await;
        let user = format!("system:node:{NODE_NAME}");
        let (cert, key) = api.issue_client_cert(&user, Some("system:nodes"));
        let kubeconfig = api.cert_kubeconfig("kubelet", &cert, &key);
        // RBAC only (no Node authorizer): the node's user gets the built-in role.
        let binding: ClusterRoleBinding = serde_json::from_value(json!({
            "metadata": {"name": "etcd-agent-test-node"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "system:node"},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        Api::<ClusterRoleBinding>::all(admin.clone())
            .create(&PostParams::default(), &binding)
            .await
            .unwrap_or_else(|e| panic!("cannot bind system:node: {e}"));

        let kubelet = KubeletPaths::write(
            &run_dir,
            &KubeletSettings {
                port: free_port(),
                runtime_socket: &containerd.socket,
                client_ca: &api.ca_path(),
                kubeconfig: &kubeconfig,
            },
        );
        let log_path = run_dir.join("kubelet.log");
        let log = std::fs::File::create(&log_path).unwrap_or_else(|e| panic!("{e}"));
        let stderr = log.try_clone().unwrap_or_else(|e| panic!("{e}"));
        let kubelet_child = kubelet
            .command(NODE_NAME)
            .stdout(log)
            .stderr(stderr)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start the kubelet: {e}"));
        register(kubelet_child.id(), &run_dir);

        let mut node = Node {
            run_dir,
            containerd,
            kubelet,
            kubelet_child: Mutex::new(Some(kubelet_child)),
            containerd_child: Mutex::new(Some(containerd_child)),
            events: Mutex::new(None),
            host,
            start_time: Duration::ZERO,
            api,
            _lock: lock,
        };
        undo.0 = None;
        node.wait_registered(&admin).await;
        node.start_time = started.elapsed();
        eprintln!(
            "node {NODE_NAME}: kubelet {} with containerd {} up in {:.1?} (run dir {})",
            super::kube_apiserver_version(),
            containerd::containerd_version(),
            node.start_time,
            node.run_dir.display()
        );
        node
    }

    /// Waits until the kubelet registered the Node and reports its version: it
    /// then runs Pods bound to it.
    async fn wait_registered(&self, admin: &Client) {
        let nodes: Api<KubeNode> = Api::all(admin.clone());
        let deadline = Deadline::after(patience());
        loop {
            if let Some(status) = self.kubelet_exit() {
                panic!(
                    "the kubelet exited ({status}) before it registered:\n{}",
                    self.kubelet_log(60)
                );
            }
            if let Ok(n) = nodes.get(NODE_NAME).await {
                let version = n
                    .status
                    .and_then(|s| s.node_info)
                    .map(|i| i.kubelet_version)
                    .unwrap_or_default();
                if !version.is_empty() {
                    return;
                }
            }
            assert!(
                !deadline.passed(),
                "the kubelet did not register Node {NODE_NAME} within {:?}:\n{}",
                patience(),
                self.kubelet_log(60)
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    fn kubelet_exit(&self) -> Option<std::process::ExitStatus> {
        let mut child = self.kubelet_child.lock().unwrap_or_else(|e| e.into_inner());
        child.as_mut()?.try_wait().ok().flatten()
    }

    /// How long [`Node::start`] took, from holding the lock to a registered Node.
    pub fn start_time(&self) -> Duration {
        self.start_time
    }

    /// The API server the node registered with.
    pub fn api(&self) -> &KubeApiServer {
        &self.api
    }

    /// A client as cluster admin.
    pub async fn admin(&self) -> Client {
        self.api.admin().await
    }

    /// The node's private run dir (roots, states, sockets, logs, volumes).
    pub fn run_dir(&self) -> &Path {
        &self.run_dir
    }

    /// containerd of the node (`ctr`, a container's PID).
    pub fn containerd(&self) -> &ContainerdPaths {
        &self.containerd
    }

    /// The last `lines` lines of the kubelet's log.
    pub fn kubelet_log(&self, lines: usize) -> String {
        let text = std::fs::read_to_string(self.run_dir.join("kubelet.log")).unwrap_or_default();
        tail(&text, lines).to_owned()
    }

    /// The env an agent container needs to reach the API server from the host
    /// network (no kube-proxy serves the `kubernetes` Service here):
    /// `KUBERNETES_SERVICE_HOST=127.0.0.1`, `KUBERNETES_SERVICE_PORT=<port>`.
    /// Container env overrides the Service env the kubelet injects.
    pub fn api_env(&self) -> [(String, String); 2] {
        let url = self.api.url();
        let port = url.rsplit(':').next().unwrap_or_default().to_owned();
        [
            ("KUBERNETES_SERVICE_HOST".to_owned(), "127.0.0.1".to_owned()),
            ("KUBERNETES_SERVICE_PORT".to_owned(), port),
        ]
    }

    /// Creates namespace `ns` with what the controllers that do not run here
    /// would add: the `default` ServiceAccount and the `kube-root-ca.crt`
    /// ConfigMap (a projected token does not mount without it).
    pub async fn create_namespace(&self, ns: &str) {
        let admin = self.admin().await;
        let pp = PostParams::default();
        let namespace: Namespace = serde_json::from_value(json!({"metadata": {"name": ns}}))
            .unwrap_or_else(|e| panic!("{e}"));
        Api::<Namespace>::all(admin.clone())
            .create(&pp, &namespace)
            .await
            .unwrap_or_else(|e| panic!("cannot create namespace {ns}: {e}"));
        let sa: ServiceAccount = serde_json::from_value(json!({"metadata": {"name": "default"}}))
            .unwrap_or_else(|e| panic!("{e}"));
        Api::<ServiceAccount>::namespaced(admin.clone(), ns)
            .create(&pp, &sa)
            .await
            .unwrap_or_else(|e| panic!("cannot create {ns}/default: {e}"));
        let ca: ConfigMap = serde_json::from_value(json!({
            "metadata": {"name": "kube-root-ca.crt"},
            "data": {"ca.crt": self.api.ca_pem()},
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        Api::<ConfigMap>::namespaced(admin, ns)
            .create(&pp, &ca)
            .await
            .unwrap_or_else(|e| panic!("cannot create {ns}/kube-root-ca.crt: {e}"));
    }

    /// Creates every object of a YAML stream (documents separated by `---`) in
    /// namespace `ns` (cluster-scoped kinds ignore it), as cluster admin; the
    /// kinds are resolved through the server's discovery, so CRDs work. Pods go
    /// through [`Node::create_pod`]. Returns the objects as created.
    pub async fn apply_yaml(&self, ns: &str, yaml: &str) -> Vec<DynamicObject> {
        let docs: Vec<serde_json::Value> =
            serde_saphyr::from_multiple(yaml).unwrap_or_else(|e| panic!("bad YAML: {e}"));
        let mut created = Vec::new();
        for doc in docs.into_iter().filter(|d| !d.is_null()) {
            created.push(self.create_object(ns, doc).await);
        }
        created
    }

    /// Creates one object (JSON) in `ns`; see [`Node::apply_yaml`].
    pub async fn create_object(&self, ns: &str, mut doc: serde_json::Value) -> DynamicObject {
        let client = self.admin().await;
        let kind = doc["kind"].as_str().unwrap_or_default().to_owned();
        if kind == "Pod" && doc["apiVersion"] == "v1" {
            let pod: Pod = serde_json::from_value(doc).unwrap_or_else(|e| panic!("bad Pod: {e}"));
            let pod = self.create_pod(ns, pod).await;
            let value = serde_json::to_value(pod).unwrap_or_else(|e| panic!("{e}"));
            return serde_json::from_value(value).unwrap_or_else(|e| panic!("{e}"));
        }
        let (group, version) = match doc["apiVersion"]
            .as_str()
            .unwrap_or_default()
            .split_once('/')
        {
            Some((g, v)) => (g.to_owned(), v.to_owned()),
            None => (
                String::new(),
                doc["apiVersion"].as_str().unwrap_or_default().to_owned(),
            ),
        };
        let gvk = kube::api::GroupVersionKind::gvk(&group, &version, &kind);
        let (resource, caps) = pinned_kind(&client, &gvk).await.unwrap_or_else(|e| {
            panic!("the server does not serve {kind} ({group}/{version}): {e}")
        });
        let api: Api<DynamicObject> = match caps.scope {
            Scope::Namespaced => {
                doc["metadata"]["namespace"] = json!(ns);
                Api::namespaced_with(client, ns, &resource)
            }
            Scope::Cluster => Api::all_with(client, &resource),
        };
        let name = doc["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let obj: DynamicObject =
            serde_json::from_value(doc).unwrap_or_else(|e| panic!("bad {kind} {name}: {e}"));
        api.create(&PostParams::default(), &obj)
            .await
            .unwrap_or_else(|e| panic!("cannot create {kind} {ns}/{name}: {e}"))
    }

    /// Creates a Pod on this node: `spec.nodeName` set (nothing schedules here)
    /// and every container's `imagePullPolicy` set to `Never` (there is no
    /// registry: an image not imported fails at once with `ErrImageNeverPull`).
    pub async fn create_pod(&self, ns: &str, mut pod: Pod) -> Pod {
        let spec = pod.spec.get_or_insert_with(Default::default);
        spec.node_name = Some(NODE_NAME.to_owned());
        for c in spec
            .init_containers
            .iter_mut()
            .flatten()
            .chain(spec.containers.iter_mut())
        {
            c.image_pull_policy = Some("Never".to_owned());
        }
        let name = pod.metadata.name.clone().unwrap_or_default();
        Api::<Pod>::namespaced(self.admin().await, ns)
            .create(&PostParams::default(), &pod)
            .await
            .unwrap_or_else(|e| panic!("cannot create Pod {ns}/{name}: {e}"))
    }

    /// The Pod as the API server has it now.
    pub async fn pod(&self, ns: &str, name: &str) -> Pod {
        Api::<Pod>::namespaced(self.admin().await, ns)
            .get(name)
            .await
            .unwrap_or_else(|e| panic!("cannot read Pod {ns}/{name}: {e}"))
    }

    /// Polls Pod `ns/name` until `check` returns `Some`, and yields it. `what`
    /// names the awaited condition. Panics after one patience with the Pod's
    /// summary, its Events and the kubelet's last lines.
    pub async fn wait_pod<T>(
        &self,
        ns: &str,
        name: &str,
        what: &str,
        mut check: impl FnMut(&Pod) -> Option<T>,
    ) -> T {
        self.wait_pod_for(ns, name, what, patience(), &mut check)
            .await
    }

    /// [`Node::wait_pod`] with an explicit bound (for waits that legitimately take
    /// longer than one patience, e.g. several back-off rounds).
    pub async fn wait_pod_for<T>(
        &self,
        ns: &str,
        name: &str,
        what: &str,
        timeout: Duration,
        check: &mut impl FnMut(&Pod) -> Option<T>,
    ) -> T {
        let pods: Api<Pod> = Api::namespaced(self.admin().await, ns);
        let deadline = Deadline::after(timeout);
        let start = Instant::now();
        let mut last = None;
        loop {
            match pods.get(name).await {
                Ok(pod) => {
                    if let Some(t) = check(&pod) {
                        return t;
                    }
                    last = Some(pod);
                }
                Err(e) => eprintln!("reading Pod {ns}/{name}: {e}"),
            }
            if deadline.passed() {
                let summary = last.as_ref().map(pod_summary).unwrap_or_default();
                panic!(
                    "Pod {ns}/{name}: not {what} after {:.1?}\n{summary}\nEvents:\n{}\nkubelet:\n{}",
                    start.elapsed(),
                    self.events_text(ns, name).await,
                    self.kubelet_log(30)
                );
            }
            tokio::time::sleep(Duration::from_millis(150)).await;
        }
    }

    /// Polls until container `container` of Pod `ns/name` (init or not) has a
    /// status for which `check` returns `Some`; `what` names the condition.
    pub async fn wait_container<T>(
        &self,
        ns: &str,
        name: &str,
        container: &str,
        what: &str,
        mut check: impl FnMut(&ContainerStatus) -> Option<T>,
    ) -> T {
        let what = format!("container {container} {what}");
        self.wait_pod(ns, name, &what, |pod| {
            container_status(pod, container).and_then(&mut check)
        })
        .await
    }

    /// Polls until the Pod is gone from the API server (the kubelet stopped its
    /// containers and confirmed the deletion).
    pub async fn wait_pod_gone(&self, ns: &str, name: &str) {
        let pods: Api<Pod> = Api::namespaced(self.admin().await, ns);
        let deadline = Deadline::after(patience());
        loop {
            match pods.get_opt(name).await {
                Ok(None) => return,
                Ok(Some(pod)) if deadline.passed() => panic!(
                    "Pod {ns}/{name} still exists after {:?}:\n{}\nkubelet:\n{}",
                    patience(),
                    pod_summary(&pod),
                    self.kubelet_log(30)
                ),
                Ok(Some(_)) => {}
                Err(e) => eprintln!("reading Pod {ns}/{name}: {e}"),
            }
            tokio::time::sleep(Duration::from_millis(150)).await;
        }
    }

    /// Deletes Pod `ns/name` with `grace_secs` and waits until it is gone.
    pub async fn delete_pod(&self, ns: &str, name: &str, grace_secs: u32) {
        let pods: Api<Pod> = Api::namespaced(self.admin().await, ns);
        pods.delete(name, &DeleteParams::default().grace_period(grace_secs))
            .await
            .unwrap_or_else(|e| panic!("cannot delete Pod {ns}/{name}: {e}"));
        self.wait_pod_gone(ns, name).await;
    }

    /// The Events whose object is Pod `ns/name`, oldest first.
    pub async fn events(&self, ns: &str, name: &str) -> Vec<Event> {
        let events: Api<Event> = Api::namespaced(self.admin().await, ns);
        let lp = ListParams::default().fields(&format!(
            "involvedObject.kind=Pod,involvedObject.name={name}"
        ));
        let mut list = events.list(&lp).await.map(|l| l.items).unwrap_or_default();
        list.sort_by_key(|e| e.metadata.creation_timestamp.clone().map(|t| t.0));
        list
    }

    async fn events_text(&self, ns: &str, name: &str) -> String {
        self.events(ns, name)
            .await
            .iter()
            .map(|e| {
                format!(
                    "  {} {} x{}: {}",
                    e.type_.as_deref().unwrap_or_default(),
                    e.reason.as_deref().unwrap_or_default(),
                    e.count.unwrap_or(1),
                    e.message.as_deref().unwrap_or_default()
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// What container `container` of the Pod wrote (stdout and stderr, in
    /// order) during its run number `restart` (0 for the first), from the
    /// kubelet's log files; `None` when there is no such run.
    pub fn logs_of_run(&self, pod: &Pod, container: &str, restart: i32) -> Option<String> {
        let ns = pod.metadata.namespace.as_deref().unwrap_or_default();
        let name = pod.metadata.name.as_deref().unwrap_or_default();
        let uid = pod.metadata.uid.as_deref().unwrap_or_default();
        let path = self
            .kubelet
            .pod_logs
            .join(format!("{ns}_{name}_{uid}"))
            .join(container)
            .join(format!("{restart}.log"));
        let text = std::fs::read_to_string(path).ok()?;
        Some(cri_log_text(&text))
    }

    /// Everything container `container` of Pod `ns/name` wrote, every run
    /// the kubelet kept, oldest first.
    pub async fn logs(&self, ns: &str, name: &str, container: &str) -> String {
        let pod = self.pod(ns, name).await;
        let last = container_status(&pod, container)
            .map(|s| s.restart_count)
            .unwrap_or(0);
        (0..=last)
            .filter_map(|run| self.logs_of_run(&pod, container, run))
            .collect::<Vec<_>>()
            .join("")
    }

    /// The host directory of volume `volume` of the Pod with UID `uid`, as the
    /// kubelet mounted it (`<root>/pods/<uid>/volumes/<plugin>/<volume>`), e.g.
    /// the projected token of `kube-api-access`.
    pub fn pod_volume_dir(&self, uid: &str, volume: &str) -> Option<PathBuf> {
        let volumes = self.kubelet.root.join("pods").join(uid).join("volumes");
        std::fs::read_dir(volumes)
            .ok()?
            .flatten()
            .map(|plugin| plugin.path().join(volume))
            .find(|p| p.exists())
    }

    /// SIGKILLs the first process of container `container` of Pod `ns/name`
    /// (its running instance), as a node failure or the OOM killer does; the
    /// kubelet sees the container die and applies the Pod's restart policy.
    /// Returns the ID of the killed container.
    pub async fn kill_container(&self, ns: &str, name: &str, container: &str) -> String {
        let pod = self.pod(ns, name).await;
        let status = container_status(&pod, container)
            .unwrap_or_else(|| panic!("Pod {ns}/{name} has no container {container}"));
        assert!(
            status
                .state
                .as_ref()
                .and_then(|s| s.running.as_ref())
                .is_some(),
            "container {container} of Pod {ns}/{name} is not running:\n{}",
            pod_summary(&pod)
        );
        let id = container_id(status)
            .unwrap_or_else(|| panic!("container {container} of {ns}/{name} has no ID"));
        let pid = self
            .containerd
            .init_pid(&id)
            .unwrap_or_else(|e| panic!("container {container} of {ns}/{name}: {e}"));
        signal(pid, Signal::SIGKILL);
        id
    }

    /// A directory under the run dir for a `hostPath` volume, created (empty)
    /// and owned by the Pods' uid/gid 65532 with mode 0700, as etcd wants its
    /// data dir; removed with the node.
    pub fn host_dir(&self, name: &str) -> PathBuf {
        let dir = self.run_dir.join("volumes").join(name);
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
        std::os::unix::fs::chown(&dir, Some(super::POD_UID), Some(super::POD_GID))
            .unwrap_or_else(|e| panic!("{e}"));
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))
            .unwrap_or_else(|e| panic!("{e}"));
        dir
    }

    /// Removes everything inside `dir` (a `hostPath` dir the test owns), keeping
    /// the directory itself, its mode and owner: a volume that came back empty.
    pub fn wipe_dir(&self, dir: &Path) {
        assert!(
            dir.starts_with(&self.run_dir),
            "{} is not a directory of this node",
            dir.display()
        );
        for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let path = entry.unwrap_or_else(|e| panic!("{e}")).path();
            let removed = if path.is_dir() && !path.is_symlink() {
                std::fs::remove_dir_all(&path)
            } else {
                std::fs::remove_file(&path)
            };
            removed.unwrap_or_else(|e| panic!("cannot remove {}: {e}", path.display()));
        }
        let left = std::fs::read_dir(dir)
            .map(|d| d.count())
            .unwrap_or(usize::MAX);
        assert_eq!(left, 0, "{} is not empty after the wipe", dir.display());
    }

    /// containerd's task exit events since the first call, in the order
    /// containerd saw them: `(container ID, exit status)`. The first call starts
    /// listening (`ctr events`); exits before it are not seen.
    pub fn task_exits(&self) -> Vec<(String, u32)> {
        let mut events = self.events.lock().unwrap_or_else(|e| e.into_inner());
        let events = events.get_or_insert_with(|| TaskEvents::start(&self.containerd));
        events.exits()
    }

    /// Tears the node down (see the module docs); returns what could not be
    /// undone. Idempotent.
    fn teardown(&self) -> Vec<String> {
        let mut left = Vec::new();
        let kubelet_running = {
            let mut child = self.kubelet_child.lock().unwrap_or_else(|e| e.into_inner());
            child
                .as_mut()
                .is_some_and(|c| matches!(c.try_wait(), Ok(None)))
        };
        if kubelet_running {
            if let Err(e) = delete_all_pods(&self.api) {
                left.push(format!("Pods not deleted gracefully: {e}"));
            }
        }
        if let Some(events) = self.events.lock().unwrap_or_else(|e| e.into_inner()).take() {
            events.stop();
        }
        stop_child(&self.kubelet_child, Duration::from_secs(10));
        stop_child(&self.containerd_child, Duration::from_secs(10));
        left.extend(self.host.undo());
        left
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        let start = Instant::now();
        let left = self.teardown();
        eprintln!("node {NODE_NAME} torn down in {:.1?}", start.elapsed());
        if !left.is_empty() {
            let message = format!("the node was not completely torn down: {left:?}");
            if std::thread::panicking() {
                eprintln!("{message}");
            } else {
                panic!("{message}");
            }
        }
    }
}

/// Undoes a node that failed to start (see [`HostState::undo`]) when dropped
/// still holding its record.
struct UndoUnlessStarted(Option<HostState>);

impl Drop for UndoUnlessStarted {
    fn drop(&mut self) {
        if let Some(host) = self.0.take() {
            let left = host.undo();
            eprintln!("the node did not start; undone (left: {left:?})");
        }
    }
}

/// SIGTERM, then SIGKILL after `grace`; reaped and unregistered.
fn stop_child(child: &Mutex<Option<Child>>, grace: Duration) {
    let Some(mut child) = child.lock().unwrap_or_else(|e| e.into_inner()).take() else {
        return;
    };
    let pid = child.id();
    signal(pid, Signal::SIGTERM);
    if wait_with_deadline(&mut child, Deadline::after(grace)).is_none() {
        signal(pid, Signal::SIGKILL);
        let _ = child.wait();
    }
    unregister(pid);
}

/// Deletes every Pod of every namespace (grace 1 s) and waits until the kubelet
/// confirmed each deletion, on a thread and runtime of its own (teardown runs
/// in `Drop`, maybe inside the test's runtime).
fn delete_all_pods(api: &KubeApiServer) -> Result<(), String> {
    std::thread::scope(|s| {
        s.spawn(|| {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| e.to_string())?;
            rt.block_on(async {
                let pods: Api<Pod> = Api::all(api.admin().await);
                let list = pods
                    .list(&ListParams::default())
                    .await
                    .map_err(|e| e.to_string())?;
                for pod in &list.items {
                    let ns = pod.metadata.namespace.as_deref().unwrap_or_default();
                    let name = pod.metadata.name.as_deref().unwrap_or_default();
                    let _ = Api::<Pod>::namespaced(api.admin().await, ns)
                        .delete(name, &DeleteParams::default().grace_period(1))
                        .await;
                }
                let deadline = Deadline::after(patience());
                loop {
                    let left = pods
                        .list(&ListParams::default())
                        .await
                        .map_err(|e| e.to_string())?;
                    if left.items.is_empty() {
                        return Ok(());
                    }
                    if deadline.passed() {
                        let names: Vec<_> = left
                            .items
                            .iter()
                            .filter_map(|p| p.metadata.name.clone())
                            .collect();
                        return Err(format!("still there after {:?}: {names:?}", patience()));
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            })
        })
        .join()
        .unwrap_or_else(|_| Err("the deleting thread panicked".to_owned()))
    })
}

/// Starts containerd and waits until it answers; panics with its log otherwise.
fn start_containerd(paths: &ContainerdPaths, run_dir: &Path) -> Child {
    let log_path = run_dir.join("containerd.log");
    let log = std::fs::File::create(&log_path).unwrap_or_else(|e| panic!("{e}"));
    let stderr = log.try_clone().unwrap_or_else(|e| panic!("{e}"));
    let mut child = paths
        .command()
        .stdout(log)
        .stderr(stderr)
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start containerd: {e}"));
    register(child.id(), run_dir);
    let deadline = Deadline::after(patience());
    let log = || tail(&std::fs::read_to_string(&log_path).unwrap_or_default(), 40).to_owned();
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            panic!("containerd exited ({status}):\n{}", log());
        }
        if paths.answers() {
            return child;
        }
        assert!(
            !deadline.passed(),
            "containerd does not answer after {:?}:\n{}",
            patience(),
            log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Runs `scripts/node-images` (the agent from `AGENT_STATIC_BIN`, else built by
/// `scripts/build-static`), and returns `(image name, tar)` for the agent, the
/// pause image and the etcd lines asked for.
fn node_images(etcd_versions: &[EtcdVersion]) -> Vec<(String, PathBuf)> {
    let out_dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("node-images");
    let mut cmd = std::process::Command::new(repo().join("scripts/node-images"));
    cmd.arg("--out").arg(&out_dir).stderr(Stdio::inherit());
    // The script reads these (and PATH for its tools); nothing else leaks in.
    cmd.env_clear();
    for var in [
        "PATH",
        "HOME",
        "AGENT_STATIC_BIN",
        "ETCD_V35_BIN_DIR",
        "ETCD_V36_BIN_DIR",
        "ETCD_V37_BIN_DIR",
        "CARGO_HOME",
        "RUSTUP_HOME",
        "RUSTUP_TOOLCHAIN",
    ] {
        if let Some(v) = std::env::var_os(var) {
            cmd.env(var, v);
        }
    }
    let out = super::process::run_with_deadline(&mut cmd, Duration::from_secs(1800))
        .unwrap_or_else(|e| panic!("scripts/node-images: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "scripts/node-images failed ({}):\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let wanted: Vec<String> = [AGENT_IMAGE.to_owned(), PAUSE_IMAGE.to_owned()]
        .into_iter()
        .chain(etcd_versions.iter().map(|v| etcd_image(*v)))
        .collect();
    let images: Vec<(String, PathBuf)> = stdout
        .lines()
        .filter_map(|l| l.split_once(' '))
        .filter(|(name, _)| wanted.iter().any(|w| w == name))
        .map(|(name, tar)| (name.to_owned(), PathBuf::from(tar)))
        .collect();
    for w in &wanted {
        assert!(
            images.iter().any(|(name, _)| name == w),
            "scripts/node-images made no image {w}:\n{stdout}"
        );
    }
    images
}

/// The status of container `name` of the Pod, init containers (sidecars
/// included) or not.
pub fn container_status<'p>(pod: &'p Pod, name: &str) -> Option<&'p ContainerStatus> {
    let status = pod.status.as_ref()?;
    status
        .init_container_statuses
        .iter()
        .flatten()
        .chain(status.container_statuses.iter().flatten())
        .find(|s| s.name == name)
}

/// The runtime's ID of a container (`containerd://<id>` without the scheme).
pub fn container_id(status: &ContainerStatus) -> Option<String> {
    let id = status.container_id.as_deref()?;
    Some(id.split_once("://").map_or(id, |(_, id)| id).to_owned())
}

/// Whether the Pod's `Ready` condition is `True`.
pub fn is_ready(pod: &Pod) -> bool {
    condition(pod, "Ready") == Some(true)
}

/// The status of condition `type_` of the Pod.
pub fn condition(pod: &Pod, type_: &str) -> Option<bool> {
    pod.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| c.status == "True")
}

/// One line per container: its state, last state and restarts; the Pod's
/// phase and conditions first. For failure messages.
pub fn pod_summary(pod: &Pod) -> String {
    let Some(status) = pod.status.as_ref() else {
        return "  no status".to_owned();
    };
    let mut lines = vec![format!(
        "  phase {} conditions {}",
        status.phase.as_deref().unwrap_or("?"),
        status
            .conditions
            .iter()
            .flatten()
            .map(|c| format!("{}={}", c.type_, c.status))
            .collect::<Vec<_>>()
            .join(",")
    )];
    let describe = |s: Option<&k8s_openapi::api::core::v1::ContainerState>| -> String {
        let Some(s) = s else { return "-".to_owned() };
        if let Some(w) = &s.waiting {
            format!(
                "waiting {} {}",
                w.reason.as_deref().unwrap_or_default(),
                w.message.as_deref().unwrap_or_default()
            )
        } else if s.running.is_some() {
            "running".to_owned()
        } else if let Some(t) = &s.terminated {
            format!(
                "terminated {} ({}) {}",
                t.exit_code,
                t.reason.as_deref().unwrap_or_default(),
                t.message.as_deref().unwrap_or_default().trim()
            )
        } else {
            "?".to_owned()
        }
    };
    for (kind, list) in [
        ("init", status.init_container_statuses.as_ref()),
        ("container", status.container_statuses.as_ref()),
    ] {
        for s in list.into_iter().flatten() {
            lines.push(format!(
                "  {kind} {}: {}; ready {}; restarts {}; last: {}",
                s.name,
                describe(s.state.as_ref()),
                s.ready,
                s.restart_count,
                describe(s.last_state.as_ref())
            ));
        }
    }
    lines.join("\n")
}

/// The text of a CRI log file (`<time> <stream> <P|F> <text>` per line, `P`
/// for a partial line continued on the next).
fn cri_log_text(file: &str) -> String {
    let mut out = String::new();
    for line in file.lines() {
        let mut parts = line.splitn(4, ' ');
        let (_time, _stream, tag) = (parts.next(), parts.next(), parts.next());
        let text = parts.next().unwrap_or_default();
        out.push_str(text);
        if tag != Some("P") {
            out.push('\n');
        }
    }
    out
}

/// `ctr events` running, its `/tasks/exit` lines collected.
struct TaskEvents {
    child: Child,
    lines: Arc<Mutex<Vec<String>>>,
}

impl TaskEvents {
    fn start(containerd: &ContainerdPaths) -> TaskEvents {
        let mut cmd = std::process::Command::new(containerd.bin_dir.join("ctr"));
        cmd.env_clear()
            .arg("--address")
            .arg(&containerd.socket)
            .arg("events")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        let mut child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run ctr events: {e}"));
        let stdout = child.stdout.take().unwrap_or_else(|| panic!("no stdout"));
        let lines = Arc::new(Mutex::new(Vec::new()));
        let sink = lines.clone();
        std::thread::spawn(move || {
            use std::io::BufRead;
            for line in std::io::BufReader::new(stdout)
                .lines()
                .map_while(Result::ok)
            {
                if line.contains("/tasks/exit") {
                    sink.lock().unwrap_or_else(|e| e.into_inner()).push(line);
                }
            }
        });
        TaskEvents { child, lines }
    }

    fn exits(&self) -> Vec<(String, u32)> {
        self.lines
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .filter_map(|line| {
                let json = &line[line.find('{')?..];
                let v: serde_json::Value = serde_json::from_str(json).ok()?;
                Some((
                    v["container_id"].as_str()?.to_owned(),
                    v["exit_status"].as_u64().unwrap_or(0) as u32,
                ))
            })
            .collect()
    }

    fn stop(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
