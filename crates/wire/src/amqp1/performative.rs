//! AMQP 1.0's frame bodies as typed values (part 2.7 "Performatives", part 5.3 "SASL"): each is
//! a described list, its descriptor an unsigned long code; fields may be left off the end, and a
//! null field takes its default. A mandatory field missing, a field of the wrong type or an
//! unknown descriptor is an error naming it, for the connection's `amqp:decode-error`.

use bytes::Bytes;

use super::value::Value;

/// An error condition and its description (part 2.8.14), as `end`, `close` and `detach` carry.
#[derive(Clone, Debug, PartialEq)]
pub struct ErrorCondition {
    pub condition: String,
    pub description: Option<String>,
}

/// A performative or SASL frame body.
#[derive(Clone, Debug, PartialEq)]
pub enum Performative {
    Open {
        container_id: String,
        hostname: Option<String>,
        max_frame_size: u32,
        channel_max: u16,
        idle_time_out_ms: Option<u32>,
        /// The connection's properties (a map), kept as sent; `Null` when absent.
        properties: Value,
    },
    Begin {
        remote_channel: Option<u16>,
        next_outgoing_id: u32,
        incoming_window: u32,
        outgoing_window: u32,
        handle_max: u32,
    },
    /// `role`: true for a receiver. Source and target are kept as sent.
    Attach {
        name: String,
        handle: u32,
        receiver: bool,
        snd_settle_mode: u8,
        rcv_settle_mode: u8,
        source: Value,
        target: Value,
        initial_delivery_count: Option<u32>,
    },
    Flow {
        next_incoming_id: Option<u32>,
        incoming_window: u32,
        next_outgoing_id: u32,
        outgoing_window: u32,
        handle: Option<u32>,
        delivery_count: Option<u32>,
        link_credit: Option<u32>,
        drain: bool,
        echo: bool,
    },
    Transfer {
        handle: u32,
        delivery_id: Option<u32>,
        delivery_tag: Option<Bytes>,
        settled: Option<bool>,
        more: bool,
        state: Value,
        aborted: bool,
    },
    Disposition {
        receiver: bool,
        first: u32,
        last: Option<u32>,
        settled: bool,
        state: Value,
    },
    Detach {
        handle: u32,
        closed: bool,
        error: Option<ErrorCondition>,
    },
    End {
        error: Option<ErrorCondition>,
    },
    Close {
        error: Option<ErrorCondition>,
    },
    SaslMechanisms {
        mechanisms: Vec<String>,
    },
    SaslInit {
        mechanism: String,
        initial_response: Option<Bytes>,
        hostname: Option<String>,
    },
    SaslOutcome {
        code: u8,
    },
}

/// Why a frame body is not a performative.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PerformativeError {
    #[error("a frame body must be a described list")]
    NotDescribedList,
    #[error("descriptor {0} names no performative")]
    UnknownDescriptor(String),
    #[error("{performative}: the mandatory field {field} is missing")]
    Missing { performative: &'static str, field: &'static str },
    #[error("{performative}: the field {field} has the wrong type")]
    WrongType { performative: &'static str, field: &'static str },
}

type Result<T> = std::result::Result<T, PerformativeError>;

/// The descriptor codes (part 2.7 and 5.3.3: `0x00000000:0x000000NN`).
mod code {
    pub const OPEN: u64 = 0x10;
    pub const BEGIN: u64 = 0x11;
    pub const ATTACH: u64 = 0x12;
    pub const FLOW: u64 = 0x13;
    pub const TRANSFER: u64 = 0x14;
    pub const DISPOSITION: u64 = 0x15;
    pub const DETACH: u64 = 0x16;
    pub const END: u64 = 0x17;
    pub const CLOSE: u64 = 0x18;
    pub const ERROR: u64 = 0x1d;
    pub const SASL_MECHANISMS: u64 = 0x40;
    pub const SASL_INIT: u64 = 0x41;
    pub const SASL_OUTCOME: u64 = 0x44;
}

/// A performative's fields, read by position.
struct Fields<'a> {
    performative: &'static str,
    values: &'a [Value],
}

