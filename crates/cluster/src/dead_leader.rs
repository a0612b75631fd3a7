//! Finding a dead leader before its lease runs out (issue 38): the evidence a follower takes
//! that its leader's *process* is gone, so that it may depose it at once instead of waiting up
//! to one lease TTL for etcd to expire the lease.
//!
//! Two signs, both needed:
//! - the leader's replication stream to this follower ended (end of file or a reset: the kernel
//!   closes a dead process's sockets; `Fence::stream_ended`);
//! - connects to every client port the leader's record names (AMQP, HTTP, and the TLS and SQS
//!   ones it has) are then refused, [`PROBES`] times over [`PROBE_GAP`]s. A refusal is the
//!   kernel's answer for a port nobody listens on: a live leader listens on at least one of
//!   them (it binds them before it recovers its data; a node serving TLS only has no plain
//!   AMQP listener, so one port alone would not do), and a host that is down, cut off or paused
//!   stays silent or unreachable, which is not a refusal. Those cases still wait for the lease,
//!   as before.
//!
//! Deposing is safe whatever the evidence: it deletes the leader key only if it is still the one
//! of that term (as a leader giving up its term does), and every node that may win the next
//! election holds every confirmed record (`in_sync.rs`). A wrong guess costs an election, never
//! data: the old leader cannot rewrite the in-sync set without its key, so it can confirm
//! nothing that a candidate lacks.

use std::io::ErrorKind;
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

/// How many refused connects make a leader dead.
pub const PROBES: u32 = 3;
/// The pause between two probes: longer than the moment a newly elected leader's client ports
/// are closed between its follower phase and its server's bind.
pub const PROBE_GAP: Duration = Duration::from_millis(100);
/// A probe that neither connects nor is refused within this long is no evidence.
const PROBE_TIMEOUT: Duration = Duration::from_millis(250);

/// Whether, [`PROBES`] times over, a connect to each of `addresses` is refused (none given: no
/// evidence).
pub fn refuses_connections(addresses: &[String]) -> bool {
    if addresses.is_empty() {
        return false;
    }
    for probe in 0..PROBES {
        if probe > 0 {
            std::thread::sleep(PROBE_GAP);
        }
        if !addresses.iter().all(|address| refused(address)) {
            return false;
        }
    }
    true
}

/// Whether a connect to `address` is refused.
fn refused(address: &str) -> bool {
    let Some(socket_address) = address.to_socket_addrs().ok().and_then(|mut all| all.next()) else {
        return false;
    };
    matches!(
        TcpStream::connect_timeout(&socket_address, PROBE_TIMEOUT),
        Err(error) if error.kind() == ErrorKind::ConnectionRefused
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_closed_port_refuses_and_a_listening_one_does_not() {
        let bound = || std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let (first, second) = (bound(), bound());
        let addresses: Vec<String> = [&first, &second].map(|l| l.local_addr().unwrap().to_string()).to_vec();
        assert!(!refuses_connections(&addresses), "listeners accept (their backlog answers)");
        drop(first);
        assert!(!refuses_connections(&addresses), "one port still listens: alive");
        drop(second);
        assert!(refuses_connections(&addresses), "nobody listens: refused");
        assert!(
            !refuses_connections(&["no such host:1".to_owned()]),
            "an address that does not resolve is no evidence"
        );
        assert!(!refuses_connections(&[]), "no address, no evidence");
    }
}
