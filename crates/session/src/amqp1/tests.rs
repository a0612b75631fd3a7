//! AMQP 1.0 over the 0-9-1 connection's entry point: a scripted client on a manual clock sends
//! hand-encoded 1.0 frames and reads what comes back; the broker's side is the commands out and
//! hand-made effects in.

use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use hourglass_broker::{AmqpError, ChannelId, Command, ConnectionId, Effect, Message, Timestamp};
use hourglass_wire::amqp1::{
    decode_frame_header, decode_value, encode_value, FrameKind, Performative, Value,
};
use hourglass_wire::{BasicAck, BasicProperties, BasicReturn, EncodedProperties, Method, ShortStr};

use super::{AMQP_HEADER, SASL_HEADER};
use crate::{AnonymousLogin, Connection, PeerInfo, SessionConfig, StaticUsers};

const CONN: ConnectionId = ConnectionId(9);
const T0: u64 = 5_000_000;

struct Client {
    conn: Connection,
    now: Timestamp,
    inbox: BytesMut,
    /// Output not yet read as frames.
    pending: BytesMut,
}

impl Client {
    fn new() -> Self {
        Self::configured(|_| {})
    }

    /// A client of a connection whose settings `configure` changes from the defaults.
    fn configured(configure: impl FnOnce(&mut SessionConfig)) -> Self {
        let peer =
            PeerInfo { addr: "127.0.0.1:6000".into(), local: "127.0.0.1:5672".into(), is_loopback: true };
        let mut config =
            SessionConfig::new(Arc::new(StaticUsers::default().with_user("alice", "secret", false)));
        configure(&mut config);
        let now = Timestamp::from_millis(T0);
        Client {
            conn: Connection::new(CONN, peer, Arc::new(config), now),
            now,
            inbox: BytesMut::new(),
            pending: BytesMut::new(),
        }
    }

    fn at(&mut self, ms_after_t0: u64) {
        self.now = Timestamp::from_millis(T0 + ms_after_t0);
        self.conn.handle_timeout(self.now);
    }

    fn bytes(&mut self, bytes: &[u8]) {
        self.inbox.extend_from_slice(bytes);
        self.conn.handle_input(&mut self.inbox, self.now);
    }

    fn frame(&mut self, kind: FrameKind, channel: u16, performative: Performative, payload: &[u8]) {
        let mut out = BytesMut::new();
        super::write_frame(&mut out, kind, channel, &performative, payload);
        self.bytes(&out);
    }

    fn send(&mut self, channel: u16, performative: Performative) {
        self.frame(FrameKind::Amqp, channel, performative, &[]);
    }

    fn effect(&mut self, effect: Effect) {
        self.conn.handle_effect(effect, self.now);
    }

    /// The protocol header the connection wrote next.
    fn header(&mut self) -> [u8; 8] {
        self.pending.extend_from_slice(&self.conn.take_output());
        let header: [u8; 8] = self.pending[..8].try_into().expect("a protocol header");
        let _ = self.pending.split_to(8);
        header
    }

    /// Every frame the connection wrote since the last call: (channel, performative, payload).
    fn frames(&mut self) -> Vec<(u16, Performative, Bytes)> {
        self.pending.extend_from_slice(&self.conn.take_output());
        let mut frames = Vec::new();
        while let Some(header) = decode_frame_header(&self.pending, u32::MAX).expect("a valid frame") {
            let frame = self.pending.split_to(header.size as usize).freeze();
            let body = frame.slice(header.body_offset()..);
            if body.is_empty() {
                frames.push((
                    header.channel,
                    Performative::Close { error: None },
                    Bytes::from_static(b"empty"),
                ));
                continue;
            }
            let (value, used) = decode_value(&body).expect("a value");
            frames.push((
                header.channel,
                Performative::from_value(&value).expect("a performative"),
                body.slice(used..),
            ));
        }
        frames
    }

    fn performatives(&mut self) -> Vec<Performative> {
        self.frames().into_iter().map(|(_, p, _)| p).collect()
    }

    /// SASL PLAIN as alice, then the AMQP header and open (to `hostname`).
    fn open(&mut self, hostname: Option<&str>) {
        self.bytes(&SASL_HEADER);
        assert_eq!(self.header(), SASL_HEADER);
        let mechanisms = self.performatives();
        assert_eq!(mechanisms, vec![Performative::SaslMechanisms { mechanisms: vec!["PLAIN".into()] }]);
        let init = Performative::SaslInit {
            mechanism: "PLAIN".into(),
            initial_response: Some(Bytes::from_static(b"\0alice\0secret")),
            hostname: None,
        };
        self.frame(FrameKind::Sasl, 0, init, &[]);
        assert_eq!(self.performatives(), vec![Performative::SaslOutcome { code: 0 }]);
        self.bytes(&AMQP_HEADER);
        assert_eq!(self.header(), AMQP_HEADER);
        self.send(0, open(hostname));
    }

    /// An opened connection with a session on channel 0.
    fn with_session() -> Self {
        let mut client = Client::new();
        client.open(None);
        client.send(0, begin());
        let _ = client.frames();
        let _ = client.conn.take_commands();
        client
    }

    /// A client with a link receiving from `/queues/q` (handle 1, broker channel 1) that has
    /// granted `credit`; what that wrote and asked of the broker already read.
    fn consuming(credit_granted: u32) -> Self {
        let mut client = Client::with_session();
        client.send(0, attach(1, true, "/queues/q"));
        client.send(0, credit(1, 0, credit_granted));
        client.performatives();
        client.conn.take_commands();
        client
    }
}

fn open(hostname: Option<&str>) -> Performative {
    Performative::Open {
        container_id: "test-client".into(),
        hostname: hostname.map(str::to_owned),
        max_frame_size: 65_536,
        channel_max: 16,
        idle_time_out_ms: None,
        properties: Value::Null,
    }
}

fn begin() -> Performative {
    Performative::Begin {
        remote_channel: None,
        next_outgoing_id: 0,
        incoming_window: 100,
        outgoing_window: 100,
        handle_max: 16,
    }
}

fn terminus(code: u64, address: &str) -> Value {
    Value::Described(Box::new(Value::Ulong(code)), Box::new(Value::List(vec![Value::String(address.into())])))
}

