//! An AMQPS connection: the TLS handshake (under RabbitMQ's 5 s `ssl_handshake_timeout`), the
//! verified client certificate's name handed to the session as data, then the ordinary
//! connection loop on a Unix socket pair pumped to and from the TLS stream (`socket.rs`).
//!
//! A client that does not speak TLS (an AMQP protocol header on this port, say) fails the
//! handshake: rustls answers with an alert where it can, and the socket is closed.

use tokio::net::TcpStream;
use tokio_rustls::TlsAcceptor;

use hourglass_mgmt::tls::TLS_HANDSHAKE_TIMEOUT;
use hourglass_session::ClientCertificate;

use super::{serve, ConnectionContext, FINAL_FLUSH_TIMEOUT};
use crate::tls::subject;

/// Bytes the pump moves per read in each direction: a few TLS records (16 KiB each) at a time,
/// as much as the connection loop reads per call on a busy connection.
const PUMP_BUFFER_BYTES: usize = 64 * 1024;

/// Serves one AMQPS connection until it closes; a failed handshake just closes the socket.
pub async fn run_tls(stream: TcpStream, acceptor: TlsAcceptor, cx: ConnectionContext) {
    let _ = stream.set_nodelay(true);
    let peer = cx.peer;
    let mut tls = match tokio::time::timeout(TLS_HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
        Ok(Ok(tls)) => tls,
        Ok(Err(error)) => {
            tracing::info!(%peer, %error, "TLS handshake failed; connection closed");
            return;
        }
        Err(_) => {
            tracing::info!(%peer, timeout_ms = TLS_HANDSHAKE_TIMEOUT.as_millis() as u64, "TLS handshake timed out; connection closed");
            return;
        }
    };
    // Present only when the verifier accepted it: the client verifier runs in the handshake.
    let certificate = tls
        .get_ref()
        .1
        .peer_certificates()
        .and_then(|chain| chain.first())
        .map(|leaf| ClientCertificate { common_name: subject::common_name(leaf.as_ref()) });
    let (ours, mut theirs) = match tokio::net::UnixStream::pair() {
        Ok(pair) => pair,
        Err(error) => {
            tracing::warn!(%peer, %error, "cannot create the socket pair for a TLS connection; closing it");
            return;
        }
    };
    let mut pump = tokio::spawn(async move {
        let sizes = (PUMP_BUFFER_BYTES, PUMP_BUFFER_BYTES);
        let _ = tokio::io::copy_bidirectional_with_sizes(&mut tls, &mut theirs, sizes.0, sizes.1).await;
    });
    let (reader, writer) = ours.into_split();
    serve(reader, writer, cx, Some(certificate)).await;
    // The loop closed its end: the pump flushes what is left, sends close_notify and ends.
    if tokio::time::timeout(FINAL_FLUSH_TIMEOUT, &mut pump).await.is_err() {
        pump.abort();
    }
}
