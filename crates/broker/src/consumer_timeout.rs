//! RabbitMQ's consumer timeout (semantics §4): a delivery for manual ack not settled within the
//! timeout comes back to its queue (a return, not a failure: RabbitMQ 4.3's delivery limit does
//! not count it), and its consumer hears of it:
//! - `notify_consumer` (RabbitMQ 4.4's default): a client that announced `consumer_cancel_notify`
//!   gets `basic.cancel` for the consumer and keeps its channel; the consumer's other deliveries
//!   stay with the channel, to be acked or to run out in turn, quietly;
//! - otherwise, a basic.get delivery, a consumer already cancelled by the client, or
//!   `close_channel` (RabbitMQ 3.x's behaviour): the channel is closed with 406;
//! - a consumer of an AMQP 1.0 link (its channel is the link's): the link is told which delivery
//!   timed out (`Effect::TimedOut`), releases it to the client, and goes on consuming (RabbitMQ
//!   4.3's behaviour for AMQP 1.0).
//!
//! Where the timeout comes from: the consumer's `x-consumer-timeout`, else the lower of the
//! queue's argument and policy (`policy/merge.rs`), else the broker's `consumer_timeout` (30
//! minutes by default, as RabbitMQ's; none switches it off). A timeout of the consumer or queue
//! is a deadline in the queue's visibility index (`queue/visibility.rs`); the broker default is
//! found by `sweep_default_timeouts` in each channel's deliveries, oldest first.

use hourglass_wire::{BasicCancel, ShortStr};

use crate::api::{Effect, AMQP_1_0};
use crate::broker::Broker;
use crate::errors;
use crate::queue::args::QueueArgs;
use crate::queue::consumers::Consumer;
use crate::queue::visibility::DeliveryRef;
use crate::time::Timestamp;

/// RabbitMQ's default `consumer_timeout`: 30 minutes.
pub const DEFAULT_CONSUMER_TIMEOUT_MS: u64 = 1_800_000;

/// Sweeps for the default timeout run at most this often: a 30-minute timeout may run a little
/// late, never early, and a channel whose deliveries are acked just in time costs one sweep per
/// this much time at most.
const MIN_SWEEP_SPACING_MS: u64 = 100;

/// What the consumer hears when its delivery times out (RabbitMQ 4.4's `consumer_timeout_response`).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub enum TimeoutResponse {
    /// basic.cancel to a client that announced `consumer_cancel_notify`, the channel open.
    #[default]
    NotifyConsumer,
    /// The channel is closed with 406, as RabbitMQ 3.x does.
    CloseChannel,
}

/// The broker-wide consumer timeout settings.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct ConsumerTimeoutConfig {
    /// The timeout of deliveries with none of their own; `None`: they never time out.
    pub default_ms: Option<u64>,
    pub response: TimeoutResponse,
}

impl Default for ConsumerTimeoutConfig {
    fn default() -> Self {
        ConsumerTimeoutConfig {
            default_ms: Some(DEFAULT_CONSUMER_TIMEOUT_MS),
            response: TimeoutResponse::default(),
        }
    }
}

/// When the deliveries under the default timeout are next looked at.
#[derive(Debug)]
pub(crate) struct DefaultTimeouts {
    config: ConsumerTimeoutConfig,
    next_sweep: Option<Timestamp>,
}

impl DefaultTimeouts {
    pub fn new(config: ConsumerTimeoutConfig) -> Self {
        DefaultTimeouts { config, next_sweep: None }
    }

    /// A delivery under the default timeout was made at `at`.
    pub fn delivered(&mut self, at: Timestamp) {
        if let (Some(ms), None) = (self.config.default_ms, self.next_sweep) {
            self.next_sweep = Some(at.saturating_add_millis(ms));
        }
    }

    /// The consumer timeout (ms) deliveries to `consumer` of a queue with `args` run under, if any:
    /// the consumer's, else the queue's, else the broker's unless a visibility timeout governs
    /// them instead (`Deadline::of_delivery` decides per delivery). Reported for a no-ack
    /// consumer too, as RabbitMQ's management API does, though nothing it gets waits for an ack.
    pub fn of_consumer(&self, consumer: &Consumer, args: &QueueArgs) -> Option<u64> {
        let own = consumer.consumer_timeout_ms.or(args.consumer_timeout_ms);
        self.effective(own, consumer.visibility_timeout_ms.or(args.visibility_timeout_ms))
    }

    /// The consumer timeout (ms) a queue with `args` gives deliveries to consumers without one of
    /// their own, and to basic.get.
    pub fn of_queue(&self, args: &QueueArgs) -> Option<u64> {
        self.effective(args.consumer_timeout_ms, args.visibility_timeout_ms)
    }

