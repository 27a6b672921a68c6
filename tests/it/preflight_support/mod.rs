//! What the `preflight` tests share: one way to run `preflight -o json` that
//! checks, on every run, that the three outputs agree — the document on stdout
//! (its contract keys, `exit_code` = the exit status), the verdict file
//! (`AGENT_VERDICT_FILE`, the same document) and the termination message
//! (`TERMINATION_LOG`, at most 4 KiB, the same verdict) — and that the tree
//! around the data dir is exactly as it was: preflight is read-only and creates
//! nothing, not even a missing data dir.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::Value;

use std::process::Command;

use crate::common::{
    assert_eventually, ensure, run_agent, tree_diff, tree_snapshot, with, AgentRun, Cluster, Member,
};

/// Kubernetes keeps at most this much of a termination message.
pub const TERMINATION_MESSAGE_MAX: usize = 4096;

/// An environment, in the order it is applied.
pub type Env = Vec<(String, String)>;

/// One preflight run, its outputs already checked for consistency.
pub struct Preflight {
    /// The run: exit code, stdout, stderr, the parsed document.
    pub run: AgentRun,
    /// Wall time of the binary, spawn to exit.
    pub elapsed: Duration,
}

impl Preflight {
    /// The `-o json` document.
    pub fn doc(&self) -> &Value {
        self.run.json()
    }

    /// Asserts the exit code and the verdict name, showing the run otherwise.
    #[track_caller]
    pub fn expect(&self, step: &str, code: i32, verdict: &str) -> &Self {
        assert_eq!(
            (self.run.code, self.doc()["verdict"].as_str()),
            (code, Some(verdict)),
            "{step}: unexpected verdict\n{}",
            self.run
        );
        self
    }

    /// The evidence entry of `source` (`data-dir`, `etcd`, `kube`, `env`).
    #[track_caller]
    pub fn evidence(&self, source: &str) -> &Value {
        self.doc()["evidence"]
            .as_array()
            .and_then(|list| list.iter().find(|e| e["source"] == source))
            .unwrap_or_else(|| panic!("no {source} evidence entry\n{}", self.run))
    }

    /// Asserts whether `source` answered, and that its error mentions `error`
    /// when it did not (an answered source carries no error).
    #[track_caller]
    pub fn source(&self, step: &str, source: &str, answered: bool, error: &str) -> &Self {
        let e = self.evidence(source);
        assert_eq!(
            e["answered"], answered,
            "{step}: {source} answered?\n{}",
            self.run
        );
        if answered {
            assert!(
                e.get("error").is_none(),
                "{step}: {source}: {e}\n{}",
                self.run
            );
        } else {
            assert!(
                e["error"].as_str().unwrap_or_default().contains(error),
                "{step}: the {source} error does not mention {error:?}: {e}\n{}",
                self.run
            );
        }
        self
    }

    /// Asserts the row of `docs/decision-table.md` the verdict came from.
    #[track_caller]
    pub fn row(&self, step: &str, row: &str) -> &Self {
        assert_eq!(
            self.doc()["row"].as_str(),
            Some(row),
            "{step}: decision-table row\n{}",
            self.run
        );
        self
    }

    /// Asserts that one of the warnings mentions `words`.
    #[track_caller]
    pub fn warns(&self, step: &str, words: &str) -> &Self {
        let warnings = self.doc()["warnings"].to_string();
        assert!(
            warnings.contains(words),
            "{step}: a warning mentions {words:?}\n{}",
            self.run
        );
        self
    }

    /// Asserts the reason mentions `words`.
    #[track_caller]
    pub fn reason_mentions(&self, step: &str, words: &str) -> &Self {
        let reason = self.doc()["reason"].as_str().unwrap_or_default();
        assert!(
            reason.contains(words),
            "{step}: the reason does not mention {words:?}\n{}",
            self.run
        );
        self
    }
}

/// The last value of `key` in `env`.
pub fn value<'a>(env: &'a [(String, String)], key: &str) -> Option<&'a str> {
    env.iter()
        .rev()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
}

