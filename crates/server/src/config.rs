//! Server settings: command line, environment (`HOURGLASS_*`), TOML file, defaults — in that
//! order of precedence. Every default lives here with the reason for its value.

use std::net::IpAddr;
use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::Parser;
use serde::Deserialize;

/// RabbitMQ's AMQP port, so existing clients connect unchanged.
pub const DEFAULT_AMQP_PORT: u16 = 5672;
/// RabbitMQ's management plugin port.
pub const DEFAULT_HTTP_PORT: u16 = 15672;
/// RabbitMQ's Prometheus plugin port.
pub const DEFAULT_METRICS_PORT: u16 = 15692;
/// Listen on every interface, as RabbitMQ does (guest stays loopback-only regardless).
pub const DEFAULT_BIND: &str = "0.0.0.0";
pub const DEFAULT_DATA_DIR: &str = "./data";
/// RabbitMQ's default: publishers are blocked past 40 % of the machine's memory.
pub const DEFAULT_VM_MEMORY_HIGH_WATERMARK: f64 = 0.4;
/// RabbitMQ's `loopback_users` default: guest/guest works only from the local machine, so a
/// broker reachable from the network is not open to the well-known password.
pub const DEFAULT_LOOPBACK_USERS: &[&str] = &["guest"];

/// Command-line flags; each is also read from the environment variable shown.
#[derive(Debug, Default, Parser)]
#[command(
    name = "hourglass",
    version,
    about = "A RabbitMQ-compatible AMQP 0-9-1 broker with exact TTL, delays and visibility timeouts"
)]
pub struct Cli {
    /// Address to listen on.
    #[arg(long, env = "HOURGLASS_BIND")]
    pub bind: Option<IpAddr>,
    /// AMQP 0-9-1 port.
    #[arg(long, env = "HOURGLASS_AMQP_PORT")]
    pub amqp_port: Option<u16>,
    /// Management HTTP API port.
    #[arg(long, env = "HOURGLASS_HTTP_PORT")]
    pub http_port: Option<u16>,
    /// Prometheus metrics port.
    #[arg(long, env = "HOURGLASS_METRICS_PORT")]
    pub metrics_port: Option<u16>,
    /// Directory for durable data.
    #[arg(long, env = "HOURGLASS_DATA_DIR")]
    pub data_dir: Option<PathBuf>,
    /// Users that may log in only from loopback, comma-separated; `none` for nobody
    /// (RabbitMQ's `loopback_users`).
    #[arg(long, env = "HOURGLASS_LOOPBACK_USERS", value_delimiter = ',')]
    pub loopback_users: Option<Vec<String>>,
    /// Fraction of the machine's memory above which publishers are blocked (RabbitMQ's
    /// `vm_memory_high_watermark`).
    #[arg(long, env = "HOURGLASS_VM_MEMORY_HIGH_WATERMARK")]
    pub vm_memory_high_watermark: Option<f64>,
    /// Let a `delay` header delay a message on any exchange (ApsaraMQ for RabbitMQ's interface).
    #[arg(long, env = "HOURGLASS_APSARAMQ_DELAY_HEADER")]
    pub apsaramq_delay_header: Option<bool>,
    /// A definitions file (RabbitMQ's export format) imported at start (RabbitMQ's `load_definitions`).
    #[arg(long, env = "HOURGLASS_LOAD_DEFINITIONS")]
    pub load_definitions: Option<PathBuf>,
    /// TOML configuration file.
    #[arg(long, env = "HOURGLASS_CONFIG")]
    pub config: Option<PathBuf>,
}

/// The same settings as they may appear in the TOML file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    pub bind: Option<IpAddr>,
    pub amqp_port: Option<u16>,
    pub http_port: Option<u16>,
    pub metrics_port: Option<u16>,
    pub data_dir: Option<PathBuf>,
    /// A list of user names, or `[]` / `["none"]` for none.
    pub loopback_users: Option<Vec<String>>,
    pub vm_memory_high_watermark: Option<f64>,
    pub apsaramq_delay_header: Option<bool>,
    pub load_definitions: Option<PathBuf>,
}

