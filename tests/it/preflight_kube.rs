//! `preflight` with the operator's records as evidence: the binary reads the
//! `EtcdMember`/`EtcdCluster` from the in-process fake API server (`kube_fake`)
//! through a kubeconfig, as it would in a Pod (`AGENT_KUBE=true`, `POD_NAMESPACE`,
//! `POD_NAME`). Empty directories need no etcd; initialized ones come from a
//! stopped single-member cluster of the real-etcd harness.
//!
//! No live peer answers in these tests (`ETCD_PEER_ENDPOINTS` names a port nobody
//! listens on), so the operator's word is the only evidence besides the
//! directory: a fault must end in `phase-unknown` (14), never in `bootstrap`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::common::*;
use crate::kube_fake::{
    cluster_obj, cluster_path, cluster_token, member_obj, member_path, FakeApi, Fault, NAMESPACE,
};
use crate::preflight_support::*;
use serde_json::Value;

const MEMBER: &str = "etcd-x7k2p";
const CLUSTER: &str = "etcd";
const MEMBER_ID: &str = "ae36f238164a08ad";
const CLUSTER_ID: &str = "769f1c9e0d723d0b";

/// The budget of the runs that wait for a fault, and what they may take beyond it.
const BUDGET: &str = "2s";
const BUDGET_PLUS_SLACK: Duration = Duration::from_millis(3500);

/// Runs [`preflight`] off the runtime, so the fake API server keeps serving.
async fn run(env: Env) -> Preflight {
    run_args(env, Vec::new()).await
}

/// [`run`] with more arguments.
async fn run_args(env: Env, args: Vec<String>) -> Preflight {
    let blocking = move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        preflight_args(&env, &args)
    };
    match tokio::task::spawn_blocking(blocking).await {
        Ok(v) => v,
        Err(e) => std::panic::resume_unwind(e.into_panic()),
    }
}

/// The init container's env for the member `member` (an `EtcdMember` object) on
/// `data_dir`: its frozen flags, the Pod's identity, kube on through `api`'s
/// kubeconfig, and a peer endpoint nobody listens on.
fn pod_env(api: &FakeApi, data_dir: &Path, member: &Value) -> Env {
    let name = member["metadata"]["name"].as_str().expect("name");
    vec![
        ("ETCD_DATA_DIR".into(), data_dir.display().to_string()),
        ("ETCD_MEMBER_NAME".into(), name.into()),
        (
            "ETCD_INITIAL_CLUSTER".into(),
            member["spec"]["initialCluster"]
                .as_str()
                .expect("initialCluster")
                .into(),
        ),
        ("ETCD_INITIAL_CLUSTER_TOKEN".into(), cluster_token(CLUSTER)),
        (
            "ETCD_PEER_ENDPOINTS".into(),
            format!("http://127.0.0.1:{}", free_port()),
        ),
        ("AGENT_KUBE".into(), "true".into()),
        ("POD_NAMESPACE".into(), NAMESPACE.into()),
        ("POD_NAME".into(), name.into()),
        (
            "KUBECONFIG".into(),
            api.kubeconfig_path().display().to_string(),
        ),
    ]
}

/// An empty data dir (`data/`, not created) inside a fresh scratch dir.
fn empty_dir() -> (tempfile::TempDir, PathBuf) {
    let dir = scratch();
    let data = dir.path().join("data");
    (dir, data)
}

