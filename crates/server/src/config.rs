//! Server settings: command line, environment (`HOURGLASS_*`), TOML file, defaults — in that
//! order of precedence. Every default lives here with the reason for its value.

use std::net::IpAddr;
use std::num::{NonZeroU32, NonZeroUsize};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use hourglass_broker::consumer_timeout::{ConsumerTimeoutConfig, TimeoutResponse};
use hourglass_broker::queue::DeliveryCounting;
use hourglass_broker::PagingLimits;
use hourglass_mgmt::HttpLimits;
use serde::Deserialize;

pub use crate::logging::LogFormat;

pub mod cluster;
mod default_user;
mod tls;

use default_user::logins;
pub use default_user::DefaultUser;

pub use tls::TlsSettings;

/// RabbitMQ's AMQP port, so existing clients connect unchanged.
pub const DEFAULT_AMQP_PORT: u16 = 5672;
/// RabbitMQ's management plugin port.
pub const DEFAULT_HTTP_PORT: u16 = 15672;
/// RabbitMQ's Prometheus plugin port.
pub const DEFAULT_METRICS_PORT: u16 = 15692;
/// RabbitMQ's AMQPS port (`listeners.ssl.default`), used when TLS is configured.
pub const DEFAULT_AMQPS_PORT: u16 = 5671;
/// RabbitMQ's management plugin HTTPS port (`management.ssl.port`).
pub const DEFAULT_HTTPS_PORT: u16 = 15671;
/// RabbitMQ's Prometheus plugin TLS port (`prometheus.ssl.port`).
pub const DEFAULT_METRICS_TLS_PORT: u16 = 15691;
/// Listen on every interface, IPv6 and IPv4 on one socket (`::`, `IPV6_V6ONLY` off), as RabbitMQ
/// does; `0.0.0.0` on a machine without IPv6 (`listen::resolve_bind`). guest stays loopback-only.
pub const DEFAULT_BIND: Bind = Bind::DualStack;
pub const DEFAULT_DATA_DIR: &str = "./data";
/// RabbitMQ's default: publishers are blocked past 40 % of the machine's memory.
pub const DEFAULT_VM_MEMORY_HIGH_WATERMARK: f64 = 0.4;
/// RabbitMQ's default `disk_free_limit`: publishers are blocked when less than 50 MB is free.
pub const DEFAULT_DISK_FREE_LIMIT: u64 = 50_000_000;
/// RabbitMQ's `loopback_users` default: guest/guest works only from the local machine, so a
/// broker reachable from the network is not open to the well-known password.
pub const DEFAULT_LOOPBACK_USERS: &[&str] = &["guest"];
/// How long the answer to the first refused login from an address is held (each further one
/// from it doubles the hold, up to 5 s: `hourglass_session::LoginLimiter`). 200 ms is not felt by
/// a person who mistyped once and makes a guesser that waits for answers manage a dozen guesses
/// a minute per connection after a few tries. 0 turns the slowdown off. RabbitMQ has none.
pub const DEFAULT_LOGIN_FAILURE_DELAY_MS: u64 = 200;
/// How long a write to a client's socket may make no progress before the connection is closed:
/// RabbitMQ's `tcp_listen_options.send_timeout` default (15 s). A client that stopped reading
/// (its TCP window full) would otherwise keep its connection, its unacked messages and its
/// consumers for ever, and its own connection.close could not complete.
pub const DEFAULT_TCP_SEND_TIMEOUT_MS: u64 = 15_000;
/// HTTP listeners: how long a socket may go without sending a whole request head once the
/// server is ready for one — a new socket, or a kept-alive one after its last response. Cowboy's
/// `request_timeout` default, which RabbitMQ's management listener keeps: idle and trickling
/// sockets are closed after 5 s, so they cannot pile up and eat the process's file descriptors.
pub const DEFAULT_HTTP_REQUEST_TIMEOUT_MS: u64 = 5_000;
/// HTTP listeners: how long a request body may take to arrive in full. Cowboy's `idle_timeout`
/// default (60 s); a 20 MB definitions file needs only ~340 kB/s to make it.
pub const DEFAULT_HTTP_BODY_TIMEOUT_MS: u64 = 60_000;
/// HTTP listeners: the largest request body — RabbitMQ's `management.http.max_body_size` default
/// (20,000,000 bytes): a 100,000-queue definitions export (~13 MB) fits.
pub const DEFAULT_HTTP_MAX_BODY_BYTES: u64 = 20_000_000;
/// HTTP listeners: open sockets per listener (management and metrics each) — ranch's default
/// `max_connections`, which RabbitMQ's management listener inherits. Beyond it new sockets get
/// 503 and are closed; at most ~1,024 × 20 MB of bodies can be buffered at once.
pub const DEFAULT_HTTP_MAX_CONNECTIONS: usize = 1_024;
/// AMQP connections (counted from accept, so sockets still in the 10 s handshake count too).
/// RabbitMQ has no limit but the file-descriptor table; ours is explicit so that it, not the fd
/// table, is what a flood hits — and the HTTP API and the store keep their descriptors. It is
/// lowered at start to what the process's fd limit leaves room for (see [`FD_RESERVE`]).
pub const DEFAULT_MAX_CONNECTIONS: usize = 100_000;
/// The largest message body a client may publish: RabbitMQ's `max_message_size` default
/// (128 MiB). A larger one closes its channel with 406 before any of its body is buffered.
pub const DEFAULT_MAX_MESSAGE_SIZE: u64 = hourglass_session::DEFAULT_MAX_MESSAGE_SIZE;
/// The most `--max-message-size` may be: RabbitMQ's hard `?MAX_MSG_SIZE` (512 MiB), past which
/// it ignores the setting; we refuse to start instead, so the operator knows.
pub const MAX_MESSAGE_SIZE_LIMIT: u64 = hourglass_session::MAX_MESSAGE_SIZE_LIMIT;
/// Channels per connection offered in connection.tune: RabbitMQ's `channel_max` default (2047).
/// 0 means no limit (65,535 channel numbers), as in RabbitMQ.
pub const DEFAULT_CHANNEL_MAX: u16 = hourglass_session::DEFAULT_CHANNEL_MAX;
/// The largest frame offered in connection.tune: RabbitMQ's `frame_max` default (128 KiB).
pub const DEFAULT_FRAME_MAX: u32 = hourglass_session::DEFAULT_FRAME_MAX;
/// The smallest `--frame-max`: AMQP 0-9-1's minimum frame size (4096, RabbitMQ's
/// `?FRAME_MIN_SIZE`); a client asking for less in tune-ok gets 530 as from RabbitMQ.
pub const FRAME_MAX_MIN: u32 = 4_096;
/// The largest `--frame-max`: 1 MiB. Each connection may buffer a whole frame, and larger frames
/// save nothing (a body is split into frames anyway). RabbitMQ has no cap (0 = unlimited); we
/// refuse 0 and anything above this.
pub const FRAME_MAX_MAX: u32 = 1 << 20;
/// File descriptors kept out of the AMQP connection limit: the HTTP listeners' sockets (their own
/// limits), the store's segment and snapshot files, the listeners themselves, logs.
pub const FD_RESERVE: u64 = 256;

