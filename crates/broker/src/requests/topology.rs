//! Requests about vhosts, policies, permissions and the names of queues, exchanges and
//! bindings: what the HTTP API's definitions, vhost, policy and limit routes ask.

use std::sync::Arc;

use hourglass_wire::FieldTable;

use super::{sealed::Sealed, Question, Request};
use crate::admin::slices::{BindingKey, ExchangeKey};
use crate::admin::{BindingDetails, QueueDetails};
use crate::broker::Broker;
use crate::permissions::Permissions;
use crate::policy::{PolicyError, PolicyInfo, PolicyKind, PolicySpec};
use crate::time::Timestamp;

/// A vhost's tracing (the firehose), turned on or off.
pub enum Tracing {
    /// On, traced messages naming this node.
    On {
        node: String,
    },
    Off,
}

/// Adds vhost `name` (nothing when it exists), then turns its tracing on or off when `tracing`
/// says so: answers whether tracing changed (`true` when not asked to).
pub struct AddVhost {
    pub name: String,
    pub tracing: Option<Tracing>,
}

impl Sealed for AddVhost {}
impl Request for AddVhost {
    type Answer = bool;
    fn apply(self, broker: &mut Broker, _: Timestamp) -> bool {
        broker.add_vhost(&self.name);
        match self.tracing {
            Some(Tracing::On { node }) => broker.trace_on(&self.name, &node),
            Some(Tracing::Off) => broker.trace_off(&self.name),
            None => true,
        }
    }
}

/// Deletes vhost `name` with its exchanges, queues and bindings: whether it was there.
pub struct DeleteVhost {
    pub name: String,
}

impl Sealed for DeleteVhost {}
impl Request for DeleteVhost {
    type Answer = bool;
    fn apply(self, broker: &mut Broker, now: Timestamp) -> bool {
        broker.delete_vhost(&self.name, now)
    }
}

/// Sets or lifts vhost `vhost`'s `max-queues`: whether the vhost is there.
pub struct SetVhostMaxQueues {
    pub vhost: String,
    pub max_queues: Option<u64>,
}

impl Sealed for SetVhostMaxQueues {}
impl Request for SetVhostMaxQueues {
    type Answer = bool;
    fn apply(self, broker: &mut Broker, _: Timestamp) -> bool {
        broker.set_vhost_max_queues(&self.vhost, self.max_queues)
    }
}

/// Hands `user`'s permissions in `vhost` to the user's open connections there.
pub struct SetPermissions {
    pub user: String,
    pub vhost: String,
    pub permissions: Arc<Permissions>,
}

impl Sealed for SetPermissions {}
impl Request for SetPermissions {
    type Answer = ();
    fn apply(self, broker: &mut Broker, _: Timestamp) {
        broker.set_permissions(&self.user, &self.vhost, self.permissions)
    }
}

/// Creates or replaces a policy: whether it is new.
pub struct SetPolicy {
    pub kind: PolicyKind,
    pub vhost: String,
    pub spec: PolicySpec,
}

impl Sealed for SetPolicy {}
impl Request for SetPolicy {
    type Answer = Result<bool, PolicyError>;
    fn apply(self, broker: &mut Broker, now: Timestamp) -> Self::Answer {
        broker.set_policy(self.kind, &self.vhost, self.spec, now)
    }
}

/// Removes a policy.
pub struct ClearPolicy {
    pub kind: PolicyKind,
    pub vhost: String,
    pub name: String,
}

impl Sealed for ClearPolicy {}
impl Request for ClearPolicy {
    type Answer = Result<(), PolicyError>;
    fn apply(self, broker: &mut Broker, now: Timestamp) -> Self::Answer {
        broker.clear_policy(self.kind, &self.vhost, &self.name, now)
    }
}

/// The policies of `kind`, of one vhost or all.
pub struct ListPolicies {
    pub kind: PolicyKind,
    pub vhost: Option<String>,
}

impl Sealed for ListPolicies {}
impl Question for ListPolicies {
    type Answer = Vec<PolicyInfo>;
    fn answer(self, broker: &Broker, _: Timestamp) -> Vec<PolicyInfo> {
        broker.list_policies(self.kind, self.vhost.as_deref())
    }
}

/// The names of the broker's vhosts.
pub struct VhostNames;

impl Sealed for VhostNames {}
impl Question for VhostNames {
    type Answer = Vec<String>;
    fn answer(self, broker: &Broker, _: Timestamp) -> Vec<String> {
        broker.vhost_names()
    }
}

/// The vhosts whose tracing is on.
pub struct TracedVhosts;

