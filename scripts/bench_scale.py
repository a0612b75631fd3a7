#!/usr/bin/env python3
"""Waiting messages at scale (issue 23): what N messages waiting for their due time cost.

For each N in --counts, on a fresh Hourglass (target/release/hourglass, loopback, free ports, its
data directory in a temporary directory):
  1. `hourglass-perf scale-fill`: N persistent 16 B messages, confirmed, through a durable
     x-delayed-message exchange into a durable queue, each due 1-2 h ahead; the publish rate and
     the broker's RSS for every tenth of the fill;
  2. `hourglass-perf scale-tracers`: K tracers into their own queue, due --tracer-due-s later;
  3. SIGTERM, then the broker started again on the same data directory, timed until its HTTP API
     (`GET /api/queues/%2F/<queue>`, `messages_delayed`) reports exactly N and K delayed messages.
     (Not `hourglass-perf depth`: its passive queue.declare counts ready messages only, and a
     delayed message is not ready.);
  4. `hourglass-perf scale-tracers-consume`: each tracer's lateness against the due time in its
     body, across the restart; none may be early.
Recorded besides: RSS per waiting message while publishing, once the fill has settled, and after
recovery; bytes on disk; the machine's load average at each step.

With --rabbitmq (for every N, or those listed) the same fill runs on a private reference RabbitMQ (bench_durability.py's
RabbitMQ: `scripts/rabbitmq_ref.sh` or $RABBITMQ_REF, port 5681, its own data directory), which
has no delayed exchange: a durable classic queue with a per-message TTL dead-lettering into a
second queue, as RabbitMQ users do (`scale-fill --via ttl`); restart timed until a passive
queue.declare counts N messages again (there they are ready messages).

The machine is shared: each broker's run waits (at most --wait-quiet-s) while a `cargo test` runs.
Every wait is bounded; only processes this script started are stopped, by PID.

usage: scripts/bench_scale.py [--counts 1000000,10000000] [--tracers 1000] [--tracer-due-s 60]
                              [--rabbitmq [1000000]] [--no-build] [--json PATH] [--wait-quiet-s 1800]
"""
import argparse
import base64
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench import HOURGLASS, ROOT, free_port, listening_pid, rss_kib, settled_rss_kib  # noqa: E402
from bench_durability import Hourglass, RabbitMQ, perf  # noqa: E402

QUEUE, TRACERS, EXCHANGE = "scale", "scale-tracers", "scale"
# Bounds: a step that takes longer has stalled.
FILL_TIMEOUT_S = 3600
RECOVERY_TIMEOUT_S = 1800
STOP_TIMEOUT_S = 300
POLL_S = 0.05
# Tracers still missing this long after the last one was due are counted as missing.
TRACER_GRACE_S = 60
HTTP_AUTH = "Basic " + base64.b64encode(b"guest:guest").decode()


def loadavg():
    with open("/proc/loadavg") as f:
        return [float(v) for v in f.read().split()[:3]]


def cpu_jiffies():
    """(busy, total) CPU time of the whole machine so far, from /proc/stat."""
    with open("/proc/stat") as f:
        fields = [int(v) for v in f.readline().split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    return sum(fields) - idle, sum(fields)


def tests_running():
    """PIDs of a `cargo test` run on this machine (another engineer's)."""
    out = subprocess.run(["pgrep", "-f", "cargo test"], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


def wait_quiet(limit_s):
    deadline = time.monotonic() + limit_s
    while tests_running() and time.monotonic() < deadline:
        print("  waiting for a `cargo test` run to finish", flush=True)
        time.sleep(15)
    if tests_running():
        sys.exit(f"a `cargo test` run was still going after {limit_s} s; not benchmarking beside it")


def disk_bytes(path):
    """Apparent size of the files under `path` (what the broker wrote)."""
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                pass
    return total


def per_message(grown_kib, messages):
    return round(grown_kib * 1024 / max(messages, 1), 1)


class Log:
    """Steps with their wall time and the machine's load when they ended."""

    def __init__(self):
        self.steps = []

    def run(self, name, action):
        """Runs action(); returns (its result, seconds it took)."""
        began, (busy0, total0) = time.monotonic(), cpu_jiffies()
        value = action()
        took = time.monotonic() - began
        busy1, total1 = cpu_jiffies()
        # Of both cores, the share busy during the step: the broker, the load tool and anyone else.
        busy = round(100 * (busy1 - busy0) / max(total1 - total0, 1), 1)
        self.steps.append({"step": name, "took_s": round(took, 2), "loadavg": loadavg(), "machine_busy_pct": busy,
                           "cargo_test_running": bool(tests_running())})
        print(f"  [{name}: {took:.1f}s, load {loadavg()[0]:.2f}, machine {busy:.0f}% busy]", flush=True)
        return value, round(took, 2)


class ScaleHourglass(Hourglass):
    """bench_durability's Hourglass with its HTTP API on a port of its own (the delayed counts)."""

    def __init__(self, tmp):
        super().__init__(tmp)
        self.http_port = free_port()

    def spawn(self):
        log = open(self.tmp / "hourglass.log", "a")
        ports = ["--amqp-port", str(self.port), "--http-port", str(self.http_port), "--metrics-port", "0"]
        self.proc = subprocess.Popen(
            [str(HOURGLASS), "--bind", "127.0.0.1", *ports, "--data-dir", str(self.tmp / "data")],
            stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "RUST_LOG": "warn", "NO_COLOR": "1"})

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=STOP_TIMEOUT_S)

    def delayed(self, queue):
        url = f"http://127.0.0.1:{self.http_port}/api/queues/%2F/{urllib.parse.quote(queue, safe='')}"
        request = urllib.request.Request(url, headers={"Authorization": HTTP_AUTH})
        with urllib.request.urlopen(request, timeout=5) as answer:
            return json.load(answer)["messages_delayed"]