/// A fake API server serving `member` and an `EtcdCluster` with `cluster_id`.
async fn api_with(member: &Value, cluster_id: Option<&str>) -> FakeApi {
    FakeApi::start()
        .await
        .member(member.clone())
        .cluster(cluster_obj(CLUSTER, cluster_id))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_seed_whose_member_id_is_recorded_is_refused_with_exit_10() {
    let seed = member_obj(MEMBER, CLUSTER, true, Some(MEMBER_ID));
    let api = api_with(&seed, Some(CLUSTER_ID)).await;
    let (_dir, data) = empty_dir();
    let step = "seed, memberID and clusterID recorded";
    run(pod_env(&api, &data, &seed))
        .await
        .expect(step, 10, "refuse-empty-formed")
        .reason_mentions(
            step,
            &format!("the EtcdMember records memberID {MEMBER_ID}"),
        )
        .source(step, "kube", true, "")
        .source(step, "etcd", false, "connect");
    api.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_seed_whose_cluster_id_alone_is_recorded_is_refused_with_exit_10() {
    // The seconds between the cluster forming and the member's ID being latched.
    let seed = member_obj(MEMBER, CLUSTER, true, None);
    let api = api_with(&seed, Some(CLUSTER_ID)).await;
    let (_dir, data) = empty_dir();
    let step = "seed, clusterID recorded";
    run(pod_env(&api, &data, &seed))
        .await
        .expect(step, 10, "refuse-empty-formed")
        .reason_mentions(
            step,
            &format!("the EtcdCluster records clusterID {CLUSTER_ID}"),
        );
    api.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_seed_with_nothing_recorded_bootstraps_on_the_operators_word() {
    let seed = member_obj(MEMBER, CLUSTER, true, None);
    let api = api_with(&seed, None).await;
    let (_dir, data) = empty_dir();
    let step = "seed, nothing recorded";
    let v = run(pod_env(&api, &data, &seed)).await;
    v.expect(step, 0, "bootstrap")
        .source(step, "data-dir", true, "")
        .source(step, "etcd", false, "no etcd endpoint answered")
        .source(step, "kube", true, "")
        .source(step, "env", false, "proves nothing");
    let said = &v.evidence("kube")["said"];
    assert_eq!(said["member"]["bootstrap"], true, "{}", v.run);
    assert_eq!(said["member"]["member_id"], Value::Null, "{}", v.run);
    assert_eq!(said["cluster"]["cluster_id"], Value::Null, "{}", v.run);

    // The same through --kubeconfig instead of KUBECONFIG.
    let step = "seed, nothing recorded, --kubeconfig";
    let kubeconfig = api.kubeconfig_path().display().to_string();
    let env = without(&pod_env(&api, &data, &seed), "KUBECONFIG");
    run_args(env, vec!["--kubeconfig".into(), kubeconfig])
        .await
        .expect(step, 0, "bootstrap")
        .source(step, "kube", true, "");
    // The witness Lease is read alongside, through the same client.
    let paths: Vec<String> = api
        .requests()
        .into_iter()
        .map(|r| r.path)
        .filter(|p| !p.contains("/leases/"))
        .collect();
    assert_eq!(
        paths[paths.len() - 2..],
        [
            member_path(NAMESPACE, MEMBER),
            cluster_path(NAMESPACE, CLUSTER)
        ],
        "the binary read the EtcdMember, then its EtcdCluster"
    );
    api.stop().await;
}

/// The window PR 355 leaves open: the seed formed the cluster and its volume was
/// wiped before the operator latched `memberID`/`clusterID`. The EtcdMember's
/// `status.podUID` names the earlier Pod: never `bootstrap`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn regression_a_seed_whose_earlier_pod_ran_never_bootstraps_before_the_ids_are_latched() {
    let seed = member_obj(MEMBER, CLUSTER, true, None);
    let recorded = seed["status"]["podUID"]
        .as_str()
        .expect("the fake records a podUID")
        .to_string();
    let api = api_with(&seed, None).await;
    let (_dir, data) = empty_dir();

    let step = "seed, nothing latched, the EtcdMember names another Pod";
    let env = with(
        &pod_env(&api, &data, &seed),
        "POD_UID",
        "a-later-pod-of-the-seed",
    );
    run(env)
        .await
        .expect(step, 14, "phase-unknown")
        .row(step, "9a")
        .reason_mentions(step, &recorded);

    let step = "seed, nothing latched, the EtcdMember names this Pod";
    let env = with(&pod_env(&api, &data, &seed), "POD_UID", &recorded);
    run(env).await.expect(step, 0, "bootstrap").row(step, "9");

    let step = "seed, nothing latched, POD_UID not given";
    run(pod_env(&api, &data, &seed))
        .await
        .expect(step, 0, "bootstrap")
        .warns(step, "POD_UID");
    api.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scale_up_member_whose_member_id_is_recorded_is_refused_with_exit_10() {
    let member = member_obj(MEMBER, CLUSTER, false, Some(MEMBER_ID));
    let api = api_with(&member, Some(CLUSTER_ID)).await;
    let (_dir, data) = empty_dir();
    let step = "scale-up member, memberID recorded";
    run(pod_env(&api, &data, &member))
        .await
        .expect(step, 10, "refuse-empty-formed")
        .reason_mentions(step, MEMBER_ID);
    api.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scale_up_member_with_nothing_recorded_and_no_live_peers_is_phase_unknown() {
    // bootstrap=false: only the live member list could show it added and unstarted.
    let member = member_obj(MEMBER, CLUSTER, false, None);
    for cluster_id in [None, Some(CLUSTER_ID)] {
        let api = api_with(&member, cluster_id).await;
        let (_dir, data) = empty_dir();
        let step = format!("scale-up member, nothing recorded, clusterID {cluster_id:?}");
        run(pod_env(&api, &data, &member))
            .await
            .expect(&step, 14, "phase-unknown")
            .source(&step, "kube", true, "")
            .source(&step, "etcd", false, "no etcd endpoint answered");
        api.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_api_fault_on_an_empty_dir_is_phase_unknown_never_bootstrap() {
    // Records that would bootstrap the seed, were they read.
    let seed = member_obj(MEMBER, CLUSTER, true, None);
    let api = api_with(&seed, None).await;
    let mut wrong_type = seed.clone();
    wrong_type["status"]["memberID"] = serde_json::json!(12345);
    let member = member_path(NAMESPACE, MEMBER);
    let cluster = cluster_path(NAMESPACE, CLUSTER);
    let faults = [
        ("EtcdMember 404", &member, Fault::Status(404), "not found"),
        (
            "CRD not installed",
            &member,
            Fault::NotServed,
            "does not serve",
        ),
        ("EtcdMember 403", &member, Fault::Status(403), "forbidden"),
        ("EtcdCluster 403", &cluster, Fault::Status(403), "forbidden"),
        ("EtcdCluster 404", &cluster, Fault::Status(404), "not found"),
        ("EtcdMember 500", &member, Fault::Status(500), "HTTP 500"),
        ("EtcdCluster 500", &cluster, Fault::Status(500), "HTTP 500"),
        (
            "EtcdMember 503 until the deadline",
            &member,
            Fault::Status(503),
            "HTTP 503",
        ),
        (
            "EtcdMember truncated JSON",
            &member,
            Fault::truncated_json(),
            "malformed",
        ),
        (
            "EtcdMember memberID of the wrong type",
            &member,
            Fault::Raw(200, wrong_type.to_string()),
            "status.memberID is malformed",
        ),
    ];
    for (step, path, fault, error) in faults {
        api.clear_faults();
        api.set_fault(path.clone(), fault, None);
        let (_dir, data) = empty_dir();
        let env = with(&pod_env(&api, &data, &seed), "AGENT_TIMEOUT", BUDGET);
        let v = run(env).await;
        v.expect(step, 14, "phase-unknown")
            .source(step, "kube", false, error)
            .reason_mentions(step, "kubernetes: ");
        assert!(
            v.elapsed < BUDGET_PLUS_SLACK,
            "{step}: took {:?}",
            v.elapsed
        );
    }
    // And without the fault, the same records do bootstrap: the faults decided.
    api.clear_faults();
    let (_dir, data) = empty_dir();
    run(pod_env(&api, &data, &seed))
        .await
        .expect("no fault", 0, "bootstrap");
    api.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_api_server_slower_than_the_budget_is_phase_unknown_within_the_budget() {
    let seed = member_obj(MEMBER, CLUSTER, true, None);
    let api = api_with(&seed, None).await;
    for path in [
        member_path(NAMESPACE, MEMBER),
        cluster_path(NAMESPACE, CLUSTER),
    ] {
        api.clear_faults();
        api.set_fault(path.clone(), Fault::Delay(Duration::from_secs(30)), None);
        let (_dir, data) = empty_dir();
        let step = format!("{path} answers after 30 s");
        let env = with(&pod_env(&api, &data, &seed), "AGENT_TIMEOUT", BUDGET);
        let v = run(env).await;
        v.expect(&step, 14, "phase-unknown")
            .source(&step, "kube", false, "before the deadline");
        assert!(
            v.elapsed < BUDGET_PLUS_SLACK,
            "{step}: took {:?} with a budget of {BUDGET}",
            v.elapsed
        );
    }
    api.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transient_503_is_retried_and_the_seed_bootstraps() {
    let seed = member_obj(MEMBER, CLUSTER, true, None);
    let api = api_with(&seed, None).await.fault_times(
        member_path(NAMESPACE, MEMBER),
        Fault::Status(503),
        2,
    );
    let (_dir, data) = empty_dir();
    run(pod_env(&api, &data, &seed))
        .await
        .expect("two 503s, then the record", 0, "bootstrap");
    assert_eq!(
        api.requests()
            .iter()
            .filter(|r| !r.path.contains("/leases/"))
            .count(),
        4,
        "three GETs of the member, one of the cluster (and the witness Lease's)"
    );
    api.stop().await;
}

/// An initialized dir (a stopped single-member cluster) against the operator's
/// records: matching IDs start, a different member or cluster ID is foreign, and
/// an API fault does not refuse a consistent directory.
async fn initialized_dir_against_the_records(version: EtcdVersion) {
    let cluster = Cluster::builder(version)
        .members(1)
        .token("preflight-kube")
        .start();
    let m0 = &cluster[0];
    let member_id = m0.id_hex().expect("m0's ID");
    let cluster_id = format!(
        "{:016x}",
        m0.endpoint_status()["header"]["cluster_id"]
            .as_u64()
            .expect("cluster_id")
    );
    m0.stop();
    let record = |id: &str| member_obj(m0.name(), CLUSTER, true, Some(id));
    let api = api_with(&record(&member_id), Some(&cluster_id)).await;
    let mut env = m0.agent_env();
    for (k, v) in pod_env(&api, m0.data_dir(), &record(&member_id)) {
        if ["AGENT_KUBE", "POD_NAMESPACE", "POD_NAME", "KUBECONFIG"].contains(&k.as_str()) {
            env = with(&env, &k, &v);
        }
    }

    let step = "records match";
    let v = run(env.clone()).await;
    v.expect(step, 0, "start")
        .reason_mentions(step, "the operator's record")
        .source(step, "kube", true, "");
    assert_eq!(v.doc()["data_dir"]["member_id"], member_id.as_str());
    assert_eq!(v.doc()["data_dir"]["cluster_id"], cluster_id.as_str());

    let step = "the EtcdMember records another memberID";
    api.put(record(MEMBER_ID));
    run(env.clone())
        .await
        .expect(step, 11, "refuse-foreign")
        .reason_mentions(
            step,
            &format!("member ID in the WAL is {member_id} but the EtcdMember says {MEMBER_ID}"),
        );

    let step = "the EtcdCluster records another clusterID";
    api.put(record(&member_id));
    api.put(cluster_obj(CLUSTER, Some(CLUSTER_ID)));
    run(env.clone())
        .await
        .expect(step, 11, "refuse-foreign")
        .reason_mentions(step, "the EtcdCluster says");

    // Refusing a consistent directory for want of evidence would turn every API
    // outage into an etcd outage.
    let step = "the API forbids the read";
    api.set_fault(member_path(NAMESPACE, m0.name()), Fault::Status(403), None);
    run(env.clone())
        .await
        .expect(step, 0, "start")
        .source(step, "kube", false, "forbidden");
    api.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_initialized_dir_starts_when_the_records_match_and_is_refused_when_an_id_differs_on_etcd_3_4(
) {
    initialized_dir_against_the_records(EtcdVersion::V3_4).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_initialized_dir_starts_when_the_records_match_and_is_refused_when_an_id_differs_on_etcd_3_5(
) {
    initialized_dir_against_the_records(EtcdVersion::V3_5).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_initialized_dir_starts_when_the_records_match_and_is_refused_when_an_id_differs_on_etcd_3_6(
) {
    initialized_dir_against_the_records(EtcdVersion::V3_6).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_initialized_dir_starts_when_the_records_match_and_is_refused_when_an_id_differs_on_etcd_3_7(
) {
    initialized_dir_against_the_records(EtcdVersion::V3_7).await;
}
