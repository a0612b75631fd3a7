//! Exchanges and their bindings. Each exchange type's matching rule has its own file; this file
//! holds the exchange record, its bindings and the declare-time checks.

pub(crate) mod delayed;
mod direct;
mod fanout;
mod headers;
mod local_random;
mod topic;

use bytes::Bytes;
use hourglass_wire::{FieldTable, ShortStr};
use indexmap::IndexSet;

use crate::api::AmqpError;
use crate::errors;
use crate::message::Message;
use crate::message_stats::ExchangeCounters;
use crate::policy::Policy;
use crate::queue::QueueId;

pub(crate) use headers::validate_binding_arguments as validate_headers_binding;
pub(crate) use local_random::validate_binding as validate_local_random_binding;

/// The exchange types Hourglass routes with.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum ExchangeKind {
    Direct,
    Fanout,
    Topic,
    Headers,
    /// RabbitMQ 4.0's `x-local-random`: one bound queue per message, picked at random.
    LocalRandom,
}

impl ExchangeKind {
    pub fn parse(name: &[u8]) -> Option<ExchangeKind> {
        match name {
            b"direct" => Some(ExchangeKind::Direct),
            b"fanout" => Some(ExchangeKind::Fanout),
            b"topic" => Some(ExchangeKind::Topic),
            b"headers" => Some(ExchangeKind::Headers),
            b"x-local-random" => Some(ExchangeKind::LocalRandom),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            ExchangeKind::Direct => "direct",
            ExchangeKind::Fanout => "fanout",
            ExchangeKind::Topic => "topic",
            ExchangeKind::Headers => "headers",
            ExchangeKind::LocalRandom => local_random::TYPE_NAME,
        }
    }
}

/// What one exchange's bindings select for a message, on the stack for the usual few.
pub(crate) type Destinations = smallvec::SmallVec<[Destination; 4]>;

/// Where a binding leads.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Destination {
    Queue(QueueId),
    Exchange(ShortStr),
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Binding {
    pub destination: Destination,
    pub routing_key: ShortStr,
    pub arguments: FieldTable,
}

/// How an exchange was declared.
#[derive(Clone, Debug, PartialEq)]
pub struct ExchangeSpec {
    pub name: ShortStr,
    /// How the exchange routes (for a delayed exchange: its `x-delayed-type`).
    pub kind: ExchangeKind,
    /// An `x-delayed-message` exchange: messages wait in their queues for their `x-delay`.
    pub delayed: bool,
    pub durable: bool,
    pub auto_delete: bool,
    pub internal: bool,
    pub arguments: FieldTable,
}

impl ExchangeSpec {
    /// The type as declared: `x-delayed-message` or the routing type's name.
    pub fn type_name(&self) -> &'static str {
        if self.delayed {
            delayed::TYPE_NAME
        } else {
            self.kind.name()
        }
    }
}

#[derive(Debug)]
pub(crate) struct Exchange {
    pub spec: ExchangeSpec,
    /// Where unroutable messages go: the `alternate-exchange` argument, else the policy's.
    pub alternate: Option<ShortStr>,
    /// The policy and operator policy that apply (semantics §6), by name.
    pub policy: Option<String>,
    pub operator_policy: Option<String>,
    /// Bindings with this exchange as source, in the order they were made (a set: binding twice
    /// is one binding).
    bindings: IndexSet<Binding>,
    /// The bindings arranged for routing by key, for the exchange types that route by key.
    index: RouteIndex,
    /// Messages published to it and routed on (`message_stats.rs`).
    pub(crate) counters: std::sync::Arc<ExchangeCounters>,
}

/// What routing consults instead of testing every binding.
#[derive(Clone, Debug)]
enum RouteIndex {
    Direct(direct::DirectIndex),
    Topic(topic::TopicTrie),
    /// Fanout and headers exchanges look at every binding anyway.
    Bindings,
    /// A local random exchange picks one binding per message.
    Pick(local_random::Picker),
}

impl RouteIndex {
    fn for_exchange(spec: &ExchangeSpec) -> RouteIndex {
        match spec.kind {
            ExchangeKind::Direct => RouteIndex::Direct(Default::default()),
            ExchangeKind::Topic => RouteIndex::Topic(Default::default()),
            ExchangeKind::Fanout | ExchangeKind::Headers => RouteIndex::Bindings,
            ExchangeKind::LocalRandom => RouteIndex::Pick(local_random::Picker::seeded(&spec.name)),
        }
    }

