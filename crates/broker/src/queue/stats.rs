//! What a queue reports about itself: counts for declare-ok, the management API and metrics.

use crate::broker::Broker;
use crate::exchange::{Destination, ExchangeSpec};
use crate::queue::args::QueueType;
use crate::queue::{DelayedInfo, Queue, QueueCounters, QueueId};
use crate::time::Timestamp;

/// A snapshot of one queue.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueueStats {
    pub vhost: String,
    pub name: String,
    pub durable: bool,
    pub auto_delete: bool,
    pub exclusive: bool,
    pub queue_type: QueueType,
    /// Ready messages (deliverable now).
    pub messages_ready: usize,
    /// Delivered, not yet settled.
    pub messages_unacked: usize,
    /// Body bytes of the ready messages.
    pub message_bytes_ready: usize,
    /// Body bytes of the unsettled deliveries.
    pub message_bytes_unacked: usize,
    /// Ready messages held in memory (the rest are paged out, ADR 0007) and their body bytes.
    /// Unsettled deliveries are always in memory.
    pub messages_ready_ram: usize,
    pub message_bytes_ready_ram: usize,
    /// Ready and unsettled messages that are in the store (persistent, in a durable queue), and
    /// their body bytes: RabbitMQ's `messages_persistent`, `message_bytes_persistent`.
    pub messages_persistent: usize,
    pub message_bytes_persistent: usize,
    /// Waiting for their due time (semantics §3, §7): neither ready nor unacked.
    pub messages_delayed: usize,
    pub message_bytes_delayed: usize,
    /// Of those, the ones held on disk only until shortly before they are due (ADR 0013).
    pub messages_delayed_on_disk: usize,
    /// When the next delayed message falls due.
    pub next_due: Option<Timestamp>,
    /// Ready messages with a TTL deadline, and the first and last of those deadlines (semantics
    /// §1): when the queue's next and last expiries happen if nothing consumes them first.
    pub messages_with_ttl: usize,
    pub next_expiry: Option<Timestamp>,
    pub last_expiry: Option<Timestamp>,
    pub consumers: usize,
    pub counters: QueueCounters,
    /// A quorum queue's ready messages per priority, highest first, empty priorities left out
    /// (RabbitMQ 4.3's `messages_by_priority`); empty for a classic queue.
    pub messages_by_priority: Vec<(u8, usize)>,
}

impl QueueStats {
    pub(crate) fn of(queue: &Queue) -> Self {
        let ready = queue.ready.tally();
        let in_queue = ready.plus(queue.unacked);
        let (messages_ready_ram, message_bytes_ready_ram) = queue.ready.in_memory();
        QueueStats {
            vhost: queue.vhost.clone(),
            name: queue.name().as_str().into_owned(),
            durable: queue.spec.durable,
            auto_delete: queue.spec.auto_delete,
            exclusive: queue.spec.exclusive_owner.is_some(),
            queue_type: queue.args.queue_type,
            messages_ready: ready.messages,
            messages_unacked: queue.unacked.messages,
            message_bytes_ready: ready.bytes,
            message_bytes_unacked: queue.unacked.bytes,
            messages_ready_ram,
            message_bytes_ready_ram,
            messages_persistent: in_queue.persistent,
            message_bytes_persistent: in_queue.persistent_bytes,
            messages_delayed: queue.delayed.message_count(),
            message_bytes_delayed: queue.delayed.body_bytes(),
            messages_delayed_on_disk: queue.delayed.far_message_count(),
            next_due: queue.delayed.next_due(),
            messages_with_ttl: queue.ready.deadlines().message_count(),
            next_expiry: queue.ready.deadlines().next(),
            last_expiry: queue.ready.deadlines().last(),
            consumers: queue.consumer_count(),
            counters: queue.counters,
            messages_by_priority: match queue.args.queue_type {
                QueueType::Quorum => queue.ready.counts_by_priority(),
                QueueType::Classic => Vec::new(),
            },
        }
    }
}

/// RabbitMQ's sums over the fields above (its `rabbit_variable_queue` definitions): delayed
/// messages are in none of them (RabbitMQ holds them in the delayed exchange, not the queue).
impl QueueStats {
    /// Ready and unacknowledged: RabbitMQ's `messages`, the queue depth.
    pub fn messages(&self) -> usize {
        self.messages_ready + self.messages_unacked
    }

