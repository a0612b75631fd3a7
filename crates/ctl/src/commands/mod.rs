//! The verbs, named and shaped as rabbitmqctl's.

use anyhow::Context;
use clap::Subcommand;
use serde_json::{json, Value};

use crate::client::{segment, Client, NotFound};
use crate::output::Format;

mod columns;
mod connections;
mod limits;
mod node;

/// What rabbitmqctl refuses with an error of its own name and a sysexits code.
#[derive(Debug, thiserror::Error)]
pub enum Refused {
    #[error("user_already_exists: {0}")]
    UserAlreadyExists(String),
    #[error("failed to authenticate user \"{0}\"")]
    AuthenticationFailed(String),
    #[error("unable to perform an operation on node '{0}'. Please see diagnostics information and suggestions below.\n{1}")]
    NodeUnavailable(String, String),
    /// delete_user, change_password, set_user_tags of a user that does not exist.
    #[error("User \"{0}\" does not exist")]
    NoSuchUser(String),
    /// purge_queue of a queue that does not exist.
    #[error("not_found")]
    NothingToPurge,
    /// delete_queue of a queue that does not exist.
    #[error("Queue not found")]
    NoSuchQueue,
    /// A listing's column that is not one.
    #[error("Info key(s) {0} are not supported")]
    UnknownColumns(String),
}

impl Refused {
    /// rabbitmqctl's exit code (RabbitMQ 3.10's, measured): EX_SOFTWARE (70) for what the node
    /// refused, EX_DATAERR (65) for bad credentials, EX_UNAVAILABLE (69) when the node cannot be
    /// reached or a queue to purge is not there, EX_NOUSER (67) for a user that is not there,
    /// EX_USAGE (64) for a bad column and a queue to delete that is not there.
    pub fn exit_code(&self) -> u8 {
        match self {
            Refused::UserAlreadyExists(_) => 70,
            Refused::AuthenticationFailed(_) => 65,
            Refused::NodeUnavailable(..) | Refused::NothingToPurge => 69,
            Refused::NoSuchUser(_) => 67,
            Refused::NoSuchQueue | Refused::UnknownColumns(_) => 64,
        }
    }

    /// The error as rabbitmqctl prints it on stderr.
    pub fn report(&self) -> String {
        match self {
            Refused::UnknownColumns(_) => format!("Error (argument validation): {self}"),
            _ => format!("Error:\n{self}"),
        }
    }
}

