//! The scenarios, and what they share: the run's target, queue set-up and tear-down, and a
//! start gate so every connection is open before the measured window starts.

mod confirms;
mod consumer;
pub mod deadlines;
pub mod declares;
pub mod depth;
pub mod drain;
mod flow;
pub mod get;
pub mod idle;
pub mod latency;
mod publisher;
mod publisher_amqp1;
pub mod scale;
pub mod throughput;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::{bail, Context};
use hourglass_wire::{ExchangeDeclare, FieldTable, FieldValue, Method, QueueBind, QueueDeclare, QueueDelete};

use crate::client::{short, Client};
use crate::probe::Probe;
use crate::url::AmqpUrl;

/// How long a blocking read waits before a worker re-checks its stop conditions.
pub const READ_TIMEOUT: Duration = Duration::from_millis(100);
/// How long every worker has to connect and set up before the run is abandoned.
const SETUP_TIMEOUT: Duration = Duration::from_secs(60);
/// The channel number every worker uses (one channel per connection).
pub const CHANNEL: u16 = 1;

/// What every scenario is given.
pub struct Run {
    pub url: AmqpUrl,
    pub broker: Option<Probe>,
    pub label: Option<String>,
}

impl Run {
    /// A connection with channel [`CHANNEL`] open.
    pub fn connect(&self) -> anyhow::Result<Client> {
        Run::client(&self.url)
    }

    /// A connection to `url` with channel [`CHANNEL`] open (for worker threads).
    pub fn client(url: &AmqpUrl) -> anyhow::Result<Client> {
        let mut client = Client::connect(url, READ_TIMEOUT)?;
        client.open_channel(CHANNEL)?;
        Ok(client)
    }

    /// `host:port` for reports.
    pub fn target(&self) -> String {
        self.url.address()
    }

    /// The broker's RSS now, with `--broker-pid`.
    pub fn broker_rss_kib(&self) -> Option<u64> {
        self.broker.as_ref().and_then(Probe::rss_kib)
    }
}

/// A queue name unique to this process, so runs never share state.
pub fn queue_name(scenario: &str, index: u16) -> String {
    format!("perf-{scenario}-{}-{index}", std::process::id())
}

/// Declares `names` (non-exclusive, not auto-delete; durable if asked;
/// `queue_type`: RabbitMQ's `x-queue-type`, e.g. `quorum`).
pub fn declare_queues(
    client: &mut Client,
    names: &[String],
    durable: bool,
    queue_type: Option<&str>,
) -> anyhow::Result<()> {
    let arguments = match queue_type {
        Some(kind) => {
            FieldTable::from_entries([("x-queue-type", hourglass_wire::FieldValue::LongStr(kind.into()))])
        }
        None => FieldTable::new(),
    };
    for name in names {
        let declare =
            QueueDeclare { queue: short(name)?, durable, arguments: arguments.clone(), ..Default::default() };
        match client.call(CHANNEL, declare)? {
            Method::QueueDeclareOk(_) => {}
            other => bail!("expected queue.declare-ok, got {}", other.name()),
        }
    }
    Ok(())
}

/// Declares an `x-delayed-message` exchange routing as `direct` (the delayed-message plugin's
/// exchange, semantics §3) and `queue`, bound to it with the queue's name as key.
pub fn declare_delayed_queue(
    client: &mut Client,
    exchange: &str,
    queue: &str,
    durable: bool,
) -> anyhow::Result<()> {
    let arguments = FieldTable::from_entries([("x-delayed-type", FieldValue::LongStr("direct".into()))]);
    let declare = ExchangeDeclare {
        exchange: short(exchange)?,
        kind: short("x-delayed-message")?,
        durable,
        arguments,
        ..Default::default()
    };
    client.call(CHANNEL, declare).context("this broker has no x-delayed-message exchange type")?;
    client.call(CHANNEL, QueueDeclare { queue: short(queue)?, durable, ..Default::default() })?;
    let bind = QueueBind {
        queue: short(queue)?,
        exchange: short(exchange)?,
        routing_key: short(queue)?,
        ..Default::default()
    };
    client.call(CHANNEL, bind)?;
    Ok(())
}

