#!/usr/bin/env python3
"""A ready (or TTL'd) backlog's memory and restart (issue 38): RSS per queued message, filled and
after a kill -9 and a start, and the time from that start's exec to a passive declare counting
every message.

1. A fresh broker (`--binary`, default target/release/hourglass; loopback, free ports, a
   temporary data directory). With `--ttl-ms`, a policy gives the queue that `message-ttl`
   first (through the HTTP API).
2. `hourglass-perf throughput -C 0`: N persistent 16 B messages into one durable queue, one
   publisher with 1,000 confirms in flight; RSS 3 s after the fill, less the idle broker's.
3. kill -9, a start on the same directory timed to `hourglass-perf depth` seeing all N; RSS then,
   less the first idle broker's.

`--lavinmq BIN` measures a LavinMQ binary instead (2.9.1 here: CloudAMQP's packages or a build of
its source, see scripts/lavinmq_ref.sh), the same way: one node on loopback with its shipped
defaults, as scripts/lavinmq_ref.sh starts it.

Bounded: every wait has a timeout; only processes this script started are stopped, by PID.

usage: scripts/bench_ready.py [--count 10000000] [--ttl-ms MS] [--binary PATH | --lavinmq BIN]
                              [--no-build]
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
from bench import HOURGLASS, ROOT, free_port, wait_for_port  # noqa: E402
from bench_durability import perf, rss_kib  # noqa: E402

QUEUE = "ready"
FILL_TIMEOUT_S = 3600
SETTLE_S = 3


def spawn(args, data, port, http_port, log_path):
    log = open(log_path, "a")
    if args.lavinmq:
        data.mkdir(parents=True, exist_ok=True)
        command = [args.lavinmq, "-D", str(data), "--bind=127.0.0.1", f"--amqp-port={port}",
                   f"--http-port={http_port}", "--mqtt-port=-1", "--metrics-http-port=-1",
                   f"--clustering-port={free_port()}", f"--control-unix-path={data / 'lavinmqctl.sock'}"]
    else:
        command = [str(args.binary), "--bind", "127.0.0.1", "--amqp-port", str(port), "--http-port",
                   str(http_port), "--metrics-port", "0", "--data-dir", str(data)]
    return subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT,
                            env={**os.environ, "RUST_LOG": "warn", "NO_COLOR": "1"})


def set_ttl_policy(http_port, ttl_ms):
    body = json.dumps({"pattern": f"^{QUEUE}", "apply-to": "queues",
                       "definition": {"message-ttl": ttl_ms}}).encode()
    request = urllib.request.Request(f"http://127.0.0.1:{http_port}/api/policies/%2f/ttl", data=body,
                                     method="PUT", headers={"content-type": "application/json"})
    request.add_header("authorization", "Basic " + base64.b64encode(b"guest:guest").decode())
    urllib.request.urlopen(request, timeout=30).read()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--count", type=int, default=10_000_000)
    ap.add_argument("--ttl-ms", type=int)
    ap.add_argument("--binary", default=str(HOURGLASS))
    ap.add_argument("--lavinmq", help="a LavinMQ binary to measure instead")
    ap.add_argument("--no-build", action="store_true")
    args = ap.parse_args()
    if not args.no_build and not args.lavinmq:
        subprocess.run(["cargo", "build", "--release", "--locked", "-p", "hourglass", "-p", "hourglass-perf"],
                       cwd=ROOT, check=True)
    tmp = Path(tempfile.mkdtemp(prefix="hg-ready-"))
    data, port, http_port = tmp / "data", free_port(), free_port()
    proc = spawn(args, data, port, http_port, tmp / "broker.log")
    try:
        if not wait_for_port(port) or not wait_for_port(http_port):
            sys.exit(f"the broker did not listen; see {tmp / 'broker.log'}")
        if args.ttl_ms:
            set_ttl_policy(http_port, args.ttl_ms)
        idle = rss_kib(proc.pid)
        label = "lavinmq" if args.lavinmq else "hourglass"
        filled = perf(port, proc.pid, label,
                      ["throughput", "-P", "1", "-C", "0", "--size", "16", "--count", str(args.count),
                       "--duration-s", str(FILL_TIMEOUT_S), "--confirm", "1000", "--persistent", "--durable",
                       "--queue-name", QUEUE, "--keep-queues"], timeout=FILL_TIMEOUT_S + 120)
        time.sleep(SETTLE_S)
        count = filled["published"]
        full = rss_kib(proc.pid)
        proc.kill()
        proc.wait(timeout=60)
        started = time.monotonic()
        proc = spawn(args, data, port, http_port, tmp / "broker.log")
        perf(port, None, label, ["depth", "--queue", f"{QUEUE}-0", "--messages", str(count),
                                       "--timeout-s", "900"], timeout=1000)
        restart_s = time.monotonic() - started
        time.sleep(SETTLE_S)
        restarted = rss_kib(proc.pid)
        result = {
            "binary": args.lavinmq or args.binary, "count": count, "ttl_ms": args.ttl_ms,
            "fill_msg_per_s": filled.get("msg_per_s"),
            "fill_cpu_us_per_msg": filled.get("broker_cpu_us_per_op"),
            "rss_idle_kib": idle, "rss_filled_kib": full, "rss_restarted_kib": restarted,
            "bytes_per_msg_filled": round((full - idle) * 1024 / count, 2),
            "bytes_per_msg_restarted": round((restarted - idle) * 1024 / count, 2),
            "restart_to_exact_count_s": round(restart_s, 2),
        }
        print(json.dumps(result), flush=True)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=60)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
