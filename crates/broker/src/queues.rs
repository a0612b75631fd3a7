//! The broker's queues and what they hold together: the one owner of which queues exist, of the
//! ids new ones get, of the timer index that files each queue under its earliest deadline, of
//! the paging set-up each new queue gets, of the deduplication ids all queues hold, and of the
//! reads (far-tier spill runs, paged messages) the queues asked the driver for.
//!
//! A queue comes in through [`Queues::add`] and leaves through [`Queues::remove`], which also
//! takes it out of the timer index and gives back its deduplication ids, so no caller can leave
//! a stale timer or a held id behind. What happens inside a queue is the `Queue`'s own API
//! (`queue/`); the broker's entry points reach it through [`Queues::get_mut`] and, after
//! anything that may change its deadlines or its asks, call [`Queues::refile`] (through
//! `Broker::reschedule`).

use std::collections::{BTreeSet, VecDeque};

use crate::broker::IdMap;
use crate::queue::dedup::NodeDedupIds;
use crate::queue::paging::Pager;
use crate::queue::{MessageRead, Queue, QueueArgs, QueueId, QueueSpec, ReadPurpose, SpillRead};
use crate::time::Timestamp;

#[derive(Debug)]
pub(crate) struct Queues {
    by_id: IdMap<QueueId, Queue>,
    /// The id the next queue gets (kept in the catalog, so that an id is never reused).
    next_id: u64,
    /// Each queue with a deadline, filed under its earliest one (`Queue::scheduled`), so that
    /// finding the next wake-up is O(log queues) and a timeout visits only queues with work due.
    due: BTreeSet<(Timestamp, QueueId)>,
    /// What each new queue gets to page messages out and read them back (ADR 0007).
    pub pager: Pager,
    /// The deduplication ids all queues hold together (queue/dedup.rs).
    dedup_ids: NodeDedupIds,
    /// Spill reads the far tiers asked for, for the driver (`spill_reads.rs`).
    spill_reads: VecDeque<SpillRead>,
    /// Reads of paged messages the queues asked for, for the driver (`message_reads.rs`).
    message_reads: VecDeque<MessageRead>,
}

impl Default for Queues {
    fn default() -> Self {
        Queues {
            by_id: IdMap::default(),
            next_id: 1,
            due: BTreeSet::new(),
            pager: Pager::default(),
            dedup_ids: NodeDedupIds::default(),
            spill_reads: VecDeque::new(),
            message_reads: VecDeque::new(),
        }
    }
}

impl std::ops::Index<&QueueId> for Queues {
    type Output = Queue;

    fn index(&self, id: &QueueId) -> &Queue {
        &self.by_id[id]
    }
}

impl Queues {
    pub fn get(&self, id: &QueueId) -> Option<&Queue> {
        self.by_id.get(id)
    }

    pub fn get_mut(&mut self, id: &QueueId) -> Option<&mut Queue> {
        self.by_id.get_mut(id)
    }

    /// Queue `id` with the node's deduplication ids, which its `dedup.hold` counts against.
    pub fn get_with_dedup_ids(&mut self, id: &QueueId) -> Option<(&mut Queue, &mut NodeDedupIds)> {
        self.by_id.get_mut(id).map(|queue| (queue, &mut self.dedup_ids))
    }

    pub fn contains_key(&self, id: &QueueId) -> bool {
        self.by_id.contains_key(id)
    }

    pub fn iter(&self) -> impl Iterator<Item = (&QueueId, &Queue)> {
        self.by_id.iter()
    }

    pub fn keys(&self) -> impl Iterator<Item = &QueueId> {
        self.by_id.keys()
    }

    pub fn values(&self) -> impl Iterator<Item = &Queue> {
        self.by_id.values()
    }

    pub fn values_mut(&mut self) -> impl Iterator<Item = &mut Queue> {
        self.by_id.values_mut()
    }

