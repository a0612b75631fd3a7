//! Rates for the `*_details: {"rate": …}` fields, derived from the broker's counters and gauges.
//!
//! How: the broker keeps only counters (`broker/src/message_stats.rs`). A background task
//! (`sampler.rs`) samples every object's values every [`SAMPLE_INTERVAL`] (RabbitMQ's default
//! `collect_statistics_interval`), so the first request already has rates; a request only reads.
//! The rate is the change between the last two samples per second. Each object keeps a bounded
//! history ([`History`]: [`OBJECT_HISTORY`] samples, [`TOTALS_HISTORY`] for the overview and
//! vhosts), which `?msg_rates_age=&msg_rates_incr=` and `?lengths_age=&lengths_incr=` list as
//! RabbitMQ's `samples`, `avg` and `avg_rate`. An object the sampler no longer finds (deleted) is
//! forgotten with its history at the next pass.

pub mod sampler;

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use hourglass_broker::message_stats::{ExchangeStats, MessageStats};
use hourglass_broker::queue::QueueStats;
use serde_json::{json, Map, Value};

use crate::listing::Params;

/// The time between two samples of one object.
pub const SAMPLE_INTERVAL: Duration = Duration::from_secs(5);
/// A pass closer than this to an object's newest sample adds none for it: half an interval, so a
/// tick that comes a little early (timer jitter) still samples, and a pass run twice does not.
const MIN_SPACING: Duration = Duration::from_millis(2500);
/// Samples kept per queue, channel and exchange: 60 s, RabbitMQ's default `msg_rates_age` and the
/// UI's chart range. Bounds the memory per object (13 samples of its values).
pub const OBJECT_HISTORY: usize = 13;
/// Samples kept for the overview and each vhost (few objects): 10 minutes, as RabbitMQ's
/// first retention step (605 s at 5 s).
pub const TOTALS_HISTORY: usize = 121;

/// When a sample was taken: a monotonic instant for rates, wall-clock milliseconds for the
/// `timestamp` of listed samples. Given, never read here, so tests inject it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SampleTime {
    pub at: Instant,
    pub wall_ms: u64,
}

/// One object's values at one time.
#[derive(Clone, Debug)]
struct Sample {
    time: SampleTime,
    values: Box<[u64]>,
}

/// One object's samples, oldest first, at most `keep`.
#[derive(Debug)]
struct History {
    samples: VecDeque<Sample>,
    keep: usize,
}

/// What one sampler pass found of one object: its key, its values and how many samples to keep.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Observation {
    pub key: String,
    pub values: Vec<u64>,
    pub keep: usize,
}

/// Which stretch of history a request wants listed (`?msg_rates_age=60&msg_rates_incr=5`): the
/// samples of the last `age`, one per `incr`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HistoryRange {
    pub age: Duration,
    pub incr: Duration,
}

impl HistoryRange {
    /// `{prefix}_age` and `{prefix}_incr` in seconds (`msg_rates`, `lengths`), as RabbitMQ's
    /// API takes them; none unless both are given and `incr` is positive.
    pub fn from_params(params: &Params, prefix: &str) -> Option<HistoryRange> {
        let seconds = |name: String| params.get(&name).and_then(|v| v.parse::<u64>().ok());
        let age = seconds(format!("{prefix}_age"))?;
        let incr = seconds(format!("{prefix}_incr")).filter(|i| *i > 0)?;
        Some(HistoryRange { age: Duration::from_secs(age), incr: Duration::from_secs(incr) })
    }
}

/// The ranges a request asked for: message rates and queue lengths apart, as in RabbitMQ.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Ranges {
    pub msg_rates: Option<HistoryRange>,
    pub lengths: Option<HistoryRange>,
}

impl Ranges {
    pub fn from_params(params: &Params) -> Ranges {
        Ranges {
            msg_rates: HistoryRange::from_params(params, "msg_rates"),
            lengths: HistoryRange::from_params(params, "lengths"),
        }
    }
}

/// Samples per object, written by the sampler and read by the API's handlers.
#[derive(Debug, Default)]
pub struct Rates {
    objects: Mutex<HashMap<String, History>>,
}

