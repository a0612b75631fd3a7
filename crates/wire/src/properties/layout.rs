//! Where each basic-class property sits in an encoded property list (§4.2.6.1): the flag bits,
//! the wire shape of each property, and [`Walk`], which steps through the present ones with
//! bounds checks. Both [`super::BasicProperties::decode`] and [`super::EncodedProperties`] read
//! through it, so the two never disagree about what is valid.

use std::ops::Range;

use crate::codec::{Malformed, Res};

pub(super) const CONTENT_TYPE: u16 = 1 << 15;
pub(super) const CONTENT_ENCODING: u16 = 1 << 14;
pub(super) const HEADERS: u16 = 1 << 13;
pub(super) const DELIVERY_MODE: u16 = 1 << 12;
pub(super) const PRIORITY: u16 = 1 << 11;
pub(super) const CORRELATION_ID: u16 = 1 << 10;
pub(super) const REPLY_TO: u16 = 1 << 9;
pub(super) const EXPIRATION: u16 = 1 << 8;
pub(super) const MESSAGE_ID: u16 = 1 << 7;
pub(super) const TIMESTAMP: u16 = 1 << 6;
pub(super) const TYPE: u16 = 1 << 5;
pub(super) const USER_ID: u16 = 1 << 4;
pub(super) const APP_ID: u16 = 1 << 3;
pub(super) const CLUSTER_ID: u16 = 1 << 2;
/// Bit 0: another property-flags word follows (§4.2.6.1).
const CONTINUATION: u16 = 1;
/// All flags the basic class defines.
const KNOWN: u16 = 0xFFFC;

/// How one property is encoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Shape {
    /// 1-octet length, then the octets.
    ShortStr,
    /// 4-octet length, then the table's content.
    Table,
    /// One octet.
    Octet,
    /// 8 octets (timestamp).
    LongLong,
}

/// The basic class's properties in wire order: flag bit, shape, and the name errors use. The
/// property at index `i` has flag bit `15 - i`, so a walk finds a present property's entry from
/// its bit alone (`Walk::next_property`).
const PROPERTIES: [(u16, Shape, &str); 14] = [
    (CONTENT_TYPE, Shape::ShortStr, "content-type"),
    (CONTENT_ENCODING, Shape::ShortStr, "content-encoding"),
    (HEADERS, Shape::Table, "field table"),
    (DELIVERY_MODE, Shape::Octet, "delivery-mode"),
    (PRIORITY, Shape::Octet, "priority"),
    (CORRELATION_ID, Shape::ShortStr, "correlation-id"),
    (REPLY_TO, Shape::ShortStr, "reply-to"),
    (EXPIRATION, Shape::ShortStr, "expiration"),
    (MESSAGE_ID, Shape::ShortStr, "message-id"),
    (TIMESTAMP, Shape::LongLong, "timestamp"),
    (TYPE, Shape::ShortStr, "type"),
    (USER_ID, Shape::ShortStr, "user-id"),
    (APP_ID, Shape::ShortStr, "app-id"),
    (CLUSTER_ID, Shape::ShortStr, "cluster-id"),
];

// Index `i` of `PROPERTIES` holds flag bit `15 - i`, checked when this crate compiles.
const _: () = {
    let mut i = 0;
    while i < PROPERTIES.len() {
        assert!(PROPERTIES[i].0 == 0x8000 >> i);
        i += 1;
    }
};

/// Steps through the present properties of an encoded property list, front to back.
pub(super) struct Walk<'a> {
    raw: &'a [u8],
    /// The flags of the present properties not read yet: a walk visits only those, so a list
    /// with few properties (most messages) costs a step per property, not one per flag.
    unread: u16,
    /// Offset of the next unread octet.
    at: usize,
}

