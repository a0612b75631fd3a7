//! The HTTP/1.1 text of the tests' requests to the management API (as guest, one request per
//! connection) and the parse of its answers; shared by the async `common::http` and the cluster
//! tests' blocking `http_request`.

/// A request with `body` as JSON, as guest/guest, asking the server to close after answering.
pub fn request(method: &str, path: &str, body: &str) -> String {
    format!(
        "{method} {path} HTTP/1.1\r\nHost: localhost\r\nAuthorization: Basic Z3Vlc3Q6Z3Vlc3Q=\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
}

/// The status and body of a whole response (None if it has no status line).
pub fn parse_response(response: &[u8]) -> Option<(u16, String)> {
    let text = String::from_utf8_lossy(response);
    let status = text.split_whitespace().nth(1)?.parse().ok()?;
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b.to_owned()).unwrap_or_default();
    Some((status, body))
}
