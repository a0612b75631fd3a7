//! A queue: its ready messages, its consumers and its counts. Each time feature (docs/semantics.md) lives in its
//! own file beside this one; this file holds only what every queue has and keeps the feature
//! indexes in step with the ready messages.

pub(crate) mod args;
mod checkpoint;
pub(crate) mod consumers;
pub(crate) mod dead_letter;
pub mod dedup;
pub(crate) mod delay;
pub(crate) mod delivery_limit;
pub(crate) mod entry;
pub(crate) mod expires;
pub(crate) mod far_delays;
pub(crate) mod far_files;
pub(crate) mod far_record;
pub(crate) mod far_roster;
mod group_state;
pub mod message_groups;
pub(crate) mod overflow;
pub(crate) mod packed;
pub(crate) mod paging;
pub(crate) mod ready;
mod ready_run;
mod ready_times;
pub mod sqs_args;
mod state_bytes;
mod stats;
mod tally;
pub(crate) mod ttl;
pub(crate) mod visibility;

use std::collections::HashMap;

use hourglass_wire::{FieldTable, ShortStr};

use crate::api::{ChannelId, ConnectionId};
use crate::channel::Unacked;
use crate::message::Message;
use crate::message_stats::MessageStats;
use crate::persist::RecordLocation;
use crate::time::{earliest, Timestamp};
pub use args::{
    DeadLetterStrategy, DelayedRetry, DeliveryCounting, Overflow, QueueArgs, QueueSettings, QueueType,
    RetryType, ReturnKind,
};
pub(crate) use args::{RetryConflict, SettingError};
use consumers::Consumers;
pub use dead_letter::DeathReason;
use delay::{DelayIndex, Waiting};
pub use delay::{DelayedInfo, NEAR_HORIZON_MS};
use entry::{Entry, Paged, Payload, Seq};
pub use far_delays::SpillRead;
pub use far_files::{MemorySpillFiles, SpillFiles};
use message_groups::{GroupKey, GroupOrder, MessageGroups};
use packed::Packed;
pub use paging::{MessageRead, PagingLimits, ReadPurpose};
use paging::{Pager, CONSUMER_READ_MAX};
use ready::Ready;
pub use stats::{BindingInfo, QueueStats};
pub use tally::Tally;
use visibility::VisibilityIndex;

/// A queue's identity for the life of the process; a queue deleted and declared again under the
/// same name gets a new id, so late acks for the old one are told apart.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct QueueId(pub u64);

/// How a queue was declared.
#[derive(Clone, Debug, PartialEq)]
pub struct QueueSpec {
    pub name: ShortStr,
    pub durable: bool,
    /// The connection that owns an exclusive queue.
    pub exclusive_owner: Option<ConnectionId>,
    pub auto_delete: bool,
    pub arguments: FieldTable,
}

#[derive(Debug)]
pub(crate) struct Queue {
    pub id: QueueId,
    pub vhost: String,
    pub spec: QueueSpec,
    /// Effective arguments: the declared ones merged with the policies that apply (semantics §6).
    pub args: QueueArgs,
    /// The policy and operator policy that apply, by name.
    pub policy: Option<String>,
    pub operator_policy: Option<String>,
    pub ready: Ready,
    pub consumers: Consumers,
    /// Deliveries of this queue's messages not yet settled (held by channels): how many, their
    /// body bytes, the persistent ones.
    pub unacked: Tally,
    /// An auto-delete queue is deleted when its last consumer goes, once it has had one.
    pub had_consumer: bool,
    /// Last declare, basic.get or consumer change, for `x-expires`.
    pub last_used: Timestamp,
    /// The deadline this queue is filed under in the timer index; set by its owner only
    /// (`queues.rs`).
    pub(crate) scheduled: Option<Timestamp>,
    pub counters: QueueCounters,
    /// Messages waiting for their due time (semantics §3).
    pub delayed: DelayIndex,
    /// Deliveries that come back when their visibility timeout runs out (semantics §4).
    pub visibility: VisibilityIndex,
    /// Reading paged-out messages back (ADR 0007).
    pub pager: Pager,
    /// The deduplication ids held, when the queue deduplicates (semantics §8).
    pub dedup: dedup::DedupCache,
    /// How an SQS queue's message groups order its receives (`message_groups.rs`): a FIFO
    /// queue's (declared with `x-sqs-fifo`) or a standard one's tenants (made with an
    /// `x-sqs-*` argument). Fixed when the queue is made or restored.
    group_order: Option<GroupOrder>,
    /// The groups, kept by a FIFO queue from the start and by a fair queue from its first
    /// message with a group (a queue without groups pays nothing for them).
    groups: Option<MessageGroups>,
    /// The groups of waiting messages (delayed, or waiting for a back-off) that are paged out,
    /// in a queue with message groups: they become ready in their group without a read.
    waiting_groups: HashMap<Seq, GroupKey>,
    /// Ready messages restored from the log whose places are among the ready messages, until
    /// the restore puts them there (`finish_restore`).
    restoring: Vec<Entry>,
    /// The places of ready messages a checkpoint's state listed as held in memory after their
    /// delay, until the restore has read them back (`checkpoint.rs`, `take_promoted`).
    promoted_held: checkpoint::PromotedHeld,
}

