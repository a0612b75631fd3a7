//! The last route a publishing connection took, kept so that a stream of publishes to one
//! exchange with one routing key skips the name lookups: the vhost, the exchange and (on the
//! default exchange) the queue, three keyed SipHash lookups and their key compares, about 7 % of
//! the broker's instructions per message on a 16-byte publish.
//!
//! A cached route is good while the vhosts' generation is the one it was found under
//! (`VHosts::generation`): every change to an exchange, binding, queue name or policy takes the
//! vhost through `VHosts::get_mut` (or makes or removes one), which counts it, so no change site
//! has to remember the cache. Only routes that depend on nothing but the exchange and the
//! routing key are kept: none through a headers or local random exchange, none with CC/BCC keys
//! (the caller checks), and none reaching more than [`CACHED_QUEUES_MAX`] queues, so a
//! connection's cache stays near a kilobyte at most (two names of up to 255 bytes, with the
//! slack their buffers grow by, and 16 queue ids).

use std::sync::Arc;

use smallvec::SmallVec;

use crate::exchange::Exchange;
use crate::message_stats::ExchangeCounters;
use crate::queue::QueueId;

/// Queues a cached route may reach: a wider fan-out is routed each time.
pub(crate) const CACHED_QUEUES_MAX: usize = 16;

/// One connection's last route.
#[derive(Debug, Default)]
pub(crate) struct RouteCache {
    last: Option<CachedRoute>,
}

/// A route found under `generation`: what publishing to `exchange` with `routing_key` reaches.
#[derive(Debug)]
pub(crate) struct CachedRoute {
    generation: u64,
    /// The names' bytes, copied: a slice of the publish would keep its whole read buffer alive.
    exchange: Vec<u8>,
    routing_key: Vec<u8>,
    /// The exchange published to is a delayed one: its messages' delay headers are read. (It is
    /// never internal: a publish to an internal exchange is refused before it is routed.)
    pub delayed: bool,
    /// The exchange's counters, shared with it.
    pub counters: Arc<ExchangeCounters>,
    /// The queues reached, in the order routing reached them.
    pub queues: SmallVec<[QueueId; 4]>,
}

impl RouteCache {
    /// The route to `exchange` with `routing_key`, when it was the last one and nothing changed
    /// since (`generation`).
    pub(crate) fn get(&self, generation: u64, exchange: &[u8], routing_key: &[u8]) -> Option<&CachedRoute> {
        self.last.as_ref().filter(|route| {
            route.generation == generation && route.routing_key == routing_key && route.exchange == exchange
        })
    }

    /// Keeps the route just found to `exchange` (`source`) with `routing_key`: `queues`, under
    /// `generation`. A route to more than [`CACHED_QUEUES_MAX`] queues is not kept (and the
    /// previous one is dropped).
    pub(crate) fn keep(
        &mut self,
        generation: u64,
        source: &Exchange,
        routing_key: &[u8],
        queues: &[QueueId],
    ) {
        if queues.len() > CACHED_QUEUES_MAX {
            self.last = None;
            return;
        }
        let exchange = source.spec.name.as_bytes();
        let route = self.last.get_or_insert_with(|| CachedRoute {
            generation,
            exchange: Vec::new(),
            routing_key: Vec::new(),
            delayed: false,
            counters: source.counters.clone(),
            queues: SmallVec::new(),
        });
        route.generation = generation;
        route.exchange.clear();
        route.exchange.extend_from_slice(exchange);
        route.routing_key.clear();
        route.routing_key.extend_from_slice(routing_key);
        route.delayed = source.spec.delayed;
        if !Arc::ptr_eq(&route.counters, &source.counters) {
            route.counters = source.counters.clone();
        }
        route.queues.clear();
        route.queues.extend_from_slice(queues);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exchange::{ExchangeKind, ExchangeSpec};
    use hourglass_wire::{FieldTable, ShortStr};

    fn exchange(name: &'static str) -> Exchange {
        Exchange::new(ExchangeSpec {
            name: ShortStr::from_static(name),
            kind: ExchangeKind::Direct,
            delayed: false,
            durable: true,
            auto_delete: false,
            internal: false,
            arguments: FieldTable::new(),
        })
    }

    #[test]
    fn a_route_is_found_only_under_its_generation_exchange_and_key() {
        let mut cache = RouteCache::default();
        let orders = exchange("orders");
        cache.keep(7, &orders, b"eu", &[QueueId(1), QueueId(2)]);
        let route = cache.get(7, b"orders", b"eu").expect("kept");
        assert_eq!(route.queues.as_slice(), [QueueId(1), QueueId(2)]);
        assert!(Arc::ptr_eq(&route.counters, &orders.counters));
        assert!(cache.get(8, b"orders", b"eu").is_none(), "a change since");
        assert!(cache.get(7, b"orders", b"us").is_none());
        assert!(cache.get(7, b"order", b"eu").is_none());
        assert!(cache.get(7, b"", b"eu").is_none());
    }

    #[test]
    fn the_next_route_replaces_the_last_and_a_wide_one_is_not_kept() {
        let mut cache = RouteCache::default();
        let default = exchange("");
        cache.keep(1, &exchange("orders"), b"eu", &[QueueId(1)]);
        cache.keep(1, &default, b"q", &[QueueId(3)]);
        assert!(cache.get(1, b"orders", b"eu").is_none());
        let route = cache.get(1, b"", b"q").expect("kept");
        assert_eq!(route.queues.as_slice(), [QueueId(3)]);
        assert!(Arc::ptr_eq(&route.counters, &default.counters));
        let wide: Vec<QueueId> = (0..=CACHED_QUEUES_MAX as u64).map(QueueId).collect();
        cache.keep(1, &default, b"fan", &wide);
        assert!(cache.get(1, b"", b"fan").is_none());
        assert!(cache.get(1, b"", b"q").is_none(), "dropped, not left stale");
    }
}
