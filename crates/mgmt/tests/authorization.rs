//! Who may see and change what through the management API (issue #12, finding 4), checked against
//! RabbitMQ's rules (rabbit_web_dispatch_access_control, rabbit_mgmt_util filter_vhost /
//! filter_user): refusals are 401 `not_authorised`, listings leave out what the user may not see.

mod common;

use axum::http::StatusCode;
use base64::Engine;
use common::state;
use hourglass_broker::{
    Broker, BrokerConfig, ChannelId, Command, ConnectionId, ConnectionInfo, Permissions, Timestamp,
};
use hourglass_mgmt::{AppState, BrokerHandle};
use hourglass_wire::ChannelOpen;
use serde_json::{json, Value};

fn basic(user: &str, password: &str) -> String {
    format!("Basic {}", base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}")))
}

async fn call_as(
    s: &AppState,
    user: &str,
    method: &str,
    uri: &str,
    body: Option<Value>,
) -> (StatusCode, Value) {
    let password = if user == "guest" { "guest" } else { "pw" };
    common::request(s, &basic(user, password), method, uri, body).await
}

async fn admin(s: &AppState, method: &str, uri: &str, body: Option<Value>) -> (StatusCode, Value) {
    call_as(s, "guest", method, uri, body).await
}

/// A user with password `pw` and `tags`; `vhosts` get full permissions.
async fn user(s: &AppState, name: &str, tags: &str, vhosts: &[&str]) {
    let body = json!({"password": "pw", "tags": tags});
    assert!(admin(s, "PUT", &format!("/api/users/{name}"), Some(body)).await.0.is_success());
    for vhost in vhosts {
        let perm = json!({"configure": ".*", "write": ".*", "read": ".*"});
        let uri = format!("/api/permissions/{}/{name}", vhost.replace('/', "%2F"));
        assert!(admin(s, "PUT", &uri, Some(perm)).await.0.is_success());
    }
}

/// Vhost `vhost` (created by guest, who gets full permissions there) with queue `later` holding
/// `count` delayed messages of `payload_bytes` each.
async fn delayed_queue(s: &AppState, vhost: &str, count: usize, payload_bytes: usize) {
    let v = vhost.replace('/', "%2F");
    if vhost != "/" {
        assert_eq!(admin(s, "PUT", &format!("/api/vhosts/{v}"), None).await.0, StatusCode::CREATED);
    }
    let args = json!({"arguments": {"x-delivery-delay": 600_000}});
    assert_eq!(admin(s, "PUT", &format!("/api/queues/{v}/later"), Some(args)).await.0, StatusCode::CREATED);
    let payload = base64::engine::general_purpose::STANDARD.encode(vec![b'x'; payload_bytes]);
    for _ in 0..count {
        let publish = json!({"routing_key": "later", "payload": payload, "payload_encoding": "base64"});
        let (status, body) =
            admin(s, "POST", &format!("/api/exchanges/{v}/amq.default/publish"), Some(publish)).await;
        assert_eq!((status, body["routed"].clone()), (StatusCode::OK, json!(true)));
    }
}

fn refused(reason: &str) -> (StatusCode, Value) {
    (StatusCode::UNAUTHORIZED, json!({"error": "not_authorised", "reason": reason}))
}

const NO_VHOST_ACCESS: &str = "User not authorised to access virtual host";
const NOT_YOURS: &str = "User not authorised to access object";

/// A `monitoring` user without permissions cannot list a queue's delayed payloads (issue #12);
/// with vhost access but no read on the queue neither (the AMQP analogue, basic.get, needs
/// read); with read it can.
#[tokio::test]
async fn delayed_listing_needs_vhost_access_and_read_on_the_queue() {
    let s = state();
    delayed_queue(&s, "/", 1, 3).await;
    user(&s, "mon", "monitoring", &[]).await;
    let uri = "/api/queues/%2F/later/delayed";
    assert_eq!(call_as(&s, "mon", "GET", uri, None).await, refused(NO_VHOST_ACCESS));
    let no_read = json!({"configure": ".*", "write": ".*", "read": "^other$"});
    admin(&s, "PUT", "/api/permissions/%2F/mon", Some(no_read)).await;
    let text = "access to queue 'later' in vhost '/' refused for user 'mon'";
    assert_eq!(call_as(&s, "mon", "GET", uri, None).await, refused(text));
    let read = json!({"configure": "", "write": "", "read": "^later$"});
    admin(&s, "PUT", "/api/permissions/%2F/mon", Some(read)).await;
    let (status, listed) = call_as(&s, "mon", "GET", uri, None).await;
    assert_eq!((status, listed[0]["payload"].clone()), (StatusCode::OK, json!("eHh4")));
}

