//! basic.* methods: publish, consume, cancel, get, ack/nack/reject, recover, qos.
//! Handing messages to consumers lives in `dispatch.rs`.

use std::sync::Arc;

use hourglass_wire::reply_code::NO_ROUTE;
use hourglass_wire::{
    BasicAck, BasicCancel, BasicCancelOk, BasicConsume, BasicConsumeOk, BasicGet, BasicGetEmpty, BasicGetOk,
    BasicNack, BasicQos, BasicQosOk, BasicRecoverOk, BasicReject, BasicReturn, FieldTable, ShortStr,
};

use super::publish_route::{exchange_for_publish, Found, Pending, PublishRoute};
use crate::admin::ADMIN_CONNECTION;
use crate::api::{AmqpError, ChannelId, ConnectionId, Effect, Modification, Publish};
use crate::broker::Broker;
use crate::channel::{Mode, Settlement, Unacked};
use crate::connections::ConnectionState;
use crate::enqueue::Enqueued;
use crate::errors;
use crate::exchange::delayed;
use crate::firehose::TracedDelivery;
use crate::message::Message;
use crate::message_stats::{Confirm, DeliveryKind, PublishOutcome};
use crate::persist::Persistence;
use crate::published::Traced;
use crate::queue::args::QueueType;
use crate::queue::consumers::Consumer;
use crate::queue::message_groups::GroupKey;
use crate::queue::visibility::{self, Deadline, DeliveryRef};
use crate::queue::{args, ttl, DeathReason, NotTaken, QueueId, ReturnKind};
use crate::receipts::Receipt;
use crate::redelivery::decorate;
use crate::reply_to;
use crate::sender_selected::HeaderRoutes;
use crate::time::Timestamp;
use crate::waiting_gets::WaitingGet;

/// How a get hands its message out (`Broker::get_one`).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum HandOut {
    /// Settled as it is handed out (basic.get no-ack).
    NoAck,
    /// Awaiting an ack, under the queue's `x-visibility-timeout` or `x-consumer-timeout` if it has
    /// one, else the broker's default consumer timeout.
    QueueVisibility,
    /// Awaiting an ack, visible again after this many ms whatever the queue says (SQS's
    /// `VisibilityTimeout`, 0 included).
    Visibility(u64),
    /// An SQS receive: as `Visibility`, and from an SQS FIFO queue the next message of group
    /// `taken` (this receive's last) or of a group with nothing in flight (`message_groups.rs`).
    SqsReceive { visibility_ms: u64, taken: Option<GroupKey> },
}

/// Whether basic.gets on connection `conn` are answered within the method: the HTTP API's admin
/// channel takes its replies within its request, so its gets cannot wait for a read
/// (`waiting_gets.rs`); a client's do. One whose message is being read is answered get-empty,
/// and the HTTP API waits for the read (`requests::GetMessages`).
fn answers_at_once(conn: ConnectionId) -> bool {
    conn == ADMIN_CONNECTION
}

/// A message a get handed out.
#[derive(Clone, Debug)]
pub(crate) struct Got {
    pub tag: u64,
    /// As delivered: with `x-delivery-count` and `x-receipt-handle` where they apply.
    pub message: Arc<Message>,
    pub redelivered: bool,
    /// Failed deliveries before this one.
    pub delivery_count: u32,
    /// The queue entry's id (`entry_ids.rs`).
    pub entry_id: u64,
    /// When the message became ready in its queue (after its delay, if it had one).
    pub ready_at: Option<Timestamp>,
    /// Messages left in the queue.
    pub message_count: u32,
    /// The delivery's receipt handle, when it is under a visibility timeout.
    pub receipt_handle: Option<String>,
}

impl Broker {
    /// basic.publish with its content. In tx mode it waits for tx.commit.
    pub(crate) fn publish(
        &mut self,
        conn: ConnectionId,
        ch: ChannelId,
        publish: Box<Publish>,
        now: Timestamp,
    ) -> Result<(), AmqpError> {
        // rabbit_channel checks write on the exchange before looking it up.
        self.check_publish_access(conn, &publish.exchange, &publish.routing_key)?;
        let mut publish = publish;
        self.address_replies(conn, ch, &mut publish)?;
        let Some(channel) = self.connections.channel_mut(conn, ch) else { return Ok(()) };
        if let Mode::Tx(buffer) = &mut channel.mode {
            // rabbit_channel reads CC/BCC when it makes the message, before a transaction holds it.
            HeaderRoutes::read(&publish.properties)?;
            buffer.publishes.push(*publish);
            return Ok(());
        }
        self.route_and_enqueue(conn, ch, publish, now)
    }

