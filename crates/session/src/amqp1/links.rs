//! AMQP 1.0 sessions and links (part 2.5–2.7), each link carried by a 0-9-1 channel of its own
//! into the broker, so that 1.0 enters through the same door as 0-9-1 and gets every broker
//! feature (routing, permissions, TTL, delays, dead-lettering) unchanged:
//!
//! - a link the client **sends** on (a target address): channel.open, a passive declare of the
//!   queue or exchange it names, confirm.select; each transfer a basic.publish; the broker's
//!   basic.ack / basic.nack settle it `accepted` / `rejected`. Credit is granted in steps of
//!   [`CREDIT`] and only while fewer than that are unconfirmed, so a publisher cannot outrun the
//!   broker;
//! - a link the client **receives** on (a `/queues/` source): basic.consume once it grants
//!   credit, with basic.qos at the largest credit it granted (so the broker never pushes more than
//!   the link may carry); each delivery a transfer while the link has credit and the session a
//!   window; the client's outcomes become basic.ack (`accepted`), basic.reject without requeue
//!   (`rejected`, `modified` with `undeliverable-here`: dead-lettered), basic.reject with requeue
//!   (`modified` with `delivery-failed`: a failed delivery) and basic.nack with requeue
//!   (`released`, other `modified`: handed back), as RabbitMQ 4.3's delayed retry counts them. A
//!   pre-settled link is acked as each transfer goes out.
//!
//! A broker error on a link's channel (a queue that does not exist, a refused permission)
//! detaches that link with the matching error condition; the session and connection go on.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
// Keys are ours (channels, delivery ids) or bounded by what was negotiated (sessions, handles).
use hourglass_broker::{
    Answer, ChannelId, Command, ConnectionId, Effect, Message, Modification, Publish, Query, Timestamp,
};
use hourglass_wire::amqp1::{
    encode_accepted_disposition, encode_value, ErrorCondition, FrameKind, Performative, Value,
};
use hourglass_wire::{
    BasicAck, BasicCancel, BasicConsume, BasicNack, BasicProperties, BasicQos, BasicReject, ChannelClose,
    ChannelOpen, ConfirmSelect, EncodedProperties, ExchangeDeclare, FieldTable, Method, QueueDeclare,
    ShortStr,
};
use rustc_hash::{FxHashMap, FxHashSet};

use super::address::{self, Destination};
use super::management;
use super::message;

mod node;
use super::{error_condition, write_frame, ConnectionFault};

/// Credit a sending link is granted, at most, and the most of its messages left unconfirmed.
pub(crate) const CREDIT: u32 = 256;
/// Our incoming window (transfer frames a session may send before we say more).
const WINDOW: u32 = 4096;
/// The highest link handle a session may use (handle-max).
const HANDLE_MAX: u32 = 255;
/// The most deliveries one disposition may settle at once (its first..last range).
const DISPOSITION_RANGE_MAX: u32 = 65_536;

/// Outcome descriptors (part 3.4).
const ACCEPTED: u64 = 0x24;
const REJECTED: u64 = 0x25;
const RELEASED: u64 = 0x26;
const MODIFIED: u64 = 0x27;
const ERROR: u64 = 0x1d;

/// What a call works on: the connection's output and commands, moved in and back out.
#[derive(Debug)]
pub(crate) struct Io {
    pub out: BytesMut,
    pub commands: VecDeque<Command>,
    /// The largest frame we may send.
    pub frame_max: u32,
    pub max_message_size: u64,
    pub now: Timestamp,
    /// The `accepted` disposition written last, which the next confirm of the following
    /// delivery extends while it is still the last frame in `out`.
    pub accepted_run: Option<AcceptedRun>,
}

/// A disposition settling deliveries `first..=last` of `session` as accepted, written at `at`
/// in the output as the octets `frame`. A confirm of delivery `last + 1` rewrites it to cover
/// that one too, when those octets are still what ends the output: one frame for a run of
/// confirms, as the 0-9-1 output turns consecutive basic.acks into one `multiple` ack.
#[derive(Debug, Default)]
pub(crate) struct AcceptedRun {
    session: u16,
    first: u32,
    last: u32,
    at: usize,
    frame: Vec<u8>,
}

impl AcceptedRun {
    /// Whether delivery `id` of `session` extends this run, which still ends `out`.
    fn extended_by(&self, session: u16, id: u32, out: &[u8]) -> bool {
        self.session == session
            && self.last.wrapping_add(1) == id
            && out.len() == self.at + self.frame.len()
            && out[self.at..] == self.frame[..]
    }
}

/// Settles delivery `id` of `session` as accepted, in one disposition with the ones accepted
/// just before it when it follows them.
fn accept(io: &mut Io, session: u16, id: u32) {
    let mut run = io.accepted_run.take().unwrap_or_default();
    if run.extended_by(session, id, &io.out) {
        io.out.truncate(run.at);
    } else {
        run.session = session;
        run.first = id;
        run.at = io.out.len();
    }
    run.last = id;
    encode_accepted_disposition(&mut io.out, session, run.first, id);
    run.frame.clear();
    run.frame.extend_from_slice(&io.out[run.at..]);
    io.accepted_run = Some(run);
}

/// A 0-9-1 reply code as an AMQP 1.0 error condition.
pub(crate) fn condition_of(reply_code: u16, connection: bool) -> &'static str {
    match reply_code {
        404 => "amqp:not-found",
        403 => "amqp:unauthorized-access",
        406 => "amqp:precondition-failed",
        405 => "amqp:resource-locked",
        320 if connection => "amqp:connection:forced",
        506 => "amqp:resource-limit-exceeded",
        530 => "amqp:not-allowed",
        540 => "amqp:not-implemented",
        _ => "amqp:internal-error",
    }
}

#[derive(Debug)]
pub(crate) struct Sessions {
    conn: ConnectionId,
    /// By channel number (the peer's, which we answer on too).
    sessions: FxHashMap<u16, Session>,
    /// Sessions we ended with an error, whose end from the peer is still to come.
    ending: FxHashSet<u16>,
    session_max: u16,
    /// The 0-9-1 channels links run on.
    channels: ChannelNumbers,
    by_channel: FxHashMap<u16, (u16, u32)>,
    /// Management requests in the broker, by the channel each runs on.
    requests: FxHashMap<u16, node::InFlight>,
    /// This node's name, which management answers name as a queue's leader.
    node_name: Arc<str>,
}

#[derive(Debug)]
struct Session {
    /// The id of our next transfer frame, and how many more the peer takes.
    next_outgoing_id: u32,
    remote_incoming_window: u32,
    next_incoming_id: u32,
    incoming_window: u32,
    next_delivery_id: u32,
    links: FxHashMap<u32, Link>,
    /// Our deliveries the client has not settled: delivery id → (handle, 0-9-1 delivery tag).
    unsettled: FxHashMap<u32, (u32, u64)>,
    /// Handles we detached (an error), whose detach from the client is still to come: not
    /// answered again, and not free until it comes.
    detached: FxHashSet<u32>,
}

#[derive(Debug)]
enum Link {
    Publishing(Publishing),
    Consuming(Consuming),
    /// The client's requests to the `/management` node (`links/node.rs`).
    Requests(node::Requests),
    /// The node's replies to the client.
    Replies(node::Replies),
}

