//! A cluster whose replication runs over mutual TLS (`--replication-tls`, docs/clustering.md):
//! the followers catch up and stay in sync through it, a failover keeps every confirmed message,
//! and a peer without the cluster's certificate cannot stream to a follower.

mod cluster_support;
mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use cluster_support::{Cluster, TestPki};
use lapin::options::*;
use lapin::types::FieldTable;
use lapin::{BasicProperties, Connection, ConnectionProperties};

/// The cluster's CA and one certificate every node uses, as a server and as a client: the flags.
fn pki(dir: &std::path::Path) -> Vec<String> {
    let pki = TestPki::create(dir);
    let mut flags: Vec<String> =
        ["--tls-cert", &pki.cert, "--tls-key", &pki.key, "--tls-ca", &pki.ca, "--replication-tls", "true"]
            .into_iter()
            .map(str::to_owned)
            .collect();
    for port_flag in ["--amqps-port", "--https-port", "--metrics-tls-port"] {
        flags.extend([port_flag.to_owned(), "{port}".to_owned()]);
    }
    flags
}

async fn publish_confirmed(url: &str, count: usize) {
    let conn = Connection::connect(url, ConnectionProperties::default()).await.unwrap();
    let channel = conn.create_channel().await.unwrap();
    channel.confirm_select(ConfirmSelectOptions::default()).await.unwrap();
    let durable = QueueDeclareOptions { durable: true, ..Default::default() };
    channel.queue_declare("secure".into(), durable, FieldTable::default()).await.unwrap();
    for i in 0..count {
        let props = BasicProperties::default().with_delivery_mode(2);
        let confirm = channel
            .basic_publish(
                "".into(),
                "secure".into(),
                BasicPublishOptions::default(),
                format!("m{i}").as_bytes(),
                props,
            )
            .await
            .unwrap();
        assert!(confirm.await.unwrap().is_ack());
    }
    conn.close(200, "done".into()).await.unwrap();
}

/// The queue's depth through any running node, retried while the new leader is still starting.
async fn queue_depth(cluster: &Cluster, not: &str) -> u32 {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let url = cluster.follower_url(not);
        if let Ok(conn) = Connection::connect(&url, ConnectionProperties::default()).await {
            let passive = QueueDeclareOptions { passive: true, durable: true, ..Default::default() };
            if let Ok(channel) = conn.create_channel().await {
                if let Ok(queue) =
                    channel.queue_declare("secure".into(), passive, FieldTable::default()).await
                {
                    return queue.message_count();
                }
            }
        }
        assert!(std::time::Instant::now() < deadline, "no node answered within 30 s");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn replication_over_mutual_tls_keeps_confirmed_messages_and_refuses_strangers() {
    let dir = std::env::temp_dir().join(format!("hourglass-cluster-tls-{}", std::process::id()));
    let flags = pki(&dir);
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let Some(mut cluster) = Cluster::start(3, &flags) else { return };
    let leader = tokio::task::block_in_place(|| cluster.wait_in_sync(Duration::from_secs(40)));
    publish_confirmed(&cluster.follower_url(&leader), 200).await;

    // A stranger speaking the replication protocol in plaintext gets nothing but a closed socket.
    let follower = cluster.nodes.iter().find(|n| n.name != leader).unwrap();
    let mut stranger = TcpStream::connect(("127.0.0.1", follower.replication)).unwrap();
    stranger.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
    let hello = [0, 0, 0, 12, 1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0, 1, b'x'];
    let _ = stranger.write_all(&hello);
    let mut answer = Vec::new();
    let _ = stranger.read_to_end(&mut answer);
    assert!(!answer.windows(4).any(|w| w == b"mess"), "no manifest for a stranger: {answer:?}");

    cluster.node(&leader).kill9();
    tokio::task::block_in_place(|| cluster.wait_new_leader(&leader, Duration::from_secs(30)));
    assert_eq!(queue_depth(&cluster, &leader).await, 200, "every confirmed message, over TLS replication");
    cluster.node(&leader).start();
    tokio::task::block_in_place(|| cluster.wait_in_sync(Duration::from_secs(40)));
    let _ = std::fs::remove_dir_all(&dir);
}
