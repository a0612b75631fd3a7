//! Micro-benchmark of publishing through a topic exchange with many bindings: the message
//! matches one binding (a queue with an auto-ack consumer, so the queue stays empty) and is
//! checked against the others. Measures routing + enqueue + dispatch in the broker core, no I/O.
//! Run with `cargo bench -p hourglass-broker`.

use hourglass_testkit::{short, TestBroker};
use hourglass_wire::{BasicConsume, ExchangeDeclare, FieldTable, QueueBind, QueueDeclare};

/// Bindings on the exchange besides the matching one.
const BINDING_COUNTS: [usize; 3] = [10, 100, 1000];

fn main() {
    divan::main();
}

/// A broker with a topic exchange `t`: `others` bindings of `stock.<i>.*` to queue `sink`,
/// and `stock.#.nyse` to queue `hit`, which has an auto-ack consumer.
fn setup(others: usize) -> (TestBroker, hourglass_testkit::Chan) {
    let mut broker = TestBroker::new();
    let chan = broker.channel();
    let declare = ExchangeDeclare { exchange: short("t"), kind: short("topic"), ..Default::default() };
    broker.call(chan, declare);
    for queue in ["sink", "hit"] {
        broker.call(chan, QueueDeclare { queue: short(queue), ..Default::default() });
    }
    for i in 0..others {
        let bind = QueueBind {
            queue: short("sink"),
            exchange: short("t"),
            routing_key: short(&format!("stock.{i}.*")),
            arguments: FieldTable::new(),
            ..Default::default()
        };
        broker.call(chan, bind);
    }
    let hit = QueueBind {
        queue: short("hit"),
        exchange: short("t"),
        routing_key: short("stock.#.nyse"),
        ..Default::default()
    };
    broker.call(chan, hit);
    broker.call(chan, BasicConsume { queue: short("hit"), no_ack: true, ..Default::default() });
    (broker, chan)
}

/// One 16 B publish routed by a topic exchange with `others` + 1 bindings.
#[divan::bench(args = BINDING_COUNTS)]
fn publish_through_topic_exchange(bencher: divan::Bencher, others: usize) {
    let (mut broker, chan) = setup(others);
    let body = [0u8; 16];
    bencher.bench_local(|| divan::black_box(broker.publish(chan, "t", "stock.usd.nyse", &body)));
}

/// Words in the routing key of the hostile case (at most 128 fit in a 255-octet shortstr).
const HOSTILE_KEY_WORDS: [usize; 3] = [30, 60, 120];

/// Issue #12 finding 2: the binding `#.#.#.#.#.#.#.#.b` and a routing key of `words` words that
/// matches it (`a.a.….b`). Walking every way of splitting the key among the `#`s took seconds to
/// forever; the walk is bounded by (trie nodes) × (words + 1).
#[divan::bench(args = HOSTILE_KEY_WORDS)]
fn publish_through_many_hash_binding(bencher: divan::Bencher, words: usize) {
    let mut broker = TestBroker::new();
    let chan = broker.channel();
    let declare = ExchangeDeclare { exchange: short("t"), kind: short("topic"), ..Default::default() };
    broker.call(chan, declare);
    broker.call(chan, QueueDeclare { queue: short("hit"), ..Default::default() });
    let bind = QueueBind {
        queue: short("hit"),
        exchange: short("t"),
        routing_key: short("#.#.#.#.#.#.#.#.b"),
        ..Default::default()
    };
    broker.call(chan, bind);
    broker.call(chan, BasicConsume { queue: short("hit"), no_ack: true, ..Default::default() });
    let key = format!("{}b", "a.".repeat(words - 1));
    let body = [0u8; 16];
    let delivered = hourglass_testkit::deliveries(&broker.publish(chan, "t", &key, &body));
    assert_eq!(delivered.len(), 1, "the key matches the binding");
    bencher.bench_local(|| divan::black_box(broker.publish(chan, "t", &key, &body)));
}
