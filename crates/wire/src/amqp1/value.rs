//! AMQP 1.0 values (part 1.6, the type encodings): every primitive type, described types,
//! lists, maps and arrays. Decoding is bounded: nesting at most [`MAX_DEPTH`] deep, and no
//! compound type may claim more elements than it has bytes, so a few bytes never make a large
//! allocation. Encoding picks the smallest encoding of each value, as the spec recommends.

use bytes::{BufMut, Bytes, BytesMut};

/// How deep lists, maps, arrays and described values may nest in what a peer sends.
pub const MAX_DEPTH: usize = 32;

/// How many elements an array of a zero-width type (null, true, false, uint0, ulong0, list0)
/// may claim: they take no bytes, so nothing else bounds them.
pub const ZERO_WIDTH_ELEMENTS_MAX: u32 = 8;

/// How many bytes of an array's descriptor, copied into each element, may come from each byte
/// of the array after its count.
pub const DESCRIPTOR_COPIES_PER_BYTE: u64 = 4;

/// An AMQP 1.0 value.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    Null,
    Bool(bool),
    Ubyte(u8),
    Ushort(u16),
    Uint(u32),
    Ulong(u64),
    Byte(i8),
    Short(i16),
    Int(i32),
    Long(i64),
    Float(f32),
    Double(f64),
    Decimal32([u8; 4]),
    Decimal64([u8; 8]),
    Decimal128([u8; 16]),
    Char(char),
    /// Milliseconds since the Unix epoch.
    Timestamp(i64),
    Uuid([u8; 16]),
    Binary(Bytes),
    String(String),
    /// ASCII (part 1.6.21).
    Symbol(String),
    List(Vec<Value>),
    /// Pairs in order; keys need not be unique in what a peer sends.
    Map(Vec<(Value, Value)>),
    /// Elements of one type, each encoded with the array's one constructor.
    Array(Vec<Value>),
    /// A descriptor (a symbol or an unsigned long, part 1.5) and the value it describes.
    Described(Box<Value>, Box<Value>),
}

/// Why bytes are not an AMQP 1.0 value or frame.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Amqp1DecodeError {
    #[error("the value ends before its encoding does")]
    Truncated,
    #[error("format code 0x{0:02x} is not an AMQP 1.0 type")]
    FormatCode(u8),
    #[error("values nest more than {MAX_DEPTH} deep")]
    TooDeep,
    #[error("a compound value claims {count} elements in {size} bytes")]
    CountExceedsSize { count: u32, size: u32 },
    #[error("an array's descriptor is neither a ulong nor a symbol")]
    ArrayDescriptor,
    #[error("an array copies its descriptor into {count} elements, too many for its {size} bytes")]
    DescriptorCopies { count: u32, size: u32 },
    #[error("a compound value's elements do not fill its {0} bytes exactly")]
    SizeMismatch(u32),
    #[error("a map has an odd number of elements ({0})")]
    OddMap(u32),
    #[error("a string is not UTF-8")]
    NotUtf8,
    #[error("a symbol is not ASCII")]
    NotAscii,
    #[error("0x{0:08x} is not a Unicode scalar value")]
    NotAChar(u32),
    #[error("an array's element type 0x{0:02x} is not allowed there")]
    ArrayElement(u8),
    #[error("frame type {0} is neither AMQP (0) nor SASL (1)")]
    FrameType(u8),
    #[error("frame size {size} with data offset {doff}: the body would start before the header ends or after the frame")]
    FrameLayout { size: u32, doff: u8 },
    #[error("frame size {size} is over the negotiated maximum {max}")]
    FrameTooLarge { size: u32, max: u32 },
}

type Result<T> = std::result::Result<T, Amqp1DecodeError>;

/// Decodes one value from the start of `bytes`; returns it and how many bytes it took.
pub fn decode_value(bytes: &[u8]) -> Result<(Value, usize)> {
    let mut reader = Reader { bytes, at: 0, build: true };
    let value = reader.value(0)?;
    Ok((value, reader.at))
}

