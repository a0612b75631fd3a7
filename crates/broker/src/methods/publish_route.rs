//! Finding where a publish goes: its exchange and the queues it reaches, from its connection's
//! last route (`route_cache.rs`) when nothing changed since, else by looking the exchange up and
//! routing (`routing.rs`), keeping the route for the next publish when it can be reused.

use hourglass_wire::ShortStr;

use crate::api::AmqpError;
use crate::errors;
use crate::exchange::Exchange;
use crate::message::Message;
use crate::queue::QueueId;
use crate::route_cache::{CachedRoute, RouteCache};
use crate::routing;
use crate::vhost::{VHost, VHosts};

/// The exchange a publish names, as its connection's route cache had it or as looked up
/// (`route_cache.rs`): two lifetimes, so that a looked-up route can be kept in the cache.
pub(super) enum Found<'c, 'v> {
    Cached(&'c CachedRoute),
    LookedUp { vhost: &'v VHost, exchange: &'v Exchange },
}

impl Found<'_, '_> {
    /// Whether the exchange is internal, and whether it is a delayed one.
    pub fn flags(&self) -> (bool, bool) {
        match self {
            Found::Cached(route) => (route.internal, route.delayed),
            Found::LookedUp { exchange, .. } => (exchange.spec.internal, exchange.spec.delayed),
        }
    }
}

/// The vhost `vhost_name` and its exchange `name` for a publish: RabbitMQ's errors when either
/// is missing.
pub(super) fn exchange_for_publish<'v>(
    vhosts: &'v VHosts,
    vhost_name: &str,
    name: &ShortStr,
) -> Result<(&'v VHost, &'v Exchange), AmqpError> {
    let vhost =
        vhosts.get(vhost_name).ok_or_else(|| errors::not_allowed(format!("vhost {vhost_name} not found")))?;
    let exchange = vhost.exchanges.get(name).ok_or_else(|| errors::no_exchange(name, vhost_name))?;
    Ok((vhost, exchange))
}

/// A message being routed from the exchange it was published to.
pub(super) struct PublishRoute<'m> {
    /// The vhosts' generation the route is found under.
    pub generation: u64,
    pub message: &'m Message,
    /// Its CC/BCC keys.
    pub extra_keys: &'m [bytes::Bytes],
}

impl PublishRoute<'_> {
    /// Takes the queues the message reaches from the cached route, when it was found there and
    /// has no CC/BCC keys: appends them to `targets` and counts the publish on its exchange.
    /// Otherwise, the vhost and exchange to route it from.
    pub fn take_cached<'v>(
        &self,
        found: Found<'_, 'v>,
        vhosts: &'v VHosts,
        vhost_name: &str,
        targets: &mut Vec<QueueId>,
    ) -> Option<(&'v VHost, &'v Exchange)> {
        match found {
            Found::Cached(route) if self.extra_keys.is_empty() => {
                targets.extend_from_slice(&route.queues);
                route.counters.published(!targets.is_empty());
                None
            }
            // Unchanged since the route was kept, so both are there.
            Found::Cached(_) => exchange_for_publish(vhosts, vhost_name, &self.message.exchange).ok(),
            Found::LookedUp { vhost, exchange } => Some((vhost, exchange)),
        }
    }

    /// Routes the message from `exchange` in `vhost`, appending the queues it reaches to
    /// `targets`; counts the publish on the exchange, and keeps the route in `cache` when the
    /// same exchange and key will reach the same queues.
    pub fn route_and_keep(
        &self,
        vhost: &VHost,
        exchange: &Exchange,
        cache: &mut RouteCache,
        targets: &mut Vec<QueueId>,
    ) {
        let message = self.message;
        let by_key = routing::route(vhost, &message.exchange, message, self.extra_keys, targets);
        exchange.counters.published(!targets.is_empty());
        if by_key && self.extra_keys.is_empty() {
            cache.keep(self.generation, exchange, message.routing_key.as_bytes(), targets);
        }
    }
}
