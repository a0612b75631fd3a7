//! Fuzzes a whole server: two sessions (`session::Connection`) wired to one broker core
//! (`broker::Broker`, with persistence on or off) exactly as the server wires them — every
//! command a session emits goes into the broker, every effect the broker emits goes back to its
//! session, store ops are acknowledged as fsynced when the input says so — under a manual clock
//! the input advances by chosen amounts (heartbeats, TTLs, delays, handshake and close timeouts).
//!
//! The input is a list of steps: raw bytes for one connection (the handshake too, or after a
//! canned valid handshake), canned well-formed frames with input-chosen fields (channel.open,
//! queue/exchange declare and bind, publish with header and body frames, consume, get, ack, nack,
//! reject, qos, confirm and tx modes, purge, delete, cancel, recover, channel.close), a clock
//! advance, an fsync of everything the broker asked to store, or a socket closing. Checked: nothing
//! panics, and everything each session writes is a sequence of well-formed frames.
//!
//! The `session` target fuzzes one session with its commands dropped; this one makes the methods
//! really execute, so the broker's answers (deliveries, returns, errors, closes) flow back through
//! the session's encoder.
#![no_main]

use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use hourglass_broker::{Broker, BrokerConfig, Command, ConnectionId, Timestamp};
use hourglass_session::{Connection, PeerInfo, SessionConfig, StaticUsers};
use hourglass_wire::{
    encode_body_frame, encode_header_frame, encode_method_frame, BasicAck, BasicCancel, BasicConsume,
    BasicGet, BasicNack, BasicProperties, BasicPublish, BasicQos, BasicRecover, BasicReject, ChannelClose,
    ChannelOpen, ConfirmSelect, ConnectionOpen, ConnectionStartOk, ConnectionTuneOk, ContentHeader,
    EncodedProperties, ExchangeDeclare, FieldTable, FieldValue, FrameDecoder, LongStr, Method, QueueBind,
    QueueDeclare, QueueDelete, QueuePurge, ShortStr, TxCommit, TxRollback, TxSelect, PROTOCOL_HEADER,
};
use libfuzzer_sys::arbitrary::{Result as ArbResult, Unstructured};
use libfuzzer_sys::fuzz_target;

const CONNECTIONS: usize = 2;
const STEPS_MAX: usize = 256;
/// The frame_max the canned handshake negotiates (body frames are split to fit it).
const FRAME_MAX: u32 = 4096;
const QUEUES: [&str; 3] = ["q0", "q1", "q2"];

struct Peer {
    session: Connection,
    /// Bytes the client sent that the session has not consumed yet.
    input: BytesMut,
    /// Everything the session wrote, checked frame by frame at the end.
    output: BytesMut,
    closed_reported: bool,
}

fn short(s: &str) -> ShortStr {
    ShortStr::try_from(s.to_owned()).unwrap_or_default()
}

fn handshake(heartbeat: u16) -> BytesMut {
    let mut out = BytesMut::new();
    out.extend_from_slice(PROTOCOL_HEADER);
    let start_ok = ConnectionStartOk {
        client_properties: FieldTable::new(),
        mechanism: ShortStr::from_static("PLAIN"),
        response: LongStr::from("\0guest\0guest"),
        locale: ShortStr::from_static("en_US"),
    };
    encode_method_frame(0, &start_ok.into(), &mut out);
    let tune_ok = ConnectionTuneOk { channel_max: 8, frame_max: FRAME_MAX, heartbeat };
    encode_method_frame(0, &tune_ok.into(), &mut out);
    encode_method_frame(0, &ConnectionOpen { virtual_host: ShortStr::from_static("/") }.into(), &mut out);
    out
}

/// Queue arguments chosen by one byte: none, a TTL, a dead-letter exchange, a length limit, a delay.
fn queue_arguments(pick: u8) -> FieldTable {
    match pick % 6 {
        0 | 1 => FieldTable::new(),
        2 => FieldTable::from_entries([("x-message-ttl", FieldValue::I32(i32::from(pick)))]),
        3 => FieldTable::from_entries([
            ("x-dead-letter-exchange", FieldValue::LongStr("".into())),
            ("x-dead-letter-routing-key", FieldValue::LongStr("q2".into())),
        ]),
        4 => FieldTable::from_entries([("x-max-length", FieldValue::I32(i32::from(pick % 4)))]),
        _ => FieldTable::from_entries([("x-delivery-delay", FieldValue::I64(i64::from(pick) * 10))]),
    }
}

