// @aws-sdk/client-sqs (the AWS SDK for JavaScript v3) against Hourglass's SQS endpoint (issue 26):
// a queue made and found, messages sent singly and in a batch with attributes, received with
// long polling and their attributes, their visibility changed, deleted; AWS's error names.
// Usage: node sqs_sdk_v3.mjs (SQS_PORT in the environment).
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import {
  SQSClient, CreateQueueCommand, GetQueueUrlCommand, GetQueueAttributesCommand, SendMessageCommand,
  SendMessageBatchCommand, ReceiveMessageCommand, DeleteMessageCommand, ChangeMessageVisibilityCommand,
  DeleteQueueCommand, QueueDoesNotExist,
} from "@aws-sdk/client-sqs";

const sqs = new SQSClient({
  endpoint: `http://127.0.0.1:${process.env.SQS_PORT}`,
  region: "us-east-1",
  credentials: { accessKeyId: "guest", secretAccessKey: "guest" },
});

const { QueueUrl } = await sqs.send(new CreateQueueCommand({ QueueName: "node-jobs", Attributes: { VisibilityTimeout: "1" } }));
assert.equal((await sqs.send(new GetQueueUrlCommand({ QueueName: "node-jobs" }))).QueueUrl, QueueUrl);
await assert.rejects(sqs.send(new GetQueueUrlCommand({ QueueName: "node-missing" })), QueueDoesNotExist);

const sent = await sqs.send(new SendMessageCommand({
  QueueUrl, MessageBody: "hello from node",
  MessageAttributes: { kind: { DataType: "String", StringValue: "greeting" }, n: { DataType: "Number", StringValue: "3" } },
}));
assert.equal(sent.MD5OfMessageBody, createHash("md5").update("hello from node").digest("hex"));
const batch = await sqs.send(new SendMessageBatchCommand({
  QueueUrl, Entries: [{ Id: "a", MessageBody: "one" }, { Id: "b", MessageBody: "two", DelaySeconds: 1000 }],
}));
assert.deepEqual(batch.Successful.map((e) => e.Id), ["a"]);
assert.deepEqual(batch.Failed.map((e) => [e.Id, e.SenderFault]), [["b", true]]);

// 30 s, not the queue's 1 s: a stall on a busy machine must not bring them back before the checks.
const first = await sqs.send(new ReceiveMessageCommand({
  QueueUrl, MaxNumberOfMessages: 10, WaitTimeSeconds: 2, VisibilityTimeout: 30, MessageAttributeNames: ["All"], MessageSystemAttributeNames: ["All"],
}));
assert.equal(first.Messages.length, 2, JSON.stringify(first.Messages));
const hello = first.Messages.find((m) => m.Body === "hello from node");
assert.equal(hello.MessageId, sent.MessageId);
assert.equal(hello.MessageAttributes.kind.StringValue, "greeting");
assert.equal(hello.Attributes.ApproximateReceiveCount, "1");
const counts = await sqs.send(new GetQueueAttributesCommand({ QueueUrl, AttributeNames: ["All"] }));
assert.equal(counts.Attributes.ApproximateNumberOfMessagesNotVisible, "2");

const other = first.Messages.find((m) => m.Body === "one");
await sqs.send(new ChangeMessageVisibilityCommand({ QueueUrl, ReceiptHandle: other.ReceiptHandle, VisibilityTimeout: 0 }));
const again = await sqs.send(new ReceiveMessageCommand({ QueueUrl, WaitTimeSeconds: 2, VisibilityTimeout: 30 }));
assert.equal(again.Messages[0].Body, "one");
for (const m of [hello, again.Messages[0]]) {
  await sqs.send(new DeleteMessageCommand({ QueueUrl, ReceiptHandle: m.ReceiptHandle }));
}
const empty = await sqs.send(new ReceiveMessageCommand({ QueueUrl, WaitTimeSeconds: 2 }));
assert.equal(empty.Messages, undefined);
await sqs.send(new DeleteQueueCommand({ QueueUrl }));
console.log("@aws-sdk/client-sqs over SQS: every check passed");
