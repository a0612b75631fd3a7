//! The delayed exchange (semantics §3): type `x-delayed-message` routing as its `x-delayed-type`,
//! the `x-delay` header read as rabbitmq-delayed-message-exchange reads it, and the headers that
//! say when instead of how long (`x-delay-until`, RabbitMQ 4.3's `x-opt-delivery-time`).

use hourglass_wire::{FieldTable, FieldValue};

use super::ExchangeKind;
use crate::api::AmqpError;
use crate::errors;
use crate::queue::args::MAX_TIME_MS;
use crate::time::Timestamp;

/// The headers through which a publisher names the time a message is due, read in this order
/// after `x-delay`.
pub(crate) const DUE_AT_HEADERS: [&str; 2] = ["x-delay-until", DELIVERY_TIME];

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

/// The delay a message published at `now` through any exchange asks for with RabbitMQ 4.4's
/// headers, and the header that asked: `x-opt-delivery-time`, read as RabbitMQ 4.4 reads it (an
/// integer of epoch milliseconds or an AMQP timestamp; any other type is ignored, and a time now
/// or past is no delay), else `x-opt-delivery-delay` (ms from now, as Tanzu RabbitMQ and ActiveMQ
/// Artemis take it, read as `x-delay`). Beyond 10 years: 406 (RabbitMQ has no bound; our time
/// tiers do). The message is routed at once and waits in each queue it reaches.
pub(crate) fn delivery_time(
    headers: Option<&FieldTable>,
    now: Timestamp,
) -> Result<Option<(u64, &'static str)>, AmqpError> {
    let Some(headers) = headers else { return Ok(None) };
    let due = match headers.get(DELIVERY_TIME) {
        Some(FieldValue::Timestamp(seconds)) => Some(seconds.saturating_mul(1000)),
        // Integers only: a string, float or anything else is no delay, as on RabbitMQ 4.4.
        Some(value) => value.as_i64().map(|ms| ms.max(0) as u64),
        None => None,
    };
    if let Some(due) = due {
        return delay_until(due, now, DELIVERY_TIME);
    }
    Ok(delay_ms(Some(headers), DELIVERY_DELAY)?.map(|delay| (delay, DELIVERY_DELAY)))
}

/// RabbitMQ 4.4's header naming when a message is due, on any exchange.
pub(crate) const DELIVERY_TIME: &str = "x-opt-delivery-time";
/// Tanzu RabbitMQ's and ActiveMQ Artemis's header naming how long a message waits, on any exchange.
pub(crate) const DELIVERY_DELAY: &str = "x-opt-delivery-delay";

/// The delay until `due` (epoch ms) from `now`: none when it is not ahead, a 406 naming `header`
/// beyond the maximum delay.
fn delay_until(
    due: u64,
    now: Timestamp,
    header: &'static str,
) -> Result<Option<(u64, &'static str)>, AmqpError> {
    let delay = due.saturating_sub(now.as_millis());
    if delay > MAX_TIME_MS {
        return Err(errors::precondition_failed(format!(
            "invalid {header}: {delay} ms away, more than the maximum delay of {MAX_TIME_MS} ms"
        )));
    }
    Ok((delay > 0).then_some((delay, header)))
}

/// The delay a message published through the delayed exchange at `now` asks for, and the header
/// that asked: `x-delay` (how long) when it asks for a delay, else the time `x-delay-until` or
/// `x-opt-delivery-time` names (now or past: no delay; more than 10 years ahead: 406).
pub(crate) fn requested_delay(
    headers: Option<&FieldTable>,
    now: Timestamp,
) -> Result<Option<(u64, &'static str)>, AmqpError> {
    if let Some(delay) = delay_ms(headers, "x-delay")? {
        return Ok(Some((delay, "x-delay")));
    }
    for header in DUE_AT_HEADERS {
        let Some(due) = due_at_ms(headers, header)? else { continue };
        return delay_until(due, now, header);
    }
    Ok(delay_ms(headers, DELIVERY_DELAY)?.map(|delay| (delay, DELIVERY_DELAY)))
}

