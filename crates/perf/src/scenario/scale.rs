//! `scale-fill`, `scale-tracers`, `scale-tracers-consume`: what waiting messages cost at N
//! waiting (issue 23). `scripts/bench_scale.py` runs them around a restart of the broker.
//!
//! - `scale-fill`: N persistent 16 B messages, confirmed, each due 1–2 h ahead (`x-delay`
//!   through a durable `x-delayed-message` exchange into a durable queue; or, `--via ttl`, a
//!   per-message expiration in a queue that dead-letters when it runs out, as RabbitMQ users
//!   without the plugin do). For every slice (a tenth by default) of the fill: the publish rate
//!   over that slice, so a broker that accepts the last message slower than the first shows it,
//!   and the broker's RSS at its end, as bytes per waiting message over the RSS at the start.
//! - `scale-tracers`: K persistent tracers through the same kind of exchange into their own
//!   queue, each due at a wall-clock time written in its body (`x-delay` = that time − now).
//! - `scale-tracers-consume`: consumes them (after the restart) and reports each one's lateness
//!   against its body's due time, and how many arrived early: none may.
//!
//! Publishing goes through the shared publisher (confirm window, batches); RSS is read from
//! /proc for `--broker-pid`.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::bail;
use hourglass_wire::{FieldTable, FieldValue, QueueDeclare};
use serde_json::{json, Value};

use super::deadlines::{self, deadline_body, delayed_by, expiring_in, wall_ms, Kind, Lcg, BODY_LEN};
use super::flow::{Flow, FlowOutcome};
use super::publisher::{PublisherSpec, Shape};
use super::{declare_delayed_queue, declare_queues, Run, CHANNEL};
use crate::cli::{ScaleFillArgs, ScaleTracersArgs, ScaleTracersConsumeArgs, WaitVia};
use crate::client::{short, Client};
use crate::measure::{percentile, round3};
use crate::probe::Probe;
use crate::report;

/// Slack over the publishing bound (and the publisher's 30 s for its last confirms).
const HARD_LIMIT_SLACK: Duration = Duration::from_secs(60);
/// How long the tracers may take to publish: there are few of them.
const TRACER_PUBLISH_LIMIT: Duration = Duration::from_secs(120);
/// The most slices a fill reports.
const MAX_SLICES: u32 = 1000;

pub fn fill(run: &Run, args: &ScaleFillArgs) -> anyhow::Result<()> {
    if args.count == 0 || args.min_ms == 0 || args.max_ms < args.min_ms {
        bail!("need --count >= 1 and 0 < --min-ms <= --max-ms");
    }
    if args.slices == 0 || args.slices > MAX_SLICES || u64::from(args.slices) > args.count {
        bail!("--slices must be within 1..={MAX_SLICES} and at most --count");
    }
    let mut admin = run.connect()?;
    let exchange = declare_fill(&mut admin, args)?;
    let _ = admin.close();
    let duration = Duration::from_secs_f64(args.timeout_s);
    let spec = PublisherSpec {
        exchange,
        queue: args.queue.clone(),
        quota: args.count,
        duration,
        rate: 0,
        confirm_window: args.confirm,
        persistent: true,
        size: BODY_LEN,
    };
    let slices = Rc::new(RefCell::new(Slices::new(run.broker.clone(), args.count, args.slices)));
    let mut flow = Flow::new();
    let watched = slices.clone();
    flow.watch(move |published| watched.borrow_mut().observe(published));
    flow.add_publisher(run, spec, Some(fill_shape(args)));
    let outcome = flow.run(run, Duration::ZERO, duration + HARD_LIMIT_SLACK)?;
    let slices = slices.borrow();
    report_fill(run, args, &outcome, &slices)
}

