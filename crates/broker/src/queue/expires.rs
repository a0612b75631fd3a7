//! `x-expires` (semantics §1): a queue unused for that long — no consumers, no basic.get, no
//! redeclare — is deleted. One deadline per queue.
//!
//! Leaves to others: deleting the queue (`Broker::delete_queue`), noting use (the methods).

use crate::time::Timestamp;

/// When an unused queue expires, given when it was last used; `None` while it has consumers.
pub(crate) fn deadline(
    expires_ms: Option<u64>,
    last_used: Timestamp,
    has_consumers: bool,
) -> Option<Timestamp> {
    match expires_ms {
        Some(ms) if !has_consumers => Some(last_used.saturating_add_millis(ms)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An idle queue expires x-expires after its last use; consumers keep it alive (semantics §1).
    #[test]
    fn idle_queue_expires_after_its_last_use() {
        let used = Timestamp::from_millis(1_000);
        assert_eq!(deadline(Some(500), used, false), Some(Timestamp::from_millis(1_500)));
        assert_eq!(deadline(Some(500), used, true), None);
        assert_eq!(deadline(None, used, false), None);
    }
}
