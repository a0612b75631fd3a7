//! The durable definitions as one payload for the store's snapshot file (docs/storage.md):
//! vhosts, durable exchanges (not the built-in ones), durable non-exclusive queues with their ids
//! and arguments, and bindings whose both ends are durable.
//!
//! Encoded as an AMQP field table (the wire crate's codec, no new dependency), schema version 2:
//! ```text
//! { next_queue_id: l,
//!   vhosts: A[ { name: S,
//!                exchanges: A[ { name: S, type: S, delayed: t, auto_delete: t, internal: t,
//!                                arguments: x } ],
//!                queues:    A[ { name: S, id: l, auto_delete: t, arguments: x } ],
//!                bindings:  A[ { source: S, destination_kind: S ("queue" | "exchange"),
//!                                destination: S, routing_key: S, arguments: x } ],
//!                policies, operator_policies:
//!                           A[ { name: S, pattern: S, apply_to: S, priority: l, definition: x } ] } ] }
//! ```
//! `x` is a byte array holding a field table's content, decoded on its own (issue 12): a client's
//! table is accepted up to [`hourglass_wire::MAX_NESTING_DEPTH`] levels, and the five levels of this wrapper must
//! not count against it, or a table accepted at declare would make the snapshot unreadable and
//! the next start fail. Schema 1 (read, never written) had `F` tables in those places; the two
//! policy lists came later within version 1: a snapshot without them has no policies.

use bytes::Bytes;
use hourglass_wire::{FieldArray, FieldTable, FieldValue, LongStr, ShortStr};

use crate::broker::Broker;
use crate::exchange::{Destination, ExchangeKind, ExchangeSpec};
use crate::policy::{PolicyKind, PolicySpec};
use crate::queue::{Queue, QueueId};
use crate::vhost::VHost;

/// The snapshot's schema version for this payload (the store's header carries it): 2 since client
/// tables are kept as byte arrays (issue 12). An older build refuses it by this number rather
/// than by a confusing decode error.
pub const DEFINITIONS_SCHEMA_VERSION: u32 = 2;
/// The oldest schema version still read (1: tables nested in the payload).
pub const DEFINITIONS_SCHEMA_VERSION_OLDEST: u32 = 1;

/// Definitions as decoded, before they are applied.
#[derive(Debug, Default)]
pub(crate) struct Definitions {
    pub next_queue_id: u64,
    pub vhosts: Vec<VHostDefinitions>,
}

#[derive(Debug)]
pub(crate) struct VHostDefinitions {
    pub name: String,
    pub exchanges: Vec<ExchangeSpec>,
    /// (id, name, auto_delete, arguments)
    pub queues: Vec<(QueueId, ShortStr, bool, FieldTable)>,
    pub bindings: Vec<BindingDefinition>,
    pub policies: Vec<(PolicyKind, PolicySpec)>,
}

#[derive(Debug)]
pub(crate) struct BindingDefinition {
    pub source: ShortStr,
    pub to_queue: bool,
    pub destination: ShortStr,
    pub routing_key: ShortStr,
    pub arguments: FieldTable,
}

impl Broker {
    /// Every durable definition, encoded.
    pub(crate) fn encode_definitions(&self) -> Bytes {
        let mut names: Vec<&String> = self.vhosts.keys().collect();
        names.sort();
        let vhosts =
            names.into_iter().map(|name| FieldValue::Table(self.encode_vhost(name, &self.vhosts[name])));
        let table = FieldTable::from_entries([
            ("next_queue_id", FieldValue::I64(self.next_queue_id as i64)),
            ("vhosts", FieldValue::Array(FieldArray::from_values(vhosts))),
        ]);
        table.raw().clone()
    }

