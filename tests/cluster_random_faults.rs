//! Random faults under random traffic (bounded in time; the seed is printed, and
//! `HOURGLASS_FAULT_SEED` replays one): publishers with confirms (some messages delayed),
//! consumers getting and acking, while random nodes are killed (`kill -9`) or paused (SIGSTOP) and
//! brought back. At the end: nothing confirmed is lost (each was consumed or is still queued),
//! nothing confirmed and never consumed is queued twice, one leader, every node in sync.

mod cluster_support;
mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cluster_support::Cluster;
use lapin::options::*;
use lapin::types::{AMQPValue, FieldTable, ShortString};
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties, ExchangeKind};

const QUEUE: &str = "chaos";
/// How long faults are injected (`HOURGLASS_FAULT_SECS` changes it).
const DEFAULT_FAULT_SECS: u64 = 30;
/// The longest delay a message gets: the final check waits this out.
const DELAY_MAX_MS: u64 = 2_000;

/// xorshift64*: small, seedable, good enough to pick faults and traffic.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

#[derive(Default)]
struct Ledger {
    confirmed: BTreeSet<String>,
    consumed: BTreeSet<String>,
}

async fn open(url: &str) -> Option<(Connection, Channel)> {
    let conn = tokio::time::timeout(
        Duration::from_secs(5),
        Connection::connect(url, ConnectionProperties::default()),
    )
    .await
    .ok()?
    .ok()?;
    let channel = conn.create_channel().await.ok()?;
    Some((conn, channel))
}

async fn declare(channel: &Channel) -> lapin::Result<()> {
    let mut args = FieldTable::default();
    args.insert(ShortString::from("x-delayed-type"), AMQPValue::LongString("direct".into()));
    let durable_exchange = ExchangeDeclareOptions { durable: true, ..Default::default() };
    channel
        .exchange_declare(
            "chaos.later".into(),
            ExchangeKind::Custom("x-delayed-message".into()),
            durable_exchange,
            args,
        )
        .await?;
    let durable = QueueDeclareOptions { durable: true, ..Default::default() };
    channel.queue_declare(QUEUE.into(), durable, FieldTable::default()).await?;
    channel
        .queue_bind(
            QUEUE.into(),
            "chaos.later".into(),
            QUEUE.into(),
            QueueBindOptions::default(),
            FieldTable::default(),
        )
        .await?;
    Ok(())
}

/// Publishes with confirms through `url()`, every fourth message delayed, until `stop`.
async fn publisher(
    url: Arc<dyn Fn() -> String + Send + Sync>,
    seed: u64,
    ledger: Arc<Mutex<Ledger>>,
    stop: Arc<AtomicBool>,
) {
    let mut rng = Rng(seed | 1);
    let mut n = 0u64;
    while !stop.load(Ordering::SeqCst) && n < 50_000 {
        let Some((conn, channel)) = open(&url()).await else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        if channel.confirm_select(ConfirmSelectOptions::default()).await.is_err()
            || declare(&channel).await.is_err()
        {
            continue;
        }
        while !stop.load(Ordering::SeqCst) {
            let id = format!("m{n}");
            n += 1;
            let mut headers = FieldTable::default();
            let exchange = if rng.below(4) == 0 {
                headers.insert(
                    ShortString::from("x-delay"),
                    AMQPValue::LongLongInt(rng.below(DELAY_MAX_MS) as i64),
                );
                "chaos.later"
            } else {
                ""
            };
            let props = BasicProperties::default().with_delivery_mode(2).with_headers(headers);
            let Ok(pending) = channel
                .basic_publish(
                    exchange.into(),
                    QUEUE.into(),
                    BasicPublishOptions::default(),
                    id.as_bytes(),
                    props,
                )
                .await
            else {
                break;
            };
            match tokio::time::timeout(Duration::from_secs(15), pending).await {
                Ok(Ok(confirmation)) if confirmation.is_ack() => {
                    ledger.lock().unwrap().confirmed.insert(id);
                }
                _ => break,
            }
        }
        drop(conn);
    }
}

/// Gets and acks messages (some requeued) through `url()` until `stop`; an ack counts once sent.
async fn consumer(
    url: Arc<dyn Fn() -> String + Send + Sync>,
    seed: u64,
    ledger: Arc<Mutex<Ledger>>,
    stop: Arc<AtomicBool>,
) {
    let mut rng = Rng(seed.rotate_left(17) | 1);
    while !stop.load(Ordering::SeqCst) {
        let Some((conn, channel)) = open(&url()).await else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        while !stop.load(Ordering::SeqCst) {
            let got = match channel.basic_get(QUEUE.into(), BasicGetOptions { no_ack: false }).await {
                Ok(got) => got,
                Err(_) => break,
            };
            let Some(message) = got else {
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            };
            let id = String::from_utf8_lossy(&message.delivery.data).into_owned();
            let tag = message.delivery.delivery_tag;
            if rng.below(5) == 0 {
                if channel
                    .basic_nack(tag, BasicNackOptions { requeue: true, ..Default::default() })
                    .await
                    .is_err()
                {
                    break;
                }
            } else {
                if channel.basic_ack(tag, BasicAckOptions::default()).await.is_err() {
                    break;
                }
                ledger.lock().unwrap().consumed.insert(id);
            }
            tokio::time::sleep(Duration::from_millis(rng.below(15))).await;
        }
        drop(conn);
    }
}

