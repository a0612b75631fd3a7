//! What the broker asks the store to keep (issue 6): persistent messages (delivery_mode 2) in
//! durable queues, and the durable definitions. The broker stays sans-IO: it emits numbered
//! [`StoreOp`]s on a second output ([`Broker::poll_store_op`]); the driver appends them to the
//! store, commits, and reports back with [`Broker::handle_persisted`], which releases the
//! publisher confirms and declare-oks held for them (`durable_replies.rs`) and tells the management API's
//! jobs that their changes are durable, or refused by the catalog (`commits.rs`).
//!
//! Which events write what: a message entering a persisted queue (ready or delayed) → `Enqueue`;
//! leaving it (ack, no-ack delivery, expiry, overflow drop, purge, dead-lettered away) → `Settle`
//! (the dead-lettered copies' `Enqueue`s come first: at-least-once, semantics §2); coming back with
//! a new delivery count or back-off → `Update`; queue deleted → `Purge`; a durable vhost, exchange,
//! queue, binding or policy changed → one `Catalog` change for it (`changes.rs`, `catalog.rs`).
//!
//! A delayed message that falls due writes nothing: its metadata says "not ready yet, due at T",
//! and recovery turns that into "ready since T", which is what happened.

mod catalog;
mod changes;
mod commits;
mod definitions;
mod durable_replies;
mod page_out;
mod restore;
mod source;

use std::collections::VecDeque;
use std::sync::Arc;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use hourglass_wire::{EncodedProperties, ShortStr};

use crate::broker::{Broker, IdMap};
use crate::channel::Channel;
use crate::message::Message;
use crate::queue::entry::Entry;
use crate::queue::{Queue, QueueId};
use crate::time::Timestamp;

pub use catalog::{composite_key, decode_catalog, CatalogChange, IDENTITY_SCOPE};
pub(crate) use changes::{Changed, GoneQueue};
pub use commits::DefinitionNotStored;
pub use definitions::{
    decode_definitions, Definitions, DEFINITIONS_SCHEMA_VERSION, DEFINITIONS_SCHEMA_VERSION_OLDEST,
};
pub use page_out::StoredLocation;
pub use restore::{
    OrphanedQueue, RestoreReport, StoredBody, StoredMessage, ORPHANED_QUEUE_PREFIX, ORPHANED_VHOST,
};
pub use source::{MessageSource, RecordLocation};

/// One thing for the store to write. Queue ids and message ids are the broker's.
#[derive(Clone, Debug, PartialEq)]
pub enum StoreOp {
    /// A persistent message entered a durable queue. `record` is the message itself
    /// ([`encode_record`]); `metadata` its queue bookkeeping ([`MessageMeta`]).
    Enqueue { queue: u64, msg_id: u64, metadata: Bytes, record: Bytes },
    /// The message left the queue for good.
    Settle { queue: u64, msg_id: u64 },
    /// The message's bookkeeping changed (delivery count, back-off).
    Update { queue: u64, msg_id: u64, metadata: Bytes },
    /// Every message of the queue left it (queue deleted).
    Purge { queue: u64 },
    /// A durable definition changed (`catalog.rs`).
    Catalog(CatalogChange),
    /// A checkpoint may be taken here, with these queue states (ADR 0019): each state describes
    /// its queue as the ops before this one left it.
    Checkpoint(Vec<QueueState>),
}

/// A queue's state for a checkpoint of the store (ADR 0019, `queue/checkpoint.rs`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueueState {
    pub queue: u64,
    /// Stored messages of the queue the state holds.
    pub covers: u64,
    /// Stored messages of the queue the state does not hold, by store id.
    pub read_back: Vec<u64>,
    /// The state's bytes, in parts to be written one after another; a restart gives them back
    /// cut the same way.
    pub parts: Vec<StatePart>,
}

