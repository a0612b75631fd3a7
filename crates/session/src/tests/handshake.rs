//! The handshake: protocol header, start-ok, tune-ok, open.

use super::*;

/// A PLAIN handshake yields connection.start with RabbitMQ's fields, tune with our limits,
/// open-ok, and one ConnectionOpen command carrying what was negotiated.
#[test]
fn plain_handshake_opens_the_connection() {
    let mut c = Client::local();
    assert_eq!(c.conn.next_deadline(), Some(Timestamp::from_millis(T0 + HANDSHAKE_TIMEOUT_MS)));
    c.send_bytes(PROTOCOL_HEADER);
    let methods = c.methods();
    let [(0, Method::ConnectionStart(start))] = methods.as_slice() else {
        panic!("not connection.start");
    };
    assert_eq!((start.version_major, start.version_minor), (0, 9));
    assert_eq!(start.mechanisms.as_bytes(), b"PLAIN AMQPLAIN");
    assert_eq!(start.locales.as_bytes(), b"en_US");
    let Some(FieldValue::Table(caps)) = start.server_properties.get("capabilities") else {
        panic!("no capabilities");
    };
    let names: Vec<String> = caps.iter().map(|(k, _)| k.as_str().into_owned()).collect();
    assert_eq!(
        names,
        [
            "publisher_confirms",
            "exchange_exchange_bindings",
            "basic.nack",
            "consumer_cancel_notify",
            "connection.blocked",
            "consumer_priorities",
            "authentication_failure_close",
            "per_consumer_qos",
            "direct_reply_to"
        ]
    );
    assert!(caps.iter().all(|(_, v)| v == FieldValue::Bool(true)));
    assert_eq!(start.server_properties.get("platform"), Some(FieldValue::LongStr("Rust".into())));
    // clients gate features on `version`: it names the RabbitMQ release we follow
    assert_eq!(start.server_properties.get("version"), Some(FieldValue::LongStr("3.13.7".into())));
    let ours = FieldValue::LongStr(env!("CARGO_PKG_VERSION").into());
    assert_eq!(start.server_properties.get("hourglass_version"), Some(ours));

    c.send_method(0, start_ok("PLAIN", b"\0guest\0guest"));
    assert_eq!(
        c.methods(),
        vec![(0, ConnectionTune { channel_max: 2047, frame_max: 131_072, heartbeat: 60 }.into())]
    );
    c.send_method(0, ConnectionTuneOk { channel_max: 100, frame_max: 8192, heartbeat: 30 });
    assert!(c.methods().is_empty());
    c.send_method(0, ConnectionOpen { virtual_host: short("/") });
    assert_eq!(c.methods(), vec![(0, ConnectionOpenOk {}.into())]);
    let commands = c.commands();
    let [Command::ConnectionOpen { conn, info }] = commands.as_slice() else {
        panic!("not ConnectionOpen");
    };
    assert_eq!(*conn, CONN);
    assert_eq!(
        (info.user.as_str(), info.vhost.as_str(), info.peer.as_str()),
        ("guest", "/", "127.0.0.1:5000")
    );
    assert_eq!((info.frame_max, info.channel_max, info.heartbeat_s), (8192, 100, 30));
    assert!(info.capabilities.connection_blocked && info.capabilities.consumer_cancel_notify);
    assert!(c.conn.opened() && !c.conn.is_closed());
}

/// AMQPLAIN credentials (a raw LOGIN/PASSWORD table) log in like PLAIN ones.
#[test]
fn amqplain_handshake_logs_in() {
    let mut c = Client::new(config(), false);
    c.send_bytes(PROTOCOL_HEADER);
    c.frames();
    let table = FieldTable::from_entries([
        ("LOGIN", FieldValue::LongStr("alice".into())),
        ("PASSWORD", FieldValue::LongStr("secret".into())),
    ]);
    c.send_method(0, start_ok("AMQPLAIN", table.raw()));
    assert!(matches!(c.methods().as_slice(), [(0, Method::ConnectionTune(_))]));
}

/// A wrong password gets RabbitMQ's authentication_failure_close 403, then close-ok ends it.
#[test]
fn bad_password_is_refused_with_403() {
    let mut c = Client::local();
    c.send_bytes(PROTOCOL_HEADER);
    c.frames();
    c.send_method(0, start_ok("PLAIN", b"\0guest\0wrong"));
    let text = "ACCESS_REFUSED - Login was refused using authentication mechanism PLAIN. For details see the broker logfile.";
    assert_eq!(c.connection_close(), close_of(403, text, 0, 0));
    assert!(!c.conn.is_closed());
    c.send_method(0, ConnectionCloseOk {});
    assert!(c.conn.is_closed() && !c.conn.opened());
}

/// A client that did not announce `authentication_failure_close` has its socket closed on a failed
/// login, without a connection.close (rabbit_reader; the Java client's
/// `SaslMechanisms#connectionCloseAuthFailure*`).
#[test]
fn bad_password_without_the_capability_closes_the_socket() {
    let mut c = Client::local();
    c.send_bytes(PROTOCOL_HEADER);
    c.frames();
    let start_ok =
        ConnectionStartOk { client_properties: FieldTable::new(), ..start_ok("PLAIN", b"\0guest\0wrong") };
    c.send_method(0, start_ok);
    assert!(c.methods().is_empty(), "no connection.close is sent");
    assert!(c.conn.is_closed() && !c.conn.opened());
}

