//! What a client can hold: every connection to either server is tracked, and one
//! that is idle, slow or in the way of a newer one is closed.
//!
//! The probes must always answer. A process has a fixed number of descriptors
//! (`RLIMIT_NOFILE`), and a client that opens connections and sends nothing (or
//! sends a request one byte at a time) holds them for free: with 300 idle clients
//! under `ulimit -n 256` every accept failed with `EMFILE` and `/readyz` timed out.
//! So the listener of each server ([`Tracker::listen`]) admits at most
//! `max_connections` (derived below the descriptor limit), and when full it closes
//! the connection that has been quiet longest to admit the new one (one that never
//! sent a byte or holds an unanswered request first) — a kubelet probe is always
//! the newest. Independently a sweeper closes connections that
//!
//! * have an unanswered request for longer than the header-read timeout: bytes
//!   came in and nothing went out since (a slowloris; for HTTP/2 the same holds,
//!   since the server answers the preface and pings at once), or never sent a
//!   byte within it (what the server wrote does not count: an HTTP/2 server
//!   sends its SETTINGS before the client's preface);
//! * moved no byte either way for the idle timeout (longer than the gRPC
//!   keepalive, so a quiet `WatchIdentity` stream pinged by the server stays).
//!
//! On shutdown it closes, every 100 ms, what is not being answered, so a
//! half-sent request cannot hold SIGTERM for the whole grace period.
//!
//! Closing marks the connection and wakes the task serving it: its next read or
//! write fails with `ConnectionAborted`, and the server drops it (hyper is always
//! reading an HTTP/2 connection, and an HTTP/1 one between requests).

use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

/// Descriptors kept back from the connection limits: the etcd client, the
/// Kubernetes client, the push client, files, the runtime.
const RESERVED_FDS: u64 = 64;
/// How often the sweeper looks.
const SWEEP_EVERY: Duration = Duration::from_millis(500);
/// During shutdown: how long a connection may be quiet before it is closed.
const SHUTDOWN_QUIET: Duration = Duration::from_millis(100);
/// Pause after an accept error (EMFILE and friends) before the next try.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(20);
/// No activity recorded yet.
const NEVER: u64 = u64::MAX;

/// The bounds, from the flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Connections one server holds at once.
    pub max_connections: usize,
    /// A request must be answered (its headers read, a response begun) within this.
    pub header_read_timeout: Duration,
    /// A connection that moves no byte for this long is closed.
    pub idle_timeout: Duration,
}

/// The per-server connection limit: `configured` when non-zero, else what the
/// descriptor limit leaves for two servers after [`RESERVED_FDS`]; never more
/// than that either way (at least 8).
pub fn connection_limit(configured: usize) -> usize {
    let soft = nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)
        .map(|(soft, _)| soft)
        .unwrap_or(1024);
    let derived = usize::try_from(soft.saturating_sub(RESERVED_FDS) / 2)
        .unwrap_or(usize::MAX)
        .max(8);
    if configured == 0 {
        derived
    } else {
        configured.min(derived)
    }
}

/// One tracked connection's clocks, in ms since the tracker started.
#[derive(Debug)]
struct Clocks {
    accepted: u64,
    /// Last byte in either direction.
    last_io: AtomicU64,
    /// First byte in since the last byte out ([`NEVER`] when answered).
    pending_since: AtomicU64,
    /// The client sent a byte. Not `last_io`: an HTTP/2 server writes its
    /// SETTINGS frame at once, so a gRPC client that never sends its preface
    /// would otherwise count as active and hold the descriptor until the idle
    /// timeout.
    heard: AtomicBool,
    /// Set when the tracker closes it.
    closed: AtomicBool,
    /// The task that last polled it, to wake when closed.
    waker: Mutex<Option<Waker>>,
}

impl Clocks {
    fn close(&self) {
        self.closed.store(true, Ordering::Release);
        let waker = self.waker.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(w) = waker {
            w.wake();
        }
    }

    /// Remembers the task to wake; true when already closed.
    fn register(&self, cx: &Context<'_>) -> bool {
        let mut w = self.waker.lock().unwrap_or_else(|p| p.into_inner());
        if !w.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
            *w = Some(cx.waker().clone());
        }
        self.closed.load(Ordering::Acquire)
    }
}

