//! /api/definitions: export and import users, vhosts, permissions, topic permissions, policies,
//! exchanges, queues, bindings in RabbitMQ's format (operator policies are not part of the file, as in RabbitMQ).
//! Limits travel as RabbitMQ 3.10 writes them: a user's in `users[].limits`, a vhost's as a
//! `vhost-limits` runtime parameter in `parameters` (and, for show, as pairs in
//! `vhosts[].limits`, which an import also reads); other parameters are ignored on import.
//! An import's queues are checked against the vhosts' `max-queues` first, as RabbitMQ does, and
//! the file's own vhost limits are applied after its queues, so an export of a vhost at its
//! limit imports again.
//! /api/definitions/{vhost}: one vhost's exchanges, queues, bindings (and policies), without
//! `vhost` keys, imported into whichever vhost is named, as RabbitMQ's management plugin does.

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::Response;
use axum::routing::get;
use axum::{Extension, Router};
use serde_json::{json, Value};

use super::bindings::bind;
use super::{body_json, str_field, tags_field};
use crate::auth::AuthUser;
use crate::error::ApiError;
use crate::json::json_to_table;
use crate::users::{Batch, Limits, LimitsOf, Permission, User, VhostRecord};
use crate::{AppState, PRODUCT_VERSION, RABBITMQ_COMPAT_VERSION};
use hourglass_broker::policy::PolicyKind;
use hourglass_broker::requests::{AddVhost, ListPolicies, WouldExceedQueueLimit};
use hourglass_broker::Permissions;

pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/api/definitions", get(export).post(import))
        .route("/api/definitions/{vhost}", get(export_vhost).post(import_vhost))
}

/// The sections that belong to one vhost.
const VHOST_SECTIONS: [&str; 4] = ["queues", "exchanges", "bindings", "policies"];

/// GET /api/definitions: a heavy listing (`streamed.rs`): at most two of one user's and four in
/// all are in memory at once, each until its last byte is taken; past the user's two, 429.
async fn export(
    State(state): State<AppState>,
    Extension(auth): Extension<AuthUser>,
) -> Result<Response, ApiError> {
    auth.require_admin()?;
    let slot = state.listings.take(&auth.name).await?;
    Ok(crate::streamed::json_document(&export_document(&state).await?, slot))
}

/// GET /api/definitions/{vhost}: the vhost's items from the full export, `vhost` keys removed.
async fn export_vhost(
    State(state): State<AppState>,
    Extension(auth): Extension<AuthUser>,
    Path(vhost): Path<String>,
) -> Result<Response, ApiError> {
    auth.require_admin()?;
    super::require_vhost(&state, &vhost)?;
    let slot = state.listings.take(&auth.name).await?;
    let mut all = export_document(&state).await?;
    let mut out = json!({
        "rabbit_version": RABBITMQ_COMPAT_VERSION,
        "rabbitmq_version": RABBITMQ_COMPAT_VERSION,
        "parameters": [],
    });
    for key in VHOST_SECTIONS {
        let items = match all.get_mut(key).map(Value::take) {
            Some(Value::Array(items)) => items,
            _ => Vec::new(),
        };
        let mine: Vec<Value> = items
            .into_iter()
            .filter(|item| item["vhost"] == vhost.as_str())
            .map(|mut item| {
                if let Value::Object(map) = &mut item {
                    map.remove("vhost");
                }
                item
            })
            .collect();
        out[key] = Value::Array(mine);
    }
    Ok(crate::streamed::json_document(&out, slot))
}