/// Whether a queue with this spec was made or changed over SQS: it carries an `x-sqs-*`
/// argument.
fn is_sqs_managed(spec: &QueueSpec) -> bool {
    spec.arguments.iter().any(|(key, _)| key.as_bytes().starts_with(b"x-sqs-"))
}

/// How a queue's message groups order its receives: an SQS FIFO queue's groups one message
/// at a time, an SQS standard queue's tenants fairly; a queue declared over AMQP keeps
/// RabbitMQ's order and no groups.
fn group_order(args: &QueueArgs, spec: &QueueSpec) -> Option<GroupOrder> {
    if args.sqs.fifo {
        Some(GroupOrder::Fifo)
    } else {
        is_sqs_managed(spec).then_some(GroupOrder::Fair)
    }
}

/// Events counted over a queue's life (semantics §7).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QueueCounters {
    pub expired: u64,
    pub dead_lettered_rejected: u64,
    pub dead_lettered_expired: u64,
    pub dead_lettered_maxlen: u64,
    pub dead_lettered_delivery_limit: u64,
    pub redelivered: u64,
    pub visibility_expired: u64,
    /// Messages dropped as duplicates (semantics §8).
    pub deduplicated: u64,
    /// Published into, delivered from and acked (`message_stats.rs`).
    pub messages: MessageStats,
}

/// Why a take for a consumer, a get, an SQS receive or a message-move step took nothing
/// (`Queue::take_for_consumer`, `Broker::get_one`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum NotTaken {
    /// Nothing to take now (for a get: also its channel or queue gone; counted as an empty get).
    Empty,
    /// What it would take (the head, or the one its message groups chose) is paged out and a
    /// read of it is out (`message_reads.rs`): the answer runs the queue again. A basic.get
    /// waits for it (`waiting_gets.rs`), an SQS receive tells its endpoint to wait
    /// (`Broker::sqs_wait`), a message-move step ends (the task's next step goes on).
    Reading,
}

/// What came of taking a message the message groups chose (`Queue::take_chosen`).
enum Chosen {
    Took(Entry),
    /// It is paged out and its read is out: take nothing until the answer.
    Wait,
    /// It could not be taken (gone, or unreadable and dropped): choose again.
    Gone,
}

/// What the head needs before it is taken (`Queue::prepare_head`).
enum Head {
    Take,
    /// Its read is out: take nothing until the answer.
    Wait,
    /// Its read could not read it: drop it.
    Unreadable,
}

impl Queue {
    pub fn new(
        id: QueueId,
        vhost: String,
        spec: QueueSpec,
        args: QueueArgs,
        pager: Pager,
        now: Timestamp,
    ) -> Self {
        let (max_priority, default_priority) = args.priority_levels();
        let group_order = group_order(&args, &spec);
        let groups = group_order.filter(|order| *order == GroupOrder::Fifo).map(MessageGroups::new);
        Queue {
            id,
            vhost,
            spec,
            args,
            policy: None,
            operator_policy: None,
            ready: Ready::with_max_priority(max_priority, default_priority),
            consumers: Consumers::default(),
            unacked: Tally::default(),
            had_consumer: false,
            last_used: now,
            scheduled: None,
            counters: QueueCounters::default(),
            delayed: DelayIndex::with_spill_files(pager.spill_files(), id.0),
            visibility: VisibilityIndex::default(),
            pager,
            dedup: dedup::DedupCache::default(),
            group_order,
            groups,
            waiting_groups: HashMap::new(),
            restoring: Vec::new(),
            promoted_held: Default::default(),
        }
    }

    pub fn name(&self) -> &ShortStr {
        &self.spec.name
    }

    /// How many SQS receives could get a message now: one per ready message, but from an SQS
    /// FIFO queue one per group with a ready message and none in flight, so that no message is
    /// received while one before it in its group is (docs/sqs.md).
    pub fn sqs_receivable(&self) -> usize {
        match &self.groups {
            Some(groups) if groups.order() == GroupOrder::Fifo => groups.receivable_groups(),
            _ => self.ready.message_count(),
        }
    }

    /// The group of `entry`'s message, read back if it is not in memory (an SQS queue only);
    /// one that cannot be read is in the group of messages without one.
    fn group_of(&self, entry: &Entry) -> GroupKey {
        match self.pager.message_of(&entry.payload) {
            Ok(message) => message_groups::group_of(&message),
            Err(_) => message_groups::NO_GROUP,
        }
    }

    /// The group `entry` is stored with (`MessageMeta::group`), so that a restart learns it
    /// without reading the record: in a queue with message groups, that of its message in
    /// memory, else the one the groups know it by; `None` in other queues, or when unknown
    /// without a read.
    pub(crate) fn stored_group(&self, entry: &Entry) -> Option<GroupKey> {
        self.group_order?;
        match entry.resident() {
            Some(message) => Some(message_groups::group_of(message)),
            None => self
                .groups
                .as_ref()
                .and_then(|groups| groups.group_of_ready(entry.seq))
                .or_else(|| self.waiting_groups.get(&entry.seq).copied()),
        }
    }

