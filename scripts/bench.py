#!/usr/bin/env python3
"""Side-by-side benchmark matrix: Hourglass vs the reference RabbitMQ (and LavinMQ), same machine,
same run.

Builds the release binaries, starts Hourglass (loopback, free port, temp data dir), the reference
RabbitMQ (a `rabbitmq-ref` script, see rabbitmq_ref(); 127.0.0.1:5673) and, when one is named, the
reference LavinMQ (a `lavinmq-ref` script, see lavinmq_ref(); 127.0.0.1:5674). Runs every scenario
of the standard matrix against each, rotating the brokers' order per repetition, samples each
broker's idle RSS before and after the matrix, and writes docs/benchmarks.md (medians, min-max
spread, Hourglass/peer ratios) plus the raw JSON lines.

usage: scripts/bench.py [--reps N] [--seconds S] [--only NAME[,NAME]] [--out docs/benchmarks.md]
                        [--rabbitmq-ref PATH] [--lavinmq-ref PATH]
Stops only what it started: Hourglass always, a peer only if it was not already running.
"""
import argparse
import json
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PERF = ROOT / "target/release/hourglass-perf"
HOURGLASS = ROOT / "target/release/hourglass"
# The reference RabbitMQ's control script (Debian's rabbitmq-server); RABBITMQ_REF names another.
DEFAULT_RABBITMQ_REF = ROOT / "scripts/rabbitmq_ref.sh"


def rabbitmq_ref():
    """The reference RabbitMQ's control script: `$RABBITMQ_REF` (or --rabbitmq-ref), else
    scripts/rabbitmq_ref.sh. It takes `start` / `stop` and reads RMQ_PORT
    (AMQP port, default 5673), RMQ_BASE (its data directory) and RMQ_EXTRA_CONF (rabbitmq.conf
    lines) from its environment. Exits with what to do when there is none."""
    named = os.environ.get("RABBITMQ_REF")
    ref = Path(named) if named else DEFAULT_RABBITMQ_REF
    if not (ref.is_file() and os.access(ref, os.X_OK)):
        where = f"RABBITMQ_REF={named} is not an executable file" if named else (
            f"no reference RabbitMQ: {DEFAULT_RABBITMQ_REF} does not exist")
        sys.exit(f"{where}. Set RABBITMQ_REF (or pass --rabbitmq-ref) to a script that runs "
                 "`start` / `stop` for a RabbitMQ 3.x listening on $RMQ_PORT (data in $RMQ_BASE); "
                 "or skip RabbitMQ where the script offers it (--skip-rabbitmq).")
    return ref
RMQ_PORT = 5673
LAV_PORT = 5674


def lavinmq_ref():
    """The reference LavinMQ's control script, `$LAVINMQ_REF` (or --lavinmq-ref): `start` / `stop`,
    listening on $LAV_PORT (default 5674); scripts/lavinmq_ref.sh is one, for the `lavinmq` binary
    `$LAVINMQ_BIN` names. `None` when none is named: LavinMQ is then left out."""
    named = os.environ.get("LAVINMQ_REF")
    if not named:
        return None
    ref = Path(named)
    if not (ref.is_file() and os.access(ref, os.X_OK)):
        sys.exit(f"LAVINMQ_REF={named} is not an executable file. Set it (or --lavinmq-ref) to a script "
                 "that runs `start` / `stop` for a LavinMQ listening on $LAV_PORT, or leave it unset.")
    return ref
# A run that takes longer than this has stalled; it is killed and reported as a failure.
RUN_TIMEOUT_S = 180
# In docs/benchmarks.md, everything from this line on is hand-written and kept on regeneration.
NOTES_MARKER = "<!-- notes below are kept by scripts/bench.py -->"