/// Deletes `names`, ignoring nothing: a failure here means the broker is unwell.
pub fn delete_queues(client: &mut Client, names: &[String]) -> anyhow::Result<()> {
    for name in names {
        client.call(CHANNEL, QueueDelete { queue: short(name)?, ..Default::default() })?;
    }
    Ok(())
}

/// Opened once every worker is ready (`go = true`), or to abort (`go = false`).
#[derive(Clone, Default)]
pub struct Gate(Arc<(Mutex<Option<bool>>, Condvar)>);

impl Gate {
    /// Opens the gate with the verdict.
    pub fn open(&self, go: bool) {
        let (lock, wake) = &*self.0;
        if let Ok(mut state) = lock.lock() {
            *state = Some(go);
        }
        wake.notify_all();
    }

    /// Blocks until opened; true = start.
    pub fn wait(&self) -> bool {
        let (lock, wake) = &*self.0;
        let Ok(mut state) = lock.lock() else { return false };
        loop {
            if let Some(go) = *state {
                return go;
            }
            state = match wake.wait(state) {
                Ok(state) => state,
                Err(_) => return false,
            };
        }
    }
}

/// Workers that report readiness, then wait at the gate.
pub struct Crew<T> {
    handles: Vec<JoinHandle<anyhow::Result<T>>>,
    ready_tx: mpsc::Sender<anyhow::Result<()>>,
    ready_rx: mpsc::Receiver<anyhow::Result<()>>,
    gate: Gate,
    failed: Arc<AtomicBool>,
}

impl<T: Send + 'static> Crew<T> {
    pub fn new() -> Crew<T> {
        let (ready_tx, ready_rx) = mpsc::channel();
        Crew { handles: Vec::new(), ready_tx, ready_rx, gate: Gate::default(), failed: Arc::default() }
    }

    /// Spawns a worker: `setup` runs first (its result is reported), then `work` after the gate.
    pub fn spawn<S, W>(&mut self, setup: impl FnOnce() -> anyhow::Result<S> + Send + 'static, work: W)
    where
        S: Send + 'static,
        W: FnOnce(S) -> anyhow::Result<T> + Send + 'static,
    {
        let ready = self.ready_tx.clone();
        let gate = self.gate.clone();
        let failed = self.failed.clone();
        self.handles.push(std::thread::spawn(move || {
            let state = match setup() {
                Ok(state) => {
                    let _ = ready.send(Ok(()));
                    state
                }
                Err(e) => {
                    let _ = ready.send(Err(anyhow::anyhow!("{e:#}")));
                    return Err(e);
                }
            };
            if !gate.wait() {
                bail!("run abandoned");
            }
            let outcome = work(state);
            if let Err(e) = &outcome {
                eprintln!("worker failed: {e:#}");
                failed.store(true, Ordering::Relaxed);
            }
            outcome
        }));
    }

    /// Waits until every worker is set up; opens the gate (or aborts and returns the error).
    pub fn start(&mut self) -> anyhow::Result<()> {
        for _ in 0..self.handles.len() {
            match self.ready_rx.recv_timeout(SETUP_TIMEOUT) {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    self.gate.open(false);
                    return Err(e).context("a worker failed to set up");
                }
                Err(_) => {
                    self.gate.open(false);
                    bail!("workers not ready within {SETUP_TIMEOUT:?}");
                }
            }
        }
        self.gate.open(true);
        Ok(())
    }

    /// True once any worker's work has failed.
    pub fn failed(&self) -> bool {
        self.failed.load(Ordering::Relaxed)
    }

    /// Joins every worker, returning their results (the first error wins).
    pub fn join(self) -> anyhow::Result<Vec<T>> {
        let mut results = Vec::with_capacity(self.handles.len());
        let mut first_error = None;
        for handle in self.handles {
            match handle.join() {
                Ok(Ok(value)) => results.push(value),
                Ok(Err(e)) => {
                    first_error.get_or_insert(e);
                }
                Err(_) => {
                    first_error.get_or_insert(anyhow::anyhow!("a worker panicked"));
                }
            }
        }
        match first_error {
            Some(e) => Err(e),
            None => Ok(results),
        }
    }
}