fn attach(handle: u32, receiver: bool, address: &str) -> Performative {
    let (source, target) = if receiver {
        (terminus(0x28, address), terminus(0x29, ""))
    } else {
        (terminus(0x28, ""), terminus(0x29, address))
    };
    Performative::Attach {
        name: format!("link-{handle}"),
        handle,
        receiver,
        snd_settle_mode: 0,
        rcv_settle_mode: 0,
        source,
        target,
        initial_delivery_count: (!receiver).then_some(0),
    }
}

fn credit(handle: u32, delivery_count: u32, link_credit: u32) -> Performative {
    Performative::Flow {
        next_incoming_id: Some(0),
        incoming_window: 100,
        next_outgoing_id: 0,
        outgoing_window: 100,
        handle: Some(handle),
        delivery_count: Some(delivery_count),
        link_credit: Some(link_credit),
        drain: false,
        echo: false,
    }
}

fn data_message(body: &'static [u8]) -> Vec<u8> {
    let mut out = BytesMut::new();
    let section =
        Value::Described(Box::new(Value::Ulong(0x75)), Box::new(Value::Binary(Bytes::from_static(body))));
    encode_value(&section, &mut out);
    out.to_vec()
}

fn transfer(handle: u32, delivery_id: Option<u32>, more: bool) -> Performative {
    Performative::Transfer {
        handle,
        delivery_id,
        delivery_tag: delivery_id.map(|id| Bytes::copy_from_slice(&id.to_be_bytes())),
        settled: Some(false),
        more,
        state: Value::Null,
        aborted: false,
    }
}

/// The client settles its delivery `id` with `state`.
fn settle(id: u32, state: Value) -> Performative {
    Performative::Disposition { receiver: true, first: id, last: None, settled: true, state }
}

fn outcome(code: u64) -> Value {
    Value::Described(Box::new(Value::Ulong(code)), Box::new(Value::List(Vec::new())))
}

fn deliver(tag: u64, body: &'static [u8]) -> Effect {
    let properties: EncodedProperties =
        BasicProperties { delivery_mode: Some(2), ..Default::default() }.into();
    let message = Message::new(
        ShortStr::from_static(""),
        ShortStr::from_static("q"),
        properties,
        Bytes::from_static(body),
    );
    Effect::Deliver {
        conn: CONN,
        channel: ChannelId(1),
        consumer_tag: ShortStr::from_static("amqp1.0.1"),
        delivery_tag: tag,
        redelivered: false,
        message: Arc::new(message),
    }
}

/// The broker's ack of publish `tag` on channel 1 (the first link's).
fn confirm(tag: u64) -> Effect {
    Effect::Confirm { conn: CONN, channel: ChannelId(1), delivery_tag: tag, multiple: false, ack: true }
}

/// A session with a link publishing to `/queues/orders` that has sent `count` unsettled
/// messages (delivery ids 0..count), each published to the broker.
fn publishing(count: u32) -> Client {
    let mut client = Client::with_session();
    client.send(0, attach(0, false, "/queues/orders"));
    client.performatives();
    client.conn.take_commands();
    for id in 0..count {
        client.frame(FrameKind::Amqp, 0, transfer(0, Some(id), false), &data_message(b"m"));
    }
    assert_eq!(client.conn.take_commands().len(), count as usize);
    client
}

fn methods(commands: &[Command]) -> Vec<(u16, String)> {
    commands
        .iter()
        .map(|c| match c {
            Command::Method { channel, method, .. } => (channel.0, method.name().to_owned()),
            Command::Publish { channel, .. } => (channel.0, "publish".to_owned()),
            other => (0, format!("{other:?}").chars().take(20).collect()),
        })
        .collect()
}

#[test]
fn a_sasl_plain_login_and_open_open_a_broker_connection_on_the_named_vhost() {
    let mut client = Client::new();
    client.open(Some("vhost:/"));
    let frames = client.performatives();
    assert!(matches!(&frames[..], [Performative::Open { .. }]), "{frames:?}");
    let commands = client.conn.take_commands();
    match &commands[..] {
        [Command::ConnectionOpen { info, .. }] => {
            assert_eq!(info.user, "alice");
            assert_eq!(info.vhost, "/");
            assert_eq!(info.login.mechanism, "PLAIN");
        }
        other => panic!("{other:?}"),
    }
    assert!(client.conn.opened());
}

#[test]
fn a_wrong_password_gets_the_auth_outcome_and_the_connection_ends() {
    let mut client = Client::new();
    client.bytes(&SASL_HEADER);
    let _ = client.header();
    let _ = client.frames();
    let init = Performative::SaslInit {
        mechanism: "PLAIN".into(),
        initial_response: Some(Bytes::from_static(b"\0alice\0wrong")),
        hostname: None,
    };
    client.frame(FrameKind::Sasl, 0, init, &[]);
    assert_eq!(client.performatives(), vec![Performative::SaslOutcome { code: 1 }]);
    assert!(client.conn.is_closed());
    assert!(client.conn.take_commands().is_empty());
}

/// SASL ANONYMOUS (RabbitMQ 4's `anonymous_login_user`): not offered unless an anonymous user is
/// configured; then it logs in as that user, checked as its PLAIN login would be (a wrong
/// configured password is refused like any other).
#[test]
fn anonymous_is_offered_only_when_configured_and_logs_in_as_its_user() {
    let mechanisms = |client: &mut Client| -> Vec<String> {
        client.bytes(&SASL_HEADER);
        let _ = client.header();
        match &client.performatives()[..] {
            [Performative::SaslMechanisms { mechanisms }] => mechanisms.clone(),
            other => panic!("{other:?}"),
        }
    };
    let anonymous_init =
        Performative::SaslInit { mechanism: "ANONYMOUS".into(), initial_response: None, hostname: None };

    let mut off = Client::new();
    assert_eq!(mechanisms(&mut off), ["PLAIN"]);
    off.frame(FrameKind::Sasl, 0, anonymous_init.clone(), &[]);
    assert_eq!(off.performatives(), vec![Performative::SaslOutcome { code: 1 }]);

    let with = |pass: &str| {
        Client::configured(|config| {
            config.anonymous_login = Some(AnonymousLogin { user: "alice".into(), pass: pass.into() });
        })
    };
    let mut on = with("secret");
    assert_eq!(mechanisms(&mut on), ["PLAIN", "ANONYMOUS"]);
    on.frame(FrameKind::Sasl, 0, anonymous_init.clone(), &[]);
    assert_eq!(on.performatives(), vec![Performative::SaslOutcome { code: 0 }]);
    on.bytes(&AMQP_HEADER);
    let _ = on.header();
    on.send(0, open(Some("vhost:/")));
    on.performatives();
    match &on.conn.take_commands()[..] {
        [Command::ConnectionOpen { info, .. }] => {
            assert_eq!((info.user.as_str(), info.login.mechanism), ("alice", "ANONYMOUS"));
        }
        other => panic!("{other:?}"),
    }

    let mut wrong = with("not-the-password");
    mechanisms(&mut wrong);
    wrong.frame(FrameKind::Sasl, 0, anonymous_init, &[]);
    assert_eq!(wrong.performatives(), vec![Performative::SaslOutcome { code: 1 }]);
}

