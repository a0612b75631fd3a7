//! Direct reply-to (RabbitMQ's `amq.rabbitmq.reply-to`): RPC replies that skip queues.
//!
//! A channel consumes (no-ack) from the pseudo-queue `amq.rabbitmq.reply-to`; a publish on that
//! channel with `reply_to = amq.rabbitmq.reply-to` has it rewritten to
//! `amq.rabbitmq.reply-to.<token>`, and a publish to the default exchange with that routing key
//! (from any connection) goes straight to the consumer as basic.deliver. Nothing is stored: when
//! the consumer is gone the reply is unroutable (dropped, or returned 312 when mandatory).
//! Rules and reply texts follow RabbitMQ's `rabbit_channel`.

use std::collections::HashMap;
use std::sync::Arc;

use hourglass_wire::{
    BasicCancel, BasicCancelOk, BasicConsume, BasicConsumeOk, QueueDeclare, QueueDeclareOk, ShortStr,
};

use crate::api::{AmqpError, ChannelId, ConnectionId, Effect, Publish, QueueAnswer};
use crate::broker::Broker;
use crate::errors;
use crate::message::Message;

/// The pseudo-queue a reply consumer consumes from, and the `reply_to` value asking for a rewrite.
pub(crate) const REPLY_QUEUE: &str = "amq.rabbitmq.reply-to";
/// What starts a reply address handed to responders.
const REPLY_PREFIX: &str = "amq.rabbitmq.reply-to.";

/// A channel's reply consumer.
#[derive(Debug)]
struct ReplyConsumer {
    tag: ShortStr,
    /// `amq.rabbitmq.reply-to.<token>`: where responders publish.
    address: ShortStr,
}

/// Every reply consumer, by channel and by address.
#[derive(Debug, Default)]
pub(crate) struct ReplyConsumers {
    by_channel: HashMap<(ConnectionId, ChannelId), ReplyConsumer>,
    by_address: HashMap<ShortStr, (ConnectionId, ChannelId)>,
}

impl ReplyConsumers {
    /// Whether `tag` names the reply consumer of this channel.
    pub fn is_tag(&self, conn: ConnectionId, ch: ChannelId, tag: &ShortStr) -> bool {
        self.by_channel.get(&(conn, ch)).is_some_and(|c| &c.tag == tag)
    }

    /// Ends the channel's reply consumer (channel closed): replies to it become unroutable.
    pub fn forget(&mut self, conn: ConnectionId, ch: ChannelId) {
        if let Some(consumer) = self.by_channel.remove(&(conn, ch)) {
            self.by_address.remove(&consumer.address);
        }
    }
}

/// `amq.rabbitmq.reply-to` itself or a reply address: names queue.declare answers specially.
pub(crate) fn is_reply_name(name: &ShortStr) -> bool {
    name.as_bytes().starts_with(REPLY_QUEUE.as_bytes())
}

/// A publish RabbitMQ delivers straight to a reply consumer: default exchange, reply address.
pub(crate) fn is_direct_reply(publish: &Publish) -> bool {
    publish.exchange.is_empty() && publish.routing_key.as_bytes().starts_with(REPLY_PREFIX.as_bytes())
}

impl Broker {
    /// basic.consume on `amq.rabbitmq.reply-to`: no-ack only, one per channel.
    pub(crate) fn consume_replies(
        &mut self,
        conn: ConnectionId,
        ch: ChannelId,
        m: &BasicConsume,
    ) -> Result<(), AmqpError> {
        let Some(channel) = self.connections.channel(conn, ch) else { return Ok(()) };
        if !m.consumer_tag.is_empty() && channel.consumers.iter().any(|(t, _)| t == &m.consumer_tag) {
            return Err(errors::not_allowed(format!("attempt to reuse consumer tag '{}'", m.consumer_tag)));
        }
        if !m.no_ack {
            return Err(errors::precondition_failed("reply consumer cannot acknowledge"));
        }
        if self.reply_consumers.by_channel.contains_key(&(conn, ch)) {
            return Err(errors::precondition_failed("reply consumer already set"));
        }
        let tag = if m.consumer_tag.is_empty() { self.names.consumer_tag() } else { m.consumer_tag.clone() };
        // Random, so a reply address cannot be guessed; the ids keep addresses unique for sure.
        let token = self.names.token();
        let address = format!("{REPLY_PREFIX}{token}.{:x}.{:x}", conn.0, ch.0);
        // The prefix, 22 characters and two hex numbers stay far below 255 bytes.
        let address = ShortStr::try_from(address).unwrap_or_default();
        self.reply_consumers.by_address.insert(address.clone(), (conn, ch));
        self.reply_consumers.by_channel.insert((conn, ch), ReplyConsumer { tag: tag.clone(), address });
        if !m.nowait {
            self.send(conn, ch, BasicConsumeOk { consumer_tag: tag });
        }
        Ok(())
    }

