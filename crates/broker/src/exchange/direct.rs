//! Direct exchange: a binding matches when its key equals the routing key.

use super::{Binding, Destination};

pub(super) fn route(bindings: &[Binding], routing_key: &[u8], out: &mut Vec<Destination>) {
    out.extend(
        bindings.iter().filter(|b| b.routing_key.as_bytes() == routing_key).map(|b| b.destination.clone()),
    );
}
