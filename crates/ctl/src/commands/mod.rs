//! The verbs, named and shaped as rabbitmqctl's.

use clap::Subcommand;
use serde_json::Value;

use crate::client::{Client, NotFound};
use crate::output::Format;

mod access;
mod columns;
mod connections;
mod limits;
mod listings;
mod node;
mod queues;
mod vhosts;

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
    #[command(flatten)]
    Node(node::NodeCommand),
    #[command(flatten)]
    Listings(listings::ListCommand),
    #[command(flatten)]
    Access(access::AccessCommand),
    #[command(flatten)]
    Vhosts(vhosts::VhostCommand),
    #[command(flatten)]
    Limits(limits::LimitCommand),
    #[command(flatten)]
    Queues(queues::QueueCommand),
    #[command(flatten)]
    Connections(connections::ConnectionCommand),
}

/// Runs a verb against the node `client` talks to, in `vhost` (`-p`).
pub fn run(client: &Client, vhost: &str, command: Command, format: &Format) -> anyhow::Result<String> {
    match command {
        Command::Node(command) => node::run(client, vhost, command, format),
        Command::Listings(command) => listings::run(client, vhost, command, format),
        Command::Access(command) => access::run(client, vhost, command, format),
        Command::Vhosts(command) => vhosts::run(client, vhost, command, format),
        Command::Limits(command) => limits::run(client, vhost, command, format),
        Command::Queues(command) => queues::run(client, vhost, command, format),
        Command::Connections(command) => connections::run(client, vhost, command, format),
    }
}

/// The answer, or `refusal` (rabbitmqctl's error for the verb) when the API found nothing.
fn or_refused(answer: anyhow::Result<Value>, refusal: Refused) -> anyhow::Result<Value> {
    answer.map_err(|error| if error.is::<NotFound>() { refusal.into() } else { error })
}
