//! Class `basic` (id 60): consuming, publishing and acknowledging messages
//! (amqp0-9-1.xml §basic, plus RabbitMQ's basic.nack). publish, return,
//! deliver and get-ok carry content (§4.2.6).

use crate::codec::{Arg, ArgReader, ArgSize, ArgWriter, Res};
use crate::field_table::FieldTable;
use crate::types::ShortStr;

amqp_class! {
    /// basic.qos (60/10): prefetch window.
    BasicQos = (60, 10, "basic.qos") {
        pub prefetch_size: u32,
        pub prefetch_count: u16,
        pub global: bool,
    }
    /// basic.qos-ok (60/11).
    BasicQosOk = (60, 11, "basic.qos-ok") {}
    /// basic.consume (60/20).
    BasicConsume = (60, 20, "basic.consume") {
        reserved ticket: u16,
        pub queue: ShortStr,
        pub consumer_tag: ShortStr,
        pub no_local: bool,
        pub no_ack: bool,
        pub exclusive: bool,
        pub nowait: bool,
        pub arguments: FieldTable,
    }
    /// basic.consume-ok (60/21).
    BasicConsumeOk = (60, 21, "basic.consume-ok") {
        pub consumer_tag: ShortStr,
    }
    /// basic.cancel (60/30); RabbitMQ also sends it to clients.
    BasicCancel = (60, 30, "basic.cancel") {
        pub consumer_tag: ShortStr,
        pub nowait: bool,
    }
    /// basic.cancel-ok (60/31).
    BasicCancelOk = (60, 31, "basic.cancel-ok") {
        pub consumer_tag: ShortStr,
    }
    /// basic.publish (60/40), followed by content.
    BasicPublish = (60, 40, "basic.publish", content) {
        reserved ticket: u16,
        pub exchange: ShortStr,
        pub routing_key: ShortStr,
        pub mandatory: bool,
        pub immediate: bool,
    }
    /// basic.return (60/50): an unroutable mandatory message, with content.
    BasicReturn = (60, 50, "basic.return", content) {
        pub reply_code: u16,
        pub reply_text: ShortStr,
        pub exchange: ShortStr,
        pub routing_key: ShortStr,
    }
    /// basic.deliver (60/60): a message for a consumer, with content.
    BasicDeliver = (60, 60, "basic.deliver", content) {
        pub consumer_tag: ShortStr,
        pub delivery_tag: u64,
        pub redelivered: bool,
        pub exchange: ShortStr,
        pub routing_key: ShortStr,
    }
    /// basic.get (60/70): synchronous fetch.
    BasicGet = (60, 70, "basic.get") {
        reserved ticket: u16,
        pub queue: ShortStr,
        pub no_ack: bool,
    }
    /// basic.get-ok (60/71), followed by content.
    BasicGetOk = (60, 71, "basic.get-ok", content) {
        pub delivery_tag: u64,
        pub redelivered: bool,
        pub exchange: ShortStr,
        pub routing_key: ShortStr,
        pub message_count: u32,
    }
    /// basic.get-empty (60/72).
    BasicGetEmpty = (60, 72, "basic.get-empty") {
        reserved cluster_id: ShortStr,
    }
    /// basic.ack (60/80).
    BasicAck = (60, 80, "basic.ack") {
        pub delivery_tag: u64,
        pub multiple: bool,
    }
    /// basic.reject (60/90).
    BasicReject = (60, 90, "basic.reject") {
        pub delivery_tag: u64,
        pub requeue: bool,
    }
    /// basic.recover-async (60/100, deprecated).
    BasicRecoverAsync = (60, 100, "basic.recover-async") {
        pub requeue: bool,
    }
    /// basic.recover (60/110).
    BasicRecover = (60, 110, "basic.recover") {
        pub requeue: bool,
    }
    /// basic.recover-ok (60/111).
    BasicRecoverOk = (60, 111, "basic.recover-ok") {}
    /// basic.nack (60/120, RabbitMQ).
    BasicNack = (60, 120, "basic.nack") {
        pub delivery_tag: u64,
        pub multiple: bool,
        pub requeue: bool,
    }
}
