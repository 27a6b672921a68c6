//! The deployment manifests (`deploy/`), the `Dockerfile` and the binary agree.
//!
//! * `scripts/validate-manifests` passes on `deploy/` (yamllint, and every object
//!   validated offline against the Kubernetes schemas), and fails on broken
//!   copies: a wrong type, a misspelled field, a duplicate key.
//! * Every agent container in every Pod under `deploy/` runs a subcommand the
//!   binary has, with only flags its `--help` lists, and sets only env vars the
//!   subcommand reads (clap prints `[env: NAME=]` for each): a renamed flag or
//!   variable breaks this test, not a member Pod in production.
//! * The example Pod is wired together: the tools volume from `install` to
//!   `restore`, the verdict file from `preflight` to the sidecar, the etcd
//!   container's readiness on the sidecar's `/readyz`, the security context.
//! * The example Pod's commands run here with the Pod's own env (paths moved
//!   into a temp dir): `install` copies, `restore` and `preflight` fail closed
//!   with 14 and a termination message (no peer, no API server here), and the
//!   sidecar answers its liveness path and keeps its readiness path at 503.
//! * The Dockerfile builds what `scripts/build-static` builds and puts it where
//!   the manifests run it.
//!
//! The manifests are read through Python (PyYAML comes with yamllint): the crate
//! has no YAML parser and gains none for a test. When the Python tools are
//! missing, the tests fail saying so: `scripts/setup` installs them, and the
//! README's test command (`scripts/test`) runs it first.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::Value;

use crate::common::free_port;

const BIN: &str = env!("CARGO_BIN_EXE_etcd-member-agent");
const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// `scripts/validate-manifests` exits with this when a Python tool is missing.
const VALIDATOR_TOOLS_MISSING: i32 = 3;
const SETUP_HINT: &str = "the Python tools (PyYAML, yamllint, kubernetes-validate) are missing: \
     run scripts/setup, which installs them (the README's test command, scripts/test, runs it first)";

/// The uid and gid the operator runs etcd with, and the distroless `nonroot` user.
const NONROOT: i64 = 65532;
const EXAMPLE_POD: &str = "deploy/overlays/example/pod.yaml";
/// Where the agent image keeps the binary (the Dockerfile's COPY destination).
const IMAGE_BINARY: &str = "/usr/local/bin/etcd-member-agent";

fn root() -> PathBuf {
    PathBuf::from(ROOT)
}

// ---------------------------------------------------------------------------
// The validator
// ---------------------------------------------------------------------------

/// Exit code and combined output of `scripts/validate-manifests args`.
fn validate(args: &[&Path]) -> (i32, String) {
    let script = root().join("scripts/validate-manifests");
    let out = Command::new(&script)
        .args(args)
        .current_dir(root())
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e} ({SETUP_HINT})", script.display()));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let code = out.status.code().unwrap_or(-1);
    assert_ne!(code, VALIDATOR_TOOLS_MISSING, "{text}\n{SETUP_HINT}");
    (code, text)
}

/// Copies the example Pod into a fresh directory, applies `edit` to its text, and
/// runs the validator on the copy (after checking the unedited copy passes, so a
/// failure is the edit's doing, not the copy's location).
fn validate_edited_example(edit: impl FnOnce(&str) -> String) -> (i32, String) {
    let original = fs::read_to_string(root().join(EXAMPLE_POD)).expect("read the example Pod");
    let dir = tempfile::tempdir().expect("tempdir");
    let copy = dir.path().join("pod.yaml");
    fs::write(&copy, &original).expect("write the copy");
    let (code, text) = validate(&[&copy]);
    assert_eq!(code, 0, "the unedited copy must pass:\n{text}");
    let edited = edit(&original);
    assert_ne!(edited, original, "the edit changed nothing");
    fs::write(&copy, edited).expect("write the broken copy");
    validate(&[&copy])
}

#[test]
fn deploy_manifests_pass_the_offline_validator() {
    let (code, text) = validate(&[]);
    assert_eq!(code, 0, "scripts/validate-manifests failed:\n{text}");
    for expected in [
        "deploy/base/role.yaml Role/etcd-member-agent",
        "deploy/base/rolebinding.yaml RoleBinding/etcd-member-agent",
        "deploy/base/serviceaccount.yaml ServiceAccount/etcd-member-agent",
        "deploy/overlays/example/pod.yaml Pod/etcd-7xk2p",
        "deploy/overlays/example/role-resource-names.yaml Role/etcd-member-agent",
        "deploy/fleet/clusterrole.yaml ClusterRole/etcd-member-agent-fleet",
        "deploy/fleet/deployment.yaml Deployment/etcd-member-agent-fleet",
    ] {
        assert!(
            text.contains(&format!("ok   {expected}")),
            "{expected} was not validated:\n{text}"
        );
    }
    assert!(text.contains("schemas (kubernetes-validate"), "{text}");
}

