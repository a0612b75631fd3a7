//! Frames (AMQP 0-9-1 §4.2.3): `type(1) channel(2) size(4) payload
//! frame-end(0xCE)`, the protocol header (§4.2.2), an incremental sans-IO
//! [`FrameDecoder`] and the frame encoders, including content splitting into
//! body frames no larger than the negotiated frame-max (§4.2.6.2).

use bytes::{Buf, BufMut, Bytes, BytesMut};

use crate::codec::{short_len, short_str_octets};
use crate::error::DecodeError;
use crate::method::Method;
use crate::properties::EncodedProperties;
use crate::types::ShortStr;

/// The octet that ends every frame (§4.2.3).
pub const FRAME_END: u8 = 0xCE;
/// type + channel + size.
pub const FRAME_HEADER_SIZE: usize = 7;
/// Header plus frame-end octet: what a frame adds to its payload.
pub const FRAME_OVERHEAD: usize = 8;
/// The smallest frame-max a peer may negotiate (§4.2.3).
pub const FRAME_MIN_SIZE: u32 = 4096;
/// The AMQP 0-9-1 protocol header (§4.2.2).
pub const PROTOCOL_HEADER: &[u8; 8] = b"AMQP\x00\x00\x09\x01";

const FRAME_METHOD: u8 = 1;
const FRAME_HEADER: u8 = 2;
const FRAME_BODY: u8 = 3;
const FRAME_HEARTBEAT: u8 = 8;

/// Content header payload before the property flags: class-id(2),
/// weight(2), body-size(8) (§4.2.6.1).
const CONTENT_HEADER_FIXED: usize = 12;

/// One decoded frame.
#[derive(Clone, Debug, PartialEq)]
pub enum Frame {
    /// A method frame (type 1).
    Method {
        /// Channel number.
        channel: u16,
        /// The decoded method.
        method: Method,
    },
    /// A content header frame (type 2).
    Header {
        /// Channel number.
        channel: u16,
        /// The decoded header.
        header: ContentHeader,
    },
    /// A content body frame (type 3); the payload is a slice of the input.
    Body {
        /// Channel number.
        channel: u16,
        /// Body octets.
        payload: Bytes,
    },
    /// A heartbeat frame (type 8). The session must check `channel == 0`
    /// (RabbitMQ replies 501 FRAME_ERROR otherwise).
    Heartbeat {
        /// Channel number as received.
        channel: u16,
    },
}

/// Content header payload (§4.2.6.1). The weight field is written as 0 and
/// ignored on decode.
#[derive(Clone, Debug, PartialEq)]
pub struct ContentHeader {
    /// Class of the content-bearing method (60 for basic).
    pub class_id: u16,
    /// Total size of the following body frames.
    pub body_size: u64,
    /// The message properties as received: a slice of the frame, validated.
    pub properties: EncodedProperties,
}

impl ContentHeader {
    /// Size of the header frame's payload.
    pub fn encoded_len(&self) -> usize {
        CONTENT_HEADER_FIXED + self.properties.encoded_len()
    }

    /// Appends the header frame's payload.
    pub fn encode(&self, out: &mut BytesMut) {
        put_content_header(out, self.class_id, self.body_size, &self.properties);
    }

    /// Decodes a header frame's payload. A payload too short for the fixed
    /// part is a frame error (as RabbitMQ's `analyze_frame`); bad properties
    /// or octets after them are a syntax error.
    pub fn decode(mut payload: Bytes) -> Result<Self, DecodeError> {
        if payload.len() < CONTENT_HEADER_FIXED {
            return Err(DecodeError::Frame(format!(
                "content header payload of {} octets is too short",
                payload.len()
            )));
        }
        let class_id = payload.get_u16();
        let _weight = payload.get_u16();
        let body_size = payload.get_u64();
        let properties = EncodedProperties::split_from(&mut payload).map_err(|e| match e {
            DecodeError::Syntax { detail, .. } => DecodeError::Syntax { class_id, method_id: 0, detail },
            other => other,
        })?;
        if !payload.is_empty() {
            return Err(DecodeError::Syntax {
                class_id,
                method_id: 0,
                detail: format!("{} unexpected trailing octets", payload.len()),
            });
        }
        Ok(ContentHeader { class_id, body_size, properties })
    }
}

