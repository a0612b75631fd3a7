//! How a queue's own arguments, its policy and its operator policy combine into the settings it
//! runs with (semantics §6). RabbitMQ's rules, as its classic queues apply them
//! (rabbit_amqqueue_process:process_args_policy, rabbit_policies:merge_policy_value) and as
//! measured on RabbitMQ 3.10:
//!
//! | setting | rule |
//! |---|---|
//! | `message-ttl`, `expires`, `max-length`, `max-length-bytes` | the lowest of argument, policy and operator policy |
//! | `delivery-limit` | the same, but between argument and policy a negative value (no limit, RabbitMQ 4.x) gives way to the other's |
//! | `dead-letter-exchange`, `dead-letter-routing-key` | the argument, else the policy |
//! | `overflow` | the argument, else the operator policy, else the policy |
//! | `delivery-delay`, `visibility-timeout`, `redelivery-delay`, `redelivery-delay-max` (Hourglass's) | the argument, else the policy; an operator policy caps either |
//! | `consumer-timeout` (RabbitMQ 4.3) | the lower of argument and policy |
//! | `delayed-retry-type` (RabbitMQ 4.3) | the operator policy, else the policy, else the argument |
//! | `delayed-retry-min` | the lower of the argument and the policies' (of two policies, the higher) |
//! | `delayed-retry-max` | the lowest of argument, policy and operator policy |
//! | `delayed-retry-multiplier` (LavinMQ) | the argument, else the policy |
//!
//! RabbitMQ's documentation says arguments beat policies, but for the numeric limits its code
//! takes the lower value (`res_min`): a 2000 ms `x-message-ttl` under a 1000 ms policy expires
//! messages after 1000 ms on RabbitMQ 3.10. We follow the code.

use hourglass_wire::{FieldTable, FieldValue};

use crate::queue::QueueSettings;

/// The settings a queue runs with, from its `declared` arguments and the policies that apply.
pub(crate) fn effective(
    declared: &QueueSettings,
    policy: Option<&QueueSettings>,
    operator: Option<&QueueSettings>,
) -> QueueSettings {
    let none = QueueSettings::default();
    let (user, op) = (policy.unwrap_or(&none), operator.unwrap_or(&none));
    let a = declared;
    QueueSettings {
        message_ttl_ms: lowest([a.message_ttl_ms, user.message_ttl_ms, op.message_ttl_ms]),
        expires_ms: lowest([a.expires_ms, user.expires_ms, op.expires_ms]),
        max_length: lowest([a.max_length, user.max_length, op.max_length]),
        max_length_bytes: lowest([a.max_length_bytes, user.max_length_bytes, op.max_length_bytes]),
        delivery_limit: delivery_limit(a.delivery_limit, user.delivery_limit, op.delivery_limit),
        dead_letter_exchange: a.dead_letter_exchange.clone().or_else(|| user.dead_letter_exchange.clone()),
        dead_letter_routing_key: a
            .dead_letter_routing_key
            .clone()
            .or_else(|| user.dead_letter_routing_key.clone()),
        overflow: a.overflow.or(op.overflow).or(user.overflow),
        delivery_delay_ms: capped(a.delivery_delay_ms.or(user.delivery_delay_ms), op.delivery_delay_ms),
        visibility_timeout_ms: capped(
            a.visibility_timeout_ms.or(user.visibility_timeout_ms),
            op.visibility_timeout_ms,
        ),
        // RabbitMQ 4.3's rabbit_queue_type:get_consumer_timeout: the lower of argument and
        // policy (an operator policy may not set it).
        consumer_timeout_ms: lowest([a.consumer_timeout_ms, user.consumer_timeout_ms, None]),
        redelivery_delay_ms: capped(
            a.redelivery_delay_ms.or(user.redelivery_delay_ms),
            op.redelivery_delay_ms,
        ),
        redelivery_delay_max_ms: capped(
            a.redelivery_delay_max_ms.or(user.redelivery_delay_max_ms),
            op.redelivery_delay_max_ms,
        ),
        // RabbitMQ 4.3's rabbit_quorum_queue: a policy has precedence for the type (an operator
        // policy's wins over the policy's), the lower for the minimum (the policies' merged by
        // the higher) and for the maximum.
        delayed_retry_type: op.delayed_retry_type.or(user.delayed_retry_type).or(a.delayed_retry_type),
        delayed_retry_min_ms: lowest([
            a.delayed_retry_min_ms,
            user.delayed_retry_min_ms.max(op.delayed_retry_min_ms),
            None,
        ]),
        delayed_retry_max_ms: lowest([
            a.delayed_retry_max_ms,
            user.delayed_retry_max_ms,
            op.delayed_retry_max_ms,
        ]),
        // LavinMQ's: the argument, else the policy.
        delayed_retry_multiplier: a.delayed_retry_multiplier.or(user.delayed_retry_multiplier),
    }
}

/// The definition listings show as `effective_policy_definition` (RabbitMQ's
/// rabbit_policy:merge_operator_definitions): every key of both; where both set one, the lower
/// integer, else the operator policy's value. Keys in name order.
pub(crate) fn effective_definition(policy: Option<&FieldTable>, operator: Option<&FieldTable>) -> FieldTable {
    let mut entries: Vec<(String, FieldValue)> = Vec::new();
    for (key, value) in policy.into_iter().chain(operator).flat_map(FieldTable::iter) {
        let key = key.as_str().into_owned();
        match entries.iter_mut().find(|(k, _)| *k == key) {
            None => entries.push((key, value)),
            // The second sighting comes from the operator policy.
            Some((_, current)) => {
                let lower = match (current.as_i64(), value.as_i64()) {
                    (Some(user), Some(op)) if user <= op => current.clone(),
                    _ => value,
                };
                *current = lower;
            }
        }
    }
    entries.sort_by(|a, b| a.0.cmp(&b.0));
    FieldTable::from_entries(entries.iter().map(|(k, v)| (k.as_str(), v.clone())))
}

