//! Channel numbers of one connection: which are free, opening, open or closing, and what each
//! state does with client frames and broker effects.
//!
//! ```text
//!            client channel.open (forwarded)        broker channel.open-ok
//!   Free ──────────────────────────────► Opening ─────────────────────────► Open
//!    ▲                                      │ client channel.close            │
//!    │ broker channel.close-ok              ▼ (forwarded)                     │
//!    ├──────────────────────────── ClosingByClient ◄──────────────────────────┤
//!    │                                                                        │ broker ChannelError,
//!    │ client channel.close-ok                                                │ or our own 406
//!    └──────────────────────────── ClosingByServer ◄──────────────────────────┘
//!                                   ▲            │ client channel.close (the two closes crossed):
//!                                   └────────────┘ we reply close-ok and still wait for its close-ok
//! ```
//! Opening behaves like Open for client frames (clients may pipeline methods after
//! channel.open), but drops broker effects other than channel.open-ok: they are stale ones from an
//! earlier incarnation of the same channel number. The closing states drop what AMQP 0-9-1 §4.2.9
//! tells the closing side to discard. Texts are RabbitMQ's (rabbit_channel, rabbit_reader).

use bytes::Bytes;
use hourglass_broker::{AmqpError, Publish};
use hourglass_wire::reply_code::{CHANNEL_ERROR, COMMAND_INVALID, NOT_ALLOWED, NOT_IMPLEMENTED};
use hourglass_wire::{ChannelCloseOk, ContentHeader, Method};
use rustc_hash::FxHashMap;

use crate::client_limits::Seat;
use crate::content::{Assembly, UnfinishedContent};
use crate::fault::Fault;

/// The channels of one connection, at most `channel_max` of them at once.
#[derive(Debug)]
pub(crate) struct Channels {
    states: FxHashMap<u16, ChannelState>,
    /// The negotiated channel_max: the most channels that may exist at once (RabbitMQ counts
    /// channels, not channel numbers).
    channel_max: u16,
    /// The sum of every channel's [`Assembly::unfinished`], kept in step by each change.
    unfinished: UnfinishedContent,
    /// The connection's place in the per-vhost / per-user counts (`client_limits.rs`) from
    /// connection.open-ok until the connection closes; each channel in `states` is counted in it.
    pub(crate) seat: Option<Seat>,
}

#[derive(Debug)]
enum ChannelState {
    Opening(Assembly),
    Open(Assembly),
    ClosingByClient,
    ClosingByServer,
}

/// What the connection does with a client frame on a channel.
#[derive(Debug, PartialEq)]
pub(crate) enum Inbound {
    /// Consumed or dropped; nothing to do.
    Nothing,
    /// Hand the method to the broker (`Command::Method`).
    Forward(Method),
    /// Hand the assembled message to the broker (`Command::Publish`).
    Publish(Box<Publish>),
    /// Answer the client on this channel.
    Reply(Method),
    /// The frame broke a rule.
    Fault(Fault),
}

/// What the connection does with a broker `ChannelError` for a channel.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum OnBrokerError {
    /// Send channel.close; the channel now waits for the client's close-ok.
    SendClose,
    /// The client is already closing it: complete its close with channel.close-ok.
    SendCloseOk,
    /// The channel is free or already closing by us.
    Drop,
}

impl Channels {
    pub(crate) fn new(channel_max: u16) -> Self {
        Channels {
            states: FxHashMap::default(),
            channel_max,
            unfinished: UnfinishedContent::default(),
            seat: None,
        }
    }

    /// A method frame from the client on `channel` (never 0).
    pub(crate) fn on_method(&mut self, channel: u16, method: Method) -> Inbound {
        let count = self.states.len();
        let Some(state) = self.states.get_mut(&channel) else {
            return self.on_method_free(channel, count, method);
        };
        match state {
            ChannelState::ClosingByClient => Inbound::Nothing,
            ChannelState::ClosingByServer => match method {
                Method::ChannelCloseOk(_) => {
                    self.remove(channel);
                    Inbound::Nothing
                }
                // Both sides closed at once: each answers the other (§4.2.9 "close"). The client
                // still owes a close-ok to ours (clients send it), so the channel stays closing
                // until it comes, as rabbit_channel's `closing` state; freed now, that close-ok
                // would land on a free channel and close the connection (504).
                Method::ChannelClose(_) => Inbound::Reply(ChannelCloseOk {}.into()),
                _ => Inbound::Nothing,
            },
            ChannelState::Opening(assembly) | ChannelState::Open(assembly) => {
                if !assembly.is_idle() {
                    return Inbound::Fault(assembly.unexpected_frame());
                }
                match method {
                    Method::ChannelOpen(_) => fault_on(CHANNEL_ERROR, "second 'channel.open' seen", &method),
                    Method::BasicPublish(publish) if publish.immediate => {
                        let method = Method::BasicPublish(publish);
                        fault_on(NOT_IMPLEMENTED, "immediate=true", &method)
                    }
                    Method::BasicPublish(publish) => {
                        tracked(&mut self.unfinished, assembly, |assembly| assembly.start(publish));
                        Inbound::Nothing
                    }
                    Method::ChannelClose(_) => {
                        *state = ChannelState::ClosingByClient;
                        Inbound::Forward(method)
                    }
                    // We never send channel.flow, so a flow-ok answers nothing (RabbitMQ ignores
                    // it too).
                    Method::ChannelFlowOk(_) => Inbound::Nothing,
                    method if is_client_channel_method(&method) => Inbound::Forward(method),
                    method => fault_on(COMMAND_INVALID, "unimplemented method", &method),
                }
            }
        }
    }