def matrix(seconds):
    """(name, what it measures, hourglass-perf arguments, runs on Hourglass?)

    Rows a–h are issue #24's load matrix. Idle connections are measured on a fresh Hourglass
    process each time (see main): a process that has freed memory reuses it for new
    connections, which would hide their cost."""
    d = ["--duration-s", str(seconds)]
    return [
        ("h 200 idle connections", "200 connections with one channel each, heartbeats off, held 3 s; RSS growth ÷ 200",
         ["idle-connections", "--connections", "200", "--hold-s", "3"], True),
        ("a 1-1-1 16 B auto-ack", "1 producer → 1 queue → 1 consumer, 16 B bodies, consumer no-ack, no confirms",
         ["throughput", "--size", "16", "--auto-ack"] + d, True),
        ("b 1-1-1 1 KiB manual ack", "as above, 1 KiB bodies, prefetch 1000, one basic.ack multiple=true every 100 deliveries",
         ["throughput", "--size", "1024", "--prefetch", "1000", "--ack-every", "100"] + d, True),
        ("c 1-1-1 1 KiB persistent confirms", "row b with publisher confirms (window 100), delivery-mode 2, durable queue",
         ["throughput", "--size", "1024", "--prefetch", "1000", "--ack-every", "100", "--confirm", "100",
          "--persistent", "--durable"] + d, True),
        ("1-1-1 16 B confirms", "16 B, transient, publisher confirms with at most 100 unconfirmed, consumer no-ack",
         ["throughput", "--size", "16", "--confirm", "100", "--auto-ack"] + d, True),
        ("d 4-4-4 16 B auto-ack", "4 producers → 4 queues → 4 consumers (one each), 16 B, no-ack",
         ["throughput", "-P", "4", "-C", "4", "-Q", "4", "--size", "16", "--auto-ack"] + d, True),
        ("1-1-1 16 B persistent confirms", "durable queue, delivery-mode 2, confirms window 100, consumer no-ack",
         ["throughput", "--size", "16", "--confirm", "100", "--persistent", "--durable", "--auto-ack"] + d, True),
        ("4-4-4 16 B persistent confirms", "4 producers → 4 durable queues → 4 consumers, delivery-mode 2, confirms window 100 each, no-ack",
         ["throughput", "-P", "4", "-C", "4", "-Q", "4", "--size", "16", "--confirm", "100", "--persistent", "--durable", "--auto-ack"] + d, True),
        ("e latency @1000 msg/s", "1 → 1 → 1, 16 B, paced at 1000 msg/s, send time in the body, no-ack consumer",
         ["latency", "--rate", "1000", "--size", "16"] + d, True),
        ("f basic.get 1 poller", "queue pre-filled with 200k 16 B messages, one connection doing basic.get no-ack back to back",
         ["get", "--pollers", "1", "--prefill", "200000", "--size", "16"] + d, True),
        ("f4 basic.get 4 pollers", "as above with 4 polling connections",
         ["get", "--pollers", "4", "--prefill", "200000", "--size", "16"] + d, True),
        ("g 200k TTL'd messages queued", "200,000 16 B messages with per-message TTLs of 10–20 s, queued at once; "
         "broker RSS growth ÷ 200,000, and how late they expire",
         ["ttl", "--count", "200000", "--min-ms", "10000", "--max-ms", "20000", "--grace-s", "40", "--rate", "0"], True),
    ]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def listening_pid(port):
    out = subprocess.run(["ss", "-Hltnp", f"sport = :{port}"], capture_output=True, text=True).stdout
    m = re.search(r"pid=(\d+)", out)
    return int(m.group(1)) if m else None


def wait_for_port(port, timeout_s=30):
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return True
        except OSError:
            time.sleep(0.1)
    return False


def start_hourglass(tmp):
    port = free_port()
    log = open(tmp / "hourglass.log", "a")
    proc = subprocess.Popen(
        [str(HOURGLASS), "--bind", "127.0.0.1", "--amqp-port", str(port), "--http-port", "0",
         "--metrics-port", "0", "--data-dir", str(tmp / "data")],
        stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "RUST_LOG": "warn", "NO_COLOR": "1"})
    if not wait_for_port(port):
        proc.kill()
        sys.exit(f"hourglass did not listen on {port}; see {tmp / 'hourglass.log'}")
    return proc, port


def stop_hourglass(proc):
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def start_peer(ref, port):
    """Starts the peer broker `ref` controls unless something already listens on `port`;
    returns (pid, started_by_us)."""
    pid = listening_pid(port)
    if pid:
        return pid, False
    subprocess.run([str(ref), "start"], check=True, timeout=600)
    pid = listening_pid(port)
    if not pid:
        sys.exit(f"{ref} started but nothing listens on {port}")
    return pid, True


