//! The SQS endpoint's requests: sends, receives, deletes and visibility changes through the
//! vhost's SQS gateway (`admin/sqs_gateway.rs`), long polls' waits, queues made, changed,
//! purged and deleted, and message-move tasks' steps.

use std::sync::Arc;

use hourglass_wire::{FieldTable, FieldValue, QueueDeclare, ShortStr};

use super::admin_channel::AsUser;
use super::topology::queue_arguments;
use super::{sealed::Sealed, Question, Request};
pub use crate::admin::SqsOutgoing;
use crate::admin::{MoveStep, MoveTarget, SqsGatewayError, SqsReceived, SqsSent};
use crate::api::AmqpError;
use crate::broker::Broker;
use crate::notices::Ticket;
use crate::permissions::{Access, Permissions, Resource};
use crate::redelivery::VisibilityError;
use crate::time::Timestamp;

/// Sends each message to a queue, in order: each one's outcome.
pub struct SqsSendBatch {
    pub vhost: String,
    pub queue: String,
    pub messages: Vec<SqsOutgoing>,
}

impl Sealed for SqsSendBatch {}
impl Request for SqsSendBatch {
    type Answer = Vec<Result<SqsSent, SqsGatewayError>>;
    fn apply(self, broker: &mut Broker, now: Timestamp) -> Self::Answer {
        let (vhost, queue) = (&self.vhost, &self.queue);
        let send = |message: SqsOutgoing| broker.sqs_send(vhost, queue, message, now);
        self.messages.into_iter().map(send).collect()
    }
}

/// Deletes the message of each receipt handle: each handle with its outcome.
pub struct SqsDeleteBatch {
    pub vhost: String,
    pub queue: String,
    pub handles: Vec<String>,
}

impl Sealed for SqsDeleteBatch {}
impl Request for SqsDeleteBatch {
    type Answer = Vec<(String, Result<(), SqsGatewayError>)>;
    fn apply(self, broker: &mut Broker, now: Timestamp) -> Self::Answer {
        let (vhost, queue) = (&self.vhost, &self.queue);
        let delete = |handle: String| {
            let deleted = broker.sqs_delete(vhost, queue, &handle, now);
            (handle, deleted)
        };
        self.handles.into_iter().map(delete).collect()
    }
}

/// Changes the visibility timeout of each receipt handle's delivery to its milliseconds: each
/// change with its outcome.
pub struct ChangeVisibilityBatch {
    pub vhost: String,
    pub queue: String,
    pub changes: Vec<(String, u64)>,
}

impl Sealed for ChangeVisibilityBatch {}
impl Request for ChangeVisibilityBatch {
    type Answer = Vec<((String, u64), Result<(), VisibilityError>)>;
    fn apply(self, broker: &mut Broker, now: Timestamp) -> Self::Answer {
        let (vhost, queue) = (&self.vhost, &self.queue);
        let change = |(handle, ms): (String, u64)| {
            let changed = broker.change_visibility(vhost, queue, &handle, ms, now);
            ((handle, ms), changed)
        };
        self.changes.into_iter().map(change).collect()
    }
}

/// ReceiveMessage: up to `max` messages, invisible for `visibility_ms` (the queue's own
/// timeout when `None`).
pub struct SqsReceive {
    pub vhost: String,
    pub queue: String,
    pub max: usize,
    pub visibility_ms: Option<u64>,
}

/// What a receive took, and how long a receive from the queue waits by default (its
/// `ReceiveMessageWaitTimeSeconds`): a long poll learns it from its first receive.
pub struct SqsReceipt {
    pub messages: Vec<SqsReceived>,
    pub wait_s: Option<u64>,
    /// The message the queue would hand out next is paged out and being read off the broker's
    /// thread (`message_reads.rs`, `Queue::receive_awaits_read`):
    /// it has messages this receive could not take yet. A wait ([`SqsWait`]) is woken once the
    /// read is answered.
    pub reading: bool,
}

impl Sealed for SqsReceive {}
impl Request for SqsReceive {
    type Answer = Result<SqsReceipt, SqsGatewayError>;
    fn apply(self, broker: &mut Broker, now: Timestamp) -> Self::Answer {
        let messages = broker.sqs_receive(&self.vhost, &self.queue, self.max, self.visibility_ms, now)?;
        let reading = messages.len() < self.max && broker.sqs_awaits_read(&self.vhost, &self.queue);
        Ok(SqsReceipt { messages, wait_s: broker.sqs_receive_wait_s(&self.vhost, &self.queue), reading })
    }
}

/// A long poll waits for a message in a queue: sent as
/// [`Job::wait_for_sqs_message`](super::Job::wait_for_sqs_message), which gives it its ticket.
pub struct SqsWait {
    pub vhost: String,
    pub queue: String,
}

/// Takes a long poll's wait back (nothing for one already woken).
pub struct SqsUnwait {
    pub ticket: Ticket,
}

