//! A producer → queue → consumer flow shared by the throughput and latency scenarios: the
//! counters every worker updates, the workers themselves, and the wait for the last message.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::consumer::{Consumed, Consumer, ConsumerSpec};
use super::publisher::{Published, Publisher, PublisherSpec, Shape};
use super::publisher_amqp1::Amqp1Publisher;
use super::{Crew, Run};
use crate::measure::{Measured, Window};
use crate::progress::Progress;

/// How often the coordinator checks whether the last message is in (the window's precision).
const DRAIN_POLL: Duration = Duration::from_millis(1);

/// Counters shared by the workers of one run.
#[derive(Default)]
pub struct Shared {
    pub published: AtomicU64,
    pub consumed: AtomicU64,
    pub publishers_running: AtomicU64,
    /// Tells consumers to stop (after the window closed).
    pub stop: AtomicBool,
    /// Tells publishers to stop early (a worker failed).
    pub abort: AtomicBool,
}

/// What one worker did.
pub enum Tally {
    Published(Published),
    Consumed(Consumed),
}

/// A flow's workers, before they start.
pub struct Flow {
    pub shared: Arc<Shared>,
    crew: Crew<Tally>,
    /// Without consumers the flow fills queues: it is over when publishing is.
    consumers: usize,
    /// Told the published count at every poll of the run (scale runs time each slice with it).
    watcher: Option<Box<dyn FnMut(u64)>>,
}

/// A finished flow.
pub struct FlowOutcome {
    pub measured: Measured,
    pub published: u64,
    pub consumed: u64,
    pub nacked: u64,
    pub latencies_ns: Vec<u64>,
    /// Every published message was consumed before the drain timeout.
    pub complete: bool,
}

impl Flow {
    pub fn new() -> Flow {
        Flow { shared: Arc::default(), crew: Crew::new(), consumers: 0, watcher: None }
    }

    /// Adds a consumer connection.
    pub fn add_consumer(&mut self, run: &Run, spec: ConsumerSpec) -> anyhow::Result<()> {
        let url = run.url.clone();
        let shared = self.shared.clone();
        self.consumers += 1;
        self.crew.spawn(
            move || Consumer::setup(Run::client(&url)?, spec),
            move |consumer| Ok(Tally::Consumed(consumer.run(&shared.consumed, &shared.stop)?)),
        );
        Ok(())
    }

    /// Adds a publisher connection; `shape` fills in each body (and may set its properties).
    pub fn add_publisher(&mut self, run: &Run, spec: PublisherSpec, shape: Option<Shape>) {
        let url = run.url.clone();
        let shared = self.shared.clone();
        shared.publishers_running.fetch_add(1, Ordering::Relaxed);
        self.crew.spawn(
            move || Publisher::setup(Run::client(&url)?, spec),
            move |publisher| {
                let outcome = publisher.run(&shared.published, &shared.abort, shape);
                shared.publishers_running.fetch_sub(1, Ordering::Relaxed);
                Ok(Tally::Published(outcome?))
            },
        );
    }

    /// A publisher over AMQP 1.0 (`publisher_amqp1.rs`).
    pub fn add_amqp1_publisher(&mut self, run: &Run, spec: PublisherSpec) {
        let url = run.url.clone();
        let shared = self.shared.clone();
        shared.publishers_running.fetch_add(1, Ordering::Relaxed);
        self.crew.spawn(
            move || Amqp1Publisher::setup(&url, spec),
            move |publisher| {
                let outcome = publisher.run(&shared.published, &shared.abort);
                shared.publishers_running.fetch_sub(1, Ordering::Relaxed);
                Ok(Tally::Published(outcome?))
            },
        );
    }

    /// Calls `watcher` with the number of messages published so far at every poll of the run
    /// (each millisecond, on the coordinating thread), from the moment the window opens.
    pub fn watch(&mut self, watcher: impl FnMut(u64) + 'static) {
        self.watcher = Some(Box::new(watcher));
    }

    /// Starts every worker at once, measures until the last published message is consumed (or
    /// `drain_timeout` after publishing stopped), then stops the consumers.
    pub fn run(
        mut self,
        run: &Run,
        drain_timeout: Duration,
        hard_limit: Duration,
    ) -> anyhow::Result<FlowOutcome> {
        self.crew.start()?;
        let window = Window::open(run.broker.as_ref())?;
        let counters = self.shared.clone();
        let progress = Progress::start(move || {
            format!(
                "published {} consumed {}",
                counters.published.load(Ordering::Relaxed),
                counters.consumed.load(Ordering::Relaxed)
            )
        });
        let complete = self.wait_for_last_message(drain_timeout, hard_limit);
        let measured = window.close()?;
        progress.stop();
        self.shared.abort.store(true, Ordering::Relaxed);
        self.shared.stop.store(true, Ordering::Relaxed);
        let consumed_in_window = self.shared.consumed.load(Ordering::Relaxed);
        let mut outcome = FlowOutcome {
            measured,
            published: 0,
            consumed: consumed_in_window,
            nacked: 0,
            latencies_ns: Vec::new(),
            complete,
        };
        for tally in self.crew.join()? {
            match tally {
                Tally::Published(p) => {
                    outcome.published += p.published;
                    outcome.nacked += p.nacked;
                }
                Tally::Consumed(c) => outcome.latencies_ns.extend(c.latencies_ns),
            }
        }
        Ok(outcome)
    }

    fn wait_for_last_message(&mut self, drain_timeout: Duration, hard_limit: Duration) -> bool {
        let started = Instant::now();
        let mut publishing_stopped: Option<Instant> = None;
        while started.elapsed() < hard_limit && !self.crew.failed() {
            let running = self.shared.publishers_running.load(Ordering::Acquire);
            let published = self.shared.published.load(Ordering::Acquire);
            if let Some(watcher) = self.watcher.as_mut() {
                watcher(published);
            }
            let consumed = self.shared.consumed.load(Ordering::Acquire);
            if running == 0 {
                if consumed >= published || self.consumers == 0 {
                    return true;
                }
                let since = *publishing_stopped.get_or_insert_with(Instant::now);
                if since.elapsed() >= drain_timeout {
                    eprintln!("drain timeout: {consumed} of {published} messages consumed");
                    return false;
                }
            }
            std::thread::sleep(DRAIN_POLL);
        }
        false
    }
}
