//! What the SQS endpoint received and has not deleted (issue 26). SQS has no connections: a
//! message received over SQS stays invisible for its visibility timeout, and whoever holds its
//! receipt handle may delete it or change that timeout. Here such deliveries are held by a
//! gateway: one synthetic connection per vhost with one channel, opened on first use, that gets
//! messages for manual ack under a visibility timeout and acks them on DeleteMessage. So an SQS
//! receive is an ordinary delivery: counted, traced, redelivered with `x-delivery-count` when its
//! time runs out (`redelivery.rs`), steered by `change_visibility` like any other.
//!
//! Leaves to the SQS crate: who may do what (the user's permissions are checked there, as the
//! gateway holds every vhost's deliveries for every user), SQS's limits and names.

use std::collections::HashMap;

use indexmap::IndexSet;
use std::sync::Arc;

use hourglass_wire::{ChannelOpen, FieldTable, FieldValue, ShortStr};

use crate::api::{ChannelId, Command, ConnectionId};
use crate::broker::Broker;
use crate::channel::Settlement;
use crate::message::Message;
use crate::methods::HandOut;
use crate::notices::{Notice, Ticket};
use crate::persist::Changed;
use crate::queue::args::QueueArgs;
use crate::queue::{dead_letter, message_groups};
use crate::queue::{QueueId, ReturnKind};
use crate::time::Timestamp;

use super::sqs_send::{SendRefused, SequenceNumbers};

/// The peer address gateway connections show in listings.
pub const SQS_GATEWAY_PEER: &str = "sqs-gateway";
/// The user gateway connections show in listings.
pub const SQS_GATEWAY_USER: &str = "sqs-gateway";
/// Gateway connection ids count down from here: client ids count up from 1 and the admin
/// connection is `u64::MAX`.
const FIRST_GATEWAY_ID: u64 = u64::MAX - 1;
pub(super) const GATEWAY_CHANNEL: ChannelId = ChannelId(1);

/// The gateway connection of each vhost that has one, and the long polls waiting for queues.
pub(crate) struct SqsGateways {
    by_vhost: HashMap<String, ConnectionId>,
    next_id: u64,
    /// Long polls by the queue they wait for, each by its ticket (`Broker::sqs_wait`), and the
    /// queue of each: waking a queue's and taking one back cost no scan of the others.
    waiters: HashMap<QueueId, IndexSet<Ticket>>,
    waiter_queues: HashMap<Ticket, QueueId>,
    /// FIFO messages' sequence numbers (`sqs_send.rs`).
    pub(super) sequence_numbers: SequenceNumbers,
}

impl std::fmt::Debug for SqsGateways {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let waiting = self.waiter_queues.len();
        f.debug_struct("SqsGateways").field("by_vhost", &self.by_vhost).field("waiting", &waiting).finish()
    }
}

impl Default for SqsGateways {
    fn default() -> Self {
        SqsGateways {
            by_vhost: HashMap::new(),
            next_id: FIRST_GATEWAY_ID,
            waiters: HashMap::new(),
            waiter_queues: HashMap::new(),
            sequence_numbers: SequenceNumbers::default(),
        }
    }
}

impl SqsGateways {
    /// Whether `conn` is a gateway connection.
    pub fn holds(&self, conn: ConnectionId) -> bool {
        conn.0 >= self.next_id && conn.0 <= FIRST_GATEWAY_ID
    }
}

/// A message received over SQS.
#[derive(Clone, Debug)]
pub struct SqsReceived {
    pub receipt_handle: String,
    /// As delivered (with `x-delivery-count` on a redelivery).
    pub message: Arc<Message>,
    /// Times it has been received, this one included (SQS's `ApproximateReceiveCount`).
    pub receive_count: u32,
    /// The queue entry's id, unique in the broker and kept across restarts for a persisted
    /// message (what names a message that has no `message_id` property).
    pub entry_id: u64,
    /// When it became ready in the queue (Unix ms): the `SentTimestamp` of a message that was
    /// sent without one (published over AMQP without a `timestamp`; after a delay, when it fell
    /// due).
    pub ready_ms: Option<u64>,
}

