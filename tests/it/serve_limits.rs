//! What a client can hold on `serve`'s ports (issue 17): raw sockets on
//! 127.0.0.1 that connect and say nothing, send half a request, or trickle it a
//! byte at a time, against the agent under a small descriptor limit; the probes
//! and `GetIdentity` must still answer, slow requests must be cut, and SIGTERM must
//! not wait for a half-sent request. Also `/metrics` content negotiation.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use crate::common::*;
use crate::serve_support::{block_on, pb, runtime, tail, Serve};

/// One HTTP/1.1 request on a fresh connection (`Connection: close`): the head
/// and the body.
fn request(port: u16, path: &str, headers: &[&str]) -> Result<(String, String), String> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).map_err(|e| e.to_string())?;
    s.set_read_timeout(Some(Duration::from_secs(5)))
        .map_err(|e| e.to_string())?;
    let mut req = format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n");
    for h in headers {
        req.push_str(h);
        req.push_str("\r\n");
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes()).map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    s.read_to_end(&mut out).map_err(|e| e.to_string())?;
    let text = String::from_utf8_lossy(&out).into_owned();
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or_else(|| format!("no response head: {text:?}"))?;
    Ok((head.to_owned(), body.to_owned()))
}

/// Waits until the peer closes `s` (read returns 0 or an error); how long it took.
fn closed_within(s: &mut TcpStream, bound: Duration) -> Option<Duration> {
    let started = Instant::now();
    s.set_read_timeout(Some(Duration::from_millis(200))).ok()?;
    let mut buf = [0u8; 4096];
    while started.elapsed() < bound {
        match s.read(&mut buf) {
            Ok(0) => return Some(started.elapsed()),
            Ok(_) => {}
            Err(e)
                if e.kind() == std::io::ErrorKind::WouldBlock
                    || e.kind() == std::io::ErrorKind::TimedOut => {}
            Err(_) => return Some(started.elapsed()),
        }
    }
    None
}

/// Whether process `pid` has accepted `client`'s connection to its `port` on
/// 127.0.0.1: /proc/net/tcp gives the server side of that connection an inode
/// once it is accepted (none while it waits in the accept queue), and the
/// process holds a descriptor on it. `Err` says what was seen instead.
fn accepted_by(pid: u32, port: u16, client: &TcpStream) -> Result<(), String> {
    let peer = client.local_addr().map_err(|e| e.to_string())?.port();
    // Addresses as the kernel prints them: the IPv4 address in host byte order
    // (127.0.0.1 is 0100007F on this little-endian machine), the port in hex.
    let (local, remote) = (
        format!("0100007F:{port:04X}"),
        format!("0100007F:{peer:04X}"),
    );
    let table = std::fs::read_to_string("/proc/net/tcp").map_err(|e| e.to_string())?;
    let inode = table
        .lines()
        .skip(1)
        .map(|line| line.split_whitespace().collect::<Vec<_>>())
        .find(|f| f.get(1) == Some(&local.as_str()) && f.get(2) == Some(&remote.as_str()))
        .and_then(|f| f.get(9).map(|i| i.to_string()))
        .ok_or_else(|| format!("no socket from {local} to {remote} in /proc/net/tcp"))?;
    ensure(
        inode != "0",
        format!("the connection from port {peer} waits in the accept queue"),
    )?;
    let socket = format!("socket:[{inode}]");
    let held = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map_err(|e| format!("/proc/{pid}/fd: {e}"))?
        .filter_map(Result::ok)
        .any(|fd| std::fs::read_link(fd.path()).is_ok_and(|l| l.as_os_str() == socket.as_str()));
    ensure(
        held,
        format!("pid {pid} holds no descriptor on {socket} (port {peer})"),
    )
}

/// An agent beside nothing (no member answers): enough for probes and metrics.
fn lonely(args: &[&str]) -> Serve {
    let mut b = Serve::beside(&format!("http://127.0.0.1:{}", free_port()));
    for a in args {
        b = b.arg(*a);
    }
    b.start()
}

