//! `restore --from-s3` against a real S3-compatible server on loopback: `moto` in
//! server mode (PyPI `moto[server]`, installed by `scripts/setup`), started and
//! stopped by each test by PID. Buckets and objects are created with plain HTTP
//! requests (moto accepts unsigned requests until auth is enforced).
//!
//! Credentials: moto accepts any credentials by default. With
//! `INITIAL_NO_AUTH_ACTION_COUNT=N` it enforces SigV4 signatures and IAM policies
//! after the first N actions, which the auth test spends on creating a user, its
//! access key and policy, the bucket and the object; the agent's requests come
//! after that and are verified.
//!
//! Two hand-written servers show the bounds: one accepts connections and never
//! answers, one answers HEAD and then stalls halfway through the GET body. Both
//! must end in exit 30 within the configured timeouts, with the data dir left
//! empty.

use crate::common::*;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use serde_json::Value;

const SENTINEL_KEY: &str = "s3-restore-sentinel";
const SENTINEL_VALUE: &str = "downloaded";
const BUCKET: &str = "etcd-snapshots";
const KEY: &str = "cluster-a/2024-01-01.db";

/// A snapshot of a one-member etcd 3.5.1 cluster holding the sentinel, saved once
/// per test process (directories of dead test processes are removed).
fn snapshot() -> &'static Path {
    static SNAP: OnceLock<PathBuf> = OnceLock::new();
    SNAP.get_or_init(|| {
        let dir = per_process_dir("agent-restore-s3-snaps-");
        let cluster = Cluster::builder(EtcdVersion::V3_5).members(1).start();
        cluster.put(SENTINEL_KEY, SENTINEL_VALUE);
        let path = dir.join("snap.db");
        cluster.snapshot_save(&path);
        path
    })
}

/// One plain HTTP/1.1 request on a fresh connection: status and body.
fn http(
    port: u16,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> (u16, String) {
    let mut s = TcpStream::connect(("127.0.0.1", port))
        .unwrap_or_else(|e| panic!("connect to 127.0.0.1:{port}: {e}"));
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    s.write_all(head.as_bytes()).unwrap();
    s.write_all(body).unwrap();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    let text = String::from_utf8_lossy(&out).into_owned();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("{method} {path}: no HTTP status in {text:?}"));
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    (status, body)
}

/// etcd 3.5.1 as the one member `r0` of the cluster `s3_env` restores, on
/// `data` under `base/r0`; not started.
fn restored_member(base: &Path, data: &Path, peer_url: &str, client_url: String) -> Member {
    Member::new(
        EtcdVersion::V3_5,
        base.join("r0"),
        MemberFlags {
            name: "r0".into(),
            data_dir: data.to_path_buf(),
            peer_url: peer_url.to_string(),
            client_url,
            initial_cluster: format!("r0={peer_url}"),
            initial_cluster_state: ClusterState::New,
            token: "s3-restored".into(),
            snapshot_count: None,
            extra_args: Vec::new(),
        },
    )
}

