//! Fuzzes the broker's handling of message properties it did not build: any property list the
//! wire layer accepts is published through a headers exchange and a delay exchange into a queue
//! with TTL and dead-lettering, fetched, rejected (so x-death is merged into whatever headers it
//! had) and expired. The broker must never panic, and every message it hands out must carry a
//! property list that decodes again.
#![no_main]

use std::time::Duration;

use bytes::Bytes;
use hourglass_broker::{Command, Effect, Publish};
use hourglass_testkit::{short, TestBroker};
use hourglass_wire::{
    BasicGet, BasicReject, EncodedProperties, ExchangeDeclare, FieldTable, FieldValue, Method, QueueBind,
    QueueDeclare,
};
use libfuzzer_sys::fuzz_target;

fn setup() -> (TestBroker, hourglass_testkit::Chan) {
    let mut tb = TestBroker::new();
    let chan = tb.channel();
    tb.call(chan, ExchangeDeclare { exchange: short("dlx"), kind: short("fanout"), ..Default::default() });
    tb.call(chan, QueueDeclare { queue: short("dlq"), ..Default::default() });
    tb.call(chan, QueueBind { queue: short("dlq"), exchange: short("dlx"), ..Default::default() });
    let arguments = FieldTable::from_entries([
        ("x-dead-letter-exchange", FieldValue::LongStr("dlx".into())),
        ("x-message-ttl", FieldValue::I32(50)),
    ]);
    tb.call(chan, QueueDeclare { queue: short("q"), arguments, ..Default::default() });
    tb.call(chan, ExchangeDeclare { exchange: short("h"), kind: short("headers"), ..Default::default() });
    let any =
        FieldTable::from_entries([("x-match", FieldValue::LongStr("any".into())), ("k", FieldValue::Void)]);
    tb.call(
        chan,
        QueueBind { queue: short("q"), exchange: short("h"), arguments: any, ..Default::default() },
    );
    let delayed = FieldTable::from_entries([("x-delayed-type", FieldValue::LongStr("direct".into()))]);
    let declare = ExchangeDeclare {
        exchange: short("d"),
        kind: short("x-delayed-message"),
        arguments: delayed,
        ..Default::default()
    };
    tb.call(chan, declare);
    tb.call(
        chan,
        QueueBind { queue: short("q"), exchange: short("d"), routing_key: short("q"), ..Default::default() },
    );
    (tb, chan)
}

/// Every message the broker sends must have properties that decode.
fn check(effects: &[Effect]) -> Option<u64> {
    let mut tag = None;
    for effect in effects {
        if let Some((_, method, Some(message))) = effect.clone().into_method() {
            let mut raw = Bytes::copy_from_slice(message.properties().as_bytes());
            assert!(
                EncodedProperties::split_from(&mut raw).is_ok(),
                "the broker sent undecodable properties"
            );
            if let Method::BasicGetOk(ok) = method {
                tag = Some(ok.delivery_tag);
            }
        }
    }
    tag
}

fuzz_target!(|data: &[u8]| {
    let mut raw = Bytes::copy_from_slice(data);
    let Ok(properties) = EncodedProperties::split_from(&mut raw) else { return };
    let (mut tb, chan) = setup();
    for (exchange, routing_key) in [("", "q"), ("h", ""), ("d", "q"), ("", "q")] {
        let publish = Publish {
            exchange: short(exchange),
            routing_key: short(routing_key),
            mandatory: true,
            properties: properties.clone(),
            body: raw.clone(),
        };
        let publish = Box::new(publish);
        let effects = tb.command(Command::Publish { conn: chan.conn, channel: chan.channel, publish });
        check(&effects);
    }
    if let Some(tag) = check(&tb.call(chan, BasicGet { queue: short("q"), no_ack: false })) {
        check(&tb.call(chan, BasicReject { delivery_tag: tag, requeue: false }));
    }
    check(&tb.advance(Duration::from_millis(100)));
    check(&tb.advance(Duration::from_secs(3600)));
    while check(&tb.call(chan, BasicGet { queue: short("dlq"), no_ack: true })).is_some() {}
});
