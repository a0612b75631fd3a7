//! The byte stream under a [`crate::client::Client`]: a TCP socket, or TLS over one (rustls with
//! the ring provider, TLS 1.3/1.2, the broker's certificate checked against the URL's
//! `cacertfile` and its host name). Blocking either way; timeouts and non-blocking mode are set
//! on the TCP socket underneath ([`Transport::tcp`]).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::{Arc, OnceLock};

use anyhow::Context;
use rustls::{ClientConfig, ClientConnection, RootCertStore, StreamOwned};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, ServerName};

use crate::url::AmqpUrl;

/// One TLS client setup per process (every connection of a run goes to the same broker), so
/// connecting many clients measures the handshakes, not re-reading the CA file.
static TLS_CONFIG: OnceLock<Arc<ClientConfig>> = OnceLock::new();

pub enum Transport {
    Plain(TcpStream),
    Tls(Box<StreamOwned<ClientConnection, TcpStream>>),
}

impl Transport {
    /// Connects to the URL's address; over TLS when the URL is `amqps://`. The TLS handshake
    /// itself runs on the first read or write.
    pub fn connect(url: &AmqpUrl) -> anyhow::Result<Transport> {
        let tcp =
            TcpStream::connect(url.address()).with_context(|| format!("connect to {}", url.address()))?;
        let Some(ca) = &url.tls_ca else {
            return Ok(Transport::Plain(tcp));
        };
        let config = match TLS_CONFIG.get() {
            Some(config) => config.clone(),
            None => {
                let config = Arc::new(tls_config(ca)?);
                TLS_CONFIG.get_or_init(|| config).clone()
            }
        };
        let name = ServerName::try_from(url.host.clone()).context("host is not a valid TLS server name")?;
        let connection = ClientConnection::new(config, name).context("TLS client")?;
        Ok(Transport::Tls(Box::new(StreamOwned::new(connection, tcp))))
    }

    /// The TCP socket underneath.
    pub fn tcp(&self) -> &TcpStream {
        match self {
            Transport::Plain(tcp) => tcp,
            Transport::Tls(tls) => tls.get_ref(),
        }
    }
}

fn tls_config(ca: &std::path::Path) -> anyhow::Result<ClientConfig> {
    let mut roots = RootCertStore::empty();
    for certificate in
        CertificateDer::pem_file_iter(ca).with_context(|| format!("reading {}", ca.display()))?
    {
        roots.add(certificate.with_context(|| format!("reading {}", ca.display()))?)?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    Ok(ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth())
}

impl Read for Transport {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Transport::Plain(tcp) => tcp.read(buf),
            Transport::Tls(tls) => tls.read(buf),
        }
    }
}

impl Write for Transport {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            Transport::Plain(tcp) => tcp.write(buf),
            Transport::Tls(tls) => tls.write(buf),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Transport::Plain(tcp) => tcp.flush(),
            Transport::Tls(tls) => tls.flush(),
        }
    }
}
