//! Bytes waiting for the socket: frames are encoded straight into one buffer, which the server
//! takes with [`Output::take`] and writes. Also remembers when we last wrote, for heartbeats.

use bytes::BytesMut;
use hourglass_broker::Timestamp;
use hourglass_wire::{EncodedProperties, Method};

/// The encoded frames not yet handed to the server.
#[derive(Debug)]
pub(crate) struct Output {
    buf: BytesMut,
    /// The frame size body frames are split to (the negotiated frame_max).
    frame_max: u32,
    last_write: Timestamp,
}

impl Output {
    pub(crate) fn new(frame_max: u32, now: Timestamp) -> Self {
        Output { buf: BytesMut::new(), frame_max, last_write: now }
    }

    pub(crate) fn set_frame_max(&mut self, frame_max: u32) {
        self.frame_max = frame_max;
    }

    /// A method frame without content.
    pub(crate) fn method(&mut self, channel: u16, method: &Method, now: Timestamp) {
        debug_assert!(!method.has_content(), "{} needs content", method.name());
        hourglass_wire::encode_method_frame(channel, method, &mut self.buf);
        self.wrote(now);
    }

    /// A method frame, its content header (the properties copied as they are encoded) and its
    /// body split into frames of at most frame_max.
    pub(crate) fn content(
        &mut self,
        channel: u16,
        method: &Method,
        properties: &EncodedProperties,
        body: &[u8],
        now: Timestamp,
    ) {
        hourglass_wire::encode_content(channel, method, properties, body, self.frame_max, &mut self.buf);
        self.wrote(now);
    }

    pub(crate) fn heartbeat(&mut self, now: Timestamp) {
        hourglass_wire::encode_heartbeat_frame(&mut self.buf);
        self.wrote(now);
    }

    /// Raw bytes (our protocol header).
    pub(crate) fn raw(&mut self, bytes: &[u8], now: Timestamp) {
        self.buf.extend_from_slice(bytes);
        self.wrote(now);
    }

    /// Everything encoded so far; the buffer keeps its spare capacity for the next frames.
    pub(crate) fn take(&mut self) -> BytesMut {
        self.buf.split()
    }

    /// When we last encoded anything (the server writes promptly, so this stands for "wrote").
    pub(crate) fn last_write(&self) -> Timestamp {
        self.last_write
    }

    fn wrote(&mut self, now: Timestamp) {
        self.last_write = self.last_write.max(now);
    }
}