    /// The id the next new queue gets.
    pub fn next_id(&self) -> u64 {
        self.next_id
    }

    /// An id no queue has had.
    pub fn new_id(&mut self) -> QueueId {
        let id = QueueId(self.next_id);
        self.next_id += 1;
        id
    }

    /// Ids below `next` are taken (restored from the catalog or the log): no new queue gets one.
    pub fn ids_taken_below(&mut self, next: u64) {
        self.next_id = self.next_id.max(next);
    }

    /// Makes queue `id` (an id from [`Self::new_id`], or a restored one) with the paging set-up
    /// every queue gets. A queue already under `id` is replaced.
    pub fn add(
        &mut self,
        id: QueueId,
        vhost: String,
        spec: QueueSpec,
        args: QueueArgs,
        now: Timestamp,
    ) -> &mut Queue {
        self.ids_taken_below(id.0.saturating_add(1));
        if let Some(old) = self.by_id.remove(&id) {
            self.forget(id, &old);
        }
        let queue = Queue::new(id, vhost, spec, args, self.pager.clone(), now);
        self.by_id.entry(id).or_insert(queue)
    }

    /// Takes queue `id` out: out of the timer index, its deduplication ids given back.
    pub fn remove(&mut self, id: QueueId) -> Option<Queue> {
        let queue = self.by_id.remove(&id)?;
        self.forget(id, &queue);
        Some(queue)
    }

    fn forget(&mut self, id: QueueId, queue: &Queue) {
        if let Some(at) = queue.scheduled {
            self.due.remove(&(at, id));
        }
        self.dedup_ids.release(queue.dedup.len());
    }

    /// The earliest deadline of any queue.
    pub fn next_deadline(&self) -> Option<Timestamp> {
        self.due.first().map(|(at, _)| *at)
    }

    /// The next queue whose deadline is at or before `now`, taken out of the timer index (it is
    /// filed again by the next [`Self::refile`]).
    pub fn pop_due(&mut self, now: Timestamp) -> Option<QueueId> {
        loop {
            let &(at, id) = self.due.first()?;
            if at > now {
                return None;
            }
            self.due.pop_first();
            if let Some(queue) = self.by_id.get_mut(&id) {
                queue.scheduled = None;
                return Some(id);
            }
        }
    }

    /// Files queue `id` under its current earliest deadline and collects the reads it asked for
    /// (its far tier's spill reads, its paged messages for consumers). Returns the store ids of
    /// the messages it dropped because they could not be read back, for the caller to settle;
    /// `None` when the queue is gone.
    pub fn refile(&mut self, id: QueueId) -> Option<Vec<u64>> {
        let queue = self.by_id.get_mut(&id)?;
        let lost = queue.pager.take_lost();
        queue.delayed.take_spill_reads(&mut self.spill_reads);
        if let Some(locations) = queue.pager.take_ask() {
            let purpose = ReadPurpose::Consumers;
            self.message_reads.push_back(MessageRead { queue: id.0, locations, purpose });
        }
        let next = queue.next_deadline();
        if next != queue.scheduled {
            if let Some(old) = queue.scheduled {
                self.due.remove(&(old, id));
            }
            if let Some(at) = next {
                self.due.insert((at, id));
            }
            queue.scheduled = next;
        }
        Some(lost)
    }

    /// The next spill read the queues asked for.
    pub fn next_spill_read(&mut self) -> Option<SpillRead> {
        self.spill_reads.pop_front()
    }

