//! What an operator reads (issue 25), over the real binary: connection and channel names carry
//! the accepted socket's local address.

mod common;

use std::net::SocketAddr;
use common::{http, RunningBroker};

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
