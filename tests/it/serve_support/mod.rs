//! What the `serve` tests share: the agent's sidecar as a child process on free
//! loopback ports (killed by PID when dropped), the gRPC client generated from the
//! same `.proto` (compiled into this test crate from `OUT_DIR`, so the library
//! keeps its generated types private), an in-test `IdentityCollector`, and test
//! certificates made with rcgen.
//!
//! The tests are synchronous like the etcd harness; gRPC calls go through
//! [`block_on`] on one shared runtime.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::process::{Child, ExitStatus, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tonic::transport::{Channel, ClientTlsConfig, Endpoint, ServerTlsConfig};

use crate::common::{self, eventually, free_port, patience, HttpConn};

/// The generated client and messages.
pub mod pb {
    #![allow(clippy::all, clippy::pedantic)]
    tonic::include_proto!("etcd.agent.v1");
}

/// The runtime every test's gRPC calls run on.
pub fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap_or_else(|e| panic!("cannot build a runtime: {e}"))
    })
}

/// Runs `f` to completion on the shared runtime.
pub fn block_on<F: Future>(f: F) -> F::Output {
    runtime().block_on(f)
}

/// A running `serve`. Dropping it SIGKILLs and reaps it.
pub struct Serve {
    child: Option<Child>,
    /// gRPC port on 127.0.0.1.
    pub grpc: u16,
    /// HTTP port on 127.0.0.1.
    pub http: u16,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

/// Builds a [`Serve`]: `Serve::beside(member_url).arg("--max-watchers=2").start()`.
pub struct ServeBuilder {
    endpoint: String,
    args: Vec<String>,
    data_dir: Option<PathBuf>,
    verdict_file: Option<PathBuf>,
    nofile: Option<u64>,
}

impl ServeBuilder {
    /// Runs the agent under `prlimit --nofile=n:n` (its descriptor limit).
    pub fn nofile(mut self, n: u64) -> Self {
        self.nofile = Some(n);
        self
    }

    /// One more flag.
    pub fn arg(mut self, arg: impl Into<String>) -> Self {
        self.args.push(arg.into());
        self
    }

    /// `--data-dir` (default: an empty temp dir).
    pub fn data_dir(mut self, dir: &Path) -> Self {
        self.data_dir = Some(dir.to_owned());
        self
    }

    /// `--verdict-file` (default: a path that does not exist).
    pub fn verdict_file(mut self, path: &Path) -> Self {
        self.verdict_file = Some(path.to_owned());
        self
    }

    /// Starts the agent and waits until `/livez` answers; retries on fresh ports
    /// if one was taken meanwhile.
    pub fn start(self) -> Serve {
        for _attempt in 0..3 {
            let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
            let data_dir = self
                .data_dir
                .clone()
                .unwrap_or_else(|| dir.path().join("data"));
            let verdict = self
                .verdict_file
                .clone()
                .unwrap_or_else(|| dir.path().join("no-verdict.json"));
            let (grpc, http) = (free_port(), free_port());
            let log = dir.path().join("serve.log");
            let log_file = std::fs::File::create(&log).unwrap_or_else(|e| panic!("{e}"));
            let mut cmd = common::agent();
            if let Some(n) = self.nofile {
                // prlimit execs the agent: the PID stays the agent's.
                let program = cmd.get_program().to_owned();
                cmd = std::process::Command::new("prlimit");
                cmd.env_clear();
                if let Some(path) = std::env::var_os("PATH") {
                    cmd.env("PATH", path);
                }
                cmd.arg(format!("--nofile={n}:{n}")).arg("--").arg(program);
            }
            cmd.arg("serve")
                .arg(format!("--endpoints={}", self.endpoint))
                .arg(format!("--data-dir={}", data_dir.display()))
                .arg(format!("--verdict-file={}", verdict.display()))
                .arg(format!("--grpc-listen=127.0.0.1:{grpc}"))
                .arg(format!("--http-listen=127.0.0.1:{http}"))
                .arg("--poll-interval=200ms")
                .arg("--poll-timeout=1s")
                .args(&self.args)
                .env("AGENT_LOG", "info,etcd_member_agent=debug")
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(log_file);
            let child = cmd
                .spawn()
                .unwrap_or_else(|e| panic!("cannot start serve: {e}"));
            let mut serve = Serve {
                child: Some(child),
                grpc,
                http,
                log,
                _dir: dir,
            };
            match serve.wait_live() {
                Ok(()) => return serve,
                Err(e) if serve.log().contains("Address already in use") => {
                    eprintln!("retrying serve on other ports: {e}");
                    continue;
                }
                Err(e) => panic!("{e}"),
            }
        }
        panic!("serve could not bind free ports three times");
    }
}

impl Serve {
    /// A builder for an agent beside the member at `endpoint`.
    pub fn beside(endpoint: &str) -> ServeBuilder {
        ServeBuilder {
            endpoint: endpoint.to_owned(),
            args: Vec::new(),
            data_dir: None,
            verdict_file: None,
            nofile: None,
        }
    }

