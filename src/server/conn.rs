//! What a client can hold: every connection to either server is tracked, and one
//! that is idle, slow or in the way of a newer one is closed.
//!
//! The probes must always answer. A process has a fixed number of descriptors
//! (`RLIMIT_NOFILE`), and a client that opens connections and sends nothing (or
//! sends a request one byte at a time) holds them for free: with 300 idle clients
//! under `ulimit -n 256` every accept failed with `EMFILE` and `/readyz` timed out.
//! So the listener of each server ([`Tracker::listen`]):
//!
//! * holds at most `max_connections` descriptors (derived below the descriptor
//!   limit). A connection the tracker closed keeps its descriptor until the task
//!   serving it drops it, so it still counts, and the listener does not accept
//!   while the server is over its limit: each server holds at most its limit
//!   plus one, and the rest of the process keeps its [`RESERVED_FDS`].
//!   (Counting only the connections not yet closed let clients that reconnect
//!   as fast as they are closed run the process out of descriptors.)
//! * when full, closes the connection [`victim_rank`] puts first: one that was
//!   never answered (silent, or a request never completed), oldest first; a
//!   connection in use (`GetIdentity` traffic) only when there is nothing else.
//!   An HTTP/1 connection whose whole request head is in (read, or seen in the
//!   socket at accept with `MSG_PEEK`) ranks with the busy ones for a second:
//!   a kubelet probe being answered is not closed for a flood of newer clients.
//! * asks the kernel (`TCP_DEFER_ACCEPT`, [`defer_accept`]) to hand over a
//!   connection only once it has sent a byte, or after about the header-read
//!   timeout (rounded up to SYN-ACK retransmissions: 15 s for 10 s; then the
//!   header-read timeout runs again): a client that connects and says nothing
//!   waits in the kernel, holding no descriptor and no place in the accept
//!   queue ahead of the probes (every protocol served here, HTTP/1, HTTP/2 and
//!   TLS, is client-speaks-first).
//!   The accept queue is [`BACKLOG`] long (the kernel caps it at
//!   `net.core.somaxconn`), not 128: with 128 it overflowed under 1,000
//!   reconnecting clients and the kernel dropped the probes' SYNs, which their
//!   clients resend only after 1 s, then 3 s.
//! * keeps a connection the kernel hands over without a byte (when
//!   `TCP_DEFER_ACCEPT` runs out) in the listener ([`Parked`]) until its
//!   client sends one: no server task, no HTTP/1 or HTTP/2 buffers, no
//!   HTTP/2 SETTINGS written for a client that never speaks; it still counts
//!   against the limit and is closed by the rules below.
//!
//! Independently a sweeper closes connections that
//!
//! * have an unanswered request for longer than the header-read timeout: bytes
//!   came in and nothing went out since (a slowloris; for HTTP/2 the same holds
//!   until the connection is first answered, since the server answers the
//!   preface at once; after that a client's PING/SETTINGS acknowledgement or
//!   WINDOW_UPDATE owes nothing, so only the idle timeout applies), or never sent a
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
use tokio::sync::Notify;
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
/// How long the listener waits for a closed connection to release its
/// descriptor before closing another.
const RELEASE_WAIT: Duration = Duration::from_millis(50);
/// A request this recent is being answered, not stuck; a connection that moved
/// a byte this recently is in use.
const SETTLE_MS: u64 = 1000;
/// The listen backlog: the accept queue, and with [`defer_accept`] the
/// connections waiting for their first byte.
pub const BACKLOG: u32 = 4096;
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
    /// The server wrote after the client sent something: an answer (not the
    /// HTTP/2 SETTINGS the server writes before reading anything).
    answered: AtomicBool,
    /// HTTP/1: when the head of the request now pending was complete (its
    /// blank line read, or seen in the socket at accept); [`NEVER`] when no
    /// whole request waits. Such a connection is being answered (a kubelet
    /// probe), not holding a descriptor for free.
    requested: AtomicU64,
    /// Set when the tracker closes it.
    closed: AtomicBool,
    /// The task that last polled it, to wake when closed.
    waker: Mutex<Option<Waker>>,
}

