//! Channel numbers: open, close, errors and stale effects.

use super::*;

/// channel.open is forwarded and the broker's open-ok reaches the client.
#[test]
fn channel_open_is_forwarded() {
    let mut c = Client::local();
    c.open(60);
    c.open_channel(1);
}

/// A method on a channel never opened is RabbitMQ's 504 "expected 'channel.open'".
#[test]
fn method_on_unopened_channel_is_504() {
    let mut c = Client::local();
    c.open(60);
    c.send_method(3, BasicQos { prefetch_size: 0, prefetch_count: 1, global: false });
    let text = "CHANNEL_ERROR - expected 'channel.open'";
    assert_eq!(c.connection_close(), close_of(504, text, 60, 10));
}

/// A content header on a channel never opened is RabbitMQ's assembler 505.
#[test]
fn header_on_unopened_channel_is_505() {
    let mut c = Client::local();
    c.open(60);
    c.send_header(3, 60, 0);
    let text = "UNEXPECTED_FRAME - expected method frame, got non method frame instead";
    assert_eq!(c.connection_close(), close_of(505, text, 0, 0));
}

/// A content header where a method is due is 505 whatever its payload holds: one too short to be
/// a header at all is not parsed first (and so not 502), as the Java client's
/// `UnexpectedFrames#missingMethod` expects.
#[test]
fn malformed_header_where_a_method_is_due_is_505() {
    let mut c = Client::local();
    c.open(60);
    c.open_channel(1);
    // type 2 (header), channel 1, size 2, payload [0, 60], frame end
    c.send_bytes(&[2, 0, 1, 0, 0, 0, 2, 0, 60, 0xCE]);
    let text = "UNEXPECTED_FRAME - expected method frame, got non method frame instead";
    assert_eq!(c.connection_close(), close_of(505, text, 0, 0));
}

/// Opening an open channel again is RabbitMQ's 504 "second 'channel.open' seen".
#[test]
fn second_channel_open_is_504() {
    let mut c = Client::local();
    c.open(60);
    c.open_channel(1);
    c.send_method(1, ChannelOpen {});
    let text = "CHANNEL_ERROR - second 'channel.open' seen";
    assert_eq!(c.connection_close(), close_of(504, text, 20, 10));
}

/// More channels than the negotiated channel_max is RabbitMQ's 530.
#[test]
fn channel_max_is_enforced() {
    let mut c = Client::local();
    c.send_bytes(PROTOCOL_HEADER);
    c.send_method(0, start_ok("PLAIN", b"\0guest\0guest"));
    c.send_method(0, ConnectionTuneOk { channel_max: 2, frame_max: 131_072, heartbeat: 0 });
    c.send_method(0, ConnectionOpen { virtual_host: short("/") });
    c.frames();
    c.commands();
    c.open_channel(1);
    c.open_channel(500);
    c.send_method(7, ChannelOpen {});
    let text = "NOT_ALLOWED - number of channels opened (2) has reached the negotiated channel_max (2)";
    assert_eq!(c.connection_close(), close_of(530, text, 0, 0));
}

/// Server-only methods and connection methods on a channel are RabbitMQ's 503.
#[test]
fn server_only_method_is_503() {
    let mut c = Client::local();
    c.open(60);
    c.open_channel(1);
    c.send_method(1, BasicGetEmpty {});
    let text = "COMMAND_INVALID - unimplemented method";
    assert_eq!(c.connection_close(), close_of(503, text, 60, 72));
}

/// Client channel.close is forwarded; broker effects but close-ok are dropped meanwhile, and
/// close-ok frees the number for a new channel.open.
#[test]
fn client_channel_close_waits_for_broker_close_ok() {
    let mut c = Client::local();
    c.open(60);
    c.open_channel(1);
    let close = ChannelClose { reply_code: 200, reply_text: short("bye"), class_id: 0, method_id: 0 };
    c.send_method(1, close.clone());
    assert_eq!(
        c.commands(),
        vec![Command::Method { conn: CONN, channel: ChannelId(1), method: close.into() }]
    );
    c.send_method(1, BasicQos { prefetch_size: 0, prefetch_count: 1, global: false });
    assert!(c.commands().is_empty());
    c.effect(send(1, BasicQosOk {}));
    assert!(c.frames().is_empty());
    c.effect(send(1, ChannelCloseOk {}));
    assert_eq!(c.methods(), vec![(1, ChannelCloseOk {}.into())]);
    c.open_channel(1);
}

