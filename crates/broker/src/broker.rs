//! The broker: every vhost, queue, connection and channel, driven by `Command`s.
//!
//! One `Broker` owns all state (ADR 0001: one broker task); the driver feeds it commands and
//! timeouts and forwards the effects it emits. Methods of each AMQP class live in `methods/`.

use std::collections::VecDeque;
use std::num::NonZeroU32;

use hourglass_wire::reply_code::is_connection_error;
use hourglass_wire::Method;

use crate::api::{AmqpError, ChannelId, Command, ConnectionId, Effect};
use crate::channel::Unacked;
use crate::consumer_timeout::{ConsumerTimeoutConfig, DefaultTimeouts};
use crate::dead_lettering::DeadLetterQueue;
use crate::firehose::Firehose;
use crate::naming::NameGenerator;
use crate::outbox::Outbox;
use crate::persist::Persistence;
use crate::queue::DeliveryCounting;
use crate::queue::QueueId;
use crate::receipts::ReceiptKey;
use crate::reply_to::ReplyConsumers;
use crate::time::Timestamp;

/// A map keyed by ids the broker assigns (never by names clients choose), hashed with FxHash:
/// looked up several times per message, where SipHash cost ~10 % of the broker's CPU.
pub(crate) type IdMap<K, V> = std::collections::HashMap<K, V, rustc_hash::FxBuildHasher>;

/// Settings the driver hands the broker at start.
#[derive(Clone, Debug)]
pub struct BrokerConfig {
    /// Virtual hosts that exist from the start.
    pub vhosts: Vec<String>,
    /// Seed for server-generated names (queue names, consumer tags).
    pub name_seed: u64,
    /// ApsaraMQ compatibility (semantics §3): a `delay` header delays a message on any exchange.
    /// Off by default: a header named `delay` may mean something else to an application.
    pub apsaramq_delay_header: bool,
    /// A store is attached: emit `StoreOp`s (`poll_store_op`) and hold confirms until
    /// `handle_persisted`. Off, nothing is written and nothing waits (tests, no data dir).
    pub persistence: bool,
    /// The broker-wide consumer timeout (consumer_timeout.rs): RabbitMQ's 30 minutes, answered
    /// with basic.cancel, by default.
    pub consumer_timeout: ConsumerTimeoutConfig,
    /// Which returns count toward delivery limits: every one (3.x, the default) or failures only
    /// (RabbitMQ 4.3).
    pub delivery_counting: DeliveryCounting,
    /// Signs receipt handles (receipts.rs). The driver draws it at random
    /// (`ReceiptKey::random`): the broker reads no random source itself. The default is a fixed
    /// key, for tests only.
    pub receipt_key: ReceiptKey,
    /// Delayed messages that fell due while the broker was down are released at most this many
    /// a second, in due order (overdue_release.rs); `None`: all at once.
    pub overdue_release_rate: Option<NonZeroU32>,
}

impl Default for BrokerConfig {
    fn default() -> Self {
        // RabbitMQ creates vhost "/" on first start.
        BrokerConfig {
            vhosts: vec!["/".to_owned()],
            name_seed: 0x5EED,
            apsaramq_delay_header: false,
            persistence: false,
            receipt_key: ReceiptKey::from_bytes(&[0; 32]),
            consumer_timeout: ConsumerTimeoutConfig::default(),
            delivery_counting: DeliveryCounting::default(),
            overdue_release_rate: None,
        }
    }
}

/// Buffers reused on the message path, so that neither a publish nor an ack allocates: each is
/// taken with `mem::take` (so a nested use just starts empty) and put back after.
#[derive(Debug, Default)]
pub(crate) struct Scratch {
    /// Deliveries being settled.
    pub settle: Vec<Unacked>,
    /// The queues a publish routes to or a settlement touches.
    pub queues: Vec<QueueId>,
    /// The order in which `apply_settlements` hands freed channel credit to queues.
    pub fair: Vec<QueueId>,
}

/// Slots an emptied work queue keeps: what a burst (200,000 messages expiring at once) grew it to
/// beyond this goes back to the allocator, so idle memory after a load returns to where it was.
const IDLE_QUEUE_SLOTS: usize = 1024;

/// Gives back what a burst grew `queue` to, once it is empty (a branch when it is not).
pub(crate) fn release_burst_capacity<T>(queue: &mut VecDeque<T>) {
    if queue.is_empty() && queue.capacity() > IDLE_QUEUE_SLOTS {
        queue.shrink_to(IDLE_QUEUE_SLOTS);
    }
}

