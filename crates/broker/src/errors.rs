//! Protocol errors with RabbitMQ's reply texts. Whether an error closes the channel or the whole
//! connection follows from its reply code (AMQP 0-9-1 §1.2: hard errors are connection errors).

use hourglass_wire::reply_code::{
    ACCESS_REFUSED, COMMAND_INVALID, NOT_ALLOWED, NOT_FOUND, NOT_IMPLEMENTED, PRECONDITION_FAILED,
    RESOURCE_LOCKED,
};

use hourglass_wire::FieldValue;

use crate::api::AmqpError;

pub(crate) fn precondition_failed(detail: impl std::fmt::Display) -> AmqpError {
    AmqpError::new(PRECONDITION_FAILED, detail)
}

pub(crate) fn access_refused(detail: impl std::fmt::Display) -> AmqpError {
    AmqpError::new(ACCESS_REFUSED, detail)
}

pub(crate) fn not_implemented(detail: impl std::fmt::Display) -> AmqpError {
    AmqpError::new(NOT_IMPLEMENTED, detail)
}

pub(crate) fn command_invalid(detail: impl std::fmt::Display) -> AmqpError {
    AmqpError::new(COMMAND_INVALID, detail)
}

pub(crate) fn not_allowed(detail: impl std::fmt::Display) -> AmqpError {
    AmqpError::new(NOT_ALLOWED, detail)
}

/// 530 NOT_ALLOWED: the connection's vhost is gone (deleted while it was open).
pub(crate) fn no_vhost(name: &str) -> AmqpError {
    not_allowed(format!("vhost {name} not found"))
}

pub(crate) fn no_queue(name: &impl std::fmt::Display, vhost: &str) -> AmqpError {
    AmqpError::new(NOT_FOUND, format!("no queue '{name}' in vhost '{vhost}'"))
}

pub(crate) fn no_exchange(name: &impl std::fmt::Display, vhost: &str) -> AmqpError {
    AmqpError::new(NOT_FOUND, format!("no exchange '{name}' in vhost '{vhost}'"))
}

pub(crate) fn queue_locked(name: &impl std::fmt::Display, vhost: &str) -> AmqpError {
    AmqpError::new(
        RESOURCE_LOCKED,
        format!(
            "cannot obtain exclusive access to locked queue '{name}' in vhost '{vhost}'. It could be \
             originally declared on another connection or the exclusive property value does not match \
             that of the original declaration."
        ),
    )
}

pub(crate) fn default_exchange_refused() -> AmqpError {
    access_refused("operation not permitted on the default exchange")
}

pub(crate) fn unknown_delivery_tag(tag: u64) -> AmqpError {
    precondition_failed(format!("unknown delivery tag {tag}"))
}

/// An empty queue name on a channel that has declared no queue yet.
pub(crate) fn not_found_no_previous_queue() -> AmqpError {
    AmqpError::new(NOT_FOUND, "no previously declared queue")
}

/// `received X but current is Y` for an inequivalent argument, as RabbitMQ words it: plain values
/// when both exist with the same type, else `the value 'v' of type 't'` or `none`.
pub(crate) fn received_but_current(received: Option<FieldValue>, current: Option<FieldValue>) -> String {
    match (&received, &current) {
        (Some(r), Some(c)) if r.type_name() == c.type_name() => {
            format!("received '{}' but current is '{}'", plain(r), plain(c))
        }
        _ => format!("received {} but current is {}", typed(received.as_ref()), typed(current.as_ref())),
    }
}

fn plain(value: &FieldValue) -> String {
    match (value.as_bytes(), value.as_i64()) {
        (Some(bytes), _) => String::from_utf8_lossy(bytes).into_owned(),
        (None, Some(n)) => n.to_string(),
        (None, None) => format!("{value:?}"),
    }
}

fn typed(value: Option<&FieldValue>) -> String {
    match value {
        None => "none".to_owned(),
        Some(v) => format!("the value '{}' of type '{}'", plain(v), v.type_name()),
    }
}
