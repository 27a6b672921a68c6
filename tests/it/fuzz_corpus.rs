//! The committed fuzz corpus, replayed without a fuzz build: every input of
//! `fuzz/corpus/<target>/` through the same function the libFuzzer target calls
//! (`fuzz/src/lib.rs` is included here as a module; `fuzz_targets/<target>.rs`
//! is one call of `fuzz_support::targets::<target>`), each within a time bound.
//! A panic, or an input that takes longer than [`PER_INPUT`], fails the test
//! naming the input; so does a target of `fuzz/Cargo.toml` without a replay, a
//! corpus, or the one-call body. `scripts/fuzz --replay` does the same with the
//! instrumented binaries, and then fuzzes; this is the part CI runs every time.

use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::{Duration, Instant};

#[path = "../../fuzz/src/lib.rs"]
#[allow(dead_code)]
mod fuzz_support;

/// The bound on one input (a debug build; `scripts/fuzz` gives the optimised
/// binaries `FUZZ_TIMEOUT`, 10 s).
const PER_INPUT: Duration = Duration::from_secs(5);

fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz")
}

/// The `[[bin]]` names of `fuzz/Cargo.toml`, in order.
fn bin_targets() -> Vec<String> {
    let manifest = std::fs::read_to_string(fuzz_dir().join("Cargo.toml")).unwrap();
    let mut names = Vec::new();
    let mut in_bin = false;
    for line in manifest.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            in_bin = line == "[[bin]]";
        } else if in_bin {
            if let Some(name) = line.strip_prefix("name = \"") {
                names.push(name.trim_end_matches('"').to_string());
            }
        }
    }
    names
}

/// The files of `dir`, sorted.
fn inputs(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    files
}

#[test]
fn every_target_has_a_replay_a_corpus_and_the_shared_body() {
    let bins = bin_targets();
    let mut names: Vec<String> = fuzz_support::targets::NAMES
        .iter()
        .map(|s| s.to_string())
        .collect();
    assert_eq!(
        bins.len(),
        15,
        "fuzz/Cargo.toml's [[bin]] sections: {bins:?}"
    );
    let mut sorted = bins.clone();
    sorted.sort();
    names.sort();
    assert_eq!(
        sorted, names,
        "fuzz/Cargo.toml's targets and fuzz_support::targets::NAMES differ"
    );
    for name in &bins {
        assert!(
            fuzz_support::targets::run(name, b"").is_some(),
            "{name}: no replay in fuzz_support::targets::run"
        );
        let source =
            std::fs::read_to_string(fuzz_dir().join(format!("fuzz_targets/{name}.rs"))).unwrap();
        let call = format!("fuzz_support::targets::{name}(");
        assert!(
            source.contains(&call),
            "fuzz_targets/{name}.rs does not call {call}…): the replay would test other code"
        );
        let corpus = fuzz_dir().join("corpus").join(name);
        assert!(
            !inputs(&corpus).is_empty(),
            "{}: no committed inputs",
            corpus.display()
        );
    }
    // This thread's scratch directory (the replays above used it).
    let _ = std::fs::remove_dir_all(fuzz_support::scratch());
}

#[test]
fn every_committed_fuzz_input_runs_through_its_target_without_a_panic_or_a_hang() {
    let mut jobs = Vec::new();
    for name in bin_targets() {
        for input in inputs(&fuzz_dir().join("corpus").join(&name)) {
            jobs.push((name.clone(), input));
        }
    }
    let total = jobs.len();
    // One worker runs the inputs in turn (one thread's targets share one scratch directory); this
    // thread bounds each one. A hung worker cannot be stopped, but the test
    // fails at once, naming the input, and the process ends with it.
    let (tx, rx) = mpsc::channel::<Result<Duration, String>>();
    let worker_jobs = jobs.clone();
    std::thread::spawn(move || {
        for (name, input) in worker_jobs {
            let bytes = std::fs::read(&input).unwrap();
            let t = Instant::now();
            let outcome = std::panic::catch_unwind(|| fuzz_support::targets::run(&name, &bytes));
            let sent = match outcome {
                Ok(Some(())) => tx.send(Ok(t.elapsed())),
                Ok(None) => tx.send(Err("not a target".into())),
                Err(panic) => tx.send(Err(panic
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_else(|| "a panic".into()))),
            };
            if sent.is_err() {
                break;
            }
        }
        let _ = std::fs::remove_dir_all(fuzz_support::scratch());
    });
    let started = Instant::now();
    let mut slowest = (Duration::ZERO, String::new());
    for (name, input) in &jobs {
        let what = format!("{name} on {}", input.display());
        match rx.recv_timeout(PER_INPUT) {
            Ok(Ok(took)) => {
                if took > slowest.0 {
                    slowest = (took, what);
                }
            }
            Ok(Err(panic)) => panic!("{what}: panicked: {panic}"),
            Err(mpsc::RecvTimeoutError::Timeout) => {
                panic!("{what}: still running after {PER_INPUT:?}")
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => panic!("{what}: the worker died"),
        }
    }
    eprintln!(
        "replayed {total} inputs of {} targets in {:?}; slowest {:?} ({})",
        bin_targets().len(),
        started.elapsed(),
        slowest.0,
        slowest.1
    );
}
