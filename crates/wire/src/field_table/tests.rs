//! Unit tests for field tables: known encodings, RabbitMQ's tags, editing,
//! and validation errors.

use bytes::{BufMut, Bytes, BytesMut};

use super::*;

/// Decodes a length-prefixed table from `content`.
fn decode_content(content: &[u8]) -> Res<FieldTable> {
    let mut buf = BytesMut::new();
    buf.put_u32(content.len() as u32);
    buf.put_slice(content);
    FieldTable::decode(&mut buf.freeze())
}

/// A table holding a long string and a nested array matches the spec layout
/// byte for byte, and decodes back to the same entries.
#[test]
fn known_bytes_table_with_nested_array() {
    let table = FieldTable::from_entries([
        ("a", FieldValue::LongStr(LongStr::from("hi"))),
        ("arr", FieldValue::Array(FieldArray::from_values([FieldValue::I32(-2), FieldValue::Bool(true)]))),
    ]);
    #[rustfmt::skip]
    let expected: &[u8] = &[
        1, b'a', b'S', 0, 0, 0, 2, b'h', b'i',
        3, b'a', b'r', b'r', b'A', 0, 0, 0, 7,
            b'I', 0xFF, 0xFF, 0xFF, 0xFE,
            b't', 1,
    ];
    assert_eq!(&table.raw()[..], expected);
    assert_eq!(table.encoded_len(), 4 + expected.len());
    let decoded = decode_content(expected).unwrap();
    assert_eq!(decoded, table);
    let entries: Vec<_> = decoded.iter().collect();
    assert_eq!(entries.len(), 2);
    assert_eq!(entries[0].0, "a");
    let FieldValue::Array(arr) = &entries[1].1 else {
        panic!("not an array");
    };
    let values: Vec<_> = arr.iter().collect();
    assert_eq!(values, vec![FieldValue::I32(-2), FieldValue::Bool(true)]);
}

/// Every tag RabbitMQ parses decodes to the documented variant, with 'L'
/// read as signed 64-bit like 'l', and the raw encoding kept verbatim.
#[test]
fn every_rabbitmq_tag_decodes() {
    let cases: Vec<(&[u8], FieldValue)> = vec![
        (b"t\x02", FieldValue::Bool(true)),
        (b"b\xFF", FieldValue::I8(-1)),
        (b"B\xFF", FieldValue::U8(255)),
        (b"s\xFF\xFE", FieldValue::I16(-2)),
        (b"u\xFF\xFE", FieldValue::U16(0xFFFE)),
        (b"I\x80\0\0\0", FieldValue::I32(i32::MIN)),
        (b"i\x80\0\0\0", FieldValue::U32(0x8000_0000)),
        (b"l\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF", FieldValue::I64(-1)),
        (b"L\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF", FieldValue::I64(-1)),
        (b"f\x3F\x80\0\0", FieldValue::F32(1.0)),
        (b"d\x3F\xF0\0\0\0\0\0\0", FieldValue::F64(1.0)),
        (b"D\x02\0\0\x01\x00", FieldValue::Decimal { scale: 2, value: 256 }),
        (b"S\0\0\0\x01z", FieldValue::LongStr(LongStr::from("z"))),
        (b"T\0\0\0\0\0\0\0\x05", FieldValue::Timestamp(5)),
        (b"V", FieldValue::Void),
        (b"x\0\0\0\x02\x00\xFF", FieldValue::ByteArray(Bytes::from_static(b"\x00\xFF"))),
        (b"F\0\0\0\0", FieldValue::Table(FieldTable::new())),
        (b"A\0\0\0\0", FieldValue::Array(FieldArray::new())),
    ];
    for (value_bytes, expected) in cases {
        let mut content = vec![1, b'k'];
        content.extend_from_slice(value_bytes);
        let table = decode_content(&content).unwrap();
        assert_eq!(table.get("k"), Some(expected.clone()), "{value_bytes:?}");
        assert_eq!(&table.raw()[..], &content[..]);
    }
}