    /// Body bytes of ready and unacknowledged messages: `message_bytes`.
    pub fn message_bytes(&self) -> usize {
        self.message_bytes_ready + self.message_bytes_unacked
    }

    /// Ready and unacknowledged messages in memory: `messages_ram`.
    pub fn messages_ram(&self) -> usize {
        self.messages_ready_ram + self.messages_unacked
    }

    /// Their body bytes: `message_bytes_ram`.
    pub fn message_bytes_ram(&self) -> usize {
        self.message_bytes_ready_ram + self.message_bytes_unacked
    }

    /// Ready messages whose bodies are only in the store: `messages_paged_out`.
    pub fn messages_paged_out(&self) -> usize {
        self.messages_ready - self.messages_ready_ram
    }

    /// Their body bytes: `message_bytes_paged_out`.
    pub fn message_bytes_paged_out(&self) -> usize {
        self.message_bytes_ready - self.message_bytes_ready_ram
    }
}

/// A binding as listings show it: source exchange, destination, key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BindingInfo {
    pub source: String,
    /// `queue` or `exchange`.
    pub destination_kind: &'static str,
    pub destination: String,
    pub routing_key: String,
}

impl Broker {
    /// The statistics of the queues of `keys` still there (`queue_keys`; a slice of them at a
    /// time: `admin/slices.rs`).
    pub fn queue_stats_of(&self, keys: &[QueueId]) -> Vec<QueueStats> {
        keys.iter().filter_map(|id| self.queues.get(id).map(QueueStats::of)).collect()
    }

    /// One queue's statistics.
    pub fn queue_stats(&self, vhost: &str, name: &str) -> Option<QueueStats> {
        let id = self.vhosts.get(vhost)?.queue_id(name)?;
        self.queues.get(&id).map(QueueStats::of)
    }

    /// The first `limit` delayed messages of a queue, in due order, without taking them.
    /// It reads the far tier's spill files where it runs (tests and tools; the HTTP API's
    /// listings read them off the broker's thread: `admin/delayed_listing.rs`).
    pub fn list_delayed(&self, vhost: &str, name: &str, limit: usize) -> Option<Vec<DelayedInfo>> {
        let id = self.vhosts.get(vhost)?.queue_id(name)?;
        self.queues.get(&id).map(|q| q.delayed.list(limit))
    }

    /// Every queue's statistics, sorted by vhost and name.
    pub fn list_queues(&self) -> Vec<QueueStats> {
        let mut all = self.queue_stats_of(&self.queue_keys(None));
        all.sort_by(|a, b| (&a.vhost, &a.name).cmp(&(&b.vhost, &b.name)));
        all
    }

    /// Every exchange of a vhost, sorted by name.
    pub fn list_exchanges(&self, vhost: &str) -> Vec<ExchangeSpec> {
        let mut all: Vec<ExchangeSpec> = self
            .vhosts
            .get(vhost)
            .map(|v| v.exchanges.values().map(|x| x.spec.clone()).collect())
            .unwrap_or_default();
        all.sort_by(|a, b| a.name.cmp(&b.name));
        all
    }

    /// Every binding of a vhost, in source order.
    pub fn list_bindings(&self, vhost: &str) -> Vec<BindingInfo> {
        let Some(v) = self.vhosts.get(vhost) else { return Vec::new() };
        let mut sources: Vec<_> = v.exchanges.values().collect();
        sources.sort_by(|a, b| a.name().cmp(b.name()));
        let mut out = Vec::new();
        for exchange in sources {
            for binding in exchange.bindings() {
                let (destination_kind, destination) = match &binding.destination {
                    Destination::Queue(id) => (
                        "queue",
                        self.queues.get(id).map(|q| q.name().as_str().into_owned()).unwrap_or_default(),
                    ),
                    Destination::Exchange(name) => ("exchange", name.as_str().into_owned()),
                };
                out.push(BindingInfo {
                    source: exchange.name().as_str().into_owned(),
                    destination_kind,
                    destination,
                    routing_key: binding.routing_key.as_str().into_owned(),
                });
            }
        }
        out
    }
}
