//! Class `exchange` (id 40): declare/delete, plus RabbitMQ's
//! exchange-to-exchange bind (30/31) and unbind (40/51 — RabbitMQ's ids).

use crate::codec::{Arg, ArgReader, ArgSize, ArgWriter, Res};
use crate::field_table::FieldTable;
use crate::types::ShortStr;

amqp_class! {
    /// exchange.declare (40/10); `kind` is the spec's `type`.
    ExchangeDeclare = (40, 10, "exchange.declare") {
        reserved ticket: u16,
        pub exchange: ShortStr,
        pub kind: ShortStr,
        pub passive: bool,
        pub durable: bool,
        pub auto_delete: bool,
        pub internal: bool,
        pub nowait: bool,
        pub arguments: FieldTable,
    }
    /// exchange.declare-ok (40/11).
    ExchangeDeclareOk = (40, 11, "exchange.declare-ok") {}
    /// exchange.delete (40/20).
    ExchangeDelete = (40, 20, "exchange.delete") {
        reserved ticket: u16,
        pub exchange: ShortStr,
        pub if_unused: bool,
        pub nowait: bool,
    }
    /// exchange.delete-ok (40/21).
    ExchangeDeleteOk = (40, 21, "exchange.delete-ok") {}
    /// exchange.bind (40/30, RabbitMQ): route from `source` to `destination`.
    ExchangeBind = (40, 30, "exchange.bind") {
        reserved ticket: u16,
        pub destination: ShortStr,
        pub source: ShortStr,
        pub routing_key: ShortStr,
        pub nowait: bool,
        pub arguments: FieldTable,
    }
    /// exchange.bind-ok (40/31, RabbitMQ).
    ExchangeBindOk = (40, 31, "exchange.bind-ok") {}
    /// exchange.unbind (40/40, RabbitMQ).
    ExchangeUnbind = (40, 40, "exchange.unbind") {
        reserved ticket: u16,
        pub destination: ShortStr,
        pub source: ShortStr,
        pub routing_key: ShortStr,
        pub nowait: bool,
        pub arguments: FieldTable,
    }
    /// exchange.unbind-ok (40/51 — not 41 — as RabbitMQ numbers it).
    ExchangeUnbindOk = (40, 51, "exchange.unbind-ok") {}
}