/// An unknown type tag is rejected at any nesting level.
#[test]
fn unknown_tag_is_malformed() {
    let err = decode_content(b"\x01kZ").unwrap_err();
    assert!(err.0.contains("unknown field value type"), "{}", err.0);
    assert!(decode_content(b"\x01kF\0\0\0\x03\x01jZ").is_err());
    assert!(decode_content(b"\x01kA\0\0\0\x01Z").is_err());
}

/// A table cut anywhere inside an entry, or whose length prefix overruns
/// the input, is rejected.
#[test]
fn truncated_table_is_malformed() {
    let content = b"\x03keyS\0\0\0\x05value";
    for cut in 1..content.len() {
        assert!(decode_content(&content[..cut]).is_err(), "cut at {cut}");
    }
    let mut overrun = Bytes::from_static(b"\0\0\0\x10\x01kV");
    assert!(FieldTable::decode(&mut overrun).is_err());
}

/// Nesting up to MAX_NESTING_DEPTH decodes; one more level is rejected.
#[test]
fn nesting_limit() {
    let nest = |levels: usize| {
        let mut t = FieldTable::new();
        for _ in 1..levels {
            t = FieldTable::from_entries([("n", FieldValue::Table(t))]);
        }
        let mut out = BytesMut::new();
        t.encode(&mut out);
        FieldTable::decode(&mut out.freeze())
    };
    assert!(nest(MAX_NESTING_DEPTH).is_ok());
    assert!(nest(MAX_NESTING_DEPTH + 1).is_err());
}

/// with_entry replaces in place or appends; without_key drops every
/// occurrence; other entries keep their exact bytes (an 'L' stays 'L').
#[test]
fn editing_keeps_other_entries_verbatim() {
    let t = decode_content(b"\x01aL\0\0\0\0\0\0\0\x01\x01bV\x01cV").unwrap();
    let replaced = t.with_entry("b", FieldValue::U8(9));
    assert_eq!(&replaced.raw()[..], b"\x01aL\0\0\0\0\0\0\0\x01\x01bB\x09\x01cV");
    let appended = t.with_entry("d", FieldValue::Void);
    assert_eq!(appended.len(), 4);
    assert_eq!(appended.iter().last().map(|(k, _)| k), Some(ShortStr::from_static("d")));
    let removed = t.without_key("a");
    assert_eq!(&removed.raw()[..], b"\x01bV\x01cV");
    assert!(!removed.contains_key("a"));
    assert_eq!(t.without_key("zz"), t);
}

/// from_entries skips keys that cannot be short strings.
#[test]
fn long_keys_are_skipped() {
    let long = "k".repeat(256);
    let t = FieldTable::from_entries([(long.as_str(), FieldValue::Void), ("ok", FieldValue::Void)]);
    assert_eq!(t.len(), 1);
    assert!(t.contains_key("ok"));
    assert_eq!(t.with_entry(&long, FieldValue::Void), t);
}

/// get returns the first of duplicate keys; accessors widen integers and
/// report RabbitMQ's type names.
#[test]
fn lookup_and_accessors() {
    let t = FieldTable::from_entries([
        ("x", FieldValue::U16(7)),
        ("x", FieldValue::I64(8)),
        ("s", FieldValue::LongStr(LongStr::from("v"))),
    ]);
    assert_eq!(t.get("x").and_then(|v| v.as_i64()), Some(7));
    assert_eq!(t.get("s").and_then(|v| v.as_bytes().map(<[u8]>::to_vec)), Some(b"v".to_vec()));
    assert_eq!(FieldValue::I64(0).type_name(), "long");
    assert_eq!(FieldValue::I32(0).type_name(), "signedint");
    assert_eq!(FieldValue::ByteArray(Bytes::new()).type_name(), "binary");
    assert_eq!(FieldValue::Timestamp(1).as_i64(), None);
    assert_eq!(format!("{t:?}"), r#"{"x": U16(7), "x": I64(8), "s": LongStr("v")}"#);
}