    fn on_method_free(&mut self, channel: u16, count: usize, method: Method) -> Inbound {
        if !matches!(method, Method::ChannelOpen(_)) {
            return fault_on(CHANNEL_ERROR, "expected 'channel.open'", &method);
        }
        let max = self.effective_channel_max();
        if count >= usize::from(max) {
            let detail =
                format!("number of channels opened ({count}) has reached the negotiated channel_max ({max})");
            return Inbound::Fault(Fault::connection(NOT_ALLOWED, detail));
        }
        self.states.insert(channel, ChannelState::Opening(Assembly::Idle));
        Inbound::Forward(method)
    }

    /// A content header from the client on `channel`.
    pub(crate) fn on_header(
        &mut self,
        channel: u16,
        header: ContentHeader,
        max_message_size: u64,
    ) -> Inbound {
        match self.states.get_mut(&channel) {
            None => Inbound::Fault(Assembly::Idle.unexpected_frame()),
            Some(ChannelState::Opening(assembly) | ChannelState::Open(assembly)) => {
                let elsewhere =
                    self.unfinished.announced_bytes.saturating_sub(assembly.unfinished().announced_bytes);
                assembled(tracked(&mut self.unfinished, assembly, |assembly| {
                    assembly.on_header(header, max_message_size, elsewhere)
                }))
            }
            Some(ChannelState::ClosingByClient | ChannelState::ClosingByServer) => Inbound::Nothing,
        }
    }

    /// RabbitMQ's 505 when a content header on `channel` is not due (no basic.publish before it,
    /// or a body is due), decided before the header's payload is parsed; `None` when one is due
    /// or the channel is closing (its frames are dropped).
    pub(crate) fn unexpected_header(&self, channel: u16) -> Option<Fault> {
        match self.states.get(&channel) {
            None => Some(Assembly::Idle.unexpected_frame()),
            Some(ChannelState::Opening(assembly) | ChannelState::Open(assembly)) => {
                (!assembly.expects_header()).then(|| assembly.unexpected_frame())
            }
            Some(ChannelState::ClosingByClient | ChannelState::ClosingByServer) => None,
        }
    }

    /// A content body frame from the client on `channel`.
    pub(crate) fn on_body(&mut self, channel: u16, payload: Bytes) -> Inbound {
        match self.states.get_mut(&channel) {
            None => Inbound::Fault(Assembly::Idle.unexpected_frame()),
            Some(ChannelState::Opening(assembly) | ChannelState::Open(assembly)) => {
                assembled(tracked(&mut self.unfinished, assembly, |assembly| assembly.on_body(payload)))
            }
            Some(ChannelState::ClosingByClient | ChannelState::ClosingByServer) => Inbound::Nothing,
        }
    }

    /// Whether a broker `Send` of `method` on `channel` reaches the client, updating the state
    /// for channel.open-ok and channel.close-ok.
    pub(crate) fn admit_send(&mut self, channel: u16, method: &Method) -> bool {
        let Some(state) = self.states.get_mut(&channel) else {
            return false;
        };
        match state {
            ChannelState::Opening(assembly) => {
                let open_ok = matches!(method, Method::ChannelOpenOk(_));
                if open_ok {
                    let assembly = std::mem::take(assembly);
                    *state = ChannelState::Open(assembly);
                }
                open_ok
            }
            // The broker answers channel.open and channel.close exactly once each; a second
            // answer on an open channel would confuse the client.
            ChannelState::Open(_) => match method {
                Method::ChannelOpenOk(_) | Method::ChannelCloseOk(_) => false,
                // The broker should close with `Effect::ChannelError`; if it sends channel.close
                // itself, the channel still waits for the client's close-ok.
                Method::ChannelClose(_) => {
                    *state = ChannelState::ClosingByServer;
                    true
                }
                _ => true,
            },
            ChannelState::ClosingByClient => {
                let close_ok = matches!(method, Method::ChannelCloseOk(_));
                if close_ok {
                    self.remove(channel);
                }
                close_ok
            }
            ChannelState::ClosingByServer => false,
        }
    }

