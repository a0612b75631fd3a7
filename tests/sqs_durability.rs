//! The SQS endpoint over the real binary across restarts (issue 26): a 2xx means durable. A
//! queue made and changed over SQS, and a message sent over SQS, are there after a SIGTERM and
//! after a `kill -9` of the broker that answered.

mod common;

use std::net::SocketAddr;
use std::time::{SystemTime, UNIX_EPOCH};

use common::RunningBroker;
use hourglass_sqs::sigv4;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A port free now, for `--sqs-port` (the broker logs the listeners it binds with port 0 only
/// for AMQP and HTTP).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// One signed AWS JSON 1.0 request: the status and the answer's JSON.
async fn sqs(addr: SocketAddr, action: &str, input: Value) -> (u16, Value) {
    let body = input.to_string();
    let now_ms = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis() as u64;
    let amz_date = sigv4::amz_date_of(now_ms);
    let headers: Vec<(String, String)> = vec![
        ("host".into(), addr.to_string()),
        ("content-type".into(), "application/x-amz-json-1.0".into()),
        ("x-amz-target".into(), format!("AmazonSQS.{action}")),
        ("x-amz-date".into(), amz_date.clone()),
    ];
    let request =
        sigv4::Request { method: "POST", path: "/", query: "", headers: &headers, body: body.as_bytes() };
    let authorization = sigv4::authorization(&request, "guest", "guest", "us-east-1", &amz_date);
    let mut text = String::from("POST / HTTP/1.1\r\nconnection: close\r\n");
    for (name, value) in &headers {
        text.push_str(&format!("{name}: {value}\r\n"));
    }
    text.push_str(&format!("authorization: {authorization}\r\ncontent-length: {}\r\n\r\n{body}", body.len()));
    let mut socket = tokio::net::TcpStream::connect(addr).await.expect("connect to the SQS port");
    socket.write_all(text.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    socket.read_to_end(&mut answer).await.unwrap();
    let answer = String::from_utf8_lossy(&answer);
    let status = answer.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    let json =
        answer.split("\r\n\r\n").nth(1).and_then(|b| serde_json::from_str(b).ok()).unwrap_or(Value::Null);
    (status, json)
}

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
