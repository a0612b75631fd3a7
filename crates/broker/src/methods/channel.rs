//! channel.open, channel.close, channel.flow.

use hourglass_wire::{ChannelCloseOk, ChannelFlow, ChannelFlowOk, ChannelOpenOk};

use crate::api::{AmqpError, ChannelId, ConnectionId};
use crate::broker::Broker;
use crate::connections::AlreadyOpen;
use crate::errors;
use crate::time::Timestamp;

impl Broker {
    pub(super) fn channel_open(&mut self, conn: ConnectionId, ch: ChannelId) -> Result<(), AmqpError> {
        match self.connections.open_channel(conn, ch) {
            Ok(true) => {}
            Ok(false) => return Ok(()),
            Err(AlreadyOpen) => {
                return Err(AmqpError::new(
                    hourglass_wire::reply_code::CHANNEL_ERROR,
                    "second 'channel.open' seen",
                ))
            }
        }
        self.stats.churn.channel_opened(conn);
        self.send(conn, ch, ChannelOpenOk {});
        Ok(())
    }

    /// Releases the channel's deliveries and consumers, then confirms: every effect for the
    /// channel emitted before the close-ok belongs to the closed channel.
    pub(super) fn channel_close(
        &mut self,
        conn: ConnectionId,
        ch: ChannelId,
        now: Timestamp,
    ) -> Result<(), AmqpError> {
        self.release_channel(conn, ch, now);
        self.send(conn, ch, ChannelCloseOk {});
        Ok(())
    }

    /// RabbitMQ supports only active=true (flow control is credit-based there, and here).
    pub(super) fn channel_flow(
        &mut self,
        conn: ConnectionId,
        ch: ChannelId,
        m: &ChannelFlow,
    ) -> Result<(), AmqpError> {
        if !m.active {
            return Err(errors::not_implemented("active=false"));
        }
        self.send(conn, ch, ChannelFlowOk { active: true });
        Ok(())
    }
}