#[test]
fn a_client_skipping_sasl_is_told_to_use_it() {
    let mut client = Client::new();
    client.bytes(&AMQP_HEADER);
    assert_eq!(client.header(), SASL_HEADER);
    assert!(client.conn.is_closed());
}

/// RabbitMQ 4 answers an open it refuses with nothing and closes the socket: its clients then
/// fail the connect instead of reconnecting to a vhost that is not there.
#[test]
fn an_unknown_vhost_closes_the_socket_without_a_frame() {
    let mut client = Client::new();
    client.open(Some("vhost:nowhere"));
    assert!(client.performatives().is_empty());
    assert!(client.conn.take_commands().is_empty());
    assert!(!client.conn.is_closed());
    client.at(crate::SILENT_CLOSE_DELAY_MS);
    assert!(client.conn.is_closed());
    assert!(client.performatives().is_empty());
}

#[test]
fn a_publishing_link_publishes_each_message_and_settles_it_when_the_broker_confirms() {
    let mut client = Client::with_session();
    client.send(0, attach(0, false, "/queues/orders"));
    let frames = client.performatives();
    assert!(matches!(&frames[0], Performative::Attach { receiver: true, handle: 0, .. }), "{frames:?}");
    assert!(
        matches!(&frames[1], Performative::Flow { handle: Some(0), link_credit: Some(256), .. }),
        "{frames:?}"
    );
    let commands = client.conn.take_commands();
    let names: Vec<_> = methods(&commands).into_iter().map(|(_, n)| n).collect();
    assert_eq!(names, ["channel.open", "queue.declare", "confirm.select"]);
    client.frame(FrameKind::Amqp, 0, transfer(0, Some(0), false), &data_message(b"first"));
    let commands = client.conn.take_commands();
    match &commands[..] {
        [Command::Publish { channel, publish, .. }] => {
            assert_eq!(channel.0, 1);
            assert_eq!(publish.exchange, "");
            assert_eq!(publish.routing_key, "orders");
            assert_eq!(&publish.body[..], b"first");
            assert_eq!(publish.properties.decode().delivery_mode, Some(2));
        }
        other => panic!("{other:?}"),
    }
    assert!(client.frames().is_empty(), "no outcome before the broker's confirm");
    client.effect(confirm(1));
    match &client.performatives()[..] {
        [Performative::Disposition { receiver: true, first: 0, last: None, settled: true, state }] => {
            assert_eq!(state, &outcome(0x24));
        }
        other => panic!("{other:?}"),
    }
}

/// Confirms of consecutive deliveries that arrive before the output is written settle them in
/// one disposition (first..last), as consecutive 0-9-1 acks become one `multiple` ack; once the
/// output has gone, the next confirm starts a new one. Before, each confirm wrote its own.
#[test]
fn consecutive_confirms_settle_in_one_disposition() {
    let mut client = publishing(4);
    for tag in 1..=3 {
        client.effect(confirm(tag));
    }
    match &client.performatives()[..] {
        [Performative::Disposition { receiver: true, first: 0, last: Some(2), settled: true, state }] => {
            assert_eq!(state, &outcome(0x24));
        }
        other => panic!("{other:?}"),
    }
    client.effect(confirm(4));
    match &client.performatives()[..] {
        [Performative::Disposition { first: 3, last: None, .. }] => {}
        other => panic!("{other:?}"),
    }
}

/// A publisher that keeps many messages unconfirmed gets its credit back in halves of the
/// window, one flow each, not a flow of a credit or two after every confirm.
#[test]
fn credit_comes_back_in_halves_of_the_window() {
    let credit = super::links::CREDIT;
    let mut client = publishing(credit);
    let flows = |performatives: &[Performative]| -> Vec<u32> {
        performatives
            .iter()
            .filter_map(|p| match p {
                Performative::Flow { handle: Some(0), link_credit: Some(credit), .. } => Some(*credit),
                _ => None,
            })
            .collect()
    };
    let mut granted = Vec::new();
    for tag in 1..=u64::from(credit) {
        client.effect(confirm(tag));
        granted.extend(flows(&client.performatives()));
    }
    assert_eq!(granted, [credit / 2, credit], "a flow at half the window confirmed, one at all of it");
}

