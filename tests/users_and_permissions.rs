//! End to end (issue 7): permissions set over the management API are enforced on AMQP with
//! RabbitMQ's reply codes and texts, and users, vhosts and permissions survive a restart (and a
//! `kill -9`) of the real binary on the same data directory.

mod common;

use std::time::Duration;

use common::{http, RunningBroker};
use lapin::options::*;
use lapin::types::FieldTable;
use lapin::{BasicProperties, Connection, ConnectionProperties};

const STEP: Duration = Duration::from_secs(20);

async fn within<T>(what: &str, future: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(STEP, future).await.unwrap_or_else(|_| panic!("timed out: {what}"))
}

async fn connect_as(
    broker: &RunningBroker,
    user: &str,
    password: &str,
    vhost: &str,
) -> lapin::Result<Connection> {
    let vhost = vhost.replace('/', "%2f");
    let url = format!("amqp://{user}:{password}@{}/{vhost}", broker.amqp);
    within("connect", Connection::connect(&url, ConnectionProperties::default())).await
}

/// Creates bob (password bobpw) and vhost dev; bob may configure and read `bob-*` on `/`, write
/// `bob-*` and the default exchange.
async fn create_bob(broker: &RunningBroker) {
    let (status, body) = http(broker, "PUT", "/api/users/bob", r#"{"password":"bobpw","tags":""}"#).await;
    assert_eq!(status, 201, "{body}");
    assert_eq!(http(broker, "PUT", "/api/vhosts/dev", "{}").await.0, 201);
    let perms = r#"{"configure":"^bob-","write":"^bob-|^amq\\.default$","read":"^bob-"}"#;
    let (status, body) = http(broker, "PUT", "/api/permissions/%2f/bob", perms).await;
    assert_eq!(status, 201, "{body}");
}

/// bob's permissions decide what he may do: refused operations close the channel with 403 and
/// RabbitMQ's text; a vhost without any permission refuses the connection with 530.
async fn assert_bob_is_limited(broker: &RunningBroker) {
    let error = connect_as(broker, "bob", "bobpw", "dev").await.expect_err("no permission on dev");
    assert!(
        error.to_string().contains("NOT_ALLOWED - access to vhost 'dev' refused for user 'bob'"),
        "{error}"
    );
    let conn = connect_as(broker, "bob", "bobpw", "/").await.expect("bob on /");
    let channel = conn.create_channel().await.unwrap();
    let declared = channel.queue_declare("q".into(), QueueDeclareOptions::default(), FieldTable::default());
    let error = within("declare q", declared).await.expect_err("configure on q refused");
    assert!(
        error
            .to_string()
            .contains("ACCESS_REFUSED - access to queue 'q' in vhost '/' refused for user 'bob'"),
        "{error}"
    );
    let channel = conn.create_channel().await.unwrap();
    let declared =
        channel.queue_declare("bob-q".into(), QueueDeclareOptions::default(), FieldTable::default());
    within("declare bob-q", declared).await.expect("bob-q is bob's");
    let published = channel.basic_publish(
        "".into(),
        "bob-q".into(),
        BasicPublishOptions::default(),
        b"hi",
        BasicProperties::default(),
    );
    within("publish", published).await.expect("publish to the default exchange");
    let got =
        within("get", channel.basic_get("bob-q".into(), BasicGetOptions { no_ack: true })).await.unwrap();
    assert_eq!(got.map(|m| m.delivery.data.clone()), Some(b"hi".to_vec()));
    let _ = conn.close(200, "bye".into()).await;
}

/// Permissions are enforced, and together with users and vhosts they outlive a graceful restart
/// and a kill -9: after each, bob logs in with his password and has exactly the same rights.
#[tokio::test]
async fn permissions_are_enforced_and_survive_restarts() {
    let broker = RunningBroker::start();
    create_bob(&broker).await;
    assert_bob_is_limited(&broker).await;

    let data_dir = broker.data_dir.clone();
    assert!(broker.terminate().success());
    let broker = RunningBroker::start_in(data_dir);
    let (status, body) = http(&broker, "GET", "/api/permissions/%2f/bob", "").await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains(r#""configure":"^bob-""#), "{body}");
    assert_eq!(http(&broker, "GET", "/api/vhosts/dev", "").await.0, 200);
    assert_bob_is_limited(&broker).await;

    let broker = RunningBroker::start_in(broker.kill9());
    assert_bob_is_limited(&broker).await;
    // guest (the defaults of the first start) is still there too.
    assert_eq!(http(&broker, "GET", "/api/whoami", "").await.0, 200);
}

/// Changing a user's permissions over the API applies to the connection already open.
#[tokio::test]
async fn permission_changes_apply_to_open_connections() {
    let broker = RunningBroker::start();
    create_bob(&broker).await;
    let conn = connect_as(&broker, "bob", "bobpw", "/").await.expect("bob on /");
    let channel = conn.create_channel().await.unwrap();
    let perms = r#"{"configure":".*","write":".*","read":".*"}"#;
    assert_eq!(http(&broker, "PUT", "/api/permissions/%2f/bob", perms).await.0, 204);
    let declared = channel.queue_declare("q".into(), QueueDeclareOptions::default(), FieldTable::default());
    within("declare q", declared).await.expect("now allowed");
    assert_eq!(http(&broker, "DELETE", "/api/permissions/%2f/bob", "").await.0, 204);
    let declared = channel.queue_declare("q2".into(), QueueDeclareOptions::default(), FieldTable::default());
    let error = within("declare q2", declared).await.expect_err("now refused");
    assert!(error.to_string().contains("ACCESS_REFUSED"), "{error}");
}
