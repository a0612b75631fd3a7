//! An AMQP 1.0 message (part 3.2: header, annotations, properties, application properties, body,
//! footer) and the 0-9-1 message it becomes, as RabbitMQ 4.x maps them ("Message annotations and
//! properties" in its AMQP docs):
//!
//! | AMQP 1.0 | AMQP 0-9-1 |
//! |---|---|
//! | header `durable` (true when the header or the field is absent, as RabbitMQ 4) | `delivery_mode` 2 / 1 |
//! | header `priority`, `ttl` | `priority`, `expiration` |
//! | properties `message-id`, `correlation-id`, `user-id`, `reply-to`, `content-type`, `content-encoding`, `creation-time` | the property of that name (`timestamp` in seconds); a `reply-to` of `/queues/:q` becomes `q` |
//! | application properties | `headers` |
//! | message annotations named `x-…` | `headers` (`x-opt-delivery-time` among them) |
//! | one or more `data` sections | the body, concatenated |
//! | an `amqp-value` string or binary | the body (its bytes) |
//!
//! And back on delivery: a data section with the body, `x-exchange` and `x-routing-key`
//! annotations, `first-acquirer` false for a redelivery, headers named `x-…` as annotations and
//! the others (of simple types) as application properties.

use std::borrow::Cow;

use bytes::{Bytes, BytesMut};
use hourglass_wire::amqp1::{
    decode_value, encode_list_of_encoded, encode_value, encoded_binary, encoded_list, encoded_string,
    value_len, Amqp1DecodeError, Value,
};
use hourglass_wire::{BasicProperties, FieldTable, FieldValue, LongStr, ShortStr};

use super::address;

/// Section descriptors (part 3.2).
const HEADER: u64 = 0x70;
const DELIVERY_ANNOTATIONS: u64 = 0x71;
const MESSAGE_ANNOTATIONS: u64 = 0x72;
const PROPERTIES: u64 = 0x73;
const APPLICATION_PROPERTIES: u64 = 0x74;
const DATA: u64 = 0x75;
const AMQP_SEQUENCE: u64 = 0x76;
const AMQP_VALUE: u64 = 0x77;
const FOOTER: u64 = 0x78;

/// A 1.0 message as a 0-9-1 publish carries it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Inbound {
    pub properties: BasicProperties,
    pub body: Bytes,
    /// The `to` property: where a link with a null target sends the message.
    pub to: Option<String>,
}

/// How many bytes the sections that are decoded into values (header, message annotations,
/// properties, application properties) may take together. A decoded value takes up to 30 times
/// its encoding, so without this a 128 MiB message could take gigabytes; 0-9-1's headers are
/// bounded by its frame (128 KiB by default).
pub(crate) const HEAD_SECTIONS_BYTES_MAX: usize = 1 << 20;

/// How many bytes a section descriptor may take: a ulong or a symbol of part 3.2's names.
const DESCRIPTOR_BYTES_MAX: usize = 64;

/// Why a transfer's payload is not a message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum MessageError {
    #[error("the message is not a sequence of AMQP 1.0 sections: {0}")]
    Undecodable(String),
    #[error("message section {0} is not one AMQP 1.0 defines")]
    UnknownSection(String),
    #[error(
        "the message's header, annotations and properties take more than {HEAD_SECTIONS_BYTES_MAX} bytes"
    )]
    HeadTooLarge,
    #[error("the body is {0} bytes encoded, more than the {HEAD_SECTIONS_BYTES_MAX} a request may have")]
    RequestTooLarge(usize),
}

impl MessageError {
    /// The AMQP 1.0 error condition that refuses the message.
    pub(crate) fn condition(&self) -> &'static str {
        match self {
            Self::Undecodable(_) | Self::UnknownSection(_) => "amqp:decode-error",
            Self::HeadTooLarge | Self::RequestTooLarge(_) => "amqp:resource-limit-exceeded",
        }
    }
}

/// A message's sections as read (part 3.2), before any mapping.
#[derive(Debug)]
pub(crate) struct Sections<'a> {
    pub header: Vec<Value>,
    pub annotations: Value,
    /// The properties section's fields by position (message-id first).
    pub properties: Vec<Value>,
    pub application: Value,
    /// The data sections.
    pub data: DataSections<'a>,
    /// An amqp-value or amqp-sequence body, as sent: checked, never decoded here.
    pub body: Option<BodyValue<'a>>,
}

