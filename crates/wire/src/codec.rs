//! Primitive AMQP 0-9-1 data types (§4.2.5): bounds-checked readers over
//! [`Bytes`], writers into [`BytesMut`], and the [`Arg`] trait the method
//! tables use to encode, decode and size each argument, including the packing
//! of consecutive `bit` arguments into one octet (§4.2.5.2).
//!
//! Every reader returns [`Malformed`] instead of panicking when the input is
//! short; callers turn it into a [`crate::DecodeError`] that knows the class
//! and method being decoded.

use bytes::{Buf, BufMut, Bytes, BytesMut};

use crate::field_table::FieldTable;
use crate::types::{LongStr, ShortStr};

/// Why an argument could not be decoded (a human-readable detail text).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Malformed(pub(crate) String);

impl Malformed {
    /// The input ended before `what` was complete.
    pub(crate) fn truncated(what: &str) -> Malformed {
        Malformed(format!("truncated {what}"))
    }
}

/// Result of a primitive decode.
pub(crate) type Res<T> = Result<T, Malformed>;

/// Fails unless `buf` holds at least `n` more octets.
fn need(buf: &Bytes, n: usize, what: &str) -> Res<()> {
    if buf.remaining() < n {
        Err(Malformed::truncated(what))
    } else {
        Ok(())
    }
}

/// octet (§4.2.5.1).
pub(crate) fn get_u8(buf: &mut Bytes, what: &str) -> Res<u8> {
    need(buf, 1, what)?;
    Ok(buf.get_u8())
}

/// short, network byte order (§4.2.5.1).
pub(crate) fn get_u16(buf: &mut Bytes, what: &str) -> Res<u16> {
    need(buf, 2, what)?;
    Ok(buf.get_u16())
}

/// long, network byte order (§4.2.5.1).
pub(crate) fn get_u32(buf: &mut Bytes, what: &str) -> Res<u32> {
    need(buf, 4, what)?;
    Ok(buf.get_u32())
}

/// longlong / timestamp, network byte order (§4.2.5.1, §4.2.5.4).
pub(crate) fn get_u64(buf: &mut Bytes, what: &str) -> Res<u64> {
    need(buf, 8, what)?;
    Ok(buf.get_u64())
}

/// `n` raw octets as a zero-copy slice of the input.
pub(crate) fn get_slice(buf: &mut Bytes, n: usize, what: &str) -> Res<Bytes> {
    need(buf, n, what)?;
    Ok(buf.split_to(n))
}

/// A long-string body: 4-octet length then that many octets (§4.2.5.3).
pub(crate) fn get_long_bytes(buf: &mut Bytes, what: &str) -> Res<Bytes> {
    let len = get_u32(buf, what)?;
    let len = usize::try_from(len).map_err(|_| Malformed::truncated(what))?;
    get_slice(buf, len, what)
}

/// A short string: 1-octet length then that many octets (§4.2.5.3).
pub(crate) fn get_short_str(buf: &mut Bytes, what: &str) -> Res<ShortStr> {
    let len = usize::from(get_u8(buf, what)?);
    let bytes = get_slice(buf, len, what)?;
    // A u8 length can never exceed 255, so `new` cannot fail here.
    ShortStr::new(bytes).map_err(|_| Malformed(format!("{what} longer than 255")))
}

/// Length of a long string as written on the wire: clamped to `u32::MAX`
/// (the writer emits only that many octets, so the output stays consistent).
pub(crate) fn long_len(bytes: &[u8]) -> usize {
    bytes.len().min(u32::MAX as usize)
}

/// Writes a long string (§4.2.5.3), clamping absurdly long input to 4 GiB.
pub(crate) fn put_long_bytes(out: &mut BytesMut, bytes: &[u8]) {
    let len = long_len(bytes);
    out.put_u32(u32::try_from(len).unwrap_or(u32::MAX));
    out.put_slice(&bytes[..len]);
}

/// Writes a short string (§4.2.5.3); the type guarantees `len <= 255`.
pub(crate) fn put_short_str(out: &mut BytesMut, s: &ShortStr) {
    let bytes = short_str_octets(s);
    out.put_u8(short_len(bytes));
    out.put_slice(bytes);
}

/// A short string's octets as written: 255 at most.
pub(crate) fn short_str_octets(s: &ShortStr) -> &[u8] {
    &s.as_bytes()[..s.len().min(255)]
}

/// The length octet of a short string's octets (`short_str_octets`).
pub(crate) fn short_len(bytes: &[u8]) -> u8 {
    u8::try_from(bytes.len()).unwrap_or(u8::MAX)
}

