//! One AMQP 0-9-1 connection: protocol header, frame dispatch by state, the connection-level
//! methods of an open connection, heartbeats and closing. The handshake steps live in
//! `connection/handshake.rs`; channel frames go to [`Channels`].
//!
//! Sans-IO: bytes and broker effects come in through `handle_*` with `now`; broker commands come
//! out of [`Connection::poll_command`] and bytes for the socket out of [`Connection::take_output`].
//! Behaviour and reply texts follow RabbitMQ's `rabbit_reader`.

use std::collections::VecDeque;
use std::sync::Arc;

use bytes::BytesMut;
use hourglass_broker::{AmqpError, ChannelId, ClientCapabilities, Command, ConnectionId, Effect, Timestamp};
use hourglass_wire::reply_code::{CHANNEL_ERROR, CONNECTION_FORCED, NOT_ALLOWED};
use hourglass_wire::{
    decode_protocol_header, ChannelClose, ChannelCloseOk, ConnectionClose, ConnectionCloseOk,
    ConnectionUpdateSecretOk, DecodeError, DeliverArgs, EncodedProperties, FieldTable, Frame, FrameDecoder,
    Method, ProtocolHeader, FRAME_MIN_SIZE, PROTOCOL_HEADER,
};
use tracing::{debug, info, warn};

use crate::amqp1::{is_amqp1_header, Amqp1Connection};
use crate::auth::ClientCertificate;
use crate::channels::{Channels, Inbound, OnBrokerError};
use crate::config::SessionConfig;
use crate::content::UnfinishedContent;
use crate::fault::{reply_text, unexpected_frame, Fault};
use crate::heartbeat::{Heartbeat, HeartbeatAction};
use crate::output::Output;

mod handshake;

/// How long a client has from connecting to connection.open-ok: RabbitMQ's `handshake_timeout`
/// (10 s). Bounds how long a silent or slow peer holds a socket before it is authenticated.
pub const HANDSHAKE_TIMEOUT_MS: u64 = 10_000;

/// How long we wait for connection.close-ok before the tune: RabbitMQ's `?NORMAL_TIMEOUT` (3 s).
pub const HANDSHAKE_CLOSE_TIMEOUT_MS: u64 = 3_000;

/// The longest we wait for connection.close-ok once tuned: RabbitMQ waits the heartbeat interval,
/// but never more than `?CLOSING_TIMEOUT` (30 s), so a peer cannot hold a closing connection.
pub const CLOSING_TIMEOUT_MAX_MS: u64 = 30_000;

/// After a frame error we cannot find the next frame, so we stop reading and only give the
/// connection.close this long to reach the peer: RabbitMQ's `?SILENT_CLOSE_DELAY` (3 s).
pub const SILENT_CLOSE_DELAY_MS: u64 = 3_000;

/// After answering the client's connection.close we keep reading (and discarding) until the client
/// closes the socket, at most this long: closing with the client's unread frames still in our
/// receive buffer would make the kernel send a reset, and a client still flushing publishes would
/// see EPIPE instead of our close-ok (amqplib's tests; RabbitMQ waits for the client too).
pub const DRAIN_AFTER_CLOSE_OK_MS: u64 = 3_000;

/// Who is on the other end of the socket.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PeerInfo {
    /// The peer's socket address, e.g. `127.0.0.1:50312`.
    pub addr: String,
    /// The local address of the accepted socket (the server's side), e.g. `127.0.0.1:5672`:
    /// connection names read `peer -> local`, as RabbitMQ's.
    pub local: String,
    /// True for a loopback peer (some users, like `guest`, may only log in from one).
    pub is_loopback: bool,
}

