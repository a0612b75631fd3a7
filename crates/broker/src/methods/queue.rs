//! queue.declare / bind / unbind / purge / delete, and queue removal (explicit, exclusive owner
//! gone, auto-delete).

use hourglass_wire::{
    BasicCancel, QueueBind, QueueBindOk, QueueDeclare, QueueDeclareOk, QueueDelete, QueueDeleteOk,
    QueuePurge, QueuePurgeOk, QueueUnbind, QueueUnbindOk, ShortStr,
};

use super::exchange::{check_name, unbind_destination, unbind_from, Removed};
use crate::api::{AmqpError, ChannelId, ConnectionId, Effect};
use crate::broker::Broker;
use crate::errors;
use crate::exchange::{Binding, Destination, ExchangeKind};
use crate::permissions::{Access, Resource};
use crate::persist::{Changed, GoneQueue};
use crate::queue::args::first_inequivalent;
use crate::queue::{QueueArgs, QueueId, QueueSpec};
use crate::time::Timestamp;

impl Broker {
    pub(super) fn queue_declare(
        &mut self,
        conn: ConnectionId,
        ch: ChannelId,
        m: &QueueDeclare,
        now: Timestamp,
    ) -> Result<(), AmqpError> {
        let Some(vhost) = self.vhost_of(conn) else { return Ok(()) };
        if crate::reply_to::is_reply_name(&m.queue) {
            return self.declare_reply_queue(conn, ch, m, &vhost);
        }
        let id = if m.passive {
            let id = self.lookup_queue(&vhost, &m.queue)?;
            self.check_exclusive_access(id, conn)?;
            id
        } else {
            let name = if m.queue.is_empty() {
                self.names.queue_name()
            } else {
                check_name("queue", &m.queue)?;
                m.queue.clone()
            };
            // Server-named queues too: RabbitMQ checks the name it generated.
            self.check_access(conn, Access::Configure, Resource::Queue, &name.as_str())?;
            let spec = QueueSpec {
                name,
                durable: m.durable,
                exclusive_owner: m.exclusive.then_some(conn),
                auto_delete: m.auto_delete,
                arguments: m.arguments.clone(),
            };
            let id = match self.vhost(&vhost)?.queues.get(&spec.name).copied() {
                Some(id) => {
                    self.check_redeclare(id, conn, &spec)?;
                    id
                }
                None => {
                    self.check_queue_limit(&vhost, &spec.name)?;
                    self.check_dead_letter_access(conn, &spec)?;
                    self.create_queue(&vhost, spec, now)?
                }
            };
            self.stats.churn.queues_declared += 1;
            id
        };
        // A declare (passive too) is a use of the queue for x-expires; its count never includes
        // an expired message (semantics §1).
        if let Some(queue) = self.queues.get_mut(&id) {
            queue.touch(now);
        }
        self.expire_messages(id, now);
        self.reschedule(id);
        let queue = &self.queues[&id];
        let (name, message_count, consumer_count) =
            (queue.name().clone(), queue.message_count() as u32, queue.consumer_count() as u32);
        if let Some(channel) = self.connections.channel_mut(conn, ch) {
            channel.last_queue = Some(name.clone());
        }
        if !m.nowait {
            self.send_when_durable(conn, ch, QueueDeclareOk { queue: name, message_count, consumer_count });
        }
        Ok(())
    }

    pub(super) fn queue_bind(
        &mut self,
        conn: ConnectionId,
        ch: ChannelId,
        m: &QueueBind,
    ) -> Result<(), AmqpError> {
        let Some(vhost_name) = self.vhost_of(conn) else { return Ok(()) };
        let (binding, source) =
            self.queue_binding(conn, ch, &vhost_name, &m.queue, &m.exchange, &m.routing_key, &m.arguments)?;
        if self.is_durable_binding(&vhost_name, &source, &binding.destination) {
            if let Destination::Queue(id) = &binding.destination {
                let queue = self.queues[id].name().clone();
                self.binding_changed(&vhost_name, &source, true, &queue, &binding);
            }
        }
        if let Some(exchange) = self.vhost_mut(&vhost_name)?.exchanges.get_mut(&source) {
            exchange.bind(binding);
        }
        if !m.nowait {
            self.send_when_durable(conn, ch, QueueBindOk {});
        }
        Ok(())
    }