/// A publish: method, content header and body frames split at the negotiated frame size.
fn publish(u: &mut Unstructured<'_>, channel: u16, queue: &str, out: &mut BytesMut) -> ArbResult<()> {
    let flags: u8 = u.arbitrary()?;
    let exchange = if flags & 0x10 != 0 { "x" } else { "" };
    let method = BasicPublish {
        exchange: short(exchange),
        routing_key: short(queue),
        mandatory: flags & 1 != 0,
        ..Default::default()
    };
    encode_method_frame(channel, &method.into(), out);
    let properties = BasicProperties {
        delivery_mode: Some(if flags & 2 != 0 { 2 } else { 1 }),
        expiration: (flags & 4 != 0).then(|| short(&u32::from(flags).to_string())),
        priority: (flags & 8 != 0).then_some(flags % 10),
        ..Default::default()
    };
    let body_bytes = usize::from(u.arbitrary::<u16>()? % 9001);
    let header = ContentHeader {
        class_id: 60,
        body_size: body_bytes as u64,
        properties: EncodedProperties::from(&properties),
    };
    encode_header_frame(channel, &header, out);
    let body = Bytes::from(vec![flags; body_bytes]);
    for chunk in body.chunks(FRAME_MAX as usize - 8) {
        encode_body_frame(channel, chunk, out);
    }
    Ok(())
}

/// One canned, well-formed client frame sequence with input-chosen fields.
fn canned(u: &mut Unstructured<'_>, out: &mut BytesMut) -> ArbResult<()> {
    let pick: u8 = u.arbitrary()?;
    let param: u8 = u.arbitrary()?;
    let channel = 1 + u16::from(param % 3);
    let queue = QUEUES[usize::from(param / 3) % QUEUES.len()];
    let flag = param & 0x80 != 0;
    let tag = u64::from(param % 8);
    let method: Method = match pick % 21 {
        0 => ChannelOpen {}.into(),
        1 => QueueDeclare {
            queue: short(queue),
            durable: flag,
            arguments: queue_arguments(param),
            ..Default::default()
        }
        .into(),
        2 => return publish(u, channel, queue, out),
        3 => BasicConsume {
            queue: short(queue),
            consumer_tag: short(&format!("c{}", param % 4)),
            no_ack: flag,
            ..Default::default()
        }
        .into(),
        4 => BasicGet { queue: short(queue), no_ack: flag }.into(),
        5 => BasicAck { delivery_tag: tag, multiple: flag }.into(),
        6 => BasicNack { delivery_tag: tag, multiple: flag, requeue: param & 0x40 != 0 }.into(),
        7 => BasicReject { delivery_tag: tag, requeue: flag }.into(),
        8 => ConfirmSelect { nowait: false }.into(),
        9 => TxSelect {}.into(),
        10 => TxCommit {}.into(),
        11 => TxRollback {}.into(),
        12 => BasicQos { prefetch_size: 0, prefetch_count: u16::from(param % 4), global: flag }.into(),
        13 => ChannelClose { reply_code: 200, reply_text: short("bye"), class_id: 0, method_id: 0 }.into(),
        14 => QueuePurge { queue: short(queue), ..Default::default() }.into(),
        15 => QueueDelete { queue: short(queue), if_unused: flag, ..Default::default() }.into(),
        16 => {
            let kinds = ["direct", "fanout", "topic", "headers", "x-delayed-message"];
            let kind = kinds[usize::from(param) % kinds.len()];
            let arguments = if kind == "x-delayed-message" {
                FieldTable::from_entries([("x-delayed-type", FieldValue::LongStr("direct".into()))])
            } else {
                FieldTable::new()
            };
            ExchangeDeclare { exchange: short("x"), kind: short(kind), arguments, ..Default::default() }
                .into()
        }
        17 => QueueBind {
            queue: short(queue),
            exchange: short("x"),
            routing_key: short(if flag { "#" } else { queue }),
            ..Default::default()
        }
        .into(),
        18 => BasicCancel { consumer_tag: short(&format!("c{}", param % 4)), nowait: flag }.into(),
        19 => BasicRecover { requeue: flag }.into(),
        _ => {
            QueueDeclare { queue: short(""), exclusive: true, auto_delete: flag, ..Default::default() }.into()
        }
    };
    encode_method_frame(channel, &method, out);
    Ok(())
}

struct Server {
    broker: Broker,
    peers: Vec<Peer>,
    now: Timestamp,
}

impl Server {
    /// Moves commands into the broker and effects back until nothing moves.
    fn route(&mut self) {
        for _ in 0..64 {
            let mut moved = false;
            for peer in &mut self.peers {
                while let Some(command) = peer.session.poll_command() {
                    self.broker.handle_command(command, self.now);
                    moved = true;
                }
                if peer.session.is_closed() && peer.session.opened() && !peer.closed_reported {
                    peer.closed_reported = true;
                    let conn = peer.session.id();
                    self.broker.handle_command(Command::ConnectionClosed { conn }, self.now);
                    moved = true;
                }
            }
            while let Some(effect) = self.broker.poll_effect() {
                let to = effect.conn().0 as usize;
                if let Some(peer) = to.checked_sub(1).and_then(|i| self.peers.get_mut(i)) {
                    peer.session.handle_effect(effect, self.now);
                }
                moved = true;
            }
            for peer in &mut self.peers {
                let written = peer.session.take_output();
                peer.output.extend_from_slice(&written);
            }
            if !moved {
                return;
            }
        }
    }

