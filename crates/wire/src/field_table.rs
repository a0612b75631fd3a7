//! Field tables and field arrays (AMQP 0-9-1 §4.2.5.5 with the errata type
//! tags RabbitMQ implements, see `rabbit_binary_parser.erl` /
//! `rabbit_binary_generator.erl`).
//!
//! A [`FieldTable`] / [`FieldArray`] keeps its encoded content (without the
//! 4-octet length prefix) as a [`Bytes`] slice of the frame. It is validated
//! once when decoded (every type tag, every length, nesting depth at most
//! [`MAX_NESTING_DEPTH`]); lookups and iteration decode lazily. This keeps the
//! wire order, round-trips every tag bit-exactly (e.g. `L` stays `L`) and
//! costs no allocation on decode.
//!
//! Type tags (RabbitMQ's names, as used in its error texts, in brackets):
//! `t` bool, `b` i8 (byte), `B` u8 (unsignedbyte), `s` i16 (short),
//! `u` u16 (unsignedshort), `I` i32 (signedint), `i` u32 (unsignedint),
//! `l` and `L` i64 (long — RabbitMQ decodes *both* as signed 64-bit and
//! always emits `l`), `f` f32 (float), `d` f64 (double), `D` decimal,
//! `S` long string (longstr), `A` array, `T` timestamp, `F` table, `V` void,
//! `x` byte array (binary). Any other tag is a syntax error.

use std::fmt;

use bytes::{BufMut, Bytes, BytesMut};

use crate::codec::{get_long_bytes, get_slice, get_u16, get_u32, get_u64, get_u8};
use crate::codec::{long_len, put_long_bytes, Malformed, Res};
use crate::error::DecodeError;
use crate::types::{LongStr, ShortStr};

/// Deepest nesting of tables/arrays accepted on decode (the outermost table
/// is level 1). Bounds recursion so hostile input cannot blow the stack.
pub const MAX_NESTING_DEPTH: usize = 32;

/// One typed value inside a field table or array.
#[derive(Clone, Debug, PartialEq)]
pub enum FieldValue {
    /// `t`: boolean octet (any non-zero octet decodes as `true`).
    Bool(bool),
    /// `b`: signed 8-bit.
    I8(i8),
    /// `B`: unsigned 8-bit.
    U8(u8),
    /// `s`: signed 16-bit.
    I16(i16),
    /// `u`: unsigned 16-bit.
    U16(u16),
    /// `I`: signed 32-bit.
    I32(i32),
    /// `i`: unsigned 32-bit.
    U32(u32),
    /// `l` (and `L` on decode): signed 64-bit.
    I64(i64),
    /// `f`: IEEE-754 single.
    F32(f32),
    /// `d`: IEEE-754 double.
    F64(f64),
    /// `D`: decimal, `value / 10^scale` (RabbitMQ reads `value` unsigned).
    Decimal {
        /// Number of decimal digits.
        scale: u8,
        /// Unscaled value.
        value: u32,
    },
    /// `S`: long string.
    LongStr(LongStr),
    /// `A`: nested field array.
    Array(FieldArray),
    /// `T`: 64-bit POSIX timestamp.
    Timestamp(u64),
    /// `F`: nested field table.
    Table(FieldTable),
    /// `V`: no value.
    Void,
    /// `x`: byte array (length-prefixed like a long string).
    ByteArray(Bytes),
}

impl FieldValue {
    /// The value of any integer variant (`b B s u I i l`), widened to `i64`.
    pub fn as_i64(&self) -> Option<i64> {
        match *self {
            FieldValue::I8(v) => Some(i64::from(v)),
            FieldValue::U8(v) => Some(i64::from(v)),
            FieldValue::I16(v) => Some(i64::from(v)),
            FieldValue::U16(v) => Some(i64::from(v)),
            FieldValue::I32(v) => Some(i64::from(v)),
            FieldValue::U32(v) => Some(i64::from(v)),
            FieldValue::I64(v) => Some(v),
            _ => None,
        }
    }

    /// The octets of a long string or byte array.
    pub fn as_bytes(&self) -> Option<&[u8]> {
        match self {
            FieldValue::LongStr(s) => Some(s.as_bytes()),
            FieldValue::ByteArray(b) => Some(b),
            _ => None,
        }
    }

