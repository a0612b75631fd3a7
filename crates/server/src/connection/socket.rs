//! What the connection loop needs of a socket's halves, for TCP and Unix stream sockets.
//!
//! The loop writes without waiting when the socket takes the bytes (`try_write`) and watches for
//! a hang-up without reading (`ready`) — both need a real socket's readiness, which a TLS stream
//! does not have. A TLS connection therefore runs the same loop on one end of a Unix socket
//! pair, and a pump task copies between the other end and the TLS stream (`tls.rs`): the loop
//! keeps its backpressure and timeouts unchanged, at the cost of one more copy per direction,
//! small next to the encryption.

use std::future::Future;
use std::io;

use tokio::io::{AsyncRead, Interest, Ready};
use tokio::net::{tcp, unix};

/// The read half: bytes, and readiness without reading.
pub(crate) trait SocketRead: AsyncRead + Unpin + Send + 'static {
    fn ready(&self, interest: Interest) -> impl Future<Output = io::Result<Ready>> + Send + '_;
}

/// The write half: a write that never waits, and a wait until the socket takes more.
pub(crate) trait SocketWrite: Send + Sync + 'static {
    fn try_write(&self, bytes: &[u8]) -> io::Result<usize>;
    fn writable(&self) -> impl Future<Output = io::Result<()>> + Send + '_;
}

impl SocketRead for tcp::OwnedReadHalf {
    fn ready(&self, interest: Interest) -> impl Future<Output = io::Result<Ready>> + Send + '_ {
        tcp::OwnedReadHalf::ready(self, interest)
    }
}

impl SocketWrite for tcp::OwnedWriteHalf {
    fn try_write(&self, bytes: &[u8]) -> io::Result<usize> {
        tcp::OwnedWriteHalf::try_write(self, bytes)
    }

    fn writable(&self) -> impl Future<Output = io::Result<()>> + Send + '_ {
        tcp::OwnedWriteHalf::writable(self)
    }
}

impl SocketRead for unix::OwnedReadHalf {
    fn ready(&self, interest: Interest) -> impl Future<Output = io::Result<Ready>> + Send + '_ {
        unix::OwnedReadHalf::ready(self, interest)
    }
}

impl SocketWrite for unix::OwnedWriteHalf {
    fn try_write(&self, bytes: &[u8]) -> io::Result<usize> {
        unix::OwnedWriteHalf::try_write(self, bytes)
    }

    fn writable(&self) -> impl Future<Output = io::Result<()>> + Send + '_ {
        unix::OwnedWriteHalf::writable(self)
    }
}
