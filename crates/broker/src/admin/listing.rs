//! Read-only views for the management API and metrics: connections, channels, consumers, queues
//! and exchanges with their arguments and policies, bindings with theirs. Each listing has its
//! keys (`*_keys`) and its rows for some of them, so the management side can build it in slices
//! between other work (`slices.rs`); `list_*` builds a whole listing at once, in its order.

use std::ops::Range;

use hourglass_wire::{FieldTable, ShortStr};

use super::slices::{self, BindingKey, ConsumerKey, ExchangeKey};
use super::ADMIN_CONNECTION;
use crate::api::{ChannelId, ConnectionId, ConnectionInfo};
use crate::broker::Broker;
use crate::channel::{Mode, Settlement};
use crate::exchange::{Binding, Destination, Exchange, ExchangeSpec};
use crate::message_stats::{ExchangeStats, MessageStats};
use crate::policy::{merge, Policies, PolicyKind};
use crate::queue::{QueueArgs, QueueId, QueueStats};
use crate::vhost::VHost;

/// A client connection as listings show it.
#[derive(Clone, Debug)]
pub struct ConnectionSummary {
    pub id: ConnectionId,
    pub info: ConnectionInfo,
    pub channels: usize,
}

/// An open channel.
#[derive(Clone, Debug)]
pub struct ChannelSummary {
    pub conn: ConnectionId,
    pub channel: ChannelId,
    pub user: String,
    pub vhost: String,
    pub peer: String,
    /// The local address of the connection's socket.
    pub local: String,
    /// The connection came over TLS (it is named after the AMQPS listener).
    pub tls: bool,
    pub consumers: usize,
    /// Deliveries to this channel's consumers not yet settled (basic.get deliveries not counted).
    pub messages_unacknowledged: u32,
    /// Every delivery on the channel not yet settled, basic.get ones too (RabbitMQ's
    /// `messages_unacknowledged` in its Prometheus channel metrics).
    pub deliveries_unacked: u32,
    /// basic.qos prefetch-count, global=false.
    pub prefetch_count: u16,
    /// basic.qos prefetch-count, global=true.
    pub global_prefetch_count: u16,
    pub confirm: bool,
    pub transactional: bool,
    /// Publisher confirms not yet sent (waiting for the store).
    pub messages_unconfirmed: u32,
    /// Publishes held in an open transaction.
    pub messages_uncommitted: u32,
    /// basic.acks held in an open transaction.
    pub acks_uncommitted: u32,
    /// What was published, delivered and acked on the channel.
    pub message_stats: MessageStats,
}

/// A consumer on a queue.
#[derive(Clone, Debug)]
pub struct ConsumerSummary {
    pub vhost: String,
    pub queue: String,
    pub consumer_tag: String,
    pub conn: ConnectionId,
    pub channel: ChannelId,
    pub peer: String,
    /// The local address of the connection's socket.
    pub local: String,
    /// The connection came over TLS (it is named after the AMQPS listener).
    pub tls: bool,
    pub user: String,
    pub ack_required: bool,
    pub exclusive: bool,
    pub prefetch_count: u16,
    /// The consumer timeout its deliveries run under (ms); `None`: none (only a visibility
    /// timeout, or the broker's default switched off).
    pub consumer_timeout_ms: Option<u64>,
}

/// A queue's statistics with its declaration arguments and policies.
#[derive(Clone, Debug)]
pub struct QueueDetails {
    pub stats: QueueStats,
    pub arguments: FieldTable,
    pub policies: PolicyNames,
    /// The settings it runs with: arguments and policies merged (semantics §6), defaults applied.
    pub settings: QueueArgs,
    /// The consumer timeout its deliveries run under unless a consumer sets its own (ms).
    pub consumer_timeout_ms: Option<u64>,
}

/// The queues of one vhost by name ([`Broker::queue_names`]).
#[derive(Clone, Debug)]
pub struct QueueNames {
    pub vhost: String,
    pub queues: Vec<(ShortStr, QueueId)>,
}

/// An exchange's declaration with its policies.
#[derive(Clone, Debug)]
pub struct ExchangeDetails {
    pub vhost: String,
    pub spec: ExchangeSpec,
    pub policies: PolicyNames,
    /// Messages published to it and routed on.
    pub message_stats: ExchangeStats,
}