/// Where the connection is. Handshake states are named for what they wait for.
///
/// ```text
///  ExpectProtocolHeader ──AMQP 0-9-1──► ExpectStartOk ──login ok──► ExpectTuneOk
///        │ any other header                  │ login refused            │ limits ok
///        │ (we answer with ours)             ├──► LoginRefused ──hold over: close sent──► Closing
///        │                                   │   (failed-login slowdown; input ignored)
///        │                                   │                          ▼
///        │                                   │                      ExpectOpen ──vhost ok──► Open
///        │            our error (connection.close sent)                 │                      │
///        │                 ┌─────────────────┴──────────────────────────┴──────────────────────┘
///        ▼                 ▼
///      Closed ◄──────── Closing   (left on close-ok, on close (we answer close-ok), or on timeout)
///        ▲
///        ├── Draining ◄── client connection.close (we answer close-ok; we read and discard
///        │                until the client closes the socket or DRAIN_AFTER_CLOSE_OK_MS)
///        └── from any state: EOF, handshake timeout, missed heartbeats, close_forced before Open
/// ```
/// There is no `ExpectSecureOk`: PLAIN, AMQPLAIN and EXTERNAL finish in start-ok, so we never send
/// connection.secure.
#[derive(Clone, Debug, PartialEq, Eq)]
enum State {
    ExpectProtocolHeader,
    ExpectStartOk,
    ExpectTuneOk,
    ExpectOpen,
    /// A login was refused; its connection.close (`held`) is sent at `answer_at`
    /// (`login_limiter.rs`). Nothing the peer sends meanwhile is read.
    LoginRefused {
        answer_at: Timestamp,
        held: BytesMut,
    },
    Open,
    /// We sent connection.close and wait for close-ok until `deadline`. With `discard_input`
    /// (after a frame error) we no longer parse what the peer sends.
    Closing {
        deadline: Timestamp,
        discard_input: bool,
    },
    /// The client closed and got close-ok; what it still sends is discarded until it closes the
    /// socket or `until`.
    Draining {
        until: Timestamp,
    },
    Closed,
}

/// One client connection's AMQP state machine.
#[derive(Debug)]
pub struct Connection {
    id: ConnectionId,
    peer: PeerInfo,
    config: Arc<SessionConfig>,
    state: State,
    connected_at: Timestamp,
    decoder: FrameDecoder,
    out: Output,
    commands: VecDeque<Command>,
    channels: Channels,
    /// Present from tune-ok on (RabbitMQ starts its heartbeater there).
    heartbeat: Option<Heartbeat>,
    user: Option<String>,
    client_properties: FieldTable,
    capabilities: ClientCapabilities,
    frame_max: u32,
    heartbeat_s: u16,
    /// True once connection.open-ok was sent (and `Command::ConnectionOpen` emitted).
    opened: bool,
    /// True while the client has been told connection.blocked and not yet unblocked.
    blocked_sent: bool,
    /// The verified TLS client certificate, if the client presented one (offers EXTERNAL).
    client_certificate: Option<ClientCertificate>,
    /// The connection came over TLS.
    over_tls: bool,
    /// The SASL mechanism of the successful login (PLAIN until one succeeds).
    login_mechanism: &'static str,
    /// True while the driver does not read the socket for a resource alarm
    /// ([`Connection::set_reading_blocked`]); a heartbeat monitor started meanwhile starts paused.
    reading_blocked: bool,
    /// The client's protocol header named AMQP 1.0: every call from then on goes to it.
    amqp1: Option<Box<Amqp1Connection>>,
}

impl PeerInfo {
    /// The peer's IP address, when `addr` is a socket address (the failed-login slowdown counts
    /// per address).
    pub fn ip(&self) -> Option<std::net::IpAddr> {
        self.addr.parse::<std::net::SocketAddr>().ok().map(|a| a.ip())
    }
}

impl Connection {
    /// A connection whose socket was just accepted; it waits for the protocol header.
    pub fn new(id: ConnectionId, peer: PeerInfo, config: Arc<SessionConfig>, now: Timestamp) -> Self {
        Connection {
            id,
            peer,
            config,
            state: State::ExpectProtocolHeader,
            connected_at: now,
            // Until tune-ok only frames up to the spec's minimum are accepted (AMQP 0-9-1
            // §4.2.3; RabbitMQ's initial_frame_max), so an unauthenticated peer cannot make us
            // buffer large frames.
            decoder: FrameDecoder::new(FRAME_MIN_SIZE),
            out: Output::new(FRAME_MIN_SIZE, now),
            commands: VecDeque::new(),
            channels: Channels::new(0),
            heartbeat: None,
            user: None,
            client_properties: FieldTable::new(),
            capabilities: ClientCapabilities::default(),
            frame_max: FRAME_MIN_SIZE,
            heartbeat_s: 0,
            opened: false,
            blocked_sent: false,
            reading_blocked: false,
            client_certificate: None,
            over_tls: false,
            login_mechanism: "PLAIN",
            amqp1: None,
        }
    }

