#!/usr/bin/env python3
"""The same SQS scenarios, with the same boto3 client, against moto's SQS server and Hourglass's SQS
endpoint, side by side (issue 26): what each server answered, with what legitimately differs
between two servers normalised away (queue URLs' host, port and account or vhost, ARNs' account,
message ids, receipt handles, timestamps), and whether the two answers are the same.

Usage: scripts/sqs_side_by_side.py [--hourglass target/release/hourglass] [--only SUBSTRING] [-v]

Needs:  pip install 'moto[server]==5.2.1' 'boto3==1.43.11'   (the versions of scripts/bench_sqs.py's
run in docs/benchmarks.md). Starts moto (`python -m moto.server`) and Hourglass on free loopback
ports with fresh state, runs both sides at once (one thread each), and stops both servers (by
their process, never by name) whatever happens. Every call has a 3 s connect / 10 s read timeout
and no retries; the whole run is cut off after --deadline seconds (150). Prints a Markdown table:
scenario, moto's outcome, Hourglass's outcome, same / different. Exit status 0 whatever the
differences (they are findings), 1 if a server did not start or the deadline cut the run short.
"""
import argparse
import atexit
import hashlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

import boto3
import botocore.config
import botocore.exceptions

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "clients", "support"))
from sqs_md5 import md5_of_attributes  # noqa: E402

MOTO_VERSION = "5.2.1"
BOTO3_VERSION = "1.43.11"
CALL_CONFIG = botocore.config.Config(connect_timeout=3, read_timeout=10, retries={"max_attempts": 1, "mode": "standard"})

# --- servers ------------------------------------------------------------------------------------

STARTED = []  # Popen objects this script started; stopped by their pid at exit
CLEANUPS = []  # what to remove once they are stopped


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(port, proc, log, seconds=30):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    with open(log, errors="replace") as f:
        tail = "".join(f.readlines()[-20:])
    why = f"exited with {proc.returncode}" if proc.poll() is not None else f"did not listen within {seconds} s"
    raise SystemExit(f"the server meant for port {port} {why}; its log ends:\n{tail}")


def stop_all():
    """Stops the servers this script started (each by its own process), then removes their files."""
    for proc in STARTED:
        if proc.poll() is None:
            proc.terminate()
    for proc in STARTED:
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
    while CLEANUPS:
        CLEANUPS.pop()()


