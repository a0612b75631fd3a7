//! Cross-site requests over the real binary (issue #22, finding 5; docs/security.md "Cross-site
//! requests"): a page on another origin posted a `text/plain` form to `/api/definitions` with the
//! browser's cached Basic login and created an administrator. State-changing requests now need a
//! JSON body (415 otherwise) and no foreign `Origin`/`Referer` (403); clients that send neither
//! header keep working, and every API answer carries `X-Content-Type-Options: nosniff`. The
//! browser's side of it is `tests/ui/cross_site.test.mjs`.

mod common;

use common::RunningBroker;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const AUTH: &str = "Authorization: Basic Z3Vlc3Q6Z3Vlc3Q=";

/// A definitions document that creates the administrator `mallory`, written as a `text/plain`
/// form can send it: the form field's name is the JSON up to `"x":"`, its value closes it.
const FORM_BODY: &str = r#"{"users":[{"name":"mallory","password":"pw","tags":"administrator"}],"x":"=y"}"#;

/// One request with `headers` (each ending in `\r\n`) as guest; the whole answer's head and body.
async fn send(
    broker: &RunningBroker,
    method: &str,
    path: &str,
    headers: &str,
    body: &str,
) -> (u16, String, String) {
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {host}\r\n{AUTH}\r\n{headers}Content-Length: {length}\r\n\
         Connection: close\r\n\r\n{body}",
        host = broker.http,
        length = body.len(),
    );
    let mut socket = tokio::net::TcpStream::connect(broker.http).await.expect("connect http");
    socket.write_all(request.as_bytes()).await.expect("send http");
    let mut response = Vec::new();
    socket.read_to_end(&mut response).await.expect("read http");
    let text = String::from_utf8_lossy(&response).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    (status, head.to_ascii_lowercase(), body.to_owned())
}

async fn user_exists(broker: &RunningBroker, name: &str) -> bool {
    let (status, _, body) = send(broker, "GET", &format!("/api/users/{name}"), "", "").await;
    assert!(status == 200 || status == 404, "GET user {name}: {status} {body}");
    status == 200
}

/// The finding itself: a `text/plain` body that is a definitions document is 415 with
/// RabbitMQ's error shape, and no user is created; form-urlencoded and multipart likewise.
#[tokio::test]
async fn a_text_plain_definitions_post_is_refused_with_415_and_creates_no_user() {
    let broker = RunningBroker::start();
    for content_type in ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=b"]
    {
        let headers = format!("Content-Type: {content_type}\r\n");
        let (status, _, body) = send(&broker, "POST", "/api/definitions", &headers, FORM_BODY).await;
        assert_eq!(status, 415, "{content_type}: {body}");
        let error: serde_json::Value = serde_json::from_str(&body).expect("a JSON error");
        assert_eq!(error["error"], "unsupported_media_type", "{body}");
        assert!(error["reason"].as_str().is_some_and(|r| r.contains("application/json")), "{body}");
    }
    // A body with no type at all is what a `fetch` of a Blob sends: refused too.
    let (status, _, body) = send(&broker, "POST", "/api/definitions", "", FORM_BODY).await;
    assert_eq!(status, 415, "no Content-Type: {body}");
    assert!(!user_exists(&broker, "mallory").await, "a refused import created the user");
}

