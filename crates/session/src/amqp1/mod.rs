//! One AMQP 1.0 connection (issue 42), from its SASL header to its close: SASL, open, idle
//! time-out and framing here; sessions and links in `links.rs`.
//!
//! Sans-IO like the 0-9-1 connection beside it: the 0-9-1 [`crate::Connection`] hands its input
//! over when the protocol header names AMQP 1.0, and passes on every call after it.
//!
//! Into the broker it goes through the same door as 0-9-1: every link is a channel of its own
//! (`links.rs`), and the broker sees channel methods and publishes; its effects come back as
//! transfers, flows and dispositions.
//!
//! ```text
//!  SaslHeader ──AMQP 3 1 0 0──► SaslInit ──login ok──► AmqpHeader ──AMQP 0 1 0 0──► ExpectOpen ──vhost ok──► Opened
//!      │ AMQP 0 1 0 0 (no SASL): our SASL header, closed       │ refused: outcome (held by the limiter), Closed
//!      ▼                                                        ▼
//!    Closed ◄──────────────── Closing (our close sent; the peer's close, or CLOSE_TIMEOUT_MS) ◄── errors
//! ```

use std::collections::VecDeque;
use std::sync::Arc;

use bytes::{Buf, Bytes, BytesMut};
use hourglass_broker::{AmqpError, Command, ConnectionId, Effect, Timestamp};
use hourglass_wire::amqp1::{
    decode_frame_header, decode_protocol_header, decode_transfer, decode_value, encode_frame_header,
    encode_value, ErrorCondition, FrameKind, Performative, ProtocolId, MIN_MAX_FRAME_SIZE,
};
use tracing::{info, warn};

use crate::auth::ClientCertificate;
use crate::client_limits::Seat;
use crate::config::SessionConfig;
use crate::connection::{PeerInfo, HANDSHAKE_TIMEOUT_MS, SILENT_CLOSE_DELAY_MS};
use crate::content::UnfinishedContent;

mod address;
mod links;
mod management;
mod message;
mod sasl;

use links::Sessions;
use sasl::Login;

/// The protocol headers (part 2.2 and 5.3.1).
pub(crate) const AMQP_HEADER: [u8; 8] = *b"AMQP\x00\x01\x00\x00";
pub(crate) const SASL_HEADER: [u8; 8] = *b"AMQP\x03\x01\x00\x00";

/// How long we wait for the peer's close after ours.
const CLOSE_TIMEOUT_MS: u64 = 3_000;
/// The shortest interval between our keep-alive frames.
const KEEPALIVE_MIN_MS: u64 = 100;

/// Whether `input` starts with an AMQP 1.0 protocol header (with or without SASL): the 0-9-1
/// connection hands such a connection over.
pub(crate) fn is_amqp1_header(input: &[u8]) -> bool {
    input.get(..8).and_then(|h| <&[u8; 8]>::try_from(h).ok()).and_then(decode_protocol_header).is_some()
}

#[derive(Debug)]
enum Phase {
    SaslHeader,
    SaslInit,
    /// A login was refused; the outcome (`held`) goes out at `answer_at`, then the connection
    /// ends (the failed-login slowdown, `login_limiter.rs`).
    LoginRefused {
        answer_at: Timestamp,
        held: BytesMut,
    },
    AmqpHeader,
    ExpectOpen,
    Opened,
    Closing {
        deadline: Timestamp,
    },
    Closed,
}

/// A connection-level error: the condition and description of our close.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ConnectionFault {
    pub condition: &'static str,
    pub description: String,
}

impl ConnectionFault {
    pub(crate) fn new(condition: &'static str, description: impl Into<String>) -> Self {
        ConnectionFault { condition, description: description.into() }
    }
}