impl Fields<'_> {
    /// Field `at`, absent when left off or null.
    fn get(&self, at: usize) -> Option<&Value> {
        self.values.get(at).filter(|v| **v != Value::Null)
    }

    fn wrong(&self, field: &'static str) -> PerformativeError {
        PerformativeError::WrongType { performative: self.performative, field }
    }

    fn required<T>(&self, value: Option<T>, field: &'static str) -> Result<T> {
        value.ok_or(PerformativeError::Missing { performative: self.performative, field })
    }

    fn uint(&self, at: usize, field: &'static str) -> Result<Option<u32>> {
        match self.get(at) {
            None => Ok(None),
            Some(Value::Uint(v)) => Ok(Some(*v)),
            Some(_) => Err(self.wrong(field)),
        }
    }

    fn ushort(&self, at: usize, field: &'static str) -> Result<Option<u16>> {
        match self.get(at) {
            None => Ok(None),
            Some(Value::Ushort(v)) => Ok(Some(*v)),
            Some(_) => Err(self.wrong(field)),
        }
    }

    fn ubyte(&self, at: usize, field: &'static str) -> Result<Option<u8>> {
        match self.get(at) {
            None => Ok(None),
            Some(Value::Ubyte(v)) => Ok(Some(*v)),
            Some(_) => Err(self.wrong(field)),
        }
    }

    fn boolean(&self, at: usize, field: &'static str) -> Result<Option<bool>> {
        match self.get(at) {
            None => Ok(None),
            Some(Value::Bool(v)) => Ok(Some(*v)),
            Some(_) => Err(self.wrong(field)),
        }
    }

    fn string(&self, at: usize, field: &'static str) -> Result<Option<String>> {
        match self.get(at) {
            None => Ok(None),
            Some(Value::String(v)) => Ok(Some(v.clone())),
            Some(_) => Err(self.wrong(field)),
        }
    }

    fn symbol(&self, at: usize, field: &'static str) -> Result<Option<String>> {
        match self.get(at) {
            None => Ok(None),
            Some(Value::Symbol(v)) => Ok(Some(v.clone())),
            Some(_) => Err(self.wrong(field)),
        }
    }

    fn binary(&self, at: usize, field: &'static str) -> Result<Option<Bytes>> {
        match self.get(at) {
            None => Ok(None),
            Some(Value::Binary(v)) => Ok(Some(v.clone())),
            Some(_) => Err(self.wrong(field)),
        }
    }

    /// A symbol, or an array of them (a "multiple" field, part 1.3).
    fn symbols(&self, at: usize, field: &'static str) -> Result<Vec<String>> {
        match self.get(at) {
            None => Ok(Vec::new()),
            Some(Value::Symbol(one)) => Ok(vec![one.clone()]),
            Some(Value::Array(all)) => all
                .iter()
                .map(|v| match v {
                    Value::Symbol(s) => Ok(s.clone()),
                    _ => Err(self.wrong(field)),
                })
                .collect(),
            Some(_) => Err(self.wrong(field)),
        }
    }

    fn any(&self, at: usize) -> Value {
        self.get(at).cloned().unwrap_or(Value::Null)
    }

    fn error(&self, at: usize, field: &'static str) -> Result<Option<ErrorCondition>> {
        let Some(value) = self.get(at) else { return Ok(None) };
        let (descriptor, list) = described_list(value).ok_or_else(|| self.wrong(field))?;
        if descriptor != code::ERROR {
            return Err(self.wrong(field));
        }
        let fields = Fields { performative: "error", values: list };
        let condition = fields.required(fields.symbol(0, "condition")?, "condition")?;
        Ok(Some(ErrorCondition { condition, description: fields.string(1, "description")? }))
    }
}

/// A described list's numeric descriptor and its items.
fn described_list(value: &Value) -> Option<(u64, &[Value])> {
    let Value::Described(descriptor, body) = value else { return None };
    let Value::List(items) = body.as_ref() else { return None };
    match descriptor.as_ref() {
        Value::Ulong(code) => Some((*code, items)),
        _ => None,
    }
}

