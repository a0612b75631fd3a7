//! The management side's access to the broker: jobs run on the broker task, listings, and an
//! admin channel that drives the same method handlers as AMQP clients.
//!
//! Operations from the HTTP API (declare, bind, purge, publish, get, delete) go through
//! [`AdminChannel`]: a synthetic connection and channel, opened and closed inside one job, that
//! sends wire methods to `handle_method` exactly as a client would. So every rule (name checks,
//! argument validation, equivalence, exclusivity) lives in one place, and the effects on other
//! connections (basic.cancel to consumers of a deleted queue, deliveries after a publish) are left
//! in the broker's effect queue for the driver to flush.

mod delayed;
mod delayed_listing;
mod in_flight;
mod listing;
mod policies;
pub mod slices;
mod sqs_gateway;
mod sqs_send;
mod vhosts;

pub use delayed::{DelayedError, DelayedKey, DelayedMessage, DelayedSlice};
pub use delayed_listing::{DelayedMatches, DelayedPeek};
pub use in_flight::InFlightDelivery;
pub use listing::{
    sort_bindings, sort_channels, sort_connections, sort_consumers, sort_exchanges, sort_queues,
    BindingDetails, ChannelSummary, ConnectionSummary, ConsumerSummary, ExchangeDetails, PolicyNames,
    QueueDetails, QueueNames,
};
pub(crate) use sqs_gateway::SqsGateways;
pub use sqs_gateway::{
    MoveStep, MoveStopped, MoveTarget, SqsGatewayError, SqsReceived, SQS_GATEWAY_PEER, SQS_GATEWAY_USER,
    SQS_MOVE_TASK_ARG,
};
pub use sqs_send::{lower_hex, SendRefused, SqsOutgoing, SqsSent, DEDUPLICATION_ID_HEADER, SEQUENCE_HEADER};

use std::sync::Arc;

use hourglass_wire::{ChannelOpen, FieldTable, Method, QueuePurge, ShortStr};

use crate::api::{
    AmqpError, ChannelId, ClientCapabilities, Command, ConnectionId, ConnectionInfo, Effect, Publish,
};
use crate::broker::Broker;
use crate::message::Message;
use crate::time::Timestamp;

/// The connection id the admin channel uses. Client connection ids count up from 1, so this one
/// never collides; an admin session is opened and closed within one job, so one id suffices.
pub const ADMIN_CONNECTION: ConnectionId = ConnectionId(u64::MAX);
const ADMIN_CHANNEL: ChannelId = ChannelId(1);

/// A method (with its content, for get-ok and return) the broker sent to the admin channel.
pub type Reply = (Method, Option<Arc<Message>>);

/// A channel on a synthetic connection, for the management API.
pub struct AdminChannel<'b> {
    broker: &'b mut Broker,
    now: Timestamp,
}

impl AdminChannel<'_> {
    /// Sends a channel-level method; returns what the broker answered on this channel, or the
    /// error that closed it (after which the channel is gone and further calls do nothing).
    pub fn call(&mut self, method: impl Into<Method>) -> Result<Vec<Reply>, AmqpError> {
        let command =
            Command::Method { conn: ADMIN_CONNECTION, channel: ADMIN_CHANNEL, method: method.into() };
        self.broker.handle_command(command, self.now);
        self.broker.take_replies_to(ADMIN_CONNECTION)
    }

    /// SQS's PurgeQueue: queue.purge (with this channel's permissions: read on the queue), then
    /// the messages the vhost's SQS gateway received from the queue and has not deleted, as AWS
    /// purges in-flight messages too (`Broker::sqs_purge_in_flight`).
    pub fn purge_with_sqs_in_flight(&mut self, queue: ShortStr) -> Result<Vec<Reply>, AmqpError> {
        let name = queue.as_str().into_owned();
        let replies = self.call(QueuePurge { queue, ..Default::default() })?;
        if let Some(vhost) = self.broker.vhost_of(ADMIN_CONNECTION) {
            // The purge found the queue; if it went since, there is nothing in flight to take.
            let _ = self.broker.sqs_purge_in_flight(&vhost, &name, self.now);
        }
        Ok(replies)
    }

    /// The HTTP API's get is about to take up to `count` messages of `queue`, bodies up to
    /// `body_bytes`: the paged ones among them are asked for in one read
    /// (`Queue::ask_read_for_get`). Whether a read of the queue is out: the get should wait for
    /// it before it takes anything. Refused as basic.get would be (no such queue, no read
    /// permission), with the channel left open.
    pub fn ask_read_for_get(
        &mut self,
        queue: &ShortStr,
        count: usize,
        body_bytes: usize,
    ) -> Result<bool, AmqpError> {
        let Some(vhost) = self.broker.vhost_of(ADMIN_CONNECTION) else { return Ok(false) };
        let (_, id) = self.broker.readable_queue(ADMIN_CONNECTION, ADMIN_CHANNEL, &vhost, queue)?;
        // Expired messages go first, unread where nothing dead-letters them (ADR 0007).
        self.broker.expire_messages(id, self.now);
        let Some(q) = self.broker.queues.get_mut(&id) else { return Ok(false) };
        let reading = q.ask_read_for_get(count, body_bytes);
        self.broker.reschedule(id);
        Ok(reading)
    }

    /// Whether the message a get of `queue` would take next is paged out and being read
    /// (`Queue::take_awaits_read`): a get-empty then meant "not yet", not "empty".
    pub fn get_awaits_read(&self, queue: &ShortStr) -> bool {
        let vhost = self.broker.vhost_of(ADMIN_CONNECTION);
        vhost.is_some_and(|vhost| self.broker.get_awaits_read(&vhost, &queue.as_str()))
    }

    /// Publishes a message; returns the replies (a basic.return when unroutable and mandatory).
    pub fn publish(&mut self, publish: Publish) -> Result<Vec<Reply>, AmqpError> {
        let command =
            Command::Publish { conn: ADMIN_CONNECTION, channel: ADMIN_CHANNEL, publish: Box::new(publish) };
        self.broker.handle_command(command, self.now);
        self.broker.take_replies_to(ADMIN_CONNECTION)
    }
}

