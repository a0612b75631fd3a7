"""boto3 against Hourglass's SQS endpoint (issue 26), as an SQS user's code is written, with pika on
the same queues: queues made, found and listed; FIFO queues (groups in order, deduplication); messages sent with attributes (their MD5s checked
here, independently of the broker), received under a visibility timeout, seen again when it runs
out, deleted; batches with per-entry failures; redrive to a dead-letter queue; long polls woken by
an AMQP publish; wrong keys refused with AWS's codes. Usage: sqs_boto3.py AMQP_PORT (the SQS port
in SQS_PORT)."""
import hashlib
import json
import os
import sys
import threading
import time

import boto3
import botocore.exceptions
import pika

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "support"))
from sqs_md5 import md5_of_attributes  # noqa: E402

AMQP_PORT = int(sys.argv[1])
ENDPOINT = f"http://127.0.0.1:{os.environ['SQS_PORT']}"


def client(key="guest", secret="guest"):
    return boto3.client("sqs", endpoint_url=ENDPOINT, region_name="us-east-1",
                        aws_access_key_id=key, aws_secret_access_key=secret)

def code_of(call):
    try:
        call()
    except botocore.exceptions.ClientError as e:
        return e.response["Error"]["Code"], e.response["ResponseMetadata"]["HTTPStatusCode"]
    raise AssertionError("no error")


sqs = client()
url = sqs.create_queue(QueueName="boto-jobs", Attributes={"VisibilityTimeout": "1"})["QueueUrl"]
assert url == f"{ENDPOINT}/%2F/boto-jobs", url
assert sqs.create_queue(QueueName="boto-jobs", Attributes={"VisibilityTimeout": "1"})["QueueUrl"] == url, "idempotent"
assert sqs.create_queue(QueueName="boto-jobs")["QueueUrl"] == url, "attributes not given are not compared"
assert code_of(lambda: sqs.create_queue(QueueName="boto-jobs", Attributes={"VisibilityTimeout": "2"})) == (
    "QueueAlreadyExists", 400)
try:
    sqs.create_queue(QueueName="boto-jobs", Attributes={"VisibilityTimeout": "2"})
except botocore.exceptions.ClientError as e:
    assert e.response["Error"]["Message"].endswith("for attribute VisibilityTimeout"), e.response
made = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["CreatedTimestamp", "LastModifiedTimestamp"])["Attributes"]
assert abs(int(made["CreatedTimestamp"]) - time.time()) < 60 and made["LastModifiedTimestamp"] == made["CreatedTimestamp"], made
assert sqs.get_queue_url(QueueName="boto-jobs")["QueueUrl"] == url
assert url in sqs.list_queues(QueueNamePrefix="boto-")["QueueUrls"]
assert "QueueUrls" not in sqs.list_queues(QueueNamePrefix="zzz") or not sqs.list_queues(QueueNamePrefix="zzz")["QueueUrls"]
try:
    sqs.get_queue_url(QueueName="boto-missing")
    raise AssertionError("a missing queue was found")
except sqs.exceptions.QueueDoesNotExist:
    pass

# Send with attributes: the digests are AWS's.
attributes = {
    "colour": {"DataType": "String", "StringValue": "blue"},
    "count": {"DataType": "Number", "StringValue": "42"},
    "raw": {"DataType": "Binary", "BinaryValue": b"\x00\x01\xff"},
    "id": {"DataType": "String.uuid", "StringValue": "1b4e28ba-2fa1-11d2-883f-0016d3cca427"},
}
sent = sqs.send_message(QueueUrl=url, MessageBody="hello ✓", MessageAttributes=attributes)
assert sent["MD5OfMessageBody"] == hashlib.md5("hello ✓".encode()).hexdigest()
assert sent["MD5OfMessageAttributes"] == md5_of_attributes(attributes)

# Receive: invisible for the timeout, then back with its count one up; deleted, gone. Received
# for 30 s and then set to 1 s, so that a stall on a busy machine cannot bring it back before
# the checks that it is invisible (the queue's own 1 s is checked on boto-source below).
got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, MessageAttributeNames=["All"],
                          AttributeNames=["All"], VisibilityTimeout=30)["Messages"]
