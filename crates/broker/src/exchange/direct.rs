//! Direct exchange: a binding matches when its key equals the routing key. Bindings are indexed by
//! key, so a publish costs one hash lookup however many bindings the exchange has.

use std::collections::HashMap;

use hourglass_wire::ShortStr;

use super::{Destination, Destinations};

/// Destinations by binding key; a destination appears once per binding (bindings with the same
/// key and destination but other arguments are distinct bindings).
#[derive(Clone, Debug, Default)]
pub(super) struct DirectIndex {
    by_key: HashMap<ShortStr, Vec<Destination>>,
}

impl DirectIndex {
    pub fn insert(&mut self, key: &ShortStr, destination: &Destination) {
        self.by_key.entry(key.clone()).or_default().push(destination.clone());
    }

    pub fn remove(&mut self, key: &ShortStr, destination: &Destination) {
        if let Some(destinations) = self.by_key.get_mut(key) {
            if let Some(at) = destinations.iter().position(|d| d == destination) {
                destinations.swap_remove(at);
            }
            if destinations.is_empty() {
                self.by_key.remove(key);
            }
        }
    }

    pub fn route(&self, routing_key: &ShortStr, out: &mut Destinations) {
        if let Some(destinations) = self.by_key.get(routing_key) {
            out.extend(destinations.iter().cloned());
        }
    }
}