/// A ChannelError effect sends channel.close (text cut to 255 bytes) and drops the channel's
/// frames and effects until the client's close-ok frees it.
#[test]
fn channel_error_closes_the_channel_until_close_ok() {
    let mut c = Client::local();
    c.open(60);
    c.open_channel(1);
    let long = format!("NOT_FOUND - no queue '{}' in vhost '/'", "q".repeat(300));
    let error = AmqpError { reply_code: 404, reply_text: long.clone(), class_id: 50, method_id: 10 };
    c.effect(Effect::ChannelError { conn: CONN, channel: ChannelId(1), error });
    let methods = c.methods();
    let [(1, Method::ChannelClose(close))] = methods.as_slice() else {
        panic!("not channel.close");
    };
    assert_eq!((close.reply_code, close.class_id, close.method_id), (404, 50, 10));
    assert_eq!(close.reply_text.as_bytes(), &long.as_bytes()[..255]);
    c.send_method(1, BasicQos { prefetch_size: 0, prefetch_count: 1, global: false });
    c.publish(1, "rk");
    c.send_header(1, 60, 3);
    c.send_body(1, b"abc");
    c.effect(send(1, BasicQosOk {}));
    assert!(c.commands().is_empty() && c.frames().is_empty());
    c.send_method(1, ChannelCloseOk {});
    assert!(c.commands().is_empty() && c.frames().is_empty());
    c.open_channel(1);
}

/// When both sides close a channel at once, the client's channel.close gets close-ok, and the
/// channel stays closing until the client's close-ok to ours (rabbit_channel's `closing` state);
/// that close-ok then frees it, with no fault.
#[test]
fn crossing_channel_closes_are_both_answered() {
    let mut c = Client::local();
    c.open(60);
    c.open_channel(1);
    c.effect(Effect::ChannelError { conn: CONN, channel: ChannelId(1), error: AmqpError::new(406, "x") });
    c.frames();
    c.send_method(1, ChannelClose { reply_code: 200, reply_text: short(""), class_id: 0, method_id: 0 });
    assert_eq!(c.methods(), vec![(1, ChannelCloseOk {}.into())]);
    assert!(c.commands().is_empty());
    c.send_method(1, ChannelCloseOk {});
    assert!(c.commands().is_empty() && c.frames().is_empty(), "the close-ok is taken, not a fault");
    c.open_channel(1);
}

/// While a channel is Opening, broker effects other than open-ok are stale and dropped.
#[test]
fn stale_effects_are_dropped_while_opening() {
    let mut c = Client::local();
    c.open(60);
    c.send_method(1, ChannelOpen {});
    c.commands();
    c.effect(delivery(1));
    c.effect(send(1, BasicQosOk {}));
    assert!(c.frames().is_empty());
    c.effect(send(1, ChannelOpenOk {}));
    assert_eq!(c.methods(), vec![(1, ChannelOpenOk {}.into())]);
    c.effect(send(1, BasicQosOk {}));
    assert_eq!(c.methods(), vec![(1, BasicQosOk {}.into())]);
}

/// A delivery (the broker's compact effect) on `channel`, of a 3-byte message.
fn delivery(channel: u16) -> Effect {
    let message = hourglass_broker::Message::new(
        short(""),
        short("rk"),
        properties(),
        bytes::Bytes::from_static(b"abc"),
    );
    Effect::Deliver {
        conn: CONN,
        channel: ChannelId(channel),
        consumer_tag: short("ctag"),
        delivery_tag: 1,
        redelivered: false,
        message: std::sync::Arc::new(message),
    }
}

/// Effects for channels that are not open at all, or that the client is closing, are dropped;
/// a delivery among them too.
#[test]
fn effects_for_free_channels_are_dropped() {
    let mut c = Client::local();
    c.open(60);
    c.effect(delivery(5));
    c.open_channel(1);
    c.send_method(1, ChannelClose { reply_code: 200, reply_text: short("bye"), class_id: 0, method_id: 0 });
    c.commands();
    c.effect(delivery(1));
    assert!(c.frames().is_empty(), "no delivery on a channel the client closes");
    c.effect(send(5, BasicQosOk {}));
    c.effect(Effect::ChannelError { conn: CONN, channel: ChannelId(5), error: AmqpError::new(404, "x") });
    assert!(c.frames().is_empty());
}

