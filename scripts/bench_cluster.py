#!/usr/bin/env python3
"""Persistent confirmed publishing through a three-node Hourglass cluster, side by side with the
single node and with a three-node RabbitMQ 3.10 cluster using quorum queues, on this machine.

CPU per message counts every node of a cluster (utime + stime from /proc), not only the one the
load tool talks to. Prints a Markdown table for docs/benchmarks.md ("Cluster").

With --declares N it measures durable declares instead: N durable queues, each declared and bound
one at a time (`hourglass-perf declares`), whose -oks wait until a majority holds the definition.

usage: scripts/bench_cluster.py [--seconds 10] [--reps 2] [--skip-rabbitmq] [--declares N]
needs: target/release/{hourglass,hourglass-perf}, etcd (Debian etcd-server), the reference
RabbitMQ (RABBITMQ_REF, see bench.py rabbitmq_ref()).
"""
import argparse
import base64
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench import HOURGLASS, PERF, free_port, listening_pid, rabbitmq_ref, wait_for_port  # noqa: E402

CLK_TCK = os.sysconf("SC_CLK_TCK")
RMQ_PORTS = [5681, 5682, 5683]
AUTH = "Basic " + base64.b64encode(b"guest:guest").decode()


def cpu_s(pid):
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def api(port, path):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", headers={"Authorization": AUTH})
    with urllib.request.urlopen(req, timeout=3) as resp:
        return json.loads(resp.read())


