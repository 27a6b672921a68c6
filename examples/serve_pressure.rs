//! Connection pressure on the sidecar's two ports, and `/readyz` latency as a
//! kubelet sees it. Two subcommands (loopback only; `scripts/bench-serve` runs
//! both against an agent it started itself):
//!
//! * `hold`: keeps `--idle` TCP connections open to each of `--http` and
//!   `--grpc` that send nothing, and `--slowloris` connections to each that send
//!   one byte of a request every `--byte-every` (HTTP: a `GET /readyz` header
//!   that never ends; gRPC: the HTTP/2 client preface), for `--seconds`. Every
//!   connection the server closes is opened again at once, so the pressure stays
//!   at the full count; prints what the server closed and how long a slowloris
//!   connection lasted, as one JSON line.
//! * `readyz`: open-loop `GET /readyz` at `--rate` per second for `--seconds`,
//!   each on a new connection with `Connection: close` (as a kubelet probe);
//!   prints the latency percentiles (connect to last byte), errors and non-200
//!   answers as one JSON line.
//!
//! ```sh
//! cargo run --release --example serve_pressure -- hold --http 127.0.0.1:9466 --grpc 127.0.0.1:9465 --idle 500 --slowloris 1 --seconds 60
//! cargo run --release --example serve_pressure -- readyz --target 127.0.0.1:9466 --rate 200 --seconds 10
//! ```

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::mpsc;

#[derive(Debug, Parser)]
struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Hold idle and slowloris connections open against both ports.
    Hold {
        /// The agent's HTTP address (loopback).
        #[arg(long)]
        http: SocketAddr,
        /// The agent's gRPC address (loopback).
        #[arg(long)]
        grpc: SocketAddr,
        /// Silent connections held open to each port.
        #[arg(long, default_value_t = 500)]
        idle: usize,
        /// Slowloris connections to each port.
        #[arg(long, default_value_t = 1)]
        slowloris: usize,
        /// Seconds between two bytes of a slowloris connection.
        #[arg(long, default_value_t = 3)]
        byte_every: u64,
        /// How long to hold, in seconds.
        #[arg(long, default_value_t = 60)]
        seconds: u64,
    },
    /// `GET /readyz` on a new connection each, at a fixed rate.
    Readyz {
        /// The agent's HTTP address (loopback).
        #[arg(long)]
        target: SocketAddr,
        /// Requests per second.
        #[arg(long, default_value_t = 200)]
        rate: u32,
        /// How long to send, in seconds.
        #[arg(long, default_value_t = 10)]
        seconds: u64,
    },
}

/// Counters of one kind of held connection on one port.
#[derive(Debug, Default)]
struct Held {
    /// Connections opened (reopenings included).
    opened: AtomicU64,
    /// Connections the server closed (EOF or reset).
    closed_by_server: AtomicU64,
    /// Connect attempts that failed.
    connect_errors: AtomicU64,
    /// Open right now.
    open: AtomicU64,
    /// Bytes sent (slowloris only).
    bytes_sent: AtomicU64,
    /// The longest a connection lasted before the server closed it, in ms.
    longest_ms: AtomicU64,
}

impl Held {
    fn json(&self) -> String {
        format!(
            "{{\"opened\":{},\"closed_by_server\":{},\"connect_errors\":{},\"open_at_end\":{},\"bytes_sent\":{},\"longest_s\":{:.1}}}",
            self.opened.load(Ordering::Relaxed),
            self.closed_by_server.load(Ordering::Relaxed),
            self.connect_errors.load(Ordering::Relaxed),
            self.open.load(Ordering::Relaxed),
            self.bytes_sent.load(Ordering::Relaxed),
            self.longest_ms.load(Ordering::Relaxed) as f64 / 1000.0,
        )
    }
}

/// Pause before reopening after a close or a failed connect (no busy loop).
const REOPEN_PAUSE: Duration = Duration::from_millis(50);