/// What a client opened the connection with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProtocolHeader {
    /// `AMQP 0 0 9 1`, or the legacy 0-9 header `AMQP 1 1 0 9` which
    /// RabbitMQ also serves as 0-9-1.
    Amqp091,
    /// Anything else: the server answers [`PROTOCOL_HEADER`] and closes.
    Other,
}

/// Consumes the 8-octet protocol header; `None` if fewer than 8 octets are
/// buffered (nothing is consumed then).
pub fn decode_protocol_header(buf: &mut BytesMut) -> Option<ProtocolHeader> {
    if buf.len() < PROTOCOL_HEADER.len() {
        return None;
    }
    let header = buf.split_to(PROTOCOL_HEADER.len());
    Some(match &header[..] {
        b"AMQP\x00\x00\x09\x01" | b"AMQP\x01\x01\x00\x09" => ProtocolHeader::Amqp091,
        _ => ProtocolHeader::Other,
    })
}

/// Incremental frame decoder over a receive buffer.
#[derive(Clone, Debug)]
pub struct FrameDecoder {
    max_frame_size: u32,
}

impl FrameDecoder {
    /// `max_frame_size` is the negotiated frame-max, i.e. including the 8
    /// octets of overhead. 0 means "no limit" as in connection.tune, but a
    /// server should always pass a real limit (before tuning:
    /// [`FRAME_MIN_SIZE`]) so a peer cannot make it buffer huge frames.
    pub fn new(max_frame_size: u32) -> Self {
        FrameDecoder { max_frame_size }
    }

    /// Changes the limit, e.g. after connection.tune-ok.
    pub fn set_max_frame_size(&mut self, max: u32) {
        self.max_frame_size = max;
    }

    /// The current limit.
    pub fn max_frame_size(&self) -> u32 {
        self.max_frame_size
    }

    /// Largest payload accepted. Like RabbitMQ (`FRAME_SIZE_FUDGE` in
    /// rabbit_reader.erl) we tolerate frames up to 8 octets over frame-max,
    /// because clients commonly get the overhead wrong.
    fn max_payload(&self) -> u64 {
        match self.max_frame_size {
            0 => u64::from(u32::MAX),
            max => u64::from(max),
        }
    }

    /// Decodes the next complete frame and removes it from `buf`.
    /// `Ok(None)`: need more bytes; nothing is allocated or consumed for a
    /// partial frame. The size and type are checked as soon as the 7-octet
    /// header is present, before waiting for the payload. After an error
    /// the stream is out of sync and the connection must be closed.
    pub fn decode(&mut self, buf: &mut BytesMut) -> Result<Option<Frame>, DecodeError> {
        let Some(head) = buf.get(..FRAME_HEADER_SIZE) else {
            return Ok(None);
        };
        let kind = head[0];
        let channel = u16::from_be_bytes([head[1], head[2]]);
        let size = u32::from_be_bytes([head[3], head[4], head[5], head[6]]);
        if !matches!(kind, FRAME_METHOD | FRAME_HEADER | FRAME_BODY | FRAME_HEARTBEAT) {
            return Err(DecodeError::Frame(format!("type {kind}, channel {channel}: unknown frame type")));
        }
        if u64::from(size) > self.max_payload() {
            return Err(DecodeError::Frame(format!(
                "type {kind}, all octets = <<>>: {{frame_too_large,{size},{}}}",
                u64::from(self.max_frame_size).saturating_sub(FRAME_OVERHEAD as u64)
            )));
        }
        let Ok(size) = usize::try_from(size) else {
            return Err(DecodeError::Frame(format!("frame size {size} too large")));
        };
        let total = FRAME_OVERHEAD.saturating_add(size);
        let Some(&end) = buf.get(total - 1) else {
            return Ok(None);
        };
        if end != FRAME_END {
            return Err(DecodeError::Frame(format!(
                "type {kind}, channel {channel}: {{invalid_frame_end_marker,{end}}}"
            )));
        }
        let mut payload = buf.split_to(total).freeze();
        payload.advance(FRAME_HEADER_SIZE);
        payload.truncate(size);
        let frame = match kind {
            FRAME_METHOD => Frame::Method { channel, method: Method::decode(payload)? },
            FRAME_HEADER => Frame::Header { channel, header: ContentHeader::decode(payload)? },
            FRAME_BODY => Frame::Body { channel, payload },
            _ if payload.is_empty() => Frame::Heartbeat { channel },
            _ => {
                return Err(DecodeError::Frame(format!(
                    "type {kind}, channel {channel}: heartbeat with {size} octets of payload"
                )))
            }
        };
        Ok(Some(frame))
    }
}

