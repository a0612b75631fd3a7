//! One message's place in one queue: the message (in memory, or only where the store keeps it)
//! plus this queue's bookkeeping.
//!
//! An entry exists per queued message, so it is kept to 72 bytes (ADR 0006, ADR 0007, ADR 0015):
//! the optional times and the store id are stored without `Option`'s extra word each, and the
//! payload is 32 bytes (the tag and the largest variant, 24 bytes).

use std::num::{NonZeroU32, NonZeroU64};
use std::sync::Arc;

use super::packed::Packed;
use crate::message::{Hot, Message};
use crate::persist::RecordLocation;
use crate::time::Timestamp;

/// A message's position in its queue; requeued messages go back to their old position.
pub(crate) type Seq = u64;

/// The message of an entry: held in memory, packed into its record bytes (ADR 0015), or paged
/// out to the store (ADR 0007).
#[derive(Clone, Debug)]
pub(crate) enum Payload {
    Resident(Arc<Message>),
    Packed(Packed),
    Paged(Paged),
}

/// What a queue keeps of a paged-out message: where its record is and the few properties the
/// queue reads without the body (priority, expiration, sizes). 24 bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C)]
pub(crate) struct Paged {
    hot: Hot,
    segment: u32,
    offset: u32,
    body_size: u32,
    record_bytes: NonZeroU32,
}

impl Paged {
    /// `None` when the location does not fit the compact form (a segment number past 2^32 or an
    /// empty record: neither is written by the store) or the body is over 4 GiB.
    pub fn new(location: RecordLocation, hot: Hot, body_size: usize) -> Option<Paged> {
        Some(Paged {
            hot,
            segment: u32::try_from(location.segment).ok()?,
            offset: location.offset,
            body_size: u32::try_from(body_size).ok()?,
            record_bytes: NonZeroU32::new(location.record_bytes)?,
        })
    }

    /// Where its record starts in its segment.
    pub fn offset(&self) -> u32 {
        self.offset
    }

    /// The same message facts for a record at `offset` of the same segment.
    pub fn at_offset(self, offset: u32) -> Paged {
        Paged { offset, ..self }
    }

    /// Whether `other` differs from this one only in where its record starts in the same
    /// segment.
    pub fn same_but_offset(&self, other: &Paged) -> bool {
        Paged { offset: other.offset, ..*self } == *other
    }

    pub fn location(&self) -> RecordLocation {
        RecordLocation {
            segment: u64::from(self.segment),
            offset: self.offset,
            record_bytes: self.record_bytes.get(),
        }
    }
}

impl Payload {
    pub fn hot(&self) -> Hot {
        match self {
            Payload::Resident(message) => message.hot(),
            Payload::Packed(packed) => packed.hot(),
            Payload::Paged(paged) => paged.hot,
        }
    }

    pub fn body_size(&self) -> usize {
        match self {
            Payload::Resident(message) => message.body_size(),
            Payload::Packed(packed) => packed.body_size(),
            Payload::Paged(paged) => paged.body_size as usize,
        }
    }
}

#[derive(Clone, Debug)]
pub(crate) struct Entry {
    pub seq: Seq,
    pub payload: Payload,
    /// The message's id in the store (`persist.rs`) when it is persistent and its queue durable;
    /// kept from publish to settle, across delays and requeues (unlike `seq`). Store ids start
    /// at 1.
    persist_id: Option<NonZeroU64>,
    /// When the message expires (semantics §1): fixed when it became ready, kept across requeues.
    expires_at: OptionalTime,
    /// When the message became ready in this queue (its TTL counts from here); none while it has
    /// never been ready (a delayed message not yet due).
    ready_at: OptionalTime,
    /// Deliveries that came back unacknowledged (semantics §5, `x-delivery-count`).
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
        Entry::with_payload(seq, Payload::Resident(message), ready_at, expires_at, persist_id)
    }

    /// [`Entry::new`] for a message in memory or paged out.
    pub fn with_payload(
        seq: Seq,
        payload: Payload,
        ready_at: Option<Timestamp>,
        expires_at: Option<Timestamp>,
        persist_id: Option<u64>,
    ) -> Self {
        Entry {
            seq,
            payload,
            persist_id: persist_id.and_then(NonZeroU64::new),
            expires_at: OptionalTime::new(expires_at),
            ready_at: OptionalTime::new(ready_at),
            delivery_count: 0,
            redelivered: false,
        }
    }

    /// The message when it is in memory. Entries handed out for delivery (`take_for_consumer`)
    /// and the ones a channel holds unacknowledged always are.
    pub fn resident(&self) -> Option<&Arc<Message>> {
        match &self.payload {
            Payload::Resident(message) => Some(message),
            Payload::Packed(_) | Payload::Paged(_) => None,
        }
    }

    /// Where the message is in the store when it is paged out (only there).
    pub fn paged_at(&self) -> Option<RecordLocation> {
        match &self.payload {
            Payload::Paged(paged) => Some(paged.location()),
            _ => None,
        }
    }

    pub fn body_size(&self) -> usize {
        self.payload.body_size()
    }

    pub fn persist_id(&self) -> Option<u64> {
        self.persist_id.map(NonZeroU64::get)
    }

    /// Stores the message under another id (its message was rewritten: `annotate.rs`).
    pub fn set_persist_id(&mut self, persist_id: u64) {
        self.persist_id = NonZeroU64::new(persist_id);
    }

    pub fn expires_at(&self) -> Option<Timestamp> {
        self.expires_at.get()
    }

    pub fn ready_at(&self) -> Option<Timestamp> {
        self.ready_at.get()
    }

    /// TTL 0: it expires the moment it becomes ready (semantics §1: delivered at once to a
    /// consumer that can take it, else expired).
    pub fn expires_on_arrival(&self) -> bool {
        self.expires_at().is_some_and(|at| at <= self.ready_at().unwrap_or_default())
    }

    /// Gives the message another TTL deadline (a queue's changed retention applied to it).
    pub fn set_expires_at(&mut self, expires_at: Option<Timestamp>) {
        self.expires_at = OptionalTime::new(expires_at);
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

    /// Every queued message has an entry: 72 bytes, whatever its payload, so a regression fails
    /// here first.
    #[test]
    fn entry_stays_small() {
        assert_eq!(std::mem::size_of::<Payload>(), 32);
        assert!(std::mem::size_of::<Entry>() <= 72, "Entry is {} bytes", std::mem::size_of::<Entry>());
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

    /// A paged entry keeps its location, sizes and hot properties; locations that do not fit
    /// the compact form are refused rather than truncated.
    #[test]
    fn paged_entry_keeps_what_the_queue_reads() {
        let location = RecordLocation { segment: 7, offset: 4096, record_bytes: 1100 };
        let hot = Hot::new(Some(5000), 3, true);
        let paged = Paged::new(location, hot, 1024).unwrap();
        assert_eq!(paged.location(), location);
        let entry = Entry::with_payload(1, Payload::Paged(paged), None, None, Some(9));
        assert_eq!(
            (entry.body_size(), entry.payload.hot().priority(), entry.payload.hot().expiration_ms()),
            (1024, 3, Some(5000))
        );
        assert!(entry.resident().is_none());
        assert!(Paged::new(RecordLocation { segment: 1 << 32, ..location }, hot, 1).is_none());
        assert!(Paged::new(RecordLocation { record_bytes: 0, ..location }, hot, 1).is_none());
    }
}
