//! `ttl`, `delayed`, `visibility`: how close to its deadline a broker acts on each of many
//! messages, and its memory while they wait (issues 3, 4, 5).
//!
//! - `ttl`: a head message with a one-hour TTL, then N messages with random per-message TTLs;
//!   expired messages are dead-lettered to a queue a second connection consumes. Lateness =
//!   arrival − (publish time + TTL).
//! - `delayed`: N messages through an `x-delayed-message` exchange with random `x-delay`.
//!   Lateness = arrival − (publish time + delay).
//! - `visibility`: N messages delivered to a manual-ack consumer that never acks them, on a queue
//!   with `x-visibility-timeout`. Lateness = redelivery − (first delivery + timeout).
//!
//! Deadlines travel in the body as wall-clock ms, so the figures need no broker cooperation.
//! Every run is bounded: it stops at the last deadline plus `--grace-s`, and counts what never
//! came as missing.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::bail;
use hourglass_wire::{
    BasicConsume, BasicProperties, BasicPublish, BasicQos, ExchangeDeclare, FieldTable, FieldValue, Frame,
    Method, QueueBind, QueueDeclare, QueueDelete,
};
use serde_json::json;

use super::{declare_delayed_queue, queue_name, Run, CHANNEL};
use crate::cli::DeadlineArgs;
use crate::client::{short, Client};
use crate::measure::percentile;
use crate::report;

/// A one-hour TTL for the head message, so every other message sits behind it.
const HEAD_TTL_MS: u64 = 3_600_000;
/// Body: the deadline (wall ms, 8 octets) and the message's index (8 octets).
pub const BODY_LEN: usize = 16;
/// How many published messages between progress lines.
const PROGRESS_EVERY: u64 = 100_000;

/// Which deadline is measured.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Kind {
    Ttl,
    Delayed,
    Visibility,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Ttl => "ttl",
            Kind::Delayed => "delayed",
            Kind::Visibility => "visibility",
        }
    }
}

pub fn run(run: &Run, args: &DeadlineArgs, kind: Kind) -> anyhow::Result<()> {
    if args.min_ms == 0 || args.max_ms < args.min_ms {
        bail!("need 0 < --min-ms <= --max-ms");
    }
    let mut admin = run.connect()?;
    let names = declare(&mut admin, kind, args)?;
    let lateness = Arc::new(Mutex::new(Vec::with_capacity(args.count as usize)));
    let stop = Arc::new(AtomicBool::new(false));
    let consumer = spawn_consumer(run, &names.consume, kind, args.min_ms, lateness.clone(), stop.clone())?;
    let rss_before = run.broker_rss_kib();
    let started = Instant::now();
    let last_deadline = publish(&mut admin, &names, kind, args)?;
    let published_in = started.elapsed();
    // Peak: everything published, (almost) nothing due yet while the shortest wait is running.
    let rss_after = run.broker_rss_kib();
    wait_for_samples(&lateness, args.count, last_deadline + Duration::from_secs_f64(args.grace_s));
    stop.store(true, Ordering::Relaxed);
    let _ = consumer.join();
    for queue in [&names.publish_queue, &names.consume] {
        let _ = admin.call(CHANNEL, QueueDelete { queue: short(queue)?, ..Default::default() });
    }
    let _ = admin.close();
    let mut samples = take_samples(&lateness)?;
    report_run(run, args, kind, &mut samples, published_in, rss_before.zip(rss_after))
}

struct Names {
    /// Where messages are published (queue name for the default exchange, or exchange name).
    publish_target: String,
    publish_queue: String,
    /// The queue the measuring consumer reads.
    consume: String,
}

fn declare(client: &mut Client, kind: Kind, args: &DeadlineArgs) -> anyhow::Result<Names> {
    let source = queue_name(kind.name(), 0);
    let arguments = |entries: Vec<(&str, FieldValue)>| FieldTable::from_entries(entries);
    match kind {
        Kind::Ttl => {
            let dlx = format!("{source}-dlx");
            let dlq = format!("{source}-dlq");
            client.call(
                CHANNEL,
                ExchangeDeclare { exchange: short(&dlx)?, kind: short("fanout")?, ..Default::default() },
            )?;
            client.call(CHANNEL, QueueDeclare { queue: short(&dlq)?, ..Default::default() })?;
            client.call(
                CHANNEL,
                QueueBind { queue: short(&dlq)?, exchange: short(&dlx)?, ..Default::default() },
            )?;
            let args = arguments(vec![("x-dead-letter-exchange", FieldValue::LongStr(dlx.as_str().into()))]);
            client.call(
                CHANNEL,
                QueueDeclare { queue: short(&source)?, arguments: args, ..Default::default() },
            )?;
            Ok(Names { publish_target: source.clone(), publish_queue: source, consume: dlq })
        }
        Kind::Delayed => {
            let exchange = format!("{source}-x");
            declare_delayed_queue(client, &exchange, &source, false)?;
            Ok(Names { publish_target: exchange, publish_queue: source.clone(), consume: source })
        }
        Kind::Visibility => {
            let args = arguments(vec![("x-visibility-timeout", FieldValue::I64(args.min_ms as i64))]);
            client.call(
                CHANNEL,
                QueueDeclare { queue: short(&source)?, arguments: args, ..Default::default() },
            )?;
            Ok(Names { publish_target: source.clone(), publish_queue: source.clone(), consume: source })
        }
    }
}

