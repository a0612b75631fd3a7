//! `x-delivery-limit`, `x-redelivery-delay`, `x-redelivery-delay-max` (semantics §5): what happens
//! to a message that comes back unacknowledged — visibility ran out, nack/reject with requeue,
//! its channel closed. Each return counts one failed delivery (RabbitMQ's quorum-queue counting).

use super::args::{QueueArgs, ReturnKind};

/// Where a returning message goes.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Return {
    /// Straight back to ready, at its place.
    Ready,
    /// Back after this back-off (it counts as delayed meanwhile).
    After { delay_ms: u64 },
    /// Over its limit: dead-lettered with reason `delivery_limit` at once, no back-off.
    OverLimit,
}

/// Decides the fate of a message whose failed deliveries now number `failures` (>= 1), coming
/// back as `how`. RabbitMQ 4.3's delayed retry, when it holds this kind of return back, sets the
/// wait; else our back-off does.
pub(crate) fn on_return(args: &QueueArgs, failures: u32, how: ReturnKind) -> Return {
    if args.delivery_limit.is_some_and(|limit| u64::from(failures) > limit) {
        return Return::OverLimit;
    }
    if let Some(delay_ms) = args.delayed_retry.and_then(|retry| retry.wait_ms(how, failures)) {
        return Return::After { delay_ms };
    }
    match backoff_ms(args.redelivery_delay_ms, args.redelivery_delay_max_ms, failures) {
        0 => Return::Ready,
        delay_ms => Return::After { delay_ms },
    }
}

/// `min(delay * 2^(failures-1), max)`, saturating; 0 without a delay.
pub(crate) fn backoff_ms(delay_ms: Option<u64>, max_ms: Option<u64>, failures: u32) -> u64 {
    let Some(delay) = delay_ms.filter(|d| *d > 0) else { return 0 };
    let doublings = failures.saturating_sub(1);
    let scaled = if doublings >= 64 { u64::MAX } else { delay.saturating_mul(1u64 << doublings) };
    max_ms.map_or(scaled, |max| scaled.min(max))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(limit: Option<u64>, delay: Option<u64>, max: Option<u64>) -> QueueArgs {
        QueueArgs {
            delivery_limit: limit,
            redelivery_delay_ms: delay,
            redelivery_delay_max_ms: max,
            ..Default::default()
        }
    }

    /// semantics §5: back-off doubles per failure up to the max; 0 means none.
    #[test]
    fn backoff_doubles_up_to_the_max() {
        assert_eq!(backoff_ms(Some(100), Some(1000), 1), 100);
        assert_eq!(backoff_ms(Some(100), Some(1000), 2), 200);
        assert_eq!(backoff_ms(Some(100), Some(1000), 4), 800);
        assert_eq!(backoff_ms(Some(100), Some(1000), 5), 1000);
        assert_eq!(backoff_ms(Some(100), None, 70), u64::MAX);
        assert_eq!(backoff_ms(Some(0), Some(1000), 3), 0);
        assert_eq!(backoff_ms(None, None, 3), 0);
    }

    /// semantics §5: dead-lettered when failures would exceed the limit, at once (no back-off).
    #[test]
    fn over_the_limit_is_dead_lettered_without_backoff() {
        let a = args(Some(2), Some(100), None);
        assert_eq!(on_return(&a, 1, ReturnKind::Returned), Return::After { delay_ms: 100 });
        assert_eq!(on_return(&a, 2, ReturnKind::Failed), Return::After { delay_ms: 200 });
        assert_eq!(on_return(&a, 3, ReturnKind::Returned), Return::OverLimit);
        assert_eq!(on_return(&args(None, None, None), 50, ReturnKind::Failed), Return::Ready);
    }
}
