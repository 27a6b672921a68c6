//! `wipe` and `verify-wipe` as black boxes: the binary run with a cleared
//! environment, its exit code and its `-o json` document checked, the tree on disk
//! compared before and after. Permission cases run the binary as uid/gid 65532
//! (the tests run as root, which no mode bit stops; under `CI=true` they must
//! run). The refusal cases run real etcd 3.5.1, 3.6 and 3.7 members of the
//! shared harness and prove they still serve after the refusal.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::os::unix::fs::{symlink, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common::{
    pod_uid_can_run_the_agent, run_agent, run_agent_as, AgentRun, Cluster, EtcdVersion, POD_UID,
};

/// The unprivileged user etcd and the agent run as in the Pod.
const NONROOT: u32 = POD_UID;

/// Runs the agent with `args` and `env`, optionally as `uid`; stdout, when
/// there is any, must be one JSON document.
fn agent(args: &[&OsStr], env: &[(&str, &str)], uid: Option<u32>) -> AgentRun {
    let run = match uid {
        Some(uid) => run_agent_as(uid, uid, args, env),
        None => run_agent(args, env),
    };
    if !run.stdout.trim().is_empty() {
        run.json();
    }
    run
}

/// `<command> --data-dir <dir> -o json [extra...]` as root.
fn json_run(command: &str, dir: &Path, extra: &[&str]) -> AgentRun {
    json_run_as(command, dir, extra, None)
}

fn json_run_as(command: &str, dir: &Path, extra: &[&str], uid: Option<u32>) -> AgentRun {
    let mut args: Vec<&OsStr> = vec![
        OsStr::new(command),
        OsStr::new("--data-dir"),
        dir.as_os_str(),
        OsStr::new("-o"),
        OsStr::new("json"),
    ];
    args.extend(extra.iter().map(OsStr::new));
    let run = agent(&args, &[], uid);
    assert_eq!(
        run.json()["exit_code"].as_i64(),
        Some(i64::from(run.code)),
        "exit_code in the document must be the exit status: {run:?}"
    );
    run
}

