//! Micro-benchmarks of the deadline indexes (issue #8): what a message with a deadline costs to
//! enter a queue and to leave it when the deadline passes, with the queue already holding
//! `backlog` messages with later deadlines. Per-message TTL (`expiration`), delays through an
//! `x-delayed-message` exchange, and the expiry sweep. Broker core only, manual clock, no I/O.
//! Run with `cargo bench -p hourglass-broker --bench deadline_indexes`.

use std::time::Duration;

use hourglass_testkit::{short, Chan, TestBroker};
use hourglass_wire::{BasicProperties, ExchangeDeclare, FieldTable, FieldValue, QueueBind, QueueDeclare};

/// Messages already waiting (with later deadlines) when the measured one arrives.
const BACKLOGS: [usize; 3] = [1_000, 100_000, 1_000_000];
/// Messages expired by one clock step in the sweep benchmark.
const SWEEP: usize = 1_000;
/// Far beyond every measured deadline: the backlog never falls due during a run.
const BACKLOG_DEADLINE_MS: u64 = 3_600_000;

fn main() {
    divan::main();
}

fn with_expiration(ms: u64) -> BasicProperties {
    BasicProperties { expiration: Some(short(&ms.to_string())), ..Default::default() }
}

fn with_delay(ms: u64) -> BasicProperties {
    let headers = FieldTable::new().with_entry("x-delay", FieldValue::I64(ms as i64));
    BasicProperties { headers: Some(headers), ..Default::default() }
}

/// A queue `q` holding `backlog` messages that expire in an hour.
fn ttl_queue(backlog: usize) -> (TestBroker, Chan) {
    let mut broker = TestBroker::new();
    let chan = broker.channel();
    broker.call(chan, QueueDeclare { queue: short("q"), ..Default::default() });
    for _ in 0..backlog {
        broker.publish_with(chan, "", "q", with_expiration(BACKLOG_DEADLINE_MS), b"0123456789abcdef", false);
    }
    (broker, chan)
}

/// A delayed exchange `d` bound to queue `q`, holding `backlog` messages delayed by an hour.
fn delayed_queue(backlog: usize) -> (TestBroker, Chan) {
    let mut broker = TestBroker::new();
    let chan = broker.channel();
    let arguments = FieldTable::new().with_entry("x-delayed-type", FieldValue::LongStr("direct".into()));
    let declare = ExchangeDeclare {
        exchange: short("d"),
        kind: short("x-delayed-message"),
        arguments,
        ..Default::default()
    };
    broker.call(chan, declare);
    broker.call(chan, QueueDeclare { queue: short("q"), ..Default::default() });
    broker.call(
        chan,
        QueueBind { queue: short("q"), exchange: short("d"), routing_key: short("k"), ..Default::default() },
    );
    for _ in 0..backlog {
        broker.publish_with(chan, "d", "k", with_delay(BACKLOG_DEADLINE_MS), b"0123456789abcdef", false);
    }
    (broker, chan)
}

/// One publish with a per-message TTL into a queue whose other messages expire later.
#[divan::bench(args = BACKLOGS, sample_count = 20, sample_size = 200)]
fn publish_with_expiration(bencher: divan::Bencher, backlog: usize) {
    let (mut broker, chan) = ttl_queue(backlog);
    bencher.bench_local(|| {
        divan::black_box(broker.publish_with(chan, "", "q", with_expiration(60_000), b"x", false))
    });
}

/// One publish delayed through the x-delayed-message exchange, behind `backlog` later ones.
#[divan::bench(args = BACKLOGS, sample_count = 20, sample_size = 200)]
fn publish_delayed(bencher: divan::Bencher, backlog: usize) {
    let (mut broker, chan) = delayed_queue(backlog);
    bencher.bench_local(|| {
        divan::black_box(broker.publish_with(chan, "d", "k", with_delay(60_000), b"x", false))
    });
}

/// Expiring 1,000 messages (dropped: no dead-letter exchange) in one clock step, with `backlog`
/// later messages in the index; the time is per sweep of 1,000.
#[divan::bench(args = BACKLOGS, sample_count = 10, sample_size = 1)]
fn expire_a_thousand(bencher: divan::Bencher, backlog: usize) {
    let (broker, chan) = ttl_queue(backlog);
    // Inputs (publishing the thousand) and the measured sweep both need the broker.
    let broker = std::cell::RefCell::new(broker);
    bencher
        .with_inputs(|| {
            for _ in 0..SWEEP {
                broker.borrow_mut().publish_with(chan, "", "q", with_expiration(1), b"x", false);
            }
        })
        .bench_local_values(|()| divan::black_box(broker.borrow_mut().advance(Duration::from_millis(2))));
}