    /// Tells a new connection that it runs over TLS and, with `certificate`, that its client
    /// presented one the TLS layer verified against the configured CA (the session never sees
    /// the socket): EXTERNAL may then be offered.
    pub fn over_tls(mut self, certificate: Option<ClientCertificate>) -> Self {
        self.over_tls = true;
        self.client_certificate = certificate;
        self
    }

    /// Consumes every complete frame in `input`, leaving a partial frame in place.
    pub fn handle_input(&mut self, input: &mut BytesMut, now: Timestamp) {
        if input.is_empty() {
            return;
        }
        if self.state == State::ExpectProtocolHeader && self.amqp1.is_none() && is_amqp1_header(input) {
            let certificate = self.client_certificate.clone();
            let amqp1 = Amqp1Connection::new(
                self.id,
                self.peer.clone(),
                self.config.clone(),
                certificate,
                self.over_tls,
                now,
            );
            self.amqp1 = Some(Box::new(amqp1));
        }
        if let Some(amqp1) = &mut self.amqp1 {
            return amqp1.handle_input(input, now);
        }
        // Any octet from the peer shows it is alive (RabbitMQ counts received octets).
        if let Some(heartbeat) = &mut self.heartbeat {
            heartbeat.on_received(now);
        }
        if self.state == State::ExpectProtocolHeader {
            match decode_protocol_header(input) {
                None => return,
                Some(ProtocolHeader::Amqp091) => self.send_start(now),
                Some(ProtocolHeader::Other) => {
                    // AMQP 0-9-1 §4.2.2: answer with the header we support, then close.
                    info!(conn = self.id.0, peer = %self.peer.addr, "unsupported protocol header");
                    self.out.raw(PROTOCOL_HEADER, now);
                    self.state = State::Closed;
                }
            }
        }
        while !self.discards_input() {
            if let Some((channel, fault)) = self.unexpected_header(input) {
                self.fail(channel, fault, now);
                continue;
            }
            let len_before = input.len();
            match self.decoder.decode(input) {
                Ok(Some(frame)) => self.handle_frame(frame, now),
                Ok(None) => return,
                Err(error) => {
                    let consumed = input.len() < len_before;
                    self.handle_decode_error(error, consumed, now);
                }
            }
        }
        input.clear();
    }

    /// An effect from the broker addressed to this connection.
    pub fn handle_effect(&mut self, effect: Effect, now: Timestamp) {
        if effect.conn() != self.id {
            warn!(conn = self.id.0, to = effect.conn().0, "effect for another connection dropped");
            return;
        }
        if let Some(amqp1) = &mut self.amqp1 {
            return amqp1.handle_effect(effect, now);
        }
        if self.state != State::Open {
            // Closing: the client was told the connection is over; nothing else may follow.
            return;
        }
        match effect {
            Effect::Deliver { channel, consumer_tag, delivery_tag, redelivered, message, .. } => {
                if !self.channels.admits_delivery(channel.0) {
                    debug!(conn = self.id.0, channel = channel.0, "stale delivery dropped");
                    return;
                }
                let deliver = DeliverArgs {
                    consumer_tag: &consumer_tag,
                    delivery_tag,
                    redelivered,
                    exchange: &message.exchange,
                    routing_key: &message.routing_key,
                };
                self.out.delivery(channel.0, deliver, message.properties(), &message.body, now);
            }
            Effect::Send { .. } | Effect::Confirm { .. } => {
                let Some((channel, method, content)) = effect.into_method() else { return };
                if !self.channels.admit_send(channel.0, &method) {
                    debug!(
                        conn = self.id.0,
                        channel = channel.0,
                        method = method.name(),
                        "stale effect dropped"
                    );
                    return;
                }
                match (method.has_content(), content) {
                    (true, Some(message)) => {
                        self.out.content(channel.0, &method, message.properties(), &message.body, now)
                    }
                    (true, None) => {
                        warn!(
                            conn = self.id.0,
                            method = method.name(),
                            "content method sent without content"
                        );
                        self.out.content(channel.0, &method, &EncodedProperties::default(), &[], now);
                    }
                    (false, _) => self.out.method(channel.0, &method, now),
                }
            }
            Effect::ChannelError { channel, error, .. } => match self.channels.on_broker_error(channel.0) {
                OnBrokerError::SendClose => self.send_channel_close(channel.0, &error, now),
                OnBrokerError::SendCloseOk => self.out.method(channel.0, &ChannelCloseOk {}.into(), now),
                OnBrokerError::Drop => {}
            },
            Effect::ConnectionError { error, .. } => self.close_with(error, now),
            Effect::Blocked { reason, .. } => self.on_blocked(reason, now),
            // 0-9-1 asks no query.
            Effect::Answer { .. } | Effect::TimedOut { .. } => {}
        }
    }

