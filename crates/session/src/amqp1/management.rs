//! RabbitMQ 4's `/management` node: HTTP-like requests over an AMQP 1.0 link pair, which the
//! RabbitMQ AMQP 1.0 clients use to declare, delete, purge and bind (RabbitMQ's "HTTP over
//! AMQP"). A request is a message whose `to` is the path, `subject` the method, `message-id`
//! what the reply's `correlation-id` names, and body an `amqp-value` map; the reply's `subject`
//! is the status code.
//!
//! Each request becomes one broker method on a channel of its own (`links.rs`), and its answer —
//! the method's `-ok` or the channel's error — becomes the reply:
//!
//! | request | broker method | reply |
//! |---|---|---|
//! | `PUT /queues/:q` {durable, exclusive, auto_delete, arguments} | queue.declare | 200, the queue |
//! | `GET /queues/:q` | a queue query (`Command::Query`) | 200, the queue |
//! | `DELETE /queues/:q` | queue.delete | 200 {message_count} |
//! | `DELETE /queues/:q/messages` | queue.purge | 200 {message_count} |
//! | `PUT /exchanges/:x` {type, durable, auto_delete, internal, arguments} | exchange.declare | 204 |
//! | `DELETE /exchanges/:x` | exchange.delete | 204 |
//! | `POST /bindings` {source, destination_queue or destination_exchange, binding_key, arguments} | queue.bind / exchange.bind | 204 |
//! | `DELETE /bindings/src=:x;dstq=:q;key=:k;args=` (`dste=` for an exchange) | queue.unbind / exchange.unbind | 204 |
//!
//! Errors: 404 not found, 409 a precondition (an existing queue's other arguments), 403 refused,
//! 400 anything else, each with the broker's reply text as the body.

use bytes::{Bytes, BytesMut};
use hourglass_wire::amqp1::{encode_value, Value};
use hourglass_wire::{
    ExchangeBind, ExchangeDeclare, ExchangeDelete, ExchangeUnbind, Method, QueueBind, QueueDeclare,
    QueueDelete, QueuePurge, QueueUnbind, ShortStr,
};

use super::message;

/// The node's address, as a target and a source.
pub(crate) const NODE: &str = "/management";

/// A request as read from its message.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Request {
    /// The request's message-id, for the reply's correlation-id.
    pub id: Value,
    pub operation: Operation,
}

/// What a request asks the broker, and how its answer is reported.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Operation {
    DeclareQueue {
        method: Method,
        name: String,
        durable: bool,
        exclusive: bool,
        auto_delete: bool,
        arguments: Value,
    },
    /// Answered by the broker's queue query, not a method.
    QueueInfo(ShortStr),
    DeleteQueue(Method),
    PurgeQueue(Method),
    /// An exchange or binding change, answered 204.
    NoContent(Method),
}

impl Operation {
    /// The broker method it runs as (`None`: a query).
    pub(crate) fn method(&self) -> Option<&Method> {
        match self {
            Operation::DeclareQueue { method, .. } => Some(method),
            Operation::DeleteQueue(method) | Operation::PurgeQueue(method) | Operation::NoContent(method) => {
                Some(method)
            }
            Operation::QueueInfo(_) => None,
        }
    }
}

/// A request that cannot be carried out: its status and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Refused {
    pub status: u16,
    pub reason: String,
}

fn bad(reason: impl Into<String>) -> Refused {
    Refused { status: 400, reason: reason.into() }
}

/// Reads a request message; `Err` carries the id (if any) and why it is refused.
pub(crate) fn request(payload: &[u8]) -> Result<Request, (Value, Refused)> {
    let sections = message::sections(payload).map_err(|e| (Value::Null, bad(e.to_string())))?;
    let id = sections.properties.first().cloned().unwrap_or(Value::Null);
    let text_at = |at: usize| match sections.properties.get(at) {
        Some(Value::String(s) | Value::Symbol(s)) => Some(s.clone()),
        _ => None,
    };
    let (Some(path), Some(method)) = (text_at(2), text_at(3)) else {
        return Err((id, bad("a request needs a path ('to') and a method ('subject')")));
    };
    let body = match sections.body_value() {
        Ok(body) => body.unwrap_or(Value::Null),
        Err(e) => return Err((id, bad(e.to_string()))),
    };
    match operation(&method, &path, &body) {
        Ok(operation) => Ok(Request { id, operation }),
        Err(refused) => Err((id, refused)),
    }
}

