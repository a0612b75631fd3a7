//! Heartbeats, closing, connection-level methods and hostile input.

use super::*;

/// With heartbeat 10 s we send a heartbeat after 5 s without output, and drop the peer exactly
/// 20 s after the last octet it sent.
#[test]
fn heartbeats_are_sent_and_a_silent_peer_is_dropped() {
    let mut c = Client::local();
    c.open(10);
    assert_eq!(c.conn.next_deadline(), Some(Timestamp::from_millis(T0 + 5_000)));
    c.at(4_999).timeout();
    assert!(c.frames().is_empty());
    c.at(5_000).timeout();
    assert_eq!(c.frames(), vec![Frame::Heartbeat { channel: 0 }]);
    assert_eq!(c.conn.next_deadline(), Some(Timestamp::from_millis(T0 + 10_000)));
    c.at(10_000).timeout();
    c.at(15_000).timeout();
    assert_eq!(c.frames().len(), 2);
    // The client speaks at 15 s: it is alive until 35 s.
    c.at(15_000).send_bytes(&[8, 0, 0, 0, 0, 0, 0, 0xCE]);
    c.at(34_999).timeout();
    assert!(!c.conn.is_closed());
    c.at(35_000).timeout();
    assert!(c.conn.is_closed());
    assert!(c.conn.take_output().len() <= 16, "no connection.close for a dead peer");
}

/// Heartbeat 0 disables both timers once open.
#[test]
fn heartbeat_zero_disables_timers() {
    let mut c = Client::local();
    c.open(0);
    assert_eq!(c.conn.next_deadline(), None);
}

/// A heartbeat on a channel other than 0 is RabbitMQ's 505.
#[test]
fn heartbeat_on_a_channel_is_505() {
    let mut c = Client::local();
    c.open(0);
    c.send_bytes(&[8, 0, 3, 0, 0, 0, 0, 0xCE]);
    let text = "UNEXPECTED_FRAME - type 8, all octets = <<>>";
    assert_eq!(c.connection_close(), close_of(505, text, 0, 0));
}

/// The client's connection.close is answered with close-ok; the connection ends when the client
/// closes the socket.
#[test]
fn client_close_is_answered_and_ends_the_connection() {
    let mut c = Client::local();
    c.open(60);
    c.send_method(0, close_of(200, "bye", 0, 0));
    assert_eq!(c.methods(), vec![(0, ConnectionCloseOk {}.into())]);
    // Handed over before close-ok is written: the broker lets go of the connection first.
    assert_eq!(c.commands(), vec![Command::ConnectionClosed { conn: CONN }]);
    assert!(!c.conn.is_closed() && c.conn.opened(), "waits for the client to close the socket");
    c.conn.handle_eof(c.now);
    assert!(c.conn.is_closed());
}

/// What a client still sends after its connection.close (publishes it was flushing) is read and
/// discarded until it closes the socket, or for DRAIN_AFTER_CLOSE_OK_MS at most: closing with
/// unread bytes would reset the socket before the client reads close-ok (amqplib's tests).
#[test]
fn frames_after_the_clients_close_are_drained_then_the_socket_closes() {
    let mut c = Client::local();
    c.open(60);
    c.open_channel(1);
    c.send_method(0, close_of(200, "bye", 0, 0));
    assert_eq!(c.methods(), vec![(0, ConnectionCloseOk {}.into())]);
    assert_eq!(c.commands(), vec![Command::ConnectionClosed { conn: CONN }]);
    c.send_method(1, BasicQos { prefetch_size: 0, prefetch_count: 1, global: false });
    assert!(c.methods().is_empty() && c.commands().is_empty(), "discarded, unanswered");
    assert!(c.inbox.is_empty(), "but read");
    assert_eq!(c.conn.next_deadline(), Some(c.now.saturating_add_millis(DRAIN_AFTER_CLOSE_OK_MS)));
    c.at(DRAIN_AFTER_CLOSE_OK_MS).timeout();
    assert!(c.conn.is_closed());
}

