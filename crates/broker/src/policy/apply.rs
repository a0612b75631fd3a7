//! Re-matching queues and exchanges against their vhost's policies: when a queue or exchange is
//! created (declared or restored) and when a policy is set or cleared (RabbitMQ applies a change
//! to existing objects at once).
//!
//! A queue whose effective settings change takes the new values for what happens next, as
//! RabbitMQ's classic queues do (measured on 3.10):
//! - a new `message-ttl` applies to messages that become ready afterwards; messages already
//!   ready keep the deadline they got on entering (RabbitMQ stamps the expiry at enqueue);
//! - a lower `max-length` / `max-length-bytes` drops (dead-letters, reason `maxlen`) the oldest
//!   ready messages at once under `overflow` drop-head; reject-publish keeps them and refuses
//!   publishes until the queue is below the limit;
//! - a changed `expires` restarts the unused-queue timer from now (RabbitMQ re-arms it);
//! - dead-lettering, delivery limit and back-off settings apply to the next message they concern;
//!   `delivery-delay` and `visibility-timeout` to messages entering and deliveries made afterwards.

use super::{merge, Object, PolicyKind};
use crate::broker::Broker;
use crate::queue::QueueId;
use crate::time::Timestamp;

impl Broker {
    /// Matches every queue and exchange of `vhost` against its policies again.
    pub(crate) fn reapply_policies(&mut self, vhost: &str, now: Timestamp) {
        let Some(v) = self.vhosts.get(vhost) else { return };
        let mut ids: Vec<QueueId> = v.queues.values().copied().collect();
        ids.sort_unstable();
        for id in ids {
            self.apply_queue_policies(id, now);
        }
        let Some(v) = self.vhosts.get_mut(vhost) else { return };
        let names: Vec<_> = v.exchanges.keys().cloned().collect();
        for name in names {
            self.apply_exchange_policies(vhost, &name);
        }
    }

    /// Matches queue `id` against its vhost's policies and makes the merge its effective settings.
    pub(crate) fn apply_queue_policies(&mut self, id: QueueId, now: Timestamp) {
        let Some(queue) = self.queues.get(&id) else { return };
        let Some(vhost) = self.vhosts.get(&queue.vhost) else { return };
        let object = Object::Queue(queue.args.queue_type);
        let name = queue.name().as_bytes();
        let policy = vhost.policies.best(PolicyKind::User, object, name);
        let operator = vhost.policies.best(PolicyKind::Operator, object, name);
        let settings =
            merge::effective(&queue.args.declared, policy.map(|p| &p.queue), operator.map(|p| &p.queue));
        let mut args = queue.args.clone();
        args.apply(&settings);
        let names = (policy.map(|p| p.spec.name.clone()), operator.map(|p| p.spec.name.clone()));
        let Some(queue) = self.queues.get_mut(&id) else { return };
        (queue.policy, queue.operator_policy) = names;
        if args == queue.args {
            return;
        }
        if args.expires_ms != queue.args.expires_ms {
            queue.touch(now);
        }
        queue.args = args;
        // Drops what a lower max-length no longer allows, and refiles the queue's deadline.
        self.run_queue(id, now);
    }

    /// Matches exchange `name` of `vhost` against the vhost's policies.
    pub(crate) fn apply_exchange_policies(&mut self, vhost: &str, name: &hourglass_wire::ShortStr) {
        let Some(v) = self.vhosts.get_mut(vhost) else { return };
        let Some(exchange) = v.exchanges.get_mut(name) else { return };
        let policy = v.policies.best(PolicyKind::User, Object::Exchange, name.as_bytes());
        let operator = v.policies.best(PolicyKind::Operator, Object::Exchange, name.as_bytes());
        exchange.apply_policies(policy, operator);
    }
}