    fn encode_vhost(&self, name: &str, vhost: &VHost) -> FieldTable {
        let mut exchanges: Vec<&ExchangeSpec> = vhost
            .exchanges
            .values()
            .map(|x| &x.spec)
            .filter(|spec| spec.durable && !is_built_in(&spec.name))
            .collect();
        exchanges.sort_by(|a, b| a.name.cmp(&b.name));
        let mut queues: Vec<&Queue> =
            vhost.queues.values().filter_map(|id| self.queues.get(id)).filter(|q| q.is_persisted()).collect();
        queues.sort_by_key(|q| q.id);
        let mut sources: Vec<_> = vhost.exchanges.values().filter(|x| x.spec.durable).collect();
        sources.sort_by(|a, b| a.name().cmp(b.name()));
        let mut bindings = Vec::new();
        for source in sources {
            for binding in source.bindings() {
                let (kind, destination) = match &binding.destination {
                    Destination::Queue(id) => match self.queues.get(id).filter(|q| q.is_persisted()) {
                        Some(queue) => ("queue", queue.name().clone()),
                        None => continue,
                    },
                    Destination::Exchange(name)
                        if vhost.exchanges.get(name).is_some_and(|x| x.spec.durable) =>
                    {
                        ("exchange", name.clone())
                    }
                    Destination::Exchange(_) => continue,
                };
                bindings.push(FieldValue::Table(FieldTable::from_entries([
                    ("source", text(source.name())),
                    ("destination_kind", FieldValue::LongStr(LongStr::from(kind))),
                    ("destination", text(&destination)),
                    ("routing_key", text(&binding.routing_key)),
                    ("arguments", table_bytes(&binding.arguments)),
                ])));
            }
        }
        let exchanges = exchanges.into_iter().map(|spec| {
            FieldValue::Table(FieldTable::from_entries([
                ("name", text(&spec.name)),
                ("type", FieldValue::LongStr(LongStr::from(spec.kind.name()))),
                ("delayed", FieldValue::Bool(spec.delayed)),
                ("auto_delete", FieldValue::Bool(spec.auto_delete)),
                ("internal", FieldValue::Bool(spec.internal)),
                ("arguments", table_bytes(&spec.arguments)),
            ]))
        });
        let queues = queues.into_iter().map(|queue| {
            FieldValue::Table(FieldTable::from_entries([
                ("name", text(queue.name())),
                ("id", FieldValue::I64(queue.id.0 as i64)),
                ("auto_delete", FieldValue::Bool(queue.spec.auto_delete)),
                ("arguments", table_bytes(&queue.spec.arguments)),
            ]))
        });
        let policies = |kind| {
            let specs = vhost.policies.of(kind).values().map(|p| encode_policy(&p.spec));
            FieldValue::Array(FieldArray::from_values(specs))
        };
        FieldTable::from_entries([
            ("name", FieldValue::LongStr(LongStr::from(name))),
            ("exchanges", FieldValue::Array(FieldArray::from_values(exchanges))),
            ("queues", FieldValue::Array(FieldArray::from_values(queues))),
            ("bindings", FieldValue::Array(FieldArray::from_values(bindings))),
            ("policies", policies(PolicyKind::User)),
            ("operator_policies", policies(PolicyKind::Operator)),
        ])
    }
}

fn encode_policy(spec: &PolicySpec) -> FieldValue {
    FieldValue::Table(FieldTable::from_entries([
        ("name", FieldValue::LongStr(LongStr::from(spec.name.as_str()))),
        ("pattern", FieldValue::LongStr(LongStr::from(spec.pattern.as_str()))),
        ("apply_to", FieldValue::LongStr(LongStr::from(spec.apply_to.as_str()))),
        ("priority", FieldValue::I64(spec.priority)),
        ("definition", table_bytes(&spec.definition)),
    ]))
}

fn decode_policies(
    vhost: &FieldTable,
    key: &str,
    kind: PolicyKind,
) -> Result<Vec<(PolicyKind, PolicySpec)>, String> {
    if !vhost.contains_key(key) {
        return Ok(Vec::new());
    }
    tables(vhost, key)?
        .iter()
        .map(|p| {
            Ok((
                kind,
                PolicySpec {
                    name: long(p, "name")?,
                    pattern: long(p, "pattern")?,
                    apply_to: long(p, "apply_to")?,
                    priority: int(p, "priority")?,
                    definition: nested(p, "definition")?,
                },
            ))
        })
        .collect()
}

/// Whether a snapshot payload would restore: `Err` names what does not decode. Lets the driver
/// refuse to start (or set the file aside, when told to) before anything is restored.
pub fn check_definitions(payload: Bytes) -> Result<(), String> {
    decode_definitions(payload).map(|_| ())
}

/// Decodes [`Broker::encode_definitions`]'s payload; the error names what is wrong.
pub(crate) fn decode_definitions(payload: Bytes) -> Result<Definitions, String> {
    let table = FieldTable::from_raw(payload).map_err(|e| format!("definitions do not parse: {e}"))?;
    let next_queue_id = int(&table, "next_queue_id")? as u64;
    let mut vhosts = Vec::new();
    for vhost in tables(&table, "vhosts")? {
        let name = short(&vhost, "name")?.as_str().into_owned();
        let mut exchanges = Vec::new();
        for x in tables(&vhost, "exchanges")? {
            let kind_name = short(&x, "type")?;
            let kind = ExchangeKind::parse(kind_name.as_bytes())
                .ok_or_else(|| format!("unknown exchange type '{kind_name}'"))?;
            exchanges.push(ExchangeSpec {
                name: short(&x, "name")?,
                kind,
                delayed: flag(&x, "delayed")?,
                durable: true,
                auto_delete: flag(&x, "auto_delete")?,
                internal: flag(&x, "internal")?,
                arguments: nested(&x, "arguments")?,
            });
        }
        let mut queues = Vec::new();
        for q in tables(&vhost, "queues")? {
            let id = QueueId(int(&q, "id")? as u64);
            queues.push((id, short(&q, "name")?, flag(&q, "auto_delete")?, nested(&q, "arguments")?));
        }
        let mut bindings = Vec::new();
        for b in tables(&vhost, "bindings")? {
            bindings.push(BindingDefinition {
                source: short(&b, "source")?,
                to_queue: short(&b, "destination_kind")?.as_bytes() == b"queue",
                destination: short(&b, "destination")?,
                routing_key: short(&b, "routing_key")?,
                arguments: nested(&b, "arguments")?,
            });
        }
        let mut policies = decode_policies(&vhost, "policies", PolicyKind::User)?;
        policies.extend(decode_policies(&vhost, "operator_policies", PolicyKind::Operator)?);
        vhosts.push(VHostDefinitions { name, exchanges, queues, bindings, policies });
    }
    Ok(Definitions { next_queue_id, vhosts })
}