    /// Routes a publish into its queues, returning it when unroutable and mandatory, and
    /// confirming it in confirm mode (the return goes first, as RabbitMQ orders them; a queue
    /// refusing it under x-overflow reject-publish turns the ack into a nack).
    pub(crate) fn route_and_enqueue(
        &mut self,
        conn: ConnectionId,
        ch: ChannelId,
        publish: Box<Publish>,
        now: Timestamp,
    ) -> Result<(), AmqpError> {
        let Some(connection) = self.connections.get_mut(&conn) else { return Ok(()) };
        let ConnectionState { info, route_cache, .. } = connection;
        // Borrowed, not cloned, on the hot path: the cold ones below take a copy of their own.
        let vhost_name: &str = &info.vhost;
        if !info.may_impersonate {
            check_user_id(&publish, &info.user)?;
        }
        if let Some(expiration) = publish.properties.expiration() {
            ttl::parse_expiration(expiration.as_bytes()).map_err(|why| {
                errors::precondition_failed(format!("invalid expiration '{expiration}': {why}"))
            })?;
        }
        let generation = self.vhosts.generation();
        let found =
            match route_cache.get(generation, publish.exchange.as_bytes(), publish.routing_key.as_bytes()) {
                Some(route) => Found::Cached(route),
                None => {
                    let (vhost, exchange) =
                        exchange_for_publish(&self.vhosts, vhost_name, &publish.exchange)?;
                    Found::LookedUp { vhost, exchange }
                }
            };
        let (internal, delayed_exchange) = found.flags();
        if internal {
            return Err(errors::access_refused(format!(
                "cannot publish to internal exchange '{}' in vhost '{vhost_name}'",
                publish.exchange
            )));
        }
        // Decoded once: CC/BCC routing and the delay headers both read the table.
        let headers = publish.properties.headers();
        let header_routes = match &headers {
            Some(headers) => HeaderRoutes::from_headers(headers)?,
            None => HeaderRoutes::default(),
        };
        let mandatory = publish.mandatory;
        let direct_reply = reply_to::is_direct_reply(&publish);
        let requested = requested_delay(delayed_exchange, self.apsaramq_delay_header, headers.as_ref(), now)?;
        let delay_ms = requested.map(|(delay, _)| delay);
        let properties = match requested {
            // The plugin rewrites x-delay to what it delivers; other messages keep their bytes.
            Some((delay, "x-delay")) if delayed_exchange => publish.properties.edited(|p| {
                p.headers =
                    p.headers.as_ref().map(|h| h.with_entry("x-delay", delayed::delivered_header(delay)));
            }),
            _ => publish.properties,
        };
        let properties = header_routes.strip(properties);
        let message = Arc::new(Message::new(publish.exchange, publish.routing_key, properties, publish.body));
        let mut targets = std::mem::take(&mut self.scratch.queues);
        targets.clear();
        if !direct_reply {
            let route = PublishRoute { generation, message: &message, extra_keys: header_routes.keys() };
            let pending = route.route_from_cache(found, &self.vhosts, vhost_name, &mut targets)?;
            if let Pending::RouteFrom { vhost, exchange } = pending {
                route.route_and_keep(vhost, exchange, route_cache, &mut targets);
            }
        }
        let reply_vhost = direct_reply.then(|| vhost_name.to_owned());
        let traced_vhost = self.firehose.traces(vhost_name).then(|| vhost_name.to_owned());
        let routed = if direct_reply { self.deliver_reply(&message) } else { !targets.is_empty() };
        if let Some(vhost_name) = reply_vhost {
            self.count_reply_on_default_exchange(&vhost_name, routed);
        }
        if !routed && mandatory {
            self.return_unroutable(conn, ch, &message);
        }
        let traced = traced_vhost.as_deref().map(|vhost| Traced { vhost, conn, channel: ch });
        let routed_by = (header_routes.keys(), targets.as_slice());
        let rejected =
            self.enqueue_published(traced, &message, routed_by, delay_ms, now) == Enqueued::Rejected;
        self.scratch.queues = targets;
        let outcome = match (routed, mandatory) {
            (true, _) => PublishOutcome::Routed,
            (false, true) => PublishOutcome::Returned,
            (false, false) => PublishOutcome::Dropped,
        };
        self.count_and_confirm_publish(conn, ch, outcome, rejected, message.body_size());
        Ok(())
    }

