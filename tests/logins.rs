//! Logins over the real binary (issue #12, finding 9): an empty password never logs in, over
//! AMQP or HTTP, as in RabbitMQ; refused logins are answered slowly, good ones at once.

mod common;

use std::time::{Duration, Instant};

use common::{http, RunningBroker};
use lapin::{Connection, ConnectionProperties};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Bounds every login attempt of these tests, so a regression fails instead of hanging.
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(15);

fn url(broker: &RunningBroker, user: &str) -> String {
    format!("amqp://{user}:x@{}/%2f", broker.amqp)
}

/// Connects as `user` (PLAIN); Ok when connection.open-ok came back.
async fn amqp_login(broker: &RunningBroker, user: &str, password: &str) -> Result<Connection, String> {
    let mut uri: lapin::uri::AMQPUri = url(broker, user).parse().expect("AMQP URI");
    // Set here: a URL with an empty password means lapin's default, "guest".
    uri.authority.userinfo.password = password.to_owned();
    let connect = Connection::connect_uri(uri, ConnectionProperties::default());
    match tokio::time::timeout(ATTEMPT_TIMEOUT, connect).await {
        Ok(Ok(connection)) => Ok(connection),
        Ok(Err(error)) => Err(error.to_string()),
        Err(_) => panic!("login as {user} did not finish in {ATTEMPT_TIMEOUT:?}"),
    }
}

/// `user:password` in base64, for the few logins these tests use.
fn basic(user: &str, password: &str) -> &'static str {
    match (user, password) {
        ("blank", "") => "Ymxhbms6",
        ("blank", "now-set") => "Ymxhbms6bm93LXNldA==",
        ("guest", "wrong") => "Z3Vlc3Q6d3Jvbmc=",
        ("guest", "guest") => "Z3Vlc3Q6Z3Vlc3Q=",
        _ => panic!("no encoding for {user}"),
    }
}

/// GET /api/whoami with basic credentials; the status code.
async fn http_login(broker: &RunningBroker, user: &str, password: &str) -> u16 {
    let credentials = basic(user, password);
    let mut socket = tokio::net::TcpStream::connect(broker.http).await.expect("connect http");
    let request = format!(
        "GET /api/whoami HTTP/1.1\r\nHost: localhost\r\nAuthorization: Basic {credentials}\r\n\
         Connection: close\r\n\r\n"
    );
    socket.write_all(request.as_bytes()).await.expect("send http");
    let mut response = Vec::new();
    tokio::time::timeout(ATTEMPT_TIMEOUT, socket.read_to_end(&mut response))
        .await
        .expect("HTTP answer in time")
        .expect("read http");
    let text = String::from_utf8_lossy(&response).into_owned();
    text.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0)
}

/// A user whose password is empty cannot log in with it: AMQP PLAIN (lapin) is refused, HTTP
/// Basic is 401 — as RabbitMQ's internal backend refuses blank passwords. The user logs in
/// once it has a real password.
#[tokio::test]
async fn empty_password_never_logs_in() {
    let broker = RunningBroker::start();
    let user = r#"{"password": "", "tags": "administrator"}"#;
    assert_eq!(http(&broker, "PUT", "/api/users/blank", user).await.0, 201);
    let full = r#"{"configure": ".*", "write": ".*", "read": ".*"}"#;
    assert_eq!(http(&broker, "PUT", "/api/permissions/%2F/blank", full).await.0, 201);
    let Err(refused) = amqp_login(&broker, "blank", "").await else {
        panic!("a blank password logged in over AMQP");
    };
    assert!(refused.contains("ACCESS_REFUSED") || refused.contains("403"), "{refused}");
    assert_eq!(http_login(&broker, "blank", "").await, 401);
    let user = r#"{"password": "now-set", "tags": "administrator"}"#;
    assert_eq!(http(&broker, "PUT", "/api/users/blank", user).await.0, 204);
    amqp_login(&broker, "blank", "now-set")
        .await
        .expect("a real password logs in")
        .close(200, "bye".into())
        .await
        .ok();
    assert_eq!(http_login(&broker, "blank", "now-set").await, 200);
}

/// Refused logins from one address are answered after a growing hold, but a good login from the
/// same address right after them is not held (well under the hold a further failure would get).
#[tokio::test]
async fn good_login_is_not_slowed_by_earlier_refusals() {
    const FIRST_HOLD_MS: u64 = 50;
    const FAILURES: u32 = 5;
    let broker = RunningBroker::start_with(&["--login-failure-delay-ms", &FIRST_HOLD_MS.to_string()]);
    let mut last_refusal = Duration::ZERO;
    for _ in 0..FAILURES {
        let started = Instant::now();
        assert!(amqp_login(&broker, "guest", "wrong").await.is_err());
        last_refusal = started.elapsed();
    }
    // The fifth refusal was held 50 ms × 2^4 = 800 ms.
    let fifth_hold = Duration::from_millis(FIRST_HOLD_MS << (FAILURES - 1));
    assert!(last_refusal >= fifth_hold, "refusal answered after {last_refusal:?}, hold {fifth_hold:?}");
    // HTTP shares the count: its refusal, the sixth, is held 1.6 s.
    let started = Instant::now();
    assert_eq!(http_login(&broker, "guest", "wrong").await, 401);
    let sixth_hold = Duration::from_millis(FIRST_HOLD_MS << FAILURES);
    assert!(started.elapsed() >= sixth_hold, "HTTP refusal after {:?}", started.elapsed());
    let started = Instant::now();
    let connection = amqp_login(&broker, "guest", "guest").await.expect("good login");
    let good = started.elapsed();
    // Well under the hold the next failure would get (the seventh: 3.2 s) or even the last one.
    assert!(good < sixth_hold, "good login took {good:?}");
    connection.close(200, "bye".into()).await.ok();
    let started = Instant::now();
    assert_eq!(http_login(&broker, "guest", "guest").await, 200);
    assert!(started.elapsed() < sixth_hold);
}
