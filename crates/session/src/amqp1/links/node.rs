//! The `/management` node's link pair (`management.rs` reads the requests): the client's
//! sending link carries requests, its receiving link of the same name the replies (OASIS link
//! pairing, as RabbitMQ pairs them: a session may hold several pairs). Each request runs as one
//! broker method on a channel of its own, opened for it and closed once answered, so one
//! refused request (a channel error) costs nothing else.

use std::collections::VecDeque;

use bytes::Bytes;
use hourglass_broker::{Answer, ChannelId, Command, Query};
use hourglass_wire::amqp1::Value;
use hourglass_wire::{ChannelClose, ChannelOpen, Method, ShortStr};
use rustc_hash::FxHashMap;

use super::{send_transfer, Io, Link, Partial, Sessions, CREDIT};
use crate::amqp1::management::{self, Operation};
use crate::amqp1::message;

/// Replies a client may leave untaken (no credit on its reply link) before its session ends.
const REPLIES_WAITING_MAX: usize = 1024;

/// The client's link that sends requests.
#[derive(Debug)]
pub(super) struct Requests {
    /// The link's name, which its reply link shares.
    name: String,
    pub(super) delivery_count: u32,
    pub(super) credit: u32,
    pub(super) partial: Option<Partial>,
}

/// The client's link that receives replies.
#[derive(Debug)]
pub(super) struct Replies {
    /// The link's name, which its request link shares.
    name: String,
    pub(super) delivery_count: u32,
    pub(super) credit: u32,
    waiting: VecDeque<Bytes>,
}

/// A request the broker is working on.
#[derive(Debug)]
pub(super) struct InFlight {
    session: u16,
    /// The name of the link pair it came on: its reply goes out on the pair's reply link.
    pair: String,
    id: Value,
    operation: Operation,
}

impl Sessions {
    pub(super) fn attach_requests(&mut self, io: &mut Io, session: u16, attach: &super::Attach) {
        let link = Requests {
            name: attach.name.clone(),
            delivery_count: attach.initial_delivery_count.unwrap_or(0),
            credit: CREDIT,
            partial: None,
        };
        if let Some(s) = self.sessions.get_mut(&session) {
            s.links.insert(attach.handle, Link::Requests(link));
        }
        self.send_link_flow(io, session, attach.handle, false);
    }

    pub(super) fn attach_replies(&mut self, session: u16, attach: &super::Attach) {
        let link =
            Replies { name: attach.name.clone(), delivery_count: 0, credit: 0, waiting: VecDeque::new() };
        if let Some(s) = self.sessions.get_mut(&session) {
            s.links.insert(attach.handle, Link::Replies(link));
        }
    }

    /// A whole request message: to the broker on a channel of its own, or refused at once.
    pub(super) fn management_request(&mut self, io: &mut Io, session: u16, handle: u32, payload: &[u8]) {
        let Some(Link::Requests(link)) = self.link_mut(session, handle) else { return };
        let pair = link.name.clone();
        if link.credit < CREDIT / 2 {
            link.credit = CREDIT;
            self.send_link_flow(io, session, handle, false);
        }
        if self.sessions.get(&session).and_then(|s| reply_link(&s.links, &pair)).is_none() {
            // Its reply would have nowhere to go: refused as RabbitMQ refuses it.
            let reason = "received transfer on half open management link pair";
            return self.end_with_error(io, session, "amqp:precondition-failed", reason);
        }
        let request = match management::request(payload) {
            Ok(request) => request,
            Err((id, refused)) => {
                let reason = Value::String(refused.reason);
                return self.reply(io, (session, &pair), &id, refused.status, reason);
            }
        };
        let Some(channel) = self.channels.take() else {
            let text = Value::String("too many requests at once".to_owned());
            return self.reply(io, (session, &pair), &request.id, 503, text);
        };
        self.method(io, channel, ChannelOpen::default().into());
        match &request.operation {
            Operation::QueueInfo(queue) => {
                let query = Command::Query {
                    conn: self.conn,
                    channel: ChannelId(channel),
                    query: Query::Queue(queue.clone()),
                };
                io.commands.push_back(query);
            }
            operation => {
                if let Some(method) = operation.method() {
                    self.method(io, channel, method.clone());
                }
            }
        }
        let in_flight = InFlight { session, pair, id: request.id, operation: request.operation };
        self.requests.insert(channel, in_flight);
    }

    /// The broker's answer to a query on a request's channel; `false` when the channel carries
    /// no request.
    pub(super) fn request_queried(&mut self, io: &mut Io, channel: u16, answer: &Answer) -> bool {
        if !self.requests.contains_key(&channel) {
            return false;
        }
        let Answer::Queue(queue) = answer else { return false };
        let arguments = message::map_of(&queue.arguments);
        let info = management::QueueInfo {
            name: &queue.name.as_str(),
            durable: queue.durable,
            exclusive: queue.exclusive,
            auto_delete: queue.auto_delete,
            arguments: &arguments,
            messages: queue.messages,
            consumers: queue.consumers,
            node: &self.node_name,
        };
        let body = management::queue_info(&info);
        self.answer(io, channel, 200, body);
        true
    }

