//! RabbitMQ's per-vhost `max-connections` and per-user `max-connections` / `max-channels`
//! limits: what is open now, and the check at connection.open and channel.open.
//!
//! The limits themselves belong to the [`Authenticator`] (the management store keeps them with
//! the user and vhost records and saves them); this file counts what is open, across every
//! connection of the process ([`Occupancy`], shared through `SessionConfig`), and decides. A
//! connection holds a [`Seat`] from connection.open-ok until it closes; the seat counts the
//! connection's channels for its user. Limits are read when they are checked, so a change
//! through the API applies to the next connection.open or channel.open, as in RabbitMQ
//! (`rabbit_vhost_limit`, `rabbit_auth_backend_internal:is_over_*_limit`); what is already open
//! stays open. Nothing here runs per message.
//!
//! A limit of 0 allows nothing; no limit (RabbitMQ: absent or negative) is `None`. The vhost's
//! `max-queues` is the broker's (`hourglass_broker`, queue.declare).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::auth::Authenticator;

/// The limits that apply to one user opening one vhost, as the [`Authenticator`] knows them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClientLimits {
    /// The vhost's `max-connections`.
    pub vhost_max_connections: Option<u64>,
    /// The user's `max-connections`.
    pub user_max_connections: Option<u64>,
}

/// Which limit a connection.open or channel.open ran into, with RabbitMQ's reply text detail.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LimitReached {
    /// `rabbit_reader:is_over_vhost_connection_limit`.
    VhostConnections { vhost: String, user: String, limit: u64 },
    /// `rabbit_reader:is_over_user_connection_limit`.
    UserConnections { user: String, limit: u64 },
    /// `rabbit_reader:create_channel`, the user's `max-channels`.
    UserChannels { user: String, limit: u64 },
}

impl std::fmt::Display for LimitReached {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LimitReached::VhostConnections { vhost, user, limit } => write!(
                f,
                "access to vhost '{vhost}' refused for user '{user}': connection limit ({limit}) is reached"
            ),
            LimitReached::UserConnections { user, limit } => {
                write!(f, "connection refused for user '{user}': user connection limit ({limit}) is reached")
            }
            LimitReached::UserChannels { user, limit } => write!(
                f,
                "number of channels opened for user '{user}' has reached the maximum allowed user limit of ({limit})"
            ),
        }
    }
}

/// Open connections per vhost and per user, and open channels per user, for the whole process.
#[derive(Debug, Default)]
pub struct Occupancy {
    counts: Mutex<Counts>,
}

#[derive(Debug, Default)]
struct Counts {
    vhost_connections: HashMap<String, u64>,
    users: HashMap<String, UserCounts>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct UserCounts {
    connections: u64,
    channels: u64,
}

impl Occupancy {
    /// Admits a connection of `user` to `vhost` unless that would pass one of `limits` (the
    /// vhost's first, then the user's, in RabbitMQ's order). The check and the count are one
    /// step, so two connections racing for the last place cannot both get it.
    pub fn admit(
        self: &Arc<Self>,
        user: &str,
        vhost: &str,
        limits: ClientLimits,
    ) -> Result<Seat, LimitReached> {
        let mut counts = self.lock();
        let in_vhost = counts.vhost_connections.get(vhost).copied().unwrap_or(0);
        if let Some(limit) = limits.vhost_max_connections.filter(|&limit| in_vhost >= limit) {
            return Err(LimitReached::VhostConnections {
                vhost: vhost.to_owned(),
                user: user.to_owned(),
                limit,
            });
        }
        let of_user = counts.users.get(user).copied().unwrap_or_default();
        if let Some(limit) = limits.user_max_connections.filter(|&limit| of_user.connections >= limit) {
            return Err(LimitReached::UserConnections { user: user.to_owned(), limit });
        }
        *counts.vhost_connections.entry(vhost.to_owned()).or_default() += 1;
        counts.users.entry(user.to_owned()).or_default().connections += 1;
        Ok(Seat { occupancy: self.clone(), user: user.to_owned(), vhost: vhost.to_owned(), channels: 0 })
    }

    /// Open (admitted, not yet closed) connections in `vhost`.
    pub fn vhost_connections(&self, vhost: &str) -> u64 {
        self.lock().vhost_connections.get(vhost).copied().unwrap_or(0)
    }

