//! tx.select / tx.commit / tx.rollback and confirm.select: the channel's publishing mode.
//!
//! In tx mode publishes and settlements are held in the channel until tx.commit; rollback drops
//! the publishes and returns the settled deliveries to the unacked set (RabbitMQ semantics).

use hourglass_wire::{ConfirmSelectOk, TxCommitOk, TxRollbackOk, TxSelectOk};

use crate::api::{AmqpError, ChannelId, ConnectionId};
use crate::broker::Broker;
use crate::channel::{Mode, TxBuffer};
use crate::errors;
use crate::time::Timestamp;

impl Broker {
    pub(super) fn tx_select(&mut self, conn: ConnectionId, ch: ChannelId) -> Result<(), AmqpError> {
        let Some(channel) = self.connections.channel_mut(conn, ch) else { return Ok(()) };
        match channel.mode {
            Mode::Confirm { .. } => {
                return Err(errors::precondition_failed("cannot switch from confirm to tx mode"))
            }
            Mode::Plain => channel.mode = Mode::Tx(TxBuffer::default()),
            Mode::Tx(_) => {}
        }
        self.send(conn, ch, TxSelectOk {});
        Ok(())
    }

    pub(super) fn tx_commit(
        &mut self,
        conn: ConnectionId,
        ch: ChannelId,
        now: Timestamp,
    ) -> Result<(), AmqpError> {
        let buffer = self.take_tx_buffer(conn, ch)?;
        for publish in buffer.publishes {
            self.route_and_enqueue(conn, ch, Box::new(publish), now)?;
        }
        let mut by_outcome = buffer.settlements;
        // Settle in tag order so requeued messages land where they were.
        by_outcome.sort_by_key(|(u, _)| u.tag);
        for (delivery, settlement) in by_outcome {
            let mut one = std::mem::take(&mut self.scratch.settle);
            one.push(delivery);
            self.apply_settlements(conn, ch, &mut one, settlement, now);
            self.scratch.settle = one;
        }
        self.send_when_durable(conn, ch, TxCommitOk {});
        Ok(())
    }

    pub(super) fn tx_rollback(&mut self, conn: ConnectionId, ch: ChannelId) -> Result<(), AmqpError> {
        let buffer = self.take_tx_buffer(conn, ch)?;
        if let Some(channel) = self.connections.channel_mut(conn, ch) {
            for (delivery, _) in buffer.settlements {
                channel.untake(delivery);
            }
        }
        self.send(conn, ch, TxRollbackOk {});
        Ok(())
    }

    pub(super) fn confirm_select(
        &mut self,
        conn: ConnectionId,
        ch: ChannelId,
        nowait: bool,
    ) -> Result<(), AmqpError> {
        let Some(channel) = self.connections.channel_mut(conn, ch) else { return Ok(()) };
        match channel.mode {
            Mode::Tx(_) => return Err(errors::precondition_failed("cannot switch from tx to confirm mode")),
            Mode::Plain => channel.mode = Mode::Confirm { next_publish_seq: 1 },
            Mode::Confirm { .. } => {}
        }
        if !nowait {
            self.send(conn, ch, ConfirmSelectOk {});
        }
        Ok(())
    }

    /// Empties the channel's tx buffer; 406 when the channel is not transactional.
    fn take_tx_buffer(&mut self, conn: ConnectionId, ch: ChannelId) -> Result<TxBuffer, AmqpError> {
        let channel = self
            .connections
            .channel_mut(conn, ch)
            .ok_or_else(|| errors::precondition_failed("channel is not transactional"))?;
        match &mut channel.mode {
            Mode::Tx(buffer) => Ok(std::mem::take(buffer)),
            _ => Err(errors::precondition_failed("channel is not transactional")),
        }
    }
}