def start_hourglass(binary):
    port, data = free_port(), tempfile.mkdtemp(prefix="hg-sqs-sbs-")
    log = open(data + ".log", "wb")
    proc = subprocess.Popen([binary, "--bind", "127.0.0.1", "--amqp-port", str(free_port()), "--http-port", "0",
                             "--metrics-port", "0", "--sqs-port", str(port), "--data-dir", data],
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    STARTED.append(proc)
    CLEANUPS.append(lambda: (shutil.rmtree(data, ignore_errors=True), log.close(), os.unlink(log.name)))
    wait_for(port, proc, log.name)
    return port, log.name


def start_moto():
    port = free_port()
    log = tempfile.NamedTemporaryFile(prefix="moto-sbs-", suffix=".log", delete=False)
    proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    STARTED.append(proc)
    CLEANUPS.append(lambda: (log.close(), os.unlink(log.name)))
    wait_for(port, proc, log.name)
    return port, log.name


# --- helpers used by scenarios --------------------------------------------------------------------

def error_text(e):
    if isinstance(e, botocore.exceptions.ClientError):
        status = e.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        return f"{e.response.get('Error', {}).get('Code')} ({status})"
    return f"{type(e).__name__}"


def outcome(call):
    """'ok' or the error's code and HTTP status."""
    try:
        call()
        return "ok"
    except Exception as e:  # noqa: BLE001 - every failure is an outcome here
        return error_text(e)


def recent(timestamp, unit):
    """Whether an epoch timestamp (string, in 's' or 'ms') is within 5 minutes of now."""
    if timestamp is None:
        return "absent"
    try:
        value, kind = int(timestamp), f"epoch {unit}"
    except ValueError:
        try:
            value, kind = float(timestamp), f"epoch {unit} with a fraction"
        except ValueError:
            return "not a number"
    return kind if abs(value / (1000 if unit == "ms" else 1) - time.time()) < 300 else f"not {kind} of now"


class Side:
    def __init__(self, name, port):
        self.name, self.endpoint = name, f"http://127.0.0.1:{port}"
        self.sqs = boto3.session.Session().client(
            "sqs", endpoint_url=self.endpoint, region_name="us-east-1",
            aws_access_key_id="guest", aws_secret_access_key="guest", config=CALL_CONFIG)

    def create(self, name, **attributes):
        kwargs = {"Attributes": {k: str(v) for k, v in attributes.items()}} if attributes else {}
        return self.sqs.create_queue(QueueName=name, **kwargs)["QueueUrl"]

    def attrs(self, url, *names):
        answer = self.sqs.get_queue_attributes(QueueUrl=url, AttributeNames=list(names) or ["All"])
        return answer.get("Attributes", {})

    def receive(self, url, **kwargs):
        return self.sqs.receive_message(QueueUrl=url, **kwargs).get("Messages", [])

    def count(self, url, **kwargs):
        """A receive: 'empty', or the bodies with their ApproximateReceiveCount."""
        got = self.receive(url, AttributeNames=["ApproximateReceiveCount"], **kwargs)
        if not got:
            return "empty", []
        return ",".join(f"{m['Body']}#{m.get('Attributes', {}).get('ApproximateReceiveCount')}" for m in got), got


def normalise(text):
    text = re.sub(r"http://127\.0\.0\.1:\d+/[^/\s,;'\"\]]+/", "<url>/", text)
    return re.sub(r"arn:aws:sqs:([^:]+):[^:]+:", r"arn:aws:sqs:\1:<acct>:", text)


# --- scenarios ------------------------------------------------------------------------------------

SCENARIOS = []


def scenario(name):
    def register(fn):
        SCENARIOS.append((name, fn))
        return fn
    return register


DEFAULTS = ("VisibilityTimeout", "MessageRetentionPeriod", "MaximumMessageSize", "DelaySeconds",
            "ReceiveMessageWaitTimeSeconds")


@scenario("CreateQueue without attributes: defaults read back")
def _(s):
    a = s.attrs(s.create("sbs-defaults"))
    return " ".join(f"{k}={a.get(k)}" for k in DEFAULTS)


@scenario("GetQueueAttributes All: names on a standard queue, timestamps")
def _(s):
    a = s.attrs(s.create("sbs-names"))
    return (", ".join(sorted(a)) + f"; CreatedTimestamp {recent(a.get('CreatedTimestamp'), 's')}"
            f"; LastModifiedTimestamp {recent(a.get('LastModifiedTimestamp'), 's')}; QueueArn {a.get('QueueArn')}")


@scenario("GetQueueAttributes naming CreatedTimestamp / LastModifiedTimestamp / SqsManagedSseEnabled")
def _(s):
    url = s.create("sbs-named")
    parts = []
    for name in ("CreatedTimestamp", "LastModifiedTimestamp", "SqsManagedSseEnabled"):
        try:
            value = s.attrs(url, name).get(name)
            parts.append(f"{name}: {recent(value, 's') if 'Timestamp' in name else value}")
        except Exception as e:  # noqa: BLE001
            parts.append(f"{name}: {error_text(e)}")
    return "; ".join(parts)


@scenario("MaximumMessageSize 1,048,576 (AWS's maximum since 2025); a 300 KB message on a default queue")
def _(s):
    big = outcome(lambda: s.create("sbs-mib", MaximumMessageSize=1048576))
    url = s.create("sbs-300k")
    sent = outcome(lambda: s.sqs.send_message(QueueUrl=url, MessageBody="x" * 300_000))
    return f"CreateQueue: {big}; 300 KB send: {sent}"


@scenario("CreateQueue with attributes: read back")
def _(s):
    given = {"VisibilityTimeout": "5", "MessageRetentionPeriod": "120", "MaximumMessageSize": "2048",
             "DelaySeconds": "1", "ReceiveMessageWaitTimeSeconds": "2"}
    a = s.attrs(s.create("sbs-given", **given))
    return "as given" if all(a.get(k) == v for k, v in given.items()) else " ".join(f"{k}={a.get(k)}" for k in given)


@scenario("CreateQueue again, same attributes")
def _(s):
    first = s.create("sbs-again", VisibilityTimeout=5)
    try:
        second = s.create("sbs-again", VisibilityTimeout=5)
    except Exception as e:  # noqa: BLE001
        return error_text(e)
    return "the same URL" if second == first else f"another URL {second}"


@scenario("CreateQueue again, different attributes")
def _(s):
    s.create("sbs-again2", VisibilityTimeout=5)
    return outcome(lambda: s.create("sbs-again2", VisibilityTimeout=6))


@scenario("CreateQueue again without the attributes it was made with")
def _(s):
    s.create("sbs-again3", VisibilityTimeout=5)
    return outcome(lambda: s.create("sbs-again3"))


@scenario("GetQueueUrl of a missing queue")
def _(s):
    return outcome(lambda: s.sqs.get_queue_url(QueueName="sbs-missing"))


@scenario("an operation on a missing queue's URL (GetQueueAttributes)")
def _(s):
    url = s.create("sbs-exists")
    return outcome(lambda: s.sqs.get_queue_attributes(QueueUrl=url.replace("sbs-exists", "sbs-missing2"),
                                                      AttributeNames=["All"]))


ATTRIBUTES = {
    "colour": {"DataType": "String", "StringValue": "blue ✓"},
    "count": {"DataType": "Number", "StringValue": "42.5"},
    "raw": {"DataType": "Binary", "BinaryValue": b"\x00\x01\xff"},
    "id": {"DataType": "String.uuid", "StringValue": "1b4e28ba-2fa1-11d2-883f-0016d3cca427"},
}


@scenario("SendMessage with String/Number/Binary attributes: MD5s, attributes back")
def _(s):
    url = s.create("sbs-attrs")
    sent = s.sqs.send_message(QueueUrl=url, MessageBody="hello ✓", MessageAttributes=ATTRIBUTES)
    got = s.receive(url, MessageAttributeNames=["All"])
    back = got[0].get("MessageAttributes") if got else None
    return (f"MD5OfMessageBody {sent['MD5OfMessageBody'][:8]}… "
            f"({'= ' if sent['MD5OfMessageBody'] == hashlib.md5('hello ✓'.encode()).hexdigest() else '≠ '}AWS's), "
            f"MD5OfMessageAttributes {sent.get('MD5OfMessageAttributes', '')[:8]}… "
            f"({'= ' if sent.get('MD5OfMessageAttributes') == md5_of_attributes(ATTRIBUTES) else '≠ '}AWS's); "
            f"received: attributes {'as sent' if back == ATTRIBUTES else back}, MD5 "
            f"{'same' if got and got[0].get('MD5OfMessageAttributes') == sent.get('MD5OfMessageAttributes') else 'other'}")


@scenario("SendMessage with an attribute name starting AWS.")
def _(s):
    url = s.create("sbs-attrs-bad")
    return outcome(lambda: s.sqs.send_message(QueueUrl=url, MessageBody="x", MessageAttributes={
        "AWS.x": {"DataType": "String", "StringValue": "1"}}))


@scenario("ReceiveMessage AttributeNames All (standard queue)")
def _(s):
    url = s.create("sbs-sysattrs")
    s.sqs.send_message(QueueUrl=url, MessageBody="m")
    got = s.receive(url, AttributeNames=["All"], VisibilityTimeout=0)
    first = got[0].get("Attributes", {}) if got else {}
    again = s.receive(url, AttributeNames=["All"])
    second = again[0].get("Attributes", {}) if again else {}
    return (f"1st: {', '.join(sorted(first))}; ApproximateReceiveCount {first.get('ApproximateReceiveCount')}; "
            f"SentTimestamp {recent(first.get('SentTimestamp'), 'ms')}; "
            f"ApproximateFirstReceiveTimestamp {recent(first.get('ApproximateFirstReceiveTimestamp'), 'ms')}; "
            f"2nd: {', '.join(sorted(second))}; ApproximateReceiveCount {second.get('ApproximateReceiveCount')}")


@scenario("visibility: queue timeout 1 s, ChangeMessageVisibility 0 and 1 s")
def _(s):
    url = s.create("sbs-visibility", VisibilityTimeout=1)
    s.sqs.send_message(QueueUrl=url, MessageBody="m")
    steps = []
    got, msgs = s.count(url)
    steps.append(got)
    steps.append(s.count(url)[0])                      # in flight: invisible
    time.sleep(1.6)
    got, msgs = s.count(url)                           # the timeout ran out
    steps.append(got)
    if msgs:
        s.sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=msgs[0]["ReceiptHandle"], VisibilityTimeout=0)
    got, msgs = s.count(url)                           # visible again at once
    steps.append("after CMV 0: " + got)
    if msgs:
        s.sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=msgs[0]["ReceiptHandle"], VisibilityTimeout=1)
    steps.append("after CMV 1: " + s.count(url)[0])
    time.sleep(1.6)
    steps.append("1.6 s later: " + s.count(url)[0])
    return " → ".join(steps)


