//! The TLS server settings every TLS listener (AMQPS, HTTPS, Prometheus over TLS) hands each new
//! handshake, swappable while the listeners run: a certificate reload (SIGHUP, the server's
//! `tls.rs`) replaces the settings; handshakes that start afterwards use the new ones, connections
//! already up keep the session keys they negotiated and are not touched.
//!
//! Why a swapped `ServerConfig` rather than a rustls `ResolvesServerCert` reading a swappable
//! key: the CA behind client-certificate verification lives in the config's verifier, so only a
//! whole new config reloads it too; one lock read and an `Arc` clone per handshake cost nothing
//! next to the handshake itself.

use std::sync::{Arc, RwLock};

use tokio_rustls::rustls::ServerConfig;
use tokio_rustls::TlsAcceptor;

/// RabbitMQ's `ssl_handshake_timeout` (5 s): a socket that has not finished its TLS handshake by
/// then is closed, so a silent or plaintext peer cannot hold a connection slot.
pub const TLS_HANDSHAKE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// The current TLS settings of one kind of listener; clones share them.
#[derive(Clone)]
pub struct LiveTlsConfig {
    current: Arc<RwLock<Arc<ServerConfig>>>,
}

impl LiveTlsConfig {
    pub fn new(config: Arc<ServerConfig>) -> Self {
        LiveTlsConfig { current: Arc::new(RwLock::new(config)) }
    }

    /// Makes `config` the one new handshakes use.
    pub fn replace(&self, config: Arc<ServerConfig>) {
        // A poisoned lock only means a panic elsewhere while it was held; the Arc inside is whole.
        let mut current = self.current.write().unwrap_or_else(|poisoned| poisoned.into_inner());
        *current = config;
    }

    /// An acceptor for one new handshake, with the settings current now.
    pub fn acceptor(&self) -> TlsAcceptor {
        let current = self.current.read().unwrap_or_else(|poisoned| poisoned.into_inner());
        TlsAcceptor::from(current.clone())
    }
}

impl std::fmt::Debug for LiveTlsConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LiveTlsConfig")
    }
}