/// A `management` user cannot release, cancel or change the visibility of another vhost's
/// messages (issue #12); the messages stay delayed. An administrator with permissions there can.
#[tokio::test]
async fn steering_delayed_messages_needs_access_to_their_vhost() {
    let s = state();
    delayed_queue(&s, "other", 2, 3).await;
    user(&s, "mgr", "management", &["/"]).await;
    let (_, listed) = admin(&s, "GET", "/api/queues/other/later/delayed", None).await;
    let (first, second) = (listed[0]["id"].as_u64().unwrap(), listed[1]["id"].as_u64().unwrap());
    let release = format!("/api/queues/other/later/delayed/{first}");
    let cancel = format!("/api/queues/other/later/delayed/{second}");
    let now = Some(json!({"delay_ms": 0}));
    assert_eq!(call_as(&s, "mgr", "POST", &release, now.clone()).await, refused(NO_VHOST_ACCESS));
    assert_eq!(call_as(&s, "mgr", "DELETE", &cancel, None).await, refused(NO_VHOST_ACCESS));
    let visibility = json!({"receipt_handle": "1.2.3.4", "timeout_ms": 0});
    let uri = "/api/queues/other/later/visibility";
    assert_eq!(call_as(&s, "mgr", "POST", uri, Some(visibility)).await, refused(NO_VHOST_ACCESS));
    let (_, queue) = admin(&s, "GET", "/api/queues/other/later", None).await;
    assert_eq!(queue["messages_delayed"], json!(2));
    assert_eq!(admin(&s, "POST", &release, now).await.0, StatusCode::NO_CONTENT);
    assert_eq!(admin(&s, "DELETE", &cancel, None).await.0, StatusCode::NO_CONTENT);
}

/// An API over a broker with stand-in AMQP connections (the standalone broker has no
/// sockets), each `(id, user, peer)` in `/` with one channel; their API names are
/// `peer -> 127.0.0.1:5672`.
fn state_with_connections(connections: &[(u64, &str, &str)]) -> (AppState, Vec<String>) {
    let mut broker = Broker::new(BrokerConfig::default());
    let mut names = Vec::new();
    for &(id, user, peer) in connections {
        let info = ConnectionInfo {
            user: user.to_owned(),
            vhost: "/".to_owned(),
            peer: peer.to_owned(),
            local: "127.0.0.1:5672".to_owned(),
            client_properties: Default::default(),
            capabilities: Default::default(),
            frame_max: 131_072,
            channel_max: 2047,
            heartbeat_s: 60,
            permissions: Permissions::full(),
            may_impersonate: false,
            login: Default::default(),
        };
        let conn = ConnectionId(id);
        broker.handle_command(Command::ConnectionOpen { conn, info: Box::new(info) }, Timestamp::ZERO);
        let open = Command::Method { conn, channel: ChannelId(1), method: ChannelOpen::default().into() };
        broker.handle_command(open, Timestamp::ZERO);
        names.push(format!("{peer} -> 127.0.0.1:5672"));
    }
    while broker.poll_effect().is_some() {}
    (AppState { broker: BrokerHandle::standalone_with(broker), ..state() }, names)
}

fn connection_uri(name: &str) -> String {
    format!("/api/connections/{}", name.replace(' ', "%20").replace('>', "%3E"))
}

