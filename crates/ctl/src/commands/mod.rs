//! The verbs, named and shaped as rabbitmqctl's.

use anyhow::Context;
use clap::Subcommand;
use serde_json::{json, Value};

use crate::client::{segment, Client};

#[derive(Debug, Subcommand)]
#[command(rename_all = "snake_case")]
pub enum Command {
    /// Queues of the vhost: columns default to `name messages`.
    ListQueues {
        columns: Vec<String>,
    },
    /// Exchanges of the vhost: columns default to `name type`.
    ListExchanges {
        columns: Vec<String>,
    },
    /// Bindings of the vhost: columns default to rabbitmqctl's six.
    ListBindings {
        columns: Vec<String>,
    },
    /// Client connections: columns default to `user peer_host peer_port state`.
    ListConnections {
        columns: Vec<String>,
    },
    ListUsers,
    ListVhosts,
    ListPermissions,
    AddUser {
        username: String,
        password: String,
    },
    DeleteUser {
        username: String,
    },
    ChangePassword {
        username: String,
        password: String,
    },
    /// Replaces the user's tags.
    SetUserTags {
        username: String,
        tags: Vec<String>,
    },
    SetPermissions {
        username: String,
        configure: String,
        write: String,
        read: String,
    },
    ClearPermissions {
        username: String,
    },
    AddVhost {
        vhost: String,
    },
    DeleteVhost {
        vhost: String,
    },
    PurgeQueue {
        queue: String,
    },
    DeleteQueue {
        queue: String,
    },
    /// Writes the definitions as JSON to a file, or to stdout with `-`.
    ExportDefinitions {
        path: String,
    },
    /// Reads definitions JSON from a file, or from stdin with `-`.
    ImportDefinitions {
        path: String,
    },
}

pub fn run(client: &Client, vhost: &str, command: Command) -> anyhow::Result<String> {
    let v = segment(vhost);
    match command {
        Command::ListQueues { columns } => {
            table(client.get(&format!("/api/queues/{v}"))?, &columns, &["name", "messages"])
        }
        Command::ListExchanges { columns } => {
            table(client.get(&format!("/api/exchanges/{v}"))?, &columns, &["name", "type"])
        }
        Command::ListBindings { columns } => table(
            client.get(&format!("/api/bindings/{v}"))?,
            &columns,
            &[
                "source_name",
                "source_kind",
                "destination_name",
                "destination_kind",
                "routing_key",
                "arguments",
            ],
        ),
        Command::ListConnections { columns } => {
            table(client.get("/api/connections")?, &columns, &["user", "peer_host", "peer_port", "state"])
        }
        Command::ListUsers => table(client.get("/api/users")?, &[], &["name", "tags"]),
        Command::ListVhosts => table(client.get("/api/vhosts")?, &[], &["name"]),
        Command::ListPermissions => {
            let all = client.get(&format!("/api/vhosts/{v}/permissions"))?;
            table(all, &[], &["user", "configure", "write", "read"])
        }
        Command::AddUser { username, password } => {
            client.put(
                &format!("/api/users/{}", segment(&username)),
                &json!({"password": password, "tags": ""}),
            )?;
            Ok(String::new())
        }
        Command::DeleteUser { username } => {
            client.delete(&format!("/api/users/{}", segment(&username)))?;
            Ok(String::new())
        }
        Command::ChangePassword { username, password } => {
            let path = format!("/api/users/{}", segment(&username));
            let user = client.get(&path)?;
            client.put(&path, &json!({"password": password, "tags": user["tags"]}))?;
            Ok(String::new())
        }
        Command::SetUserTags { username, tags } => {
            let path = format!("/api/users/{}", segment(&username));
            let user = client.get(&path)?;
            client.put(&path, &json!({"password_hash": user["password_hash"], "tags": tags}))?;
            Ok(String::new())
        }
        Command::SetPermissions { username, configure, write, read } => {
            let body = json!({"configure": configure, "write": write, "read": read});
            client.put(&format!("/api/permissions/{v}/{}", segment(&username)), &body)?;
            Ok(String::new())
        }
        Command::ClearPermissions { username } => {
            client.delete(&format!("/api/permissions/{v}/{}", segment(&username)))?;
            Ok(String::new())
        }
        Command::AddVhost { vhost } => {
            client.put(&format!("/api/vhosts/{}", segment(&vhost)), &json!({}))?;
            Ok(String::new())
        }
        Command::DeleteVhost { vhost } => {
            client.delete(&format!("/api/vhosts/{}", segment(&vhost)))?;
            Ok(String::new())
        }
        Command::PurgeQueue { queue } => {
            client.delete(&format!("/api/queues/{v}/{}/contents", segment(&queue)))?;
            Ok(String::new())
        }
        Command::DeleteQueue { queue } => {
            client.delete(&format!("/api/queues/{v}/{}", segment(&queue)))?;
            Ok(String::new())
        }
        Command::ExportDefinitions { path } => {
            let text = serde_json::to_string_pretty(&client.get("/api/definitions")?)?;
            if path == "-" {
                return Ok(format!("{text}\n"));
            }
            std::fs::write(&path, text).with_context(|| format!("writing {path}"))?;
            Ok(String::new())
        }
        Command::ImportDefinitions { path } => {
            let text = if path == "-" {
                std::io::read_to_string(std::io::stdin())?
            } else {
                std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))?
            };
            let body: Value = serde_json::from_str(&text).context("parsing definitions JSON")?;
            client.post("/api/definitions", &body)?;
            Ok(String::new())
        }
    }
}

/// One tab-separated line per item.
fn table(items: Value, columns: &[String], default: &[&str]) -> anyhow::Result<String> {
    let columns: Vec<&str> =
        if columns.is_empty() { default.to_vec() } else { columns.iter().map(String::as_str).collect() };
    let mut out = String::new();
    for item in items.as_array().map(Vec::as_slice).unwrap_or_default() {
        let cells: Vec<String> = columns.iter().map(|c| cell(item, c)).collect();
        out.push_str(&cells.join("\t"));
        out.push('\n');
    }
    Ok(out)
}

/// A column by rabbitmqctl's name, mapped to the API's field where they differ.
fn cell(item: &Value, column: &str) -> String {
    let value = match column {
        "source_name" => &item["source"],
        "destination_name" => &item["destination"],
        "destination_kind" => &item["destination_type"],
        "source_kind" => return "exchange".to_owned(),
        other => &item[other],
    };
    match value {
        Value::Null => String::new(),
        Value::String(s) => s.clone(),
        Value::Array(a) => {
            let parts: Vec<String> =
                a.iter().map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_owned)).collect();
            format!("[{}]", parts.join(", "))
        }
        other => other.to_string(),
    }
}
