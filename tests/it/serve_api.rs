//! `serve`'s gRPC surface without etcd: hostile input (oversized requests, unknown
//! fields, too many watchers), TLS and mTLS in both directions, reflection,
//! graceful shutdown, and the schema's documentation. The agent is pointed at a
//! port where nothing listens: it still publishes an identity ("the local member
//! does not answer"), which is all these tests need.

use std::time::Duration;

use crate::common::*;
use crate::serve_support::{block_on, metric, pb, CollectorServer, Pki, Serve};
use prost::Message;
use tonic::codegen::http::uri::PathAndQuery;
use tonic::transport::Endpoint;

/// A client URL where nothing listens.
fn nowhere() -> String {
    format!("http://127.0.0.1:{}", free_port())
}

/// A future version of GetIdentityRequest, with fields this agent does not know.
#[derive(Clone, PartialEq, prost::Message)]
struct FutureGetIdentityRequest {
    #[prost(string, tag = "7")]
    wanted_view: String,
    #[prost(uint64, tag = "99")]
    min_sequence: u64,
    #[prost(bytes = "vec", tag = "100")]
    padding: Vec<u8>,
}

async fn raw_get_identity(
    serve: &Serve,
    request: FutureGetIdentityRequest,
) -> Result<pb::Identity, tonic::Status> {
    let mut grpc = tonic::client::Grpc::new(serve.channel().await);
    grpc.ready()
        .await
        .map_err(|e| tonic::Status::unknown(e.to_string()))?;
    let codec = tonic_prost::ProstCodec::<FutureGetIdentityRequest, pb::Identity>::default();
    grpc.unary(
        tonic::Request::new(request),
        PathAndQuery::from_static("/etcd.agent.v1.MemberAgent/GetIdentity"),
        codec,
    )
    .await
    .map(tonic::Response::into_inner)
}

#[test]
fn unknown_request_fields_are_ignored() {
    let serve = Serve::beside(&nowhere()).start();
    let _ = block_on(serve.identity());
    let request = FutureGetIdentityRequest {
        wanted_view: "full".into(),
        min_sequence: 42,
        padding: vec![7; 100],
    };
    assert!(request.encoded_len() > 100);
    let identity = block_on(raw_get_identity(&serve, request))
        .unwrap_or_else(|s| panic!("a request with unknown fields was refused: {s}"));
    assert!(identity.sequence >= 1);
    assert!(!identity.member_answered);
    assert!(!identity.consistent);
    // No verdict file and no member: it says it waits for preflight, then
    // that the member does not answer.
    assert!(
        identity.reasons[0].starts_with("waiting for preflight's verdict")
            && identity.reasons[1].contains("does not answer"),
        "{:?}",
        identity.reasons
    );
}

#[test]
fn an_oversized_request_is_rejected_and_the_server_keeps_serving() {
    let serve = Serve::beside(&nowhere()).start();
    let _ = block_on(serve.identity());
    let huge = FutureGetIdentityRequest {
        padding: vec![0xAB; 1024 * 1024],
        ..Default::default()
    };
    let status =
        block_on(raw_get_identity(&serve, huge)).expect_err("a 1 MiB request was accepted");
    assert!(
        matches!(
            status.code(),
            tonic::Code::OutOfRange | tonic::Code::ResourceExhausted | tonic::Code::Internal
        ),
        "{status:?}"
    );
    assert!(
        status.message().contains("too large") || status.message().contains("length"),
        "{status:?}"
    );

    // Still serving, on new connections and on GetIdentity.
    for _ in 0..3 {
        let identity = block_on(serve.identity());
        assert!(identity.sequence >= 1);
    }
    assert!(serve.wait_live_ok());
}

trait LiveOk {
    fn wait_live_ok(&self) -> bool;
}

impl LiveOk for Serve {
    fn wait_live_ok(&self) -> bool {
        self.get("/livez").is_ok_and(|(code, _)| code == 200)
    }
}

#[test]
fn watchers_beyond_the_limit_get_resource_exhausted_and_get_identity_still_answers() {
    let serve = Serve::beside(&nowhere()).arg("--max-watchers=3").start();
    let _ = block_on(serve.identity());
    let mut client = block_on(serve.client());
    let mut open = Vec::new();
    for i in 0..3 {
        let mut stream = block_on(client.watch_identity(pb::WatchIdentityRequest {}))
            .unwrap_or_else(|s| panic!("watcher {i} refused: {s}"))
            .into_inner();
        let first = block_on(stream.message()).unwrap_or_else(|s| panic!("{s}"));
        assert!(first.is_some());
        open.push(stream);
    }
    let status = block_on(client.watch_identity(pb::WatchIdentityRequest {}))
        .expect_err("a fourth watcher was accepted");
    assert_eq!(status.code(), tonic::Code::ResourceExhausted, "{status:?}");
    assert!(status.message().contains("--max-watchers"), "{status:?}");
    assert_eq!(
        metric(&serve.metrics(), "etcd_agent_watchers", ""),
        Some(3.0)
    );

    let identity = block_on(client.get_identity(pb::GetIdentityRequest {}))
        .unwrap_or_else(|s| panic!("GetIdentity while watchers are full: {s}"));
    assert!(identity.into_inner().sequence >= 1);

    // A watcher that goes away frees its slot.
    drop(open.pop());
    assert_eventually!(
        ensure(
            metric(&serve.metrics(), "etcd_agent_watchers", "") == Some(2.0),
            "the slot is still taken"
        ),
        "a closed stream frees its watcher slot"
    );
    let again = block_on(client.watch_identity(pb::WatchIdentityRequest {}));
    assert!(again.is_ok(), "{:?}", again.err());
}