class ScaleRabbitMQ(RabbitMQ):
    """bench_durability's private RabbitMQ, stopped by its PID (SIGTERM: an orderly shutdown)."""

    def stop(self):
        pid = self.pid()
        if pid:
            os.kill(pid, signal.SIGTERM)
            deadline = time.monotonic() + STOP_TIMEOUT_S
            while os.path.exists(f"/proc/{pid}") and time.monotonic() < deadline:
                time.sleep(0.1)
        if self.starter:
            self.starter.wait(timeout=STOP_TIMEOUT_S)


def fill(broker, count, via):
    return perf(broker.port, broker.pid(), broker.label,
                ["scale-fill", "--via", via, "--exchange", EXCHANGE, "--queue", QUEUE, "--count", str(count),
                 "--timeout-s", str(FILL_TIMEOUT_S)], timeout=FILL_TIMEOUT_S + 120)


def peak_rss_kib(pid):
    """VmHWM: the most resident memory the process has had (recovery's peak, read once it ends)."""
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return None


def recover_hourglass(broker, expected):
    """Starts the broker; seconds until its HTTP API first answers and until it reports exactly
    `expected` ({queue: delayed count})."""
    started = time.monotonic()
    broker.spawn()
    first_answer, counts = None, {}
    while time.monotonic() - started < RECOVERY_TIMEOUT_S:
        if broker.proc.poll() is not None:
            raise RuntimeError(f"hourglass exited while recovering; see {broker.tmp / 'hourglass.log'}")
        try:
            counts = {queue: broker.delayed(queue) for queue in expected}
        except (OSError, ValueError, KeyError):
            time.sleep(POLL_S)
            continue
        first_answer = first_answer or time.monotonic() - started
        if counts == expected:
            return {"first_http_answer_s": round(first_answer, 2),
                    "exact_count_s": round(time.monotonic() - started, 2), "counts": counts,
                    "peak_rss_kib": peak_rss_kib(broker.pid())}
        time.sleep(POLL_S)
    raise RuntimeError(f"after {RECOVERY_TIMEOUT_S} s the broker reports {counts}, expected {expected}")


def in_background(target, *args):
    """Runs target(*args) on a thread; the returned function joins it and gives its result."""
    box = {}

    def work():
        try:
            box["value"] = target(*args)
        except Exception as e:  # handed to the caller on join
            box["error"] = e

    thread = threading.Thread(target=work)
    thread.start()

    def join():
        thread.join()
        if "error" in box:
            raise box["error"]
        return box["value"]
    return join


def start_and_fill(broker, count, via, log):
    """Starts `broker`, fills it and lets its RSS settle."""
    out = {"count": count}
    out["rss_idle_kib"], _ = log.run(f"{broker.label} start", lambda: broker.start() or settled_rss_kib(broker.pid()))
    out["fill"], out["fill_s"] = log.run(f"{broker.label} fill", lambda: fill(broker, count, via))
    out["rss_filled_kib"], _ = log.run(f"{broker.label} settle", lambda: settled_rss_kib(broker.pid()))
    return out


def stop(broker, out, data_dir, log):
    """Stops `broker` (SIGTERM, timed) and measures what it left on disk."""
    _, out["stop_s"] = log.run(f"{broker.label} stop (SIGTERM)", broker.stop)
    out["disk_bytes_stopped"] = disk_bytes(data_dir)


