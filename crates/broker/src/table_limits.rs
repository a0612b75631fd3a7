//! Limits on the argument tables a client may have stored (issue #22, finding 3): queue, exchange
//! and binding arguments (AMQP and HTTP alike, both reach the method handlers), consumer
//! arguments, and policy definitions. Each durable definition becomes one catalog record, and a
//! record over the catalog's limit (16 MiB, `hourglass_store::limits::CATALOG_RECORD_BYTES_MAX`)
//! cannot be stored: before, a 1,000,000-key `PUT /api/queues/…` was declared in memory, answered
//! 201, and was gone after a restart. With these limits every accepted table fits in a record
//! many times over, whatever the rest of the definition holds (a name is at most 255 bytes).
//!
//! RabbitMQ has no such limit of its own: over AMQP a table is bounded by the frame (128 KiB by
//! default), over HTTP by the 20 MB body. No argument RabbitMQ or Hourglass knows needs more than
//! a few dozen entries; headers-exchange bindings match on a handful of headers.
//! User tags are limited in the management API (`crates/mgmt/src/routes/mod.rs` `tags_field`),
//! with the same numbers.

use hourglass_wire::FieldTable;

use crate::api::AmqpError;
use crate::errors;

/// Most entries in one table (its top level; nested tables count in bytes). 1,024: 20 times the
/// largest set of x-arguments anyone declares, and more headers than any headers-exchange
/// binding matches on.
pub const TABLE_ENTRIES_MAX: usize = 1024;

/// Most encoded bytes of one table, nested tables included (AMQP field-table encoding, the length
/// prefix counted). 64 KiB: half of the default AMQP frame, so a client that never met the limit
/// over AMQP does not meet it here; 256 of them fit in one catalog record.
pub const TABLE_BYTES_MAX: usize = 64 * 1024;

/// A table past [`TABLE_ENTRIES_MAX`] or [`TABLE_BYTES_MAX`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TableTooLarge {
    #[error("{what} has {entries} entries, more than the limit of {TABLE_ENTRIES_MAX}")]
    Entries { what: &'static str, entries: usize },
    #[error("{what} is {bytes} bytes encoded, more than the limit of {TABLE_BYTES_MAX}")]
    Bytes { what: &'static str, bytes: usize },
}

impl TableTooLarge {
    /// RabbitMQ's code for an argument it refuses: 406 PRECONDITION_FAILED (a channel error).
    pub fn into_amqp(self) -> AmqpError {
        errors::precondition_failed(self)
    }
}

/// Refuses `table` (named `what` in the reason) past either limit. The byte count is read off the
/// encoding the table already has; the entries are counted only when the bytes allow more than
/// the limit's worth (an entry takes at least 3 bytes: a 1-byte name length, a name byte, a tag).
pub fn check_table(what: &'static str, table: &FieldTable) -> Result<(), TableTooLarge> {
    let bytes = table.encoded_len();
    if bytes > TABLE_BYTES_MAX {
        return Err(TableTooLarge::Bytes { what, bytes });
    }
    if bytes > 4 + 3 * TABLE_ENTRIES_MAX {
        let entries = table.len();
        if entries > TABLE_ENTRIES_MAX {
            return Err(TableTooLarge::Entries { what, entries });
        }
    }
    Ok(())
}

/// The arguments table of a channel method that has one, with the name its reason uses.
pub(crate) fn method_arguments(method: &hourglass_wire::Method) -> Option<(&'static str, &FieldTable)> {
    use hourglass_wire::Method as M;
    Some(match method {
        M::QueueDeclare(m) => ("queue arguments", &m.arguments),
        M::ExchangeDeclare(m) => ("exchange arguments", &m.arguments),
        M::QueueBind(m) => ("binding arguments", &m.arguments),
        M::QueueUnbind(m) => ("binding arguments", &m.arguments),
        M::ExchangeBind(m) => ("binding arguments", &m.arguments),
        M::ExchangeUnbind(m) => ("binding arguments", &m.arguments),
        M::BasicConsume(m) => ("consumer arguments", &m.arguments),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use hourglass_wire::FieldValue;

    use super::*;

    fn table_of(entries: usize, value_bytes: usize) -> FieldTable {
        let value = "v".repeat(value_bytes);
        let names: Vec<String> = (0..entries).map(|i| format!("k{i}")).collect();
        FieldTable::from_entries(names.iter().map(|n| (n.as_str(), FieldValue::from(value.as_str()))))
    }

    /// At the limits a table passes; one entry or one byte more is refused, naming the limit.
    #[test]
    fn tables_at_the_limits_pass_and_past_them_are_refused() {
        assert_eq!(check_table("t", &table_of(TABLE_ENTRIES_MAX, 0)), Ok(()));
        let refused = check_table("queue arguments", &table_of(TABLE_ENTRIES_MAX + 1, 0)).unwrap_err();
        assert_eq!(
            refused,
            TableTooLarge::Entries { what: "queue arguments", entries: TABLE_ENTRIES_MAX + 1 }
        );
        assert!(refused.to_string().contains("limit of 1024"), "{refused}");
        let big = table_of(1, TABLE_BYTES_MAX);
        assert!(matches!(check_table("t", &big), Err(TableTooLarge::Bytes { .. })));
        assert_eq!(check_table("t", &table_of(1, 1000)), Ok(()));
        let amqp = refused.into_amqp();
        assert_eq!(amqp.reply_code, 406);
        assert!(amqp.reply_text.starts_with("PRECONDITION_FAILED - queue arguments has 1025 entries"));
    }
}
