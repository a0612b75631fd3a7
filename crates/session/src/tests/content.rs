//! Publishing: content assembly and sending content.

use super::*;

/// A publish with body_size 0 completes on its header, without body frames.
#[test]
fn publish_with_empty_body() {
    let mut c = Client::local();
    c.open(60);
    c.open_channel(1);
    c.publish(1, "rk");
    c.send_header(1, 60, 0);
    assert_eq!(c.commands(), vec![expected_publish(b"")]);
}

/// A one-frame body is handed on as a slice of the input buffer, not a copy.
#[test]
fn publish_with_one_body_frame_is_zero_copy() {
    let mut c = Client::local();
    c.open(60);
    c.open_channel(1);
    c.publish(1, "rk");
    c.send_header(1, 60, 5);
    let mut input = BytesMut::new();
    encode_body_frame(1, b"hello", &mut input);
    let range = input.as_ptr() as usize..input.as_ptr() as usize + input.len();
    c.conn.handle_input(&mut input, c.now);
    let commands = c.commands();
    assert_eq!(commands, vec![expected_publish(b"hello")]);
    let Command::Publish { publish, .. } = &commands[0] else { unreachable!() };
    assert!(range.contains(&(publish.body.as_ptr() as usize)), "body was copied");
}

/// The properties are handed on as the header frame carried them: a slice of the input, with an
/// unusual but valid encoding (a continuation flags word) kept byte for byte.
#[test]
fn publish_properties_are_a_slice_of_the_header_frame() {
    let mut c = Client::local();
    c.open(60);
    c.open_channel(1);
    c.publish(1, "rk");
    // delivery-mode 2 behind a continuation word (§4.2.6.1), as RabbitMQ accepts it.
    let raw = [0x10, 0x01, 0x00, 0x00, 2];
    let properties = EncodedProperties::split_from(&mut Bytes::copy_from_slice(&raw)).unwrap();
    let mut input = BytesMut::new();
    encode_header_frame(1, &ContentHeader { class_id: 60, body_size: 0, properties }, &mut input);
    let range = input.as_ptr() as usize..input.as_ptr() as usize + input.len();
    c.conn.handle_input(&mut input, c.now);
    let commands = c.commands();
    let [Command::Publish { publish, .. }] = &commands[..] else { panic!("{commands:?}") };
    assert_eq!(publish.properties.as_bytes(), raw);
    assert_eq!(publish.properties.delivery_mode(), Some(2));
    assert!(range.contains(&(publish.properties.as_bytes().as_ptr() as usize)), "properties were copied");
}

/// What one read of the socket yields goes to the broker as one batch, in order; the next batch
/// starts empty.
#[test]
fn commands_of_one_read_are_taken_at_once_in_order() {
    let mut c = Client::local();
    c.open(60);
    c.open_channel(1);
    let mut input = BytesMut::new();
    for body in [&b"one"[..], b"two"] {
        let publish =
            BasicPublish { exchange: short(""), routing_key: short("rk"), mandatory: true, immediate: false };
        encode_method_frame(1, &publish.into(), &mut input);
        let properties = properties();
        encode_header_frame(
            1,
            &ContentHeader { class_id: 60, body_size: body.len() as u64, properties },
            &mut input,
        );
        encode_body_frame(1, body, &mut input);
    }
    c.conn.handle_input(&mut input, c.now);
    assert_eq!(c.conn.take_commands(), vec![expected_publish(b"one"), expected_publish(b"two")]);
    assert_eq!(c.conn.take_commands(), vec![]);
    c.publish(1, "rk");
    c.send_header(1, 60, 0);
    assert_eq!(c.conn.take_commands(), vec![expected_publish(b"")]);
}

