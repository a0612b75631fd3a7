//! Persistence without I/O (issue 6): which store ops each event emits, confirms held until the
//! driver reports their ops durable, dead-letter ordering, and restoring a broker from the ops.

mod common;

use std::time::Duration;

use common::*;
use hourglass_broker::{
    BrokerConfig, Command, Definitions, Effect, Message, Modification, OrphanedQueue, RestoreReport,
    SequencedOp, StoreOp, StoredBody,
};
use hourglass_testkit::{deliveries, methods, short, Chan, TestBroker};
use hourglass_wire::*;

/// The store's recovered view, with bodies kept as records.
#[derive(Default)]
struct Model(StoredModel);

impl Model {
    fn apply(&mut self, op: &StoreOp) {
        self.0.apply(op, |_, _, record| StoredBody::Record(record.clone()));
    }

    /// A new broker restored from this model, `later` after `tb`'s clock.
    fn restore(&self, tb: &TestBroker, later: Duration) -> TestBroker {
        self.restore_reporting(tb, later).0
    }

    /// [`Model::restore`], with what the restore reported.
    fn restore_reporting(&self, tb: &TestBroker, later: Duration) -> (TestBroker, RestoreReport) {
        self.restore_configured(tb, later, BrokerConfig { persistence: true, ..BrokerConfig::default() })
    }

    /// [`Model::restore_reporting`] into a broker made with `config`.
    fn restore_configured(
        &self,
        tb: &TestBroker,
        later: Duration,
        config: BrokerConfig,
    ) -> (TestBroker, RestoreReport) {
        let mut restored = TestBroker::with_config(config);
        let gap = tb.clock.now().saturating_duration_since(restored.clock.now()) + later;
        let now = restored.clock.advance(gap);
        let report = restored.broker.restore(self.0.definitions(), self.0.queues.clone(), now);
        (restored, report)
    }
}

fn durable_broker() -> TestBroker {
    TestBroker::with_config(BrokerConfig { persistence: true, ..BrokerConfig::default() })
}

fn ops(tb: &mut TestBroker) -> Vec<SequencedOp> {
    std::iter::from_fn(|| tb.broker.poll_store_op()).collect()
}

fn kinds(ops: &[SequencedOp]) -> Vec<&'static str> {
    ops.iter()
        .map(|o| match o.op {
            StoreOp::Enqueue { .. } => "enqueue",
            StoreOp::Settle { .. } => "settle",
            StoreOp::Update { .. } => "update",
            StoreOp::Purge { .. } => "purge",
            StoreOp::Catalog(_) => "catalog",
            StoreOp::Checkpoint(_) => "checkpoint",
        })
        .collect()
}

/// Writes every pending op to `model` and reports them durable; returns the released effects.
fn sync(tb: &mut TestBroker, model: &mut Model) -> Vec<Effect> {
    let pending = ops(tb);
    for op in &pending {
        model.apply(&op.op);
    }
    if let Some(last) = pending.last() {
        let now = tb.clock.now();
        tb.broker.handle_persisted(last.op_seq, now);
    }
    std::iter::from_fn(|| tb.broker.poll_effect()).collect()
}

fn durable_queue(tb: &mut TestBroker, c: Chan, name: &str, arguments: FieldTable) {
    tb.call(c, QueueDeclare { queue: short(name), durable: true, arguments, ..Default::default() });
}

fn persistent() -> BasicProperties {
    BasicProperties { delivery_mode: Some(2), ..Default::default() }
}

fn confirm(tb: &mut TestBroker, c: Chan) {
    tb.call(c, ConfirmSelect { nowait: false });
}

fn acks(effects: &[Effect]) -> Vec<u64> {
    methods(effects)
        .into_iter()
        .filter_map(|m| match m {
            Method::BasicAck(a) => Some(a.delivery_tag),
            _ => None,
        })
        .collect()
}

/// A durable broker with a declared (and synced) durable queue `q` and channel in confirm mode.
fn setup(arguments: FieldTable) -> (TestBroker, Chan, Model) {
    let mut tb = durable_broker();
    let mut model = Model::default();
    let c = tb.channel();
    tb.call(c, QueueDeclare { queue: short("q"), durable: true, arguments, ..Default::default() });
    sync(&mut tb, &mut model);
    confirm(&mut tb, c);
    (tb, c, model)
}

/// Only persistent messages in durable queues are written: transient messages and non-durable
/// queues never touch the store, and their confirms are not held.
#[test]
fn only_persistent_messages_in_durable_queues_are_written() {
    let (mut tb, c, _) = setup(FieldTable::new());
    declare(&mut tb, c, "transient-q");
    let _ = ops(&mut tb);
    assert_eq!(acks(&tb.publish(c, "", "q", b"transient")), vec![1]);
    assert_eq!(acks(&tb.publish_with(c, "", "transient-q", persistent(), b"p", false)), vec![2]);
    assert!(ops(&mut tb).is_empty());
    let effects = tb.publish_with(c, "", "q", persistent(), b"p", false);
    assert!(acks(&effects).is_empty(), "the confirm waits for the store");
    assert_eq!(kinds(&ops(&mut tb)), vec!["enqueue"]);
}

