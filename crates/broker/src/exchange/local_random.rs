//! Local random exchange (RabbitMQ 4.0's `x-local-random`, for request-reply): each message goes
//! to one of the bound queues, picked at random. RabbitMQ picks among the queues on the
//! publisher's node; every queue of an Hourglass node is on it (a cluster serves all of them from
//! its leader), so every bound queue is a candidate. Bindings have an empty key and lead to a
//! classic queue ([`validate_binding`], as RabbitMQ's `validate_binding`).

use std::cell::Cell;

use hourglass_wire::ShortStr;
use indexmap::IndexSet;

use super::{Binding, Destinations};
use crate::api::AmqpError;
use crate::errors;
use crate::queue::QueueType;

pub const TYPE_NAME: &str = "x-local-random";

/// Picks bindings: a xorshift generator per exchange, seeded from its name. Spreading messages
/// over queues needs no secret randomness, and the broker core reads no entropy of its own.
#[derive(Clone, Debug)]
pub(super) struct Picker(Cell<u64>);

impl Picker {
    pub(super) fn seeded(name: &ShortStr) -> Picker {
        let seed = name
            .as_bytes()
            .iter()
            .fold(0x9e37_79b9_7f4a_7c15_u64, |h, b| (h ^ u64::from(*b)).wrapping_mul(0x100_0000_01b3));
        Picker(Cell::new(seed | 1))
    }

    /// A position below `count` (at least 1).
    fn pick(&self, count: usize) -> usize {
        let mut x = self.0.get();
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0.set(x);
        (x % count as u64) as usize
    }
}

/// One bound queue, picked at random; none when nothing is bound.
pub(super) fn route(bindings: &IndexSet<Binding>, picker: &Picker, out: &mut Destinations) {
    if bindings.is_empty() {
        return;
    }
    if let Some(binding) = bindings.get_index(picker.pick(bindings.len())) {
        out.push(binding.destination.clone());
    }
}

/// A binding from a local random exchange: an empty key, to a classic queue (`queue`: the
/// destination queue's type; `None` for an exchange). RabbitMQ's texts.
pub(crate) fn validate_binding(routing_key: &ShortStr, queue: Option<QueueType>) -> Result<(), AmqpError> {
    if !routing_key.is_empty() {
        return Err(errors::precondition_failed(format!(
            "Non empty binding '{routing_key}' key not permitted"
        )));
    }
    match queue {
        Some(QueueType::Classic) => Ok(()),
        Some(QueueType::Quorum) => Err(errors::precondition_failed(
            "Queue type rabbit_quorum_queue not valid for this exchange type",
        )),
        None => Err(errors::precondition_failed("Destination not found")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exchange::Destination;
    use crate::queue::QueueId;

    fn bound(queues: u64) -> IndexSet<Binding> {
        (0..queues)
            .map(|q| Binding {
                destination: Destination::Queue(QueueId(q)),
                routing_key: ShortStr::default(),
                arguments: Default::default(),
            })
            .collect()
    }

    /// Each message goes to exactly one bound queue, and over many messages to every one of
    /// them about as often; with nothing bound, nowhere.
    #[test]
    fn each_message_goes_to_one_bound_queue_picked_at_random() {
        let picker = Picker::seeded(&ShortStr::from_static("rpc"));
        let bindings = bound(4);
        let mut counts = [0usize; 4];
        for _ in 0..40_000 {
            let mut out = Destinations::new();
            route(&bindings, &picker, &mut out);
            assert_eq!(out.len(), 1);
            let Destination::Queue(QueueId(q)) = out[0] else { panic!("a queue") };
            counts[q as usize] += 1;
        }
        assert!(counts.iter().all(|c| (8_000..12_000).contains(c)), "{counts:?}");
        let mut out = Destinations::new();
        route(&bound(0), &picker, &mut out);
        assert!(out.is_empty());
    }

    #[test]
    fn bindings_have_an_empty_key_and_a_classic_queue() {
        assert!(validate_binding(&ShortStr::default(), Some(QueueType::Classic)).is_ok());
        let keyed = validate_binding(&ShortStr::from_static("k"), Some(QueueType::Classic)).unwrap_err();
        assert_eq!(
            (keyed.reply_code, keyed.reply_text.as_str()),
            (406, "PRECONDITION_FAILED - Non empty binding 'k' key not permitted")
        );
        let quorum = validate_binding(&ShortStr::default(), Some(QueueType::Quorum)).unwrap_err();
        assert!(quorum
            .reply_text
            .ends_with("Queue type rabbit_quorum_queue not valid for this exchange type"));
        assert!(validate_binding(&ShortStr::default(), None)
            .unwrap_err()
            .reply_text
            .ends_with("Destination not found"));
    }
}