    /// Keeps the group of waiting message `seq`, paged out (`waiting_groups`): in an SQS FIFO
    /// queue every one (there "unknown" means a read), in a fair queue those with a group (there
    /// "unknown" is "none").
    fn keep_waiting_group(&mut self, seq: Seq, group: GroupKey) {
        match self.group_order {
            Some(GroupOrder::Fifo) => {}
            Some(GroupOrder::Fair) if group != message_groups::NO_GROUP => {}
            _ => return,
        }
        self.waiting_groups.insert(seq, group);
    }

    /// The group of waiting message `seq`, kept since it was paged out (`waiting_groups`), and
    /// forgotten: it becomes ready or leaves.
    pub(crate) fn take_waiting_group(&mut self, seq: Seq) -> Option<GroupKey> {
        if self.waiting_groups.is_empty() {
            return None;
        }
        self.waiting_groups.remove(&seq)
    }

    /// Notes that `entry` became ready in `known` group, for an SQS queue's groups; when not
    /// known (`None`: a message in memory, or a paged one stored before metadata version 3), a
    /// FIFO queue reads the group of a paged message, while a fair queue reads the group of a
    /// message in memory only: a paged one counts as without a group rather than costing a
    /// read (`message_groups.rs`).
    fn group_ready_in(&mut self, entry: &Entry, known: Option<GroupKey>) {
        let Some(order) = self.group_order else { return };
        let group = match (known, order) {
            (Some(group), _) => group,
            (None, GroupOrder::Fifo) => self.group_of(entry),
            (None, GroupOrder::Fair) => {
                entry.resident().map_or(message_groups::NO_GROUP, |m| message_groups::group_of(m))
            }
        };
        // A fair queue's groups start with its first message that has one.
        if self.groups.is_none() && group == message_groups::NO_GROUP {
            return;
        }
        self.groups.get_or_insert_with(|| MessageGroups::new(order)).ready(entry.seq, group);
    }

    /// Notes that `seq` left the ready messages, for an SQS queue's groups.
    fn group_left_ready(&mut self, seq: Seq) {
        if let Some(groups) = &mut self.groups {
            groups.left_ready(seq);
        }
    }

    /// A new entry `seq` (from the broker's `EntryIds`) for a message entering this queue now;
    /// its TTL starts now (semantics §1).
    pub fn new_entry(&self, seq: Seq, payload: Payload, now: Timestamp, persist_id: Option<u64>) -> Entry {
        let expires_at = self.deadline_from(payload.hot().expiration_ms(), now);
        Entry::with_payload(seq, payload, Some(now), expires_at, persist_id)
    }

    /// Holds a newly arrived message, entry `seq`, until `due`; its TTL will start then
    /// (semantics §3).
    pub fn delay(&mut self, seq: Seq, payload: Payload, due: Timestamp, persist_id: Option<u64>) {
        let entry = Entry::with_payload(seq, payload, None, None, persist_id);
        self.delayed.insert(due, Waiting { entry, returning: false });
    }

    /// Keeps far-future delayed messages in `files` from now on (ADR 0013); a queue already
    /// holding delayed messages keeps them where they are.
    pub fn attach_spill_files(&mut self, files: std::sync::Arc<dyn SpillFiles>) {
        self.pager.set_spill_files(files.clone());
        if self.delayed.message_count() == 0 {
            self.delayed = DelayIndex::with_spill_files(Some(files), self.id.0);
        }
    }

    /// Whether a message entering now (ready, or `delayed`) is to be paged out once stored: the
    /// queue already holds more than its paging limits in memory (ADR 0007). A waiting one
    /// counts the waiting messages and the ready ones held in memory: it becomes ready as it
    /// is, and a ready message pages out only when the store reports it, so one that waited in
    /// memory stays there (a delay queue's ready backlog grew in memory past the limits).
    pub fn pages_out(&self, delayed: bool) -> bool {
        if !self.pager.enabled() {
            return false;
        }
        if !delayed {
            return self.over_resident_limits();
        }
        let (ready, ready_bytes) = self.ready.resident();
        let (waiting, waiting_bytes) = (self.delayed.message_count(), self.delayed.body_bytes());
        self.pager.limits.pages_out(waiting + ready, waiting_bytes + ready_bytes)
    }

    /// The store made message `persist_id` (entry `seq`, waiting until `due` if delayed) durable
    /// at `location`: keeps only the location if the queue is still over its paging limits.
    pub fn page_out(&mut self, seq: Seq, due: Option<Timestamp>, persist_id: u64, location: RecordLocation) {
        if !self.pages_out(due.is_some()) {
            return;
        }
        let paged = |message: &Message| Paged::new(location, message.hot(), message.body_size());
        let Some(due) = due else {
            self.ready.page_out(seq, persist_id, paged);
            return;
        };
        // A waiting message keeps its group in a queue with groups (`waiting_groups`).
        let mut group = None;
        let grouped = self.group_order.is_some();
        let paged_out = self.delayed.page_out(due, seq, persist_id, |message| {
            group = grouped.then(|| message_groups::group_of(message));
            paged(message)
        });
        if let Some(group) = group.filter(|_| paged_out) {
            self.keep_waiting_group(seq, group);
        }
    }

