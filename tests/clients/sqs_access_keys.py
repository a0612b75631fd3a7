"""Access keys for the SQS endpoint (issue 26), as an operator hands them out: made over the HTTP
API for a user, used by boto3 with that user's permissions, in the vhost the key names, listed
without their secret, not readable from the data directory, revoked. Usage: sqs_access_keys.py AMQP_PORT (SQS_PORT,
HTTP_PORT and DATA_DIR in the environment)."""
import base64
import json
import os
import sys
import urllib.error
import urllib.request

import boto3
import botocore.exceptions

SQS = f"http://127.0.0.1:{os.environ['SQS_PORT']}"
API = f"http://127.0.0.1:{os.environ['HTTP_PORT']}"
AUTH = "Basic " + base64.b64encode(b"guest:guest").decode()


def api(method, path, body=None):
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(API + path, data=data, method=method,
                                     headers={"Authorization": AUTH, "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            text = response.read()
            return response.status, json.loads(text) if text else None
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")


def sqs_as(key, secret):
    return boto3.client("sqs", endpoint_url=SQS, region_name="eu-west-1",
                        aws_access_key_id=key, aws_secret_access_key=secret)


def code_of(call):
    try:
        call()
    except botocore.exceptions.ClientError as e:
        return e.response["Error"]["Code"]
    raise AssertionError("no error")


for user, read in (("sqs-worker", ".*"), ("sqs-reader", "^keys-")):
    assert api("PUT", f"/api/users/{user}", {"password": "pw", "tags": ""})[0] in (201, 204)
    write = ".*" if user == "sqs-worker" else "^$"
    status, _ = api("PUT", f"/api/permissions/%2F/{user}", {"configure": ".*", "write": write, "read": read})
    assert status in (201, 204), status

status, key = api("POST", "/api/users/sqs-worker/access-keys", {})
assert status == 201 and key["access_key_id"].startswith("HGAK") and len(key["secret_access_key"]) == 40, (status, key)
status, listed = api("GET", "/api/users/sqs-worker/access-keys")
assert status == 200 and [k["access_key_id"] for k in listed] == [key["access_key_id"]], listed
assert key["secret_access_key"] not in json.dumps(listed), "a listing shows no secret"
assert api("POST", "/api/users/nobody/access-keys", {})[0] == 404

# The key acts as its user, with its permissions.
worker = sqs_as(key["access_key_id"], key["secret_access_key"])
url = worker.create_queue(QueueName="keys-jobs")["QueueUrl"]
worker.send_message(QueueUrl=url, MessageBody="signed by a key")
got = worker.receive_message(QueueUrl=url, AttributeNames=["SenderId"])["Messages"][0]
assert got["Attributes"]["SenderId"] == "sqs-worker", got
worker.delete_message(QueueUrl=url, ReceiptHandle=got["ReceiptHandle"])
_, reader_key = api("POST", "/api/users/sqs-reader/access-keys", {})
reader = sqs_as(reader_key["access_key_id"], reader_key["secret_access_key"])
assert code_of(lambda: reader.send_message(QueueUrl=url, MessageBody="x")) == "AccessDenied"
assert "Messages" not in reader.receive_message(QueueUrl=url), "read is allowed on ^keys-"
# SenderId names who sent the message, not who receives it (issue 40 item 2).
worker.send_message(QueueUrl=url, MessageBody="from the worker")
got = reader.receive_message(QueueUrl=url, AttributeNames=["SenderId"], WaitTimeSeconds=2)["Messages"][0]
assert got["Attributes"]["SenderId"] == "sqs-worker", got
reader.delete_message(QueueUrl=url, ReceiptHandle=got["ReceiptHandle"])
assert code_of(lambda: sqs_as(key["access_key_id"], "x" * 40).list_queues()) == "SignatureDoesNotMatch"

# Two keys a user at most; the secret is nowhere in the data directory's files.
assert api("POST", "/api/users/sqs-worker/access-keys", {})[0] == 201
status, refused = api("POST", "/api/users/sqs-worker/access-keys", {})
assert status == 400 and "revoke one first" in refused["reason"], (status, refused)
secret = key["secret_access_key"].encode()
for root, _, files in os.walk(os.environ["DATA_DIR"]):
    for name in files:
        with open(os.path.join(root, name), "rb") as f:
            assert secret not in f.read(), f"the secret is readable in {name}"

# A key names the vhost it acts in: its queues are made, found and listed there; it goes with
# its vhost.
assert api("PUT", "/api/vhosts/sqs-billing")[0] in (201, 204)
assert api("PUT", "/api/users/sqs-biller", {"password": "pw", "tags": ""})[0] in (201, 204)
assert api("PUT", "/api/permissions/sqs-billing/sqs-biller", {"configure": ".*", "write": ".*", "read": ".*"})[0] in (201, 204)
status, refused = api("POST", "/api/users/sqs-biller/access-keys", {"vhost": "sqs-nowhere"})
assert status == 400 and "sqs-nowhere" in refused["reason"], (status, refused)
status, billing_key = api("POST", "/api/users/sqs-biller/access-keys", {"vhost": "sqs-billing"})
assert status == 201 and billing_key["vhost"] == "sqs-billing", billing_key
assert [k["vhost"] for k in api("GET", "/api/users/sqs-biller/access-keys")[1]] == ["sqs-billing"]
assert [k["vhost"] for k in api("GET", "/api/users/sqs-worker/access-keys")[1]] == ["/", "/"]
biller = sqs_as(billing_key["access_key_id"], billing_key["secret_access_key"])
invoices = biller.create_queue(QueueName="invoices")["QueueUrl"]
assert invoices == f"{SQS}/sqs-billing/invoices", invoices
assert biller.list_queues()["QueueUrls"] == [invoices]
assert biller.get_queue_url(QueueName="invoices")["QueueUrl"] == invoices
biller.send_message(QueueUrl=invoices, MessageBody="in billing")
assert api("GET", "/api/queues/sqs-billing/invoices")[0] == 200
assert api("GET", "/api/queues/%2F/invoices")[0] == 404
assert code_of(lambda: biller.get_queue_url(QueueName="keys-jobs")) == "AWS.SimpleQueueService.NonExistentQueue"
assert api("DELETE", "/api/vhosts/sqs-billing")[0] == 204
assert code_of(lambda: biller.list_queues()) == "InvalidClientTokenId"
assert api("GET", "/api/users/sqs-biller/access-keys")[1] == []
assert api("DELETE", "/api/users/sqs-biller")[0] == 204

# Revoked, the key stops working at once; deleting the user takes its keys.
assert api("DELETE", f"/api/users/sqs-worker/access-keys/{key['access_key_id']}")[0] == 204
assert code_of(lambda: worker.list_queues()) == "InvalidClientTokenId"
assert api("DELETE", f"/api/users/sqs-worker/access-keys/{key['access_key_id']}")[0] == 404
assert api("DELETE", "/api/users/sqs-reader")[0] == 204
assert code_of(lambda: reader.list_queues()) == "InvalidClientTokenId"
worker_again = api("GET", "/api/users/sqs-worker/access-keys")[1]
sqs_as("guest", "guest").delete_queue(QueueUrl=url)
assert api("DELETE", "/api/users/sqs-worker")[0] == 204
print(f"access keys: every check passed ({len(worker_again)} key left before the user went)")
