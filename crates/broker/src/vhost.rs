//! A virtual host: its exchanges, the names of its queues and its policies.

use std::collections::HashMap;

use hourglass_wire::{FieldTable, ShortStr};

use crate::exchange::{Exchange, ExchangeKind, ExchangeSpec};
use crate::policy::Policies;
use crate::queue::QueueId;

#[derive(Debug)]
pub(crate) struct VHost {
    pub exchanges: HashMap<ShortStr, Exchange>,
    pub queues: HashMap<ShortStr, QueueId>,
    /// Policies and operator policies (semantics §6).
    pub policies: Policies,
    /// RabbitMQ's vhost limit `max-queues` (`None`: no limit), checked when queue.declare would
    /// create a queue; set by the management side (`Broker::set_vhost_max_queues`).
    pub max_queues: Option<u64>,
}

impl VHost {
    /// A vhost with the default exchange and the `amq.*` exchanges every RabbitMQ vhost has.
    pub fn new() -> Self {
        let mut vhost = VHost {
            exchanges: HashMap::new(),
            queues: HashMap::new(),
            policies: Policies::default(),
            max_queues: None,
        };
        let standard = [
            ("", ExchangeKind::Direct),
            ("amq.direct", ExchangeKind::Direct),
            ("amq.fanout", ExchangeKind::Fanout),
            ("amq.topic", ExchangeKind::Topic),
            ("amq.headers", ExchangeKind::Headers),
            ("amq.match", ExchangeKind::Headers),
            ("amq.rabbitmq.trace", ExchangeKind::Topic),
        ];
        for (name, kind) in standard {
            let spec = ExchangeSpec {
                name: ShortStr::from_static(name),
                kind,
                delayed: false,
                durable: true,
                auto_delete: false,
                // RabbitMQ's firehose exchange is internal: clients may bind to it, not publish.
                internal: name == "amq.rabbitmq.trace",
                arguments: FieldTable::new(),
            };
            vhost.exchanges.insert(spec.name.clone(), Exchange::new(spec));
        }
        vhost
    }

    /// The queue named `name`, by hash lookup (names longer than a short string are no queue's).
    pub fn queue_id(&self, name: &str) -> Option<QueueId> {
        let name = ShortStr::try_from(name).ok()?;
        self.queues.get(&name).copied()
    }
}

/// Every vhost by name, with what routing reads: exchanges, bindings, queue names, policies.
///
/// Reads go through the map (`Deref`). Every change goes through a method here (one that hands
/// out `&mut VHost`, or adds or removes a vhost), and is counted in [`VHosts::generation`]: a
/// route cached under one generation (`route_cache.rs`) is known stale at the next, with no
/// change site to remember the cache.
#[derive(Debug, Default)]
pub(crate) struct VHosts {
    by_name: HashMap<String, VHost>,
    generation: u64,
}

impl VHosts {
    /// The vhosts `names`, each new.
    pub fn with_names(names: &[String]) -> Self {
        VHosts { by_name: names.iter().map(|name| (name.clone(), VHost::new())).collect(), generation: 0 }
    }

    /// Changes so far (each `&mut VHost` handed out counts as one, whether or not it was used to
    /// change anything): any two reads under the same generation see the same vhosts.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// The vhost `name`, to change.
    pub fn get_mut(&mut self, name: &str) -> Option<&mut VHost> {
        self.generation += 1;
        self.by_name.get_mut(name)
    }

    /// The vhost `name`, made new if there is none, to change.
    pub fn get_or_insert(&mut self, name: &str) -> &mut VHost {
        self.generation += 1;
        self.by_name.entry(name.to_owned()).or_insert_with(VHost::new)
    }

    /// Adds (or replaces) the vhost `name`.
    pub fn insert(&mut self, name: String, vhost: VHost) {
        self.generation += 1;
        self.by_name.insert(name, vhost);
    }

    /// Removes the vhost `name`, with everything in it.
    pub fn remove(&mut self, name: &str) -> Option<VHost> {
        self.generation += 1;
        self.by_name.remove(name)
    }
}

impl std::ops::Deref for VHosts {
    type Target = HashMap<String, VHost>;

    fn deref(&self) -> &Self::Target {
        &self.by_name
    }
}