impl Link {
    /// The 0-9-1 channel the link runs on (the management node's links have none: each
    /// request gets its own).
    fn channel(&self) -> Option<u16> {
        match self {
            Link::Publishing(link) => Some(link.channel),
            Link::Consuming(link) => Some(link.channel),
            Link::Requests(_) | Link::Replies(_) => None,
        }
    }
}

/// A link the client sends on.
#[derive(Debug)]
struct Publishing {
    channel: u16,
    /// The exchange and routing key of the link's target; `None`: a null target, each message
    /// names its destination in `to`.
    route: Option<Route>,
    /// The last message's properties and their encoding: a publisher mostly sends the same ones,
    /// and they are then encoded once.
    last_properties: Option<Box<(BasicProperties, EncodedProperties)>>,
    delivery_count: u32,
    credit: u32,
    /// Publishes sent to the broker (the 0-9-1 confirm sequence).
    published: u64,
    /// Confirm sequence → (delivery id, settled by the client already).
    unconfirmed: BTreeMap<u64, (u32, bool)>,
    /// The broker returned the last publish as unroutable (`basic.return`, which it sends just
    /// before that publish's ack): the ack settles it `released`, as RabbitMQ 4 does.
    returned: bool,
    /// A message whose transfers are not all in.
    partial: Option<Partial>,
}

#[derive(Debug)]
struct Partial {
    delivery_id: u32,
    settled: bool,
    payload: BytesMut,
}

/// A link the client receives on.
#[derive(Debug)]
struct Consuming {
    channel: u16,
    queue: String,
    /// The client settles nothing: each transfer goes out settled and is acked at once.
    presettled: bool,
    delivery_count: u32,
    credit: u32,
    drain: bool,
    /// The consumer's prefetch so far; 0: basic.consume not sent yet.
    prefetch: u16,
    /// Transfers sent that the client has not settled: they hold the broker's prefetch, not the
    /// link's credit, so the prefetch follows credit + unsettled (RabbitMQ 4 bounds a link by
    /// its credit alone).
    unsettled: u32,
    waiting: VecDeque<Waiting>,
    /// Direct reply-to (RabbitMQ 4.2's volatile queue): the link consumes the channel's replies,
    /// no-ack, and drops what comes past its credit.
    volatile: Option<Volatile>,
}

impl Consuming {
    /// A link on `channel` consuming `queue`, with no credit yet and no basic.consume sent.
    fn new(channel: u16, queue: String, presettled: bool) -> Self {
        Consuming {
            channel,
            queue,
            presettled,
            delivery_count: 0,
            credit: 0,
            drain: false,
            prefetch: 0,
            unsettled: 0,
            waiting: VecDeque::new(),
            volatile: None,
        }
    }
}

/// A link attached to a dynamic `rabbitmq:volatile-queue` source.
#[derive(Debug)]
struct Volatile {
    /// The client's attach, answered once the broker names the reply address.
    attach: Option<Box<Attach>>,
}

#[derive(Debug)]
struct Waiting {
    tag: u64,
    redelivered: bool,
    exchange: ShortStr,
    routing_key: ShortStr,
    message: Arc<Message>,
}

/// Free 0-9-1 channel numbers, lowest first.
#[derive(Debug)]
struct ChannelNumbers {
    next: u32,
    max: u32,
    free: Vec<u16>,
}

impl ChannelNumbers {
    fn take(&mut self) -> Option<u16> {
        if let Some(channel) = self.free.pop() {
            return Some(channel);
        }
        if self.next > self.max {
            return None;
        }
        let channel = u16::try_from(self.next).ok()?;
        self.next += 1;
        Some(channel)
    }

    fn give_back(&mut self, channel: u16) {
        self.free.push(channel);
    }
}

/// The outcome a disposition carries.
#[derive(Debug, Clone, PartialEq)]
enum Outcome {
    Accepted,
    Rejected,
    /// Back to the queue; `failed`: the delivery failed (`modified` with `delivery-failed`,
    /// 0-9-1's reject), else it was handed back (`released`, 0-9-1's nack). RabbitMQ 4.3's
    /// delayed retry and delivery counting tell the two apart.
    Requeue {
        failed: bool,
    },
    /// A `modified` outcome with message annotations to merge or an `x-opt-delivery-time`
    /// (RabbitMQ 4.0, 4.3): `Command::Modify`.
    Modified(Box<Modified>),
}

/// What a `modified` outcome asks beyond a plain requeue or reject.
#[derive(Debug, Clone, PartialEq)]
struct Modified {
    failed: bool,
    undeliverable_here: bool,
    /// Not to be delivered again before this time (ms since the epoch).
    at_ms: Option<u64>,
    annotations: FieldTable,
}

fn described(code: u64, fields: Vec<Value>) -> Value {
    Value::Described(Box::new(Value::Ulong(code)), Box::new(Value::List(fields)))
}

fn error_value(error: &ErrorCondition) -> Value {
    described(
        ERROR,
        vec![
            Value::Symbol(error.condition.clone()),
            error.description.clone().map_or(Value::Null, Value::String),
        ],
    )
}

/// The outcome `state` names (`None`: none the spec defines), or why its fields are refused.
fn outcome_of(state: &Value) -> Result<Option<Outcome>, String> {
    let Value::Described(descriptor, fields) = state else { return Ok(None) };
    let fields = match fields.as_ref() {
        Value::List(fields) => fields.as_slice(),
        _ => &[],
    };
    Ok(match descriptor.as_ref() {
        Value::Ulong(ACCEPTED) => Some(Outcome::Accepted),
        Value::Ulong(REJECTED) => Some(Outcome::Rejected),
        Value::Ulong(RELEASED) => Some(Outcome::Requeue { failed: false }),
        Value::Ulong(MODIFIED) => {
            let undeliverable_here = matches!(fields.get(1), Some(Value::Bool(true)));
            let failed = matches!(fields.first(), Some(Value::Bool(true)));
            // Dead-lettered: there is no time to be delivered again at; the annotation is kept.
            let at_ms = delivery_time_of(fields.get(2)).filter(|_| !undeliverable_here);
            let annotations = message::modified_annotations(fields.get(2), at_ms.is_some())?;
            Some(match (undeliverable_here, at_ms, annotations.is_empty()) {
                (true, _, true) => Outcome::Rejected,
                (false, None, true) => Outcome::Requeue { failed },
                _ => Outcome::Modified(Box::new(Modified { failed, undeliverable_here, at_ms, annotations })),
            })
        }
        _ => None,
    })
}

/// The `x-opt-delivery-time` of a `modified` outcome's message annotations (a timestamp, or an
/// integer of milliseconds since the epoch, as RabbitMQ reads it), if they name one.
fn delivery_time_of(annotations: Option<&Value>) -> Option<u64> {
    let Some(Value::Map(pairs)) = annotations else { return None };
    // Keys are symbols by the spec; proton sends a Python dict's as strings, which RabbitMQ reads too.
    let named =
        |key: &Value| matches!(key, Value::Symbol(k) | Value::String(k) if k == "x-opt-delivery-time");
    let (_, value) = pairs.iter().find(|(key, _)| named(key))?;
    match *value {
        Value::Timestamp(ms) | Value::Long(ms) => u64::try_from(ms).ok(),
        Value::Ulong(ms) => Some(ms),
        Value::Uint(ms) => Some(u64::from(ms)),
        Value::Int(ms) => u64::try_from(ms).ok(),
        _ => None,
    }
}