pub struct Broker {
    pub(crate) vhosts: crate::vhost::VHosts,
    /// Every queue, with its timers, paging set-up and reads (`queues.rs`).
    pub(crate) queues: crate::queues::Queues,
    /// Open connections and their channels (`connections.rs`).
    pub(crate) connections: crate::connections::Connections,
    pub(crate) names: NameGenerator,
    pub(crate) apsaramq_delay_header: bool,
    /// Every queue entry's id (entry_ids.rs).
    pub(crate) entry_ids: crate::entry_ids::EntryIds,
    /// The SQS endpoint's gateway connections (admin/sqs_gateway.rs).
    pub(crate) sqs: crate::admin::SqsGateways,
    /// Signs and checks receipt handles (receipts.rs).
    pub(crate) receipts: ReceiptKey,
    /// Deliveries under the broker's default consumer timeout (consumer_timeout.rs).
    pub(crate) default_timeouts: DefaultTimeouts,
    /// Which returns count toward delivery limits (semantics §5).
    pub(crate) delivery_counting: DeliveryCounting,
    /// Delayed messages overdue since the restore, held for the operator's rate.
    pub(crate) overdue: crate::overdue_release::OverdueRelease,
    /// Effects for the driver, replies waiting for the store among them (`outbox.rs`).
    pub(crate) outbox: Outbox,
    /// What requests waiting on the broker are told, by ticket (`notices.rs`).
    pub(crate) notices: VecDeque<crate::notices::Notice>,
    /// Buffers the message path reuses, so that a publish or an ack allocates nothing.
    pub(crate) scratch: Scratch,
    /// The broker-wide statistics: message counters, body sizes, churn (`message_stats.rs`).
    pub(crate) stats: crate::message_stats::BrokerStats,
    pub(crate) dead_letters: DeadLetterQueue,
    /// Paged messages waiting for their records to be dead-lettered (`dead_letter_reads.rs`).
    pub(crate) dead_letter_reads: crate::dead_letter_reads::DeadLetterReads,
    /// `trace_on`'s vhosts and the deliveries to trace (`firehose.rs`).
    pub(crate) firehose: Firehose,
    pub(crate) persist: Persistence,
    /// Direct reply-to consumers (`amq.rabbitmq.reply-to`), by channel and by reply address.
    pub(crate) reply_consumers: ReplyConsumers,
    /// basic.gets waiting for their queue's paged head to be read (`waiting_gets.rs`).
    pub(crate) waiting_gets: crate::waiting_gets::WaitingGets,
}

impl Broker {
    pub fn new(config: BrokerConfig) -> Self {
        let vhosts = crate::vhost::VHosts::with_names(&config.vhosts);
        Broker {
            vhosts,
            queues: Default::default(),
            connections: Default::default(),
            names: NameGenerator::new(config.name_seed),
            apsaramq_delay_header: config.apsaramq_delay_header,
            entry_ids: Default::default(),
            receipts: config.receipt_key.clone(),
            default_timeouts: DefaultTimeouts::new(config.consumer_timeout),
            delivery_counting: config.delivery_counting,
            overdue: crate::overdue_release::OverdueRelease::new(config.overdue_release_rate),
            sqs: Default::default(),
            outbox: Outbox::default(),
            notices: VecDeque::new(),
            scratch: Scratch::default(),
            stats: Default::default(),
            dead_letters: DeadLetterQueue::new(),
            dead_letter_reads: Default::default(),
            firehose: Firehose::default(),
            persist: Persistence::new(config.persistence),
            reply_consumers: ReplyConsumers::default(),
            waiting_gets: Default::default(),
        }
    }

    /// Applies one command.
    pub fn handle_command(&mut self, command: Command, now: Timestamp) {
        self.persist.begin_entry();
        match command {
            Command::ConnectionOpen { conn, info } => {
                self.stats.churn.connection_opened(conn);
                self.connections.open(conn, *info);
            }
            Command::ConnectionClosed { conn } => self.release_connection(conn, now),
            Command::Method { conn, channel, method } => {
                if let Err(error) = self.handle_method(conn, channel, &method, now) {
                    self.fail(conn, channel, error.on(&method), now);
                }
            }
            Command::Publish { conn, channel, publish } => {
                if let Err(error) = self.publish(conn, channel, publish, now) {
                    let method = Method::BasicPublish(Default::default());
                    self.fail(conn, channel, error.on(&method), now);
                }
            }
            Command::ChannelAborted { conn, channel } => self.release_channel(conn, channel, now),
            Command::DeliveryPaused { conn, paused } => self.pause_deliveries(conn, paused, now),
            Command::ConsumerPrefetch { conn, channel, consumer_tag, prefetch } => {
                self.set_consumer_prefetch(conn, channel, &consumer_tag, prefetch, now);
            }
            Command::Modify(modification) => {
                let (conn, channel) = (modification.conn, modification.channel);
                if let Err(error) = self.modify(*modification, now) {
                    let method = Method::BasicReject(Default::default());
                    self.fail(conn, channel, error.on(&method), now);
                }
            }
            Command::Query { conn, channel, query } => {
                if let Err(error) = self.answer_query(conn, channel, &query, now) {
                    let method = Method::QueueDeclare(Default::default());
                    self.fail(conn, channel, error.on(&method), now);
                }
            }
        }
        self.run_dead_letters(now);
        self.flush_definitions();
    }

    /// The next effect for the driver to carry out.
    pub fn poll_effect(&mut self) -> Option<Effect> {
        self.outbox.pop()
    }

    /// Whether a vhost exists (the session checks this on connection.open).
    pub fn has_vhost(&self, name: &str) -> bool {
        self.vhosts.contains_key(name)
    }

