//! A queue's state in a checkpoint of the store (ADR 0019, ADR 0021): its ready backlog (each
//! level's paged-out messages, runs whole, `ready/checkpoint.rs`) and its waiting messages (the
//! far tier's runs as their rosters, the write buffer and the near tier as far records), so that
//! a restart takes them from the checkpoint instead of reading each one's record back from the
//! log.
//!
//! A stored message the state does not hold is listed as *read back*: a ready one held in
//! memory, a waiting one in the near tier held in memory, and every unacknowledged one or one
//! waiting to be dead-lettered (the caller names them: channels and `dead_letter_reads.rs` hold
//! them, not the queue). The store keeps the state only if its index holds exactly the messages
//! the state covers and lists. A queue with more messages outside runs than a state takes, or
//! more to read back, has no state and is read back from the log at a restart, as before.
//!
//! A queue with message groups (SQS FIFO and fair queues) keeps them in its state too, ahead of
//! its messages (`group_state.rs`): each group's ready and waiting messages the state holds. A
//! restart rebuilds its groups from there; the messages read back come with their groups from
//! their metadata, as before. One with more than [`GROUPED_MAX`] grouped messages has no state.
//!
//! A ready message held in memory after its delay (its seq is not its store id, and the log
//! still says "waiting") is listed with its seq and ready time (`write_promoted`), so that a
//! restart puts it back ready at its place instead of delaying it again.

use std::collections::{HashMap, HashSet};

use bytes::Bytes;

use super::entry::{Entry, Seq};
use super::group_state::{read_groups, write_groups, GroupSeqs};
use super::message_groups::{GroupKey, GroupOrder, MessageGroups};
use super::ready::Ready;
use super::state_bytes::{StateReader, StateWriter};
use super::Queue;
use crate::persist::QueueState;
use crate::time::Timestamp;

/// Ready messages held in memory after their delay, by store id: their seq and ready time
/// (`write_promoted`).
pub(crate) type PromotedHeld = HashMap<u64, (Seq, Timestamp), rustc_hash::FxBuildHasher>;

/// The layout of a state (its first word): 4 has the message groups, the ready backlog, then
/// the waiting messages if any; 3 (written before issue 41's group states) the same without the
/// groups; 2 (written before ADR 0021) the waiting messages alone.
const STATE_VERSION: u64 = 4;
const WITHOUT_GROUPS_VERSION: u64 = 3;
const WAITING_ONLY_VERSION: u64 = 2;

/// Unacknowledged and in-memory messages a state lists at most (8 bytes each): a queue with more
/// is read back from the log.
const READ_BACK_MAX: usize = 1 << 20;

/// Messages whose groups a state lists at most (`group_state.rs`): a state walks its queue's
/// groups on the broker's thread at every checkpoint offer (19 ms for 1M ready messages, 24 ms
/// with a 10,000-message head in memory, 253 ms for 10M; 43 ms for 1M waiting ones, sorted per
/// offer: a pause at every offer), so a queue with more is read back from the log at a restart,
/// as before groups were kept.
const GROUPED_MAX: usize = 1 << 20;

/// Messages a queue took back from a state.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Restored {
    pub ready: usize,
    pub waiting: usize,
}

impl Queue {
    /// Readies the queue for [`Queue::checkpoint_state`]: its ready messages paged out in place
    /// are joined into runs.
    pub(crate) fn prepare_checkpoint(&mut self) {
        if self.is_persisted() {
            self.ready.join_runs();
        }
    }

    /// This queue's state for a checkpoint, if it has one (module doc); `unacked` are the store
    /// ids of its unacknowledged messages and of those waiting to be dead-lettered.
    pub(crate) fn checkpoint_state(&self, unacked: &[u64]) -> Option<QueueState> {
        debug_assert!(self.restoring.is_empty(), "a restore not finished");
        let grouped = self.groups.as_ref().map_or(0, MessageGroups::ready_count) + self.waiting_groups.len();
        if !self.is_persisted() || grouped > GROUPED_MAX {
            return None;
        }
        let mut messages = StateWriter::default();
        let mut read_back = unacked.to_vec();
        let (mut held_ready, mut held_waiting) = (Vec::new(), Vec::new());
        let mut covers = self.ready.checkpoint(&mut messages, &mut read_back, &mut held_ready)?;
        if self.delayed.message_count() == 0 {
            messages.u64(0);
        } else {
            messages.u64(1);
            covers += self.delayed.checkpoint(&mut messages, &mut read_back, &mut held_waiting)?;
        }
        if covers == 0 || read_back.len() > READ_BACK_MAX {
            return None;
        }
        let mut out = StateWriter::default();
        out.u64(STATE_VERSION);
        self.checkpoint_groups(&mut out, &held_ready, held_waiting);
        write_promoted(&mut out, &held_ready);
        out.append(messages);
        Some(QueueState { queue: self.id.0, covers, read_back, parts: out.finish() })
    }

