//! `x-dead-letter-exchange`, `x-dead-letter-routing-key` (semantics §2): how a dead-lettered
//! message is rewritten — `x-death` and `x-first-death-*` / `x-last-death-*` headers as RabbitMQ
//! 3.13+, `expiration` moved into `original-expiration` — and which targets would form a cycle.
//!
//! Leaves to others: routing the rewritten message and enqueueing it (`Broker::dead_letter`).

use std::sync::Arc;

use hourglass_wire::{FieldArray, FieldTable, FieldValue, LongStr, ShortStr};

use crate::message::Message;
use crate::sender_selected::HeaderRoutes;
use crate::time::Timestamp;

/// A bound on `x-death` entries, so a message bouncing between many queues cannot grow its headers
/// without limit (one entry per queue+reason; RabbitMQ has no bound).
const MAX_X_DEATH_ENTRIES: usize = 64;

/// Why a message was dead-lettered, with RabbitMQ's reason names.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum DeathReason {
    Rejected,
    Expired,
    Maxlen,
    DeliveryLimit,
}

impl DeathReason {
    pub fn name(self) -> &'static str {
        match self {
            DeathReason::Rejected => "rejected",
            DeathReason::Expired => "expired",
            DeathReason::Maxlen => "maxlen",
            DeathReason::DeliveryLimit => "delivery_limit",
        }
    }
}

/// The header an SQS queue's dead-lettered message carries: its receives in the queues it
/// left (issue 40, item 21; AWS counts `ApproximateReceiveCount` across a redrive policy's
/// move). A message-move task's redrive makes a new message and drops it, as AWS resets the
/// count there.
pub const EARLIER_RECEIVES_HEADER: &str = "x-sqs-earlier-receives";

/// The receives `message` had in queues it left before ([`EARLIER_RECEIVES_HEADER`]).
pub fn earlier_receives(message: &Message) -> u32 {
    let headers = message.properties().headers();
    let value = headers.as_ref().and_then(|h| h.get(EARLIER_RECEIVES_HEADER)).and_then(|v| v.as_i64());
    value.and_then(|n| u32::try_from(n).ok()).unwrap_or(0)
}

/// The message as it is republished to the dead-letter exchange `dlx` from `queue`; with
/// `receives` (an SQS queue's, `Some` when it was received there), counted in
/// [`EARLIER_RECEIVES_HEADER`].
pub(crate) fn rewrite(
    message: &Message,
    queue: &ShortStr,
    reason: DeathReason,
    now: Timestamp,
    dlx: &ShortStr,
    routing_key: Option<&ShortStr>,
    receives: Option<u32>,
) -> Message {
    let old_headers = message.properties().headers().unwrap_or_default();
    let deaths = updated_deaths(&old_headers, message, queue, reason, now);
    let reason_value = || FieldValue::LongStr(LongStr::from(reason.name()));
    let queue_value = || FieldValue::LongStr(LongStr::new(queue.clone().into_bytes()));
    let exchange_value = || FieldValue::LongStr(LongStr::new(message.exchange.clone().into_bytes()));
    let mut headers = old_headers.with_entry("x-death", FieldValue::Array(deaths));
    if !headers.contains_key("x-first-death-reason") {
        // RabbitMQ writes them in this order: exchange, queue, reason.
        headers = headers
            .with_entry("x-first-death-exchange", exchange_value())
            .with_entry("x-first-death-queue", queue_value())
            .with_entry("x-first-death-reason", reason_value());
    }
    headers = headers
        .with_entry("x-last-death-reason", reason_value())
        .with_entry("x-last-death-queue", queue_value())
        .with_entry("x-last-death-exchange", exchange_value());
    if let Some(receives) = receives.filter(|n| *n > 0) {
        let total = i64::from(earlier_receives(message)) + i64::from(receives);
        headers = headers.with_entry(EARLIER_RECEIVES_HEADER, FieldValue::I64(total));
    }
    if routing_key.is_some() {
        // A dead-letter routing key replaces every routing key, CC included (rabbit_dead_letter).
        headers = headers.without_key("CC");
    }
    let properties = message.properties().edited(|p| {
        p.headers = Some(headers);
        p.expiration = None;
    });
    let routing_key = routing_key.cloned().unwrap_or_else(|| message.routing_key.clone());
    Message::new(dlx.clone(), routing_key, properties, message.body.clone())
}

