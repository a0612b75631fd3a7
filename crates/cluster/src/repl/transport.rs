//! The replication connection, plain TCP or mutual TLS (`--replication-tls`): either way a read
//! half and a write half that two threads can use at once, and the socket to shut it down.
//!
//! With TLS both ends present a certificate signed by the cluster's CA (`--tls-ca`) and verify
//! the other's, so only cluster members can stream to a follower. rustls has no split stream, so
//! the halves share the connection state under a lock and each does its own socket I/O outside
//! it: the reader waits on the socket without holding the lock, the writer encrypts under the
//! lock and writes after.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use rustls::pki_types::ServerName;

/// Replication TLS settings: the follower's side and the leader's side (each node is both).
#[derive(Clone, Debug)]
pub struct ReplicationTls {
    pub server: Arc<rustls::ServerConfig>,
    pub client: Arc<rustls::ClientConfig>,
}

/// The halves of one replication connection.
pub struct Duplex {
    pub read: Box<dyn Read + Send>,
    pub write: Box<dyn Write + Send>,
    /// The socket, for timeouts and shutdown.
    pub socket: TcpStream,
}

/// The follower's side of a new connection; a TLS handshake must be done by `deadline`.
pub fn accept(socket: TcpStream, tls: Option<&ReplicationTls>, deadline: Instant) -> io::Result<Duplex> {
    match tls {
        None => plain(socket),
        Some(tls) => {
            let conn = rustls::ServerConnection::new(tls.server.clone()).map_err(io::Error::other)?;
            secure(socket, rustls::Connection::Server(conn), deadline)
        }
    }
}

/// The leader's side: `host` is the follower's advertised host, which its certificate must name.
pub fn connect(
    socket: TcpStream,
    host: &str,
    tls: Option<&ReplicationTls>,
    deadline: Instant,
) -> io::Result<Duplex> {
    match tls {
        None => plain(socket),
        Some(tls) => {
            let name = ServerName::try_from(host.trim_matches(['[', ']']).to_owned())
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
            let conn = rustls::ClientConnection::new(tls.client.clone(), name).map_err(io::Error::other)?;
            secure(socket, rustls::Connection::Client(conn), deadline)
        }
    }
}

fn plain(socket: TcpStream) -> io::Result<Duplex> {
    Ok(Duplex { read: Box::new(socket.try_clone()?), write: Box::new(socket.try_clone()?), socket })
}

fn secure(mut socket: TcpStream, mut conn: rustls::Connection, deadline: Instant) -> io::Result<Duplex> {
    let previous = socket.read_timeout()?;
    while conn.is_handshaking() {
        // Each step waits only for what is left of the deadline: a peer sending a byte at a
        // time cannot stretch the handshake.
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::Error::new(io::ErrorKind::TimedOut, "TLS handshake not done by the deadline"));
        }
        socket.set_read_timeout(Some(left))?;
        conn.complete_io(&mut socket)?;
    }
    socket.set_read_timeout(previous)?;
    let shared = Arc::new(Mutex::new(conn));
    Ok(Duplex {
        read: Box::new(TlsRead { socket: socket.try_clone()?, conn: shared.clone() }),
        write: Box::new(TlsWrite { socket: socket.try_clone()?, conn: shared }),
        socket,
    })
}

struct TlsRead {
    socket: TcpStream,
    conn: Arc<Mutex<rustls::Connection>>,
}

impl Read for TlsRead {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            {
                let mut conn = self.conn.lock().unwrap_or_else(|p| p.into_inner());
                match conn.reader().read(buf) {
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    done => return done,
                }
            }
            // No plaintext buffered: wait for records without holding the lock (the socket's
            // read timeout, if any, ends the wait as it would on plain TCP).
            let mut raw = [0u8; 16 * 1024];
            let n = self.socket.read(&mut raw)?;
            if n == 0 {
                return Ok(0);
            }
            let mut conn = self.conn.lock().unwrap_or_else(|p| p.into_inner());
            let mut bytes = &raw[..n];
            while !bytes.is_empty() {
                conn.read_tls(&mut bytes)?;
                conn.process_new_packets().map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
            }
        }
    }
}

struct TlsWrite {
    socket: TcpStream,
    conn: Arc<Mutex<rustls::Connection>>,
}

impl Write for TlsWrite {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let mut records = Vec::with_capacity(buf.len() + 64);
        {
            let mut conn = self.conn.lock().unwrap_or_else(|p| p.into_inner());
            conn.writer().write_all(buf)?;
            while conn.wants_write() {
                conn.write_tls(&mut records)?;
            }
        }
        self.socket.write_all(&records)?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.socket.flush()
    }
}
