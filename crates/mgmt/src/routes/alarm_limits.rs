//! Changing the resource alarms' limits at run time, as rabbitmqctl's
//! `set_vm_memory_high_watermark` and `set_disk_free_limit` do (RabbitMQ has no HTTP endpoint for
//! them; `hourglass-ctl` calls these). Administrators only; not saved (a restart goes back to the
//! configuration, as on RabbitMQ). The monitor samples again at once, so an alarm is raised or
//! cleared within moments.
//!
//! - `PUT /api/node/memory-high-watermark` `{"fraction": 0.4}` or `{"absolute": "1GB" | bytes}`
//! - `PUT /api/node/disk-free-limit` `{"absolute": "50MB" | bytes}` or `{"mem_relative": 1.5}`
//!
//! Both answer 204, or 400 with the reason.

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::put;
use axum::{Extension, Json, Router};
use serde_json::Value;

use crate::auth::AuthUser;
use crate::error::ApiError;
use crate::resources::{mem_relative_bytes, parse_size, total_memory_bytes, watermark_bytes, AlarmLimits};
use crate::AppState;

pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/api/node/memory-high-watermark", put(set_memory_high_watermark))
        .route("/api/node/disk-free-limit", put(set_disk_free_limit))
}

async fn set_memory_high_watermark(
    State(state): State<AppState>,
    Extension(auth): Extension<AuthUser>,
    Json(body): Json<Value>,
) -> Result<StatusCode, ApiError> {
    auth.require_admin()?;
    let bytes = match (body.get("fraction"), body.get("absolute")) {
        (Some(fraction), None) => watermark_bytes(fraction_of(fraction)?, total_memory()?),
        (None, Some(absolute)) => size_of(absolute)?,
        _ => return Err(ApiError::bad_request("give either \"fraction\" or \"absolute\"")),
    };
    change(&state, |limits| limits.mem_limit = bytes)
}

async fn set_disk_free_limit(
    State(state): State<AppState>,
    Extension(auth): Extension<AuthUser>,
    Json(body): Json<Value>,
) -> Result<StatusCode, ApiError> {
    auth.require_admin()?;
    let bytes = match (body.get("absolute"), body.get("mem_relative")) {
        (Some(absolute), None) => size_of(absolute)?,
        // RabbitMQ's mem_relative: a multiple of the machine's memory, not limited to 1.
        (None, Some(relative)) => {
            let factor = relative
                .as_f64()
                .filter(|f| f.is_finite() && *f >= 0.0)
                .ok_or_else(|| ApiError::bad_request("\"mem_relative\" must be a non-negative number"))?;
            mem_relative_bytes(factor, total_memory()?)
        }
        _ => return Err(ApiError::bad_request("give either \"absolute\" or \"mem_relative\"")),
    };
    change(&state, |limits| limits.disk_free_limit = bytes)
}

fn change(state: &AppState, apply: impl FnOnce(&mut AlarmLimits)) -> Result<StatusCode, ApiError> {
    let Some(control) = state.node.alarm_limits.as_ref() else {
        return Err(ApiError::bad_request("this node has no resource monitor"));
    };
    control.send_modify(apply);
    Ok(StatusCode::NO_CONTENT)
}

/// A watermark fraction: RabbitMQ accepts 0 (publishing always blocked) up to 1.
fn fraction_of(value: &Value) -> Result<f64, ApiError> {
    value
        .as_f64()
        .filter(|f| (0.0..=1.0).contains(f))
        .ok_or_else(|| ApiError::bad_request("\"fraction\" must be a number from 0 to 1"))
}

fn size_of(value: &Value) -> Result<u64, ApiError> {
    match value {
        Value::Number(n) => {
            n.as_u64().ok_or_else(|| ApiError::bad_request("a size must be a whole number of bytes"))
        }
        Value::String(text) => parse_size(text).map_err(ApiError::bad_request),
        _ => Err(ApiError::bad_request("a size is a number of bytes or a string such as \"1GB\"")),
    }
}

fn total_memory() -> Result<u64, ApiError> {
    total_memory_bytes()
        .ok_or_else(|| ApiError::bad_request("the machine's memory cannot be read (/proc/meminfo)"))
}
