//! A channel's delivery state, as the broker keeps it: delivery tags, unacked deliveries, basic.qos
//! limits, confirm and tx modes, and the consumers opened on it.
//!
//! Delivery tags count from 1 per channel (AMQP 0-9-1 basic.deliver); unacked deliveries are kept
//! in tag order so `multiple=true` settles a prefix.

use std::collections::{BTreeSet, VecDeque};

use hourglass_wire::ShortStr;

use crate::api::{AmqpError, Publish};
use crate::errors;
use crate::message_stats::MessageStats;
use crate::queue::entry::Entry;
use crate::queue::visibility::Deadline;
use crate::queue::{QueueId, ReturnKind};
use crate::time::Timestamp;

/// How many timed-out delivery tags a channel remembers, so a late ack of one is ignored rather
/// than refused (semantics §4). Older ones are forgotten; acking those is an unknown tag again.
const MAX_STALE_TAGS: usize = 65_536;
/// How many consumers cancelled by a consumer timeout a channel remembers (their other
/// deliveries running out later come back quietly, semantics §4).
const MAX_TIMED_OUT_CONSUMERS: usize = 1_024;

/// A delivery the client has not settled yet.
#[derive(Debug)]
pub(crate) struct Unacked {
    pub tag: u64,
    pub queue: QueueId,
    pub entry: Entry,
    /// The consumer it went to; `None` for basic.get.
    pub consumer_tag: Option<ShortStr>,
    /// When it was made: with no deadline of its own, the broker's default consumer timeout
    /// counts from here (`consumer_timeout.rs`).
    pub delivered_at: Timestamp,
    /// When its visibility or consumer timeout runs out (semantics §4); `None`: only the
    /// broker's default consumer timeout applies.
    pub deadline: Option<Deadline>,
}

/// How a settled delivery leaves the channel.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Settlement {
    /// basic.ack: the message is done.
    Ack,
    /// basic.nack / basic.reject with requeue=true, or recover: back to the queue, as a failure
    /// (basic.reject) or not (RabbitMQ 4.3's delayed retry tells them apart).
    Requeue(ReturnKind),
    /// Back to the queue as `Requeue`, to be delivered again no earlier than this time (an AMQP
    /// 1.0 `modified` outcome naming an `x-opt-delivery-time`: `Command::Modify`).
    RequeueAt(ReturnKind, Timestamp),
    /// basic.nack / basic.reject with requeue=false: dead-lettered or dropped.
    Discard,
}

/// Publishing mode: plain, publisher confirms (confirm.select) or transactional (tx.select).
#[derive(Debug, Default)]
pub(crate) enum Mode {
    #[default]
    Plain,
    Confirm {
        /// The sequence number the next publish gets (basic.ack delivery-tag).
        next_publish_seq: u64,
    },
    Tx(TxBuffer),
}

/// Work held back until tx.commit.
#[derive(Debug, Default)]
pub(crate) struct TxBuffer {
    pub publishes: Vec<Publish>,
    pub settlements: Vec<(Unacked, Settlement)>,
}

#[derive(Debug)]
pub(crate) struct Channel {
    /// Which opening of a channel this is, unique in the broker's life (`Connections::open_channel`):
    /// a receipt handle names it, so it never acts on a channel reopened under the same number.
    pub opening: u64,
    next_delivery_tag: u64,
    unacked: VecDeque<Unacked>,
    /// basic.qos prefetch-count with global=false: applies to consumers created afterwards.
    pub consumer_prefetch: u16,
    /// basic.qos prefetch-count with global=true: shared by all consumers on the channel.
    pub channel_prefetch: u16,
    /// Unacked deliveries to consumers (what the channel-wide limit counts).
    pub consumer_unacked: u32,
    pub mode: Mode,
    /// Consumers opened on this channel and the queue each consumes from.
    pub consumers: Vec<(ShortStr, QueueId)>,
    /// The last queue declared on this channel, which an empty queue name refers to.
    pub last_queue: Option<ShortStr>,
    /// What was published, delivered and acked on this channel (`message_stats.rs`).
    pub stats: MessageStats,
    /// Tags of deliveries whose visibility timed out: a late settle of these is ignored.
    stale_tags: BTreeSet<u64>,
    /// Consumers this channel lost to a consumer timeout, most recent last.
    timed_out_consumers: VecDeque<ShortStr>,
    /// The connection's socket is behind: no deliveries to this channel's consumers for now.
    pub paused: bool,
    /// Where `queues_in_turn` starts next time.
    turn: usize,
}