/// How many bytes the value at the start of `bytes` takes, checked exactly as [`decode_value`]
/// checks it (it fails on the same bytes with the same error) but building nothing: a large
/// message body is measured without a tree 30 times its size.
pub fn value_len(bytes: &[u8]) -> Result<usize> {
    let mut reader = Reader { bytes, at: 0, build: false };
    reader.value(0)?;
    Ok(reader.at)
}

/// Appends `value`'s smallest encoding to `out`.
pub fn encode_value(value: &Value, out: &mut BytesMut) {
    encode(value, out, false);
}

/// The bytes of an encoded binary (checked by [`value_len`]): what follows its size; `None` for
/// another type.
pub fn encoded_binary(encoded: &[u8]) -> Option<&[u8]> {
    variable_content(encoded, (0xa0, 0xb0))
}

/// The UTF-8 bytes of an encoded string (checked by [`value_len`]); `None` for another type.
pub fn encoded_string(encoded: &[u8]) -> Option<&[u8]> {
    variable_content(encoded, (0xa1, 0xb1))
}

fn variable_content(encoded: &[u8], (short, long): (u8, u8)) -> Option<&[u8]> {
    match encoded {
        [code, _, rest @ ..] if *code == short => Some(rest),
        [code, _, _, _, _, rest @ ..] if *code == long => Some(rest),
        _ => None,
    }
}

/// An encoded list's (checked by [`value_len`]) count and its elements' encodings, one after
/// another; `None` for another type.
pub fn encoded_list(encoded: &[u8]) -> Option<(usize, &[u8])> {
    match encoded {
        [0x45] => Some((0, &[])),
        [0xc0, _, count, items @ ..] => Some((usize::from(*count), items)),
        [0xd0, _, _, _, _, c0, c1, c2, c3, items @ ..] => {
            Some((u32::from_be_bytes([*c0, *c1, *c2, *c3]) as usize, items))
        }
        _ => None,
    }
}

/// Appends a list of `count` elements whose encodings, one after another, are `items`: what
/// `encode_value` writes for that list when each element is encoded as in `items`.
pub fn encode_list_of_encoded(count: usize, items: &[u8], out: &mut BytesMut) {
    if count == 0 {
        out.put_u8(0x45);
    } else {
        compound(out, (0xc0, 0xd0), count, items, false);
    }
}

