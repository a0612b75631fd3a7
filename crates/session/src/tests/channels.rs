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

/// When both sides close a channel at once, the client's channel.close gets close-ok.
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
    c.open_channel(1);
}

/// While a channel is Opening, broker effects other than open-ok are stale and dropped.
#[test]
fn stale_effects_are_dropped_while_opening() {
    let mut c = Client::local();
    c.open(60);
    c.send_method(1, ChannelOpen {});
    c.commands();
    let deliver = BasicDeliver {
        consumer_tag: short("ctag"),
        delivery_tag: 1,
        redelivered: false,
        exchange: short(""),
        routing_key: short("rk"),
    };
    c.effect(send(1, deliver));
    c.effect(send(1, BasicQosOk {}));
    assert!(c.frames().is_empty());
    c.effect(send(1, ChannelOpenOk {}));
    assert_eq!(c.methods(), vec![(1, ChannelOpenOk {}.into())]);
    c.effect(send(1, BasicQosOk {}));
    assert_eq!(c.methods(), vec![(1, BasicQosOk {}.into())]);
}

/// Effects for channels that are not open at all are dropped.
#[test]
fn effects_for_free_channels_are_dropped() {
    let mut c = Client::local();
    c.open(60);
    c.effect(send(5, BasicQosOk {}));
    c.effect(Effect::ChannelError { conn: CONN, channel: ChannelId(5), error: AmqpError::new(404, "x") });
    assert!(c.frames().is_empty());
}
