//! Requests about the node as a whole: its message totals and counts (for the overview, the
//! rates sampler and Prometheus), closing connections, writing the identity store's changes,
//! and the store op sequence a sender waits on.

use super::{sealed::Sealed, Question, Request};
use crate::admin::slices::ExchangeKey;
use crate::api::ConnectionId;
use crate::broker::Broker;
use crate::churn::ChurnStats;
use crate::message_stats::{MessageSizes, MessageStats};
use crate::persist::CatalogChange;
use crate::time::Timestamp;

/// The node's message totals, as [`NodeTotals`] answers.
pub struct Totals {
    pub messages: MessageStats,
    pub sizes: MessageSizes,
    pub churn: ChurnStats,
    pub vhosts: Vec<String>,
}

/// The node's message counts and sizes, its churn, and its vhosts' names, read together.
pub struct NodeTotals;

impl Sealed for NodeTotals {}
impl Question for NodeTotals {
    type Answer = Totals;
    fn answer(self, broker: &Broker, _: Timestamp) -> Totals {
        Totals {
            messages: broker.message_stats(),
            sizes: broker.message_sizes(),
            churn: broker.churn_stats(),
            vhosts: broker.vhost_names(),
        }
    }
}

/// Every exchange with its number of bindings, counted without building them.
pub struct BindingCounts;

impl Sealed for BindingCounts {}
impl Question for BindingCounts {
    type Answer = Vec<(ExchangeKey, usize)>;
    fn answer(self, broker: &Broker, _: Timestamp) -> Self::Answer {
        broker.binding_counts()
    }
}

/// How many client connections are open.
pub struct ConnectionCount;

impl Sealed for ConnectionCount {}
impl Question for ConnectionCount {
    type Answer = usize;
    fn answer(self, broker: &Broker, _: Timestamp) -> usize {
        broker.connection_keys().len()
    }
}

/// Closes connections `ids` (those still open) with `reason`, as an operator does.
pub struct CloseConnections {
    pub ids: Vec<ConnectionId>,
    pub reason: String,
}

impl Sealed for CloseConnections {}
impl Request for CloseConnections {
    type Answer = ();
    fn apply(self, broker: &mut Broker, now: Timestamp) {
        for id in self.ids {
            broker.close_connection(id, &self.reason, now);
        }
    }
}

/// Writes changes of the identity store (users, vhosts, permissions) with the definitions.
pub struct StoreIdentity {
    pub changes: Vec<CatalogChange>,
}

impl Sealed for StoreIdentity {}
impl Request for StoreIdentity {
    type Answer = ();
    fn apply(self, broker: &mut Broker, _: Timestamp) {
        broker.store_identity(self.changes)
    }
}

/// The sequence number the broker's next store op will get: what
/// [`Job::when_durable_since`](super::Job::when_durable_since) takes.
pub struct NextOpSeq;

impl Sealed for NextOpSeq {}
impl Question for NextOpSeq {
    type Answer = u64;
    fn answer(self, broker: &Broker, _: Timestamp) -> u64 {
        broker.op_seq() + 1
    }
}