impl Outcome {
    /// What the broker is told of delivery `tag` on `channel` settled with this outcome.
    fn command(&self, conn: ConnectionId, channel: ChannelId, tag: u64) -> Command {
        let method: Method = match self {
            Outcome::Accepted => BasicAck { delivery_tag: tag, multiple: false }.into(),
            Outcome::Rejected => BasicReject { delivery_tag: tag, requeue: false }.into(),
            Outcome::Requeue { failed: true } => BasicReject { delivery_tag: tag, requeue: true }.into(),
            Outcome::Requeue { failed: false } => {
                BasicNack { delivery_tag: tag, multiple: false, requeue: true }.into()
            }
            Outcome::Modified(modified) => {
                return Command::Modify(Box::new(Modification {
                    conn,
                    channel,
                    delivery_tag: tag,
                    failed: modified.failed,
                    undeliverable_here: modified.undeliverable_here,
                    ready_at: modified.at_ms.map(Timestamp::from_millis),
                    annotations: modified.annotations.clone(),
                }));
            }
        };
        Command::Method { conn, channel, method }
    }
}

/// The pseudo-queue a reply consumer consumes (0-9-1's direct reply-to).
const DIRECT_REPLY_QUEUE: &str = "amq.rabbitmq.reply-to";
/// The source capability asking for direct reply-to (RabbitMQ 4.2).
const VOLATILE_QUEUE: &str = "rabbitmq:volatile-queue";

/// A source asking for direct reply-to: `dynamic` and the `rabbitmq:volatile-queue` capability
/// (its fields 4 and 10, part 3.5.3).
fn is_volatile_source(source: &Value) -> bool {
    let Value::Described(_, fields) = source else { return false };
    let Value::List(fields) = fields.as_ref() else { return false };
    let dynamic = matches!(fields.get(4), Some(Value::Bool(true)));
    let is_volatile = |v: &Value| matches!(v, Value::Symbol(s) | Value::String(s) if s == VOLATILE_QUEUE);
    let capable = match fields.get(10) {
        Some(Value::Array(capabilities) | Value::List(capabilities)) => capabilities.iter().any(is_volatile),
        Some(capability) => is_volatile(capability),
        None => false,
    };
    dynamic && capable
}

/// The address field (the first) of a source or target.
fn address_of(terminus: &Value) -> Option<String> {
    let Value::Described(_, fields) = terminus else { return None };
    match fields.as_ref() {
        Value::List(fields) => match fields.first() {
            Some(Value::String(address) | Value::Symbol(address)) => Some(address.clone()),
            _ => None,
        },
        _ => None,
    }
}

impl Sessions {
    pub(crate) fn new(conn: ConnectionId, channel_max: u16, node_name: Arc<str>) -> Self {
        Sessions {
            conn,
            sessions: FxHashMap::default(),
            ending: FxHashSet::default(),
            session_max: 0,
            channels: ChannelNumbers { next: 1, max: u32::from(channel_max.max(1)), free: Vec::new() },
            by_channel: FxHashMap::default(),
            requests: FxHashMap::default(),
            node_name,
        }
    }

    pub(crate) fn set_session_max(&mut self, session_max: u16) {
        self.session_max = session_max;
    }

    /// Messages whose transfers are not all in, and their bytes so far.
    pub(crate) fn unfinished(&self) -> (u64, u64) {
        let mut totals = (0, 0);
        for link in self.sessions.values().flat_map(|s| s.links.values()) {
            let partial = match link {
                Link::Publishing(Publishing { partial, .. })
                | Link::Requests(node::Requests { partial, .. }) => partial,
                _ => &None,
            };
            if let Some(partial) = partial {
                totals.0 += 1;
                totals.1 += partial.payload.len() as u64;
            }
        }
        totals
    }

    /// A performative of an open connection, on `channel`.
    pub(crate) fn on_performative(
        &mut self,
        io: &mut Io,
        channel: u16,
        performative: Performative,
        payload: Bytes,
    ) -> Result<(), ConnectionFault> {
        if let Performative::Begin { remote_channel, next_outgoing_id, incoming_window, .. } = performative {
            return self.begin(io, channel, remote_channel, next_outgoing_id, incoming_window);
        }
        if self.ending.contains(&channel) {
            if matches!(performative, Performative::End { .. }) {
                self.ending.remove(&channel);
            }
            return Ok(());
        }
        if !self.sessions.contains_key(&channel) {
            return Err(ConnectionFault::new("amqp:not-found", format!("no session on channel {channel}")));
        }
        match performative {
            Performative::Attach {
                name,
                handle,
                receiver,
                snd_settle_mode,
                source,
                target,
                initial_delivery_count,
                ..
            } => {
                let attach = Attach { name, handle, snd_settle_mode, source, target, initial_delivery_count };
                if receiver {
                    self.attach_consuming(io, channel, attach);
                } else {
                    self.attach_publishing(io, channel, attach);
                }
            }
            Performative::Flow {
                next_incoming_id,
                incoming_window,
                handle,
                delivery_count,
                link_credit,
                drain,
                echo,
                ..
            } => {
                let flow = LinkFlow { delivery_count, link_credit, drain, echo };
                self.flow(io, channel, next_incoming_id, incoming_window, handle.map(|h| (h, flow)));
            }
            Performative::Transfer { handle, delivery_id, settled, more, aborted, .. } => {
                let transfer =
                    Transfer { handle, delivery_id, settled: settled.unwrap_or(false), more, aborted };
                self.transfer(io, channel, transfer, payload);
            }
            Performative::Disposition { receiver, first, last, settled, state } => {
                if receiver {
                    self.disposition(io, channel, first, last.unwrap_or(first), settled, &state);
                }
            }
            Performative::Detach { handle, closed, .. } => {
                let ours_first = self.sessions.get_mut(&channel).is_some_and(|s| s.detached.remove(&handle));
                if !ours_first {
                    self.close_link(io, channel, handle);
                    let reply = Performative::Detach { handle, closed, error: None };
                    write_frame(&mut io.out, FrameKind::Amqp, channel, &reply, &[]);
                }
            }
            Performative::End { .. } => {
                self.end_session(io, channel);
                write_frame(&mut io.out, FrameKind::Amqp, channel, &Performative::End { error: None }, &[]);
            }
            other => {
                return Err(ConnectionFault::new(
                    "amqp:not-allowed",
                    format!("{other:?} on an open connection"),
                ));
            }
        }
        Ok(())
    }

    fn begin(
        &mut self,
        io: &mut Io,
        channel: u16,
        remote_channel: Option<u16>,
        next_outgoing_id: u32,
        incoming_window: u32,
    ) -> Result<(), ConnectionFault> {
        if remote_channel.is_some() {
            return Err(ConnectionFault::new("amqp:not-allowed", "a begin answering one we never sent"));
        }
        if channel > self.session_max {
            return Err(ConnectionFault::new(
                "amqp:connection:framing-error",
                format!("channel {channel} is over the negotiated channel-max {}", self.session_max),
            ));
        }
        if self.sessions.contains_key(&channel) || self.ending.contains(&channel) {
            return Err(ConnectionFault::new(
                "amqp:not-allowed",
                format!("channel {channel} already has a session"),
            ));
        }
        self.sessions.insert(
            channel,
            Session {
                next_outgoing_id: 0,
                remote_incoming_window: incoming_window,
                next_incoming_id: next_outgoing_id,
                incoming_window: WINDOW,
                next_delivery_id: 0,
                links: FxHashMap::default(),
                unsettled: FxHashMap::default(),
                detached: FxHashSet::default(),
            },
        );
        let reply = Performative::Begin {
            remote_channel: Some(channel),
            next_outgoing_id: 0,
            incoming_window: WINDOW,
            outgoing_window: u32::MAX,
            handle_max: HANDLE_MAX,
        };
        write_frame(&mut io.out, FrameKind::Amqp, channel, &reply, &[]);
        Ok(())
    }