    /// The TTL deadline of a message with this `expiration` property when it becomes ready at
    /// `ready_at` (semantics §1).
    pub fn deadline_from(&self, expiration_ms: Option<u64>, ready_at: Timestamp) -> Option<Timestamp> {
        ttl::deadline(self.args.message_ttl_ms, expiration_ms, ready_at)
    }

    /// Applies the queue's TTL as it is now to the messages already ready (SQS's retention
    /// period applies to every message of the queue; AMQP's TTL only to messages entering).
    pub fn apply_ttl_to_ready(&mut self) {
        let queue_ttl = self.args.message_ttl_ms;
        self.ready.apply_ttl(|expiration, ready_at| ttl::deadline(queue_ttl, expiration, ready_at));
    }

    /// Whether this queue's persistent messages go to the store: durable and not exclusive
    /// (an exclusive queue dies with its connection, so it never outlives a restart).
    pub fn is_persisted(&self) -> bool {
        self.spec.durable && self.spec.exclusive_owner.is_none()
    }

    /// Gives the queue new arguments, parsed as `args` (SQS's SetQueueAttributes): a queue
    /// declared over AMQP and changed over SQS becomes fair from its next message with a group
    /// (`x-sqs-fifo` is fixed, so a FIFO queue stays one).
    pub fn set_arguments(&mut self, arguments: FieldTable, args: QueueArgs) {
        self.spec.arguments = arguments;
        self.args = args;
        if self.group_order.is_none() {
            self.group_order = group_order(&self.args, &self.spec);
        }
    }

    /// Whether the queue was made or changed over SQS (it carries an `x-sqs-*` argument).
    pub fn is_sqs_managed(&self) -> bool {
        is_sqs_managed(&self.spec)
    }

    /// Puts a message recovered from the store back: delayed until `wait_until` when set, else
    /// ready at its place by id, in message group `group` when its metadata kept it. One whose
    /// place is among the ready messages (not after them all) is put there by
    /// [`Queue::finish_restore`], which the restore calls after the last.
    pub(crate) fn restore_entry(
        &mut self,
        entry: Entry,
        wait_until: Option<Timestamp>,
        group: Option<GroupKey>,
    ) {
        match wait_until {
            Some(due) => {
                if let Some(group) = group {
                    self.keep_waiting_group(entry.seq, group);
                }
                let returning = entry.ready_at().is_some();
                self.delayed.insert(due, Waiting { entry, returning });
            }
            // At its place by id (the store gives enqueue order, and ready messages are kept in
            // id order); an append when they agree, as they do for everything this broker wrote.
            None if self.ready.max_seq().is_none_or(|last| last < entry.seq) => {
                self.return_to_ready_in(entry, group)
            }
            // Among the ready messages: those a checkpoint's state did not hold (the resident
            // head, one unacknowledged), read back from the log after the state's in id order.
            // Put back one by one in that order, each would shift all put back before it.
            None => {
                self.group_ready_in(&entry, group);
                self.restoring.push(entry);
            }
        }
    }

    /// Puts the ready messages [`Queue::restore_entry`] held back at their places: the last first,
    /// so that each lands before those already put back, which it does not shift.
    pub(crate) fn finish_restore(&mut self) {
        self.restoring.sort_unstable_by_key(|entry| std::cmp::Reverse(entry.seq));
        for entry in std::mem::take(&mut self.restoring) {
            self.ready.requeue(entry);
        }
        self.promoted_held = Default::default();
    }

    /// Appends an entry to the ready messages, packed if the queue keeps more than its paging
    /// limits in memory whole and the store will not page it out (ADR 0015).
    /// In message group `group` when it is known (`group_ready_in`).
    pub fn push_ready(&mut self, mut entry: Entry, group: Option<GroupKey>) {
        if entry.persist_id().is_none() && self.over_resident_limits() {
            if let Some(packed) = entry.resident().and_then(|message| Packed::new(message)) {
                entry.payload = Payload::Packed(packed);
            }
        }
        self.group_ready_in(&entry, group);
        self.ready.push_back(entry);
    }

    /// Whether the ready messages held in memory whole are past the paging limits.
    fn over_resident_limits(&self) -> bool {
        let (count, bytes) = self.ready.resident();
        self.pager.limits.pages_out(count, bytes)
    }

    /// Takes the next ready message for a delivery: in a fair queue a quiet tenant's before a
    /// noisy one's (`message_groups.rs`), else the oldest. A paged one is asked for with a batch
    /// behind it (ADR 0007), and nothing is taken until the answer. One that cannot be read is
    /// dropped and the next one taken.
    fn take_next(&mut self, expect_ack: bool) -> Result<Entry, NotTaken> {
        while let Some(seq) = self.groups.as_ref().and_then(MessageGroups::fair_choice) {
            match self.take_chosen(seq, expect_ack) {
                Chosen::Took(entry) => return Ok(entry),
                Chosen::Wait => return Err(NotTaken::Reading),
                Chosen::Gone => {}
            }
        }
        self.take_oldest(expect_ack)
    }