/// What a connection opened by the broker's own callers (the admin channel, an SQS gateway)
/// shows as: `user` on `vhost` from `peer`, with `permissions`.
pub(crate) fn synthetic_connection(
    user: &str,
    vhost: &str,
    peer: &str,
    permissions: std::sync::Arc<crate::permissions::Permissions>,
) -> ConnectionInfo {
    ConnectionInfo {
        user: user.to_owned(),
        vhost: vhost.to_owned(),
        peer: peer.to_owned(),
        local: String::new(),
        client_properties: FieldTable::new(),
        capabilities: ClientCapabilities::default(),
        frame_max: 0,
        channel_max: 0,
        heartbeat_s: 0,
        permissions,
        may_impersonate: false,
        login: Default::default(),
    }
}

impl Broker {
    /// Opens an admin connection as `user` on `vhost` with one channel and every permission,
    /// runs `f` on it and closes it (which requeues whatever it left unacked, as closing a client
    /// channel does).
    pub fn with_admin_channel<T>(
        &mut self,
        user: &str,
        vhost: &str,
        now: Timestamp,
        f: impl FnOnce(&mut AdminChannel<'_>) -> T,
    ) -> T {
        self.with_admin_channel_as(user, vhost, crate::permissions::Permissions::full(), now, f)
    }

    /// [`Self::with_admin_channel`] limited to `permissions` (the HTTP user's in `vhost`), so the
    /// API refuses what the user could not do over AMQP.
    pub fn with_admin_channel_as<T>(
        &mut self,
        user: &str,
        vhost: &str,
        permissions: std::sync::Arc<crate::permissions::Permissions>,
        now: Timestamp,
        f: impl FnOnce(&mut AdminChannel<'_>) -> T,
    ) -> T {
        let info = synthetic_connection(user, vhost, "management", permissions);
        self.handle_command(Command::ConnectionOpen { conn: ADMIN_CONNECTION, info: Box::new(info) }, now);
        let open = Command::Method {
            conn: ADMIN_CONNECTION,
            channel: ADMIN_CHANNEL,
            method: ChannelOpen::default().into(),
        };
        self.handle_command(open, now);
        let _ = self.take_replies_to(ADMIN_CONNECTION);
        let result = f(&mut AdminChannel { broker: self, now });
        self.handle_command(Command::ConnectionClosed { conn: ADMIN_CONNECTION }, now);
        let _ = self.take_replies_to(ADMIN_CONNECTION);
        result
    }

    /// Removes the effects addressed to `conn` (a synthetic connection: the admin one, an SQS
    /// gateway), keeping every other one in order.
    fn take_replies_to(&mut self, conn: ConnectionId) -> Result<Vec<Reply>, AmqpError> {
        let mut replies = Vec::new();
        let mut error = None;
        for effect in self.outbox.take_ready_of(conn) {
            match effect {
                Effect::ChannelError { error: e, .. } | Effect::ConnectionError { error: e, .. } => {
                    error = Some(e)
                }
                effect => {
                    if let Some((_, method, content)) = effect.into_method() {
                        replies.push((method, content));
                    }
                }
            }
        }
        match error {
            Some(e) => Err(e),
            None => Ok(replies),
        }
    }
}

#[cfg(test)]
mod tests {
    use hourglass_wire::{QueueDeclare, QueueDeclareOk, ShortStr};

    use super::*;

    fn declare(name: &'static str) -> QueueDeclare {
        QueueDeclare { queue: ShortStr::from_static(name), durable: true, ..Default::default() }
    }

    /// The admin channel answers like a client channel, reports errors, and leaves no trace.
    #[test]
    fn admin_channel_declares_and_reports_errors() {
        let mut broker = Broker::new(crate::BrokerConfig::default());
        let replies = broker.with_admin_channel("guest", "/", Timestamp::ZERO, |ch| ch.call(declare("q")));
        let replies = replies.unwrap();
        assert!(
            matches!(&replies[0].0, Method::QueueDeclareOk(QueueDeclareOk { queue, .. }) if queue == "q")
        );
        let err = broker
            .with_admin_channel("guest", "/", Timestamp::ZERO, |ch| {
                ch.call(QueueDeclare { durable: false, ..declare("q") })
            })
            .unwrap_err();
        assert_eq!(err.reply_code, 406);
        assert!(broker.list_connections().is_empty());
        assert!(broker.poll_effect().is_none());
        assert_eq!(broker.list_queue_details().len(), 1);
    }

    /// Deleting a vhost removes its queues; a second delete reports it gone.
    #[test]
    fn vhost_add_and_delete() {
        let mut broker = Broker::new(crate::BrokerConfig::default());
        assert!(broker.add_vhost("v"));
        assert!(!broker.add_vhost("v"));
        broker.with_admin_channel("guest", "v", Timestamp::ZERO, |ch| ch.call(declare("q"))).unwrap();
        assert!(broker.delete_vhost("v", Timestamp::ZERO));
        assert!(broker.list_queues().is_empty());
        assert!(!broker.delete_vhost("v", Timestamp::ZERO));
    }
}