    /// Takes a handle for a new link, or ends the session when it cannot be used.
    fn claim_handle(&mut self, io: &mut Io, session: u16, handle: u32) -> bool {
        let in_use = self
            .sessions
            .get(&session)
            .is_some_and(|s| s.links.contains_key(&handle) || s.detached.contains(&handle));
        if handle > HANDLE_MAX || in_use {
            let condition =
                if in_use { "amqp:session:handle-in-use" } else { "amqp:session:handle-max-exceeded" };
            self.end_with_error(io, session, condition, format!("link handle {handle}"));
            return false;
        }
        true
    }

    fn attach_publishing(&mut self, io: &mut Io, session: u16, attach: Attach) {
        if !self.claim_handle(io, session, attach.handle) {
            return;
        }
        self.reply_attach(io, session, &attach, true);
        if address_of(&attach.target).as_deref() == Some(management::NODE) {
            return self.attach_requests(io, session, &attach);
        }
        let destination = match address_of(&attach.target).map(|a| address::target(&a)) {
            None => Ok(None),
            Some(Ok(destination)) => Ok(Some(destination)),
            Some(Err(error)) => Err(error),
        };
        let destination = match destination {
            Ok(destination) => destination,
            Err(error) => {
                let condition = match error {
                    address::AddressError::DefaultExchange => "amqp:unauthorized-access",
                    address::AddressError::Invalid(_) => "amqp:invalid-field",
                };
                return self.detach_with_error(io, session, attach.handle, condition, error.to_string());
            }
        };
        let Some(channel) = self.channels.take() else {
            return self.detach_too_many_links(io, session, attach.handle);
        };
        self.open_channel(io, channel);
        if let Some(destination) = &destination {
            let check = match &destination.queue {
                Some(queue) => passive_queue(queue),
                None => passive_exchange(&destination.exchange),
            };
            self.method(io, channel, check);
        }
        self.method(io, channel, ConfirmSelect { nowait: false }.into());
        let delivery_count = attach.initial_delivery_count.unwrap_or(0);
        let link = Publishing {
            channel,
            route: destination.as_ref().map(Route::of),
            last_properties: None,
            delivery_count,
            credit: CREDIT,
            published: 0,
            unconfirmed: BTreeMap::new(),
            returned: false,
            partial: None,
        };
        self.by_channel.insert(channel, (session, attach.handle));
        if let Some(s) = self.sessions.get_mut(&session) {
            s.links.insert(attach.handle, Link::Publishing(link));
        }
        self.send_link_flow(io, session, attach.handle, false);
    }

    fn attach_consuming(&mut self, io: &mut Io, session: u16, attach: Attach) {
        if !self.claim_handle(io, session, attach.handle) {
            return;
        }
        if is_volatile_source(&attach.source) {
            return self.attach_volatile(io, session, attach);
        }
        self.reply_attach(io, session, &attach, false);
        if address_of(&attach.source).as_deref() == Some(management::NODE) {
            return self.attach_replies(session, &attach);
        }
        let queue = match address_of(&attach.source).map(|a| address::source(&a)) {
            Some(Ok(queue)) => queue,
            Some(Err(error)) => {
                return self.detach_with_error(
                    io,
                    session,
                    attach.handle,
                    "amqp:invalid-field",
                    error.to_string(),
                )
            }
            None => {
                return self.detach_with_error(
                    io,
                    session,
                    attach.handle,
                    "amqp:invalid-field",
                    "a source needs an address",
                )
            }
        };
        let Some(channel) = self.channels.take() else {
            return self.detach_too_many_links(io, session, attach.handle);
        };
        self.open_channel(io, channel);
        let link = Consuming::new(channel, queue, attach.snd_settle_mode == 1);
        self.by_channel.insert(channel, (session, attach.handle));
        if let Some(s) = self.sessions.get_mut(&session) {
            s.links.insert(attach.handle, Link::Consuming(link));
        }
    }

    /// A receiving link on a dynamic `rabbitmq:volatile-queue` source: direct reply-to, as
    /// RabbitMQ 4.2 serves it. Its channel consumes `amq.rabbitmq.reply-to` (no-ack: replies go
    /// out settled), and the attach is answered once the broker names the reply address
    /// (`volatile_attached`).
    fn attach_volatile(&mut self, io: &mut Io, session: u16, attach: Attach) {
        let Some(channel) = self.channels.take() else {
            self.reply_attach(io, session, &Attach { source: Value::Null, ..attach.clone() }, false);
            return self.detach_too_many_links(io, session, attach.handle);
        };
        let handle = attach.handle;
        self.open_channel(io, channel);
        let consume = BasicConsume {
            queue: ShortStr::from_static(DIRECT_REPLY_QUEUE),
            consumer_tag: consumer_tag(session, handle),
            no_ack: true,
            ..BasicConsume::default()
        };
        self.method(io, channel, consume.into());
        let conn = self.conn;
        io.commands.push_back(Command::Query {
            conn,
            channel: ChannelId(channel),
            query: Query::ReplyAddress,
        });
        let link = Consuming {
            // Consuming already: credit changes no prefetch (the broker holds no reply back).
            prefetch: u16::MAX,
            volatile: Some(Volatile { attach: Some(Box::new(attach)) }),
            ..Consuming::new(channel, DIRECT_REPLY_QUEUE.to_owned(), true)
        };
        self.by_channel.insert(channel, (session, handle));
        if let Some(s) = self.sessions.get_mut(&session) {
            s.links.insert(handle, Link::Consuming(link));
        }
    }

    /// The broker named the reply address of a volatile link's channel: its attach is answered
    /// with `/queues/<address>` as the source's address, settled, as RabbitMQ 4.2 answers.
    fn volatile_attached(&mut self, io: &mut Io, channel: u16, address: &ShortStr) {
        let Some(&(session, handle)) = self.by_channel.get(&channel) else { return };
        let Some(Link::Consuming(Consuming { volatile: Some(volatile), .. })) =
            self.link_mut(session, handle)
        else {
            return;
        };
        let Some(attach) = volatile.attach.take() else { return };
        let mut source = attach.source.clone();
        if let Value::Described(_, fields) = &mut source {
            if let Value::List(fields) = fields.as_mut() {
                let queue = Value::String(address::queue_address(&address.as_str()));
                match fields.first_mut() {
                    Some(first) => *first = queue,
                    None => fields.push(queue),
                }
            }
        }
        let attached = Attach { source, snd_settle_mode: 1, ..*attach };
        self.reply_attach(io, session, &attached, false);
    }

    /// Detaches a link for which no channel is left: the connection's links are at its
    /// channel limit.
    fn detach_too_many_links(&mut self, io: &mut Io, session: u16, handle: u32) {
        self.detach_with_error(io, session, handle, "amqp:resource-limit-exceeded", "too many links");
    }