impl Clocks {
    fn new(accepted: u64) -> Clocks {
        Clocks {
            accepted,
            last_io: AtomicU64::new(NEVER),
            pending_since: AtomicU64::new(NEVER),
            heard: AtomicBool::new(false),
            answered: AtomicBool::new(false),
            requested: AtomicU64::new(NEVER),
            closed: AtomicBool::new(false),
            waker: Mutex::new(None),
        }
    }

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

    fn last_activity(&self) -> u64 {
        match self.last_io.load(Ordering::Relaxed) {
            NEVER => self.accepted,
            t => t,
        }
    }
}

/// Which connection a full server closes first: the lowest rank, and within a
/// rank the lowest time (the oldest). In order:
///
/// 0. never answered and no whole request waiting: it sent nothing, or part of
///    a request (every hostile connection is here);
/// 1. holding a request unanswered for over a second (after an earlier answer,
///    or a whole HTTP/1 request head the server has not answered);
/// 2. answered, then idle for over a second (a keep-alive connection);
/// 3. answered and in use within the last second (`GetIdentity` traffic), or
///    a whole HTTP/1 request received within the last second and being
///    answered (a kubelet probe).
///
/// (Ranking by quiet time alone let a flood of reconnecting clients, each
/// younger than a second, push out the busy `GetIdentity` connections. And
/// ranking a probe with the never-answered, as the newest, was not enough:
/// 150 stalled clients reconnecting 1,400 times a second turned that rank over
/// every ~70 ms, and a probe the loaded machine took longer to answer was
/// closed with its request read.)
fn victim_rank(c: &Clocks, now: u64) -> (u8, u64) {
    let pending = c.pending_since.load(Ordering::Relaxed);
    let requested = c.requested.load(Ordering::Relaxed);
    let last = c.last_activity();
    if requested != NEVER {
        if now.saturating_sub(requested) > SETTLE_MS {
            (1, requested)
        } else {
            (3, requested)
        }
    } else if !c.answered.load(Ordering::Relaxed) {
        (0, c.accepted)
    } else if pending != NEVER && now.saturating_sub(pending) > SETTLE_MS {
        (1, pending)
    } else if now.saturating_sub(last) > SETTLE_MS {
        (2, last)
    } else {
        (3, last)
    }
}

/// Finds the end of an HTTP/1 request head (a blank line: `\r\n\r\n`, or
/// the bare `\n\n` parsers also accept) in bytes read in pieces. `after_lf`
/// carries "the last byte that was not `\r` was `\n`" from one piece to the next.
fn head_ends(after_lf: &mut bool, bytes: &[u8]) -> bool {
    let mut found = false;
    for &b in bytes {
        match b {
            b'\n' if *after_lf => found = true,
            b'\n' => *after_lf = true,
            b'\r' => {}
            _ => *after_lf = false,
        }
    }
    found
}

/// What the socket already holds, without taking it (`MSG_PEEK`, never
/// blocking), up to 2 KiB: `WouldBlock` when nothing has arrived yet; 0 bytes
/// when the client has closed.
fn peek(stream: &TcpStream, buf: &mut [u8; 2048]) -> io::Result<usize> {
    use nix::sys::socket::{recv, MsgFlags};
    use std::os::fd::AsRawFd;
    recv(
        stream.as_raw_fd(),
        buf,
        MsgFlags::MSG_PEEK | MsgFlags::MSG_DONTWAIT,
    )
    .map_err(io::Error::from)
}