/// Command-line flags; each is also read from the environment variable shown.
#[derive(Debug, Default, Parser)]
#[command(
    name = "hourglass",
    version,
    about = "A RabbitMQ-compatible AMQP 0-9-1 broker with exact TTL, delays and visibility timeouts"
)]
pub struct Cli {
    /// Address to listen on; default `::` (IPv6 and IPv4), `0.0.0.0` where there is no IPv6.
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
    /// Serve Amazon SQS's API on this port (docs/sqs.md); off unless set.
    #[arg(long, env = "HOURGLASS_SQS_PORT")]
    pub sqs_port: Option<u16>,
    /// SQS long polls one access key, and one source address, may have waiting at once
    /// (docs/limits.md); past it a long poll is answered RequestThrottled at once.
    #[arg(long, env = "HOURGLASS_SQS_MAX_LONG_POLLS")]
    pub sqs_max_long_polls: Option<usize>,
    /// The key that seals access keys' secrets, outside the data directory; made there when
    /// missing (docs/sqs.md). Without it only the guest key exists.
    #[arg(long, env = "HOURGLASS_SECRETS_KEY_FILE")]
    pub secrets_key_file: Option<PathBuf>,
    /// Serve plain (non-TLS) AMQP on `--amqp-port`; `false` leaves only AMQPS.
    #[arg(long, env = "HOURGLASS_PLAIN_AMQP")]
    pub plain_amqp: Option<bool>,
    /// Serve the management API over plain HTTP on `--http-port`; `false` leaves only HTTPS.
    #[arg(long, env = "HOURGLASS_PLAIN_HTTP")]
    pub plain_http: Option<bool>,
    /// Serve Prometheus metrics over plain HTTP on `--metrics-port`; `false` leaves only TLS.
    #[arg(long, env = "HOURGLASS_PLAIN_METRICS")]
    pub plain_metrics: Option<bool>,
    /// The server's certificate chain (PEM, leaf first); with --tls-key it turns TLS on.
    #[arg(long, env = "HOURGLASS_TLS_CERT")]
    pub tls_cert: Option<PathBuf>,
    /// The server's private key (PEM: PKCS#8, PKCS#1 or SEC1).
    #[arg(long, env = "HOURGLASS_TLS_KEY")]
    pub tls_key: Option<PathBuf>,
    /// CA certificates (PEM) client certificates must chain to (RabbitMQ's `cacertfile`).
    #[arg(long, env = "HOURGLASS_TLS_CA")]
    pub tls_ca: Option<PathBuf>,
    /// Ask AMQPS clients for a certificate and verify it against --tls-ca (`verify_peer`).
    #[arg(long, env = "HOURGLASS_TLS_VERIFY_PEER")]
    pub tls_verify_peer: Option<bool>,
    /// With --tls-verify-peer: refuse AMQPS clients without a certificate
    /// (`fail_if_no_peer_cert`).
    #[arg(long, env = "HOURGLASS_TLS_FAIL_IF_NO_PEER_CERT")]
    pub tls_fail_if_no_peer_cert: Option<bool>,
    /// Offer SASL EXTERNAL to AMQPS clients with a verified certificate: its subject's CN is
    /// the user, no password (RabbitMQ's rabbitmq_auth_mechanism_ssl).
    #[arg(long, env = "HOURGLASS_TLS_EXTERNAL_AUTH")]
    pub tls_external_auth: Option<bool>,
    /// AMQPS port (default 5671 when TLS is configured).
    #[arg(long, env = "HOURGLASS_AMQPS_PORT")]
    pub amqps_port: Option<u16>,
    /// Management API HTTPS port (default 15671 when TLS is configured).
    #[arg(long, env = "HOURGLASS_HTTPS_PORT")]
    pub https_port: Option<u16>,
    /// Prometheus over TLS port (default 15691 when TLS is configured).
    #[arg(long, env = "HOURGLASS_METRICS_TLS_PORT")]
    pub metrics_tls_port: Option<u16>,
    /// The SQS endpoint over TLS (HTTPS) on this port, with the same certificate (docs/sqs.md);
    /// off unless set.
    #[arg(long, env = "HOURGLASS_SQS_TLS_PORT")]
    pub sqs_tls_port: Option<u16>,
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
    /// Free space on the data directory's file system under which publishers are blocked, in
    /// RabbitMQ's units (`50MB`, `2GB`, `1GiB`, `512000000`) — RabbitMQ's `disk_free_limit.absolute`.
    #[arg(long, env = "HOURGLASS_DISK_FREE_LIMIT")]
    pub disk_free_limit: Option<String>,
    /// The same limit as a multiple of the machine's memory (`disk_free_limit.relative`); beats
    /// the absolute limit when both are given.
    #[arg(long, env = "HOURGLASS_DISK_FREE_LIMIT_RELATIVE")]
    pub disk_free_limit_relative: Option<f64>,
    /// Let a `delay` header delay a message on any exchange (ApsaraMQ for RabbitMQ's interface).
    #[arg(long, env = "HOURGLASS_APSARAMQ_DELAY_HEADER")]
    pub apsaramq_delay_header: Option<bool>,
    /// How long a delivery may wait for its ack when neither its consumer nor its queue says
    /// (RabbitMQ's `consumer_timeout`): milliseconds, or `none` for never.
    #[arg(long, env = "HOURGLASS_CONSUMER_TIMEOUT")]
    pub consumer_timeout: Option<String>,
    /// What a consumer whose delivery timed out hears (RabbitMQ 4.4's
    /// `consumer_timeout_response`): `notify_consumer` or `close_channel`.
    #[arg(long, env = "HOURGLASS_CONSUMER_TIMEOUT_RESPONSE")]
    pub consumer_timeout_response: Option<String>,
    /// Which returns count toward `x-delivery-limit`: `every_return` (RabbitMQ 3.x and 4.0–4.2)
    /// or `failures_only` (RabbitMQ 4.3: basic.nack with requeue does not count).
    #[arg(long, env = "HOURGLASS_DELIVERY_COUNTING")]
    pub delivery_counting: Option<String>,
    /// Delayed messages that fell due while the broker was down are released at most this many
    /// a second after a restart or failover, in due order (0: all at once, the default).
    #[arg(long, env = "HOURGLASS_OVERDUE_RELEASE_RATE")]
    pub overdue_release_rate: Option<u32>,
    /// The `product` connection.start names (clients such as kombu choose RabbitMQ's semantics
    /// by it; ADR 0009).
    #[arg(long, env = "HOURGLASS_SERVER_PRODUCT")]
    pub server_product: Option<String>,
    /// A definitions file (RabbitMQ's export format) imported at start (RabbitMQ's `load_definitions`).
    #[arg(long, env = "HOURGLASS_LOAD_DEFINITIONS")]
    pub load_definitions: Option<PathBuf>,
    /// Persistent messages a durable queue keeps in memory; past this, stored messages keep only
    /// their location until they near the head of the queue (ADR 0007).
    #[arg(long, env = "HOURGLASS_QUEUE_RESIDENT_MESSAGES")]
    pub queue_resident_messages: Option<usize>,
    /// The same limit on body bytes (`64MiB`, RabbitMQ's size units).
    #[arg(long, env = "HOURGLASS_QUEUE_RESIDENT_BYTES")]
    pub queue_resident_bytes: Option<String>,
    /// Hold (ms) of the first refused login from an address; doubles per failure, 0: off.
    #[arg(long, env = "HOURGLASS_LOGIN_FAILURE_DELAY_MS")]
    pub login_failure_delay_ms: Option<u64>,
    /// Close a connection whose socket write makes no progress for this long (ms).
    #[arg(long, env = "HOURGLASS_TCP_SEND_TIMEOUT_MS")]
    pub tcp_send_timeout_ms: Option<u64>,
    /// Threads that run connections, the broker and the HTTP listeners (default: one per CPU).
    /// 1 spends the least CPU per message; more serve more connections at once.
    #[arg(long, env = "HOURGLASS_WORKER_THREADS")]
    pub worker_threads: Option<usize>,
    /// HTTP listeners: ms a socket may take to send a whole request head (also the idle
    /// keep-alive timeout).
    #[arg(long, env = "HOURGLASS_HTTP_REQUEST_TIMEOUT_MS")]
    pub http_request_timeout_ms: Option<u64>,
    /// HTTP listeners: ms a request body may take to arrive.
    #[arg(long, env = "HOURGLASS_HTTP_BODY_TIMEOUT_MS")]
    pub http_body_timeout_ms: Option<u64>,
    /// HTTP listeners: largest request body (`20MB`; RabbitMQ's `management.http.max_body_size`).
    #[arg(long, env = "HOURGLASS_HTTP_MAX_BODY_SIZE")]
    pub http_max_body_size: Option<String>,
    /// HTTP listeners: open sockets per listener.
    #[arg(long, env = "HOURGLASS_HTTP_MAX_CONNECTIONS")]
    pub http_max_connections: Option<usize>,
    /// AMQP connections at once, handshakes included.
    #[arg(long, env = "HOURGLASS_MAX_CONNECTIONS")]
    pub max_connections: Option<usize>,
    /// Largest message body a client may publish (`128MiB`; RabbitMQ's `max_message_size`, at
    /// most 512MiB).
    #[arg(long, env = "HOURGLASS_MAX_MESSAGE_SIZE")]
    pub max_message_size: Option<String>,
    /// Channels per connection offered in connection.tune (RabbitMQ's `channel_max`; 0: no limit).
    #[arg(long, env = "HOURGLASS_CHANNEL_MAX")]
    pub channel_max: Option<u16>,
    /// Largest frame offered in connection.tune, bytes (RabbitMQ's `frame_max`; 4096 to 1048576).
    #[arg(long, env = "HOURGLASS_FRAME_MAX")]
    pub frame_max: Option<u32>,
    /// Log lines as `text` (colours only on a terminal, none with NO_COLOR) or `json`.
    #[arg(long, env = "HOURGLASS_LOG_FORMAT", value_enum)]
    pub log_format: Option<LogFormat>,
    /// Start even if the message log has damage recovery cannot bound (a damaged segment
    /// header, or damage running to the end of an older segment): skip it, log it, and lose the
    /// messages in it. Without it such a start is refused (docs/storage.md, "Recovery rules").
    /// Deliberately not a file setting: it is an operator's decision for one start.
    #[arg(long, env = "HOURGLASS_RECOVER_SKIP_CORRUPT")]
    pub recover_skip_corrupt: bool,
    /// TOML configuration file.
    #[arg(long, env = "HOURGLASS_CONFIG")]
    pub config: Option<PathBuf>,
    /// Do not start: ask the broker on this machine (the HTTP port of these settings) whether it
    /// is up with no resource alarm (`/api/health/checks/local-alarms`, as hourglass-ctl's user
    /// HOURGLASS_CTL_USER / HOURGLASS_CTL_PASSWORD, guest/guest by default); exit 0 if so, 1 if not.
    /// For container health checks.
    #[arg(long)]
    pub health_check: bool,
    /// One-shot recovery: when the data directory's stored definitions are damaged or unreadable,
    /// move their files aside (`<file>.damaged-<ms>`) and start without them; every stored message
    /// is kept, in queues recreated as `hourglass.orphaned.<id>` (docs/security.md). Flag only,
    /// never a file setting: it is an operator's decision for one start.
    #[arg(long)]
    pub set_aside_damaged_definitions: bool,
    /// The administrator a blank catalog gets instead of guest/guest (RabbitMQ's
    /// `default_user`); with `--default-pass`. Also made when a catalog set aside left no user.
    #[arg(long, env = "HOURGLASS_DEFAULT_USER")]
    pub default_user: Option<String>,
    /// The password of `--default-user` (RabbitMQ's `default_pass`).
    #[arg(long, env = "HOURGLASS_DEFAULT_PASS", hide_env_values = true)]
    pub default_pass: Option<String>,
    /// Offer SASL ANONYMOUS to AMQP 1.0 clients, logging them in as this user (RabbitMQ 4's
    /// `anonymous_login_user`); with `--anonymous-login-pass`. Off by default.
    #[arg(long, env = "HOURGLASS_ANONYMOUS_LOGIN_USER")]
    pub anonymous_login_user: Option<String>,
    /// The password `--anonymous-login-user` is checked with (RabbitMQ 4's `anonymous_login_pass`).
    #[arg(long, env = "HOURGLASS_ANONYMOUS_LOGIN_PASS", hide_env_values = true)]
    pub anonymous_login_pass: Option<String>,
    /// Clustered mode (`--etcd-endpoints` and the rest: docs/clustering.md).
    #[command(flatten)]
    pub cluster: cluster::ClusterCli,
}

