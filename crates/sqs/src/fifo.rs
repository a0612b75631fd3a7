//! SQS FIFO queues (docs/sqs.md, "FIFO queues"): a `.fifo` queue made with `FifoQueue` is an
//! ordinary queue with `x-sqs-fifo` (the broker hands SQS receives the messages of groups with
//! nothing in flight, so each group is received in order: `queue/message_groups.rs`) and the broker's deduplication
//! (semantics §8) over SQS's 5-minute interval. Sends carry a `MessageGroupId` and a
//! `MessageDeduplicationId` (or the body's SHA-256 under `ContentBasedDeduplication`) as headers
//! AMQP consumers see, and a `SequenceNumber`.

use std::sync::atomic::{AtomicU64, Ordering};

use hourglass_wire::{FieldTable, FieldValue, LongStr};
use serde_json::{json, Map};

use crate::error::SqsError;
use crate::request::Input;

/// The arguments that make and describe a FIFO queue.
pub const FIFO_ARG: &str = "x-sqs-fifo";
const CONTENT_BASED_ARG: &str = "x-sqs-content-based-deduplication";
const SCOPE_ARG: &str = "x-sqs-deduplication-scope";
const THROUGHPUT_ARG: &str = "x-sqs-fifo-throughput-limit";
/// The headers a FIFO message carries. The deduplication id is the broker's default
/// deduplication header, so AMQP publishers deduplicate against SQS senders on the same queue.
const GROUP_HEADER: &str = hourglass_broker::queue::message_groups::GROUP_HEADER;
const DEDUPLICATION_HEADER: &str = hourglass_broker::queue::dedup::DEFAULT_HEADER;
/// The id as sent, when the deduplication scope is the message group (the header above then
/// holds the group and the id).
const DEDUPLICATION_ID_HEADER: &str = "x-sqs-message-deduplication-id";
const SEQUENCE_HEADER: &str = "x-sqs-sequence-number";
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

/// A queue's FIFO settings, read from its arguments (`None`: a standard queue).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FifoSettings {
    pub content_based: bool,
    /// `DeduplicationScope` `messageGroup`: an id is a duplicate only within its group.
    pub per_group: bool,
}

impl FifoSettings {
    pub fn of(arguments: &FieldTable) -> Option<FifoSettings> {
        if arguments.get(FIFO_ARG) != Some(FieldValue::Bool(true)) {
            return None;
        }
        let text = |key| arguments.get(key).and_then(|v| v.as_bytes().map(<[u8]>::to_vec));
        Some(FifoSettings {
            content_based: arguments.get(CONTENT_BASED_ARG) == Some(FieldValue::Bool(true)),
            per_group: text(SCOPE_ARG).as_deref() == Some(b"messageGroup"),
        })
    }

    /// The attributes GetQueueAttributes shows for a FIFO queue.
    pub fn queue_attributes(arguments: &FieldTable, out: &mut Map<String, serde_json::Value>) {
        let Some(settings) = FifoSettings::of(arguments) else { return };
        let text = |key, default: &str| {
            arguments
                .get(key)
                .and_then(|v| v.as_bytes().map(|b| String::from_utf8_lossy(b).into_owned()))
                .unwrap_or_else(|| default.to_owned())
        };
        out.insert("FifoQueue".into(), json!("true"));
        out.insert("ContentBasedDeduplication".into(), json!(settings.content_based.to_string()));
        out.insert("DeduplicationScope".into(), json!(text(SCOPE_ARG, "queue")));
        out.insert("FifoThroughputLimit".into(), json!(text(THROUGHPUT_ARG, "perQueue")));
    }

    /// The headers a message sent to this queue carries, checked as SQS checks a FIFO send: a
    /// `MessageGroupId`, a `MessageDeduplicationId` unless deduplication is content-based, no
    /// per-message `DelaySeconds`. Also the answer's `SequenceNumber`.
    pub fn send_headers(
        &self,
        input: &Input<'_>,
        body: &str,
        sequence: &Sequencer,
        now_ms: u64,
    ) -> Result<(Vec<(String, FieldValue)>, String), SqsError> {
        // AWS takes a DelaySeconds of 0 on a FIFO send and refuses any other.
        if input.value("DelaySeconds").is_some() && input.integer("DelaySeconds", 0..=900)? != Some(0) {
            return Err(SqsError::InvalidParameterValue(
                "Value for parameter DelaySeconds is invalid. Reason: The request include parameter that is not valid for this queue type.".into(),
            ));
        }
        let group = input.required("MessageGroupId")?;
        check_id("MessageGroupId", group)?;
        let id = match input.string("MessageDeduplicationId")? {
            Some(id) => {
                check_id("MessageDeduplicationId", id)?;
                id.to_owned()
            }
            None if self.content_based => {
                crate::sigv4::hex(ring::digest::digest(&ring::digest::SHA256, body.as_bytes()).as_ref())
            }
            None => {
                return Err(SqsError::InvalidParameterValue(
                    "The queue should either have ContentBasedDeduplication enabled or MessageDeduplicationId provided explicitly".into(),
                ))
            }
        };
        let key = if self.per_group { format!("{group}\u{0}{id}") } else { id.clone() };
        let sequence = sequence.next(now_ms).to_string();
        let text = |s: String| FieldValue::LongStr(LongStr::from(s));
        let headers = vec![
            (GROUP_HEADER.to_owned(), text(group.to_owned())),
            (DEDUPLICATION_HEADER.to_owned(), text(key)),
            (DEDUPLICATION_ID_HEADER.to_owned(), text(id)),
            (SEQUENCE_HEADER.to_owned(), text(sequence.clone())),
        ];
        Ok((headers, sequence))
    }
}