/// Whether delivering a message carrying `headers` (already rewritten) to `target` would close a
/// dead-letter cycle with no rejection in it: RabbitMQ's rule, which drops such copies.
pub(crate) fn is_cycle(headers: Option<&FieldTable>, target: &ShortStr) -> bool {
    let Some(FieldValue::Array(deaths)) = headers.and_then(|h| h.get("x-death")) else { return false };
    for death in deaths.iter() {
        let FieldValue::Table(death) = death else { continue };
        if death.get("reason").and_then(|r| r.as_bytes().map(|b| b == b"rejected")).unwrap_or(false) {
            return false;
        }
        if death.get("queue").and_then(|q| q.as_bytes().map(|b| b == target.as_bytes())).unwrap_or(false) {
            return true;
        }
    }
    false
}

/// `x-death` with this death recorded: the entry for (queue, reason) counts one more and moves to
/// the front; otherwise a new entry goes in front. Most recent first. Entries already there are
/// carried only when they read as a death record (a queue, a reason and an integer count): RabbitMQ
/// 3.13+ keeps its own records and drops what it cannot read, such as the count-less entries of
/// brokers before 3.5 (`XDeathHeaderGrowth#handlingOfXDeathHeadersFromEarlierVersions`).
fn updated_deaths(
    headers: &FieldTable,
    message: &Message,
    queue: &ShortStr,
    reason: DeathReason,
    now: Timestamp,
) -> FieldArray {
    let existing: Vec<FieldTable> = match headers.get("x-death") {
        Some(FieldValue::Array(deaths)) => deaths
            .iter()
            .filter_map(|d| match d {
                FieldValue::Table(t) if is_death_record(&t) => Some(t),
                _ => None,
            })
            .collect(),
        _ => Vec::new(),
    };
    let key = (queue.as_bytes().to_vec(), reason.name().as_bytes().to_vec());
    let (matching, others): (Vec<FieldTable>, Vec<FieldTable>) =
        merged_by_queue_and_reason(existing).into_iter().partition(|d| death_key(d) == key);
    let front = match matching.into_iter().next() {
        Some(previous) => {
            let count = death_count(&previous) + 1;
            previous
                .with_entry("count", FieldValue::I64(count))
                .with_entry("time", FieldValue::Timestamp(now.as_secs()))
        }
        None => new_death(message, queue, reason, now),
    };
    let values = std::iter::once(front).chain(others).take(MAX_X_DEATH_ENTRIES).map(FieldValue::Table);
    FieldArray::from_values(values)
}

/// One entry per (queue, reason), in first-seen order, counts added up: x-death headers written by
/// older brokers (or copied by applications) may repeat a pair, and RabbitMQ merges them so the
/// header cannot grow without bound (the Java client's `XDeathHeaderGrowth`).
fn merged_by_queue_and_reason(deaths: Vec<FieldTable>) -> Vec<FieldTable> {
    let mut merged: Vec<FieldTable> = Vec::with_capacity(deaths.len());
    for death in deaths {
        let key = death_key(&death);
        match merged.iter_mut().find(|m| death_key(m) == key) {
            Some(first) => {
                let count = death_count(first) + death_count(&death);
                *first = first.clone().with_entry("count", FieldValue::I64(count));
            }
            None => merged.push(death),
        }
    }
    merged
}

/// Whether an `x-death` entry has what a death record needs: a queue, a reason and an integer count.
fn is_death_record(death: &FieldTable) -> bool {
    let text = |key: &str| death.get(key).is_some_and(|v| v.as_bytes().is_some());
    text("queue") && text("reason") && death.get("count").and_then(|c| c.as_i64()).is_some()
}

/// An entry's (queue, reason), as raw bytes (empty when missing).
fn death_key(death: &FieldTable) -> (Vec<u8>, Vec<u8>) {
    let bytes = |key: &str| death.get(key).and_then(|v| v.as_bytes().map(<[u8]>::to_vec)).unwrap_or_default();
    (bytes("queue"), bytes("reason"))
}

/// An entry's count (entries without one were dropped before: `is_death_record`).
fn death_count(death: &FieldTable) -> i64 {
    death.get("count").and_then(|c| c.as_i64()).unwrap_or(1)
}