/// Declares where the fill waits; returns the exchange to publish to ("" for `--via ttl`).
fn declare_fill(client: &mut Client, args: &ScaleFillArgs) -> anyhow::Result<String> {
    match args.via {
        WaitVia::Delayed => {
            declare_delayed_queue(client, &args.exchange, &args.queue, true)?;
            Ok(args.exchange.clone())
        }
        WaitVia::Ttl => {
            let due = format!("{}-due", args.queue);
            declare_queues(client, std::slice::from_ref(&due), true, None)?;
            let arguments = FieldTable::from_entries([
                ("x-dead-letter-exchange", FieldValue::LongStr("".into())),
                ("x-dead-letter-routing-key", FieldValue::LongStr(due.as_str().into())),
            ]);
            let declare =
                QueueDeclare { queue: short(&args.queue)?, durable: true, arguments, ..Default::default() };
            client.call(CHANNEL, declare)?;
            Ok(String::new())
        }
    }
}

/// Each fill message: its due time and index in the body, a wait drawn from min..=max.
fn fill_shape(args: &ScaleFillArgs) -> Shape {
    let (via, min_ms, max_ms) = (args.via, args.min_ms, args.max_ms);
    let mut random = Lcg(args.seed);
    let mut index = 0u64;
    Box::new(move |body: &mut [u8]| {
        let wait_ms = random.between(min_ms, max_ms);
        body.copy_from_slice(&deadline_body(wall_ms() + wait_ms, index));
        index += 1;
        Some(match via {
            WaitVia::Delayed => delayed_by(wait_ms),
            WaitVia::Ttl => expiring_in(wait_ms),
        })
    })
}

/// The end of one slice of the fill.
#[derive(Clone, Copy, Debug)]
struct Mark {
    published: u64,
    at: Duration,
    rss_kib: Option<u64>,
}

/// Marks the end of every slice as the published count passes it.
struct Slices {
    broker: Option<Probe>,
    bounds: Vec<u64>,
    /// The first observation: the start of the fill.
    start: Option<(Instant, Option<u64>)>,
    marks: Vec<Mark>,
}

impl Slices {
    fn new(broker: Option<Probe>, count: u64, slices: u32) -> Slices {
        let slices = u64::from(slices);
        let bounds = (1..=slices).map(|k| count * k / slices).collect();
        Slices { broker, bounds, start: None, marks: Vec::new() }
    }

    fn observe(&mut self, published: u64) {
        let now = Instant::now();
        if self.start.is_none() {
            self.start = Some((now, self.broker.as_ref().and_then(Probe::rss_kib)));
        }
        let Some((started, _)) = self.start else { return };
        while self.bounds.get(self.marks.len()).is_some_and(|&bound| published >= bound) {
            let mark =
                Mark { published, at: now - started, rss_kib: self.broker.as_ref().and_then(Probe::rss_kib) };
            eprintln!(
                "slice {}: {} published after {:.2}s, broker RSS {}",
                self.marks.len() + 1,
                published,
                mark.at.as_secs_f64(),
                mark.rss_kib.map_or("n/a".to_owned(), |kib| format!("{:.1} MiB", kib as f64 / 1024.0))
            );
            self.marks.push(mark);
        }
    }

    /// Per slice: where it ended, its rate, the RSS and bytes per waiting message then.
    fn json(&self) -> Vec<Value> {
        let rss_start = self.start.and_then(|(_, rss)| rss);
        let mut previous = Mark { published: 0, at: Duration::ZERO, rss_kib: rss_start };
        let mut rows = Vec::with_capacity(self.marks.len());
        for mark in &self.marks {
            let seconds = (mark.at - previous.at).as_secs_f64();
            let rate = (seconds > 0.0).then(|| (mark.published - previous.published) as f64 / seconds);
            rows.push(json!({
                "published": mark.published,
                "elapsed_s": round3(mark.at.as_secs_f64()),
                "msg_per_s": rate.map(f64::round),
                "broker_rss_kib": mark.rss_kib,
                "broker_bytes_per_waiting_msg": bytes_per(rss_start, mark.rss_kib, mark.published),
            }));
            previous = *mark;
        }
        rows
    }
}

/// RSS growth from `start` to `now` per message, in bytes.
fn bytes_per(start: Option<u64>, now: Option<u64>, messages: u64) -> Option<f64> {
    let (start, now) = (start?, now?);
    Some((now.saturating_sub(start) * 1024) as f64 / messages.max(1) as f64).map(|b| b.round())
}

