//! basic.get on a queue whose next message (its head, or the one its message groups chose) is
//! paged out (ADR 0007), without reading the store on the broker's thread (ARCHITECTURE.md, rule
//! 1). The queue asks for it as it does for a consumer (`Queue::take_for_consumer`,
//! `message_reads.rs`) and the get waits here, in the order
//! the gets came, until the read is answered; the answer serves the waiting gets before the
//! queue's consumers (`Broker::handle_message_read`).
//!
//! Nothing else on the channel has to wait: a client sends no other synchronous method on a
//! channel before the reply to the last (AMQP 0-9-1, §2.3.5.1), and a get's delivery tag is
//! taken when it is answered, so the channel's tags still go out in order. A get whose channel
//! closes meanwhile is forgotten; one whose queue is deleted is answered with get-empty. A client
//! that sends gets without waiting for their replies may have [`PER_CHANNEL_MAX`] waiting on a
//! channel; the next one closes the channel (406), so that what a client makes the broker hold
//! stays bounded.
//!
//! The HTTP API's get cannot wait within its request (`requests::GetMessages`): when the message
//! it would take is being read it answers so, and the API waits here under its driver's ticket
//! ([`Broker::wait_for_read`]) until the read is answered (`Notice::ReadAnswered`), then gets
//! again. It waits behind the clients' gets: the answer serves theirs first.

use std::collections::VecDeque;

use hourglass_wire::BasicGetEmpty;

use crate::api::{ChannelId, ConnectionId};
use crate::broker::{Broker, IdMap};
use crate::notices::{Notice, Ticket};
use crate::queue::{Queue, QueueId};
use crate::time::Timestamp;

/// The gets one channel may have waiting at once: a client that waits for each reply has one.
pub(crate) const PER_CHANNEL_MAX: usize = 1_000;

/// The HTTP API's gets that may wait on one queue's read at once; a later one is woken at once
/// (it then takes what is in memory), so that what the API makes the broker hold stays bounded.
pub(crate) const HTTP_GETS_PER_QUEUE_MAX: usize = 1_000;

/// A basic.get waiting for its queue's paged head to be read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct WaitingGet {
    pub conn: ConnectionId,
    pub channel: ChannelId,
    pub no_ack: bool,
}

/// Every queue's waiting gets, each queue's in the order they came.
#[derive(Debug, Default)]
pub(crate) struct WaitingGets {
    queues: IdMap<QueueId, VecDeque<WaitingGet>>,
    /// How many gets each channel has waiting (on any queue).
    per_channel: IdMap<(ConnectionId, ChannelId), usize>,
    /// The tickets of the HTTP API's gets waiting on each queue's read.
    http: IdMap<QueueId, Vec<Ticket>>,
}

/// A channel already has [`PER_CHANNEL_MAX`] gets waiting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TooManyWaiting;

impl WaitingGets {
    /// Whether gets wait on queue `id` (a later get waits behind them).
    pub fn waits(&self, id: QueueId) -> bool {
        self.queues.contains_key(&id)
    }

    /// `get` waits for queue `id`'s head, behind the gets waiting there; refused when its
    /// channel has [`PER_CHANNEL_MAX`] waiting already.
    pub fn wait(&mut self, id: QueueId, get: WaitingGet) -> Result<(), TooManyWaiting> {
        let waiting = self.per_channel.entry((get.conn, get.channel)).or_default();
        if *waiting >= PER_CHANNEL_MAX {
            return Err(TooManyWaiting);
        }
        *waiting += 1;
        self.queues.entry(id).or_default().push_back(get);
        Ok(())
    }

    /// Queue `id`'s waiting gets, in order, taken out (for the answer to serve them); those not
    /// put back are no longer counted as waiting.
    pub fn take(&mut self, id: QueueId) -> VecDeque<WaitingGet> {
        let gets = self.queues.remove(&id).unwrap_or_default();
        for get in &gets {
            self.count_out(get.conn, get.channel);
        }
        gets
    }

