//! `throughput`: P producers → Q queues → C consumers, as fast as they go (or at `--rate`).
//! The window runs from the moment every connection is ready until the last published message
//! has been consumed, so every message counted went all the way through the broker; msg/s and
//! broker CPU per message are both taken over consumed messages.

use std::time::Duration;

use anyhow::bail;
use serde_json::json;

use super::consumer::ConsumerSpec;
use super::flow::Flow;
use super::publisher::PublisherSpec;
use super::{declare_queues, delete_queues, queue_name, Run};
use crate::cli::ThroughputArgs;
use crate::measure::round3;
use crate::report;

/// Slack over publishing time + drain timeout before the coordinator gives up regardless.
const HARD_LIMIT_SLACK: Duration = Duration::from_secs(60);
/// The most workers of one kind: each is a thread and a connection.
const MAX_WORKERS: u16 = 1000;

pub fn run(run: &Run, args: &ThroughputArgs) -> anyhow::Result<()> {
    if args.producers == 0 || args.queues == 0 {
        bail!("producers and queues must be at least 1");
    }
    if args.producers > MAX_WORKERS || args.consumers > MAX_WORKERS {
        bail!("at most {MAX_WORKERS} producers and consumers");
    }
    let names: Vec<String> = (0..args.queues)
        .map(|i| match &args.queue_name {
            Some(name) => format!("{name}-{i}"),
            None => queue_name("tp", i),
        })
        .collect();
    let mut admin = run.connect()?;
    declare_queues(&mut admin, &names, args.durable, args.queue_type.as_deref())?;
    let mut flow = Flow::new();
    for j in 0..args.consumers {
        let spec = ConsumerSpec {
            queue: names[usize::from(j % args.queues)].clone(),
            auto_ack: args.auto_ack,
            prefetch: args.prefetch,
            ack_every: args.ack_every,
            latency_epoch: None,
        };
        flow.add_consumer(run, spec)?;
    }
    let duration = Duration::from_secs_f64(args.duration_s);
    for i in 0..args.producers {
        let quota = args.count() / u64::from(args.producers)
            + u64::from(u64::from(i) < args.count() % u64::from(args.producers));
        let spec = PublisherSpec {
            exchange: String::new(),
            queue: names[usize::from(i % args.queues)].clone(),
            quota,
            duration,
            rate: args.rate,
            confirm_window: args.confirm,
            persistent: args.persistent,
            size: args.size,
        };
        if args.amqp1 {
            flow.add_amqp1_publisher(run, spec);
        } else {
            flow.add_publisher(run, spec, None);
        }
    }
    let drain = Duration::from_secs_f64(args.drain_timeout_s);
    let outcome = flow.run(run, drain, duration + drain + HARD_LIMIT_SLACK)?;
    if !args.keep_queues {
        delete_queues(&mut admin, &names)?;
    }
    let _ = admin.close();

    let m = &outcome.measured;
    // Filling (no consumers) counts what went in; otherwise what came all the way through.
    let filling = args.consumers == 0;
    let through = if filling { outcome.published } else { outcome.consumed };
    let mut human = m.human(through, "msg");
    human += &format!(" ({} published, {} consumed", outcome.published, outcome.consumed);
    if args.confirm > 0 {
        human += &format!(", {} nacked", outcome.nacked);
    }
    human += if outcome.complete { ")" } else { ", INCOMPLETE: drain timed out)" };
    let mut results = m.json(through);
    if let (true, Some(usage)) = (filling, m.broker) {
        let grown = usage.rss_end_kib.saturating_sub(usage.rss_start_kib) * 1024;
        let per_message = grown as f64 / outcome.published.max(1) as f64;
        human += &format!(", broker RSS +{per_message:.0} B/msg queued");
        results["broker_rss_bytes_per_queued_msg"] = json!(round3(per_message));
    }
    results["published"] = json!(outcome.published);
    results["consumed"] = json!(outcome.consumed);
    results["nacked"] = json!(outcome.nacked);
    results["complete"] = json!(outcome.complete);
    results["msg_per_s"] = json!(round3(m.rate_per_s(through)));
    let params = json!({
        "producers": args.producers, "consumers": args.consumers, "queues": args.queues,
        "size": args.size, "duration_s": args.duration_s, "count": args.count(), "rate": args.rate,
        "confirm": args.confirm, "persistent": args.persistent, "durable": args.durable, "queue_type": args.queue_type,
        "prefetch": args.prefetch, "auto_ack": args.auto_ack, "ack_every": args.ack_every,
    });
    report::print("throughput", run.label.as_deref(), &run.target(), &human, params, results);
    Ok(())
}