/// A confirm is released only by handle_persisted covering its op, in publish order per channel;
/// another channel's confirms are not held behind it. Held confirms are the channel's
/// `messages_unconfirmed` (Prometheus `rabbitmq_channel_messages_unconfirmed`).
#[test]
fn confirms_are_held_until_their_ops_are_durable() {
    let (mut tb, c, _) = setup(FieldTable::new());
    tb.publish_with(c, "", "q", persistent(), b"1", false);
    tb.publish_with(c, "", "q", persistent(), b"2", false);
    let pending = ops(&mut tb);
    assert_eq!(pending.len(), 2);
    let other = tb.open_channel(c.conn, 2);
    confirm(&mut tb, other);
    assert_eq!(acks(&tb.publish(other, "", "q", b"transient")), vec![1], "other channel not held");
    assert_eq!(unconfirmed(&tb), vec![2, 0]);
    let now = tb.clock.now();
    tb.broker.handle_persisted(pending[0].op_seq, now);
    let released: Vec<Effect> = std::iter::from_fn(|| tb.broker.poll_effect()).collect();
    assert_eq!(acks(&released), vec![1]);
    assert_eq!(unconfirmed(&tb), vec![1, 0]);
    tb.broker.handle_persisted(pending[1].op_seq, now);
    let released: Vec<Effect> = std::iter::from_fn(|| tb.broker.poll_effect()).collect();
    assert_eq!(acks(&released), vec![2]);
    assert_eq!(tb.broker.held_effects(), 0);
    assert_eq!(unconfirmed(&tb), vec![0, 0]);
}

/// Each channel's confirms still waiting for the store, in channel order.
fn unconfirmed(tb: &TestBroker) -> Vec<u32> {
    tb.broker.list_channels().iter().map(|c| c.messages_unconfirmed).collect()
}

/// Effects after a held confirm on the same channel wait behind it (channel.close-ok too).
#[test]
fn later_effects_of_a_channel_wait_behind_a_held_confirm() {
    let (mut tb, c, mut model) = setup(FieldTable::new());
    tb.publish_with(c, "", "q", persistent(), b"1", false);
    let effects = tb.call(c, ChannelClose::default());
    assert!(methods(&effects).is_empty(), "close-ok waits behind the ack: {effects:?}");
    let released = sync(&mut tb, &mut model);
    assert!(matches!(methods(&released).as_slice(), [Method::BasicAck(_), Method::ChannelCloseOk(_)]));
}

/// queue.declare-ok of a durable queue waits for its definitions to be written.
#[test]
fn durable_declare_ok_waits_for_definitions() {
    let mut tb = durable_broker();
    let mut model = Model::default();
    let c = tb.channel();
    let effects = tb.call(c, QueueDeclare { queue: short("d"), durable: true, ..Default::default() });
    assert!(methods(&effects).is_empty());
    assert_eq!(kinds(&ops(&mut tb)), vec!["catalog"; 2], "the queue and the next queue id");
    tb.broker.handle_persisted(u64::MAX, tb.clock.now());
    let released: Vec<Effect> = std::iter::from_fn(|| tb.broker.poll_effect()).collect();
    assert!(matches!(methods(&released).as_slice(), [Method::QueueDeclareOk(_)]));
    let effects = tb.call(c, QueueDeclare { queue: short("t"), ..Default::default() });
    assert!(matches!(methods(&effects).as_slice(), [Method::QueueDeclareOk(_)]), "transient: no wait");
    assert!(sync(&mut tb, &mut model).is_empty());
}

/// tx.commit-ok stands for the commit's persistent publishes: it goes once they are durable. A
/// reply that stored nothing (a passive declare of the same queue) goes at once, though the
/// commit's ops are still being written.
#[test]
fn tx_commit_ok_waits_for_the_commit_s_messages_and_nothing_else_does() {
    let mut tb = durable_broker();
    let mut model = Model::default();
    let c = tb.channel();
    durable_queue(&mut tb, c, "q", FieldTable::new());
    sync(&mut tb, &mut model);
    tb.call(c, TxSelect {});
    tb.publish_with(c, "", "q", persistent(), b"1", false);
    tb.publish_with(c, "", "q", persistent(), b"2", false);
    assert!(ops(&mut tb).is_empty(), "nothing is written before the commit");
    let effects = tb.call(c, TxCommit {});
    assert!(methods(&effects).is_empty(), "commit-ok waits: {effects:?}");
    let other = tb.open_channel(c.conn, 2);
    let passive = tb.call(other, QueueDeclare { queue: short("q"), passive: true, ..Default::default() });
    assert!(matches!(methods(&passive).as_slice(), [Method::QueueDeclareOk(_)]), "{passive:?}");
    let released = sync(&mut tb, &mut model);
    assert!(matches!(methods(&released).as_slice(), [Method::TxCommitOk(_)]), "{released:?}");
    assert_eq!(model.0.live(), 2);
}

