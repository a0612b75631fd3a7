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