    /// Open connections and channels of `user`.
    pub fn user_connections_and_channels(&self, user: &str) -> (u64, u64) {
        let counts = self.lock().users.get(user).copied().unwrap_or_default();
        (counts.connections, counts.channels)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Counts> {
        // Counters only; a panic elsewhere mid-update cannot leave them worse than off by one.
        self.counts.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// One admitted connection's place in the [`Occupancy`], with its channels; released on drop.
#[derive(Debug)]
pub struct Seat {
    occupancy: Arc<Occupancy>,
    user: String,
    vhost: String,
    /// Channels of this connection counted against its user.
    channels: u64,
}

impl Seat {
    /// Counts one more channel for the user unless its `max-channels` (read now from
    /// `authenticator`) is reached.
    pub(crate) fn open_channel(&mut self, authenticator: &dyn Authenticator) -> Result<(), LimitReached> {
        let limit = authenticator.user_max_channels(&self.user);
        let mut counts = self.occupancy.lock();
        let of_user = counts.users.entry(self.user.clone()).or_default();
        if let Some(limit) = limit.filter(|&limit| of_user.channels >= limit) {
            return Err(LimitReached::UserChannels { user: self.user.clone(), limit });
        }
        of_user.channels += 1;
        self.channels += 1;
        Ok(())
    }

    /// A channel counted by [`Seat::open_channel`] is gone.
    pub(crate) fn close_channel(&mut self) {
        if self.channels == 0 {
            return;
        }
        self.channels -= 1;
        if let Some(of_user) = self.occupancy.lock().users.get_mut(&self.user) {
            of_user.channels = of_user.channels.saturating_sub(1);
        }
    }
}

impl Drop for Seat {
    fn drop(&mut self) {
        let mut counts = self.occupancy.lock();
        if let Some(n) = counts.vhost_connections.get_mut(&self.vhost) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                counts.vhost_connections.remove(&self.vhost);
            }
        }
        if let Some(of_user) = counts.users.get_mut(&self.user) {
            of_user.connections = of_user.connections.saturating_sub(1);
            of_user.channels = of_user.channels.saturating_sub(self.channels);
            if *of_user == UserCounts::default() {
                counts.users.remove(&self.user);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::StaticUsers;

    fn limits(vhost: Option<u64>, user: Option<u64>) -> ClientLimits {
        ClientLimits { vhost_max_connections: vhost, user_max_connections: user }
    }

    /// A vhost limit counts every user's connections to it; the seat's drop frees the place.
    #[test]
    fn vhost_limit_counts_connections_until_their_seats_drop() {
        let occupancy = Arc::new(Occupancy::default());
        let a = occupancy.admit("a", "/", limits(Some(2), None)).unwrap();
        let _b = occupancy.admit("b", "/", limits(Some(2), None)).unwrap();
        let refused = occupancy.admit("c", "/", limits(Some(2), None)).unwrap_err();
        let text = "access to vhost '/' refused for user 'c': connection limit (2) is reached";
        assert_eq!(refused.to_string(), text);
        let _other_vhost = occupancy.admit("c", "v2", limits(Some(2), None)).unwrap();
        drop(a);
        assert_eq!(occupancy.vhost_connections("/"), 1);
        assert!(occupancy.admit("c", "/", limits(Some(2), None)).is_ok());
    }

    /// 0 allows nothing; no limit allows anything; the vhost limit is checked before the user's.
    #[test]
    fn zero_refuses_and_none_allows() {
        let occupancy = Arc::new(Occupancy::default());
        let both = occupancy.admit("u", "/", limits(Some(0), Some(0))).unwrap_err();
        assert!(matches!(both, LimitReached::VhostConnections { limit: 0, .. }), "{both:?}");
        let user = occupancy.admit("u", "/", limits(None, Some(0))).unwrap_err();
        let text = "connection refused for user 'u': user connection limit (0) is reached";
        assert_eq!(user.to_string(), text);
        let seats: Vec<Seat> =
            (0..100).map(|_| occupancy.admit("u", "/", limits(None, None)).unwrap()).collect();
        assert_eq!(occupancy.user_connections_and_channels("u"), (100, 0));
        drop(seats);
        assert_eq!(occupancy.user_connections_and_channels("u"), (0, 0));
    }

    /// Channels count per user across connections; a dropped seat gives back its channels.
    #[test]
    fn user_channels_count_across_connections() {
        struct TwoChannels;
        impl Authenticator for TwoChannels {
            fn authenticate(&self, u: &str, p: &str, l: bool) -> Result<(), crate::LoginRefused> {
                StaticUsers::default().authenticate(u, p, l)
            }
            fn vhost_access(&self, u: &str, v: &str) -> crate::VhostAccess {
                StaticUsers::default().vhost_access(u, v)
            }
            fn user_max_channels(&self, _user: &str) -> Option<u64> {
                Some(2)
            }
        }
        let occupancy = Arc::new(Occupancy::default());
        let mut first = occupancy.admit("u", "/", ClientLimits::default()).unwrap();
        let mut second = occupancy.admit("u", "/", ClientLimits::default()).unwrap();
        first.open_channel(&TwoChannels).unwrap();
        second.open_channel(&TwoChannels).unwrap();
        let refused = second.open_channel(&TwoChannels).unwrap_err();
        let text = "number of channels opened for user 'u' has reached the maximum allowed user limit of (2)";
        assert_eq!(refused.to_string(), text);
        second.close_channel();
        first.open_channel(&TwoChannels).unwrap();
        drop(first);
        assert_eq!(occupancy.user_connections_and_channels("u"), (1, 0));
        second.open_channel(&TwoChannels).unwrap();
    }
}