    /// Our attach: the other role, the client's terminus echoed; a link we send on starts its
    /// delivery count at 0.
    fn reply_attach(&self, io: &mut Io, session: u16, attach: &Attach, we_receive: bool) {
        let reply = Performative::Attach {
            name: attach.name.clone(),
            handle: attach.handle,
            receiver: we_receive,
            snd_settle_mode: attach.snd_settle_mode,
            rcv_settle_mode: 0,
            source: attach.source.clone(),
            target: attach.target.clone(),
            initial_delivery_count: (!we_receive).then_some(0),
        };
        write_frame(&mut io.out, FrameKind::Amqp, session, &reply, &[]);
    }

    fn flow(
        &mut self,
        io: &mut Io,
        session: u16,
        next_incoming_id: Option<u32>,
        incoming_window: u32,
        link: Option<(u32, LinkFlow)>,
    ) {
        let Some(s) = self.sessions.get_mut(&session) else { return };
        // Part 2.5.6: the peer's window, counted from our next transfer.
        let their_next = next_incoming_id.unwrap_or(0);
        s.remote_incoming_window = their_next.wrapping_add(incoming_window).wrapping_sub(s.next_outgoing_id);
        if let Some((handle, flow)) = link {
            let mut consume = None;
            let mut echo = flow.echo;
            match s.links.get_mut(&handle) {
                Some(Link::Consuming(link)) => {
                    let their_count = flow.delivery_count.unwrap_or(0);
                    let credit = flow.link_credit.unwrap_or(0);
                    link.credit = their_count.wrapping_add(credit).wrapping_sub(link.delivery_count);
                    link.drain = flow.drain;
                    // What the broker may push: the credit, plus what the client holds unsettled
                    // and what waits here (never 0, which 0-9-1 reads as no limit).
                    let held = u64::from(link.unsettled) + link.waiting.len() as u64;
                    let wanted = u16::try_from(held + u64::from(link.credit)).unwrap_or(u16::MAX).max(1);
                    let first = link.prefetch == 0;
                    let changed = wanted > link.prefetch || u32::from(wanted) * 2 < u32::from(link.prefetch);
                    if link.volatile.is_none() && ((first && link.credit > 0) || (!first && changed)) {
                        consume = Some((link.channel, link.queue.clone(), first, wanted));
                        link.prefetch = wanted;
                    }
                    echo |= link.drain;
                }
                Some(Link::Replies(link)) => {
                    let their_count = flow.delivery_count.unwrap_or(0);
                    let credit = flow.link_credit.unwrap_or(0);
                    link.credit = their_count.wrapping_add(credit).wrapping_sub(link.delivery_count);
                }
                Some(Link::Publishing(_) | Link::Requests(_)) => {}
                None => echo = false,
            }
            if let Some((channel, queue, first, prefetch)) = consume {
                if first {
                    let qos = BasicQos { prefetch_size: 0, prefetch_count: prefetch, global: false };
                    self.method(io, channel, qos.into());
                    let consume = BasicConsume {
                        queue: ShortStr::try_from(queue.as_str()).unwrap_or_default(),
                        consumer_tag: consumer_tag(session, handle),
                        ..BasicConsume::default()
                    };
                    self.method(io, channel, consume.into());
                } else {
                    // A per-consumer basic.qos would not reach a consumer that exists already.
                    let consumer_tag = consumer_tag(session, handle);
                    let conn = self.conn;
                    let command = Command::ConsumerPrefetch {
                        conn,
                        channel: ChannelId(channel),
                        consumer_tag,
                        prefetch,
                    };
                    io.commands.push_back(command);
                }
            }
            self.pump(io, session, handle);
            if let Some(Link::Consuming(link)) = self.link_mut(session, handle) {
                if link.drain && link.credit > 0 && link.waiting.is_empty() {
                    // Drain (part 2.6.7): what credit is left is used up.
                    link.delivery_count = link.delivery_count.wrapping_add(link.credit);
                    link.credit = 0;
                }
            }
            if echo {
                self.send_link_flow(io, session, handle, flow.drain);
            }
        }
        let handles: Vec<u32> =
            self.sessions.get(&session).map(|s| s.links.keys().copied().collect()).unwrap_or_default();
        for handle in handles {
            self.pump(io, session, handle);
        }
    }

    fn link_mut(&mut self, session: u16, handle: u32) -> Option<&mut Link> {
        self.sessions.get_mut(&session)?.links.get_mut(&handle)
    }

    fn send_link_flow(&mut self, io: &mut Io, session: u16, handle: u32, drain: bool) {
        let Some(s) = self.sessions.get(&session) else { return };
        let (delivery_count, credit) = match s.links.get(&handle) {
            Some(Link::Consuming(link)) => (link.delivery_count, link.credit),
            Some(Link::Publishing(link)) => (link.delivery_count, link.credit),
            Some(Link::Requests(link)) => (link.delivery_count, link.credit),
            Some(Link::Replies(link)) => (link.delivery_count, link.credit),
            None => return,
        };
        let flow = Performative::Flow {
            next_incoming_id: Some(s.next_incoming_id),
            incoming_window: s.incoming_window,
            next_outgoing_id: s.next_outgoing_id,
            outgoing_window: u32::MAX,
            handle: Some(handle),
            delivery_count: Some(delivery_count),
            link_credit: Some(credit),
            drain,
            echo: false,
        };
        write_frame(&mut io.out, FrameKind::Amqp, session, &flow, &[]);
    }

    fn transfer(&mut self, io: &mut Io, session: u16, transfer: Transfer, payload: Bytes) {
        self.count_incoming(io, session);
        let Some((delivery_id, settled, payload)) = self.assemble(io, session, &transfer, payload) else {
            return;
        };
        let handle = transfer.handle;
        match self.link_mut(session, handle) {
            Some(Link::Requests(_)) => self.management_request(io, session, handle, &payload),
            Some(Link::Publishing(_)) => self.publish(io, session, handle, delivery_id, settled, &payload),
            _ => {}
        }
    }

    /// Counts a transfer frame against our incoming window, and opens the window again once
    /// half of it is used.
    fn count_incoming(&mut self, io: &mut Io, session: u16) {
        let Some(s) = self.sessions.get_mut(&session) else { return };
        s.next_incoming_id = s.next_incoming_id.wrapping_add(1);
        s.incoming_window = s.incoming_window.saturating_sub(1);
        if s.incoming_window >= WINDOW / 2 {
            return;
        }
        s.incoming_window = WINDOW;
        let flow = Performative::Flow {
            next_incoming_id: Some(s.next_incoming_id),
            incoming_window: WINDOW,
            next_outgoing_id: s.next_outgoing_id,
            outgoing_window: u32::MAX,
            handle: None,
            delivery_count: None,
            link_credit: None,
            drain: false,
            echo: false,
        };
        write_frame(&mut io.out, FrameKind::Amqp, session, &flow, &[]);
    }

