//! The columns each listing verb takes: rabbitmqctl's info keys (as `rabbitmqctl help <verb>`
//! lists them, RabbitMQ 3.10), the API fields Hourglass adds, and any field the listed objects
//! carry. A column outside all three is refused as rabbitmqctl refuses it (exit 64), instead of
//! printing an empty column.

use serde_json::Value;

use super::Refused;

pub const QUEUES: &[&str] = &[
    "arguments",
    "auto_delete",
    "consumer_capacity",
    "consumer_utilisation",
    "consumers",
    "disk_reads",
    "disk_writes",
    "durable",
    "exclusive",
    "exclusive_consumer_pid",
    "exclusive_consumer_tag",
    "head_message_timestamp",
    "leader",
    "members",
    "memory",
    "message_bytes",
    "message_bytes_persistent",
    "message_bytes_ram",
    "message_bytes_ready",
    "message_bytes_unacknowledged",
    "messages",
    "messages_persistent",
    "messages_ram",
    "messages_ready",
    "messages_ready_ram",
    "messages_unacknowledged",
    "messages_unacknowledged_ram",
    "name",
    "online",
    "owner_pid",
    "pid",
    "policy",
    "slave_pids",
    "state",
    "synchronised_slave_pids",
    "type",
    // Hourglass's own.
    "effective_policy_definition",
    "last_expiry_ms",
    "message_bytes_delayed",
    "message_bytes_paged_out",
    "message_stats",
    "messages_dead_lettered",
    "messages_deduplicated",
    "messages_delayed",
    "messages_delayed_on_disk",
    "messages_details",
    "messages_expired",
    "messages_paged_out",
    "messages_ready_details",
    "messages_redelivered",
    "messages_unacknowledged_details",
    "messages_visibility_expired",
    "messages_with_ttl",
    "next_due_ms",
    "next_expiry_ms",
    "node",
    "operator_policy",
    "vhost",
];

pub const EXCHANGES: &[&str] = &[
    "arguments",
    "auto_delete",
    "durable",
    "internal",
    "name",
    "policy",
    "type",
    // Hourglass's own.
    "effective_policy_definition",
    "message_stats",
    "operator_policy",
    "user_who_performed_action",
    "vhost",
];

pub const BINDINGS: &[&str] = &[
    "arguments",
    "destination_kind",
    "destination_name",
    "routing_key",
    "source_kind",
    "source_name",
    // Hourglass's own (the API's names).
    "destination",
    "destination_type",
    "properties_key",
    "source",
    "vhost",
];

pub const CONNECTIONS: &[&str] = &[
    "auth_mechanism",
    "channel_max",
    "channels",
    "client_properties",
    "connected_at",
    "frame_max",
    "host",
    "name",
    "peer_cert_issuer",
    "peer_cert_subject",
    "peer_cert_validity",
    "peer_host",
    "peer_port",
    "pid",
    "port",
    "protocol",
    "recv_cnt",
    "recv_oct",
    "send_cnt",
    "send_oct",
    "send_pend",
    "ssl",
    "ssl_cipher",
    "ssl_hash",
    "ssl_key_exchange",
    "ssl_protocol",
    "state",
    "timeout",
    "user",
    "vhost",
];

pub const CHANNELS: &[&str] = &[
    "acks_uncommitted",
    "confirm",
    "connection",
    "consumer_count",
    "global_prefetch_count",
    "messages_unacknowledged",
    "messages_uncommitted",
    "messages_unconfirmed",
    "name",
    "number",
    "pid",
    "prefetch_count",
    "transactional",
    "user",
    "vhost",
];

pub const CONSUMERS: &[&str] = &[
    "ack_required",
    "active",
    "activity_status",
    "arguments",
    "channel_pid",
    "consumer_tag",
    "prefetch_count",
    "queue_name",
];

pub const VHOSTS: &[&str] = &[
    "cluster_state",
    "default_queue_type",
    "description",
    "name",
    "tags",
    "tracing",
    // Hourglass's own.
    "messages",
    "messages_details",
    "messages_ready",
    "messages_ready_details",
    "messages_unacknowledged",
    "messages_unacknowledged_details",
    "metadata",
];

/// Refuses the columns that are neither in `known` nor a field of one of `items` (a nested path
/// such as `queue.name` by its first part), naming them all as rabbitmqctl does.
pub fn check(columns: &[String], known: &[&str], items: &Value) -> Result<(), Refused> {
    let items = items.as_array().map(Vec::as_slice).unwrap_or_default();
    let unknown: Vec<&str> = columns
        .iter()
        .map(String::as_str)
        .filter(|column| {
            let field = column.split('.').next().unwrap_or(column);
            !known.contains(&field) && !items.iter().any(|item| item.get(field).is_some())
        })
        .collect();
    if unknown.is_empty() {
        Ok(())
    } else {
        Err(Refused::UnknownColumns(unknown.join(", ")))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// rabbitmqctl's keys, Hourglass's fields and the listed objects' fields pass; anything else
    /// is named.
    #[test]
    fn unknown_columns_are_named() {
        let items = json!([{"name": "q", "extra": 1, "queue": {"name": "x"}}]);
        let columns = |names: &[&str]| names.iter().map(|n| (*n).to_owned()).collect::<Vec<_>>();
        assert!(check(&columns(&["name", "messages_delayed", "extra", "queue.name"]), QUEUES, &items).is_ok());
        let refused = check(&columns(&["name", "bogus", "nope.x"]), QUEUES, &items).unwrap_err();
        assert_eq!(refused.to_string(), "Info key(s) bogus, nope.x are not supported");
        assert_eq!(refused.exit_code(), 64);
    }
}