    /// Puts back gets `take` took that still wait, in front of any that came since.
    pub fn put_back(&mut self, id: QueueId, mut gets: VecDeque<WaitingGet>) {
        if gets.is_empty() {
            return;
        }
        for get in &gets {
            *self.per_channel.entry((get.conn, get.channel)).or_default() += 1;
        }
        if let Some(later) = self.queues.remove(&id) {
            gets.extend(later);
        }
        self.queues.insert(id, gets);
    }

    /// Channel `(conn, channel)` closed: its waiting gets are forgotten.
    pub fn forget_channel(&mut self, conn: ConnectionId, channel: ChannelId) {
        if self.per_channel.remove(&(conn, channel)).is_none() {
            return;
        }
        self.queues.retain(|_, gets| {
            gets.retain(|get| (get.conn, get.channel) != (conn, channel));
            !gets.is_empty()
        });
    }

    /// An HTTP API get waits for queue `id`'s read under `ticket`; `false` when the queue has
    /// [`HTTP_GETS_PER_QUEUE_MAX`] waiting already.
    pub fn wait_http(&mut self, id: QueueId, ticket: Ticket) -> bool {
        let waiting = self.http.entry(id).or_default();
        if waiting.len() >= HTTP_GETS_PER_QUEUE_MAX {
            return false;
        }
        waiting.push(ticket);
        true
    }

    /// The tickets of the HTTP API's gets waiting on queue `id`, taken out.
    pub fn take_http(&mut self, id: QueueId) -> Vec<Ticket> {
        self.http.remove(&id).unwrap_or_default()
    }

    /// One of the channel's gets no longer waits.
    fn count_out(&mut self, conn: ConnectionId, channel: ChannelId) {
        if let Some(waiting) = self.per_channel.get_mut(&(conn, channel)) {
            *waiting = waiting.saturating_sub(1);
            if *waiting == 0 {
                self.per_channel.remove(&(conn, channel));
            }
        }
    }
}

impl Broker {
    /// Serves the gets waiting on queue `id` now that its read is answered: in order, until one
    /// has to wait again (it and those behind it go on waiting).
    pub(crate) fn answer_waiting_gets(&mut self, id: QueueId, now: Timestamp) {
        if !self.waiting_gets.waits(id) {
            return;
        }
        let Some(queue) = self.queues.get(&id) else { return };
        let (vhost, name) = (queue.vhost.clone(), queue.name().clone());
        let mut gets = self.waiting_gets.take(id);
        while let Some(&get) = gets.front() {
            if !self.answer_get(get, &vhost, name.clone(), id, now) {
                break;
            }
            gets.pop_front();
        }
        self.waiting_gets.put_back(id, gets);
    }

    /// Queue `id` is deleted: the gets waiting on it are answered with get-empty, and the HTTP
    /// API's are woken (their next get finds no queue).
    pub(crate) fn answer_waiting_gets_empty(&mut self, id: QueueId) {
        for get in self.waiting_gets.take(id) {
            self.count_empty_get(get.conn, get.channel);
            self.send(get.conn, get.channel, BasicGetEmpty {});
        }
        self.wake_http_gets(id);
    }

    /// The HTTP API's get of queue `queue` in `vhost` found the message it would take next being
    /// read (`GetMessages`): [`Notice::ReadAnswered`] comes for `ticket` once the queue's read
    /// is answered, at once when none is out now (or the queue is gone, or has
    /// [`HTTP_GETS_PER_QUEUE_MAX`] waiting).
    pub fn wait_for_read(&mut self, vhost: &str, queue: &str, ticket: Ticket) {
        let awaiting = self.queue_awaiting_read(vhost, queue);
        if !awaiting.is_some_and(|id| self.waiting_gets.wait_http(id, ticket)) {
            self.notices.push_back(Notice::ReadAnswered { ticket });
        }
    }