/// The policies that apply to a queue or exchange (semantics §6), as RabbitMQ's listings show them.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PolicyNames {
    pub policy: Option<String>,
    pub operator_policy: Option<String>,
    /// Both definitions merged (`merge::effective_definition`); empty when none applies.
    pub effective_definition: FieldTable,
}

impl PolicyNames {
    fn of(policies: &Policies, policy: &Option<String>, operator_policy: &Option<String>) -> Self {
        let effective_definition = merge::effective_definition(
            policies.definition(PolicyKind::User, policy.as_ref()),
            policies.definition(PolicyKind::Operator, operator_policy.as_ref()),
        );
        PolicyNames { policy: policy.clone(), operator_policy: operator_policy.clone(), effective_definition }
    }
}

/// A binding with its arguments; the default exchange's implicit bindings are included.
#[derive(Clone, Debug)]
pub struct BindingDetails {
    pub vhost: String,
    pub source: String,
    /// `queue` or `exchange`.
    pub destination_type: &'static str,
    pub destination: String,
    pub routing_key: String,
    pub arguments: FieldTable,
}

impl Broker {
    /// Every client connection, by id.
    pub fn list_connections(&self) -> Vec<ConnectionSummary> {
        let mut all = self.connection_summaries(&self.connection_keys());
        sort_connections(&mut all);
        all
    }

    /// The keys of [`Self::connection_summaries`]: every client connection.
    pub fn connection_keys(&self) -> Vec<ConnectionId> {
        self.connections.iter().map(|(id, _)| *id).filter(|id| *id != ADMIN_CONNECTION).collect()
    }

    /// The connections of `keys` that are still open.
    pub fn connection_summaries(&self, keys: &[ConnectionId]) -> Vec<ConnectionSummary> {
        keys.iter()
            .filter_map(|id| {
                let c = self.connections.get(id)?;
                Some(ConnectionSummary { id: *id, info: c.info.clone(), channels: c.channel_count() })
            })
            .collect()
    }

    /// Every open channel, by connection and number.
    pub fn list_channels(&self) -> Vec<ChannelSummary> {
        let mut all = self.channel_summaries(&self.channel_keys());
        sort_channels(&mut all);
        all
    }

    /// The keys of [`Self::channel_summaries`]: every client channel.
    pub fn channel_keys(&self) -> Vec<(ConnectionId, ChannelId)> {
        self.connections
            .channels()
            .map(|(key, _)| *key)
            .filter(|(conn, _)| *conn != ADMIN_CONNECTION)
            .collect()
    }

    /// The channels of `keys` that are still open.
    pub fn channel_summaries(&self, keys: &[(ConnectionId, ChannelId)]) -> Vec<ChannelSummary> {
        keys.iter().filter_map(|key| self.channel_summary(*key)).collect()
    }

    fn channel_summary(&self, (conn, number): (ConnectionId, ChannelId)) -> Option<ChannelSummary> {
        let channel = self.connections.channel(conn, number)?;
        let info = &self.connections.get(&conn)?.info;
        let (messages_uncommitted, acks_uncommitted) = match &channel.mode {
            Mode::Tx(tx) => (
                tx.publishes.len() as u32,
                tx.settlements.iter().filter(|(_, s)| *s == Settlement::Ack).count() as u32,
            ),
            _ => (0, 0),
        };
        Some(ChannelSummary {
            conn,
            channel: number,
            user: info.user.clone(),
            vhost: info.vhost.clone(),
            peer: info.peer.clone(),
            local: info.local.clone(),
            tls: info.login.tls,
            consumers: channel.consumers.len(),
            messages_unacknowledged: channel.consumer_unacked,
            deliveries_unacked: channel.unacked_count() as u32,
            prefetch_count: channel.consumer_prefetch,
            global_prefetch_count: channel.channel_prefetch,
            confirm: matches!(channel.mode, Mode::Confirm { .. }),
            transactional: matches!(channel.mode, Mode::Tx(_)),
            messages_unconfirmed: self.unconfirmed(conn, number),
            messages_uncommitted,
            acks_uncommitted,
            message_stats: channel.stats,
        })
    }

    /// Every consumer, by vhost, queue and tag.
    pub fn list_consumers(&self) -> Vec<ConsumerSummary> {
        let mut all = self.consumer_summaries(&self.consumer_keys());
        sort_consumers(&mut all);
        all
    }

