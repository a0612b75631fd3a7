//! Message deduplication (semantics §8), LavinMQ's and the rabbitmq-message-deduplication
//! plugin's interface: a queue declared with `x-message-deduplication` keeps the ids it has taken
//! (the value of the message header `x-deduplication-header`, or the header that
//! `x-deduplication-header` names on the queue) and drops a message whose id it holds. An id is
//! held for `x-cache-ttl` ms (a message's own `x-cache-ttl` header beats it; neither: until it is
//! pushed out), and the queue holds at most `x-cache-size` ids, the oldest going first. SQS FIFO
//! queues are such queues, with SQS's 5-minute interval.
//!
//! What a client controls is bounded (issue 37, finding 6: 1M ids took 370 MB, `x-cache-size`
//! allowed 10M a queue, and ids whose interval had passed were kept until pushed out): a queue
//! holds at most [`CACHE_SIZE_MAX`] ids, ids whose interval has passed are forgotten as new ones
//! come, and all queues of the node together hold at most [`NODE_IDS_MAX`]: once that many are
//! held, a queue trades its own oldest id for each new one instead of growing.

use std::collections::{HashMap, VecDeque};

use hourglass_wire::{FieldTable, FieldValue, ShortStr};

use crate::message::Message;
use crate::time::Timestamp;

/// The header a message's deduplication id is read from unless the queue names another.
pub const DEFAULT_HEADER: &str = "x-deduplication-header";
/// The ids a queue holds unless `x-cache-size` says otherwise (LavinMQ's default).
pub const DEFAULT_CACHE_SIZE: u64 = 128;
/// The most ids `x-cache-size` may ask a queue to hold: a bound on its memory (about 390 MB of
/// 64-byte ids), ten times an SQS FIFO queue's.
pub const CACHE_SIZE_MAX: u64 = 1_000_000;
/// The most ids all queues of the node hold together: twice [`CACHE_SIZE_MAX`], so a few busy
/// deduplicating queues fit, and no one with configure permission can take the node's memory
/// with queues of them.
pub const NODE_IDS_MAX: usize = 2_000_000;
/// Ids longer than this are held as their SHA-256 digest: a bound on what one id costs.
const KEY_BYTES_MAX: usize = 64;

/// A queue's deduplication settings (`QueueArgs::deduplication`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DedupSpec {
    /// `x-cache-size`: ids held at most.
    pub cache_size: u64,
    /// `x-cache-ttl`: how long an id is held (ms); `None`: until pushed out by newer ones.
    pub cache_ttl_ms: Option<u64>,
    /// `x-deduplication-header`: the header holding a message's id.
    pub header: String,
}

impl Default for DedupSpec {
    fn default() -> Self {
        DedupSpec { cache_size: DEFAULT_CACHE_SIZE, cache_ttl_ms: None, header: DEFAULT_HEADER.to_owned() }
    }
}

impl DedupSpec {
    /// A message's deduplication id: its header's value when that is a string, a byte array or
    /// an integer (other types, or no header: the message is not deduplicated).
    pub fn key_of(&self, headers: Option<&FieldTable>) -> Option<Vec<u8>> {
        let value = headers?.get(&self.header)?;
        let mut key = match &value {
            FieldValue::LongStr(_) | FieldValue::ByteArray(_) => {
                let mut key = vec![b'S'];
                key.extend_from_slice(value.as_bytes()?);
                key
            }
            other => {
                let mut key = vec![b'l'];
                key.extend_from_slice(&other.as_i64()?.to_be_bytes());
                key
            }
        };
        if key.len() > KEY_BYTES_MAX {
            let digest = ring::digest::digest(&ring::digest::SHA256, &key);
            key = [b"#".as_slice(), digest.as_ref()].concat();
        }
        Some(key)
    }

    /// What this queue holds of `message` if it takes it: its id and how long to hold it
    /// (`None`: the message has no id and is never a duplicate). The headers are read once.
    pub(crate) fn held_id_of(&self, message: &Message) -> Option<HeldId> {
        let headers = message.properties().headers();
        let key = self.key_of(headers.as_ref())?;
        Some(HeldId { key, ttl_ms: self.ttl_of(headers.as_ref()), cache_size: self.cache_size })
    }

    /// How long a message's id is held: its own `x-cache-ttl` header (a non-negative integer),
    /// else the queue's.
    pub fn ttl_of(&self, headers: Option<&FieldTable>) -> Option<u64> {
        let own = headers.and_then(|h| h.get("x-cache-ttl")).and_then(|v| v.as_i64());
        own.and_then(|ms| u64::try_from(ms).ok()).or(self.cache_ttl_ms)
    }
}

/// A message's deduplication id as its queue would hold it.
#[derive(Debug)]
pub(crate) struct HeldId {
    key: Vec<u8>,
    ttl_ms: Option<u64>,
    cache_size: u64,
}

#[cfg(test)]
impl HeldId {
    /// An id held for good, in a cache of 100.
    pub(crate) fn for_test(key: &[u8]) -> Self {
        HeldId { key: key.to_vec(), ttl_ms: None, cache_size: 100 }
    }
}