/// A durable queue deleted under its consumers: the basic.cancel to a consumer of the deleting
/// connection goes with the delete-ok (RabbitMQ's order on the deleting channel: cancel, then
/// delete-ok), once the delete is durable. A client that closes its channel or connection on the
/// cancel must still get its delete-ok (amqplib's "cancelled consumer" test). A consumer of
/// another connection is told at once.
#[test]
fn a_deleted_queue_s_cancels_to_the_deleting_connection_go_with_its_delete_ok() {
    let mut tb = durable_broker();
    let mut model = Model::default();
    let c = tb.channel();
    durable_queue(&mut tb, c, "q", FieldTable::new());
    sync(&mut tb, &mut model);
    consume(&mut tb, c, "q", "own", false);
    let sibling = tb.open_channel(c.conn, 2);
    consume(&mut tb, sibling, "q", "sibling", false);
    let stranger = tb.channel();
    consume(&mut tb, stranger, "q", "stranger", false);
    let effects = tb.call(c, QueueDelete { queue: short("q"), ..Default::default() });
    let told = |effects: &[Effect], to: Chan| -> Vec<String> {
        effects
            .iter()
            .filter(|e| e.channel_key() == Some((to.conn, to.channel)))
            .filter_map(|e| e.clone().into_method())
            .map(|(_, method, _)| match method {
                Method::BasicCancel(cancel) => format!("cancel {}", cancel.consumer_tag),
                Method::QueueDeleteOk(_) => "delete-ok".to_string(),
                other => format!("{other:?}"),
            })
            .collect()
    };
    assert_eq!(told(&effects, stranger), ["cancel stranger"], "another connection is told at once");
    assert!(told(&effects, c).is_empty(), "the deleting channel waits: {effects:?}");
    assert!(told(&effects, sibling).is_empty(), "so does its connection's: {effects:?}");
    let released = sync(&mut tb, &mut model);
    assert_eq!(told(&released, c), ["cancel own", "delete-ok"]);
    assert_eq!(told(&released, sibling), ["cancel sibling"]);
}

/// A durable queue with `x-expires` restored empty expires that long after the restart, as on
/// RabbitMQ. Only queues restored with messages had their timers filed, so an empty one stayed
/// until a client touched it, counting against `max-queues`.
#[test]
fn an_empty_durable_queue_with_x_expires_expires_after_a_restore() {
    let mut tb = durable_broker();
    let mut model = Model::default();
    let c = tb.channel();
    durable_queue(&mut tb, c, "unused", FieldTable::from_entries([("x-expires", FieldValue::I64(60_000))]));
    sync(&mut tb, &mut model);
    let mut restored = model.restore(&tb, Duration::from_millis(10));
    restored.advance(Duration::from_millis(59_999));
    assert!(restored.broker.queue_stats("/", "unused").is_some(), "not yet unused for 60 s");
    restored.advance(Duration::from_millis(1));
    assert!(restored.broker.queue_stats("/", "unused").is_none(), "deleted 60 s after the restart");
}

/// A first delivery marks the message delivered; ack settles; nack with requeue updates the
/// delivery count; no-ack delivery settles at once.
#[test]
fn ack_settles_and_requeue_updates() {
    let (mut tb, c, mut model) = setup(FieldTable::new());
    tb.publish_with(c, "", "q", persistent(), b"1", false);
    tb.publish_with(c, "", "q", persistent(), b"2", false);
    sync(&mut tb, &mut model);
    let d = deliveries(&consume(&mut tb, c, "q", "ctag", false));
    assert_eq!(d.len(), 2);
    assert_eq!(kinds(&ops(&mut tb)), vec!["update", "update"], "first deliveries are marked");
    tb.call(c, BasicNack { delivery_tag: d[0].method.delivery_tag, multiple: false, requeue: true });
    let written = ops(&mut tb);
    assert_eq!(kinds(&written), vec!["update"]);
    ack(&mut tb, c, d[1].method.delivery_tag, false);
    assert_eq!(kinds(&ops(&mut tb)), vec!["settle"]);
    tb.call(c, BasicCancel { consumer_tag: short("ctag"), nowait: false });
    let c2 = tb.channel();
    tb.publish_with(c2, "", "q", persistent(), b"3", false);
    tb.call(c2, BasicGet { queue: short("q"), no_ack: true });
    assert_eq!(kinds(&ops(&mut tb)), vec!["enqueue", "settle"], "a no-ack delivery settles at once");
}

