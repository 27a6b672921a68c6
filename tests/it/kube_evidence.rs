//! The operator's records read through a real HTTP client from an in-process
//! API server (`kube_fake`), reached via a kubeconfig file as the binary will be.

use crate::kube_fake;

use std::time::Duration;

use crate::kube_fake::{
    cluster_obj, cluster_path, member_obj, member_path, FakeApi, Fault, NAMESPACE,
};
use etcd_member_agent::disk::ids::{ClusterId, MemberId};
use etcd_member_agent::evidence::client::{ApiError, ConfigError};
use etcd_member_agent::evidence::kube::{
    client, fetch, Kind, KubeEvidenceError, KubeTarget, OperatorRecord,
};
use tokio::time::Instant;

const MEMBER: &str = "etcd-x7k2p";
const CLUSTER: &str = "etcd";
const MEMBER_ID: &str = "ae36f238164a08ad";
const CLUSTER_ID: &str = "769f1c9e0d723d0b";

fn target(api: &FakeApi) -> KubeTarget {
    KubeTarget {
        namespace: NAMESPACE.to_owned(),
        member_name: MEMBER.to_owned(),
        kubeconfig: Some(api.kubeconfig_path().to_owned()),
    }
}

async fn fetch_within(
    api: &FakeApi,
    budget: Duration,
) -> Result<OperatorRecord, KubeEvidenceError> {
    let target = target(api);
    let kube = client(&target, Duration::from_secs(5))
        .await
        .unwrap_or_else(|e| panic!("client: {e}"));
    fetch(&kube, &target, Instant::now() + budget).await
}

async fn fetch_ok(api: &FakeApi) -> OperatorRecord {
    fetch_within(api, Duration::from_secs(5))
        .await
        .unwrap_or_else(|e| panic!("fetch: {e}"))
}

#[tokio::test]
async fn a_member_that_was_ready_carries_its_member_id() {
    let api = FakeApi::start()
        .await
        .member(member_obj(MEMBER, CLUSTER, false, Some(MEMBER_ID)))
        .cluster(cluster_obj(CLUSTER, Some(CLUSTER_ID)));

    let rec = fetch_ok(&api).await;
    assert_eq!(rec.member.name, MEMBER);
    assert_eq!(rec.member.cluster_name, CLUSTER);
    assert!(!rec.member.bootstrap);
    assert_eq!(
        rec.member.member_id,
        Some(MemberId::new(0xae36f238164a08ad))
    );
    assert!(!rec.member.dormant);
    assert_eq!(
        rec.member.cluster_token.as_deref(),
        Some(kube_fake::cluster_token(CLUSTER).as_str())
    );
    assert!(rec
        .member
        .initial_cluster
        .as_deref()
        .is_some_and(|ic| ic.contains(MEMBER)));
    assert!(rec.member.pod_uid.is_some());
    assert_eq!(rec.cluster.name, CLUSTER);
    assert_eq!(
        rec.cluster.cluster_id,
        Some(ClusterId::new(0x769f1c9e0d723d0b))
    );
    assert_eq!(rec.cluster.replicas, Some(3));

    // Through the real paths, with the kubeconfig's credentials.
    let requests = api.requests();
    let paths: Vec<_> = requests.iter().map(|r| r.path.clone()).collect();
    assert_eq!(
        paths,
        vec![
            member_path(NAMESPACE, MEMBER),
            cluster_path(NAMESPACE, CLUSTER)
        ]
    );
    assert!(requests.iter().all(|r| r.method == "GET"));
    assert_eq!(
        requests[0].authorization.as_deref(),
        Some(format!("Bearer {}", kube_fake::TOKEN).as_str())
    );
    api.stop().await;
}

#[tokio::test]
async fn a_seed_whose_cluster_formed_shows_the_cluster_id_without_a_member_id() {
    let api = FakeApi::start()
        .await
        .member(member_obj(MEMBER, CLUSTER, true, None))
        .cluster(cluster_obj(CLUSTER, Some(CLUSTER_ID)));

    let rec = fetch_ok(&api).await;
    assert!(rec.member.bootstrap);
    assert_eq!(rec.member.member_id, None);
    assert_eq!(
        rec.cluster.cluster_id,
        Some(ClusterId::new(0x769f1c9e0d723d0b))
    );
    assert_eq!(
        rec.member.initial_cluster,
        Some(format!(
            "{MEMBER}=https://{MEMBER}.{CLUSTER}.{NAMESPACE}.svc:2380"
        ))
    );
    api.stop().await;
}

