//! A node never exits because etcd is unreachable (issue #21, finding 3), and SIGTERM ends it
//! within 10 s in every state (docs/clustering.md "When etcd is unreachable"). Real etcd, real
//! nodes: etcd absent at start for 20 s, paused (SIGSTOP) for 30 s, down for 20 s then restarted; SIGTERM to a
//! leader whose etcd is paused, and to one that stepped down and is rejoining.

mod cluster_support;
mod common;

use std::io::{Read, Write};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use cluster_support::{Cluster, Etcd};
use lapin::options::*;
use lapin::types::FieldTable;
use lapin::{BasicProperties, Connection, ConnectionProperties};

/// How long etcd stays away: longer than the 15 s after which a node used to give up.
const OUTAGE: Duration = Duration::from_secs(20);
/// How long etcd is paused: a leader steps down some 5 s into it and then, before #21, gave up
/// 15 s later.
const PAUSE: Duration = Duration::from_secs(30);
/// After etcd is back, the cluster must confirm again within this.
const CONFIRMS_AGAIN_WITHIN: Duration = Duration::from_secs(10);
/// SIGTERM must end a node within this, whatever its state.
const EXITS_WITHIN: Duration = Duration::from_secs(10);

/// One cluster at a time: the timings asserted here must not depend on a neighbour's load.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

/// One persistent message published with confirms through `url`: whether it was confirmed.
fn confirm_one(url: &str) -> bool {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    runtime.block_on(async {
        let attempt = async {
            let conn = Connection::connect(url, ConnectionProperties::default()).await.ok()?;
            let channel = conn.create_channel().await.ok()?;
            channel.confirm_select(ConfirmSelectOptions::default()).await.ok()?;
            let durable = QueueDeclareOptions { durable: true, ..Default::default() };
            channel.queue_declare("avail".into(), durable, FieldTable::default()).await.ok()?;
            let props = BasicProperties::default().with_delivery_mode(2);
            let confirm = channel
                .basic_publish("".into(), "avail".into(), BasicPublishOptions::default(), b"m", props)
                .await
                .ok()?
                .await
                .ok()?;
            let _ = conn.close(200, "bye".into()).await;
            Some(confirm.is_ack())
        };
        tokio::time::timeout(Duration::from_secs(4), attempt).await.ok().flatten() == Some(true)
    })
}