/// How long a message being moved is held before it would come back (it is moved within the
/// same job, so this never runs out in practice).
const MOVE_HOLD_MS: u64 = 60_000;

/// What one step of a message-move task did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MoveStep {
    pub moved: usize,
    /// Ready messages left in the source.
    pub left: usize,
    /// Why the task cannot go on, when it cannot: the message it stopped at stays in the source.
    pub stopped: Option<MoveStopped>,
}

/// Why a message-move task stopped at a message.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum MoveStopped {
    /// No destination, and no `x-first-death-queue` on the message.
    #[error("A message has no source queue to go back to: give a DestinationArn.")]
    NoOrigin,
    /// The queue a message would go to does not exist (any more).
    #[error("The queue '{queue}' in vhost '{vhost}' a message would move to does not exist.")]
    QueueNotFound { vhost: String, queue: String },
    /// The message's body could not be read back from the store.
    #[error("A message could not be read from the store.")]
    Unreadable,
    /// The queue a message would go to is one the task's user may not write to (a forged
    /// `x-first-death-queue`, or a permission taken away while the task ran).
    #[error("Access to the resource queue '{queue}' in vhost '{vhost}' is denied: the task's user may not write to it.")]
    WriteDenied { vhost: String, queue: String },
}

/// Where a message-move task sends a dead-letter queue's messages.
#[derive(Clone, Copy)]
pub enum MoveTarget<'a> {
    /// Every message to this queue, which may be in another vhost (a `DestinationArn`).
    Queue { vhost: &'a str, name: &'a str },
    /// Each message back to the queue of the source's vhost it was first dead-lettered from.
    Origin,
}

/// `message` without the receives it had before it was dead-lettered (a redrive's copy).
fn without_earlier_receives(message: Arc<Message>) -> Arc<Message> {
    let Some(headers) = message.properties().headers() else { return message };
    if !headers.contains_key(dead_letter::EARLIER_RECEIVES_HEADER) {
        return message;
    }
    let properties = message.properties().edited(|p| {
        p.headers = Some(headers.without_key(dead_letter::EARLIER_RECEIVES_HEADER));
    });
    Arc::new(Message::new(
        message.exchange.clone(),
        message.routing_key.clone(),
        properties,
        message.body.clone(),
    ))
}

/// The queue a dead-lettered message came from.
fn first_death_queue(message: &Message) -> Option<String> {
    match message.properties().headers()?.get("x-first-death-queue")? {
        FieldValue::LongStr(queue) => Some(queue.as_str().into_owned()),
        _ => None,
    }
}

/// Why an SQS gateway operation did nothing.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SqsGatewayError {
    #[error("the queue does not exist")]
    QueueNotFound,
    /// Exclusive to an AMQP connection.
    #[error("the queue is exclusive to another connection")]
    QueueLocked,
    /// Arguments queue.declare would refuse (its text).
    #[error("{0}")]
    InvalidArguments(String),
    /// The queue's `x-overflow` is `reject-publish` and it is full.
    #[error("the queue is full")]
    QueueFull,
    /// Not a handle the gateway issued for this queue.
    #[error("the receipt handle is invalid")]
    ReceiptHandleInvalid,
    /// The queue's SQS settings refuse the message (`sqs_send.rs`).
    #[error(transparent)]
    Send(#[from] SendRefused),
}

/// SQS's visibility timeout of a queue that sets none: 30 s.
pub const SQS_DEFAULT_VISIBILITY_MS: u64 = 30_000;

/// The argument a message-move task's source queue keeps the task in (the SQS endpoint's
/// `moves.rs`). It names the user the task moves as, so only the endpoint may write it, through
/// [`Broker::sqs_set_arguments`]: a queue.declare carrying it is refused, or anyone who may
/// declare a queue could have a task run as another user after the next start.
pub const SQS_MOVE_TASK_ARG: &str = "x-sqs-move-task";

