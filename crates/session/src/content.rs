//! Content assembly: basic.publish, then one content header, then body frames (AMQP 0-9-1
//! §4.2.6) become one [`Publish`].
//!
//! The rules and reply texts are RabbitMQ's `rabbit_command_assembler` and `rabbit_channel`
//! (`check_msg_size`). A body that arrives in one frame is passed on as that frame's `Bytes`
//! (no copy); a body in several frames is copied once into a buffer sized from the header. The
//! properties stay as the header frame carried them (a slice of it, validated by the decoder).
//! Only what the header declared is ever buffered, and the header may declare at most
//! `max_message_size` bytes.

use bytes::{Bytes, BytesMut};
use hourglass_broker::{AmqpError, Publish};
use hourglass_wire::reply_code::{FRAME_ERROR, PRECONDITION_FAILED, UNEXPECTED_FRAME};
use hourglass_wire::{BasicPublish, ContentHeader, EncodedProperties, Method};

use crate::fault::Fault;

/// The largest body any publish may declare, whatever the configuration says: RabbitMQ's
/// `?MAX_MSG_SIZE` (512 MiB). Beyond it the whole connection is closed with 501.
pub const MAX_MESSAGE_SIZE_LIMIT: u64 = 536_870_912;

/// The most body bytes the unfinished messages of one connection may announce together: RabbitMQ's
/// hard `?MAX_MSG_SIZE` (512 MiB), i.e. four default-size (128 MiB) messages in flight on different
/// channels at once. RabbitMQ has no such cap; without one, a connection with 2047 channels could
/// announce 256 GiB and have the broker buffer whatever part of it arrives. A content header
/// that would pass it closes its channel with 406, before any of its body is buffered.
pub const MAX_UNFINISHED_CONTENT_BYTES: u64 = MAX_MESSAGE_SIZE_LIMIT;

/// What the unfinished messages of a connection (or one channel) hold: a message is unfinished
/// from its basic.publish until its last body frame.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UnfinishedContent {
    /// Channels between a basic.publish and the end of its body.
    pub messages: u64,
    /// Body bytes their content headers announced.
    pub announced_bytes: u64,
    /// Body bytes received and buffered so far.
    pub received_bytes: u64,
}

impl UnfinishedContent {
    pub(crate) fn add(&mut self, other: UnfinishedContent) {
        self.messages += other.messages;
        self.announced_bytes += other.announced_bytes;
        self.received_bytes += other.received_bytes;
    }

    pub(crate) fn remove(&mut self, other: UnfinishedContent) {
        debug_assert!(self.messages >= other.messages && self.announced_bytes >= other.announced_bytes);
        debug_assert!(self.received_bytes >= other.received_bytes);
        self.messages = self.messages.saturating_sub(other.messages);
        self.announced_bytes = self.announced_bytes.saturating_sub(other.announced_bytes);
        self.received_bytes = self.received_bytes.saturating_sub(other.received_bytes);
    }
}

/// Where one channel is in receiving a published message.
#[derive(Clone, Debug, Default)]
pub(crate) enum Assembly {
    /// Between messages: the next frame must be a method frame.
    #[default]
    Idle,
    /// basic.publish arrived; its content header must come next.
    ExpectHeader { publish: BasicPublish },
    /// The header arrived; body frames follow until `body_size` bytes have.
    ExpectBody { publish: BasicPublish, properties: EncodedProperties, body_size: u64, body: Body },
}

/// The body bytes received so far.
#[derive(Clone, Debug, Default)]
pub(crate) enum Body {
    #[default]
    Empty,
    /// Exactly one non-empty body frame so far, kept without copying.
    One(Bytes),
    /// Two or more frames, copied into one buffer with the declared size reserved.
    Many(BytesMut),
}

impl Assembly {
    /// True between messages.
    pub(crate) fn is_idle(&self) -> bool {
        matches!(self, Assembly::Idle)
    }

    /// What this channel's unfinished message holds (nothing between messages).
    pub(crate) fn unfinished(&self) -> UnfinishedContent {
        match self {
            Assembly::Idle => UnfinishedContent::default(),
            Assembly::ExpectHeader { .. } => UnfinishedContent { messages: 1, ..Default::default() },
            Assembly::ExpectBody { body_size, body, .. } => {
                UnfinishedContent { messages: 1, announced_bytes: *body_size, received_bytes: body.len() }
            }
        }
    }

    /// A basic.publish arrived (checked by the caller): expect its content header.
    pub(crate) fn start(&mut self, publish: BasicPublish) {
        debug_assert!(self.is_idle());
        *self = Assembly::ExpectHeader { publish };
    }