/// The same settings as they may appear in the TOML file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    pub bind: Option<IpAddr>,
    pub amqp_port: Option<u16>,
    pub http_port: Option<u16>,
    pub metrics_port: Option<u16>,
    pub sqs_port: Option<u16>,
    pub sqs_max_long_polls: Option<usize>,
    pub secrets_key_file: Option<PathBuf>,
    pub plain_amqp: Option<bool>,
    pub plain_http: Option<bool>,
    pub plain_metrics: Option<bool>,
    pub tls_cert: Option<PathBuf>,
    pub tls_key: Option<PathBuf>,
    pub tls_ca: Option<PathBuf>,
    pub tls_verify_peer: Option<bool>,
    pub tls_fail_if_no_peer_cert: Option<bool>,
    pub tls_external_auth: Option<bool>,
    pub amqps_port: Option<u16>,
    pub https_port: Option<u16>,
    pub metrics_tls_port: Option<u16>,
    pub sqs_tls_port: Option<u16>,
    pub data_dir: Option<PathBuf>,
    /// A list of user names, or `[]` / `["none"]` for none.
    pub loopback_users: Option<Vec<String>>,
    pub vm_memory_high_watermark: Option<f64>,
    /// A size string (`"50MB"`) or a number of bytes.
    pub disk_free_limit: Option<SizeSetting>,
    pub disk_free_limit_relative: Option<f64>,
    pub apsaramq_delay_header: Option<bool>,
    /// Milliseconds, or `"none"`.
    pub consumer_timeout: Option<TimeoutSetting>,
    pub consumer_timeout_response: Option<String>,
    pub delivery_counting: Option<String>,
    pub overdue_release_rate: Option<u32>,
    pub server_product: Option<String>,
    pub load_definitions: Option<PathBuf>,
    pub default_user: Option<String>,
    pub default_pass: Option<String>,
    pub anonymous_login_user: Option<String>,
    pub anonymous_login_pass: Option<String>,
    pub queue_resident_messages: Option<usize>,
    /// A size string (`"64MiB"`) or a number of bytes.
    pub queue_resident_bytes: Option<SizeSetting>,
    pub login_failure_delay_ms: Option<u64>,
    pub tcp_send_timeout_ms: Option<u64>,
    pub worker_threads: Option<usize>,
    pub http_request_timeout_ms: Option<u64>,
    pub http_body_timeout_ms: Option<u64>,
    /// A size string (`"20MB"`) or a number of bytes.
    pub http_max_body_size: Option<SizeSetting>,
    pub http_max_connections: Option<usize>,
    pub max_connections: Option<usize>,
    /// A size string (`"128MiB"`) or a number of bytes.
    pub max_message_size: Option<SizeSetting>,
    pub channel_max: Option<u16>,
    pub frame_max: Option<u32>,
    /// `"text"` or `"json"`.
    pub log_format: Option<LogFormat>,
    // Clustered mode (config/cluster.rs).
    pub etcd_endpoints: Option<Vec<String>>,
    pub cluster_name: Option<String>,
    pub node_name: Option<String>,
    pub replication_port: Option<u16>,
    pub advertise_host: Option<String>,
    pub min_in_sync: Option<usize>,
    pub etcd_lease_ttl: Option<u64>,
    pub replication_tls: Option<bool>,
    pub cluster_secret_file: Option<PathBuf>,
    pub etcd_cacert: Option<PathBuf>,
    pub etcd_cert: Option<PathBuf>,
    pub etcd_key: Option<PathBuf>,
}