#[tokio::test]
async fn a_fresh_seed_has_nothing_recorded() {
    let api = FakeApi::start()
        .await
        .member(member_obj(MEMBER, CLUSTER, true, None))
        .cluster(cluster_obj(CLUSTER, None));

    let rec = fetch_ok(&api).await;
    assert!(rec.member.bootstrap);
    assert_eq!(rec.member.member_id, None);
    assert_eq!(rec.cluster.cluster_id, None);
    assert!(rec.cluster.cluster_token.is_some());
    api.stop().await;
}

#[tokio::test]
async fn a_scale_up_member_not_yet_ready_is_not_bootstrap_and_has_no_member_id() {
    let api = FakeApi::start()
        .await
        .member(member_obj(MEMBER, CLUSTER, false, None))
        .cluster(cluster_obj(CLUSTER, Some(CLUSTER_ID)));

    let rec = fetch_ok(&api).await;
    assert!(!rec.member.bootstrap);
    assert_eq!(rec.member.member_id, None);
    assert_eq!(
        rec.cluster.cluster_id,
        Some(ClusterId::new(0x769f1c9e0d723d0b))
    );
    api.stop().await;
}

#[tokio::test]
async fn empty_id_strings_and_a_dormant_member_parse() {
    let mut member = member_obj(MEMBER, CLUSTER, true, None);
    member["status"]["memberID"] = serde_json::json!("");
    member["spec"]["dormant"] = serde_json::json!(true);
    let mut cluster = cluster_obj(CLUSTER, None);
    cluster["status"]["clusterID"] = serde_json::json!("");
    cluster["spec"]["replicas"] = serde_json::json!(0);
    let api = FakeApi::start().await.member(member).cluster(cluster);

    let rec = fetch_ok(&api).await;
    assert_eq!(rec.member.member_id, None);
    assert!(rec.member.dormant);
    assert_eq!(rec.cluster.cluster_id, None);
    assert_eq!(rec.cluster.replicas, Some(0));
    api.stop().await;
}

#[tokio::test]
async fn the_record_serializes_with_hex_ids() {
    let api = FakeApi::start()
        .await
        .member(member_obj(MEMBER, CLUSTER, true, Some(MEMBER_ID)))
        .cluster(cluster_obj(CLUSTER, Some(CLUSTER_ID)));
    let rec = fetch_ok(&api).await;
    let v = serde_json::to_value(&rec).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(v["member"]["member_id"], MEMBER_ID);
    assert_eq!(v["cluster"]["cluster_id"], CLUSTER_ID);
    assert_eq!(v["member"]["bootstrap"], true);
    api.stop().await;
}

#[tokio::test]
async fn a_missing_member_is_not_found() {
    let api = FakeApi::start().await.cluster(cluster_obj(CLUSTER, None));
    match fetch_within(&api, Duration::from_secs(5)).await {
        Err(KubeEvidenceError::Api(ApiError::NotFound {
            kind,
            namespace,
            name,
        })) => {
            assert_eq!(kind, Kind::EtcdMember);
            assert_eq!(namespace, NAMESPACE);
            assert_eq!(name, MEMBER);
        }
        other => panic!("expected NotFound, got {other:?}"),
    }
    api.stop().await;
}

#[tokio::test]
async fn a_missing_cluster_is_not_found_as_a_cluster() {
    let api = FakeApi::start()
        .await
        .member(member_obj(MEMBER, CLUSTER, true, None));
    match fetch_within(&api, Duration::from_secs(5)).await {
        Err(KubeEvidenceError::Api(ApiError::NotFound { kind, name, .. })) => {
            assert_eq!(kind, Kind::EtcdCluster);
            assert_eq!(name, CLUSTER);
        }
        other => panic!("expected NotFound, got {other:?}"),
    }
    api.stop().await;
}

#[tokio::test]
async fn an_unserved_resource_is_not_confused_with_a_missing_record() {
    let api = FakeApi::start()
        .await
        .member(member_obj(MEMBER, CLUSTER, true, None))
        .fault(member_path(NAMESPACE, MEMBER), Fault::NotServed);
    match fetch_within(&api, Duration::from_secs(5)).await {
        Err(KubeEvidenceError::Api(ApiError::NotServed { kind, message })) => {
            assert_eq!(kind, Kind::EtcdMember);
            assert!(
                message.contains("could not find the requested resource"),
                "{message}"
            );
        }
        other => panic!("expected NotServed, got {other:?}"),
    }
    api.stop().await;
}

