//! AMQP heartbeats (AMQP 0-9-1 §4.2.7), timed the way RabbitMQ's `rabbit_heartbeat` times them.
//!
//! Sending: when nothing was written for half the negotiated interval, send a heartbeat frame (half,
//! so a peer checking every interval always sees traffic). Receiving: when nothing at all arrived
//! for two intervals, the peer is dead and the connection is dropped without a closing handshake.
//! Disabled when the client's tune-ok says 0. Time is an argument; this keeps only timestamps.
//!
//! While the server stops reading the socket (a resource alarm blocks a publisher), the peer's
//! silence says nothing: its heartbeats wait unread in the socket. Receiving is then not
//! monitored, and when reading resumes the peer has two fresh intervals (RabbitMQ's reader pauses
//! and resumes `rabbit_heartbeat`'s receive monitor the same way). Sending goes on meanwhile.

use hourglass_broker::Timestamp;

/// How many silent intervals we tolerate from the peer before declaring it dead (RabbitMQ and the
/// AMQP spec: "after two missed heartbeats").
pub const MISSED_HEARTBEATS_LIMIT: u64 = 2;

/// Heartbeat timers of one connection (when we last wrote is the output buffer's to know).
#[derive(Clone, Debug)]
pub(crate) struct Heartbeat {
    interval_ms: u64,
    last_received: Timestamp,
    /// True while the driver does not read the socket: the peer cannot be judged dead.
    receive_paused: bool,
}

/// What a heartbeat timer wants done at `now`.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum HeartbeatAction {
    None,
    /// Write a heartbeat frame: we have been silent for half an interval.
    Send,
    /// The peer has been silent for [`MISSED_HEARTBEATS_LIMIT`] intervals.
    PeerDead,
}

impl Heartbeat {
    /// Timers for a negotiated interval of `interval_s` seconds (0 disables heartbeats).
    pub(crate) fn new(interval_s: u16, now: Timestamp) -> Self {
        Heartbeat { interval_ms: u64::from(interval_s) * 1000, last_received: now, receive_paused: false }
    }

    /// The driver stopped (`true`) or resumed (`false`) reading the peer's bytes. On resuming,
    /// the silence is counted from `now`.
    pub(crate) fn pause_receive(&mut self, paused: bool, now: Timestamp) {
        if self.receive_paused && !paused {
            self.on_received(now);
        }
        self.receive_paused = paused;
    }

    pub(crate) fn on_received(&mut self, now: Timestamp) {
        self.last_received = self.last_received.max(now);
    }

    /// The action due at `now`, given when we last wrote anything; a dead peer wins over a
    /// heartbeat to send.
    pub(crate) fn poll(&self, now: Timestamp, last_sent: Timestamp) -> HeartbeatAction {
        match (self.dead_deadline(), self.send_deadline(last_sent)) {
            (Some(dead), _) if now >= dead => HeartbeatAction::PeerDead,
            (_, Some(send)) if now >= send => HeartbeatAction::Send,
            _ => HeartbeatAction::None,
        }
    }

    /// The earliest moment `poll` may return something other than `None`.
    pub(crate) fn next_deadline(&self, last_sent: Timestamp) -> Option<Timestamp> {
        match (self.dead_deadline(), self.send_deadline(last_sent)) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// The negotiated interval in seconds (0 = disabled).
    pub(crate) fn interval_s(&self) -> u64 {
        self.interval_ms / 1000
    }

    fn send_deadline(&self, last_sent: Timestamp) -> Option<Timestamp> {
        (self.interval_ms > 0).then(|| last_sent.saturating_add_millis(self.interval_ms / 2))
    }

    fn dead_deadline(&self) -> Option<Timestamp> {
        (self.interval_ms > 0 && !self.receive_paused).then(|| {
            self.last_received.saturating_add_millis(self.interval_ms.saturating_mul(MISSED_HEARTBEATS_LIMIT))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: u64) -> Timestamp {
        Timestamp::from_millis(ms)
    }

    /// A zero interval never asks for anything.
    #[test]
    fn zero_interval_disables_heartbeats() {
        let hb = Heartbeat::new(0, at(0));
        assert_eq!(hb.next_deadline(at(0)), None);
        assert_eq!(hb.poll(at(u64::MAX), at(0)), HeartbeatAction::None);
    }

    /// Sending is due at half the interval after the last write; death at two intervals.
    #[test]
    fn deadlines_are_half_and_two_intervals() {
        let mut hb = Heartbeat::new(10, at(1_000));
        assert_eq!(hb.next_deadline(at(1_000)), Some(at(6_000)));
        assert_eq!(hb.poll(at(5_999), at(1_000)), HeartbeatAction::None);
        assert_eq!(hb.poll(at(6_000), at(1_000)), HeartbeatAction::Send);
        assert_eq!(hb.next_deadline(at(6_000)), Some(at(11_000)));
        assert_eq!(hb.poll(at(21_000), at(20_000)), HeartbeatAction::PeerDead);
        hb.on_received(at(21_000));
        assert_eq!(hb.poll(at(21_000), at(20_000)), HeartbeatAction::None);
    }

    /// While receiving is paused the peer is never dead, however long it is silent, but our
    /// heartbeats stay due; on resuming it has two full intervals from then.
    #[test]
    fn paused_receiving_never_declares_the_peer_dead() {
        let mut hb = Heartbeat::new(2, at(0));
        hb.pause_receive(true, at(1_000));
        assert_eq!(hb.poll(at(60_000), at(59_000)), HeartbeatAction::Send);
        assert_eq!(hb.poll(at(60_000), at(60_000)), HeartbeatAction::None);
        assert_eq!(hb.next_deadline(at(60_000)), Some(at(61_000)), "only our next heartbeat");
        hb.pause_receive(false, at(60_000));
        assert_eq!(hb.poll(at(63_999), at(63_999)), HeartbeatAction::None);
        assert_eq!(hb.poll(at(64_000), at(63_999)), HeartbeatAction::PeerDead);
    }
}