    /// The keys of [`Self::consumer_summaries`]: the consumers of every queue that has some.
    pub fn consumer_keys(&self) -> Vec<ConsumerKey> {
        let mut keys = Vec::new();
        for (id, queue) in self.queues.iter() {
            keys.extend(
                slices::ranges(queue.consumers.count()).map(|range| ConsumerKey { queue: *id, range }),
            );
        }
        keys
    }

    /// The consumers `keys` name, of queues still there.
    pub fn consumer_summaries(&self, keys: &[ConsumerKey]) -> Vec<ConsumerSummary> {
        let mut all = Vec::new();
        for key in keys {
            let Some(queue) = self.queues.get(&key.queue) else { continue };
            for consumer in key.range.clone().filter_map(|at| queue.consumers.get(at)) {
                let Some(connection) = self.connections.get(&consumer.conn) else { continue };
                all.push(ConsumerSummary {
                    vhost: queue.vhost.clone(),
                    queue: queue.name().as_str().into_owned(),
                    consumer_tag: consumer.tag.as_str().into_owned(),
                    conn: consumer.conn,
                    channel: consumer.channel,
                    peer: connection.info.peer.clone(),
                    local: connection.info.local.clone(),
                    tls: connection.info.login.tls,
                    user: connection.info.user.clone(),
                    ack_required: !consumer.no_ack,
                    exclusive: consumer.exclusive,
                    prefetch_count: consumer.prefetch_count,
                    consumer_timeout_ms: self.default_timeouts.of_consumer(consumer, &queue.args),
                });
            }
        }
        all
    }

    /// Every queue with its arguments and policies, sorted by vhost and name.
    pub fn list_queue_details(&self) -> Vec<QueueDetails> {
        let mut all = self.queue_details(&self.queue_keys(None));
        sort_queues(&mut all);
        all
    }

    /// The keys of [`Self::queue_details`]: every queue of `vhost`, of all vhosts without one.
    pub fn queue_keys(&self, vhost: Option<&str>) -> Vec<QueueId> {
        match vhost {
            None => self.queues.keys().copied().collect(),
            Some(vhost) => {
                self.vhosts.get(vhost).map(|v| v.queues.values().copied().collect()).unwrap_or_default()
            }
        }
    }

    /// The names of every queue of `vhost` (all vhosts without one), by vhost and in no order:
    /// what a listing sorts, filters and pages by before it asks for rows (issue 22: holding
    /// every row of 100,000 queues to sort them cost 2.2 KB per queue). A clone of a name is a
    /// reference count, so this is as cheap as [`Self::queue_keys`].
    pub fn queue_names(&self, vhost: Option<&str>) -> Vec<QueueNames> {
        self.vhosts_in(vhost)
            .map(|(name, v)| QueueNames {
                vhost: name.clone(),
                queues: v.queues.iter().map(|(queue, id)| (queue.clone(), *id)).collect(),
            })
            .collect()
    }

    /// The queues of `keys` still there, with their arguments and policies: a lookup per queue
    /// (issue #12, finding 7: a name lookup per queue over all of them made this quadratic and
    /// held the broker task for 37 s at 100,000 queues). The rows are compact (no JSON): the
    /// management side sorts, filters and pages them off the broker task.
    pub fn queue_details(&self, keys: &[QueueId]) -> Vec<QueueDetails> {
        keys.iter()
            .filter_map(|id| {
                let queue = self.queues.get(id)?;
                Some(QueueDetails {
                    stats: QueueStats::of(queue),
                    arguments: queue.spec.arguments.clone(),
                    policies: self
                        .vhosts
                        .get(&queue.vhost)
                        .map(|v| PolicyNames::of(&v.policies, &queue.policy, &queue.operator_policy))
                        .unwrap_or_default(),
                    settings: queue.args.clone(),
                    consumer_timeout_ms: self.default_timeouts.of_queue(&queue.args),
                })
            })
            .collect()
    }

    /// The queue `name` of `vhost`, if there is one.
    pub fn queue_details_named(&self, vhost: &str, name: &str) -> Option<QueueDetails> {
        let id = self.vhosts.get(vhost)?.queue_id(name)?;
        self.queue_details(&[id]).pop()
    }