/// A message delivered as it is published is marked delivered in its own pending Enqueue record,
/// not by a second record; after a restart it comes back redelivered.
#[test]
fn delivery_at_publish_marks_the_pending_enqueue() {
    let (mut tb, c, mut model) = setup(FieldTable::new());
    consume(&mut tb, c, "q", "ctag", false);
    let d = deliveries(&tb.publish_with(c, "", "q", persistent(), b"1", false));
    assert_eq!(d.len(), 1);
    let written = ops(&mut tb);
    assert_eq!(kinds(&written), vec!["enqueue"], "no separate delivered record");
    for op in &written {
        model.apply(&op.op);
    }
    let mut restored = model.restore(&tb, Duration::from_millis(10));
    let rc = restored.channel();
    let again = deliveries(&consume(&mut restored, rc, "q", "t", true));
    assert!(again[0].method.redelivered, "the enqueue record says delivered");
}

/// The store's second recovery pass hands messages over one at a time in log order; a queue
/// keeps its ready messages in id order whatever order they arrive in.
#[test]
fn restored_ready_messages_are_in_id_order_whatever_order_they_arrive_in() {
    let (mut tb, c, mut model) = setup(FieldTable::new());
    for body in [b"1", b"2", b"3", b"4"] {
        tb.publish_with(c, "", "q", persistent(), body, false);
    }
    sync(&mut tb, &mut model);
    for messages in model.0.queues.values_mut() {
        messages.swap(0, 3);
        messages.swap(1, 2);
    }
    let mut restored = model.restore(&tb, Duration::from_millis(10));
    let rc = restored.channel();
    let got = bodies(&consume(&mut restored, rc, "q", "t", true));
    assert_eq!(got, [b"1", b"2", b"3", b"4"]);
}

/// A durable broker whose queue `q` dead-letters into the durable queue `dlq`, with one
/// persistent message of `q` delivered (by basic.get, unacked) and every op so far synced.
fn dead_lettering_delivery() -> (TestBroker, Chan) {
    let dlx = FieldTable::from_entries([
        ("x-dead-letter-exchange", FieldValue::LongStr("".into())),
        ("x-dead-letter-routing-key", FieldValue::LongStr("dlq".into())),
    ]);
    let (mut tb, c, mut model) = setup(dlx);
    durable_queue(&mut tb, c, "dlq", FieldTable::new());
    tb.publish_with(c, "", "q", persistent(), b"1", false);
    sync(&mut tb, &mut model);
    tb.call(c, BasicGet { queue: short("q"), ..Default::default() });
    (tb, c)
}

/// Dead-lettering writes the copy's Enqueue into the DLQ before the source's Settle (semantics §2:
/// at-least-once across a crash).
#[test]
fn dead_letter_copy_is_written_before_the_source_is_settled() {
    let (mut tb, c) = dead_lettering_delivery();
    assert_eq!(kinds(&ops(&mut tb)), vec!["update"], "the delivered mark");
    tb.call(c, BasicReject { delivery_tag: 1, requeue: false });
    let written = ops(&mut tb);
    assert_eq!(kinds(&written), vec!["enqueue", "settle"]);
    let StoreOp::Enqueue { queue: target, .. } = &written[0].op else { unreachable!() };
    let StoreOp::Settle { queue: source, .. } = &written[1].op else { unreachable!() };
    assert_ne!(target, source);
}

fn modify(c: Chan, tag: u64, undeliverable_here: bool, annotations: &[(&str, FieldValue)]) -> Command {
    Command::Modify(Box::new(Modification {
        conn: c.conn,
        channel: c.channel,
        delivery_tag: tag,
        failed: true,
        undeliverable_here,
        ready_at: None,
        annotations: FieldTable::from_entries(annotations.iter().cloned()),
    }))
}

fn header_text(message: &Message, key: &str) -> Option<String> {
    let value = message.properties().headers()?.get(key)?;
    Some(String::from_utf8_lossy(value.as_bytes()?).into_owned())
}

