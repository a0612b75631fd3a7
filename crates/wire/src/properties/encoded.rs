//! [`EncodedProperties`]: a message's properties as they travel — the content header's property
//! flags and property list as one [`Bytes`], a zero-copy slice of the header frame it came in.
//!
//! A broker forwards most messages without looking at most of their properties, so it keeps them
//! encoded: a delivery writes the received bytes straight into the socket buffer, as RabbitMQ
//! reuses a message's `properties_bin` until something changes it (`rabbit_binary_generator`).
//! The few properties a broker acts on are read in place ([`EncodedProperties::delivery_mode`],
//! [`EncodedProperties::headers`], ...), without building a [`BasicProperties`]; whoever changes
//! properties decodes, edits and encodes again ([`EncodedProperties::edited`]).
//!
//! Validated once, when made ([`EncodedProperties::split_from`] with the same rules and errors as
//! [`BasicProperties::decode`], or encoded from a `BasicProperties`), so reading never fails.

use std::fmt;
use std::ops::Range;

use bytes::{BufMut, Bytes, BytesMut};

use super::layout::{Walk, DELIVERY_MODE, EXPIRATION, HEADERS, MESSAGE_ID, PRIORITY, REPLY_TO, USER_ID};
use super::{syntax_error, BasicProperties};
use crate::codec::Res;
use crate::error::DecodeError;
use crate::field_table::FieldTable;
use crate::types::ShortStr;

/// No properties: a zero flags word.
const NONE: &[u8] = &[0, 0];

/// Property flags plus property list, validated; equality compares the encoding.
#[derive(Clone, PartialEq, Eq)]
pub struct EncodedProperties {
    raw: Bytes,
}

impl EncodedProperties {
    /// Takes the flags and properties from the front of `buf`, leaving any following octets in
    /// it; validated as [`BasicProperties::decode`] does, with the same errors.
    pub fn split_from(buf: &mut Bytes) -> Result<Self, DecodeError> {
        let len = validate(buf).map_err(syntax_error)?;
        Ok(EncodedProperties { raw: buf.split_to(len) })
    }

    /// All properties, decoded (strings and the headers table stay slices of the encoding).
    pub fn decode(&self) -> BasicProperties {
        let decoded = BasicProperties::decode(&mut self.raw.clone());
        debug_assert!(decoded.is_ok(), "validated when made");
        decoded.unwrap_or_default()
    }

    /// The properties with `edit` applied, encoded again.
    pub fn edited(&self, edit: impl FnOnce(&mut BasicProperties)) -> EncodedProperties {
        let mut properties = self.decode();
        edit(&mut properties);
        EncodedProperties::from(&properties)
    }

    /// The encoding: flags word(s), then the present properties.
    pub fn as_bytes(&self) -> &[u8] {
        &self.raw
    }

    /// Octets of the encoding.
    pub fn encoded_len(&self) -> usize {
        self.raw.len()
    }

    /// Appends the encoding as it is.
    pub fn encode(&self, out: &mut BytesMut) {
        out.put_slice(&self.raw);
    }

    /// The `headers` table.
    pub fn headers(&self) -> Option<FieldTable> {
        self.span(HEADERS).map(|span| FieldTable::prevalidated(self.raw.slice(span)))
    }

    /// `delivery-mode`: 2 is persistent.
    pub fn delivery_mode(&self) -> Option<u8> {
        self.octet(DELIVERY_MODE)
    }

    /// `priority`.
    pub fn priority(&self) -> Option<u8> {
        self.octet(PRIORITY)
    }

    /// `reply-to`.
    pub fn reply_to(&self) -> Option<ShortStr> {
        self.short_str(REPLY_TO)
    }

    /// `expiration`: a per-message TTL as text.
    pub fn expiration(&self) -> Option<ShortStr> {
        self.short_str(EXPIRATION)
    }

    /// `message-id`.
    pub fn message_id(&self) -> Option<ShortStr> {
        self.short_str(MESSAGE_ID)
    }

    /// `user-id`.
    pub fn user_id(&self) -> Option<ShortStr> {
        self.short_str(USER_ID)
    }

    /// Where the value of the property with flag `bit` sits, when present.
    #[inline]
    fn span(&self, bit: u16) -> Option<Range<usize>> {
        // Most messages set few properties: the first flags word (validated when made) says
        // whether this one is there at all, without walking. Inlined, so asking for a property
        // a message does not have (most of the broker's questions, on every publish) costs a
        // test, not a call.
        let first_word = match self.raw.as_ref() {
            [high, low, ..] => u16::from_be_bytes([*high, *low]),
            _ => return None,
        };
        if first_word & bit == 0 {
            return None;
        }
        self.walk_to(bit)
    }

    fn walk_to(&self, bit: u16) -> Option<Range<usize>> {
        let found = Walk::new(&self.raw).and_then(|walk| walk.find(bit));
        debug_assert!(found.is_ok(), "validated when made");
        found.ok().flatten()
    }

