//! The guard on the member Pods of the projects that run etcd on Kubernetes
//! (`tests/fixtures/inject/`, written from each project's manifests), without
//! I/O: each fixture is compiled in, guarded, and its patched Pod checked for
//! what the agent is told.

use std::collections::BTreeMap;

use serde_json::{json, Value};

use super::patch::apply;
use super::yaml::Stream;
use super::*;

fn opts() -> Options {
    Options {
        image: "ghcr.io/example/etcd-member-agent:0.1.0".into(),
        image_pull_policy: Some("IfNotPresent".into()),
        kube: true,
        version: "0.1.0".into(),
        extra_env: Vec::new(),
    }
}

/// Every document of a fixture.
fn docs(text: &str) -> Vec<Value> {
    Stream::parse(text)
        .unwrap()
        .docs
        .into_iter()
        .map(|d| d.value)
        .collect()
}

/// Guards the one Pod template of the fixture; returns the guarded template
/// and the injection.
fn guarded(text: &str) -> (Value, Injection) {
    let mut found = None;
    for doc in docs(text) {
        for t in objects::templates(&doc) {
            assert!(found.is_none(), "more than one template");
            let template = doc.pointer(&t.pointer).unwrap().clone();
            found = Some(template);
        }
    }
    let mut template = found.expect("a template");
    match guard(&template, &opts()) {
        Outcome::Injected(i) => {
            apply(&mut template, &i.patch).unwrap();
            (template, *i)
        }
        other => panic!("not guarded: {other:?}"),
    }
}

/// A container's env as `name → value` (a `valueFrom` as its JSON).
fn env(template: &Value, name: &str) -> BTreeMap<String, String> {
    container(template, name)["env"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            let v = match e.get("value") {
                Some(v) => v.as_str().unwrap().to_owned(),
                None => e["valueFrom"].to_string(),
            };
            (e["name"].as_str().unwrap().to_owned(), v)
        })
        .collect()
}

fn container<'a>(template: &'a Value, name: &str) -> &'a Value {
    ["initContainers", "containers"]
        .iter()
        .filter_map(|k| template["spec"][k].as_array())
        .flatten()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("no container {name}"))
}

fn mounts(template: &Value, name: &str) -> Vec<(String, String, bool)> {
    container(template, name)["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["name"].as_str().unwrap().to_owned(),
                m["mountPath"].as_str().unwrap().to_owned(),
                m["readOnly"].as_bool().unwrap_or(false),
            )
        })
        .collect()
}