/// A message's data sections (part 3.2.6): the usual one as a slice of the payload, several
/// joined.
#[derive(Debug, Default)]
pub(crate) enum DataSections<'a> {
    #[default]
    None,
    One(&'a [u8]),
    Joined(BytesMut),
}

impl<'a> DataSections<'a> {
    fn push(&mut self, data: &'a [u8]) {
        *self = match std::mem::take(self) {
            DataSections::None => DataSections::One(data),
            DataSections::One(first) => {
                let mut joined = BytesMut::with_capacity(first.len() + data.len());
                joined.extend_from_slice(first);
                joined.extend_from_slice(data);
                DataSections::Joined(joined)
            }
            DataSections::Joined(mut joined) => {
                joined.extend_from_slice(data);
                DataSections::Joined(joined)
            }
        };
    }

    /// The body they make, then `rest` (a body value's bytes) after them: a single data
    /// section is the payload's own bytes, not a copy.
    fn into_body(self, payload: &Bytes, rest: Option<&[u8]>) -> Bytes {
        let mut joined = match (self, rest) {
            (DataSections::None, None) => return Bytes::new(),
            (DataSections::One(data), None) => return payload.slice_ref(data),
            (DataSections::None, Some(_)) => BytesMut::new(),
            (DataSections::One(data), Some(_)) => BytesMut::from(data),
            (DataSections::Joined(joined), _) => joined,
        };
        joined.extend_from_slice(rest.unwrap_or_default());
        joined.freeze()
    }
}

/// A body of AMQP values (part 3.2.7, 3.2.8) as sent.
#[derive(Debug)]
pub(crate) enum BodyValue<'a> {
    /// An amqp-value section's value, encoded.
    Value(&'a [u8]),
    /// The elements of amqp-sequence sections, encoded one after another.
    Sequence { count: usize, items: BytesMut },
}

impl Sections<'_> {
    /// The body's value encoded: an amqp-value as sent, amqp-sequences as one list.
    pub(crate) fn body_encoded(&self) -> Option<Cow<'_, [u8]>> {
        Some(match self.body.as_ref()? {
            BodyValue::Value(encoded) => Cow::Borrowed(encoded),
            BodyValue::Sequence { count, items } => {
                let mut out = BytesMut::with_capacity(items.len() + 9);
                encode_list_of_encoded(*count, items, &mut out);
                Cow::Owned(out.to_vec())
            }
        })
    }

    /// The body's value decoded, for a `$management` request or reply: at most
    /// [`HEAD_SECTIONS_BYTES_MAX`] encoded.
    pub(crate) fn body_value(&self) -> Result<Option<Value>, MessageError> {
        let Some(encoded) = self.body_encoded() else { return Ok(None) };
        if encoded.len() > HEAD_SECTIONS_BYTES_MAX {
            return Err(MessageError::RequestTooLarge(encoded.len()));
        }
        let (value, _) = decode_value(&encoded).map_err(|e| MessageError::Undecodable(e.to_string()))?;
        Ok(Some(value))
    }
}

