//! Handing ready messages to consumers: round robin among those with credit (their own prefetch
//! and their channel's), never an expired message (semantics §1).

use crate::api::Effect;
use crate::broker::Broker;
use crate::channel::Unacked;
use crate::connections::Connections;
use crate::consumer_timeout::DefaultTimeouts;
use crate::firehose::{Firehose, TracedDelivery};
use crate::message_stats::{DeliveryKind, MessageStats};
use crate::outbox::Outbox;
use crate::persist::Persistence;
use crate::queue::entry::Entry;
use crate::queue::visibility::{Deadline, DeliveryRef};
use crate::queue::{Queue, QueueId};
use crate::receipts::{Receipt, ReceiptKey};
use crate::redelivery::decorate;
use crate::time::Timestamp;

impl Broker {
    /// Brings queue `id` up to `now` after anything that may have changed it, one job after the
    /// other: its due timers fire (`fire_due_timers`, timers.rs), its ready messages go to the
    /// consumers with credit (`deliver_ready`), its length limits hold (`enforce_limits`,
    /// enqueue.rs). Then the SQS long polls waiting on it are woken, it is filed under its next
    /// deadline, and the firehose is told of the deliveries.
    ///
    /// One look at the queue first says whether the timers and the limits have work: after
    /// most publishes and acks no timer is due and the queue has no length limit, and those
    /// jobs are not entered at all.
    pub(crate) fn run_queue(&mut self, id: QueueId, now: Timestamp) {
        let (timers_due, limited) = match self.queues.get_mut(&id) {
            Some(queue) => {
                let timers_due = queue.timers_due(now);
                if !timers_due {
                    // Nothing to fire; the delay index's horizon still moves on.
                    queue.delayed.advance_horizon(now);
                }
                (timers_due, queue.drops_head_over_limits())
            }
            // Gone: the jobs below that are not the queue's own still run, as they always did.
            None => (false, false),
        };
        if timers_due {
            self.fire_due_timers(id, now);
        }
        self.deliver_ready(id, now);
        if limited {
            self.enforce_limits(id);
        }
        self.wake_sqs_waiters(id);
        self.reschedule(id);
        self.trace_deliveries(now);
    }

    /// Delivers ready messages of queue `id` while a consumer has credit, round robin.
    fn deliver_ready(&mut self, id: QueueId, now: Timestamp) {
        if let Some((queue, mut sinks)) = self.queue_and_sinks(id) {
            // No record is read here: a paged message is asked for (`take_for_consumer`), so
            // a dispatch delivers at most what is in memory.
            while !queue.ready.is_empty() {
                let rotation = queue.consumers.rotation();
                let Some(at) = pick_consumer(queue, sinks.connections) else { break };
                let expect_ack = queue.consumers.get(at).is_some_and(|c| !c.no_ack);
                let Ok(entry) = queue.take_for_consumer(expect_ack) else {
                    // Nothing in memory yet (its read is out): the consumer's turn is not spent.
                    queue.consumers.rewind(rotation);
                    break;
                };
                deliver(queue, at, entry, &mut sinks, now);
            }
        }
    }

    /// Delivers `entry` to a consumer of queue `id` that can take it now, without queueing it;
    /// gives it back when none can, when ready messages are ahead of it (their read back from
    /// the store is out, `message_reads.rs`): it would overtake them, or when its message is not
    /// in memory (a delayed message that waited paged out): it cannot go out without a read.
    pub(crate) fn deliver_now(&mut self, id: QueueId, entry: Entry, now: Timestamp) -> Option<Entry> {
        let Some((queue, mut sinks)) = self.queue_and_sinks(id) else { return Some(entry) };
        if !queue.ready.is_empty() || entry.resident().is_none() {
            return Some(entry);
        }
        let Some(at) = pick_consumer(queue, sinks.connections) else { return Some(entry) };
        let expect_ack = queue.consumers.get(at).is_some_and(|c| !c.no_ack);
        queue.mark_delivered(&entry, expect_ack);
        deliver(queue, at, entry, &mut sinks, now);
        self.trace_deliveries(now);
        None
    }
}

/// What a delivery from a queue writes to besides the queue itself.
struct Sinks<'b> {
    connections: &'b mut Connections,
    outbox: &'b mut Outbox,
    stats: &'b mut MessageStats,
    persist: &'b mut Persistence,
    firehose: &'b mut Firehose,
    receipts: &'b ReceiptKey,
    default_timeouts: &'b mut DefaultTimeouts,
}