    fn wait_live(&mut self) -> Result<(), String> {
        eventually(patience(), || {
            if let Some(status) = self.try_exit_status() {
                return Ok(Err(format!(
                    "serve exited with {status} before answering; log:\n{}",
                    self.log()
                )));
            }
            self.get("/livez").map(|_| Ok(()))
        })
        .and_then(|r| r)
    }

    /// The agent's log (stderr).
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// `http://127.0.0.1:<grpc>`.
    pub fn grpc_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.grpc)
    }

    /// GET on the HTTP port: (status, body).
    pub fn get(&self, path: &str) -> Result<(u16, String), String> {
        let mut conn = HttpConn::new(
            &format!("http://127.0.0.1:{}", self.http),
            Duration::from_secs(5),
        )?;
        let resp = conn.get(path)?;
        Ok((
            resp.status,
            String::from_utf8_lossy(&resp.body).into_owned(),
        ))
    }

    /// `/readyz`.
    pub fn readyz(&self) -> (u16, String) {
        self.get("/readyz")
            .unwrap_or_else(|e| panic!("/readyz: {e}\nlog:\n{}", self.log()))
    }

    /// Waits one patience until `/readyz` answers `code`; returns the body.
    pub fn wait_readyz(&self, code: u16) -> String {
        self.wait_readyz_saying(code, "")
    }

    /// Waits one patience until `/readyz` answers `code` with a body containing
    /// `text`; returns the body.
    pub fn wait_readyz_saying(&self, code: u16, text: &str) -> String {
        eventually(patience(), || {
            let (status, body) = self.get("/readyz")?;
            if status == code && body.contains(text) && !body.contains("not been polled") {
                Ok(body)
            } else {
                Err(format!("/readyz answered {status}: {body}"))
            }
        })
        .unwrap_or_else(|e| {
            panic!(
                "/readyz never answered {code}: {e}\nlog tail:\n{}",
                tail(&self.log())
            )
        })
    }

    /// `/metrics` text.
    pub fn metrics(&self) -> String {
        self.get("/metrics")
            .unwrap_or_else(|e| panic!("/metrics: {e}"))
            .1
    }

    /// A plaintext client.
    pub async fn client(&self) -> pb::member_agent_client::MemberAgentClient<Channel> {
        pb::member_agent_client::MemberAgentClient::new(self.channel().await)
    }

    /// A plaintext channel.
    pub async fn channel(&self) -> Channel {
        Endpoint::from_shared(self.grpc_url())
            .unwrap_or_else(|e| panic!("{e}"))
            .timeout(Duration::from_secs(10))
            .connect_timeout(Duration::from_secs(5))
            .connect()
            .await
            .unwrap_or_else(|e| panic!("cannot connect to serve: {e}"))
    }

    /// GetIdentity, retried until the agent has polled once.
    pub async fn identity(&self) -> pb::Identity {
        let mut client = self.client().await;
        let deadline = tokio::time::Instant::now() + patience();
        loop {
            match client.get_identity(pb::GetIdentityRequest {}).await {
                Ok(r) => return r.into_inner(),
                Err(s)
                    if s.code() == tonic::Code::Unavailable
                        && tokio::time::Instant::now() < deadline =>
                {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Err(s) => panic!("GetIdentity: {s}"),
            }
        }
    }

    /// The PID.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    /// Sends SIGTERM.
    pub fn sigterm(&self) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.pid() as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
    }

    /// The exit status once it has exited.
    pub fn try_exit_status(&mut self) -> Option<ExitStatus> {
        self.child
            .as_mut()
            .and_then(|c| c.try_wait().ok().flatten())
    }

    /// Waits up to `timeout` for the agent to exit.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let child = self.child.as_mut()?;
        let deadline = std::time::Instant::now() + timeout;
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                return Some(status);
            }
            if std::time::Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The last 40 lines.
