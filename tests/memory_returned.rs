//! Memory the operator pays for (issue #25): once a load has drained, an idle broker gives the
//! memory it freed back to the OS, so its resident size (what the memory alarm reads) comes back
//! near where it started. The allocator that does this is chosen in `src/main.rs`
//! (docs/adr/0010-allocator.md).

mod common;

use std::time::{Duration, Instant};

use bytes::BytesMut;
use common::raw_amqp::RawAmqp;
use common::RunningBroker;
use hourglass_wire::{
    encode_content, BasicConsume, BasicPublish, EncodedProperties, Method, QueueDeclare, ShortStr,
};
use tokio::io::AsyncWriteExt;

const MIB: u64 = 1024 * 1024;
/// Messages queued by the load, in batches of `BATCH` per write.
const MESSAGES: u32 = 100_000;
const BATCH: u32 = 500;
/// Body size: with the queue's own bookkeeping, the load holds a few hundred MiB.
const BODY_BYTES: usize = 2_048;
/// The load must have grown the broker by at least this much, or the test proves nothing.
const GROWTH_MIN: u64 = 150 * MIB;
/// How close to its idle size the drained broker must come back: a few arenas' worth of memory
/// the allocator keeps for reuse, far below what the load held.
const RETURNED_MARGIN: u64 = 40 * MIB;
/// How long it may take: jemalloc returns pages about 1 s after they are freed (ADR 0010); the
/// rest is margin for a loaded machine.
const RETURN_DEADLINE: Duration = Duration::from_secs(20);
/// Bound the fill and the drain (each takes a few seconds on a debug build), so a lost message
/// fails the test instead of hanging it, and the whole test stays under a minute.
const FILL_DEADLINE: Duration = Duration::from_secs(15);
const DRAIN_DEADLINE: Duration = Duration::from_secs(15);

/// A queue of 100,000 2 KiB messages published and consumed: within 20 s of the drain the idle broker's
/// RSS is back within 40 MiB of its idle size (glibc's malloc, and an output buffer that kept a
/// burst's allocation, held all of it).
#[tokio::test(flavor = "current_thread")]
async fn idle_broker_returns_the_memory_of_a_drained_queue() {
    let broker = RunningBroker::start();
    let mut raw = RawAmqp::open(&broker, &[1]).await;
    let mut watcher = RawAmqp::open(&broker, &[1]).await;
    assert_eq!(declare(&mut raw).await, 0);
    let idle = broker.rss_bytes();

    publish_load(&mut raw).await;
    wait_until_queued(&mut watcher).await;
    let loaded = broker.rss_bytes();
    assert!(
        loaded >= idle + GROWTH_MIN,
        "the load grew the broker from {} to only {} MiB",
        idle / MIB,
        loaded / MIB
    );

    drain(&mut raw).await;
    let started = Instant::now();
    let mut rss = broker.rss_bytes();
    while rss > idle + RETURNED_MARGIN && started.elapsed() < RETURN_DEADLINE {
        tokio::time::sleep(Duration::from_millis(100)).await;
        rss = broker.rss_bytes();
    }
    assert!(
        rss <= idle + RETURNED_MARGIN,
        "idle {} MiB, {} MiB with the queue full, still {} MiB {:?} after it drained",
        idle / MIB,
        loaded / MIB,
        rss / MIB,
        started.elapsed()
    );
    eprintln!(
        "idle {} MiB, loaded {} MiB, back to {} MiB {:.1} s after the drain",
        idle / MIB,
        loaded / MIB,
        rss / MIB,
        started.elapsed().as_secs_f64()
    );
}

/// Declares the transient queue `load` (or finds it): its message count.
async fn declare(raw: &mut RawAmqp) -> u32 {
    raw.send(&[(1, QueueDeclare { queue: ShortStr::from_static("load"), ..Default::default() }.into())])
        .await;
    match raw.next_method().await {
        Some((1, Method::QueueDeclareOk(ok))) => ok.message_count,
        other => panic!("expected queue.declare-ok, got {other:?}"),
    }
}

/// Polls the queue's message count (on a connection of its own, answered while the publisher's
/// backlog is still being read) until every message is in.
async fn wait_until_queued(watcher: &mut RawAmqp) {
    let started = Instant::now();
    loop {
        let queued = declare(watcher).await;
        if queued == MESSAGES {
            return;
        }
        assert!(started.elapsed() < FILL_DEADLINE, "{queued} of {MESSAGES} queued in {FILL_DEADLINE:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Publishes `MESSAGES` transient messages to `load`, `BATCH` to a write.
async fn publish_load(raw: &mut RawAmqp) {
    let publish: Method =
        BasicPublish { routing_key: ShortStr::from_static("load"), ..Default::default() }.into();
    let mut batch = BytesMut::new();
    for i in 0..BATCH {
        let body = [i as u8; BODY_BYTES];
        encode_content(1, &publish, &EncodedProperties::default(), &body, 131_072, &mut batch);
    }
    for _ in 0..MESSAGES / BATCH {
        raw.socket.write_all(&batch).await.expect("publish");
    }
}

/// Consumes the queue with no-ack until every message was delivered.
async fn drain(raw: &mut RawAmqp) {
    let consume = BasicConsume { queue: ShortStr::from_static("load"), no_ack: true, ..Default::default() };
    raw.send(&[(1, consume.into())]).await;
    let started = Instant::now();
    let mut delivered = 0;
    while delivered < MESSAGES {
        assert!(
            started.elapsed() < DRAIN_DEADLINE,
            "{delivered} of {MESSAGES} delivered in {DRAIN_DEADLINE:?}"
        );
        match raw.next_method().await {
            Some((1, Method::BasicDeliver(_))) => delivered += 1,
            Some((1, Method::BasicConsumeOk(_))) => {}
            other => panic!("expected basic.deliver, got {other:?}"),
        }
    }
}