/// A part of a queue's state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StatePart {
    /// Written with each checkpoint that takes the state.
    Inline(Bytes),
    /// Bytes the queue keeps unchanged while it holds them (a spill run's roster): the store
    /// writes them once and names them in later checkpoints (ADR 0020).
    Kept(Bytes),
}

impl StatePart {
    pub fn bytes(&self) -> &Bytes {
        match self {
            StatePart::Inline(bytes) | StatePart::Kept(bytes) => bytes,
        }
    }

    /// The bytes a checkpoint writes for it each time it takes the state.
    fn inline_bytes(&self) -> u64 {
        match self {
            StatePart::Inline(bytes) => bytes.len() as u64,
            StatePart::Kept(_) => 0,
        }
    }
}

/// Bytes of ops (about) after which the broker offers the store a checkpoint with the queues'
/// states; the store takes one only once its log has grown by twice the last one's size.
const CHECKPOINT_OFFER_BYTES: u64 = 8 * 1024 * 1024;

/// A [`StoreOp`] with its place in the broker's output: ops must be applied in `op_seq` order,
/// and `handle_persisted(op_seq)` means every op up to it is durable.
#[derive(Clone, Debug, PartialEq)]
pub struct SequencedOp {
    pub op_seq: u64,
    pub op: StoreOp,
}

/// A message's queue bookkeeping as stored. Format version 2 (34 bytes):
/// `version u8 = 2, flags u8 (bit 0: delivered before, bit 1: has been ready, bit 2: deliveries
/// are tracked, so bit 0 clear means never delivered),
/// delivery_count u32, ready_at_ms u64, wait_until_ms u64 (0: not waiting), hot u64 (the
/// message's packed persistence, priority and expiration, `message::Hot`), body_size u32`,
/// little-endian. Version 3 (42 bytes) adds `group u64`: the message's group in a queue with
/// message groups (SQS FIFO and fair queues, `queue/message_groups.rs`), so that a restart
/// learns it without reading the record. Version 1 (22 bytes, written before paging, ADR 0007)
/// is version 2 without its last two fields; such a message is read whole at restore.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct MessageMeta {
    /// When it became ready in the queue; its TTL counts from here. `None` while never ready.
    pub ready_at_ms: Option<u64>,
    /// A delay or a redelivery back-off: not ready before this time. 0 when not waiting.
    pub wait_until_ms: u64,
    pub delivery_count: u32,
    /// Delivered before (and, with `deliveries_tracked`, only then).
    pub redelivered: bool,
    /// Written by a broker that marks first deliveries: `redelivered` false means never delivered.
    pub deliveries_tracked: bool,
    /// What a queue reads of the message without its body; `None` in version 1 metadata.
    pub facts: Option<MessageFacts>,
    /// Its message group (`message_groups::GroupKey`), written for a queue with message groups
    /// (version 3, and only with `facts`); `None` in older metadata and for other queues.
    pub group: Option<u64>,
}

/// The properties and size of a message a queue keeps when its body is paged out (ADR 0007).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct MessageFacts {
    /// `message::Hot` packed: expiration, priority, persistence.
    pub hot_bits: u64,
    /// Content bytes (what `x-max-length-bytes` and statistics count).
    pub body_size: u32,
}

const META_VERSION_1: u8 = 1;
const META_VERSION: u8 = 2;
const META_VERSION_GROUPED: u8 = 3;
const META_BYTES_1: usize = 22;
const META_BYTES: usize = 34;
const META_BYTES_GROUPED: usize = 42;
const FLAG_REDELIVERED: u8 = 1;
const FLAG_HAS_BEEN_READY: u8 = 2;
/// Set by brokers that write a delivered mark at first delivery (`Persistence::handed_out`): then
/// a clear FLAG_REDELIVERED means "never delivered". Without it (older data) any message that was
/// ready may have been delivered.
const FLAG_DELIVERIES_TRACKED: u8 = 4;
/// How many of the newest pending ops `handed_out` looks through for the message's own Enqueue:
/// one publish routed to a few queues and delivered at once has its Enqueue among them; beyond
/// that (wide fanouts) a separate Update is written, which is only slower, never wrong.
const PENDING_ENQUEUE_LOOKBACK: usize = 8;