assert len(got) == 1 and got[0]["Body"] == "hello ✓" and got[0]["MessageId"] == sent["MessageId"], got
assert got[0]["MessageAttributes"] == attributes, got[0]["MessageAttributes"]
assert got[0]["MD5OfMessageAttributes"] == md5_of_attributes(attributes)
assert got[0]["Attributes"]["ApproximateReceiveCount"] == "1"
assert "Messages" not in sqs.receive_message(QueueUrl=url), "invisible while its timeout runs"
counts = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
assert (counts["ApproximateNumberOfMessages"], counts["ApproximateNumberOfMessagesNotVisible"]) == ("0", "1"), counts
assert counts["VisibilityTimeout"] == "1" and counts["QueueArn"].endswith(":boto-jobs"), counts
sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=got[0]["ReceiptHandle"], VisibilityTimeout=1)
again = sqs.receive_message(QueueUrl=url, WaitTimeSeconds=5, AttributeNames=["ApproximateReceiveCount"],
                            VisibilityTimeout=30)["Messages"]
assert again[0]["MessageId"] == sent["MessageId"] and again[0]["Attributes"]["ApproximateReceiveCount"] == "2"
assert again[0]["ReceiptHandle"] != got[0]["ReceiptHandle"]
sqs.delete_message(QueueUrl=url, ReceiptHandle=again[0]["ReceiptHandle"])
sqs.delete_message(QueueUrl=url, ReceiptHandle=again[0]["ReceiptHandle"])  # deleting twice is no error
# MessageAttributeNames with a prefix wildcard (issue 40, item 12): `Custom.*` selects Custom.a and
# Custom.b, not Other nor Customer.
prefixed = {name: {"DataType": "String", "StringValue": name} for name in ["Custom.a", "Custom.b", "Other", "Customer"]}
sqs.send_message(QueueUrl=url, MessageBody="prefixed", MessageAttributes=prefixed)
picked = sqs.receive_message(QueueUrl=url, WaitTimeSeconds=5, MessageAttributeNames=["Custom.*"],
                             VisibilityTimeout=30)["Messages"][0]
assert sorted(picked["MessageAttributes"]) == ["Custom.a", "Custom.b"], picked.get("MessageAttributes")
sqs.delete_message(QueueUrl=url, ReceiptHandle=picked["ReceiptHandle"])
assert code_of(lambda: sqs.delete_message(QueueUrl=url, ReceiptHandle="6.2.1.1")) == ("ReceiptHandleIsInvalid", 400)
assert "Messages" not in sqs.receive_message(QueueUrl=url, WaitTimeSeconds=2), "deleted for good"

# ChangeMessageVisibility to 0: visible again at once.
sqs.send_message(QueueUrl=url, MessageBody="soon")
handle = sqs.receive_message(QueueUrl=url, VisibilityTimeout=600)["Messages"][0]["ReceiptHandle"]
sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=handle, VisibilityTimeout=0)
back = sqs.receive_message(QueueUrl=url)["Messages"][0]
sqs.delete_message(QueueUrl=url, ReceiptHandle=back["ReceiptHandle"])

# Batches: per-entry failures beside successes; batch-wide errors.
batch = sqs.send_message_batch(QueueUrl=url, Entries=[
    {"Id": "a", "MessageBody": "one"},
    {"Id": "b", "MessageBody": "two", "DelaySeconds": 901},
    {"Id": "c", "MessageBody": "three", "MessageAttributes": {"AWS.bad": {"DataType": "String", "StringValue": "x"}}},
])
assert sorted(e["Id"] for e in batch["Successful"]) == ["a"], batch
assert sorted(e["Id"] for e in batch["Failed"]) == ["b", "c"], batch
assert code_of(lambda: sqs.send_message_batch(QueueUrl=url, Entries=[{"Id": "x", "MessageBody": "1"}, {"Id": "x", "MessageBody": "2"}])) == ("AWS.SimpleQueueService.BatchEntryIdsNotDistinct", 400)
assert code_of(lambda: sqs.send_message_batch(QueueUrl=url, Entries=[{"Id": str(i), "MessageBody": "m"} for i in range(11)])) == ("AWS.SimpleQueueService.TooManyEntriesInBatchRequest", 400)
handles = [m["ReceiptHandle"] for m in sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)["Messages"]]
deleted = sqs.delete_message_batch(QueueUrl=url, Entries=[{"Id": f"d{i}", "ReceiptHandle": h} for i, h in enumerate(handles)])
assert len(deleted["Successful"]) == len(handles) == 1, deleted

# AMQP and SQS on one queue, both ways; a long poll is woken by an AMQP publish.
connection = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", AMQP_PORT))
channel = connection.channel()
woken = {}


def long_poll():
    started = time.monotonic()
    woken["messages"] = sqs.receive_message(QueueUrl=url, WaitTimeSeconds=10, MessageAttributeNames=["All"]).get("Messages")
    woken["at"] = time.monotonic()
    woken["started"] = started


