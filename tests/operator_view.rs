//! What an operator reads (issue 25), over the real binary: connection and channel names carry
//! the accepted socket's local address, and the start-up banner points to the web UI with the
//! login a first start made.

mod common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use common::{http, RunningBroker};

/// The lines logged so far containing `text`, waiting up to 10 s for the first.
fn wait_for_line(broker: &RunningBroker, text: &str) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let lines = broker.log_lines_with(text);
        if !lines.is_empty() || Instant::now() > deadline {
            return lines;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A broker listening on every address (`--bind ::`, as by default) names a loopback client's
/// connection `127.0.0.1:PEER -> 127.0.0.1:5672`-style, as RabbitMQ does: the local end of the
/// accepted socket, not the bind address `[::]:PORT`. Channels and consumers carry the same name,
/// and the connection's `host`/`port` are that local end.
#[tokio::test]
async fn connection_names_use_the_accepted_sockets_local_address() {
    let broker = RunningBroker::start_with(&["--bind", "::"]);
    let local = SocketAddr::from(([127, 0, 0, 1], broker.amqp.port()));
    let url = format!("amqp://guest:guest@{local}/%2f");
    let connection = lapin::Connection::connect(&url, Default::default()).await.expect("connect");
    let channel = connection.create_channel().await.expect("channel");
    channel.queue_declare("named".into(), Default::default(), Default::default()).await.expect("declare");
    // Kept: a dropped lapin consumer is cancelled.
    let _consumer = channel
        .basic_consume("named".into(), "c1".into(), Default::default(), Default::default())
        .await
        .expect("consume");
    let (status, body) = http(&broker, "GET", "/api/connections", "").await;
    assert_eq!(status, 200, "{body}");
    let connections: serde_json::Value = serde_json::from_str(&body).unwrap();
    let c = &connections[0];
    let name = c["name"].as_str().expect("a name");
    let peer = format!("127.0.0.1:{}", c["peer_port"]);
    assert_eq!(name, format!("{peer} -> {local}"), "{body}");
    assert_eq!((c["host"].as_str(), c["port"].as_u64()), (Some("127.0.0.1"), Some(u64::from(local.port()))));
    let (_, body) = http(&broker, "GET", "/api/channels", "").await;
    let channels: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(channels[0]["name"], format!("{name} (1)"), "{body}");
    assert_eq!(channels[0]["connection_details"]["name"], name, "{body}");
    let (_, body) = http(&broker, "GET", "/api/consumers", "").await;
    let consumers: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(consumers[0]["channel_details"]["connection_name"], name, "{body}");
    // The name is the one a connection is closed by.
    let path = format!("/api/connections/{}", name.replace(' ', "%20").replace('>', "%3E"));
    let (status, body) = http(&broker, "GET", &path, "").await;
    assert_eq!(status, 200, "{body}");
}

/// A first start's banner gives the UI's URL and guest/guest; a later start on the same data
/// directory gives the URL only (guest may be gone); `--default-user` is named, its password not.
#[test]
fn the_banner_points_to_the_ui_and_the_login_a_first_start_made() {
    let broker = RunningBroker::start();
    let url = format!("http://127.0.0.1:{}/", broker.http.port());
    let lines = wait_for_line(&broker, "management UI at");
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(
        lines[0].contains(&format!("management UI at {url} : log in as guest / guest from this machine")),
        "{lines:?}"
    );
    let data_dir = broker.data_dir();
    let _ = broker.terminate();

    let again = RunningBroker::start_in(data_dir.clone());
    let lines = wait_for_line(&again, "management UI at");
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(lines[0].contains("management UI at http://127.0.0.1:"), "{lines:?}");
    assert!(!lines[0].contains("log in as"), "no login claimed at a later start: {lines:?}");
    let _ = again.terminate();
    let _ = std::fs::remove_dir_all(&data_dir);

    let admin = RunningBroker::start_with(&["--default-user", "root", "--default-pass", "s3cret-pw"]);
    let lines = wait_for_line(&admin, "management UI at");
    assert!(lines.iter().any(|l| l.contains("log in as root with the --default-pass")), "{lines:?}");
    assert!(!lines.iter().any(|l| l.contains("s3cret-pw")), "the password is never logged: {lines:?}");
}

/// Every `hourglass_*` family the binary exposes on `/metrics` is in docs/metrics.md (issue 25:
/// `hourglass_store_recovery_damaged_*` were not).
#[tokio::test]
async fn every_hourglass_metric_is_documented() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let broker = RunningBroker::start();
    let line = broker.log_lines_with("metrics=").into_iter().next().expect("the listening line");
    let metrics = common::parse_addr(&line, "metrics=").expect("metrics address");
    let mut socket = tokio::net::TcpStream::connect(metrics).await.expect("connect metrics");
    let request = format!("GET /metrics HTTP/1.1\r\nHost: {metrics}\r\nConnection: close\r\n\r\n");
    socket.write_all(request.as_bytes()).await.expect("send");
    let mut scraped = String::new();
    socket.read_to_string(&mut scraped).await.expect("read");
    let names: Vec<&str> = scraped
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|name| name.starts_with("hourglass_"))
        .collect();
    assert!(names.len() >= 5, "{scraped}");
    let docs =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/metrics.md")).expect("docs");
    let undocumented: Vec<&&str> = names.iter().filter(|n| !docs.contains(&format!("`{n}`"))).collect();
    assert!(undocumented.is_empty(), "not in docs/metrics.md: {undocumented:?}");
}
