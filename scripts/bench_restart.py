#!/usr/bin/env python3
"""Restarts after a kill -9 with N delayed messages waiting (issue 38): from the checkpoint, and
from the whole log (the checkpoint moved aside), in turns on the same data directory.

1. A fresh Hourglass (target/release/hourglass, loopback, free port, data directory in a temporary
   directory); `hourglass-perf scale-fill --via delayed`: N persistent 16 B messages, confirmed,
   through a durable x-delayed-message exchange, due 1-2 h ahead; then kill -9.
2. --pairs times: a start with the checkpoint the broker wrote (messages/index.ckpt) and a start
   without it, each timed from the exec to the log lines `message log recovered` (the first
   pass) and `hourglass listening` (serving: every message restored), then kill -9 again. The
   `broker restored` line says how many delayed messages came from the checkpoint's queue states
   (ADR 0019) and how many were read back from the log; the two must add up to N.

Bounded: every wait has a timeout; only processes this script started are stopped, by PID.

usage: scripts/bench_restart.py [--count 10000000] [--pairs 3] [--no-build] [--keep DIR]
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench import HOURGLASS, ROOT, free_port  # noqa: E402
from bench_durability import perf  # noqa: E402

FILL_TIMEOUT_S = 3600
START_TIMEOUT_S = 900
POLL_S = 0.005
FIELD = re.compile(r"(\w+)=(\S+)")


def spawn(data, port, log_path):
    log = open(log_path, "w")
    return subprocess.Popen(
        [str(HOURGLASS), "--bind", "127.0.0.1", "--amqp-port", str(port), "--http-port", "0",
         "--metrics-port", "0", "--data-dir", str(data)],
        stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "RUST_LOG": "info", "NO_COLOR": "1"})


def wait_lines(proc, log_path, wanted):
    """Seconds from now until each line containing a `wanted` text appears, and those lines."""
    start, seen, lines = time.monotonic(), {}, {}
    while len(seen) < len(wanted):
        if time.monotonic() - start > START_TIMEOUT_S or proc.poll() is not None:
            sys.exit(f"hourglass did not start; see {log_path}")
        text = log_path.read_text(errors="replace")
        for w in wanted:
            if w not in seen and w in text:
                seen[w] = time.monotonic() - start
                lines[w] = next(l for l in text.splitlines() if w in l)
        time.sleep(POLL_S)
    return seen, lines


def kill9(proc):
    proc.kill()
    proc.wait(timeout=60)


def start_once(data, port, log_path):
    proc = spawn(data, port, log_path)
    seen, lines = wait_lines(proc, log_path, ["message log recovered", "broker restored", "hourglass listening"])
    restored = dict(FIELD.findall(lines["broker restored"]))
    recovered = dict(FIELD.findall(lines["message log recovered"]))
    kill9(proc)
    return {
        "first_pass_s": round(seen["message log recovered"], 3),
        "serving_s": round(seen["hourglass listening"], 3),
        "delayed_read_back": int(restored.get("delayed", 0)),
        "delayed_from_checkpoint": int(restored.get("delayed_from_checkpoint", 0)),
        "queue_states": int(recovered.get("queue_states", 0)),
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--count", type=int, default=10_000_000)
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--no-build", action="store_true")
    ap.add_argument("--keep", help="keep the data directory here")
    args = ap.parse_args()
    if not args.no_build:
        subprocess.run(["cargo", "build", "--release", "--locked", "-p", "hourglass", "-p", "hourglass-perf"],
                       cwd=ROOT, check=True)
    tmp = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="hg-restart-"))
    tmp.mkdir(parents=True, exist_ok=True)
    data, port = tmp / "data", free_port()
    proc = spawn(data, port, tmp / "fill.log")
    wait_lines(proc, tmp / "fill.log", ["hourglass listening"])
    started = time.monotonic()
    perf(port, proc.pid, "hourglass", ["scale-fill", "--via", "delayed", "--exchange", "scale", "--queue", "scale",
                                       "--count", str(args.count), "--timeout-s", str(FILL_TIMEOUT_S)],
         timeout=FILL_TIMEOUT_S + 120)
    print(f"filled {args.count} in {time.monotonic() - started:.1f} s", flush=True)
    kill9(proc)
    checkpoint = data / "messages" / "index.ckpt"
    aside = tmp / "index.ckpt.aside"
    print(f"checkpoint: {checkpoint.stat().st_size} bytes", flush=True)
    results = []
    for pair in range(args.pairs):
        for mode in ["checkpoint", "whole log"]:
            if mode == "whole log":
                shutil.move(checkpoint, aside)
            result = start_once(data, port, tmp / f"start-{pair}-{mode.replace(' ', '-')}.log")
            if mode == "whole log":
                shutil.move(aside, checkpoint)
            total = result["delayed_read_back"] + result["delayed_from_checkpoint"]
            if total != args.count:
                sys.exit(f"{mode}: {total} delayed messages restored, not {args.count}: {result}")
            result["mode"] = mode
            results.append(result)
            print(json.dumps(result), flush=True)
    if not args.keep:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
