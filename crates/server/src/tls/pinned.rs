//! A blocking HTTPS GET to the broker on this machine that trusts exactly one certificate: the
//! leaf of the broker's own `--tls-cert` file (`hourglass --health-check` with plain HTTP off).
//! Pinning rather than a CA check: on loopback there is no host name the certificate must carry,
//! and the question is whether this broker answers, with the certificate it was given.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{verify_tls12_signature, verify_tls13_signature, CryptoProvider};
use rustls::{
    CertificateError, ClientConfig, ClientConnection, DigitallySignedStruct, SignatureScheme, StreamOwned,
};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, ServerName, UnixTime};

use crate::health_check::{HEALTH_CHECK_TIMEOUT, RESPONSE_BYTES_MAX};

/// Sends `request` to `addr` over TLS, accepting only the first certificate in `cert_file`;
/// returns the response as text.
pub fn get(addr: SocketAddr, cert_file: &Path, request: &str) -> std::io::Result<String> {
    let pinned = CertificateDer::pem_file_iter(cert_file)
        .map_err(std::io::Error::other)?
        .next()
        .ok_or_else(|| std::io::Error::other(format!("{} holds no certificate", cert_file.display())))?
        .map_err(std::io::Error::other)?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier = Arc::new(Pinned { certificate: pinned, provider: provider.clone() });
    let config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(std::io::Error::other)?
        .dangerous()
        .with_custom_certificate_verifier(verifier)
        .with_no_client_auth();
    let name = ServerName::from(addr.ip());
    let connection = ClientConnection::new(Arc::new(config), name).map_err(std::io::Error::other)?;
    let socket = TcpStream::connect_timeout(&addr, HEALTH_CHECK_TIMEOUT)?;
    socket.set_read_timeout(Some(HEALTH_CHECK_TIMEOUT))?;
    socket.set_write_timeout(Some(HEALTH_CHECK_TIMEOUT))?;
    let mut tls = StreamOwned::new(connection, socket);
    tls.write_all(request.as_bytes())?;
    tls.flush()?;
    let mut response = Vec::new();
    // The server may close without close_notify after `Connection: close`: keep what arrived.
    if let Err(error) = tls.take(RESPONSE_BYTES_MAX).read_to_end(&mut response) {
        if response.is_empty() {
            return Err(error);
        }
    }
    Ok(String::from_utf8_lossy(&response).into_owned())
}

/// Accepts the one certificate it holds; signatures are still checked with it.
#[derive(Debug)]
struct Pinned {
    certificate: CertificateDer<'static>,
    provider: Arc<CryptoProvider>,
}

impl ServerCertVerifier for Pinned {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        if end_entity.as_ref() == self.certificate.as_ref() {
            Ok(ServerCertVerified::assertion())
        } else {
            Err(rustls::Error::InvalidCertificate(CertificateError::ApplicationVerificationFailure))
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(message, cert, dss, &self.provider.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(message, cert, dss, &self.provider.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider.signature_verification_algorithms.supported_schemes()
    }
}