    pub(super) fn queue_unbind(
        &mut self,
        conn: ConnectionId,
        ch: ChannelId,
        m: &QueueUnbind,
    ) -> Result<(), AmqpError> {
        let Some(vhost_name) = self.vhost_of(conn) else { return Ok(()) };
        // Unbinding what is not bound, or a missing queue or exchange, succeeds as in RabbitMQ;
        // the default exchange is refused, and another connection's exclusive queue is 405
        // RESOURCE_LOCKED (the Java client's `QueueExclusivity#queueExclusiveForUnbind`).
        let queue_name = self.queue_name_or_last(conn, ch, &m.queue)?;
        self.check_binding_access(conn, &m.exchange, Resource::Queue, &queue_name, &m.routing_key)?;
        if let Ok(id) = self.lookup_queue(&vhost_name, &queue_name) {
            self.check_exclusive_access(id, conn)?;
            let binding = Binding {
                destination: Destination::Queue(id),
                routing_key: m.routing_key.clone(),
                arguments: m.arguments.clone(),
            };
            let mut removed = Removed::default();
            unbind_from(self.vhost_mut(&vhost_name)?, &m.exchange, &binding, &mut removed);
            self.mark_removed(&vhost_name, removed, None);
        }
        self.send_when_durable(conn, ch, QueueUnbindOk {});
        Ok(())
    }

    pub(super) fn queue_purge(
        &mut self,
        conn: ConnectionId,
        ch: ChannelId,
        m: &QueuePurge,
    ) -> Result<(), AmqpError> {
        let Some(vhost) = self.vhost_of(conn) else { return Ok(()) };
        let (_, id) = self.readable_queue(conn, ch, &vhost, &m.queue)?;
        let mut settled = Vec::new();
        let purged = self.queues.get_mut(&id).map_or(0, |q| q.purge(&mut settled));
        for msg_id in settled {
            self.persist.settle(id, msg_id);
        }
        self.reschedule(id);
        if !m.nowait {
            self.send_when_durable(conn, ch, QueuePurgeOk { message_count: purged as u32 });
        }
        Ok(())
    }

    pub(super) fn queue_delete(
        &mut self,
        conn: ConnectionId,
        ch: ChannelId,
        m: &QueueDelete,
    ) -> Result<(), AmqpError> {
        let Some(vhost) = self.vhost_of(conn) else { return Ok(()) };
        let name = self.queue_name_or_last(conn, ch, &m.queue)?;
        self.check_access(conn, Access::Configure, Resource::Queue, &name.as_str())?;
        // Deleting a queue that does not exist succeeds with a count of 0 (RabbitMQ 3.x).
        let message_count = match self.vhosts.get(&vhost).and_then(|v| v.queues.get(&name)).copied() {
            None => 0,
            Some(id) => {
                self.check_exclusive_access(id, conn)?;
                let queue = &self.queues[&id];
                if m.if_unused && queue.consumer_count() > 0 {
                    return Err(errors::precondition_failed(format!(
                        "queue '{name}' in vhost '{vhost}' in use"
                    )));
                }
                if m.if_empty && queue.message_count() > 0 {
                    return Err(errors::precondition_failed(format!(
                        "queue '{name}' in vhost '{vhost}' not empty"
                    )));
                }
                self.delete_queue_from(id, conn)
            }
        };
        if !m.nowait {
            self.send_when_durable(conn, ch, QueueDeleteOk { message_count: message_count as u32 });
        }
        Ok(())
    }

    /// Deletes a queue: its bindings go, its consumers are told (basic.cancel, when their client
    /// understands it), its ready messages are dropped. Deliveries still unacked stay with their
    /// channels; settling them later is harmless. Returns the number of ready messages dropped.
    pub(crate) fn delete_queue(&mut self, id: QueueId) -> usize {
        self.remove_queue(id, None)
    }

    /// [`Self::delete_queue`] by queue.delete from connection `deleter`: a cancel to a consumer
    /// of that connection goes with the delete-ok, once the delete is durable (on the deleting
    /// channel before it, RabbitMQ's order). A client may close its channel or connection on the
    /// cancel, and must have its delete-ok by then.
    pub(crate) fn delete_queue_from(&mut self, id: QueueId, deleter: ConnectionId) -> usize {
        self.remove_queue(id, Some(deleter))
    }

    fn remove_queue(&mut self, id: QueueId, deleter: Option<ConnectionId>) -> usize {
        let Some(queue) = self.queues.remove(id) else { return 0 };
        self.dead_letter_reads.forget(id);
        self.answer_waiting_gets_empty(id);
        self.wake_every_sqs_waiter(id);
        self.stats.churn.queues_deleted += 1;
        self.persist_purge(id, queue.is_persisted());
        if let Some(vhost) = self.vhosts.get_mut(&queue.vhost) {
            vhost.queues.remove(queue.name());
            let mut removed = Removed::default();
            unbind_destination(vhost, &Destination::Queue(id), &mut removed);
            let gone = GoneQueue { id, name: queue.name().clone(), persisted: queue.is_persisted() };
            self.mark_removed(&queue.vhost, removed, Some(&gone));
            if gone.persisted {
                self.definition_changed(Changed::Queue(queue.vhost.clone(), gone.name));
            }
        }
        for consumer in queue.consumers.iter() {
            if let Some(channel) = self.connections.channel_mut(consumer.conn, consumer.channel) {
                channel.consumers.retain(|(tag, _)| tag != &consumer.tag);
            }
            let notify = self
                .connections
                .get(&consumer.conn)
                .is_some_and(|c| c.info.capabilities.consumer_cancel_notify);
            if notify {
                let cancel = BasicCancel { consumer_tag: consumer.tag.clone(), nowait: true };
                let cancel = Effect::send(consumer.conn, consumer.channel, cancel, None);
                if deleter == Some(consumer.conn) {
                    self.reply_when_durable(cancel);
                } else {
                    self.emit(cancel);
                }
            }
        }
        queue.message_count()
    }