#[test]
fn a_pod_whose_containers_is_a_number_fails_validation() {
    let (code, text) = validate_edited_example(|pod| {
        // Replace the `containers:` list (indented under `spec:`) with a number.
        let mut out = Vec::new();
        let mut skipping = false;
        for line in pod.lines() {
            if line == "  containers:" {
                out.push("  containers: 5".to_owned());
                skipping = true;
                continue;
            }
            let indent = line.len() - line.trim_start().len();
            if skipping && !line.trim().is_empty() && indent <= 2 {
                skipping = false;
            }
            if !skipping {
                out.push(line.to_owned());
            }
        }
        out.join("\n") + "\n"
    });
    assert_eq!(code, 1, "{text}");
    assert!(
        text.contains("at spec.containers: 5 is not of type 'array'"),
        "{text}"
    );
    assert!(text.contains("pod.yaml Pod/etcd-7xk2p"), "{text}");
}

#[test]
fn a_misspelled_field_fails_strict_validation() {
    let (code, text) = validate_edited_example(|pod| {
        pod.replacen("readOnlyRootFilesystem", "readOnlyRootFileSystem", 1)
    });
    assert_eq!(code, 1, "{text}");
    assert!(
        text.contains("'readOnlyRootFileSystem' was unexpected"),
        "{text}"
    );
}

#[test]
fn a_duplicate_key_fails_the_yaml_lint() {
    // YAML parsers keep the last of two equal keys silently; yamllint does not.
    let (code, text) = validate_edited_example(|pod| {
        pod.replacen(
            "  hostname: etcd-7xk2p\n",
            "  hostname: etcd-7xk2p\n  hostname: etcd-m4q9z\n",
            1,
        )
    });
    assert_eq!(code, 1, "{text}");
    assert!(text.contains("yamllint key-duplicates"), "{text}");
}

// ---------------------------------------------------------------------------
// Reading the manifests
// ---------------------------------------------------------------------------

/// Every YAML document in `path`, as JSON.
fn yaml_docs(path: &Path) -> Vec<Value> {
    const TO_JSON: &str = "import json, sys, yaml\n\
        json.dump([d for d in yaml.safe_load_all(open(sys.argv[1])) if d is not None], sys.stdout)";
    let out = Command::new("python3")
        .args(["-c", TO_JSON])
        .arg(path)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("cannot run python3: {e} ({SETUP_HINT})"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !stderr.contains("No module named"),
        "{stderr}\n{SETUP_HINT}"
    );
    assert!(
        out.status.success(),
        "cannot read {}: {stderr}",
        path.display()
    );
    match serde_json::from_slice(&out.stdout).expect("python printed JSON") {
        Value::Array(docs) => docs,
        other => panic!("expected a list of documents, got {other}"),
    }
}

/// Every `*.yaml` under `deploy/`, sorted.
fn deploy_files() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in fs::read_dir(dir).expect("read_dir") {
            let path = entry.expect("dir entry").path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "yaml" || e == "yml") {
                out.push(path);
            }
        }
    }
    let mut files = Vec::new();
    walk(&root().join("deploy"), &mut files);
    files.sort();
    files
}

fn is_kustomization(path: &Path) -> bool {
    path.file_name()
        .is_some_and(|n| n == "kustomization.yaml" || n == "kustomization.yml")
}

/// Every Pod under `deploy/`, with the file it is in.
fn pods() -> Vec<(PathBuf, Value)> {
    let mut pods = Vec::new();
    for file in deploy_files() {
        if is_kustomization(&file) || file.file_name().is_some_and(|n| n == ".yamllint.yaml") {
            continue;
        }
        for doc in yaml_docs(&file) {
            if doc["kind"] == "Pod" {
                pods.push((file.clone(), doc));
            } else if doc["kind"] == "Deployment" {
                // Its Pods, as the template makes them.
                let template = &doc["spec"]["template"];
                pods.push((
                    file.clone(),
                    serde_json::json!({
                        "kind": "Pod",
                        "metadata": template["metadata"],
                        "spec": template["spec"],
                    }),
                ));
            }
        }
    }
    assert!(!pods.is_empty(), "no Pod under deploy/");
    pods
}

fn example_pod() -> Value {
    let docs = yaml_docs(&root().join(EXAMPLE_POD));
    assert_eq!(docs.len(), 1, "{EXAMPLE_POD} holds one Pod");
    docs.into_iter().next().expect("one document")
}