@scenario("DeleteMessage with a stale receipt handle")
def _(s):
    url = s.create("sbs-stale", VisibilityTimeout=1)
    s.sqs.send_message(QueueUrl=url, MessageBody="m")
    old = s.receive(url)[0]["ReceiptHandle"]
    time.sleep(1.6)
    new = s.receive(url, VisibilityTimeout=30)
    if not new:
        return "not received again"
    deleted = outcome(lambda: s.sqs.delete_message(QueueUrl=url, ReceiptHandle=old))
    changed = outcome(lambda: s.sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=new[0]["ReceiptHandle"],
                                                               VisibilityTimeout=0))
    after = s.count(url)[0]
    return f"delete(old handle): {deleted}; then CMV(new handle, 0): {changed}; receive: {after}"


@scenario("ChangeMessageVisibility with a stale receipt handle")
def _(s):
    url = s.create("sbs-stale-cmv", VisibilityTimeout=1)
    s.sqs.send_message(QueueUrl=url, MessageBody="m")
    old = s.receive(url)[0]["ReceiptHandle"]
    time.sleep(1.6)
    visible = outcome(lambda: s.sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=old, VisibilityTimeout=30))
    got = s.receive(url, VisibilityTimeout=30)
    again = outcome(lambda: s.sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=old, VisibilityTimeout=0))
    after = s.count(url)[0]
    return (f"while visible: {visible}; received again: {'yes' if got else 'no'}; "
            f"CMV(old, 0) while in flight again: {again}; receive: {after}")