/// Whether `bytes` is UTF-8 as RabbitMQ 3.10 checks a method's short strings
/// (rabbit_binary_parser:assert_utf8, which uses xmerl_ucs:from_utf8): every
/// sequence of one to four octets in its shortest form. Unlike Rust's `str`,
/// that admits UTF-16 surrogates (U+D800..U+DFFF) and code points up to
/// U+1FFFFF; it refuses stray continuation octets, truncated sequences,
/// overlong forms and five- or six-octet sequences. Checked against RabbitMQ
/// 3.10.8 over a socket (`ED A0 80` and `F4 90 80 80` are accepted, `C0 80`,
/// `E0 9F BF`, `F0 8F BF BF` and `F8 88 80 80 80` get 501).
pub(crate) fn is_rabbit_utf8(bytes: &[u8]) -> bool {
    if std::str::from_utf8(bytes).is_ok() {
        return true;
    }
    let mut at = 0;
    while let Some(&lead) = bytes.get(at) {
        // Continuation octets after the lead, and the least code point that needs them.
        let (continuations, least) = match lead {
            0x00..=0x7F => {
                at += 1;
                continue;
            }
            0xC0..=0xDF => (1, 0x80),
            0xE0..=0xEF => (2, 0x800),
            0xF0..=0xF7 => (3, 0x1_0000),
            _ => return false,
        };
        let mut code_point = u32::from(lead & (0x7F >> (continuations + 1)));
        for offset in 1..=continuations {
            match bytes.get(at + offset) {
                Some(&next) if next & 0xC0 == 0x80 => code_point = (code_point << 6) | u32::from(next & 0x3F),
                _ => return false,
            }
        }
        if code_point < least {
            return false;
        }
        at += continuations + 1;
    }
    true
}

/// Decoding cursor for method arguments, tracking the partially consumed
/// bit-octet (§4.2.5.2: up to 8 consecutive bits share one octet, LSB first).
pub(crate) struct ArgReader {
    pub(crate) buf: Bytes,
    bits: u8,
    used: u8,
    /// Whether short strings must be UTF-8: set for methods without content,
    /// as RabbitMQ's generated decoder checks them (basic.publish is skipped
    /// "for speed", so routing keys and exchange names there are not).
    pub(crate) utf8_required: bool,
    /// Set when a short string that had to be UTF-8 was not. Reported only
    /// once the whole method decoded, as RabbitMQ checks after matching the
    /// layout (a syntax error wins).
    pub(crate) malformed_utf8: bool,
}

impl ArgReader {
    pub(crate) fn new(buf: Bytes) -> Self {
        ArgReader { buf, bits: 0, used: 8, utf8_required: false, malformed_utf8: false }
    }

    /// Ends any run of bit arguments (the next bit starts a fresh octet).
    fn end_bits(&mut self) {
        self.used = 8;
    }

    fn get_bit(&mut self) -> Res<bool> {
        if self.used >= 8 {
            self.bits = get_u8(&mut self.buf, "bit field")?;
            self.used = 0;
        }
        let bit = (self.bits >> self.used) & 1 == 1;
        self.used += 1;
        Ok(bit)
    }
}

/// Encoding cursor for method arguments with bit packing (§4.2.5.2).
pub(crate) struct ArgWriter<'a> {
    pub(crate) out: &'a mut BytesMut,
    pos: usize,
    used: u8,
}

impl<'a> ArgWriter<'a> {
    pub(crate) fn new(out: &'a mut BytesMut) -> Self {
        ArgWriter { out, pos: 0, used: 8 }
    }

    fn end_bits(&mut self) {
        self.used = 8;
    }

    fn put_bit(&mut self, bit: bool) {
        if self.used >= 8 {
            self.pos = self.out.len();
            self.out.put_u8(0);
            self.used = 0;
        }
        if bit {
            if let Some(octet) = self.out.get_mut(self.pos) {
                *octet |= 1 << self.used;
            }
        }
        self.used += 1;
    }
}

/// Size accumulator mirroring [`ArgWriter`].
pub(crate) struct ArgSize {
    pub(crate) len: usize,
    used: u8,
}

impl ArgSize {
    pub(crate) fn new() -> Self {
        ArgSize { len: 0, used: 8 }
    }

    fn add(&mut self, n: usize) {
        self.used = 8;
        self.len += n;
    }

    fn add_bit(&mut self) {
        if self.used >= 8 {
            self.len += 1;
            self.used = 0;
        }
        self.used += 1;
    }
}

