//! rabbitmqctl's limit verbs over /api/vhost-limits and /api/user-limits: `set_vhost_limits`
//! (replaces the vhost's limits, as `rabbit_vhost_limit:parse_set`), `clear_vhost_limits`,
//! `list_vhost_limits [--global]`, `set_user_limits` (adds to the user's limits, as
//! `rabbit_auth_backend_internal:set_user_limits`), `clear_user_limits USER NAME|all`,
//! `list_user_limits [--user U] [--global]`. Banners and the JSON-per-row output are
//! rabbitmqctl 3.10's.

use anyhow::Context;
use clap::Subcommand;
use serde_json::{json, Map, Value};

use crate::client::{segment, Client};
use crate::output::Format;

/// `set_vhost_limits DEFINITION`: the vhost's limits become exactly DEFINITION.
pub(super) fn set_vhost_limits(
    client: &Client,
    vhost: &str,
    definition: &str,
    format: &Format,
) -> anyhow::Result<String> {
    let wanted = parse(definition)?;
    let base = format!("/api/vhost-limits/{}", segment(vhost));
    let before = current(client, &base)?;
    // Set first: a name or value the broker refuses stops the change before anything is removed.
    for (name, value) in &wanted {
        client.put(&format!("{base}/{}", segment(name)), &json!({ "value": value }))?;
    }
    for name in before.keys().filter(|name| !wanted.contains_key(*name)) {
        client.delete(&format!("{base}/{}", segment(name)))?;
    }
    Ok(format.info(&format!("Setting vhost limits to \"{definition}\" for vhost \"{vhost}\" ...")))
}

/// `clear_vhost_limits`: every limit of the vhost removed.
pub(super) fn clear_vhost_limits(client: &Client, vhost: &str, format: &Format) -> anyhow::Result<String> {
    let base = format!("/api/vhost-limits/{}", segment(vhost));
    for name in current(client, &base)?.keys() {
        client.delete(&format!("{base}/{}", segment(name)))?;
    }
    Ok(format.info(&format!("Clearing vhost \"{vhost}\" limits ...")))
}

/// `list_vhost_limits`: the vhost's limits as one JSON object; `--global`: `vhost limits` rows.
pub(super) fn list_vhost_limits(
    client: &Client,
    vhost: &str,
    global: bool,
    format: &Format,
) -> anyhow::Result<String> {
    if global {
        let rows = rows(&client.get("/api/vhost-limits")?, "vhost");
        return Ok(format.listing("Listing limits for all vhosts ...", &rows, &[], &["vhost", "limits"]));
    }
    let limits = current(client, &format!("/api/vhost-limits/{}", segment(vhost)))?;
    let banner = format.info(&format!("Listing limits for vhost \"{vhost}\" ..."));
    Ok(format!("{banner}{}\n", Value::Object(limits)))
}

/// `set_user_limits USER DEFINITION`: each limit named in DEFINITION set, the others kept.
pub(super) fn set_user_limits(
    client: &Client,
    user: &str,
    definition: &str,
    format: &Format,
) -> anyhow::Result<String> {
    for (name, value) in parse(definition)? {
        client.put(
            &format!("/api/user-limits/{}/{}", segment(user), segment(&name)),
            &json!({ "value": value }),
        )?;
    }
    Ok(format.info(&format!("Setting user limits to \"{definition}\" for user \"{user}\" ...")))
}

/// `clear_user_limits USER NAME`, or `all`.
pub(super) fn clear_user_limits(
    client: &Client,
    user: &str,
    name: &str,
    format: &Format,
) -> anyhow::Result<String> {
    client.delete(&format!("/api/user-limits/{}/{}", segment(user), segment(name)))?;
    let banner = if name == "all" {
        format!("Clearing all limits for user \"{user}\" ...")
    } else {
        format!("Clearing \"{name}\" limit for user \"{user}\" ...")
    };
    Ok(format.info(&banner))
}

