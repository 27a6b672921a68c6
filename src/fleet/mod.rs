//! `fleet` (docs/fleet.md): every guarded member of every etcd cluster a person
//! may read, and the conditions across each cluster's members, from the
//! Kubernetes API alone. Also `kubectl etcd-guard` when the binary is called
//! `kubectl-etcd_guard` ([`plugin_args`]).
//!
//! The parts, in the direction of data:
//!
//! * [`source`] lists (paginated, server-side selectors) and watches six
//!   resources per scope and sends each outcome as a [`source::Change`];
//! * [`facts`] turns each object into a few hundred bytes of facts as it
//!   arrives (memory is bounded by a page per list, and the facts);
//! * [`store`] holds the facts and how each read went;
//! * [`view`] computes rows, conditions and the exit code from the store and
//!   the clock — pure, tested condition by condition;
//! * [`render`] prints the table, JSON or YAML; [`metrics`] turns the same view
//!   into Prometheus series for `--serve`.
//!
//! Three modes: once (the first full view, then exit with its code), `--watch`
//! (the view again on every change, driven by API watches), `--serve`
//! (`/metrics` over the watched view). `main` calls [`run`] directly, as it
//! calls the sidecar: this is a long-running part, beside `server`, whose
//! connection limits (`server::conn`) it reuses for `--serve`.

pub mod facts;
pub mod lite;
pub mod metrics;
pub mod render;
pub mod source;
pub mod store;
pub mod view;

use std::ffi::OsString;
use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::cli::{ColorChoice, FleetArgs, FleetFormat, FLEET_DEFAULT_SELECTOR};
use crate::error::{chain, Error, Result};
use crate::evidence::client::{client_with, Timeouts};
use crate::exit::Exit;
use source::{Change, Progress, Reader};
use store::{Resource, Scope, Store};
use view::{FleetView, Settings};

/// The file name under which the binary is a kubectl plugin: `kubectl
/// etcd-guard` runs `kubectl-etcd_guard` from the PATH (kubectl turns the
/// dash of a plugin's name into an underscore in its file name).
pub const PLUGIN_NAME: &str = "kubectl-etcd_guard";

/// The command line as clap should read it: `kubectl-etcd_guard ARGS` is
/// `etcd-member-agent fleet ARGS`; any other name is left as it is.
pub fn plugin_args(args: impl IntoIterator<Item = OsString>) -> Vec<OsString> {
    let mut args: Vec<OsString> = args.into_iter().collect();
    let is_plugin = args.first().is_some_and(|argv0| {
        std::path::Path::new(argv0)
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n == PLUGIN_NAME || n == "kubectl-etcd-guard")
    });
    if is_plugin {
        args.splice(
            0..1,
            [OsString::from("etcd-member-agent"), OsString::from("fleet")],
        );
    }
    args
}

/// What the command runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mode {
    /// One view, then exit.
    Once,
    /// A view on every change.
    Watch,
    /// `/metrics` on this address.
    Serve(std::net::SocketAddr),
}

/// `fleet`'s flags, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// Where to read: every namespace, or some.
    pub scopes: Vec<Scope>,
    /// The Pods' label selector (`None`: every Pod).
    pub pod_selector: Option<String>,
    /// The label naming a Pod's cluster.
    pub cluster_label: String,
    /// A kubeconfig (or a list of them).
    pub kubeconfig: Option<PathBuf>,
    /// A kubeconfig context.
    pub context: Option<String>,
    /// Table, JSON or YAML.
    pub format: FleetFormat,
    /// Once, watch or serve.
    pub mode: Mode,
    /// Only clusters with a condition in the table.
    pub only_problems: bool,
    /// Colour the table.
    pub color: bool,
    /// The first view's budget.
    pub timeout: Duration,
    /// Each request's bound.
    pub request_timeout: Duration,
    /// Objects per page.
    pub chunk: u32,
    /// The view's thresholds.
    pub settings: Settings,
}