/// Reads a payload's sections. Each is checked whole (`value_len`), but only the header,
/// annotations and properties become values, at most [`HEAD_SECTIONS_BYTES_MAX`] of them.
pub(crate) fn sections(mut payload: &[u8]) -> Result<Sections<'_>, MessageError> {
    let undecodable = |e: Amqp1DecodeError| MessageError::Undecodable(e.to_string());
    let mut sections = Sections {
        header: Vec::new(),
        annotations: Value::Null,
        properties: Vec::new(),
        application: Value::Null,
        data: DataSections::None,
        body: None,
    };
    let mut head_bytes = 0;
    while !payload.is_empty() {
        // A data section, the usual body, is copied straight from the bytes (no value tree).
        if let Some((data, used)) = data_section(payload) {
            sections.data.push(data);
            payload = &payload[used..];
            continue;
        }
        let Some((&0x00, described)) = payload.split_first() else {
            value_len(payload).map_err(undecodable)?;
            return Err(MessageError::UnknownSection("without a descriptor".into()));
        };
        let descriptor_len = value_len(described).map_err(undecodable)?;
        let (descriptor, rest) = described.split_at(descriptor_len);
        let section_len = value_len(rest).map_err(undecodable)?;
        let (section, after) = rest.split_at(section_len);
        payload = after;
        let code = if descriptor_len <= DESCRIPTOR_BYTES_MAX {
            section_code(&decode_value(descriptor).map_err(undecodable)?.0)
        } else {
            None
        };
        let Some(code) = code else {
            return Err(MessageError::UnknownSection(format!("{descriptor:02x?}")));
        };
        let mut decoded = || {
            head_bytes += section.len();
            if head_bytes > HEAD_SECTIONS_BYTES_MAX {
                return Err(MessageError::HeadTooLarge);
            }
            Ok(decode_value(section).map_err(undecodable)?.0)
        };
        match code {
            HEADER => sections.header = into_list(decoded()?),
            PROPERTIES => sections.properties = into_list(decoded()?),
            APPLICATION_PROPERTIES => sections.application = decoded()?,
            MESSAGE_ANNOTATIONS => sections.annotations = decoded()?,
            DATA => {
                if let Some(bytes) = encoded_binary(section) {
                    sections.data.push(bytes);
                }
            }
            AMQP_VALUE => sections.body = Some(BodyValue::Value(section)),
            AMQP_SEQUENCE => {
                let (count, items) = encoded_list(section).unwrap_or((0, &[]));
                match &mut sections.body {
                    Some(BodyValue::Sequence { count: all, items: all_items }) => {
                        *all += count;
                        all_items.extend_from_slice(items);
                    }
                    body => *body = Some(BodyValue::Sequence { count, items: BytesMut::from(items) }),
                }
            }
            DELIVERY_ANNOTATIONS | FOOTER => {}
            _ => return Err(MessageError::UnknownSection(format!("{code:#x}"))),
        }
    }
    Ok(sections)
}

/// A data section at the start of `payload` (`0x00 0x53 0x75` then vbin8 or vbin32): its bytes
/// and the section's length; `None` for anything else.
fn data_section(payload: &[u8]) -> Option<(&[u8], usize)> {
    let (len, head): (usize, usize) = match payload {
        [0x00, 0x53, 0x75, 0xa0, len, ..] => (usize::from(*len), 5),
        [0x00, 0x53, 0x75, 0xb0, a, b, c, d, ..] => {
            (usize::try_from(u32::from_be_bytes([*a, *b, *c, *d])).ok()?, 8)
        }
        _ => return None,
    };
    let end = head.checked_add(len)?;
    Some((payload.get(head..end)?, end))
}

fn into_list(section: Value) -> Vec<Value> {
    match section {
        Value::List(items) => items,
        _ => Vec::new(),
    }
}

/// Reads a transfer's payload as the 0-9-1 message it becomes.
pub(crate) fn inbound(payload: &Bytes) -> Result<Inbound, MessageError> {
    let mut sections = sections(payload)?;
    let mut properties = BasicProperties { delivery_mode: Some(2), ..BasicProperties::default() };
    read_header(&sections.header, &mut properties);
    let to = read_properties(&sections.properties, &mut properties);
    let mut headers = map_entries(&sections.application, Times::Seconds, |_| true);
    headers.extend(map_entries(&sections.annotations, Times::Millis, |k| k.starts_with("x-")));
    schedule_as_delivery_time(&mut headers);
    if !headers.is_empty() {
        properties.headers =
            Some(FieldTable::from_entries(headers.iter().map(|(k, v)| (k.as_bytes(), v.clone()))));
    }
    let data = std::mem::take(&mut sections.data);
    let encoded = sections.body_encoded();
    // A binary or a string is the body's bytes; any other value is its encoding.
    let rest = encoded.as_deref().map(|e| encoded_binary(e).or_else(|| encoded_string(e)).unwrap_or(e));
    let body = data.into_body(payload, rest);
    Ok(Inbound { properties, body, to })
}

/// The message annotations of a `modified` outcome as the headers they set (as a publish's
/// annotations become headers), or the first key that does not start with `x-`: the spec
/// reserves every other symbolic key (part 3.2.10), and RabbitMQ's clients refuse them.
/// `x-opt-delivery-time` is left out when the outcome carries out the time it asks for
/// (`time_carried_out`); otherwise (a message dead-lettered) it is kept like any other.
pub(crate) fn modified_annotations(
    map: Option<&Value>,
    time_carried_out: bool,
) -> Result<FieldTable, String> {
    let Some(map @ Value::Map(pairs)) = map else { return Ok(FieldTable::default()) };
    if let Some((key, _)) = pairs.iter().find(|(key, _)| !text(key).is_some_and(|k| k.starts_with("x-"))) {
        return Err(format!("a modified outcome's message annotation key {key:?} does not start with 'x-'"));
    }
    let entries = map_entries(map, Times::Millis, |k| !time_carried_out || k != "x-opt-delivery-time");
    Ok(FieldTable::from_entries(entries.iter().map(|(k, v)| (k.as_bytes(), v.clone()))))
}