/// guest is a loopback-only user, as RabbitMQ's loopback_users makes it.
#[test]
fn guest_from_non_loopback_is_refused() {
    let mut c = Client::new(config(), false);
    c.send_bytes(PROTOCOL_HEADER);
    c.frames();
    c.send_method(0, start_ok("PLAIN", b"\0guest\0guest"));
    assert_eq!(c.connection_close().reply_code, 403);
}

/// An unknown mechanism is RabbitMQ's 503 naming it.
#[test]
fn unknown_mechanism_is_command_invalid() {
    let mut c = Client::local();
    c.send_bytes(PROTOCOL_HEADER);
    c.frames();
    c.send_method(0, start_ok("SCRAM-SHA-256", b""));
    let text = "COMMAND_INVALID - unknown authentication mechanism 'SCRAM-SHA-256'";
    assert_eq!(c.connection_close(), close_of(503, text, 10, 11));
}

/// An unknown vhost is 530 "vhost x not found" on connection.open; no ConnectionOpen is emitted.
#[test]
fn unknown_vhost_is_refused_with_530() {
    let mut c = Client::local();
    c.send_bytes(PROTOCOL_HEADER);
    c.send_method(0, start_ok("PLAIN", b"\0guest\0guest"));
    c.send_method(0, ConnectionTuneOk { channel_max: 10, frame_max: 131_072, heartbeat: 0 });
    c.frames();
    c.send_method(0, ConnectionOpen { virtual_host: short("nope") });
    assert_eq!(c.connection_close(), close_of(530, "NOT_ALLOWED - vhost nope not found", 10, 40));
    assert!(c.commands().is_empty() && !c.conn.opened());
}

/// A vhost the authenticator refuses is RabbitMQ's 530 "access to vhost ... refused".
#[test]
fn refused_vhost_is_530_naming_user_and_vhost() {
    struct NoVhosts;
    impl Authenticator for NoVhosts {
        fn authenticate(&self, _: &str, _: &str, _: bool) -> Result<(), LoginRefused> {
            Ok(())
        }
        fn vhost_access(&self, _: &str, _: &str) -> VhostAccess {
            VhostAccess::Refused
        }
    }
    let mut c = Client::new(SessionConfig::new(Arc::new(NoVhosts)), true);
    c.send_bytes(PROTOCOL_HEADER);
    c.send_method(0, start_ok("PLAIN", b"\0bob\0x"));
    c.send_method(0, ConnectionTuneOk { channel_max: 10, frame_max: 131_072, heartbeat: 0 });
    c.frames();
    c.send_method(0, ConnectionOpen { virtual_host: short("v") });
    let text = "NOT_ALLOWED - access to vhost 'v' refused for user 'bob'";
    assert_eq!(c.connection_close(), close_of(530, text, 10, 40));
}

/// Any header but AMQP 0-9-1's (or 1.0's, `amqp1/tests.rs`) is answered with ours, and the
/// connection closes at once.
#[test]
fn wrong_protocol_header_gets_ours_and_closes() {
    let mut c = Client::local();
    c.send_bytes(b"AMQP\x00\x00\x08\x00");
    assert_eq!(&c.conn.take_output()[..], PROTOCOL_HEADER);
    assert!(c.conn.is_closed());
    assert_eq!(c.conn.next_deadline(), None);
}

/// A header split over two reads is waited for.
#[test]
fn partial_protocol_header_waits_for_more() {
    let mut c = Client::local();
    c.send_bytes(b"AMQP");
    assert!(c.frames().is_empty());
    c.send_bytes(b"\x00\x00\x09\x01");
    assert!(matches!(c.methods().as_slice(), [(0, Method::ConnectionStart(_))]));
}

/// tune-ok values outside RabbitMQ's rules are 530 with its exact texts, on connection.tune.
#[test]
fn tune_ok_outside_limits_is_530() {
    let cases = [
        (2047, 1024, "NOT_ALLOWED - negotiated frame_max = 1024 is lower than the minimum allowed value (4096)"),
        (2047, 200_000, "NOT_ALLOWED - negotiated frame_max = 200000 is higher than the maximum allowed value (131072)"),
        (0, 131_072, "NOT_ALLOWED - negotiated channel_max = 0 (no limit) is higher than the maximum allowed value (2047)"),
        (4000, 131_072, "NOT_ALLOWED - negotiated channel_max = 4000 is higher than the maximum allowed value (2047)"),
    ];
    for (channel_max, frame_max, text) in cases {
        let mut c = Client::local();
        c.send_bytes(PROTOCOL_HEADER);
        c.send_method(0, start_ok("PLAIN", b"\0guest\0guest"));
        c.frames();
        c.send_method(0, ConnectionTuneOk { channel_max, frame_max, heartbeat: 0 });
        assert_eq!(c.connection_close(), close_of(530, text, 10, 30));
    }
}

/// A method other than the one the handshake waits for is RabbitMQ's 504.
#[test]
fn out_of_order_handshake_method_is_504() {
    let mut c = Client::local();
    c.send_bytes(PROTOCOL_HEADER);
    c.frames();
    c.send_method(0, ConnectionOpen { virtual_host: short("/") });
    let text = "CHANNEL_ERROR - unexpected method in connection state starting";
    assert_eq!(c.connection_close(), close_of(504, text, 10, 40));
}

/// A peer that does not finish the handshake within 10 s is dropped.
#[test]
fn handshake_times_out_after_10_s() {
    let mut c = Client::local();
    c.send_bytes(PROTOCOL_HEADER);
    c.at(HANDSHAKE_TIMEOUT_MS - 1).timeout();
    assert!(!c.conn.is_closed());
    c.at(HANDSHAKE_TIMEOUT_MS).timeout();
    assert!(c.conn.is_closed());
}