@scenario("DeleteMessage with a malformed receipt handle")
def _(s):
    url = s.create("sbs-garbage")
    return outcome(lambda: s.sqs.delete_message(QueueUrl=url, ReceiptHandle="not-a-handle"))


@scenario("DelaySeconds 1 on the queue")
def _(s):
    url = s.create("sbs-qdelay", DelaySeconds=1)
    s.sqs.send_message(QueueUrl=url, MessageBody="m")
    at_once = s.count(url)[0]
    delayed = s.attrs(url, "ApproximateNumberOfMessagesDelayed").get("ApproximateNumberOfMessagesDelayed")
    time.sleep(1.6)
    return f"at once: {at_once} (Delayed={delayed}); 1.6 s later: {s.count(url)[0]}"


@scenario("DelaySeconds 1 on the message")
def _(s):
    url = s.create("sbs-mdelay")
    s.sqs.send_message(QueueUrl=url, MessageBody="m", DelaySeconds=1)
    at_once = s.count(url)[0]
    delayed = s.attrs(url, "ApproximateNumberOfMessagesDelayed").get("ApproximateNumberOfMessagesDelayed")
    time.sleep(1.6)
    return f"at once: {at_once} (Delayed={delayed}); 1.6 s later: {s.count(url)[0]}"


@scenario("SendMessageBatch with one invalid entry (DelaySeconds 901)")
def _(s):
    url = s.create("sbs-batch")
    r = s.sqs.send_message_batch(QueueUrl=url, Entries=[
        {"Id": "a", "MessageBody": "one"}, {"Id": "b", "MessageBody": "two", "DelaySeconds": 901}])
    failed = [f"{f['Id']}: {f.get('Code')}, SenderFault={f.get('SenderFault')!r}" for f in r.get("Failed", [])]
    return f"Successful {[e['Id'] for e in r.get('Successful', [])]}; Failed {failed}"


@scenario("DeleteMessageBatch / ChangeMessageVisibilityBatch with one malformed handle")
def _(s):
    url = s.create("sbs-batch-handles")
    s.sqs.send_message(QueueUrl=url, MessageBody="m")
    handle = s.receive(url)[0]["ReceiptHandle"]
    out = []
    for name, call in (("CMVBatch", lambda entries: s.sqs.change_message_visibility_batch(
            QueueUrl=url, Entries=[dict(e, VisibilityTimeout=5) for e in entries])),
            ("DeleteBatch", lambda entries: s.sqs.delete_message_batch(QueueUrl=url, Entries=entries))):
        r = call([{"Id": "good", "ReceiptHandle": handle}, {"Id": "bad", "ReceiptHandle": "not-a-handle"}])
        failed = [f"{f['Id']}: {f.get('Code')}, SenderFault={f.get('SenderFault')!r}" for f in r.get("Failed", [])]
        out.append(f"{name}: Successful {[e['Id'] for e in r.get('Successful', [])]}, Failed {failed}")
    return "; ".join(out)


@scenario("SendMessageBatch with duplicate ids")
def _(s):
    url = s.create("sbs-batch-dup")
    return outcome(lambda: s.sqs.send_message_batch(QueueUrl=url, Entries=[
        {"Id": "x", "MessageBody": "1"}, {"Id": "x", "MessageBody": "2"}]))


@scenario("SendMessageBatch with 11 entries")
def _(s):
    url = s.create("sbs-batch-11")
    return outcome(lambda: s.sqs.send_message_batch(QueueUrl=url, Entries=[
        {"Id": str(i), "MessageBody": "m"} for i in range(11)]))


@scenario("ReceiveMessage MaxNumberOfMessages 11")
def _(s):
    url = s.create("sbs-recv-11")
    return outcome(lambda: s.sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=11))


