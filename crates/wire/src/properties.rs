//! Basic-class content properties (§4.2.6.1 content header, amqp0-9-1.xml
//! class `basic` fields).
//!
//! Encoding: a 16-bit property-flags word — bit 15 for the first property
//! (content-type) down to bit 2 for the fourteenth (cluster-id); bit 0 says
//! another flags word follows — then each present property in order. Only
//! present properties occupy space.

mod encoded;
mod layout;

use bytes::{Buf, BufMut, Bytes, BytesMut};

use crate::codec::{put_short_str, Malformed, Res};
use crate::error::DecodeError;
use crate::field_table::FieldTable;
use crate::types::ShortStr;
pub use encoded::EncodedProperties;
use layout::*;

/// Class id of `basic`, the only class with content properties.
const BASIC_CLASS_ID: u16 = 60;

/// The basic-class message properties; `None` means absent on the wire.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct BasicProperties {
    /// MIME content type.
    pub content_type: Option<ShortStr>,
    /// MIME content encoding.
    pub content_encoding: Option<ShortStr>,
    /// Application headers.
    pub headers: Option<FieldTable>,
    /// 1 = non-persistent, 2 = persistent.
    pub delivery_mode: Option<u8>,
    /// Priority 0-9.
    pub priority: Option<u8>,
    /// Application correlation id.
    pub correlation_id: Option<ShortStr>,
    /// Address to reply to.
    pub reply_to: Option<ShortStr>,
    /// Per-message TTL in milliseconds, as a decimal string (RabbitMQ).
    pub expiration: Option<ShortStr>,
    /// Application message id.
    pub message_id: Option<ShortStr>,
    /// Message timestamp (POSIX seconds).
    pub timestamp: Option<u64>,
    /// Message type name (the spec's `type`).
    pub kind: Option<ShortStr>,
    /// Creating user id (RabbitMQ validates it against the connection user).
    pub user_id: Option<ShortStr>,
    /// Creating application id.
    pub app_id: Option<ShortStr>,
    /// Deprecated cluster id.
    pub cluster_id: Option<ShortStr>,
}

impl BasicProperties {
    /// The property-flags word for the present properties.
    fn flags(&self) -> u16 {
        let mut flags = 0;
        let mut set = |present: bool, bit: u16| {
            if present {
                flags |= bit;
            }
        };
        set(self.content_type.is_some(), CONTENT_TYPE);
        set(self.content_encoding.is_some(), CONTENT_ENCODING);
        set(self.headers.is_some(), HEADERS);
        set(self.delivery_mode.is_some(), DELIVERY_MODE);
        set(self.priority.is_some(), PRIORITY);
        set(self.correlation_id.is_some(), CORRELATION_ID);
        set(self.reply_to.is_some(), REPLY_TO);
        set(self.expiration.is_some(), EXPIRATION);
        set(self.message_id.is_some(), MESSAGE_ID);
        set(self.timestamp.is_some(), TIMESTAMP);
        set(self.kind.is_some(), TYPE);
        set(self.user_id.is_some(), USER_ID);
        set(self.app_id.is_some(), APP_ID);
        set(self.cluster_id.is_some(), CLUSTER_ID);
        flags
    }

    /// The short-string properties in wire order with their flag bit.
    fn short_strs(&self) -> [(&Option<ShortStr>, u16); 10] {
        [
            (&self.content_type, CONTENT_TYPE),
            (&self.content_encoding, CONTENT_ENCODING),
            (&self.correlation_id, CORRELATION_ID),
            (&self.reply_to, REPLY_TO),
            (&self.expiration, EXPIRATION),
            (&self.message_id, MESSAGE_ID),
            (&self.kind, TYPE),
            (&self.user_id, USER_ID),
            (&self.app_id, APP_ID),
            (&self.cluster_id, CLUSTER_ID),
        ]
    }

    /// Encoded size: flags word plus the present properties.
    pub fn encoded_len(&self) -> usize {
        let strs: usize = self.short_strs().iter().filter_map(|(s, _)| s.as_ref().map(|s| 1 + s.len())).sum();
        2 + strs
            + self.headers.as_ref().map_or(0, FieldTable::encoded_len)
            + usize::from(self.delivery_mode.is_some())
            + usize::from(self.priority.is_some())
            + self.timestamp.map_or(0, |_| 8)
    }

    /// Appends the flags word and the present properties in spec order.
    pub fn encode(&self, out: &mut BytesMut) {
        out.reserve(self.encoded_len());
        out.put_u16(self.flags());
        let put_str = |out: &mut BytesMut, s: &Option<ShortStr>| {
            if let Some(s) = s {
                put_short_str(out, s);
            }
        };
        put_str(out, &self.content_type);
        put_str(out, &self.content_encoding);
        if let Some(headers) = &self.headers {
            headers.encode(out);
        }
        if let Some(mode) = self.delivery_mode {
            out.put_u8(mode);
        }
        if let Some(priority) = self.priority {
            out.put_u8(priority);
        }
        put_str(out, &self.correlation_id);
        put_str(out, &self.reply_to);
        put_str(out, &self.expiration);
        put_str(out, &self.message_id);
        if let Some(ts) = self.timestamp {
            out.put_u64(ts);
        }
        put_str(out, &self.kind);
        put_str(out, &self.user_id);
        put_str(out, &self.app_id);
        put_str(out, &self.cluster_id);
    }

