//! Signed requests to the SQS endpoint over a plain socket, in both of its protocols: AWS JSON
//! 1.0 and the form-encoded Query protocol (as guest/guest; the signature is
//! `sigv4::authorization`'s, checked against botocore's in `sigv4::tests`).

use std::net::SocketAddr;
use std::time::{SystemTime, UNIX_EPOCH};

use hourglass_sqs::sigv4;
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// A port free now, for `--sqs-port` (the broker logs the listeners it binds with port 0 only
/// for AMQP and HTTP).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// One signed AWS JSON 1.0 request: the status and the answer's JSON (status 0: no answer).
pub async fn sqs(addr: SocketAddr, action: &str, input: Value) -> (u16, Value) {
    let Ok(socket) = tokio::net::TcpStream::connect(addr).await else { return (0, Value::Null) };
    sqs_on(socket, &addr.to_string(), action, input).await
}

/// [`sqs`] over a connection already open (a TLS stream), to `host` as the request names it.
pub async fn sqs_on<S: AsyncRead + AsyncWrite + Unpin>(
    socket: S,
    host: &str,
    action: &str,
    input: Value,
) -> (u16, Value) {
    let target = format!("AmazonSQS.{action}");
    let headers = [("content-type", "application/x-amz-json-1.0"), ("x-amz-target", target.as_str())];
    let (status, body) = signed_post_on(socket, host, "/", &headers, input.to_string().as_bytes()).await;
    (status, serde_json::from_str(&body).unwrap_or(Value::Null))
}

/// One signed Query protocol request, `form` its form-encoded parameters, posted to `path`: the
/// status and the answer's XML text.
pub async fn sqs_query(addr: SocketAddr, path: &str, form: &str) -> (u16, String) {
    let headers = [("content-type", "application/x-www-form-urlencoded; charset=utf-8")];
    let Ok(socket) = tokio::net::TcpStream::connect(addr).await else { return (0, String::new()) };
    signed_post_on(socket, &addr.to_string(), path, &headers, form.as_bytes()).await
}

async fn signed_post_on<S: AsyncRead + AsyncWrite + Unpin>(
    mut socket: S,
    host: &str,
    path: &str,
    extra: &[(&str, &str)],
    body: &[u8],
) -> (u16, String) {
    let now_ms = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis() as u64;
    let amz_date = sigv4::amz_date_of(now_ms);
    let mut headers: Vec<(String, String)> =
        vec![("host".into(), host.to_owned()), ("x-amz-date".into(), amz_date.clone())];
    headers.extend(extra.iter().map(|(n, v)| (n.to_string(), v.to_string())));
    let request = sigv4::Request { method: "POST", path, query: "", headers: &headers, body };
    let authorization = sigv4::authorization(&request, "guest", "guest", "us-east-1", &amz_date);
    let mut text = format!("POST {path} HTTP/1.1\r\nconnection: close\r\n");
    for (name, value) in &headers {
        text.push_str(&format!("{name}: {value}\r\n"));
    }
    text.push_str(&format!("authorization: {authorization}\r\ncontent-length: {}\r\n\r\n", body.len()));
    // A connection cut answers status 0.
    let mut answer = Vec::new();
    let exchanged = async {
        socket.write_all(text.as_bytes()).await?;
        socket.write_all(body).await?;
        socket.read_to_end(&mut answer).await
    };
    if exchanged.await.is_err() && answer.is_empty() {
        return (0, String::new());
    }
    let answer = String::from_utf8_lossy(&answer);
    let status = answer.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    (status, answer.split_once("\r\n\r\n").map(|(_, b)| b.to_owned()).unwrap_or_default())
}
