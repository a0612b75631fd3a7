//! `x-` arguments of queue.declare, parsed once into a typed `QueueArgs` (docs/semantics.md
//! "Conventions"; RabbitMQ's rabbit_amqqueue:declare_args/0). Nothing after `QueueArgs::parse`
//! reads the raw table, except the redeclare equivalence check, which compares raw values.

use hourglass_wire::{FieldTable, FieldValue, ShortStr};

use super::dedup::{self, DedupSpec};
use super::sqs_args::SqsArgs;
use crate::api::AmqpError;
use crate::errors;

/// The largest time argument accepted: 10 years in milliseconds, as RabbitMQ (docs/semantics.md).
pub const MAX_TIME_MS: u64 = 315_360_000_000;
/// Why `x-consumer-disconnected-timeout` (RabbitMQ 4.x, quorum queues) is refused.
pub(crate) const CONSUMER_DISCONNECTED_TIMEOUT_NOT_SERVED: &str = "not supported by Hourglass: a consumer's \
     deliveries return to the queue as soon as its connection is gone, with no disconnected-consumer wait";

/// The highest `x-max-priority` RabbitMQ accepts.
pub const MAX_PRIORITY: u8 = 255;
/// A quorum queue's priorities (RabbitMQ 4.3's rabbit_fifo): 0 ..= 31, strict, ...
pub const QUORUM_MAX_PRIORITY: u8 = 31;
/// ... and where a message without a priority goes among them.
pub const QUORUM_DEFAULT_PRIORITY: u8 = 4;
/// A quorum queue's delivery limit when neither argument nor policy sets one (RabbitMQ 4.0's
/// `DEFAULT_DELIVERY_LIMIT`); a negative limit lifts it.
pub const QUORUM_DEFAULT_DELIVERY_LIMIT: u64 = 20;

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
    "x-delayed-retry-type",
    "x-delayed-retry-min",
    "x-delayed-retry-max",
    "x-delayed-retry-multiplier",
];

/// Typed queue arguments: the effective values (policies applied, semantics §6) that every feature
/// reads, and the settings as declared.
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
    /// `x-delivery-delay`: every message entering the queue waits this long (semantics §3).
    pub delivery_delay_ms: Option<u64>,
    /// `x-visibility-timeout`: unsettled deliveries come back after this long (semantics §4).
    pub visibility_timeout_ms: Option<u64>,
    /// `x-consumer-timeout` (RabbitMQ 4.3): unsettled deliveries come back after this long and
    /// their consumer is cancelled (semantics §4); `None`: the broker's default.
    pub consumer_timeout_ms: Option<u64>,
    /// `x-delivery-limit`: failed deliveries allowed before dead-lettering (semantics §5).
    pub delivery_limit: Option<u64>,
    /// `x-redelivery-delay` / `x-redelivery-delay-max`: back-off for returning messages (semantics §5).
    pub redelivery_delay_ms: Option<u64>,
    pub redelivery_delay_max_ms: Option<u64>,
    /// `x-delayed-retry-type` / `-min` / `-max` (RabbitMQ 4.3's delayed retry, semantics §5):
    /// `None` when disabled.
    pub delayed_retry: Option<DelayedRetry>,
    /// `x-single-active-consumer`: one consumer at a time gets messages, the others wait.
    pub single_active_consumer: bool,
    /// `x-max-priority`: a priority queue with levels 0 ..= this.
    pub max_priority: Option<u8>,
    /// `x-message-deduplication` with `x-cache-size`, `x-cache-ttl`, `x-deduplication-header`
    /// (semantics §8): `None` unless switched on.
    pub deduplication: Option<DedupSpec>,
    /// The `x-sqs-*` settings (an SQS queue's attributes, docs/sqs.md).
    pub sqs: SqsArgs,
    /// The settings a policy can also give, as the queue's own arguments gave them (before
    /// policies): what `policy::merge` starts from when policies change.
    pub declared: QueueSettings,
}

