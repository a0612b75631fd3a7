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

usage: scripts/bench_drain.py [--count 1000000] [--reps 3] [--binary PATH ...] [--no-build]
"""
import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench import HOURGLASS, ROOT, free_port, wait_for_port  # noqa: E402
from bench_durability import perf  # noqa: E402

QUEUE = "drain"
STEP_TIMEOUT_S = 900


def spawn(binary, data, port, log):
    return subprocess.Popen(
        [binary, "--bind", "127.0.0.1", "--amqp-port", str(port), "--http-port", "0", "--metrics-port", "0",
         "--data-dir", str(data)],
        stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "RUST_LOG": "warn", "NO_COLOR": "1"})


def one_run(binary, count, latency_rate, latency_s):
    tmp = Path(tempfile.mkdtemp(prefix="hg-drain-"))
    log = open(tmp / "broker.log", "a")
    port = free_port()
    proc = spawn(binary, tmp / "data", port, log)
    try:
        if not wait_for_port(port):
            sys.exit(f"{binary} did not listen; see {tmp / 'broker.log'}")
        perf(port, proc.pid, "fill",
             ["throughput", "-P", "1", "-C", "0", "--size", "16", "--count", str(count), "--duration-s",
              str(STEP_TIMEOUT_S), "--confirm", "1000", "--persistent", "--durable", "--queue-name", QUEUE,
              "--keep-queues"], timeout=STEP_TIMEOUT_S + 60)
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=120)
        proc = spawn(binary, tmp / "data", port, log)
        perf(port, None, "restart", ["depth", "--queue", f"{QUEUE}-0", "--messages", str(count)],
             timeout=STEP_TIMEOUT_S)
        latency = {}

        def beside():
            latency.update(perf(port, None, "latency", ["latency", "--rate", str(latency_rate), "--duration-s",
                                                          str(latency_s)], timeout=latency_s + 120))

        flow = threading.Thread(target=beside)
        flow.start()
        drained = perf(port, proc.pid, "drain", ["drain", "--queue", f"{QUEUE}-0", "--messages", str(count),
                                                  "--auto-ack"], timeout=STEP_TIMEOUT_S)
        flow.join(timeout=latency_s + 180)
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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--count", type=int, default=1_000_000)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--binary", action="append", help="a broker binary (repeat to compare)")
    ap.add_argument("--latency-rate", type=int, default=1000)
    ap.add_argument("--latency-s", type=float, default=5.0, help="how long the latency flow publishes")
    ap.add_argument("--no-build", action="store_true")
    args = ap.parse_args()
    if not args.no_build:
        subprocess.run(["cargo", "build", "--release", "--locked", "-p", "hourglass", "-p", "hourglass-perf"],
                       cwd=ROOT, check=True)
    binaries = args.binary or [str(HOURGLASS)]
    runs = []
    for _ in range(args.reps):
        for binary in binaries:
            run = one_run(binary, args.count, args.latency_rate, args.latency_s)
            print(json.dumps(run), flush=True)
            runs.append(run)
    keys = ["drain_msg_per_s", "first_delivery_s", "broker_cpu_us_per_msg", "latency_p50_us", "latency_p99_us",
            "latency_max_us"]
    print("| binary | " + " | ".join(keys) + " |")
    print("|---" * (len(keys) + 1) + "|")
    for binary in binaries:
        mine = [r for r in runs if r["binary"] == binary]
        medians = [statistics.median(r[k] for r in mine if r[k] is not None) for k in keys]
        print(f"| {binary} | " + " | ".join(f"{m:g}" for m in medians) + " |")


if __name__ == "__main__":
    main()
