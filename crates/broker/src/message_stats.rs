//! Message counters behind the management API's `message_stats` and the Prometheus
//! `rabbitmq_global_messages_*_total` counters: plain `u64` increments on paths a message takes
//! anyway, kept for the broker as a whole, per queue, per channel and per exchange. Rates are not
//! kept here: the management side derives them from samples of these counters (`mgmt/src/rates/`).
//!
//! What each counter counts, as RabbitMQ's rabbit_channel does:
//! - `publish`: basic.publish messages received (broker, channel); messages routed into the
//!   queue by a publish (queue; dead-lettered copies are not counted, as in RabbitMQ).
//! - `confirm`: publishes confirmed with basic.ack in confirm mode; `received_confirm`: publishes
//!   received on a channel in confirm mode (acked or nacked).
//! - `deliver` / `deliver_no_ack` / `get` / `get_no_ack`: basic.deliver with and without ack,
//!   basic.get-ok with and without ack; `redeliver`: those of them with the redelivered flag.
//! - `get_empty`: basic.get answered with basic.get-empty.
//! - `ack`: deliveries settled by basic.ack.
//! - `routed` / `return_unroutable` / `drop_unroutable`: publishes that reached a queue, came back
//!   to a mandatory publisher, or were dropped.

use std::sync::atomic::{AtomicU64, Ordering};

use hourglass_wire::ShortStr;

use crate::broker::Broker;

/// Counters of one object (or of the broker); fields that do not apply to a kind stay 0.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MessageStats {
    pub publish: u64,
    pub confirm: u64,
    pub received_confirm: u64,
    pub deliver: u64,
    pub deliver_no_ack: u64,
    pub get: u64,
    pub get_no_ack: u64,
    pub get_empty: u64,
    pub ack: u64,
    pub redeliver: u64,
    pub routed: u64,
    pub return_unroutable: u64,
    pub drop_unroutable: u64,
}

/// How a message left a queue for a client.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum DeliveryKind {
    /// basic.deliver to a consumer that acks.
    Deliver,
    /// basic.deliver to a no-ack consumer.
    DeliverNoAck,
    /// basic.get-ok expecting an ack.
    Get,
    /// basic.get-ok with no-ack.
    GetNoAck,
}

impl DeliveryKind {
    pub(crate) fn of_consumer(no_ack: bool) -> DeliveryKind {
        if no_ack {
            DeliveryKind::DeliverNoAck
        } else {
            DeliveryKind::Deliver
        }
    }

    pub(crate) fn of_get(no_ack: bool) -> DeliveryKind {
        if no_ack {
            DeliveryKind::GetNoAck
        } else {
            DeliveryKind::Get
        }
    }
}

/// What the publisher was told of a publish, in confirm mode.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Confirm {
    /// The channel is not in confirm mode.
    NotRequested,
    /// basic.ack.
    Acked,
    /// basic.nack (a queue refused it).
    Nacked,
}

/// What a publish came to, for the publisher's counters.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum PublishOutcome {
    Routed,
    Returned,
    Dropped,
}

impl MessageStats {
    /// Counts one message handed to a client.
    pub(crate) fn delivered(&mut self, kind: DeliveryKind, redelivered: bool) {
        let counter = match kind {
            DeliveryKind::Deliver => &mut self.deliver,
            DeliveryKind::DeliverNoAck => &mut self.deliver_no_ack,
            DeliveryKind::Get => &mut self.get,
            DeliveryKind::GetNoAck => &mut self.get_no_ack,
        };
        *counter += 1;
        self.redeliver += u64::from(redelivered);
    }

    /// Counts one basic.publish received, what routing made of it and whether it was confirmed.
    pub(crate) fn published(&mut self, outcome: PublishOutcome, confirm: Confirm) {
        self.publish += 1;
        self.confirm += u64::from(confirm == Confirm::Acked);
        self.received_confirm += u64::from(confirm != Confirm::NotRequested);
        let counter = match outcome {
            PublishOutcome::Routed => &mut self.routed,
            PublishOutcome::Returned => &mut self.return_unroutable,
            PublishOutcome::Dropped => &mut self.drop_unroutable,
        };
        *counter += 1;
    }

    /// RabbitMQ's `deliver_get`: every message handed to a client, however.
    pub fn deliver_get(&self) -> u64 {
        self.deliver + self.deliver_no_ack + self.get + self.get_no_ack
    }
}

/// Upper bounds (bytes, inclusive) of the message-size histogram's buckets, RabbitMQ 4's
/// (`rabbit_msg_size_metrics`): decades from 100 B to 10 MB, then 50 MB (to help choose a
/// `max_message_size`) and 100 MB; the last bucket (+Inf) is implicit.
pub const MESSAGE_SIZE_BUCKETS_BYTES: [u64; 8] =
    [100, 1_000, 10_000, 100_000, 1_000_000, 10_000_000, 50_000_000, 100_000_000];