/// close_forced sends RabbitMQ's 320 text, ignores other frames, and ends on close-ok.
#[test]
fn close_forced_sends_320_and_waits_for_close_ok() {
    let mut c = Client::local();
    c.open(60);
    c.open_channel(1);
    c.conn.close_forced("shutdown", c.now);
    let text = "CONNECTION_FORCED - broker forced connection closure with reason 'shutdown'";
    assert_eq!(c.connection_close(), close_of(320, text, 0, 0));
    c.send_method(1, BasicQos { prefetch_size: 0, prefetch_count: 1, global: false });
    c.effect(send(1, BasicQosOk {}));
    assert!(c.commands().is_empty() && c.frames().is_empty());
    c.send_method(0, ConnectionCloseOk {});
    assert!(c.conn.is_closed());
}

/// Without close-ok the connection closes after min(heartbeat, 30 s).
#[test]
fn server_close_times_out_without_close_ok() {
    let mut c = Client::local();
    c.open(10);
    c.effect(Effect::ConnectionError { conn: CONN, error: AmqpError::new(541, "boom") });
    assert_eq!(c.connection_close(), close_of(541, "INTERNAL_ERROR - boom", 0, 0));
    assert_eq!(c.conn.next_deadline(), Some(Timestamp::from_millis(T0 + 10_000)));
    c.at(9_999).timeout();
    assert!(!c.conn.is_closed());
    c.at(10_000).timeout();
    assert!(c.conn.is_closed());
}

/// A syntax error in a method closes with the decoder's reply; we still read the close-ok.
#[test]
fn syntax_error_closes_and_still_reads_close_ok() {
    let mut c = Client::local();
    c.open(60);
    // channel.open (20/10) with a truncated short string argument.
    c.send_bytes(&[1, 0, 1, 0, 0, 0, 5, 0, 20, 0, 10, 9, 0xCE]);
    let close = c.connection_close();
    assert_eq!((close.reply_code, close.class_id, close.method_id), (502, 20, 10));
    c.send_method(0, ConnectionCloseOk {});
    assert!(c.conn.is_closed());
}

/// Issue #12 finding 9: a name that is not UTF-8 (here queue.declare's `q\xff`) closes the
/// connection with RabbitMQ 3.10.8's 501 "FRAME_ERROR - Malformed UTF-8 in shortstr", class and
/// method 0; nothing reaches the broker, and the close-ok is still read (the frame was whole).
/// basic.publish's routing key is not checked (RabbitMQ skips content methods).
#[test]
fn non_utf8_name_closes_with_501_as_rabbitmq() {
    let mut c = Client::local();
    c.open(60);
    c.open_channel(1);
    c.send_method(
        1,
        BasicPublish {
            routing_key: ShortStr::new(Bytes::from_static(b"k\xff")).unwrap(),
            ..Default::default()
        },
    );
    c.send_header(1, 60, 0);
    assert!(matches!(c.commands().as_slice(), [Command::Publish { .. }]), "publish keys are not checked");
    let queue = ShortStr::new(Bytes::from_static(b"q\xff")).unwrap();
    c.send_method(1, QueueDeclare { queue, ..Default::default() });
    assert_eq!(c.connection_close(), close_of(501, "FRAME_ERROR - Malformed UTF-8 in shortstr", 0, 0));
    assert!(c.commands().is_empty(), "the declare never reaches the broker");
    c.send_method(0, ConnectionCloseOk {});
    assert!(c.conn.is_closed());
}

/// connection.open with a virtual host that is not UTF-8: 501, naming connection.open (10/40) as
/// RabbitMQ does for the methods its reader decodes.
#[test]
fn non_utf8_virtual_host_closes_with_501_naming_connection_open() {
    let mut c = Client::local();
    c.send_bytes(PROTOCOL_HEADER);
    c.send_method(0, start_ok("PLAIN", b"\0guest\0guest"));
    c.send_method(0, ConnectionTuneOk { channel_max: 2047, frame_max: 131_072, heartbeat: 60 });
    c.frames();
    c.send_method(0, ConnectionOpen { virtual_host: ShortStr::new(Bytes::from_static(b"/\xff")).unwrap() });
    assert_eq!(c.connection_close(), close_of(501, "FRAME_ERROR - Malformed UTF-8 in shortstr", 10, 40));
    assert!(c.commands().is_empty());
}

