//! SQS FIFO queues (docs/sqs.md, "FIFO queues"): a `.fifo` queue made with `FifoQueue` is an
//! ordinary queue with `x-sqs-fifo` (the broker hands SQS receives the messages of groups with
//! nothing in flight, so each group is received in order: `queue/message_groups.rs`) and the broker's deduplication
//! (semantics §8) over SQS's 5-minute interval. Sends carry a `MessageGroupId` and a
//! `MessageDeduplicationId` (or the body's SHA-256 under `ContentBasedDeduplication`) as headers
//! AMQP consumers see, and a `SequenceNumber`: the broker checks and writes them by the queue's
//! settings (`hourglass_broker::admin::SqsOutgoing`); this file checks the ids' form.

// The headers a FIFO message carries (the broker writes them, `admin/sqs_send.rs`). Its
// deduplication id is in the broker's default deduplication header, so AMQP publishers
// deduplicate against SQS senders on the same queue.
use hourglass_broker::admin::{DEDUPLICATION_ID_HEADER, SEQUENCE_HEADER};
use hourglass_broker::queue::message_groups::GROUP_HEADER;
use hourglass_broker::queue::sqs_args::SqsArgs;
use hourglass_wire::{FieldTable, FieldValue, LongStr};
use serde_json::{json, Map};

use crate::error::SqsError;

/// The arguments that make and describe a FIFO queue.
pub const FIFO_ARG: &str = "x-sqs-fifo";
const CONTENT_BASED_ARG: &str = "x-sqs-content-based-deduplication";
const SCOPE_ARG: &str = "x-sqs-deduplication-scope";
const THROUGHPUT_ARG: &str = "x-sqs-fifo-throughput-limit";
/// SQS's deduplication interval, and the ids a FIFO queue holds at most within it (300
/// messages a second, SQS's FIFO rate without batching, for 5 minutes, with room).
const DEDUPLICATION_INTERVAL_MS: i64 = 300_000;
const DEDUPLICATION_IDS_MAX: i64 = 100_000;
/// `MessageGroupId` and `MessageDeduplicationId`: 1 to 128 of these characters.
const ID_LEN_MAX: usize = 128;

/// A change to one queue argument: set, or removed (`None`).
pub type ArgumentChange = (String, Option<FieldValue>);

/// What every FIFO queue's name ends in, and no standard queue's.
const NAME_SUFFIX: &str = ".fifo";

/// Whether `name` is a FIFO queue's by SQS's naming rule (it ends in `.fifo`).
pub fn is_fifo_name(name: &str) -> bool {
    name.ends_with(NAME_SUFFIX)
}

/// SQS's FIFO queue names: 1 to 80 characters ending in `.fifo`, the rest letters, digits, `-`
/// and `_`.
pub fn check_name(name: &str) -> Result<(), SqsError> {
    let base = name.strip_suffix(NAME_SUFFIX);
    let valid = name.len() <= 80
        && base.is_some_and(|b| {
            !b.is_empty() && b.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_')
        });
    if valid {
        Ok(())
    } else {
        Err(SqsError::InvalidParameterValue(
            "The name of a FIFO queue can only include alphanumeric characters, hyphens, or underscores, must end with .fifo suffix and be 1 to 80 in length.".into(),
        ))
    }
}

/// The arguments CreateQueue gives a FIFO queue besides its attributes'.
pub fn creation_arguments() -> Vec<ArgumentChange> {
    let set = |key: &str, value: FieldValue| (key.to_owned(), Some(value));
    vec![
        set(FIFO_ARG, FieldValue::Bool(true)),
        set("x-message-deduplication", FieldValue::Bool(true)),
        set("x-cache-ttl", FieldValue::I64(DEDUPLICATION_INTERVAL_MS)),
        set("x-cache-size", FieldValue::I64(DEDUPLICATION_IDS_MAX)),
    ]
}