    /// RabbitMQ's name for this value's type, as it appears in its error
    /// texts (e.g. "invalid arg 'x-expires' for queue ...: {long, ...}").
    pub fn type_name(&self) -> &'static str {
        match self {
            FieldValue::Bool(_) => "bool",
            FieldValue::I8(_) => "byte",
            FieldValue::U8(_) => "unsignedbyte",
            FieldValue::I16(_) => "short",
            FieldValue::U16(_) => "unsignedshort",
            FieldValue::I32(_) => "signedint",
            FieldValue::U32(_) => "unsignedint",
            FieldValue::I64(_) => "long",
            FieldValue::F32(_) => "float",
            FieldValue::F64(_) => "double",
            FieldValue::Decimal { .. } => "decimal",
            FieldValue::LongStr(_) => "longstr",
            FieldValue::Array(_) => "array",
            FieldValue::Timestamp(_) => "timestamp",
            FieldValue::Table(_) => "table",
            FieldValue::Void => "void",
            FieldValue::ByteArray(_) => "binary",
        }
    }

    /// The type tag octet this value is encoded with.
    pub fn tag(&self) -> u8 {
        match self {
            FieldValue::Bool(_) => b't',
            FieldValue::I8(_) => b'b',
            FieldValue::U8(_) => b'B',
            FieldValue::I16(_) => b's',
            FieldValue::U16(_) => b'u',
            FieldValue::I32(_) => b'I',
            FieldValue::U32(_) => b'i',
            FieldValue::I64(_) => b'l',
            FieldValue::F32(_) => b'f',
            FieldValue::F64(_) => b'd',
            FieldValue::Decimal { .. } => b'D',
            FieldValue::LongStr(_) => b'S',
            FieldValue::Array(_) => b'A',
            FieldValue::Timestamp(_) => b'T',
            FieldValue::Table(_) => b'F',
            FieldValue::Void => b'V',
            FieldValue::ByteArray(_) => b'x',
        }
    }

    /// Encoded size in octets, including the tag.
    pub fn encoded_len(&self) -> usize {
        1 + match self {
            FieldValue::Bool(_) | FieldValue::I8(_) | FieldValue::U8(_) => 1,
            FieldValue::I16(_) | FieldValue::U16(_) => 2,
            FieldValue::I32(_) | FieldValue::U32(_) | FieldValue::F32(_) => 4,
            FieldValue::I64(_) | FieldValue::F64(_) | FieldValue::Timestamp(_) => 8,
            FieldValue::Decimal { .. } => 5,
            FieldValue::LongStr(s) => 4 + long_len(s.as_bytes()),
            FieldValue::ByteArray(b) => 4 + long_len(b),
            FieldValue::Array(a) => a.encoded_len(),
            FieldValue::Table(t) => t.encoded_len(),
            FieldValue::Void => 0,
        }
    }

    /// Appends tag and value.
    pub fn encode(&self, out: &mut BytesMut) {
        out.put_u8(self.tag());
        match self {
            FieldValue::Bool(v) => out.put_u8(u8::from(*v)),
            FieldValue::I8(v) => out.put_i8(*v),
            FieldValue::U8(v) => out.put_u8(*v),
            FieldValue::I16(v) => out.put_i16(*v),
            FieldValue::U16(v) => out.put_u16(*v),
            FieldValue::I32(v) => out.put_i32(*v),
            FieldValue::U32(v) => out.put_u32(*v),
            FieldValue::I64(v) => out.put_i64(*v),
            FieldValue::F32(v) => out.put_f32(*v),
            FieldValue::F64(v) => out.put_f64(*v),
            FieldValue::Decimal { scale, value } => {
                out.put_u8(*scale);
                out.put_u32(*value);
            }
            FieldValue::LongStr(s) => put_long_bytes(out, s.as_bytes()),
            FieldValue::ByteArray(b) => put_long_bytes(out, b),
            FieldValue::Array(a) => a.encode(out),
            FieldValue::Timestamp(v) => out.put_u64(*v),
            FieldValue::Table(t) => t.encode(out),
            FieldValue::Void => {}
        }
    }
}

macro_rules! field_value_from {
    ($($ty:ty => $variant:ident),* $(,)?) => {
        $(impl From<$ty> for FieldValue {
            fn from(v: $ty) -> Self {
                FieldValue::$variant(v.into())
            }
        })*
    };
}

