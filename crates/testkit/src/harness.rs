//! `TestBroker`: a broker, a manual clock and helpers to open connections and channels.

use std::time::Duration;

use bytes::Bytes;
use hourglass_broker::{
    Broker, BrokerConfig, ChannelId, ClientCapabilities, Command, ConnectionId, ConnectionInfo, Effect,
    Publish,
};
use hourglass_wire::{BasicProperties, ChannelOpen, FieldTable, Method, ShortStr};

use crate::clock::ManualClock;

/// Rounds of answers `TestBroker::answer_reads` performs at most (each answers every read asked
/// for; a backlog of N paged messages read a few at a time takes about N / few).
const READ_ROUNDS_MAX: usize = 1_000_000;

/// A channel the harness opened: the connection and channel number.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Chan {
    pub conn: ConnectionId,
    pub channel: ChannelId,
}

pub struct TestBroker {
    pub broker: Broker,
    pub clock: ManualClock,
    next_conn: u64,
}

impl TestBroker {
    pub fn new() -> Self {
        Self::with_config(BrokerConfig::default())
    }

    pub fn with_config(config: BrokerConfig) -> Self {
        TestBroker { broker: Broker::new(config), clock: ManualClock::new(), next_conn: 1 }
    }

    /// Opens a connection as `guest` on vhost `/`, with every client capability.
    pub fn connect(&mut self) -> ConnectionId {
        self.connect_as("guest", hourglass_broker::Permissions::full())
    }

    /// Opens a connection as `guest` on vhost `/` whose client announced only these capabilities.
    pub fn connect_with(&mut self, capabilities: ClientCapabilities) -> ConnectionId {
        self.open_connection("guest", hourglass_broker::Permissions::full(), capabilities)
    }

    /// Opens a connection as `guest` on vhost `/`, with every capability, as an AMQP 1.0
    /// connection (whose links are channels) logs in.
    pub fn connect_amqp1(&mut self) -> ConnectionId {
        let every = ClientCapabilities { consumer_cancel_notify: true, connection_blocked: true };
        let login =
            hourglass_broker::LoginInfo { protocol: hourglass_broker::AMQP_1_0, ..Default::default() };
        self.open_connection_with("guest", hourglass_broker::Permissions::full(), every, login)
    }

    /// Opens a connection as `user` on vhost `/` with these permissions.
    pub fn connect_as(
        &mut self,
        user: &str,
        permissions: std::sync::Arc<hourglass_broker::Permissions>,
    ) -> ConnectionId {
        let every = ClientCapabilities { consumer_cancel_notify: true, connection_blocked: true };
        self.open_connection(user, permissions, every)
    }

    fn open_connection(
        &mut self,
        user: &str,
        permissions: std::sync::Arc<hourglass_broker::Permissions>,
        capabilities: ClientCapabilities,
    ) -> ConnectionId {
        self.open_connection_with(user, permissions, capabilities, Default::default())
    }

    fn open_connection_with(
        &mut self,
        user: &str,
        permissions: std::sync::Arc<hourglass_broker::Permissions>,
        capabilities: ClientCapabilities,
        login: hourglass_broker::LoginInfo,
    ) -> ConnectionId {
        let conn = ConnectionId(self.next_conn);
        self.next_conn += 1;
        let info = ConnectionInfo {
            user: user.to_owned(),
            vhost: "/".to_owned(),
            peer: format!("127.0.0.1:{}", 40000 + conn.0),
            local: "127.0.0.1:5672".to_owned(),
            client_properties: FieldTable::new(),
            capabilities,
            frame_max: 131072,
            channel_max: 2047,
            heartbeat_s: 60,
            permissions,
            may_impersonate: false,
            login,
        };
        self.command(Command::ConnectionOpen { conn, info: Box::new(info) });
        conn
    }

    /// Opens channel `number` on `conn`; panics unless the broker answers channel.open-ok.
    pub fn open_channel(&mut self, conn: ConnectionId, number: u16) -> Chan {
        let chan = Chan { conn, channel: ChannelId(number) };
        let effects = self.call(chan, ChannelOpen {});
        assert!(
            matches!(effects.as_slice(), [Effect::Send { method, .. }] if matches!(**method, Method::ChannelOpenOk(_))),
            "channel.open answered with {effects:?}"
        );
        chan
    }

