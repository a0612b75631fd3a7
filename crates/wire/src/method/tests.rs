//! Unit tests for the method tables: known wire layouts, bit packing,
//! reserved fields, and decode errors.

use bytes::{Bytes, BytesMut};

use super::*;
use crate::field_table::{FieldTable, FieldValue};
use crate::types::{LongStr, ShortStr};

fn encode(m: &Method) -> Vec<u8> {
    let mut out = BytesMut::new();
    m.encode(&mut out);
    out.to_vec()
}

/// One default instance of every method.
fn all_methods() -> Vec<Method> {
    vec![
        ConnectionStart::default().into(),
        ConnectionStartOk::default().into(),
        ConnectionSecure::default().into(),
        ConnectionSecureOk::default().into(),
        ConnectionTune::default().into(),
        ConnectionTuneOk::default().into(),
        ConnectionOpen::default().into(),
        ConnectionOpenOk::default().into(),
        ConnectionClose::default().into(),
        ConnectionCloseOk::default().into(),
        ConnectionBlocked::default().into(),
        ConnectionUnblocked::default().into(),
        ConnectionUpdateSecret::default().into(),
        ConnectionUpdateSecretOk::default().into(),
        ChannelOpen::default().into(),
        ChannelOpenOk::default().into(),
        ChannelFlow::default().into(),
        ChannelFlowOk::default().into(),
        ChannelClose::default().into(),
        ChannelCloseOk::default().into(),
        ExchangeDeclare::default().into(),
        ExchangeDeclareOk::default().into(),
        ExchangeDelete::default().into(),
        ExchangeDeleteOk::default().into(),
        ExchangeBind::default().into(),
        ExchangeBindOk::default().into(),
        ExchangeUnbind::default().into(),
        ExchangeUnbindOk::default().into(),
        QueueDeclare::default().into(),
        QueueDeclareOk::default().into(),
        QueueBind::default().into(),
        QueueBindOk::default().into(),
        QueuePurge::default().into(),
        QueuePurgeOk::default().into(),
        QueueDelete::default().into(),
        QueueDeleteOk::default().into(),
        QueueUnbind::default().into(),
        QueueUnbindOk::default().into(),
        BasicQos::default().into(),
        BasicQosOk::default().into(),
        BasicConsume::default().into(),
        BasicConsumeOk::default().into(),
        BasicCancel::default().into(),
        BasicCancelOk::default().into(),
        BasicPublish::default().into(),
        BasicReturn::default().into(),
        BasicDeliver::default().into(),
        BasicGet::default().into(),
        BasicGetOk::default().into(),
        BasicGetEmpty::default().into(),
        BasicAck::default().into(),
        BasicReject::default().into(),
        BasicRecoverAsync::default().into(),
        BasicRecover::default().into(),
        BasicRecoverOk::default().into(),
        BasicNack::default().into(),
        TxSelect::default().into(),
        TxSelectOk::default().into(),
        TxCommit::default().into(),
        TxCommitOk::default().into(),
        TxRollback::default().into(),
        TxRollbackOk::default().into(),
        ConfirmSelect::default().into(),
        ConfirmSelectOk::default().into(),
    ]
}

/// Every method round-trips, its encoded_len is exact, its ids map back to
/// its name, and only publish/return/deliver/get-ok carry content.
#[test]
fn every_method_roundtrips_with_consistent_metadata() {
    let methods = all_methods();
    assert_eq!(methods.len(), 64);
    let mut ids = std::collections::HashSet::new();
    for m in methods {
        let bytes = encode(&m);
        assert_eq!(bytes.len(), m.encoded_len(), "{}", m.name());
        assert_eq!(Method::decode(Bytes::from(bytes)), Ok(m.clone()));
        assert_eq!(method_name(m.class_id(), m.method_id()), Some(m.name()));
        assert!(ids.insert((m.class_id(), m.method_id())), "{}", m.name());
        let content = matches!(m.name(), "basic.publish" | "basic.return" | "basic.deliver" | "basic.get-ok");
        assert_eq!(m.has_content(), content, "{}", m.name());
    }
}

