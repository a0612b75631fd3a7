//! exchange.declare / delete / bind / unbind.

use hourglass_wire::{
    ExchangeBind, ExchangeBindOk, ExchangeDeclare, ExchangeDeclareOk, ExchangeDelete, ExchangeDeleteOk,
    ExchangeUnbind, ExchangeUnbindOk, ShortStr,
};

use crate::api::{AmqpError, ChannelId, ConnectionId};
use crate::broker::Broker;
use crate::errors;
use crate::exchange::{delayed, Binding, Destination, Exchange, ExchangeKind, ExchangeSpec};
use crate::permissions::{Access, Resource};
use crate::persist::Changed;
use crate::vhost::VHost;

impl Broker {
    pub(super) fn exchange_declare(
        &mut self,
        conn: ConnectionId,
        ch: ChannelId,
        m: &ExchangeDeclare,
    ) -> Result<(), AmqpError> {
        let Some(vhost_name) = self.vhost_of(conn) else { return Ok(()) };
        if m.passive {
            if m.exchange.is_empty() {
                return Err(errors::default_exchange_refused());
            }
            if !self.vhost(&vhost_name)?.exchanges.contains_key(&m.exchange) {
                return Err(errors::no_exchange(&m.exchange, &vhost_name));
            }
        } else {
            // rabbit_channel: the type is checked first, then the default exchange. An unknown type
            // is a channel error (406) as since RabbitMQ 3.12.14/3.13.3, the version we announce;
            // 3.10 closed the whole connection (503) for it.
            let delayed = m.kind.as_bytes() == delayed::TYPE_NAME.as_bytes();
            let kind = if delayed {
                delayed::routing_kind(&m.arguments)?
            } else {
                // rabbit_exchange:check_type says "unknown" for a name it has never seen (every
                // name a client makes up); its "invalid" needs the name to be an Erlang atom.
                ExchangeKind::parse(m.kind.as_bytes()).ok_or_else(|| {
                    errors::precondition_failed(format!("unknown exchange type '{}'", m.kind))
                })?
            };
            if m.exchange.is_empty() {
                return Err(errors::default_exchange_refused());
            }
            self.check_access(conn, Access::Configure, Resource::Exchange, &m.exchange.as_str())?;
            let spec = ExchangeSpec {
                name: m.exchange.clone(),
                kind,
                delayed,
                durable: m.durable,
                auto_delete: m.auto_delete,
                internal: m.internal,
                arguments: m.arguments.clone(),
            };
            match self.vhost(&vhost_name)?.exchanges.get(&m.exchange) {
                Some(existing) => existing.check_equivalent(&spec, &vhost_name)?,
                None => {
                    check_name("exchange", &m.exchange)?;
                    self.check_alternate_access(conn, &spec)?;
                    let vhost = self.vhost_mut(&vhost_name)?;
                    let durable = spec.durable;
                    vhost.exchanges.insert(spec.name.clone(), Exchange::new(spec));
                    self.apply_exchange_policies(&vhost_name, &m.exchange);
                    if durable {
                        self.definition_changed(Changed::Exchange(vhost_name.clone(), m.exchange.clone()));
                    }
                }
            }
        }
        if !m.nowait {
            self.send_when_durable(conn, ch, ExchangeDeclareOk {});
        }
        Ok(())
    }

    pub(super) fn exchange_delete(
        &mut self,
        conn: ConnectionId,
        ch: ChannelId,
        m: &ExchangeDelete,
    ) -> Result<(), AmqpError> {
        let Some(vhost_name) = self.vhost_of(conn) else { return Ok(()) };
        if m.exchange.is_empty() {
            return Err(errors::default_exchange_refused());
        }
        if m.exchange.as_bytes().starts_with(b"amq.") {
            return Err(errors::access_refused(format!(
                "deletion of system exchange '{}' in vhost '{vhost_name}' not allowed",
                m.exchange
            )));
        }
        self.check_access(conn, Access::Configure, Resource::Exchange, &m.exchange.as_str())?;
        let vhost = self.vhost_mut(&vhost_name)?;
        // Deleting an exchange that does not exist succeeds (RabbitMQ 3.x: delete is idempotent).
        if let Some(exchange) = vhost.exchanges.get(&m.exchange) {
            // RabbitMQ counts only bindings with the exchange as source.
            if m.if_unused && exchange.has_bindings() {
                return Err(errors::precondition_failed(format!(
                    "exchange '{}' in vhost '{vhost_name}' in use",
                    m.exchange
                )));
            }
            let mut removed = Removed::default();
            remove_exchange(vhost, &m.exchange, &mut removed);
            self.mark_removed(&vhost_name, removed, None);
        }
        if !m.nowait {
            self.send_when_durable(conn, ch, ExchangeDeleteOk {});
        }
        Ok(())
    }

