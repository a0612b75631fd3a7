//! Hourglass broker core: vhosts, exchanges, bindings, queues, consumers and their timers.
//!
//! Sans-IO: no sockets, files, tasks or clocks. Drive it with [`Broker::handle_command`] and
//! [`Broker::handle_timeout`], passing `now`; collect what it wants done with
//! [`Broker::poll_effect`]; sleep until [`Broker::next_deadline`].

pub mod admin;
mod annotate;
pub mod api;
mod broker;
pub mod calendar;
mod channel;
pub mod churn;
mod connections;
pub mod consumer_timeout;
mod dead_letter_reads;
mod dead_lettering;
mod dispatch;
mod enqueue;
mod entry_ids;
mod errors;
pub mod exchange;
mod firehose;
pub mod message;
mod message_reads;
pub mod message_stats;
mod methods;
mod naming;
pub mod notices;
mod outbox;
mod overdue_release;
pub mod permissions;
pub mod persist;
pub mod policy;
mod published;
pub mod queue;
mod queues;
pub mod receipts;
mod redelivery;
mod reply_to;
pub mod requests;
mod route_cache;
mod routing;
mod sender_selected;
mod spill_reads;
pub mod table_limits;
pub mod time;
mod timers;
mod vhost;
mod waiting_gets;

pub use api::{
    AmqpError, Answer, ChannelId, ClientCapabilities, Command, ConnectionId, ConnectionInfo, Effect,
    LoginInfo, Modification, Publish, Query, QueueAnswer, AMQP_0_9_1, AMQP_1_0,
};
pub use broker::{Broker, BrokerConfig};
pub use message::Message;
pub use notices::{Notice, Ticket};
pub use permissions::{Access, InvalidPattern, Permissions, Resource};
pub use persist::{
    composite_key, decode_catalog, decode_definitions, CatalogChange, DefinitionNotStored, Definitions,
    MessageSource, OrphanedQueue, QueueState, RecordLocation, RestoreReport, SequencedOp, StatePart, StoreOp,
    StoredBody, StoredLocation, StoredMessage, DEFINITIONS_SCHEMA_VERSION, DEFINITIONS_SCHEMA_VERSION_OLDEST,
    IDENTITY_SCOPE, ORPHANED_QUEUE_PREFIX, ORPHANED_VHOST,
};
pub use queue::PagingLimits;
pub use redelivery::VisibilityError;
pub use time::Timestamp;
