//! Exchanges and their bindings. Each exchange type's matching rule has its own file; this file
//! holds the exchange record, its bindings and the declare-time checks.

pub(crate) mod delayed;
mod direct;
mod fanout;
mod headers;
mod topic;

use hourglass_wire::{FieldTable, ShortStr};

use crate::api::AmqpError;
use crate::errors;
use crate::message::Message;
use crate::queue::QueueId;

pub(crate) use headers::validate_binding_arguments as validate_headers_binding;

/// The exchange types Hourglass routes with.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum ExchangeKind {
    Direct,
    Fanout,
    Topic,
    Headers,
}

impl ExchangeKind {
    pub fn parse(name: &[u8]) -> Option<ExchangeKind> {
        match name {
            b"direct" => Some(ExchangeKind::Direct),
            b"fanout" => Some(ExchangeKind::Fanout),
            b"topic" => Some(ExchangeKind::Topic),
            b"headers" => Some(ExchangeKind::Headers),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            ExchangeKind::Direct => "direct",
            ExchangeKind::Fanout => "fanout",
            ExchangeKind::Topic => "topic",
            ExchangeKind::Headers => "headers",
        }
    }
}

/// Where a binding leads.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Destination {
    Queue(QueueId),
    Exchange(ShortStr),
}

#[derive(Clone, Debug, PartialEq)]
pub struct Binding {
    pub destination: Destination,
    pub routing_key: ShortStr,
    pub arguments: FieldTable,
}

/// How an exchange was declared.
#[derive(Clone, Debug, PartialEq)]
pub struct ExchangeSpec {
    pub name: ShortStr,
    /// How the exchange routes (for a delayed exchange: its `x-delayed-type`).
    pub kind: ExchangeKind,
    /// An `x-delayed-message` exchange: messages wait in their queues for their `x-delay`.
    pub delayed: bool,
    pub durable: bool,
    pub auto_delete: bool,
    pub internal: bool,
    pub arguments: FieldTable,
}

impl ExchangeSpec {
    /// The type as declared: `x-delayed-message` or the routing type's name.
    pub fn type_name(&self) -> &'static str {
        if self.delayed {
            delayed::TYPE_NAME
        } else {
            self.kind.name()
        }
    }
}

#[derive(Clone, Debug)]
pub(crate) struct Exchange {
    pub spec: ExchangeSpec,
    /// `alternate-exchange` argument: where unroutable messages go.
    pub alternate: Option<ShortStr>,
    /// Bindings with this exchange as source, in the order they were made.
    bindings: Vec<Binding>,
}

impl Exchange {
    pub fn new(spec: ExchangeSpec) -> Self {
        let alternate = spec
            .arguments
            .get("alternate-exchange")
            .and_then(|v| v.as_bytes().and_then(|b| ShortStr::new(bytes::Bytes::copy_from_slice(b)).ok()));
        Exchange { spec, alternate, bindings: Vec::new() }
    }

    pub fn name(&self) -> &ShortStr {
        &self.spec.name
    }

    /// Adds a binding; binding twice is a no-op (AMQP 0-9-1 queue.bind is idempotent).
    pub fn bind(&mut self, binding: Binding) {
        if !self.bindings.contains(&binding) {
            self.bindings.push(binding);
        }
    }

    /// Removes a binding; returns whether it existed.
    pub fn unbind(&mut self, binding: &Binding) -> bool {
        let before = self.bindings.len();
        self.bindings.retain(|b| b != binding);
        self.bindings.len() != before
    }

    /// Removes every binding to a destination; returns how many there were.
    pub fn unbind_destination(&mut self, destination: &Destination) -> usize {
        let before = self.bindings.len();
        self.bindings.retain(|b| &b.destination != destination);
        before - self.bindings.len()
    }

    pub fn bindings(&self) -> &[Binding] {
        &self.bindings
    }

    pub fn has_bindings(&self) -> bool {
        !self.bindings.is_empty()
    }

    /// Appends to `out` the destinations this exchange's own bindings select for `message`
    /// (duplicates possible; the caller de-duplicates across the whole route).
    pub fn route(&self, message: &Message, out: &mut Vec<Destination>) {
        let key = message.routing_key.as_bytes();
        match self.spec.kind {
            ExchangeKind::Direct => direct::route(&self.bindings, key, out),
            ExchangeKind::Fanout => fanout::route(&self.bindings, out),
            ExchangeKind::Topic => topic::route(&self.bindings, key, out),
            ExchangeKind::Headers => {
                headers::route(&self.bindings, message.properties().headers().as_ref(), out)
            }
        }
    }

    /// Whether redeclaring with `spec` is equivalent; otherwise RabbitMQ's 406 naming the field.
    pub fn check_equivalent(&self, spec: &ExchangeSpec, vhost: &str) -> Result<(), AmqpError> {
        let current = &self.spec;
        let mismatch = |field: &str, received: &dyn std::fmt::Display, now: &dyn std::fmt::Display| {
            Err(errors::precondition_failed(format!(
                "inequivalent arg '{field}' for exchange '{}' in vhost '{vhost}': received '{received}' but current is '{now}'",
                current.name
            )))
        };
        if current.type_name() != spec.type_name() {
            return mismatch("type", &spec.type_name(), &current.type_name());
        }
        if current.kind != spec.kind {
            return mismatch("x-delayed-type", &spec.kind.name(), &current.kind.name());
        }
        if current.durable != spec.durable {
            return mismatch("durable", &spec.durable, &current.durable);
        }
        if current.auto_delete != spec.auto_delete {
            return mismatch("auto_delete", &spec.auto_delete, &current.auto_delete);
        }
        if current.internal != spec.internal {
            return mismatch("internal", &spec.internal, &current.internal);
        }
        let key = "alternate-exchange";
        if current.arguments.get(key) != spec.arguments.get(key) {
            return Err(errors::precondition_failed(format!(
                "inequivalent arg '{key}' for exchange '{}' in vhost '{vhost}': {}",
                current.name,
                errors::received_but_current(spec.arguments.get(key), current.arguments.get(key)),
            )));
        }
        Ok(())
    }
}
