//! A stranger who can reach a follower's replication port (issue #21, findings 1 and 2;
//! docs/clustering.md "Security model"): posing as the leader with the pre-#21 protocol gets no
//! manifest and changes no file, and the confirmed messages survive the real leader's `kill -9`;
//! idle and oversized sockets cost the follower a bounded number of descriptors, are closed at
//! the handshake deadline or at once, and — from a stranger's host, 127.0.0.2, kept up without
//! pause — do not keep it from taking its real leader's stream.

mod cluster_support;
mod common;

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cluster_support::{Cluster, Node};
use lapin::options::*;
use lapin::types::FieldTable;
use lapin::{BasicProperties, Connection, ConnectionProperties};

/// How long a phase may take to elect, catch up or publish.
const PHASE: Duration = Duration::from_secs(40);

/// Publishes `count` persistent messages with confirms through `url` (connecting is retried
/// while a new leader starts; once publishing starts, any error fails the test).
async fn publish_confirmed(url: &str, queue: &str, count: usize) {
    let deadline = Instant::now() + PHASE;
    let conn = loop {
        match Connection::connect(url, ConnectionProperties::default()).await {
            Ok(conn) => break conn,
            Err(error) => assert!(Instant::now() < deadline, "cannot connect to {url}: {error}"),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let channel = conn.create_channel().await.unwrap();
    channel.confirm_select(ConfirmSelectOptions::default()).await.unwrap();
    let durable = QueueDeclareOptions { durable: true, ..Default::default() };
    channel.queue_declare(queue.into(), durable, FieldTable::default()).await.unwrap();
    for i in 0..count {
        let props = BasicProperties::default().with_delivery_mode(2);
        let body = format!("m{i}");
        let confirm = channel
            .basic_publish("".into(), queue.into(), BasicPublishOptions::default(), body.as_bytes(), props)
            .await
            .unwrap();
        assert!(confirm.await.unwrap().is_ack());
    }
    conn.close(200, "done".into()).await.unwrap();
}

/// The queue's depth through any running node but `not`, retried while a new leader starts.
async fn queue_depth(cluster: &Cluster, queue: &str, not: &str) -> u32 {
    let deadline = Instant::now() + PHASE;
    loop {
        let url = cluster.follower_url(not);
        if let Ok(conn) = Connection::connect(&url, ConnectionProperties::default()).await {
            let passive = QueueDeclareOptions { passive: true, durable: true, ..Default::default() };
            if let Ok(channel) = conn.create_channel().await {
                if let Ok(queue) = channel.queue_declare(queue.into(), passive, FieldTable::default()).await {
                    let _ = conn.close(200, "bye".into()).await;
                    return queue.message_count();
                }
            }
        }
        assert!(Instant::now() < deadline, "no node answered within {PHASE:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The files of a data directory and their lengths (the lock file aside).
fn files_of(dir: &Path) -> BTreeMap<String, u64> {
    let mut files = BTreeMap::new();
    for (sub, prefix) in [(dir.to_owned(), ""), (dir.join("messages"), "messages/")] {
        for entry in std::fs::read_dir(&sub).into_iter().flatten().flatten() {
            let meta = entry.metadata().unwrap();
            let name = entry.file_name().to_string_lossy().into_owned();
            if meta.is_file() && name != "hourglass.lock" {
                files.insert(format!("{prefix}{name}"), meta.len());
            }
        }
    }
    files
}

// The replication protocol as it was before issue #21, written out as a stranger would:
// `length:u32 kind:u8 payload`, strings `length:u16 bytes`.
fn old_frame(kind: u8, payload: &[u8]) -> Vec<u8> {
    let mut frame = ((payload.len() + 1) as u32).to_be_bytes().to_vec();
    frame.push(kind);
    frame.extend_from_slice(payload);
    frame
}

fn old_str(s: &str) -> Vec<u8> {
    let mut out = (s.len() as u16).to_be_bytes().to_vec();
    out.extend_from_slice(s.as_bytes());
    out
}

/// Hello{term, leader}: kind 1.
fn old_hello(term: u64, leader: &str) -> Vec<u8> {
    let mut payload = term.to_be_bytes().to_vec();
    payload.extend(old_str(leader));
    old_frame(1, &payload)
}

/// Op{seq 0, Remove{path}}: kind 6; then CaughtUp{seq}: kind 8.
fn old_wipe(paths: &[String]) -> Vec<u8> {
    let mut bytes = Vec::new();
    for path in paths {
        let mut payload = 0u64.to_be_bytes().to_vec();
        payload.extend(old_str(path));
        bytes.extend(old_frame(6, &payload));
    }
    bytes.extend(old_frame(8, &0u64.to_be_bytes()));
    bytes
}

/// Poses as `leader` at `term` to `follower`: the old hello, then (whatever the answer) a
/// removal of every file the follower holds. What came back.
fn forge_leader(follower: &Node, leader: &str, term: u64, paths: &[String]) -> Vec<u8> {
    let mut stranger = TcpStream::connect(("127.0.0.1", follower.replication)).unwrap();
    stranger.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
    let _ = stranger.write_all(&old_hello(term, leader));
    let mut answer = vec![0u8; 1 << 16];
    let n = stranger.read(&mut answer).unwrap_or(0);
    answer.truncate(n);
    let _ = stranger.write_all(&old_wipe(paths));
    // Whatever the follower says to the wipe (an ack, or the end of the stream).
    let mut rest = Vec::new();
    let _ = stranger.read_to_end(&mut rest);
    answer.extend(rest);
    answer
}

/// The forged-leader attack of issue #21 finding 1 — the leader's name and the current term
/// (from `/api/cluster`) in the pre-#21 hello, then a removal of every file — is refused by both
/// followers: no manifest comes back, no file changes, and after `kill -9` of the real leader the
/// new one has every confirmed message.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_stranger_posing_as_the_leader_gets_nothing_and_wipes_nothing() {
    let Some(mut cluster) = Cluster::start(3, &[]) else { return };
    let leader = tokio::task::block_in_place(|| cluster.wait_in_sync(PHASE));
    publish_confirmed(&cluster.follower_url(&leader), "forged", 300).await;
    let leader = tokio::task::block_in_place(|| cluster.wait_in_sync(PHASE));
    let view = cluster.view().expect("the cluster's view");
    let term = view["term"].as_u64().expect("a term");

    for follower in cluster.nodes.iter().filter(|n| n.name != leader) {
        let before = files_of(follower.data_dir());
        assert!(before.keys().any(|p| p.ends_with(".seg")), "{}: segments to protect", follower.name);
        let paths: Vec<String> = before.keys().cloned().collect();
        let answer = forge_leader(follower, &leader, term, &paths);
        assert!(
            !answer.windows(9).any(|w| w == b"messages/" || w.starts_with(b"catalog")),
            "{}: no manifest for a stranger: {answer:?}",
            follower.name
        );
        let after = files_of(follower.data_dir());
        for (path, len) in &before {
            let now = after.get(path);
            assert!(
                now.is_some_and(|now| now >= len),
                "{}: {path} was {len} bytes, now {now:?}",
                follower.name
            );
        }
    }

    cluster.node(&leader).kill9();
    tokio::task::block_in_place(|| cluster.wait_new_leader(&leader, PHASE));
    assert_eq!(queue_depth(&cluster, "forged", &leader).await, 300, "every confirmed message survives");
}

/// Reads until the peer closes or `within` passes; whether it closed, and when.
fn closed_within(socket: &mut TcpStream, within: Duration) -> Option<Duration> {
    let started = Instant::now();
    let mut buf = [0u8; 1024];
    while started.elapsed() < within {
        socket.set_read_timeout(Some(Duration::from_millis(100))).unwrap();
        match socket.read(&mut buf) {
            Ok(0) => return Some(started.elapsed()),
            Ok(_) => {}
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {}
            Err(_) => return Some(started.elapsed()),
        }
    }
    None
}

/// Unauthenticated sockets a follower holds at most (`receiver::UNAUTHENTICATED_SOCKETS_MAX`),
/// and from one address (`receiver::UNAUTHENTICATED_PER_ADDRESS_MAX`).
const CAP: usize = 16;
const PER_ADDRESS: usize = 4;

/// Whether the peer has closed `socket` (a read would not block and returns nothing or fails).
fn closed_now(mut socket: &TcpStream) -> bool {
    socket.set_nonblocking(true).unwrap();
    let mut buf = [0u8; 64];
    let closed = match socket.read(&mut buf) {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) => e.kind() != std::io::ErrorKind::WouldBlock,
    };
    socket.set_nonblocking(false).unwrap();
    closed
}

/// Open descriptors of process `pid`.
fn fd_count(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map(|d| d.count()).unwrap_or(0)
}

/// A socket to `port` from `source` (another loopback address: a stranger's host), or `None` if
/// it cannot be made (the port's backlog is full for a moment).
fn connect_from(source: [u8; 4], port: u16) -> Option<TcpStream> {
    use socket2::{Domain, Socket, Type};
    let socket = Socket::new(Domain::IPV4, Type::STREAM, None).ok()?;
    socket.bind(&std::net::SocketAddr::from((source, 0)).into()).ok()?;
    socket
        .connect_timeout(&std::net::SocketAddr::from(([127, 0, 0, 1], port)).into(), Duration::from_secs(1))
        .ok()?;
    Some(socket.into())
}

/// The stranger's host: every socket of the flood comes from here, the nodes use 127.0.0.1.
const STRANGER: [u8; 4] = [127, 0, 0, 2];

/// Keeps `per_port` idle sockets open from the stranger's host to each of `ports`, opening new
/// ones as the followers close them, until `stop` (at most `for_at_most`).
fn sustained_flood(ports: Vec<u16>, per_port: usize, stop: Arc<AtomicBool>, for_at_most: Duration) {
    let started = Instant::now();
    let mut open: Vec<(u16, TcpStream)> = Vec::new();
    while !stop.load(Ordering::SeqCst) && started.elapsed() < for_at_most {
        open.retain(|(_, socket)| !closed_now(socket));
        for port in &ports {
            let held = open.iter().filter(|(p, _)| p == port).count();
            for _ in held..per_port {
                if let Some(socket) = connect_from(STRANGER, *port) {
                    open.push((*port, socket));
                }
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Issue #21 finding 2: a silent socket is closed at the 5 s handshake deadline; one announcing
/// a 30 MiB frame is closed at once, before anything is buffered; 500 idle sockets cost a
/// follower a bounded number of descriptors (all but the capped few closed at once); and a
/// stranger who keeps re-opening idle sockets does not keep a follower from taking the stream of
/// its new leader after `kill -9` of the old one.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn idle_and_oversized_sockets_do_not_exhaust_a_followers_replication_port() {
    let Some(mut cluster) = Cluster::start(3, &[]) else { return };
    let leader = tokio::task::block_in_place(|| cluster.wait_in_sync(PHASE));
    publish_confirmed(&cluster.follower_url(&leader), "bounded", 50).await;
    let followers: Vec<&Node> = cluster.nodes.iter().filter(|n| n.name != leader).collect();
    let port = followers[0].replication;

    let mut silent = connect_from(STRANGER, port).expect("a socket");
    let closed = closed_within(&mut silent, Duration::from_secs(10));
    assert!(
        closed.is_some_and(|at| at >= Duration::from_secs(4)),
        "a silent socket is closed at the 5 s deadline, not before: {closed:?}"
    );

    let mut huge = connect_from(STRANGER, port).expect("a socket");
    huge.write_all(&(30u32 << 20).to_be_bytes()).unwrap();
    let _ = huge.write_all(&[0u8; 4096]);
    let closed = closed_within(&mut huge, Duration::from_secs(4));
    assert!(closed.is_some_and(|at| at < Duration::from_secs(2)), "a 30 MiB length prefix: {closed:?}");

    let baseline: Vec<usize> = followers.iter().map(|f| fd_count(f.pid())).collect();
    let mut idle = Vec::new();
    for follower in &followers {
        idle.extend((0..250).filter_map(|_| connect_from(STRANGER, follower.replication)));
    }
    // Within 3 s — before the deadline could close them — all but the capped few are closed.
    let started = Instant::now();
    let mut open: Vec<&TcpStream> = idle.iter().collect();
    while open.len() > 2 * PER_ADDRESS && started.elapsed() < Duration::from_secs(3) {
        open.retain(|socket| !closed_now(socket));
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(idle.len() >= 450, "the flood: {} sockets", idle.len());
    let (held, opened) = (open.len(), idle.len());
    assert!(
        held <= 2 * PER_ADDRESS,
        "{held} of {opened} idle sockets still open after {:?}",
        started.elapsed()
    );
    for (follower, baseline) in followers.iter().zip(&baseline) {
        let now = fd_count(follower.pid());
        assert!(
            now < baseline + 100,
            "{}: {baseline} descriptors before 250 idle sockets, {now} with them",
            follower.name
        );
    }

    // The stranger keeps the followers' unauthenticated places as full as it can while the
    // leader dies: the new leader must still get its stream to the other follower, or nothing
    // more is confirmed (2 of 3 must hold it).
    let stop = Arc::new(AtomicBool::new(false));
    let ports: Vec<u16> = followers.iter().map(|f| f.replication).collect();
    let flood = {
        let stop = stop.clone();
        std::thread::spawn(move || sustained_flood(ports, 2 * CAP, stop, 2 * PHASE))
    };
    cluster.node(&leader).kill9();
    tokio::task::block_in_place(|| cluster.wait_new_leader(&leader, PHASE));
    // Both running nodes in sync: the new leader's stream reached the flooded follower.
    let new_leader = tokio::task::block_in_place(|| cluster.wait_in_sync(PHASE));
    publish_confirmed(&cluster.node(&new_leader).amqp_url(), "bounded", 50).await;
    assert_eq!(
        queue_depth(&cluster, "bounded", &leader).await,
        100,
        "every confirmed message, via {new_leader}"
    );
    stop.store(true, Ordering::SeqCst);
    flood.join().unwrap();
    drop(idle);
}

/// A clustered node with neither a secret nor replication TLS, or with a secret file that is
/// missing or too short, refuses to start in one line that says why (no etcd is needed to see
/// it: nothing is joined first).
#[test]
fn a_node_without_a_usable_secret_or_replication_tls_refuses_to_start_in_one_line() {
    let dir = std::env::temp_dir().join(format!("hourglass-cluster-secret-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let short = dir.join("short.secret");
    std::fs::write(&short, "too short\n").unwrap();
    let short = short.to_str().unwrap();
    let missing = dir.join("missing.secret");
    let missing = missing.to_str().unwrap();
    let etcd = ["--etcd-endpoints", "http://127.0.0.1:9", "--node-name", "n1"];
    let cases: [(&[&str], &[&str]); 3] = [
        (&[], &["cluster_secret_file", "replication_tls", "head -c 32 /dev/urandom | base64 > FILE"]),
        (&["--cluster-secret-file", short], &[short, "9 bytes", "fewer than 16"]),
        (&["--cluster-secret-file", missing], &[missing, "cannot read"]),
    ];
    for (i, (flags, expected)) in cases.iter().enumerate() {
        let args: Vec<&str> = etcd.iter().chain(flags.iter()).copied().collect();
        let (status, printed) =
            common::run_until_exit(&dir.join(format!("data{i}")), &args, Duration::from_secs(30));
        assert!(!status.success(), "{printed}");
        let error: Vec<&str> = printed.lines().filter(|l| l.starts_with("hourglass: ")).collect();
        assert_eq!(error.len(), 1, "one line: {printed}");
        for text in *expected {
            assert!(error[0].contains(text), "{text:?} in {:?}", error[0]);
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}
