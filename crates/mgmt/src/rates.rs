//! Rates for the `*_details: {"rate": …}` fields, derived from the broker's counters and gauges.
//!
//! How: the broker keeps only counters (`broker/src/message_stats.rs`). Each time the API reports
//! an object it hands its current values here under a key naming the object; a new sample is
//! taken when the newest one is at least [`SAMPLE_INTERVAL`] old (RabbitMQ's default
//! `collect_statistics_interval`), and the rate is the change between the last two samples per
//! second. So rates are computed on request, there is no background sampling, and an object
//! nobody asks about costs nothing; the first request (and any within 5 s of it) reports 0.0.
//! A rate covers the time between the two samples, which is longer than 5 s when requests are
//! further apart. Samples of objects not reported for [`FORGET_AFTER`] are dropped.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use hourglass_broker::message_stats::{ExchangeStats, MessageStats};
use serde_json::{json, Map, Value};

/// The least time between two samples of one object.
pub const SAMPLE_INTERVAL: Duration = Duration::from_secs(5);
/// Samples of an object not reported for this long are forgotten (a deleted queue, say).
pub const FORGET_AFTER: Duration = Duration::from_secs(600);

/// One object's values at one time.
#[derive(Clone, Debug)]
struct Sample {
    at: Instant,
    values: Vec<u64>,
}

/// The last two samples of one object.
#[derive(Debug)]
struct History {
    newest: Sample,
    older: Option<Sample>,
}

/// Samples per object, shared by the API's handlers.
#[derive(Debug, Default)]
pub struct Rates {
    objects: Mutex<HashMap<String, History>>,
}

impl Rates {
    /// Samples `values` of object `key` at `at` if due; returns a rate per value (per second).
    pub fn observe(&self, key: &str, at: Instant, values: &[u64]) -> Vec<f64> {
        let mut objects = self.objects.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let sample = Sample { at, values: values.to_vec() };
        let Some(history) = objects.get_mut(key) else {
            objects.insert(key.to_owned(), History { newest: sample, older: None });
            return vec![0.0; values.len()];
        };
        if at.saturating_duration_since(history.newest.at) >= SAMPLE_INTERVAL
            || history.newest.values.len() != values.len()
        {
            history.older = Some(std::mem::replace(&mut history.newest, sample));
        }
        rates(history, values.len())
    }

    /// Drops the samples of objects not reported since `at - FORGET_AFTER`.
    pub fn forget_stale(&self, at: Instant) {
        let mut objects = self.objects.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        objects.retain(|_, h| at.saturating_duration_since(h.newest.at) < FORGET_AFTER);
    }

    /// `name: value` and `name_details: {"rate": r}` for each field, sampled under `key`: the
    /// shape of RabbitMQ's `message_stats` and queue depth fields.
    pub fn details(&self, key: &str, at: Instant, fields: &[(&str, u64)]) -> Map<String, Value> {
        let values: Vec<u64> = fields.iter().map(|(_, v)| *v).collect();
        let rates = self.observe(key, at, &values);
        let mut out = Map::new();
        for ((name, value), rate) in fields.iter().zip(rates) {
            out.insert((*name).to_owned(), json!(value));
            out.insert(format!("{name}_details"), json!({ "rate": rate }));
        }
        out
    }
}

/// The broker's and a channel's `message_stats` fields, as RabbitMQ names them.
pub fn publisher_fields(s: &MessageStats) -> Vec<(&'static str, u64)> {
    let mut fields = vec![("publish", s.publish), ("confirm", s.confirm)];
    fields.extend(consumer_fields(s));
    fields.extend([("return_unroutable", s.return_unroutable), ("drop_unroutable", s.drop_unroutable)]);
    fields
}

/// A queue's `message_stats` fields: what entered it and what left it for clients.
pub fn queue_fields(s: &MessageStats) -> Vec<(&'static str, u64)> {
    let mut fields = vec![("publish", s.publish)];
    fields.extend(consumer_fields(s));
    fields
}

fn consumer_fields(s: &MessageStats) -> [(&'static str, u64); 7] {
    [
        ("deliver_get", s.deliver_get()),
        ("deliver", s.deliver),
        ("deliver_no_ack", s.deliver_no_ack),
        ("get", s.get),
        ("get_no_ack", s.get_no_ack),
        ("ack", s.ack),
        ("redeliver", s.redeliver),
    ]
}

/// An exchange's `message_stats` fields.
pub fn exchange_fields(s: &ExchangeStats) -> [(&'static str, u64); 2] {
    [("publish_in", s.publish_in), ("publish_out", s.publish_out)]
}

/// Queue depth fields (`messages`, `messages_ready`, `messages_unacknowledged`), with rates.
pub fn depth_fields(ready: usize, unacked: usize) -> [(&'static str, u64); 3] {
    let (ready, unacked) = (ready as u64, unacked as u64);
    [("messages", ready + unacked), ("messages_ready", ready), ("messages_unacknowledged", unacked)]
}

/// Change per second between the two samples; 0.0 with one sample. Gauges may fall: negative.
fn rates(history: &History, count: usize) -> Vec<f64> {
    let Some(older) = &history.older else { return vec![0.0; count] };
    let seconds = history.newest.at.saturating_duration_since(older.at).as_secs_f64();
    if seconds <= 0.0 || older.values.len() != history.newest.values.len() {
        return vec![0.0; count];
    }
    let change = |(new, old): (&u64, &u64)| (*new as f64 - *old as f64) / seconds;
    history.newest.values.iter().zip(&older.values).map(change).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The first sample gives 0.0; a sample 5 s later gives the change per second; requests in
    /// between keep the last rate.
    #[test]
    fn rate_is_the_change_between_the_last_two_samples() {
        let rates = Rates::default();
        let t0 = Instant::now();
        assert_eq!(rates.observe("q", t0, &[10, 4]), [0.0, 0.0]);
        assert_eq!(rates.observe("q", t0 + Duration::from_secs(3), &[20, 4]), [0.0, 0.0]);
        assert_eq!(rates.observe("q", t0 + Duration::from_secs(5), &[60, 2]), [10.0, -0.4]);
        assert_eq!(rates.observe("q", t0 + Duration::from_secs(7), &[90, 2]), [10.0, -0.4]);
        assert_eq!(rates.observe("q", t0 + Duration::from_secs(15), &[90, 2]), [3.0, 0.0]);
    }

    /// Objects are sampled apart, and forgotten when not reported for 10 minutes.
    #[test]
    fn objects_are_kept_apart_and_forgotten() {
        let rates = Rates::default();
        let t0 = Instant::now();
        rates.observe("a", t0, &[0]);
        rates.observe("b", t0, &[0]);
        assert_eq!(rates.observe("a", t0 + SAMPLE_INTERVAL, &[5]), [1.0]);
        rates.forget_stale(t0 + FORGET_AFTER);
        assert_eq!(rates.objects.lock().unwrap().len(), 1, "b is forgotten, a was seen at 5 s");
        let details = rates.details("a", t0 + SAMPLE_INTERVAL * 2, &[("publish", 10)]);
        assert_eq!(Value::Object(details), json!({"publish": 10, "publish_details": {"rate": 1.0}}));
    }
}