    /// Adds a transfer to its link's message; the whole message (delivery id, settled, payload)
    /// once its last transfer is in. A message in one transfer is its frame's own bytes.
    fn assemble(
        &mut self,
        io: &mut Io,
        session: u16,
        transfer: &Transfer,
        payload: Bytes,
    ) -> Option<(u32, bool, Bytes)> {
        let handle = transfer.handle;
        let (partial, credit, delivery_count) = match self.link_mut(session, handle) {
            Some(Link::Publishing(link)) => (&mut link.partial, &mut link.credit, &mut link.delivery_count),
            Some(Link::Requests(link)) => (&mut link.partial, &mut link.credit, &mut link.delivery_count),
            _ => {
                let reason = format!("transfer on handle {handle}");
                self.end_with_error(io, session, "amqp:session:unattached-handle", reason);
                return None;
            }
        };
        if partial.is_none() {
            let Some(delivery_id) = transfer.delivery_id else {
                self.end_with_error(io, session, "amqp:decode-error", "a transfer without a delivery-id");
                return None;
            };
            if *credit == 0 {
                // Part 2.6.7: a sender without credit may not send; its messages would have no bound.
                self.close_link(io, session, handle);
                let reason = "a transfer without link credit";
                self.detach_with_error(io, session, handle, "amqp:link:transfer-limit-exceeded", reason);
                return None;
            }
            *credit = credit.saturating_sub(1);
            *delivery_count = delivery_count.wrapping_add(1);
            if !transfer.more && !transfer.aborted && payload.len() as u64 <= io.max_message_size {
                return Some((delivery_id, transfer.settled, payload));
            }
            *partial = Some(Partial { delivery_id, settled: transfer.settled, payload: BytesMut::new() });
        }
        let growing = partial.as_mut()?;
        growing.settled |= transfer.settled;
        if transfer.aborted {
            *partial = None;
            return None;
        }
        if (growing.payload.len() + payload.len()) as u64 > io.max_message_size {
            let reason = format!("message size exceeds the maximum of {} bytes", io.max_message_size);
            self.close_link(io, session, handle);
            self.detach_with_error(io, session, handle, "amqp:link:message-size-exceeded", reason);
            return None;
        }
        growing.payload.extend_from_slice(&payload);
        if transfer.more {
            return None;
        }
        let Partial { delivery_id, settled, payload } = partial.take()?;
        Some((delivery_id, settled, payload.freeze()))
    }

    /// Publishes a whole message of a sending link on its channel.
    fn publish(
        &mut self,
        io: &mut Io,
        session: u16,
        handle: u32,
        delivery_id: u32,
        settled: bool,
        payload: &Bytes,
    ) {
        let conn = self.conn;
        let Some(Link::Publishing(link)) = self.link_mut(session, handle) else { return };
        let routed = message::inbound(payload)
            .map_err(|e| (e.condition(), e.to_string()))
            .and_then(|m| route_of(link.route.as_ref(), &m).map(|r| (m, r)));
        let (inbound, route) = match routed {
            Ok(routed) => routed,
            Err((condition, description)) => {
                if !settled {
                    let error =
                        ErrorCondition { condition: condition.to_owned(), description: Some(description) };
                    let state = described(REJECTED, vec![error_value(&error)]);
                    settle(io, session, delivery_id, delivery_id, state);
                }
                return;
            }
        };
        let properties = match link.last_properties.as_deref() {
            Some((last, encoded)) if *last == inbound.properties => encoded.clone(),
            _ => {
                let encoded = EncodedProperties::from(&inbound.properties);
                link.last_properties = Some(Box::new((inbound.properties, encoded.clone())));
                encoded
            }
        };
        let publish = Publish {
            exchange: route.exchange,
            routing_key: route.routing_key,
            // An unsettled message no queue takes comes back (then `released`); a settled one is
            // dropped, as RabbitMQ 4 does.
            mandatory: !settled,
            properties,
            body: inbound.body,
        };
        link.published += 1;
        link.unconfirmed.insert(link.published, (delivery_id, settled));
        io.commands.push_back(Command::Publish {
            conn,
            channel: ChannelId(link.channel),
            publish: Box::new(publish),
        });
        self.grant_credit(io, session, handle);
    }

    /// Tops a sending link's credit up to [`CREDIT`] less what is unconfirmed, once that adds at
    /// least half of [`CREDIT`]: a flow per half window, not one per confirm while the
    /// publisher keeps many unconfirmed.
    fn grant_credit(&mut self, io: &mut Io, session: u16, handle: u32) {
        let Some(Link::Publishing(link)) = self.link_mut(session, handle) else { return };
        let target = CREDIT.saturating_sub(u32::try_from(link.unconfirmed.len()).unwrap_or(u32::MAX));
        if target >= link.credit.saturating_add(CREDIT / 2) {
            link.credit = target;
            self.send_link_flow(io, session, handle, false);
        }
    }

    fn disposition(
        &mut self,
        io: &mut Io,
        session: u16,
        first: u32,
        last: u32,
        settled: bool,
        state: &Value,
    ) {
        let span = last.wrapping_sub(first);
        if span >= DISPOSITION_RANGE_MAX {
            return self.end_with_error(
                io,
                session,
                "amqp:invalid-field",
                format!("a disposition of {span} deliveries"),
            );
        }
        // Settled with no outcome: the message goes back to its queue (nothing is lost).
        let outcome = match outcome_of(state) {
            Ok(outcome) => outcome.unwrap_or(Outcome::Requeue { failed: false }),
            Err(why) => return self.end_with_error(io, session, "amqp:invalid-field", why),
        };
        let Some(s) = self.sessions.get_mut(&session) else { return };
        let mut acted = Vec::new();
        for offset in 0..=span {
            let id = first.wrapping_add(offset);
            let Some((handle, tag)) = s.unsettled.remove(&id) else { continue };
            let Some(link) = s.links.get_mut(&handle) else { continue };
            if let Link::Consuming(consuming) = link {
                consuming.unsettled = consuming.unsettled.saturating_sub(1);
            }
            let Some(channel) = link.channel() else { continue };
            acted.push((handle, channel, tag));
        }
        for (_, channel, tag) in &acted {
            io.commands.push_back(outcome.command(self.conn, ChannelId(*channel), *tag));
        }
        if !settled && !acted.is_empty() {
            settle_as_sender(io, session, first, last, state.clone());
        }
        let mut handles: Vec<u32> = acted.iter().map(|(h, _, _)| *h).collect();
        handles.dedup();
        for handle in handles {
            self.pump(io, session, handle);
        }
    }

    /// Sends a consuming link's waiting deliveries while it has credit and the session a window.
    fn pump(&mut self, io: &mut Io, session: u16, handle: u32) {
        let conn = self.conn;
        let Some(s) = self.sessions.get_mut(&session) else { return };
        let link = match s.links.get_mut(&handle) {
            Some(Link::Consuming(link)) => link,
            Some(Link::Replies(_)) => return self.pump_replies(io, session, handle),
            _ => return,
        };
        while link.credit > 0 && s.remote_incoming_window > 0 {
            let Some(waiting) = link.waiting.pop_front() else { break };
            let delivery_id = s.next_delivery_id;
            s.next_delivery_id = s.next_delivery_id.wrapping_add(1);
            let mut payload = BytesMut::new();
            let properties = waiting.message.properties().decode();
            message::outbound(
                &properties,
                &waiting.message.body,
                &waiting.exchange.as_str(),
                &waiting.routing_key.as_str(),
                waiting.redelivered,
                &mut payload,
            );
            let frames =
                send_transfer(io, session, handle, delivery_id, waiting.tag, link.presettled, &payload);
            s.next_outgoing_id = s.next_outgoing_id.wrapping_add(frames);
            s.remote_incoming_window = s.remote_incoming_window.saturating_sub(frames);
            link.credit -= 1;
            link.delivery_count = link.delivery_count.wrapping_add(1);
            if link.volatile.is_some() {
                // A reply consumer acks nothing (no-ack).
            } else if link.presettled {
                let ack = BasicAck { delivery_tag: waiting.tag, multiple: false };
                io.commands.push_back(Command::Method {
                    conn,
                    channel: ChannelId(link.channel),
                    method: ack.into(),
                });
            } else {
                s.unsettled.insert(delivery_id, (handle, waiting.tag));
                link.unsettled += 1;
            }
        }
    }