async fn drain(cluster: &Cluster) -> BTreeMap<String, usize> {
    let deadline = Instant::now() + Duration::from_secs(40);
    loop {
        if let Some((conn, channel)) = open(&cluster.follower_url("")).await {
            let mut bodies = BTreeMap::new();
            let mut complete = true;
            loop {
                match channel.basic_get(QUEUE.into(), BasicGetOptions { no_ack: true }).await {
                    Ok(Some(m)) => {
                        *bodies.entry(String::from_utf8_lossy(&m.delivery.data).into_owned()).or_insert(0) +=
                            1
                    }
                    Ok(None) => break,
                    Err(_) => {
                        complete = false;
                        break;
                    }
                }
            }
            drop(conn);
            if complete {
                return bodies;
            }
        }
        assert!(Instant::now() < deadline, "could not drain");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn random_faults_under_random_traffic_lose_nothing_confirmed() {
    let seed = std::env::var("HOURGLASS_FAULT_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(1)
    });
    let secs =
        std::env::var("HOURGLASS_FAULT_SECS").ok().and_then(|s| s.parse().ok()).unwrap_or(DEFAULT_FAULT_SECS);
    eprintln!("random faults: seed {seed} (replay with HOURGLASS_FAULT_SEED={seed}), {secs} s");
    let Some(mut cluster) = Cluster::start(3, &[]) else { return };
    let mut rng = Rng(seed | 1);
    tokio::task::block_in_place(|| cluster.wait_in_sync(Duration::from_secs(40)));
    let ledger = Arc::new(Mutex::new(Ledger::default()));
    let stop = Arc::new(AtomicBool::new(false));
    let urls: Vec<String> = cluster.nodes.iter().map(|n| n.amqp_url()).collect();
    let pick = |offset: usize| -> Arc<dyn Fn() -> String + Send + Sync> {
        let urls = urls.clone();
        let turn = std::sync::atomic::AtomicUsize::new(offset);
        Arc::new(move || urls[turn.fetch_add(1, Ordering::Relaxed) % urls.len()].clone())
    };
    let tasks = [
        tokio::spawn(publisher(pick(0), rng.next(), ledger.clone(), stop.clone())),
        tokio::spawn(consumer(pick(1), rng.next(), ledger.clone(), stop.clone())),
    ];
    let until = Instant::now() + Duration::from_secs(secs);
    while Instant::now() < until {
        let leader = tokio::task::block_in_place(|| cluster.view())
            .and_then(|v| v["leader"].as_str().map(str::to_owned));
        let names: Vec<String> = cluster.nodes.iter().map(|n| n.name.clone()).collect();
        let victim = match (rng.below(2), &leader) {
            (0, Some(leader)) => leader.clone(),
            _ => names[rng.below(names.len() as u64) as usize].clone(),
        };
        let pause = rng.below(2) == 0;
        let down_ms = 500 + rng.below(4_000);
        eprintln!(
            "fault: {} {victim} (leader {leader:?}) for {down_ms} ms",
            if pause { "SIGSTOP" } else { "kill -9" }
        );
        if pause {
            cluster.node(&victim).stop_signal();
        } else {
            cluster.node(&victim).kill9();
        }
        tokio::time::sleep(Duration::from_millis(down_ms)).await;
        if pause {
            cluster.node(&victim).cont_signal();
        } else {
            cluster.node(&victim).start();
        }
        tokio::task::block_in_place(|| cluster.wait_in_sync(Duration::from_secs(40)));
        tokio::time::sleep(Duration::from_millis(rng.below(2_000))).await;
    }
    stop.store(true, Ordering::SeqCst);
    for task in tasks {
        task.await.unwrap();
    }
    tokio::time::sleep(Duration::from_millis(DELAY_MAX_MS + 500)).await;
    tokio::task::block_in_place(|| cluster.wait_in_sync(Duration::from_secs(40)));
    let remaining = drain(&cluster).await;
    let ledger = ledger.lock().unwrap();
    let lost: Vec<&String> = ledger
        .confirmed
        .iter()
        .filter(|id| !ledger.consumed.contains(*id) && !remaining.contains_key(*id))
        .collect();
    let doubled: Vec<&String> = remaining
        .iter()
        .filter(|(id, n)| **n > 1 && ledger.confirmed.contains(*id) && !ledger.consumed.contains(*id))
        .map(|(id, _)| id)
        .collect();
    eprintln!(
        "seed {seed}: {} confirmed, {} consumed, {} left; lost {}, doubled {}",
        ledger.confirmed.len(),
        ledger.consumed.len(),
        remaining.len(),
        lost.len(),
        doubled.len()
    );
    assert!(lost.is_empty(), "seed {seed}: confirmed messages lost: {:?}", &lost[..lost.len().min(10)]);
    assert!(doubled.is_empty(), "seed {seed}: confirmed messages queued twice: {doubled:?}");
    assert!(
        ledger.confirmed.len() > 100,
        "seed {seed}: traffic flowed ({} confirmed)",
        ledger.confirmed.len()
    );
}
