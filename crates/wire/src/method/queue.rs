//! Class `queue` (id 50): declare, bind, unbind, purge and delete queues
//! (amqp0-9-1.xml §queue).

use crate::codec::{Arg, ArgReader, ArgSize, ArgWriter, Res};
use crate::field_table::FieldTable;
use crate::types::ShortStr;

amqp_class! {
    /// queue.declare (50/10); an empty `queue` asks for a server-named queue.
    QueueDeclare = (50, 10, "queue.declare") {
        reserved ticket: u16,
        pub queue: ShortStr,
        pub passive: bool,
        pub durable: bool,
        pub exclusive: bool,
        pub auto_delete: bool,
        pub nowait: bool,
        pub arguments: FieldTable,
    }
    /// queue.declare-ok (50/11).
    QueueDeclareOk = (50, 11, "queue.declare-ok") {
        pub queue: ShortStr,
        pub message_count: u32,
        pub consumer_count: u32,
    }
    /// queue.bind (50/20).
    QueueBind = (50, 20, "queue.bind") {
        reserved ticket: u16,
        pub queue: ShortStr,
        pub exchange: ShortStr,
        pub routing_key: ShortStr,
        pub nowait: bool,
        pub arguments: FieldTable,
    }
    /// queue.bind-ok (50/21).
    QueueBindOk = (50, 21, "queue.bind-ok") {}
    /// queue.purge (50/30).
    QueuePurge = (50, 30, "queue.purge") {
        reserved ticket: u16,
        pub queue: ShortStr,
        pub nowait: bool,
    }
    /// queue.purge-ok (50/31).
    QueuePurgeOk = (50, 31, "queue.purge-ok") {
        pub message_count: u32,
    }
    /// queue.delete (50/40).
    QueueDelete = (50, 40, "queue.delete") {
        reserved ticket: u16,
        pub queue: ShortStr,
        pub if_unused: bool,
        pub if_empty: bool,
        pub nowait: bool,
    }
    /// queue.delete-ok (50/41).
    QueueDeleteOk = (50, 41, "queue.delete-ok") {
        pub message_count: u32,
    }
    /// queue.unbind (50/50); note: no nowait bit.
    QueueUnbind = (50, 50, "queue.unbind") {
        reserved ticket: u16,
        pub queue: ShortStr,
        pub exchange: ShortStr,
        pub routing_key: ShortStr,
        pub arguments: FieldTable,
    }
    /// queue.unbind-ok (50/51).
    QueueUnbindOk = (50, 51, "queue.unbind-ok") {}
}
