//! `x-` arguments of queue.declare, parsed once into a typed `QueueArgs` (rules: contract.md
//! "Conventions"; RabbitMQ's rabbit_amqqueue:declare_args/0). Nothing after `QueueArgs::parse`
//! reads the raw table, except the redeclare equivalence check, which compares raw values.

use hourglass_wire::{FieldTable, FieldValue};

use crate::api::AmqpError;
use crate::errors;

/// Arguments whose values must match when a queue is redeclared (RabbitMQ compares these and
/// ignores the rest).
pub(crate) const EQUIVALENCE_KEYS: &[&str] = &[
    "x-expires",
    "x-message-ttl",
    "x-dead-letter-exchange",
    "x-dead-letter-routing-key",
    "x-max-length",
    "x-max-length-bytes",
    "x-max-priority",
    "x-overflow",
    "x-queue-mode",
    "x-queue-type",
    "x-delivery-limit",
    "x-single-active-consumer",
];

/// Typed queue arguments.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct QueueArgs {
    pub queue_type: QueueType,
}

#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub enum QueueType {
    #[default]
    Classic,
    Quorum,
}

impl QueueArgs {
    /// Parses and validates queue.declare arguments for queue `queue` in `vhost`.
    pub fn parse(
        table: &FieldTable,
        queue: &str,
        vhost: &str,
        durable: bool,
    ) -> Result<QueueArgs, AmqpError> {
        let mut args = QueueArgs::default();
        if let Some(value) = table.get("x-queue-type") {
            args.queue_type = match value.as_bytes() {
                Some(b"classic") => QueueType::Classic,
                Some(b"quorum") => QueueType::Quorum,
                _ => {
                    return Err(errors::precondition_failed(format!(
                        "invalid arg 'x-queue-type' for queue '{queue}' in vhost '{vhost}': {}",
                        describe(&value)
                    )))
                }
            };
        }
        if args.queue_type == QueueType::Quorum && !durable {
            return Err(errors::precondition_failed(format!(
                "invalid property 'non-durable' for queue '{queue}' in vhost '{vhost}'"
            )));
        }
        Ok(args)
    }
}

/// Compares the arguments RabbitMQ holds equivalent on redeclare; names the first that differs.
pub(crate) fn first_inequivalent<'a>(current: &FieldTable, received: &FieldTable) -> Option<&'a str> {
    EQUIVALENCE_KEYS.iter().copied().find(|key| current.get(key) != received.get(key))
}

/// A value as RabbitMQ's error texts show it.
pub(crate) fn describe(value: &FieldValue) -> String {
    match value.as_bytes() {
        Some(bytes) => format!("{{unknown_type,<<\"{}\">>}}", String::from_utf8_lossy(bytes)),
        None => format!("{value:?}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A quorum queue must be durable, as in RabbitMQ.
    #[test]
    fn non_durable_quorum_queue_is_refused() {
        let table = FieldTable::from_entries([("x-queue-type", FieldValue::LongStr("quorum".into()))]);
        let err = QueueArgs::parse(&table, "q", "/", false).unwrap_err();
        assert_eq!(err.reply_code, 406);
        assert!(QueueArgs::parse(&table, "q", "/", true).is_ok());
    }

    /// Only the arguments RabbitMQ compares on redeclare make two declarations inequivalent.
    #[test]
    fn equivalence_ignores_unknown_arguments() {
        let a = FieldTable::from_entries([("x-custom", FieldValue::I32(1))]);
        let b = FieldTable::from_entries([("x-custom", FieldValue::I32(2))]);
        assert_eq!(first_inequivalent(&a, &b), None);
        let c = FieldTable::from_entries([("x-max-length", FieldValue::I32(2))]);
        assert_eq!(first_inequivalent(&a, &c), Some("x-max-length"));
    }
}