#[tokio::test]
async fn forbidden_says_which_rbac_verb_and_resource_are_missing() {
    let api = FakeApi::start()
        .await
        .member(member_obj(MEMBER, CLUSTER, true, None))
        .cluster(cluster_obj(CLUSTER, None))
        .fault(cluster_path(NAMESPACE, CLUSTER), Fault::Status(403));
    let err = fetch_within(&api, Duration::from_secs(5)).await;
    match &err {
        Err(KubeEvidenceError::Api(ApiError::Forbidden {
            verb, kind, name, ..
        })) => {
            assert_eq!(*verb, "get");
            assert_eq!(*kind, Kind::EtcdCluster);
            assert_eq!(name, CLUSTER);
        }
        other => panic!("expected Forbidden, got {other:?}"),
    }
    let text = err.err().map(|e| e.to_string()).unwrap_or_default();
    assert!(text.contains("`get`"), "{text}");
    assert!(
        text.contains("etcdclusters.etcd-operator.cozystack.io"),
        "{text}"
    );
    assert!(text.contains(NAMESPACE), "{text}");
    api.stop().await;
}

#[tokio::test]
async fn a_server_error_is_an_api_error_with_its_code() {
    let api = FakeApi::start()
        .await
        .member(member_obj(MEMBER, CLUSTER, true, None))
        .fault(member_path(NAMESPACE, MEMBER), Fault::Status(500));
    match fetch_within(&api, Duration::from_secs(5)).await {
        Err(KubeEvidenceError::Api(ApiError::Api {
            code,
            reason,
            message,
            kind,
            ..
        })) => {
            assert_eq!(code, 500);
            assert_eq!(reason, "InternalError");
            assert!(
                message.contains("etcdserver: request timed out"),
                "{message}"
            );
            assert_eq!(kind, Kind::EtcdMember);
        }
        other => panic!("expected Api, got {other:?}"),
    }
    // A 500 is not retried.
    assert_eq!(api.requests().len(), 1);
    api.stop().await;
}

#[tokio::test]
async fn an_overloaded_server_is_retried_until_it_answers() {
    let api = FakeApi::start()
        .await
        .member(member_obj(MEMBER, CLUSTER, true, Some(MEMBER_ID)))
        .cluster(cluster_obj(CLUSTER, Some(CLUSTER_ID)))
        .fault_times(member_path(NAMESPACE, MEMBER), Fault::Status(503), 2);
    let rec = fetch_ok(&api).await;
    assert_eq!(
        rec.member.member_id,
        Some(MemberId::new(0xae36f238164a08ad))
    );
    assert_eq!(api.requests().len(), 4);
    api.stop().await;
}

#[tokio::test]
async fn a_server_that_stays_overloaded_reports_its_last_answer_by_the_deadline() {
    let api = FakeApi::start()
        .await
        .fault(member_path(NAMESPACE, MEMBER), Fault::Status(503));
    let budget = Duration::from_millis(700);
    let started = Instant::now();
    let result = fetch_within(&api, budget).await;
    assert!(started.elapsed() <= budget + Duration::from_millis(300));
    match result {
        Err(KubeEvidenceError::Api(ApiError::Api { code, reason, .. })) => {
            assert_eq!(code, 503);
            assert_eq!(reason, "ServiceUnavailable");
        }
        other => panic!("expected Api 503, got {other:?}"),
    }
    assert!(api.requests().len() > 1, "503 should have been retried");
    api.stop().await;
}

#[tokio::test]
async fn a_slow_server_times_out_by_the_deadline() {
    let api = FakeApi::start()
        .await
        .member(member_obj(MEMBER, CLUSTER, true, None))
        .cluster(cluster_obj(CLUSTER, None))
        .delay(cluster_path(NAMESPACE, CLUSTER), Duration::from_secs(30));
    let budget = Duration::from_millis(600);
    let started = Instant::now();
    let result = fetch_within(&api, budget).await;
    let took = started.elapsed();
    assert!(took <= budget + Duration::from_millis(200), "took {took:?}");
    match result {
        Err(KubeEvidenceError::Api(ApiError::Timeout {
            kind,
            namespace,
            name,
        })) => {
            assert_eq!(kind, Kind::EtcdCluster);
            assert_eq!(namespace, NAMESPACE);
            assert_eq!(name, CLUSTER);
        }
        other => panic!("expected Timeout, got {other:?}"),
    }
    // The delayed handler is cut short: stop() returns promptly.
    let stopping = Instant::now();
    api.stop().await;
    assert!(stopping.elapsed() < Duration::from_secs(2));
}

