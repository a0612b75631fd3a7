//! Requests about messages waiting on time: delayed ones (listed, found by `message_id`,
//! cancelled, rescheduled) and deliveries in flight (listed, their visibility changed).

use std::collections::HashMap;

use super::{sealed::Sealed, Question, Request};
use crate::admin::{DelayedError, DelayedKey, DelayedMatches, DelayedPeek, DelayedSlice, InFlightDelivery};
use crate::broker::Broker;
use crate::redelivery::VisibilityError;
use crate::time::Timestamp;

/// When a rescheduled message falls due.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum DueAt {
    /// This many milliseconds after the request runs.
    After(u64),
    /// At this time.
    At(Timestamp),
}

impl DueAt {
    fn at(self, now: Timestamp) -> Timestamp {
        match self {
            DueAt::After(ms) => now.saturating_add_millis(ms),
            DueAt::At(at) => at,
        }
    }
}

/// The first `limit` delayed messages of a queue in due order (the far tier's spill runs and
/// the paged ones' records for the caller to read: [`DelayedPeek::read_stored`]), and the
/// broker's time.
pub struct PeekDelayed {
    pub vhost: String,
    pub queue: String,
    pub limit: usize,
}

impl Sealed for PeekDelayed {}
impl Question for PeekDelayed {
    type Answer = (Result<DelayedPeek, DelayedError>, Timestamp);
    fn answer(self, broker: &Broker, now: Timestamp) -> Self::Answer {
        (broker.peek_delayed(&self.vhost, &self.queue, self.limit), now)
    }
}

/// One slice of a search for the delayed messages whose `message_id` is `message_id`
/// (`Broker::delayed_with_message_id`).
pub struct DelayedWithMessageId {
    pub vhost: String,
    pub queue: String,
    pub message_id: String,
    pub cursor: Option<DelayedKey>,
    pub slice: DelayedSlice,
}

impl Sealed for DelayedWithMessageId {}
impl Question for DelayedWithMessageId {
    type Answer = Result<DelayedMatches, DelayedError>;
    fn answer(self, broker: &Broker, _: Timestamp) -> Self::Answer {
        broker.delayed_with_message_id(&self.vhost, &self.queue, &self.message_id, self.cursor, self.slice)
    }
}

/// Drops delayed message `id` before it is due.
pub struct CancelDelayed {
    pub vhost: String,
    pub queue: String,
    pub id: u64,
}

impl Sealed for CancelDelayed {}
impl Request for CancelDelayed {
    type Answer = Result<(), DelayedError>;
    fn apply(self, broker: &mut Broker, _: Timestamp) -> Self::Answer {
        broker.cancel_delayed(&self.vhost, &self.queue, self.id)
    }
}

/// Moves delayed message `id` to fall due at `due`.
pub struct RescheduleDelayed {
    pub vhost: String,
    pub queue: String,
    pub id: u64,
    pub due: DueAt,
}

impl Sealed for RescheduleDelayed {}
impl Request for RescheduleDelayed {
    type Answer = Result<(), DelayedError>;
    fn apply(self, broker: &mut Broker, now: Timestamp) -> Self::Answer {
        broker.reschedule_delayed(&self.vhost, &self.queue, self.id, self.due.at(now), now)
    }
}

/// Drops the delayed messages found at `keys`: how many were still waiting.
pub struct CancelDelayedKeys {
    pub vhost: String,
    pub queue: String,
    pub keys: Vec<DelayedKey>,
}

impl Sealed for CancelDelayedKeys {}
impl Request for CancelDelayedKeys {
    type Answer = usize;
    fn apply(self, broker: &mut Broker, _: Timestamp) -> usize {
        let (vhost, queue) = (&self.vhost, &self.queue);
        self.keys.into_iter().filter(|key| broker.cancel_delayed_at(vhost, queue, *key).is_ok()).count()
    }
}

/// Moves the delayed messages found at `keys` to fall due at `due`: how many were still
/// waiting.
pub struct RescheduleDelayedKeys {
    pub vhost: String,
    pub queue: String,
    pub keys: Vec<DelayedKey>,
    pub due: DueAt,
}

impl Sealed for RescheduleDelayedKeys {}
impl Request for RescheduleDelayedKeys {
    type Answer = usize;
    fn apply(self, broker: &mut Broker, now: Timestamp) -> usize {
        let (vhost, queue, due) = (&self.vhost, &self.queue, self.due.at(now));
        self.keys
            .into_iter()
            .filter(|key| broker.reschedule_delayed_at(vhost, queue, *key, due, now).is_ok())
            .count()
    }
}

/// Where a connection is: its peer and local addresses, and whether it is over TLS.
pub type ConnectionEnds = (String, String, bool);

/// A queue's deliveries in flight, as [`InFlightWithPeers`] answers.
pub struct InFlight {
    /// The first deliveries and how many there are in all (`None`: no such queue).
    pub deliveries: Option<(Vec<InFlightDelivery>, usize)>,
    /// Every open connection's ends, by connection id.
    pub peers: HashMap<u64, ConnectionEnds>,
    pub now: Timestamp,
}

/// The first `limit` deliveries in flight from a queue, with the ends of the connections that
/// hold them.
pub struct InFlightWithPeers {
    pub vhost: String,
    pub queue: String,
    pub limit: usize,
}

impl Sealed for InFlightWithPeers {}
impl Question for InFlightWithPeers {
    type Answer = InFlight;
    fn answer(self, broker: &Broker, now: Timestamp) -> InFlight {
        let peers = broker
            .list_connections()
            .into_iter()
            .map(|c| (c.id.0, (c.info.peer, c.info.local, c.info.login.tls)))
            .collect();
        InFlight { deliveries: broker.peek_in_flight(&self.vhost, &self.queue, self.limit), peers, now }
    }
}

/// Makes a delivery in flight visible again after `timeout_ms` (SQS's ChangeMessageVisibility
/// by receipt handle).
pub struct ChangeVisibility {
    pub vhost: String,
    pub queue: String,
    pub receipt_handle: String,
    pub timeout_ms: u64,
}

impl Sealed for ChangeVisibility {}
impl Request for ChangeVisibility {
    type Answer = Result<(), VisibilityError>;
    fn apply(self, broker: &mut Broker, now: Timestamp) -> Self::Answer {
        broker.change_visibility(&self.vhost, &self.queue, &self.receipt_handle, self.timeout_ms, now)
    }
}
