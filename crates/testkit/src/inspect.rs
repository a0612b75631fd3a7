//! Reading effects in tests.

use std::sync::Arc;

use hourglass_broker::{Effect, Message};
use hourglass_wire::{BasicDeliver, Method};

/// A basic.deliver and the message it carried.
#[derive(Clone, Debug)]
pub struct Delivery {
    pub method: BasicDeliver,
    pub message: Arc<Message>,
}

impl Delivery {
    pub fn body(&self) -> &[u8] {
        &self.message.body
    }
}

/// The basic.deliver effects among `effects`, in order.
pub fn deliveries(effects: &[Effect]) -> Vec<Delivery> {
    effects
        .iter()
        .filter_map(|effect| match effect.clone().into_method()? {
            (_, Method::BasicDeliver(method), Some(message)) => Some(Delivery { method: *method, message }),
            _ => None,
        })
        .collect()
}

/// The methods sent by `effects`, in order (deliveries and confirms as the 0-9-1 methods they
/// are).
pub fn methods(effects: &[Effect]) -> Vec<Method> {
    effects.iter().filter_map(|effect| Some(effect.clone().into_method()?.1)).collect()
}