    pub(crate) fn on_effect(&mut self, io: &mut Io, effect: Effect) {
        match effect {
            Effect::Send { .. } | Effect::Deliver { .. } | Effect::Confirm { .. } => {
                if let Some((channel, method, content)) = effect.into_method() {
                    self.on_method(io, channel.0, method, content);
                }
            }
            Effect::ChannelError { channel, error, .. } => {
                if self.request_refused(io, channel.0, error.reply_code, &error.reply_text) {
                    return;
                }
                let Some((session, handle)) = self.by_channel.remove(&channel.0) else { return };
                // The broker dropped the channel already: its number is free again.
                self.channels.give_back(channel.0);
                let removed = self.sessions.get_mut(&session).and_then(|s| {
                    s.unsettled.retain(|_, (h, _)| *h != handle);
                    s.links.remove(&handle)
                });
                if let Some(Link::Consuming(Consuming {
                    volatile: Some(Volatile { attach: Some(attach) }),
                    ..
                })) = removed
                {
                    // Refused before it was attached: attached with no source, then detached
                    // (part 2.6.3).
                    let refused = Attach { source: Value::Null, ..*attach };
                    self.reply_attach(io, session, &refused, false);
                }
                let error = error_condition(&error);
                self.detach_with_error(
                    io,
                    session,
                    handle,
                    &error.condition,
                    error.description.unwrap_or_default(),
                );
            }
            Effect::Answer { channel, answer, .. } => match *answer {
                Answer::ReplyAddress(address) => self.volatile_attached(io, channel.0, &address),
                Answer::Queue(_) => {
                    self.request_queried(io, channel.0, &answer);
                }
            },
            Effect::TimedOut { channel, delivery_tag, .. } => self.timed_out(io, channel.0, delivery_tag),
            Effect::ConnectionError { .. } | Effect::Blocked { .. } => {}
        }
    }

    /// A delivery of a consuming link ran out its consumer timeout and the broker took it back:
    /// the client is sent `released` for it, unsettled, as RabbitMQ 4.3 does (the spec's 2.6.12:
    /// a sender that changes a delivery's state on its own says so and lets the receiver settle).
    /// The link goes on; whatever the client settles that delivery with later does nothing.
    fn timed_out(&mut self, io: &mut Io, channel: u16, tag: u64) {
        let Some(&(session, handle)) = self.by_channel.get(&channel) else { return };
        let Some(s) = self.sessions.get_mut(&session) else { return };
        let Some(id) = s.unsettled.iter().find(|(_, held)| **held == (handle, tag)).map(|(id, _)| *id) else {
            return;
        };
        s.unsettled.remove(&id);
        if let Some(Link::Consuming(link)) = s.links.get_mut(&handle) {
            link.unsettled = link.unsettled.saturating_sub(1);
        }
        let released = described(RELEASED, Vec::new());
        let frame = Performative::Disposition {
            receiver: false,
            first: id,
            last: None,
            settled: false,
            state: released,
        };
        write_frame(&mut io.out, FrameKind::Amqp, session, &frame, &[]);
        self.pump(io, session, handle);
    }

    fn on_method(&mut self, io: &mut Io, channel: u16, method: Method, content: Option<Arc<Message>>) {
        if self.request_answered(io, channel, &method) {
            return;
        }
        if let Method::ChannelCloseOk(_) = method {
            if !self.by_channel.contains_key(&channel) {
                self.channels.give_back(channel);
            }
            return;
        }
        let Some(&(session, handle)) = self.by_channel.get(&channel) else { return };
        match method {
            Method::BasicAck(ack) => {
                self.confirmed(io, session, handle, ack.delivery_tag, ack.multiple, true)
            }
            Method::BasicNack(nack) => {
                self.confirmed(io, session, handle, nack.delivery_tag, nack.multiple, false)
            }
            Method::BasicReturn(_) => {
                if let Some(Link::Publishing(link)) = self.link_mut(session, handle) {
                    link.returned = true;
                }
            }
            Method::BasicDeliver(deliver) => {
                let Some(message) = content else { return };
                if let Some(Link::Consuming(link)) = self.link_mut(session, handle) {
                    if link.volatile.is_some() && link.waiting.len() >= link.credit as usize {
                        // RabbitMQ 4.2 drops a direct reply its requester has no credit for.
                        return;
                    }
                    link.waiting.push_back(Waiting {
                        tag: deliver.delivery_tag,
                        redelivered: deliver.redelivered,
                        exchange: deliver.exchange,
                        routing_key: deliver.routing_key,
                        message,
                    });
                }
                self.pump(io, session, handle);
            }
            Method::BasicCancel(_) => {
                // The broker cancelled the consumer (its queue was deleted).
                self.close_link(io, session, handle);
                self.detach_with_error(io, session, handle, "amqp:resource-deleted", "the queue was deleted");
            }
            _ => {}
        }
    }

    /// The broker confirmed publishes of a sending link: the unsettled ones are settled with
    /// `accepted` (`rejected` for a nack; `released` for the one it returned as unroutable), in as
    /// few dispositions as their ids allow.
    fn confirmed(&mut self, io: &mut Io, session: u16, handle: u32, tag: u64, multiple: bool, ack: bool) {
        let Some(Link::Publishing(link)) = self.link_mut(session, handle) else { return };
        if ack && !multiple && !link.returned {
            // The common case, one confirm per publish: no lists, and runs in one disposition.
            if let Some((delivery_id, false)) = link.unconfirmed.remove(&tag) {
                accept(io, session, delivery_id);
            }
            return self.grant_credit(io, session, handle);
        }
        let sequences: Vec<u64> =
            if multiple { link.unconfirmed.range(..=tag).map(|(seq, _)| *seq).collect() } else { vec![tag] };
        // The return came just before the ack of the publish it returned: the one acked last.
        let returned = std::mem::take(&mut link.returned).then_some(tag);
        let (mut ids, mut released): (Vec<u32>, Vec<u32>) = (Vec::new(), Vec::new());
        for seq in sequences {
            if let Some((delivery_id, settled)) = link.unconfirmed.remove(&seq) {
                match (settled, ack && returned == Some(seq)) {
                    (true, _) => {}
                    (false, true) => released.push(delivery_id),
                    (false, false) => ids.push(delivery_id),
                }
            }
        }
        settle_in_ranges(io, session, released, &described(RELEASED, Vec::new()));
        let state = if ack {
            described(ACCEPTED, Vec::new())
        } else {
            let error = ErrorCondition {
                condition: "amqp:internal-error".to_owned(),
                description: Some("the broker could not take the message".to_owned()),
            };
            described(REJECTED, vec![error_value(&error)])
        };
        settle_in_ranges(io, session, ids, &state);
        self.grant_credit(io, session, handle);
    }