    fn insert(&mut self, binding: &Binding) {
        match self {
            RouteIndex::Direct(index) => index.insert(&binding.routing_key, &binding.destination),
            RouteIndex::Topic(trie) => trie.insert(binding.routing_key.as_bytes(), &binding.destination),
            RouteIndex::Bindings | RouteIndex::Pick(_) => {}
        }
    }

    fn remove(&mut self, binding: &Binding) {
        match self {
            RouteIndex::Direct(index) => index.remove(&binding.routing_key, &binding.destination),
            RouteIndex::Topic(trie) => trie.remove(binding.routing_key.as_bytes(), &binding.destination),
            RouteIndex::Bindings | RouteIndex::Pick(_) => {}
        }
    }
}

impl Exchange {
    pub fn new(spec: ExchangeSpec) -> Self {
        let alternate = argument_alternate(&spec);
        let index = RouteIndex::for_exchange(&spec);
        Exchange {
            spec,
            alternate,
            policy: None,
            operator_policy: None,
            bindings: IndexSet::new(),
            index,
            counters: Default::default(),
        }
    }

    /// Takes the policies that now apply: the argument beats the policy for the alternate
    /// exchange (RabbitMQ's rabbit_policy:get_arg).
    pub(crate) fn apply_policies(&mut self, policy: Option<&Policy>, operator: Option<&Policy>) {
        self.alternate =
            argument_alternate(&self.spec).or_else(|| policy.and_then(|p| p.alternate_exchange.clone()));
        self.policy = policy.map(|p| p.spec.name.clone());
        self.operator_policy = operator.map(|p| p.spec.name.clone());
    }

    pub fn name(&self) -> &ShortStr {
        &self.spec.name
    }

    /// Adds a binding; binding twice is a no-op (AMQP 0-9-1 queue.bind is idempotent).
    pub fn bind(&mut self, binding: Binding) {
        if !self.bindings.contains(&binding) {
            self.index.insert(&binding);
            self.bindings.insert(binding);
        }
    }

    /// Removes a binding; returns whether it existed.
    pub fn unbind(&mut self, binding: &Binding) -> bool {
        let existed = self.bindings.shift_remove(binding);
        if existed {
            self.index.remove(binding);
        }
        existed
    }

    /// Removes every binding to a destination; returns how many there were.
    /// Removes every binding to `destination`; returns them.
    pub fn unbind_destination(&mut self, destination: &Destination) -> Vec<Binding> {
        let mut removed = Vec::new();
        let index = &mut self.index;
        self.bindings.retain(|b| {
            let keep = &b.destination != destination;
            if !keep {
                index.remove(b);
                removed.push(b.clone());
            }
            keep
        });
        removed
    }

    pub fn bindings(&self) -> &IndexSet<Binding> {
        &self.bindings
    }

    pub fn has_bindings(&self) -> bool {
        !self.bindings.is_empty()
    }

    /// Appends to `out` the destinations this exchange's own bindings select for `message` with its
    /// routing key or one of `extra_keys` (`CC`/`BCC`; duplicates possible, the caller
    /// de-duplicates across the whole route).
    pub fn route(&self, message: &Message, extra_keys: &[Bytes], out: &mut Destinations) {
        match (&self.index, self.spec.kind) {
            (RouteIndex::Direct(index), _) => {
                index.route(&message.routing_key, out);
                // A key over 255 octets equals no binding key.
                for key in extra_keys.iter().filter_map(|k| ShortStr::new(k.clone()).ok()) {
                    index.route(&key, out);
                }
            }
            (RouteIndex::Topic(trie), _) => {
                trie.route(message.routing_key.as_bytes(), out);
                for key in extra_keys {
                    trie.route(key, out);
                }
            }
            (RouteIndex::Bindings, ExchangeKind::Headers) => {
                headers::route(self.bindings.iter(), message.properties().headers().as_ref(), out)
            }
            (RouteIndex::Pick(picker), _) => local_random::route(&self.bindings, picker, out),
            (RouteIndex::Bindings, _) => fanout::route(self.bindings.iter(), out),
        }
    }

    /// Whether the queues it routes a message to depend on the message's routing keys alone (not
    /// on its headers, nor on a random pick), given the bindings.
    pub fn routes_by_key(&self) -> bool {
        matches!(self.spec.kind, ExchangeKind::Direct | ExchangeKind::Fanout | ExchangeKind::Topic)
    }

