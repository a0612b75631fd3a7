//! Shared proptest strategies for wire values, methods and frames.
#![allow(dead_code)]

use bytes::{Bytes, BytesMut};
use hourglass_wire::*;
use proptest::collection::vec;
use proptest::prelude::*;

pub fn bytes(max: usize) -> impl Strategy<Value = Bytes> {
    vec(any::<u8>(), 0..=max).prop_map(Bytes::from)
}

pub fn short_str() -> impl Strategy<Value = ShortStr> {
    prop_oneof![
        8 => vec(any::<u8>(), 0..24),
        1 => vec(any::<u8>(), 255..=255),
    ]
    .prop_map(|v| ShortStr::new(Bytes::from(v)).unwrap())
}

/// A short string that is UTF-8: what a method without content may carry
/// (RabbitMQ answers anything else with 501, and so does the decoder).
pub fn name() -> impl Strategy<Value = ShortStr> {
    prop_oneof![
        8 => "\\PC{0,12}".prop_map(|s| Bytes::from(s.into_bytes())),
        1 => "[a-z]{255}".prop_map(|s| Bytes::from(s.into_bytes())),
    ]
    .prop_map(|v| ShortStr::new(v).unwrap())
}

pub fn long_str() -> impl Strategy<Value = LongStr> {
    bytes(64).prop_map(LongStr::new)
}

/// Any field value, nested up to a few levels, including NaN floats.
pub fn field_value() -> impl Strategy<Value = FieldValue> {
    let leaf = prop_oneof![
        any::<bool>().prop_map(FieldValue::Bool),
        any::<i8>().prop_map(FieldValue::I8),
        any::<u8>().prop_map(FieldValue::U8),
        any::<i16>().prop_map(FieldValue::I16),
        any::<u16>().prop_map(FieldValue::U16),
        any::<i32>().prop_map(FieldValue::I32),
        any::<u32>().prop_map(FieldValue::U32),
        any::<i64>().prop_map(FieldValue::I64),
        any::<u32>().prop_map(|b| FieldValue::F32(f32::from_bits(b))),
        any::<u64>().prop_map(|b| FieldValue::F64(f64::from_bits(b))),
        (any::<u8>(), any::<u32>()).prop_map(|(scale, value)| FieldValue::Decimal { scale, value }),
        long_str().prop_map(FieldValue::LongStr),
        any::<u64>().prop_map(FieldValue::Timestamp),
        Just(FieldValue::Void),
        bytes(32).prop_map(FieldValue::ByteArray),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            vec(inner.clone(), 0..6).prop_map(|v| FieldValue::Array(FieldArray::from_values(v))),
            vec((short_str(), inner), 0..6).prop_map(|entries| FieldValue::Table(FieldTable::from_entries(
                entries.into_iter().map(|(k, v)| (k.into_bytes(), v))
            ))),
        ]
    })
}

pub fn entries() -> impl Strategy<Value = Vec<(ShortStr, FieldValue)>> {
    vec((short_str(), field_value()), 0..8)
}

pub fn table() -> impl Strategy<Value = FieldTable> {
    entries().prop_map(|e| FieldTable::from_entries(e.into_iter().map(|(k, v)| (k.into_bytes(), v))))
}

/// Bit-exact encoding of a value, for comparisons that must treat NaN == NaN.
pub fn value_bytes(v: &FieldValue) -> Vec<u8> {
    let mut out = BytesMut::new();
    v.encode(&mut out);
    out.to_vec()
}

pub fn properties() -> impl Strategy<Value = BasicProperties> {
    let strs = (
        proptest::option::of(short_str()),
        proptest::option::of(short_str()),
        proptest::option::of(short_str()),
        proptest::option::of(short_str()),
        proptest::option::of(short_str()),
        proptest::option::of(short_str()),
        proptest::option::of(short_str()),
        proptest::option::of(short_str()),
        proptest::option::of(short_str()),
        proptest::option::of(short_str()),
    );
    let others = (
        proptest::option::of(table()),
        proptest::option::of(any::<u8>()),
        proptest::option::of(any::<u8>()),
        proptest::option::of(any::<u64>()),
    );
    (strs, others).prop_map(|(s, o)| BasicProperties {
        content_type: s.0,
        content_encoding: s.1,
        headers: o.0,
        delivery_mode: o.1,
        priority: o.2,
        correlation_id: s.2,
        reply_to: s.3,
        expiration: s.4,
        message_id: s.5,
        timestamp: o.3,
        kind: s.6,
        user_id: s.7,
        app_id: s.8,
        cluster_id: s.9,
    })
}

