//! Message groups (docs/sqs.md "FIFO queues" and "Fair queues"): an index of a queue's ready
//! messages by their `MessageGroupId`, with each group's messages in flight, that decides which
//! ready message an SQS receive (and, in a fair queue, an AMQP delivery) takes next. The queue
//! (`queue/mod.rs`) tells it every message that becomes ready or leaves the ready messages, and
//! every delivery that starts or ends.
//!
//! - **FIFO** (issue 40, item 19; a queue declared with `x-sqs-fifo`): a receive takes the oldest
//!   ready message of a group that has nothing in flight, so different groups are worked on in
//!   parallel while each group is received in order, as on AWS.
//! - **Fair** (issue 40, SQS's fair queues of 2025; an SQS standard queue): a group is a tenant. A
//!   noisy tenant, one holding more than 10 % of the queue's messages in flight and at least 30
//!   of them, is served after the quiet ones: a receive takes the oldest ready message of a quiet
//!   tenant, and only when no quiet tenant has one, the oldest of the noisy tenant with the
//!   fewest in flight. Messages without a group are each a tenant of their own, never noisy.
//!   Since each noisy tenant holds over a tenth of what is in flight, there are at most nine, and
//!   a choice looks at no more than ten groups.
//!
//! A group is known by a 64-bit hash of its `MessageGroupId` (FNV-1a, `group_key`, stored with
//! each message of the queue): two ids that collide are served as one group, stricter than
//! needed but never out of order. Messages without a group (published
//! over AMQP without the header) form one group of their own.

use std::collections::{BTreeSet, HashMap};

use hourglass_wire::FieldValue;

use super::entry::Seq;
use super::group_state::GroupSeqs;
use crate::message::Message;

/// The header an SQS message carries its `MessageGroupId` in.
pub const GROUP_HEADER: &str = "x-sqs-message-group-id";

/// A message group, by the hash of its id.
pub type GroupKey = u64;

/// A tenant of a fair queue is noisy from this many messages in flight ...
pub const NOISY_MIN_IN_FLIGHT: u32 = 30;
/// ... if they are more than this share (in tenths) of the queue's messages in flight.
const NOISY_SHARE_TENTHS: u64 = 1;

/// The group of `message`: its `MessageGroupId` header's hash (`group_key`), or the group of
/// messages without one.
pub fn group_of(message: &Message) -> GroupKey {
    match message.properties().headers().and_then(|headers| headers.get(GROUP_HEADER)) {
        Some(FieldValue::LongStr(id)) => group_key(id.as_bytes()),
        _ => NO_GROUP,
    }
}

/// The key of the group with id `id`: its 64-bit FNV-1a hash, never `NO_GROUP`. Fixed by this
/// definition (not by the standard library's hasher, which may change between Rust releases),
/// as keys are stored with the messages (`persist::MessageMeta::group`) and must mean the same
/// group to every later build.
pub fn group_key(id: &[u8]) -> GroupKey {
    const OFFSET_BASIS: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    let hash = id.iter().fold(OFFSET_BASIS, |hash, &byte| (hash ^ u64::from(byte)).wrapping_mul(PRIME));
    hash.max(1)
}

/// The group of messages that carry none.
pub const NO_GROUP: GroupKey = 0;

/// How a queue's groups decide what is received next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum GroupOrder {
    /// An SQS FIFO queue: one message of a group in flight at a time.
    Fifo,
    /// An SQS standard queue: noisy tenants after quiet ones.
    Fair,
}

#[derive(Debug, Default)]
struct Group {
    /// Its ready messages, by their place in the queue.
    ready: BTreeSet<Seq>,
    /// Its messages handed out and awaiting an ack.
    in_flight: u32,
}