#[derive(Debug)]
pub(crate) struct Amqp1Connection {
    id: ConnectionId,
    peer: PeerInfo,
    config: Arc<SessionConfig>,
    client_certificate: Option<ClientCertificate>,
    over_tls: bool,
    phase: Phase,
    connected_at: Timestamp,
    out: BytesMut,
    /// The last `accepted` disposition in `out`, which the next confirm may extend.
    accepted_run: Option<links::AcceptedRun>,
    commands: VecDeque<Command>,
    /// The largest frame the peer may send us (ours), and the largest we may send it.
    frame_in_max: u32,
    frame_out_max: u32,
    /// The idle time-out we announced (ms): nothing from the peer for this long ends the
    /// connection.
    our_idle_ms: Option<u64>,
    /// Half the peer's idle time-out (ms): we send at least one frame this often.
    send_every_ms: Option<u64>,
    last_received: Timestamp,
    last_sent: Timestamp,
    login: Option<Login>,
    seat: Option<Seat>,
    opened: bool,
    sessions: Sessions,
}

impl Amqp1Connection {
    pub(crate) fn new(
        id: ConnectionId,
        peer: PeerInfo,
        config: Arc<SessionConfig>,
        client_certificate: Option<ClientCertificate>,
        over_tls: bool,
        now: Timestamp,
    ) -> Self {
        let frame_in_max = config.frame_max.max(MIN_MAX_FRAME_SIZE);
        let our_idle_ms = (config.heartbeat_s > 0).then(|| u64::from(config.heartbeat_s) * 1000);
        let channel_max = config.channel_max;
        let node_name: Arc<str> = Arc::from(config.node_name.as_str());
        Amqp1Connection {
            id,
            peer,
            config,
            client_certificate,
            over_tls,
            phase: Phase::SaslHeader,
            connected_at: now,
            out: BytesMut::new(),
            accepted_run: None,
            commands: VecDeque::new(),
            frame_in_max,
            frame_out_max: MIN_MAX_FRAME_SIZE,
            our_idle_ms,
            send_every_ms: None,
            last_received: now,
            last_sent: now,
            login: None,
            seat: None,
            opened: false,
            sessions: Sessions::new(id, channel_max, node_name),
        }
    }

    pub(crate) fn handle_input(&mut self, input: &mut BytesMut, now: Timestamp) {
        if !input.is_empty() {
            self.last_received = now;
        }
        loop {
            match self.phase {
                Phase::Closed | Phase::LoginRefused { .. } => {
                    input.clear();
                    return;
                }
                Phase::SaslHeader | Phase::AmqpHeader => {
                    if input.len() < 8 {
                        return;
                    }
                    let header: [u8; 8] = input[..8].try_into().unwrap_or_default();
                    input.advance(8);
                    self.on_protocol_header(header, now);
                }
                _ => match self.next_frame(input) {
                    Ok(Some((kind, channel, body))) => self.on_frame(kind, channel, body.freeze(), now),
                    Ok(None) => return,
                    Err(fault) => {
                        input.clear();
                        self.close_with(fault, now);
                        // Nothing more of the peer's can be framed.
                        self.phase = Phase::Closed;
                        return;
                    }
                },
            }
        }
    }

    fn on_protocol_header(&mut self, header: [u8; 8], now: Timestamp) {
        let expected = match self.phase {
            Phase::SaslHeader => ProtocolId::Sasl,
            _ => ProtocolId::Amqp,
        };
        match decode_protocol_header(&header) {
            Some(id) if id == expected => {}
            found => {
                // Part 2.2: answer with the header we would accept here, then close. A client that
                // skips SASL is told to do it (we have no anonymous login by default).
                info!(conn = self.id.0, peer = %self.peer.addr, ?found, "AMQP 1.0: unexpected protocol header");
                self.raw(if expected == ProtocolId::Sasl { &SASL_HEADER } else { &AMQP_HEADER }, now);
                self.phase = Phase::Closed;
                return;
            }
        }
        if expected == ProtocolId::Sasl {
            self.raw(&SASL_HEADER, now);
            let mechanisms = sasl::mechanisms(&self.config, self.client_certificate.is_some());
            self.send(FrameKind::Sasl, 0, &Performative::SaslMechanisms { mechanisms }, &[], now);
            self.phase = Phase::SaslInit;
        } else {
            self.raw(&AMQP_HEADER, now);
            self.phase = Phase::ExpectOpen;
        }
    }