/// Publishes the run's messages; returns the latest deadline (for `visibility`: the time by
/// which every first delivery plus its timeout has passed, estimated after publishing).
fn publish(client: &mut Client, names: &Names, kind: Kind, args: &DeadlineArgs) -> anyhow::Result<Instant> {
    let mut random = Lcg(args.seed);
    let (exchange, routing_key) = match kind {
        Kind::Delayed => (names.publish_target.as_str(), names.publish_queue.as_str()),
        _ => ("", names.publish_target.as_str()),
    };
    let publish =
        BasicPublish { exchange: short(exchange)?, routing_key: short(routing_key)?, ..Default::default() };
    if kind == Kind::Ttl {
        let template = client.publish_template(CHANNEL, publish.clone(), expiring_in(HEAD_TTL_MS), BODY_LEN);
        client.publish(&template, &[0u8; BODY_LEN]);
    }
    let plain = client.publish_template(CHANNEL, publish.clone(), BasicProperties::default(), BODY_LEN);
    let mut last = Instant::now();
    let started = Instant::now();
    for i in 0..args.count {
        if args.rate > 0 && i % 256 == 0 {
            let due = started + Duration::from_secs_f64(i as f64 / args.rate as f64);
            client.flush()?;
            if let Some(wait) = due.checked_duration_since(Instant::now()) {
                std::thread::sleep(wait);
            }
        }
        let wait_ms = random.between(args.min_ms, args.max_ms);
        let body = deadline_body(wall_ms() + wait_ms, i);
        match kind {
            Kind::Visibility => client.publish(&plain, &body),
            Kind::Ttl | Kind::Delayed => {
                let props = if kind == Kind::Ttl { expiring_in(wait_ms) } else { delayed_by(wait_ms) };
                let template = client.publish_template(CHANNEL, publish.clone(), props, BODY_LEN);
                client.publish(&template, &body);
            }
        }
        let wait = Duration::from_millis(if kind == Kind::Visibility { args.min_ms } else { wait_ms });
        last = last.max(Instant::now() + wait);
        if i % 1024 == 0 {
            client.flush()?;
        }
        if (i + 1) % PROGRESS_EVERY == 0 {
            eprintln!("{}: published {}", kind.name(), i + 1);
        }
    }
    client.flush()?;
    Ok(last)
}

/// Reads deliveries from `queue` on its own connection, recording each message's lateness (ms)
/// from the deadline in its body (`visibility`: from its first delivery plus `visibility_ms`).
pub fn spawn_consumer(
    run: &Run,
    queue: &str,
    kind: Kind,
    visibility_ms: u64,
    lateness: Arc<Mutex<Vec<i64>>>,
    stop: Arc<AtomicBool>,
) -> anyhow::Result<std::thread::JoinHandle<()>> {
    let mut client = run.connect()?;
    let manual = kind == Kind::Visibility;
    if manual {
        client.call(CHANNEL, BasicQos { prefetch_count: 0, ..Default::default() })?;
    }
    let consume = BasicConsume { queue: short(queue)?, no_ack: !manual, ..Default::default() };
    client.call(CHANNEL, consume)?;
    let timeout_ms = visibility_ms as i64;
    Ok(std::thread::spawn(move || {
        let mut first_seen: std::collections::HashMap<u64, i64> = std::collections::HashMap::new();
        let mut current: Option<(bool, u64)> = None;
        while !stop.load(Ordering::Relaxed) {
            let frame = match client.next_frame() {
                Ok(Some(frame)) => frame,
                Ok(None) => continue,
                Err(_) => break,
            };
            match frame {
                Frame::Method { method: Method::BasicDeliver(d), .. } => {
                    current = Some((d.redelivered, d.delivery_tag))
                }
                Frame::Body { payload, .. } if payload.len() >= BODY_LEN => {
                    let now = wall_ms() as i64;
                    let field =
                        |at: usize| u64::from_be_bytes(payload[at..at + 8].try_into().unwrap_or([0; 8]));
                    let (deadline, id) = (field(0), field(8));
                    let Some((redelivered, tag)) = current.take() else { continue };
                    let late = match (kind, redelivered) {
                        (Kind::Visibility, false) => {
                            first_seen.insert(id, now);
                            None
                        }
                        (Kind::Visibility, true) => {
                            let ack = hourglass_wire::BasicAck { delivery_tag: tag, multiple: false };
                            client.send(CHANNEL, &Method::BasicAck(ack));
                            first_seen.remove(&id).map(|first| now - first - timeout_ms)
                        }
                        _ => Some(now - deadline as i64),
                    };
                    if let (Some(late), Ok(mut all)) = (late, lateness.lock()) {
                        all.push(late);
                    }
                }
                _ => {}
            }
        }
        let _ = client.flush();
        let _ = client.close();
    }))
}