    /// A new connection with channel 1 open.
    pub fn channel(&mut self) -> Chan {
        let conn = self.connect();
        self.open_channel(conn, 1)
    }

    /// Sends a method on a channel; returns the effects it caused.
    pub fn call(&mut self, chan: Chan, method: impl Into<Method>) -> Vec<Effect> {
        self.command(Command::Method { conn: chan.conn, channel: chan.channel, method: method.into() })
    }

    /// Publishes `body` with default properties.
    pub fn publish(&mut self, chan: Chan, exchange: &str, routing_key: &str, body: &[u8]) -> Vec<Effect> {
        self.publish_with(chan, exchange, routing_key, BasicProperties::default(), body, false)
    }

    pub fn publish_with(
        &mut self,
        chan: Chan,
        exchange: &str,
        routing_key: &str,
        properties: BasicProperties,
        body: &[u8],
        mandatory: bool,
    ) -> Vec<Effect> {
        let publish = Publish {
            exchange: short(exchange),
            routing_key: short(routing_key),
            mandatory,
            properties: properties.into(),
            body: Bytes::copy_from_slice(body),
        };
        self.command(Command::Publish { conn: chan.conn, channel: chan.channel, publish: Box::new(publish) })
    }

    pub fn close_connection(&mut self, conn: ConnectionId) -> Vec<Effect> {
        self.command(Command::ConnectionClosed { conn })
    }

    /// Applies a command at the current time; returns the effects it caused.
    pub fn command(&mut self, command: Command) -> Vec<Effect> {
        self.broker.handle_command(command, self.clock.now());
        self.drain()
    }

    /// Moves the clock forward and fires what fell due; returns the effects.
    pub fn advance(&mut self, by: Duration) -> Vec<Effect> {
        let now = self.clock.advance(by);
        self.broker.handle_timeout(now);
        self.drain()
    }

    fn drain(&mut self) -> Vec<Effect> {
        self.answer_reads();
        self.poll_effects()
    }

    /// The effects the broker has out now, without answering the reads it asked for (a test
    /// that answers them itself, or leaves them out).
    pub fn poll_effects(&mut self) -> Vec<Effect> {
        std::iter::from_fn(|| self.broker.poll_effect()).collect()
    }

    /// Performs the reads the broker asked for, and those their answers ask for, until none
    /// is left (`answer_spill_reads`, `answer_message_reads`).
    /// Bounded: a broker that keeps asking for reads its answers never satisfy fails the test
    /// here instead of hanging it.
    pub fn answer_reads(&mut self) {
        for _ in 0..READ_ROUNDS_MAX {
            if self.answer_spill_reads() + self.answer_message_reads() == 0 {
                return;
            }
        }
        panic!("reads still asked for after {READ_ROUNDS_MAX} rounds of answers");
    }

    /// Performs the reads of paged messages the broker asked for and hands their outcomes
    /// back, at once and at the same time; returns how many it answered.
    pub fn answer_message_reads(&mut self) -> usize {
        let reads: Vec<_> = std::iter::from_fn(|| self.broker.poll_message_read()).collect();
        for read in &reads {
            let messages = read.perform(self.broker.message_source().as_deref());
            self.broker.handle_message_read(read.clone(), messages, self.clock.now());
        }
        reads.len()
    }

    /// Performs the spill reads the broker asked for and hands their outcomes back, at once
    /// and at the same time (the server's driver answers them a little later); returns how
    /// many it answered.
    pub fn answer_spill_reads(&mut self) -> usize {
        let reads: Vec<_> = std::iter::from_fn(|| self.broker.poll_spill_read()).collect();
        for read in &reads {
            let chunk = match self.broker.spill_files() {
                Some(files) => files.read_at(&read.file, read.offset, read.len),
                None => Err("no spill files".to_owned()),
            };
            self.broker.handle_spill_read(read.clone(), chunk, self.clock.now());
        }
        reads.len()
    }
}

impl Default for TestBroker {
    fn default() -> Self {
        Self::new()
    }
}

/// A shortstr from a test literal.
pub fn short(s: &str) -> ShortStr {
    ShortStr::try_from(s).expect("test strings are short")
}
