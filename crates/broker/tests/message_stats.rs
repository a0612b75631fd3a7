//! Message counters behind the management API's `message_stats` (issue #7): known traffic gives
//! known counts broker-wide, per queue, per channel and per exchange.

mod common;

use common::*;
use hourglass_broker::churn::ChurnStats;
use hourglass_broker::message_stats::{ExchangeStats, MessageStats};
use hourglass_testkit::{short, TestBroker};
use hourglass_wire::*;

/// Publishes (routed, returned, dropped, confirmed), deliveries of every kind, a redelivery and
/// acks are each counted once where they happened.
#[test]
fn known_traffic_gives_known_counts() {
    let mut tb = TestBroker::new();
    let c = tb.channel();
    declare(&mut tb, c, "q");
    bind(&mut tb, c, "q", "amq.direct", "k");
    tb.call(c, ConfirmSelect { nowait: false });
    for _ in 0..4 {
        tb.publish(c, "amq.direct", "k", b"m");
    }
    tb.publish_with(c, "amq.direct", "nowhere", BasicProperties::default(), b"m", true);
    tb.publish(c, "amq.direct", "nowhere", b"m");
    // get with ack, then requeue it: the next get is a redelivery; then a no-ack get.
    tb.call(c, BasicGet { queue: short("q"), no_ack: false });
    tb.call(c, BasicNack { delivery_tag: 1, multiple: false, requeue: true });
    tb.call(c, BasicGet { queue: short("q"), no_ack: false });
    tb.call(c, BasicAck { delivery_tag: 2, multiple: false });
    tb.call(c, BasicGet { queue: short("q"), no_ack: true });
    let consumer = tb.channel();
    // The two messages left go to this consumer; it acks one.
    consume(&mut tb, consumer, "q", "ack", false);
    ack(&mut tb, consumer, 1, false);
    tb.call(consumer, BasicCancel { consumer_tag: short("ack"), nowait: false });
    tb.publish(c, "amq.direct", "k", b"m");
    consume(&mut tb, consumer, "q", "no-ack", true);

    let global = tb.broker.message_stats();
    let expected = MessageStats {
        publish: 7,
        confirm: 7,
        received_confirm: 7,
        deliver: 2,
        deliver_no_ack: 1,
        get: 2,
        get_no_ack: 1,
        get_empty: 0,
        ack: 2,
        redeliver: 1,
        routed: 5,
        return_unroutable: 1,
        drop_unroutable: 1,
    };
    assert_eq!(global, expected);
    assert_eq!(global.deliver_get(), 6);

    let queue = tb.broker.queue_stats("/", "q").expect("queue").counters.messages;
    assert_eq!(
        queue,
        MessageStats {
            confirm: 0,
            received_confirm: 0,
            routed: 0,
            return_unroutable: 0,
            drop_unroutable: 0,
            publish: 5,
            ..expected
        }
    );

    let channels = tb.broker.list_channels();
    let publisher = channels.iter().find(|ch| ch.channel == c.channel && ch.conn == c.conn).expect("channel");
    assert_eq!(
        (publisher.message_stats.publish, publisher.message_stats.get, publisher.message_stats.ack),
        (7, 2, 1)
    );
    let subscriber = channels.iter().find(|ch| ch.channel == consumer.channel && ch.conn == consumer.conn);
    let subscriber = subscriber.expect("channel").message_stats;
    assert_eq!((subscriber.deliver, subscriber.deliver_no_ack, subscriber.ack), (2, 1, 1));

    let exchanges = tb.broker.list_exchange_details("/");
    let direct = exchanges.iter().find(|x| x.spec.name == "amq.direct").expect("amq.direct");
    assert_eq!(direct.message_stats, ExchangeStats { publish_in: 7, publish_out: 5 });
}

/// Churn (issue #13, Prometheus `rabbitmq_*_opened_total` and friends): connections and channels
/// opened and closed, queues declared (a redeclare too), created and deleted (by queue.delete and
/// by their exclusive owner leaving) are each counted once; the management API's own connection
/// is not counted.
#[test]
fn churn_is_counted_where_it_happens() {
    let mut tb = TestBroker::new();
    let c = tb.channel();
    declare(&mut tb, c, "kept");
    declare(&mut tb, c, "kept");
    let passive = QueueDeclare { queue: short("kept"), passive: true, ..Default::default() };
    tb.call(c, passive);
    let second = tb.open_channel(c.conn, 2);
    tb.call(second, ChannelClose { reply_code: 200, ..Default::default() });
    let other = tb.channel();
    let exclusive = QueueDeclare { queue: short("mine"), exclusive: true, ..Default::default() };
    tb.call(other, exclusive);
    declare(&mut tb, c, "gone");
    tb.call(c, QueueDelete { queue: short("gone"), ..Default::default() });
    tb.close_connection(other.conn);
    let now = tb.clock.now();
    let api = tb.broker.with_admin_channel("guest", "/", now, |ch| {
        ch.call(QueueDeclare { queue: short("via-api"), ..Default::default() })
    });
    assert!(api.is_ok());

    let expected = ChurnStats {
        connections_opened: 2,
        connections_closed: 1,
        channels_opened: 3,
        channels_closed: 2,
        queues_declared: 5,
        queues_created: 4,
        queues_deleted: 2,
    };
    assert_eq!(tb.broker.churn_stats(), expected);
}

/// basic.get on an empty queue counts `get_empty` broker-wide and on the channel; a publish on
/// a confirm channel counts `received_confirm` whether or not it is confirmed.
#[test]
fn empty_gets_and_confirm_mode_publishes_are_counted() {
    let mut tb = TestBroker::new();
    let c = tb.channel();
    declare(&mut tb, c, "q");
    tb.call(c, BasicGet { queue: short("q"), no_ack: true });
    tb.call(c, BasicGet { queue: short("q"), no_ack: false });
    tb.publish(c, "", "q", b"plain");
    tb.call(c, ConfirmSelect { nowait: false });
    tb.publish(c, "", "q", b"confirmed");
    let global = tb.broker.message_stats();
    assert_eq!((global.get_empty, global.received_confirm, global.confirm), (2, 1, 1));
    let channel = tb.broker.list_channels()[0].message_stats;
    assert_eq!((channel.get_empty, channel.received_confirm), (2, 1));
}