/// What the socket holds at accept, in one peek: whether the client has sent
/// something (or closed), so the connection is for a server to read (one that
/// has not waits in the listener, [`Parked`]); and whether that is a whole
/// HTTP/1 request head (with [`defer_accept`] a probe's request is there
/// before the task serving it first reads).
fn peek_at_accept(stream: &TcpStream) -> (bool, bool) {
    let mut buf = [0u8; 2048];
    match peek(stream, &mut buf) {
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => (false, false),
        Ok(n) => (true, head_ends(&mut false, &buf[..n])),
        Err(_) => (true, false),
    }
}

/// A connection accepted before its client sent a byte (the kernel hands one
/// over when `TCP_DEFER_ACCEPT` runs out): the listener holds it, not a
/// server's task, so a silent client costs a descriptor and this, not an
/// HTTP/1 or HTTP/2 connection's buffers. Ready with the connection once the
/// client sends a byte or closes; with `None` (the connection dropped, its
/// descriptor released) once the tracker closes it: nothing sent within the
/// header-read timeout, or room made for another.
#[derive(Debug)]
struct Parked {
    conn: Option<(Tracked, SocketAddr)>,
}

impl std::future::Future for Parked {
    type Output = Option<(Tracked, SocketAddr)>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let Some((t, _)) = self.conn.as_ref() else {
            return Poll::Ready(None);
        };
        if t.clocks.register(cx) {
            self.conn = None;
            return Poll::Ready(None);
        }
        // Readiness is a hint (a new socket can be reported ready with nothing
        // in it): the socket says, and a false report is cleared.
        loop {
            if t.inner.poll_read_ready(cx).is_pending() {
                return Poll::Pending;
            }
            let mut buf = [0u8; 2048];
            match t
                .inner
                .try_io(tokio::io::Interest::READABLE, || peek(&t.inner, &mut buf))
            {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                // Bytes, the client's close or an error: the server's to see.
                _ => return Poll::Ready(self.conn.take()),
            }
        }
    }
}

#[derive(Debug, Default)]
struct Table {
    next: u64,
    /// Open and not closed by the tracker.
    conns: HashMap<u64, Arc<Clocks>>,
    /// Closed by the tracker, the descriptor not yet released: the task serving
    /// it has not dropped it yet.
    closing: usize,
}

impl Table {
    /// Descriptors the server holds.
    fn held(&self) -> usize {
        self.conns.len() + self.closing
    }
}

/// The connections of one server.
#[derive(Debug, Clone)]
pub struct Tracker {
    name: &'static str,
    limits: Limits,
    start: Instant,
    table: Arc<Mutex<Table>>,
    /// Signalled when a connection releases its descriptor.
    released: Arc<Notify>,
    /// HTTP/2 (gRPC): once a connection has been answered, bytes in need not
    /// owe an answer (PING and SETTINGS acknowledgements, WINDOW_UPDATE on a
    /// quiet `WatchIdentity` stream), so they no longer start the header-read
    /// clock; the idle timeout and the server's keepalive bound it.
    multiplexed: bool,
}

impl Tracker {
    /// A tracker for the server called `name` (for the logs).
    pub fn new(name: &'static str, limits: Limits) -> Tracker {
        Tracker {
            name,
            limits,
            start: Instant::now(),
            table: Arc::default(),
            released: Arc::default(),
            multiplexed: false,
        }
    }

    /// For a server whose connections multiplex requests (HTTP/2): see
    /// [`Tracker::multiplexed`]'s field.
    pub fn multiplexed(mut self) -> Tracker {
        self.multiplexed = true;
        self
    }

