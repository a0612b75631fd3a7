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

/// The task of `source_arn` that ListMessageMoveTasks shows first (the latest).
async fn latest_move_task(addr: SocketAddr, source_arn: &str) -> serde_json::Value {
    let (status, listed) = sqs(addr, "ListMessageMoveTasks", json!({"SourceArn": source_arn})).await;
    assert_eq!(status, 200, "{listed}");
    listed["Results"][0].clone()
}

/// Polls the latest task of `source_arn` until `done` holds, for at most `within`.
async fn move_task_until(
    addr: SocketAddr,
    source_arn: &str,
    within: std::time::Duration,
    done: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    let deadline = std::time::Instant::now() + within;
    loop {
        let task = latest_move_task(addr, source_arn).await;
        if done(&task) {
            return task;
        }
        assert!(std::time::Instant::now() < deadline, "the task did not get there: {task}");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

/// Issue 40, item 22: a message-move task outlives a `kill -9` (taken up at the next start, it
/// moves the rest and completes) and a SIGTERM (the shutdown does not wait for it; it is taken
/// up again, and cancelled then). Before, tasks lived in memory: after a restart
/// ListMessageMoveTasks showed none, and what was not moved stayed in the source.
#[tokio::test]
async fn message_move_tasks_outlive_a_kill_and_a_restart() {
    let port = free_port();
    let flag = port.to_string();
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let broker = RunningBroker::start_with(&["--sqs-port", &flag]);
    let mut arns = Vec::new();
    let mut urls = Vec::new();
    for name in ["moving-dlq", "moving-back"] {
        let (_, created) = sqs(addr, "CreateQueue", json!({"QueueName": name})).await;
        let url = created["QueueUrl"].as_str().unwrap().to_owned();
        let (_, attributes) =
            sqs(addr, "GetQueueAttributes", json!({"QueueUrl": url, "AttributeNames": ["QueueArn"]})).await;
        arns.push(attributes["Attributes"]["QueueArn"].as_str().unwrap().to_owned());
        urls.push(url);
    }
    let (dlq_arn, back_arn) = (arns[0].clone(), arns[1].clone());
    for batch in 0..6 {
        let entries: Vec<_> = (0..10)
            .map(|i| json!({"Id": format!("m{i}"), "MessageBody": format!("message {}", batch * 10 + i)}))
            .collect();
        let (status, sent) =
            sqs(addr, "SendMessageBatch", json!({"QueueUrl": urls[0], "Entries": entries})).await;
        assert_eq!(status, 200, "{sent}");
    }
    let start = json!({"SourceArn": dlq_arn, "DestinationArn": back_arn, "MaxNumberOfMessagesPerSecond": 10});
    let (status, started) = sqs(addr, "StartMessageMoveTask", start).await;
    assert_eq!(status, 200, "{started}");
    let half_way = |task: &serde_json::Value| task["ApproximateNumberOfMessagesMoved"].as_u64() >= Some(25);
    move_task_until(addr, &dlq_arn, std::time::Duration::from_secs(20), half_way).await;
    let data_dir = broker.kill9();

    let broker = RunningBroker::start_in_with(data_dir, &["--sqs-port", &flag]);
    let task = latest_move_task(addr, &dlq_arn).await;
    assert_eq!(task["Status"], "RUNNING", "taken up after the kill: {task}");
    assert_eq!(task["TaskHandle"], started["TaskHandle"], "{task}");
    let completed = |task: &serde_json::Value| task["Status"] == "COMPLETED";
    let task = move_task_until(addr, &dlq_arn, std::time::Duration::from_secs(30), completed).await;
    assert_eq!(task["ApproximateNumberOfMessagesToMove"], 60, "{task}");
    let count = |url: String| async move {
        let input = json!({"QueueUrl": url, "AttributeNames": ["ApproximateNumberOfMessages"]});
        let (_, attributes) = sqs(addr, "GetQueueAttributes", input).await;
        attributes["Attributes"]["ApproximateNumberOfMessages"].as_str().unwrap().to_owned()
    };
    assert_eq!(count(urls[0].clone()).await, "0");
    assert_eq!(count(urls[1].clone()).await, "60", "every message moved, none twice");

    // A slow task back: a SIGTERM does not wait for it, and it is taken up again after.
    let back = json!({"SourceArn": back_arn, "DestinationArn": dlq_arn, "MaxNumberOfMessagesPerSecond": 1});
    let (status, slow) = sqs(addr, "StartMessageMoveTask", back).await;
    assert_eq!(status, 200, "{slow}");
    let data_dir = broker.data_dir();
    assert!(broker.terminate().success(), "the shutdown ends while a task runs");
    let _broker = RunningBroker::start_in_with(data_dir, &["--sqs-port", &flag]);
    let task = latest_move_task(addr, &back_arn).await;
    assert_eq!((&task["Status"], &task["TaskHandle"]), (&json!("RUNNING"), &slow["TaskHandle"]), "{task}");
    let (status, _) = sqs(addr, "CancelMessageMoveTask", json!({"TaskHandle": slow["TaskHandle"]})).await;
    assert_eq!(status, 200);
    let cancelled = |task: &serde_json::Value| task["Status"] == "CANCELLED";
    let task = move_task_until(addr, &back_arn, std::time::Duration::from_secs(10), cancelled).await;
    let moved = task["ApproximateNumberOfMessagesMoved"].as_u64().unwrap();
    assert!(moved < 60, "at one a second, a few moved at most: {task}");
}