impl FileConfig {
    /// The clustered-mode keys of the file.
    fn cluster(&self) -> cluster::ClusterFile {
        cluster::ClusterFile {
            etcd_endpoints: self.etcd_endpoints.clone(),
            cluster_name: self.cluster_name.clone(),
            node_name: self.node_name.clone(),
            replication_port: self.replication_port,
            advertise_host: self.advertise_host.clone(),
            min_in_sync: self.min_in_sync,
            etcd_lease_ttl: self.etcd_lease_ttl,
            replication_tls: self.replication_tls,
            cluster_secret_file: self.cluster_secret_file.clone(),
            etcd_cacert: self.etcd_cacert.clone(),
            etcd_cert: self.etcd_cert.clone(),
            etcd_key: self.etcd_key.clone(),
        }
    }
}

/// A size in the TOML file: `"50MB"` or `50000000`.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(untagged)]
pub enum SizeSetting {
    Bytes(u64),
    Text(String),
}

/// A timeout in the TOML file: `1800000` (ms) or `"none"`.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(untagged)]
pub enum TimeoutSetting {
    Millis(u64),
    Text(String),
}

/// `disk_free_limit`: bytes, or a multiple of the machine's memory.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum DiskFreeLimit {
    Absolute(u64),
    MemRelative(f64),
}

impl DiskFreeLimit {
    /// The limit in bytes on a machine with `total_memory` bytes of memory.
    pub fn bytes(self, total_memory: Option<u64>) -> u64 {
        match self {
            DiskFreeLimit::Absolute(bytes) => bytes,
            DiskFreeLimit::MemRelative(factor) => match total_memory {
                Some(total) => hourglass_mgmt::resources::mem_relative_bytes(factor, total),
                None => DEFAULT_DISK_FREE_LIMIT,
            },
        }
    }
}

/// What one AMQP connection may negotiate (connection.tune) and publish.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AmqpLimits {
    /// Largest message body, bytes.
    pub max_message_size: u64,
    /// Channels per connection offered (0: no limit).
    pub channel_max: u16,
    /// Largest frame offered, bytes.
    pub frame_max: u32,
}

/// Where the listeners bind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bind {
    /// No address given: `::` with IPv4 too, or `0.0.0.0` where there is no IPv6.
    DualStack,
    /// An address given by the operator, bound as it is (`::` still accepts IPv4 too).
    Addr(IpAddr),
}

/// An explicit address, as `IpAddr` converts (`[127, 0, 0, 1].into()`).
impl<T> From<T> for Bind
where
    IpAddr: From<T>,
{
    fn from(ip: T) -> Bind {
        Bind::Addr(IpAddr::from(ip))
    }
}

/// Which plain (non-TLS) listeners run; all by default.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PlainListeners {
    pub amqp: bool,
    pub http: bool,
    pub metrics: bool,
}