/// Runs `preflight -o json` with `env` (kube off and a 10 s budget unless `env`
/// says otherwise) and checks that the tree around the data dir — its parent, so
/// a missing data dir must stay missing — is unchanged.
#[track_caller]
pub fn preflight(env: &[(String, String)]) -> Preflight {
    preflight_args(env, &[])
}

/// Like [`preflight`], with more arguments after `preflight -o json`.
#[track_caller]
pub fn preflight_args(env: &[(String, String)], args: &[&str]) -> Preflight {
    let data_dir = PathBuf::from(value(env, "ETCD_DATA_DIR").expect("ETCD_DATA_DIR"));
    let watched = data_dir.parent().expect("the data dir has a parent");
    let before = tree_snapshot(watched);
    let run = run_preflight(env, args);
    let diff = tree_diff(&before, &tree_snapshot(watched));
    assert!(
        diff.is_empty(),
        "preflight changed {}:\n  {}\n{}",
        watched.display(),
        diff.join("\n  "),
        run.run
    );
    run
}

/// Like [`preflight`], without the tree check (for a directory a running etcd
/// may write to meanwhile).
#[track_caller]
pub fn preflight_unwatched(env: &[(String, String)]) -> Preflight {
    run_preflight(env, &[])
}

#[track_caller]
fn run_preflight(env: &[(String, String)], args: &[&str]) -> Preflight {
    let out = tempfile::tempdir().expect("tempdir");
    let verdict_file = out.path().join("preflight.json");
    let termination_log = out.path().join("termination-log");
    let mut full: Env = vec![
        ("AGENT_KUBE".into(), "false".into()),
        ("AGENT_TIMEOUT".into(), "10s".into()),
    ];
    for (k, v) in env {
        full = with(&full, k, v);
    }
    full = with(
        &full,
        "AGENT_VERDICT_FILE",
        verdict_file.display().to_string(),
    );
    full = with(
        &full,
        "TERMINATION_LOG",
        termination_log.display().to_string(),
    );
    let started = Instant::now();
    let mut argv = vec!["preflight", "-o", "json"];
    argv.extend_from_slice(args);
    let run = run_agent(argv, &full);
    let elapsed = started.elapsed();
    check_outputs(&run, &verdict_file, &termination_log);
    Preflight { run, elapsed }
}

/// The document's contract keys, the verdict file and the termination message.
#[track_caller]
fn check_outputs(run: &AgentRun, verdict_file: &Path, termination_log: &Path) {
    let doc = run.json();
    for key in [
        "verdict",
        "exit_code",
        "reason",
        "remedy",
        "evidence",
        "data_dir",
    ] {
        assert!(doc.get(key).is_some(), "no {key:?} in the document\n{run}");
    }
    assert_eq!(
        doc["exit_code"], run.code,
        "exit_code is the exit status\n{run}"
    );
    assert!(doc["verdict"].is_string(), "{run}");
    assert!(
        !doc["reason"].as_str().unwrap_or_default().is_empty(),
        "{run}"
    );
    let remedy = doc["remedy"].as_str().expect("remedy is a string");
    assert_eq!(
        remedy.is_empty(),
        run.code == 0,
        "a refusal, and only a refusal, carries a remedy\n{run}"
    );
    assert!(doc["data_dir"]["state"].is_string(), "{run}");
    let evidence = doc["evidence"].as_array().expect("evidence is a list");
    let sources: Vec<&str> = evidence
        .iter()
        .map(|e| e["source"].as_str().unwrap_or_default())
        .collect();
    // The witness file is a source only where one is configured (or found).
    let core = ["data-dir", "etcd", "kube", "env", "witness"];
    assert!(
        sources == core || sources == [&core[..], &["witness-file"]].concat(),
        "the sources, in order: {sources:?}\n{run}"
    );
    for e in evidence {
        let answered = e["answered"]
            .as_bool()
            .unwrap_or_else(|| panic!("answered is not a boolean: {e}\n{run}"));
        if !answered {
            assert!(
                e["error"].as_str().is_some_and(|s| !s.is_empty()),
                "a source that did not answer says why: {e}\n{run}"
            );
        }
    }

    let file = std::fs::read(verdict_file)
        .unwrap_or_else(|e| panic!("no verdict file at {}: {e}\n{run}", verdict_file.display()));
    let file: Value = serde_json::from_slice(&file).expect("the verdict file is JSON");
    assert_eq!(&file, doc, "the verdict file is the document\n{run}");

    let message = std::fs::read(termination_log).unwrap_or_else(|e| {
        panic!(
            "no termination message at {}: {e}\n{run}",
            termination_log.display()
        )
    });
    assert!(
        message.len() <= TERMINATION_MESSAGE_MAX,
        "termination message of {} bytes\n{run}",
        message.len()
    );
    let message: Value = serde_json::from_slice(&message).expect("the termination message is JSON");
    for key in ["verdict", "exit_code", "reason", "remedy"] {
        assert_eq!(message[key], doc[key], "termination message {key}\n{run}");
    }
    for key in ["member_id", "cluster_id"] {
        assert_eq!(
            message[key], doc["data_dir"][key],
            "termination message {key}\n{run}"
        );
    }
}

