//! The durable definitions' items as AMQP field tables — one exchange, queue, binding or policy
//! each — and the whole-file format older data directories kept them in (`definitions.snap`,
//! read once to move them into the catalog, `catalog.rs`; never written any more).
//!
//! The whole file, schema version 2:
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
//! The catalog's values are those item tables. `x` is a byte array holding a field table's
//! content, decoded on its own (issue 12): a client's table is accepted up to
//! [`hourglass_wire::MAX_NESTING_DEPTH`] levels, and the levels of this wrapper must not count
//! against it, or a table accepted at declare would make the definitions unreadable and the next
//! start fail. Schema 1 (read, never written) had `F` tables in those places; the two policy
//! lists came later within version 1: a file without them has no policies.

use bytes::Bytes;
use hourglass_wire::{FieldTable, FieldValue, LongStr, ShortStr};

use crate::exchange::{ExchangeKind, ExchangeSpec};
use crate::policy::{PolicyKind, PolicySpec};
use crate::queue::QueueId;

/// The whole file's newest schema version (the snapshot header carries it): 2 since client
/// tables are kept as byte arrays (issue 12).
pub const DEFINITIONS_SCHEMA_VERSION: u32 = 2;
/// The oldest schema version still read (1: tables nested in the payload).
pub const DEFINITIONS_SCHEMA_VERSION_OLDEST: u32 = 1;

/// Stored definitions as decoded (from the catalog, or an older whole file), before
/// [`Broker::restore`] applies them. `Default` is none at all (a new data directory).
#[derive(Debug, Default)]
pub struct Definitions {
    pub(crate) next_queue_id: u64,
    pub(crate) vhosts: Vec<VHostDefinitions>,
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

impl VHostDefinitions {
    pub fn named(name: String) -> VHostDefinitions {
        VHostDefinitions {
            name,
            exchanges: Vec::new(),
            queues: Vec::new(),
            bindings: Vec::new(),
            policies: Vec::new(),
        }
    }
}

/// A binding between durable ends, by name.
#[derive(Clone, Debug)]
pub(crate) struct BindingDefinition {
    pub source: ShortStr,
    pub to_queue: bool,
    pub destination: ShortStr,
    pub routing_key: ShortStr,
    pub arguments: FieldTable,
}

pub(crate) fn encode_exchange(spec: &ExchangeSpec) -> Bytes {
    item(FieldTable::from_entries([
        ("name", text(&spec.name)),
        ("type", FieldValue::LongStr(LongStr::from(spec.kind.name()))),
        ("delayed", FieldValue::Bool(spec.delayed)),
        ("auto_delete", FieldValue::Bool(spec.auto_delete)),
        ("internal", FieldValue::Bool(spec.internal)),
        ("arguments", table_bytes(&spec.arguments)),
    ]))
}

pub(crate) fn encode_queue(id: QueueId, name: &ShortStr, auto_delete: bool, arguments: &FieldTable) -> Bytes {
    item(FieldTable::from_entries([
        ("name", text(name)),
        ("id", FieldValue::I64(id.0 as i64)),
        ("auto_delete", FieldValue::Bool(auto_delete)),
        ("arguments", table_bytes(arguments)),
    ]))
}

pub(crate) fn encode_binding(binding: &BindingDefinition) -> Bytes {
    let kind = if binding.to_queue { "queue" } else { "exchange" };
    item(FieldTable::from_entries([
        ("source", text(&binding.source)),
        ("destination_kind", FieldValue::LongStr(LongStr::from(kind))),
        ("destination", text(&binding.destination)),
        ("routing_key", text(&binding.routing_key)),
        ("arguments", table_bytes(&binding.arguments)),
    ]))
}

fn item(table: FieldTable) -> Bytes {
    table.raw().clone()
}

pub(crate) fn encode_policy(spec: &PolicySpec) -> Bytes {
    item(FieldTable::from_entries([
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
    tables(vhost, key)?.iter().map(|p| Ok((kind, decode_policy(p)?))).collect()
}

pub(crate) fn decode_policy(p: &FieldTable) -> Result<PolicySpec, String> {
    Ok(PolicySpec {
        name: long(p, "name")?,
        pattern: long(p, "pattern")?,
        apply_to: long(p, "apply_to")?,
        priority: int(p, "priority")?,
        definition: nested(p, "definition")?,
    })
}

pub(crate) fn decode_exchange(x: &FieldTable) -> Result<ExchangeSpec, String> {
    let kind_name = short(x, "type")?;
    let kind = ExchangeKind::parse(kind_name.as_bytes())
        .ok_or_else(|| format!("unknown exchange type '{kind_name}'"))?;
    Ok(ExchangeSpec {
        name: short(x, "name")?,
        kind,
        delayed: flag(x, "delayed")?,
        durable: true,
        auto_delete: flag(x, "auto_delete")?,
        internal: flag(x, "internal")?,
        arguments: nested(x, "arguments")?,
    })
}

pub(crate) fn decode_queue(q: &FieldTable) -> Result<(QueueId, ShortStr, bool, FieldTable), String> {
    let id = QueueId(int(q, "id")? as u64);
    Ok((id, short(q, "name")?, flag(q, "auto_delete")?, nested(q, "arguments")?))
}

pub(crate) fn decode_binding(b: &FieldTable) -> Result<BindingDefinition, String> {
    Ok(BindingDefinition {
        source: short(b, "source")?,
        to_queue: short(b, "destination_kind")?.as_bytes() == b"queue",
        destination: short(b, "destination")?,
        routing_key: short(b, "routing_key")?,
        arguments: nested(b, "arguments")?,
    })
}

/// Decodes an older data directory's whole-file definitions (module doc); the error names what
/// is wrong.
pub fn decode_definitions(payload: Bytes) -> Result<Definitions, String> {
    let table = FieldTable::from_raw(payload).map_err(|e| format!("definitions do not parse: {e}"))?;
    let next_queue_id = int(&table, "next_queue_id")? as u64;
    let mut vhosts = Vec::new();
    for vhost in tables(&table, "vhosts")? {
        let mut defs = VHostDefinitions::named(short(&vhost, "name")?.as_str().into_owned());
        defs.exchanges =
            tables(&vhost, "exchanges")?.iter().map(decode_exchange).collect::<Result<_, _>>()?;
        defs.queues = tables(&vhost, "queues")?.iter().map(decode_queue).collect::<Result<_, _>>()?;
        defs.bindings = tables(&vhost, "bindings")?.iter().map(decode_binding).collect::<Result<_, _>>()?;
        defs.policies = decode_policies(&vhost, "policies", PolicyKind::User)?;
        defs.policies.extend(decode_policies(&vhost, "operator_policies", PolicyKind::Operator)?);
        vhosts.push(defs);
    }
    Ok(Definitions { next_queue_id, vhosts })
}

/// The default exchange and the `amq.*` ones exist in every vhost from the start.
pub(crate) fn is_built_in(name: &ShortStr) -> bool {
    name.is_empty() || name.as_bytes().starts_with(b"amq.")
}

fn text(s: &ShortStr) -> FieldValue {
    FieldValue::LongStr(LongStr::new(s.clone().into_bytes()))
}

fn field(table: &FieldTable, key: &str) -> Result<FieldValue, String> {
    table.get(key).ok_or_else(|| format!("definitions: missing '{key}'"))
}

pub(crate) fn int(table: &FieldTable, key: &str) -> Result<i64, String> {
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
    use hourglass_wire::FieldArray;

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