fn valid_namespace(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

impl Config {
    /// Validates the flags; no I/O (`stdout_is_tty` and `no_color` are the
    /// terminal's facts, for `--color auto`).
    pub fn from_args(a: &FleetArgs, stdout_is_tty: bool, no_color: bool) -> Result<Config> {
        let mut namespaces: Vec<String> = a
            .namespace
            .iter()
            .map(|n| n.trim().to_owned())
            .filter(|n| !n.is_empty())
            .collect();
        namespaces.sort();
        namespaces.dedup();
        if let Some(bad) = namespaces.iter().find(|n| !valid_namespace(n)) {
            return Err(Error::usage(format!(
                "--namespace {bad:?} is not a namespace name"
            )));
        }
        let scopes = if namespaces.is_empty() {
            vec![Scope::All]
        } else {
            namespaces.into_iter().map(Scope::Namespace).collect()
        };
        let (pod_selector, records_define_clusters) = match a.selector.as_deref().map(str::trim) {
            None => (Some(FLEET_DEFAULT_SELECTOR.to_owned()), true),
            Some("") => (None, false),
            Some(s) => (Some(s.to_owned()), false),
        };
        let cluster_label = a.cluster_label.trim().to_owned();
        if cluster_label.is_empty() {
            return Err(Error::usage("--cluster-label must name a label"));
        }
        let not_ready_after_secs = i64::try_from(a.not_ready_after.as_secs()).unwrap_or(i64::MAX);
        Ok(Config {
            scopes,
            pod_selector,
            cluster_label,
            kubeconfig: a.kubeconfig.clone().filter(|p| !p.as_os_str().is_empty()),
            context: a.context.clone().filter(|c| !c.trim().is_empty()),
            format: a.format,
            mode: if a.serve {
                Mode::Serve(a.listen)
            } else if a.watch {
                Mode::Watch
            } else {
                Mode::Once
            },
            only_problems: a.only_problems,
            color: match a.color {
                ColorChoice::Always => true,
                ColorChoice::Never => false,
                ColorChoice::Auto => stdout_is_tty && !no_color,
            },
            timeout: a.timeout,
            request_timeout: a.request_timeout,
            chunk: a.chunk_size,
            settings: Settings {
                lag_threshold: a.lag_threshold,
                not_ready_after_secs,
                records_define_clusters,
            },
        })
    }
}

/// Runs `fleet`: the exit code of the (last) view; 2 for a configuration
/// error (flags, kubeconfig), 0 after `--serve` is stopped.
pub fn run(args: &FleetArgs) -> Result<Exit> {
    let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
    let config = match Config::from_args(args, std::io::stdout().is_terminal(), no_color) {
        Ok(c) => c,
        Err(e) => {
            emit_error(args.format, &e);
            return Err(e);
        }
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("fleet")
        .enable_all()
        .build()
        .map_err(|e| Error::internal("cannot start the tokio runtime", &e))?;
    let format = config.format;
    let result = runtime.block_on(async move {
        match config.mode.clone() {
            Mode::Once => once(&config).await,
            Mode::Watch => watch(&config).await,
            Mode::Serve(addr) => serve(&config, addr).await,
        }
    });
    runtime.shutdown_timeout(Duration::from_secs(1));
    if let Err(e) = &result {
        emit_error(format, e);
    }
    result
}

/// For `-o json|yaml`, one document even when there is no view.
fn emit_error(format: FleetFormat, e: &Error) {
    let doc = serde_json::json!({
        "exit_code": e.exit().code(),
        "error": {
            "kind": match e { Error::Usage(_) => "usage", Error::Internal(_) => "internal" },
            "message": e.to_string(),
        },
    });
    let text = match format {
        FleetFormat::Table => return,
        FleetFormat::Json => serde_json::to_string_pretty(&doc).unwrap_or_default(),
        FleetFormat::Yaml => serde_saphyr::to_string(&doc).unwrap_or_default(),
    };
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{}", text.trim_end());
}

async fn reader(config: &Config) -> Result<Reader> {
    let request = config.request_timeout;
    let build = |read: Duration| {
        client_with(
            config.kubeconfig.as_ref(),
            config.context.as_deref(),
            Timeouts {
                connect: request,
                read,
            },
        )
    };
    let fail = |e: crate::evidence::client::ConfigError| Error::usage(chain(&e));
    let lists = tokio::time::timeout(request, build(request))
        .await
        .map_err(|_| Error::usage("configuring the Kubernetes client did not finish in time"))?
        .map_err(fail)?;
    let watch_read = Duration::from_secs(u64::from(source::WATCH_SECS)) + request;
    let watches = tokio::time::timeout(request, build(watch_read))
        .await
        .map_err(|_| Error::usage("configuring the Kubernetes client did not finish in time"))?
        .map_err(fail)?;
    Ok(Reader {
        lists,
        watches,
        pod_selector: config.pod_selector.clone(),
        cluster_label: config.cluster_label.clone(),
        chunk: config.chunk,
        progress: Arc::new(Progress::default()),
    })
}

/// The reads of every resource in every scope, each its own task.
struct Reads {
    tasks: Vec<tokio::task::JoinHandle<()>>,
    changes: mpsc::Receiver<Change>,
}

impl Reads {
    fn start(config: &Config, reader: &Reader, deadline: Instant, watch: bool) -> Reads {
        let (tx, changes) = mpsc::channel(4096);
        let mut tasks = Vec::new();
        for scope in &config.scopes {
            for resource in Resource::ALL {
                let reader = reader.clone();
                let tx = tx.clone();
                let scope = scope.clone();
                tasks.push(tokio::spawn(async move {
                    reader.follow(resource, scope, deadline, watch, tx).await;
                }));
            }
        }
        Reads { tasks, changes }
    }
}

impl Drop for Reads {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

fn apply(store: &mut Store, change: Change) {
    match change {
        Change::Listed(resource, scope, facts) => store.replace(resource, &scope, facts),
        Change::Upsert(fact) => store.upsert(*fact),
        Change::Remove(resource, key) => store.remove(resource, &key),
        Change::Failed(resource, scope, state) => store.mark(resource, &scope, state),
    }
}

fn now() -> k8s_openapi::jiff::Timestamp {
    k8s_openapi::jiff::Timestamp::now()
}

/// Fills `store` until every first read settled or `deadline` passed,
/// saying on stderr what has been read when it takes longer than a second.
async fn first_view(reads: &mut Reads, store: &mut Store, deadline: Instant, progress: &Progress) {
    let started = Instant::now();
    let tty = std::io::stderr().is_terminal();
    let (first_after, every) = if tty {
        (Duration::from_secs(1), Duration::from_millis(250))
    } else {
        (Duration::from_secs(3), Duration::from_secs(5))
    };
    let mut next_progress = started + first_after;
    let mut shown = false;
    while !store.settled() {
        tokio::select! {
            change = reads.changes.recv() => match change {
                Some(c) => apply(store, c),
                None => break,
            },
            () = tokio::time::sleep_until(deadline) => break,
            () = tokio::time::sleep_until(next_progress) => {
                let line = format!(
                    "fleet: reading the API for {:.0?}: {}",
                    started.elapsed(),
                    progress.line()
                );
                let mut err = std::io::stderr().lock();
                let _ = if tty {
                    write!(err, "\r\x1b[2K{line}")
                } else {
                    writeln!(err, "{line}")
                };
                let _ = err.flush();
                shown = true;
                next_progress = Instant::now() + every;
            }
        }
    }
    if shown && tty {
        let mut err = std::io::stderr().lock();
        let _ = write!(err, "\r\x1b[2K");
        let _ = err.flush();
    }
}

fn print(config: &Config, view: &FleetView, stream: bool) -> Result<()> {
    let mut out = std::io::BufWriter::with_capacity(1 << 16, std::io::stdout().lock());
    // Written as it is rendered: a view of thousands of members is never a
    // second copy in memory.
    let written = match config.format {
        FleetFormat::Table => {
            out.write_all(render::table(view, config.color, config.only_problems).as_bytes())
        }
        FleetFormat::Json if stream => serde_json::to_writer(&mut out, view)
            .map_err(std::io::Error::other)
            .and_then(|()| out.write_all(b"\n")),
        FleetFormat::Json => serde_json::to_writer_pretty(&mut out, view)
            .map_err(std::io::Error::other)
            .and_then(|()| out.write_all(b"\n")),
        FleetFormat::Yaml => {
            let head = if stream { "---\n" } else { "" };
            out.write_all(head.as_bytes())
                .and_then(|()| out.write_all(render::yaml(view).as_bytes()))
        }
    };
    match written.and_then(|()| out.flush()) {
        Ok(()) => Ok(()),
        // `| head`: whoever read it has what they wanted.
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        Err(e) => Err(Error::internal("cannot write the view to stdout", &e)),
    }
}

async fn once(config: &Config) -> Result<Exit> {
    let reader = reader(config).await?;
    let deadline = Instant::now() + config.timeout;
    let mut store = Store::expecting(&config.scopes);
    let mut reads = Reads::start(config, &reader, deadline, false);
    first_view(&mut reads, &mut store, deadline, &reader.progress).await;
    drop(reads);
    let view = view::build(&store, now(), &config.settings);
    print(config, &view, false)?;
    Ok(view.exit())
}

/// How often the view is computed again without an API change: a witness
/// goes stale and a member stays not Ready with no event at all.
const TICK: Duration = Duration::from_secs(5);
/// The least time between two computations of the view under a stream of changes.
const SETTLE: Duration = Duration::from_millis(50);
/// On a terminal, the table is redrawn at least this often (its ages move).
const REDRAW: Duration = Duration::from_secs(5);

async fn watch(config: &Config) -> Result<Exit> {
    let reader = reader(config).await?;
    let deadline = Instant::now() + config.timeout;
    let mut store = Store::expecting(&config.scopes);
    let mut reads = Reads::start(config, &reader, deadline, true);
    first_view(&mut reads, &mut store, deadline, &reader.progress).await;
    let interrupt = CancellationToken::new();
    let signals = tokio::spawn(on_signal(interrupt.clone()));
    let redraw = config.format == FleetFormat::Table && std::io::stdout().is_terminal();
    let mut last = view::build(&store, now(), &config.settings);
    draw(config, &last, redraw)?;
    let mut printed = render::fingerprint(&last);
    let mut drawn_at = Instant::now();
    let mut tick = tokio::time::interval(TICK);
    loop {
        tokio::select! {
            () = interrupt.cancelled() => break,
            change = reads.changes.recv() => match change {
                Some(c) => apply(&mut store, c),
                None => break,
            },
            _ = tick.tick() => {}
        }
        // Whatever else comes within SETTLE joins this view: one per burst.
        tokio::time::sleep(SETTLE).await;
        while let Ok(c) = reads.changes.try_recv() {
            apply(&mut store, c);
        }
        let view = view::build(&store, now(), &config.settings);
        let fingerprint = render::fingerprint(&view);
        if fingerprint != printed || (redraw && drawn_at.elapsed() >= REDRAW) {
            draw(config, &view, redraw)?;
            printed = fingerprint;
            drawn_at = Instant::now();
        }
        last = view;
    }
    signals.abort();
    Ok(last.exit())
}

fn draw(config: &Config, view: &FleetView, redraw: bool) -> Result<()> {
    if config.format == FleetFormat::Table {
        let stamp = view
            .generated_at
            .map(|t| t.strftime("%Y-%m-%d %H:%M:%S UTC").to_string())
            .unwrap_or_default();
        let mut out = std::io::stdout().lock();
        let head = if redraw {
            format!("\x1b[H\x1b[2Jetcd fleet at {stamp} (watching; Ctrl-C to stop)\n\n")
        } else {
            format!("# {stamp}\n")
        };
        let _ = out.write_all(head.as_bytes());
    }
    print(config, view, true)
}

/// Cancels `token` on the first SIGTERM or SIGINT.
async fn on_signal(token: CancellationToken) {
    use tokio::signal::unix::{signal, SignalKind};
    match signal(SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! {
                _ = term.recv() => {}
                _ = tokio::signal::ctrl_c() => {}
            }
        }
        Err(e) => {
            tracing::warn!(error = %e, "cannot install a SIGTERM handler; SIGINT only");
            let _ = tokio::signal::ctrl_c().await;
        }
    }
    token.cancel();
}

/// What `--serve` shares between the watch loop and the HTTP handlers.
#[derive(Clone)]
struct Shared {
    store: Arc<Mutex<Store>>,
    ready: Arc<std::sync::atomic::AtomicBool>,
    settings: Settings,
}

impl Shared {
    fn view(&self) -> Option<FleetView> {
        if !self.ready.load(std::sync::atomic::Ordering::Acquire) {
            return None;
        }
        let store = self.store.lock().unwrap_or_else(|e| e.into_inner());
        Some(view::build(&store, now(), &self.settings))
    }
}

async fn serve(config: &Config, addr: std::net::SocketAddr) -> Result<Exit> {
    use crate::server::conn::{connection_limit, Limits, Tracker};
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| Error::usage(format!("cannot listen on {addr}: {e}")))?;
    let reader = reader(config).await?;
    let shutdown = CancellationToken::new();
    let signals = tokio::spawn(on_signal(shutdown.clone()));
    let shared = Shared {
        store: Arc::new(Mutex::new(Store::expecting(&config.scopes))),
        ready: Arc::default(),
        settings: config.settings.clone(),
    };
    let limits = Limits {
        max_connections: connection_limit(0),
        header_read_timeout: Duration::from_secs(10),
        idle_timeout: Duration::from_secs(120),
    };
    let listener = Tracker::new("fleet", limits).listen(listener, shutdown.clone());
    let app = router(shared.clone());
    let http =
        axum::serve(listener, app).with_graceful_shutdown(shutdown.clone().cancelled_owned());
    let http = tokio::spawn(async move { http.await });
    tracing::info!(%addr, "fleet --serve: /metrics, /readyz, /livez");

    let deadline = Instant::now() + config.timeout;
    let mut reads = Reads::start(config, &reader, deadline, true);
    {
        let mut store = Store::expecting(&config.scopes);
        tokio::select! {
            () = first_view(&mut reads, &mut store, deadline, &reader.progress) => {}
            () = shutdown.cancelled() => {}
        }
        *shared.store.lock().unwrap_or_else(|e| e.into_inner()) = store;
        shared
            .ready
            .store(true, std::sync::atomic::Ordering::Release);
    }
    loop {
        tokio::select! {
            () = shutdown.cancelled() => break,
            change = reads.changes.recv() => match change {
                Some(c) => {
                    let mut store = shared.store.lock().unwrap_or_else(|e| e.into_inner());
                    apply(&mut store, c);
                    while let Ok(c) = reads.changes.try_recv() {
                        apply(&mut store, c);
                    }
                }
                None => break,
            },
        }
    }
    signals.abort();
    drop(reads);
    match tokio::time::timeout(Duration::from_secs(10), http).await {
        Ok(Ok(Ok(()))) | Err(_) => Ok(Exit::Ok),
        Ok(Ok(Err(e))) => Err(Error::internal("the HTTP server failed", &e)),
        Ok(Err(e)) => Err(Error::internal("the HTTP server task failed", &e)),
    }
}

fn router(shared: Shared) -> axum::Router {
    use axum::http::{header, HeaderMap, StatusCode};
    use axum::response::IntoResponse;
    use axum::routing::get;
    let metrics = {
        let shared = shared.clone();
        move |headers: HeaderMap| {
            let shared = shared.clone();
            async move {
                let view = shared.view();
                let registry = metrics::registry(view.as_ref());
                let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok());
                let (text, content_type) = if crate::server::http::wants_openmetrics(accept) {
                    (
                        crate::server::metrics::render(&registry),
                        "application/openmetrics-text; version=1.0.0; charset=utf-8",
                    )
                } else {
                    (
                        crate::server::metrics::render_prometheus(&registry),
                        prometheus_client::encoding::prometheus_text::CONTENT_TYPE,
                    )
                };
                match text {
                    Ok(text) => (StatusCode::OK, [(header::CONTENT_TYPE, content_type)], text)
                        .into_response(),
                    Err(_) => (StatusCode::INTERNAL_SERVER_ERROR, "cannot encode metrics\n")
                        .into_response(),
                }
            }
        }
    };
    let readyz = move || {
        let shared = shared.clone();
        async move {
            match shared.view() {
                None => (
                    StatusCode::SERVICE_UNAVAILABLE,
                    "the first view is not ready\n".to_owned(),
                ),
                Some(v) => (StatusCode::OK, format!("{}\n", v.summary.text)),
            }
        }
    };
    axum::Router::new()
        .route("/metrics", get(metrics))
        .route("/readyz", get(readyz))
        .route("/livez", get(|| async { "ok\n" }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn config(args: &[&str]) -> Result<Config> {
        let cli = crate::cli::Cli::try_parse_from(
            ["etcd-member-agent", "fleet"].iter().chain(args.iter()),
        )
        .map_err(|e| Error::usage(e.to_string()))?;
        match cli.command {
            crate::cli::Command::Fleet(a) => Config::from_args(&a, false, false),
            _ => Err(Error::usage("not fleet")),
        }
    }

    #[test]
    fn the_plugin_name_runs_fleet() {
        let args = plugin_args(["/home/me/bin/kubectl-etcd_guard", "-n", "a"].map(OsString::from));
        assert_eq!(
            args,
            ["etcd-member-agent", "fleet", "-n", "a"].map(OsString::from)
        );
        let args = plugin_args(["etcd-member-agent", "inspect"].map(OsString::from));
        assert_eq!(args, ["etcd-member-agent", "inspect"].map(OsString::from));
    }

    #[test]
    fn flags_become_a_config() {
        let c = config(&[]).unwrap();
        assert_eq!(c.scopes, [Scope::All]);
        assert_eq!(c.pod_selector.as_deref(), Some(FLEET_DEFAULT_SELECTOR));
        assert!(c.settings.records_define_clusters);
        assert_eq!(c.mode, Mode::Once);
        let c = config(&["-n", "b,a", "-n", "a", "-l", "app=etcd", "-w", "-o", "json"]).unwrap();
        assert_eq!(
            c.scopes,
            [Scope::Namespace("a".into()), Scope::Namespace("b".into())]
        );
        assert_eq!(c.pod_selector.as_deref(), Some("app=etcd"));
        assert!(!c.settings.records_define_clusters);
        assert_eq!((c.mode, c.format), (Mode::Watch, FleetFormat::Json));
        let c = config(&["-l", ""]).unwrap();
        assert_eq!(c.pod_selector, None, "an empty selector: every Pod");
        assert!(config(&["-n", "Bad_NS"]).is_err());
        assert!(config(&["-A", "-n", "a"]).is_err());
        assert!(config(&["--watch", "--serve"]).is_err());
        assert!(config(&["--chunk-size", "0"]).is_err());
    }
}