impl Sealed for TracedVhosts {}
impl Question for TracedVhosts {
    type Answer = Vec<String>;
    fn answer(self, broker: &Broker, _: Timestamp) -> Vec<String> {
        broker.traced_vhosts()
    }
}

/// Whether declaring the queues `names` in `vhost` would go over its `max-queues`: its limit,
/// the queues it holds and those the names would add.
pub struct WouldExceedQueueLimit {
    pub vhost: String,
    pub names: Vec<String>,
}

impl Sealed for WouldExceedQueueLimit {}
impl Question for WouldExceedQueueLimit {
    type Answer = Option<(u64, u64, u64)>;
    fn answer(self, broker: &Broker, _: Timestamp) -> Self::Answer {
        broker.would_exceed_queue_limit(&self.vhost, &self.names)
    }
}

/// One queue's row, as the HTTP API lists it.
pub struct QueueDetailsNamed {
    pub vhost: String,
    pub name: String,
}

impl Sealed for QueueDetailsNamed {}
impl Question for QueueDetailsNamed {
    type Answer = Option<QueueDetails>;
    fn answer(self, broker: &Broker, _: Timestamp) -> Option<QueueDetails> {
        broker.queue_details_named(&self.vhost, &self.name)
    }
}

/// A queue's arguments as declared or last changed (`None`: no such queue), without building its
/// row: what the SQS endpoint reads its settings from on every send and receive.
pub struct QueueArguments {
    pub vhost: String,
    pub name: String,
}

impl Sealed for QueueArguments {}
impl Question for QueueArguments {
    type Answer = Option<FieldTable>;
    fn answer(self, broker: &Broker, _: Timestamp) -> Option<FieldTable> {
        queue_arguments(broker, &self.vhost, &self.name)
    }
}

/// Queue `name`'s arguments in `vhost`, if there is such a queue.
pub(super) fn queue_arguments(broker: &Broker, vhost: &str, name: &str) -> Option<FieldTable> {
    let id = broker.vhosts.get(vhost)?.queue_id(name)?;
    broker.queues.get(&id).map(|queue| queue.spec.arguments.clone())
}

/// How many messages are ready in a queue (`None`: no such queue).
pub struct ReadyCount {
    pub vhost: String,
    pub name: String,
}

impl Sealed for ReadyCount {}
impl Question for ReadyCount {
    type Answer = Option<u64>;
    fn answer(self, broker: &Broker, _: Timestamp) -> Option<u64> {
        broker.queue_stats(&self.vhost, &self.name).map(|s| s.messages_ready as u64)
    }
}

/// The names of the queues of one vhost or all, a group per vhost.
pub struct QueueNameGroups {
    pub vhost: Option<String>,
}

impl Sealed for QueueNameGroups {}
impl Question for QueueNameGroups {
    type Answer = Vec<crate::admin::QueueNames>;
    fn answer(self, broker: &Broker, _: Timestamp) -> Self::Answer {
        broker.queue_names(self.vhost.as_deref())
    }
}

/// The keys of the exchanges of one vhost or all.
pub struct ExchangeKeys {
    pub vhost: Option<String>,
}

impl Sealed for ExchangeKeys {}
impl Question for ExchangeKeys {
    type Answer = Vec<ExchangeKey>;
    fn answer(self, broker: &Broker, _: Timestamp) -> Vec<ExchangeKey> {
        broker.exchange_keys(self.vhost.as_deref())
    }
}

/// The queues' names and the declared bindings' keys, of one vhost or all, read together (a
/// definitions export).
pub struct DeclaredBindings {
    pub vhost: Option<String>,
}

impl Sealed for DeclaredBindings {}
impl Question for DeclaredBindings {
    type Answer = (Vec<crate::admin::QueueNames>, Vec<BindingKey>);
    fn answer(self, broker: &Broker, _: Timestamp) -> Self::Answer {
        let vhost = self.vhost.as_deref();
        (broker.queue_names(vhost), broker.declared_binding_keys(vhost))
    }
}

/// The bindings to one queue (`destination_is_queue`) or exchange.
pub struct BindingsTo {
    pub vhost: String,
    pub destination_is_queue: bool,
    pub destination: String,
}

impl Sealed for BindingsTo {}
impl Question for BindingsTo {
    type Answer = Vec<BindingDetails>;
    fn answer(self, broker: &Broker, _: Timestamp) -> Vec<BindingDetails> {
        broker.bindings_to(&self.vhost, self.destination_is_queue, &self.destination)
    }
}