impl MessageMeta {
    pub fn encode(&self) -> Bytes {
        let mut out = BytesMut::with_capacity(META_BYTES_GROUPED);
        out.put_u8(match (self.facts, self.group) {
            (None, _) => META_VERSION_1,
            (Some(_), None) => META_VERSION,
            (Some(_), Some(_)) => META_VERSION_GROUPED,
        });
        let mut flags = 0;
        if self.redelivered {
            flags |= FLAG_REDELIVERED;
        }
        if self.ready_at_ms.is_some() {
            flags |= FLAG_HAS_BEEN_READY;
        }
        if self.deliveries_tracked {
            flags |= FLAG_DELIVERIES_TRACKED;
        }
        out.put_u8(flags);
        out.put_u32_le(self.delivery_count);
        out.put_u64_le(self.ready_at_ms.unwrap_or(0));
        out.put_u64_le(self.wait_until_ms);
        if let Some(facts) = self.facts {
            out.put_u64_le(facts.hot_bits);
            out.put_u32_le(facts.body_size);
            if let Some(group) = self.group {
                out.put_u64_le(group);
            }
        }
        out.freeze()
    }

    /// `None` for another version or a wrong length (never guessed at).
    pub fn decode(mut bytes: &[u8]) -> Option<MessageMeta> {
        let (with_facts, with_group) = match (bytes.first(), bytes.len()) {
            (Some(&META_VERSION_1), META_BYTES_1) => (false, false),
            (Some(&META_VERSION), META_BYTES) => (true, false),
            (Some(&META_VERSION_GROUPED), META_BYTES_GROUPED) => (true, true),
            _ => return None,
        };
        bytes.advance(1);
        let flags = bytes.get_u8();
        let delivery_count = bytes.get_u32_le();
        let ready_at_ms = bytes.get_u64_le();
        let wait_until_ms = bytes.get_u64_le();
        let facts =
            with_facts.then(|| MessageFacts { hot_bits: bytes.get_u64_le(), body_size: bytes.get_u32_le() });
        let group = with_group.then(|| bytes.get_u64_le());
        Some(MessageMeta {
            ready_at_ms: (flags & FLAG_HAS_BEEN_READY != 0).then_some(ready_at_ms),
            wait_until_ms,
            delivery_count,
            redelivered: flags & FLAG_REDELIVERED != 0,
            deliveries_tracked: flags & FLAG_DELIVERIES_TRACKED != 0,
            facts,
            group,
        })
    }

    /// The metadata of `entry` (waiting until `wait_until`), in a queue whose message groups
    /// put it in `group` (`Queue::stored_group`).
    fn of(entry: &Entry, wait_until: Option<Timestamp>, group: Option<u64>) -> MessageMeta {
        MessageMeta {
            ready_at_ms: entry.ready_at().map(Timestamp::as_millis),
            wait_until_ms: wait_until.map_or(0, Timestamp::as_millis),
            delivery_count: entry.delivery_count,
            redelivered: entry.redelivered,
            deliveries_tracked: true,
            // Bodies are limited far below 4 GiB (frame and store limits); a larger one would
            // simply be read whole at restore.
            facts: u32::try_from(entry.body_size())
                .ok()
                .map(|body_size| MessageFacts { hot_bits: entry.payload.hot().to_bits(), body_size }),
            group,
        }
    }
}

/// A message as stored: `exchange (u8 length + bytes), routing key (u8 length + bytes),
/// properties (AMQP content-header property encoding), body (the rest)`.
pub fn encode_record(message: &Message) -> Bytes {
    let mut out = BytesMut::with_capacity(record_len(message));
    write_record(message, &mut out);
    out.freeze()
}

