//! A dead-letter queue is of its source's kind (issue 40, item 9): AWS refuses a standard queue
//! as the dead-letter queue of a FIFO queue, and a FIFO one for a standard queue ("The
//! dead-letter queue of a FIFO queue must also be a FIFO queue. Similarly, the dead-letter queue
//! of a standard queue must also be a standard queue."). Before, both were accepted. Over the
//! real binary, at CreateQueue and SetQueueAttributes.

mod common;

use std::net::SocketAddr;

use common::sqs_wire::{sqs, sqs_broker};
use serde_json::{json, Value};

async fn create(sqs_addr: SocketAddr, name: &str, attributes: Value) -> (u16, Value) {
    sqs(sqs_addr, "CreateQueue", json!({"QueueName": name, "Attributes": attributes})).await
}

/// The queue's URL and ARN, made with `attributes`.
async fn queue(sqs_addr: SocketAddr, name: &str, attributes: Value) -> (String, String) {
    let (status, made) = create(sqs_addr, name, attributes).await;
    assert_eq!(status, 200, "{made}");
    let url = made["QueueUrl"].as_str().expect("QueueUrl").to_owned();
    let input = json!({"QueueUrl": url, "AttributeNames": ["QueueArn"]});
    let (status, shown) = sqs(sqs_addr, "GetQueueAttributes", input).await;
    assert_eq!(status, 200, "{shown}");
    (url, shown["Attributes"]["QueueArn"].as_str().expect("QueueArn").to_owned())
}

fn redrive(arn: &str) -> String {
    json!({"deadLetterTargetArn": arn, "maxReceiveCount": 5}).to_string()
}

fn assert_refused((status, refused): (u16, Value), reason: &str) {
    assert_eq!(
        (status, refused["__type"].as_str()),
        (400, Some("com.amazonaws.sqs#InvalidAttributeValue")),
        "{refused}"
    );
    assert!(refused["message"].as_str().unwrap_or("").contains(reason), "{refused}");
}

#[tokio::test]
async fn a_dead_letter_queue_must_be_of_its_sources_kind() {
    let (_broker, at) = sqs_broker(&[]);
    let (_, standard_dlq) = queue(at, "orders-dlq", json!({})).await;
    let (_, fifo_dlq) = queue(at, "orders-dlq.fifo", json!({"FifoQueue": "true"})).await;

    let fifo_into_standard = json!({"FifoQueue": "true", "RedrivePolicy": redrive(&standard_dlq)});
    assert_refused(
        create(at, "orders.fifo", fifo_into_standard).await,
        "Dead-letter queue of a FIFO queue must also be a FIFO queue.",
    );
    let standard_into_fifo = json!({"RedrivePolicy": redrive(&fifo_dlq)});
    assert_refused(
        create(at, "orders", standard_into_fifo).await,
        "Dead-letter queue of a standard queue must also be a standard queue.",
    );

    // Each of its own kind is taken, and SetQueueAttributes checks the same.
    let (fifo_url, _) =
        queue(at, "orders.fifo", json!({"FifoQueue": "true", "RedrivePolicy": redrive(&fifo_dlq)})).await;
    let (standard_url, _) = queue(at, "orders", json!({"RedrivePolicy": redrive(&standard_dlq)})).await;
    let set = |url: &str, arn: &str| json!({"QueueUrl": url, "Attributes": {"RedrivePolicy": redrive(arn)}});
    assert_refused(
        sqs(at, "SetQueueAttributes", set(&fifo_url, &standard_dlq)).await,
        "must also be a FIFO queue",
    );
    assert_refused(
        sqs(at, "SetQueueAttributes", set(&standard_url, &fifo_dlq)).await,
        "must also be a standard queue",
    );
    let (status, answer) = sqs(at, "SetQueueAttributes", set(&standard_url, &standard_dlq)).await;
    assert_eq!(status, 200, "{answer}");
}
