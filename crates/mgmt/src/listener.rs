//! The HTTP listeners (management API and Prometheus metrics): an accept loop that hands each
//! socket to hyper's HTTP/1 server with the limits a slow, silent or greedy client must not get
//! past (issue #12, finding 3):
//!
//! - **request timeout**: from the moment the server is ready for a request (a new socket, or a
//!   kept-alive one after its last response) to the end of the request's headers. It closes idle
//!   keep-alive sockets and sockets that trickle their headers alike, as cowboy's `request_timeout`
//!   does for RabbitMQ (hyper's `header_read_timeout` works the same way);
//! - **body timeout**: the whole body must arrive within it, or the request gets 408 and the
//!   socket is closed;
//! - **body size**: larger bodies get 413 (axum's `DefaultBodyLimit`, checked after login, so an
//!   anonymous client cannot make us buffer anything);
//! - **request head size**: at most [`HTTP_HEADERS_MAX`] header lines and [`HTTP_HEAD_MAX_BYTES`]
//!   bytes of request line and headers; past either, hyper answers 431 and closes the socket, as
//!   cowboy does for RabbitMQ (before any login, so nothing bigger is ever buffered);
//! - **connections**: at most `max_connections` sockets per listener; past that a new socket gets
//!   a canned 503 and is closed at once, the accept loop never waits, and the clients already
//!   connected keep being served.
//!
//! With a [`LiveTlsConfig`] the listener speaks HTTPS: each socket's TLS handshake runs in its own
//! task under [`TLS_HANDSHAKE_TIMEOUT`] (counted against the connection limit), with the settings
//! current when it starts; a socket whose handshake fails is closed.
//!
//! The values live in the server's config (`crates/server/src/config.rs`).

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::{ConnectInfo, DefaultBodyLimit};
use axum::http::{header, HeaderValue, Request, Response, StatusCode};
use axum::Router;
use http_body::{Body as HttpBody, Frame, SizeHint};
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Semaphore};
use tokio::task::JoinSet;

use crate::cross_site::ListenerScheme;
use crate::tls::{LiveTlsConfig, TLS_HANDSHAKE_TIMEOUT};
/// Header lines per request: cowboy's `max_headers` default (100), which RabbitMQ's management
/// listener keeps. Also hyper's default; said here so it is a decision, not an accident.
pub const HTTP_HEADERS_MAX: usize = 100;
/// Bytes of request line and headers one request may use: cowboy's `max_request_line_length`
/// (8,000) plus 100 headers at its `max_header_value_length` (4,096) — what RabbitMQ's listener
/// would take at most. Caps what a client can make us buffer before its request is even read.
pub const HTTP_HEAD_MAX_BYTES: usize = 8_000 + HTTP_HEADERS_MAX * 4_096;

/// What each HTTP listener allows one client.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HttpLimits {
    /// Idle keep-alive and header read: how long a socket may go without sending a whole request
    /// head once the server is ready for one.
    pub request_timeout: Duration,
    /// How long a request's body may take to arrive in full.
    pub body_timeout: Duration,
    /// Largest request body.
    pub max_body_bytes: usize,
    /// Open sockets per listener.
    pub max_connections: usize,
}

