use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;

use super::*;

fn json(i: &Inspection) -> serde_json::Map<String, serde_json::Value> {
    match serde_json::to_value(i).expect("serializes") {
        serde_json::Value::Object(m) => m,
        other => panic!("not an object: {other}"),
    }
}

#[test]
fn every_state_is_one_flat_object_with_the_same_fields() {
    let paths = Paths::new(Path::new("/d"), None);
    let empty = Inspection::new(&paths);
    let mut before_wal = Inspection::new(&paths);
    before_wal.state = DirState::Unreadable(Failure::at("u".into(), None, None));
    let mut after_wal = Inspection::new(&paths);
    after_wal.state = DirState::Partial(Failure::at("p".into(), None, None)).after(
        &Initialized::blank().log,
        Some(SnapshotPoint { index: 7, term: 2 }),
    );
    let mut initialized = Inspection::new(&paths);
    initialized.state = DirState::Initialized(Box::new(Initialized::blank()));
    let all = [&empty, &before_wal, &after_wal, &initialized];
    let keys: Vec<Vec<String>> = all
        .iter()
        .map(|i| json(i).keys().cloned().collect())
        .collect();
    assert!(keys.iter().all(|k| *k == keys[0]), "{keys:?}");
    assert_eq!(keys[0].len(), 31);
    let state = |i: &Inspection| json(i)["state"].clone();
    assert_eq!(
        all.map(state),
        ["empty", "unreadable", "partial", "initialized"].map(serde_json::Value::from)
    );
    // What a state cannot know is null, what it knows is there.
    assert!(json(&empty)["member_id"].is_null());
    assert!(json(&before_wal)["member_id"].is_null());
    assert_eq!(json(&after_wal)["member_id"], "0000000000000000");
    assert_eq!(json(&after_wal)["snapshot"]["index"], 7);
    assert!(json(&after_wal)["v2_replay"].is_null());
    assert_eq!(json(&after_wal)["problem"]["message"], "p");
    assert!(json(&initialized)["problem"].is_null());
    assert!(json(&initialized)["v2_replay"].is_object());
    assert_eq!(
        json(&initialized)["backend_unread"],
        serde_json::Value::from("")
    );
}

/// Writes an empty file named by `name`'s bytes under `dir`.
fn touch(dir: &Path, name: &[u8]) {
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join(OsStr::from_bytes(name)), b"").unwrap();
}

#[test]
fn a_name_that_is_not_utf8_is_reported_not_skipped() {
    let dir = tempfile::tempdir().unwrap();
    let paths = Paths::new(dir.path(), None);
    touch(dir.path(), b"stray-\xff");
    touch(&paths.wal_dir, b"0.tmp\xfe");
    let r = inspect(&paths, Options::default());
    // member/ without a WAL.
    assert_eq!(r.kind(), DirKind::Partial);
    let seen: Vec<(String, &str)> = r
        .unexpected
        .iter()
        .map(|e| (e.path.display().to_string(), e.note))
        .collect();
    assert_eq!(
        seen,
        [
            (
                dir.path().join("stray-\u{fffd}").display().to_string(),
                "not written by etcd"
            ),
            (
                paths.wal_dir.join("0.tmp\u{fffd}").display().to_string(),
                "not a WAL segment"
            ),
        ]
    );
    // The report stays JSON: the name shows U+FFFD where bytes did not decode.
    assert_eq!(
        json(&r)["unexpected"][0]["path"],
        serde_json::Value::from(dir.path().join("stray-\u{fffd}").display().to_string())
    );
}

/// etcd's `wal.Exist` compares bytes: a `.wal` name that is not UTF-8 makes
/// the directory initialized for etcd, which then finds no segment it can
/// parse and does not start. Never empty, which would let etcd bootstrap.
#[test]
fn a_wal_segment_name_that_is_not_utf8_makes_the_directory_initialized_for_etcd() {
    let dir = tempfile::tempdir().unwrap();
    let paths = Paths::new(dir.path(), None);
    touch(&paths.wal_dir, b"\xff.wal");
    assert!(wal_exists(&paths));
    let r = inspect(&paths, Options::default());
    assert_eq!(r.kind(), DirKind::Corrupt, "{:?}", r.problem());
    let problem = r.problem().unwrap();
    assert_eq!(
        problem.path.as_deref(),
        Some(paths.wal_dir.join(OsStr::from_bytes(b"\xff.wal")).as_path()),
        "{}",
        problem.message
    );
    assert!(serde_json::to_string(&r).is_ok());
}
