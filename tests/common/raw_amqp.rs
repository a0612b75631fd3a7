//! A raw AMQP 0-9-1 client over a socket, for end-to-end tests that must send what a library
//! client would not (crossing closes, stray frames, floods) and see every frame the broker sends.

use std::time::Duration;

use bytes::BytesMut;
use hourglass_wire::{
    encode_method_frame, ChannelOpen, ConnectionOpen, ConnectionStart, ConnectionStartOk, ConnectionTuneOk,
    FieldTable, Frame, FrameDecoder, LongStr, Method, ShortStr, PROTOCOL_HEADER,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::RunningBroker;

/// Bounds every wait on the broker so a bug fails the test instead of hanging it.
const STEP: Duration = Duration::from_secs(10);
const FRAME_MAX: u32 = 131_072;

/// A socket to the broker and what was read from it but not yet decoded.
pub struct RawAmqp {
    pub socket: TcpStream,
    input: BytesMut,
}

impl RawAmqp {
    /// Connects and sends the protocol header; returns the broker's connection.start.
    pub async fn greet(broker: &RunningBroker) -> (RawAmqp, ConnectionStart) {
        let mut socket = TcpStream::connect(broker.amqp).await.unwrap();
        socket.write_all(PROTOCOL_HEADER).await.unwrap();
        let mut raw = RawAmqp { socket, input: BytesMut::new() };
        match raw.next_method().await {
            Some((0, Method::ConnectionStart(start))) => (raw, *start),
            other => panic!("expected connection.start, got {other:?}"),
        }
    }

    /// Logged in as guest on `/` with `channels` open, heartbeats off.
    pub async fn open(broker: &RunningBroker, channels: &[u16]) -> RawAmqp {
        let (mut raw, _) = RawAmqp::greet(broker).await;
        raw.send(&[(0, plain_start_ok("guest").into())]).await;
        assert!(matches!(raw.next_method().await, Some((0, Method::ConnectionTune(_)))));
        let tune_ok = ConnectionTuneOk { channel_max: 16, frame_max: FRAME_MAX, heartbeat: 0 };
        let open = ConnectionOpen { virtual_host: ShortStr::from_static("/") };
        raw.send(&[(0, tune_ok.into()), (0, open.into())]).await;
        assert!(matches!(raw.next_method().await, Some((0, Method::ConnectionOpenOk(_)))));
        for &channel in channels {
            raw.send(&[(channel, ChannelOpen {}.into())]).await;
            let answer = raw.next_method().await;
            assert!(matches!(answer, Some((c, Method::ChannelOpenOk(_))) if c == channel), "{answer:?}");
        }
        raw
    }

    /// Sends methods as frames, in one write.
    pub async fn send(&mut self, frames: &[(u16, Method)]) {
        let mut out = BytesMut::new();
        for (channel, method) in frames {
            encode_method_frame(*channel, method, &mut out);
        }
        self.socket.write_all(&out).await.unwrap();
    }

    /// Reads until the next method frame (its channel and the method), or None once the socket
    /// closes. Other frames are skipped, all those already read before the socket is read again.
    pub async fn next_method(&mut self) -> Option<(u16, Method)> {
        let mut decoder = FrameDecoder::new(FRAME_MAX);
        loop {
            match decoder.decode(&mut self.input) {
                Ok(Some(Frame::Method { channel, method })) => return Some((channel, method)),
                Ok(Some(_)) => continue,
                Ok(None) | Err(_) => {}
            }
            let mut chunk = [0u8; 4096];
            let read = tokio::time::timeout(STEP, self.socket.read(&mut chunk))
                .await
                .expect("broker answers in time");
            match read {
                Ok(0) | Err(_) => return None,
                Ok(n) => self.input.extend_from_slice(&chunk[..n]),
            }
        }
    }
}

/// PLAIN start-ok as guest with `password` and no client properties (so no capabilities).
pub fn plain_start_ok(password: &str) -> ConnectionStartOk {
    ConnectionStartOk {
        client_properties: FieldTable::new(),
        mechanism: ShortStr::from_static("PLAIN"),
        response: LongStr::from(format!("\0guest\0{password}").as_str()),
        locale: ShortStr::from_static("en_US"),
    }
}
