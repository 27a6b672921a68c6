//! An open-loop load generator for `MemberAgent.GetIdentity`: issues requests at a
//! fixed rate (default 1,000/s) for a fixed time over a few HTTP/2 connections, and
//! prints latency percentiles as one JSON line. Open loop: a request is started on
//! schedule whether or not earlier ones have finished, so a slow server shows up as
//! latency instead of silently lowering the rate (no coordinated omission).
//!
//! ```sh
//! cargo run --release --example grpc_load -- --target http://127.0.0.1:9465 --rate 1000 --seconds 10
//! ```
//!
//! Loopback only: the bench script points it at an agent it started itself.

use std::time::{Duration, Instant};

use clap::Parser;
use tokio::sync::mpsc;
use tonic::transport::{Channel, Endpoint};

mod pb {
    #![allow(clippy::all, clippy::pedantic)]
    tonic::include_proto!("etcd.agent.v1");
}

/// GetIdentity at a fixed rate; latency percentiles as JSON.
#[derive(Debug, Parser)]
struct Args {
    /// The agent's gRPC URL (loopback).
    #[arg(long, default_value = "http://127.0.0.1:9465")]
    target: String,
    /// Requests per second.
    #[arg(long, default_value_t = 1000)]
    rate: u32,
    /// How long to send, in seconds.
    #[arg(long, default_value_t = 10)]
    seconds: u64,
    /// HTTP/2 connections to spread the requests over.
    #[arg(long, default_value_t = 4)]
    connections: usize,
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1].as_secs_f64() * 1000.0
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    if !(args.target.starts_with("http://127.") || args.target.starts_with("http://localhost")) {
        return Err("grpc_load only targets loopback addresses".into());
    }
    let mut clients = Vec::new();
    for _ in 0..args.connections.max(1) {
        let channel: Channel = Endpoint::from_shared(args.target.clone())?
            .tcp_nodelay(true)
            .timeout(Duration::from_secs(5))
            .connect()
            .await?;
        clients.push(pb::member_agent_client::MemberAgentClient::new(channel));
    }
    // Warm up each connection.
    for client in &mut clients {
        client.get_identity(pb::GetIdentityRequest {}).await?;
    }

    let total = u64::from(args.rate) * args.seconds;
    let period = Duration::from_secs(1) / args.rate.max(1);
    let (tx, mut rx) = mpsc::unbounded_channel::<Result<Duration, String>>();
    let started = Instant::now();
    let mut ticker = tokio::time::interval(period);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    for i in 0..total {
        ticker.tick().await;
        let mut client = clients[(i as usize) % clients.len()].clone();
        let tx = tx.clone();
        tokio::spawn(async move {
            let t = Instant::now();
            let r = client
                .get_identity(pb::GetIdentityRequest {})
                .await
                .map(|_| t.elapsed())
                .map_err(|s| s.code().to_string());
            let _ = tx.send(r);
        });
    }
    let send_secs = started.elapsed().as_secs_f64();
    drop(tx);
    let mut latencies = Vec::with_capacity(total as usize);
    let mut errors = 0u64;
    while let Some(r) = rx.recv().await {
        match r {
            Ok(d) => latencies.push(d),
            Err(_) => errors += 1,
        }
    }
    latencies.sort();
    println!(
        "{{\"requests\":{total},\"errors\":{errors},\"achieved_rate\":{:.1},\"p50_ms\":{:.3},\"p90_ms\":{:.3},\"p99_ms\":{:.3},\"max_ms\":{:.3}}}",
        total as f64 / send_secs,
        percentile(&latencies, 50.0),
        percentile(&latencies, 90.0),
        percentile(&latencies, 99.0),
        latencies.last().map_or(f64::NAN, |d| d.as_secs_f64() * 1000.0),
    );
    Ok(())
}