impl Sealed for SqsUnwait {}
impl Request for SqsUnwait {
    type Answer = ();
    fn apply(self, broker: &mut Broker, _: Timestamp) {
        broker.sqs_unwait(self.ticket)
    }
}

/// What [`DeclareSqsQueue`] found or did.
pub enum SqsDeclared {
    /// The queue was there already (nothing declared): its arguments, to compare attributes with.
    Existing(FieldTable),
    /// The vhost holds its limit of this many queues.
    OverLimit(u64),
    /// The queue was declared, or the broker refused it.
    Declared(Result<(), AmqpError>),
}

/// CreateQueue: the queue's arguments when it exists, else its declaration as the caller.
pub struct DeclareSqsQueue {
    pub who: AsUser,
    pub declare: QueueDeclare,
}

impl Sealed for DeclareSqsQueue {}
impl Request for DeclareSqsQueue {
    type Answer = SqsDeclared;
    fn apply(self, broker: &mut Broker, now: Timestamp) -> SqsDeclared {
        let vhost = &self.who.vhost;
        if let Some(existing) = queue_arguments(broker, vhost, &self.declare.queue.as_str()) {
            return SqsDeclared::Existing(existing);
        }
        if let Some(limit) = broker.queue_limit_reached(vhost) {
            return SqsDeclared::OverLimit(limit);
        }
        let declare = self.declare;
        SqsDeclared::Declared(self.who.on_channel(broker, now, |ch| ch.call(declare)).map(|_| ()))
    }
}

/// PurgeQueue, as the caller: the ready messages and those received and not deleted
/// (`AdminChannel::purge_with_sqs_in_flight`).
pub struct PurgeSqsQueue {
    pub who: AsUser,
    pub queue: ShortStr,
}

impl Sealed for PurgeSqsQueue {}
impl Request for PurgeSqsQueue {
    type Answer = Result<(), AmqpError>;
    fn apply(self, broker: &mut Broker, now: Timestamp) -> Self::Answer {
        let queue = self.queue;
        self.who.on_channel(broker, now, |ch| ch.purge_with_sqs_in_flight(queue)).map(|_| ())
    }
}

/// Changes some of a queue's arguments in place (`None`: removed; `Broker::sqs_set_arguments`).
pub struct ChangeSqsArguments {
    pub vhost: String,
    pub queue: String,
    pub changes: Vec<(String, Option<FieldValue>)>,
}

impl Sealed for ChangeSqsArguments {}
impl Request for ChangeSqsArguments {
    type Answer = Result<(), SqsGatewayError>;
    fn apply(self, broker: &mut Broker, now: Timestamp) -> Self::Answer {
        broker.sqs_set_arguments(&self.vhost, &self.queue, self.changes, now)
    }
}

/// ListDeadLetterSourceQueues: the queues that dead-letter into this one.
pub struct SqsDeadLetterSources {
    pub vhost: String,
    pub queue: String,
}

impl Sealed for SqsDeadLetterSources {}
impl Question for SqsDeadLetterSources {
    type Answer = Result<Vec<String>, SqsGatewayError>;
    fn answer(self, broker: &Broker, _: Timestamp) -> Self::Answer {
        broker.sqs_dead_letter_sources(&self.vhost, &self.queue)
    }
}

/// Every queue that holds argument `key`: its vhost, name and the argument's value.
pub struct QueuesWithArgument {
    pub key: String,
}

impl Sealed for QueuesWithArgument {}
impl Question for QueuesWithArgument {
    type Answer = Vec<(String, String, FieldValue)>;
    fn answer(self, broker: &Broker, _: Timestamp) -> Self::Answer {
        broker.sqs_queues_with_argument(&self.key)
    }
}

/// One step of a message-move task: up to `max` messages from `source` to `destination`
/// (`None`: each back to the queue it was dead-lettered from), each only into a queue of
/// `user_vhost` that `permissions` (the task user's there) allow writing.
pub struct MoveMessages {
    pub vhost: String,
    pub source: String,
    pub destination: Option<(String, String)>,
    pub user_vhost: String,
    pub permissions: Arc<Permissions>,
    pub max: usize,
}

impl Sealed for MoveMessages {}
impl Request for MoveMessages {
    type Answer = Result<MoveStep, SqsGatewayError>;
    fn apply(self, broker: &mut Broker, now: Timestamp) -> Self::Answer {
        let target = match &self.destination {
            Some((vhost, name)) => MoveTarget::Queue { vhost, name },
            None => MoveTarget::Origin,
        };
        let may_write = |queue_vhost: &str, queue: &str| {
            queue_vhost == self.user_vhost && self.permissions.allows(Access::Write, Resource::Queue, queue)
        };
        broker.sqs_move(&self.vhost, &self.source, target, &may_write, self.max, now)
    }
}