field_value_from!(bool => Bool, i8 => I8, u8 => U8, i16 => I16, u16 => U16, i32 => I32,
    u32 => U32, i64 => I64, f32 => F32, f64 => F64, LongStr => LongStr, &str => LongStr,
    String => LongStr, FieldArray => Array, FieldTable => Table);

/// Reads one tagged value. `depth` is `Some(level of the enclosing
/// container)` while validating untrusted input, `None` when re-reading
/// content that was already validated (nested containers are then not
/// walked again).
fn read_value(buf: &mut Bytes, depth: Option<usize>) -> Res<FieldValue> {
    let tag = get_u8(buf, "field value type")?;
    let one = |buf: &mut Bytes, what| get_u8(buf, what);
    Ok(match tag {
        b't' => FieldValue::Bool(one(buf, "bool")? != 0),
        b'b' => FieldValue::I8(i8::from_be_bytes([one(buf, "byte")?])),
        b'B' => FieldValue::U8(one(buf, "unsignedbyte")?),
        b's' => FieldValue::I16(i16::from_be_bytes(get_u16(buf, "short")?.to_be_bytes())),
        b'u' => FieldValue::U16(get_u16(buf, "unsignedshort")?),
        b'I' => FieldValue::I32(i32::from_be_bytes(get_u32(buf, "signedint")?.to_be_bytes())),
        b'i' => FieldValue::U32(get_u32(buf, "unsignedint")?),
        b'l' | b'L' => FieldValue::I64(i64::from_be_bytes(get_u64(buf, "long")?.to_be_bytes())),
        b'f' => FieldValue::F32(f32::from_bits(get_u32(buf, "float")?)),
        b'd' => FieldValue::F64(f64::from_bits(get_u64(buf, "double")?)),
        b'D' => FieldValue::Decimal { scale: one(buf, "decimal")?, value: get_u32(buf, "decimal")? },
        b'S' => FieldValue::LongStr(LongStr::new(get_long_bytes(buf, "longstr")?)),
        b'A' => FieldValue::Array(FieldArray::read_nested(buf, depth)?),
        b'T' => FieldValue::Timestamp(get_u64(buf, "timestamp")?),
        b'F' => FieldValue::Table(FieldTable::read_nested(buf, depth)?),
        b'V' => FieldValue::Void,
        b'x' => FieldValue::ByteArray(get_long_bytes(buf, "binary")?),
        other => {
            return Err(Malformed(format!(
                "unknown field value type {:?} (0x{other:02x})",
                char::from(other)
            )))
        }
    })
}

/// Reads one table entry: a short-string name then a tagged value.
fn read_entry(buf: &mut Bytes, depth: Option<usize>) -> Res<(Bytes, FieldValue)> {
    let len = usize::from(get_u8(buf, "field name")?);
    let key = get_slice(buf, len, "field name")?;
    let value = read_value(buf, depth)?;
    Ok((key, value))
}

/// Fails if `level` exceeds [`MAX_NESTING_DEPTH`].
fn check_depth(level: usize) -> Res<()> {
    if level > MAX_NESTING_DEPTH {
        Err(Malformed(format!("field table nesting deeper than {MAX_NESTING_DEPTH}")))
    } else {
        Ok(())
    }
}

/// Length prefix for a container's content.
fn put_container(out: &mut BytesMut, raw: &[u8]) {
    out.put_u32(u32::try_from(raw.len()).unwrap_or(u32::MAX));
    out.put_slice(raw);
}

/// A field table (§4.2.5.5): an ordered list of (name, value) entries, stored
/// encoded. Equality and hashing compare the encoding.
#[derive(Clone, Default, PartialEq, Eq, Hash)]
pub struct FieldTable {
    raw: Bytes,
}

impl FieldTable {
    /// The empty table.
    pub fn new() -> Self {
        FieldTable::default()
    }

    /// Builds a table from entries in order. Keys longer than 255 octets
    /// cannot be encoded as a short string and are skipped (truncating could
    /// silently create duplicates). Nesting is not checked here; a table
    /// nested deeper than [`MAX_NESTING_DEPTH`] would be rejected by a peer's
    /// (and our own) decoder.
    pub fn from_entries<I, K>(entries: I) -> Self
    where
        I: IntoIterator<Item = (K, FieldValue)>,
        K: AsRef<[u8]>,
    {
        let mut out = BytesMut::new();
        for (key, value) in entries {
            put_entry(&mut out, key.as_ref(), &value);
        }
        FieldTable { raw: out.freeze() }
    }

