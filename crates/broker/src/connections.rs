//! The broker's connections and their channels: the one owner of which connections and
//! channels are open, of each connection's list of its channels and exclusive queues, and of
//! the count of channel openings that tells a reopened channel from the one before it (receipt
//! handles name it, `receipts.rs`).
//!
//! A channel opens through [`Connections::open_channel`] and closes through
//! [`Connections::close_channel`], which keep the connection's list of channels with the map,
//! so releasing a connection finds every channel it has. What happens inside a channel (tags,
//! unacked deliveries, qos, confirm and tx modes) is the `Channel`'s own API (`channel.rs`).

use crate::api::{ChannelId, ConnectionId, ConnectionInfo};
use crate::broker::IdMap;
use crate::channel::Channel;
use crate::queue::QueueId;

/// A connection as the broker knows it.
#[derive(Debug)]
pub(crate) struct ConnectionState {
    pub info: ConnectionInfo,
    /// Its open channels (kept by [`Connections`]).
    channels: Vec<ChannelId>,
    /// Exclusive queues this connection declared (some may be gone already): deleted with it,
    /// without a scan of every queue at each close (issue #12, finding 7: each management job
    /// opens and closes a connection, so the scan made a 30,000-queue import quadratic).
    pub exclusive_queues: Vec<QueueId>,
    /// The last route its publishes took (`route_cache.rs`).
    pub route_cache: crate::route_cache::RouteCache,
}

impl ConnectionState {
    /// How many channels it has open.
    pub fn channel_count(&self) -> usize {
        self.channels.len()
    }
}

/// A channel.open on a channel already open.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct AlreadyOpen;

#[derive(Debug, Default)]
pub(crate) struct Connections {
    by_id: IdMap<ConnectionId, ConnectionState>,
    channels: IdMap<(ConnectionId, ChannelId), Channel>,
    /// Channels opened so far: the last one's `Channel::opening`.
    openings: u64,
}

impl Connections {
    /// Connection `conn` is open, as `info`. Ids are the driver's and never reused while
    /// open; one opened again anyway starts afresh, and its earlier channels are no longer
    /// listed under it.
    pub fn open(&mut self, conn: ConnectionId, info: ConnectionInfo) {
        let state = ConnectionState {
            info,
            channels: Vec::new(),
            exclusive_queues: Vec::new(),
            route_cache: Default::default(),
        };
        self.by_id.insert(conn, state);
    }

    /// Forgets connection `conn`, if open, handing over the exclusive queues it declared. Its
    /// channels ([`Self::channels_of`]) are closed first: a channel left open here would
    /// outlive its connection.
    pub fn close(&mut self, conn: ConnectionId) -> Option<Vec<QueueId>> {
        let state = self.by_id.remove(&conn)?;
        debug_assert!(state.channels.is_empty(), "a connection's channels close before it does");
        Some(state.exclusive_queues)
    }

    /// The channels connection `conn` has open.
    pub fn channels_of(&self, conn: ConnectionId) -> &[ChannelId] {
        self.by_id.get(&conn).map_or(&[], |state| &state.channels)
    }

    pub fn get(&self, conn: &ConnectionId) -> Option<&ConnectionState> {
        self.by_id.get(conn)
    }

    pub fn get_mut(&mut self, conn: &ConnectionId) -> Option<&mut ConnectionState> {
        self.by_id.get_mut(conn)
    }

    pub fn contains(&self, conn: &ConnectionId) -> bool {
        self.by_id.contains_key(conn)
    }

    pub fn iter(&self) -> impl Iterator<Item = (&ConnectionId, &ConnectionState)> {
        self.by_id.iter()
    }

    pub fn values_mut(&mut self) -> impl Iterator<Item = &mut ConnectionState> {
        self.by_id.values_mut()
    }

    /// Opens channel `ch` of connection `conn`: `Ok(false)` when the connection is not open
    /// (it is closing; nothing to answer).
    pub fn open_channel(&mut self, conn: ConnectionId, ch: ChannelId) -> Result<bool, AlreadyOpen> {
        let Some(state) = self.by_id.get_mut(&conn) else { return Ok(false) };
        if self.channels.contains_key(&(conn, ch)) {
            return Err(AlreadyOpen);
        }
        state.channels.push(ch);
        self.openings += 1;
        self.channels.insert((conn, ch), Channel::new(self.openings));
        Ok(true)
    }

    /// Closes channel `ch` of connection `conn`, handing it over to be released.
    pub fn close_channel(&mut self, conn: ConnectionId, ch: ChannelId) -> Option<Channel> {
        let channel = self.channels.remove(&(conn, ch))?;
        if let Some(state) = self.by_id.get_mut(&conn) {
            state.channels.retain(|c| *c != ch);
        }
        Some(channel)
    }

    pub fn channel(&self, conn: ConnectionId, ch: ChannelId) -> Option<&Channel> {
        self.channels.get(&(conn, ch))
    }

    pub fn channel_mut(&mut self, conn: ConnectionId, ch: ChannelId) -> Option<&mut Channel> {
        self.channels.get_mut(&(conn, ch))
    }

    pub fn has_channel(&self, conn: ConnectionId, ch: ChannelId) -> bool {
        self.channels.contains_key(&(conn, ch))
    }

    /// Every open channel, with its connection and number.
    pub fn channels(&self) -> impl Iterator<Item = (&(ConnectionId, ChannelId), &Channel)> {
        self.channels.iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info() -> ConnectionInfo {
        crate::admin::synthetic_connection("guest", "/", "test", crate::permissions::Permissions::full())
    }

    /// A connection's list of channels follows its opens and closes, so that releasing the
    /// connection releases every channel it still has, and nothing else.
    #[test]
    fn a_connection_names_the_channels_it_has_open() {
        let mut connections = Connections::default();
        let (conn, other) = (ConnectionId(1), ConnectionId(2));
        connections.open(conn, info());
        connections.open(other, info());
        for ch in [1, 2, 3] {
            assert_eq!(connections.open_channel(conn, ChannelId(ch)), Ok(true));
        }
        assert_eq!(connections.open_channel(other, ChannelId(1)), Ok(true));
        assert_eq!(connections.open_channel(conn, ChannelId(2)), Err(AlreadyOpen));
        assert!(connections.close_channel(conn, ChannelId(2)).is_some());
        assert!(connections.close_channel(conn, ChannelId(2)).is_none());
        assert_eq!(connections.channels_of(conn), [ChannelId(1), ChannelId(3)]);

        for ch in [1, 3] {
            assert!(connections.close_channel(conn, ChannelId(ch)).is_some());
        }
        connections.get_mut(&conn).unwrap().exclusive_queues.push(QueueId(9));
        assert_eq!(connections.close(conn), Some(vec![QueueId(9)]));
        assert!(connections.close(conn).is_none());
        assert_eq!(connections.open_channel(conn, ChannelId(4)), Ok(false), "a closed connection");
        assert!(connections.has_channel(other, ChannelId(1)));
    }

    /// Each channel opened gets the next opening, so a channel reopened under the same number
    /// is told from the one before it (a receipt handle of the old one does not act on it).
    #[test]
    fn a_reopened_channel_is_a_new_opening() {
        let mut connections = Connections::default();
        let conn = ConnectionId(1);
        connections.open(conn, info());
        connections.open_channel(conn, ChannelId(1)).unwrap();
        let first = connections.channel(conn, ChannelId(1)).unwrap().opening;
        connections.close_channel(conn, ChannelId(1));
        connections.open_channel(conn, ChannelId(1)).unwrap();
        assert!(connections.channel(conn, ChannelId(1)).unwrap().opening > first);
    }
}