#[test]
fn reflection_lists_the_agent_and_health_services() {
    use tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient;
    use tonic_reflection::pb::v1::server_reflection_request::MessageRequest;
    use tonic_reflection::pb::v1::server_reflection_response::MessageResponse;
    use tonic_reflection::pb::v1::ServerReflectionRequest;

    let serve = Serve::beside(&nowhere()).start();
    let services = block_on(async {
        let mut client = ServerReflectionClient::new(serve.channel().await);
        let request = ServerReflectionRequest {
            host: String::new(),
            message_request: Some(MessageRequest::ListServices(String::new())),
        };
        let mut stream = client
            .server_reflection_info(tokio_stream::iter(vec![request]))
            .await
            .unwrap_or_else(|s| panic!("reflection: {s}"))
            .into_inner();
        match stream.message().await {
            Ok(Some(resp)) => match resp.message_response {
                Some(MessageResponse::ListServicesResponse(list)) => {
                    list.service.into_iter().map(|s| s.name).collect::<Vec<_>>()
                }
                other => panic!("unexpected reflection answer {other:?}"),
            },
            other => panic!("no reflection answer: {other:?}"),
        }
    });
    for name in [
        "etcd.agent.v1.MemberAgent",
        "grpc.health.v1.Health",
        "grpc.reflection.v1.ServerReflection",
    ] {
        assert!(
            services.iter().any(|s| s == name),
            "{name} not in {services:?}"
        );
    }
}

#[test]
fn sigterm_ends_watch_streams_and_exits_0() {
    let mut serve = Serve::beside(&nowhere()).start();
    let _ = block_on(serve.identity());
    let mut client = block_on(serve.client());
    let mut stream = block_on(client.watch_identity(pb::WatchIdentityRequest {}))
        .unwrap_or_else(|s| panic!("{s}"))
        .into_inner();
    assert!(block_on(stream.message()).is_ok_and(|m| m.is_some()));

    serve.sigterm();
    let end = block_on(async {
        tokio::time::timeout(Duration::from_secs(5), async {
            loop {
                match stream.message().await {
                    Ok(Some(_)) => continue,
                    other => return other.map(|_| ()),
                }
            }
        })
        .await
    });
    assert!(
        end.is_ok(),
        "the watch stream did not end within 5 s of SIGTERM"
    );
    let status = serve
        .wait_exit(Duration::from_secs(10))
        .unwrap_or_else(|| panic!("serve did not exit within 10 s of SIGTERM"));
    assert_eq!(status.code(), Some(0), "{}", serve.log());
    assert!(serve.log().contains("drained"), "{}", serve.log());
}

#[test]
fn the_grpc_server_requires_a_client_certificate_under_mtls() {
    let pki = Pki::new();
    let serve = Serve::beside(&nowhere())
        .arg(format!("--tls-cert={}", pki.path("server.crt").display()))
        .arg(format!("--tls-key={}", pki.path("server.key").display()))
        .arg(format!("--tls-client-ca={}", pki.path("ca.crt").display()))
        .start();
    let url = format!("https://127.0.0.1:{}", serve.grpc);
    let call = |tls: Option<tonic::transport::ClientTlsConfig>, url: String| {
        block_on(async move {
            let mut endpoint = Endpoint::from_shared(url)
                .unwrap_or_else(|e| panic!("{e}"))
                .timeout(Duration::from_secs(5))
                .connect_timeout(Duration::from_secs(5));
            if let Some(tls) = tls {
                endpoint = endpoint.tls_config(tls).unwrap_or_else(|e| panic!("{e}"));
            }
            let channel = endpoint
                .connect()
                .await
                .map_err(|e| format!("connect: {e}"))?;
            pb::member_agent_client::MemberAgentClient::new(channel)
                .get_identity(pb::GetIdentityRequest {})
                .await
                .map(|r| r.into_inner())
                .map_err(|s| format!("{s}"))
        })
    };
    let identity = assert_eventually!(
        call(Some(pki.client_tls(Some("client"))), url.clone()),
        "a client with the right certificate is served"
    );
    assert!(identity.sequence >= 1);
    let without = call(Some(pki.client_tls(None)), url.clone());
    assert!(
        without.is_err(),
        "a client without a certificate was served"
    );
    let rogue = call(Some(pki.client_tls(Some("rogue"))), url.clone());
    assert!(
        rogue.is_err(),
        "a client with another CA's certificate was served"
    );
    let plaintext = call(None, serve.grpc_url());
    assert!(plaintext.is_err(), "a plaintext client was served");
    // HTTP probes stay plaintext for the kubelet.
    assert!(serve.get("/livez").is_ok());
}

