//! SendMessage into a queue, in one request (issue 41): the endpoint checks what needs no queue
//! (the body, the ids' form, the attributes) and hands the message over with what the queue's
//! SQS settings decide on (`queue/sqs_args.rs`, parsed once with the queue): its size against
//! `MaximumMessageSize`, and a FIFO queue's group, deduplication id and sequence number
//! (docs/sqs.md, "FIFO queues"). Sent, it is an ordinary persistent message of the queue,
//! published through the one publish path (`enqueue_published`): counted, traced,
//! deduplicated.

use std::sync::Arc;

use bytes::Bytes;
use hourglass_wire::{BasicProperties, EncodedProperties, FieldTable, FieldValue, LongStr, ShortStr};

use super::sqs_gateway::{SqsGatewayError, GATEWAY_CHANNEL};
use crate::broker::Broker;
use crate::enqueue::Enqueued;
use crate::message::Message;
use crate::message_stats::{Confirm, PublishOutcome};
use crate::published::Traced;
use crate::queue::dedup::DEFAULT_HEADER as DEDUPLICATION_HEADER;
use crate::queue::message_groups::GROUP_HEADER;
use crate::queue::sqs_args::SqsArgs;
use crate::time::Timestamp;

/// A FIFO message's `MessageDeduplicationId` as sent, when the deduplication scope is the
/// message group (the deduplication header then holds the group and the id).
pub const DEDUPLICATION_ID_HEADER: &str = "x-sqs-message-deduplication-id";
/// A FIFO message's `SequenceNumber`.
pub const SEQUENCE_HEADER: &str = "x-sqs-sequence-number";

/// A message SendMessage sends, as the endpoint read it.
#[derive(Clone, Debug, Default)]
pub struct SqsOutgoing {
    /// Its properties, its message attributes among the headers.
    pub properties: BasicProperties,
    pub body: Bytes,
    /// `DelaySeconds` (`None`: not given, the queue's own `x-delivery-delay` applies).
    pub delay_ms: Option<u64>,
    /// What counts against `MaximumMessageSize`: the body and the message attributes.
    pub size: usize,
    /// `MessageGroupId`: a FIFO queue's group, a standard (fair) queue's tenant.
    pub group_id: Option<String>,
    /// `MessageDeduplicationId` (FIFO queues only).
    pub deduplication_id: Option<String>,
}

impl SqsOutgoing {
    /// A message with these properties and body and nothing else set.
    pub fn new(properties: BasicProperties, body: Bytes) -> Self {
        let size = body.len();
        SqsOutgoing { properties, body, size, ..SqsOutgoing::default() }
    }
}

/// What became of a message sent over SQS.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SqsSent {
    /// Stored; a FIFO queue's message with its `SequenceNumber`.
    Stored { sequence_number: Option<u64> },
    /// Dropped: the queue took a message with the same deduplication id within its interval;
    /// that message's `message_id`.
    Duplicate { original: Option<ShortStr>, sequence_number: Option<u64> },
}

impl SqsSent {
    /// The answer's `SequenceNumber` (a FIFO queue's send).
    pub fn sequence_number(&self) -> Option<u64> {
        match self {
            SqsSent::Stored { sequence_number } | SqsSent::Duplicate { sequence_number, .. } => {
                *sequence_number
            }
        }
    }
}

/// Why the queue's SQS settings refuse a message.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SendRefused {
    #[error("the message is longer than the queue's {max} bytes")]
    TooLong { max: usize },
    #[error("a FIFO queue takes no per-message delay")]
    DelayOnFifo,
    #[error("a FIFO queue's message needs a group id")]
    GroupIdMissing,
    #[error("the queue has no content-based deduplication and the message no deduplication id")]
    DeduplicationIdMissing,
    #[error("a standard queue's message takes no deduplication id")]
    DeduplicationIdOnStandard,
}

/// FIFO messages' sequence numbers: increasing across the broker's life and, since they start
/// from the clock, across restarts (as entry ids do, `entry_ids.rs`).
#[derive(Debug, Default)]
pub(crate) struct SequenceNumbers {
    last: u64,
}

impl SequenceNumbers {
    /// The next number at `now`: above every one before, and at least `now` (ms) × 2^16.
    fn next(&mut self, now: Timestamp) -> u64 {
        self.last = (self.last + 1).max(now.as_millis() << 16);
        self.last
    }
}

