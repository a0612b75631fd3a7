#!/usr/bin/env python3
"""A failover with N delayed messages waiting, as a client sees it (issue 38): a three-node
Hourglass cluster on one etcd, N persistent delayed messages far ahead (`hourglass-perf
scale-fill`; with `--ready`, N persistent ready messages in one durable queue instead), then tracers due 0.2-6 s after the fault (a delayed exchange, `x-delay-until`),
then `kill -9` of the leader. Reports, from the kill: the first confirmed publish through a
survivor, the survivor's exact delayed count, and each tracer's lateness (received minus due:
p50, p99, max; early ones and missing ones counted).

usage: scripts/bench_failover.py N [--tracers 60] [--reps 1] [--ready]
needs: target/release/{hourglass,hourglass-perf}, etcd (Debian etcd-server), pika.
"""
import argparse
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pika

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_cluster import PERF, api, start_etcd, start_hourglass_cluster  # noqa: E402

TRACER_EXCHANGE = "tracers-x"
TRACER_QUEUE = "tracers"


def perf(port, *args, timeout=900):
    return subprocess.run([str(PERF), "--url", f"amqp://guest:guest@127.0.0.1:{port}/%2f", *args],
                          capture_output=True, text=True, timeout=timeout)


def publish_tracers(port, count, first_due_ms, step_ms):
    """Declares the tracers' delayed exchange and queue, and publishes `count` tracers due every
    `step_ms` from `first_due_ms` (epoch ms), each confirmed."""
    connection = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port))
    channel = connection.channel()
    channel.confirm_delivery()
    channel.exchange_declare(TRACER_EXCHANGE, "x-delayed-message", durable=True,
                             arguments={"x-delayed-type": "direct"})
    channel.queue_declare(TRACER_QUEUE, durable=True)
    channel.queue_bind(TRACER_QUEUE, TRACER_EXCHANGE, TRACER_QUEUE)
    for i in range(count):
        due = first_due_ms + i * step_ms
        properties = pika.BasicProperties(delivery_mode=2, headers={"x-delay-until": due})
        channel.basic_publish(TRACER_EXCHANGE, TRACER_QUEUE, str(due).encode(), properties)
    connection.close()


def collect_tracers(ports, count, received, deadline):
    """Consumes the tracers through any survivor until `count` came or `deadline` (monotonic);
    appends (due ms, received ms) to `received`."""
    seen = set()
    while len(seen) < count and time.monotonic() < deadline:
        for port in ports:
            try:
                connection = pika.BlockingConnection(
                    pika.ConnectionParameters("127.0.0.1", port, socket_timeout=2, connection_attempts=1))
                channel = connection.channel()
                for _method, _properties, body in channel.consume(TRACER_QUEUE, auto_ack=True,
                                                                   inactivity_timeout=0.5):
                    if body is not None and body not in seen:
                        seen.add(body)
                        received.append((int(body), time.time() * 1000))
                    if len(seen) >= count or time.monotonic() > deadline:
                        break
                connection.close()
            except Exception:  # noqa: BLE001 - a survivor not serving yet: try the next
                time.sleep(0.05)
            if len(seen) >= count:
                return


def fill(port, n, ready):
    """N persistent messages, delayed far ahead or (`ready`) ready; returns the queue's HTTP path
    and the count that shows them all."""
    if ready:
        filled = perf(port, "throughput", "-P", "1", "-C", "0", "--count", str(n), "--duration-s", "3600",
                      "--confirm", "1000", "--persistent", "--durable", "--queue-name", "scale",
                      "--keep-queues", timeout=3600)
        where = ("/api/queues/%2f/scale-0", "messages_ready")
    else:
        filled = perf(port, "scale-fill", "--queue", "scale", "--count", str(n))
        where = ("/api/queues/%2f/scale", "messages_delayed")
    if filled.returncode != 0:
        sys.exit(f"the fill failed: {filled.stderr[-500:]}")
    return where


def one_run(n, tracers, ready):
    tmp = Path(tempfile.mkdtemp(prefix="hg-failover-"))
    etcd, url = start_etcd(tmp)
    nodes, leader = start_hourglass_cluster(tmp, url)
    try:
        started = time.time()
        queue_path, count_field = fill(leader["amqp"], n, ready)
        print(f"  filled {n} in {time.time() - started:.1f} s", flush=True)
        # Tracers due from 0.2 s after the kill (which comes about 1 s after they are sent).
        first_due = int(time.time() * 1000) + 1_200
        publish_tracers(leader["amqp"], tracers, first_due, 100)
        while not all(node["in_sync"] for node in api(leader["http"], "/api/cluster")["nodes"]):
            time.sleep(0.1)
        time.sleep(max(0.0, (first_due - 200) / 1000 - time.time()))
        survivors = [node for node in nodes if node is not leader]
        leader["proc"].kill()
        killed = time.monotonic()
        received = []
        collector = threading.Thread(target=collect_tracers,
                                     args=([s["amqp"] for s in survivors], tracers, received, killed + 120))
        collector.start()
        confirmed = counted = None
        while (confirmed is None or counted is None) and time.monotonic() - killed < 120:
            for node in survivors:
                if confirmed is None:
                    try:
                        probe = perf(node["amqp"], "throughput", "-P", "1", "-C", "0", "--count", "1",
                                     "--duration-s", "5", "--confirm", "1", "--persistent", "--durable",
                                     "--queue-name", "probe", "--keep-queues", timeout=5)
                        if probe.returncode == 0 and '"msg_per_s"' in probe.stdout:
                            confirmed = time.monotonic() - killed
                    except subprocess.TimeoutExpired:
                        pass
                if counted is None:
                    try:
                        if api(node["http"], queue_path).get(count_field) == n:
                            counted = time.monotonic() - killed
                    except Exception:  # noqa: BLE001 - not serving yet
                        pass
            time.sleep(0.05)
        collector.join()
        late = sorted(got - due for due, got in received)
        early = sum(1 for lateness in late if lateness < 0)
        at = lambda q: late[min(len(late) - 1, int(q * (len(late) - 1)))] if late else float("nan")  # noqa: E731
        print(f"  kill -9 of the leader: first confirm through a survivor {confirmed:.2f} s, "
              f"exact count {counted:.2f} s; tracers due 0.2-{0.2 + (tracers - 1) * 0.1:.1f} s "
              f"after the kill: {len(late)}/{tracers} received, {early} early, late p50 {at(0.5):.0f} ms, "
              f"p99 {at(0.99):.0f} ms, max {at(1.0):.0f} ms", flush=True)
    finally:
        for node in nodes:
            node["proc"].kill()
        etcd.kill()
        subprocess.run(["rm", "-rf", str(tmp)], check=False)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("n", type=int)
    parser.add_argument("--tracers", type=int, default=60)
    parser.add_argument("--reps", type=int, default=1)
    parser.add_argument("--ready", action="store_true", help="a ready backlog instead of a delayed one")
    args = parser.parse_args()
    for rep in range(args.reps):
        print(f"N={args.n} run {rep + 1}", flush=True)
        one_run(args.n, args.tracers, args.ready)


if __name__ == "__main__":
    main()