    pub(crate) fn emit(&mut self, effect: Effect) {
        self.outbox.push(effect);
    }

    pub(crate) fn send(&mut self, conn: ConnectionId, channel: ChannelId, method: impl Into<Method>) {
        self.outbox.push(Effect::send(conn, channel, method, None));
    }

    /// The vhost name of a connection; `None` when the connection is unknown (already gone).
    pub(crate) fn vhost_of(&self, conn: ConnectionId) -> Option<String> {
        self.connections.get(&conn).map(|c| c.info.vhost.clone())
    }

    /// Pauses or resumes deliveries to every consumer of a connection; resuming lets their queues
    /// deliver what waited.
    fn pause_deliveries(&mut self, conn: ConnectionId, paused: bool, now: Timestamp) {
        let mut queues = Vec::new();
        for ch in self.connections.channels_of(conn).to_vec() {
            if let Some(channel) = self.connections.channel_mut(conn, ch) {
                channel.paused = paused;
                queues.extend(channel.consumers.iter().map(|(_, q)| *q));
            }
        }
        if !paused {
            queues.sort_unstable();
            queues.dedup();
            for id in queues {
                self.run_queue(id, now);
            }
        }
    }

    /// Closes the channel (soft error) or the whole connection (hard error), releasing what it held.
    pub(crate) fn fail(&mut self, conn: ConnectionId, channel: ChannelId, error: AmqpError, now: Timestamp) {
        tracing::debug!(conn = conn.0, channel = channel.0, code = error.reply_code, text = %error.reply_text, "protocol error");
        if is_connection_error(error.reply_code) {
            self.release_connection(conn, now);
            self.emit(Effect::ConnectionError { conn, error });
        } else {
            self.release_channel(conn, channel, now);
            self.emit(Effect::ChannelError { conn, channel, error });
        }
    }

    /// Forgets a connection: its channels (requeueing their deliveries) and its exclusive queues.
    fn release_connection(&mut self, conn: ConnectionId, now: Timestamp) {
        if !self.connections.contains(&conn) {
            return;
        }
        self.stats.churn.connection_closed(conn);
        let channels = self.connections.channels_of(conn).to_vec();
        for channel in channels {
            self.release_channel(conn, channel, now);
        }
        let exclusive = self.connections.close(conn).unwrap_or_default();
        self.forget_held(conn);
        for id in exclusive {
            // Ids are never reused, so one still here is the queue this connection declared.
            if self.queues.get(&id).is_some_and(|q| q.spec.exclusive_owner == Some(conn)) {
                self.delete_queue(id);
            }
        }
    }

    /// Forgets a channel: cancels its consumers and requeues its unacked deliveries, in order.
    pub(crate) fn release_channel(&mut self, conn: ConnectionId, channel_id: ChannelId, now: Timestamp) {
        let Some(mut channel) = self.connections.close_channel(conn, channel_id) else { return };
        self.stats.churn.channel_closed(conn);
        self.reply_consumers.forget(conn, channel_id);
        self.waiting_gets.forget_channel(conn, channel_id);
        let mut touched: Vec<QueueId> = Vec::new();
        for (tag, queue_id) in channel.consumers.drain(..) {
            if let Some(queue) = self.queues.get_mut(&queue_id) {
                queue.consumers.remove(conn, channel_id, &tag);
                queue.touch(now);
                touched.push(queue_id);
            }
        }
        let mut unacked = std::mem::take(&mut self.scratch.settle);
        channel.take_all(&mut unacked);
        if let crate::channel::Mode::Tx(tx) = &mut channel.mode {
            unacked.extend(tx.settlements.drain(..).map(|(u, _)| u));
        }
        for delivery in unacked.drain(..) {
            if let Some(queue) = self.queues.get_mut(&delivery.queue) {
                queue.forget_delivery(conn, channel_id, &delivery);
                touched.push(delivery.queue);
                // A delivery whose channel or connection died is a failure to RabbitMQ 4.3.
                self.return_to_queue(delivery.queue, delivery.entry, crate::queue::ReturnKind::Failed, now);
            }
        }
        self.scratch.settle = unacked;
        touched.sort_unstable();
        touched.dedup();
        for queue_id in touched {
            if !self.delete_if_unused_auto_delete(queue_id) {
                self.run_queue(queue_id, now);
            }
        }
    }
}

#[cfg(test)]
mod burst_capacity_tests {
    use super::*;

    /// A work queue that a burst grew keeps at most `IDLE_QUEUE_SLOTS` once empty, and is left
    /// alone while it holds anything.
    #[test]
    fn an_emptied_work_queue_gives_back_its_burst() {
        let mut queue: VecDeque<u64> = (0..100_000).collect();
        release_burst_capacity(&mut queue);
        assert!(queue.capacity() >= 100_000, "not empty: kept");
        queue.clear();
        release_burst_capacity(&mut queue);
        assert!(queue.capacity() <= IDLE_QUEUE_SLOTS, "{}", queue.capacity());
    }
}
