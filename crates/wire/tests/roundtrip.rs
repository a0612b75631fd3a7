//! Property tests: decode(encode(x)) == x for field tables, properties,
//! methods and frame streams fed in random chunks.

mod common;

use bytes::{Bytes, BytesMut};
use common::*;
use hourglass_wire::*;
use proptest::prelude::*;

proptest! {
    /// A table built from arbitrary nested entries validates on decode, keeps
    /// its bytes, and iterates back the same keys and values in order.
    #[test]
    fn field_table_roundtrip(entries in entries()) {
        let table = FieldTable::from_entries(entries.iter().map(|(k, v)| (k.as_bytes().to_vec(), v.clone())));
        let mut out = BytesMut::new();
        table.encode(&mut out);
        prop_assert_eq!(out.len(), table.encoded_len());
        let decoded = FieldTable::from_raw(out.freeze().slice(4..)).unwrap();
        prop_assert_eq!(&decoded, &table);
        prop_assert_eq!(decoded.len(), entries.len());
        for ((k1, v1), (k2, v2)) in decoded.iter().zip(entries.iter()) {
            prop_assert_eq!(&k1, k2);
            prop_assert_eq!(value_bytes(&v1), value_bytes(v2));
            prop_assert_eq!(v1.encoded_len(), value_bytes(v2).len());
        }
        // Re-encoding what was lazily decoded reproduces the exact bytes.
        prop_assert_eq!(FieldTable::from_entries(decoded.iter().map(|(k, v)| (k.into_bytes(), v))), table);
    }

    /// Properties round-trip and encoded_len is exact.
    #[test]
    fn properties_roundtrip(props in properties()) {
        let mut out = BytesMut::new();
        props.encode(&mut out);
        prop_assert_eq!(out.len(), props.encoded_len());
        let mut buf = out.freeze();
        prop_assert_eq!(BasicProperties::decode(&mut buf).unwrap(), props);
        prop_assert!(buf.is_empty());
    }

    /// Properties kept encoded read in place exactly what a full decode gives, and splitting
    /// them off a buffer keeps the exact bytes and leaves what follows.
    #[test]
    fn encoded_properties_read_like_decoded(props in properties(), tail in bytes(8)) {
        let encoded = EncodedProperties::from(&props);
        prop_assert_eq!(encoded.decode(), props.clone());
        prop_assert_eq!(encoded.headers(), props.headers.clone());
        prop_assert_eq!(encoded.delivery_mode(), props.delivery_mode);
        prop_assert_eq!(encoded.priority(), props.priority);
        prop_assert_eq!(encoded.reply_to(), props.reply_to.clone());
        prop_assert_eq!(encoded.expiration(), props.expiration.clone());
        prop_assert_eq!(encoded.user_id(), props.user_id.clone());
        let mut buf = BytesMut::new();
        props.encode(&mut buf);
        buf.extend_from_slice(&tail);
        let mut buf = buf.freeze();
        prop_assert_eq!(EncodedProperties::split_from(&mut buf).unwrap(), encoded);
        prop_assert_eq!(buf, tail);
    }

    /// Methods with arbitrary arguments round-trip and encoded_len is exact.
    #[test]
    fn method_roundtrip(method in method()) {
        let mut out = BytesMut::new();
        method.encode(&mut out);
        prop_assert_eq!(out.len(), method.encoded_len());
        prop_assert_eq!(Method::decode(out.freeze()).unwrap(), method);
    }

    /// A stream of arbitrary frames fed in random chunk sizes decodes to the
    /// same frames and leaves nothing behind.
    #[test]
    fn frame_stream_roundtrip(frames in proptest::collection::vec(frame(), 1..8),
                              sizes in proptest::collection::vec(1usize..64, 1..16)) {
        let mut stream = BytesMut::new();
        for f in &frames {
            encode_frame(f, &mut stream);
        }
        let mut decoder = FrameDecoder::new(0);
        let mut buf = BytesMut::new();
        let mut decoded = Vec::new();
        for piece in chunk(&stream, &sizes) {
            buf.extend_from_slice(&piece);
            while let Some(frame) = decoder.decode(&mut buf).unwrap() {
                decoded.push(frame);
            }
        }
        prop_assert!(buf.is_empty());
        prop_assert_eq!(decoded, frames);
    }

    /// encode_content splits any body under any frame_max into frames that
    /// respect the limit and reassemble to the body.
    #[test]
    fn content_split_reassembles(body in bytes(3000), frame_max in 9u32..600,
                                 props in properties()) {
        let method = Method::from(BasicPublish::default());
        let mut out = BytesMut::new();
        encode_content(5, &method, &EncodedProperties::from(&props), &body, frame_max, &mut out);
        let mut decoder = FrameDecoder::new(0);
        let mut reassembled = Vec::new();
        let mut header = None;
        while let Some(frame) = decoder.decode(&mut out).unwrap() {
            match frame {
                Frame::Header { header: h, .. } => header = Some(h),
                Frame::Body { payload, .. } => {
                    prop_assert!(payload.len() + FRAME_OVERHEAD <= frame_max as usize);
                    reassembled.extend_from_slice(&payload);
                }
                _ => {}
            }
        }
        let header = header.unwrap();
        prop_assert_eq!(header.body_size, body.len() as u64);
        prop_assert_eq!(header.properties.decode(), props);
        prop_assert_eq!(Bytes::from(reassembled), body);
    }
}
