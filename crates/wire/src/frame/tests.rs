//! Unit tests for framing: known bytes, incremental decoding at every split
//! point, size limits, and frame-level errors.

use bytes::{BufMut, BytesMut};

use super::*;
use crate::method::{BasicPublish, ChannelOpen, ConnectionTune};
use crate::properties::BasicProperties;
use crate::types::ShortStr;

fn decode_all(decoder: &mut FrameDecoder, buf: &mut BytesMut) -> Vec<Frame> {
    let mut frames = Vec::new();
    while let Some(frame) = decoder.decode(buf).unwrap() {
        frames.push(frame);
    }
    frames
}

/// method + header + body + body + heartbeat for one published message.
fn sample_stream() -> (Vec<Frame>, BytesMut) {
    let method = Method::from(BasicPublish {
        exchange: ShortStr::from_static("amq.direct"),
        routing_key: ShortStr::from_static("key"),
        mandatory: true,
        immediate: false,
    });
    let props = BasicProperties {
        content_type: Some(ShortStr::from_static("text/plain")),
        delivery_mode: Some(2),
        ..Default::default()
    };
    let body = b"hello, world";
    let mut out = BytesMut::new();
    let props = EncodedProperties::from(&props);
    encode_content(3, &method, &props, body, 8 + 7, &mut out);
    encode_heartbeat_frame(&mut out);
    let frames = vec![
        Frame::Method { channel: 3, method },
        Frame::Header {
            channel: 3,
            header: ContentHeader { class_id: 60, body_size: body.len() as u64, properties: props },
        },
        Frame::Body { channel: 3, payload: Bytes::from_static(b"hello, ") },
        Frame::Body { channel: 3, payload: Bytes::from_static(b"world") },
        Frame::Heartbeat { channel: 0 },
    ];
    (frames, out)
}

/// Feeding the stream split into two parts at every possible position
/// yields exactly the encoded frames, and a lone prefix never yields one.
#[test]
fn split_at_every_byte() {
    let (expected, stream) = sample_stream();
    for split in 0..=stream.len() {
        let mut decoder = FrameDecoder::new(FRAME_MIN_SIZE);
        let mut buf = BytesMut::from(&stream[..split]);
        let mut frames = decode_all(&mut decoder, &mut buf);
        buf.extend_from_slice(&stream[split..]);
        frames.extend(decode_all(&mut decoder, &mut buf));
        assert_eq!(frames, expected, "split at {split}");
        assert!(buf.is_empty());
    }
}

/// Byte-at-a-time feeding consumes nothing until a frame is complete.
#[test]
fn partial_frame_consumes_nothing() {
    let (expected, stream) = sample_stream();
    let mut decoder = FrameDecoder::new(FRAME_MIN_SIZE);
    let mut buf = BytesMut::new();
    let mut frames = Vec::new();
    for &b in stream.iter() {
        buf.put_u8(b);
        let before = buf.len();
        match decoder.decode(&mut buf).unwrap() {
            Some(f) => frames.push(f),
            None => assert_eq!(buf.len(), before),
        }
    }
    assert_eq!(frames, expected);
}

/// A heartbeat and a connection.tune frame match the §4.2.3 layout.
#[test]
fn known_frame_bytes() {
    let mut out = BytesMut::new();
    encode_heartbeat_frame(&mut out);
    assert_eq!(&out[..], &[8, 0, 0, 0, 0, 0, 0, 0xCE]);
    let mut out = BytesMut::new();
    let tune = Method::from(ConnectionTune { channel_max: 2047, frame_max: 131072, heartbeat: 60 });
    encode_method_frame(0, &tune, &mut out);
    #[rustfmt::skip]
    let expected = [1, 0, 0, 0, 0, 0, 12, 0, 10, 0, 30, 0x07, 0xFF, 0, 2, 0, 0, 0, 60, 0xCE];
    assert_eq!(&out[..], &expected);
}

/// A wrong frame-end octet is a frame error.
#[test]
fn bad_frame_end_is_frame_error() {
    let mut out = BytesMut::new();
    encode_method_frame(1, &ChannelOpen {}.into(), &mut out);
    let last = out.len() - 1;
    out[last] = 0x00;
    let err = FrameDecoder::new(FRAME_MIN_SIZE).decode(&mut out).unwrap_err();
    assert!(matches!(err, DecodeError::Frame(_)), "{err:?}");
    assert_eq!(err.reply_code(), 501);
}

/// An announced size over the limit fails as soon as the 7-octet header is
/// in, without any payload present; up to 8 octets over is tolerated.
#[test]
fn oversized_frame_rejected_from_header_alone() {
    let mut decoder = FrameDecoder::new(FRAME_MIN_SIZE);
    let mut buf = BytesMut::from(&[3u8, 0, 1, 0xFF, 0xFF, 0xFF, 0xFF][..]);
    let err = decoder.decode(&mut buf).unwrap_err();
    assert!(err.reply_text().contains("frame_too_large"), "{}", err.reply_text());
    let mut at_limit = BytesMut::new();
    at_limit.put_slice(&[3, 0, 1]);
    at_limit.put_u32(FRAME_MIN_SIZE);
    assert_eq!(decoder.decode(&mut at_limit), Ok(None));
    at_limit[6] += 1;
    assert!(decoder.decode(&mut at_limit).is_err());
    decoder.set_max_frame_size(FRAME_MIN_SIZE + 1);
    assert_eq!(decoder.decode(&mut at_limit), Ok(None));
}