/// The time a due-at header names, as epoch milliseconds: an integer or a whole-number string
/// of milliseconds, a float (its fraction dropped), an AMQP timestamp (seconds), or an RFC 3339
/// string. Absent: `None`; anything else is a 406, since no publisher sends these by accident.
fn due_at_ms(headers: Option<&FieldTable>, header: &str) -> Result<Option<u64>, AmqpError> {
    let Some(value) = headers.and_then(|h| h.get(header)) else { return Ok(None) };
    let due = match &value {
        FieldValue::Timestamp(seconds) => Some(seconds.saturating_mul(1000)),
        FieldValue::F32(f) => Some(f64::from(*f)).filter(|f| f.is_finite()).map(|f| f.max(0.0) as u64),
        FieldValue::F64(f) => Some(*f).filter(|f| f.is_finite()).map(|f| f.max(0.0) as u64),
        FieldValue::LongStr(s) => whole_number(s.as_bytes())
            .map(|ms| ms.max(0) as u64)
            .or_else(|| std::str::from_utf8(s.as_bytes()).ok().and_then(crate::calendar::rfc3339_epoch_ms)),
        other => other.as_i64().map(|ms| ms.max(0) as u64),
    };
    due.map(Some).ok_or_else(|| {
        errors::precondition_failed(format!(
            "invalid {header}: not a time (epoch milliseconds, an AMQP timestamp or an RFC 3339 string)"
        ))
    })
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

    fn requested(
        entries: &[(&str, FieldValue)],
        now_ms: u64,
    ) -> Result<Option<(u64, &'static str)>, AmqpError> {
        let headers = FieldTable::from_entries(entries.iter().cloned());
        requested_delay(Some(&headers), Timestamp::from_millis(now_ms))
    }

    /// semantics §3: x-delay-until names the due time as epoch milliseconds (integers, whole
    /// number strings, floats), an AMQP timestamp or RFC 3339; x-opt-delivery-time likewise.
    #[test]
    fn due_at_headers_name_a_time() {
        let now = 1_796_187_600_000; // 2026-12-02T05:00:00Z
        let until = |v: FieldValue| requested(&[("x-delay-until", v)], now).unwrap();
        assert_eq!(until(FieldValue::I64(now as i64 + 1_500)), Some((1_500, "x-delay-until")));
        assert_eq!(until(FieldValue::LongStr(format!("{}", now + 20).into())), Some((20, "x-delay-until")));
        assert_eq!(until(FieldValue::F64(now as f64 + 99.9)), Some((99, "x-delay-until")));
        assert_eq!(until(FieldValue::Timestamp(now / 1000 + 60)), Some((60_000, "x-delay-until")));
        assert_eq!(
            until(FieldValue::LongStr("2026-12-02T06:00:00.250+01:00".into())),
            Some((250, "x-delay-until"))
        );
        assert_eq!(
            until(FieldValue::LongStr("2026-12-02T05:01:00Z".into())),
            Some((60_000, "x-delay-until"))
        );
        let delivery_time =
            requested(&[("x-opt-delivery-time", FieldValue::I64(now as i64 + 7))], now).unwrap();
        assert_eq!(delivery_time, Some((7, "x-opt-delivery-time")));
    }

    /// semantics §3: a time now or past is no delay; more than 10 years ahead or not a time is a 406.
    #[test]
    fn due_at_headers_in_the_past_are_now_and_bad_ones_are_refused() {
        let now = 1_796_187_600_000;
        let until = |v: FieldValue| requested(&[("x-delay-until", v)], now);
        assert_eq!(until(FieldValue::I64(now as i64)).unwrap(), None);
        assert_eq!(until(FieldValue::I64(-5)).unwrap(), None);
        assert_eq!(until(FieldValue::LongStr("1999-01-01T00:00:00Z".into())).unwrap(), None);
        let far = now + MAX_TIME_MS + 1;
        assert_eq!(until(FieldValue::I64(far as i64)).unwrap_err().reply_code, 406);
        assert_eq!(until(FieldValue::LongStr("tomorrow".into())).unwrap_err().reply_code, 406);
        assert_eq!(until(FieldValue::Bool(true)).unwrap_err().reply_code, 406);
        assert_eq!(until(FieldValue::F64(f64::NAN)).unwrap_err().reply_code, 406);
    }

    /// semantics §3: x-delay, when it asks for a delay, wins over a due time; one that does not
    /// leaves the due time in force.
    #[test]
    fn x_delay_comes_first() {
        let now = 1_000_000;
        let due = ("x-delay-until", FieldValue::I64(now as i64 + 5_000));
        assert_eq!(
            requested(&[("x-delay", FieldValue::I32(200)), due.clone()], now).unwrap(),
            Some((200, "x-delay"))
        );
        assert_eq!(
            requested(&[("x-delay", FieldValue::I32(0)), due.clone()], now).unwrap(),
            Some((5_000, "x-delay-until"))
        );
        let both = [due, ("x-opt-delivery-time", FieldValue::I64(now as i64 + 9))];
        assert_eq!(requested(&both, now).unwrap(), Some((5_000, "x-delay-until")));
    }

    /// On delivery x-delay reads the negative delay, as the plugin writes it.
    #[test]
    fn delivered_header_is_negative() {
        assert_eq!(delivered_header(1500), FieldValue::I32(-1500));
        assert_eq!(delivered_header(1 << 40), FieldValue::I64(-(1 << 40)));
    }
}
