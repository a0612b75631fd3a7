//! The SQS endpoint in a cluster (issue 26): every node serves `--sqs-port`, a follower forwards
//! it to the leader as it forwards AMQP and HTTP, and a message sent over SQS is confirmed only
//! once a majority holds it, so it outlives the leader's `kill -9`, as does a message-move task
//! (issue 40, item 22). Real etcd, real processes.

mod cluster_support;
mod common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use cluster_support::{Cluster, Node};
use common::sqs_wire::sqs;
use serde_json::json;

const WITHIN: Duration = Duration::from_secs(40);

fn sqs_address(node: &Node) -> SocketAddr {
    let port = node.flag("--sqs-port").expect("started with --sqs-port");
    format!("{}:{port}", node.placement.host).parse().unwrap()
}

#[test]
fn a_message_sent_through_a_follower_outlives_the_leader() {
    let Some(mut cluster) = Cluster::start(3, &["--sqs-port", "{port}"]) else { return };
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let leader = cluster.wait_in_sync(WITHIN);
    let follower = cluster.nodes.iter().find(|n| n.name != leader).expect("a follower");
    let through = sqs_address(follower);
    let (status, created) = runtime.block_on(sqs(through, "CreateQueue", json!({"QueueName": "replicated"})));
    assert_eq!(status, 200, "{created}");
    let url = created["QueueUrl"].as_str().unwrap().to_owned();
    let (status, sent) =
        runtime.block_on(sqs(through, "SendMessage", json!({"QueueUrl": url, "MessageBody": "kept"})));
    assert_eq!(status, 200, "{sent}");
    // A slow message-move task of another queue, running when the leader dies.
    let mut arns = Vec::new();
    for name in ["moving", "moved"] {
        let (_, made) = runtime.block_on(sqs(through, "CreateQueue", json!({"QueueName": name})));
        let input = json!({"QueueUrl": made["QueueUrl"], "AttributeNames": ["QueueArn"]});
        let (_, attributes) = runtime.block_on(sqs(through, "GetQueueAttributes", input));
        arns.push(attributes["Attributes"]["QueueArn"].as_str().unwrap().to_owned());
        if name == "moving" {
            let entries: Vec<_> =
                (0..4).map(|i| json!({"Id": format!("m{i}"), "MessageBody": format!("move {i}")})).collect();
            let input = json!({"QueueUrl": made["QueueUrl"], "Entries": entries});
            assert_eq!(runtime.block_on(sqs(through, "SendMessageBatch", input)).0, 200);
        }
    }
    let start = json!({"SourceArn": arns[0], "DestinationArn": arns[1], "MaxNumberOfMessagesPerSecond": 1});
    let (status, task) = runtime.block_on(sqs(through, "StartMessageMoveTask", start));
    assert_eq!(status, 200, "{task}");

    cluster.node(&leader).kill9();
    let new_leader = cluster.wait_new_leader(&leader, WITHIN);
    let at = sqs_address(cluster.nodes.iter().find(|n| n.name == new_leader).expect("the new leader"));
    // The new leader serves as soon as it is elected; a moment may pass before it listens.
    let deadline = Instant::now() + WITHIN;
    let got = loop {
        let receive = json!({"QueueUrl": url, "WaitTimeSeconds": 1});
        let (status, got) = runtime.block_on(sqs(at, "ReceiveMessage", receive));
        if status == 200 && got["Messages"].is_array() {
            break got;
        }
        assert!(Instant::now() < deadline, "no message from the new leader: {status} {got}");
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(got["Messages"][0]["Body"], "kept", "{got}");
    assert_eq!(got["Messages"][0]["MessageId"], sent["MessageId"]);
    // The new leader took the move task up and finishes it.
    let deadline = Instant::now() + WITHIN;
    loop {
        let (_, listed) = runtime.block_on(sqs(at, "ListMessageMoveTasks", json!({"SourceArn": arns[0]})));
        let latest = &listed["Results"][0];
        if latest["Status"] == "COMPLETED" {
            break;
        }
        if !latest.is_null() {
            assert_eq!(latest["Status"], "RUNNING", "taken up by the new leader: {listed}");
            assert_eq!(latest["TaskHandle"], task["TaskHandle"]);
        }
        assert!(Instant::now() < deadline, "the task did not complete: {listed}");
        std::thread::sleep(Duration::from_millis(200));
    }
    let input = json!({"QueueUrl": "moved", "AttributeNames": ["ApproximateNumberOfMessages"]});
    let (_, attributes) = runtime.block_on(sqs(at, "GetQueueAttributes", input));
    assert_eq!(attributes["Attributes"]["ApproximateNumberOfMessages"], "4", "{attributes}");
}
