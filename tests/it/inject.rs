//! `etcd-member-agent inject`, the binary as a platform team runs it on the
//! manifests of the projects that run etcd (`tests/fixtures/inject/`):
//!
//! * every member shape comes out guarded and passes the Kubernetes schemas,
//!   strictly (`scripts/validate-manifests --no-lint`: the layout is the
//!   project's, the fields are checked), its agent containers setting only env
//!   their subcommand reads;
//! * everything the guard does not add is kept byte for byte: the input is a
//!   subsequence of the output, objects without etcd come out identical, and a
//!   second run changes nothing;
//! * YAML streams on stdin, JSON in JSON out, Lists, `--dry-run` diffs;
//! * a Pod it cannot understand stops the run: exit 2, nothing on stdout, the
//!   flag named.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use serde_json::Value;

use crate::common::{agent, run_command, run_command_with_stdin, AgentRun};
use crate::deploy::help;

const IMAGE: &str = "ghcr.io/example/etcd-member-agent:0.1.0";

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/inject")
}

fn fixture(name: &str) -> PathBuf {
    fixtures().join(name)
}

/// Every fixture the guard can take (all but the bare Pods without a data dir).
const GUARDED: &[&str] = &[
    "cozystack-member-notls.yaml",
    "cozystack-member-tls-restore.yaml",
    "cozystack-member-restore-main.yaml",
    "kamaji-etcd.yaml",
    "bitnami-style.yaml",
    "etcd-io-statefulset.yaml",
    "kubeadm-static-pod.yaml",
];

fn inject(args: &[&str]) -> AgentRun {
    let mut cmd = agent();
    cmd.arg("inject")
        .args(args)
        .env("AGENT_INJECT_IMAGE", IMAGE);
    run_command(cmd)
}

fn inject_stdin(args: &[&str], input: &str) -> AgentRun {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("stdin");
    fs::write(&path, input).expect("write stdin");
    let mut cmd = agent();
    cmd.arg("inject")
        .args(args)
        .env("AGENT_INJECT_IMAGE", IMAGE);
    let stdin = fs::File::open(&path).expect("open stdin");
    run_command_with_stdin(cmd, Stdio::from(stdin))
}

fn docs(text: &str) -> Vec<Value> {
    serde_saphyr::from_multiple::<Value>(text)
        .unwrap_or_else(|e| panic!("not YAML: {e}\n{text}"))
        .into_iter()
        .filter(|d| !d.is_null())
        .collect()
}

/// `scripts/validate-manifests --no-lint --no-render` on `text` (one file).
pub fn validate_strictly(text: &str, what: &str) -> String {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("injected.yaml");
    fs::write(&path, text).expect("write");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/validate-manifests");
    let out = std::process::Command::new(&script)
        .args(["--no-lint", "--no-render"])
        .arg(&path)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", script.display()));
    let text_out = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        out.status.code(),
        Some(0),
        "{what} fails kubernetes-validate --strict (run scripts/setup if a tool is missing):\n{text_out}"
    );
    text_out
}

/// The input's lines are all in the output, in order: the guard only inserted
/// (JSON adds a comma to the member or item it writes after: as the format
/// requires, and nothing else).
fn assert_only_inserted(input: &str, output: &str, what: &str) {
    let json = input.trim_start().starts_with(['{', '[']);
    let norm = |l: &str| {
        if json {
            l.trim_end_matches(',').to_owned()
        } else {
            l.to_owned()
        }
    };
    let mut out = output.lines().map(norm);
    for (n, line) in input.lines().enumerate() {
        let line = norm(line);
        assert!(
            out.any(|o| o == line),
            "{what}: input line {} ({line:?}) is not in the output in order",
            n + 1
        );
    }
}

/// Agent containers (`etcd-agent`, `etcd-preflight`) of every template in `docs`.
fn agent_containers(docs: &[Value]) -> Vec<(String, Value)> {
    let mut out = Vec::new();
    for d in docs {
        let spec = match d["kind"].as_str() {
            Some("Pod") => &d["spec"],
            _ => &d["spec"]["template"]["spec"],
        };
        for c in spec["initContainers"].as_array().into_iter().flatten() {
            let name = c["name"].as_str().unwrap_or_default();
            if name == "etcd-agent" || name == "etcd-preflight" {
                out.push((
                    format!("{}/{}", d["kind"], d["metadata"]["name"]),
                    c.clone(),
                ));
            }
        }
    }
    out
}

