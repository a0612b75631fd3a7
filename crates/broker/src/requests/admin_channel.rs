//! Requests the HTTP API makes as one of its users: wire methods on an admin channel
//! ([`AdminChannel`](crate::admin::AdminChannel)) with that user's permissions, so the AMQP
//! handlers make every check (names, arguments, equivalence, access).

use std::sync::Arc;

use bytes::Bytes;
use hourglass_wire::{
    BasicAck, BasicGet, BasicGetOk, BasicNack, ExchangeDeclare, ExchangeDelete, Method, QueueDeclare,
    QueueDelete, ShortStr,
};

use super::{sealed::Sealed, Request};
use crate::admin::{AdminChannel, Reply};
use crate::api::{AmqpError, Publish};
use crate::broker::Broker;
use crate::message::Message;
use crate::permissions::Permissions;
use crate::time::Timestamp;

/// Who a request acts as: `user` in `vhost` with `permissions` (the user's there).
#[derive(Clone)]
pub struct AsUser {
    pub user: String,
    pub vhost: String,
    pub permissions: Arc<Permissions>,
}

impl AsUser {
    /// Runs `calls` on an admin channel opened as this user.
    pub(super) fn on_channel<T>(
        &self,
        broker: &mut Broker,
        now: Timestamp,
        calls: impl FnOnce(&mut AdminChannel<'_>) -> T,
    ) -> T {
        broker.with_admin_channel_as(&self.user, &self.vhost, self.permissions.clone(), now, calls)
    }
}

/// Why an admin channel request on a named queue or exchange failed.
#[derive(Debug)]
pub enum AdminError {
    /// There is no such queue or exchange (the HTTP API's 404).
    NotFound,
    /// The broker refused the method, as it would an AMQP client's.
    Refused(AmqpError),
}

impl From<AmqpError> for AdminError {
    fn from(error: AmqpError) -> Self {
        AdminError::Refused(error)
    }
}

/// One channel method (a bind, an unbind, a purge): what the broker answered on the channel.
pub struct CallMethod {
    pub who: AsUser,
    pub method: Method,
}

impl Sealed for CallMethod {}
impl Request for CallMethod {
    type Answer = Result<Vec<Reply>, AmqpError>;
    fn apply(self, broker: &mut Broker, now: Timestamp) -> Self::Answer {
        let method = self.method;
        self.who.on_channel(broker, now, |ch| ch.call(method))
    }
}

/// queue.declare: whether it made the queue (`false`: it was there, and equivalent).
pub struct DeclareQueue {
    pub who: AsUser,
    pub declare: QueueDeclare,
}

impl Sealed for DeclareQueue {}
impl Request for DeclareQueue {
    type Answer = Result<bool, AmqpError>;
    fn apply(self, broker: &mut Broker, now: Timestamp) -> Self::Answer {
        let existed = broker.queue_stats(&self.who.vhost, &self.declare.queue.as_str()).is_some();
        let declare = self.declare;
        self.who.on_channel(broker, now, |ch| ch.call(declare)).map(|_| !existed)
    }
}

/// queue.delete of a queue that must exist.
pub struct DeleteQueue {
    pub who: AsUser,
    pub delete: QueueDelete,
}

impl Sealed for DeleteQueue {}
impl Request for DeleteQueue {
    type Answer = Result<(), AdminError>;
    fn apply(self, broker: &mut Broker, now: Timestamp) -> Self::Answer {
        if broker.queue_stats(&self.who.vhost, &self.delete.queue.as_str()).is_none() {
            return Err(AdminError::NotFound);
        }
        let delete = self.delete;
        self.who.on_channel(broker, now, |ch| ch.call(delete))?;
        Ok(())
    }
}

/// exchange.declare: whether it made the exchange.
pub struct DeclareExchange {
    pub who: AsUser,
    pub declare: ExchangeDeclare,
}

impl Sealed for DeclareExchange {}
impl Request for DeclareExchange {
    type Answer = Result<bool, AmqpError>;
    fn apply(self, broker: &mut Broker, now: Timestamp) -> Self::Answer {
        let existed = broker.has_exchange(&self.who.vhost, &self.declare.exchange);
        let declare = self.declare;
        self.who.on_channel(broker, now, |ch| ch.call(declare)).map(|_| !existed)
    }
}

/// exchange.delete of an exchange that must exist.
pub struct DeleteExchange {
    pub who: AsUser,
    pub delete: ExchangeDelete,
}

impl Sealed for DeleteExchange {}
impl Request for DeleteExchange {
    type Answer = Result<(), AdminError>;
    fn apply(self, broker: &mut Broker, now: Timestamp) -> Self::Answer {
        if !broker.has_exchange(&self.who.vhost, &self.delete.exchange) {
            return Err(AdminError::NotFound);
        }
        let delete = self.delete;
        self.who.on_channel(broker, now, |ch| ch.call(delete))?;
        Ok(())
    }
}

/// A publish to an exchange that must exist: whether a queue took it (a mandatory publish
/// nothing routes is returned).
pub struct PublishMessage {
    pub who: AsUser,
    pub publish: Publish,
}

impl Sealed for PublishMessage {}
impl Request for PublishMessage {
    type Answer = Result<bool, AdminError>;
    fn apply(self, broker: &mut Broker, now: Timestamp) -> Self::Answer {
        if !broker.has_exchange(&self.who.vhost, &self.publish.exchange) {
            return Err(AdminError::NotFound);
        }
        let publish = self.publish;
        let replies = self.who.on_channel(broker, now, |ch| ch.publish(publish))?;
        Ok(!replies.iter().any(|(method, _)| matches!(method, Method::BasicReturn(_))))
    }
}

/// How [`GetMessages`] settles what it took.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum GetSettlement {
    /// Acknowledged: gone from the queue.
    Ack,
    /// Returned to the queue.
    Requeue,
    /// Rejected without requeue: dead-lettered or dropped.
    Reject,
}

