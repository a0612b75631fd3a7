//! What a policy definition may hold (RabbitMQ's rabbit_policies validators). The queue settings
//! are checked by the same code as their `x-` arguments (`QueueSettings::set`); a key RabbitMQ
//! does not know is refused with its "are not recognised policy settings" text.
//!
//! - User policies: every queue setting of semantics §6, and `alternate-exchange` for exchanges.
//! - Operator policies: only the limits RabbitMQ allows there (`expires`, `message-ttl`,
//!   `max-length`, `max-length-bytes`, `delivery-limit`, `overflow`) and Hourglass's time
//!   settings (`delivery-delay`, `visibility-timeout`, `redelivery-delay`, `redelivery-delay-max`).
//! - Keys stock RabbitMQ 3.13 accepts for features Hourglass has no use for (classic mirroring
//!   on a single node, queue versions, quorum and stream tuning) are accepted so RabbitMQ's
//!   definitions import, and have no effect; their values are not checked.

use hourglass_wire::{FieldTable, FieldValue, ShortStr};

use super::PolicyKind;
use crate::queue::{QueueSettings, RetryConflict, SettingError};

/// Queue settings an operator policy may not set: RabbitMQ keeps operator policies to limits.
const USER_ONLY_SETTINGS: &[&str] =
    &["dead-letter-exchange", "dead-letter-routing-key", "consumer-timeout", "delayed-retry-multiplier"];

/// RabbitMQ 3.13's other user-policy keys: accepted, without effect here.
const USER_KEYS_WITHOUT_EFFECT: &[&str] = &[
    "ha-mode",
    "ha-params",
    "ha-sync-mode",
    "ha-sync-batch-size",
    "ha-promote-on-shutdown",
    "ha-promote-on-failure",
    "queue-mode",
    "queue-version",
    "queue-leader-locator",
    "initial-cluster-size",
    "target-group-size",
    "dead-letter-strategy",
    "max-in-memory-length",
    "max-in-memory-bytes",
    "max-age",
    "stream-max-segment-size-bytes",
];

/// RabbitMQ 3.13's other operator-policy keys: accepted, without effect here.
const OPERATOR_KEYS_WITHOUT_EFFECT: &[&str] =
    &["max-in-memory-length", "max-in-memory-bytes", "queue-version", "target-group-size"];

/// A checked definition.
#[derive(Debug, Default)]
pub(super) struct Definition {
    pub queue: QueueSettings,
    pub alternate_exchange: Option<ShortStr>,
}

/// Checks a definition for a policy of `kind`; the error is RabbitMQ's reason text.
pub(super) fn parse(kind: PolicyKind, table: &FieldTable) -> Result<Definition, String> {
    if table.is_empty() {
        return Err("no policy provided".to_owned());
    }
    let mut definition = Definition::default();
    let mut unrecognised = Vec::new();
    for (key, value) in table.iter() {
        let key = key.as_str();
        let key: &str = key.as_ref();
        let without_effect = match kind {
            PolicyKind::User => USER_KEYS_WITHOUT_EFFECT,
            PolicyKind::Operator => OPERATOR_KEYS_WITHOUT_EFFECT,
        };
        if without_effect.contains(&key) {
            continue;
        }
        if key == "alternate-exchange" && kind == PolicyKind::User {
            let name = value.as_bytes().and_then(|b| ShortStr::new(bytes::Bytes::copy_from_slice(b)).ok());
            let name =
                name.ok_or_else(|| format!("{} is not a valid alternate exchange name", term(&value)))?;
            definition.alternate_exchange = Some(name);
            continue;
        }
        if kind == PolicyKind::Operator && USER_ONLY_SETTINGS.contains(&key) {
            unrecognised.push(format!("{{<<\"{key}\">>,{}}}", term(&value)));
            continue;
        }
        match definition.queue.set(key, &value) {
            Ok(true) => {}
            Ok(false) => unrecognised.push(format!("{{<<\"{key}\">>,{}}}", term(&value))),
            Err(SettingError::WrongType) => {
                return Err(format!("{} is not a valid {}", term(&value), described(key)))
            }
            Err(SettingError::Invalid(why)) => {
                return Err(format!("{} is not a valid {}: {why}", term(&value), described(key)))
            }
        }
    }
    if !unrecognised.is_empty() {
        return Err(format!("[{}] are not recognised policy settings", unrecognised.join(",")));
    }
    // In RabbitMQ 4.3's words (rabbit_quorum_queue:validate_delayed_retry_constraints).
    match definition.queue.delayed_retry_conflict() {
        Some(RetryConflict::MinMissing(kind)) => {
            return Err(format!("delayed-retry-min is required when delayed-retry-type is {}", kind.name()))
        }
        Some(RetryConflict::MaxBelowMin { min, max }) => {
            return Err(format!(
                "delayed-retry-max ({max}) must not be smaller than delayed-retry-min ({min})"
            ))
        }
        None => {}
    }
    Ok(definition)
}

