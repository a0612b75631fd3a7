//! Which durable definitions an entry point changed, and what the catalog is told at its end.
//! Each [`Changed`] names one definition; [`Broker::flush_definitions`] looks at it as it stands
//! then and writes it (a put of its value) or its absence (a delete), so a declare, bind or
//! delete costs one small record however many definitions exist (`catalog.rs`). Only durable
//! definitions are marked: a transient queue's declare writes nothing and waits for nothing.

use bytes::Bytes;
use hourglass_wire::ShortStr;

use super::catalog::{
    binding_key, exchange_key, next_queue_id_key, next_queue_id_value, policy_key, queue_key, vhost_prefix,
    CatalogChange,
};
use super::definitions::{
    encode_binding, encode_exchange, encode_policy, encode_queue, is_built_in, BindingDefinition,
};
use super::StoreOp;
use crate::broker::Broker;
use crate::exchange::{Binding, Destination};
use crate::methods::Removed;
use crate::policy::PolicyKind;
use crate::queue::QueueId;

/// A durable definition that may have changed (module doc).
#[derive(Clone, Debug)]
pub(crate) enum Changed {
    Vhost(String),
    Exchange(String, ShortStr),
    Queue(String, ShortStr),
    Binding(String, BindingDefinition),
    Policy(String, PolicyKind, String),
}

/// A queue that was just removed from the broker, for naming the bindings that went with it.
pub(crate) struct GoneQueue {
    pub id: QueueId,
    pub name: ShortStr,
    pub persisted: bool,
}

impl Broker {
    /// Notes that `changed` may differ from what the catalog holds; written at the end of the
    /// entry point.
    pub(crate) fn definition_changed(&mut self, changed: Changed) {
        if self.persist.enabled {
            self.persist.changed.push(changed);
        }
    }

    /// A durable binding of `vhost` was added or removed: `source` to the queue or exchange named
    /// `destination`.
    pub(crate) fn binding_changed(
        &mut self,
        vhost: &str,
        source: &ShortStr,
        to_queue: bool,
        destination: &ShortStr,
        binding: &Binding,
    ) {
        let definition = BindingDefinition {
            source: source.clone(),
            to_queue,
            destination: destination.clone(),
            routing_key: binding.routing_key.clone(),
            arguments: binding.arguments.clone(),
        };
        self.definition_changed(Changed::Binding(vhost.to_owned(), definition));
    }

    /// Marks what a removal in `vhost` took with it: durable exchanges, and bindings whose both
    /// ends were durable (`gone`: the queue removed just before, no longer in the broker).
    pub(crate) fn mark_removed(&mut self, vhost: &str, removed: Removed, gone: Option<&GoneQueue>) {
        if !self.persist.enabled {
            return;
        }
        let was_durable =
            |name: &ShortStr| removed.exchanges.iter().any(|(n, durable)| n == name && *durable);
        let mut marks = Vec::new();
        for (source, source_durable, binding) in &removed.bindings {
            if !source_durable {
                continue;
            }
            let (to_queue, destination) = match &binding.destination {
                Destination::Queue(id) => {
                    let (name, persisted) = match (self.queues.get(id), gone) {
                        (Some(queue), _) => (queue.name().clone(), queue.is_persisted()),
                        (None, Some(g)) if g.id == *id => (g.name.clone(), g.persisted),
                        (None, _) => continue,
                    };
                    if !persisted {
                        continue;
                    }
                    (true, name)
                }
                Destination::Exchange(name) => {
                    let durable = self
                        .vhosts
                        .get(vhost)
                        .and_then(|v| v.exchanges.get(name))
                        .map_or_else(|| was_durable(name), |x| x.spec.durable);
                    if !durable {
                        continue;
                    }
                    (false, name.clone())
                }
            };
            marks.push((source.clone(), to_queue, destination, binding.clone()));
        }
        for (source, to_queue, destination, binding) in marks {
            self.binding_changed(vhost, &source, to_queue, &destination, &binding);
        }
        for (name, durable) in removed.exchanges {
            if durable {
                self.definition_changed(Changed::Exchange(vhost.to_owned(), name));
            }
        }
    }

