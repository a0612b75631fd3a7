//! SQS message attributes ↔ AMQP headers, and the MD5 digests SDKs check (boto3 raises on a
//! mismatch).
//!
//! - An attribute becomes a header of the same name: `String…` and `Number…` a long string,
//!   `Binary…` a byte array. A data type other than plain `String` / `Binary` (`Number`,
//!   `String.uuid`, `Number.int`…) is kept in the header table [`TYPES_HEADER`], so it comes
//!   back as it was sent.
//! - A header of an AMQP message comes back as an attribute: strings as `String`, integers,
//!   decimals and floats as `Number`, byte arrays as `Binary`, booleans as `String`; tables,
//!   arrays, timestamps and voids are not attributes. Headers of the broker and of SQS's own
//!   (`x-…`) are not attributes either.

use std::collections::BTreeMap;

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use bytes::Bytes;
use hourglass_wire::{FieldTable, FieldValue, LongStr};
use md5::{Digest, Md5};
use serde_json::{json, Map, Value};

use crate::error::SqsError;

/// The header that keeps the attributes' data types that are not plain `String` / `Binary`.
pub const TYPES_HEADER: &str = "x-sqs-attribute-types";
/// AWS: at most 10 attributes a message.
pub const ATTRIBUTES_MAX: usize = 10;
/// AWS: names of up to 256 characters.
const NAME_LEN_MAX: usize = 256;
/// Data types of up to 256 characters.
const TYPE_LEN_MAX: usize = 256;

/// One attribute's value.
#[derive(Clone, Debug, PartialEq)]
pub enum AttributeValue {
    String(String),
    Binary(Bytes),
}

/// One message attribute.
#[derive(Clone, Debug, PartialEq)]
pub struct Attribute {
    pub data_type: String,
    pub value: AttributeValue,
}

/// Attributes by name, in name order (the order their MD5 takes them in).
pub type Attributes = BTreeMap<String, Attribute>;

/// `MessageAttributes` of a request, checked as AWS checks them.
pub fn from_json(value: Option<&Value>) -> Result<Attributes, SqsError> {
    let mut out = Attributes::new();
    let Some(value) = value else { return Ok(out) };
    let map = value.as_object().ok_or_else(|| invalid("MessageAttributes must be a map"))?;
    if map.len() > ATTRIBUTES_MAX {
        return Err(invalid(format!(
            "Number of message attributes [{}] exceeds the allowed maximum [10].",
            map.len()
        )));
    }
    for (name, attribute) in map {
        check_name(name)?;
        let data_type = attribute.get("DataType").and_then(Value::as_str).ok_or_else(|| {
            invalid(format!(
                "The message attribute '{name}' must contain a non-empty message attribute type."
            ))
        })?;
        let base = data_type.split('.').next().unwrap_or_default();
        if data_type.len() > TYPE_LEN_MAX || !matches!(base, "String" | "Number" | "Binary") {
            return Err(invalid(format!("The type of message attribute '{name}' is invalid. You must use only the following supported type prefixes: Binary, Number, String.")));
        }
        let value = match base {
            "Binary" => {
                let encoded = attribute.get("BinaryValue").and_then(Value::as_str).ok_or_else(|| {
                    invalid(format!(
                        "The message attribute '{name}' with type 'Binary' must use field 'Binary'."
                    ))
                })?;
                let bytes = STANDARD.decode(encoded).map_err(|_| {
                    invalid(format!("The message attribute '{name}' has a BinaryValue that is not base64."))
                })?;
                AttributeValue::Binary(Bytes::from(bytes))
            }
            _ => {
                let text = attribute.get("StringValue").and_then(Value::as_str).ok_or_else(|| {
                    invalid(format!(
                        "The message attribute '{name}' with type '{base}' must use field 'String'."
                    ))
                })?;
                if base == "Number" && text.parse::<f64>().is_err() {
                    return Err(invalid(format!(
                        "Can't cast the value of message (user) attribute '{name}' to a number."
                    )));
                }
                AttributeValue::String(text.to_owned())
            }
        };
        out.insert(name.clone(), Attribute { data_type: data_type.to_owned(), value });
    }
    Ok(out)
}

fn invalid(message: impl Into<String>) -> SqsError {
    SqsError::InvalidParameterValue(message.into())
}

/// AWS's rules for attribute names: letters, digits, `_`, `-` and `.`, not starting or ending
/// with `.` nor holding `..`, not starting with `AWS.` or `Amazon.` (any case).
fn check_name(name: &str) -> Result<(), SqsError> {
    let lower = name.to_ascii_lowercase();
    let valid = !name.is_empty()
        && name.len() <= NAME_LEN_MAX
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
        && !name.starts_with('.')
        && !name.ends_with('.')
        && !name.contains("..")
        && !lower.starts_with("aws.")
        && !lower.starts_with("amazon.")
        && !lower.starts_with("x-");
    if valid {
        Ok(())
    } else {
        Err(invalid(format!("The message attribute name '{name}' is invalid.")))
    }
}

