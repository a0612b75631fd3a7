//! TLS for the listeners (docs/tls.md): rustls with the ring provider, TLS 1.3 and 1.2 only.
//! Builds the server settings from the PEM files named in [`TlsSettings`], one for AMQPS (client
//! certificates requested and verified when `verify_peer` is on) and one for HTTPS and
//! Prometheus over TLS (no client certificates: the API has its own logins, as RabbitMQ's
//! management listener defaults to `verify_none`), and reloads both on SIGHUP.
//!
//! Reload: the files are read again and, if everything parses and the key matches the
//! certificate, the new settings replace the old in the [`LiveTlsConfig`]s every listener reads
//! per handshake; connections already up are not touched. Anything wrong is logged and the old
//! settings stay.

pub mod pinned;
pub mod subject;

use std::path::Path;
use std::sync::Arc;

use hourglass_mgmt::tls::LiveTlsConfig;
use rustls::crypto::CryptoProvider;
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

use crate::config::TlsSettings;

/// TLS 1.3 and 1.2, as RabbitMQ's defaults since 3.8 (older versions have known weaknesses and
/// no current client needs them). rustls implements nothing older anyway.
const PROTOCOL_VERSIONS: &[&rustls::SupportedProtocolVersion] =
    &[&rustls::version::TLS13, &rustls::version::TLS12];

/// What the HTTPS listeners offer in ALPN: hyper serves HTTP/1.1 only.
const HTTP_ALPN: &[u8] = b"http/1.1";

/// Why the TLS settings could not be built: names the file and what is wrong with it.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("reading {path}: {reason}")]
    Unreadable { path: String, reason: String },
    #[error("{path} holds no PEM certificate")]
    NoCertificate { path: String },
    #[error("TLS settings refused: {0}")]
    Rustls(#[from] rustls::Error),
    #[error("client certificate verification: {0}")]
    Verifier(String),
}

/// The settings of the two kinds of TLS listener, swappable while they run.
#[derive(Clone, Debug)]
pub struct LiveTls {
    pub amqp: LiveTlsConfig,
    pub http: LiveTlsConfig,
}

impl LiveTls {
    /// Loads the files: a start with a bad certificate fails here, before anything listens.
    pub fn load(settings: &TlsSettings) -> Result<LiveTls, TlsError> {
        let (amqp, http) = build(settings)?;
        Ok(LiveTls { amqp: LiveTlsConfig::new(amqp), http: LiveTlsConfig::new(http) })
    }

    /// Reads the files again; new handshakes use them if they are good, else the old settings
    /// stay and the error is returned (to be logged).
    pub fn reload(&self, settings: &TlsSettings) -> Result<(), TlsError> {
        let (amqp, http) = build(settings)?;
        self.amqp.replace(amqp);
        self.http.replace(http);
        Ok(())
    }
}

fn build(settings: &TlsSettings) -> Result<(Arc<ServerConfig>, Arc<ServerConfig>), TlsError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let chain = certificates(&settings.cert)?;
    let key = PrivateKeyDer::from_pem_file(&settings.key).map_err(|e| unreadable(&settings.key, e))?;
    let builder =
        ServerConfig::builder_with_provider(provider.clone()).with_protocol_versions(PROTOCOL_VERSIONS)?;
    let amqp = match (&settings.ca, settings.verify_peer) {
        (Some(ca), true) => {
            builder.with_client_cert_verifier(client_verifier(ca, settings.fail_if_no_peer_cert, &provider)?)
        }
        _ => builder.with_no_client_auth(),
    };
    // with_single_cert checks that the key belongs to the certificate.
    let amqp = amqp.with_single_cert(chain.clone(), key.clone_key())?;
    let mut http = ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(PROTOCOL_VERSIONS)?
        .with_no_client_auth()
        .with_single_cert(chain, key)?;
    http.alpn_protocols = vec![HTTP_ALPN.to_vec()];
    Ok((Arc::new(amqp), Arc::new(http)))
}

/// Mutual TLS for the cluster's replication port (docs/clustering.md): this node's certificate on
/// both ends, and the other end's verified against `--tls-ca` — required, so only cluster members
/// can stream to a follower.
pub fn replication(settings: &TlsSettings) -> Result<hourglass_cluster::repl::ReplicationTls, TlsError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let ca = settings.ca.as_ref().ok_or_else(|| TlsError::Verifier("replication TLS needs tls_ca".into()))?;
    let chain = certificates(&settings.cert)?;
    let key = PrivateKeyDer::from_pem_file(&settings.key).map_err(|e| unreadable(&settings.key, e))?;
    let server = ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(PROTOCOL_VERSIONS)?
        .with_client_cert_verifier(client_verifier(ca, true, &provider)?)
        .with_single_cert(chain.clone(), key.clone_key())?;
    let mut roots = RootCertStore::empty();
    for certificate in certificates(ca)? {
        roots.add(certificate)?;
    }
    let client = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(PROTOCOL_VERSIONS)?
        .with_root_certificates(roots)
        .with_client_auth_cert(chain, key)?;
    Ok(hourglass_cluster::repl::ReplicationTls { server: Arc::new(server), client: Arc::new(client) })
}

/// Verifies client certificates against the CAs in `ca`; without `fail_if_no_peer_cert` a client
/// may also come without one (RabbitMQ's `verify_peer` with `fail_if_no_peer_cert = false`), but
/// a certificate it does present must verify.
fn client_verifier(
    ca: &Path,
    fail_if_no_peer_cert: bool,
    provider: &Arc<CryptoProvider>,
) -> Result<Arc<dyn rustls::server::danger::ClientCertVerifier>, TlsError> {
    let mut roots = RootCertStore::empty();
    for certificate in certificates(ca)? {
        roots.add(certificate)?;
    }
    let builder = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone());
    let builder = if fail_if_no_peer_cert { builder } else { builder.allow_unauthenticated() };
    builder.build().map_err(|e| TlsError::Verifier(e.to_string()))
}

/// Every certificate in a PEM file, in order; at least one.
fn certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let chain = CertificateDer::pem_file_iter(path)
        .map_err(|e| unreadable(path, e))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| unreadable(path, e))?;
    if chain.is_empty() {
        return Err(TlsError::NoCertificate { path: path.display().to_string() });
    }
    Ok(chain)
}

fn unreadable(path: &Path, error: impl std::fmt::Display) -> TlsError {
    TlsError::Unreadable { path: path.display().to_string(), reason: error.to_string() }
}

/// Reloads the certificate on every SIGHUP until the process ends, logged either way. The
/// handler is installed before this returns, so a SIGHUP sent once the listeners are announced
/// never meets the default action (ending the process).
#[cfg(unix)]
pub fn reload_on_sighup(live: LiveTls, settings: TlsSettings) {
    use tokio::signal::unix::{signal, SignalKind};
    let Ok(mut hangups) = signal(SignalKind::hangup()) else {
        tracing::warn!("cannot watch SIGHUP: the TLS certificate will not be reloaded");
        return;
    };
    tokio::spawn(async move {
        while hangups.recv().await.is_some() {
            match live.reload(&settings) {
                Ok(()) => {
                    tracing::info!(cert = %settings.cert.display(), "TLS certificate reloaded (SIGHUP): new handshakes use it")
                }
                Err(error) => {
                    tracing::error!(%error, "TLS certificate reload failed (SIGHUP): keeping the previous one")
                }
            }
        }
    });
}
