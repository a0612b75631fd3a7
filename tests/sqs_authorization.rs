//! Who may do what over the SQS endpoint, over the real binary (issue 37): a captured signature
//! authorises its own request only, a signature for another service is refused, and a
//! message-move task writes only where its user may, in the vhost its destination names.
//! The rules: docs/sqs.md "Who may do what".

mod common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use common::sqs_wire::{free_port, json_request, query_request, send, sqs, sqs_as, sqs_broker, GUEST_KEY};
use common::RunningBroker;
use serde_json::{json, Value};

/// Every wait in these tests ends by this.
const WAIT: Duration = Duration::from_secs(15);

/// The number of messages in `queue` of `vhost` (ready and unacked), as the HTTP API counts them.
async fn messages_in(broker: &RunningBroker, vhost: &str, queue: &str) -> u64 {
    let vhost = vhost.replace('/', "%2F");
    let (status, body) = common::http(broker, "GET", &format!("/api/queues/{vhost}/{queue}"), "").await;
    assert_eq!(status, 200, "{body}");
    serde_json::from_str::<Value>(&body).unwrap()["messages"].as_u64().unwrap()
}

async fn queue_exists(broker: &RunningBroker, queue: &str) -> bool {
    let (status, _) = common::http(broker, "GET", &format!("/api/queues/%2F/{queue}"), "").await;
    status == 200
}

fn sha256_hex(data: &[u8]) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(data).iter().map(|b| format!("{b:02x}")).collect()
}

/// A captured request's signature covers its own body only (finding 1): replayed with another
/// body, with or without an `x-amz-content-sha256` header naming the signed body's hash, in
/// either protocol, it is refused and changes nothing.
#[tokio::test]
async fn a_captured_signature_does_not_authorise_another_body() {
    let (broker, addr) = sqs_broker(&[]);
    let (status, created) = sqs(addr, "CreateQueue", json!({"QueueName": "precious"})).await;
    assert_eq!(status, 200, "{created}");
    let url = created["QueueUrl"].as_str().unwrap().to_owned();
    let (status, sent) = sqs(addr, "SendMessage", json!({"QueueUrl": url, "MessageBody": "keep me"})).await;
    assert_eq!(status, 200, "{sent}");

    let host = addr.to_string();
    let list = query_request(&host, GUEST_KEY, "/", "Action=ListQueues");
    assert_eq!(send(addr, &list).await.0, 200, "the captured request itself is good");
    let delete = format!(
        "Action=DeleteQueue&QueueUrl={}",
        url.replace('%', "%25").replace(':', "%3A").replace('/', "%2F")
    );
    let purge = delete.replace("DeleteQueue", "PurgeQueue");
    for body in [&delete, &purge] {
        let signed_hash = sha256_hex(&list.body);
        for replay in [
            list.with_body(body.as_bytes()),
            list.with_body(body.as_bytes()).with_header("x-amz-content-sha256", &signed_hash),
        ] {
            let (status, answer) = send(addr, &replay).await;
            assert_eq!(status, 403, "{body}: {answer}");
            assert!(answer.contains("<Code>SignatureDoesNotMatch</Code>"), "{answer}");
        }
    }
    let receive = json!({"QueueUrl": url, "VisibilityTimeout": 43200});
    let other = json_request(&host, GUEST_KEY, "ReceiveMessage", &json!({"QueueUrl": "elsewhere"}));
    let replay = other
        .with_body(receive.to_string().as_bytes())
        .with_header("x-amz-content-sha256", &sha256_hex(&other.body));
    let (status, answer) = send(addr, &replay).await;
    assert_eq!(status, 403, "{answer}");
    assert!(queue_exists(&broker, "precious").await, "not deleted");
    assert_eq!(messages_in(&broker, "/", "precious").await, 1, "not purged");
    let (status, got) = sqs(addr, "ReceiveMessage", json!({"QueueUrl": url})).await;
    assert_eq!((status, got["Messages"][0]["Body"].as_str()), (200, Some("keep me")), "not received");
}

