//! AMQP 0-9-1 string domains (§4.2.5.3): [`ShortStr`] (at most 255 octets,
//! 1-octet length prefix) and [`LongStr`] (4-octet length prefix). Both hold
//! raw octets as [`Bytes`] — the spec does not require UTF-8 for either, and
//! decoding slices them out of the frame without copying.

use std::borrow::Cow;
use std::fmt;

use bytes::Bytes;

/// The value did not fit a short string (more than 255 octets).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TooLong;

impl fmt::Display for TooLong {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("short string longer than 255 octets")
    }
}

impl std::error::Error for TooLong {}

/// A short string (§4.2.5.3): at most 255 octets, not necessarily UTF-8.
#[derive(Clone, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
pub struct ShortStr(Bytes);

impl ShortStr {
    /// The maximum length in octets.
    pub const MAX_LEN: usize = 255;

    /// Wraps `bytes`, failing if longer than 255 octets.
    pub fn new(bytes: Bytes) -> Result<ShortStr, TooLong> {
        if bytes.len() > Self::MAX_LEN {
            Err(TooLong)
        } else {
            Ok(ShortStr(bytes))
        }
    }

    /// A short string from a literal; panics (at compile time in const
    /// context) if the literal is longer than 255 octets.
    pub const fn from_static(s: &'static str) -> ShortStr {
        assert!(s.len() <= 255, "ShortStr literal longer than 255 octets");
        ShortStr(Bytes::from_static(s.as_bytes()))
    }

    /// The raw octets.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// The octets as text, replacing invalid UTF-8 with U+FFFD.
    pub fn as_str(&self) -> Cow<'_, str> {
        String::from_utf8_lossy(&self.0)
    }

    /// Length in octets.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// True for the empty string.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The underlying buffer.
    pub fn into_bytes(self) -> Bytes {
        self.0
    }
}

impl TryFrom<&str> for ShortStr {
    type Error = TooLong;
    fn try_from(s: &str) -> Result<Self, TooLong> {
        ShortStr::new(Bytes::copy_from_slice(s.as_bytes()))
    }
}

impl TryFrom<String> for ShortStr {
    type Error = TooLong;
    fn try_from(s: String) -> Result<Self, TooLong> {
        ShortStr::new(Bytes::from(s))
    }
}

impl fmt::Debug for ShortStr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.as_str(), f)
    }
}

impl fmt::Display for ShortStr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.as_str())
    }
}

impl PartialEq<str> for ShortStr {
    fn eq(&self, other: &str) -> bool {
        self.as_bytes() == other.as_bytes()
    }
}

impl PartialEq<&str> for ShortStr {
    fn eq(&self, other: &&str) -> bool {
        self.as_bytes() == other.as_bytes()
    }
}

/// A long string (§4.2.5.3): up to 2^32-1 octets of arbitrary data.
#[derive(Clone, PartialEq, Eq, Hash, Default)]
pub struct LongStr(Bytes);

impl LongStr {
    /// Wraps `bytes`.
    pub fn new(bytes: Bytes) -> LongStr {
        LongStr(bytes)
    }

    /// The raw octets.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// The octets as text, replacing invalid UTF-8 with U+FFFD.
    pub fn as_str(&self) -> Cow<'_, str> {
        String::from_utf8_lossy(&self.0)
    }

    /// The underlying buffer.
    pub fn into_bytes(self) -> Bytes {
        self.0
    }

    /// Length in octets.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// True for the empty string.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl From<&str> for LongStr {
    fn from(s: &str) -> Self {
        LongStr(Bytes::copy_from_slice(s.as_bytes()))
    }
}

impl From<String> for LongStr {
    fn from(s: String) -> Self {
        LongStr(Bytes::from(s))
    }
}

impl From<Vec<u8>> for LongStr {
    fn from(v: Vec<u8>) -> Self {
        LongStr(Bytes::from(v))
    }
}

impl From<Bytes> for LongStr {
    fn from(b: Bytes) -> Self {
        LongStr(b)
    }
}

impl fmt::Debug for LongStr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.as_str(), f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 255 octets is accepted and 256 rejected, per the short-string limit.
    #[test]
    fn short_str_length_limit() {
        assert!(ShortStr::try_from("a".repeat(255)).is_ok());
        assert_eq!(ShortStr::try_from("a".repeat(256)), Err(TooLong));
    }

    /// Non-UTF-8 octets are kept verbatim and shown lossily.
    #[test]
    fn short_str_is_bytes_not_utf8() {
        let s = ShortStr::new(Bytes::from_static(b"a\xffb")).unwrap();
        assert_eq!(s.as_bytes(), b"a\xffb");
        assert_eq!(s.to_string(), "a\u{fffd}b");
        assert_eq!(format!("{s:?}"), "\"a\u{fffd}b\"");
    }

    /// Comparison with `str` compares octets.
    #[test]
    fn short_str_eq_str() {
        let s = ShortStr::from_static("amq.direct");
        assert!(s == "amq.direct");
        assert!(s == *"amq.direct");
        assert!(s != "amq.topic");
    }
}
