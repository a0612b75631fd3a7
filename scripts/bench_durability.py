#!/usr/bin/env python3
"""Durability benchmarks, Hourglass next to RabbitMQ on the same machine (issue #6):

  1. recovery: fill a durable queue with N persistent 16 B messages (publisher confirms), then
     restart the broker twice on the same data — once after a clean stop, once after kill -9 —
     and time from starting the broker process until a client sees all N messages in the queue
     (`hourglass-perf depth`, polling a passive queue.declare on fresh connections);
  2. memory: fill a fresh broker's durable queue with M persistent 16 B messages and report the
     broker's resident memory and its growth per queued message.

RabbitMQ runs as a private instance of the reference broker (`RABBITMQ_REF`, see bench.py
rabbitmq_ref(); its own port and data directory, so the shared reference on 5673 is left alone)
and is stopped at the end; Hourglass runs from target/release with a temporary data directory.
Results go to docs/benchmarks-durability.md.

usage: scripts/bench_durability.py [--recovery N] [--memory M] [--skip-rabbitmq] [--no-build]
                                   [--reuse-rabbitmq docs/benchmarks-durability.md]
(--reuse-rabbitmq takes RabbitMQ's figures from an earlier report's raw JSON instead of measuring
them again: RabbitMQ does not change between runs, and its 10M fill takes a quarter of an hour.)
"""
import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench import HOURGLASS, PERF, ROOT, free_port, listening_pid, rabbitmq_ref, wait_for_port  # noqa: E402

# Slack over what the figures themselves take; a run past it has stalled.
STEP_TIMEOUT_S = 1800
RMQ_PRIVATE_PORT = 5681
QUEUE = "durability"


def perf(port, pid, label, args, timeout=STEP_TIMEOUT_S):
    url = f"amqp://guest:guest@127.0.0.1:{port}/%2f"
    cmd = [str(PERF), "--url", url, "--label", label] + (["--broker-pid", str(pid)] if pid else []) + args
    print(f"  {label}: {' '.join(args)}", flush=True)
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    line = next((l for l in done.stdout.splitlines() if l.startswith("{")), None)
    if done.returncode != 0 or line is None:
        raise RuntimeError(f"{label} {args[0]} failed: {done.stderr.strip()[-500:]}")
    print("    " + next(l for l in done.stdout.splitlines() if not l.startswith("{")), flush=True)
    return json.loads(line)["results"]


def fill_args(count, seconds):
    return ["throughput", "-P", "1", "-C", "0", "--size", "16", "--count", str(count),
            "--duration-s", str(seconds), "--confirm", "1000", "--persistent", "--durable",
            "--queue-name", QUEUE, "--keep-queues"]


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        return next(int(l.split()[1]) for l in f if l.startswith("VmRSS:"))


class Hourglass:
    label = "hourglass"

    def __init__(self, tmp):
        self.tmp, self.port, self.proc = tmp, free_port(), None

    def spawn(self):
        log = open(self.tmp / "hourglass.log", "a")
        self.proc = subprocess.Popen(
            [str(HOURGLASS), "--bind", "127.0.0.1", "--amqp-port", str(self.port), "--http-port", "0",
             "--metrics-port", "0", "--data-dir", str(self.tmp / "data")],
            stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "RUST_LOG": "warn", "NO_COLOR": "1"})

    def start(self):
        self.spawn()
        if not wait_for_port(self.port):
            sys.exit(f"hourglass did not listen; see {self.tmp / 'hourglass.log'}")

    def pid(self):
        return self.proc.pid

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=60)

    def kill9(self):
        self.proc.kill()
        self.proc.wait()

    def wipe(self):
        shutil.rmtree(self.tmp / "data", ignore_errors=True)


