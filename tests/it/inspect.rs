//! `inspect` as a black box against data dirs written by real etcd 3.4.23 and
//! 3.5.1: what it reports is checked against what etcd itself said while it ran
//! (`etcdctl endpoint status`) and against `etcdutl snapshot status` on the stopped
//! member's db; bad inputs are built by copying a real stopped member's dir and
//! damaging the copy; read-only-ness is proven with tree snapshots.
//!
//! Wall time is kept down by sharing clusters: one test per etcd version builds a
//! single-member dir with several WAL segments and a three-member cluster with
//! `.snap` files and a SIGKILLed member, then checks everything against them.
//!
//! `bench_builds_a_gigabyte_of_wal_for_scripts_bench` is ignored: `scripts/bench`
//! runs it to build its data dir.

use std::fs::{self, File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{symlink, FileExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::common::*;
use serde_json::Value;

/// `--snapshot-count` for the shared clusters: small, so a few hundred puts leave
/// several `.snap` files.
const SNAPSHOT_COUNT: u64 = 40;
/// WAL segments are preallocated to this size.
const SEGMENT_BYTES: u64 = 64_000_000;
/// Value size for the bulk writes that fill several WAL segments.
const BIG_VALUE: usize = 1 << 20;
/// How long a member's status must stay put to count as quiet (three of etcd's
/// 100 ms backend batch intervals).
const QUIET_GAP: Duration = Duration::from_millis(300);

// ---------------------------------------------------------------------------
// Running the agent
// ---------------------------------------------------------------------------

/// Runs `inspect` with a clean environment whose only files (termination log,
/// verdict file) live in a scratch dir of its own, never in the data dir.
struct Inspector {
    scratch: tempfile::TempDir,
}

impl Inspector {
    fn new() -> Self {
        let scratch = tempfile::Builder::new()
            .prefix("inspect-scratch-")
            .tempdir()
            .expect("scratch dir");
        // uid 65532 runs must be able to reach it (they never write there either).
        fs::set_permissions(scratch.path(), fs::Permissions::from_mode(0o755)).unwrap();
        Inspector { scratch }
    }

    fn env(&self) -> Vec<(String, String)> {
        let p = |n: &str| self.scratch.path().join(n).display().to_string();
        vec![
            ("TERMINATION_LOG".into(), p("termination-log")),
            ("AGENT_VERDICT_FILE".into(), p("verdict.json")),
            ("AGENT_KUBE".into(), "false".into()),
        ]
    }

    fn args(data_dir: &Path, extra: &[&str]) -> Vec<String> {
        let mut args = vec![
            "inspect".to_string(),
            "--data-dir".into(),
            data_dir.display().to_string(),
            "-o".into(),
            "json".into(),
        ];
        args.extend(extra.iter().map(|s| s.to_string()));
        args
    }

    /// `inspect --data-dir <dir> -o json <extra>`, checked for sanity.
    fn run(&self, data_dir: &Path, extra: &[&str]) -> AgentRun {
        let run = run_agent(Self::args(data_dir, extra), &self.env());
        assert_sane(&run);
        run
    }

    /// The same as the Pod's uid/gid.
    fn run_as_pod(&self, data_dir: &Path, extra: &[&str]) -> AgentRun {
        let run = run_agent_as(POD_UID, POD_GID, Self::args(data_dir, extra), &self.env());
        assert_sane(&run);
        run
    }

    /// Runs and checks the exit code and `state`.
    #[track_caller]
    fn expect(&self, data_dir: &Path, extra: &[&str], code: i32, state: &str) -> Value {
        let run = self.run(data_dir, extra);
        expect_outcome(&run, code, state)
    }
}

/// Never a panic, always one JSON document whose `state` agrees with the exit code,
/// and a human summary on stderr.
#[track_caller]
fn assert_sane(run: &AgentRun) {
    assert!(
        !run.stderr.contains("panicked") && run.code != 101,
        "the agent panicked\n{run}"
    );
    let json = run.json();
    let state = json["state"]
        .as_str()
        .unwrap_or_else(|| panic!("no state\n{run}"));
    let code = match state {
        "empty" | "initialized" => 0,
        "corrupt" => 12,
        "partial" => 13,
        "unreadable" => 3,
        other => panic!("unknown state {other}\n{run}"),
    };
    assert_eq!(run.code, code, "exit code does not match state\n{run}");
    assert!(
        run.stderr.contains("data dir "),
        "no human summary on stderr\n{run}"
    );
    if code != 0 {
        let message = json["problem"]["message"].as_str().unwrap_or_default();
        assert!(
            !message.is_empty(),
            "a {state} dir must say why in problem.message\n{run}"
        );
        assert!(
            run.stderr.contains(message),
            "the summary must carry the problem\n{run}"
        );
    }
}

#[track_caller]
fn expect_outcome(run: &AgentRun, code: i32, state: &str) -> Value {
    run.assert_code(code);
    assert_eq!(run.json()["state"], state, "{run}");
    run.json().clone()
}

/// The problem message, lowercased, for `contains` checks.
fn problem(json: &Value) -> String {
    json["problem"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_lowercase()
}

fn hex(id: u64) -> String {
    format!("{id:016x}")
}

fn u64_at(v: &Value, pointer: &str) -> u64 {
    v.pointer(pointer)
        .and_then(Value::as_u64)
        .unwrap_or_else(|| panic!("no u64 at {pointer} in {v:#}"))
}

// ---------------------------------------------------------------------------
// Copies and mutations of real data dirs
// ---------------------------------------------------------------------------

/// A scratch copy of a data dir, deleted on drop.
struct DirCopy {
    dir: tempfile::TempDir,
}

impl DirCopy {
    /// Copies `src` (a stopped member's data dir) into a fresh temp dir at `data`.
    fn of(src: &Path) -> Self {
        let dir = tempfile::Builder::new()
            .prefix("inspect-copy-")
            .tempdir()
            .expect("temp dir");
        fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755)).unwrap();
        copy_tree(src, &dir.path().join("data"));
        DirCopy { dir }
    }

    fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    fn wal_dir(&self) -> PathBuf {
        self.data().join("member/wal")
    }

    fn snap_dir(&self) -> PathBuf {
        self.data().join("member/snap")
    }

    fn db(&self) -> PathBuf {
        self.snap_dir().join("db")
    }

    /// The `*.wal` segments, sorted.
    fn segments(&self) -> Vec<PathBuf> {
        with_suffix(&self.wal_dir(), ".wal")
    }

    /// The newest `*.snap`.
    fn newest_snap(&self) -> PathBuf {
        with_suffix(&self.snap_dir(), ".snap")
            .pop()
            .expect("the copy has .snap files")
    }
}

/// Entries of `dir` ending in `suffix`, sorted.
fn with_suffix(dir: &Path, suffix: &str) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("list {}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().ends_with(suffix))
        .collect();
    v.sort();
    v
}

/// Copies a tree (no symlinks expected), keeping modes. Runs of zeros become
/// holes: preallocated WAL space reads back the same and costs nothing to copy.
fn copy_tree(src: &Path, dst: &Path) {
    let meta = fs::symlink_metadata(src).unwrap();
    if meta.is_dir() {
        fs::create_dir(dst).unwrap_or_else(|e| panic!("mkdir {}: {e}", dst.display()));
        for entry in fs::read_dir(src).unwrap() {
            let entry = entry.unwrap();
            copy_tree(&entry.path(), &dst.join(entry.file_name()));
        }
    } else if meta.is_file() {
        let mut from = File::open(src).unwrap();
        let mut to = File::create(dst).unwrap();
        let mut buf = vec![0u8; 1 << 20];
        loop {
            let n = from.read(&mut buf).unwrap();
            if n == 0 {
                break;
            }
            if buf[..n].iter().all(|&b| b == 0) {
                to.seek(SeekFrom::Current(n as i64)).unwrap();
            } else {
                to.write_all(&buf[..n]).unwrap();
            }
        }
        to.set_len(meta.len()).unwrap();
    } else {
        panic!("unexpected entry {}", src.display());
    }
    fs::set_permissions(dst, meta.permissions()).unwrap();
}

/// A WAL frame: offset of its length word, record length, padding.
#[derive(Clone, Copy, Debug)]
struct Frame {
    offset: u64,
    len: u64,
    pad: u64,
}

impl Frame {
    fn end(self) -> u64 {
        self.offset + 8 + self.len + self.pad
    }
}

/// The frames of a WAL segment, up to the first zero length word.
fn frames(path: &Path) -> Vec<Frame> {
    let bytes = fs::read(path).unwrap();
    let mut out = Vec::new();
    let mut off = 0u64;
    while off + 8 <= bytes.len() as u64 {
        let word = u64::from_le_bytes(bytes[off as usize..off as usize + 8].try_into().unwrap());
        if word == 0 {
            break;
        }
        let len = word & ((1 << 56) - 1);
        let pad = if word >> 63 == 1 { (word >> 56) & 7 } else { 0 };
        let f = Frame {
            offset: off,
            len,
            pad,
        };
        if f.end() > bytes.len() as u64 {
            break;
        }
        out.push(f);
        off = f.end();
    }
    out
}

fn write_at(path: &Path, offset: u64, bytes: &[u8]) {
    let f = OpenOptions::new().write(true).open(path).unwrap();
    f.write_all_at(bytes, offset).unwrap();
}

fn read_at(path: &Path, offset: u64, len: usize) -> Vec<u8> {
    let f = File::open(path).unwrap();
    let mut buf = vec![0u8; len];
    f.read_exact_at(&mut buf, offset).unwrap();
    buf
}

/// Deterministic junk (xorshift), never a run of zeros long enough to look torn.
fn garbage(len: usize) -> Vec<u8> {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x as u8) | 1
        })
        .collect()
}