    /// Decodes flags and properties from the front of `buf`, leaving any
    /// following octets in it. A set flag bit the basic class does not
    /// define (bit 1, or any bit of a continuation word) or a truncated
    /// property is a [`DecodeError::Syntax`] for class 60, method 0.
    pub fn decode(buf: &mut Bytes) -> Result<Self, DecodeError> {
        Self::decode_inner(buf).map_err(syntax_error)
    }

    fn decode_inner(buf: &mut Bytes) -> Res<Self> {
        let mut walk = Walk::new(buf)?;
        let mut props = BasicProperties::default();
        while let Some((bit, span)) = walk.next_property()? {
            let value = buf.slice(span);
            // A short string's length came from one octet, so `ShortStr::new` cannot fail.
            let short = |value: Bytes| ShortStr::new(value).ok();
            match bit {
                CONTENT_TYPE => props.content_type = short(value),
                CONTENT_ENCODING => props.content_encoding = short(value),
                HEADERS => props.headers = Some(FieldTable::validated(value)?),
                DELIVERY_MODE => props.delivery_mode = value.first().copied(),
                PRIORITY => props.priority = value.first().copied(),
                CORRELATION_ID => props.correlation_id = short(value),
                REPLY_TO => props.reply_to = short(value),
                EXPIRATION => props.expiration = short(value),
                MESSAGE_ID => props.message_id = short(value),
                TIMESTAMP => props.timestamp = <[u8; 8]>::try_from(&value[..]).ok().map(u64::from_be_bytes),
                TYPE => props.kind = short(value),
                USER_ID => props.user_id = short(value),
                APP_ID => props.app_id = short(value),
                CLUSTER_ID => props.cluster_id = short(value),
                _ => {}
            }
        }
        buf.advance(walk.position());
        Ok(props)
    }
}

/// Maps a malformed property list to the syntax error of the basic class's content header.
fn syntax_error(Malformed(detail): Malformed) -> DecodeError {
    DecodeError::Syntax { class_id: BASIC_CLASS_ID, method_id: 0, detail }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::field_table::FieldValue;

    /// No properties encode as a zero flags word only.
    #[test]
    fn empty_properties_are_two_zero_octets() {
        let mut out = BytesMut::new();
        BasicProperties::default().encode(&mut out);
        assert_eq!(&out[..], &[0, 0]);
        assert_eq!(BasicProperties::default().encoded_len(), 2);
    }

    /// Known bytes: content-type, delivery-mode and timestamp use bits 15, 12
    /// and 6 and appear in spec order.
    #[test]
    fn known_bytes_layout() {
        let props = BasicProperties {
            content_type: Some(ShortStr::from_static("text/plain")),
            delivery_mode: Some(2),
            timestamp: Some(0x0102_0304_0506_0708),
            ..Default::default()
        };
        let mut expected = vec![0x90, 0x40, 10];
        expected.extend_from_slice(b"text/plain");
        expected.push(2);
        expected.extend_from_slice(&[1, 2, 3, 4, 5, 6, 7, 8]);
        let mut out = BytesMut::new();
        props.encode(&mut out);
        assert_eq!(&out[..], &expected[..]);
        let mut buf = Bytes::from(expected);
        assert_eq!(BasicProperties::decode(&mut buf), Ok(props));
        assert!(buf.is_empty());
    }

    /// Headers round-trip and the decoder leaves trailing octets in `buf`.
    #[test]
    fn headers_roundtrip_and_trailing_left() {
        let props = BasicProperties {
            headers: Some(FieldTable::from_entries([("x-delay", FieldValue::I32(5))])),
            cluster_id: Some(ShortStr::from_static("c")),
            ..Default::default()
        };
        let mut out = BytesMut::new();
        props.encode(&mut out);
        assert_eq!(out.len(), props.encoded_len());
        out.put_u8(0xAB);
        let mut buf = out.freeze();
        assert_eq!(BasicProperties::decode(&mut buf), Ok(props));
        assert_eq!(&buf[..], &[0xAB]);
    }

    /// A continuation word with no further flags is accepted; one with an
    /// unknown flag, or bit 1 of the first word, is a syntax error.
    #[test]
    fn continuation_and_unknown_flags() {
        let mut ok = Bytes::from_static(&[0x00, 0x01, 0x00, 0x00]);
        assert_eq!(BasicProperties::decode(&mut ok), Ok(BasicProperties::default()));
        let mut bad = Bytes::from_static(&[0x00, 0x01, 0x80, 0x00]);
        assert!(matches!(BasicProperties::decode(&mut bad), Err(DecodeError::Syntax { class_id: 60, .. })));
        let mut bit1 = Bytes::from_static(&[0x00, 0x02]);
        assert!(BasicProperties::decode(&mut bit1).is_err());
    }

    /// A flagged property missing from the input is a syntax error.
    #[test]
    fn truncated_property_is_syntax_error() {
        let mut buf = Bytes::from_static(&[0x80, 0x00, 5, b'a']);
        assert!(matches!(BasicProperties::decode(&mut buf), Err(DecodeError::Syntax { .. })));
    }
}