impl Broker {
    /// Up to `max` messages of `queue` in `vhost`, each invisible for `visibility_ms` (`None`: the
    /// queue's visibility timeout as it runs, policies applied, else 30 s; 0: visible
    /// again at once) unless deleted first. From an SQS FIFO queue, only messages of groups
    /// with nothing in flight, as many of one group as there are before the next group's
    /// (`queue/message_groups.rs`).
    pub fn sqs_receive(
        &mut self,
        vhost: &str,
        queue: &str,
        max: usize,
        visibility_ms: Option<u64>,
        now: Timestamp,
    ) -> Result<Vec<SqsReceived>, SqsGatewayError> {
        let (name, id) = self.sqs_queue(vhost, queue)?;
        let Some(queue) = self.queues.get(&id) else { return Ok(Vec::new()) };
        let fifo = queue.args.sqs.fifo;
        // The queue's own visibility timeout as it runs, policies applied (0 when its SQS
        // `VisibilityTimeout` is 0); SQS's 30 s without one.
        let visibility_ms = visibility_ms
            .or(queue.args.sqs.zero_visibility.then_some(0))
            .or(queue.args.visibility_timeout_ms)
            .unwrap_or(SQS_DEFAULT_VISIBILITY_MS);
        let gateway = self.sqs_gateway(vhost, now);
        let mut received = Vec::new();
        let mut taken = None;
        // Stops when the queue has nothing more to give now: empty, or the paged message it
        // would take next being read (`sqs_awaits_read`).
        while received.len() < max {
            let hand_out = HandOut::SqsReceive { visibility_ms, taken };
            let Ok(got) = self.get_one(gateway, GATEWAY_CHANNEL, vhost, name.clone(), id, hand_out, now)
            else {
                break;
            };
            let Some(receipt_handle) = got.receipt_handle else { break };
            // A FIFO receive goes on in this message's group (`message_groups.rs`).
            taken = fifo.then(|| message_groups::group_of(&got.message));
            let earlier = dead_letter::earlier_receives(&got.message);
            received.push(SqsReceived {
                receipt_handle,
                message: got.message,
                // Its receives here, and those in the queues it was dead-lettered from (AWS).
                receive_count: got.delivery_count.saturating_add(1).saturating_add(earlier),
                entry_id: got.entry_id,
                ready_ms: got.ready_at.map(Timestamp::as_millis),
            });
        }
        self.trace_deliveries(now);
        if visibility_ms == 0 {
            // Visible again at once: back in the queue before anyone asks again.
            self.run_queue(id, now);
        }
        Ok(received)
    }

    /// Whether a message `queue` would hand out next is paged out and a read is out
    /// (`Queue::receive_awaits_read`): a receive took what it could, and a wait (`sqs_wait`) is
    /// woken once the read is answered (`message_reads.rs`).
    pub fn sqs_awaits_read(&self, vhost: &str, queue: &str) -> bool {
        let Ok((_, id)) = self.sqs_queue(vhost, queue) else { return false };
        self.queues.get(&id).is_some_and(|q| q.receive_awaits_read())
    }

    /// How long an SQS receive from `queue` waits by default (its
    /// `ReceiveMessageWaitTimeSeconds`), if it says.
    pub fn sqs_receive_wait_s(&self, vhost: &str, queue: &str) -> Option<u64> {
        let (_, id) = self.sqs_queue(vhost, queue).ok()?;
        self.queues.get(&id)?.args.sqs.receive_wait_s
    }