/// After a frame error the rest of the input is unreadable: we close with 501, discard input
/// and drop the socket after the silent-close delay.
#[test]
fn frame_error_discards_input_and_closes_after_delay() {
    let mut c = Client::local();
    c.open(60);
    c.send_bytes(&[1, 0, 1, 0, 0, 0, 0, 0x00]);
    assert_eq!(c.connection_close().reply_code, 501);
    c.send_method(0, ConnectionCloseOk {});
    assert!(!c.conn.is_closed(), "input after a frame error is not parsed");
    c.at(SILENT_CLOSE_DELAY_MS).timeout();
    assert!(c.conn.is_closed());
}

/// Blocked/unblocked reach a client that announced connection.blocked, once per period.
#[test]
fn blocked_and_unblocked_follow_the_capability() {
    let mut c = Client::local();
    c.open(60);
    c.effect(Effect::Blocked { conn: CONN, reason: Some("low on memory".into()) });
    c.effect(Effect::Blocked { conn: CONN, reason: Some("low on memory".into()) });
    assert_eq!(c.methods(), vec![(0, ConnectionBlocked { reason: short("low on memory") }.into())]);
    c.effect(Effect::Blocked { conn: CONN, reason: None });
    c.effect(Effect::Blocked { conn: CONN, reason: None });
    assert_eq!(c.methods(), vec![(0, ConnectionUnblocked {}.into())]);

    let mut c = Client::local();
    c.send_bytes(PROTOCOL_HEADER);
    let mut no_caps = start_ok("PLAIN", b"\0guest\0guest");
    no_caps.client_properties = FieldTable::new();
    c.send_method(0, no_caps);
    c.send_method(0, ConnectionTuneOk { channel_max: 10, frame_max: 131_072, heartbeat: 0 });
    c.send_method(0, ConnectionOpen { virtual_host: short("/") });
    c.frames();
    c.effect(Effect::Blocked { conn: CONN, reason: Some("low on memory".into()) });
    assert!(c.frames().is_empty());
}

/// update-secret is acknowledged.
#[test]
fn update_secret_is_acknowledged() {
    let mut c = Client::local();
    c.open(60);
    c.send_method(0, ConnectionUpdateSecret { new_secret: "t".into(), reason: short("refresh") });
    assert_eq!(c.methods(), vec![(0, ConnectionUpdateSecretOk {}.into())]);
}

/// EOF closes the connection without output.
#[test]
fn eof_closes() {
    let mut c = Client::local();
    c.open(60);
    c.conn.handle_eof(c.now);
    assert!(c.conn.is_closed() && c.conn.take_output().is_empty());
}

/// Pseudo-random bytes after the handshake never panic and always leave a consistent state.
#[test]
fn random_input_never_panics() {
    let mut seed: u64 = 0x2545_f491_4f6c_dd1d;
    let mut next = move || {
        seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        (seed >> 33) as u8
    };
    for round in 0..300 {
        let mut c = Client::local();
        c.open(10);
        c.open_channel(1);
        c.publish(1, "rk");
        let len = 8 + usize::from(next()) * 4;
        let mut bytes: Vec<u8> = (0..len).map(|_| next()).collect();
        // Make some rounds look like frames so the decoder gets past the first byte.
        if round % 2 == 0 {
            bytes[0] = [1, 2, 3, 8][round % 4];
            bytes[1] = 0;
            bytes[2] = next() % 3;
        }
        for chunk in bytes.chunks(1 + usize::from(next() % 16)) {
            c.send_bytes(chunk);
        }
        c.at(100_000).timeout();
        let _ = c.conn.take_output();
        let _ = c.commands();
        assert!(c.conn.is_closed(), "a dead peer is dropped eventually");
    }
}