fn str_list(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| {
            a.iter()
                .map(|s| s.as_str().expect("a string").to_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// A container of a Pod, init containers first, in order.
fn containers(pod: &Value) -> Vec<&Value> {
    let spec = &pod["spec"];
    let mut all: Vec<&Value> = Vec::new();
    for key in ["initContainers", "containers"] {
        if let Some(list) = spec[key].as_array() {
            all.extend(list);
        }
    }
    all
}

fn name(container: &Value) -> &str {
    container["name"].as_str().expect("container name")
}

fn container<'a>(pod: &'a Value, wanted: &str) -> &'a Value {
    containers(pod)
        .into_iter()
        .find(|c| name(c) == wanted)
        .unwrap_or_else(|| panic!("no container {wanted}"))
}

/// The env var names and literal values of a container (valueFrom gives "").
fn env(container: &Value) -> BTreeMap<String, String> {
    container["env"]
        .as_array()
        .map(|list| {
            list.iter()
                .map(|e| {
                    (
                        e["name"].as_str().expect("env name").to_owned(),
                        e["value"].as_str().unwrap_or_default().to_owned(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

fn mount_path<'a>(container: &'a Value, volume: &str) -> Option<&'a str> {
    container["volumeMounts"]
        .as_array()?
        .iter()
        .find(|m| m["name"] == volume)
        .and_then(|m| m["mountPath"].as_str())
}

/// The volume mounted at `path` in `container`, and whether read-only.
fn volume_at(container: &Value, path: &str) -> Option<(String, bool)> {
    container["volumeMounts"]
        .as_array()?
        .iter()
        .find(|m| m["mountPath"] == path)
        .map(|m| {
            (
                m["name"].as_str().expect("mount name").to_owned(),
                m["readOnly"] == true,
            )
        })
}

fn volume<'a>(pod: &'a Value, name: &str) -> &'a Value {
    pod["spec"]["volumes"]
        .as_array()
        .expect("volumes")
        .iter()
        .find(|v| v["name"] == name)
        .unwrap_or_else(|| panic!("no volume {name}"))
}

/// An agent container's subcommand and its other arguments, or None for a
/// container that does not run the agent. The agent image's entrypoint is the
/// binary, so a container without `command` runs `args` through it.
fn agent_argv(container: &Value) -> Option<(String, Vec<String>)> {
    let command = str_list(&container["command"]);
    let args = str_list(&container["args"]);
    let argv: Vec<String> = if command.is_empty() {
        let image = container["image"].as_str().unwrap_or_default();
        if !image.contains("etcd-member-agent") {
            return None;
        }
        args
    } else {
        let program = Path::new(&command[0]);
        if program.file_name().is_none_or(|n| n != "etcd-member-agent") {
            return None;
        }
        command[1..].iter().chain(&args).cloned().collect()
    };
    let (sub, rest) = argv
        .split_first()
        .unwrap_or_else(|| panic!("container {} names no subcommand", name(container)));
    Some((sub.clone(), rest.to_vec()))
}

/// Env var names that the agent (not etcd, not Kubernetes) would read.
fn looks_like_agent_env(var: &str) -> bool {
    const PREFIXES: [&str; 9] = [
        "ETCD_",
        "ETCDUTL_",
        "AGENT_",
        "POD_",
        "TOOLS_",
        "S3_",
        "AWS_",
        "PVC_",
        "SNAPSHOT_",
    ];
    PREFIXES.iter().any(|p| var.starts_with(p)) || var == "TERMINATION_LOG" || var == "KUBECONFIG"
}

// ---------------------------------------------------------------------------
// The binary's --help
// ---------------------------------------------------------------------------

fn help_text(args: &[&str]) -> String {
    let out = Command::new(BIN)
        .args(args)
        .env_clear()
        .stdin(Stdio::null())
        .output()
        .expect("run the agent");
    assert!(out.status.success(), "{args:?} failed");
    String::from_utf8(out.stdout).expect("utf-8 help")
}

/// The subcommands `etcd-member-agent --help` lists.
fn subcommands() -> BTreeSet<String> {
    let text = help_text(&["--help"]);
    text.lines()
        .skip_while(|l| l.trim() != "Commands:")
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .filter_map(|l| l.split_whitespace().next())
        .filter(|s| *s != "help")
        .map(str::to_owned)
        .collect()
}

/// What `etcd-member-agent <sub> --help` lists.
#[derive(Debug)]
struct Help {
    /// `--long` and `-s` flags.
    flags: BTreeSet<String>,
    /// The env vars of `[env: NAME=]` (or `[env: NAME]` when values are hidden).
    env: BTreeSet<String>,
}

fn help(sub: &str) -> Help {
    let text = help_text(&[sub, "--help"]);
    let mut flags = BTreeSet::new();
    for line in text.lines() {
        let indent = line.len() - line.trim_start().len();
        if !(2..=6).contains(&indent) || !line.trim_start().starts_with('-') {
            continue;
        }
        // `  -o, --output <FORMAT>  ...`, `      --kube [<KUBE>]`
        for token in line.split_whitespace() {
            let token = token.trim_end_matches(',');
            if token.starts_with('-') {
                flags.insert(token.to_owned());
            } else if !(token.starts_with('<') || token.starts_with('[')) {
                break;
            }
        }
    }
    // clap wraps long lines: `[env:` and the name may be split by a newline.
    let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
    let env = flat
        .split("[env: ")
        .skip(1)
        .map(|rest| {
            rest.chars()
                .take_while(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || *c == '_')
                .collect::<String>()
        })
        .filter(|n| !n.is_empty())
        .collect();
    Help { flags, env }
}

// ---------------------------------------------------------------------------
// Manifests against the binary
// ---------------------------------------------------------------------------

#[test]
fn agent_containers_run_subcommands_and_flags_the_binary_has() {
    let subs = subcommands();
    assert!(
        subs.contains("preflight") && subs.contains("serve"),
        "{subs:?}"
    );
    let mut seen = BTreeSet::new();
    for (file, pod) in pods() {
        for c in containers(&pod) {
            let Some((sub, rest)) = agent_argv(c) else {
                continue;
            };
            let at = format!("{} container {}", file.display(), name(c));
            assert!(
                subs.contains(&sub),
                "{at}: no subcommand {sub:?} in {subs:?}"
            );
            seen.insert(sub.clone());
            let help = help(&sub);
            for arg in rest.iter().filter(|a| a.starts_with('-')) {
                let flag = arg.split('=').next().expect("split yields one part");
                assert!(
                    help.flags.contains(flag),
                    "{at}: `{sub} --help` lists no {flag} (it lists {:?})",
                    help.flags
                );
            }
        }
    }
    for expected in ["install", "restore", "preflight", "serve", "fleet"] {
        assert!(
            seen.contains(expected),
            "no Pod under deploy/ runs {expected}"
        );
    }
}

#[test]
fn agent_containers_set_only_env_vars_their_subcommand_reads() {
    for (file, pod) in pods() {
        for c in containers(&pod) {
            let Some((sub, _)) = agent_argv(c) else {
                continue;
            };
            let at = format!("{} container {} ({sub})", file.display(), name(c));
            let reads = help(&sub).env;
            let unread: Vec<String> = env(c)
                .into_keys()
                .filter(|v| looks_like_agent_env(v) && !reads.contains(v))
                .collect();
            assert!(
                unread.is_empty(),
                "{at} sets {unread:?}, which `{sub} --help` does not name (it reads {reads:?})"
            );
        }
    }
}

#[test]
fn the_etcd_container_sets_no_agent_env() {
    // etcd reads every ETCD_* variable as its own flag and refuses to start when
    // one conflicts with a command-line flag: agent env stays in agent containers.
    let pod = example_pod();
    let etcd = container(&pod, "etcd");
    assert!(agent_argv(etcd).is_none());
    let agentish: Vec<String> = env(etcd)
        .into_keys()
        .filter(|v| looks_like_agent_env(v))
        .collect();
    assert!(agentish.is_empty(), "the etcd container sets {agentish:?}");
}

#[test]
fn the_example_pod_wires_install_restore_preflight_and_serve_together() {
    let pod = example_pod();
    let inits: Vec<&str> = pod["spec"]["initContainers"]
        .as_array()
        .expect("initContainers")
        .iter()
        .map(name)
        .collect();
    // The sidecar is a native sidecar started first, so it runs while
    // preflight decides (docs/commands.md § serve); the other init containers run to completion.
    assert_eq!(inits, ["agent", "install", "restore", "preflight"]);
    let names: Vec<&str> = pod["spec"]["containers"]
        .as_array()
        .expect("containers")
        .iter()
        .map(name)
        .collect();
    assert_eq!(names, ["etcd"]);
    for c in containers(&pod) {
        let expected = if name(c) == "agent" {
            Some("Always")
        } else {
            None
        };
        assert_eq!(c["restartPolicy"].as_str(), expected, "{}", name(c));
    }
    assert_eq!(
        agent_argv(container(&pod, "agent"))
            .map(|(sub, _)| sub)
            .as_deref(),
        Some("serve")
    );

    // install copies into the tools volume; restore runs the copy from it,
    // inside the etcd image.
    let install = container(&pod, "install");
    let tools_dir = env(install)["TOOLS_DEST_DIR"].clone();
    let (tools_volume, ro) = volume_at(install, &tools_dir).expect("install mounts TOOLS_DEST_DIR");
    assert!(!ro, "install must write the tools volume");
    assert!(volume(&pod, &tools_volume)["emptyDir"].is_object());
    let restore = container(&pod, "restore");
    assert_eq!(
        str_list(&restore["command"])[0],
        format!("{tools_dir}/etcd-member-agent")
    );
    assert_eq!(mount_path(restore, &tools_volume), Some(tools_dir.as_str()));
    assert_eq!(restore["image"], container(&pod, "etcd")["image"]);
    let data_dir = "/var/lib/etcd";
    assert_eq!(volume_at(restore, data_dir), Some(("data".into(), false)));

    // preflight writes the verdict into a volume the sidecar reads.
    let preflight = container(&pod, "preflight");
    let serve = container(&pod, "agent");
    let verdict = env(preflight)["AGENT_VERDICT_FILE"].clone();
    assert_eq!(env(serve)["AGENT_VERDICT_FILE"], verdict);
    let verdict_dir = Path::new(&verdict)
        .parent()
        .expect("a directory")
        .to_str()
        .expect("utf-8");
    let (run_volume, ro) =
        volume_at(preflight, verdict_dir).expect("preflight mounts the verdict dir");
    assert!(!ro, "preflight must write the verdict");
    assert_eq!(
        volume_at(serve, verdict_dir),
        Some((run_volume.clone(), true))
    );
    assert!(volume(&pod, &run_volume)["emptyDir"].is_object());

    // Only restore writes the data dir; preflight and serve read it.
    for (c, writes) in [(restore, true), (preflight, false), (serve, false)] {
        assert_eq!(
            volume_at(c, data_dir),
            Some(("data".into(), !writes)),
            "{}",
            name(c)
        );
        assert_eq!(env(c)["ETCD_DATA_DIR"], data_dir);
    }

    // The etcd container is ready when the sidecar's /readyz says so.
    let listen = env(serve)
        .get("AGENT_HTTP_LISTEN")
        .cloned()
        .unwrap_or_else(|| "0.0.0.0:9466".into());
    let port: i64 = listen
        .rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .expect("a port");
    let probe = &container(&pod, "etcd")["readinessProbe"]["httpGet"];
    assert_eq!(probe["path"], "/readyz");
    assert_eq!(probe["port"], port);
    assert!(serve["ports"]
        .as_array()
        .expect("sidecar ports")
        .iter()
        .any(|p| p["containerPort"] == port));

    // Every agent container knows this Pod start (the downward API's UID):
    // serve never takes a verdict file of an earlier Pod start.
    for c in [restore, preflight, serve] {
        let uid = c["env"]
            .as_array()
            .expect("env")
            .iter()
            .find(|e| e["name"] == "POD_UID")
            .unwrap_or_else(|| panic!("{} has no POD_UID", name(c)));
        assert_eq!(uid["valueFrom"]["fieldRef"]["fieldPath"], "metadata.uid");
    }

    // The operator's reality: etcd 3.6.11, restore finding the image's etcdutl
    // by itself, `<cluster>-<random>` member names.
    assert_eq!(
        container(&pod, "etcd")["image"],
        "quay.io/coreos/etcd:v3.6.11"
    );
    assert!(!env(restore).contains_key("ETCDUTL_PATH"));
    let pod_name = pod["metadata"]["name"].as_str().expect("a name");
    assert!(
        pod_name.starts_with("etcd-") && pod_name != "etcd-0",
        "{pod_name}"
    );

    // Refusals are readable from the Pod's status.
    for c in [restore, preflight] {
        let path = c["terminationMessagePath"]
            .as_str()
            .unwrap_or("/dev/termination-log");
        assert_eq!(env(c)["TERMINATION_LOG"], path, "{}", name(c));
    }
}

#[test]
fn agent_containers_run_as_nonroot_65532_read_only_without_capabilities() {
    for (file, pod) in pods() {
        let pod_sc = &pod["spec"]["securityContext"];
        assert_eq!(pod_sc["runAsNonRoot"], true, "{}", file.display());
        for c in containers(&pod) {
            if agent_argv(c).is_none() {
                continue;
            }
            let at = format!("{} container {}", file.display(), name(c));
            let sc = &c["securityContext"];
            assert_eq!(sc["runAsNonRoot"], true, "{at}");
            assert_eq!(sc["runAsUser"], NONROOT, "{at}");
            assert_eq!(sc["runAsGroup"], NONROOT, "{at}");
            assert_eq!(sc["readOnlyRootFilesystem"], true, "{at}");
            assert_eq!(sc["allowPrivilegeEscalation"], false, "{at}");
            assert_eq!(str_list(&sc["capabilities"]["drop"]), ["ALL"], "{at}");
            assert_eq!(sc["seccompProfile"]["type"], "RuntimeDefault", "{at}");
            assert_eq!(
                c["terminationMessagePolicy"], "FallbackToLogsOnError",
                "{at}"
            );
        }
    }
}

#[test]
fn only_agent_containers_get_the_service_account_token() {
    let pod = example_pod();
    assert_eq!(pod["spec"]["serviceAccountName"], "etcd-member-agent");
    assert_eq!(pod["spec"]["automountServiceAccountToken"], false);
    let token_dir = "/var/run/secrets/kubernetes.io/serviceaccount";
    for c in containers(&pod) {
        let mounted = volume_at(c, token_dir);
        match agent_argv(c).map(|(sub, _)| sub).as_deref() {
            Some("preflight" | "restore" | "serve") => {
                let (volume_name, ro) =
                    mounted.unwrap_or_else(|| panic!("{} needs the API token", name(c)));
                assert!(ro);
                assert!(volume(&pod, &volume_name)["projected"]["sources"]
                    .as_array()
                    .expect("projected sources")
                    .iter()
                    .any(|s| s["serviceAccountToken"]["path"] == "token"));
                assert_eq!(env(c)["AGENT_KUBE"], "true", "{}", name(c));
            }
            _ => assert!(mounted.is_none(), "{} must not get the token", name(c)),
        }
    }
}

#[test]
fn every_path_a_kustomization_names_exists_and_is_a_whole_object() {
    // Without kustomize on the machine, the validator checks these files one by
    // one: that covers the rendering only if each is a complete object.
    let kustomizations: Vec<PathBuf> = deploy_files()
        .into_iter()
        .filter(|p| is_kustomization(p))
        .collect();
    let rel: BTreeSet<String> = kustomizations
        .iter()
        .map(|p| {
            p.strip_prefix(root())
                .expect("under the repo")
                .display()
                .to_string()
        })
        .collect();
    for expected in [
        "deploy/base/kustomization.yaml",
        "deploy/overlays/example/kustomization.yaml",
        "deploy/fleet/kustomization.yaml",
    ] {
        assert!(rel.contains(expected), "{expected} missing: {rel:?}");
    }
    for k in &kustomizations {
        let dir = k.parent().expect("a directory");
        let doc = yaml_docs(k).pop().expect("a kustomization");
        let mut named = Vec::new();
        for key in ["resources", "components"] {
            named.extend(str_list(&doc[key]));
        }
        let patches: Vec<String> = doc["patches"]
            .as_array()
            .map(|ps| {
                ps.iter()
                    .map(|p| {
                        p["path"]
                            .as_str()
                            .unwrap_or_else(|| {
                                panic!("{}: inline patches are not checkable", k.display())
                            })
                            .to_owned()
                    })
                    .collect()
            })
            .unwrap_or_default();
        named.extend(patches);
        assert!(!named.is_empty(), "{} names nothing", k.display());
        for entry in named {
            let path = dir.join(&entry);
            assert!(path.exists(), "{}: {entry} does not exist", k.display());
            if path.is_dir() {
                assert!(
                    path.join("kustomization.yaml").is_file(),
                    "{}: {entry} is a directory without kustomization.yaml",
                    k.display()
                );
                continue;
            }
            for doc in yaml_docs(&path) {
                for key in ["apiVersion", "kind"] {
                    assert!(doc[key].is_string(), "{}: no {key}", path.display());
                }
                assert!(doc["metadata"]["name"].is_string(), "{}", path.display());
            }
        }
    }
    let overlay = yaml_docs(&root().join("deploy/overlays/example/kustomization.yaml"))
        .pop()
        .expect("the overlay");
    assert!(str_list(&overlay["resources"]).contains(&"pod.yaml".to_owned()));
    assert!(
        overlay["namespace"].is_string(),
        "the overlay sets the namespace"
    );
}

#[test]
fn the_dockerfile_builds_the_static_binary_the_manifests_run() {
    let dockerfile = fs::read_to_string(root().join("Dockerfile")).expect("Dockerfile");
    let toolchain = fs::read_to_string(root().join("rust-toolchain.toml")).expect("toolchain");
    let build_static =
        fs::read_to_string(root().join("scripts/build-static")).expect("build-static");
    let channel = toolchain
        .lines()
        .find_map(|l| l.trim().strip_prefix("channel = "))
        .expect("a pinned channel")
        .trim_matches('"');
    let minor: Vec<&str> = channel.split('.').take(2).collect();
    let from: Vec<&str> = dockerfile
        .lines()
        .filter_map(|l| l.strip_prefix("FROM "))
        .collect();
    assert_eq!(
        from,
        [
            format!("rust:{}-bookworm AS build", minor.join(".")).as_str(),
            "gcr.io/distroless/static-debian12:nonroot",
        ],
        "two stages: the pinned toolchain, then distroless"
    );
    for needle in [
        "protobuf-compiler",
        "libprotobuf-dev",
        "cargo build --release --locked",
        "RUSTFLAGS=\"-C target-feature=+crt-static\"",
        "--target x86_64-unknown-linux-gnu",
        "USER 65532:65532",
        &format!("ENTRYPOINT [\"{IMAGE_BINARY}\"]"),
        &format!("release/etcd-member-agent {IMAGE_BINARY}"),
    ] {
        assert!(
            dockerfile.contains(needle),
            "the Dockerfile lacks {needle:?}"
        );
    }
    for needle in [
        "-C target-feature=+crt-static",
        "target=x86_64-unknown-linux-gnu",
    ] {
        assert!(
            build_static.contains(needle),
            "scripts/build-static changed ({needle:?}): keep the Dockerfile in step"
        );
    }
    // The manifests run the binary where the image has it.
    for (file, pod) in pods() {
        for c in containers(&pod) {
            let image = c["image"].as_str().unwrap_or_default();
            if image.contains("etcd-member-agent") {
                assert_eq!(
                    str_list(&c["command"]).first().map(String::as_str),
                    Some(IMAGE_BINARY),
                    "{} container {}",
                    file.display(),
                    name(c)
                );
            }
        }
    }
}

// ---------------------------------------------------------------------------
// The example Pod's commands, run here with the Pod's own configuration
// ---------------------------------------------------------------------------

/// The namespace the example overlay puts the Pod in (the downward API's value).
const EXAMPLE_NAMESPACE: &str = "etcd-example";
/// The Pod UID the downward API would give (`metadata.uid`).
const EXAMPLE_POD_UID: &str = "5b0c3f2e-8d1a-4c6e-9f0b-2a7d1e4c8b93";

/// A container's env as the kubelet would give it, with every absolute path moved
/// under `root` (so `/var/lib/etcd` is `<root>/var/lib/etcd`), the downward API
/// resolved, and an empty HOME so no kubeconfig of this machine is found.
fn env_under(container: &Value, root: &Path, pod_name: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for e in container["env"].as_array().into_iter().flatten() {
        let name = e["name"].as_str().expect("env name").to_owned();
        let value = match (&e["value"], &e["valueFrom"]["fieldRef"]["fieldPath"]) {
            (Value::String(v), _) if v.starts_with('/') => {
                root.join(v.trim_start_matches('/')).display().to_string()
            }
            (Value::String(v), _) => v.clone(),
            (_, Value::String(f)) if f == "metadata.name" => pod_name.to_owned(),
            (_, Value::String(f)) if f == "metadata.namespace" => EXAMPLE_NAMESPACE.to_owned(),
            (_, Value::String(f)) if f == "metadata.uid" => EXAMPLE_POD_UID.to_owned(),
            _ => panic!(
                "{}: env {name} has a source this test cannot fake",
                self::name(container)
            ),
        };
        out.insert(name, value);
    }
    out.insert("HOME".into(), root.display().to_string());
    out
}

/// Creates what the volumes would provide: the directories the env names and a
/// self-signed client certificate where the TLS variables point.
fn provide_volumes(env: &BTreeMap<String, String>) {
    for var in ["ETCD_DATA_DIR", "TOOLS_DEST_DIR", "PVC_MOUNT_PATH"] {
        if let Some(dir) = env.get(var) {
            fs::create_dir_all(dir).expect("create a volume dir");
        }
    }
    for var in ["AGENT_VERDICT_FILE", "TERMINATION_LOG"] {
        if let Some(file) = env.get(var) {
            fs::create_dir_all(Path::new(file).parent().expect("a parent")).expect("mkdir");
        }
    }
    if let (Some(ca), Some(cert), Some(key)) = (
        env.get("ETCD_TLS_CA_PATH"),
        env.get("ETCD_TLS_CERT_PATH"),
        env.get("ETCD_TLS_KEY_PATH"),
    ) {
        let pair = rcgen::KeyPair::generate().expect("a key");
        let params =
            rcgen::CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()])
                .expect("params");
        let pem = params.self_signed(&pair).expect("a certificate").pem();
        fs::create_dir_all(Path::new(ca).parent().expect("a parent")).expect("mkdir");
        fs::write(ca, &pem).expect("write ca.crt");
        fs::write(cert, &pem).expect("write tls.crt");
        fs::write(key, pair.serialize_pem()).expect("write tls.key");
    }
}

/// Runs an agent container's command with `env` (and `extra`), returning the exit
/// code and stderr. Bounded: `AGENT_TIMEOUT` caps the evidence gathering.
fn run_container(
    c: &Value,
    env: &BTreeMap<String, String>,
    extra: &[(&str, &str)],
) -> (i32, String) {
    let (sub, rest) = agent_argv(c).expect("an agent container");
    let out = Command::new(BIN)
        .arg(&sub)
        .args(&rest)
        .env_clear()
        .envs(env)
        .envs(extra.iter().copied())
        .stdin(Stdio::null())
        .output()
        .expect("run the agent");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn the_example_init_containers_accept_their_env_and_fail_closed_without_evidence() {
    // Here no peer resolves and there is no Kubernetes API: with the Pod's exact
    // configuration, install must succeed and restore and preflight must refuse
    // with 14 (nothing could tell whether the member started before) — not 2,
    // which would mean the manifest's configuration is wrong.
    let pod = example_pod();
    let pod_name = pod["metadata"]["name"].as_str().expect("a name");
    let dir = tempfile::tempdir().expect("tempdir");
    for (c, expected) in [("install", 0), ("restore", 14), ("preflight", 14)] {
        let c = container(&pod, c);
        let env = env_under(c, dir.path(), pod_name);
        provide_volumes(&env);
        let (code, stderr) = run_container(c, &env, &[("AGENT_TIMEOUT", "5s")]);
        assert_eq!(code, expected, "{}:\n{stderr}", name(c));
        if let Some(log) = env.get("TERMINATION_LOG") {
            let msg = fs::read_to_string(log).expect("a termination message");
            assert!(msg.len() <= 4096, "{msg}");
            let doc: Value = serde_json::from_str(&msg).expect("JSON");
            assert_eq!(doc["exit_code"], expected, "{msg}");
            assert_eq!(doc["verdict"], "phase-unknown", "{msg}");
            for key in ["member_id", "cluster_id", "reason", "remedy"] {
                assert!(
                    doc.get(key).is_some(),
                    "{} message lacks {key}: {msg}",
                    name(c)
                );
            }
        }
    }
    let install = container(&pod, "install");
    let tools = env_under(install, dir.path(), pod_name)["TOOLS_DEST_DIR"].clone();
    assert!(Path::new(&tools).join("etcd-member-agent").is_file());
    let preflight = container(&pod, "preflight");
    let verdict = env_under(preflight, dir.path(), pod_name)["AGENT_VERDICT_FILE"].clone();
    let doc: Value = serde_json::from_str(&fs::read_to_string(verdict).expect("the verdict file"))
        .expect("JSON");
    assert_eq!(doc["verdict"], "phase-unknown");
}

/// One HTTP/1.0 GET on loopback: the status code and body, or None when nothing
/// listens yet.
fn http_get(port: u16, path: &str) -> Option<(u16, String)> {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream
        .set_read_timeout(Some(std::time::Duration::from_secs(5)))
        .ok()?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").ok()?;
    let mut text = String::new();
    stream.read_to_string(&mut text).ok()?;
    let code = text.split_whitespace().nth(1)?.parse().ok()?;
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b.to_owned())?;
    Some((code, body))
}

#[test]
fn the_example_sidecar_serves_livez_and_keeps_readyz_503_without_its_member() {
    // The sidecar with the Pod's configuration (listening on loopback ports of
    // this machine instead of 9465/9466): alive at once, and not ready, with the
    // reason, because no etcd answers on the member's client URL.
    let pod = example_pod();
    let pod_name = pod["metadata"]["name"].as_str().expect("a name");
    let serve = container(&pod, "agent");
    let dir = tempfile::tempdir().expect("tempdir");
    let mut env = env_under(serve, dir.path(), pod_name);
    provide_volumes(&env);
    let probe_path = container(&pod, "etcd")["readinessProbe"]["httpGet"]["path"]
        .as_str()
        .expect("a probe path")
        .to_owned();
    let live_path = serve["livenessProbe"]["httpGet"]["path"]
        .as_str()
        .expect("a liveness path")
        .to_owned();
    let (http, grpc) = (free_port(), free_port());
    env.insert("AGENT_HTTP_LISTEN".into(), format!("127.0.0.1:{http}"));
    env.insert("AGENT_GRPC_LISTEN".into(), format!("127.0.0.1:{grpc}"));
    // Nothing listens on the member's client URL here (an unused loopback port).
    env.insert(
        "ETCD_ENDPOINTS".into(),
        format!("https://127.0.0.1:{}", free_port()),
    );
    let (sub, rest) = agent_argv(serve).expect("an agent container");
    let mut child = Command::new(BIN)
        .arg(&sub)
        .args(&rest)
        .env_clear()
        .envs(&env)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start serve");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let mut live = None;
    while live.is_none() && std::time::Instant::now() < deadline {
        live = http_get(http, &live_path);
        if live.is_none() {
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    }
    let ready = http_get(http, &probe_path);
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(live.map(|(code, _)| code), Some(200), "{live_path}");
    let (code, body) = ready.expect("an answer on the readiness path");
    assert_eq!(code, 503, "{body}");
    assert!(body.starts_with("not ready:"), "{body}");
    // Started first, as the native sidecar is: preflight has written nothing.
    assert!(
        body.contains("waiting for preflight's verdict: no file at"),
        "{body}"
    );
}