/// The queue arguments a policy can set as well (semantics §6), each `None` when not given. The
/// declared arguments, a policy's definition and their merge all take this shape.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct QueueSettings {
    pub message_ttl_ms: Option<u64>,
    pub expires_ms: Option<u64>,
    pub dead_letter_exchange: Option<ShortStr>,
    pub dead_letter_routing_key: Option<ShortStr>,
    pub max_length: Option<u64>,
    pub max_length_bytes: Option<u64>,
    pub overflow: Option<Overflow>,
    /// Negative: no limit (RabbitMQ 4.x), which lifts a quorum queue's default of 20.
    pub delivery_limit: Option<i64>,
    pub delivery_delay_ms: Option<u64>,
    pub visibility_timeout_ms: Option<u64>,
    pub consumer_timeout_ms: Option<u64>,
    pub redelivery_delay_ms: Option<u64>,
    pub redelivery_delay_max_ms: Option<u64>,
    pub delayed_retry_type: Option<RetryType>,
    pub delayed_retry_min_ms: Option<u64>,
    pub delayed_retry_max_ms: Option<u64>,
    pub delayed_retry_multiplier: Option<u64>,
}

/// `x-delayed-retry-type`: which returns RabbitMQ 4.3's delayed retry holds back.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum RetryType {
    Disabled,
    /// Every return.
    All,
    /// Failures only: `basic.reject` with requeue, a delivery whose channel closed.
    Failed,
    /// Returns that are not failures: `basic.nack` with requeue, `basic.recover`, a visibility
    /// or consumer timeout.
    Returned,
}

/// RabbitMQ 4.3's delayed retry in effect: a return of `kind` waits
/// `min(min_ms × returns, max_ms)` before it is ready again; with LavinMQ's multiplier `m`,
/// `min(min_ms × m^(returns−1), max_ms)` (1: constant).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct DelayedRetry {
    pub kind: RetryType,
    pub min_ms: u64,
    pub max_ms: u64,
    /// `x-delayed-retry-multiplier` (LavinMQ): `None` for the linear back-off.
    pub multiplier: Option<u64>,
}

/// The longest wait of a LavinMQ-style retry without a maximum: LavinMQ caps it at u32 ms
/// (about 49.7 days).
pub const DELAYED_RETRY_CAP_MS: u64 = u32::MAX as u64;

/// How a delivery came back unsettled, as RabbitMQ 4.3 tells them apart.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum ReturnKind {
    /// A failed delivery: basic.reject with requeue, or its channel or connection closed.
    Failed,
    /// Any other return: basic.nack with requeue, basic.recover, a consumer timeout.
    Returned,
    /// Its visibility timeout ran out: a return to delayed retry, but counted as a failure in
    /// either counting (SQS counts every receive toward `maxReceiveCount`).
    VisibilityTimeout,
}

/// Which returns count toward `x-delivery-limit` and `x-delivery-count` (semantics §5).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub enum DeliveryCounting {
    /// Every return: RabbitMQ 3.x's and 4.0–4.2's quorum queues. The default, so a 3.x
    /// application that nacks toward its limit still reaches it.
    #[default]
    EveryReturn,
    /// Failures only (and visibility timeouts): RabbitMQ 4.3's "unlimited explicit returns",
    /// where basic.nack with requeue, basic.recover and a consumer timeout do not count.
    FailuresOnly,
}

impl DeliveryCounting {
    /// Whether a return of `how` counts one more delivery.
    pub fn counts(self, how: ReturnKind) -> bool {
        self == DeliveryCounting::EveryReturn || how != ReturnKind::Returned
    }
}

