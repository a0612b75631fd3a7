//! What one queued message costs in memory (issue #8; issue #3: "index overhead under 100 bytes per
//! queued message beyond the body"): publishes a million 16-byte messages into one queue nobody
//! consumes and reports the heap bytes and allocations each one keeps.
//!
//! The publishes go the way the server's take: encoded frames are "read" into a 64 KiB buffer
//! with the server's refill rule (`crates/server/src/connection.rs`), split into frames and
//! assembled as the session does (exchange, routing key, properties and body stay slices of the
//! read buffer), then handed to the broker as `Command::Publish`. So the numbers include the read
//! buffers the queued messages keep alive, as a real broker's RSS does.
//!
//! Ignored by default (a million messages): run one scenario at a time, so the RSS line is not
//! disturbed by an earlier one, e.g.
//! `cargo test -p hourglass-testkit --release --test queued_memory -- --ignored --exact plain_queue --nocapture`.

use std::alloc::System;

use bytes::{Bytes, BytesMut};
use hourglass_broker::{Command, Publish};
use hourglass_testkit::{short, Chan, TestBroker};
use hourglass_wire::{
    encode_content, BasicProperties, BasicPublish, EncodedProperties, FieldTable, FieldValue, Frame,
    FrameDecoder, Method, QueueDeclare,
};
use stats_alloc::{Region, StatsAlloc, INSTRUMENTED_SYSTEM};

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

const MESSAGES: usize = 1_000_000;
const BODY_BYTES: usize = 16;
/// The server's read buffer: `READ_CHUNK` in `crates/server/src/connection.rs`.
const READ_CHUNK: usize = 64 * 1024;
const FRAME_MAX: u32 = 131_072;

/// A queue with no arguments; messages without properties.
#[test]
#[ignore = "queues a million messages; run by hand (see the file's doc)"]
fn plain_queue() {
    measure("plain queue, no properties", FieldTable::new(), BasicProperties::default());
}

/// A queue with `x-message-ttl`: every message also sits in the TTL deadline index.
#[test]
#[ignore = "queues a million messages; run by hand (see the file's doc)"]
fn ttl_queue() {
    let args = FieldTable::from_entries([("x-message-ttl", FieldValue::I64(3_600_000))]);
    measure("x-message-ttl queue, no properties", args, BasicProperties::default());
}

/// Persistent messages with a content type and a header, as a typical application sends them
/// (the broker has no store here, so this measures the properties, not persistence).
#[test]
#[ignore = "queues a million messages; run by hand (see the file's doc)"]
fn queue_with_properties() {
    let properties = BasicProperties {
        content_type: Some(short("application/json")),
        delivery_mode: Some(2),
        headers: Some(FieldTable::from_entries([("tenant", FieldValue::I32(7))])),
        ..Default::default()
    };
    measure("plain queue, content-type + delivery-mode 2 + one header", FieldTable::new(), properties);
}

fn measure(scenario: &str, queue_args: FieldTable, properties: BasicProperties) {
    let mut tb = TestBroker::new();
    let chan = tb.channel();
    tb.call(chan, QueueDeclare { queue: short("q"), arguments: queue_args, ..Default::default() });
    let stream = publish_stream(&properties);
    let rss_before = rss_bytes();
    let region = Region::new(GLOBAL);
    feed(&mut tb, chan, &stream);
    let stats = region.change();
    let rss_after = rss_bytes();
    let live_bytes = stats.bytes_allocated as i64 - stats.bytes_deallocated as i64;
    let live_allocs = stats.allocations as i64 - stats.deallocations as i64;
    let per = |n: i64| n as f64 / MESSAGES as f64;
    println!(
        "{scenario}: {MESSAGES} messages of {BODY_BYTES} B, {} B of frames each",
        stream.len() / MESSAGES
    );
    println!("  heap bytes kept per message:  {:.1}", per(live_bytes));
    println!("  allocations kept per message: {:.2}", per(live_allocs));
    println!("  RSS growth per message:       {:.1}", per(rss_after as i64 - rss_before as i64));
    let queued = tb.broker.queue_stats("/", "q").map(|s| s.messages_ready);
    assert_eq!(queued, Some(MESSAGES), "every message is queued");
}

/// The frames of `MESSAGES` publishes to the default exchange with routing key `q`.
fn publish_stream(properties: &BasicProperties) -> Vec<u8> {
    let method = Method::BasicPublish(BasicPublish {
        exchange: short(""),
        routing_key: short("q"),
        ..Default::default()
    });
    let body = [b'x'; BODY_BYTES];
    let mut one = BytesMut::new();
    encode_content(1, &method, &properties.into(), &body, FRAME_MAX, &mut one);
    one.repeat(MESSAGES)
}

/// Reads `stream` as the server does and hands each assembled publish to the broker.
fn feed(tb: &mut TestBroker, chan: Chan, stream: &[u8]) {
    let mut decoder = FrameDecoder::new(FRAME_MAX);
    let mut input = BytesMut::with_capacity(READ_CHUNK);
    let mut at = 0;
    let mut assembling: Option<(BasicPublish, EncodedProperties)> = None;
    while at < stream.len() {
        if input.capacity() - input.len() < READ_CHUNK / 4 {
            input.reserve(READ_CHUNK);
        }
        let read = (input.capacity() - input.len()).min(stream.len() - at);
        input.extend_from_slice(&stream[at..at + read]);
        at += read;
        while let Some(frame) = decoder.decode(&mut input).expect("valid frames") {
            match frame {
                Frame::Method { method: Method::BasicPublish(publish), .. } => {
                    assembling = Some((publish, EncodedProperties::default()))
                }
                Frame::Header { header, .. } => {
                    if let Some((_, properties)) = &mut assembling {
                        *properties = header.properties;
                    }
                }
                Frame::Body { payload, .. } => {
                    let (publish, properties) = assembling.take().expect("publish before body");
                    publish_one(tb, chan, publish, properties, payload);
                }
                other => panic!("unexpected frame {other:?}"),
            }
        }
    }
}

fn publish_one(tb: &mut TestBroker, chan: Chan, m: BasicPublish, properties: EncodedProperties, body: Bytes) {
    let publish =
        Publish { exchange: m.exchange, routing_key: m.routing_key, mandatory: false, properties, body };
    let effects =
        tb.command(Command::Publish { conn: chan.conn, channel: chan.channel, publish: Box::new(publish) });
    debug_assert!(effects.is_empty());
}

/// Resident set size from `/proc/self/statm` (pages of 4 KiB).
fn rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm.split_whitespace().nth(1).and_then(|p| p.parse().ok()).unwrap_or(0);
    pages * 4096
}