class RabbitMQ:
    """A private rabbitmq-ref instance: RMQ_PORT / RMQ_BASE of its own."""
    label = "rabbitmq"

    def __init__(self, tmp):
        self.port = RMQ_PRIVATE_PORT
        # Outside `tmp`: the server runs as the rabbitmq user, who cannot enter a 0700 temp dir.
        self.base = Path(f"/tmp/hourglass-bench-rmq-{os.getpid()}")
        self.env = {**os.environ, "RMQ_PORT": str(self.port), "RMQ_BASE": str(self.base)}
        self.starter = None

    def spawn(self):
        self.starter = subprocess.Popen([str(rabbitmq_ref()), "start"], env=self.env,
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def start(self):
        subprocess.run([str(rabbitmq_ref()), "start"], env=self.env, check=True, timeout=600)

    def pid(self):
        return listening_pid(self.port)

    def stop(self):
        subprocess.run([str(rabbitmq_ref()), "stop"], env=self.env, timeout=600)
        if self.starter:
            self.starter.wait(timeout=600)

    def kill9(self):
        os.kill(self.pid(), signal.SIGKILL)
        deadline = time.time() + 60
        while listening_pid(self.port) and time.time() < deadline:
            time.sleep(0.1)
        if self.starter:
            self.starter.wait(timeout=600)

    def wipe(self):
        subprocess.run(["rm", "-rf", str(self.base)], check=True)


def timed_restart(broker, count):
    """Starts the broker and returns (seconds until a client sees `count` messages, RSS after)."""
    started = time.monotonic()
    broker.spawn()
    perf(broker.port, None, broker.label,
         ["depth", "--queue", f"{QUEUE}-0", "--messages", str(count), "--timeout-s", "900"])
    elapsed = time.monotonic() - started
    return elapsed, rss_kib(broker.pid())


def recovery(broker, count):
    broker.wipe()
    broker.start()
    filled = perf(broker.port, broker.pid(), broker.label, fill_args(count, 900))
    broker.stop()
    clean_s, clean_rss = timed_restart(broker, count)
    broker.kill9()
    crash_s, crash_rss = timed_restart(broker, count)
    broker.stop()
    return {"fill": filled, "clean_restart_s": round(clean_s, 2), "kill9_restart_s": round(crash_s, 2),
            "rss_after_recovery_kib": crash_rss}


def memory(broker, count):
    broker.wipe()
    broker.start()
    before = rss_kib(broker.pid())
    filled = perf(broker.port, broker.pid(), broker.label, fill_args(count, 900))
    time.sleep(2)  # let a garbage-collected broker settle before the final reading
    after = rss_kib(broker.pid())
    broker.stop()
    published = filled["published"]
    return {"fill": filled, "rss_before_kib": before, "rss_after_kib": after, "published": published,
            "bytes_per_msg": round((after - before) * 1024 / max(published, 1), 1)}


def report(out, results, args):
    def row(name, key, fmt):
        cells = [fmt(results[b][key]) if b in results else "—" for b in ("hourglass", "rabbitmq")]
        ratio = ""
        if "rabbitmq" in results and "hourglass" in results:
            h, r = results["hourglass"][key], results["rabbitmq"][key]
            ratio = f"{h / r:.2f}" if r else ""
        return f"| {name} | {cells[0]} | {cells[1]} | {ratio} |"

    lines = [
        "# Durability benchmarks",
        "",
        f"Generated by `scripts/bench_durability.py --recovery {args.recovery} --memory {args.memory}` on "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, this 2-core VM, RabbitMQ "
        "3.10.8 (Debian, classic queues, a private instance) next to Hourglass (release build).",
        "Restart times run from starting the broker process until a fresh client connection sees every "
        "message in the queue (passive queue.declare polled every 20 ms), so they include the broker's "
        "start-up.",
        "",
        "| figure | Hourglass | RabbitMQ | ratio |",
        "|---|---|---|---|",
    ]
    flat = {}
    for broker, r in results.items():
        rec, mem = r.get("recovery", {}), r.get("memory", {})
        flat[broker] = {
            "fill_rate": rec.get("fill", {}).get("msg_per_s", 0),
            "fill_cpu": rec.get("fill", {}).get("broker_cpu_us_per_op") or 0,
            "clean": rec.get("clean_restart_s", 0),
            "crash": rec.get("kill9_restart_s", 0),
            "rss_recovered": rec.get("rss_after_recovery_kib", 0) / 1024,
            "mem_published": mem.get("published", 0),
            "mem_rss": mem.get("rss_after_kib", 0) / 1024,
            "mem_per_msg": mem.get("bytes_per_msg", 0),
            "mem_rate": mem.get("fill", {}).get("msg_per_s", 0),
        }
    results = flat
    n, m = f"{args.recovery:,}", f"{args.memory:,}"
    lines += [
        row(f"fill {n} persistent 16 B, confirms: msg/s", "fill_rate", lambda v: f"{v:,.0f}"),
        row("… broker CPU µs per message", "fill_cpu", lambda v: f"{v:.1f}"),
        row(f"restart after clean stop, {n} messages: s", "clean", lambda v: f"{v:.2f}"),
        row(f"restart after kill -9, {n} messages: s", "crash", lambda v: f"{v:.2f}"),
        row("RSS after recovery: MiB", "rss_recovered", lambda v: f"{v:,.0f}"),
        row(f"fill {m} persistent 16 B: messages confirmed", "mem_published", lambda v: f"{v:,}"),
        row("… fill msg/s", "mem_rate", lambda v: f"{v:,.0f}"),
        row("… RSS with them queued: MiB", "mem_rss", lambda v: f"{v:,.0f}"),
        row("… RSS growth per queued message: B", "mem_per_msg", lambda v: f"{v:,.0f}"),
        "",
        "Raw results:",
        "",
        "```json",
    ]
    out.write_text("\n".join(lines) + "\n")
    return lines


def previous_results(path):
    """The raw JSON block of an earlier report."""
    text = path.read_text()
    return json.loads(text[text.index("```json") + len("```json"):text.rindex("```")])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--recovery", type=int, default=1_000_000)
    ap.add_argument("--memory", type=int, default=10_000_000)
    ap.add_argument("--skip-rabbitmq", action="store_true")
    ap.add_argument("--no-build", action="store_true")
    ap.add_argument("--reuse-rabbitmq", default="")
    ap.add_argument("--out", default=str(ROOT / "docs/benchmarks-durability.md"))
    args = ap.parse_args()
    if not args.no_build:
        subprocess.run(["cargo", "build", "--release", "-p", "hourglass", "-p", "hourglass-perf"],
                       cwd=ROOT, check=True)
    tmp = Path(tempfile.mkdtemp(prefix="hourglass-durability-"))
    reuse = args.reuse_rabbitmq and previous_results(Path(args.reuse_rabbitmq)).get("rabbitmq")
    measure_rabbitmq = not (args.skip_rabbitmq or reuse)
    brokers = [Hourglass(tmp)] + ([RabbitMQ(tmp)] if measure_rabbitmq else [])
    results = {}
    try:
        for broker in brokers:
            print(f"== {broker.label}", flush=True)
            results[broker.label] = {"recovery": recovery(broker, args.recovery),
                                     "memory": memory(broker, args.memory)}
    finally:
        if reuse:
            results["rabbitmq"] = reuse
        for broker in brokers:
            if broker.label == "rabbitmq" and listening_pid(broker.port):
                broker.stop()
        raw = json.dumps(results, indent=1)
        lines = report(Path(args.out), dict(results), args)
        if reuse:
            lines.insert(3, f"RabbitMQ's figures are reused from the earlier report {args.reuse_rabbitmq} "
                            "(same machine, same RabbitMQ); Hourglass's were measured in this run.")
        Path(args.out).write_text("\n".join(lines) + "\n" + raw + "\n```\n")
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
