//! Churn counters: connections, channels and queues opened, closed, declared, created and
//! deleted since the broker started, as RabbitMQ's `connection_churn_metrics` counts them
//! (Prometheus `rabbitmq_connections_opened_total` and friends, the overview's `churn_rates`).
//!
//! Plain `u64` increments where the event happens; the management API's own connection (the
//! synthetic one its jobs run on) is not counted, as RabbitMQ's HTTP API opens none.
//!
//! - `queues_declared`: every successful non-passive queue.declare (a redeclare too);
//! - `queues_created`: queues that came into being (declare, HTTP API, definitions import);
//! - `queues_deleted`: queues that went away, whatever the cause (queue.delete, exclusive owner
//!   gone, auto-delete, x-expires, HTTP API).

use crate::admin::ADMIN_CONNECTION;
use crate::api::ConnectionId;
use crate::broker::Broker;

/// Counts since start; never reset.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ChurnStats {
    pub connections_opened: u64,
    pub connections_closed: u64,
    pub channels_opened: u64,
    pub channels_closed: u64,
    pub queues_declared: u64,
    pub queues_created: u64,
    pub queues_deleted: u64,
}

impl ChurnStats {
    pub(crate) fn connection_opened(&mut self, conn: ConnectionId) {
        self.connections_opened += u64::from(conn != ADMIN_CONNECTION);
    }

    pub(crate) fn connection_closed(&mut self, conn: ConnectionId) {
        self.connections_closed += u64::from(conn != ADMIN_CONNECTION);
    }

    pub(crate) fn channel_opened(&mut self, conn: ConnectionId) {
        self.channels_opened += u64::from(conn != ADMIN_CONNECTION);
    }

    pub(crate) fn channel_closed(&mut self, conn: ConnectionId) {
        self.channels_closed += u64::from(conn != ADMIN_CONNECTION);
    }
}

impl Broker {
    /// Connections, channels and queues opened and closed since start.
    pub fn churn_stats(&self) -> ChurnStats {
        self.stats.churn
    }
}
