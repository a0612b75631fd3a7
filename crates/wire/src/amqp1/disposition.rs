//! An `accepted` disposition written straight into its bytes (issue 42's lean path): a
//! publisher's confirms become these, one per run of consecutive deliveries, and the general
//! encoder builds a tree of values for each first.

use bytes::BytesMut;

use super::frame::{encode_frame_header, FrameKind};

/// Appends an `accepted` disposition frame on `channel` from the receiver, settling deliveries
/// `first..=last` (part 2.7.6). `last` is left out (null) when it is `first`, as the general
/// encoder leaves it out.
pub fn encode_accepted_disposition(out: &mut BytesMut, channel: u16, first: u32, last: u32) {
    let mut performative = [0u8; 22];
    let mut at = 0;
    let mut put = |octets: &[u8]| {
        performative[at..at + octets.len()].copy_from_slice(octets);
        at += octets.len();
    };
    put(&[0x00, 0x53, 0x15]); // described by disposition's smallulong code
    put(&[0xc0, 0, 5]); // list8 of five fields; its size is set below
    put(&[0x41]); // role: true, the receiver
    put(&[0x70]); // first: uint
    put(&first.to_be_bytes());
    if first == last {
        put(&[0x40]); // last: null, the same as first
    } else {
        put(&[0x70]); // last: uint
        put(&last.to_be_bytes());
    }
    put(&[0x41]); // settled: true
    put(&[0x00, 0x53, 0x24, 0x45]); // state: accepted, an empty list
                                    // The list's size counts the octets after the size octet.
    performative[4] = (at - 5) as u8;
    encode_frame_header(out, FrameKind::Amqp, channel, at as u32);
    out.extend_from_slice(&performative[..at]);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::amqp1::{decode_frame_header, decode_value, Performative, Value};

    /// The general reader reads the frame as the disposition it stands for, and nothing after it.
    #[test]
    fn an_accepted_disposition_reads_back_as_its_performative() {
        for (first, last) in [(0, 0), (7, 300), (u32::MAX - 1, u32::MAX)] {
            let mut out = BytesMut::new();
            encode_accepted_disposition(&mut out, 3, first, last);
            let header = decode_frame_header(&out, u32::MAX).unwrap().unwrap();
            assert_eq!((header.channel, header.size as usize), (3, out.len()));
            let body = &out[header.body_offset()..];
            let (value, used) = decode_value(body).unwrap();
            assert_eq!(used, body.len());
            let accepted = Value::Described(Box::new(Value::Ulong(0x24)), Box::new(Value::List(Vec::new())));
            let last = (last != first).then_some(last);
            let expected =
                Performative::Disposition { receiver: true, first, last, settled: true, state: accepted };
            assert_eq!(Performative::from_value(&value).unwrap(), expected);
        }
    }
}