/// Resolved settings.
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    pub bind: Bind,
    pub amqp_port: u16,
    pub http_port: u16,
    pub metrics_port: u16,
    /// The SQS endpoint's port, when it is served (docs/sqs.md).
    pub sqs_port: Option<u16>,
    /// Long polls one access key, and one address, may have waiting at once: a quarter of the
    /// default HTTP connection pool, so no one key or host can take it (issue 37).
    pub sqs_max_long_polls: usize,
    /// The file of the key that seals access keys' secrets (docs/sqs.md).
    pub secrets_key_file: Option<PathBuf>,
    /// Which plain listeners run (all unless switched off; at least one AMQP listener must).
    pub plain: PlainListeners,
    /// TLS listeners and their certificate, if configured.
    pub tls: Option<TlsSettings>,
    pub data_dir: PathBuf,
    pub loopback_users: Vec<String>,
    pub vm_memory_high_watermark: f64,
    pub disk_free_limit: DiskFreeLimit,
    pub apsaramq_delay_header: bool,
    /// RabbitMQ's `consumer_timeout` and `consumer_timeout_response` (semantics §4).
    pub consumer_timeout: ConsumerTimeoutConfig,
    /// Which returns count toward delivery limits (semantics §5).
    pub delivery_counting: DeliveryCounting,
    /// `overdue_release_rate`: messages a second; `None` for no limit.
    pub overdue_release_rate: Option<NonZeroU32>,
    /// `product` in connection.start's server-properties.
    pub server_product: String,
    pub load_definitions: Option<PathBuf>,
    /// How much of each durable queue stays in memory (ADR 0007).
    pub paging: PagingLimits,
    /// Start even if the definitions file does not read, moving it aside (`Cli` says more).
    pub set_aside_damaged_definitions: bool,
    /// The administrator a blank catalog gets instead of guest (`Cli` says more).
    pub default_user: Option<DefaultUser>,
    /// The user SASL ANONYMOUS logs AMQP 1.0 clients in as; `None`: not offered.
    pub anonymous_login: Option<hourglass_session::AnonymousLogin>,
    /// The first refused login's hold per address (ms); 0: no slowdown.
    pub login_failure_delay_ms: u64,
    /// A socket write making no progress this long closes the connection (ms).
    pub tcp_send_timeout_ms: u64,
    /// The async runtime's worker threads; `None`: one per CPU (tokio's default). ADR 0014.
    pub worker_threads: Option<NonZeroUsize>,
    /// What each HTTP listener allows a client.
    pub http: HttpLimits,
    /// AMQP connections at once (before the fd limit is taken into account).
    pub max_connections: usize,
    /// What each AMQP connection may negotiate and send.
    pub amqp: AmqpLimits,
    pub log_format: LogFormat,
    /// Skip, rather than refuse, message-log damage recovery cannot bound.
    pub recover_skip_corrupt: bool,
    /// Clustered mode; `None`: a single node.
    pub cluster: Option<cluster::ClusterConfig>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            bind: DEFAULT_BIND,
            amqp_port: DEFAULT_AMQP_PORT,
            http_port: DEFAULT_HTTP_PORT,
            metrics_port: DEFAULT_METRICS_PORT,
            sqs_port: None,
            sqs_max_long_polls: hourglass_sqs::long_polls::WAITING_MAX_DEFAULT,
            secrets_key_file: None,
            plain: PlainListeners { amqp: true, http: true, metrics: true },
            // TLS needs a certificate, which only the operator can give.
            tls: None,
            data_dir: PathBuf::from(DEFAULT_DATA_DIR),
            loopback_users: DEFAULT_LOOPBACK_USERS.iter().map(|u| (*u).to_owned()).collect(),
            vm_memory_high_watermark: DEFAULT_VM_MEMORY_HIGH_WATERMARK,
            disk_free_limit: DiskFreeLimit::Absolute(DEFAULT_DISK_FREE_LIMIT),
            apsaramq_delay_header: false,
            consumer_timeout: ConsumerTimeoutConfig::default(),
            delivery_counting: DeliveryCounting::default(),
            overdue_release_rate: None,
            server_product: hourglass_session::DEFAULT_SERVER_PRODUCT.to_owned(),
            load_definitions: None,
            // 10,000 messages or 64 MiB of bodies per queue: a consumer never waits on the disk
            // for a queue of ordinary depth, and ten million queued messages need no more than
            // their compact index in memory.
            paging: PagingLimits::default(),
            // A damaged definitions file stops the start: never guess on the operator's behalf.
            set_aside_damaged_definitions: false,
            // RabbitMQ's guest/guest, from loopback only (`DEFAULT_LOOPBACK_USERS`).
            default_user: None,
            // RabbitMQ 4 logs ANONYMOUS in as guest/guest by default; here it is asked for.
            anonymous_login: None,
            login_failure_delay_ms: DEFAULT_LOGIN_FAILURE_DELAY_MS,
            tcp_send_timeout_ms: DEFAULT_TCP_SEND_TIMEOUT_MS,
            worker_threads: None,
            http: HttpLimits {
                request_timeout: Duration::from_millis(DEFAULT_HTTP_REQUEST_TIMEOUT_MS),
                body_timeout: Duration::from_millis(DEFAULT_HTTP_BODY_TIMEOUT_MS),
                max_body_bytes: DEFAULT_HTTP_MAX_BODY_BYTES as usize,
                max_connections: DEFAULT_HTTP_MAX_CONNECTIONS,
            },
            max_connections: DEFAULT_MAX_CONNECTIONS,
            amqp: AmqpLimits {
                max_message_size: DEFAULT_MAX_MESSAGE_SIZE,
                channel_max: DEFAULT_CHANNEL_MAX,
                frame_max: DEFAULT_FRAME_MAX,
            },
            // People read a terminal; log shippers opt in to JSON.
            log_format: LogFormat::Text,
            // Off: damage that cannot be bounded means confirmed messages gone without a trace of
            // how many; an operator decides that, not the default (RabbitMQ has no such switch).
            recover_skip_corrupt: false,
            // A single node unless etcd endpoints are given.
            cluster: None,
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
        let cluster_file = file.cluster();
        let http = http_limits(&cli, &file, defaults.http)?;
        let tls = tls::tls_settings(&cli, &file)?;
        let (default_user, anonymous_login) = logins(&cli, &file)?;
        let amqp = amqp_limits(&cli, &file, defaults.amqp)?;
        let disk_free_limit = disk_free_limit(
            cli.disk_free_limit_relative.or(file.disk_free_limit_relative),
            cli.disk_free_limit,
            file.disk_free_limit,
            defaults.disk_free_limit,
        )?;
        let paging = paging_limits(
            cli.queue_resident_messages.or(file.queue_resident_messages),
            cli.queue_resident_bytes,
            file.queue_resident_bytes,
            defaults.paging,
        )?;
        let plain = PlainListeners {
            amqp: cli.plain_amqp.or(file.plain_amqp).unwrap_or(defaults.plain.amqp),
            http: cli.plain_http.or(file.plain_http).unwrap_or(defaults.plain.http),
            metrics: cli.plain_metrics.or(file.plain_metrics).unwrap_or(defaults.plain.metrics),
        };
        if !plain.amqp && tls.is_none() {
            anyhow::bail!(
                "plain_amqp = false needs TLS (tls_cert and tls_key): no AMQP listener would be left"
            );
        }
        Ok(Config {
            plain,
            tls,
            http,
            amqp,
            max_connections: cli.max_connections.or(file.max_connections).unwrap_or(defaults.max_connections),
            bind: cli.bind.or(file.bind).map_or(defaults.bind, Bind::Addr),
            amqp_port: cli.amqp_port.or(file.amqp_port).unwrap_or(defaults.amqp_port),
            http_port: cli.http_port.or(file.http_port).unwrap_or(defaults.http_port),
            metrics_port: cli.metrics_port.or(file.metrics_port).unwrap_or(defaults.metrics_port),
            sqs_port: cli.sqs_port.or(file.sqs_port),
            sqs_max_long_polls: cli
                .sqs_max_long_polls
                .or(file.sqs_max_long_polls)
                .unwrap_or(defaults.sqs_max_long_polls),
            secrets_key_file: cli.secrets_key_file.or(file.secrets_key_file),
            data_dir: cli.data_dir.or(file.data_dir).unwrap_or(defaults.data_dir),
            loopback_users: cli
                .loopback_users
                .or(file.loopback_users)
                .map_or(defaults.loopback_users, user_list),
            vm_memory_high_watermark: cli
                .vm_memory_high_watermark
                .or(file.vm_memory_high_watermark)
                .unwrap_or(defaults.vm_memory_high_watermark),
            disk_free_limit,
            apsaramq_delay_header: cli
                .apsaramq_delay_header
                .or(file.apsaramq_delay_header)
                .unwrap_or(defaults.apsaramq_delay_header),
            consumer_timeout: consumer_timeout(
                cli.consumer_timeout.map(TimeoutSetting::Text).or(file.consumer_timeout),
                cli.consumer_timeout_response.or(file.consumer_timeout_response),
                defaults.consumer_timeout,
            )?,
            delivery_counting: delivery_counting(
                cli.delivery_counting.or(file.delivery_counting).as_deref(),
                defaults.delivery_counting,
            )?,
            overdue_release_rate: cli
                .overdue_release_rate
                .or(file.overdue_release_rate)
                .map_or(defaults.overdue_release_rate, NonZeroU32::new),
            server_product: server_product(cli.server_product.or(file.server_product))?
                .unwrap_or(defaults.server_product),
            load_definitions: cli.load_definitions.or(file.load_definitions),
            paging,
            set_aside_damaged_definitions: cli.set_aside_damaged_definitions,
            default_user,
            anonymous_login,
            login_failure_delay_ms: cli
                .login_failure_delay_ms
                .or(file.login_failure_delay_ms)
                .unwrap_or(defaults.login_failure_delay_ms),
            tcp_send_timeout_ms: cli
                .tcp_send_timeout_ms
                .or(file.tcp_send_timeout_ms)
                .unwrap_or(defaults.tcp_send_timeout_ms),
            worker_threads: match cli.worker_threads.or(file.worker_threads) {
                None => defaults.worker_threads,
                Some(n) => Some(NonZeroUsize::new(n).context("worker_threads: at least 1 thread")?),
            },
            log_format: cli.log_format.or(file.log_format).unwrap_or(defaults.log_format),
            recover_skip_corrupt: cli.recover_skip_corrupt,
            cluster: cluster::resolve(cli.cluster, cluster_file)?,
        })
    }
}