#[test]
fn the_mtls_collector_accepts_the_agent_with_its_certificate_and_rejects_one_without() {
    let pki = Pki::new();
    let port = free_port();
    let mut collector = CollectorServer::start(port, Some(pki.server_tls()));
    let url = format!("--report-to=https://127.0.0.1:{port}");
    let ca = format!("--report-ca={}", pki.path("ca.crt").display());
    let agent = |pod: &str, cert: Option<&str>| {
        let mut b = Serve::beside(&nowhere())
            .arg(url.clone())
            .arg(ca.clone())
            .arg(format!("--pod-name={pod}"))
            .arg("--report-interval=500ms")
            .arg("--report-timeout=2s");
        if let Some(name) = cert {
            b = b
                .arg(format!(
                    "--report-cert={}",
                    pki.path(&format!("{name}.crt")).display()
                ))
                .arg(format!(
                    "--report-key={}",
                    pki.path(&format!("{name}.key")).display()
                ));
        }
        b.start()
    };
    let good = agent("trusted", Some("client"));
    let rogue = agent("intruder", Some("rogue"));
    let anonymous = agent("anonymous", None);

    let report = collector.wait_report("from the trusted agent", |r| r.pod_name == "trusted");
    assert!(report.identity.is_some());
    for bad in [&rogue, &anonymous] {
        assert_eventually!(
            ensure(
                metric(
                    &bad.metrics(),
                    "etcd_agent_reports_total",
                    "result=\"error\""
                )
                .unwrap_or(0.0)
                    >= 2.0,
                "no failed report yet"
            ),
            "an agent without the right certificate fails to report"
        );
        assert_eq!(
            metric(&bad.metrics(), "etcd_agent_reports_total", "result=\"ok\""),
            None
        );
    }
    // Nothing from them ever arrived.
    while let Some(r) = collector.next_report(Duration::from_millis(300)) {
        assert_eq!(
            r.pod_name, "trusted",
            "a report got through without the right certificate"
        );
    }
    assert!(
        metric(&good.metrics(), "etcd_agent_reports_total", "result=\"ok\"").unwrap_or(0.0) >= 1.0
    );
}

#[test]
fn configuration_errors_exit_2_before_serving() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let missing = dir.path().join("missing.crt");
    let cases: Vec<Vec<String>> = vec![
        vec![
            format!("--tls-cert={}", missing.display()),
            format!("--tls-key={}", missing.display()),
        ],
        vec![format!("--tls-cert={}", missing.display())],
        vec!["--report-to=https://127.0.0.1:1".into()],
        vec!["--report-to=collector:9000".into()],
        vec!["--max-watchers=0".into()],
        vec!["--poll-interval=0s".into()],
        vec!["--kube=true".into()],
    ];
    for extra in cases {
        let mut args = vec![
            "serve".to_owned(),
            format!("--endpoints={}", nowhere()),
            format!("--grpc-listen=127.0.0.1:{}", free_port()),
            format!("--http-listen=127.0.0.1:{}", free_port()),
            format!("--data-dir={}", dir.path().display()),
        ];
        if !extra.iter().any(|a| a.starts_with("--kube")) {
            args.push("--kube=false".into());
        }
        args.extend(extra.iter().cloned());
        let run = run_agent(&args, &[("AGENT_LOG", "warn")]);
        assert_eq!(run.code, 2, "{extra:?} should be a usage error\n{run}");
    }
}

/// Every service, method, message, field and enum value of the schema appears
/// in `docs/grpc-api.md` (as `name`), and every field is commented in the .proto.
#[test]
fn the_grpc_api_doc_covers_every_name_in_the_schema() {
    let proto = include_str!("../../proto/etcd/agent/v1/agent.proto");
    let doc = include_str!("../../docs/grpc-api.md");
    let mut missing = Vec::new();
    let mut uncommented = Vec::new();
    let mut previous = "";
    for line in proto.lines().map(str::trim) {
        let name = if let Some(rest) = line
            .strip_prefix("service ")
            .or_else(|| line.strip_prefix("message "))
            .or_else(|| line.strip_prefix("enum "))
            .or_else(|| line.strip_prefix("rpc "))
        {
            rest.split([' ', '(', '{']).next().map(str::to_owned)
        } else if line.ends_with(';')
            && line.contains(" = ")
            && !line.starts_with("option")
            && !line.starts_with("syntax")
        {
            // `repeated string reasons = 41;`, `REPORT_TRIGGER_CHANGE = 2;`
            let left = line.split(" = ").next().unwrap_or("");
            let field = left.split_whitespace().last().map(str::to_owned);
            if !previous.starts_with("//") {
                uncommented.push(line.to_owned());
            }
            field
        } else {
            None
        };
        if let Some(name) = name {
            if !doc.contains(&format!("`{name}`")) {
                missing.push(name);
            }
        }
        previous = line;
    }
    assert!(
        uncommented.is_empty(),
        "fields without a comment: {uncommented:?}"
    );
    assert!(
        missing.is_empty(),
        "not documented in docs/grpc-api.md: {missing:?}"
    );
}
