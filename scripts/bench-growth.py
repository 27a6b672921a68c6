#!/usr/bin/env python3
"""Times `inspect` and `preflight` against WAL size and `preflight` against
cluster size for scripts/bench-growth; a table on stderr, one JSON line on
stdout."""

import argparse
import glob
import importlib.util
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

spec = importlib.util.spec_from_file_location("bench", os.path.join(os.path.dirname(__file__), "bench.py"))
bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench)


def median_of(argv, env, runs):
    bench.run_once(argv, env)  # warm the page cache
    times = []
    for _ in range(runs):
        took, _, code = bench.run_once(argv, env)
        if code != 0:
            sys.exit(f"bench-growth: {argv[1]} exited {code}")
        times.append(took)
    return statistics.median(times)


def cluster_of(etcd, etcdctl, data, name, peer, n, scratch):
    """The directory's member made one of `n`: like bench.with_peers, with n-1
    peers. Returns (the copy, the peers' client URLs, the running peers)."""
    copy = os.path.join(scratch, name)
    shutil.copytree(data, copy, symlinks=True)
    peers, endpoints = [], []
    client0 = bench.free_port()
    p0 = bench.start_etcd(etcd, name, copy, peer, client0)
    try:
        bench.wait_healthy(p0, client0, time.perf_counter())
        cluster = f"{name}={peer}"
        for i in range(1, n):
            pname, purl, pclient = f"peer{i}", f"http://127.0.0.1:{bench.free_port()}", bench.free_port()
            add = [etcdctl, "--endpoints", f"http://127.0.0.1:{client0}", "member", "add", pname,
                   f"--peer-urls={purl}"]
            deadline = time.perf_counter() + 120
            while True:
                r = subprocess.run(add, capture_output=True, text=True, timeout=30)
                if r.returncode == 0:
                    break
                if time.perf_counter() > deadline:
                    sys.exit(f"bench-growth: member add {pname} failed: {r.stderr[-500:]}")
                time.sleep(1)
            cluster += f",{pname}={purl}"
            p = bench.start_etcd(etcd, pname, os.path.join(scratch, pname), purl, pclient,
                                 ["--initial-cluster", cluster, "--initial-cluster-state", "existing",
                                  "--initial-cluster-token", "inspect-bench"])
            peers.append(p)
            endpoints.append(f"http://127.0.0.1:{pclient}")
            bench.wait_healthy(p, pclient, time.perf_counter(), timeout=300.0)
    except BaseException:
        for p in peers:
            bench.stop(p)
        raise
    finally:
        bench.stop(p0)
    return copy, endpoints, peers


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--agent", required=True)
    ap.add_argument("--etcd-dir", required=True)
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--members", default="3 5 7")
    ap.add_argument("dirs", nargs="+", help="MIB=DATA_DIR")
    a = ap.parse_args()
    etcd = os.path.join(a.etcd_dir, "etcd")
    etcdctl = os.path.join(a.etcd_dir, "etcdctl")
    env = dict(os.environ, AGENT_KUBE="false", AGENT_LOG="error", ETCD_INITIAL_CLUSTER_TOKEN="inspect-bench",
               ETCD_VERSION=subprocess.run([etcd, "--version"], capture_output=True, text=True)
               .stdout.split("etcd Version:")[1].split()[0])

    by_size = []
    for arg in a.dirs:
        mib, data = arg.split("=", 1)
        wal = sum(os.path.getsize(f) for f in glob.glob(os.path.join(data, "member/wal/*.wal")))
        report = json.loads(subprocess.run([a.agent, "inspect", "--data-dir", data, "-o", "json"],
                                           capture_output=True, text=True, check=True).stdout)
        name, peer = report["self_name"], report["self_peer_urls"][0]
        verdict = os.path.join(os.path.dirname(data), "verdict.json")
        row = {
            "wal_mib": wal / 2**20,
            "inspect_s": median_of([a.agent, "inspect", "--data-dir", data, "-o", "json"], env, a.runs),
            "preflight_s": median_of([a.agent, "preflight", "--data-dir", data, "--name", name, "--peer-urls",
                                      peer, "--verdict-file", verdict, "-o", "json"], env, a.runs),
        }
        by_size.append(row)

    by_members = []
    # The smallest directory: what grows here is the number of peers.
    data = min((arg.split("=", 1) for arg in a.dirs), key=lambda p: float(p[0]))[1]
    report = json.loads(subprocess.run([a.agent, "inspect", "--data-dir", data, "-o", "json"],
                                       capture_output=True, text=True, check=True).stdout)
    name, peer = report["self_name"], report["self_peer_urls"][0]
    for n in [int(x) for x in a.members.split()]:
        scratch = tempfile.mkdtemp(prefix=f"growth-{n}-", dir=os.path.dirname(os.path.dirname(data)))
        peers = []
        try:
            copy, endpoints, peers = cluster_of(etcd, etcdctl, data, name, peer, n, scratch)
            penv = dict(env, ETCD_PEER_ENDPOINTS=",".join(endpoints))
            argv = [a.agent, "preflight", "--data-dir", copy, "--name", name, "--peer-urls", peer,
                    "--verdict-file", os.path.join(scratch, "verdict.json"), "-o", "json"]
            out = subprocess.run(argv, env=penv, capture_output=True, text=True, timeout=120)
            doc = json.loads(out.stdout)
            asked = [e for e in doc.get("evidence", []) if e.get("source") == "etcd"]
            if out.returncode != 0 or not any(e.get("answered") for e in asked):
                sys.exit(f"bench-growth: preflight with {n - 1} peers did not start on their word: "
                         f"{out.stdout[:1500]}")
            by_members.append({"members": n, "preflight_s": median_of(argv, penv, a.runs),
                               "round_trip_s": bench.round_trip(endpoints)})
        finally:
            for p in peers:
                bench.stop(p)
            shutil.rmtree(scratch, ignore_errors=True)

    print(f"\nwarm, medians of {a.runs} runs, {os.cpu_count()} cores, etcd {env['ETCD_VERSION']}", file=sys.stderr)
    print("  WAL MiB   inspect s   MiB/s   preflight s   MiB/s  (alone: no peers, no Kubernetes)",
          file=sys.stderr)
    for r in by_size:
        print(f"  {r['wal_mib']:7.0f}   {r['inspect_s']:9.3f}  {r['wal_mib'] / r['inspect_s']:6.0f}"
              f"   {r['preflight_s']:11.3f}  {r['wal_mib'] / r['preflight_s']:6.0f}", file=sys.stderr)
    print(f"  members   preflight s (peers up, WAL {min(r['wal_mib'] for r in by_size):.0f} MiB)"
          "   one round trip to them all s", file=sys.stderr)
    for r in by_members:
        print(f"  {r['members']:7d}   {r['preflight_s']:11.3f}   {r['round_trip_s']:.4f}", file=sys.stderr)
    print(json.dumps({"by_wal_size": by_size, "by_members": by_members}))


if __name__ == "__main__":
    main()
