//! AMQP 1.0's type system and framing (OASIS AMQP 1.0, part 1 "Types" and part 2.3 "Framing"),
//! the first step of issue 42 (AMQP 1.0 on port 5672). Sans-IO like the 0-9-1 codec beside it:
//! values decode from a byte slice and encode into a `BytesMut`, and decoding never panics on
//! any input.
//!
//! Not wired to a listener yet: the SASL and connection handshake, sessions, links and
//! RabbitMQ's address v2 mapping come next (issue 42).

mod disposition;
mod frame;
mod performative;
mod transfer;
mod value;

pub use disposition::encode_accepted_disposition;
pub use frame::{
    decode_frame_header, decode_protocol_header, encode_frame_header, FrameHeader, FrameKind, ProtocolId,
    FRAME_HEADER_SIZE, MIN_MAX_FRAME_SIZE,
};
pub use performative::{ErrorCondition, Performative, PerformativeError};
pub use transfer::decode_transfer;
pub use value::{
    decode_value, encode_list_of_encoded, encode_value, encoded_binary, encoded_list, encoded_string,
    value_len, Amqp1DecodeError, Value, MAX_DEPTH,
};
