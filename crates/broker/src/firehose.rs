//! RabbitMQ's firehose tracer (`rabbitmqctl trace_on`). While tracing is on for a vhost, a copy
//! of every message published in it goes to its `amq.rabbitmq.trace` exchange with routing key
//! `publish.<exchange>`, and a copy of every delivery (to a consumer or by basic.get) with
//! `deliver.<queue>`. A copy has the original body and only headers: where the message was
//! published and delivered, its routing keys and its properties, as rabbit_trace's. Messages
//! published to the trace exchange itself are never traced, so consuming the firehose does not
//! feed it. Tracing is a switch of the running node, not saved: a restart turns it off, as
//! RabbitMQ's.

use std::collections::HashSet;
use std::sync::Arc;

use bytes::Bytes;
use hourglass_wire::{
    BasicProperties, EncodedProperties, FieldArray, FieldTable, FieldValue, LongStr, ShortStr,
};

use crate::api::{ChannelId, ConnectionId};
use crate::broker::Broker;
use crate::message::Message;
use crate::queue::QueueId;
use crate::routing;
use crate::sender_selected::HeaderRoutes;
use crate::time::Timestamp;

/// The topic exchange every vhost has for the firehose (internal: clients bind, never publish).
pub(crate) const TRACE_EXCHANGE: &str = "amq.rabbitmq.trace";

/// A routing key is a short string.
const MAX_ROUTING_KEY_BYTES: usize = 255;

/// Which vhosts are traced, and the deliveries waiting to be traced.
#[derive(Debug, Default)]
pub(crate) struct Firehose {
    vhosts: HashSet<String>,
    /// The node named in each copy's `node` header.
    node: String,
    /// Deliveries made during the current operation, traced at its end: they are made while
    /// their queue is borrowed, and tracing enqueues into other queues.
    deliveries: Vec<TracedDelivery>,
}

/// A delivery to trace: the message as delivered and to whom.
#[derive(Debug)]
pub(crate) struct TracedDelivery {
    pub vhost: String,
    pub queue: ShortStr,
    pub message: Arc<Message>,
    pub redelivered: bool,
    pub conn: ConnectionId,
    pub channel: ChannelId,
}

impl Firehose {
    /// Whether messages of `vhost` are traced (one emptiness check when no vhost is).
    pub(crate) fn traces(&self, vhost: &str) -> bool {
        !self.vhosts.is_empty() && self.vhosts.contains(vhost)
    }

    /// Notes a delivery, when its vhost is traced and it is not a copy made by the firehose.
    pub(crate) fn note_delivery(&mut self, delivery: impl FnOnce() -> TracedDelivery, vhost: &str) {
        if self.traces(vhost) {
            let delivery = delivery();
            if !is_trace(&delivery.message) {
                self.deliveries.push(delivery);
            }
        }
    }
}

fn is_trace(message: &Message) -> bool {
    message.exchange.as_bytes() == TRACE_EXCHANGE.as_bytes()
}

impl Broker {
    /// `trace_on`: traces `vhost`, naming `node` in the copies. False when there is no such vhost.
    pub fn trace_on(&mut self, vhost: &str, node: &str) -> bool {
        if !self.vhosts.contains_key(vhost) {
            return false;
        }
        self.firehose.vhosts.insert(vhost.to_owned());
        node.clone_into(&mut self.firehose.node);
        true
    }

    /// `trace_off`. False when there is no such vhost.
    pub fn trace_off(&mut self, vhost: &str) -> bool {
        self.firehose.vhosts.remove(vhost);
        self.vhosts.contains_key(vhost)
    }

    /// The vhosts being traced.
    pub fn traced_vhosts(&self) -> Vec<String> {
        self.firehose.vhosts.iter().cloned().collect()
    }

    /// Forgets a deleted vhost's tracing.
    pub(crate) fn forget_tracing(&mut self, vhost: &str) {
        self.firehose.vhosts.remove(vhost);
    }