    /// Deletes an auto-delete queue whose last consumer has gone; returns whether it did.
    pub(crate) fn delete_if_unused_auto_delete(&mut self, id: QueueId) -> bool {
        let unused = self
            .queues
            .get(&id)
            .is_some_and(|q| q.spec.auto_delete && q.had_consumer && q.consumers.is_empty());
        if unused {
            self.delete_queue(id);
        }
        unused
    }

    pub(crate) fn lookup_queue(&self, vhost: &str, name: &ShortStr) -> Result<QueueId, AmqpError> {
        self.vhosts
            .get(vhost)
            .and_then(|v| v.queues.get(name))
            .copied()
            .ok_or_else(|| errors::no_queue(name, vhost))
    }

    /// The queue a method names (empty: the channel's last declared one) if it exists and this
    /// connection may use it (404 / 405 otherwise).
    pub(crate) fn usable_queue(
        &self,
        conn: ConnectionId,
        ch: ChannelId,
        vhost: &str,
        name: &ShortStr,
    ) -> Result<(ShortStr, QueueId), AmqpError> {
        let name = self.queue_name_or_last(conn, ch, name)?;
        let id = self.lookup_queue(vhost, &name)?;
        self.check_exclusive_access(id, conn)?;
        Ok((name, id))
    }

    /// [`Self::usable_queue`] for taking messages out (purge, get, consume): the user needs read
    /// on it (403), checked before whether it exists, as RabbitMQ does.
    pub(crate) fn readable_queue(
        &self,
        conn: ConnectionId,
        ch: ChannelId,
        vhost: &str,
        name: &ShortStr,
    ) -> Result<(ShortStr, QueueId), AmqpError> {
        let name = self.queue_name_or_last(conn, ch, name)?;
        self.check_access(conn, Access::Read, Resource::Queue, &name.as_str())?;
        self.usable_queue(conn, ch, vhost, &name)
    }

    /// An empty queue name means the last queue declared on the channel (AMQP 0-9-1 §1.7.2).
    pub(crate) fn queue_name_or_last(
        &self,
        conn: ConnectionId,
        ch: ChannelId,
        name: &ShortStr,
    ) -> Result<ShortStr, AmqpError> {
        if !name.is_empty() {
            return Ok(name.clone());
        }
        self.connections
            .channel(conn, ch)
            .and_then(|c| c.last_queue.clone())
            .ok_or_else(errors::not_found_no_previous_queue)
    }

    /// 405 when another connection owns the (exclusive) queue.
    pub(crate) fn check_exclusive_access(&self, id: QueueId, conn: ConnectionId) -> Result<(), AmqpError> {
        let queue = &self.queues[&id];
        if queue.is_exclusive_to_other(conn) {
            return Err(errors::queue_locked(queue.name(), &queue.vhost));
        }
        Ok(())
    }

    fn create_queue(&mut self, vhost: &str, spec: QueueSpec, now: Timestamp) -> Result<QueueId, AmqpError> {
        if spec.arguments.contains_key(crate::admin::SQS_MOVE_TASK_ARG) {
            return Err(errors::precondition_failed(format!(
                "invalid arg '{}' for queue '{}' in vhost '{vhost}': it is written by the SQS endpoint's message-move tasks only",
                crate::admin::SQS_MOVE_TASK_ARG,
                spec.name
            )));
        }
        let args = QueueArgs::parse(&spec.arguments, &spec.name.as_str(), vhost, spec.durable)?;
        args.check_new_declaration(&spec.name.as_str(), vhost)?;
        let id = self.queues.new_id();
        self.vhost_mut(vhost)?.queues.insert(spec.name.clone(), id);
        if let Some(owner) = spec.exclusive_owner.and_then(|conn| self.connections.get_mut(&conn)) {
            owner.exclusive_queues.push(id);
        }
        let queue = self.queues.add(id, vhost.to_owned(), spec, args, now);
        if queue.is_persisted() {
            let name = queue.name().clone();
            self.definition_changed(Changed::Queue(vhost.to_owned(), name));
        }
        self.stats.churn.queues_created += 1;
        self.apply_queue_policies(id, now);
        Ok(id)
    }

