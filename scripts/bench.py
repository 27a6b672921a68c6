#!/usr/bin/env python3
"""Times one data dir for scripts/bench and prints one JSON line on stdout
(a table on stderr). See scripts/bench for what is measured and why."""

import argparse
import glob
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request


def run_once(argv, env=None):
    """Runs argv to completion; returns (seconds, peak RSS KiB, exit code)."""
    t0 = time.perf_counter()
    p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    _, status, usage = os.wait4(p.pid, 0)
    took = time.perf_counter() - t0
    p.returncode = os.waitstatus_to_exitcode(status)
    return took, usage.ru_maxrss, p.returncode


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_etcd(etcd, name, data, peer_url, client, extra=()):
    """Starts etcd (client on loopback port `client`); the caller stops it."""
    argv = [
        etcd, "--name", name, "--data-dir", data,
        "--listen-client-urls", f"http://127.0.0.1:{client}",
        "--advertise-client-urls", f"http://127.0.0.1:{client}",
        "--listen-peer-urls", peer_url,
        "--initial-advertise-peer-urls", peer_url,
        # The bench dir was written with every WAL segment kept; a start with
        # etcd's default (--max-wals=5) would purge it to 5, and every later
        # start would be of a smaller directory than the one preflight read.
        "--quota-backend-bytes", "8589934592", "--max-wals=0", "--log-level", "error", *extra,
    ]
    return subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def wait_healthy(p, client, t0, timeout=120.0):
    """Seconds from t0 until etcd's /health says true."""
    while True:
        if p.poll() is not None:
            sys.exit(f"bench: etcd exited ({p.returncode}) before it was healthy")
        if time.perf_counter() - t0 > timeout:
            sys.exit("bench: etcd not healthy in time")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{client}/health", timeout=1) as r:
                if json.load(r).get("health") == "true":
                    return time.perf_counter() - t0
        except OSError:
            pass
        time.sleep(0.01)


def stop(p):
    """SIGTERM, then SIGKILL, by the PID the bench started."""
    if p.poll() is None:
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def restart_to_healthy(etcd, data, name, peer_url=None):
    """Starts etcd on `data` and returns the seconds until /health says true;
    stops it by its PID whatever happens."""
    client = free_port()
    peer_url = peer_url or f"http://127.0.0.1:{free_port()}"
    t0 = time.perf_counter()
    p = start_etcd(etcd, name, data, peer_url, client)
    try:
        return wait_healthy(p, client, t0)
    finally:
        stop(p)


