//! Packed messages: how a queue past its resident limits keeps a small message it cannot page
//! out to the store (a transient message, or any message of a non-durable queue). The message
//! becomes one exactly sized allocation holding its store record (`persist::encode_record`:
//! exchange, routing key, properties, body) instead of a shared `Arc<Message>` (160 bytes) whose
//! fields keep the connection's read buffers alive (ADR 0015). A packed message is made resident
//! again when it is about to be taken (at the head of its queue, or within a read its message
//! groups asked for), like a paged one (ADR 0007).

use bytes::{Buf, BufMut, Bytes, BytesMut};

use crate::message::{Hot, Message};
use crate::persist::{decode_record, record_len, write_record};

/// The largest record a queue packs. Packing copies the message once; past this size the copy
/// costs more than the ~200 bytes it saves is worth.
pub const MAX_PACKED_RECORD_BYTES: usize = 1024;

/// Bytes before the record: the body size (u32, little-endian), so that counting a packed
/// message's bytes needs no decoding.
const PREFIX: usize = 4;

/// A message kept as its record bytes, with the properties its queue reads without decoding it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Packed {
    /// The body size, then the record.
    bytes: Box<[u8]>,
    hot: Hot,
}

impl Packed {
    /// `message` packed, or `None` when its record would be over [`MAX_PACKED_RECORD_BYTES`].
    pub fn new(message: &Message) -> Option<Packed> {
        let record_bytes = record_len(message);
        if record_bytes > MAX_PACKED_RECORD_BYTES {
            return None;
        }
        let mut out = BytesMut::with_capacity(PREFIX + record_bytes);
        // At most MAX_PACKED_RECORD_BYTES, so the body size fits.
        out.put_u32_le(message.body_size() as u32);
        write_record(message, &mut out);
        // Written into an exactly sized buffer, which becomes the box uncopied.
        Some(Packed { bytes: Vec::from(out.freeze()).into_boxed_slice(), hot: message.hot() })
    }

    pub fn hot(&self) -> Hot {
        self.hot
    }

    pub fn body_size(&self) -> usize {
        self.bytes.first_chunk::<PREFIX>().map_or(0, |prefix| u32::from_le_bytes(*prefix) as usize)
    }

    /// The message, leaving this value empty: its bytes become the message's buffers uncopied.
    /// `None` only if the record does not decode, which `new` rules out.
    pub fn take_message(&mut self) -> Option<Message> {
        Self::decode(Bytes::from(std::mem::take(&mut self.bytes)))
    }

    /// The message, leaving this value as it is (from a copy of the bytes).
    pub fn message_view(&self) -> Option<Message> {
        Self::decode(Bytes::copy_from_slice(&self.bytes))
    }

    fn decode(mut bytes: Bytes) -> Option<Message> {
        if bytes.len() < PREFIX {
            return None;
        }
        bytes.advance(PREFIX);
        decode_record(bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hourglass_wire::{EncodedProperties, ShortStr};

    fn message(body: &[u8], expiration: Option<&str>) -> Message {
        let properties = hourglass_wire::BasicProperties {
            expiration: expiration.map(|e| ShortStr::try_from(e).unwrap()),
            priority: Some(3),
            ..Default::default()
        };
        Message::new(
            ShortStr::from_static("amq.direct"),
            ShortStr::from_static("orders.created"),
            EncodedProperties::from(&properties),
            Bytes::copy_from_slice(body),
        )
    }

    /// Packing and unpacking give back the message as published: names, properties, body and
    /// the hot properties the queue reads while it is packed.
    #[test]
    fn a_packed_message_comes_back_whole() {
        let original = message(b"sixteen byte msg", Some("15000"));
        let mut packed = Packed::new(&original).unwrap();
        assert_eq!(packed.hot().expiration_ms(), Some(15_000));
        assert_eq!(packed.hot().priority(), 3);
        assert_eq!(packed.body_size(), 16);
        assert_eq!(packed.message_view().as_ref(), Some(&original));
        assert_eq!(packed.take_message(), Some(original));
    }

    /// A small message takes one allocation the size of its record; a large one is not packed.
    #[test]
    fn only_small_messages_are_packed() {
        let small = message(&[7; 16], None);
        let packed = Packed::new(&small).unwrap();
        assert_eq!(packed.bytes.len(), PREFIX + record_len(&small));
        let large = message(&vec![7; MAX_PACKED_RECORD_BYTES], None);
        assert!(Packed::new(&large).is_none());
    }
}