    pub(super) fn exchange_bind(
        &mut self,
        conn: ConnectionId,
        ch: ChannelId,
        m: &ExchangeBind,
    ) -> Result<(), AmqpError> {
        let Some(vhost_name) = self.vhost_of(conn) else { return Ok(()) };
        self.check_binding_access(conn, &m.source, Resource::Exchange, &m.destination, &m.routing_key)?;
        let vhost = self.vhost_mut(&vhost_name)?;
        let binding =
            exchange_binding(vhost, &vhost_name, &m.source, &m.destination, &m.routing_key, &m.arguments)?;
        let durable = self.is_durable_binding(&vhost_name, &m.source, &binding.destination);
        if durable {
            self.binding_changed(&vhost_name, &m.source, false, &m.destination, &binding);
        }
        if let Some(source) = self.vhost_mut(&vhost_name)?.exchanges.get_mut(&m.source) {
            source.bind(binding);
        }
        if !m.nowait {
            self.send_when_durable(conn, ch, ExchangeBindOk {});
        }
        Ok(())
    }

    /// Unbinding what is not bound, or from or to what does not exist, succeeds, as in RabbitMQ.
    pub(super) fn exchange_unbind(
        &mut self,
        conn: ConnectionId,
        ch: ChannelId,
        m: &ExchangeUnbind,
    ) -> Result<(), AmqpError> {
        let Some(vhost_name) = self.vhost_of(conn) else { return Ok(()) };
        self.check_binding_access(conn, &m.source, Resource::Exchange, &m.destination, &m.routing_key)?;
        let binding = Binding {
            destination: Destination::Exchange(m.destination.clone()),
            routing_key: m.routing_key.clone(),
            arguments: m.arguments.clone(),
        };
        let mut removed = Removed::default();
        unbind_from(self.vhost_mut(&vhost_name)?, &m.source, &binding, &mut removed);
        self.mark_removed(&vhost_name, removed, None);
        if !m.nowait {
            self.send_when_durable(conn, ch, ExchangeUnbindOk {});
        }
        Ok(())
    }

    /// rabbit_channel's binding checks, in its order: write on the destination, neither end the
    /// default exchange, read on the source, then (a topic source) read on the binding key.
    pub(super) fn check_binding_access(
        &self,
        conn: ConnectionId,
        source: &ShortStr,
        destination_kind: Resource,
        destination: &ShortStr,
        routing_key: &ShortStr,
    ) -> Result<(), AmqpError> {
        self.check_access(conn, Access::Write, destination_kind, &destination.as_str())?;
        let default_destination = destination_kind == Resource::Exchange && destination.is_empty();
        if source.is_empty() || default_destination {
            return Err(errors::default_exchange_refused());
        }
        self.check_access(conn, Access::Read, Resource::Exchange, &source.as_str())?;
        self.check_topic_access(conn, Access::Read, source, &routing_key.as_str())
    }

    /// A new exchange with an `alternate-exchange` needs read on itself and write on the AE.
    fn check_alternate_access(&self, conn: ConnectionId, spec: &ExchangeSpec) -> Result<(), AmqpError> {
        let Some(alternate) = spec.arguments.get("alternate-exchange") else { return Ok(()) };
        let Some(alternate) = alternate.as_bytes() else { return Ok(()) };
        self.check_access(conn, Access::Read, Resource::Exchange, &spec.name.as_str())?;
        self.check_access(conn, Access::Write, Resource::Exchange, &String::from_utf8_lossy(alternate))
    }

    /// The vhost `name`, to read: a redeclare or a passive declare leaves the vhosts' generation
    /// as it is, so no connection's cached route goes stale (`route_cache.rs`).
    pub(crate) fn vhost(&self, name: &str) -> Result<&VHost, AmqpError> {
        self.vhosts.get(name).ok_or_else(|| errors::no_vhost(name))
    }

    /// The vhost `name`, to change.
    pub(crate) fn vhost_mut(&mut self, name: &str) -> Result<&mut VHost, AmqpError> {
        self.vhosts.get_mut(name).ok_or_else(|| errors::no_vhost(name))
    }

