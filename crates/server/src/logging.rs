//! Log output: `text` (colours only on a terminal, never with `NO_COLOR` set) or `json` (one JSON
//! object per line, for log shippers). `RUST_LOG` filters either; `info` by default.

use std::io::IsTerminal;

use serde::Deserialize;

/// How log lines are written to stdout (`--log-format`, `HOURGLASS_LOG_FORMAT`, `log_format`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// `2026-11-30T17:42:51Z  INFO message key=value`, for people.
    #[default]
    Text,
    /// `{"timestamp":…,"level":"INFO","fields":{"message":…,"key":…}}`, for machines.
    Json,
}

/// Installs the `tracing` subscriber for `format`; a second call does nothing.
pub fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_target(false);
    let _ = match format {
        LogFormat::Text => builder.with_ansi(colours_wanted()).try_init(),
        LogFormat::Json => builder.json().with_ansi(false).try_init(),
    };
}

/// Colours only when a person reads stdout: a terminal, and no `NO_COLOR` (no-color.org: set and
/// not empty turns colours off), so files, pipes and `docker logs` get no escape bytes.
fn colours_wanted() -> bool {
    let no_color = std::env::var_os("NO_COLOR").is_some_and(|value| !value.is_empty());
    !no_color && std::io::stdout().is_terminal()
}
