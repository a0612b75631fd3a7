#!/usr/bin/env python3
"""The SQS endpoint beside moto's SQS server (issue 26), with the same boto3 client: SendMessageBatch
and ReceiveMessage (+ DeleteMessageBatch) rates, each server's CPU per message from /proc, and
long-poll wake-up latency. Bounded: a fixed number of messages per row and 20 long polls.

--kind picks the queue (issue 40): `standard` (no groups), `fair` (a standard queue, each send's
MessageGroupId one of --groups tenants) or `fifo` (a high-throughput FIFO queue:
DeduplicationScope messageGroup, FifoThroughputLimit perMessageGroupId, --groups groups).

--queue-resident-messages N starts Hourglass with that paging limit, so that the receives take
from a paged backlog (ADR 0007).

Usage: scripts/bench_sqs.py [--hourglass target/release/hourglass] [--messages 20000]
                            [--kind standard|fair|fifo] [--groups 100] [--without-moto]
                            [--queue-resident-messages N]
Needs boto3 and moto[server] (pip). Starts both servers on free loopback ports with fresh state and
stops only them. Prints a Markdown table for docs/benchmarks.md.
"""
import argparse
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time

import boto3


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        parts = f.read().rsplit(")", 1)[1].split()
    return (int(parts[11]) + int(parts[12])) / os.sysconf("SC_CLK_TCK")


def wait_for(port):
    for _ in range(200):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise SystemExit(f"nothing listens on {port}")


def start_hourglass(binary, extra=()):
    port, data = free_port(), tempfile.mkdtemp(prefix="hg-bench-sqs-")
    proc = subprocess.Popen([binary, "--bind", "127.0.0.1", "--amqp-port", str(free_port()), "--http-port", str(free_port()),
                             "--metrics-port", str(free_port()), "--sqs-port", str(port), "--data-dir", data, *extra],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_for(port)
    return proc, port, lambda: shutil.rmtree(data, ignore_errors=True)


def start_moto():
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-p", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_for(port)
    return proc, port, lambda: None


def bench_queue(sqs, kind):
    """The queue a row loads, by --kind."""
    if kind == "fifo":
        attributes = {"FifoQueue": "true", "ContentBasedDeduplication": "true",
                      "DeduplicationScope": "messageGroup", "FifoThroughputLimit": "perMessageGroupId"}
        return sqs.create_queue(QueueName="bench.fifo", Attributes=attributes)["QueueUrl"]
    return sqs.create_queue(QueueName="bench")["QueueUrl"]


def batch_entries(kind, groups, first):
    """Ten 16-byte messages from message `first` on, with their groups where the kind has them
    (a FIFO body is unique: content-based deduplication would drop repeats)."""
    entries = []
    for j in range(10):
        n = first + j
        entry = {"Id": str(j), "MessageBody": "x" * 16 if kind != "fifo" else f"{n:016d}"}
        if kind != "standard":
            entry["MessageGroupId"] = f"g{n % groups}"
        entries.append(entry)
    return entries


def measure(name, proc, port, messages, kind="standard", groups=100):
    sqs = boto3.client("sqs", endpoint_url=f"http://127.0.0.1:{port}", region_name="us-east-1",
                       aws_access_key_id="guest", aws_secret_access_key="guest")
    url = bench_queue(sqs, kind)
    cpu, start = cpu_seconds(proc.pid), time.monotonic()
    for i in range(messages // 10):
        sqs.send_message_batch(QueueUrl=url, Entries=batch_entries(kind, groups, i * 10))
    send_s, send_cpu = time.monotonic() - start, cpu_seconds(proc.pid) - cpu
    cpu, start, received = cpu_seconds(proc.pid), time.monotonic(), 0
    deadline = start + 120
    while received < messages and time.monotonic() < deadline:
        got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages", [])
        if got:
            sqs.delete_message_batch(QueueUrl=url, Entries=[{"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(got)])
        received += len(got)
    receive_s, receive_cpu = time.monotonic() - start, cpu_seconds(proc.pid) - cpu
    # On a queue of its own: what the rows above left undrained must not answer a long poll.
    url = sqs.create_queue(QueueName="bench-wake")["QueueUrl"]
    wakes = []
    for _ in range(20):
        answer = {}

        def poll():
            answer["got"] = sqs.receive_message(QueueUrl=url, WaitTimeSeconds=5)
            answer["at"] = time.monotonic()

        poller = threading.Thread(target=poll)
        poller.start()
        time.sleep(0.2)
        sent = time.monotonic()
        sqs.send_message(QueueUrl=url, MessageBody="wake")
        poller.join(10)
        if answer.get("got", {}).get("Messages"):
            wakes.append((answer["at"] - sent) * 1000)
            m = answer["got"]["Messages"][0]
            sqs.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])
    wakes.sort()
    return {
        "name": name, "messages": messages, "received": received, "receive_deadline_hit": received < messages,
        "send_rate": messages / send_s, "send_cpu_us": send_cpu / messages * 1e6,
        "receive_rate": received / receive_s, "receive_cpu_us": receive_cpu / max(received, 1) * 1e6,
        "wake_p50": wakes[len(wakes) // 2] if wakes else None, "wake_max": wakes[-1] if wakes else None,
        "woken": len(wakes),
    }


def main():
    args = argparse.ArgumentParser()
    args.add_argument("--hourglass", default="target/release/hourglass")
    args.add_argument("--messages", type=int, default=20000)
    args.add_argument("--kind", choices=("standard", "fair", "fifo"), default="standard")
    args.add_argument("--groups", type=int, default=100)
    args.add_argument("--without-moto", action="store_true", help="Hourglass alone (moto slows down with N)")
    args.add_argument("--queue-resident-messages", type=int, help="Hourglass's paging limit per queue")
    opts = args.parse_args()
    rows = []
    paging = ["--queue-resident-messages", str(opts.queue_resident_messages)] if opts.queue_resident_messages else []
    servers = [("Hourglass", lambda: start_hourglass(opts.hourglass, paging)), ("moto", start_moto)]
    for name, start in servers[:1] if opts.without_moto else servers:
        proc, port, cleanup = start()
        try:
            rows.append(measure(name, proc, port, opts.messages, opts.kind, opts.groups))
        finally:
            proc.terminate()
            proc.wait()
            cleanup()
    print(f"{opts.kind} queue, {opts.messages} messages" + (f", {opts.groups} groups" if opts.kind != "standard" else ""))
    print("| server | SendMessageBatch msg/s | server CPU µs/msg sent | Receive+DeleteBatch msg/s | server CPU µs/msg received | long-poll wake p50 / max (of woken) |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        wake = f"{r['wake_p50']:.1f} / {r['wake_max']:.1f} ms ({r['woken']}/20)" if r["woken"] else "none of 20 woken"
        drained = "" if not r["receive_deadline_hit"] else f" ({r['received']} of {r['messages']} in 120 s)"
        print(f"| {r['name']} | {r['send_rate']:,.0f} | {r['send_cpu_us']:.1f} | {r['receive_rate']:,.0f}{drained} | {r['receive_cpu_us']:.1f} | {wake} |")


if __name__ == "__main__":
    main()