/// What a FIFO-only attribute sets (`None`: not one of them). On a standard queue they are
/// unknown attributes, as in SQS.
pub fn attribute_arguments(
    name: &str,
    value: &str,
    fifo: bool,
) -> Option<Result<Vec<ArgumentChange>, SqsError>> {
    let (key, allowed): (&str, &[&str]) = match name {
        "ContentBasedDeduplication" => (CONTENT_BASED_ARG, &["true", "false"]),
        "DeduplicationScope" => (SCOPE_ARG, &["queue", "messageGroup"]),
        "FifoThroughputLimit" => (THROUGHPUT_ARG, &["perQueue", "perMessageGroupId"]),
        _ => return None,
    };
    if !fifo {
        return Some(Err(SqsError::InvalidAttributeName(name.to_owned())));
    }
    if !allowed.contains(&value) {
        return Some(Err(SqsError::InvalidAttributeValue(format!(
            "Invalid value for the parameter {name}."
        ))));
    }
    let value = match value {
        "true" => FieldValue::Bool(true),
        "false" => FieldValue::Bool(false),
        text => FieldValue::LongStr(LongStr::from(text.to_owned())),
    };
    Some(Ok(vec![(key.to_owned(), Some(value))]))
}

/// The attributes GetQueueAttributes shows for a FIFO queue: from its SQS settings as the
/// broker parsed them, and its `FifoThroughputLimit` as set (it changes nothing here).
pub fn queue_attributes(
    settings: &SqsArgs,
    arguments: &FieldTable,
    out: &mut Map<String, serde_json::Value>,
) {
    if !settings.fifo {
        return;
    }
    let scope = if settings.deduplication_per_group { "messageGroup" } else { "queue" };
    let throughput = arguments
        .get(THROUGHPUT_ARG)
        .and_then(|v| v.as_bytes().map(|b| String::from_utf8_lossy(b).into_owned()))
        .unwrap_or_else(|| "perQueue".to_owned());
    out.insert("FifoQueue".into(), json!("true"));
    out.insert("ContentBasedDeduplication".into(), json!(settings.content_based_deduplication.to_string()));
    out.insert("DeduplicationScope".into(), json!(scope));
    out.insert("FifoThroughputLimit".into(), json!(throughput));
}

/// The group system attributes of a received message (a FIFO queue's, and a fair queue's
/// `MessageGroupId`), as ReceiveMessage shows them.
pub fn received_attributes(
    headers: Option<&FieldTable>,
    wants: impl Fn(&str) -> bool,
    out: &mut Map<String, serde_json::Value>,
) {
    let text =
        |key| headers?.get(key).and_then(|v| v.as_bytes().map(|b| String::from_utf8_lossy(b).into_owned()));
    for (attribute, header) in [
        ("MessageGroupId", GROUP_HEADER),
        ("MessageDeduplicationId", DEDUPLICATION_ID_HEADER),
        ("SequenceNumber", SEQUENCE_HEADER),
    ] {
        if let (true, Some(value)) = (wants(attribute), text(header)) {
            out.insert(attribute.into(), json!(value));
        }
    }
}

pub(crate) fn check_id(name: &str, id: &str) -> Result<(), SqsError> {
    let valid = (1..=ID_LEN_MAX).contains(&id.len()) && id.bytes().all(|b| b.is_ascii_graphic());
    if valid {
        Ok(())
    } else {
        Err(SqsError::InvalidParameterValue(format!(
            "Value {id} for parameter {name} is invalid. Reason: it must be 1 to {ID_LEN_MAX} letters, digits or punctuation."
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fifo_names_end_in_dot_fifo() {
        assert!(check_name("orders.fifo").is_ok());
        assert!(check_name(&format!("{}.fifo", "a".repeat(75))).is_ok());
        for bad in ["orders", ".fifo", "a.b.fifo", "x.fifo.fifo", &format!("{}.fifo", "a".repeat(76))] {
            assert!(check_name(bad).is_err(), "{bad}");
        }
    }

    /// `MessageGroupId` and `MessageDeduplicationId` are 1 to 128 letters, digits or
    /// punctuation, whatever the queue (the queue decides whether it takes them).
    #[test]
    fn ids_are_1_to_128_printable_characters() {
        assert!(check_id("MessageGroupId", "tenant-1").is_ok());
        assert!(check_id("MessageGroupId", &"g".repeat(128)).is_ok());
        for bad in ["", "a b", "é", &"g".repeat(129)] {
            assert!(
                matches!(check_id("MessageGroupId", bad), Err(SqsError::InvalidParameterValue(_))),
                "{bad:?}"
            );
        }
    }
}
