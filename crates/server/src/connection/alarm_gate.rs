//! The resource alarms as one connection sees them (RabbitMQ's reader states `blocking` and
//! `blocked`): whether its socket may be read, connection.blocked / unblocked for the client, and
//! its share of [`InboundContent`] (bytes held for unfinished messages, bytes published).
//!
//! While an alarm is up every connection is read as usual (RabbitMQ's `blocking` state) until it
//! publishes: that publish, and whatever the connection sent after it, is held — neither routed
//! nor confirmed — and the socket is no longer read (`blocked`), until the alarm clears and the
//! held commands go to the broker in order (issue 27: RabbitMQ's reader stops at the publish).
//! A connection in the middle of a message is not read either (issue 12: its unfinished body is
//! what takes the memory). Having published before the alarm blocks nothing: its gets, acks,
//! consumes and deliveries go on, as consumers are what drain the memory. The session's
//! heartbeat monitor pauses while a connection is not read.
//!
//! connection.blocked goes to a connection when it is blocked, at its first publish under the
//! alarm, and connection.unblocked when the alarm clears, as RabbitMQ's reader sends them. A
//! connection that does not publish is told nothing; one opened during an alarm hears of it when
//! it publishes, after its client has had the chance to register a listener (the Java client's
//! `BlockedConnection#initialBlock`).

use std::sync::Arc;

use hourglass_broker::{Command, ConnectionId, Effect, Timestamp};
use hourglass_mgmt::resources::ResourceWatch;
use hourglass_session::Connection;

use crate::alarm::InboundContent;

pub(super) struct AlarmGate {
    resources: ResourceWatch,
    inbound: Arc<InboundContent>,
    /// Any alarm up, as last seen.
    alarm: bool,
    /// False once the monitor is gone (the last status stands).
    live: bool,
    /// A publish made under the alarm and every command after it, in order: sent when the
    /// alarm clears. At most what one read of the socket held, since it is not read meanwhile.
    held: Vec<Command>,
    reading_blocked: bool,
    /// What the session was last told: it can pass connection.blocked on only once open.
    told_blocked: bool,
    /// This connection's share of `inbound.held_bytes()`.
    held_bytes: u64,
    /// Body bytes published since the last `after_commands`.
    published_bytes: u64,
}

impl AlarmGate {
    pub(super) fn new(resources: ResourceWatch, inbound: Arc<InboundContent>) -> Self {
        let alarm = resources.borrow().any_alarm();
        AlarmGate {
            resources,
            inbound,
            alarm,
            live: true,
            held: Vec::new(),
            reading_blocked: false,
            told_blocked: false,
            held_bytes: 0,
            published_bytes: 0,
        }
    }

    /// Before the task waits: picks up an alarm change (even when a busy socket would keep the
    /// select from choosing [`AlarmGate::changed`] first) and decides whether the socket may be
    /// read, telling the session when that changes. True while reading is blocked.
    pub(super) fn reading_blocked(&mut self, session: &mut Connection, now: Timestamp) -> bool {
        if self.live && self.resources.has_changed().unwrap_or(false) {
            self.alarm = self.resources.borrow_and_update().any_alarm();
        }
        let blocked = self.blocks(session);
        if blocked != self.reading_blocked {
            self.reading_blocked = blocked;
            session.set_reading_blocked(blocked, now);
        }
        blocked
    }

    /// Whether the alarm blocks this connection: one is up and it published under it (or is
    /// mid-message).
    fn blocks(&self, session: &Connection) -> bool {
        self.alarm && (!self.held.is_empty() || session.unfinished_content().messages > 0)
    }

    /// The session's new commands: those to send now, in order; the rest are held (a publish
    /// under the alarm and everything after it, or everything while something is held).
    pub(super) fn admit(&mut self, mut commands: Vec<Command>) -> Vec<Command> {
        let held_from = if !self.held.is_empty() {
            0
        } else if self.alarm {
            commands.iter().position(|c| matches!(c, Command::Publish { .. })).unwrap_or(commands.len())
        } else {
            commands.len()
        };
        if held_from < commands.len() {
            self.held.extend(commands.drain(held_from..));
        }
        commands
    }

    /// Once the alarm has cleared: the held commands, to send before any newer one.
    pub(super) fn released(&mut self) -> Vec<Command> {
        if self.alarm {
            return Vec::new();
        }
        std::mem::take(&mut self.held)
    }

    /// Whether [`AlarmGate::changed`] can still resolve.
    pub(super) fn live(&self) -> bool {
        self.live
    }