/// POST /api/definitions/{vhost}: a vhost export (or a full one: its users, vhosts and
/// permissions are ignored) imported into this vhost.
async fn import_vhost(
    State(state): State<AppState>,
    Extension(auth): Extension<AuthUser>,
    Path(vhost): Path<String>,
    body: Bytes,
) -> Result<StatusCode, ApiError> {
    auth.require_admin()?;
    super::require_vhost(&state, &vhost)?;
    let body = body_json(&body)?;
    let mut scoped = json!({});
    for key in VHOST_SECTIONS {
        let mut items = items(&body, key)?.to_vec();
        for item in &mut items {
            if let Value::Object(map) = item {
                map.insert("vhost".to_owned(), Value::String(vhost.clone()));
            }
        }
        scoped[key] = Value::Array(items);
    }
    import_definitions(&state, &auth.name, &scoped).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Every section, as GET /api/definitions answers.
async fn export_document(state: &AppState) -> Result<Value, ApiError> {
    let strip = |mut v: Value, keys: &[&str]| {
        if let Value::Object(map) = &mut v {
            map.retain(|k, _| keys.contains(&k.as_str()));
        }
        v
    };
    let queues: Vec<Value> = super::queues::all_queues(state, None)
        .await?
        .into_iter()
        .filter(|q| q["exclusive"] != true)
        .map(|q| strip(q, &["name", "vhost", "type", "durable", "auto_delete", "arguments"]))
        .collect();
    let exchanges: Vec<Value> = super::exchanges::all_exchanges(state, None)
        .await?
        .into_iter()
        .filter(|x| x["name"].as_str().is_some_and(|n| !n.is_empty() && !n.starts_with("amq.")))
        .map(|x| strip(x, &["name", "vhost", "type", "durable", "auto_delete", "internal", "arguments"]))
        .collect();
    let policies = state.broker.ask(ListPolicies { kind: PolicyKind::User, vhost: None }).await?;
    let policies: Vec<Value> = policies.iter().map(super::policies::policy_json).collect();
    let mut bindings = Vec::new();
    for vhost in state.users.vhosts() {
        for b in super::bindings::vhost_bindings(state, &vhost.name).await? {
            if b["source"] != "" {
                bindings.push(strip(
                    b,
                    &["source", "vhost", "destination", "destination_type", "routing_key", "arguments"],
                ));
            }
        }
    }
    Ok(json!({
        "rabbit_version": RABBITMQ_COMPAT_VERSION,
        "rabbitmq_version": RABBITMQ_COMPAT_VERSION,
        "product_name": "Hourglass",
        "product_version": PRODUCT_VERSION,
        "users": state.users.users().iter().map(super::users::user_json).collect::<Vec<_>>(),
        "vhosts": state.users.vhosts().iter().map(|v| json!({
            "name": v.name, "description": v.description, "tags": v.tags,
            "metadata": {"description": v.description, "tags": v.tags},
            "limits": v.limits.entries().iter().map(|(k, v)| json!([k, v])).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
        "permissions": state.users.permissions().iter().map(super::users::permission_json).collect::<Vec<_>>(),
        "topic_permissions": state.users.topic_permissions().iter().map(super::topic_permissions::topic_permission_json).collect::<Vec<_>>(),
        "parameters": state.users.vhosts().iter().filter(|v| !v.limits.is_empty()).map(|v| json!({
            "vhost": v.name, "component": VHOST_LIMITS_COMPONENT, "name": "limits", "value": v.limits.to_json(),
        })).collect::<Vec<_>>(),
        "global_parameters": [],
        "policies": policies,
        "queues": queues,
        "exchanges": exchanges,
        "bindings": bindings,
    }))
}

fn items<'a>(body: &'a Value, key: &str) -> Result<&'a [Value], ApiError> {
    match body.get(key) {
        None | Some(Value::Null) => Ok(&[]),
        Some(Value::Array(items)) => Ok(items),
        Some(_) => Err(ApiError::bad_request(format!("{key} must be a list"))),
    }
}

fn required<'a>(item: &'a Value, key: &str) -> Result<&'a str, ApiError> {
    str_field(item, key)?.ok_or_else(|| ApiError::bad_request(format!("definition without {key}: {item}")))
}