    /// The next whole frame: its type, channel and body; `Ok(None)` until it is all in.
    fn next_frame(
        &mut self,
        input: &mut BytesMut,
    ) -> Result<Option<(FrameKind, u16, BytesMut)>, ConnectionFault> {
        let header = decode_frame_header(input, self.frame_in_max)
            .map_err(|e| ConnectionFault::new("amqp:framing-error", e.to_string()))?;
        let Some(header) = header else { return Ok(None) };
        let size = header.size as usize;
        if input.len() < size {
            // The driver's read buffer grows as reads fill it; reserving here would move it.
            return Ok(None);
        }
        let mut frame = input.split_to(size);
        frame.advance(header.body_offset());
        Ok(Some((header.kind, header.channel, frame)))
    }

    fn on_frame(&mut self, kind: FrameKind, channel: u16, body: Bytes, now: Timestamp) {
        let sasl_phase = matches!(self.phase, Phase::SaslInit);
        if body.is_empty() {
            // An empty frame: only there to keep the connection alive (part 2.4.5).
            if sasl_phase || kind == FrameKind::Sasl {
                self.close_with(ConnectionFault::new("amqp:framing-error", "an empty SASL frame"), now);
            }
            return;
        }
        if (kind == FrameKind::Sasl) != sasl_phase {
            let fault =
                ConnectionFault::new("amqp:framing-error", format!("a {kind:?} frame in {:?}", self.phase));
            return self.close_with(fault, now);
        }
        // A transfer in its common encoding is read in place; anything else through a value tree.
        let decoded = decode_transfer(&body).map(Ok).unwrap_or_else(|| {
            decode_value(&body).map_err(|e| e.to_string()).and_then(|(value, used)| {
                Performative::from_value(&value).map(|p| (p, used)).map_err(|e| e.to_string())
            })
        });
        let (performative, used) = match decoded {
            Ok(decoded) => decoded,
            Err(why) => return self.close_with(ConnectionFault::new("amqp:decode-error", why), now),
        };
        let payload = body.slice(used..);
        match (&self.phase, performative) {
            (Phase::SaslInit, Performative::SaslInit { mechanism, initial_response, .. }) => {
                self.on_sasl_init(&mechanism, initial_response.unwrap_or_default(), now);
            }
            (
                Phase::ExpectOpen,
                Performative::Open {
                    container_id,
                    hostname,
                    max_frame_size,
                    channel_max,
                    idle_time_out_ms,
                    ..
                },
            ) => {
                self.on_open(
                    &container_id,
                    hostname.as_deref(),
                    max_frame_size,
                    channel_max,
                    idle_time_out_ms,
                    now,
                );
            }
            (Phase::Opened, Performative::Close { error }) => {
                if let Some(error) = error {
                    info!(conn = self.id.0, condition = %error.condition, description = ?error.description, "AMQP 1.0: the client closed with an error");
                }
                self.send(FrameKind::Amqp, 0, &Performative::Close { error: None }, &[], now);
                self.phase = Phase::Closed;
            }
            (Phase::Closing { .. }, Performative::Close { .. }) => self.phase = Phase::Closed,
            (Phase::Closing { .. }, _) => {}
            (Phase::Opened, performative) => {
                let mut io = self.io(now);
                let result = self.sessions.on_performative(&mut io, channel, performative, payload);
                self.finish_io(io);
                if let Err(fault) = result {
                    self.close_with(fault, now);
                }
            }
            (phase, performative) => {
                let fault = ConnectionFault::new(
                    "amqp:not-allowed",
                    format!("{} in {phase:?}", name_of(&performative)),
                );
                self.close_with(fault, now);
            }
        }
    }

