//! containerd v2 for the node: its configuration, its process, and `ctr`.
//!
//! Built from its Go module by `scripts/build-node` (`CONTAINERD_BIN_DIR`, else
//! the default cache path); runc is Debian's (`/usr/sbin/runc`, with seccomp).
//! Everything of it lives in the node's run dir: root, state, sockets, the shims'
//! sockets, runc's root. Settings that are required on this machine kind (see
//! `../shared/reference/real-node.md`):
//! * `restrict_oom_score_adj = true`: root here lacks `CAP_SYS_RESOURCE`, so runc
//!   cannot set a sandbox's oom score to -998 and every sandbox fails ("can't get
//!   final child's PID from pipe: EOF") without it;
//! * `disable_apparmor = true`;
//! * the sandbox image is the imported pause image (`pinned_images.sandbox`);
//! * no CNI configuration: Pods use `hostNetwork` (the Node stays NotReady for
//!   its network, which does not matter to Pods with `spec.nodeName`);
//! * the plugins that would touch fixed host paths (NRI's socket, `/opt/containerd`)
//!   are disabled.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::common::patience;
use crate::common::process::{describe, run_with_deadline};

/// The containerd version pinned by `tools/containerd/go.mod` (`v2.4.2`).
pub fn containerd_version() -> String {
    let go_mod = super::repo().join("tools/containerd/go.mod");
    let text = std::fs::read_to_string(&go_mod)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", go_mod.display()));
    text.lines()
        .filter_map(|l| {
            let mut words = l.split_whitespace();
            (words.next() == Some("github.com/containerd/containerd/v2")).then(|| words.next())?
        })
        .next()
        .unwrap_or_else(|| panic!("{} requires no containerd v2", go_mod.display()))
        .to_owned()
}

/// `CONTAINERD_BIN_DIR`, else `scripts/build-node`'s cache dir for the pinned
/// version; panics, saying how to build it, when containerd is missing.
pub fn containerd_bin_dir() -> PathBuf {
    let dir = std::env::var_os("CONTAINERD_BIN_DIR")
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            Path::new("/var/cache/etcd-member-agent/containerd").join(containerd_version())
        });
    for bin in ["containerd", "ctr", "containerd-shim-runc-v2"] {
        assert!(
            dir.join(bin).is_file(),
            "containerd is not built: no {} (CONTAINERD_BIN_DIR); run scripts/setup or scripts/build-node",
            dir.join(bin).display()
        );
    }
    dir
}

/// Debian's runc, with seccomp (containerd 2 refuses a runc without it).
pub fn runc_bin() -> PathBuf {
    let runc = PathBuf::from("/usr/sbin/runc");
    assert!(
        runc.is_file(),
        "no {}: install Debian's runc (scripts/setup)",
        runc.display()
    );
    runc
}

/// Where one node's containerd keeps everything.
pub struct ContainerdPaths {
    /// The binaries (containerd, ctr, the shim).
    pub bin_dir: PathBuf,
    /// `config.toml`.
    pub config: PathBuf,
    /// The gRPC socket the kubelet and `ctr` use.
    pub socket: PathBuf,
    /// containerd's state dir (tasks: `io.containerd.runtime.v2.task/k8s.io/<id>/`).
    pub state: PathBuf,
}