    /// Whether the message a get of queue `queue` in `vhost` would take next is paged out and
    /// being read (`Queue::take_awaits_read`).
    pub(crate) fn get_awaits_read(&self, vhost: &str, queue: &str) -> bool {
        let id = self.vhosts.get(vhost).and_then(|v| v.queue_id(queue));
        id.and_then(|id| self.queues.get(&id)).is_some_and(Queue::take_awaits_read)
    }

    /// Queue `queue` in `vhost` when a read of its paged messages is out.
    fn queue_awaiting_read(&self, vhost: &str, queue: &str) -> Option<QueueId> {
        let id = self.vhosts.get(vhost)?.queue_id(queue)?;
        self.queues.get(&id).is_some_and(|q| q.pager.reading()).then_some(id)
    }

    /// Wakes the HTTP API's gets waiting on queue `id`'s read: it is answered, or the queue is
    /// gone.
    pub(crate) fn wake_http_gets(&mut self, id: QueueId) {
        for ticket in self.waiting_gets.take_http(id) {
            self.notices.push_back(Notice::ReadAnswered { ticket });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn get(conn: u64, channel: u16) -> WaitingGet {
        WaitingGet { conn: ConnectionId(conn), channel: ChannelId(channel), no_ack: false }
    }

    #[test]
    fn gets_put_back_stay_ahead_of_later_ones_and_a_closed_channel_s_go() {
        let (q, other) = (QueueId(1), QueueId(2));
        let mut gets = WaitingGets::default();
        gets.wait(q, get(1, 1)).unwrap();
        gets.wait(q, get(2, 1)).unwrap();
        gets.wait(other, get(1, 1)).unwrap();
        let taken = gets.take(q);
        assert!(!gets.waits(q));
        gets.wait(q, get(3, 1)).unwrap();
        gets.put_back(q, taken);
        assert_eq!(gets.take(q), [get(1, 1), get(2, 1), get(3, 1)]);
        gets.forget_channel(ConnectionId(1), ChannelId(1));
        assert!(!gets.waits(other), "the closed channel's only get went, and its queue's entry");
        assert!(gets.per_channel.is_empty(), "nothing counted for gets gone");
    }

    /// A queue has at most [`HTTP_GETS_PER_QUEUE_MAX`] of the HTTP API's gets waiting; the next
    /// is refused (woken at once by `Broker::wait_for_read`), another queue has room of its own,
    /// and the answer takes them all, in order, freeing the room.
    #[test]
    fn a_queue_has_at_most_its_bound_of_http_gets_waiting() {
        let (q, other) = (QueueId(1), QueueId(2));
        let mut gets = WaitingGets::default();
        for ticket in 0..HTTP_GETS_PER_QUEUE_MAX as u64 {
            assert!(gets.wait_http(q, ticket));
        }
        assert!(!gets.wait_http(q, 9_999), "past the bound");
        assert!(gets.wait_http(other, 9_999), "another queue has its own room");
        let woken = gets.take_http(q);
        assert_eq!(woken, (0..HTTP_GETS_PER_QUEUE_MAX as u64).collect::<Vec<_>>());
        assert!(gets.take_http(q).is_empty() && gets.wait_http(q, 1), "room again");
    }

    #[test]
    fn a_channel_has_at_most_its_bound_waiting_and_answered_ones_free_room() {
        let (q, other) = (QueueId(1), QueueId(2));
        let mut gets = WaitingGets::default();
        for n in 0..PER_CHANNEL_MAX {
            gets.wait(if n % 2 == 0 { q } else { other }, get(1, 1)).unwrap();
        }
        assert_eq!(gets.wait(q, get(1, 1)), Err(TooManyWaiting), "on any queue");
        gets.wait(q, get(1, 2)).expect("another channel has its own room");
        let taken = gets.take(q);
        assert_eq!(taken.len(), PER_CHANNEL_MAX / 2 + 1);
        gets.wait(q, get(1, 1)).expect("room again once some are answered");
    }
}