/// Three body frames are joined into one body; the message is emitted only when complete.
#[test]
fn publish_with_three_body_frames() {
    let mut c = Client::local();
    c.open(60);
    c.open_channel(1);
    c.publish(1, "rk");
    c.send_header(1, 60, 9);
    c.send_body(1, b"abc");
    c.send_body(1, b"");
    c.send_body(1, b"def");
    assert!(c.commands().is_empty());
    c.send_body(1, b"ghi");
    assert_eq!(c.commands(), vec![expected_publish(b"abcdefghi")]);
}

/// Publishes on two channels interleave frame by frame without mixing.
#[test]
fn interleaved_publishes_on_two_channels() {
    let mut c = Client::local();
    c.open(60);
    c.open_channel(1);
    c.open_channel(2);
    c.publish(1, "rk");
    c.publish(2, "rk");
    c.send_header(2, 60, 2);
    c.send_header(1, 60, 2);
    c.send_body(1, b"11");
    c.send_body(2, b"22");
    let commands = c.commands();
    assert_eq!(commands[0], expected_publish(b"11"));
    let Command::Publish { channel, publish, .. } = &commands[1] else { panic!("not a publish") };
    assert_eq!((channel.0, &publish.body[..]), (2, &b"22"[..]));
}

/// Frames of the wrong kind during assembly are RabbitMQ's 505 texts, naming basic.publish.
#[test]
fn unexpected_frames_during_assembly_are_505() {
    let mut c = Client::local();
    c.open(60);
    c.open_channel(1);
    c.publish(1, "rk");
    c.send_method(1, BasicQos { prefetch_size: 0, prefetch_count: 1, global: false });
    let text =
        "UNEXPECTED_FRAME - expected content header for class 60, got non content header frame instead";
    assert_eq!(c.connection_close(), close_of(505, text, 60, 40));

    let mut c = Client::local();
    c.open(60);
    c.open_channel(1);
    c.publish(1, "rk");
    c.send_header(1, 60, 4);
    c.send_header(1, 60, 4);
    let text = "UNEXPECTED_FRAME - expected content body, got non content body frame instead";
    assert_eq!(c.connection_close(), close_of(505, text, 60, 40));

    let mut c = Client::local();
    c.open(60);
    c.open_channel(1);
    c.publish(1, "rk");
    c.send_header(1, 50, 4);
    let text = "UNEXPECTED_FRAME - expected content header for class 60, got one for class 50 instead";
    assert_eq!(c.connection_close(), close_of(505, text, 60, 40));
}

/// A body frame past the declared size is RabbitMQ's 501.
#[test]
fn body_overflow_is_501() {
    let mut c = Client::local();
    c.open(60);
    c.open_channel(1);
    c.publish(1, "rk");
    c.send_header(1, 60, 2);
    c.send_body(1, b"abc");
    let text = "FRAME_ERROR - content body frame exceeds remaining content size";
    assert_eq!(c.connection_close(), close_of(501, text, 60, 40));
}

/// A body larger than max_message_size closes only the channel with 406, tells the broker
/// (ChannelAborted), and drops the body frames that follow.
#[test]
fn body_too_large_is_406_channel_close() {
    let mut config = config();
    config.max_message_size = 4;
    let mut c = Client::new(config, true);
    c.open(60);
    c.open_channel(1);
    c.publish(1, "rk");
    c.send_header(1, 60, 5);
    let close = ChannelClose {
        reply_code: 406,
        reply_text: short("PRECONDITION_FAILED - message size 5 is larger than configured max size 4"),
        class_id: 60,
        method_id: 40,
    };
    assert_eq!(c.methods(), vec![(1, close.into())]);
    assert_eq!(c.commands(), vec![Command::ChannelAborted { conn: CONN, channel: ChannelId(1) }]);
    c.send_body(1, b"hello");
    assert!(c.commands().is_empty() && c.frames().is_empty());
    c.send_method(1, ChannelCloseOk {});
    c.open_channel(1);
}

