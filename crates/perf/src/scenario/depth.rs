//! `depth`: waits until a queue holds at least N messages, connecting afresh for every poll so a
//! broker that is still starting (or recovering its store) is polled as a client would find it.
//! Started together with a broker, the time it reports is the broker's recovery time.

use std::time::{Duration, Instant};

use anyhow::bail;
use hourglass_wire::{FieldTable, Method, QueueDeclare};
use serde_json::json;

use super::{Run, CHANNEL};
use crate::cli::DepthArgs;
use crate::client::short;
use crate::measure::round3;
use crate::report;

/// Time between polls: fine enough for recovery times of a second or more.
const POLL: Duration = Duration::from_millis(20);

pub fn run(run: &Run, args: &DepthArgs) -> anyhow::Result<()> {
    let started = Instant::now();
    let deadline = started + Duration::from_secs_f64(args.timeout_s);
    let mut first_answer: Option<Duration> = None;
    let mut last_count = 0u64;
    while Instant::now() < deadline {
        if let Ok(count) = message_count(run, &args.queue) {
            first_answer.get_or_insert_with(|| started.elapsed());
            last_count = count;
            if count >= args.messages {
                let elapsed = started.elapsed().as_secs_f64();
                let human = format!(
                    "{count} messages in {} after {elapsed:.2}s (first answer after {:.2}s)",
                    args.queue,
                    first_answer.unwrap_or_default().as_secs_f64()
                );
                let params = json!({"queue": args.queue, "messages": args.messages});
                let results = json!({
                    "elapsed_s": round3(elapsed),
                    "first_answer_s": first_answer.map(|d| round3(d.as_secs_f64())),
                    "message_count": count,
                });
                report::print("depth", run.label.as_deref(), &run.target(), &human, params, results);
                return Ok(());
            }
        }
        std::thread::sleep(POLL);
    }
    bail!("{} held {last_count} of {} messages after {} s", args.queue, args.messages, args.timeout_s)
}

/// The queue's ready count from a passive queue.declare on a new connection.
fn message_count(run: &Run, queue: &str) -> anyhow::Result<u64> {
    let mut client = run.connect()?;
    let declare = QueueDeclare {
        queue: short(queue)?,
        passive: true,
        arguments: FieldTable::new(),
        ..Default::default()
    };
    let count = match client.call(CHANNEL, declare)? {
        Method::QueueDeclareOk(ok) => u64::from(ok.message_count),
        other => bail!("expected queue.declare-ok, got {}", other.name()),
    };
    let _ = client.close();
    Ok(count)
}
