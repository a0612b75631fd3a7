//! `GET /api/cluster`: the cluster's leader, term and nodes (docs/clustering.md). A single node
//! answers as a cluster of one, so scripts need no special case.

use axum::extract::State;
use axum::routing::get;
use axum::{Json, Router};
use serde_json::{json, Value};

use crate::error::ApiError;
use crate::AppState;

pub fn routes() -> Router<AppState> {
    Router::new().route("/api/cluster", get(cluster))
}

async fn cluster(State(state): State<AppState>) -> Result<Json<Value>, ApiError> {
    let node = state.node.clone();
    let Some(cluster) = node.cluster.clone() else {
        return Ok(Json(json!({
            "cluster_name": null,
            "leader": node.name,
            "term": 0,
            "nodes": [{
                "name": node.name, "role": "leader", "in_sync": true, "caught_up": true, "lag_records": 0,
                "amqp": format!("{}:{}", node.bind, node.amqp_port), "last_seen_ms": 0,
            }],
        })));
    };
    let status = tokio::task::spawn_blocking(move || cluster.status())
        .await
        .map_err(|_| ApiError::internal("cluster status task failed"))?;
    Ok(Json(status))
}