    /// Deletes the message `receipt_handle` names (it was received from `queue` over SQS). A
    /// handle whose delivery is over (deleted already, or visible again and perhaps received by
    /// someone else) deletes nothing, and is no error, as in SQS.
    pub fn sqs_delete(
        &mut self,
        vhost: &str,
        queue: &str,
        receipt_handle: &str,
        now: Timestamp,
    ) -> Result<(), SqsGatewayError> {
        let (_, id) = self.sqs_queue(vhost, queue)?;
        let receipt = self.receipts.open(receipt_handle).ok_or(SqsGatewayError::ReceiptHandleInvalid)?;
        if receipt.queue != id || !self.sqs.holds(receipt.delivery.conn) {
            return Err(SqsGatewayError::ReceiptHandleInvalid);
        }
        let delivery = receipt.delivery;
        let current = self
            .connections
            .channel(delivery.conn, delivery.channel)
            .is_some_and(|channel| channel.opening == receipt.channel_opening && channel.holds(delivery.tag));
        if current {
            // The tag is one the channel holds: settling it cannot fail.
            let _ = self.settle(delivery.conn, delivery.channel, delivery.tag, false, Settlement::Ack, now);
        } else {
            self.delete_returned(id, receipt.entry);
        }
        Ok(())
    }

    /// SQS's PurgeQueue beyond AMQP's queue.purge (issue 40, item 4): the messages received over
    /// SQS and not deleted go too, as AWS deletes in-flight messages (on a FIFO queue a leftover
    /// one blocked every group). Deliveries to AMQP consumers are theirs to settle, as after a
    /// queue.purge. Returns how many went.
    pub fn sqs_purge_in_flight(
        &mut self,
        vhost: &str,
        queue: &str,
        now: Timestamp,
    ) -> Result<usize, SqsGatewayError> {
        let (_, id) = self.sqs_queue(vhost, queue)?;
        let Some(gateway) = self.sqs.by_vhost.get(vhost).copied() else { return Ok(0) };
        let tags = self
            .connections
            .channel(gateway, GATEWAY_CHANNEL)
            .map(|c| c.tags_of_queue(id))
            .unwrap_or_default();
        for tag in &tags {
            // Each tag is one the channel holds: settling it cannot fail.
            let _ = self.settle(gateway, GATEWAY_CHANNEL, *tag, false, Settlement::Ack, now);
        }
        Ok(tags.len())
    }

    /// A late delete (AWS's rule): the delivery's visibility timeout ran out and its message is
    /// ready in the queue again, not yet received by anyone else; the handle still deletes it,
    /// so a slow worker does not process it twice. A message received again since, or gone, is
    /// left alone (AWS: "the message might not be deleted").
    fn delete_returned(&mut self, id: QueueId, entry: u64) {
        let Some(queue) = self.queues.get_mut(&id) else { return };
        let Some(removed) = queue.remove_ready(entry) else { return };
        queue.counters.messages.ack += 1;
        self.stats.messages.ack += 1;
        let persist_id = removed.persist_id();
        self.persist_settle(id, persist_id);
        self.reschedule(id);
    }

    /// Registers a long poll on `queue` under `ticket` (the driver's, unique among those
    /// waiting): [`Notice::SqsReady`] comes for it once, as soon as the queue has a ready message
    /// (at once if it has one now and is not waiting for a read), unless [`Self::sqs_unwait`]
    /// takes it back first. A waiting poll costs its entry here and nothing else: no job runs
    /// for it until it is woken or gives up.
    pub fn sqs_wait(&mut self, vhost: &str, queue: &str, ticket: Ticket) -> Result<(), SqsGatewayError> {
        let (_, id) = self.sqs_queue(vhost, queue)?;
        if self.queues.get(&id).is_some_and(|q| q.sqs_receivable() > 0 && !q.receive_awaits_read()) {
            self.notices.push_back(Notice::SqsReady { ticket });
        } else {
            self.sqs.waiters.entry(id).or_default().insert(ticket);
            self.sqs.waiter_queues.insert(ticket, id);
        }
        Ok(())
    }

