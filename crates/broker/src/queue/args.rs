//! `x-` arguments of queue.declare, parsed once into a typed `QueueArgs` (contract.md
//! "Conventions"; RabbitMQ's rabbit_amqqueue:declare_args/0). Nothing after `QueueArgs::parse`
//! reads the raw table, except the redeclare equivalence check, which compares raw values.

use hourglass_wire::{FieldTable, FieldValue, ShortStr};

use crate::api::AmqpError;
use crate::errors;

/// The largest time argument accepted: 10 years in milliseconds, as RabbitMQ (contract.md).
pub const MAX_TIME_MS: u64 = 315_360_000_000;
/// The highest `x-max-priority` RabbitMQ accepts.
pub const MAX_PRIORITY: u8 = 255;

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
    "x-dead-letter-strategy",
    "x-delivery-delay",
    "x-visibility-timeout",
    "x-redelivery-delay",
    "x-redelivery-delay-max",
];

/// Typed queue arguments.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct QueueArgs {
    pub queue_type: QueueType,
    /// `x-message-ttl`: how long a message may stay ready.
    pub message_ttl_ms: Option<u64>,
    /// `x-expires`: the queue is deleted after this long unused.
    pub expires_ms: Option<u64>,
    pub dead_letter_exchange: Option<ShortStr>,
    pub dead_letter_routing_key: Option<ShortStr>,
    pub dead_letter_strategy: DeadLetterStrategy,
    /// `x-max-length`: ready messages at most.
    pub max_length: Option<u64>,
    /// `x-max-length-bytes`: ready body bytes at most.
    pub max_length_bytes: Option<u64>,
    pub overflow: Overflow,
    /// `x-delivery-delay`: every message entering the queue waits this long (contract §3).
    pub delivery_delay_ms: Option<u64>,
    /// `x-visibility-timeout`: unsettled deliveries come back after this long (contract §4).
    pub visibility_timeout_ms: Option<u64>,
    /// `x-delivery-limit`: failed deliveries allowed before dead-lettering (contract §5).
    pub delivery_limit: Option<u64>,
    /// `x-redelivery-delay` / `x-redelivery-delay-max`: back-off for returning messages (contract §5).
    pub redelivery_delay_ms: Option<u64>,
    pub redelivery_delay_max_ms: Option<u64>,
    /// `x-single-active-consumer`: one consumer at a time gets messages, the others wait.
    pub single_active_consumer: bool,
    /// `x-max-priority`: a priority queue with levels 0 ..= this.
    pub max_priority: Option<u8>,
}

#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub enum QueueType {
    #[default]
    Classic,
    Quorum,
}

/// What happens when a publish would exceed `x-max-length` / `x-max-length-bytes`.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub enum Overflow {
    /// Drop (dead-letter, reason `maxlen`) the oldest ready messages.
    #[default]
    DropHead,
    /// Refuse the new message; the publisher gets basic.nack in confirm mode.
    RejectPublish,
    /// Refuse it and dead-letter it (reason `maxlen`).
    RejectPublishDlx,
}

/// `x-dead-letter-strategy` (quorum queues). Hourglass dead-letters at least once either way.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub enum DeadLetterStrategy {
    #[default]
    AtMostOnce,
    AtLeastOnce,
}