fn new_death(message: &Message, queue: &ShortStr, reason: DeathReason, now: Timestamp) -> FieldTable {
    let long = |b: &ShortStr| FieldValue::LongStr(LongStr::new(b.clone().into_bytes()));
    // All the keys the message was routed with: its routing key and its CC keys.
    let cc = HeaderRoutes::read(message.properties()).unwrap_or_default();
    let cc_keys = cc.keys().iter().map(|k| FieldValue::LongStr(LongStr::new(k.clone())));
    let routing_keys = FieldArray::from_values(std::iter::once(long(&message.routing_key)).chain(cc_keys));
    let mut entries = vec![
        ("count", FieldValue::I64(1)),
        ("reason", FieldValue::LongStr(LongStr::from(reason.name()))),
        ("queue", long(queue)),
        ("time", FieldValue::Timestamp(now.as_secs())),
        ("exchange", long(&message.exchange)),
        ("routing-keys", FieldValue::Array(routing_keys)),
    ];
    if let Some(expiration) = message.properties().expiration() {
        entries.push(("original-expiration", long(&expiration)));
    }
    FieldTable::from_entries(entries)
}

/// A dead-lettering to carry out: the message leaving `queue` for `reason`.
#[derive(Debug)]
pub(crate) struct DeadLetter {
    pub message: Arc<Message>,
    pub reason: DeathReason,
    /// How many times it was handed out in the queue it leaves, acked or not (SQS's
    /// `ApproximateReceiveCount` goes on in the dead-letter queue: [`EARLIER_RECEIVES_HEADER`]).
    pub receives: u32,
    /// The source's store id: settled only after the copies are enqueued (at-least-once).
    pub persist_id: Option<u64>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use hourglass_wire::BasicProperties;

    fn s(v: &str) -> ShortStr {
        ShortStr::try_from(v).unwrap()
    }

    fn message(expiration: Option<&str>) -> Message {
        let properties = BasicProperties { expiration: expiration.map(s), ..Default::default() };
        Message::new(s("orders"), s("eu.created"), properties.into(), bytes::Bytes::from_static(b"body"))
    }

    fn text(table: &FieldTable, key: &str) -> String {
        String::from_utf8(table.get(key).and_then(|v| v.as_bytes().map(<[u8]>::to_vec)).unwrap()).unwrap()
    }

    fn deaths(m: &Message) -> Vec<FieldTable> {
        match m.properties().headers().unwrap().get("x-death") {
            Some(FieldValue::Array(a)) => a
                .iter()
                .map(|v| match v {
                    FieldValue::Table(t) => t,
                    other => panic!("{other:?}"),
                })
                .collect(),
            other => panic!("{other:?}"),
        }
    }

    /// The first dead-lettering writes an x-death entry with RabbitMQ's fields, the first/last
    /// death headers, moves `expiration` to `original-expiration` and re-addresses the message
    /// (semantics §2).
    #[test]
    fn first_death_writes_rabbitmq_headers() {
        let now = Timestamp::from_millis(1_700_000_000_123);
        let out =
            rewrite(&message(Some("5000")), &s("work"), DeathReason::Expired, now, &s("dlx"), None, None);
        assert_eq!(out.exchange, "dlx");
        assert_eq!(out.routing_key, "eu.created");
        assert_eq!(out.properties().expiration(), None);
        assert_eq!(out.expiration_ms(), None);
        let d = deaths(&out);
        assert_eq!(d.len(), 1);
        assert_eq!(d[0].get("count"), Some(FieldValue::I64(1)));
        assert_eq!(text(&d[0], "reason"), "expired");
        assert_eq!(text(&d[0], "queue"), "work");
        assert_eq!(text(&d[0], "exchange"), "orders");
        assert_eq!(text(&d[0], "original-expiration"), "5000");
        assert_eq!(d[0].get("time"), Some(FieldValue::Timestamp(1_700_000_000)));
        let headers = out.properties().headers().unwrap();
        assert_eq!(text(&headers, "x-first-death-reason"), "expired");
        assert_eq!(text(&headers, "x-last-death-queue"), "work");
    }

