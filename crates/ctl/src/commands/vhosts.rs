//! rabbitmqctl's vhost, tracing, policy and definitions verbs.

use anyhow::Context;
use clap::Subcommand;
use serde_json::{json, Value};

use crate::client::{segment, Client};
use crate::output::Format;

/// Virtual hosts, their tracing and policies, and the definitions.
#[derive(Debug, Subcommand)]
#[command(rename_all = "snake_case")]
pub enum VhostCommand {
    /// Adds a virtual host.
    AddVhost { vhost: String },
    /// Deletes a virtual host with everything in it.
    DeleteVhost { vhost: String },
    /// Starts the firehose tracer for the vhost (`-p`): copies of its publishes and deliveries
    /// go to its `amq.rabbitmq.trace` exchange.
    TraceOn,
    /// Stops the firehose tracer for the vhost (`-p`).
    TraceOff,
    /// Sets a policy: NAME, PATTERN (a regular expression on names), DEFINITION (JSON).
    SetPolicy {
        #[command(flatten)]
        policy: PolicyArgs,
    },
    /// Removes a policy of the vhost.
    ClearPolicy { name: String },
    /// Sets an operator policy (limits that win where lower), arguments as set_policy.
    SetOperatorPolicy {
        #[command(flatten)]
        policy: PolicyArgs,
    },
    /// Removes an operator policy of the vhost.
    ClearOperatorPolicy { name: String },
    /// Writes the definitions as JSON to a file, or to stdout with `-`.
    ExportDefinitions { path: String },
    /// Reads definitions JSON from a file, or from stdin with `-`.
    ImportDefinitions { path: String },
}

/// Runs one of these verbs.
pub(super) fn run(
    client: &Client,
    vhost: &str,
    command: VhostCommand,
    format: &Format,
) -> anyhow::Result<String> {
    let v = segment(vhost);
    match command {
        VhostCommand::AddVhost { vhost } => {
            client.put(&format!("/api/vhosts/{}", segment(&vhost)), &json!({}))?;
            Ok(format.info(&format!("Adding vhost \"{vhost}\" ...")))
        }
        VhostCommand::DeleteVhost { vhost } => {
            client.delete(&format!("/api/vhosts/{}", segment(&vhost)))?;
            Ok(format.info(&format!("Deleting vhost \"{vhost}\" ...")))
        }
        VhostCommand::TraceOn => trace(client, vhost, true, format),
        VhostCommand::TraceOff => trace(client, vhost, false, format),
        VhostCommand::SetPolicy { policy } => {
            let banner = format!("Setting policy \"{}\"", policy.name);
            set_policy(client, &format!("/api/policies/{v}"), vhost, &banner, policy, format)
        }
        VhostCommand::ClearPolicy { name } => {
            client.delete(&format!("/api/policies/{v}/{}", segment(&name)))?;
            Ok(format.info(&format!("Clearing policy \"{name}\" on vhost \"{vhost}\" ...")))
        }
        VhostCommand::SetOperatorPolicy { policy } => {
            let banner = format!("Setting operator policy override \"{}\"", policy.name);
            set_policy(client, &format!("/api/operator-policies/{v}"), vhost, &banner, policy, format)
        }
        VhostCommand::ClearOperatorPolicy { name } => {
            client.delete(&format!("/api/operator-policies/{v}/{}", segment(&name)))?;
            Ok(format.info(&format!("Clearing operator policy \"{name}\" on vhost \"{vhost}\" ...")))
        }
        VhostCommand::ExportDefinitions { path } => {
            let text = serde_json::to_string_pretty(&client.get("/api/definitions")?)?;
            if path == "-" {
                return Ok(format!("{text}\n"));
            }
            std::fs::write(&path, text).with_context(|| format!("writing {path}"))?;
            Ok(format.info(&format!("Exporting definitions in JSON to a file at \"{path}\" ...")))
        }
        VhostCommand::ImportDefinitions { path } => {
            let text = if path == "-" {
                std::io::read_to_string(std::io::stdin())?
            } else {
                std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))?
            };
            let body: Value = serde_json::from_str(&text).context("parsing definitions JSON")?;
            client.post("/api/definitions", &body)?;
            let from =
                if path == "-" { "standard input".to_owned() } else { format!("a file at \"{path}\"") };
            Ok(format.info(&format!("Importing definitions in JSON from {from} ...")))
        }
    }
}

/// `trace_on` / `trace_off`: the vhost's `tracing` switched through the API (an existing vhost
/// only: the same PUT would create one).
fn trace(client: &Client, vhost: &str, on: bool, format: &Format) -> anyhow::Result<String> {
    let path = format!("/api/vhosts/{}", segment(vhost));
    if !client.exists(&path)? {
        anyhow::bail!("vhost '{vhost}' not found");
    }
    client.put(&path, &json!({ "tracing": on }))?;
    let verb = if on { "Starting" } else { "Stopping" };
    Ok(format.info(&format!("{verb} tracing for vhost \"{vhost}\" ...")))
}

/// rabbitmqctl set_policy's arguments.
#[derive(Debug, clap::Args)]
pub struct PolicyArgs {
    /// Higher wins when several policies match.
    #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
    priority: i64,
    /// queues, classic_queues, quorum_queues, exchanges or all.
    #[arg(long, default_value = "all")]
    apply_to: String,
    name: String,
    pattern: String,
    definition: String,
}

/// PUTs a policy under `base` (the vhost's policies or operator policies), saying so after
/// `banner` as rabbitmqctl does.
fn set_policy(
    client: &Client,
    base: &str,
    vhost: &str,
    banner: &str,
    policy: PolicyArgs,
    format: &Format,
) -> anyhow::Result<String> {
    let definition: Value = serde_json::from_str(&policy.definition)
        .with_context(|| format!("Could not parse JSON document: {}", policy.definition))?;
    let body = json!({
        "pattern": policy.pattern,
        "definition": definition,
        "priority": policy.priority,
        "apply-to": policy.apply_to,
    });
    client.put(&format!("{base}/{}", segment(&policy.name)), &body)?;
    Ok(format.info(&format!(
        "{banner} for pattern \"{}\" to \"{}\" with priority \"{}\" for vhost \"{vhost}\" ...",
        policy.pattern, policy.definition, policy.priority
    )))
}