impl Performative {
    /// The performative `value` (a decoded frame body) is.
    pub fn from_value(value: &Value) -> Result<Performative> {
        if let Value::Described(descriptor, _) = value {
            if !matches!(descriptor.as_ref(), Value::Ulong(_)) {
                return Err(PerformativeError::UnknownDescriptor(format!("{descriptor:?}")));
            }
        }
        let (code, values) = described_list(value).ok_or(PerformativeError::NotDescribedList)?;
        let name =
            name_of(code).ok_or_else(|| PerformativeError::UnknownDescriptor(format!("0x{code:x}")))?;
        let f = Fields { performative: name, values };
        Ok(match code {
            code::OPEN => Performative::Open {
                container_id: f.required(f.string(0, "container-id")?, "container-id")?,
                hostname: f.string(1, "hostname")?,
                max_frame_size: f.uint(2, "max-frame-size")?.unwrap_or(u32::MAX),
                channel_max: f.ushort(3, "channel-max")?.unwrap_or(u16::MAX),
                idle_time_out_ms: f.uint(4, "idle-time-out")?,
                properties: f.any(9),
            },
            code::BEGIN => Performative::Begin {
                remote_channel: f.ushort(0, "remote-channel")?,
                next_outgoing_id: f.required(f.uint(1, "next-outgoing-id")?, "next-outgoing-id")?,
                incoming_window: f.required(f.uint(2, "incoming-window")?, "incoming-window")?,
                outgoing_window: f.required(f.uint(3, "outgoing-window")?, "outgoing-window")?,
                handle_max: f.uint(4, "handle-max")?.unwrap_or(u32::MAX),
            },
            code::ATTACH => Performative::Attach {
                name: f.required(f.string(0, "name")?, "name")?,
                handle: f.required(f.uint(1, "handle")?, "handle")?,
                receiver: f.required(f.boolean(2, "role")?, "role")?,
                snd_settle_mode: f.ubyte(3, "snd-settle-mode")?.unwrap_or(2),
                rcv_settle_mode: f.ubyte(4, "rcv-settle-mode")?.unwrap_or(0),
                source: f.any(5),
                target: f.any(6),
                initial_delivery_count: f.uint(9, "initial-delivery-count")?,
            },
            code::FLOW => Performative::Flow {
                next_incoming_id: f.uint(0, "next-incoming-id")?,
                incoming_window: f.required(f.uint(1, "incoming-window")?, "incoming-window")?,
                next_outgoing_id: f.required(f.uint(2, "next-outgoing-id")?, "next-outgoing-id")?,
                outgoing_window: f.required(f.uint(3, "outgoing-window")?, "outgoing-window")?,
                handle: f.uint(4, "handle")?,
                delivery_count: f.uint(5, "delivery-count")?,
                link_credit: f.uint(6, "link-credit")?,
                drain: f.boolean(8, "drain")?.unwrap_or(false),
                echo: f.boolean(9, "echo")?.unwrap_or(false),
            },
            code::TRANSFER => Performative::Transfer {
                handle: f.required(f.uint(0, "handle")?, "handle")?,
                delivery_id: f.uint(1, "delivery-id")?,
                delivery_tag: f.binary(2, "delivery-tag")?,
                settled: f.boolean(4, "settled")?,
                more: f.boolean(5, "more")?.unwrap_or(false),
                state: f.any(7),
                aborted: f.boolean(9, "aborted")?.unwrap_or(false),
            },
            code::DISPOSITION => Performative::Disposition {
                receiver: f.required(f.boolean(0, "role")?, "role")?,
                first: f.required(f.uint(1, "first")?, "first")?,
                last: f.uint(2, "last")?,
                settled: f.boolean(3, "settled")?.unwrap_or(false),
                state: f.any(4),
            },
            code::DETACH => Performative::Detach {
                handle: f.required(f.uint(0, "handle")?, "handle")?,
                closed: f.boolean(1, "closed")?.unwrap_or(false),
                error: f.error(2, "error")?,
            },
            code::END => Performative::End { error: f.error(0, "error")? },
            code::CLOSE => Performative::Close { error: f.error(0, "error")? },
            code::SASL_MECHANISMS => {
                let mechanisms = f.symbols(0, "sasl-server-mechanisms")?;
                if mechanisms.is_empty() {
                    return Err(PerformativeError::Missing {
                        performative: name,
                        field: "sasl-server-mechanisms",
                    });
                }
                Performative::SaslMechanisms { mechanisms }
            }
            code::SASL_INIT => Performative::SaslInit {
                mechanism: f.required(f.symbol(0, "mechanism")?, "mechanism")?,
                initial_response: f.binary(1, "initial-response")?,
                hostname: f.string(2, "hostname")?,
            },
            _ => Performative::SaslOutcome { code: f.required(f.ubyte(0, "code")?, "code")? },
        })
    }

