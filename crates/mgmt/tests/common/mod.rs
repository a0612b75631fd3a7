//! The management API in process for tests: a standalone broker task, requests through the
//! router, answers parsed as JSON.
#![allow(dead_code)]

use std::net::IpAddr;
use std::sync::Arc;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use hourglass_mgmt::{AppState, BrokerHandle, NodeInfo, UserStore};
use serde_json::Value;
use tower::ServiceExt;

/// `Authorization` for guest:guest.
pub const GUEST: &str = "Basic Z3Vlc3Q6Z3Vlc3Q=";

/// Largest response body a test reads.
const RESPONSE_BYTES_MAX: usize = 64 << 20;

/// A fresh API state: a standalone broker, RabbitMQ's default users, node on the default ports.
pub fn state() -> AppState {
    AppState {
        broker: BrokerHandle::standalone(),
        users: Arc::new(UserStore::with_defaults(vec!["guest".into()])),
        node: Arc::new(NodeInfo::new(IpAddr::from([127, 0, 0, 1]), 5672, 15672, 15692)),
        rates: Default::default(),
        logins: Default::default(),
        listings: Default::default(),
        secrets: None,
    }
}

/// One request with `authorization` and an optional JSON body; the status and the JSON answer
/// (`Null` when the answer is not JSON).
pub async fn request(
    state: &AppState,
    authorization: &str,
    method: &str,
    uri: &str,
    body: Option<Value>,
) -> (StatusCode, Value) {
    let request = Request::builder()
        .method(method)
        .uri(uri)
        .header("authorization", authorization)
        .header("content-type", "application/json")
        .body(body.map_or_else(Body::empty, |b| Body::from(b.to_string())))
        .unwrap();
    let response = hourglass_mgmt::api_router(state.clone()).oneshot(request).await.unwrap();
    let status = response.status();
    let bytes = axum::body::to_bytes(response.into_body(), RESPONSE_BYTES_MAX).await.unwrap();
    (status, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
}
