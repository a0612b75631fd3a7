//! API errors in RabbitMQ's shape: a status and `{"error": ..., "reason": ...}`.

use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use hourglass_broker::AmqpError;
use hourglass_wire::reply_code::{ACCESS_REFUSED, NOT_FOUND};

use crate::users::StoreError;

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

    pub fn unauthorized(reason: impl Into<String>) -> Self {
        ApiError { status: StatusCode::UNAUTHORIZED, error: "not_authorized", reason: reason.into() }
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

    /// A broker error: 404 for NOT_FOUND, 403 for ACCESS_REFUSED, 400 otherwise; the reason is
    /// the reply text without its `NAME - ` prefix, as RabbitMQ's API shows it.
    pub fn from_amqp(error: AmqpError) -> Self {
        let reason = match error.reply_text.split_once(" - ") {
            Some((_, detail)) => detail.to_owned(),
            None => error.reply_text.clone(),
        };
        match error.reply_code {
            NOT_FOUND => ApiError { status: StatusCode::NOT_FOUND, error: "not_found", reason },
            ACCESS_REFUSED => ApiError { status: StatusCode::FORBIDDEN, error: "access_refused", reason },
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

impl From<AmqpError> for ApiError {
    fn from(error: AmqpError) -> Self {
        ApiError::from_amqp(error)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = serde_json::json!({"error": self.error, "reason": self.reason});
        let mut response = (self.status, axum::Json(body)).into_response();
        if self.status == StatusCode::UNAUTHORIZED {
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                header::HeaderValue::from_static("Basic realm=\"RabbitMQ Management\""),
            );
        }
        response
    }
}
