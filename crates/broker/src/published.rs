//! The end every front end's publish shares (issue 41, "one publish pipeline"): AMQP's
//! basic.publish (`methods/basic.rs`, and the HTTP API's publish through the admin channel) and
//! SQS's SendMessage (`admin/sqs_gateway.rs`) each decide the queues a message goes to; from there
//! it is traced, counted on each queue and enqueued here, and counted broker-wide, the same way
//! for all of them.

use std::sync::Arc;

use bytes::Bytes;

use crate::api::{ChannelId, ConnectionId};
use crate::broker::Broker;
use crate::enqueue::Enqueued;
use crate::message::Message;
use crate::message_stats::{Confirm, PublishOutcome};
use crate::queue::QueueId;
use crate::time::Timestamp;

/// A publish the vhost's firehose traces: the vhost, and the channel it came on.
pub(crate) struct Traced<'a> {
    pub vhost: &'a str,
    pub conn: ConnectionId,
    pub channel: ChannelId,
}

impl Broker {
    /// Traces `message` when `traced` says so (before the queues take it: its trace comes
    /// before any delivery's, as RabbitMQ's), then enqueues it into each of `targets`, counting
    /// the publish on each. `routing_keys`: the CC/BCC keys it was routed by, for the trace.
    /// `delay_ms`: the delay it brought (semantics §3). The outcome: `Rejected` if a queue
    /// refused it, else a duplicate's original if a queue found one, else `Accepted`.
    pub(crate) fn enqueue_published(
        &mut self,
        traced: Option<Traced<'_>>,
        message: &Arc<Message>,
        (routing_keys, targets): (&[Bytes], &[QueueId]),
        delay_ms: Option<u64>,
        now: Timestamp,
    ) -> Enqueued {
        if let Some(Traced { vhost, conn, channel }) = traced {
            self.trace_publish(vhost, conn, channel, message, routing_keys, targets, now);
        }
        let mut outcome = Enqueued::Accepted;
        for &id in targets {
            if let Some(queue) = self.queues.get_mut(&id) {
                queue.counters.messages.publish += 1;
            }
            match self.enqueue(id, message.clone(), now, delay_ms) {
                Enqueued::Rejected => outcome = Enqueued::Rejected,
                Enqueued::Duplicate(original) if outcome == Enqueued::Accepted => {
                    outcome = Enqueued::Duplicate(original);
                }
                _ => {}
            }
        }
        outcome
    }

    /// Counts a publish broker-wide: its outcome and confirm, and its body's size.
    pub(crate) fn count_published(&mut self, outcome: PublishOutcome, confirm: Confirm, body_size: usize) {
        self.stats.messages.published(outcome, confirm);
        self.stats.sizes.observe(body_size);
    }
}
