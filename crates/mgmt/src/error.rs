//! API errors in RabbitMQ's shape: a status and `{"error": ..., "reason": ...}`.

use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use hourglass_broker::{AmqpError, DefinitionNotStored};
use hourglass_wire::reply_code::{ACCESS_REFUSED, NOT_FOUND};

use crate::users::StoreError;

/// The error of a failed login; only it carries a `WWW-Authenticate` challenge.
const NOT_AUTHENTICATED: &str = "not_authorized";

#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub error: &'static str,
    pub reason: String,
}

impl ApiError {
    pub fn not_found() -> Self {
        ApiError { status: StatusCode::NOT_FOUND, error: "Object Not Found", reason: "Not Found".into() }
    }

    pub fn bad_request(reason: impl Into<String>) -> Self {
        ApiError { status: StatusCode::BAD_REQUEST, error: "bad_request", reason: reason.into() }
    }

    /// 401 for a failed login (RabbitMQ's `not_authenticated`): asks for credentials again.
    pub fn unauthorized(reason: impl Into<String>) -> Self {
        ApiError { status: StatusCode::UNAUTHORIZED, error: NOT_AUTHENTICATED, reason: reason.into() }
    }

    /// 401 for a logged-in user who may not do this (RabbitMQ's `not_authorised`: its API answers
    /// 401, not 403, and without a new login challenge).
    pub fn not_authorised(reason: impl Into<String>) -> Self {
        ApiError { status: StatusCode::UNAUTHORIZED, error: "not_authorised", reason: reason.into() }
    }

    pub fn forbidden(reason: impl Into<String>) -> Self {
        ApiError { status: StatusCode::FORBIDDEN, error: "not_authorised", reason: reason.into() }
    }

    pub fn internal(reason: impl Into<String>) -> Self {
        ApiError { status: StatusCode::INTERNAL_SERVER_ERROR, error: "internal_error", reason: reason.into() }
    }

    pub fn unavailable() -> Self {
        ApiError {
            status: StatusCode::SERVICE_UNAVAILABLE,
            error: "unavailable",
            reason: "the broker is shutting down".into(),
        }
    }

    /// A broker error: 404 for NOT_FOUND, 401 `not_authorised` for ACCESS_REFUSED (RabbitMQ's
    /// `rabbit_mgmt_util` turns an access refusal into not_authorised), 400 otherwise; the reason
    /// is the reply text without its `NAME - ` prefix, as RabbitMQ's API shows it.
    pub fn from_amqp(error: AmqpError) -> Self {
        let reason = match error.reply_text.split_once(" - ") {
            Some((_, detail)) => detail.to_owned(),
            None => error.reply_text.clone(),
        };
        match error.reply_code {
            NOT_FOUND => ApiError { status: StatusCode::NOT_FOUND, error: "not_found", reason },
            ACCESS_REFUSED => ApiError::not_authorised(reason),
            _ => ApiError::bad_request(reason),
        }
    }
}

/// A pattern that does not compile is the client's mistake (400); a failed save is ours (500).
impl From<StoreError> for ApiError {
    fn from(error: StoreError) -> Self {
        match error {
            e @ (StoreError::InvalidPattern(_) | StoreError::Unknown(_)) => {
                ApiError::bad_request(e.to_string())
            }
            e @ StoreError::NotSaved(_) => ApiError::internal(e.to_string()),
        }
    }
}

/// The catalog refused a change the request made: it is in memory only and would not survive a
/// restart, so the request failed (500, as RabbitMQ answers a failed metadata-store commit).
impl From<DefinitionNotStored> for ApiError {
    fn from(error: DefinitionNotStored) -> Self {
        ApiError::internal(error.to_string())
    }
}

impl From<AmqpError> for ApiError {
    fn from(error: AmqpError) -> Self {
        ApiError::from_amqp(error)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = serde_json::json!({"error": self.error, "reason": self.reason});
        let mut response = (self.status, axum::Json(body)).into_response();
        if self.error == NOT_AUTHENTICATED {
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                header::HeaderValue::from_static("Basic realm=\"RabbitMQ Management\""),
            );
        }
        response
    }
}
