//! The broker's one API: `Command`s in, `Effect`s out.
//!
//! The session (AMQP connections) and the management API both drive the broker through these types.
//! Every effect is addressed to one connection; the driver forwards it to that connection's
//! session, in order. Effects for one connection are emitted in the order AMQP requires (a
//! basic.return before the basic.ack of the same publish, deliveries before a channel.close-ok).

use std::sync::Arc;

use bytes::Bytes;
use hourglass_wire::{BasicAck, BasicDeliver, BasicNack, EncodedProperties, FieldTable, Method, ShortStr};

use crate::message::Message;
use crate::permissions::Permissions;

/// Identifies one client connection for the lifetime of the process.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ConnectionId(pub u64);

/// An AMQP channel number on one connection (1 ..= channel_max).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ChannelId(pub u16);

/// What the session learned during the handshake, handed to the broker on `connection.open`.
#[derive(Clone, Debug, PartialEq)]
pub struct ConnectionInfo {
    pub user: String,
    pub vhost: String,
    /// The peer's socket address, e.g. `127.0.0.1:50312`.
    pub peer: String,
    /// The local address of the accepted socket, e.g. `127.0.0.1:5672` (empty for the
    /// management API's own connection).
    pub local: String,
    pub client_properties: FieldTable,
    pub capabilities: ClientCapabilities,
    pub frame_max: u32,
    pub channel_max: u16,
    pub heartbeat_s: u16,
    /// The user's configure / write / read patterns in this vhost, checked on every operation
    /// (`permissions.rs`); the management API replaces them when they change.
    pub permissions: Arc<Permissions>,
    /// The user has the `impersonator` tag: a `user_id` property naming someone else is allowed.
    pub may_impersonate: bool,
    /// How the client logged in and whether over TLS, for the API's connection listings
    /// (`auth_mechanism`, `ssl`).
    pub login: LoginInfo,
}

/// How a connection came in and authenticated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LoginInfo {
    /// The protocol, as RabbitMQ's listings name it: [`AMQP_0_9_1`] or [`AMQP_1_0`].
    pub protocol: &'static str,
    /// The SASL mechanism: `PLAIN`, `AMQPLAIN` or `EXTERNAL`.
    pub mechanism: &'static str,
    /// The connection came over TLS (AMQPS).
    pub tls: bool,
}

/// A connection's `protocol` in RabbitMQ's listings.
pub const AMQP_0_9_1: &str = "AMQP 0-9-1";
pub const AMQP_1_0: &str = "AMQP 1-0";

impl Default for LoginInfo {
    /// PLAIN over plain TCP, what a connection without more to say did.
    fn default() -> Self {
        LoginInfo { protocol: AMQP_0_9_1, mechanism: "PLAIN", tls: false }
    }
}

/// Client capabilities (client-properties `capabilities` table) the broker acts on.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct ClientCapabilities {
    /// The client understands a server-sent basic.cancel (sent when a consumed queue goes away).
    pub consumer_cancel_notify: bool,
    /// The client understands connection.blocked / connection.unblocked.
    pub connection_blocked: bool,
}

/// A complete basic.publish: method fields, content header and the assembled body.
#[derive(Clone, Debug, PartialEq)]
pub struct Publish {
    pub exchange: ShortStr,
    pub routing_key: ShortStr,
    pub mandatory: bool,
    /// As received: a slice of the content header frame (read in place, not decoded).
    pub properties: EncodedProperties,
    pub body: Bytes,
}

/// An input to the broker.
#[derive(Clone, Debug, PartialEq)]
pub enum Command {
    /// The handshake finished (connection.open accepted).
    /// Boxed: it is sent once per connection, and every publish moves a `Command`.
    ConnectionOpen { conn: ConnectionId, info: Box<ConnectionInfo> },
    /// The connection is gone (closed cleanly, by error, or the socket dropped). The broker
    /// requeues its unacked messages, cancels its consumers and deletes its exclusive queues.
    /// Idempotent.
    ConnectionClosed { conn: ConnectionId },
    /// A channel-level method from the client, including channel.open / channel.close /
    /// channel.flow and every exchange, queue, basic (except publish), tx and confirm method.
    /// The broker answers with `Effect::Send` (e.g. channel.open-ok, channel.close-ok after
    /// releasing the channel's deliveries) or `Effect::ChannelError`.
    Method { conn: ConnectionId, channel: ChannelId, method: Method },
    /// A fully assembled basic.publish. Boxed: a `Command` is moved several times on its way
    /// (into the session's queue, out of the batch, into the broker's dispatch), and a move of
    /// the 136-byte `Publish` was a `memcpy` call each time, more than the allocation costs.
    Publish { conn: ConnectionId, channel: ChannelId, publish: Box<Publish> },
    /// The session closed this channel itself with an error (e.g. a content frame too large);
    /// the broker drops the channel's state as for channel.close but sends nothing.
    ChannelAborted { conn: ConnectionId, channel: ChannelId },
    /// The connection's socket is not keeping up (`paused`) or has caught up: while paused, its
    /// consumers get no deliveries, so a slow reader cannot make the broker buffer without bound.
    DeliveryPaused { conn: ConnectionId, paused: bool },
    /// A question about the broker's state on a channel, answered by `Effect::Answer` (or
    /// `Effect::ChannelError`): what no 0-9-1 method reports, for the AMQP 1.0 management node.
    Query { conn: ConnectionId, channel: ChannelId, query: Query },
    /// Sets one consumer's prefetch (0-9-1's per-consumer basic.qos, which applies only to
    /// consumers made after it) on a consumer that exists: an AMQP 1.0 link's credit, which the
    /// client changes as it goes. Nothing is answered; an unknown consumer is ignored.
    ConsumerPrefetch { conn: ConnectionId, channel: ChannelId, consumer_tag: ShortStr, prefetch: u16 },
    /// An AMQP 1.0 `modified` outcome that asks more than a plain reject: annotations merged
    /// into the message, or a time before which it is not delivered again (RabbitMQ 4.3).
    /// Boxed: it is rare, and every publish moves a `Command`.
    Modify(Box<Modification>),
}