/// The size of `message`'s record ([`encode_record`]).
pub fn record_len(message: &Message) -> usize {
    2 + message.exchange.len()
        + message.routing_key.len()
        + message.properties().encoded_len()
        + message.body.len()
}

/// Appends `message`'s record ([`encode_record`]) to `out`.
pub fn write_record(message: &Message, out: &mut BytesMut) {
    for name in [&message.exchange, &message.routing_key] {
        // A ShortStr is at most 255 bytes by construction.
        out.put_u8(name.len() as u8);
        out.put_slice(name.as_bytes());
    }
    // The bytes as received: the same AMQP encoding the record format always had.
    message.properties().encode(out);
    out.put_slice(&message.body);
}

/// Decodes [`encode_record`]'s bytes; `None` when they do not parse (the body shares `record`).
pub fn decode_record(mut record: Bytes) -> Option<Message> {
    let short = |record: &mut Bytes| -> Option<ShortStr> {
        let len = usize::from(*record.first()?);
        if record.len() < 1 + len {
            return None;
        }
        record.advance(1);
        ShortStr::new(record.split_to(len)).ok()
    };
    let exchange = short(&mut record)?;
    let routing_key = short(&mut record)?;
    let properties = EncodedProperties::split_from(&mut record).ok()?;
    Some(Message::new(exchange, routing_key, properties, record))
}

/// The broker's side of persistence: op numbering, message ids, the ops not yet polled and the
/// effects held until their ops are durable.
#[derive(Debug, Default)]
pub(crate) struct Persistence {
    /// Off: no ops are emitted and nothing is held (a broker without a store).
    pub enabled: bool,
    /// The op_seq the next op gets; op_seqs start at 1.
    next_op_seq: u64,
    ops: VecDeque<SequencedOp>,
    /// Every op up to this is durable (reported by the driver).
    durable_through: u64,
    /// The op_seq the entry point running now emitted first (if it emitted any): its replies
    /// wait for the ops from here on (`durable_replies.rs`).
    entry_first_op: u64,
    /// Management jobs waiting for their ops to be durable, and catalog refusals (`commits.rs`).
    pub(crate) commit_notices: commits::CommitNotices,
    /// Durable definitions that may have changed since the last flush (`changes.rs`).
    changed: Vec<Changed>,
    /// Messages to page out once the store reports where it wrote them (`page_out.rs`).
    page_out: page_out::PageOutWaiting,
    /// The last record encoded, so a fanout to many durable queues encodes the message once.
    /// Holding the `Arc` keeps the pointer from being reused by another message.
    last_record: Option<(Arc<Message>, Bytes)>,
    /// Bytes of ops (about) since the last checkpoint offer.
    since_checkpoint: u64,
    /// Offer a checkpoint after this many bytes of ops at least.
    checkpoint_offer_bytes: u64,
    /// Offer one after `checkpoint_offer_bytes` whatever the states' size (tests).
    checkpoint_offer_fixed: bool,
    /// The last offer's states' inline bytes (what an offer copies; kept parts are shared):
    /// the next waits for twice as many ops (ops are cheap to emit, states of many queues are
    /// not).
    last_states_bytes: u64,
}

impl Persistence {
    pub fn new(enabled: bool) -> Self {
        Persistence {
            enabled,
            next_op_seq: 1,
            checkpoint_offer_bytes: CHECKPOINT_OFFER_BYTES,
            ..Persistence::default()
        }
    }

    /// The store id of entry `seq`, a message entering `queue`, when it is to be persisted
    /// there (a store is attached, the queue and the message are durable): the entry's own id
    /// (`EntryIds`), so that it survives a restart.
    pub(crate) fn id_for(&self, queue: &Queue, message: &Message, seq: u64) -> Option<u64> {
        (self.enabled && queue.is_persisted() && message.is_persistent()).then_some(seq)
    }