def rss_kib(pid):
    """VmRSS of process `pid`, in KiB (None if it is gone)."""
    try:
        line = next(l for l in open(f"/proc/{pid}/status") if l.startswith("VmRSS:"))
        return int(line.split()[1])
    except (OSError, StopIteration, ValueError):
        return None


def settled_rss_kib(pid, limit_s=30, step_s=1.0, delta_kib=256):
    """A broker's RSS once it stops moving (a broker returning memory after a load keeps
    shrinking for a while), sampled every `step_s` for at most `limit_s`."""
    last = rss_kib(pid)
    deadline = time.time() + limit_s
    while last is not None and time.time() < deadline:
        time.sleep(step_s)
        now = rss_kib(pid)
        if now is None or abs(now - last) < delta_kib:
            return now
        last = now
    return last


def run_one(label, port, pid, args, log):
    url = f"amqp://guest:guest@127.0.0.1:{port}/%2f"
    cmd = [str(PERF), "--url", url, "--broker-pid", str(pid), "--label", label] + args
    print(f"  {label}: {' '.join(args)}", flush=True)
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    except subprocess.TimeoutExpired as e:
        log.write(f"# TIMEOUT {label} {args}\n")
        return {"error": f"timed out after {RUN_TIMEOUT_S} s", "stderr": (e.stderr or b"")[-2000:]}
    line = next((l for l in done.stdout.splitlines() if l.startswith("{")), None)
    human = next((l for l in done.stdout.splitlines() if l and not l.startswith("{")), "")
    if done.returncode != 0 or line is None:
        log.write(f"# FAILED {label} {args} rc={done.returncode}: {done.stderr[-2000:]}\n")
        return {"error": f"exit {done.returncode}: {done.stderr.strip().splitlines()[-1:] or ''}"}
    print(f"    {human}", flush=True)
    log.write(line + "\n")
    return json.loads(line)["results"]


def figures(kind, results):
    """The figures to tabulate for one scenario kind: {metric: value}."""
    if "error" in results:
        return {}
    out = {"broker CPU µs/op": results.get("broker_cpu_us_per_op")}
    if kind == "throughput":
        out["msg/s"] = results["msg_per_s"]
    elif kind == "latency":
        out.update({"p50 µs": results["p50_us"], "p99 µs": results["p99_us"], "max µs": results["max_us"]})
    elif kind == "get":
        out["gets/s per poller"] = results["gets_per_s_per_poller"]
    elif kind == "idle-connections":
        out = {"KiB RSS per connection": results["rss_kib_per_connection"]}
    elif kind == "ttl":
        out = {"B RSS per queued message": results.get("broker_bytes_per_message"),
               "expiry lateness p99 ms": results.get("lateness_p99_ms")}
    return out


def fmt(value):
    if value is None:
        return "–"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    return f"{value:.2f}" if abs(value) < 10 else f"{value:.1f}"


def summarize(values):
    values = [v for v in values if v is not None]
    if not values:
        return None, "n/a"
    med = statistics.median(values)
    return med, f"{fmt(med)} ({fmt(min(values))}–{fmt(max(values))})"


# Display names of the brokers a run may hold, in column order.
NAMES = {"hourglass": "Hourglass", "rabbitmq": "RabbitMQ", "lavinmq": "LavinMQ"}