    /// basic.return of a mandatory publish no queue took (`NO_ROUTE`).
    fn return_unroutable(&mut self, conn: ConnectionId, ch: ChannelId, message: &Arc<Message>) {
        let method = BasicReturn {
            reply_code: NO_ROUTE,
            reply_text: ShortStr::from_static("NO_ROUTE"),
            exchange: message.exchange.clone(),
            routing_key: message.routing_key.clone(),
        };
        self.emit(Effect::send(conn, ch, method, Some(message.clone())));
    }

    /// Counts a publish of `body_size` bytes on its channel and the broker, and confirms it in
    /// confirm mode: a nack when a queue refused it (`rejected`), else an ack.
    fn count_and_confirm_publish(
        &mut self,
        conn: ConnectionId,
        ch: ChannelId,
        outcome: PublishOutcome,
        rejected: bool,
        body_size: usize,
    ) {
        let Some(channel) = self.connections.channel_mut(conn, ch) else { return };
        let seq = channel.next_publish_seq();
        let confirm = match (seq, rejected) {
            (None, _) => Confirm::NotRequested,
            (Some(_), false) => Confirm::Acked,
            (Some(_), true) => Confirm::Nacked,
        };
        channel.stats.published(outcome, confirm);
        self.count_published(outcome, confirm, body_size);
        if let Some(delivery_tag) = seq {
            let ack = !rejected;
            self.reply_when_durable(Effect::Confirm {
                conn,
                channel: ch,
                delivery_tag,
                multiple: false,
                ack,
            });
        }
    }

    pub(super) fn basic_qos(
        &mut self,
        conn: ConnectionId,
        ch: ChannelId,
        m: &BasicQos,
        now: Timestamp,
    ) -> Result<(), AmqpError> {
        if m.prefetch_size != 0 {
            return Err(errors::not_implemented(format!("prefetch_size!=0 ({})", m.prefetch_size)));
        }
        let Some(channel) = self.connections.channel_mut(conn, ch) else { return Ok(()) };
        // RabbitMQ 3.3+: global=false limits each consumer created afterwards; global=true the channel.
        if m.global {
            channel.channel_prefetch = m.prefetch_count;
        } else {
            channel.consumer_prefetch = m.prefetch_count;
        }
        let queues: Vec<QueueId> = channel.consumers.iter().map(|(_, q)| *q).collect();
        self.send(conn, ch, BasicQosOk {});
        for id in queues {
            self.run_queue(id, now);
        }
        Ok(())
    }

    /// A consumer's own prefetch, changed while it consumes (`Command::ConsumerPrefetch`).
    pub(crate) fn set_consumer_prefetch(
        &mut self,
        conn: ConnectionId,
        ch: ChannelId,
        tag: &ShortStr,
        prefetch: u16,
        now: Timestamp,
    ) {
        let Some(channel) = self.connections.channel(conn, ch) else { return };
        let Some(&(_, queue)) = channel.consumers.iter().find(|(t, _)| t == tag) else { return };
        let Some(consumer) = self.queues.get_mut(&queue).and_then(|q| q.consumers.find_mut(conn, ch, tag))
        else {
            return;
        };
        consumer.prefetch_count = prefetch;
        self.run_queue(queue, now);
    }