    /// Traces a publish on `conn`/`channel` that reached `routed` (`routing_keys`: the routing
    /// key, then those of its CC and BCC headers).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn trace_publish(
        &mut self,
        vhost: &str,
        conn: ConnectionId,
        channel: ChannelId,
        message: &Message,
        routing_keys: &[Bytes],
        routed: &[QueueId],
        now: Timestamp,
    ) {
        if is_trace(message) || !self.trace_exchange_bound(vhost) {
            return;
        }
        let queues = routed.iter().filter_map(|id| self.queues.get(id)).map(|q| long(q.name().as_bytes()));
        let mut headers = self.message_headers(message, routing_keys);
        headers.extend(self.publisher_headers(vhost, conn, channel));
        headers.push(("routed_queues", FieldValue::Array(FieldArray::from_values(queues))));
        let key = trace_key("publish.", &message.exchange);
        self.publish_trace(vhost, key, message.body.clone(), headers, now);
    }

    /// Traces the deliveries noted since the last call.
    pub(crate) fn trace_deliveries(&mut self, now: Timestamp) {
        if self.firehose.deliveries.is_empty() {
            return;
        }
        for delivery in std::mem::take(&mut self.firehose.deliveries) {
            if !self.trace_exchange_bound(&delivery.vhost) {
                continue;
            }
            let cc = HeaderRoutes::read(delivery.message.properties()).unwrap_or_default();
            let mut headers = self.message_headers(&delivery.message, cc.keys());
            headers.insert(0, ("redelivered", FieldValue::I32(i32::from(delivery.redelivered))));
            headers.extend(self.publisher_headers(&delivery.vhost, delivery.conn, delivery.channel));
            let key = trace_key("deliver.", &delivery.queue);
            self.publish_trace(&delivery.vhost, key, delivery.message.body.clone(), headers, now);
        }
    }

    /// Whether anything is bound to the vhost's trace exchange: a copy nobody receives is not
    /// made (its headers are most of tracing's cost).
    fn trace_exchange_bound(&self, vhost: &str) -> bool {
        let exchange = ShortStr::from_static(TRACE_EXCHANGE);
        self.vhosts.get(vhost).and_then(|v| v.exchanges.get(&exchange)).is_some_and(|x| x.has_bindings())
    }

    /// rabbit_trace's `msg_to_table`: the exchange, routing keys and properties of `message`, and
    /// the node.
    fn message_headers(&self, message: &Message, extra_keys: &[Bytes]) -> Vec<(&'static str, FieldValue)> {
        let keys =
            std::iter::once(long(message.routing_key.as_bytes())).chain(extra_keys.iter().map(|k| long(k)));
        vec![
            ("exchange_name", long(message.exchange.as_bytes())),
            ("routing_keys", FieldValue::Array(FieldArray::from_values(keys))),
            ("properties", FieldValue::Table(properties_table(&message.properties().decode()))),
            ("node", long(self.firehose.node.as_bytes())),
        ]
    }

    /// Who published or received: vhost, connection (its peer), channel and user.
    fn publisher_headers(
        &self,
        vhost: &str,
        conn: ConnectionId,
        channel: ChannelId,
    ) -> Vec<(&'static str, FieldValue)> {
        let (peer, user) = self
            .connections
            .get(&conn)
            .map(|c| (c.info.peer.as_str(), c.info.user.as_str()))
            .unwrap_or_default();
        vec![
            ("vhost", long(vhost.as_bytes())),
            ("connection", long(peer.as_bytes())),
            ("channel", FieldValue::I32(i32::from(channel.0))),
            ("user", long(user.as_bytes())),
        ]
    }

    /// Routes a copy through the vhost's trace exchange into the queues bound to it.
    fn publish_trace(
        &mut self,
        vhost: &str,
        routing_key: ShortStr,
        body: Bytes,
        headers: Vec<(&'static str, FieldValue)>,
        now: Timestamp,
    ) {
        let Some(vhost) = self.vhosts.get(vhost) else { return };
        let exchange = ShortStr::from_static(TRACE_EXCHANGE);
        let properties =
            BasicProperties { headers: Some(FieldTable::from_entries(headers)), ..Default::default() };
        let copy = Message::new(exchange.clone(), routing_key, EncodedProperties::from(&properties), body);
        let mut targets = Vec::new();
        routing::route(vhost, &exchange, &copy, &[], &mut targets);
        let copy = Arc::new(copy);
        for id in targets {
            self.enqueue(id, copy.clone(), now, None);
        }
    }
}

/// `prefix` + `name`, cut to the 255 bytes a routing key may have.
fn trace_key(prefix: &str, name: &ShortStr) -> ShortStr {
    let mut key = Vec::with_capacity(prefix.len() + name.as_bytes().len());
    key.extend_from_slice(prefix.as_bytes());
    key.extend_from_slice(name.as_bytes());
    key.truncate(MAX_ROUTING_KEY_BYTES);
    // Never too long once cut; the name alone is the fallback that cannot fail either.
    ShortStr::new(Bytes::from(key)).unwrap_or_else(|_| name.clone())
}

fn long(bytes: &[u8]) -> FieldValue {
    FieldValue::LongStr(LongStr::new(Bytes::copy_from_slice(bytes)))
}

/// The properties that are set, by their names in the AMQP basic class: integers as signed
/// 32-bit, the timestamp as a timestamp, headers as a table, the rest as long strings.
fn properties_table(p: &BasicProperties) -> FieldTable {
    let text =
        |name: &'static str, value: &Option<ShortStr>| value.as_ref().map(|v| (name, long(v.as_bytes())));
    let entries = [
        text("content_type", &p.content_type),
        text("content_encoding", &p.content_encoding),
        p.headers.clone().map(|h| ("headers", FieldValue::Table(h))),
        p.delivery_mode.map(|m| ("delivery_mode", FieldValue::I32(i32::from(m)))),
        p.priority.map(|m| ("priority", FieldValue::I32(i32::from(m)))),
        text("correlation_id", &p.correlation_id),
        text("reply_to", &p.reply_to),
        text("expiration", &p.expiration),
        text("message_id", &p.message_id),
        p.timestamp.map(|t| ("timestamp", FieldValue::Timestamp(t))),
        text("type", &p.kind),
        text("user_id", &p.user_id),
        text("app_id", &p.app_id),
        text("cluster_id", &p.cluster_id),
    ];
    FieldTable::from_entries(entries.into_iter().flatten())
}
