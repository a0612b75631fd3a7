//! `latency`: one producer at a fixed rate → one queue → one auto-ack consumer, both in this
//! process; each body carries its send time (ns since a shared epoch), so latency is measured
//! on one clock. Reports p50/p95/p99/max over every message received.

use std::time::{Duration, Instant};

use anyhow::bail;
use serde_json::json;

use super::consumer::{ConsumerSpec, STAMP_LEN};
use super::flow::Flow;
use super::publisher::{PublisherSpec, Shape};
use super::{declare_queues, delete_queues, queue_name, Run};
use crate::cli::LatencyArgs;
use crate::measure::{percentile, round3};
use crate::report;

/// Slack over publishing time + drain timeout before the coordinator gives up regardless.
const HARD_LIMIT_SLACK: Duration = Duration::from_secs(30);

pub fn run(run: &Run, args: &LatencyArgs) -> anyhow::Result<()> {
    if args.size < STAMP_LEN {
        bail!("--size must be at least {STAMP_LEN} (the send time lives in the body)");
    }
    if args.rate == 0 {
        bail!("--rate must be at least 1");
    }
    let names = vec![queue_name("lat", 0)];
    let mut admin = run.connect()?;
    declare_queues(&mut admin, &names, false, None)?;
    let epoch = Instant::now();
    let mut flow = Flow::new();
    let consumer = ConsumerSpec {
        queue: names[0].clone(),
        auto_ack: true,
        prefetch: 0,
        ack_every: 1,
        latency_epoch: Some(epoch),
    };
    flow.add_consumer(run, consumer)?;
    let duration = Duration::from_secs_f64(args.duration_s);
    let publisher = PublisherSpec {
        exchange: String::new(),
        queue: names[0].clone(),
        quota: args.count(),
        duration,
        rate: args.rate,
        confirm_window: 0,
        persistent: false,
        size: args.size,
    };
    flow.add_publisher(run, publisher, Some(send_time_stamp(epoch)));
    let drain = Duration::from_secs_f64(args.drain_timeout_s);
    let mut outcome = flow.run(run, drain, duration + drain + HARD_LIMIT_SLACK)?;
    delete_queues(&mut admin, &names)?;
    let _ = admin.close();

    outcome.latencies_ns.sort_unstable();
    let us = |q: f64| percentile(&outcome.latencies_ns, q) as f64 / 1000.0;
    let (p50, p95, p99, max) = (us(0.50), us(0.95), us(0.99), us(1.0));
    let m = &outcome.measured;
    let human = format!(
        "p50 {p50:.0} µs, p95 {p95:.0} µs, p99 {p99:.0} µs, max {max:.0} µs at {} msg/s; {}{}",
        args.rate,
        m.human(outcome.consumed, "msg"),
        if outcome.complete { "" } else { " (INCOMPLETE: drain timed out)" }
    );
    let mut results = m.json(outcome.consumed);
    results["published"] = json!(outcome.published);
    results["consumed"] = json!(outcome.consumed);
    results["complete"] = json!(outcome.complete);
    results["msg_per_s"] = json!(round3(m.rate_per_s(outcome.consumed)));
    results["p50_us"] = json!(round3(p50));
    results["p95_us"] = json!(round3(p95));
    results["p99_us"] = json!(round3(p99));
    results["max_us"] = json!(round3(max));
    let params =
        json!({ "rate": args.rate, "size": args.size, "duration_s": args.duration_s, "count": args.count() });
    report::print("latency", run.label.as_deref(), &run.target(), &human, params, results);
    Ok(())
}

/// Writes the send time (ns since `epoch`, big-endian) into the first octets of each body.
fn send_time_stamp(epoch: Instant) -> Shape {
    Box::new(move |body: &mut [u8]| {
        let now_ns = u64::try_from(epoch.elapsed().as_nanos()).unwrap_or(u64::MAX);
        if let Some(slot) = body.get_mut(..STAMP_LEN) {
            slot.copy_from_slice(&now_ns.to_be_bytes());
        }
        None
    })
}