    /// Resolves when an alarm is raised or cleared (cancel-safe).
    pub(super) async fn changed(&mut self) {
        self.live = self.resources.changed().await.is_ok();
        if self.live {
            self.alarm = self.resources.borrow_and_update().any_alarm();
        }
    }

    /// After the session ran: connection.blocked / unblocked for the client, and the bytes its
    /// unfinished messages hold. Yields when that woke the monitor, so it samples before this
    /// task reads on (a socket that always has data would otherwise keep the task running for a
    /// whole cooperative budget, ~128 reads or 8 MiB).
    pub(super) async fn after_session(
        &mut self,
        session: &mut Connection,
        conn: ConnectionId,
        now: Timestamp,
    ) {
        self.tell(session, conn, now);
        let held_now = session.unfinished_content().received_bytes;
        if held_now != self.held_bytes {
            let stepped = self.inbound.update_held(self.held_bytes, held_now);
            self.held_bytes = held_now;
            if stepped {
                tokio::task::yield_now().await;
            }
        }
    }

    /// connection.blocked / unblocked when whether the alarm blocks this connection changed since
    /// the client was last told (after the session ran, and after its commands: a first publish
    /// under an alarm blocks it).
    pub(super) fn tell(&mut self, session: &mut Connection, conn: ConnectionId, now: Timestamp) {
        let blocked = self.blocks(session);
        if self.told_blocked != blocked && session.opened() {
            self.told_blocked = blocked;
            let reason = if blocked { self.resources.borrow().blocked_reason() } else { None };
            session.handle_effect(Effect::Blocked { conn, reason }, now);
        }
    }

    /// Commands on their way to the broker: counts the bytes they publish.
    pub(super) fn on_commands(&mut self, commands: &[Command]) {
        for command in commands {
            if let Command::Publish { publish, .. } = command {
                self.published_bytes += publish.body.len() as u64;
            }
        }
    }

    /// After the commands went: counts what was published; yields when that woke the monitor.
    pub(super) async fn after_commands(&mut self) {
        let bytes = std::mem::take(&mut self.published_bytes);
        if bytes > 0 && self.inbound.add_published(bytes) {
            tokio::task::yield_now().await;
        }
    }

    /// The connection is over: what it held is gone.
    pub(super) fn release(&mut self) {
        let _ = self.inbound.update_held(self.held_bytes, 0);
        self.held_bytes = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hourglass_broker::{ChannelId, Publish};
    use hourglass_mgmt::resources::ResourceStatus;
    use hourglass_wire::method::{BasicAck, Method};

    const CONN: ConnectionId = ConnectionId(1);

    fn ack(tag: u64) -> Command {
        Command::Method {
            conn: CONN,
            channel: ChannelId(1),
            method: Method::from(BasicAck { delivery_tag: tag, multiple: false }),
        }
    }

    fn publish(body: &'static [u8]) -> Command {
        Command::Publish {
            conn: CONN,
            channel: ChannelId(1),
            publish: Box::new(Publish {
                exchange: Default::default(),
                routing_key: Default::default(),
                mandatory: false,
                properties: Default::default(),
                body: body.into(),
            }),
        }
    }

    /// Under an alarm a batch goes up to its first publish; that publish and all after it (in
    /// this batch and the next) are held, and released in order once the alarm clears.
    #[test]
    fn a_batch_is_held_from_its_first_publish_under_an_alarm() {
        let (alarm, resources) =
            tokio::sync::watch::channel(ResourceStatus { mem_alarm: true, ..Default::default() });
        let mut gate = AlarmGate::new(resources, Arc::new(InboundContent::default()));
        let sent = gate.admit(vec![ack(1), publish(b"a"), ack(2)]);
        assert_eq!(sent, vec![ack(1)]);
        assert_eq!(gate.admit(vec![ack(3)]), vec![], "behind a held publish");
        assert_eq!(gate.released(), vec![], "the alarm is still up");
        alarm.send_modify(|status| status.mem_alarm = false);
        gate.alarm = gate.resources.borrow_and_update().any_alarm();
        assert_eq!(gate.released(), vec![publish(b"a"), ack(2), ack(3)]);
        assert_eq!(gate.admit(vec![publish(b"b")]), vec![publish(b"b")]);
    }

    /// Without an alarm a batch goes whole, and its published bytes are counted.
    #[test]
    fn without_an_alarm_a_batch_goes_whole() {
        let mut gate =
            AlarmGate::new(hourglass_mgmt::resources::unmonitored(), Arc::new(InboundContent::default()));
        let batch = vec![publish(b"abc"), ack(1), publish(b"de")];
        let sent = gate.admit(batch.clone());
        gate.on_commands(&sent);
        assert_eq!((sent, gate.published_bytes), (batch, 5));
    }
}