impl DelayedRetry {
    /// The wait of a return of `how` that makes `returns` (>= 1) in all, if this kind of retry
    /// holds it back.
    pub fn wait_ms(&self, how: ReturnKind, returns: u32) -> Option<u64> {
        let applies = match self.kind {
            RetryType::Disabled => false,
            RetryType::All => true,
            RetryType::Failed => how == ReturnKind::Failed,
            RetryType::Returned => how != ReturnKind::Failed,
        };
        let returns = returns.max(1);
        let factor = match self.multiplier {
            None => u64::from(returns),
            Some(m) => m.checked_pow(returns - 1).unwrap_or(u64::MAX),
        };
        applies.then(|| self.min_ms.saturating_mul(factor).min(self.max_ms))
    }
}

/// Why a setting's value was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum SettingError {
    /// Out of range or not one of the accepted values; RabbitMQ's detail, e.g. `{value_negative,-1}`.
    Invalid(String),
    /// A string setting given something that is not a string (RabbitMQ words this one apart).
    WrongType,
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
        let mut declared = QueueSettings::default();
        let (mut deduplicate, mut dedup) = (false, DedupSpec::default());
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
                "x-single-active-consumer" => {
                    args.single_active_consumer = bool_arg(&value).map_err(|w| invalid(key, w))?
                }
                "x-message-deduplication" => deduplicate = bool_arg(&value).map_err(|w| invalid(key, w))?,
                "x-cache-size" => {
                    let size = count_arg(&value).map_err(|w| invalid(key, w))?;
                    if !(1..=dedup::CACHE_SIZE_MAX).contains(&size) {
                        return Err(invalid(key, format!("{{value_out_of_range,{size}}}")));
                    }
                    dedup.cache_size = size;
                }
                "x-cache-ttl" => dedup.cache_ttl_ms = Some(time_arg(&value, 0).map_err(|w| invalid(key, w))?),
                "x-deduplication-header" => {
                    let name = short_string_arg(&value).map_err(|_| invalid_type(key, &value))?;
                    dedup.header = name.as_str().into_owned();
                }
                // RabbitMQ 4.x's wait before a disconnected node's consumer loses its deliveries:
                // refused by name, not ignored (a consumer here loses them when its connection goes).
                "x-consumer-disconnected-timeout" => {
                    return Err(invalid(key, CONSUMER_DISCONNECTED_TIMEOUT_NOT_SERVED.to_owned()))
                }
                "x-dead-letter-strategy" => {
                    args.dead_letter_strategy = match value.as_bytes() {
                        Some(b"at-most-once") => DeadLetterStrategy::AtMostOnce,
                        Some(b"at-least-once") => DeadLetterStrategy::AtLeastOnce,
                        _ => return Err(invalid(key, unsupported("dead letter strategy", &value))),
                    }
                }
                _ if key.starts_with("x-sqs-") => {
                    args.sqs.read(key, &value).map_err(|w| invalid(key, w))?;
                }
                _ => {
                    let Some(name) = key.strip_prefix("x-") else { continue };
                    match declared.set(name, &value) {
                        Ok(_) => {}
                        Err(SettingError::Invalid(why)) => return Err(invalid(key, why)),
                        Err(SettingError::WrongType) => return Err(invalid_type(key, &value)),
                    }
                }
            }
        }
        check_combinations(&declared, &invalid)?;
        if args.queue_type == QueueType::Quorum {
            // RabbitMQ: a quorum queue is durable, and does not support reject-publish-dlx.
            if !durable {
                return Err(errors::precondition_failed(format!(
                    "invalid property 'non-durable' for queue '{queue}' in vhost '{vhost}'"
                )));
            }
            if declared.overflow == Some(Overflow::RejectPublishDlx) {
                return Err(invalid(
                    "x-overflow",
                    "reject-publish-dlx is not supported by quorum queues".to_owned(),
                ));
            }
        }
        args.deduplication = deduplicate.then_some(dedup);
        args.apply(&declared);
        args.declared = declared;
        Ok(args)
    }

    /// What only a new declaration is held to, so that a queue stored by an earlier build still
    /// restores: a quorum queue's priorities are fixed (RabbitMQ 4.3's 32 levels), and RabbitMQ
    /// 3.10 and 4.3 both refuse `x-max-priority` on one, in these words.
    pub(crate) fn check_new_declaration(&self, queue: &str, vhost: &str) -> Result<(), AmqpError> {
        if self.queue_type == QueueType::Quorum && self.max_priority.is_some() {
            return Err(errors::precondition_failed(format!(
                "invalid arg 'x-max-priority' for queue '{queue}' in vhost '{vhost}' of queue type rabbit_quorum_queue"
            )));
        }
        Ok(())
    }

    /// The highest priority level and the level of a message without a priority: a quorum
    /// queue's 32 levels, as RabbitMQ 4.3's (it refuses `x-max-priority`); else
    /// `x-max-priority`'s levels (one level without it), unprioritised messages at 0.
    pub fn priority_levels(&self) -> (u8, u8) {
        match self.queue_type {
            QueueType::Quorum => (QUORUM_MAX_PRIORITY, QUORUM_DEFAULT_PRIORITY),
            QueueType::Classic => (self.max_priority.unwrap_or(0), 0),
        }
    }

    /// Makes `settings` (the declared ones merged with policies) the effective values. A merge
    /// can combine what no single declaration may (checked in `parse`), so it is made sane here:
    /// - reject-publish-dlx on a quorum queue falls back to drop-head, as RabbitMQ's
    ///   rabbit_quorum_queue does for a policy value it does not support;
    /// - a back-off maximum below the delay is raised to the delay (the back-off stays flat);
    /// - a delayed retry without a minimum is disabled, and its maximum defaults to the minimum,
    ///   as RabbitMQ's rabbit_quorum_queue:get_delayed_retry_config;
    /// - a minimum without a type is LavinMQ's automatic retries (see below).
    pub(crate) fn apply(&mut self, settings: &QueueSettings) {
        let overflow = settings.overflow.unwrap_or_default();
        self.overflow = match (self.queue_type, overflow) {
            (QueueType::Quorum, Overflow::RejectPublishDlx) => Overflow::DropHead,
            (_, overflow) => overflow,
        };
        self.message_ttl_ms = settings.message_ttl_ms;
        self.expires_ms = settings.expires_ms;
        self.dead_letter_exchange = settings.dead_letter_exchange.clone();
        self.dead_letter_routing_key = settings.dead_letter_routing_key.clone();
        self.max_length = settings.max_length;
        self.max_length_bytes = settings.max_length_bytes;
        self.delivery_limit = match (settings.delivery_limit, self.queue_type) {
            (Some(limit), _) => u64::try_from(limit).ok(),
            (None, QueueType::Quorum) => Some(QUORUM_DEFAULT_DELIVERY_LIMIT),
            (None, QueueType::Classic) => None,
        };
        self.delivery_delay_ms = settings.delivery_delay_ms;
        self.visibility_timeout_ms = settings.visibility_timeout_ms;
        self.consumer_timeout_ms = settings.consumer_timeout_ms;
        self.redelivery_delay_ms = settings.redelivery_delay_ms;
        self.redelivery_delay_max_ms = match (settings.redelivery_delay_ms, settings.redelivery_delay_max_ms)
        {
            (Some(delay), Some(max)) => Some(max.max(delay)),
            (_, max) => max,
        };
        let multiplier = settings.delayed_retry_multiplier;
        self.delayed_retry = match (settings.delayed_retry_type, settings.delayed_retry_min_ms) {
            (Some(kind), Some(min_ms)) if kind != RetryType::Disabled => {
                let max_ms = settings.delayed_retry_max_ms.unwrap_or(min_ms);
                Some(DelayedRetry { kind, min_ms, max_ms, multiplier })
            }
            // LavinMQ's automatic retries: a minimum alone switches them on, for rejects and
            // nacks alike, with no maximum but LavinMQ's own cap, and a delivery limit of 20.
            (None, Some(min_ms)) => {
                let max_ms = settings.delayed_retry_max_ms.unwrap_or(DELAYED_RETRY_CAP_MS);
                if settings.delivery_limit.is_none() {
                    self.delivery_limit = Some(QUORUM_DEFAULT_DELIVERY_LIMIT);
                }
                Some(DelayedRetry { kind: RetryType::All, min_ms, max_ms, multiplier })
            }
            _ => None,
        };
    }
}