/// moto in server mode on a free loopback port, killed by PID on drop.
struct Moto {
    child: Child,
    port: u16,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl Moto {
    fn start(env: &[(&str, &str)]) -> Moto {
        Moto::start_with(env, &[])
    }

    /// With extra server arguments (`-c cert -k key` for TLS).
    fn start_with(env: &[(&str, &str)], args: &[&str]) -> Moto {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("moto.log");
        let port = free_port();
        let out = std::fs::File::create(&log).unwrap();
        let child = Command::new("python3")
            .args([
                "-m",
                "moto.server",
                "-H",
                "127.0.0.1",
                "-p",
                &port.to_string(),
            ])
            .args(args)
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start moto (run scripts/setup): {e}"));
        let mut moto = Moto {
            child,
            port,
            log,
            _dir: dir,
        };
        assert_eventually!(
            {
                if let Ok(Some(status)) = moto.child.try_wait() {
                    panic!(
                        "moto exited with {status} (is `moto[server]` installed? run scripts/setup):\n{}",
                        std::fs::read_to_string(&moto.log).unwrap_or_default()
                    );
                }
                TcpStream::connect(("127.0.0.1", port))
                    .map(drop)
                    .map_err(|e| e.to_string())
            },
            "moto listens on {port}"
        );
        moto
    }

    fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Creates `bucket` and uploads `body` as `key` (unsigned).
    fn put_object(&self, bucket: &str, key: &str, body: &[u8]) {
        let (status, text) = http(self.port, "PUT", &format!("/{bucket}"), &[], b"");
        assert_eq!(status, 200, "create bucket: {text}");
        let (status, text) = http(
            self.port,
            "PUT",
            &format!("/{bucket}/{key}"),
            &[("Content-Type", "application/octet-stream")],
            body,
        );
        assert_eq!(status, 200, "put object: {text}");
    }

    /// An IAM action (form POST), routed to IAM by the credential scope.
    fn iam(&self, params: &[(&str, &str)]) -> String {
        let body: String = params
            .iter()
            .chain([("Version", "2010-05-08")].iter())
            .map(|(k, v)| format!("{k}={}", urlencode(v)))
            .collect::<Vec<_>>()
            .join("&");
        let (status, text) = http(
            self.port,
            "POST",
            "/",
            &[
                ("Content-Type", "application/x-www-form-urlencoded"),
                (
                    "Authorization",
                    "AWS4-HMAC-SHA256 Credential=AKIASETUP/20240101/us-east-1/iam/aws4_request, SignedHeaders=host, Signature=00",
                ),
            ],
            body.as_bytes(),
        );
        assert_eq!(status, 200, "IAM {params:?}: {text}");
        text
    }
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn urlencode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

fn xml_field(xml: &str, tag: &str) -> String {
    let open = format!("<{tag}>");
    let start = xml
        .find(&open)
        .unwrap_or_else(|| panic!("no <{tag}> in {xml}"))
        + open.len();
    let end = xml[start..].find('<').unwrap() + start;
    xml[start..end].to_string()
}

/// The operator's env for an S3 restore of member r0 into `data`.
fn s3_env(
    endpoint: &str,
    key: &str,
    data: &Path,
    scratch: &Path,
    peer_url: &str,
) -> Vec<(String, String)> {
    let etcdutl = EtcdVersion::V3_5.etcdutl().expect("3.5 ships etcdutl");
    [
        ("ETCD_DATA_DIR", data.display().to_string()),
        ("ETCD_MEMBER_NAME", "r0".into()),
        ("ETCD_INITIAL_CLUSTER", format!("r0={peer_url}")),
        ("ETCD_INITIAL_CLUSTER_TOKEN", "s3-restored".into()),
        ("AGENT_KUBE", "false".into()),
        ("AGENT_ALLOW_BOOTSTRAP_WITHOUT_EVIDENCE", "true".into()),
        (
            "TERMINATION_LOG",
            scratch.join("termination-log").display().to_string(),
        ),
        (
            "AGENT_VERDICT_FILE",
            scratch.join("verdict.json").display().to_string(),
        ),
        ("ETCDUTL_PATH", etcdutl.display().to_string()),
        ("SNAPSHOT_DEST_KIND", "s3".into()),
        ("S3_ENDPOINT", endpoint.into()),
        ("S3_BUCKET", BUCKET.into()),
        ("S3_KEY", key.into()),
        ("S3_REGION", "us-east-1".into()),
        ("S3_FORCE_PATH_STYLE", "true".into()),
        ("AWS_ACCESS_KEY_ID", "AKIAEXAMPLE".into()),
        ("AWS_SECRET_ACCESS_KEY", "not-checked-by-default".into()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}

fn restore(env: &[(String, String)]) -> AgentRun {
    let run = run_agent(["restore", "-o", "json"], env);
    assert_eq!(
        run.json()["exit_code"].as_i64(),
        Some(i64::from(run.code)),
        "exit_code in the document must be the exit status\n{run}"
    );
    run
}

#[test]
fn a_snapshot_downloads_from_an_s3_compatible_store_with_path_style_and_restores() {
    let moto = Moto::start(&[]);
    let snap = std::fs::read(snapshot()).unwrap();
    moto.put_object(BUCKET, KEY, &snap);
    let base = tempfile::tempdir().unwrap();
    let data = base.path().join("r0/data");
    let peer_url = format!("http://127.0.0.1:{}", free_port());
    let client_url = format!("http://127.0.0.1:{}", free_port());
    let env = s3_env(&moto.endpoint(), KEY, &data, base.path(), &peer_url);

    let started = Instant::now();
    let run = restore(&env);
    let took = started.elapsed();
    run.assert_code(0);
    let doc = run.json();
    assert_eq!(doc["verdict"], "restored", "{run}");
    assert_eq!(doc["source"]["kind"], "s3");
    assert_eq!(doc["bytes"].as_u64(), Some(snap.len() as u64));
    assert_eq!(doc["sha256_verified"], true);
    assert_eq!(entries(&data), ["member"]);
    eprintln!(
        "S3 download + restore of {} bytes: {took:?} (stages {})",
        snap.len(),
        doc["timings_ms"]
    );

    let etcd = restored_member(base.path(), &data, &peer_url, client_url);
    etcd.start();
    etcd.wait_healthy();
    assert_eq!(etcd.get(SENTINEL_KEY).as_deref(), Some(SENTINEL_VALUE));
    let status = etcd.endpoint_status();
    assert_eq!(
        format!("{:016x}", status["header"]["cluster_id"].as_u64().unwrap()),
        doc["cluster_id"]
    );
}

#[test]
fn an_empty_bootstrapped_seed_is_33_with_an_s3_source_and_the_staged_copy_is_removed() {
    let moto = Moto::start(&[]);
    let snap = std::fs::read(snapshot()).unwrap();
    moto.put_object(BUCKET, KEY, &snap);
    let base = tempfile::tempdir().unwrap();
    let data = base.path().join("r0/data");
    let peer_url = format!("http://127.0.0.1:{}", free_port());
    // Real etcd bootstraps the dir empty with the flags the restore is given.
    let etcd = restored_member(
        base.path(),
        &data,
        &peer_url,
        format!("http://127.0.0.1:{}", free_port()),
    );
    etcd.start();
    etcd.wait_healthy();
    etcd.stop();
    // The snapshot is staged inside the data dir to be read, then removed: the
    // member is untouched (the data dir's own mtime moves).
    let before = tree_snapshot(&data.join("member"));
    let env = s3_env(&moto.endpoint(), KEY, &data, base.path(), &peer_url);
    let run = restore(&env);
    run.assert_code(33);
    assert_eq!(run.json()["verdict"], "verify-failed", "{run}");
    assert!(
        run.json()["content"]["snapshot"]["revision"]
            .as_i64()
            .unwrap()
            > run.json()["content"]["data_dir"]["revision"]
                .as_i64()
                .unwrap(),
        "{run}"
    );
    assert_tree_unchanged(&before, &tree_snapshot(&data.join("member")));
    assert_eq!(entries(&data), ["member"]);
}

#[test]
fn a_missing_object_or_bucket_exits_30_and_leaves_the_data_dir_empty() {
    let moto = Moto::start(&[]);
    moto.put_object(BUCKET, "other.db", b"not the one");
    let base = tempfile::tempdir().unwrap();
    let data = base.path().join("data");
    std::fs::create_dir(&data).unwrap();
    let peer_url = format!("http://127.0.0.1:{}", free_port());
    let env = s3_env(
        &moto.endpoint(),
        "missing/key.db",
        &data,
        base.path(),
        &peer_url,
    );
    let before = tree_snapshot(&data);

    let run = restore(&env);
    run.assert_code(30);
    assert_eq!(run.json()["verdict"], "source-failed", "{run}");
    assert!(
        run.json()["reason"]
            .as_str()
            .unwrap()
            .contains("does not exist"),
        "{run}"
    );

    let run = restore(&with(&env, "S3_BUCKET", "no-such-bucket"));
    run.assert_code(30);
    assert_tree_unchanged(&before, &tree_snapshot(&data));
}

#[test]
fn wrong_credentials_exit_30_when_the_store_enforces_signatures() {
    // Five unauthenticated setup actions, then SigV4 and IAM are enforced.
    let moto = Moto::start(&[("INITIAL_NO_AUTH_ACTION_COUNT", "5")]);
    moto.iam(&[("Action", "CreateUser"), ("UserName", "restorer")]);
    let keys = moto.iam(&[("Action", "CreateAccessKey"), ("UserName", "restorer")]);
    let (id, secret) = (
        xml_field(&keys, "AccessKeyId"),
        xml_field(&keys, "SecretAccessKey"),
    );
    moto.iam(&[
        ("Action", "PutUserPolicy"),
        ("UserName", "restorer"),
        ("PolicyName", "read-snapshots"),
        (
            "PolicyDocument",
            r#"{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":"s3:*","Resource":"*"}]}"#,
        ),
    ]);
    moto.put_object(BUCKET, KEY, &std::fs::read(snapshot()).unwrap());

    let base = tempfile::tempdir().unwrap();
    let data = base.path().join("data");
    std::fs::create_dir(&data).unwrap();
    let peer_url = format!("http://127.0.0.1:{}", free_port());
    let env = s3_env(&moto.endpoint(), KEY, &data, base.path(), &peer_url);
    let env = with(&env, "AWS_ACCESS_KEY_ID", id.clone());

    let wrong = restore(&with(&env, "AWS_SECRET_ACCESS_KEY", "wrong-secret"));
    wrong.assert_code(30);
    let reason = wrong.json()["reason"].as_str().unwrap().to_string();
    assert!(reason.contains("403"), "{wrong}");
    assert!(entries(&data).is_empty());

    let unknown = restore(&with(&env, "AWS_ACCESS_KEY_ID", "AKIAUNKNOWN"));
    unknown.assert_code(30);

    let right = restore(&with(&env, "AWS_SECRET_ACCESS_KEY", secret));
    right.assert_code(0);
    assert_eq!(right.json()["verdict"], "restored", "{right}");
    eprintln!("wrong secret: {reason}");
}

/// A CA and a `localhost`/`127.0.0.1` server certificate signed by it, as PEM
/// files in `dir`: `ca.crt`, `server.crt`, `server.key`.
fn write_pki(dir: &Path) {
    use rcgen::{
        BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose,
    };
    let ca_key = KeyPair::generate().unwrap();
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(DnType::CommonName, "private S3 CA");
    ca.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let ca_cert = ca.self_signed(&ca_key).unwrap();
    let issuer = Issuer::new(ca, ca_key);
    let key = KeyPair::generate().unwrap();
    let mut leaf =
        CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()]).unwrap();
    leaf.distinguished_name.push(DnType::CommonName, "s3");
    let cert = leaf.signed_by(&key, &issuer).unwrap();
    std::fs::write(dir.join("ca.crt"), ca_cert.pem()).unwrap();
    std::fs::write(dir.join("server.crt"), cert.pem()).unwrap();
    std::fs::write(dir.join("server.key"), key.serialize_pem()).unwrap();
}

/// Uploaded with Python's TLS client, which trusts the same CA.
const PY_UPLOAD: &str = "import ssl,sys,urllib.request as u
ctx=ssl.create_default_context(cafile=sys.argv[1])
for url,body in ((sys.argv[2],b''),(sys.argv[3],open(sys.argv[4],'rb').read())):
    u.urlopen(u.Request(url,data=body,method='PUT',headers={'Content-Type':'application/octet-stream'}),context=ctx,timeout=20).read()
";

#[test]
fn an_https_endpoint_with_a_private_ca_needs_aws_ca_bundle() {
    let pki = tempfile::tempdir().unwrap();
    write_pki(pki.path());
    let ca = pki.path().join("ca.crt");
    let cert = pki.path().join("server.crt").display().to_string();
    let key = pki.path().join("server.key").display().to_string();
    let moto = Moto::start_with(&[], &["-c", &cert, "-k", &key]);
    let endpoint = format!("https://localhost:{}", moto.port);
    let upload = Command::new("python3")
        .args(["-c", PY_UPLOAD])
        .arg(&ca)
        .arg(format!("{endpoint}/{BUCKET}"))
        .arg(format!("{endpoint}/{BUCKET}/{KEY}"))
        .arg(snapshot())
        .output()
        .unwrap();
    assert!(
        upload.status.success(),
        "upload: {}",
        String::from_utf8_lossy(&upload.stderr)
    );

    let base = tempfile::tempdir().unwrap();
    let data = base.path().join("data");
    let peer_url = format!("http://127.0.0.1:{}", free_port());
    let env = s3_env(&endpoint, KEY, &data, base.path(), &peer_url);
    let untrusted = restore(&env);
    untrusted.assert_code(30);
    assert!(
        untrusted.json()["reason"]
            .as_str()
            .unwrap()
            .contains("certificate"),
        "{untrusted}"
    );
    assert!(entries(&data).is_empty());
    let trusted = restore(&with(&env, "AWS_CA_BUNDLE", ca.display().to_string()));
    trusted.assert_code(0);
    assert_eq!(trusted.json()["sha256_verified"], true, "{trusted}");
}

#[test]
fn an_endpoint_that_accepts_and_never_answers_is_bounded_by_the_timeouts_and_exits_30() {
    let hole = BlackHole::start();
    let base = tempfile::tempdir().unwrap();
    let data = base.path().join("data");
    std::fs::create_dir(&data).unwrap();
    let peer_url = format!("http://127.0.0.1:{}", free_port());
    let env = s3_env(&hole.url(), KEY, &data, base.path(), &peer_url);
    let env = with(&env, "AGENT_READ_TIMEOUT", "1s");
    let env = with(&env, "AGENT_DOWNLOAD_TIMEOUT", "5s");
    let started = Instant::now();
    let run = restore(&env);
    let took = started.elapsed();
    run.assert_code(30);
    assert!(took < Duration::from_secs(15), "took {took:?}\n{run}");
    assert!(entries(&data).is_empty());
    eprintln!(
        "black-holed endpoint: exit 30 after {took:?}: {}",
        run.json()["reason"]
    );
}

/// A server that answers HEAD for a `size`-byte object, then sends half of the
/// GET body and stalls.
struct StallHalfway {
    port: u16,
    stop: Arc<AtomicBool>,
}

impl StallHalfway {
    fn start(size: usize) -> StallHalfway {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                if flag.load(Ordering::Relaxed) {
                    break;
                }
                let Ok(mut conn) = conn else { continue };
                let flag = flag.clone();
                std::thread::spawn(move || {
                    let mut head = Vec::new();
                    let mut byte = [0u8; 1];
                    while !head.ends_with(b"\r\n\r\n") {
                        match conn.read(&mut byte) {
                            Ok(1) => head.push(byte[0]),
                            _ => return,
                        }
                    }
                    let common = format!(
                        "HTTP/1.1 200 OK\r\nContent-Length: {size}\r\nETag: \"0123456789abcdef\"\r\nLast-Modified: Mon, 01 Jan 2024 00:00:00 GMT\r\nContent-Type: application/octet-stream\r\n\r\n"
                    );
                    let _ = conn.write_all(common.as_bytes());
                    if head.starts_with(b"GET") {
                        let _ = conn.write_all(&vec![7u8; size / 2]);
                        while !flag.load(Ordering::Relaxed) {
                            std::thread::sleep(Duration::from_millis(50));
                        }
                    }
                });
            }
        });
        StallHalfway { port, stop }
    }
}

impl Drop for StallHalfway {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}

#[test]
fn a_download_that_stalls_halfway_exits_30_within_the_read_timeout_and_leaves_the_data_dir_empty() {
    let server = StallHalfway::start(4 << 20);
    let base = tempfile::tempdir().unwrap();
    let data = base.path().join("data");
    std::fs::create_dir(&data).unwrap();
    let peer_url = format!("http://127.0.0.1:{}", free_port());
    let env = s3_env(
        &format!("http://127.0.0.1:{}", server.port),
        KEY,
        &data,
        base.path(),
        &peer_url,
    );
    let env = with(&env, "AGENT_READ_TIMEOUT", "1s");
    let env = with(&env, "AGENT_DOWNLOAD_TIMEOUT", "20s");
    let started = Instant::now();
    let run = restore(&env);
    let took = started.elapsed();
    run.assert_code(30);
    let doc: &Value = run.json();
    assert_eq!(doc["verdict"], "source-failed", "{run}");
    assert!(took < Duration::from_secs(15), "took {took:?}\n{run}");
    assert!(entries(&data).is_empty(), "{:?}", entries(&data));
    eprintln!("stalled halfway: exit 30 after {took:?}: {}", doc["reason"]);
}