def per_message_figures(out, waiting):
    """RSS growth over the idle broker per waiting message, filled and recovered; disk per message."""
    out["bytes_per_waiting_msg_filled"] = per_message(out["rss_filled_kib"] - out["rss_idle_kib"], out["count"])
    out["bytes_per_waiting_msg_recovered"] = per_message(
        out["rss_recovered_settled_kib"] - out["rss_idle_kib"], waiting)
    out["disk_bytes_per_msg"] = round(out["disk_bytes_stopped"] / waiting, 1)
    return out


def run_hourglass(count, args, log):
    tmp = Path(tempfile.mkdtemp(prefix="hourglass-scale-"))
    broker = ScaleHourglass(tmp)
    try:
        out = start_and_fill(broker, count, "delayed", log)
        out["tracers"], _ = log.run("tracers", lambda: perf(
            broker.port, broker.pid(), broker.label,
            ["scale-tracers", "--exchange", EXCHANGE, "--queue", TRACERS, "--count", str(args.tracers),
             "--due-in-ms", str(int(args.tracer_due_s * 1000))]))
        stop(broker, out, tmp / "data", log)
        out["recovery"], _ = log.run("restart until exact delayed counts",
                                     lambda: recover_hourglass(broker, {QUEUE: count, TRACERS: args.tracers}))
        out["rss_recovered_kib"] = rss_kib(broker.pid())
        wait_s = max(out["tracers"]["last_due_ms"] / 1000 - time.time(), 0) + TRACER_GRACE_S
        consumed = in_background(perf, broker.port, broker.pid(), broker.label,
                                 ["scale-tracers-consume", "--queue", TRACERS, "--count", str(args.tracers),
                                  "--timeout-s", f"{wait_s:.0f}"], wait_s + 120)
        out["tracers_consumed"], _ = log.run("tracers consumed", consumed)
        # Read once the tracers are in (tens of seconds after recovery): what recovery allocated
        # for a while is given back by then; a reading at once may catch it still held.
        out["rss_recovered_settled_kib"] = settled_rss_kib(broker.pid())
        out["disk_bytes_recovered"] = disk_bytes(tmp / "data")
        broker.stop()
    finally:
        if broker.proc and broker.proc.poll() is None:
            broker.proc.kill()
            broker.proc.wait()
        shutil.rmtree(tmp, ignore_errors=True)
    return per_message_figures(out, count + args.tracers)


def run_rabbitmq(count, log):
    broker = ScaleRabbitMQ(None)
    try:
        broker.wipe()
        out = start_and_fill(broker, count, "ttl", log)
        stop(broker, out, broker.base / "mnesia", log)
        broker.spawn()
        out["recovery"], took = log.run("rabbitmq restart until N messages", lambda: perf(
            broker.port, None, broker.label,
            ["depth", "--queue", QUEUE, "--messages", str(count), "--timeout-s", str(RECOVERY_TIMEOUT_S)],
            RECOVERY_TIMEOUT_S + 60))
        out["recovery"]["exact_count_s"] = took
        out["rss_recovered_kib"] = rss_kib(broker.pid())
        out["rss_recovered_settled_kib"] = settled_rss_kib(broker.pid())
    finally:
        if listening_pid(broker.port):
            broker.stop()
        broker.wipe()
    return per_message_figures(out, count)