/// How many ids all queues of the node hold (the sum of their caches' sizes, kept by
/// [`DedupCache::hold`] and given back by [`NodeDedupIds::release`] when a queue goes).
#[derive(Debug, Default)]
pub(crate) struct NodeDedupIds {
    held: usize,
}

impl NodeDedupIds {
    /// Ids more the node may hold.
    fn room(&self) -> usize {
        NODE_IDS_MAX.saturating_sub(self.held)
    }

    /// A queue's `count` ids are gone with it.
    pub(crate) fn release(&mut self, count: usize) {
        self.held = self.held.saturating_sub(count);
    }

    /// Ids held in all.
    #[cfg(test)]
    pub(crate) fn held(&self) -> usize {
        self.held
    }
}

/// The ids a queue holds now.
#[derive(Debug, Default)]
pub(crate) struct DedupCache {
    held: HashMap<Vec<u8>, Held>,
    /// Ids in the order they were taken, with the generation they were taken in (an id taken
    /// again after it lapsed has a newer one; its older place is skipped when reached).
    order: VecDeque<(Vec<u8>, u64)>,
    generation: u64,
}

#[derive(Debug)]
struct Held {
    until: Option<Timestamp>,
    generation: u64,
    /// The `message_id` of the message that brought the id (SQS answers a duplicate with it).
    message_id: Option<ShortStr>,
}

impl DedupCache {
    /// The `message_id` of the message that brought `id`, if `id` is held at `now` (the message
    /// is a duplicate).
    pub(crate) fn duplicate_of(&self, id: &HeldId, now: Timestamp) -> Option<Option<ShortStr>> {
        let held = self.held.get(&id.key)?;
        held.until.is_none_or(|until| now < until).then(|| held.message_id.clone())
    }

    /// Ids held now.
    pub(crate) fn len(&self) -> usize {
        self.held.len()
    }

    /// Holds `id`, that of a message just taken (whose `message_id` this is), from `now` for its
    /// TTL (`None`: until pushed out); the oldest ids go past the queue's cache size, or past
    /// what the node's budget `node` leaves it. Ids at the front whose interval has passed go
    /// first. A queue that holds none while the node's budget is spent holds nothing more.
    pub(crate) fn hold(
        &mut self,
        id: HeldId,
        now: Timestamp,
        message_id: Option<ShortStr>,
        node: &mut NodeDedupIds,
    ) {
        let HeldId { key, ttl_ms, cache_size } = id;
        self.forget_lapsed(now, node);
        let limit =
            usize::try_from(cache_size.max(1)).unwrap_or(usize::MAX).min(self.held.len() + node.room());
        if limit == 0 {
            return;
        }
        self.generation += 1;
        let until = ttl_ms.map(|ms| now.saturating_add_millis(ms));
        if self.held.insert(key.clone(), Held { until, generation: self.generation, message_id }).is_none() {
            node.held += 1;
        }
        self.order.push_back((key, self.generation));
        while self.held.len() > limit {
            let Some((oldest, generation)) = self.order.pop_front() else { break };
            if self.held.get(&oldest).is_some_and(|h| h.generation == generation) {
                self.held.remove(&oldest);
                node.release(1);
            }
        }
        // The old places of ids taken again go when they reach half of `order` (amortized O(1)),
        // so it stays within twice the ids held.
        if self.order.len() > 2 * self.held.len().max(1) {
            let held = &self.held;
            self.order.retain(|(key, generation)| held.get(key).is_some_and(|h| h.generation == *generation));
        }
    }

