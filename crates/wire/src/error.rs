//! Decode errors and the AMQP reply each one maps to.
//!
//! What RabbitMQ does, for reference (rabbit_reader.erl,
//! rabbit_command_assembler.erl, the generated rabbit_framing_amqp_0_9_1):
//! - bad frame-end octet, oversized frame, unknown frame type, a method frame
//!   shorter than 4 octets, a non-empty heartbeat: 501 FRAME_ERROR;
//! - method arguments that do not match the method's layout: RabbitMQ replies
//!   501 FRAME_ERROR "cannot decode ..." (`rabbit_misc:frame_error/2`); we
//!   follow the spec (§4.2.3 / constant `syntax-error`) and reply 502
//!   SYNTAX_ERROR — both are hard errors that close the connection;
//! - unknown class/method ids: `lookup_method_name/1` exits with
//!   `{unknown_method_id, Id}` outside any handler, so RabbitMQ drops the TCP
//!   connection without a connection.close. We reply 540 NOT_IMPLEMENTED
//!   (a hard error), which is what the spec's constant describes;
//! - a short-string argument that is not UTF-8, in any method without content
//!   (`rabbit_binary_parser:assert_utf8`, called by the generated decoder):
//!   501 "FRAME_ERROR - Malformed UTF-8 in shortstr". RabbitMQ reports class
//!   and method 0/0, except for connection-class methods, which its reader
//!   decodes itself (connection.open: 10/40).

use std::fmt;

use crate::reply_code::{self, FRAME_ERROR, NOT_IMPLEMENTED, SYNTAX_ERROR};

/// Why a frame, method or content header could not be decoded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DecodeError {
    /// Frame-level problem: 501 FRAME_ERROR (bad frame-end octet, size over
    /// the negotiated maximum, unknown frame type, empty method frame, ...).
    Frame(String),
    /// A malformed argument of a known method, or a malformed content
    /// header: 502 SYNTAX_ERROR. For content headers `method_id` is 0.
    Syntax {
        /// Class of the method (or content header) being decoded.
        class_id: u16,
        /// Method being decoded (0 for a content header).
        method_id: u16,
        /// What was wrong.
        detail: String,
    },
    /// A well-formed method frame with class/method ids we do not know:
    /// 540 NOT_IMPLEMENTED (RabbitMQ itself drops the connection).
    UnknownMethod {
        /// The class id received.
        class_id: u16,
        /// The method id received.
        method_id: u16,
    },
    /// A short-string argument of a method without content that is not
    /// UTF-8 (exchange, queue and consumer names, binding keys…): 501
    /// FRAME_ERROR, as RabbitMQ.
    MalformedUtf8 {
        /// Class of the method.
        class_id: u16,
        /// The method.
        method_id: u16,
    },
}

impl DecodeError {
    /// The reply code for the connection.close this error causes.
    pub fn reply_code(&self) -> u16 {
        match self {
            DecodeError::Frame(_) | DecodeError::MalformedUtf8 { .. } => FRAME_ERROR,
            DecodeError::Syntax { .. } => SYNTAX_ERROR,
            DecodeError::UnknownMethod { .. } => NOT_IMPLEMENTED,
        }
    }

    /// RabbitMQ-style reply text: "FRAME_ERROR - detail".
    pub fn reply_text(&self) -> String {
        let name = reply_code::reply_code_name(self.reply_code());
        format!("{name} - {}", self.detail())
    }

    /// The (class-id, method-id) to report in connection.close; (0, 0) when
    /// the error is not tied to a method.
    pub fn class_method(&self) -> (u16, u16) {
        match *self {
            DecodeError::Frame(_) => (0, 0),
            DecodeError::Syntax { class_id, method_id, .. }
            | DecodeError::UnknownMethod { class_id, method_id } => (class_id, method_id),
            DecodeError::MalformedUtf8 { class_id, method_id }
                if class_id == crate::method::ConnectionOpen::CLASS_ID =>
            {
                (class_id, method_id)
            }
            DecodeError::MalformedUtf8 { .. } => (0, 0),
        }
    }

    fn detail(&self) -> String {
        match self {
            DecodeError::Frame(detail) => detail.clone(),
            DecodeError::Syntax { class_id, method_id, detail } => {
                match crate::method::method_name(*class_id, *method_id) {
                    Some(name) => format!("{detail} in {name}"),
                    None if *method_id == 0 => {
                        format!("{detail} in content header for class {class_id}")
                    }
                    None => format!("{detail} in method {class_id}/{method_id}"),
                }
            }
            DecodeError::UnknownMethod { class_id, method_id } => {
                format!("unknown method class {class_id} method {method_id}")
            }
            DecodeError::MalformedUtf8 { .. } => "Malformed UTF-8 in shortstr".to_owned(),
        }
    }
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.reply_text())
    }
}

impl std::error::Error for DecodeError {}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each variant maps to its documented reply code and a prefixed text.
    #[test]
    fn codes_and_texts() {
        let e = DecodeError::Frame("bad end".into());
        assert_eq!((e.reply_code(), e.reply_text().as_str()), (501, "FRAME_ERROR - bad end"));
        let e = DecodeError::Syntax { class_id: 50, method_id: 10, detail: "truncated shortstr".into() };
        assert_eq!(e.reply_code(), 502);
        assert_eq!(e.reply_text(), "SYNTAX_ERROR - truncated shortstr in queue.declare");
        assert_eq!(e.class_method(), (50, 10));
        let e = DecodeError::MalformedUtf8 { class_id: 50, method_id: 10 };
        assert_eq!(
            (e.reply_code(), e.reply_text().as_str()),
            (501, "FRAME_ERROR - Malformed UTF-8 in shortstr")
        );
        assert_eq!(e.class_method(), (0, 0), "RabbitMQ names no method for a channel's frame");
        let e = DecodeError::MalformedUtf8 { class_id: 10, method_id: 40 };
        assert_eq!(e.class_method(), (10, 40), "but names connection.open");
        let e = DecodeError::UnknownMethod { class_id: 99, method_id: 1 };
        assert_eq!(e.reply_code(), 540);
        assert!(e.reply_text().starts_with("NOT_IMPLEMENTED - "));
    }
}