/// A body over RabbitMQ's hard 512 MiB limit closes the connection with 501.
#[test]
fn body_over_hard_limit_is_501() {
    let mut config = config();
    config.max_message_size = u64::MAX;
    let mut c = Client::new(config, true);
    c.open(60);
    c.open_channel(1);
    c.publish(1, "rk");
    c.send_header(1, 60, MAX_MESSAGE_SIZE_LIMIT + 1);
    let text = "FRAME_ERROR - content body size 536870913 exceeds maximum allowed size 536870912";
    assert_eq!(c.connection_close(), close_of(501, text, 60, 40));
}

/// basic.publish with immediate=true is RabbitMQ's 540.
#[test]
fn immediate_publish_is_540() {
    let mut c = Client::local();
    c.open(60);
    c.open_channel(1);
    c.send_method(
        1,
        BasicPublish { exchange: short(""), routing_key: short("rk"), mandatory: false, immediate: true },
    );
    assert_eq!(c.connection_close(), close_of(540, "NOT_IMPLEMENTED - immediate=true", 60, 40));
}

/// A Send effect with content is written as method + header + body frames split to frame_max.
#[test]
fn send_with_content_is_split_by_frame_max() {
    let mut c = Client::local();
    c.send_bytes(PROTOCOL_HEADER);
    c.send_method(0, start_ok("PLAIN", b"\0guest\0guest"));
    c.send_method(0, ConnectionTuneOk { channel_max: 10, frame_max: 4096, heartbeat: 0 });
    c.send_method(0, ConnectionOpen { virtual_host: short("/") });
    c.frames();
    c.commands();
    c.open_channel(1);
    let body: Vec<u8> = (0..10_000u32).map(|i| i as u8).collect();
    let message = Message::new(short("x"), short("rk"), properties(), Bytes::from(body.clone()));
    let deliver = BasicDeliver {
        consumer_tag: short("ctag"),
        delivery_tag: 1,
        redelivered: false,
        exchange: short("x"),
        routing_key: short("rk"),
    };
    c.effect(Effect::Deliver {
        conn: CONN,
        channel: ChannelId(1),
        consumer_tag: deliver.consumer_tag.clone(),
        delivery_tag: deliver.delivery_tag,
        redelivered: deliver.redelivered,
        message: Arc::new(message),
    });
    let frames = c.frames();
    assert_eq!(frames.len(), 2 + 3, "10000 bytes in frames of 4088");
    assert_eq!(frames[0], Frame::Method { channel: 1, method: deliver.into() });
    let Frame::Header { channel: 1, header } = &frames[1] else { panic!("no header") };
    assert_eq!((header.class_id, header.body_size), (60, 10_000));
    assert_eq!(header.properties, properties());
    let mut joined = Vec::new();
    for frame in &frames[2..] {
        let Frame::Body { channel: 1, payload } = frame else { panic!("not a body frame") };
        assert!(payload.len() <= 4096 - 8);
        joined.extend_from_slice(payload);
    }
    assert_eq!(joined, body);
}

/// A delivered message's properties are written exactly as they were received, not re-encoded
/// (RabbitMQ reuses the received encoding of a message it did not change).
#[test]
fn delivered_properties_are_the_received_bytes() {
    let mut c = Client::local();
    c.open(60);
    c.open_channel(1);
    let raw = [0x10, 0x01, 0x00, 0x00, 2];
    let properties = EncodedProperties::split_from(&mut Bytes::copy_from_slice(&raw)).unwrap();
    let message = Message::new(short("x"), short("rk"), properties, Bytes::from_static(b"body"));
    let get_ok = BasicGetOk {
        delivery_tag: 1,
        redelivered: false,
        exchange: short("x"),
        routing_key: short("rk"),
        message_count: 0,
    };
    c.effect(Effect::send(CONN, ChannelId(1), get_ok, Some(Arc::new(message))));
    let frames = c.frames();
    let Some(Frame::Header { header, .. }) = frames.get(1) else { panic!("{frames:?}") };
    assert_eq!(header.properties.as_bytes(), raw);
}
