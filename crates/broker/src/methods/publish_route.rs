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
            // A route is kept only past the internal check, and an exchange is made internal
            // only by declaring it anew, which changes the generation.
            Found::Cached(route) => (false, route.delayed),
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
    let vhost = vhosts.get(vhost_name).ok_or_else(|| errors::no_vhost(vhost_name))?;
    let exchange = vhost.exchanges.get(name).ok_or_else(|| errors::no_exchange(name, vhost_name))?;
    Ok((vhost, exchange))
}

/// What is left to do for a publish after its connection's cached route was tried.
pub(super) enum Pending<'v> {
    /// Routed from the cache.
    Routed,
    /// To be routed from this exchange.
    RouteFrom { vhost: &'v VHost, exchange: &'v Exchange },
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
    /// Routes the message from its connection's cached route, when it was found there and
    /// has no CC/BCC keys: appends the queues to `targets` and counts the publish on its
    /// exchange. Otherwise, says where to route it from.
    pub fn route_from_cache<'v>(
        &self,
        found: Found<'_, 'v>,
        vhosts: &'v VHosts,
        vhost_name: &str,
        targets: &mut Vec<QueueId>,
    ) -> Result<Pending<'v>, AmqpError> {
        match found {
            Found::Cached(route) if self.extra_keys.is_empty() => {
                targets.extend_from_slice(&route.queues);
                route.counters.published(!targets.is_empty());
                Ok(Pending::Routed)
            }
            Found::Cached(_) => {
                let (vhost, exchange) = exchange_for_publish(vhosts, vhost_name, &self.message.exchange)?;
                Ok(Pending::RouteFrom { vhost, exchange })
            }
            Found::LookedUp { vhost, exchange } => Ok(Pending::RouteFrom { vhost, exchange }),
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