    pub(super) fn basic_consume(
        &mut self,
        conn: ConnectionId,
        ch: ChannelId,
        m: &BasicConsume,
        now: Timestamp,
    ) -> Result<(), AmqpError> {
        let Some(vhost) = self.vhost_of(conn) else { return Ok(()) };
        let name = self.queue_name_or_last(conn, ch, &m.queue)?;
        if name == reply_to::REPLY_QUEUE {
            return self.consume_replies(conn, ch, m);
        }
        let (_, id) = self.readable_queue(conn, ch, &vhost, &name)?;
        let tag = if m.consumer_tag.is_empty() { self.names.consumer_tag() } else { m.consumer_tag.clone() };
        // Open: `handle_method` checked, and nothing since closes a channel.
        let Some(channel) = self.connections.channel(conn, ch) else { return Ok(()) };
        if channel.consumers.iter().any(|(t, _)| t == &tag) || self.reply_consumers.is_tag(conn, ch, &tag) {
            return Err(errors::not_allowed(format!("attempt to reuse consumer tag '{tag}'")));
        }
        let prefetch_count = channel.consumer_prefetch;
        let channel_limited = channel.channel_prefetch > 0;
        let visibility_timeout_ms = consumer_visibility(&m.arguments, &name, &vhost)?;
        let consumer_timeout_ms = consumer_timeout(&m.arguments, &name, &vhost)?;
        let priority = consumer_priority(&m.arguments, &name, &vhost)?;
        let queue = self.queues.get_mut(&id).ok_or_else(|| errors::no_queue(&name, &vhost))?;
        if queue.consumers.has_exclusive() || (m.exclusive && !queue.consumers.is_empty()) {
            return Err(errors::access_refused(format!(
                "queue '{name}' in vhost '{vhost}' in exclusive use"
            )));
        }
        // RabbitMQ's quorum queues refuse a channel-wide (global) prefetch: an application that
        // runs here must not meet that refusal first in production (Celery checks for it).
        if channel_limited && queue.args.queue_type == QueueType::Quorum {
            return Err(errors::not_implemented(format!(
                "queue '{name}' in vhost '{vhost}' does not support global qos"
            )));
        }
        queue.consumers.add(Consumer {
            tag: tag.clone(),
            conn,
            channel: ch,
            no_ack: m.no_ack,
            exclusive: m.exclusive,
            prefetch_count,
            unacked: 0,
            visibility_timeout_ms,
            consumer_timeout_ms,
            priority,
        });
        queue.had_consumer = true;
        queue.touch(now);
        if let Some(channel) = self.connections.channel_mut(conn, ch) {
            channel.consumers.push((tag.clone(), id));
        }
        if !m.nowait {
            self.send(conn, ch, BasicConsumeOk { consumer_tag: tag });
        }
        self.run_queue(id, now);
        Ok(())
    }

    /// Cancels a consumer; its unacked deliveries stay with the channel. An unknown tag is
    /// answered with cancel-ok, as RabbitMQ does.
    pub(super) fn basic_cancel(
        &mut self,
        conn: ConnectionId,
        ch: ChannelId,
        m: &BasicCancel,
        now: Timestamp,
    ) -> Result<(), AmqpError> {
        if self.cancel_replies(conn, ch, m) {
            return Ok(());
        }
        let Some(channel) = self.connections.channel_mut(conn, ch) else { return Ok(()) };
        let found = channel.consumers.iter().position(|(t, _)| t == &m.consumer_tag);
        let queue_id = found.map(|at| channel.consumers.remove(at).1);
        if !m.nowait {
            self.send(conn, ch, BasicCancelOk { consumer_tag: m.consumer_tag.clone() });
        }
        if let Some(id) = queue_id {
            if let Some(queue) = self.queues.get_mut(&id) {
                queue.consumers.remove(conn, ch, &m.consumer_tag);
                queue.touch(now);
            }
            // Run, not only refiled: under a single active consumer the next one takes what
            // waited behind this one's prefetch at once.
            if !self.delete_if_unused_auto_delete(id) {
                self.run_queue(id, now);
            }
        }
        Ok(())
    }

    /// basic.get: answered at once, or, when the queue's head is paged out, once it has been
    /// read (`waiting_gets.rs`), behind the gets already waiting there. The HTTP API's admin
    /// channel takes its replies within its request: its get is answered get-empty meanwhile
    /// (`answers_at_once`).
    pub(super) fn basic_get(
        &mut self,
        conn: ConnectionId,
        ch: ChannelId,
        m: &BasicGet,
        now: Timestamp,
    ) -> Result<(), AmqpError> {
        let Some(vhost) = self.vhost_of(conn) else { return Ok(()) };
        let (queue_name, id) = self.readable_queue(conn, ch, &vhost, &m.queue)?;
        let get = WaitingGet { conn, channel: ch, no_ack: m.no_ack };
        let at_once = answers_at_once(conn);
        let behind_others = !at_once && self.waiting_gets.waits(id);
        if behind_others || !self.answer_get(get, &vhost, queue_name, id, now) {
            if at_once {
                self.send(conn, ch, BasicGetEmpty {});
                return Ok(());
            }
            if let Some(queue) = self.queues.get_mut(&id) {
                queue.touch(now);
            }
            self.waiting_gets.wait(id, get).map_err(|_| {
                errors::precondition_failed(format_args!(
                    "more than {} basic.get waiting on this channel",
                    crate::waiting_gets::PER_CHANNEL_MAX
                ))
            })?;
        }
        Ok(())
    }