    /// An entry point begins: what it stores from now on is what its replies stand for.
    pub fn begin_entry(&mut self) {
        self.entry_first_op = self.next_op_seq;
    }

    /// The op_seq of the last op emitted (0 before any).
    pub fn last_op_seq(&self) -> u64 {
        self.next_op_seq - 1
    }

    /// `Settle` of message `msg_id` of queue `id` (for callers holding a queue borrow).
    pub fn settle(&mut self, id: QueueId, msg_id: u64) {
        self.push(StoreOp::Settle { queue: id.0, msg_id });
    }

    /// What the store learns when `entry` of queue `id` is handed to a client: a message taken
    /// without ack left the queue (`Settle`); one delivered for the first time is marked delivered
    /// (`Update`), so after a restart it comes back redelivered=true while a message never
    /// delivered comes back redelivered=false, as RabbitMQ's queue index records deliveries. Call
    /// before the entry moves on. Nothing for transient messages. `group`: the entry's message
    /// group in a queue with groups (`Queue::stored_group`), needed only when
    /// [`Persistence::marks_delivered`] says so.
    pub fn handed_out(&mut self, id: QueueId, entry: &Entry, no_ack: bool, group: Option<u64>) {
        let Some(msg_id) = entry.persist_id() else { return };
        if no_ack {
            self.settle(id, msg_id);
        } else if Self::marks_delivered(entry, no_ack) {
            let delivered = MessageMeta { redelivered: true, ..MessageMeta::of(entry, None, group) }.encode();
            // A message handed out as it is published still has its Enqueue waiting here: mark
            // that record instead of writing a second one.
            if !self.mark_pending_enqueue(id, msg_id, &delivered) {
                self.push(StoreOp::Update { queue: id.0, msg_id, metadata: delivered });
            }
        }
    }

    /// Whether handing `entry` out writes its metadata again (`handed_out`: a stored message's
    /// first delivery awaiting an ack), so that its group must be known.
    pub fn marks_delivered(entry: &Entry, no_ack: bool) -> bool {
        entry.persist_id().is_some() && !no_ack && !entry.redelivered
    }

    /// Replaces the metadata of message `msg_id`'s Enqueue into queue `id` if it is among the
    /// newest ops not yet taken by the store; whether it was.
    fn mark_pending_enqueue(&mut self, id: QueueId, msg_id: u64, delivered: &Bytes) -> bool {
        for sequenced in self.ops.iter_mut().rev().take(PENDING_ENQUEUE_LOOKBACK) {
            if let StoreOp::Enqueue { queue, msg_id: pending, metadata, .. } = &mut sequenced.op {
                if *queue == id.0 && *pending == msg_id {
                    *metadata = delivered.clone();
                    return true;
                }
            }
        }
        false
    }

    fn push(&mut self, op: StoreOp) {
        self.since_checkpoint += match &op {
            StoreOp::Enqueue { metadata, record, .. } => (64 + metadata.len() + record.len()) as u64,
            _ => 64,
        };
        let op_seq = self.next_op_seq;
        self.next_op_seq += 1;
        self.ops.push_back(SequencedOp { op_seq, op });
    }

    fn record_of(&mut self, message: &Arc<Message>) -> Bytes {
        if let Some((last, record)) = &self.last_record {
            if Arc::ptr_eq(last, message) {
                return record.clone();
            }
        }
        let record = encode_record(message);
        self.last_record = Some((message.clone(), record.clone()));
        record
    }
}

impl Broker {
    /// The next op for the store, in op_seq order.
    pub fn poll_store_op(&mut self) -> Option<SequencedOp> {
        self.offer_checkpoint();
        let op = self.persist.ops.pop_front();
        if self.persist.ops.is_empty() {
            self.persist.last_record = None;
        }
        op
    }

