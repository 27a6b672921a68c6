//! `install` as a black box: the binary run with a cleared environment copies
//! itself into a destination, and the copy must be byte-identical, mode 0755 and
//! runnable. The last test proves the release binary is self-contained: it runs,
//! installs and verifies inside an empty chroot as uid 65532. It needs a static
//! build (`scripts/build-static` prints its path; pass it as `AGENT_STATIC_BIN`)
//! and says loudly when it is skipped (under `CI=true` it fails instead, as do
//! the uid-65532 tests when that uid cannot run the test binary).

use std::ffi::OsStr;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common::{pod_uid_can_run_the_agent, run_command, skip, AgentRun, AGENT_BIN, POD_UID};

const NONROOT: u32 = POD_UID;

const BIN: &str = AGENT_BIN;

fn version_line() -> String {
    format!("etcd-member-agent {}", env!("CARGO_PKG_VERSION"))
}

/// Runs `program args` with an empty environment (plus `env`), optionally as
/// `uid`, bounded by the patience.
fn run(program: &Path, args: &[&OsStr], env: &[(&str, &str)], uid: Option<u32>) -> AgentRun {
    let mut cmd = Command::new(program);
    cmd.env_clear().args(args).envs(env.iter().copied());
    if let Some(uid) = uid {
        cmd.uid(uid).gid(uid);
    }
    run_command(cmd)
}

/// `install --dest <dest> -o json`, checking the document's exit code.
fn install(dest: &Path, uid: Option<u32>) -> AgentRun {
    let args = [
        OsStr::new("install"),
        OsStr::new("--dest"),
        dest.as_os_str(),
        OsStr::new("-o"),
        OsStr::new("json"),
    ];
    let r = run(Path::new(BIN), &args, &[], uid);
    assert_eq!(
        r.json()["exit_code"].as_i64(),
        Some(i64::from(r.code)),
        "one JSON document with the exit code, whatever the outcome: {r:?}"
    );
    r
}

fn tempdir() -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    d
}

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

#[test]
fn install_copies_the_binary_with_mode_0755_and_the_copy_runs() {
    let dest = tempdir();
    let r = install(dest.path(), None);
    assert_eq!(r.code, 0, "{r:?}");
    let copy = dest.path().join("etcd-member-agent");
    assert_eq!(
        names(dest.path()),
        vec!["etcd-member-agent"],
        "no temp file left"
    );
    let m = std::fs::metadata(&copy).unwrap();
    assert_eq!(m.mode() & 0o7777, 0o755);
    assert_eq!(std::fs::read(&copy).unwrap(), std::fs::read(BIN).unwrap());
    assert_eq!(r.json()["dest"], dest.path().to_str().unwrap());
    assert_eq!(r.json()["path"], copy.to_str().unwrap());
    assert_eq!(r.json()["bytes"].as_u64(), Some(m.len()));
    assert_eq!(r.json()["version"], version_line());
    assert_eq!(r.json()["replaced"], false);

    let v = run(&copy, &[OsStr::new("--version")], &[], None);
    assert_eq!(v.code, 0, "{v:?}");
    assert_eq!(v.stdout.trim(), version_line());
}

#[test]
fn a_second_install_is_idempotent() {
    let dest = tempdir();
    assert_eq!(install(dest.path(), None).code, 0);
    let r = install(dest.path(), None);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(r.json()["replaced"], true);
    assert_eq!(names(dest.path()), vec!["etcd-member-agent"]);
    let copy = dest.path().join("etcd-member-agent");
    assert_eq!(std::fs::read(&copy).unwrap(), std::fs::read(BIN).unwrap());
    assert_eq!(std::fs::metadata(&copy).unwrap().mode() & 0o7777, 0o755);
}

#[test]
fn install_replaces_a_stale_or_broken_target() {
    let dest = tempdir();
    let copy = dest.path().join("etcd-member-agent");
    std::fs::write(&copy, b"#!/bin/false\nnot the agent\n").unwrap();
    std::fs::set_permissions(&copy, std::fs::Permissions::from_mode(0o444)).unwrap();
    // A leftover temp file of a crashed run is not in the way either.
    std::fs::write(dest.path().join(".etcd-member-agent.1.tmp"), b"junk").unwrap();
    let r = install(dest.path(), None);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(std::fs::read(&copy).unwrap(), std::fs::read(BIN).unwrap());
    assert_eq!(std::fs::metadata(&copy).unwrap().mode() & 0o7777, 0o755);
}