    /// Answers `get` on queue `id` (named `queue_name`, in `vhost`) with get-ok or get-empty;
    /// `false`, with nothing sent, when the queue's head is being read.
    pub(crate) fn answer_get(
        &mut self,
        get: WaitingGet,
        vhost: &str,
        queue_name: ShortStr,
        id: QueueId,
        now: Timestamp,
    ) -> bool {
        let WaitingGet { conn, channel: ch, no_ack } = get;
        let hand_out = if no_ack { HandOut::NoAck } else { HandOut::QueueVisibility };
        let got = match self.get_one(conn, ch, vhost, queue_name, id, hand_out, now) {
            Ok(got) => got,
            Err(NotTaken::Reading) => return false,
            Err(NotTaken::Empty) => {
                self.send(conn, ch, BasicGetEmpty {});
                return true;
            }
        };
        let method = BasicGetOk {
            delivery_tag: got.tag,
            redelivered: got.redelivered,
            exchange: got.message.exchange.clone(),
            routing_key: got.message.routing_key.clone(),
            message_count: got.message_count,
        };
        self.emit(Effect::send(conn, ch, method, Some(got.message)));
        self.trace_deliveries(now);
        true
    }

    /// Counts a get answered empty, broker-wide and on its channel (the queue counts its own).
    pub(crate) fn count_empty_get(&mut self, conn: ConnectionId, ch: ChannelId) {
        self.stats.messages.get_empty += 1;
        if let Some(channel) = self.connections.channel_mut(conn, ch) {
            channel.stats.get_empty += 1;
        }
    }