    /// Takes ready message `seq`, which the message groups chose; a paged one is asked for with
    /// a batch behind it (`ask_read_from`, unless a read is out already) and waited for.
    fn take_chosen(&mut self, seq: Seq, expect_ack: bool) -> Chosen {
        if let Some(at) = self.ready.paged_location(seq) {
            if self.pager.is_unreadable_at(at) {
                if let Some(entry) = self.remove_ready(seq) {
                    self.pager.drop_unread(&entry);
                }
                return Chosen::Gone;
            }
            if !self.pager.reading() {
                self.ask_read_from(Some(seq));
            }
            return Chosen::Wait;
        }
        match self.take_ready(seq, expect_ack) {
            Some(entry) => Chosen::Took(entry),
            None => Chosen::Gone,
        }
    }

    /// Takes the oldest ready message (see `take_next`), its paged head asked for
    /// (`prepare_head`).
    fn take_oldest(&mut self, expect_ack: bool) -> Result<Entry, NotTaken> {
        loop {
            match self.prepare_head().ok_or(NotTaken::Empty)? {
                Head::Wait => return Err(NotTaken::Reading),
                Head::Unreadable => {
                    let entry = self.pop_ready().ok_or(NotTaken::Empty)?;
                    self.pager.drop_unread(&entry);
                    continue;
                }
                Head::Take => {}
            }
            // The head is in memory, or packed and unpacked by page_in.
            let mut entry = self.pop_ready().ok_or(NotTaken::Empty)?;
            if self.pager.page_in(&mut entry) {
                self.mark_delivered(&entry, expect_ack);
                return Ok(entry);
            }
        }
    }

    /// Readies the head to be taken (`None`: there is none): a paged head is asked for with a
    /// batch behind it (`ask_read_from`) unless a read is out already, and waits; one its read
    /// could not read is to be dropped.
    fn prepare_head(&mut self) -> Option<Head> {
        let head = self.ready.head()?;
        if head.paged_at().is_none() {
            return Some(Head::Take);
        }
        if self.pager.is_unreadable(head) {
            return Some(Head::Unreadable);
        }
        if !self.pager.reading() {
            self.ask_read_from(None);
        }
        Some(if self.ready.head()?.paged_at().is_some() { Head::Wait } else { Head::Take })
    }

    /// Takes the next ready message for an SQS receive, awaiting its delete: from an SQS FIFO
    /// queue the next of group `taken` (the group this receive took its last message from), else
    /// the oldest of a group with nothing in flight (`message_groups.rs`); from any other queue
    /// the next, as for a consumer. A paged one is asked for (`take_for_consumer`).
    pub(crate) fn take_for_sqs_receive(&mut self, taken: Option<GroupKey>) -> Result<Entry, NotTaken> {
        if self.groups.as_ref().is_none_or(|groups| groups.order() != GroupOrder::Fifo) {
            return self.take_for_consumer(true);
        }
        loop {
            let next = self.groups.as_ref().and_then(|groups| groups.next_receivable(taken));
            match self.take_chosen(next.ok_or(NotTaken::Empty)?, true) {
                Chosen::Took(entry) => return Ok(entry),
                Chosen::Wait => return Err(NotTaken::Reading),
                Chosen::Gone => {}
            }
        }
    }

    /// Takes the next ready message for a consumer, a basic.get (a client's, or the HTTP API's)
    /// or an SQS receive (`take_next`). It reads no record on the broker's thread: a paged one is
    /// asked for with a batch behind it (`ask_read_from`) and nothing comes back until the read
    /// is answered (`messages_read`).
    pub(crate) fn take_for_consumer(&mut self, expect_ack: bool) -> Result<Entry, NotTaken> {
        self.take_next(expect_ack)
    }

    /// Whether the message an SQS receive would take first is paged out and a read is out: the
    /// oldest of a group with nothing in flight in an SQS FIFO queue, else what a consumer's take
    /// would wait for (`take_awaits_read`). A receive could take nothing until the answer, which
    /// wakes the receives waiting (`Broker::sqs_wait`).
    pub fn receive_awaits_read(&self) -> bool {
        match &self.groups {
            Some(groups) if groups.order() == GroupOrder::Fifo => {
                self.pager.reading() && groups.next_receivable(None).is_some_and(|seq| self.is_paged(seq))
            }
            _ => self.take_awaits_read(),
        }
    }

    /// Whether the message a take for a consumer or a get would take first (a quiet tenant's in
    /// a fair queue, else the head) is paged out and a read is out: the take waits for the
    /// answer (`take_next`).
    pub(crate) fn take_awaits_read(&self) -> bool {
        if !self.pager.reading() {
            return false;
        }
        let head_paged = || self.ready.head().is_some_and(|head| head.paged_at().is_some());
        match self.groups.as_ref().and_then(MessageGroups::fair_choice) {
            Some(seq) => self.is_paged(seq),
            None => head_paged(),
        }
    }

