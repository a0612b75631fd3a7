//! `x-max-length`, `x-max-length-bytes`, `x-overflow` (semantics §2): limits on a queue's *ready*
//! messages and what gives when a publish would pass them.
//!
//! Leaves to others: dead-lettering what is dropped (reason `maxlen`), nacking rejected publishes.

use super::args::{Overflow, QueueArgs};

/// Whether the queue has a length limit at all (most have none, and need no count).
pub(crate) fn has_limit(args: &QueueArgs) -> bool {
    args.max_length.is_some() || args.max_length_bytes.is_some()
}

/// Whether `ready_count` messages / `ready_bytes` bytes exceed the limits.
pub(crate) fn is_over(args: &QueueArgs, ready_count: usize, ready_bytes: usize) -> bool {
    args.max_length.is_some_and(|max| ready_count as u64 > max)
        || args.max_length_bytes.is_some_and(|max| ready_bytes as u64 > max)
}

/// With a reject-publish policy, whether one more message of `body_size` must be refused.
pub(crate) fn rejects_publish(
    args: &QueueArgs,
    ready_count: usize,
    ready_bytes: usize,
    body_size: usize,
) -> bool {
    args.overflow != Overflow::DropHead && is_over(args, ready_count + 1, ready_bytes + body_size)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(max_length: Option<u64>, max_bytes: Option<u64>, overflow: Overflow) -> QueueArgs {
        QueueArgs { max_length, max_length_bytes: max_bytes, overflow, ..Default::default() }
    }

    /// Either limit alone makes a queue over its limits (semantics §2 max-length).
    #[test]
    fn either_limit_applies() {
        assert!(!is_over(&args(Some(2), None, Overflow::DropHead), 2, 1000));
        assert!(is_over(&args(Some(2), None, Overflow::DropHead), 3, 0));
        assert!(is_over(&args(None, Some(10), Overflow::DropHead), 1, 11));
        assert!(!is_over(&args(None, None, Overflow::DropHead), 1_000_000, 1 << 40));
    }

    /// reject-publish refuses the message that would pass a limit; drop-head never refuses.
    #[test]
    fn reject_publish_refuses_the_overflowing_message() {
        let reject = args(Some(2), None, Overflow::RejectPublish);
        assert!(!rejects_publish(&reject, 1, 0, 5));
        assert!(rejects_publish(&reject, 2, 0, 5));
        assert!(!rejects_publish(&args(Some(2), None, Overflow::DropHead), 2, 0, 5));
        assert!(rejects_publish(&args(None, Some(8), Overflow::RejectPublishDlx), 1, 5, 4));
    }
}