/// What every guarded Pod has, whatever its shape.
fn assert_common_shape(t: &Value, etcd_before: &Value) {
    let init: Vec<&str> = t["spec"]["initContainers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(init.first(), Some(&SIDECAR), "the sidecar starts first");
    assert_eq!(init.last(), Some(&PREFLIGHT), "preflight runs last");
    assert_eq!(container(t, SIDECAR)["restartPolicy"], "Always");
    assert_eq!(container(t, SIDECAR)["args"], json!(["serve"]));
    assert_eq!(container(t, PREFLIGHT)["args"], json!(["preflight"]));
    // Nothing on the etcd container.
    let etcd_name = etcd_before["name"].as_str().unwrap();
    assert_eq!(
        container(t, etcd_name),
        etcd_before,
        "the etcd container changed"
    );
    for c in [SIDECAR, PREFLIGHT] {
        let sc = &container(t, c)["securityContext"];
        assert_eq!(sc["readOnlyRootFilesystem"], true);
        assert_eq!(sc["allowPrivilegeEscalation"], false);
        assert_eq!(sc["capabilities"]["drop"], json!(["ALL"]));
        assert_eq!(sc["seccompProfile"]["type"], "RuntimeDefault");
        let e = env(t, c);
        assert_eq!(
            e["POD_NAME"],
            json!({"fieldRef": {"fieldPath": "metadata.name"}}).to_string()
        );
        assert_eq!(e["AGENT_VERDICT_FILE"], VERDICT_FILE);
        // The data volume is read-only in both.
        let data_dir = &e["ETCD_DATA_DIR"];
        let m = mounts(t, c);
        assert!(
            m.iter()
                .any(|(_, p, ro)| *ro && data_dir.starts_with(p.as_str())),
            "{c}: the data dir {data_dir} is not on a read-only mount: {m:?}"
        );
    }
    for c in [SIDECAR, PREFLIGHT] {
        let e = env(t, c);
        for carried in e.keys().filter(|k| k.starts_with("AGENT_REF_")) {
            assert!(
                e.values().any(|v| v.contains(&format!("$({carried})"))),
                "{c}: {carried} is carried but nothing there refers to it"
            );
        }
    }
    assert_eq!(
        t["metadata"]["annotations"][ANNOTATION_INJECTED], "0.1.0",
        "the injected version is recorded"
    );
}

fn etcd_container_of(text: &str, name: &str) -> Value {
    docs(text)
        .iter()
        .flat_map(|d| {
            objects::templates(d)
                .into_iter()
                .map(move |t| d.pointer(&t.pointer).unwrap().clone())
        })
        .next()
        .map(|t| container(&t, name).clone())
        .unwrap()
}

const COZYSTACK_NOTLS: &str =
    include_str!("../../tests/fixtures/inject/cozystack-member-notls.yaml");
const COZYSTACK_TLS: &str =
    include_str!("../../tests/fixtures/inject/cozystack-member-tls-restore.yaml");
const COZYSTACK_MAIN: &str =
    include_str!("../../tests/fixtures/inject/cozystack-member-restore-main.yaml");
const KAMAJI: &str = include_str!("../../tests/fixtures/inject/kamaji-etcd.yaml");
const BITNAMI: &str = include_str!("../../tests/fixtures/inject/bitnami-style.yaml");
const ETCD_IO: &str = include_str!("../../tests/fixtures/inject/etcd-io-statefulset.yaml");
const KUBEADM: &str = include_str!("../../tests/fixtures/inject/kubeadm-static-pod.yaml");
const HACK: &str = include_str!("../../tests/fixtures/inject/etcd-io-hack-pods.yaml");
const NOT_ETCD: &str = include_str!("../../tests/fixtures/inject/not-etcd.yaml");

#[test]
fn cozystack_scale_up_member_learns_its_peers_from_its_flags() {
    let (t, i) = guarded(COZYSTACK_NOTLS);
    assert_common_shape(&t, &etcd_container_of(COZYSTACK_NOTLS, "etcd"));
    let p = env(&t, PREFLIGHT);
    assert_eq!(p["ETCD_MEMBER_NAME"], "etcd-m4q9z");
    assert_eq!(p["ETCD_DATA_DIR"], "/var/lib/etcd");
    assert_eq!(p["ETCD_VERSION"], "3.6.11");
    assert_eq!(p["ETCD_INITIAL_CLUSTER_STATE"], "existing");
    assert_eq!(
        p["ETCD_PEER_ENDPOINTS"],
        "http://etcd-7xk2p.etcd.tenant-a.svc:2379,http://etcd-r2d8w.etcd.tenant-a.svc:2379",
        "the other members' client URLs, this one left out"
    );
    assert_eq!(
        p["ETCD_PEER_URLS"],
        "http://etcd-m4q9z.etcd.tenant-a.svc:2380"
    );
    assert_eq!(
        p["ETCD_INITIAL_CLUSTER_TOKEN"],
        "tenant-a-etcd-0b5d7a4e-9c1f-4f0e-a6c2-7d3e8b1f2a90"
    );
    assert!(!p.contains_key("ETCD_TLS_CA_PATH"));
    let s = env(&t, SIDECAR);
    assert_eq!(s["ETCD_ENDPOINTS"], "http://127.0.0.1:2379");
    assert_eq!(
        s["ETCD_INITIAL_CLUSTER_TOKEN"],
        p["ETCD_INITIAL_CLUSTER_TOKEN"]
    );
    assert!(!s.contains_key("ETCD_PEER_ENDPOINTS"));
    assert_eq!(
        container(&t, SIDECAR)["securityContext"]["runAsUser"],
        65532
    );
    assert_eq!(
        container(&t, SIDECAR)["securityContext"]["runAsNonRoot"],
        true
    );
    assert_eq!(i.peers, 2);
    // The token is projected into the agent's containers only.
    assert!(mounts(&t, SIDECAR)
        .iter()
        .any(|(n, _, _)| n == TOKEN_VOLUME));
    assert_eq!(t["spec"]["automountServiceAccountToken"], false);
}

#[test]
fn cozystack_tls_seed_keeps_the_operators_restore_and_uses_etcds_certificate() {
    let (t, _) = guarded(COZYSTACK_TLS);
    assert_common_shape(&t, &etcd_container_of(COZYSTACK_TLS, "etcd"));
    let init: Vec<&str> = t["spec"]["initContainers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        init,
        [SIDECAR, "restore", PREFLIGHT],
        "preflight sees the restored directory"
    );
    let p = env(&t, PREFLIGHT);
    assert_eq!(p["ETCD_TLS_CA_PATH"], "/etc/etcd/tls/client/ca.crt");
    assert_eq!(p["ETCD_TLS_CERT_PATH"], "/etc/etcd/tls/client/tls.crt");
    assert_eq!(p["ETCD_TLS_KEY_PATH"], "/etc/etcd/tls/client/tls.key");
    assert_eq!(p["ETCD_INITIAL_CLUSTER_STATE"], "new");
    assert!(
        !p.contains_key("ETCD_PEER_ENDPOINTS"),
        "the seed's cluster names only itself"
    );
    assert_eq!(env(&t, SIDECAR)["ETCD_ENDPOINTS"], "https://127.0.0.1:2379");
    // The client TLS volume, read-only; the peer TLS volume is not the agent's business.
    let m = mounts(&t, SIDECAR);
    assert!(
        m.contains(&("tls-client".into(), "/etc/etcd/tls/client".into(), true)),
        "{m:?}"
    );
    assert!(!m.iter().any(|(n, _, _)| n == "tls-peer"), "{m:?}");
}

#[test]
fn cozystack_tls_without_a_ca_flag_needs_the_annotation() {
    let (t, _) = guarded(COZYSTACK_MAIN);
    let p = env(&t, PREFLIGHT);
    assert_eq!(p["ETCD_TLS_CA_PATH"], "/etc/etcd/tls/client/ca.crt");
    assert!(
        !p.contains_key("ETCD_TLS_CERT_PATH"),
        "no client certificate is asked for"
    );
    let init: Vec<&str> = t["spec"]["initContainers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(init, [SIDECAR, "install-tools", "restore", PREFLIGHT]);
    // Without the annotation: never guessed.
    let without = COZYSTACK_MAIN.replace(
        "    etcd-member-agent.cozystack.io/client-ca-file: /etc/etcd/tls/client/ca.crt\n",
        "    unrelated: x\n",
    );
    let doc = &docs(&without)[0];
    match guard(doc, &opts()) {
        Outcome::Unresolvable(e) => {
            assert_eq!(e.subject, "--trusted-ca-file");
            assert!(e.remedy.contains(ANNOTATION_CLIENT_CA), "{e}");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn kamaji_statefulset_never_freezes_a_replicas_name() {
    let (t, i) = guarded(KAMAJI);
    assert_common_shape(&t, &etcd_container_of(KAMAJI, "etcd"));
    for c in [SIDECAR, PREFLIGHT] {
        assert_eq!(env(&t, c)["ETCD_MEMBER_NAME"], "$(POD_NAME)", "{c}");
    }
    let p = env(&t, PREFLIGHT);
    assert_eq!(p["ETCD_VERSION"], "3.6.12");
    assert_eq!(p["ETCD_DATA_DIR"], "/var/run/etcd");
    assert_eq!(p["ETCD_INITIAL_CLUSTER_STATE"], "new");
    assert_eq!(p["ETCD_INITIAL_CLUSTER_TOKEN"], "kamaji");
    assert_eq!(
        p["ETCD_PEER_URLS"],
        "https://$(POD_NAME).kamaji-etcd.$(POD_NAMESPACE).svc.cluster.local:2380"
    );
    assert_eq!(
        p["ETCD_PEER_ENDPOINTS"],
        "https://kamaji-etcd-0.kamaji-etcd.kamaji-system.svc.cluster.local:2379,\
https://kamaji-etcd-1.kamaji-etcd.kamaji-system.svc.cluster.local:2379,\
https://kamaji-etcd-2.kamaji-etcd.kamaji-system.svc.cluster.local:2379"
    );
    assert_eq!(p["ETCD_TLS_CERT_PATH"], "/etc/etcd/pki/server.pem");
    assert!(
        i.notes.iter().any(|n| n.contains("differs per replica")),
        "{:?}",
        i.notes
    );
    // Kamaji's etcd runs as its image's root: so must the agent, to read it.
    let sc = &container(&t, SIDECAR)["securityContext"];
    assert_eq!(sc["runAsUser"], 0);
    assert_eq!(sc["runAsNonRoot"], false);
    // The data volume of the claim template and the certs Secret, read-only.
    let m = mounts(&t, PREFLIGHT);
    assert!(
        m.contains(&("data".into(), "/var/run/etcd".into(), true)),
        "{m:?}"
    );
    assert!(
        m.contains(&("certs".into(), "/etc/etcd/pki".into(), true)),
        "{m:?}"
    );
    // The annotation map was null: it is made.
    assert_eq!(
        t["metadata"]["annotations"]["kubectl.kubernetes.io/default-container"],
        "etcd"
    );
}

#[test]
fn bitnami_style_env_is_read_as_etcd_reads_it() {
    let (t, _) = guarded(BITNAMI);
    assert_common_shape(&t, &etcd_container_of(BITNAMI, "etcd"));
    let p = env(&t, PREFLIGHT);
    assert_eq!(p["ETCD_MEMBER_NAME"], "$(POD_NAME)");
    assert_eq!(p["ETCD_DATA_DIR"], "/bitnami/etcd/data");
    assert_eq!(p["ETCD_VERSION"], "3.5.17");
    assert_eq!(p["ETCD_INITIAL_CLUSTER_STATE"], "new");
    assert_eq!(p["ETCD_INITIAL_CLUSTER_TOKEN"], "etcd-cluster-k8s");
    assert_eq!(
        p["ETCD_TLS_CA_PATH"],
        "/opt/bitnami/etcd/certs/client/ca.crt"
    );
    assert_eq!(
        p["ETCD_TLS_CERT_PATH"],
        "/opt/bitnami/etcd/certs/client/cert.pem"
    );
    assert_eq!(
        p["ETCD_PEER_ENDPOINTS"].split(',').count(),
        3,
        "{}",
        p["ETCD_PEER_ENDPOINTS"]
    );
    assert!(p["ETCD_PEER_ENDPOINTS"]
        .starts_with("https://etcd-0.etcd-headless.apps.svc.cluster.local:2379"));
    // The root password and the Bitnami scripts' own variables are not the agent's.
    assert!(!p.contains_key("ETCD_ROOT_PASSWORD"));
    assert!(p.keys().all(|k| !k.contains("MY_POD")));
    let sc = &container(&t, SIDECAR)["securityContext"];
    assert_eq!(
        (sc["runAsUser"].clone(), sc["runAsGroup"].clone()),
        (json!(1001), json!(1001))
    );
    // The data volume is mounted where etcd has it, with the data dir below.
    assert!(mounts(&t, PREFLIGHT).contains(&("data".into(), "/bitnami/etcd".into(), true)));
}

#[test]
fn etcds_own_statefulset_carries_every_reference() {
    let (t, _) = guarded(ETCD_IO);
    assert_common_shape(&t, &etcd_container_of(ETCD_IO, "etcd"));
    let p = env(&t, PREFLIGHT);
    assert_eq!(
        p["ETCD_MEMBER_NAME"], "$(POD_NAME)",
        "HOSTNAME is metadata.name"
    );
    assert_eq!(
        p["AGENT_REF_SERVICE_NAME"],
        json!({"fieldRef": {"fieldPath": "metadata.annotations['serviceName']"}}).to_string()
    );
    assert_eq!(p["ETCD_INITIAL_CLUSTER_TOKEN"], "etcd-$(POD_NAMESPACE)");
    assert_eq!(p["ETCD_WAL_DIR"], "/data/wal");
    assert_eq!(
        p["ETCD_PEER_ENDPOINTS"],
        "http://etcd-0.$(AGENT_REF_SERVICE_NAME):2379,http://etcd-1.$(AGENT_REF_SERVICE_NAME):2379,http://etcd-2.$(AGENT_REF_SERVICE_NAME):2379",
        "URI_SCHEME is a literal and expanded; SERVICE_NAME differs per Pod and is carried"
    );
    // Every reference is defined before it is used.
    let order: Vec<String> = container(&t, PREFLIGHT)["env"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap().to_owned())
        .collect();
    for (i, e) in container(&t, PREFLIGHT)["env"]
        .as_array()
        .unwrap()
        .iter()
        .enumerate()
    {
        if let Some(v) = e.get("value").and_then(Value::as_str) {
            for r in expand::Expr::parse(v).refs() {
                assert!(
                    order[..i].iter().any(|n| n == r),
                    "{} uses $({r}) before it is defined",
                    order[i]
                );
            }
        }
    }
}

#[test]
fn kubeadm_static_pod_is_guarded_without_the_api() {
    let (t, _) = guarded(KUBEADM);
    assert_common_shape(&t, &etcd_container_of(KUBEADM, "etcd"));
    let p = env(&t, PREFLIGHT);
    assert_eq!(p["AGENT_KUBE"], "false");
    assert_eq!(p["ETCD_VERSION"], "3.6.5");
    assert_eq!(env(&t, SIDECAR)["ETCD_ENDPOINTS"], "https://127.0.0.1:2379");
    // No token volume: a static Pod cannot have one.
    assert!(!t["spec"]["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .any(|v| v["name"] == TOKEN_VOLUME));
    assert!(!mounts(&t, SIDECAR)
        .iter()
        .any(|(n, _, _)| n == TOKEN_VOLUME));
    assert_eq!(container(&t, SIDECAR)["securityContext"]["runAsUser"], 0);
}

#[test]
fn a_pod_without_a_data_dir_on_a_volume_is_never_guessed_at() {
    let pods: Vec<Value> = docs(HACK)
        .into_iter()
        .filter(|d| d["kind"] == "Pod")
        .collect();
    assert_eq!(pods.len(), 1);
    match guard(&pods[0], &opts()) {
        Outcome::Unresolvable(e) => {
            assert_eq!(e.subject, "--data-dir");
            assert_eq!(e.container.as_deref(), Some("etcd0"));
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn objects_without_etcd_pass_through() {
    for doc in docs(NOT_ETCD) {
        for t in objects::templates(&doc) {
            assert_eq!(
                guard(doc.pointer(&t.pointer).unwrap(), &opts()),
                Outcome::Skipped(Skip::NoEtcd)
            );
        }
    }
}

#[test]
fn guarding_twice_is_guarding_once() {
    for text in [COZYSTACK_NOTLS, KAMAJI, BITNAMI, ETCD_IO, KUBEADM] {
        let (t, _) = guarded(text);
        assert_eq!(
            guard(&t, &opts()),
            Outcome::Skipped(Skip::AlreadyInjected("0.1.0".into()))
        );
    }
}

#[test]
fn the_example_pod_guarded_by_hand_is_left_alone() {
    let example = include_str!("../../deploy/overlays/example/pod.yaml");
    let doc = &docs(example)[0];
    assert_eq!(
        guard(doc, &opts()),
        Outcome::Skipped(Skip::AlreadyGuarded("agent".into()))
    );
}

#[test]
fn opting_out_and_the_webhooks_own_pods() {
    let doc = &docs(COZYSTACK_NOTLS)[0];
    let mut out = doc.clone();
    out["metadata"]["annotations"] = json!({ANNOTATION_INJECT: INJECT_DISABLED});
    assert_eq!(guard(&out, &opts()), Outcome::Skipped(Skip::OptedOut));
    let mut own = doc.clone();
    own["metadata"]["labels"]["app.kubernetes.io/name"] = json!(WEBHOOK_APP);
    assert_eq!(guard(&own, &opts()), Outcome::Skipped(Skip::WebhookPod));
    let mut mirror = doc.clone();
    mirror["metadata"]["annotations"] = json!({"kubernetes.io/config.mirror": "x"});
    assert_eq!(guard(&mirror, &opts()), Outcome::Skipped(Skip::MirrorPod));
}

#[test]
fn the_readiness_probe_moves_to_the_sidecar_only_when_asked() {
    let doc = &docs(COZYSTACK_NOTLS)[0];
    let (t, _) = guarded(COZYSTACK_NOTLS);
    assert_eq!(
        container(&t, "etcd")["readinessProbe"]["httpGet"]["port"],
        2381
    );
    let mut asked = doc.clone();
    asked["metadata"]["annotations"] = json!({ANNOTATION_READINESS: "agent"});
    let Outcome::Injected(i) = guard(&asked, &opts()) else {
        panic!()
    };
    apply(&mut asked, &i.patch).unwrap();
    let probe = &container(&asked, "etcd")["readinessProbe"];
    assert_eq!(
        probe["httpGet"],
        json!({"path": "/readyz", "port": HTTP_PORT})
    );
    let mut wrong = doc.clone();
    wrong["metadata"]["annotations"] = json!({ANNOTATION_READINESS: "yes"});
    assert!(matches!(guard(&wrong, &opts()), Outcome::Unresolvable(_)));
}

#[test]
fn every_op_targets_the_original_object() {
    // The ops are independent: each one's parent exists before any is applied.
    for text in [
        COZYSTACK_NOTLS,
        COZYSTACK_TLS,
        KAMAJI,
        BITNAMI,
        ETCD_IO,
        KUBEADM,
    ] {
        for doc in docs(text) {
            for t in objects::templates(&doc) {
                let template = doc.pointer(&t.pointer).unwrap();
                if let Outcome::Injected(i) = guard(template, &opts()) {
                    for op in &i.patch {
                        let toks = patch::tokens(&op.path).unwrap();
                        let parent: String = toks[..toks.len() - 1]
                            .iter()
                            .map(|t| format!("/{}", patch::escape(t)))
                            .collect();
                        assert!(
                            template.pointer(&parent).is_some(),
                            "{}: {}",
                            t.object,
                            op.path
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn on_the_hosts_network_the_sidecar_listens_beside_etcd() {
    // kubeadm: etcd listens on two addresses; the sidecar on every one.
    let (t, _) = guarded(KUBEADM);
    assert_eq!(env(&t, SIDECAR)["AGENT_HTTP_LISTEN"], "0.0.0.0:9466");
    // One address on the host's network: the same one, its ports and probe too.
    let mut doc = docs(COZYSTACK_NOTLS).remove(0);
    doc["spec"]["hostNetwork"] = json!(true);
    let cmd = doc["spec"]["containers"][0]["command"]
        .as_array_mut()
        .unwrap();
    for a in cmd.iter_mut() {
        if a.as_str().unwrap().starts_with("--listen-client-urls=") {
            *a = json!("--listen-client-urls=http://127.0.10.2:2379");
        }
    }
    let Outcome::Injected(i) = guard(&doc, &opts()) else {
        panic!()
    };
    apply(&mut doc, &i.patch).unwrap();
    let e = env(&doc, SIDECAR);
    assert_eq!(e["AGENT_HTTP_LISTEN"], "127.0.10.2:9466");
    assert_eq!(e["AGENT_GRPC_LISTEN"], "127.0.10.2:9465");
    assert_eq!(e["ETCD_ENDPOINTS"], "http://127.0.10.2:2379");
    let sidecar = container(&doc, SIDECAR);
    assert_eq!(sidecar["ports"][1]["hostIP"], "127.0.10.2");
    assert_eq!(sidecar["livenessProbe"]["httpGet"]["host"], "127.0.10.2");
    // A name, or every address, on the host's network: every address.
    for listen in [
        "http://localhost:2379",
        "http://0.0.0.0:2379",
        "http://[::]:2379",
    ] {
        let mut doc = docs(COZYSTACK_NOTLS).remove(0);
        doc["spec"]["hostNetwork"] = json!(true);
        let cmd = doc["spec"]["containers"][0]["command"]
            .as_array_mut()
            .unwrap();
        for a in cmd.iter_mut() {
            if a.as_str().unwrap().starts_with("--listen-client-urls=") {
                *a = json!(format!("--listen-client-urls={listen}"));
            }
        }
        let Outcome::Injected(i) = guard(&doc, &opts()) else {
            panic!()
        };
        apply(&mut doc, &i.patch).unwrap();
        assert_eq!(
            env(&doc, SIDECAR)["AGENT_HTTP_LISTEN"],
            "0.0.0.0:9466",
            "{listen}"
        );
        assert!(container(&doc, SIDECAR)["ports"][1].get("hostIP").is_none());
    }
    // Not on the host's network: every address, whatever etcd listens on.
    let (t, _) = guarded(COZYSTACK_NOTLS);
    assert_eq!(env(&t, SIDECAR)["AGENT_HTTP_LISTEN"], "0.0.0.0:9466");
}

#[test]
fn extra_env_goes_to_both_containers_over_what_is_derived() {
    let mut o = opts();
    o.extra_env = vec![
        ("AGENT_REPORT_TO".into(), "https://collector:9465".into()),
        ("AGENT_KUBE".into(), "false".into()),
    ];
    let mut doc = docs(COZYSTACK_NOTLS).remove(0);
    let Outcome::Injected(i) = guard(&doc, &o) else {
        panic!()
    };
    apply(&mut doc, &i.patch).unwrap();
    for c in [SIDECAR, PREFLIGHT] {
        let list = container(&doc, c)["env"].as_array().unwrap();
        assert_eq!(
            list.iter().filter(|e| e["name"] == "AGENT_KUBE").count(),
            1,
            "{c}"
        );
        let e = env(&doc, c);
        assert_eq!(e["AGENT_KUBE"], "false");
        assert_eq!(e["AGENT_REPORT_TO"], "https://collector:9465");
    }
}

mod properties {
    use super::*;
    use proptest::prelude::*;

    fn token() -> impl Strategy<Value = String> {
        prop_oneof![
            Just("--name=$(POD_NAME)".to_owned()),
            Just("--name".to_owned()),
            Just("m0".to_owned()),
            Just("--data-dir=/var/lib/etcd".to_owned()),
            Just("--data-dir=/data/$(X)".to_owned()),
            Just("--wal-dir=/var/lib/etcd/wal".to_owned()),
            Just("--initial-cluster=m0=http://m0:2380,m1=$(S)://m1.$(N):2380".to_owned()),
            Just("--initial-cluster-state=new".to_owned()),
            Just("--listen-client-urls=https://0.0.0.0:2379".to_owned()),
            Just("--advertise-client-urls=http://$(POD_NAME).svc:2379".to_owned()),
            Just("--trusted-ca-file=/tls/ca.crt".to_owned()),
            Just("--client-cert-auth".to_owned()),
            Just("--cert-file=/tls/c".to_owned()),
            Just("--key-file=/tls/k".to_owned()),
            Just("$(X)".to_owned()),
            Just("--".to_owned()),
            "[-=$()a-z:/,.]{0,12}",
        ]
    }

    fn env_entry() -> impl Strategy<Value = Value> {
        let name = prop_oneof![
            Just("ETCD_NAME"),
            Just("ETCD_DATA_DIR"),
            Just("X"),
            Just("S"),
            Just("N"),
            Just("POD_NAME"),
        ];
        (name, any::<bool>(), "[$()a-z:/]{0,8}").prop_map(|(n, from, v)| {
            if from {
                json!({"name": n, "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}})
            } else {
                json!({"name": n, "value": v})
            }
        })
    }

    fn pod() -> impl Strategy<Value = Value> {
        (
            proptest::collection::vec(token(), 0..4),
            proptest::collection::vec(env_entry(), 0..5),
            prop_oneof![Just("quay.io/coreos/etcd:v3.6.11"), Just("nginx"), Just("x/etcd@sha256:0")],
            proptest::bool::weighted(0.8),
            any::<bool>(),
        )
            .prop_map(|(extra, env, image, mounts, init)| {
                // A valid start, then whatever the generator adds.
                let mut args = vec!["--data-dir=/var/lib/etcd".to_owned(), "--name=$(POD_NAME)".to_owned()];
                args.extend(extra);
                let mut c = json!({"name": "etcd", "image": image, "command": ["etcd"], "args": args, "env": env,
                    "securityContext": {"runAsUser": 65532}});
                if mounts {
                    c["volumeMounts"] = json!([{"name": "d", "mountPath": "/var/lib/etcd"}, {"name": "t", "mountPath": "/tls"}]);
                }
                let mut p = json!({"metadata": {"name": "p"}, "spec": {"containers": [c]}});
                if init {
                    p["spec"]["initContainers"] = json!([{"name": "restore", "image": "x"}]);
                    p["spec"]["volumes"] = json!([{"name": "d", "emptyDir": {}}]);
                }
                p
            })
    }

    proptest! {
        /// Whatever the Pod: no panic; a patch applies to it, guards it once,
        /// and every reference an agent container's value makes is defined
        /// before it there or is one etcd itself left unexpanded.
        #[test]
        fn a_patch_applies_and_guards_once(p in pod()) {
            if let Outcome::Injected(i) = guard(&p, &opts()) {
                let mut t = p.clone();
                prop_assert!(apply(&mut t, &i.patch).is_ok());
                prop_assert_eq!(guard(&t, &opts()), Outcome::Skipped(Skip::AlreadyInjected("0.1.0".into())));
                for c in [SIDECAR, PREFLIGHT] {
                    let list = container(&t, c)["env"].as_array().unwrap().clone();
                    for (k, e) in list.iter().enumerate() {
                        let v = e.get("value").and_then(Value::as_str).unwrap_or_default();
                        for r in expand::Expr::parse(v).refs() {
                            let defined_before = list[..k].iter().any(|d| d["name"] == r);
                            let defined_anywhere = list.iter().any(|d| d["name"] == r);
                            prop_assert!(defined_before || !defined_anywhere, "{c}: {} refers to {r} before it is defined", e["name"]);
                        }
                    }
                }
            }
        }
    }

    /// The property above is not vacuous: the generator makes guardable Pods
    /// often, and unguardable ones too.
    #[test]
    fn the_generator_reaches_every_outcome() {
        use proptest::strategy::ValueTree;
        let mut runner = proptest::test_runner::TestRunner::deterministic();
        let (mut injected, mut refused) = (0, 0);
        for _ in 0..300 {
            let p = pod().new_tree(&mut runner).unwrap().current();
            match guard(&p, &opts()) {
                Outcome::Injected(_) => injected += 1,
                Outcome::Unresolvable(_) => refused += 1,
                Outcome::Skipped(_) => {}
            }
        }
        assert!(
            injected > 20 && refused > 20,
            "{injected} guarded, {refused} refused of 300"
        );
    }
}