/// Polls until a message is confirmed through some running node; how long that took.
fn time_to_confirm(cluster: &Cluster, within: Duration) -> Option<Duration> {
    let started = Instant::now();
    while started.elapsed() < within {
        for node in cluster.nodes.iter().filter(|n| n.running()) {
            if confirm_one(&node.amqp_url()) {
                return Some(started.elapsed());
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    None
}

/// Asserts every node's process still runs, for `outage`, checking every 200 ms.
fn assert_all_alive_for(cluster: &mut Cluster, outage: Duration) {
    let started = Instant::now();
    while started.elapsed() < outage {
        for node in &mut cluster.nodes {
            if let Some(status) = node.exited() {
                let lines = node.log_lines_with("");
                let tail = &lines[lines.len().saturating_sub(5)..];
                panic!(
                    "{} exited ({status}) {:?} into the etcd outage: {tail:?}",
                    node.name,
                    started.elapsed()
                );
            }
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The AMQP answer to a protocol header on `port`: the reply code of a connection.close, if
/// that is what came.
fn amqp_close_code(port: u16) -> Option<u16> {
    let mut socket = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    socket.set_read_timeout(Some(Duration::from_secs(15))).ok()?;
    socket.write_all(b"AMQP\x00\x00\x09\x01").ok()?;
    let mut frame = Vec::new();
    let _ = socket.read_to_end(&mut frame);
    // type 1 (method), channel 0, size, class 10 method 50 (connection.close), reply code.
    (frame.len() >= 13 && frame[0] == 1 && frame[7..11] == [0, 10, 0, 50])
        .then(|| u16::from_be_bytes([frame[11], frame[12]]))
}

/// The `rabbitmq_cluster` label of `rabbitmq_identity_info` on the leader's metrics port.
fn identity_cluster_label(cluster: &Cluster, leader: &str) -> Option<String> {
    let node = cluster.nodes.iter().find(|n| n.name == leader)?;
    let (_, text) = cluster_support::http_request(&format!("127.0.0.1:{}", node.metrics), "GET", "/metrics")?;
    let line = text.lines().find(|l| l.starts_with("rabbitmq_identity_info{"))?;
    let start = line.find("rabbitmq_cluster=\"")? + "rabbitmq_cluster=\"".len();
    Some(line[start..].split('"').next()?.to_owned())
}

/// Waits until `node`'s HTTP port answers; its status to `GET /api/cluster`.
fn http_status(port: u16, within: Duration) -> Option<u16> {
    let started = Instant::now();
    while started.elapsed() < within {
        let address = format!("127.0.0.1:{port}");
        if let Some((status, _)) = cluster_support::http_request(&address, "GET", "/api/cluster") {
            return Some(status);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    None
}

#[test]
fn a_node_started_before_etcd_answers_320_and_503_then_joins_when_etcd_comes() {
    let _serial = serial();
    let Some(etcd) = Etcd::unstarted() else { return };
    let mut cluster = Cluster::start_on(etcd, 1, &[]);
    let (amqp, http) = (cluster.nodes[0].amqp, cluster.nodes[0].http);
    // While it has no role its client ports tell clients to come back.
    assert_eq!(http_status(http, Duration::from_secs(10)), Some(503));
    assert_eq!(amqp_close_code(amqp), Some(320));
    assert_all_alive_for(&mut cluster, OUTAGE);
    assert!(!cluster.nodes[0].log_lines_with("etcd unreachable while joining").is_empty());
    cluster.etcd.launch();
    let took = time_to_confirm(&cluster, CONFIRMS_AGAIN_WITHIN);
    eprintln!("etcd up to first confirm: {took:?}");
    assert!(took.is_some(), "no confirm within {CONFIRMS_AGAIN_WITHIN:?} of etcd's start");
}

#[test]
fn three_nodes_ride_out_a_30_s_etcd_pause_and_confirm_again_within_10_s() {
    let _serial = serial();
    let Some(mut cluster) = Cluster::start(3, &[]) else { return };
    let leader = cluster.wait_in_sync(Duration::from_secs(60));
    assert!(time_to_confirm(&cluster, Duration::from_secs(20)).is_some());
    // Dashboards select by rabbitmq_cluster: the cluster's name, on whichever node leads.
    let name = cluster.view().and_then(|v| v["cluster_name"].as_str().map(str::to_owned)).unwrap();
    assert_eq!(identity_cluster_label(&cluster, &leader).as_deref(), Some(name.as_str()));
    cluster.etcd.pause();
    assert_all_alive_for(&mut cluster, PAUSE);
    cluster.etcd.resume();
    let took = time_to_confirm(&cluster, CONFIRMS_AGAIN_WITHIN);
    eprintln!("etcd resumed to first confirm: {took:?}");
    assert!(took.is_some(), "no confirm within {CONFIRMS_AGAIN_WITHIN:?} of etcd's return");
    let new_leader = cluster.wait_in_sync(Duration::from_secs(30));
    assert_eq!(identity_cluster_label(&cluster, &new_leader).as_deref(), Some(name.as_str()));
    // The leader cut off from etcd stepped down and came back as a node of the cluster.
    let old = cluster.node(&leader);
    assert!(!old.log_lines_with("stepping down as leader").is_empty(), "{leader} never stepped down");
    let warnings = old.log_lines_with("etcd unreachable while");
    assert!(warnings.len() <= 4, "WARN at most every 10 s: {warnings:?}");
}

#[test]
fn three_nodes_ride_out_an_etcd_restart() {
    let _serial = serial();
    let Some(mut cluster) = Cluster::start(3, &[]) else { return };
    cluster.wait_in_sync(Duration::from_secs(60));
    cluster.etcd.kill();
    assert_all_alive_for(&mut cluster, OUTAGE);
    cluster.etcd.launch();
    let took = time_to_confirm(&cluster, CONFIRMS_AGAIN_WITHIN);
    eprintln!("etcd restarted to first confirm: {took:?}");
    assert!(took.is_some(), "no confirm within {CONFIRMS_AGAIN_WITHIN:?} of etcd's restart");
    cluster.wait_in_sync(Duration::from_secs(30));
}

#[test]
fn sigterm_ends_a_leader_whose_etcd_is_paused_within_10_s() {
    let _serial = serial();
    let Some(mut cluster) = Cluster::start(1, &[]) else { return };
    cluster.wait_in_sync(Duration::from_secs(60));
    cluster.etcd.pause();
    std::thread::sleep(Duration::from_secs(1));
    let ended = cluster.nodes[0].terminate(Duration::from_secs(30));
    eprintln!("leader, etcd paused: SIGTERM to exit {ended:?}");
    let (status, took) = ended.expect("the leader did not exit within 30 s of SIGTERM");
    assert!(status.success(), "{status}");
    assert!(took <= EXITS_WITHIN, "{took:?}");
}

#[test]
fn sigterm_ends_a_stepped_down_leader_rejoining_a_paused_etcd_within_10_s() {
    let _serial = serial();
    let Some(mut cluster) = Cluster::start(1, &[]) else { return };
    cluster.wait_in_sync(Duration::from_secs(60));
    cluster.etcd.pause();
    let node = &mut cluster.nodes[0];
    let deadline = Instant::now() + Duration::from_secs(30);
    while node.log_lines_with("restarting as a follower").is_empty() {
        assert!(Instant::now() < deadline, "the leader did not step down");
        assert!(node.exited().is_none(), "the leader exited");
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_secs(2));
    let ended = node.terminate(Duration::from_secs(30));
    eprintln!("stepped-down leader, etcd paused: SIGTERM to exit {ended:?}");
    let (status, took) = ended.expect("the node did not exit within 30 s of SIGTERM");
    assert!(status.success(), "{status}");
    assert!(took <= EXITS_WITHIN, "{took:?}");
}