#[test]
fn every_shape_is_guarded_and_passes_the_schemas_strictly() {
    for name in GUARDED {
        let path = fixture(name);
        let run = inject(&[path.to_str().unwrap()]);
        run.assert_code(0);
        assert!(run.stderr.contains(": guarded ("), "{name}\n{run}");
        let out_docs = docs(&run.stdout);
        let agents = agent_containers(&out_docs);
        assert_eq!(agents.len(), 2, "{name}: the sidecar and preflight\n{run}");
        let report = validate_strictly(&run.stdout, name);
        for d in &out_docs {
            let line = format!(
                "{} {}/{}",
                "injected.yaml",
                d["kind"].as_str().unwrap(),
                d["metadata"]["name"].as_str().unwrap()
            );
            assert!(
                report.contains(&line),
                "{name}: {line} not validated\n{report}"
            );
        }
        let input = fs::read_to_string(&path).unwrap();
        assert_only_inserted(&input, &run.stdout, name);
    }
}

#[test]
fn injected_containers_set_only_env_their_subcommand_reads() {
    let serve = help("serve").env;
    let preflight = help("preflight").env;
    for name in GUARDED {
        let run = inject(&[fixture(name).to_str().unwrap()]);
        run.assert_code(0);
        for (object, c) in agent_containers(&docs(&run.stdout)) {
            let sub = c["args"][0].as_str().unwrap().to_owned();
            let reads = if sub == "serve" { &serve } else { &preflight };
            let env: Vec<(String, String)> = c["env"]
                .as_array()
                .unwrap()
                .iter()
                .map(|e| {
                    (
                        e["name"].as_str().unwrap().to_owned(),
                        e["value"].as_str().unwrap_or_default().to_owned(),
                    )
                })
                .collect();
            for (var, _) in &env {
                // A definition another value refers to ($(VAR)) is not read by the agent.
                let referenced = env.iter().any(|(_, v)| v.contains(&format!("$({var})")));
                assert!(
                    reads.contains(var) || referenced,
                    "{name} {object} {}: sets {var}, which `{sub} --help` does not name",
                    c["name"]
                );
            }
        }
    }
}

#[test]
fn objects_without_etcd_pass_through_byte_for_byte_and_a_second_run_changes_nothing() {
    let path = fixture("not-etcd.yaml");
    let run = inject(&[path.to_str().unwrap()]);
    run.assert_code(0);
    assert_eq!(run.stdout, fs::read_to_string(&path).unwrap());
    assert!(run.stderr.contains("unchanged: no etcd container"), "{run}");

    for name in GUARDED {
        let first = inject(&[fixture(name).to_str().unwrap()]);
        first.assert_code(0);
        let second = inject_stdin(&[], &first.stdout);
        second.assert_code(0);
        assert_eq!(
            second.stdout, first.stdout,
            "{name}: a second run changed it"
        );
        assert!(
            second.stderr.contains("unchanged: already guarded"),
            "{second}"
        );
    }
}

#[test]
fn a_stream_on_stdin_and_files_together_come_out_as_one_stream() {
    let mut stream = String::new();
    for name in [
        "not-etcd.yaml",
        "kamaji-etcd.yaml",
        "cozystack-member-notls.yaml",
    ] {
        stream.push_str(&fs::read_to_string(fixture(name)).unwrap());
        stream.push_str("---\n");
    }
    let run = inject_stdin(&["-"], &stream);
    run.assert_code(0);
    let out = docs(&run.stdout);
    assert_eq!(out.len(), 6, "{run}");
    assert_eq!(agent_containers(&out).len(), 4);
    assert_only_inserted(&stream, &run.stdout, "stdin");

    let both = inject(&[
        fixture("bitnami-style.yaml").to_str().unwrap(),
        fixture("not-etcd.yaml").to_str().unwrap(),
    ]);
    both.assert_code(0);
    let out = docs(&both.stdout);
    assert_eq!(out.len(), 4, "{both}");
    assert_eq!(agent_containers(&out).len(), 2);
}