@scenario("SendMessage over the queue's MaximumMessageSize (1024)")
def _(s):
    url = s.create("sbs-small", MaximumMessageSize=1024)
    return (f"1024 B: {outcome(lambda: s.sqs.send_message(QueueUrl=url, MessageBody='x' * 1024))}; "
            f"1025 B: {outcome(lambda: s.sqs.send_message(QueueUrl=url, MessageBody='x' * 1025))}")


@scenario("redrive: maxReceiveCount 2 to a DLQ")
def _(s):
    dlq = s.create("sbs-dlq")
    arn = s.attrs(dlq, "QueueArn")["QueueArn"]
    policy = json.dumps({"deadLetterTargetArn": arn, "maxReceiveCount": "2"})
    source = s.create("sbs-source", VisibilityTimeout=1, RedrivePolicy=policy)
    s.sqs.send_message(QueueUrl=source, MessageBody="poison")
    steps = []
    for i in range(3):
        steps.append(f"receive {i + 1}: {s.count(source)[0]}")
        time.sleep(1.5)
    dead = s.count(dlq)[0]
    return "; ".join(steps) + f"; DLQ: {dead}"


@scenario("RedrivePolicy maxReceiveCount 1")
def _(s):
    arn = s.attrs(s.create("sbs-dlq1"), "QueueArn")["QueueArn"]
    return outcome(lambda: s.create("sbs-source1", RedrivePolicy=json.dumps({"deadLetterTargetArn": arn,
                                                                              "maxReceiveCount": 1})))


@scenario("ListDeadLetterSourceQueues")
def _(s):
    dlq = s.create("sbs-dlq2")
    arn = s.attrs(dlq, "QueueArn")["QueueArn"]
    policy = json.dumps({"deadLetterTargetArn": arn, "maxReceiveCount": "3"})
    s.create("sbs-dlsrc-a", RedrivePolicy=policy)
    other = s.create("sbs-dlsrc-b")
    s.sqs.set_queue_attributes(QueueUrl=other, Attributes={"RedrivePolicy": policy})
    urls = s.sqs.list_dead_letter_source_queues(QueueUrl=dlq).get("queueUrls", [])
    read = s.attrs(other, "RedrivePolicy").get("RedrivePolicy")
    return f"{sorted(urls)}; RedrivePolicy read back: {json.loads(read) if read else None}"


@scenario("PurgeQueue, and again at once")
def _(s):
    url = s.create("sbs-purge")
    for i in range(3):
        s.sqs.send_message(QueueUrl=url, MessageBody=str(i))
    first = outcome(lambda: s.sqs.purge_queue(QueueUrl=url))
    ready = s.attrs(url, "ApproximateNumberOfMessages").get("ApproximateNumberOfMessages")
    return f"purge: {first}; then ApproximateNumberOfMessages={ready}, receive: {s.count(url)[0]}; " \
           f"purge again: {outcome(lambda: s.sqs.purge_queue(QueueUrl=url))}"


@scenario("tags: CreateQueue tags, TagQueue, UntagQueue, an aws: key")
def _(s):
    url = s.sqs.create_queue(QueueName="sbs-tags", tags={"team": "billing"})["QueueUrl"]
    s.sqs.tag_queue(QueueUrl=url, Tags={"env": "test"})
    both = s.sqs.list_queue_tags(QueueUrl=url).get("Tags")
    s.sqs.untag_queue(QueueUrl=url, TagKeys=["team"])
    left = s.sqs.list_queue_tags(QueueUrl=url).get("Tags")
    aws = outcome(lambda: s.sqs.tag_queue(QueueUrl=url, Tags={"aws:x": "1"}))
    return f"{dict(sorted(both.items()))} → untag team → {left}; aws:x: {aws}"


@scenario("SetQueueAttributes: values read back, a bad value, an unknown name")
def _(s):
    url = s.create("sbs-set")
    s.sqs.set_queue_attributes(QueueUrl=url, Attributes={"VisibilityTimeout": "7", "DelaySeconds": "2",
                                                         "MessageRetentionPeriod": "300"})
    a = s.attrs(url)
    bad = outcome(lambda: s.sqs.set_queue_attributes(QueueUrl=url, Attributes={"VisibilityTimeout": "99999"}))
    unknown = outcome(lambda: s.sqs.set_queue_attributes(QueueUrl=url, Attributes={"Colour": "1"}))
    created_bad = outcome(lambda: s.create("sbs-set-bad", VisibilityTimeout=99999))
    retention = outcome(lambda: s.sqs.set_queue_attributes(QueueUrl=url, Attributes={"MessageRetentionPeriod": "59"}))
    zero = outcome(lambda: s.sqs.set_queue_attributes(QueueUrl=url, Attributes={"VisibilityTimeout": "0"}))
    return (f"VisibilityTimeout={a.get('VisibilityTimeout')} DelaySeconds={a.get('DelaySeconds')} "
            f"MessageRetentionPeriod={a.get('MessageRetentionPeriod')}; VisibilityTimeout 99999: {bad}; "
            f"Colour: {unknown}; CreateQueue VisibilityTimeout 99999: {created_bad}; "
            f"MessageRetentionPeriod 59: {retention}; VisibilityTimeout 0: {zero}")


