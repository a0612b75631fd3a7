#!/usr/bin/env python3
"""Restarts after a kill -9 with N messages waiting in an SQS FIFO queue (issue 41): how long until
the broker serves again, for each binary given, each on data it wrote itself.

1. For each `--binary`: a fresh Hourglass (loopback, free port, data directory in a temporary
   directory); a durable queue `fifo` declared over AMQP with `x-sqs-fifo` (`--kind plain`:
   without, for comparison), N persistent 16 B messages published to it with pika, each with a
   `MessageGroupId` (`x-sqs-message-group-id`, one of `--groups`); the last one with a confirm,
   which the broker gives once every earlier message of the channel is on disk too; then kill -9.
2. `--reps` times, the binaries in turn: a start on that data, timed from the exec to the log line
   `hourglass listening` (serving: every message restored), then kill -9 again. With
   `--drop-caches` (root), the page cache is dropped before each start, so the records a start
   reads come from the disk.

Bounded: every wait has a timeout; only processes this script started are stopped, by PID.

usage: scripts/bench_restart_groups.py --binary A --binary B [--count 300000] [--groups 100]
       [--reps 3] [--drop-caches] [--kind fifo|plain]
"""
import argparse
import json
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pika

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench import free_port  # noqa: E402
from bench_restart import kill9, wait_lines  # noqa: E402

GROUP_HEADER = "x-sqs-message-group-id"
FILL_TIMEOUT_S = 1800


def spawn(binary, data, port, log_path):
    with open(log_path, "w") as log:
        return subprocess.Popen(
            [binary, "--bind", "127.0.0.1", "--amqp-port", str(port), "--http-port", "0",
             "--metrics-port", "0", "--data-dir", str(data)],
            stdout=log, stderr=subprocess.STDOUT, env={"RUST_LOG": "info", "NO_COLOR": "1", "PATH": "/usr/bin:/bin"})


def on_timeout(_signum, _frame):
    raise TimeoutError(f"the fill took over {FILL_TIMEOUT_S} s")


def fill(port, count, groups, kind):
    connection = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port, blocked_connection_timeout=600))
    channel = connection.channel()
    channel.queue_declare("fifo", durable=True, arguments={"x-sqs-fifo": True} if kind == "fifo" else {})
    body = b"0123456789abcdef"
    for i in range(count - 1):
        properties = pika.BasicProperties(delivery_mode=2, headers={GROUP_HEADER: f"g{i % groups}"})
        channel.basic_publish("", "fifo", body, properties)
    channel.confirm_delivery()
    channel.basic_publish("", "fifo", body, pika.BasicProperties(delivery_mode=2, headers={GROUP_HEADER: "g0"}))
    depth = channel.queue_declare("fifo", passive=True).method.message_count
    connection.close()
    if depth != count:
        sys.exit(f"the queue holds {depth} messages, not {count}")


def start_once(binary, data, port, log_path, drop_caches):
    if drop_caches:
        subprocess.run(["sync"], check=True)
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
    proc = spawn(binary, data, port, log_path)
    try:
        seen, _ = wait_lines(proc, log_path, ["hourglass listening"])
    finally:
        kill9(proc)
    return seen["hourglass listening"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", action="append", required=True)
    ap.add_argument("--count", type=int, default=300_000)
    ap.add_argument("--groups", type=int, default=100)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--drop-caches", action="store_true")
    ap.add_argument("--kind", choices=["fifo", "plain"], default="fifo")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="hg-restart-groups-"))
    try:
        port = free_port()
        datas = []
        for n, binary in enumerate(args.binary):
            data = tmp / f"data-{n}"
            proc = spawn(binary, data, port, tmp / f"fill-{n}.log")
            try:
                wait_lines(proc, tmp / f"fill-{n}.log", ["hourglass listening"])
                started = time.monotonic()
                signal.signal(signal.SIGALRM, on_timeout)
                signal.alarm(FILL_TIMEOUT_S)
                fill(port, args.count, args.groups, args.kind)
                signal.alarm(0)
                print(f"{binary}: filled {args.count} in {time.monotonic() - started:.1f} s", flush=True)
            finally:
                kill9(proc)
            datas.append(data)
        times = {binary: [] for binary in args.binary}
        for rep in range(args.reps):
            for n, binary in enumerate(args.binary):
                seconds = start_once(binary, datas[n], port, tmp / f"start-{rep}-{n}.log", args.drop_caches)
                times[binary].append(round(seconds, 3))
                print(json.dumps({"binary": binary, "rep": rep, "serving_s": round(seconds, 3)}), flush=True)
        for binary, seconds in times.items():
            print(json.dumps({"binary": binary, "median_serving_s": statistics.median(seconds), "all": seconds}))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