/// A 1.0 map (declare arguments) as a 0-9-1 table; entries 0-9-1 cannot carry are left out.
pub(crate) fn table_of(map: &Value) -> FieldTable {
    let entries = map_entries(map, Times::Seconds, |_| true);
    FieldTable::from_entries(entries.iter().map(|(k, v)| (k.as_bytes(), v.clone())))
}

fn section_code(descriptor: &Value) -> Option<u64> {
    match descriptor {
        Value::Ulong(code) => Some(*code),
        Value::Symbol(name) => Some(match name.as_str() {
            "amqp:header:list" => HEADER,
            "amqp:delivery-annotations:map" => DELIVERY_ANNOTATIONS,
            "amqp:message-annotations:map" => MESSAGE_ANNOTATIONS,
            "amqp:properties:list" => PROPERTIES,
            "amqp:application-properties:map" => APPLICATION_PROPERTIES,
            "amqp:data:binary" => DATA,
            "amqp:amqp-sequence:list" => AMQP_SEQUENCE,
            "amqp:amqp-value:*" => AMQP_VALUE,
            "amqp:footer:map" => FOOTER,
            _ => return None,
        }),
        _ => None,
    }
}

fn read_header(fields: &[Value], properties: &mut BasicProperties) {
    if let Some(Value::Bool(durable)) = fields.first() {
        properties.delivery_mode = Some(if *durable { 2 } else { 1 });
    }
    if let Some(Value::Ubyte(priority)) = fields.get(1) {
        properties.priority = Some(*priority);
    }
    if let Some(Value::Uint(ttl)) = fields.get(2) {
        properties.expiration = short(&ttl.to_string());
    }
}

/// Sets the 0-9-1 properties from the 1.0 properties section; returns its `to`.
fn read_properties(fields: &[Value], properties: &mut BasicProperties) -> Option<String> {
    let field = |at: usize| fields.get(at).filter(|v| **v != Value::Null);
    properties.message_id = field(0).and_then(id_text).as_deref().and_then(short);
    if let Some(Value::Binary(user)) = field(1) {
        properties.user_id = ShortStr::new(user.clone()).ok();
    }
    let to = field(2).and_then(text).map(str::to_owned);
    if let Some(reply_to) = field(4).and_then(text) {
        let queue = address::source(reply_to).ok();
        properties.reply_to = short(queue.as_deref().unwrap_or(reply_to));
    }
    properties.correlation_id = field(5).and_then(id_text).as_deref().and_then(short);
    properties.content_type = field(6).and_then(text).and_then(short);
    properties.content_encoding = field(7).and_then(text).and_then(short);
    if let Some(Value::Timestamp(ms)) = field(9) {
        properties.timestamp = u64::try_from(*ms / 1000).ok();
    }
    to
}

fn text(value: &Value) -> Option<&str> {
    match value {
        Value::String(s) | Value::Symbol(s) => Some(s),
        _ => None,
    }
}

/// A message or correlation id as text (1.0 allows a ulong, a UUID, binary or a string).
fn id_text(value: &Value) -> Option<String> {
    match value {
        Value::String(s) => Some(s.clone()),
        Value::Ulong(n) => Some(n.to_string()),
        Value::Uuid(bytes) => Some(uuid_text(bytes)),
        Value::Binary(bytes) => std::str::from_utf8(bytes).ok().map(str::to_owned),
        _ => None,
    }
}

fn uuid_text(b: &[u8; 16]) -> String {
    let hex: String = b.iter().map(|byte| format!("{byte:02x}")).collect();
    format!("{}-{}-{}-{}-{}", &hex[..8], &hex[8..12], &hex[12..16], &hex[16..20], &hex[20..])
}

fn short(text: &str) -> Option<ShortStr> {
    ShortStr::try_from(text).ok()
}

