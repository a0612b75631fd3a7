//! Fanout exchange: every binding matches, whatever the routing key.

use super::{Binding, Destination};

pub(super) fn route(bindings: &[Binding], out: &mut Vec<Destination>) {
    out.extend(bindings.iter().map(|b| b.destination.clone()));
}