/// The disk alarm's limit: a factor of the machine's memory (`relative`) wins, then a size
/// given as a flag, then the file's, then `default`.
fn disk_free_limit(
    relative: Option<f64>,
    flag: Option<String>,
    file: Option<SizeSetting>,
    default: DiskFreeLimit,
) -> anyhow::Result<DiskFreeLimit> {
    Ok(match (relative, flag) {
        (Some(factor), _) => DiskFreeLimit::MemRelative(factor),
        (None, Some(text)) => DiskFreeLimit::Absolute(parse_size(&text)?),
        (None, None) => match file {
            Some(SizeSetting::Bytes(bytes)) => DiskFreeLimit::Absolute(bytes),
            Some(SizeSetting::Text(text)) => DiskFreeLimit::Absolute(parse_size(&text)?),
            None => default,
        },
    })
}

/// A queue's paging limits (ADR 0007): the messages and bytes it keeps in memory, a size
/// given as a flag over the file's, each over `defaults`.
fn paging_limits(
    messages: Option<usize>,
    bytes_flag: Option<String>,
    bytes_file: Option<SizeSetting>,
    defaults: PagingLimits,
) -> anyhow::Result<PagingLimits> {
    let bytes = match (bytes_flag, bytes_file) {
        (Some(text), _) | (None, Some(SizeSetting::Text(text))) => Some(parse_size(&text)?),
        (None, Some(SizeSetting::Bytes(bytes))) => Some(bytes),
        (None, None) => None,
    };
    Ok(PagingLimits {
        max_resident_messages: messages.unwrap_or(defaults.max_resident_messages),
        max_resident_bytes: bytes
            .map_or(defaults.max_resident_bytes, |b| usize::try_from(b).unwrap_or(usize::MAX)),
    })
}

/// `loopback_users`: the names given, trimmed, without empty ones and `none`.
fn user_list(users: Vec<String>) -> Vec<String> {
    users.into_iter().map(|u| u.trim().to_owned()).filter(|u| !u.is_empty() && u != "none").collect()
}

/// `delivery_counting`: `every_return` or `failures_only`, else `default`.
fn delivery_counting(setting: Option<&str>, default: DeliveryCounting) -> anyhow::Result<DeliveryCounting> {
    match setting.map(str::trim) {
        None => Ok(default),
        Some("every_return") => Ok(DeliveryCounting::EveryReturn),
        Some("failures_only") => Ok(DeliveryCounting::FailuresOnly),
        Some(other) => anyhow::bail!("delivery_counting {other:?}: every_return or failures_only"),
    }
}

/// `consumer_timeout` (ms or `none`) and `consumer_timeout_response`, each over `defaults`.
fn consumer_timeout(
    timeout: Option<TimeoutSetting>,
    response: Option<String>,
    defaults: ConsumerTimeoutConfig,
) -> anyhow::Result<ConsumerTimeoutConfig> {
    let default_ms = match timeout {
        None => defaults.default_ms,
        Some(TimeoutSetting::Millis(ms)) => Some(ms),
        Some(TimeoutSetting::Text(text)) => match text.trim() {
            "none" => None,
            digits => Some(digits.parse().map_err(|_| {
                anyhow::anyhow!("consumer_timeout {text:?}: a number of milliseconds, or none")
            })?),
        },
    };
    let response = match response.as_deref().map(str::trim) {
        None => defaults.response,
        Some("notify_consumer") => TimeoutResponse::NotifyConsumer,
        Some("close_channel") => TimeoutResponse::CloseChannel,
        Some(other) => {
            anyhow::bail!("consumer_timeout_response {other:?}: notify_consumer or close_channel")
        }
    };
    Ok(ConsumerTimeoutConfig { default_ms, response })
}