/// The `remaining` (or `allowed`) list as `(path, type)` pairs.
fn listed(run: &AgentRun, key: &str) -> Vec<(String, String)> {
    run.json()[key]
        .as_array()
        .unwrap_or_else(|| panic!("no {key} list: {run:?}"))
        .iter()
        .map(|e| {
            (
                e["path"].as_str().unwrap_or_default().to_string(),
                e["type"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

fn pairs(items: &[(&str, &str)]) -> Vec<(String, String)> {
    items
        .iter()
        .map(|(p, t)| (p.to_string(), t.to_string()))
        .collect()
}

/// A temporary directory others can traverse (tempfile makes them 0700), so a
/// test can run the binary as 65532 against paths inside it.
fn tempdir() -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    d
}

fn chown(path: &Path, uid: u32) {
    std::os::unix::fs::lchown(path, Some(uid), Some(uid)).unwrap();
}

fn chmod(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// Everything about a tree that a read-only command must not change: paths,
/// types, modes, owners, sizes, mtimes, file contents and symlink targets.
fn digest(root: &Path) -> BTreeMap<PathBuf, String> {
    let mut out = BTreeMap::new();
    for entry in walkdir::WalkDir::new(root).follow_links(false) {
        let entry = entry.unwrap();
        let m = entry.path().symlink_metadata().unwrap();
        let content = if m.is_file() {
            format!("{:?}", std::fs::read(entry.path()).unwrap())
        } else if m.file_type().is_symlink() {
            format!("-> {:?}", std::fs::read_link(entry.path()).unwrap())
        } else {
            String::new()
        };
        out.insert(
            entry.path().strip_prefix(root).unwrap().to_path_buf(),
            format!(
                "{:o} {}:{} {} {}.{} {content}",
                m.mode(),
                m.uid(),
                m.gid(),
                m.len(),
                m.mtime(),
                m.mtime_nsec()
            ),
        );
    }
    out
}

fn write(path: &Path, content: &str) {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).unwrap();
    }
    std::fs::write(path, content).unwrap();
}

// ---------------------------------------------------------------- verify-wipe

#[test]
fn an_empty_dir_is_verified_empty_with_exit_0() {
    let d = tempdir();
    let run = json_run("verify-wipe", d.path(), &[]);
    assert_eq!(run.code, 0, "{run:?}");
    assert_eq!(run.json()["empty"], true);
    assert_eq!(run.json()["exists"], true);
    assert_eq!(run.json()["remaining"], serde_json::json!([]));
    assert_eq!(run.json()["allowed"], serde_json::json!([]));
    assert_eq!(run.json()["data_dir"], d.path().to_str().unwrap());
}

#[test]
fn a_hidden_file_is_listed_and_exits_20() {
    let d = tempdir();
    write(&d.path().join(".hidden"), "abc");
    let run = json_run("verify-wipe", d.path(), &[]);
    assert_eq!(run.code, 20, "{run:?}");
    assert_eq!(run.json()["empty"], false);
    assert_eq!(listed(&run, "remaining"), pairs(&[(".hidden", "file")]));
    assert_eq!(run.json()["remaining"][0]["size"], 3);
}

#[test]
fn nested_directories_are_listed_recursively_with_types_and_sizes() {
    let d = tempdir();
    write(&d.path().join("member/snap/db"), "12345");
    write(
        &d.path()
            .join("member/wal/0000000000000000-0000000000000000.wal"),
        "",
    );
    std::fs::create_dir(d.path().join("empty-dir")).unwrap();
    nix::unistd::mkfifo(&d.path().join("fifo"), nix::sys::stat::Mode::S_IRWXU).unwrap();
    let run = json_run("verify-wipe", d.path(), &[]);
    assert_eq!(run.code, 20, "{run:?}");
    assert_eq!(
        listed(&run, "remaining"),
        pairs(&[
            ("empty-dir", "dir"),
            ("fifo", "other"),
            ("member", "dir"),
            ("member/snap", "dir"),
            ("member/snap/db", "file"),
            ("member/wal", "dir"),
            ("member/wal/0000000000000000-0000000000000000.wal", "file"),
        ])
    );
    assert_eq!(run.json()["remaining"][4]["size"], 5);
    // The human summary goes to stderr and names the entries.
    assert!(run.stderr.contains("member/snap/db"), "{}", run.stderr);
}

#[test]
fn a_symlink_is_listed_as_a_symlink_and_its_target_is_not_followed() {
    let d = tempdir();
    let outside = tempdir();
    write(&outside.path().join("secret-a"), "a");
    write(&outside.path().join("sub/secret-b"), "b");
    symlink(outside.path(), d.path().join("link-to-dir")).unwrap();
    symlink("/nonexistent/target", d.path().join("dangling")).unwrap();
    let run = json_run("verify-wipe", d.path(), &[]);
    assert_eq!(run.code, 20, "{run:?}");
    assert_eq!(
        listed(&run, "remaining"),
        pairs(&[("dangling", "symlink"), ("link-to-dir", "symlink")])
    );
    assert_eq!(
        run.json()["remaining"][1]["target"],
        outside.path().to_str().unwrap()
    );
    assert!(!run.stdout.contains("secret"), "{}", run.stdout);
}

#[test]
fn lost_found_counts_as_remaining_without_the_flag() {
    let d = tempdir();
    write(&d.path().join("lost+found/#1234"), "recovered");
    let run = json_run("verify-wipe", d.path(), &[]);
    assert_eq!(run.code, 20, "{run:?}");
    assert_eq!(
        listed(&run, "remaining"),
        pairs(&[("lost+found", "dir"), ("lost+found/#1234", "file")])
    );
    assert_eq!(run.json()["allowed"], serde_json::json!([]));
}

#[test]
fn lost_found_and_its_contents_are_listed_but_allowed_with_the_flag() {
    let d = tempdir();
    write(&d.path().join("lost+found/#1234"), "recovered");
    let run = json_run("verify-wipe", d.path(), &["--allow-lost-found"]);
    assert_eq!(run.code, 0, "{run:?}");
    assert_eq!(run.json()["empty"], true);
    assert_eq!(run.json()["remaining"], serde_json::json!([]));
    assert_eq!(
        listed(&run, "allowed"),
        pairs(&[("lost+found", "dir"), ("lost+found/#1234", "file")])
    );
    // Only lost+found is tolerated: anything beside it still counts.
    write(&d.path().join("x"), "");
    let run = json_run("verify-wipe", d.path(), &["--allow-lost-found"]);
    assert_eq!(run.code, 20, "{run:?}");
    assert_eq!(listed(&run, "remaining"), pairs(&[("x", "file")]));
}

#[test]
fn the_lost_found_policy_reads_its_environment_variable() {
    let d = tempdir();
    std::fs::create_dir(d.path().join("lost+found")).unwrap();
    let args = [
        OsStr::new("verify-wipe"),
        OsStr::new("--data-dir"),
        d.path().as_os_str(),
    ];
    assert_eq!(
        agent(&args, &[("AGENT_ALLOW_LOST_FOUND", "true")], None).code,
        0
    );
    assert_eq!(agent(&args, &[], None).code, 20);
}

#[test]
fn a_lost_found_file_or_a_nested_one_is_not_tolerated() {
    let d = tempdir();
    write(&d.path().join("lost+found"), "not a directory");
    write(&d.path().join("member/lost+found/x"), "");
    let run = json_run("verify-wipe", d.path(), &["--allow-lost-found"]);
    assert_eq!(run.code, 20, "{run:?}");
    assert_eq!(run.json()["allowed"], serde_json::json!([]));
    assert_eq!(listed(&run, "remaining").len(), 4);
}

#[test]
fn a_data_dir_unreadable_to_the_running_uid_exits_3_never_empty() {
    if !pod_uid_can_run_the_agent() {
        return;
    }
    let parent = tempdir();
    let d = parent.path().join("data");
    std::fs::create_dir(&d).unwrap();
    chmod(&d, 0o700); // owned by root
    let run = json_run_as("verify-wipe", &d, &[], Some(NONROOT));
    assert_eq!(run.code, 3, "{run:?}");
    assert_eq!(run.json()["empty"], false);
    assert_eq!(run.json()["unreadable"][0]["path"], ".");
}

#[test]
fn a_subdirectory_unreadable_to_the_running_uid_exits_3() {
    if !pod_uid_can_run_the_agent() {
        return;
    }
    let d = tempdir();
    write(&d.path().join("member/wal/0.wal"), "");
    chmod(&d.path().join("member"), 0o700); // owned by root
    let run = json_run_as("verify-wipe", d.path(), &[], Some(NONROOT));
    assert_eq!(run.code, 3, "{run:?}");
    assert_eq!(run.json()["empty"], false);
    assert_eq!(listed(&run, "remaining"), pairs(&[("member", "dir")]));
    assert_eq!(run.json()["unreadable"][0]["path"], "member");
    assert_eq!(run.json()["unreadable"][0]["tolerated"], false);
}

#[test]
fn an_unreadable_lost_found_is_tolerated_with_the_flag() {
    if !pod_uid_can_run_the_agent() {
        return;
    }
    // A fresh ext4 volume: lost+found is root's, mode 0700, and etcd runs as 65532.
    let d = tempdir();
    std::fs::create_dir(d.path().join("lost+found")).unwrap();
    chmod(&d.path().join("lost+found"), 0o700);
    let run = json_run_as(
        "verify-wipe",
        d.path(),
        &["--allow-lost-found"],
        Some(NONROOT),
    );
    assert_eq!(run.code, 0, "{run:?}");
    assert_eq!(run.json()["unreadable"][0]["tolerated"], true);
    let run = json_run_as("verify-wipe", d.path(), &[], Some(NONROOT));
    assert_eq!(run.code, 3, "{run:?}");
}

#[test]
fn a_missing_data_dir_is_empty_and_says_it_does_not_exist() {
    let parent = tempdir();
    let d = parent.path().join("never-created");
    let run = json_run("verify-wipe", &d, &[]);
    assert_eq!(run.code, 0, "{run:?}");
    assert_eq!(run.json()["exists"], false);
    assert_eq!(run.json()["empty"], true);
    assert!(!d.exists(), "verify-wipe must not create the data dir");
}

#[test]
fn a_data_dir_that_is_a_file_is_unreadable_not_empty() {
    let parent = tempdir();
    let f = parent.path().join("file");
    write(&f, "x");
    let run = json_run("verify-wipe", &f, &[]);
    assert_eq!(run.code, 3, "{run:?}");
    assert_eq!(run.json()["empty"], false);
}

#[test]
fn verify_wipe_leaves_the_tree_unchanged() {
    let d = tempdir();
    let outside = tempdir();
    write(&outside.path().join("target"), "t");
    write(&d.path().join(".hidden"), "h");
    write(&d.path().join("member/snap/db"), "db");
    write(&d.path().join("lost+found/x"), "x");
    symlink(outside.path().join("target"), d.path().join("member/link")).unwrap();
    let before = (digest(d.path()), digest(outside.path()));
    for extra in [&[][..], &["--allow-lost-found"][..]] {
        let run = json_run("verify-wipe", d.path(), extra);
        assert_eq!(run.code, 20, "{run:?}");
    }
    assert_eq!((digest(d.path()), digest(outside.path())), before);
}

#[test]
fn a_separate_wal_dir_is_checked_too() {
    let d = tempdir();
    let wal = tempdir();
    write(&wal.path().join("0.wal"), "w");
    let wal_arg = wal.path().to_str().unwrap();
    let run = json_run("verify-wipe", d.path(), &["--wal-dir", wal_arg]);
    assert_eq!(run.code, 20, "{run:?}");
    assert_eq!(run.json()["empty"], false);
    assert_eq!(run.json()["remaining"], serde_json::json!([]));
    assert_eq!(run.json()["wal_dir"]["path"], wal_arg);
    assert_eq!(run.json()["wal_dir"]["remaining"][0]["path"], "0.wal");
}

#[test]
fn text_output_prints_nothing_on_stdout() {
    let d = tempdir();
    write(&d.path().join("f"), "");
    let run = agent(
        &[
            OsStr::new("verify-wipe"),
            OsStr::new("--data-dir"),
            d.path().as_os_str(),
        ],
        &[],
        None,
    );
    assert_eq!(run.code, 20);
    assert!(run.stdout.is_empty(), "{}", run.stdout);
    assert!(run.stderr.contains("1 entries remain"), "{}", run.stderr);
}

// ---------------------------------------------------------------- wipe

#[test]
fn wipe_removes_files_hidden_files_and_nested_dirs_then_verifies_empty() {
    let d = tempdir();
    write(&d.path().join(".hidden"), "h");
    write(&d.path().join("member/snap/db"), "db");
    write(&d.path().join("member/wal/0.wal"), "w");
    write(&d.path().join("a/b/c/d/e"), "deep");
    let run = json_run("wipe", d.path(), &[]);
    assert_eq!(run.code, 0, "{run:?}");
    assert_eq!(run.json()["empty"], true);
    assert_eq!(run.json()["removed"], 11);
    assert_eq!(run.json()["errors"], serde_json::json!([]));
    assert!(d.path().is_dir(), "the data dir itself is kept");
    assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 0);
}

#[test]
fn wipe_unlinks_symlinks_and_their_targets_survive() {
    let d = tempdir();
    let outside = tempdir();
    write(&outside.path().join("target-file"), "precious");
    write(&outside.path().join("dir/inner"), "also precious");
    symlink(
        outside.path().join("target-file"),
        d.path().join("link-file"),
    )
    .unwrap();
    symlink(outside.path().join("dir"), d.path().join("link-dir")).unwrap();
    std::fs::create_dir(d.path().join("sub")).unwrap();
    symlink(outside.path().join("dir"), d.path().join("sub/nested-link")).unwrap();
    let before = digest(outside.path());
    let run = json_run("wipe", d.path(), &[]);
    assert_eq!(run.code, 0, "{run:?}");
    assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 0);
    assert_eq!(digest(outside.path()), before);
    assert_eq!(
        std::fs::read_to_string(outside.path().join("target-file")).unwrap(),
        "precious"
    );
}

#[test]
fn wipe_keeps_lost_found_with_the_flag() {
    let d = tempdir();
    write(&d.path().join("lost+found/#12"), "fsck found this");
    write(&d.path().join("member/snap/db"), "db");
    let run = json_run("wipe", d.path(), &["--allow-lost-found"]);
    assert_eq!(run.code, 0, "{run:?}");
    assert_eq!(
        std::fs::read_to_string(d.path().join("lost+found/#12")).unwrap(),
        "fsck found this"
    );
    assert!(!d.path().join("member").exists());
    assert_eq!(
        listed(&run, "allowed"),
        pairs(&[("lost+found", "dir"), ("lost+found/#12", "file")])
    );
}

#[test]
fn wipe_removes_lost_found_without_the_flag() {
    let d = tempdir();
    write(&d.path().join("lost+found/#12"), "x");
    let run = json_run("wipe", d.path(), &[]);
    assert_eq!(run.code, 0, "{run:?}");
    assert!(!d.path().join("lost+found").exists());
}

#[test]
fn wipe_keeps_the_directory_with_its_mode_and_owner() {
    let parent = tempdir();
    let d = parent.path().join("data");
    std::fs::create_dir(&d).unwrap();
    write(&d.join("member/snap/db"), "db");
    chmod(&d, 0o700);
    chown(&d, NONROOT);
    let run = json_run("wipe", &d, &[]);
    assert_eq!(run.code, 0, "{run:?}");
    let m = std::fs::metadata(&d).unwrap();
    assert_eq!(m.mode() & 0o7777, 0o700);
    assert_eq!((m.uid(), m.gid()), (NONROOT, NONROOT));
}

#[test]
fn wipe_empties_a_separate_wal_dir_and_keeps_it() {
    let d = tempdir();
    let wal = tempdir();
    write(&d.path().join("member/snap/db"), "db");
    write(
        &wal.path().join("0000000000000000-0000000000000000.wal"),
        "w",
    );
    let run = json_run(
        "wipe",
        d.path(),
        &["--wal-dir", wal.path().to_str().unwrap()],
    );
    assert_eq!(run.code, 0, "{run:?}");
    assert!(wal.path().is_dir());
    assert_eq!(std::fs::read_dir(wal.path()).unwrap().count(), 0);
    assert_eq!(run.json()["wal_dir"]["empty"], true);
}

#[test]
fn wipe_refuses_a_wal_dir_that_contains_the_data_dir_with_2() {
    let parent = tempdir();
    let d = parent.path().join("data");
    write(&d.join("f"), "");
    let run = json_run("wipe", &d, &["--wal-dir", parent.path().to_str().unwrap()]);
    assert_eq!(run.code, 2, "{run:?}");
    assert!(d.join("f").exists());
}

#[test]
fn wipe_of_a_missing_data_dir_exits_0_and_creates_nothing() {
    let parent = tempdir();
    let d = parent.path().join("absent");
    let run = json_run("wipe", &d, &[]);
    assert_eq!(run.code, 0, "{run:?}");
    assert_eq!(run.json()["exists"], false);
    assert!(!d.exists());
}

#[test]
fn wipe_of_a_subdirectory_unreadable_to_the_running_uid_exits_3() {
    if !pod_uid_can_run_the_agent() {
        return;
    }
    let d = tempdir();
    chown(d.path(), NONROOT);
    write(&d.path().join("mine"), "");
    chown(&d.path().join("mine"), NONROOT);
    write(&d.path().join("locked/inner"), "x");
    chmod(&d.path().join("locked"), 0o700); // owned by root
    let run = json_run_as("wipe", d.path(), &[], Some(NONROOT));
    assert_eq!(run.code, 3, "{run:?}");
    assert!(
        !d.path().join("mine").exists(),
        "what it could remove is gone"
    );
    assert!(d.path().join("locked/inner").exists());
    assert_eq!(listed(&run, "remaining"), pairs(&[("locked", "dir")]));
    assert_eq!(run.json()["errors"][0]["path"], "locked");
}

#[test]
fn wipe_reports_what_it_could_not_remove_with_20() {
    if !pod_uid_can_run_the_agent() {
        return;
    }
    let d = tempdir();
    chown(d.path(), NONROOT);
    // Readable by 65532, but the entry inside belongs to root's directory.
    write(&d.path().join("roots/file"), "x");
    let run = json_run_as("wipe", d.path(), &[], Some(NONROOT));
    assert_eq!(run.code, 20, "{run:?}");
    assert_eq!(
        listed(&run, "remaining"),
        pairs(&[("roots", "dir"), ("roots/file", "file")])
    );
    assert_eq!(run.json()["errors"][0]["path"], "roots/file");
    assert!(run.json()["errors"][0]["error"]
        .as_str()
        .unwrap()
        .contains("ermission denied"));
}

// ---------------------------------------------------------------- mount points

/// A mount made for one test, unmounted when dropped whatever happens (a lazy
/// unmount if the first attempt fails, so a failed test never leaves it behind).
struct Mounted(PathBuf);

impl Mounted {
    /// `mount --bind source target`.
    fn bind(source: &Path, target: &Path) -> Mounted {
        Self::run(
            &["--bind", source.to_str().unwrap(), target.to_str().unwrap()],
            target,
        )
    }

    /// A small tmpfs (another device) at `target`.
    fn tmpfs(target: &Path) -> Mounted {
        Self::run(
            &[
                "-t",
                "tmpfs",
                "-o",
                "size=1m",
                "tmpfs",
                target.to_str().unwrap(),
            ],
            target,
        )
    }

    fn run(args: &[&str], target: &Path) -> Mounted {
        let out = Command::new("mount").args(args).output().unwrap();
        assert!(
            out.status.success(),
            "mount {args:?} failed (the tests run as root): {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Mounted(target.to_path_buf())
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        let ok = Command::new("umount")
            .arg(&self.0)
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            let _ = Command::new("umount").arg("-l").arg(&self.0).status();
        }
    }
}

#[test]
fn wipe_leaves_a_bind_mount_of_the_same_filesystem_and_its_contents_alone_with_20() {
    let d = tempdir();
    // Outside the data dir but on the same filesystem: the bind mount keeps st_dev.
    let outside = tempdir();
    write(&outside.path().join("precious"), "not the data dir's");
    write(&d.path().join("member/snap/db"), "db");
    write(&d.path().join("member/wal/0.wal"), "w");
    let mnt = d.path().join("member/mnt");
    std::fs::create_dir_all(&mnt).unwrap();
    let before = digest(outside.path());
    let run = {
        let _m = Mounted::bind(outside.path(), &mnt);
        json_run("wipe", d.path(), &[])
    };
    assert_eq!(run.code, 20, "{run:?}");
    assert_eq!(
        listed(&run, "remaining"),
        pairs(&[("member", "dir"), ("member/mnt", "mount_point")])
    );
    assert_eq!(
        digest(outside.path()),
        before,
        "wipe reached through the mount"
    );
    assert!(!d.path().join("member/snap").exists());
    assert!(!d.path().join("member/wal").exists());
}

#[test]
fn wipe_leaves_another_filesystem_mounted_inside_alone_with_20() {
    let d = tempdir();
    write(&d.path().join("f"), "x");
    let mnt = d.path().join("scratch");
    std::fs::create_dir(&mnt).unwrap();
    let _m = Mounted::tmpfs(&mnt);
    write(&mnt.join("inside/kept"), "on the tmpfs");
    let run = json_run("wipe", d.path(), &[]);
    assert_eq!(run.code, 20, "{run:?}");
    assert_eq!(
        listed(&run, "remaining"),
        pairs(&[("scratch", "mount_point")])
    );
    assert_eq!(
        std::fs::read_to_string(mnt.join("inside/kept")).unwrap(),
        "on the tmpfs"
    );
    assert!(!d.path().join("f").exists());
}

#[test]
fn verify_wipe_lists_a_mount_point_without_entering_it() {
    let d = tempdir();
    let outside = tempdir();
    write(&outside.path().join("a/b"), "x");
    let mnt = d.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let _m = Mounted::bind(outside.path(), &mnt);
    let run = json_run("verify-wipe", d.path(), &[]);
    assert_eq!(run.code, 20, "{run:?}");
    assert_eq!(listed(&run, "remaining"), pairs(&[("mnt", "mount_point")]));
}

#[test]
fn wipe_of_a_data_dir_that_is_a_symlink_to_a_volume_empties_the_volume() {
    let volume = tempdir();
    let parent = tempdir();
    write(&volume.path().join("member/snap/db"), "db");
    let link = parent.path().join("data");
    symlink(volume.path(), &link).unwrap();
    let run = json_run("wipe", &link, &[]);
    assert_eq!(run.code, 0, "{run:?}");
    assert_eq!(std::fs::read_dir(volume.path()).unwrap().count(), 0);
    assert!(link.is_symlink());
}

#[test]
fn wipe_refuses_a_wal_dir_holding_more_than_wal_segments_with_20_and_removes_nothing() {
    let d = tempdir();
    let wal = tempdir();
    write(&d.path().join("member/snap/db"), "db");
    write(
        &wal.path().join("0000000000000000-0000000000000000.wal"),
        "w",
    );
    write(&wal.path().join("0.tmp"), "t");
    write(&wal.path().join("notes.txt"), "someone's files");
    write(&wal.path().join("photos/cat.jpg"), "meow");
    let data_before = digest(d.path());
    let wal_before = digest(wal.path());
    let run = json_run(
        "wipe",
        d.path(),
        &["--wal-dir", wal.path().to_str().unwrap()],
    );
    assert_eq!(run.code, 20, "{run:?}");
    assert_eq!(run.json()["removed"], 0);
    let reason = run.json()["reason"].as_str().unwrap();
    assert!(
        reason.contains("notes.txt") && reason.contains("photos"),
        "{reason}"
    );
    assert_eq!(digest(wal.path()), wal_before);
    assert_eq!(digest(d.path()), data_before);
}

#[test]
fn wipe_empties_a_wal_dir_of_segments_tmp_and_broken_files() {
    let d = tempdir();
    let wal = tempdir();
    for name in [
        "0000000000000000-0000000000000000.wal",
        "0.tmp",
        "0000000000000001-0000000000000010.wal.broken",
    ] {
        write(&wal.path().join(name), "w");
    }
    let run = json_run(
        "wipe",
        d.path(),
        &["--wal-dir", wal.path().to_str().unwrap()],
    );
    assert_eq!(run.code, 0, "{run:?}");
    assert_eq!(std::fs::read_dir(wal.path()).unwrap().count(), 0);
}

// ---------------------------------------------------------------- live etcd

// The lock refusal on every line, with the shared harness's etcd.

/// Every path under `root`, without reading contents (a live WAL is 64 MB).
fn paths_under(root: &Path) -> Vec<PathBuf> {
    walkdir::WalkDir::new(root)
        .follow_links(false)
        .into_iter()
        .map(|e| e.unwrap().path().to_path_buf())
        .collect()
}

fn wipe_refuses_with_15_while_etcd_runs(version: EtcdVersion) {
    let cluster = Cluster::builder(version)
        .token(format!("wipe-live-{}", version.label()))
        .start();
    let m0 = &cluster[0];
    m0.put("wipe-test-key", "v1");
    let dir = m0.data_dir().to_path_buf();
    let before = paths_under(&dir);
    assert!(
        before.iter().any(|p| p.ends_with("member/snap/db")),
        "{before:?}"
    );
    let run = json_run("wipe", &dir, &[]);
    assert_eq!(run.code, 15, "{version}: {run:?}");
    assert_eq!(run.json()["removed"], 0, "{run:?}");
    assert_eq!(run.json()["empty"], false, "{run:?}");
    assert!(
        !run.json()["locks"].as_array().unwrap().is_empty(),
        "{run:?}"
    );
    let after = paths_under(&dir);
    for p in &before {
        assert!(after.contains(p), "{version}: {} vanished", p.display());
    }
    assert_eq!(m0.get("wipe-test-key").as_deref(), Some("v1"));
    assert!(m0.is_running(), "{version}: etcd must still run");
    m0.stop();
    let run = json_run("wipe", &dir, &[]);
    assert_eq!(run.code, 0, "{version}: {run:?}");
}

#[test]
fn wipe_refuses_with_15_while_a_live_etcd_holds_the_locks_and_removes_nothing() {
    wipe_refuses_with_15_while_etcd_runs(EtcdVersion::V3_5);
}

#[test]
fn wipe_refuses_with_15_while_a_live_etcd_3_6_holds_the_locks_and_removes_nothing() {
    wipe_refuses_with_15_while_etcd_runs(EtcdVersion::V3_6);
}

#[test]
fn wipe_refuses_with_15_while_a_live_etcd_3_7_holds_the_locks_and_removes_nothing() {
    wipe_refuses_with_15_while_etcd_runs(EtcdVersion::V3_7);
}