/// Each ready message's group, and which groups may be received from now.
#[derive(Debug)]
pub(crate) struct MessageGroups {
    order: GroupOrder,
    /// By seq: the broker gives them, so a fast unkeyed hash is safe (a group key is not: it is
    /// the hash of a client's id).
    group_of_ready: HashMap<Seq, GroupKey, rustc_hash::FxBuildHasher>,
    groups: HashMap<GroupKey, Group>,
    /// The groups a receive may take from, by their first ready message: in a FIFO queue those
    /// with a ready message and none in flight, in a fair queue all with a ready message.
    listed: BTreeSet<(Seq, GroupKey)>,
    /// Messages in flight, of every group.
    in_flight: u32,
}

impl MessageGroups {
    pub fn new(order: GroupOrder) -> Self {
        MessageGroups {
            order,
            group_of_ready: HashMap::default(),
            groups: HashMap::new(),
            listed: BTreeSet::new(),
            in_flight: 0,
        }
    }

    pub fn order(&self) -> GroupOrder {
        self.order
    }

    /// The groups of a queue's state (`group_state.rs`): each group's ready seqs, rising, taken
    /// back with nothing in flight. `None` if a seq is in two groups.
    pub fn restored(order: GroupOrder, ready: GroupSeqs) -> Option<Self> {
        let mut groups = MessageGroups::new(order);
        groups.group_of_ready.reserve(ready.iter().map(|(_, seqs)| seqs.len()).sum());
        for (group, seqs) in ready {
            for &seq in &seqs {
                if groups.group_of_ready.insert(seq, group).is_some() {
                    return None;
                }
            }
            // Rising already: built in bulk.
            let state = Group { ready: seqs.into_iter().collect(), in_flight: 0 };
            groups.listed.extend(state.ready.first().map(|&head| (head, group)));
            groups.groups.insert(group, state);
        }
        Some(groups)
    }

    /// Each group with ready messages, and their seqs (rising): what a queue's state keeps.
    pub fn ready_by_group(&self) -> impl Iterator<Item = (GroupKey, &BTreeSet<Seq>)> {
        self.groups
            .iter()
            .filter(|(_, state)| !state.ready.is_empty())
            .map(|(group, state)| (*group, &state.ready))
    }

    /// How many ready messages the groups index.
    pub fn ready_count(&self) -> usize {
        self.group_of_ready.len()
    }

    /// The group of ready message `seq`, if it is ready.
    pub fn group_of_ready(&self, seq: Seq) -> Option<GroupKey> {
        self.group_of_ready.get(&seq).copied()
    }

    /// Message `seq` of `group` is ready (new, or back at its place).
    pub fn ready(&mut self, seq: Seq, group: GroupKey) {
        if self.group_of_ready.insert(seq, group).is_some() {
            return;
        }
        let before = self.listing(group);
        self.groups.entry(group).or_default().ready.insert(seq);
        self.relist(group, before);
    }

    /// Message `seq` left the ready messages (handed out, expired, dropped or deleted).
    pub fn left_ready(&mut self, seq: Seq) {
        let Some(group) = self.group_of_ready.remove(&seq) else { return };
        let before = self.listing(group);
        let Some(state) = self.groups.get_mut(&group) else { return };
        state.ready.remove(&seq);
        self.relist(group, before);
        self.forget_if_idle(group);
    }

    /// Every ready message is gone (a purge); deliveries in flight keep their groups.
    pub fn ready_cleared(&mut self) {
        self.group_of_ready.clear();
        self.listed.clear();
        for state in self.groups.values_mut() {
            state.ready.clear();
        }
        self.groups.retain(|_, state| state.in_flight > 0);
    }

    /// A message of `group` was handed out awaiting an ack (in a FIFO queue the group waits for
    /// it).
    pub fn delivered(&mut self, group: GroupKey) {
        let before = self.listing(group);
        self.groups.entry(group).or_default().in_flight += 1;
        self.in_flight += 1;
        self.relist(group, before);
    }

