//! Queries: what a front end asks about the broker's state beyond the 0-9-1 methods' replies
//! (the AMQP 1.0 management node's `GET /queues/:queue`), answered with `Effect::Answer`.

use crate::api::{AmqpError, Answer, ChannelId, ConnectionId, Effect, Query, QueueAnswer};
use crate::broker::Broker;
use crate::time::Timestamp;

impl Broker {
    /// Answers `query` on the channel, as a passive declare would find the queue (exclusive
    /// queues of other connections refused, expired messages not counted).
    pub(crate) fn answer_query(
        &mut self,
        conn: ConnectionId,
        ch: ChannelId,
        query: &Query,
        now: Timestamp,
    ) -> Result<(), AmqpError> {
        if !self.connections.has_channel(conn, ch) {
            return Ok(());
        }
        let Some(vhost) = self.vhost_of(conn) else { return Ok(()) };
        let name = match query {
            Query::Queue(name) => name,
            Query::ReplyAddress => {
                let address = self.reply_address(conn, ch)?;
                let answer = Box::new(Answer::ReplyAddress(address));
                self.emit(Effect::Answer { conn, channel: ch, answer });
                return Ok(());
            }
        };
        if let Some(answer) = self.reply_queue_answer(name) {
            self.emit(Effect::Answer { conn, channel: ch, answer: Box::new(Answer::Queue(answer)) });
            return Ok(());
        }
        let id = self.lookup_queue(&vhost, name)?;
        self.check_exclusive_access(id, conn)?;
        self.expire_messages(id, now);
        self.reschedule(id);
        let queue = &self.queues[&id];
        let answer = QueueAnswer {
            name: queue.name().clone(),
            durable: queue.spec.durable,
            exclusive: queue.spec.exclusive_owner.is_some(),
            auto_delete: queue.spec.auto_delete,
            arguments: queue.spec.arguments.clone(),
            messages: queue.message_count() as u64,
            consumers: queue.consumer_count() as u64,
        };
        self.emit(Effect::Answer { conn, channel: ch, answer: Box::new(Answer::Queue(answer)) });
        Ok(())
    }
}
