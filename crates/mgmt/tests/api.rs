//! The management API in process: a standalone broker task, requests through the router.

mod common;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use common::{state, GUEST};
use hourglass_mgmt::AppState;
use serde_json::{json, Value};
use tower::ServiceExt;

async fn call(state: &AppState, method: &str, uri: &str, body: Option<Value>) -> (StatusCode, Value) {
    call_as(state, GUEST, method, uri, body).await
}

async fn call_as(
    state: &AppState,
    auth: &str,
    method: &str,
    uri: &str,
    body: Option<Value>,
) -> (StatusCode, Value) {
    common::request(state, auth, method, uri, body).await
}

/// Bad or missing credentials are 401 with RabbitMQ's error body; good ones see whoami.
#[tokio::test]
async fn basic_auth_is_required() {
    let s = state();
    let (status, body) = call_as(&s, "Basic Z3Vlc3Q6bm9wZQ==", "GET", "/api/whoami", None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert_eq!(body["error"], "not_authorized");
    let (status, body) = call(&s, "GET", "/api/whoami", None).await;
    assert_eq!(status, StatusCode::OK);
    let own = json!([{"vhost": "/", "configure": ".*", "write": ".*", "read": ".*"}]);
    assert_eq!(
        body,
        json!({"name": "guest", "tags": ["administrator"], "is_internal_user": true, "permissions": own})
    );
}

/// Overview and nodes carry the fields rabbitmqadmin reads.
#[tokio::test]
async fn overview_and_nodes_shapes() {
    let s = state();
    let (status, body) = call(&s, "GET", "/api/overview", None).await;
    assert_eq!(status, StatusCode::OK);
    for key in ["rabbitmq_version", "erlang_version", "product_name", "node", "cluster_name", "listeners"] {
        assert!(body.get(key).is_some(), "overview lacks {key}");
    }
    // A fresh vhost has RabbitMQ's seven: the default, amq.direct/fanout/topic/headers/match, amq.rabbitmq.trace.
    assert_eq!(body["object_totals"]["exchanges"], 7);
    assert_eq!(body["queue_totals"]["messages"], 0);
    let (status, body) = call(&s, "GET", "/api/nodes", None).await;
    assert_eq!(status, StatusCode::OK);
    assert!(body[0]["os_pid"].is_string());
}

/// Queue lifecycle: 201 create, 204 redeclare, 400 inequivalent, publish, get with requeue,
/// purge, delete, 404 after.
#[tokio::test]
async fn queue_lifecycle_publish_get_purge_delete() {
    let s = state();
    let (status, _) = call(
        &s,
        "PUT",
        "/api/queues/%2F/q1",
        Some(json!({"durable": true, "arguments": {"x-queue-type": "classic"}})),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED);
    let (status, _) = call(
        &s,
        "PUT",
        "/api/queues/%2F/q1",
        Some(json!({"durable": true, "arguments": {"x-queue-type": "classic"}})),
    )
    .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, body) = call(&s, "PUT", "/api/queues/%2F/q1", Some(json!({"durable": false}))).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(body["reason"].as_str().unwrap().contains("inequivalent arg 'durable'"));
    let publish = json!({"routing_key": "q1", "payload": "hello", "payload_encoding": "string", "properties": {"delivery_mode": 2}});
    let (status, body) = call(&s, "POST", "/api/exchanges/%2F/amq.default/publish", Some(publish)).await;
    assert_eq!((status, body), (StatusCode::OK, json!({"routed": true})));
    let (_, body) = call(
        &s,
        "POST",
        "/api/exchanges/%2F/amq.direct/publish",
        Some(json!({"routing_key": "nowhere", "payload": ""})),
    )
    .await;
    assert_eq!(body, json!({"routed": false}));
    let get = json!({"count": 5, "ackmode": "ack_requeue_true", "encoding": "auto"});
    let (status, body) = call(&s, "POST", "/api/queues/%2F/q1/get", Some(get.clone())).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body[0]["payload"], "hello");
    assert_eq!(body[0]["payload_encoding"], "string");
    assert_eq!(body[0]["properties"]["delivery_mode"], 2);
    let (_, body) = call(&s, "POST", "/api/queues/%2F/q1/get", Some(get)).await;
    assert_eq!(body[0]["redelivered"], true, "ack_requeue_true puts the message back");
    let (_, body) = call(&s, "GET", "/api/queues/%2F/q1", None).await;
    for key in [
        "name",
        "vhost",
        "type",
        "durable",
        "auto_delete",
        "exclusive",
        "arguments",
        "node",
        "state",
        "messages",
        "messages_ready",
        "messages_unacknowledged",
        "consumers",
    ] {
        assert!(body.get(key).is_some(), "queue lacks {key}");
    }
    assert_eq!(body["messages_ready"], 1);
    assert_eq!(body["arguments"], json!({"x-queue-type": "classic"}));
    let (status, _) = call(&s, "DELETE", "/api/queues/%2F/q1/contents", None).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (_, body) = call(&s, "GET", "/api/queues/%2F/q1", None).await;
    assert_eq!(body["messages"], 0);
    let (status, _) = call(&s, "DELETE", "/api/queues/%2F/q1", None).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, _) = call(&s, "GET", "/api/queues/%2F/q1", None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _) = call(&s, "DELETE", "/api/queues/%2F/q1", None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _) = call(&s, "GET", "/api/queues/nope", None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

/// Exchanges and bindings: declare, bind a queue, list the binding, delete it by properties key.
#[tokio::test]
async fn exchanges_and_bindings() {
    let s = state();
    let (status, _) =
        call(&s, "PUT", "/api/exchanges/%2F/logs", Some(json!({"type": "topic", "durable": true}))).await;
    assert_eq!(status, StatusCode::CREATED);
    let (status, _) = call(&s, "PUT", "/api/exchanges/%2F/bad", Some(json!({"type": "nope"}))).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    // ACCESS_REFUSED is 401 not_authorised in RabbitMQ's API (rabbit_mgmt_util:direct_request).
    let (status, _) = call(&s, "PUT", "/api/exchanges/%2F/amq.custom", Some(json!({"type": "direct"}))).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let (_, body) = call(&s, "GET", "/api/exchanges/%2F/logs", None).await;
    assert_eq!(body["type"], "topic");
    assert_eq!(body["vhost"], "/");
    call(&s, "PUT", "/api/queues/%2F/q", None).await;
    let (status, _) =
        call(&s, "POST", "/api/bindings/%2F/e/logs/q/q", Some(json!({"routing_key": "a.#"}))).await;
    assert_eq!(status, StatusCode::CREATED);
    let (status, _) =
        call(&s, "POST", "/api/bindings/%2F/e/logs/q/missing", Some(json!({"routing_key": "a"}))).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (_, body) = call(&s, "GET", "/api/bindings/%2F/e/logs/q/q", None).await;
    assert_eq!(body[0]["routing_key"], "a.#");
    assert_eq!(body[0]["properties_key"], "a.#");
    let (_, body) = call(&s, "GET", "/api/queues/%2F/q/bindings", None).await;
    assert_eq!(body.as_array().unwrap().len(), 2, "the default exchange's binding and ours");
    let (_, routed) = call(
        &s,
        "POST",
        "/api/exchanges/%2F/logs/publish",
        Some(json!({"routing_key": "a.b", "payload": "x"})),
    )
    .await;
    assert_eq!(routed["routed"], true);
    let (status, _) = call(&s, "DELETE", "/api/bindings/%2F/e/logs/q/q/a.%23", None).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (_, body) = call(&s, "GET", "/api/bindings/%2F/e/logs/q/q", None).await;
    assert_eq!(body, json!([]));
    let (status, _) = call(&s, "DELETE", "/api/exchanges/%2F/logs", None).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
}

/// Vhosts, users and permissions; a new user with a password can log in, and is refused
/// the admin endpoints without the administrator tag.
#[tokio::test]
async fn vhosts_users_permissions() {
    let s = state();
    assert_eq!(
        call(&s, "PUT", "/api/vhosts/dev", Some(json!({"description": "d"}))).await.0,
        StatusCode::CREATED
    );
    let (_, body) = call(&s, "GET", "/api/vhosts", None).await;
    assert_eq!(body.as_array().unwrap().len(), 2);
    assert_eq!(
        call(&s, "PUT", "/api/users/bob", Some(json!({"password": "pw", "tags": "monitoring"}))).await.0,
        StatusCode::CREATED
    );
    let (_, body) = call(&s, "GET", "/api/users/bob", None).await;
    assert_eq!(body["hashing_algorithm"], "rabbit_password_hashing_sha256");
    assert_eq!(body["tags"], json!(["monitoring"]));
    let perm = json!({"configure": ".*", "write": ".*", "read": ".*"});
    assert_eq!(call(&s, "PUT", "/api/permissions/dev/bob", Some(perm.clone())).await.0, StatusCode::CREATED);
    assert_eq!(call(&s, "PUT", "/api/permissions/nope/bob", Some(perm)).await.0, StatusCode::NOT_FOUND);
    let (_, body) = call(&s, "GET", "/api/permissions", None).await;
    assert_eq!(body.as_array().unwrap().len(), 3);
    let bob = "Basic Ym9iOnB3"; // bob:pw
    assert_eq!(call_as(&s, bob, "GET", "/api/whoami", None).await.0, StatusCode::OK);
    assert_eq!(call_as(&s, bob, "GET", "/api/users", None).await.0, StatusCode::UNAUTHORIZED);
    assert_eq!(call(&s, "PUT", "/api/queues/dev/q", None).await.0, StatusCode::CREATED);
    assert_eq!(call(&s, "DELETE", "/api/vhosts/dev", None).await.0, StatusCode::NO_CONTENT);
    assert_eq!(call(&s, "GET", "/api/queues/dev/q", None).await.0, StatusCode::NOT_FOUND);
    assert_eq!(call(&s, "DELETE", "/api/users/bob", None).await.0, StatusCode::NO_CONTENT);
    assert_eq!(call(&s, "DELETE", "/api/users/bob", None).await.0, StatusCode::NOT_FOUND);
}

/// Pagination, column selection and sorting follow RabbitMQ's query parameters.
#[tokio::test]
async fn list_query_parameters() {
    let s = state();
    for q in ["b", "a", "c"] {
        call(&s, "PUT", &format!("/api/queues/%2F/{q}"), None).await;
    }
    let (_, body) = call(&s, "GET", "/api/queues?columns=name&sort=name&sort_reverse=true", None).await;
    assert_eq!(body, json!([{"name": "c"}, {"name": "b"}, {"name": "a"}]));
    let (_, body) = call(&s, "GET", "/api/queues?page=2&page_size=2&columns=name", None).await;
    assert_eq!(body["items"], json!([{"name": "c"}]));
    assert_eq!((body["page_count"].as_u64(), body["total_count"].as_u64()), (Some(2), Some(3)));
    assert_eq!(call(&s, "GET", "/api/queues?page=0", None).await.0, StatusCode::BAD_REQUEST);
}

/// Definitions exported from one broker import into a fresh one and export identically.
#[tokio::test]
async fn definitions_round_trip() {
    let a = state();
    call(&a, "PUT", "/api/vhosts/v2", None).await;
    call(&a, "PUT", "/api/users/ann", Some(json!({"password": "x", "tags": ["management"]}))).await;
    call(
        &a,
        "PUT",
        "/api/exchanges/v2/ex",
        Some(json!({"type": "fanout", "arguments": {"alternate-exchange": "amq.fanout"}})),
    )
    .await;
    call(&a, "PUT", "/api/queues/v2/q", Some(json!({"arguments": {"x-message-ttl": 1000}}))).await;
    call(&a, "POST", "/api/bindings/v2/e/ex/q/q", Some(json!({"routing_key": "k"}))).await;
    call(&a, "POST", "/api/bindings/v2/e/amq.topic/e/ex", Some(json!({"routing_key": "t.*"}))).await;
    let (status, exported) = call(&a, "GET", "/api/definitions", None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(exported["bindings"].as_array().unwrap().len(), 2);
    let b = state();
    let (status, body) = call(&b, "POST", "/api/definitions", Some(exported.clone())).await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
    let (_, again) = call(&b, "GET", "/api/definitions", None).await;
    for key in ["users", "vhosts", "permissions", "queues", "exchanges", "bindings"] {
        assert_eq!(again[key], exported[key], "{key} differs after the round trip");
    }
    let (status, _) = call(&b, "POST", "/api/definitions", Some(json!({"queues": [{"name": "q"}]}))).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
}

/// A definitions file exported by RabbitMQ 3.10.8 (`rabbitmqctl export_definitions`, trimmed to one
/// vhost) imports: the user logs in with the password RabbitMQ hashed, a look-ahead permission
/// pattern is kept, bindings naming an internal exchange RabbitMQ left out of its export are
/// skipped as RabbitMQ skips them, and the export gives queues their `type`.
#[tokio::test]
async fn rabbitmq_export_imports() {
    let s = state();
    let export = json!({
        "rabbit_version": "3.10.8", "rabbitmq_version": "3.10.8",
        "users": [{"hashing_algorithm": "rabbit_password_hashing_sha256", "limits": {}, "name": "hg-alice",
                   "password_hash": "lnHZu0skgPuUQUq5mgoaa1QRYQ2Y36zA5G6jkq2Bobx6cE4B", "tags": ["monitoring", "management"]}],
        "vhosts": [{"limits": [], "metadata": {"description": "", "tags": ""}, "name": "hg-src"}],
        "permissions": [{"configure": "^alice-", "read": "^(?!amq\\.).*", "user": "hg-alice", "vhost": "hg-src", "write": ".*"}],
        "topic_permissions": [], "parameters": [], "global_parameters": [], "policies": [],
        "queues": [
            {"arguments": {"x-dead-letter-exchange": "orders-ae", "x-max-length": 1000, "x-message-ttl": 60000},
             "auto_delete": false, "durable": true, "name": "orders.created", "type": "classic", "vhost": "hg-src"},
            {"arguments": {"x-queue-type": "quorum"}, "auto_delete": false, "durable": true, "name": "qq", "type": "quorum", "vhost": "hg-src"}
        ],
        "exchanges": [
            {"arguments": {}, "auto_delete": false, "durable": true, "name": "orders", "type": "topic", "vhost": "hg-src"},
            {"arguments": {}, "auto_delete": false, "durable": true, "name": "orders-ae", "type": "fanout", "vhost": "hg-src"}
        ],
        "bindings": [
            {"arguments": {}, "destination": "internal-x", "destination_type": "exchange", "routing_key": "order.#", "source": "orders", "vhost": "hg-src"},
            {"arguments": {}, "destination": "orders.created", "destination_type": "queue", "routing_key": "order.created.#", "source": "orders", "vhost": "hg-src"}
        ]
    });
    let (status, body) = call(&s, "POST", "/api/definitions", Some(export)).await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
    assert!(s.users.check_login("hg-alice", "alicepw", false).is_ok());
    assert_eq!(s.users.permission("hg-src", "hg-alice").unwrap().read, "^(?!amq\\.).*");
    let (_, exported) = call(&s, "GET", "/api/definitions", None).await;
    assert_eq!(exported["bindings"].as_array().unwrap().len(), 1, "{}", exported["bindings"]);
    let types: Vec<&str> =
        exported["queues"].as_array().unwrap().iter().map(|q| q["type"].as_str().unwrap()).collect();
    assert_eq!(types, ["classic", "quorum"]);
}

/// A quorum queue's row names its leader and members, as RabbitMQ's does: this node, the one a
/// client can use. A classic queue's has no such fields, as RabbitMQ's has none.
#[tokio::test]
async fn a_quorum_queue_names_this_node_as_its_leader_and_member() {
    let s = state();
    let quorum = json!({"durable": true, "arguments": {"x-queue-type": "quorum"}});
    let (status, body) = call(&s, "PUT", "/api/queues/%2F/qq", Some(quorum)).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let (status, body) = call(&s, "PUT", "/api/queues/%2F/cq", Some(json!({"durable": true}))).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let (_, row) = call(&s, "GET", "/api/queues/%2F/qq", None).await;
    let node = s.node.name.as_str();
    assert_eq!(
        (&row["leader"], &row["members"], &row["online"]),
        (&json!(node), &json!([node]), &json!([node]))
    );
    let (_, row) = call(&s, "GET", "/api/queues/%2F/cq", None).await;
    assert!(row.get("leader").is_none() && row.get("members").is_none(), "{row}");
}

/// A permission pattern that does not compile is refused with 400, as RabbitMQ refuses it.
#[tokio::test]
async fn invalid_permission_pattern_is_bad_request() {
    let s = state();
    let perm = json!({"configure": "(", "write": ".*", "read": ".*"});
    let (status, body) = call(&s, "PUT", "/api/permissions/%2F/guest", Some(perm)).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(body["reason"].as_str().unwrap().contains("invalid configure regexp '('"), "{body}");
}

/// The listings rabbitmqadmin v2 reads for things Hourglass does not have answer empty lists;
/// a vhost's definitions export without `vhost` keys and import into another vhost; a user's
/// connections list (rabbitmqadmin `list user_connections`).
#[tokio::test]
async fn rabbitmqadmin_v2_endpoints() {
    let s = state();
    for path in [
        "/api/vhost-limits",
        "/api/vhost-limits/%2F",
        "/api/user-limits",
        "/api/user-limits/guest",
        "/api/parameters",
        "/api/feature-flags",
        "/api/deprecated-features",
        "/api/deprecated-features/used",
        "/api/connections/username/guest",
    ] {
        assert_eq!(call(&s, "GET", path, None).await, (StatusCode::OK, json!([])), "{path}");
    }
    let (status, _) = call(&s, "GET", "/api/health/checks/node-is-quorum-critical", None).await;
    assert_eq!(status, StatusCode::OK);
    let (status, _) = call(&s, "GET", "/api/health/checks/protocol-listener/amqp091", None).await;
    assert_eq!(status, StatusCode::OK);
    let (status, body) = call(&s, "GET", "/api/health/checks/protocol-listener/stomp", None).await;
    assert_eq!((status, &body["status"]), (StatusCode::SERVICE_UNAVAILABLE, &json!("failed")));
    call(&s, "PUT", "/api/queues/%2F/q1", Some(json!({"durable": true}))).await;
    call(&s, "POST", "/api/bindings/%2F/e/amq.direct/q/q1", Some(json!({"routing_key": "k"}))).await;
    let (status, vhost_defs) = call(&s, "GET", "/api/definitions/%2F", None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(vhost_defs["queues"][0]["name"], "q1");
    assert!(vhost_defs["queues"][0].get("vhost").is_none(), "{vhost_defs}");
    assert!(vhost_defs.get("users").is_none());
    call(&s, "PUT", "/api/vhosts/copy", None).await;
    let (status, body) = call(&s, "POST", "/api/definitions/copy", Some(vhost_defs)).await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
    let (_, q) = call(&s, "GET", "/api/queues/copy/q1", None).await;
    assert_eq!(q["durable"], true);
    let (_, bindings) = call(&s, "GET", "/api/bindings/copy", None).await;
    assert!(bindings
        .as_array()
        .unwrap()
        .iter()
        .any(|b| b["source"] == "amq.direct" && b["routing_key"] == "k"));
    assert_eq!(call(&s, "GET", "/api/definitions/nope", None).await.0, StatusCode::NOT_FOUND);
}

/// Operations through the API run with the HTTP user's own AMQP permissions in the vhost, as
/// RabbitMQ's management plugin does: a management user without access to the vhost, or without
/// configure on a queue, cannot declare it (401, as RabbitMQ); definitions import
/// (administrators) is not limited.
#[tokio::test]
async fn api_operations_use_the_users_permissions() {
    let s = state();
    let bob = "Basic Ym9iOmJvYnB3"; // bob:bobpw
    call(&s, "PUT", "/api/users/bob", Some(json!({"password": "bobpw", "tags": "management"}))).await;
    let (status, body) = call_as(&s, bob, "PUT", "/api/queues/%2F/q", Some(json!({}))).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
    assert_eq!(body["reason"], "User not authorised to access virtual host");
    let perm = json!({"configure": "^bob-", "write": ".*", "read": ".*"});
    call(&s, "PUT", "/api/permissions/%2F/bob", Some(perm)).await;
    assert_eq!(
        call_as(&s, bob, "PUT", "/api/queues/%2F/bob-q", Some(json!({}))).await.0,
        StatusCode::CREATED
    );
    let (status, body) = call_as(&s, bob, "PUT", "/api/queues/%2F/q", Some(json!({}))).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
    assert_eq!(body["reason"], "access to queue 'q' in vhost '/' refused for user 'bob'");
}

/// Health checks answer ok; a port nobody listens on is a 503.
#[tokio::test]
async fn health_checks() {
    let s = state();
    for path in [
        "/api/health/checks/alarms",
        "/api/health/checks/virtual-hosts",
        "/api/health/checks/ready-to-serve-clients",
        "/api/health/checks/port-listener/5672",
        "/api/aliveness-test/%2F",
    ] {
        let (status, body) = call(&s, "GET", path, None).await;
        assert_eq!((status, &body["status"]), (StatusCode::OK, &json!("ok")), "{path}");
    }
    let (status, body) = call(&s, "GET", "/api/health/checks/port-listener/1", None).await;
    assert_eq!((status, &body["status"]), (StatusCode::SERVICE_UNAVAILABLE, &json!("failed")));
}

/// Bad input is a 4xx, never a panic.
#[tokio::test]
async fn malformed_requests_are_rejected() {
    let s = state();
    let request = Request::builder()
        .method("PUT")
        .uri("/api/queues/%2F/q")
        .header("authorization", GUEST)
        .header("content-type", "application/json")
        .body(Body::from("{not json"))
        .unwrap();
    let response = hourglass_mgmt::api_router(s.clone()).oneshot(request).await.unwrap();
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    assert_eq!(
        call(&s, "PUT", "/api/queues/%2F/q", Some(json!({"arguments": [1]}))).await.0,
        StatusCode::BAD_REQUEST
    );
    assert_eq!(
        call(&s, "PUT", "/api/queues/%2F/q", Some(json!({"durable": "maybe"}))).await.0,
        StatusCode::BAD_REQUEST
    );
    call(&s, "PUT", "/api/queues/%2F/q", None).await;
    assert_eq!(
        call(&s, "POST", "/api/queues/%2F/q/get", Some(json!({"ackmode": "nope"}))).await.0,
        StatusCode::BAD_REQUEST
    );
    let long = "x".repeat(300);
    assert_eq!(call(&s, "PUT", &format!("/api/queues/%2F/{long}"), None).await.0, StatusCode::BAD_REQUEST);
}

/// The metrics router serves RabbitMQ's names, aggregated and per object.
#[tokio::test]
async fn prometheus_metrics() {
    let s = state();
    call(&s, "PUT", "/api/queues/%2F/m", None).await;
    call(
        &s,
        "POST",
        "/api/exchanges/%2F/amq.default/publish",
        Some(json!({"routing_key": "m", "payload": "abc"})),
    )
    .await;
    let text = |path: &'static str| {
        let s = s.clone();
        async move {
            let response = hourglass_mgmt::metrics_router(s)
                .oneshot(Request::get(path).body(Body::empty()).unwrap())
                .await
                .unwrap();
            String::from_utf8(axum::body::to_bytes(response.into_body(), 1 << 20).await.unwrap().to_vec())
                .unwrap()
        }
    };
    let aggregated = text("/metrics").await;
    assert!(aggregated.contains("\nrabbitmq_queue_messages_ready 1\n"), "{aggregated}");
    assert!(aggregated.contains("\nrabbitmq_queues 1\n"));
    assert!(aggregated.contains("\nrabbitmq_connections 0\n"));
    assert!(aggregated
        .contains("# TYPE hourglass_queue_messages_delayed gauge\nhourglass_queue_messages_delayed 0\n"));
    assert!(aggregated.contains("# TYPE rabbitmq_global_messages_dead_lettered_expired_total counter\n"));
    let per_object = text("/metrics/per-object").await;
    assert!(per_object.contains("rabbitmq_queue_messages{vhost=\"/\",queue=\"m\"} 1"), "{per_object}");
    assert!(per_object.contains("hourglass_queue_visibility_expired_total{vhost=\"/\",queue=\"m\"} 0"));
}

/// semantics §7: a queue's delayed messages are listed without being consumed, can be
/// rescheduled (delay 0: ready at once) and cancelled; the queue shows its delayed count.
#[tokio::test]
async fn delayed_messages_endpoints() {
    let s = state();
    let (status, _) =
        call(&s, "PUT", "/api/queues/%2F/later", Some(json!({"arguments": {"x-delivery-delay": 60000}})))
            .await;
    assert_eq!(status, StatusCode::CREATED);
    for payload in ["one", "two"] {
        let publish = json!({"routing_key": "later", "payload": payload, "payload_encoding": "string", "properties": {}});
        let (status, body) = call(&s, "POST", "/api/exchanges/%2F/amq.default/publish", Some(publish)).await;
        assert_eq!((status, body["routed"].clone()), (StatusCode::OK, json!(true)));
    }
    let (_, queue) = call(&s, "GET", "/api/queues/%2F/later", None).await;
    assert_eq!((queue["messages_ready"].clone(), queue["messages_delayed"].clone()), (json!(0), json!(2)));
    assert!(queue["next_due_ms"].as_u64().is_some());
    let (status, listed) = call(&s, "GET", "/api/queues/%2F/later/delayed", None).await;
    assert_eq!(status, StatusCode::OK);
    let listed = listed.as_array().unwrap().clone();
    assert_eq!(listed.len(), 2);
    assert_eq!(listed[0]["payload_bytes"], json!(3));
    assert!(listed[0]["due_in_ms"].as_u64().unwrap() <= 60000);
    let first = listed[0]["id"].as_u64().unwrap();
    let second = listed[1]["id"].as_u64().unwrap();
    let (status, _) =
        call(&s, "POST", &format!("/api/queues/%2F/later/delayed/{first}"), Some(json!({"delay_ms": 0})))
            .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, _) = call(&s, "DELETE", &format!("/api/queues/%2F/later/delayed/{second}"), None).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, _) = call(&s, "DELETE", &format!("/api/queues/%2F/later/delayed/{second}"), None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (_, queue) = call(&s, "GET", "/api/queues/%2F/later", None).await;
    assert_eq!((queue["messages_ready"].clone(), queue["messages_delayed"].clone()), (json!(1), json!(0)));
    let bad = json!({"delay_ms": 1, "due_ms": 2});
    let (status, _) = call(&s, "POST", &format!("/api/queues/%2F/later/delayed/{first}"), Some(bad)).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
}

/// semantics §4: the visibility endpoint answers 404 for an unknown queue or a stale/unknown
/// receipt handle, and 400 for a malformed body.
#[tokio::test]
async fn visibility_endpoint_status_codes() {
    let s = state();
    call(&s, "PUT", "/api/queues/%2F/tasks", Some(json!({"arguments": {"x-visibility-timeout": 5000}})))
        .await;
    let stale = json!({"receipt_handle": "1.2.3.4", "timeout_ms": 0});
    let (status, body) = call(&s, "POST", "/api/queues/%2F/tasks/visibility", Some(stale.clone())).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(body["reason"], "receipt handle is stale or unknown");
    let (status, _) = call(&s, "POST", "/api/queues/%2F/missing/visibility", Some(stale)).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _) = call(
        &s,
        "POST",
        "/api/queues/%2F/tasks/visibility",
        Some(json!({"receipt_handle": "x", "timeout_ms": -1})),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
}

/// semantics §6: /api/policies in RabbitMQ's shapes and status codes — 201 create, 204 replace,
/// 400 with RabbitMQ's reason for a bad definition or pattern, 404 for a missing vhost or policy.
#[tokio::test]
async fn policies_endpoints() {
    let s = state();
    let ttl =
        json!({"pattern": "^q", "definition": {"message-ttl": 1000}, "priority": 1, "apply-to": "queues"});
    assert_eq!(call(&s, "PUT", "/api/policies/%2F/ttl", Some(ttl.clone())).await.0, StatusCode::CREATED);
    assert_eq!(call(&s, "PUT", "/api/policies/%2F/ttl", Some(ttl)).await.0, StatusCode::NO_CONTENT);
    let expected = json!({"vhost": "/", "name": "ttl", "pattern": "^q", "apply-to": "queues",
        "definition": {"message-ttl": 1000}, "priority": 1});
    assert_eq!(call(&s, "GET", "/api/policies/%2F/ttl", None).await.1, expected);
    assert_eq!(call(&s, "GET", "/api/policies", None).await.1, json!([expected]));
    assert_eq!(call(&s, "GET", "/api/policies/%2F", None).await.1, json!([expected]));
    let defaults = json!({"pattern": ".*", "definition": {"max-length": 5}});
    assert_eq!(call(&s, "PUT", "/api/policies/%2F/len", Some(defaults)).await.0, StatusCode::CREATED);
    let (_, len) = call(&s, "GET", "/api/policies/%2F/len", None).await;
    assert_eq!((&len["apply-to"], &len["priority"]), (&json!("all"), &json!(0)));

    let (status, body) =
        call(&s, "PUT", "/api/policies/%2F/bad", Some(json!({"pattern": ".*", "definition": {"foo": 1}})))
            .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(body["reason"], "Validation failed\n\n[{<<\"foo\">>,1}] are not recognised policy settings\n");
    let bad_pattern = json!({"pattern": "(", "definition": {"expires": 10}});
    let (status, body) = call(&s, "PUT", "/api/policies/%2F/bad", Some(bad_pattern)).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(body["reason"].as_str().unwrap().contains("pattern should be regular expression"), "{body}");
    let negative = json!({"pattern": ".*", "definition": {"message-ttl": -1}});
    assert_eq!(call(&s, "PUT", "/api/policies/%2F/bad", Some(negative)).await.0, StatusCode::BAD_REQUEST);
    assert_eq!(
        call(&s, "PUT", "/api/policies/%2F/bad", Some(json!({"pattern": ".*"}))).await.0,
        StatusCode::BAD_REQUEST
    );
    let fine = json!({"pattern": ".*", "definition": {"expires": 10}});
    assert_eq!(call(&s, "PUT", "/api/policies/nope/p", Some(fine)).await.0, StatusCode::NOT_FOUND);
    assert_eq!(call(&s, "GET", "/api/policies/nope", None).await.0, StatusCode::NOT_FOUND);

    assert_eq!(call(&s, "DELETE", "/api/policies/%2F/ttl", None).await.0, StatusCode::NO_CONTENT);
    assert_eq!(call(&s, "DELETE", "/api/policies/%2F/ttl", None).await.0, StatusCode::NOT_FOUND);
    assert_eq!(call(&s, "GET", "/api/policies/%2F/ttl", None).await.0, StatusCode::NOT_FOUND);
}

/// semantics §6: operator policies take limits only; queue and exchange listings name the
/// policies that apply and show their merged definition (the lower max-length).
#[tokio::test]
async fn operator_policies_and_listings() {
    let s = state();
    let dlx = json!({"pattern": ".*", "definition": {"dead-letter-exchange": "dlx"}});
    let (status, body) = call(&s, "PUT", "/api/operator-policies/%2F/dl", Some(dlx)).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(body["reason"].as_str().unwrap().contains("are not recognised policy settings"), "{body}");
    let cap =
        json!({"pattern": "^jobs$", "definition": {"max-length": 5, "expires": 60000}, "apply-to": "queues"});
    assert_eq!(call(&s, "PUT", "/api/operator-policies/%2F/cap", Some(cap)).await.0, StatusCode::CREATED);
    let user = json!({"pattern": "^jobs$", "definition": {"max-length": 10, "dead-letter-exchange": "dlx"}});
    assert_eq!(call(&s, "PUT", "/api/policies/%2F/user", Some(user)).await.0, StatusCode::CREATED);
    assert_eq!(call(&s, "PUT", "/api/queues/%2F/jobs", None).await.0, StatusCode::CREATED);
    let (_, q) = call(&s, "GET", "/api/queues/%2F/jobs", None).await;
    assert_eq!((&q["policy"], &q["operator_policy"]), (&json!("user"), &json!("cap")));
    assert_eq!(
        q["effective_policy_definition"],
        json!({"dead-letter-exchange": "dlx", "expires": 60000, "max-length": 5})
    );
    call(&s, "PUT", "/api/exchanges/%2F/jobs", Some(json!({"type": "direct"}))).await;
    let (_, x) = call(&s, "GET", "/api/exchanges/%2F/jobs", None).await;
    assert_eq!(x["policy"], "user", "apply-to all reaches exchanges");
    assert_eq!(x["operator_policy"], Value::Null);
    let (_, list) = call(&s, "GET", "/api/operator-policies", None).await;
    assert_eq!(list[0]["name"], "cap");
    assert_eq!(call(&s, "DELETE", "/api/operator-policies/%2F/cap", None).await.0, StatusCode::NO_CONTENT);
    let (_, q) = call(&s, "GET", "/api/queues/%2F/jobs", None).await;
    assert_eq!(q["operator_policy"], Value::Null);
    assert_eq!(q["effective_policy_definition"], json!({"dead-letter-exchange": "dlx", "max-length": 10}));

    // Policymakers may set policies in vhosts where they have permissions, never operator
    // policies (RabbitMQ's rabbit_mgmt_util:is_authorized_policies: 401 otherwise).
    call(&s, "PUT", "/api/users/pm", Some(json!({"password": "pw", "tags": "policymaker"}))).await;
    let pm = "Basic cG06cHc="; // pm:pw
    let body = json!({"pattern": "x", "definition": {"expires": 5}});
    let (status, refused) = call_as(&s, pm, "PUT", "/api/policies/%2F/pm", Some(body.clone())).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "no permissions in / yet");
    assert_eq!(refused, json!({"error": "not_authorised", "reason": "User not authorised to access object"}));
    assert_eq!(call_as(&s, pm, "GET", "/api/policies/%2F", None).await.0, StatusCode::UNAUTHORIZED);
    let (status, all) = call_as(&s, pm, "GET", "/api/policies", None).await;
    assert_eq!((status, all), (StatusCode::OK, json!([])), "policies of vhosts it cannot see are hidden");
    let none = json!({"configure": "", "write": "", "read": ""});
    call(&s, "PUT", "/api/permissions/%2F/pm", Some(none)).await;
    assert_eq!(
        call_as(&s, pm, "PUT", "/api/policies/%2F/pm", Some(body.clone())).await.0,
        StatusCode::CREATED,
        "any permission entry in the vhost will do"
    );
    let (_, all) = call_as(&s, pm, "GET", "/api/policies", None).await;
    assert!(all.as_array().is_some_and(|a| a.iter().any(|p| p["name"] == "pm")));
    assert_eq!(call_as(&s, pm, "GET", "/api/policies/nope", None).await.0, StatusCode::NOT_FOUND);
    let status = call_as(&s, pm, "PUT", "/api/operator-policies/%2F/pm", Some(body)).await.0;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
}

