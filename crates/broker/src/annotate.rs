//! Merging an AMQP 1.0 `modified` outcome's message annotations into the message it settles
//! (RabbitMQ 4.0's modified outcome, issue 42). The annotations become `x-` headers, as a 1.0
//! publish's do (docs/amqp1.md), so a consumer over either protocol reads them.
//!
//! A message that goes back to its queue keeps them across a restart: when it is persisted, the
//! annotated message is stored under a new store id and the old record settled after it (a crash
//! in between keeps both, never neither). Its place in the queue stays; after a restart it is
//! read back behind the messages stored before the annotation. A message dead-lettered carries
//! them into its copies and needs no store op of its own.

use std::sync::Arc;

use hourglass_wire::FieldTable;

use crate::api::AmqpError;
use crate::broker::Broker;
use crate::message::Message;
use crate::queue::entry::{Entry, Payload};
use crate::queue::QueueId;
use crate::table_limits::{self, TableTooLarge};

/// `message` with `annotations` set among its headers, each replacing a header of its name; or
/// why not, when that makes the headers grow past the limit of a stored table.
pub(crate) fn annotated(message: &Message, annotations: &FieldTable) -> Result<Message, TableTooLarge> {
    let before = message.properties().headers().unwrap_or_default();
    let merged = annotations
        .iter()
        .fold(before.clone(), |headers, (key, value)| headers.with_entry(&key.as_str(), value));
    if merged.encoded_len() > before.encoded_len() {
        table_limits::check_table("the annotated message's headers", &merged)?;
    }
    Ok(message.with_properties(message.properties().edited(|p| p.headers = Some(merged))))
}

impl Broker {
    /// Merges `annotations` into delivered `entry` of queue `id`. `stays`: it goes back to its
    /// queue, so a persisted one is stored again, annotated. Refused past the headers' limit,
    /// leaving the entry as it was.
    pub(crate) fn annotate(
        &mut self,
        id: QueueId,
        entry: &mut Entry,
        annotations: &FieldTable,
        stays: bool,
    ) -> Result<(), AmqpError> {
        // A delivered entry is always in memory.
        let Some(message) = entry.resident() else { return Ok(()) };
        let message = Arc::new(annotated(message, annotations).map_err(TableTooLarge::into_amqp)?);
        entry.payload = Payload::Resident(message);
        if let (true, Some(old)) = (stays, entry.persist_id()) {
            entry.set_persist_id(self.entry_ids.next());
            self.persist_rewritten(id, entry);
            self.persist_settle(id, Some(old));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use hourglass_wire::{BasicProperties, FieldValue, ShortStr};

    use super::*;

    fn message_with(headers: &[(&str, FieldValue)]) -> Message {
        let properties = BasicProperties {
            headers: Some(FieldTable::from_entries(headers.iter().cloned())),
            ..Default::default()
        };
        let key = ShortStr::try_from("key").unwrap();
        Message::new(ShortStr::default(), key, properties.into(), Bytes::from_static(b"body"))
    }

    /// Annotations replace headers of their name and add the others; the rest of the message is
    /// kept.
    #[test]
    fn annotations_replace_and_add_headers() {
        let message = message_with(&[("x-kept", "a".into()), ("x-reason", "old".into())]);
        let annotations = FieldTable::from_entries([
            ("x-reason", FieldValue::from("new")),
            ("x-count", FieldValue::I64(2)),
        ]);
        let out = annotated(&message, &annotations).unwrap();
        let headers = out.properties().headers().unwrap();
        assert_eq!(headers.get("x-kept"), Some("a".into()));
        assert_eq!(headers.get("x-reason"), Some("new".into()));
        assert_eq!(headers.get("x-count"), Some(FieldValue::I64(2)));
        assert_eq!(headers.len(), 3);
        assert_eq!((&out.body[..], out.routing_key.as_str().as_ref()), (&b"body"[..], "key"));
    }

    /// Headers cannot be made to grow without bound, one requeue at a time.
    #[test]
    fn annotations_past_the_table_limit_are_refused() {
        let message = message_with(&[]);
        let big = "v".repeat(table_limits::TABLE_BYTES_MAX);
        let annotations = FieldTable::from_entries([("x-big", FieldValue::from(big.as_str()))]);
        assert!(matches!(annotated(&message, &annotations), Err(TableTooLarge::Bytes { .. })));
    }
}