    /// Stores identity records (users, vhost records, permissions: `hourglass-identity`'s
    /// catalog entries, keys under [`super::IDENTITY_SCOPE`]) in order with every other store op,
    /// so they reach the disk through the store thread, in its group commit, and in a cluster
    /// are on a majority before a job waiting for them is told (ADR 0008's one owner). Nothing
    /// without persistence.
    pub fn store_identity(&mut self, changes: Vec<CatalogChange>) {
        if !self.persist.enabled {
            return;
        }
        for change in changes {
            self.persist.push(StoreOp::Catalog(change));
        }
    }

    /// Emits the catalog changes for every definition marked since the last flush.
    pub(crate) fn flush_definitions(&mut self) {
        if self.persist.changed.is_empty() {
            return;
        }
        let changed = std::mem::take(&mut self.persist.changed);
        let mut written = std::collections::HashSet::new();
        for mark in changed {
            for change in self.resolve(&mark) {
                let key = match &change {
                    CatalogChange::Put { key, .. } | CatalogChange::Delete { key } => key.clone(),
                    CatalogChange::DeletePrefix { prefix } => prefix.clone(),
                };
                if written.insert(key) {
                    self.persist.push(StoreOp::Catalog(change));
                }
            }
        }
    }

    /// What the catalog must hold for `mark` now.
    fn resolve(&self, mark: &Changed) -> Vec<CatalogChange> {
        let put = |key: Bytes, value: Bytes| CatalogChange::Put { key, value };
        let delete = |key: Bytes| CatalogChange::Delete { key };
        match mark {
            // A vhost's own record is the management store's (`catalog.rs`); a deleted one takes
            // everything stored under it.
            Changed::Vhost(name) => match self.vhosts.contains_key(name) {
                true => Vec::new(),
                false => vec![CatalogChange::DeletePrefix { prefix: vhost_prefix(name).freeze() }],
            },
            Changed::Exchange(vhost, name) => {
                let key = exchange_key(vhost, name);
                let spec = self.vhosts.get(vhost).and_then(|v| v.exchanges.get(name)).map(|x| &x.spec);
                match spec.filter(|spec| spec.durable && !is_built_in(&spec.name)) {
                    Some(spec) => vec![put(key, encode_exchange(spec))],
                    None => vec![delete(key)],
                }
            }
            Changed::Queue(vhost, name) => {
                let key = queue_key(vhost, name);
                let id = self.vhosts.get(vhost).and_then(|v| v.queues.get(name));
                match id.and_then(|id| self.queues.get(id)).filter(|q| q.is_persisted()) {
                    Some(q) => vec![
                        put(key, encode_queue(q.id, q.name(), q.spec.auto_delete, &q.spec.arguments)),
                        put(next_queue_id_key(), next_queue_id_value(self.queues.next_id())),
                    ],
                    None => vec![delete(key)],
                }
            }
            Changed::Binding(vhost, definition) => {
                let key = binding_key(vhost, definition);
                match self.holds_durable_binding(vhost, definition) {
                    true => vec![put(key, encode_binding(definition))],
                    false => vec![delete(key)],
                }
            }
            Changed::Policy(vhost, kind, name) => {
                let key = policy_key(vhost, *kind, name);
                match self.vhosts.get(vhost).and_then(|v| v.policies.of(*kind).get(name.as_str())) {
                    Some(policy) => vec![put(key, encode_policy(&policy.spec))],
                    None => vec![delete(key)],
                }
            }
        }
    }

    /// Whether `definition` is one of `vhost`'s bindings now, with both ends durable.
    fn holds_durable_binding(&self, vhost: &str, definition: &BindingDefinition) -> bool {
        let Some(v) = self.vhosts.get(vhost) else { return false };
        let Some(source) = v.exchanges.get(&definition.source).filter(|x| x.spec.durable) else {
            return false;
        };
        let destination = if definition.to_queue {
            let id = v.queues.get(&definition.destination);
            match id.filter(|id| self.queues.get(id).is_some_and(|q| q.is_persisted())) {
                Some(id) => Destination::Queue(*id),
                None => return false,
            }
        } else if v.exchanges.get(&definition.destination).is_some_and(|x| x.spec.durable) {
            Destination::Exchange(definition.destination.clone())
        } else {
            return false;
        };
        source.bindings().contains(&Binding {
            destination,
            routing_key: definition.routing_key.clone(),
            arguments: definition.arguments.clone(),
        })
    }
}