/// Issue 42 (RabbitMQ 4.0's modified outcome): annotations a consumer adds while handing a
/// persistent message back are kept, also across a restart. The annotated message is stored
/// before the old record is settled (a crash in between keeps both, never neither), and it keeps
/// its place in the queue. Before, the annotations were dropped: the message came back as it was.
#[test]
fn a_message_handed_back_with_annotations_keeps_them_across_a_restart() {
    let (mut tb, c, mut model) = setup(FieldTable::new());
    for body in [b"1", b"2"] {
        tb.publish_with(c, "", "q", persistent(), body, false);
    }
    sync(&mut tb, &mut model);
    tb.call(c, BasicGet { queue: short("q"), ..Default::default() });
    ops(&mut tb);
    let reason = [("x-opt-requeue-reason", FieldValue::from("service unavailable"))];
    tb.command(modify(c, 1, false, &reason));
    let written = ops(&mut tb);
    assert_eq!(kinds(&written), vec!["enqueue", "settle", "update"]);
    for op in &written {
        model.apply(&op.op);
    }
    let d = tb.call(c, BasicGet { queue: short("q"), no_ack: true });
    let got = gotten(&d);
    assert_eq!(&got[0].body[..], b"1", "it keeps its place at the head");
    assert_eq!(header_text(&got[0], "x-opt-requeue-reason").as_deref(), Some("service unavailable"));
    assert!(got[0].is_persistent());

    let mut restored = model.restore(&tb, Duration::from_millis(10));
    let rc = restored.channel();
    let d = deliveries(&consume(&mut restored, rc, "q", "t", true));
    let kept: Vec<(&[u8], Option<String>)> =
        d.iter().map(|d| (d.body(), header_text(&d.message, "x-opt-requeue-reason"))).collect();
    assert_eq!(
        kept,
        vec![(b"2".as_slice(), None), (b"1".as_slice(), Some("service unavailable".to_owned()))],
        "after a restart it is read back behind the messages stored before it"
    );
}

/// Issue 42: a message dead-lettered by a `modified` outcome with `undeliverable-here` carries
/// the annotations into its copy, and the source needs no store op of its own but its settle.
#[test]
fn a_message_dead_lettered_with_annotations_carries_them() {
    let (mut tb, c) = dead_lettering_delivery();
    ops(&mut tb);
    tb.command(modify(c, 1, true, &[("x-opt-why", FieldValue::from("bad input"))]));
    assert_eq!(kinds(&ops(&mut tb)), vec!["enqueue", "settle"]);
    let d = tb.call(c, BasicGet { queue: short("dlq"), no_ack: true });
    let got = gotten(&d);
    assert_eq!(header_text(&got[0], "x-opt-why").as_deref(), Some("bad input"));
    assert_eq!(header_text(&got[0], "x-first-death-reason").as_deref(), Some("rejected"));
}

/// Issue 42: annotations that would grow a message's headers past the limit of a stored table
/// are refused with a 406 (a channel error); the message is handed back as it was, not lost.
#[test]
fn annotations_past_the_table_limit_are_refused_and_the_message_kept() {
    let (mut tb, c, mut model) = setup(FieldTable::new());
    tb.publish_with(c, "", "q", persistent(), b"1", false);
    sync(&mut tb, &mut model);
    tb.call(c, BasicGet { queue: short("q"), ..Default::default() });
    let big = "v".repeat(hourglass_broker::table_limits::TABLE_BYTES_MAX);
    let refused = tb.command(modify(c, 1, false, &[("x-big", FieldValue::from(big.as_str()))]));
    assert!(
        refused.iter().any(|e| matches!(e, Effect::ChannelError { error, .. } if error.reply_code == 406)),
        "{refused:?}"
    );
    let c2 = tb.channel();
    let d = tb.call(c2, BasicGet { queue: short("q"), no_ack: true });
    let got = gotten(&d);
    assert_eq!((&got[0].body[..], header_text(&got[0], "x-big")), (b"1".as_slice(), None));
}

/// A delayed message is written once with its due time; falling due writes nothing.
#[test]
fn delayed_message_is_written_once() {
    let delay = FieldTable::from_entries([("x-delivery-delay", FieldValue::I64(1000))]);
    let (mut tb, c, mut model) = setup(delay);
    tb.publish_with(c, "", "q", persistent(), b"later", false);
    assert_eq!(kinds(&ops(&mut tb)), vec!["enqueue"]);
    tb.advance(Duration::from_millis(1000));
    assert!(ops(&mut tb).is_empty());
    assert_eq!(tb.broker.queue_stats("/", "q").unwrap().messages_ready, 1);
    let _ = sync(&mut tb, &mut model);
}