/// Writes the 7-octet frame header, room made for the whole frame.
fn put_frame_header(out: &mut BytesMut, kind: u8, channel: u16, size: usize) {
    out.reserve(FRAME_OVERHEAD + size);
    let [c0, c1] = channel.to_be_bytes();
    let [s0, s1, s2, s3] = u32::try_from(size).unwrap_or(u32::MAX).to_be_bytes();
    out.extend_from_slice(&[kind, c0, c1, s0, s1, s2, s3]);
}

/// A content header frame's payload (§4.2.6): class id, weight 0, body size, then the
/// properties as they are encoded.
fn put_content_header(out: &mut BytesMut, class_id: u16, body_size: u64, properties: &EncodedProperties) {
    let [k0, k1] = class_id.to_be_bytes();
    let [b0, b1, b2, b3, b4, b5, b6, b7] = body_size.to_be_bytes();
    out.extend_from_slice(&[k0, k1, 0, 0, b0, b1, b2, b3, b4, b5, b6, b7]);
    out.extend_from_slice(properties.as_bytes());
}

/// The channel of the frame at the start of `buf` when it is a content header frame, read from its
/// first three octets, so a receiver can decide whether one is expected at all before the header's
/// payload arrives or is parsed (RabbitMQ answers an unexpected one with 505, whatever it holds).
pub fn peek_content_header_channel(buf: &[u8]) -> Option<u16> {
    match buf {
        [FRAME_HEADER, high, low, ..] => Some(u16::from_be_bytes([*high, *low])),
        _ => None,
    }
}

/// Appends a method frame.
pub fn encode_method_frame(channel: u16, method: &Method, out: &mut BytesMut) {
    put_frame_header(out, FRAME_METHOD, channel, method.encoded_len());
    method.encode(out);
    out.put_u8(FRAME_END);
}

/// Appends a content header frame (weight 0).
pub fn encode_header_frame(channel: u16, header: &ContentHeader, out: &mut BytesMut) {
    put_frame_header(out, FRAME_HEADER, channel, header.encoded_len());
    header.encode(out);
    out.put_u8(FRAME_END);
}

/// Appends one body frame carrying `payload` (not split).
pub fn encode_body_frame(channel: u16, payload: &[u8], out: &mut BytesMut) {
    put_frame_header(out, FRAME_BODY, channel, payload.len());
    out.extend_from_slice(payload);
    out.extend_from_slice(&[FRAME_END]);
}

/// Appends a heartbeat frame (always on channel 0, §4.2.7).
pub fn encode_heartbeat_frame(out: &mut BytesMut) {
    put_frame_header(out, FRAME_HEARTBEAT, 0, 0);
    out.put_u8(FRAME_END);
}

/// Appends method + content header + body frames of at most `frame_max`
/// octets each (`frame_max` includes the 8-octet overhead; 0 = unlimited).
/// The properties are copied as they are encoded; an empty body produces no
/// body frame, as RabbitMQ does.
pub fn encode_content(
    channel: u16,
    method: &Method,
    properties: &EncodedProperties,
    body: &[u8],
    frame_max: u32,
    out: &mut BytesMut,
) {
    encode_method_frame(channel, method, out);
    encode_content_frames(channel, method.class_id(), properties, body, frame_max, out);
}