/// The default exchange and the `amq.*` ones exist in every vhost from the start.
fn is_built_in(name: &ShortStr) -> bool {
    name.is_empty() || name.as_bytes().starts_with(b"amq.")
}

fn text(s: &ShortStr) -> FieldValue {
    FieldValue::LongStr(LongStr::new(s.clone().into_bytes()))
}

fn field(table: &FieldTable, key: &str) -> Result<FieldValue, String> {
    table.get(key).ok_or_else(|| format!("definitions: missing '{key}'"))
}

fn int(table: &FieldTable, key: &str) -> Result<i64, String> {
    field(table, key)?.as_i64().ok_or_else(|| format!("definitions: '{key}' is not an integer"))
}

fn flag(table: &FieldTable, key: &str) -> Result<bool, String> {
    match field(table, key)? {
        FieldValue::Bool(b) => Ok(b),
        _ => Err(format!("definitions: '{key}' is not a boolean")),
    }
}

fn short(table: &FieldTable, key: &str) -> Result<ShortStr, String> {
    let value = field(table, key)?;
    let bytes = value.as_bytes().ok_or_else(|| format!("definitions: '{key}' is not a string"))?;
    ShortStr::new(Bytes::copy_from_slice(bytes)).map_err(|_| format!("definitions: '{key}' is too long"))
}

/// A string of any length (policy patterns may pass 255 bytes).
fn long(table: &FieldTable, key: &str) -> Result<String, String> {
    let value = field(table, key)?;
    let bytes = value.as_bytes().ok_or_else(|| format!("definitions: '{key}' is not a string"))?;
    String::from_utf8(bytes.to_vec()).map_err(|_| format!("definitions: '{key}' is not UTF-8"))
}

/// A client's table, kept as its encoded content so that it decodes on its own (module doc).
fn table_bytes(table: &FieldTable) -> FieldValue {
    FieldValue::ByteArray(table.raw().clone())
}

/// A client's table: its content in a byte array (schema 2), or a nested table (schema 1).
fn nested(table: &FieldTable, key: &str) -> Result<FieldTable, String> {
    match field(table, key)? {
        FieldValue::ByteArray(raw) => {
            FieldTable::from_raw(raw).map_err(|e| format!("definitions: '{key}': {e}"))
        }
        FieldValue::Table(t) => Ok(t),
        _ => Err(format!("definitions: '{key}' is not a table")),
    }
}

fn tables(table: &FieldTable, key: &str) -> Result<Vec<FieldTable>, String> {
    let FieldValue::Array(array) = field(table, key)? else {
        return Err(format!("definitions: '{key}' is not an array"));
    };
    array
        .iter()
        .map(|v| match v {
            FieldValue::Table(t) => Ok(t),
            _ => Err(format!("definitions: '{key}' holds a non-table")),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A schema 1 snapshot (client tables nested as `F`, as written before issue 12) still reads,
    /// and a damaged byte-array table is reported, never taken as empty.
    #[test]
    fn schema_1_tables_still_read_and_a_bad_table_is_reported() {
        let args = FieldTable::from_entries([("x-max-length", FieldValue::I64(5))]);
        let queue = |arguments: FieldValue| {
            FieldValue::Table(FieldTable::from_entries([
                ("name", FieldValue::LongStr(LongStr::from("q"))),
                ("id", FieldValue::I64(3)),
                ("auto_delete", FieldValue::Bool(false)),
                ("arguments", arguments),
            ]))
        };
        let payload = |arguments: FieldValue| {
            let vhost = FieldTable::from_entries([
                ("name", FieldValue::LongStr(LongStr::from("/"))),
                ("exchanges", FieldValue::Array(FieldArray::new())),
                ("queues", FieldValue::Array(FieldArray::from_values([queue(arguments)]))),
                ("bindings", FieldValue::Array(FieldArray::new())),
            ]);
            let vhosts = FieldArray::from_values([FieldValue::Table(vhost)]);
            let top = FieldTable::from_entries([
                ("next_queue_id", FieldValue::I64(4)),
                ("vhosts", FieldValue::Array(vhosts)),
            ]);
            top.raw().clone()
        };
        let decoded = decode_definitions(payload(FieldValue::Table(args.clone()))).unwrap();
        assert_eq!(decoded.vhosts[0].queues[0].3, args);
        let decoded = decode_definitions(payload(table_bytes(&args))).unwrap();
        assert_eq!(decoded.vhosts[0].queues[0].3, args);
        let damaged = FieldValue::ByteArray(Bytes::from_static(&[3, b'a', b'b']));
        assert!(decode_definitions(payload(damaged)).unwrap_err().contains("'arguments'"));
    }
}