/// RabbitMQ 4.x's rabbit_quorum_queue:resolve_delivery_limit: the policies merged by the lower
/// value, then against the argument the lower, unless either is negative (no limit): then the
/// higher, so a negative value gives way to a limit the other sets.
fn delivery_limit(argument: Option<i64>, policy: Option<i64>, operator: Option<i64>) -> Option<i64> {
    let policy = [policy, operator].into_iter().flatten().min();
    match (argument, policy) {
        (Some(a), Some(p)) if a < 0 || p < 0 => Some(a.max(p)),
        (Some(a), Some(p)) => Some(a.min(p)),
        (a, p) => a.or(p),
    }
}

fn lowest(values: [Option<u64>; 3]) -> Option<u64> {
    values.into_iter().flatten().min()
}

/// `value` limited to at most `cap` (an operator policy's); the cap alone when there is no value.
fn capped(value: Option<u64>, cap: Option<u64>) -> Option<u64> {
    lowest([value, cap, None])
}

#[cfg(test)]
mod tests {
    use hourglass_wire::ShortStr;

    use super::*;
    use crate::queue::Overflow;

    fn ttl(ms: u64) -> QueueSettings {
        QueueSettings { message_ttl_ms: Some(ms), ..Default::default() }
    }

    /// Numeric limits: the lowest source wins, an argument included (RabbitMQ's res_min).
    #[test]
    fn numeric_limits_take_the_lowest() {
        assert_eq!(effective(&ttl(2000), Some(&ttl(1000)), None).message_ttl_ms, Some(1000));
        assert_eq!(effective(&ttl(1000), Some(&ttl(3000)), None).message_ttl_ms, Some(1000));
        assert_eq!(effective(&ttl(2000), Some(&ttl(3000)), Some(&ttl(500))).message_ttl_ms, Some(500));
        assert_eq!(effective(&QueueSettings::default(), None, Some(&ttl(500))).message_ttl_ms, Some(500));
        let max = |n| QueueSettings { max_length: Some(n), ..Default::default() };
        assert_eq!(effective(&QueueSettings::default(), Some(&max(10)), Some(&max(5))).max_length, Some(5));
        assert_eq!(effective(&QueueSettings::default(), Some(&max(3)), Some(&max(5))).max_length, Some(3));
    }

    /// Dead-lettering and overflow: the argument wins; overflow then prefers the operator's.
    #[test]
    fn arguments_win_for_dead_lettering_and_overflow() {
        let dlx = |name: &'static str| QueueSettings {
            dead_letter_exchange: Some(ShortStr::from_static(name)),
            ..Default::default()
        };
        assert_eq!(
            effective(&dlx("arg"), Some(&dlx("policy")), None).dead_letter_exchange,
            dlx("arg").dead_letter_exchange
        );
        assert_eq!(
            effective(&QueueSettings::default(), Some(&dlx("policy")), None).dead_letter_exchange,
            dlx("policy").dead_letter_exchange
        );
        let overflow = |o| QueueSettings { overflow: Some(o), ..Default::default() };
        let user = overflow(Overflow::RejectPublish);
        let op = overflow(Overflow::DropHead);
        assert_eq!(
            effective(&QueueSettings::default(), Some(&user), Some(&op)).overflow,
            Some(Overflow::DropHead)
        );
        let arg = overflow(Overflow::RejectPublishDlx);
        assert_eq!(effective(&arg, Some(&user), Some(&op)).overflow, Some(Overflow::RejectPublishDlx));
    }

    /// Hourglass's time settings: the argument beats the policy; an operator policy caps both.
    #[test]
    fn time_settings_are_capped_by_operator_policies() {
        let delay = |ms| QueueSettings { delivery_delay_ms: Some(ms), ..Default::default() };
        assert_eq!(effective(&delay(2000), Some(&delay(1000)), None).delivery_delay_ms, Some(2000));
        assert_eq!(
            effective(&delay(2000), Some(&delay(1000)), Some(&delay(500))).delivery_delay_ms,
            Some(500)
        );
        assert_eq!(effective(&delay(200), None, Some(&delay(500))).delivery_delay_ms, Some(200));
    }

    /// The listed effective definition merges both, the lower integer where both set a key.
    #[test]
    fn effective_definition_merges_both() {
        let user = FieldTable::from_entries([
            ("max-length", FieldValue::I64(10)),
            ("dead-letter-exchange", FieldValue::LongStr("dlx".into())),
        ]);
        let op =
            FieldTable::from_entries([("max-length", FieldValue::I64(5)), ("expires", FieldValue::I64(9))]);
        let merged = effective_definition(Some(&user), Some(&op));
        let keys: Vec<String> = merged.iter().map(|(k, _)| k.as_str().into_owned()).collect();
        assert_eq!(keys, ["dead-letter-exchange", "expires", "max-length"]);
        assert_eq!(merged.get("max-length").and_then(|v| v.as_i64()), Some(5));
        assert_eq!(effective_definition(None, None), FieldTable::new());
    }
}