def table(results):
    """Markdown: one column per (broker, N)."""
    columns = [(b, r) for b in ("hourglass", "rabbitmq") for r in results.get(b, [])]
    head = [f"{'Hourglass' if b == 'hourglass' else 'RabbitMQ (TTL + DLX)'} N={r['count']:,}" for b, r in columns]
    mib = lambda kib: f"{kib / 1024:,.0f}"  # noqa: E731
    rows = [
        ("fill: msg/s (whole fill, confirmed)", lambda r: f"{r['fill']['rate_per_s']:,.0f}"),
        ("fill: msg/s first tenth → last tenth",
         lambda r: f"{r['fill']['slices'][0]['msg_per_s']:,.0f} → {r['fill']['slices'][-1]['msg_per_s']:,.0f}"),
        ("fill: broker CPU µs per message", lambda r: f"{r['fill']['broker_cpu_us_per_op']:.1f}"),
        ("fill: wall time s", lambda r: f"{r['fill_s']:.1f}"),
        ("RSS idle → filled (settled): MiB", lambda r: f"{mib(r['rss_idle_kib'])} → {mib(r['rss_filled_kib'])}"),
        ("RSS per waiting message, filled: B", lambda r: f"{r['bytes_per_waiting_msg_filled']:,.0f}"),
        ("on disk after the stop: MiB (B per message)",
         lambda r: f"{r['disk_bytes_stopped'] / 2**20:,.0f} ({r['disk_bytes_per_msg']:,.0f})"),
        ("stop (SIGTERM → exit): s", lambda r: f"{r['stop_s']:.2f}"),
        ("restart until the exact count: s", lambda r: f"{r['recovery']['exact_count_s']:.2f}"),
        ("RSS when the count is first exact: MiB", lambda r: mib(r["rss_recovered_kib"])),
        ("peak RSS while recovering (VmHWM): MiB (B per waiting message)",
         lambda r: f'{mib(r["recovery"]["peak_rss_kib"])} ({r["recovery"]["peak_rss_kib"] * 1024 // r["count"]:,})'
         if r.get("recovery", {}).get("peak_rss_kib") else "—"),
        ("RSS after recovery (settled; Hourglass: once the tracers are in): MiB",
         lambda r: mib(r["rss_recovered_settled_kib"])),
        ("RSS per waiting message, recovered: B", lambda r: f"{r['bytes_per_waiting_msg_recovered']:,.0f}"),
        ("tracers across the restart: lateness p50 / p99 / max ms",
         lambda r: "{lateness_p50_ms} / {lateness_p99_ms} / {lateness_max_ms}".format(**r["tracers_consumed"])),
        ("tracers: early / missing", lambda r: "{early} / {missing}".format(**r["tracers_consumed"])),
    ]
    lines = ["| figure | " + " | ".join(head) + " |", "|---" * (len(head) + 1) + "|"]
    for name, cell in rows:
        cells = []
        for _, r in columns:
            try:
                cells.append(cell(r))
            except (KeyError, IndexError, TypeError):
                cells.append("—")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    for b, r in columns:
        lines += ["", f"{b} N={r['count']:,}, by tenth of the fill:", "",
                  "| published | elapsed s | msg/s in the tenth | RSS MiB | B per waiting message |",
                  "|---|---|---|---|---|"]
        for s in r["fill"]["slices"]:
            lines.append(f"| {s['published']:,} | {s['elapsed_s']:.2f} | {s['msg_per_s'] or 0:,.0f} | "
                         f"{(s['broker_rss_kib'] or 0) / 1024:,.0f} | {s['broker_bytes_per_waiting_msg']} |")
    return "\n".join(lines)


def binary_commit():
    """HEAD now, and the last commit made before target/release/hourglass was built (with
    --no-build the binary may be older than HEAD; uncommitted changes are not seen)."""
    git = lambda *a: subprocess.run(["git", "-C", str(ROOT), *a], capture_output=True, text=True).stdout.strip()  # noqa: E731
    built = HOURGLASS.stat().st_mtime
    return {"head": git("rev-parse", "--short", "HEAD"),
            "binary_built": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(built)),
            "last_commit_before_build": git("log", "-1", "--format=%h", f"--before=@{int(built)}")}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--counts", default="1000000", help="comma-separated N, e.g. 1000000,10000000")
    ap.add_argument("--tracers", type=int, default=1000)
    ap.add_argument("--tracer-due-s", type=float, default=60.0)
    ap.add_argument("--rabbitmq", nargs="?", const="all", default="",
                    help="the same fill on the reference RabbitMQ, for these N (comma-separated; default all)")
    ap.add_argument("--no-build", action="store_true")
    ap.add_argument("--wait-quiet-s", type=float, default=1800)
    ap.add_argument("--json", default=f"/tmp/hourglass-bench-scale-{time.strftime('%Y%m%dT%H%M%S')}.json")
    args = ap.parse_args()
    counts = [int(n) for n in args.counts.split(",") if n.strip()]
    rabbitmq_counts = counts if args.rabbitmq == "all" else [int(n) for n in args.rabbitmq.split(",") if n.strip()]
    if not args.no_build:
        subprocess.run(["cargo", "build", "--release", "-p", "hourglass", "-p", "hourglass-perf"],
                       cwd=ROOT, check=True)
    log = Log()
    results = {"started": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), **binary_commit(),
               "loadavg_at_start": loadavg(), "hourglass": [], "rabbitmq": [], "steps": log.steps}
    try:
        for count in counts:
            wait_quiet(args.wait_quiet_s)
            print(f"== hourglass N={count:,}", flush=True)
            results["hourglass"].append(run_hourglass(count, args, log))
            if count in rabbitmq_counts:
                wait_quiet(args.wait_quiet_s)
                print(f"== rabbitmq N={count:,}", flush=True)
                results["rabbitmq"].append(run_rabbitmq(count, log))
    finally:
        results["finished"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        results["loadavg_at_end"] = loadavg()
        Path(args.json).write_text(json.dumps(results, indent=1) + "\n")
        print(f"wrote {args.json}")
    print(table(results))


if __name__ == "__main__":
    main()
