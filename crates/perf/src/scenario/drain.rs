//! `drain`: one consumer takes N messages already waiting in a queue (a backlog filled by
//! `throughput -C 0 --keep-queues`, perhaps across a restart): the time to its first delivery,
//! the rate, and the broker's CPU time per message. Run beside `latency`, it shows what a deep
//! paged backlog being read back costs everyone else.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::anyhow;
use serde_json::json;

use super::consumer::{Consumer, ConsumerSpec};
use super::Run;
use crate::cli::DrainArgs;
use crate::measure::round3;
use crate::probe::Probe;
use crate::report;

/// How often the count is looked at: the resolution of the time to the first delivery.
const POLL: Duration = Duration::from_millis(1);

pub fn run(run: &Run, args: &DrainArgs) -> anyhow::Result<()> {
    let spec = ConsumerSpec {
        queue: args.queue.clone(),
        auto_ack: args.auto_ack,
        prefetch: args.prefetch,
        ack_every: args.ack_every,
        latency_epoch: None,
    };
    let (consumed, stop) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicBool::new(false)));
    let broker_start = run.broker.as_ref().map(Probe::sample).transpose()?;
    let started = Instant::now();
    let consumer = Consumer::setup(run.connect()?, spec)?;
    let worker = {
        let (consumed, stop) = (consumed.clone(), stop.clone());
        std::thread::spawn(move || consumer.run(&consumed, &stop))
    };
    let deadline = started + Duration::from_secs_f64(args.timeout_s);
    let mut first = None;
    while Instant::now() < deadline && consumed.load(Ordering::Relaxed) < args.messages {
        if first.is_none() && consumed.load(Ordering::Relaxed) > 0 {
            first = Some(started.elapsed());
        }
        std::thread::sleep(POLL);
    }
    let elapsed = started.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    let outcome = worker.join().map_err(|_| anyhow!("the consumer panicked"))??;
    let cpu_us = match (&run.broker, broker_start) {
        (Some(probe), Some(start)) => Some(probe.usage(start, probe.sample()?).cpu_us),
        _ => None,
    };
    let got = outcome.consumed;
    let rate = got as f64 / elapsed.max(1e-9);
    let cpu_per_msg_us = cpu_us.map(|us| us as f64 / got.max(1) as f64);
    let human = format!(
        "{got}/{} from {} in {elapsed:.2}s ({rate:.0} msg/s; first after {:.3}s{})",
        args.messages,
        args.queue,
        first.unwrap_or_default().as_secs_f64(),
        cpu_per_msg_us.map(|us| format!("; broker {us:.2} µs CPU/msg")).unwrap_or_default()
    );
    let params = json!({
        "queue": args.queue, "messages": args.messages, "auto_ack": args.auto_ack,
        "prefetch": args.prefetch, "ack_every": args.ack_every,
    });
    let results = json!({
        "consumed": got,
        "elapsed_s": round3(elapsed),
        "msgs_per_s": rate.round(),
        "first_delivery_s": first.map(|d| round3(d.as_secs_f64())),
        "broker_cpu_us_per_msg": cpu_per_msg_us.map(round3),
    });
    report::print("drain", run.label.as_deref(), &run.target(), &human, params, results);
    if got < args.messages {
        anyhow::bail!("{got} of {} messages within {} s", args.messages, args.timeout_s);
    }
    Ok(())
}