    /// Takes back a long poll that gave up (its time ran out, or its client went away), with
    /// [`Notice::SqsWithdrawn`]; nothing for one already woken.
    pub fn sqs_unwait(&mut self, ticket: Ticket) {
        let Some(queue) = self.sqs.waiter_queues.remove(&ticket) else { return };
        if let Some(waiting) = self.sqs.waiters.get_mut(&queue) {
            waiting.swap_remove(&ticket);
            if waiting.is_empty() {
                self.sqs.waiters.remove(&queue);
            }
        }
        self.notices.push_back(Notice::SqsWithdrawn { ticket });
    }

    /// Wakes as many of the long polls waiting for queue `id` as it has ready messages, the
    /// longest waiting first (after `run_queue` has served its consumers): a message wakes one
    /// poll, not a herd of them. When the queue is gone, wakes them all; an SQS FIFO queue wakes
    /// one per group it can be received from (its acks and returns run this again). None while
    /// the paged message it would hand out next is being read: a receive could take nothing
    /// yet, and the answer wakes them all (`wake_every_sqs_waiter`).
    pub(crate) fn wake_sqs_waiters(&mut self, id: QueueId) {
        if !self.sqs.waiters.contains_key(&id) {
            return;
        }
        let ready = match self.queues.get(&id) {
            None => usize::MAX,
            Some(queue) if queue.receive_awaits_read() => return,
            Some(queue) => queue.sqs_receivable(),
        };
        self.wake_sqs_waiters_up_to(id, ready);
    }

    /// Wakes every poll waiting for queue `id`: a read of its paged messages was answered (those
    /// that waited for it and find nothing left answer at once, the others wait again), or the
    /// queue is gone.
    pub(crate) fn wake_every_sqs_waiter(&mut self, id: QueueId) {
        if !self.sqs.waiters.is_empty() {
            self.wake_sqs_waiters_up_to(id, usize::MAX);
        }
    }

    /// Wakes up to `ready` of the polls waiting for queue `id`, the longest waiting first.
    fn wake_sqs_waiters_up_to(&mut self, id: QueueId, ready: usize) {
        let Some(waiting) = self.sqs.waiters.get_mut(&id).filter(|_| ready > 0) else { return };
        let woken: Vec<Ticket> = waiting.drain(..ready.min(waiting.len())).collect();
        if waiting.is_empty() {
            self.sqs.waiters.remove(&id);
        }
        for ticket in woken {
            self.sqs.waiter_queues.remove(&ticket);
            self.notices.push_back(Notice::SqsReady { ticket });
        }
    }

    /// SetQueueAttributes: changes some of a queue's arguments in place (`Some`: set, `None`:
    /// removed), checked as queue.declare checks them, then its policies re-applied and the
    /// definition written for a durable queue. What reads the arguments when it acts (the
    /// visibility timeout of the next receive, the delay of the next message, the delivery limit
    /// of the next failure) follows at once; a changed `x-message-ttl` (the retention period)
    /// applies to the ready messages too, as AWS's does to every message (issue 40, item 23).
    pub fn sqs_set_arguments(
        &mut self,
        vhost: &str,
        queue: &str,
        changes: Vec<(String, Option<FieldValue>)>,
        now: Timestamp,
    ) -> Result<(), SqsGatewayError> {
        let (name, id) = self.sqs_queue(vhost, queue)?;
        let q = self.queues.get(&id).ok_or(SqsGatewayError::QueueNotFound)?;
        let kept = q
            .spec
            .arguments
            .iter()
            .filter(|(key, _)| !changes.iter().any(|(k, _)| k.as_bytes() == key.as_bytes()));
        let mut entries: Vec<(Vec<u8>, FieldValue)> =
            kept.map(|(key, value)| (key.as_bytes().to_vec(), value)).collect();
        entries.extend(changes.into_iter().filter_map(|(key, value)| Some((key.into_bytes(), value?))));
        let arguments = FieldTable::from_entries(entries);
        let args = QueueArgs::parse(&arguments, &name.as_str(), vhost, q.spec.durable)
            .map_err(|e| SqsGatewayError::InvalidArguments(e.reply_text))?;
        let persisted = q.is_persisted();
        let ttl_before = q.args.message_ttl_ms;
        if let Some(q) = self.queues.get_mut(&id) {
            q.set_arguments(arguments, args);
        }
        self.apply_queue_policies(id, now);
        if let Some(q) = self.queues.get_mut(&id).filter(|q| q.args.message_ttl_ms != ttl_before) {
            q.apply_ttl_to_ready();
        }
        if persisted {
            self.definition_changed(Changed::Queue(vhost.to_owned(), name));
        }
        self.run_queue(id, now);
        Ok(())
    }

