//! The durable definitions as entries of the store's catalog (a key → value map, one record per
//! change; `hourglass_store::catalog`, docs/storage.md): one entry per vhost, durable exchange,
//! durable queue, binding between durable ends, policy and operator policy, so a declare writes
//! one small record however many definitions there are.
//!
//! Keys (`comp` = u32 big-endian length, then the bytes; one vhost's keys share its prefix, so a
//! deleted vhost is one prefix delete):
//! ```text
//! v comp(vhost) X comp(exchange)                          a durable exchange
//! v comp(vhost) Q comp(queue)                             a durable queue
//! v comp(vhost) B comp(source) (q|e) comp(destination) comp(routing key) comp(arguments)
//! v comp(vhost) P comp(policy)     v comp(vhost) O comp(operator policy)
//! g next_queue_id                                         the next queue id
//! i ...                                                   users, vhost records, permissions
//!                                                         (hourglass-identity `entries.rs`)
//! ```
//! A vhost has no entry of the broker's: which vhosts exist is the management store's vhost
//! records (one owner), written through [`crate::Broker::store_identity`] in the same op stream;
//! at start the broker gets those (`hourglass-server` `identity.rs`).
//! Values are AMQP field tables, the same items as the whole-file format of `definitions.rs`
//! (which is still read, once, to move an older data directory over).

use bytes::{BufMut, Bytes, BytesMut};
use hourglass_wire::{FieldTable, FieldValue, ShortStr};

use super::definitions::{
    decode_binding, decode_exchange, decode_policy, decode_queue, encode_binding, encode_exchange,
    encode_policy, encode_queue, int, BindingDefinition, Definitions, VHostDefinitions,
};
use crate::policy::PolicyKind;

const VHOST_SCOPE: u8 = b'v';
const GLOBAL_SCOPE: u8 = b'g';
/// The first byte of the management store's identity keys (users, vhost records, permissions).
pub const IDENTITY_SCOPE: u8 = b'i';
const EXCHANGE: u8 = b'X';
const QUEUE: u8 = b'Q';
const BINDING: u8 = b'B';
const POLICY: u8 = b'P';
const OPERATOR_POLICY: u8 = b'O';
const TO_QUEUE: u8 = b'q';
const TO_EXCHANGE: u8 = b'e';
const NEXT_QUEUE_ID: &[u8] = b"next_queue_id";

/// One change for the catalog.
#[derive(Clone, Debug, PartialEq)]
pub enum CatalogChange {
    Put {
        key: Bytes,
        value: Bytes,
    },
    Delete {
        key: Bytes,
    },
    /// Every key starting with `prefix` (a deleted vhost).
    DeletePrefix {
        prefix: Bytes,
    },
}

/// The prefix every key of `vhost` starts with.
pub(crate) fn vhost_prefix(vhost: &str) -> BytesMut {
    let mut key = BytesMut::with_capacity(16 + vhost.len());
    key.put_u8(VHOST_SCOPE);
    comp(&mut key, vhost.as_bytes());
    key
}

pub(crate) fn exchange_key(vhost: &str, name: &ShortStr) -> Bytes {
    named_key(vhost, EXCHANGE, name.as_bytes())
}

pub(crate) fn queue_key(vhost: &str, name: &ShortStr) -> Bytes {
    named_key(vhost, QUEUE, name.as_bytes())
}

pub(crate) fn policy_key(vhost: &str, kind: PolicyKind, name: &str) -> Bytes {
    let tag = match kind {
        PolicyKind::User => POLICY,
        PolicyKind::Operator => OPERATOR_POLICY,
    };
    named_key(vhost, tag, name.as_bytes())
}

pub(crate) fn binding_key(vhost: &str, binding: &BindingDefinition) -> Bytes {
    let mut key = vhost_prefix(vhost);
    key.put_u8(BINDING);
    comp(&mut key, binding.source.as_bytes());
    key.put_u8(if binding.to_queue { TO_QUEUE } else { TO_EXCHANGE });
    comp(&mut key, binding.destination.as_bytes());
    comp(&mut key, binding.routing_key.as_bytes());
    comp(&mut key, binding.arguments.raw());
    key.freeze()
}