/// A representative set of methods with arbitrary argument values.
pub fn method() -> impl Strategy<Value = Method> {
    let b = any::<bool>;
    prop_oneof![
        (any::<u8>(), any::<u8>(), table(), long_str(), long_str()).prop_map(|a| {
            ConnectionStart {
                version_major: a.0,
                version_minor: a.1,
                server_properties: a.2,
                mechanisms: a.3,
                locales: a.4,
            }
            .into()
        }),
        (table(), name(), long_str(), name()).prop_map(|a| {
            ConnectionStartOk { client_properties: a.0, mechanism: a.1, response: a.2, locale: a.3 }.into()
        }),
        (any::<u16>(), any::<u32>(), any::<u16>())
            .prop_map(|a| { ConnectionTune { channel_max: a.0, frame_max: a.1, heartbeat: a.2 }.into() }),
        (any::<u16>(), any::<u32>(), any::<u16>())
            .prop_map(|a| { ConnectionTuneOk { channel_max: a.0, frame_max: a.1, heartbeat: a.2 }.into() }),
        name().prop_map(|v| ConnectionOpen { virtual_host: v }.into()),
        (any::<u16>(), name(), any::<u16>(), any::<u16>()).prop_map(|a| {
            ConnectionClose { reply_code: a.0, reply_text: a.1, class_id: a.2, method_id: a.3 }.into()
        }),
        (any::<u16>(), name(), any::<u16>(), any::<u16>()).prop_map(|a| {
            ChannelClose { reply_code: a.0, reply_text: a.1, class_id: a.2, method_id: a.3 }.into()
        }),
        (name(), name(), (b(), b(), b(), b(), b()), table()).prop_map(|(e, k, f, t)| {
            ExchangeDeclare {
                exchange: e,
                kind: k,
                passive: f.0,
                durable: f.1,
                auto_delete: f.2,
                internal: f.3,
                nowait: f.4,
                arguments: t,
            }
            .into()
        }),
        (name(), (b(), b(), b(), b(), b()), table()).prop_map(|(q, f, t)| {
            QueueDeclare {
                queue: q,
                passive: f.0,
                durable: f.1,
                exclusive: f.2,
                auto_delete: f.3,
                nowait: f.4,
                arguments: t,
            }
            .into()
        }),
        (name(), any::<u32>(), any::<u32>())
            .prop_map(|a| { QueueDeclareOk { queue: a.0, message_count: a.1, consumer_count: a.2 }.into() }),
        (name(), name(), name(), b(), table()).prop_map(|a| {
            QueueBind { queue: a.0, exchange: a.1, routing_key: a.2, nowait: a.3, arguments: a.4 }.into()
        }),
        (short_str(), short_str(), b(), b()).prop_map(|a| {
            BasicPublish { exchange: a.0, routing_key: a.1, mandatory: a.2, immediate: a.3 }.into()
        }),
        (short_str(), any::<u64>(), b(), short_str(), short_str()).prop_map(|a| {
            BasicDeliver {
                consumer_tag: a.0,
                delivery_tag: a.1,
                redelivered: a.2,
                exchange: a.3,
                routing_key: a.4,
            }
            .into()
        }),
        (name(), name(), (b(), b(), b(), b()), table()).prop_map(|(q, c, f, t)| {
            BasicConsume {
                queue: q,
                consumer_tag: c,
                no_local: f.0,
                no_ack: f.1,
                exclusive: f.2,
                nowait: f.3,
                arguments: t,
            }
            .into()
        }),
        (any::<u64>(), b()).prop_map(|a| BasicAck { delivery_tag: a.0, multiple: a.1 }.into()),
        (any::<u64>(), b(), b())
            .prop_map(|a| BasicNack { delivery_tag: a.0, multiple: a.1, requeue: a.2 }.into()),
        (any::<u32>(), any::<u16>(), b())
            .prop_map(|a| { BasicQos { prefetch_size: a.0, prefetch_count: a.1, global: a.2 }.into() }),
        (any::<u64>(), b(), short_str(), short_str(), any::<u32>()).prop_map(|a| {
            BasicGetOk {
                delivery_tag: a.0,
                redelivered: a.1,
                exchange: a.2,
                routing_key: a.3,
                message_count: a.4,
            }
            .into()
        }),
        b().prop_map(|n| ConfirmSelect { nowait: n }.into()),
        Just(TxCommit {}.into()),
    ]
}

pub fn frame() -> impl Strategy<Value = Frame> {
    prop_oneof![
        (any::<u16>(), method()).prop_map(|(channel, method)| Frame::Method { channel, method }),
        (any::<u16>(), any::<u16>(), any::<u64>(), properties()).prop_map(
            |(channel, class_id, body_size, properties)| {
                let properties = EncodedProperties::from(&properties);
                Frame::Header { channel, header: ContentHeader { class_id, body_size, properties } }
            }
        ),
        (any::<u16>(), bytes(200)).prop_map(|(channel, payload)| Frame::Body { channel, payload }),
        any::<u16>().prop_map(|channel| Frame::Heartbeat { channel }),
    ]
}

/// Appends one frame's encoding.
pub fn encode_frame(frame: &Frame, out: &mut BytesMut) {
    match frame {
        Frame::Method { channel, method } => encode_method_frame(*channel, method, out),
        Frame::Header { channel, header } => encode_header_frame(*channel, header, out),
        Frame::Body { channel, payload } => encode_body_frame(*channel, payload, out),
        Frame::Heartbeat { channel } => {
            // encode_heartbeat_frame always uses channel 0; build others by hand.
            out.extend_from_slice(&[8]);
            out.extend_from_slice(&channel.to_be_bytes());
            out.extend_from_slice(&[0, 0, 0, 0, FRAME_END]);
        }
    }
}

/// Splits `stream` into consecutive chunks, cycling through `sizes`.
pub fn chunk(stream: &[u8], sizes: &[usize]) -> Vec<Vec<u8>> {
    let mut chunks = Vec::new();
    let mut rest = stream;
    let mut i = 0;
    while !rest.is_empty() {
        let n = sizes.get(i % sizes.len().max(1)).copied().unwrap_or(1).clamp(1, rest.len());
        chunks.push(rest[..n].to_vec());
        rest = &rest[n..];
        i += 1;
    }
    chunks
}
