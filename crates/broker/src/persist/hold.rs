//! Confirms mean fsynced (issue 6): a publisher confirm, a declare-ok of a durable definition or a
//! tx.commit-ok waits until the ops its command produced are durable.
//!
//! Effects of one channel stay in order: once a channel has a held effect, every later effect for
//! that channel (deliveries too) queues behind it. Other channels are not held, and deliveries
//! never start a hold: a consumer acking with prefetch 1 gets its next message without waiting
//! for a sync (RabbitMQ too delivers before fsync).

use std::collections::VecDeque;

use crate::api::{ChannelId, Command, ConnectionId, Effect};
use crate::broker::Broker;
use crate::time::Timestamp;

/// Where one entry point started, to find the effects and ops it produced.
#[derive(Copy, Clone, Debug)]
pub(crate) struct Mark {
    effects: usize,
    op_seq: u64,
}

impl Broker {
    /// The driver reports every op up to `op_seq` durable: held effects whose ops are all
    /// durable are released, in order per channel.
    pub fn handle_persisted(&mut self, op_seq: u64, _now: Timestamp) {
        let persist = &mut self.persist;
        persist.durable_through = persist.durable_through.max(op_seq);
        let durable = persist.durable_through;
        let effects = &mut self.effects;
        persist.held.retain(|_, queue| {
            while queue.front().is_some_and(|(needed, _)| *needed <= durable) {
                if let Some((_, effect)) = queue.pop_front() {
                    effects.push_back(effect);
                }
            }
            !queue.is_empty()
        });
        self.notify_commits();
    }

    /// Effects waiting for the store (for statistics and tests).
    pub fn held_effects(&self) -> usize {
        self.persist.held.values().map(VecDeque::len).sum()
    }

    /// Publisher confirms (basic.ack / basic.nack) of a channel still waiting for the store:
    /// RabbitMQ's `messages_unconfirmed`. Read at scrape time, not per message.
    pub(crate) fn unconfirmed(&self, conn: ConnectionId, channel: ChannelId) -> u32 {
        let Some(held) = self.persist.held.get(&(conn, channel)) else { return 0 };
        let confirms = held.iter().filter(|(_, effect)| matches!(effect, Effect::Confirm { .. }));
        confirms.count() as u32
    }

    pub(crate) fn mark(&self) -> Mark {
        Mark { effects: self.effects.len(), op_seq: self.persist.last_op_seq() }
    }

    /// Writes changed definitions, then holds what this entry point emitted: effects of channels
    /// already holding something queue behind it; the replies of a `command` that must wait for
    /// its ops (`replies_of`, see [`holds_replies`]) are held until they are durable.
    pub(crate) fn hold_after(&mut self, mark: Mark, replies_of: Option<(ConnectionId, ChannelId)>) {
        if !self.persist.enabled {
            return;
        }
        self.flush_definitions();
        let last = self.persist.last_op_seq();
        let holding = replies_of.filter(|_| last > mark.op_seq && last > self.persist.durable_through);
        if holding.is_none() && self.persist.held.is_empty() {
            return;
        }
        let emitted: Vec<Effect> = self.effects.drain(mark.effects..).collect();
        for effect in emitted {
            let key = channel_of(&effect);
            let queued = key.and_then(|k| self.persist.held.get(&k)).is_some_and(|q| !q.is_empty());
            match key {
                Some(k) if holding == Some(k) && (queued || !is_delivery(&effect)) => {
                    self.persist.held.entry(k).or_default().push_back((last, effect));
                }
                Some(k) if queued => {
                    // Behind an earlier held effect: released with or after it, in order.
                    self.persist.held.entry(k).or_default().push_back((0, effect));
                }
                _ => self.effects.push_back(effect),
            }
        }
    }

    /// A connection is gone: what was held for it will never be sent (unconfirmed is safe).
    pub(crate) fn forget_held(&mut self, conn: ConnectionId) {
        self.persist.held.retain(|(c, _), _| *c != conn);
    }
}

/// The channel whose replies wait for the ops `command` produced: a publish (its confirm), and
/// the declare/bind/delete/purge methods and tx.commit (their -ok). Acks, gets, consumes and
/// channel methods never wait: what they write (settles) costs nothing if lost but a redelivery.
/// The management API's synthetic connection never waits: it reads its replies within the job;
/// the HTTP answer waits instead, for the job's ops (`commits.rs`).
pub(crate) fn holds_replies(command: &Command) -> Option<(ConnectionId, ChannelId)> {
    use hourglass_wire::Method as M;
    if command.conn() == crate::admin::ADMIN_CONNECTION {
        return None;
    }
    match command {
        Command::Publish { conn, channel, .. } => Some((*conn, *channel)),
        Command::Method {
            conn,
            channel,
            method:
                M::ExchangeDeclare(_)
                | M::ExchangeDelete(_)
                | M::ExchangeBind(_)
                | M::ExchangeUnbind(_)
                | M::QueueDeclare(_)
                | M::QueueBind(_)
                | M::QueueUnbind(_)
                | M::QueuePurge(_)
                | M::QueueDelete(_)
                | M::TxCommit(_),
        } => Some((*conn, *channel)),
        _ => None,
    }
}

fn channel_of(effect: &Effect) -> Option<(ConnectionId, ChannelId)> {
    match effect {
        Effect::Send { conn, channel, .. }
        | Effect::Deliver { conn, channel, .. }
        | Effect::Confirm { conn, channel, .. }
        | Effect::ChannelError { conn, channel, .. }
        | Effect::Answer { conn, channel, .. }
        | Effect::TimedOut { conn, channel, .. } => Some((*conn, *channel)),
        Effect::ConnectionError { .. } | Effect::Blocked { .. } => None,
    }
}

fn is_delivery(effect: &Effect) -> bool {
    matches!(effect, Effect::Deliver { .. })
}