    /// Runs whatever timer is due at `now`: handshake timeout, close timeout, heartbeats.
    pub fn handle_timeout(&mut self, now: Timestamp) {
        if let Some(amqp1) = &mut self.amqp1 {
            return amqp1.handle_timeout(now);
        }
        match self.state {
            State::Closed => {}
            State::LoginRefused { answer_at, .. } => {
                if now >= answer_at {
                    self.send_held_refusal(now);
                }
            }
            State::Closing { deadline, .. } => {
                if now >= deadline {
                    info!(conn = self.id.0, "no connection.close-ok in time; dropping the socket");
                    self.state = State::Closed;
                }
            }
            State::Draining { until } => {
                if now >= until {
                    self.state = State::Closed;
                }
            }
            State::Open => self.poll_heartbeat(now),
            State::ExpectProtocolHeader | State::ExpectStartOk | State::ExpectTuneOk | State::ExpectOpen => {
                if now >= self.handshake_deadline() {
                    warn!(conn = self.id.0, peer = %self.peer.addr, state = ?self.state, "handshake timeout");
                    self.state = State::Closed;
                } else {
                    self.poll_heartbeat(now);
                }
            }
        }
    }

    /// Graceful shutdown: connection.close 320, then wait for close-ok (or the close timeout).
    /// Before the handshake finished there is nobody to tell: the connection just closes.
    pub fn close_forced(&mut self, reason: &str, now: Timestamp) {
        if let Some(amqp1) = &mut self.amqp1 {
            return amqp1.close_forced(reason, now);
        }
        match self.state {
            State::Open => {
                let detail = format!("broker forced connection closure with reason '{reason}'");
                self.close_with(AmqpError::new(CONNECTION_FORCED, detail), now);
            }
            State::Closing { .. } | State::Draining { .. } | State::Closed => {}
            _ => self.state = State::Closed,
        }
    }

    /// The socket reached EOF or failed: nothing more can be sent or received.
    pub fn handle_eof(&mut self, _now: Timestamp) {
        if let Some(amqp1) = &mut self.amqp1 {
            return amqp1.handle_eof();
        }
        if self.state != State::Closed {
            if !matches!(self.state, State::Closing { .. } | State::Draining { .. }) {
                info!(conn = self.id.0, peer = %self.peer.addr, "client unexpectedly closed TCP connection");
            }
            self.state = State::Closed;
        }
    }

    /// The next command for the broker, in order.
    pub fn poll_command(&mut self) -> Option<Command> {
        if let Some(amqp1) = &mut self.amqp1 {
            return amqp1.poll_command();
        }
        self.commands.pop_front()
    }