/// Appends `value`'s encoding: the smallest, or with `wide` the one every value of its type can
/// share as an array's element (the full-width integers and booleans, 4-byte sizes).
fn encode(value: &Value, out: &mut BytesMut, wide: bool) {
    match value {
        Value::Null => out.put_u8(0x40),
        Value::Bool(on) if wide => out.put_slice(&[0x56, u8::from(*on)]),
        Value::Bool(true) => out.put_u8(0x41),
        Value::Bool(false) => out.put_u8(0x42),
        Value::Ubyte(v) => out.put_slice(&[0x50, *v]),
        Value::Ushort(v) => {
            out.put_u8(0x60);
            out.put_u16(*v);
        }
        Value::Uint(0) if !wide => out.put_u8(0x43),
        Value::Uint(v) if *v <= 0xff && !wide => out.put_slice(&[0x52, *v as u8]),
        Value::Uint(v) => {
            out.put_u8(0x70);
            out.put_u32(*v);
        }
        Value::Ulong(0) if !wide => out.put_u8(0x44),
        Value::Ulong(v) if *v <= 0xff && !wide => out.put_slice(&[0x53, *v as u8]),
        Value::Ulong(v) => {
            out.put_u8(0x80);
            out.put_u64(*v);
        }
        Value::Byte(v) => out.put_slice(&[0x51, *v as u8]),
        Value::Short(v) => {
            out.put_u8(0x61);
            out.put_i16(*v);
        }
        Value::Int(v) if i8::try_from(*v).is_ok() && !wide => out.put_slice(&[0x54, *v as u8]),
        Value::Int(v) => {
            out.put_u8(0x71);
            out.put_i32(*v);
        }
        Value::Long(v) if i8::try_from(*v).is_ok() && !wide => out.put_slice(&[0x55, *v as u8]),
        Value::Long(v) => {
            out.put_u8(0x81);
            out.put_i64(*v);
        }
        Value::Float(v) => {
            out.put_u8(0x72);
            out.put_f32(*v);
        }
        Value::Double(v) => {
            out.put_u8(0x82);
            out.put_f64(*v);
        }
        Value::Decimal32(v) => {
            out.put_u8(0x74);
            out.put_slice(v);
        }
        Value::Decimal64(v) => {
            out.put_u8(0x84);
            out.put_slice(v);
        }
        Value::Decimal128(v) => {
            out.put_u8(0x94);
            out.put_slice(v);
        }
        Value::Char(c) => {
            out.put_u8(0x73);
            out.put_u32(u32::from(*c));
        }
        Value::Timestamp(ms) => {
            out.put_u8(0x83);
            out.put_i64(*ms);
        }
        Value::Uuid(v) => {
            out.put_u8(0x98);
            out.put_slice(v);
        }
        Value::Binary(b) => variable(out, (0xa0, 0xb0), b, wide),
        Value::String(s) => variable(out, (0xa1, 0xb1), s.as_bytes(), wide),
        Value::Symbol(s) => variable(out, (0xa3, 0xb3), s.as_bytes(), wide),
        Value::List(items) => {
            let mut body = BytesMut::new();
            items.iter().for_each(|item| encode_value(item, &mut body));
            if wide {
                compound(out, (0xc0, 0xd0), items.len(), &body, wide);
            } else {
                encode_list_of_encoded(items.len(), &body, out);
            }
        }
        Value::Map(pairs) => {
            let mut body = BytesMut::new();
            for (key, value) in pairs {
                encode_value(key, &mut body);
                encode_value(value, &mut body);
            }
            compound(out, (0xc1, 0xd1), pairs.len() * 2, &body, wide);
        }
        Value::Array(items) => encode_array(items, out, wide),
        Value::Described(descriptor, value) => {
            out.put_u8(0x00);
            encode_value(descriptor, out);
            encode(value, out, wide);
        }
    }
}

/// A binary, string or symbol: the 1-byte size form up to 255 bytes (unless `wide`), else the
/// 4-byte one.
fn variable(out: &mut BytesMut, (short, long): (u8, u8), bytes: &[u8], wide: bool) {
    match u8::try_from(bytes.len()) {
        Ok(len) if !wide => out.put_slice(&[short, len]),
        _ => {
            out.put_u8(long);
            out.put_u32(bytes.len() as u32);
        }
    }
    out.put_slice(bytes);
}

/// A list, map or array: its size (count included) and count, 1 byte each when both fit
/// (unless `wide`), else 4, then `body`.
fn compound(out: &mut BytesMut, (short, long): (u8, u8), count: usize, body: &[u8], wide: bool) {
    match (u8::try_from(body.len() + 1), u8::try_from(count)) {
        (Ok(size), Ok(count)) if !wide => out.put_slice(&[short, size, count]),
        _ => {
            out.put_u8(long);
            out.put_u32((body.len() + 4) as u32);
            out.put_u32(count as u32);
        }
    }
    out.put_slice(body);
}

/// An array: one constructor (the first element's wide form, which every element of its type
/// shares), then each element's wide encoding without it.
fn encode_array(items: &[Value], out: &mut BytesMut, wide: bool) {
    let mut body = BytesMut::new();
    if items.is_empty() {
        // An array always has its element constructor (part 1.6.24); an empty one says null.
        body.put_u8(0x40);
    }
    let mut code_len = 0;
    for (at, item) in items.iter().enumerate() {
        let mut one = BytesMut::new();
        encode(item, &mut one, true);
        if at == 0 {
            code_len = constructor_len(&one);
            body.put_slice(&one[..code_len]);
        }
        body.put_slice(&one[code_len.min(one.len())..]);
    }
    compound(out, (0xe0, 0xf0), items.len(), &body, wide);
}