    fn on_sasl_init(&mut self, mechanism: &str, response: bytes::Bytes, now: Timestamp) {
        let checked =
            sasl::login(&self.config, &self.peer, self.client_certificate.as_ref(), mechanism, response, now);
        match checked {
            Ok(login) => {
                self.send(FrameKind::Sasl, 0, &Performative::SaslOutcome { code: sasl::OK }, &[], now);
                self.login = Some(login);
                self.phase = Phase::AmqpHeader;
            }
            Err(refusal) => {
                warn!(conn = self.id.0, peer = %self.peer.addr, user = %refusal.username, mechanism, reason = %refusal.reason, "AMQP 1.0: login refused");
                self.send(FrameKind::Sasl, 0, &Performative::SaslOutcome { code: sasl::AUTH }, &[], now);
                if refusal.hold_ms == 0 {
                    self.phase = Phase::Closed;
                } else {
                    let held = std::mem::take(&mut self.out);
                    self.phase =
                        Phase::LoginRefused { answer_at: now.saturating_add_millis(refusal.hold_ms), held };
                }
            }
        }
    }

    fn on_open(
        &mut self,
        container_id: &str,
        hostname: Option<&str>,
        max_frame_size: u32,
        channel_max: u16,
        idle_time_out_ms: Option<u32>,
        now: Timestamp,
    ) {
        self.frame_out_max = max_frame_size.clamp(MIN_MAX_FRAME_SIZE, self.frame_in_max);
        // At most one empty frame per KEEPALIVE_MIN_MS, whatever time-out the peer names.
        self.send_every_ms =
            idle_time_out_ms.filter(|&ms| ms > 0).map(|ms| u64::from(ms / 2).max(KEEPALIVE_MIN_MS));
        // RabbitMQ 4: `vhost:NAME` picks the vhost, anything else the default one.
        let vhost = hostname.and_then(|h| h.strip_prefix("vhost:")).unwrap_or("/").to_owned();
        let Some(login) = self.login.clone() else { return self.close_silently(now) };
        let permissions = match sasl::admit(&self.config, &login.username, &vhost) {
            Ok((seat, permissions)) => {
                self.seat = Some(seat);
                permissions
            }
            Err(fault) => {
                warn!(conn = self.id.0, peer = %self.peer.addr, user = %login.username, vhost = %vhost, condition = fault.condition, reason = %fault.description, "AMQP 1.0: open refused");
                return self.close_silently(now);
            }
        };
        let ours = Performative::Open {
            container_id: self.config.cluster_name.clone(),
            hostname: None,
            max_frame_size: self.frame_in_max,
            channel_max: self.config.channel_max,
            // Part 2.4.5: half of the time-out we enforce.
            idle_time_out_ms: self.our_idle_ms.and_then(|ms| u32::try_from(ms / 2).ok()),
            properties: sasl::server_properties(&self.config),
        };
        self.send(FrameKind::Amqp, 0, &ours, &[], now);
        self.sessions.set_session_max(channel_max.min(self.config.channel_max));
        self.phase = Phase::Opened;
        self.opened = true;
        info!(conn = self.id.0, peer = %self.peer.addr, user = %login.username, vhost = %vhost, container_id, "AMQP 1.0 connection opened");
        let info = sasl::connection_info(
            &self.config,
            &self.peer,
            &login,
            vhost,
            permissions,
            container_id,
            sasl::Negotiated {
                frame_max: self.frame_in_max,
                channel_max: self.config.channel_max,
                idle_s: self.our_idle_ms.map_or(0, |ms| u16::try_from(ms / 1000).unwrap_or(u16::MAX)),
                over_tls: self.over_tls,
            },
        );
        self.commands.push_back(Command::ConnectionOpen { conn: self.id, info: Box::new(info) });
    }

    pub(crate) fn handle_effect(&mut self, effect: Effect, now: Timestamp) {
        if !matches!(self.phase, Phase::Opened) {
            return;
        }
        if let Effect::ConnectionError { error, .. } = &effect {
            let fault =
                ConnectionFault::new(links::condition_of(error.reply_code, true), error.reply_text.clone());
            return self.close_with(fault, now);
        }
        let mut io = self.io(now);
        self.sessions.on_effect(&mut io, effect);
        self.finish_io(io);
    }

