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

/// The AMQP connection limit that fits in `fd_limit` descriptors beside both HTTP listeners'
/// connections and [`FD_RESERVE`]: `configured`, or less (but at least one) when the fd table is
/// smaller.
pub fn amqp_connection_limit(configured: usize, fd_limit: Option<u64>, http_max_connections: usize) -> usize {
    let Some(fds) = fd_limit else { return configured.max(1) };
    let http = 2 * http_max_connections as u64;
    let room = fds.saturating_sub(http + FD_RESERVE);
    let room = usize::try_from(room).unwrap_or(usize::MAX);
    configured.min(room).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The AMQP limit leaves room for two HTTP listeners and the reserve.
    #[test]
    fn amqp_limit_fits_under_the_fd_limit() {
        assert_eq!(amqp_connection_limit(100_000, None, 1024), 100_000);
        assert_eq!(amqp_connection_limit(100_000, Some(1 << 20), 1024), 100_000);
        assert_eq!(amqp_connection_limit(100_000, Some(65_536), 1024), 65_536 - 2048 - FD_RESERVE as usize);
        assert_eq!(amqp_connection_limit(100_000, Some(1_024), 1024), 1);
    }
}
