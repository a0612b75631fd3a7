//! Connection tests: a scripted client drives a [`Connection`] with hand-encoded frames on a
//! manual clock and decodes what it writes back.

use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use hourglass_broker::{AmqpError, ChannelId, Command, ConnectionId, Effect, Message, Publish, Timestamp};
use hourglass_wire::*;

use crate::*;

const CONN: ConnectionId = ConnectionId(7);
const T0: u64 = 1_000_000;

/// A scripted client on a manual clock.
struct Client {
    conn: Connection,
    now: Timestamp,
    decoder: FrameDecoder,
    /// Output bytes not yet decoded into frames (kept so a test can inspect raw bytes).
    pending: BytesMut,
    /// Input the connection left unconsumed (a partial frame), as the server keeps it.
    inbox: BytesMut,
}

impl Client {
    fn new(config: SessionConfig, is_loopback: bool) -> Self {
        let peer = PeerInfo { addr: "127.0.0.1:5000".into(), local: "127.0.0.1:5672".into(), is_loopback };
        let now = Timestamp::from_millis(T0);
        Client {
            conn: Connection::new(CONN, peer, Arc::new(config), now),
            now,
            decoder: FrameDecoder::new(0),
            pending: BytesMut::new(),
            inbox: BytesMut::new(),
        }
    }

    fn local() -> Self {
        Client::new(config(), true)
    }

    fn at(&mut self, ms_after_t0: u64) -> &mut Self {
        self.now = Timestamp::from_millis(T0 + ms_after_t0);
        self
    }

    fn send_bytes(&mut self, bytes: &[u8]) {
        self.inbox.extend_from_slice(bytes);
        self.conn.handle_input(&mut self.inbox, self.now);
    }

    fn send_method(&mut self, channel: u16, method: impl Into<Method>) {
        let mut buf = BytesMut::new();
        encode_method_frame(channel, &method.into(), &mut buf);
        self.send_bytes(&buf);
    }

    fn send_header(&mut self, channel: u16, class_id: u16, body_size: u64) {
        let header = ContentHeader { class_id, body_size, properties: properties() };
        let mut buf = BytesMut::new();
        encode_header_frame(channel, &header, &mut buf);
        self.send_bytes(&buf);
    }

    fn send_body(&mut self, channel: u16, payload: &[u8]) {
        let mut buf = BytesMut::new();
        encode_body_frame(channel, payload, &mut buf);
        self.send_bytes(&buf);
    }

    fn effect(&mut self, effect: Effect) {
        self.conn.handle_effect(effect, self.now);
    }

    fn timeout(&mut self) {
        self.conn.handle_timeout(self.now);
    }

    /// Every frame written since the last call.
    fn frames(&mut self) -> Vec<Frame> {
        self.pending.extend_from_slice(&self.conn.take_output());
        let mut frames = Vec::new();
        while let Some(frame) = self.decoder.decode(&mut self.pending).expect("server output decodes") {
            frames.push(frame);
        }
        frames
    }

    /// The methods (with channels) written since the last call.
    fn methods(&mut self) -> Vec<(u16, Method)> {
        self.frames()
            .into_iter()
            .filter_map(|f| match f {
                Frame::Method { channel, method } => Some((channel, method)),
                _ => None,
            })
            .collect()
    }

    fn commands(&mut self) -> Vec<Command> {
        std::iter::from_fn(|| self.conn.poll_command()).collect()
    }

    /// The one connection.close written since the last call.
    fn connection_close(&mut self) -> ConnectionClose {
        match self.methods().as_slice() {
            [(0, Method::ConnectionClose(close))] => close.clone(),
            other => panic!("expected one connection.close, got {other:?}"),
        }
    }

    /// Header, start-ok (PLAIN guest/guest), tune-ok with our limits and heartbeat `heartbeat_s`,
    /// open "/"; output and commands drained.
    fn open(&mut self, heartbeat_s: u16) {
        self.send_bytes(PROTOCOL_HEADER);
        self.send_method(0, start_ok("PLAIN", b"\0guest\0guest"));
        self.send_method(
            0,
            ConnectionTuneOk { channel_max: 2047, frame_max: 131_072, heartbeat: heartbeat_s },
        );
        self.send_method(0, ConnectionOpen { virtual_host: short("/") });
        let methods = self.methods();
        assert!(matches!(methods.last(), Some((0, Method::ConnectionOpenOk(_)))), "{methods:?}");
        assert!(matches!(self.commands().as_slice(), [Command::ConnectionOpen { .. }]));
    }

    /// Opens `channel` and lets the broker answer open-ok.
    fn open_channel(&mut self, channel: u16) {
        self.send_method(channel, ChannelOpen {});
        assert_eq!(
            self.commands(),
            vec![Command::Method { conn: CONN, channel: ChannelId(channel), method: ChannelOpen {}.into() }]
        );
        self.effect(send(channel, ChannelOpenOk {}));
        assert_eq!(self.methods(), vec![(channel, ChannelOpenOk {}.into())]);
    }

    fn publish(&mut self, channel: u16, routing_key: &str) {
        let publish = BasicPublish {
            exchange: short(""),
            routing_key: short(routing_key),
            mandatory: true,
            immediate: false,
        };
        self.send_method(channel, publish);
    }
}

fn config() -> SessionConfig {
    SessionConfig::new(Arc::new(StaticUsers::default().with_user("alice", "secret", false)))
}

fn short(s: &str) -> ShortStr {
    ShortStr::try_from(s).expect("short")
}

fn properties() -> EncodedProperties {
    BasicProperties { content_type: Some(short("text/plain")), delivery_mode: Some(2), ..Default::default() }
        .into()
}

fn start_ok(mechanism: &str, response: &[u8]) -> ConnectionStartOk {
    let capabilities = FieldTable::from_entries([
        ("connection.blocked", FieldValue::Bool(true)),
        ("consumer_cancel_notify", FieldValue::Bool(true)),
        ("authentication_failure_close", FieldValue::Bool(true)),
    ]);
    ConnectionStartOk {
        client_properties: FieldTable::from_entries([("capabilities", FieldValue::Table(capabilities))]),
        mechanism: short(mechanism),
        response: LongStr::new(Bytes::copy_from_slice(response)),
        locale: short("en_US"),
    }
}

fn send(channel: u16, method: impl Into<Method>) -> Effect {
    Effect::send(CONN, ChannelId(channel), method, None)
}

fn close_of(code: u16, text: &str, class_id: u16, method_id: u16) -> ConnectionClose {
    ConnectionClose { reply_code: code, reply_text: short(text), class_id, method_id }
}

fn expected_publish(body: &[u8]) -> Command {
    Command::Publish {
        conn: CONN,
        channel: ChannelId(1),
        publish: Box::new(Publish {
            exchange: short(""),
            routing_key: short("rk"),
            mandatory: true,
            properties: properties(),
            body: Bytes::copy_from_slice(body),
        }),
    }
}

mod alarm;
mod channels;
mod closing;
mod content;
mod external;
mod handshake;
mod login;