/// basic.get up to `count` times, stopping once the bodies taken reach `body_bytes_max`, then
/// the lot settled at once (a requeue after each would get the same message again). No record is
/// read on the broker's thread. With `wait_for_reads`, the paged ones among the messages it would
/// take from the head are asked for in one read first (`AdminChannel::ask_read_for_get`); while
/// a read of the queue is out it takes nothing ([`Gotten::awaits_read`]). Without, and where the
/// messages it takes are not all at the head (a fair queue's choice, a lower priority), it stops
/// at a paged message, which its take asked for.
pub struct GetMessages {
    pub who: AsUser,
    pub queue: ShortStr,
    pub count: u64,
    pub body_bytes_max: usize,
    pub settlement: GetSettlement,
    pub wait_for_reads: bool,
}

/// What [`GetMessages`] took, in queue order.
pub struct Gotten {
    pub messages: Vec<(BasicGetOk, Arc<Message>)>,
    /// It took fewer than asked because a read of the queue's paged messages is out: one asked
    /// before it (it took nothing), or the read of the paged message it stopped at. Once
    /// [`ReadWait`] is woken, a get takes the rest.
    pub awaits_read: bool,
}

impl Sealed for GetMessages {}
impl Request for GetMessages {
    type Answer = Result<Gotten, AmqpError>;
    fn apply(self, broker: &mut Broker, now: Timestamp) -> Self::Answer {
        let GetMessages { who, queue, count, body_bytes_max, settlement, wait_for_reads } = self;
        let span = usize::try_from(count).unwrap_or(usize::MAX);
        let (messages, awaits_read) = who.on_channel(broker, now, |ch| {
            if wait_for_reads && ch.ask_read_for_get(&queue, span, body_bytes_max)? {
                return Ok((Vec::new(), true));
            }
            let mut got = Vec::new();
            let mut body_bytes = 0usize;
            // Asked when a get comes back empty, before the settlement below changes what the
            // queue's message groups would choose next.
            let mut stopped_on_read = false;
            for _ in 0..count {
                if body_bytes >= body_bytes_max {
                    break;
                }
                let mut replies = ch.call(BasicGet { queue: queue.clone(), no_ack: false })?;
                match replies.pop() {
                    Some((Method::BasicGetOk(ok), Some(message))) => {
                        body_bytes = body_bytes.saturating_add(message.body.len());
                        got.push((ok, message));
                    }
                    _ => {
                        stopped_on_read = ch.get_awaits_read(&queue);
                        break;
                    }
                }
            }
            if let Some((last, _)) = got.last() {
                let delivery_tag = last.delivery_tag;
                match settlement {
                    GetSettlement::Ack => ch.call(BasicAck { delivery_tag, multiple: true })?,
                    GetSettlement::Requeue => {
                        ch.call(BasicNack { delivery_tag, multiple: true, requeue: true })?
                    }
                    GetSettlement::Reject => {
                        ch.call(BasicNack { delivery_tag, multiple: true, requeue: false })?
                    }
                };
            }
            Ok::<_, AmqpError>((got, stopped_on_read))
        })?;
        Ok(Gotten { messages, awaits_read })
    }
}

/// The HTTP API's get waits for the read [`Gotten::awaits_read`] named: sent as
/// [`Job::wait_for_read`](super::Job::wait_for_read), it is woken by
/// [`Notice::ReadAnswered`](crate::Notice::ReadAnswered) for its ticket.
pub struct ReadWait {
    pub vhost: String,
    pub queue: String,
}

/// RabbitMQ's aliveness test: declares queue `aliveness-test`, publishes a message to it and
/// gets it back.
pub struct CheckAlive {
    pub who: AsUser,
}

impl Sealed for CheckAlive {}
impl Request for CheckAlive {
    type Answer = Result<(), AmqpError>;
    fn apply(self, broker: &mut Broker, now: Timestamp) -> Self::Answer {
        self.who.on_channel(broker, now, |ch| {
            let queue = ShortStr::from_static("aliveness-test");
            ch.call(QueueDeclare { queue: queue.clone(), ..Default::default() })?;
            ch.publish(Publish {
                exchange: ShortStr::default(),
                routing_key: queue.clone(),
                mandatory: false,
                properties: Default::default(),
                body: Bytes::from_static(b"test_message"),
            })?;
            ch.call(BasicGet { queue, no_ack: true }).map(|_| ())
        })
    }
}