    /// Whether a binding from `source` to `destination` outlives a restart: both ends do.
    pub(crate) fn is_durable_binding(
        &self,
        vhost: &str,
        source: &ShortStr,
        destination: &Destination,
    ) -> bool {
        let Some(vhost) = self.vhosts.get(vhost) else { return false };
        let source_durable = vhost.exchanges.get(source).is_some_and(|x| x.spec.durable);
        let destination_durable = match destination {
            Destination::Queue(id) => self.queues.get(id).is_some_and(|q| q.is_persisted()),
            Destination::Exchange(name) => vhost.exchanges.get(name).is_some_and(|x| x.spec.durable),
        };
        source_durable && destination_durable
    }
}

/// RabbitMQ reserves the `amq.` prefix for names the broker makes.
pub(super) fn check_name(kind: &str, name: &ShortStr) -> Result<(), AmqpError> {
    if name.as_bytes().starts_with(b"amq.") {
        return Err(errors::access_refused(format!("{kind} name '{name}' contains reserved prefix 'amq.*'")));
    }
    Ok(())
}

/// Checks both ends of an exchange-to-exchange binding and builds it.
fn exchange_binding(
    vhost: &VHost,
    vhost_name: &str,
    source: &ShortStr,
    destination: &ShortStr,
    routing_key: &ShortStr,
    arguments: &hourglass_wire::FieldTable,
) -> Result<Binding, AmqpError> {
    if source.is_empty() || destination.is_empty() {
        return Err(errors::default_exchange_refused());
    }
    for name in [destination, source] {
        if !vhost.exchanges.contains_key(name) {
            return Err(errors::no_exchange(name, vhost_name));
        }
    }
    match vhost.exchanges.get(source).map(|x| x.spec.kind) {
        Some(ExchangeKind::Headers) => crate::exchange::validate_headers_binding(arguments)?,
        Some(ExchangeKind::LocalRandom) => crate::exchange::validate_local_random_binding(routing_key, None)?,
        _ => {}
    }
    Ok(Binding {
        destination: Destination::Exchange(destination.clone()),
        routing_key: routing_key.clone(),
        arguments: arguments.clone(),
    })
}

/// Removes a binding from `source`, deleting `source` when it is auto-delete and that was its
/// last binding. Returns whether a durable exchange went with it.
/// What a removal took with it, for the stored definitions (`persist/changes.rs`).
#[derive(Debug, Default)]
pub(crate) struct Removed {
    /// `(name, durable)` of every exchange removed, auto-deleted ones included.
    pub exchanges: Vec<(ShortStr, bool)>,
    /// `(source, source durable, binding)` of every binding removed.
    pub bindings: Vec<(ShortStr, bool, Binding)>,
}

/// Removes `binding` from `source`, auto-deleting the source if that left it without any.
pub(crate) fn unbind_from(vhost: &mut VHost, source: &ShortStr, binding: &Binding, removed: &mut Removed) {
    let Some(exchange) = vhost.exchanges.get_mut(source) else { return };
    if exchange.unbind(binding) {
        removed.bindings.push((source.clone(), exchange.spec.durable, binding.clone()));
        if exchange.spec.auto_delete && !exchange.has_bindings() {
            remove_exchange(vhost, source, removed);
        }
    }
}

/// Removes every binding leading to `destination`, auto-deleting exchanges left without any.
pub(crate) fn unbind_destination(vhost: &mut VHost, destination: &Destination, removed: &mut Removed) {
    let mut emptied = Vec::new();
    for exchange in vhost.exchanges.values_mut() {
        let unbound = exchange.unbind_destination(destination);
        if unbound.is_empty() {
            continue;
        }
        let (source, durable) = (exchange.name().clone(), exchange.spec.durable);
        removed.bindings.extend(unbound.into_iter().map(|b| (source.clone(), durable, b)));
        if exchange.spec.auto_delete && !exchange.has_bindings() {
            emptied.push(source);
        }
    }
    for name in emptied {
        remove_exchange(vhost, &name, removed);
    }
}

/// Deletes an exchange and every binding from or to it.
fn remove_exchange(vhost: &mut VHost, name: &ShortStr, removed: &mut Removed) {
    let Some(exchange) = vhost.exchanges.remove(name) else { return };
    let durable = exchange.spec.durable;
    removed.exchanges.push((name.clone(), durable));
    removed.bindings.extend(exchange.bindings().iter().map(|b| (name.clone(), durable, b.clone())));
    unbind_destination(vhost, &Destination::Exchange(name.clone()), removed);
}