    /// Validates `raw` (a table's content without its length prefix).
    pub fn from_raw(raw: Bytes) -> Result<Self, DecodeError> {
        validate_table(&raw, 1).map_err(|m| DecodeError::Syntax {
            class_id: 0,
            method_id: 0,
            detail: m.0,
        })?;
        Ok(FieldTable { raw })
    }

    /// A top-level table from its content (no length prefix), validated fully.
    pub(crate) fn validated(raw: Bytes) -> Res<Self> {
        validate_table(&raw, 1)?;
        Ok(FieldTable { raw })
    }

    /// A table from content validated before (a slice of an `EncodedProperties`).
    pub(crate) fn prevalidated(raw: Bytes) -> Self {
        FieldTable { raw }
    }

    /// Decodes a length-prefixed table from `buf`, validating it fully.
    pub(crate) fn decode(buf: &mut Bytes) -> Res<Self> {
        FieldTable::read_nested(buf, Some(0))
    }

    /// Reads a length-prefixed table that sits at level `depth + 1`.
    fn read_nested(buf: &mut Bytes, depth: Option<usize>) -> Res<Self> {
        let raw = get_long_bytes(buf, "field table")?;
        if let Some(depth) = depth {
            validate_table(&raw, depth + 1)?;
        }
        Ok(FieldTable { raw })
    }

    /// Appends the 4-octet length and the content.
    pub fn encode(&self, out: &mut BytesMut) {
        put_container(out, &self.raw);
    }

    /// The value of the first entry named `key`.
    pub fn get(&self, key: &str) -> Option<FieldValue> {
        self.iter_raw().find(|(k, _, _)| k.as_ref() == key.as_bytes()).map(|(_, _, v)| v)
    }

    /// True if an entry named `key` exists.
    pub fn contains_key(&self, key: &str) -> bool {
        self.get(key).is_some()
    }

    /// Entries in wire order.
    pub fn iter(&self) -> FieldTableIter<'_> {
        FieldTableIter { inner: self.iter_raw() }
    }

    fn iter_raw(&self) -> RawEntries<'_> {
        RawEntries { raw: &self.raw, rest: self.raw.clone() }
    }

    /// Number of entries (duplicates counted).
    pub fn len(&self) -> usize {
        self.iter_raw().count()
    }

    /// True if the table has no entries.
    pub fn is_empty(&self) -> bool {
        self.raw.is_empty()
    }

    /// The encoded content without the length prefix.
    pub fn raw(&self) -> &Bytes {
        &self.raw
    }

    /// Encoded size including the 4-octet length prefix.
    pub fn encoded_len(&self) -> usize {
        4 + self.raw.len()
    }

    /// A copy with the first entry named `key` replaced in place, or the
    /// entry appended if absent. Other entries keep their exact encoding.
    /// A key longer than 255 octets cannot be encoded: the table is returned
    /// unchanged.
    pub fn with_entry(&self, key: &str, value: FieldValue) -> FieldTable {
        if key.len() > ShortStr::MAX_LEN {
            return self.clone();
        }
        let mut out = BytesMut::with_capacity(self.raw.len() + key.len() + 16);
        let mut replaced = false;
        for (k, span, _) in self.iter_raw() {
            if !replaced && k.as_ref() == key.as_bytes() {
                put_entry(&mut out, key.as_bytes(), &value);
                replaced = true;
            } else {
                out.put_slice(span);
            }
        }
        if !replaced {
            put_entry(&mut out, key.as_bytes(), &value);
        }
        FieldTable { raw: out.freeze() }
    }

    /// A copy without any entry named `key`.
    pub fn without_key(&self, key: &str) -> FieldTable {
        if !self.contains_key(key) {
            return self.clone();
        }
        let mut out = BytesMut::with_capacity(self.raw.len());
        for (k, span, _) in self.iter_raw() {
            if k.as_ref() != key.as_bytes() {
                out.put_slice(span);
            }
        }
        FieldTable { raw: out.freeze() }
    }
}

/// Writes one entry; keys over 255 octets are skipped.
fn put_entry(out: &mut BytesMut, key: &[u8], value: &FieldValue) {
    if let Ok(len) = u8::try_from(key.len()) {
        out.put_u8(len);
        out.put_slice(key);
        value.encode(out);
    }
}

