//! `hourglass --health-check`: a container health check without curl. Asks the broker on this
//! machine `GET /api/health/checks/local-alarms` (200: running, no memory or disk alarm; 503: an
//! alarm is in effect), as `hourglass-ctl`'s user (HOURGLASS_CTL_USER / HOURGLASS_CTL_PASSWORD,
//! guest/guest by default, which loopback allows). One line on failure; the caller exits 1.
//!
//! With the plain HTTP listener switched off it asks the HTTPS one, accepting exactly the
//! certificate in `--tls-cert` (the broker on this machine must be serving the file it was given;
//! no host name to check on loopback).

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpStream};
use std::time::Duration;

use base64::Engine;

use crate::config::{Bind, Config};

/// Docker's default health-check timeout is 30 s; a broker that takes 5 s to answer a local
/// request is not healthy.
pub(crate) const HEALTH_CHECK_TIMEOUT: Duration = Duration::from_secs(5);
/// The status line and headers fit in far less; the body is not needed.
pub(crate) const RESPONSE_BYTES_MAX: u64 = 64 * 1024;
const PATH: &str = "/api/health/checks/local-alarms";

/// Why the broker is not healthy, in one line.
#[derive(Debug, thiserror::Error)]
pub enum HealthError {
    #[error("cannot reach the management API on {addr}: {source}")]
    Unreachable { addr: SocketAddr, source: std::io::Error },
    #[error("{PATH} answered {status}: {body}")]
    Unhealthy { status: u16, body: String },
    #[error("{PATH} gave no HTTP answer")]
    Garbled,
}

/// Runs the check against the HTTP API that `config` names (HTTPS when plain HTTP is off).
pub fn check(config: &Config) -> Result<(), HealthError> {
    let https = config.tls.as_ref().filter(|_| !config.plain.http);
    let port = https.map_or(config.http_port, |tls| tls.https_port);
    let addr = SocketAddr::new(local_address(config.bind), port);
    let user = std::env::var("HOURGLASS_CTL_USER").unwrap_or_else(|_| "guest".to_owned());
    let password = std::env::var("HOURGLASS_CTL_PASSWORD").unwrap_or_else(|_| "guest".to_owned());
    let response = match https {
        Some(tls) => crate::tls::pinned::get(addr, &tls.cert, &http_request(&user, &password)),
        None => request(addr, &user, &password),
    }
    .map_err(|source| HealthError::Unreachable { addr, source })?;
    let status: u16 =
        response.split_whitespace().nth(1).and_then(|s| s.parse().ok()).ok_or(HealthError::Garbled)?;
    if status == 200 {
        return Ok(());
    }
    let body = response.split_once("\r\n\r\n").map_or("", |(_, body)| body);
    Err(HealthError::Unhealthy { status, body: body.trim().chars().take(200).collect() })
}

/// Where to reach a listener bound to `bind` from this machine: loopback for a wildcard bind.
fn local_address(bind: Bind) -> IpAddr {
    match bind {
        Bind::Addr(ip) if !ip.is_unspecified() => ip,
        _ => IpAddr::V4(Ipv4Addr::LOCALHOST),
    }
}

fn request(addr: SocketAddr, user: &str, password: &str) -> std::io::Result<String> {
    let mut socket = TcpStream::connect_timeout(&addr, HEALTH_CHECK_TIMEOUT)?;
    socket.set_read_timeout(Some(HEALTH_CHECK_TIMEOUT))?;
    socket.set_write_timeout(Some(HEALTH_CHECK_TIMEOUT))?;
    socket.write_all(http_request(user, password).as_bytes())?;
    let mut response = Vec::new();
    socket.take(RESPONSE_BYTES_MAX).read_to_end(&mut response)?;
    Ok(String::from_utf8_lossy(&response).into_owned())
}

fn http_request(user: &str, password: &str) -> String {
    let credentials = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
    format!(
        "GET {PATH} HTTP/1.1\r\nHost: localhost\r\nAuthorization: Basic {credentials}\r\n\
         Connection: close\r\n\r\n"
    )
}