    /// Every command for the broker so far, in order, at once (what [`Connection::poll_command`]
    /// would give one by one): the driver hands them over as one batch, and none is moved.
    pub fn take_commands(&mut self) -> Vec<Command> {
        if let Some(amqp1) = &mut self.amqp1 {
            return amqp1.take_commands();
        }
        if self.commands.is_empty() {
            return Vec::new();
        }
        // Room for a batch half again as large as this one: batches vary from read to read, and
        // one that outgrows its vector is copied whole at each doubling.
        let next_capacity = self.commands.len() + self.commands.len() / 2;
        // Only pushed to since the last take, so contiguous: the conversion moves nothing.
        Vec::from(std::mem::replace(&mut self.commands, VecDeque::with_capacity(next_capacity)))
    }

    /// Everything encoded for the socket so far (empty when nothing is pending).
    pub fn take_output(&mut self) -> BytesMut {
        if let Some(amqp1) = &mut self.amqp1 {
            let mut out = self.out.take();
            let amqp1_out = amqp1.take_output();
            // After the protocol header, everything is the 1.0 side's: no copy.
            if out.is_empty() {
                return amqp1_out;
            }
            out.extend_from_slice(&amqp1_out);
            return out;
        }
        self.out.take()
    }

    /// Takes back a buffer [`Connection::take_output`] gave, now written in full, for the next
    /// frames (`Output::recycle`).
    pub fn recycle_output(&mut self, written: BytesMut) {
        if self.amqp1.is_none() {
            self.out.recycle(written);
        }
    }

    /// When `handle_timeout` next has something to do.
    pub fn next_deadline(&self) -> Option<Timestamp> {
        if let Some(amqp1) = &self.amqp1 {
            return amqp1.next_deadline();
        }
        let heartbeat = self.heartbeat.as_ref().and_then(|h| h.next_deadline(self.out.last_write()));
        match self.state {
            State::Closed => None,
            State::Closing { deadline, .. } => Some(deadline),
            State::Draining { until } => Some(until),
            State::LoginRefused { answer_at, .. } => Some(answer_at),
            State::Open => heartbeat,
            _ => Some(heartbeat.map_or(self.handshake_deadline(), |h| h.min(self.handshake_deadline()))),
        }
    }

    /// The connection is over: flush `take_output()` and drop the socket.
    pub fn is_closed(&self) -> bool {
        if let Some(amqp1) = &self.amqp1 {
            return amqp1.is_closed();
        }
        self.state == State::Closed
    }

    /// True once the handshake completed (`Command::ConnectionOpen` was emitted), so the broker
    /// must be told `Command::ConnectionClosed` when the connection ends.
    pub fn opened(&self) -> bool {
        if let Some(amqp1) = &self.amqp1 {
            return amqp1.opened();
        }
        self.opened
    }

    /// What this connection's unfinished messages hold (basic.publish received, body not yet
    /// complete): the server counts it against the memory alarm and stops reading a connection
    /// in the middle of a message while an alarm is up.
    pub fn unfinished_content(&self) -> UnfinishedContent {
        if let Some(amqp1) = &self.amqp1 {
            return amqp1.unfinished_content();
        }
        self.channels.unfinished()
    }

    /// The driver stopped (`true`) or resumed (`false`) reading the socket because a resource
    /// alarm blocks this connection: the client's heartbeats cannot reach us meanwhile, so
    /// missing ones are not counted (RabbitMQ keeps blocked connections open); ours go on.
    pub fn set_reading_blocked(&mut self, blocked: bool, now: Timestamp) {
        self.reading_blocked = blocked;
        if let Some(heartbeat) = &mut self.heartbeat {
            heartbeat.pause_receive(blocked, now);
        }
    }

    /// This connection's id.
    pub fn id(&self) -> ConnectionId {
        self.id
    }

    // Inlined into `handle_input` with `on_frame_open`, so a frame (152 bytes when this was
    // measured, 88 now) is not copied into each call (row a of the load matrix: broker CPU per
    // message -4 %, ADR 0014).
    #[inline(always)]
    fn handle_frame(&mut self, frame: Frame, now: Timestamp) {
        match self.state {
            State::ExpectProtocolHeader
            | State::LoginRefused { .. }
            | State::Draining { .. }
            | State::Closed => {}
            State::Closing { .. } => self.on_frame_closing(frame, now),
            State::Open => self.on_frame_open(frame, now),
            State::ExpectStartOk | State::ExpectTuneOk | State::ExpectOpen => match frame {
                Frame::Heartbeat { channel: 0 } => {}
                Frame::Method { channel: 0, method } => self.on_handshake_method(method, now),
                other => self.fail(0, unexpected_frame(&other), now),
            },
        }
    }

