//! The listeners' resource limits over the real binary (issue #12, findings 3 and 9,
//! `docs/security.md` "The management HTTP listener"): idle and trickling HTTP sockets are closed,
//! slow bodies get 408, sockets over the per-listener cap get 503 while connected clients keep
//! being served, AMQP sockets over the connection cap are closed, and a 30,000-queue definitions
//! file imports.

mod common;

use std::time::{Duration, Instant};

use common::{http, RunningBroker};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Longest any test here waits for the broker to close a socket or answer.
const WAIT: Duration = Duration::from_secs(5);

const AUTH: &str = "Authorization: Basic Z3Vlc3Q6Z3Vlc3Q=";

/// Reads until the peer closes (or errors); `None` if it is still open after `WAIT`.
async fn read_until_closed(socket: &mut TcpStream) -> Option<Vec<u8>> {
    let mut seen = Vec::new();
    let read = tokio::time::timeout(WAIT, async {
        let mut buf = [0u8; 4096];
        loop {
            match socket.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => seen.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await;
    read.ok().map(|()| seen)
}

/// One keep-alive request on `socket`; returns the status and body (by Content-Length).
async fn keep_alive_get(socket: &mut TcpStream, path: &str) -> (u16, String) {
    let request = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\n{AUTH}\r\n\r\n");
    socket.write_all(request.as_bytes()).await.expect("send");
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    let deadline = Instant::now() + WAIT;
    loop {
        let text = String::from_utf8_lossy(&seen).into_owned();
        if let Some((head, body)) = text.split_once("\r\n\r\n") {
            let length = head
                .lines()
                .find_map(|l| {
                    l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().to_owned())
                })
                .and_then(|v| v.parse::<usize>().ok())
                .unwrap_or(0);
            if body.len() >= length {
                let status = head.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
                return (status, body.to_owned());
            }
        }
        assert!(Instant::now() < deadline, "no whole response within {WAIT:?}: {text:?}");
        let n =
            tokio::time::timeout(WAIT, socket.read(&mut buf)).await.expect("read timed out").expect("read");
        assert!(n > 0, "closed mid-response: {text:?}");
        seen.extend_from_slice(&buf[..n]);
    }
}

/// An idle socket, an idle kept-alive one and one that trickles its header a byte at a time are
/// all closed within the request timeout (finding 3: both were held for 100 s and more; RabbitMQ closes at 5 s).
#[tokio::test]
async fn idle_and_trickling_http_sockets_are_closed_within_the_request_timeout() {
    let broker = RunningBroker::start_with(&["--http-request-timeout-ms", "500"]);
    let started = Instant::now();
    let mut idle = TcpStream::connect(broker.http).await.unwrap();
    let mut trickler = TcpStream::connect(broker.http).await.unwrap();
    let trickle = async {
        let header = format!("GET /api/overview HTTP/1.1\r\nHost: localhost\r\n{AUTH}\r\nX-Slow: ");
        for byte in header.bytes().chain(std::iter::repeat(b'a')).take(100) {
            if trickler.write_all(&[byte]).await.is_err() {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        false
    };
    let mut kept_alive = TcpStream::connect(broker.http).await.unwrap();
    assert_eq!(keep_alive_get(&mut kept_alive, "/api/overview").await.0, 200);
    let (trickle_refused, idle_closed) = tokio::join!(trickle, read_until_closed(&mut idle));
    assert!(read_until_closed(&mut kept_alive).await.is_some(), "an idle keep-alive socket stayed open");
    assert!(idle_closed.is_some(), "an idle HTTP socket was still open after {WAIT:?}");
    assert!(
        trickle_refused || read_until_closed(&mut trickler).await.is_some(),
        "the trickler was never closed"
    );
    assert!(started.elapsed() < WAIT, "closed only after {:?}", started.elapsed());
    assert_eq!(http(&broker, "GET", "/api/overview", "").await.0, 200, "the API still answers");
}

/// A request whose body does not arrive within the body timeout gets 408 and the socket closes.
#[tokio::test]
async fn a_body_that_never_arrives_gets_408() {
    let broker = RunningBroker::start_with(&["--http-body-timeout-ms", "500"]);
    let mut socket = TcpStream::connect(broker.http).await.unwrap();
    let request = format!(
        "PUT /api/queues/%2f/slow HTTP/1.1\r\nHost: localhost\r\n{AUTH}\r\nContent-Type: application/json\r\n\
         Content-Length: 100\r\n\r\n{{\"durable\":"
    );
    socket.write_all(request.as_bytes()).await.unwrap();
    let reply = read_until_closed(&mut socket).await.expect("the socket was not closed");
    let reply = String::from_utf8_lossy(&reply);
    assert!(reply.starts_with("HTTP/1.1 408"), "{reply}");
    assert!(reply.contains("request_timeout"), "{reply}");
}

/// Over the per-listener cap new sockets get 503 and are closed at once, while a client already
/// connected keeps being served; when sockets go, new clients get in again.
#[tokio::test]
async fn http_sockets_over_the_cap_get_503_and_connected_clients_keep_being_served() {
    const CAP: usize = 8;
    let broker = RunningBroker::start_with(&["--http-max-connections", &CAP.to_string()]);
    let mut client = TcpStream::connect(broker.http).await.unwrap();
    assert_eq!(keep_alive_get(&mut client, "/api/overview").await.0, 200);
    let mut idle = Vec::new();
    for _ in 1..CAP {
        idle.push(TcpStream::connect(broker.http).await.unwrap());
    }
    for _ in 0..5 {
        let started = Instant::now();
        let mut extra = TcpStream::connect(broker.http).await.unwrap();
        let reply = read_until_closed(&mut extra).await.expect("a socket over the cap stayed open");
        let reply = String::from_utf8_lossy(&reply);
        assert!(reply.starts_with("HTTP/1.1 503"), "{reply}");
        assert!(started.elapsed() < Duration::from_secs(2), "refused only after {:?}", started.elapsed());
    }
    assert_eq!(keep_alive_get(&mut client, "/api/overview").await.0, 200, "the connected client is served");
    drop(idle);
    let deadline = Instant::now() + WAIT;
    loop {
        let (status, _) = http(&broker, "GET", "/api/overview", "").await;
        if status == 200 {
            break;
        }
        assert!(Instant::now() < deadline, "new clients still refused after the idle sockets went: {status}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// AMQP sockets past `--max-connections` (handshakes included) are closed at once; the
/// connections already open keep working, and a slot freed is taken again.
#[tokio::test]
async fn amqp_sockets_over_the_connection_cap_are_closed() {
    let broker = RunningBroker::start_with(&["--max-connections", "3"]);
    let client = common::connect(&broker).await;
    let mut silent =
        vec![TcpStream::connect(broker.amqp).await.unwrap(), TcpStream::connect(broker.amqp).await.unwrap()];
    let mut extra = TcpStream::connect(broker.amqp).await.unwrap();
    assert!(read_until_closed(&mut extra).await.is_some(), "a socket over the AMQP cap stayed open");
    let channel = client.create_channel().await.expect("the connected client keeps working");
    channel
        .queue_declare("still-here".into(), Default::default(), Default::default())
        .await
        .expect("declare");
    silent.clear();
    let deadline = Instant::now() + WAIT;
    loop {
        let attempt = tokio::time::timeout(WAIT, common::connect_result(&broker)).await;
        if matches!(attempt, Ok(Ok(_))) {
            break;
        }
        assert!(Instant::now() < deadline, "no slot freed after the silent sockets closed");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A definitions file of 30,000 queues (~3 MB, over the old 2 MB body limit) imports, and the
/// export gives them back; a body over `--http-max-body-size` gets 413.
#[tokio::test]
async fn a_30k_queue_definitions_file_round_trips_and_larger_bodies_get_413() {
    const QUEUES: usize = 30_000;
    let broker = RunningBroker::start();
    let queues: Vec<serde_json::Value> = (0..QUEUES)
        .map(|i| {
            serde_json::json!({"name": format!("imported-queue-{i:06}"), "vhost": "/", "durable": false,
                "auto_delete": false, "arguments": {"x-max-length": 1000}})
        })
        .collect();
    let body = serde_json::json!({"queues": queues}).to_string();
    assert!(body.len() > 2 << 20, "the file should be over the old limit: {} bytes", body.len());
    let (status, reply) = http(&broker, "POST", "/api/definitions", &body).await;
    assert!((200..300).contains(&status), "import: {status} {reply}");
    let (status, export) = http(&broker, "GET", "/api/definitions", "").await;
    assert_eq!(status, 200);
    let export: serde_json::Value = serde_json::from_str(&export).unwrap();
    let exported = export["queues"].as_array().unwrap();
    assert_eq!(
        exported.iter().filter(|q| q["name"].as_str().unwrap().starts_with("imported-queue-")).count(),
        QUEUES
    );
    let (status, page) = http(&broker, "GET", "/api/queues?page=300&page_size=100&name=imported", "").await;
    assert_eq!(status, 200, "{page}");
    let page: serde_json::Value = serde_json::from_str(&page).unwrap();
    assert_eq!(page["filtered_count"], QUEUES);
    assert_eq!(page["items"][99]["name"], "imported-queue-029999");
    drop(broker);

    // Refused on the announced length, before the body is read.
    let small = RunningBroker::start_with(&["--http-max-body-size", "1MB"]);
    let mut socket = TcpStream::connect(small.http).await.unwrap();
    let request = format!(
        "POST /api/definitions HTTP/1.1\r\nHost: localhost\r\n{AUTH}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n{{\"queues\": [",
        body.len()
    );
    socket.write_all(request.as_bytes()).await.unwrap();
    let mut head = [0u8; 12];
    tokio::time::timeout(WAIT, socket.read_exact(&mut head)).await.expect("no reply").unwrap();
    assert_eq!(&head, b"HTTP/1.1 413");
}

/// Definitions exports count against the heavy listings while they are in memory (issue 37,
/// finding 4: 50 stalled exports of 20,000 queues took the broker from 109 MB to 2.3 GB): a
/// user's third export while two readers stall is 429 at once, and once a stalled reader
/// finishes, the next export is served.
#[tokio::test]
async fn stalled_definitions_exports_are_bounded_per_user() {
    let broker = RunningBroker::start();
    // 200 queues with a 60 KB argument each: an export of 12 MB, more than the sockets of a
    // client that does not read can take.
    let pad = "p".repeat(60_000);
    for i in 0..200 {
        let body = format!(r#"{{"durable": false, "arguments": {{"x-pad": "{pad}"}}}}"#);
        let (status, answer) = http(&broker, "PUT", &format!("/api/queues/%2F/big-{i}"), &body).await;
        assert_eq!(status, 201, "{answer}");
    }
    let request = format!("GET /api/definitions HTTP/1.1\r\nHost: localhost\r\n{AUTH}\r\n\r\n");
    let mut stalled = Vec::new();
    for _ in 0..2 {
        let mut socket = TcpStream::connect(broker.http).await.unwrap();
        socket.write_all(request.as_bytes()).await.unwrap();
        // The answer has begun: the export is built and held for this reader.
        let mut first = [0u8; 12];
        tokio::time::timeout(WAIT, socket.read_exact(&mut first)).await.expect("an answer").unwrap();
        assert_eq!(&first, b"HTTP/1.1 200", "the first two exports are served");
        stalled.push(socket);
    }
    let (status, body) = http(&broker, "GET", "/api/definitions", "").await;
    assert_eq!(status, 429, "a third export while two stall: {}", &body[..body.len().min(200)]);
    let (status, _) = http(&broker, "GET", "/api/overview", "").await;
    assert_eq!(status, 200, "the rest of the API answers meanwhile");
    let mut reader = stalled.remove(0);
    let rest = read_until_closed_after(&mut reader).await;
    assert!(rest > 12_000_000, "the whole export arrived: {rest} bytes");
    let (status, body) = http(&broker, "GET", "/api/definitions", "").await;
    assert_eq!(status, 200, "served again once a reader finished");
    assert!(body.contains("big-199"));
}

/// Reads the rest of a response whose first bytes were read already (its head and a body of
/// `content-length` bytes); the body's length.
async fn read_until_closed_after(socket: &mut TcpStream) -> usize {
    let mut seen = Vec::new();
    let mut buf = vec![0u8; 1 << 16];
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(end) = seen.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&seen[..end]).to_ascii_lowercase();
            let length: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse().ok())
                .expect("a content-length");
            if seen.len() - end - 4 >= length {
                return length;
            }
        }
        assert!(Instant::now() < deadline, "the export never ended");
        let n = tokio::time::timeout(WAIT, socket.read(&mut buf)).await.expect("reading").expect("read");
        assert!(n > 0, "closed mid-export");
        seen.extend_from_slice(&buf[..n]);
    }
}
