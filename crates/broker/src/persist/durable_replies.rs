//! Confirms mean fsynced (issue 6): a publisher confirm, a declare-ok of a durable definition or a
//! tx.commit-ok is a reply that stands for store ops, and goes once they are durable.
//!
//! Each such reply is handed to the outbox with the op it waits for ([`Broker::reply_when_durable`]),
//! where it holds back what follows on its channel (`outbox.rs`); the store's report releases
//! them ([`Broker::handle_persisted`]). An entry point that stored nothing replies at once.

use crate::admin::ADMIN_CONNECTION;
use crate::api::{ChannelId, ConnectionId, Effect};
use crate::broker::Broker;
use crate::time::Timestamp;

impl Broker {
    /// The driver reports every op up to `op_seq` durable: held replies whose ops are all
    /// durable are released, in order per channel, and waiting requests are noticed.
    pub fn handle_persisted(&mut self, op_seq: u64, _now: Timestamp) {
        let persist = &mut self.persist;
        persist.durable_through = persist.durable_through.max(op_seq);
        self.outbox.release(persist.durable_through);
        self.notify_commits();
    }

    /// Effects waiting for the store (for statistics and tests).
    pub fn held_effects(&self) -> usize {
        self.outbox.held_len()
    }

    /// Publisher confirms of a channel still waiting for the store: RabbitMQ's
    /// `messages_unconfirmed`.
    pub(crate) fn unconfirmed(&self, conn: ConnectionId, channel: ChannelId) -> u32 {
        self.outbox.unconfirmed(conn, channel)
    }

    /// `method` on the channel as a reply that stands for what this entry point stored
    /// ([`Broker::reply_when_durable`]).
    pub(crate) fn send_when_durable(
        &mut self,
        conn: ConnectionId,
        channel: ChannelId,
        method: impl Into<hourglass_wire::Method>,
    ) {
        self.reply_when_durable(Effect::send(conn, channel, method, None));
    }

    /// A reply that stands for the store ops this entry point emitted (the changed definitions
    /// are written first): held until they are durable, or sent now (behind its channel's held
    /// replies) when there are none or they are durable already. The management API's
    /// synthetic connection never waits: it reads its replies within the job, and the HTTP
    /// answer waits instead, for the job's ops (`commits.rs`).
    pub(crate) fn reply_when_durable(&mut self, effect: Effect) {
        if !self.persist.enabled || effect.conn() == ADMIN_CONNECTION {
            return self.outbox.push(effect);
        }
        self.flush_definitions();
        let persist = &self.persist;
        let last = persist.last_op_seq();
        if last >= persist.entry_first_op && last > persist.durable_through {
            self.outbox.hold(effect, last);
        } else {
            self.outbox.push(effect);
        }
    }

    /// A connection is gone: what was held for it will never be sent (unconfirmed is safe).
    pub(crate) fn forget_held(&mut self, conn: ConnectionId) {
        self.outbox.forget(conn);
    }
}
