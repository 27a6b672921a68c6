//! `deploy/monitoring/`: the PrometheusRule and the Grafana dashboard.
//!
//! * The PrometheusRule's `spec` is a valid Prometheus rules file (`promtool
//!   check rules`, Debian's `prometheus` package, installed by `scripts/setup`),
//!   and its alerts fire on the series that mean trouble and stay quiet on a
//!   healthy member (`promtool test rules` on `prometheusrule.test.yaml`). The
//!   CR is the one source: the rules file promtool reads is extracted from it
//!   here, so there is nothing to keep in step.
//! * Every metric the rules and the dashboard name is one `serve` exports (its
//!   `/metrics`, beside a real etcd 3.6 member) or `fleet --serve` does
//!   (against a real kube-apiserver), and every metric either exports has a
//!   panel and a line in `docs/grpc-api.md` (serve's) or `docs/fleet.md`
//!   (fleet's): none can drift from `src/server/metrics.rs` or
//!   `src/fleet/metrics.rs`.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use serde_json::Value;

use crate::common::*;
use crate::kube_fake::{cluster_obj, member_obj, FakeApi, NAMESPACE};
use crate::serve_support::{block_on, Serve};

const RULE: &str = "deploy/monitoring/prometheusrule.yaml";
const RULE_TESTS: &str = "tests/monitoring/prometheusrule.test.yaml";
const DASHBOARD: &str = "deploy/monitoring/grafana-dashboard.json";

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The PrometheusRule as JSON (through PyYAML, as tests/it/deploy.rs reads
/// manifests).
fn prometheus_rule() -> Value {
    const TO_JSON: &str =
        "import json, sys, yaml\njson.dump(yaml.safe_load(open(sys.argv[1])), sys.stdout)";
    let out = Command::new("python3")
        .args(["-c", TO_JSON])
        .arg(root().join(RULE))
        .stdin(Stdio::null())
        .output()
        .expect("run python3 (scripts/setup installs PyYAML)");
    assert!(
        out.status.success(),
        "cannot read {RULE}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("JSON")
}

fn alert_names(rule: &Value) -> Vec<String> {
    rule["spec"]["groups"]
        .as_array()
        .expect("spec.groups")
        .iter()
        .flat_map(|g| g["rules"].as_array().expect("rules").iter())
        .filter_map(|r| r["alert"].as_str().map(str::to_owned))
        .collect()
}

fn promtool() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join("promtool"))
        .find(|p| p.is_file())
}