    /// While closing only connection.close-ok and connection.close matter (AMQP 0-9-1 §4.2.9
    /// "close": after sending close, discard everything else).
    fn on_frame_closing(&mut self, frame: Frame, now: Timestamp) {
        match frame {
            Frame::Method { channel: 0, method: Method::ConnectionCloseOk(_) } => {
                self.state = State::Closed;
            }
            Frame::Method { channel: 0, method: Method::ConnectionClose(_) } => {
                self.out.method(0, &ConnectionCloseOk {}.into(), now);
                self.state = State::Closed;
            }
            _ => {}
        }
    }

    #[inline(always)]
    fn on_frame_open(&mut self, frame: Frame, now: Timestamp) {
        let max_message_size = self.config.max_message_size;
        let inbound = match frame {
            Frame::Heartbeat { channel: 0 } => return,
            Frame::Method { channel: 0, method } => return self.on_connection_method(method, now),
            Frame::Heartbeat { .. } | Frame::Header { channel: 0, .. } | Frame::Body { channel: 0, .. } => {
                return self.fail(0, unexpected_frame(&frame), now);
            }
            Frame::Method { channel, method } => (channel, self.channels.on_method(channel, method)),
            Frame::Header { channel, header } => {
                (channel, self.channels.on_header(channel, header, max_message_size))
            }
            Frame::Body { channel, payload } => (channel, self.channels.on_body(channel, payload)),
        };
        let (channel, inbound) = inbound;
        let conn = self.id;
        match inbound {
            Inbound::Nothing => {}
            Inbound::Forward(method) => {
                if matches!(method, Method::ChannelOpen(_)) && !self.admit_channel(channel, now) {
                    return;
                }
                self.commands.push_back(Command::Method { conn, channel: ChannelId(channel), method });
            }
            Inbound::Publish(publish) => {
                self.commands.push_back(Command::Publish { conn, channel: ChannelId(channel), publish });
            }
            Inbound::Reply(method) => self.out.method(channel, &method, now),
            Inbound::Fault(fault) => self.fail(channel, fault, now),
        }
    }

    /// A channel.open the channel rules admitted: counts it for its user, or closes the
    /// connection with RabbitMQ's 530 when the user's `max-channels` is reached (as
    /// `rabbit_reader:create_channel`, naming no method). False when refused.
    fn admit_channel(&mut self, channel: u16, now: Timestamp) -> bool {
        let Some(seat) = &mut self.channels.seat else { return true };
        match seat.open_channel(self.config.authenticator.as_ref()) {
            Ok(()) => true,
            Err(reached) => {
                self.channels.forget(channel);
                self.fail(channel, Fault::connection(NOT_ALLOWED, reached), now);
                false
            }
        }
    }

    fn on_handshake_method(&mut self, method: Method, now: Timestamp) {
        match (&self.state, method) {
            // A client may give up at any point of the handshake; answer and close.
            (_, Method::ConnectionClose(_)) => {
                self.out.method(0, &ConnectionCloseOk {}.into(), now);
                self.state = State::Closed;
            }
            (State::ExpectStartOk, Method::ConnectionStartOk(start_ok)) => self.on_start_ok(*start_ok, now),
            (State::ExpectTuneOk, Method::ConnectionTuneOk(tune_ok)) => self.on_tune_ok(tune_ok, now),
            (State::ExpectOpen, Method::ConnectionOpen(open)) => self.on_open(open, now),
            (_, method) => {
                let fault = self.unexpected_method(&method);
                self.fail(0, fault, now);
            }
        }
    }