impl Channel {
    pub fn new(opening: u64) -> Self {
        Channel {
            opening,
            next_delivery_tag: 1,
            unacked: VecDeque::new(),
            consumer_prefetch: 0,
            channel_prefetch: 0,
            consumer_unacked: 0,
            mode: Mode::Plain,
            consumers: Vec::new(),
            last_queue: None,
            stats: MessageStats::default(),
            stale_tags: BTreeSet::new(),
            timed_out_consumers: VecDeque::new(),
            paused: false,
            turn: 0,
        }
    }

    /// Allocates the next delivery tag.
    pub fn next_tag(&mut self) -> u64 {
        let tag = self.next_delivery_tag;
        self.next_delivery_tag += 1;
        tag
    }

    /// Records a delivery that awaits settlement.
    pub fn track(&mut self, unacked: Unacked) {
        debug_assert!(self.unacked.back().is_none_or(|last| last.tag < unacked.tag));
        if unacked.consumer_tag.is_some() {
            self.consumer_unacked += 1;
        }
        self.unacked.push_back(unacked);
    }

    /// Puts back deliveries taken by `take_settled` (tx.rollback), keeping tag order.
    pub fn untake(&mut self, unacked: Unacked) {
        if unacked.consumer_tag.is_some() {
            self.consumer_unacked += 1;
        }
        let at = self.unacked.partition_point(|u| u.tag < unacked.tag);
        self.unacked.insert(at, unacked);
    }

    /// Moves the deliveries that basic.ack/nack/reject (`tag`, `multiple`) settle into `out`.
    /// `multiple` with tag 0 means every unacked delivery (AMQP 0-9-1 basic.ack). An unknown tag
    /// is RabbitMQ's 406 "unknown delivery tag". A tag whose visibility already ran out is
    /// ignored, however often it is settled, and `multiple` across such tags settles the live
    /// ones (semantics §4).
    pub fn take_settled(
        &mut self,
        tag: u64,
        multiple: bool,
        out: &mut Vec<Unacked>,
    ) -> Result<(), AmqpError> {
        if multiple && tag == 0 {
            self.take_all(out);
            return Ok(());
        }
        let at = self.unacked.partition_point(|u| u.tag < tag);
        let found = self.unacked.get(at).is_some_and(|u| u.tag == tag);
        if !found && !self.stale_tags.contains(&tag) {
            return Err(errors::unknown_delivery_tag(tag));
        }
        // Stale tags stay remembered after a settle: every later ack, nack or reject of the same
        // delivery is ignored too (semantics §4), not only the first. Tags are never reused, so
        // keeping them is harmless; MAX_STALE_TAGS bounds the set.
        let before = out.len();
        if multiple {
            let end = if found { at + 1 } else { at };
            out.extend(self.unacked.drain(..end));
        } else if found {
            out.extend(self.unacked.remove(at));
        }
        let to_consumers = out[before..].iter().filter(|u| u.consumer_tag.is_some()).count();
        self.consumer_unacked -= to_consumers as u32;
        Ok(())
    }

    /// Takes back one delivery whose visibility ran out, remembering its tag as stale.
    pub fn take_timed_out(&mut self, tag: u64) -> Option<Unacked> {
        let at = self.unacked.partition_point(|u| u.tag < tag);
        if self.unacked.get(at).is_none_or(|u| u.tag != tag) {
            return None;
        }
        let unacked = self.unacked.remove(at)?;
        if unacked.consumer_tag.is_some() {
            self.consumer_unacked -= 1;
        }
        self.stale_tags.insert(tag);
        if self.stale_tags.len() > MAX_STALE_TAGS {
            self.stale_tags.pop_first();
        }
        Some(unacked)
    }

