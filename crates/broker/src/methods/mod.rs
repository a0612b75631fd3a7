//! Channel-level AMQP methods, one file per class. `handle_method` is the dispatch table.

mod basic;
pub(crate) use basic::HandOut;
mod channel;
mod exchange;
mod publish_route;
pub(crate) use exchange::Removed;
mod query;
mod queue;
mod tx;

use hourglass_wire::{ExchangeDeclare, ExchangeDelete, Method, QueueDeclare, QueueDelete};

use crate::api::{AmqpError, ChannelId, ConnectionId};
use crate::broker::Broker;
use crate::errors;
use crate::naming::without_cr_lf;
use crate::table_limits::{self, TableTooLarge};
use crate::time::Timestamp;

impl Broker {
    /// Applies a channel-level method from a client. Methods on a channel the broker does not
    /// know (closed while the method was in flight) are dropped, as the client's close handshake
    /// discards them too.
    pub(crate) fn handle_method(
        &mut self,
        conn: ConnectionId,
        ch: ChannelId,
        method: &Method,
        now: Timestamp,
    ) -> Result<(), AmqpError> {
        if let Method::ChannelOpen(_) = method {
            return self.channel_open(conn, ch);
        }
        if !self.connections.has_channel(conn, ch) {
            return Ok(());
        }
        // Before anything is declared: a table past the limits could not be stored (issue #22).
        if let Some((what, arguments)) = table_limits::method_arguments(method) {
            table_limits::check_table(what, arguments).map_err(TableTooLarge::into_amqp)?;
        }
        match method {
            Method::ChannelClose(_) => self.channel_close(conn, ch, now),
            Method::ChannelCloseOk(_) => Ok(()),
            Method::ChannelFlow(m) => self.channel_flow(conn, ch, m),
            Method::ExchangeDeclare(m) => match without_cr_lf(&m.exchange) {
                Some(exchange) => {
                    self.exchange_declare(conn, ch, &ExchangeDeclare { exchange, ..(**m).clone() })
                }
                None => self.exchange_declare(conn, ch, m),
            },
            Method::ExchangeDelete(m) => match without_cr_lf(&m.exchange) {
                Some(exchange) => self.exchange_delete(conn, ch, &ExchangeDelete { exchange, ..m.clone() }),
                None => self.exchange_delete(conn, ch, m),
            },
            Method::ExchangeBind(m) => self.exchange_bind(conn, ch, m),
            Method::ExchangeUnbind(m) => self.exchange_unbind(conn, ch, m),
            Method::QueueDeclare(m) => match without_cr_lf(&m.queue) {
                Some(queue) => self.queue_declare(conn, ch, &QueueDeclare { queue, ..m.clone() }, now),
                None => self.queue_declare(conn, ch, m, now),
            },
            Method::QueueBind(m) => self.queue_bind(conn, ch, m),
            Method::QueueUnbind(m) => self.queue_unbind(conn, ch, m),
            Method::QueuePurge(m) => self.queue_purge(conn, ch, m),
            Method::QueueDelete(m) => match without_cr_lf(&m.queue) {
                Some(queue) => self.queue_delete(conn, ch, &QueueDelete { queue, ..m.clone() }),
                None => self.queue_delete(conn, ch, m),
            },
            Method::BasicQos(m) => self.basic_qos(conn, ch, m, now),
            Method::BasicConsume(m) => self.basic_consume(conn, ch, m, now),
            Method::BasicCancel(m) => self.basic_cancel(conn, ch, m, now),
            // A client's answer to a server basic.cancel (RabbitMQ 4.4's accept_consumer_cancel_ok):
            // the consumer is already gone here, so there is nothing to do.
            Method::BasicCancelOk(_) => Ok(()),
            Method::BasicGet(m) => self.basic_get(conn, ch, m, now),
            Method::BasicAck(m) => self.basic_ack(conn, ch, m, now),
            Method::BasicNack(m) => self.basic_nack(conn, ch, m, now),
            Method::BasicReject(m) => self.basic_reject(conn, ch, m, now),
            Method::BasicRecover(m) => self.basic_recover(conn, ch, m.requeue, true, now),
            Method::BasicRecoverAsync(m) => self.basic_recover(conn, ch, m.requeue, false, now),
            Method::TxSelect(_) => self.tx_select(conn, ch),
            Method::TxCommit(_) => self.tx_commit(conn, ch, now),
            Method::TxRollback(_) => self.tx_rollback(conn, ch),
            Method::ConfirmSelect(m) => self.confirm_select(conn, ch, m.nowait),
            // rabbit_channel answers any other method with this hard error.
            _ => Err(errors::command_invalid("unimplemented method")),
        }
    }
}