    /// A message-move task's step (SQS's StartMessageMoveTask): moves up to `max` ready messages
    /// of `source` in `vhost` to `target`: a queue (of any vhost), or each message back to the
    /// queue of `vhost` it was dead-lettered from (`x-first-death-queue`). Every message's queue
    /// is checked with `may_write(vhost, queue)`, the task user's write permission: the gateway
    /// acts for every user, so who may write where is the caller's to say. Each message enters
    /// its new queue before it leaves the old, so a crash between the two store ops can repeat a
    /// move, never lose one. A message with no queue it may go to stops the step, left where it
    /// was. A step also ends, `left` above 0, where the source's next message is paged out and
    /// being read (none is read on the broker's thread): the task's next step goes on.
    pub fn sqs_move(
        &mut self,
        vhost: &str,
        source: &str,
        target: MoveTarget<'_>,
        may_write: &dyn Fn(&str, &str) -> bool,
        max: usize,
        now: Timestamp,
    ) -> Result<MoveStep, SqsGatewayError> {
        let (name, id) = self.sqs_queue(vhost, source)?;
        let gateway = self.sqs_gateway(vhost, now);
        let mut step = MoveStep::default();
        while step.moved < max {
            let hand_out = HandOut::Visibility(MOVE_HOLD_MS);
            let Ok(got) = self.get_one(gateway, GATEWAY_CHANNEL, vhost, name.clone(), id, hand_out, now)
            else {
                break;
            };
            let moving = self.move_target_of(vhost, target, &got.message, may_write).and_then(|target_id| {
                let payload = self
                    .connections
                    .channel_mut(gateway, GATEWAY_CHANNEL)
                    .and_then(|c| c.unacked_mut(got.tag))
                    .map(|u| u.entry.payload.clone());
                let message = payload.and_then(|p| self.queues.get(&id)?.pager.message_of(&p).ok());
                message.map(|m| (target_id, m)).ok_or(MoveStopped::Unreadable)
            });
            let (target_id, message) = match moving {
                Ok(moving) => moving,
                Err(stopped) => {
                    let _ = self.settle(
                        gateway,
                        GATEWAY_CHANNEL,
                        got.tag,
                        false,
                        Settlement::Requeue(ReturnKind::Returned),
                        now,
                    );
                    step.stopped = Some(stopped);
                    break;
                }
            };
            // Redriven, it is a new message: its receive count starts again, as on AWS.
            self.enqueue(target_id, without_earlier_receives(message), now, None);
            let _ = self.settle(gateway, GATEWAY_CHANNEL, got.tag, false, Settlement::Ack, now);
            step.moved += 1;
        }
        step.left = self.queues.get(&id).map_or(0, |q| q.ready.message_count());
        Ok(step)
    }

    /// The queue a message being moved out of a queue of `vhost` goes to, if it exists and the
    /// task's user may write to it. An `x-first-death-queue` header is the publisher's word, not
    /// proof: it only ever names a queue of the source's own vhost, and is checked like any name.
    fn move_target_of(
        &self,
        vhost: &str,
        target: MoveTarget<'_>,
        message: &Message,
        may_write: &dyn Fn(&str, &str) -> bool,
    ) -> Result<QueueId, MoveStopped> {
        let (vhost, queue) = match target {
            MoveTarget::Queue { vhost, name } => (vhost, name.to_owned()),
            MoveTarget::Origin => (vhost, first_death_queue(message).ok_or(MoveStopped::NoOrigin)?),
        };
        if !may_write(vhost, &queue) {
            return Err(MoveStopped::WriteDenied { vhost: vhost.to_owned(), queue });
        }
        match self.sqs_queue(vhost, &queue) {
            Ok((_, id)) => Ok(id),
            Err(_) => Err(MoveStopped::QueueNotFound { vhost: vhost.to_owned(), queue }),
        }
    }