/// One held connection, reopened whenever the server closes it, until `until`.
/// `trickle`: the bytes to send one every `every` (empty: send nothing).
async fn hold_one(
    addr: SocketAddr,
    trickle: &'static [u8],
    every: Duration,
    until: Instant,
    stats: Arc<Held>,
) {
    while Instant::now() < until {
        let mut stream = match tokio::time::timeout_at(until.into(), TcpStream::connect(addr)).await
        {
            Ok(Ok(s)) => s,
            Ok(Err(_)) => {
                stats.connect_errors.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(REOPEN_PAUSE).await;
                continue;
            }
            Err(_) => return,
        };
        stats.opened.fetch_add(1, Ordering::Relaxed);
        stats.open.fetch_add(1, Ordering::Relaxed);
        let opened = Instant::now();
        let mut buf = [0u8; 4096];
        let mut next = 0usize;
        let closed = loop {
            let tick = tokio::time::sleep(if trickle.is_empty() {
                until.saturating_duration_since(Instant::now())
            } else {
                every
            });
            tokio::select! {
                r = stream.read(&mut buf) => match r {
                    Ok(0) | Err(_) => break true,
                    Ok(_) => {} // the server's preface or settings: keep reading
                },
                () = tick => {
                    if Instant::now() >= until {
                        break false;
                    }
                    if !trickle.is_empty() {
                        let byte = trickle[next % trickle.len()];
                        next += 1;
                        if stream.write_all(&[byte]).await.is_err() {
                            break true;
                        }
                        stats.bytes_sent.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        };
        stats.open.fetch_sub(1, Ordering::Relaxed);
        if closed {
            stats.closed_by_server.fetch_add(1, Ordering::Relaxed);
            let lasted = u64::try_from(opened.elapsed().as_millis()).unwrap_or(u64::MAX);
            stats.longest_ms.fetch_max(lasted, Ordering::Relaxed);
            tokio::time::sleep(REOPEN_PAUSE).await;
        }
    }
}

/// A request header that never ends: a new header line forever.
const HTTP_TRICKLE: &[u8] =
    b"GET /readyz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
/// The HTTP/2 client preface, a byte at a time.
const GRPC_TRICKLE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

async fn hold(
    http: SocketAddr,
    grpc: SocketAddr,
    idle: usize,
    slowloris: usize,
    byte_every: Duration,
    seconds: u64,
) {
    let started = Instant::now();
    let until = started + Duration::from_secs(seconds);
    let kinds: [(&str, SocketAddr, &'static [u8], usize); 4] = [
        ("http_idle", http, b"", idle),
        ("grpc_idle", grpc, b"", idle),
        ("http_slowloris", http, HTTP_TRICKLE, slowloris),
        ("grpc_slowloris", grpc, GRPC_TRICKLE, slowloris),
    ];
    let mut tasks = Vec::new();
    let mut all = Vec::new();
    for (name, addr, trickle, n) in kinds {
        let stats = Arc::new(Held::default());
        all.push((name, stats.clone()));
        for _ in 0..n {
            tasks.push(tokio::spawn(hold_one(
                addr,
                trickle,
                byte_every,
                until,
                stats.clone(),
            )));
        }
    }
    // How many were open, sampled every second (after the first 10 s: the
    // pressure once the server has started closing).
    let sampler = {
        let all = all.clone();
        tokio::spawn(async move {
            let mut min_open = u64::MAX;
            let mut samples = 0u64;
            let mut ticker = tokio::time::interval(Duration::from_secs(1));
            loop {
                ticker.tick().await;
                // Not the last second: the holders are closing on their own.
                if Instant::now() + Duration::from_secs(1) >= until {
                    break;
                }
                if started.elapsed() >= Duration::from_secs(10) {
                    let open: u64 = all
                        .iter()
                        .filter(|(n, _)| n.ends_with("idle"))
                        .map(|(_, s)| s.open.load(Ordering::Relaxed))
                        .sum();
                    min_open = min_open.min(open);
                    samples += 1;
                }
            }
            if samples == 0 {
                0
            } else {
                min_open
            }
        })
    };
    for t in tasks {
        let _ = t.await;
    }
    let min_open = sampler.await.unwrap_or(0);
    let parts: Vec<String> = all
        .iter()
        .map(|(name, s)| format!("\"{name}\":{}", s.json()))
        .collect();
    println!(
        "{{\"seconds\":{seconds},\"idle_per_port\":{idle},\"slowloris_per_port\":{slowloris},\"byte_every_s\":{},\"idle_open_min\":{min_open},{}}}",
        byte_every.as_secs(),
        parts.join(",")
    );
}

/// One probe: connect, send, read to EOF; the status code and the time taken.
async fn probe(addr: SocketAddr) -> Result<(u16, Duration), String> {
    let t = Instant::now();
    let mut stream = TcpStream::connect(addr)
        .await
        .map_err(|e| format!("connect: {e}"))?;
    stream.set_nodelay(true).map_err(|e| e.to_string())?;
    stream
        .write_all(b"GET /readyz HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: kube-probe/1.37\r\nConnection: close\r\n\r\n")
        .await
        .map_err(|e| format!("write: {e}"))?;
    let mut answer = Vec::with_capacity(512);
    stream
        .read_to_end(&mut answer)
        .await
        .map_err(|e| format!("read: {e}"))?;
    let took = t.elapsed();
    let status = std::str::from_utf8(answer.get(9..12).unwrap_or_default())
        .ok()
        .and_then(|s| s.parse::<u16>().ok())
        .ok_or_else(|| "no status line".to_string())?;
    Ok((status, took))
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1].as_secs_f64() * 1000.0
}

async fn readyz(target: SocketAddr, rate: u32, seconds: u64) {
    let total = u64::from(rate) * seconds;
    let period = Duration::from_secs(1) / rate.max(1);
    let (tx, mut rx) = mpsc::unbounded_channel::<Result<(u16, Duration), String>>();
    let started = Instant::now();
    let mut ticker = tokio::time::interval(period);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    for _ in 0..total {
        ticker.tick().await;
        let tx = tx.clone();
        tokio::spawn(async move {
            let r = match tokio::time::timeout(Duration::from_secs(5), probe(target)).await {
                Ok(r) => r,
                Err(_) => Err("no answer within 5 s".into()),
            };
            let _ = tx.send(r);
        });
    }
    let send_secs = started.elapsed().as_secs_f64();
    drop(tx);
    let mut latencies = Vec::with_capacity(total as usize);
    let mut errors = 0u64;
    let mut not_ok = 0u64;
    let mut first_error = String::new();
    while let Some(r) = rx.recv().await {
        match r {
            Ok((status, took)) => {
                if status != 200 {
                    not_ok += 1;
                }
                latencies.push(took);
            }
            Err(e) => {
                if first_error.is_empty() {
                    first_error = e;
                }
                errors += 1;
            }
        }
    }
    latencies.sort();
    println!(
        "{{\"requests\":{total},\"errors\":{errors},\"not_200\":{not_ok},\"achieved_rate\":{:.1},\"p50_ms\":{:.3},\"p90_ms\":{:.3},\"p99_ms\":{:.3},\"max_ms\":{:.3},\"first_error\":{:?}}}",
        total as f64 / send_secs,
        percentile(&latencies, 50.0),
        percentile(&latencies, 90.0),
        percentile(&latencies, 99.0),
        latencies.last().map_or(f64::NAN, |d| d.as_secs_f64() * 1000.0),
        first_error,
    );
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    let addrs: Vec<SocketAddr> = match &args.command {
        Command::Hold { http, grpc, .. } => vec![*http, *grpc],
        Command::Readyz { target, .. } => vec![*target],
    };
    if addrs.iter().any(|a| !a.ip().is_loopback()) {
        return Err("serve_pressure only targets loopback addresses".into());
    }
    match args.command {
        Command::Hold {
            http,
            grpc,
            idle,
            slowloris,
            byte_every,
            seconds,
        } => {
            hold(
                http,
                grpc,
                idle,
                slowloris,
                Duration::from_secs(byte_every),
                seconds,
            )
            .await;
        }
        Command::Readyz {
            target,
            rate,
            seconds,
        } => readyz(target, rate, seconds).await,
    }
    Ok(())
}