@scenario("FIFO: CreateQueue with/without .fifo and FifoQueue")
def _(s):
    both = outcome(lambda: s.create("sbs-made.fifo", FifoQueue="true"))
    a = s.attrs(s.create("sbs-made.fifo", FifoQueue="true")) if both == "ok" else {}
    fifo_attributes = {k: a[k] for k in ("FifoQueue", "ContentBasedDeduplication", "DeduplicationScope",
                                         "FifoThroughputLimit") if k in a}
    no_suffix = outcome(lambda: s.create("sbs-nosuffix", FifoQueue="true"))
    no_attribute = outcome(lambda: s.create("sbs-noattr.fifo"))
    false = outcome(lambda: s.create("sbs-false.fifo", FifoQueue="false"))
    on_standard = outcome(lambda: s.create("sbs-cbd", ContentBasedDeduplication="true"))
    return (f".fifo+FifoQueue: {both} {fifo_attributes}; FifoQueue without .fifo: {no_suffix}; "
            f".fifo without FifoQueue: {no_attribute}; .fifo with FifoQueue false: {false}; "
            f"ContentBasedDeduplication on a standard queue: {on_standard}")


@scenario("FIFO: send without MessageGroupId / without dedup id / with per-message DelaySeconds")
def _(s):
    url = s.create("sbs-send.fifo", FifoQueue="true")
    return (f"no group: {outcome(lambda: s.sqs.send_message(QueueUrl=url, MessageBody='x', MessageDeduplicationId='d'))}; "
            f"no dedup id: {outcome(lambda: s.sqs.send_message(QueueUrl=url, MessageBody='x', MessageGroupId='g'))}; "
            f"DelaySeconds 1: {outcome(lambda: s.sqs.send_message(QueueUrl=url, MessageBody='x', MessageGroupId='g', MessageDeduplicationId='e', DelaySeconds=1))}")


@scenario("FIFO: a duplicate MessageDeduplicationId within 5 minutes")
def _(s):
    url = s.create("sbs-dedup.fifo", FifoQueue="true")
    one = s.sqs.send_message(QueueUrl=url, MessageBody="first", MessageGroupId="g", MessageDeduplicationId="d")
    two = s.sqs.send_message(QueueUrl=url, MessageBody="second", MessageGroupId="g", MessageDeduplicationId="d")
    bodies = [m["Body"] for m in s.receive(url, MaxNumberOfMessages=10)]
    return (f"2nd send ok; MessageId {'same' if one['MessageId'] == two['MessageId'] else 'new'}, "
            f"SequenceNumber {'same' if one.get('SequenceNumber') == two.get('SequenceNumber') else 'new'}; queue holds {bodies}")


@scenario("FIFO: ContentBasedDeduplication")
def _(s):
    url = s.create("sbs-content.fifo", FifoQueue="true", ContentBasedDeduplication="true")
    one = s.sqs.send_message(QueueUrl=url, MessageBody="same", MessageGroupId="g")
    two = s.sqs.send_message(QueueUrl=url, MessageBody="same", MessageGroupId="g")
    three = s.sqs.send_message(QueueUrl=url, MessageBody="other", MessageGroupId="g")
    got = s.receive(url, MaxNumberOfMessages=10, AttributeNames=["All"])
    dedup = got[0]["Attributes"].get("MessageDeduplicationId") if got else None
    return (f"same body: MessageId {'same' if one['MessageId'] == two['MessageId'] else 'new'}; "
            f"other body: {'new' if three['MessageId'] != one['MessageId'] else 'same'}; queue holds "
            f"{[m['Body'] for m in got]}; MessageDeduplicationId = SHA-256 of body: "
            f"{dedup == hashlib.sha256(b'same').hexdigest()}")


@scenario("FIFO: group order, a receive while a group's message is in flight")
def _(s):
    url = s.create("sbs-order.fifo", FifoQueue="true", ContentBasedDeduplication="true")
    for body, group in (("g1-a", "g1"), ("g1-b", "g1"), ("g2-c", "g2")):
        s.sqs.send_message(QueueUrl=url, MessageBody=body, MessageGroupId=group)
    first = s.receive(url, MaxNumberOfMessages=1, VisibilityTimeout=10)
    second = s.receive(url, MaxNumberOfMessages=10, VisibilityTimeout=10)
    for m in first:
        s.sqs.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])
    third = s.receive(url, MaxNumberOfMessages=10, VisibilityTimeout=10)
    return (f"1st (max 1): {[m['Body'] for m in first]}; 2nd while g1-a in flight: {[m['Body'] for m in second]}; "
            f"after deleting g1-a: {[m['Body'] for m in third]}")