pub(crate) fn next_queue_id_key() -> Bytes {
    let mut key = BytesMut::with_capacity(1 + NEXT_QUEUE_ID.len());
    key.put_u8(GLOBAL_SCOPE);
    key.put_slice(NEXT_QUEUE_ID);
    key.freeze()
}

pub(crate) fn next_queue_id_value(next: u64) -> Bytes {
    FieldTable::from_entries([("next_queue_id", FieldValue::I64(next as i64))]).raw().clone()
}

fn named_key(vhost: &str, tag: u8, name: &[u8]) -> Bytes {
    let mut prefix = vhost_prefix(vhost);
    prefix.put_u8(tag);
    composite_key(&prefix, &[name])
}

/// `prefix` followed by each of `parts` as a length-prefixed component: how every catalog key is
/// built (the management store's identity keys too), so that no key is a prefix of another by
/// accident ("a" then "bc" differs from "ab" then "c").
pub fn composite_key(prefix: &[u8], parts: &[&[u8]]) -> Bytes {
    let mut key = BytesMut::with_capacity(prefix.len() + parts.iter().map(|p| 4 + p.len()).sum::<usize>());
    key.put_slice(prefix);
    for part in parts {
        comp(&mut key, part);
    }
    key.freeze()
}

fn comp(out: &mut BytesMut, bytes: &[u8]) {
    // Every component is a name, a routing key or one client table: far below 4 GiB.
    out.put_u32(bytes.len() as u32);
    out.put_slice(bytes);
}

/// Reads the component at the start of `key`, advancing past it.
fn take_comp<'a>(key: &mut &'a [u8]) -> Option<&'a [u8]> {
    let len = u32::from_be_bytes(key.get(..4)?.try_into().ok()?) as usize;
    let bytes = key.get(4..4 + len)?;
    *key = &key[4 + len..];
    Some(bytes)
}

impl Definitions {
    /// Every definition as a catalog entry: how an older data directory's whole-file definitions
    /// move into the catalog.
    pub fn catalog_entries(&self) -> Vec<(Bytes, Bytes)> {
        let mut entries = vec![(next_queue_id_key(), next_queue_id_value(self.next_queue_id))];
        for vhost in &self.vhosts {
            let name = vhost.name.as_str();
            for spec in &vhost.exchanges {
                entries.push((exchange_key(name, &spec.name), encode_exchange(spec)));
            }
            for (id, queue, auto_delete, arguments) in &vhost.queues {
                entries.push((queue_key(name, queue), encode_queue(*id, queue, *auto_delete, arguments)));
            }
            for binding in &vhost.bindings {
                entries.push((binding_key(name, binding), encode_binding(binding)));
            }
            for (kind, spec) in &vhost.policies {
                entries.push((policy_key(name, *kind, &spec.name), encode_policy(spec)));
            }
        }
        entries
    }
}

/// The definitions the catalog's entries hold; the error names the first entry that does not
/// decode (the start refuses it, or sets the catalog aside when told to).
pub fn decode_catalog<'a>(
    entries: impl IntoIterator<Item = (&'a [u8], &'a [u8])>,
) -> Result<Definitions, String> {
    let mut definitions = Definitions::default();
    let mut vhosts: std::collections::BTreeMap<String, VHostDefinitions> = Default::default();
    for (key, value) in entries {
        let described = |e: String| format!("catalog entry {}: {e}", printable(key));
        let Some((&scope, mut rest)) = key.split_first() else { return Err(described("empty key".into())) };
        if scope == IDENTITY_SCOPE {
            // Users, vhost records and permissions: the management store's (`composite_key`).
            continue;
        }
        let table =
            FieldTable::from_raw(Bytes::copy_from_slice(value)).map_err(|e| described(e.to_string()))?;
        match scope {
            GLOBAL_SCOPE if rest == NEXT_QUEUE_ID => {
                definitions.next_queue_id = int(&table, "next_queue_id").map_err(described)? as u64;
            }
            VHOST_SCOPE => {
                let name = take_comp(&mut rest).ok_or_else(|| described("bad key".into()))?;
                let name =
                    String::from_utf8(name.to_vec()).map_err(|_| described("vhost not UTF-8".into()))?;
                let vhost = vhosts.entry(name.clone()).or_insert_with(|| VHostDefinitions::named(name));
                add_item(vhost, rest.first().copied(), &table).map_err(described)?;
            }
            _ => return Err(described("unknown key".into())),
        }
    }
    definitions.vhosts = vhosts.into_values().collect();
    Ok(definitions)
}

