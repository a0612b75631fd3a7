//! Slow and silent clients against the real binary (issue #12, "Done means"; `docs/security.md`
//! "Slow and silent clients"): AMQP sockets that never finish the handshake and HTTP requests that
//! trickle their headers, while a normal client keeps publishing and consuming. Its latency and
//! the broker's memory and file descriptors must stay bounded.
//!
//! `slow_and_silent_clients_leave_a_normal_client_unharmed` is the short CI version (~15 s).
//! The full run (5,000 + 1,000 attackers for 30 s) is `#[ignore]`d: run it with a raised fd
//! limit, ideally against a release binary:
//! `ulimit -n 65536; HOURGLASS_E2E_BIN=target/release/hourglass cargo test --test slow_clients
//! -- --ignored --nocapture`. `listing_with_many_queues_does_not_stall_publishers` (also ignored)
//! measures finding 7: `GET /api/queues?page=1&page_size=1` over many queues and a publisher's
//! confirm latency meanwhile.

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{connect, http, RunningBroker};
use futures_lite::StreamExt;
use lapin::options::*;
use lapin::types::FieldTable;
use lapin::BasicProperties;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Bounds every single wait of the normal client.
const STEP: Duration = Duration::from_secs(10);

/// What one run saw.
#[derive(Debug, Default)]
struct Figures {
    latencies: Vec<Duration>,
    rss_kib_max: u64,
    fds_max: usize,
    amqp_held_max: Duration,
    http_held_max: Duration,
    amqp_sockets_opened: u64,
    http_sockets_opened: u64,
}

impl Figures {
    fn percentile(&self, p: f64) -> Duration {
        let mut sorted = self.latencies.clone();
        sorted.sort();
        let at = ((sorted.len() as f64 - 1.0) * p).round() as usize;
        sorted.get(at).copied().unwrap_or_default()
    }

    fn report(&self, title: &str) {
        println!(
            "{title}: normal client {} round trips, p50 {:?}, p99 {:?}, max {:?}; broker RSS max {} MiB, \
             fds max {}; AMQP sockets opened {} (held at most {:?}), HTTP sockets opened {} (held at most {:?})",
            self.latencies.len(),
            self.percentile(0.5),
            self.percentile(0.99),
            self.latencies.iter().max().copied().unwrap_or_default(),
            self.rss_kib_max / 1024,
            self.fds_max,
            self.amqp_sockets_opened,
            self.amqp_held_max,
            self.http_sockets_opened,
            self.http_held_max,
        );
    }
}

fn fd_count(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map(|d| d.count()).unwrap_or(0)
}

/// Longest time any attacker's socket stayed open, in ms.
#[derive(Default)]
struct Held {
    max_ms: AtomicU64,
    opened: AtomicU64,
}

impl Held {
    fn record(&self, since: Instant) {
        self.max_ms.fetch_max(since.elapsed().as_millis() as u64, Ordering::Relaxed);
    }
}

/// Connects, sends the AMQP protocol header (every other socket) or nothing, and waits for the
/// broker to close; again until `stop`.
async fn silent_amqp(addr: std::net::SocketAddr, send_header: bool, stop: Arc<AtomicBool>, held: Arc<Held>) {
    while !stop.load(Ordering::Relaxed) {
        let Ok(mut socket) = TcpStream::connect(addr).await else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        held.opened.fetch_add(1, Ordering::Relaxed);
        let since = Instant::now();
        if send_header {
            let _ = socket.write_all(b"AMQP\x00\x00\x09\x01").await;
        }
        let mut buf = [0u8; 1024];
        loop {
            if stop.load(Ordering::Relaxed) {
                return;
            }
            match tokio::time::timeout(Duration::from_millis(500), socket.read(&mut buf)).await {
                Ok(Ok(0)) | Ok(Err(_)) => break,
                _ => {}
            }
        }
        held.record(since);
    }
}