/// The encoded size AWS counts toward the message size limit: names, types and values.
pub fn size(attributes: &Attributes) -> usize {
    attributes
        .iter()
        .map(|(name, a)| {
            let value = match &a.value {
                AttributeValue::String(s) => s.len(),
                AttributeValue::Binary(b) => b.len(),
            };
            name.len() + a.data_type.len() + value
        })
        .sum()
}

/// The headers that carry `attributes` (module doc).
pub fn to_headers(attributes: &Attributes) -> Vec<(String, FieldValue)> {
    let mut headers = Vec::with_capacity(attributes.len() + 1);
    let mut types = Vec::new();
    for (name, attribute) in attributes {
        let (value, plain) = match &attribute.value {
            AttributeValue::String(s) => (FieldValue::LongStr(LongStr::from(s.clone())), "String"),
            AttributeValue::Binary(b) => (FieldValue::ByteArray(b.clone()), "Binary"),
        };
        if attribute.data_type != plain {
            types.push((name.clone(), FieldValue::LongStr(LongStr::from(attribute.data_type.clone()))));
        }
        headers.push((name.clone(), value));
    }
    if !types.is_empty() {
        headers.push((TYPES_HEADER.to_owned(), FieldValue::Table(FieldTable::from_entries(types))));
    }
    headers
}

/// The attributes a message's headers carry (module doc).
pub fn from_headers(headers: Option<&FieldTable>) -> Attributes {
    let mut out = Attributes::new();
    let Some(headers) = headers else { return out };
    let types = match headers.get(TYPES_HEADER) {
        Some(FieldValue::Table(types)) => Some(types),
        _ => None,
    };
    for (name, value) in headers.iter() {
        let name = name.as_str().into_owned();
        if name.starts_with("x-") || check_name(&name).is_err() {
            continue;
        }
        let (value, plain) = match value {
            FieldValue::LongStr(s) => (AttributeValue::String(s.as_str().into_owned()), "String"),
            FieldValue::ByteArray(b) => (AttributeValue::Binary(b), "Binary"),
            FieldValue::Bool(b) => (AttributeValue::String(b.to_string()), "String"),
            FieldValue::F32(f) => (AttributeValue::String(f.to_string()), "Number"),
            FieldValue::F64(f) => (AttributeValue::String(f.to_string()), "Number"),
            FieldValue::Decimal { scale, value } => (AttributeValue::String(decimal(scale, value)), "Number"),
            other => match other.as_i64() {
                Some(i) => (AttributeValue::String(i.to_string()), "Number"),
                None => continue,
            },
        };
        let data_type = match types.as_ref().and_then(|t| t.get(&name)) {
            Some(FieldValue::LongStr(t)) => t.as_str().into_owned(),
            _ => plain.to_owned(),
        };
        out.insert(name, Attribute { data_type, value });
        if out.len() == ATTRIBUTES_MAX {
            break;
        }
    }
    out
}

fn decimal(scale: u8, value: u32) -> String {
    let digits = value.to_string();
    let scale = usize::from(scale);
    if scale == 0 {
        return digits;
    }
    let padded = format!("{digits:0>width$}", width = scale + 1);
    let (whole, fraction) = padded.split_at(padded.len() - scale);
    format!("{whole}.{fraction}")
}

/// Only the attributes `names` asks for (`All` or `.*` for every one, `prefix.*` for a prefix),
/// as ReceiveMessage's `MessageAttributeNames`.
pub fn selected(attributes: Attributes, names: &[String]) -> Attributes {
    attributes
        .into_iter()
        .filter(|(name, _)| {
            names.iter().any(|wanted| match wanted.strip_suffix(".*") {
                _ if wanted == "All" || wanted == ".*" => true,
                Some(prefix) => name.starts_with(prefix) && name[prefix.len()..].starts_with('.'),
                None => wanted == name,
            })
        })
        .collect()
}

/// `MessageAttributes` of an answer.
pub fn to_json(attributes: &Attributes) -> Value {
    let mut map = Map::new();
    for (name, attribute) in attributes {
        let value = match &attribute.value {
            AttributeValue::String(s) => json!({"DataType": attribute.data_type, "StringValue": s}),
            AttributeValue::Binary(b) => {
                json!({"DataType": attribute.data_type, "BinaryValue": STANDARD.encode(b)})
            }
        };
        map.insert(name.clone(), value);
    }
    Value::Object(map)
}

fn length_prefixed(md5: &mut Md5, bytes: &[u8]) {
    md5.update((bytes.len() as u32).to_be_bytes());
    md5.update(bytes);
}

/// `MD5OfMessageBody`: the hex MD5 of the body's bytes.
pub fn md5_of_body(body: &[u8]) -> String {
    crate::sigv4::hex(&Md5::digest(body))
}

