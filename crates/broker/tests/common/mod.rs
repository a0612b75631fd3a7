//! Shorthands for broker tests.
#![allow(dead_code)]

pub mod disk;

use std::collections::BTreeMap;

use bytes::Bytes;
use hourglass_broker::{
    decode_catalog, AmqpError, CatalogChange, Definitions, Effect, StoreOp, StoredBody, StoredMessage,
};
use hourglass_testkit::{methods, short, Chan, TestBroker};
use hourglass_wire::*;

pub fn declare(tb: &mut TestBroker, chan: Chan, name: &str) -> Vec<Effect> {
    tb.call(chan, QueueDeclare { queue: short(name), ..Default::default() })
}

pub fn declare_with(tb: &mut TestBroker, chan: Chan, m: QueueDeclare) -> QueueDeclareOk {
    let effects = tb.call(chan, m);
    match methods(&effects).as_slice() {
        [Method::QueueDeclareOk(ok)] => ok.clone(),
        other => panic!("expected queue.declare-ok, got {other:?}"),
    }
}

pub fn declare_exchange(tb: &mut TestBroker, chan: Chan, name: &str, kind: &str) -> Vec<Effect> {
    tb.call(chan, ExchangeDeclare { exchange: short(name), kind: short(kind), ..Default::default() })
}

pub fn bind(tb: &mut TestBroker, chan: Chan, queue: &str, exchange: &str, key: &str) -> Vec<Effect> {
    tb.call(
        chan,
        QueueBind {
            queue: short(queue),
            exchange: short(exchange),
            routing_key: short(key),
            ..Default::default()
        },
    )
}

pub fn unbind(tb: &mut TestBroker, chan: Chan, queue: &str, exchange: &str, key: &str) -> Vec<Effect> {
    tb.call(
        chan,
        QueueUnbind {
            queue: short(queue),
            exchange: short(exchange),
            routing_key: short(key),
            ..Default::default()
        },
    )
}

/// Starts a consumer with a given tag; returns the effects (consume-ok and any deliveries).
pub fn consume(tb: &mut TestBroker, chan: Chan, queue: &str, tag: &str, no_ack: bool) -> Vec<Effect> {
    tb.call(
        chan,
        BasicConsume { queue: short(queue), consumer_tag: short(tag), no_ack, ..Default::default() },
    )
}

pub fn ack(tb: &mut TestBroker, chan: Chan, tag: u64, multiple: bool) -> Vec<Effect> {
    tb.call(chan, BasicAck { delivery_tag: tag, multiple })
}

/// The channel error among `effects`, if any.
pub fn channel_error(effects: &[Effect]) -> Option<AmqpError> {
    effects.iter().find_map(|e| match e {
        Effect::ChannelError { error, .. } => Some(error.clone()),
        _ => None,
    })
}

/// The connection error among `effects`, if any.
pub fn connection_error(effects: &[Effect]) -> Option<AmqpError> {
    effects.iter().find_map(|e| match e {
        Effect::ConnectionError { error, .. } => Some(error.clone()),
        _ => None,
    })
}

pub fn bodies(effects: &[Effect]) -> Vec<Vec<u8>> {
    hourglass_testkit::deliveries(effects).iter().map(|d| d.body().to_vec()).collect()
}

/// The delivered bodies as text.
pub fn body_texts(effects: &[Effect]) -> Vec<String> {
    bodies(effects).into_iter().map(|body| String::from_utf8_lossy(&body).into_owned()).collect()
}

/// The messages basic.get-oks among `effects` carried.
pub fn gotten(effects: &[Effect]) -> Vec<std::sync::Arc<hourglass_broker::Message>> {
    let got = effects.iter().filter_map(|effect| match effect {
        Effect::Send { method, content: Some(message), .. }
            if matches!(**method, hourglass_wire::Method::BasicGetOk(_)) =>
        {
            Some(message.clone())
        }
        _ => None,
    });
    got.collect()
}

/// The bodies of the messages basic.get-oks among `effects` carried, as text.
pub fn got_texts(effects: &[Effect]) -> Vec<String> {
    gotten(effects).iter().map(|message| String::from_utf8_lossy(&message.body).into_owned()).collect()
}