impl Rates {
    /// Records one sampler pass taken at `time`: a sample per object found (none if its newest is
    /// under half an interval old, so a pass run twice does not shorten the rate's span); objects
    /// not found are forgotten with their history.
    pub fn record_pass(&self, time: SampleTime, found: Vec<Observation>) {
        let mut objects = self.objects.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let mut next = HashMap::with_capacity(found.len());
        for Observation { key, values, keep } in found {
            let mut history =
                objects.remove(&key).unwrap_or_else(|| History { samples: VecDeque::with_capacity(2), keep });
            history.keep = keep.max(2);
            history.push(Sample { time, values: values.into_boxed_slice() });
            next.insert(key, history);
        }
        *objects = next;
    }

    /// `name: value` and `name_details: {"rate": r}` for each field of object `key` (the values
    /// are the current ones, the rates from its last two samples; 0.0 before it has two), plus
    /// `samples`, `avg` and `avg_rate` over `range` when one is asked for: the shape of RabbitMQ's
    /// `message_stats` and queue length fields.
    pub fn details(
        &self,
        key: &str,
        fields: &[(&str, u64)],
        range: Option<HistoryRange>,
    ) -> Map<String, Value> {
        let objects = self.objects.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let history = objects.get(key).filter(|h| h.fits(fields.len()));
        let mut out = Map::new();
        for (index, (name, value)) in fields.iter().enumerate() {
            let mut details = Map::new();
            details.insert("rate".into(), json!(history.map_or(0.0, |h| h.rate(index))));
            if let (Some(range), Some(history)) = (range, history) {
                details.extend(history.listed(index, range));
            }
            out.insert((*name).to_owned(), json!(value));
            out.insert(format!("{name}_details"), Value::Object(details));
        }
        out
    }
}

impl History {
    fn push(&mut self, sample: Sample) {
        let newest = self.samples.back();
        let due = newest.is_none_or(|n| {
            sample.time.at.saturating_duration_since(n.time.at) >= MIN_SPACING
                || n.values.len() != sample.values.len()
        });
        if !due {
            return;
        }
        if newest.is_some_and(|n| n.values.len() != sample.values.len()) {
            self.samples.clear();
        }
        while self.samples.len() >= self.keep {
            self.samples.pop_front();
        }
        self.samples.push_back(sample);
    }

    fn fits(&self, fields: usize) -> bool {
        self.samples.back().is_some_and(|s| s.values.len() == fields)
    }

    /// Change per second of value `index` between the last two samples; 0.0 with one. Gauges
    /// may fall: negative.
    fn rate(&self, index: usize) -> f64 {
        let mut newest_first = self.samples.iter().rev();
        let (Some(newest), Some(older)) = (newest_first.next(), newest_first.next()) else { return 0.0 };
        per_second(older, newest, index)
    }

    /// RabbitMQ's `samples` (newest first, one per `incr` within `age` of the newest), their
    /// `avg`, and `avg_rate` (the change per second from the oldest listed to the newest).
    fn listed(&self, index: usize, range: HistoryRange) -> Map<String, Value> {
        let mut listed: Vec<&Sample> = Vec::new();
        if let Some(newest) = self.samples.back() {
            for sample in self.samples.iter().rev() {
                let age = newest.time.at.saturating_duration_since(sample.time.at);
                if age > range.age {
                    break;
                }
                // A sample is taken every SAMPLE_INTERVAL give or take the timer's jitter: one a
                // little less than `incr` after the last listed is the next step, not a repeat
                // (every other sample was dropped when 4.999 s fell short of 5).
                let spaced = listed.last().is_none_or(|last| {
                    last.time.at.saturating_duration_since(sample.time.at) + MIN_SPACING >= range.incr
                });
                if spaced {
                    listed.push(sample);
                }
            }
        }
        let samples: Vec<Value> =
            listed.iter().map(|s| json!({"sample": s.values[index], "timestamp": s.time.wall_ms})).collect();
        let avg = if listed.is_empty() {
            0.0
        } else {
            listed.iter().map(|s| s.values[index] as f64).sum::<f64>() / listed.len() as f64
        };
        let avg_rate = match (listed.last(), listed.first()) {
            (Some(oldest), Some(newest)) => per_second(oldest, newest, index),
            _ => 0.0,
        };
        let mut out = Map::new();
        out.insert("samples".into(), Value::Array(samples));
        out.insert("avg".into(), json!(avg));
        out.insert("avg_rate".into(), json!(avg_rate));
        out
    }
}