/// RabbitMQ 4 settles an unsettled message no queue takes with `released` (the client may
/// publish it again): the publish is mandatory, and the broker's return, which comes just before
/// its ack, turns that ack into `released`; the messages around it are `accepted`. A message the
/// client settled itself is not mandatory (dropped when unroutable, as RabbitMQ drops it).
#[test]
fn an_unroutable_unsettled_message_is_released_and_its_neighbours_accepted() {
    let mut client = Client::with_session();
    client.send(0, attach(0, false, "/exchanges/events/nowhere"));
    client.performatives();
    client.conn.take_commands();
    for id in 0..3 {
        client.frame(FrameKind::Amqp, 0, transfer(0, Some(id), false), &data_message(b"m"));
    }
    let mut settled = transfer(0, Some(3), false);
    if let Performative::Transfer { settled: s, .. } = &mut settled {
        *s = Some(true);
    }
    client.frame(FrameKind::Amqp, 0, settled, &data_message(b"m"));
    let mandatory: Vec<bool> = client
        .conn
        .take_commands()
        .iter()
        .filter_map(|c| match c {
            Command::Publish { publish, .. } => Some(publish.mandatory),
            _ => None,
        })
        .collect();
    assert_eq!(mandatory, [true, true, true, false]);
    let send = |method: Method| Effect::send(CONN, ChannelId(1), method, None);
    client.effect(send(BasicAck { delivery_tag: 1, multiple: false }.into()));
    let returned = BasicReturn {
        reply_code: 312,
        reply_text: ShortStr::from_static("NO_ROUTE"),
        exchange: ShortStr::from_static("events"),
        routing_key: ShortStr::from_static("nowhere"),
    };
    client.effect(send(returned.into()));
    client.effect(send(BasicAck { delivery_tag: 2, multiple: false }.into()));
    client.effect(send(BasicAck { delivery_tag: 3, multiple: false }.into()));
    client.effect(send(BasicAck { delivery_tag: 4, multiple: false }.into()));
    let outcomes: Vec<(u32, Value)> = client
        .performatives()
        .into_iter()
        .filter_map(|p| match p {
            Performative::Disposition { receiver: true, first, last: None, settled: true, state } => {
                Some((first, state))
            }
            _ => None,
        })
        .collect();
    assert_eq!(outcomes, [(0, outcome(0x24)), (1, outcome(0x26)), (2, outcome(0x24))]);
}

#[test]
fn a_message_in_several_transfers_is_published_once_whole() {
    let mut client = Client::with_session();
    client.send(0, attach(0, false, "/exchanges/amq.topic/a.b"));
    let _ = client.frames();
    let _ = client.conn.take_commands();
    let payload = data_message(b"0123456789");
    client.frame(FrameKind::Amqp, 0, transfer(0, Some(0), true), &payload[..5]);
    assert!(client.conn.take_commands().is_empty());
    client.frame(FrameKind::Amqp, 0, transfer(0, None, false), &payload[5..]);
    match &client.conn.take_commands()[..] {
        [Command::Publish { publish, .. }] => {
            assert_eq!(publish.exchange, "amq.topic");
            assert_eq!(publish.routing_key, "a.b");
            assert_eq!(&publish.body[..], b"0123456789");
        }
        other => panic!("{other:?}"),
    }
}

/// RabbitMQ 4.3's consumer timeout over AMQP 1.0: the broker took a delivery back; the client
/// is sent `released` for it, not settled (the spec's 2.6.12), and the link stays attached: the
/// redelivery goes out on it with the client's next credit. The client's own settle of it afterwards reaches nothing
/// in the broker (its tag is stale there, and no longer known here).
#[test]
fn a_timed_out_delivery_is_released_to_the_client_and_the_link_goes_on() {
    let mut client = Client::consuming(1);
    client.effect(deliver(1, b"job"));
    assert_eq!(client.performatives().len(), 1, "the transfer");
    client.effect(Effect::TimedOut { conn: CONN, channel: ChannelId(1), delivery_tag: 1 });
    let released = outcome(0x26);
    match &client.performatives()[..] {
        [Performative::Disposition { receiver: false, first: 0, last: None, settled: false, state }] => {
            assert_eq!(state, &released);
        }
        other => panic!("{other:?}"),
    }
    client.send(0, settle(0, outcome(0x26)));
    assert!(client.conn.take_commands().is_empty(), "nothing to settle in the broker");
    client.send(0, credit(1, 1, 1));
    client.conn.take_commands();
    client.effect(deliver(2, b"job"));
    let transfers = client.performatives();
    assert!(
        matches!(&transfers[..], [Performative::Transfer { delivery_id: Some(1), .. }]),
        "the redelivery goes out on the same link: {transfers:?}"
    );
}

/// RabbitMQ 4.3's delayed retry by hand: a `modified` outcome whose message annotations name an
/// `x-opt-delivery-time` hands the delivery back to be delivered again no earlier than that
/// (`Command::Modify`), as a failure when `delivery-failed` is set; without the annotation it
/// is the plain reject with requeue.
#[test]
fn a_modified_outcome_with_a_delivery_time_returns_the_message_until_then() {
    let mut client = Client::consuming(2);
    client.effect(deliver(7, b"job"));
    client.effect(deliver(8, b"job"));
    client.performatives();
    // As RabbitMQ's Python client sends it: a string key (proton's for a dict's str) and a long.
    let annotations =
        Value::Map(vec![(Value::String("x-opt-delivery-time".into()), Value::Long(1_900_000_000_000))]);
    let modified = |annotations: Value| {
        Value::Described(
            Box::new(Value::Ulong(0x27)),
            Box::new(Value::List(vec![Value::Bool(true), Value::Bool(false), annotations])),
        )
    };
    client.send(0, settle(0, modified(annotations)));
    client.send(0, settle(1, modified(Value::Null)));
    match &client.conn.take_commands()[..] {
        [Command::Modify(modify), Command::Method { method: Method::BasicReject(reject), .. }] => {
            assert_eq!((modify.channel.0, modify.delivery_tag, modify.failed), (1, 7, true));
            assert_eq!(modify.ready_at.map(|at| at.as_millis()), Some(1_900_000_000_000));
            assert!(modify.annotations.is_empty(), "the delivery time is not kept as an annotation");
            assert_eq!((reject.delivery_tag, reject.requeue), (8, true));
        }
        other => panic!("{other:?}"),
    }
}