pub fn tail(text: &str) -> String {
    common::tail(text, 40).to_owned()
}

/// An `IdentityCollector` that forwards every report to a channel.
struct Collector {
    reports: mpsc::UnboundedSender<pb::IdentityReport>,
}

#[tonic::async_trait]
impl pb::identity_collector_server::IdentityCollector for Collector {
    async fn report(
        &self,
        request: tonic::Request<pb::IdentityReport>,
    ) -> Result<tonic::Response<pb::ReportAck>, tonic::Status> {
        let _ = self.reports.send(request.into_inner());
        Ok(tonic::Response::new(pb::ReportAck {}))
    }
}

/// A collector serving on a loopback port until dropped.
pub struct CollectorServer {
    /// Reports received.
    pub reports: mpsc::UnboundedReceiver<pb::IdentityReport>,
    stop: CancellationToken,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl CollectorServer {
    /// Serves on `port` (plaintext, or TLS when `tls` is given).
    pub fn start(port: u16, tls: Option<ServerTlsConfig>) -> CollectorServer {
        let (tx, rx) = mpsc::unbounded_channel();
        let stop = CancellationToken::new();
        let listener = block_on(async {
            // The port may still be in TIME_WAIT from a previous collector.
            let mut last = None;
            for _ in 0..50 {
                match tokio::net::TcpListener::bind(("127.0.0.1", port)).await {
                    Ok(l) => return l,
                    Err(e) => last = Some(e),
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            panic!("cannot bind the collector on {port}: {last:?}")
        });
        let mut builder = tonic::transport::Server::builder();
        if let Some(tls) = tls {
            builder = builder.tls_config(tls).unwrap_or_else(|e| panic!("{e}"));
        }
        let router = builder.add_service(
            pb::identity_collector_server::IdentityCollectorServer::new(Collector { reports: tx }),
        );
        let token = stop.clone();
        let task = runtime().spawn(async move {
            let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener);
            let _ = router
                .serve_with_incoming_shutdown(incoming, token.cancelled_owned())
                .await;
        });
        CollectorServer {
            reports: rx,
            stop,
            task: Some(task),
        }
    }

    /// The next report within `timeout`.
    pub fn next_report(&mut self, timeout: Duration) -> Option<pb::IdentityReport> {
        block_on(async {
            tokio::time::timeout(timeout, self.reports.recv())
                .await
                .ok()
                .flatten()
        })
    }

    /// Waits for a report satisfying `f` within one patience.
    pub fn wait_report(
        &mut self,
        what: &str,
        f: impl Fn(&pb::IdentityReport) -> bool,
    ) -> pb::IdentityReport {
        let deadline = std::time::Instant::now() + patience();
        while let Some(left) = deadline.checked_duration_since(std::time::Instant::now()) {
            match self.next_report(left) {
                Some(r) if f(&r) => return r,
                Some(_) => continue,
                None => break,
            }
        }
        panic!("no report {what} within {:?}", patience());
    }

    /// Stops serving and waits until the port is closed.
    pub fn stop(mut self) {
        self.stop.cancel();
        if let Some(task) = self.task.take() {
            let _ = block_on(async { tokio::time::timeout(Duration::from_secs(10), task).await });
        }
    }
}

impl Drop for CollectorServer {
    fn drop(&mut self) {
        self.stop.cancel();
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

/// PEM files for a test PKI: a CA, a server certificate for 127.0.0.1/localhost,
/// a client certificate, and a client certificate from an unrelated CA.
pub struct Pki {
    /// Where the files are.
    pub dir: tempfile::TempDir,
}

impl Pki {
    /// Generates everything.
    pub fn new() -> Pki {
        use rcgen::{
            BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer,
            KeyPair, KeyUsagePurpose,
        };
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let write = |name: &str, text: &str| {
            std::fs::write(dir.path().join(name), text).unwrap_or_else(|e| panic!("{e}"))
        };
        let make_ca = |name: &str| {
            let key = KeyPair::generate().unwrap_or_else(|e| panic!("{e}"));
            let mut params =
                CertificateParams::new(Vec::<String>::new()).unwrap_or_else(|e| panic!("{e}"));
            params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
            params.distinguished_name.push(DnType::CommonName, name);
            params.key_usages = vec![
                KeyUsagePurpose::KeyCertSign,
                KeyUsagePurpose::DigitalSignature,
            ];
            let cert = params.self_signed(&key).unwrap_or_else(|e| panic!("{e}"));
            (cert.pem(), Issuer::new(params, key))
        };
        let leaf = |issuer: &Issuer<'_, KeyPair>, cn: &str, purpose: ExtendedKeyUsagePurpose| {
            let key = KeyPair::generate().unwrap_or_else(|e| panic!("{e}"));
            let mut params =
                CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()])
                    .unwrap_or_else(|e| panic!("{e}"));
            params.distinguished_name.push(DnType::CommonName, cn);
            params.extended_key_usages = vec![purpose];
            let cert = params
                .signed_by(&key, issuer)
                .unwrap_or_else(|e| panic!("{e}"));
            (cert.pem(), key.serialize_pem())
        };
        let (ca_pem, ca) = make_ca("etcd-member-agent test CA");
        let (rogue_ca_pem, rogue) = make_ca("some other CA");
        write("ca.crt", &ca_pem);
        write("rogue-ca.crt", &rogue_ca_pem);
        let (c, k) = leaf(&ca, "server", ExtendedKeyUsagePurpose::ServerAuth);
        write("server.crt", &c);
        write("server.key", &k);
        let (c, k) = leaf(&ca, "operator", ExtendedKeyUsagePurpose::ClientAuth);
        write("client.crt", &c);
        write("client.key", &k);
        let (c, k) = leaf(&rogue, "intruder", ExtendedKeyUsagePurpose::ClientAuth);
        write("rogue.crt", &c);
        write("rogue.key", &k);
        Pki { dir }
    }

    /// A file of the PKI.
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn read(&self, name: &str) -> Vec<u8> {
        std::fs::read(self.path(name)).unwrap_or_else(|e| panic!("{e}"))
    }

    /// The collector's TLS: the server certificate, client certificates required
    /// from the test CA.
    pub fn server_tls(&self) -> ServerTlsConfig {
        ServerTlsConfig::new()
            .identity(tonic::transport::Identity::from_pem(
                self.read("server.crt"),
                self.read("server.key"),
            ))
            .client_ca_root(tonic::transport::Certificate::from_pem(self.read("ca.crt")))
    }

    /// A client TLS config trusting the test CA, with the client certificate
    /// `name` (`client` or `rogue`), or none.
    pub fn client_tls(&self, name: Option<&str>) -> ClientTlsConfig {
        let mut tls = ClientTlsConfig::new()
            .ca_certificate(tonic::transport::Certificate::from_pem(self.read("ca.crt")));
        if let Some(name) = name {
            tls = tls.identity(tonic::transport::Identity::from_pem(
                self.read(&format!("{name}.crt")),
                self.read(&format!("{name}.key")),
            ));
        }
        tls
    }
}

/// The value of an unlabelled metric, or of the series whose labels contain `labels`.
pub fn metric(text: &str, name: &str, labels: &str) -> Option<f64> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .find(|l| {
            let (series, _) = l.rsplit_once(' ').unwrap_or((l, ""));
            (series == name || series.starts_with(&format!("{name}{{"))) && series.contains(labels)
        })
        .and_then(|l| l.rsplit_once(' '))
        .and_then(|(_, v)| v.parse().ok())
}

/// `/metrics` reports this Pod start's preflight verdict: its series at 1
/// and its exit code.
#[track_caller]
pub fn assert_preflight_metrics(metrics: &str, verdict: &str, exit_code: u8) {
    assert_eq!(
        metric(
            metrics,
            "etcd_agent_preflight_verdict",
            &format!("verdict=\"{verdict}\"")
        ),
        Some(1.0),
        "{metrics}"
    );
    assert_eq!(
        metric(metrics, "etcd_agent_preflight_exit_code", ""),
        Some(f64::from(exit_code)),
        "{metrics}"
    );
}