def with_peers(etcd, etcdctl, data, name, peer_url, scratch):
    """Makes the directory's member one of three: starts it (on a copy) on its
    own peer URL, adds two members, which receive the data from it, and stops it,
    leaving the two with quorum. Returns (the copy, the peers' client URLs, the
    running peers)."""
    copy = os.path.join(scratch, name)
    shutil.copytree(data, copy, symlinks=True)
    peers, endpoints = [], []
    client0 = free_port()
    p0 = start_etcd(etcd, name, copy, peer_url, client0)
    try:
        wait_healthy(p0, client0, time.perf_counter())
        cluster = f"{name}={peer_url}"
        for i in (1, 2):
            pname, purl, pclient = f"bench-peer{i}", f"http://127.0.0.1:{free_port()}", free_port()
            add = [etcdctl, "--endpoints", f"http://127.0.0.1:{client0}", "member", "add", pname,
                   f"--peer-urls={purl}"]
            # etcd refuses a member add ("unhealthy cluster") until the member
            # added before has been connected for a while: retry, bounded.
            deadline = time.perf_counter() + 60
            while True:
                r = subprocess.run(add, capture_output=True, text=True, timeout=30)
                if r.returncode == 0:
                    break
                if time.perf_counter() > deadline:
                    sys.exit(f"bench: member add {pname} failed: {r.stderr[-500:]}")
                time.sleep(1)
            cluster += f",{pname}={purl}"
            p = start_etcd(etcd, pname, os.path.join(scratch, pname), purl, pclient,
                           ["--initial-cluster", cluster, "--initial-cluster-state", "existing",
                            "--initial-cluster-token", "inspect-bench"])
            peers.append(p)
            endpoints.append(f"http://127.0.0.1:{pclient}")
            wait_healthy(p, pclient, time.perf_counter(), timeout=300.0)
    except BaseException:
        for p in peers:
            stop(p)
        raise
    finally:
        stop(p0)
    return copy, endpoints, peers


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--agent", required=True)
    ap.add_argument("--etcd-dir", required=True)
    ap.add_argument("--line", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--status", required=True)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()

    etcd = os.path.join(a.etcd_dir, "etcd")
    etcdutl = os.path.join(a.etcd_dir, "etcdutl")
    version = subprocess.run([etcd, "--version"], capture_output=True, text=True).stdout
    release = next(l.split(":", 1)[1].strip() for l in version.splitlines() if l.startswith("etcd Version:"))
    wal = sorted(glob.glob(os.path.join(a.data, "member/wal/*.wal")))
    snaps = sorted(glob.glob(os.path.join(a.data, "member/snap/*.snap")))
    db = os.path.join(a.data, "member/snap/db")
    wal_bytes = sum(os.path.getsize(f) for f in wal)
    db_bytes = os.path.getsize(db)

    # Correctness first: the same answers as etcd and that line's etcdutl.
    report = json.loads(subprocess.run([a.agent, "inspect", "--data-dir", a.data, "--hash", "-o", "json"],
                                       capture_output=True, text=True).stdout)
    oracle = json.loads(subprocess.run([etcdutl, "snapshot", "status", db, "-w", "json"],
                                       capture_output=True, text=True).stdout)
    status = json.load(open(a.status))
    checks = {
        "state": (report["state"], "initialized"),
        "member_id": (report["member_id"], "%016x" % status["header"]["member_id"]),
        "commit": (report["hard_state"]["commit"], status["raftIndex"]),
        "hash": (report["kv_hash"]["hash"], oracle["hash"]),
        "revision": (report["kv_hash"]["revision"], oracle["revision"]),
        "keys": (report["kv_hash"]["total_key"], oracle["totalKey"]),
    }
    bad = {k: v for k, v in checks.items() if v[0] != v[1]}
    if bad:
        sys.exit(f"bench: inspect disagrees with etcd {release}/etcdutl: {bad!r}")
    name = report.get("self_name") or "m0"
    peer = (report.get("self_peer_urls") or ["http://127.0.0.1:2380"])[0]

    dd = lambda files: ["bash", "-c", " ".join(f"dd if={f} of=/dev/null bs=1M status=none;" for f in files)]
    # The token the bench test formed the cluster with: preflight checks that the
    # directory's IDs derive from it (a volume of another cluster is refused).
    env = dict(os.environ, AGENT_KUBE="false", ETCD_VERSION=release, AGENT_LOG="error",
               ETCD_INITIAL_CLUSTER_TOKEN="inspect-bench")
    one = ["taskset", "-c", "0"]
    cmds = {
        "raw WAL": dd(wal),
        "raw WAL+snap+db": dd(wal + snaps + [db]),
        "inspect": [a.agent, "inspect", "--data-dir", a.data, "-o", "json"],
        "inspect, 1 core": one + [a.agent, "inspect", "--data-dir", a.data, "-o", "json"],
        "inspect --hash": [a.agent, "inspect", "--data-dir", a.data, "--hash", "-o", "json"],
        "--hash, 1 core": one + [a.agent, "inspect", "--data-dir", a.data, "--hash", "-o", "json"],
        "etcdutl status": [etcdutl, "snapshot", "status", db, "-w", "json"],
        "preflight": [a.agent, "preflight", "--data-dir", a.data, "--name", name, "--peer-urls", peer,
                      "--verdict-file", os.path.join(os.path.dirname(a.data), "bench-verdict.json"),
                      "-o", "json"],
    }
    for argv in cmds.values():  # warm the page cache
        run_once(argv, env)
    times = {k: [] for k in cmds}
    rss = []
    for _ in range(a.rounds):
        for k, argv in cmds.items():
            for _ in range(a.runs):
                took, peak, code = run_once(argv, env)
                if code != 0:
                    sys.exit(f"bench: {k} exited {code}")
                times[k].append(took)
                if k == "inspect --hash":
                    rss.append(peak)
    med = {k: statistics.median(v) for k, v in times.items()}

    # etcd's own restart, on a copy (a start writes to its dir).
    scratch = tempfile.mkdtemp(prefix="bench-restart-", dir=os.path.dirname(a.data))
    try:
        copy = os.path.join(scratch, "data")
        shutil.copytree(a.data, copy, symlinks=True)
        restarts = [restart_to_healthy(etcd, copy, name) for _ in range(max(3, a.rounds))]
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    med["etcd restart-to-healthy"] = statistics.median(restarts)

    # The goal's case: the member is one of three and its two peers are up while
    # preflight runs (it asks them) and while etcd restarts (it rejoins them).
    scratch = tempfile.mkdtemp(prefix="bench-peers-", dir=os.path.dirname(a.data))
    peers = []
    try:
        copy, endpoints, peers = with_peers(etcd, os.path.join(a.etcd_dir, "etcdctl"), a.data, name, peer, scratch)
        kept = len(glob.glob(os.path.join(copy, "member/wal/*.wal")))
        if kept < len(wal):
            sys.exit(f"bench: the member's WAL shrank to {kept} segments (of {len(wal)}) while it joined")
        penv = dict(env, ETCD_PEER_ENDPOINTS=",".join(endpoints))
        argv = [a.agent, "preflight", "--data-dir", copy, "--name", name, "--peer-urls", peer,
                "--verdict-file", os.path.join(scratch, "verdict.json"), "-o", "json"]
        out = subprocess.run(argv, env=penv, capture_output=True, text=True, timeout=120)
        doc = json.loads(out.stdout)
        asked = [e for e in doc.get("evidence", []) if e.get("source") == "etcd"]
        if out.returncode != 0 or doc.get("verdict") != "start" or not any(e.get("answered") for e in asked):
            sys.exit(f"bench: preflight with peers did not start on the peers' word: {out.stdout[:2000]}")
        run_once(argv, penv)
        times["preflight, peers up"] = []
        for _ in range(a.rounds * a.runs):
            took, _, code = run_once(argv, penv)
            if code != 0:
                sys.exit(f"bench: preflight with peers exited {code}")
            times["preflight, peers up"].append(took)
        med["preflight, peers up"] = statistics.median(times["preflight, peers up"])
        rejoins = [restart_to_healthy(etcd, copy, name, peer_url=peer) for _ in range(max(3, a.rounds))]
        med["etcd restart, peers up"] = statistics.median(rejoins)
    finally:
        for p in peers:
            stop(p)
        shutil.rmtree(scratch, ignore_errors=True)

    ratios = {
        "inspect_vs_raw_wal": med["inspect"] / med["raw WAL"],
        "inspect_1core_vs_raw_wal": med["inspect, 1 core"] / med["raw WAL"],
        "hash_vs_raw_all": med["inspect --hash"] / med["raw WAL+snap+db"],
        "hash_1core_vs_raw_all": med["--hash, 1 core"] / med["raw WAL+snap+db"],
        "hash_vs_etcdutl": med["inspect --hash"] / med["etcdutl status"],
        "preflight_vs_restart": med["preflight, peers up"] / med["etcd restart, peers up"],
        "preflight_alone_vs_restart_alone": med["preflight"] / med["etcd restart-to-healthy"],
        # The least a preflight that verifies every WAL record can take: the raw
        # read of the WAL alone, split over every core, against the restart.
        "raw_wal_per_core_vs_restart": med["raw WAL"] / (os.cpu_count() or 1) / med["etcd restart, peers up"],
    }
    peak = max(rss)
    goals = {
        "inspect_vs_raw_wal": ratios["inspect_vs_raw_wal"] <= 1.3,
        "hash_vs_raw_all": ratios["hash_vs_raw_all"] <= 1.2,
        "hash_vs_etcdutl": ratios["hash_vs_etcdutl"] <= 0.8,
        "preflight_vs_restart": ratios["preflight_vs_restart"] <= 0.02,
        "hash_peak_rss": peak <= 32 * 1024,
    }
    gib = lambda b: b / 2**30
    print(f"\netcd {release}: WAL {gib(wal_bytes):.2f} GiB in {len(wal)} segments, {len(snaps)} .snap, "
          f"db {gib(db_bytes):.2f} GiB; medians of {a.rounds} interleaved rounds x {a.runs} warm runs, "
          f"{os.cpu_count()} cores", file=sys.stderr)
    for k, t in med.items():
        print(f"  {k:<24}{t:>9.3f}s", file=sys.stderr)
    for k, r in ratios.items():
        goal = {"inspect_vs_raw_wal": "<= 1.3", "hash_vs_raw_all": "<= 1.2", "hash_vs_etcdutl": "<= 0.8",
                "preflight_vs_restart": "<= 0.02"}.get(k, "reported")
        print(f"  {k:<26}{r:>7.3f}   goal {goal}", file=sys.stderr)
    print(f"  inspect --hash peak RSS  {peak / 1024:.1f} MiB   goal <= 32 MiB", file=sys.stderr)
    print(json.dumps({
        "etcd": release, "wal_bytes": wal_bytes, "wal_segments": len(wal), "db_bytes": db_bytes,
        "medians_s": med, "ratios": ratios, "hash_peak_rss_kib": peak,
        "goals": goals, "goals_met": all(goals.values()),
    }))


if __name__ == "__main__":
    main()