/// Resolved settings.
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    pub bind: IpAddr,
    pub amqp_port: u16,
    pub http_port: u16,
    pub metrics_port: u16,
    pub data_dir: PathBuf,
    pub loopback_users: Vec<String>,
    pub vm_memory_high_watermark: f64,
    pub apsaramq_delay_header: bool,
    pub load_definitions: Option<PathBuf>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            bind: DEFAULT_BIND.parse().unwrap_or(IpAddr::from([0, 0, 0, 0])),
            amqp_port: DEFAULT_AMQP_PORT,
            http_port: DEFAULT_HTTP_PORT,
            metrics_port: DEFAULT_METRICS_PORT,
            data_dir: PathBuf::from(DEFAULT_DATA_DIR),
            loopback_users: DEFAULT_LOOPBACK_USERS.iter().map(|u| (*u).to_owned()).collect(),
            vm_memory_high_watermark: DEFAULT_VM_MEMORY_HIGH_WATERMARK,
            apsaramq_delay_header: false,
            load_definitions: None,
        }
    }
}

impl Config {
    /// Merges flags/environment over the file (if any) over the defaults.
    pub fn resolve(cli: Cli) -> anyhow::Result<Config> {
        let file = match &cli.config {
            Some(path) => load_file(path)?,
            None => FileConfig::default(),
        };
        let defaults = Config::default();
        Ok(Config {
            bind: cli.bind.or(file.bind).unwrap_or(defaults.bind),
            amqp_port: cli.amqp_port.or(file.amqp_port).unwrap_or(defaults.amqp_port),
            http_port: cli.http_port.or(file.http_port).unwrap_or(defaults.http_port),
            metrics_port: cli.metrics_port.or(file.metrics_port).unwrap_or(defaults.metrics_port),
            data_dir: cli.data_dir.or(file.data_dir).unwrap_or(defaults.data_dir),
            loopback_users: cli
                .loopback_users
                .or(file.loopback_users)
                .map(|users| {
                    users
                        .into_iter()
                        .map(|u| u.trim().to_owned())
                        .filter(|u| !u.is_empty() && u != "none")
                        .collect()
                })
                .unwrap_or(defaults.loopback_users),
            vm_memory_high_watermark: cli
                .vm_memory_high_watermark
                .or(file.vm_memory_high_watermark)
                .unwrap_or(defaults.vm_memory_high_watermark),
            apsaramq_delay_header: cli
                .apsaramq_delay_header
                .or(file.apsaramq_delay_header)
                .unwrap_or(defaults.apsaramq_delay_header),
            load_definitions: cli.load_definitions.or(file.load_definitions),
        })
    }
}

fn load_file(path: &Path) -> anyhow::Result<FileConfig> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading config file {}", path.display()))?;
    toml::from_str(&text).with_context(|| format!("parsing config file {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Flags beat the file, the file beats the defaults.
    #[test]
    fn flags_override_file_override_defaults() {
        let dir = std::env::temp_dir().join(format!("hourglass-config-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("hourglass.toml");
        std::fs::write(&path, "amqp_port = 6000\nhttp_port = 6001\n").unwrap();
        let cli = Cli { amqp_port: Some(7000), config: Some(path), ..Cli::default() };
        let config = Config::resolve(cli).unwrap();
        assert_eq!(config.amqp_port, 7000);
        assert_eq!(config.http_port, 6001);
        assert_eq!(config.metrics_port, DEFAULT_METRICS_PORT);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// `none` (RabbitMQ's spelling) and an empty list both mean no loopback-only users.
    #[test]
    fn loopback_users_none_means_nobody() {
        let cli = Cli { loopback_users: Some(vec!["none".into()]), ..Cli::default() };
        assert!(Config::resolve(cli).unwrap().loopback_users.is_empty());
        let file: FileConfig = toml::from_str("loopback_users = []").unwrap();
        assert_eq!(file.loopback_users, Some(vec![]));
        assert_eq!(Config::default().loopback_users, vec!["guest".to_owned()]);
    }

    /// A misspelt option in the file is an error, not silently ignored.
    #[test]
    fn unknown_file_option_is_refused() {
        assert!(toml::from_str::<FileConfig>("amqp_prot = 1").is_err());
    }
}