    /// Whether ready message `seq` is paged out.
    fn is_paged(&self, seq: Seq) -> bool {
        self.ready.paged_location(seq).is_some()
    }

    /// Asks for the paged messages among the first `PagingLimits::consumer_read` from ready
    /// message `from` on (`None`: the head), up to the resident byte limit, at least one; packed
    /// ones there are unpacked at once. Read from a message the groups chose (`Some`, the head
    /// too), what comes after it may stay in memory long before it is taken (messages of groups
    /// in flight, a noisy tenant's): such a read asks for no more than the queue's resident
    /// limits have room for, at least the chosen message, so its memory stays within them.
    fn ask_read_from(&mut self, from: Option<Seq>) {
        let limits = self.pager.limits;
        let (mut max, mut byte_room) = (limits.consumer_read(), limits.max_resident_bytes);
        if from.is_some() {
            let (resident, resident_bytes) = self.ready.resident();
            max = max.min(limits.max_resident_messages.saturating_sub(resident)).max(1);
            byte_room = byte_room.saturating_sub(resident_bytes);
        }
        self.ask_read(from, max, byte_room);
    }

    /// The HTTP API's get is about to take up to `count` messages from the head, bodies up to
    /// about `body_bytes`: unless a read is out, asks for the paged ones among them (in the
    /// highest level holding messages: one read per priority level) in one read, whatever the
    /// queue's resident limits (the get takes them at once; `count` is at most
    /// `CONSUMER_READ_MAX`, `body_bytes` the API's bound), so that it waits for one read, not
    /// one per batch a consumer's read would bring. Not in a queue with message groups, whose
    /// takes choose messages anywhere (they ask as a consumer's do). Whether a read is out now
    /// (this one, or one asked before): the get should wait for its answer before it takes
    /// anything.
    pub(crate) fn ask_read_for_get(&mut self, count: usize, body_bytes: usize) -> bool {
        let span = count.min(CONSUMER_READ_MAX as usize);
        if span == 0 {
            return false;
        }
        if self.groups.is_none() && !self.pager.reading() {
            self.ask_read(None, span, body_bytes);
        }
        self.pager.reading()
    }

    /// Asks for the paged messages among the `span` ready messages from `from` on (`None`: the
    /// head), their records up to `byte_room` bytes (at least one); packed ones there are
    /// unpacked at once. Not those the last answer could not read: a take drops them.
    fn ask_read(&mut self, from: Option<Seq>, span: usize, byte_room: usize) {
        let (pager, mut asked, mut bytes) = (&mut self.pager, Vec::new(), 0usize);
        self.ready.page_in_from(from, span, |payload| match payload {
            Payload::Paged(paged) if pager.is_unreadable_at(paged.location()) => false,
            Payload::Paged(paged) => {
                if asked.is_empty() || bytes < byte_room {
                    bytes += paged.location().record_bytes as usize;
                    asked.push(paged.location());
                }
                false
            }
            _ => pager.make_resident(payload).is_ok(),
        });
        self.pager.ask(asked, from, span);
    }

    /// The answer to the read `ask_read` asked for: the messages read, in the order of
    /// `locations`. Those still among the ready messages it was asked among are put in memory;
    /// the others are left to be asked for again.
    pub fn messages_read(&mut self, locations: &[RecordLocation], messages: Vec<Result<Message, String>>) {
        let (mut read, from, span) = self.pager.answered(locations, messages);
        let pager = &mut self.pager;
        self.ready.page_in_from(from, span.max(pager.limits.consumer_read()), |payload| {
            pager.resident_from(&mut read, payload)
        });
    }

    /// Takes ready message `seq` for a delivery, read back if paged out. `None` when it cannot
    /// be: not among the ready messages after all (then forgotten by the groups rather than
    /// offered again), or unreadable (dropped, `Pager::page_in`).
    fn take_ready(&mut self, seq: Seq, expect_ack: bool) -> Option<Entry> {
        let Some(mut entry) = self.remove_ready(seq) else {
            self.group_left_ready(seq);
            return None;
        };
        if !self.pager.page_in(&mut entry) {
            return None;
        }
        self.mark_delivered(&entry, expect_ack);
        Some(entry)
    }

    /// Removes ready message `seq`, wherever it is in the queue.
    pub fn remove_ready(&mut self, seq: Seq) -> Option<Entry> {
        let entry = self.ready.remove(seq)?;
        self.group_left_ready(seq);
        Some(entry)
    }

    /// Counts a delivery of `entry` as unacked if an ack is expected (every delivery is counted
    /// here, also those made without passing through the ready messages).
    pub fn mark_delivered(&mut self, entry: &Entry, expect_ack: bool) {
        if expect_ack {
            self.unacked.add(entry);
            if self.groups.is_some() {
                let group = self.group_of(entry);
                if let Some(groups) = &mut self.groups {
                    groups.delivered(group);
                }
            }
        }
    }