// ---------------------------------------------------------------------------
// What etcd said while it ran
// ---------------------------------------------------------------------------

/// `endpoint status` once the member is quiet: two reads at least
/// [`QUIET_GAP`] apart agree on the raft index, applied index, term and db size.
/// The gap matters: etcd commits its backend in 100 ms batches and `dbSize` moves
/// only then, so two reads in the same batch interval can agree on a size that
/// the pending commit is about to change. Taken right before a stop.
fn quiet_status(m: &Member) -> Value {
    let mut last: Option<(Instant, Value)> = None;
    let key = |s: &Value| {
        (
            s["raftIndex"].as_u64(),
            s["raftAppliedIndex"].as_u64(),
            s["dbSize"].as_u64(),
            s["raftTerm"].as_u64(),
        )
    };
    assert_eventually!(
        {
            let now = m.try_endpoint_status()?;
            let applying = now["raftAppliedIndex"].as_u64() != now["raftIndex"].as_u64();
            match last.take() {
                Some((at, prev)) if key(&prev) == key(&now) && !applying => {
                    if at.elapsed() >= QUIET_GAP {
                        return Ok(now);
                    }
                    last = Some((at, prev));
                    Err("not quiet for long enough yet".to_string())
                }
                _ => {
                    last = Some((Instant::now(), now));
                    Err("status still moving".to_string())
                }
            }
        },
        "{} is quiet",
        m.name()
    )
}

/// How a member went down after its last status.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Down {
    /// SIGTERM while its cluster had quorum.
    Stopped,
    /// SIGKILL.
    Killed,
    /// SIGTERM as the last member of its cluster: having lost quorum it may have
    /// stepped down and campaigned (a higher term) before the signal arrived.
    StoppedAlone,
}

/// The report of a stopped member agrees with the status etcd gave right before
/// it went down.
fn assert_matches_status(name: &str, report: &Value, status: &Value, down: Down) {
    let killed = down == Down::Killed;
    let how = format!("{down:?}");
    let ctx = format!("{name} ({how}): inspect {report:#}\nendpoint status {status:#}");
    assert_eq!(report["state"], "initialized", "{ctx}");
    assert_eq!(report["running"], false, "{ctx}");
    assert_eq!(
        report["member_id"],
        hex(u64_at(status, "/header/member_id")),
        "{ctx}"
    );
    assert_eq!(
        report["cluster_id"],
        hex(u64_at(status, "/header/cluster_id")),
        "{ctx}"
    );
    // raftIndex is the committed index. etcd appends a HardState record whenever
    // it changes, but fsyncs only when entries, term or vote changed
    // (raft.MustSync): a HardState that only moves the commit index sits in the
    // WAL's write buffer until the next sync. A clean stop flushes it; SIGKILL
    // loses it, so a killed follower's log may say a lower commit than it
    // reported. It never says a higher one, and every committed entry it
    // acknowledged is in its log (entries are synced before they are acked).
    let commit = u64_at(report, "/hard_state/commit");
    let raft_index = u64_at(status, "/raftIndex");
    if killed {
        assert!(commit <= raft_index, "{ctx}");
        assert!(u64_at(report, "/last_index") >= raft_index, "{ctx}");
    } else {
        assert_eq!(commit, raft_index, "{ctx}");
    }
    let (term, reported_term) = (
        u64_at(report, "/hard_state/term"),
        u64_at(status, "/raftTerm"),
    );
    if down == Down::StoppedAlone {
        assert!(term >= reported_term, "{ctx}");
    } else {
        assert_eq!(term, reported_term, "{ctx}");
    }
    assert!(
        u64_at(report, "/last_index") >= u64_at(report, "/hard_state/commit"),
        "{ctx}"
    );
    // dbSize is tx.Size() after the last backend commit: high-water pgid x page
    // size. Quiet for several batch intervals before a SIGKILL, the file holds
    // exactly that commit. A clean stop commits once more (etcd's batchTx
    // commits at stop even with nothing pending, and from 3.5 its pre-commit
    // hook writes the consistent index and term into `meta` again): bbolt
    // copies the pages it dirties, and when the pages the previous commit
    // freed are still held by a read (the status just answered), it takes
    // new ones past the high-water mark. So a cleanly stopped member's file
    // may end a few pages past dbSize (seen on 3.5.35 and 3.7.3 under load:
    // one page); never before it.
    let (size, reported) = (
        u64_at(report, "/backend/logical_size"),
        u64_at(status, "/dbSize"),
    );
    if killed {
        assert_eq!(size, reported, "{ctx}");
    } else {
        let page = u64_at(report, "/backend/page_size");
        assert!(
            size >= reported && size - reported <= 4 * page,
            "{size} bytes against dbSize {reported} (page {page}): {ctx}"
        );
    }
    // Everything applied reached the backend: its consistent index is the applied
    // index etcd reported (the batch commit ran before the stop or SIGKILL).
    assert_eq!(
        u64_at(report, "/backend/consistent_index"),
        u64_at(status, "/raftAppliedIndex"),
        "{ctx}"
    );
}