    /// Offers the store a checkpoint with the queues' states (ADR 0019) after enough ops since
    /// the last offer: after every op emitted so far, as those ops leave the queues now.
    fn offer_checkpoint(&mut self) {
        let persist = &self.persist;
        let states_bytes = if persist.checkpoint_offer_fixed { 0 } else { persist.last_states_bytes };
        let due = persist.checkpoint_offer_bytes.max(states_bytes.saturating_mul(2));
        if !persist.enabled || persist.since_checkpoint < due {
            return;
        }
        self.queues.values_mut().for_each(Queue::prepare_checkpoint);
        let mut unsettled: IdMap<QueueId, Vec<u64>> = IdMap::default();
        let waiting_to_dead_letter = self.dead_letter_reads.stored_ids();
        for (queue, id) in self
            .connections
            .channels()
            .map(|(_, channel)| channel)
            .flat_map(Channel::unsettled_stored)
            .chain(waiting_to_dead_letter)
        {
            unsettled.entry(queue).or_default().push(id);
        }
        let states: Vec<QueueState> = (self.queues.values())
            .filter_map(|queue| queue.checkpoint_state(unsettled.get(&queue.id).map_or(&[], Vec::as_slice)))
            .collect();
        self.persist.last_states_bytes =
            states.iter().flat_map(|s| &s.parts).map(StatePart::inline_bytes).sum();
        self.persist.since_checkpoint = 0;
        self.persist.push(StoreOp::Checkpoint(states));
    }

    /// Offers checkpoints after every `bytes` of ops, however large the states (tests: after a
    /// few messages).
    pub fn set_checkpoint_offer_every(&mut self, bytes: u64) {
        self.persist.checkpoint_offer_bytes = bytes;
        self.persist.checkpoint_offer_fixed = true;
    }

    /// `Enqueue` for an entry that just entered queue `id` (waiting until `wait_until`, if set).
    pub(crate) fn persist_enqueue(&mut self, id: QueueId, entry: &Entry, wait_until: Option<Timestamp>) {
        let Some(msg_id) = entry.persist_id() else { return };
        // A message entering a queue is always in memory (paging happens once it is stored).
        let Some(message) = entry.resident() else { return };
        let metadata = MessageMeta::of(entry, wait_until, self.stored_group(id, entry)).encode();
        let record = self.persist.record_of(message);
        self.persist.push(StoreOp::Enqueue { queue: id.0, msg_id, metadata, record });
        self.wait_to_page_out(id, entry, wait_until);
    }

    /// `Enqueue` for a delivered entry of queue `id` whose message changed (annotated by a 1.0
    /// `modified` outcome) under its new store id: it goes back to the queue in memory, so it is
    /// not noted for paging out.
    pub(crate) fn persist_rewritten(&mut self, id: QueueId, entry: &Entry) {
        let (Some(msg_id), Some(message)) = (entry.persist_id(), entry.resident()) else { return };
        let metadata = MessageMeta::of(entry, None, self.stored_group(id, entry)).encode();
        let record = self.persist.record_of(message);
        self.persist.push(StoreOp::Enqueue { queue: id.0, msg_id, metadata, record });
    }

    /// The group `entry` is stored with in queue `id` (`Queue::stored_group`).
    pub(crate) fn stored_group(&self, id: QueueId, entry: &Entry) -> Option<u64> {
        self.queues.get(&id).and_then(|queue| queue.stored_group(entry))
    }

    /// `Settle` for a persisted message leaving queue `id` for good.
    pub(crate) fn persist_settle(&mut self, id: QueueId, persist_id: Option<u64>) {
        if let Some(msg_id) = persist_id {
            self.persist.push(StoreOp::Settle { queue: id.0, msg_id });
        }
    }

    /// `Update` for a persisted message whose count or back-off changed.
    pub(crate) fn persist_update(&mut self, id: QueueId, entry: &Entry, wait_until: Option<Timestamp>) {
        if let Some(msg_id) = entry.persist_id() {
            let metadata = MessageMeta::of(entry, wait_until, self.stored_group(id, entry)).encode();
            self.persist.push(StoreOp::Update { queue: id.0, msg_id, metadata });
        }
    }