    /// The queues of `vhost` whose arguments dead-letter to `queue` through the default exchange
    /// (SQS's ListDeadLetterSourceQueues: the RedrivePolicy made by CreateQueue), by name.
    pub fn sqs_dead_letter_sources(&self, vhost: &str, queue: &str) -> Result<Vec<String>, SqsGatewayError> {
        self.sqs_queue(vhost, queue)?;
        let v = self.vhosts.get(vhost).ok_or(SqsGatewayError::QueueNotFound)?;
        let text = |args: &FieldTable, key: &str| match args.get(key) {
            Some(FieldValue::LongStr(s)) => Some(s.as_str().into_owned()),
            _ => None,
        };
        let mut sources: Vec<String> = v
            .queues
            .values()
            .filter_map(|id| self.queues.get(id))
            .filter(|q| {
                let args = &q.spec.arguments;
                text(args, "x-dead-letter-exchange").as_deref() == Some("")
                    && text(args, "x-dead-letter-routing-key").as_deref() == Some(queue)
            })
            .map(|q| q.name().as_str().into_owned())
            .collect();
        sources.sort_unstable();
        Ok(sources)
    }

    /// Every queue that carries argument `key`, as (vhost, queue, value): what the SQS endpoint
    /// keeps in its queues' arguments and takes up again at start (a message-move task).
    pub fn sqs_queues_with_argument(&self, key: &str) -> Vec<(String, String, FieldValue)> {
        let mut found: Vec<(String, String, FieldValue)> = self
            .queues
            .values()
            .filter_map(|q| {
                Some((q.vhost.clone(), q.name().as_str().into_owned(), q.spec.arguments.get(key)?))
            })
            .collect();
        found.sort_unstable_by(|a, b| (&a.0, &a.1).cmp(&(&b.0, &b.1)));
        found
    }

    /// The queue `queue` of `vhost`, for the gateway.
    pub(super) fn sqs_queue(&self, vhost: &str, queue: &str) -> Result<(ShortStr, QueueId), SqsGatewayError> {
        let name = ShortStr::try_from(queue).map_err(|_| SqsGatewayError::QueueNotFound)?;
        let id = self.lookup_queue(vhost, &name).map_err(|_| SqsGatewayError::QueueNotFound)?;
        if self.queues.get(&id).is_some_and(|q| q.spec.exclusive_owner.is_some()) {
            return Err(SqsGatewayError::QueueLocked);
        }
        Ok((name, id))
    }

    /// The gateway connection of `vhost`, opened when it has none (or when its connection went,
    /// with a deleted vhost or a forced close).
    pub(super) fn sqs_gateway(&mut self, vhost: &str, now: Timestamp) -> ConnectionId {
        if let Some(conn) = self.sqs.by_vhost.get(vhost).copied() {
            if self.connections.has_channel(conn, GATEWAY_CHANNEL) {
                return conn;
            }
            self.handle_command(Command::ConnectionClosed { conn }, now);
        }
        let conn = ConnectionId(self.sqs.next_id);
        self.sqs.next_id -= 1;
        let permissions = crate::permissions::Permissions::full();
        let info = super::synthetic_connection(SQS_GATEWAY_USER, vhost, SQS_GATEWAY_PEER, permissions);
        self.handle_command(Command::ConnectionOpen { conn, info: Box::new(info) }, now);
        let open = Command::Method { conn, channel: GATEWAY_CHANNEL, method: ChannelOpen::default().into() };
        self.handle_command(open, now);
        let _ = self.take_replies_to(conn);
        self.sqs.by_vhost.insert(vhost.to_owned(), conn);
        conn
    }
}
