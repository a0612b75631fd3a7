#!/usr/bin/env python3
"""A paged backlog drained while other traffic flows (issue 41): what reading paged messages
back costs the consumer that takes them, and everyone else on the broker.

For each --binary in turn (default target/release/hourglass), --reps times, alternating:
  1. a fresh broker (loopback, free ports, a temporary data directory); `hourglass-perf
     throughput -C 0`: N persistent 16 B messages, confirmed, into one durable queue;
  2. SIGTERM and a start on the same directory, waited for until `hourglass-perf depth` counts
     all N: every message comes back paged (its store location only, ADR 0007);
  3. at the same time: `hourglass-perf drain` (one no-ack consumer takes all N: its rate, the
     time to its first delivery, the broker's CPU per message) and `hourglass-perf latency` on
     a queue of its own (--latency-rate messages/s while the drain runs: p50/p99/max).
One JSON line per run, then a table of medians per binary.

Bounded: every step has a timeout; only processes this script started are stopped, by PID.

With --dead-letter-after-s S the backlog is not consumed: a policy gives the queue a message
TTL of S seconds and a dead-letter exchange into a second queue, and after the restart the run
waits until the second queue holds all N (`hourglass-perf depth`) while the latency flow runs
through the expiry: the time from the first message's due time to the last one dead-lettered.

With --gets-s S a basic.get poller takes from the backlog instead of a consumer, for S seconds
(`hourglass-perf get --queue`, one get at a time): its gets/s and the broker's CPU per get,
beside the latency flow.

With --http-gets-s S the HTTP API takes from the backlog instead, for S seconds: `POST
/api/queues/%2f/drain-0/get` of 1,000 messages, acknowledged, one request at a time: its
messages/s beside the latency flow. With --drop-caches (root) the page cache is dropped once the
restart has brought the backlog back, so the records the gets need come from the disk.

usage: scripts/bench_drain.py [--count 1000000] [--reps 3] [--binary PATH ...] [--no-build]
                              [--dead-letter-after-s 20 | --gets-s 5 | --http-gets-s 5]
                              [--drop-caches]
"""
import argparse
import base64
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench import HOURGLASS, ROOT, free_port, wait_for_port  # noqa: E402
from bench_durability import perf  # noqa: E402

QUEUE = "drain"
STEP_TIMEOUT_S = 900


def spawn(binary, data, port, http_port, log):
    return subprocess.Popen(
        [binary, "--bind", "127.0.0.1", "--amqp-port", str(port), "--http-port", str(http_port), "--metrics-port",
         "0", "--data-dir", str(data)],
        stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "RUST_LOG": "warn", "NO_COLOR": "1"})


def dead_letter_policy(http_port, ttl_ms):
    """The backlog's queue expires its messages after `ttl_ms` into QUEUE-dead."""
    body = json.dumps({"pattern": f"^{QUEUE}-0$", "apply-to": "queues",
                       "definition": {"message-ttl": ttl_ms, "dead-letter-exchange": "",
                                      "dead-letter-routing-key": f"{QUEUE}-dead"}}).encode()
    request = urllib.request.Request(f"http://127.0.0.1:{http_port}/api/policies/%2f/dead", data=body,
                                     method="PUT", headers={"content-type": "application/json"})
    request.add_header("authorization", "Basic " + base64.b64encode(b"guest:guest").decode())
    urllib.request.urlopen(request, timeout=30).read()
    request = urllib.request.Request(f"http://127.0.0.1:{http_port}/api/queues/%2f/{QUEUE}-dead",
                                     data=json.dumps({"durable": True}).encode(), method="PUT",
                                     headers={"content-type": "application/json"})
    request.add_header("authorization", "Basic " + base64.b64encode(b"guest:guest").decode())
    urllib.request.urlopen(request, timeout=30).read()