#[derive(Debug, Default)]
struct Table {
    next: u64,
    conns: HashMap<u64, Arc<Clocks>>,
}

/// The connections of one server.
#[derive(Debug, Clone)]
pub struct Tracker {
    name: &'static str,
    limits: Limits,
    start: Instant,
    table: Arc<Mutex<Table>>,
}

impl Tracker {
    /// A tracker for the server called `name` (for the logs).
    pub fn new(name: &'static str, limits: Limits) -> Tracker {
        Tracker {
            name,
            limits,
            start: Instant::now(),
            table: Arc::default(),
        }
    }

    fn now(&self) -> u64 {
        u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX - 1)
    }

    fn lock(&self) -> MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Connections open now.
    pub fn open(&self) -> usize {
        self.lock().conns.len()
    }

    /// Wraps `listener`: accepted connections are tracked and bounded, and a
    /// sweeper runs until `shutdown`, then closes what is not being answered.
    pub fn listen(&self, listener: TcpListener, shutdown: CancellationToken) -> Listener {
        tokio::spawn(self.clone().sweep(shutdown));
        Listener {
            inner: listener,
            tracker: self.clone(),
            last_error_log: None,
        }
    }

    /// Closes one connection (table lock held by the caller).
    fn close(&self, table: &mut Table, id: u64, why: &str) {
        if let Some(c) = table.conns.remove(&id) {
            c.close();
            tracing::debug!(server = self.name, conn = id, why, "closing a connection");
        }
    }

    /// Makes room for one more: closes, of the connections that never sent a
    /// byte or hold an unanswered request, the one quiet the longest; only when
    /// there is none, the quietest of the others (a served `WatchIdentity` stream
    /// is cut last, and its client reconnects).
    fn make_room(&self, table: &mut Table) {
        // A request that arrived within the last second is being answered, not stuck.
        let settled = self.now().saturating_sub(1000);
        let oldest = table
            .conns
            .iter()
            .min_by_key(|(_, c)| {
                let last = last_activity(c);
                let unserved = last < settled
                    && (!c.heard.load(Ordering::Relaxed)
                        || c.pending_since.load(Ordering::Relaxed) != NEVER);
                (!unserved, last)
            })
            .map(|(id, _)| *id);
        if let Some(id) = oldest {
            self.close(table, id, "connection limit reached; closing the quietest");
        }
    }

    async fn sweep(self, shutdown: CancellationToken) {
        let mut tick = tokio::time::interval(SWEEP_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = tick.tick() => self.sweep_once(false),
                () = shutdown.cancelled() => break,
            }
        }
        // Shutting down: the servers drain what is being answered; close the rest.
        let mut tick = tokio::time::interval(SHUTDOWN_QUIET);
        loop {
            tick.tick().await;
            self.sweep_once(true);
            if self.open() == 0 {
                break;
            }
        }
    }

    fn sweep_once(&self, shutting_down: bool) {
        let now = self.now();
        let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        let (header, idle, quiet) = (
            ms(self.limits.header_read_timeout),
            ms(self.limits.idle_timeout),
            ms(SHUTDOWN_QUIET),
        );
        let mut table = self.lock();
        let doomed: Vec<(u64, &'static str)> = table
            .conns
            .iter()
            .filter_map(|(id, c)| {
                let last = last_activity(c);
                let pending = c.pending_since.load(Ordering::Relaxed);
                let silent = !c.heard.load(Ordering::Relaxed);
                let why = if pending != NEVER && now.saturating_sub(pending) > header {
                    "a request was not completed within the header-read timeout"
                } else if silent && now.saturating_sub(c.accepted) > header {
                    "nothing was sent within the header-read timeout"
                } else if now.saturating_sub(last) > idle {
                    "idle timeout"
                } else if shutting_down && (pending != NEVER || now.saturating_sub(last) > quiet) {
                    "shutting down"
                } else {
                    return None;
                };
                Some((*id, why))
            })
            .collect();
        for (id, why) in doomed {
            self.close(&mut table, id, why);
        }
    }
}

fn last_activity(c: &Clocks) -> u64 {
    match c.last_io.load(Ordering::Relaxed) {
        NEVER => c.accepted,
        t => t,
    }
}

/// A listener whose connections are tracked (for axum's `serve` and tonic's
/// incoming stream).
#[derive(Debug)]
pub struct Listener {
    inner: TcpListener,
    tracker: Tracker,
    last_error_log: Option<Instant>,
}

