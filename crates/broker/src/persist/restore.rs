//! Rebuilding the broker from what the store kept (issue 6): definitions first (exchanges, queues
//! under their old ids, bindings), then each durable queue's messages in enqueue order.
//!
//! - A message comes back with redelivered=true when it was delivered before: the first delivery
//!   of a persistent message writes a delivered mark (`Persistence::handed_out`), as RabbitMQ's
//!   queue index does, so one never delivered comes back with redelivered=false. Data written
//!   before those marks existed cannot tell: any message that was ready comes back redelivered
//!   (AMQP: redelivered=true means "may have been delivered before").
//! - A delayed message keeps its due time; one never ready yet gets its TTL when it falls due.
//! - TTL deadlines count from the stored ready time: a message that expired while the broker was
//!   down is dead-lettered (or dropped) on restore, exactly as it would have been.
//! - Delivery counts are kept (semantics §5).
//! - Messages whose queue the definitions do not hold (the definitions file was lost, set aside
//!   as damaged, or the queue's stored arguments are no longer valid) are never purged (issue 12):
//!   their queue comes back under its old id, so the messages are reachable and putting back a
//!   backup of the definitions later puts them back in their own queue. It is named
//!   `hourglass.orphaned.<id>` in vhost `/` (its name and vhost when the definitions knew them),
//!   has no arguments, and is logged at ERROR with its message count. One cost: the messages of
//!   a queue deleted just before a crash (its purge not yet synced, the new definitions already
//!   written; the delete-ok not yet sent) come back in such a queue — at-least-once.

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;
use hourglass_wire::{FieldTable, ShortStr};

use super::definitions::Definitions;
use super::Changed;
use super::{decode_record, MessageMeta, RecordLocation};
use crate::broker::Broker;
use crate::exchange::{Binding, Destination, Exchange};
use crate::message::Hot;
use crate::policy::Policy;
use crate::queue::entry::{Entry, Paged, Payload};
use crate::queue::paging::Pager;
use crate::queue::{Queue, QueueArgs, QueueId, QueueSpec};
use crate::time::Timestamp;

/// One message as the store recovered it.
#[derive(Clone, Debug)]
pub struct StoredMessage {
    pub msg_id: u64,
    pub metadata: Bytes,
    pub body: StoredBody,
}

/// A recovered message's record: read already, or where to read it when needed (ADR 0007).
#[derive(Clone, Debug)]
pub enum StoredBody {
    /// The record's bytes (`encode_record`).
    Record(Bytes),
    /// Where the record is; read through the broker's `MessageSource` when the message is
    /// needed (at restore only for metadata written before paging, which lacks the message's
    /// priority, expiration and size).
    At(RecordLocation),
}

/// What `restore` rebuilt.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RestoreReport {
    pub exchanges: usize,
    pub queues: usize,
    pub bindings: usize,
    /// Messages put back ready (or expired on the spot), with those whose delay or back-off ran
    /// out while the broker was down.
    pub ready: usize,
    /// Messages put back still waiting for a delay or back-off.
    pub delayed: usize,
    /// Delayed messages taken from the queue states of the checkpoint the store started from
    /// (ADR 0019, [`Broker::restore_queue_state`]), not read back from the log; not in `delayed`.
    pub delayed_from_checkpoint: usize,
    /// Ready messages taken from the queue states of the checkpoint (ADR 0021); not in `ready`.
    pub ready_from_checkpoint: usize,
    /// Of `ready`, the delayed messages whose time came while the broker was down (released in
    /// due order, at `--overdue-release-rate` when one is set).
    pub overdue: usize,
    /// Queues recreated to keep messages whose queue definition is missing (module doc).
    pub orphaned: Vec<OrphanedQueue>,
    /// Messages whose stored bytes did not decode (settled, logged).
    pub undecodable: usize,
    /// Queue definitions refused (arguments no longer valid), logged.
    pub refused_queues: usize,
    /// Policies and operator policies put back.
    pub policies: usize,
}

/// The vhost a queue recreated for orphaned messages goes to when its own is unknown.
pub const ORPHANED_VHOST: &str = "/";
/// The name of a queue recreated for orphaned messages is this prefix and the queue's id.
pub const ORPHANED_QUEUE_PREFIX: &str = "hourglass.orphaned.";

/// A queue recreated at restore to keep messages whose queue definition was missing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OrphanedQueue {
    /// The queue's id in the store (kept, so restored definitions find the messages again).
    pub id: u64,
    pub vhost: String,
    pub name: String,
    pub messages: usize,
}