    /// A delivery of `group` ended (acked, dropped, or coming back): in a FIFO queue, with none
    /// left in flight, the group may be received from again.
    pub fn settled(&mut self, group: GroupKey) {
        let before = self.listing(group);
        let Some(state) = self.groups.get_mut(&group).filter(|state| state.in_flight > 0) else { return };
        state.in_flight -= 1;
        self.in_flight = self.in_flight.saturating_sub(1);
        self.relist(group, before);
        self.forget_if_idle(group);
    }

    /// The next message an SQS receive takes from a FIFO queue: after a message of `taken`, that
    /// group's next ready one (AWS returns as many of one group as it can); else the oldest
    /// ready message of a group with nothing in flight.
    pub fn next_receivable(&self, taken: Option<GroupKey>) -> Option<Seq> {
        let same_group = taken.and_then(|group| self.groups.get(&group)?.ready.first().copied());
        same_group.or_else(|| self.listed.first().map(|&(seq, _)| seq))
    }

    /// In a fair queue, the message to take next when it is not the oldest ready one: the
    /// oldest of a quiet tenant when noisy tenants' messages are older, or, when only noisy
    /// tenants have ready messages, the oldest of the one with the fewest in flight. `None`:
    /// take the oldest.
    pub fn fair_choice(&self) -> Option<Seq> {
        let &(oldest, _) = self.listed.first()?;
        let mut least_busy_noisy: Option<(u32, Seq)> = None;
        for &(head, group) in &self.listed {
            let in_flight = self.groups.get(&group).map_or(0, |state| state.in_flight);
            if !self.is_noisy(group, in_flight) {
                return (head != oldest).then_some(head);
            }
            if least_busy_noisy.is_none_or(|best| (in_flight, head) < best) {
                least_busy_noisy = Some((in_flight, head));
            }
        }
        let (_, head) = least_busy_noisy?;
        (head != oldest).then_some(head)
    }

    /// How many groups a FIFO receive may take from now.
    pub fn receivable_groups(&self) -> usize {
        self.listed.len()
    }

    /// A tenant of a fair queue holding more than a tenth of the queue's messages in flight,
    /// and at least `NOISY_MIN_IN_FLIGHT` (SQS's concurrency share).
    fn is_noisy(&self, group: GroupKey, in_flight: u32) -> bool {
        group != NO_GROUP
            && in_flight >= NOISY_MIN_IN_FLIGHT
            && u64::from(in_flight) * 10 > u64::from(self.in_flight) * NOISY_SHARE_TENTHS
    }

    /// Where `group` is listed now: by its first ready message, if a receive may take from it.
    fn listing(&self, group: GroupKey) -> Option<Seq> {
        let state = self.groups.get(&group)?;
        let head = state.ready.first().copied()?;
        match self.order {
            GroupOrder::Fifo if state.in_flight > 0 => None,
            _ => Some(head),
        }
    }