/// How a 1.0 timestamp (milliseconds) becomes a header: RabbitMQ's 0-9-1 timestamp (seconds)
/// for application properties; milliseconds for annotations, whose times (`x-opt-delivery-time`)
/// decide when a message is due and must not be rounded early.
#[derive(Clone, Copy)]
enum Times {
    Seconds,
    Millis,
}

/// Azure Service Bus's `x-opt-scheduled-enqueue-time` asks what RabbitMQ 4.4's
/// `x-opt-delivery-time` does: the broker reads the latter.
fn schedule_as_delivery_time(headers: &mut Vec<(String, FieldValue)>) {
    const SCHEDULED: &str = "x-opt-scheduled-enqueue-time";
    const DELIVERY_TIME: &str = "x-opt-delivery-time";
    if headers.iter().any(|(k, _)| k == DELIVERY_TIME) {
        return;
    }
    if let Some((_, at)) = headers.iter().find(|(k, _)| k == SCHEDULED) {
        let at = at.clone();
        headers.push((DELIVERY_TIME.to_owned(), at));
    }
}

/// A map section's entries with string or symbol keys that `keep` takes, as 0-9-1 headers
/// (values 0-9-1 cannot carry are left out).
fn map_entries(section: &Value, times: Times, keep: impl Fn(&str) -> bool) -> Vec<(String, FieldValue)> {
    let Value::Map(pairs) = section else { return Vec::new() };
    pairs
        .iter()
        .filter_map(|(key, value)| {
            let key = text(key)?;
            if !keep(key) || key.len() > 255 {
                return None;
            }
            let value = match (value, times) {
                (Value::Timestamp(ms), Times::Millis) => FieldValue::I64(*ms),
                _ => field_value(value)?,
            };
            Some((key.to_owned(), value))
        })
        .collect()
}

fn field_value(value: &Value) -> Option<FieldValue> {
    Some(match value {
        Value::Bool(b) => FieldValue::Bool(*b),
        Value::Ubyte(n) => FieldValue::U8(*n),
        Value::Byte(n) => FieldValue::I8(*n),
        Value::Ushort(n) => FieldValue::U16(*n),
        Value::Short(n) => FieldValue::I16(*n),
        Value::Uint(n) => FieldValue::U32(*n),
        Value::Int(n) => FieldValue::I32(*n),
        Value::Ulong(n) => FieldValue::I64(i64::try_from(*n).ok()?),
        Value::Long(n) => FieldValue::I64(*n),
        Value::Float(f) => FieldValue::F32(*f),
        Value::Double(f) => FieldValue::F64(*f),
        // RabbitMQ maps a 1.0 timestamp (ms) to a 0-9-1 timestamp (s).
        Value::Timestamp(ms) => FieldValue::Timestamp(u64::try_from(*ms / 1000).ok()?),
        Value::String(s) | Value::Symbol(s) => FieldValue::LongStr(LongStr::from(s.as_str())),
        Value::Binary(bytes) => FieldValue::ByteArray(bytes.clone()),
        _ => return None,
    })
}

/// A delivered 0-9-1 message as a 1.0 transfer payload.
pub(crate) fn outbound(
    properties: &BasicProperties,
    body: &[u8],
    exchange: &str,
    routing_key: &str,
    redelivered: bool,
    out: &mut BytesMut,
) {
    let durable = properties.delivery_mode == Some(2);
    let mut header = vec![
        Value::Bool(durable),
        properties.priority.map_or(Value::Null, Value::Ubyte),
        properties
            .expiration
            .as_ref()
            .and_then(|e| e.as_str().parse::<u32>().ok())
            .map_or(Value::Null, Value::Uint),
        Value::Bool(!redelivered),
    ];
    trim_nulls(&mut header);
    section(HEADER, Value::List(header), out);
    let mut annotations = vec![
        (Value::Symbol("x-exchange".into()), Value::String(exchange.to_owned())),
        (Value::Symbol("x-routing-key".into()), Value::String(routing_key.to_owned())),
    ];
    let mut application = Vec::new();
    if let Some(headers) = &properties.headers {
        for (key, value) in headers.iter() {
            let key = key.as_str().into_owned();
            let Some(value) = amqp1_value(&value) else { continue };
            if key.starts_with("x-") {
                annotations.push((Value::Symbol(key), value));
            } else {
                application.push((Value::String(key), value));
            }
        }
    }
    section(MESSAGE_ANNOTATIONS, Value::Map(annotations), out);
    let string =
        |s: &Option<ShortStr>| s.as_ref().map_or(Value::Null, |s| Value::String(s.as_str().into_owned()));
    let symbol =
        |s: &Option<ShortStr>| s.as_ref().map_or(Value::Null, |s| Value::Symbol(s.as_str().into_owned()));
    let mut fields = vec![
        string(&properties.message_id),
        properties.user_id.as_ref().map_or(Value::Null, |u| Value::Binary(u.clone().into_bytes())),
        Value::Null,
        Value::Null,
        // RabbitMQ 4: a 0-9-1 reply-to queue name is a `/queues/` address in 1.0.
        properties
            .reply_to
            .as_ref()
            .map_or(Value::Null, |q| Value::String(address::queue_address(&q.as_str()))),
        string(&properties.correlation_id),
        symbol(&properties.content_type),
        symbol(&properties.content_encoding),
        Value::Null,
        properties
            .timestamp
            .and_then(|s| i64::try_from(s).ok())
            .map_or(Value::Null, |s| Value::Timestamp(s.saturating_mul(1000))),
    ];
    trim_nulls(&mut fields);
    if !fields.is_empty() {
        section(PROPERTIES, Value::List(fields), out);
    }
    if !application.is_empty() {
        section(APPLICATION_PROPERTIES, Value::Map(application), out);
    }
    section(DATA, Value::Binary(Bytes::copy_from_slice(body)), out);
}