fn per_second(older: &Sample, newer: &Sample, index: usize) -> f64 {
    let seconds = newer.time.at.saturating_duration_since(older.time.at).as_secs_f64();
    if seconds <= 0.0 {
        return 0.0;
    }
    (newer.values[index] as f64 - older.values[index] as f64) / seconds
}

/// The keys objects are sampled under: one place, so the sampler and the handlers agree.
pub mod key {
    use hourglass_broker::api::{ChannelId, ConnectionId};

    pub const OVERVIEW: &str = "overview";
    pub const OVERVIEW_QUEUE_TOTALS: &str = "overview\0queue_totals";
    pub const OVERVIEW_TIME: &str = "overview\0time";

    pub fn queue(vhost: &str, name: &str) -> String {
        format!("queue\0{vhost}\0{name}")
    }

    pub fn queue_depth(vhost: &str, name: &str) -> String {
        format!("queue\0{vhost}\0{name}\0depth")
    }

    pub fn vhost_depth(vhost: &str) -> String {
        format!("vhost\0{vhost}\0depth")
    }

    pub fn channel(conn: ConnectionId, channel: ChannelId) -> String {
        format!("channel\0{conn:?}\0{}", channel.0)
    }

    pub fn exchange(vhost: &str, name: &str) -> String {
        format!("exchange\0{vhost}\0{name}")
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

fn consumer_fields(s: &MessageStats) -> [(&'static str, u64); 8] {
    [
        ("deliver_get", s.deliver_get()),
        ("deliver", s.deliver),
        ("deliver_no_ack", s.deliver_no_ack),
        ("get", s.get),
        ("get_no_ack", s.get_no_ack),
        ("get_empty", s.get_empty),
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

/// Ours (RabbitMQ has no such fields): messages expired and dead-lettered, summed over the
/// queues that exist now (a deleted queue takes its counts with it).
pub fn time_total_fields(queues: &[QueueStats]) -> [(&'static str, u64); 2] {
    let expired: u64 = queues.iter().map(|q| q.counters.expired).sum();
    let dead_lettered: u64 = queues
        .iter()
        .map(|q| {
            let c = &q.counters;
            c.dead_lettered_rejected
                + c.dead_lettered_expired
                + c.dead_lettered_maxlen
                + c.dead_lettered_delivery_limit
        })
        .sum();
    [("expired", expired), ("dead_lettered", dead_lettered)]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn time(t0: Instant, seconds: u64) -> SampleTime {
        SampleTime { at: t0 + Duration::from_secs(seconds), wall_ms: 1_000_000 + seconds * 1000 }
    }

    fn seen(key: &str, values: &[u64], keep: usize) -> Observation {
        Observation { key: key.to_owned(), values: values.to_vec(), keep }
    }

    fn rate_of(rates: &Rates, key: &str, fields: &[(&str, u64)]) -> Value {
        Value::Object(rates.details(key, fields, None))
    }

    /// The rate is the change per second between the last two samples; a pass under 2.5 s after
    /// the last sample adds none, one a little under 5 s (a timer's jitter) does; values shown are
    /// the current ones.
    #[test]
    fn rate_is_the_change_between_the_last_two_samples() {
        let rates = Rates::default();
        let t0 = Instant::now();
        rates.record_pass(time(t0, 0), vec![seen("q", &[10, 4], OBJECT_HISTORY)]);
        let first = rate_of(&rates, "q", &[("a", 10), ("b", 4)]);
        assert_eq!(first["a_details"]["rate"], 0.0);
        rates.record_pass(time(t0, 2), vec![seen("q", &[20, 4], OBJECT_HISTORY)]);
        rates.record_pass(time(t0, 5), vec![seen("q", &[60, 2], OBJECT_HISTORY)]);
        let shown = rate_of(&rates, "q", &[("a", 70), ("b", 2)]);
        assert_eq!(shown, json!({"a": 70, "a_details": {"rate": 10.0}, "b": 2, "b_details": {"rate": -0.4}}));
        let early = SampleTime { at: t0 + Duration::from_millis(9_990), wall_ms: 1_009_990 };
        rates.record_pass(early, vec![seen("q", &[109, 2], OBJECT_HISTORY)]);
        assert_eq!(rate_of(&rates, "q", &[("a", 109), ("b", 2)])["a_details"]["rate"], 49.0 / 4.99);
        rates.record_pass(time(t0, 15), vec![seen("q", &[90, 2], OBJECT_HISTORY)]);
        let later = rate_of(&rates, "q", &[("a", 90), ("b", 2)])["a_details"]["rate"].as_f64().unwrap();
        assert!((later - (90.0 - 109.0) / 5.01).abs() < 1e-9, "{later}");
    }

    /// An object missing from a pass is forgotten; each keeps at most its own number of samples.
    #[test]
    fn history_is_bounded_and_deleted_objects_forgotten() {
        let rates = Rates::default();
        let t0 = Instant::now();
        for i in 0..40 {
            rates.record_pass(time(t0, i * 5), vec![seen("a", &[i], OBJECT_HISTORY), seen("b", &[i], 3)]);
        }
        {
            let objects = rates.objects.lock().unwrap();
            assert_eq!((objects["a"].samples.len(), objects["b"].samples.len()), (OBJECT_HISTORY, 3));
        }
        rates.record_pass(time(t0, 200), vec![seen("a", &[40], OBJECT_HISTORY)]);
        assert!(!rates.objects.lock().unwrap().contains_key("b"));
        assert_eq!(rate_of(&rates, "b", &[("x", 1)])["x_details"]["rate"], 0.0);
    }

    /// `?msg_rates_age=20&msg_rates_incr=10` lists the samples of the last 20 s 10 s apart, newest
    /// first with wall-clock timestamps, their mean and the rate across them.
    #[test]
    fn a_range_lists_samples_with_avg_and_avg_rate() {
        let rates = Rates::default();
        let t0 = Instant::now();
        for (i, value) in [0, 10, 20, 40, 80].into_iter().enumerate() {
            rates.record_pass(time(t0, i as u64 * 5), vec![seen("o", &[value], TOTALS_HISTORY)]);
        }
        let range = HistoryRange { age: Duration::from_secs(20), incr: Duration::from_secs(10) };
        let details = Value::Object(rates.details("o", &[("publish", 80)], Some(range)));
        let samples = json!([
            {"sample": 80, "timestamp": 1_020_000},
            {"sample": 20, "timestamp": 1_010_000},
            {"sample": 0, "timestamp": 1_000_000},
        ]);
        assert_eq!(details["publish_details"]["samples"], samples);
        assert_eq!(details["publish_details"]["rate"], 8.0);
        assert_eq!(details["publish_details"]["avg_rate"], 4.0);
        assert!((details["publish_details"]["avg"].as_f64().unwrap() - 100.0 / 3.0).abs() < 1e-9);
    }

    /// Issue 39: samples a little less than `incr` apart (a timer's jitter) are each listed, so
    /// ten minutes of 5 s samples list as 121, not every other one; samples closer than that are
    /// still thinned to one per `incr`.
    #[test]
    fn samples_a_little_early_are_listed_too() {
        let rates = Rates::default();
        let t0 = Instant::now();
        for i in 0..10_u64 {
            let at = t0 + Duration::from_millis(i * 4_990);
            let time = SampleTime { at, wall_ms: 1_000_000 + i * 4_990 };
            rates.record_pass(time, vec![seen("o", &[i], TOTALS_HISTORY)]);
        }
        let range = HistoryRange { age: Duration::from_secs(600), incr: Duration::from_secs(5) };
        let details = Value::Object(rates.details("o", &[("publish", 9)], Some(range)));
        assert_eq!(details["publish_details"]["samples"].as_array().unwrap().len(), 10);
        let range = HistoryRange { age: Duration::from_secs(600), incr: Duration::from_secs(10) };
        let details = Value::Object(rates.details("o", &[("publish", 9)], Some(range)));
        let listed: Vec<u64> = details["publish_details"]["samples"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["sample"].as_u64().unwrap())
            .collect();
        assert_eq!(listed, [9, 7, 5, 3, 1]);
    }

    /// Ranges come from RabbitMQ's query parameters, in seconds; both halves are needed.
    #[test]
    fn ranges_are_read_from_the_query() {
        let params: Params = [("msg_rates_age", "60"), ("msg_rates_incr", "5"), ("lengths_age", "600")]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect();
        let ranges = Ranges::from_params(&params);
        let range = HistoryRange { age: Duration::from_secs(60), incr: Duration::from_secs(5) };
        assert_eq!(ranges, Ranges { msg_rates: Some(range), lengths: None });
    }
}
