//! What goes wrong on a connection, and whether one channel or the whole connection pays for it.
//!
//! AMQP 0-9-1 §1.1 splits errors into soft ones (close the channel) and hard ones (close the
//! connection). The variant, not the reply code, decides which close is sent; reply texts are
//! RabbitMQ's, built with [`AmqpError::new`] so they read `NAME - detail`.

use hourglass_broker::AmqpError;
use hourglass_wire::reply_code::UNEXPECTED_FRAME;
use hourglass_wire::{Frame, ShortStr};

/// The largest reply text AMQP can carry: a short string.
const REPLY_TEXT_MAX_BYTES: usize = 255;

/// An error caused by the peer, with the scope of the close it triggers.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Fault {
    /// Close the whole connection (connection.close) with this error.
    Connection(AmqpError),
    /// Close only the channel the offending frame arrived on (channel.close).
    Channel(AmqpError),
}

impl Fault {
    /// A hard error: `code` with RabbitMQ's `detail`, naming no method.
    pub(crate) fn connection(code: u16, detail: impl std::fmt::Display) -> Fault {
        Fault::Connection(AmqpError::new(code, detail))
    }
}

/// `text` as a short string, cut at a character boundary to fit 255 bytes.
pub(crate) fn reply_text(text: &str) -> ShortStr {
    let mut end = text.len().min(REPLY_TEXT_MAX_BYTES);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    ShortStr::try_from(&text[..end]).unwrap_or_default()
}

/// RabbitMQ's 505 for a frame that may not appear here, naming its type and first octets
/// (rabbit_reader `unexpected_frame/4`: "type 2, first 16 octets = <<...>>").
pub(crate) fn unexpected_frame(frame: &Frame) -> Fault {
    let (frame_type, payload) = frame_type_and_payload(frame);
    let (which, snippet) =
        if payload.len() <= 16 { ("all", &payload[..]) } else { ("first 16", &payload[..16]) };
    Fault::connection(
        UNEXPECTED_FRAME,
        format!("type {frame_type}, {which} octets = {}", erlang_binary(snippet)),
    )
}

/// The frame type octet and (at least the first 16 octets of) the payload, rebuilt from a
/// decoded frame.
fn frame_type_and_payload(frame: &Frame) -> (u8, Vec<u8>) {
    match frame {
        Frame::Method { method, .. } => {
            let mut buf = bytes::BytesMut::new();
            method.encode(&mut buf);
            (1, buf.to_vec())
        }
        Frame::Header { header, .. } => {
            let mut buf = Vec::with_capacity(14);
            buf.extend_from_slice(&header.class_id.to_be_bytes());
            buf.extend_from_slice(&0u16.to_be_bytes());
            buf.extend_from_slice(&header.body_size.to_be_bytes());
            (2, buf)
        }
        Frame::Body { payload, .. } => (3, payload.iter().take(16).copied().collect()),
        Frame::Heartbeat { .. } => (8, Vec::new()),
    }
}

/// A binary as Erlang's `~p` prints it: `<<"text">>` when printable, else `<<1,2,3>>`.
fn erlang_binary(bytes: &[u8]) -> String {
    let printable = !bytes.is_empty() && bytes.iter().all(|&b| (0x20..0x7f).contains(&b));
    if printable {
        let mut s = String::from("<<\"");
        for &b in bytes {
            if b == b'"' || b == b'\\' {
                s.push('\\');
            }
            s.push(char::from(b));
        }
        s.push_str("\">>");
        s
    } else {
        let list: Vec<String> = bytes.iter().map(u8::to_string).collect();
        format!("<<{}>>", list.join(","))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reply texts longer than a short string are cut at a character boundary.
    #[test]
    fn reply_text_truncates_at_char_boundary() {
        let long = "é".repeat(200);
        let short = reply_text(&long);
        assert_eq!(short.as_bytes().len(), 254);
        assert_eq!(reply_text("ok").as_bytes(), b"ok");
    }

    /// Binaries print like Erlang's `~p`.
    #[test]
    fn erlang_binary_forms() {
        assert_eq!(erlang_binary(b""), "<<>>");
        assert_eq!(erlang_binary(b"hi\""), "<<\"hi\\\"\">>");
        assert_eq!(erlang_binary(&[0, 60, 1]), "<<0,60,1>>");
    }
}