/// Publish, bind and get had the same hole: a `text/plain` body is 415 on each.
#[tokio::test]
async fn text_plain_publish_bind_and_get_are_refused_with_415() {
    let broker = RunningBroker::start();
    let json = "Content-Type: application/json\r\n";
    let (status, _, body) = send(&broker, "PUT", "/api/queues/%2F/q", json, r#"{"durable":true}"#).await;
    assert_eq!(status, 201, "{body}");
    let plain = "Content-Type: text/plain;charset=UTF-8\r\n";
    for (path, body) in [
        (
            "/api/exchanges/%2F/amq.default/publish",
            r#"{"routing_key":"q","payload":"x","payload_encoding":"string","properties":{}}"#,
        ),
        ("/api/bindings/%2F/e/amq.direct/q/q", r#"{"routing_key":"k"}"#),
        ("/api/queues/%2F/q/get", r#"{"count":1,"ackmode":"ack_requeue_false","encoding":"auto"}"#),
    ] {
        let (status, _, answer) = send(&broker, "POST", path, plain, body).await;
        assert_eq!(status, 415, "{path}: {answer}");
    }
    let (_, _, queue) = send(&broker, "GET", "/api/queues/%2F/q", "", "").await;
    let queue: serde_json::Value = serde_json::from_str(&queue).expect("queue JSON");
    assert_eq!(queue["messages"], 0, "a refused publish reached the queue: {queue}");
    let (_, _, bindings) = send(&broker, "GET", "/api/queues/%2F/q/bindings", "", "").await;
    assert!(!bindings.contains("amq.direct"), "a refused bind was made: {bindings}");
}

/// A JSON request that names another origin (another port, `null`, a foreign Referer) is 403 and
/// changes nothing; the API's own origin passes.
#[tokio::test]
async fn a_json_post_from_a_foreign_origin_is_refused_with_403() {
    let broker = RunningBroker::start();
    let foreign_port = broker.http.port().wrapping_add(1);
    for header in [
        format!("Origin: http://127.0.0.1:{foreign_port}\r\n"),
        "Origin: http://evil.example\r\n".to_owned(),
        "Origin: null\r\n".to_owned(),
        format!("Origin: https://{}\r\n", broker.http),
        "Referer: http://evil.example/page.html\r\n".to_owned(),
    ] {
        let headers = format!("Content-Type: application/json\r\n{header}");
        let (status, _, body) = send(&broker, "POST", "/api/definitions", &headers, FORM_BODY).await;
        assert_eq!(status, 403, "{header}: {body}");
        assert!(body.contains("cross-site"), "{header}: {body}");
    }
    assert!(!user_exists(&broker, "mallory").await, "a cross-site import created the user");
    // An empty DELETE from a foreign origin is refused too.
    let (status, _, body) =
        send(&broker, "DELETE", "/api/users/guest", "Origin: http://evil.example\r\n", "").await;
    assert_eq!(status, 403, "{body}");
    assert!(user_exists(&broker, "guest").await);
}

/// What the web UI sends (JSON, its own origin) and what curl, rabbitmqadmin and hourglass-ctl
/// send (JSON, no Origin) keep working; an empty-bodied DELETE needs no Content-Type.
#[tokio::test]
async fn same_origin_and_origin_less_json_requests_work() {
    let broker = RunningBroker::start();
    let same_origin = format!(
        "Content-Type: application/json; charset=utf-8\r\nOrigin: http://{}\r\nX-Requested-With: XMLHttpRequest\r\n",
        broker.http
    );
    let (status, _, body) = send(&broker, "POST", "/api/definitions", &same_origin, FORM_BODY).await;
    assert_eq!(status, 204, "{body}");
    assert!(user_exists(&broker, "mallory").await);
    let own_referer =
        format!("Content-Type: application/json\r\nReferer: http://{}/#/queues\r\n", broker.http);
    let (status, _, body) = send(&broker, "PUT", "/api/queues/%2F/from-ui", &own_referer, "{}").await;
    assert_eq!(status, 201, "{body}");
    let (status, _, body) =
        send(&broker, "PUT", "/api/queues/%2F/from-curl", "Content-Type: application/json\r\n", "{}").await;
    assert_eq!(status, 201, "{body}");
    let (status, _, body) = send(&broker, "DELETE", "/api/queues/%2F/from-curl", "", "").await;
    assert_eq!(status, 204, "{body}");
    let (status, _, body) = send(&broker, "DELETE", "/api/users/mallory", "", "").await;
    assert_eq!(status, 204, "{body}");
}

/// Every API JSON answer — a listing, an error, a refusal, a failed login — says `nosniff`.
#[tokio::test]
async fn api_answers_carry_nosniff() {
    let broker = RunningBroker::start();
    let plain = "Content-Type: text/plain\r\n";
    for (method, path, headers, body) in [
        ("GET", "/api/overview", "", ""),
        ("GET", "/api/queues/%2F/missing", "", ""),
        ("POST", "/api/definitions", plain, "{}"),
    ] {
        let (status, head, _) = send(&broker, method, path, headers, body).await;
        assert!(head.contains("content-type: application/json"), "{method} {path}: {status} {head}");
        assert!(head.contains("x-content-type-options: nosniff"), "{method} {path}: {status} {head}");
    }
    let request = format!("GET /api/overview HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n", broker.http);
    let mut socket = tokio::net::TcpStream::connect(broker.http).await.expect("connect http");
    socket.write_all(request.as_bytes()).await.expect("send http");
    let mut response = Vec::new();
    socket.read_to_end(&mut response).await.expect("read http");
    let head = String::from_utf8_lossy(&response).to_ascii_lowercase();
    assert!(head.starts_with("http/1.1 401"), "{head}");
    assert!(head.contains("x-content-type-options: nosniff"), "{head}");
}
