//! A queue's access policy over the real binary (issue 40, item 15): its `Deny` statements take
//! away from the user's Hourglass permissions, by action, source address and transport, from the
//! next request after SetQueueAttributes. Before, a policy was kept and shown but never applied:
//! every request below succeeded.

mod common;

use common::sqs_wire::{sqs, sqs_broker};
use serde_json::json;

fn denied(status: u16, answer: &serde_json::Value) -> bool {
    status == 403 && answer["__type"].as_str().is_some_and(|t| t.ends_with("AccessDeniedException"))
}

#[tokio::test]
async fn a_queue_policy_s_denies_apply_and_can_always_be_lifted() {
    let (_broker, addr) = sqs_broker(&[]);
    let (status, created) = sqs(addr, "CreateQueue", json!({"QueueName": "guarded"})).await;
    assert_eq!(status, 200, "{created}");
    let url = created["QueueUrl"].as_str().unwrap().to_owned();
    let send = json!({"QueueUrl": url, "MessageBody": "hello"});
    assert_eq!(sqs(addr, "SendMessage", send.clone()).await.0, 200);

    // Sends only from 10.0.0.0/8: this test's requests come from 127.0.0.1.
    let outside_only = json!({"Version": "2012-10-17", "Statement": [{
        "Sid": "SendFromTheLanOnly", "Effect": "Deny", "Principal": "*", "Action": "sqs:SendMessage",
        "Resource": "arn:aws:sqs:*:*:guarded",
        "Condition": {"NotIpAddress": {"aws:SourceIp": "10.0.0.0/8"}}}]});
    let set = json!({"QueueUrl": url, "Attributes": {"Policy": outside_only.to_string()}});
    assert_eq!(sqs(addr, "SetQueueAttributes", set).await.0, 200);
    let (status, answer) = sqs(addr, "SendMessage", send.clone()).await;
    assert!(denied(status, &answer), "denied from outside 10/8 at once: {status} {answer}");
    let batch = json!({"QueueUrl": url, "Entries": [{"Id": "a", "MessageBody": "x"}]});
    let (status, answer) = sqs(addr, "SendMessageBatch", batch).await;
    assert!(denied(status, &answer), "a batch is its single action: {status} {answer}");
    let (status, got) = sqs(addr, "ReceiveMessage", json!({"QueueUrl": url})).await;
    assert_eq!(
        (status, got["Messages"][0]["Body"].as_str()),
        (200, Some("hello")),
        "receives are not denied"
    );

    // Everything over plain HTTP denied; the policy can still be lifted.
    let tls_only = json!({"Statement": {"Effect": "Deny", "Principal": {"AWS": "*"}, "Action": "sqs:*",
        "Condition": {"Bool": {"aws:SecureTransport": "false"}}}});
    let set = json!({"QueueUrl": url, "Attributes": {"Policy": tls_only.to_string()}});
    assert_eq!(sqs(addr, "SetQueueAttributes", set).await.0, 200);
    let (status, answer) =
        sqs(addr, "GetQueueAttributes", json!({"QueueUrl": url, "AttributeNames": ["All"]})).await;
    assert!(denied(status, &answer), "{status} {answer}");
    let (status, answer) = sqs(addr, "GetQueueUrl", json!({"QueueName": "guarded"})).await;
    assert!(denied(status, &answer), "{status} {answer}");
    // A Deny it could not apply is refused by name, never kept and silently ignored.
    let vpce_only = json!({"Statement": {"Sid": "VpcOnly", "Effect": "Deny", "Principal": "*", "Action": "sqs:*",
        "Condition": {"StringNotEquals": {"aws:SourceVpce": "vpce-1"}}}});
    let set = json!({"QueueUrl": url, "Attributes": {"Policy": vpce_only.to_string()}});
    let (status, answer) = sqs(addr, "SetQueueAttributes", set).await;
    let message = answer["message"].as_str().or(answer["Message"].as_str()).unwrap_or_default().to_owned();
    assert_eq!(status, 400, "{answer}");
    assert!(message.contains("aws:SourceVpce"), "names what it cannot apply: {answer}");
    let lift = json!({"QueueUrl": url, "Attributes": {"Policy": ""}});
    assert_eq!(sqs(addr, "SetQueueAttributes", lift).await.0, 200, "a policy can always be changed");
    assert_eq!(sqs(addr, "SendMessage", send).await.0, 200, "lifted at once");
}

/// A queue declared over AMQP (or the HTTP API) can carry an `x-sqs-policy` argument that
/// SetQueueAttributes would have refused: a Deny the endpoint cannot apply. Such a policy now
/// denies every SQS operation, naming why, until SetQueueAttributes replaces it. Before, it
/// denied nothing, leaving open what its writer meant to close.
#[tokio::test]
async fn a_declared_policy_with_a_deny_that_cannot_be_applied_denies_everything() {
    use lapin::options::QueueDeclareOptions;
    use lapin::types::{AMQPValue, FieldTable};
    let (broker, addr) = sqs_broker(&[]);
    let connection = common::connect(&broker).await;
    let channel = connection.create_channel().await.unwrap();
    let vpce_only = json!({"Statement": {"Sid": "VpcOnly", "Effect": "Deny", "Principal": "*", "Action": "sqs:DeleteQueue",
        "Condition": {"StringNotEquals": {"aws:SourceVpce": "vpce-1"}}}});
    let mut arguments = FieldTable::default();
    arguments.insert("x-sqs-policy".into(), AMQPValue::LongString(vpce_only.to_string().into()));
    let options = QueueDeclareOptions { durable: true, ..Default::default() };
    channel.queue_declare("declared".into(), options, arguments).await.unwrap();

    let (status, found) = sqs(addr, "GetQueueUrl", json!({"QueueName": "declared"})).await;
    assert!(denied(status, &found), "{status} {found}");
    let message = found["message"].as_str().or(found["Message"].as_str()).unwrap_or_default();
    assert!(message.contains("VpcOnly") && message.contains("aws:SourceVpce"), "names why: {found}");
    // A bare queue name is a QueueUrl too (issue 40, item 5).
    let url = "declared";
    let (status, answer) = sqs(addr, "SendMessage", json!({"QueueUrl": url, "MessageBody": "x"})).await;
    assert!(denied(status, &answer), "{status} {answer}");
    let lift = json!({"QueueUrl": url, "Attributes": {"Policy": ""}});
    assert_eq!(sqs(addr, "SetQueueAttributes", lift).await.0, 200, "the policy can still be replaced");
    let (status, answer) = sqs(addr, "SendMessage", json!({"QueueUrl": url, "MessageBody": "x"})).await;
    assert_eq!(status, 200, "{answer}");
    connection.close(200, "done".into()).await.unwrap();
}