/// A signature scoped to another service than `sqs` is refused, though it is right for that
/// service with the key's secret (finding 8).
#[tokio::test]
async fn a_signature_for_another_service_is_refused() {
    use hourglass_sqs::sigv4;
    let (_broker, addr) = sqs_broker(&[]);
    let amz_date = sigv4::amz_date_of(hourglass_sqs::system_clock());
    let headers: Vec<(String, String)> = vec![
        ("host".into(), addr.to_string()),
        ("x-amz-date".into(), amz_date.clone()),
        ("content-type".into(), "application/x-amz-json-1.0".into()),
        ("x-amz-target".into(), "AmazonSQS.ListQueues".into()),
    ];
    let request = sigv4::Request { method: "POST", path: "/", query: "", headers: &headers, body: b"{}" };
    for (service, expected) in [("sqs", 200), ("s3", 403), ("iam", 403)] {
        let authorization = sigv4::authorization_for(&request, GUEST_KEY, "us-east-1", service, &amz_date);
        let mut head = String::from("POST / HTTP/1.1\r\nconnection: close\r\n");
        for (name, value) in headers.iter().chain([&("authorization".to_owned(), authorization)]) {
            head.push_str(&format!("{name}: {value}\r\n"));
        }
        let (status, answer) =
            send(addr, &common::sqs_wire::SignedRequest { head, body: b"{}".to_vec() }).await;
        assert_eq!(status, expected, "{service}: {answer}");
        if expected == 403 {
            assert!(answer.contains("Credential should be scoped to correct service: 'sqs'"), "{answer}");
        }
    }
}

