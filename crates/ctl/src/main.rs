//! hourglass-ctl: rabbitmqctl's verbs over the Hourglass management HTTP API.
//!
//! Output is tab-separated like `rabbitmqctl -q`: one line per object, the requested columns in
//! order (rabbitmqctl's default columns when none are given).

mod client;
mod commands;
mod output;

use std::process::ExitCode;

use clap::error::{ContextKind, ContextValue, ErrorKind};
use clap::Parser;

#[derive(Debug, Parser)]
#[command(name = "hourglass-ctl", version, about = "Manage a Hourglass broker over its HTTP API")]
struct Cli {
    /// Base URL of the management API.
    #[arg(long, env = "HOURGLASS_CTL_URL", default_value = "http://127.0.0.1:15672")]
    url: String,
    #[arg(long, env = "HOURGLASS_CTL_USER", default_value = "guest")]
    user: String,
    #[arg(long, env = "HOURGLASS_CTL_PASSWORD", default_value = "guest")]
    password: String,
    /// Virtual host for the commands that take one.
    #[arg(short = 'p', long, default_value = "/", global = true)]
    vhost: String,
    /// No informational lines, only results (rabbitmqctl's -q; -s is the same).
    #[arg(short = 'q', long, visible_short_alias = 's', visible_alias = "silent", global = true)]
    quiet: bool,
    /// How results are printed: `table` (tab-separated under a header row), `pretty_table` (in
    /// drawn boxes) or `json`.
    #[arg(long, value_enum, default_value_t = output::Formatter::Table, global = true)]
    formatter: output::Formatter,
    /// Listings without their header row.
    #[arg(long, global = true)]
    no_table_headers: bool,
    #[command(subcommand)]
    command: commands::Command,
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(error) => return usage_error(&error),
    };
    let client = client::Client::new(&cli.url, &cli.user, &cli.password);
    let format =
        output::Format { formatter: cli.formatter, quiet: cli.quiet, no_headers: cli.no_table_headers };
    match commands::run(&client, &cli.vhost, cli.command, &format) {
        Ok(output) => {
            print!("{output}");
            ExitCode::SUCCESS
        }
        Err(error) => match error.downcast_ref::<commands::Refused>() {
            Some(refused) => {
                eprintln!("{}", refused.report());
                ExitCode::from(refused.exit_code())
            }
            None => {
                eprintln!("Error: {error:#}");
                ExitCode::from(2)
            }
        },
    }
}

/// A command line that does not parse, answered as rabbitmqctl answers it: help and version on
/// stdout with 0; an unknown verb named, and any other usage error, with EX_USAGE (64).
fn usage_error(error: &clap::Error) -> ExitCode {
    match error.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => {
            let _ = error.print();
            ExitCode::SUCCESS
        }
        ErrorKind::InvalidSubcommand => {
            let verb = match error.get(ContextKind::InvalidSubcommand) {
                Some(ContextValue::String(verb)) => verb.clone(),
                _ => String::new(),
            };
            eprintln!("Command '{verb}' not found. \n\nRun 'hourglass-ctl help' for the list of commands.");
            ExitCode::from(64)
        }
        _ => {
            let _ = error.print();
            ExitCode::from(64)
        }
    }
}
