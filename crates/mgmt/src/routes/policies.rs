//! /api/policies and /api/operator-policies (semantics §6): list, show, set (PUT), clear (DELETE),
//! in RabbitMQ's shapes. Policies need the `administrator` tag, or `policymaker` and permissions in
//! the vhost; operator policies `administrator`, as in RabbitMQ. The broker checks the policy and
//! applies it at once.

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use axum::routing::get;
use axum::{Extension, Json, Router};
use hourglass_broker::policy::{PolicyError, PolicyInfo, PolicyKind, PolicySpec};
use hourglass_broker::requests::{ClearPolicy, ListPolicies, SetPolicy};
use serde_json::{json, Value};

use super::{body_json, require_vhost, str_field};
use crate::access::VhostFilter;
use crate::auth::AuthUser;
use crate::error::ApiError;
use crate::json::{json_to_table, table_to_json};
use crate::listing::{self, Params};
use crate::AppState;

pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/api/policies", get(list_all_user))
        .route("/api/policies/{vhost}", get(list_vhost_user))
        .route("/api/policies/{vhost}/{name}", get(show_user).put(put_user).delete(delete_user))
        .route("/api/operator-policies", get(list_all_operator))
        .route("/api/operator-policies/{vhost}", get(list_vhost_operator))
        .route(
            "/api/operator-policies/{vhost}/{name}",
            get(show_operator).put(put_operator).delete(delete_operator),
        )
}

/// A policy as RabbitMQ's API and definitions file show it.
pub(crate) fn policy_json(p: &PolicyInfo) -> Value {
    json!({
        "vhost": p.vhost,
        "name": p.spec.name,
        "pattern": p.spec.pattern,
        "apply-to": p.spec.apply_to,
        "definition": table_to_json(&p.spec.definition),
        "priority": p.spec.priority,
    })
}

/// A policy from a PUT body or a definitions entry: `pattern` and `definition` required,
/// `priority` (default 0), `apply-to` (default `all`).
pub(crate) fn policy_spec(name: &str, body: &Value) -> Result<PolicySpec, ApiError> {
    let pattern = str_field(body, "pattern")?.ok_or_else(|| ApiError::bad_request("pattern is required"))?;
    let definition = match body.get("definition") {
        Some(value @ Value::Object(_)) => json_to_table(value).map_err(ApiError::bad_request)?,
        None | Some(Value::Null) => return Err(ApiError::bad_request("definition is required")),
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "Validation failed\n\ndefinition must be a dictionary: {other}\n"
            )))
        }
    };
    let priority = match body.get("priority") {
        None | Some(Value::Null) => Some(0),
        Some(Value::Number(n)) => n.as_i64(),
        Some(Value::String(s)) => s.trim().parse().ok(),
        Some(_) => None,
    }
    .ok_or_else(|| ApiError::bad_request(format!("{} priority must be a number", body["priority"])))?;
    Ok(PolicySpec {
        name: name.to_owned(),
        pattern: pattern.to_owned(),
        apply_to: str_field(body, "apply-to")?.unwrap_or("all").to_owned(),
        priority,
        definition,
    })
}

/// Sets a policy as the broker checks it: 201 when new, 204 when replaced.
pub(crate) async fn set(
    state: &AppState,
    kind: PolicyKind,
    vhost: String,
    spec: PolicySpec,
) -> Result<StatusCode, ApiError> {
    require_vhost(state, &vhost)?;
    let created = state.broker.request(SetPolicy { kind, vhost, spec }).await?;
    match created.map_err(policy_error)? {
        true => Ok(StatusCode::CREATED),
        false => Ok(StatusCode::NO_CONTENT),
    }
}

fn policy_error(error: PolicyError) -> ApiError {
    match error {
        PolicyError::NoVhost(_) | PolicyError::NotFound { .. } => ApiError::NotFound,
        invalid @ PolicyError::Invalid(_) => ApiError::bad_request(invalid.to_string()),
    }
}

/// RabbitMQ's rabbit_mgmt_util:is_authorized_policies: administrators may; a policymaker may in a
/// vhost where it has permissions (an entry, whatever its patterns), and may ask for the list of
/// all vhosts' policies (filtered by `access::VhostFilter`). A vhost that does not exist is left to the 404.
/// Operator policies are for administrators only (is_authorized_admin). Refusals are 401.
fn authorize(
    state: &AppState,
    user: &AuthUser,
    kind: PolicyKind,
    vhost: Option<&str>,
) -> Result<(), ApiError> {
    if matches!(kind, PolicyKind::Operator) || user.has_tag("administrator") {
        return user.require_admin();
    }
    let in_vhost =
        |v: &str| state.users.vhost(v).is_none() || state.users.permission(v, &user.name).is_some();
    if user.has_tag("policymaker") && vhost.is_none_or(in_vhost) {
        Ok(())
    } else {
        Err(ApiError::not_authorised(crate::access::NOT_AUTHORISED_OBJECT))
    }
}

