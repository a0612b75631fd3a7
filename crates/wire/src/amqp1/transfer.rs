//! A transfer's performative read straight from its bytes (issue 42's lean path): a publisher's
//! every message is a transfer, and the general reader builds a tree of values for it first.
//! Only the encodings a transfer's fields take in practice are read here (a described list of
//! uint, binary, bool, ubyte and null fields with no delivery state); anything else is left to
//! [`Performative::from_value`], which decides the same frame the same way (a test and the
//! `amqp1_value` fuzz target compare the two).

use bytes::Bytes;

use super::performative::Performative;
use super::value::Value;

/// The transfer at the start of `body` and the bytes it took, when it is encoded the common way.
pub fn decode_transfer(body: &[u8]) -> Option<(Performative, usize)> {
    // 0x00, smallulong 0x14 (or ulong 0x...14).
    let rest = match body {
        [0x00, 0x53, 0x14, rest @ ..] => rest,
        [0x00, 0x80, 0, 0, 0, 0, 0, 0, 0, 0x14, rest @ ..] => rest,
        _ => return None,
    };
    let head = body.len() - rest.len();
    let (count, fields, list_bytes) = match rest {
        [0x45, ..] => (0, &rest[1..1], 1),
        [0xc0, size, count, tail @ ..] => {
            let size = usize::from(*size);
            let fields = tail.get(..size.checked_sub(1)?)?;
            (usize::from(*count), fields, 2 + size)
        }
        [0xd0, s0, s1, s2, s3, c0, c1, c2, c3, tail @ ..] => {
            let size = usize::try_from(u32::from_be_bytes([*s0, *s1, *s2, *s3])).ok()?;
            let count = usize::try_from(u32::from_be_bytes([*c0, *c1, *c2, *c3])).ok()?;
            let fields = tail.get(..size.checked_sub(4)?)?;
            (count, fields, 5 + size)
        }
        _ => return None,
    };
    let mut reader = Fields { bytes: fields, at: 0 };
    let mut values = [Field::Null; 11];
    if count > values.len() {
        return None;
    }
    for value in values.iter_mut().take(count) {
        *value = reader.next()?;
    }
    if !reader.done() {
        return None;
    }
    let handle = values[0].uint()??;
    let delivery_id = values[1].uint()?;
    let delivery_tag = match values[2] {
        Field::Null => None,
        Field::Binary(at, len) => Some(Bytes::copy_from_slice(fields.get(at..at + len)?)),
        _ => return None,
    };
    values[3].uint()?;
    let settled = values[4].boolean()?;
    let more = values[5].boolean()?.unwrap_or(false);
    if !matches!(values[6], Field::Null | Field::Ubyte) || !matches!(values[7], Field::Null) {
        return None;
    }
    values[8].boolean()?;
    let aborted = values[9].boolean()?.unwrap_or(false);
    values[10].boolean()?;
    let transfer = Performative::Transfer {
        handle,
        delivery_id,
        delivery_tag,
        settled,
        more,
        state: Value::Null,
        aborted,
    };
    Some((transfer, head + list_bytes))
}

/// A field as read, without allocating: a binary is its place in the fields' bytes.
#[derive(Clone, Copy)]
enum Field {
    Null,
    Uint(u32),
    Ubyte,
    Bool(bool),
    Binary(usize, usize),
}

impl Field {
    /// `Some(None)` for null, `Some(Some(n))` for a uint, `None` for another type.
    fn uint(self) -> Option<Option<u32>> {
        match self {
            Field::Null => Some(None),
            Field::Uint(n) => Some(Some(n)),
            _ => None,
        }
    }

    fn boolean(self) -> Option<Option<bool>> {
        match self {
            Field::Null => Some(None),
            Field::Bool(b) => Some(Some(b)),
            _ => None,
        }
    }
}

/// The fields' bytes and how far they are read.
struct Fields<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Fields<'_> {
    fn take(&mut self, n: usize) -> Option<&[u8]> {
        let taken = self.bytes.get(self.at..self.at.checked_add(n)?)?;
        self.at += n;
        Some(taken)
    }

    fn done(&self) -> bool {
        self.at == self.bytes.len()
    }

    fn next(&mut self) -> Option<Field> {
        let code = self.take(1)?[0];
        Some(match code {
            0x40 => Field::Null,
            0x41 => Field::Bool(true),
            0x42 => Field::Bool(false),
            0x56 => match self.take(1)?[0] {
                0 => Field::Bool(false),
                1 => Field::Bool(true),
                _ => return None,
            },
            0x43 => Field::Uint(0),
            0x52 => Field::Uint(u32::from(self.take(1)?[0])),
            0x70 => {
                let b = self.take(4)?;
                Field::Uint(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
            }
            0x50 => {
                self.take(1)?;
                Field::Ubyte
            }
            0xa0 => {
                let len = usize::from(self.take(1)?[0]);
                let at = self.at;
                self.take(len)?;
                Field::Binary(at, len)
            }
            _ => return None,
        })
    }
}

#[cfg(test)]
mod tests {
    use bytes::BytesMut;

    use super::*;
    use crate::amqp1::{decode_value, encode_value};

    fn generic(body: &[u8]) -> Option<(Performative, usize)> {
        let (value, used) = decode_value(body).ok()?;
        Some((Performative::from_value(&value).ok()?, used))
    }

    #[test]
    fn the_fast_reader_reads_what_the_general_one_reads() {
        let transfers = [
            Performative::Transfer {
                handle: 0,
                delivery_id: Some(7),
                delivery_tag: Some(Bytes::from_static(b"tag")),
                settled: Some(false),
                more: false,
                state: Value::Null,
                aborted: false,
            },
            Performative::Transfer {
                handle: 300,
                delivery_id: Some(70_000),
                delivery_tag: None,
                settled: None,
                more: true,
                state: Value::Null,
                aborted: true,
            },
            Performative::Transfer {
                handle: 1,
                delivery_id: None,
                delivery_tag: None,
                settled: Some(true),
                more: false,
                state: Value::Null,
                aborted: false,
            },
        ];
        for transfer in transfers {
            let mut body = BytesMut::new();
            encode_value(&transfer.to_value(), &mut body);
            body.extend_from_slice(b"payload");
            let fast = decode_transfer(&body).expect("the common encoding");
            assert_eq!(Some(fast.clone()), generic(&body));
            assert_eq!(&body[fast.1..], b"payload");
        }
    }

    #[test]
    fn anything_else_is_left_to_the_general_reader() {
        let with_state = Performative::Transfer {
            handle: 0,
            delivery_id: Some(1),
            delivery_tag: None,
            settled: None,
            more: false,
            state: Value::Described(Box::new(Value::Ulong(0x24)), Box::new(Value::List(Vec::new()))),
            aborted: false,
        };
        let mut body = BytesMut::new();
        encode_value(&with_state.to_value(), &mut body);
        assert_eq!(decode_transfer(&body), None);
        assert!(generic(&body).is_some());
        assert_eq!(decode_transfer(&[0x00, 0x53, 0x14, 0xc0, 0x09]), None, "cut short");
        assert_eq!(decode_transfer(&[0x00, 0x53, 0x13, 0x45]), None, "a flow");
    }
}