/// The HTTP listeners' limits from flags over the file over `defaults`.
fn http_limits(cli: &Cli, file: &FileConfig, defaults: HttpLimits) -> anyhow::Result<HttpLimits> {
    let max_body_bytes = match (&cli.http_max_body_size, &file.http_max_body_size) {
        (Some(text), _) | (None, Some(SizeSetting::Text(text))) => parse_size(text)?,
        (None, Some(SizeSetting::Bytes(bytes))) => *bytes,
        (None, None) => defaults.max_body_bytes as u64,
    };
    let ms = |flag: Option<u64>, key: Option<u64>, default: Duration| {
        flag.or(key).map_or(default, Duration::from_millis)
    };
    Ok(HttpLimits {
        request_timeout: ms(
            cli.http_request_timeout_ms,
            file.http_request_timeout_ms,
            defaults.request_timeout,
        ),
        body_timeout: ms(cli.http_body_timeout_ms, file.http_body_timeout_ms, defaults.body_timeout),
        max_body_bytes: usize::try_from(max_body_bytes).unwrap_or(usize::MAX),
        max_connections: cli
            .http_max_connections
            .or(file.http_max_connections)
            .unwrap_or(defaults.max_connections)
            .max(1),
    })
}

/// The AMQP limits from flags over the file over `defaults`, checked against their bounds.
fn amqp_limits(cli: &Cli, file: &FileConfig, defaults: AmqpLimits) -> anyhow::Result<AmqpLimits> {
    let max_message_size = match (&cli.max_message_size, &file.max_message_size) {
        (Some(text), _) | (None, Some(SizeSetting::Text(text))) => parse_size(text)?,
        (None, Some(SizeSetting::Bytes(bytes))) => *bytes,
        (None, None) => defaults.max_message_size,
    };
    if max_message_size == 0 || max_message_size > MAX_MESSAGE_SIZE_LIMIT {
        anyhow::bail!(
            "max_message_size {max_message_size}: must be 1 to {MAX_MESSAGE_SIZE_LIMIT} bytes (512MiB, RabbitMQ's limit)"
        );
    }
    let frame_max = cli.frame_max.or(file.frame_max).unwrap_or(defaults.frame_max);
    if !(FRAME_MAX_MIN..=FRAME_MAX_MAX).contains(&frame_max) {
        anyhow::bail!("frame_max {frame_max}: must be {FRAME_MAX_MIN} to {FRAME_MAX_MAX} bytes");
    }
    let channel_max = cli.channel_max.or(file.channel_max).unwrap_or(defaults.channel_max);
    Ok(AmqpLimits { max_message_size, channel_max, frame_max })
}

/// The longest `server_product`: a name, not a document (it goes into every connection.start).
const SERVER_PRODUCT_MAX_BYTES: usize = 64;

/// `server_product` when given: 1 to 64 bytes.
fn server_product(given: Option<String>) -> anyhow::Result<Option<String>> {
    match given {
        Some(name) if name.is_empty() || name.len() > SERVER_PRODUCT_MAX_BYTES => {
            anyhow::bail!("server_product {name:?}: must be 1 to {SERVER_PRODUCT_MAX_BYTES} bytes")
        }
        other => Ok(other),
    }
}