    pub(crate) fn handle_timeout(&mut self, now: Timestamp) {
        match &self.phase {
            Phase::Closed => {}
            Phase::LoginRefused { answer_at, .. } => {
                if now >= *answer_at {
                    if let Phase::LoginRefused { held, .. } =
                        std::mem::replace(&mut self.phase, Phase::Closed)
                    {
                        self.out.extend_from_slice(&held);
                    }
                }
            }
            Phase::Closing { deadline } => {
                if now >= *deadline {
                    self.phase = Phase::Closed;
                }
            }
            Phase::Opened => {
                if self.our_idle_ms.is_some_and(|idle| since(now, self.last_received) >= idle) {
                    let fault =
                        ConnectionFault::new("amqp:resource-limit-exceeded", "local-idle-timeout expired");
                    return self.close_with(fault, now);
                }
                if self.send_every_ms.is_some_and(|every| since(now, self.last_sent) >= every) {
                    // An empty frame (part 2.4.5).
                    encode_frame_header(&mut self.out, FrameKind::Amqp, 0, 0);
                    self.last_sent = now;
                }
            }
            _ => {
                if since(now, self.connected_at) >= HANDSHAKE_TIMEOUT_MS {
                    warn!(conn = self.id.0, peer = %self.peer.addr, phase = ?self.phase, "AMQP 1.0: handshake timeout");
                    self.phase = Phase::Closed;
                }
            }
        }
    }

    pub(crate) fn next_deadline(&self) -> Option<Timestamp> {
        match &self.phase {
            Phase::Closed => None,
            Phase::LoginRefused { answer_at, .. } => Some(*answer_at),
            Phase::Closing { deadline } => Some(*deadline),
            Phase::Opened => {
                let idle = self.our_idle_ms.map(|ms| self.last_received.saturating_add_millis(ms));
                let send = self.send_every_ms.map(|ms| self.last_sent.saturating_add_millis(ms));
                idle.into_iter().chain(send).min()
            }
            _ => Some(self.connected_at.saturating_add_millis(HANDSHAKE_TIMEOUT_MS)),
        }
    }

    /// Graceful shutdown: a close with `amqp:connection:forced`.
    pub(crate) fn close_forced(&mut self, reason: &str, now: Timestamp) {
        match self.phase {
            Phase::Opened => {
                let detail = format!("broker forced connection closure with reason '{reason}'");
                self.close_with(ConnectionFault::new("amqp:connection:forced", detail), now);
            }
            Phase::Closing { .. } | Phase::Closed => {}
            _ => self.phase = Phase::Closed,
        }
    }

    pub(crate) fn handle_eof(&mut self) {
        if !matches!(self.phase, Phase::Closed | Phase::Closing { .. }) {
            info!(conn = self.id.0, peer = %self.peer.addr, "AMQP 1.0 client closed its TCP connection");
        }
        self.phase = Phase::Closed;
    }

    pub(crate) fn take_commands(&mut self) -> Vec<Command> {
        if self.commands.is_empty() {
            return Vec::new();
        }
        // The next batch starts at this one's size, not at nothing (no growth by copies).
        let next_capacity = self.commands.len();
        Vec::from(std::mem::replace(&mut self.commands, VecDeque::with_capacity(next_capacity)))
    }

    pub(crate) fn poll_command(&mut self) -> Option<Command> {
        self.commands.pop_front()
    }

    /// Everything encoded so far; the buffer keeps its spare capacity for the next frames
    /// unless it grew large, as the 0-9-1 output's does (`output.rs`).
    pub(crate) fn take_output(&mut self) -> BytesMut {
        if self.out.capacity() > crate::output::KEPT_CAPACITY_MAX {
            return std::mem::take(&mut self.out);
        }
        self.out.split()
    }

    pub(crate) fn is_closed(&self) -> bool {
        matches!(self.phase, Phase::Closed)
    }

    pub(crate) fn opened(&self) -> bool {
        self.opened
    }

    /// Messages whose transfers are not all in yet, and the bytes held for them.
    pub(crate) fn unfinished_content(&self) -> UnfinishedContent {
        let (messages, bytes) = self.sessions.unfinished();
        UnfinishedContent { messages, announced_bytes: bytes, received_bytes: bytes }
    }