fn add_item(vhost: &mut VHostDefinitions, tag: Option<u8>, table: &FieldTable) -> Result<(), String> {
    match tag {
        Some(EXCHANGE) => vhost.exchanges.push(decode_exchange(table)?),
        Some(QUEUE) => vhost.queues.push(decode_queue(table)?),
        Some(BINDING) => vhost.bindings.push(decode_binding(table)?),
        Some(POLICY) => vhost.policies.push((PolicyKind::User, decode_policy(table)?)),
        Some(OPERATOR_POLICY) => vhost.policies.push((PolicyKind::Operator, decode_policy(table)?)),
        _ => return Err("unknown kind of definition".into()),
    }
    Ok(())
}

/// A key for an error message: printable ASCII kept, the rest escaped.
fn printable(key: &[u8]) -> String {
    key.escape_ascii().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exchange::{ExchangeKind, ExchangeSpec};
    use crate::policy::PolicySpec;
    use crate::queue::QueueId;

    fn definitions() -> Definitions {
        let args = FieldTable::from_entries([("x-max-length", FieldValue::I64(5))]);
        let exchange = ExchangeSpec {
            name: ShortStr::from_static("x"),
            kind: ExchangeKind::Topic,
            delayed: true,
            durable: true,
            auto_delete: false,
            internal: false,
            arguments: args.clone(),
        };
        let binding = BindingDefinition {
            source: ShortStr::from_static("x"),
            to_queue: true,
            destination: ShortStr::from_static("q"),
            routing_key: ShortStr::from_static("a.#"),
            arguments: args.clone(),
        };
        let policy = PolicySpec {
            name: "p".into(),
            pattern: "^q$".into(),
            apply_to: "queues".into(),
            priority: 2,
            definition: args.clone(),
        };
        let mut vhost = VHostDefinitions::named("/".into());
        vhost.exchanges.push(exchange);
        vhost.queues.push((QueueId(7), ShortStr::from_static("q"), false, args));
        vhost.bindings.push(binding);
        vhost.policies.push((PolicyKind::Operator, policy));
        Definitions { next_queue_id: 8, vhosts: vec![vhost] }
    }

    /// Definitions go into catalog entries and come back the same (a vhost with nothing in it has
    /// no entry: the vhost records are the management store's).
    #[test]
    fn definitions_round_trip_through_catalog_entries() {
        let before = definitions();
        let entries = before.catalog_entries();
        let mut sorted: Vec<_> = entries.iter().map(|(k, v)| (&k[..], &v[..])).collect();
        sorted.sort();
        let after = decode_catalog(sorted).unwrap();
        assert_eq!(format!("{after:?}"), format!("{before:?}"));
    }

    /// One vhost's keys share its prefix and no other vhost's ("a" is no prefix of "ab").
    #[test]
    fn a_vhost_prefix_covers_only_its_own_keys() {
        let binding = BindingDefinition {
            source: ShortStr::from_static("x"),
            to_queue: false,
            destination: ShortStr::from_static("y"),
            routing_key: ShortStr::from_static(""),
            arguments: FieldTable::new(),
        };
        let a = vhost_prefix("a");
        for key in [queue_key("a", &ShortStr::from_static("q")), binding_key("a", &binding)] {
            assert!(key.starts_with(&a));
        }
        assert!(!queue_key("ab", &ShortStr::from_static("q")).starts_with(&a));
    }

    /// An entry that does not decode is named, never skipped.
    #[test]
    fn an_undecodable_entry_is_named() {
        let key = queue_key("/", &ShortStr::from_static("q"));
        let error = decode_catalog([(&key[..], &b"\x01"[..])]).unwrap_err();
        assert!(error.contains("catalog entry"), "{error}");
        let error = decode_catalog([(&b"zz"[..], &FieldTable::new().raw()[..])]).unwrap_err();
        assert!(error.contains("unknown key"), "{error}");
        // Identity entries (JSON, the management store's) are not the broker's to decode.
        let user = composite_key(&[IDENTITY_SCOPE, b'U'], &[b"guest"]);
        assert!(decode_catalog([(&user[..], &br#"{"name":"guest"}"#[..])]).is_ok());
    }
}