    /// Connection-class methods once open (the others on channel 0 are errors).
    fn on_connection_method(&mut self, method: Method, now: Timestamp) {
        match method {
            Method::ConnectionClose(close) => {
                info!(conn = self.id.0, code = close.reply_code, text = %close.reply_text, "client closed the connection");
                // The broker lets go of the connection's consumers, deliveries and exclusive
                // queues before the client reads close-ok (its driver hands the commands over
                // before it writes): as RabbitMQ, which answers once its channels are gone, so a
                // client that reconnects at once finds its exclusive consumer and queue free.
                self.commands.push_back(Command::ConnectionClosed { conn: self.id });
                self.out.method(0, &ConnectionCloseOk {}.into(), now);
                // The connection is over for the limits: the client may open its next one now.
                self.channels.seat = None;
                self.state = State::Draining { until: now.saturating_add_millis(DRAIN_AFTER_CLOSE_OK_MS) };
            }
            // RabbitMQ re-authenticates with the new secret (e.g. a refreshed OAuth token). Our
            // authenticators check passwords only at login, so the secret is accepted and
            // ignored.
            Method::ConnectionUpdateSecret(update) => {
                debug!(conn = self.id.0, reason = %update.reason, "update-secret accepted and ignored");
                self.out.method(0, &ConnectionUpdateSecretOk {}.into(), now);
            }
            method => {
                let fault = self.unexpected_method(&method);
                self.fail(0, fault, now);
            }
        }
    }

    fn on_blocked(&mut self, reason: Option<String>, now: Timestamp) {
        // RabbitMQ tells only clients that announced the capability, once per blocked period.
        if !self.capabilities.connection_blocked {
            return;
        }
        match reason {
            Some(reason) if !self.blocked_sent => {
                let method = hourglass_wire::ConnectionBlocked { reason: reply_text(&reason) };
                self.out.method(0, &method.into(), now);
                self.blocked_sent = true;
            }
            None if self.blocked_sent => {
                self.out.method(0, &hourglass_wire::ConnectionUnblocked {}.into(), now);
                self.blocked_sent = false;
            }
            _ => {}
        }
    }

    /// A content header where a method frame is due is 505 UNEXPECTED_FRAME whatever its payload
    /// holds (the Java client's `UnexpectedFrames#missingMethod`): decided from the frame's first
    /// octets, before the payload is decoded (which could otherwise fail first, as 502).
    fn unexpected_header(&self, input: &[u8]) -> Option<(u16, Fault)> {
        if self.state != State::Open {
            return None;
        }
        // Channel 0 carries no content: the decoded frame gets its own 505 (`on_frame_open`).
        let channel = hourglass_wire::peek_content_header_channel(input).filter(|&channel| channel != 0)?;
        self.channels.unexpected_header(channel).map(|fault| (channel, fault))
    }

    fn handle_decode_error(&mut self, error: DecodeError, consumed: bool, now: Timestamp) {
        // A frame error (or any error that did not consume the bad frame) loses our place in the
        // byte stream: nothing after it can be parsed.
        let lost_sync = matches!(error, DecodeError::Frame(_)) || !consumed;
        if let State::Closing { deadline, .. } = self.state {
            // Already closing: nothing more to tell the peer (RabbitMQ only logs these).
            if lost_sync {
                self.state = State::Closing { deadline, discard_input: true };
            }
            return;
        }
        let (class_id, method_id) = error.class_method();
        let amqp =
            AmqpError { reply_code: error.reply_code(), reply_text: error.reply_text(), class_id, method_id };
        self.close_with(amqp, now);
        if lost_sync {
            let deadline = now.saturating_add_millis(SILENT_CLOSE_DELAY_MS);
            self.state = State::Closing { deadline, discard_input: true };
        }
    }

    /// Acts on a fault: a channel fault closes `channel`, a connection fault the connection.
    fn fail(&mut self, channel: u16, fault: Fault, now: Timestamp) {
        match fault {
            Fault::Connection(error) => self.close_with(error, now),
            Fault::Channel(error) => {
                self.channels.close_by_server(channel);
                self.send_channel_close(channel, &error, now);
                self.commands
                    .push_back(Command::ChannelAborted { conn: self.id, channel: ChannelId(channel) });
            }
        }
    }