/// How many bytes of an encoding are its constructor: the format code, and for a described
/// value the 0x00 and the descriptor before it.
fn constructor_len(encoded: &[u8]) -> usize {
    if encoded.first() != Some(&0x00) {
        return 1;
    }
    let descriptor_len = decode_value(&encoded[1..]).map_or(0, |(_, len)| len);
    1 + descriptor_len + 1
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
    /// Whether values are built; without, every check still runs and `Value::Null` stands for
    /// whatever would have been allocated.
    build: bool,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        let end = self.at.checked_add(n).ok_or(Amqp1DecodeError::Truncated)?;
        let taken = self.bytes.get(self.at..end).ok_or(Amqp1DecodeError::Truncated)?;
        self.at = end;
        Ok(taken)
    }

    fn u8(&mut self) -> Result<u8> {
        Ok(self.take(1)?[0])
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N]> {
        let mut out = [0; N];
        out.copy_from_slice(self.take(N)?);
        Ok(out)
    }

    fn u32(&mut self) -> Result<u32> {
        Ok(u32::from_be_bytes(self.array()?))
    }

    fn value(&mut self, depth: usize) -> Result<Value> {
        if depth > MAX_DEPTH {
            return Err(Amqp1DecodeError::TooDeep);
        }
        match self.u8()? {
            0x00 => {
                let descriptor = self.value(depth + 1)?;
                let value = self.value(depth + 1)?;
                Ok(if self.build {
                    Value::Described(Box::new(descriptor), Box::new(value))
                } else {
                    Value::Null
                })
            }
            code => self.of_code(code, depth),
        }
    }

    /// The value after format code `code`.
    fn of_code(&mut self, code: u8, depth: usize) -> Result<Value> {
        Ok(match code {
            0x40 => Value::Null,
            0x41 => Value::Bool(true),
            0x42 => Value::Bool(false),
            0x56 => Value::Bool(self.u8()? != 0),
            0x50 => Value::Ubyte(self.u8()?),
            0x60 => Value::Ushort(u16::from_be_bytes(self.array()?)),
            0x70 => Value::Uint(self.u32()?),
            0x52 => Value::Uint(u32::from(self.u8()?)),
            0x43 => Value::Uint(0),
            0x80 => Value::Ulong(u64::from_be_bytes(self.array()?)),
            0x53 => Value::Ulong(u64::from(self.u8()?)),
            0x44 => Value::Ulong(0),
            0x51 => Value::Byte(self.u8()? as i8),
            0x61 => Value::Short(i16::from_be_bytes(self.array()?)),
            0x71 => Value::Int(i32::from_be_bytes(self.array()?)),
            0x54 => Value::Int(i32::from(self.u8()? as i8)),
            0x81 => Value::Long(i64::from_be_bytes(self.array()?)),
            0x55 => Value::Long(i64::from(self.u8()? as i8)),
            0x72 => Value::Float(f32::from_be_bytes(self.array()?)),
            0x82 => Value::Double(f64::from_be_bytes(self.array()?)),
            0x74 => Value::Decimal32(self.array()?),
            0x84 => Value::Decimal64(self.array()?),
            0x94 => Value::Decimal128(self.array()?),
            0x73 => {
                let scalar = self.u32()?;
                Value::Char(char::from_u32(scalar).ok_or(Amqp1DecodeError::NotAChar(scalar))?)
            }
            0x83 => Value::Timestamp(i64::from_be_bytes(self.array()?)),
            0x98 => Value::Uuid(self.array()?),
            0xa0 | 0xb0 => {
                let len = self.length(code == 0xb0)?;
                let bytes = self.take(len)?;
                if !self.build {
                    return Ok(Value::Null);
                }
                Value::Binary(Bytes::copy_from_slice(bytes))
            }
            0xa1 | 0xb1 => {
                let len = self.length(code == 0xb1)?;
                let text = std::str::from_utf8(self.take(len)?).map_err(|_| Amqp1DecodeError::NotUtf8)?;
                if !self.build {
                    return Ok(Value::Null);
                }
                Value::String(text.to_owned())
            }
            0xa3 | 0xb3 => {
                let len = self.length(code == 0xb3)?;
                let text = self.take(len)?;
                if !text.is_ascii() {
                    return Err(Amqp1DecodeError::NotAscii);
                }
                if !self.build {
                    return Ok(Value::Null);
                }
                Value::Symbol(String::from_utf8_lossy(text).into_owned())
            }
            0x45 => Value::List(Vec::new()),
            0xc0 | 0xd0 => Value::List(self.compound(code == 0xd0, depth)?.1),
            0xc1 | 0xd1 => {
                let (count, items) = self.compound(code == 0xd1, depth)?;
                if count % 2 != 0 {
                    return Err(Amqp1DecodeError::OddMap(count));
                }
                let mut pairs = Vec::with_capacity(items.len() / 2);
                let mut items = items.into_iter();
                while let (Some(key), Some(value)) = (items.next(), items.next()) {
                    pairs.push((key, value));
                }
                Value::Map(pairs)
            }
            0xe0 | 0xf0 => Value::Array(self.array_items(code == 0xf0, depth)?),
            other => return Err(Amqp1DecodeError::FormatCode(other)),
        })
    }

    /// A variable-width value's length: 1 byte, or 4 (`long`).
    fn length(&mut self, long: bool) -> Result<usize> {
        Ok(if long { self.u32()? as usize } else { usize::from(self.u8()?) })
    }

    /// A compound value's size and count.
    fn size_and_count(&mut self, long: bool) -> Result<(u32, u32)> {
        Ok(if long { (self.u32()?, self.u32()?) } else { (u32::from(self.u8()?), u32::from(self.u8()?)) })
    }

    /// A list's or map's elements, which fill its size exactly. Each element takes at least a
    /// byte, so a count over the size is refused before anything is allocated for it.
    /// Returns the count and, when building, the elements.
    fn compound(&mut self, long: bool, depth: usize) -> Result<(u32, Vec<Value>)> {
        let start = self.at;
        let (size, count) = self.size_and_count(long)?;
        if count > size {
            return Err(Amqp1DecodeError::CountExceedsSize { count, size });
        }
        let end = self.end_of(start, size, long)?;
        let mut items = Vec::with_capacity(if self.build { count as usize } else { 0 });
        for _ in 0..count {
            let item = self.value(depth + 1)?;
            if self.build {
                items.push(item);
            }
        }
        self.ends_at(end, size)?;
        Ok((count, items))
    }

    /// An array's elements: one constructor, then each element's bytes.
    ///
    /// What an array may claim is checked on what its encoding cannot shrink, so that a value
    /// that decodes still decodes once re-encoded in its smallest form:
    /// - elements of a zero-width type (null, true, false, uint0, ulong0, list0) at most
    ///   [`ZERO_WIDTH_ELEMENTS_MAX`];
    /// - other elements at most one per byte after the count;
    /// - a descriptor, copied into every element, at most [`DESCRIPTOR_COPIES_PER_BYTE`] copied
    ///   bytes per byte after the count.
    fn array_items(&mut self, long: bool, depth: usize) -> Result<Vec<Value>> {
        let start = self.at;
        let (size, count) = self.size_and_count(long)?;
        let end = self.end_of(start, size, long)?;
        if count == 0 && self.at == end {
            return Ok(Vec::new());
        }
        let after_count = self.at;
        let mut code = self.u8()?;
        let descriptor = match code {
            0x00 => {
                let descriptor_start = self.at;
                // A ulong or a symbol, in any of their encodings.
                if !matches!(self.bytes.get(self.at), Some(0x44 | 0x53 | 0x80 | 0xa3 | 0xb3)) {
                    return Err(Amqp1DecodeError::ArrayDescriptor);
                }
                let descriptor = self.value(depth + 1)?;
                code = self.u8()?;
                Some((descriptor, self.at - 1 - descriptor_start))
            }
            _ => None,
        };
        if code == 0x00 {
            return Err(Amqp1DecodeError::ArrayElement(code));
        }
        let after_count_bytes = (end - after_count) as u64;
        let zero_width = matches!(code, 0x40..=0x45);
        if (zero_width && count > ZERO_WIDTH_ELEMENTS_MAX)
            || (!zero_width && u64::from(count) > after_count_bytes)
        {
            return Err(Amqp1DecodeError::CountExceedsSize { count, size });
        }
        if let Some((_, descriptor_len)) = &descriptor {
            if u64::from(count) * *descriptor_len as u64 > DESCRIPTOR_COPIES_PER_BYTE * after_count_bytes {
                return Err(Amqp1DecodeError::DescriptorCopies { count, size });
            }
        }
        let descriptor = descriptor.map(|(descriptor, _)| descriptor);
        let mut items = Vec::with_capacity(if self.build { count as usize } else { 0 });
        for _ in 0..count {
            let item = self.of_code(code, depth + 1)?;
            if !self.build {
                continue;
            }
            items.push(match &descriptor {
                Some(d) => Value::Described(Box::new(d.clone()), Box::new(item)),
                None => item,
            });
        }
        self.ends_at(end, size)?;
        Ok(items)
    }

    /// Where a compound value that started (after its format code) at `start` ends.
    fn end_of(&self, start: usize, size: u32, long: bool) -> Result<usize> {
        let width = if long { 4 } else { 1 };
        let end = start.checked_add(width + size as usize).ok_or(Amqp1DecodeError::Truncated)?;
        if end > self.bytes.len() {
            return Err(Amqp1DecodeError::Truncated);
        }
        if end < self.at {
            return Err(Amqp1DecodeError::SizeMismatch(size));
        }
        Ok(end)
    }

    fn ends_at(&self, end: usize, size: u32) -> Result<()> {
        if self.at == end {
            Ok(())
        } else {
            Err(Amqp1DecodeError::SizeMismatch(size))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encoded(value: &Value) -> Vec<u8> {
        let mut out = BytesMut::new();
        encode_value(value, &mut out);
        out.to_vec()
    }

    fn round_trip(value: Value) {
        let bytes = encoded(&value);
        assert_eq!(decode_value(&bytes), Ok((value, bytes.len())), "{bytes:02x?}");
    }

    #[test]
    fn every_type_round_trips_in_its_smallest_encoding() {
        let values = [
            Value::Null,
            Value::Bool(true),
            Value::Bool(false),
            Value::Ubyte(200),
            Value::Ushort(65_000),
            Value::Uint(0),
            Value::Uint(255),
            Value::Uint(70_000),
            Value::Ulong(0),
            Value::Ulong(0x10),
            Value::Ulong(u64::MAX),
            Value::Byte(-3),
            Value::Short(-300),
            Value::Int(-100),
            Value::Int(1 << 20),
            Value::Long(-1),
            Value::Long(1_733_000_000_000),
            Value::Float(1.5),
            Value::Double(-2.25),
            Value::Decimal32([1, 2, 3, 4]),
            Value::Decimal64([8; 8]),
            Value::Decimal128([9; 16]),
            Value::Char('é'),
            Value::Timestamp(1_733_000_000_000),
            Value::Uuid([7; 16]),
            Value::Binary(Bytes::from_static(b"\x00\xff")),
            Value::Binary(Bytes::from(vec![1; 300])),
            Value::String("héllo".into()),
            Value::String("x".repeat(300)),
            Value::Symbol("amqp:accepted:list".into()),
            Value::List(Vec::new()),
            Value::List(vec![Value::Uint(1), Value::String("a".into()), Value::Null]),
            Value::List((0..300).map(Value::Uint).collect()),
            Value::Map(vec![(Value::Symbol("x-opt-delivery-time".into()), Value::Timestamp(5))]),
            Value::Array(vec![Value::Uint(0), Value::Uint(5), Value::Uint(70_000)]),
            Value::Array(vec![Value::Symbol("a".into()), Value::Symbol("bc".into())]),
            Value::Array(Vec::new()),
            Value::Described(Box::new(Value::Ulong(0x24)), Box::new(Value::List(Vec::new()))),
        ];
        for value in values {
            round_trip(value);
        }
    }

    /// Byte strings from the spec's encodings: an `open` performative's descriptor (smallulong
    /// 0x10) on a list of its container id, and the `accepted` outcome (0x24, list0).
    #[test]
    fn known_encodings() {
        let open = Value::Described(
            Box::new(Value::Ulong(0x10)),
            Box::new(Value::List(vec![Value::String("c1".into())])),
        );
        assert_eq!(encoded(&open), [0x00, 0x53, 0x10, 0xc0, 0x05, 0x01, 0xa1, 0x02, b'c', b'1']);
        let accepted = Value::Described(Box::new(Value::Ulong(0x24)), Box::new(Value::List(Vec::new())));
        assert_eq!(encoded(&accepted), [0x00, 0x53, 0x24, 0x45]);
        // An empty array keeps an element constructor (null): proton refuses one without.
        assert_eq!(encoded(&Value::Array(Vec::new())), [0xe0, 0x02, 0x00, 0x40]);
        assert_eq!(
            encoded(&Value::Array(vec![Value::Uint(1), Value::Uint(2)])),
            [0xe0, 0x0a, 0x02, 0x70, 0, 0, 0, 1, 0, 0, 0, 2]
        );
        // A described array: one descriptor for every element.
        let described = Value::Array(vec![
            Value::Described(Box::new(Value::Symbol("d".into())), Box::new(Value::Int(1))),
            Value::Described(Box::new(Value::Symbol("d".into())), Box::new(Value::Int(2))),
        ]);
        round_trip(described);
    }

    /// Any prefix of a valid encoding is `Truncated`, never a panic; a few bytes never claim a
    /// large allocation; nesting past the limit is refused.
    #[test]
    fn bad_input_is_refused_without_panicking() {
        let value = Value::Map(vec![
            (Value::Symbol("k".into()), Value::List(vec![Value::Array(vec![Value::Long(1 << 40)])])),
            (Value::String("s".into()), Value::Described(Box::new(Value::Ulong(1)), Box::new(Value::Null))),
        ]);
        let bytes = encoded(&value);
        for len in 0..bytes.len() {
            assert!(decode_value(&bytes[..len]).is_err(), "a prefix of {len} bytes decoded");
            assert_eq!(value_len(&bytes[..len]), decode_value(&bytes[..len]).map(|(_, used)| used));
        }
        assert_eq!(value_len(&bytes), Ok(bytes.len()));
        // list32 claiming 4 billion elements in 8 bytes.
        let bomb = [0xd0, 0, 0, 0, 8, 0xff, 0xff, 0xff, 0xff, 0x40, 0x40, 0x40, 0x40];
        assert_eq!(decode_value(&bomb), Err(Amqp1DecodeError::CountExceedsSize { count: u32::MAX, size: 8 }));
        // An array of nulls whose count is over its size.
        assert!(matches!(
            decode_value(&[0xe0, 2, 200, 0x40]),
            Err(Amqp1DecodeError::CountExceedsSize { .. })
        ));
        // Zero-width elements: a few decode, many do not, whatever the array's size says.
        assert_eq!(decode_value(&[0xe0, 2, 3, 0x40]), Ok((Value::Array(vec![Value::Null; 3]), 4)));
        assert!(matches!(
            decode_value(&[0xf0, 0, 0, 0, 5, 0, 0, 0, 9, 0x40]),
            Err(Amqp1DecodeError::CountExceedsSize { count: 9, .. })
        ));
        // A descriptor copied into every element: a 200-byte symbol into 100 ubytes.
        let mut copies = vec![0xf0, 0, 0, 1, 0x34, 0, 0, 0, 100, 0x00, 0xa3, 200];
        copies.extend([b'd'; 200]);
        copies.push(0x50);
        copies.extend([7; 100]);
        assert_eq!(copies.len() - 5, 0x134);
        assert_eq!(
            decode_value(&copies),
            Err(Amqp1DecodeError::DescriptorCopies { count: 100, size: 0x134 })
        );
        // Only a ulong or a symbol describes an array's elements.
        assert_eq!(
            decode_value(&[0xe0, 4, 1, 0x00, 0xa1, 0, 0x50, 1]),
            Err(Amqp1DecodeError::ArrayDescriptor)
        );
        let nested = |levels: usize| (0..levels).fold(Value::Null, |inner, _| Value::List(vec![inner]));
        assert!(decode_value(&encoded(&nested(MAX_DEPTH))).is_ok());
        assert_eq!(decode_value(&encoded(&nested(MAX_DEPTH + 1))).unwrap_err(), Amqp1DecodeError::TooDeep);
        assert_eq!(decode_value(&[0x01]), Err(Amqp1DecodeError::FormatCode(0x01)));
        assert_eq!(decode_value(&[0xa1, 1, 0xff]), Err(Amqp1DecodeError::NotUtf8));
        assert_eq!(decode_value(&[0xa3, 1, 0xc3]), Err(Amqp1DecodeError::NotAscii));
        assert_eq!(decode_value(&[0x73, 0, 0, 0xd8, 0]), Err(Amqp1DecodeError::NotAChar(0xd800)));
        assert_eq!(decode_value(&[0xc1, 2, 1, 0x40]), Err(Amqp1DecodeError::OddMap(1)));
        // A list whose elements end before its size says.
        assert_eq!(decode_value(&[0xc0, 3, 1, 0x40, 0x40]), Err(Amqp1DecodeError::SizeMismatch(3)));
    }

    /// What decodes re-encodes, in its smallest form, to bytes that decode again: the checks on
    /// what an array claims do not depend on how small its descriptor or its count is encoded.
    /// Each input was found by the `amqp1_value` fuzz target or shrinks the same way.
    #[test]
    fn what_decodes_decodes_again_once_re_encoded() {
        let inputs: [&[u8]; 3] = [
            // Found by the fuzzer: five described nulls, the descriptor a smallulong 0, which
            // re-encodes as ulong0, a byte shorter.
            &[
                0, 224, 5, 5, 0, 83, 0, 64, 68, 0, 0, 0, 132, 0, 0, 131, 65, 84, 0, 132, 0, 132, 1, 0, 0, 1,
                132, 0, 132, 0, 132, 1, 0, 0, 1, 132, 0, 0, 111, 0, 84, 84, 84, 84, 0, 0, 132, 83, 132, 0, 0,
                11, 0,
            ],
            // Five nulls in an array32, which re-encodes as an array8.
            &[0xf0, 0, 0, 0, 5, 0, 0, 0, 5, 0x40],
            // Described ubytes whose descriptor, a 9-byte ulong, re-encodes as a smallulong.
            &[0xe0, 16, 4, 0x00, 0x80, 0, 0, 0, 0, 0, 0, 0, 7, 0x50, 1, 2, 3, 4],
        ];
        let list = encoded(&Value::List(vec![Value::Uint(1), Value::Null]));
        assert_eq!(encoded_list(&list), Some((2, &[0x52, 1, 0x40][..])));
        assert_eq!(encoded_list(&encoded(&Value::List(Vec::new()))), Some((0, &[][..])));
        assert_eq!(encoded_binary(&encoded(&Value::Binary(Bytes::from(vec![9; 300])))), Some(&[9; 300][..]));
        assert_eq!(encoded_string(&encoded(&Value::String("hi".into()))), Some(&b"hi"[..]));
        assert_eq!(encoded_string(&encoded(&Value::Binary(Bytes::from_static(b"hi")))), None);
        for input in inputs {
            assert_eq!(value_len(input), decode_value(input).map(|(_, used)| used));
            let (value, _) = decode_value(input).expect("the input decodes");
            let once = encoded(&value);
            let (again, used) =
                decode_value(&once).unwrap_or_else(|e| panic!("{once:02x?} does not decode: {e}"));
            assert_eq!(used, once.len());
            assert_eq!(encoded(&again), once);
        }
    }
}