/// A basic.deliver's arguments, borrowed from the delivery they describe (the broker's compact
/// delivery effect) instead of gathered into a [`crate::BasicDeliver`].
#[derive(Clone, Copy, Debug)]
pub struct DeliverArgs<'a> {
    pub consumer_tag: &'a ShortStr,
    pub delivery_tag: u64,
    pub redelivered: bool,
    pub exchange: &'a ShortStr,
    pub routing_key: &'a ShortStr,
}

/// Appends basic.deliver with its content header and body frames: the octets [`encode_content`]
/// writes for the [`crate::BasicDeliver`] these arguments make, without making it.
pub fn encode_delivery(
    channel: u16,
    deliver: DeliverArgs<'_>,
    properties: &EncodedProperties,
    body: &[u8],
    frame_max: u32,
    out: &mut BytesMut,
) {
    use crate::BasicDeliver;
    // Every consumer's every message comes through here: the frames are written in a few
    // slices, fixed fields gathered into small arrays, after one reservation for the method
    // frame (`put_frame_header`) and one for the content's (`encode_content_frames`).
    let short = short_str_octets;
    let (tag, exchange, key) =
        (short(deliver.consumer_tag), short(deliver.exchange), short(deliver.routing_key));
    let size = 4 + 1 + tag.len() + 8 + 1 + 1 + exchange.len() + 1 + key.len();
    put_frame_header(out, FRAME_METHOD, channel, size);
    let [k0, k1] = BasicDeliver::CLASS_ID.to_be_bytes();
    let [m0, m1] = BasicDeliver::METHOD_ID.to_be_bytes();
    out.extend_from_slice(&[k0, k1, m0, m1, short_len(tag)]);
    out.extend_from_slice(tag);
    let [d0, d1, d2, d3, d4, d5, d6, d7] = deliver.delivery_tag.to_be_bytes();
    let redelivered = u8::from(deliver.redelivered);
    out.extend_from_slice(&[d0, d1, d2, d3, d4, d5, d6, d7, redelivered, short_len(exchange)]);
    out.extend_from_slice(exchange);
    out.extend_from_slice(&[short_len(key)]);
    out.extend_from_slice(key);
    out.extend_from_slice(&[FRAME_END]);
    encode_content_frames(channel, BasicDeliver::CLASS_ID, properties, body, frame_max, out);
}

/// The octets of a body frame's payload: at most `frame_max` less the frame's overhead (`0`
/// is no limit), and at least one.
fn body_chunk(frame_max: u32, body_len: usize) -> usize {
    match usize::try_from(frame_max) {
        Ok(0) | Err(_) => body_len.max(1),
        Ok(max) => max.saturating_sub(FRAME_OVERHEAD).max(1),
    }
}

/// The octets of the content header frame and the body frames of a content of `body_len`.
fn content_frames_len(properties: &EncodedProperties, body_len: usize, frame_max: u32) -> usize {
    let body_frames = body_len.div_ceil(body_chunk(frame_max, body_len));
    FRAME_OVERHEAD + CONTENT_HEADER_FIXED + properties.encoded_len() + body_len + FRAME_OVERHEAD * body_frames
}

/// Appends the content header frame and the body frames of a content method of class
/// `class_id` (the method frame already written).
fn encode_content_frames(
    channel: u16,
    class_id: u16,
    properties: &EncodedProperties,
    body: &[u8],
    frame_max: u32,
    out: &mut BytesMut,
) {
    out.reserve(content_frames_len(properties, body.len(), frame_max));
    put_frame_header(out, FRAME_HEADER, channel, CONTENT_HEADER_FIXED + properties.encoded_len());
    put_content_header(out, class_id, body.len() as u64, properties);
    out.extend_from_slice(&[FRAME_END]);
    for piece in body.chunks(body_chunk(frame_max, body.len())) {
        encode_body_frame(channel, piece, out);
    }
}

#[cfg(test)]
mod tests;