/// A temp directory anyone can traverse (tempfile makes them 0700).
pub fn scratch() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755))
        .expect("chmod scratch");
    dir
}

/// `cp -a from to`: a byte-for-byte copy with modes, as a volume snapshot would be.
pub fn copy_dir(from: &Path, to: &Path) {
    if let Some(parent) = to.parent() {
        std::fs::create_dir_all(parent).expect("create the copy's parent");
    }
    let status = Command::new("cp")
        .arg("-a")
        .arg(from)
        .arg(to)
        .status()
        .expect("run cp");
    assert!(
        status.success(),
        "cp -a {} {}",
        from.display(),
        to.display()
    );
}

/// Asserts that `member` serves `tenant/config` from its own store.
#[track_caller]
pub fn serves_the_data(step: &str, member: &Member) {
    assert_eq!(
        member.get("tenant/config").as_deref(),
        Some("precious"),
        "{step}: {} serves the data",
        member.name()
    );
    assert_eventually!(
        ensure(
            member.get_serializable("tenant/config").as_deref() == Some("precious"),
            "its own store lacks the key"
        ),
        "{step}: {} holds the data itself",
        member.name()
    );
}

/// Waits until every running member has applied everything committed so far
/// (a member's publish of its name included), so any of them can answer for it.
pub fn settle(cluster: &Cluster, marker: &str) {
    cluster.put(marker, "applied");
    for member in cluster.members().iter().filter(|m| m.is_answering()) {
        assert_eventually!(
            ensure(member.get_serializable(marker).is_some(), "not applied yet"),
            "{} applied {marker}",
            member.name()
        );
    }
}

/// `member remove` + `member add` at the same peer URL, as the remedy of a
/// wiped member says; returns the `--initial-cluster` member add printed.
pub fn remove_and_add_again(cluster: &Cluster, member: &Member) -> String {
    let old = cluster.member_list()["members"]
        .as_array()
        .and_then(|ms| ms.iter().find(|m| m["name"] == member.name()))
        .and_then(|m| m["ID"].as_u64())
        .unwrap_or_else(|| panic!("{} is not in the member list", member.name()));
    cluster.member_remove(old);
    // etcd derives an added member's ID from its peer URLs and the second of the
    // add: re-added within the second of its previous add, it would get the ID
    // just removed, which etcd refuses ("member not found"). Retry until the
    // clock moves on (or the cluster is healthy enough to add).
    let peer_urls = format!("--peer-urls={}", member.peer_url());
    let out = assert_eventually!(
        {
            let out = cluster.etcdctl(["member", "add", member.name(), &peer_urls]);
            let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
            ensure(out.status.success(), String::from_utf8_lossy(&out.stderr)).map(|()| stdout)
        },
        "member add {}",
        member.name()
    );
    let initial_cluster = out
        .lines()
        .find_map(|l| l.trim().strip_prefix("ETCD_INITIAL_CLUSTER="))
        .map(|v| v.trim_matches('"').to_string())
        .unwrap_or_else(|| panic!("no ETCD_INITIAL_CLUSTER in: {out}"));
    assert!(
        !out.contains(&format!("{old:x}")),
        "a re-added member gets a new ID: {out}"
    );
    initial_cluster
}
