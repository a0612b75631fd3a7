//! Routing a message from an exchange to queues: the default exchange, exchange-to-exchange
//! bindings (followed once each, so cycles end) and alternate exchanges. A message is routed with
//! its routing key and with the extra keys of its `CC`/`BCC` headers (`sender_selected.rs`) at every
//! exchange on the way, as RabbitMQ's message carries all its routing keys.

use std::collections::HashSet;

use bytes::Bytes;
use hourglass_wire::ShortStr;
use rustc_hash::FxBuildHasher;
use smallvec::SmallVec;

use crate::exchange::{Destination, Destinations};
use crate::message::Message;
use crate::queue::QueueId;
use crate::vhost::VHost;

/// A bound on exchange-to-exchange hops, so a pathological topology cannot make routing costly.
const MAX_EXCHANGES_PER_ROUTE: usize = 64;

/// Exchanges on a route, kept on the stack for the usual few (no allocation per publish).
type ExchangeList<'v> = SmallVec<[&'v ShortStr; 4]>;

/// Queues a route reaches before their de-duplication moves from a scan of the list to a set: a
/// scan is cheapest for the usual few, but is quadratic for a wide fan-out (a fanout exchange
/// with 100,000 queues bound is 5 × 10⁹ comparisons per publish).
const SCANNED_QUEUES_MAX: usize = 32;

/// Appends to `queues` each queue `message` reaches from `exchange` with its routing key or one of
/// `extra_keys`, once. Returns whether every exchange on the way routed by key alone (no headers
/// or local random exchange), so that the same exchange and key reach the same queues until the
/// vhost changes (`route_cache.rs`).
pub(crate) fn route(
    vhost: &VHost,
    exchange: &ShortStr,
    message: &Message,
    extra_keys: &[Bytes],
    queues: &mut Vec<QueueId>,
) -> bool {
    let mut queues = Reached::new(queues);
    if exchange.is_empty() {
        // The default exchange binds every queue by its name (AMQP 0-9-1 §3.1.3.1).
        if let Some(id) = vhost.queues.get(&message.routing_key) {
            queues.push(*id);
        }
        for key in extra_keys.iter().filter_map(|k| ShortStr::new(k.clone()).ok()) {
            if let Some(id) = vhost.queues.get(&key) {
                queues.push(*id);
            }
        }
        return true;
    }
    let mut by_key = true;
    let mut visited = ExchangeList::new();
    let mut next = Some(exchange);
    // Alternate exchanges: when the exchange reaches no queue, try its alternate, and so on.
    while let Some(name) = next.take() {
        // Each turn adds the exchange to `visited` unless the route is at its cap, so this ends
        // within the cap even when alternates form a cycle past it.
        if visited.contains(&name) || visited.len() >= MAX_EXCHANGES_PER_ROUTE {
            break;
        }
        let Some(source) = vhost.exchanges.get(name) else { break };
        by_key &= route_through_bindings(vhost, name, message, extra_keys, &mut queues, &mut visited);
        if queues.queues.is_empty() {
            next = source.alternate.as_ref();
        }
    }
    by_key
}

/// Follows the bindings from `start`, through exchange-to-exchange bindings; whether each exchange
/// on the way routed by key alone.
fn route_through_bindings<'v>(
    vhost: &'v VHost,
    start: &'v ShortStr,
    message: &Message,
    extra_keys: &[Bytes],
    queues: &mut Reached<'_>,
    visited: &mut ExchangeList<'v>,
) -> bool {
    let mut by_key = true;
    let mut pending = ExchangeList::new();
    pending.push(start);
    let mut destinations = Destinations::new();
    while let Some(name) = pending.pop() {
        if visited.contains(&name) || visited.len() >= MAX_EXCHANGES_PER_ROUTE {
            continue;
        }
        visited.push(name);
        let Some(exchange) = vhost.exchanges.get(name) else { continue };
        by_key &= exchange.routes_by_key();
        destinations.clear();
        exchange.route(message, extra_keys, &mut destinations);
        for destination in destinations.drain(..) {
            match destination {
                Destination::Queue(id) => queues.push(id),
                Destination::Exchange(next) => {
                    if let Some((key, _)) = vhost.exchanges.get_key_value(&next) {
                        pending.push(key);
                    }
                }
            }
        }
    }
    by_key
}

/// The queues a route has reached, each once, in the order reached.
struct Reached<'q> {
    queues: &'q mut Vec<QueueId>,
    /// The same queues as a set, once there are more than [`SCANNED_QUEUES_MAX`].
    index: Option<HashSet<QueueId, FxBuildHasher>>,
}

impl<'q> Reached<'q> {
    fn new(queues: &'q mut Vec<QueueId>) -> Self {
        let mut reached = Reached { queues, index: None };
        reached.index_if_wide();
        reached
    }

    fn push(&mut self, id: QueueId) {
        let seen = match &mut self.index {
            Some(index) => !index.insert(id),
            None => self.queues.contains(&id),
        };
        if !seen {
            self.queues.push(id);
            self.index_if_wide();
        }
    }

    fn index_if_wide(&mut self) {
        if self.index.is_none() && self.queues.len() > SCANNED_QUEUES_MAX {
            self.index = Some(self.queues.iter().copied().collect());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Past the scanned few, queues are de-duplicated through a set, so a route reaching many
    /// queues (each several times: a queue bound by several matching keys) stays linear; order is
    /// the order first reached.
    #[test]
    fn many_queues_are_each_kept_once_through_a_set() {
        let mut list = Vec::new();
        let mut reached = Reached::new(&mut list);
        for round in 0..3 {
            for i in 0..1_000 {
                reached.push(QueueId(i));
            }
            assert!(reached.index.is_some(), "round {round}: wide routes use the set");
        }
        assert_eq!(list, (0..1_000).map(QueueId).collect::<Vec<_>>());
        let mut few = vec![QueueId(7)];
        let mut reached = Reached::new(&mut few);
        reached.push(QueueId(7));
        reached.push(QueueId(8));
        assert!(reached.index.is_none(), "a few are scanned");
        assert_eq!(few, vec![QueueId(7), QueueId(8)]);
    }
}