/// A size in RabbitMQ's notation (`hourglass_mgmt::resources::parse_size`).
pub fn parse_size(text: &str) -> anyhow::Result<u64> {
    hourglass_mgmt::resources::parse_size(text).map_err(anyhow::Error::msg)
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

    /// connection.start names RabbitMQ unless the operator names another product (1 to 64 bytes).
    #[test]
    fn server_product_defaults_to_rabbitmq_and_is_bounded() {
        assert_eq!(Config::default().server_product, "RabbitMQ");
        let named = Cli { server_product: Some("Hourglass".into()), ..Cli::default() };
        assert_eq!(Config::resolve(named).unwrap().server_product, "Hourglass");
        for bad in [String::new(), "x".repeat(SERVER_PRODUCT_MAX_BYTES + 1)] {
            let cli = Cli { server_product: Some(bad), ..Cli::default() };
            assert!(Config::resolve(cli).is_err());
        }
    }

    /// `none` (RabbitMQ's spelling) and an empty list both mean no loopback-only users.
    /// Issue 39: `consumer_timeout` (ms or none) and `consumer_timeout_response`, as RabbitMQ's
    /// settings, with RabbitMQ's defaults; a bad value stops the start with its name.
    #[test]
    fn consumer_timeout_settings() {
        let default = Config::default().consumer_timeout;
        assert_eq!(default.default_ms, Some(1_800_000));
        assert_eq!(default.response, TimeoutResponse::NotifyConsumer);
        let cli = Cli {
            consumer_timeout: Some("none".into()),
            consumer_timeout_response: Some("close_channel".into()),
            ..Cli::default()
        };
        let resolved = Config::resolve(cli).unwrap().consumer_timeout;
        assert_eq!((resolved.default_ms, resolved.response), (None, TimeoutResponse::CloseChannel));
        assert_eq!(Config::default().delivery_counting, DeliveryCounting::EveryReturn);
        let cli = Cli { delivery_counting: Some("failures_only".into()), ..Cli::default() };
        assert_eq!(Config::resolve(cli).unwrap().delivery_counting, DeliveryCounting::FailuresOnly);
        let cli = Cli { delivery_counting: Some("some".into()), ..Cli::default() };
        assert!(Config::resolve(cli).unwrap_err().to_string().starts_with("delivery_counting"));
        let file: FileConfig = toml::from_str("consumer_timeout = 60000").unwrap();
        assert_eq!(file.consumer_timeout, Some(TimeoutSetting::Millis(60_000)));
        for (timeout, response) in [(Some("soon"), None), (None, Some("shout"))] {
            let cli = Cli {
                consumer_timeout: timeout.map(Into::into),
                consumer_timeout_response: response.map(Into::into),
                ..Cli::default()
            };
            let err = Config::resolve(cli).unwrap_err().to_string();
            assert!(err.starts_with("consumer_timeout"), "{err}");
        }
    }

    #[test]
    fn overdue_release_rate_settings() {
        assert_eq!(Config::default().overdue_release_rate, None, "all at once by default");
        let cli = Cli { overdue_release_rate: Some(500), ..Cli::default() };
        assert_eq!(Config::resolve(cli).unwrap().overdue_release_rate, NonZeroU32::new(500));
        let cli = Cli { overdue_release_rate: Some(0), ..Cli::default() };
        assert_eq!(Config::resolve(cli).unwrap().overdue_release_rate, None, "0 is no limit");
        let file: FileConfig = toml::from_str("overdue_release_rate = 2000").unwrap();
        assert_eq!(file.overdue_release_rate, Some(2000));
    }

    #[test]
    fn loopback_users_none_means_nobody() {
        let cli = Cli { loopback_users: Some(vec!["none".into()]), ..Cli::default() };
        assert!(Config::resolve(cli).unwrap().loopback_users.is_empty());
        let file: FileConfig = toml::from_str("loopback_users = []").unwrap();
        assert_eq!(file.loopback_users, Some(vec![]));
        assert_eq!(Config::default().loopback_users, vec!["guest".to_owned()]);
    }

    /// Sizes take RabbitMQ's units: binary for k/M/G and kiB/MiB/GiB, decimal for kB/MB/GB.
    #[test]
    fn sizes_use_rabbitmq_units() {
        assert_eq!(parse_size("50MB").unwrap(), 50_000_000);
        assert_eq!(parse_size("1GiB").unwrap(), 1 << 30);
        assert_eq!(parse_size("2G").unwrap(), 2 << 30);
        assert_eq!(parse_size("512000").unwrap(), 512_000);
        assert_eq!(parse_size("3kB").unwrap(), 3_000);
        assert!(parse_size("12 parsecs").is_err());
        assert!(parse_size("MB").is_err());
        assert!(parse_size("99999999999999999999GB").is_err());
    }

    /// The disk limit defaults to RabbitMQ's 50 MB; the file may give it as text or bytes, and a
    /// relative limit beats an absolute one.
    #[test]
    fn disk_free_limit_from_file_flags_and_default() {
        assert_eq!(Config::default().disk_free_limit, DiskFreeLimit::Absolute(50_000_000));
        let file: FileConfig = toml::from_str("disk_free_limit = \"1GB\"").unwrap();
        assert_eq!(file.disk_free_limit, Some(SizeSetting::Text("1GB".into())));
        let cli = Cli { disk_free_limit: Some("2GB".into()), ..Cli::default() };
        assert_eq!(Config::resolve(cli).unwrap().disk_free_limit, DiskFreeLimit::Absolute(2_000_000_000));
        let cli = Cli {
            disk_free_limit: Some("2GB".into()),
            disk_free_limit_relative: Some(1.5),
            ..Cli::default()
        };
        let limit = Config::resolve(cli).unwrap().disk_free_limit;
        assert_eq!(limit, DiskFreeLimit::MemRelative(1.5));
        assert_eq!(limit.bytes(Some(1000)), 1500);
    }

    /// Paging limits default to 10,000 messages / 64 MiB per queue; flags and the file set them.
    #[test]
    fn paging_limits_from_flags_and_file() {
        assert_eq!(Config::default().paging, PagingLimits::default());
        let cli = Cli {
            queue_resident_messages: Some(500),
            queue_resident_bytes: Some("1MiB".into()),
            ..Cli::default()
        };
        let paging = Config::resolve(cli).unwrap().paging;
        assert_eq!((paging.max_resident_messages, paging.max_resident_bytes), (500, 1 << 20));
        let file: FileConfig = toml::from_str("queue_resident_bytes = 4096").unwrap();
        assert_eq!(file.queue_resident_bytes, Some(SizeSetting::Bytes(4096)));
    }

    /// The HTTP limits default to RabbitMQ's (5 s request timeout, 20 MB bodies, 1,024 sockets);
    /// flags and the file set them.
    #[test]
    fn http_limits_from_flags_and_file() {
        let http = Config::default().http;
        assert_eq!(http.request_timeout, Duration::from_secs(5));
        assert_eq!((http.max_body_bytes, http.max_connections), (20_000_000, 1_024));
        let cli = Cli {
            http_request_timeout_ms: Some(300),
            http_max_body_size: Some("1MiB".into()),
            max_connections: Some(10),
            ..Cli::default()
        };
        let config = Config::resolve(cli).unwrap();
        assert_eq!(config.http.request_timeout, Duration::from_millis(300));
        assert_eq!((config.http.max_body_bytes, config.max_connections), (1 << 20, 10));
        let file: FileConfig = toml::from_str("http_max_connections = 7\nhttp_body_timeout_ms = 9").unwrap();
        let limits = http_limits(&Cli::default(), &file, http).unwrap();
        assert_eq!((limits.max_connections, limits.body_timeout), (7, Duration::from_millis(9)));
    }

    /// No `--bind` means dual stack; an explicit address (even `0.0.0.0`) is kept as given; the
    /// log format comes from the flag, else the file, else text.
    #[test]
    fn bind_and_log_format_defaults() {
        assert_eq!(Config::default().bind, Bind::DualStack);
        let cli = Cli { bind: Some("0.0.0.0".parse().unwrap()), ..Cli::default() };
        assert_eq!(Config::resolve(cli).unwrap().bind, Bind::Addr("0.0.0.0".parse().unwrap()));
        assert_eq!(Config::default().log_format, LogFormat::Text);
        let file: FileConfig = toml::from_str("log_format = \"json\"").unwrap();
        assert_eq!(file.log_format, Some(LogFormat::Json));
        assert!(toml::from_str::<FileConfig>("log_format = \"xml\"").is_err());
    }

    /// The AMQP limits default to RabbitMQ's (128 MiB messages, 2047 channels, 128 KiB frames);
    /// flags and the file set them, within their bounds.
    #[test]
    fn amqp_limits_from_flags_and_file_within_bounds() {
        let amqp = Config::default().amqp;
        assert_eq!((amqp.max_message_size, amqp.channel_max, amqp.frame_max), (134_217_728, 2047, 131_072));
        let cli = Cli { max_message_size: Some("1MiB".into()), channel_max: Some(0), ..Cli::default() };
        let amqp = Config::resolve(cli).unwrap().amqp;
        assert_eq!((amqp.max_message_size, amqp.channel_max), (1 << 20, 0));
        let file: FileConfig = toml::from_str("max_message_size = 4096\nframe_max = 8192").unwrap();
        let amqp = amqp_limits(&Cli::default(), &file, Config::default().amqp).unwrap();
        assert_eq!((amqp.max_message_size, amqp.frame_max), (4096, 8192));
        for cli in [
            Cli { max_message_size: Some("513MiB".into()), ..Cli::default() },
            Cli { max_message_size: Some("0".into()), ..Cli::default() },
            Cli { frame_max: Some(4095), ..Cli::default() },
            Cli { frame_max: Some(0), ..Cli::default() },
            Cli { frame_max: Some((1 << 20) + 1), ..Cli::default() },
        ] {
            assert!(Config::resolve(cli).is_err());
        }
        let cli = Cli { max_message_size: Some("512MiB".into()), frame_max: Some(4096), ..Cli::default() };
        assert!(Config::resolve(cli).is_ok(), "the bounds themselves are allowed");
    }

    /// A misspelt option in the file is an error, not silently ignored.
    #[test]
    fn unknown_file_option_is_refused() {
        assert!(toml::from_str::<FileConfig>("amqp_prot = 1").is_err());
    }
}
