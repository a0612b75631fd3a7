//! Listings of things Hourglass does not have, answered as RabbitMQ answers when none exist, so
//! that tools listing them (rabbitmqadmin v2 `list vhost_limits`, `list feature_flags`, ...) work:
//! resource limits (none are enforced, so none are set), runtime parameters (no federation or
//! shovel), feature flags and deprecated features (there are none). Setting any of these stays
//! unsupported (404 / 405).

use axum::extract::Query;
use axum::response::Response;
use axum::routing::get;
use axum::Router;

use crate::error::ApiError;
use crate::listing::{self, Params};
use crate::AppState;

pub fn routes() -> Router<AppState> {
    let paths = [
        "/api/vhost-limits",
        "/api/vhost-limits/{vhost}",
        "/api/user-limits",
        "/api/user-limits/{user}",
        "/api/parameters",
        "/api/feature-flags",
        "/api/deprecated-features",
        "/api/deprecated-features/used",
    ];
    paths.into_iter().fold(Router::new(), |router, path| router.route(path, get(empty)))
}

async fn empty(Query(params): Query<Params>) -> Result<Response, ApiError> {
    listing::respond(Vec::new(), &params)
}