/// The newest revision a deletion, then compacted: etcd 3.4 and early 3.5
/// remove the tombstone, so the newest key is older than the revision etcd is
/// at; `compact_revision` holds it, and the higher of the two is the revision
/// etcd reported (and restores on start). 3.6+ and late 3.5 patches (3.5.35
/// here) keep the compacted revision's tombstone.
/// Restarts the lone member `single`, and stops it again.
fn the_revision_is_the_compactions_past_a_compacted_deletion(
    inspector: &Inspector,
    single: &Cluster,
) {
    let m = &single[0];
    m.start();
    m.wait_healthy();
    single.put("compacted/last", "x");
    let deleted = m.etcdctl(["del", "compacted/last"]);
    assert!(deleted.status.success(), "{deleted:?}");
    let at = quiet_status(m)["header"]["revision"].to_string();
    let compacted = m.etcdctl(["compact", at.as_str(), "--physical"]);
    assert!(compacted.status.success(), "{compacted:?}");
    let status = quiet_status(m);
    m.stop().expect("it ran");
    let report = inspector.expect(m.data_dir(), &[], 0, "initialized");
    let backend = &report["backend"];
    let ctx = format!(
        "backend {backend:#}
endpoint status {status:#}"
    );
    let (newest, compacted) = (
        backend["revision"].as_i64(),
        backend["compact_revision"].as_i64(),
    );
    assert_eq!(compacted.map(|c| c.to_string()), Some(at), "{ctx}");
    assert_eq!(
        newest.max(compacted),
        status["header"]["revision"].as_i64(),
        "{ctx}"
    );
    if !m.version().at_least(3, 5) {
        assert!(newest < compacted, "the tombstone is compacted away: {ctx}");
    }
}

/// `inspect --hash` says exactly what `etcdutl snapshot status` of the dir's own
/// version says about the db (3.5.1's for 3.4, which has no etcdutl): 3.6+ count
/// `totalKey` as live user keys and add `version`.
fn assert_hash_matches_etcdutl(
    inspector: &Inspector,
    version: EtcdVersion,
    data_dir: &Path,
    db: &Path,
) {
    let oracle = if version == EtcdVersion::V3_4 {
        etcdutl_status(db)
    } else {
        etcdutl_status_of(version, db)
    };
    let report = inspector.expect(data_dir, &["--hash"], 0, "initialized");
    let ctx = format!(
        "etcdutl {oracle:#}\ninspect kv_hash {:#}",
        report["kv_hash"]
    );
    assert_eq!(report["kv_hash"]["hash"], oracle["hash"], "{ctx}");
    assert_eq!(report["kv_hash"]["revision"], oracle["revision"], "{ctx}");
    assert_eq!(report["kv_hash"]["total_key"], oracle["totalKey"], "{ctx}");
    assert_eq!(
        report["kv_hash"]["total_size"], oracle["totalSize"],
        "{ctx}"
    );
    assert!(oracle["totalKey"].as_u64().unwrap() > 0, "{ctx}");
    // 3.6+ etcdutl prints `version`; older ones have no such field.
    match oracle.get("version") {
        Some(v) => assert_eq!(&report["kv_hash"]["version"], v, "{ctx}"),
        None => assert!(report["kv_hash"]["version"].is_null(), "{ctx}"),
    }
    assert_eq!(
        oracle.get("version").is_some(),
        version.at_least(3, 6),
        "{ctx}"
    );
}

/// The storage version `inspect` reports for a dir `version` wrote: 3.6+ write
/// `meta/storageVersion` (`3.6.0`); etcd detects a 3.5 dir by its backend term;
/// 3.4 leaves neither.
fn assert_storage_version(version: EtcdVersion, report: &Value) {
    let backend = &report["backend"];
    let (want, source) = match version.minor() {
        (3, 4) => (Value::Null, "none"),
        (3, 5) => (Value::from("3.5.0"), "meta/term"),
        (major, minor) => (
            Value::from(format!("{major}.{minor}.0")),
            "meta/storageVersion",
        ),
    };
    assert_eq!(backend["storage_version"], want, "{version}: {report:#}");
    assert_eq!(
        backend["storage_version_source"], source,
        "{version}: {report:#}"
    );
}

/// What etcd's purge leaves, minus the `.snap` files: the first WAL segment and
/// every `.snap` removed from a copy. Up to 3.6 the WAL's snapshot record is then
/// unusable (corrupt, exit 12); 3.7 starts from the record itself and no longer
/// loads `.snap` files, so the copy is initialized with the same snapshot point.
fn snap_rule_follows_the_storage_version(
    inspector: &Inspector,
    version: EtcdVersion,
    m: &Member,
    intact: &Value,
) {
    let copy = DirCopy::of(m.data_dir());
    let snaps = with_suffix(&copy.snap_dir(), ".snap");
    assert!(!snaps.is_empty(), "{version} wrote .snap files");
    for s in snaps {
        fs::remove_file(s).unwrap();
    }
    let segments = copy.segments();
    assert!(segments.len() >= 2, "{segments:?}");
    fs::remove_file(&segments[0]).unwrap();
    if version.at_least(3, 7) {
        let json = inspector.expect(&copy.data(), &[], 0, "initialized");
        assert_eq!(json["snapshot"], intact["snapshot"], "{version}: {json:#}");
        assert!(u64_at(&json, "/snapshot/index") > 0, "{json:#}");
        let members = |r: &Value| -> Vec<(Value, Value)> {
            r["membership"]
                .as_array()
                .unwrap()
                .iter()
                .map(|m| (m["id"].clone(), m["peer_urls"].clone()))
                .collect()
        };
        assert_eq!(members(&json), members(intact), "{json:#}");
    } else {
        let json = inspector.expect(&copy.data(), &[], 12, "corrupt");
        assert!(problem(&json).contains("no such .snap file"), "{json:#}");
    }
}

/// Inspecting (plain, `--hash`, text output) leaves every entry of the dir as it
/// was: content, size, mode, owner, inode, mtime and ctime.
fn assert_read_only(inspector: &Inspector, data_dir: &Path) {
    let before = tree_snapshot(data_dir);
    inspector.expect(data_dir, &[], 0, "initialized");
    inspector.expect(data_dir, &["--hash"], 0, "initialized");
    let text = run_agent(
        [
            "inspect",
            "--hash",
            "--data-dir",
            &data_dir.display().to_string(),
        ],
        &inspector.env(),
    );
    text.assert_code(0);
    assert!(
        text.stdout.is_empty(),
        "text mode prints nothing on stdout\n{text}"
    );
    assert!(text.stderr.contains("kv hash"), "{text}");
    let after = tree_snapshot(data_dir);
    assert_tree_unchanged(&before, &after);
    assert!(before.len() > 5, "a real data dir has entries: {before:?}");
}

/// `inspect` against a running member: reported running, exit 0, etcd unaffected.
fn assert_running_member_is_reported_and_unaffected(inspector: &Inspector, m: &Member, key: &str) {
    let pid = m.pid();
    let log_before = m.log().len();
    let report = inspector.expect(m.data_dir(), &["--hash"], 0, "initialized");
    assert_eq!(report["running"], true, "{report:#}");
    let locks = report["locks"].as_array().expect("locks");
    assert!(!locks.is_empty(), "{report:#}");
    assert_eq!(report["member_id"], m.id_hex().unwrap(), "{report:#}");
    // etcd keeps serving, with the same process, and still writes its WAL
    // (it try-locks every new segment and dies on a conflict).
    assert!(m.is_running() && m.pid() == pid, "{} died", m.name());
    m.put(key, "written after inspect");
    assert_eq!(m.get(key).as_deref(), Some("written after inspect"));
    let log = m.log();
    let since = log.get(log_before..).unwrap_or_default();
    for bad in [r#""level":"fatal""#, r#""level":"panic""#, "failed to lock"] {
        assert!(
            !since.contains(bad),
            "etcd logged {bad} after inspect:\n{since}"
        );
    }
}

// ---------------------------------------------------------------------------
// Real data dirs, per version
// ---------------------------------------------------------------------------

fn inspect_agrees_with_etcd_on_real_data_dirs(version: EtcdVersion) {
    let t0 = Instant::now();
    let phase = |what: &str| eprintln!("{version}: {what} at {:.1?}", t0.elapsed());
    let inspector = Inspector::new();
    let single = Cluster::builder(version)
        .snapshot_count(SNAPSHOT_COUNT)
        .token(format!("inspect-single-{}", version.label()))
        .start();
    let multi = Cluster::builder(version)
        .members(3)
        .snapshot_count(SNAPSHOT_COUNT)
        .token(format!("inspect-multi-{}", version.label()))
        .start();

    phase("clusters formed");
    // Single member: several WAL segments and .snap files.
    let m = &single[0];
    single.put_many("small/", 4 * SNAPSHOT_COUNT as usize, 100);
    let stats = single.put_many("big/", 150, BIG_VALUE);
    eprintln!(
        "{version}: {} MiB in {:.1?}",
        stats.bytes >> 20,
        stats.elapsed
    );
    let status = quiet_status(m);
    m.stop().expect("it ran");
    assert!(m.wal_files().len() >= 3, "{:?}", m.wal_files());
    assert!(!m.snap_files().is_empty());

    phase("single member stopped");
    // The proof hashes every byte of the dir twice; once per file is enough.
    if version == EtcdVersion::V3_5 {
        assert_read_only(&inspector, m.data_dir());
        phase("read-only proof");
    }
    let report = inspector.expect(m.data_dir(), &[], 0, "initialized");
    assert_matches_status("single m0", &report, &status, Down::Stopped);
    the_sidecars_boot_read_of_the_last_segment_is_the_whole_reads("single m0", m);
    let segments = report["wal"]["segments"].as_array().unwrap();
    assert_eq!(segments.len(), m.wal_files().len(), "{report:#}");
    assert!(report["wal"]["torn_tail"].is_null(), "{report:#}");
    assert_eq!(
        report["last_index"], report["hard_state"]["commit"],
        "a lone member commits everything it logs: {report:#}"
    );
    assert!(u64_at(&report, "/snapshot/index") > 0, "{report:#}");
    assert_eq!(
        report["snap_files"].as_array().unwrap().len(),
        m.snap_files().len()
    );
    let membership = report["membership"].as_array().unwrap();
    assert_eq!(membership.len(), 1, "{report:#}");
    assert_eq!(membership[0]["id"], m.id_hex().unwrap());
    assert_eq!(report["self_peer_urls"], serde_json::json!([m.peer_url()]));
    assert_storage_version(version, &report);
    assert_hash_matches_etcdutl(&inspector, version, m.data_dir(), &m.db_path());
    snap_rule_follows_the_storage_version(&inspector, version, m, &report);
    phase("single member checked");
    the_revision_is_the_compactions_past_a_compacted_deletion(&inspector, &single);
    phase("compacted deletion checked");
    several_segments_damaged(&inspector, m);
    phase("damaged segments checked");
    parallel_reads_say_what_the_sequential_read_says(&inspector, m);
    phase("parallel reads checked");

    // Three members, each with .snap files; one SIGKILLed (leaves 0.tmp).
    multi.put_many("k/", 6 * SNAPSHOT_COUNT as usize, 200);
    let leader = multi.leader().expect("a leader");
    let followers: Vec<usize> = (0..3).filter(|&i| i != leader).collect();
    assert_running_member_is_reported_and_unaffected(
        &inspector,
        &multi[followers[0]],
        "after/running-inspect",
    );
    // Every status first, with no writes after them; then the followers go down
    // first (one SIGKILLed: it leaves 0.tmp), so no election moves the others'
    // raft state; the leader last.
    let order = [
        (followers[0], Down::Killed),
        (followers[1], Down::Stopped),
        (leader, Down::StoppedAlone),
    ];
    let statuses: Vec<(usize, Down, Value)> = order
        .iter()
        .map(|&(i, down)| (i, down, quiet_status(&multi[i])))
        .collect();
    for &(i, down) in &order {
        if down == Down::Killed {
            multi[i].kill9();
        } else {
            multi[i].stop();
        }
    }
    phase("three members down");
    for (i, down, status) in &statuses {
        let (i, down) = (*i, *down);
        let m = &multi[i];
        let name = format!("{version} {}", m.name());
        let report = inspector.expect(m.data_dir(), &[], 0, "initialized");
        assert_matches_status(&name, &report, status, down);
        the_sidecars_boot_read_of_the_last_segment_is_the_whole_reads(&name, m);
        assert!(u64_at(&report, "/snapshot/index") > 0, "{name}: {report:#}");
        assert!(!m.snap_files().is_empty(), "{name}");
        let mut ids: Vec<String> = multi
            .members()
            .iter()
            .map(|m| m.id_hex().unwrap())
            .collect();
        let mut recorded: Vec<String> = report["membership"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["id"].as_str().unwrap().to_string())
            .collect();
        ids.sort();
        recorded.sort();
        assert_eq!(recorded, ids, "{name}: {report:#}");
        assert_eq!(
            report["self_peer_urls"],
            serde_json::json!([m.peer_url()]),
            "{name}"
        );
        let tmp_debris = report["unexpected"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["path"].as_str().unwrap().ends_with("/member/wal/0.tmp"));
        if down == Down::Killed {
            assert!(
                m.wal_dir().join("0.tmp").exists(),
                "SIGKILL leaves the preallocated segment"
            );
            assert!(
                tmp_debris,
                "{name}: 0.tmp is reported as debris: {report:#}"
            );
        } else {
            assert_eq!(tmp_debris, m.wal_dir().join("0.tmp").exists(), "{name}");
        }
        if down != Down::Stopped {
            assert_read_only(&inspector, m.data_dir());
        }
        assert_hash_matches_etcdutl(&inspector, version, m.data_dir(), &m.db_path());
    }
}

/// `serve` reads the WAL at boot from its last segment alone
/// (`server::boot::read_wal`): on a real directory, a WAL of several segments
/// and .snap files or a member SIGKILLed mid-segment, that read says what the
/// whole read says: the IDs, the last HardState and the last index.
fn the_sidecars_boot_read_of_the_last_segment_is_the_whole_reads(name: &str, m: &Member) {
    use etcd_member_agent::disk::layout::Paths;
    use etcd_member_agent::server::boot;
    let paths = Paths::new(m.data_dir(), None);
    let quick = boot::read_wal_ends(&paths).unwrap_or_else(|| panic!("{name}: not read short"));
    assert_eq!(quick, boot::read_wal(m.data_dir(), None), "{name}");
    let whole = boot::read_wal_whole(&paths);
    assert_eq!(quick, whole, "{name}");
    assert_eq!(quick.state, "initialized", "{name}: {quick:?}");
    assert!(
        quick.commit_index > 0 && quick.term > 0,
        "{name}: {quick:?}"
    );
}

/// Damage in a log of several segments: a truncated early segment is corruption
/// (etcd repairs only the last one), a missing one a sequence gap, a truncated
/// last one a torn tail.
/// Built with `--wal-dir` pointing at a doctored copy of the WAL dir next to the
/// intact data dir (inspect reads the WAL before the backend).
fn several_segments_damaged(inspector: &Inspector, m: &Member) {
    let segs = m.wal_files();
    assert!(segs.len() >= 3);
    let scratch = tempfile::tempdir().unwrap();
    let data = m.data_dir().display().to_string();

    // Truncated first segment.
    let wal = scratch.path().join("truncated");
    fs::create_dir(&wal).unwrap();
    for (i, s) in segs.iter().enumerate() {
        let to = wal.join(s.file_name().unwrap());
        if i == 0 {
            let mut bytes = fs::read(s).unwrap();
            bytes.truncate(SEGMENT_BYTES as usize / 2 + 3);
            fs::write(&to, bytes).unwrap();
        } else {
            fs::hard_link(s, &to).unwrap();
        }
    }
    let w = wal.display().to_string();
    let json = inspector.expect(m.data_dir(), &["--wal-dir", &w], 12, "corrupt");
    assert!(
        problem(&json).contains("before the last segment"),
        "{json:#}"
    );
    assert!(
        json["problem"]["path"].as_str().unwrap().ends_with(".wal"),
        "{json:#}"
    );

    // The middle segment gone.
    let wal = scratch.path().join("gap");
    fs::create_dir(&wal).unwrap();
    for (i, s) in segs.iter().enumerate() {
        if i != 1 {
            fs::hard_link(s, wal.join(s.file_name().unwrap())).unwrap();
        }
    }
    let w = wal.display().to_string();
    let json = inspector.expect(m.data_dir(), &["--wal-dir", &w], 12, "corrupt");
    assert!(problem(&json).contains("sequence gap"), "{json:#}");

    // The same damage to the last segment is a torn tail etcd repairs: exit 0.
    let wal = scratch.path().join("torn-last");
    fs::create_dir(&wal).unwrap();
    let last = segs.len() - 1;
    for (i, s) in segs.iter().enumerate() {
        let to = wal.join(s.file_name().unwrap());
        if i == last {
            let fr = frames(s);
            let cut = fr[fr.len() - 1].offset + 5;
            let mut bytes = fs::read(s).unwrap();
            bytes.truncate(cut as usize + 4);
            fs::write(&to, bytes).unwrap();
        } else {
            fs::hard_link(s, &to).unwrap();
        }
    }
    let w = wal.display().to_string();
    let run = inspector.run(Path::new(&data), &["--wal-dir", &w]);
    let json = expect_outcome(&run, 0, "initialized");
    assert!(!json["wal"]["torn_tail"].is_null(), "{json:#}");
    assert!(run.stderr.contains("torn tail"), "{run}");
}

/// The report, hash included, is the same byte for byte whatever the number of
/// readers: one (the sequential pass), two (on this machine's two cores: the db
/// read beside the WAL) and four (more WAL workers than cores), on the intact
/// dir and on damaged copies, where the first damage is the one reported.
fn parallel_reads_say_what_the_sequential_read_says(inspector: &Inspector, m: &Member) {
    let segs = m.wal_files();
    assert!(segs.len() >= 3, "{segs:?}");
    let scratch = tempfile::tempdir().unwrap();
    let variants = |dir: &Path, hash: bool| -> Vec<(String, AgentRun)> {
        ["1", "2", "4"]
            .iter()
            .map(|n| {
                let mut extra = vec!["--threads", n];
                if hash {
                    extra.push("--hash");
                }
                (extra.join(" "), inspector.run(dir, &extra))
            })
            .collect()
    };
    // Every variant agrees with the sequential one; that one is returned.
    let same = |name: &str, runs: Vec<(String, AgentRun)>| -> Value {
        let (first, seq) = &runs[0];
        for (args, run) in &runs[1..] {
            assert_eq!(
                (run.code, &run.stdout),
                (seq.code, &seq.stdout),
                "{name}: `{args}` differs from `{first}`"
            );
        }
        serde_json::from_str(&seq.stdout).unwrap()
    };

    for hash in [false, true] {
        let json = same("intact", variants(m.data_dir(), hash));
        assert_eq!(json["state"], "initialized", "{json:#}");
        if hash {
            assert!(json["kv_hash"].is_object(), "{json:#}");
        }
    }

    // A copy with one record's payload flipped in `damaged` segments: the read
    // stops at the first one, whichever worker reached its segment first.
    let damage_wal = |name: &str, damaged: &[usize]| -> PathBuf {
        let copy = scratch.path().join(name);
        copy_tree(m.data_dir(), &copy);
        let wal = copy.join("member/wal");
        for &i in damaged {
            let seg = wal.join(segs[i].file_name().unwrap());
            let fr = frames(&seg);
            let f = fr[fr.len() / 2];
            let at = f.offset + 8 + f.len / 2;
            let b = read_at(&seg, at, 1)[0];
            write_at(&seg, at, &[b ^ 0x5a]);
        }
        copy
    };
    let last = segs.len() - 1;
    for (name, damaged) in [
        ("first", vec![0]),
        ("middle", vec![1]),
        ("two", vec![1, last]),
        ("last", vec![last]),
    ] {
        let copy = damage_wal(name, &damaged);
        let first = segs[damaged[0]].file_name().unwrap().to_str().unwrap();
        for hash in [false, true] {
            let json = same(name, variants(&copy, hash));
            assert_eq!(json["state"], "corrupt", "{name}: {json:#}");
            let at = json["problem"]["path"].as_str().unwrap();
            assert!(at.ends_with(first), "{name}: {at} is not {first}: {json:#}");
            assert!(json["problem"]["offset"].is_u64(), "{name}: {json:#}");
        }
    }

    // A db with a run of pages in its middle overwritten: the hash walk fails
    // on the first bad page it reaches, the same one for every reader count.
    let copy = scratch.path().join("db");
    copy_tree(m.data_dir(), &copy);
    let db = copy.join("member/snap/db");
    let len = fs::metadata(&db).unwrap().len();
    let from = (len / 3) & !4095;
    write_at(&db, from, &garbage((len / 3) as usize & !4095));
    let json = same("db", variants(&copy, true));
    let intact = same("intact", variants(m.data_dir(), true));
    let problem = &json["problem"];
    assert!(
        problem["path"]
            .as_str()
            .unwrap()
            .ends_with("member/snap/db"),
        "{json:#}"
    );
    let at = problem["offset"].as_u64().expect("the page at fault");
    assert!(
        (from..from + len / 3).contains(&at),
        "{at} is not in the damage: {json:#}"
    );
    assert_ne!(json, intact, "the damage was not seen: {json:#}");
}

#[test]
fn inspect_reports_what_etcd_3_4_reported_for_single_and_multi_member_dirs() {
    inspect_agrees_with_etcd_on_real_data_dirs(EtcdVersion::V3_4);
}

#[test]
fn inspect_reports_what_etcd_3_5_reported_for_single_and_multi_member_dirs() {
    inspect_agrees_with_etcd_on_real_data_dirs(EtcdVersion::V3_5);
}

#[test]
fn inspect_reports_what_etcd_3_5_latest_reported_for_single_and_multi_member_dirs() {
    inspect_agrees_with_etcd_on_real_data_dirs(EtcdVersion::V3_5Latest);
}

#[test]
fn inspect_reports_what_etcd_3_6_reported_for_single_and_multi_member_dirs() {
    inspect_agrees_with_etcd_on_real_data_dirs(EtcdVersion::V3_6);
}

#[test]
fn inspect_reports_what_etcd_3_7_reported_for_single_and_multi_member_dirs() {
    inspect_agrees_with_etcd_on_real_data_dirs(EtcdVersion::V3_7);
}

// ---------------------------------------------------------------------------
// Read-only
// ---------------------------------------------------------------------------

#[test]
fn inspect_leaves_every_entry_of_a_data_dir_unchanged_even_with_hash_and_as_the_pod_user() {
    let inspector = Inspector::new();
    let cluster = Cluster::builder(EtcdVersion::V3_4)
        .snapshot_count(SNAPSHOT_COUNT)
        .token("inspect-read-only")
        .start();
    let m = &cluster[0];
    cluster.put_many("ro/", 4 * SNAPSHOT_COUNT as usize, 300);
    quiet_status(m);
    // SIGKILL: the dir keeps 0.tmp too, every kind of entry etcd leaves.
    m.kill9();
    assert!(m.wal_dir().join("0.tmp").exists() && !m.snap_files().is_empty());
    chown_recursive(m.data_dir(), POD_UID, POD_GID);
    let before = tree_snapshot(m.data_dir());
    assert_read_only(&inspector, m.data_dir());
    let json = expect_outcome(
        &inspector.run_as_pod(m.data_dir(), &["--hash"]),
        0,
        "initialized",
    );
    assert!(json["kv_hash"]["hash"].is_u64(), "{json:#}");
    assert_tree_unchanged(&before, &tree_snapshot(m.data_dir()));
}

#[test]
fn inspect_during_heavy_writes_reports_running_with_exit_0_never_corrupt() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    let inspector = Inspector::new();
    let cluster = Cluster::builder(EtcdVersion::V3_5)
        .snapshot_count(200)
        .token("inspect-under-load")
        .start();
    let m = &cluster[0];
    let done = Arc::new(AtomicBool::new(false));
    let prober = {
        let (done, dir, env) = (done.clone(), m.data_dir().to_path_buf(), inspector.env());
        std::thread::spawn(move || {
            let mut runs = Vec::new();
            while !done.load(Ordering::Relaxed) || runs.len() < 4 {
                for extra in [&[][..], &["--hash"][..]] {
                    runs.push(run_agent(Inspector::args(&dir, extra), &env));
                }
            }
            runs
        })
    };
    // bbolt frees and reuses pages with every commit; the reader, holding no
    // lock, sees some of them move. That is etcd at work, not corruption.
    cluster.put_many("load/", 1000, 64 << 10);
    cluster.put_many("small/", 3000, 100);
    done.store(true, Ordering::Relaxed);
    let runs = prober.join().expect("prober");
    let unread = runs
        .iter()
        .filter(|r| !r.json().get("backend_unread").is_none_or(Value::is_null))
        .count();
    eprintln!(
        "{} inspections during the writes, {unread} without the backend",
        runs.len()
    );
    for run in &runs {
        assert_sane(run);
        let json = expect_outcome(run, 0, "initialized");
        assert_eq!(json["running"], true, "{run}");
        assert_eq!(json["member_id"], m.id_hex().unwrap(), "{run}");
    }
    assert!(m.is_running());
    assert_eq!(m.get("small/00002999").as_deref().map(str::len), Some(100));
}