/// Mallory may configure, write and read only `^m-` in `/` (so not publish through the default
/// exchange, which reaches every queue), and everything in vhost `B`; her access key acts in `/`.
/// Returns her key.
async fn mallory(broker: &RunningBroker) -> (String, String) {
    let put = |path: &'static str, body: &'static str| async move {
        let (status, answer) = common::http(broker, "PUT", path, body).await;
        assert!(status == 201 || status == 204, "{path}: {status} {answer}");
    };
    put("/api/users/mallory", r#"{"password": "mallory-pw", "tags": ""}"#).await;
    put("/api/vhosts/B", "{}").await;
    put("/api/permissions/%2F/mallory", r#"{"configure": "^m-", "write": "^m-", "read": "^m-"}"#).await;
    put("/api/permissions/B/mallory", r#"{"configure": ".*", "write": ".*", "read": ".*"}"#).await;
    let (status, body) = common::http(broker, "POST", "/api/users/mallory/access-keys", "{}").await;
    assert_eq!(status, 201, "{body}");
    let key: Value = serde_json::from_str(&body).unwrap();
    (key["access_key_id"].as_str().unwrap().to_owned(), key["secret_access_key"].as_str().unwrap().to_owned())
}

/// The move task of `source_arn`'s status once it is no longer running, and its failure reason.
async fn finished_move(addr: SocketAddr, key: (&str, &str), source_arn: &str) -> (String, Option<String>) {
    let deadline = Instant::now() + WAIT;
    loop {
        let (status, listed) =
            sqs_as(addr, key, "ListMessageMoveTasks", json!({"SourceArn": source_arn})).await;
        assert_eq!(status, 200, "{listed}");
        let task = &listed["Results"][0];
        let state = task["Status"].as_str().unwrap_or_default().to_owned();
        if state != "RUNNING" {
            return (state, task["FailureReason"].as_str().map(str::to_owned));
        }
        assert!(Instant::now() < deadline, "the move task still runs: {listed}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A move task writes only where its user may (finding 2): a forged `x-first-death-queue`
/// naming a queue Mallory may not write to fails the task and leaves the message where it was;
/// a `DestinationArn` in vhost `B` moves into `B`'s queue, not into the same name in `/`.
#[tokio::test]
async fn a_move_task_writes_only_where_its_user_may() {
    let secrets =
        std::env::temp_dir().join(format!("hourglass-secrets-{}-{}", std::process::id(), free_port()));
    let (broker, addr) = sqs_broker(&["--secrets-key-file", secrets.to_str().unwrap()]);
    let (id, secret) = mallory(&broker).await;
    let key = (id.as_str(), secret.as_str());
    for path in ["/api/queues/%2F/protected", "/api/queues/B/protected"] {
        let (status, body) = common::http(&broker, "PUT", path, r#"{"durable": true}"#).await;
        assert!(status == 201 || status == 204, "{status} {body}");
    }
    let (status, created) = sqs_as(addr, key, "CreateQueue", json!({"QueueName": "m-dlq"})).await;
    assert_eq!(status, 200, "{created}");

    let amqp = format!("amqp://mallory:mallory-pw@{}/%2f", broker.amqp);
    let connection = lapin::Connection::connect(&amqp, lapin::ConnectionProperties::default()).await.unwrap();
    let channel = connection.create_channel().await.unwrap();
    let mut headers = lapin::types::FieldTable::default();
    headers.insert("x-first-death-queue".into(), lapin::types::AMQPValue::LongString("protected".into()));
    let properties = lapin::BasicProperties::default().with_headers(headers).with_delivery_mode(2);
    // Her own exchange is the way in she has: it routes only to her own queue.
    let kind = lapin::ExchangeKind::Fanout;
    channel.exchange_declare("m-x".into(), kind, Default::default(), Default::default()).await.unwrap();
    channel
        .queue_bind("m-dlq".into(), "m-x".into(), "".into(), Default::default(), Default::default())
        .await
        .unwrap();
    let options = lapin::options::BasicPublishOptions::default();
    channel.confirm_select(Default::default()).await.unwrap();
    channel
        .basic_publish("m-x".into(), "".into(), options, b"forged", properties)
        .await
        .unwrap()
        .await
        .unwrap();
    connection.close(200, "done".into()).await.unwrap();

    let source_arn = "arn:aws:sqs:us-east-1:000000000000:m-dlq";
    let (status, started) = sqs_as(addr, key, "StartMessageMoveTask", json!({"SourceArn": source_arn})).await;
    assert_eq!(status, 200, "{started}");
    let (state, reason) = finished_move(addr, key, source_arn).await;
    assert_eq!(state, "FAILED");
    assert!(
        reason.as_deref().is_some_and(|r| r.contains("'protected'") && r.contains("denied")),
        "{reason:?}"
    );
    assert_eq!(messages_in(&broker, "/", "protected").await, 0, "nothing written into /protected");
    assert_eq!(messages_in(&broker, "/", "m-dlq").await, 1, "the message stays in the source");

    let to_b = json!({"SourceArn": source_arn, "DestinationArn": "arn:aws:sqs:us-east-1:B:protected"});
    let (status, started) = sqs_as(addr, key, "StartMessageMoveTask", to_b).await;
    assert_eq!(status, 200, "{started}");
    assert_eq!(finished_move(addr, key, source_arn).await, ("COMPLETED".to_owned(), None));
    assert_eq!(messages_in(&broker, "/", "protected").await, 0, "still nothing in /protected");
    assert_eq!(messages_in(&broker, "B", "protected").await, 1, "moved into B's queue");
    assert_eq!(messages_in(&broker, "/", "m-dlq").await, 0);
    let _ = std::fs::remove_file(secrets);
}

/// SQS's own errors where a queue cannot be made or is not there (finding 11): CreateQueue past
/// the vhost's `max-queues` is `OverLimit`, not `QueueNameExists`; a queue URL naming a vhost
/// that does not exist is `QueueDoesNotExist`, not `AccessDenied`, for every kind of operation.
#[tokio::test]
async fn a_full_vhost_and_a_missing_vhost_answer_sqs_errors() {
    let (broker, addr) = sqs_broker(&[]);
    let (status, body) =
        common::http(&broker, "PUT", "/api/vhost-limits/%2F/max-queues", r#"{"value": 1}"#).await;
    assert_eq!(status, 204, "{body}");
    let (status, created) = sqs(addr, "CreateQueue", json!({"QueueName": "first"})).await;
    assert_eq!(status, 200, "{created}");
    assert_eq!(sqs(addr, "CreateQueue", json!({"QueueName": "first"})).await.0, 200, "an existing queue");
    let (status, refused) = sqs(addr, "CreateQueue", json!({"QueueName": "second"})).await;
    assert_eq!((status, refused["__type"].as_str()), (400, Some("com.amazonaws.sqs#OverLimit")), "{refused}");
    assert!(refused["message"].as_str().unwrap().contains("max-queues"), "{refused}");

    let missing = format!("http://{addr}/nowhere/first");
    for (action, input) in [
        ("SendMessage", json!({"QueueUrl": missing, "MessageBody": "x"})),
        ("ReceiveMessage", json!({"QueueUrl": missing})),
        ("GetQueueAttributes", json!({"QueueUrl": missing})),
        ("SetQueueAttributes", json!({"QueueUrl": missing, "Attributes": {"DelaySeconds": "1"}})),
        ("PurgeQueue", json!({"QueueUrl": missing})),
        ("DeleteQueue", json!({"QueueUrl": missing})),
    ] {
        let (status, refused) = sqs(addr, action, input).await;
        assert_eq!(
            (status, refused["__type"].as_str()),
            (400, Some("com.amazonaws.sqs#QueueDoesNotExist")),
            "{action}: {refused}"
        );
    }
}

/// One key cannot hold the endpoint's connections with long polls (finding 5): past
/// `--sqs-max-long-polls` waiting polls a key's next long poll is answered at once with
/// `RequestThrottled` (which SDKs retry with back-off), sends and short polls still work, and a
/// place is free again once a poll answers.
#[tokio::test]
async fn one_key_cannot_hold_more_than_its_long_polls() {
    let (broker, addr) = sqs_broker(&["--sqs-max-long-polls", "3"]);
    let (status, created) = sqs(addr, "CreateQueue", json!({"QueueName": "idle"})).await;
    assert_eq!(status, 200, "{created}");
    let url = created["QueueUrl"].as_str().unwrap().to_owned();
    let poll = json!({"QueueUrl": url, "WaitTimeSeconds": 20});
    // Four long polls of one key on an empty queue: whichever comes last is answered at once.
    let mut waiting: Vec<_> =
        (0..4).map(|_| tokio::spawn(sqs(addr, "ReceiveMessage", poll.clone()))).collect();
    let deadline = Instant::now() + WAIT;
    let throttled = loop {
        if let Some(done) = waiting.iter().position(|w| w.is_finished()) {
            break waiting.remove(done);
        }
        assert!(Instant::now() < deadline, "no long poll was throttled");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let (status, refused) = throttled.await.unwrap();
    assert_eq!(
        (status, refused["__type"].as_str()),
        (400, Some("com.amazonaws.sqs#RequestThrottled")),
        "{refused}"
    );
    assert!(refused["message"].as_str().unwrap().contains("long polls waiting"), "{refused}");
    assert!(waiting.iter().all(|w| !w.is_finished()), "the other three still wait");
    let (status, short) = sqs(addr, "ReceiveMessage", json!({"QueueUrl": url})).await;
    assert_eq!((status, short), (200, json!({})), "a short poll never waits, so never counts");
    let (status, sent) = sqs(addr, "SendMessage", json!({"QueueUrl": url, "MessageBody": "wake"})).await;
    assert_eq!(status, 200, "{sent}");
    // The message wakes one waiting poll; its place is free for the next.
    let deadline = Instant::now() + WAIT;
    let mut woken = None;
    while woken.is_none() {
        woken = waiting.iter().position(|w| w.is_finished());
        assert!(Instant::now() < deadline, "no waiting poll got the message");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (status, got) = waiting.remove(woken.unwrap()).await.unwrap();
    assert_eq!((status, got["Messages"][0]["Body"].as_str()), (200, Some("wake")));
    // Two still wait: a third may wait beside them (it ends empty after its second).
    let (status, got) = sqs(addr, "ReceiveMessage", json!({"QueueUrl": url, "WaitTimeSeconds": 1})).await;
    assert_eq!((status, got), (200, json!({})), "the woken poll's place is free again");
    for w in waiting {
        w.abort();
    }
    drop(broker);
}