impl<'a> Walk<'a> {
    /// Reads the property-flags word(s). A set flag the basic class does not define (bit 1, or
    /// any bit of a continuation word) is an error.
    pub(super) fn new(raw: &'a [u8]) -> Res<Self> {
        let mut walk = Walk { raw, unread: 0, at: 0 };
        let flags = walk.flags_word()?;
        if flags & !(KNOWN | CONTINUATION) != 0 {
            return Err(Malformed(format!("unknown property flags 0x{flags:04x}")));
        }
        let mut more = flags & CONTINUATION != 0;
        while more {
            let extra = walk.flags_word()?;
            if extra & !CONTINUATION != 0 {
                return Err(Malformed(format!("unknown property flags 0x{extra:04x}")));
            }
            more = extra & CONTINUATION != 0;
        }
        walk.unread = flags & KNOWN;
        Ok(walk)
    }

    /// The next present property: its flag bit and where its value sits (without a length
    /// prefix). `None` after the last one; a property running past the end is an error.
    pub(super) fn next_property(&mut self) -> Res<Option<(u16, Range<usize>)>> {
        if self.unread == 0 {
            return Ok(None);
        }
        // The highest unread flag is the next present property in wire order.
        let index = self.unread.leading_zeros() as usize;
        let bit = 0x8000 >> index;
        self.unread &= !bit;
        let Some(&(_, shape, name)) = PROPERTIES.get(index) else { return Ok(None) };
        let len = match shape {
            Shape::ShortStr => usize::from(self.take(1, name)?[0]),
            Shape::Table => {
                let prefix = self.take(4, name)?;
                let len = u32::from_be_bytes([prefix[0], prefix[1], prefix[2], prefix[3]]);
                usize::try_from(len).map_err(|_| Malformed::truncated(name))?
            }
            Shape::Octet => 1,
            Shape::LongLong => 8,
        };
        let start = self.at;
        self.take(len, name)?;
        Ok(Some((bit, start..self.at)))
    }

    /// The span of the value of the property with this bit, if present.
    pub(super) fn find(mut self, bit: u16) -> Res<Option<Range<usize>>> {
        if self.unread & bit == 0 {
            return Ok(None);
        }
        while let Some((found, range)) = self.next_property()? {
            if found == bit {
                return Ok(Some(range));
            }
        }
        Ok(None)
    }

    /// Octets read so far: after the last property, the length of the whole encoding.
    pub(super) fn position(&self) -> usize {
        self.at
    }

    fn flags_word(&mut self) -> Res<u16> {
        let word = self.take(2, "property flags")?;
        Ok(u16::from_be_bytes([word[0], word[1]]))
    }

    /// The next `n` octets, failing with "truncated `what`" when fewer are left.
    fn take(&mut self, n: usize, what: &str) -> Res<&'a [u8]> {
        let end = self.at.checked_add(n).filter(|end| *end <= self.raw.len());
        let end = end.ok_or_else(|| Malformed::truncated(what))?;
        let taken = &self.raw[self.at..end];
        self.at = end;
        Ok(taken)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Present properties come out in wire order with their value spans; the walk ends after them.
    #[test]
    fn walks_present_properties_in_order() {
        // content-type "ab", delivery-mode 2, timestamp 8 octets, then a trailing octet.
        let raw = [0x90, 0x40, 2, b'a', b'b', 2, 0, 0, 0, 0, 0, 0, 0, 9, 0xAB];
        let mut walk = Walk::new(&raw).unwrap();
        assert_eq!(walk.next_property(), Ok(Some((CONTENT_TYPE, 3..5))));
        assert_eq!(walk.next_property(), Ok(Some((DELIVERY_MODE, 5..6))));
        assert_eq!(walk.next_property(), Ok(Some((TIMESTAMP, 6..14))));
        assert_eq!(walk.next_property(), Ok(None));
        assert_eq!(walk.position(), 14);
        assert_eq!(Walk::new(&raw).unwrap().find(DELIVERY_MODE), Ok(Some(5..6)));
        assert_eq!(Walk::new(&raw).unwrap().find(PRIORITY), Ok(None));
    }

    /// A headers table longer than what is left is truncated, named as the table decoder names it.
    #[test]
    fn table_past_the_end_is_truncated() {
        let raw = [0x20, 0x00, 0, 0, 0, 9, 1];
        let mut walk = Walk::new(&raw).unwrap();
        assert_eq!(walk.next_property(), Err(Malformed("truncated field table".to_owned())));
    }
}
