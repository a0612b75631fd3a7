//! One message's place in one queue: the shared message plus this queue's bookkeeping.
//!
//! An entry exists per queued message, so it is kept to 48 bytes (ADR 0006): the optional times
//! and the store id are stored without `Option`'s extra word each.

use std::num::NonZeroU64;
use std::sync::Arc;

use crate::message::Message;
use crate::time::Timestamp;

/// A message's position in its queue; requeued messages go back to their old position.
pub(crate) type Seq = u64;

#[derive(Clone, Debug)]
pub(crate) struct Entry {
    pub seq: Seq,
    pub message: Arc<Message>,
    /// The message's id in the store (`persist.rs`) when it is persistent and its queue durable;
    /// kept from publish to settle, across delays and requeues (unlike `seq`). Store ids start
    /// at 1.
    persist_id: Option<NonZeroU64>,
    /// When the message expires (contract §1): fixed when it became ready, kept across requeues.
    expires_at: OptionalTime,
    /// When the message became ready in this queue (its TTL counts from here); none while it has
    /// never been ready (a delayed message not yet due).
    ready_at: OptionalTime,
    /// Deliveries that came back unacknowledged (contract §5, `x-delivery-count`).
    pub delivery_count: u32,
    /// Set once the message has been delivered and came back (AMQP basic.deliver `redelivered`).
    pub redelivered: bool,
}

impl Entry {
    /// A message entering its queue: ready since `ready_at` (with its TTL deadline), or, with
    /// `ready_at` `None`, waiting for a delay.
    pub fn new(
        seq: Seq,
        message: Arc<Message>,
        ready_at: Option<Timestamp>,
        expires_at: Option<Timestamp>,
        persist_id: Option<u64>,
    ) -> Self {
        Entry {
            seq,
            message,
            persist_id: persist_id.and_then(NonZeroU64::new),
            expires_at: OptionalTime::new(expires_at),
            ready_at: OptionalTime::new(ready_at),
            delivery_count: 0,
            redelivered: false,
        }
    }

    pub fn body_size(&self) -> usize {
        self.message.body_size()
    }

    pub fn persist_id(&self) -> Option<u64> {
        self.persist_id.map(NonZeroU64::get)
    }

    pub fn expires_at(&self) -> Option<Timestamp> {
        self.expires_at.get()
    }

    pub fn ready_at(&self) -> Option<Timestamp> {
        self.ready_at.get()
    }
}

/// An `Option<Timestamp>` in 8 bytes: `u64::MAX` stands for none. No real time gets there:
/// deadlines are at most 10 years after a wall-clock `now` (`args::MAX_TIME_MS`).
#[derive(Clone, Copy, PartialEq, Eq)]
struct OptionalTime(u64);

impl OptionalTime {
    const NONE: u64 = u64::MAX;

    fn new(time: Option<Timestamp>) -> Self {
        let ms = time.map_or(Self::NONE, Timestamp::as_millis);
        debug_assert!(time.is_none() || ms != Self::NONE, "a time at the end of time");
        OptionalTime(ms)
    }

    fn get(self) -> Option<Timestamp> {
        (self.0 != Self::NONE).then(|| Timestamp::from_millis(self.0))
    }
}

impl std::fmt::Debug for OptionalTime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.get().fmt(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every queued message has an entry: 48 bytes, so a regression fails here first.
    #[test]
    fn entry_stays_small() {
        assert!(std::mem::size_of::<Entry>() <= 48, "Entry is {} bytes", std::mem::size_of::<Entry>());
    }

    /// Absent and present times and store ids read back as they were given.
    #[test]
    fn optional_fields_round_trip() {
        let message = Arc::new(Message::new(
            Default::default(),
            Default::default(),
            Default::default(),
            Default::default(),
        ));
        let t = Timestamp::from_millis;
        let ready = Entry::new(3, message.clone(), Some(t(0)), Some(t(1_700_000_000_000)), Some(1));
        assert_eq!(
            (ready.ready_at(), ready.expires_at(), ready.persist_id()),
            (Some(t(0)), Some(t(1_700_000_000_000)), Some(1))
        );
        let waiting = Entry::new(4, message, None, None, None);
        assert_eq!((waiting.ready_at(), waiting.expires_at(), waiting.persist_id()), (None, None, None));
    }
}
