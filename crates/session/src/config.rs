//! What one AMQP connection may negotiate, with RabbitMQ's defaults.
//!
//! The server builds one [`SessionConfig`] from its own configuration file and shares it (`Arc`)
//! with every connection; the session never reads configuration from anywhere else.

use std::fmt;
use std::sync::Arc;

use crate::auth::Authenticator;
use crate::client_limits::Occupancy;
use crate::login_limiter::LoginLimiter;

/// Largest frame we offer in connection.tune: RabbitMQ's `frame_max` default (128 KiB), large
/// enough that a typical message fits in one body frame, small enough to bound each read.
pub const DEFAULT_FRAME_MAX: u32 = 131_072;

/// Highest channel number we offer in connection.tune: RabbitMQ's `channel_max` default (2047).
/// Each open channel costs broker state, so a peer may not open an unbounded number of them.
pub const DEFAULT_CHANNEL_MAX: u16 = 2047;

/// Heartbeat interval we offer in connection.tune: RabbitMQ's default of 60 s, which detects a
/// dead peer within two to three minutes without noticeable traffic.
pub const DEFAULT_HEARTBEAT_S: u16 = 60;

/// Largest message body we accept: RabbitMQ's `max_message_size` default (128 MiB). A publish
/// declaring more is refused with 406 before any of its body is buffered.
pub const DEFAULT_MAX_MESSAGE_SIZE: u64 = 134_217_728;

/// Negotiation limits and identity for every connection of one listener.
#[derive(Clone)]
pub struct SessionConfig {
    /// The largest frame (header, payload and end octet) we accept and offer in connection.tune.
    pub frame_max: u32,
    /// The most channels one connection may have open at once, offered in connection.tune.
    pub channel_max: u16,
    /// The heartbeat interval we propose in connection.tune; the client's tune-ok value wins.
    pub heartbeat_s: u16,
    /// The largest message body a client may publish (capped at
    /// [`crate::content::MAX_MESSAGE_SIZE_LIMIT`]).
    pub max_message_size: u64,
    /// `product` in connection.start's server-properties ([`DEFAULT_SERVER_PRODUCT`] unless the
    /// operator names another).
    pub product: String,
    /// `version` in connection.start's server-properties: the RabbitMQ version whose behaviour we
    /// follow, since clients turn features on by it (the Java client checks for 3.10 and 4.0).
    pub version: String,
    /// `hourglass_version` in connection.start's server-properties: our own version.
    pub hourglass_version: String,
    /// `cluster_name` in connection.start's server-properties.
    pub cluster_name: String,
    /// This node's name (`hourglass@HOST`, as the HTTP API reports it): the leader and the
    /// replica of every queue that AMQP 1.0's `GET /queues/:q` names. In a cluster it is the
    /// serving leader's: followers keep copies of its store but serve no client, so a client
    /// that consumes or publishes "locally" should come to this node.
    pub node_name: String,
    /// Checks credentials (connection.start-ok) and vhost access (connection.open).
    pub authenticator: Arc<dyn Authenticator>,
    /// Holds the answers to refused logins per source address (shared with the HTTP API).
    pub login_limiter: Arc<LoginLimiter>,
    /// Offer SASL EXTERNAL to clients that presented a verified TLS certificate (RabbitMQ's
    /// `auth_mechanisms` with EXTERNAL in it). Off by default, as in RabbitMQ: a certificate
    /// then logs its CN's user in without a password, which the operator must ask for.
    pub external_auth: bool,
    /// Open connections per vhost and user and channels per user, for the limits the
    /// authenticator knows (`client_limits.rs`); shared by every connection.
    pub occupancy: Arc<Occupancy>,
    /// The user SASL ANONYMOUS logs AMQP 1.0 clients in as (RabbitMQ 4's `anonymous_login_user`
    /// and `anonymous_login_pass`), checked as a PLAIN login of it is. `None`, the default:
    /// ANONYMOUS is not offered.
    pub anonymous_login: Option<AnonymousLogin>,
}

/// The credentials SASL ANONYMOUS logs in with.
#[derive(Clone, PartialEq, Eq)]
pub struct AnonymousLogin {
    pub user: String,
    pub pass: String,
}

impl fmt::Debug for AnonymousLogin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AnonymousLogin").field("user", &self.user).finish_non_exhaustive()
    }
}

/// The `product` connection.start names by default: clients choose RabbitMQ's semantics by it
/// (kombu's basic.qos `global` flag; ADR 0009).
pub const DEFAULT_SERVER_PRODUCT: &str = "RabbitMQ";

/// The RabbitMQ release whose AMQP behaviour Hourglass follows (x-death layout, error texts,
/// capabilities): 3.13, the last 3.x. Not 4.x: clients would then expect 4.0-only behaviour.
pub const RABBITMQ_COMPATIBLE_VERSION: &str = "3.13.7";

impl SessionConfig {
    /// RabbitMQ's defaults, with `authenticator` deciding who may log in.
    pub fn new(authenticator: Arc<dyn Authenticator>) -> Self {
        SessionConfig {
            frame_max: DEFAULT_FRAME_MAX,
            channel_max: DEFAULT_CHANNEL_MAX,
            heartbeat_s: DEFAULT_HEARTBEAT_S,
            max_message_size: DEFAULT_MAX_MESSAGE_SIZE,
            product: DEFAULT_SERVER_PRODUCT.to_owned(),
            version: RABBITMQ_COMPATIBLE_VERSION.to_owned(),
            hourglass_version: env!("CARGO_PKG_VERSION").to_owned(),
            cluster_name: "hourglass".to_owned(),
            node_name: "hourglass@localhost".to_owned(),
            authenticator,
            login_limiter: Arc::new(LoginLimiter::default()),
            external_auth: false,
            occupancy: Arc::new(Occupancy::default()),
            anonymous_login: None,
        }
    }
}

impl fmt::Debug for SessionConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SessionConfig")
            .field("frame_max", &self.frame_max)
            .field("channel_max", &self.channel_max)
            .field("heartbeat_s", &self.heartbeat_s)
            .field("max_message_size", &self.max_message_size)
            .field("product", &self.product)
            .field("version", &self.version)
            .field("hourglass_version", &self.hourglass_version)
            .field("cluster_name", &self.cluster_name)
            .field("node_name", &self.node_name)
            .field("external_auth", &self.external_auth)
            .field("anonymous_login", &self.anonymous_login)
            .finish_non_exhaustive()
    }
}
