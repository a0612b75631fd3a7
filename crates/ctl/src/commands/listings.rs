//! rabbitmqctl's list_* verbs over the management API's listings, columns checked against
//! what each listing has (`columns.rs`).

use clap::Subcommand;
use serde_json::Value;

use super::columns;
use crate::client::{segment, Client};
use crate::output::Format;

/// The listing verbs.
#[derive(Debug, Subcommand)]
#[command(rename_all = "snake_case")]
#[expect(clippy::enum_variant_names, reason = "each variant is a verb, named as rabbitmqctl names it")]
pub enum ListCommand {
    /// Queues of the vhost: columns default to `name messages`.
    ListQueues { columns: Vec<String> },
    /// Exchanges of the vhost: columns default to `name type`.
    ListExchanges { columns: Vec<String> },
    /// Bindings of the vhost: columns default to rabbitmqctl's six.
    ListBindings { columns: Vec<String> },
    /// Client connections: columns default to `user peer_host peer_port state`.
    ListConnections { columns: Vec<String> },
    /// Users and their tags.
    ListUsers,
    /// Virtual hosts: columns default to `name` (also `tracing`, `description`, `tags`...).
    ListVhosts { columns: Vec<String> },
    /// Permissions in the vhost: user, configure, write, read.
    ListPermissions,
    /// Policies of the vhost: vhost, name, pattern, apply-to, definition, priority.
    ListPolicies,
    /// Operator policies of the vhost, columns as list_policies.
    ListOperatorPolicies,
    /// Channels: columns default to `connection number user consumer_count messages_unacknowledged`
    /// (`connection` is the connection's name).
    ListChannels { columns: Vec<String> },
    /// Consumers of the vhost: columns default to `queue_name channel_pid consumer_tag ack_required
    /// prefetch_count` (`channel_pid` is the channel's name: the API has no Erlang pids).
    ListConsumers { columns: Vec<String> },
    /// Topic permissions of the vhost: user, exchange, write, read.
    ListTopicPermissions,
}

/// Runs one of these verbs.
pub(super) fn run(
    client: &Client,
    vhost: &str,
    command: ListCommand,
    format: &Format,
) -> anyhow::Result<String> {
    let v = segment(vhost);
    match command {
        ListCommand::ListQueues { columns } => listing(
            format,
            &format!("Listing queues for vhost {vhost} ..."),
            &client.get(&format!("/api/queues/{v}"))?,
            &columns,
            &["name", "messages"],
            columns::QUEUES,
        ),
        ListCommand::ListExchanges { columns } => listing(
            format,
            &format!("Listing exchanges for vhost {vhost} ..."),
            &client.get(&format!("/api/exchanges/{v}"))?,
            &columns,
            &["name", "type"],
            columns::EXCHANGES,
        ),
        ListCommand::ListBindings { columns } => listing(
            format,
            &format!("Listing bindings for vhost {vhost}..."),
            &client.get(&format!("/api/bindings/{v}"))?,
            &columns,
            &[
                "source_name",
                "source_kind",
                "destination_name",
                "destination_kind",
                "routing_key",
                "arguments",
            ],
            columns::BINDINGS,
        ),
        ListCommand::ListConnections { columns } => listing(
            format,
            "Listing connections ...",
            &client.get("/api/connections")?,
            &columns,
            &["user", "peer_host", "peer_port", "state"],
            columns::CONNECTIONS,
        ),
        ListCommand::ListUsers => {
            Ok(format.listing("Listing users ...", &client.get("/api/users")?, &[], &["name", "tags"]))
        }
        ListCommand::ListVhosts { columns } => listing(
            format,
            "Listing vhosts ...",
            &client.get("/api/vhosts")?,
            &columns,
            &["name"],
            columns::VHOSTS,
        ),
        ListCommand::ListPermissions => {
            let all = client.get(&format!("/api/vhosts/{v}/permissions"))?;
            Ok(format.listing(
                &format!("Listing permissions for vhost \"{vhost}\" ..."),
                &all,
                &[],
                &["user", "configure", "write", "read"],
            ))
        }
        ListCommand::ListPolicies => Ok(format.listing(
            &format!("Listing policies for vhost \"{vhost}\" ..."),
            &client.get(&format!("/api/policies/{v}"))?,
            &[],
            POLICY_COLUMNS,
        )),
        ListCommand::ListOperatorPolicies => Ok(format.listing(
            &format!("Listing operator policy overrides for vhost \"{vhost}\" ..."),
            &client.get(&format!("/api/operator-policies/{v}"))?,
            &[],
            POLICY_COLUMNS,
        )),
        ListCommand::ListChannels { columns } => listing(
            format,
            "Listing channels ...",
            &client.get("/api/channels")?,
            &columns,
            &["connection", "number", "user", "consumer_count", "messages_unacknowledged"],
            columns::CHANNELS,
        ),
        ListCommand::ListConsumers { columns } => listing(
            format,
            &format!("Listing consumers in vhost {vhost} ..."),
            &client.get(&format!("/api/consumers/{v}"))?,
            &columns,
            &["queue_name", "channel_pid", "consumer_tag", "ack_required", "prefetch_count"],
            columns::CONSUMERS,
        ),
        ListCommand::ListTopicPermissions => Ok(format.listing(
            &format!("Listing topic permissions for vhost \"{vhost}\" ..."),
            &client.get(&format!("/api/vhosts/{v}/topic-permissions"))?,
            &[],
            &["user", "exchange", "write", "read"],
        )),
    }
}

/// rabbitmqctl list_policies' columns.
const POLICY_COLUMNS: &[&str] = &["vhost", "name", "pattern", "apply-to", "definition", "priority"];

/// A listing whose columns are checked first against `known` (`columns.rs`).
fn listing(
    format: &Format,
    banner: &str,
    items: &Value,
    columns: &[String],
    default: &[&str],
    known: &[&str],
) -> anyhow::Result<String> {
    columns::check(columns, known, items)?;
    Ok(format.listing(banner, items, columns, default))
}