/// Delayed-retry settings that cannot stand together in one declaration or one policy (RabbitMQ
/// 4.3's rabbit_quorum_queue:validate_delayed_retry_constraints).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum RetryConflict {
    /// A type other than `disabled` without a minimum.
    MinMissing(RetryType),
    /// A maximum below the minimum.
    MaxBelowMin { min: u64, max: u64 },
}

impl QueueSettings {
    /// What makes these delayed-retry settings refused, if anything (each caller words it).
    pub(crate) fn delayed_retry_conflict(&self) -> Option<RetryConflict> {
        match (self.delayed_retry_type, self.delayed_retry_min_ms, self.delayed_retry_max_ms) {
            (Some(kind), None, _) if kind != RetryType::Disabled => Some(RetryConflict::MinMissing(kind)),
            (_, Some(min), Some(max)) if max < min => Some(RetryConflict::MaxBelowMin { min, max }),
            _ => None,
        }
    }

    /// Checks `value` for the setting `name` (an argument's name without its `x-`, or a policy
    /// key) and records it. `Ok(false)`: `name` is not one of these settings.
    pub(crate) fn set(&mut self, name: &str, value: &FieldValue) -> Result<bool, SettingError> {
        let invalid = SettingError::Invalid;
        match name {
            "message-ttl" => self.message_ttl_ms = Some(time_arg(value, 0).map_err(invalid)?),
            "expires" => self.expires_ms = Some(time_arg(value, 1).map_err(invalid)?),
            "delivery-delay" => self.delivery_delay_ms = Some(time_arg(value, 0).map_err(invalid)?),
            "visibility-timeout" => {
                let ms = count_arg(value).and_then(super::visibility::check_range);
                self.visibility_timeout_ms = Some(ms.map_err(invalid)?)
            }
            "consumer-timeout" => self.consumer_timeout_ms = Some(time_arg(value, 0).map_err(invalid)?),
            // Any integer, as RabbitMQ (it validates none): 0 dead-letters a message on its first
            // return, a negative value means no limit.
            "delivery-limit" => self.delivery_limit = Some(integer_arg(value).map_err(invalid)?),
            "redelivery-delay" => self.redelivery_delay_ms = Some(time_arg(value, 0).map_err(invalid)?),
            "redelivery-delay-max" => {
                self.redelivery_delay_max_ms = Some(time_arg(value, 0).map_err(invalid)?)
            }
            "delayed-retry-type" => {
                self.delayed_retry_type = Some(match value.as_bytes() {
                    Some(b"disabled") => RetryType::Disabled,
                    Some(b"all") => RetryType::All,
                    Some(b"failed") => RetryType::Failed,
                    Some(b"returned") => RetryType::Returned,
                    _ => return Err(invalid("must be one of: all, failed, returned, disabled".to_owned())),
                })
            }
            "delayed-retry-min" => self.delayed_retry_min_ms = Some(time_arg(value, 1).map_err(invalid)?),
            "delayed-retry-max" => self.delayed_retry_max_ms = Some(time_arg(value, 1).map_err(invalid)?),
            "delayed-retry-multiplier" => {
                let multiplier = count_arg(value).map_err(invalid)?;
                if multiplier == 0 {
                    return Err(invalid("{value_zero,0}".to_owned()));
                }
                self.delayed_retry_multiplier = Some(multiplier)
            }
            "max-length" => self.max_length = Some(count_arg(value).map_err(invalid)?),
            "max-length-bytes" => self.max_length_bytes = Some(count_arg(value).map_err(invalid)?),
            "dead-letter-exchange" => {
                self.dead_letter_exchange =
                    Some(short_string_arg(value).map_err(|_| SettingError::WrongType)?)
            }
            "dead-letter-routing-key" => {
                self.dead_letter_routing_key =
                    Some(short_string_arg(value).map_err(|_| SettingError::WrongType)?)
            }
            "overflow" => {
                self.overflow = Some(match value.as_bytes() {
                    Some(b"drop-head") => Overflow::DropHead,
                    Some(b"reject-publish") => Overflow::RejectPublish,
                    Some(b"reject-publish-dlx") => Overflow::RejectPublishDlx,
                    _ => return Err(invalid("invalid_overflow".to_owned())),
                })
            }
            _ => return Ok(false),
        }
        Ok(true)
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
/// The checks across arguments a queue.declare's settings must pass: a redelivery delay's
/// maximum needs the delay and is no smaller, delayed retries need their minimum and a maximum
/// no smaller, a dead-letter routing key needs a dead-letter exchange. `invalid` makes the
/// error naming the argument.
fn check_combinations(
    declared: &QueueSettings,
    invalid: &dyn Fn(&str, String) -> AmqpError,
) -> Result<(), AmqpError> {
    if let Some(max) = declared.redelivery_delay_max_ms {
        match declared.redelivery_delay_ms {
            None => return Err(invalid("x-redelivery-delay-max", "requires x-redelivery-delay".to_owned())),
            Some(delay) if max < delay => {
                return Err(invalid("x-redelivery-delay-max", format!("{{less_than_delay,{max},{delay}}}")))
            }
            _ => {}
        }
    }
    match declared.delayed_retry_conflict() {
        Some(RetryConflict::MinMissing(kind)) => {
            return Err(invalid(
                "x-delayed-retry-min",
                format!("required when x-delayed-retry-type is {}", kind.name()),
            ))
        }
        Some(RetryConflict::MaxBelowMin { min, max }) => {
            return Err(invalid(
                "x-delayed-retry-max",
                format!("x-delayed-retry-max ({max}) must not be smaller than x-delayed-retry-min ({min})"),
            ))
        }
        None => {}
    }
    if declared.dead_letter_routing_key.is_some() && declared.dead_letter_exchange.is_none() {
        return Err(invalid("x-dead-letter-routing-key", "routing_key_but_no_dlx_defined".to_owned()));
    }
    Ok(())
}

/// A boolean argument's value; otherwise RabbitMQ's `{unacceptable_type,TYPE}`.
pub(super) fn bool_arg(value: &FieldValue) -> Result<bool, String> {
    match value {
        FieldValue::Bool(on) => Ok(*on),
        other => Err(format!("{{unacceptable_type,{}}}", other.type_name())),
    }
}

/// A non-negative count: any AMQP integer type.
pub(crate) fn count_arg(value: &FieldValue) -> Result<u64, String> {
    let n = integer_arg(value)?;
    u64::try_from(n).map_err(|_| format!("{{value_negative,{n}}}"))
}

/// Any AMQP integer type (docs/semantics.md: signed or unsigned, 8 to 64 bit).
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
    format!("\"unsupported {what} '{}'\"", shown(value))
}

/// A value as an error names it: text as text, anything else as debugged.
fn shown(value: &FieldValue) -> String {
    value.as_bytes().map(|b| String::from_utf8_lossy(b).into_owned()).unwrap_or_else(|| format!("{value:?}"))
}

impl RetryType {
    /// The name `x-delayed-retry-type` gives it.
    pub fn name(self) -> &'static str {
        match self {
            RetryType::Disabled => "disabled",
            RetryType::All => "all",
            RetryType::Failed => "failed",
            RetryType::Returned => "returned",
        }
    }
}