/// POST /api/definitions: imports as the requesting administrator.
async fn import(
    State(state): State<AppState>,
    Extension(auth): Extension<AuthUser>,
    body: Bytes,
) -> Result<StatusCode, ApiError> {
    auth.require_admin()?;
    import_definitions(&state, &auth.name, &body_json(&body)?).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Applies each section of a definitions document (RabbitMQ's export format) in dependency order,
/// declaring as `user`; stops at the first error (400 naming it). Also used at boot for
/// `load_definitions`. Answers once what it applied is durable (a definition the catalog
/// refused is a 500), waiting once for the whole import rather than once per item.
pub async fn import_definitions(state: &AppState, user: &str, body: &Value) -> Result<(), ApiError> {
    let first = state.broker.next_op_seq().await?;
    let unsynced = AppState { broker: state.broker.unsynced(), ..state.clone() };
    let imported = import_unsynced(&unsynced, user, body).await;
    state.broker.durable_since(first).await?;
    imported
}

async fn import_unsynced(state: &AppState, user: &str, body: &Value) -> Result<(), ApiError> {
    let auth = AuthUser { name: user.to_owned(), tags: vec!["administrator".to_owned()] };
    check_queue_limits(state, body).await?;
    // Vhost records, users, permissions and topic permissions: one save each section, whatever
    // their number (`hourglass_identity::Batch`).
    let vhosts = state.users.batch(|batch| import_vhosts(batch, body))?;
    for name in vhosts {
        state.broker.request(AddVhost { name, tracing: None }).await?;
    }
    let vhost_limits = vhost_limits(body)?;
    state.users.batch(|batch| import_users(state, batch, body))?;
    let granted = state.users.batch(|batch| import_permissions(batch, body))?;
    let topics = state.users.batch(|batch| import_topic_permissions(batch, body))?;
    for (user, vhost) in granted.into_iter().chain(topics) {
        super::push_permissions(state, &user, &vhost).await?;
    }
    for p in items(body, "policies")? {
        let vhost = required(p, "vhost")?.to_owned();
        let spec = super::policies::policy_spec(required(p, "name")?, p)?;
        super::policies::set(state, PolicyKind::User, vhost, spec).await?;
    }
    for x in items(body, "exchanges")? {
        let vhost = required(x, "vhost")?.to_owned();
        super::require_vhost(state, &vhost)?;
        let declare = super::exchanges::exchange_declare(required(x, "name")?, x)?;
        super::call_as(state, &auth.name, Permissions::full(), vhost, declare).await?;
    }
    for q in items(body, "queues")? {
        let vhost = required(q, "vhost")?.to_owned();
        super::require_vhost(state, &vhost)?;
        let declare = super::queues::queue_declare(required(q, "name")?, q)?;
        super::call_as(state, &auth.name, Permissions::full(), vhost, declare).await?;
    }
    for b in items(body, "bindings")? {
        let vhost = required(b, "vhost")?;
        super::require_vhost(state, vhost)?;
        let kind = match required(b, "destination_type")? {
            "queue" => "queue",
            "exchange" => "exchange",
            other => return Err(ApiError::bad_request(format!("unknown destination_type {other}"))),
        };
        let arguments =
            json_to_table(b.get("arguments").unwrap_or(&Value::Null)).map_err(ApiError::bad_request)?;
        let routing_key = str_field(b, "routing_key")?.unwrap_or_default();
        let (source, destination) = (required(b, "source")?, required(b, "destination")?);
        let full = Permissions::full();
        let bound =
            bind(state, &auth.name, full, vhost, source, kind, destination, routing_key, arguments, true)
                .await;
        match bound {
            // RabbitMQ skips a binding whose source or destination is missing (its own exports
            // name internal exchanges they leave out) and imports the rest.
            Err(e) if e.status() == axum::http::StatusCode::NOT_FOUND => {
                tracing::warn!(vhost, source, destination, reason = %e, "definitions: binding skipped");
            }
            bound => bound?,
        }
    }
    for (vhost, limits) in vhost_limits {
        super::require_vhost(state, &vhost)?;
        super::limits::set_vhost_limits(state, &vhost, limits).await?;
    }
    Ok(())
}

/// The `vhosts` section's records; their names, for the broker.
fn import_vhosts(batch: &mut Batch<'_>, body: &Value) -> Result<Vec<String>, ApiError> {
    let mut names = Vec::new();
    for v in items(body, "vhosts")? {
        let name = required(v, "name")?.to_owned();
        let meta = v.get("metadata").cloned().unwrap_or(Value::Null);
        let description =
            str_field(v, "description")?.or(str_field(&meta, "description")?).unwrap_or_default();
        let mut tags = tags_field(v)?;
        if tags.is_empty() {
            tags = tags_field(&meta)?;
        }
        batch.put_vhost(VhostRecord {
            name: name.clone(),
            description: description.to_owned(),
            tags,
            default_queue_type: str_field(v, "default_queue_type")?.map(str::to_owned),
            limits: batch.vhost(&name).map(|v| v.limits.clone()).unwrap_or_default(),
        });
        names.push(name);
    }
    Ok(names)
}

/// The `users` section: hashes keep their algorithm, limits come along (RabbitMQ's `put_user`).
fn import_users(state: &AppState, batch: &mut Batch<'_>, body: &Value) -> Result<(), ApiError> {
    for u in items(body, "users")? {
        let name = required(u, "name")?.to_owned();
        // No one could log in as "" and it cannot be named in a URL: RabbitMQ refuses it too.
        if name.is_empty() {
            return Err(ApiError::bad_request("user name must not be empty"));
        }
        let algorithm = super::users::hashing_algorithm(u)
            .map_err(|e| ApiError::bad_request(format!("user {name}: {e}")))?;
        let (password_hash, hashing_algorithm) =
            match (str_field(u, "password_hash")?, str_field(u, "password")?) {
                (Some(hash), _) => (hash.to_owned(), algorithm),
                (None, Some(password)) => (state.users.hash_password(password), Default::default()),
                (None, None) => (String::new(), Default::default()),
            };
        let limits = match u.get("limits") {
            // A file without limits (older exports) leaves the user's as they are.
            None | Some(Value::Null) => batch.user(&name).map(|u| u.limits.clone()).unwrap_or_default(),
            Some(limits) => Limits::from_json(LimitsOf::User, limits)
                .map_err(|e| ApiError::bad_request(format!("user {name}: {e}")))?,
        };
        batch.put_user(User { name, password_hash, hashing_algorithm, tags: tags_field(u)?, limits });
    }
    Ok(())
}

/// The `permissions` section; the (user, vhost) pairs set, to push to open connections.
fn import_permissions(batch: &mut Batch<'_>, body: &Value) -> Result<Vec<(String, String)>, ApiError> {
    let mut granted = Vec::new();
    for p in items(body, "permissions")? {
        let (user, vhost) = (required(p, "user")?, required(p, "vhost")?);
        batch.vhost(vhost).ok_or(ApiError::NotFound)?;
        batch.put_permission(Permission {
            user: user.to_owned(),
            vhost: vhost.to_owned(),
            configure: required(p, "configure")?.to_owned(),
            write: required(p, "write")?.to_owned(),
            read: required(p, "read")?.to_owned(),
        })?;
        granted.push((user.to_owned(), vhost.to_owned()));
    }
    Ok(granted)
}

/// The `topic_permissions` section; the (user, vhost) pairs changed, to push to open
/// connections.
fn import_topic_permissions(batch: &mut Batch<'_>, body: &Value) -> Result<Vec<(String, String)>, ApiError> {
    let mut changed = Vec::new();
    for t in items(body, "topic_permissions")? {
        let (user, vhost) = (required(t, "user")?, required(t, "vhost")?);
        batch.vhost(vhost).ok_or(ApiError::NotFound)?;
        batch.put_topic_permission(crate::users::TopicPermission {
            user: user.to_owned(),
            vhost: vhost.to_owned(),
            exchange: required(t, "exchange")?.to_owned(),
            write: required(t, "write")?.to_owned(),
            read: required(t, "read")?.to_owned(),
        })?;
        changed.push((user.to_owned(), vhost.to_owned()));
    }
    Ok(changed)
}

/// The runtime-parameter component RabbitMQ keeps vhost limits under.
const VHOST_LIMITS_COMPONENT: &str = "vhost-limits";

/// The vhost limits a document sets: `vhosts[].limits` (an object, or RabbitMQ's list of
/// pairs), then `vhost-limits` parameters, which win.
fn vhost_limits(body: &Value) -> Result<Vec<(String, Limits)>, ApiError> {
    let mut found = Vec::new();
    for v in items(body, "vhosts")? {
        let object = match v.get("limits") {
            Some(Value::Array(pairs)) if !pairs.is_empty() => Value::Object(
                pairs
                    .iter()
                    .filter_map(|pair| Some((pair.get(0)?.as_str()?.to_owned(), pair.get(1)?.clone())))
                    .collect(),
            ),
            Some(object @ Value::Object(map)) if !map.is_empty() => object.clone(),
            _ => continue,
        };
        found.push((required(v, "name")?.to_owned(), object));
    }
    for p in items(body, "parameters")? {
        if str_field(p, "component")? == Some(VHOST_LIMITS_COMPONENT) {
            found.push((required(p, "vhost")?.to_owned(), p.get("value").cloned().unwrap_or(Value::Null)));
        }
    }
    found
        .into_iter()
        .map(|(vhost, value)| {
            Limits::from_json(LimitsOf::Vhost, &value).map(|limits| (vhost.clone(), limits)).map_err(|e| {
                ApiError::bad_request(format!("Validation failed\n\n{e}\n ({vhost}/vhost-limits/limits)"))
            })
        })
        .collect()
}

/// RabbitMQ's `validate_limits`: refuses the whole import, before anything of it is declared,
/// when its new queues would pass a vhost's `max-queues` (its text).
async fn check_queue_limits(state: &AppState, body: &Value) -> Result<(), ApiError> {
    let mut by_vhost: std::collections::BTreeMap<String, Vec<String>> = Default::default();
    for q in items(body, "queues")? {
        by_vhost.entry(required(q, "vhost")?.to_owned()).or_default().push(required(q, "name")?.to_owned());
    }
    for (vhost, names) in by_vhost {
        let name = vhost.clone();
        if let Some((adding, limit, current)) =
            state.broker.ask(WouldExceedQueueLimit { vhost: name, names }).await?
        {
            return Err(ApiError::bad_request(format!(
                "Adding {adding} queue(s) to virtual host \"{vhost}\" would exceed the limit of {limit} \
                 queue(s).\n\nThis virtual host currently has {current} queue(s) defined.\n\nImport aborted!"
            )));
        }
    }
    Ok(())
}