    /// Whether redeclaring with `spec` is equivalent; otherwise RabbitMQ's 406 naming the field.
    pub fn check_equivalent(&self, spec: &ExchangeSpec, vhost: &str) -> Result<(), AmqpError> {
        let current = &self.spec;
        let mismatch = |field: &str, received: &dyn std::fmt::Display, now: &dyn std::fmt::Display| {
            Err(errors::precondition_failed(format!(
                "inequivalent arg '{field}' for exchange '{}' in vhost '{vhost}': received '{received}' but current is '{now}'",
                current.name
            )))
        };
        if current.type_name() != spec.type_name() {
            return mismatch("type", &spec.type_name(), &current.type_name());
        }
        if current.kind != spec.kind {
            return mismatch("x-delayed-type", &spec.kind.name(), &current.kind.name());
        }
        if current.durable != spec.durable {
            return mismatch("durable", &spec.durable, &current.durable);
        }
        if current.auto_delete != spec.auto_delete {
            return mismatch("auto_delete", &spec.auto_delete, &current.auto_delete);
        }
        if current.internal != spec.internal {
            return mismatch("internal", &spec.internal, &current.internal);
        }
        let key = "alternate-exchange";
        if current.arguments.get(key) != spec.arguments.get(key) {
            return Err(errors::precondition_failed(format!(
                "inequivalent arg '{key}' for exchange '{}' in vhost '{vhost}': {}",
                current.name,
                errors::received_but_current(spec.arguments.get(key), current.arguments.get(key)),
            )));
        }
        Ok(())
    }
}

/// The `alternate-exchange` argument, when it is a string.
fn argument_alternate(spec: &ExchangeSpec) -> Option<ShortStr> {
    spec.arguments
        .get("alternate-exchange")
        .and_then(|v| v.as_bytes().and_then(|b| ShortStr::new(bytes::Bytes::copy_from_slice(b)).ok()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &str) -> ShortStr {
        ShortStr::try_from(v).unwrap()
    }

    fn exchange(kind: ExchangeKind) -> Exchange {
        Exchange::new(ExchangeSpec {
            name: s("x"),
            kind,
            delayed: false,
            durable: false,
            auto_delete: false,
            internal: false,
            arguments: FieldTable::new(),
        })
    }

    fn binding(queue: u64, key: &str) -> Binding {
        Binding {
            destination: Destination::Queue(QueueId(queue)),
            routing_key: s(key),
            arguments: FieldTable::new(),
        }
    }

    /// What the exchange's routing index selects for `key` (direct and topic exchanges).
    fn routed(exchange: &Exchange, key: &str) -> Vec<Destination> {
        let mut out = Destinations::new();
        match &exchange.index {
            RouteIndex::Direct(index) => index.route(&s(key), &mut out),
            RouteIndex::Topic(trie) => trie.route(key.as_bytes(), &mut out),
            RouteIndex::Bindings | RouteIndex::Pick(_) => {
                unreachable!("fanout, headers and local random route over the bindings")
            }
        }
        out.into_vec()
    }

    /// The routing index follows bind, idempotent rebind, unbind and unbinding a destination.
    #[test]
    fn routing_index_follows_bindings() {
        for kind in [ExchangeKind::Direct, ExchangeKind::Topic] {
            let mut x = exchange(kind);
            x.bind(binding(1, "k"));
            x.bind(binding(1, "k"));
            x.bind(binding(2, "k"));
            x.bind(binding(2, "other"));
            assert_eq!(x.bindings().len(), 3, "{kind:?}: binding twice is one binding");
            let mut hit = routed(&x, "k");
            hit.sort_by_key(|d| format!("{d:?}"));
            assert_eq!(hit, vec![Destination::Queue(QueueId(1)), Destination::Queue(QueueId(2))], "{kind:?}");
            assert!(x.unbind(&binding(1, "k")));
            assert!(!x.unbind(&binding(1, "k")), "{kind:?}: unbinding twice finds nothing");
            assert_eq!(routed(&x, "k"), vec![Destination::Queue(QueueId(2))], "{kind:?}");
            assert_eq!(x.unbind_destination(&Destination::Queue(QueueId(2))).len(), 2);
            assert!(routed(&x, "k").is_empty() && routed(&x, "other").is_empty(), "{kind:?}");
            assert!(!x.has_bindings());
        }
    }
}