/// Unknown frame types, a non-empty heartbeat, a short method frame and a
/// short content header are frame errors.
#[test]
fn malformed_frames_are_frame_errors() {
    let cases: [&[u8]; 4] = [
        &[4, 0, 0, 0, 0, 0, 0, 0xCE],
        &[8, 0, 0, 0, 0, 0, 1, 0, 0xCE],
        &[1, 0, 1, 0, 0, 0, 2, 0, 10, 0xCE],
        &[2, 0, 1, 0, 0, 0, 4, 0, 60, 0, 0, 0xCE],
    ];
    for case in cases {
        let err = FrameDecoder::new(FRAME_MIN_SIZE).decode(&mut BytesMut::from(case)).unwrap_err();
        assert!(matches!(err, DecodeError::Frame(_)), "{case:?}: {err:?}");
    }
}

/// A bad property or trailing octets in a content header is a syntax error
/// carrying the header's class id.
#[test]
fn bad_content_header_is_syntax_error() {
    let mut payload = vec![0, 60, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0xAA];
    let mut frame = vec![2, 0, 1, 0, 0, 0, payload.len() as u8];
    frame.append(&mut payload);
    frame.push(0xCE);
    let err = FrameDecoder::new(FRAME_MIN_SIZE).decode(&mut BytesMut::from(&frame[..])).unwrap_err();
    assert!(matches!(err, DecodeError::Syntax { class_id: 60, method_id: 0, .. }), "{err:?}");
}

/// Body frames never exceed frame_max; frame_max 0 means one body frame;
/// an empty body produces no body frame.
#[test]
fn content_splitting() {
    let body = vec![7u8; 10_000];
    let method = Method::from(BasicPublish::default());
    for (frame_max, bodies) in [(4096u32, 3usize), (0, 1), (10_008, 1), (10_007, 2)] {
        let mut out = BytesMut::new();
        encode_content(1, &method, &EncodedProperties::default(), &body, frame_max, &mut out);
        let mut decoder = FrameDecoder::new(0);
        let frames = decode_all(&mut decoder, &mut out);
        let sizes: Vec<usize> = frames
            .iter()
            .filter_map(|f| match f {
                Frame::Body { payload, .. } => Some(payload.len()),
                _ => None,
            })
            .collect();
        assert_eq!(sizes.len(), bodies, "frame_max {frame_max}");
        assert_eq!(sizes.iter().sum::<usize>(), body.len());
        if frame_max > 0 {
            assert!(sizes.iter().all(|&s| s + FRAME_OVERHEAD <= frame_max as usize));
        }
    }
    let mut out = BytesMut::new();
    encode_content(1, &method, &EncodedProperties::default(), &[], 4096, &mut out);
    assert_eq!(decode_all(&mut FrameDecoder::new(4096), &mut out).len(), 2);
}

/// A delivery written from its parts is the same octets as the `BasicDeliver` they make, with
/// the same content, whatever the names' lengths (the empty exchange, a 255-byte key) and the
/// frame size.
#[test]
fn a_delivery_is_written_as_its_basic_deliver() {
    let properties: EncodedProperties =
        BasicProperties { content_type: Some(ShortStr::from_static("text/plain")), ..Default::default() }
            .into();
    let long = ShortStr::try_from("k".repeat(255).as_str()).unwrap();
    let cases = [
        (ShortStr::from_static(""), ShortStr::from_static("q"), false, 4096u32),
        (ShortStr::from_static("amq.topic"), long.clone(), true, 0),
    ];
    // Several body frames, one, and none (an empty body).
    let bodies = [vec![5u8; 9_000], vec![6u8; 16], Vec::new()];
    for ((exchange, routing_key, redelivered, frame_max), body) in
        cases.into_iter().flat_map(|case| bodies.iter().map(move |body| (case.clone(), body)))
    {
        let consumer_tag = ShortStr::from_static("amq.ctag-1");
        let deliver = crate::BasicDeliver {
            consumer_tag: consumer_tag.clone(),
            delivery_tag: u64::MAX - 1,
            redelivered,
            exchange: exchange.clone(),
            routing_key: routing_key.clone(),
        };
        let mut expected = BytesMut::new();
        encode_content(7, &deliver.into(), &properties, body, frame_max, &mut expected);
        let args = DeliverArgs {
            consumer_tag: &consumer_tag,
            delivery_tag: u64::MAX - 1,
            redelivered,
            exchange: &exchange,
            routing_key: &routing_key,
        };
        let mut written = BytesMut::new();
        encode_delivery(7, args, &properties, body, frame_max, &mut written);
        assert_eq!(written, expected);
    }
}

/// The protocol header needs 8 octets, accepts 0-9-1 (and RabbitMQ's legacy
/// 0-9 header) and reports anything else as Other.
#[test]
fn protocol_header() {
    let mut buf = BytesMut::from(&b"AMQP\0\0\x09"[..]);
    assert_eq!(decode_protocol_header(&mut buf), None);
    assert_eq!(buf.len(), 7);
    buf.put_u8(1);
    buf.put_u8(0xAB);
    assert_eq!(decode_protocol_header(&mut buf), Some(ProtocolHeader::Amqp091));
    assert_eq!(&buf[..], &[0xAB]);
    let mut legacy = BytesMut::from(&b"AMQP\x01\x01\x00\x09"[..]);
    assert_eq!(decode_protocol_header(&mut legacy), Some(ProtocolHeader::Amqp091));
    let mut http = BytesMut::from(&b"GET / HTTP/1.1"[..]);
    assert_eq!(decode_protocol_header(&mut http), Some(ProtocolHeader::Other));
    let mut amqp10 = BytesMut::from(&b"AMQP\x03\x01\x00\x00"[..]);
    assert_eq!(decode_protocol_header(&mut amqp10), Some(ProtocolHeader::Other));
}