    /// Takes the next message of queue `id` (named `queue_name`, in `vhost`) for a get on
    /// `(conn, ch)`: counted, tracked on the channel unless `hand_out` is no-ack, and under a
    /// visibility timeout when `hand_out` or the queue asks for one. [`NotTaken::Empty`] when the
    /// queue has no ready message (counted as an empty get), or the channel or queue is gone.
    /// A paged message is never read here: the get asks for the message it would take (the
    /// head, or the one the queue's message groups chose) and gets [`NotTaken::Reading`]. The
    /// caller sends the answer.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn get_one(
        &mut self,
        conn: ConnectionId,
        ch: ChannelId,
        vhost: &str,
        queue_name: ShortStr,
        id: QueueId,
        hand_out: HandOut,
        now: Timestamp,
    ) -> Result<Got, NotTaken> {
        let no_ack = hand_out == HandOut::NoAck;
        if !self.connections.has_channel(conn, ch) {
            return Err(NotTaken::Empty);
        }
        self.expire_messages(id, now);
        let queue = self.queues.get_mut(&id).ok_or(NotTaken::Empty)?;
        queue.touch(now);
        let taken = match hand_out {
            HandOut::SqsReceive { taken, .. } => queue.take_for_sqs_receive(taken),
            HandOut::NoAck | HandOut::QueueVisibility | HandOut::Visibility(_) => {
                queue.take_for_consumer(!no_ack)
            }
        };
        queue.counters.messages.get_empty += u64::from(matches!(taken, Err(NotTaken::Empty)));
        let message_count = queue.message_count() as u32;
        self.reschedule(id);
        let entry = match taken {
            Ok(entry) => entry,
            Err(NotTaken::Reading) => return Err(NotTaken::Reading),
            Err(NotTaken::Empty) => {
                self.count_empty_get(conn, ch);
                return Err(NotTaken::Empty);
            }
        };
        let marks = Persistence::marks_delivered(&entry, no_ack);
        let group = marks.then(|| self.stored_group(id, &entry)).flatten();
        self.persist.handed_out(id, &entry, no_ack, group);
        let kind = DeliveryKind::of_get(no_ack);
        self.stats.messages.delivered(kind, entry.redelivered);
        let queue = self.queues.get_mut(&id);
        let deadline = queue.and_then(|q| {
            q.counters.messages.delivered(kind, entry.redelivered);
            match hand_out {
                HandOut::NoAck => None,
                // basic.get: the queue's timeouts, not a consumer's (RabbitMQ 4.3's dequeue).
                HandOut::QueueVisibility => {
                    Deadline::of_delivery(q.args.visibility_timeout_ms, q.args.consumer_timeout_ms, now)
                }
                HandOut::Visibility(ms) | HandOut::SqsReceive { visibility_ms: ms, .. } => {
                    Deadline::of_delivery(Some(ms), None, now)
                }
            }
        });
        // Present: checked above, and taking a message closes no channel.
        let channel = self.connections.channel_mut(conn, ch).ok_or(NotTaken::Empty)?;
        channel.stats.delivered(kind, entry.redelivered);
        let tag = channel.next_tag();
        let delivery = DeliveryRef { conn, channel: ch, tag };
        let receipt = Receipt { queue: id, delivery, channel_opening: channel.opening, entry: entry.seq };
        let receipt_handle = deadline.filter(Deadline::has_receipt).map(|_| self.receipts.issue(&receipt));
        let message = decorate(&entry, receipt_handle.clone());
        let (redelivered, delivery_count, entry_id) = (entry.redelivered, entry.delivery_count, entry.seq);
        let ready_at = entry.ready_at();
        let traced = || TracedDelivery {
            vhost: vhost.to_owned(),
            queue: queue_name,
            message: message.clone(),
            redelivered,
            conn,
            channel: ch,
        };
        self.firehose.note_delivery(traced, vhost);
        if !no_ack {
            channel.track(Unacked { tag, queue: id, entry, consumer_tag: None, delivered_at: now, deadline });
            match (deadline, self.queues.get_mut(&id)) {
                (Some(deadline), Some(queue)) => {
                    queue.visibility.insert(deadline.at, delivery);
                    self.reschedule(id);
                }
                (Some(_), None) => {}
                (None, _) => self.default_timeouts.delivered(now),
            }
        }
        Ok(Got {
            tag,
            message,
            redelivered,
            delivery_count,
            entry_id,
            ready_at,
            message_count,
            receipt_handle,
        })
    }

    pub(super) fn basic_ack(
        &mut self,
        conn: ConnectionId,
        ch: ChannelId,
        m: &BasicAck,
        now: Timestamp,
    ) -> Result<(), AmqpError> {
        self.settle(conn, ch, m.delivery_tag, m.multiple, Settlement::Ack, now)
    }

    pub(super) fn basic_nack(
        &mut self,
        conn: ConnectionId,
        ch: ChannelId,
        m: &BasicNack,
        now: Timestamp,
    ) -> Result<(), AmqpError> {
        let settlement =
            if m.requeue { Settlement::Requeue(ReturnKind::Returned) } else { Settlement::Discard };
        self.settle(conn, ch, m.delivery_tag, m.multiple, settlement, now)
    }

    pub(super) fn basic_reject(
        &mut self,
        conn: ConnectionId,
        ch: ChannelId,
        m: &BasicReject,
        now: Timestamp,
    ) -> Result<(), AmqpError> {
        let settlement =
            if m.requeue { Settlement::Requeue(ReturnKind::Failed) } else { Settlement::Discard };
        self.settle(conn, ch, m.delivery_tag, false, settlement, now)
    }

    /// `Command::Modify`: the delivery dead-lettered when undeliverable here, else back to its
    /// queue (a failure when `failed`, as basic.reject; else a hand-back, as basic.nack), not
    /// delivered again before `ready_at` if given; with its annotations merged either way.
    pub(crate) fn modify(&mut self, m: Modification, now: Timestamp) -> Result<(), AmqpError> {
        let how = if m.failed { ReturnKind::Failed } else { ReturnKind::Returned };
        let settlement = match (m.undeliverable_here, m.ready_at) {
            (true, _) => Settlement::Discard,
            (false, Some(at)) => Settlement::RequeueAt(how, at),
            (false, None) => Settlement::Requeue(how),
        };
        let annotations = Some(&m.annotations).filter(|a| !a.is_empty());
        self.settle_annotated(m.conn, m.channel, m.delivery_tag, false, settlement, annotations, now)
    }

    /// basic.recover(-async) requeue=true: every unacked delivery goes back to its queue.
    /// requeue=false is not supported by RabbitMQ either (540).
    pub(super) fn basic_recover(
        &mut self,
        conn: ConnectionId,
        ch: ChannelId,
        requeue: bool,
        reply: bool,
        now: Timestamp,
    ) -> Result<(), AmqpError> {
        if !requeue {
            return Err(errors::not_implemented("requeue=false"));
        }
        let mut all = std::mem::take(&mut self.scratch.settle);
        if let Some(channel) = self.connections.channel_mut(conn, ch) {
            channel.take_all(&mut all);
        }
        self.apply_settlements(conn, ch, &mut all, Settlement::Requeue(ReturnKind::Returned), now);
        self.scratch.settle = all;
        if reply {
            self.send(conn, ch, BasicRecoverOk {});
        }
        Ok(())
    }

    pub(crate) fn settle(
        &mut self,
        conn: ConnectionId,
        ch: ChannelId,
        tag: u64,
        multiple: bool,
        settlement: Settlement,
        now: Timestamp,
    ) -> Result<(), AmqpError> {
        self.settle_annotated(conn, ch, tag, multiple, settlement, None, now)
    }

    /// [`Broker::settle`], with `annotations` merged into each settled message first.
    #[allow(clippy::too_many_arguments)]
    fn settle_annotated(
        &mut self,
        conn: ConnectionId,
        ch: ChannelId,
        tag: u64,
        multiple: bool,
        settlement: Settlement,
        annotations: Option<&FieldTable>,
        now: Timestamp,
    ) -> Result<(), AmqpError> {
        let Some(channel) = self.connections.channel_mut(conn, ch) else { return Ok(()) };
        let mut taken = std::mem::take(&mut self.scratch.settle);
        let mut result = channel.take_settled(tag, multiple, &mut taken);
        if let Some(annotations) = annotations {
            let stays = !matches!(settlement, Settlement::Ack | Settlement::Discard);
            for delivery in &mut taken {
                // Refused annotations leave the message as it was; it is settled all the same.
                if let Err(refused) = self.annotate(delivery.queue, &mut delivery.entry, annotations, stays) {
                    result = result.and(Err(refused));
                }
            }
        }
        // The channel is still there: annotating touches only queues and the store.
        if let Some(Mode::Tx(buffer)) = self.connections.channel_mut(conn, ch).map(|c| &mut c.mode) {
            buffer.settlements.extend(taken.drain(..).map(|u| (u, settlement)));
        } else {
            self.apply_settlements(conn, ch, &mut taken, settlement, now);
        }
        self.scratch.settle = taken;
        result
    }

    /// Carries out settlements (drained from `deliveries`), then lets the affected queues deliver
    /// again: the settled deliveries freed consumer and channel credit.
    pub(crate) fn apply_settlements(
        &mut self,
        conn: ConnectionId,
        ch: ChannelId,
        deliveries: &mut Vec<Unacked>,
        settlement: Settlement,
        now: Timestamp,
    ) {
        let mut touched = std::mem::take(&mut self.scratch.queues);
        touched.clear();
        let mut acked = 0;
        for delivery in deliveries.drain(..) {
            let id = delivery.queue;
            let Some(queue) = self.queues.get_mut(&id) else { continue };
            queue.forget_delivery(conn, ch, &delivery);
            match settlement {
                Settlement::Ack => {
                    queue.settle(&delivery.entry);
                    queue.counters.messages.ack += 1;
                    acked += 1;
                    self.persist_settle(id, delivery.entry.persist_id());
                }
                Settlement::Requeue(how) => self.return_to_queue(id, delivery.entry, how, now),
                Settlement::RequeueAt(how, at) => self.return_to_queue_at(id, delivery.entry, how, at, now),
                Settlement::Discard => {
                    let entry = delivery.entry;
                    queue.settle(&entry);
                    self.dead_letter_entry(id, entry, DeathReason::Rejected);
                }
            }
            if !touched.contains(&id) {
                touched.push(id);
            }
        }
        self.stats.messages.ack += acked;
        if let Some(channel) = self.connections.channel_mut(conn, ch) {
            channel.stats.ack += acked;
            if channel.channel_prefetch != 0 {
                // The freed channel-wide credit goes to the channel's queues in turn, starting one
                // further each time, not to the queue just acked first: otherwise that queue
                // takes it back every time and the others starve (RabbitMQ's limiter notifies
                // blocked queues in varying order; the Java client's `QosTests#fairness`).
                let mut fair = std::mem::take(&mut self.scratch.fair);
                channel.queues_in_turn(&mut fair);
                for id in &touched {
                    if !fair.contains(id) {
                        fair.push(*id);
                    }
                }
                self.scratch.fair = std::mem::replace(&mut touched, fair);
            }
        }
        for &id in &touched {
            self.run_queue(id, now);
        }
        self.scratch.queues = touched;
    }
}