fn report_fill(
    run: &Run,
    args: &ScaleFillArgs,
    outcome: &FlowOutcome,
    slices: &Slices,
) -> anyhow::Result<()> {
    let m = &outcome.measured;
    let rows = slices.json();
    let rate = |row: Option<&Value>| row.and_then(|r| r["msg_per_s"].as_f64()).unwrap_or(0.0);
    let (first, last) = (rate(rows.first()), rate(rows.last()));
    let slowest = rows.iter().filter_map(|r| r["msg_per_s"].as_f64()).fold(f64::INFINITY, f64::min);
    let rss_start = slices.start.and_then(|(_, rss)| rss);
    let rss_end = slices.marks.last().and_then(|mark| mark.rss_kib);
    let per_message = bytes_per(rss_start, rss_end, outcome.published);
    let mut human = format!(
        "{} of {} waiting ({:?}), {} nacked: {} (first slice {first:.0}, last {last:.0}, slowest {slowest:.0} \
         msg/s)",
        outcome.published,
        args.count,
        args.via,
        outcome.nacked,
        m.human(outcome.published, "msg"),
    );
    if let Some(bytes) = per_message {
        human += &format!(", broker RSS +{bytes:.0} B per waiting message");
    }
    let mut results = m.json(outcome.published);
    results["published"] = json!(outcome.published);
    results["nacked"] = json!(outcome.nacked);
    results["complete"] = json!(outcome.published == args.count && outcome.nacked == 0);
    results["broker_rss_start_kib"] = json!(rss_start);
    results["broker_bytes_per_waiting_msg"] = json!(per_message);
    results["slices"] = json!(rows);
    let params = json!({
        "via": format!("{:?}", args.via).to_lowercase(), "exchange": args.exchange, "queue": args.queue,
        "count": args.count, "min_ms": args.min_ms, "max_ms": args.max_ms, "confirm": args.confirm,
        "slices": args.slices, "seed": args.seed,
    });
    report::print("scale-fill", run.label.as_deref(), &run.target(), &human, params, results);
    Ok(())
}

pub fn tracers(run: &Run, args: &ScaleTracersArgs) -> anyhow::Result<()> {
    if args.count == 0 {
        bail!("--count must be at least 1");
    }
    let mut admin = run.connect()?;
    declare_delayed_queue(&mut admin, &args.exchange, &args.queue, true)?;
    let _ = admin.close();
    let first_due_ms = wall_ms() + args.due_in_ms;
    let spec = PublisherSpec {
        exchange: args.exchange.clone(),
        queue: args.queue.clone(),
        quota: args.count,
        duration: TRACER_PUBLISH_LIMIT,
        rate: 0,
        confirm_window: args.confirm,
        persistent: true,
        size: BODY_LEN,
    };
    let mut flow = Flow::new();
    flow.add_publisher(run, spec, Some(tracer_shape(first_due_ms, args.spread_ms, args.count)));
    let outcome = flow.run(run, Duration::ZERO, TRACER_PUBLISH_LIMIT + HARD_LIMIT_SLACK)?;
    let last_due_ms = due_ms(first_due_ms, args.spread_ms, args.count, args.count - 1);
    let human = format!(
        "{} tracers published ({} nacked) in {:.2}s, due from {first_due_ms} to {last_due_ms} (wall ms)",
        outcome.published,
        outcome.nacked,
        outcome.measured.elapsed.as_secs_f64()
    );
    let mut results = outcome.measured.json(outcome.published);
    results["published"] = json!(outcome.published);
    results["nacked"] = json!(outcome.nacked);
    results["first_due_ms"] = json!(first_due_ms);
    results["last_due_ms"] = json!(last_due_ms);
    let params = json!({
        "exchange": args.exchange, "queue": args.queue, "count": args.count,
        "due_in_ms": args.due_in_ms, "spread_ms": args.spread_ms, "confirm": args.confirm,
    });
    report::print("scale-tracers", run.label.as_deref(), &run.target(), &human, params, results);
    Ok(())
}