/// The bodies of messages an SQS receive got, as text.
pub fn received_texts(got: &[hourglass_broker::admin::SqsReceived]) -> Vec<String> {
    got.iter().map(|r| String::from_utf8_lossy(&r.message.body).into_owned()).collect()
}

/// The headers of an SQS FIFO message of `group` (its `MessageGroupId`).
pub fn group_headers(group: &str) -> hourglass_wire::FieldTable {
    let id = hourglass_wire::FieldValue::LongStr(group.into());
    hourglass_wire::FieldTable::from_entries([(hourglass_broker::queue::message_groups::GROUP_HEADER, id)])
}

/// The bodies `body 0`, `body 1`, … of the messages numbered `range`.
pub fn numbered_bodies(range: std::ops::Range<usize>) -> Vec<String> {
    range.map(|i| format!("body {i}")).collect()
}

/// A stand-in for the store as recovery sees it: the catalog's entries and each durable queue's
/// live messages, kept by applying the broker's store ops in order.
#[derive(Default)]
pub struct StoredModel {
    pub catalog: BTreeMap<Bytes, Bytes>,
    pub queues: BTreeMap<u64, Vec<StoredMessage>>,
}

impl StoredModel {
    /// The definitions the catalog holds, as recovery decodes them.
    pub fn definitions(&self) -> Definitions {
        decode_catalog(self.catalog.iter().map(|(k, v)| (&k[..], &v[..]))).expect("catalog decodes")
    }

    /// Applies `op`; an enqueued message is kept as `body` makes it from its record (the record
    /// itself, or where it was written).
    pub fn apply(&mut self, op: &StoreOp, body: impl FnOnce(u64, u64, &Bytes) -> StoredBody) {
        match op {
            StoreOp::Enqueue { queue, msg_id, metadata, record } => {
                let body = body(*queue, *msg_id, record);
                self.queues.entry(*queue).or_default().push(StoredMessage {
                    msg_id: *msg_id,
                    metadata: metadata.clone(),
                    body,
                });
            }
            StoreOp::Settle { queue, msg_id } => {
                if let Some(messages) = self.queues.get_mut(queue) {
                    messages.retain(|m| m.msg_id != *msg_id);
                }
            }
            StoreOp::Update { queue, msg_id, metadata } => {
                for m in self.queues.get_mut(queue).into_iter().flatten() {
                    if m.msg_id == *msg_id {
                        m.metadata = metadata.clone();
                    }
                }
            }
            StoreOp::Purge { queue } => {
                self.queues.remove(queue);
            }
            StoreOp::Catalog(CatalogChange::Put { key, value }) => {
                self.catalog.insert(key.clone(), value.clone());
            }
            StoreOp::Catalog(CatalogChange::Delete { key }) => {
                self.catalog.remove(key);
            }
            StoreOp::Catalog(CatalogChange::DeletePrefix { prefix }) => {
                self.catalog.retain(|key, _| !key.starts_with(prefix));
            }
            // A model of the whole log: nothing is left to a checkpoint.
            StoreOp::Checkpoint(_) => {}
        }
        self.queues.retain(|_, m| !m.is_empty());
    }

    /// Live messages over every queue.
    pub fn live(&self) -> usize {
        self.queues.values().map(Vec::len).sum()
    }
}

/// Sets a user policy `name` on queues matching `pattern` in vhost `/` with `definition`.
pub fn set_queue_policy(
    tb: &mut TestBroker,
    name: &str,
    pattern: &str,
    definition: &[(&str, FieldValue)],
) -> Result<bool, hourglass_broker::policy::PolicyError> {
    let spec = hourglass_broker::policy::PolicySpec {
        name: name.into(),
        pattern: pattern.into(),
        apply_to: "queues".into(),
        priority: 0,
        definition: FieldTable::from_entries(definition.iter().cloned()),
    };
    let now = tb.clock.now();
    tb.broker.set_policy(hourglass_broker::policy::PolicyKind::User, "/", spec, now)
}