    /// Appends the groups of the messages the state holds (`group_state.rs`): the ready ones'
    /// but those held in memory (`held_ready`: they are read back), then the waiting ones' but
    /// those held in memory (`held_waiting`, seqs).
    fn checkpoint_groups(&self, out: &mut StateWriter, held_ready: &[&Entry], mut held_waiting: Vec<Seq>) {
        // Looked up once per grouped message: the seqs are the broker's, so FxHash is safe.
        let held: HashSet<Seq, rustc_hash::FxBuildHasher> =
            held_ready.iter().map(|entry| entry.seq).collect();
        let is_held = |seq: &Seq| !held.is_empty() && held.contains(seq);
        let ready = self.groups.iter().flat_map(MessageGroups::ready_by_group);
        write_groups(
            out,
            ready.map(|(group, seqs)| (group, seqs.iter().copied().filter(|seq| !is_held(seq)))),
        );
        held_waiting.sort_unstable();
        let mut waiting: HashMap<GroupKey, Vec<Seq>> = HashMap::new();
        for (&seq, &group) in &self.waiting_groups {
            if held_waiting.binary_search(&seq).is_err() {
                waiting.entry(group).or_default().push(seq);
            }
        }
        write_groups(
            out,
            waiting.into_iter().map(|(group, mut seqs)| {
                seqs.sort_unstable();
                (group, seqs)
            }),
        );
    }

    /// Takes back the messages of the state in `parts` ([`Queue::checkpoint_state`]'s, cut as it
    /// was handed over), without those whose store id is in `changed`, and their groups. Returns
    /// how many came back; `None`, and the queue unchanged, if it holds messages already or the
    /// state does not read back whole.
    pub(crate) fn restore_state(&mut self, parts: Vec<Bytes>, changed: &[u64]) -> Option<Restored> {
        let holds_any = self.delayed.message_count() != 0 || !self.ready.is_empty();
        if holds_any || !self.waiting_groups.is_empty() || !self.restoring.is_empty() {
            return None;
        }
        let mut reader = StateReader::new(parts);
        let version = reader.u64()?;
        let (ready_groups, waiting_groups, promoted) = match version {
            STATE_VERSION => {
                (read_groups(&mut reader)?, read_groups(&mut reader)?, read_promoted(&mut reader)?)
            }
            WITHOUT_GROUPS_VERSION | WAITING_ONLY_VERSION => Default::default(),
            _ => return None,
        };
        let mut sorted_changed = changed.to_vec();
        sorted_changed.sort_unstable();
        let mut dropped = Vec::new();
        let ready = match version {
            WAITING_ONLY_VERSION => None,
            _ => Some(self.ready.restored(&mut reader, &sorted_changed, &mut dropped)?),
        };
        let groups = self.restored_groups(ready.as_ref(), ready_groups, &dropped)?;
        let has_waiting = version == WAITING_ONLY_VERSION || reader.u64()? == 1;
        dropped.clear();
        let waiting = if has_waiting {
            let changed: HashSet<u64> = changed.iter().copied().collect();
            self.delayed.restore_checkpoint(&mut reader, &changed, &mut dropped)?
        } else if reader.is_empty() {
            0
        } else {
            return None;
        };
        let mut restored = Restored { waiting, ready: 0 };
        if let Some(ready) = ready {
            restored.ready = ready.message_count();
            self.ready = ready;
            // The TTL the queue has now (a policy may have changed while the broker was down).
            self.apply_ttl_to_ready();
        }
        if let Some(groups) = groups {
            self.groups = Some(groups);
        }
        self.promoted_held = promoted;
        let dropped: HashSet<Seq> = dropped.into_iter().collect();
        for (group, seqs) in waiting_groups {
            self.waiting_groups
                .extend(seqs.into_iter().filter(|seq| !dropped.contains(seq)).map(|seq| (seq, group)));
        }
        Some(restored)
    }