    /// Every exchange of a vhost with its policies, sorted by name.
    pub fn list_exchange_details(&self, vhost: &str) -> Vec<ExchangeDetails> {
        let mut all = self.exchange_details(&self.exchange_keys(Some(vhost)));
        sort_exchanges(&mut all);
        all
    }

    /// The keys of [`Self::exchange_details`]: every exchange of `vhost`, of all vhosts without one.
    pub fn exchange_keys(&self, vhost: Option<&str>) -> Vec<ExchangeKey> {
        let mut keys = Vec::new();
        for (name, v) in self.vhosts_in(vhost) {
            keys.extend(v.exchanges.keys().map(|x| ExchangeKey { vhost: name.clone(), name: x.clone() }));
        }
        keys
    }

    /// The exchanges of `keys` still there, with their policies.
    pub fn exchange_details(&self, keys: &[ExchangeKey]) -> Vec<ExchangeDetails> {
        keys.iter()
            .filter_map(|key| {
                let v = self.vhosts.get(&key.vhost)?;
                let x = v.exchanges.get(&key.name)?;
                Some(ExchangeDetails {
                    vhost: key.vhost.clone(),
                    spec: x.spec.clone(),
                    policies: PolicyNames::of(&v.policies, &x.policy, &x.operator_policy),
                    message_stats: x.counters.snapshot(),
                })
            })
            .collect()
    }

    /// How many bindings each exchange is the source of (the default exchange: one per queue of
    /// its vhost), without building them: a look at each exchange, for Prometheus' counts.
    pub fn binding_counts(&self) -> Vec<(ExchangeKey, usize)> {
        let mut out = Vec::new();
        for (vhost, v) in self.vhosts.iter() {
            for (name, exchange) in &v.exchanges {
                let count = if name.is_empty() { v.queues.len() } else { exchange.bindings().len() };
                out.push((ExchangeKey { vhost: vhost.clone(), name: name.clone() }, count));
            }
        }
        out
    }

