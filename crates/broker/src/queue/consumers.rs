//! A queue's consumers and the choice of who gets the next message: the highest `x-priority`
//! among those with credit, round robin among equals (RabbitMQ's consumer priorities); with
//! `x-single-active-consumer`, only the longest-standing consumer.
//!
//! Credit (prefetch) is per consumer here; the channel-wide limit (basic.qos global=true) is the
//! channel's, so the broker asks both before delivering.

use hourglass_wire::ShortStr;

use crate::api::{ChannelId, ConnectionId};

#[derive(Clone, Debug)]
pub(crate) struct Consumer {
    pub tag: ShortStr,
    pub conn: ConnectionId,
    pub channel: ChannelId,
    pub no_ack: bool,
    pub exclusive: bool,
    /// basic.qos prefetch-count with global=false at consume time; 0 = unlimited.
    pub prefetch_count: u16,
    /// Deliveries to this consumer not yet settled.
    pub unacked: u32,
    /// `x-visibility-timeout` from basic.consume arguments, overriding the queue's (semantics §4).
    pub visibility_timeout_ms: Option<u64>,
    /// `x-consumer-timeout` from basic.consume arguments, overriding the queue's (RabbitMQ 4.3,
    /// semantics §4).
    pub consumer_timeout_ms: Option<u64>,
    /// `x-priority` from basic.consume arguments (default 0).
    pub priority: i64,
}

impl Consumer {
    /// Whether the consumer's own prefetch allows one more delivery.
    pub fn has_credit(&self) -> bool {
        self.no_ack || self.prefetch_count == 0 || self.unacked < u32::from(self.prefetch_count)
    }
}

#[derive(Debug, Default)]
pub(crate) struct Consumers {
    list: Vec<Consumer>,
    /// Index of the consumer to try first next time (round robin).
    next: usize,
    /// Whether all consumers share one priority, so the first eligible one is the pick.
    uniform_priority: bool,
}

impl Consumers {
    pub fn add(&mut self, consumer: Consumer) {
        self.list.push(consumer);
        self.note_priorities();
    }

    /// Removes the consumer with this tag on this channel.
    pub fn remove(&mut self, conn: ConnectionId, channel: ChannelId, tag: &ShortStr) -> Option<Consumer> {
        let at = self.list.iter().position(|c| c.conn == conn && c.channel == channel && &c.tag == tag)?;
        if at < self.next {
            self.next -= 1;
        }
        let consumer = self.list.remove(at);
        if self.next >= self.list.len() {
            self.next = 0;
        }
        self.note_priorities();
        Some(consumer)
    }

    /// The consumer with this tag on this channel.
    pub fn find_mut(
        &mut self,
        conn: ConnectionId,
        channel: ChannelId,
        tag: &ShortStr,
    ) -> Option<&mut Consumer> {
        self.list.iter_mut().find(|c| c.conn == conn && c.channel == channel && &c.tag == tag)
    }

    /// Picks the consumer that gets the next message among those `eligible` accepts (see the
    /// module doc) and advances the rotation past it. Returns its index for `get_mut`.
    pub fn pick(
        &mut self,
        single_active: bool,
        mut eligible: impl FnMut(&Consumer) -> bool,
    ) -> Option<usize> {
        if single_active {
            return self.list.first().filter(|c| eligible(c)).map(|_| 0);
        }
        let count = self.list.len();
        let mut best: Option<usize> = None;
        for step in 0..count {
            let at = (self.next + step) % count;
            if best.is_some_and(|b| self.list[b].priority >= self.list[at].priority) {
                continue;
            }
            if eligible(&self.list[at]) {
                best = Some(at);
                if self.uniform_priority {
                    break;
                }
            }
        }
        if let Some(at) = best {
            self.next = (at + 1) % count;
        }
        best
    }

    /// Where the rotation stands: hand it to `rewind` to undo a pick that delivered nothing.
    pub fn rotation(&self) -> usize {
        self.next
    }

    /// Puts the rotation back where `rotation` said it stood.
    pub fn rewind(&mut self, to: usize) {
        self.next = to;
    }

    pub fn get(&self, at: usize) -> Option<&Consumer> {
        self.list.get(at)
    }

    pub fn get_mut(&mut self, at: usize) -> Option<&mut Consumer> {
        self.list.get_mut(at)
    }

    pub fn iter(&self) -> impl Iterator<Item = &Consumer> {
        self.list.iter()
    }

    pub fn count(&self) -> usize {
        self.list.len()
    }

    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    pub fn has_exclusive(&self) -> bool {
        self.list.iter().any(|c| c.exclusive)
    }

    fn note_priorities(&mut self) {
        let first = self.list.first().map(|c| c.priority);
        self.uniform_priority = self.list.iter().all(|c| Some(c.priority) == first);
    }
}
