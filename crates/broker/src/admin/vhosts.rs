//! Creating and deleting virtual hosts, and closing connections, on the management API's behalf.

use hourglass_wire::reply_code::CONNECTION_FORCED;
use hourglass_wire::ShortStr;

use crate::api::{AmqpError, Command, ConnectionId, Effect};
use crate::broker::Broker;
use crate::persist::Changed;
use crate::queue::QueueId;
use crate::time::Timestamp;
use crate::vhost::VHost;

impl Broker {
    /// Names of every vhost, sorted.
    pub fn vhost_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.vhosts.keys().cloned().collect();
        names.sort();
        names
    }

    /// Whether `vhost` has the exchange `name`: a lookup, where listing the vhost's exchanges
    /// would copy them all.
    pub fn has_exchange(&self, vhost: &str, name: &ShortStr) -> bool {
        self.vhosts.get(vhost).is_some_and(|v| v.exchanges.contains_key(name))
    }

    /// Creates a vhost with the standard exchanges; returns false when it already existed.
    pub fn add_vhost(&mut self, name: &str) -> bool {
        if self.vhosts.contains_key(name) {
            return false;
        }
        self.vhosts.insert(name.to_owned(), VHost::new());
        self.vhosts_changed(name);
        true
    }

    /// Sets the vhost's `max-queues` (`None`: no limit); queues it already has stay. False
    /// when there is no such vhost. Not written to the definitions: the management store keeps
    /// the limits with the vhost records and sets them again at start.
    pub fn set_vhost_max_queues(&mut self, name: &str, max_queues: Option<u64>) -> bool {
        match self.vhosts.get_mut(name) {
            Some(vhost) => {
                vhost.max_queues = max_queues;
                true
            }
            None => false,
        }
    }

    /// RabbitMQ's `would_exceed_queue_limit` for a definitions import: how many of `names` the
    /// vhost lacks, when creating them would pass its `max-queues` — `(adding, limit, current)`.
    pub fn would_exceed_queue_limit(&self, vhost: &str, names: &[String]) -> Option<(u64, u64, u64)> {
        let state = self.vhosts.get(vhost)?;
        let limit = state.max_queues?;
        let mut new: Vec<&String> = names.iter().filter(|name| state.queue_id(name).is_none()).collect();
        new.sort();
        new.dedup();
        let (adding, current) = (new.len() as u64, state.queues.len() as u64);
        (adding > 0 && adding + current > limit).then_some((adding, limit, current))
    }

    /// Deletes a vhost: its connections are closed with 320 CONNECTION_FORCED, its queues deleted
    /// (their consumers get basic.cancel). Returns false when there was no such vhost.
    pub fn delete_vhost(&mut self, name: &str, now: Timestamp) -> bool {
        if !self.vhosts.contains_key(name) {
            return false;
        }
        let connections: Vec<ConnectionId> =
            self.connections.iter().filter(|(_, c)| c.info.vhost == name).map(|(id, _)| *id).collect();
        for conn in connections {
            self.close_connection(conn, "vhost deleted", now);
        }
        let queues: Vec<QueueId> = self.queues.values().filter(|q| q.vhost == name).map(|q| q.id).collect();
        for id in queues {
            self.delete_queue(id);
        }
        self.forget_tracing(name);
        self.vhosts.remove(name);
        // Everything stored under it goes with it (its policies too).
        self.vhosts_changed(name);
        true
    }

    /// Writes the vhost's definition (or, deleted, the absence of everything under it).
    fn vhosts_changed(&mut self, name: &str) {
        self.definition_changed(Changed::Vhost(name.to_owned()));
        self.flush_definitions();
    }

    /// Closes a client connection with 320 CONNECTION_FORCED and `reason`, releasing what it
    /// held now. Returns false when there is no such connection.
    pub fn close_connection(&mut self, conn: ConnectionId, reason: &str, now: Timestamp) -> bool {
        if !self.connections.contains(&conn) {
            return false;
        }
        let error = AmqpError::new(CONNECTION_FORCED, reason);
        self.handle_command(Command::ConnectionClosed { conn }, now);
        self.emit(Effect::ConnectionError { conn, error });
        true
    }
}
