//! SASL EXTERNAL: offered only to a client with a verified TLS certificate when the operator
//! turned it on; the user is the certificate subject's CN, which must exist; no password.

use super::*;

fn external_config(enabled: bool) -> SessionConfig {
    let mut config = config();
    config.external_auth = enabled;
    config
}

/// A remote client (not loopback) with `certificate`, after the protocol header; returns it with
/// the mechanisms its connection.start offered.
fn client_with_certificate(config: SessionConfig, certificate: Option<&str>) -> (Client, String) {
    let mut c = Client::new(config.clone(), false);
    let peer = PeerInfo { addr: "192.0.2.1:5000".into(), local: "192.0.2.2:5672".into(), is_loopback: false };
    let certificate = certificate.map(|common_name| ClientCertificate {
        common_name: (!common_name.is_empty()).then(|| common_name.to_owned()),
    });
    c.conn = Connection::new(CONN, peer, Arc::new(config), c.now).over_tls(certificate);
    c.send_bytes(PROTOCOL_HEADER);
    let methods = c.methods();
    let [(0, Method::ConnectionStart(start))] = methods.as_slice() else {
        panic!("expected connection.start");
    };
    let mechanisms = start.mechanisms.as_str().into_owned();
    (c, mechanisms)
}

/// EXTERNAL is listed (last) only when turned on and a verified certificate came with the
/// connection, as RabbitMQ offers a configured mechanism only where its `should_offer` agrees.
#[test]
fn external_is_offered_only_with_a_certificate_when_enabled() {
    assert_eq!(client_with_certificate(external_config(true), Some("alice")).1, "PLAIN AMQPLAIN EXTERNAL");
    assert_eq!(client_with_certificate(external_config(true), None).1, "PLAIN AMQPLAIN");
    assert_eq!(client_with_certificate(external_config(false), Some("alice")).1, "PLAIN AMQPLAIN");
}

/// The certificate's CN logs in as that user without a password, whatever the response holds.
#[test]
fn external_logs_in_as_the_certificate_common_name() {
    let (mut c, _) = client_with_certificate(external_config(true), Some("alice"));
    c.send_method(0, start_ok("EXTERNAL", b""));
    assert!(matches!(c.methods().as_slice(), [(0, Method::ConnectionTune(_))]));
    c.send_method(0, ConnectionTuneOk { channel_max: 16, frame_max: 131_072, heartbeat: 0 });
    c.send_method(0, ConnectionOpen { virtual_host: short("/") });
    assert!(matches!(c.methods().as_slice(), [(0, Method::ConnectionOpenOk(_))]));
    let opened = c.conn.poll_command();
    assert!(
        matches!(opened, Some(Command::ConnectionOpen { ref info, .. }) if info.user == "alice"),
        "{opened:?}"
    );
}

/// A CN naming no user, or a certificate without a CN, is refused like a bad password (403,
/// naming the mechanism); guest stays loopback-only over EXTERNAL too.
#[test]
fn external_refuses_unknown_users_missing_names_and_remote_guest() {
    const REFUSED: &str = "ACCESS_REFUSED - Login was refused using authentication mechanism EXTERNAL. \
For details see the broker logfile.";
    for common_name in ["mallory", "", "guest"] {
        let (mut c, _) = client_with_certificate(external_config(true), Some(common_name));
        c.send_method(0, start_ok("EXTERNAL", b""));
        assert_eq!(c.connection_close(), close_of(403, REFUSED, 0, 0), "CN {common_name:?}");
    }
}

/// EXTERNAL asked for where it was not offered is rabbit_reader's "invalid authentication
/// mechanism" (503), not a login attempt.
#[test]
fn external_where_not_offered_is_an_invalid_mechanism() {
    let (mut c, _) = client_with_certificate(external_config(true), None);
    c.send_method(0, start_ok("EXTERNAL", b""));
    let text = "COMMAND_INVALID - invalid authentication mechanism 'EXTERNAL'";
    assert_eq!(c.connection_close(), close_of(503, text, 10, 11));
}