impl QueueArgs {
    /// Parses and validates queue.declare arguments for queue `queue` in `vhost`.
    pub fn parse(
        table: &FieldTable,
        queue: &str,
        vhost: &str,
        durable: bool,
    ) -> Result<QueueArgs, AmqpError> {
        let invalid = |key: &str, why: String| {
            errors::precondition_failed(format!(
                "invalid arg '{key}' for queue '{queue}' in vhost '{vhost}': {why}"
            ))
        };
        let invalid_type = |key: &str, value: &FieldValue| {
            errors::precondition_failed(format!(
                "invalid type '{}' for arg '{key}' in queue '{queue}' in vhost '{vhost}'",
                value.type_name()
            ))
        };
        let mut args = QueueArgs::default();
        for (key, value) in table.iter() {
            let key = key.as_str();
            let key = key.as_ref();
            match key {
                "x-queue-type" => {
                    args.queue_type = match value.as_bytes() {
                        Some(b"classic") => QueueType::Classic,
                        Some(b"quorum") => QueueType::Quorum,
                        _ => return Err(invalid(key, unsupported("queue type", &value))),
                    }
                }
                // Accepted for compatibility; every Hourglass queue keeps an index in memory.
                "x-queue-mode" if !matches!(value.as_bytes(), Some(b"default" | b"lazy")) => {
                    return Err(invalid(key, unsupported("queue mode", &value)));
                }
                "x-max-priority" => {
                    let max = count_arg(&value).map_err(|w| invalid(key, w))?;
                    if max > u64::from(MAX_PRIORITY) {
                        return Err(invalid(key, format!("{{max_value_exceeded,{max}}}")));
                    }
                    args.max_priority = Some(max as u8);
                }
                "x-single-active-consumer" => match value {
                    FieldValue::Bool(on) => args.single_active_consumer = on,
                    other => {
                        return Err(invalid(key, format!("{{unacceptable_type,{}}}", other.type_name())))
                    }
                },
                "x-message-ttl" => {
                    args.message_ttl_ms = Some(time_arg(&value, 0).map_err(|w| invalid(key, w))?)
                }
                "x-expires" => args.expires_ms = Some(time_arg(&value, 1).map_err(|w| invalid(key, w))?),
                "x-delivery-delay" => {
                    args.delivery_delay_ms = Some(time_arg(&value, 0).map_err(|w| invalid(key, w))?)
                }
                "x-visibility-timeout" => {
                    let ms = count_arg(&value).and_then(super::visibility::check_range);
                    args.visibility_timeout_ms = Some(ms.map_err(|w| invalid(key, w))?)
                }
                "x-delivery-limit" => {
                    let limit = count_arg(&value).map_err(|w| invalid(key, w))?;
                    if limit == 0 {
                        return Err(invalid(key, "{value_zero,0}".to_owned()));
                    }
                    args.delivery_limit = Some(limit)
                }
                "x-redelivery-delay" => {
                    args.redelivery_delay_ms = Some(time_arg(&value, 0).map_err(|w| invalid(key, w))?)
                }
                "x-redelivery-delay-max" => {
                    args.redelivery_delay_max_ms = Some(time_arg(&value, 0).map_err(|w| invalid(key, w))?)
                }
                "x-max-length" => args.max_length = Some(count_arg(&value).map_err(|w| invalid(key, w))?),
                "x-max-length-bytes" => {
                    args.max_length_bytes = Some(count_arg(&value).map_err(|w| invalid(key, w))?)
                }
                "x-dead-letter-exchange" => {
                    args.dead_letter_exchange =
                        Some(short_string_arg(&value).map_err(|_| invalid_type(key, &value))?)
                }
                "x-dead-letter-routing-key" => {
                    args.dead_letter_routing_key =
                        Some(short_string_arg(&value).map_err(|_| invalid_type(key, &value))?)
                }
                "x-overflow" => {
                    args.overflow = match value.as_bytes() {
                        Some(b"drop-head") => Overflow::DropHead,
                        Some(b"reject-publish") => Overflow::RejectPublish,
                        Some(b"reject-publish-dlx") => Overflow::RejectPublishDlx,
                        _ => return Err(invalid(key, "invalid_overflow".to_owned())),
                    }
                }
                "x-dead-letter-strategy" => {
                    args.dead_letter_strategy = match value.as_bytes() {
                        Some(b"at-most-once") => DeadLetterStrategy::AtMostOnce,
                        Some(b"at-least-once") => DeadLetterStrategy::AtLeastOnce,
                        _ => return Err(invalid(key, unsupported("dead letter strategy", &value))),
                    }
                }
                _ => {}
            }
        }
        if let Some(max) = args.redelivery_delay_max_ms {
            match args.redelivery_delay_ms {
                None => {
                    return Err(invalid("x-redelivery-delay-max", "requires x-redelivery-delay".to_owned()))
                }
                Some(delay) if max < delay => {
                    return Err(invalid(
                        "x-redelivery-delay-max",
                        format!("{{less_than_delay,{max},{delay}}}"),
                    ))
                }
                _ => {}
            }
        }
        if args.dead_letter_routing_key.is_some() && args.dead_letter_exchange.is_none() {
            return Err(invalid("x-dead-letter-routing-key", "routing_key_but_no_dlx_defined".to_owned()));
        }
        if args.queue_type == QueueType::Quorum {
            // RabbitMQ: a quorum queue is durable, and does not support reject-publish-dlx.
            if !durable {
                return Err(errors::precondition_failed(format!(
                    "invalid property 'non-durable' for queue '{queue}' in vhost '{vhost}'"
                )));
            }
            if args.overflow == Overflow::RejectPublishDlx {
                return Err(invalid(
                    "x-overflow",
                    "reject-publish-dlx is not supported by quorum queues".to_owned(),
                ));
            }
        }
        Ok(args)
    }
}

/// A time in ms: any AMQP integer type, at least `min`, at most 10 years.
pub(crate) fn time_arg(value: &FieldValue, min: i64) -> Result<u64, String> {
    let ms = integer_arg(value)?;
    if ms < 0 {
        return Err(format!("{{value_negative,{ms}}}"));
    }
    if ms < min {
        return Err(format!("{{value_zero,{ms}}}"));
    }
    let ms = ms as u64;
    if ms > MAX_TIME_MS {
        return Err(format!("{{value_too_large,{ms}}}"));
    }
    Ok(ms)
}

/// A non-negative count: any AMQP integer type.
pub(crate) fn count_arg(value: &FieldValue) -> Result<u64, String> {
    let n = integer_arg(value)?;
    u64::try_from(n).map_err(|_| format!("{{value_negative,{n}}}"))
}