/// The delay a publish at `now` asks for, and the header that asked: `x-delay`, `x-delay-until`,
/// `x-opt-delivery-time` or `x-opt-delivery-delay` through a delayed exchange; on any other
/// exchange `x-opt-delivery-time` or `x-opt-delivery-delay` (RabbitMQ 4.4, Tanzu), then ApsaraMQ's
/// `delay` header when that is switched on (semantics §3).
fn requested_delay(
    delayed_exchange: bool,
    apsaramq: bool,
    headers: Option<&FieldTable>,
    now: Timestamp,
) -> Result<Option<(u64, &'static str)>, AmqpError> {
    let Some(headers) = headers else { return Ok(None) };
    if delayed_exchange {
        return delayed::requested_delay(Some(headers), now);
    }
    if let Some(requested) = delayed::delivery_time(Some(headers), now)? {
        return Ok(Some(requested));
    }
    if apsaramq {
        return Ok(delayed::delay_ms(Some(headers), "delay")?.map(|d| (d, "delay")));
    }
    Ok(None)
}

/// A time (ms) among basic.consume's `arguments` under `key`, checked by `check`; 406 naming it,
/// and `whose` (what it belongs to, as the error says), when invalid.
fn consumer_time_arg(
    arguments: &hourglass_wire::FieldTable,
    key: &str,
    check: impl FnOnce(&hourglass_wire::FieldValue) -> Result<u64, String>,
    whose: impl FnOnce() -> String,
) -> Result<Option<u64>, AmqpError> {
    let Some(value) = arguments.get(key) else { return Ok(None) };
    check(&value)
        .map(Some)
        .map_err(|why| errors::precondition_failed(format!("invalid arg '{key}' for {}: {why}", whose())))
}