@scenario("FIFO: SequenceNumber, received system attributes")
def _(s):
    url = s.create("sbs-seq.fifo", FifoQueue="true")
    sent = [s.sqs.send_message(QueueUrl=url, MessageBody=str(i), MessageGroupId="g", MessageDeduplicationId=str(i))
            for i in range(5)]
    numbers = [m.get("SequenceNumber") for m in sent]
    got = s.receive(url, MaxNumberOfMessages=10, AttributeNames=["All"])
    a = got[0].get("Attributes", {}) if got else {}
    present = all(n and n.isdigit() for n in numbers)
    increasing = present and all(int(a) < int(b) for a, b in zip(numbers, numbers[1:]))
    order = "absent" if not present else "present, increasing" if increasing else "present, not increasing"
    return (f"send: SequenceNumber {order} (5 sends, one group); "
            f"received: {', '.join(sorted(a))}; SequenceNumber same as send's: {a.get('SequenceNumber') == numbers[0]}")


@scenario("fair queue: a noisy tenant (30 of 30 in flight) after a quiet one; MessageGroupId back")
def _(s):
    url = s.create("sbs-tenants")
    for start in range(0, 40, 10):
        s.sqs.send_message_batch(QueueUrl=url, Entries=[
            {"Id": str(i), "MessageBody": f"busy-{i}", "MessageGroupId": "busy"} for i in range(start, start + 10)])
    held = sum(len(s.receive(url, MaxNumberOfMessages=10, VisibilityTimeout=60)) for _ in range(3))
    s.sqs.send_message(QueueUrl=url, MessageBody="quiet-0", MessageGroupId="quiet")
    got = s.receive(url, MaxNumberOfMessages=2, VisibilityTimeout=60, MessageSystemAttributeNames=["MessageGroupId"])
    return (f"{held} of busy in flight; next two: "
            f"{[(m['Body'], m.get('Attributes', {}).get('MessageGroupId')) for m in got]}")


@scenario("ListQueues: prefix, MaxResults 2 / NextToken")
def _(s):
    made = sorted(s.create(f"sbs-lq-{c}") for c in "abc")
    everything = sorted(s.sqs.list_queues(QueueNamePrefix="sbs-lq-").get("QueueUrls", []))
    page = s.sqs.list_queues(QueueNamePrefix="sbs-lq-", MaxResults=2)
    rest = s.sqs.list_queues(QueueNamePrefix="sbs-lq-", MaxResults=2, NextToken=page["NextToken"]) \
        if page.get("NextToken") else {}
    paged = sorted(page.get("QueueUrls", []) + rest.get("QueueUrls", []))
    return (f"prefix: {'the 3' if everything == made else everything}; pages: {len(page.get('QueueUrls', []))} + "
            f"{len(rest.get('QueueUrls', []))}, NextToken on the 1st {'NextToken' in page}, on the 2nd "
            f"{'NextToken' in rest}, together {'the 3' if paged == made else paged}")


@scenario("ListQueues with a prefix nothing matches")
def _(s):
    none = s.sqs.list_queues(QueueNamePrefix="sbs-zzz")
    return f"QueueUrls {none['QueueUrls'] if 'QueueUrls' in none else 'absent'}"


@scenario("long poll WaitTimeSeconds 1 on an empty queue")
def _(s):
    url = s.create("sbs-longpoll")
    start = time.monotonic()
    got = s.receive(url, WaitTimeSeconds=1)
    took = time.monotonic() - start
    when = "under 0.8 s" if took < 0.8 else "after ~1 s" if took < 2 else "after over 2 s"
    return f"{'empty' if not got else got} {when}"


@scenario("long poll WaitTimeSeconds 2 woken by a send 0.3 s later")
def _(s):
    url = s.create("sbs-wake")
    answer = {}

    def poll():
        try:
            answer["got"] = s.receive(url, WaitTimeSeconds=2)
        except Exception as e:  # noqa: BLE001
            answer["got"] = error_text(e)
        answer["at"] = time.monotonic()

    poller = threading.Thread(target=poll, daemon=True)
    poller.start()
    time.sleep(0.3)
    sent = time.monotonic()
    s.sqs.send_message(QueueUrl=url, MessageBody="wake")
    poller.join(5)
    got = answer.get("got")
    if not isinstance(got, list) or not got:
        return f"not woken: {got}"
    took = answer["at"] - sent
    return f"{got[0]['Body']} {'within 0.5 s of the send' if took < 0.5 else 'after 0.5 s or more'}"