#[tokio::test]
async fn the_client_request_timeout_also_bounds_a_call() {
    let api = FakeApi::start()
        .await
        .member(member_obj(MEMBER, CLUSTER, true, None))
        .delay(member_path(NAMESPACE, MEMBER), Duration::from_secs(30));
    let target = target(&api);
    let kube = client(&target, Duration::from_millis(300))
        .await
        .unwrap_or_else(|e| panic!("client: {e}"));
    let started = Instant::now();
    let result = fetch(&kube, &target, Instant::now() + Duration::from_secs(10)).await;
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "took {:?}",
        started.elapsed()
    );
    assert!(
        matches!(
            result,
            Err(KubeEvidenceError::Api(ApiError::Timeout {
                kind: Kind::EtcdMember,
                ..
            }))
        ),
        "{result:?}"
    );
    api.stop().await;
}

#[tokio::test]
async fn a_truncated_json_body_is_malformed() {
    let api = FakeApi::start()
        .await
        .fault(member_path(NAMESPACE, MEMBER), Fault::truncated_json());
    match fetch_within(&api, Duration::from_secs(5)).await {
        Err(KubeEvidenceError::Api(ApiError::Malformed { kind, name, .. })) => {
            assert_eq!(kind, Kind::EtcdMember);
            assert_eq!(name, MEMBER);
        }
        other => panic!("expected Malformed, got {other:?}"),
    }
    api.stop().await;
}

#[tokio::test]
async fn a_record_of_the_wrong_shape_is_malformed_naming_the_field() {
    let mut member = member_obj(MEMBER, CLUSTER, true, None);
    member["status"]["memberID"] = serde_json::json!("ae36-f238");
    let api = FakeApi::start().await.member(member);
    match fetch_within(&api, Duration::from_secs(5)).await {
        Err(KubeEvidenceError::Malformed { field, detail, .. }) => {
            assert_eq!(field, "status.memberID");
            assert!(detail.contains("ae36-f238"), "{detail}");
        }
        other => panic!("expected Malformed, got {other:?}"),
    }

    let mut member = member_obj(MEMBER, CLUSTER, true, None);
    if let Some(spec) = member["spec"].as_object_mut() {
        spec.remove("clusterName");
    }
    api.put(member);
    match fetch_within(&api, Duration::from_secs(5)).await {
        Err(KubeEvidenceError::Malformed { field, .. }) => assert_eq!(field, "spec.clusterName"),
        other => panic!("expected Malformed, got {other:?}"),
    }

    api.put(member_obj(MEMBER, CLUSTER, true, None));
    let mut cluster = cluster_obj(CLUSTER, None);
    cluster["status"]["clusterID"] = serde_json::json!(12345);
    api.put(cluster);
    match fetch_within(&api, Duration::from_secs(5)).await {
        Err(KubeEvidenceError::Malformed { kind, field, .. }) => {
            assert_eq!(kind, Kind::EtcdCluster);
            assert_eq!(field, "status.clusterID");
        }
        other => panic!("expected Malformed, got {other:?}"),
    }
    api.stop().await;
}

#[tokio::test]
async fn an_unreachable_api_server_is_reported_by_the_deadline() {
    let api = FakeApi::start().await;
    let target = target(&api);
    // The kubeconfig stays; the server behind it goes.
    let kubeconfig_dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let kubeconfig = kubeconfig_dir.path().join("kubeconfig");
    std::fs::copy(api.kubeconfig_path(), &kubeconfig).unwrap_or_else(|e| panic!("{e}"));
    api.stop().await;
    let target = KubeTarget {
        kubeconfig: Some(kubeconfig),
        ..target
    };
    let kube = client(&target, Duration::from_secs(2))
        .await
        .unwrap_or_else(|e| panic!("client: {e}"));
    let budget = Duration::from_millis(600);
    let started = Instant::now();
    let result = fetch(&kube, &target, Instant::now() + budget).await;
    assert!(started.elapsed() <= budget + Duration::from_millis(200));
    match result {
        Err(KubeEvidenceError::Api(ApiError::Unreachable { kind, detail, .. })) => {
            assert_eq!(kind, Kind::EtcdMember);
            assert!(!detail.is_empty());
        }
        other => panic!("expected Unreachable, got {other:?}"),
    }
}

#[tokio::test]
async fn a_missing_kubeconfig_is_a_config_error() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let target = KubeTarget {
        namespace: NAMESPACE.to_owned(),
        member_name: MEMBER.to_owned(),
        kubeconfig: Some(dir.path().join("no-such-kubeconfig")),
    };
    match client(&target, Duration::from_secs(1)).await {
        Err(KubeEvidenceError::Config(ConfigError { from, .. })) => {
            assert!(from.contains("no-such-kubeconfig"), "{from}")
        }
        Err(other) => panic!("expected Config, got {other:?}"),
        Ok(_) => panic!("expected Config, got a client"),
    }
}
