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
        .filter_map(|effect| match effect {
            Effect::Send { method: Method::BasicDeliver(method), content: Some(message), .. } => {
                Some(Delivery { method: method.clone(), message: message.clone() })
            }
            _ => None,
        })
        .collect()
}

/// The methods sent by `effects`, in order.
pub fn methods(effects: &[Effect]) -> Vec<Method> {
    effects
        .iter()
        .filter_map(|effect| match effect {
            Effect::Send { method, .. } => Some(method.clone()),
            _ => None,
        })
        .collect()
}
