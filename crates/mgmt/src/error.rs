//! API errors in RabbitMQ's shape: a status and `{"error": ..., "reason": ...}`. Each variant
//! says what went wrong; [`ApiError::status`] and [`ApiError::error`] give its answer, and its
//! `Display` the reason.

use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use hourglass_broker::requests::AdminError;
use hourglass_broker::{AmqpError, DefinitionNotStored};
use hourglass_wire::reply_code::{ACCESS_REFUSED, NOT_FOUND};

use crate::cross_site::CrossSiteRefusal;
use crate::streamed::LISTINGS_PER_USER_MAX;
use crate::users::StoreError;

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// 404: the object the path names does not exist.
    #[error("Not Found")]
    NotFound,
    /// 404: the path's object exists, but not the item the request names in it (a receipt
    /// handle, a delayed message).
    #[error("{0}")]
    NoSuchItem(&'static str),
    /// 404: the broker answered NOT_FOUND (a declare's or bind's missing queue or exchange).
    #[error("{0}")]
    BrokerNotFound(String),
    /// 400: the request is malformed or breaks a rule; the reason names it.
    #[error("{0}")]
    BadRequest(String),
    /// 401 for a failed login (RabbitMQ's `not_authenticated`): asks for credentials again.
    #[error("{0}")]
    Unauthenticated(String),
    /// 401 for a logged-in user who may not do this (RabbitMQ's `not_authorised`: its API answers
    /// 401, not 403, and without a new login challenge).
    #[error("{0}")]
    NotAuthorised(String),
    /// 403: a logged-in user who may never do this.
    #[error("{0}")]
    Forbidden(String),
    /// 415 for a body that is not JSON, 403 for another origin (`cross_site.rs`).
    #[error("{0}")]
    CrossSite(CrossSiteRefusal),
    /// 429: the user has [`LISTINGS_PER_USER_MAX`] full listings in flight already (`streamed.rs`).
    #[error("{LISTINGS_PER_USER_MAX} full listings in flight for this user already")]
    TooManyListings,
    /// 500: the catalog refused a change the request made: it is in memory only and would not
    /// survive a restart, so the request failed (as RabbitMQ answers a failed metadata-store
    /// commit).
    #[error("{0}")]
    CatalogRefused(DefinitionNotStored),
    /// 500: the user store could not save a change.
    #[error("{0}")]
    IdentityNotSaved(StoreError),
    /// 500: something of ours failed (a task that died).
    #[error("{0}")]
    Internal(String),
    /// 503: the broker task is gone (shutdown).
    #[error("the broker is shutting down")]
    Unavailable,
}

/// The error of a failed login; only it carries a `WWW-Authenticate` challenge.
const NOT_AUTHENTICATED: &str = "not_authorized";

impl ApiError {
    pub fn bad_request(reason: impl Into<String>) -> Self {
        ApiError::BadRequest(reason.into())
    }

    pub fn unauthorized(reason: impl Into<String>) -> Self {
        ApiError::Unauthenticated(reason.into())
    }

    pub fn not_authorised(reason: impl Into<String>) -> Self {
        ApiError::NotAuthorised(reason.into())
    }

    pub fn forbidden(reason: impl Into<String>) -> Self {
        ApiError::Forbidden(reason.into())
    }

    pub fn internal(reason: impl Into<String>) -> Self {
        ApiError::Internal(reason.into())
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
            NOT_FOUND => ApiError::BrokerNotFound(reason),
            ACCESS_REFUSED => ApiError::NotAuthorised(reason),
            _ => ApiError::BadRequest(reason),
        }
    }

    pub fn status(&self) -> StatusCode {
        match self {
            ApiError::NotFound | ApiError::NoSuchItem(_) | ApiError::BrokerNotFound(_) => {
                StatusCode::NOT_FOUND
            }
            ApiError::BadRequest(_) => StatusCode::BAD_REQUEST,
            ApiError::Unauthenticated(_) | ApiError::NotAuthorised(_) => StatusCode::UNAUTHORIZED,
            ApiError::Forbidden(_) => StatusCode::FORBIDDEN,
            ApiError::CrossSite(refusal) => refusal.status(),
            ApiError::TooManyListings => StatusCode::TOO_MANY_REQUESTS,
            ApiError::CatalogRefused(_) | ApiError::IdentityNotSaved(_) | ApiError::Internal(_) => {
                StatusCode::INTERNAL_SERVER_ERROR
            }
            ApiError::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        }
    }

    /// The `error` field of the answer, as RabbitMQ names it.
    pub fn error(&self) -> &'static str {
        match self {
            ApiError::NotFound | ApiError::NoSuchItem(_) => "Object Not Found",
            ApiError::BrokerNotFound(_) => "not_found",
            ApiError::BadRequest(_) => "bad_request",
            ApiError::Unauthenticated(_) => NOT_AUTHENTICATED,
            ApiError::NotAuthorised(_) | ApiError::Forbidden(_) => "not_authorised",
            ApiError::CrossSite(refusal) => refusal.error(),
            ApiError::TooManyListings => "too_many_requests",
            ApiError::CatalogRefused(_) | ApiError::IdentityNotSaved(_) | ApiError::Internal(_) => {
                "internal_error"
            }
            ApiError::Unavailable => "unavailable",
        }
    }

    /// The `reason` field of the answer.
    pub fn reason(&self) -> String {
        self.to_string()
    }
}