/// Compares the arguments RabbitMQ holds equivalent on redeclare; names the first that differs.
/// Integers compare by value whatever their AMQP type: a TTL declared as a short and redeclared as
/// a long is the same TTL (the Java client's `PerQueueTTL#queueReDeclareSemanticEquivalence`).
pub(crate) fn first_inequivalent(current: &FieldTable, received: &FieldTable) -> Option<&'static str> {
    EQUIVALENCE_KEYS.iter().copied().find(|key| !equivalent(current.get(key), received.get(key)))
}

fn equivalent(current: Option<FieldValue>, received: Option<FieldValue>) -> bool {
    match (&current, &received) {
        (Some(a), Some(b)) => match (a.as_i64(), b.as_i64()) {
            (Some(x), Some(y)) => x == y,
            _ => a == b,
        },
        _ => current == received,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(entries: &[(&str, FieldValue)]) -> Result<QueueArgs, AmqpError> {
        QueueArgs::parse(&FieldTable::from_entries(entries.iter().cloned()), "q", "/", true)
    }

    /// A quorum queue must be durable, as in RabbitMQ (semantics §2 "a quorum queue must be durable").
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

    /// The same TTL redeclared in another integer type is equivalent; another value is not.
    #[test]
    fn integer_arguments_are_equivalent_across_types() {
        let short = FieldTable::from_entries([("x-message-ttl", FieldValue::I16(500))]);
        let long = FieldTable::from_entries([("x-message-ttl", FieldValue::I64(500))]);
        let other = FieldTable::from_entries([("x-message-ttl", FieldValue::U32(501))]);
        assert_eq!(first_inequivalent(&short, &long), None);
        assert_eq!(first_inequivalent(&short, &other), Some("x-message-ttl"));
    }

    /// Time arguments take any integer type (semantics, common ground).
    #[test]
    fn time_arguments_accept_every_integer_width() {
        for value in [FieldValue::U8(5), FieldValue::I16(5), FieldValue::U32(5), FieldValue::I64(5)] {
            assert_eq!(parse(&[("x-message-ttl", value)]).unwrap().message_ttl_ms, Some(5));
        }
    }

    /// A negative TTL is refused with 406 and RabbitMQ's text naming the argument (semantics, common ground).
    #[test]
    fn negative_ttl_is_refused_with_the_argument_named() {
        let err = parse(&[("x-message-ttl", FieldValue::I32(-1))]).unwrap_err();
        assert_eq!(err.reply_code, 406);
        assert_eq!(
            err.reply_text,
            "PRECONDITION_FAILED - invalid arg 'x-message-ttl' for queue 'q' in vhost '/': {value_negative,-1}"
        );
    }

    /// Wrong types and values above ten years are refused (semantics, common ground, §1).
    #[test]
    fn wrong_type_and_too_large_are_refused() {
        let err = parse(&[("x-message-ttl", FieldValue::LongStr("100".into()))]).unwrap_err();
        assert!(err.reply_text.ends_with("\"expected integer, got longstr\""), "{}", err.reply_text);
        assert!(parse(&[("x-expires", FieldValue::I64(MAX_TIME_MS as i64))]).is_ok());
        let err = parse(&[("x-expires", FieldValue::I64(MAX_TIME_MS as i64 + 1))]).unwrap_err();
        assert!(err.reply_text.contains("'x-expires'"));
    }

    /// x-expires must be positive (semantics §1 "x-expires (> 0)"); x-message-ttl may be 0.
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

    /// A merge of arguments and policies is made sane: a back-off maximum below the delay is
    /// raised to it, and reject-publish-dlx on a quorum queue falls back to drop-head (RabbitMQ).
    #[test]
    fn merged_settings_are_made_sane() {
        let mut args = parse(&[("x-queue-type", FieldValue::LongStr("quorum".into()))]).unwrap();
        args.apply(&QueueSettings {
            redelivery_delay_ms: Some(500),
            redelivery_delay_max_ms: Some(100),
            overflow: Some(Overflow::RejectPublishDlx),
            ..Default::default()
        });
        assert_eq!(args.redelivery_delay_max_ms, Some(500));
        assert_eq!(args.overflow, Overflow::DropHead);
        assert_eq!(args.declared, QueueSettings::default(), "the declaration is kept apart");
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