@scenario("queue's ReceiveMessageWaitTimeSeconds 1: a receive without WaitTimeSeconds waits")
def _(s):
    url = s.create("sbs-longpoll-q", ReceiveMessageWaitTimeSeconds=1)
    start = time.monotonic()
    got = s.receive(url)
    took = time.monotonic() - start
    when = "under 0.8 s" if took < 0.8 else "after ~1 s" if took < 2 else "after over 2 s"
    return f"{'empty' if not got else got} {when}"


@scenario("DeleteQueue, then SendMessage to it")
def _(s):
    url = s.create("sbs-deleted")
    s.sqs.delete_queue(QueueUrl=url)
    return outcome(lambda: s.sqs.send_message(QueueUrl=url, MessageBody="x"))


# --- running ----------------------------------------------------------------------------------------

def run_side(side, scenarios, results, timings):
    for name, fn in scenarios:
        start = time.monotonic()
        try:
            results[name] = normalise(fn(side))
        except Exception as e:  # noqa: BLE001 - a scenario that breaks is an outcome too
            results[name] = f"scenario failed: {normalise(error_text(e))}"
        timings[name] = time.monotonic() - start


def cell(text):
    return text.replace("|", "\\|").replace("\n", " ")


def main():
    args = argparse.ArgumentParser()
    args.add_argument("--hourglass", default=None, help="binary (default: target/release/hourglass, else target/debug)")
    args.add_argument("--only", default=None, help="run the scenarios whose name contains this")
    args.add_argument("--deadline", type=float, default=150.0, help="seconds for the scenarios, both sides")
    args.add_argument("-v", "--verbose", action="store_true", help="each scenario's time on each side")
    opts = args.parse_args()
    binary = opts.hourglass or next((b for b in ("target/release/hourglass", "target/debug/hourglass")
                                     if os.path.exists(b)), None)
    if not binary or not os.path.exists(binary):
        raise SystemExit("no Hourglass binary: cargo build --release --locked --bin hourglass, or pass --hourglass")
    try:
        import moto  # noqa: E402 - only to name its version; its server runs in its own process
    except ImportError:
        raise SystemExit(f"moto is missing: pip install 'moto[server]=={MOTO_VERSION}' 'boto3=={BOTO3_VERSION}'")
    if moto.__version__ != MOTO_VERSION or boto3.__version__ != BOTO3_VERSION:
        print(f"note: moto {moto.__version__} / boto3 {boto3.__version__}, not the pinned "
              f"{MOTO_VERSION} / {BOTO3_VERSION}", file=sys.stderr)

    began = time.monotonic()
    atexit.register(stop_all)
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: sys.exit(130))
    moto_port, _ = start_moto()
    hg_port, hg_log = start_hourglass(binary)
    scenarios = [(n, f) for n, f in SCENARIOS if not opts.only or opts.only in n]
    sides = [Side("moto", moto_port), Side("Hourglass", hg_port)]
    results = {side.name: {} for side in sides}
    timings = {side.name: {} for side in sides}
    threads = [threading.Thread(target=run_side, args=(side, scenarios, results[side.name], timings[side.name]),
                                daemon=True) for side in sides]
    for t in threads:
        t.start()
    deadline = time.monotonic() + opts.deadline
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    cut_short = any(t.is_alive() for t in threads)
    # Copies: a thread still running after the deadline may add to the dicts while the table is made.
    results = {k: dict(v) for k, v in results.items()}
    stop_all()

    print(f"moto {moto.__version__}, boto3 {boto3.__version__}, Hourglass {binary}\n")
    print("| scenario | moto | Hourglass | |")
    print("|---|---|---|---|")
    counts = {"same": 0, "**different**": 0, "not run": 0}
    for name, _ in scenarios:
        m = results["moto"].get(name, "not run (deadline)")
        h = results["Hourglass"].get(name, "not run (deadline)")
        verdict = "not run" if name not in results["moto"] or name not in results["Hourglass"] \
            else "same" if m == h else "**different**"
        counts[verdict] += 1
        print(f"| {cell(name)} | {cell(m)} | {cell(h)} | {verdict} |")
    print(f"\n{len(scenarios)} scenarios: {counts['same']} same, {counts['**different**']} different, "
          f"{counts['not run']} not run; {time.monotonic() - began:.1f} s in all (servers started and stopped included)")
    if opts.verbose:
        for side in sides:
            slow = ", ".join(f"{n[:30]} {t:.1f}" for n, t in timings[side.name].items())
            print(f"\n{side.name} per scenario (s): {slow}")
    if cut_short:
        print(f"\nthe deadline ({opts.deadline:.0f} s) cut the run short", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
