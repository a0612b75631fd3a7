//! rabbitmqctl's `close_all_connections [-p VHOST] [--global] [--per-connection-delay MS]
//! [--limit N] EXPLANATION`: every client connection of one vhost (or of every vhost with
//! `--global`) closed with the explanation as its reason, one at a time over
//! `DELETE /api/connections/NAME`.

use clap::Subcommand;
use std::time::Duration;

use serde_json::Value;

use crate::client::{segment, Client};
use crate::output::Format;

/// What `close_all_connections` was asked to close, and how.
#[derive(Debug, clap::Args)]
pub struct CloseAllArgs {
    /// Every vhost's connections (`-p` is then ignored).
    #[arg(long)]
    global: bool,
    /// Milliseconds to wait after each close (spreads the reconnects of many clients).
    #[arg(long, default_value_t = 0)]
    per_connection_delay: u64,
    /// At most this many connections (0: all). Ignored with `--global`, as rabbitmqctl does.
    #[arg(long, default_value_t = 0)]
    limit: usize,
    /// The reason the clients are given.
    explanation: String,
}

pub(super) fn close_all_connections(
    client: &Client,
    vhost: &str,
    args: &CloseAllArgs,
    format: &Format,
) -> anyhow::Result<String> {
    let (listed, limit, banner) = if args.global {
        (client.get("/api/connections")?, usize::MAX, "Closing all connections to the node".to_owned())
    } else {
        let limit = if args.limit == 0 { usize::MAX } else { args.limit };
        let banner = format!("Closing all connections in vhost {vhost} (limit: {})", args.limit);
        (client.get(&format!("/api/vhosts/{}/connections", segment(vhost)))?, limit, banner)
    };
    let names: Vec<&str> = listed
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .filter_map(|connection| connection.get("name").and_then(Value::as_str))
        .take(limit)
        .collect();
    let mut closed = 0;
    for name in names {
        match close_connection(client, name, &args.explanation) {
            Ok(()) => closed += 1,
            // A connection that ended since the listing is already what was asked for.
            Err(_) if !client.exists(&connection_path(name))? => {}
            Err(error) => return Err(error),
        }
        if args.per_connection_delay > 0 {
            std::thread::sleep(Duration::from_millis(args.per_connection_delay));
        }
    }
    let mut out = format.info(&banner);
    out.push_str(&format.info(&format!("Closed {closed} connection(s)")));
    Ok(out)
}

/// `close_connection NAME EXPLANATION`.
pub(super) fn close_connection(client: &Client, name: &str, explanation: &str) -> anyhow::Result<()> {
    client.delete_with_reason(&connection_path(name), explanation)?;
    Ok(())
}

fn connection_path(name: &str) -> String {
    format!("/api/connections/{}", segment(name))
}

/// Closing connections.
#[derive(Debug, Subcommand)]
#[command(rename_all = "snake_case")]
pub enum ConnectionCommand {
    /// Closes a connection (by its name, as list_connections' `name` column shows it).
    CloseConnection {
        name: String,
        #[arg(default_value = "Closed via hourglass-ctl")]
        reason: String,
    },
    /// Closes every client connection of the vhost (`--global`: of every vhost), giving them
    /// the explanation.
    CloseAllConnections(CloseAllArgs),
}

/// Runs one of these verbs.
pub(super) fn run(
    client: &Client,
    vhost: &str,
    command: ConnectionCommand,
    format: &Format,
) -> anyhow::Result<String> {
    match command {
        ConnectionCommand::CloseConnection { name, reason } => {
            close_connection(client, &name, &reason)?;
            Ok(String::new())
        }
        ConnectionCommand::CloseAllConnections(args) => close_all_connections(client, vhost, &args, format),
    }
}
