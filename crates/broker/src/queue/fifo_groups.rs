//! SQS FIFO message groups (issue 40, item 19; docs/sqs.md "FIFO queues"): an SQS receive takes
//! the oldest ready message of a group that has nothing in flight, so different groups are worked
//! on in parallel while each group is received in order, as on AWS. A queue declared with
//! `x-sqs-fifo` keeps this index beside its ready messages; the queue (`queue/mod.rs`) tells it
//! every message that becomes ready or leaves the ready messages, and every delivery that
//! starts or ends.
//!
//! A group is known by a 64-bit hash of its `MessageGroupId`: two ids that collide are served as
//! one group, stricter than needed but never out of order. Messages without a group (published
//! over AMQP without the header) form one group of their own.

use std::collections::{BTreeSet, HashMap};
use std::hash::{Hash, Hasher};

use hourglass_wire::FieldValue;

use super::entry::Seq;
use crate::message::Message;

/// The header an SQS FIFO message carries its `MessageGroupId` in.
pub const GROUP_HEADER: &str = "x-sqs-message-group-id";

/// A message group, by the hash of its id.
pub type GroupKey = u64;

/// The group of `message`: its `MessageGroupId` header's hash, or the group of messages without
/// one.
pub fn group_of(message: &Message) -> GroupKey {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    match message.properties().headers().and_then(|headers| headers.get(GROUP_HEADER)) {
        Some(FieldValue::LongStr(id)) => id.as_bytes().hash(&mut hasher),
        _ => return NO_GROUP,
    }
    // Never the key of "no group".
    hasher.finish().max(1)
}

/// The group of messages that carry none.
pub const NO_GROUP: GroupKey = 0;

#[derive(Debug, Default)]
struct Group {
    /// Its ready messages, by their place in the queue.
    ready: BTreeSet<Seq>,
    /// Its messages handed out and awaiting an ack.
    in_flight: u32,
}

/// Each ready message's group, and which groups may be received from now.
#[derive(Debug, Default)]
pub(crate) struct FifoGroups {
    group_of_ready: HashMap<Seq, GroupKey>,
    groups: HashMap<GroupKey, Group>,
    /// The groups with a ready message and none in flight, by their first ready message.
    receivable: BTreeSet<(Seq, GroupKey)>,
}

impl FifoGroups {
    /// Message `seq` of `group` is ready (new, or back at its place).
    pub fn ready(&mut self, seq: Seq, group: GroupKey) {
        if self.group_of_ready.insert(seq, group).is_some() {
            return;
        }
        let state = self.groups.entry(group).or_default();
        let head = state.ready.first().copied();
        state.ready.insert(seq);
        if state.in_flight == 0 && head.is_none_or(|head| seq < head) {
            if let Some(head) = head {
                self.receivable.remove(&(head, group));
            }
            self.receivable.insert((seq, group));
        }
    }

    /// Message `seq` left the ready messages (handed out, expired, dropped or deleted).
    pub fn left_ready(&mut self, seq: Seq) {
        let Some(group) = self.group_of_ready.remove(&seq) else { return };
        let Some(state) = self.groups.get_mut(&group) else { return };
        let was_head = state.ready.first() == Some(&seq);
        state.ready.remove(&seq);
        if was_head && self.receivable.remove(&(seq, group)) {
            if let Some(&next) = state.ready.first() {
                self.receivable.insert((next, group));
            }
        }
        self.forget_if_idle(group);
    }

    /// Every ready message is gone (a purge); deliveries in flight keep their groups.
    pub fn ready_cleared(&mut self) {
        self.group_of_ready.clear();
        self.receivable.clear();
        for state in self.groups.values_mut() {
            state.ready.clear();
        }
        self.groups.retain(|_, state| state.in_flight > 0);
    }

    /// A message of `group` was handed out awaiting an ack: the group waits for it.
    pub fn delivered(&mut self, group: GroupKey) {
        let state = self.groups.entry(group).or_default();
        state.in_flight += 1;
        if let Some(&head) = state.ready.first() {
            self.receivable.remove(&(head, group));
        }
    }

    /// A delivery of `group` ended (acked, dropped, or coming back): with none left in flight,
    /// the group may be received from again.
    pub fn settled(&mut self, group: GroupKey) {
        let Some(state) = self.groups.get_mut(&group) else { return };
        state.in_flight = state.in_flight.saturating_sub(1);
        if state.in_flight == 0 {
            if let Some(&head) = state.ready.first() {
                self.receivable.insert((head, group));
            }
        }
        self.forget_if_idle(group);
    }

    /// The next message an SQS receive takes: after a message of `taken`, that group's next
    /// ready one (AWS returns as many of one group as it can); else the oldest ready message
    /// of a group with nothing in flight.
    pub fn next_receivable(&self, taken: Option<GroupKey>) -> Option<Seq> {
        let same_group = taken.and_then(|group| self.groups.get(&group)?.ready.first().copied());
        same_group.or_else(|| self.receivable.first().map(|&(seq, _)| seq))
    }

    /// How many groups may be received from now.
    pub fn receivable_groups(&self) -> usize {
        self.receivable.len()
    }

    fn forget_if_idle(&mut self, group: GroupKey) {
        if self.groups.get(&group).is_some_and(|state| state.ready.is_empty() && state.in_flight == 0) {
            self.groups.remove(&group);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: GroupKey = 1;
    const B: GroupKey = 2;

    #[test]
    fn each_group_is_received_in_order_and_groups_in_parallel() {
        let mut groups = FifoGroups::default();
        for (seq, group) in [(1, A), (2, A), (3, B), (4, A)] {
            groups.ready(seq, group);
        }
        assert_eq!(groups.next_receivable(None), Some(1));
        groups.left_ready(1);
        groups.delivered(A);
        assert_eq!(groups.next_receivable(Some(A)), Some(2), "the same receive goes on in its group");
        assert_eq!(groups.next_receivable(None), Some(3), "A waits for 1; B is free");
        groups.left_ready(3);
        groups.delivered(B);
        assert_eq!(groups.next_receivable(None), None, "both groups have a message in flight");
        assert_eq!(groups.receivable_groups(), 0);
        // 1 comes back at its place: A is received from again, 1 first.
        groups.settled(A);
        groups.ready(1, A);
        assert_eq!(groups.next_receivable(None), Some(1));
        groups.left_ready(1);
        groups.delivered(A);
        groups.settled(A);
        assert_eq!(groups.next_receivable(None), Some(2));
        groups.settled(B);
        assert_eq!(groups.receivable_groups(), 1, "B has nothing ready");
        groups.ready_cleared();
        assert_eq!(groups.next_receivable(None), None);
        assert!(groups.groups.is_empty(), "nothing kept for idle groups");
    }

    #[test]
    fn a_message_ready_again_at_the_head_moves_its_group_forward() {
        let mut groups = FifoGroups::default();
        groups.ready(5, A);
        groups.ready(3, B);
        assert_eq!(groups.next_receivable(None), Some(3));
        groups.ready(2, A);
        assert_eq!(groups.next_receivable(None), Some(2), "A's head is now older than B's");
        groups.left_ready(2);
        assert_eq!(groups.next_receivable(None), Some(3));
        groups.left_ready(3);
        assert_eq!(groups.next_receivable(None), Some(5));
    }
}
