//! AMQP 1.0 frames (part 2.3): the 8-byte header, and the protocol headers that open a
//! connection (`AMQP 0 1 0 0`, and `AMQP 3 1 0 0` for SASL, part 5.3).

use super::value::Amqp1DecodeError;

/// The fixed part of a frame header: size (4), DOFF (1), type (1), channel (2).
pub const FRAME_HEADER_SIZE: usize = 8;
/// The smallest max-frame-size a peer may set (part 2.4.1: 512 octets).
pub const MIN_MAX_FRAME_SIZE: u32 = 512;

/// Which protocol a header names: AMQP itself, TLS or SASL before it (part 2.2, 5.2, 5.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProtocolId {
    Amqp,
    Tls,
    Sasl,
}

/// The protocol an 8-byte header names, if it is AMQP 1.0.0's (`AMQP` id 1 0 0); `None` for
/// anything else (0-9-1's `AMQP 0 0 9 1` among them).
pub fn decode_protocol_header(header: &[u8; 8]) -> Option<ProtocolId> {
    if &header[..4] != b"AMQP" || header[5..] != [1, 0, 0] {
        return None;
    }
    match header[4] {
        0 => Some(ProtocolId::Amqp),
        2 => Some(ProtocolId::Tls),
        3 => Some(ProtocolId::Sasl),
        _ => None,
    }
}

/// An AMQP frame's or a SASL frame's type byte (part 2.3.2, 5.3.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FrameKind {
    Amqp,
    Sasl,
}

/// A frame's header: its whole size, where its body starts (`doff`, in 4-byte words), its type
/// and channel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrameHeader {
    pub size: u32,
    pub doff: u8,
    pub kind: FrameKind,
    pub channel: u16,
}

impl FrameHeader {
    /// Where the frame body starts, in bytes from the frame's first byte.
    pub fn body_offset(&self) -> usize {
        usize::from(self.doff) * 4
    }
}

/// The header at the start of `bytes`, checked against `max_frame_size`; `Ok(None)` while fewer
/// than 8 bytes are there.
pub fn decode_frame_header(
    bytes: &[u8],
    max_frame_size: u32,
) -> Result<Option<FrameHeader>, Amqp1DecodeError> {
    let Some(header) = bytes.get(..FRAME_HEADER_SIZE) else { return Ok(None) };
    let size = u32::from_be_bytes([header[0], header[1], header[2], header[3]]);
    let doff = header[4];
    let kind = match header[5] {
        0 => FrameKind::Amqp,
        1 => FrameKind::Sasl,
        other => return Err(Amqp1DecodeError::FrameType(other)),
    };
    let channel = u16::from_be_bytes([header[6], header[7]]);
    // DOFF counts 4-byte words and covers at least the 8-byte header (part 2.3.1).
    if doff < 2 || size < u32::from(doff) * 4 {
        return Err(Amqp1DecodeError::FrameLayout { size, doff });
    }
    if size > max_frame_size {
        return Err(Amqp1DecodeError::FrameTooLarge { size, max: max_frame_size });
    }
    Ok(Some(FrameHeader { size, doff, kind, channel }))
}

/// Appends a header for a frame of `body_len` bytes with no extended header (DOFF 2).
pub fn encode_frame_header(out: &mut bytes::BytesMut, kind: FrameKind, channel: u16, body_len: u32) {
    out.extend_from_slice(&(body_len + FRAME_HEADER_SIZE as u32).to_be_bytes());
    out.extend_from_slice(&[2, if kind == FrameKind::Sasl { 1 } else { 0 }]);
    out.extend_from_slice(&channel.to_be_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn protocol_headers_name_amqp_sasl_and_tls_and_nothing_else() {
        assert_eq!(decode_protocol_header(b"AMQP\x00\x01\x00\x00"), Some(ProtocolId::Amqp));
        assert_eq!(decode_protocol_header(b"AMQP\x03\x01\x00\x00"), Some(ProtocolId::Sasl));
        assert_eq!(decode_protocol_header(b"AMQP\x02\x01\x00\x00"), Some(ProtocolId::Tls));
        assert_eq!(decode_protocol_header(b"AMQP\x00\x00\x09\x01"), None, "0-9-1's");
        assert_eq!(decode_protocol_header(b"AMQP\x04\x01\x00\x00"), None);
        assert_eq!(decode_protocol_header(b"HTTP/1.1"), None);
    }

    #[test]
    fn frame_headers_round_trip_and_bad_ones_are_refused() {
        let mut out = bytes::BytesMut::new();
        encode_frame_header(&mut out, FrameKind::Sasl, 7, 20);
        let header = decode_frame_header(&out, 512).unwrap().unwrap();
        assert_eq!(header, FrameHeader { size: 28, doff: 2, kind: FrameKind::Sasl, channel: 7 });
        assert_eq!(header.body_offset(), 8);
        assert_eq!(decode_frame_header(&out[..7], 512), Ok(None));
        let refused = |bytes: [u8; 8]| decode_frame_header(&bytes, 512).unwrap_err();
        assert_eq!(refused([0, 0, 0, 8, 1, 0, 0, 0]), Amqp1DecodeError::FrameLayout { size: 8, doff: 1 });
        assert_eq!(refused([0, 0, 0, 8, 3, 0, 0, 0]), Amqp1DecodeError::FrameLayout { size: 8, doff: 3 });
        assert_eq!(refused([0, 0, 0, 8, 2, 9, 0, 0]), Amqp1DecodeError::FrameType(9));
        assert_eq!(
            refused([0, 0, 2, 1, 2, 0, 0, 0]),
            Amqp1DecodeError::FrameTooLarge { size: 513, max: 512 }
        );
    }
}