    /// A delivery is leaving its channel (settled or its channel gone): its consumer gets the
    /// credit back and its visibility timer stops.
    pub(crate) fn forget_delivery(&mut self, conn: ConnectionId, channel: ChannelId, delivery: &Unacked) {
        if let Some(tag) = &delivery.consumer_tag {
            if let Some(consumer) = self.consumers.find_mut(conn, channel, tag) {
                consumer.unacked = consumer.unacked.saturating_sub(1);
            }
        }
        if let Some(deadline) = delivery.deadline {
            self.visibility.remove(deadline.at, visibility::DeliveryRef { conn, channel, tag: delivery.tag });
        }
    }

    /// The delivery of `entry` was settled (acked, dropped, or it is coming back): it is no
    /// longer unacked.
    pub fn settle(&mut self, entry: &Entry) {
        self.unacked.remove(entry);
        if self.groups.is_some() {
            let group = self.group_of(entry);
            if let Some(groups) = &mut self.groups {
                groups.settled(group);
            }
        }
    }

    /// A delivery came back unsettled: it becomes ready again at its old place, keeping its
    /// deadline (semantics §1: "when they come back their deadline still applies").
    pub fn requeue(&mut self, mut entry: Entry) {
        self.settle(&entry);
        entry.redelivered = true;
        self.counters.redelivered += 1;
        self.return_to_ready(entry);
    }

    /// Holds a returning message for its redelivery back-off (semantics §5); it keeps its place.
    pub fn delay_return(&mut self, mut entry: Entry, due: Timestamp) {
        self.settle(&entry);
        entry.redelivered = true;
        self.counters.redelivered += 1;
        self.delayed.insert(due, Waiting { entry, returning: true });
    }

    /// Puts an entry that was ready before back at its place, with its deadline.
    pub fn return_to_ready(&mut self, entry: Entry) {
        self.return_to_ready_in(entry, None);
    }

    /// `return_to_ready`, in message group `group` when it is known (`group_ready_in`).
    pub(crate) fn return_to_ready_in(&mut self, entry: Entry, group: Option<GroupKey>) {
        self.group_ready_in(&entry, group);
        self.ready.requeue(entry);
    }

    /// Removes the ready messages whose deadline is at or before `now`, earliest first.
    pub fn take_expired(&mut self, now: Timestamp, out: &mut Vec<Entry>) {
        let before = out.len();
        self.ready.take_expired(now, out);
        self.counters.expired += (out.len() - before) as u64;
        if let Some(groups) = &mut self.groups {
            for entry in &out[before..] {
                groups.left_ready(entry.seq);
            }
        }
    }

    /// Removes the oldest ready message (x-overflow drop-head) as it is: a paged one is read only
    /// if it is dead-lettered (`Broker::dead_letter_entry`).
    pub fn drop_head(&mut self) -> Option<Entry> {
        self.pop_ready()
    }

    /// Removes the oldest ready message as it is, for the message groups too.
    fn pop_ready(&mut self) -> Option<Entry> {
        let entry = self.ready.pop_front()?;
        self.group_left_ready(entry.seq);
        Some(entry)
    }

    /// Drops every ready message; returns how many there were and appends the store ids of the
    /// persisted ones to `settled`.
    pub fn purge(&mut self, settled: &mut Vec<u64>) -> usize {
        if let Some(groups) = &mut self.groups {
            groups.ready_cleared();
        }
        self.ready.purge(settled)
    }

    /// Notes a use of the queue for `x-expires` (declare, basic.get, consumer change).
    pub fn touch(&mut self, now: Timestamp) {
        self.last_used = now;
    }

    /// The earliest time this queue has timer work: a message deadline or its own expiry.
    pub fn next_deadline(&self) -> Option<Timestamp> {
        let expiry = expires::deadline(self.args.expires_ms, self.last_used, !self.consumers.is_empty());
        let messages = earliest(self.ready.deadlines().next(), self.delayed.next_deadline());
        earliest(earliest(messages, self.visibility.next()), expiry)
    }

    /// Whether a pass at `now` has timer work (`Broker::fire_due_timers`): the queue's next
    /// deadline (what its timer is set for) has come, or a head held for the overdue limiter
    /// is due (not a deadline, yet it may have changed since it was held).
    pub fn timers_due(&self, now: Timestamp) -> bool {
        self.next_deadline().is_some_and(|at| at <= now) || self.delayed.holds_due(now)
    }

    /// Whether the queue drops its oldest messages past a length limit (x-overflow drop-head
    /// with x-max-length or x-max-length-bytes): most queues have no limit at all.
    pub(crate) fn drops_head_over_limits(&self) -> bool {
        self.args.overflow == Overflow::DropHead && overflow::has_limit(&self.args)
    }

    /// Whether an x-overflow reject-publish(-dlx) limit refuses a message of `body_size` now.
    pub(crate) fn rejects_publish(&self, body_size: usize) -> bool {
        overflow::rejects_publish(&self.args, self.message_count(), self.ready.body_bytes(), body_size)
    }

    /// Whether the queue is due for deletion under `x-expires` at `now`.
    pub fn is_expired(&self, now: Timestamp) -> bool {
        expires::deadline(self.args.expires_ms, self.last_used, !self.consumers.is_empty())
            .is_some_and(|at| at <= now)
    }