/// A RabbitMQ export with policies imports (keys without effect here, such as ha-mode, included)
/// and exports them again in the same shape.
#[tokio::test]
async fn definitions_carry_policies() {
    let s = state();
    let policies = json!([
        {"vhost": "/", "name": "ha", "pattern": "^(?!amq\\.).*", "apply-to": "queues",
         "definition": {"ha-mode": "all", "message-ttl": 60000}, "priority": 0},
        {"vhost": "/", "name": "ae", "pattern": "^orders$", "apply-to": "exchanges",
         "definition": {"alternate-exchange": "lost"}, "priority": 2},
    ]);
    let defs = json!({"policies": policies, "queues": [{"name": "work", "vhost": "/", "durable": true,
        "auto_delete": false, "arguments": {}}]});
    let (status, body) = call(&s, "POST", "/api/definitions", Some(defs)).await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
    let (_, q) = call(&s, "GET", "/api/queues/%2F/work", None).await;
    assert_eq!(q["policy"], "ha");
    let (_, exported) = call(&s, "GET", "/api/definitions", None).await;
    let mut names: Vec<&str> =
        exported["policies"].as_array().unwrap().iter().map(|p| p["name"].as_str().unwrap()).collect();
    names.sort();
    assert_eq!(names, ["ae", "ha"]);
    assert_eq!(
        exported["policies"].as_array().unwrap().iter().find(|p| p["name"] == "ha").unwrap(),
        &policies[0]
    );
    let bad = json!({"policies": [{"vhost": "/", "name": "x", "pattern": ".*", "definition": {"nope": 1}}]});
    assert_eq!(call(&s, "POST", "/api/definitions", Some(bad)).await.0, StatusCode::BAD_REQUEST);
}

