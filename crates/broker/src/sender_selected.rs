//! Sender-selected distribution, RabbitMQ's extension (docs: "Sender-selected Distribution"): the
//! `CC` and `BCC` message headers, arrays of long strings, name more routing keys. The message goes
//! through the same exchange with its routing key and with each of these (a queue still gets it
//! once), and `BCC` is removed before the message is stored or delivered; `CC` stays.
//!
//! The rules are rabbit_basic:header_routes/1 (RabbitMQ 3.10): header names are case-sensitive; an
//! array's elements that are not long strings are skipped; any other value type, void included,
//! refuses the publish with 406 "invalid message: {unacceptable_type_in_header,"CC",longstr}".
//! Routing with the keys is `routing.rs`; dead-lettering routes again with the `CC` keys the
//! message still carries (the `BCC` keys are gone with the header, unlike RabbitMQ, which keeps
//! them in its message record).

use bytes::Bytes;
use hourglass_wire::{EncodedProperties, FieldTable, FieldValue};

use crate::api::AmqpError;
use crate::errors;

/// The header with keys that are delivered along with the message.
const CC: &str = "CC";
/// The header with keys that are removed from the message before it is stored.
const BCC: &str = "BCC";

/// The extra routing keys of one publish. Empty, without allocating, for a message without
/// `CC`/`BCC` headers.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct HeaderRoutes {
    /// `CC` keys then `BCC` keys, as slices of the message's properties.
    keys: Vec<Bytes>,
    /// Whether a `BCC` header is present (even an empty array): it must be removed.
    bcc: bool,
}

impl HeaderRoutes {
    /// Reads the `CC` and `BCC` headers of `properties`.
    pub(crate) fn read(properties: &EncodedProperties) -> Result<HeaderRoutes, AmqpError> {
        let Some(headers) = properties.headers() else { return Ok(HeaderRoutes::default()) };
        HeaderRoutes::from_headers(&headers)
    }

    /// Reads the `CC` and `BCC` entries of a headers table.
    pub(crate) fn from_headers(headers: &FieldTable) -> Result<HeaderRoutes, AmqpError> {
        let mut routes = HeaderRoutes::default();
        for name in [CC, BCC] {
            let Some(value) = headers.get(name) else { continue };
            let FieldValue::Array(keys) = value else {
                return Err(errors::precondition_failed(format!(
                    "invalid message: {{unacceptable_type_in_header,\"{name}\",{}}}",
                    value.type_name()
                )));
            };
            routes.bcc |= name == BCC;
            routes.keys.extend(keys.iter().filter_map(|key| match key {
                FieldValue::LongStr(key) => Some(key.into_bytes()),
                _ => None,
            }));
        }
        Ok(routes)
    }

    /// The keys to route with besides the routing key.
    pub(crate) fn keys(&self) -> &[Bytes] {
        &self.keys
    }

    /// The properties to store: without `BCC`, re-encoded only when there was one.
    pub(crate) fn strip(&self, properties: EncodedProperties) -> EncodedProperties {
        if !self.bcc {
            return properties;
        }
        properties.edited(|p| p.headers = p.headers.as_ref().map(|h| h.without_key(BCC)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hourglass_wire::{BasicProperties, FieldArray, LongStr};

    fn props(headers: Vec<(&str, FieldValue)>) -> EncodedProperties {
        let properties =
            BasicProperties { headers: Some(FieldTable::from_entries(headers)), ..Default::default() };
        EncodedProperties::from(&properties)
    }

    fn keys(values: &[&str]) -> FieldValue {
        FieldValue::Array(FieldArray::from_values(
            values.iter().map(|v| FieldValue::LongStr(LongStr::from(*v))),
        ))
    }

    /// CC keys come before BCC keys; elements that are not long strings are skipped, as RabbitMQ.
    #[test]
    fn cc_and_bcc_keys_are_read_and_other_elements_skipped() {
        let bcc = FieldValue::Array(FieldArray::from_values([
            FieldValue::LongStr(LongStr::from("b")),
            FieldValue::I32(5),
        ]));
        let routes = HeaderRoutes::read(&props(vec![("BCC", bcc), ("CC", keys(&["a1", "a2"]))])).unwrap();
        assert_eq!(routes.keys(), [Bytes::from("a1"), Bytes::from("a2"), Bytes::from("b")]);
        assert!(routes.bcc);
    }

    /// A `CC` that is not an array refuses the publish with RabbitMQ's 406 text.
    #[test]
    fn non_array_header_is_refused_with_its_type() {
        let error =
            HeaderRoutes::read(&props(vec![("CC", FieldValue::LongStr(LongStr::from("k")))])).unwrap_err();
        assert_eq!(error.reply_code, hourglass_wire::reply_code::PRECONDITION_FAILED);
        assert_eq!(
            error.reply_text,
            "PRECONDITION_FAILED - invalid message: {unacceptable_type_in_header,\"CC\",longstr}"
        );
        assert!(HeaderRoutes::read(&props(vec![("BCC", FieldValue::Void)])).is_err());
    }

    /// Header names are case-sensitive, and properties without BCC keep their bytes.
    #[test]
    fn lowercase_names_are_ordinary_headers_and_cc_is_kept() {
        let properties = props(vec![("cc", keys(&["x"])), ("CC", keys(&["y"]))]);
        let routes = HeaderRoutes::read(&properties).unwrap();
        assert_eq!(routes.keys(), [Bytes::from("y")]);
        assert_eq!(routes.strip(properties.clone()).as_bytes(), properties.as_bytes());
    }

    /// BCC is removed from what is stored; the other headers stay.
    #[test]
    fn bcc_is_stripped() {
        let properties = props(vec![("CC", keys(&["y"])), ("BCC", keys(&[])), ("k", FieldValue::I32(1))]);
        let routes = HeaderRoutes::read(&properties).unwrap();
        assert!(routes.keys().len() == 1);
        let headers = routes.strip(properties).headers().unwrap();
        assert!(!headers.contains_key("BCC"));
        assert!(headers.contains_key("CC") && headers.contains_key("k"));
    }
}