    /// The vhost named `only`, every vhost without a name.
    fn vhosts_in<'b>(
        &'b self,
        only: Option<&'b str>,
    ) -> Box<dyn Iterator<Item = (&'b String, &'b VHost)> + 'b> {
        match only {
            None => Box::new(self.vhosts.iter()),
            Some(only) => Box::new(self.vhosts.get_key_value(only).into_iter()),
        }
    }

    /// Every binding of a vhost: first the default exchange's implicit one per queue (as RabbitMQ
    /// lists them), then the declared ones by source exchange.
    pub fn list_binding_details(&self, vhost: &str) -> Vec<BindingDetails> {
        let mut all = self.binding_details(&self.binding_keys(Some(vhost)));
        sort_bindings(&mut all);
        all
    }

    /// The keys of [`Self::binding_details`]: every binding of `vhost`, of all vhosts without one.
    pub fn binding_keys(&self, vhost: Option<&str>) -> Vec<BindingKey> {
        let mut keys = Vec::new();
        for (_, v) in self.vhosts_in(vhost) {
            keys.extend(v.queues.values().map(|id| BindingKey::Default(*id)));
        }
        keys.extend(self.declared_binding_keys(vhost));
        keys
    }

    /// The keys of every declared binding (all but the default exchange's implicit ones) of
    /// `vhost`, of all vhosts without one: ranges of each exchange's bindings, in their order
    /// within an exchange, the exchanges in no order.
    pub fn declared_binding_keys(&self, vhost: Option<&str>) -> Vec<BindingKey> {
        let mut keys = Vec::new();
        for (name, v) in self.vhosts_in(vhost) {
            for exchange in v.exchanges.values() {
                keys.extend(slices::ranges(exchange.bindings().len()).map(|range| BindingKey::Declared {
                    exchange: ExchangeKey { vhost: name.clone(), name: exchange.name().clone() },
                    range,
                }));
            }
        }
        keys
    }

    /// The keys of the bindings whose source is exchange `source` of `vhost` (`""`: the
    /// default exchange, whose implicit bindings are one per queue), in their order.
    pub fn binding_keys_from(&self, vhost: &str, source: &str) -> Vec<BindingKey> {
        let Some(v) = self.vhosts.get(vhost) else { return Vec::new() };
        let mut keys: Vec<BindingKey> = Vec::new();
        if source.is_empty() {
            let mut queues: Vec<(&ShortStr, QueueId)> =
                v.queues.iter().map(|(name, id)| (name, *id)).collect();
            queues.sort_unstable();
            keys.extend(queues.into_iter().map(|(_, id)| BindingKey::Default(id)));
        }
        let Some(exchange) = ShortStr::try_from(source).ok().and_then(|name| v.exchanges.get(&name)) else {
            return keys;
        };
        keys.extend(slices::ranges(exchange.bindings().len()).map(|range| BindingKey::Declared {
            exchange: ExchangeKey { vhost: vhost.to_owned(), name: exchange.name().clone() },
            range,
        }));
        keys
    }

    /// The bindings whose destination is the queue or exchange `destination` of `vhost`, in the
    /// listing's order: a queue's implicit binding to the default exchange first, then by
    /// source exchange. One pass over the vhost's declared bindings, no row built for others
    /// (a queue's page asked for every binding of the vhost before: 200,000 rows at 100,000
    /// queues).
    pub fn bindings_to(
        &self,
        vhost: &str,
        destination_is_queue: bool,
        destination: &str,
    ) -> Vec<BindingDetails> {
        let Some(v) = self.vhosts.get(vhost) else { return Vec::new() };
        let Ok(name) = ShortStr::try_from(destination) else { return Vec::new() };
        let wanted = if destination_is_queue {
            match v.queues.get(&name) {
                Some(id) => Destination::Queue(*id),
                None => return Vec::new(),
            }
        } else {
            Destination::Exchange(name)
        };
        let mut out = Vec::new();
        if let Destination::Queue(id) = wanted {
            self.binding_details_into(&BindingKey::Default(id), &mut out);
        }
        let mut sources: Vec<&Exchange> = v.exchanges.values().collect();
        sources.sort_unstable_by(|a, b| a.name().cmp(b.name()));
        for exchange in sources {
            let to_it = exchange.bindings().iter().filter(|b| b.destination == wanted);
            out.extend(to_it.filter_map(|binding| self.binding_row(vhost, exchange, binding)));
        }
        out
    }

    /// The bindings `keys` name, of queues and exchanges still there.
    pub fn binding_details(&self, keys: &[BindingKey]) -> Vec<BindingDetails> {
        let mut out = Vec::new();
        for key in keys {
            self.binding_details_into(key, &mut out);
        }
        out
    }

    fn binding_details_into(&self, key: &BindingKey, out: &mut Vec<BindingDetails>) {
        match key {
            BindingKey::Default(id) => {
                let Some(queue) = self.queues.get(id) else { return };
                let name = queue.name().as_str().into_owned();
                out.push(BindingDetails {
                    vhost: queue.vhost.clone(),
                    source: String::new(),
                    destination_type: "queue",
                    destination: name.clone(),
                    routing_key: name,
                    arguments: FieldTable::new(),
                });
            }
            BindingKey::Declared { exchange, range } => self.declared_bindings(exchange, range, out),
        }
    }

    fn declared_bindings(&self, key: &ExchangeKey, range: &Range<usize>, out: &mut Vec<BindingDetails>) {
        let Some(exchange) = self.vhosts.get(&key.vhost).and_then(|v| v.exchanges.get(&key.name)) else {
            return;
        };
        let Some(bindings) = exchange.bindings().get_range(range.clone()) else { return };
        out.extend(bindings.iter().filter_map(|binding| self.binding_row(&key.vhost, exchange, binding)));
    }

    /// One declared binding of `exchange` as a row; `None` when its queue has gone.
    fn binding_row(&self, vhost: &str, exchange: &Exchange, binding: &Binding) -> Option<BindingDetails> {
        let (destination_type, destination) = match &binding.destination {
            Destination::Queue(id) => ("queue", self.queues.get(id)?.name().as_str().into_owned()),
            Destination::Exchange(name) => ("exchange", name.as_str().into_owned()),
        };
        Some(BindingDetails {
            vhost: vhost.to_owned(),
            source: exchange.name().as_str().into_owned(),
            destination_type,
            destination,
            routing_key: binding.routing_key.as_str().into_owned(),
            arguments: binding.arguments.clone(),
        })
    }
}

/// Connections in their listing's order: by id.
pub fn sort_connections(rows: &mut [ConnectionSummary]) {
    rows.sort_unstable_by_key(|c| c.id);
}

