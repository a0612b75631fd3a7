//! Listings of things Hourglass does not have, answered as RabbitMQ answers when none exist, so
//! that tools listing them (rabbitmqadmin v2 `list parameters`, `list feature_flags`, ...) work:
//! runtime parameters (no federation or shovel), feature flags and deprecated features (there
//! are none). Limits have their own routes (`limits.rs`). Setting any of these stays
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