impl Broker {
    /// Queue `id` and, borrowed beside it, what its deliveries write to.
    fn queue_and_sinks(&mut self, id: QueueId) -> Option<(&mut Queue, Sinks<'_>)> {
        let queue = self.queues.get_mut(&id)?;
        let sinks = Sinks {
            connections: &mut self.connections,
            outbox: &mut self.outbox,
            stats: &mut self.stats.messages,
            persist: &mut self.persist,
            firehose: &mut self.firehose,
            receipts: &self.receipts,
            default_timeouts: &mut self.default_timeouts,
        };
        Some((queue, sinks))
    }
}

/// The next consumer, round robin, whose own and whose channel's prefetch allow a delivery.
fn pick_consumer(queue: &mut Queue, connections: &Connections) -> Option<usize> {
    let single_active = queue.args.single_active_consumer;
    queue.consumers.pick(single_active, |c| {
        c.has_credit()
            && connections
                .channel(c.conn, c.channel)
                // A channel at its global prefetch holds no-ack consumers too (rabbit_limiter's
                // can_send; the Java client's `QosTests#noAckObeysLimit`): their deliveries just
                // do not count against it.
                .is_some_and(|ch| !ch.paused && ch.has_credit())
    })
}

/// Sends `entry` to consumer `at` of `queue` as basic.deliver, tracking it on the channel when it
/// awaits an ack (and in the queue's visibility index when a visibility or consumer timeout of its
/// own applies, semantics §4).
/// Tells the store what the delivery means for a persisted message (`Persistence::handed_out`),
/// and notes the delivery for the firehose.
fn deliver(queue: &mut Queue, at: usize, entry: Entry, sinks: &mut Sinks<'_>, now: Timestamp) {
    let queue_id = queue.id;
    let no_ack = queue.consumers.get(at).is_some_and(|consumer| consumer.no_ack);
    let group = Persistence::marks_delivered(&entry, no_ack).then(|| queue.stored_group(&entry)).flatten();
    let consumer = queue.consumers.get_mut(at);
    let channel =
        consumer.as_ref().and_then(|consumer| sinks.connections.channel_mut(consumer.conn, consumer.channel));
    let (Some(consumer), Some(channel)) = (consumer, channel) else {
        // Nobody to hand it to (a bug: pick_consumer just chose them): it leaves the queue.
        if let Some(msg_id) = entry.persist_id() {
            sinks.persist.settle(queue_id, msg_id);
        }
        return;
    };
    sinks.persist.handed_out(queue_id, &entry, consumer.no_ack, group);
    let tag = channel.next_tag();
    let kind = DeliveryKind::of_consumer(consumer.no_ack);
    for counters in [&mut queue.counters.messages, &mut channel.stats, &mut *sinks.stats] {
        counters.delivered(kind, entry.redelivered);
    }
    let delivery = DeliveryRef { conn: consumer.conn, channel: consumer.channel, tag };
    let deadline = if consumer.no_ack {
        None
    } else {
        let visibility = consumer.visibility_timeout_ms.or(queue.args.visibility_timeout_ms);
        let consumer_timeout = consumer.consumer_timeout_ms.or(queue.args.consumer_timeout_ms);
        Deadline::of_delivery(visibility, consumer_timeout, now)
    };
    let receipt = Receipt { queue: queue_id, delivery, channel_opening: channel.opening, entry: entry.seq };
    let receipt_handle = deadline.filter(Deadline::has_receipt).map(|_| sinks.receipts.issue(&receipt));
    let message = decorate(&entry, receipt_handle);
    let (conn, channel_id, redelivered) = (consumer.conn, consumer.channel, entry.redelivered);
    let consumer_tag = consumer.tag.clone();
    if !consumer.no_ack {
        consumer.unacked += 1;
        channel.track(Unacked {
            tag,
            queue: queue_id,
            entry,
            consumer_tag: Some(consumer.tag.clone()),
            delivered_at: now,
            deadline,
        });
        match deadline {
            Some(deadline) => queue.visibility.insert(deadline.at, delivery),
            None => sinks.default_timeouts.delivered(now),
        }
    }
    let traced = || TracedDelivery {
        vhost: queue.vhost.clone(),
        queue: queue.name().clone(),
        message: message.clone(),
        redelivered,
        conn,
        channel: channel_id,
    };
    sinks.firehose.note_delivery(traced, &queue.vhost);
    sinks.outbox.push(Effect::Deliver {
        conn,
        channel: channel_id,
        consumer_tag,
        delivery_tag: tag,
        redelivered,
        message,
    });
}
