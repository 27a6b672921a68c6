//! Free loopback ports for etcd members.
//!
//! Ports come from *below* the kernel's ephemeral range rather than from
//! `bind(127.0.0.1:0)`: a port handed out by `bind(0)` is an ephemeral port, and
//! once its member is killed the kernel may give it to any outgoing connection
//! (peers reconnect to a dead member several times a second), so restarting that
//! member with its frozen flags would fail with EADDRINUSE. Each candidate is still
//! proven free by binding it, and a port is never handed out twice in one process;
//! a clash with another test process is left to the caller's EADDRINUSE retry.

use std::collections::HashSet;
use std::net::TcpListener;
use std::ops::Range;
use std::sync::{Mutex, OnceLock};

struct Pool {
    range: Range<u16>,
    cursor: u32,
    taken: HashSet<u16>,
}

fn pool() -> &'static Mutex<Pool> {
    static POOL: OnceLock<Mutex<Pool>> = OnceLock::new();
    POOL.get_or_init(|| {
        let range = candidate_range();
        // Start somewhere different in each test process to make clashes between
        // concurrently running test binaries unlikely.
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let seed = nanos ^ std::process::id().wrapping_mul(2_654_435_761);
        Mutex::new(Pool {
            cursor: seed % u32::from(range.end - range.start),
            range,
            taken: HashSet::new(),
        })
    })
}

/// Ports between 10000 and the start of the ephemeral range (32768 by default).
fn candidate_range() -> Range<u16> {
    let ephemeral_low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32768);
    if ephemeral_low > 12000 {
        10000..ephemeral_low
    } else {
        // An unusual ephemeral range: use the ports above it instead.
        let high = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
            .ok()
            .and_then(|s| s.split_whitespace().nth(1)?.parse::<u16>().ok())
            .unwrap_or(60999);
        high.saturating_add(1).max(1024)..65535
    }
}

/// A loopback TCP port that nothing listens on and that this process has not
/// handed out before.
pub fn free_port() -> u16 {
    let mut pool = pool().lock().unwrap_or_else(|e| e.into_inner());
    let span = u32::from(pool.range.end - pool.range.start);
    for _ in 0..span {
        pool.cursor = (pool.cursor + 7919) % span;
        let port = pool.range.start + pool.cursor as u16;
        if pool.taken.contains(&port) {
            continue;
        }
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            pool.taken.insert(port);
            return port;
        }
    }
    panic!("no free loopback port in {:?}", pool.range);
}