poller = threading.Thread(target=long_poll)
poller.start()
time.sleep(0.3)
published = time.monotonic()
channel.basic_publish("", "boto-jobs", b"from amqp", pika.BasicProperties(headers={"n": 5, "who": "pika"}))
poller.join(15)
assert woken["messages"][0]["Body"] == "from amqp", woken
assert woken["messages"][0]["MessageAttributes"] == {
    "n": {"DataType": "Number", "StringValue": "5"}, "who": {"DataType": "String", "StringValue": "pika"}}
wake_ms = (woken["at"] - published) * 1000
assert wake_ms < 500, f"long poll woke {wake_ms:.0f} ms after the publish"
sqs.delete_message(QueueUrl=url, ReceiptHandle=woken["messages"][0]["ReceiptHandle"])
sqs.send_message(QueueUrl=url, MessageBody="to amqp", MessageAttributes={"colour": {"DataType": "String", "StringValue": "red"}})
method, properties, body = channel.basic_get("boto-jobs", auto_ack=True)
assert body == b"to amqp" and properties.headers["colour"] in (b"red", "red"), properties
assert properties.delivery_mode == 2 and properties.message_id, properties

# Issue 40, item 3: a message published over AMQP without a timestamp has a SentTimestamp (when
# the broker queued it), as AWS always answers one.
before_ms = int(time.time() * 1000)
channel.basic_publish("", "boto-jobs", b"age me")
after_ms = int(time.time() * 1000)
# The publish came over another connection: a short poll can reach the broker before it does.
aged = sqs.receive_message(QueueUrl=url, AttributeNames=["All"], WaitTimeSeconds=5)["Messages"][0]
assert aged["Body"] == "age me", aged
sent = int(aged["Attributes"]["SentTimestamp"])
assert before_ms - 1000 <= sent <= after_ms + 1000, (before_ms, sent, after_ms)
sqs.delete_message(QueueUrl=url, ReceiptHandle=aged["ReceiptHandle"])

# Issue 40, item 17: a queue declared over AMQP shows its MessageRetentionPeriod: its message TTL
# (a policy's too), or 1,209,600 (AWS's longest) for a queue whose messages never expire.
channel.queue_declare("amqp-kept")
channel.queue_declare("amqp-minute", arguments={"x-message-ttl": 60000})
for name, retention in [("amqp-kept", "1209600"), ("amqp-minute", "60")]:
    amqp_url = sqs.get_queue_url(QueueName=name)["QueueUrl"]
    shown = sqs.get_queue_attributes(QueueUrl=amqp_url, AttributeNames=["All"])["Attributes"]
    assert shown["MessageRetentionPeriod"] == retention, (name, shown)
    sqs.delete_queue(QueueUrl=amqp_url)