/// Delivery `delivery_tag` on `channel` settled by an AMQP 1.0 `modified` outcome
/// ([`Command::Modify`]).
#[derive(Clone, Debug, PartialEq)]
pub struct Modification {
    pub conn: ConnectionId,
    pub channel: ChannelId,
    pub delivery_tag: u64,
    /// `delivery-failed`: it goes back as basic.reject with requeue does (its delivery counts
    /// as failed), else as basic.nack with requeue does.
    pub failed: bool,
    /// `undeliverable-here`: dead-lettered (or dropped), as basic.reject without requeue.
    pub undeliverable_here: bool,
    /// Back to the queue, not delivered again before this time (`x-opt-delivery-time`); over
    /// its delivery limit it is still dead-lettered at once. An unknown tag is a channel error,
    /// as for basic.reject.
    pub ready_at: Option<crate::Timestamp>,
    /// Message annotations (`x-` keys) merged into the message's headers, which carry them
    /// (docs/amqp1.md), whether it goes back to its queue or is dead-lettered.
    pub annotations: FieldTable,
}

/// What a [`Command::Query`] asks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Query {
    /// A queue's declaration and counts (RabbitMQ 4's `GET /queues/:queue`).
    Queue(ShortStr),
    /// The address the channel's reply consumer (direct reply-to) receives at: an AMQP 1.0
    /// link attached to a dynamic source tells its client.
    ReplyAddress,
}

/// The answer to a [`Command::Query`].
#[derive(Clone, Debug, PartialEq)]
pub enum Answer {
    Queue(QueueAnswer),
    /// `amq.rabbitmq.reply-to.<token>` (406 when the channel has no reply consumer).
    ReplyAddress(ShortStr),
}

/// A queue as [`Query::Queue`] reports it.
#[derive(Clone, Debug, PartialEq)]
pub struct QueueAnswer {
    pub name: ShortStr,
    pub durable: bool,
    pub exclusive: bool,
    pub auto_delete: bool,
    /// As declared (policies not merged in).
    pub arguments: FieldTable,
    pub messages: u64,
    pub consumers: u64,
}

impl Command {
    pub fn conn(&self) -> ConnectionId {
        match self {
            Command::ConnectionOpen { conn, .. }
            | Command::ConnectionClosed { conn }
            | Command::Method { conn, .. }
            | Command::Publish { conn, .. }
            | Command::ChannelAborted { conn, .. }
            | Command::DeliveryPaused { conn, .. }
            | Command::Query { conn, .. }
            | Command::ConsumerPrefetch { conn, .. } => *conn,
            Command::Modify(modification) => modification.conn,
        }
    }
}

/// A protocol error with the fields of channel.close / connection.close.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AmqpError {
    pub reply_code: u16,
    /// RabbitMQ's text, e.g. `NOT_FOUND - no queue 'q' in vhost '/'`.
    pub reply_text: String,
    /// The class and method that failed (0, 0 when none did).
    pub class_id: u16,
    pub method_id: u16,
}

impl AmqpError {
    /// An error whose text is `NAME - detail`, as RabbitMQ writes reply texts.
    pub fn new(reply_code: u16, detail: impl std::fmt::Display) -> Self {
        let name = hourglass_wire::reply_code_name(reply_code);
        AmqpError { reply_code, reply_text: format!("{name} - {detail}"), class_id: 0, method_id: 0 }
    }

    /// The same error, naming the method that caused it.
    pub fn on(mut self, method: &Method) -> Self {
        self.class_id = method.class_id();
        self.method_id = method.method_id();
        self
    }
}

