//! hourglass-wire: a sans-IO codec for AMQP 0-9-1 as RabbitMQ speaks it —
//! frames (§4.2.3), methods (§4.2.4 and the class reference, with RabbitMQ's
//! extensions), content headers and basic properties (§4.2.6), field tables
//! with RabbitMQ's type tags, and reply codes.
//!
//! Decoding never panics on any input and slices strings, tables and bodies
//! out of the received buffer without copying.

pub mod amqp1;
mod codec;
mod error;
mod field_table;
mod frame;
pub mod method;
mod properties;
pub mod reply_code;
mod types;

pub use error::DecodeError;
pub use field_table::{
    FieldArray, FieldArrayIter, FieldTable, FieldTableIter, FieldValue, MAX_NESTING_DEPTH,
};
pub use frame::{
    decode_protocol_header, encode_body_frame, encode_content, encode_delivery, encode_header_frame,
    encode_heartbeat_frame, encode_method_frame, peek_content_header_channel, ContentHeader, DeliverArgs,
    Frame, FrameDecoder, ProtocolHeader, FRAME_END, FRAME_HEADER_SIZE, FRAME_MIN_SIZE, FRAME_OVERHEAD,
    PROTOCOL_HEADER,
};
pub use method::*;
pub use properties::{BasicProperties, EncodedProperties};
pub use reply_code::*;
pub use types::{LongStr, ShortStr, TooLong};