#[derive(Debug, Subcommand)]
#[command(rename_all = "snake_case")]
pub enum Command {
    /// The node's state: versions, uptime, listeners, memory and disk with their alarms, totals.
    Status,
    /// Checks that the node answers.
    Ping,
    /// Waits until the node answers (at most `--timeout` seconds).
    AwaitStartup {
        #[arg(long, short = 't', default_value_t = 300)]
        timeout: u64,
    },
    /// This tool's version.
    Version,
    /// The node's effective settings.
    Environment,
    /// Checks a user's credentials.
    AuthenticateUser { username: String, password: String },
    /// The cluster's name, its nodes (each node's role and state when clustered) and alarms.
    ClusterStatus,
    /// Sets the memory alarm's watermark until the next restart: a fraction of the machine's
    /// memory (`0.4`), or `absolute SIZE` (`absolute 2GB`).
    SetVmMemoryHighWatermark {
        #[arg(num_args = 1..=2, required = true)]
        value: Vec<String>,
    },
    /// Sets the disk alarm's free-space limit until the next restart: `SIZE` (`50MB`), or
    /// `mem_relative FACTOR` (a multiple of the machine's memory).
    SetDiskFreeLimit {
        #[arg(num_args = 1..=2, required = true)]
        value: Vec<String>,
    },
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
    /// Adds a user with a password and no tags (refused if the user exists).
    AddUser { username: String, password: String },
    /// Deletes a user, its permissions and access keys, and closes its connections.
    DeleteUser { username: String },
    /// Makes an access key for the SQS endpoint acting as the user in the vhost (`-p`); prints
    /// its id and secret, which is shown only this once (docs/sqs.md).
    AddAccessKey { username: String },
    /// The user's access key ids, the vhost each acts in and when each was made.
    ListAccessKeys { username: String },
    /// Revokes one of the user's access keys.
    DeleteAccessKey { username: String, access_key_id: String },
    /// Sets a new password for a user.
    ChangePassword { username: String, password: String },
    /// Replaces the user's tags.
    SetUserTags { username: String, tags: Vec<String> },
    /// Sets a user's permissions in the vhost: CONFIGURE, WRITE and READ regular expressions on
    /// resource names (`".*"` for all, `""` for none).
    SetPermissions { username: String, configure: String, write: String, read: String },
    /// Removes a user's permissions in the vhost.
    ClearPermissions { username: String },
    /// Adds a virtual host.
    AddVhost { vhost: String },
    /// Starts the firehose tracer for the vhost (`-p`): copies of its publishes and deliveries
    /// go to its `amq.rabbitmq.trace` exchange.
    TraceOn,
    /// Stops the firehose tracer for the vhost (`-p`).
    TraceOff,
    /// Deletes a virtual host with everything in it.
    DeleteVhost { vhost: String },
    /// Removes every ready message of a queue in the vhost (unacked deliveries stay).
    PurgeQueue { queue: String },
    /// Deletes a queue of the vhost with its messages.
    DeleteQueue { queue: String },
    /// Sets a policy: NAME, PATTERN (a regular expression on names), DEFINITION (JSON).
    SetPolicy {
        #[command(flatten)]
        policy: PolicyArgs,
    },
    /// Removes a policy of the vhost.
    ClearPolicy { name: String },
    /// Policies of the vhost: vhost, name, pattern, apply-to, definition, priority.
    ListPolicies,
    /// Sets an operator policy (limits that win where lower), arguments as set_policy.
    SetOperatorPolicy {
        #[command(flatten)]
        policy: PolicyArgs,
    },
    /// Removes an operator policy of the vhost.
    ClearOperatorPolicy { name: String },
    /// Operator policies of the vhost, columns as list_policies.
    ListOperatorPolicies,
    /// Channels: columns default to `connection number user consumer_count messages_unacknowledged`
    /// (`connection` is the connection's name).
    ListChannels { columns: Vec<String> },
    /// Consumers of the vhost: columns default to `queue_name channel_pid consumer_tag ack_required
    /// prefetch_count` (`channel_pid` is the channel's name: the API has no Erlang pids).
    ListConsumers { columns: Vec<String> },
    /// Closes a connection (by its name, as list_connections' `name` column shows it).
    CloseConnection {
        name: String,
        #[arg(default_value = "Closed via hourglass-ctl")]
        reason: String,
    },
    /// Closes every client connection of the vhost (`--global`: of every vhost), giving them
    /// the explanation.
    CloseAllConnections(connections::CloseAllArgs),
    /// Publishes a message through the HTTP API (rabbitmqadmin's `publish`); `""` is the default
    /// exchange. Headers as `--header name=value` (values that parse as integers are sent as such).
    PublishMessage {
        exchange: String,
        routing_key: String,
        payload: String,
        #[arg(long = "header", value_parser = parse_header)]
        headers: Vec<(String, Value)>,
    },
    /// A queue's delayed messages in due order, without consuming them: id, due_in_ms, routing_key, payload_bytes.
    ListDelayed {
        queue: String,
        #[arg(long, default_value_t = 100)]
        limit: usize,
    },
    /// Makes a delayed message (by ID, or every one whose AMQP `message_id` is `--message-id`)
    /// due `--delay-ms` from now or at `--due-ms` (ms since the epoch).
    RescheduleDelayed {
        queue: String,
        #[arg(required_unless_present = "message_id", conflicts_with = "message_id")]
        id: Option<u64>,
        #[arg(long = "message-id")]
        message_id: Option<String>,
        #[arg(long = "delay-ms", conflicts_with = "due_ms", required_unless_present = "due_ms")]
        delay_ms: Option<u64>,
        #[arg(long = "due-ms")]
        due_ms: Option<u64>,
    },
    /// Drops a delayed message before it is due: by ID, or every one whose AMQP `message_id` is
    /// `--message-id`.
    CancelDelayed {
        queue: String,
        #[arg(required_unless_present = "message_id", conflicts_with = "message_id")]
        id: Option<u64>,
        #[arg(long = "message-id")]
        message_id: Option<String>,
    },
    /// Keeps an unacknowledged delivery invisible TIMEOUT_MS more from now (0: visible at once),
    /// by the `x-receipt-handle` header it was delivered with (semantics §4).
    ChangeVisibility { queue: String, receipt_handle: String, timeout_ms: u64 },
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
    /// Sets the user's topic permission on EXCHANGE in the vhost: WRITE and READ patterns on
    /// routing keys (`{username}`, `{vhost}` expanded).
    SetTopicPermissions { username: String, exchange: String, write: String, read: String },
    /// Removes the user's topic permissions in the vhost (only EXCHANGE's when given).
    ClearTopicPermissions { username: String, exchange: Option<String> },
    /// Topic permissions of the vhost: user, exchange, write, read.
    ListTopicPermissions,
    /// Writes the definitions as JSON to a file, or to stdout with `-`.
    ExportDefinitions { path: String },
    /// Reads definitions JSON from a file, or from stdin with `-`.
    ImportDefinitions { path: String },
}