def write_report(out, scenarios, collected, idle, failures, meta):
    peers = [b for b in meta["brokers"] if b != "hourglass"]
    columns = " | ".join(NAMES[b] for b in meta["brokers"])
    ratios = " | ".join(f"HG/{NAMES[p]}" for p in peers)
    lines = [
        "# Benchmarks: Hourglass vs " + " and ".join(NAMES[p] for p in peers),
        "",
        f"Run {meta['date']} by `{meta['command']}` (commit `{meta['commit']}`), {meta['reps']} repetitions per",
        f"scenario and broker, {meta['seconds']} s of publishing each, the brokers' order rotating run by run.",
        "",
        "**Machine:** " + meta["machine"] + ". Two cores shared by the broker, the load tool and other",
        "engineers' builds, so msg/s is noisy; the broker's CPU time per operation (utime+stime of the",
        "broker process from /proc over the measured window ÷ operations, 10 ms tick resolution) is the",
        "steadier figure. Both are shown as median (min–max). A ratio is Hourglass ÷ the peer, of the",
        "medians (below 1 is better for CPU, latency and memory; above 1 is better for rates).",
        "",
        "Brokers: Hourglass release build (`--bind 127.0.0.1`); " + "; ".join(meta["peers"]) + ".",
        "Load: `hourglass-perf` (raw client, < 1 µs of its own CPU per message in the plain flows; see",
        "docs/adr/0004-load-tool.md).",
        "",
        f"| scenario | figure | {columns} | {ratios} |",
        "|---|---|" + "---|" * (len(meta["brokers"]) + len(peers)),
    ]
    for name, _, args, on_hg in scenarios:
        kind = args[0]
        metrics = []
        for broker in meta["brokers"]:
            for r in collected[name][broker]:
                for m in figures(kind, r):
                    if m not in metrics:
                        metrics.append(m)
        for m in metrics:
            medians, cells = {}, []
            for broker in meta["brokers"]:
                medians[broker], text = summarize([figures(kind, r).get(m) for r in collected[name][broker]])
                cells.append(text if on_hg or broker != "hourglass" else "n/a")
            hg = medians["hourglass"]
            cells += [f"{hg / medians[p]:.3f}" if hg is not None and medians[p] else "–" for p in peers]
            lines.append(f"| {name} | {m} | " + " | ".join(cells) + " |")
    for label, key in (("idle RSS before the matrix", "before"), ("idle RSS after the matrix", "after")):
        values = [idle[b].get(key) for b in meta["brokers"]]
        cells = [fmt(v / 1024) if v else "–" for v in values]
        hg = idle["hourglass"].get(key)
        cells += [f"{hg / idle[p][key]:.3f}" if hg and idle[p].get(key) else "–" for p in peers]
        lines.append(f"| {label} | MiB | " + " | ".join(cells) + " |")
    lines += ["", "## What each scenario measures", ""]
    for name, what, args, on_hg in scenarios:
        lines.append(f"- **{name}** — {what}. `hourglass-perf {' '.join(args)}`"
                     + ("" if on_hg else " (peers only)."))
    lines += [
        "- **idle RSS before / after the matrix** — each broker's VmRSS once it stops moving, before the",
        "  first scenario (after the idle-connection runs) and after the last; Hourglass's is the process",
        "  that ran the whole matrix.",
        "",
        "Throughput runs publish for the duration (or up to 5M messages), then wait until every published",
        "message has been consumed: the window runs from the moment all connections are ready to the last",
        "delivery, so msg/s and CPU/msg count only messages that went all the way through. When a",
        "publisher outruns its consumer, the queue grows and drains inside the window.",
        "",
        "## Failures and anomalies", "",
    ]
    lines += [f"- {f}" for f in failures] or ["- none in this run"]
    lines += ["", "Raw results (one JSON line per run): `docs/benchmarks.jsonl`.", ""]
    # Hand-written analysis below the marker survives regeneration.
    previous = Path(out).read_text() if Path(out).exists() else ""
    if NOTES_MARKER in previous:
        lines += [NOTES_MARKER + previous.split(NOTES_MARKER, 1)[1].rstrip("\n"), ""]
    Path(out).write_text("\n".join(lines))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=5)
    ap.add_argument("--only", default="")
    ap.add_argument("--out", default=str(ROOT / "docs/benchmarks.md"))
    ap.add_argument("--no-build", action="store_true")
    ap.add_argument("--rabbitmq-ref", help="the reference RabbitMQ's control script (else $RABBITMQ_REF)")
    ap.add_argument("--lavinmq-ref", help="the reference LavinMQ's control script (else $LAVINMQ_REF; "
                                          "without either, LavinMQ is left out)")
    opts = ap.parse_args()
    if opts.rabbitmq_ref:
        os.environ["RABBITMQ_REF"] = opts.rabbitmq_ref
    if opts.lavinmq_ref:
        os.environ["LAVINMQ_REF"] = opts.lavinmq_ref
    # Before the build: a missing reference broker fails at once, saying why.
    peers = [("rabbitmq", rabbitmq_ref() if not listening_pid(RMQ_PORT) else None, RMQ_PORT)]
    if lavinmq_ref():
        peers.append(("lavinmq", lavinmq_ref(), LAV_PORT))
    if not opts.no_build:
        subprocess.run(["cargo", "build", "--release", "-p", "hourglass", "-p", "hourglass-perf"], cwd=ROOT, check=True)
    scenarios = [s for s in matrix(opts.seconds) if not opts.only or s[0] in opts.only.split(",")]
    tmp = Path(tempfile.mkdtemp(prefix="hourglass-bench-"))
    hg, hg_port = start_hourglass(tmp)
    running = {}  # peer → (port, pid, started by us)
    brokers = ["hourglass"] + [name for name, _, _ in peers]
    raw_path = Path(opts.out).with_suffix(".jsonl")
    collected = {name: {b: [] for b in brokers} for name, *_ in scenarios}
    idle = {b: {} for b in brokers}
    failures = []
    try:
        for name, ref, port in peers:
            pid, ours = start_peer(ref or rabbitmq_ref(), port)
            running[name] = (port, pid, ours)
        with open(raw_path, "w") as log:
            # Idle connections first, before any load has grown either broker's heap (a
            # garbage-collected broker returning memory during the window reads as negative growth).
            def idle_conns(s):
                return s[2][0] == "idle-connections"
            plan = [(rep, s) for s in scenarios if idle_conns(s) for rep in range(opts.reps)]
            load = [(rep, s) for rep in range(opts.reps) for s in scenarios if not idle_conns(s)]
            for i, (rep, (name, _, args, on_hg)) in enumerate(plan + load):
                if args[0] == "idle-connections":
                    # A fresh Hourglass, so freed memory of earlier runs is not reused.
                    stop_hourglass(hg)
                    hg, hg_port = start_hourglass(tmp)
                if i == len(plan):
                    for b in brokers:
                        idle[b]["before"] = settled_rss_kib(hg.pid if b == "hourglass" else running[b][1])
                print(f"[rep {rep + 1}/{opts.reps}] {name}", flush=True)
                order = [("hourglass", hg_port, hg.pid)] + [(b, p, pid) for b, (p, pid, _) in running.items()]
                shift = rep % len(order)
                for label, port, pid in order[shift:] + order[:shift]:
                    if label == "hourglass" and not on_hg:
                        continue
                    if label == "hourglass" and hg.poll() is not None:
                        failures.append(f"{name} rep {rep + 1}: Hourglass had exited (rc {hg.returncode})")
                        continue
                    r = run_one(label, port, pid, args, log)
                    if "error" in r:
                        failures.append(f"{name} rep {rep + 1} on {label}: {r['error']}")
                    elif r.get("complete") is False:
                        failures.append(f"{name} rep {rep + 1} on {label}: drain timed out, "
                                        f"{r['consumed']} of {r['published']} consumed")
                    collected[name][label].append(r)
            for b in brokers:
                idle[b]["after"] = settled_rss_kib(hg.pid if b == "hourglass" else running[b][1])
    finally:
        stop_hourglass(hg)
        for name, ref, _ in peers:
            if running.get(name, (0, 0, False))[2]:
                subprocess.run([str(ref or rabbitmq_ref()), "stop"], timeout=120)
    log_tail = (tmp / "hourglass.log").read_text()[-3000:]
    if log_tail.strip():
        failures.append("Hourglass log (warnings and errors):\n\n```\n" + log_tail + "\n```")
    shutil.rmtree(tmp, ignore_errors=True)
    rmq_version = subprocess.run(["dpkg-query", "-W", "-f", "${Version}", "rabbitmq-server"],
                                 capture_output=True, text=True).stdout or "unknown"
    described = {"rabbitmq": f"RabbitMQ (rabbitmq-server {rmq_version}, Debian package via `rabbitmq-ref` "
                             "(`RABBITMQ_REF`), default settings)",
                 "lavinmq": "LavinMQ (via `lavinmq-ref` (`LAVINMQ_REF`), default settings)"}
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    meta = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "command": "python3 scripts/bench.py " + " ".join(sys.argv[1:]),
        "commit": subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                                 text=True).stdout.strip(),
        "reps": opts.reps, "seconds": opts.seconds,
        "machine": f"{os.cpu_count()} vCPU ({cpu}), Linux {os.uname().release}",
        "brokers": brokers,
        "peers": [described[b] for b in brokers if b != "hourglass"],
    }
    write_report(opts.out, scenarios, collected, idle, failures, meta)
    print(f"wrote {opts.out} and {raw_path}")


if __name__ == "__main__":
    main()
