//! A published message: what the broker routes, stores and delivers.
//!
//! One `Arc<Message>` is shared by every queue a message was routed to (a fanout copies no body);
//! the body is a `Bytes` slice of the connection's read buffer, never copied on the way through.

use bytes::Bytes;
use hourglass_wire::{BasicProperties, ShortStr};

#[derive(Clone, Debug, PartialEq)]
pub struct Message {
    /// The exchange the message was published to (reported in basic.deliver / basic.get-ok).
    pub exchange: ShortStr,
    pub routing_key: ShortStr,
    pub properties: BasicProperties,
    pub body: Bytes,
    /// The `expiration` property as milliseconds, parsed once at publish (contract §1).
    pub expiration_ms: Option<u64>,
}

impl Message {
    pub fn new(exchange: ShortStr, routing_key: ShortStr, properties: BasicProperties, body: Bytes) -> Self {
        let expiration_ms = properties
            .expiration
            .as_ref()
            .and_then(|e| crate::queue::ttl::parse_expiration(e.as_bytes()).ok());
        Message { exchange, routing_key, properties, body, expiration_ms }
    }

    /// Body bytes, as `x-max-length-bytes` and statistics count them.
    pub fn body_size(&self) -> usize {
        self.body.len()
    }

    /// `delivery_mode` 2 marks a persistent message (AMQP 0-9-1 basic class).
    pub fn is_persistent(&self) -> bool {
        self.properties.delivery_mode == Some(2)
    }
}