/// issue #7: known traffic shows as RabbitMQ's `message_stats` counts (with `*_details` rates)
/// on the overview, the queue and the exchanges, and as the global Prometheus counters.
#[tokio::test]
async fn message_stats_count_known_traffic() {
    let s = state();
    call(&s, "PUT", "/api/queues/%2F/counted", None).await;
    for _ in 0..3 {
        let publish = json!({"routing_key": "counted", "payload": "m"});
        call(&s, "POST", "/api/exchanges/%2F/amq.default/publish", Some(publish)).await;
    }
    // The API publishes with mandatory set (as RabbitMQ's), so this one is returned.
    let unroutable = json!({"routing_key": "nowhere", "payload": "m"});
    call(&s, "POST", "/api/exchanges/%2F/amq.direct/publish", Some(unroutable)).await;
    let get = json!({"count": 2, "ackmode": "ack_requeue_false", "encoding": "auto"});
    call(&s, "POST", "/api/queues/%2F/counted/get", Some(get)).await;

    let (_, overview) = call(&s, "GET", "/api/overview", None).await;
    let stats = &overview["message_stats"];
    for (key, count) in [("publish", 4), ("return_unroutable", 1), ("get", 2), ("ack", 2), ("deliver_get", 2)]
    {
        assert_eq!(stats[key], count, "overview {key}: {stats}");
    }
    assert_eq!(stats["deliver_no_ack"], 0);
    assert_eq!(stats["publish_details"], json!({"rate": 0.0}), "one sample so far");
    assert_eq!(overview["queue_totals"]["messages_ready"], 1);
    assert!(overview["queue_totals"]["messages_ready_details"]["rate"].is_f64());

    let (_, queue) = call(&s, "GET", "/api/queues/%2F/counted", None).await;
    let stats = &queue["message_stats"];
    for (key, count) in [("publish", 3), ("get", 2), ("ack", 2), ("deliver_get", 2), ("redeliver", 0)] {
        assert_eq!(stats[key], count, "queue {key}: {stats}");
        assert!(stats[format!("{key}_details")]["rate"].is_f64());
    }
    let (_, vhost) = call(&s, "GET", "/api/vhosts/%2F", None).await;
    for key in ["messages_details", "messages_ready_details", "messages_unacknowledged_details"] {
        assert!(queue[key]["rate"].is_f64(), "queue lacks {key}");
        assert!(vhost[key]["rate"].is_f64(), "vhost lacks {key}");
    }
    assert_eq!(vhost["messages_ready"], 1);

    let (_, default) = call(&s, "GET", "/api/exchanges/%2F/amq.default", None).await;
    assert_eq!(
        (&default["message_stats"]["publish_in"], &default["message_stats"]["publish_out"]),
        (&json!(3), &json!(3))
    );
    let (_, direct) = call(&s, "GET", "/api/exchanges/%2F/amq.direct", None).await;
    assert_eq!(
        (&direct["message_stats"]["publish_in"], &direct["message_stats"]["publish_out"]),
        (&json!(1), &json!(0))
    );

    let response = hourglass_mgmt::metrics_router(s.clone())
        .oneshot(Request::get("/metrics").body(Body::empty()).unwrap())
        .await
        .unwrap();
    let text = String::from_utf8(axum::body::to_bytes(response.into_body(), 1 << 20).await.unwrap().to_vec())
        .unwrap();
    for line in [
        "rabbitmq_global_messages_received_total 4",
        "rabbitmq_global_messages_routed_total 3",
        "rabbitmq_global_messages_unroutable_dropped_total 0",
        "rabbitmq_global_messages_unroutable_returned_total 1",
        "rabbitmq_global_messages_delivered_total 2",
        "rabbitmq_global_messages_delivered_get_manual_ack_total 2",
        "rabbitmq_global_messages_acknowledged_total 2",
        "rabbitmq_global_messages_confirmed_total 0",
        "rabbitmq_global_messages_redelivered_total 0",
    ] {
        assert!(text.contains(&format!("\n{line}\n")), "metrics lack {line}");
    }
}