/// Refused sockets whose 503 is still being flushed (and the request read and thrown away, so
/// the close is not a reset): past this many, a refused socket is closed without a reply.
const REFUSALS_LINGERING_MAX: usize = 64;
/// How long a refused socket may linger for its 503 to reach the client.
const REFUSAL_LINGER: Duration = Duration::from_secs(1);
/// Refusals are logged at most this often (with the count since the last line), so a flood does
/// not flood the log too.
const REFUSAL_LOG_INTERVAL: Duration = Duration::from_secs(10);
/// The reply to a socket over the connection limit.
const REFUSAL: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n\
content-length: 60\r\nx-content-type-options: nosniff\r\nconnection: close\r\n\r\n{\"error\":\"unavailable\",\"reason\":\"too many HTTP connections\"}";

/// Serves `router` on `listener` within `limits` until `shutdown` completes, passing peers'
/// addresses to the handlers (the loopback-only users need them); then lets the requests in
/// flight finish. With `tls`, over HTTPS only.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    limits: HttpLimits,
    tls: Option<LiveTlsConfig>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let scheme = if tls.is_some() { ListenerScheme::Https } else { ListenerScheme::Http };
    let router = router.layer(DefaultBodyLimit::max(limits.max_body_bytes)).layer(axum::Extension(scheme));
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let lingering = Arc::new(Semaphore::new(REFUSALS_LINGERING_MAX));
    let mut refusals = RefusalLog::new("HTTP");
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut connections = JoinSet::new();
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            _ = &mut shutdown => break,
            accepted = listener.accept() => {
                let (stream, peer) = match accepted {
                    Ok(pair) => pair,
                    Err(error) => {
                        // Out of file descriptors and the like: back off instead of spinning.
                        tracing::warn!(%error, "HTTP accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                // On the dual-stack socket an IPv4 client is `::ffff:a.b.c.d`: name it as IPv4 in
                // logs and in the per-address failed-login limits, as the AMQP listener does.
                let peer = SocketAddr::new(peer.ip().to_canonical(), peer.port());
                match slots.clone().try_acquire_owned() {
                    Ok(slot) => {
                        let (router, stop) = (router.clone(), stop_rx.clone());
                        let acceptor = tls.as_ref().map(LiveTlsConfig::acceptor);
                        connections.spawn(async move {
                            let _ = stream.set_nodelay(true);
                            match acceptor {
                                None => serve_connection(stream, peer, router, limits, stop).await,
                                Some(acceptor) => serve_tls(acceptor, stream, peer, router, limits, stop).await,
                            }
                            drop(slot);
                        });
                    }
                    Err(_) => {
                        refusals.record(peer, limits.max_connections);
                        refuse(stream, &lingering);
                    }
                }
            }
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
    let _ = stop_tx.send(true);
    while connections.join_next().await.is_some() {}
    Ok(())
}

/// One HTTPS socket: the TLS handshake (closed if it fails or takes longer than
/// [`TLS_HANDSHAKE_TIMEOUT`]), then the same HTTP/1 serving as a plain socket.
async fn serve_tls(
    acceptor: tokio_rustls::TlsAcceptor,
    stream: TcpStream,
    peer: SocketAddr,
    router: Router,
    limits: HttpLimits,
    stop: watch::Receiver<bool>,
) {
    match tokio::time::timeout(TLS_HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
        Ok(Ok(tls)) => serve_connection(tls, peer, router, limits, stop).await,
        Ok(Err(error)) => tracing::debug!(%peer, %error, "HTTPS handshake failed"),
        Err(_) => tracing::debug!(%peer, "HTTPS handshake timed out"),
    }
}

/// One socket: hyper's HTTP/1 server with the request timeout, each request's body under the
/// body timeout; on shutdown the socket is closed after its request in flight.
async fn serve_connection<S>(
    stream: S,
    peer: SocketAddr,
    router: Router,
    limits: HttpLimits,
    mut stop: watch::Receiver<bool>,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let service = hyper::service::service_fn(move |request: Request<Incoming>| {
        handle(request, peer, router.clone(), limits)
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.request_timeout)
        .max_headers(HTTP_HEADERS_MAX)
        .max_header_size(HTTP_HEAD_MAX_BYTES);
    let conn = builder.serve_connection(TokioIo::new(stream), service);
    tokio::pin!(conn);
    tokio::select! {
        result = conn.as_mut() => {
            if let Err(error) = result {
                tracing::debug!(%peer, %error, "HTTP connection closed");
            }
            return;
        }
        _ = stop.wait_for(|stop| *stop) => conn.as_mut().graceful_shutdown(),
    }
    let _ = conn.await;
}

/// Runs one request through the router with its peer's address and a deadline on its body; a
/// body that missed the deadline makes the response 408 and closes the socket. A body announced
/// larger than the limit gets 413 before any of it is read (a body without a length is cut at
/// the limit by `DefaultBodyLimit`).
async fn handle(
    request: Request<Incoming>,
    peer: SocketAddr,
    mut router: Router,
    limits: HttpLimits,
) -> Result<Response<Body>, Infallible> {
    let (mut parts, body) = request.into_parts();
    if announced_length(&parts.headers).is_some_and(|length| length > limits.max_body_bytes as u64) {
        return Ok(body_too_large_response(limits.max_body_bytes));
    }
    parts.extensions.insert(ConnectInfo(peer));
    let timed_out = Arc::new(AtomicBool::new(false));
    let body = TimedBody {
        inner: body,
        deadline: Box::pin(tokio::time::sleep(limits.body_timeout)),
        timed_out: timed_out.clone(),
    };
    let request = Request::from_parts(parts, Body::new(body));
    let response = match tower_service::Service::call(&mut router, request).await {
        Ok(response) => response,
        Err(never) => match never {},
    };
    if timed_out.load(Ordering::Relaxed) {
        return Ok(body_timeout_response(limits.body_timeout));
    }
    Ok(response)
}

fn announced_length(headers: &axum::http::HeaderMap) -> Option<u64> {
    headers.get(header::CONTENT_LENGTH)?.to_str().ok()?.trim().parse().ok()
}

fn body_timeout_response(body_timeout: Duration) -> Response<Body> {
    let reason = format!("the request body did not arrive within {} ms", body_timeout.as_millis());
    closing_error(StatusCode::REQUEST_TIMEOUT, "request_timeout", reason)
}

/// RabbitMQ's reply to a body over `management.http.max_body_size`: 413 with this reason.
fn body_too_large_response(max_body_bytes: usize) -> Response<Body> {
    let reason = format!("Content-Length exceeds the limit of {max_body_bytes} bytes");
    closing_error(StatusCode::PAYLOAD_TOO_LARGE, "Payload Too Large", reason)
}

/// An error reply after which the socket is closed (its request body is not read).
fn closing_error(status: StatusCode, error: &str, reason: String) -> Response<Body> {
    let json = serde_json::json!({"error": error, "reason": reason}).to_string();
    let mut response = Response::new(Body::from(json));
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    headers.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
}

/// Sends the canned 503 and closes, without blocking the accept loop: the write goes into the
/// fresh socket's empty send buffer; a short-lived task reads and drops what the client already
/// sent, so the close does not reset the connection before the client reads the reply.
fn refuse(stream: TcpStream, lingering: &Arc<Semaphore>) {
    let Ok(permit) = lingering.clone().try_acquire_owned() else { return };
    tokio::spawn(async move {
        let mut stream = stream;
        let _ = tokio::time::timeout(REFUSAL_LINGER, async {
            stream.write_all(REFUSAL).await?;
            stream.shutdown().await?;
            let mut sink = [0u8; 4096];
            while stream.read(&mut sink).await? > 0 {}
            Ok::<(), std::io::Error>(())
        })
        .await;
        drop(permit);
    });
}

/// Counts sockets a listener refused at its connection limit and logs them at most once per
/// [`REFUSAL_LOG_INTERVAL`], with the count since the last line; the HTTP listeners' and the
/// AMQP one's (`server::admission`).
pub struct RefusalLog {
    /// The listener's protocol, as the line names it (`HTTP`, `AMQP`).
    protocol: &'static str,
    unlogged: u64,
    last: Option<Instant>,
}

impl RefusalLog {
    pub fn new(protocol: &'static str) -> RefusalLog {
        RefusalLog { protocol, unlogged: 0, last: None }
    }

    /// One more socket from `peer` refused at `limit` connections.
    pub fn record(&mut self, peer: SocketAddr, limit: usize) {
        self.unlogged += 1;
        let now = Instant::now();
        if self.last.is_some_and(|last| now.duration_since(last) < REFUSAL_LOG_INTERVAL) {
            return;
        }
        let protocol = self.protocol;
        tracing::warn!(%peer, refused = self.unlogged, limit, "{protocol} connection limit reached: refusing new sockets");
        self.unlogged = 0;
        self.last = Some(now);
    }
}

/// A request body that fails once its deadline has passed (and says so through `timed_out`).
struct TimedBody {
    inner: Incoming,
    deadline: Pin<Box<tokio::time::Sleep>>,
    timed_out: Arc<AtomicBool>,
}

/// The error a [`TimedBody`] ends with.
#[derive(Debug)]
struct BodyTimeout;

impl std::fmt::Display for BodyTimeout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("request body timeout")
    }
}

impl std::error::Error for BodyTimeout {}

impl HttpBody for TimedBody {
    type Data = bytes::Bytes;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        if let Poll::Ready(frame) = Pin::new(&mut self.inner).poll_frame(cx) {
            return Poll::Ready(frame.map(|f| f.map_err(Into::into)));
        }
        if self.deadline.as_mut().poll(cx).is_ready() {
            self.timed_out.store(true, Ordering::Relaxed);
            return Poll::Ready(Some(Err(Box::new(BodyTimeout))));
        }
        Poll::Pending
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