/// The headers of a standard queue's send: it names no FIFO parameter but `MessageGroupId`, its
/// tenant in a fair queue (`queue/message_groups.rs`), kept in the same header as a FIFO group.
pub fn standard_send_headers(input: &Input<'_>) -> Result<Vec<(String, FieldValue)>, SqsError> {
    if input.value("MessageDeduplicationId").is_some() {
        return Err(SqsError::InvalidParameterValue(
            "The request include parameter MessageDeduplicationId that is not valid for this queue type"
                .into(),
        ));
    }
    let Some(group) = input.string("MessageGroupId")? else { return Ok(Vec::new()) };
    check_id("MessageGroupId", group)?;
    Ok(vec![(GROUP_HEADER.to_owned(), FieldValue::LongStr(LongStr::from(group.to_owned())))])
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

fn check_id(name: &str, id: &str) -> Result<(), SqsError> {
    let valid = (1..=ID_LEN_MAX).contains(&id.len()) && id.bytes().all(|b| b.is_ascii_graphic());
    if valid {
        Ok(())
    } else {
        Err(SqsError::InvalidParameterValue(format!(
            "Value {id} for parameter {name} is invalid. Reason: it must be 1 to {ID_LEN_MAX} letters, digits or punctuation."
        )))
    }
}

/// FIFO messages' sequence numbers: increasing across the endpoint's life and, since they start
/// from the clock, across restarts (as the broker's entry ids do, `entry_ids.rs`).
#[derive(Debug, Default)]
pub struct Sequencer {
    last: AtomicU64,
}

impl Sequencer {
    /// The next number at `now_ms`: above every one before, and at least `now_ms × 2^16`.
    pub fn next(&self, now_ms: u64) -> u64 {
        let floor = now_ms << 16;
        let mut last = self.last.load(Ordering::Relaxed);
        loop {
            let next = (last + 1).max(floor);
            match self.last.compare_exchange_weak(last, next, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => return next,
                Err(seen) => last = seen,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    #[test]
    fn fifo_names_end_in_dot_fifo() {
        assert!(check_name("orders.fifo").is_ok());
        assert!(check_name(&format!("{}.fifo", "a".repeat(75))).is_ok());
        for bad in ["orders", ".fifo", "a.b.fifo", "x.fifo.fifo", &format!("{}.fifo", "a".repeat(76))] {
            assert!(check_name(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_standard_send_keeps_its_group_as_a_fair_queue_tenant() {
        let headers = |input: Value| standard_send_headers(&Input::new(&input).unwrap());
        assert_eq!(headers(json!({})).unwrap(), Vec::new());
        let kept = headers(json!({"MessageGroupId": "tenant-1"})).unwrap();
        assert_eq!(
            kept,
            vec![(GROUP_HEADER.to_owned(), FieldValue::LongStr(LongStr::from("tenant-1".to_owned())))]
        );
        assert!(matches!(headers(json!({"MessageGroupId": "a b"})), Err(SqsError::InvalidParameterValue(_))));
        assert!(matches!(
            headers(json!({"MessageGroupId": "g".repeat(129)})),
            Err(SqsError::InvalidParameterValue(_))
        ));
        assert!(matches!(
            headers(json!({"MessageDeduplicationId": "d"})),
            Err(SqsError::InvalidParameterValue(_))
        ));
    }

    #[test]
    fn sends_need_a_group_and_an_id_unless_content_based() {
        let sequence = Sequencer::default();
        let standard = FifoSettings::default();
        let send = |settings: FifoSettings, input: Value| {
            settings.send_headers(&Input::new(&input).unwrap(), "body", &sequence, 1_000)
        };
        assert_eq!(send(standard, json!({})).unwrap_err(), SqsError::MissingParameter("MessageGroupId"));
        assert!(matches!(
            send(standard, json!({"MessageGroupId": "g"})),
            Err(SqsError::InvalidParameterValue(_))
        ));
        let delayed = json!({"MessageGroupId": "g", "MessageDeduplicationId": "d", "DelaySeconds": 5});
        assert!(matches!(send(standard, delayed), Err(SqsError::InvalidParameterValue(_))));
        let (headers, first) =
            send(standard, json!({"MessageGroupId": "g", "MessageDeduplicationId": "d"})).unwrap();
        assert_eq!(headers[1], (DEDUPLICATION_HEADER.to_owned(), FieldValue::LongStr("d".into())));
        let content = FifoSettings { content_based: true, per_group: true };
        let (headers, second) = send(content, json!({"MessageGroupId": "g"})).unwrap();
        let digest = "230d8358dc8e8890b4c58deeb62912ee2f20357ae92a5cc861b98e68fe31acb5";
        assert_eq!(headers[1].1, FieldValue::LongStr(format!("g\u{0}{digest}").into()));
        assert_eq!(headers[2].1, FieldValue::LongStr(digest.into()));
        assert!(second.parse::<u64>().unwrap() > first.parse::<u64>().unwrap());
        let long = json!({"MessageGroupId": "g".repeat(129), "MessageDeduplicationId": "d"});
        assert!(matches!(send(standard, long), Err(SqsError::InvalidParameterValue(_))));
    }

    #[test]
    fn sequence_numbers_increase_and_start_from_the_clock() {
        let sequence = Sequencer::default();
        let a = sequence.next(10);
        assert_eq!(a, 10 << 16);
        assert_eq!(sequence.next(10), a + 1);
        assert_eq!(sequence.next(5), a + 2);
        assert_eq!(sequence.next(11), 11 << 16);
    }
}