// ---------------------------------------------------------------------------
// A dedicated WAL dir
// ---------------------------------------------------------------------------

#[test]
fn a_dedicated_wal_dir_is_read_with_wal_dir_or_etcd_wal_dir_and_without_it_the_dir_is_partial() {
    let inspector = Inspector::new();
    let outside = tempfile::Builder::new()
        .prefix("inspect-waldir-")
        .tempdir()
        .unwrap();
    fs::set_permissions(outside.path(), fs::Permissions::from_mode(0o755)).unwrap();
    let wal_dir = outside.path().join("wal");
    let cluster = Cluster::builder(EtcdVersion::V3_4)
        .snapshot_count(SNAPSHOT_COUNT)
        .token("inspect-wal-dir")
        .arg(format!("--wal-dir={}", wal_dir.display()))
        .start();
    let m = &cluster[0];
    cluster.put_many("w/", 2 * SNAPSHOT_COUNT as usize, 100);
    let status = quiet_status(m);
    m.stop().expect("it ran");
    assert!(!m.wal_dir().exists(), "etcd wrote its WAL elsewhere");
    assert!(!with_suffix(&wal_dir, ".wal").is_empty());

    let w = wal_dir.display().to_string();
    let before = (tree_snapshot(m.data_dir()), tree_snapshot(&wal_dir));
    let by_flag = inspector.expect(m.data_dir(), &["--wal-dir", &w], 0, "initialized");
    assert_matches_status("--wal-dir", &by_flag, &status, Down::Stopped);
    assert_eq!(by_flag["paths"]["wal_dir"], w.as_str());
    let mut env = inspector.env();
    env.push(("ETCD_WAL_DIR".into(), w.clone()));
    let by_env = run_agent(Inspector::args(m.data_dir(), &["--hash"]), &env);
    assert_sane(&by_env);
    let by_env = expect_outcome(&by_env, 0, "initialized");
    assert_eq!(by_env["member_id"], by_flag["member_id"]);
    assert_eq!(by_env["hard_state"], by_flag["hard_state"]);
    assert_eq!(
        by_env["kv_hash"]["hash"],
        etcdutl_status(&m.db_path())["hash"],
        "{by_env:#}"
    );
    // Without it, etcd itself would see a db and no WAL and bootstrap over it.
    let json = inspector.expect(m.data_dir(), &[], 13, "partial");
    assert!(problem(&json).contains("without a wal"), "{json:#}");
    let after = (tree_snapshot(m.data_dir()), tree_snapshot(&wal_dir));
    assert_tree_unchanged(&before.0, &after.0);
    assert_tree_unchanged(&before.1, &after.1);
}