/// An output of the broker, addressed to one connection.
///
/// Every delivery and confirm moves an `Effect` several times between the broker and the socket,
/// so the two have compact variants of their own and every other method is boxed: 72 bytes
/// (`effect_stays_small`), down from 168 when each carried a whole `Method`.
#[derive(Clone, Debug, PartialEq)]
pub enum Effect {
    /// Send a method (with its content, for get-ok / return) on a channel. Boxed: rare next to
    /// deliveries and confirms. [`Effect::send`] builds one.
    Send { conn: ConnectionId, channel: ChannelId, method: Box<Method>, content: Option<Arc<Message>> },
    /// basic.deliver of `message` to consumer `consumer_tag`; its exchange and routing key are
    /// the message's.
    Deliver {
        conn: ConnectionId,
        channel: ChannelId,
        consumer_tag: ShortStr,
        delivery_tag: u64,
        redelivered: bool,
        message: Arc<Message>,
    },
    /// A publisher confirm: basic.ack (`ack`) or basic.nack of `delivery_tag` (and every earlier
    /// one when `multiple`).
    Confirm { conn: ConnectionId, channel: ChannelId, delivery_tag: u64, multiple: bool, ack: bool },
    /// The broker has already dropped the channel's state; the session sends channel.close with
    /// this error and discards the channel's frames until channel.close-ok.
    ChannelError { conn: ConnectionId, channel: ChannelId, error: AmqpError },
    /// Close the whole connection with this error (connection.close).
    ConnectionError { conn: ConnectionId, error: AmqpError },
    /// Tell the client to stop publishing (connection.blocked) or that it may resume.
    Blocked { conn: ConnectionId, reason: Option<String> },
    /// The answer to a [`Command::Query`] on that channel (boxed: rare, and every delivery moves
    /// an `Effect`).
    Answer { conn: ConnectionId, channel: ChannelId, answer: Box<Answer> },
    /// Delivery `delivery_tag` on that channel ran out its consumer timeout and is back in its
    /// queue; its consumer goes on. Only to AMQP 1.0 connections, which tell the client with a
    /// `released` disposition (RabbitMQ 4.3); 0-9-1 clients hear of a timeout by basic.cancel or
    /// a channel error instead.
    TimedOut { conn: ConnectionId, channel: ChannelId, delivery_tag: u64 },
}

impl Effect {
    /// [`Effect::Send`] of `method`.
    pub fn send(
        conn: ConnectionId,
        channel: ChannelId,
        method: impl Into<Method>,
        content: Option<Arc<Message>>,
    ) -> Effect {
        Effect::Send { conn, channel, method: Box::new(method.into()), content }
    }

    /// The method this effect sends on a channel, with its content: a delivery and a confirm
    /// as the 0-9-1 methods they are. `None` for the other effects.
    pub fn into_method(self) -> Option<(ChannelId, Method, Option<Arc<Message>>)> {
        match self {
            Effect::Send { channel, method, content, .. } => Some((channel, *method, content)),
            Effect::Deliver { channel, consumer_tag, delivery_tag, redelivered, message, .. } => {
                let method = BasicDeliver {
                    consumer_tag,
                    delivery_tag,
                    redelivered,
                    exchange: message.exchange.clone(),
                    routing_key: message.routing_key.clone(),
                };
                Some((channel, method.into(), Some(message)))
            }
            Effect::Confirm { channel, delivery_tag, multiple, ack: true, .. } => {
                Some((channel, BasicAck { delivery_tag, multiple }.into(), None))
            }
            // RabbitMQ sets the requeue bit on the nack of a publish a full queue refused.
            Effect::Confirm { channel, delivery_tag, multiple, ack: false, .. } => {
                Some((channel, BasicNack { delivery_tag, multiple, requeue: true }.into(), None))
            }
            _ => None,
        }
    }

    /// The connection and channel the effect is for; `None` for a connection's own effects.
    pub fn channel_key(&self) -> Option<(ConnectionId, ChannelId)> {
        match self {
            Effect::Send { conn, channel, .. }
            | Effect::Deliver { conn, channel, .. }
            | Effect::Confirm { conn, channel, .. }
            | Effect::ChannelError { conn, channel, .. }
            | Effect::Answer { conn, channel, .. }
            | Effect::TimedOut { conn, channel, .. } => Some((*conn, *channel)),
            Effect::ConnectionError { .. } | Effect::Blocked { .. } => None,
        }
    }

    pub fn conn(&self) -> ConnectionId {
        match self {
            Effect::Send { conn, .. }
            | Effect::Deliver { conn, .. }
            | Effect::Confirm { conn, .. }
            | Effect::ChannelError { conn, .. }
            | Effect::ConnectionError { conn, .. }
            | Effect::Blocked { conn, .. }
            | Effect::Answer { conn, .. }
            | Effect::TimedOut { conn, .. } => *conn,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every publish moves a `Command` through the broker's input queue: 96 bytes (bounded by
    /// `Method`, 80, its rare large methods boxed; the publish itself is boxed), down from 496
    /// when it carried decoded properties (ADR 0006). Under 128 bytes a move is a few register
    /// copies, not a `memcpy` call.
    #[test]
    fn command_stays_small() {
        let size = std::mem::size_of::<Command>();
        assert!(size <= 96, "Command is {size} bytes");
    }

    /// Every delivery and confirm moves an `Effect` from the broker to the socket.
    #[test]
    fn effect_stays_small() {
        let size = std::mem::size_of::<Effect>();
        assert!(size <= 72, "Effect is {size} bytes");
    }
}
