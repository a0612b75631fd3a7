//! Issue 12: what the management API accepts must be restorable. Tables nested past the AMQP
//! limit are refused (400 naming it) wherever JSON becomes a field table — queue, exchange and
//! binding arguments, policy definitions, definitions import, published headers — and a
//! definitions import naming a user "" is refused. In process: a standalone broker task, requests
//! through the router.

mod common;

use axum::http::StatusCode;
use common::{state, GUEST};
use hourglass_mgmt::AppState;
use serde_json::{json, Value};

/// The AMQP decoder's nesting limit (`hourglass_wire::MAX_NESTING_DEPTH`).
const DEEPEST: usize = 32;

async fn call(state: &AppState, method: &str, uri: &str, body: Value) -> (StatusCode, Value) {
    common::request(state, GUEST, method, uri, Some(body)).await
}

/// An object nested `depth` levels (the outermost is level 1).
fn nested(depth: usize) -> Value {
    let mut value = json!({"leaf": 1});
    for _ in 1..depth {
        value = json!({ "x-deep": value });
    }
    value
}

fn refused_for_depth(status: StatusCode, body: &Value) {
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    let reason = body["reason"].as_str().unwrap_or_default();
    assert!(reason.contains("nested deeper than 32 levels"), "{reason}");
}

/// Arguments as deep as AMQP accepts are accepted on a queue, an exchange and a binding; one
/// level more is 400 naming the limit, and nothing is declared.
#[tokio::test]
async fn arguments_past_the_amqp_depth_are_refused() {
    let s = state();
    for depth in [DEEPEST, DEEPEST + 1] {
        let arguments = json!({ "arguments": nested(depth) });
        let mut x = arguments.clone();
        x["type"] = json!("headers");
        let (qs, qb) = call(&s, "PUT", &format!("/api/queues/%2F/q{depth}"), arguments.clone()).await;
        let (xs, xb) = call(&s, "PUT", &format!("/api/exchanges/%2F/x{depth}"), x).await;
        if depth == DEEPEST {
            assert_eq!((qs, xs), (StatusCode::CREATED, StatusCode::CREATED), "{qb} {xb}");
            let uri = format!("/api/bindings/%2F/e/x{depth}/q/q{depth}");
            let (bs, bb) = call(&s, "POST", &uri, arguments).await;
            assert_eq!(bs, StatusCode::CREATED, "{bb}");
        } else {
            refused_for_depth(qs, &qb);
            refused_for_depth(xs, &xb);
            let uri = format!("/api/bindings/%2F/e/x{DEEPEST}/q/q{DEEPEST}");
            let (bs, bb) = call(&s, "POST", &uri, arguments).await;
            refused_for_depth(bs, &bb);
            let (status, _) = call(&s, "GET", &format!("/api/queues/%2F/q{depth}"), Value::Null).await;
            assert_eq!(status, StatusCode::NOT_FOUND);
        }
    }
}

/// The same limit holds for a policy definition and for every table of a definitions import.
#[tokio::test]
async fn policies_and_imports_past_the_amqp_depth_are_refused() {
    let s = state();
    let mut definition = nested(DEEPEST + 1);
    definition["max-length"] = json!(10);
    let policy = json!({"pattern": ".*", "definition": definition});
    let (status, body) = call(&s, "PUT", "/api/policies/%2F/deep", policy).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    let import = json!({"queues": [{"name": "deep", "vhost": "/", "arguments": nested(DEEPEST + 1)}]});
    let (status, body) = call(&s, "POST", "/api/definitions", import).await;
    refused_for_depth(status, &body);
}

/// A publish whose headers nest past the limit is refused (400) instead of being routed with
/// properties that would not decode again (finding 9: its dead-lettered copy lost delivery_mode
/// and vanished at restart); at the limit it is routed.
#[tokio::test]
async fn publish_with_headers_past_the_amqp_depth_is_refused() {
    let s = state();
    call(&s, "PUT", "/api/queues/%2F/hq", json!({})).await;
    for depth in [DEEPEST, DEEPEST + 1] {
        let publish = json!({"routing_key": "hq", "payload": "m", "payload_encoding": "string",
            "properties": {"delivery_mode": 2, "headers": nested(depth)}});
        let (status, body) = call(&s, "POST", "/api/exchanges/%2F/amq.default/publish", publish).await;
        if depth == DEEPEST {
            assert_eq!((status, &body), (StatusCode::OK, &json!({"routed": true})));
        } else {
            refused_for_depth(status, &body);
        }
    }
    let (_, queue) = call(&s, "GET", "/api/queues/%2F/hq", Value::Null).await;
    assert_eq!(queue["messages"], 1);
}

/// A definitions import naming a user "" is refused, as RabbitMQ refuses it, and adds no user.
#[tokio::test]
async fn import_of_an_empty_user_name_is_refused() {
    let s = state();
    let import = json!({"users": [{"name": "", "password": "x", "tags": ""}]});
    let (status, body) = call(&s, "POST", "/api/definitions", import).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(body["reason"].as_str().unwrap_or_default().contains("user name"), "{body}");
    let (_, users) = call(&s, "GET", "/api/users", Value::Null).await;
    assert!(users.as_array().unwrap().iter().all(|u| u["name"] != ""), "{users}");
}
