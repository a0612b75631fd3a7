#!/usr/bin/env python3
"""Broker CPU per message: an AMQP 1.0 publisher → 0-9-1 consumer against a 0-9-1 publisher →
0-9-1 consumer (issue 42's row; its goal: within 1.5x).

Each pair runs both rows in turn, each on a fresh release broker (loopback, free ports, its own
data directory), with `hourglass-perf throughput -P1 -C1 --size 16 --confirm 1000 --persistent
--count N --broker-pid PID` (`--amqp1` for the 1.0 row: its messages have no header section, so
they are durable as RabbitMQ 4 reads them; `--persistent` gives the 0-9-1 row the same
delivery-mode). Prints each pair's µs per message and the median ratio.

usage: scripts/bench_amqp1.py [--pairs 5] [--count 500000] [--no-build]
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench import HOURGLASS, ROOT, free_port  # noqa: E402

PERF = ROOT / "target" / "release" / "hourglass-perf"
RUN_TIMEOUT_S = 300


def start_broker(tmp):
    port = free_port()
    log = open(tmp / "broker.log", "a")
    proc = subprocess.Popen(
        [str(HOURGLASS), "--bind", "127.0.0.1", "--amqp-port", str(port), "--http-port", "0",
         "--metrics-port", "0", "--data-dir", str(tmp / "data")],
        stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "RUST_LOG": "warn", "NO_COLOR": "1"})
    deadline = time.monotonic() + 30
    import socket
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return proc, port
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise RuntimeError("the broker did not start")


def one_run(amqp1, count):
    tmp = Path(tempfile.mkdtemp(prefix="hg-amqp1-bench-"))
    proc, port = start_broker(tmp)
    try:
        args = [str(PERF), "--url", f"amqp://guest:guest@127.0.0.1:{port}/%2f", "--broker-pid", str(proc.pid),
                "throughput", "-P1", "-C1", "--size", "16", "--confirm", "1000", "--persistent",
                "--count", str(count)]
        if amqp1:
            args.append("--amqp1")
        out = subprocess.run(args, capture_output=True, text=True, timeout=RUN_TIMEOUT_S, check=True).stdout
        result = json.loads(out.strip().splitlines()[-1])["results"]
        if not result["complete"]:
            raise RuntimeError(f"incomplete run: {result}")
        return result["broker_cpu_us_per_op"], result["msg_per_s"]
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        shutil.rmtree(tmp, ignore_errors=True)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--count", type=int, default=500_000)
    parser.add_argument("--no-build", action="store_true")
    args = parser.parse_args()
    if not args.no_build:
        subprocess.run(["cargo", "build", "--release", "--locked", "-p", "hourglass", "-p", "hourglass-perf"],
                       cwd=ROOT, check=True)
    ratios = []
    for pair in range(1, args.pairs + 1):
        (base_us, base_rate), (one_us, one_rate) = one_run(False, args.count), one_run(True, args.count)
        ratios.append(one_us / base_us)
        print(f"pair {pair}: 0-9-1 {base_us:.2f} µs ({base_rate:,.0f} msg/s), "
              f"1.0 {one_us:.2f} µs ({one_rate:,.0f} msg/s), 1.0 / 0-9-1 {ratios[-1]:.2f}", flush=True)
    print(f"median 1.0 / 0-9-1: {statistics.median(ratios):.2f}")


if __name__ == "__main__":
    main()