    #[inline]
    fn octet(&self, bit: u16) -> Option<u8> {
        self.span(bit).and_then(|span| self.raw.get(span.start).copied())
    }

    #[inline]
    fn short_str(&self, bit: u16) -> Option<ShortStr> {
        // The length came from one octet, so `ShortStr::new` cannot fail.
        self.span(bit).and_then(|span| ShortStr::new(self.raw.slice(span)).ok())
    }
}

impl Default for EncodedProperties {
    /// No properties (no allocation).
    fn default() -> Self {
        EncodedProperties { raw: Bytes::from_static(NONE) }
    }
}

impl From<&BasicProperties> for EncodedProperties {
    fn from(properties: &BasicProperties) -> Self {
        if properties.flags() == 0 {
            return EncodedProperties::default();
        }
        let mut out = BytesMut::with_capacity(properties.encoded_len());
        properties.encode(&mut out);
        EncodedProperties { raw: out.freeze() }
    }
}

impl From<BasicProperties> for EncodedProperties {
    fn from(properties: BasicProperties) -> Self {
        EncodedProperties::from(&properties)
    }
}

impl fmt::Debug for EncodedProperties {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("EncodedProperties").field(&self.decode()).finish()
    }
}

/// Checks an encoding at the front of `buf` (the headers table in full); returns its length.
fn validate(buf: &Bytes) -> Res<usize> {
    let mut walk = Walk::new(buf)?;
    while let Some((bit, span)) = walk.next_property()? {
        if bit == HEADERS {
            FieldTable::validated(buf.slice(span))?;
        }
    }
    Ok(walk.position())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::field_table::FieldValue;

    fn s(text: &'static str) -> Option<ShortStr> {
        Some(ShortStr::from_static(text))
    }

    /// The properties the broker reads are read in place, equal to what a full decode gives.
    #[test]
    fn accessors_read_in_place() {
        let properties = BasicProperties {
            content_type: s("text/plain"),
            headers: Some(FieldTable::from_entries([("x-delay", FieldValue::I32(5))])),
            delivery_mode: Some(2),
            priority: Some(7),
            reply_to: s("amq.rabbitmq.reply-to"),
            expiration: s("60000"),
            timestamp: Some(9),
            user_id: s("guest"),
            ..Default::default()
        };
        let encoded = EncodedProperties::from(&properties);
        assert_eq!(encoded.decode(), properties);
        assert_eq!(encoded.headers(), properties.headers);
        assert_eq!(encoded.delivery_mode(), Some(2));
        assert_eq!(encoded.priority(), Some(7));
        assert_eq!(encoded.reply_to(), properties.reply_to);
        assert_eq!(encoded.expiration(), properties.expiration);
        assert_eq!(encoded.user_id(), properties.user_id);
        let none = EncodedProperties::default();
        assert_eq!((none.as_bytes(), none.headers(), none.priority()), (NONE, None, None));
    }

    /// Splitting keeps a slice of the input (no copy) and leaves what follows.
    #[test]
    fn split_from_slices_the_input() {
        let mut input = BytesMut::new();
        BasicProperties { delivery_mode: Some(1), ..Default::default() }.encode(&mut input);
        input.put_u8(0xAB);
        let mut buf = input.freeze();
        let start = buf.as_ptr();
        let encoded = EncodedProperties::split_from(&mut buf).unwrap();
        assert_eq!(encoded.as_bytes().as_ptr(), start);
        assert_eq!((encoded.encoded_len(), &buf[..]), (3, &[0xAB][..]));
    }

    /// A continuation word is kept as sent; an unknown flag or a bad table is refused.
    #[test]
    fn validation_matches_the_decoder() {
        let mut continued = Bytes::from_static(&[0x10, 0x01, 0x00, 0x00, 2]);
        let encoded = EncodedProperties::split_from(&mut continued).unwrap();
        assert_eq!((encoded.as_bytes().len(), encoded.delivery_mode()), (5, Some(2)));
        for bad in [&[0x00, 0x02][..], &[0x20, 0x00, 0, 0, 0, 2, 1, b'k'], &[0x80, 0x00, 5, b'a']] {
            let expected = BasicProperties::decode(&mut Bytes::from_static(bad)).unwrap_err();
            assert_eq!(EncodedProperties::split_from(&mut Bytes::from_static(bad)), Err(expected));
        }
    }

    /// Editing decodes, changes and encodes again; the original is untouched.
    #[test]
    fn edited_re_encodes() {
        let original = EncodedProperties::from(BasicProperties { expiration: s("5"), ..Default::default() });
        let edited = original.edited(|p| p.expiration = None);
        assert_eq!((original.expiration(), edited.as_bytes()), (s("5"), NONE));
    }
}