/// `MD5OfMessageAttributes`, as AWS computes it: over the attributes in name order, each as its
/// name, its data type (each a 4-byte big-endian length and the bytes), a transport byte (1 for
/// a string, 2 for binary) and its value (a length and the bytes). `None` without attributes.
pub fn md5_of_attributes(attributes: &Attributes) -> Option<String> {
    if attributes.is_empty() {
        return None;
    }
    let mut md5 = Md5::new();
    for (name, attribute) in attributes {
        length_prefixed(&mut md5, name.as_bytes());
        length_prefixed(&mut md5, attribute.data_type.as_bytes());
        match &attribute.value {
            AttributeValue::String(s) => {
                md5.update([1u8]);
                length_prefixed(&mut md5, s.as_bytes());
            }
            AttributeValue::Binary(b) => {
                md5.update([2u8]);
                length_prefixed(&mut md5, b);
            }
        }
    }
    Some(crate::sigv4::hex(&md5.finalize()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Value {
        json!({
            "colour": {"DataType": "String", "StringValue": "blue"},
            "count": {"DataType": "Number", "StringValue": "42"},
            "raw": {"DataType": "Binary", "BinaryValue": STANDARD.encode([0u8, 1, 255])},
            "id": {"DataType": "String.uuid", "StringValue": "1b4e28ba-2fa1-11d2-883f-0016d3cca427"},
        })
    }

    /// The digests of the body and of these attributes are what moto 5.2.1's SQS answers for the
    /// same SendMessage (an independent implementation of AWS's algorithm).
    #[test]
    fn digests_match_an_independent_implementation() {
        assert_eq!(md5_of_body(b"hello"), "5d41402abc4b2a76b9719d911017c592");
        let attributes = from_json(Some(&sample())).unwrap();
        assert_eq!(md5_of_attributes(&attributes).as_deref(), Some("7e75716bd93ccf49b7e913ef9150aec8"));
        assert_eq!(md5_of_attributes(&Attributes::new()), None);
    }

    /// Attributes survive the trip through AMQP headers with their data types; an AMQP
    /// message's own headers read as attributes, `x-` headers do not.
    #[test]
    fn attributes_round_trip_through_headers() {
        let attributes = from_json(Some(&sample())).unwrap();
        let table = FieldTable::from_entries(to_headers(&attributes));
        assert_eq!(from_headers(Some(&table)), attributes);
        let amqp = FieldTable::from_entries([
            ("n", FieldValue::I32(-7)),
            ("s", FieldValue::LongStr(LongStr::from("x".to_owned()))),
            ("d", FieldValue::Decimal { scale: 2, value: 5 }),
            ("x-death", FieldValue::Void),
            ("t", FieldValue::Timestamp(1)),
        ]);
        let read = from_headers(Some(&amqp));
        let summary: Vec<(&str, &str, &AttributeValue)> =
            read.iter().map(|(n, a)| (n.as_str(), a.data_type.as_str(), &a.value)).collect();
        assert_eq!(
            summary,
            [
                ("d", "Number", &AttributeValue::String("0.05".into())),
                ("n", "Number", &AttributeValue::String("-7".into())),
                ("s", "String", &AttributeValue::String("x".into())),
            ]
        );
    }

    /// AWS's rules: at most 10, valid names and types, numbers that are numbers.
    #[test]
    fn invalid_attributes_are_refused() {
        let eleven: Map<String, Value> =
            (0..11).map(|i| (format!("a{i}"), json!({"DataType": "String", "StringValue": "v"}))).collect();
        assert!(from_json(Some(&Value::Object(eleven))).is_err());
        for bad in [
            json!({"AWS.x": {"DataType": "String", "StringValue": "v"}}),
            json!({"a..b": {"DataType": "String", "StringValue": "v"}}),
            json!({"a": {"DataType": "Text", "StringValue": "v"}}),
            json!({"a": {"DataType": "Number", "StringValue": "seven"}}),
            json!({"a": {"DataType": "Binary", "BinaryValue": "%%%"}}),
            json!({"a": {"DataType": "String"}}),
        ] {
            assert!(from_json(Some(&bad)).is_err(), "{bad}");
        }
    }

    /// `MessageAttributeNames`: `All`, `.*`, a prefix or a name.
    #[test]
    fn attribute_names_select() {
        let attributes = from_json(Some(&sample())).unwrap();
        let names = |wanted: &[&str]| -> Vec<String> {
            let wanted: Vec<String> = wanted.iter().map(|s| (*s).to_owned()).collect();
            selected(attributes.clone(), &wanted).into_keys().collect()
        };
        assert_eq!(names(&["All"]).len(), 4);
        assert_eq!(names(&["colour", "nope"]), ["colour"]);
        assert!(names(&[]).is_empty());
    }
}