    fn send_channel_close(&mut self, channel: u16, error: &AmqpError, now: Timestamp) {
        debug!(conn = self.id.0, channel, code = error.reply_code, text = %error.reply_text, "closing channel");
        let close = ChannelClose {
            reply_code: error.reply_code,
            reply_text: reply_text(&error.reply_text),
            class_id: error.class_id,
            method_id: error.method_id,
        };
        self.out.method(channel, &close.into(), now);
    }

    /// Sends connection.close and waits for close-ok (unless already closing or closed).
    fn close_with(&mut self, error: AmqpError, now: Timestamp) {
        if matches!(self.state, State::Closing { .. } | State::Closed) {
            return;
        }
        warn!(conn = self.id.0, peer = %self.peer.addr, code = error.reply_code, text = %error.reply_text, "closing connection");
        let close = ConnectionClose {
            reply_code: error.reply_code,
            reply_text: reply_text(&error.reply_text),
            class_id: error.class_id,
            method_id: error.method_id,
        };
        self.out.method(0, &close.into(), now);
        let deadline = now.saturating_add_millis(self.close_timeout_ms());
        self.state = State::Closing { deadline, discard_input: false };
        self.channels.seat = None;
    }

    fn poll_heartbeat(&mut self, now: Timestamp) {
        let Some(heartbeat) = &self.heartbeat else {
            return;
        };
        match heartbeat.poll(now, self.out.last_write()) {
            HeartbeatAction::None => {}
            HeartbeatAction::Send => self.out.heartbeat(now),
            HeartbeatAction::PeerDead => {
                let timeout_s = heartbeat.interval_s();
                warn!(conn = self.id.0, peer = %self.peer.addr, timeout_s, "missed heartbeats from client");
                self.state = State::Closed;
            }
        }
    }

    /// RabbitMQ's "unexpected method in connection state {starting|tuning|opening|running}".
    fn unexpected_method(&self, method: &Method) -> Fault {
        let state = match self.state {
            State::ExpectProtocolHeader | State::ExpectStartOk | State::LoginRefused { .. } => "starting",
            State::ExpectTuneOk => "tuning",
            State::ExpectOpen => "opening",
            State::Open => "running",
            State::Closing { .. } | State::Draining { .. } | State::Closed => "closing",
        };
        let detail = format!("unexpected method in connection state {state}");
        Fault::Connection(AmqpError::new(CHANNEL_ERROR, detail).on(method))
    }

    fn discards_input(&self) -> bool {
        matches!(
            self.state,
            State::Closed
                | State::LoginRefused { .. }
                | State::Closing { discard_input: true, .. }
                | State::Draining { .. }
        )
    }

    /// The hold of a refused login is over: its connection.close goes out, and we wait for
    /// close-ok as after any close.
    fn send_held_refusal(&mut self, now: Timestamp) {
        let State::LoginRefused { held, .. } = std::mem::replace(&mut self.state, State::Closed) else {
            return;
        };
        if held.is_empty() {
            // A silent refusal (no authentication_failure_close): the socket just closes.
            return;
        }
        self.out.raw(&held, now);
        let deadline = now.saturating_add_millis(self.close_timeout_ms());
        self.state = State::Closing { deadline, discard_input: false };
    }

    fn handshake_deadline(&self) -> Timestamp {
        self.connected_at.saturating_add_millis(HANDSHAKE_TIMEOUT_MS)
    }

    /// RabbitMQ waits for close-ok as long as the heartbeat interval, capped at 30 s; before the
    /// tune it waits 3 s.
    fn close_timeout_ms(&self) -> u64 {
        match &self.heartbeat {
            None => HANDSHAKE_CLOSE_TIMEOUT_MS,
            Some(heartbeat) => match heartbeat.interval_s().saturating_mul(1000) {
                0 => CLOSING_TIMEOUT_MAX_MS,
                ms => ms.min(CLOSING_TIMEOUT_MAX_MS),
            },
        }
    }

    /// The frame_max we offer: the configured one, but never below the spec's minimum (a
    /// configured 0, "no limit", would let any peer make us buffer 4 GiB frames).
    fn offered_frame_max(&self) -> u32 {
        self.config.frame_max.max(FRAME_MIN_SIZE)
    }
}