    /// An SQS queue's receives add up over successive dead-letterings; none received, no header.
    #[test]
    fn earlier_receives_add_up_across_dead_letterings() {
        let now = Timestamp::from_millis(0);
        let never = rewrite(&message(None), &s("a"), DeathReason::Expired, now, &s("dlx"), None, Some(0));
        assert!(never.properties().headers().unwrap().get(EARLIER_RECEIVES_HEADER).is_none());
        let once =
            rewrite(&message(None), &s("a"), DeathReason::DeliveryLimit, now, &s("dlx"), None, Some(2));
        let twice = rewrite(&once, &s("b"), DeathReason::Rejected, now, &s("dlx"), None, Some(3));
        assert_eq!((earlier_receives(&once), earlier_receives(&twice)), (2, 5));
    }

    /// Dying again in the same queue for the same reason counts up and moves that entry first;
    /// the first-death headers stay, the last-death ones follow (semantics §2).
    #[test]
    fn repeated_death_counts_per_queue_and_reason() {
        let now = Timestamp::from_millis(0);
        let once =
            rewrite(&message(None), &s("a"), DeathReason::Rejected, now, &s("dlx"), Some(&s("b")), None);
        let twice = rewrite(&once, &s("b"), DeathReason::Expired, now, &s("dlx"), Some(&s("a")), None);
        let thrice = rewrite(&twice, &s("a"), DeathReason::Rejected, now, &s("dlx"), None, None);
        let d = deaths(&thrice);
        assert_eq!(d.len(), 2);
        assert_eq!((text(&d[0], "queue"), d[0].get("count")), ("a".to_owned(), Some(FieldValue::I64(2))));
        assert_eq!(text(&d[1], "queue"), "b");
        let headers = thrice.properties().headers().unwrap();
        assert_eq!(text(&headers, "x-first-death-queue"), "a");
        assert_eq!(text(&headers, "x-first-death-reason"), "rejected");
        assert_eq!(text(&headers, "x-last-death-reason"), "rejected");
    }

    /// Entries repeating a (queue, reason) pair, as older brokers wrote them, are merged with their
    /// counts added before this death is recorded; entries without a count are dropped.
    #[test]
    fn repeated_entries_from_older_brokers_are_merged() {
        let entry = |queue: &str, reason: &str, count: Option<i64>| {
            let mut entries = vec![
                ("queue", FieldValue::LongStr(queue.into())),
                ("reason", FieldValue::LongStr(reason.into())),
            ];
            if let Some(count) = count {
                entries.push(("count", FieldValue::I64(count)));
            }
            FieldValue::Table(FieldTable::from_entries(entries))
        };
        let old = FieldArray::from_values([
            entry("a", "expired", Some(2)),
            entry("b", "rejected", None),
            entry("a", "expired", Some(3)),
            entry("b", "rejected", Some(1)),
            entry("c", "expired", None),
        ]);
        let headers = FieldTable::from_entries([("x-death", FieldValue::Array(old))]);
        let deaths = updated_deaths(
            &headers,
            &message(None),
            &s("c"),
            DeathReason::Expired,
            Timestamp::from_millis(0),
        );
        let summary: Vec<(String, String, i64)> = deaths
            .iter()
            .filter_map(|d| match d {
                FieldValue::Table(t) => Some((text(&t, "queue"), text(&t, "reason"), death_count(&t))),
                _ => None,
            })
            .collect();
        let expected = [("c", "expired", 1), ("a", "expired", 5), ("b", "rejected", 1)];
        let expected: Vec<(String, String, i64)> =
            expected.iter().map(|(q, r, c)| (q.to_string(), r.to_string(), *c)).collect();
        assert_eq!(summary, expected);
    }

    /// A queue already in x-death with no rejection since is a cycle; a rejection breaks it
    /// (semantics §2 "A dead-letter cycle with no rejected in it drops the message").
    #[test]
    fn cycles_without_rejection_are_detected() {
        let now = Timestamp::from_millis(0);
        let expired = rewrite(&message(None), &s("a"), DeathReason::Expired, now, &s("dlx"), None, None);
        assert!(is_cycle(expired.properties().headers().as_ref(), &s("a")));
        assert!(!is_cycle(expired.properties().headers().as_ref(), &s("other")));
        let rejected = rewrite(&message(None), &s("a"), DeathReason::Rejected, now, &s("dlx"), None, None);
        assert!(!is_cycle(rejected.properties().headers().as_ref(), &s("a")));
        assert!(!is_cycle(None, &s("a")));
    }
}