// ---------------------------------------------------------------------------
// Bad input, built from a real stopped member
// ---------------------------------------------------------------------------

/// One damaged copy: what was done, and what inspect must say.
fn check_case(
    inspector: &Inspector,
    src: &Path,
    what: &str,
    mutate: impl FnOnce(&DirCopy),
    code: i32,
    state: &str,
    says: &str,
) -> Value {
    let copy = DirCopy::of(src);
    mutate(&copy);
    let started = Instant::now();
    let run = inspector.run(&copy.data(), &[]);
    let took = started.elapsed();
    assert!(
        run.code == code && run.json()["state"] == state,
        "{what}: expected exit {code} ({state})\n{run}"
    );
    assert!(
        problem(run.json()).contains(&says.to_lowercase()),
        "{what}: the problem should mention {says:?}\n{run}"
    );
    assert!(took < Duration::from_secs(10), "{what}: took {took:?}");
    eprintln!(
        "{what}: exit {code} {state}: {}",
        run.json()["problem"]["message"].as_str().unwrap_or("-")
    );
    run.json().clone()
}

#[test]
fn bad_input_gets_a_clear_error_and_the_right_exit_code_never_a_panic_or_a_hang() {
    let inspector = Inspector::new();
    let cluster = Cluster::builder(EtcdVersion::V3_5)
        .snapshot_count(SNAPSHOT_COUNT)
        .token("inspect-bad-input")
        .start();
    let m = &cluster[0];
    cluster.put_many("bad/", 5 * SNAPSHOT_COUNT as usize, 100);
    m.stop().expect("it ran");
    let src = m.data_dir();
    let baseline = inspector.expect(src, &[], 0, "initialized");
    let last_index = u64_at(&baseline, "/last_index");
    assert!(u64_at(&baseline, "/snapshot/index") > 0, "{baseline:#}");
    let seg = |c: &DirCopy| c.segments().pop().expect("a segment");
    let case = |what: &str, mutate: &dyn Fn(&DirCopy), code: i32, state: &str, says: &str| {
        check_case(&inspector, src, what, mutate, code, state, says)
    };

    // Empty and missing.
    let empty = tempfile::tempdir().unwrap();
    inspector.expect(empty.path(), &[], 0, "empty");
    inspector.expect(&empty.path().join("never-created"), &[], 0, "empty");

    // Garbage.
    case(
        "a WAL segment of garbage",
        &|c| fs::write(seg(c), garbage(256 << 10)).unwrap(),
        12,
        "corrupt",
        ".wal",
    );
    case(
        "a db of garbage",
        &|c| fs::write(c.db(), garbage(256 << 10)).unwrap(),
        12,
        "corrupt",
        "meta",
    );
    case(
        "the .snap in use full of garbage",
        &|c| fs::write(c.newest_snap(), garbage(4096)).unwrap(),
        12,
        "corrupt",
        ".snap",
    );
    case(
        "a *.wal whose name etcd never writes",
        &|c| fs::write(c.wal_dir().join("garbage.wal"), garbage(4096)).unwrap(),
        12,
        "corrupt",
        "bad wal segment name",
    );
    let json = case(
        "stray files in the data dir and in member/",
        &|c| {
            fs::write(c.data().join("notes.txt"), garbage(100)).unwrap();
            fs::write(c.data().join("member/junk"), garbage(100)).unwrap();
        },
        0,
        "initialized",
        "",
    );
    let unexpected = json["unexpected"].to_string();
    assert!(
        unexpected.contains("notes.txt") && unexpected.contains("not written by etcd"),
        "{json:#}"
    );

    // The WAL: truncated, flipped, zeroed, huge length.
    let json = case(
        "the last WAL record cut short (a torn write)",
        &|c| {
            let s = seg(c);
            let f = *frames(&s).last().unwrap();
            File::options()
                .write(true)
                .open(&s)
                .unwrap()
                .set_len(f.offset + 8 + f.len / 2)
                .unwrap();
        },
        0,
        "initialized",
        "",
    );
    assert!(
        json["wal"]["torn_tail"]["message"]
            .as_str()
            .unwrap()
            .contains("past the end"),
        "{json:#}"
    );
    case(
        "a WAL segment cut to 5 bytes",
        &|c| {
            File::options()
                .write(true)
                .open(seg(c))
                .unwrap()
                .set_len(5)
                .unwrap()
        },
        12,
        "corrupt",
        "no metadata",
    );
    let flipped = frames(&m.wal_files()[0])[4];
    let json = case(
        "a flipped byte in an early record",
        &|c| {
            let s = seg(c);
            let at = flipped.offset + 8 + flipped.len - 1;
            let b = read_at(&s, at, 1)[0];
            write_at(&s, at, &[b ^ 0x01]);
        },
        12,
        "corrupt",
        "crc mismatch",
    );
    assert_eq!(u64_at(&json, "/problem/offset"), flipped.offset, "{json:#}");
    // A torn write: a late record whose tail from a sector boundary on is zeros.
    let all = frames(&m.wal_files()[0]);
    let torn = *all
        .iter()
        .rev()
        .find(|f| {
            let body = f.offset + 8;
            let boundary = (body / 512 + 1) * 512;
            boundary < body + f.len
        })
        .expect("a record across a sector boundary");
    let json = case(
        "a zeroed tail from a sector boundary inside a record",
        &|c| {
            let s = seg(c);
            let from = ((torn.offset + 8) / 512 + 1) * 512;
            let end = all.last().unwrap().end();
            write_at(&s, from, &vec![0u8; (end - from) as usize]);
        },
        0,
        "initialized",
        "",
    );
    assert_eq!(
        u64_at(&json, "/wal/torn_tail/offset"),
        torn.offset,
        "{json:#}"
    );
    assert!(u64_at(&json, "/last_index") <= last_index, "{json:#}");
    case(
        "a huge length field",
        &|c| write_at(&seg(c), flipped.offset, &((1u64 << 56) - 1).to_le_bytes()),
        12,
        "corrupt",
        "limit",
    );

    // Zero-length files.
    case(
        "a zero-length WAL segment",
        &|c| fs::write(seg(c), b"").unwrap(),
        12,
        "corrupt",
        "no metadata",
    );
    case(
        "a zero-length db",
        &|c| fs::write(c.db(), b"").unwrap(),
        12,
        "corrupt",
        "meta",
    );
    case(
        "a zero-length .snap in use",
        &|c| fs::write(c.newest_snap(), b"").unwrap(),
        12,
        "corrupt",
        "empty",
    );
    let json = case(
        "a zero-length 0.tmp",
        &|c| fs::write(c.wal_dir().join("0.tmp"), b"").unwrap(),
        0,
        "initialized",
        "",
    );
    assert!(json["unexpected"].to_string().contains("0.tmp"), "{json:#}");

    // The backend.
    case(
        "a db with both meta pages broken",
        &|c| {
            for meta in [0u64, 4096] {
                let at = meta + 16 + 56;
                let b = read_at(&c.db(), at, 1)[0];
                write_at(&c.db(), at, &[!b]);
            }
        },
        12,
        "corrupt",
        "meta",
    );
    case(
        "a WAL without a db",
        &|c| fs::remove_file(c.db()).unwrap(),
        13,
        "partial",
        "without a backend db",
    );

    // member/ without a WAL.
    case(
        "member/ with a db and no WAL",
        &|c| fs::remove_dir_all(c.wal_dir()).unwrap(),
        13,
        "partial",
        "without a wal",
    );
    case(
        "member/ with an empty WAL dir",
        &|c| {
            fs::remove_dir_all(c.wal_dir()).unwrap();
            fs::create_dir(c.wal_dir()).unwrap();
        },
        13,
        "partial",
        "without a wal",
    );
    // What a first start killed within milliseconds leaves (etcd creates
    // member/ and member/snap/, then the db file, then initialises it): etcd
    // starts on it as on an empty directory, so it is empty, never partial
    // (CI stop 22 refused such a joiner forever).
    case(
        "an empty member/",
        &|c| {
            fs::remove_dir_all(c.wal_dir()).unwrap();
            fs::remove_dir_all(c.snap_dir()).unwrap();
        },
        0,
        "empty",
        "",
    );
    case(
        "member/ and an empty member/snap/",
        &|c| {
            fs::remove_dir_all(c.wal_dir()).unwrap();
            fs::remove_dir_all(c.snap_dir()).unwrap();
            fs::create_dir(c.snap_dir()).unwrap();
        },
        0,
        "empty",
        "",
    );
    case(
        "a db of zero bytes and no WAL",
        &|c| {
            fs::remove_dir_all(c.wal_dir()).unwrap();
            fs::remove_dir_all(c.snap_dir()).unwrap();
            fs::create_dir(c.snap_dir()).unwrap();
            fs::write(c.db(), b"").unwrap();
        },
        0,
        "empty",
        "",
    );
    case(
        "a db of zero bytes beside a .snap, no WAL",
        &|c| {
            fs::remove_dir_all(c.wal_dir()).unwrap();
            let snap = c.newest_snap();
            for e in fs::read_dir(c.snap_dir()).unwrap() {
                let p = e.unwrap().path();
                if p != snap {
                    fs::remove_file(p).unwrap();
                }
            }
            fs::write(c.db(), b"").unwrap();
        },
        13,
        "partial",
        "without a wal",
    );
    case(
        "WAL creation interrupted (member/wal.tmp)",
        &|c| fs::rename(c.wal_dir(), c.data().join("member/wal.tmp")).unwrap(),
        13,
        "partial",
        "wal.tmp",
    );

    // Symlinks: never followed, loops never hang.
    case(
        "member a symlink to itself",
        &|c| {
            fs::remove_dir_all(c.data().join("member")).unwrap();
            symlink("member", c.data().join("member")).unwrap();
        },
        12,
        "corrupt",
        "symlink",
    );
    case(
        "member/wal a symlink to itself",
        &|c| {
            fs::remove_dir_all(c.wal_dir()).unwrap();
            symlink("wal", c.wal_dir()).unwrap();
        },
        12,
        "corrupt",
        "symlink",
    );
    case(
        "a WAL segment that is a symlink to itself",
        &|c| {
            let s = seg(c);
            fs::remove_file(&s).unwrap();
            symlink(s.file_name().unwrap(), &s).unwrap();
        },
        12,
        "corrupt",
        "symbolic link",
    );
    case(
        "member/snap/db a symlink to itself",
        &|c| {
            fs::remove_file(c.db()).unwrap();
            symlink("db", c.db()).unwrap();
        },
        12,
        "corrupt",
        "symlink",
    );
    case(
        "member/snap/db a FIFO (opening it would block)",
        &|c| {
            fs::remove_file(c.db()).unwrap();
            nix::unistd::mkfifo(
                &c.db(),
                nix::sys::stat::Mode::S_IRUSR | nix::sys::stat::Mode::S_IWUSR,
            )
            .unwrap();
        },
        12,
        "corrupt",
        "not a regular file",
    );
    // A symlink to a directory is what etcd follows and the agent does not:
    // not damage but a layout it will not read (exit 3), naming --wal-dir.
    case(
        "member/wal a symlink to a valid WAL outside the data dir",
        &|c| {
            let outside = c.dir.path().join("outside-wal");
            fs::rename(c.wal_dir(), &outside).unwrap();
            symlink(&outside, c.wal_dir()).unwrap();
        },
        3,
        "unreadable",
        "--wal-dir",
    );
    let loopy = DirCopy::of(src);
    symlink("loop", loopy.wal_dir().join("loop")).unwrap();
    let json = inspector.expect(&loopy.data(), &[], 0, "initialized");
    assert!(
        json["unexpected"].to_string().contains("symlink"),
        "{json:#}"
    );
    let self_loop = loopy.dir.path().join("wal-loop");
    symlink("wal-loop", &self_loop).unwrap();
    let json = inspector.expect(
        &loopy.data(),
        &["--wal-dir", &self_loop.display().to_string()],
        12,
        "corrupt",
    );
    assert!(problem(&json).contains("cannot list"), "{json:#}");
    // The data dir itself may be a symlink (a subPath mount).
    let link = loopy.dir.path().join("data-link");
    symlink(loopy.data(), &link).unwrap();
    let json = inspector.expect(&link, &[], 0, "initialized");
    assert_eq!(json["member_id"], baseline["member_id"]);

    // Unreadable to the Pod's uid: exit 3, never "empty".
    let pod = DirCopy::of(src);
    chown_recursive(&pod.data(), POD_UID, POD_GID);
    let json = expect_outcome(
        &inspector.run_as_pod(&pod.data(), &["--hash"]),
        0,
        "initialized",
    );
    assert_eq!(
        json["kv_hash"],
        inspector.expect(src, &["--hash"], 0, "initialized")["kv_hash"]
    );
    let root_only = |p: &Path, mode: u32| {
        std::os::unix::fs::lchown(p, Some(0), Some(0)).unwrap();
        fs::set_permissions(p, fs::Permissions::from_mode(mode)).unwrap();
    };
    let restore = |p: &Path, mode: u32| {
        std::os::unix::fs::lchown(p, Some(POD_UID), Some(POD_GID)).unwrap();
        fs::set_permissions(p, fs::Permissions::from_mode(mode)).unwrap();
    };
    for (what, path, mode) in [
        ("the WAL dir", pod.wal_dir(), 0o700),
        ("the snap dir", pod.snap_dir(), 0o700),
        ("a WAL segment", pod.segments().pop().unwrap(), 0o600),
        ("the db", pod.db(), 0o600),
        ("the .snap in use", pod.newest_snap(), 0o600),
        ("the data dir", pod.data(), 0o700),
    ] {
        let old = fs::metadata(&path).unwrap().permissions().mode() & 0o7777;
        root_only(&path, mode);
        let run = inspector.run_as_pod(&pod.data(), &[]);
        assert!(
            run.code == 3 && run.json()["state"] == "unreadable",
            "{what} unreadable to uid {POD_UID}: expected exit 3\n{run}"
        );
        assert!(
            problem(run.json()).contains("permission denied"),
            "{what}\n{run}"
        );
        eprintln!(
            "{what} unreadable: exit 3: {}",
            run.json()["problem"]["message"]
        );
        restore(&path, old);
    }
    expect_outcome(&inspector.run_as_pod(&pod.data(), &[]), 0, "initialized");
}

