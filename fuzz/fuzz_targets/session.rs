//! Fuzzes the session state machine behind a valid handshake: after the protocol header,
//! start-ok (PLAIN guest/guest), tune-ok and open, arbitrary bytes in input-chosen chunks must
//! never panic it, and whatever it answers must be well-formed frames.
#![no_main]

use std::sync::Arc;

use bytes::BytesMut;
use hourglass_broker::{ConnectionId, Timestamp};
use hourglass_session::{Connection, PeerInfo, SessionConfig, StaticUsers};
use hourglass_wire::{
    encode_method_frame, ConnectionOpen, ConnectionStartOk, ConnectionTuneOk, FieldTable, FrameDecoder,
    LongStr, ShortStr, PROTOCOL_HEADER,
};
use libfuzzer_sys::fuzz_target;

fn handshake() -> BytesMut {
    let mut out = BytesMut::new();
    out.extend_from_slice(PROTOCOL_HEADER);
    let start_ok = ConnectionStartOk {
        client_properties: FieldTable::new(),
        mechanism: ShortStr::from_static("PLAIN"),
        response: LongStr::from("\0guest\0guest"),
        locale: ShortStr::from_static("en_US"),
    };
    encode_method_frame(0, &start_ok.into(), &mut out);
    let tune_ok = ConnectionTuneOk { channel_max: 16, frame_max: 4096, heartbeat: 0 };
    encode_method_frame(0, &tune_ok.into(), &mut out);
    encode_method_frame(0, &ConnectionOpen { virtual_host: ShortStr::from_static("/") }.into(), &mut out);
    out
}

fuzz_target!(|data: &[u8]| {
    let config = Arc::new(SessionConfig::new(Arc::new(StaticUsers::default())));
    let peer =
        PeerInfo { addr: "127.0.0.1:1".to_owned(), local: "127.0.0.1:5672".to_owned(), is_loopback: true };
    let mut now = Timestamp::from_millis(1_700_000_000_000);
    let mut session = Connection::new(ConnectionId(1), peer, config, now);
    let mut input = handshake();
    session.handle_input(&mut input, now);
    let mut rest = data;
    while !rest.is_empty() && !session.is_closed() {
        let take = (usize::from(rest[0]) % 64 + 1).min(rest.len());
        input.extend_from_slice(&rest[..take]);
        rest = &rest[take..];
        now = now.saturating_add_millis(7);
        session.handle_input(&mut input, now);
        session.handle_timeout(now);
        while session.poll_command().is_some() {}
    }
    // Everything the session wrote after the protocol header must decode as frames.
    let mut output = session.take_output();
    let mut decoder = FrameDecoder::new(0);
    while let Ok(Some(_)) = decoder.decode(&mut output) {}
});