/// Only an administrator or the owner closes a connection (RabbitMQ's is_authorized_user:
/// DELETE needs `administrator`; GET `monitoring`); refusals are 401, as RabbitMQ's.
#[tokio::test]
async fn only_administrators_or_the_owner_close_a_connection() {
    let (s, names) =
        state_with_connections(&[(1001, "alice", "10.0.0.1:1111"), (1002, "bob", "10.0.0.2:2222")]);
    user(&s, "alice", "management", &["/"]).await;
    user(&s, "bob", "management", &["/"]).await;
    user(&s, "mon", "monitoring", &["/"]).await;
    let (alices, bobs) = (connection_uri(&names[0]), connection_uri(&names[1]));
    assert_eq!(call_as(&s, "bob", "DELETE", &alices, None).await, refused(NOT_YOURS));
    assert_eq!(call_as(&s, "bob", "GET", &alices, None).await, refused(NOT_YOURS));
    assert_eq!(call_as(&s, "bob", "GET", &format!("{alices}/channels"), None).await, refused(NOT_YOURS));
    assert_eq!(call_as(&s, "mon", "DELETE", &alices, None).await, refused(NOT_YOURS));
    let everyones = "/api/connections/username/alice";
    assert_eq!(call_as(&s, "bob", "DELETE", everyones, None).await, refused(NOT_YOURS));
    assert_eq!(call_as(&s, "mon", "GET", &alices, None).await.0, StatusCode::OK);
    assert_eq!(call_as(&s, "bob", "GET", &bobs, None).await.0, StatusCode::OK);
    assert_eq!(call_as(&s, "bob", "DELETE", &bobs, None).await.0, StatusCode::NO_CONTENT);
    assert_eq!(admin(&s, "DELETE", &alices, None).await.0, StatusCode::NO_CONTENT);
    // A name that matches nothing: 401 for whoever could not act on others' anyway, else 404.
    let missing = connection_uri("10.9.9.9:1 -> 127.0.0.1:5672");
    assert_eq!(call_as(&s, "bob", "DELETE", &missing, None).await, refused(NOT_YOURS));
    assert_eq!(admin(&s, "DELETE", &missing, None).await.0, StatusCode::NOT_FOUND);
}

fn names(listing: &Value, key: &str) -> Vec<String> {
    let mut names: Vec<String> =
        listing.as_array().unwrap().iter().map(|i| i[key].as_str().unwrap_or_default().to_owned()).collect();
    names.sort();
    names
}

/// Users without `monitoring` see only their own connections, channels and consumers; monitoring
/// users and administrators see everyone's (RabbitMQ's filter_user).
#[tokio::test]
async fn connection_and_channel_listings_show_others_only_to_monitoring_users() {
    let (s, _) =
        state_with_connections(&[(1001, "alice", "10.0.0.1:1111"), (1002, "carol", "10.0.0.3:3333")]);
    user(&s, "alice", "management", &["/"]).await;
    user(&s, "mon", "monitoring", &[]).await;
    for uri in
        ["/api/connections", "/api/channels", "/api/vhosts/%2F/connections", "/api/vhosts/%2F/channels"]
    {
        let (status, listing) = call_as(&s, "alice", "GET", uri, None).await;
        assert_eq!((status, names(&listing, "user")), (StatusCode::OK, vec!["alice".to_owned()]), "{uri}");
    }
    for uri in ["/api/connections", "/api/channels"] {
        let (_, listing) = call_as(&s, "mon", "GET", uri, None).await;
        assert_eq!(names(&listing, "user"), ["alice", "carol"], "{uri}");
    }
    // Per-vhost listings need access to the vhost (is_authorized_vhost), monitoring or not.
    assert_eq!(
        call_as(&s, "mon", "GET", "/api/vhosts/%2F/connections", None).await,
        refused(NO_VHOST_ACCESS)
    );
    let (_, overview) = call_as(&s, "alice", "GET", "/api/overview", None).await;
    assert_eq!(overview["object_totals"]["connections"], json!(1));
    assert_eq!(overview["object_totals"]["channels"], json!(1));
}

