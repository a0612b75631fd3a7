"""SQS code written against the Query protocol (botocore 1.31.80, the last before SQS's switch to
JSON, and the AWS CLI v1 of the same release) against Hourglass's SQS endpoint (issue 26), with
pika on the same queue: queues made with attributes and tags, messages sent singly and in batches
with attributes, received with their system attributes, their visibility changed, deleted; a
missing queue raises QueueDoesNotExist; the AWS CLI sends and receives. Usage: sqs_query.py
AMQP_PORT (the SQS port in SQS_PORT; the AWS CLI as `aws` beside this Python)."""
import json
import os
import subprocess
import sys

import boto3
import pika

AMQP_PORT = int(sys.argv[1])
ENDPOINT = f"http://127.0.0.1:{os.environ['SQS_PORT']}"

sqs = boto3.client("sqs", endpoint_url=ENDPOINT, region_name="us-east-1",
                   aws_access_key_id="guest", aws_secret_access_key="guest")
assert sqs.meta.service_model.protocol == "query", sqs.meta.service_model.protocol

url = sqs.create_queue(QueueName="query-jobs", Attributes={"VisibilityTimeout": "30", "DelaySeconds": "0"},
                       tags={"team": "billing"})["QueueUrl"]
assert url == f"{ENDPOINT}/%2F/query-jobs", url
assert sqs.get_queue_url(QueueName="query-jobs")["QueueUrl"] == url
assert url in sqs.list_queues(QueueNamePrefix="query-")["QueueUrls"]
assert sqs.list_queue_tags(QueueUrl=url)["Tags"] == {"team": "billing"}
attributes = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
assert attributes["VisibilityTimeout"] == "30", attributes
try:
    sqs.get_queue_url(QueueName="query-missing")
    raise AssertionError("a missing queue was found")
except sqs.exceptions.QueueDoesNotExist:
    pass

# boto3 checks MD5OfMessageBody and MD5OfMessageAttributes of every answer itself.
body = 'line one\r\nline two & <three> "quoted"'
sent = sqs.send_message(QueueUrl=url, MessageBody=body, MessageAttributes={
    "colour": {"DataType": "String", "StringValue": "blue"},
    "count": {"DataType": "Number", "StringValue": "7"},
    "raw": {"DataType": "Binary", "BinaryValue": b"\x00\x01\xff"}})
batch = sqs.send_message_batch(QueueUrl=url, Entries=[
    {"Id": "a", "MessageBody": "batch a"},
    {"Id": "b", "MessageBody": "batch b", "MessageAttributes": {"k": {"DataType": "String", "StringValue": "v"}}},
    {"Id": "c", "MessageBody": "too late", "DelaySeconds": 901}])
assert sorted(e["Id"] for e in batch["Successful"]) == ["a", "b"], batch
assert [(e["Id"], e["SenderFault"]) for e in batch["Failed"]] == [("c", True)], batch

got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=5, AttributeNames=["All"],
                          MessageAttributeNames=["All"])["Messages"]
first = next(m for m in got if m["MessageId"] == sent["MessageId"])
assert first["Body"] == body, repr(first["Body"])
assert first["MessageAttributes"]["raw"]["BinaryValue"] == b"\x00\x01\xff", first
assert first["MessageAttributes"]["count"] == {"DataType": "Number", "StringValue": "7"}, first
assert first["Attributes"]["ApproximateReceiveCount"] == "1", first
while len(got) < 3:
    got += sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=5).get("Messages", [])
assert sorted(m["Body"] for m in got) == sorted([body, "batch a", "batch b"]), got
changed = sqs.change_message_visibility_batch(QueueUrl=url, Entries=[
    {"Id": "x", "ReceiptHandle": first["ReceiptHandle"], "VisibilityTimeout": 0}])
assert [e["Id"] for e in changed["Successful"]] == ["x"], changed
again = sqs.receive_message(QueueUrl=url, WaitTimeSeconds=5, AttributeNames=["ApproximateReceiveCount"])["Messages"]
assert again[0]["MessageId"] == sent["MessageId"] and again[0]["Attributes"]["ApproximateReceiveCount"] == "2", again
handles = [m["ReceiptHandle"] for m in got if m["MessageId"] != sent["MessageId"]] + [again[0]["ReceiptHandle"]]
deleted = sqs.delete_message_batch(QueueUrl=url, Entries=[{"Id": f"d{i}", "ReceiptHandle": h} for i, h in enumerate(handles)])
assert len(deleted["Successful"]) == 3 and not deleted.get("Failed"), deleted

# The same queue over AMQP: a pika publish is received by Query-protocol code.
amqp = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", AMQP_PORT))
amqp.channel().basic_publish("", "query-jobs", b"from pika", pika.BasicProperties(headers={"origin": "amqp"}))
amqp.close()
got = sqs.receive_message(QueueUrl=url, WaitTimeSeconds=5, MessageAttributeNames=["All"])["Messages"]
assert got[0]["Body"] == "from pika" and got[0]["MessageAttributes"]["origin"]["StringValue"] == "amqp", got
sqs.delete_message(QueueUrl=url, ReceiptHandle=got[0]["ReceiptHandle"])

# The AWS CLI v1 of the same release.
aws = [os.path.join(os.path.dirname(sys.executable), "aws"), "sqs", "--endpoint-url", ENDPOINT, "--output", "json"]
env = dict(os.environ, AWS_ACCESS_KEY_ID="guest", AWS_SECRET_ACCESS_KEY="guest", AWS_DEFAULT_REGION="us-east-1")


def cli(*args):
    done = subprocess.run(aws + list(args), env=env, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, (args, done.stderr)
    return json.loads(done.stdout) if done.stdout.strip() else None


cli_url = cli("create-queue", "--queue-name", "query-cli")["QueueUrl"]
cli("send-message", "--queue-url", cli_url, "--message-body", "from the cli")
received = cli("receive-message", "--queue-url", cli_url, "--wait-time-seconds", "5")["Messages"]
assert received[0]["Body"] == "from the cli", received
cli("delete-message", "--queue-url", cli_url, "--receipt-handle", received[0]["ReceiptHandle"])
assert cli("get-queue-attributes", "--queue-url", cli_url, "--attribute-names", "ApproximateNumberOfMessages",
           "ApproximateNumberOfMessagesNotVisible")["Attributes"] == {
    "ApproximateNumberOfMessages": "0", "ApproximateNumberOfMessagesNotVisible": "0"}
missing = subprocess.run(aws + ["get-queue-url", "--queue-name", "query-nowhere"], env=env, capture_output=True,
                         text=True, timeout=30)
assert missing.returncode != 0 and "NonExistentQueue" in missing.stderr, missing.stderr
cli("delete-queue", "--queue-url", cli_url)
sqs.delete_queue(QueueUrl=url)
print("sqs_query: ok")