    /// Whether a delivery may go out on `channel`: [`Channels::admit_send`] of a basic.deliver,
    /// which only an open channel takes.
    pub(crate) fn admits_delivery(&self, channel: u16) -> bool {
        matches!(self.states.get(&channel), Some(ChannelState::Open(_)))
    }

    /// The broker closed `channel` with an error (it has already dropped the channel's state).
    pub(crate) fn on_broker_error(&mut self, channel: u16) -> OnBrokerError {
        match self.states.get_mut(&channel) {
            None | Some(ChannelState::ClosingByServer) => OnBrokerError::Drop,
            Some(ChannelState::ClosingByClient) => {
                self.remove(channel);
                OnBrokerError::SendCloseOk
            }
            Some(state) => {
                let old = std::mem::replace(state, ChannelState::ClosingByServer);
                self.unfinished.remove(old.unfinished());
                OnBrokerError::SendClose
            }
        }
    }

    /// We close `channel` ourselves (a soft error of our own, such as 406 message too large).
    pub(crate) fn close_by_server(&mut self, channel: u16) {
        if let Some(state) = self.states.get_mut(&channel) {
            // Its unfinished message, if any, is dropped with it.
            let old = std::mem::replace(state, ChannelState::ClosingByServer);
            self.unfinished.remove(old.unfinished());
        }
    }

    /// The channel (in a closing state) is gone; its user may open another.
    fn remove(&mut self, channel: u16) {
        if self.states.remove(&channel).is_some() {
            if let Some(seat) = &mut self.seat {
                seat.close_channel();
            }
        }
    }

    /// A channel.open just admitted on `channel` ran into its user's `max-channels`: the
    /// connection is closing, so the channel is dropped uncounted.
    pub(crate) fn forget(&mut self, channel: u16) {
        self.states.remove(&channel);
    }

    /// What the unfinished messages of all channels hold.
    pub(crate) fn unfinished(&self) -> UnfinishedContent {
        self.unfinished
    }

    /// The negotiated channel_max (0 = no limit).
    pub(crate) fn channel_max(&self) -> u16 {
        self.channel_max
    }

    /// channel_max 0 means "no limit" in connection.tune; the wire format caps it at 65535.
    fn effective_channel_max(&self) -> u16 {
        if self.channel_max == 0 {
            u16::MAX
        } else {
            self.channel_max
        }
    }
}

impl ChannelState {
    fn unfinished(&self) -> UnfinishedContent {
        match self {
            ChannelState::Opening(assembly) | ChannelState::Open(assembly) => assembly.unfinished(),
            ChannelState::ClosingByClient | ChannelState::ClosingByServer => UnfinishedContent::default(),
        }
    }
}

/// Runs `step` on a channel's assembly, moving the connection's `total` by what the step changed.
fn tracked<R>(
    total: &mut UnfinishedContent,
    assembly: &mut Assembly,
    step: impl FnOnce(&mut Assembly) -> R,
) -> R {
    total.remove(assembly.unfinished());
    let result = step(assembly);
    total.add(assembly.unfinished());
    result
}

fn assembled(result: Result<Option<Box<Publish>>, Fault>) -> Inbound {
    match result {
        Ok(Some(publish)) => Inbound::Publish(publish),
        Ok(None) => Inbound::Nothing,
        Err(fault) => Inbound::Fault(fault),
    }
}

fn fault_on(code: u16, detail: &str, method: &Method) -> Inbound {
    Inbound::Fault(Fault::Connection(AmqpError::new(code, detail).on(method)))
}

/// Channel-level methods a client may send, all but publish and the channel open/close
/// handshake passed to the broker as they are. Everything else on a channel (connection.*,
/// server-only methods such as basic.deliver or queue.declare-ok) is RabbitMQ's "unimplemented
/// method".
fn is_client_channel_method(method: &Method) -> bool {
    matches!(
        method,
        Method::ChannelFlow(_)
            | Method::ExchangeDeclare(_)
            | Method::ExchangeDelete(_)
            | Method::ExchangeBind(_)
            | Method::ExchangeUnbind(_)
            | Method::QueueDeclare(_)
            | Method::QueueBind(_)
            | Method::QueuePurge(_)
            | Method::QueueDelete(_)
            | Method::QueueUnbind(_)
            | Method::BasicQos(_)
            | Method::BasicConsume(_)
            | Method::BasicCancel(_)
            | Method::BasicGet(_)
            | Method::BasicAck(_)
            | Method::BasicReject(_)
            | Method::BasicRecoverAsync(_)
            | Method::BasicRecover(_)
            | Method::BasicNack(_)
            | Method::TxSelect(_)
            | Method::TxCommit(_)
            | Method::TxRollback(_)
            | Method::ConfirmSelect(_)
    )
}