/// `list_user_limits [--user U]` (guest by default, as rabbitmqctl): one JSON object;
/// `--global`: `user limits` rows.
pub(super) fn list_user_limits(
    client: &Client,
    user: &str,
    global: bool,
    format: &Format,
) -> anyhow::Result<String> {
    if global {
        let rows = rows(&client.get("/api/user-limits")?, "user");
        return Ok(format.listing("Listing limits for all users ...", &rows, &[], &["user", "limits"]));
    }
    let limits = current(client, &format!("/api/user-limits/{}", segment(user)))?;
    let banner = format.info(&format!("Listing limits for user \"{user}\" ..."));
    Ok(format!("{banner}{}\n", Value::Object(limits)))
}

/// A JSON object of limits as given on the command line.
fn parse(definition: &str) -> anyhow::Result<Map<String, Value>> {
    match serde_json::from_str(definition).with_context(|| format!("JSON decoding error: {definition}"))? {
        Value::Object(map) => Ok(map),
        other => anyhow::bail!("limits must be a JSON object, got {other}"),
    }
}

/// The limits a GET of one vhost or user lists (`[]` or `[{..., "value": {...}}]`).
fn current(client: &Client, path: &str) -> anyhow::Result<Map<String, Value>> {
    let listed = client.get(path)?;
    Ok(listed.get(0).and_then(|row| row["value"].as_object()).cloned().unwrap_or_default())
}

/// API rows `{KEY, value}` as rabbitmqctl's `KEY limits` rows, limits as compact JSON.
fn rows(listed: &Value, key: &str) -> Value {
    let rows = listed.as_array().map(Vec::as_slice).unwrap_or_default();
    Value::Array(
        rows.iter().map(|row| json!({ key: row[key], "limits": row["value"].to_string() })).collect(),
    )
}

/// Vhost and user limits.
#[derive(Debug, Subcommand)]
#[command(rename_all = "snake_case")]
#[expect(clippy::enum_variant_names, reason = "each variant is a verb, named as rabbitmqctl names it")]
pub enum LimitCommand {
    /// Replaces the vhost's limits with a JSON object: `{"max-connections": 10, "max-queues": 100}`
    /// (-1: no limit, 0: none allowed).
    SetVhostLimits { definition: String },
    /// Removes every limit of the vhost.
    ClearVhostLimits,
    /// The vhost's limits as JSON; `--global`: every vhost's.
    ListVhostLimits {
        #[arg(long)]
        global: bool,
    },
    /// Sets the named user limits (`{"max-connections": 2, "max-channels": 20}`), keeping others.
    SetUserLimits { username: String, definition: String },
    /// Removes one limit of the user (`max-connections`, `max-channels`) or `all`.
    ClearUserLimits { username: String, limit: String },
    /// The user's limits as JSON (`--user`, guest by default); `--global`: every user's.
    ListUserLimits {
        #[arg(long, default_value = "guest")]
        user: String,
        #[arg(long)]
        global: bool,
    },
}

/// Runs one of these verbs.
pub(super) fn run(
    client: &Client,
    vhost: &str,
    command: LimitCommand,
    format: &Format,
) -> anyhow::Result<String> {
    match command {
        LimitCommand::SetVhostLimits { definition } => set_vhost_limits(client, vhost, &definition, format),
        LimitCommand::ClearVhostLimits => clear_vhost_limits(client, vhost, format),
        LimitCommand::ListVhostLimits { global } => list_vhost_limits(client, vhost, global, format),
        LimitCommand::SetUserLimits { username, definition } => {
            set_user_limits(client, &username, &definition, format)
        }
        LimitCommand::ClearUserLimits { username, limit } => {
            clear_user_limits(client, &username, &limit, format)
        }
        LimitCommand::ListUserLimits { user, global } => list_user_limits(client, &user, global, format),
    }
}