/// Restoring from the written ops rebuilds definitions (same queue ids, bindings), ready messages
/// in order with their delivery counts (redelivered=true only for the one delivered before),
/// delayed ones still delayed, and nothing acked.
#[test]
fn restore_round_trip() {
    let (mut tb, c, mut model) = setup(FieldTable::new());
    let delay = FieldTable::from_entries([("x-delivery-delay", FieldValue::I64(60_000))]);
    durable_queue(&mut tb, c, "later", delay);
    tb.call(
        c,
        ExchangeDeclare { exchange: short("x"), kind: short("fanout"), durable: true, ..Default::default() },
    );
    bind(&mut tb, c, "q", "x", "");
    bind(&mut tb, c, "later", "x", "");
    for body in [b"1", b"2", b"3"] {
        tb.publish_with(c, "x", "", persistent(), body, false);
    }
    sync(&mut tb, &mut model);
    let d = tb.call(c, BasicGet { queue: short("q"), ..Default::default() });
    assert_eq!(methods(&d).len(), 1);
    ack(&mut tb, c, 1, false);
    let d = tb.call(c, BasicGet { queue: short("q"), ..Default::default() });
    assert_eq!(methods(&d).len(), 1);
    tb.call(c, BasicReject { delivery_tag: 2, requeue: true });
    sync(&mut tb, &mut model);

    let mut restored = model.restore(&tb, Duration::from_millis(10));
    let q = restored.broker.queue_stats("/", "q").unwrap();
    assert_eq!((q.messages_ready, q.messages_delayed), (2, 0));
    let later = restored.broker.queue_stats("/", "later").unwrap();
    assert_eq!((later.messages_ready, later.messages_delayed), (0, 3));
    assert_eq!(restored.broker.list_bindings("/").len(), tb.broker.list_bindings("/").len());
    let rc = restored.channel();
    let d = deliveries(&consume(&mut restored, rc, "q", "t", true));
    let bodies: Vec<&[u8]> = d.iter().map(|d| d.body()).collect();
    assert_eq!(bodies, vec![b"2".as_slice(), b"3".as_slice()]);
    let redelivered: Vec<bool> = d.iter().map(|d| d.method.redelivered).collect();
    assert_eq!(redelivered, [true, false], "only the message delivered before the restart");
    let count = d[0].message.properties().headers().and_then(|h| h.get("x-delivery-count"));
    assert_eq!(count.and_then(|v| v.as_i64()), Some(1), "delivery count kept");
    // A new publish after restore goes to the same queue through the restored binding.
    restored.publish_with(rc, "x", "", persistent(), b"4", false);
    assert_eq!(restored.broker.queue_stats("/", "later").unwrap().messages_delayed, 4);
    let d = restored.advance(Duration::from_millis(59_995));
    assert!(d.is_empty());
    assert_eq!(restored.broker.queue_stats("/", "later").unwrap().messages_ready, 3);
}

/// The restore report's `delayed` counts only messages still waiting at the restore; those that
/// fell due while the broker was down are ready at once and counted as ready (issue 25: the log
/// line said `delayed=11` where 5 were still waiting).
#[test]
fn restore_report_counts_as_delayed_only_what_still_waits() {
    let (mut tb, c, mut model) = setup(FieldTable::new());
    let delay = FieldTable::from_entries([("x-delivery-delay", FieldValue::I64(10_000))]);
    durable_queue(&mut tb, c, "later", delay);
    for body in [b"1", b"2"] {
        tb.publish_with(c, "", "later", persistent(), body, false);
    }
    tb.advance(Duration::from_secs(6));
    for body in [b"3", b"4", b"5"] {
        tb.publish_with(c, "", "later", persistent(), body, false);
    }
    sync(&mut tb, &mut model);

    // Down from 6 s to 12 s: the first two fell due at 10 s, the last three are due at 16 s.
    let (restored, report) = model.restore_reporting(&tb, Duration::from_secs(6));
    assert_eq!((report.ready, report.delayed), (2, 3));
    let later = restored.broker.queue_stats("/", "later").unwrap();
    assert_eq!((later.messages_ready, later.messages_delayed), (2, 3));
}

/// Two durable queues `a` and `b` behind a delayed exchange `d`, and one persistent message per
/// `(queue, delay in ms)`, its body the queue and the delay (`a1000`), all published at once.
fn delayed_messages(messages: &[(&str, i64)]) -> (TestBroker, Chan, Model) {
    let (mut tb, c, mut model) = setup(FieldTable::new());
    let routing = FieldTable::from_entries([("x-delayed-type", FieldValue::LongStr("direct".into()))]);
    tb.call(
        c,
        ExchangeDeclare {
            exchange: short("d"),
            kind: short("x-delayed-message"),
            durable: true,
            arguments: routing,
            ..Default::default()
        },
    );
    for queue in ["a", "b"] {
        durable_queue(&mut tb, c, queue, FieldTable::new());
        bind(&mut tb, c, queue, "d", queue);
    }
    for (queue, delay) in messages {
        let headers = FieldTable::from_entries([("x-delay", FieldValue::I64(*delay))]);
        let properties = BasicProperties { headers: Some(headers), ..persistent() };
        tb.publish_with(c, "d", queue, properties, format!("{queue}{delay}").as_bytes(), false);
    }
    sync(&mut tb, &mut model);
    (tb, c, model)
}

fn texts(effects: &[Effect]) -> Vec<String> {
    deliveries(effects).iter().map(|d| String::from_utf8_lossy(d.body()).into_owned()).collect()
}