/// `x-visibility-timeout` in basic.consume arguments (semantics §4).
fn consumer_visibility(
    arguments: &hourglass_wire::FieldTable,
    queue: &ShortStr,
    vhost: &str,
) -> Result<Option<u64>, AmqpError> {
    let check = |v: &hourglass_wire::FieldValue| args::count_arg(v).and_then(visibility::check_range);
    consumer_time_arg(arguments, "x-visibility-timeout", check, || {
        format!("consumer on queue '{queue}' in vhost '{vhost}'")
    })
}

/// `x-consumer-timeout` in basic.consume arguments (RabbitMQ 4.3, semantics §4): a non-negative
/// integer (ms), else 406 in RabbitMQ's words (rabbit_amqqueue:check_consume_arguments).
fn consumer_timeout(
    arguments: &hourglass_wire::FieldTable,
    queue: &ShortStr,
    vhost: &str,
) -> Result<Option<u64>, AmqpError> {
    let check = |v: &hourglass_wire::FieldValue| args::time_arg(v, 0);
    consumer_time_arg(arguments, "x-consumer-timeout", check, || {
        format!("queue '{queue}' in vhost '{vhost}'")
    })
}

/// `x-priority` in basic.consume arguments: an integer (RabbitMQ's consumer priorities).
fn consumer_priority(
    arguments: &hourglass_wire::FieldTable,
    queue: &ShortStr,
    vhost: &str,
) -> Result<i64, AmqpError> {
    match arguments.get("x-priority") {
        None => Ok(0),
        Some(value) => value.as_i64().filter(|_| value.as_bytes().is_none()).ok_or_else(|| {
            errors::precondition_failed(format!(
                "invalid arg 'x-priority' for queue '{queue}' in vhost '{vhost}': {{unacceptable_type,{}}}",
                value.type_name()
            ))
        }),
    }
}

/// A `user_id` property must name the authenticated user (RabbitMQ's validated user-id).
fn check_user_id(publish: &Publish, user: &str) -> Result<(), AmqpError> {
    match publish.properties.user_id() {
        Some(user_id) if user_id.as_bytes() != user.as_bytes() => Err(errors::precondition_failed(format!(
            "user_id property set to '{user_id}' but authenticated user was '{user}'"
        ))),
        _ => Ok(()),
    }
}
