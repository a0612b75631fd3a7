//! basic.get on a queue whose head is paged out (ADR 0007), without reading the store on the
//! broker's thread (ARCHITECTURE.md, rule 1). The queue asks for its head as it does for a
//! consumer (`Queue::take_for_consumer`, `message_reads.rs`) and the get waits here, in the order
//! the gets came, until the read is answered; the answer serves the waiting gets before the
//! queue's consumers (`Broker::handle_message_read`).
//!
//! Nothing else on the channel has to wait: a client sends no other synchronous method on a
//! channel before the reply to the last (AMQP 0-9-1, §2.3.5.1), and a get's delivery tag is
//! taken when it is answered, so the channel's tags still go out in order. A get whose channel
//! closes meanwhile is forgotten; one whose queue is deleted is answered with get-empty.

use std::collections::VecDeque;

use hourglass_wire::BasicGetEmpty;

use crate::api::{ChannelId, ConnectionId};
use crate::broker::{Broker, IdMap};
use crate::queue::QueueId;
use crate::time::Timestamp;

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
}

impl WaitingGets {
    /// Whether gets wait on queue `id` (a later get waits behind them).
    pub fn waits(&self, id: QueueId) -> bool {
        self.queues.contains_key(&id)
    }

    /// `get` waits for queue `id`'s head, behind the gets waiting there.
    pub fn wait(&mut self, id: QueueId, get: WaitingGet) {
        self.queues.entry(id).or_default().push_back(get);
    }

    /// Queue `id`'s waiting gets, in order, taken out (for the answer to serve them).
    pub fn take(&mut self, id: QueueId) -> VecDeque<WaitingGet> {
        self.queues.remove(&id).unwrap_or_default()
    }

    /// Puts back gets `take` took that still wait, in front of any that came since.
    pub fn put_back(&mut self, id: QueueId, mut gets: VecDeque<WaitingGet>) {
        if gets.is_empty() {
            return;
        }
        if let Some(later) = self.queues.remove(&id) {
            gets.extend(later);
        }
        self.queues.insert(id, gets);
    }

    /// Channel `(conn, channel)` closed: its waiting gets are forgotten.
    pub fn forget_channel(&mut self, conn: ConnectionId, channel: ChannelId) {
        if self.queues.is_empty() {
            return;
        }
        self.queues.retain(|_, gets| {
            gets.retain(|get| (get.conn, get.channel) != (conn, channel));
            !gets.is_empty()
        });
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

    /// Queue `id` is deleted: the gets waiting on it are answered with get-empty.
    pub(crate) fn answer_waiting_gets_empty(&mut self, id: QueueId) {
        for get in self.waiting_gets.take(id) {
            self.count_empty_get(get.conn, get.channel);
            self.send(get.conn, get.channel, BasicGetEmpty {});
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
        gets.wait(q, get(1, 1));
        gets.wait(q, get(2, 1));
        gets.wait(other, get(1, 1));
        let taken = gets.take(q);
        assert!(!gets.waits(q));
        gets.wait(q, get(3, 1));
        gets.put_back(q, taken);
        assert_eq!(gets.take(q), [get(1, 1), get(2, 1), get(3, 1)]);
        gets.forget_channel(ConnectionId(1), ChannelId(1));
        assert!(!gets.waits(other), "the closed channel's only get went, and its queue's entry");
    }
}