    /// Forgets the ids at the front of the order whose interval has passed at `now` (and skips
    /// the old places of ids taken again), up to the first that is still held: amortized O(1),
    /// as each place is passed once.
    fn forget_lapsed(&mut self, now: Timestamp, node: &mut NodeDedupIds) {
        while let Some((oldest, generation)) = self.order.front() {
            match self.held.get(oldest) {
                Some(held) if held.generation == *generation => {
                    if held.until.is_none_or(|until| now < until) {
                        return;
                    }
                    self.held.remove(oldest);
                    node.release(1);
                }
                _ => {}
            }
            self.order.pop_front();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn short(text: &str) -> ShortStr {
        ShortStr::try_from(text).unwrap()
    }

    fn at(ms: u64) -> Timestamp {
        Timestamp::from_millis(ms)
    }

    /// Takes the message unless its id is held: its duplicate's message id, or `None` when new.
    fn admit(
        cache: &mut DedupCache,
        key: &[u8],
        now: u64,
        ttl: Option<u64>,
        id: &str,
    ) -> Option<Option<ShortStr>> {
        let held = HeldId { key: key.to_vec(), ttl_ms: ttl, cache_size: 100 };
        let duplicate = cache.duplicate_of(&held, at(now));
        if duplicate.is_none() {
            cache.hold(held, at(now), Some(short(id)), &mut NodeDedupIds::default());
        }
        duplicate
    }

    /// Ids whose interval has passed are forgotten as new ones come, not kept until pushed out
    /// (finding 6: a queue's memory stayed at its peak until it was deleted).
    #[test]
    fn lapsed_ids_are_forgotten_as_new_ones_come() {
        let (mut cache, mut node) = (DedupCache::default(), NodeDedupIds::default());
        let held = |key: u32, ttl| HeldId { key: key.to_be_bytes().to_vec(), ttl_ms: ttl, cache_size: 1_000 };
        for key in 0..500 {
            cache.hold(held(key, Some(1_000)), at(0), None, &mut node);
        }
        assert_eq!((cache.len(), node.held()), (500, 500));
        cache.hold(held(9_999, Some(1_000)), at(1_000), None, &mut node);
        assert_eq!((cache.len(), node.held()), (1, 1), "the 500 lapsed at 1,000 ms are gone");
    }

    /// Past the node's budget a queue trades its own oldest id for each new one; a queue with
    /// none holds none; a deleted queue's ids give their room back.
    #[test]
    fn the_node_budget_bounds_every_queue_together() {
        let mut node = NodeDedupIds { held: NODE_IDS_MAX - 3 };
        let (mut busy, mut other) = (DedupCache::default(), DedupCache::default());
        let held = |key: u32| HeldId { key: key.to_be_bytes().to_vec(), ttl_ms: None, cache_size: 100 };
        for key in 0..10 {
            busy.hold(held(key), at(0), None, &mut node);
        }
        assert_eq!((busy.len(), node.held()), (3, NODE_IDS_MAX), "the last three ids kept");
        assert!(busy.duplicate_of(&held(9), at(0)).is_some() && busy.duplicate_of(&held(6), at(0)).is_none());
        other.hold(held(1), at(0), None, &mut node);
        assert_eq!((other.len(), node.held()), (0, NODE_IDS_MAX), "no room, nothing to trade");
        node.release(busy.len());
        other.hold(held(1), at(0), None, &mut node);
        assert_eq!((other.len(), node.held()), (1, NODE_IDS_MAX - 2));
    }

    #[test]
    fn an_id_is_a_duplicate_within_its_interval_and_new_after() {
        let mut cache = DedupCache::default();
        let ttl = Some(300_000);
        assert_eq!(admit(&mut cache, b"Sorder-1", 0, ttl, "m1"), None);
        assert_eq!(admit(&mut cache, b"Sorder-1", 299_999, ttl, "-"), Some(Some(short("m1"))));
        assert_eq!(admit(&mut cache, b"Sorder-1", 300_000, ttl, "m2"), None);
        assert_eq!(admit(&mut cache, b"Sorder-1", 300_001, ttl, "-"), Some(Some(short("m2"))));
        // Without a TTL an id is held until newer ones push it out.
        assert_eq!(admit(&mut cache, b"x", 0, None, "m3"), None);
        assert_eq!(admit(&mut cache, b"x", u64::MAX, None, "-"), Some(Some(short("m3"))));
    }

    #[test]
    fn the_oldest_ids_go_first_and_the_cache_stays_within_its_size() {
        let mut cache = DedupCache::default();
        for i in 0..1_000u32 {
            assert_eq!(admit(&mut cache, &i.to_be_bytes(), 0, None, "m"), None);
            assert!(cache.held.len() <= 100);
        }
        assert_eq!(admit(&mut cache, &899u32.to_be_bytes(), 0, None, "m"), None);
        assert!(admit(&mut cache, &999u32.to_be_bytes(), 0, None, "m").is_some());
        // An id retaken after it lapsed, over and over, does not grow the order queue.
        for t in 0..10_000 {
            admit(&mut cache, b"again", t * 10, Some(5), "m");
        }
        assert!(cache.order.len() <= 200, "{}", cache.order.len());
    }

    #[test]
    fn ids_come_from_the_named_header_and_long_ones_are_digested() {
        let spec = DedupSpec { header: "x-id".into(), ..Default::default() };
        let table = |v: FieldValue| FieldTable::from_entries([("x-id", v)]);
        assert_eq!(spec.key_of(Some(&table(FieldValue::LongStr("a".into())))), Some(b"Sa".to_vec()));
        assert_eq!(spec.key_of(Some(&table(FieldValue::I32(7)))).map(|k| k.len()), Some(9));
        assert_ne!(
            spec.key_of(Some(&table(FieldValue::I32(7)))),
            spec.key_of(Some(&table(FieldValue::LongStr("7".into()))))
        );
        assert_eq!(spec.key_of(Some(&table(FieldValue::Bool(true)))), None);
        assert_eq!(DedupSpec::default().key_of(Some(&table(FieldValue::LongStr("a".into())))), None);
        let long = spec.key_of(Some(&table(FieldValue::LongStr("z".repeat(10_000).into())))).unwrap();
        assert_eq!(long.len(), 33);
        let ttl = FieldTable::from_entries([("x-cache-ttl", FieldValue::I32(50))]);
        assert_eq!(spec.ttl_of(Some(&ttl)), Some(50));
        assert_eq!(DedupSpec { cache_ttl_ms: Some(9), ..spec }.ttl_of(None), Some(9));
    }
}
