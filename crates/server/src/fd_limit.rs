//! The process's file-descriptor limit: raised at start, and the AMQP connection limit fitted
//! under it, so that a flood of sockets hits our limits (which refuse cleanly and leave room for
//! the HTTP API and the store) rather than the fd table (where every `accept` and `open` fails).

use crate::config::FD_RESERVE;

/// Raises the soft `RLIMIT_NOFILE` to the hard limit, as the Erlang VM under RabbitMQ does;
/// returns the soft limit in force afterwards (`None`: unlimited or unknown).
pub fn raise_to_hard_limit() -> Option<u64> {
    use rustix::process::{getrlimit, setrlimit, Resource};
    let limit = getrlimit(Resource::Nofile);
    if limit.current != limit.maximum {
        let raised = rustix::process::Rlimit { current: limit.maximum, maximum: limit.maximum };
        match setrlimit(Resource::Nofile, raised) {
            Ok(()) => {
                tracing::info!(from = ?limit.current, to = ?limit.maximum, "raised the open-files limit");
                return limit.maximum;
            }
            Err(error) => {
                tracing::warn!(%error, soft = ?limit.current, "could not raise the open-files limit")
            }
        }
    }
    limit.current
}

/// Descriptors an AMQPS connection holds: its TCP socket and the two ends of the socket pair
/// its connection loop runs on (`connection/socket.rs`).
pub const TLS_CONNECTION_FDS: u32 = 3;

/// The descriptors left for AMQP connections in `fd_limit` beside `http_sockets` (every running
/// HTTP listener's connection limit) and [`FD_RESERVE`]; `None` when unlimited or unknown.
pub fn amqp_fd_room(fd_limit: Option<u64>, http_sockets: u64) -> Option<usize> {
    let room = fd_limit?.saturating_sub(http_sockets + FD_RESERVE);
    Some(usize::try_from(room).unwrap_or(usize::MAX))
}

/// The AMQP connection limit: `configured`, or less (but at least one) when `fd_room` is smaller.
/// A plain connection holds one descriptor; AMQPS ones hold [`TLS_CONNECTION_FDS`], which the
/// accept loop counts against the room as well.
pub fn amqp_connection_limit(configured: usize, fd_room: Option<usize>) -> usize {
    fd_room.map_or(configured, |room| configured.min(room)).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The AMQP limit leaves room for the HTTP listeners' sockets and the reserve.
    #[test]
    fn amqp_limit_fits_under_the_fd_limit() {
        let limit = |fds, http_sockets| amqp_connection_limit(100_000, amqp_fd_room(fds, http_sockets));
        assert_eq!(limit(None, 2048), 100_000);
        assert_eq!(limit(Some(1 << 20), 2048), 100_000);
        assert_eq!(limit(Some(65_536), 2048), 65_536 - 2048 - FD_RESERVE as usize);
        assert_eq!(limit(Some(65_536), 4096), 65_536 - 4096 - FD_RESERVE as usize);
        assert_eq!(limit(Some(1_024), 2048), 1);
    }
}
