//! TLS settings (docs/tls.md) from flags over the file.

use std::path::PathBuf;

use super::{Cli, FileConfig, DEFAULT_AMQPS_PORT, DEFAULT_HTTPS_PORT, DEFAULT_METRICS_TLS_PORT};

/// TLS settings (`docs/tls.md`): present when a certificate and key are configured; then the
/// three TLS listeners run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsSettings {
    pub cert: PathBuf,
    pub key: PathBuf,
    /// CA certificates client certificates must chain to.
    pub ca: Option<PathBuf>,
    /// Ask AMQPS clients for a certificate and verify it (needs `ca`).
    pub verify_peer: bool,
    /// Refuse AMQPS clients without a certificate (only with `verify_peer`).
    pub fail_if_no_peer_cert: bool,
    /// Offer SASL EXTERNAL to clients with a verified certificate.
    pub external_auth: bool,
    pub amqps_port: u16,
    pub https_port: u16,
    pub metrics_port: u16,
    /// The SQS endpoint over TLS, when it is served (docs/sqs.md).
    pub sqs_port: Option<u16>,
}

/// The TLS settings from flags over the file: none without a certificate and key; a TLS-only
/// setting without them, or peer verification without a CA, is an error rather than ignored.
pub(super) fn tls_settings(cli: &Cli, file: &FileConfig) -> anyhow::Result<Option<TlsSettings>> {
    let cert = cli.tls_cert.clone().or_else(|| file.tls_cert.clone());
    let key = cli.tls_key.clone().or_else(|| file.tls_key.clone());
    let verify_peer = cli.tls_verify_peer.or(file.tls_verify_peer).unwrap_or(false);
    let (cert, key) = match (cert, key) {
        (Some(cert), Some(key)) => (cert, key),
        (None, None) => {
            let tls_only = [
                cli.amqps_port.or(file.amqps_port),
                cli.https_port.or(file.https_port),
                cli.sqs_tls_port.or(file.sqs_tls_port),
            ];
            if tls_only.iter().any(Option::is_some)
                || verify_peer
                || cli.tls_ca.is_some()
                || file.tls_ca.is_some()
            {
                anyhow::bail!("TLS settings given without a certificate: set tls_cert and tls_key");
            }
            return Ok(None);
        }
        _ => anyhow::bail!("TLS needs both tls_cert and tls_key"),
    };
    let ca = cli.tls_ca.clone().or_else(|| file.tls_ca.clone());
    if verify_peer && ca.is_none() {
        anyhow::bail!("tls_verify_peer needs tls_ca: the CA client certificates must chain to");
    }
    let external_auth = cli.tls_external_auth.or(file.tls_external_auth).unwrap_or(false);
    if external_auth && !verify_peer {
        // RabbitMQ refuses EXTERNAL logins as "configuration unsafe" without verify_peer.
        anyhow::bail!("tls_external_auth needs tls_verify_peer: only a verified certificate may name a user");
    }
    Ok(Some(TlsSettings {
        cert,
        key,
        ca,
        verify_peer,
        fail_if_no_peer_cert: cli.tls_fail_if_no_peer_cert.or(file.tls_fail_if_no_peer_cert).unwrap_or(false),
        // Off unless asked for, as RabbitMQ needs EXTERNAL in `auth_mechanisms`.
        external_auth,
        amqps_port: cli.amqps_port.or(file.amqps_port).unwrap_or(DEFAULT_AMQPS_PORT),
        https_port: cli.https_port.or(file.https_port).unwrap_or(DEFAULT_HTTPS_PORT),
        metrics_port: cli.metrics_tls_port.or(file.metrics_tls_port).unwrap_or(DEFAULT_METRICS_TLS_PORT),
        sqs_port: cli.sqs_tls_port.or(file.sqs_tls_port),
    }))
}

#[cfg(test)]
mod tests {
    use super::super::Config;
    use super::*;

    /// TLS is off without a certificate; with one, the TLS ports default to RabbitMQ's; the
    /// file's TLS keys are read; TLS-only settings without a certificate, peer verification
    /// without a CA, and no AMQP listener at all are refused.
    #[test]
    fn tls_settings_defaults_and_refusals() {
        assert_eq!(Config::default().tls, None);
        let file: FileConfig = toml::from_str(
            "tls_cert = \"c.pem\"\ntls_key = \"k.pem\"\nplain_amqp = false\nhttps_port = 8443",
        )
        .unwrap();
        let tls = tls_settings(&Cli::default(), &file).unwrap().unwrap();
        assert_eq!((tls.amqps_port, tls.https_port, tls.metrics_port), (5671, 8443, 15691));
        assert!(!tls.verify_peer && !tls.fail_if_no_peer_cert && !tls.external_auth);
        assert_eq!(file.plain_amqp, Some(false));
        let refused = |cli: Cli| Config::resolve(cli).unwrap_err().to_string();
        assert!(refused(Cli { amqps_port: Some(1), ..Cli::default() }).contains("without a certificate"));
        assert!(refused(Cli { sqs_tls_port: Some(1), ..Cli::default() }).contains("without a certificate"));
        assert_eq!(tls.sqs_port, None, "the SQS endpoint over TLS is off unless its port is set");
        assert!(refused(Cli { plain_amqp: Some(false), ..Cli::default() }).contains("no AMQP listener"));
        let no_ca = Cli {
            tls_cert: Some("c".into()),
            tls_key: Some("k".into()),
            tls_verify_peer: Some(true),
            ..Cli::default()
        };
        assert!(refused(no_ca).contains("needs tls_ca"));
        let external_unverified = Cli {
            tls_cert: Some("c".into()),
            tls_key: Some("k".into()),
            tls_external_auth: Some(true),
            ..Cli::default()
        };
        assert!(refused(external_unverified).contains("needs tls_verify_peer"));
    }
}