/// Listings of queues, exchanges and bindings leave out vhosts the user has no permissions in
/// (RabbitMQ's filter_vhost, `monitoring` included); `/api/vhosts` lists every vhost only to
/// monitoring users and administrators; a vhost's own listing is 401 without access.
#[tokio::test]
async fn listings_leave_out_vhosts_without_access() {
    let s = state();
    delayed_queue(&s, "secret", 0, 0).await;
    admin(&s, "PUT", "/api/exchanges/secret/hidden", Some(json!({"type": "fanout"}))).await;
    admin(&s, "POST", "/api/bindings/secret/e/hidden/q/later", Some(json!({}))).await;
    admin(&s, "PUT", "/api/queues/%2F/open", Some(json!({}))).await;
    user(&s, "bob", "management", &["/"]).await;
    user(&s, "mon", "monitoring", &["/"]).await;
    for who in ["bob", "mon"] {
        for uri in ["/api/queues", "/api/exchanges", "/api/bindings"] {
            let (status, listing) = call_as(&s, who, "GET", uri, None).await;
            assert_eq!(status, StatusCode::OK);
            assert_eq!(names(&listing, "vhost").last().map(String::as_str), Some("/"), "{who} {uri}");
        }
        for uri in [
            "/api/queues/secret",
            "/api/exchanges/secret",
            "/api/bindings/secret",
            "/api/queues/secret/later",
        ] {
            assert_eq!(call_as(&s, who, "GET", uri, None).await, refused(NO_VHOST_ACCESS), "{who} {uri}");
        }
    }
    let (_, listing) = call_as(&s, "guest", "GET", "/api/queues", None).await;
    assert_eq!(names(&listing, "name"), ["later", "open"]);
    assert_eq!(names(&call_as(&s, "bob", "GET", "/api/vhosts", None).await.1, "name"), ["/"]);
    assert_eq!(names(&call_as(&s, "mon", "GET", "/api/vhosts", None).await.1, "name"), ["/", "secret"]);
    let (_, overview) = call_as(&s, "bob", "GET", "/api/overview", None).await;
    assert_eq!(overview["object_totals"]["queues"], json!(1));
    assert_eq!(call_as(&s, "bob", "GET", "/api/nodes", None).await, refused("Not monitor user"));
    assert_eq!(call_as(&s, "mon", "GET", "/api/nodes", None).await.0, StatusCode::OK);
    assert_eq!(call_as(&s, "bob", "GET", "/api/vhosts/%2F", None).await, refused("Not administrator user"));
    assert_eq!(
        call_as(&s, "bob", "GET", "/api/vhosts/%2F/permissions", None).await,
        refused("Not administrator user")
    );
}

/// One delayed listing shows at most 64 KiB of each payload (`truncate` asks for less) and at
/// most 8 MiB in all: 1,000 large messages made 1 GiB of JSON before (issue #12).
#[tokio::test]
async fn delayed_listing_caps_payload_bytes() {
    let s = state();
    delayed_queue(&s, "/", 130, 70_000).await;
    let (status, listed) = admin(&s, "GET", "/api/queues/%2F/later/delayed?limit=1000", None).await;
    assert_eq!(status, StatusCode::OK);
    let listed = listed.as_array().unwrap();
    let shown: Vec<usize> = listed
        .iter()
        .map(|m| {
            base64::engine::general_purpose::STANDARD.decode(m["payload"].as_str().unwrap()).unwrap().len()
        })
        .collect();
    assert_eq!((shown[0], listed[0]["payload_bytes"].clone()), (65_536, json!(70_000)));
    assert_eq!(listed[0]["payload_truncated"], json!(true));
    assert!(listed.len() < 130, "the 8 MiB budget ends the listing early: {}", listed.len());
    assert!(shown.iter().sum::<usize>() <= 8 * 1024 * 1024);
    let (_, listed) = admin(&s, "GET", "/api/queues/%2F/later/delayed?limit=2&truncate=10", None).await;
    assert_eq!(listed[1]["payload"], json!(base64::engine::general_purpose::STANDARD.encode([b'x'; 10])));
}