# Redrive: after maxReceiveCount receives without a delete, the message is in the dead-letter queue.
dlq = sqs.create_queue(QueueName="boto-dlq")["QueueUrl"]
dlq_arn = sqs.get_queue_attributes(QueueUrl=dlq, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
policy = '{"deadLetterTargetArn": "%s", "maxReceiveCount": "2"}' % dlq_arn
source = sqs.create_queue(QueueName="boto-source", Attributes={"VisibilityTimeout": "1", "RedrivePolicy": policy})["QueueUrl"]
assert sqs.get_queue_attributes(QueueUrl=source, AttributeNames=["RedrivePolicy"])["Attributes"]["RedrivePolicy"]
assert sqs.list_dead_letter_source_queues(QueueUrl=dlq)["queueUrls"] == [source]
# SetQueueAttributes changes the queue in place: a redrive added, a timeout changed, a bad value refused.
later = sqs.create_queue(QueueName="boto-later")["QueueUrl"]
sqs.set_queue_attributes(QueueUrl=later, Attributes={"RedrivePolicy": policy, "VisibilityTimeout": "600"})
assert sorted(sqs.list_dead_letter_source_queues(QueueUrl=dlq)["queueUrls"]) == sorted([source, later])
assert sqs.get_queue_attributes(QueueUrl=later, AttributeNames=["VisibilityTimeout"])["Attributes"]["VisibilityTimeout"] == "600"
sqs.set_queue_attributes(QueueUrl=later, Attributes={"RedrivePolicy": ""})
assert sqs.list_dead_letter_source_queues(QueueUrl=dlq)["queueUrls"] == [source]
assert code_of(lambda: sqs.set_queue_attributes(QueueUrl=later, Attributes={"VisibilityTimeout": "99999"})) == ("InvalidAttributeValue", 400)
# A queue's MaximumMessageSize holds for what is sent to it.
small = sqs.create_queue(QueueName="boto-small", Attributes={"MaximumMessageSize": "1024"})["QueueUrl"]
sqs.send_message(QueueUrl=small, MessageBody="x" * 1024)
assert code_of(lambda: sqs.send_message(QueueUrl=small, MessageBody="x" * 1025)) == ("InvalidParameterValue", 400)
sqs.delete_queue(QueueUrl=small)

# Tags: made with the queue, added, listed, removed.
tagged = sqs.create_queue(QueueName="boto-tagged", tags={"team": "billing"})["QueueUrl"]
sqs.tag_queue(QueueUrl=tagged, Tags={"env": "test"})
assert sqs.list_queue_tags(QueueUrl=tagged)["Tags"] == {"team": "billing", "env": "test"}
sqs.untag_queue(QueueUrl=tagged, TagKeys=["team"])
assert sqs.list_queue_tags(QueueUrl=tagged)["Tags"] == {"env": "test"}
assert code_of(lambda: sqs.tag_queue(QueueUrl=tagged, Tags={"aws:x": "1"})) == ("InvalidParameterValue", 400)
# UntagQueue with no keys is refused, as on AWS (issue 40, item 10).
assert code_of(lambda: sqs.untag_queue(QueueUrl=tagged, TagKeys=[])) == ("InvalidParameterValue", 400)
assert sqs.list_queue_tags(QueueUrl=tagged)["Tags"] == {"env": "test"}
sqs.delete_queue(QueueUrl=tagged)
sqs.delete_queue(QueueUrl=later)
first_page = sqs.list_queues(QueueNamePrefix="boto-", MaxResults=1)
assert len(first_page["QueueUrls"]) == 1 and first_page["NextToken"], first_page
rest = sqs.list_queues(QueueNamePrefix="boto-", MaxResults=10, NextToken=first_page["NextToken"])["QueueUrls"]
assert sorted(first_page["QueueUrls"] + rest) == sorted([dlq, url, source]), rest
sqs.send_message(QueueUrl=source, MessageBody="poison")
for receive in (1, 2):
    got = sqs.receive_message(QueueUrl=source, WaitTimeSeconds=5, AttributeNames=["ApproximateReceiveCount"])["Messages"]
    assert got[0]["Attributes"]["ApproximateReceiveCount"] == str(receive), got
dead = sqs.receive_message(QueueUrl=dlq, WaitTimeSeconds=5, AttributeNames=["ApproximateReceiveCount"])["Messages"]
assert dead[0]["Body"] == "poison", dead
# Receives are counted across the redrive (issue 40, item 21): two in the source, one here.
assert dead[0]["Attributes"]["ApproximateReceiveCount"] == "3", dead
assert "Messages" not in sqs.receive_message(QueueUrl=source, WaitTimeSeconds=2)
sqs.change_message_visibility(QueueUrl=dlq, ReceiptHandle=dead[0]["ReceiptHandle"], VisibilityTimeout=0)
# ChangeMessageVisibility stops at 12 hours in all since the receive (issue 40, item 8).
sqs.send_message(QueueUrl=dlq, MessageBody="held")
held = None
for _ in range(10):
    for m in sqs.receive_message(QueueUrl=dlq, WaitTimeSeconds=1, MaxNumberOfMessages=10, VisibilityTimeout=60).get("Messages", []):
        if m["Body"] == "held":
            held = m
        else:
            sqs.change_message_visibility(QueueUrl=dlq, ReceiptHandle=m["ReceiptHandle"], VisibilityTimeout=0)
    if held:
        break
time.sleep(1.1)
assert code_of(lambda: sqs.change_message_visibility(QueueUrl=dlq, ReceiptHandle=held["ReceiptHandle"], VisibilityTimeout=43200)) == ("InvalidParameterValue", 400)
sqs.change_message_visibility(QueueUrl=dlq, ReceiptHandle=held["ReceiptHandle"], VisibilityTimeout=43000)
sqs.delete_message(QueueUrl=dlq, ReceiptHandle=held["ReceiptHandle"])
# Policy, RedriveAllowPolicy and the KMS attributes are kept and read back as given (issue 40,
# items 15 and 16: SNS subscriptions and Terraform write and read them); bad values are refused.
queue_policy = json.dumps({"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Principal": "*", "Action": "sqs:SendMessage"}]})
kept = sqs.create_queue(QueueName="boto-kept", Attributes={"Policy": queue_policy, "KmsMasterKeyId": "alias/aws/sqs"})["QueueUrl"]
kept_attributes = sqs.get_queue_attributes(QueueUrl=kept, AttributeNames=["All"])["Attributes"]
assert json.loads(kept_attributes["Policy"]) == json.loads(queue_policy), kept_attributes
assert (kept_attributes["KmsMasterKeyId"], kept_attributes["KmsDataKeyReusePeriodSeconds"]) == ("alias/aws/sqs", "300"), kept_attributes
sqs.set_queue_attributes(QueueUrl=kept, Attributes={"KmsDataKeyReusePeriodSeconds": "600", "Policy": ""})
kept_attributes = sqs.get_queue_attributes(QueueUrl=kept, AttributeNames=["All"])["Attributes"]
assert kept_attributes["KmsDataKeyReusePeriodSeconds"] == "600" and "Policy" not in kept_attributes, kept_attributes
for bad in [{"Policy": "not json"}, {"KmsDataKeyReusePeriodSeconds": "59"}, {"SqsManagedSseEnabled": "yes"}]:
    assert code_of(lambda: sqs.set_queue_attributes(QueueUrl=kept, Attributes=bad)) == ("InvalidAttributeValue", 400), bad