#[test]
fn the_destination_reads_tools_dest_dir() {
    let dest = tempdir();
    let r = run(
        Path::new(BIN),
        &[OsStr::new("install")],
        &[("TOOLS_DEST_DIR", dest.path().to_str().unwrap())],
        None,
    );
    assert_eq!(r.code, 0, "{r:?}");
    assert!(dest.path().join("etcd-member-agent").is_file());
}

#[test]
fn a_missing_destination_exits_2_with_a_clear_message() {
    let parent = tempdir();
    let dest = parent.path().join("not-mounted");
    let r = install(&dest, None);
    assert_eq!(r.code, 2, "{r:?}");
    assert!(
        r.json()["reason"]
            .as_str()
            .unwrap()
            .contains("does not exist"),
        "{r:?}"
    );
    assert!(r.stderr.contains("does not exist"), "{}", r.stderr);
    assert!(!dest.exists(), "install must not create the destination");
}

#[test]
fn no_destination_at_all_exits_2() {
    let r = run(
        Path::new(BIN),
        &[OsStr::new("install"), OsStr::new("-o"), OsStr::new("json")],
        &[],
        None,
    );
    assert_eq!(r.code, 2, "{r:?}");
    assert_eq!(r.json()["exit_code"], 2);
    assert!(r.json()["reason"]
        .as_str()
        .unwrap()
        .contains("TOOLS_DEST_DIR"));
}

#[test]
fn a_destination_that_is_a_file_exits_2() {
    let parent = tempdir();
    let file = parent.path().join("file");
    std::fs::write(&file, b"").unwrap();
    let r = install(&file, None);
    assert_eq!(r.code, 2, "{r:?}");
    assert!(r.json()["reason"]
        .as_str()
        .unwrap()
        .contains("not a directory"));
}

#[test]
fn a_destination_not_writable_by_uid_65532_exits_2() {
    if !pod_uid_can_run_the_agent() {
        return;
    }
    let dest = tempdir(); // root's, 0755
    let r = install(dest.path(), Some(NONROOT));
    assert_eq!(r.code, 2, "{r:?}");
    assert!(
        r.json()["reason"]
            .as_str()
            .unwrap()
            .contains("not writable"),
        "{r:?}"
    );
    assert!(names(dest.path()).is_empty());
}

#[test]
fn uid_65532_installs_into_its_own_volume() {
    if !pod_uid_can_run_the_agent() {
        return;
    }
    let dest = tempdir();
    std::os::unix::fs::chown(dest.path(), Some(NONROOT), Some(NONROOT)).unwrap();
    let r = install(dest.path(), Some(NONROOT));
    assert_eq!(r.code, 0, "{r:?}");
    let m = std::fs::metadata(dest.path().join("etcd-member-agent")).unwrap();
    assert_eq!((m.uid(), m.mode() & 0o7777), (NONROOT, 0o755));
}