/// How RabbitMQ's validators name each setting in their errors.
fn described(key: &str) -> &str {
    match key {
        "message-ttl" => "message TTL",
        "expires" => "queue expiry",
        "max-length" => "maximum length",
        "max-length-bytes" => "maximum length in bytes",
        "dead-letter-exchange" => "dead letter exchange name",
        "dead-letter-routing-key" => "dead letter routing key",
        "overflow" => "overflow value",
        "delivery-limit" => "delivery limit",
        "delivery-delay" => "delivery delay",
        "visibility-timeout" => "visibility timeout",
        "consumer-timeout" => "consumer timeout",
        "redelivery-delay" => "redelivery delay",
        "redelivery-delay-max" => "maximum redelivery delay",
        "delayed-retry-type" => "delayed retry type",
        "delayed-retry-min" => "delayed retry minimum delay",
        "delayed-retry-max" => "delayed retry maximum delay",
        "delayed-retry-multiplier" => "delayed retry multiplier",
        other => other,
    }
}

/// A value as RabbitMQ's errors print it (Erlang terms: `<<"text">>` for strings).
fn term(value: &FieldValue) -> String {
    match value {
        FieldValue::LongStr(_) | FieldValue::ByteArray(_) => {
            let text = value.as_bytes().map(String::from_utf8_lossy).unwrap_or_default();
            format!("<<\"{text}\">>")
        }
        FieldValue::Bool(b) => b.to_string(),
        FieldValue::F32(f) => f.to_string(),
        FieldValue::F64(f) => f.to_string(),
        FieldValue::Void => "null".to_owned(),
        other => other.as_i64().map_or_else(|| format!("{other:?}"), |i| i.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use hourglass_wire::FieldValue;

    use super::*;

    fn table(entries: &[(&str, FieldValue)]) -> FieldTable {
        FieldTable::from_entries(entries.iter().cloned())
    }

    fn text(s: &str) -> FieldValue {
        FieldValue::LongStr(s.into())
    }

    /// Values are checked by the queue arguments' own rules, named as RabbitMQ names them.
    #[test]
    fn values_are_checked_like_queue_arguments() {
        let ok = parse(PolicyKind::User, &table(&[("message-ttl", FieldValue::I64(1000))])).unwrap();
        assert_eq!(ok.queue.message_ttl_ms, Some(1000));
        let err = parse(PolicyKind::User, &table(&[("message-ttl", FieldValue::I64(-1))])).unwrap_err();
        assert_eq!(err, "-1 is not a valid message TTL: {value_negative,-1}");
        let err = parse(PolicyKind::User, &table(&[("message-ttl", text("5"))])).unwrap_err();
        assert!(err.starts_with("<<\"5\">> is not a valid message TTL"), "{err}");
        let err = parse(PolicyKind::User, &table(&[("visibility-timeout", FieldValue::I64(10))]));
        assert!(err.unwrap_err().contains("value_out_of_range"));
        let err = parse(PolicyKind::User, &table(&[("overflow", text("drop-tail"))])).unwrap_err();
        assert!(err.starts_with("<<\"drop-tail\">> is not a valid overflow value"), "{err}");
    }

    /// Unknown keys are refused with RabbitMQ's text; an empty definition too.
    #[test]
    fn unknown_keys_and_empty_definitions_are_refused() {
        let err =
            parse(PolicyKind::User, &table(&[("foo", FieldValue::I64(1)), ("expires", FieldValue::I64(5))]));
        assert_eq!(err.unwrap_err(), "[{<<\"foo\">>,1}] are not recognised policy settings");
        assert_eq!(parse(PolicyKind::User, &FieldTable::new()).unwrap_err(), "no policy provided");
    }

    /// Operator policies hold only limits (RabbitMQ) and our time settings; no dead-lettering.
    #[test]
    fn operator_policies_take_limits_only() {
        let ok = parse(
            PolicyKind::Operator,
            &table(&[("max-length", FieldValue::I64(5)), ("delivery-delay", FieldValue::I64(10))]),
        )
        .unwrap();
        assert_eq!((ok.queue.max_length, ok.queue.delivery_delay_ms), (Some(5), Some(10)));
        let err = parse(PolicyKind::Operator, &table(&[("dead-letter-exchange", text("dlx"))])).unwrap_err();
        assert_eq!(err, "[{<<\"dead-letter-exchange\">>,<<\"dlx\">>}] are not recognised policy settings");
        assert!(parse(PolicyKind::Operator, &table(&[("alternate-exchange", text("ae"))])).is_err());
    }

    /// RabbitMQ keys without an effect here are accepted, so exported definitions import.
    #[test]
    fn rabbitmq_keys_without_effect_are_accepted() {
        let ok =
            parse(PolicyKind::User, &table(&[("ha-mode", text("all")), ("alternate-exchange", text("ae"))]));
        assert_eq!(
            ok.unwrap().alternate_exchange.as_ref().map(|s| s.as_str().into_owned()),
            Some("ae".into())
        );
    }
}