impl Listener {
    /// Accepts the next connection, making room first when the server is full.
    /// Errors (`EMFILE` above all) are logged at most once a second, answered by
    /// closing the quietest connection, and retried.
    pub async fn accept_tracked(&mut self) -> (Tracked, SocketAddr) {
        loop {
            match self.inner.accept().await {
                Ok((stream, addr)) => {
                    let _ = stream.set_nodelay(true);
                    let t = &self.tracker;
                    let mut table = t.lock();
                    if table.conns.len() >= t.limits.max_connections {
                        t.make_room(&mut table);
                    }
                    table.next += 1;
                    let id = table.next;
                    let clocks = Arc::new(Clocks {
                        accepted: t.now(),
                        last_io: AtomicU64::new(NEVER),
                        pending_since: AtomicU64::new(NEVER),
                        heard: AtomicBool::new(false),
                        closed: AtomicBool::new(false),
                        waker: Mutex::new(None),
                    });
                    table.conns.insert(id, clocks.clone());
                    drop(table);
                    let tracked = Tracked {
                        inner: stream,
                        id,
                        clocks,
                        tracker: t.clone(),
                    };
                    return (tracked, addr);
                }
                Err(e) => {
                    let now = Instant::now();
                    if self
                        .last_error_log
                        .is_none_or(|t| now.duration_since(t) >= Duration::from_secs(1))
                    {
                        tracing::warn!(server = self.tracker.name, error = %e, open = self.tracker.open(), "accept failed; closing the quietest connection");
                        self.last_error_log = Some(now);
                    }
                    {
                        let t = &self.tracker;
                        let mut table = t.lock();
                        t.make_room(&mut table);
                    }
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                }
            }
        }
    }

    /// The address bound.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.inner.local_addr()
    }

    /// The connections as a stream, for tonic.
    pub fn into_stream(
        self,
    ) -> impl tokio_stream::Stream<Item = Result<Tracked, io::Error>> + Send + 'static {
        futures::stream::unfold(self, |mut l| async move {
            let (conn, _) = l.accept_tracked().await;
            Some((Ok(conn), l))
        })
    }
}

impl axum::serve::Listener for Listener {
    type Io = Tracked;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        self.accept_tracked().await
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        self.inner.local_addr()
    }
}

/// A tracked connection: records when bytes move, deregisters when dropped.
#[derive(Debug)]
pub struct Tracked {
    inner: TcpStream,
    id: u64,
    clocks: Arc<Clocks>,
    tracker: Tracker,
}

impl Drop for Tracked {
    fn drop(&mut self) {
        self.tracker.lock().conns.remove(&self.id);
    }
}

impl AsyncRead for Tracked {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if self.clocks.register(cx) {
            return Poll::Ready(Err(closed()));
        }
        let before = buf.filled().len();
        let r = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(r, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            let now = self.tracker.now();
            self.clocks.last_io.store(now, Ordering::Relaxed);
            self.clocks.heard.store(true, Ordering::Relaxed);
            let _ = self.clocks.pending_since.compare_exchange(
                NEVER,
                now,
                Ordering::Relaxed,
                Ordering::Relaxed,
            );
        }
        r
    }
}

fn closed() -> io::Error {
    io::Error::new(
        io::ErrorKind::ConnectionAborted,
        "closed by the agent (idle, slow, or making room)",
    )
}

impl Tracked {
    fn wrote(&self, n: usize) {
        if n > 0 {
            self.clocks
                .last_io
                .store(self.tracker.now(), Ordering::Relaxed);
            self.clocks.pending_since.store(NEVER, Ordering::Relaxed);
        }
    }
}

impl AsyncWrite for Tracked {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        if self.clocks.register(cx) {
            return Poll::Ready(Err(closed()));
        }
        let r = Pin::new(&mut self.inner).poll_write(cx, buf);
        if let Poll::Ready(Ok(n)) = r {
            self.wrote(n);
        }
        r
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        if self.clocks.register(cx) {
            return Poll::Ready(Err(closed()));
        }
        let r = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        if let Poll::Ready(Ok(n)) = r {
            self.wrote(n);
        }
        r
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

impl tonic::transport::server::Connected for Tracked {
    type ConnectInfo = tonic::transport::server::TcpConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.inner.connect_info()
    }
}