    /// Notes that consumer `tag` was cancelled because a delivery of it timed out.
    pub fn note_timed_out_consumer(&mut self, tag: ShortStr) {
        if self.timed_out_consumers.len() == MAX_TIMED_OUT_CONSUMERS {
            self.timed_out_consumers.pop_front();
        }
        self.timed_out_consumers.push_back(tag);
    }

    /// Whether consumer `tag` was cancelled by a consumer timeout (`note_timed_out_consumer`).
    pub fn lost_to_timeout(&self, tag: &ShortStr) -> bool {
        self.timed_out_consumers.contains(tag)
    }

    /// The deliveries under the broker's default consumer timeout (no deadline of their own) that
    /// were made at or before `cutoff`, into `due`; returns when the first later one was made.
    /// Tags follow delivery time, so the walk stops at that one.
    pub fn made_by(&self, cutoff: Timestamp, due: &mut Vec<u64>) -> Option<Timestamp> {
        for unacked in self.unacked.iter().filter(|u| u.deadline.is_none()) {
            if unacked.delivered_at > cutoff {
                return Some(unacked.delivered_at);
            }
            due.push(unacked.tag);
        }
        None
    }

    /// Whether delivery `tag` awaits its settlement here (not settled, not timed out).
    pub fn holds(&self, tag: u64) -> bool {
        self.unacked(tag).is_some()
    }

    /// The tags of the unacked deliveries of queue `queue`, in order.
    pub(crate) fn tags_of_queue(&self, queue: QueueId) -> Vec<u64> {
        self.unacked.iter().filter(|u| u.queue == queue).map(|u| u.tag).collect()
    }

    /// The unacked delivery with this tag.
    pub fn unacked(&self, tag: u64) -> Option<&Unacked> {
        let at = self.unacked.partition_point(|u| u.tag < tag);
        self.unacked.get(at).filter(|u| u.tag == tag)
    }

    pub fn unacked_mut(&mut self, tag: u64) -> Option<&mut Unacked> {
        let at = self.unacked.partition_point(|u| u.tag < tag);
        self.unacked.get_mut(at).filter(|u| u.tag == tag)
    }

    /// The queue and store id of every stored message this channel holds unsettled: its
    /// deliveries, and the settlements a transaction holds back until tx.commit.
    pub fn unsettled_stored(&self) -> impl Iterator<Item = (QueueId, u64)> + '_ {
        let held = match &self.mode {
            Mode::Tx(tx) => tx.settlements.as_slice(),
            _ => &[],
        };
        let deliveries = self.unacked.iter().chain(held.iter().map(|(unacked, _)| unacked));
        deliveries.filter_map(|u| Some((u.queue, u.entry.persist_id()?)))
    }

    /// Every delivery not yet settled, basic.get ones too.
    pub fn unacked_count(&self) -> usize {
        self.unacked.len()
    }

    /// Moves every unacked delivery into `out`, in tag order.
    pub fn take_all(&mut self, out: &mut Vec<Unacked>) {
        out.extend(self.unacked.drain(..));
        self.consumer_unacked = 0;
    }

    /// The queues this channel consumes from, each once, starting one further than last time,
    /// into `queues` (cleared first): the order in which freed channel-wide credit is offered.
    pub fn queues_in_turn(&mut self, queues: &mut Vec<QueueId>) {
        queues.clear();
        for (_, id) in &self.consumers {
            if !queues.contains(id) {
                queues.push(*id);
            }
        }
        if !queues.is_empty() {
            let start = self.turn % queues.len();
            queues.rotate_left(start);
            self.turn = self.turn.wrapping_add(1);
        }
    }

    /// Whether the channel-wide prefetch allows one more consumer delivery.
    pub fn has_credit(&self) -> bool {
        self.channel_prefetch == 0 || self.consumer_unacked < u32::from(self.channel_prefetch)
    }

    /// The next confirm sequence number, when in confirm mode.
    pub fn next_publish_seq(&mut self) -> Option<u64> {
        match &mut self.mode {
            Mode::Confirm { next_publish_seq } => {
                let seq = *next_publish_seq;
                *next_publish_seq += 1;
                Some(seq)
            }
            _ => None,
        }
    }
}