    /// An open refused (no such vhost, access refused, a connection limit): as RabbitMQ 4's
    /// reader does for any error before the connection runs, nothing is sent and the socket
    /// closes after [`SILENT_CLOSE_DELAY_MS`]. Its clients then see a failed connect, not a
    /// closed connection they would recover by reconnecting again and again.
    fn close_silently(&mut self, now: Timestamp) {
        self.phase = Phase::Closing { deadline: now.saturating_add_millis(SILENT_CLOSE_DELAY_MS) };
    }

    /// Sends our close with `fault` and waits for the peer's.
    fn close_with(&mut self, fault: ConnectionFault, now: Timestamp) {
        if matches!(self.phase, Phase::Closing { .. } | Phase::Closed) {
            return;
        }
        warn!(conn = self.id.0, peer = %self.peer.addr, condition = fault.condition, description = %fault.description, "AMQP 1.0: closing the connection");
        if matches!(self.phase, Phase::SaslInit | Phase::SaslHeader | Phase::AmqpHeader) {
            // Before an AMQP open is possible there is nobody to tell.
            self.phase = Phase::Closed;
            return;
        }
        let error =
            ErrorCondition { condition: fault.condition.to_owned(), description: Some(fault.description) };
        self.send(FrameKind::Amqp, 0, &Performative::Close { error: Some(error) }, &[], now);
        self.phase = Phase::Closing { deadline: now.saturating_add_millis(CLOSE_TIMEOUT_MS) };
    }

    fn raw(&mut self, bytes: &[u8], now: Timestamp) {
        self.out.extend_from_slice(bytes);
        self.last_sent = now;
    }

    fn send(
        &mut self,
        kind: FrameKind,
        channel: u16,
        performative: &Performative,
        payload: &[u8],
        now: Timestamp,
    ) {
        write_frame(&mut self.out, kind, channel, performative, payload);
        self.last_sent = now;
    }

    fn io(&mut self, now: Timestamp) -> links::Io {
        links::Io {
            out: std::mem::take(&mut self.out),
            commands: std::mem::take(&mut self.commands),
            frame_max: self.frame_out_max,
            max_message_size: self.config.max_message_size,
            now,
            accepted_run: self.accepted_run.take(),
        }
    }

    fn finish_io(&mut self, io: links::Io) {
        if !io.out.is_empty() {
            self.last_sent = io.now;
        }
        self.out = io.out;
        self.commands = io.commands;
        self.accepted_run = io.accepted_run;
    }
}

/// Milliseconds from `then` to `now` (0 if the clock went back).
fn since(now: Timestamp, then: Timestamp) -> u64 {
    now.as_millis().saturating_sub(then.as_millis())
}

/// Appends one frame: header, performative, payload.
pub(crate) fn write_frame(
    out: &mut BytesMut,
    kind: FrameKind,
    channel: u16,
    performative: &Performative,
    payload: &[u8],
) {
    // Encoded in place; the header's size is written once the frame's length is known.
    let start = out.len();
    encode_frame_header(out, kind, channel, 0);
    encode_value(&performative.to_value(), out);
    out.extend_from_slice(payload);
    let size = u32::try_from(out.len() - start).unwrap_or(u32::MAX);
    out[start..start + 4].copy_from_slice(&size.to_be_bytes());
}

fn name_of(performative: &Performative) -> &'static str {
    match performative {
        Performative::Open { .. } => "open",
        Performative::Begin { .. } => "begin",
        Performative::Attach { .. } => "attach",
        Performative::Flow { .. } => "flow",
        Performative::Transfer { .. } => "transfer",
        Performative::Disposition { .. } => "disposition",
        Performative::Detach { .. } => "detach",
        Performative::End { .. } => "end",
        Performative::Close { .. } => "close",
        Performative::SaslMechanisms { .. } => "sasl-mechanisms",
        Performative::SaslInit { .. } => "sasl-init",
        Performative::SaslOutcome { .. } => "sasl-outcome",
    }
}

/// A 0-9-1 error as an AMQP 1.0 error condition.
pub(crate) fn error_condition(error: &AmqpError) -> ErrorCondition {
    ErrorCondition {
        condition: links::condition_of(error.reply_code, false).to_owned(),
        description: Some(error.reply_text.clone()),
    }
}

#[cfg(test)]
mod tests;
