//! A queue's SQS settings (docs/sqs.md), parsed once with its other arguments (`args.rs`): the
//! `x-sqs-*` arguments the SQS endpoint writes for a queue's attributes and the gateway
//! (`admin/sqs_gateway.rs`, `admin/sqs_send.rs`) acts on. Nothing re-reads the raw table per
//! request.
//!
//! Only `x-sqs-fifo` is refused when malformed (it decides how a queue orders its receives, for
//! AMQP consumers too). The others are read as the SQS endpoint always read them, refusing
//! nothing: a value it would not have used counts as absent, so a queue declared with an odd one
//! before they were parsed here is still restored.

use hourglass_wire::FieldValue;

/// SQS's largest message (and its `MaximumMessageSize` default, AWS's since August 2025):
/// 1 MiB, body and message attributes together.
pub const SQS_MESSAGE_SIZE_MAX: usize = 1 << 20;

/// The `x-sqs-*` settings a queue was made or changed with over SQS.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SqsArgs {
    /// `x-sqs-fifo` (an SQS FIFO queue): the SQS endpoint receives a message group only while
    /// none of its messages is in flight, so each group is received in order
    /// (`queue/message_groups.rs`), and sends name a group and a deduplication id. Fixed for the
    /// queue's life.
    pub fifo: bool,
    /// `x-sqs-visibility-timeout` 0 (an SQS `VisibilityTimeout` of 0, which
    /// `x-visibility-timeout` cannot hold): SQS receives are visible again at once.
    pub zero_visibility: bool,
    /// `x-sqs-receive-message-wait-time-seconds`: how long an SQS receive waits by default.
    pub receive_wait_s: Option<u64>,
    /// `x-sqs-maximum-message-size` (`MaximumMessageSize`): the largest message a send may
    /// carry, body and attributes together, at most [`SQS_MESSAGE_SIZE_MAX`].
    pub max_message_size: Option<usize>,
    /// `x-sqs-content-based-deduplication`: a FIFO send without a `MessageDeduplicationId` is
    /// deduplicated by its body's SHA-256.
    pub content_based_deduplication: bool,
    /// `x-sqs-deduplication-scope` `messageGroup`: a deduplication id is a duplicate only within
    /// its message group.
    pub deduplication_per_group: bool,
}

impl SqsArgs {
    /// Takes `key`'s value if it is an SQS setting: `Ok(true)`; `Ok(false)` for any other key.
    /// Only a malformed `x-sqs-fifo` is refused (the reason).
    pub fn read(&mut self, key: &str, value: &FieldValue) -> Result<bool, String> {
        match key {
            "x-sqs-fifo" => self.fifo = super::args::bool_arg(value)?,
            "x-sqs-visibility-timeout" => self.zero_visibility = value.as_i64() == Some(0),
            "x-sqs-receive-message-wait-time-seconds" => {
                self.receive_wait_s = value.as_i64().and_then(|s| u64::try_from(s).ok())
            }
            "x-sqs-maximum-message-size" => {
                self.max_message_size =
                    value.as_i64().map(|n| usize::try_from(n).unwrap_or(0).min(SQS_MESSAGE_SIZE_MAX))
            }
            "x-sqs-content-based-deduplication" => {
                self.content_based_deduplication = *value == FieldValue::Bool(true)
            }
            "x-sqs-deduplication-scope" => {
                self.deduplication_per_group = value.as_bytes() == Some(b"messageGroup")
            }
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// The largest message a send may carry.
    pub fn message_size_max(&self) -> usize {
        self.max_message_size.unwrap_or(SQS_MESSAGE_SIZE_MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(entries: &[(&str, FieldValue)]) -> SqsArgs {
        let mut args = SqsArgs::default();
        for (key, value) in entries {
            assert_eq!(args.read(key, value), Ok(true), "{key}");
        }
        args
    }

    /// The settings a receive and a send act on are read once, refusing nothing but a malformed
    /// `x-sqs-fifo`: a value the SQS endpoint would not have used is as absent, as it always
    /// was, so a queue declared with one is still restored.
    #[test]
    fn sqs_settings_are_read_and_never_refused_but_fifo() {
        let args = read(&[
            ("x-sqs-visibility-timeout", FieldValue::I64(0)),
            ("x-sqs-receive-message-wait-time-seconds", FieldValue::I32(5)),
            ("x-sqs-maximum-message-size", FieldValue::I64(2048)),
            ("x-sqs-content-based-deduplication", FieldValue::Bool(true)),
            ("x-sqs-deduplication-scope", FieldValue::from("messageGroup")),
        ]);
        assert_eq!((args.zero_visibility, args.receive_wait_s), (true, Some(5)));
        assert_eq!(args.message_size_max(), 2048);
        assert!(args.content_based_deduplication && args.deduplication_per_group);
        let odd = read(&[
            ("x-sqs-visibility-timeout", FieldValue::I64(7)),
            ("x-sqs-receive-message-wait-time-seconds", FieldValue::from("soon")),
            ("x-sqs-maximum-message-size", FieldValue::I64(1 << 30)),
            ("x-sqs-content-based-deduplication", FieldValue::from("true")),
            ("x-sqs-deduplication-scope", FieldValue::from("queue")),
        ]);
        assert_eq!((odd.zero_visibility, odd.receive_wait_s), (false, None));
        assert_eq!(odd.message_size_max(), SQS_MESSAGE_SIZE_MAX);
        assert!(!odd.content_based_deduplication && !odd.deduplication_per_group);
        assert_eq!(
            read(&[("x-sqs-receive-message-wait-time-seconds", FieldValue::I64(-1))]).receive_wait_s,
            None
        );
        assert!(SqsArgs::default().read("x-sqs-fifo", &FieldValue::from("yes")).is_err());
        assert_eq!(SqsArgs::default().read("x-message-ttl", &FieldValue::I64(1)), Ok(false));
    }
}