    /// Moves `group`'s listing from `before` to where it is now.
    fn relist(&mut self, group: GroupKey, before: Option<Seq>) {
        let now = self.listing(group);
        if now == before {
            return;
        }
        if let Some(head) = before {
            self.listed.remove(&(head, group));
        }
        if let Some(head) = now {
            self.listed.insert((head, group));
        }
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

    /// A group's key is fixed by its definition (it is stored with the messages, and read by
    /// later builds): FNV-1a's published values, never the key of "no group".
    #[test]
    fn group_keys_are_fnv_1a_and_never_no_group() {
        assert_eq!(group_key(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(group_key(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(group_key(b"foobar"), 0x8594_4171_f739_67e8);
        assert_ne!(group_key(b"g1"), group_key(b"g2"));
    }

    #[test]
    fn each_group_is_received_in_order_and_groups_in_parallel() {
        let mut groups = MessageGroups::new(GroupOrder::Fifo);
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
        let mut groups = MessageGroups::new(GroupOrder::Fifo);
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

    /// `n` messages of `group` from `first` on, ready.
    fn ready_run(groups: &mut MessageGroups, group: GroupKey, first: Seq, n: u64) {
        for seq in first..first + n {
            groups.ready(seq, group);
        }
    }

    /// Takes what a fair queue hands out next, as the queue does.
    fn take_fair(groups: &mut MessageGroups, group_of: impl Fn(Seq) -> GroupKey) -> Seq {
        let seq = groups.fair_choice().unwrap_or_else(|| groups.listed.first().unwrap().0);
        groups.left_ready(seq);
        groups.delivered(group_of(seq));
        seq
    }

    #[test]
    fn a_fair_queue_serves_in_queue_order_while_no_tenant_is_noisy() {
        let mut groups = MessageGroups::new(GroupOrder::Fair);
        ready_run(&mut groups, A, 1, 40);
        groups.ready(100, B);
        let group_of = |seq| if seq < 100 { A } else { B };
        for expected in 1..30 {
            assert_eq!(take_fair(&mut groups, group_of), expected);
        }
        assert_eq!(
            groups.fair_choice(),
            None,
            "29 in flight is not noisy, even as all of them: the oldest goes"
        );
    }

    #[test]
    fn a_noisy_tenant_is_served_after_the_quiet_ones() {
        let mut groups = MessageGroups::new(GroupOrder::Fair);
        ready_run(&mut groups, A, 1, 100);
        ready_run(&mut groups, B, 200, 3);
        groups.ready(300, NO_GROUP);
        let group_of = |seq| match seq {
            ..200 => A,
            200..300 => B,
            _ => NO_GROUP,
        };
        let taken: Vec<Seq> = (0..34).map(|_| take_fair(&mut groups, group_of)).collect();
        // A holds 30 in flight, all of them: noisy. B's and the ungrouped message go first.
        assert_eq!(&taken[..30], &(1..=30).collect::<Vec<_>>()[..]);
        assert_eq!(&taken[30..], &[200, 201, 202, 300]);
        assert_eq!(groups.fair_choice(), None, "only A is left: its oldest goes");
        assert_eq!(take_fair(&mut groups, group_of), 31);
    }

    #[test]
    fn a_tenant_is_quiet_again_once_its_share_falls_to_a_tenth() {
        let mut groups = MessageGroups::new(GroupOrder::Fair);
        ready_run(&mut groups, A, 1, 40);
        ready_run(&mut groups, NO_GROUP, 1000, 300);
        let group_of = |seq| if seq < 1000 { A } else { NO_GROUP };
        for _ in 0..30 {
            take_fair(&mut groups, group_of);
        }
        // A: 30 of 30 in flight, noisy; messages without a group, each a tenant of its own,
        // never are: they go first until A holds a tenth or less.
        for _ in 0..270 {
            assert!(take_fair(&mut groups, group_of) >= 1000);
        }
        assert_eq!(groups.fair_choice(), None, "30 of 300 in flight is a tenth, not more: A is quiet");
        assert_eq!(take_fair(&mut groups, group_of), 31);
    }

    #[test]
    fn of_noisy_tenants_the_one_with_the_fewest_in_flight_goes_first() {
        let mut groups = MessageGroups::new(GroupOrder::Fair);
        ready_run(&mut groups, A, 1, 50);
        ready_run(&mut groups, B, 100, 50);
        let group_of = |seq| if seq < 100 { A } else { B };
        let taken: Vec<Seq> = (0..64).map(|_| take_fair(&mut groups, group_of)).collect();
        assert_eq!(&taken[..30], &(1..=30).collect::<Vec<_>>()[..], "A until it is noisy");
        assert_eq!(&taken[30..60], &(100..130).collect::<Vec<_>>()[..], "then B, quiet until 30");
        // Both noisy: the one with fewer in flight, on a tie the older message.
        assert_eq!(&taken[60..], &[31, 130, 32, 131]);
        groups.settled(A);
        groups.settled(B);
        assert_eq!(groups.in_flight, 62);
        assert_eq!(groups.fair_choice(), None, "A (31) and B (31): a tie, and A's message is the oldest");
    }
}