    /// The next read of paged messages the queues asked for.
    pub fn next_message_read(&mut self) -> Option<MessageRead> {
        self.message_reads.pop_front()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use bytes::Bytes;
    use hourglass_wire::{EncodedProperties, FieldTable, ShortStr};

    use super::*;
    use crate::message::Message;
    use crate::queue::dedup::HeldId;
    use crate::queue::entry::Payload;

    fn at(ms: u64) -> Timestamp {
        Timestamp::from_millis(ms)
    }

    fn add(queues: &mut Queues, id: QueueId) -> &mut Queue {
        let spec = QueueSpec {
            name: ShortStr::try_from(format!("q{}", id.0)).unwrap(),
            durable: false,
            exclusive_owner: None,
            auto_delete: false,
            arguments: FieldTable::new(),
        };
        queues.add(id, "/".to_owned(), spec, QueueArgs::default(), at(0))
    }

    /// Queue `id` holds a message delayed until `due`: its earliest deadline.
    fn delay_until(queues: &mut Queues, id: QueueId, seq: u64, due: u64) {
        let message = Message::new(
            ShortStr::from_static(""),
            ShortStr::from_static("q"),
            EncodedProperties::default(),
            Bytes::from_static(b"body"),
        );
        let queue = queues.get_mut(&id).unwrap();
        queue.delay(seq, Payload::Resident(Arc::new(message)), at(due), None);
        queues.refile(id).unwrap();
    }

    /// A removed queue leaves nothing behind in what the queues hold together: no deadline in
    /// the timer index (a timeout would visit a queue that is gone, or a new queue could be
    /// woken at the old one's time) and no deduplication ids counted against the node.
    #[test]
    fn a_removed_queue_leaves_no_timer_and_no_held_ids() {
        let mut queues = Queues::default();
        let (kept, removed) = (queues.new_id(), queues.new_id());
        add(&mut queues, kept);
        add(&mut queues, removed);
        delay_until(&mut queues, kept, 1, 5_000);
        delay_until(&mut queues, removed, 2, 1_000);
        let (queue, node) = queues.get_with_dedup_ids(&removed).unwrap();
        queue.dedup.hold(HeldId::for_test(b"a"), at(0), None, node);
        queue.dedup.hold(HeldId::for_test(b"b"), at(0), None, node);
        assert_eq!((queues.next_deadline(), queues.dedup_ids.held()), (Some(at(1_000)), 2));

        assert!(queues.remove(removed).is_some());
        assert_eq!((queues.next_deadline(), queues.dedup_ids.held()), (Some(at(5_000)), 0));
        assert_eq!(queues.pop_due(at(10_000)), Some(kept));
        assert_eq!(queues.pop_due(at(10_000)), None);
        assert!(queues.remove(removed).is_none());
    }

    /// A timeout takes each due queue once, earliest first, and not one whose time has not
    /// come; a queue taken is filed again by its next refile, under its deadline then.
    #[test]
    fn due_queues_come_out_in_deadline_order_until_filed_again() {
        let mut queues = Queues::default();
        let ids: Vec<QueueId> = (0..3).map(|_| queues.new_id()).collect();
        for (seq, (id, due)) in ids.iter().zip([3_000, 1_000, 2_000]).enumerate() {
            add(&mut queues, *id);
            delay_until(&mut queues, *id, seq as u64, due);
        }
        assert_eq!(queues.pop_due(at(2_500)), Some(ids[1]));
        assert_eq!(queues.pop_due(at(2_500)), Some(ids[2]));
        assert_eq!(queues.pop_due(at(2_500)), None, "the third is due at 3,000");
        assert_eq!(queues.next_deadline(), Some(at(3_000)));
        queues.refile(ids[1]).unwrap();
        assert_eq!(queues.next_deadline(), Some(at(1_000)), "its message is still waiting");
    }

    /// An id restored from the catalog or the log is never given to a new queue.
    #[test]
    fn restored_ids_are_never_given_again() {
        let mut queues = Queues::default();
        assert_eq!(queues.new_id(), QueueId(1));
        add(&mut queues, QueueId(7));
        assert_eq!(queues.new_id(), QueueId(8));
        queues.ids_taken_below(20);
        assert_eq!((queues.next_id(), queues.new_id()), (20, QueueId(20)));
        queues.ids_taken_below(3);
        assert_eq!(queues.new_id(), QueueId(21));
    }
}
