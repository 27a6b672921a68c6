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


def restart_to_healthy(etcd, data, name, timeout=120.0):
    """Starts etcd on `data` and returns the seconds until /health says true;
    stops it (SIGTERM, then SIGKILL) by its PID whatever happens."""
    client, peer = free_port(), free_port()
    argv = [
        etcd, "--name", name, "--data-dir", data,
        "--listen-client-urls", f"http://127.0.0.1:{client}",
        "--advertise-client-urls", f"http://127.0.0.1:{client}",
        "--listen-peer-urls", f"http://127.0.0.1:{peer}",
        "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
        "--quota-backend-bytes", "8589934592", "--log-level", "error",
    ]
    t0 = time.perf_counter()
    p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
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
    finally:
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


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
                      "--verdict-file", os.path.join(tempfile.gettempdir(), f"bench-verdict-{os.getpid()}.json"),
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

    ratios = {
        "inspect_vs_raw_wal": med["inspect"] / med["raw WAL"],
        "inspect_1core_vs_raw_wal": med["inspect, 1 core"] / med["raw WAL"],
        "hash_vs_raw_all": med["inspect --hash"] / med["raw WAL+snap+db"],
        "hash_1core_vs_raw_all": med["--hash, 1 core"] / med["raw WAL+snap+db"],
        "hash_vs_etcdutl": med["inspect --hash"] / med["etcdutl status"],
        "preflight_vs_restart": med["preflight"] / med["etcd restart-to-healthy"],
        # The least a preflight that verifies every WAL record can take: the raw
        # read of the WAL alone, split over every core, against the restart.
        "raw_wal_per_core_vs_restart": med["raw WAL"] / (os.cpu_count() or 1) / med["etcd restart-to-healthy"],
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