/// The static release binary in an empty chroot: no libc, no loader, no `/proc`,
/// no shell, uid 65532 — the distroless etcd image at its barest.
#[test]
fn the_static_binary_runs_installs_and_verifies_in_an_empty_chroot_as_65532() {
    let Some(bin) = std::env::var_os("AGENT_STATIC_BIN").filter(|b| !b.is_empty()) else {
        skip(
            "set AGENT_STATIC_BIN to the static release binary \
             (AGENT_STATIC_BIN=$(scripts/build-static)) to run the empty-chroot test",
        );
        return;
    };
    let bin = PathBuf::from(bin);
    let root = tempdir();
    let inside = root.path().join("etcd-member-agent");
    std::fs::copy(&bin, &inside).unwrap();
    std::fs::set_permissions(&inside, std::fs::Permissions::from_mode(0o755)).unwrap();
    let tools = root.path().join("tools");
    std::fs::create_dir(&tools).unwrap();
    std::os::unix::fs::chown(&tools, Some(NONROOT), Some(NONROOT)).unwrap();
    std::fs::create_dir(root.path().join("data")).unwrap();

    // The environment is cleared, so find coreutils' chroot here rather than in PATH.
    let chroot = [
        "/usr/sbin/chroot",
        "/usr/bin/chroot",
        "/sbin/chroot",
        "/bin/chroot",
    ]
    .iter()
    .map(PathBuf::from)
    .find(|p| p.is_file())
    .unwrap_or_else(|| panic!("coreutils chroot not found"));
    let in_chroot = |args: &[&str]| {
        let userspec = format!("--userspec={NONROOT}:{NONROOT}");
        let mut all: Vec<&OsStr> = vec![
            OsStr::new(&userspec),
            root.path().as_os_str(),
            OsStr::new("/etcd-member-agent"),
        ];
        all.extend(args.iter().map(OsStr::new));
        run(&chroot, &all, &[], None)
    };

    let v = in_chroot(&["--version"]);
    assert_eq!(v.code, 0, "{v:?}");
    assert_eq!(v.stdout.trim(), version_line());

    let i = in_chroot(&["install", "--dest", "/tools", "-o", "json"]);
    assert_eq!(i.code, 0, "{i:?}");
    assert_eq!(i.json()["path"], "/tools/etcd-member-agent");
    assert_eq!(i.json()["version"], version_line());
    assert_eq!(
        std::fs::read(tools.join("etcd-member-agent")).unwrap(),
        std::fs::read(&bin).unwrap()
    );

    let w = in_chroot(&["verify-wipe", "--data-dir", "/data", "-o", "json"]);
    assert_eq!(w.code, 0, "{w:?}");
    assert_eq!(w.json()["empty"], true);
}

/// A tmpfs mounted for one test with `options`, unmounted when dropped whatever
/// happens (lazily if the first attempt fails).
struct Tmpfs(tempfile::TempDir);

impl Tmpfs {
    fn mount(options: &str) -> Tmpfs {
        let dir = tempdir();
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", options, "tmpfs"])
            .arg(dir.path())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "mount -o {options} failed (the tests run as root): {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Tmpfs(dir)
    }

    fn path(&self) -> &Path {
        self.0.path()
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let ok = Command::new("umount")
            .arg(self.0.path())
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            let _ = Command::new("umount").arg("-l").arg(self.0.path()).status();
        }
    }
}

#[test]
fn a_noexec_destination_exits_2_and_leaves_no_copy() {
    let fs = Tmpfs::mount("size=512m,noexec,mode=0755");
    let r = install(fs.path(), None);
    assert_eq!(r.code, 2, "{r:?}");
    assert!(
        r.json()["reason"].as_str().unwrap().contains("noexec"),
        "{r:?}"
    );
    assert!(names(fs.path()).is_empty(), "{:?}", names(fs.path()));
}

#[test]
fn a_full_destination_exits_3_and_leaves_no_copy() {
    let fs = Tmpfs::mount("size=1m,mode=0755");
    let r = install(fs.path(), None);
    assert_eq!(r.code, 3, "{r:?}");
    assert!(
        r.json()["reason"].as_str().unwrap().contains("full"),
        "{r:?}"
    );
    assert!(names(fs.path()).is_empty(), "{:?}", names(fs.path()));
}

#[test]
fn a_directory_in_place_of_the_binary_exits_2_and_is_left_alone() {
    let dest = tempdir();
    std::fs::create_dir(dest.path().join("etcd-member-agent")).unwrap();
    std::fs::write(dest.path().join("etcd-member-agent/keep"), b"x").unwrap();
    let r = install(dest.path(), None);
    assert_eq!(r.code, 2, "{r:?}");
    assert!(
        r.json()["reason"]
            .as_str()
            .unwrap()
            .contains("is a directory"),
        "{r:?}"
    );
    assert_eq!(names(dest.path()), ["etcd-member-agent"]);
    assert!(dest.path().join("etcd-member-agent/keep").exists());
}