/// A message shaped by its queue's settings: its properties with the group and FIFO headers,
/// its body, its delay, its sequence number.
struct Shaped {
    properties: EncodedProperties,
    body: Bytes,
    delay_ms: Option<u64>,
    sequence_number: Option<u64>,
}

/// Checks `message` against the queue's SQS settings, as SQS checks a send: its size, and on a
/// FIFO queue a group, a deduplication id (or content-based deduplication) and no delay but 0;
/// on a standard queue no deduplication id.
fn shape(
    settings: &SqsArgs,
    message: SqsOutgoing,
    sequence: &mut SequenceNumbers,
    now: Timestamp,
) -> Result<Shaped, SendRefused> {
    let mut headers = Vec::new();
    let text = |s: &str| FieldValue::LongStr(LongStr::from(s.to_owned()));
    let sequence_number = if settings.fifo {
        if message.delay_ms.is_some_and(|ms| ms != 0) {
            return Err(SendRefused::DelayOnFifo);
        }
        let group = message.group_id.as_deref().ok_or(SendRefused::GroupIdMissing)?;
        let id = match &message.deduplication_id {
            Some(id) => id.clone(),
            None if settings.content_based_deduplication => {
                lower_hex(ring::digest::digest(&ring::digest::SHA256, &message.body).as_ref())
            }
            None => return Err(SendRefused::DeduplicationIdMissing),
        };
        let key = if settings.deduplication_per_group { format!("{group}\u{0}{id}") } else { id.clone() };
        let number = sequence.next(now);
        headers.push((GROUP_HEADER, text(group)));
        headers.push((DEDUPLICATION_HEADER, text(&key)));
        headers.push((DEDUPLICATION_ID_HEADER, text(&id)));
        headers.push((SEQUENCE_HEADER, text(&number.to_string())));
        Some(number)
    } else {
        if message.deduplication_id.is_some() {
            return Err(SendRefused::DeduplicationIdOnStandard);
        }
        headers.extend(message.group_id.as_deref().map(|group| (GROUP_HEADER, text(group))));
        None
    };
    let max = settings.message_size_max();
    if message.size > max {
        return Err(SendRefused::TooLong { max });
    }
    let mut properties = message.properties;
    if !headers.is_empty() {
        let own = properties.headers.take().unwrap_or_default();
        let own = own.iter().map(|(key, value)| (key.as_str().into_owned(), value));
        let added = headers.into_iter().map(|(key, value)| (key.to_owned(), value));
        properties.headers = Some(FieldTable::from_entries(own.chain(added)));
    }
    let properties = EncodedProperties::from(properties);
    Ok(Shaped { properties, body: message.body, delay_ms: message.delay_ms, sequence_number })
}

/// Bytes as lower-case hex, as SQS shows digests.
pub fn lower_hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