/// Channels in their listing's order: by connection and number.
pub fn sort_channels(rows: &mut [ChannelSummary]) {
    rows.sort_unstable_by_key(|c| (c.conn, c.channel));
}

/// Consumers in their listing's order: by vhost, queue and tag.
pub fn sort_consumers(rows: &mut [ConsumerSummary]) {
    rows.sort_by(|a, b| (&a.vhost, &a.queue, &a.consumer_tag).cmp(&(&b.vhost, &b.queue, &b.consumer_tag)));
}

/// Queues in their listing's order: by vhost and name.
pub fn sort_queues(rows: &mut [QueueDetails]) {
    rows.sort_unstable_by(|a, b| (&a.stats.vhost, &a.stats.name).cmp(&(&b.stats.vhost, &b.stats.name)));
}

/// Exchanges in their listing's order: by vhost and name.
pub fn sort_exchanges(rows: &mut [ExchangeDetails]) {
    rows.sort_unstable_by(|a, b| (&a.vhost, &a.spec.name).cmp(&(&b.vhost, &b.spec.name)));
}

/// Bindings in their listing's order: by vhost, the default exchange's implicit ones first by
/// queue name, then the declared ones by source exchange, each exchange's in the order they were
/// made (a stable sort over rows that came in that order).
pub fn sort_bindings(rows: &mut [BindingDetails]) {
    fn implicit_name(b: &BindingDetails) -> &str {
        if b.source.is_empty() {
            &b.destination
        } else {
            ""
        }
    }
    rows.sort_by(|a, b| {
        (&a.vhost, &a.source, implicit_name(a)).cmp(&(&b.vhost, &b.source, implicit_name(b)))
    });
}

#[cfg(test)]
mod tests {
    use hourglass_wire::{FieldValue, QueueDeclare, ShortStr};

    use crate::time::Timestamp;
    use crate::Broker;

    /// Every queue is listed once, in (vhost, name) order, with its own arguments — across vhosts
    /// with queues of the same name (the single pass that replaced a name lookup per queue).
    #[test]
    fn queue_details_pair_each_queue_with_its_own_arguments() {
        let mut broker = Broker::new(crate::BrokerConfig::default());
        assert!(broker.add_vhost("v"));
        for (vhost, name, max_length) in [("v", "b", 1), ("/", "b", 2), ("v", "a", 3), ("/", "c", 4)] {
            let arguments =
                hourglass_wire::FieldTable::new().with_entry("x-max-length", FieldValue::I32(max_length));
            let declare =
                QueueDeclare { queue: ShortStr::try_from(name).unwrap(), arguments, ..Default::default() };
            broker.with_admin_channel("guest", vhost, Timestamp::ZERO, |ch| ch.call(declare)).unwrap();
        }
        let listed: Vec<(String, String, Option<i64>)> = broker
            .list_queue_details()
            .iter()
            .map(|q| {
                let max_length = q.arguments.get("x-max-length").and_then(|v| v.as_i64());
                (q.stats.vhost.clone(), q.stats.name.clone(), max_length)
            })
            .collect();
        let expected = [("/", "b", 2), ("/", "c", 4), ("v", "a", 3), ("v", "b", 1)]
            .map(|(v, n, m)| (v.to_owned(), n.to_owned(), Some(m)));
        assert_eq!(listed, expected);
    }

    /// A row whose queue went away between the listing's keys and its slice is left out; the
    /// others are built, in the keys' order.
    #[test]
    fn a_queue_deleted_after_its_key_is_left_out() {
        let mut broker = Broker::new(crate::BrokerConfig::default());
        for name in ["a", "b", "c"] {
            let declare = QueueDeclare { queue: ShortStr::try_from(name).unwrap(), ..Default::default() };
            broker.with_admin_channel("guest", "/", Timestamp::ZERO, |ch| ch.call(declare)).unwrap();
        }
        let mut keys = broker.queue_keys(Some("/"));
        keys.sort();
        let delete = hourglass_wire::QueueDelete { queue: ShortStr::from_static("b"), ..Default::default() };
        broker.with_admin_channel("guest", "/", Timestamp::ZERO, |ch| ch.call(delete)).unwrap();
        let names: Vec<String> = broker.queue_details(&keys).into_iter().map(|q| q.stats.name).collect();
        assert_eq!(names, ["a", "c"]);
    }
}