fn run(cmd: &mut Command) -> (bool, String) {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

#[test]
fn the_prometheus_rule_passes_promtool_check_and_its_unit_tests() {
    let Some(promtool) = promtool() else {
        skip("promtool is missing: scripts/setup installs Debian's prometheus package");
        return;
    };
    let rule = prometheus_rule();
    assert_eq!(rule["apiVersion"], "monitoring.coreos.com/v1");
    assert_eq!(rule["kind"], "PrometheusRule");
    let alerts = alert_names(&rule);
    assert_eq!(
        alerts,
        [
            "EtcdAgentPreflightRefused",
            "EtcdAgentIdentityInconsistent",
            "EtcdAgentPodHazards",
            "EtcdAgentReportsFailing",
            "EtcdAgentWitnessStale",
            "EtcdFleetQuorumLost",
            "EtcdFleetQuorumAtRisk",
            "EtcdFleetClusterIdMismatch",
            "EtcdFleetMembersRefused",
            "EtcdFleetWarning",
            "EtcdFleetViewIncomplete",
        ]
    );
    let dir = tempfile::tempdir().expect("tempdir");
    // The CR's spec is the rules file (JSON is YAML).
    let rules = dir.path().join("rules.yaml");
    std::fs::write(&rules, rule["spec"].to_string()).expect("write rules.yaml");
    std::fs::copy(root().join(RULE_TESTS), dir.path().join("tests.yaml")).expect("copy tests");

    let (ok, text) = run(Command::new(&promtool)
        .arg("check")
        .arg("rules")
        .arg(&rules));
    assert!(ok, "promtool check rules:\n{text}");
    assert!(
        text.contains(&format!("SUCCESS: {} rules found", alerts.len())),
        "{text}"
    );
    let (ok, text) =
        run(Command::new(&promtool)
            .current_dir(dir.path())
            .args(["test", "rules", "tests.yaml"]));
    assert!(ok, "promtool test rules:\n{text}");
    // Every alert has a case that fires it.
    let tests = std::fs::read_to_string(root().join(RULE_TESTS)).expect("read the tests");
    for alert in &alerts {
        assert!(
            tests.contains(&format!("alertname: {alert}")),
            "{RULE_TESTS} has no case for {alert}"
        );
    }

    // A rule that is not PromQL fails: the check can fail.
    let broken = rule["spec"]
        .to_string()
        .replace("etcd_agent_hazards > 0", "etcd_agent_hazards >");
    std::fs::write(&rules, broken).expect("write the broken copy");
    let (ok, text) = run(Command::new(&promtool)
        .arg("check")
        .arg("rules")
        .arg(&rules));
    assert!(!ok, "a broken expression passed:\n{text}");
}

/// Every `etcd_agent_*` name in `text`.
fn metric_names(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut rest = text;
    while let Some(at) = rest.find("etcd_agent_") {
        let tail = &rest[at..];
        let end = tail
            .find(|c: char| !(c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'))
            .unwrap_or(tail.len());
        names.insert(tail[..end].to_owned());
        rest = &tail[end..];
    }
    names
}

/// The sample names serve's `/metrics` (Prometheus text) declares: a gauge's
/// name, a counter's name with `_total`. A labelled family is declared only
/// once it has a series, so serve runs here with every part of it busy: a
/// real etcd 3.6 member (member info), this Pod start's verdict, the
/// operator's records on the fake API server (operator reads; the Lease
/// writes it does not serve fail, and count), and a collector nobody serves
/// (failed reports).
fn exported() -> BTreeSet<String> {
    let cluster = Cluster::builder(EtcdVersion::V3_6).start();
    let m0 = &cluster[0];
    let api = block_on(FakeApi::start())
        .member(member_obj("m0", "etcd", true, None))
        .cluster(cluster_obj("etcd", None));
    let dir = tempfile::tempdir().expect("tempdir");
    let verdict = dir.path().join("preflight.json");
    std::fs::write(
        &verdict,
        serde_json::json!({"verdict": "start", "row": "5", "exit_code": 0, "reason": "", "remedy": ""})
            .to_string(),
    )
    .expect("write the verdict");
    let serve = Serve::beside(m0.client_url())
        .data_dir(m0.data_dir())
        .verdict_file(&verdict)
        .arg("--kube=true")
        .arg("--pod-name=m0")
        .arg(format!("--namespace={NAMESPACE}"))
        .arg(format!("--kubeconfig={}", api.kubeconfig_path().display()))
        .arg("--kube-interval=300ms")
        .arg("--witness-interval=300ms")
        .arg("--kube-timeout=2s")
        .arg(format!("--report-to=http://127.0.0.1:{}", free_port()))
        .arg("--report-interval=1s")
        .arg("--report-timeout=1s")
        .start();
    let families = [
        "etcd_agent_member_info",
        "etcd_agent_preflight_verdict",
        "etcd_agent_operator_reads_total",
        "etcd_agent_witness_writes_total",
        "etcd_agent_reports_total",
        "etcd_agent_identity_polls_total",
    ];
    let names = assert_eventually!(
        {
            let names = declared(&serve.metrics());
            let missing: Vec<&str> = families
                .iter()
                .copied()
                .filter(|f| !names.contains(*f))
                .collect();
            ensure(missing.is_empty(), format!("not yet declared: {missing:?}")).map(|()| names)
        },
        "every family of serve's /metrics has a series"
    );
    drop(serve);
    block_on(api.stop());
    names
}

/// The sample names `fleet --serve` exports (a family is declared only once
/// it has a series), against a real kube-apiserver holding a fleet with a
/// series in every family ([`crate::fleet::every_series`]).
fn fleet_exported() -> BTreeSet<String> {
    let (world, kubeconfig) = block_on(crate::fleet::every_series());
    let port = free_port();
    let mut child = agent()
        .args([
            "fleet",
            "-A",
            "--serve",
            "--listen",
            &format!("127.0.0.1:{port}"),
        ])
        .env("KUBECONFIG", &kubeconfig)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start fleet --serve");
    let text = eventually(patience(), || {
        let got = (|| {
            use std::io::{Read, Write};
            let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
            s.set_read_timeout(Some(std::time::Duration::from_secs(5)))
                .ok()?;
            write!(
                s,
                "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
            )
            .ok()?;
            let mut text = String::new();
            s.read_to_string(&mut text).ok()?;
            Some(text)
        })();
        match got {
            Some(t) if t.contains("etcd_agent_fleet_member_refused{") => Ok(t),
            other => Err(format!("{other:?}")),
        }
    });
    let _ = child.kill();
    let _ = child.wait();
    drop(world);
    declared(&text.unwrap_or_else(|e| panic!("fleet --serve: {e}")))
}

fn declared(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for line in text.lines() {
        let Some(decl) = line.strip_prefix("# TYPE ") else {
            continue;
        };
        let mut parts = decl.split_whitespace();
        let (Some(name), Some(kind)) = (parts.next(), parts.next()) else {
            continue;
        };
        match kind {
            "counter" if !name.ends_with("_total") => names.insert(format!("{name}_total")),
            _ => names.insert(name.to_owned()),
        };
    }
    names
}

/// The PromQL of every dashboard panel.
fn dashboard_exprs(dashboard: &Value) -> Vec<String> {
    let mut exprs = Vec::new();
    for panel in dashboard["panels"].as_array().expect("panels") {
        for target in panel["targets"].as_array().expect("targets") {
            exprs.push(target["expr"].as_str().expect("expr").to_owned());
        }
    }
    exprs
}

#[test]
fn every_metric_the_rules_and_the_dashboard_name_is_one_serve_exports() {
    let serve = exported();
    let fleet = fleet_exported();
    assert!(
        fleet.contains("etcd_agent_fleet_cluster_condition") && fleet.len() == 10,
        "{fleet:?}"
    );
    let exported: BTreeSet<String> = serve.union(&fleet).cloned().collect();
    let rule_text = std::fs::read_to_string(root().join(RULE)).expect("read the rule");
    let dashboard: Value = serde_json::from_str(
        &std::fs::read_to_string(root().join(DASHBOARD)).expect("read the dashboard"),
    )
    .expect("the dashboard is JSON");
    let exprs = dashboard_exprs(&dashboard).join("\n");
    let in_rules = metric_names(&rule_text);
    let in_dashboard = metric_names(&exprs);
    // Template variables query metrics too.
    let mut in_variables = BTreeSet::new();
    for var in dashboard["templating"]["list"]
        .as_array()
        .expect("templating")
    {
        in_variables.extend(metric_names(var["query"].as_str().unwrap_or_default()));
    }
    assert!(in_rules.len() >= 8, "{in_rules:?}");
    for (what, names) in [
        (RULE, &in_rules),
        ("the dashboard's panels", &in_dashboard),
        ("the dashboard's variables", &in_variables),
    ] {
        let unknown: Vec<&String> = names.difference(&exported).collect();
        assert!(
            unknown.is_empty(),
            "{what} names metrics serve does not export: {unknown:?} (it exports {exported:?})"
        );
    }
    // ... and in the metrics list of docs/grpc-api.md (serve's) or
    // docs/fleet.md (fleet's).
    for (doc, names) in [("docs/grpc-api.md", &serve), ("docs/fleet.md", &fleet)] {
        let text = std::fs::read_to_string(root().join(doc)).expect("read the doc");
        let undocumented: Vec<&String> = names
            .iter()
            .filter(|n| !(text.contains(&format!("`{n}`")) || text.contains(&format!("`{n}{{"))))
            .collect();
        assert!(
            undocumented.is_empty(),
            "metrics that {doc} does not list: {undocumented:?}"
        );
    }
    let without_panel: Vec<&String> = exported.difference(&in_dashboard).collect();
    assert!(
        without_panel.is_empty(),
        "metrics serve exports without a dashboard panel: {without_panel:?}"
    );
    // Every panel reads the data source variable; every PromQL of serve's
    // metrics is filtered by the namespace and pod variables, of fleet's
    // per-cluster metrics by the namespace (fleet's totals have no namespace).
    const FLEET_TOTALS: [&str; 4] = [
        "etcd_agent_fleet_clusters",
        "etcd_agent_fleet_members",
        "etcd_agent_fleet_view_complete",
        "etcd_agent_fleet_unread",
    ];
    for panel in dashboard["panels"].as_array().expect("panels") {
        assert_eq!(panel["datasource"]["uid"], "${datasource}", "{panel}");
        for target in panel["targets"].as_array().expect("targets") {
            let expr = target["expr"].as_str().unwrap_or_default();
            let names = metric_names(expr);
            let filtered = if names.iter().all(|n| fleet.contains(n)) {
                names.iter().all(|n| FLEET_TOTALS.contains(&n.as_str()))
                    || expr.contains("namespace=~\"$namespace\"")
            } else {
                expr.contains("namespace=~\"$namespace\"") && expr.contains("pod=~\"$pod\"")
            };
            assert!(filtered, "{}: {expr}", panel["title"]);
        }
    }
}

#[test]
fn the_metric_name_scan_finds_names_and_only_names() {
    let names = metric_names(
        "rate(etcd_agent_reports_total{result!=\"ok\"}[5m]) and etcd_agent_ready==1 etcd_agent_x",
    );
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    assert_eq!(
        names,
        [
            "etcd_agent_ready",
            "etcd_agent_reports_total",
            "etcd_agent_x"
        ]
    );
}