    fn feed(&mut self, i: usize) {
        let now = self.now;
        let peer = &mut self.peers[i];
        let mut input = std::mem::take(&mut peer.input);
        peer.session.handle_input(&mut input, now);
        peer.input = input;
    }

    fn advance(&mut self, ms: u64) {
        self.now = self.now.saturating_add_millis(ms);
        for peer in &mut self.peers {
            if peer.session.next_deadline().is_some_and(|d| d <= self.now) {
                peer.session.handle_timeout(self.now);
            }
        }
        if self.broker.next_deadline().is_some_and(|d| d <= self.now) {
            self.broker.handle_timeout(self.now);
        }
    }

    /// The store thread's answer: everything asked for is durable.
    fn fsync(&mut self) {
        let mut last = None;
        while let Some(op) = self.broker.poll_store_op() {
            last = Some(op.op_seq);
        }
        if let Some(op_seq) = last {
            self.broker.handle_persisted(op_seq, self.now);
        }
    }
}

/// Everything a session wrote must split into well-formed frames.
fn check_output(output: &mut BytesMut) {
    if output.starts_with(b"AMQP") {
        let _ = output.split_to(PROTOCOL_HEADER.len().min(output.len()));
    }
    let mut decoder = FrameDecoder::new(0);
    loop {
        match decoder.decode(output) {
            Ok(Some(_)) => {}
            Ok(None) => break,
            Err(e) => panic!("the session wrote a malformed frame: {e:?}"),
        }
    }
    assert!(output.is_empty(), "the session wrote a partial frame ({} bytes left)", output.len());
}

fn run(u: &mut Unstructured<'_>) -> ArbResult<()> {
    let setup: u8 = u.arbitrary()?;
    let config = Arc::new(SessionConfig::new(Arc::new(StaticUsers::default())));
    let now = Timestamp::from_millis(1_700_000_000_000);
    let broker = Broker::new(BrokerConfig { persistence: setup & 4 != 0, ..BrokerConfig::default() });
    let peers = (0..CONNECTIONS)
        .map(|i| {
            let peer = PeerInfo {
                addr: format!("127.0.0.1:{}", 40000 + i),
                local: "127.0.0.1:5672".to_owned(),
                is_loopback: true,
            };
            let session = Connection::new(ConnectionId(i as u64 + 1), peer, config.clone(), now);
            let heartbeat = if setup & 8 != 0 { 2 } else { 0 };
            let input = if setup & (1 << i) != 0 { handshake(heartbeat) } else { BytesMut::new() };
            Peer { session, input, output: BytesMut::new(), closed_reported: false }
        })
        .collect();
    let mut server = Server { broker, peers, now };
    for i in 0..CONNECTIONS {
        server.feed(i);
    }
    server.route();
    // Input running out ends the steps early; the output is checked all the same.
    let _ = steps(u, &mut server);
    for peer in &mut server.peers {
        check_output(&mut peer.output);
    }
    Ok(())
}

fn steps(u: &mut Unstructured<'_>, server: &mut Server) -> ArbResult<()> {
    for _ in 0..STEPS_MAX {
        if u.is_empty() {
            return Ok(());
        }
        let step: u8 = u.arbitrary()?;
        let i = usize::from(step >> 7);
        match step % 8 {
            0..=2 => {
                let n = usize::from(u.arbitrary::<u8>()?) + 1;
                let bytes = u.bytes(n.min(u.len()))?;
                server.peers[i].input.extend_from_slice(bytes);
                server.feed(i);
            }
            3 | 4 => {
                canned(u, &mut server.peers[i].input)?;
                server.feed(i);
            }
            5 => {
                let ms = match u.arbitrary::<u8>()? % 4 {
                    0 => u64::from(u.arbitrary::<u8>()?),
                    1 => u64::from(u.arbitrary::<u16>()?),
                    2 => u64::from(u.arbitrary::<u16>()?) * 1000,
                    _ => u64::from(u.arbitrary::<u32>()?) * 1000,
                };
                server.advance(ms);
            }
            6 => server.fsync(),
            _ => {
                let now = server.now;
                server.peers[i].session.handle_eof(now);
            }
        }
        server.route();
    }
    Ok(())
}

fuzz_target!(|data: &[u8]| {
    let mut u = Unstructured::new(data);
    let _ = run(&mut u);
});
