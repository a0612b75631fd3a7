//! The same 1 → 1 → 1 16 B auto-ack flow as `hourglass-perf throughput --auto-ack`, driven by
//! lapin instead of the raw client, to measure what the client itself costs in CPU per message
//! (docs/adr/0004-load-tool.md). Usage:
//!   cargo run --release -p hourglass-perf --example lapin_baseline -- URL SECONDS

use std::time::{Duration, Instant};

use futures_lite::StreamExt;
use lapin::options::{BasicConsumeOptions, BasicPublishOptions, QueueDeclareOptions, QueueDeleteOptions};
use lapin::types::FieldTable;
use lapin::{BasicProperties, Connection, ConnectionProperties};

/// Body size, as the standard matrix's small-message flow.
const BODY: [u8; 16] = [0; 16];
/// How long the consumer may lag behind after publishing stops.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(30);

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let url = args.next().unwrap_or_else(|| "amqp://guest:guest@127.0.0.1:5672/%2f".into());
    let seconds: f64 = args.next().map(|s| s.parse()).transpose()?.unwrap_or(5.0);
    let queue = format!("perf-lapin-{}", std::process::id());

    let publisher_conn = Connection::connect(&url, ConnectionProperties::default()).await?;
    let consumer_conn = Connection::connect(&url, ConnectionProperties::default()).await?;
    let publisher = publisher_conn.create_channel().await?;
    let consumer_channel = consumer_conn.create_channel().await?;
    publisher
        .queue_declare(queue.as_str().into(), QueueDeclareOptions::default(), FieldTable::default())
        .await?;
    let options = BasicConsumeOptions { no_ack: true, ..Default::default() };
    let mut consumer = consumer_channel
        .basic_consume(queue.as_str().into(), "c".into(), options, FieldTable::default())
        .await?;

    let cpu_start = own_cpu_ticks()?;
    let started = Instant::now();
    let consuming = tokio::spawn(async move {
        let mut received = 0u64;
        while let Some(Ok(_delivery)) = consumer.next().await {
            received += 1;
        }
        received
    });
    let mut published = 0u64;
    let deadline = started + Duration::from_secs_f64(seconds);
    while Instant::now() < deadline {
        publisher
            .basic_publish(
                "".into(),
                queue.as_str().into(),
                BasicPublishOptions::default(),
                &BODY,
                BasicProperties::default(),
            )
            .await?;
        published += 1;
    }
    // Wait for the queue to drain: passive declare reports what is left.
    let drain_deadline = Instant::now() + DRAIN_TIMEOUT;
    loop {
        let passive = QueueDeclareOptions { passive: true, ..Default::default() };
        let state = publisher.queue_declare(queue.as_str().into(), passive, FieldTable::default()).await?;
        if state.message_count() == 0 || Instant::now() >= drain_deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let elapsed = started.elapsed().as_secs_f64();
    let cpu_us = (own_cpu_ticks()? - cpu_start) * 10_000;
    publisher.queue_delete(queue.as_str().into(), QueueDeleteOptions::default()).await?;
    consuming.abort();
    println!(
        "lapin 1→1→1 16 B auto-ack: {published} msgs, {:.0} msg/s, client {:.2} µs CPU/msg",
        published as f64 / elapsed,
        cpu_us as f64 / published.max(1) as f64
    );
    Ok(())
}

/// utime + stime of this process in clock ticks (assumed 100/s, as `getconf CLK_TCK` says here).
fn own_cpu_ticks() -> anyhow::Result<u64> {
    let stat = std::fs::read_to_string("/proc/self/stat")?;
    let after = stat.rsplit_once(')').map(|(_, rest)| rest).unwrap_or_default();
    let fields: Vec<&str> = after.split_whitespace().collect();
    let tick = |i: usize| fields.get(i).and_then(|f| f.parse::<u64>().ok()).unwrap_or(0);
    Ok(tick(11) + tick(12))
}