fn operation(method: &str, path: &str, body: &Value) -> Result<Operation, Refused> {
    let segments: Vec<&str> = path.strip_prefix('/').unwrap_or(path).split('/').collect();
    let name =
        |at: usize| segments.get(at).and_then(|s| decode(s)).ok_or_else(|| bad(format!("bad path '{path}'")));
    match (method, segments.as_slice()) {
        ("PUT", ["queues", _]) => {
            let name = name(1)?;
            let durable = field_bool(body, "durable").unwrap_or(true);
            let exclusive = field_bool(body, "exclusive").unwrap_or(false);
            let auto_delete = field_bool(body, "auto_delete").unwrap_or(false);
            let arguments = field(body, "arguments").cloned().unwrap_or(Value::Map(Vec::new()));
            let declare = QueueDeclare {
                queue: short(&name)?,
                durable,
                exclusive,
                auto_delete,
                arguments: message::table_of(&arguments),
                ..QueueDeclare::default()
            };
            Ok(Operation::DeclareQueue {
                method: declare.into(),
                name,
                durable,
                exclusive,
                auto_delete,
                arguments,
            })
        }
        ("GET", ["queues", _]) => Ok(Operation::QueueInfo(short(&name(1)?)?)),
        ("DELETE", ["queues", _]) => Ok(Operation::DeleteQueue(
            QueueDelete { queue: short(&name(1)?)?, ..QueueDelete::default() }.into(),
        )),
        ("DELETE", ["queues", _, "messages"]) => {
            Ok(Operation::PurgeQueue(QueuePurge { queue: short(&name(1)?)?, ..QueuePurge::default() }.into()))
        }
        ("PUT", ["exchanges", _]) => {
            let kind = field_text(body, "type").unwrap_or_else(|| "direct".to_owned());
            let declare = ExchangeDeclare {
                exchange: short(&name(1)?)?,
                kind: short(&kind)?,
                durable: field_bool(body, "durable").unwrap_or(true),
                auto_delete: field_bool(body, "auto_delete").unwrap_or(false),
                internal: field_bool(body, "internal").unwrap_or(false),
                arguments: message::table_of(field(body, "arguments").unwrap_or(&Value::Null)),
                ..ExchangeDeclare::default()
            };
            Ok(Operation::NoContent(declare.into()))
        }
        ("DELETE", ["exchanges", _]) => Ok(Operation::NoContent(
            ExchangeDelete { exchange: short(&name(1)?)?, ..ExchangeDelete::default() }.into(),
        )),
        ("POST", ["bindings"]) => bind(body),
        ("DELETE", ["bindings", binding]) => unbind(binding),
        _ => Err(Refused { status: 405, reason: format!("{method} {path} is not a management request") }),
    }
}

fn bind(body: &Value) -> Result<Operation, Refused> {
    let source = field_text(body, "source").ok_or_else(|| bad("a binding needs a source"))?;
    let key = field_text(body, "binding_key").unwrap_or_default();
    let arguments = message::table_of(field(body, "arguments").unwrap_or(&Value::Null));
    let method: Method =
        match (field_text(body, "destination_queue"), field_text(body, "destination_exchange")) {
            (Some(queue), None) => QueueBind {
                queue: short(&queue)?,
                exchange: short(&source)?,
                routing_key: short(&key)?,
                arguments,
                ..QueueBind::default()
            }
            .into(),
            (None, Some(exchange)) => ExchangeBind {
                destination: short(&exchange)?,
                source: short(&source)?,
                routing_key: short(&key)?,
                arguments,
                ..ExchangeBind::default()
            }
            .into(),
            _ => return Err(bad("a binding needs one destination_queue or destination_exchange")),
        };
    Ok(Operation::NoContent(method))
}

