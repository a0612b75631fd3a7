//! The HTTP/1.1 text of the tests' requests to the management API (as guest, one request per
//! connection) and the parse of its answers; shared by the async `common::http` and the cluster
//! tests' blocking `http_request`.

/// A request with `body` as JSON, as guest/guest, asking the server to close after answering.
pub fn request(method: &str, path: &str, body: &str) -> String {
    request_as(("guest", "guest"), method, path, body)
}

/// The same request as `user`/`password`.
pub fn request_as((user, password): (&str, &str), method: &str, path: &str, body: &str) -> String {
    use base64::Engine;
    let credentials = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
    format!(
        "{method} {path} HTTP/1.1\r\nHost: localhost\r\nAuthorization: Basic {credentials}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
}

/// The status and body of a whole response (None if it has no status line); a chunked body
/// (full listings are streamed) is put back together.
pub fn parse_response(response: &[u8]) -> Option<(u16, String)> {
    let split = response.windows(4).position(|w| w == b"\r\n\r\n");
    let (head, body) = match split {
        Some(at) => (&response[..at], &response[at + 4..]),
        None => (response, &[][..]),
    };
    let head = String::from_utf8_lossy(head);
    let status = head.split_whitespace().nth(1)?.parse().ok()?;
    let chunked = head.lines().any(|l| {
        let l = l.to_ascii_lowercase();
        l.starts_with("transfer-encoding:") && l.contains("chunked")
    });
    let body = if chunked { dechunk(body) } else { body.to_vec() };
    Some((status, String::from_utf8_lossy(&body).into_owned()))
}

/// The data of a chunked body: each chunk is its size in hex, CRLF, the bytes, CRLF; size 0 ends.
fn dechunk(mut rest: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(line_end) = rest.windows(2).position(|w| w == b"\r\n") {
        let line = String::from_utf8_lossy(&rest[..line_end]);
        let Ok(size) = usize::from_str_radix(line.split(';').next().unwrap_or("").trim(), 16) else { break };
        let after = &rest[line_end + 2..];
        if size == 0 || after.len() < size {
            break;
        }
        out.extend_from_slice(&after[..size]);
        rest = after[size..].strip_prefix(b"\r\n").unwrap_or(&after[size..]);
    }
    out
}