/// Issue 42 (RabbitMQ 4.0's modified outcome): message annotations with `x-` keys, symbols or
/// strings, go to the broker as the headers they set, whether the message is handed back or
/// dead-lettered (`undeliverable-here`). A key without `x-` (reserved by the spec) ends the
/// session with `amqp:invalid-field`, and nothing reaches the broker. Before, the annotations
/// were dropped.
#[test]
fn a_modified_outcome_s_annotations_reach_the_broker_and_reserved_keys_are_refused() {
    let mut client = Client::consuming(3);
    for tag in [7, 8, 9] {
        client.effect(deliver(tag, b"job"));
    }
    client.performatives();
    let modified = |undeliverable_here: bool, annotations: Vec<(Value, Value)>| {
        Value::Described(
            Box::new(Value::Ulong(0x27)),
            Box::new(Value::List(vec![
                Value::Bool(false),
                Value::Bool(undeliverable_here),
                Value::Map(annotations),
            ])),
        )
    };
    let reason = (Value::Symbol("x-opt-reason".into()), Value::String("busy".into()));
    let count = (Value::String("x-opt-count".into()), Value::Long(2));
    client.send(0, settle(0, modified(false, vec![reason.clone(), count])));
    client.send(0, settle(1, modified(true, vec![reason])));
    match &client.conn.take_commands()[..] {
        [Command::Modify(back), Command::Modify(dead)] => {
            assert_eq!((back.delivery_tag, back.failed, back.undeliverable_here), (7, false, false));
            assert_eq!(back.ready_at, None);
            assert_eq!(back.annotations.get("x-opt-reason"), Some(hourglass_wire::FieldValue::from("busy")));
            assert_eq!(back.annotations.get("x-opt-count"), Some(hourglass_wire::FieldValue::I64(2)));
            assert_eq!((dead.delivery_tag, dead.undeliverable_here), (8, true));
            assert_eq!(dead.annotations.len(), 1);
        }
        other => panic!("{other:?}"),
    }
    client.send(0, settle(2, modified(false, vec![(Value::Symbol("invalid".into()), Value::Long(1))])));
    let after = client.conn.take_commands();
    // The session's links end (their deliveries go back, as for a closed channel); no outcome.
    assert!(
        after.iter().all(|c| matches!(c, Command::ChannelAborted { .. } | Command::Method { .. })),
        "{after:?}"
    );
    assert!(
        !after.iter().any(|c| matches!(
            c,
            Command::Method {
                method: Method::BasicReject(_) | Method::BasicAck(_) | Method::BasicNack(_),
                ..
            }
        )),
        "{after:?}"
    );
    let frames = client.performatives();
    assert!(
        frames.iter().any(
            |f| matches!(f, Performative::End { error: Some(e) } if e.condition == "amqp:invalid-field")
        ),
        "{frames:?}"
    );
}