    /// A content header arrived. Returns the finished message when the body is empty.
    /// `announced_elsewhere` is what the connection's other unfinished messages announced.
    pub(crate) fn on_header(
        &mut self,
        header: ContentHeader,
        max_message_size: u64,
        announced_elsewhere: u64,
    ) -> Result<Option<Box<Publish>>, Fault> {
        let publish = match std::mem::take(self) {
            Assembly::ExpectHeader { publish } => publish,
            other => {
                let fault = other.unexpected_frame();
                *self = other;
                return Err(fault);
            }
        };
        let class_id = BasicPublish::CLASS_ID;
        if header.class_id != class_id {
            let got = header.class_id;
            let detail =
                format!("expected content header for class {class_id}, got one for class {got} instead");
            return Err(on_publish(UNEXPECTED_FRAME, detail));
        }
        let body_size = header.body_size;
        if body_size > MAX_MESSAGE_SIZE_LIMIT {
            let detail = format!(
                "content body size {body_size} exceeds maximum allowed size {MAX_MESSAGE_SIZE_LIMIT}"
            );
            return Err(on_publish(FRAME_ERROR, detail));
        }
        let max = max_message_size.min(MAX_MESSAGE_SIZE_LIMIT);
        if body_size > max {
            // rabbit_channel:check_msg_size words it differently when no limit was configured.
            let configured = if max == MAX_MESSAGE_SIZE_LIMIT { "" } else { "configured " };
            let detail = format!("message size {body_size} is larger than {configured}max size {max}");
            let error = AmqpError::new(PRECONDITION_FAILED, detail).on(&publish_method());
            return Err(Fault::Channel(error));
        }
        if body_size == 0 {
            return Ok(Some(finish(publish, header.properties, Bytes::new())));
        }
        let unfinished = announced_elsewhere.saturating_add(body_size);
        if unfinished > MAX_UNFINISHED_CONTENT_BYTES {
            let detail = format!(
                "message size {body_size} would bring this connection's unfinished messages to \
                 {unfinished} bytes, more than the limit of {MAX_UNFINISHED_CONTENT_BYTES}"
            );
            let error = AmqpError::new(PRECONDITION_FAILED, detail).on(&publish_method());
            return Err(Fault::Channel(error));
        }
        *self = Assembly::ExpectBody { publish, properties: header.properties, body_size, body: Body::Empty };
        Ok(None)
    }

    /// A body frame arrived. Returns the finished message once all declared bytes have.
    pub(crate) fn on_body(&mut self, payload: Bytes) -> Result<Option<Box<Publish>>, Fault> {
        let Assembly::ExpectBody { body_size, body, .. } = self else {
            return Err(self.unexpected_frame());
        };
        let received = body.len();
        let remaining = body_size.saturating_sub(received);
        if payload.len() as u64 > remaining {
            let detail = "content body frame exceeds remaining content size";
            return Err(on_publish(FRAME_ERROR, detail));
        }
        if payload.is_empty() {
            // An empty body frame carries nothing; storing it would let a peer grow our state
            // without sending data.
            return Ok(None);
        }
        body.push(payload, *body_size);
        if body.len() < *body_size {
            return Ok(None);
        }
        let Assembly::ExpectBody { publish, properties, body, .. } = std::mem::take(self) else {
            return Ok(None); // unreachable: matched above
        };
        Ok(Some(finish(publish, properties, body.into_bytes())))
    }

    /// Whether a content header is the next frame due.
    pub(crate) fn expects_header(&self) -> bool {
        matches!(self, Assembly::ExpectHeader { .. })
    }

    /// RabbitMQ's 505 for a frame this state does not expect: a header or body while idle, or
    /// anything but the header (body) while the header (body) is due.
    pub(crate) fn unexpected_frame(&self) -> Fault {
        match self {
            Assembly::Idle => {
                Fault::connection(UNEXPECTED_FRAME, "expected method frame, got non method frame instead")
            }
            Assembly::ExpectHeader { .. } => {
                let class_id = BasicPublish::CLASS_ID;
                let detail = format!(
                    "expected content header for class {class_id}, got non content header frame instead"
                );
                on_publish(UNEXPECTED_FRAME, detail)
            }
            Assembly::ExpectBody { .. } => {
                on_publish(UNEXPECTED_FRAME, "expected content body, got non content body frame instead")
            }
        }
    }
}

impl Body {
    fn len(&self) -> u64 {
        match self {
            Body::Empty => 0,
            Body::One(bytes) => bytes.len() as u64,
            Body::Many(buf) => buf.len() as u64,
        }
    }

    /// Appends a non-empty fragment; `body_size` (already checked against the configured
    /// maximum) sizes the buffer once when a second fragment arrives.
    fn push(&mut self, fragment: Bytes, body_size: u64) {
        match std::mem::take(self) {
            Body::Empty => *self = Body::One(fragment),
            Body::One(first) => {
                // body_size <= MAX_MESSAGE_SIZE_LIMIT fits any usize we build for; 0 just grows as needed.
                let capacity = usize::try_from(body_size).unwrap_or(0);
                let mut buf = BytesMut::with_capacity(capacity);
                buf.extend_from_slice(&first);
                buf.extend_from_slice(&fragment);
                *self = Body::Many(buf);
            }
            Body::Many(mut buf) => {
                buf.extend_from_slice(&fragment);
                *self = Body::Many(buf);
            }
        }
    }

    fn into_bytes(self) -> Bytes {
        match self {
            Body::Empty => Bytes::new(),
            Body::One(bytes) => bytes,
            Body::Many(buf) => buf.freeze(),
        }
    }
}

fn finish(publish: BasicPublish, properties: EncodedProperties, body: Bytes) -> Box<Publish> {
    // Boxed from here on: `Command::Publish` holds it so (see its note).
    Box::new(Publish {
        exchange: publish.exchange,
        routing_key: publish.routing_key,
        mandatory: publish.mandatory,
        properties,
        body,
    })
}

/// A connection error naming basic.publish, as the assembler's errors do.
fn on_publish(code: u16, detail: impl std::fmt::Display) -> Fault {
    Fault::Connection(AmqpError::new(code, detail).on(&publish_method()))
}

fn publish_method() -> Method {
    Method::BasicPublish(BasicPublish::default())
}