impl Broker {
    /// SendMessage: a message into `queue` of `vhost` as the default exchange would route it,
    /// shaped by the queue's SQS settings ([`shape`]), ready after its delay (`None`: the
    /// queue's own `x-delivery-delay`), unless the queue deduplicates and holds its id
    /// (semantics §8). Counted as a publish to the default exchange.
    pub fn sqs_send(
        &mut self,
        vhost: &str,
        queue: &str,
        message: SqsOutgoing,
        now: Timestamp,
    ) -> Result<SqsSent, SqsGatewayError> {
        let (name, id) = self.sqs_queue(vhost, queue)?;
        let settings = self.queues.get(&id).map(|q| q.args.sqs).unwrap_or_default();
        let shaped = shape(&settings, message, &mut self.sqs.sequence_numbers, now)?;
        let message = Arc::new(Message::new(ShortStr::default(), name, shaped.properties, shaped.body));
        if let Some(exchange) = self.vhosts.get(vhost).and_then(|v| v.exchanges.get(&ShortStr::default())) {
            exchange.counters.published(true);
        }
        self.count_published(PublishOutcome::Routed, Confirm::NotRequested, message.body_size());
        // Traced as an AMQP publish is; the publisher is the vhost's gateway connection.
        let gateway = self.firehose.traces(vhost).then(|| self.sqs_gateway(vhost, now));
        let traced = gateway.map(|conn| Traced { vhost, conn, channel: GATEWAY_CHANNEL });
        let sequence_number = shaped.sequence_number;
        match self.enqueue_published(traced, &message, (&[], &[id]), shaped.delay_ms, now) {
            Enqueued::Rejected => Err(SqsGatewayError::QueueFull),
            Enqueued::Duplicate(original) => Ok(SqsSent::Duplicate { original, sequence_number }),
            Enqueued::Accepted => Ok(SqsSent::Stored { sequence_number }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fifo() -> SqsArgs {
        SqsArgs { fifo: true, ..SqsArgs::default() }
    }

    fn message(group: Option<&str>, id: Option<&str>) -> SqsOutgoing {
        SqsOutgoing {
            group_id: group.map(str::to_owned),
            deduplication_id: id.map(str::to_owned),
            ..SqsOutgoing::new(BasicProperties::default(), Bytes::from_static(b"body"))
        }
    }

    fn header(shaped: &Shaped, key: &str) -> Option<String> {
        let value = shaped.properties.headers()?.get(key)?;
        value.as_bytes().map(|b| String::from_utf8_lossy(b).into_owned())
    }

    /// A FIFO send needs a group and a deduplication id (or content-based deduplication), and
    /// takes no delay but 0; a standard send takes no deduplication id. The queue's settings
    /// decide, not the endpoint.
    #[test]
    fn the_queue_s_settings_decide_what_a_send_needs() {
        let (mut numbers, now) = (SequenceNumbers::default(), Timestamp::from_millis(1));
        let refused = |settings: &SqsArgs, m: SqsOutgoing, numbers: &mut SequenceNumbers| {
            shape(settings, m, numbers, now).err()
        };
        assert_eq!(
            refused(&fifo(), message(None, Some("d")), &mut numbers),
            Some(SendRefused::GroupIdMissing)
        );
        assert_eq!(
            refused(&fifo(), message(Some("g"), None), &mut numbers),
            Some(SendRefused::DeduplicationIdMissing)
        );
        let delayed = SqsOutgoing { delay_ms: Some(1000), ..message(Some("g"), Some("d")) };
        assert_eq!(refused(&fifo(), delayed, &mut numbers), Some(SendRefused::DelayOnFifo));
        let no_delay = SqsOutgoing { delay_ms: Some(0), ..message(Some("g"), Some("d")) };
        assert_eq!(refused(&fifo(), no_delay, &mut numbers), None);
        let standard = SqsArgs::default();
        assert_eq!(
            refused(&standard, message(None, Some("d")), &mut numbers),
            Some(SendRefused::DeduplicationIdOnStandard)
        );
        let small = SqsArgs { max_message_size: Some(3), ..SqsArgs::default() };
        assert_eq!(refused(&small, message(None, None), &mut numbers), Some(SendRefused::TooLong { max: 3 }));
        assert_eq!(refused(&standard, message(Some("tenant"), None), &mut numbers), None);
    }

    /// A FIFO message carries its group, its deduplication key (scoped to the group when the
    /// queue says so) and id, and a sequence number that only grows; content-based
    /// deduplication keys it by its body's SHA-256.
    #[test]
    fn a_fifo_message_carries_its_group_deduplication_and_sequence() {
        let mut numbers = SequenceNumbers::default();
        let per_group = SqsArgs { deduplication_per_group: true, ..fifo() };
        let first = shape(&per_group, message(Some("g"), Some("d")), &mut numbers, Timestamp::from_millis(2))
            .unwrap();
        assert_eq!(header(&first, GROUP_HEADER).as_deref(), Some("g"));
        assert_eq!(header(&first, DEDUPLICATION_HEADER).as_deref(), Some("g\u{0}d"));
        assert_eq!(header(&first, DEDUPLICATION_ID_HEADER).as_deref(), Some("d"));
        assert_eq!(first.sequence_number, Some(2 << 16));
        let content = SqsArgs { content_based_deduplication: true, ..fifo() };
        // The clock went back: the number still grows.
        let second =
            shape(&content, message(Some("g"), None), &mut numbers, Timestamp::from_millis(1)).unwrap();
        assert_eq!(second.sequence_number, Some((2 << 16) + 1));
        let sha256_of_body = "230d8358dc8e8890b4c58deeb62912ee2f20357ae92a5cc861b98e68fe31acb5";
        assert_eq!(header(&second, DEDUPLICATION_HEADER).as_deref(), Some(sha256_of_body));
        assert_eq!(header(&second, SEQUENCE_HEADER), Some(((2u64 << 16) + 1).to_string()));
    }
}
