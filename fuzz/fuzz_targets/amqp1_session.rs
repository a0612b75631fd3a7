//! Fuzzes the AMQP 1.0 connection behind a valid handshake (SASL PLAIN guest/guest, open, a
//! session with a sending and a receiving link): arbitrary bytes in input-chosen chunks, with
//! broker effects (deliveries, confirms, channel errors) between them, must never panic it, and
//! whatever it writes must be well-formed AMQP 1.0 frames.
#![no_main]

use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use hourglass_broker::{AmqpError, ChannelId, ConnectionId, Effect, Message, Timestamp};
use hourglass_session::{Connection, PeerInfo, SessionConfig, StaticUsers};
use hourglass_wire::amqp1::{
    decode_frame_header, encode_frame_header, encode_value, FrameKind, Performative, Value,
};
use hourglass_wire::{EncodedProperties, ShortStr};
use libfuzzer_sys::fuzz_target;

const CONN: ConnectionId = ConnectionId(1);

fn frame(out: &mut BytesMut, kind: FrameKind, performative: Performative) {
    let mut body = BytesMut::new();
    encode_value(&performative.to_value(), &mut body);
    encode_frame_header(out, kind, 0, body.len() as u32);
    out.extend_from_slice(&body);
}

fn terminus(code: u64, address: &str) -> Value {
    Value::Described(Box::new(Value::Ulong(code)), Box::new(Value::List(vec![Value::String(address.into())])))
}

fn handshake() -> BytesMut {
    let mut out = BytesMut::new();
    out.extend_from_slice(b"AMQP\x03\x01\x00\x00");
    let init = Performative::SaslInit {
        mechanism: "PLAIN".into(),
        initial_response: Some(Bytes::from_static(b"\0guest\0guest")),
        hostname: None,
    };
    frame(&mut out, FrameKind::Sasl, init);
    out.extend_from_slice(b"AMQP\x00\x01\x00\x00");
    let open = Performative::Open {
        container_id: "fuzz".into(),
        hostname: None,
        max_frame_size: 4096,
        channel_max: 4,
        idle_time_out_ms: Some(1000),
        properties: Value::Null,
    };
    frame(&mut out, FrameKind::Amqp, open);
    let begin = Performative::Begin {
        remote_channel: None,
        next_outgoing_id: 0,
        incoming_window: 50,
        outgoing_window: 50,
        handle_max: 8,
    };
    frame(&mut out, FrameKind::Amqp, begin);
    for (handle, receiver, address) in
        [(0, false, "/queues/q"), (1, true, "/queues/q"), (2, false, "/management")]
    {
        let (source, target) = if receiver {
            (terminus(0x28, address), terminus(0x29, ""))
        } else {
            (terminus(0x28, ""), terminus(0x29, address))
        };
        let attach = Performative::Attach {
            name: format!("l{handle}"),
            handle,
            receiver,
            snd_settle_mode: 0,
            rcv_settle_mode: 0,
            source,
            target,
            initial_delivery_count: (!receiver).then_some(0),
        };
        frame(&mut out, FrameKind::Amqp, attach);
    }
    out
}

fn effect(choice: u8, tag: u64) -> Effect {
    let channel = ChannelId(u16::from(choice % 4));
    match choice % 3 {
        0 => {
            let message = Message::new(
                ShortStr::from_static(""),
                ShortStr::from_static("q"),
                EncodedProperties::default(),
                Bytes::from(vec![choice; usize::from(choice) * 40]),
            );
            Effect::Deliver {
                conn: CONN,
                channel,
                consumer_tag: ShortStr::default(),
                delivery_tag: tag,
                redelivered: false,
                message: Arc::new(message),
            }
        }
        1 => Effect::Confirm { conn: CONN, channel, delivery_tag: tag, multiple: choice > 128, ack: true },
        _ => Effect::ChannelError { conn: CONN, channel, error: AmqpError::new(404, "gone") },
    }
}

fuzz_target!(|data: &[u8]| {
    let config = Arc::new(SessionConfig::new(Arc::new(StaticUsers::default())));
    let peer =
        PeerInfo { addr: "127.0.0.1:1".to_owned(), local: "127.0.0.1:5672".to_owned(), is_loopback: true };
    let mut now = Timestamp::from_millis(1_700_000_000_000);
    let mut session = Connection::new(CONN, peer, config, now);
    let mut input = handshake();
    session.handle_input(&mut input, now);
    let mut output = session.take_output();
    let mut rest = data;
    let mut tag = 0;
    while !rest.is_empty() && !session.is_closed() {
        let choice = rest[0];
        let take = (usize::from(choice) % 64 + 1).min(rest.len());
        input.extend_from_slice(&rest[..take]);
        rest = &rest[take..];
        now = now.saturating_add_millis(u64::from(choice % 16) * 50);
        session.handle_input(&mut input, now);
        tag += 1;
        session.handle_effect(effect(choice, tag), now);
        session.handle_timeout(now);
        while session.poll_command().is_some() {}
        output.extend_from_slice(&session.take_output());
    }
    // Our two protocol headers, then frames only.
    assert!(output.len() >= 16 && &output[..8] == b"AMQP\x03\x01\x00\x00");
    let mut at = 8;
    while at < output.len() {
        if output[at..].starts_with(b"AMQP") {
            at += 8;
            continue;
        }
        let header = decode_frame_header(&output[at..], u32::MAX)
            .expect("a well-formed frame")
            .expect("a whole frame header");
        assert!(at + header.size as usize <= output.len(), "a frame cut short");
        at += header.size as usize;
    }
});