/// One method argument domain (§4.2.5 / the spec's `domain` types).
pub(crate) trait Arg: Sized + Default {
    fn get(r: &mut ArgReader) -> Res<Self>;
    fn put(&self, w: &mut ArgWriter<'_>);
    fn size(&self, s: &mut ArgSize);
}

impl Arg for bool {
    fn get(r: &mut ArgReader) -> Res<Self> {
        r.get_bit()
    }
    fn put(&self, w: &mut ArgWriter<'_>) {
        w.put_bit(*self);
    }
    fn size(&self, s: &mut ArgSize) {
        s.add_bit();
    }
}

macro_rules! int_arg {
    ($ty:ty, $get:ident, $put:ident, $what:literal) => {
        impl Arg for $ty {
            fn get(r: &mut ArgReader) -> Res<Self> {
                r.end_bits();
                $get(&mut r.buf, $what)
            }
            fn put(&self, w: &mut ArgWriter<'_>) {
                w.end_bits();
                w.out.$put(*self);
            }
            fn size(&self, s: &mut ArgSize) {
                s.add(std::mem::size_of::<$ty>());
            }
        }
    };
}

int_arg!(u8, get_u8, put_u8, "octet");
int_arg!(u16, get_u16, put_u16, "short");
int_arg!(u32, get_u32, put_u32, "long");
int_arg!(u64, get_u64, put_u64, "longlong");

impl Arg for ShortStr {
    fn get(r: &mut ArgReader) -> Res<Self> {
        r.end_bits();
        let s = get_short_str(&mut r.buf, "shortstr")?;
        if r.utf8_required && !is_rabbit_utf8(s.as_bytes()) {
            r.malformed_utf8 = true;
        }
        Ok(s)
    }
    fn put(&self, w: &mut ArgWriter<'_>) {
        w.end_bits();
        put_short_str(w.out, self);
    }
    fn size(&self, s: &mut ArgSize) {
        s.add(1 + self.len());
    }
}

impl Arg for LongStr {
    fn get(r: &mut ArgReader) -> Res<Self> {
        r.end_bits();
        get_long_bytes(&mut r.buf, "longstr").map(LongStr::new)
    }
    fn put(&self, w: &mut ArgWriter<'_>) {
        w.end_bits();
        put_long_bytes(w.out, self.as_bytes());
    }
    fn size(&self, s: &mut ArgSize) {
        s.add(4 + long_len(self.as_bytes()));
    }
}

impl Arg for FieldTable {
    fn get(r: &mut ArgReader) -> Res<Self> {
        r.end_bits();
        FieldTable::decode(&mut r.buf)
    }
    fn put(&self, w: &mut ArgWriter<'_>) {
        w.end_bits();
        self.encode(w.out);
    }
    fn size(&self, s: &mut ArgSize) {
        s.add(self.encoded_len());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Nine consecutive bits occupy two octets, LSB first, and read back intact.
    #[test]
    fn nine_bits_pack_into_two_octets() {
        let bits = [true, false, true, true, false, false, false, true, true];
        let mut out = BytesMut::new();
        let mut w = ArgWriter::new(&mut out);
        let mut s = ArgSize::new();
        for b in bits {
            b.put(&mut w);
            b.size(&mut s);
        }
        assert_eq!(&out[..], &[0b1000_1101, 0b0000_0001]);
        assert_eq!(s.len, 2);
        let mut r = ArgReader::new(out.freeze());
        for b in bits {
            assert_eq!(bool::get(&mut r), Ok(b));
        }
        assert!(r.buf.is_empty());
    }

    /// A non-bit argument between bits forces the next bit into a new octet.
    #[test]
    fn non_bit_argument_breaks_bit_run() {
        let mut out = BytesMut::new();
        let mut w = ArgWriter::new(&mut out);
        true.put(&mut w);
        7u8.put(&mut w);
        true.put(&mut w);
        assert_eq!(&out[..], &[1, 7, 1]);
    }

    /// The UTF-8 check accepts what RabbitMQ 3.10.8 accepted over a socket and
    /// refuses what it answered with 501.
    #[test]
    fn rabbit_utf8_matches_what_rabbitmq_accepts() {
        let accepted: [&[u8]; 9] = [
            b"",
            b"plain",
            "é€😀".as_bytes(),
            b"q\x00r",
            b"q\xed\xa0\x80",
            b"q\xed\xbf\xbf",
            b"q\xef\xbf\xbe",
            b"q\xf4\x90\x80\x80",
            b"q\xf7\xbf\xbf\xbf",
        ];
        for bytes in accepted {
            assert!(is_rabbit_utf8(bytes), "{bytes:x?}");
        }
        let refused: [&[u8]; 12] = [
            b"x\xff",
            b"x\x80y",
            b"q\xc0\x80",
            b"q\xc1\xbf",
            b"q\xe0\x9f\xbf",
            b"q\xf0\x8f\xbf\xbf",
            b"q\xe2\x82",
            b"q\xc2",
            b"q\xc2\xc0",
            b"q\xfe",
            b"q\xf8\x88\x80\x80\x80",
            b"q\xfc\x84\x80\x80\x80\x80",
        ];
        for bytes in refused {
            assert!(!is_rabbit_utf8(bytes), "{bytes:x?}");
        }
    }

    /// Reading past the end yields `Malformed`, never a panic.
    #[test]
    fn short_input_is_malformed() {
        let mut r = ArgReader::new(Bytes::from_static(&[0, 1, 2]));
        assert!(u32::get(&mut r).is_err());
        let mut r = ArgReader::new(Bytes::from_static(&[5, b'a']));
        assert!(ShortStr::get(&mut r).is_err());
        let mut r = ArgReader::new(Bytes::from_static(&[0, 0, 0, 9, 1]));
        assert!(LongStr::get(&mut r).is_err());
    }
}