/// A pattern that does not compile is the client's mistake (400); a failed save is ours (500).
impl From<StoreError> for ApiError {
    fn from(error: StoreError) -> Self {
        match error {
            e @ (StoreError::InvalidPattern(_)
            | StoreError::Unknown(_)
            | StoreError::TooManyAccessKeys { .. }) => ApiError::BadRequest(e.to_string()),
            e @ StoreError::NotSaved(_) => ApiError::IdentityNotSaved(e),
        }
    }
}

impl From<DefinitionNotStored> for ApiError {
    fn from(error: DefinitionNotStored) -> Self {
        ApiError::CatalogRefused(error)
    }
}

impl From<AmqpError> for ApiError {
    fn from(error: AmqpError) -> Self {
        ApiError::from_amqp(error)
    }
}

impl From<AdminError> for ApiError {
    fn from(error: AdminError) -> Self {
        match error {
            AdminError::NotFound => ApiError::NotFound,
            AdminError::Refused(error) => error.into(),
        }
    }
}

impl From<CrossSiteRefusal> for ApiError {
    fn from(refusal: CrossSiteRefusal) -> Self {
        ApiError::CrossSite(refusal)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = serde_json::json!({"error": self.error(), "reason": self.reason()});
        let mut response = (self.status(), axum::Json(body)).into_response();
        if matches!(self, ApiError::Unauthenticated(_)) {
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                header::HeaderValue::from_static("Basic realm=\"RabbitMQ Management\""),
            );
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each kind of failure answers with RabbitMQ's status, `error` and `reason` (the bodies the
    /// API's tests and clients rely on).
    #[tokio::test]
    async fn each_error_answers_with_its_status_and_body() {
        let cases = [
            (ApiError::NotFound, 404, "Object Not Found", "Not Found"),
            (
                ApiError::NoSuchItem("no such delayed message"),
                404,
                "Object Not Found",
                "no such delayed message",
            ),
            (
                ApiError::bad_request("page must be a positive integer"),
                400,
                "bad_request",
                "page must be a positive integer",
            ),
            (ApiError::unauthorized("Login failed"), 401, "not_authorized", "Login failed"),
            (
                ApiError::not_authorised("Not administrator user"),
                401,
                "not_authorised",
                "Not administrator user",
            ),
            (ApiError::forbidden("no"), 403, "not_authorised", "no"),
            (
                ApiError::TooManyListings,
                429,
                "too_many_requests",
                "2 full listings in flight for this user already",
            ),
            (ApiError::internal("task failed"), 500, "internal_error", "task failed"),
            (ApiError::Unavailable, 503, "unavailable", "the broker is shutting down"),
        ];
        for (error, status, kind, reason) in cases {
            let challenges = matches!(error, ApiError::Unauthenticated(_));
            let response = error.into_response();
            assert_eq!(response.status().as_u16(), status, "{kind}");
            assert_eq!(response.headers().contains_key(header::WWW_AUTHENTICATE), challenges, "{kind}");
            let bytes = axum::body::to_bytes(response.into_body(), 1 << 16).await.unwrap();
            let body: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
            assert_eq!(body, serde_json::json!({"error": kind, "reason": reason}));
        }
    }

    /// A broker refusal keeps its meaning: NOT_FOUND is 404 `not_found`, ACCESS_REFUSED 401,
    /// others 400; the reason drops the reply text's `NAME - ` prefix.
    #[test]
    fn broker_refusals_map_by_reply_code() {
        let refusal = |code, text: &str| AmqpError {
            reply_code: code,
            reply_text: text.into(),
            class_id: 0,
            method_id: 0,
        };
        let not_found = ApiError::from(refusal(NOT_FOUND, "NOT_FOUND - no queue 'q' in vhost '/'"));
        assert_eq!((not_found.status(), not_found.error()), (StatusCode::NOT_FOUND, "not_found"));
        assert_eq!(not_found.reason(), "no queue 'q' in vhost '/'");
        let refused = ApiError::from(refusal(ACCESS_REFUSED, "ACCESS_REFUSED - access to queue 'q' refused"));
        assert_eq!((refused.status(), refused.error()), (StatusCode::UNAUTHORIZED, "not_authorised"));
        let other = ApiError::from(refusal(406, "PRECONDITION_FAILED - inequivalent arg 'durable'"));
        assert_eq!(
            (other.status(), other.reason()),
            (StatusCode::BAD_REQUEST, "inequivalent arg 'durable'".into())
        );
    }
}