#[test]
fn json_comes_out_as_json_in_its_own_indentation_lists_included() {
    let pod = docs(&fs::read_to_string(fixture("cozystack-member-notls.yaml")).unwrap()).remove(0);
    let mut sts = docs(&fs::read_to_string(fixture("kamaji-etcd.yaml")).unwrap()).remove(1);
    // Its null annotations would be replaced, not added to (the YAML test has that).
    sts["spec"]["template"]["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("annotations");
    let list = serde_json::json!({"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": ""}, "items": [pod, sts]});
    // As `kubectl get -o json` prints it: four spaces.
    let mut text = Vec::new();
    let fmt = serde_json::ser::PrettyFormatter::with_indent(b"    ");
    let mut ser = serde_json::Serializer::with_formatter(&mut text, fmt);
    serde::Serialize::serialize(&list, &mut ser).unwrap();
    let text = String::from_utf8(text).unwrap() + "\n";
    let run = inject_stdin(&[], &text);
    run.assert_code(0);
    let out: Value =
        serde_json::from_str(&run.stdout).unwrap_or_else(|e| panic!("not JSON: {e}\n{run}"));
    assert_eq!(agent_containers(out["items"].as_array().unwrap()).len(), 4);
    assert_only_inserted(&text, &run.stdout, "a List as JSON");
    assert!(
        run.stdout
            .contains("\n                    {\n                        \"name\": \"etcd-agent\","),
        "the inserted JSON follows the document's indentation:\n{}",
        run.stdout
    );
    // The schemas know no List: its items, one document each.
    let items: Vec<String> = out["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(Value::to_string)
        .collect();
    validate_strictly(&items.join("\n---\n"), "the List's items");
}

#[test]
fn dry_run_prints_what_would_change_as_a_diff() {
    let path = fixture("kamaji-etcd.yaml");
    let run = inject(&["--dry-run", path.to_str().unwrap()]);
    run.assert_code(0);
    let name = path.display().to_string();
    assert!(
        run.stdout
            .starts_with(&format!("--- {name}\n+++ {name}\n@@ ")),
        "{run}"
    );
    assert!(
        run.stdout.contains("\n+        - name: etcd-agent\n"),
        "{run}"
    );
    assert!(
        run.stdout
            .contains("\n+        etcd-member-agent.cozystack.io/injected: \"0.1.0\"\n"),
        "{run}"
    );
    assert!(
        run.stdout
            .lines()
            .all(|l| !l.starts_with('-') || l.starts_with("---")),
        "only insertions\n{run}"
    );
    let none = inject(&["--dry-run", fixture("not-etcd.yaml").to_str().unwrap()]);
    none.assert_code(0);
    assert_eq!(none.stdout, "", "nothing to change, no diff");
}

#[test]
fn a_pod_it_cannot_understand_stops_the_run_with_exit_2_naming_the_flag() {
    let run = inject(&[
        fixture("kamaji-etcd.yaml").to_str().unwrap(),
        fixture("etcd-io-hack-pods.yaml").to_str().unwrap(),
    ]);
    run.assert_code(2);
    assert_eq!(
        run.stdout, "",
        "nothing written for a pipe into kubectl apply\n{run}"
    );
    assert!(
        run.stderr
            .contains("Pod/etcd0: cannot guard: container etcd0: --data-dir: it is not set"),
        "{run}"
    );
    assert!(run.stderr.contains("nothing was written"), "{run}");

    // The TLS member whose CA no flag names.
    let text = fs::read_to_string(fixture("cozystack-member-restore-main.yaml"))
        .unwrap()
        .replace(
            "    etcd-member-agent.cozystack.io/client-ca-file: /etc/etcd/tls/client/ca.crt\n",
            "    other: x\n",
        );
    let run = inject_stdin(&[], &text);
    run.assert_code(2);
    assert!(run.stderr.contains("--trusted-ca-file"), "{run}");
    assert!(run.stderr.contains("client-ca-file"), "{run}");
}

#[test]
fn usage_errors_are_exit_2() {
    let mut cmd = agent();
    cmd.args(["inject", fixture("kamaji-etcd.yaml").to_str().unwrap()]);
    let run = run_command(cmd);
    run.assert_code(2);
    assert!(run.stderr.contains("--image"), "{run}");
    let run = inject(&["/nonexistent/manifest.yaml"]);
    run.assert_code(2);
    assert!(
        run.stderr
            .contains("cannot read /nonexistent/manifest.yaml"),
        "{run}"
    );
    let run = inject_stdin(&[], "kind: Pod\n  bad: [\n");
    run.assert_code(2);
    assert!(run.stderr.contains("not YAML or JSON"), "{run}");
}