/// When tracer `index` of `count` is due: spread evenly over `spread_ms` from `first_due_ms`.
fn due_ms(first_due_ms: u64, spread_ms: u64, count: u64, index: u64) -> u64 {
    first_due_ms + spread_ms * index / count.max(1)
}

/// Each tracer: its due time and index in the body, `x-delay` = due − now when it is encoded.
fn tracer_shape(first_due_ms: u64, spread_ms: u64, count: u64) -> Shape {
    let mut index = 0u64;
    Box::new(move |body: &mut [u8]| {
        let due = due_ms(first_due_ms, spread_ms, count, index);
        body.copy_from_slice(&deadline_body(due, index));
        index += 1;
        // An x-delay of 0 means "not delayed"; a tracer already due waits 1 ms.
        Some(delayed_by(due.saturating_sub(wall_ms()).max(1)))
    })
}

pub fn consume_tracers(run: &Run, args: &ScaleTracersConsumeArgs) -> anyhow::Result<()> {
    let lateness = Arc::new(Mutex::new(Vec::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let consumer =
        deadlines::spawn_consumer(run, &args.queue, Kind::Delayed, 0, lateness.clone(), stop.clone())?;
    deadlines::wait_for_samples(&lateness, args.count, started + Duration::from_secs_f64(args.timeout_s));
    stop.store(true, Ordering::Relaxed);
    let _ = consumer.join();
    let waited = started.elapsed();
    let mut samples = deadlines::take_samples(&lateness)?;
    samples.sort_unstable();
    let arrived = samples.len() as u64;
    let early = samples.iter().filter(|&&late| late < 0).count();
    let missing = args.count.saturating_sub(arrived);
    let (p50, p99, max) = (percentile(&samples, 0.5), percentile(&samples, 0.99), percentile(&samples, 1.0));
    let min = samples.first().copied().unwrap_or(0);
    let human = format!(
        "{arrived}/{} tracers; lateness p50 {p50} ms, p99 {p99} ms, max {max} ms (min {min} ms); {early} early; \
         {missing} missing; waited {:.1}s",
        args.count,
        waited.as_secs_f64()
    );
    let results = json!({
        "arrived": arrived,
        "missing": missing,
        "early": early,
        "lateness_min_ms": min,
        "lateness_p50_ms": p50,
        "lateness_p99_ms": p99,
        "lateness_max_ms": max,
        "waited_s": round3(waited.as_secs_f64()),
    });
    let params = json!({ "queue": args.queue, "count": args.count, "timeout_s": args.timeout_s });
    report::print("scale-tracers-consume", run.label.as_deref(), &run.target(), &human, params, results);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Tracers' due times are spread evenly from the first over the window, the last inside it.
    #[test]
    fn tracer_due_times_spread_over_the_window() {
        assert_eq!(due_ms(1_000, 10_000, 4, 0), 1_000);
        assert_eq!(due_ms(1_000, 10_000, 4, 1), 3_500);
        assert_eq!(due_ms(1_000, 10_000, 4, 3), 8_500);
    }

    /// Each slice's rate counts the messages published within it over its own time.
    #[test]
    fn slices_report_the_rate_within_each_slice() {
        let mut slices = Slices::new(None, 100, 2);
        let started = Instant::now();
        slices.start = Some((started, None));
        slices.marks.push(Mark { published: 50, at: Duration::from_secs(1), rss_kib: None });
        slices.marks.push(Mark { published: 100, at: Duration::from_secs(3), rss_kib: None });
        let rows = slices.json();
        assert_eq!(rows[0]["msg_per_s"], json!(50.0));
        assert_eq!(rows[1]["msg_per_s"], json!(25.0));
    }

    /// Bytes per waiting message: RSS growth over the messages, unknown without a broker PID.
    #[test]
    fn bytes_per_message_from_rss_growth() {
        assert_eq!(bytes_per(Some(1_000), Some(2_000), 1_024), Some(1_000.0));
        assert_eq!(bytes_per(None, Some(2_000), 1_024), None);
    }
}