#[test]
fn metrics_are_prometheus_text_by_default_and_openmetrics_only_when_asked() {
    let serve = lonely(&[]);
    let (head, body) = request(serve.http, "/metrics", &[]).unwrap();
    let head = head.to_ascii_lowercase();
    assert!(
        head.contains("content-type: text/plain; version=0.0.4"),
        "{head}"
    );
    assert!(!body.contains("# EOF"), "{body}");
    assert!(body.contains("etcd_agent_"), "{body}");

    let (head, body) = request(serve.http, "/metrics", &["Accept: */*"]).unwrap();
    assert!(head.to_ascii_lowercase().contains("text/plain"), "{head}");
    assert!(!body.contains("# EOF"));

    // What Prometheus sends: OpenMetrics preferred.
    let (head, body) = request(
        serve.http,
        "/metrics",
        &["Accept: application/openmetrics-text;version=1.0.0;q=0.5,application/openmetrics-text;version=0.0.1;q=0.4,text/plain;version=0.0.4;q=0.3,*/*;q=0.2"],
    )
    .unwrap();
    assert!(
        head.to_ascii_lowercase()
            .contains("content-type: application/openmetrics-text"),
        "{head}"
    );
    assert!(body.trim_end().ends_with("# EOF"), "{body}");
}

/// Raises this test process's descriptor limit to its hard limit, which must be
/// at least `need` (the load tools hold hundreds of sockets themselves).
fn raise_nofile_to_hard_limit(need: u64) {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let (_, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
    setrlimit(Resource::RLIMIT_NOFILE, hard, hard).unwrap();
    assert!(
        hard >= need,
        "the test needs {need} descriptors, the hard limit is {hard}"
    );
}

#[test]
fn probes_and_get_identity_answer_with_300_idle_and_50_slow_clients_under_ulimit_256() {
    // This test process holds ~700 sockets itself.
    raise_nofile_to_hard_limit(2048);

    let cluster = Cluster::builder(EtcdVersion::V3_5).start();
    let m0 = &cluster[0];
    let serve = Serve::beside(m0.client_url())
        .data_dir(m0.data_dir())
        .nofile(256)
        .start();
    serve.wait_readyz(200);

    let mut held = Vec::new();
    for _ in 0..300 {
        held.push(TcpStream::connect(("127.0.0.1", serve.http)).unwrap());
        held.push(TcpStream::connect(("127.0.0.1", serve.grpc)).unwrap());
    }
    for _ in 0..50 {
        let mut s = TcpStream::connect(("127.0.0.1", serve.http)).unwrap();
        let _ = s.write_all(b"GET /readyz HTTP/1.1\r\nHost: x\r\n");
        held.push(s);
    }
    for round in 0..5 {
        let started = Instant::now();
        let (head, _) = request(serve.http, "/livez", &[])
            .unwrap_or_else(|e| panic!("round {round}: /livez: {e}\n{}", serve.log()));
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        let (head, body) = request(serve.http, "/readyz", &[])
            .unwrap_or_else(|e| panic!("round {round}: /readyz: {e}"));
        assert!(head.starts_with("HTTP/1.1 200"), "{head}\n{body}");
        let identity = block_on(async {
            tokio::time::timeout(Duration::from_secs(10), serve.identity()).await
        })
        .unwrap_or_else(|_| panic!("round {round}: GetIdentity timed out"));
        assert_eq!(identity.member_id, m0.id_hex().unwrap());
        // A bound for a hang, not a performance claim.
        assert!(started.elapsed() < Duration::from_secs(20));
        // More idle clients arrive meanwhile.
        for _ in 0..20 {
            if let Ok(s) = TcpStream::connect(("127.0.0.1", serve.http)) {
                held.push(s);
            }
        }
    }
    drop(held);
}

#[test]
fn a_request_trickled_a_byte_at_a_time_is_cut_at_the_header_read_timeout() {
    let serve = lonely(&["--header-read-timeout=1s"]);
    let mut s = TcpStream::connect(("127.0.0.1", serve.http)).unwrap();
    let started = Instant::now();
    let mut cut = None;
    for b in b"GET /readyz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa" {
        if s.write_all(&[*b]).is_err() {
            cut = Some(started.elapsed());
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let cut =
        cut.or_else(|| closed_within(&mut s, Duration::from_secs(5)).map(|_| started.elapsed()));
    let cut = cut.expect("the trickling client was never cut");
    assert!(cut < Duration::from_secs(8), "cut after {cut:?}");
}

#[test]
fn a_silent_connection_and_an_idle_keep_alive_one_are_closed() {
    let serve = lonely(&["--header-read-timeout=1s", "--idle-timeout=2s"]);
    let mut silent = TcpStream::connect(("127.0.0.1", serve.http)).unwrap();
    assert!(
        closed_within(&mut silent, Duration::from_secs(10)).is_some(),
        "a connection that sent nothing stayed open"
    );
    let mut kept = TcpStream::connect(("127.0.0.1", serve.http)).unwrap();
    kept.write_all(b"GET /livez HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        .unwrap();
    let mut buf = [0u8; 512];
    kept.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let n = kept.read(&mut buf).unwrap();
    assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"));
    assert!(
        closed_within(&mut kept, Duration::from_secs(10)).is_some(),
        "an idle keep-alive connection stayed open"
    );
}

/// The gRPC port too: its HTTP/2 server writes SETTINGS at once, which must not
/// count as the client having said something (500 such connections held every
/// descriptor until the idle timeout).
#[test]
fn a_silent_grpc_connection_is_closed_at_the_header_read_timeout() {
    let serve = lonely(&["--header-read-timeout=1s", "--idle-timeout=60s"]);
    let mut silent = TcpStream::connect(("127.0.0.1", serve.grpc)).unwrap();
    let started = Instant::now();
    let closed = closed_within(&mut silent, Duration::from_secs(15));
    assert!(
        closed.is_some_and(|_| started.elapsed() < Duration::from_secs(10)),
        "a gRPC connection that sent nothing stayed open ({:?})",
        started.elapsed()
    );
    // A client that speaks is not cut by it: GetIdentity still answers.
    let mut grpc = TcpStream::connect(("127.0.0.1", serve.grpc)).unwrap();
    grpc.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n").unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    grpc.set_nonblocking(true).unwrap();
    let mut buf = [0u8; 64];
    let open = match grpc.read(&mut buf) {
        Ok(n) => n > 0,
        Err(e) => e.kind() == std::io::ErrorKind::WouldBlock,
    };
    assert!(open, "a client that sent its preface was cut as silent");
}

#[test]
fn sigterm_is_not_held_by_a_half_sent_request() {
    // Default flags only (the header-read timeout is 10 s).
    let mut serve = lonely(&["--shutdown-grace=30s"]);
    let mut half = TcpStream::connect(("127.0.0.1", serve.http)).unwrap();
    half.write_all(b"GET /readyz HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        .unwrap();
    let mut grpc_half = TcpStream::connect(("127.0.0.1", serve.grpc)).unwrap();
    grpc_half.write_all(b"PRI * HTTP/2.0\r\n").unwrap();
    // Both half-sent requests are the agent's to answer before it is signalled
    // (one still in the accept queue would hold nothing).
    assert_eventually!(
        accepted_by(serve.pid(), serve.http, &half).and_then(|()| accepted_by(
            serve.pid(),
            serve.grpc,
            &grpc_half
        )),
        "the agent accepts both half-sent requests"
    );
    let started = Instant::now();
    serve.sigterm();
    let status = serve.wait_exit(Duration::from_secs(25));
    let took = started.elapsed();
    assert!(
        status.is_some(),
        "serve still running {took:?} after SIGTERM"
    );
    // Well inside the 30 s grace the half-sent request would otherwise hold, and
    // before the 10 s header-read timeout would cut it.
    assert!(took < Duration::from_secs(8), "SIGTERM took {took:?}");
    drop((half, grpc_half));
}

/// Hostile connections per port in the reconnect test: with two ports, more
/// than the agent's 256 descriptors.
const HOSTILE_PER_PORT: usize = 300;

/// One hostile client: connects, sends `first` (nothing, or the first byte of a
/// request) and waits; reconnects as soon as the agent closes it, until `stop`.
async fn hostile_client(
    port: u16,
    first: &'static [u8],
    stop: CancellationToken,
    opened: Arc<AtomicU64>,
) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    while !stop.is_cancelled() {
        let conn = tokio::select! {
            c = tokio::net::TcpStream::connect(("127.0.0.1", port)) => c,
            () = stop.cancelled() => return,
        };
        let Ok(mut s) = conn else {
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        opened.fetch_add(1, Ordering::Relaxed);
        if !first.is_empty() && s.write_all(first).await.is_err() {
            continue;
        }
        let mut buf = [0u8; 512];
        loop {
            tokio::select! {
                r = s.read(&mut buf) => match r {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {}
                },
                () = stop.cancelled() => return,
            }
        }
    }
}

/// `GET path` on a new connection, as a kubelet probes: the status and the time
/// from connect to the last byte, or why it failed (nothing within `bound`).
fn probe(port: u16, path: &str, bound: Duration) -> Result<(u16, Duration), String> {
    let started = Instant::now();
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let mut s = TcpStream::connect_timeout(&addr, bound).map_err(|e| format!("connect: {e}"))?;
    s.set_read_timeout(Some(bound)).map_err(|e| e.to_string())?;
    s.write_all(
        format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n").as_bytes(),
    )
    .map_err(|e| format!("write: {e}"))?;
    let mut out = Vec::new();
    s.read_to_end(&mut out)
        .map_err(|e| format!("read after {:?}: {e}", started.elapsed()))?;
    let status = std::str::from_utf8(out.get(9..12).unwrap_or_default())
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("no status line: {:?}", String::from_utf8_lossy(&out)))?;
    Ok((status, started.elapsed()))
}

/// Issue 17 item 5, the case that still failed: 1,000 hostile connections
/// reopened as fast as the agent closed them (under `ulimit -n 256`) made
/// `/readyz` wait 2 s, failed `GetIdentity` calls and logged `Too many open
/// files`. Here 600 clients, half silent and half stalled after the first byte
/// of a request, reconnect the moment they are closed; meanwhile every `/readyz`
/// and `/livez` on a new connection and every `GetIdentity` on a long-lived
/// channel answers within 2 s (a bound for a loaded CI machine, not a
/// benchmark), and the agent never runs out of descriptors.
#[test]
fn probes_answer_while_more_clients_than_descriptors_reconnect_as_fast_as_closed() {
    raise_nofile_to_hard_limit(2048);
    let bound = Duration::from_secs(2);

    let cluster = Cluster::builder(EtcdVersion::V3_5).start();
    let m0 = &cluster[0];
    let serve = Serve::beside(m0.client_url())
        .data_dir(m0.data_dir())
        .nofile(256)
        .start();
    serve.wait_readyz(200);
    let member_id = m0.id_hex().unwrap();

    let stop = CancellationToken::new();
    let opened = Arc::new(AtomicU64::new(0));
    let mut hostile = Vec::new();
    for (port, stall) in [(serve.http, b"G"), (serve.grpc, b"P")] {
        for i in 0..HOSTILE_PER_PORT {
            let first: &'static [u8] = if i % 2 == 0 { b"" } else { stall };
            hostile.push(runtime().spawn(hostile_client(
                port,
                first,
                stop.clone(),
                opened.clone(),
            )));
        }
    }
    // The flood is on before the probing starts: every client has connected,
    // and the agent, over its limit, has closed some that came back.
    assert_eventually!(
        {
            let n = opened.load(Ordering::Relaxed);
            ensure(
                n > 2 * HOSTILE_PER_PORT as u64,
                format!("{n} hostile connections opened"),
            )
        },
        "every hostile client connects and some reconnect"
    );

    // GetIdentity as the operator's client and the load tool call it: four
    // callers on one long-lived channel, back to back.
    let probing = Duration::from_secs(15);
    let channel = block_on(serve.channel());
    let callers: Vec<_> = (0..4)
        .map(|_| {
            let mut client = pb::member_agent_client::MemberAgentClient::new(channel.clone());
            let member_id = member_id.clone();
            runtime().spawn(async move {
                let until = tokio::time::Instant::now() + probing;
                let (mut calls, mut failures, mut slowest) = (0u64, Vec::new(), Duration::ZERO);
                while tokio::time::Instant::now() < until {
                    let started = Instant::now();
                    let r =
                        tokio::time::timeout(bound, client.get_identity(pb::GetIdentityRequest {}))
                            .await;
                    let took = started.elapsed();
                    calls += 1;
                    slowest = slowest.max(took);
                    match r {
                        Ok(Ok(r)) if r.get_ref().member_id == member_id => {}
                        Ok(Ok(r)) => failures.push(format!("member {}", r.get_ref().member_id)),
                        Ok(Err(s)) => failures.push(format!("{s} after {took:?}")),
                        Err(_) => failures.push(format!("no answer within {bound:?}")),
                    }
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                (calls, failures, slowest)
            })
        })
        .collect();

    // The kubelet's probes meanwhile, a new connection each.
    let until = Instant::now() + probing;
    let (mut probes, mut probe_failures, mut slowest_probe) = (0u64, Vec::new(), Duration::ZERO);
    while Instant::now() < until {
        for path in ["/readyz", "/livez"] {
            probes += 1;
            match probe(serve.http, path, bound) {
                Ok((200, took)) => slowest_probe = slowest_probe.max(took),
                Ok((status, took)) => {
                    probe_failures.push(format!("{path}: {status} after {took:?}"))
                }
                Err(e) => probe_failures.push(format!("{path}: {e}")),
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let (mut calls, mut call_failures, mut slowest_call) = (0u64, Vec::new(), Duration::ZERO);
    for c in callers {
        let (n, f, s) = block_on(c).unwrap();
        calls += n;
        call_failures.extend(f);
        slowest_call = slowest_call.max(s);
    }
    let reopened = opened.load(Ordering::Relaxed);
    stop.cancel();
    for h in hostile {
        block_on(h).unwrap();
    }

    let log = serve.log();
    let emfile = log.matches("Too many open files").count();
    eprintln!("{probes} probes (slowest {slowest_probe:?}), {calls} GetIdentity calls (slowest {slowest_call:?}), {reopened} hostile connections opened, 'Too many open files' logged {emfile} times");
    // The flood did what it says: the agent kept closing and the clients reopening.
    assert!(
        reopened > 2 * HOSTILE_PER_PORT as u64 + 500,
        "only {reopened} hostile connections were opened"
    );
    assert!(
        probe_failures.is_empty(),
        "{} of {probes} probes failed, e.g. {:?}",
        probe_failures.len(),
        &probe_failures[..probe_failures.len().min(5)]
    );
    assert!(
        call_failures.is_empty(),
        "{} of {calls} GetIdentity calls failed, e.g. {:?}",
        call_failures.len(),
        &call_failures[..call_failures.len().min(5)]
    );
    assert!(slowest_probe < bound && slowest_call < bound);
    assert_eq!(
        emfile,
        0,
        "the agent ran out of descriptors:\n{}",
        tail(&log)
    );
}