/// `src=:x;dstq=:q;key=:k;args=` (`dste=` for an exchange destination).
fn unbind(binding: &str) -> Result<Operation, Refused> {
    let mut source = None;
    let mut queue = None;
    let mut exchange = None;
    let mut key = String::new();
    for part in binding.split(';') {
        let (name, value) = part.split_once('=').ok_or_else(|| bad(format!("bad binding '{binding}'")))?;
        let value = decode(value).ok_or_else(|| bad(format!("bad binding '{binding}'")))?;
        match name {
            "src" => source = Some(value),
            "dstq" => queue = Some(value),
            "dste" => exchange = Some(value),
            "key" => key = value,
            "args" if value.is_empty() => {}
            _ => return Err(bad(format!("bad binding '{binding}'"))),
        }
    }
    let source = source.ok_or_else(|| bad("a binding needs a source"))?;
    let method: Method = match (queue, exchange) {
        (Some(queue), None) => QueueUnbind {
            queue: short(&queue)?,
            exchange: short(&source)?,
            routing_key: short(&key)?,
            ..QueueUnbind::default()
        }
        .into(),
        (None, Some(exchange)) => ExchangeUnbind {
            destination: short(&exchange)?,
            source: short(&source)?,
            routing_key: short(&key)?,
            ..ExchangeUnbind::default()
        }
        .into(),
        _ => return Err(bad("a binding needs one destination")),
    };
    Ok(Operation::NoContent(method))
}

fn decode(segment: &str) -> Option<String> {
    super::address::decode(segment)
}

fn short(text: &str) -> Result<ShortStr, Refused> {
    ShortStr::try_from(text).map_err(|_| bad(format!("'{text}' is longer than 255 bytes")))
}

fn field<'a>(body: &'a Value, name: &str) -> Option<&'a Value> {
    let Value::Map(pairs) = body else { return None };
    pairs.iter().find(|(k, _)| matches!(k, Value::String(s) | Value::Symbol(s) if s == name)).map(|(_, v)| v)
}

fn field_bool(body: &Value, name: &str) -> Option<bool> {
    match field(body, name) {
        Some(Value::Bool(b)) => Some(*b),
        _ => None,
    }
}

fn field_text(body: &Value, name: &str) -> Option<String> {
    match field(body, name) {
        Some(Value::String(s) | Value::Symbol(s)) => Some(s.clone()),
        _ => None,
    }
}

fn string(text: &str) -> Value {
    Value::String(text.to_owned())
}

/// A queue as `GET /queues/:q` and `PUT` report it.
pub(crate) struct QueueInfo<'a> {
    pub name: &'a str,
    pub durable: bool,
    pub exclusive: bool,
    pub auto_delete: bool,
    /// A map.
    pub arguments: &'a Value,
    pub messages: u64,
    pub consumers: u64,
    /// The node that serves it: its leader and its one replica a client can use.
    pub node: &'a str,
}

/// The queue's map, with RabbitMQ 4's keys.
pub(crate) fn queue_info(queue: &QueueInfo<'_>) -> Value {
    let QueueInfo { name, durable, exclusive, auto_delete, arguments, messages, consumers, node } = *queue;
    let arguments = match arguments {
        Value::Map(_) => arguments.clone(),
        _ => Value::Map(Vec::new()),
    };
    let kind = match field(&arguments, "x-queue-type") {
        Some(Value::String(kind) | Value::Symbol(kind)) => kind.clone(),
        _ => "classic".to_owned(),
    };
    Value::Map(vec![
        (string("name"), string(name)),
        (string("durable"), Value::Bool(durable)),
        (string("auto_delete"), Value::Bool(auto_delete)),
        (string("exclusive"), Value::Bool(exclusive)),
        (string("type"), Value::String(kind)),
        (string("arguments"), arguments),
        (string("leader"), string(node)),
        (string("replicas"), Value::Array(vec![string(node)])),
        (string("message_count"), Value::Ulong(messages)),
        (string("consumer_count"), Value::Uint(u32::try_from(consumers).unwrap_or(u32::MAX))),
    ])
}

/// A count reply: `{message_count}`.
pub(crate) fn message_count(count: u32) -> Value {
    Value::Map(vec![(string("message_count"), Value::Ulong(u64::from(count)))])
}