    /// The described list this performative is sent as (trailing absent fields left off).
    pub fn to_value(&self) -> Value {
        let fields = self.link_fields().unwrap_or_else(|| self.other_fields());
        described(self.descriptor(), fields)
    }

    fn descriptor(&self) -> u64 {
        match self {
            Performative::Open { .. } => code::OPEN,
            Performative::Begin { .. } => code::BEGIN,
            Performative::Attach { .. } => code::ATTACH,
            Performative::Flow { .. } => code::FLOW,
            Performative::Transfer { .. } => code::TRANSFER,
            Performative::Disposition { .. } => code::DISPOSITION,
            Performative::Detach { .. } => code::DETACH,
            Performative::End { .. } => code::END,
            Performative::Close { .. } => code::CLOSE,
            Performative::SaslMechanisms { .. } => code::SASL_MECHANISMS,
            Performative::SaslInit { .. } => code::SASL_INIT,
            Performative::SaslOutcome { .. } => code::SASL_OUTCOME,
        }
    }

    /// The fields of a link's performatives (attach, flow, transfer, disposition), in order;
    /// `None` for the others.
    fn link_fields(&self) -> Option<Vec<Value>> {
        Some(match self {
            Performative::Attach {
                name,
                handle,
                receiver,
                snd_settle_mode,
                rcv_settle_mode,
                source,
                target,
                initial_delivery_count,
            } => vec![
                Value::String(name.clone()),
                Value::Uint(*handle),
                Value::Bool(*receiver),
                Value::Ubyte(*snd_settle_mode),
                Value::Ubyte(*rcv_settle_mode),
                source.clone(),
                target.clone(),
                Value::Null,
                Value::Null,
                opt_uint(*initial_delivery_count),
            ],
            Performative::Flow {
                next_incoming_id,
                incoming_window,
                next_outgoing_id,
                outgoing_window,
                handle,
                delivery_count,
                link_credit,
                drain,
                echo,
            } => vec![
                opt_uint(*next_incoming_id),
                Value::Uint(*incoming_window),
                Value::Uint(*next_outgoing_id),
                Value::Uint(*outgoing_window),
                opt_uint(*handle),
                opt_uint(*delivery_count),
                opt_uint(*link_credit),
                Value::Null,
                Value::Bool(*drain),
                Value::Bool(*echo),
            ],
            Performative::Transfer { handle, delivery_id, delivery_tag, settled, more, state, aborted } => {
                vec![
                    Value::Uint(*handle),
                    opt_uint(*delivery_id),
                    delivery_tag.clone().map_or(Value::Null, Value::Binary),
                    // message-format (part 2.7.5): required on a delivery's first transfer (the
                    // one with its id); 0 is the AMQP message format. rhea hands a message
                    // without it over undecoded.
                    if delivery_id.is_some() { Value::Uint(0) } else { Value::Null },
                    settled.map_or(Value::Null, Value::Bool),
                    Value::Bool(*more),
                    Value::Null,
                    state.clone(),
                    Value::Null,
                    Value::Bool(*aborted),
                ]
            }
            Performative::Disposition { receiver, first, last, settled, state } => vec![
                Value::Bool(*receiver),
                Value::Uint(*first),
                opt_uint(*last),
                Value::Bool(*settled),
                state.clone(),
            ],
            _ => return None,
        })
    }

