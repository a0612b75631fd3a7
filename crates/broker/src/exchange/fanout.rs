//! Fanout exchange: every binding matches, whatever the routing key.

use super::{Binding, Destinations};

pub(super) fn route<'b>(bindings: impl Iterator<Item = &'b Binding>, out: &mut Destinations) {
    out.extend(bindings.map(|b| b.destination.clone()));
}