    /// `Purge` for a persisted queue being deleted.
    pub(crate) fn persist_purge(&mut self, id: QueueId, persisted: bool) {
        if self.persist.enabled && persisted {
            self.persist.push(StoreOp::Purge { queue: id.0 });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hourglass_wire::{BasicProperties, FieldTable, FieldValue};

    /// Metadata round-trips, and another version or length is refused rather than guessed at.
    #[test]
    fn metadata_round_trips() {
        let facts = Some(MessageFacts { hot_bits: 1 << 56 | 5001, body_size: 1024 });
        let meta = MessageMeta {
            ready_at_ms: Some(7),
            wait_until_ms: 9,
            delivery_count: 3,
            redelivered: true,
            deliveries_tracked: true,
            facts,
            group: None,
        };
        assert_eq!(meta.encode().len(), META_BYTES);
        assert_eq!(MessageMeta::decode(&meta.encode()), Some(meta));
        let never_ready = MessageMeta { ready_at_ms: None, ..meta };
        assert_eq!(MessageMeta::decode(&never_ready.encode()), Some(never_ready));
        // Version 1, as written before paging: still read, without the facts.
        let v1 = MessageMeta { facts: None, ..meta };
        assert_eq!(v1.encode().len(), META_BYTES_1);
        assert_eq!(MessageMeta::decode(&v1.encode()), Some(v1));
        // Version 3: with the message's group.
        let grouped = MessageMeta { group: Some(u64::MAX - 1), ..meta };
        assert_eq!(grouped.encode().len(), META_BYTES_GROUPED);
        assert_eq!(MessageMeta::decode(&grouped.encode()), Some(grouped));
        assert_eq!(
            MessageMeta::decode(&MessageMeta { group: Some(0), ..meta }.encode()).unwrap().group,
            Some(0)
        );
        let mut other = meta.encode().to_vec();
        other[0] = 3;
        assert_eq!(MessageMeta::decode(&other), None, "version 3 is longer");
        other[0] = 4;
        assert_eq!(MessageMeta::decode(&other), None);
        assert_eq!(MessageMeta::decode(&meta.encode()[..10]), None);
    }

    /// A message record round-trips: exchange, routing key, properties and body.
    #[test]
    fn record_round_trips() {
        let properties = BasicProperties {
            delivery_mode: Some(2),
            expiration: Some(ShortStr::from_static("5000")),
            headers: Some(FieldTable::from_entries([("k", FieldValue::I64(1))])),
            ..Default::default()
        };
        let message = Message::new(
            ShortStr::from_static("x"),
            ShortStr::from_static("rk"),
            properties.into(),
            Bytes::from_static(b"body"),
        );
        let decoded = decode_record(encode_record(&message)).unwrap();
        assert_eq!(decoded, message);
        assert_eq!(decoded.expiration_ms(), Some(5000));
        assert!(decode_record(Bytes::from_static(&[5, b'a'])).is_none());
    }

    /// A record as earlier versions wrote it (properties encoded from decoded fields) still reads:
    /// the format did not change when properties started to be stored as received.
    #[test]
    fn record_in_the_stored_format_reads() {
        // exchange "x", routing key "rk", properties {delivery-mode 2, expiration "50"}, body.
        let record = [1, b'x', 2, b'r', b'k', 0x11, 0x00, 2, 2, b'5', b'0', b'b', b'o', b'd', b'y'];
        let message = decode_record(Bytes::copy_from_slice(&record)).unwrap();
        assert_eq!((message.exchange.as_bytes(), message.routing_key.as_bytes()), (&b"x"[..], &b"rk"[..]));
        assert_eq!(
            (message.is_persistent(), message.expiration_ms(), &message.body[..]),
            (true, Some(50), &b"body"[..])
        );
        assert_eq!(encode_record(&message), Bytes::copy_from_slice(&record));
    }
}