    /// The fields of the connection's, session's and SASL performatives, in order.
    fn other_fields(&self) -> Vec<Value> {
        match self {
            Performative::Open {
                container_id,
                hostname,
                max_frame_size,
                channel_max,
                idle_time_out_ms,
                properties,
            } => {
                vec![
                    Value::String(container_id.clone()),
                    hostname.clone().map_or(Value::Null, Value::String),
                    Value::Uint(*max_frame_size),
                    Value::Ushort(*channel_max),
                    opt_uint(*idle_time_out_ms),
                    Value::Null,
                    Value::Null,
                    Value::Null,
                    Value::Null,
                    properties.clone(),
                ]
            }
            Performative::Begin {
                remote_channel,
                next_outgoing_id,
                incoming_window,
                outgoing_window,
                handle_max,
            } => vec![
                remote_channel.map_or(Value::Null, Value::Ushort),
                Value::Uint(*next_outgoing_id),
                Value::Uint(*incoming_window),
                Value::Uint(*outgoing_window),
                Value::Uint(*handle_max),
            ],
            Performative::Detach { handle, closed, error } => {
                vec![Value::Uint(*handle), Value::Bool(*closed), error_value(error)]
            }
            Performative::End { error } | Performative::Close { error } => vec![error_value(error)],
            Performative::SaslMechanisms { mechanisms } => {
                vec![Value::Array(mechanisms.iter().cloned().map(Value::Symbol).collect())]
            }
            Performative::SaslInit { mechanism, initial_response, hostname } => vec![
                Value::Symbol(mechanism.clone()),
                initial_response.clone().map_or(Value::Null, Value::Binary),
                hostname.clone().map_or(Value::Null, Value::String),
            ],
            Performative::SaslOutcome { code } => vec![Value::Ubyte(*code)],
            // A link's performatives are link_fields'.
            _ => Vec::new(),
        }
    }
}

fn opt_uint(value: Option<u32>) -> Value {
    value.map_or(Value::Null, Value::Uint)
}

/// An `error` (part 2.8.14) as sent, or null.
fn error_value(error: &Option<ErrorCondition>) -> Value {
    error.as_ref().map_or(Value::Null, |e| {
        let description = e.description.clone().map_or(Value::Null, Value::String);
        described(code::ERROR, vec![Value::Symbol(e.condition.clone()), description])
    })
}

/// The name of the performative with descriptor `code`.
fn name_of(code: u64) -> Option<&'static str> {
    Some(match code {
        code::OPEN => "open",
        code::BEGIN => "begin",
        code::ATTACH => "attach",
        code::FLOW => "flow",
        code::TRANSFER => "transfer",
        code::DISPOSITION => "disposition",
        code::DETACH => "detach",
        code::END => "end",
        code::CLOSE => "close",
        code::SASL_MECHANISMS => "sasl-mechanisms",
        code::SASL_INIT => "sasl-init",
        code::SASL_OUTCOME => "sasl-outcome",
        _ => return None,
    })
}