    /// The ready messages' groups a state kept (`ready`: its messages, without the changed ones,
    /// whose seqs are `dropped`): `Some(None)` when it kept none and the queue has no use for
    /// them; `None` when they cannot be used. The groups may name only messages the queue holds
    /// (a named one it does not hold would stand first in its group). An SQS FIFO queue's
    /// groups must hold every one of its ready messages (one outside them would never be
    /// received); a fair queue serves a message outside its tenants' index as one without a
    /// group.
    fn restored_groups(
        &self,
        ready: Option<&Ready>,
        kept: GroupSeqs,
        dropped: &[Seq],
    ) -> Option<Option<MessageGroups>> {
        let order = match self.group_order {
            None if kept.is_empty() => return Some(None),
            None => return None,
            Some(GroupOrder::Fair) if kept.is_empty() => return Some(None),
            Some(order) => order,
        };
        let mut groups = MessageGroups::restored(order, kept)?;
        for &seq in dropped {
            groups.left_ready(seq);
        }
        // Each indexed seq is once in the index: it names a message the queue holds if as many
        // of the queue's messages are indexed as the index holds.
        let indexed =
            ready.map_or(0, |ready| ready.seqs().filter(|seq| groups.group_of_ready(*seq).is_some()).count());
        let whole = indexed == groups.ready_count()
            && (order == GroupOrder::Fair || indexed == ready.map_or(0, Ready::message_count));
        whole.then_some(Some(groups))
    }
}

/// Words per promoted message: store id, seq, ready time.
const PROMOTED_WORDS: usize = 3;

/// Appends the ready messages held in memory that became ready after a delay (their seq is
/// not their store id: a promotion gives a new one, and writes nothing, so the log still says
/// "waiting"): their store id, seq and ready time, so that a restart puts each back ready at its
/// place rather than promoting it again behind the state's messages.
fn write_promoted(out: &mut StateWriter, held: &[&Entry]) {
    let promoted = held.iter().filter_map(|entry| {
        let id = entry.persist_id().filter(|id| *id != entry.seq)?;
        Some((id, entry.seq, entry.ready_at()?.as_millis()))
    });
    let promoted: Vec<_> = promoted.collect();
    out.u64(promoted.len() as u64);
    for (id, seq, ready) in promoted {
        out.u64(id);
        out.u64(seq);
        out.u64(ready);
    }
}

/// What [`write_promoted`] wrote, by store id.
fn read_promoted(state: &mut StateReader) -> Option<PromotedHeld> {
    let count = state.count(PROMOTED_WORDS * 8)?;
    let mut promoted = PromotedHeld::default();
    promoted.reserve(count);
    for _ in 0..count {
        let (id, seq, ready) = (state.u64()?, state.u64()?, state.u64()?);
        promoted.insert(id, (seq, Timestamp::from_millis(ready)));
    }
    Some(promoted)
}