# AddPermission and RemovePermission (issue 40, item 15): labelled Allow statements in the
# Policy, as AWS writes them; a label twice, or one not there, is InvalidParameterValue.
sqs.add_permission(QueueUrl=kept, Label="partner", AWSAccountIds=["111122223333"], Actions=["SendMessage"])
granted = json.loads(sqs.get_queue_attributes(QueueUrl=kept, AttributeNames=["Policy"])["Attributes"]["Policy"])
assert granted["Statement"][-1]["Sid"] == "partner" and granted["Statement"][-1]["Effect"] == "Allow", granted
assert granted["Statement"][-1]["Principal"] == {"AWS": "arn:aws:iam::111122223333:root"}, granted
assert code_of(lambda: sqs.add_permission(QueueUrl=kept, Label="partner", AWSAccountIds=["1"], Actions=["SendMessage"])) == ("InvalidParameterValue", 400)
assert code_of(lambda: sqs.add_permission(QueueUrl=kept, Label="owner", AWSAccountIds=["1"], Actions=["DeleteQueue"])) == ("InvalidParameterValue", 400)
sqs.remove_permission(QueueUrl=kept, Label="partner")
assert "Policy" not in sqs.get_queue_attributes(QueueUrl=kept, AttributeNames=["Policy"]).get("Attributes", {}), "the last statement went"
assert code_of(lambda: sqs.remove_permission(QueueUrl=kept, Label="partner")) == ("InvalidParameterValue", 400)
sqs.delete_queue(QueueUrl=kept)
# A queue's VisibilityTimeout of 0 (issue 40, item 18): a received message is visible again at once.
instant = sqs.create_queue(QueueName="boto-instant", Attributes={"VisibilityTimeout": "0"})["QueueUrl"]
assert sqs.get_queue_attributes(QueueUrl=instant, AttributeNames=["VisibilityTimeout"])["Attributes"]["VisibilityTimeout"] == "0"
sqs.send_message(QueueUrl=instant, MessageBody="again")
for count in ("1", "2"):
    seen = sqs.receive_message(QueueUrl=instant, WaitTimeSeconds=5, AttributeNames=["ApproximateReceiveCount"])["Messages"]
    assert seen[0]["Attributes"]["ApproximateReceiveCount"] == count, seen
sqs.set_queue_attributes(QueueUrl=instant, Attributes={"VisibilityTimeout": "5"})
assert sqs.get_queue_attributes(QueueUrl=instant, AttributeNames=["VisibilityTimeout"])["Attributes"]["VisibilityTimeout"] == "5"
sqs.delete_queue(QueueUrl=instant)
# maxReceiveCount 1 (issue 40, item 18): one receive, then the message is in the DLQ; 0 is refused.
once_policy = '{"deadLetterTargetArn": "%s", "maxReceiveCount": 1}' % dlq_arn
once = sqs.create_queue(QueueName="boto-once", Attributes={"VisibilityTimeout": "1", "RedrivePolicy": once_policy})["QueueUrl"]
read_back = json.loads(sqs.get_queue_attributes(QueueUrl=once, AttributeNames=["RedrivePolicy"])["Attributes"]["RedrivePolicy"])
assert read_back["maxReceiveCount"] == 1, read_back
sqs.send_message(QueueUrl=once, MessageBody="once")
assert sqs.receive_message(QueueUrl=once, WaitTimeSeconds=5)["Messages"][0]["Body"] == "once"
assert "Messages" not in sqs.receive_message(QueueUrl=once, WaitTimeSeconds=2), "not received twice"
moved = []
for _ in range(10):
    moved += sqs.receive_message(QueueUrl=dlq, WaitTimeSeconds=1, MaxNumberOfMessages=10).get("Messages", [])
    if any(m["Body"] == "once" for m in moved):
        break
assert sorted(m["Body"] for m in moved) == ["once", "poison"], moved
for m in moved:  # "once" leaves; "poison" stays for the move task below
    if m["Body"] == "once":
        sqs.delete_message(QueueUrl=dlq, ReceiptHandle=m["ReceiptHandle"])
    else:
        sqs.change_message_visibility(QueueUrl=dlq, ReceiptHandle=m["ReceiptHandle"], VisibilityTimeout=0)