/// Connects and trickles a never-ending request head, a byte every `every`, until the broker
/// closes; again until `stop`.
async fn trickling_http(addr: std::net::SocketAddr, every: Duration, stop: Arc<AtomicBool>, held: Arc<Held>) {
    let head = b"GET /api/overview HTTP/1.1\r\nHost: localhost\r\nX-Slow: ";
    while !stop.load(Ordering::Relaxed) {
        let Ok(mut socket) = TcpStream::connect(addr).await else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        held.opened.fetch_add(1, Ordering::Relaxed);
        let since = Instant::now();
        for byte in head.iter().copied().chain(std::iter::repeat(b'a')) {
            if stop.load(Ordering::Relaxed) {
                return;
            }
            if socket.write_all(&[byte]).await.is_err() {
                break;
            }
            let mut buf = [0u8; 256];
            match tokio::time::timeout(every, socket.read(&mut buf)).await {
                Ok(Ok(0)) | Ok(Err(_)) => break,
                _ => {}
            }
        }
        held.record(since);
    }
}

/// The normal client: publishes with confirms to a queue it consumes from, one message at a
/// time, and records each publish → delivery round trip, until `until`.
async fn normal_client(broker: &RunningBroker, until: Instant) -> Vec<Duration> {
    let conn = connect(broker).await;
    let channel = conn.create_channel().await.unwrap();
    channel
        .queue_declare("probe".into(), QueueDeclareOptions::default(), FieldTable::default())
        .await
        .unwrap();
    channel.confirm_select(ConfirmSelectOptions::default()).await.unwrap();
    let consuming = conn.create_channel().await.unwrap();
    let mut consumer = consuming
        .basic_consume(
            "probe".into(),
            "probe".into(),
            BasicConsumeOptions { no_ack: true, ..Default::default() },
            FieldTable::default(),
        )
        .await
        .unwrap();
    let mut latencies = Vec::new();
    while Instant::now() < until {
        let sent = Instant::now();
        let confirm = channel
            .basic_publish(
                "".into(),
                "probe".into(),
                BasicPublishOptions::default(),
                b"ping",
                BasicProperties::default(),
            )
            .await
            .unwrap();
        assert!(tokio::time::timeout(STEP, confirm).await.expect("confirm in time").unwrap().is_ack());
        tokio::time::timeout(STEP, consumer.next()).await.expect("delivery in time").expect("open").unwrap();
        latencies.push(sent.elapsed());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    latencies
}

/// Runs `amqp` silent AMQP sockets and `tricklers` trickling HTTP sockets against `broker` for
/// `attack`, the normal client throughout, sampling the broker's RSS and fds.
async fn run(
    broker: &RunningBroker,
    amqp: usize,
    tricklers: usize,
    trickle_every: Duration,
    attack: Duration,
) -> Figures {
    let stop = Arc::new(AtomicBool::new(false));
    let (amqp_held, http_held) = (Arc::new(Held::default()), Arc::new(Held::default()));
    let mut attackers = tokio::task::JoinSet::new();
    for i in 0..amqp {
        attackers.spawn(silent_amqp(broker.amqp, i % 2 == 0, stop.clone(), amqp_held.clone()));
    }
    for _ in 0..tricklers {
        attackers.spawn(trickling_http(broker.http, trickle_every, stop.clone(), http_held.clone()));
    }
    let until = Instant::now() + attack;
    let pid = broker.pid();
    let sampling = async {
        let (mut rss, mut fds) = (0, 0);
        while Instant::now() < until {
            rss = rss.max(common::rss_bytes(pid) / 1024);
            fds = fds.max(fd_count(pid));
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        (rss, fds)
    };
    let (latencies, (rss_kib_max, fds_max)) = tokio::join!(normal_client(broker, until), sampling);
    stop.store(true, Ordering::Relaxed);
    while tokio::time::timeout(Duration::from_secs(2), attackers.join_next()).await.ok().flatten().is_some() {
    }
    attackers.abort_all();
    Figures {
        latencies,
        rss_kib_max,
        fds_max,
        amqp_held_max: Duration::from_millis(amqp_held.max_ms.load(Ordering::Relaxed)),
        http_held_max: Duration::from_millis(http_held.max_ms.load(Ordering::Relaxed)),
        amqp_sockets_opened: amqp_held.opened.load(Ordering::Relaxed),
        http_sockets_opened: http_held.opened.load(Ordering::Relaxed),
    }
}

/// CI size: 300 silent AMQP sockets and 200 trickling HTTP requests (request timeout lowered to
/// 1 s) for 8 s. The normal client's p99 round trip stays under 500 ms, trickling sockets are
/// closed within the timeout (plus one trickle step), and the broker's fds stay under the
/// attackers' count plus a small reserve.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_and_silent_clients_leave_a_normal_client_unharmed() {
    let broker = RunningBroker::start_with(&["--http-request-timeout-ms", "1000"]);
    let figures = run(&broker, 300, 200, Duration::from_millis(200), Duration::from_secs(8)).await;
    figures.report("CI slow clients");
    assert!(figures.latencies.len() > 50, "the normal client barely ran: {}", figures.latencies.len());
    assert!(figures.percentile(0.99) < Duration::from_millis(500), "p99 {:?}", figures.percentile(0.99));
    assert!(figures.http_held_max < Duration::from_millis(2_500), "HTTP held {:?}", figures.http_held_max);
    assert!(figures.http_sockets_opened > 200, "trickling sockets were never closed and reopened");
    assert!(figures.fds_max < 300 + 200 + 128, "broker fds {}", figures.fds_max);
    assert_eq!(http(&broker, "GET", "/api/overview", "").await.0, 200);
}

/// The full run: 5,000 AMQP sockets that never finish the handshake and 1,000 HTTP requests
/// trickling a header byte a second, for 30 s at the default timeouts (10 s handshake, 5 s HTTP).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs ulimit -n >= 16384; run by hand, figures in docs/security.md"]
async fn five_thousand_silent_and_a_thousand_trickling_clients() {
    let broker = RunningBroker::start();
    let baseline = run(&broker, 0, 0, Duration::from_secs(1), Duration::from_secs(5)).await;
    baseline.report("baseline (no attackers)");
    let figures = run(&broker, 5_000, 1_000, Duration::from_secs(1), Duration::from_secs(30)).await;
    figures.report("5,000 silent AMQP + 1,000 trickling HTTP");
    assert!(figures.amqp_held_max < Duration::from_secs(12), "AMQP held {:?}", figures.amqp_held_max);
    assert!(figures.http_held_max < Duration::from_secs(7), "HTTP held {:?}", figures.http_held_max);
    assert!(figures.percentile(0.99) < Duration::from_secs(1), "p99 {:?}", figures.percentile(0.99));
}

/// Finding 7's measurement: declares `HOURGLASS_LISTING_QUEUES` queues (default 100,000), then
/// times `GET /api/queues?page=1&page_size=1` while a publisher measures its confirm latency.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement: run by hand, figures in docs/security.md"]
async fn listing_with_many_queues_does_not_stall_publishers() {
    let queues: usize =
        std::env::var("HOURGLASS_LISTING_QUEUES").ok().and_then(|v| v.parse().ok()).unwrap_or(100_000);
    let broker = RunningBroker::start();
    let conn = connect(&broker).await;
    let declared = Instant::now();
    let channel = conn.create_channel().await.unwrap();
    for i in 0..queues {
        let options = QueueDeclareOptions { nowait: true, ..Default::default() };
        channel
            .queue_declare(format!("many-{i:06}").as_str().into(), options, FieldTable::default())
            .await
            .unwrap();
    }
    channel
        .queue_declare("many-sync".into(), QueueDeclareOptions::default(), FieldTable::default())
        .await
        .unwrap();
    println!("{queues} queues declared in {:?}", declared.elapsed());
    let publisher = conn.create_channel().await.unwrap();
    publisher.confirm_select(ConfirmSelectOptions::default()).await.unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let stopped = stop.clone();
    let confirms = tokio::spawn(async move {
        let mut worst = Duration::ZERO;
        while !stopped.load(Ordering::Relaxed) {
            let sent = Instant::now();
            let confirm = publisher
                .basic_publish(
                    "".into(),
                    "many-sync".into(),
                    BasicPublishOptions::default(),
                    b"x",
                    BasicProperties::default(),
                )
                .await
                .unwrap();
            confirm.await.unwrap();
            worst = worst.max(sent.elapsed());
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        worst
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    for path in
        ["/api/queues?page=1&page_size=1", "/api/queues?page=2&page_size=100&sort=name&sort_reverse=true"]
    {
        let started = Instant::now();
        let (status, _) = http(&broker, "GET", path, "").await;
        println!("GET {path}: {status} in {:?}", started.elapsed());
    }
    let started = Instant::now();
    let (status, body) = http(&broker, "GET", "/api/queues", "").await;
    println!("GET /api/queues (all, {} bytes): {status} in {:?}", body.len(), started.elapsed());
    stop.store(true, Ordering::Relaxed);
    println!("worst publisher confirm latency meanwhile: {:?}", confirms.await.unwrap());
}