    fn now(&self) -> u64 {
        u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX - 1)
    }

    fn lock(&self) -> MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Connections open now and not being closed.
    pub fn open(&self) -> usize {
        self.lock().conns.len()
    }

    /// Wraps `listener`: accepted connections are tracked and bounded, and a
    /// sweeper runs until `shutdown`, then closes what is not being answered.
    /// Sets `TCP_DEFER_ACCEPT` to the header-read timeout (see the module docs);
    /// where that fails, silent connections are accepted at once and closed by
    /// the rules here.
    pub fn listen(&self, listener: TcpListener, shutdown: CancellationToken) -> Listener {
        if let Err(e) = defer_accept(&listener, self.limits.header_read_timeout) {
            tracing::warn!(server = self.name, error = %e, "cannot set TCP_DEFER_ACCEPT; silent connections take a place in the accept queue");
        }
        tokio::spawn(self.clone().sweep(shutdown));
        Listener {
            inner: listener,
            tracker: self.clone(),
            last_error_log: None,
            parked: futures::stream::FuturesUnordered::new(),
        }
    }

    /// Waits until the server holds no more than its limit: a connection closed
    /// to make room may not have released its descriptor yet. Closes another
    /// when that takes longer than [`RELEASE_WAIT`].
    async fn room(&self) {
        loop {
            // Created before the check: a release in between is not lost.
            let released = self.released.notified();
            if self.lock().held() <= self.limits.max_connections {
                return;
            }
            if tokio::time::timeout(RELEASE_WAIT, released).await.is_err() {
                let mut table = self.lock();
                if table.held() > self.limits.max_connections {
                    self.make_room(&mut table);
                }
            }
        }
    }

    /// Closes one connection (table lock held by the caller); its descriptor
    /// counts as held until the serving task drops it.
    fn close(&self, table: &mut Table, id: u64, why: &str) {
        if let Some(c) = table.conns.remove(&id) {
            table.closing += 1;
            c.close();
            tracing::debug!(server = self.name, conn = id, why, "closing a connection");
        }
    }

    /// Makes room for one more: closes the connection [`victim_rank`] puts first.
    fn make_room(&self, table: &mut Table) {
        let now = self.now();
        let victim = table
            .conns
            .iter()
            // Ties (the same millisecond) to the older, accepted first.
            .min_by_key(|(id, c)| (victim_rank(c, now), **id))
            .map(|(id, _)| *id);
        if let Some(id) = victim {
            self.close(table, id, "connection limit reached");
        }
    }

    /// Called when a connection's descriptor is closed.
    fn release(&self, id: u64) {
        {
            let mut table = self.lock();
            if table.conns.remove(&id).is_none() {
                table.closing = table.closing.saturating_sub(1);
            }
        }
        self.released.notify_one();
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
                let last = c.last_activity();
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

/// `TCP_DEFER_ACCEPT` on `listener`: the kernel queues a connection for
/// `accept` once data arrives, or after about `wait` (whole seconds, at least
/// one) when none does. No safe binding exists (std's `set_deferaccept` is
/// unstable, rust-lang/rust#119639; nix, socket2 and rustix lack it).
#[allow(unsafe_code)]
fn defer_accept(listener: &TcpListener, wait: Duration) -> io::Result<()> {
    use nix::libc;
    use std::os::fd::AsRawFd;
    let secs: libc::c_int = wait.as_secs().clamp(1, 3600).try_into().unwrap_or(3600);
    // SAFETY: a valid socket descriptor borrowed for the call, and a pointer to
    // a c_int with its exact size, as TCP_DEFER_ACCEPT takes.
    let r = unsafe {
        libc::setsockopt(
            listener.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_DEFER_ACCEPT,
            std::ptr::from_ref(&secs).cast(),
            libc::socklen_t::try_from(std::mem::size_of::<libc::c_int>()).unwrap_or(4),
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// The accept errors that mean "out of descriptors or memory": closing a
/// connection helps.
fn is_exhaustion(e: &io::Error) -> bool {
    use nix::errno::Errno;
    matches!(
        e.raw_os_error().map(Errno::from_raw),
        Some(Errno::EMFILE | Errno::ENFILE | Errno::ENOBUFS | Errno::ENOMEM)
    )
}

/// A listener whose connections are tracked (for axum's `serve` and tonic's
/// incoming stream).
#[derive(Debug)]
pub struct Listener {
    inner: TcpListener,
    tracker: Tracker,
    last_error_log: Option<Instant>,
    /// Accepted, not yet heard from ([`Parked`]).
    parked: futures::stream::FuturesUnordered<Parked>,
}

impl Listener {
    /// Accepts the next connection, once the server holds no more descriptors
    /// than its limit, and makes room when that leaves it full. Errors
    /// (`EMFILE` above all) are logged at most once a second and retried after a
    /// pause; out of descriptors, the connection [`victim_rank`] puts first is
    /// closed to get one back.
    ///
    /// A connection whose client has not sent a byte yet is held here
    /// ([`Parked`]) and returned once it does; the connections it holds count
    /// against the limit like any other.
    pub async fn accept_tracked(&mut self) -> (Tracked, SocketAddr) {
        use futures::StreamExt;
        loop {
            tokio::select! {
                biased;
                Some(ready) = self.parked.next(), if !self.parked.is_empty() => {
                    if let Some(conn) = ready {
                        return conn;
                    }
                }
                (conn, spoken) = Self::accept_one(&self.inner, &self.tracker, &mut self.last_error_log) => {
                    if spoken {
                        return conn;
                    }
                    self.parked.push(Parked { conn: Some(conn) });
                }
            }
        }
    }

    /// Accepts one connection (see [`Listener::accept_tracked`]); true when its
    /// client has already sent something.
    async fn accept_one(
        inner: &TcpListener,
        tracker: &Tracker,
        last_error_log: &mut Option<Instant>,
    ) -> ((Tracked, SocketAddr), bool) {
        loop {
            tracker.room().await;
            match inner.accept().await {
                Ok((stream, addr)) => {
                    let _ = stream.set_nodelay(true);
                    let t = tracker;
                    let mut table = t.lock();
                    if table.held() >= t.limits.max_connections {
                        // Before the new one is in the table: never the victim.
                        t.make_room(&mut table);
                    }
                    table.next += 1;
                    let id = table.next;
                    let now = t.now();
                    let clocks = Arc::new(Clocks::new(now));
                    let (spoken, whole_head) = peek_at_accept(&stream);
                    if !t.multiplexed && whole_head {
                        clocks.heard.store(true, Ordering::Relaxed);
                        clocks.pending_since.store(now, Ordering::Relaxed);
                        clocks.requested.store(now, Ordering::Relaxed);
                    }
                    table.conns.insert(id, clocks.clone());
                    drop(table);
                    let tracked = Tracked {
                        inner: stream,
                        clocks,
                        after_lf: false,
                        registration: Registration {
                            id,
                            tracker: t.clone(),
                        },
                    };
                    return ((tracked, addr), spoken);
                }
                Err(e) => {
                    let now = Instant::now();
                    let exhausted = is_exhaustion(&e);
                    if last_error_log
                        .is_none_or(|t| now.duration_since(t) >= Duration::from_secs(1))
                    {
                        let (open, held) = {
                            let table = tracker.lock();
                            (table.conns.len(), table.held())
                        };
                        tracing::warn!(server = tracker.name, error = %e, open, held, "accept failed; retrying");
                        *last_error_log = Some(now);
                    }
                    let released = tracker.released.notified();
                    if exhausted {
                        let t = tracker;
                        let mut table = t.lock();
                        t.make_room(&mut table);
                    }
                    let _ = tokio::time::timeout(ACCEPT_BACKOFF, released).await;
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
    // Dropped first: the descriptor is closed before the registration tells
    // the listener it may accept again.
    inner: TcpStream,
    clocks: Arc<Clocks>,
    /// HTTP/1 head scanning state ([`head_ends`]).
    after_lf: bool,
    registration: Registration,
}

/// Removes a connection from its tracker's count when dropped.
#[derive(Debug)]
struct Registration {
    id: u64,
    tracker: Tracker,
}

impl Drop for Registration {
    fn drop(&mut self) {
        self.tracker.release(self.id);
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
            let now = self.registration.tracker.now();
            self.clocks.last_io.store(now, Ordering::Relaxed);
            self.clocks.heard.store(true, Ordering::Relaxed);
            let owes_nothing = self.registration.tracker.multiplexed
                && self.clocks.answered.load(Ordering::Relaxed);
            let _ = (!owes_nothing).then(|| {
                self.clocks.pending_since.compare_exchange(
                    NEVER,
                    now,
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                )
            });
            if !self.registration.tracker.multiplexed {
                let this = &mut *self;
                if head_ends(&mut this.after_lf, &buf.filled()[before..]) {
                    let _ = this.clocks.requested.compare_exchange(
                        NEVER,
                        now,
                        Ordering::Relaxed,
                        Ordering::Relaxed,
                    );
                }
            }
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
                .store(self.registration.tracker.now(), Ordering::Relaxed);
            if self.clocks.pending_since.swap(NEVER, Ordering::Relaxed) != NEVER {
                self.clocks.answered.store(true, Ordering::Relaxed);
            }
            self.clocks.requested.store(NEVER, Ordering::Relaxed);
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

#[cfg(test)]
mod tests {
    use super::*;

    fn clocks(accepted: u64, heard: bool, answered: bool, pending: u64, last_io: u64) -> Clocks {
        let c = Clocks::new(accepted);
        c.heard.store(heard, Ordering::Relaxed);
        c.answered.store(answered, Ordering::Relaxed);
        c.pending_since.store(pending, Ordering::Relaxed);
        c.last_io.store(last_io, Ordering::Relaxed);
        c
    }

    #[test]
    fn a_full_server_closes_the_never_answered_first_and_the_busy_last() {
        let now = 100_000;
        // A flood of reconnecting clients: all younger than a second.
        let silent = clocks(now - 40, false, false, NEVER, NEVER);
        let stalled = clocks(now - 30, true, false, now - 30, now - 30);
        // A probe accepted just now, its request not in yet.
        let probe = clocks(now, false, false, NEVER, NEVER);
        // A probe whose whole request was read 80 ms ago, not answered yet:
        // older than the flood, and still kept over it.
        let probe_read = clocks(now - 80, true, false, now - 80, now - 80);
        probe_read.requested.store(now - 80, Ordering::Relaxed);
        // A whole request nobody answered for 4 s (ranked with `slow_again`,
        // older first).
        let stuck = clocks(now - 4_000, true, false, now - 4_000, now - 4_000);
        stuck.requested.store(now - 4_000, Ordering::Relaxed);
        // GetIdentity traffic: answered 20 ms ago, or a call in flight.
        let busy = clocks(now - 60_000, true, true, NEVER, now - 20);
        let in_flight = clocks(now - 60_000, true, true, now - 2, now - 2);
        let keep_alive = clocks(now - 60_000, true, true, NEVER, now - 5_000);
        let slow_again = clocks(now - 60_000, true, true, now - 3_000, now - 3_000);
        let order = [
            ("silent", &silent),
            ("stalled", &stalled),
            ("probe", &probe),
            ("probe_read", &probe_read),
            ("stuck", &stuck),
            ("slow_again", &slow_again),
            ("keep_alive", &keep_alive),
            ("busy", &busy),
            ("in_flight", &in_flight),
        ];
        let mut ranked: Vec<_> = order
            .iter()
            .map(|(n, c)| (victim_rank(c, now), *n))
            .collect();
        ranked.sort();
        let names: Vec<_> = ranked.iter().map(|(_, n)| *n).collect();
        assert_eq!(
            names,
            [
                "silent",
                "stalled",
                "probe",
                "stuck",
                "slow_again",
                "keep_alive",
                "probe_read",
                "busy",
                "in_flight"
            ]
        );
    }

    #[test]
    fn the_end_of_a_request_head_is_found_across_reads() {
        let whole = b"GET /readyz HTTP/1.1\r\nHost: x\r\n\r\n";
        assert!(head_ends(&mut false, whole));
        assert!(head_ends(&mut false, b"GET / HTTP/1.0\n\n"));
        assert!(!head_ends(
            &mut false,
            b"GET /readyz HTTP/1.1\r\nHost: x\r\n"
        ));
        assert!(!head_ends(&mut false, b"G"));
        // Split at every byte: found exactly in the piece holding the last byte.
        for cut in 1..whole.len() {
            let mut state = false;
            let first = head_ends(&mut state, &whole[..cut]);
            let second = head_ends(&mut state, &whole[cut..]);
            assert!(!first && second, "cut at {cut}");
        }
        // A header line's own line end is not a blank line.
        let mut state = false;
        assert!(!head_ends(&mut state, b"GET / HTTP/1.1\r\n"));
        assert!(!head_ends(&mut state, b"Host: x\r\n"));
        assert!(head_ends(&mut state, b"\r\n"));
    }

    fn limits(max_connections: usize) -> Limits {
        Limits {
            max_connections,
            header_read_timeout: Duration::from_secs(60),
            idle_timeout: Duration::from_secs(60),
        }
    }

    #[tokio::test]
    async fn a_closed_connection_counts_until_its_descriptor_is_released() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let tracker = Tracker::new("test", limits(2));
        let shutdown = CancellationToken::new();
        let mut l = tracker.listen(listener, shutdown.clone());
        // Each sends a byte: TCP_DEFER_ACCEPT holds back the silent ones.
        let _clients: Vec<_> = (0..4)
            .map(|_| {
                let mut s = std::net::TcpStream::connect(addr).unwrap();
                std::io::Write::write_all(&mut s, b"x").unwrap();
                s
            })
            .collect();
        let (a, _) = l.accept_tracked().await;
        let (b, _) = l.accept_tracked().await;
        let (c, _) = l.accept_tracked().await;
        // Full: the oldest never-answered one was closed to admit the third...
        assert!(a.clocks.closed.load(Ordering::Acquire));
        assert!(!b.clocks.closed.load(Ordering::Acquire));
        // ...and holds its descriptor until dropped: no fourth accept meanwhile.
        assert_eq!(tracker.lock().held(), 3);
        let early = tokio::time::timeout(RELEASE_WAIT / 2, l.accept_tracked()).await;
        assert!(early.is_err(), "accepted while over the limit");
        drop(a);
        let (d, _) = tokio::time::timeout(Duration::from_secs(5), l.accept_tracked())
            .await
            .unwrap();
        assert_eq!(tracker.lock().held(), 3);
        assert!(b.clocks.closed.load(Ordering::Acquire));
        drop((b, c, d));
        assert_eq!(tracker.lock().held(), 0);
        shutdown.cancel();
    }

    #[tokio::test]
    async fn silent_connections_wait_in_the_kernel_and_one_that_speaks_goes_first() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let shutdown = CancellationToken::new();
        let mut l = Tracker::new("test", limits(8)).listen(listener, shutdown.clone());
        let _silent: Vec<_> = (0..5)
            .map(|_| std::net::TcpStream::connect(addr).unwrap())
            .collect();
        let mut speaks = std::net::TcpStream::connect(addr).unwrap();
        let speaks_addr = speaks.local_addr().unwrap();
        std::io::Write::write_all(&mut speaks, b"GET").unwrap();
        let (_, peer) = tokio::time::timeout(Duration::from_secs(5), l.accept_tracked())
            .await
            .unwrap();
        assert_eq!(peer, speaks_addr, "a silent connection was accepted first");
        shutdown.cancel();
    }

    #[tokio::test]
    async fn a_silent_connection_waits_in_the_listener_until_it_speaks_or_is_closed() {
        // As the kernel hands over a silent connection once TCP_DEFER_ACCEPT
        // runs out: a listener without it.
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let tracker = Tracker::new(
            "test",
            Limits {
                max_connections: 8,
                header_read_timeout: Duration::from_millis(300),
                idle_timeout: Duration::from_secs(60),
            },
        );
        let shutdown = CancellationToken::new();
        tokio::spawn(tracker.clone().sweep(shutdown.clone()));
        let mut l = Listener {
            inner: listener,
            tracker: tracker.clone(),
            last_error_log: None,
            parked: futures::stream::FuturesUnordered::new(),
        };
        let mut silent = std::net::TcpStream::connect(addr).unwrap();
        let silent_addr = silent.local_addr().unwrap();
        let mut speaks = std::net::TcpStream::connect(addr).unwrap();
        let speaks_addr = speaks.local_addr().unwrap();
        std::io::Write::write_all(&mut speaks, b"x").unwrap();
        let wait = Duration::from_secs(5);
        let (first, peer) = tokio::time::timeout(wait, l.accept_tracked())
            .await
            .unwrap();
        assert_eq!(
            peer, speaks_addr,
            "the silent connection went to the server"
        );
        // Parked, it still holds its place.
        assert_eq!(tracker.lock().held(), 2);
        // It speaks: now it is the server's.
        std::io::Write::write_all(&mut silent, b"x").unwrap();
        let (second, peer) = tokio::time::timeout(wait, l.accept_tracked())
            .await
            .unwrap();
        assert_eq!(peer, silent_addr);
        // One that never speaks is closed after the header-read timeout without
        // ever being returned, and its descriptor is released.
        let mut never = std::net::TcpStream::connect(addr).unwrap();
        never.set_read_timeout(Some(wait)).unwrap();
        let nothing = tokio::time::timeout(Duration::from_secs(2), l.accept_tracked()).await;
        assert!(
            nothing.is_err(),
            "a connection that never spoke was returned"
        );
        assert_eq!(tracker.lock().held(), 2);
        let mut byte = [0u8; 1];
        assert_eq!(std::io::Read::read(&mut never, &mut byte).unwrap(), 0);
        drop((first, second));
        shutdown.cancel();
    }

    #[tokio::test]
    async fn a_probe_whose_request_is_in_outlives_a_flood_of_stalled_clients() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let tracker = Tracker::new("test", limits(3));
        let shutdown = CancellationToken::new();
        let mut l = tracker.listen(listener, shutdown.clone());
        // The probe's whole request is in the socket when it is accepted; the
        // task that would serve it has not read yet (a loaded machine).
        let mut probe = std::net::TcpStream::connect(addr).unwrap();
        let probe_addr = probe.local_addr().unwrap();
        std::io::Write::write_all(&mut probe, b"GET /readyz HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        let (p, peer) = tokio::time::timeout(Duration::from_secs(5), l.accept_tracked())
            .await
            .unwrap();
        assert_eq!(peer, probe_addr);
        // Then ten clients that send one byte each and stall, all newer.
        let _stalled: Vec<_> = (0..10)
            .map(|_| {
                let mut s = std::net::TcpStream::connect(addr).unwrap();
                std::io::Write::write_all(&mut s, b"G").unwrap();
                s
            })
            .collect();
        let mut closed = 0;
        let mut held = Vec::new();
        for _ in 0..10 {
            let (c, _) = tokio::time::timeout(Duration::from_secs(5), l.accept_tracked())
                .await
                .unwrap();
            held.push(c);
            // Release what the tracker closed, as the serving tasks would.
            let before = held.len();
            held.retain(|c| !c.clocks.closed.load(Ordering::Acquire));
            closed += before - held.len();
            assert!(
                !p.clocks.closed.load(Ordering::Acquire),
                "the probe was closed to make room for a stalled client"
            );
        }
        assert!(closed >= 7, "only {closed} stalled clients were closed");
        assert!(tracker.lock().held() <= 3);
        drop((p, held));
        shutdown.cancel();
    }
}
