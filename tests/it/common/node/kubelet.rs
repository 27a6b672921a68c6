//! The kubelet of the node: its configuration and its command line.
//!
//! Upstream kubelet built from the `k8s.io/kubernetes` Go module by
//! `scripts/build-node` (`KUBELET_BIN`, else the default cache path), the same
//! version as the API server. Settings that are required on this machine kind
//! (`../shared/reference/real-node.md`):
//! * `failCgroupV1: false` (else it exits at once on cgroup v1), `cgroupDriver:
//!   cgroupfs`, `failSwapOn: false`;
//! * its server on `127.0.0.1` only, read-only port off, healthz off, x509
//!   client-certificate authentication against the API server's CA;
//! * `imageGCHighThresholdPercent: 100` (the imported images are never
//!   collected), tiny `evictionHard` thresholds (a full disk elsewhere must not
//!   evict the test's Pods);
//! * `crashLoopBackOff.maxContainerRestartPeriod: 1s`: a refusing `preflight` is
//!   retried every second instead of after 10 s, 20 s, … 5 min;
//! * every directory (`--root-dir`, `--cert-dir`, `podLogsDir`, `volumePluginDir`)
//!   under the node's run dir.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// `KUBELET_BIN`, else `scripts/build-node`'s cache path for the version the
/// API server is built at; panics, saying how to build it, when missing.
pub fn kubelet_bin() -> PathBuf {
    let bin = std::env::var_os("KUBELET_BIN")
        .filter(|b| !b.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            Path::new("/var/cache/etcd-member-agent/kubelet")
                .join(crate::common::kube_apiserver_version())
                .join("kubelet")
        });
    assert!(
        bin.is_file(),
        "the kubelet is not built: no {} (KUBELET_BIN); run scripts/setup or scripts/build-node",
        bin.display()
    );
    bin
}

/// Where one node's kubelet keeps everything.
pub struct KubeletPaths {
    /// `--root-dir`: Pods' volumes (`pods/<uid>/volumes/…`), plugins, checkpoints.
    pub root: PathBuf,
    /// The Pods' container logs: `<ns>_<pod>_<uid>/<container>/<restart>.log`.
    pub pod_logs: PathBuf,
    config: PathBuf,
    kubeconfig: PathBuf,
    cert_dir: PathBuf,
}

/// What the kubelet config needs from the rest of the node.
pub struct KubeletSettings<'a> {
    /// The kubelet's server port on 127.0.0.1.
    pub port: u16,
    /// containerd's socket.
    pub runtime_socket: &'a Path,
    /// The CA that signs clients of the kubelet's server (the API server's).
    pub client_ca: &'a Path,
    /// A kubeconfig as `system:node:<node_name>`.
    pub kubeconfig: &'a Path,
}

impl KubeletPaths {
    /// The layout under `run_dir`, and its config written.
    pub fn write(run_dir: &Path, s: &KubeletSettings<'_>) -> KubeletPaths {
        let base = run_dir.join("kubelet");
        let paths = KubeletPaths {
            root: base.join("root"),
            pod_logs: base.join("pod-logs"),
            config: base.join("config.yaml"),
            kubeconfig: s.kubeconfig.to_owned(),
            cert_dir: base.join("pki"),
        };
        for dir in [&paths.root, &paths.pod_logs, &paths.cert_dir] {
            std::fs::create_dir_all(dir).unwrap_or_else(|e| panic!("{e}"));
        }
        let volume_plugins = base.join("volume-plugins");
        std::fs::create_dir_all(&volume_plugins).unwrap_or_else(|e| panic!("{e}"));
        // JSON is YAML; serde_json keeps the quoting right.
        let config = serde_json::json!({
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            "failCgroupV1": false,
            "cgroupDriver": "cgroupfs",
            "failSwapOn": false,
            "address": "127.0.0.1",
            "port": s.port,
            "readOnlyPort": 0,
            "healthzPort": 0,
            "authentication": {
                "anonymous": {"enabled": false},
                "webhook": {"enabled": false},
                "x509": {"clientCAFile": s.client_ca},
            },
            "authorization": {"mode": "AlwaysAllow"},
            "containerRuntimeEndpoint": format!("unix://{}", s.runtime_socket.display()),
            "imageGCHighThresholdPercent": 100,
            "imageGCLowThresholdPercent": 99,
            "evictionHard": {
                "memory.available": "1Mi",
                "nodefs.available": "1%",
                "nodefs.inodesFree": "1%",
                "imagefs.available": "1%",
            },
            "crashLoopBackOff": {"maxContainerRestartPeriod": "1s"},
            "podLogsDir": paths.pod_logs,
            "volumePluginDir": volume_plugins,
            "serializeImagePulls": false,
            // Status changes reach the API server at once, not on the next sync.
            "nodeStatusUpdateFrequency": "10s",
            "syncFrequency": "10s",
            "fileCheckFrequency": "10s",
        });
        std::fs::write(&paths.config, config.to_string()).unwrap_or_else(|e| panic!("{e}"));
        paths
    }

    /// The command that runs the kubelet as Node `node_name`.
    pub fn command(&self, node_name: &str) -> Command {
        let mut cmd = Command::new(kubelet_bin());
        cmd.env_clear()
            .env(
                "PATH",
                "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            )
            .arg(format!("--config={}", self.config.display()))
            .arg(format!("--kubeconfig={}", self.kubeconfig.display()))
            .arg(format!("--root-dir={}", self.root.display()))
            .arg(format!("--cert-dir={}", self.cert_dir.display()))
            .arg(format!("--hostname-override={node_name}"))
            .arg("--v=1")
            .stdin(Stdio::null());
        cmd
    }
}
