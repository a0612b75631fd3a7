//! rabbitmqctl's purge_queue and delete_queue, rabbitmqadmin's publish, and Hourglass's verbs
//! for delayed messages and visibility timeouts.

use clap::Subcommand;
use serde_json::{json, Value};

use super::{or_refused, Refused};
use crate::client::{segment, Client};
use crate::output::Format;

/// Queues' messages: purge, delete, publish, delayed messages, visibility.
#[derive(Debug, Subcommand)]
#[command(rename_all = "snake_case")]
pub enum QueueCommand {
    /// Removes every ready message of a queue in the vhost (unacked deliveries stay).
    PurgeQueue { queue: String },
    /// Deletes a queue of the vhost with its messages.
    DeleteQueue { queue: String },
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
}

/// Runs one of these verbs.
pub(super) fn run(
    client: &Client,
    vhost: &str,
    command: QueueCommand,
    format: &Format,
) -> anyhow::Result<String> {
    let v = segment(vhost);
    match command {
        QueueCommand::PurgeQueue { queue } => {
            let purged = client.delete(&format!("/api/queues/{v}/{}/contents", segment(&queue)));
            or_refused(purged, Refused::NothingToPurge)?;
            Ok(format.info(&format!("Purging queue '{queue}' in vhost '{vhost}' ...")))
        }
        QueueCommand::DeleteQueue { queue } => {
            or_refused(client.delete(&format!("/api/queues/{v}/{}", segment(&queue))), Refused::NoSuchQueue)?;
            Ok(format.info(&format!("Deleting queue '{queue}' on vhost '{vhost}' ...")))
        }
        QueueCommand::PublishMessage { exchange, routing_key, payload, headers } => {
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
        QueueCommand::ListDelayed { queue, limit } => Ok(format.listing(
            &format!("Listing delayed messages of queue {queue} in vhost {vhost} ..."),
            &client.get(&format!("/api/queues/{v}/{}/delayed?limit={limit}", segment(&queue)))?,
            &[],
            &["id", "due_in_ms", "routing_key", "payload_bytes"],
        )),
        QueueCommand::RescheduleDelayed { queue, id, message_id, delay_ms, due_ms } => {
            let body = match (delay_ms, due_ms) {
                (Some(delay), _) => json!({"delay_ms": delay}),
                (None, due) => json!({"due_ms": due}),
            };
            let answer = client.post(&delayed_path(&v, &queue, id, message_id.as_deref()), &body)?;
            Ok(answer.get("rescheduled").map_or_else(String::new, |n| format!("rescheduled\t{n}\n")))
        }
        QueueCommand::CancelDelayed { queue, id, message_id } => {
            let answer = client.delete(&delayed_path(&v, &queue, id, message_id.as_deref()))?;
            Ok(answer.get("cancelled").map_or_else(String::new, |n| format!("cancelled\t{n}\n")))
        }
        QueueCommand::ChangeVisibility { queue, receipt_handle, timeout_ms } => {
            let body = json!({"receipt_handle": receipt_handle, "timeout_ms": timeout_ms});
            client.post(&format!("/api/queues/{v}/{}/visibility", segment(&queue)), &body)?;
            Ok(String::new())
        }
    }
}

/// `name=value`: an integer value stays an integer (an `x-delay` must be one), anything else is a string.
fn parse_header(text: &str) -> Result<(String, Value), String> {
    let (name, value) = text.split_once('=').ok_or_else(|| format!("expected name=value, got {text:?}"))?;
    let value = value.parse::<i64>().map_or_else(|_| Value::from(value), Value::from);
    Ok((name.to_owned(), value))
}

/// A delayed message's path by its id, or the queue's delayed messages by `message_id`.
fn delayed_path(vhost: &str, queue: &str, id: Option<u64>, message_id: Option<&str>) -> String {
    let delayed = format!("/api/queues/{vhost}/{}/delayed", segment(queue));
    match (id, message_id) {
        (Some(id), _) => format!("{delayed}/{id}"),
        (None, message_id) => format!("{delayed}?message_id={}", segment(message_id.unwrap_or_default())),
    }
}
