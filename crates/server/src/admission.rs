//! Admitting accepted AMQP sockets: each takes a connection slot and its file descriptors (a
//! socket over the limits is closed at once, and the refusals logged at most once per
//! ten seconds, by `mgmt`'s `RefusalLog`), then runs as a connection task, plain or over TLS, with what
//! every connection is started with.

use std::net::SocketAddr;
use std::sync::Arc;

use hourglass_broker::ConnectionId;
use hourglass_mgmt::tls::LiveTlsConfig;
use hourglass_mgmt::RefusalLog;
use tokio::net::TcpStream;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use crate::connection::{self, ConnectionContext};
use crate::fd_limit;

/// The limits accepted sockets are admitted under, and what their connections start with.
pub struct Admission {
    next_id: u64,
    max_connections: usize,
    /// One per connection, `max_connections` of them.
    slots: Arc<Semaphore>,
    /// The file descriptors AMQP connections may hold (a TLS one holds more than one).
    fds: Arc<Semaphore>,
    refusals: RefusalLog,
    /// A new connection's context: its id, peer and local address are set for each.
    template: ConnectionContext,
    /// The AMQPS listener's live TLS settings.
    tls: Option<LiveTlsConfig>,
}

impl Admission {
    /// `fd_room`: the descriptors left for AMQP connections (`None`: no limit known).
    pub fn new(
        max_connections: usize,
        fd_room: Option<usize>,
        template: ConnectionContext,
        tls: Option<LiveTlsConfig>,
    ) -> Admission {
        let fd_room = fd_room.unwrap_or(Semaphore::MAX_PERMITS).min(Semaphore::MAX_PERMITS);
        Admission {
            next_id: 1,
            max_connections,
            slots: Arc::new(Semaphore::new(max_connections)),
            fds: Arc::new(Semaphore::new(fd_room)),
            refusals: RefusalLog::new("AMQP"),
            template,
            tls,
        }
    }

    /// Admits a socket accepted from `peer` (`over_tls`: on the AMQPS listener) into
    /// `connections`, or closes it at once when the limits are reached.
    pub fn admit(
        &mut self,
        stream: TcpStream,
        peer: SocketAddr,
        over_tls: bool,
        connections: &mut JoinSet<()>,
    ) {
        // On the dual-stack socket an IPv4 client is `::ffff:a.b.c.d`: name it as IPv4 in logs,
        // connection names and per-address login limits.
        let peer = SocketAddr::new(peer.ip().to_canonical(), peer.port());
        // The name says where the client reached us, as RabbitMQ's
        // `127.0.0.1:46300 -> 127.0.0.1:5672`, not the wildcard bind address.
        let local = match stream.local_addr() {
            Ok(local) => SocketAddr::new(local.ip().to_canonical(), local.port()),
            Err(_) => SocketAddr::from(([0, 0, 0, 0], 0)),
        };
        let cost = if over_tls { fd_limit::TLS_CONNECTION_FDS } else { 1 };
        let (Ok(slot), Ok(held_fds)) =
            (self.slots.clone().try_acquire_owned(), self.fds.clone().try_acquire_many_owned(cost))
        else {
            // Closed at once: the socket costs nothing more than the accept.
            self.refusals.record(peer, self.max_connections);
            return;
        };
        let id = ConnectionId(self.next_id);
        self.next_id += 1;
        let cx = ConnectionContext { id, peer, local, ..self.template.clone() };
        let acceptor = over_tls.then(|| self.tls.as_ref().map(|live| live.acceptor())).flatten();
        connections.spawn(async move {
            match acceptor {
                Some(acceptor) => connection::run_tls(stream, acceptor, cx).await,
                None => connection::run(stream, cx).await,
            }
            drop((slot, held_fds));
        });
    }
}