/// Issue 38: delayed messages that fell due while the broker was down are delivered as soon as it
/// is back, never early, in due order across queues, at no more than `overdue_release_rate` a
/// second (a second's worth at once); a message due after the restore comes exactly on time.
#[test]
fn overdue_messages_are_released_in_due_order_at_the_operator_s_rate() {
    let published = [("a", 4000), ("a", 1000), ("b", 5000), ("a", 3000), ("b", 2000), ("a", 12_000)];
    let (tb, _, model) = delayed_messages(&published);
    let config = BrokerConfig {
        persistence: true,
        overdue_release_rate: std::num::NonZeroU32::new(2),
        ..BrokerConfig::default()
    };
    // Down for 10 s: five fell due meanwhile, `a12000` is due 2 s after the restore.
    let (mut restored, report) = model.restore_configured(&tb, Duration::from_secs(10), config);
    assert_eq!((report.ready, report.overdue, report.delayed), (5, 5, 1));
    let rc = restored.channel();
    let mut got = texts(&consume(&mut restored, rc, "a", "ta", true));
    got.extend(texts(&consume(&mut restored, rc, "b", "tb", true)));
    assert_eq!(got, ["a1000", "b2000"], "a second's worth at once, earliest due first");
    assert!(restored.advance(Duration::from_millis(499)).is_empty(), "never faster than the rate");
    assert_eq!(texts(&restored.advance(Duration::from_millis(1))), ["a3000"]);
    assert_eq!(texts(&restored.advance(Duration::from_millis(500))), ["a4000"]);
    assert_eq!(texts(&restored.advance(Duration::from_millis(500))), ["b5000"]);
    assert_eq!(restored.broker.next_deadline(), Some(tb.clock.now().saturating_add_millis(12_000)));
    assert!(restored.advance(Duration::from_millis(499)).is_empty(), "never early");
    assert_eq!(texts(&restored.advance(Duration::from_millis(1))), ["a12000"]);
}

/// A queue held for the overdue limiter still serves a head that is no longer overdue at once: an
/// operator cancels the overdue head and reschedules the next message to now, and it is delivered
/// then, not when the limiter would have reached the queue (the review of the timer gate, now
/// `Queue::timers_due`: a held head is no deadline, yet a pass of the queue must look at it).
#[test]
fn a_held_queue_s_head_rescheduled_to_now_is_delivered_at_once() {
    let (tb, _, model) = delayed_messages(&[("a", 1000), ("b", 2000), ("a", 3000), ("a", 20_000)]);
    let config = BrokerConfig {
        persistence: true,
        overdue_release_rate: std::num::NonZeroU32::new(1),
        ..BrokerConfig::default()
    };
    let (mut restored, report) = model.restore_configured(&tb, Duration::from_secs(10), config);
    assert_eq!((report.overdue, report.delayed), (3, 1));
    let rc = restored.channel();
    let mut got = texts(&consume(&mut restored, rc, "a", "ta", true));
    got.extend(texts(&consume(&mut restored, rc, "b", "tb", true)));
    assert_eq!(got, ["a1000"], "a second's worth at once");
    let waiting = restored.broker.peek_delayed("/", "a", 10).unwrap().read_stored(usize::MAX);
    let bodies: Vec<&[u8]> = waiting.iter().map(|d| &d.message.body[..]).collect();
    assert_eq!(bodies, [&b"a3000"[..], b"a20000"]);
    restored.broker.cancel_delayed("/", "a", waiting[0].id).unwrap();
    // Past the restore: what is due from now on is no longer overdue.
    assert!(restored.advance(Duration::from_millis(100)).is_empty());
    let now = restored.clock.now();
    restored.broker.reschedule_delayed("/", "a", waiting[1].id, now, now).unwrap();
    let effects: Vec<Effect> = std::iter::from_fn(|| restored.broker.poll_effect()).collect();
    assert_eq!(texts(&effects), ["a20000"], "delivered at once, held or not");
    assert_eq!(texts(&restored.advance(Duration::from_millis(900))), ["b2000"]);
}

/// Without a rate (the default), everything that fell due while the broker was down is ready at
/// the restore, each queue's in due order.
#[test]
fn overdue_messages_without_a_rate_are_all_ready_at_the_restore() {
    let (tb, _, model) = delayed_messages(&[("a", 4000), ("a", 1000), ("b", 2000), ("a", 3000)]);
    let (mut restored, report) = model.restore_reporting(&tb, Duration::from_secs(10));
    assert_eq!((report.ready, report.overdue, report.delayed), (4, 4, 0));
    let rc = restored.channel();
    assert_eq!(texts(&consume(&mut restored, rc, "a", "ta", true)), ["a1000", "a3000", "a4000"]);
    assert_eq!(texts(&consume(&mut restored, rc, "b", "tb", true)), ["b2000"]);
}