def start_etcd(tmp):
    client, peer = free_port(), free_port()
    url = f"http://127.0.0.1:{client}"
    proc = subprocess.Popen(
        ["etcd", "--data-dir", str(tmp / "etcd"), "--listen-client-urls", url, "--advertise-client-urls", url,
         "--listen-peer-urls", f"http://127.0.0.1:{peer}", "--initial-advertise-peer-urls",
         f"http://127.0.0.1:{peer}", "--initial-cluster", f"default=http://127.0.0.1:{peer}", "--log-level", "error"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    if not wait_for_port(client):
        sys.exit("etcd did not start")
    return proc, url


def start_node(tmp, name, extra):
    amqp, http = free_port(), free_port()
    args = [str(HOURGLASS), "--bind", "127.0.0.1", "--amqp-port", str(amqp), "--http-port", str(http),
            "--metrics-port", str(free_port()), "--data-dir", str(tmp / name)] + extra
    log = open(tmp / f"{name}.log", "a")
    proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT,
                            env={**os.environ, "RUST_LOG": "warn", "NO_COLOR": "1"})
    return {"proc": proc, "amqp": amqp, "http": http, "name": name}


def start_hourglass_cluster(tmp, etcd_url):
    cluster = f"bench{free_port()}"
    # The shared secret replication connections prove (docs/clustering.md "Security model").
    secret = tmp / "cluster.secret"
    secret.write_text(os.urandom(32).hex() + "\n")
    secret.chmod(0o600)
    nodes = [start_node(tmp, f"n{i}", ["--etcd-endpoints", etcd_url, "--cluster-name", cluster, "--node-name",
                                       f"n{i}", "--replication-port", str(free_port()),
                                       "--cluster-secret-file", str(secret)]) for i in (1, 2, 3)]
    deadline = time.time() + 60
    while time.time() < deadline:
        try:
            view = api(nodes[0]["http"], "/api/cluster")
            if view["leader"] and all(n["in_sync"] for n in view["nodes"]) and len(view["nodes"]) == 3:
                leader = next(n for n in nodes if n["name"] == view["leader"])
                return nodes, leader
        except Exception:
            pass
        time.sleep(0.2)
    sys.exit("the Hourglass cluster did not get in sync")


def rmq(port, *cmd, check=True):
    env = {**os.environ, "RMQ_PORT": str(port), "RMQ_BASE": f"/tmp/rmq-cluster-{port}"}
    return subprocess.run([str(rabbitmq_ref()), *cmd], env=env, check=check, timeout=600, capture_output=True, text=True)


def ctl(port, *args):
    env = {**os.environ, "ERL_EPMD_ADDRESS": "127.0.0.1",
           "RABBITMQ_CTL_ERL_ARGS": "-kernel inet_dist_use_interface {127,0,0,1}"}
    return subprocess.run(["rabbitmqctl", "-n", f"ref{port}@localhost", *args], env=env, check=True,
                          timeout=120, capture_output=True, text=True)


def start_rabbitmq_cluster():
    for port in RMQ_PORTS:
        shutil.rmtree(f"/tmp/rmq-cluster-{port}", ignore_errors=True)
        rmq(port, "start")
    for port in RMQ_PORTS[1:]:
        ctl(port, "stop_app")
        ctl(port, "join_cluster", f"ref{RMQ_PORTS[0]}@localhost")
        ctl(port, "start_app")
    status = ctl(RMQ_PORTS[0], "cluster_status").stdout
    print("  rabbitmq cluster:", " ".join(l.strip() for l in status.splitlines() if "ref568" in l)[:200])
    return [listening_pid(p) for p in RMQ_PORTS]


def stop_rabbitmq_cluster():
    for port in RMQ_PORTS:
        rmq(port, "stop", check=False)


def run_perf(port, pids, label, args, timeout):
    """Runs the load tool against `port`; its result fields and the CPU seconds every process in
    `pids` spent meanwhile, or None (said why) when it failed."""
    before = sum(cpu_s(p) for p in pids)
    cmd = [str(PERF), "--url", f"amqp://guest:guest@127.0.0.1:{port}/%2f", "--broker-pid", str(pids[0]),
           "--label", label] + args
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    after = sum(cpu_s(p) for p in pids)
    line = next((l for l in done.stdout.splitlines() if l.startswith("{")), None)
    if done.returncode != 0 or line is None:
        print(f"  {label}: FAILED {done.stderr[-500:]}")
        return None
    return json.loads(line)["results"], after - before


def perf(port, pids, label, args):
    ran = run_perf(port, pids, label, args, timeout=300)
    if ran is None:
        return None
    results, cpu = ran
    ops = max(results["published"], 1)
    figures = {"msg/s": results["msg_per_s"], "cpu_us": cpu * 1e6 / ops, "published": ops}
    print(f"  {label}: {figures['msg/s']:,.0f} msg/s, {figures['cpu_us']:.2f} µs CPU/msg (all nodes)", flush=True)
    return figures


def perf_declares(port, pids, label, queues):
    """Durable declare + bind, one at a time; CPU over every node, the queues left in place."""
    args = ["declares", "--queues", str(queues), "--step", str(max(queues // 5, 1)), "--keep-queues"]
    ran = run_perf(port, pids, label, args, timeout=900)
    if ran is None:
        return None
    results, cpu = ran
    n = max(results["declared"], 1)
    figures = {"per_s": n / results["declare_s"], "cpu_us": cpu * 1e6 / n}
    print(f"  {label}: {figures['per_s']:,.0f} declare+bind/s, {figures['cpu_us']:.0f} µs CPU each (all nodes)",
          flush=True)
    return figures


def on_single_node(tmp, name, measure):
    """`measure(port, pids)` against a fresh single node, stopped afterwards."""
    single = start_node(tmp, name, [])
    wait_for_port(single["amqp"])
    try:
        return measure(single["amqp"], [single["proc"].pid])
    finally:
        single["proc"].terminate()
        single["proc"].wait()


def on_hourglass_cluster(run, etcd_url, measure):
    """`measure(port, pids)` against the leader of a fresh three-node cluster (pids: leader
    first, then the followers), stopped afterwards."""
    run.mkdir()
    nodes, leader = start_hourglass_cluster(run, etcd_url)
    try:
        pids = [leader["proc"].pid] + [n["proc"].pid for n in nodes if n is not leader]
        return measure(leader["amqp"], pids)
    finally:
        for n in nodes:
            n["proc"].terminate()
        for n in nodes:
            n["proc"].wait()


def bench_declares(opts):
    rows = []
    tmp = Path(tempfile.mkdtemp(prefix="hg-bench-declares-"))
    etcd, etcd_url = start_etcd(tmp)
    declares = lambda label: lambda port, pids: perf_declares(port, pids, label, opts.declares)  # noqa: E731
    try:
        rows.append(("Hourglass, 1 node", on_single_node(tmp, "single", declares("hourglass-1"))))
        rows.append(("Hourglass, 3 nodes", on_hourglass_cluster(tmp / "cluster", etcd_url, declares("hourglass-3"))))
        if not opts.skip_rabbitmq:
            pids = start_rabbitmq_cluster()
            try:
                rows.append(("RabbitMQ 3.10, 3 nodes (classic queues)", declares("rabbitmq-3")(RMQ_PORTS[0], pids)))
            finally:
                stop_rabbitmq_cluster()
    finally:
        etcd.terminate()
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"\n| broker | durable declare + bind /s ({opts.declares} queues) | CPU µs each, all nodes |")
    print("|---|---|---|")
    for broker, r in rows:
        print(f"| {broker} | {r['per_s']:,.0f} | {r['cpu_us']:.0f} |" if r else f"| {broker} | failed | failed |")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--skip-rabbitmq", action="store_true")
    parser.add_argument("--declares", type=int, default=0)
    opts = parser.parse_args()
    if opts.declares:
        return bench_declares(opts)
    flows = {
        "1 producer, 16 B": ["-P", "1", "-C", "0", "-Q", "1"],
        "4 producers, 16 B": ["-P", "4", "-C", "0", "-Q", "4"],
        "4 producers, 1 KiB": ["-P", "4", "-C", "0", "-Q", "4", "--size", "1024"],
    }
    common = ["--confirm", "100", "--persistent", "--durable", "--duration-s", str(opts.seconds)]
    results = {}
    runs = iter(range(1_000_000))
    tmp = Path(tempfile.mkdtemp(prefix="hg-bench-cluster-"))
    etcd, etcd_url = start_etcd(tmp)
    try:
        for rep in range(opts.reps):
            for flow, args in flows.items():
                size = ["--size", "16"] if "--size" not in args else []
                flow_args = ["throughput"] + args + size + common
                r = on_single_node(tmp, f"single{next(runs)}",
                                   lambda port, pids: perf(port, pids, "hourglass-1", flow_args))
                results.setdefault((flow, "Hourglass, 1 node"), []).append(r)
                r = on_hourglass_cluster(tmp / f"cluster{next(runs)}", etcd_url,
                                         lambda port, pids: perf(port, pids, "hourglass-3", flow_args))
                results.setdefault((flow, "Hourglass, 3 nodes"), []).append(r)
        if not opts.skip_rabbitmq:
            pids = start_rabbitmq_cluster()
            try:
                for rep in range(opts.reps):
                    for flow, args in flows.items():
                        size = ["--size", "16"] if "--size" not in args else []
                        r = perf(RMQ_PORTS[0], pids, "rabbitmq-3-quorum",
                                 ["throughput"] + args + size + common + ["--queue-type", "quorum"])
                        results.setdefault((flow, "RabbitMQ 3.10, 3 nodes, quorum"), []).append(r)
            finally:
                stop_rabbitmq_cluster()
    finally:
        etcd.terminate()
        shutil.rmtree(tmp, ignore_errors=True)
    print("\n| flow | broker | msg/s (median) | CPU µs/msg, all nodes (median) | runs |")
    print("|---|---|---|---|---|")
    for (flow, broker), runs in results.items():
        ok = [r for r in runs if r]
        if not ok:
            print(f"| {flow} | {broker} | failed | failed | 0 |")
            continue
        med = lambda key: sorted(r[key] for r in ok)[len(ok) // 2]
        print(f"| {flow} | {broker} | {med('msg/s'):,.0f} | {med('cpu_us'):.2f} | {len(ok)} |")


if __name__ == "__main__":
    main()
