//! Hourglass session: the sans-IO AMQP 0-9-1 connection state machine.
//!
//! Bytes from the socket and `now` go in ([`Connection::handle_input`]), with the broker's
//! effects for this connection ([`Connection::handle_effect`]) and timer ticks
//! ([`Connection::handle_timeout`]); bytes for the socket ([`Connection::take_output`]) and
//! commands for the broker ([`Connection::poll_command`]) come out. No sockets, tasks or clocks.
//!
//! | file | job |
//! |---|---|
//! | `connection.rs` | protocol header, handshake (start, tune, open), connection methods, closing |
//! | `auth.rs` | SASL PLAIN / AMQPLAIN, the [`Authenticator`] trait, [`StaticUsers`] |
//! | `heartbeat.rs` | when to send a heartbeat and when the peer is dead |
//! | `channels.rs` | channel number states, what each does with client frames and broker effects |
//! | `content.rs` | basic.publish + content header + body frames → one `Publish` |
//! | `output.rs` | encoding frames into the output buffer |
//! | `fault.rs` | channel vs connection errors, RabbitMQ's reply texts |
//! | `config.rs` | [`SessionConfig`] and RabbitMQ's defaults |
//! | `client_limits.rs` | per-vhost and per-user connection and channel limits: counts and checks |
//! | `amqp1/` | AMQP 1.0 on the same port (issue 42): SASL, open, sessions and links, each link a channel into the broker |

mod amqp1;
mod auth;
mod channels;
mod client_limits;
mod config;
mod connection;
mod content;
mod fault;
mod heartbeat;
mod login_limiter;
mod output;

pub use auth::{
    Authenticator, ClientCertificate, LoginRefused, StaticUsers, VhostAccess, MECHANISMS,
    MECHANISMS_WITH_EXTERNAL,
};
pub use client_limits::{ClientLimits, LimitReached, Occupancy, Seat};
pub use config::{
    AnonymousLogin, SessionConfig, DEFAULT_CHANNEL_MAX, DEFAULT_FRAME_MAX, DEFAULT_HEARTBEAT_S,
    DEFAULT_MAX_MESSAGE_SIZE, DEFAULT_SERVER_PRODUCT,
};
pub use connection::{
    Connection, PeerInfo, CLOSING_TIMEOUT_MAX_MS, DRAIN_AFTER_CLOSE_OK_MS, HANDSHAKE_CLOSE_TIMEOUT_MS,
    HANDSHAKE_TIMEOUT_MS, SILENT_CLOSE_DELAY_MS,
};
pub use content::{UnfinishedContent, MAX_MESSAGE_SIZE_LIMIT, MAX_UNFINISHED_CONTENT_BYTES};
pub use heartbeat::MISSED_HEARTBEATS_LIMIT;
pub use login_limiter::{
    Admission, LoginLimiter, LOGIN_FAILURES_FORGOTTEN_AFTER_MS, LOGIN_FAILURES_PENDING_MAX,
    LOGIN_FAILURE_DELAY_MAX_MS, LOGIN_SOURCES_MAX,
};

#[cfg(test)]
mod tests;

/// Counts allocations for the tests that bound what a call may allocate.
#[cfg(test)]
#[global_allocator]
static ALLOCATOR: &stats_alloc::StatsAlloc<std::alloc::System> = &stats_alloc::INSTRUMENTED_SYSTEM;