def http_gets(http_port, seconds):
    """The messages/s of HTTP API gets of 1,000 (acknowledged) from the backlog for `seconds`."""
    body = json.dumps({"count": 1000, "ackmode": "ack_requeue_false", "encoding": "auto"}).encode()
    taken, started = 0, time.time()
    while time.time() - started < seconds:
        request = urllib.request.Request(f"http://127.0.0.1:{http_port}/api/queues/%2f/{QUEUE}-0/get", data=body,
                                         method="POST", headers={"content-type": "application/json"})
        request.add_header("authorization", "Basic " + base64.b64encode(b"guest:guest").decode())
        taken += len(json.loads(urllib.request.urlopen(request, timeout=60).read()))
    return round(taken / (time.time() - started), 1)


def one_run(binary, count, latency_rate, latency_s, dead_letter_after_s, gets_s, http_gets_s=None, drop_caches=False):
    tmp = Path(tempfile.mkdtemp(prefix="hg-drain-"))
    log = open(tmp / "broker.log", "a")
    port, http_port = free_port(), free_port()
    proc = spawn(binary, tmp / "data", port, http_port, log)
    try:
        if not wait_for_port(port) or not wait_for_port(http_port):
            sys.exit(f"{binary} did not listen; see {tmp / 'broker.log'}")
        if dead_letter_after_s:
            dead_letter_policy(http_port, int(dead_letter_after_s * 1000))
        filled_at = time.time()
        perf(port, proc.pid, "fill",
             ["throughput", "-P", "1", "-C", "0", "--size", "16", "--count", str(count), "--duration-s",
              str(STEP_TIMEOUT_S), "--confirm", "1000", "--persistent", "--durable", "--queue-name", QUEUE,
              "--keep-queues"], timeout=STEP_TIMEOUT_S + 60)
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=120)
        proc = spawn(binary, tmp / "data", port, http_port, log)
        if dead_letter_after_s:
            return dead_letter_run(binary, count, port, latency_rate, latency_s, filled_at + dead_letter_after_s)
        perf(port, None, "restart", ["depth", "--queue", f"{QUEUE}-0", "--messages", str(count)],
             timeout=STEP_TIMEOUT_S)
        if drop_caches:
            os.sync()
            Path("/proc/sys/vm/drop_caches").write_text("3\n")
        if http_gets_s:
            rate, latency = beside_latency_flow(port, latency_rate, latency_s, lambda: http_gets(http_port, http_gets_s))
            return {"binary": str(binary), "count": count, "http_get_msg_per_s": rate,
                    "latency_p50_us": latency.get("p50_us"), "latency_p99_us": latency.get("p99_us"),
                    "latency_max_us": latency.get("max_us")}
        if gets_s:
            got, latency = beside_latency_flow(port, latency_rate, latency_s, lambda: perf(
                port, proc.pid, "get", ["get", "--queue", f"{QUEUE}-0", "--duration-s", str(gets_s)],
                timeout=gets_s + STEP_TIMEOUT_S))
            return {"binary": str(binary), "count": count, "gets_per_s": got["gets_per_s_per_poller"],
                    "broker_cpu_us_per_get": got["broker_cpu_us_per_op"],
                    "latency_p50_us": latency.get("p50_us"), "latency_p99_us": latency.get("p99_us"),
                    "latency_max_us": latency.get("max_us")}
        drained, latency = beside_latency_flow(port, latency_rate, latency_s, lambda: perf(
            port, proc.pid, "drain", ["drain", "--queue", f"{QUEUE}-0", "--messages", str(count), "--auto-ack"],
            timeout=STEP_TIMEOUT_S))
        return {"binary": str(binary), "count": count, "drain_msg_per_s": drained["msgs_per_s"],
                "first_delivery_s": drained["first_delivery_s"],
                "broker_cpu_us_per_msg": drained["broker_cpu_us_per_msg"],
                "latency_p50_us": latency.get("p50_us"), "latency_p99_us": latency.get("p99_us"),
                "latency_max_us": latency.get("max_us")}
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=60)
        shutil.rmtree(tmp, ignore_errors=True)


