//! Signed requests to the SQS endpoint over a plain socket, in both of its protocols: AWS JSON
//! 1.0 and the form-encoded Query protocol (as guest/guest; the signature is
//! `sigv4::authorization`'s, checked against botocore's in `sigv4::tests`).

use std::net::SocketAddr;
use std::time::{SystemTime, UNIX_EPOCH};

use hourglass_sqs::sigv4;
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// A port free now, for a flag that must name a port before the broker starts (a restart on the
/// same port). Taken below Linux's ephemeral range (32768 up): a port the OS handed out would be
/// handed out again, to any outgoing connection of the tests running beside, and a broker
/// restarted on it then failed with "address in use" (`sqs_durability.rs`, once in a full run).
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    static TRIES: AtomicU32 = AtomicU32::new(0);
    let seed = std::process::id().wrapping_mul(2_654_435_761)
        ^ SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
    for _ in 0..1_000 {
        let n = seed.wrapping_add(TRIES.fetch_add(1, Ordering::Relaxed).wrapping_mul(7_919));
        let port = 20_000 + (n % 12_000) as u16;
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free port below the ephemeral range in 1,000 tries")
}

/// A broker serving the SQS endpoint on a port the OS chose, with `extra` flags; the endpoint's
/// address, as the broker's start line names it.
pub fn sqs_broker(extra: &[&str]) -> (super::RunningBroker, SocketAddr) {
    let mut args = vec!["--sqs-port", "0"];
    args.extend_from_slice(extra);
    let broker = super::RunningBroker::start_with(&args);
    let sqs = broker.sqs.expect("the start line names the SQS listener");
    (broker, sqs)
}

/// The access key tests sign with unless they name another: the default user's.
pub const GUEST_KEY: (&str, &str) = ("guest", "guest");

/// One signed AWS JSON 1.0 request: the status and the answer's JSON (status 0: no answer).
pub async fn sqs(addr: SocketAddr, action: &str, input: Value) -> (u16, Value) {
    sqs_as(addr, GUEST_KEY, action, input).await
}

/// [`sqs`] signed with the access key `key` (`(id, secret)`).
pub async fn sqs_as(addr: SocketAddr, key: (&str, &str), action: &str, input: Value) -> (u16, Value) {
    let Ok(socket) = tokio::net::TcpStream::connect(addr).await else { return (0, Value::Null) };
    let (status, body) = send_on(socket, &json_request(&addr.to_string(), key, action, &input)).await;
    (status, serde_json::from_str(&body).unwrap_or(Value::Null))
}

/// [`sqs`] over a connection already open (a TLS stream), to `host` as the request names it.
pub async fn sqs_on<S: AsyncRead + AsyncWrite + Unpin>(
    socket: S,
    host: &str,
    action: &str,
    input: Value,
) -> (u16, Value) {
    let (status, body) = send_on(socket, &json_request(host, GUEST_KEY, action, &input)).await;
    (status, serde_json::from_str(&body).unwrap_or(Value::Null))
}

/// One signed Query protocol request, `form` its form-encoded parameters, posted to `path`: the
/// status and the answer's XML text.
pub async fn sqs_query(addr: SocketAddr, path: &str, form: &str) -> (u16, String) {
    send(addr, &query_request(&addr.to_string(), GUEST_KEY, path, form)).await
}

/// A signed request as it goes on the wire: its head (request line and headers, with the
/// `authorization` header, ending in the blank line) and its body; a test may change either
/// before it sends it, as an attacker who captured it would.
#[derive(Clone, Debug)]
pub struct SignedRequest {
    pub head: String,
    pub body: Vec<u8>,
}

/// An AWS JSON 1.0 request for `action`, signed with `key`.
pub fn json_request(host: &str, key: (&str, &str), action: &str, input: &Value) -> SignedRequest {
    let target = format!("AmazonSQS.{action}");
    let headers = [("content-type", "application/x-amz-json-1.0"), ("x-amz-target", target.as_str())];
    signed_post(host, key, "/", &headers, input.to_string().as_bytes())
}

/// A Query protocol request of form-encoded parameters `form`, posted to `path`, signed with `key`.
pub fn query_request(host: &str, key: (&str, &str), path: &str, form: &str) -> SignedRequest {
    let headers = [("content-type", "application/x-www-form-urlencoded; charset=utf-8")];
    signed_post(host, key, path, &headers, form.as_bytes())
}

fn signed_post(
    host: &str,
    key: (&str, &str),
    path: &str,
    extra: &[(&str, &str)],
    body: &[u8],
) -> SignedRequest {
    let now_ms = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis() as u64;
    let amz_date = sigv4::amz_date_of(now_ms);
    let mut headers: Vec<(String, String)> =
        vec![("host".into(), host.to_owned()), ("x-amz-date".into(), amz_date.clone())];
    headers.extend(extra.iter().map(|(n, v)| (n.to_string(), v.to_string())));
    let request = sigv4::Request { method: "POST", path, query: "", headers: &headers, body };
    let authorization = sigv4::authorization(&request, key.0, key.1, "us-east-1", &amz_date);
    let mut head = format!("POST {path} HTTP/1.1\r\nconnection: close\r\n");
    for (name, value) in &headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str(&format!("authorization: {authorization}\r\n"));
    SignedRequest { head, body: body.to_vec() }
}

impl SignedRequest {
    /// The same request with another body (its `content-length` follows).
    pub fn with_body(&self, body: &[u8]) -> SignedRequest {
        SignedRequest { head: self.head.clone(), body: body.to_vec() }
    }

    /// The same request with one more header, not signed.
    pub fn with_header(&self, name: &str, value: &str) -> SignedRequest {
        SignedRequest { head: format!("{}{name}: {value}\r\n", self.head), body: self.body.clone() }
    }
}

/// Sends `request` on a new connection to `addr`: the status and the answer's body.
pub async fn send(addr: SocketAddr, request: &SignedRequest) -> (u16, String) {
    let Ok(socket) = tokio::net::TcpStream::connect(addr).await else { return (0, String::new()) };
    send_on(socket, request).await
}

async fn send_on<S: AsyncRead + AsyncWrite + Unpin>(mut socket: S, request: &SignedRequest) -> (u16, String) {
    let text = format!("{}content-length: {}\r\n\r\n", request.head, request.body.len());
    // A connection cut answers status 0.
    let mut answer = Vec::new();
    let exchanged = async {
        socket.write_all(text.as_bytes()).await?;
        socket.write_all(&request.body).await?;
        socket.read_to_end(&mut answer).await
    };
    if exchanged.await.is_err() && answer.is_empty() {
        return (0, String::new());
    }
    let answer = String::from_utf8_lossy(&answer);
    let status = answer.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    (status, answer.split_once("\r\n\r\n").map(|(_, b)| b.to_owned()).unwrap_or_default())
}