impl Broker {
    /// Rebuilds definitions (`definitions`: decoded from the catalog; `Definitions::default()`
    /// for none) and the messages of each durable queue (`messages`: per queue id, in enqueue
    /// order), at `now`. Call once, on a new broker, before any connection. Ops it needs written
    /// (the definitions of queues recreated for orphaned messages, settles of expired messages)
    /// come out of `poll_store_op` as usual.
    pub fn restore(
        &mut self,
        definitions: Definitions,
        messages: BTreeMap<u64, Vec<StoredMessage>>,
        now: Timestamp,
    ) -> RestoreReport {
        let counts = messages.iter().map(|(queue, stored)| (*queue, stored.len() as u64)).collect();
        let stream =
            messages.into_iter().flat_map(|(queue, stored)| stored.into_iter().map(move |m| (queue, m)));
        self.restore_streamed(definitions, &counts, stream, now)
    }

    /// [`Broker::restore`] from the store's second recovery pass: `messages` as `(queue, message)`
    /// one at a time in log order (each queue's in enqueue order), `queue_messages` how many each
    /// queue has (from the first pass). Nothing is held beside what the queues keep, so a restart
    /// needs no more memory than the running broker (issue 23). A queue keeps its ready messages
    /// in id order whatever order they come in.
    pub fn restore_streamed(
        &mut self,
        definitions: Definitions,
        queue_messages: &BTreeMap<u64, u64>,
        messages: impl IntoIterator<Item = (u64, StoredMessage)>,
        now: Timestamp,
    ) -> RestoreReport {
        let report = self.restore_definitions(definitions, queue_messages, now);
        self.restore_messages(report, queue_messages, messages, now)
    }

    /// [`Broker::restore_streamed`] in steps, for a restore that starts from queue states
    /// (ADR 0019): definitions first (and the queues recreated for orphaned messages), then
    /// [`Broker::restore_queue_state`] for each state, then [`Broker::restore_messages`].
    pub fn restore_definitions(
        &mut self,
        definitions: Definitions,
        queue_messages: &BTreeMap<u64, u64>,
        now: Timestamp,
    ) -> RestoreReport {
        let mut report = RestoreReport::default();
        self.queues.ids_taken_below(definitions.next_queue_id);
        self.entry_ids.restarted(now);
        let mut refused = BTreeMap::new();
        for vhost in &definitions.vhosts {
            self.restore_vhost(vhost, now, &mut report, &mut refused);
        }
        for (&queue, &count) in queue_messages.iter().filter(|(_, count)| **count > 0) {
            let id = QueueId(queue);
            if !self.queues.contains_key(&id) {
                let count = usize::try_from(count).unwrap_or(usize::MAX);
                let orphaned = self.recreate_orphaned(id, refused.remove(&id), count, now);
                report.orphaned.push(orphaned);
            }
        }
        report
    }

    /// The last step of [`Broker::restore_definitions`]: the messages read back from the log
    /// (`(queue, message)`, each queue's in enqueue order), then each queue's due work.
    pub fn restore_messages(
        &mut self,
        mut report: RestoreReport,
        queue_messages: &BTreeMap<u64, u64>,
        messages: impl IntoIterator<Item = (u64, StoredMessage)>,
        now: Timestamp,
    ) -> RestoreReport {
        for (queue, message) in messages {
            self.entry_ids.recovered(message.msg_id);
            self.restore_message(QueueId(queue), message, now, &mut report);
        }
        self.queues.values_mut().for_each(Queue::finish_restore);
        // Every queue exists now: expiries and due delays may dead-letter into any of them.
        self.overdue.restored(now);
        for &queue in queue_messages.keys() {
            self.run_queue(QueueId(queue), now);
        }
        // A queue restored empty has timers too: its `x-expires` counts from the restart.
        let queues: Vec<QueueId> = self.queues.keys().copied().collect();
        for id in queues {
            self.reschedule(id);
        }
        self.release_overdue(now);
        self.run_dead_letters(now);
        self.flush_definitions();
        report
    }

    /// Takes back the ready and waiting messages of queue `queue` from the state a checkpoint
    /// held (ADR 0019, ADR 0021, `queue/checkpoint.rs`), without those in `changed` (store ids: they come back
    /// from the log if still live), counted in `report`. Returns whether the state was used; it
    /// cannot be if the queue is not there, holds messages already, or the state does not read
    /// back whole: then read the queue's messages from the log, all of them.
    pub fn restore_queue_state(
        &mut self,
        report: &mut RestoreReport,
        queue: u64,
        parts: Vec<Bytes>,
        changed: &[u64],
    ) -> bool {
        let Some(queue) = self.queues.get_mut(&QueueId(queue)) else { return false };
        let Some(restored) = queue.restore_state(parts, changed) else { return false };
        if let Some(max) = queue.delayed.max_seq().max(queue.ready.max_seq()) {
            self.entry_ids.recovered(max);
        }
        report.delayed_from_checkpoint += restored.waiting;
        report.ready_from_checkpoint += restored.ready;
        true
    }

