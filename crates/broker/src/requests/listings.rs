//! Listings read in slices (`admin/slices.rs`): a [`Listing`] names its keys and how a slice of
//! keys becomes rows; [`ListingKeys`] asks for the keys, [`ListingRows`] and [`KeyedRows`] for
//! one slice's rows, each in a job of its own.

use std::marker::PhantomData;

use super::{sealed::Sealed, Question};
use crate::admin::slices::{BindingKey, ConsumerKey, ExchangeKey, SliceKey};
use crate::admin::{
    BindingDetails, ChannelSummary, ConnectionSummary, ConsumerSummary, ExchangeDetails, QueueDetails,
};
use crate::api::{ChannelId, ConnectionId};
use crate::broker::Broker;
use crate::queue::{QueueId, QueueStats};
use crate::time::Timestamp;

/// A listing: its keys, and the rows of a slice of them (rows whose object went away are left
/// out).
pub trait Listing: Sealed + Send + 'static {
    type Key: SliceKey + Send + 'static;
    type Row: Send + 'static;
    fn keys(self, broker: &Broker) -> Vec<Self::Key>;
    fn rows(broker: &Broker, keys: &[Self::Key]) -> Vec<Self::Row>;
}

/// A listing's keys.
pub struct ListingKeys<L>(pub L);

impl<L: Listing> Sealed for ListingKeys<L> {}
impl<L: Listing> Question for ListingKeys<L> {
    type Answer = Vec<L::Key>;
    fn answer(self, broker: &Broker, _: Timestamp) -> Vec<L::Key> {
        self.0.keys(broker)
    }
}

/// The rows of a slice of a listing's keys.
pub struct ListingRows<L: Listing> {
    pub keys: Vec<L::Key>,
    listing: PhantomData<fn() -> L>,
}

impl<L: Listing> ListingRows<L> {
    pub fn of(keys: Vec<L::Key>) -> Self {
        ListingRows { keys, listing: PhantomData }
    }
}

impl<L: Listing> Sealed for ListingRows<L> {}
impl<L: Listing> Question for ListingRows<L> {
    type Answer = Vec<L::Row>;
    fn answer(self, broker: &Broker, _: Timestamp) -> Vec<L::Row> {
        L::rows(broker, &self.keys)
    }
}

/// The rows of a slice of a listing's keys, each beside its key.
pub struct KeyedRows<L: Listing> {
    pub keys: Vec<L::Key>,
    listing: PhantomData<fn() -> L>,
}

impl<L: Listing> KeyedRows<L> {
    pub fn of(keys: Vec<L::Key>) -> Self {
        KeyedRows { keys, listing: PhantomData }
    }
}

impl<L: Listing> Sealed for KeyedRows<L> {}
impl<L: Listing> Question for KeyedRows<L>
where
    L::Key: Copy,
{
    type Answer = Vec<(L::Key, L::Row)>;
    fn answer(self, broker: &Broker, _: Timestamp) -> Self::Answer {
        let of_key = |key: &L::Key| L::rows(broker, std::slice::from_ref(key)).pop().map(|row| (*key, row));
        self.keys.iter().filter_map(of_key).collect()
    }
}

/// The queues of one vhost or all, as the HTTP API lists them.
pub struct QueueListing {
    pub vhost: Option<String>,
}

impl Sealed for QueueListing {}
impl Listing for QueueListing {
    type Key = QueueId;
    type Row = QueueDetails;
    fn keys(self, broker: &Broker) -> Vec<QueueId> {
        broker.queue_keys(self.vhost.as_deref())
    }
    fn rows(broker: &Broker, keys: &[QueueId]) -> Vec<QueueDetails> {
        broker.queue_details(keys)
    }
}

/// The queues of one vhost or all, with their counts only.
pub struct QueueStatsListing {
    pub vhost: Option<String>,
}

impl Sealed for QueueStatsListing {}
impl Listing for QueueStatsListing {
    type Key = QueueId;
    type Row = QueueStats;
    fn keys(self, broker: &Broker) -> Vec<QueueId> {
        broker.queue_keys(self.vhost.as_deref())
    }
    fn rows(broker: &Broker, keys: &[QueueId]) -> Vec<QueueStats> {
        broker.queue_stats_of(keys)
    }
}

/// The exchanges of one vhost or all.
pub struct ExchangeListing {
    pub vhost: Option<String>,
}

impl Sealed for ExchangeListing {}
impl Listing for ExchangeListing {
    type Key = ExchangeKey;
    type Row = ExchangeDetails;
    fn keys(self, broker: &Broker) -> Vec<ExchangeKey> {
        broker.exchange_keys(self.vhost.as_deref())
    }
    fn rows(broker: &Broker, keys: &[ExchangeKey]) -> Vec<ExchangeDetails> {
        broker.exchange_details(keys)
    }
}

/// The bindings of one vhost or all.
pub struct BindingListing {
    pub vhost: Option<String>,
}

impl Sealed for BindingListing {}
impl Listing for BindingListing {
    type Key = BindingKey;
    type Row = BindingDetails;
    fn keys(self, broker: &Broker) -> Vec<BindingKey> {
        broker.binding_keys(self.vhost.as_deref())
    }
    fn rows(broker: &Broker, keys: &[BindingKey]) -> Vec<BindingDetails> {
        broker.binding_details(keys)
    }
}

/// The bindings whose source is exchange `source`.
pub struct BindingsFrom {
    pub vhost: String,
    pub source: String,
}

impl Sealed for BindingsFrom {}
impl Listing for BindingsFrom {
    type Key = BindingKey;
    type Row = BindingDetails;
    fn keys(self, broker: &Broker) -> Vec<BindingKey> {
        broker.binding_keys_from(&self.vhost, &self.source)
    }
    fn rows(broker: &Broker, keys: &[BindingKey]) -> Vec<BindingDetails> {
        broker.binding_details(keys)
    }
}

/// The open connections.
pub struct ConnectionListing;

impl Sealed for ConnectionListing {}
impl Listing for ConnectionListing {
    type Key = ConnectionId;
    type Row = ConnectionSummary;
    fn keys(self, broker: &Broker) -> Vec<ConnectionId> {
        broker.connection_keys()
    }
    fn rows(broker: &Broker, keys: &[ConnectionId]) -> Vec<ConnectionSummary> {
        broker.connection_summaries(keys)
    }
}

/// The open channels.
pub struct ChannelListing;

impl Sealed for ChannelListing {}
impl Listing for ChannelListing {
    type Key = (ConnectionId, ChannelId);
    type Row = ChannelSummary;
    fn keys(self, broker: &Broker) -> Vec<(ConnectionId, ChannelId)> {
        broker.channel_keys()
    }
    fn rows(broker: &Broker, keys: &[(ConnectionId, ChannelId)]) -> Vec<ChannelSummary> {
        broker.channel_summaries(keys)
    }
}

/// The consumers.
pub struct ConsumerListing;

impl Sealed for ConsumerListing {}
impl Listing for ConsumerListing {
    type Key = ConsumerKey;
    type Row = ConsumerSummary;
    fn keys(self, broker: &Broker) -> Vec<ConsumerKey> {
        broker.consumer_keys()
    }
    fn rows(broker: &Broker, keys: &[ConsumerKey]) -> Vec<ConsumerSummary> {
        broker.consumer_summaries(keys)
    }
}