def beside_latency_flow(port, rate, seconds, work):
    """`work()`'s result, and the results of `hourglass-perf latency` (`rate` msg/s for `seconds`)
    run through a queue of its own at the same time."""
    latency = {}

    def flow():
        latency.update(perf(port, None, "latency", ["latency", "--rate", str(rate), "--duration-s", str(seconds)],
                            timeout=seconds + 120))

    thread = threading.Thread(target=flow)
    thread.start()
    result = work()
    thread.join(timeout=seconds + 180)
    return result, latency


def dead_letter_run(binary, count, port, latency_rate, latency_s, first_due):
    """Waits for all `count` in QUEUE-dead, with the latency flow started `latency_s / 2` before
    the first message falls due."""
    if not wait_for_port(port):
        sys.exit(f"{binary} did not listen after the restart")
    time.sleep(max(0.0, first_due - latency_s / 2 - time.time()))

    def all_dead():
        perf(port, None, "dead", ["depth", "--queue", f"{QUEUE}-dead", "--messages", str(count)],
             timeout=STEP_TIMEOUT_S)
        return time.time() - first_due

    all_dead_s, latency = beside_latency_flow(port, latency_rate, latency_s, all_dead)
    return {"binary": str(binary), "count": count, "all_dead_lettered_after_first_due_s": round(all_dead_s, 3),
            "latency_p50_us": latency.get("p50_us"), "latency_p99_us": latency.get("p99_us"),
            "latency_max_us": latency.get("max_us")}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--count", type=int, default=1_000_000)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--binary", action="append", help="a broker binary (repeat to compare)")
    ap.add_argument("--latency-rate", type=int, default=1000)
    ap.add_argument("--latency-s", type=float, default=5.0, help="how long the latency flow publishes")
    instead = ap.add_mutually_exclusive_group()
    instead.add_argument("--dead-letter-after-s", type=float, help="dead-letter the backlog after this TTL instead")
    instead.add_argument("--gets-s", type=float, help="take from the backlog with basic.get for this long instead")
    instead.add_argument("--http-gets-s", type=float, help="take from the backlog with HTTP API gets for this long instead")
    ap.add_argument("--drop-caches", action="store_true", help="drop the page cache after the restart (root)")
    ap.add_argument("--no-build", action="store_true")
    args = ap.parse_args()
    if not args.no_build:
        subprocess.run(["cargo", "build", "--release", "--locked", "-p", "hourglass", "-p", "hourglass-perf"],
                       cwd=ROOT, check=True)
    binaries = args.binary or [str(HOURGLASS)]
    runs = []
    for _ in range(args.reps):
        for binary in binaries:
            run = one_run(binary, args.count, args.latency_rate, args.latency_s, args.dead_letter_after_s,
                          args.gets_s, args.http_gets_s, args.drop_caches)
            print(json.dumps(run), flush=True)
            runs.append(run)
    keys = ["drain_msg_per_s", "first_delivery_s", "broker_cpu_us_per_msg"]
    if args.dead_letter_after_s:
        keys = ["all_dead_lettered_after_first_due_s"]
    if args.gets_s:
        keys = ["gets_per_s", "broker_cpu_us_per_get"]
    if args.http_gets_s:
        keys = ["http_get_msg_per_s"]
    keys += ["latency_p50_us", "latency_p99_us", "latency_max_us"]
    print("| binary | " + " | ".join(keys) + " |")
    print("|---" * (len(keys) + 1) + "|")
    for binary in binaries:
        mine = [r for r in runs if r["binary"] == binary]
        medians = [statistics.median(r[k] for r in mine if r[k] is not None) for k in keys]
        print(f"| {binary} | " + " | ".join(f"{m:g}" for m in medians) + " |")


if __name__ == "__main__":
    main()