impl Queue {
    /// The place and ready time a checkpoint's state gave message `persist_id`, held in memory
    /// after its delay (`write_promoted`), if it did; taken once.
    pub(crate) fn take_promoted(&mut self, persist_id: u64) -> Option<(Seq, Timestamp)> {
        if self.promoted_held.is_empty() {
            return None;
        }
        self.promoted_held.remove(&persist_id)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use hourglass_wire::{FieldTable, FieldValue, ShortStr};

    use super::*;
    use crate::message::{Hot, Message};
    use crate::persist::RecordLocation;
    use crate::queue::entry::{Entry, Paged, Payload};
    use crate::queue::far_files::MemorySpillFiles;
    use crate::queue::message_groups::{group_key, NO_GROUP};
    use crate::queue::paging::Pager;
    use crate::queue::{QueueArgs, QueueId, QueueSpec};
    use crate::time::Timestamp;

    const DUE: Timestamp = Timestamp::from_millis(60_000);

    /// A durable queue made with `arguments`, its far tier in memory.
    fn queue_with(arguments: FieldTable) -> Queue {
        let spec = QueueSpec {
            name: ShortStr::from_static("q"),
            durable: true,
            exclusive_owner: None,
            auto_delete: false,
            arguments,
        };
        let args = QueueArgs::parse(&spec.arguments, "q", "/", true).unwrap();
        let mut pager = Pager::default();
        pager.set_spill_files(Arc::new(MemorySpillFiles::default()));
        Queue::new(QueueId(1), "/".to_owned(), spec, args, pager, Timestamp::from_millis(0))
    }

    fn fifo() -> Queue {
        queue_with(FieldTable::from_entries([("x-sqs-fifo", FieldValue::Bool(true))]))
    }

    fn fair() -> Queue {
        queue_with(FieldTable::from_entries([(
            "x-sqs-receive-message-wait-time-seconds",
            FieldValue::I32(0),
        )]))
    }

    /// Stored message `seq` (store id `seq + 100`), paged out.
    fn paged(seq: Seq) -> Entry {
        let location = RecordLocation { segment: 1, offset: seq as u32 * 100, record_bytes: 100 };
        let paged = Paged::new(location, Hot::new(None, 0, true), 16).unwrap();
        let ready = Some(Timestamp::from_millis(1_000));
        Entry::with_payload(seq, Payload::Paged(paged), ready, None, Some(seq + 100))
    }

    /// Stored message `seq` (store id `seq + 100`), held in memory.
    fn resident(seq: Seq) -> Entry {
        let message =
            Message::new(Default::default(), Default::default(), Default::default(), vec![1u8; 16].into());
        Entry::new(seq, Arc::new(message), Some(Timestamp::from_millis(1_000)), None, Some(seq + 100))
    }

    /// The state of `queue`, taken back into `into` without the messages of store ids `changed`.
    fn restore(queue: &Queue, mut into: Queue, changed: &[u64]) -> Option<(Queue, Restored)> {
        let state = queue.checkpoint_state(&[])?;
        let parts = state.parts.iter().map(|part| part.bytes().clone()).collect();
        let restored = into.restore_state(parts, changed)?;
        Some((into, restored))
    }

    /// Issue 41: an SQS FIFO queue's state keeps its groups, so that a restart takes its paged
    /// backlog from the checkpoint and still receives each group in order and groups in
    /// parallel. Its ready messages' groups (not the one held in memory, which is read back from
    /// the log with its own) and its waiting messages' groups come back; a changed message's
    /// do not, nor a waiting one's held in memory (also read back). Before, a queue with groups had no state, and its backlog was read back from the
    /// log.
    #[test]
    fn an_sqs_fifo_queue_s_state_keeps_its_groups() {
        let (g1, g2, g3) = (group_key(b"g1"), group_key(b"g2"), group_key(b"g3"));
        let mut queue = fifo();
        for (seq, group) in [(1, g1), (2, g2), (3, g1), (4, g2), (5, g1), (6, g3)] {
            queue.restore_entry(paged(seq), None, Some(group));
        }
        queue.restore_entry(resident(9), None, Some(g3));
        queue.restore_entry(paged(7), Some(DUE), Some(g2));
        queue.restore_entry(paged(8), Some(DUE), Some(g3));
        queue.restore_entry(resident(10), Some(DUE), Some(g1));
        let state = queue.checkpoint_state(&[]).expect("a FIFO queue has a state");
        assert_eq!(
            (state.covers, state.read_back.clone()),
            (8, vec![109, 110]),
            "the ones in memory are read back"
        );

        // Changed since the checkpoint: 3 (ready, g1) and 8 (waiting, g3).
        let (mut restored, counts) = restore(&queue, fifo(), &[103, 108]).expect("the state is used");
        assert_eq!(counts, Restored { ready: 5, waiting: 1 });
        let groups = restored.groups.as_ref().unwrap();
        assert_eq!(groups.ready_count(), 5);
        let of = [1, 2, 4, 5, 6].map(|seq| groups.group_of_ready(seq));
        assert_eq!(of, [Some(g1), Some(g2), Some(g2), Some(g1), Some(g3)]);
        assert_eq!((groups.group_of_ready(3), groups.group_of_ready(9)), (None, None));
        assert_eq!(groups.next_receivable(None), Some(1));
        assert_eq!(groups.next_receivable(Some(g2)), Some(2), "a receive goes on in its group");
        assert_eq!(
            restored.waiting_groups,
            HashMap::from([(7, g2)]),
            "8 changed and 10 in memory: they come from the log with their groups"
        );
        // The one in memory comes back from the log, in its group, behind the rest.
        restored.restore_entry(resident(9), None, Some(g3));
        let groups = restored.groups.as_mut().unwrap();
        assert_eq!(groups.group_of_ready(9), Some(g3));
        groups.left_ready(1);
        groups.delivered(g1);
        groups.left_ready(2);
        groups.delivered(g2);
        assert_eq!(groups.next_receivable(None), Some(6), "g1 and g2 wait for their messages in flight");
    }

    /// A state walks its groups at every checkpoint offer, on the broker's thread: a queue with
    /// more grouped messages than [`GROUPED_MAX`] has none, and is read back from the log.
    #[test]
    fn a_queue_with_more_grouped_messages_than_the_bound_has_no_state() {
        let mut queue = fifo();
        queue.restore_entry(paged(1), None, Some(group_key(b"g")));
        let first_waiting = 10;
        queue.waiting_groups.extend((0..GROUPED_MAX as u64 - 1).map(|n| (first_waiting + n, 1)));
        assert!(queue.checkpoint_state(&[]).is_some(), "at the bound");
        queue.waiting_groups.insert(first_waiting + GROUPED_MAX as u64, 1);
        assert!(queue.checkpoint_state(&[]).is_none(), "past it");
    }

    /// A FIFO queue's groups must hold its ready messages exactly: a state whose groups miss one
    /// (or name one it does not hold) is refused, and the queue is read back from the log, as
    /// is one written before groups were kept (version 3) with ready messages.
    #[test]
    fn a_fifo_state_whose_groups_do_not_match_its_messages_is_refused() {
        let mut queue = fifo();
        for seq in 1..=3 {
            queue.restore_entry(paged(seq), None, Some(group_key(b"g")));
        }
        let mut sorted_changed = Vec::new();
        let state = queue.checkpoint_state(&[]).unwrap();
        let parts: Vec<Bytes> = state.parts.iter().map(|part| part.bytes().clone()).collect();
        let mut reader = StateReader::new(parts);
        assert_eq!(reader.u64(), Some(STATE_VERSION));
        let (ready_groups, _) = (read_groups(&mut reader).unwrap(), read_groups(&mut reader).unwrap());
        assert!(read_promoted(&mut reader).unwrap().is_empty());
        let ready = queue.ready.restored(&mut reader, &sorted_changed, &mut Vec::new()).unwrap();
        let with = |seqs: Vec<Seq>| vec![(group_key(b"g"), seqs)];
        let fresh = fifo();
        assert!(fresh.restored_groups(Some(&ready), ready_groups, &[]).is_some());
        assert!(fresh.restored_groups(Some(&ready), with(vec![1, 2]), &[]).is_none(), "one missing");
        assert!(fresh.restored_groups(Some(&ready), with(vec![1, 2, 4]), &[]).is_none(), "one not held");
        assert!(fresh.restored_groups(Some(&ready), Vec::new(), &[]).is_none(), "none kept");
        sorted_changed.push(103);
        let mut dropped = Vec::new();
        let mut reader = StateReader::new(state.parts.iter().map(|part| part.bytes().clone()).collect());
        reader.u64();
        let ready_groups = read_groups(&mut reader).unwrap();
        read_groups(&mut reader).unwrap();
        read_promoted(&mut reader).unwrap();
        let without_3 = queue.ready.restored(&mut reader, &sorted_changed, &mut dropped).unwrap();
        assert_eq!(dropped, [3]);
        assert!(fresh.restored_groups(Some(&without_3), ready_groups, &dropped).is_some(), "3 left out");
    }

    /// A fair (SQS standard) queue's state keeps its tenants, of ready and of waiting messages,
    /// and one with no tenant has no groups to keep. Before, a fair queue whose waiting paged
    /// messages had tenants had no state.
    #[test]
    fn a_fair_queue_s_state_keeps_its_tenants() {
        let tenant = group_key(b"tenant");
        let mut queue = fair();
        queue.restore_entry(paged(1), None, Some(NO_GROUP));
        queue.restore_entry(paged(2), None, Some(tenant));
        queue.restore_entry(paged(3), Some(DUE), Some(tenant));
        let (restored, counts) = restore(&queue, fair(), &[]).expect("a fair queue has a state");
        assert_eq!(counts, Restored { ready: 2, waiting: 1 });
        let groups = restored.groups.as_ref().expect("its tenants");
        assert_eq!((groups.group_of_ready(1), groups.group_of_ready(2)), (None, Some(tenant)));
        assert_eq!(restored.waiting_groups, HashMap::from([(3, tenant)]));

        let mut untenanted = fair();
        untenanted.restore_entry(paged(1), None, Some(NO_GROUP));
        let (restored, _) = restore(&untenanted, fair(), &[]).unwrap();
        assert!(restored.groups.is_none() && restored.waiting_groups.is_empty());
    }
}