impl ContainerdPaths {
    /// The layout under `run_dir`, and its config written. `pause_image` is the
    /// sandbox image.
    pub fn write(run_dir: &Path, pause_image: &str) -> ContainerdPaths {
        let bin_dir = containerd_bin_dir();
        let base = run_dir.join("containerd");
        let p = |name: &str| base.join(name);
        for dir in ["root", "state", "runc", "cni-bin", "cni-conf"] {
            std::fs::create_dir_all(p(dir)).unwrap_or_else(|e| panic!("{e}"));
        }
        // Shim sockets are <dir>/<64 hex digits>: the dir must stay short for
        // sun_path (108 bytes), hence directly under the run dir.
        let shim_sockets = run_dir.join("s");
        std::fs::create_dir_all(&shim_sockets).unwrap_or_else(|e| panic!("{e}"));
        let socket = p("containerd.sock");
        let config = format!(
            r#"version = 4
root = '{root}'
state = '{state}'
imports = []
disabled_plugins = [
  'io.containerd.nri.v1.nri',
  'io.containerd.internal.v1.opt',
  'io.containerd.image-verifier.v1.bindir',
  'io.containerd.snapshotter.v1.erofs',
  'io.containerd.differ.v1.erofs',
  'io.containerd.snapshotter.v1.blockfile',
  'io.containerd.tracing.processor.v1.otlp',
]

[plugins]
  [plugins.'io.containerd.cri.v1.images']
    snapshotter = 'overlayfs'
    [plugins.'io.containerd.cri.v1.images'.pinned_images]
      sandbox = '{pause_image}'

  [plugins.'io.containerd.cri.v1.runtime']
    disable_apparmor = true
    restrict_oom_score_adj = true
    cdi_spec_dirs = []
    [plugins.'io.containerd.cri.v1.runtime'.containerd]
      default_runtime_name = 'runc'
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
        runtime_type = 'io.containerd.runc.v2'
        [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
          BinaryName = '{runc}'
          Root = '{runc_root}'
          SystemdCgroup = false
    [plugins.'io.containerd.cri.v1.runtime'.cni]
      bin_dirs = ['{cni_bin}']
      conf_dir = '{cni_conf}'

  [plugins.'io.containerd.grpc.v1.cri']
    stream_server_address = '127.0.0.1'
    stream_server_port = '0'

  [plugins.'io.containerd.server.v1.grpc']
    address = '{socket}'

  [plugins.'io.containerd.server.v1.ttrpc']
    address = '{socket}.ttrpc'

  [plugins.'io.containerd.shim.v1.manager']
    socket_dir = '{shim_sockets}'
"#,
            root = p("root").display(),
            state = p("state").display(),
            runc = runc_bin().display(),
            runc_root = p("runc").display(),
            cni_bin = p("cni-bin").display(),
            cni_conf = p("cni-conf").display(),
            socket = socket.display(),
            shim_sockets = shim_sockets.display(),
        );
        let config_path = p("config.toml");
        std::fs::write(&config_path, config).unwrap_or_else(|e| panic!("{e}"));
        ContainerdPaths {
            bin_dir,
            config: config_path,
            socket,
            state: p("state"),
        }
    }

    /// The command that runs containerd with this config, PATH holding its shim.
    pub fn command(&self) -> Command {
        let mut cmd = Command::new(self.bin_dir.join("containerd"));
        cmd.env_clear()
            .env(
                "PATH",
                format!(
                    "{}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                    self.bin_dir.display()
                ),
            )
            .arg("--config")
            .arg(&self.config)
            .stdin(Stdio::null());
        cmd
    }

    /// `ctr -n k8s.io --address <socket> <args>`, bounded by one patience;
    /// panics with its output when it fails.
    pub fn ctr(&self, args: &[&str]) -> String {
        self.try_ctr(args).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Like [`ctr`](Self::ctr), the failure returned.
    pub fn try_ctr(&self, args: &[&str]) -> Result<String, String> {
        let mut cmd = Command::new(self.bin_dir.join("ctr"));
        cmd.env_clear()
            .arg("--address")
            .arg(&self.socket)
            .args(["--namespace", "k8s.io"])
            .args(args);
        let what = describe(&cmd);
        let out = run_with_deadline(&mut cmd, patience())?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(format!(
                "{what} failed ({}): {}{}",
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ))
        }
    }

    /// Whether containerd answers on its socket.
    pub fn answers(&self) -> bool {
        let mut cmd = Command::new(self.bin_dir.join("ctr"));
        cmd.env_clear()
            .arg("--address")
            .arg(&self.socket)
            .args(["version"]);
        run_with_deadline(&mut cmd, Duration::from_secs(5)).is_ok_and(|o| o.status.success())
    }

    /// The host PID of a container's first process, from its shim's record
    /// (`<state>/io.containerd.runtime.v2.task/k8s.io/<id>/init.pid`).
    pub fn init_pid(&self, container_id: &str) -> Result<u32, String> {
        let path = self
            .state
            .join("io.containerd.runtime.v2.task/k8s.io")
            .join(container_id)
            .join("init.pid");
        let text = std::fs::read_to_string(&path).map_err(|e| {
            format!(
                "no task for container {container_id} ({}: {e})",
                path.display()
            )
        })?;
        text.trim()
            .parse()
            .map_err(|e| format!("{}: {text:?}: {e}", path.display()))
    }
}