/// A message dead-lettered by a `modified` outcome has no time to be delivered again at: an
/// `x-opt-delivery-time` among its annotations is kept as the header it sets, like any other
/// annotation, not dropped. Before, it was dropped unread.
#[test]
fn a_dead_lettering_modified_outcome_keeps_its_delivery_time_annotation() {
    let mut client = Client::consuming(1);
    client.effect(deliver(7, b"job"));
    client.performatives();
    let at = (Value::Symbol("x-opt-delivery-time".into()), Value::Long(1_900_000_000_000));
    let modified = Value::Described(
        Box::new(Value::Ulong(0x27)),
        Box::new(Value::List(vec![Value::Bool(true), Value::Bool(true), Value::Map(vec![at])])),
    );
    client.send(0, settle(0, modified));
    match &client.conn.take_commands()[..] {
        [Command::Modify(dead)] => {
            assert_eq!((dead.undeliverable_here, dead.ready_at), (true, None));
            let kept = dead.annotations.get("x-opt-delivery-time");
            assert_eq!(kept, Some(hourglass_wire::FieldValue::I64(1_900_000_000_000)));
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_consuming_link_delivers_only_with_credit_and_turns_outcomes_into_acks_and_requeues() {
    let mut client = Client::with_session();
    client.send(0, attach(1, true, "/queues/q"));
    let frames = client.performatives();
    assert!(
        matches!(
            &frames[..],
            [Performative::Attach { receiver: false, initial_delivery_count: Some(0), .. }]
        ),
        "{frames:?}"
    );
    assert_eq!(methods(&client.conn.take_commands()), [(1, "channel.open".to_owned())]);
    client.send(0, credit(1, 0, 2));
    let names: Vec<_> = methods(&client.conn.take_commands()).into_iter().map(|(_, n)| n).collect();
    assert_eq!(names, ["basic.qos", "basic.consume"]);
    for tag in 1..=3 {
        client.effect(deliver(tag, b"hello"));
    }
    let transfers: Vec<_> =
        client.frames().into_iter().filter(|(_, p, _)| matches!(p, Performative::Transfer { .. })).collect();
    assert_eq!(transfers.len(), 2, "two credits, two transfers");
    let (_, _, payload) = &transfers[0];
    let message = super::message::inbound(payload).unwrap();
    assert_eq!(&message.body[..], b"hello");
    // Accept the first, release the second.
    client.send(
        0,
        Performative::Disposition {
            receiver: true,
            first: 0,
            last: None,
            settled: true,
            state: outcome(0x24),
        },
    );
    client.send(
        0,
        Performative::Disposition {
            receiver: true,
            first: 1,
            last: None,
            settled: true,
            state: outcome(0x26),
        },
    );
    let commands = client.conn.take_commands();
    match &commands[..] {
        [Command::Method { method: Method::BasicAck(ack), .. }, Command::Method { method: Method::BasicNack(nack), .. }] =>
        {
            assert_eq!(ack.delivery_tag, 1);
            assert_eq!((nack.delivery_tag, nack.requeue), (2, true), "released: handed back, not failed");
        }
        other => panic!("{other:?}"),
    }
    assert!(client.frames().is_empty(), "the third waits for credit");
    client.send(0, credit(1, 2, 1));
    let transfers =
        client.frames().into_iter().filter(|(_, p, _)| matches!(p, Performative::Transfer { .. })).count();
    assert_eq!(transfers, 1);
    // Modified with delivery-failed: a failed delivery (0-9-1's reject with requeue).
    let failed =
        Value::Described(Box::new(Value::Ulong(0x27)), Box::new(Value::List(vec![Value::Bool(true)])));
    client.send(
        0,
        Performative::Disposition { receiver: true, first: 2, last: None, settled: true, state: failed },
    );
    match &client.conn.take_commands()[..] {
        [Command::Method { method: Method::BasicReject(reject), .. }] => {
            assert_eq!((reject.delivery_tag, reject.requeue), (3, true))
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_broker_error_on_a_link_detaches_it_with_the_matching_condition() {
    let mut client = Client::with_session();
    client.send(0, attach(0, true, "/queues/missing"));
    client.send(0, credit(0, 0, 5));
    let _ = client.frames();
    let _ = client.conn.take_commands();
    let error = AmqpError::new(404, "no queue 'missing' in vhost '/'");
    client.effect(Effect::ChannelError { conn: CONN, channel: ChannelId(1), error });
    match &client.performatives()[..] {
        [Performative::Detach { handle: 0, closed: true, error: Some(error) }] => {
            assert_eq!(error.condition, "amqp:not-found");
            assert_eq!(error.description.as_deref(), Some("NOT_FOUND - no queue 'missing' in vhost '/'"));
        }
        other => panic!("{other:?}"),
    }
    assert!(!client.conn.is_closed(), "the connection goes on");
    // The client's detach answers ours: not answered again, and the handle is free after it.
    client.send(0, Performative::Detach { handle: 0, closed: true, error: None });
    assert!(client.performatives().is_empty());
    client.send(0, attach(0, true, "/queues/q"));
    assert!(matches!(&client.performatives()[..], [Performative::Attach { handle: 0, .. }]));
}

#[test]
fn a_bad_address_detaches_the_link_and_nothing_reaches_the_broker() {
    let mut client = Client::with_session();
    client.send(0, attach(0, false, "orders"));
    let frames = client.performatives();
    assert!(
        matches!(&frames[..], [Performative::Attach { .. }, Performative::Detach { error: Some(e), .. }] if e.condition == "amqp:invalid-field"),
        "{frames:?}"
    );
    assert!(client.conn.take_commands().is_empty());
}

#[test]
fn a_delivery_larger_than_the_frame_limit_goes_out_in_several_transfers() {
    // A client asking for the smallest frames a peer may.
    let mut small = Client::new();
    small.bytes(&SASL_HEADER);
    let _ = small.header();
    let _ = small.frames();
    small.frame(
        FrameKind::Sasl,
        0,
        Performative::SaslInit {
            mechanism: "PLAIN".into(),
            initial_response: Some(Bytes::from_static(b"\0alice\0secret")),
            hostname: None,
        },
        &[],
    );
    let _ = small.frames();
    small.bytes(&AMQP_HEADER);
    let _ = small.header();
    small.send(
        0,
        Performative::Open {
            container_id: "c".into(),
            hostname: None,
            max_frame_size: 512,
            channel_max: 4,
            idle_time_out_ms: None,
            properties: Value::Null,
        },
    );
    small.send(0, begin());
    small.send(0, attach(0, true, "/queues/q"));
    small.send(0, credit(0, 0, 1));
    let _ = small.frames();
    static BIG: [u8; 2000] = [7; 2000];
    small.effect(deliver(1, &BIG));
    let transfers: Vec<_> =
        small.frames().into_iter().filter(|(_, p, _)| matches!(p, Performative::Transfer { .. })).collect();
    assert!(transfers.len() >= 4, "{} transfers", transfers.len());
    let more: Vec<bool> =
        transfers.iter().map(|(_, p, _)| matches!(p, Performative::Transfer { more: true, .. })).collect();
    assert!(more[..more.len() - 1].iter().all(|m| *m) && !more[more.len() - 1]);
    let payload: Vec<u8> = transfers.iter().flat_map(|(_, _, p)| p.to_vec()).collect();
    assert_eq!(&super::message::inbound(&Bytes::from(payload.clone())).unwrap().body[..], &BIG[..]);
}

#[test]
fn an_idle_peer_is_closed_after_the_idle_time_out_and_a_quiet_one_gets_empty_frames() {
    let mut client = Client::new();
    client.open(None);
    let frames = client.performatives();
    let Performative::Open { idle_time_out_ms: Some(half), .. } = frames[0] else { panic!("{frames:?}") };
    // We announce half the time-out we enforce (part 2.4.5).
    let idle = u64::from(half) * 2;
    client.at(idle - 1);
    assert!(client.performatives().is_empty());
    client.at(idle);
    match &client.performatives()[..] {
        [Performative::Close { error: Some(error) }] => {
            assert_eq!(error.condition, "amqp:resource-limit-exceeded")
        }
        other => panic!("{other:?}"),
    }

    let mut quiet = Client::new();
    quiet.bytes(&SASL_HEADER);
    let _ = quiet.header();
    let _ = quiet.frames();
    quiet.frame(
        FrameKind::Sasl,
        0,
        Performative::SaslInit {
            mechanism: "PLAIN".into(),
            initial_response: Some(Bytes::from_static(b"\0alice\0secret")),
            hostname: None,
        },
        &[],
    );
    let _ = quiet.frames();
    quiet.bytes(&AMQP_HEADER);
    let _ = quiet.header();
    quiet.send(
        0,
        Performative::Open {
            container_id: "c".into(),
            hostname: None,
            max_frame_size: 4096,
            channel_max: 4,
            idle_time_out_ms: Some(10_000),
            properties: Value::Null,
        },
    );
    let _ = quiet.frames();
    quiet.at(5_000);
    let frames = quiet.frames();
    assert_eq!(frames.len(), 1, "one empty frame at half the peer's time-out");
    assert_eq!(&frames[0].2[..], b"empty");
}

#[test]
fn garbage_after_the_open_closes_with_a_decode_error() {
    let mut client = Client::with_session();
    client.bytes(&[0, 0, 0, 12, 2, 0, 0, 0, 0x45, 0x45, 0x45, 0x45]);
    match &client.performatives()[..] {
        [Performative::Close { error: Some(error) }] => assert_eq!(error.condition, "amqp:decode-error"),
        other => panic!("{other:?}"),
    }
}

fn management_request(method: &str, path: &str, body: Value) -> Vec<u8> {
    let mut out = BytesMut::new();
    let properties = Value::List(vec![
        Value::String("req-7".into()),
        Value::Null,
        Value::String(path.into()),
        Value::String(method.into()),
        Value::String("$me".into()),
    ]);
    encode_value(&Value::Described(Box::new(Value::Ulong(0x73)), Box::new(properties)), &mut out);
    encode_value(&Value::Described(Box::new(Value::Ulong(0x77)), Box::new(body)), &mut out);
    out.to_vec()
}

/// The reply's subject (status) and correlation-id, and its body.
fn management_reply(payload: &[u8]) -> (String, Value, Option<Value>) {
    let sections = super::message::sections(payload).unwrap();
    let Some(Value::String(status)) = sections.properties.get(3).cloned() else { panic!("{sections:?}") };
    (status, sections.properties.get(5).cloned().unwrap_or(Value::Null), sections.body_value().unwrap())
}

/// A session with the `/management` link pair: requests on handle 0, replies on handle 1.
fn with_management() -> Client {
    let mut client = Client::with_session();
    client.send(0, attach(0, false, "/management"));
    client.send(0, attach(1, true, "/management"));
    client.send(0, credit(1, 0, 10));
    let _ = client.frames();
    assert!(client.conn.take_commands().is_empty(), "the node's links open no channel");
    client
}

fn replies(client: &mut Client) -> Vec<(String, Value, Option<Value>)> {
    client
        .frames()
        .into_iter()
        .filter(|(_, p, _)| matches!(p, Performative::Transfer { handle: 1, .. }))
        .map(|(_, _, payload)| management_reply(&payload))
        .collect()
}

/// A management declare is answered 200 with RabbitMQ 4's queue map, naming this node as the
/// queue's leader and replica.
#[test]
fn a_management_queue_declare_runs_on_a_channel_of_its_own_and_is_answered_200() {
    let mut client = with_management();
    let body = Value::Map(vec![(Value::String("durable".into()), Value::Bool(true))]);
    client.frame(
        FrameKind::Amqp,
        0,
        transfer(0, Some(0), false),
        &management_request("PUT", "/queues/orders", body),
    );
    let commands = client.conn.take_commands();
    assert_eq!(methods(&commands), [(1, "channel.open".to_owned()), (1, "queue.declare".to_owned())]);
    let ok = hourglass_wire::QueueDeclareOk {
        queue: ShortStr::from_static("orders"),
        message_count: 3,
        consumer_count: 1,
    };
    client.effect(Effect::send(CONN, ChannelId(1), ok, None));
    let answered = replies(&mut client);
    let [(status, correlation, Some(Value::Map(queue)))] = &answered[..] else { panic!("{answered:?}") };
    assert_eq!(status, "200");
    assert_eq!(correlation, &Value::String("req-7".into()));
    assert!(queue.contains(&(Value::String("message_count".into()), Value::Ulong(3))), "{queue:?}");
    // The node serving it is its leader and the replica to use (RabbitMQ 4's queue locality);
    // both were empty before.
    let node = Value::String("hourglass@localhost".into());
    assert!(queue.contains(&(Value::String("leader".into()), node.clone())), "{queue:?}");
    assert!(queue.contains(&(Value::String("replicas".into()), Value::Array(vec![node]))), "{queue:?}");
    assert_eq!(methods(&client.conn.take_commands()), [(1, "channel.close".to_owned())]);
}

/// Two `/management` link pairs on one session (OASIS link pairing: a pair is a sending and a
/// receiving link of the same name): each request is answered on the reply link of its own
/// pair. Replies went to whichever reply link the session found first.
#[test]
fn management_replies_go_to_the_reply_link_of_the_request_s_pair() {
    let mut client = Client::with_session();
    let named = |handle: u32, receiver: bool, pair: &str| {
        let mut attach = attach(handle, receiver, "/management");
        if let Performative::Attach { name, .. } = &mut attach {
            *name = pair.to_owned();
        }
        attach
    };
    for (first, pair) in [(0, "pair-a"), (2, "pair-b")] {
        client.send(0, named(first, false, pair));
        client.send(0, named(first + 1, true, pair));
        client.send(0, credit(first + 1, 0, 10));
    }
    let _ = client.frames();
    // A request on each pair's request link: pair a's on channel 1, pair b's on channel 2.
    for (delivery_id, handle) in [(0, 0), (1, 2)] {
        let request = management_request("DELETE", "/queues/q", Value::Null);
        client.frame(FrameKind::Amqp, 0, transfer(handle, Some(delivery_id), false), &request);
    }
    let _ = client.conn.take_commands();
    let answered_on = |client: &mut Client, channel: u16| -> Vec<u32> {
        let ok = hourglass_wire::QueueDeleteOk { message_count: u32::from(channel) };
        client.effect(Effect::send(CONN, ChannelId(channel), ok, None));
        let frames = client.frames();
        frames
            .iter()
            .filter_map(|(_, p, _)| match p {
                Performative::Transfer { handle, .. } => Some(*handle),
                _ => None,
            })
            .collect()
    };
    assert_eq!(answered_on(&mut client, 2), [3], "pair b's reply on pair b's reply link");
    assert_eq!(answered_on(&mut client, 1), [1], "pair a's reply on pair a's reply link");
}

/// A request on a pair whose reply link is not attached has nowhere for its reply to go. RabbitMQ
/// ends the session with `amqp:precondition-failed` ("received transfer on half open management
/// link pair"); before, the request ran and its reply was dropped, and the client waited for it
/// for ever.
#[test]
fn a_request_on_a_half_open_management_pair_ends_the_session() {
    let mut client = Client::with_session();
    client.send(0, attach(0, false, "/management"));
    let _ = client.frames();
    client.frame(
        FrameKind::Amqp,
        0,
        transfer(0, Some(0), false),
        &management_request("DELETE", "/queues/q", Value::Null),
    );
    assert!(client.conn.take_commands().is_empty(), "the request does not run");
    let frames = client.performatives();
    assert!(
        frames.iter().any(|f| matches!(
            f,
            Performative::End { error: Some(e) }
                if e.condition == "amqp:precondition-failed"
                    && e.description.as_deref() == Some("received transfer on half open management link pair")
        )),
        "{frames:?}"
    );
}

#[test]
fn a_refused_management_request_is_answered_with_its_status_and_the_next_one_still_runs() {
    let mut client = with_management();
    client.frame(
        FrameKind::Amqp,
        0,
        transfer(0, Some(0), false),
        &management_request("DELETE", "/queues/nope", Value::Null),
    );
    let _ = client.conn.take_commands();
    let error = AmqpError::new(404, "no queue 'nope' in vhost '/'");
    client.effect(Effect::ChannelError { conn: CONN, channel: ChannelId(1), error });
    let answered = replies(&mut client);
    assert_eq!(answered[0].0, "404");
    client.frame(
        FrameKind::Amqp,
        0,
        transfer(0, Some(1), false),
        &management_request("PATCH", "/queues/q", Value::Null),
    );
    assert_eq!(replies(&mut client)[0].0, "405", "refused before reaching the broker");
    client.frame(
        FrameKind::Amqp,
        0,
        transfer(0, Some(2), false),
        &management_request("DELETE", "/exchanges/x", Value::Null),
    );
    let commands = client.conn.take_commands();
    assert_eq!(
        methods(&commands),
        [(1, "channel.open".to_owned()), (1, "exchange.delete".to_owned())],
        "channel 1 is free again"
    );
}

#[test]
fn a_publisher_past_its_credit_is_detached_and_unconfirmed_messages_stay_bounded() {
    let mut client = Client::with_session();
    client.send(0, attach(0, false, "/queues/q"));
    let _ = client.frames();
    let _ = client.conn.take_commands();
    let payload = data_message(b"m");
    for id in 0..super::links::CREDIT {
        client.frame(FrameKind::Amqp, 0, transfer(0, Some(id), false), &payload);
    }
    let published = client.conn.take_commands().len();
    assert_eq!(published, super::links::CREDIT as usize, "no confirm came back: no more credit was granted");
    let granted =
        client.frames().iter().any(|(_, p, _)| matches!(p, Performative::Flow { handle: Some(0), .. }));
    assert!(!granted);
    client.frame(FrameKind::Amqp, 0, transfer(0, Some(super::links::CREDIT), false), &payload);
    let frames = client.performatives();
    assert!(
        matches!(&frames[..], [Performative::Detach { error: Some(e), .. }] if e.condition == "amqp:link:transfer-limit-exceeded"),
        "{frames:?}"
    );
    let commands = methods(&client.conn.take_commands());
    assert_eq!(commands, [(1, "channel.close".to_owned())], "the message past the credit is not published");
}

/// RabbitMQ 4 bounds a receiving link by its credit alone: a client holding deliveries unsettled
/// and granting more credit gets more (the channel's prefetch grows with what it holds).
#[test]
fn unsettled_deliveries_do_not_hold_back_new_credit() {
    let mut client = Client::with_session();
    client.send(0, attach(1, true, "/queues/q"));
    client.send(0, credit(1, 0, 2));
    let _ = client.frames();
    let qos = |commands: &[Command]| -> Vec<u16> {
        commands
            .iter()
            .filter_map(|c| match c {
                Command::Method { method: Method::BasicQos(q), .. } => Some(q.prefetch_count),
                Command::ConsumerPrefetch { prefetch, .. } => Some(*prefetch),
                _ => None,
            })
            .collect()
    };
    assert_eq!(qos(&client.conn.take_commands()), [2]);
    client.effect(deliver(1, b"a"));
    client.effect(deliver(2, b"b"));
    let _ = client.frames();
    // Both held unsettled; two more credits.
    client.send(0, credit(1, 2, 2));
    assert_eq!(qos(&client.conn.take_commands()), [4], "two held + two credits");
}

/// Direct reply-to as RabbitMQ 4.2 serves it over AMQP 1.0: a receiving link on a dynamic source
/// with the `rabbitmq:volatile-queue` capability consumes its channel's replies (no-ack), and its
/// attach is answered once the broker names the reply address, which the source then carries.
/// Replies go out settled and acked by nobody; one past the link's credit is dropped.
#[test]
fn a_dynamic_volatile_source_consumes_direct_replies_at_the_address_the_broker_names() {
    let mut client = Client::with_session();
    let capabilities = Value::Array(vec![Value::Symbol("rabbitmq:volatile-queue".into())]);
    let mut fields = vec![Value::Null; 11];
    fields[4] = Value::Bool(true);
    fields[10] = capabilities;
    let source = Value::Described(Box::new(Value::Ulong(0x28)), Box::new(Value::List(fields)));
    let Performative::Attach { name, target, .. } = attach(0, true, "") else { unreachable!() };
    client.send(
        0,
        Performative::Attach {
            name,
            handle: 0,
            receiver: true,
            snd_settle_mode: 1,
            rcv_settle_mode: 0,
            source,
            target,
            initial_delivery_count: None,
        },
    );
    assert!(client.performatives().is_empty(), "the attach waits for the reply address");
    let commands = client.conn.take_commands();
    assert_eq!(methods(&commands)[..2], [(1, "channel.open".to_owned()), (1, "basic.consume".to_owned())]);
    match &commands[1] {
        Command::Method { method: Method::BasicConsume(consume), .. } => {
            assert_eq!((consume.queue.as_bytes(), consume.no_ack), (&b"amq.rabbitmq.reply-to"[..], true));
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(commands[2], Command::Query { query: hourglass_broker::Query::ReplyAddress, .. }));
    let address = ShortStr::from_static("amq.rabbitmq.reply-to.abc.1.1");
    let answer = Box::new(hourglass_broker::Answer::ReplyAddress(address));
    client.effect(Effect::Answer { conn: CONN, channel: ChannelId(1), answer });
    match &client.performatives()[..] {
        [Performative::Attach { handle: 0, receiver: false, snd_settle_mode: 1, source, .. }] => {
            let Value::Described(_, fields) = source else { panic!("{source:?}") };
            let Value::List(fields) = fields.as_ref() else { panic!("{fields:?}") };
            assert_eq!(fields[0], Value::String("/queues/amq.rabbitmq.reply-to.abc.1.1".into()));
        }
        other => panic!("{other:?}"),
    }
    client.send(0, credit(0, 0, 1));
    client.effect(deliver(1, b"first"));
    client.effect(deliver(2, b"past the credit"));
    let transfers: Vec<Option<bool>> = client
        .performatives()
        .into_iter()
        .filter_map(|p| match p {
            Performative::Transfer { settled, .. } => Some(settled),
            _ => None,
        })
        .collect();
    assert_eq!(transfers, [Some(true)], "one reply, settled; the one past the credit dropped");
    client.send(0, credit(0, 1, 5));
    assert!(client.performatives().is_empty(), "a dropped reply does not come later");
    assert!(client.conn.take_commands().is_empty(), "no-ack: nothing is acked");
}