/// A message whose TTL ran out while the broker was down is dead-lettered on restore.
#[test]
fn message_expired_while_down_is_dead_lettered_on_restore() {
    let args = FieldTable::from_entries([
        ("x-message-ttl", FieldValue::I64(1000)),
        ("x-dead-letter-exchange", FieldValue::LongStr("".into())),
        ("x-dead-letter-routing-key", FieldValue::LongStr("dlq".into())),
    ]);
    let (mut tb, c, mut model) = setup(args);
    durable_queue(&mut tb, c, "dlq", FieldTable::new());
    tb.publish_with(c, "", "q", persistent(), b"x", false);
    sync(&mut tb, &mut model);
    let mut restored = model.restore(&tb, Duration::from_millis(5000));
    assert_eq!(restored.broker.queue_stats("/", "q").unwrap().messages_ready, 0);
    assert_eq!(restored.broker.queue_stats("/", "dlq").unwrap().messages_ready, 1);
    assert_eq!(kinds(&ops(&mut restored)), vec!["enqueue", "settle"]);
}

/// Issue 12: messages whose queue definition is missing (the definitions file lost) are never
/// purged: their queue comes back, under its old id, as `hourglass.orphaned.<id>` in `/`, and
/// goes into the definitions, so it is still there at the next restore.
#[test]
fn messages_of_a_queue_missing_from_the_definitions_are_kept_in_a_recreated_queue() {
    let (mut tb, c, mut model) = setup(FieldTable::new());
    for body in [b"1", b"2"] {
        tb.publish_with(c, "", "q", persistent(), body, false);
    }
    sync(&mut tb, &mut model);
    let id = *model.0.queues.keys().next().expect("a stored queue");
    let mut restored = durable_broker();
    let now = restored.clock.now();
    let report = restored.broker.restore(Definitions::default(), model.0.queues.clone(), now);
    let name = format!("hourglass.orphaned.{id}");
    assert_eq!(
        report.orphaned,
        vec![OrphanedQueue { id, vhost: "/".into(), name: name.clone(), messages: 2 }]
    );
    assert_eq!(restored.broker.queue_stats("/", &name).unwrap().messages_ready, 2);
    let written = ops(&mut restored);
    assert_eq!(kinds(&written), vec!["catalog"; 2], "nothing purged; the queue and the next id written");

    // The next restore, from the definitions just written, finds the queue and its messages.
    let mut after = Model(StoredModel { queues: model.0.queues.clone(), ..Default::default() });
    for op in &written {
        after.apply(&op.op);
    }
    let mut again = durable_broker();
    let now = again.clock.now();
    let report = again.broker.restore(after.0.definitions(), after.0.queues.clone(), now);
    assert!(report.orphaned.is_empty(), "{report:?}");
    assert_eq!(again.broker.queue_stats("/", &name).unwrap().messages_ready, 2);
    assert!(ops(&mut again).is_empty());
}

/// A table nested `depth` levels (the outermost is level 1) in one entry `x-deep`.
fn nested_table(depth: usize) -> FieldTable {
    let mut table = FieldTable::from_entries([("leaf", FieldValue::I64(1))]);
    for _ in 1..depth {
        table = FieldTable::from_entries([("x-deep", FieldValue::Table(table))]);
    }
    table
}

/// Issue 12: arguments as deep as a client may send them (the decoder's limit) on a durable
/// queue, exchange and binding survive the definitions snapshot: the snapshot's own nesting does
/// not count against the client's limit, so the restore finds all three, arguments intact.
#[test]
fn arguments_nested_as_deep_as_accepted_survive_a_restore() {
    let deepest = nested_table(MAX_NESTING_DEPTH);
    assert!(FieldTable::from_raw(deepest.raw().clone()).is_ok(), "the decoder accepts it");
    assert!(FieldTable::from_raw(nested_table(MAX_NESTING_DEPTH + 1).raw().clone()).is_err());
    let (mut tb, c, mut model) = setup(deepest.clone());
    tb.call(
        c,
        ExchangeDeclare {
            exchange: short("x"),
            kind: short("headers"),
            durable: true,
            arguments: deepest.clone(),
            ..Default::default()
        },
    );
    tb.call(
        c,
        QueueBind {
            queue: short("q"),
            exchange: short("x"),
            arguments: deepest.clone(),
            ..Default::default()
        },
    );
    tb.publish_with(c, "", "q", persistent(), b"m", false);
    sync(&mut tb, &mut model);

    let restored = model.restore(&tb, Duration::from_millis(1));
    assert_eq!(restored.broker.queue_stats("/", "q").unwrap().messages_ready, 1);
    let queue = restored.broker.list_queue_details().into_iter().find(|q| q.stats.name == "q").unwrap();
    assert_eq!(queue.arguments, deepest);
    let exchange = restored.broker.list_exchanges("/").into_iter().find(|x| x.name.as_bytes() == b"x");
    assert_eq!(exchange.expect("exchange x").arguments, deepest);
    let bindings = restored.broker.list_binding_details("/");
    let binding = bindings.iter().find(|b| b.source == "x").expect("binding from x");
    assert_eq!(binding.arguments, deepest);
}