/// `…/get` stops taking messages once it took 16 MiB of bodies; the rest stay queued.
#[tokio::test]
async fn get_stops_at_its_byte_budget() {
    let s = state();
    admin(&s, "PUT", "/api/queues/%2F/big", Some(json!({}))).await;
    let payload = base64::engine::general_purpose::STANDARD.encode(vec![b'x'; 1 << 20]);
    for _ in 0..20 {
        let publish = json!({"routing_key": "big", "payload": payload, "payload_encoding": "base64"});
        admin(&s, "POST", "/api/exchanges/%2F/amq.default/publish", Some(publish)).await;
    }
    let get = json!({"count": 100, "ackmode": "ack_requeue_false", "truncate": 1});
    let (status, got) = admin(&s, "POST", "/api/queues/%2F/big/get", Some(get)).await;
    assert_eq!((status, got.as_array().unwrap().len()), (StatusCode::OK, 16));
    let (_, queue) = admin(&s, "GET", "/api/queues/%2F/big", None).await;
    assert_eq!(queue["messages_ready"], json!(4));
}

/// RabbitMQ's `policymaker` tag: policies in the vhosts it has permissions in (not operator
/// policies), and the listings any management user gets — but never users, vhosts,
/// permissions, limits or definitions, which stay `administrator`'s (401 `Not administrator
/// user`, as rabbit_mgmt_util:is_authorized_admin answers).
#[tokio::test]
async fn policymaker_manages_policies_but_not_users_vhosts_limits_or_definitions() {
    let s = state();
    user(&s, "pm", "policymaker", &["/"]).await;
    assert_eq!(admin(&s, "PUT", "/api/vhosts/hidden", None).await.0, StatusCode::CREATED);
    let limit = json!({"value": 5});
    assert!(admin(&s, "PUT", "/api/vhost-limits/hidden/max-queues", Some(limit.clone()))
        .await
        .0
        .is_success());
    assert!(admin(&s, "PUT", "/api/vhost-limits/%2F/max-queues", Some(limit.clone())).await.0.is_success());

    let policy = json!({"pattern": "^pm\\.", "definition": {"max-length": 10}});
    assert_eq!(
        call_as(&s, "pm", "PUT", "/api/policies/%2F/pm", Some(policy.clone())).await.0,
        StatusCode::CREATED
    );
    assert_eq!(call_as(&s, "pm", "DELETE", "/api/policies/%2F/pm", None).await.0, StatusCode::NO_CONTENT);
    let (status, _) = call_as(&s, "pm", "PUT", "/api/policies/hidden/pm", Some(policy.clone())).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "no permissions in that vhost");
    let (status, _) = call_as(&s, "pm", "PUT", "/api/operator-policies/%2F/pm", Some(policy)).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "operator policies are administrators'");

    let not_admin = json!({"error": "not_authorised", "reason": "Not administrator user"});
    let refused: [(&str, &str, Option<Value>); 10] = [
        ("PUT", "/api/users/new", Some(json!({"password": "x", "tags": ""}))),
        ("DELETE", "/api/users/guest", None),
        ("GET", "/api/users", None),
        ("PUT", "/api/vhosts/mine", Some(json!({}))),
        ("DELETE", "/api/vhosts/hidden", None),
        ("PUT", "/api/permissions/%2F/pm", Some(json!({"configure": ".*", "write": ".*", "read": ".*"}))),
        ("PUT", "/api/vhost-limits/%2F/max-queues", Some(json!({"value": 100}))),
        ("DELETE", "/api/vhost-limits/%2F/max-queues", None),
        ("PUT", "/api/user-limits/pm/max-channels", Some(json!({"value": 100}))),
        ("GET", "/api/definitions", None),
    ];
    for (method, uri, body) in refused {
        assert_eq!(
            call_as(&s, "pm", method, uri, body).await,
            (StatusCode::UNAUTHORIZED, not_admin.clone()),
            "{method} {uri}"
        );
    }
    // Limits are listed for the vhosts it can see only.
    let (status, listed) = call_as(&s, "pm", "GET", "/api/vhost-limits", None).await;
    assert_eq!((status, listed), (StatusCode::OK, json!([{"vhost": "/", "value": {"max-queues": 5}}])));
    assert_eq!(call_as(&s, "pm", "GET", "/api/vhost-limits/hidden", None).await.0, StatusCode::UNAUTHORIZED);
    assert!(admin(&s, "GET", "/api/vhost-limits/hidden", None).await.1.to_string().contains("max-queues"));
}