    /// basic.cancel of the channel's reply consumer; `false` when `m` names another consumer.
    pub(crate) fn cancel_replies(&mut self, conn: ConnectionId, ch: ChannelId, m: &BasicCancel) -> bool {
        if !self.reply_consumers.is_tag(conn, ch, &m.consumer_tag) {
            return false;
        }
        self.reply_consumers.forget(conn, ch);
        if !m.nowait {
            self.send(conn, ch, BasicCancelOk { consumer_tag: m.consumer_tag.clone() });
        }
        true
    }

    /// Rewrites `reply_to = amq.rabbitmq.reply-to` to this channel's reply address; RabbitMQ's
    /// 406 when the channel has no reply consumer.
    pub(crate) fn address_replies(
        &self,
        conn: ConnectionId,
        ch: ChannelId,
        publish: &mut Publish,
    ) -> Result<(), AmqpError> {
        let Some(reply_to) = publish.properties.reply_to() else { return Ok(()) };
        if reply_to != REPLY_QUEUE {
            return Ok(());
        }
        match self.reply_consumers.by_channel.get(&(conn, ch)) {
            Some(consumer) => {
                publish.properties =
                    publish.properties.edited(|p| p.reply_to = Some(consumer.address.clone()));
                Ok(())
            }
            None => Err(errors::precondition_failed("fast reply consumer does not exist")),
        }
    }

    /// The address the channel's reply consumer receives at; 406 as `address_replies` when it
    /// has none.
    pub(crate) fn reply_address(&self, conn: ConnectionId, ch: ChannelId) -> Result<ShortStr, AmqpError> {
        match self.reply_consumers.by_channel.get(&(conn, ch)) {
            Some(consumer) => Ok(consumer.address.clone()),
            None => Err(errors::precondition_failed("fast reply consumer does not exist")),
        }
    }

    /// A live reply address as RabbitMQ 4.2's `GET /queues/:queue` reports it (a responder asks
    /// whether its requester is still there): no messages, one consumer. `None` for any other
    /// name, a reply address whose consumer is gone too (then 404, as RabbitMQ answers).
    pub(crate) fn reply_queue_answer(&self, name: &ShortStr) -> Option<QueueAnswer> {
        self.reply_consumers.by_address.contains_key(name).then(|| QueueAnswer {
            name: name.clone(),
            durable: false,
            exclusive: true,
            auto_delete: true,
            arguments: Default::default(),
            messages: 0,
            consumers: 1,
        })
    }

    /// Hands a reply (see `is_direct_reply`) to the consumer its routing key names; `false` when
    /// that consumer is gone, so the caller treats the reply as unroutable.
    pub(crate) fn deliver_reply(&mut self, message: &Arc<Message>) -> bool {
        let Some(&(conn, ch)) = self.reply_consumers.by_address.get(&message.routing_key) else {
            return false;
        };
        let Some(consumer) = self.reply_consumers.by_channel.get(&(conn, ch)) else { return false };
        let Some(channel) = self.connections.channel_mut(conn, ch) else { return false };
        // No-ack and no prefetch, as in RabbitMQ: a reply is never tracked or held back.
        let (consumer_tag, delivery_tag) = (consumer.tag.clone(), channel.next_tag());
        self.emit(Effect::Deliver {
            conn,
            channel: ch,
            consumer_tag,
            delivery_tag,
            redelivered: false,
            message: message.clone(),
        });
        true
    }

    /// queue.declare (passive or not) of `amq.rabbitmq.reply-to` or of a live reply address:
    /// declare-ok with 0 messages and 1 consumer, as RabbitMQ answers; a dead address is 404.
    pub(crate) fn declare_reply_queue(
        &mut self,
        conn: ConnectionId,
        ch: ChannelId,
        m: &QueueDeclare,
        vhost: &str,
    ) -> Result<(), AmqpError> {
        let exists = m.queue == REPLY_QUEUE || self.reply_consumers.by_address.contains_key(&m.queue);
        if !exists {
            return Err(errors::no_queue(&m.queue, vhost));
        }
        if let Some(channel) = self.connections.channel_mut(conn, ch) {
            channel.last_queue = Some(m.queue.clone());
        }
        if !m.nowait {
            self.send(
                conn,
                ch,
                QueueDeclareOk { queue: m.queue.clone(), message_count: 0, consumer_count: 1 },
            );
        }
        Ok(())
    }
}