zero_policy = '{"deadLetterTargetArn": "%s", "maxReceiveCount": 0}' % dlq_arn
assert code_of(lambda: sqs.create_queue(QueueName="boto-never", Attributes={"RedrivePolicy": zero_policy})) == ("InvalidAttributeValue", 400)
sqs.delete_queue(QueueUrl=once)

# A message-move task redrives the dead-letter queue back to the source.
task = sqs.start_message_move_task(SourceArn=dlq_arn, MaxNumberOfMessagesPerSecond=50)["TaskHandle"]
for _ in range(100):
    status = sqs.list_message_move_tasks(SourceArn=dlq_arn)["Results"][0]
    if status["Status"] != "RUNNING":
        break
    time.sleep(0.05)
assert (status["Status"], status["ApproximateNumberOfMessagesMoved"]) == ("COMPLETED", 1), status
redriven = sqs.receive_message(QueueUrl=source, WaitTimeSeconds=5)["Messages"]
assert redriven[0]["Body"] == "poison", redriven
sqs.delete_message(QueueUrl=source, ReceiptHandle=redriven[0]["ReceiptHandle"])
assert code_of(lambda: sqs.cancel_message_move_task(TaskHandle=task)) == ("ResourceNotFoundException", 400)

# A FIFO queue: each group in order, groups in parallel, duplicates within 5 minutes
# answered with the first message's id and not stored again; AMQP publishers deduplicate too.
fifo = sqs.create_queue(QueueName="boto-orders.fifo", Attributes={"FifoQueue": "true"})["QueueUrl"]
fifo_attributes = sqs.get_queue_attributes(QueueUrl=fifo, AttributeNames=["All"])["Attributes"]
assert (fifo_attributes["FifoQueue"], fifo_attributes["ContentBasedDeduplication"]) == ("true", "false"), fifo_attributes
assert code_of(lambda: sqs.create_queue(QueueName="boto-not-fifo.fifo")) == ("InvalidParameterValue", 400)
assert code_of(lambda: sqs.send_message(QueueUrl=fifo, MessageBody="x")) == ("MissingParameter", 400)
assert code_of(lambda: sqs.send_message(QueueUrl=fifo, MessageBody="x", MessageGroupId="g")) == ("InvalidParameterValue", 400)
first = sqs.send_message(QueueUrl=fifo, MessageBody="g1-a", MessageGroupId="g1", MessageDeduplicationId="a")
again = sqs.send_message(QueueUrl=fifo, MessageBody="g1-a", MessageGroupId="g1", MessageDeduplicationId="a")
assert again["MessageId"] == first["MessageId"] and int(first["SequenceNumber"]) > 0, (first, again)
sqs.send_message_batch(QueueUrl=fifo, Entries=[
    {"Id": "b", "MessageBody": "g2-b", "MessageGroupId": "g2", "MessageDeduplicationId": "b"},
    {"Id": "c", "MessageBody": "g1-c", "MessageGroupId": "g1", "MessageDeduplicationId": "c"}])
# Confirmed, so that the receives below cannot run before it arrived (a dropped duplicate is
# confirmed too).
confirmed = connection.channel()
confirmed.confirm_delivery()
confirmed.basic_publish("", "boto-orders.fifo", b"amqp duplicate",
                        pika.BasicProperties(headers={"x-deduplication-header": "c"}))
