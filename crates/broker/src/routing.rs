//! Routing a message from an exchange to queues: the default exchange, exchange-to-exchange
//! bindings (followed once each, so cycles end) and alternate exchanges. A message is routed with
//! its routing key and with the extra keys of its `CC`/`BCC` headers (`sender_selected.rs`) at every
//! exchange on the way, as RabbitMQ's message carries all its routing keys.

use bytes::Bytes;
use hourglass_wire::ShortStr;
use smallvec::SmallVec;

use crate::exchange::{Destination, Destinations};
use crate::message::Message;
use crate::queue::QueueId;
use crate::vhost::VHost;

/// A bound on exchange-to-exchange hops, so a pathological topology cannot make routing costly.
const MAX_EXCHANGES_PER_ROUTE: usize = 64;

/// Exchanges on a route, kept on the stack for the usual few (no allocation per publish).
type ExchangeList<'v> = SmallVec<[&'v ShortStr; 4]>;

/// Appends to `queues` each queue `message` reaches from `exchange` with its routing key or one of
/// `extra_keys`, once.
pub(crate) fn route(
    vhost: &VHost,
    exchange: &ShortStr,
    message: &Message,
    extra_keys: &[Bytes],
    queues: &mut Vec<QueueId>,
) {
    if exchange.is_empty() {
        // The default exchange binds every queue by its name (AMQP 0-9-1 §3.1.3.1).
        if let Some(id) = vhost.queues.get(&message.routing_key) {
            queues.push(*id);
        }
        for key in extra_keys.iter().filter_map(|k| ShortStr::new(k.clone()).ok()) {
            if let Some(id) = vhost.queues.get(&key) {
                if !queues.contains(id) {
                    queues.push(*id);
                }
            }
        }
        return;
    }
    let mut visited = ExchangeList::new();
    let mut next = Some(exchange);
    // Alternate exchanges: when the exchange reaches no queue, try its alternate, and so on.
    while let Some(name) = next.take() {
        if visited.contains(&name) {
            break;
        }
        let Some(source) = vhost.exchanges.get(name) else { break };
        route_through_bindings(vhost, name, message, extra_keys, queues, &mut visited);
        if queues.is_empty() {
            next = source.alternate.as_ref();
        }
    }
}

/// Follows the bindings from `start`, through exchange-to-exchange bindings.
fn route_through_bindings<'v>(
    vhost: &'v VHost,
    start: &'v ShortStr,
    message: &Message,
    extra_keys: &[Bytes],
    queues: &mut Vec<QueueId>,
    visited: &mut ExchangeList<'v>,
) {
    let mut pending = ExchangeList::new();
    pending.push(start);
    let mut destinations = Destinations::new();
    while let Some(name) = pending.pop() {
        if visited.contains(&name) || visited.len() >= MAX_EXCHANGES_PER_ROUTE {
            continue;
        }
        visited.push(name);
        let Some(exchange) = vhost.exchanges.get(name) else { continue };
        destinations.clear();
        exchange.route(message, extra_keys, &mut destinations);
        for destination in destinations.drain(..) {
            match destination {
                Destination::Queue(id) => {
                    if !queues.contains(&id) {
                        queues.push(id);
                    }
                }
                Destination::Exchange(next) => {
                    if let Some((key, _)) = vhost.exchanges.get_key_value(&next) {
                        pending.push(key);
                    }
                }
            }
        }
    }
}