/// basic.publish matches the spec layout byte for byte: ids 60/40, ticket 0,
/// exchange and routing-key shortstrs, then mandatory|immediate in one octet.
#[test]
fn basic_publish_known_bytes() {
    let m = Method::from(BasicPublish {
        exchange: ShortStr::from_static("ex"),
        routing_key: ShortStr::from_static("rk"),
        mandatory: true,
        immediate: false,
    });
    let expected = [0, 60, 0, 40, 0, 0, 2, b'e', b'x', 2, b'r', b'k', 0b01];
    assert_eq!(encode(&m), expected);
    assert_eq!(Method::decode(Bytes::copy_from_slice(&expected)), Ok(m));
    assert_eq!(method_name(60, 40), Some("basic.publish"));
}

/// queue.declare packs passive, durable, exclusive, auto-delete, nowait into
/// bits 0..4 of one octet, followed by the arguments table.
#[test]
fn queue_declare_bit_packing() {
    let m = Method::from(QueueDeclare {
        queue: ShortStr::from_static("q"),
        passive: false,
        durable: true,
        exclusive: false,
        auto_delete: true,
        nowait: true,
        arguments: FieldTable::new(),
    });
    let expected = [0, 50, 0, 10, 0, 0, 1, b'q', 0b11010, 0, 0, 0, 0];
    assert_eq!(encode(&m), expected);
    // Each flag alone lands on its own bit.
    for bit in 0..5u8 {
        let mut bytes = expected;
        bytes[8] = 1 << bit;
        let Ok(Method::QueueDeclare(d)) = Method::decode(Bytes::copy_from_slice(&bytes)) else {
            panic!("queue.declare did not decode");
        };
        let flags = [d.passive, d.durable, d.exclusive, d.auto_delete, d.nowait];
        for (i, f) in flags.into_iter().enumerate() {
            assert_eq!(f, i == usize::from(bit));
        }
    }
}

/// Reserved arguments are skipped on decode whatever their content, and
/// encoded as empty/zero.
#[test]
fn reserved_fields_skipped_and_zeroed() {
    // connection.open "/" with capabilities "x" and insist set.
    let wire = [0, 10, 0, 40, 1, b'/', 1, b'x', 1];
    let m = Method::decode(Bytes::copy_from_slice(&wire)).unwrap();
    assert_eq!(m, Method::ConnectionOpen(ConnectionOpen { virtual_host: ShortStr::from_static("/") }));
    assert_eq!(encode(&m), [0, 10, 0, 40, 1, b'/', 0, 0]);
    // channel.open-ok carries an empty long string.
    assert_eq!(encode(&ChannelOpenOk {}.into()), [0, 20, 0, 11, 0, 0, 0, 0]);
}

/// connection.start-ok with a client-properties table decodes each field.
#[test]
fn connection_start_ok_fields() {
    let m = Method::from(ConnectionStartOk {
        client_properties: FieldTable::from_entries([(
            "product",
            FieldValue::LongStr(LongStr::from("lapin")),
        )]),
        mechanism: ShortStr::from_static("PLAIN"),
        response: LongStr::from(b"\0guest\0guest".to_vec()),
        locale: ShortStr::from_static("en_US"),
    });
    let decoded = Method::decode(Bytes::from(encode(&m))).unwrap();
    let Method::ConnectionStartOk(d) = &decoded else {
        panic!("wrong method");
    };
    assert_eq!(d.client_properties.get("product").unwrap().as_bytes(), Some(&b"lapin"[..]));
    assert_eq!(d.response.as_bytes(), b"\0guest\0guest");
    assert_eq!(decoded, m);
}

/// Unknown ids are UnknownMethod, not a syntax error.
#[test]
fn unknown_method_ids() {
    let err = Method::decode(Bytes::from_static(&[0, 60, 0, 41])).unwrap_err();
    assert_eq!(err, DecodeError::UnknownMethod { class_id: 60, method_id: 41 });
    assert_eq!(err.reply_code(), 540);
    assert!(Method::decode(Bytes::from_static(&[0, 30, 0, 10])).is_err()); // access.request
    assert_eq!(method_name(99, 99), None);
}

/// Fewer than 4 payload octets is a frame error.
#[test]
fn empty_method_payload_is_frame_error() {
    for len in 0..4 {
        let err = Method::decode(Bytes::copy_from_slice(&[0, 10, 0][..len.min(3)])).unwrap_err();
        assert!(matches!(err, DecodeError::Frame(_)), "{len}: {err:?}");
    }
}