taken = sqs.receive_message(QueueUrl=fifo, MaxNumberOfMessages=2, AttributeNames=["All"])["Messages"]
assert [m["Body"] for m in taken] == ["g1-a", "g1-c"], "as many of one group as it has: %r" % taken
assert (taken[0]["Attributes"]["MessageGroupId"], taken[0]["Attributes"]["MessageDeduplicationId"]) == ("g1", "a"), taken
# Groups in parallel (issue 40, item 19): g1 is in flight, g2 is received by another worker.
other = sqs.receive_message(QueueUrl=fifo, MaxNumberOfMessages=10)["Messages"]
assert [m["Body"] for m in other] == ["g2-b"], other
assert "Messages" not in sqs.receive_message(QueueUrl=fifo), "nothing while g1 and g2 are in flight"
# g1-a back from its timeout is g1's first again; g1-c waits behind it.
sqs.change_message_visibility(QueueUrl=fifo, ReceiptHandle=taken[0]["ReceiptHandle"], VisibilityTimeout=0)
sqs.delete_message(QueueUrl=fifo, ReceiptHandle=taken[1]["ReceiptHandle"])
again = sqs.receive_message(QueueUrl=fifo, MaxNumberOfMessages=10, WaitTimeSeconds=2)["Messages"]
assert [m["Body"] for m in again] == ["g1-a"], again
sqs.delete_message_batch(QueueUrl=fifo, Entries=[{"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]}
                                                 for i, m in enumerate(other + again)])
content = sqs.create_queue(QueueName="boto-content.fifo",
                           Attributes={"FifoQueue": "true", "ContentBasedDeduplication": "true"})["QueueUrl"]
one = sqs.send_message(QueueUrl=content, MessageBody="same body", MessageGroupId="g")
two = sqs.send_message(QueueUrl=content, MessageBody="same body", MessageGroupId="g")
assert one["MessageId"] == two["MessageId"], (one, two)
assert sqs.get_queue_attributes(QueueUrl=content, AttributeNames=["ApproximateNumberOfMessages"])["Attributes"] == {
    "ApproximateNumberOfMessages": "1"}
assert code_of(lambda: sqs.send_message(QueueUrl=url, MessageBody="x", MessageDeduplicationId="d")) == (
    "InvalidParameterValue", 400)
for queue in (fifo, content):
    sqs.delete_queue(QueueUrl=queue)

# A fair queue (SQS's fair queues): a standard queue's MessageGroupId names a tenant. Tenant
# "busy" holds 30 of 30 messages in flight (noisy), so a later quiet tenant's message is received
# before busy's older ones; MessageGroupId comes back on receive.
fair = sqs.create_queue(QueueName="boto-tenants", Attributes={"VisibilityTimeout": "60"})["QueueUrl"]
for start in range(0, 40, 10):
    sqs.send_message_batch(QueueUrl=fair, Entries=[
        {"Id": str(i), "MessageBody": "busy-%d" % i, "MessageGroupId": "busy"} for i in range(start, start + 10)])
in_flight = []
for _ in range(3):
    in_flight += sqs.receive_message(QueueUrl=fair, MaxNumberOfMessages=10)["Messages"]
assert [m["Body"] for m in in_flight] == ["busy-%d" % i for i in range(30)], in_flight
sqs.send_message(QueueUrl=fair, MessageBody="quiet-0", MessageGroupId="quiet")
taken = sqs.receive_message(QueueUrl=fair, MaxNumberOfMessages=2, MessageSystemAttributeNames=["MessageGroupId"])["Messages"]
assert [(m["Body"], m["Attributes"]["MessageGroupId"]) for m in taken] == [("quiet-0", "quiet"), ("busy-30", "busy")], taken
assert code_of(lambda: sqs.send_message(QueueUrl=fair, MessageBody="x", MessageGroupId="bad id")) == (
    "InvalidParameterValue", 400)
sqs.delete_queue(QueueUrl=fair)

# A late delete (AWS's rule, issue 40 item 1): once the visibility timeout has run out, the old
# handle still deletes the message while it waits in the queue, not received again by anyone.
late = sqs.create_queue(QueueName="boto-late")["QueueUrl"]
sqs.send_message(QueueUrl=late, MessageBody="slow work")
slow = sqs.receive_message(QueueUrl=late, VisibilityTimeout=1)["Messages"][0]
deadline = time.monotonic() + 10
while sqs.get_queue_attributes(QueueUrl=late, AttributeNames=["ApproximateNumberOfMessages"])[
        "Attributes"]["ApproximateNumberOfMessages"] != "1":
    assert time.monotonic() < deadline, "the message never came back"
    time.sleep(0.05)
# ChangeMessageVisibility by the expired handle (issue 40, item 20): a success that changes
# nothing while the message waits, as AWS answers; once it is received again, the old handle is
# InvalidParameterValue.
sqs.change_message_visibility(QueueUrl=late, ReceiptHandle=slow["ReceiptHandle"], VisibilityTimeout=60)
assert sqs.get_queue_attributes(QueueUrl=late, AttributeNames=["ApproximateNumberOfMessages"])[
    "Attributes"]["ApproximateNumberOfMessages"] == "1", "still visible"
sqs.delete_message(QueueUrl=late, ReceiptHandle=slow["ReceiptHandle"])
sqs.send_message(QueueUrl=late, MessageBody="taken again")
taken_once = sqs.receive_message(QueueUrl=late, VisibilityTimeout=0)["Messages"][0]
taken_twice = sqs.receive_message(QueueUrl=late, VisibilityTimeout=30, WaitTimeSeconds=2)["Messages"][0]
assert code_of(lambda: sqs.change_message_visibility(
    QueueUrl=late, ReceiptHandle=taken_once["ReceiptHandle"], VisibilityTimeout=10)) == ("InvalidParameterValue", 400)
sqs.delete_message(QueueUrl=late, ReceiptHandle=taken_twice["ReceiptHandle"])
assert "Messages" not in sqs.receive_message(QueueUrl=late, WaitTimeSeconds=1), "deleted, not delivered again"
sqs.delete_queue(QueueUrl=late)

# PurgeQueue takes the messages in flight too, as AWS does (issue 40 item 4): the received one
# neither counts nor comes back when its visibility timeout runs out.
purged = sqs.create_queue(QueueName="boto-purge")["QueueUrl"]
for body in ("held", "ready"):
    sqs.send_message(QueueUrl=purged, MessageBody=body)
assert len(sqs.receive_message(QueueUrl=purged, VisibilityTimeout=1)["Messages"]) == 1
sqs.purge_queue(QueueUrl=purged)
counts = sqs.get_queue_attributes(QueueUrl=purged, AttributeNames=["All"])["Attributes"]
assert (counts["ApproximateNumberOfMessages"], counts["ApproximateNumberOfMessagesNotVisible"]) == ("0", "0"), counts
assert "Messages" not in sqs.receive_message(QueueUrl=purged, WaitTimeSeconds=2), "nothing comes back"
sqs.delete_queue(QueueUrl=purged)

# As AWS (issue 40 items 5, 6, 7, 11): a bare queue name is a QueueUrl; DelaySeconds 0 is taken
# on a FIFO send; a missing queue or a malformed URL is NonExistentQueue, for DeleteQueue too; an
# empty batch names its own entry type.
named = sqs.create_queue(QueueName="boto-named")["QueueUrl"]
sqs.send_message(QueueUrl="boto-named", MessageBody="by name")
assert sqs.receive_message(QueueUrl="boto-named")["Messages"][0]["Body"] == "by name"
ordered = sqs.create_queue(QueueName="boto-zero.fifo", Attributes={"FifoQueue": "true"})["QueueUrl"]
sqs.send_message(QueueUrl=ordered, MessageBody="x", MessageGroupId="g", MessageDeduplicationId="z", DelaySeconds=0)
for missing in ("http://localhost/%2F/boto-nowhere", "http://localhost/not/a/queue/url", "boto-nowhere"):
    assert code_of(lambda: sqs.delete_queue(QueueUrl=missing)) == ("AWS.SimpleQueueService.NonExistentQueue", 400), missing
try:
    sqs.delete_message_batch(QueueUrl=named, Entries=[])
    raise AssertionError("an empty batch was taken")
except botocore.exceptions.ClientError as e:
    assert e.response["Error"]["Message"] == "There should be at least one DeleteMessageBatchRequestEntry in the request.", e.response
except botocore.exceptions.ParamValidationError:
    pass  # botocore refuses it before sending; the Rust test checks the server's text
for queue in (named, ordered):
    sqs.delete_queue(QueueUrl=queue)

# A sender's AWSTraceHeader comes back on receive (issue 40 item 13).
traced = sqs.create_queue(QueueName="boto-traced")["QueueUrl"]
trace = "Root=1-5759e988-bd862e3fe1be46a994272793;Sampled=1"
sent = sqs.send_message(QueueUrl=traced, MessageBody="x",
                        MessageSystemAttributes={"AWSTraceHeader": {"DataType": "String", "StringValue": trace}})
assert len(sent["MD5OfMessageSystemAttributes"]) == 32, sent
got = sqs.receive_message(QueueUrl=traced, MessageSystemAttributeNames=["AWSTraceHeader"])["Messages"][0]
assert got["Attributes"]["AWSTraceHeader"] == trace, got
sqs.delete_queue(QueueUrl=traced)

# Wrong keys and malformed requests get AWS's codes; a deleted queue is gone.
assert code_of(lambda: client(secret="wrong").list_queues()) == ("SignatureDoesNotMatch", 403)
assert code_of(lambda: client(key="AKIAUNKNOWN").list_queues()) == ("InvalidClientTokenId", 403)
assert code_of(lambda: sqs.create_queue(QueueName="bad name!")) == ("InvalidParameterValue", 400)
assert code_of(lambda: sqs.create_queue(QueueName="q", Attributes={"Colour": "1"})) == ("InvalidAttributeName", 400)
assert code_of(lambda: sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=11)) == ("InvalidParameterValue", 400)
for queue in (url, dlq, source):
    sqs.delete_queue(QueueUrl=queue)
assert code_of(lambda: sqs.get_queue_attributes(QueueUrl=url)) == ("AWS.SimpleQueueService.NonExistentQueue", 400)
connection.close()
print(f"boto3 over SQS: every check passed (long poll woke {wake_ms:.0f} ms after an AMQP publish)")