/// Body sizes of messages received from publishers, as a histogram: a count per bucket (not
/// cumulative) and the sum of sizes. One comparison per bound and two increments per publish.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MessageSizes {
    /// `counts[i]`: messages of at most `MESSAGE_SIZE_BUCKETS_BYTES[i]` bytes and more than the
    /// bound before; the last entry counts the larger ones.
    pub counts: [u64; MESSAGE_SIZE_BUCKETS_BYTES.len() + 1],
    pub sum_bytes: u64,
}

impl MessageSizes {
    pub(crate) fn observe(&mut self, size_bytes: usize) {
        let size = size_bytes as u64;
        let bucket = MESSAGE_SIZE_BUCKETS_BYTES.iter().position(|bound| size <= *bound);
        self.counts[bucket.unwrap_or(MESSAGE_SIZE_BUCKETS_BYTES.len())] += 1;
        self.sum_bytes += size;
    }
}

/// The broker-wide statistics, kept in one place: every change to them is a count of something
/// the broker did, made where it did it.
#[derive(Debug, Default)]
pub(crate) struct BrokerStats {
    /// Messages published, delivered, acknowledged, … by kind (the overview's `message_stats`).
    pub messages: MessageStats,
    /// Body sizes of published messages.
    pub sizes: MessageSizes,
    /// Connections, channels and queues opened and closed (`churn.rs`).
    pub churn: crate::churn::ChurnStats,
}

/// An exchange's counters: messages published to it (`publish_in`) and those of them it routed to
/// at least one queue (`publish_out`, as RabbitMQ counts it on the exchange published to). Shared
/// (`Arc`): the exchange and the routes cached for it (`route_cache.rs`) count into the same ones,
/// through the shared borrows they hold. Only the broker's thread writes them, so an increment
/// is a load and a store, not an atomic add.
#[derive(Debug, Default)]
pub(crate) struct ExchangeCounters {
    publish_in: AtomicU64,
    publish_out: AtomicU64,
}

/// A snapshot of an exchange's counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ExchangeStats {
    pub publish_in: u64,
    pub publish_out: u64,
}

impl ExchangeCounters {
    pub(crate) fn published(&self, routed: bool) {
        bump(&self.publish_in, 1);
        bump(&self.publish_out, u64::from(routed));
    }

    pub(crate) fn snapshot(&self) -> ExchangeStats {
        ExchangeStats {
            publish_in: self.publish_in.load(Ordering::Relaxed),
            publish_out: self.publish_out.load(Ordering::Relaxed),
        }
    }
}

/// Adds `by` to a counter only the broker's thread writes.
fn bump(counter: &AtomicU64, by: u64) {
    counter.store(counter.load(Ordering::Relaxed) + by, Ordering::Relaxed);
}

impl Broker {
    /// The broker-wide counters (the overview's `message_stats`, Prometheus' global counters).
    pub fn message_stats(&self) -> MessageStats {
        self.stats.messages
    }

    /// Sizes of the message bodies received from publishers (RabbitMQ 4's message-size histogram).
    pub fn message_sizes(&self) -> MessageSizes {
        self.stats.sizes
    }

    /// A direct reply-to publish goes through the default exchange without routing there.
    pub(crate) fn count_reply_on_default_exchange(&self, vhost: &str, routed: bool) {
        let default = self.vhosts.get(vhost).and_then(|v| v.exchanges.get(&ShortStr::from_static("")));
        if let Some(exchange) = default {
            exchange.counters.published(routed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each delivery kind has its counter; deliver_get sums them and redeliver counts the flag.
    #[test]
    fn deliveries_are_counted_by_kind() {
        let mut stats = MessageStats::default();
        stats.delivered(DeliveryKind::of_consumer(false), false);
        stats.delivered(DeliveryKind::of_consumer(true), true);
        stats.delivered(DeliveryKind::of_get(false), true);
        stats.delivered(DeliveryKind::of_get(true), false);
        assert_eq!((stats.deliver, stats.deliver_no_ack, stats.get, stats.get_no_ack), (1, 1, 1, 1));
        assert_eq!((stats.deliver_get(), stats.redeliver), (4, 2));
    }

    /// A size on a bound falls in that bound's bucket; past the last bound, in +Inf.
    #[test]
    fn message_sizes_fall_in_their_buckets() {
        let mut sizes = MessageSizes::default();
        for size in [0, 100, 101, 1_000_000, 100_000_001] {
            sizes.observe(size);
        }
        assert_eq!(sizes.counts, [2, 1, 0, 0, 1, 0, 0, 0, 1]);
        assert_eq!(sizes.sum_bytes, 101_000_202);
    }
}