/// Any AMQP integer type (contract.md: signed or unsigned, 8 to 64 bit).
fn integer_arg(value: &FieldValue) -> Result<i64, String> {
    match value {
        FieldValue::I8(_)
        | FieldValue::U8(_)
        | FieldValue::I16(_)
        | FieldValue::U16(_)
        | FieldValue::I32(_)
        | FieldValue::U32(_)
        | FieldValue::I64(_) => value.as_i64().ok_or_else(|| unacceptable(value)),
        _ => Err(unacceptable(value)),
    }
}

fn short_string_arg(value: &FieldValue) -> Result<ShortStr, String> {
    let bytes = value.as_bytes().ok_or_else(|| unacceptable(value))?;
    ShortStr::new(bytes::Bytes::copy_from_slice(bytes)).map_err(|_| "{value_too_long}".to_owned())
}

/// RabbitMQ's text for a non-integer where an integer belongs.
fn unacceptable(value: &FieldValue) -> String {
    format!("\"expected integer, got {}\"", value.type_name())
}

/// RabbitMQ's text for an unknown enumerated value, e.g. `"unsupported queue type 'banana'"`.
fn unsupported(what: &str, value: &FieldValue) -> String {
    let shown = value
        .as_bytes()
        .map(|b| String::from_utf8_lossy(b).into_owned())
        .unwrap_or_else(|| format!("{value:?}"));
    format!("\"unsupported {what} '{shown}'\"")
}

/// Compares the arguments RabbitMQ holds equivalent on redeclare; names the first that differs.
pub(crate) fn first_inequivalent(current: &FieldTable, received: &FieldTable) -> Option<&'static str> {
    EQUIVALENCE_KEYS.iter().copied().find(|key| current.get(key) != received.get(key))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(entries: &[(&str, FieldValue)]) -> Result<QueueArgs, AmqpError> {
        QueueArgs::parse(&FieldTable::from_entries(entries.iter().cloned()), "q", "/", true)
    }

    /// A quorum queue must be durable, as in RabbitMQ (contract §2 "a quorum queue must be durable").
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

    /// Time arguments take any integer type (contract "Conventions").
    #[test]
    fn time_arguments_accept_every_integer_width() {
        for value in [FieldValue::U8(5), FieldValue::I16(5), FieldValue::U32(5), FieldValue::I64(5)] {
            assert_eq!(parse(&[("x-message-ttl", value)]).unwrap().message_ttl_ms, Some(5));
        }
    }

    /// A negative TTL is refused with 406 and RabbitMQ's text naming the argument (contract "Conventions").
    #[test]
    fn negative_ttl_is_refused_with_the_argument_named() {
        let err = parse(&[("x-message-ttl", FieldValue::I32(-1))]).unwrap_err();
        assert_eq!(err.reply_code, 406);
        assert_eq!(
            err.reply_text,
            "PRECONDITION_FAILED - invalid arg 'x-message-ttl' for queue 'q' in vhost '/': {value_negative,-1}"
        );
    }

    /// Wrong types and values above ten years are refused (contract "Conventions", §1).
    #[test]
    fn wrong_type_and_too_large_are_refused() {
        let err = parse(&[("x-message-ttl", FieldValue::LongStr("100".into()))]).unwrap_err();
        assert!(err.reply_text.ends_with("\"expected integer, got longstr\""), "{}", err.reply_text);
        assert!(parse(&[("x-expires", FieldValue::I64(MAX_TIME_MS as i64))]).is_ok());
        let err = parse(&[("x-expires", FieldValue::I64(MAX_TIME_MS as i64 + 1))]).unwrap_err();
        assert!(err.reply_text.contains("'x-expires'"));
    }

    /// x-expires must be positive (contract §1 "x-expires (> 0)"); x-message-ttl may be 0.
    #[test]
    fn zero_expires_is_refused_but_zero_ttl_is_fine() {
        assert!(parse(&[("x-expires", FieldValue::I32(0))]).is_err());
        assert_eq!(parse(&[("x-message-ttl", FieldValue::I32(0))]).unwrap().message_ttl_ms, Some(0));
    }

    /// A dead-letter routing key needs a dead-letter exchange, as in RabbitMQ.
    #[test]
    fn routing_key_without_dlx_is_refused() {
        let err = parse(&[("x-dead-letter-routing-key", FieldValue::LongStr("k".into()))]).unwrap_err();
        assert!(err.reply_text.ends_with("routing_key_but_no_dlx_defined"));
    }

    /// x-overflow takes RabbitMQ's three values; reject-publish-dlx is not for quorum queues.
    #[test]
    fn overflow_values() {
        let ok = parse(&[("x-overflow", FieldValue::LongStr("reject-publish-dlx".into()))]).unwrap();
        assert_eq!(ok.overflow, Overflow::RejectPublishDlx);
        assert!(parse(&[("x-overflow", FieldValue::LongStr("drop-tail".into()))]).is_err());
        let quorum = parse(&[
            ("x-queue-type", FieldValue::LongStr("quorum".into())),
            ("x-overflow", FieldValue::LongStr("reject-publish-dlx".into())),
        ]);
        assert!(quorum.is_err());
    }
}