/// The status of a refusal from the broker's reply code.
pub(crate) fn status_of(reply_code: u16) -> u16 {
    match reply_code {
        404 => 404,
        403 => 403,
        405 | 406 => 409,
        _ => 400,
    }
}

/// The reply message: correlation-id, subject the status, body an amqp-value.
pub(crate) fn reply(correlation: &Value, status: u16, body: Value) -> Bytes {
    let mut out = BytesMut::new();
    let properties = Value::List(vec![
        Value::Null,
        Value::Null,
        Value::Null,
        Value::String(status.to_string()),
        Value::Null,
        correlation.clone(),
    ]);
    encode_value(&Value::Described(Box::new(Value::Ulong(0x73)), Box::new(properties)), &mut out);
    encode_value(&Value::Described(Box::new(Value::Ulong(0x77)), Box::new(body)), &mut out);
    out.freeze()
}

#[cfg(test)]
mod tests {
    use super::*;
    use hourglass_wire::FieldValue;

    fn request_payload(method: &str, path: &str, body: Value) -> Vec<u8> {
        let mut out = BytesMut::new();
        let properties = Value::List(vec![
            Value::String("req-1".into()),
            Value::Null,
            Value::String(path.into()),
            Value::String(method.into()),
            Value::String("$me".into()),
        ]);
        encode_value(&Value::Described(Box::new(Value::Ulong(0x73)), Box::new(properties)), &mut out);
        encode_value(&Value::Described(Box::new(Value::Ulong(0x77)), Box::new(body)), &mut out);
        out.to_vec()
    }

    fn map(entries: Vec<(&str, Value)>) -> Value {
        Value::Map(entries.into_iter().map(|(k, v)| (Value::String(k.into()), v)).collect())
    }

    #[test]
    fn a_queue_declare_carries_its_flags_and_arguments() {
        let body = map(vec![
            ("durable", Value::Bool(true)),
            ("exclusive", Value::Bool(false)),
            ("auto_delete", Value::Bool(false)),
            (
                "arguments",
                map(vec![
                    ("x-queue-type", Value::String("quorum".into())),
                    ("x-max-length", Value::Long(10)),
                ]),
            ),
        ]);
        let request = request(&request_payload("PUT", "/queues/my%20q", body)).unwrap();
        assert_eq!(request.id, Value::String("req-1".into()));
        let Some(Method::QueueDeclare(declare)) = request.operation.method() else { panic!("{request:?}") };
        assert_eq!(declare.queue, "my q");
        assert!(declare.durable && !declare.passive);
        assert_eq!(declare.arguments.get("x-queue-type"), Some(FieldValue::LongStr("quorum".into())));
        assert_eq!(declare.arguments.get("x-max-length"), Some(FieldValue::I64(10)));
    }

    #[test]
    fn bindings_and_unbindings_name_queues_or_exchanges() {
        let body = map(vec![
            ("source", Value::String("ex".into())),
            ("destination_queue", Value::String("q".into())),
            ("binding_key", Value::String("k".into())),
            ("arguments", map(vec![])),
        ]);
        let bound = request(&request_payload("POST", "/bindings", body)).unwrap();
        assert!(
            matches!(bound.operation.method(), Some(Method::QueueBind(b)) if b.exchange == "ex" && b.queue == "q" && b.routing_key == "k")
        );
        let unbound =
            request(&request_payload("DELETE", "/bindings/src=ex;dste=other;key=a%2Eb;args=", Value::Null))
                .unwrap();
        assert!(
            matches!(unbound.operation.method(), Some(Method::ExchangeUnbind(u)) if u.source == "ex" && u.destination == "other" && u.routing_key == "a.b")
        );
    }

    #[test]
    fn purge_delete_and_unknown_paths() {
        let purge = request(&request_payload("DELETE", "/queues/q/messages", Value::Null)).unwrap();
        assert!(matches!(purge.operation, Operation::PurgeQueue(_)));
        let (id, refused) = request(&request_payload("PATCH", "/queues/q", Value::Null)).unwrap_err();
        assert_eq!(id, Value::String("req-1".into()));
        assert_eq!(refused.status, 405);
        assert_eq!(request(&[0xff]).unwrap_err().1.status, 400);
    }
}