    /// Recreates queue `id` to keep its orphaned messages (module doc): under its own vhost and
    /// name when the definitions knew them (`known`, its arguments refused) and they are free,
    /// else as `hourglass.orphaned.<id>` in `/`.
    fn recreate_orphaned(
        &mut self,
        id: QueueId,
        known: Option<(String, ShortStr)>,
        messages: usize,
        now: Timestamp,
    ) -> OrphanedQueue {
        let is_free = |broker: &Broker, vhost: &str, name: &ShortStr| {
            broker.vhosts.get(vhost).is_none_or(|v| !v.queues.contains_key(name))
        };
        let (vhost, name) = match known {
            Some((vhost, name)) if is_free(self, &vhost, &name) => (vhost, name),
            _ => {
                let base = format!("{ORPHANED_QUEUE_PREFIX}{}", id.0);
                // A user queue may hold the name already: add a suffix (bounded: a vhost holds
                // finitely many queues, and the first free suffix is at most their count).
                let taken = self.vhosts.get(ORPHANED_VHOST).map_or(0, |v| v.queues.len());
                let name = (0..=taken)
                    .map(|n| if n == 0 { base.clone() } else { format!("{base}.{n}") })
                    .filter_map(|n| ShortStr::try_from(n).ok())
                    .find(|n| is_free(self, ORPHANED_VHOST, n))
                    .unwrap_or_default();
                (ORPHANED_VHOST.to_owned(), name)
            }
        };
        let spec = QueueSpec {
            name: name.clone(),
            durable: true,
            exclusive_owner: None,
            auto_delete: false,
            arguments: FieldTable::new(),
        };
        let args = QueueArgs::default();
        self.vhosts.get_or_insert(&vhost).queues.insert(name.clone(), id);
        self.queues.add(id, vhost.clone(), spec, args, now);
        self.apply_queue_policies(id, now);
        self.definition_changed(Changed::Queue(vhost.clone(), name.clone()));
        let name = name.as_str().into_owned();
        tracing::error!(
            queue_id = id.0, %vhost, queue = %name, messages,
            "the definitions do not hold this queue: its messages are kept in it (durable, no \
             arguments). Consume or move them, or stop the broker, put back a backup of the \
             catalog (catalog.snap, catalog.log) and start again to have them in their own queue"
        );
        OrphanedQueue { id: id.0, vhost, name, messages }
    }

    fn restore_vhost(
        &mut self,
        defs: &super::definitions::VHostDefinitions,
        now: Timestamp,
        report: &mut RestoreReport,
        refused: &mut BTreeMap<QueueId, (String, ShortStr)>,
    ) {
        let vhost = self.vhosts.get_or_insert(&defs.name);
        // Policies first: queues and exchanges are matched against them as they come back.
        for (kind, spec) in &defs.policies {
            let inserted = Policy::new(*kind, spec.clone()).and_then(|p| vhost.policies.insert(*kind, p));
            match inserted {
                Ok(_) => report.policies += 1,
                Err(reason) => {
                    tracing::warn!(policy = %spec.name, vhost = %defs.name, %reason, "stored policy refused");
                }
            }
        }
        for spec in &defs.exchanges {
            vhost.exchanges.insert(spec.name.clone(), Exchange::new(spec.clone()));
            report.exchanges += 1;
        }
        for (id, name, auto_delete, arguments) in &defs.queues {
            let args = match QueueArgs::parse(arguments, &name.as_str(), &defs.name, true) {
                Ok(args) => args,
                Err(error) => {
                    tracing::warn!(queue = %name, vhost = %defs.name, text = %error.reply_text, "stored queue refused");
                    report.refused_queues += 1;
                    refused.insert(*id, (defs.name.clone(), name.clone()));
                    continue;
                }
            };
            let spec = QueueSpec {
                name: name.clone(),
                durable: true,
                exclusive_owner: None,
                auto_delete: *auto_delete,
                arguments: arguments.clone(),
            };
            if let Some(vhost) = self.vhosts.get_mut(&defs.name) {
                vhost.queues.insert(name.clone(), *id);
            }
            self.queues.add(*id, defs.name.clone(), spec, args, now);
            self.apply_queue_policies(*id, now);
            report.queues += 1;
        }
        let exchanges: Vec<_> =
            self.vhosts.get(&defs.name).map(|v| v.exchanges.keys().cloned().collect()).unwrap_or_default();
        for name in exchanges {
            self.apply_exchange_policies(&defs.name, &name);
        }
        let Some(vhost) = self.vhosts.get_mut(&defs.name) else { return };
        for b in &defs.bindings {
            let destination = if b.to_queue {
                match vhost.queues.get(&b.destination) {
                    Some(id) => Destination::Queue(*id),
                    None => continue,
                }
            } else {
                Destination::Exchange(b.destination.clone())
            };
            if let Some(source) = vhost.exchanges.get_mut(&b.source) {
                source.bind(Binding {
                    destination,
                    routing_key: b.routing_key.clone(),
                    arguments: b.arguments.clone(),
                });
                report.bindings += 1;
            }
        }
    }