    /// Ready messages (never unacked or expired ones), as declare-ok and get-ok count them.
    pub fn message_count(&self) -> usize {
        self.ready.message_count()
    }

    pub fn consumer_count(&self) -> usize {
        self.consumers.count()
    }

    pub fn is_exclusive_to_other(&self, conn: ConnectionId) -> bool {
        self.spec.exclusive_owner.is_some_and(|owner| owner != conn)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::queue::paging::PagingLimits;
    use bytes::Bytes;
    use hourglass_wire::{BasicProperties, EncodedProperties};
    use std::sync::Arc;

    fn queue(max_resident_messages: usize, durable: bool) -> Queue {
        let mut pager = Pager::default();
        pager.limits = PagingLimits { max_resident_messages, max_resident_bytes: 1 << 20 };
        let spec = QueueSpec {
            name: ShortStr::from_static("q"),
            durable,
            exclusive_owner: None,
            auto_delete: false,
            arguments: FieldTable::new(),
        };
        Queue::new(QueueId(1), "/".to_owned(), spec, QueueArgs::default(), pager, Timestamp::from_millis(0))
    }

    fn message(i: usize, body_size: usize) -> Arc<Message> {
        let properties = BasicProperties {
            expiration: Some(ShortStr::try_from(format!("{}", 10_000 + i)).unwrap()),
            message_id: Some(ShortStr::try_from(format!("m{i}")).unwrap()),
            ..Default::default()
        };
        let mut body = format!("body {i} ").into_bytes();
        body.resize(body_size, b'.');
        Arc::new(Message::new(
            ShortStr::from_static("amq.topic"),
            ShortStr::from_static("a.b.c"),
            EncodedProperties::from(&properties),
            Bytes::from(body),
        ))
    }

    fn push(queue: &mut Queue, messages: &[Arc<Message>], persist: bool) {
        let now = Timestamp::from_millis(0);
        for (seq, message) in messages.iter().enumerate() {
            let persist_id = persist.then_some(seq as u64 + 1);
            let entry = queue.new_entry(seq as u64, Payload::Resident(message.clone()), now, persist_id);
            queue.push_ready(entry, None);
        }
    }

    fn drain(queue: &mut Queue) -> Vec<Arc<Message>> {
        std::iter::from_fn(|| queue.take_for_consumer(false).ok())
            .map(|entry| entry.resident().expect("delivered in memory").clone())
            .collect()
    }

    /// A restart from a state puts the messages it read back from the log (the resident head,
    /// here 0..3, after the state's 10..13) at their places in id order, counted once
    /// `finish_restore` has run; later ones are appended as they come.
    #[test]
    fn messages_restored_among_the_ready_ones_land_at_their_places() {
        let mut queue = queue(100, true);
        let sent: Vec<_> = (0..16).map(|i| message(i, 16)).collect();
        let entry = |seq: usize| Entry::new(seq as u64, sent[seq].clone(), None, None, Some(seq as u64));
        for seq in [10, 11, 12, 0, 1, 2, 13, 3] {
            queue.restore_entry(entry(seq), None, None);
        }
        assert_eq!(queue.ready.message_count(), 4, "the ones after the rest, appended");
        queue.finish_restore();
        assert_eq!(queue.ready.message_count(), 8);
        let expected: Vec<_> = [0, 1, 2, 3, 10, 11, 12, 13].map(|seq| sent[seq].clone()).into();
        assert_eq!(drain(&mut queue), expected);
    }

    /// Past the resident limit a queue packs small transient messages (ADR 0015): they count as
    /// in memory, not as whole messages, and come back whole and in order, each with its TTL.
    #[test]
    fn small_messages_past_the_limit_are_packed_and_come_back_whole() {
        let mut queue = queue(2, false);
        let sent: Vec<_> = (0..6).map(|i| message(i, 16)).collect();
        push(&mut queue, &sent, false);
        // Two resident, plus the one that went past the limit; the rest packed.
        assert_eq!(queue.ready.resident(), (3, 48));
        assert_eq!(queue.ready.in_memory(), (6, 96));
        assert_eq!(queue.ready.tally().messages, 6);
        assert_eq!(queue.ready.deadlines().message_count(), 6);
        assert_eq!(drain(&mut queue), sent);
        assert_eq!((queue.ready.resident(), queue.ready.in_memory()), ((0, 0), (0, 0)));
    }

    /// What the store will page out (persistent messages of a durable queue, ADR 0007) and large
    /// messages stay whole.
    #[test]
    fn stored_and_large_messages_are_not_packed() {
        let mut durable = queue(2, true);
        push(&mut durable, &(0..6).map(|i| message(i, 16)).collect::<Vec<_>>(), true);
        assert_eq!(durable.ready.resident().0, 6);
        let mut large = queue(2, false);
        let sent: Vec<_> = (0..6).map(|i| message(i, packed::MAX_PACKED_RECORD_BYTES)).collect();
        push(&mut large, &sent, false);
        assert_eq!(large.ready.resident().0, 6);
        assert_eq!(drain(&mut large), sent);
    }
}
