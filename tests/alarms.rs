//! Memory alarm against hostile and blocked publishers, over the real binary (issue #12
//! findings 5 and 6; docs/security.md "Memory and disk alarms against unfinished and blocked
//! publishers"). A raw AMQP client on blocking sockets sends exactly the frames each case needs.

mod common;

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use common::RunningBroker;
use hourglass_wire::*;

const MIB: u64 = 1024 * 1024;
/// The frame_max every raw client tunes to (the broker's default).
const FRAME_MAX: u32 = 131_072;
/// Every wait in these tests ends by this.
const WAIT: Duration = Duration::from_secs(15);

/// Content headers announcing 128 MiB bodies that never finish must not take the broker past its
/// memory watermark: six connections try to push 64 MiB of partial bodies each (384 MiB) at a
/// 96 MiB watermark. The broker's resident memory stays near the watermark, the memory alarm
/// fires, a normal client still connects and declares a queue, and when the attackers hang up
/// their memory is freed and the alarm clears.
#[test]
fn unfinished_bodies_cannot_take_memory_past_the_watermark() {
    let watermark = 96 * MIB;
    let broker = broker_with_watermark(watermark);
    let hogs: Vec<_> = (0..6)
        .map(|_| {
            let addr = broker.amqp;
            std::thread::spawn(move || {
                let mut hog = RawClient::open(addr, 1);
                hog.open_channel(1);
                hog.push_partial_body(1, DEFAULT_BODY_SIZE, 64 * MIB);
                hog
            })
        })
        .collect();
    let mut max_rss = 0;
    let started = Instant::now();
    while !hogs.iter().all(|h| h.is_finished()) {
        assert!(started.elapsed() < WAIT * 2, "the attackers neither finished nor were stopped");
        max_rss = max_rss.max(broker.rss_bytes());
        std::thread::sleep(Duration::from_millis(10));
    }
    max_rss = max_rss.max(broker.rss_bytes());
    let hogs: Vec<RawClient> = hogs.into_iter().map(|h| h.join().expect("attacker thread")).collect();
    let pushed: u64 = hogs.iter().map(|h| h.body_bytes_sent).sum();
    eprintln!("attackers pushed {} MiB; broker peaked at {} MiB", pushed / MIB, max_rss / MIB);
    assert!(max_rss < watermark + 32 * MIB, "resident {} MiB at a 96 MiB watermark", max_rss / MIB);
    assert!(node_status(&broker).contains(r#""mem_alarm":true"#));
    let mut normal = RawClient::open(broker.amqp, 0);
    normal.open_channel(1);
    normal.declare_queue(1, "still-works");
    drop(hogs);
    wait_until("the alarm clears once the attackers hang up", || {
        node_status(&broker).contains(r#""mem_alarm":false"#)
    });
}

/// A publisher blocked by the memory alarm is told so when it publishes under the alarm, and is
/// not read, so its heartbeats cannot arrive; it must not be dropped as dead (RabbitMQ keeps it
/// open). With heartbeat 1 s it stays connected for 5 s
/// of silence, still receiving our heartbeats, then is unblocked when the alarm clears and its
/// held-back publish goes through.
#[test]
fn a_blocked_publisher_is_not_dropped_for_missed_heartbeats() {
    let broker = RunningBroker::start();
    let mut publisher = RawClient::open_told_of_blocks(broker.amqp, 1);
    publisher.open_channel(1);
    publisher.declare_queue(1, "held");
    // An unfinished 128 MiB message holds 100 MiB, then the watermark drops to 64 MiB under it:
    // memory stays well over it until the message goes. (Raised while the body was still read,
    // the alarm stopped reading just over the watermark, and the allocator giving back a few
    // pages cleared it again within seconds.)
    let mut hog = RawClient::open(broker.amqp, 1);
    hog.open_channel(1);
    hog.push_partial_body(1, DEFAULT_BODY_SIZE, 100 * MIB);
    set_watermark(&broker, &format!(r#"{{"absolute": {}}}"#, 64 * MIB));
    wait_until("the memory alarm", || node_status(&broker).contains(r#""mem_alarm":true"#));
    // Told nothing yet: it has not published (RabbitMQ tells a connection when it blocks it). The
    // first publish under the alarm is held; the connection is blocked, and told, at it.
    publisher.publish(1, "held", b"first");
    let blocked = publisher.expect_method_keeping_alive(WAIT);
    assert!(matches!(blocked, Method::ConnectionBlocked(_)), "{blocked:?}");
    publisher.publish(1, "held", b"second");
    let silent_from = Instant::now();
    let mut heartbeats = 0;
    while silent_from.elapsed() < Duration::from_secs(5) {
        match publisher.next_frame(Duration::from_millis(500)) {
            Ok(Frame::Heartbeat { .. }) => heartbeats += 1,
            Ok(other) => panic!("blocked publisher got {other:?} after {:?}", silent_from.elapsed()),
            Err(Ended::TimedOut) => {}
            Err(Ended::Closed) => panic!("blocked publisher dropped after {:?}", silent_from.elapsed()),
        }
    }
    assert!(heartbeats >= 4, "the broker kept sending heartbeats: {heartbeats}");
    drop(hog);
    let unblocked = publisher.expect_method(WAIT);
    assert!(matches!(unblocked, Method::ConnectionUnblocked(_)), "{unblocked:?}");
    publisher.send_frame(encode_heartbeat_frame);
    let count = publisher.declare_queue(1, "held");
    assert_eq!(count, 2, "both publishes went through once unblocked");
    publisher.publish(1, "held", b"third");
    assert_eq!(publisher.declare_queue(1, "held"), 3, "and it publishes on as before");
}

/// A publisher filling a queue as fast as loopback allows is stopped close to the watermark, not
/// a second's worth of publishing later (the alarm used to be sampled once a second and overshot
/// twice over): 1 MiB messages at a 96 MiB watermark, resident memory peaks under 128 MiB.
#[test]
fn a_fast_publisher_is_stopped_close_to_the_watermark() {
    let watermark = 96 * MIB;
    let broker = broker_with_watermark(watermark);
    let addr = broker.amqp;
    let publisher = std::thread::spawn(move || {
        let mut publisher = RawClient::open(addr, 0);
        publisher.open_channel(1);
        publisher.declare_queue(1, "filling");
        publisher.publish_until_blocked(1, "filling", MIB as usize, 512 * MIB)
    });
    let mut max_rss = 0;
    let started = Instant::now();
    while !publisher.is_finished() {
        assert!(started.elapsed() < WAIT * 2, "the publisher was neither done nor stopped");
        max_rss = max_rss.max(broker.rss_bytes());
        std::thread::sleep(Duration::from_millis(5));
    }
    max_rss = max_rss.max(broker.rss_bytes());
    let sent = publisher.join().expect("publisher thread");
    eprintln!("published {} MiB; broker peaked at {} MiB", sent / MIB, max_rss / MIB);
    assert!(node_status(&broker).contains(r#""mem_alarm":true"#));
    assert!(max_rss < watermark + 32 * MIB, "resident {} MiB at a 96 MiB watermark", max_rss / MIB);
}

/// Issue 27, case 1: a connection that published before a memory alarm is still served: its
/// basic.get is answered at once (it waited for the alarm to clear), and it is told nothing,
/// as RabbitMQ blocks a connection only when it publishes under the alarm.
#[test]
fn a_connection_that_published_before_an_alarm_is_still_served() {
    let broker = RunningBroker::start();
    let mut client = RawClient::open_told_of_blocks(broker.amqp, 0);
    client.open_channel(1);
    client.declare_queue(1, "q");
    client.publish(1, "q", b"before");
    assert_eq!(client.declare_queue(1, "q"), 1);
    raise_memory_alarm(&broker);
    client.send_method(1, BasicGet { queue: short("q"), no_ack: true });
    let answer = client.expect_method(Duration::from_secs(5));
    assert!(matches!(answer, Method::BasicGetOk(_)), "get answered during the alarm: {answer:?}");
    clear_memory_alarm(&broker);
}

/// Issue 27, case 2: a publish arriving during an alarm is neither routed nor confirmed until
/// the alarm clears (RabbitMQ's reader stops at it): another connection sees the queue empty
/// while the publisher is blocked, and the message once it is unblocked.
#[test]
fn a_publish_during_an_alarm_is_routed_only_when_it_clears() {
    let broker = RunningBroker::start();
    let mut observer = RawClient::open(broker.amqp, 0);
    observer.open_channel(1);
    observer.declare_queue(1, "q");
    let mut publisher = RawClient::open_told_of_blocks(broker.amqp, 0);
    publisher.open_channel(1);
    publisher.send_method(1, ConfirmSelect { nowait: false });
    assert!(matches!(publisher.expect_method(WAIT), Method::ConfirmSelectOk(_)));
    raise_memory_alarm(&broker);
    publisher.publish(1, "q", b"during");
    let blocked = publisher.expect_method(WAIT);
    assert!(matches!(blocked, Method::ConnectionBlocked(_)), "{blocked:?}");
    assert_eq!(observer.declare_queue(1, "q"), 0, "not routed while the alarm is up");
    assert!(
        matches!(publisher.next_frame(Duration::from_millis(300)), Err(Ended::TimedOut)),
        "nor confirmed"
    );
    clear_memory_alarm(&broker);
    let unblocked = publisher.expect_method(WAIT);
    assert!(matches!(unblocked, Method::ConnectionUnblocked(_)), "{unblocked:?}");
    assert!(matches!(publisher.expect_method(WAIT), Method::BasicAck(_)), "confirmed once routed");
    assert_eq!(observer.declare_queue(1, "q"), 1);
}

/// Issue 27: a consumer on a connection that also publishes keeps receiving during an alarm,
/// after its publish blocked it: consumers are what drain the memory.
#[test]
fn a_consumer_that_also_publishes_keeps_receiving_during_an_alarm() {
    let broker = RunningBroker::start();
    let mut other = RawClient::open(broker.amqp, 0);
    other.open_channel(1);
    other.declare_queue(1, "work");
    other.publish(1, "work", b"job");
    other.send_method(1, BasicConsume { queue: short("work"), ..BasicConsume::default() });
    assert!(matches!(other.expect_method(WAIT), Method::BasicConsumeOk(_)));
    assert!(matches!(other.expect_method(WAIT), Method::BasicDeliver(_)), "other holds the job, unacked");
    let mut both = RawClient::open_told_of_blocks(broker.amqp, 0);
    both.open_channel(1);
    let consume = BasicConsume { queue: short("work"), no_ack: true, ..BasicConsume::default() };
    both.send_method(1, consume);
    assert!(matches!(both.expect_method(WAIT), Method::BasicConsumeOk(_)));
    raise_memory_alarm(&broker);
    both.publish(1, "work", b"more");
    assert!(matches!(both.expect_method(WAIT), Method::ConnectionBlocked(_)));
    // The other consumer lets go of the job (its channel closes): it goes to the blocked one.
    other.send_method(1, ChannelClose::default());
    let delivered = both.expect_method(WAIT);
    assert!(matches!(delivered, Method::BasicDeliver(_)), "delivered while blocked: {delivered:?}");
    clear_memory_alarm(&broker);
}

/// A memory watermark of one byte: the alarm is up at once (`PUT /api/node/memory-high-watermark`,
/// what `hourglass-ctl set_vm_memory_high_watermark` calls).
fn raise_memory_alarm(broker: &RunningBroker) {
    set_watermark(broker, r#"{"absolute": 1}"#);
    wait_until("the memory alarm", || node_status(broker).contains(r#""mem_alarm":true"#));
}

fn clear_memory_alarm(broker: &RunningBroker) {
    set_watermark(broker, r#"{"fraction": 0.4}"#);
    wait_until("the alarm to clear", || node_status(broker).contains(r#""mem_alarm":false"#));
}

fn set_watermark(broker: &RunningBroker, body: &str) {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    let (status, answer) =
        runtime.block_on(common::http(broker, "PUT", "/api/node/memory-high-watermark", body));
    assert_eq!(status, 204, "{answer}");
}

/// `--vm-memory-high-watermark` as the fraction of this machine's memory that is `bytes`.
fn broker_with_watermark(bytes: u64) -> RunningBroker {
    let meminfo = std::fs::read_to_string("/proc/meminfo").expect("meminfo");
    let total_kib: u64 = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
        .expect("MemTotal");
    let fraction = format!("{:.12}", bytes as f64 / (total_kib * 1024) as f64);
    RunningBroker::start_with(&["--vm-memory-high-watermark", &fraction])
}

fn node_status(broker: &RunningBroker) -> String {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    let (status, body) = runtime.block_on(common::http(broker, "GET", "/api/nodes", ""));
    assert_eq!(status, 200, "{body}");
    body
}

fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let started = Instant::now();
    while !done() {
        assert!(started.elapsed() < WAIT, "{what}: not within {WAIT:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The body size the attackers announce: the default max_message_size (128 MiB).
const DEFAULT_BODY_SIZE: u64 = 128 * MIB;

/// Why no frame came.
#[derive(Debug)]
enum Ended {
    TimedOut,
    Closed,
}

/// A minimal AMQP client: guest/guest on "/", blocking socket.
struct RawClient {
    stream: TcpStream,
    decoder: FrameDecoder,
    inbox: BytesMut,
    body_bytes_sent: u64,
}

impl RawClient {
    /// Connects and completes the handshake with heartbeat `heartbeat_s`, announcing the
    /// connection.blocked capability (so it is told connection.blocked and unblocked).
    fn open_told_of_blocks(addr: SocketAddr, heartbeat_s: u16) -> RawClient {
        RawClient::connect(addr, heartbeat_s, true)
    }

    /// Connects and completes the handshake with heartbeat `heartbeat_s`, as a client that does
    /// not want connection.blocked.
    fn open(addr: SocketAddr, heartbeat_s: u16) -> RawClient {
        RawClient::connect(addr, heartbeat_s, false)
    }

    fn connect(addr: SocketAddr, heartbeat_s: u16, told_of_blocks: bool) -> RawClient {
        let stream = TcpStream::connect(addr).expect("connect");
        stream.set_nodelay(true).expect("nodelay");
        let mut client =
            RawClient { stream, decoder: FrameDecoder::new(0), inbox: BytesMut::new(), body_bytes_sent: 0 };
        client.stream.write_all(PROTOCOL_HEADER).expect("protocol header");
        assert!(matches!(client.expect_method(WAIT), Method::ConnectionStart(_)));
        let capabilities =
            FieldTable::from_entries([("connection.blocked", FieldValue::Bool(told_of_blocks))]);
        let start_ok = ConnectionStartOk {
            client_properties: FieldTable::from_entries([("capabilities", FieldValue::Table(capabilities))]),
            mechanism: short("PLAIN"),
            response: LongStr::new(Bytes::from_static(b"\0guest\0guest")),
            locale: short("en_US"),
        };
        client.send_method(0, start_ok);
        assert!(matches!(client.expect_method(WAIT), Method::ConnectionTune(_)));
        client.send_method(
            0,
            ConnectionTuneOk { channel_max: 2047, frame_max: FRAME_MAX, heartbeat: heartbeat_s },
        );
        client.send_method(0, ConnectionOpen { virtual_host: short("/") });
        assert!(matches!(client.expect_method(WAIT), Method::ConnectionOpenOk(_)));
        client
    }

    fn open_channel(&mut self, channel: u16) {
        self.send_method(channel, ChannelOpen {});
        assert!(matches!(self.expect_method(WAIT), Method::ChannelOpenOk(_)));
    }

    /// Declares (or finds) a transient queue; returns its message count.
    fn declare_queue(&mut self, channel: u16, name: &str) -> u32 {
        self.send_method(channel, QueueDeclare { queue: short(name), ..QueueDeclare::default() });
        match self.expect_method(WAIT) {
            Method::QueueDeclareOk(ok) => ok.message_count,
            other => panic!("expected queue.declare-ok, got {other:?}"),
        }
    }

    fn publish(&mut self, channel: u16, queue: &str, body: &[u8]) {
        let publish = BasicPublish {
            exchange: short(""),
            routing_key: short(queue),
            mandatory: false,
            immediate: false,
        };
        self.send_method(channel, publish);
        let header = ContentHeader {
            class_id: 60,
            body_size: body.len() as u64,
            properties: EncodedProperties::default(),
        };
        self.send_frame(|buf| encode_header_frame(channel, &header, buf));
        self.send_frame(|buf| encode_body_frame(channel, body, buf));
    }

    /// Publishes `body_bytes` messages until `limit` bytes are sent or the broker stops reading
    /// (a write blocks for a second); returns the body bytes sent.
    fn publish_until_blocked(&mut self, channel: u16, queue: &str, body_bytes: usize, limit: u64) -> u64 {
        let body = vec![0x33; body_bytes];
        let publish = BasicPublish {
            exchange: short(""),
            routing_key: short(queue),
            mandatory: false,
            immediate: false,
        };
        let header = ContentHeader {
            class_id: 60,
            body_size: body_bytes as u64,
            properties: EncodedProperties::default(),
        };
        let mut message = BytesMut::new();
        encode_method_frame(channel, &publish.into(), &mut message);
        encode_header_frame(channel, &header, &mut message);
        for part in body.chunks((FRAME_MAX - 8) as usize) {
            encode_body_frame(channel, part, &mut message);
        }
        self.stream.set_write_timeout(Some(Duration::from_secs(1))).expect("write timeout");
        let mut sent = 0;
        while sent < limit {
            match self.stream.write_all(&message) {
                Ok(()) => sent += body_bytes as u64,
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => break,
                Err(e) => panic!("publisher write failed: {e}"),
            }
        }
        sent
    }

    /// basic.publish and a header announcing `body_size`, then body frames until `limit` bytes
    /// are sent or the broker stops reading (a write blocks for a second).
    fn push_partial_body(&mut self, channel: u16, body_size: u64, limit: u64) {
        let publish = BasicPublish {
            exchange: short(""),
            routing_key: short("void"),
            mandatory: false,
            immediate: false,
        };
        self.send_method(channel, publish);
        let header = ContentHeader { class_id: 60, body_size, properties: EncodedProperties::default() };
        self.send_frame(|buf| encode_header_frame(channel, &header, buf));
        let chunk = vec![0x5A; (FRAME_MAX - 8) as usize];
        let mut frame = BytesMut::new();
        encode_body_frame(channel, &chunk, &mut frame);
        self.stream.set_write_timeout(Some(Duration::from_secs(1))).expect("write timeout");
        while self.body_bytes_sent + chunk.len() as u64 <= limit.min(body_size - 1) {
            match self.stream.write_all(&frame) {
                Ok(()) => self.body_bytes_sent += chunk.len() as u64,
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => return,
                Err(e) => panic!("attacker write failed: {e}"),
            }
        }
    }

    fn send_method(&mut self, channel: u16, method: impl Into<Method>) {
        let method = method.into();
        self.send_frame(|buf| encode_method_frame(channel, &method, buf));
    }

    fn send_frame(&mut self, encode: impl FnOnce(&mut BytesMut)) {
        let mut buf = BytesMut::new();
        encode(&mut buf);
        self.stream.write_all(&buf).expect("send frame");
    }

    /// The next method, sending a heartbeat every 300 ms meanwhile (for a heartbeat of 1 s).
    fn expect_method_keeping_alive(&mut self, timeout: Duration) -> Method {
        let started = Instant::now();
        loop {
            assert!(started.elapsed() < timeout, "no method within {timeout:?}");
            match self.next_frame(Duration::from_millis(300)) {
                Ok(Frame::Method { method, .. }) => return method,
                Ok(_) | Err(Ended::TimedOut) => self.send_frame(encode_heartbeat_frame),
                Err(Ended::Closed) => panic!("connection closed while waiting"),
            }
        }
    }

    /// The next method, skipping heartbeats; panics on a close or after `timeout`.
    fn expect_method(&mut self, timeout: Duration) -> Method {
        let started = Instant::now();
        loop {
            let left = timeout.saturating_sub(started.elapsed()).max(Duration::from_millis(1));
            match self.next_frame(left) {
                Ok(Frame::Method { method, .. }) => return method,
                Ok(_) => {}
                Err(ended) => panic!("no method: {ended:?}"),
            }
        }
    }

    /// The next frame within `timeout`.
    fn next_frame(&mut self, timeout: Duration) -> Result<Frame, Ended> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(frame) = self.decoder.decode(&mut self.inbox).expect("broker output decodes") {
                return Ok(frame);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(Ended::TimedOut);
            }
            self.stream.set_read_timeout(Some(left)).expect("read timeout");
            let mut buf = [0u8; 4096];
            match self.stream.read(&mut buf) {
                Ok(0) => return Err(Ended::Closed),
                Ok(n) => self.inbox.extend_from_slice(&buf[..n]),
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                    return Err(Ended::TimedOut)
                }
                Err(_) => return Err(Ended::Closed),
            }
        }
    }
}

fn short(s: &str) -> ShortStr {
    ShortStr::try_from(s).expect("short string")
}
