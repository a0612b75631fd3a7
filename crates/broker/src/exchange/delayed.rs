//! The delayed exchange (semantics §3): type `x-delayed-message` routing as its `x-delayed-type`,
//! and the `x-delay` header read as rabbitmq-delayed-message-exchange reads it.

use hourglass_wire::{FieldTable, FieldValue};

use super::ExchangeKind;
use crate::api::AmqpError;
use crate::errors;
use crate::queue::args::MAX_TIME_MS;

pub(crate) const TYPE_NAME: &str = "x-delayed-message";

/// The routing type of an `x-delayed-message` exchange: its `x-delayed-type` argument, one of
/// direct, fanout, topic, headers (missing or unknown: 406, as the plugin).
pub(crate) fn routing_kind(arguments: &FieldTable) -> Result<ExchangeKind, AmqpError> {
    arguments.get("x-delayed-type").and_then(|v| v.as_bytes().and_then(ExchangeKind::parse)).ok_or_else(
        || {
            errors::precondition_failed(
                "Invalid argument, 'x-delayed-type' must be an existing exchange type",
            )
        },
    )
}

/// The delay an `x-delay` header asks for: integers of any width, whole-number strings
/// (optionally signed) and floats (truncated); absent, <= 0 or anything else is no delay;
/// beyond 10 years is a 406.
pub(crate) fn delay_ms(headers: Option<&FieldTable>, header: &str) -> Result<Option<u64>, AmqpError> {
    let Some(value) = headers.and_then(|h| h.get(header)) else { return Ok(None) };
    let requested: Option<f64> = match &value {
        FieldValue::F32(f) => Some(f64::from(*f).trunc()),
        FieldValue::F64(f) => Some(f.trunc()),
        FieldValue::LongStr(s) => whole_number(s.as_bytes()).map(|n| n as f64),
        other => other.as_i64().map(|n| n as f64),
    };
    match requested {
        Some(ms) if ms.is_nan() || ms <= 0.0 => Ok(None),
        Some(ms) if ms > MAX_TIME_MS as f64 => Err(errors::precondition_failed(format!(
            "invalid {header} {ms}: larger than the maximum delay of {MAX_TIME_MS} ms"
        ))),
        Some(ms) => Ok(Some(ms as u64)),
        None => Ok(None),
    }
}

/// `x-delay` as it reads on delivery: the negative of the delay, as the plugin writes it.
pub(crate) fn delivered_header(delay_ms: u64) -> FieldValue {
    let negative = -(delay_ms as i64);
    match i32::try_from(negative) {
        Ok(small) => FieldValue::I32(small),
        Err(_) => FieldValue::I64(negative),
    }
}

fn whole_number(text: &[u8]) -> Option<i64> {
    std::str::from_utf8(text).ok()?.trim().parse::<i64>().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn delay(value: FieldValue) -> Result<Option<u64>, AmqpError> {
        delay_ms(Some(&FieldTable::from_entries([("x-delay", value)])), "x-delay")
    }

    /// semantics §3: integers of any width, numeric strings and floats are read; floats truncate.
    #[test]
    fn x_delay_reads_integers_strings_and_floats() {
        assert_eq!(delay(FieldValue::U8(200)).unwrap(), Some(200));
        assert_eq!(delay(FieldValue::I64(5_000)).unwrap(), Some(5_000));
        assert_eq!(delay(FieldValue::LongStr("1500".into())).unwrap(), Some(1_500));
        assert_eq!(delay(FieldValue::LongStr("+1500".into())).unwrap(), Some(1_500));
        assert_eq!(delay(FieldValue::F64(99.9)).unwrap(), Some(99));
        assert_eq!(delay(FieldValue::F32(2.5)).unwrap(), Some(2));
    }

    /// semantics §3: absent, <= 0 or unreadable is no delay.
    #[test]
    fn x_delay_absent_non_positive_or_unreadable_is_no_delay() {
        assert_eq!(delay_ms(None, "x-delay").unwrap(), None);
        assert_eq!(delay(FieldValue::I32(0)).unwrap(), None);
        assert_eq!(delay(FieldValue::I32(-100)).unwrap(), None);
        assert_eq!(delay(FieldValue::LongStr("-5".into())).unwrap(), None);
        assert_eq!(delay(FieldValue::LongStr("soon".into())).unwrap(), None);
        assert_eq!(delay(FieldValue::LongStr("1.5".into())).unwrap(), None);
        assert_eq!(delay(FieldValue::Bool(true)).unwrap(), None);
        assert_eq!(delay(FieldValue::F64(f64::NAN)).unwrap(), None);
    }

    /// semantics §3: beyond ten years is a 406; beyond the plugin's 2^32-1 ms is honoured.
    #[test]
    fn x_delay_limits() {
        assert_eq!(delay(FieldValue::I64(1 << 33)).unwrap(), Some(1 << 33));
        assert_eq!(delay(FieldValue::I64(MAX_TIME_MS as i64)).unwrap(), Some(MAX_TIME_MS));
        assert_eq!(delay(FieldValue::I64(MAX_TIME_MS as i64 + 1)).unwrap_err().reply_code, 406);
    }

    /// semantics §3: x-delayed-type must name a routing type.
    #[test]
    fn delayed_type_is_required() {
        assert!(routing_kind(&FieldTable::new()).is_err());
        let bad =
            FieldTable::from_entries([("x-delayed-type", FieldValue::LongStr("x-delayed-message".into()))]);
        assert!(routing_kind(&bad).is_err());
        let topic = FieldTable::from_entries([("x-delayed-type", FieldValue::LongStr("topic".into()))]);
        assert_eq!(routing_kind(&topic).unwrap(), ExchangeKind::Topic);
    }

    /// On delivery x-delay reads the negative delay, as the plugin writes it.
    #[test]
    fn delivered_header_is_negative() {
        assert_eq!(delivered_header(1500), FieldValue::I32(-1500));
        assert_eq!(delivered_header(1 << 40), FieldValue::I64(-(1 << 40)));
    }
}