/// Walks every entry of a table at nesting `level`.
fn validate_table(raw: &Bytes, level: usize) -> Res<()> {
    check_depth(level)?;
    let mut rest = raw.clone();
    while !rest.is_empty() {
        read_entry(&mut rest, Some(level))?;
    }
    Ok(())
}

/// Walks every value of an array at nesting `level`.
fn validate_array(raw: &Bytes, level: usize) -> Res<()> {
    check_depth(level)?;
    let mut rest = raw.clone();
    while !rest.is_empty() {
        read_value(&mut rest, Some(level))?;
    }
    Ok(())
}

/// Entries of validated content with their exact encoded span.
struct RawEntries<'a> {
    raw: &'a Bytes,
    rest: Bytes,
}

impl<'a> Iterator for RawEntries<'a> {
    type Item = (Bytes, &'a [u8], FieldValue);

    fn next(&mut self) -> Option<Self::Item> {
        if self.rest.is_empty() {
            return None;
        }
        let start = self.raw.len() - self.rest.len();
        // Content was validated on construction; stop quietly if not.
        let (key, value) = match read_entry(&mut self.rest, None) {
            Ok(entry) => entry,
            Err(_) => {
                self.rest = Bytes::new();
                return None;
            }
        };
        let end = self.raw.len() - self.rest.len();
        let span = self.raw.get(start..end).unwrap_or_default();
        Some((key, span, value))
    }
}

/// Iterator over a table's entries in wire order.
pub struct FieldTableIter<'a> {
    inner: RawEntries<'a>,
}

impl Iterator for FieldTableIter<'_> {
    type Item = (ShortStr, FieldValue);

    fn next(&mut self) -> Option<Self::Item> {
        let (key, _, value) = self.inner.next()?;
        // Keys come from a one-octet length, so they always fit.
        Some((ShortStr::new(key).unwrap_or_default(), value))
    }
}

impl<'a> IntoIterator for &'a FieldTable {
    type Item = (ShortStr, FieldValue);
    type IntoIter = FieldTableIter<'a>;
    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

impl fmt::Debug for FieldTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

/// A field array (RabbitMQ's `A` extension): a sequence of tagged values,
/// stored encoded like [`FieldTable`].
#[derive(Clone, Default, PartialEq, Eq, Hash)]
pub struct FieldArray {
    raw: Bytes,
}

impl FieldArray {
    /// The empty array.
    pub fn new() -> Self {
        FieldArray::default()
    }

    /// Builds an array from values in order.
    pub fn from_values<I: IntoIterator<Item = FieldValue>>(values: I) -> Self {
        let mut out = BytesMut::new();
        for value in values {
            value.encode(&mut out);
        }
        FieldArray { raw: out.freeze() }
    }

    /// Reads a length-prefixed array that sits at level `depth + 1`.
    fn read_nested(buf: &mut Bytes, depth: Option<usize>) -> Res<Self> {
        let raw = get_long_bytes(buf, "field array")?;
        if let Some(depth) = depth {
            validate_array(&raw, depth + 1)?;
        }
        Ok(FieldArray { raw })
    }

    /// Appends the 4-octet length and the content.
    pub fn encode(&self, out: &mut BytesMut) {
        put_container(out, &self.raw);
    }

    /// Values in wire order.
    pub fn iter(&self) -> FieldArrayIter<'_> {
        FieldArrayIter { rest: self.raw.clone(), _array: std::marker::PhantomData }
    }

    /// Number of values.
    pub fn len(&self) -> usize {
        self.iter().count()
    }

    /// True if the array has no values.
    pub fn is_empty(&self) -> bool {
        self.raw.is_empty()
    }

    /// The encoded content without the length prefix.
    pub fn raw(&self) -> &Bytes {
        &self.raw
    }

    /// Encoded size including the 4-octet length prefix.
    pub fn encoded_len(&self) -> usize {
        4 + self.raw.len()
    }
}

/// Iterator over an array's values in wire order.
pub struct FieldArrayIter<'a> {
    rest: Bytes,
    _array: std::marker::PhantomData<&'a FieldArray>,
}

impl Iterator for FieldArrayIter<'_> {
    type Item = FieldValue;

    fn next(&mut self) -> Option<FieldValue> {
        if self.rest.is_empty() {
            return None;
        }
        match read_value(&mut self.rest, None) {
            Ok(value) => Some(value),
            Err(_) => {
                self.rest = Bytes::new();
                None
            }
        }
    }
}

impl fmt::Debug for FieldArray {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

#[cfg(test)]
mod tests;