    /// Ends a link's 0-9-1 side: its consumer and channel (the broker requeues what it had not
    /// settled); the channel number is free again on channel.close-ok.
    fn close_link(&mut self, io: &mut Io, session: u16, handle: u32) {
        let Some(s) = self.sessions.get_mut(&session) else { return };
        let Some(link) = s.links.remove(&handle) else { return };
        s.unsettled.retain(|_, (h, _)| *h != handle);
        let Some(channel) = link.channel() else { return };
        self.by_channel.remove(&channel);
        if let Link::Consuming(consuming) = &link {
            if consuming.prefetch > 0 {
                let cancel = BasicCancel { consumer_tag: consumer_tag(session, handle), nowait: true };
                self.method(io, channel, cancel.into());
            }
        }
        self.method(
            io,
            channel,
            ChannelClose {
                reply_code: 200,
                reply_text: ShortStr::from_static("link detached"),
                class_id: 0,
                method_id: 0,
            }
            .into(),
        );
    }

    fn end_session(&mut self, io: &mut Io, session: u16) {
        let handles: Vec<u32> =
            self.sessions.get(&session).map(|s| s.links.keys().copied().collect()).unwrap_or_default();
        for handle in handles {
            self.close_link(io, session, handle);
        }
        self.sessions.remove(&session);
    }

    /// A session error (part 2.5.5): its links end, our end carries the error, and the peer's
    /// end is still to come.
    fn end_with_error(&mut self, io: &mut Io, session: u16, condition: &str, description: impl Into<String>) {
        self.end_session(io, session);
        self.ending.insert(session);
        let error = ErrorCondition { condition: condition.to_owned(), description: Some(description.into()) };
        write_frame(&mut io.out, FrameKind::Amqp, session, &Performative::End { error: Some(error) }, &[]);
    }

    /// Detaches (closes) a link with an error; its handle stays taken until the client detaches.
    fn detach_with_error(
        &mut self,
        io: &mut Io,
        session: u16,
        handle: u32,
        condition: &str,
        description: impl Into<String>,
    ) {
        if let Some(s) = self.sessions.get_mut(&session) {
            s.detached.insert(handle);
        }
        let error = ErrorCondition { condition: condition.to_owned(), description: Some(description.into()) };
        let frame = Performative::Detach { handle, closed: true, error: Some(error) };
        write_frame(&mut io.out, FrameKind::Amqp, session, &frame, &[]);
    }

    fn open_channel(&mut self, io: &mut Io, channel: u16) {
        self.method(io, channel, ChannelOpen::default().into());
    }

    fn method(&self, io: &mut Io, channel: u16, method: Method) {
        io.commands.push_back(Command::Method { conn: self.conn, channel: ChannelId(channel), method });
    }
}

/// The parts of an attach the link needs.
#[derive(Clone, Debug)]
struct Attach {
    name: String,
    handle: u32,
    snd_settle_mode: u8,
    source: Value,
    target: Value,
    initial_delivery_count: Option<u32>,
}

struct LinkFlow {
    delivery_count: Option<u32>,
    link_credit: Option<u32>,
    drain: bool,
    echo: bool,
}

struct Transfer {
    handle: u32,
    delivery_id: Option<u32>,
    settled: bool,
    more: bool,
    aborted: bool,
}

fn consumer_tag(session: u16, handle: u32) -> ShortStr {
    ShortStr::try_from(format!("amqp1.{session}.{handle}")).unwrap_or_default()
}

fn passive_queue(queue: &str) -> Method {
    QueueDeclare {
        queue: ShortStr::try_from(queue).unwrap_or_default(),
        passive: true,
        ..QueueDeclare::default()
    }
    .into()
}

fn passive_exchange(exchange: &str) -> Method {
    ExchangeDeclare {
        exchange: ShortStr::try_from(exchange).unwrap_or_default(),
        passive: true,
        arguments: FieldTable::new(),
        ..ExchangeDeclare::default()
    }
    .into()
}

/// An exchange and routing key, as a publish carries them.
#[derive(Debug, Clone)]
struct Route {
    exchange: ShortStr,
    routing_key: ShortStr,
}

impl Route {
    fn of(destination: &Destination) -> Route {
        // `address::target` refuses names over 255 bytes, so these always fit.
        let short = |name: &str| ShortStr::try_from(name).unwrap_or_default();
        Route { exchange: short(&destination.exchange), routing_key: short(&destination.routing_key) }
    }
}

/// Where a message goes: its link's target, or for a null target its `to` address.
fn route_of(link: Option<&Route>, message: &message::Inbound) -> Result<Route, (&'static str, String)> {
    if let Some(route) = link {
        return Ok(route.clone());
    }
    let to = message
        .to
        .as_deref()
        .ok_or(("amqp:precondition-failed", "a message to a null target needs a 'to' address".to_owned()))?;
    address::target(to).map(|d| Route::of(&d)).map_err(|e| ("amqp:precondition-failed", e.to_string()))
}

/// Settles deliveries `first..=last` of a link the client sends on, with `state`.
/// Settles deliveries `ids` of `session` with `state`, one disposition per run of consecutive ids.
fn settle_in_ranges(io: &mut Io, session: u16, mut ids: Vec<u32>, state: &Value) {
    ids.sort_unstable();
    let mut at = 0;
    while at < ids.len() {
        let mut end = at;
        while end + 1 < ids.len() && ids[end + 1] == ids[end].wrapping_add(1) {
            end += 1;
        }
        settle(io, session, ids[at], ids[end], state.clone());
        at = end + 1;
    }
}

fn settle(io: &mut Io, session: u16, first: u32, last: u32, state: Value) {
    let last = (last != first).then_some(last);
    let frame = Performative::Disposition { receiver: true, first, last, settled: true, state };
    write_frame(&mut io.out, FrameKind::Amqp, session, &frame, &[]);
}

/// Settles our deliveries `first..=last` after the client's unsettled outcome.
fn settle_as_sender(io: &mut Io, session: u16, first: u32, last: u32, state: Value) {
    let last = (last != first).then_some(last);
    let frame = Performative::Disposition { receiver: false, first, last, settled: true, state };
    write_frame(&mut io.out, FrameKind::Amqp, session, &frame, &[]);
}

/// Writes one delivery as transfers no larger than the frame limit; returns how many.
fn send_transfer(
    io: &mut Io,
    session: u16,
    handle: u32,
    delivery_id: u32,
    tag: u64,
    settled: bool,
    payload: &[u8],
) -> u32 {
    let transfer = |more: bool| Performative::Transfer {
        handle,
        delivery_id: Some(delivery_id),
        delivery_tag: Some(Bytes::copy_from_slice(&tag.to_be_bytes())),
        settled: Some(settled),
        more,
        state: Value::Null,
        aborted: false,
    };
    let mut encoded = BytesMut::new();
    encode_value(&transfer(true).to_value(), &mut encoded);
    // Frame header (8) and the performative; a continuation carries the same one.
    let room = (io.frame_max as usize).saturating_sub(8 + encoded.len()).max(1);
    let mut frames = 0;
    let mut chunks = payload.chunks(room).peekable();
    if chunks.peek().is_none() {
        write_frame(&mut io.out, FrameKind::Amqp, session, &transfer(false), &[]);
        return 1;
    }
    while let Some(chunk) = chunks.next() {
        let more = chunks.peek().is_some();
        write_frame(&mut io.out, FrameKind::Amqp, session, &transfer(more), chunk);
        frames += 1;
    }
    frames
}