    fn effective(&self, own: Option<u64>, visibility: Option<u64>) -> Option<u64> {
        match (own, visibility) {
            (Some(ms), _) => Some(ms),
            (None, Some(_)) => None,
            (None, None) => self.config.default_ms,
        }
    }

    /// When `sweep_default_timeouts` has work to do, if ever.
    pub fn next(&self) -> Option<Timestamp> {
        self.next_sweep
    }
}

impl Broker {
    /// Times out every delivery under the default consumer timeout made `default_ms` or longer
    /// before `now`, and files the next sweep at the oldest one left.
    pub(crate) fn sweep_default_timeouts(&mut self, now: Timestamp) {
        let Some(due_at) = self.default_timeouts.next_sweep else { return };
        if due_at > now {
            return;
        }
        self.default_timeouts.next_sweep = None;
        let Some(ms) = self.default_timeouts.config.default_ms else { return };
        let cutoff = now.saturating_sub_millis(ms);
        let mut due: Vec<DeliveryRef> = Vec::new();
        let mut tags = Vec::new();
        let mut oldest_left: Option<Timestamp> = None;
        for (&(conn, channel), state) in self.connections.channels() {
            tags.clear();
            if let Some(made) = state.made_by(cutoff, &mut tags) {
                oldest_left = Some(oldest_left.map_or(made, |o| o.min(made)));
            }
            due.extend(tags.iter().map(|&tag| DeliveryRef { conn, channel, tag }));
        }
        let mut returned_to = std::mem::take(&mut self.scratch.queues);
        returned_to.clear();
        for delivery in due {
            if let Some(timed_out) = self.take_back_timed_out(delivery, now) {
                if !returned_to.contains(&timed_out.queue) {
                    returned_to.push(timed_out.queue);
                }
                self.consumer_timed_out(delivery, timed_out.consumer_tag, ms, now);
            }
        }
        // Each message is back in its queue, ready or held for a back-off: the queue delivers
        // it and files its timer (the sweep runs outside every queue's own timers).
        for &id in &returned_to {
            self.run_queue(id, now);
        }
        self.scratch.queues = returned_to;
        if let Some(made) = oldest_left {
            let next = made.saturating_add_millis(ms).max(now.saturating_add_millis(MIN_SWEEP_SPACING_MS));
            self.default_timeouts.next_sweep = Some(next);
        }
    }

    /// `delivery`, to consumer `consumer_tag` (`None`: a basic.get), ran out its consumer
    /// timeout of `timeout_ms` and is back in its queue: an AMQP 1.0 link is told and goes on,
    /// else the consumer is cancelled or the channel closed (see the module doc).
    pub(crate) fn consumer_timed_out(
        &mut self,
        delivery: DeliveryRef,
        consumer_tag: Option<ShortStr>,
        timeout_ms: u64,
        now: Timestamp,
    ) {
        let DeliveryRef { conn, channel: ch, tag: delivery_tag } = delivery;
        let Some(info) = self.connections.get(&conn).map(|c| &c.info) else { return };
        let amqp1 = info.login.protocol == AMQP_1_0;
        let cancel_notify = info.capabilities.consumer_cancel_notify;
        let Some(channel) = self.connections.channel_mut(conn, ch) else { return };
        if amqp1 && consumer_tag.is_some() {
            tracing::info!(conn = conn.0, channel = ch.0, timeout_ms, "delivery released: consumer timeout");
            self.emit(Effect::TimedOut { conn, channel: ch, delivery_tag });
            return;
        }
        if let Some(tag) = consumer_tag {
            if channel.lost_to_timeout(&tag) {
                return;
            }
            let notify =
                self.default_timeouts.config.response == TimeoutResponse::NotifyConsumer && cancel_notify;
            let consuming = channel.consumers.iter().position(|(t, _)| t == &tag);
            if let (true, Some(at)) = (notify, consuming) {
                let (tag, queue) = channel.consumers.remove(at);
                channel.note_timed_out_consumer(tag.clone());
                tracing::warn!(conn = conn.0, channel = ch.0, consumer = %tag, timeout_ms, "consumer timed out; cancelled");
                if let Some(q) = self.queues.get_mut(&queue) {
                    q.consumers.remove(conn, ch, &tag);
                    q.touch(now);
                }
                let cancel = BasicCancel { consumer_tag: tag, nowait: true };
                self.emit(Effect::send(conn, ch, cancel, None));
                if !self.delete_if_unused_auto_delete(queue) {
                    self.reschedule(queue);
                }
                return;
            }
        }
        tracing::warn!(
            conn = conn.0,
            channel = ch.0,
            timeout_ms,
            "delivery acknowledgement timed out; closing the channel"
        );
        let error = errors::precondition_failed(format!(
            "delivery acknowledgement on channel {} timed out. Timeout value used: {timeout_ms} ms. \
             This timeout value can be configured, see consumers doc guide to learn more",
            ch.0
        ));
        self.fail(conn, ch, error, now);
    }
}