/// `name=value`: an integer value stays an integer (an `x-delay` must be one), anything else is a string.
fn parse_header(text: &str) -> Result<(String, Value), String> {
    let (name, value) = text.split_once('=').ok_or_else(|| format!("expected name=value, got {text:?}"))?;
    let value = value.parse::<i64>().map_or_else(|_| Value::from(value), Value::from);
    Ok((name.to_owned(), value))
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

/// rabbitmqctl list_policies' columns.
const POLICY_COLUMNS: &[&str] = &["vhost", "name", "pattern", "apply-to", "definition", "priority"];

pub fn run(client: &Client, vhost: &str, command: Command, format: &Format) -> anyhow::Result<String> {
    let v = segment(vhost);
    match command {
        Command::Status => node::status(client, format),
        Command::Ping => node::ping(client, format),
        Command::AwaitStartup { timeout } => {
            node::await_startup(client, std::time::Duration::from_secs(timeout))
        }
        Command::Version => Ok(format!("{}\n", env!("CARGO_PKG_VERSION"))),
        Command::Environment => node::environment(client, format),
        Command::AuthenticateUser { username, password } => {
            node::authenticate_user(client, &username, &password, format)
        }
        Command::ClusterStatus => node::cluster_status(client, format),
        Command::SetVmMemoryHighWatermark { value } => {
            node::set_vm_memory_high_watermark(client, &value, format)
        }
        Command::SetDiskFreeLimit { value } => node::set_disk_free_limit(client, &value, format),
        Command::ListQueues { columns } => listing(
            format,
            &format!("Listing queues for vhost {vhost} ..."),
            &client.get(&format!("/api/queues/{v}"))?,
            &columns,
            &["name", "messages"],
            columns::QUEUES,
        ),
        Command::ListExchanges { columns } => listing(
            format,
            &format!("Listing exchanges for vhost {vhost} ..."),
            &client.get(&format!("/api/exchanges/{v}"))?,
            &columns,
            &["name", "type"],
            columns::EXCHANGES,
        ),
        Command::ListBindings { columns } => listing(
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
        Command::ListConnections { columns } => listing(
            format,
            "Listing connections ...",
            &client.get("/api/connections")?,
            &columns,
            &["user", "peer_host", "peer_port", "state"],
            columns::CONNECTIONS,
        ),
        Command::ListUsers => {
            Ok(format.listing("Listing users ...", &client.get("/api/users")?, &[], &["name", "tags"]))
        }
        Command::ListVhosts { columns } => listing(
            format,
            "Listing vhosts ...",
            &client.get("/api/vhosts")?,
            &columns,
            &["name"],
            columns::VHOSTS,
        ),
        Command::ListPermissions => {
            let all = client.get(&format!("/api/vhosts/{v}/permissions"))?;
            Ok(format.listing(
                &format!("Listing permissions for vhost \"{vhost}\" ..."),
                &all,
                &[],
                &["user", "configure", "write", "read"],
            ))
        }
        Command::AddUser { username, password } => {
            // rabbitmqctl refuses to overwrite a user (its password and tags would be lost).
            let path = format!("/api/users/{}", segment(&username));
            if client.exists(&path)? {
                return Err(Refused::UserAlreadyExists(username).into());
            }
            client.put(&path, &json!({"password": password, "tags": ""}))?;
            Ok(format.info(&format!(
                "Adding user \"{username}\" ...\nDone. Don't forget to grant the user permissions to some virtual \
                 hosts! See 'hourglass-ctl help set_permissions' to learn more."
            )))
        }
        Command::DeleteUser { username } => {
            let deleted = client.delete(&format!("/api/users/{}", segment(&username)));
            or_refused(deleted, Refused::NoSuchUser(username.clone()))?;
            Ok(format.info(&format!("Deleting user \"{username}\" ...")))
        }
        Command::AddAccessKey { username } => {
            let path = format!("/api/users/{}/access-keys", segment(&username));
            let key = client.post(&path, &json!({"vhost": vhost}))?;
            let field = |name: &str| key[name].as_str().unwrap_or_default().to_owned();
            Ok(format!(
                "access_key_id\t{}\nsecret_access_key\t{}\n",
                field("access_key_id"),
                field("secret_access_key")
            ))
        }
        Command::ListAccessKeys { username } => {
            let all = client.get(&format!("/api/users/{}/access-keys", segment(&username)))?;
            Ok(format.listing(
                &format!("Listing access keys of user \"{username}\" ..."),
                &all,
                &[],
                &["access_key_id", "vhost", "created_ms"],
            ))
        }
        Command::DeleteAccessKey { username, access_key_id } => {
            client.delete(&format!(
                "/api/users/{}/access-keys/{}",
                segment(&username),
                segment(&access_key_id)
            ))?;
            Ok(String::new())
        }
        Command::ChangePassword { username, password } => {
            let path = format!("/api/users/{}", segment(&username));
            let user = or_refused(client.get(&path), Refused::NoSuchUser(username.clone()))?;
            client.put(&path, &json!({"password": password, "tags": user["tags"]}))?;
            Ok(format.info(&format!("Changing password for user \"{username}\" ...")))
        }
        Command::SetUserTags { username, tags } => {
            let path = format!("/api/users/{}", segment(&username));
            let user = or_refused(client.get(&path), Refused::NoSuchUser(username.clone()))?;
            client.put(&path, &json!({"password_hash": user["password_hash"], "tags": tags}))?;
            Ok(format.info(&format!("Setting tags for user \"{username}\" to [{}] ...", tags.join(", "))))
        }
        Command::SetPermissions { username, configure, write, read } => {
            let body = json!({"configure": configure, "write": write, "read": read});
            client.put(&format!("/api/permissions/{v}/{}", segment(&username)), &body)?;
            Ok(format.info(&format!("Setting permissions for user \"{username}\" in vhost \"{vhost}\" ...")))
        }
        Command::ClearPermissions { username } => {
            client.delete(&format!("/api/permissions/{v}/{}", segment(&username)))?;
            Ok(format.info(&format!("Clearing permissions for user \"{username}\" in vhost \"{vhost}\" ...")))
        }
        Command::AddVhost { vhost } => {
            client.put(&format!("/api/vhosts/{}", segment(&vhost)), &json!({}))?;
            Ok(format.info(&format!("Adding vhost \"{vhost}\" ...")))
        }
        Command::TraceOn => trace(client, vhost, true, format),
        Command::TraceOff => trace(client, vhost, false, format),
        Command::DeleteVhost { vhost } => {
            client.delete(&format!("/api/vhosts/{}", segment(&vhost)))?;
            Ok(format.info(&format!("Deleting vhost \"{vhost}\" ...")))
        }
        Command::PurgeQueue { queue } => {
            let purged = client.delete(&format!("/api/queues/{v}/{}/contents", segment(&queue)));
            or_refused(purged, Refused::NothingToPurge)?;
            Ok(format.info(&format!("Purging queue '{queue}' in vhost '{vhost}' ...")))
        }
        Command::DeleteQueue { queue } => {
            or_refused(client.delete(&format!("/api/queues/{v}/{}", segment(&queue))), Refused::NoSuchQueue)?;
            Ok(format.info(&format!("Deleting queue '{queue}' on vhost '{vhost}' ...")))
        }
        Command::SetPolicy { policy } => {
            let banner = format!("Setting policy \"{}\"", policy.name);
            set_policy(client, &format!("/api/policies/{v}"), vhost, &banner, policy, format)
        }
        Command::SetOperatorPolicy { policy } => {
            let banner = format!("Setting operator policy override \"{}\"", policy.name);
            set_policy(client, &format!("/api/operator-policies/{v}"), vhost, &banner, policy, format)
        }
        Command::ClearPolicy { name } => {
            client.delete(&format!("/api/policies/{v}/{}", segment(&name)))?;
            Ok(format.info(&format!("Clearing policy \"{name}\" on vhost \"{vhost}\" ...")))
        }
        Command::ClearOperatorPolicy { name } => {
            client.delete(&format!("/api/operator-policies/{v}/{}", segment(&name)))?;
            Ok(format.info(&format!("Clearing operator policy \"{name}\" on vhost \"{vhost}\" ...")))
        }
        Command::ListPolicies => Ok(format.listing(
            &format!("Listing policies for vhost \"{vhost}\" ..."),
            &client.get(&format!("/api/policies/{v}"))?,
            &[],
            POLICY_COLUMNS,
        )),
        Command::ListOperatorPolicies => Ok(format.listing(
            &format!("Listing operator policy overrides for vhost \"{vhost}\" ..."),
            &client.get(&format!("/api/operator-policies/{v}"))?,
            &[],
            POLICY_COLUMNS,
        )),
        Command::ListChannels { columns } => listing(
            format,
            "Listing channels ...",
            &client.get("/api/channels")?,
            &columns,
            &["connection", "number", "user", "consumer_count", "messages_unacknowledged"],
            columns::CHANNELS,
        ),
        Command::ListConsumers { columns } => listing(
            format,
            &format!("Listing consumers in vhost {vhost} ..."),
            &client.get(&format!("/api/consumers/{v}"))?,
            &columns,
            &["queue_name", "channel_pid", "consumer_tag", "ack_required", "prefetch_count"],
            columns::CONSUMERS,
        ),
        Command::CloseConnection { name, reason } => {
            connections::close_connection(client, &name, &reason)?;
            Ok(String::new())
        }
        Command::CloseAllConnections(args) => {
            connections::close_all_connections(client, vhost, &args, format)
        }
        Command::PublishMessage { exchange, routing_key, payload, headers } => {
            let exchange = if exchange.is_empty() { "amq.default".to_owned() } else { exchange };
            let headers: serde_json::Map<String, Value> = headers.into_iter().collect();
            let body = json!({
                "routing_key": routing_key,
                "payload": payload,
                "payload_encoding": "string",
                "properties": {"headers": headers},
            });
            let reply = client.post(&format!("/api/exchanges/{v}/{}/publish", segment(&exchange)), &body)?;
            Ok(format!("routed\t{}\n", reply["routed"]))
        }
        Command::ListDelayed { queue, limit } => Ok(format.listing(
            &format!("Listing delayed messages of queue {queue} in vhost {vhost} ..."),
            &client.get(&format!("/api/queues/{v}/{}/delayed?limit={limit}", segment(&queue)))?,
            &[],
            &["id", "due_in_ms", "routing_key", "payload_bytes"],
        )),
        Command::RescheduleDelayed { queue, id, message_id, delay_ms, due_ms } => {
            let body = match (delay_ms, due_ms) {
                (Some(delay), _) => json!({"delay_ms": delay}),
                (None, due) => json!({"due_ms": due}),
            };
            let answer = client.post(&delayed_path(&v, &queue, id, message_id.as_deref()), &body)?;
            Ok(answer.get("rescheduled").map_or_else(String::new, |n| format!("rescheduled\t{n}\n")))
        }
        Command::CancelDelayed { queue, id, message_id } => {
            let answer = client.delete(&delayed_path(&v, &queue, id, message_id.as_deref()))?;
            Ok(answer.get("cancelled").map_or_else(String::new, |n| format!("cancelled\t{n}\n")))
        }
        Command::ChangeVisibility { queue, receipt_handle, timeout_ms } => {
            let body = json!({"receipt_handle": receipt_handle, "timeout_ms": timeout_ms});
            client.post(&format!("/api/queues/{v}/{}/visibility", segment(&queue)), &body)?;
            Ok(String::new())
        }
        Command::SetVhostLimits { definition } => {
            limits::set_vhost_limits(client, vhost, &definition, format)
        }
        Command::ClearVhostLimits => limits::clear_vhost_limits(client, vhost, format),
        Command::ListVhostLimits { global } => limits::list_vhost_limits(client, vhost, global, format),
        Command::SetUserLimits { username, definition } => {
            limits::set_user_limits(client, &username, &definition, format)
        }
        Command::ClearUserLimits { username, limit } => {
            limits::clear_user_limits(client, &username, &limit, format)
        }
        Command::ListUserLimits { user, global } => limits::list_user_limits(client, &user, global, format),
        Command::SetTopicPermissions { username, exchange, write, read } => {
            let body = json!({"exchange": exchange, "write": write, "read": read});
            client.put(&format!("/api/topic-permissions/{v}/{}", segment(&username)), &body)?;
            Ok(format.info(&format!(
                "Setting topic permissions on \"{exchange}\" for user \"{username}\" in vhost \"{vhost}\" ..."
            )))
        }
        Command::ClearTopicPermissions { username, exchange } => {
            let only = exchange.as_ref().map(|x| format!("?exchange={}", segment(x))).unwrap_or_default();
            client.delete(&format!("/api/topic-permissions/{v}/{}{only}", segment(&username)))?;
            let on = exchange.map(|x| format!(" on \"{x}\"")).unwrap_or_default();
            Ok(format.info(&format!(
                "Clearing topic permissions{on} for user \"{username}\" in vhost \"{vhost}\" ..."
            )))
        }
        Command::ListTopicPermissions => Ok(format.listing(
            &format!("Listing topic permissions for vhost \"{vhost}\" ..."),
            &client.get(&format!("/api/vhosts/{v}/topic-permissions"))?,
            &[],
            &["user", "exchange", "write", "read"],
        )),
        Command::ExportDefinitions { path } => {
            let text = serde_json::to_string_pretty(&client.get("/api/definitions")?)?;
            if path == "-" {
                return Ok(format!("{text}\n"));
            }
            std::fs::write(&path, text).with_context(|| format!("writing {path}"))?;
            Ok(format.info(&format!("Exporting definitions in JSON to a file at \"{path}\" ...")))
        }
        Command::ImportDefinitions { path } => {
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

/// The answer, or `refusal` (rabbitmqctl's error for the verb) when the API found nothing.
fn or_refused(answer: anyhow::Result<Value>, refusal: Refused) -> anyhow::Result<Value> {
    answer.map_err(|error| if error.is::<NotFound>() { refusal.into() } else { error })
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

/// A delayed message's path by its id, or the queue's delayed messages by `message_id`.
fn delayed_path(vhost: &str, queue: &str, id: Option<u64>, message_id: Option<&str>) -> String {
    let delayed = format!("/api/queues/{vhost}/{}/delayed", segment(queue));
    match (id, message_id) {
        (Some(id), _) => format!("{delayed}/{id}"),
        (None, message_id) => format!("{delayed}?message_id={}", segment(message_id.unwrap_or_default())),
    }
}
