//! What the broker has for its driver (`Broker::poll_effect`), in order per channel: effects
//! ready to send, and replies held until the store ops they stand for are durable (confirms mean
//! fsynced, issue 6), with whatever follows them on their channel.
//!
//! A reply that must wait comes in with the op it waits for ([`Outbox::hold`]: a publisher
//! confirm, the -ok of a durable declare, a tx.commit-ok, `Broker::reply_when_durable`); every
//! other effect with [`Outbox::push`], which queues it behind its channel's held replies, if
//! any. Nothing handed in is taken back or looked at again until the store reports. Other
//! channels are not held, and deliveries never start a hold: a consumer acking with prefetch 1
//! gets its next message without waiting for a sync (RabbitMQ too delivers before fsync).

use std::collections::VecDeque;

use crate::api::{ChannelId, ConnectionId, Effect};
use crate::broker::{release_burst_capacity, IdMap};

#[derive(Debug, Default)]
pub(crate) struct Outbox {
    ready: VecDeque<Effect>,
    /// Per channel, in order: the op that must be durable before the effect goes (0 for one
    /// queued behind an earlier held effect), and the effect.
    held: IdMap<(ConnectionId, ChannelId), VecDeque<(u64, Effect)>>,
}

impl Outbox {
    /// An effect to send as soon as its channel's held replies, if any, have gone.
    pub fn push(&mut self, effect: Effect) {
        if !self.held.is_empty() {
            if let Some(waiting) = effect.channel_key().and_then(|key| self.held.get_mut(&key)) {
                waiting.push_back((0, effect));
                return;
            }
        }
        self.ready.push_back(effect);
    }

    /// A reply that goes once op `needed` is durable ([`Outbox::release`]); later effects of its
    /// channel wait behind it.
    pub fn hold(&mut self, effect: Effect, needed: u64) {
        match effect.channel_key() {
            Some(key) => self.held.entry(key).or_default().push_back((needed, effect)),
            None => self.ready.push_back(effect),
        }
    }

    /// Every op through `durable` is durable: held effects whose ops are go out, in order per
    /// channel.
    pub fn release(&mut self, durable: u64) {
        let ready = &mut self.ready;
        self.held.retain(|_, waiting| {
            while waiting.front().is_some_and(|(needed, _)| *needed <= durable) {
                ready.extend(waiting.pop_front().map(|(_, effect)| effect));
            }
            !waiting.is_empty()
        });
    }

    /// The next effect to send.
    pub fn pop(&mut self) -> Option<Effect> {
        let effect = self.ready.pop_front();
        if effect.is_none() {
            release_burst_capacity(&mut self.ready);
        }
        effect
    }

    /// The ready effects addressed to `conn` (a synthetic connection reading its replies at
    /// once), taken out; every other one stays, in order.
    pub fn take_ready_of(&mut self, conn: ConnectionId) -> Vec<Effect> {
        let (taken, kept): (VecDeque<Effect>, VecDeque<Effect>) =
            std::mem::take(&mut self.ready).into_iter().partition(|effect| effect.conn() == conn);
        self.ready = kept;
        taken.into()
    }

    /// A connection is gone: what was held for it will never be sent (unconfirmed is safe).
    pub fn forget(&mut self, conn: ConnectionId) {
        self.held.retain(|(c, _), _| *c != conn);
    }

    /// Effects waiting for the store (for statistics and tests).
    pub fn held_len(&self) -> usize {
        self.held.values().map(VecDeque::len).sum()
    }

    /// Publisher confirms (basic.ack / basic.nack) of a channel still waiting for the store:
    /// RabbitMQ's `messages_unconfirmed`. Read at scrape time, not per message.
    pub fn unconfirmed(&self, conn: ConnectionId, channel: ChannelId) -> u32 {
        let Some(held) = self.held.get(&(conn, channel)) else { return 0 };
        held.iter().filter(|(_, effect)| matches!(effect, Effect::Confirm { .. })).count() as u32
    }
}

#[cfg(test)]
mod tests {
    use hourglass_wire::{BasicConsumeOk, ShortStr};

    use super::*;

    const CONN: ConnectionId = ConnectionId(1);

    fn reply(channel: u16, tag: &'static str) -> Effect {
        let ok = BasicConsumeOk { consumer_tag: ShortStr::from_static(tag) };
        Effect::send(CONN, ChannelId(channel), ok, None)
    }

    fn tags(outbox: &mut Outbox) -> Vec<String> {
        std::iter::from_fn(|| outbox.pop())
            .map(|effect| match effect.into_method() {
                Some((_, hourglass_wire::Method::BasicConsumeOk(ok), _)) => ok.consumer_tag.to_string(),
                other => panic!("{other:?}"),
            })
            .collect()
    }

    /// A held reply goes once its op is durable, with what its channel sent after it; another
    /// channel is never held up.
    #[test]
    fn a_held_reply_keeps_its_channel_in_order_and_no_other() {
        let mut outbox = Outbox::default();
        outbox.hold(reply(1, "held"), 5);
        outbox.push(reply(1, "behind"));
        outbox.push(reply(2, "other"));
        assert_eq!(tags(&mut outbox), ["other"]);
        assert_eq!(outbox.held_len(), 2);
        outbox.release(4);
        assert_eq!(tags(&mut outbox), Vec::<String>::new(), "op 5 is not durable yet");
        outbox.release(5);
        assert_eq!(tags(&mut outbox), ["held", "behind"]);
        outbox.push(reply(1, "after"));
        assert_eq!(tags(&mut outbox), ["after"], "nothing held any more");
    }
}