// ---------------------------------------------------------------------------
// The benchmark's data (scripts/bench)
// ---------------------------------------------------------------------------

/// Not a check: builds the data dir `scripts/bench` measures. A single etcd
/// member of `BENCH_VERSION` (default 3.5, the legacy 3.5.1; `3.6`, `3.7`, `3.5-latest`)
/// takes `BENCH_WAL_MIB` (default 1100) MiB of 1 MiB values through the
/// harness's gRPC bulk writer (`--max-wals=0`: etcd purges no segment), goes
/// quiet and stops; its data dir is then moved to `$BENCH_OUT/data` (same file
/// system) and the status etcd reported before the stop is written to
/// `$BENCH_OUT/status.json`.
#[test]
#[ignore = "builds a gigabyte of WAL for scripts/bench"]
fn bench_builds_a_gigabyte_of_wal_for_scripts_bench() {
    let out = PathBuf::from(
        std::env::var_os("BENCH_OUT").expect("BENCH_OUT: where to leave the data dir"),
    );
    let mib: usize = std::env::var("BENCH_WAL_MIB")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1100);
    let version = std::env::var("BENCH_VERSION")
        .ok()
        .map(|v| {
            crate::fault_sched::world::parse_version(&v)
                .unwrap_or_else(|| panic!("BENCH_VERSION={v}: not an etcd line"))
        })
        .unwrap_or(EtcdVersion::V3_5);
    let cluster = Cluster::builder(version)
        .snapshot_count(500)
        .token("inspect-bench")
        .arg("--quota-backend-bytes=8589934592")
        .arg("--max-wals=0")
        .start();
    let m = &cluster[0];
    cluster.put_many("small/", 1000, 100);
    let stats = cluster.put_many("bench/", mib, BIG_VALUE);
    eprintln!(
        "bench: {} MiB in {} puts in {:.1?} ({:.0} MiB/s)",
        stats.bytes >> 20,
        stats.puts,
        stats.elapsed,
        (stats.bytes >> 20) as f64 / stats.elapsed.as_secs_f64()
    );
    let status = quiet_status(m);
    m.stop().expect("it ran");
    let wal_bytes: u64 = m
        .wal_files()
        .iter()
        .map(|p| fs::metadata(p).unwrap().len())
        .sum();
    assert!(
        wal_bytes >= 1 << 30 || mib < 1024,
        "only {wal_bytes} bytes of WAL"
    );
    fs::rename(m.data_dir(), out.join("data"))
        .unwrap_or_else(|e| panic!("move {} to {}: {e}", m.data_dir().display(), out.display()));
    fs::write(out.join("status.json"), status.to_string()).unwrap();
}