    /// The broker's reply on a request's channel; `false` when the channel carries no request.
    pub(super) fn request_answered(&mut self, io: &mut Io, channel: u16, method: &Method) -> bool {
        let Some(request) = self.requests.get(&channel) else { return false };
        let (status, body) = match (method, &request.operation) {
            (Method::ChannelOpenOk(_), _) => return true,
            (
                Method::QueueDeclareOk(ok),
                Operation::DeclareQueue { name, durable, exclusive, auto_delete, arguments, .. },
            ) => {
                let info = management::QueueInfo {
                    name,
                    durable: *durable,
                    exclusive: *exclusive,
                    auto_delete: *auto_delete,
                    arguments,
                    messages: u64::from(ok.message_count),
                    consumers: u64::from(ok.consumer_count),
                    node: &self.node_name,
                };
                (200, management::queue_info(&info))
            }
            (Method::QueueDeleteOk(ok), _) => (200, management::message_count(ok.message_count)),
            (Method::QueuePurgeOk(ok), _) => (200, management::message_count(ok.message_count)),
            (
                Method::ExchangeDeclareOk(_)
                | Method::ExchangeDeleteOk(_)
                | Method::QueueBindOk(_)
                | Method::QueueUnbindOk(_)
                | Method::ExchangeBindOk(_)
                | Method::ExchangeUnbindOk(_),
                _,
            ) => (204, Value::Null),
            _ => return true,
        };
        self.answer(io, channel, status, body);
        true
    }

    /// Replies to the request on `channel` and closes its channel.
    fn answer(&mut self, io: &mut Io, channel: u16, status: u16, body: Value) {
        let Some(request) = self.requests.remove(&channel) else { return };
        let close = ChannelClose {
            reply_code: 200,
            reply_text: ShortStr::from_static("answered"),
            class_id: 0,
            method_id: 0,
        };
        self.method(io, channel, close.into());
        self.reply(io, (request.session, &request.pair), &request.id, status, body);
    }

    /// A request the broker refused (its channel is gone): the reply carries the status and text.
    pub(super) fn request_refused(&mut self, io: &mut Io, channel: u16, reply_code: u16, text: &str) -> bool {
        let Some(request) = self.requests.remove(&channel) else { return false };
        self.channels.give_back(channel);
        let status = management::status_of(reply_code);
        let text = Value::String(text.to_owned());
        self.reply(io, (request.session, &request.pair), &request.id, status, text);
        true
    }

    /// Queues a reply on the reply link of pair `pair` of `session`: the one of the same name,
    /// else (a client that names its two links differently) the session's only reply link.
    fn reply(&mut self, io: &mut Io, (session, pair): (u16, &str), id: &Value, status: u16, body: Value) {
        let payload = management::reply(id, status, body);
        let Some(s) = self.sessions.get_mut(&session) else { return };
        let Some(handle) = reply_link(&s.links, pair) else { return };
        let Some(Link::Replies(link)) = s.links.get_mut(&handle) else { return };
        if link.waiting.len() >= REPLIES_WAITING_MAX {
            // The client asks and never reads: its replies would have no bound.
            let reason = format!("more than {REPLIES_WAITING_MAX} management replies not taken");
            return self.end_with_error(io, session, "amqp:resource-limit-exceeded", reason);
        }
        link.waiting.push_back(payload);
        self.pump_replies(io, session, handle);
    }

    /// Sends waiting replies while the reply link has credit and the session a window.
    pub(super) fn pump_replies(&mut self, io: &mut Io, session: u16, handle: u32) {
        let Some(s) = self.sessions.get_mut(&session) else { return };
        let Some(Link::Replies(link)) = s.links.get_mut(&handle) else { return };
        while link.credit > 0 && s.remote_incoming_window > 0 {
            let Some(payload) = link.waiting.pop_front() else { break };
            let delivery_id = s.next_delivery_id;
            s.next_delivery_id = s.next_delivery_id.wrapping_add(1);
            let tag = u64::from(link.delivery_count);
            let frames = send_transfer(io, session, handle, delivery_id, tag, true, &payload);
            s.next_outgoing_id = s.next_outgoing_id.wrapping_add(frames);
            s.remote_incoming_window = s.remote_incoming_window.saturating_sub(frames);
            link.credit -= 1;
            link.delivery_count = link.delivery_count.wrapping_add(1);
        }
    }
}

/// The reply link of pair `pair` among a session's links: the reply link of that name, else
/// the only reply link (a client that names its two links differently); none when there is no
/// reply link, or several and none of that name.
fn reply_link(links: &FxHashMap<u32, Link>, pair: &str) -> Option<u32> {
    let replies = links.iter().filter_map(|(handle, link)| match link {
        Link::Replies(replies) => Some((*handle, replies.name == pair)),
        _ => None,
    });
    let (mut only, mut count) = (None, 0);
    for (handle, named) in replies {
        if named {
            return Some(handle);
        }
        only = Some(handle);
        count += 1;
    }
    only.filter(|_| count == 1)
}