fn report_run(
    run: &Run,
    args: &DeadlineArgs,
    kind: Kind,
    samples: &mut [i64],
    published_in: Duration,
    rss: Option<(u64, u64)>,
) -> anyhow::Result<()> {
    samples.sort_unstable();
    let (p50, p99, max) = (percentile(samples, 0.5), percentile(samples, 0.99), percentile(samples, 1.0));
    let arrived = samples.len() as u64;
    let missing = args.count.saturating_sub(arrived);
    let publish_rate = args.count as f64 / published_in.as_secs_f64().max(1e-9);
    let bytes_per_message =
        rss.map(|(before, after)| (after.saturating_sub(before) * 1024) as f64 / args.count as f64);
    let human = format!(
        "{arrived}/{} on time window; lateness p50 {p50} ms, p99 {p99} ms, max {max} ms; {missing} missing; \
         published at {publish_rate:.0} msg/s; broker memory {} per message",
        args.count,
        bytes_per_message.map_or("n/a".to_owned(), |b| format!("{b:.0} B")),
    );
    let results = json!({
        "arrived": arrived,
        "missing": missing,
        "lateness_p50_ms": p50,
        "lateness_p99_ms": p99,
        "lateness_max_ms": max,
        "publish_msg_per_s": publish_rate.round(),
        "broker_bytes_per_message": bytes_per_message.map(|b| b.round()),
        "broker_rss_kib": rss.map(|(_, after)| after),
    });
    let params = json!({ "count": args.count, "min_ms": args.min_ms, "max_ms": args.max_ms, "grace_s": args.grace_s, "rate": args.rate });
    report::print(kind.name(), run.label.as_deref(), &run.target(), &human, params, results);
    Ok(())
}

/// Properties of a message published with an `x-delay` of `wait_ms` (semantics §3).
pub fn delayed_by(wait_ms: u64) -> BasicProperties {
    let headers = FieldTable::from_entries([("x-delay", FieldValue::I64(wait_ms as i64))]);
    BasicProperties { headers: Some(headers), ..Default::default() }
}

/// Properties of a message with a per-message TTL (`expiration`) of `ttl_ms`.
pub fn expiring_in(ttl_ms: u64) -> BasicProperties {
    // A u64 in decimal is at most 20 octets: always a valid short string.
    BasicProperties { expiration: short(&ttl_ms.to_string()).ok(), ..Default::default() }
}

/// Waits (polling) until `count` samples are in or `give_up` passes.
pub fn wait_for_samples(samples: &Mutex<Vec<i64>>, count: u64, give_up: Instant) {
    while Instant::now() < give_up && (samples.lock().map(|l| l.len()).unwrap_or(0) as u64) < count {
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The samples gathered so far, taken out of the shared vector.
pub fn take_samples(samples: &Mutex<Vec<i64>>) -> anyhow::Result<Vec<i64>> {
    Ok(std::mem::take(&mut *samples.lock().map_err(|_| anyhow::anyhow!("poisoned"))?))
}

/// A body: the deadline (wall-clock ms) and the message's index, both big-endian.
pub fn deadline_body(deadline_ms: u64, index: u64) -> [u8; BODY_LEN] {
    let mut body = [0u8; BODY_LEN];
    body[..8].copy_from_slice(&deadline_ms.to_be_bytes());
    body[8..].copy_from_slice(&index.to_be_bytes());
    body
}

/// Wall-clock ms since the epoch: the clock deadlines are stamped and read with.
pub fn wall_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}

/// A small deterministic generator, so runs against two brokers draw the same waits.
pub struct Lcg(pub u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        self.0 >> 33
    }

    /// A wait drawn uniformly from `min..=max` (callers check `min <= max`).
    pub fn between(&mut self, min: u64, max: u64) -> u64 {
        min + self.next() % (max - min + 1)
    }
}
