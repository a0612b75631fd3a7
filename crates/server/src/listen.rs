//! Binding the three listeners, before anything touches the data directory, so a second broker
//! on the same ports fails at once with one line. The default bind is `::` with `IPV6_V6ONLY`
//! off — IPv6 and IPv4 (as mapped addresses) on one socket, as RabbitMQ listens — and falls back
//! to `0.0.0.0` with a warning on a machine without IPv6.

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use socket2::{Domain, Protocol, Socket, Type};
use tokio::net::TcpListener;

use crate::config::Bind;

/// Connections the kernel queues before `accept`: Linux's `somaxconn` default (4096 since 5.4)
/// caps it anyway; 1024 (tokio's own default) absorbs a reconnect storm of a thousand clients.
const LISTEN_BACKLOG: i32 = 1024;

/// A listener that could not be bound: names the address and the reason in words.
#[derive(Debug, thiserror::Error)]
#[error("cannot listen on {addr} ({what}): {reason}")]
pub struct ListenError {
    pub addr: SocketAddr,
    /// `AMQP`, `HTTP API` or `metrics`.
    pub what: &'static str,
    pub reason: String,
}

/// The address the listeners bind: the explicit one, or `::` (dual stack) if this machine can
/// open an IPv6 socket, else `0.0.0.0`.
pub fn resolve_bind(bind: Bind) -> IpAddr {
    match bind {
        Bind::Addr(ip) => ip,
        Bind::DualStack => match probe_ipv6() {
            Ok(()) => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
            Err(error) => {
                tracing::warn!(%error, "no IPv6 on this machine: listening on 0.0.0.0 (IPv4 only)");
                IpAddr::V4(Ipv4Addr::UNSPECIFIED)
            }
        },
    }
}

/// Binds `ip:port` for `what`; `::` accepts IPv4 too (`IPV6_V6ONLY` off, whatever the sysctl says).
pub fn bind(ip: IpAddr, port: u16, what: &'static str) -> Result<TcpListener, ListenError> {
    let addr = SocketAddr::new(ip, port);
    let listener = bind_std(addr).map_err(|e| ListenError { addr, what, reason: reason(&e) })?;
    TcpListener::from_std(listener).map_err(|e| ListenError { addr, what, reason: reason(&e) })
}

fn bind_std(addr: SocketAddr) -> io::Result<std::net::TcpListener> {
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    if addr.is_ipv6() && addr.ip().is_unspecified() {
        socket.set_only_v6(false)?;
    }
    // As tokio's `TcpListener::bind`: a restart may bind while old connections sit in TIME_WAIT.
    socket.set_reuse_address(true)?;
    socket.bind(&addr.into())?;
    socket.listen(LISTEN_BACKLOG)?;
    socket.set_nonblocking(true)?;
    Ok(socket.into())
}

/// Whether an IPv6 socket can be opened and bound here (a kernel booted with `ipv6.disable=1`
/// refuses the socket; a host without any IPv6 address refuses the bind).
fn probe_ipv6() -> io::Result<()> {
    let socket = Socket::new(Domain::IPV6, Type::STREAM, Some(Protocol::TCP))?;
    socket.bind(&SocketAddr::new(IpAddr::V6(Ipv6Addr::UNSPECIFIED), 0).into())
}

/// The OS error in a few words, without "(os error 98)".
fn reason(error: &io::Error) -> String {
    match error.kind() {
        io::ErrorKind::AddrInUse => "address in use".to_owned(),
        io::ErrorKind::AddrNotAvailable => "no such address on this machine".to_owned(),
        io::ErrorKind::PermissionDenied => "permission denied".to_owned(),
        _ => error.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A port already bound gives one line naming the address and "address in use".
    #[tokio::test]
    async fn port_in_use_is_one_clear_line() {
        let first = bind(IpAddr::V4(Ipv4Addr::LOCALHOST), 0, "AMQP").unwrap();
        let port = first.local_addr().unwrap().port();
        let error = bind(IpAddr::V4(Ipv4Addr::LOCALHOST), port, "AMQP").unwrap_err();
        assert_eq!(error.to_string(), format!("cannot listen on 127.0.0.1:{port} (AMQP): address in use"));
    }
}