/// Users and vhosts with RabbitMQ's limits, for the tests below: guest may have 2 channels,
/// and vhost `/` 2 connections.
struct Limited;

impl Authenticator for Limited {
    fn authenticate(&self, user: &str, password: &str, loopback: bool) -> Result<(), LoginRefused> {
        StaticUsers::default().authenticate(user, password, loopback)
    }
    fn vhost_access(&self, user: &str, vhost: &str) -> VhostAccess {
        StaticUsers::default().vhost_access(user, vhost)
    }
    fn client_limits(&self, _user: &str, _vhost: &str) -> ClientLimits {
        ClientLimits { vhost_max_connections: Some(2), user_max_connections: None }
    }
    fn user_max_channels(&self, _user: &str) -> Option<u64> {
        Some(2)
    }
}

/// A user's `max-channels` counts channels across its connections; past it the connection
/// closes with RabbitMQ's 530 naming no method, and the channel.open never reaches the broker.
/// A channel's close-ok, and a connection's close, give the places back.
#[test]
fn user_channel_limit_closes_the_connection_and_closes_give_places_back() {
    let config = Arc::new(SessionConfig::new(Arc::new(Limited)));
    let occupancy = config.occupancy.clone();
    let client = |config: &Arc<SessionConfig>| {
        let mut c = Client::new(SessionConfig::clone(config), true);
        c.open(0);
        c
    };
    let (mut first, mut second) = (client(&config), client(&config));
    assert_eq!(occupancy.vhost_connections("/"), 2);
    first.open_channel(1);
    second.open_channel(1);
    second.send_method(2, ChannelOpen {});
    assert!(second.commands().is_empty(), "the refused channel.open is not forwarded");
    let text = "NOT_ALLOWED - number of channels opened for user 'guest' has reached the maximum allowed user limit of (2)";
    assert_eq!(second.connection_close(), close_of(530, text, 0, 0));
    assert_eq!(occupancy.user_connections_and_channels("guest"), (1, 1), "the closing connection let go");

    first.open_channel(2);
    first.send_method(
        2,
        ChannelClose { reply_code: 200, reply_text: short("bye"), class_id: 0, method_id: 0 },
    );
    first.effect(send(2, ChannelCloseOk {}));
    assert_eq!(first.methods(), vec![(2, ChannelCloseOk {}.into())]);
    first.commands();
    assert_eq!(occupancy.user_connections_and_channels("guest"), (1, 1));
    first.open_channel(3);
    first.send_method(
        0,
        ConnectionClose { reply_code: 200, reply_text: short("bye"), class_id: 0, method_id: 0 },
    );
    assert_eq!(
        occupancy.user_connections_and_channels("guest"),
        (0, 0),
        "freed at close-ok, not at the socket's end"
    );
    assert_eq!(occupancy.vhost_connections("/"), 0);
}

/// A vhost's `max-connections` refuses connection.open past it with RabbitMQ's 530 on
/// connection.open; a connection dropped without a close gives its place back.
#[test]
fn vhost_connection_limit_refuses_open_and_a_dropped_connection_frees_its_place() {
    let config = Arc::new(SessionConfig::new(Arc::new(Limited)));
    let open = |config: &Arc<SessionConfig>| {
        let mut c = Client::new(SessionConfig::clone(config), true);
        c.send_bytes(PROTOCOL_HEADER);
        c.send_method(0, start_ok("PLAIN", b"\0guest\0guest"));
        c.send_method(0, ConnectionTuneOk { channel_max: 2047, frame_max: 131_072, heartbeat: 0 });
        c.frames();
        c.send_method(0, ConnectionOpen { virtual_host: short("/") });
        c
    };
    let (mut a, mut b) = (open(&config), open(&config));
    a.frames();
    b.frames();
    let mut third = open(&config);
    let text = "NOT_ALLOWED - access to vhost '/' refused for user 'guest': connection limit (2) is reached";
    assert_eq!(third.connection_close(), close_of(530, text, 10, 40));
    assert!(third.commands().is_empty(), "the broker never hears of it");
    drop(a);
    let mut fourth = open(&config);
    assert!(matches!(fourth.methods().as_slice(), [(0, Method::ConnectionOpenOk(_))]));
}
