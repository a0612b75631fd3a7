//! Setting, clearing and listing policies and operator policies on the management API's behalf
//! (semantics §6). A change applies at once to the vhost's queues and exchanges (`policy/apply.rs`)
//! and is written with the durable definitions.

use crate::broker::Broker;
use crate::persist::Changed;
use crate::policy::{Policy, PolicyError, PolicyInfo, PolicyKind, PolicySpec};
use crate::time::Timestamp;

impl Broker {
    /// Creates or replaces policy `spec.name` of `kind` in `vhost`; returns whether it is new.
    pub fn set_policy(
        &mut self,
        kind: PolicyKind,
        vhost: &str,
        spec: PolicySpec,
        now: Timestamp,
    ) -> Result<bool, PolicyError> {
        let v = self.vhosts.get_mut(vhost).ok_or_else(|| PolicyError::NoVhost(vhost.to_owned()))?;
        let policy = Policy::new(kind, spec).map_err(PolicyError::Invalid)?;
        let name = policy.spec.name.clone();
        let created = v.policies.insert(kind, policy).map_err(PolicyError::Invalid)?;
        self.policies_changed(Changed::Policy(vhost.to_owned(), kind, name), vhost, now);
        Ok(created)
    }

    /// Removes policy `name` of `kind` from `vhost`; the objects it applied to fall back to the
    /// next matching policy, or to their own arguments.
    pub fn clear_policy(
        &mut self,
        kind: PolicyKind,
        vhost: &str,
        name: &str,
        now: Timestamp,
    ) -> Result<(), PolicyError> {
        let v = self.vhosts.get_mut(vhost).ok_or_else(|| PolicyError::NoVhost(vhost.to_owned()))?;
        if v.policies.remove(kind, name).is_none() {
            return Err(PolicyError::NotFound { vhost: vhost.to_owned(), name: name.to_owned() });
        }
        self.policies_changed(Changed::Policy(vhost.to_owned(), kind, name.to_owned()), vhost, now);
        Ok(())
    }

    /// The policies of `kind`, of one vhost or all, sorted by vhost and name (as RabbitMQ's API).
    pub fn list_policies(&self, kind: PolicyKind, vhost: Option<&str>) -> Vec<PolicyInfo> {
        let mut names: Vec<&String> =
            self.vhosts.keys().filter(|v| vhost.is_none_or(|only| only == *v)).collect();
        names.sort();
        names
            .into_iter()
            .flat_map(|v| {
                self.vhosts[v]
                    .policies
                    .of(kind)
                    .values()
                    .map(|p| PolicyInfo { vhost: v.clone(), spec: p.spec.clone() })
            })
            .collect()
    }

    /// Re-applies a vhost's policies, carries out what that dead-letters, and writes the
    /// definitions (this is an entry point of its own, like `handle_timeout`).
    fn policies_changed(&mut self, changed: Changed, vhost: &str, now: Timestamp) {
        self.definition_changed(changed);
        self.reapply_policies(vhost, now);
        self.run_dead_letters(now);
        self.flush_definitions();
    }
}
