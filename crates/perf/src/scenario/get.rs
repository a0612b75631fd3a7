//! `get`: basic.get polling. The queue is filled first (with confirms, outside the measured
//! window); then each poller does one basic.get at a time (a synchronous round trip) until the
//! time or count bound. Reports gets per second per poller and the broker's CPU per get.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::bail;
use hourglass_wire::{BasicAck, BasicGet, Method};
use serde_json::json;

use super::publisher::{Publisher, PublisherSpec};
use super::{declare_queues, delete_queues, queue_name, Crew, Run, CHANNEL};
use crate::cli::GetArgs;
use crate::client::short;
use crate::measure::{round3, Window};
use crate::progress::Progress;
use crate::report;

/// Confirm window while pre-filling: fast, yet every message is in the queue before timing.
const PREFILL_CONFIRM_WINDOW: u32 = 1000;
/// The longest the pre-fill may take.
const PREFILL_LIMIT: Duration = Duration::from_secs(120);

#[derive(Default)]
struct Counts {
    ok: AtomicU64,
    empty: AtomicU64,
}

pub fn run(run: &Run, args: &GetArgs) -> anyhow::Result<()> {
    if args.pollers == 0 {
        bail!("--pollers must be at least 1");
    }
    let names = vec![args.queue.clone().unwrap_or_else(|| queue_name("get", 0))];
    let mut admin = run.connect()?;
    if args.queue.is_none() {
        declare_queues(&mut admin, &names, false, None)?;
        prefill(run, &names[0], args)?;
    }

    let counts = Arc::new(Counts::default());
    let abort = Arc::new(AtomicBool::new(false));
    let mut crew: Crew<()> = Crew::new();
    let duration = Duration::from_secs_f64(args.duration_s);
    for _ in 0..args.pollers {
        let (url, queue, counts, abort) = (run.url.clone(), names[0].clone(), counts.clone(), abort.clone());
        let (no_ack, cap) = (!args.ack, args.count());
        crew.spawn(
            move || Run::client(&url),
            move |mut client| {
                let get = BasicGet { queue: short(&queue)?, no_ack };
                let deadline = Instant::now() + duration;
                while Instant::now() < deadline && !abort.load(Ordering::Relaxed) {
                    if counts.ok.load(Ordering::Relaxed) + counts.empty.load(Ordering::Relaxed) >= cap {
                        break;
                    }
                    match client.call(CHANNEL, get.clone())? {
                        Method::BasicGetOk(ok) => {
                            counts.ok.fetch_add(1, Ordering::Relaxed);
                            if !no_ack {
                                let ack = BasicAck { delivery_tag: ok.delivery_tag, multiple: false };
                                client.send(CHANNEL, &ack.into());
                            }
                        }
                        Method::BasicGetEmpty(_) => {
                            counts.empty.fetch_add(1, Ordering::Relaxed);
                        }
                        other => bail!("expected basic.get-ok or get-empty, got {}", other.name()),
                    }
                }
                client.flush()?;
                let _ = client.close();
                Ok(())
            },
        );
    }
    crew.start()?;
    let window = Window::open(run.broker.as_ref())?;
    let progress_counts = counts.clone();
    let progress = Progress::start(move || {
        format!(
            "get-ok {} get-empty {}",
            progress_counts.ok.load(Ordering::Relaxed),
            progress_counts.empty.load(Ordering::Relaxed)
        )
    });
    let joined = crew.join();
    let measured = window.close()?;
    progress.stop();
    abort.store(true, Ordering::Relaxed);
    joined?;
    if args.queue.is_none() {
        delete_queues(&mut admin, &names)?;
    }
    let _ = admin.close();

    let (ok, empty) = (counts.ok.load(Ordering::Relaxed), counts.empty.load(Ordering::Relaxed));
    let gets = ok + empty;
    let per_poller = measured.rate_per_s(gets) / f64::from(args.pollers);
    let human = format!(
        "{per_poller:.0} gets/s per poller ({ok} get-ok, {empty} get-empty, {} pollers); {}",
        args.pollers,
        measured.human(gets, "get")
    );
    let mut results = measured.json(gets);
    results["get_ok"] = json!(ok);
    results["get_empty"] = json!(empty);
    results["gets_per_s_per_poller"] = json!(round3(per_poller));
    let params = json!({
        "pollers": args.pollers, "prefill": if args.queue.is_some() { 0 } else { args.prefill }, "size": args.size,
        "duration_s": args.duration_s, "count": args.count(), "ack": args.ack, "queue": args.queue,
    });
    report::print("get", run.label.as_deref(), &run.target(), &human, params, results);
    Ok(())
}

/// Publishes `--prefill` messages with confirms, so they are all queued before the window.
fn prefill(run: &Run, queue: &str, args: &GetArgs) -> anyhow::Result<()> {
    if args.prefill == 0 {
        return Ok(());
    }
    let spec = PublisherSpec {
        exchange: String::new(),
        queue: queue.to_owned(),
        quota: args.prefill,
        duration: PREFILL_LIMIT,
        rate: 0,
        confirm_window: PREFILL_CONFIRM_WINDOW,
        persistent: false,
        size: args.size,
    };
    let publisher = Publisher::setup(run.connect()?, spec)?;
    let published = AtomicU64::new(0);
    let done = publisher.run(&published, &AtomicBool::new(false), None)?;
    if done.published < args.prefill {
        bail!("pre-fill published only {} of {} messages in {PREFILL_LIMIT:?}", done.published, args.prefill);
    }
    eprintln!("pre-filled {queue} with {} messages", done.published);
    Ok(())
}