    fn restore_message(
        &mut self,
        id: QueueId,
        stored: StoredMessage,
        now: Timestamp,
        report: &mut RestoreReport,
    ) {
        let Some(queue) = self.queues.get_mut(&id) else { return };
        let meta = MessageMeta::decode(&stored.metadata);
        let payload = meta.as_ref().and_then(|meta| stored_payload(&queue.pager, meta, stored.body));
        let Some((meta, payload)) = meta.zip(payload) else {
            tracing::warn!(queue = id.0, msg_id = stored.msg_id, "stored message does not decode; dropped");
            report.undecodable += 1;
            self.persist.settle(id, stored.msg_id);
            return;
        };
        let stored_wait = (meta.wait_until_ms != 0).then(|| Timestamp::from_millis(meta.wait_until_ms));
        let was_ready = meta.ready_at_ms.is_some() || stored_wait.is_none();
        // Stored as waiting, but ready and held in memory when the checkpoint whose state the
        // queue took was written: back at its place then, ready since then (`take_promoted`).
        let promoted = if was_ready { None } else { queue.take_promoted(stored.msg_id) };
        let (seq, wait_until, stored_ready) = match promoted {
            Some((seq, ready)) => (seq, None, Some(ready)),
            None => (stored.msg_id, stored_wait, meta.ready_at_ms.map(Timestamp::from_millis)),
        };
        // A message stored as neither waiting nor ready (not written by this broker) is ready.
        let ready_at = stored_ready.or(wait_until.is_none().then_some(now));
        let expires_at = ready_at.and_then(|at| queue.deadline_from(payload.hot().expiration_ms(), at));
        // The entry keeps its id (a delayed message listed before the restart is the same one),
        // or the place a state gave it.
        let mut entry = Entry::with_payload(seq, payload, ready_at, expires_at, Some(stored.msg_id));
        // See the module doc: the delivered mark where it is written, else "was it ever ready".
        entry.redelivered = if meta.deliveries_tracked { meta.redelivered } else { was_ready };
        entry.delivery_count = meta.delivery_count;
        // One that fell due while the broker was down is ready at the dispatch after the restore.
        match wait_until {
            Some(due) if due > now => report.delayed += 1,
            Some(_) => {
                report.ready += 1;
                report.overdue += 1;
            }
            None => report.ready += 1,
        }
        queue.restore_entry(entry, wait_until, meta.group);
        if promoted.is_some() {
            // Every store id is recovered by `restore_messages`; a place a state gave, here.
            self.entry_ids.recovered(seq);
        }
    }
}

/// What a queue keeps of a recovered message: only its location when its metadata says what
/// the queue needs without the body (and the store can be read), else the decoded record.
fn stored_payload(pager: &Pager, meta: &MessageMeta, body: StoredBody) -> Option<Payload> {
    match body {
        StoredBody::Record(record) => decode_record(record).map(|m| Payload::Resident(Arc::new(m))),
        StoredBody::At(location) => {
            let paged = meta.facts.filter(|_| pager.enabled()).and_then(|facts| {
                Paged::new(location, Hot::from_bits(facts.hot_bits), facts.body_size as usize)
            });
            match paged {
                Some(paged) => Some(Payload::Paged(paged)),
                None => match pager.read_record(location) {
                    Ok(message) => Some(Payload::Resident(Arc::new(message))),
                    Err(reason) => {
                        tracing::warn!(?location, %reason, "stored message cannot be read");
                        None
                    }
                },
            }
        }
    }
}
