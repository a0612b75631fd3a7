//! The SQS endpoint over the real binary across restarts (issue 26): a 2xx means durable. A
//! queue made and changed over SQS, and a message sent over SQS, are there after a SIGTERM and
//! after a `kill -9` of the broker that answered.

mod common;

use std::net::SocketAddr;

use common::sqs_wire::{free_port, sqs};
use common::RunningBroker;
use serde_json::json;

#[tokio::test]
async fn sqs_queues_attributes_and_messages_outlive_a_restart_and_a_kill() {
    let port = free_port();
    let flag = port.to_string();
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let broker = RunningBroker::start_with(&["--sqs-port", &flag]);
    let (status, created) = sqs(addr, "CreateQueue", json!({"QueueName": "kept"})).await;
    assert_eq!(status, 200, "{created}");
    let url = created["QueueUrl"].as_str().unwrap().to_owned();
    let (status, _) =
        sqs(addr, "SetQueueAttributes", json!({"QueueUrl": url, "Attributes": {"VisibilityTimeout": "77"}}))
            .await;
    assert_eq!(status, 200);
    let (_, sent) =
        sqs(addr, "SendMessage", json!({"QueueUrl": url, "MessageBody": "before the restart"})).await;
    let data_dir = broker.data_dir();
    assert!(broker.terminate().success());

    let broker = RunningBroker::start_in_with(data_dir, &["--sqs-port", &flag]);
    let (_, attributes) =
        sqs(addr, "GetQueueAttributes", json!({"QueueUrl": url, "AttributeNames": ["All"]})).await;
    assert_eq!(attributes["Attributes"]["VisibilityTimeout"], "77", "{attributes}");
    let (_, got) = sqs(addr, "ReceiveMessage", json!({"QueueUrl": url, "WaitTimeSeconds": 5})).await;
    assert_eq!(got["Messages"][0]["Body"], "before the restart", "{got}");
    assert_eq!(got["Messages"][0]["MessageId"], sent["MessageId"]);
    let handle = got["Messages"][0]["ReceiptHandle"].as_str().unwrap().to_owned();
    let (status, _) = sqs(addr, "DeleteMessage", json!({"QueueUrl": url, "ReceiptHandle": handle})).await;
    assert_eq!(status, 200);
    let (_, answered) =
        sqs(addr, "SendMessage", json!({"QueueUrl": url, "MessageBody": "answered, then killed"})).await;
    assert!(answered["MessageId"].is_string(), "{answered}");
    let data_dir = broker.kill9();

    let _broker = RunningBroker::start_in_with(data_dir, &["--sqs-port", &flag]);
    let (_, got) = sqs(
        addr,
        "ReceiveMessage",
        json!({"QueueUrl": url, "WaitTimeSeconds": 5, "MaxNumberOfMessages": 10}),
    )
    .await;
    let bodies: Vec<&str> =
        got["Messages"].as_array().unwrap().iter().map(|m| m["Body"].as_str().unwrap()).collect();
    assert_eq!(
        bodies,
        ["answered, then killed"],
        "the deleted message stays deleted, the answered one is kept"
    );
    let (status, error) = sqs(
        addr,
        "ReceiveMessage",
        json!({"QueueUrl": url, "ReceiptHandle": handle, "MaxNumberOfMessages": 11}),
    )
    .await;
    assert_eq!(
        (status, error["__type"].as_str()),
        (400, Some("com.amazon.coral.service#InvalidParameterValueException"))
    );
}