fn trim_nulls(fields: &mut Vec<Value>) {
    while fields.last() == Some(&Value::Null) {
        fields.pop();
    }
}

fn section(code: u64, value: Value, out: &mut BytesMut) {
    encode_value(&Value::Described(Box::new(Value::Ulong(code)), Box::new(value)), out);
}

/// A 0-9-1 table (queue arguments) as a 1.0 map with string keys.
pub(crate) fn map_of(table: &FieldTable) -> Value {
    let entries = table
        .iter()
        .filter_map(|(key, value)| Some((Value::String(key.as_str().into_owned()), amqp1_value(&value)?)))
        .collect();
    Value::Map(entries)
}

/// A 0-9-1 header value as a 1.0 value (tables, arrays and void have no simple 1.0 form).
fn amqp1_value(value: &FieldValue) -> Option<Value> {
    Some(match value {
        FieldValue::Bool(b) => Value::Bool(*b),
        FieldValue::I8(n) => Value::Byte(*n),
        FieldValue::U8(n) => Value::Ubyte(*n),
        FieldValue::I16(n) => Value::Short(*n),
        FieldValue::U16(n) => Value::Ushort(*n),
        FieldValue::I32(n) => Value::Int(*n),
        FieldValue::U32(n) => Value::Uint(*n),
        FieldValue::I64(n) => Value::Long(*n),
        FieldValue::F32(f) => Value::Float(*f),
        FieldValue::F64(f) => Value::Double(*f),
        FieldValue::LongStr(s) => Value::String(s.as_str().into_owned()),
        FieldValue::Timestamp(s) => Value::Timestamp(i64::try_from(*s).ok()?.saturating_mul(1000)),
        FieldValue::ByteArray(bytes) => Value::Binary(bytes.clone()),
        FieldValue::Decimal { .. } | FieldValue::Array(_) | FieldValue::Table(_) | FieldValue::Void => {
            return None
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// [`super::inbound`] of bytes as a frame would hold them.
    fn inbound(payload: &[u8]) -> Result<Inbound, MessageError> {
        super::inbound(&Bytes::copy_from_slice(payload))
    }

    fn encoded(sections: &[(u64, Value)]) -> Vec<u8> {
        let mut out = BytesMut::new();
        for (code, value) in sections {
            section(*code, value.clone(), &mut out);
        }
        out.to_vec()
    }

    /// Held by the tests that allocate megabytes, so that one does not count the other's.
    static LARGE: std::sync::Mutex<()> = std::sync::Mutex::new(());

    /// A list of `count` nulls, encoded as a list32.
    fn nulls(count: usize) -> Vec<u8> {
        let mut out = BytesMut::new();
        encode_list_of_encoded(count, &vec![0x40; count], &mut out);
        out.to_vec()
    }

    fn described(code: u64, value: &[u8]) -> Vec<u8> {
        let mut out = vec![0x00, 0x53, code as u8];
        out.extend_from_slice(value);
        out
    }

    /// A value body becomes the 0-9-1 body without a value tree: 4 MiB of nulls as a tree would
    /// take 32 bytes each (128 MiB). The body's own bytes are what it takes; the bound leaves
    /// room for what tests running beside this one allocate meanwhile (the count is global).
    #[test]
    fn a_large_value_body_is_read_without_a_value_tree() {
        let _alone = LARGE.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let list = nulls(4 << 20);
        let payload = described(AMQP_VALUE, &list);
        let region = stats_alloc::Region::new(crate::ALLOCATOR);
        let message = inbound(&payload).unwrap();
        let allocated = region.change().bytes_allocated;
        assert_eq!(&message.body[..], &list[..]);
        assert!(allocated < 8 * list.len(), "{allocated} bytes allocated for a {}-byte body", list.len());
        // Two sequences are one list.
        let mut payload = described(AMQP_SEQUENCE, &nulls(3));
        payload.extend(described(AMQP_SEQUENCE, &nulls(300)));
        assert_eq!(&inbound(&payload).unwrap().body[..], &nulls(303)[..]);
        // A string or a binary is its bytes; a bad one is refused as before.
        let text = described(AMQP_VALUE, &[0xa1, 2, b'h', b'i']);
        assert_eq!(&inbound(&text).unwrap().body[..], b"hi");
        let bad = described(AMQP_VALUE, &[0xa1, 1, 0xff]);
        assert!(matches!(inbound(&bad), Err(MessageError::Undecodable(_))));
    }

    /// What becomes values (application properties here) is bounded, with its own condition.
    #[test]
    fn head_sections_over_their_limit_are_refused() {
        let _alone = LARGE.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut map = BytesMut::new();
        let entries = HEAD_SECTIONS_BYTES_MAX / 2;
        let mut body = Vec::with_capacity(entries * 2);
        for _ in 0..entries / 2 {
            body.extend_from_slice(&[0xa1, 0, 0x40]);
        }
        map.extend_from_slice(&[0xd1]);
        map.extend_from_slice(&((body.len() + 4) as u32).to_be_bytes());
        map.extend_from_slice(&((entries / 2 * 2) as u32).to_be_bytes());
        map.extend_from_slice(&body);
        let small = described(APPLICATION_PROPERTIES, &map);
        assert!(inbound(&small).is_ok());
        let mut twice = small.clone();
        twice.extend(described(MESSAGE_ANNOTATIONS, &map));
        let refused = inbound(&twice).unwrap_err();
        assert_eq!(refused, MessageError::HeadTooLarge);
        assert_eq!(refused.condition(), "amqp:resource-limit-exceeded");
    }

    #[test]
    fn a_message_without_a_header_is_durable_as_in_rabbitmq_4() {
        let message = inbound(&encoded(&[(DATA, Value::Binary(Bytes::from_static(b"hi")))])).unwrap();
        assert_eq!(message.properties.delivery_mode, Some(2));
        assert_eq!(&message.body[..], b"hi");
        let header = Value::List(vec![Value::Bool(false)]);
        let message = inbound(&encoded(&[(HEADER, header), (DATA, Value::Binary(Bytes::new()))])).unwrap();
        assert_eq!(message.properties.delivery_mode, Some(1));
    }

    #[test]
    fn properties_and_application_properties_become_0_9_1_properties_and_headers() {
        let properties = Value::List(vec![
            Value::Ulong(42),
            Value::Null,
            Value::String("/queues/q".into()),
            Value::Null,
            Value::String("/queues/replies".into()),
            Value::String("c-1".into()),
            Value::Symbol("text/plain".into()),
        ]);
        let application = Value::Map(vec![(Value::String("tenant".into()), Value::Int(7))]);
        let annotations = Value::Map(vec![
            (Value::Symbol("x-opt-delivery-time".into()), Value::Timestamp(1_900_000_000_000)),
            (Value::Symbol("ignored".into()), Value::Int(1)),
        ]);
        let header = Value::List(vec![Value::Null, Value::Ubyte(5), Value::Uint(60_000)]);
        let payload = encoded(&[
            (HEADER, header),
            (MESSAGE_ANNOTATIONS, annotations),
            (PROPERTIES, properties),
            (APPLICATION_PROPERTIES, application),
            (AMQP_VALUE, Value::String("body".into())),
        ]);
        let message = inbound(&payload).unwrap();
        let p = &message.properties;
        assert_eq!(p.message_id.as_ref().unwrap(), "42");
        assert_eq!(p.reply_to.as_ref().unwrap(), "replies");
        assert_eq!(p.correlation_id.as_ref().unwrap(), "c-1");
        assert_eq!(p.content_type.as_ref().unwrap(), "text/plain");
        assert_eq!(p.priority, Some(5));
        assert_eq!(p.expiration.as_ref().unwrap(), "60000");
        let headers = p.headers.as_ref().unwrap();
        assert_eq!(headers.get("tenant"), Some(FieldValue::I32(7)));
        // Kept to the millisecond: a due time rounded down would deliver early.
        assert_eq!(headers.get("x-opt-delivery-time"), Some(FieldValue::I64(1_900_000_000_000)));
        assert_eq!(headers.get("ignored"), None);
        assert_eq!(message.to.as_deref(), Some("/queues/q"));
        assert_eq!(&message.body[..], b"body");
    }

    #[test]
    fn a_service_bus_scheduled_enqueue_time_is_a_delivery_time() {
        let annotations = Value::Map(vec![(
            Value::Symbol("x-opt-scheduled-enqueue-time".into()),
            Value::Timestamp(1_900_000_000_123),
        )]);
        let message = inbound(&encoded(&[(MESSAGE_ANNOTATIONS, annotations)])).unwrap();
        let headers = message.properties.headers.unwrap();
        assert_eq!(headers.get("x-opt-delivery-time"), Some(FieldValue::I64(1_900_000_000_123)));
    }

    #[test]
    fn data_sections_read_in_place_are_the_body_as_the_general_reader_reads_it() {
        let big = Bytes::from(vec![7u8; 300]);
        let payload = encoded(&[
            (DATA, Value::Binary(Bytes::from_static(b"ab"))),
            (DATA, Value::Binary(big.clone())),
            (AMQP_VALUE, Value::String("c".into())),
        ]);
        let mut expected = b"ab".to_vec();
        expected.extend_from_slice(&big);
        expected.extend_from_slice(b"c");
        assert_eq!(&inbound(&payload).unwrap().body[..], &expected[..]);
        // A section cut short is an error, not a shorter body.
        assert!(inbound(&payload[..8]).is_err());
    }

    /// The usual body, one data section, is the transfer's own bytes, not a copy; several are
    /// joined.
    #[test]
    fn a_single_data_section_is_the_payload_s_own_bytes() {
        let payload = Bytes::from(encoded(&[(DATA, Value::Binary(Bytes::from_static(b"hello")))]));
        let body = super::inbound(&payload).unwrap().body;
        assert_eq!(&body[..], b"hello");
        assert!(payload.as_ptr_range().contains(&body.as_ptr()), "the body was copied");
        let two = [
            (DATA, Value::Binary(Bytes::from_static(b"he"))),
            (DATA, Value::Binary(Bytes::from_static(b"llo"))),
        ];
        assert_eq!(&inbound(&encoded(&two)).unwrap().body[..], b"hello");
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        assert!(inbound(&[0xff, 0x00]).is_err());
        assert!(inbound(&encoded(&[(0x99, Value::Null)])).is_err());
        assert!(inbound(&[0x40]).is_err());
    }

    #[test]
    fn a_delivery_reads_back_as_the_message_that_was_published() {
        let headers = FieldTable::from_entries([
            ("tenant", FieldValue::LongStr(LongStr::from("a"))),
            ("x-death-count", FieldValue::I64(2)),
        ]);
        let properties = BasicProperties {
            delivery_mode: Some(2),
            message_id: short("m-1"),
            content_type: short("application/json"),
            headers: Some(headers),
            ..BasicProperties::default()
        };
        let mut out = BytesMut::new();
        outbound(&properties, b"{}", "ex", "rk", true, &mut out);
        let back = inbound(&out).unwrap();
        assert_eq!(back.properties.message_id, properties.message_id);
        assert_eq!(back.properties.content_type, properties.content_type);
        assert_eq!(back.properties.delivery_mode, Some(2));
        let headers = back.properties.headers.unwrap();
        assert_eq!(headers.get("tenant"), Some(FieldValue::LongStr(LongStr::from("a"))));
        assert_eq!(headers.get("x-routing-key"), Some(FieldValue::LongStr(LongStr::from("rk"))));
        assert_eq!(&back.body[..], b"{}");
    }
}