    /// The vhost's `max-queues`, checked for a queue that does not exist yet (a redeclare or a
    /// passive declare of an existing one passes at the limit): RabbitMQ's
    /// `rabbit_channel:check_vhost_queue_limit`, 406 with its text.
    fn check_queue_limit(&self, vhost: &str, name: &ShortStr) -> Result<(), AmqpError> {
        self.vhost(vhost)?;
        match self.queue_limit_reached(vhost) {
            Some(limit) => Err(errors::precondition_failed(format!(
                "cannot declare queue '{name}': queue limit in vhost '{vhost}' ({limit}) is reached"
            ))),
            None => Ok(()),
        }
    }

    /// The vhost's `max-queues` when it holds that many queues already (a new queue would be
    /// refused), for front ends that answer the refusal in their own terms (SQS's OverLimit).
    pub fn queue_limit_reached(&self, vhost: &str) -> Option<u64> {
        let vhost_state = self.vhosts.get(vhost)?;
        vhost_state.max_queues.filter(|limit| vhost_state.queues.len() as u64 >= *limit)
    }

    /// A new queue with an `x-dead-letter-exchange` needs read on itself and write on the DLX.
    fn check_dead_letter_access(&self, conn: ConnectionId, spec: &QueueSpec) -> Result<(), AmqpError> {
        let Some(dlx) = spec.arguments.get("x-dead-letter-exchange") else { return Ok(()) };
        let Some(dlx) = dlx.as_bytes() else { return Ok(()) };
        self.check_access(conn, Access::Read, Resource::Queue, &spec.name.as_str())?;
        self.check_access(conn, Access::Write, Resource::Exchange, &String::from_utf8_lossy(dlx))
    }

    /// A redeclare must come from the owner (for exclusive queues) and match the declaration.
    fn check_redeclare(&self, id: QueueId, conn: ConnectionId, spec: &QueueSpec) -> Result<(), AmqpError> {
        let queue = &self.queues[&id];
        let current = &queue.spec;
        if current.exclusive_owner.is_some() != spec.exclusive_owner.is_some()
            || queue.is_exclusive_to_other(conn)
        {
            return Err(errors::queue_locked(queue.name(), &queue.vhost));
        }
        let mismatch = |field: &str, received: bool, now: bool| {
            errors::precondition_failed(format!(
                "inequivalent arg '{field}' for queue '{}' in vhost '{}': received '{received}' but current is '{now}'",
                current.name, queue.vhost
            ))
        };
        if current.durable != spec.durable {
            return Err(mismatch("durable", spec.durable, current.durable));
        }
        if current.auto_delete != spec.auto_delete {
            return Err(mismatch("auto_delete", spec.auto_delete, current.auto_delete));
        }
        if let Some(key) = first_inequivalent(&current.arguments, &spec.arguments) {
            return Err(errors::precondition_failed(format!(
                "inequivalent arg '{key}' for queue '{}' in vhost '{}': {}",
                current.name,
                queue.vhost,
                errors::received_but_current(spec.arguments.get(key), current.arguments.get(key)),
            )));
        }
        Ok(())
    }

    /// Checks a queue binding's ends and builds it; returns it with its source exchange.
    #[allow(clippy::too_many_arguments)]
    fn queue_binding(
        &self,
        conn: ConnectionId,
        ch: ChannelId,
        vhost_name: &str,
        queue: &ShortStr,
        exchange: &ShortStr,
        routing_key: &ShortStr,
        arguments: &hourglass_wire::FieldTable,
    ) -> Result<(Binding, ShortStr), AmqpError> {
        let queue_name = self.queue_name_or_last(conn, ch, queue)?;
        self.check_binding_access(conn, exchange, Resource::Queue, &queue_name, routing_key)?;
        let id = self.lookup_queue(vhost_name, &queue_name)?;
        let vhost = &self.vhosts[vhost_name];
        let source =
            vhost.exchanges.get(exchange).ok_or_else(|| errors::no_exchange(exchange, vhost_name))?;
        self.check_exclusive_access(id, conn)?;
        if source.spec.kind == ExchangeKind::Headers {
            crate::exchange::validate_headers_binding(arguments)?;
        }
        // AMQP 0-9-1: an empty routing key with an empty queue name binds with the queue's name.
        let routing_key =
            if routing_key.is_empty() && queue.is_empty() { queue_name } else { routing_key.clone() };
        if source.spec.kind == ExchangeKind::LocalRandom {
            let queue_type = self.queues.get(&id).map(|q| q.args.queue_type);
            crate::exchange::validate_local_random_binding(&routing_key, queue_type)?;
        }
        let binding =
            Binding { destination: Destination::Queue(id), routing_key, arguments: arguments.clone() };
        Ok((binding, exchange.clone()))
    }
}
