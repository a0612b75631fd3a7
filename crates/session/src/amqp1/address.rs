//! RabbitMQ's AMQP 1.0 address format v2 (RabbitMQ 4.x "AMQP 1.0 address"): where a link's
//! target sends messages and where its source takes them from.
//!
//! - `/queues/:queue`: a queue (target: through the default exchange; source: consume from it);
//! - `/exchanges/:exchange/:routing-key` and `/exchanges/:exchange` (empty routing key): an
//!   exchange, for targets only;
//! - a null target: each message names one of the above in its `to` property.
//!
//! Names are percent-encoded (RFC 3986); the default exchange is named only by `/queues/`.

use std::fmt;

/// Where a message goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Destination {
    pub exchange: String,
    pub routing_key: String,
    /// The queue a `/queues/` address names (checked to exist when the link attaches).
    pub queue: Option<String>,
}

/// Why an address is refused, as a link's `amqp:invalid-field` or `amqp:unauthorized-access`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum AddressError {
    /// Not of the v2 format.
    Invalid(String),
    /// The default exchange named as an exchange (RabbitMQ 4 refuses it: use `/queues/`).
    DefaultExchange,
}

impl fmt::Display for AddressError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AddressError::Invalid(address) => write!(f, "bad address '{address}'"),
            AddressError::DefaultExchange => write!(
                f,
                "publishing to the default exchange through /exchanges/ is not allowed; use /queues/"
            ),
        }
    }
}

/// The longest name AMQP 0-9-1 carries (a short string), for a queue, exchange or routing key.
const NAME_MAX: usize = 255;

/// The destination a target address names.
pub(crate) fn target(address: &str) -> Result<Destination, AddressError> {
    let invalid = || AddressError::Invalid(address.to_owned());
    if let Some(queue) = address.strip_prefix("/queues/") {
        let queue = queue_name(queue).ok_or_else(invalid)?;
        return Ok(Destination { exchange: String::new(), routing_key: queue.clone(), queue: Some(queue) });
    }
    let rest = address.strip_prefix("/exchanges/").ok_or_else(invalid)?;
    if rest.matches('/').count() > 1 {
        return Err(invalid());
    }
    let (exchange, routing_key) = match rest.split_once('/') {
        Some((exchange, key)) => (decode(exchange), decode(key)),
        None => (decode(rest), Some(String::new())),
    };
    let (Some(exchange), Some(routing_key)) = (exchange, routing_key) else { return Err(invalid()) };
    if exchange.is_empty() || exchange.len() > NAME_MAX || routing_key.len() > NAME_MAX {
        return Err(invalid());
    }
    if exchange == "amq.default" {
        return Err(AddressError::DefaultExchange);
    }
    Ok(Destination { exchange, routing_key, queue: None })
}

/// The queue a source address names.
pub(crate) fn source(address: &str) -> Result<String, AddressError> {
    address
        .strip_prefix("/queues/")
        .and_then(queue_name)
        .ok_or_else(|| AddressError::Invalid(address.to_owned()))
}

/// A queue name from the segment after `/queues/`: one segment (a `/` in the name is `%2F`).
fn queue_name(segment: &str) -> Option<String> {
    if segment.contains('/') {
        return None;
    }
    decode(segment).filter(|q| !q.is_empty() && q.len() <= NAME_MAX)
}

/// `/queues/:queue` for `queue`, percent-encoded.
pub(crate) fn queue_address(queue: &str) -> String {
    format!("/queues/{}", encode(queue))
}

/// Percent-decodes a path segment; `None` when an escape is malformed or the result is not UTF-8.
pub(super) fn decode(segment: &str) -> Option<String> {
    let bytes = segment.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut at = 0;
    while at < bytes.len() {
        if bytes[at] == b'%' {
            let hex = segment.get(at + 1..at + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            at += 3;
        } else {
            out.push(bytes[at]);
            at += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// Percent-encodes everything but RFC 3986's unreserved characters.
fn encode(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for byte in name.bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn to(exchange: &str, routing_key: &str) -> Destination {
        Destination { exchange: exchange.into(), routing_key: routing_key.into(), queue: None }
    }

    #[test]
    fn a_queue_target_goes_through_the_default_exchange() {
        let destination = target("/queues/orders").unwrap();
        assert_eq!(destination.exchange, "");
        assert_eq!(destination.routing_key, "orders");
        assert_eq!(destination.queue.as_deref(), Some("orders"));
    }

    #[test]
    fn exchange_targets_with_and_without_a_routing_key() {
        assert_eq!(target("/exchanges/amq.topic/a.b").unwrap(), to("amq.topic", "a.b"));
        assert_eq!(target("/exchanges/events").unwrap(), to("events", ""));
        assert_eq!(target("/exchanges/my%20ex/k%2Fey").unwrap(), to("my ex", "k/ey"));
    }

    #[test]
    fn names_are_percent_decoded_and_encoded() {
        assert_eq!(source("/queues/a%2Fb%20c").unwrap(), "a/b c");
        assert_eq!(queue_address("a/b c"), "/queues/a%2Fb%20c");
        assert_eq!(source(&queue_address("é q")).unwrap(), "é q");
    }

    #[test]
    fn other_forms_are_refused() {
        for bad in [
            "orders",
            "/queue/orders",
            "/queues/",
            "/queues/a/b",
            "/exchanges/",
            "/exchanges/x/a/b",
            "/queues/%zz",
        ] {
            assert!(target(bad).is_err(), "{bad}");
        }
        assert_eq!(target("/exchanges/amq.default/q"), Err(AddressError::DefaultExchange));
        let long = "n".repeat(256);
        assert!(target(&format!("/queues/{long}")).is_err() && source(&format!("/queues/{long}")).is_err());
        assert!(target(&format!("/exchanges/x/{long}")).is_err());
        assert!(source("/exchanges/x").is_err());
    }
}