/// A described list with trailing nulls left off (part 1.4: a list may end early).
fn described(code: u64, mut fields: Vec<Value>) -> Value {
    while fields.last() == Some(&Value::Null) {
        fields.pop();
    }
    Value::Described(Box::new(Value::Ulong(code)), Box::new(Value::List(fields)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::amqp1::{decode_value, encode_value};

    fn through_bytes(p: &Performative) -> Performative {
        let mut out = bytes::BytesMut::new();
        encode_value(&p.to_value(), &mut out);
        let (value, used) = decode_value(&out).unwrap();
        assert_eq!(used, out.len());
        Performative::from_value(&value).unwrap()
    }

    #[test]
    fn every_performative_round_trips_through_bytes() {
        let error =
            Some(ErrorCondition { condition: "amqp:not-found".into(), description: Some("no queue".into()) });
        let all = [
            Performative::Open {
                container_id: "c".into(),
                hostname: Some("vhost:/".into()),
                max_frame_size: 65_536,
                channel_max: 255,
                idle_time_out_ms: Some(30_000),
                properties: Value::Map(vec![(Value::Symbol("product".into()), Value::String("x".into()))]),
            },
            Performative::Begin {
                remote_channel: Some(0),
                next_outgoing_id: 1,
                incoming_window: 100,
                outgoing_window: 100,
                handle_max: 7,
            },
            Performative::Attach {
                name: "l".into(),
                handle: 0,
                receiver: true,
                snd_settle_mode: 0,
                rcv_settle_mode: 0,
                source: Value::Null,
                target: Value::Null,
                initial_delivery_count: Some(0),
            },
            Performative::Flow {
                next_incoming_id: Some(1),
                incoming_window: 10,
                next_outgoing_id: 1,
                outgoing_window: 10,
                handle: Some(0),
                delivery_count: Some(0),
                link_credit: Some(100),
                drain: true,
                echo: false,
            },
            Performative::Transfer {
                handle: 0,
                delivery_id: Some(3),
                delivery_tag: Some(Bytes::from_static(b"t")),
                settled: Some(false),
                more: true,
                state: Value::Null,
                aborted: false,
            },
            Performative::Disposition {
                receiver: true,
                first: 3,
                last: Some(5),
                settled: true,
                state: Value::Described(Box::new(Value::Ulong(0x24)), Box::new(Value::List(vec![]))),
            },
            Performative::Detach { handle: 1, closed: true, error: error.clone() },
            Performative::End { error: None },
            Performative::Close { error },
            Performative::SaslMechanisms { mechanisms: vec!["PLAIN".into(), "ANONYMOUS".into()] },
            Performative::SaslInit {
                mechanism: "PLAIN".into(),
                initial_response: Some(Bytes::from_static(b"\0guest\0guest")),
                hostname: None,
            },
            Performative::SaslOutcome { code: 0 },
        ];
        for p in all {
            assert_eq!(through_bytes(&p), p);
        }
    }

    #[test]
    fn a_first_transfer_names_the_amqp_message_format() {
        let transfer = |delivery_id| Performative::Transfer {
            handle: 0,
            delivery_id,
            delivery_tag: None,
            settled: None,
            more: false,
            state: Value::Null,
            aborted: false,
        };
        let format = |p: Performative| match p.to_value() {
            Value::Described(_, fields) => match *fields {
                Value::List(fields) => fields.get(3).cloned(),
                _ => None,
            },
            _ => None,
        };
        assert_eq!(format(transfer(Some(7))), Some(Value::Uint(0)));
        assert_ne!(format(transfer(None)), Some(Value::Uint(0)));
    }

    /// Fields left off take their defaults; a missing mandatory field, a wrong type and an
    /// unknown descriptor are errors that name what is wrong.
    #[test]
    fn defaults_and_refusals() {
        let open = described(code::OPEN, vec![Value::String("c".into())]);
        assert_eq!(
            Performative::from_value(&open).unwrap(),
            Performative::Open {
                container_id: "c".into(),
                hostname: None,
                max_frame_size: u32::MAX,
                channel_max: u16::MAX,
                idle_time_out_ms: None,
                properties: Value::Null,
            }
        );
        let no_id = described(code::OPEN, vec![]);
        assert_eq!(
            Performative::from_value(&no_id),
            Err(PerformativeError::Missing { performative: "open", field: "container-id" })
        );
        let wrong = described(code::BEGIN, vec![Value::Null, Value::String("1".into())]);
        assert_eq!(
            Performative::from_value(&wrong),
            Err(PerformativeError::WrongType { performative: "begin", field: "next-outgoing-id" })
        );
        assert_eq!(
            Performative::from_value(&described(0x99, vec![])),
            Err(PerformativeError::UnknownDescriptor("0x99".into()))
        );
        assert_eq!(Performative::from_value(&Value::Null), Err(PerformativeError::NotDescribedList));
    }
}