/// Missing or extra argument octets are syntax errors naming the method.
#[test]
fn truncated_and_trailing_arguments_are_syntax_errors() {
    let full = encode(&BasicAck { delivery_tag: 7, multiple: true }.into());
    for cut in 4..full.len() {
        let err = Method::decode(Bytes::copy_from_slice(&full[..cut])).unwrap_err();
        assert!(matches!(err, DecodeError::Syntax { class_id: 60, method_id: 80, .. }), "{cut}: {err:?}");
    }
    let mut extra = full.clone();
    extra.push(0);
    let err = Method::decode(Bytes::from(extra)).unwrap_err();
    assert_eq!(err.reply_code(), 502);
    assert!(err.reply_text().contains("basic.ack"), "{}", err.reply_text());
}

/// Names use RabbitMQ's dotted/dashed spelling, including the odd
/// exchange.unbind-ok id 51.
#[test]
fn names_and_rabbitmq_ids() {
    assert_eq!(Method::from(QueueDeclareOk::default()).name(), "queue.declare-ok");
    assert_eq!(ExchangeUnbindOk::METHOD_ID, 51);
    assert_eq!(method_name(40, 51), Some("exchange.unbind-ok"));
    assert_eq!(method_name(85, 10), Some("confirm.select"));
}

/// Issue #12 finding 9: a short string that is not UTF-8 in a method without content is 501
/// "Malformed UTF-8 in shortstr", as RabbitMQ 3.10.8 answers queue.declare, exchange.declare,
/// queue.bind (routing key), channel.open (the reserved out-of-band) and connection.open; in
/// basic.publish (content follows) RabbitMQ skips the check, and so do we.
#[test]
fn non_utf8_short_strings_are_frame_errors_except_in_content_methods() {
    let bad = ShortStr::new(Bytes::from_static(b"q\xff")).unwrap();
    let cases: [Method; 4] = [
        QueueDeclare { queue: bad.clone(), ..Default::default() }.into(),
        ExchangeDeclare { exchange: ShortStr::from_static("x"), kind: bad.clone(), ..Default::default() }
            .into(),
        QueueBind { routing_key: bad.clone(), ..Default::default() }.into(),
        ConnectionOpen { virtual_host: bad.clone() }.into(),
    ];
    for method in cases {
        let err = Method::decode(Bytes::from(encode(&method))).unwrap_err();
        let ids = (method.class_id(), method.method_id());
        assert_eq!(
            err,
            DecodeError::MalformedUtf8 { class_id: ids.0, method_id: ids.1 },
            "{}",
            method.name()
        );
        assert_eq!(err.reply_code(), 501);
        assert_eq!(err.reply_text(), "FRAME_ERROR - Malformed UTF-8 in shortstr");
    }
    // channel.open's reserved out-of-band shortstr is checked too.
    let err = Method::decode(Bytes::from_static(&[0, 20, 0, 10, 1, 0xff])).unwrap_err();
    assert_eq!(err, DecodeError::MalformedUtf8 { class_id: 20, method_id: 10 });
    let publish =
        Method::from(BasicPublish { exchange: bad.clone(), routing_key: bad, ..Default::default() });
    assert_eq!(Method::decode(Bytes::from(encode(&publish))), Ok(publish));
}

/// The layout is checked before the UTF-8 (RabbitMQ matches the binary first): trailing octets
/// after a non-UTF-8 name are a syntax error.
#[test]
fn syntax_errors_win_over_malformed_utf8() {
    let mut bytes = encode(
        &QueueDelete { queue: ShortStr::new(Bytes::from_static(b"\xc0\x80")).unwrap(), ..Default::default() }
            .into(),
    );
    bytes.push(0);
    let err = Method::decode(Bytes::from(bytes)).unwrap_err();
    assert!(matches!(err, DecodeError::Syntax { class_id: 50, method_id: 40, .. }), "{err:?}");
}

/// Every publish moves a `Method` (in a `Frame`, then in the session's result): no larger than
/// basic.get-ok's arguments, the largest left inline, and the boxed ones round-trip as the
/// others do.
#[test]
fn methods_stay_the_size_of_basic_get_ok() {
    let size = std::mem::size_of::<Method>();
    assert!(size <= std::mem::size_of::<BasicGetOk>(), "Method is {size} bytes");
    let bind = Method::from(QueueBind {
        queue: ShortStr::from_static("q"),
        exchange: ShortStr::from_static("x"),
        routing_key: ShortStr::from_static("k"),
        ..Default::default()
    });
    assert!(matches!(&bind, Method::QueueBind(boxed) if boxed.queue.as_bytes() == b"q"));
    assert_eq!(Method::decode(Bytes::from(encode(&bind))), Ok(bind));
}
