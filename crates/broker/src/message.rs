//! A published message: what the broker routes, stores and delivers.
//!
//! One `Arc<Message>` is shared by every queue a message was routed to (a fanout copies no body).
//! The body and the properties are `Bytes` slices of the connection's read buffer, never copied on
//! the way through: a delivery writes the properties exactly as they came (ADR 0006). The few
//! properties the broker reads per message — persistence, priority, expiration — are read once,
//! here; the rest are read in place when a feature needs them (headers for the headers exchange,
//! `x-delay`, dead-lettering), and whatever changes properties builds a new `Message`.

use bytes::Bytes;
use hourglass_wire::{EncodedProperties, ShortStr};

use crate::queue::args::MAX_TIME_MS;
use crate::queue::ttl::parse_expiration;

#[derive(Clone, Debug, PartialEq)]
pub struct Message {
    /// The exchange the message was published to (reported in basic.deliver / basic.get-ok).
    pub exchange: ShortStr,
    pub routing_key: ShortStr,
    properties: EncodedProperties,
    pub body: Bytes,
    hot: Hot,
}

impl Message {
    pub fn new(
        exchange: ShortStr,
        routing_key: ShortStr,
        properties: EncodedProperties,
        body: Bytes,
    ) -> Self {
        let hot = Hot::read(&properties);
        Message { exchange, routing_key, properties, body, hot }
    }

    /// The same message with other properties (dead-lettering, redelivery headers).
    pub fn with_properties(&self, properties: EncodedProperties) -> Self {
        Message::new(self.exchange.clone(), self.routing_key.clone(), properties, self.body.clone())
    }

    /// The properties as published (or as the broker last rewrote them).
    pub fn properties(&self) -> &EncodedProperties {
        &self.properties
    }

    /// Body bytes, as `x-max-length-bytes` and statistics count them.
    pub fn body_size(&self) -> usize {
        self.body.len()
    }

    /// `delivery_mode` 2 marks a persistent message (AMQP 0-9-1 basic class).
    pub fn is_persistent(&self) -> bool {
        self.hot.persistent()
    }

    /// The `priority` property; 0 when absent.
    pub fn priority(&self) -> u8 {
        self.hot.priority()
    }

    /// The `expiration` property as milliseconds (semantics §1); `None` when absent or invalid
    /// (publish refuses an invalid one with 406 before a message is made).
    pub fn expiration_ms(&self) -> Option<u64> {
        self.hot.expiration_ms()
    }

    /// The packed persistence, priority and expiration (kept by a paged-out entry, ADR 0007).
    pub(crate) fn hot(&self) -> Hot {
        self.hot
    }
}

/// The properties the broker reads for every message, packed into 8 bytes so that a `Message`
/// with its `Arc` counts fits a 160-byte allocation (ADR 0006). Bits 0..48 hold the expiration
/// in ms plus one (0: none; valid expirations are at most 10 years, under 2^39 ms), bits 48..56
/// the priority, bit 56 whether the message is persistent, bit 57 whether the priority was given
/// (quorum queues place a message without one at RabbitMQ 4.3's default, 4). Records written
/// before bit 57 read as without a priority.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) struct Hot(u64);

impl Hot {
    const EXPIRATION_MASK: u64 = (1 << 48) - 1;
    const PRIORITY_SHIFT: u32 = 48;
    const PERSISTENT: u64 = 1 << 56;
    const PRIORITY_GIVEN: u64 = 1 << 57;

    fn read(properties: &EncodedProperties) -> Hot {
        let expiration_ms = properties.expiration().and_then(|e| parse_expiration(e.as_bytes()).ok());
        let priority = properties.priority();
        let hot = Hot::new(expiration_ms, priority.unwrap_or(0), properties.delivery_mode() == Some(2));
        match priority {
            Some(_) => Hot(hot.0 | Hot::PRIORITY_GIVEN),
            None => hot,
        }
    }

    pub(crate) fn new(expiration_ms: Option<u64>, priority: u8, persistent: bool) -> Hot {
        // parse_expiration refuses more than MAX_TIME_MS; the min keeps the bits apart regardless.
        let expiration = expiration_ms.map_or(0, |ms| ms.min(MAX_TIME_MS) + 1);
        let persistent = if persistent { Hot::PERSISTENT } else { 0 };
        Hot(expiration | u64::from(priority) << Hot::PRIORITY_SHIFT | persistent)
    }

    /// The packed form, as stored in a message's metadata (`persist::MessageMeta`).
    pub(crate) fn to_bits(self) -> u64 {
        self.0
    }

    pub(crate) fn from_bits(bits: u64) -> Hot {
        Hot(bits)
    }

    pub(crate) fn expiration_ms(self) -> Option<u64> {
        (self.0 & Hot::EXPIRATION_MASK).checked_sub(1)
    }

    pub(crate) fn priority(self) -> u8 {
        (self.0 >> Hot::PRIORITY_SHIFT) as u8
    }

    /// The `priority` property, `None` when the message has none.
    pub(crate) fn given_priority(self) -> Option<u8> {
        (self.0 & Hot::PRIORITY_GIVEN != 0).then(|| self.priority())
    }

    pub(crate) fn persistent(self) -> bool {
        self.0 & Hot::PERSISTENT != 0
    }
}

impl std::fmt::Debug for Hot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hot")
            .field("expiration_ms", &self.expiration_ms())
            .field("priority", &self.priority())
            .field("persistent", &self.persistent())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hourglass_wire::BasicProperties;

    fn message(properties: BasicProperties) -> Message {
        Message::new(ShortStr::default(), ShortStr::default(), properties.into(), Bytes::new())
    }

    /// A queued message costs one `Arc<Message>`: kept within glibc's 160-byte size class (136
    /// bytes of message, 16 of counts, 8 of malloc header), so growing it fails here first.
    #[test]
    fn message_stays_small() {
        assert!(std::mem::size_of::<Message>() <= 136, "Message is {} bytes", std::mem::size_of::<Message>());
    }

    /// Persistence, priority and expiration are read from the properties once; the extremes of
    /// each survive the packing.
    #[test]
    fn hot_properties_are_read_once() {
        let short = |s: &str| ShortStr::try_from(s).ok();
        let max = MAX_TIME_MS.to_string();
        let full = message(BasicProperties {
            delivery_mode: Some(2),
            priority: Some(255),
            expiration: short(&max),
            ..Default::default()
        });
        assert_eq!(
            (full.is_persistent(), full.priority(), full.expiration_ms()),
            (true, 255, Some(MAX_TIME_MS))
        );
        let zero =
            message(BasicProperties { delivery_mode: Some(1), expiration: short("0"), ..Default::default() });
        assert_eq!((zero.is_persistent(), zero.priority(), zero.expiration_ms()), (false, 0, Some(0)));
        let none = message(BasicProperties { expiration: short("soon"), ..Default::default() });
        assert_eq!((none.is_persistent(), none.priority(), none.expiration_ms()), (false, 0, None));
        assert_eq!((full.hot().given_priority(), none.hot().given_priority()), (Some(255), None));
        let explicit_zero = message(BasicProperties { priority: Some(0), ..Default::default() });
        assert_eq!(explicit_zero.hot().given_priority(), Some(0));
        assert_eq!(Hot::from_bits(explicit_zero.hot().to_bits()).given_priority(), Some(0), "stored whole");
    }
}
