//! The process's file-descriptor limit: raised at start, and the connection limits fitted under
//! it, so that a flood of sockets hits our limits (which refuse cleanly and leave room for the
//! store) rather than the fd table (where every `accept` and `open` fails). A limit too low to
//! serve [`AMQP_CONNECTIONS_MIN`] connections stops the start, naming `ulimit -n` (issue 22: at
//! `ulimit -n 2048` the HTTP listeners' reservations left room for one AMQP connection).

use crate::config::FD_RESERVE;

/// The fewest AMQP connections worth starting with. Below it the open-files limit, not the
/// broker, decides what can connect, and the operator is better told at once (RabbitMQ serves
/// about 850 connections at 1,024 descriptors).
pub const AMQP_CONNECTIONS_MIN: usize = 100;
/// The fewest sockets a low fd limit may shrink an HTTP listener's connection limit to: enough
/// for the UI, a Prometheus scraper and a few API clients.
pub const HTTP_CONNECTIONS_MIN: usize = 32;
/// The share of the descriptors left after the reserve that the HTTP listeners may take, all
/// together, when they do not fit at their configured limits: AMQP clients are the broker's
/// work, HTTP its control panel.
const HTTP_SHARE_DIVISOR: usize = 4;

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

/// How the descriptors are shared out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FdBudget {
    /// Descriptors left for AMQP connections (`None`: unlimited or unknown).
    pub amqp_room: Option<usize>,
    /// Each HTTP listener's connection limit: the configured one, or less when it does not fit.
    pub http_connections: usize,
}

/// The fd limit leaves too little room to serve (`budget`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "the open-files limit is {fd_limit} (the soft limit raised to the hard one): it leaves room \
     for {amqp_room} AMQP connections, fewer than {AMQP_CONNECTIONS_MIN}; raise it to {needed} or \
     more (`ulimit -n 65536` before starting, LimitNOFILE= in a systemd unit, --ulimit nofile= \
     for docker)"
)]
pub struct FdLimitTooLow {
    pub fd_limit: u64,
    pub amqp_room: usize,
    /// The smallest limit that would serve [`AMQP_CONNECTIONS_MIN`].
    pub needed: u64,
}

/// Shares `fd_limit` out: [`FD_RESERVE`] for the store and the listeners, then `http_listeners`
/// listeners at `http_configured` sockets each (or, when that does not fit, a quarter of the
/// rest between them, but never under [`HTTP_CONNECTIONS_MIN`]), the rest for AMQP.
pub fn budget(
    fd_limit: Option<u64>,
    http_listeners: usize,
    http_configured: usize,
) -> Result<FdBudget, FdLimitTooLow> {
    let Some(fd_limit) = fd_limit else {
        return Ok(FdBudget { amqp_room: None, http_connections: http_configured });
    };
    let available = usize::try_from(fd_limit.saturating_sub(FD_RESERVE)).unwrap_or(usize::MAX);
    let http_fits = http_listeners.saturating_mul(http_configured).saturating_add(AMQP_CONNECTIONS_MIN);
    let http_connections = if available >= http_fits {
        http_configured
    } else {
        let share = available / HTTP_SHARE_DIVISOR / http_listeners.max(1);
        http_configured.min(share.max(HTTP_CONNECTIONS_MIN))
    };
    let http_sockets = http_listeners * http_connections;
    let amqp_room = available.saturating_sub(http_sockets);
    if amqp_room < AMQP_CONNECTIONS_MIN {
        let needed = FD_RESERVE + (http_sockets + AMQP_CONNECTIONS_MIN) as u64;
        return Err(FdLimitTooLow { fd_limit, amqp_room, needed });
    }
    Ok(FdBudget { amqp_room: Some(amqp_room), http_connections })
}

/// The AMQP connection limit: `configured`, or less when `fd_room` is smaller. A plain
/// connection holds one descriptor; AMQPS ones hold [`TLS_CONNECTION_FDS`], which the accept
/// loop counts against the room as well.
pub fn amqp_connection_limit(configured: usize, fd_room: Option<usize>) -> usize {
    fd_room.map_or(configured, |room| configured.min(room)).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limit(fds: Option<u64>, listeners: usize) -> Result<(usize, usize), FdLimitTooLow> {
        let budget = budget(fds, listeners, 1_024)?;
        Ok((amqp_connection_limit(100_000, budget.amqp_room), budget.http_connections))
    }

    /// With room, the HTTP listeners keep their limits and AMQP gets the rest.
    #[test]
    fn amqp_limit_fits_under_a_roomy_fd_limit() {
        assert_eq!(limit(None, 2), Ok((100_000, 1_024)));
        assert_eq!(limit(Some(1 << 20), 2), Ok((100_000, 1_024)));
        assert_eq!(limit(Some(65_536), 2), Ok((65_536 - 2_048 - FD_RESERVE as usize, 1_024)));
        assert_eq!(limit(Some(65_536), 4), Ok((65_536 - 4_096 - FD_RESERVE as usize, 1_024)));
    }

    /// Issue 22 finding 6: at `ulimit -n 2048` (and 1,024) the HTTP listeners shrink to a
    /// quarter of the room and AMQP keeps hundreds of connections, not one.
    #[test]
    fn a_low_fd_limit_shrinks_http_and_keeps_amqp_usable() {
        assert_eq!(limit(Some(2_048), 2), Ok((1_344, 224)));
        assert_eq!(limit(Some(1_024), 2), Ok((576, 96)));
        assert_eq!(limit(Some(1_024), 4), Ok((576, 48)));
    }

    /// Below what serves a hundred connections the start is refused, naming the limit needed.
    #[test]
    fn an_fd_limit_too_low_to_serve_is_refused() {
        let error = limit(Some(400), 2).unwrap_err();
        assert_eq!(error, FdLimitTooLow { fd_limit: 400, amqp_room: 80, needed: 420 });
        assert!(error.to_string().contains("ulimit -n"), "{error}");
        assert!(limit(Some(420), 2).is_ok());
    }
}