async fn list(
    state: &AppState,
    user: &AuthUser,
    kind: PolicyKind,
    vhost: Option<String>,
    params: &Params,
) -> Result<Response, ApiError> {
    authorize(state, user, kind, vhost.as_deref())?;
    if let Some(vhost) = &vhost {
        require_vhost(state, vhost)?;
    }
    let all = state.broker.ask(ListPolicies { kind, vhost }).await?;
    let filter = VhostFilter::new(state, user);
    let shown = all.iter().filter(|p| filter.shows(&p.vhost)).map(policy_json).collect();
    listing::respond(shown, params)
}

async fn show(
    state: &AppState,
    user: &AuthUser,
    kind: PolicyKind,
    vhost: String,
    name: String,
) -> Result<Json<Value>, ApiError> {
    authorize(state, user, kind, Some(&vhost))?;
    require_vhost(state, &vhost)?;
    let all = state.broker.ask(ListPolicies { kind, vhost: Some(vhost) }).await?;
    all.iter().find(|p| p.spec.name == name).map(|p| Json(policy_json(p))).ok_or(ApiError::NotFound)
}

async fn put(
    state: &AppState,
    user: &AuthUser,
    kind: PolicyKind,
    vhost: String,
    name: String,
    body: &[u8],
) -> Result<StatusCode, ApiError> {
    authorize(state, user, kind, Some(&vhost))?;
    require_vhost(state, &vhost)?;
    let spec = policy_spec(&name, &body_json(body)?)?;
    set(state, kind, vhost, spec).await
}

async fn delete(
    state: &AppState,
    user: &AuthUser,
    kind: PolicyKind,
    vhost: String,
    name: String,
) -> Result<StatusCode, ApiError> {
    authorize(state, user, kind, Some(&vhost))?;
    require_vhost(state, &vhost)?;
    let cleared = state.broker.request(ClearPolicy { kind, vhost, name }).await?;
    cleared.map_err(policy_error)?;
    Ok(StatusCode::NO_CONTENT)
}

async fn list_all_user(
    State(s): State<AppState>,
    Extension(u): Extension<AuthUser>,
    Query(p): Query<Params>,
) -> Result<Response, ApiError> {
    list(&s, &u, PolicyKind::User, None, &p).await
}

async fn list_vhost_user(
    State(s): State<AppState>,
    Extension(u): Extension<AuthUser>,
    Path(vhost): Path<String>,
    Query(p): Query<Params>,
) -> Result<Response, ApiError> {
    list(&s, &u, PolicyKind::User, Some(vhost), &p).await
}

async fn show_user(
    State(s): State<AppState>,
    Extension(u): Extension<AuthUser>,
    Path((vhost, name)): Path<(String, String)>,
) -> Result<Json<Value>, ApiError> {
    show(&s, &u, PolicyKind::User, vhost, name).await
}

async fn put_user(
    State(s): State<AppState>,
    Extension(u): Extension<AuthUser>,
    Path((vhost, name)): Path<(String, String)>,
    body: Bytes,
) -> Result<StatusCode, ApiError> {
    put(&s, &u, PolicyKind::User, vhost, name, &body).await
}

async fn delete_user(
    State(s): State<AppState>,
    Extension(u): Extension<AuthUser>,
    Path((vhost, name)): Path<(String, String)>,
) -> Result<StatusCode, ApiError> {
    delete(&s, &u, PolicyKind::User, vhost, name).await
}

async fn list_all_operator(
    State(s): State<AppState>,
    Extension(u): Extension<AuthUser>,
    Query(p): Query<Params>,
) -> Result<Response, ApiError> {
    list(&s, &u, PolicyKind::Operator, None, &p).await
}

async fn list_vhost_operator(
    State(s): State<AppState>,
    Extension(u): Extension<AuthUser>,
    Path(vhost): Path<String>,
    Query(p): Query<Params>,
) -> Result<Response, ApiError> {
    list(&s, &u, PolicyKind::Operator, Some(vhost), &p).await
}

async fn show_operator(
    State(s): State<AppState>,
    Extension(u): Extension<AuthUser>,
    Path((vhost, name)): Path<(String, String)>,
) -> Result<Json<Value>, ApiError> {
    show(&s, &u, PolicyKind::Operator, vhost, name).await
}

async fn put_operator(
    State(s): State<AppState>,
    Extension(u): Extension<AuthUser>,
    Path((vhost, name)): Path<(String, String)>,
    body: Bytes,
) -> Result<StatusCode, ApiError> {
    put(&s, &u, PolicyKind::Operator, vhost, name, &body).await
}

async fn delete_operator(
    State(s): State<AppState>,
    Extension(u): Extension<AuthUser>,
    Path((vhost, name)): Path<(String, String)>,
) -> Result<StatusCode, ApiError> {
    delete(&s, &u, PolicyKind::Operator, vhost, name).await
}
