//! The release binary runs where the agent is deployed: a distroless etcd image
//! with no libc, no loader and no NSS modules. Peer endpoints are host names in
//! Kubernetes, so a statically linked glibc must still resolve them from
//! `/etc/hosts` and DNS.
//!
//! These tests need the static build: `AGENT_STATIC_BIN=$(scripts/build-static)`
//! (`scripts/test` sets it). Without it they say so loudly and pass, except under
//! CI (`CI=true`), where a missing static binary fails the build.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common::*;

fn static_bin() -> Option<PathBuf> {
    match std::env::var_os("AGENT_STATIC_BIN").filter(|b| !b.is_empty()) {
        Some(b) => Some(PathBuf::from(b)),
        None => {
            skip("set AGENT_STATIC_BIN=$(scripts/build-static) to run the static-binary tests");
            None
        }
    }
}

fn chroot_bin() -> PathBuf {
    ["/usr/sbin/chroot", "/usr/bin/chroot", "/sbin/chroot"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.is_file())
        .expect("coreutils chroot")
}

/// An empty root holding only the binary, `/etc/hosts`, `/etc/resolv.conf` and
/// an empty data dir owned by the Pod's uid.
fn empty_root(bin: &Path, hosts: &str) -> tempfile::TempDir {
    let root = tempfile::tempdir().unwrap();
    let inside = root.path().join("etcd-member-agent");
    std::fs::copy(bin, &inside).unwrap();
    std::fs::set_permissions(&inside, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::create_dir(root.path().join("etc")).unwrap();
    std::fs::write(root.path().join("etc/hosts"), hosts).unwrap();
    // A resolver nobody answers on: names must come from /etc/hosts.
    std::fs::write(
        root.path().join("etc/resolv.conf"),
        "nameserver 127.0.0.1\noptions timeout:1 attempts:1\n",
    )
    .unwrap();
    let data = root.path().join("data");
    std::fs::create_dir(&data).unwrap();
    std::os::unix::fs::chown(&data, Some(POD_UID), Some(POD_GID)).unwrap();
    std::fs::set_permissions(root.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    root
}

fn in_chroot(root: &Path, args: &[&str], envs: &[(&str, String)]) -> AgentRun {
    let mut cmd = Command::new(chroot_bin());
    cmd.env_clear()
        .arg(format!("--userspec={POD_UID}:{POD_GID}"))
        .arg(root)
        .arg("/etcd-member-agent")
        .args(args);
    for (k, v) in envs {
        cmd.env(k, v);
    }
    run_command(cmd)
}

#[test]
fn the_static_binary_has_no_interpreter_and_no_needed_libraries() {
    let Some(bin) = static_bin() else { return };
    let out = Command::new("readelf")
        .arg("-ld")
        .arg(&bin)
        .output()
        .expect("readelf");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(!text.contains("program interpreter"), "{text}");
    assert!(!text.contains("(NEEDED)"), "{text}");
}

/// A peer endpoint given by a host name from `/etc/hosts` resolves inside an empty
/// chroot, so preflight reaches the live cluster; a name that is nowhere does
/// not resolve, and preflight says so instead of hanging.
/// The release build leaves the `test-hooks` feature off: the binary that ships
/// cannot be made to pause by an environment variable (the hook's variable name
/// is in it exactly when the hook is).
#[test]
fn the_static_binary_carries_no_test_hook() {
    let Some(bin) = static_bin() else { return };
    let bytes = std::fs::read(&bin).unwrap();
    let hook = b"AGENT_TEST_PAUSE_AT";
    assert!(
        !bytes.windows(hook.len()).any(|w| w == hook),
        "{} carries the restore pause hook: it was built with the test-hooks feature",
        bin.display()
    );
}

#[test]
fn peer_host_names_resolve_from_etc_hosts_in_an_empty_chroot() {
    let Some(bin) = static_bin() else { return };
    let cluster = Cluster::builder(EtcdVersion::V3_5).start();
    let port = cluster[0]
        .client_url()
        .rsplit(':')
        .next()
        .unwrap()
        .trim_end_matches('/')
        .to_string();
    let root = empty_root(
        &bin,
        "127.0.0.1 localhost\n127.0.0.1 etcd-0.etcd-headless.tenant-a.svc\n",
    );
    let env = |endpoint: String| -> Vec<(&str, String)> {
        vec![
            ("ETCD_DATA_DIR", "/data".into()),
            ("ETCD_MEMBER_NAME", "etcd-9".into()),
            (
                "ETCD_INITIAL_CLUSTER",
                "etcd-0=http://etcd-0.etcd-headless.tenant-a.svc:2380,\
                 etcd-9=http://etcd-9.etcd-headless.tenant-a.svc:2380"
                    .into(),
            ),
            ("ETCD_PEER_ENDPOINTS", endpoint),
            ("AGENT_KUBE", "false".into()),
            ("AGENT_TIMEOUT", "5s".into()),
        ]
    };

    let run = in_chroot(
        root.path(),
        &["preflight", "-o", "json"],
        &env(format!("http://etcd-0.etcd-headless.tenant-a.svc:{port}")),
    );
    let doc = run.json();
    let etcd = doc["evidence"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["source"] == "etcd")
        .unwrap()
        .clone();
    assert_eq!(etcd["answered"], true, "{run:?}");
    assert_eq!(
        etcd["said"]["cluster_id"],
        format!(
            "{:016x}",
            cluster[0].endpoint_status()["header"]["cluster_id"]
                .as_u64()
                .unwrap()
        ),
        "{run:?}"
    );
    // etcd-9 (not the seed) is not in that cluster's member list → phase-unknown.
    assert_eq!(run.code, 14, "{run:?}");

    let run = in_chroot(
        root.path(),
        &["preflight", "-o", "json"],
        &env(format!("http://nowhere.invalid:{port}")),
    );
    let doc = run.json();
    let etcd = doc["evidence"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["source"] == "etcd")
        .unwrap()
        .clone();
    assert_eq!(etcd["answered"], false, "{run:?}");
    assert_eq!(run.code, 14, "{run:?}");
}

/// The init-container commands run as uid 65532 with nothing but the binary.
#[test]
fn install_preflight_and_verify_wipe_run_as_65532_in_an_empty_chroot() {
    let Some(bin) = static_bin() else { return };
    let root = empty_root(&bin, "127.0.0.1 localhost\n");
    let tools = root.path().join("tools");
    std::fs::create_dir(&tools).unwrap();
    std::os::unix::fs::chown(&tools, Some(POD_UID), Some(POD_GID)).unwrap();

    let run = in_chroot(
        root.path(),
        &["install", "--dest", "/tools", "-o", "json"],
        &[],
    );
    assert_eq!(run.code, 0, "{run:?}");
    assert!(tools.join("etcd-member-agent").is_file());

    let run = in_chroot(
        root.path(),
        &["verify-wipe", "--data-dir", "/data", "-o", "json"],
        &[],
    );
    assert_eq!(run.code, 0, "{run:?}");
    assert_eq!(run.json()["empty"], true, "{run:?}");

    // No evidence source at all: the guard fails closed, from inside the chroot too.
    let run = in_chroot(
        root.path(),
        &["preflight", "-o", "json"],
        &[
            ("ETCD_DATA_DIR", "/data".into()),
            ("ETCD_MEMBER_NAME", "etcd-0".into()),
            ("ETCD_INITIAL_CLUSTER", "etcd-0=http://etcd-0:2380".into()),
            ("AGENT_KUBE", "false".into()),
            ("AGENT_TIMEOUT", "2s".into()),
        ],
    );
    assert_eq!(run.code, 14, "{run:?}");
    assert_eq!(run.json()["verdict"], "phase-unknown", "{run:?}");
}
