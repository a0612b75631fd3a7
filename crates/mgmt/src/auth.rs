//! HTTP basic auth against the user store. A user needs one of RabbitMQ's management tags to use
//! the API at all, and `administrator` to change users, vhosts, permissions or definitions.

use std::net::SocketAddr;

use axum::extract::{ConnectInfo, Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use base64::Engine;

use crate::error::ApiError;
use crate::AppState;

/// Tags that open the management API (RabbitMQ's management user tags).
const MANAGEMENT_TAGS: &[&str] = &["administrator", "monitoring", "policymaker", "management"];

/// The authenticated user of a request.
#[derive(Clone, Debug)]
pub struct AuthUser {
    pub name: String,
    pub tags: Vec<String>,
}

impl AuthUser {
    pub fn has_tag(&self, tag: &str) -> bool {
        self.tags.iter().any(|t| t == tag)
    }

    /// RabbitMQ's `is_admin`: the `administrator` tag.
    pub fn is_admin(&self) -> bool {
        self.has_tag("administrator")
    }

    /// RabbitMQ's `is_monitor`: `administrator` or `monitoring` (sees every user's connections).
    pub fn is_monitor(&self) -> bool {
        self.is_admin() || self.has_tag("monitoring")
    }

    pub fn require_admin(&self) -> Result<(), ApiError> {
        if self.is_admin() {
            Ok(())
        } else {
            Err(ApiError::not_authorised("Not administrator user"))
        }
    }
}

pub async fn require_login(State(state): State<AppState>, mut request: Request, next: Next) -> Response {
    // Requests without a socket (in-process tests) count as local.
    let loopback = request
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .is_none_or(|ConnectInfo(addr)| addr.ip().to_canonical().is_loopback());
    let Some((name, password)) = basic_credentials(&request) else {
        return ApiError::unauthorized("Login failed").into_response();
    };
    let Some(user) = state.users.check_login(&name, &password, loopback) else {
        return ApiError::unauthorized("Login failed").into_response();
    };
    if !user.tags.iter().any(|t| MANAGEMENT_TAGS.contains(&t.as_str())) {
        return ApiError::not_authorised("Not management user").into_response();
    }
    request.extensions_mut().insert(AuthUser { name: user.name, tags: user.tags });
    next.run(request).await
}

fn basic_credentials(request: &Request) -> Option<(String, String)> {
    let value = request.headers().get(header::AUTHORIZATION)?.to_str().ok()?;
    let encoded = value.strip_prefix("Basic ").or_else(|| value.strip_prefix("basic "))?;
    let decoded = base64::engine::general_purpose::STANDARD.decode(encoded.trim()).ok()?;
    let text = String::from_utf8(decoded).ok()?;
    let (name, password) = text.split_once(':')?;
    Some((name.to_owned(), password.to_owned()))
}
